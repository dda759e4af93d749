#!/usr/bin/env bash
# demo.sh - runs the demo (a program that registers every message) without and with
# libmrcache preloaded, and prints both throughputs, the speed-up and the statistics.
# Uses a real RDMA device when the system's libibverbs sees one; otherwise the software
# NIC, with a NIC's registration cost modelled (16 us + 0.06 ns/B, UCX's figures).
# Usage: demo.sh [BUILD_DIR] [MESSAGE_BYTES] [MESSAGES]
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
SIZE=${2:-1048576}
COUNT=${3:-2000}
DEMO=$B/demo/mrc_demo
envs=()
if command -v ibv_devices >/dev/null && [ "$(ibv_devices 2>/dev/null | tail -n +3 | wc -l)" -gt 0 ]; then
    echo "demo: real RDMA device found"
else
    echo "demo: no RDMA device: using the software NIC (registration cost 16 us + 0.06 ns/B)"
    envs=(LD_LIBRARY_PATH="$B/snic" SNIC_REG_COST_NS="${SNIC_REG_COST_NS:-16000,0.06}")
fi
run() { env "${envs[@]}" "$@"; }
rate() { sed -n 's/.*: \([0-9.]*\) messages\/s.*/\1/p'; }
plain=$(run "$DEMO" "$SIZE" "$COUNT")
echo "without libmrcache: $plain"
cached=$(run LD_PRELOAD="$B/libmrcache.so" MRCACHE_STATS=stderr "$DEMO" "$SIZE" "$COUNT" 2>"$B/demo/stats.txt")
echo "with libmrcache:    $cached"
a=$(echo "$plain" | rate); b=$(echo "$cached" | rate)
awk -v a="$a" -v b="$b" 'BEGIN { printf "speed-up: %.1fx\n", b / a }'
cat "$B/demo/stats.txt"
