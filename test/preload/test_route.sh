#!/bin/bash
# test_route.sh - where the PLT calls of free go (src/runtime/route.c), one verdict
# per scenario: routed past libmrcache in programs linked with -z now and lazily (and in
# a lazy library); not with MRCACHE_DIRECT_FREE=0, nor while the allocator hooks run, nor
# where another free comes first; back through libmrcache after a late patch of munmap
# that cannot be chained (a free's unmap must then be seen: fresh data; with the
# allocator hooks off, the same run must come out stale); and, when a slot cannot be
# written back (seccomp refuses writable pages, or another library rebound it), caching
# stops, said once as an error, and what was cached is counted as invalidated for that
# reason. Not routed while a thread runs at start-up; routed through mprotect when pwrite
# is refused.
B=$1 PP=$2
T=$(cd "$B/test" && pwd)
LIB=$(cd "$B" && pwd)/libmrcache.so
RUN=(env LD_LIBRARY_PATH="$B/snic" LD_PRELOAD="$PP$LIB" MRCACHE_STATS=off)
LATE=(LATE_PATCH="$T/libmrc_fakepatch.so" FAKEPATCH_FN=munmap FAKEPATCH_FORM=nop)
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }

# NAME PROGRAM [VAR=value...]: the program passes every test; its stderr in $tmp/NAME.
scenario() {
    local name=$1 prog=$2
    shift 2
    "${RUN[@]}" "$@" "$T/$prog" >"$tmp/$name.out" 2>"$tmp/$name.err"
    local rc=$?
    [ $rc -eq 0 ] && grep -q '^ok - ' "$tmp/$name.out" && ! grep -q '^not ok' "$tmp/$name.out"
}
verdict() { # NAME STATUS: with the program's output on failure
    [ "$2" -ne 0 ] && cat "$tmp/$1.out" "$tmp/$1.err" >&2
    report "$1" "$2"
}

if [ -n "$PP" ]; then
    # The sanitizer's free comes first: nothing is routed, every free reaches it.
    scenario route_sanitizer_free_first test_route_lazy EXPECT_ROUTE=0
    verdict route_sanitizer_free_first $?
    for t in route_now route_lazy route_off route_hooks_running route_preloaded_free_first \
             route_program_free_first route_back_after_late_patch route_back_lazy \
             route_late_patch_stale_control route_back_refused_stops_caching \
             route_back_rebound_stops_caching route_not_with_threads route_without_proc_mem; do
        echo "ok - $t # SKIP the patch source steps aside under a sanitizer"
    done
    exit 0
fi

scenario route_now test_route EXPECT_ROUTE=1
verdict route_now $?
scenario route_lazy test_route_lazy EXPECT_ROUTE=1
verdict route_lazy $?
scenario route_off test_route EXPECT_ROUTE=0 MRCACHE_DIRECT_FREE=0
verdict route_off $?
scenario route_hooks_running test_route EXPECT_ROUTE=0 MRCACHE_MONITOR=preload
verdict route_hooks_running $?

# A free preloaded before libmrcache: the lazy slots bind to it, and stay its.
"${RUN[@]}" LD_PRELOAD="$T/libmrc_ownfree.so:$LIB" EXPECT_ROUTE=0 "$T/test_route_lazy" \
    >"$tmp/route_preloaded_free_first.out" 2>"$tmp/route_preloaded_free_first.err" &&
    grep -q '^ok - test_frees_reach_their_free' "$tmp/route_preloaded_free_first.out" &&
    ! grep -q '^not ok' "$tmp/route_preloaded_free_first.out"
verdict route_preloaded_free_first $?
scenario route_program_free_first test_route_ownfree EXPECT_ROUTE=0
verdict route_program_free_first $?

# The late patch: said once, the hooks back on, caching still on.
late_said() {
    [ "$(grep -c 'patch: munmap was overwritten by another library after libmrcache' "$tmp/$1.err")" -eq 1 ] &&
        grep -q 'NO LONGER SEEN (the allocator hooks are back on' "$tmp/$1.err" && ! grep -q 'caching is OFF' "$tmp/$1.err"
}
scenario route_back_after_late_patch test_route EXPECT_ROUTE=1 "${LATE[@]}" && late_said route_back_after_late_patch
verdict route_back_after_late_patch $?
scenario route_back_lazy test_route_lazy EXPECT_ROUTE=1 "${LATE[@]}" && late_said route_back_lazy
verdict route_back_lazy $?
# Nothing predicts free's unmaps without the allocator hooks: the same check must fail.
scenario route_late_patch_stale_control test_route EXPECT_ROUTE=1 "${LATE[@]}" MRCACHE_MALLOC_HOOKS=0 \
    MALLOC_HOOKS_OFF=1 MRCACHE_LARGE=1/1 EXPECT_STALE=1
verdict route_late_patch_stale_control $?

# The program's slot (-z now) is on a RELRO page that may not be made writable again.
# Another library hooked the program's free while routed: its calls would skip the hooks.
scenario route_back_rebound_stops_caching test_route EXPECT_ROUTE=1 "${LATE[@]}" THIRD_PARTY=1 EXPECT_OFF=1 &&
    [ "$(grep -c 'caching is OFF from here on' "$tmp/route_back_rebound_stops_caching.err")" -eq 1 ]
verdict route_back_rebound_stops_caching $?

# A thread already running when libmrcache starts: nothing is routed. (By default the
# self-test then cannot check brk and the allocator hooks stay on anyway; with the patch
# source alone they are never used, so the routing's own check is what decides.)
scenario route_not_with_threads test_route EXPECT_ROUTE=0 LD_PRELOAD="$LIB:$T/libmrc_early.so" EARLY_THREAD=1 \
    MRCACHE_MONITOR=patch
verdict route_not_with_threads $?
# No writes through /proc/self/mem (pwrite refused): routed all the same, pages still read-only.
scenario route_without_proc_mem test_route EXPECT_ROUTE=1 LD_PRELOAD="$LIB:$T/libmrc_early.so" EARLY_NO_PWRITE=1
verdict route_without_proc_mem $?

# The entry cached before counts as invalidated for that reason.
scenario route_back_refused_stops_caching test_route EXPECT_ROUTE=1 "${LATE[@]}" REFUSE=1 EXPECT_OFF=1 \
    MRCACHE_STATS=stderr MRCACHE_STATS_FORMAT=json &&
    [ "$(grep -c 'caching is OFF from here on' "$tmp/route_back_refused_stops_caching.err")" -eq 1 ] &&
    grep -Eq '"inval_source_lost": 1[,}]' "$tmp/route_back_refused_stops_caching.err"
verdict route_back_refused_stops_caching $?
exit 0
