#!/usr/bin/env bash
# demo.sh - runs the demo (a program that registers every message) without and with
# libmrcache preloaded, and prints both throughputs, the speed-up and the statistics.
# Uses a real RDMA device when the system's libibverbs sees one; otherwise the software
# NIC, with a NIC's registration cost modelled (16 us + 0.06 ns/B, UCX's figures).
# Usage: demo.sh [BUILD_DIR] [MESSAGE_BYTES] [MESSAGES] (a number first is MESSAGE_BYTES)
set -euo pipefail
usage() {
    cat <<'EOF'
usage: scripts/demo.sh [BUILD_DIR] [MESSAGE_BYTES] [MESSAGES]

Runs BUILD_DIR/demo/mrc_demo (built by `make demo`), a verbs program that
registers and deregisters the buffer of every message it writes (8 buffers in
turn): 3 rounds without and 3 with BUILD_DIR/libmrcache.so preloaded,
alternated. It uses a real RDMA device if libibverbs finds one, else the
software NIC in BUILD_DIR/snic, which checks every message it reads from the
pinned pages, with a NIC's registration cost modelled (16 us + 0.06 ns/B;
SNIC_REG_COST_NS=NS,NS_PER_BYTE sets another).

  BUILD_DIR      build tree (default build; a number first is MESSAGE_BYTES)
  MESSAGE_BYTES  bytes per message (default 65536)
  MESSAGES       messages per round (default 20000)

Prints which NIC it uses, each round's messages per second, the medians, the
speed-up (median with / median without) and libmrcache's statistics of the last
round (kept in BUILD_DIR/demo/stats.txt).
EOF
}
case ${1:-} in
-h | --help) usage; exit 0 ;;
[0-9]*) set -- build "$@" ;;
esac
B=$(cd "${1:-build}" && pwd)
SIZE=${2:-65536}
COUNT=${3:-20000}
case $SIZE$COUNT in
*[!0-9]*) echo "usage: scripts/demo.sh [BUILD_DIR] [MESSAGE_BYTES] [MESSAGES]" >&2; exit 2 ;;
esac
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
# Three rounds, alternated, so that a busy machine slows both sides alike; the median of
# each side is reported, and the ratio of medians.
plain_rates=() cached_rates=()
for round in 1 2 3; do
    plain=$(run "$DEMO" "$SIZE" "$COUNT")
    cached=$(run LD_PRELOAD="$B/libmrcache.so" MRCACHE_STATS=stderr "$DEMO" "$SIZE" "$COUNT" 2>"$B/demo/stats.txt")
    plain_rates+=("$(echo "$plain" | rate)")
    cached_rates+=("$(echo "$cached" | rate)")
done
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
a=$(median "${plain_rates[@]}")
b=$(median "${cached_rates[@]}")
echo "without libmrcache: ${plain_rates[*]} messages/s in 3 rounds"
echo "with libmrcache:    ${cached_rates[*]} messages/s, alternated with those"
echo "medians: ${a} messages/s without, ${b} with (the last round's output: ${cached#*: })"
awk -v a="$a" -v b="$b" 'BEGIN { printf "speed-up: %.1fx\n", b / a }'
cat "$B/demo/stats.txt"
