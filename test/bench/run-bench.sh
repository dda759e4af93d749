#!/usr/bin/env bash
# run-bench.sh - runs the benchmark workloads in alternated processes, each system in its
# own: (a) bench_verbs alone, (b) bench_verbs with libmrcache preloaded, (c) bench_ucx
# (libucs never shares a process with libmrcache). Collects "system key value" lines in
# BUILD/bench/raw.txt; bench_report prints the table and writes results.json and .md.
# Usage: [BENCH_LIB=path/libmrcache.so] [BENCH_ONLY="pieces fresh"] run-bench.sh [BUILD [REPS]]
# (REPS: processes per system, default 3; BENCH_ONLY: run only these workloads, the other
# rows show "-")
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-${BENCH_REPS:-3}}
B=$BUILD/bench
# The library under test, copied once: others may rebuild $BUILD/libmrcache.so while
# this runs, and every process must preload the same one. BENCH_LIB picks another build.
SRC_LIB=${BENCH_LIB:-$BUILD/libmrcache.so}
LIB=$(cd "$B" && pwd)/libmrcache.so
cp -f "$SRC_LIB" "$LIB"
# The commit the tree is at (with -dirty for uncommitted changes), when it is a checkout.
commit=$(git -C "$(dirname "$0")" describe --always --dirty 2>/dev/null || echo "not a git checkout")
lib_id="$SRC_LIB, $(date -r "$SRC_LIB" '+%F %T'), sha256 $(sha256sum "$LIB" | cut -c1-12), commit $commit"
raw=$B/raw.txt
: >"$raw"
unset LD_PRELOAD
export LD_LIBRARY_PATH=$BUILD/snic${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# UCX as a library: no code patching, no malloc hooks; the benchmark feeds it unmaps.
UCX_ENV=(UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n UCX_MEM_MALLOC_RELOC=n)
# Room for the million-entry workload, and no statistics report on stderr. The slots are
# MAP_SHARED memfd windows (set-up speed, see bench.c): cached as private memory would be.
MRC_ENV=(LD_PRELOAD="$LIB" MRCACHE_MAX_ENTRIES=2M MRCACHE_MAX_BYTES=16G MRCACHE_STATS=off MRCACHE_SHARED=cache)

# At high priority where allowed: on a shared machine, other work then takes less of
# the CPU from the measuring threads (whose CPU time is what the workloads report).
NICE=()
[ "$(id -u)" -ne 0 ] || NICE=(nice -n -19)

run() { # SYSTEM WORKLOAD [VAR=value...]
    local sys=$1 w=$2 out
    shift 2
    local -a cmd
    case $sys in
    nocache) cmd=(env "$@" "$B/bench_verbs" nocache "$w") ;;
    mrcache) cmd=(env "${MRC_ENV[@]}" "$@" "$B/bench_verbs" mrcache "$w") ;;
    # libmrcache with allocation-sized registrations: its keys end in _x (bench.c).
    mrcache-x) cmd=(env "${MRC_ENV[@]}" MRCACHE_EXPAND=8M "$@" "$B/bench_verbs" mrcache "$w") ;;
    ucx) cmd=(env "${UCX_ENV[@]}" "$@" "$B/bench_ucx" ucx "$w") ;;
    esac
    out=$("${NICE[@]}" "${cmd[@]}") || { echo "run-bench.sh: '$sys $w' failed" >&2; exit 1; }
    [ -z "$out" ] || printf '%s\n' "$out" | sed "s/^/${sys%-x} /" >>"$raw"
}

# WORKLOAD REPS "SYSTEMS" [VAR=value...]: the systems in turn, the order reversed on
# every other repetition, so that drift in the machine hits each system alike.
alt() {
    local w=$1 reps=$2 systems=$3 rep s
    shift 3
    [ -z "${BENCH_ONLY:-}" ] || [[ " $BENCH_ONLY " == *" $w "* ]] || return 0
    for ((rep = 1; rep <= reps; rep++)); do
        local order=$systems
        ((rep % 2)) || order=$(printf '%s\n' $systems | tac | tr '\n' ' ')
        printf 'bench: %-10s %d/%d\n' "$w" "$rep" "$reps" >&2
        for s in $order; do run "$s" "$w" "$@"; done
    done
}

# Row 10: one large registration per process, SIZES (MiB, at most 2 GiB: the machine is
# shared) populated by the program first or cold; without a cache (4 KiB pages) and
# under each libmrcache variant, the variants' order reversed on every other repetition.
BIG_SIZES=${BENCH_BIG_SIZES:-64 512 2048}
BIG_VARIANTS=(
    "default"
    "pop2 MRCACHE_POPULATE=64M MRCACHE_POPULATE_THREADS=2"
    "pop4 MRCACHE_POPULATE=64M MRCACHE_POPULATE_THREADS=4"
    "advise MRCACHE_HUGEPAGES=advise"
    "advpop MRCACHE_HUGEPAGES=advise MRCACHE_POPULATE=64M MRCACHE_POPULATE_THREADS=2"
    "collapse MRCACHE_HUGEPAGES=collapse"
)
alt_big() { # REPS
    local rep size state i j name rest n=${#BIG_VARIANTS[@]}
    for ((rep = 1; rep <= $1; rep++)); do
        for size in $BIG_SIZES; do
            for state in warm cold; do
                printf 'bench: %-10s %d/%d\n' "big$size-$state" "$rep" "$1" >&2
                run nocache regbig BENCH_BIG_MIB="$size" BENCH_BIG_STATE="$state"
                for ((i = 0; i < n; i++)); do
                    j=$((rep % 2 ? i : n - 1 - i))
                    read -r name rest <<<"${BIG_VARIANTS[j]}"
                    # shellcheck disable=SC2086 # rest: the variant's VAR=value words
                    run mrcache regbig BENCH_BIG_MIB="$size" BENCH_BIG_STATE="$state" BENCH_VARIANT="$name" $rest
                done
            done
        done
    done
}

load_start=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s)
alt hit "$REPS" "nocache mrcache ucx"
alt threads "$REPS" "nocache mrcache ucx"
alt msg1m "$REPS" "nocache mrcache ucx" SNIC_REG_COST_NS=16000,0.06
alt msg16m "$REPS" "nocache mrcache ucx" SNIC_REG_COST_NS=16000,0.06
# Row 4 judges an effect of 1-2% where processes of one program spread over +-7% (16
# alternated processes each: 17.7-20.4 ns per malloc-heavy operation without a preload),
# and rows 5 and 6 are differences of two timings in one process, and a process here
# runs in a fast or a slow mode (the NIC's own cost moves by a third between them):
# these short workloads get four times the processes, so that their medians hold still
# (unmap twice: each of its processes times four times the rounds).
alt tax-malloc $((REPS * 4)) "nocache mrcache"
alt tax-munmap $((REPS * 4)) "nocache mrcache"
alt unmap $((REPS * 2)) "nocache mrcache ucx"
alt miss $((REPS * 4)) "mrcache ucx"
alt miss-scattered $((REPS * 4)) "mrcache ucx"
alt memory "$REPS" "nocache mrcache ucx"
# End to end: the program registering every message, and itself registering once.
for kib in 4 64 1024 16384 262144; do
    alt "e2e-$kib" "$REPS" "nocache mrcache ucx" SNIC_REG_COST_NS=16000,0.06
done
alt pieces "$REPS" "nocache mrcache mrcache-x ucx" SNIC_REG_COST_NS=16000,0.06
alt fresh "$REPS" "nocache mrcache mrcache-x ucx" SNIC_REG_COST_NS=16000,0.06
alt_big "$REPS"
load_end=$(cut -d' ' -f1 /proc/loadavg)

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
glibc=$(getconf GNU_LIBC_VERSION | cut -d' ' -f2)
ucx=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null || echo unknown)
machine="$cpu, $(nproc) cores, $mem RAM, Linux $(uname -r), glibc $glibc, UCX $ucx;"
machine+=" libmrcache $lib_id; $REPS processes per system, $(($(date +%s) - t0)) s; load average $load_start at start, $load_end at end"
machine=${machine//\"/}
"$B/bench_report" "$raw" "$B/results.json" "$B/results.md" "$machine"
echo "bench: wrote $B/results.json and $B/results.md"
