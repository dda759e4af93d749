#!/bin/bash
# test_patch.sh - the patch source as a process sees it: an entry point another library
# already patched is refused (said once) and that library's hook keeps working; the
# self-test reports coverage; the stats name the active sources; MRCACHE_MONITOR lists
# are parsed (bad ones warned about); a program that never registers stays silent.
B=$1 PP=$2
LIB=$(cd "$B" && pwd)/libmrcache.so
PRE="$PP$LIB"
SNIC=$B/snic
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }

# 1. Quiet while unused, even with patching on (messages wait for a registration).
LD_PRELOAD=$PRE /bin/true 2>"$tmp/q.err"
[ ! -s "$tmp/q.err" ]
report patch_quiet_when_unused $?

# 2. Bad lists warn once each and keep the default; good lists are silent.
for v in bogus none,patch "patch," "patch+" ""; do
    LD_PRELOAD=$PRE MRCACHE_MONITOR="$v" /bin/true 2>"$tmp/b.err"
    [ -z "$v" ] && continue
    grep -q "MRCACHE_MONITOR=\"$v\" is not valid (expected " "$tmp/b.err" || { echo "no warning for '$v'" >&2; r=1; }
done
for v in patch,preload PRELOAD,patch patch+preload+uffd auto none; do
    LD_PRELOAD=$PRE MRCACHE_MONITOR="$v" /bin/true 2>"$tmp/g.err"
    grep -q 'is not valid' "$tmp/g.err" && { echo "'$v' refused" >&2; r=1; }
done
report monitor_list_parsed ${r:-0}

# A process that never loads libibverbs sets nothing up (no patch, no self-test, no
# thread: the debug log's "ready" never comes); one that links it does, before main.
LD_PRELOAD=$PRE MRCACHE_LOG=debug /bin/true 2>"$tmp/n.err"
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_LOG=debug ibv_devices >/dev/null 2>"$tmp/v.err"
! grep -q 'ready: max' "$tmp/n.err" && grep -q 'ready: max' "$tmp/v.err"
report set_up_only_with_libibverbs $?

if [ -n "$PP" ]; then
    LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_LOG=info ibv_devices >/dev/null 2>"$tmp/s.err"
    grep -q 'patch: not patching libc: a sanitizer' "$tmp/s.err"
    report patch_steps_aside_under_sanitizer $?
    echo "ok - patch_self_test # SKIP the patch source steps aside under a sanitizer"
    echo "ok - patch_refuses_foreign_patch # SKIP the patch source steps aside under a sanitizer"
    exit 0
fi

# 3. The self-test: every path it can trigger arrives.
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_LOG=info ibv_devices >/dev/null 2>"$tmp/s.err"
grep -q 'unmap coverage: munmap: patched, tested; mmap(MAP_FIXED): patched, tested; mremap: patched, tested; madvise: patched, tested;.*brk: patched, tested; dlclose: patched; glibc-internal free: seen' "$tmp/s.err" &&
    ! grep -q incomplete "$tmp/s.err"
r=$?
[ $r -ne 0 ] && cat "$tmp/s.err" >&2
report patch_self_test $r

# 4. The stats name the sources. With libc fully patched the allocator hooks stand idle
#    (the patched entry points see glibc malloc's unmaps); with patching off they work.
LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS=stderr "$B/test/test_verbs" >/dev/null 2>"$tmp/st.err"
grep -q 'monitor: patch+preload)' "$tmp/st.err" &&
    LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_MONITOR=preload MRCACHE_STATS=stderr "$B/test/test_verbs" \
        >/dev/null 2>"$tmp/st3.err" && grep -q 'monitor: preload+malloc)' "$tmp/st3.err" &&
    LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_MONITOR=patch MRCACHE_STATS=stderr "$B/test/test_verbs" \
        >/dev/null 2>"$tmp/st2.err" && grep -q 'monitor: patch)' "$tmp/st2.err"
report stats_name_monitor_sources $?

# 5. Another library patched madvise first: refused, said once, its hook intact; the
#    rest still patched. Its constructor runs before ours when it comes later in
#    LD_PRELOAD (preloads are initialised in reverse order).
LD_LIBRARY_PATH=$SNIC LD_PRELOAD="$LIB:$B/test/libmrc_fakepatch.so" MRCACHE_STATS=stderr \
    "$B/test/test_verbs" >/dev/null 2>"$tmp/f.err"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'madvise already starts with a jump' "$tmp/f.err")" -eq 1 ] &&
    grep -q 'fakepatch: intact' "$tmp/f.err" && grep -q 'madvise: preload only' "$tmp/f.err" &&
    grep -q 'monitor: patch(7/8)+preload+malloc' "$tmp/f.err"
r=$?
[ $r -ne 0 ] && cat "$tmp/f.err" >&2
report patch_refuses_foreign_patch $r

# 6-8. Another library overwrites libmrcache's own munmap after registrations (a plugin
#      loaded with dlopen, looking munmap up by name): chained when it is a plain jump,
#      both when the patcher's mprotect passes through ours and when it makes the system
#      call itself (then a miss finds it); caching stops when the patch cannot be moved.
#      In each, a buffer unmapped through the program's PLT and mapped again must get a
#      fresh registration, and the patcher's hook must still see its calls.
patched_export() { # NAME [VAR=VALUE...]
    local name=$1
    shift
    env LD_LIBRARY_PATH=$SNIC LD_PRELOAD=$PRE MRCACHE_STATS=off MRCACHE_LOG=info \
        LATE_PATCH=$B/test/libmrc_fakepatch.so FAKEPATCH_TARGET=name FAKEPATCH_FN=munmap "$@" \
        "$B/test/test_patched_exports" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    grep -q '^ok - test_munmap_through_patched_export' "$tmp/$name.out" && [ $rc -eq 0 ] &&
        grep -q 'fakepatch: intact' "$tmp/$name.err"
}
patched_export chained NO_MISSES=1 && grep -q "libmrcache's own munmap was patched by .*libmrc_fakepatch.so.*chained" "$tmp/chained.err"
r=$?
[ $r -ne 0 ] && cat "$tmp/chained.out" "$tmp/chained.err" >&2
report patch_chains_patched_own_export $r
patched_export raw FAKEPATCH_PROTECT=raw && grep -q "libmrcache's own munmap was patched by" "$tmp/raw.err"
r=$?
[ $r -ne 0 ] && cat "$tmp/raw.out" "$tmp/raw.err" >&2
report patch_finds_silent_patch_of_own_export_at_a_miss $r
patched_export off FAKEPATCH_FORM=nop EXPECT_OFF=1 &&
    [ "$(grep -c "libmrcache's own munmap was overwritten by another library.*caching is OFF" "$tmp/off.err")" -eq 1 ]
r=$?
[ $r -ne 0 ] && cat "$tmp/off.out" "$tmp/off.err" >&2
report patch_unmovable_patch_of_own_export_stops_caching $r
exit 0
