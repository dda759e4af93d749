/* verbs_ops.c - registers and deregisters through the real libibverbs entry points (on
 * demand where MRCACHE_ODP says, prefetching what is served so: backend/odp.c; a miss
 * prepares its memory first and counts what it pinned: prepare.h), and says which access
 * flags grant remote rights.
 * Invariants: calls only real functions, never our own hooks (no double counting, no
 * recursion into the cache); knows no source of memory events (the cache core has the
 * ranges it registers watched: core/events.h); a pd's implicit MR is never deregistered
 * here. */
#include <errno.h>
#include <infiniband/verbs.h>

#include "backend/odp.h"
#include "backend/prepare.h"
#include "backend/verbs_ops.h"
#include "util/hot.h"
#include "util/real.h"
#include "util/stats.h"

/* The rights that make the kernel pin pages for writing (its ib_access_writable). */
#define WRITABLE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

/* A pd's implicit ODP MR serves the request (MRCACHE_ODP=implicit): it follows the
 * mapping, so there is nothing to watch and nothing stale after an unmap. */
static int verbs_shared(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                        struct mrc_range *r, void **reg)
{
    (void)ctx;
    (void)len;
    struct ibv_mr *implicit;
    if (!mrc_odp_implicit_get(domain, addr, iova, access, r, &implicit))
        return 0;
    mrc_stat_add(MRC_STAT_ODP_IMPLICIT, 1);
    *reg = implicit;
    return 1;
}

/* Huge pages and a parallel fault-in first (each off below its threshold). */
MRC_HOT static void verbs_prepare(void *ctx, uint64_t addr, uint64_t len, uint32_t access, struct mrc_range *r)
{
    (void)ctx;
    mrc_prepare(addr, len, (access & WRITABLE) != 0, r);
}

MRC_HOT static int verbs_reg(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                             uint32_t access, struct mrc_range *r, void **reg)
{
    (void)ctx;
    (void)r;
    errno = 0;
    struct ibv_mr *mr = mrc_real.reg_mr_iova2(domain, (void *)(uintptr_t)addr, len, iova, access);
    if (!mr)
        return errno ? -errno : -EINVAL;
    mrc_prepare_account(addr, len);
    *reg = mr;
    return 0;
}

/* Pinning failed even after the cache let its idle registrations go: on demand, where
 * the device and the memory allow. Otherwise the caller keeps the error pinning got. */
static int verbs_reg_last(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                          struct mrc_range *r, void **reg)
{
    if (!mrc_odp_fallback_ok(domain, access, r))
        return -ENOMEM;
    int rc = verbs_reg(ctx, domain, addr, len, iova, access | IBV_ACCESS_ON_DEMAND, r, reg);
    if (rc)
        return rc;
    mrc_stat_add(MRC_STAT_ODP_FALLBACKS, 1);
    return MRC_REG_UNPINNED;
}

static int verbs_dereg(void *ctx, void *reg)
{
    (void)ctx;
    if (mrc_odp_implicit_put(reg))
        return 0;
    int rc = mrc_real.dereg_mr(reg);
    return rc ? -rc : 0;
}

static void verbs_prefetch(void *ctx, void *domain, void *reg, uint64_t iova, uint64_t len, uint32_t access)
{
    (void)ctx;
    mrc_odp_prefetch(domain, ((struct ibv_mr *)reg)->lkey, iova, len, access);
}

static void verbs_domain_flushed(void *ctx, void *domain)
{
    (void)ctx;
    mrc_odp_release_pd(domain);   /* idle once the entries it served are gone */
}

const struct mrc_cache_ops mrc_backend_ops = {
    .shared = verbs_shared, .prepare = verbs_prepare, .reg = verbs_reg, .reg_last = verbs_reg_last,
    .dereg = verbs_dereg, .prefetch = verbs_prefetch, .domain_flushed = verbs_domain_flushed,
};

void mrc_backend_keys(const void *reg, uint32_t *lkey, uint32_t *rkey)
{
    const struct ibv_mr *mr = reg;
    *lkey = mr->lkey;
    *rkey = mr->rkey;
}

uint32_t mrc_backend_remote_mask(void)
{
    /* Everything a peer can use an rkey for; MW_BIND lets it be delegated. */
    return IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
           IBV_ACCESS_MW_BIND;
}

uint32_t mrc_backend_local_super_mask(void)
{
    return IBV_ACCESS_LOCAL_WRITE;
}

