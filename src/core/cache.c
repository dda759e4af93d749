/* cache.c - lookup, registration, lazy release and eviction (invalidation is
 * cache_inval.c).
 * Concurrency: the tree, LRU, deferred list and parked runs are under one mutex, never
 * held across a back-end call. Hits avoid it: a thread's hints (recent entries), then
 * the cache's shared hints (entries the tree served), are taken with
 * increment-unless-zero, then checked to still serve the request and be in the tree,
 * outside any parked range (entries are type-stable: a stale hint is safe to read).
 * The tree holds one reference; whoever drops the count to 0 owns the dead entry
 * (deregisters it, or defers that inside a hook). A parked run keeps its entries'
 * IN_TREE and tree reference until a get, drain, flush or gauge read settles it. The
 * newest entries are young (cache.h): findable like the tree's, held outside it until
 * the miss that finds MRC_YOUNG of them (or mrc_cache_drain) files them together;
 * every lookup, merge, unmap and removal looks at both. */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "core/cache.h"
#include "core/cache_priv.h"
#include "util/clock.h"
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

static __thread struct mrc_thread_state ts;
static uint64_t next_cache_id = 1;
static pthread_key_t spare_key;
static int spare_key_ok;          /* without a key, an exiting thread's spares are lost */
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

/* At thread exit: the spares go back to their pool, unless the cache was made anew since
 * (a forked child's, whose old pool stays behind with everything in it). A miss made by
 * a later destructor of the same thread keys its new spares again. */
static void spares_release(void *arg)
{
    struct mrc_cache *c = arg;
    if (ts.cache_id == c->id)
        for (unsigned i = ts.spare_next; i < ts.spare_end; i++)
            mrc_pool_put(&c->entries, ts.spare[i]);
    ts.spare_next = ts.spare_end = 0;
    ts.spares_keyed = 0;
}

static void spare_key_create(void)
{
    spare_key_ok = pthread_key_create(&spare_key, spares_release) == 0;
}

/* Counts a new back-end registration of len bytes in the gauges (under the lock). A
 * peak can only be reached when a registration is made, so checking here is exact. */
MRC_HOT static void gauge_made_locked(struct mrc_cache *c, uint64_t len)
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

/* Announces a miss to concurrent unmaps (see mrc_cache_unmap_begin); done when it has
 * either counted its entry in tree_count or kept it private. */
MRC_HOT static void miss_done(struct mrc_cache *c)
{
    __atomic_fetch_sub(&c->misses, 1, __ATOMIC_SEQ_CST);
}

/* The calling thread's state for cache c. A thread that moves to another cache (tests,
 * or a forked child's new one) drops what it held for the old one, spares included:
 * a cache must outlive the threads that used it. */
MRC_HOT static struct mrc_thread_state *thread_state(struct mrc_cache *c)
{
    if (ts.cache_id != c->id) {
        if (ts.spares_keyed)
            pthread_setspecific(spare_key, NULL);
        memset(&ts, 0, sizeof(ts));
        ts.cache_id = c->id;
    }
    return &ts;
}

/* Makes sure the calling thread's statistics block exists before it takes the lock:
 * creating one may allocate (pthread_setspecific), which the lock must never be held
 * across; settling and deferring count statistics under it. */
MRC_HOT static void stats_ready(void)
{
    (void)mrc_stats_block();
}

static void nothing_to_check(void)
{
}

static void nothing_to_watch(uint64_t addr, uint64_t len)
{
    (void)addr;
    (void)len;
}

int mrc_cache_init(struct mrc_cache *c, const struct mrc_cache_params *p)
{
    if (!p->ops.reg || !p->ops.dereg || p->page_size == 0 || (p->page_size & (p->page_size - 1)))
        return -EINVAL;
    memset(c, 0, sizeof(*c));
    c->p = *p;
    /* A word that is never armed: the miss path reads one word, with no test for NULL. */
    static const uint32_t never;
    if (!c->p.admit_armed || !c->p.admit)
        c->p.admit_armed = &never;
    if (!c->p.src.pending || !c->p.src.quiesce)
        c->p.src.pending = &never;
    if (!c->p.src.check)
        c->p.src.check = nothing_to_check;
    if (!c->p.src.watch || !c->p.src.unwatch) {
        c->p.src.watch = nothing_to_watch;
        c->p.src.unwatch = nothing_to_watch;
    }
    if (!c->p.max_entry_bytes)
        c->p.max_entry_bytes = UINT64_MAX;
    if (!c->p.pinned_notice)
        c->p.pinned_notice_bytes = 0;
    c->id = __atomic_fetch_add(&next_cache_id, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&c->lock, NULL);
    mrc_itree_init(&c->tree);
    c->lru.lru_next = c->lru.lru_prev = &c->lru;
    /* Entries are not zeroed on reuse: a thread may still be reading a stale hint. */
    mrc_pool_init(&c->entries, sizeof(struct mrc_entry), 0);
    return 0;
}

/* ---- LRU (under the lock) ---- */

MRC_HOT static void lru_add_tail(struct mrc_cache *c, struct mrc_entry *e)
{
    uint64_t clock = c->lru_clock + 1;
    ST(&c->lru_clock, clock);
    ST(&e->lru_stamp, clock);
    e->lru_prev = c->lru.lru_prev;
    e->lru_next = &c->lru;
    c->lru.lru_prev->lru_next = e;
    c->lru.lru_prev = e;
}

/* ---- young entries (under the lock; drain reads nyoung without it, as a hint) ---- */

/* Puts every young entry into the tree: when they all lie past one end of it (buffers
 * registered in ascending or descending address order), as one piece. */
MRC_HOT static void young_flush_locked(struct mrc_cache *c)
{
    struct mrc_itree_node *nodes[MRC_YOUNG];
    unsigned n = LD(&c->nyoung);
    for (unsigned i = 0; i < n; i++)
        nodes[i] = &c->young[i].e->node;
    mrc_itree_insert_many(&c->tree, nodes, n);
    ST(&c->nyoung, 0u);
}

/* A new entry, counted and on the LRU, becomes findable; a full set goes to the tree. */
MRC_HOT static void young_add_locked(struct mrc_cache *c, struct mrc_entry *e)
{
    unsigned n = LD(&c->nyoung);
    if (n == MRC_YOUNG) {
        young_flush_locked(c);
        n = 0;
    }
    uint64_t f = e->node.start, l = e->node.last;
    /* The bounds only grow until the set empties: a superset is all a filter needs. */
    if (n == 0 || f < c->young_first)
        c->young_first = f;
    if (n == 0 || l > c->young_last)
        c->young_last = l;
    c->young[n].first = f;
    c->young[n].last = l;
    c->young[n].e = e;
    ST(&c->nyoung, n + 1);
}

static void batch_flush_locked(struct mrc_cache *c, struct mrc_thread_state *t)
{
    for (unsigned i = 0; i < t->nbatch; i++) {
        struct mrc_entry *e = t->batch[i];
        /* A batched entry may since have left the tree (or been reused by another
         * registration that is in the tree: moving that one is harmless). */
        if (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & MRC_E_IN_TREE) {
            lru_unlink(e);
            lru_add_tail(c, e);
        }
    }
    t->nbatch = 0;
}

/* ---- matching ---- */

MRC_HOT static int is_remote(const struct mrc_cache *c, uint32_t access)
{
    return (access & c->p.remote_mask) != 0;
}

/* Whether e can serve [first, last] for (domain, iova_off, access). Reads with relaxed
 * atomics because a lock-free caller may be looking at an entry being reused; such a
 * caller repeats the test once it holds a reference. */
MRC_HOT static int entry_serves(const struct mrc_cache *c, const struct mrc_entry *e, void *domain,
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

MRC_HOT static int ref_get_unless_zero(uint32_t *ref)
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
MRC_HOT static unsigned hint_set(const void *domain, uint64_t first)
{
    uint64_t k = (first >> 12) ^ ((uintptr_t)domain >> 4);
    return (unsigned)((k * 0x9e3779b97f4a7c15ull) >> 59) * 2;
}

MRC_HOT static void hint_add(struct mrc_thread_state *t, struct mrc_entry *e, const void *domain, uint64_t first)
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
MRC_HOT static int in_parked_run(const struct mrc_cache *c, const struct mrc_entry *e)
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

MRC_HOT static struct mrc_entry *hint_try(struct mrc_cache *c, const struct mrc_hint *h, void *domain, uint64_t first,
                                          uint64_t last, int64_t iova_off, uint32_t access)
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

MRC_HOT static struct mrc_entry *hint_lookup(struct mrc_cache *c, struct mrc_thread_state *t, void *domain,
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
MRC_HOT static struct mrc_hint *shared_table(struct mrc_cache *c)
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

MRC_HOT static unsigned shared_set(const void *domain, uint64_t first)
{
    uint64_t k = (first >> 12) ^ ((uintptr_t)domain >> 4);
    /* Folded first: buffers 128 KiB apart otherwise crowd 4096 requests into 2284 sets,
     * and one in nine then falls to the tree every time. */
    k ^= k >> 15;
    return (unsigned)((k * 0x9e3779b97f4a7c15ull) >> (64 - 15)) * 2;
}

MRC_HOT static struct mrc_entry *shared_lookup(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last,
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

MRC_HOT static void shared_add(struct mrc_cache *c, struct mrc_entry *e, const void *domain, uint64_t first)
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

/* Finishes the runs unmaps parked (under the lock): each entry as inval_one_locked
 * takes it, then nparked back to 0 with a release store, after every flag it cleared.
 * Never in a hook: it counts statistics (see stats_ready). */
MRC_HOT static void settle_locked(struct mrc_cache *c)
{
    unsigned n = c->nparked;
    if (!n)
        return;
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

/* ---- removal, deregistration ---- */

/* Takes e out of the tree (or the young set) and the LRU (under the lock). The caller
 * then drops or owns the tree's reference. */
MRC_HOT static void entry_remove_locked(struct mrc_cache *c, struct mrc_entry *e)
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
MRC_HOT static void drop_tree_ref_locked(struct mrc_cache *c, struct mrc_entry *e)
{
    if (__atomic_fetch_sub(&e->ref, 1, __ATOMIC_SEQ_CST) == 1) {
        e->lru_next = c->deferred;
        c->deferred = e;
        ST(&c->ndeferred, c->ndeferred + 1);
        ST(&c->deferred_bytes, c->deferred_bytes + mrc_entry_len(e));
    }
}

/* Whether the tree is past one of its limits (under the lock). */
MRC_HOT static int over_limits_locked(const struct mrc_cache *c)
{
    return c->tree_count > c->p.max_entries || c->tree_bytes > c->p.max_bytes;
}

/* Takes e out of the tree and onto *victims (linked through lru_next) if it is idle, the
 * tree's reference its only one, which the caller then owns: whether it did. */
static int evict_idle_locked(struct mrc_cache *c, struct mrc_entry *e, struct mrc_entry **victims)
{
    uint32_t idle = 1;
    if (!__atomic_compare_exchange_n(&e->ref, &idle, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return 0;
    entry_remove_locked(c, e);
    e->lru_next = *victims;
    *victims = e;
    return 1;
}

MRC_HOT static struct mrc_entry *take_deferred_locked(struct mrc_cache *c)
{
    struct mrc_entry *list = c->deferred;
    if (list)
        mrc_stat_add(MRC_STAT_DEFERRED, c->ndeferred);
    c->deferred = NULL;
    ST(&c->ndeferred, 0u);
    ST(&c->deferred_bytes, 0u);
    return list;
}

/* Chunks (512 entries each) of touched memory the entry pool keeps ready: the helper is
 * woken when half are used (one wake-up per 1024 misses: each costs the waker ~30 us
 * here), and refills faster than misses use them (about 1 us per entry here). */
#define ENTRY_RESERVE 4

void mrc_cache_set_reserve(struct mrc_cache *c, void (*low)(void *arg), void *arg)
{
    mrc_pool_set_reserve(&c->entries, low ? ENTRY_RESERVE : 0, low, arg);
}

void mrc_cache_refill(struct mrc_cache *c)
{
    /* Without memory the reserve stays short: a miss then carves and touches itself. */
    mrc_pool_refill(&c->entries);
}

/* Settles parked runs and deregisters deferred entries. Unless wait is set, parked runs
 * alone are left when the lock is busy: its holder may be settling them already, a hit
 * needs no lock, and hints skip parked entries; a get that takes the lock settles. With
 * wait set (outside any registration) young entries go into the tree too. */
MRC_HOT static void drain(struct mrc_cache *c, int wait)
{
    if (!LD(&c->ndeferred) && !LD(&c->nparked) && !(wait && LD(&c->nyoung)))
        return;
    stats_ready();
    if (wait || LD(&c->ndeferred))
        pthread_mutex_lock(&c->lock);
    else if (pthread_mutex_trylock(&c->lock))
        return;
    settle_locked(c);
    if (wait)
        young_flush_locked(c);
    struct mrc_entry *list = take_deferred_locked(c);
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, list);
}

void mrc_cache_drain(struct mrc_cache *c)
{
    /* The refused ones first: those refused by this drain's own deregistrations wait. */
    struct mrc_entry *failed = mrc_cache_failed_take(c, NULL, NULL);
    drain(c, 1);
    mrc_cache_failed_retry(c, failed);
}

/* Evicts idle entries, least recently used first, until the tree is within its limits
 * (or everything idle when all is set). Returns the victims, linked through lru_next. */
static struct mrc_entry *evict_locked(struct mrc_cache *c, int all, struct mrc_entry *victims)
{
    settle_locked(c);   /* parked entries are still on the LRU, but out of the tree */
    batch_flush_locked(c, thread_state(c));
    uint64_t budget = c->tree_count;
    struct mrc_entry *e = c->lru.lru_next;
    while (budget-- > 0 && e != &c->lru) {
        if (!all && !over_limits_locked(c))
            break;
        struct mrc_entry *next = e->lru_next;
        if (evict_idle_locked(c, e, &victims)) {
            mrc_stat_add(MRC_STAT_EVICTIONS, 1);
        } else {
            /* In use now, so recently used when released. */
            lru_unlink(e);
            lru_add_tail(c, e);
        }
        e = next;
    }
    /* Past a limit still (all in use): every release evicts until it is met. Every entry
     * then looks older than a quarter of the tree, so that its release reads over_limit
     * (see evict_released); the clock only orders moves, it counts nothing. */
    uint32_t over = (uint32_t)over_limits_locked(c);
    ST(&c->over_limit, over);
    if (over)
        ST(&c->lru_clock, c->lru_clock + c->tree_count + 1);
    return victims;
}

/* ---- get / put ---- */

/* Whether an invalidation begun at or after seq0 overlaps [first, last]. Unknown (a
 * slot overwritten or still being written) counts as overlapping. */
MRC_HOT static int raced_locked(struct mrc_cache *c, uint64_t seq0, uint64_t first, uint64_t last)
{
    uint64_t now = __atomic_load_n(&c->inval_seq, __ATOMIC_SEQ_CST);
    if (now - seq0 > MRC_INVAL_RING)
        return 1;
    for (uint64_t s = seq0; s < now; s++) {
        __typeof__(c->ring[0]) *slot = &c->ring[s % MRC_INVAL_RING];
        if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != s + 1)
            return 1;
        /* Acquire loads keep the second read of seq after them (a seqlock read). */
        uint64_t f = __atomic_load_n(&slot->first, __ATOMIC_ACQUIRE);
        uint64_t l = __atomic_load_n(&slot->last, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&slot->seq, __ATOMIC_RELAXED) != s + 1)
            return 1;
        if (f <= last && first <= l)
            return 1;
    }
    return 0;
}

/* Registers through the back-end, timing it for the statistics, its range watched from
 * before the pin (an unmap during the NIC call is then seen, and raced_locked keeps the
 * registration out of the tree). Nothing is prefetched when it returns: since
 * insertions wait in the young set, prefetching what they touch made misses 7-10%
 * slower (make bench, row 6: docs/benchmarks.md). */
MRC_HOT static int backend_reg(struct mrc_cache *c, int last_try, void *domain, uint64_t first, uint64_t last,
                               int64_t iova_off, uint32_t access, void **reg)
{
    uint64_t len = last - first + 1;
    c->p.src.check();
    c->p.src.watch(first, len);
    uint64_t t0 = mrc_ticks();
    int rc = (last_try ? c->p.ops.reg_last : c->p.ops.reg)(c->p.ops.ctx, domain, first, len,
                                                            first + (uint64_t)iova_off, access, reg);
    uint64_t dt = mrc_ticks_since(t0);
    if (rc < 0 || rc == MRC_REG_SHARED)
        c->p.src.unwatch(first, len);
    if (rc == 0 || rc == MRC_REG_UNPINNED) {
        mrc_hist_add(MRC_HIST_REGS, len, 1);
        mrc_hist_reg_time(len, dt);
        mrc_hist_add(MRC_HIST_REG_BYTES, len, len);
        /* The first one pays what the NIC does once (its library's and the kernel's
         * set-up): the time-saved estimate keeps it apart. */
        if (__builtin_expect(!LD(&c->first_timed), 0) && !__atomic_exchange_n(&c->first_timed, 1u, __ATOMIC_RELAXED)) {
            mrc_stat_add(MRC_STAT_FIRST_REG_NS, dt);
            mrc_stat_add(MRC_STAT_FIRST_REG_BYTES, len);
        }
    }
    return rc;
}

static void evict_all_idle(struct mrc_cache *c)
{
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);   /* parked runs' entries are deregistered now too */
    struct mrc_entry *victims = evict_locked(c, 1, take_deferred_locked(c));
    struct mrc_entry *failed = mrc_cache_failed_take_locked(c, NULL, NULL);   /* they pin memory too */
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, victims);
    mrc_cache_failed_retry(c, failed);
}

/* Registers with one retry after evicting idle entries when the back-end is out of
 * pinnable memory (RLIMIT_MEMLOCK, device limits): the cache must never make a
 * registration fail that would succeed without it. Then the back-end's last try, if it
 * has one. 0 or MRC_REG_* (*reg set), or -errno. */
MRC_HOT static int reg_retry(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last,
                             int64_t iova_off, uint32_t access, void **reg)
{
    int rc = backend_reg(c, 0, domain, first, last, iova_off, access, reg);
    if (rc == -ENOMEM || rc == -EAGAIN) {
        mrc_stat_add(MRC_STAT_ENOMEM_RETRIES, 1);
        evict_all_idle(c);
        rc = backend_reg(c, 0, domain, first, last, iova_off, access, reg);
    }
    if ((rc == -ENOMEM || rc == -EAGAIN) && c->p.ops.reg_last) {
        int last_rc = backend_reg(c, 1, domain, first, last, iova_off, access, reg);
        if (last_rc >= 0)
            rc = last_rc;
    }
    return rc;
}

/* Whether e was registered with this key: what merging and superseding require. */
static int same_key(const struct mrc_entry *e, const void *domain, int64_t iova_off, uint32_t access)
{
    return e->domain == domain && e->iova_off == iova_off && e->access == access;
}

/* The longest union a miss for the page-rounded [first, last] may register, less one:
 * twice the request, under half the byte limit, and no more than one entry may hold
 * (max_entry_bytes). A merge re-registers the bytes of the
 * entries it absorbs, so it may cost no more than registering the request again: a
 * program registering buffer after buffer does at most twice the registration work it
 * would do without merging, never the square of it. */
static uint64_t merge_cap(const struct mrc_cache *c, uint64_t first, uint64_t last)
{
    uint64_t len = last - first + 1, cap = c->p.max_bytes / 2;
    if (len && len <= cap / 2)
        cap = 2 * len;
    if (cap > c->p.max_entry_bytes)
        cap = c->p.max_entry_bytes;
    return cap ? cap - 1 : 0;
}

/* Grows [*first, *last] to its union with e if e has the same key, shares a byte with it
 * and the union's length less one stays within cap. Only overlap merges: it pins the
 * shared pages once instead of twice, where the union of neighbours that merely touch
 * would pin no less and re-register the neighbours whole. Returns whether it grew; sets
 * *kin if e has the key. */
MRC_HOT static int merge_one(const struct mrc_entry *e, void *domain, int64_t iova_off, uint32_t access,
                             uint64_t cap, uint64_t *first, uint64_t *last, int *kin)
{
    if (!same_key(e, domain, iova_off, access))
        return 0;
    *kin = 1;
    if (e->node.start > *last || e->node.last < *first)
        return 0;
    uint64_t f = e->node.start < *first ? e->node.start : *first;
    uint64_t l = e->node.last > *last ? e->node.last : *last;
    if (l - f > cap || (f == *first && l == *last))
        return 0;
    *first = f;
    *last = l;
    return 1;
}

/* Grows [*first, *last] to the union of same-key local entries that overlap it, as long
 * as the union stays within cap; sets *kin if it saw one. */
MRC_HOT static void merge_range_locked(struct mrc_cache *c, void *domain, int64_t iova_off, uint32_t access,
                                       uint64_t cap, uint64_t *first, uint64_t *last, int *kin)
{
    for (int grew = 1; grew;) {
        grew = 0;
        uint64_t qf = *first, ql = *last;
        for (struct mrc_itree_node *n = mrc_itree_iter_first(&c->tree, qf, ql); n;
             n = mrc_itree_iter_next(n, qf, ql)) {
            struct mrc_entry *e = mrc_entry_of(n);
            grew |= merge_one(e, domain, iova_off, access, cap, first, last, kin);
        }
        if (young_may_overlap(c, qf, ql))
            for (unsigned i = 0; i < LD(&c->nyoung); i++)
                if (c->young[i].first <= ql && qf <= c->young[i].last)
                    grew |= merge_one(c->young[i].e, domain, iova_off, access, cap, first, last, kin);
    }
}

/* The entry serving [first, last] for the key, or NULL. With rf set (a local request at
 * iova == addr, rounded out to [*rf, *rl]), a miss also grows [*rf, *rl] as
 * merge_range_locked does, and sets *kin if it saw an entry of the key. The lookup walks
 * the rounded request, which holds every entry that can serve it or merge with it, so a
 * miss walks the tree once: each walk reads nodes off its search path too, cold ones
 * for buffers registered out of address order (~50 ns a walk here). */
MRC_HOT static struct mrc_entry *lookup_locked(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last,
                                               int64_t iova_off, uint32_t access, uint64_t *rf, uint64_t *rl,
                                               int *kin)
{
    uint64_t wf = first, wl = last, f = 0, l = 0, cap = 0;
    int grew = 0;
    if (rf) {
        wf = f = *rf;
        wl = l = *rl;
        cap = merge_cap(c, f, l);
    }
    if (young_may_overlap(c, wf, wl))
        for (unsigned i = 0; i < LD(&c->nyoung); i++) {
            if (c->young[i].last < wf || wl < c->young[i].first)
                continue;
            struct mrc_entry *e = c->young[i].e;
            if (c->young[i].first <= first && last <= c->young[i].last &&
                entry_serves(c, e, domain, first, last, iova_off, access))
                return e;
            if (rf)
                grew |= merge_one(e, domain, iova_off, access, cap, &f, &l, kin);
        }
    for (struct mrc_itree_node *n = mrc_itree_iter_first(&c->tree, wf, wl); n; n = mrc_itree_iter_next(n, wf, wl)) {
        struct mrc_entry *e = mrc_entry_of(n);
        if (entry_serves(c, e, domain, first, last, iova_off, access))
            return e;
        if (rf)
            grew |= merge_one(e, domain, iova_off, access, cap, &f, &l, kin);
    }
    if (grew) {
        *rf = f;
        *rl = l;
        merge_range_locked(c, domain, iova_off, access, cap, rf, rl, kin);
    }
    return NULL;
}

/* Takes e out of the tree if the new registration [rf, rl] of the same key covers it: it
 * stays valid for its current users until they release it. */
MRC_HOT static void supersede_locked(struct mrc_cache *c, struct mrc_entry *e, void *domain, int64_t iova_off,
                                     uint32_t access, uint64_t rf, uint64_t rl)
{
    if (!same_key(e, domain, iova_off, access) || e->node.start < rf || e->node.last > rl)
        return;
    entry_remove_locked(c, e);
    drop_tree_ref_locked(c, e);
    mrc_stat_add(MRC_STAT_MERGES, 1);
}

/* Fills in a fresh entry (ref still 0) for a registration just made; the caller counts
 * it in the gauges (gauge_made_locked). */
MRC_HOT static void entry_init(struct mrc_cache *c, struct mrc_entry *e, void *domain, uint64_t first, uint64_t last,
                               int64_t iova_off, uint32_t access, void *reg, int unpinned)
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

static struct mrc_entry *entry_new(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last,
                                   int64_t iova_off, uint32_t access, void *reg, int unpinned)
{
    struct mrc_entry *e = mrc_pool_get(&c->entries);
    if (e) {
        entry_init(c, e, domain, first, last, iova_off, access, reg, unpinned);
        pthread_mutex_lock(&c->lock);
        gauge_made_locked(c, mrc_entry_pinned(e));
        pthread_mutex_unlock(&c->lock);
    }
    return e;
}

/* A miss's entry, taken before its registration from the thread's spares. They go out
 * in the pool's ascending order, so buffers registered in address order get entries in
 * address order, and a walk over a run of them (settling a parked run) reads memory
 * forwards, as the hardware prefetcher follows (measured when the unmap hook itself
 * walked its runs: 35-65 -> 20-33 ns per entry for 16k entries). */
MRC_HOT static struct mrc_entry *entry_alloc(struct mrc_cache *c, struct mrc_thread_state *t)
{
    if (t->spare_next == t->spare_end) {
        t->spare_next = 0;
        t->spare_end = (unsigned)mrc_pool_get_many(&c->entries, (void **)t->spare, SPARES);
        if (!t->spare_end)
            return NULL;
        if (!t->spares_keyed) {
            pthread_once(&spare_once, spare_key_create);
            t->spares_keyed = spare_key_ok && pthread_setspecific(spare_key, c) == 0;
        }
    }
    return t->spare[t->spare_next++];
}

/* A miss's range widened by the expand hook, registered once: the back-end's answer
 * (>= 0: 0, or its word for a registration that pins nothing) and [*rf, *rl] widened,
 * or -1 (the hook left it, or the back-end refused the wider range: the miss then
 * registers its own, evicting for it if need be, as it would unasked). */
static int reg_expanded(struct mrc_cache *c, void *domain, uint32_t access, uint64_t qf, uint64_t ql, uint64_t *rf,
                        uint64_t *rl, void **reg)
{
    uint64_t f = *rf, l = *rl;
    if (!c->p.expand(c->p.expand_arg, access, qf, ql, &f, &l) || f > *rf || l < *rl || (f == *rf && l == *rl))
        return -1;
    int rc = backend_reg(c, 0, domain, f, l, 0, access, reg);
    if (rc < 0) {
        mrc_stat_add(MRC_STAT_EXPAND_REFUSED, 1);
        return -1;
    }
    mrc_stat_add(MRC_STAT_EXPANDED, 1);
    *rf = f;
    *rl = l;
    return rc;
}

/* A registration handed to one caller and deregistered at its release. */
static int get_private(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last,
                       int64_t iova_off, uint32_t access, struct mrc_entry **out)
{
    void *reg;
    int rc = reg_retry(c, domain, first, last, iova_off, access, &reg);
    if (rc < 0)
        return rc;
    struct mrc_entry *e = entry_new(c, domain, first, last, iova_off, access, reg, rc);
    if (!e) {
        /* Counted as any deregistration; a refusal cannot be kept on the failed list,
         * which holds entries, and there is none. */
        mrc_cache_backend_dereg(c, reg, first, last - first + 1, rc == MRC_REG_SHARED);
        return -ENOMEM;
    }
    ST(&e->flags, MRC_E_PRIVATE);
    __atomic_store_n(&e->ref, 1u, __ATOMIC_RELEASE);
    pthread_mutex_lock(&c->lock);
    mrc_cache_held_add_locked(c, e);
    pthread_mutex_unlock(&c->lock);
    *out = e;
    return 0;
}

MRC_HOT static inline int get(struct mrc_cache *c, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                               uint32_t access, struct mrc_entry **out)
{
    if (len == 0 || addr + len - 1 < addr)
        return -EINVAL;
    if (!__atomic_load_n(&c->active, __ATOMIC_RELAXED))
        __atomic_store_n(&c->active, 1u, __ATOMIC_SEQ_CST);
    mrc_hist_add(MRC_HIST_REQUESTS, len, 1);   /* first: the statistics block exists */
    drain(c, 0);
    uint64_t first = addr, last = addr + len - 1;
    int64_t iova_off = (int64_t)(iova - addr);
    int remote = is_remote(c, access);
    if (remote && c->p.remote_policy == MRC_REMOTE_NEVER) {
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
        return get_private(c, domain, first, last, iova_off, access, out);
    }
    if (__builtin_expect(len > c->p.max_entry_bytes, 0)) {
        /* Kept, it would push most of the cache out, for one buffer: never an entry
         * can serve it (merges stay within the bound), so no lookup either. */
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
        mrc_stat_add(MRC_STAT_UNCACHED_LARGE, 1);
        return get_private(c, domain, first, last, iova_off, access, out);
    }

    struct mrc_thread_state *t = thread_state(c);
    struct mrc_entry *e = hint_lookup(c, t, domain, first, last, iova_off, access);
    if (e)
        goto hit;
    e = shared_lookup(c, domain, first, last, iova_off, access);
    if (e) {
        hint_add(t, e, domain, first);
        goto hit;
    }

    /* Local-only registrations with iova == addr are rounded out to whole pages and, on
     * a miss, merged with the entries they overlap; remote ones are registered byte-exact, since
     * rounding or merging would let a peer reach bytes the program did not expose. */
    int merge = !remote && iova_off == 0;
    uint64_t qf = first, ql = last;
    if (merge) {
        uint64_t pm = c->p.page_size - 1;
        qf &= ~pm;
        ql = (ql | pm) < ql ? UINT64_MAX : (ql | pm);
    }
    uint64_t rf = qf, rl = ql;
    int kin = 0;
    pthread_mutex_lock(&c->lock);
    settle_locked(c);   /* what drain left, finding the lock busy */
    e = lookup_locked(c, domain, first, last, iova_off, access, merge ? &rf : NULL, &rl, &kin);
    if (e) {
        __atomic_fetch_add(&e->ref, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&c->lock);
        hint_add(t, e, domain, first);
        shared_add(c, e, domain, first);
        goto hit;
    }

    /* Miss. */
    uint64_t made0 = c->reg_made;
    uint64_t seq0 = __atomic_load_n(&c->inval_seq, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&c->misses, MRC_MISSES_BEGIN, __ATOMIC_SEQ_CST);
    struct mrc_entry *dead = take_deferred_locked(c);
    struct mrc_entry *failed = c->failed ? mrc_cache_failed_due_locked(c) : NULL;
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, dead);
    if (__builtin_expect(failed != NULL, 0))
        mrc_cache_failed_retry(c, failed);
    if (__builtin_expect(LD(c->p.admit_armed) != 0, 0) && c->p.admit(c->p.admit_arg, qf, ql)) {
        miss_done(c);
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
        return get_private(c, domain, first, last, iova_off, access, out);
    }
    mrc_stat_add(MRC_STAT_MISSES, 1);
    e = entry_alloc(c, t);
    if (!e) {
        miss_done(c);
        return -ENOMEM;
    }

    void *reg;
    int rc = merge && c->p.expand ? reg_expanded(c, domain, access, qf, ql, &rf, &rl, &reg) : -1;
    int expanded = rc >= 0;
    if (!expanded)
        rc = reg_retry(c, domain, rf, rl, iova_off, access, &reg);
    if (rc < 0 && (rf != qf || rl != ql)) {
        /* The merged union did not fit: register just the request. */
        rf = qf;
        rl = ql;
        rc = reg_retry(c, domain, rf, rl, iova_off, access, &reg);
    }
    if (rc < 0) {
        miss_done(c);
        t->spare[--t->spare_next] = e;   /* never published: no reader holds it */
        mrc_stat_add(MRC_STAT_REG_FAILURES, 1);
        return rc;
    }
    entry_init(c, e, domain, rf, rl, iova_off, access, reg, rc);

    struct mrc_entry *victims = NULL;
    pthread_mutex_lock(&c->lock);
    gauge_made_locked(c, mrc_entry_pinned(e));
    int closed = c->closed;
    if (closed || raced_locked(c, seq0, rf, rl)) {
        /* Part of the range was unmapped while we registered it: the pages we pinned may
         * be the old ones. Hand it to this caller alone, never to a later one; so too
         * once the cache is closed. */
        miss_done(c);
        ST(&e->flags, MRC_E_PRIVATE);
        __atomic_store_n(&e->ref, 1u, __ATOMIC_RELEASE);
        mrc_cache_held_add_locked(c, e);
        pthread_mutex_unlock(&c->lock);
        if (!closed)
            mrc_stat_add(MRC_STAT_RACED, 1);
        *out = e;
        return 0;
    }
    if (merge && (kin || expanded || c->reg_made != made0 + 1)) {
        /* Entries inside the union are superseded. Only an entry of the key that the
         * lookup saw, one registered since (counted in reg_made, like ours), or one in
         * the range an expansion added can lie inside it: a miss with none of these
         * walks the tree once, not twice. */
        struct mrc_itree_node *n = mrc_itree_iter_first(&c->tree, rf, rl);
        while (n) {
            struct mrc_itree_node *next = mrc_itree_iter_next(n, rf, rl);
            supersede_locked(c, mrc_entry_of(n), domain,
                             iova_off, access, rf, rl);
            n = next;
        }
        /* Downwards: a removal moves the last young entry, already seen, into its slot. */
        if (young_may_overlap(c, rf, rl))
            for (unsigned i = LD(&c->nyoung); i-- > 0;)
                supersede_locked(c, c->young[i].e, domain, iova_off, access, rf, rl);
    }
    young_add_locked(c, e);
    lru_add_tail(c, e);
    c->tree_bytes += mrc_entry_len(e);
    /* Plain stores: nobody else writes a fresh entry, a hint reader's increment of ref
     * (acquire) then sees IN_TREE, and miss_done's seq_cst subtraction orders the new
     * tree_count before an unmap that finds no miss in flight. */
    ST(&e->flags, MRC_E_IN_TREE);
    __atomic_store_n(&e->ref, 2u, __ATOMIC_RELEASE);   /* the tree's and the caller's */
    ST(&c->tree_count, c->tree_count + 1);
    miss_done(c);
    if (over_limits_locked(c))
        victims = evict_locked(c, 0, NULL);
    dead = take_deferred_locked(c);
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, victims);
    mrc_cache_dereg_list(c, dead);
    hint_add(t, e, domain, first);
    *out = e;
    return 0;

hit:
    mrc_stats_hit(len);
    *out = e;
    return 0;
}

MRC_HOT int mrc_cache_get(struct mrc_cache *c, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                          uint32_t access, struct mrc_entry **out)
{
    /* An unmap a source has read but not yet published must be invalidated before the
     * lookup: its unmapper may have returned and be registering the address again. */
    if (__builtin_expect(__atomic_load_n(c->p.src.pending, __ATOMIC_ACQUIRE) != 0, 0))
        c->p.src.quiesce();
    int rc = get(c, domain, addr, len, iova, access, out);
    /* Served on demand: the first access to each page would fault. */
    if (__builtin_expect(rc == 0 && (*out)->unpinned != 0, 0) && c->p.ops.prefetch)
        c->p.ops.prefetch(c->p.ops.ctx, domain, (*out)->reg, iova, len, access);
    return rc;
}

/* The last reference of an entry out of the tree: ours to deregister. A private one the
 * back-end refuses stays the caller's if it can keep it (keep), with the error. */
__attribute__((noinline)) static int release_last(struct mrc_cache *c, struct mrc_entry *e, int keep)
{
    mrc_cache_held_remove(c, e);
    if (!keep || !(LD(&e->flags) & MRC_E_PRIVATE)) {
        mrc_cache_dereg_entry(c, e);
        return 0;
    }
    int rc = mrc_cache_dereg_try(c, e);
    if (rc) {
        __atomic_store_n(&e->ref, 1u, __ATOMIC_RELEASE);   /* nobody else could take it at 0 */
        pthread_mutex_lock(&c->lock);
        mrc_cache_held_add_locked(c, e);                   /* still the caller's */
        pthread_mutex_unlock(&c->lock);
    }
    return rc;
}

/* A release while the tree is past a limit that the last eviction could not meet, every
 * entry then being in use: the entries released since are the only idle ones, so the
 * one just released (idle, if nobody took it again meanwhile) is the one to evict, now,
 * in O(1). Not in a hook: puts never are. The check costs a release nothing while within
 * the limits: evict_locked, leaving the tree past one, also advances lru_clock past every
 * entry's stamp, so that each release takes put's slower path, where over_limit is read. */
__attribute__((noinline, cold)) static void evict_released(struct mrc_cache *c, struct mrc_entry *e)
{
    struct mrc_entry *victim = NULL;
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);   /* a parked entry is out of the tree already */
    if (over_limits_locked(c) && (LD(&e->flags) & MRC_E_IN_TREE) && evict_idle_locked(c, e, &victim))
        mrc_stat_add(MRC_STAT_EVICTIONS, 1);
    ST(&c->over_limit, (uint32_t)over_limits_locked(c));
    pthread_mutex_unlock(&c->lock);
    if (victim)
        mrc_cache_dereg_entry(c, victim);
}

MRC_HOT int mrc_cache_put(struct mrc_cache *c, struct mrc_entry *e)
{
    /* Stamped before the reference goes: an expiry that then finds the entry idle sees
     * this release's tick (see expire_chunk_locked). A store only when the tick moved,
     * on the line the reference is on. */
    uint32_t now = LD(&c->idle_clock);
    if (LD(&e->used) != now)
        ST(&e->used, now);
    uint32_t old = __atomic_fetch_sub(&e->ref, 1, __ATOMIC_SEQ_CST);
    if (old == 1)
        return release_last(c, e, 1);
    if (old == 2 && (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & MRC_E_IN_TREE)) {
        /* An entry at the tail (with no earlier release of ours pending, which would move
         * past it), or among the most recently moved quarter of the LRU, stays:
         * the order among recent entries hardly matters for eviction, and skipping the
         * move keeps a thread that reuses its buffers off the lock entirely. */
        struct mrc_thread_state *t = thread_state(c);
        uint64_t age = LD(&c->lru_clock) - LD(&e->lru_stamp);
        if ((age == 0 && t->nbatch == 0) || age < LD(&c->tree_count) / 4)
            return 0;
        if (__builtin_expect(LD(&c->over_limit) != 0, 0)) {   /* see evict_released */
            evict_released(c, e);
            return 0;
        }
        if (t->nbatch && t->batch[t->nbatch - 1] == e)
            return 0;   /* already the newest pending move: a buffer reused in a loop */
        t->batch[t->nbatch++] = e;
        if (t->nbatch == BATCH) {
            pthread_mutex_lock(&c->lock);
            batch_flush_locked(c, t);
            pthread_mutex_unlock(&c->lock);
        }
    }
    return 0;
}

void mrc_cache_drop(struct mrc_cache *c, struct mrc_entry *e)
{
    if (__atomic_fetch_sub(&e->ref, 1, __ATOMIC_SEQ_CST) == 1)
        release_last(c, e, 0);
}

/* mrc_cache_flush, with how many of the entries that stay the back-end refused. */
static uint64_t flush(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg), void *arg,
                      uint64_t *refused)
{
    uint64_t busy = 0;
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    struct mrc_entry *victims = take_deferred_locked(c);
    struct mrc_entry *e = c->lru.lru_next;
    while (e != &c->lru) {
        struct mrc_entry *next = e->lru_next;
        if ((!match || match(e, arg)) && !evict_idle_locked(c, e, &victims))
            busy++;
        e = next;
    }
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, victims);
    /* Then the refused ones, those just refused among them: ibv_dealloc_pd and
     * ibv_close_device come here first, and must succeed once the cause is gone. */
    *refused = mrc_cache_failed_retry(c, mrc_cache_failed_take(c, match, arg));
    return busy + *refused;
}

uint64_t mrc_cache_flush(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg), void *arg)
{
    uint64_t refused;
    return flush(c, match, arg, &refused);
}

static int of_domain(const struct mrc_entry *e, void *domain)
{
    return e->domain == domain;
}

uint64_t mrc_cache_flush_domain(struct mrc_cache *c, void *domain)
{
    uint64_t busy = mrc_cache_flush(c, of_domain, domain);
    if (c->p.ops.domain_flushed)
        c->p.ops.domain_flushed(c->p.ops.ctx, domain);
    return busy;
}

/* Entries an expiry looks at per hold of the lock: a few microseconds of a miss's wait. */
#define EXPIRE_CHUNK 256

/* One chunk of an expiry (under the lock): up to EXPIRE_CHUNK entries from the LRU's
 * head, of the *left still to see. Each idle one unused for ticks goes onto *victims;
 * every other moves to the tail, so the LRU's order is kept and the next chunk starts
 * where this one ended. The reference is taken first and the stamp read after: a
 * release stamps before it lets go, so an entry released since the walk began is seen
 * used, and given back. */
static uint64_t expire_chunk_locked(struct mrc_cache *c, uint32_t ticks, uint64_t *left, struct mrc_entry **victims)
{
    uint64_t n = 0;
    uint32_t now = LD(&c->idle_clock);
    for (unsigned k = 0; k < EXPIRE_CHUNK && *left && c->lru.lru_next != &c->lru; k++, (*left)--) {
        struct mrc_entry *e = c->lru.lru_next;
        uint32_t idle = 1;
        if ((uint32_t)(now - LD(&e->used)) >= ticks &&
            __atomic_compare_exchange_n(&e->ref, &idle, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
            if ((uint32_t)(now - LD(&e->used)) >= ticks) {
                entry_remove_locked(c, e);
                e->lru_next = *victims;
                *victims = e;
                n++;
                continue;
            }
            __atomic_store_n(&e->ref, 1u, __ATOMIC_RELEASE);   /* nobody can take it at 0 */
        }
        lru_unlink(e);
        lru_add_tail(c, e);
    }
    return n;
}

uint64_t mrc_cache_expire(struct mrc_cache *c, uint32_t ticks)
{
    __atomic_store_n(&c->idle_clock, LD(&c->idle_clock) + 1, __ATOMIC_RELAXED);
    if (!LD(&c->tree_count) && !LD(&c->ndeferred) && !LD(&c->nparked))
        return 0;
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    uint64_t left = c->tree_count, total = 0;
    struct mrc_entry *victims = take_deferred_locked(c);
    for (;;) {
        uint64_t n = expire_chunk_locked(c, ticks, &left, &victims);
        total += n;
        mrc_stat_add(MRC_STAT_EXPIRED, n);
        /* The moves gave entries fresh LRU stamps: past a limit still, every release
         * must again look old enough to read over_limit (see evict_locked). */
        if (LD(&c->over_limit)) {
            uint32_t over = (uint32_t)over_limits_locked(c);
            ST(&c->over_limit, over);
            if (over)
                ST(&c->lru_clock, c->lru_clock + c->tree_count + 1);
        }
        pthread_mutex_unlock(&c->lock);
        mrc_cache_dereg_list(c, victims);
        victims = NULL;
        if (!left)
            return total;
        pthread_mutex_lock(&c->lock);
        settle_locked(c);
        if (left > c->tree_count)
            left = c->tree_count;
    }
}

/* Puts m into the list of the n largest so far (*k of them, largest first). */
static void largest_add(struct mrc_cache_mr *out, unsigned n, unsigned *k, const struct mrc_cache_mr *m)
{
    unsigned i = *k < n ? (*k)++ : n;
    while (i > 0 && out[i - 1].len < m->len) {
        if (i < n)
            out[i] = out[i - 1];
        i--;
    }
    if (i < n)
        out[i] = *m;
}

unsigned mrc_cache_largest(struct mrc_cache *c, struct mrc_cache_mr *out, unsigned n)
{
    unsigned k = 0;
    if (!n)
        return 0;
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    uint32_t now = LD(&c->idle_clock);
    for (struct mrc_entry *e = c->lru.lru_next; e != &c->lru; e = e->lru_next) {
        uint32_t users = __atomic_load_n(&e->ref, __ATOMIC_RELAXED);
        struct mrc_cache_mr m = {
            .addr = mrc_entry_start(e), .len = mrc_entry_len(e), .access = e->access,
            .users = users ? users - 1 : 0, .idle_ticks = users > 1 ? 0 : now - LD(&e->used),
        };
        if (k == n && out[n - 1].len >= m.len)
            continue;
        if (c->p.keys)
            c->p.keys(e->reg, &m.lkey, &m.rkey);
        largest_add(out, n, &k, &m);
    }
    pthread_mutex_unlock(&c->lock);
    return k;
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

void mrc_cache_forget(struct mrc_cache *c)
{
    /* The entries' memory stays behind in the old pool: a forked child may still hold
     * handles pointing at them, and must never deregister them. The shared hints point
     * only at those entries: their table goes (its pages the parent wrote would stay
     * copied in the child). */
    struct mrc_cache_params p = c->p;
    int closed = c->closed;
    uint32_t noticed = c->pinned_noticed;
    struct mrc_hint *shared = c->shared;
    mrc_cache_init(c, &p);
    c->closed = closed;   /* the child inherits the reason it was closed */
    c->pinned_noticed = noticed;   /* and what was said */
    if (shared)
        mrc_raw_unmap(shared, SHARED_BYTES);
}

void mrc_cache_get_gauges(struct mrc_cache *c, struct mrc_gauges *g)
{
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    g->tree_entries = c->tree_count;
    g->tree_bytes = c->tree_bytes;
    g->deferred = c->ndeferred;
    g->deferred_bytes = c->deferred_bytes;
    g->entries = c->reg_made - LD(&c->reg_freed);
    g->entries_peak = c->reg_count_peak;
    g->bytes = c->reg_made_bytes - LD(&c->reg_freed_bytes);
    g->bytes_peak = c->reg_bytes_peak;
    g->failed = c->nfailed;
    g->failed_bytes = c->failed_bytes;
    pthread_mutex_unlock(&c->lock);
}

uint64_t mrc_cache_idle_bytes(struct mrc_cache *c)
{
    uint64_t idle = 0;
    stats_ready();
    pthread_mutex_lock(&c->lock);
    settle_locked(c);
    /* The tree's own reference alone: nobody holds it (evict_idle_locked's test). */
    for (struct mrc_entry *e = c->lru.lru_next; e != &c->lru; e = e->lru_next)
        if (LD(&e->ref) == 1)
            idle += mrc_entry_len(e);
    pthread_mutex_unlock(&c->lock);
    return idle;
}

int mrc_cache_destroy(struct mrc_cache *c, struct mrc_cache_leftovers *left)
{
    /* The calling thread's spares and pending LRU moves belong to this cache. */
    struct mrc_thread_state *t = thread_state(c);
    for (unsigned i = t->spare_next; i < t->spare_end; i++)
        mrc_pool_put(&c->entries, t->spare[i]);
    t->spare_next = t->spare_end = 0;
    t->nbatch = 0;
    /* Young entries into the tree (pending below would count one in use twice), the
     * deferred deregistered; the failed are left for flush to retry, once. */
    drain(c, 1);
    uint64_t refused;
    uint64_t in_use = flush(c, NULL, NULL, &refused) - refused;
    pthread_mutex_lock(&c->lock);
    uint64_t pending = c->ndeferred + c->nparked + c->nyoung;
    left->failed = c->nfailed;
    pthread_mutex_unlock(&c->lock);
    left->in_use = in_use + pending;
    left->entries = mrc_pool_live(&c->entries);
    if (left->in_use || left->failed || left->entries)
        return -EBUSY;
    if (c->shared)
        mrc_raw_unmap(c->shared, SHARED_BYTES);
    mrc_pool_destroy(&c->entries);
    pthread_mutex_destroy(&c->lock);
    if (ts.spares_keyed)
        pthread_setspecific(spare_key, NULL);
    memset(&ts, 0, sizeof(ts));
    memset(c, 0, sizeof(*c));
    return 0;
}
