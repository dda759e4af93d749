/* cache_priv.h - what the cache core's files share (cache.c: the get and the put,
 * eviction; cache_reg.c: a miss's registration; cache_inval.c: invalidation and
 * settling; cache_dereg.c: deregistration and the failed list; cache_held.c: what is held
 * out of the tree; cache_walk.c: flush, expiry and the other walks): relaxed accessors,
 * the entry of a tree node, the tree, LRU and young-set steps they take, a miss on its
 * way, the deregistration steps. Not for other layers. Everything here runs under
 * the cache lock unless it says otherwise. */
#ifndef MRC_CACHE_PRIV_H
#define MRC_CACHE_PRIV_H

#include <stddef.h>

#include "core/cache.h"
#include "util/hot.h"

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

/* Makes sure the calling thread's statistics block exists before it takes the lock:
 * creating one may allocate (pthread_setspecific), which the lock must never be held
 * across; settling and deferring count statistics under it. */
MRC_HOT static inline void stats_ready(void)
{
    (void)mrc_stats_block();
}

MRC_HOT static inline void lru_add_tail(struct mrc_cache *c, struct mrc_entry *e)
{
    uint64_t clock = c->lru_clock + 1;
    ST(&c->lru_clock, clock);
    ST(&e->lru_stamp, clock);
    e->lru_prev = c->lru.lru_prev;
    e->lru_next = &c->lru;
    c->lru.lru_prev->lru_next = e;
    c->lru.lru_prev = e;
}

/* Takes e out of the tree (or the young set) and the LRU (under the lock). The caller
 * then drops or owns the tree's reference. */
MRC_HOT static inline void entry_remove_locked(struct mrc_cache *c, struct mrc_entry *e)
{
    unsigned i = 0, n = LD(&c->nyoung);
    while (i < n && c->young[i].e != e)
        i++;
    if (i < n)
        young_remove_at_locked(c, i);
    else
        mrc_itree_remove(&c->tree, &e->node);
    /* A plain (relaxed) store: only lock holders write a tree entry's flags, and the
     * caller's later release of the tree's reference (a seq_cst RMW) orders it before
     * any hint reader's increment that follows, which then sees the flag clear. */
    ST(&e->flags, LD(&e->flags) & ~MRC_E_IN_TREE);
    lru_unlink(e);
    /* Release: an unmap that reads the new count without the lock (its shortcut) must
     * also see the flag clear and the reference drop made before it. */
    __atomic_store_n(&c->tree_count, c->tree_count - 1, __ATOMIC_RELEASE);
    c->tree_bytes -= mrc_entry_len(e);
}

/* Drops the tree's reference of a removed entry; if that was the last, the entry goes on
 * the deferred list (under the lock, so this is safe inside hooks). */
MRC_HOT static inline void drop_tree_ref_locked(struct mrc_cache *c, struct mrc_entry *e)
{
    if (__atomic_fetch_sub(&e->ref, 1, __ATOMIC_SEQ_CST) == 1) {
        e->lru_next = c->deferred;
        c->deferred = e;
        ST(&c->ndeferred, c->ndeferred + 1);
        ST(&c->deferred_bytes, c->deferred_bytes + mrc_entry_len(e));
    }
}

/* Whether the tree is past one of its limits (under the lock). */
MRC_HOT static inline int over_limits_locked(const struct mrc_cache *c)
{
    return c->tree_count > c->p.max_entries || c->tree_bytes > c->p.max_bytes;
}

/* Takes e out of the tree and onto *victims (linked through lru_next) if it is idle, the
 * tree's reference its only one, which the caller then owns: whether it did. */
static inline int evict_idle_locked(struct mrc_cache *c, struct mrc_entry *e, struct mrc_entry **victims)
{
    uint32_t idle = 1;
    if (!__atomic_compare_exchange_n(&e->ref, &idle, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return 0;
    entry_remove_locked(c, e);
    e->lru_next = *victims;
    *victims = e;
    return 1;
}

MRC_HOT static inline struct mrc_entry *take_deferred_locked(struct mrc_cache *c)
{
    struct mrc_entry *list = c->deferred;
    if (list)
        mrc_stat_add(MRC_STAT_DEFERRED, c->ndeferred);
    c->deferred = NULL;
    ST(&c->ndeferred, 0u);
    ST(&c->deferred_bytes, 0u);
    return list;
}

/* Counts a new back-end registration of len bytes in the gauges (under the lock). A
 * peak can only be reached when a registration is made, so checking here is exact. */
MRC_HOT static inline void gauge_made_locked(struct mrc_cache *c, uint64_t len)
{
    ST(&c->reg_made, c->reg_made + 1);
    ST(&c->reg_made_bytes, c->reg_made_bytes + len);
    uint64_t n = c->reg_made - LD(&c->reg_freed), b = c->reg_made_bytes - LD(&c->reg_freed_bytes);
    if (n > c->reg_count_peak)
        ST(&c->reg_count_peak, n);
    if (b > c->reg_bytes_peak) {
        ST(&c->reg_bytes_peak, b);
        if (__builtin_expect(c->p.pinned_notice_bytes && b > c->p.pinned_notice_bytes && !c->pinned_noticed, 0)) {
            c->pinned_noticed = 1;
            c->p.pinned_notice(b);
        }
    }
}

/* Fills in a fresh entry (ref still 0) for a registration just made; the caller counts
 * it in the gauges (gauge_made_locked). */
MRC_HOT static inline void entry_init(struct mrc_cache *c, struct mrc_entry *e, void *domain, uint64_t first,
                                      uint64_t last, int64_t iova_off, uint32_t access, void *reg, int unpinned)
{
    /* Relaxed atomic stores: a stale hint may be reading these; it cannot take a
     * reference until ref is published non-zero. */
    ST(&e->node.start, first);
    ST(&e->node.last, last);
    ST(&e->domain, domain);
    ST(&e->iova_off, iova_off);
    ST(&e->access, access);
    ST(&e->flags, 0u);
    ST(&e->used, LD(&c->idle_clock));
    e->unpinned = (uint32_t)unpinned;
    e->reg = reg;
}

/* A miss on its way (cache.c's get, cache_reg.c's registration): the request, and the
 * range it registers. */
struct mrc_miss {
    void *domain;
    uint64_t first, last;         /* the request, byte-exact */
    int64_t iova_off;
    uint32_t access;
    int merge;                    /* local-only at iova == addr: rounded to pages, merged */
    int kin;                      /* the lookup saw an entry of the key inside [rf, rl] */
    int expanded;                 /* the expand hook's wider range was registered */
    uint64_t qf, ql;              /* the request as registered (rounded when merging) */
    uint64_t rf, rl;              /* what is registered: the request merged, or expanded */
    uint64_t made0, seq0;         /* reg_made and inval_seq when it was announced */
    struct mrc_range range;       /* what is known of [qf, ql], asked once, handed along */
};

/* Evicts idle entries, least recently used first, until the tree is within its limits
 * (or everything idle when all is set), onto victims; returns them, linked through
 * lru_next (cache_walk.c). The caller applies its thread's pending LRU moves first
 * where the order matters. */
struct mrc_entry *mrc_cache_evict_locked(struct mrc_cache *c, int all, struct mrc_entry *victims);

/* ---- a miss's registration (cache_reg.c; never under the lock) ---- */

/* Registers what miss m needs: the expanded range, else the merged one, else its own
 * request; m's range and expanded say which. 0 or MRC_REG_* (*reg set), or -errno. */
int mrc_cache_miss_register(struct mrc_cache *c, struct mrc_miss *m, void **reg);

/* A registration of [first, last] handed to one caller and deregistered at its release
 * (*out, one reference): 0 or -errno. */
int mrc_cache_get_private(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last, int64_t iova_off,
                          uint32_t access, struct mrc_entry **out);

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

/* The same under the lock (cache_inval.c), when there are some. */
void mrc_cache_settle_runs_locked(struct mrc_cache *c);

/* Finishes the runs unmaps parked, if any (under the lock). Never in a hook: it counts
 * statistics (see stats_ready). */
MRC_HOT static inline void settle_locked(struct mrc_cache *c)
{
    if (c->nparked)
        mrc_cache_settle_runs_locked(c);
}

/* ---- the walks of the whole cache (cache_walk.c) ---- */

/* mrc_cache_flush, with how many of the entries that stay the back-end refused. */
uint64_t mrc_cache_flush_counted(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg), void *arg,
                                 uint64_t *refused);

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
