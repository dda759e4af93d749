#!/usr/bin/env bash
# ladder.sh - where row 6's miss overhead goes: builds libmrcache at each level of
# test/bench/ladder.patch (each takes more off the miss path, down to no cache core at
# all) in a scratch git worktree, and runs the miss workload through every level and
# UCX's rcache in alternated processes. Prints each one's median overhead and its ratio
# to UCX's from the same run. The levels above 0 are not correct caches (3 and up are
# not even thread-safe): they bound what any miss path of this shape can reach.
# Usage: [LADDER_REPS=n] [LADDER_WORKLOAD=miss|miss-scattered] test/bench/ladder.sh [BUILD]
#        (or make bench-ladder; n: 40)
#        test/bench/ladder.sh --check   (part of make test: the patch still applies)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ "${1:-}" = --check ]; then
    # The patch must follow cache.c, cache_reg.c and mr.c: a change there that breaks it
    # fails here.
    # git apply works in a plain copy of the tree too; it needs only the git program.
    if ! command -v git >/dev/null; then
        echo "ok - ladder_patch_applies # SKIP git not installed (scripts/install-deps.sh installs it)"
    elif (cd "$ROOT" && git apply --check test/bench/ladder.patch 2>/dev/null); then
        echo "ok - ladder_patch_applies"
    else
        echo "not ok - ladder_patch_applies (refresh test/bench/ladder.patch)"
    fi
    exit 0
fi
BUILD=${1:-build}
REPS=${LADDER_REPS:-40}
W=${LADDER_WORKLOAD:-miss}
case $W in
miss) KEY=miss_over ;;
miss-scattered) KEY=miss_sc_over ;;
*) echo "ladder.sh: LADDER_WORKLOAD is miss or miss-scattered" >&2; exit 2 ;;
esac
B=$BUILD/bench
for f in "$B/bench_verbs" "$B/bench_ucx"; do
    [ -x "$f" ] || { echo "ladder.sh: $f missing: run make bench-ladder" >&2; exit 1; }
done
git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || { echo "ladder.sh: needs a git checkout" >&2; exit 1; }
WT=$(mktemp -d /tmp/mrc-ladder.XXXXXX)
cleanup() { git -C "$ROOT" worktree remove --force "$WT" 2>/dev/null || rm -rf "$WT"; }
trap cleanup EXIT
git -C "$ROOT" worktree add --detach "$WT" HEAD >/dev/null 2>&1
# The patch applies to the committed sources; uncommitted changes are not measured.
git -C "$WT" apply "$ROOT/test/bench/ladder.patch" ||
    { echo "ladder.sh: ladder.patch does not apply to HEAD: refresh it" >&2; exit 1; }
names=("0 as shipped" "1 no NIC timing" "2 and no lookup, merge or insertion"
       "3 and no locks, no miss announcement" "4 and no hint" "5 no cache core: NIC MR in a handle")
for n in 0 1 2 3 4 5; do
    echo "ladder: building level $n" >&2
    # Levels drop calls, so some functions go unused there.
    make -s -C "$WT" BUILD="$WT/b$n" CC="${CC:-cc} -DMRC_LADDER=$n -Wno-unused-function" "$WT/b$n/libmrcache.so" >/dev/null
done
export LD_LIBRARY_PATH=$BUILD/snic${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset LD_PRELOAD
out=$WT/out
mkdir -p "$out"
NICE=()
[ "$(id -u)" -ne 0 ] || NICE=(nice -n -19)
systems=(ucx 0 1 2 3 4 5)
for ((i = 0; i < REPS; i++)); do
    ((i % 10)) || echo "ladder: round $((i + 1))/$REPS" >&2
    for ((j = 0; j < ${#systems[@]}; j++)); do
        s=${systems[$(((i + j) % ${#systems[@]}))]}   # the order rotates every round
        if [ "$s" = ucx ]; then
            env UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n UCX_MEM_MALLOC_RELOC=n \
                "${NICE[@]}" "$B/bench_ucx" ucx "$W"
        else
            env LD_PRELOAD="$WT/b$s/libmrcache.so" MRCACHE_STATS=off MRCACHE_SHARED=cache "${NICE[@]}" "$B/bench_verbs" mrcache "$W"
        fi | awk -v k="$KEY" '$1 == k {print $2}' >>"$out/$s"
    done
done
median() { sort -g "$1" | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ucx=$(median "$out/ucx")
printf '%-40s %9s %9s\n' "$W overhead, $REPS processes each" "ns" "x UCX"
printf '%-40s %9.1f %9s\n' "UCX rcache" "$ucx" "1.000"
for n in 0 1 2 3 4 5; do
    m=$(median "$out/$n")
    printf '%-40s %9.1f %9.3f\n' "${names[$n]}" "$m" "$(awk -v a="$m" -v b="$ucx" 'BEGIN {print a / b}')"
done
