#!/usr/bin/env bash
# Runs test programs and counts their "ok - name" / "not ok - name" lines.
# Usage: run-tests.sh [-e VAR=VALUE]... -- CMD [CMD ...]; each CMD is a shell command.
# A command that exits non-zero without a "not ok" line counts as one failure (a crash
# is a failure, never silence). Ends with "N passed, N failed[, N skipped]".
set -u
envs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    [ "$1" = "-e" ] && { envs+=("$2"); shift 2; continue; }
    echo "run-tests.sh: bad argument $1" >&2; exit 2
done
shift
pass=0 fail=0 skip=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
for cmd in "$@"; do
    echo "== $cmd"
    env "${envs[@]}" bash -c "$cmd" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(grep -c '^ok - ' "$log" | tr -d ' '); s=$(grep -c '^ok - .*# SKIP' "$log" | tr -d ' ')
    f=$(grep -c '^not ok - ' "$log" | tr -d ' ')
    pass=$((pass + p - s)); skip=$((skip + s)); fail=$((fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - '$cmd' exited with status $rc"
        fail=$((fail + 1))
    fi
done
if [ "$skip" -gt 0 ]; then
    echo "$pass passed, $fail failed, $skip skipped"
else
    echo "$pass passed, $fail failed"
fi
[ "$fail" -eq 0 ]
