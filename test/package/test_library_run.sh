#!/bin/sh
# test_library_run.sh BUILD [PRELOAD_PREFIX] - the library file run as a program (as libc.so.6 can be):
# with no argument it says what it is and how to use it and exits 0; --version prints the
# header's version; --config prints the configuration table (docs/
# library-self-description.md: five tab-separated fields, every variable MRCACHE_HELP=1
# lists, a refused value marked invalid); anything else exits 2.
B=$1
LIB=$B/libmrcache.so
if [ -n "${2:-}" ]; then
    # A sanitizer build needs its runtime loaded first, which running the file cannot do.
    for t in says_what_it_is version config_table unknown_argument_exits_2; do
        echo "ok - library_run_$t # SKIP a sanitizer build cannot be run as a program"
    done
    exit 0
fi
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
major=$(awk '$2 == "MRCACHE_VERSION_MAJOR" {print $3}' include/mrcache.h)
minor=$(awk '$2 == "MRCACHE_VERSION_MINOR" {print $3}' include/mrcache.h)

LD_PRELOAD= "$LIB" >"$tmp/plain" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^libmrcache $major.$minor: " "$tmp/plain" && grep -q 'LD_PRELOAD=libmrcache.so' "$tmp/plain" &&
    grep -q 'mrcache \[options\] program' "$tmp/plain"
report library_run_says_what_it_is $?

[ "$(LD_PRELOAD= "$LIB" --version)" = "libmrcache $major.$minor" ]
report library_run_version $?

LD_PRELOAD= MRCACHE_LOG=loud MRCACHE_MAX_ENTRIES=77 "$LIB" --config >"$tmp/config"
rc=$?
LD_PRELOAD=$LIB MRCACHE_HELP=1 /bin/true 2>&1 | awk '$1 ~ /^MRCACHE_/ {print $1}' >"$tmp/names"
r=0
[ $rc -eq 0 ] && [ "$(head -1 "$tmp/config")" = "# libmrcache config 1" ] || r=1
[ "$(tail -n +2 "$tmp/config" | cut -f1)" = "$(cat "$tmp/names")" ] || { echo "the variables differ from MRCACHE_HELP's" >&2; r=1; }
tail -n +2 "$tmp/config" | awk -F '\t' 'NF != 5 {bad = 1} END {exit bad}' || { echo "a line without five fields" >&2; r=1; }
grep -q "^MRCACHE_LOG	warn	warn	invalid	" "$tmp/config" || r=1
grep -q "^MRCACHE_MAX_ENTRIES	65536	77	environment	" "$tmp/config" || r=1
grep -q "^MRCACHE_ENABLE	1	1	default	" "$tmp/config" || r=1
[ $r -ne 0 ] && cat "$tmp/config" >&2
report library_run_config_table $r

LD_PRELOAD= "$LIB" --bogus >/dev/null 2>"$tmp/bogus.err"
[ $? -eq 2 ] && grep -q "unknown option '--bogus'" "$tmp/bogus.err"
report library_run_unknown_argument_named_exits_2 $?
LD_PRELOAD= "$LIB" --help >"$tmp/help" 2>&1
[ $? -eq 0 ] && grep -q 'mrcache --help' "$tmp/help"
report library_run_help_exits_0 $?
LD_PRELOAD= "$LIB" --once --sort nonsense >/dev/null 2>"$tmp/view.err"
[ $? -eq 125 ] && grep -q "^mrcache: --sort takes .*, not 'nonsense'" "$tmp/view.err"
report library_run_view_usage_error_names_the_option $?
