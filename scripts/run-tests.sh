#!/usr/bin/env bash
# Runs test programs and counts their "ok - name" / "not ok - name" lines.
# Usage: run-tests.sh [-v] [-l LOGDIR] [-e VAR=VALUE]... -- CMD [CMD ...]; each CMD is a
# shell command. Each command's whole output (stdout and stderr) goes to LOGDIR/NNN.log;
# the terminal gets its "ok"/"not ok" lines, and all of its output only when it failed
# (so the error output a passing test expects stays in the log). -v prints everything.
# A command that exits non-zero without a "not ok" line counts as one failure (a crash
# is a failure, never silence). "not ok - name # TODO why" is a known failure: counted
# as todo, not failed; an "ok" line with a TODO is listed (its failure is gone). Ends
# with "N passed, N failed[, N skipped][, N todo]".
set -u
envs=() logdir='' verbose=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case $1 in
    -e) envs+=("$2"); shift 2 ;;
    -l) logdir=$2; shift 2 ;;
    -v) verbose=1; shift ;;
    *) echo "run-tests.sh: bad argument $1" >&2; exit 2 ;;
    esac
done
shift
keep=1
if [ -z "$logdir" ]; then
    keep=0 logdir=$(mktemp -d); trap 'rm -rf "$logdir"' EXIT
else
    mkdir -p "$logdir" && rm -f "$logdir"/[0-9]*.log
fi
pass=0 fail=0 skip=0 todo=0 n=0 fixed=()
for cmd in "$@"; do
    n=$((n + 1))
    log=$logdir/$(printf '%03d' $n).log
    echo "== $cmd"
    { echo "== $cmd"; env "${envs[@]}" bash -c "$cmd" 2>&1; } >"$log"
    rc=$?
    p=$(grep -c '^ok - ' "$log" | tr -d ' '); s=$(grep -c '^ok - .*# SKIP' "$log" | tr -d ' ')
    t=$(grep -c '^not ok - .*# TODO' "$log" | tr -d ' ')
    f=$(($(grep -c '^not ok - ' "$log" | tr -d ' ') - t))
    pass=$((pass + p - s)); skip=$((skip + s)); fail=$((fail + f)); todo=$((todo + t))
    while IFS= read -r l; do fixed+=("$l"); done < <(grep '^ok - .*# TODO' "$log" | sed 's/^ok - \([^ :]*\).*/\1/')
    if [ $verbose -eq 1 ]; then
        tail -n +2 "$log"
    elif [ "$rc" -ne 0 ] || [ "$f" -gt 0 ]; then
        echo "# failed: the whole output of '$cmd' ($log):"
        tail -n +2 "$log"
    else
        grep -E '^(not )?ok - ' "$log"
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - '$cmd' exited with status $rc"
        fail=$((fail + 1))
    fi
done
[ ${#fixed[@]} -gt 0 ] && echo "# TODO tests that passed (their known failure is gone): ${fixed[*]}"
[ $verbose -eq 1 ] || [ $keep -eq 0 ] || echo "# every test's output: $logdir/"
summary="$pass passed, $fail failed"
[ "$skip" -gt 0 ] && summary="$summary, $skip skipped"
[ "$todo" -gt 0 ] && summary="$summary, $todo todo"
echo "$summary"
[ "$fail" -eq 0 ]
