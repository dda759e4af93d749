#!/usr/bin/env bash
# test_uffd.sh - the userfaultfd source as a process sees it: the self-test and the active
# sources logged at start-up; a kernel that refuses userfaultfd (seccomp) said once and
# survived; exit while a thread discards watched memory and after an atexit unmap; an
# unprivileged user (UFFD_USER_MODE_ONLY); the auto rule.
# Usage: test_uffd.sh BUILD_DIR [PRELOAD_PREFIX]   (prints "ok - name" lines)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
LIB=$B/libmrcache.so
SNIC=$B/snic
BIN=$B/test/test_uffd
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
run() { env LD_LIBRARY_PATH="$SNIC" LD_PRELOAD="$PP$LIB" MRCACHE_STATS=off "$@"; }

# 1. The self-test's verdict and the sources in use, at info level.
run MRCACHE_LOG=info MRCACHE_MONITOR=patch,preload,uffd EXPECT_UFFD=1 timeout 120 "$BIN" auto \
    >/dev/null 2>"$tmp/info"
grep -q 'uffd: on: .*self-test: a raw munmap of a watched range was seen' "$tmp/info" &&
    grep -q 'unmap sources: .*uffd' "$tmp/info"
r=$?
[ $r -eq 0 ] || cat "$tmp/info" >&2
report selftest_and_sources_logged $r

# 2. userfaultfd refused: registrations work, one warning (uffd asked for by name).
run MRCACHE_MONITOR=patch,preload,uffd timeout 120 "$BIN" refused >"$tmp/ref.out" 2>"$tmp/ref.err"
r=$?
grep -v '^ok' "$tmp/ref.out" >&2
n=$(grep -c 'uffd: userfaultfd refused' "$tmp/ref.err")
[ $r -eq 0 ] && grep -q '^ok - test_refused_degrades' "$tmp/ref.out" && [ "$n" -eq 1 ]
r=$?
[ $r -eq 0 ] || cat "$tmp/ref.err" >&2
report refused_said_once_and_survived $r

# 3. Exit while a thread discards watched memory, after an atexit handler's unmap.
run MRCACHE_MONITOR=uffd timeout 120 "$BIN" exit >"$tmp/exit.out" 2>&1
r=$?
[ $r -eq 0 ] && grep -q '^ok - unmap_after_libmrcache_exit_handler' "$tmp/exit.out"
r=$?
[ $r -eq 0 ] || cat "$tmp/exit.out" >&2
report exit_with_unmaps_under_way $r

# 4. An unprivileged user (vm.unprivileged_userfaultfd=0 leaves it UFFD_USER_MODE_ONLY).
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    # A user id nobody else runs as: pins are charged to the user, and another process
    # of the user's (another run of these tests, say) would spend this one's limit.
    id=$((4000000 + $$ % 1000000)) d="$tmp/unprivileged"
    mkdir -p "$d" && cp "$LIB" "$SNIC"/libibverbs.so.1 "$BIN" "$d/" && chmod -R a+rwX "$tmp"
    setpriv --reuid=$id --regid=$id --clear-groups --inh-caps=-all bash -c \
        "ulimit -l unlimited 2>/dev/null; cd $d; env LD_LIBRARY_PATH=$d LD_PRELOAD=$PP$d/libmrcache.so \
         MRCACHE_STATS=off MRCACHE_MONITOR=uffd TMPDIR=$d timeout 300 ./test_uffd" >"$tmp/nb.out" 2>&1
    r=$?
    grep -v '^ok' "$tmp/nb.out" >&2
    [ $r -eq 0 ] && grep -q '^ok - test_raw_munmap' "$tmp/nb.out" && ! grep -q '^not ok' "$tmp/nb.out"
    report unprivileged_user $?
else
    echo "ok - unprivileged_user # SKIP needs root to switch to an unprivileged user"
fi

# 5. auto: the userfaultfd joins when patching falls short (under a sanitizer, which
#    patching steps aside for), and not when libc is patched and tested.
want=0
[ -n "$PP" ] && want=1
run MRCACHE_MONITOR=auto EXPECT_UFFD=$want timeout 120 "$BIN" auto >"$tmp/auto.out" 2>&1
r=$?
grep -v '^ok' "$tmp/auto.out" >&2
[ $r -eq 0 ] && grep -q '^ok - test_auto_rule' "$tmp/auto.out"
report auto_rule $?
exit 0
