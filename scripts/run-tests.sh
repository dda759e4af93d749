#!/usr/bin/env bash
# Runs test programs and counts their "ok - name" / "not ok - name" lines.
# Usage: run-tests.sh [-v] [-l LOGDIR] [-e VAR=VALUE]... -- CMD [CMD ...]; each CMD is a
# shell command. Each command's whole output (stdout and stderr) goes to LOGDIR/NNN.log;
# the terminal gets one line per passing command (its counts), and all of a failing
# command's output (so the error output a passing test expects stays in the log). -v
# prints everything. A command that exits non-zero without a "not ok" line counts as one
# failure (a crash is a failure, never silence), and so does one that prints no result
# line at all (a test that ran nothing proves nothing). "not ok - name # TODO why" is a known
# failure: counted as todo, not failed; an "ok" line with a TODO is listed (its failure
# is gone). Ends with the skips counted by reason, the failed tests with the command and
# log of each, and "N passed, N failed[, N skipped][, N todo]".
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
pass=0 fail=0 skip=0 todo=0 n=0 fixed=() failed=()
skips=$logdir/skips
: >"$skips"
for cmd in "$@"; do
    n=$((n + 1))
    log=$logdir/$(printf '%03d' $n).log
    [ $verbose -eq 1 ] && echo "== $cmd"
    { echo "== $cmd"; env "${envs[@]}" bash -c "$cmd" 2>&1; } >"$log"
    rc=$?
    p=$(grep -c '^ok - ' "$log" | tr -d ' '); s=$(grep -c '^ok - .*# SKIP' "$log" | tr -d ' ')
    t=$(grep -c '^not ok - .*# TODO' "$log" | tr -d ' ')
    f=$(($(grep -c '^not ok - ' "$log" | tr -d ' ') - t))
    pass=$((pass + p - s)); skip=$((skip + s)); fail=$((fail + f)); todo=$((todo + t))
    while IFS= read -r l; do fixed+=("$l"); done < <(grep '^ok - .*# TODO' "$log" | sed 's/^ok - \([^ :]*\).*/\1/')
    sed -n 's/^ok - .*# SKIP //p' "$log" >>"$skips"
    while IFS= read -r l; do failed+=("$l ('$cmd', $log)"); done < <(grep '^not ok - ' "$log" | grep -v '# TODO' |
        sed 's/^not ok - //')
    none=0
    [ "$rc" -eq 0 ] && [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$t" -eq 0 ] && none=1
    if [ $verbose -eq 1 ]; then
        tail -n +2 "$log"
    elif [ "$rc" -ne 0 ] || [ "$f" -gt 0 ] || [ $none -eq 1 ]; then
        echo "== $cmd"
        echo "# failed: the whole output of '$cmd' ($log):"
        tail -n +2 "$log"
    else
        printf '%3d ok%s%s  %s\n' $((p - s)) "$([ "$s" -gt 0 ] && echo ", $s skipped")" \
            "$([ "$t" -gt 0 ] && echo ", $t todo")" "$cmd"
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - '$cmd' exited with status $rc"
        failed+=("'$cmd' exited with status $rc ($log)")
        fail=$((fail + 1))
    elif [ $none -eq 1 ]; then
        echo "not ok - '$cmd' printed no result line"
        failed+=("'$cmd' printed no result line ($log)")
        fail=$((fail + 1))
    fi
done
if [ -s "$skips" ]; then
    echo "# skipped, by reason:"
    sort "$skips" | uniq -c | sort -rn | sed 's/^ *\([0-9]*\) /#   \1 x /'
fi
rm -f "$skips"
if [ ${#failed[@]} -gt 0 ]; then
    echo "# failed:"
    printf '#   %s\n' "${failed[@]}"
fi
[ ${#fixed[@]} -gt 0 ] && echo "# TODO tests that passed (their known failure is gone): ${fixed[*]}"
[ $verbose -eq 1 ] || [ $keep -eq 0 ] || echo "# every test's output: $logdir/"
summary="$pass passed, $fail failed"
[ "$skip" -gt 0 ] && summary="$summary, $skip skipped"
[ "$todo" -gt 0 ] && summary="$summary, $todo todo"
echo "$summary"
[ "$fail" -eq 0 ]
