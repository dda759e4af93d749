/* cache_inval.c - invalidation: the range an unmap is about to take announced to misses
 * in flight (a ring of recent ranges, read by their race check), every entry overlapping
 * it taken out of the tree and the young set, long runs cut out whole and parked for the
 * next get to settle, a change under a registration someone holds recorded, and a closed
 * cache that keeps nothing.
 * Invariants: safe in any hook: nothing here calls the back-end, allocates or waits for
 * a registration (the lock is never held across one); an idle entry whose last
 * reference goes is only deferred; when mrc_cache_unmap_begin returns, no lookup can
 * return an entry overlapping its range. */
#include <stdint.h>

#include "core/cache.h"
#include "core/cache_priv.h"

/* Publishes [first, last] as an invalidation begun now, for the race checks of misses
 * that read inval_seq before it (raced_locked). */
static uint64_t announce(struct mrc_cache *c, uint64_t first, uint64_t last)
{
    uint64_t s = __atomic_fetch_add(&c->inval_seq, 1, __ATOMIC_SEQ_CST);
    __typeof__(c->ring[0]) *slot = &c->ring[s % MRC_INVAL_RING];
    ST(&slot->first, first);
    ST(&slot->last, last);
    __atomic_store_n(&slot->seq, s + 1, __ATOMIC_RELEASE);
    return s;
}

/* report: the memory changes (not a closing cache, not a lost source), so that a holder
 * of registered memory in the range is recorded. */
static uint64_t begin(struct mrc_cache *c, uint64_t addr, uint64_t len, enum mrc_inval_cause cause, int report)
{
    if (len == 0 || !__atomic_load_n(&c->active, __ATOMIC_SEQ_CST))
        return 0;
    uint64_t first = addr, last = addr + len - 1 < addr ? UINT64_MAX : addr + len - 1;
    /* Publish the range first, so that a miss registering concurrently learns of it. */
    uint64_t seq = announce(c, first, last);
    /* A miss that read the sequence after our increment cannot see our range: the
     * ticket lets mrc_cache_unmap_done tell whether one overlapped the unmap. */
    uint64_t m = __atomic_load_n(&c->misses, __ATOMIC_SEQ_CST);
    uint64_t ticket = (m >> MRC_MISSES_INFLIGHT_BITS) << 1 | ((m & MRC_MISSES_INFLIGHT_MASK) != 0);
    /* The lock-free shortcut is safe only with no miss in flight: a miss leaves the
     * in-flight count only after its insertion is counted in tree_count. */
    if (!(ticket & 1) && !__atomic_load_n(&c->tree_count, __ATOMIC_SEQ_CST) &&
        !__atomic_load_n(&c->nheld, __ATOMIC_SEQ_CST))
        return ticket;

    struct inval_batch b = { c, 0, 0, 0, 0 };
    struct mrc_itree_node *run = NULL;
    uint64_t n = 0;
    pthread_mutex_lock(&c->lock);
    /* A miss that held the lock between our announcement and now read inval_seq after
     * it, and may have merged an entry we are about to take into a registration of its
     * own neighbouring buffer: that registration, made after we return, would pin the
     * pages being unmapped and be found at their address. Announced again, the range is
     * in its race check, and the registration stays private to its caller. */
    if (__atomic_load_n(&c->misses, __ATOMIC_SEQ_CST) & MRC_MISSES_INFLIGHT_MASK)
        announce(c, first, last);
    if (young_may_overlap(c, first, last))
        for (unsigned i = LD(&c->nyoung); i-- > 0;)
            if (c->young[i].first <= last && first <= c->young[i].last) {
                struct mrc_entry *e = c->young[i].e;
                young_remove_at_locked(c, i);
                inval_one_locked(&e->node, &b);
                n++;
            }
    unsigned np = c->nparked;
    /* A long run is parked while a slot is free (the usual case: the next get settles
     * them): then this hook pays O(log n) for it, not O(run). */
    n += mrc_itree_remove_range(&c->tree, first, last, inval_one_locked, &b,
                                np < MRC_PARKED ? &run : NULL);
    inval_count_locked(c, &b, n);
    if (run) {
        c->parked[np].run = run;
        c->parked[np].cause = cause;
        c->parked[np].report = report;
        c->parked[np].seq = seq;
        __atomic_store_n(&c->parked[np].first, first, __ATOMIC_RELEASE);
        __atomic_store_n(&c->parked[np].last, last, __ATOMIC_RELEASE);
        __atomic_store_n(&c->nparked, np + 1, __ATOMIC_SEQ_CST);
        /* What the run pins is not known until it is walked: the range from its first
         * start to its largest last bounds it (for one domain: registrations of the
         * same pages in several count once), and so does tree_bytes, which still
         * counts every parked run. */
        uint64_t run_last = mrc_itree_run_last(run);
        uint64_t top = run_last > last ? run_last : last;
        uint64_t range = top - first + 1 ? top - first + 1 : UINT64_MAX;
        uint64_t bound = c->parked_bytes + range < range ? UINT64_MAX : c->parked_bytes + range;
        c->parked_bytes = bound < c->tree_bytes ? bound : c->tree_bytes;
    }
    /* The helper is woken only past the bound, like deferred deregistrations: running
     * beside the program's munmap it would make the kernel's TLB flushes reach its CPU
     * too (measured here: the 16k-entry munmap then cost 2-4x as much). */
    int full = (n || run) && c->deferred_bytes + c->parked_bytes > c->p.max_deferred_bytes;
    int in_use = report && (b.in_use || mrc_cache_held_overlaps_locked(c, first, last));
    if (in_use)
        mrc_cache_in_use_note_locked(c, first, last, seq, cause);
    pthread_mutex_unlock(&c->lock);
    inval_stats(n, cause);
    if (in_use)
        mrc_cache_in_use_notify(c, seq);
    if (full && c->p.deferred_full)
        c->p.deferred_full(c->p.deferred_full_arg);
    return ticket;
}

uint64_t mrc_cache_unmap_begin(struct mrc_cache *c, uint64_t addr, uint64_t len,
                               enum mrc_inval_cause cause)
{
    return begin(c, addr, len, cause, cause != MRC_INVAL_SOURCE_LOST);
}

void mrc_cache_unmap_done(struct mrc_cache *c, uint64_t ticket, uint64_t addr, uint64_t len,
                          enum mrc_inval_cause cause)
{
    if (!__atomic_load_n(&c->active, __ATOMIC_SEQ_CST))
        return;
    uint64_t m = __atomic_load_n(&c->misses, __ATOMIC_SEQ_CST);
    /* Again for a miss that may have pinned the old pages; its holders were recorded by
     * the first pass, and one registered since is not one that held the memory. */
    if ((ticket & 1) || (ticket >> 1) != m >> MRC_MISSES_INFLIGHT_BITS || (m & MRC_MISSES_INFLIGHT_MASK))
        begin(c, addr, len, cause, 0);
}

void mrc_cache_invalidate(struct mrc_cache *c, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    mrc_cache_unmap_begin(c, addr, len, cause);
}

void mrc_cache_close(struct mrc_cache *c, enum mrc_inval_cause cause)
{
    /* First closed, under the lock a miss inserts under: a miss inserting later keeps
     * its entry private, and the invalidation below takes every earlier one. */
    pthread_mutex_lock(&c->lock);
    c->closed = 1;
    pthread_mutex_unlock(&c->lock);
    begin(c, 0, UINT64_MAX, cause, 0);
}

static uint64_t sink_begin(void *arg, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    return mrc_cache_unmap_begin(arg, addr, len, cause);
}

static void sink_done(void *arg, uint64_t ticket, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    mrc_cache_unmap_done(arg, ticket, addr, len, cause);
}

void mrc_cache_sink(struct mrc_cache *c, struct mrc_inval_sink *s)
{
    s->armed = &c->active;
    s->begin = sink_begin;
    s->done = sink_done;
    s->arg = c;
}

/* Finishes the runs unmaps parked, at least one (under the lock): each entry as inval_one_locked
 * takes it, then nparked back to 0 with a release store, after every flag it cleared.
 * Never in a hook: it counts statistics (see stats_ready). */
void mrc_cache_settle_runs_locked(struct mrc_cache *c)
{
    unsigned n = c->nparked;
    for (unsigned i = 0; i < n; i++) {
        struct inval_batch b = { c, 0, 0, 0, 0 };
        uint64_t k = mrc_itree_walk_run(c->parked[i].run, inval_one_locked, &b);
        inval_count_locked(c, &b, k);
        inval_stats(k, c->parked[i].cause);
        /* Recorded, not told: this thread is not the unmapper, and holds the lock; the
         * gates and the helper read the pending word. */
        if (b.in_use && c->parked[i].report)
            mrc_cache_in_use_note_locked(c, c->parked[i].first, c->parked[i].last, c->parked[i].seq,
                                         c->parked[i].cause);
    }
    c->parked_bytes = 0;
    __atomic_store_n(&c->nparked, 0u, __ATOMIC_RELEASE);
}

void mrc_cache_settle(struct mrc_cache *c)
{
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    pthread_mutex_unlock(&c->lock);
}
