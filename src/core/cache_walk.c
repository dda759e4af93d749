/* cache_walk.c - what walks the whole cache: eviction past the limits (least recently
 * used first), flushes (of everything, of a domain, of what a caller matches), the idle
 * timeout's expiry, the largest registrations, the idle bytes and the gauges.
 * Invariants: each settles parked runs first (their entries are still on the LRU, out of
 * the tree); none holds the lock across a back-end call (victims are deregistered once
 * it is let go) or for more than EXPIRE_CHUNK entries of an expiry at a time. */
#include "core/cache.h"
#include "core/cache_priv.h"

/* Evicts idle entries, least recently used first, until the tree is within its limits
 * (or everything idle when all is set). Returns the victims, linked through lru_next. */
struct mrc_entry *mrc_cache_evict_locked(struct mrc_cache *c, int all, struct mrc_entry *victims)
{
    settle_locked(c);   /* parked entries are still on the LRU, but out of the tree */
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

uint64_t mrc_cache_flush_counted(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg), void *arg,
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
    return mrc_cache_flush_counted(c, match, arg, &refused);
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
         * must again look old enough to read over_limit (see mrc_cache_evict_locked). */
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
