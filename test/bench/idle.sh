#!/usr/bin/env bash
# idle.sh LIB - what a process that never loads libibverbs pays for LD_PRELOAD=LIB (a job
# script exports it to every shell and tool): the system calls of `env /bin/true` with
# and without it (strace -f -c), and a script of 300 /bin/true run with LD_PRELOAD
# exported against without, and against an empty preloaded library (the floor: the
# loader's mapping of one more object), alternated, 5 runs each, the median ratio.
# Reported, never asserted.
set -u
lib=$1
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
printf 'void mrc_bench_empty(void) {}\n' >"$tmp/e.c"
cc -shared -fPIC -O2 "$tmp/e.c" -o "$tmp/empty.so" || exit 1
printf 'i=0\nwhile [ $i -lt 300 ]; do /bin/true; i=$((i + 1)); done\n' >"$tmp/s300.sh"
if command -v strace >/dev/null; then
    calls() { strace -f -c -o "$tmp/st" "$@" >/dev/null 2>&1; awk '$NF == "total" {print $(NF-2)}' "$tmp/st" | tail -1; }
    echo "system calls of env /bin/true: $(calls env /bin/true) without, $(calls env LD_PRELOAD="$tmp/empty.so" /bin/true)" \
        "with an empty library, $(calls env LD_PRELOAD="$lib" /bin/true) with $lib"
else
    echo "system calls: strace is not installed (scripts/install-deps.sh --bench)"
fi
now() { date +%s%N; }
run() { local t0; t0=$(now); env "$@" sh "$tmp/s300.sh"; echo $(($(now) - t0)); }
for i in 1 2 3 4 5; do
    echo "$(run LD_PRELOAD=) $(run LD_PRELOAD="$tmp/empty.so") $(run LD_PRELOAD="$lib")"
done >"$tmp/times"
awk '{ e[NR] = $2 / $1; l[NR] = $3 / $1 }
     function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                       return a[int((n + 1) / 2)] }
     END { printf "300 /bin/true with LD_PRELOAD exported, against without (median of %d alternated runs): %.2fx an empty library, %.2fx libmrcache\n", NR, median(e, NR), median(l, NR) }' "$tmp/times"
