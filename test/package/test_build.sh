#!/usr/bin/env bash
# test_build.sh BUILD_DIR - the Makefile's conventions: clang builds clean;
# `make CFLAGS=... LDFLAGS=...` keeps -std=gnu11, -D_GNU_SOURCE, -fPIC and the warnings (a
# real build of the library at -O1 in a scratch directory); the output is one short line
# per step, V=1 shows the commands; `make help` names targets that exist;
# scripts/run-tests.sh shows a passing test's stderr only in its log, a failing one's on
# the terminal.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
# A make of its own: not the outer make's jobserver or flags; two jobs at most.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u CFLAGS -u LDFLAGS make -C "$root" --no-print-directory "$@"; }

# 0. clang builds the library and the unit tests clean under -Werror (GCC is the
#    default; the sources are C that both accept).
if command -v clang >/dev/null; then
    mk -j2 BUILD="$tmp/clang" CC=clang SAN= "$tmp/clang/libmrcache.so" "$tmp/clang/test/test_cache" \
        "$tmp/clang/test/test_itree" "$tmp/clang/test/test_monitor" >"$tmp/clang.out" 2>&1
    r=$?
    [ $r -ne 0 ] && grep -E 'error|warning' "$tmp/clang.out" | head -5 >&2
    report make_cc_clang_builds_clean $r
else
    echo "ok - make_cc_clang_builds_clean # SKIP clang is not installed"
fi

# 1. The user's flags are added to the build's, never replace them (the library needs
#    _GNU_SOURCE for mremap's flags, -fPIC to be shared). Their -O level comes last.
b=$tmp/b
mk -j2 BUILD="$b" CFLAGS="-O1 -g" LDFLAGS="-Wl,-O1" >"$tmp/build.out" 2>&1
r=$?
[ $r -eq 0 ] && [ -f "$b/libmrcache.so" ] || { tail -5 "$tmp/build.out" >&2; r=1; }
report make_with_user_cflags_builds $r
line=$(mk -n -B V=1 BUILD="$b" CFLAGS="-O1 -g" LDFLAGS="-Wl,-O1" 2>/dev/null | grep -m1 -- ' -c ')
link=$(mk -n -B V=1 BUILD="$b" CFLAGS="-O1 -g" LDFLAGS="-Wl,-O1" 2>/dev/null | grep -m1 -- '-shared -o ')
r=0
for f in -std=gnu11 -D_GNU_SOURCE -fPIC -Wall -Werror -O1; do
    case " $line " in *" $f "*) ;; *) echo "compile line lacks $f: $line" >&2; r=1 ;; esac
done
case $line in *-O1*-O2*) echo "the default -O2 comes after the user's -O1: $line" >&2; r=1 ;; *-O2*) echo "-O2 despite CFLAGS: $line" >&2; r=1 ;; esac
for f in -Wl,-O1 -Wl,--no-undefined -Wl,-z,now; do
    case " $link " in *" $f "*) ;; *) echo "link line lacks $f: $link" >&2; r=1 ;; esac
done
report make_keeps_required_flags_with_user_flags $r
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL CFLAGS="-O0" make -C "$root" --no-print-directory -n -B V=1 BUILD="$b" 2>/dev/null | grep -m1 -- ' -c ' | grep -q -- '-D_GNU_SOURCE.* -O0'
report make_keeps_required_flags_with_cflags_in_environment $?

# 2. Quiet: every line of the build above is "  TAG     target"; V=1 prints the command.
r=0
bad=$(grep -v -E '^  [A-Z]+ +[^ ]+' "$tmp/build.out" | head -3)
[ -z "$bad" ] || { echo "not a short line: $bad" >&2; r=1; }
grep -q -E '^  CC +.*\.o$' "$tmp/build.out" && grep -q -E '^  LD +.*libmrcache\.so$' "$tmp/build.out" || r=1
report make_quiet_by_default $r
rm -f "$b/libmrcache.so"
mk V=1 BUILD="$b" CFLAGS="-O1 -g" >"$tmp/v1.out" 2>&1
grep -q -- '-shared -o .*libmrcache\.so' "$tmp/v1.out"
r=$?
grep -q -E '^  LD ' "$tmp/v1.out" && r=1
report make_v1_prints_commands $r

# 3. make help names every target a user can run, each rule of the Makefile and of
#    test/*/*.mk (a line of its own, or a name in a comma-separated list), and each one
#    exists. tsan-run is what tsan runs in build-tsan/; alone it would not be under TSan.
mk help >"$tmp/help" 2>&1
r=$?
targets=$(cd "$root" && grep -ho '^[a-z][a-z-]*:' Makefile test/*/*.mk | tr -d : | sort -u | grep -vx -e tsan-run -e help)
[ "$(echo "$targets" | wc -w)" -ge 20 ] || { echo "found only these targets: $targets" >&2; r=1; }
for t in $targets; do
    grep -qE "^  ([a-z-]+, )*$t(,| |\$)" "$tmp/help" || { echo "make help lacks $t" >&2; r=1; }
    mk -n BUILD="$b" "$t" >/dev/null 2>&1 || [ $? -ne 2 ] || { echo "no rule for $t" >&2; r=1; }
done
report make_help_lists_targets $r

# 4. The test runner: a passing test's stderr stays in its log; a failing one's is shown;
# the end names each failure and counts the skips by reason.
# (The words are printed in two pieces: the runner echoes each command line itself.)
"$root/scripts/run-tests.sh" -l "$tmp/logs" -- "echo 'ok - quiet_one'; printf 'expected-%s\n' noise >&2" \
    "echo 'not ok - loud_one'; printf 'failure-%s\n' detail >&2" >"$tmp/runner.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "^  1 ok  echo 'ok - quiet_one'" "$tmp/runner.out" && ! grep -q expected-noise "$tmp/runner.out" &&
    grep -q failure-detail "$tmp/runner.out" && grep -q expected-noise "$tmp/logs/001.log" &&
    [ "$(tail -1 "$tmp/runner.out")" = "1 passed, 1 failed" ] &&
    [ "$(grep -A1 '^# failed:$' "$tmp/runner.out" | tail -1)" = "#   loud_one ('echo 'not ok - loud_one'; printf 'failure-%s\n' detail >&2', $tmp/logs/002.log)" ]
r=$?
[ $r -eq 0 ] || cat "$tmp/runner.out" >&2
report runner_keeps_passing_stderr_in_log $r
"$root/scripts/run-tests.sh" -v -- "echo 'ok - one'; printf 'shown-%s\n' noise >&2" >"$tmp/runner.v" 2>&1
grep -q shown-noise "$tmp/runner.v"
report runner_verbose_shows_everything $?
"$root/scripts/run-tests.sh" -l "$tmp/logs2" -- "echo 'ok - before_crash'; printf 'crash-%s\n' detail >&2; exit 3" >"$tmp/runner.c" 2>&1
[ $? -ne 0 ] && grep -q crash-detail "$tmp/runner.c" && grep -q "exited with status 3" "$tmp/runner.c"
report runner_shows_output_of_a_crash $?
"$root/scripts/run-tests.sh" -- "echo 'ok - a # SKIP no x'; echo 'ok - b # SKIP no x'" "echo 'ok - c # SKIP no y'" \
    >"$tmp/runner.s" 2>&1
[ "$(grep -A2 '^# skipped, by reason:$' "$tmp/runner.s" | tail -2 | tr '\n' '|')" = "#   2 x no x|#   1 x no y|" ] &&
    [ "$(tail -1 "$tmp/runner.s")" = "0 passed, 0 failed, 3 skipped" ]
report runner_counts_skips_by_reason $?
"$root/scripts/run-tests.sh" -- "echo 'nothing-%s'; exit 0" "echo 'ok - d'" >"$tmp/runner.n" 2>&1
[ $? -ne 0 ] && grep -q "^not ok - 'echo 'nothing-%s'; exit 0' printed no result line$" "$tmp/runner.n" &&
    grep -q 'nothing-%s' "$tmp/runner.n" && [ "$(tail -1 "$tmp/runner.n")" = "1 passed, 1 failed" ]
r=$?
[ $r -eq 0 ] || cat "$tmp/runner.n" >&2
report runner_fails_a_command_with_no_result $r
exit 0
