#!/usr/bin/env bash
# test_mrcache.sh BUILD_DIR [PRELOAD_PREFIX] - scripts/mrcache as users run it: each option
# sets its variable; an existing LD_PRELOAD is kept (sanitizer runtimes first, libmrcache
# next, a second libmrcache dropped); the program replaces mrcache (same pid, its status,
# its signal); its own errors exit 125 (as env's), a missing program 127, an unrunnable one
# 126; "--" ends the options; --help fits 80 columns; --config lists the library's every
# variable; --version; all under dash as well as bash.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd)
PP=${2:-}
LIB=$B/libmrcache.so
# The source tree's mrcache finds build/libmrcache.so by itself; another build directory
# (a sanitizer build) is named with --lib.
M=$root/scripts/mrcache
[ "$B" = "$root/build" ] || M="$M --lib $LIB"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
unset LD_PRELOAD ${!MRCACHE_*}
# Under a sanitizer build the library needs its runtime first: mrcache keeps a leading
# sanitizer runtime first, so the tests run with it already in LD_PRELOAD.
pre=${PP%:}
with_pp() { if [ -n "$pre" ]; then LD_PRELOAD=$pre "$@"; else "$@"; fi; }
major=$(awk '$2 == "MRCACHE_VERSION_MAJOR" {print $3}' "$root/include/mrcache.h")
minor=$(awk '$2 == "MRCACHE_VERSION_MINOR" {print $3}' "$root/include/mrcache.h")

for sh in dash bash; do
    command -v $sh >/dev/null || { echo "ok - mrcache_under_$sh # SKIP $sh not installed"; continue; }
    S="$sh $M"   # word-split on purpose: "sh path [--lib file]"
    # Options become variables; the program sees them and our library in LD_PRELOAD.
    with_pp $S -q --stats="$tmp/s.%p.json" --json --verify=4 --callsites 3 --callsites-sample=8 --log error \
        --monitor patch,preload --max-entries 100 --max-bytes 1G --remote never --dump-signal USR1 \
        --set MALLOC_HOOKS=0 --set MRCACHE_DIRECT_FREE=0 env >"$tmp/env" 2>"$tmp/env.err"
    r=$?
    for kv in MRCACHE_STATS="$tmp/s.%p.json" MRCACHE_STATS_FORMAT=json MRCACHE_VERIFY=4 MRCACHE_CALLSITES=3 \
              MRCACHE_CALLSITES_SAMPLE=8 MRCACHE_LOG=error MRCACHE_MONITOR=patch,preload MRCACHE_MAX_ENTRIES=100 \
              MRCACHE_MAX_BYTES=1G MRCACHE_REMOTE=never MRCACHE_DUMP_SIGNAL=USR1 MRCACHE_MALLOC_HOOKS=0 \
              MRCACHE_DIRECT_FREE=0 "LD_PRELOAD=$PP$LIB"; do
        grep -qxF "$kv" "$tmp/env" || { echo "$sh: no $kv in the program's environment" >&2; r=1; }
    done
    [ -s "$tmp/env.err" ] && { cat "$tmp/env.err" >&2; r=1; }
    report "mrcache_options_set_variables_$sh" $r
    out=$(with_pp $S --stats --disable --verify env | grep -e '^MRCACHE_STATS=' -e '^MRCACHE_ENABLE=' -e '^MRCACHE_VERIFY=' | sort | tr '\n' ' ')
    [ "$out" = "MRCACHE_ENABLE=0 MRCACHE_STATS=stderr MRCACHE_VERIFY=1 " ]
    report "mrcache_flag_options_$sh" $?

    # exec: the program has mrcache's pid, and its status and signal are its own.
    # (env execs too, so the pid is the one mrcache started with.)
    env ${pre:+LD_PRELOAD=$pre} $S sh -c 'echo $$' >"$tmp/pid" &
    p=$!
    wait $p
    [ "$(cat "$tmp/pid")" = "$p" ]
    report "mrcache_execs_the_program_$sh" $?
    with_pp $S sh -c 'exit 7'
    [ $? -eq 7 ]
    report "mrcache_passes_exit_status_$sh" $?
    with_pp $S sh -c 'kill -TERM $$' 2>/dev/null
    [ $? -eq 143 ]
    report "mrcache_passes_signal_$sh" $?

    # Errors: one line each, with the status the man page gives.
    r=0
    check_err() {  # check_err STATUS PATTERN ARGS...
        local want=$1 pat=$2
        shift 2
        with_pp $S "$@" >/dev/null 2>"$tmp/err"
        local got=$?
        [ $got -eq "$want" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "^mrcache: .*$pat" "$tmp/err" ||
            { echo "$sh mrcache $*: status $got (want $want): $(cat "$tmp/err")" >&2; r=1; }
    }
    check_err 125 "no program"
    check_err 125 "unknown option '--frobnicate'" --frobnicate true
    check_err 125 '--log needs a value' --log
    check_err 125 '--json takes no value' --json=1 true
    check_err 125 '--log loud is not valid (expected error|warn|info|debug)' --log loud true
    check_err 125 "--callsites lots is not valid" --callsites lots true
    check_err 125 'MRCACHE_REMOTE=sometimes is not valid' --set REMOTE=sometimes true
    check_err 125 "--set needs NAME=VALUE" --set LOG true
    check_err 125 "--set: MRCACHE_MAX_ENTRY is not a libmrcache setting (did you mean MRCACHE_MAX_ENTRIES?)" --set MAX_ENTRY=5 true
    check_err 125 "'out.txt' is not a program; --stats takes its value as --stats=out.txt" --stats out.txt true
    check_err 127 'no-such-program-here: command not found' no-such-program-here
    check_err 127 'no such file' ./no/such/program
    printf 'x\n' >"$tmp/notexec"
    check_err 126 'not executable' "$tmp/notexec"
    check_err 126 'is a directory' "$tmp"
    check_err 125 'no such file' --lib "$tmp/none.so" true
    report "mrcache_errors_one_line_with_status_$sh" $r
    out=$(with_pp $S --log=info -- sh -c 'echo "$MRCACHE_LOG"' 2>/dev/null)
    [ "$out" = info ]
    report "mrcache_double_dash_ends_the_options_$sh" $?
    with_pp $S -h >"$tmp/help" 2>&1 && [ "$(awk 'length > 80' "$tmp/help" | wc -l)" -eq 0 ] &&
        [ "$(wc -l <"$tmp/help")" -gt 20 ]
    report "mrcache_help_fits_80_columns_$sh" $?
done

# No library where it looks: status 125, saying where it looked.
mkdir -p "$tmp/tree/scripts" && cp "$root/scripts/mrcache" "$tmp/tree/scripts/"
"$tmp/tree/scripts/mrcache" true 2>"$tmp/nolib.err"
[ $? -eq 125 ] && grep -qx "mrcache: cannot find libmrcache (looked for $tmp/tree/build/libmrcache.so (run make)); use --lib FILE" "$tmp/nolib.err"
report mrcache_no_library_status_125 $?

# An existing LD_PRELOAD: a sanitizer runtime stays first, libmrcache goes next, before
# the others; a libmrcache already there is replaced; the note says so, -q silences it.
printf 'int mrcache_test_stub;\n' >"$tmp/stub.c"
cc -shared -fPIC -o "$tmp/libasan.so.8" "$tmp/stub.c" && cc -shared -fPIC -o "$tmp/libother.so" "$tmp/stub.c"
# (A stand-in runtime, or a sanitizer build's real one, which its library needs.)
san=${pre:-$tmp/libasan.so.8}
LD_PRELOAD="$san $LIB:$tmp/libother.so" $M printenv LD_PRELOAD >"$tmp/lp" 2>"$tmp/lp.err"
r=$?
[ $r -eq 0 ] && [ "$(cat "$tmp/lp")" = "$san:$LIB:$tmp/libother.so" ] &&
    [ "$(wc -l <"$tmp/lp.err")" -eq 1 ] &&
    grep -qF "libmrcache preloaded after the sanitizer runtime (${san##*/}), before libother.so; in place of" "$tmp/lp.err"
r=$?
[ $r -eq 0 ] || cat "$tmp/lp" "$tmp/lp.err" >&2
report mrcache_keeps_ld_preload_in_order $r
LD_PRELOAD="$pre${pre:+:}$tmp/libother.so" $M -q printenv LD_PRELOAD >"$tmp/lp" 2>"$tmp/lp.err"
[ "$(cat "$tmp/lp")" = "$pre${pre:+:}$LIB:$tmp/libother.so" ] && [ ! -s "$tmp/lp.err" ]
report mrcache_quiet_and_first $?

# A real program under the cache: the statistics file says it was served.
LD_LIBRARY_PATH=$B/snic with_pp $M --json --stats="$tmp/run.%p.json" "$B/test/test_verbs" >/dev/null 2>"$tmp/run.err"
rc=$?
f=$(ls "$tmp"/run.*.json 2>/dev/null | head -1)
[ $rc -eq 0 ] && [ -n "$f" ] && grep -q '"hits": [1-9]' "$f"
report mrcache_runs_a_verbs_program_under_the_cache $?

# --config: every variable of the library's table, with its source; unknown ones listed.
names=$(with_pp env LD_PRELOAD="$PP$LIB" MRCACHE_HELP=1 MRCACHE_STATS=off /bin/true 2>&1 | awk '/^MRCACHE_/ {print $1}')
with_pp env MRCACHE_STATS_FORMAT=xml MRCACHE_MAX_ENTRIES=77 MRCACHE_NO_SUCH_THING=1 $M --log debug --config >"$tmp/cfg" 2>"$tmp/cfg.err"
r=$?
[ $r -eq 0 ] && [ -n "$names" ] || r=1
for n in $names; do grep -q "^$n=" "$tmp/cfg" || { echo "--config lacks $n" >&2; r=1; }; done
[ "$(grep -c '^MRCACHE_' "$tmp/cfg")" -eq $(($(echo "$names" | wc -l) + 1)) ] || r=1
grep -q '^MRCACHE_LOG=debug  *# default warn; from --log$' "$tmp/cfg" &&
    grep -q '^MRCACHE_MAX_ENTRIES=77  *# default 65536; from the environment$' "$tmp/cfg" &&
    grep -q '^MRCACHE_STATS_FORMAT=xml  *# NOT VALID: the default, text, is used$' "$tmp/cfg" &&
    grep -q '^MRCACHE_ENABLE=1  *# default$' "$tmp/cfg" &&
    grep -q '^MRCACHE_NO_SUCH_THING=1  *# unknown to this library' "$tmp/cfg" && [ ! -s "$tmp/cfg.err" ] || r=1
[ $r -eq 0 ] || cat "$tmp/cfg" "$tmp/cfg.err" >&2
report mrcache_config_lists_every_variable $r
with_pp $M --config -v >"$tmp/cfgv" && grep -q '^# 0 makes every call pass straight through to libibverbs$' "$tmp/cfgv"
report mrcache_config_verbose_meanings $?

# --version: ours and the library's, from the header this tree builds it from.
out=$($M --version)
[ "$(echo "$out" | head -1)" = "mrcache $major.$minor" ] && [ "$(echo "$out" | sed -n 2p)" = "libmrcache $major.$minor: $LIB" ]
report mrcache_version $?

# A library that answers --version and --config itself (runnable, as the interface
# mrcache asks for): its answers are used instead of the header and MRCACHE_HELP.
cat >"$tmp/selfdesc.c" <<'C'
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        puts("libmrcache 9.9");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--config")) {
        puts("# libmrcache config 1");
        puts("MRCACHE_ENABLE\t1\t0\tenvironment\t0 makes every call pass straight through");
        puts("MRCACHE_LOG\twarn\twarn\tdefault\tlog level");
        puts("MRCACHE_STATS_FORMAT\ttext\ttext\tinvalid\ttext or json");
        return 0;
    }
    return 2;
}
C
cc -o "$tmp/libmrcache.so.9" "$tmp/selfdesc.c"
out=$(MRCACHE_ENABLE=0 MRCACHE_STATS_FORMAT=xml "$root/scripts/mrcache" --lib "$tmp/libmrcache.so.9" --config)
[ "$(echo "$out" | grep -c '^MRCACHE_')" -eq 3 ] && echo "$out" | grep -q '^MRCACHE_ENABLE=0  *# default 1; from the environment$' &&
    echo "$out" | grep -q '^MRCACHE_STATS_FORMAT=xml  *# NOT VALID: the default, text, is used$' &&
    echo "$out" | grep -q '^MRCACHE_LOG=warn  *# default$' &&
    [ "$("$root/scripts/mrcache" --lib "$tmp/libmrcache.so.9" --version | sed -n 2p)" = "libmrcache 9.9: $tmp/libmrcache.so.9" ]
report mrcache_uses_the_library_own_answers $?

if command -v shellcheck >/dev/null; then
    shellcheck -s sh "$root/scripts/mrcache"
    report mrcache_is_posix_sh_shellcheck $?
else
    echo "ok - mrcache_is_posix_sh_shellcheck # SKIP shellcheck not installed"
fi
exit 0
