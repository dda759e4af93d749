/* cache_priv.h - what the cache core's files share (cache.c: lookup, registration,
 * release, eviction; cache_inval.c: invalidation; cache_dereg.c: deregistration and the
 * failed list): relaxed accessors, the entry of a tree node, the LRU and young-set steps
 * both take, the deregistration steps. Not for other layers. Everything here runs under
 * the cache lock unless it says otherwise. */
#ifndef MRC_CACHE_PRIV_H
#define MRC_CACHE_PRIV_H

#include <stddef.h>

#include "core/cache.h"

#define LD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define ST(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

static inline struct mrc_entry *mrc_entry_of(struct mrc_itree_node *n)
{
    return (struct mrc_entry *)((char *)n - offsetof(struct mrc_entry, node));
}

static inline void lru_unlink(struct mrc_entry *e)
{
    e->lru_prev->lru_next = e->lru_next;
    e->lru_next->lru_prev = e->lru_prev;
    e->lru_next = e->lru_prev = NULL;
}

/* Takes young[i] out; the last one moves into its place. */
static inline void young_remove_at_locked(struct mrc_cache *c, unsigned i)
{
    unsigned n = LD(&c->nyoung) - 1;
    c->young[i] = c->young[n];
    ST(&c->nyoung, n);
}

/* Whether a young entry may overlap [first, last]. */
static inline int young_may_overlap(const struct mrc_cache *c, uint64_t first, uint64_t last)
{
    return LD(&c->nyoung) && c->young_first <= last && first <= c->young_last;
}

/* Counters of one invalidation, applied once at its end (under the lock throughout). */
struct inval_batch {
    struct mrc_cache *c;
    uint64_t bytes, ndeferred, deferred_bytes;
    uint32_t in_use;              /* an entry taken had a user */
};

/* An entry the tree has just let go of (mrc_itree_remove_range's and
 * mrc_itree_walk_run's callback): what cache.c's entry_remove_locked and
 * drop_tree_ref_locked do, with the counters batched. One atomic read-modify-write per
 * entry: the reference drop, which also orders the IN_TREE clear before any hint
 * reader's later increment (see entry_remove_locked). */
static inline void inval_one_locked(struct mrc_itree_node *node, void *arg)
{
    struct inval_batch *b = arg;
    struct mrc_entry *e = mrc_entry_of(node);
    uint64_t len = mrc_entry_len(e);
    ST(&e->flags, LD(&e->flags) & ~MRC_E_IN_TREE);
    lru_unlink(e);
    b->bytes += len;
    if (__atomic_fetch_sub(&e->ref, 1, __ATOMIC_SEQ_CST) == 1) {
        e->lru_next = b->c->deferred;
        b->c->deferred = e;
        b->ndeferred++;
        b->deferred_bytes += len;
    } else {
        b->in_use = 1;
    }
}

/* Applies n invalidated entries' counters (under the lock). */
static inline void inval_count_locked(struct mrc_cache *c, const struct inval_batch *b, uint64_t n)
{
    if (!n)
        return;
    __atomic_store_n(&c->tree_count, c->tree_count - n, __ATOMIC_RELEASE);   /* as entry_remove_locked */
    c->tree_bytes -= b->bytes;
    ST(&c->ndeferred, c->ndeferred + b->ndeferred);
    ST(&c->deferred_bytes, c->deferred_bytes + b->deferred_bytes);
}

static inline void inval_stats(uint64_t n, enum mrc_inval_cause cause)
{
    if (!n)
        return;
    mrc_stat_add(MRC_STAT_INVALIDATED, n);
    mrc_stat_add((enum mrc_stat)(MRC_STAT_INVAL_BASE + cause), n);
}

/* ---- registrations held out of the tree, and in-use records (cache_held.c) ---- */

/* e (ref set, out of the tree) goes into the held tree (under the lock). */
void mrc_cache_held_add_locked(struct mrc_cache *c, struct mrc_entry *e);

/* Takes e out of the held tree if it is there (under the lock). */
void mrc_cache_held_remove_locked(struct mrc_cache *c, struct mrc_entry *e);

/* The same, taking the lock for it (none for an entry never held). Not from a hook. */
void mrc_cache_held_remove(struct mrc_cache *c, struct mrc_entry *e);

/* Settles parked runs (taking the lock). Not from a hook. */
void mrc_cache_settle(struct mrc_cache *c);

/* Whether a held registration overlaps [first, last] (under the lock). */
int mrc_cache_held_overlaps_locked(const struct mrc_cache *c, uint64_t first, uint64_t last);

/* Records an invalidation of [first, last] that found a holder (under the lock): in the
 * ring, or counted as lost when it is full. The caller calls mrc_cache_in_use_notify
 * once the lock is let go. */
void mrc_cache_in_use_note_locked(struct mrc_cache *c, uint64_t first, uint64_t last, uint64_t seq,
                                  enum mrc_inval_cause cause);

/* Tells the in_use callback of record seq (without the lock). */
static inline void mrc_cache_in_use_notify(struct mrc_cache *c, uint64_t seq)
{
    if (c->p.in_use)
        c->p.in_use(c->p.in_use_arg, seq);
}

/* ---- deregistration (cache_dereg.c; never under the lock, never in a hook) ---- */

/* The back-end's deregistration of reg, made over [addr, addr+len): timed and counted,
 * and the range unwatched once it is gone, unless the back-end only let go of a
 * registration it shares (shared: what its reg returned, MRC_REG_SHARED). 0 or its
 * -errno. */
int mrc_cache_backend_dereg(struct mrc_cache *c, void *reg, uint64_t addr, uint64_t len, int shared);

/* A dead entry whose registration is no longer the cache's (deregistered, or handed to
 * a caller): out of the gauges, back to the pool. */
void mrc_cache_entry_free(struct mrc_cache *c, struct mrc_entry *e);

/* Deregisters a dead entry (ref 0, out of the tree) and returns it to the pool: 0, or
 * the back-end's -errno, counted, and the entry is left as it was. */
int mrc_cache_dereg_try(struct mrc_cache *c, struct mrc_entry *e);

/* The same, a refused entry kept on the failed list (it takes the lock for that). */
void mrc_cache_dereg_entry(struct mrc_cache *c, struct mrc_entry *e);

/* mrc_cache_dereg_entry for each entry of a list linked through lru_next. */
void mrc_cache_dereg_list(struct mrc_cache *c, struct mrc_entry *list);

/* Under the lock: takes the failed entries for which match(e, arg) (all with match NULL)
 * off the list, for mrc_cache_failed_retry once the lock is let go. */
struct mrc_entry *mrc_cache_failed_take_locked(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg),
                                               void *arg);

/* The same, taking the lock for it (none while nfailed reads 0). */
struct mrc_entry *mrc_cache_failed_take(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg),
                                        void *arg);

/* Under the lock, for a miss: all of them if the wait since the last retry is over
 * (the wait doubles each time, up to 4096 misses), else NULL. */
struct mrc_entry *mrc_cache_failed_due_locked(struct mrc_cache *c);

/* Deregisters a taken list; those refused again go back on the failed list. Returns
 * how many did. */
uint64_t mrc_cache_failed_retry(struct mrc_cache *c, struct mrc_entry *list);

#endif
