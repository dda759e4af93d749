#!/usr/bin/env bash
# test_rereg_table.sh - ibv_rereg_mr under libmrcache must do what libibverbs does: runs
# rereg_table.c without the preload (the reference) and with it and compares each case's
# fields. Drivers may change an MR's keys at any rereg, so "keys" is not compared, and a
# peer's old rkey may stop working but never keep working where the reference denies it.
# Usage: test_rereg_table.sh BUILD_DIR [PRELOAD_PREFIX] [VAR=VALUE...]   ("ok - " lines)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
shift 2 2>/dev/null || shift $#
BIN=$B/test/never_rereg_table
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

env LD_LIBRARY_PATH="$B/snic" timeout -s KILL 120 "$BIN" >"$tmp/ref" 2>"$tmp/ref.err"
rr=$?
env LD_LIBRARY_PATH="$B/snic" LD_PRELOAD="$PP$B/libmrcache.so" MRCACHE_STATS=off "$@" \
    timeout -s KILL 120 "$BIN" >"$tmp/pre" 2>"$tmp/pre.err"
rp=$?
if [ $rr -ne 0 ] || [ $rp -ne 0 ] || ! grep -q '^case ' "$tmp/ref"; then
    echo "not ok - rereg_table_ran (status $rr without libmrcache, $rp with it)"
    cat "$tmp/ref.err" "$tmp/pre.err" >&2
    exit 0
fi

# One "ok"/"not ok" per case of the reference; a case missing under the preload fails.
awk '
function fields(line, arr,   n, i, kv, parts) {
    delete arr
    sub(/^case [^:]*: /, "", line)
    n = split(line, parts, " ")
    for (i = 1; i <= n; i++) { split(parts[i], kv, "="); arr[kv[1]] = kv[2] }
}
FNR == NR { name = $2; sub(/:$/, "", name); pre[name] = $0; next }
{
    name = $2; sub(/:$/, "", name)
    if (!(name in pre)) { printf "not ok - rereg_%s_as_libibverbs\n  missing with libmrcache\n", name; next }
    fields($0, want); fields(pre[name], got)
    bad = ""
    for (k in want) {
        if (k == "keys") continue
        if (k == "old_rkey" && want[k] == "allowed" && got[k] == "denied") continue
        if (!(k in got) || got[k] != want[k])
            bad = bad sprintf("  %s: %s with libmrcache, %s without\n", k, (k in got) ? got[k] : "(absent)", want[k])
    }
    for (k in got)
        if (k != "keys" && !(k in want))
            bad = bad sprintf("  %s: %s with libmrcache, absent without\n", k, got[k])
    if (bad == "") printf "ok - rereg_%s_as_libibverbs\n", name
    else printf "not ok - rereg_%s_as_libibverbs\n%s", name, bad
}' "$tmp/pre" "$tmp/ref"
exit 0
