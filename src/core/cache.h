/* cache.h - the registration cache: an interval tree of back-end registrations keyed by
 * (domain, access, iova offset), reference-counted, deregistered lazily. Knows nothing
 * of verbs: the back-end plugs in through mrc_cache_ops, and tests plug in a fake.
 * Internal functions return 0 or -errno.
 * Invariants: the cache lock is never held across a back-end call or an allocation
 * through malloc; mrc_cache_invalidate never calls the back-end and, when it returns,
 * no lookup can return an entry overlapping its range; a deregistration the back-end
 * refuses is never forgotten: the entry stays registered and counted (the failed list)
 * until a retry succeeds. */
#ifndef MRC_CACHE_H
#define MRC_CACHE_H

#include <pthread.h>
#include <stdint.h>

#include "core/itree.h"
#include "core/events.h"
#include "util/pool.h"
#include "util/stats.h"

/* What a back-end registration says of itself, besides 0 (it pins its pages). */
#define MRC_REG_UNPINNED 1   /* made, pins nothing: out of the pinned gauges */
#define MRC_REG_SHARED 2     /* no registration made: one the back-end shares serves it
                              * (out of the pinned gauges, not counted as a registration) */

/* A back-end registration of [addr, addr+len) at iova with access in domain goes: the
 * sources checked, shared (a registration the back-end shares may serve it: nothing
 * pinned, nothing watched), else prepare (what the back-end does to the memory first),
 * the sources watch the range, reg pins it. In each, r describes [addr, addr+len) (ask it
 * what is needed: mrc_range_ask). */
struct mrc_cache_ops {
    /* Optional: 1 and *reg if a registration the back-end shares serves the request
     * (MRC_REG_SHARED: deregistering it only lets go of the share); else 0. Not asked
     * for the last try. */
    int (*shared)(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                  struct mrc_range *r, void **reg);
    /* Optional: before each pin (reg and reg_last), before the range is watched (a watched
     * range may refuse what preparation asks of the kernel, as MADV_COLLAPSE does). */
    void (*prepare)(void *ctx, uint64_t addr, uint64_t len, uint32_t access, struct mrc_range *r);
    /* Pins: 0 or MRC_REG_UNPINNED and *reg set, or -errno. */
    int (*reg)(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
               uint32_t access, struct mrc_range *r, void **reg);
    /* Deregisters what reg made: 0 or -errno (the registration then still stands, and
     * is asked again later). Never called from mrc_cache_invalidate. */
    int (*dereg)(void *ctx, void *reg);
    void *ctx;
    /* Optional: the last try, when reg still fails with -ENOMEM/-EAGAIN after every idle
     * entry was released: may register in a way that pins nothing (prepared and watched
     * as reg). As reg; if it fails, the caller gets reg's error. */
    int (*reg_last)(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                    uint32_t access, struct mrc_range *r, void **reg);
    /* Optional: a get is about to hand out reg, which pins nothing (MRC_REG_UNPINNED or
     * MRC_REG_SHARED), for [iova, iova+len) with access: the back-end may have its pages
     * faulted in ahead of the first access. Without the cache lock; must not call back
     * into the cache. */
    void (*prefetch)(void *ctx, void *domain, void *reg, uint64_t iova, uint64_t len, uint32_t access);
    /* Optional: mrc_cache_flush_domain has deregistered domain's idle entries (its owner
     * is about to free it): what the back-end keeps for the domain may go. */
    void (*domain_flushed)(void *ctx, void *domain);
};

enum mrc_remote_policy {
    MRC_REMOTE_EXACT,   /* remote-access registrations cached, served only to identical requests */
    MRC_REMOTE_NEVER,   /* remote-access registrations never cached: rkeys die at dereg */
};

struct mrc_cache_params {
    struct mrc_cache_ops ops;
    /* What the core asks of the sources of memory events around its registrations: the
     * range of each back-end registration watched from before its pin until it is gone
     * (a shared one, MRC_REG_SHARED, never: nothing of it is pinned), pending
     * events flushed at every get, a check before each registration. */
    struct mrc_event_sources src;
    uint64_t max_entries;        /* idle entries are evicted (LRU) past this many in the tree */
    uint64_t max_bytes;          /* ... or past this many registered bytes in the tree */
    uint64_t max_entry_bytes;    /* a request larger than this is never kept: registered for
                                  * its caller alone (0: no such bound); merges stay within it */
    uint64_t max_deferred_bytes; /* past this many deferred bytes (and parked runs' ranges),
                                  * deferred_full is called */
    uint64_t page_size;
    uint32_t remote_mask;        /* access bits that grant a peer anything: matched exactly */
    uint32_t local_super_mask;   /* bits a local-only request may be given more of */
    enum mrc_remote_policy remote_policy;
    /* Optional: called (from any context, hooks included, without the cache lock) when
     * deferred deregistrations, with the ranges of parked runs (see
     * mrc_cache_unmap_begin), exceed max_deferred_bytes, so that someone outside the hook
     * drains them even if the program makes no further cache call. Must not allocate,
     * block or call back into the cache. */
    void (*deferred_full)(void *arg);
    void *deferred_full_arg;
    /* Optional: asked by a miss, before it registers r's range (its request rounded to
     * pages), while *admit_armed is non-zero (one load otherwise; NULL: never): a
     * non-zero answer makes the registration its caller's alone (registered for it and
     * deregistered at its release, counted as uncached). Called without the cache lock;
     * must not call back into the cache. */
    const uint32_t *admit_armed;
    int (*admit)(void *arg, struct mrc_range *r);
    void *admit_arg;
    /* Optional (NULL: never): asked by a local-only miss at iova == addr for its request
     * (r: rounded to pages), before it registers [*first, *last] (that request merged with
     * its neighbours): a non-zero answer widens the range to what it set, which must
     * contain the old one. The wider range is registered once, without evicting
     * anything for it; if the back-end refuses, the miss registers its own range as if
     * never asked. Called without the cache lock; must not call back into the cache. */
    int (*expand)(void *arg, struct mrc_range *r, uint32_t access, uint64_t *first, uint64_t *last);
    void *expand_arg;
    /* Optional: the keys the NIC and a peer know a back-end registration by, for
     * mrc_cache_largest. Called under the cache lock: must only read reg. */
    void (*keys)(const void *reg, uint32_t *lkey, uint32_t *rkey);
    /* Optional: called once, the first time a registration makes the bytes registered
     * through the cache (cached, in use, deferred) pass pinned_notice_bytes (0: never),
     * with those bytes. Under the cache lock: must not allocate or call into the cache
     * (a log line written with write(2) is what it is for). */
    uint64_t pinned_notice_bytes;
    void (*pinned_notice)(uint64_t bytes);
    /* Optional: called after an invalidation took memory from under a registration
     * someone holds (an entry in use, or one handed to its caller alone) and recorded
     * it for mrc_cache_in_use_peek under seq. From the invalidating thread (any hook),
     * without the cache lock (a parked run's holders are recorded when it is settled,
     * untold): must not allocate, block or call into the cache. */
    void (*in_use)(void *arg, uint64_t seq);
    void *in_use_arg;
};

/* Entry flags. */
#define MRC_E_IN_TREE 1u   /* findable; cleared (before the tree ref is dropped) on removal */
#define MRC_E_PRIVATE 2u   /* never in the tree: deregistered at its last release */
#define MRC_E_HELD 4u      /* held out of the tree (private or retired): in the held tree,
                            * so that an invalidation still sees its holders */

struct mrc_entry {
    void *pool_link;              /* the pool's while the entry is free (pool.h) */
    struct mrc_itree_node node;   /* [start, last]: the registered range */
    void *domain;
    int64_t iova_off;             /* iova - addr */
    uint32_t access;
    uint32_t ref;                 /* 1 while in the tree + 1 per user; 0 = dead */
    uint32_t flags;
    uint32_t used;                /* idle_clock at its last release (mrc_cache_expire) */
    uint32_t unpinned;            /* the back-end's word for reg, if it pins nothing
                                   * (MRC_REG_*): not in the pinned gauges */
    void *reg;                    /* the back-end's registration */
    uint64_t lru_stamp;           /* lru_clock when last moved to the LRU's tail */
    struct mrc_entry *lru_prev, *lru_next;  /* LRU while in the tree, deferred list after */
};

#define MRC_INVAL_RING 64
#define MRC_INUSE_RING 32

/* An invalidation that took memory from under a registration someone held. */
struct mrc_inuse_rec {
    uint64_t first, last;         /* the invalidated range */
    uint64_t seq;                 /* its number among invalidations: a holder whose
                                   * mrc_cache_inval_mark, read after its get, is at or
                                   * below it held its registration across the change */
    enum mrc_inval_cause cause;
};
#define MRC_PARKED 4   /* long runs an unmap may leave for mrc_cache_drain at once */
#define MRC_YOUNG 16   /* new entries held back from the tree, to be inserted together */

/* mrc_cache.misses: the low bits count misses registering right now, the high bits the
 * misses that have read inval_seq. One word, so a miss announces itself with one atomic
 * add and an unmap reads both at once. */
#define MRC_MISSES_INFLIGHT_BITS 24
#define MRC_MISSES_INFLIGHT_MASK ((UINT64_C(1) << MRC_MISSES_INFLIGHT_BITS) - 1)
#define MRC_MISSES_BEGIN ((UINT64_C(1) << MRC_MISSES_INFLIGHT_BITS) | 1)

/* Fields are grouped by who writes them, each group on cache lines of its own: a hit
 * reads the first group and writes none of them, so hits on different threads share
 * no written line. */
#define MRC_LINE __attribute__((aligned(64)))

struct mrc_cache {
    /* Read on every call, written only at init (shared: once, when first used). */
    struct mrc_cache_params p;
    uint64_t id;                  /* tells threads' lookup hints which cache they belong to */
    struct mrc_hint *shared;      /* hints any thread may use (cache.c); NULL until the first */
    uint32_t shared_failed;       /* their table could not be mapped: not tried again */
    uint32_t active;              /* set by the first get: until then invalidation is free */
    uint32_t first_timed;         /* the first back-end registration's time is counted apart */
    uint32_t pinned_noticed;      /* pinned_notice was called (under the lock) */
    /* Read on every call, written when invalidations defer or drains run. */
    uint64_t ndeferred MRC_LINE;
    uint64_t deferred_bytes;
    uint64_t lru_clock;           /* LRU moves so far (advanced past every entry while the
                                   * tree is over a limit): tells a put whether a move is due */
    uint64_t tree_count;          /* entries in the tree, young or parked (under the lock) */
    uint32_t idle_clock;          /* mrc_cache_expire's ticks so far: a release stamps it */
    uint32_t nparked;             /* runs in parked[] (written under the lock) */
    uint32_t over_limit;          /* the last eviction left the tree past a limit, every
                                   * entry in use: releases evict (under the lock) */
    uint32_t inuse_pending;       /* records wait in inuse[] (written under the lock) */
    uint64_t nheld;               /* entries in the held tree (written under the lock) */
    /* Long runs an unmap took out of the tree and left for mrc_cache_drain: their entries
     * still look IN_TREE, so a hint reader also rejects an entry overlapping one of these
     * ranges. Written under the lock; range read without it. */
    struct {
        uint64_t first, last;
        struct mrc_itree_node *run;
        enum mrc_inval_cause cause;
        int report;               /* an entry in use there is recorded (inuse[]) */
        uint64_t seq;             /* the invalidation's number, for that record */
    } parked[MRC_PARKED] MRC_LINE;
    /* Under the lock. */
    pthread_mutex_t lock MRC_LINE;   /* tree, LRU, deferred list, tree counters */
    int closed;                   /* mrc_cache_close ran: new entries stay private */
    struct mrc_itree tree;
    struct mrc_entry lru;         /* sentinel: lru.lru_next is least recently used */
    struct mrc_entry *deferred;   /* dead entries waiting for deregistration */
    /* Dead entries whose deregistration the back-end refused: still registered, still
     * in the gauges. A miss retries them all once failed_retry_at misses were made
     * (the wait doubling up to 4096 while refusals go on); flush, drain, eviction for
     * ENOMEM and destroy retry those they concern at once. */
    struct mrc_entry *failed;
    uint64_t nfailed, failed_bytes;
    uint64_t failed_retry_at;     /* a reg_made value */
    uint64_t failed_backoff;      /* 0 while nothing failed */
    uint64_t tree_bytes;
    uint64_t parked_bytes;        /* the parked runs' ranges, which bound what they pin */
    /* The newest entries, findable (IN_TREE, counted in tree_count, on the LRU) but not
     * yet in the tree: a miss adds its entry here and the one that finds it full inserts
     * all of them. Each insertion walks the tree from its root, and a miss's NIC call
     * leaves that path cold (a system call here flushes the TLB), so inserting them
     * together pays the cold walk once per MRC_YOUNG misses. Their ranges are copied in,
     * so that a scan reads these lines only; young_first/young_last bound them all. */
    struct { uint64_t first, last; struct mrc_entry *e; } young[MRC_YOUNG];
    unsigned nyoung;
    uint64_t young_first, young_last;
    /* Registrations held out of the tree (MRC_E_HELD), and the invalidations that took
     * memory from under any held registration, oldest first (head - tail of them; those
     * that found the ring full are only counted). */
    struct mrc_itree held;
    struct mrc_inuse_rec inuse[MRC_INUSE_RING];
    uint64_t inuse_head, inuse_tail, inuse_lost;
    /* Written without the lock by misses and invalidations. */
    uint64_t misses MRC_LINE;     /* MRC_MISSES_*: misses begun and in flight, in one word */
    uint64_t inval_seq;           /* invalidations begun; their ranges in ring[] */
    struct { uint64_t seq, first, last; } ring[MRC_INVAL_RING];
    /* Gauges of the back-end registrations the cache made (in the tree, in use,
     * deferred): live = made - freed. Made and the peaks under the lock, so that a miss
     * counts with plain stores; freed by any thread, on a line of its own. */
    uint64_t reg_made MRC_LINE, reg_made_bytes, reg_count_peak, reg_bytes_peak;
    uint64_t reg_freed MRC_LINE, reg_freed_bytes;
    struct mrc_pool entries;
};

/* Prepares c. 0 or -EINVAL for an unusable parameter (no ops, zero page size). */
int mrc_cache_init(struct mrc_cache *c, const struct mrc_cache_params *p);

/* Finds or makes a registration covering [addr, addr+len) for (domain, access, iova).
 * On success *out holds one reference (release with mrc_cache_put). 0 or -errno (the
 * back-end's error after evicting and retrying on -ENOMEM/-EAGAIN). */
int mrc_cache_get(struct mrc_cache *c, void *domain, uint64_t addr, uint64_t len,
                  uint64_t iova, uint32_t access, struct mrc_entry **out);

/* Releases one reference (not from a hook). While the tree is past a limit that its
 * last eviction could not meet (every entry in use), the released entry, idle now, is
 * evicted at once. An entry no longer in the tree is deregistered at its last:
 * if the back-end refuses, a private entry (never cached: it was this caller's
 * registration alone) stays held by the caller and the back-end's -errno is returned;
 * any other is kept on the failed list and retried later, and 0 is returned. */
int mrc_cache_put(struct mrc_cache *c, struct mrc_entry *e);

/* The same for a reference the caller cannot keep (it is moving on): a refused private
 * entry is kept on the failed list too. */
void mrc_cache_drop(struct mrc_cache *c, struct mrc_entry *e);

/* Removes every entry overlapping [addr, addr+len) from the cache (the tree and the
 * young set). Safe in any hook:
 * never calls the back-end or malloc; defers deregistration. */
void mrc_cache_invalidate(struct mrc_cache *c, uint64_t addr, uint64_t len,
                          enum mrc_inval_cause cause);

/* The same, for a hook about to unmap the range: returns a ticket to pass, once the
 * memory is gone, to mrc_cache_unmap_done, which invalidates again if a miss may have
 * pinned the old pages in between (a registration racing with the unmap must never
 * stay cached). Both are safe in any hook. A long run of the tree's entries (more than
 * 32 starting in the range; young ones are always taken in the hook) is cut out of the tree whole and parked: the per-entry work (LRU, the
 * tree's reference, deferral) is left for later: a get settles parked runs (unless its
 * drain finds the lock busy and it never needs the lock itself), and so do
 * mrc_cache_drain (the helper's, past max_deferred_bytes), flush, eviction and the
 * gauges. With every slot taken, the hook walks the run itself. Until settled no lookup
 * returns a parked entry; tree_count counts it, and the statistics count it as
 * invalidated once it is settled. */
uint64_t mrc_cache_unmap_begin(struct mrc_cache *c, uint64_t addr, uint64_t len,
                               enum mrc_inval_cause cause);
void mrc_cache_unmap_done(struct mrc_cache *c, uint64_t ticket, uint64_t addr, uint64_t len,
                          enum mrc_inval_cause cause);

/* The invalidations begun so far: read by a holder after its get, compared with
 * struct mrc_inuse_rec's seq. Any thread. */
static inline uint64_t mrc_cache_inval_mark(const struct mrc_cache *c)
{
    return __atomic_load_n(&c->inval_seq, __ATOMIC_ACQUIRE);
}

/* Whether in-use records wait for mrc_cache_in_use_peek: one load. */
static inline int mrc_cache_in_use_pending(const struct mrc_cache *c)
{
    return __atomic_load_n(&c->inuse_pending, __ATOMIC_ACQUIRE) != 0;
}

/* The same, or a parked run waits whose settling may record some: two loads. */
static inline int mrc_cache_in_use_maybe(const struct mrc_cache *c)
{
    return mrc_cache_in_use_pending(c) || __atomic_load_n(&c->nparked, __ATOMIC_ACQUIRE) != 0;
}

/* Copies up to max waiting in-use records, oldest first, into out[], leaving them in
 * place; *pos tells mrc_cache_in_use_retire where they began. Settles parked runs first
 * (their entries in use are recorded then). Returns how many. Not from a hook. */
unsigned mrc_cache_in_use_peek(struct mrc_cache *c, struct mrc_inuse_rec *out, unsigned max, uint64_t *pos);

/* The n records peeked at pos are dealt with: gone from the ring (unless someone retired
 * them first), and pending cleared once it is empty. Returns how many records found the
 * ring full since the last retire. Not from a hook. */
uint64_t mrc_cache_in_use_retire(struct mrc_cache *c, uint64_t pos, unsigned n);

/* Caches nothing from now on: every entry is invalidated (for cause), and a registration
 * made later, or under way now, is handed to its caller alone and deregistered at its
 * release, as if it had raced an unmap. For when the cache can no longer trust what it
 * would keep. Safe in any hook, as mrc_cache_invalidate. */
void mrc_cache_close(struct mrc_cache *c, enum mrc_inval_cause cause);

/* Finishes parked runs, puts young entries in the tree and deregisters the deferred
 * entries now, and retries the failed ones. Not from a hook. */
void mrc_cache_drain(struct mrc_cache *c);

/* Has the entry pool keep a reserve of memory touched in advance by mrc_cache_refill,
 * so that a miss normally takes its entry from touched memory; low(arg) is called, from
 * a registering thread without the cache lock, when the reserve runs low: it must only
 * wake the thread that calls mrc_cache_refill (no blocking, no malloc, no cache call).
 * NULL turns the reserve off. Any thread, any time. */
void mrc_cache_set_reserve(struct mrc_cache *c, void (*low)(void *arg), void *arg);

/* Tops the entry pool's reserve up (the first touches of fresh pages are paid here, on
 * the calling thread, instead of on a miss). Not from a hook. */
void mrc_cache_refill(struct mrc_cache *c);

/* Deregisters the idle entries for which match(e, arg) (all if match is NULL) and the
 * deferred ones, then retries the matching failed ones. Returns how many matching
 * entries stay registered: in use, or refused by the back-end again. */
uint64_t mrc_cache_flush(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg),
                         void *arg);

/* The same for the entries of one domain, after which the back-end hears that the
 * domain was flushed (ops.domain_flushed). Not from a hook. */
uint64_t mrc_cache_flush_domain(struct mrc_cache *c, void *domain);

/* Advances the idle clock by one tick and deregisters the idle entries (in the tree, no
 * user) not released during the last `ticks` ticks, and the deferred ones; the LRU's
 * order is kept. Called at a steady period P, an entry goes after between (ticks - 1) P
 * and ticks P without use. The lock is let go every few hundred entries, so misses wait
 * microseconds, not a walk of the whole cache. Returns how many it deregistered. Not
 * from a hook. */
uint64_t mrc_cache_expire(struct mrc_cache *c, uint32_t ticks);

/* One cached registration, as the dump lists them. */
struct mrc_cache_mr {
    uint64_t addr, len;           /* the registered range (rounded or merged) */
    uint32_t lkey, rkey, access;
    uint32_t users;               /* handles holding it now; 0: idle */
    uint32_t idle_ticks;          /* idle clock ticks since its last release (users == 0) */
};

/* The n largest registrations in the tree, largest first, into out[]; returns how many
 * (at most n). Takes the lock for a walk of the whole cache: for dumps, not for a hot
 * path. Not from a hook. */
unsigned mrc_cache_largest(struct mrc_cache *c, struct mrc_cache_mr *out, unsigned n);

/* Takes e, which the caller holds, out of the cache if the caller alone holds it: 0, and
 * *reg is the back-end registration, the caller's from now on (to change or deregister
 * itself; the cache forgets it, its gauges included, its range is unwatched, and the
 * caller's reference is gone);
 * -EBUSY if anyone else holds e (nothing changed). Not from a hook. */
int mrc_cache_take(struct mrc_cache *c, struct mrc_entry *e, void **reg);

/* Takes e, which the caller holds, out of the tree (if there) so that no later request
 * is served by it; its holders keep it, and it is deregistered at the last release.
 * Not from a hook. */
void mrc_cache_retire(struct mrc_cache *c, struct mrc_entry *e);

/* Forgets every entry without deregistering (a forked child: the MRs are the parent's). */
void mrc_cache_forget(struct mrc_cache *c);

void mrc_cache_get_gauges(struct mrc_cache *c, struct mrc_gauges *g);

/* Bytes of the cached registrations nobody holds (what a flush would release): a walk
 * of every cached entry under the lock, so for a viewer's occasional look, never for a
 * registration's path. */
uint64_t mrc_cache_idle_bytes(struct mrc_cache *c);

/* Fills the sink's armed, begin, done and arg with this cache's unmap protocol
 * (mrc_cache_unmap_begin/done; armed once the cache was first used). source_lost is
 * left to the caller. */
void mrc_cache_sink(struct mrc_cache *c, struct mrc_inval_sink *s);

/* What mrc_cache_destroy found still there. */
struct mrc_cache_leftovers {
    uint64_t in_use;      /* entries someone still holds (never released) */
    uint64_t failed;      /* entries whose deregistration the back-end still refuses */
    uint64_t entries;     /* entry objects not back in the pool, those included */
};

/* Deregisters every idle, deferred and failed entry and reports what is left. With
 * nothing left (0 returned) the cache's memory goes back to the kernel and c may be
 * initialised again; else -EBUSY, and c stays usable (its holders may still release). The calling
 * thread's spare entries go back first; other threads' must have exited. Not from a
 * hook. */
int mrc_cache_destroy(struct mrc_cache *c, struct mrc_cache_leftovers *left);

/* Registered range of an entry, for building the caller's handle. */
static inline uint64_t mrc_entry_start(const struct mrc_entry *e) { return e->node.start; }
static inline uint64_t mrc_entry_len(const struct mrc_entry *e) { return e->node.last - e->node.start + 1; }
/* What it counts in the pinned gauges. */
static inline uint64_t mrc_entry_pinned(const struct mrc_entry *e) { return e->unpinned ? 0 : mrc_entry_len(e); }

#endif
