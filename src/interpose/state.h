/* state.h - the process-wide state behind the hooks: configuration, the cache, the pool
 * of MR handles, and readiness. Invariant: hooks test mrc_ready() before touching
 * anything else, and until then pass straight through. */
#ifndef MRC_STATE_H
#define MRC_STATE_H

#include <stdint.h>

#include "core/cache.h"
#include "core/pool.h"
#include "util/config.h"

struct mrc_state {
    struct mrc_config cfg;
    struct mrc_cache cache;
    struct mrc_pool handles;
    int ready;              /* 0 not yet, 1 initialising, 2 ready */
    uint32_t fork_gen;      /* bumped in a forked child: older handles are the parent's */
    int watch_unmaps;       /* MRCACHE_MONITOR enables the munmap-family hooks */
    int watch_malloc;       /* ... and the allocator's own unmaps */
    int malloc_usable;      /* the allocator hooks may run (preload on, MRCACHE_MALLOC_HOOKS,
                             * glibc's allocator): patch.c turns them back on if it must */
    int caching_off;        /* mrc_stop_caching ran: cfg.enable is 0 from then on */
    uint64_t start_ns;
};

extern struct mrc_state mrc_g;

static inline int mrc_ready(void)
{
    return __atomic_load_n(&mrc_g.ready, __ATOMIC_ACQUIRE) == 2;
}

/* Whether an unmap hook has anything to do: ready, watching, and the cache in use. The
 * fast path of every hook while nothing was ever registered. */
static inline int mrc_watching(void)
{
    return __atomic_load_n(&mrc_g.cache.active, __ATOMIC_RELAXED) && mrc_g.watch_unmaps;
}

/* Sets everything up (idempotent; the constructor calls it, a hook entered earlier may). */
void mrc_init(void);

/* Called on the first registration: arranges the exit-time flush and stats dump. */
void mrc_on_first_registration(void);

/* Which unmap sources are active, as the statistics name them ("patch+preload+malloc"). */
const char *mrc_monitor_name(void);

/* For when an unmap source is lost and cannot be made good: no registration is served
 * from the cache again (those cached are invalidated, later ones pass straight
 * through). Says why, once, as an error. Safe in any hook. */
void mrc_stop_caching(const char *why);

/* Called by the fork hook before the real fork. */
void mrc_before_fork(void);

#endif
