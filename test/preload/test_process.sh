#!/usr/bin/env bash
# test_process.sh - libmrcache as a process sees it: silent and harmless in programs
# that never register; one clear warning per bad MRCACHE_* value; the help table and the
# README agree; statistics at exit (text on stderr, JSON to a %p file); a plugin opened
# RTLD_LOCAL; an unprivileged process with a small RLIMIT_MEMLOCK; jemalloc after us.
# Usage: test_process.sh BUILD_DIR [PRELOAD_PREFIX]   (prints "ok - name" lines)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
LIB=$B/libmrcache.so
SNIC=$B/snic
PRE="$PP$LIB"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }

# 1. A process that never touches verbs: same output, nothing on stderr, no libibverbs.
# (A directory of our own: / itself changes while other processes run.)
mkdir -p "$tmp/tree/a" && touch "$tmp/tree/f1" "$tmp/tree/a/f2"
ls -laR "$tmp/tree" >"$tmp/ls.plain" 2>&1
LD_PRELOAD=$PRE ls -laR "$tmp/tree" >"$tmp/ls.pre" 2>"$tmp/ls.err"
diff -q "$tmp/ls.plain" "$tmp/ls.pre" >/dev/null && [ ! -s "$tmp/ls.err" ]
report quiet_in_ls $?
out=$(LD_PRELOAD=$PRE python3 -c 'import json; print(json.dumps(sum(range(10**5))))' 2>&1)
[ "$out" = "4999950000" ]
report quiet_in_python $?
LD_PRELOAD=$PRE bash -c 'grep -q libibverbs /proc/$$/maps'
[ $? -ne 0 ]
report no_libibverbs_loaded_by_us $?

# 2. Bad values: exit status 0, one warning per variable naming it and its default.
LD_PRELOAD=$PRE MRCACHE_MAX_ENTRIES=-5 MRCACHE_REMOTE=sometimes MRCACHE_LOG=loud \
    MRCACHE_MAX_BYTES=lots MRCACHE_ENABLE=maybe MRCACHE_STATS_FORMAT=xml MRCACHE_SHARED=never \
    /bin/true 2>"$tmp/bad.err"
rc=$?
n=$(grep -c 'is not valid' "$tmp/bad.err")
[ $rc -eq 0 ] && [ "$n" -eq 7 ] && grep -q 'MRCACHE_MAX_ENTRIES="-5".*using 65536' "$tmp/bad.err"
report bad_values_warn_once_each $?
# A word-valued setting's warning names the words, on one short line.
line=$(grep 'MRCACHE_SHARED="never"' "$tmp/bad.err")
[ -n "$line" ] && [ "${#line}" -lt 120 ] && case $line in *'(expected register or cache); using register') ;; *) false ;; esac
report bad_shared_value_one_short_line $?

# 3. MRCACHE_HELP prints every variable, and the README documents every one of them.
LD_PRELOAD=$PRE MRCACHE_HELP=1 /bin/true 2>"$tmp/help"
vars=$(awk '/^MRCACHE_/ {print $1}' "$tmp/help")
[ "$(echo "$vars" | wc -l)" -ge 10 ]
r=$?
readme=$(dirname "$0")/../../README.md
for v in $vars; do grep -q "$v" "$readme" || { echo "README lacks $v" >&2; r=1; }; done
report help_table_matches_readme $r

# 4. Statistics at exit: text on stderr by default (something was registered) ...
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE "$B/test/test_verbs" >/dev/null 2>"$tmp/stats.txt"
grep -q 'hit rate' "$tmp/stats.txt" && grep -q 'pinned now 0 B in 0 registrations' "$tmp/stats.txt"
report stats_text_at_exit_and_all_deregistered $?
# Yes/no words switch the dump, they never name a file (run where one would appear).
mkdir "$tmp/cwd"
(cd "$tmp/cwd" && LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS=on "$B/test/test_verbs" >/dev/null 2>../on.err &&
    LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS=No "$B/test/test_verbs" >/dev/null 2>../no.err)
grep -q 'hit rate' "$tmp/on.err" && ! grep -q 'hit rate' "$tmp/no.err" && [ -z "$(ls -A "$tmp/cwd")" ]
report stats_yes_no_words_are_switches $?
# ... and JSON to a per-process file, never clobbering an existing one.
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS="$tmp/s.%p.json" MRCACHE_STATS_FORMAT=json \
    "$B/test/test_verbs" >/dev/null 2>&1
f=$(ls "$tmp"/s.*.json 2>/dev/null | head -1)
[ -n "$f" ] && python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["counters"]
assert d["version"] == 1, d["version"]
assert c["requests"] > 0 and c["hits"] > 0 and c["requests"] == c["hits"] + c["misses"], c
assert d["gauges"]["pinned_bytes"] == 0, d["gauges"]
PY
report stats_json_file $?
ln -s /etc/passwd "$tmp/link.json"
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS="$tmp/link.json" "$B/test/test_verbs" >/dev/null 2>"$tmp/link.err"
grep -q 'cannot create stats file' "$tmp/link.err" && ! grep -q hits /etc/passwd
report stats_never_follow_symlink $?

# 5. A plugin loaded RTLD_LOCAL brings libibverbs: still interposed and cached.
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS=off "$B/test/plugin_host" "$B/test/libmrc_testplugin.so" \
    >"$tmp/plugin.out" 2>&1
grep -q '^ok - ' "$tmp/plugin.out" && ! grep -q '^not ok' "$tmp/plugin.out"
r=$?
cat "$tmp/plugin.out" | grep -v '^ok' >&2
report plugin_rtld_local_cached $r

# 6. Unprivileged, RLIMIT_MEMLOCK 256 KiB: registrations that fit must succeed, whether
#    the cache's byte limit follows RLIMIT_MEMLOCK (default) or exceeds it (ENOMEM path).
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    # A user id nobody else runs as: pins are charged to the user, and another process
    # of the user's (another run of these tests, say) would spend this one's limit.
    id=$((4000000 + $$ % 1000000)) d="$tmp/unprivileged"
    mkdir -p "$d" && cp "$LIB" "$SNIC"/libibverbs.so.1 "$B/test/memlock" "$d/" && chmod -R a+rX "$tmp"
    for extra in "" "MRCACHE_MAX_BYTES=1G"; do
        setpriv --reuid=$id --regid=$id --clear-groups --inh-caps=-all bash -c \
            "ulimit -l 256; cd $d; env $extra LD_LIBRARY_PATH=$d LD_PRELOAD=$PP$d/libmrcache.so MRCACHE_STATS=off ./memlock" \
            >"$tmp/ml.out" 2>&1
        r=$?
        grep -v '^ok' "$tmp/ml.out" >&2
        grep -q '^ok - ' "$tmp/ml.out" && [ $r -eq 0 ]
        report "memlock_unprivileged${extra:+_$extra}" $?
    done
else
    echo "ok - memlock_unprivileged # SKIP needs root to switch to an unprivileged user"
fi

# 7. Another allocator after us in the chain: our free forwards to it.
je=$(ls /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 2>/dev/null)
if [ -n "$je" ] && [ -z "$PP" ]; then
    LD_LIBRARY_PATH=$SNIC LD_PRELOAD="$LIB:$je" MRCACHE_STATS=off "$B/test/test_verbs" >"$tmp/je.out" 2>&1
    r=$?
    grep -v '^ok' "$tmp/je.out" >&2
    [ $r -eq 0 ] && ! grep -q '^not ok' "$tmp/je.out"
    report jemalloc_after_us $?
else
    echo "ok - jemalloc_after_us # SKIP no libjemalloc.so.2, or a sanitizer build"
fi
exit 0
