/* cache.c - the get and the put: lookup (hints, shared hints, the tree), a miss's way
 * into the cache phase by phase (get), lazy release (evicting past the limits), the
 * cache's birth and end. A miss's registration is cache_reg.c, invalidation
 * cache_inval.c, deregistration cache_dereg.c, what is held out of the tree (taken,
 * retired) cache_held.c, eviction and the other walks of the whole cache cache_walk.c.
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
#include "core/cache_hints.h"
#include "core/cache_priv.h"
#include "util/clock.h"
#include "util/hot.h"
#include "util/sys.h"

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

static void nothing_to_check(void)
{
}

static void nothing_to_watch(uint64_t addr, uint64_t len)
{
    (void)addr;
    (void)len;
}

static void nothing_known(struct mrc_range *r, uint32_t ask)
{
    if (ask & MRC_RANGE_HUGE_OK)
        r->huge_ok = 1;
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
    if (!c->p.src.describe)
        c->p.src.describe = nothing_known;
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

/* ---- removal, deregistration ---- */

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

/* ---- get, phase by phase ---- */

/* Whether a request is never cached (counted so): remote rights under
 * MRCACHE_REMOTE=never, or a length past what an entry may be (kept, it would push most
 * of the cache out for one buffer; merges stay within the bound, so no entry can serve
 * it and it is not even looked up). */
MRC_HOT static int kept_apart(const struct mrc_cache *c, int remote, uint64_t len)
{
    if (remote && c->p.remote_policy == MRC_REMOTE_NEVER) {
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
        return 1;
    }
    if (__builtin_expect(len > c->p.max_entry_bytes, 0)) {
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
        mrc_stat_add(MRC_STAT_UNCACHED_LARGE, 1);
        return 1;
    }
    return 0;
}

/* The lookup without the lock: the thread's hints, then the cache's shared ones (an
 * entry found there becomes a hint of the thread's). */
MRC_HOT static struct mrc_entry *lookup_hinted(struct mrc_cache *c, struct mrc_thread_state *t, void *domain,
                                               uint64_t first, uint64_t last, int64_t iova_off, uint32_t access)
{
    struct mrc_entry *e = hint_lookup(c, t, domain, first, last, iova_off, access);
    if (!e && (e = shared_lookup(c, domain, first, last, iova_off, access)) != NULL)
        hint_add(t, e, domain, first);
    return e;
}

/* What a request that the hints did not serve looks for in the tree, and registers if
 * the tree has nothing: local-only requests at iova == addr are rounded out to whole
 * pages and merged with the entries they overlap; remote ones stay byte-exact, since
 * rounding or merging would let a peer reach bytes the program did not expose. */
MRC_HOT static void miss_init(const struct mrc_cache *c, struct mrc_miss *m, void *domain, uint64_t first,
                              uint64_t last, int64_t iova_off, uint32_t access, int remote)
{
    *m = (struct mrc_miss){ .domain = domain, .first = first, .last = last, .iova_off = iova_off, .access = access };
    m->merge = !remote && iova_off == 0;
    m->qf = first;
    m->ql = last;
    if (m->merge) {
        uint64_t pm = c->p.page_size - 1;
        m->qf &= ~pm;
        m->ql = (m->ql | pm) < m->ql ? UINT64_MAX : (m->ql | pm);
    }
    m->rf = m->qf;
    m->rl = m->ql;
    mrc_range_init(&m->range, m->qf, m->ql, c->p.src.describe);
}

/* Announces a miss to concurrent unmaps (under the lock, which it lets go): from here
 * until miss_done, an unmap of its range is seen (raced_locked) and the entry stays out
 * of the tree. The deferred entries, and the failed ones due for a retry, are
 * deregistered on the way, outside the lock. */
MRC_HOT static void miss_announce_locked(struct mrc_cache *c, struct mrc_miss *m)
{
    m->made0 = c->reg_made;
    m->seq0 = __atomic_load_n(&c->inval_seq, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&c->misses, MRC_MISSES_BEGIN, __ATOMIC_SEQ_CST);
    struct mrc_entry *dead = take_deferred_locked(c);
    struct mrc_entry *failed = c->failed ? mrc_cache_failed_due_locked(c) : NULL;
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, dead);
    if (__builtin_expect(failed != NULL, 0))
        mrc_cache_failed_retry(c, failed);
}

/* The tree's lookup, under the lock: an entry that serves the request, referenced and
 * made a hint; else NULL, with the request's range widened to the neighbours it merges
 * with, and the miss announced (miss_announce_locked). The lock is let go either way. */
MRC_HOT static struct mrc_entry *lookup_tree(struct mrc_cache *c, struct mrc_thread_state *t, struct mrc_miss *m)
{
    pthread_mutex_lock(&c->lock);
    settle_locked(c);   /* what drain left, finding the lock busy */
    struct mrc_entry *e = lookup_locked(c, m->domain, m->first, m->last, m->iova_off, m->access,
                                        m->merge ? &m->rf : NULL, &m->rl, &m->kin);
    if (!e) {
        miss_announce_locked(c, m);
        return NULL;
    }
    __atomic_fetch_add(&e->ref, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&c->lock);
    hint_add(t, e, m->domain, m->first);
    shared_add(c, e, m->domain, m->first);
    return e;
}

/* Entries inside a merged miss's range, of its key, are superseded by its registration
 * (under the lock). Only an entry of the key that the lookup saw, one registered since
 * (counted in reg_made, like the miss's own), or one in the range an expansion added
 * can lie inside it: a miss with none of these walks the tree once, not twice. */
MRC_HOT static void miss_supersede_locked(struct mrc_cache *c, const struct mrc_miss *m)
{
    if (!m->merge || (!m->kin && !m->expanded && c->reg_made == m->made0 + 1))
        return;
    struct mrc_itree_node *n = mrc_itree_iter_first(&c->tree, m->rf, m->rl);
    while (n) {
        struct mrc_itree_node *next = mrc_itree_iter_next(n, m->rf, m->rl);
        supersede_locked(c, mrc_entry_of(n), m->domain, m->iova_off, m->access, m->rf, m->rl);
        n = next;
    }
    /* Downwards: a removal moves the last young entry, already seen, into its slot. */
    if (young_may_overlap(c, m->rf, m->rl))
        for (unsigned i = LD(&c->nyoung); i-- > 0;)
            supersede_locked(c, c->young[i].e, m->domain, m->iova_off, m->access, m->rf, m->rl);
}

/* A miss's fresh entry e, registered, goes into the cache: counted, then handed to its
 * caller alone if an unmap raced its registration (the pages it pinned may be the old
 * ones) or the cache was closed meanwhile; else young in the tree, past what it
 * supersedes, with the caller's reference and the tree's, evicting past a limit. */
MRC_HOT static int miss_insert(struct mrc_cache *c, struct mrc_thread_state *t, const struct mrc_miss *m,
                               struct mrc_entry *e, struct mrc_entry **out)
{
    pthread_mutex_lock(&c->lock);
    gauge_made_locked(c, mrc_entry_pinned(e));
    int closed = c->closed;
    if (closed || raced_locked(c, m->seq0, m->rf, m->rl)) {
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
    miss_supersede_locked(c, m);
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
    struct mrc_entry *victims = NULL;
    if (over_limits_locked(c)) {
        batch_flush_locked(c, t);   /* this thread's pending LRU moves first: they are recent */
        victims = mrc_cache_evict_locked(c, 0, NULL);
    }
    struct mrc_entry *dead = take_deferred_locked(c);
    pthread_mutex_unlock(&c->lock);
    mrc_cache_dereg_list(c, victims);
    mrc_cache_dereg_list(c, dead);
    hint_add(t, e, m->domain, m->first);
    *out = e;
    return 0;
}

/* An announced miss: admitted (or registered for its caller alone), registered
 * (cache_reg.c), then put in the cache. */
static int miss(struct mrc_cache *c, struct mrc_thread_state *t, struct mrc_miss *m, struct mrc_entry **out)
{
    if (__builtin_expect(LD(c->p.admit_armed) != 0, 0) && c->p.admit(c->p.admit_arg, &m->range)) {
        miss_done(c);
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
        return mrc_cache_get_private(c, m->domain, m->first, m->last, m->iova_off, m->access, out);
    }
    mrc_stat_add(MRC_STAT_MISSES, 1);
    struct mrc_entry *e = entry_alloc(c, t);
    if (!e) {
        miss_done(c);
        return -ENOMEM;
    }
    void *reg;
    int rc = mrc_cache_miss_register(c, m, &reg);
    if (rc < 0) {
        miss_done(c);
        t->spare[--t->spare_next] = e;   /* never published: no reader holds it */
        mrc_stat_add(MRC_STAT_REG_FAILURES, 1);
        return rc;
    }
    entry_init(c, e, m->domain, m->rf, m->rl, m->iova_off, m->access, reg, rc);
    return miss_insert(c, t, m, e, out);
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
    if (kept_apart(c, remote, len))
        return mrc_cache_get_private(c, domain, first, last, iova_off, access, out);
    struct mrc_thread_state *t = thread_state(c);
    struct mrc_entry *e = lookup_hinted(c, t, domain, first, last, iova_off, access);
    if (!e) {
        struct mrc_miss m;
        miss_init(c, &m, domain, first, last, iova_off, access, remote);
        e = lookup_tree(c, t, &m);
        if (!e)
            return miss(c, t, &m, out);
    }
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
 * the limits: mrc_cache_evict_locked, leaving the tree past one, also advances lru_clock
 * past every entry's stamp, so that each release takes put's slower path, where over_limit is read. */
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
    uint64_t in_use = mrc_cache_flush_counted(c, NULL, NULL, &refused) - refused;
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
