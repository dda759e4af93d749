/* cache_held.c - registrations held out of the cache's tree, and what an invalidation
 * tells about them: the held tree of those a caller holds (private ones, and those
 * retired from the tree while held), a registration taken out of the cache by its only
 * holder, and the ring of invalidations that took memory from under a holder, for the
 * layer above to find which of its handles outlived their memory.
 * Invariants: nothing here allocates or calls the back-end; the ring never blocks an
 * invalidation (a full ring counts the record as lost); a taken registration is the
 * caller's alone (out of the gauges, unwatched). */
#include <errno.h>
#include <sched.h>
#include <stdint.h>

#include "core/cache.h"
#include "core/cache_priv.h"

void mrc_cache_held_add_locked(struct mrc_cache *c, struct mrc_entry *e)
{
    ST(&e->flags, LD(&e->flags) | MRC_E_HELD);
    mrc_itree_insert(&c->held, &e->node);
    __atomic_store_n(&c->nheld, c->nheld + 1, __ATOMIC_SEQ_CST);
}

void mrc_cache_held_remove_locked(struct mrc_cache *c, struct mrc_entry *e)
{
    if (!(LD(&e->flags) & MRC_E_HELD))
        return;
    ST(&e->flags, LD(&e->flags) & ~MRC_E_HELD);
    mrc_itree_remove(&c->held, &e->node);
    __atomic_store_n(&c->nheld, c->nheld - 1, __ATOMIC_SEQ_CST);
}

void mrc_cache_held_remove(struct mrc_cache *c, struct mrc_entry *e)
{
    /* Only the holder releasing e changes its flag: no lock needed to see it unset. */
    if (!(LD(&e->flags) & MRC_E_HELD))
        return;
    pthread_mutex_lock(&c->lock);
    mrc_cache_held_remove_locked(c, e);
    pthread_mutex_unlock(&c->lock);
}

int mrc_cache_held_overlaps_locked(const struct mrc_cache *c, uint64_t first, uint64_t last)
{
    return c->nheld && mrc_itree_iter_first(&c->held, first, last) != NULL;
}

void mrc_cache_in_use_note_locked(struct mrc_cache *c, uint64_t first, uint64_t last, uint64_t seq,
                                  enum mrc_inval_cause cause)
{
    if (c->inuse_head - c->inuse_tail == MRC_INUSE_RING) {
        c->inuse_lost++;
    } else {
        struct mrc_inuse_rec *r = &c->inuse[c->inuse_head % MRC_INUSE_RING];
        r->first = first;
        r->last = last;
        r->seq = seq;
        r->cause = cause;
        c->inuse_head++;
    }
    __atomic_store_n(&c->inuse_pending, 1u, __ATOMIC_RELEASE);
}

unsigned mrc_cache_in_use_peek(struct mrc_cache *c, struct mrc_inuse_rec *out, unsigned max, uint64_t *pos)
{
    unsigned n = 0;
    *pos = 0;
    if (!mrc_cache_in_use_pending(c) && !LD(&c->nparked))
        return 0;
    mrc_cache_settle(c);
    pthread_mutex_lock(&c->lock);
    *pos = c->inuse_tail;
    for (uint64_t i = c->inuse_tail; n < max && i != c->inuse_head; i++)
        out[n++] = c->inuse[i % MRC_INUSE_RING];
    pthread_mutex_unlock(&c->lock);
    return n;
}

uint64_t mrc_cache_in_use_retire(struct mrc_cache *c, uint64_t pos, unsigned n)
{
    pthread_mutex_lock(&c->lock);
    if (c->inuse_tail == pos && c->inuse_head - pos >= n)
        c->inuse_tail = pos + n;
    uint64_t lost = c->inuse_lost;
    c->inuse_lost = 0;
    if (c->inuse_tail == c->inuse_head)
        __atomic_store_n(&c->inuse_pending, 0u, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&c->lock);
    return lost;
}

int mrc_cache_take(struct mrc_cache *c, struct mrc_entry *e, void **reg)
{
    stats_ready();
    /* A lookup may hold e for a moment through a stale hint (it lets go at once): a
     * few tries before saying someone else holds it. */
    for (int tries = 0; tries < 4; tries++) {
        pthread_mutex_lock(&c->lock);
        settle_locked(c);   /* a parked entry is out of the tree already */
        uint32_t in_tree = LD(&e->flags) & MRC_E_IN_TREE;
        uint32_t want = in_tree ? 2 : 1, seen = want;   /* the tree's and ours, or ours */
        int ok = __atomic_compare_exchange_n(&e->ref, &seen, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
        if (ok && in_tree)
            entry_remove_locked(c, e);
        if (ok)
            mrc_cache_held_remove_locked(c, e);
        pthread_mutex_unlock(&c->lock);
        if (ok) {
            /* The registration is the caller's now: no longer the cache's to count or
             * watch (its new owner deregisters it without the cache). */
            if (e->unpinned != MRC_REG_SHARED)
                c->p.src.unwatch(mrc_entry_start(e), mrc_entry_len(e));
            *reg = e->reg;
            mrc_cache_entry_free(c, e);
            return 0;
        }
        if (seen <= want)
            break;
        sched_yield();
    }
    return -EBUSY;
}

void mrc_cache_retire(struct mrc_cache *c, struct mrc_entry *e)
{
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    if (LD(&e->flags) & MRC_E_IN_TREE) {
        entry_remove_locked(c, e);
        drop_tree_ref_locked(c, e);   /* the caller's reference keeps it alive */
        mrc_cache_held_add_locked(c, e);
    }
    pthread_mutex_unlock(&c->lock);
}
