/* unpin.c - what idle cached registrations would cost the program outside the cache: at
 * fork the kernel copies every pinned anonymous page into the child (256 MiB released
 * to the cache: 256 MiB copied per fork), pinned pages refuse MADV_COLLAPSE (EAGAIN), and
 * the userfaultfd source's watches over them split VMAs, which count against
 * vm.max_map_count. Before the real fork, before a MADV_COLLAPSE the program asks for,
 * and when a mapping call of the program is refused while such watches exist, idle
 * entries are deregistered (MRCACHE_FORK says how at fork). Invariants: the first two
 * only from the exported fork and madvise, outside any hook of ours and never inside a
 * registration of this thread; the third from any hook, deregistering only on the helper
 * thread, which the hook waits for at most MAPS_WAIT_NS; errno is the caller's. */
#include <errno.h>
#include <stdint.h>

#include "monitor/uffd.h"
#include "monitor/unmap.h"
#include "runtime/helper.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/log.h"
#include "util/real.h"

/* How long a mapping call refused for want of mappings waits for the give-back: long
 * enough for thousands of deregistrations, short enough that a caller holding a lock
 * the deregistrations need (an allocator's) is only delayed. */
#define MAPS_WAIT_NS 1000000000ull

void mrc_rt_unpin_before_fork(void)
{
    uint64_t keep = mrc_rt.cfg.fork_keep;
    if (keep == MRC_FORK_KEEP)
        return;
    if (keep) {
        struct mrc_gauges g;
        mrc_cache_get_gauges(&mrc_rt.cache, &g);
        if (g.tree_bytes + g.deferred_bytes + g.failed_bytes <= keep)
            return;
    }
    /* The program's own registrations are copied as they would be without the cache;
     * only what it released goes, so a fork copies no more than it has in use. */
    mrc_cache_flush(&mrc_rt.cache, NULL, NULL);
}

struct range {
    uint64_t first, last;
};

static int overlaps(const struct mrc_entry *e, void *arg)
{
    const struct range *r = arg;
    return mrc_entry_start(e) <= r->last && r->first <= mrc_entry_start(e) + mrc_entry_len(e) - 1;
}

void mrc_rt_before_collapse(const void *addr, size_t len)
{
    /* glibc never asks for MADV_COLLAPSE itself, so with its allocator this is the
     * program's call, made under no allocator lock: deregistering here is as safe as in
     * ibv_dereg_mr. Another allocator may ask for it holding its lock, which the
     * deregistration's free would then wait for: its calls are left alone. */
    if (!len || !mrc_real_alloc_is_glibc || !mrc_rt_cache_live() || mrc_verbs_in_reg())
        return;
    int saved = errno;
    uintptr_t a = (uintptr_t)addr;
    struct range r = { a, a + len - 1 < a ? UINT64_MAX : a + len - 1 };
    mrc_cache_flush(&mrc_rt.cache, overlaps, &r);
    errno = saved;
}

int mrc_rt_maps_short(void)
{
    /* Watches made since the last give-back was asked: with none, and none under way,
     * there is nothing to give. */
    static uint32_t made_then;
    if (!mrc_rt_cache_live() || mrc_verbs_in_reg())
        return 0;
    uint32_t made = __atomic_load_n(&mrc_monitor.maps_held, __ATOMIC_RELAXED);
    if ((__atomic_load_n(&made_then, __ATOMIC_RELAXED) == made && !mrc_helper_giving_back()) || !mrc_uffd_maps_full())
        return 0;
    __atomic_store_n(&made_then, made, __ATOMIC_RELAXED);
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        MRC_WARN("the program reached vm.max_map_count: idle cached registrations are given back (their "
                 "watches split mappings), and the refused call is made again");
    mrc_uffd_watch_recount();
    return mrc_helper_give_back(MAPS_WAIT_NS);
}

void mrc_rt_unpin_for_maps(void)
{
    mrc_cache_flush(&mrc_rt.cache, NULL, NULL);
}
