/* unpin.c - what idle cached registrations would cost the program outside the cache: at
 * fork the kernel copies every pinned anonymous page into the child (256 MiB released
 * to the cache: 256 MiB copied per fork), and pinned pages refuse MADV_COLLAPSE (EAGAIN).
 * Before the real fork, and before a MADV_COLLAPSE the program asks for, idle entries
 * are deregistered (MRCACHE_FORK says how at fork). Invariants: only from the exported
 * fork and madvise, outside any hook of ours and never inside a registration of this
 * thread; errno is the caller's. */
#include <errno.h>
#include <stdint.h>

#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/real.h"

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
