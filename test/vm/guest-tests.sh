#!/bin/sh
# guest-tests.sh - the tests run inside the Soft-RoCE VM (busybox sh, root, no network):
# creates rxe0, then runs the stale-MR program, perftest, ibv_rc_pingpong, UCX and the
# registration-cost table, with and without LD_PRELOAD=/vm/lib/libmrcache.so. Prints
# "ok - name" / "not ok - name" (counted on the host) and "# " diagnostics.
# No `set -e`: one failed test must not hide the others; -u and pipefail catch mistakes.
set -uo pipefail

PRE=/vm/lib/libmrcache.so
BIN=/vm/bin
OUT=/tmp/out
STATS=/tmp/stats
DEV=rxe0
mkdir -p "$OUT" "$STATS"

# Test groups, from the kernel command line (vm-run.sh -T): vmtests=all or a comma list.
tests=$(sed -n 's/.*vmtests=\([^ ]*\).*/\1/p' /proc/cmdline)
tests=${tests:-all}
want() {
    [ "$tests" = all ] && return 0
    case ",$tests," in *",$1,"*) return 0 ;; esac
    return 1
}

ok() { echo "ok - $1"; }
notok() {
    echo "not ok - $1"
    shift
    [ $# -gt 0 ] && echo "# $*"
    return 0
}
# Program output shown as diagnostics, never as result lines.
diag() { sed 's/^/# /' "$@"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# Waits until something listens on TCP port $1 (up to $2 s): perftest's and UCX's clients
# fail at once when the server is not listening yet.
wait_listen() {
    hex=$(printf '%04X' "$1")
    n=0
    while [ "$n" -lt $(($2 * 10)) ]; do
        grep -qE ":$hex [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
        sleep 0.1
        n=$((n + 1))
    done
    return 1
}

# ------------------------------------------------------------------ setup
setup_rxe() {
    for m in $(cat /etc/vm-modules); do
        insmod "$m" || { notok vm_rxe_setup "insmod $m failed"; return 1; }
    done
    ip link set lo up &&
        ip link add d0 type dummy && ip link set d0 up &&
        # rdma_cm (UCX's rdmacm transport) resolves through an IP address on the netdev.
        ip addr add 10.11.0.1/24 dev d0 &&
        rdma link add rxe0 type rxe netdev d0 ||
        { notok vm_rxe_setup "network or rdma link setup failed"; return 1; }
    n=0
    while [ "$n" -lt 50 ]; do
        ibv_devinfo -d "$DEV" 2>/dev/null | grep -q 'state:.*PORT_ACTIVE' && break
        sleep 0.1
        n=$((n + 1))
    done
    ibv_devinfo -d "$DEV" >"$OUT/devinfo" 2>&1
    if grep -q 'state:.*PORT_ACTIVE' "$OUT/devinfo"; then
        ok vm_rxe_setup
        grep -E 'hca_id|fw_ver|state|active_mtu|link_layer' "$OUT/devinfo" | diag
        rdma link show | diag
    else
        diag "$OUT/devinfo"
        notok vm_rxe_setup "$DEV port not ACTIVE"
        return 1
    fi
}

echo "# guest tests: $tests (uptime $(uptime_s) s)"
setup_rxe || { echo "# no rxe0: nothing else can run"; exit 1; }

echo "# guest tests finished (uptime $(uptime_s) s)"
