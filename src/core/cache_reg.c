/* cache_reg.c - what a miss registers through the back-end: its range expanded (the
 * expand hook), else merged with its neighbours', else its own; retried once after
 * evicting every idle entry when the back-end is out of pinnable memory, then the
 * back-end's last try; timed for the statistics. And the registrations made for one
 * caller alone (never cached).
 * Invariants: never under the cache lock; each back-end pin's range is watched by the
 * sources from after the back-end prepared the memory until the registration is gone
 * (at once when the pin failed; never for a registration the back-end shares); each
 * range registered is described once for all its tries. */
#include <errno.h>

#include "core/cache.h"
#include "core/cache_priv.h"
#include "util/clock.h"

/* Registers [first, last], which r describes, through the back-end (cache.h says in
 * which steps), timing the pin for the statistics; its range watched from after the
 * back-end prepared the memory until the pin is gone (an unmap during the NIC call is
 * then seen, and raced_locked keeps the registration out of the tree). Nothing is
 * prefetched when it returns: since insertions wait in the young set, prefetching what
 * they touch made misses 7-10% slower (make bench, row 6: docs/benchmarks.md). */
MRC_HOT static int backend_reg(struct mrc_cache *c, int last_try, void *domain, uint64_t first, uint64_t last,
                               int64_t iova_off, uint32_t access, struct mrc_range *r, void **reg)
{
    uint64_t len = last - first + 1;
    c->p.src.check();
    uint64_t t0 = mrc_ticks();   /* the preparation and the watch count as the registration's */
    if (!last_try && c->p.ops.shared &&
        c->p.ops.shared(c->p.ops.ctx, domain, first, len, first + (uint64_t)iova_off, access, r, reg))
        return MRC_REG_SHARED;
    if (c->p.ops.prepare)
        c->p.ops.prepare(c->p.ops.ctx, first, len, access, r);
    c->p.src.watch(first, len);
    int rc = (last_try ? c->p.ops.reg_last : c->p.ops.reg)(c->p.ops.ctx, domain, first, len,
                                                            first + (uint64_t)iova_off, access, r, reg);
    uint64_t dt = mrc_ticks_since(t0);
    if (rc < 0)
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
    struct mrc_entry *victims = mrc_cache_evict_locked(c, 1, take_deferred_locked(c));
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
                             int64_t iova_off, uint32_t access, struct mrc_range *req, void **reg)
{
    /* The miss's description where this is its range; another range (merged) is
     * described apart, once for all its tries. */
    struct mrc_range own, *r = req;
    if (r->first != first || r->last != last) {
        mrc_range_init(&own, first, last, c->p.src.describe);
        r = &own;
    }
    int rc = backend_reg(c, 0, domain, first, last, iova_off, access, r, reg);
    if (rc == -ENOMEM || rc == -EAGAIN) {
        mrc_stat_add(MRC_STAT_ENOMEM_RETRIES, 1);
        evict_all_idle(c);
        rc = backend_reg(c, 0, domain, first, last, iova_off, access, r, reg);
    }
    if ((rc == -ENOMEM || rc == -EAGAIN) && c->p.ops.reg_last) {
        int last_rc = backend_reg(c, 1, domain, first, last, iova_off, access, r, reg);
        if (last_rc >= 0)
            rc = last_rc;
    }
    return rc;
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

/* A miss's range widened by the expand hook, registered once: the back-end's answer
 * (>= 0: 0, or its word for a registration that pins nothing) and [*rf, *rl] widened,
 * or -1 (the hook left it, or the back-end refused the wider range: the miss then
 * registers its own, evicting for it if need be, as it would unasked). */
static int reg_expanded(struct mrc_cache *c, struct mrc_miss *m, void **reg)
{
    uint64_t f = m->rf, l = m->rl;
    if (!c->p.expand(c->p.expand_arg, &m->range, m->access, &f, &l) || f > m->rf || l < m->rl ||
        (f == m->rf && l == m->rl))
        return -1;
    struct mrc_range wide;
    mrc_range_init(&wide, f, l, c->p.src.describe);
    int rc = backend_reg(c, 0, m->domain, f, l, 0, m->access, &wide, reg);
    if (rc < 0) {
        mrc_stat_add(MRC_STAT_EXPAND_REFUSED, 1);
        return -1;
    }
    mrc_stat_add(MRC_STAT_EXPANDED, 1);
    m->rf = f;
    m->rl = l;
    return rc;
}

MRC_HOT int mrc_cache_miss_register(struct mrc_cache *c, struct mrc_miss *m, void **reg)
{
    int rc = m->merge && c->p.expand ? reg_expanded(c, m, reg) : -1;
    m->expanded = rc >= 0;
    if (!m->expanded)
        rc = reg_retry(c, m->domain, m->rf, m->rl, m->iova_off, m->access, &m->range, reg);
    if (rc < 0 && (m->rf != m->qf || m->rl != m->ql)) {
        /* The merged union did not fit: register just the request. */
        m->rf = m->qf;
        m->rl = m->ql;
        rc = reg_retry(c, m->domain, m->rf, m->rl, m->iova_off, m->access, &m->range, reg);
    }
    return rc;
}

int mrc_cache_get_private(struct mrc_cache *c, void *domain, uint64_t first, uint64_t last, int64_t iova_off,
                          uint32_t access, struct mrc_entry **out)
{
    void *reg;
    struct mrc_range r;
    mrc_range_init(&r, first, last, c->p.src.describe);
    int rc = reg_retry(c, domain, first, last, iova_off, access, &r, &reg);
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
