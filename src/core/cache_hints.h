/* cache_hints.h - what a get looks at before the tree, without the lock: whether an
 * entry serves a request (matching), a thread's hints and the cache's shared hints, and
 * the thread's state that holds its hints (with cache.c's pending LRU moves and spare
 * entries). Static inline and included by cache.c alone: every hit runs them.
 * Invariants: a hint is only ever a guess: an entry is taken through one with
 * increment-unless-zero, then checked to still serve the request, be in the tree and lie
 * outside every parked range (entries are type-stable: a stale hint is safe to read). */
#ifndef MRC_CACHE_HINTS_H
#define MRC_CACHE_HINTS_H

#include <stdint.h>

#include "core/cache.h"
#include "core/cache_priv.h"
#include "util/hot.h"
#include "util/sys.h"

#define HINTS 64   /* per thread: 32 sets of 2 (a set on one cache line), by the request's first page */
#define SHARED_SETS (1u << 15)   /* the cache's shared hints: 32k sets of 2, 1 MiB mapped */
#define BATCH 16
#define SPARES 16  /* entries a thread takes from the pool at once, for its next misses */

/* A recently used entry, with the first page of the request it served: a lookup for
 * another page skips it without reading the entry (a miss then touches no other
 * entry's cold lines). */
struct mrc_hint {
    uint64_t page;
    struct mrc_entry *e;
};

struct mrc_thread_state {
    uint64_t cache_id;
    struct mrc_hint hint[HINTS];
    struct mrc_entry *batch[BATCH];   /* released entries whose LRU move is pending */
    unsigned nbatch;
    /* A miss takes its entry from here: no pool lock (two locked instructions and a
     * line other threads write) on the miss path, one acquisition per SPARES misses.
     * spare[next..end) are left, in the pool's (ascending) order. */
    unsigned spare_next, spare_end;
    int spares_keyed;                 /* spare_key holds the cache: spares return at exit */
    struct mrc_entry *spare[SPARES];
};

/* ---- matching ---- */

MRC_HOT static inline int is_remote(const struct mrc_cache *c, uint32_t access)
{
    return (access & c->p.remote_mask) != 0;
}

/* Whether e can serve [first, last] for (domain, iova_off, access). Reads with relaxed
 * atomics because a lock-free caller may be looking at an entry being reused; such a
 * caller repeats the test once it holds a reference. */
MRC_HOT static inline int entry_serves(const struct mrc_cache *c, const struct mrc_entry *e, void *domain,
                                       uint64_t first, uint64_t last, int64_t iova_off, uint32_t access)
{
    if (LD(&e->domain) != domain || LD(&e->iova_off) != iova_off)
        return 0;
    uint32_t ea = LD(&e->access);
    uint64_t es = LD(&e->node.start), el = LD(&e->node.last);
    if (is_remote(c, access)) {
        /* A peer must reach exactly what the app exposed, with exactly these rights. */
        return ea == access && es == first && el == last;
    }
    uint32_t super = c->p.local_super_mask;
    return !is_remote(c, ea) && (ea & ~super) == (access & ~super) && (ea & access) == access &&
           es <= first && last <= el;
}

MRC_HOT static inline int ref_get_unless_zero(uint32_t *ref)
{
    uint32_t v = __atomic_load_n(ref, __ATOMIC_RELAXED);
    while (v != 0)
        if (__atomic_compare_exchange_n(ref, &v, v + 1, 1, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            return 1;
    return 0;
}

/* The hint set of a request: its first page and domain, hashed, to a pair of slots
 * (two-way, so that a thread cycling through dozens of buffers rarely evicts one it is
 * about to reuse), found without the lock. */
MRC_HOT static inline unsigned hint_set(const void *domain, uint64_t first)
{
    uint64_t k = (first >> 12) ^ ((uintptr_t)domain >> 4);
    return (unsigned)((k * 0x9e3779b97f4a7c15ull) >> 59) * 2;
}

MRC_HOT static inline void hint_add(struct mrc_thread_state *t, struct mrc_entry *e, const void *domain, uint64_t first)
{
    unsigned s = hint_set(domain, first);
    uint64_t page = first >> 12;
    if ((t->hint[s].e == e && t->hint[s].page == page) || (t->hint[s + 1].e == e && t->hint[s + 1].page == page))
        return;
    /* The newer one goes first, the older one moves to the second way. */
    t->hint[s + 1] = t->hint[s];
    t->hint[s] = (struct mrc_hint){ page, e };
}

/* Whether e, held, may be in a run an unmap parked: it overlaps a parked range. Acquire
 * loads, read before the caller's test of IN_TREE: seeing nparked (or a slot) as written
 * by a later lock holder means seeing the flags that drain cleared before it. */
MRC_HOT static inline int in_parked_run(const struct mrc_cache *c, const struct mrc_entry *e)
{
    unsigned n = __atomic_load_n(&c->nparked, __ATOMIC_ACQUIRE);
    if (__builtin_expect(n == 0, 1))
        return 0;
    uint64_t es = LD(&e->node.start), el = LD(&e->node.last);
    for (unsigned i = 0; i < n; i++)
        if (__atomic_load_n(&c->parked[i].first, __ATOMIC_ACQUIRE) <= el &&
            es <= __atomic_load_n(&c->parked[i].last, __ATOMIC_ACQUIRE))
            return 1;
    return 0;
}

MRC_HOT static inline struct mrc_entry *hint_try(struct mrc_cache *c, const struct mrc_hint *h, void *domain,
                                                 uint64_t first, uint64_t last, int64_t iova_off, uint32_t access)
{
    struct mrc_entry *e = h->e;
    if (!e || h->page != first >> 12 || !entry_serves(c, e, domain, first, last, iova_off, access))
        return NULL;
    if (!ref_get_unless_zero(&e->ref))
        return NULL;
    /* Holding a reference freezes the key: test again, and that it is still findable
     * (an invalidation clears IN_TREE before it drops the tree's reference; a parked
     * one, before it publishes nparked without the run). */
    if (!in_parked_run(c, e) && (__atomic_load_n(&e->flags, __ATOMIC_SEQ_CST) & MRC_E_IN_TREE) &&
        entry_serves(c, e, domain, first, last, iova_off, access))
        return e;
    mrc_cache_drop(c, e);   /* perhaps the last reference: nobody here could keep it */
    return NULL;
}

MRC_HOT static inline struct mrc_entry *hint_lookup(struct mrc_cache *c, struct mrc_thread_state *t, void *domain,
                                                    uint64_t first, uint64_t last, int64_t iova_off, uint32_t access)
{
    unsigned s = hint_set(domain, first);
    struct mrc_entry *e = hint_try(c, &t->hint[s], domain, first, last, iova_off, access);
    return e ? e : hint_try(c, &t->hint[s + 1], domain, first, last, iova_off, access);
}

/* ---- shared hints ----
 * A thread's 64 hints serve a program that reuses a few dozen buffers; one that cycles
 * through thousands would find each in the tree, under the lock, down ~20 nodes that
 * are all cold for 1M entries (127 ns a hit here, against UCX's 39). The cache's shared
 * hints, set by every lookup the tree answered, serve those without the lock: one slot
 * and the entry read. Any thread writes them, each field with a relaxed store, so a
 * reader may see one slot's page with another's entry: hint_try checks the entry
 * itself, as it does a thread's stale hint. Misses add none: a buffer registered once
 * costs no store, and the table's pages are touched only by buffers used again. The table
 * is mapped when the first is set (a program that never reuses a buffer maps none, and
 * a forked child, whose cache starts anew, never reads its parent's); until then lookups
 * read none, so a program that only misses pays nothing (a probe of the cold table
 * costs a miss ~15 ns). */

#define SHARED_BYTES (2 * SHARED_SETS * sizeof(struct mrc_hint))

/* The table, mapped by the first caller that needs it (a racing one unmaps its own), or
 * NULL without memory: the hints are then skipped. */
MRC_HOT static inline struct mrc_hint *shared_table(struct mrc_cache *c)
{
    struct mrc_hint *tab = __atomic_load_n(&c->shared, __ATOMIC_ACQUIRE);
    if (tab || LD(&c->shared_failed))
        return tab;
    int saved = errno;
    tab = mrc_raw_map(SHARED_BYTES, MAP_NORESERVE);
    struct mrc_hint *none = NULL;
    if (!tab) {
        ST(&c->shared_failed, 1u);   /* tried once: lookups go to the tree from now on */
    } else if (!__atomic_compare_exchange_n(&c->shared, &none, tab, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        mrc_raw_unmap(tab, SHARED_BYTES);
        tab = none;
    }
    errno = saved;
    return tab;
}

MRC_HOT static inline unsigned shared_set(const void *domain, uint64_t first)
{
    uint64_t k = (first >> 12) ^ ((uintptr_t)domain >> 4);
    /* Folded first: buffers 128 KiB apart otherwise crowd 4096 requests into 2284 sets,
     * and one in nine then falls to the tree every time. */
    k ^= k >> 15;
    return (unsigned)((k * 0x9e3779b97f4a7c15ull) >> (64 - 15)) * 2;
}

MRC_HOT static inline struct mrc_entry *shared_lookup(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last,
                                                      int64_t iova_off, uint32_t access)
{
    struct mrc_hint *tab = __atomic_load_n(&c->shared, __ATOMIC_ACQUIRE);
    if (!tab)
        return NULL;
    struct mrc_hint *set = &tab[shared_set(domain, first)];
    for (int i = 0; i < 2; i++) {
        struct mrc_hint h = { LD(&set[i].page), LD(&set[i].e) };
        struct mrc_entry *e = hint_try(c, &h, domain, first, last, iova_off, access);
        if (e)
            return e;
    }
    return NULL;
}

MRC_HOT static inline void shared_add(struct mrc_cache *c, struct mrc_entry *e, const void *domain, uint64_t first)
{
    struct mrc_hint *tab = shared_table(c);
    if (!tab)
        return;
    struct mrc_hint *set = &tab[shared_set(domain, first)];
    uint64_t page = first >> 12;
    if (LD(&set[0].e) == e && LD(&set[0].page) == page)
        return;
    /* The newer one goes first, the older one moves to the second way. */
    ST(&set[1].page, LD(&set[0].page));
    ST(&set[1].e, LD(&set[0].e));
    ST(&set[0].page, page);
    ST(&set[0].e, e);
}

#endif
