/* cache_dereg.c - the back-end's deregistration of dead entries (their gauges and
 * statistics), and the entries whose deregistration it refused (a memory window still
 * bound, a device error): those stay registered, in the gauges, on the failed list until
 * a retry succeeds. Invariants: nothing here runs in a hook or calls the back-end under
 * the cache lock; a refused entry is never dropped, nor deregistered twice; the failed
 * list is under the lock (nfailed also read without it, as a hint). */
#include "core/cache.h"
#include "core/cache_priv.h"
#include "util/clock.h"

#define FAILED_BACKOFF_MAX 4096   /* misses between two retries while refusals go on */

int mrc_cache_backend_dereg(struct mrc_cache *c, void *reg, uint64_t addr, uint64_t len, int shared)
{
    if (shared)
        return c->p.ops.dereg(c->p.ops.ctx, reg);   /* its watch went at once */
    uint64_t t0 = mrc_ticks();
    int rc = c->p.ops.dereg(c->p.ops.ctx, reg);
    mrc_stat_add(MRC_STAT_REAL_DEREG_NS, mrc_ticks_since(t0));
    mrc_stat_add(MRC_STAT_REAL_DEREGS, 1);
    if (rc)
        mrc_stat_add(MRC_STAT_DEREG_FAILURES, 1);
    else
        c->p.src.unwatch(addr, len);
    return rc;
}

void mrc_cache_entry_free(struct mrc_cache *c, struct mrc_entry *e)
{
    __atomic_fetch_add(&c->reg_freed, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->reg_freed_bytes, mrc_entry_pinned(e), __ATOMIC_RELAXED);
    ST(&e->flags, 0u);
    mrc_pool_put(&c->entries, e);
}

int mrc_cache_dereg_try(struct mrc_cache *c, struct mrc_entry *e)
{
    int rc = mrc_cache_backend_dereg(c, e->reg, mrc_entry_start(e), mrc_entry_len(e), e->unpinned == MRC_REG_SHARED);
    if (!rc)
        mrc_cache_entry_free(c, e);
    return rc;
}

static void failed_add(struct mrc_cache *c, struct mrc_entry *e)
{
    pthread_mutex_lock(&c->lock);
    if (!c->failed_backoff) {
        /* The first refusal since all went through: the next miss asks again. */
        c->failed_backoff = 1;
        c->failed_retry_at = c->reg_made + 1;
    }
    e->lru_next = c->failed;
    c->failed = e;
    ST(&c->nfailed, c->nfailed + 1);
    c->failed_bytes += mrc_entry_len(e);
    pthread_mutex_unlock(&c->lock);
}

void mrc_cache_dereg_entry(struct mrc_cache *c, struct mrc_entry *e)
{
    if (mrc_cache_dereg_try(c, e))
        failed_add(c, e);
}

void mrc_cache_dereg_list(struct mrc_cache *c, struct mrc_entry *list)
{
    while (list) {
        struct mrc_entry *next = list->lru_next;
        mrc_cache_dereg_entry(c, list);
        list = next;
    }
}

struct mrc_entry *mrc_cache_failed_take_locked(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg),
                                               void *arg)
{
    struct mrc_entry *out = NULL, **pp = &c->failed;
    while (*pp) {
        struct mrc_entry *e = *pp;
        if (match && !match(e, arg)) {
            pp = &e->lru_next;
            continue;
        }
        *pp = e->lru_next;
        e->lru_next = out;
        out = e;
        ST(&c->nfailed, c->nfailed - 1);
        c->failed_bytes -= mrc_entry_len(e);
    }
    return out;
}

struct mrc_entry *mrc_cache_failed_take(struct mrc_cache *c, int (*match)(const struct mrc_entry *e, void *arg),
                                        void *arg)
{
    if (!LD(&c->nfailed))
        return NULL;
    pthread_mutex_lock(&c->lock);
    struct mrc_entry *list = mrc_cache_failed_take_locked(c, match, arg);
    pthread_mutex_unlock(&c->lock);
    return list;
}

struct mrc_entry *mrc_cache_failed_due_locked(struct mrc_cache *c)
{
    if (c->reg_made < c->failed_retry_at)
        return NULL;
    /* A device that keeps refusing (a window that stays bound) is asked ever less often,
     * so that misses do not each pay a refused call per kept entry. */
    if (c->failed_backoff < FAILED_BACKOFF_MAX)
        c->failed_backoff *= 2;
    c->failed_retry_at = c->reg_made + c->failed_backoff;
    return mrc_cache_failed_take_locked(c, NULL, NULL);
}

uint64_t mrc_cache_failed_retry(struct mrc_cache *c, struct mrc_entry *list)
{
    if (!list)
        return 0;
    uint64_t refused = 0;
    while (list) {
        struct mrc_entry *next = list->lru_next;
        if (mrc_cache_dereg_try(c, list)) {
            failed_add(c, list);
            refused++;
        }
        list = next;
    }
    if (!refused) {
        pthread_mutex_lock(&c->lock);
        if (!c->failed)
            c->failed_backoff = 0;   /* all went through: a later refusal starts afresh */
        pthread_mutex_unlock(&c->lock);
    }
    return refused;
}
