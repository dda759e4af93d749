/* verbs_ops.c - registers and deregisters through the real libibverbs entry points (on
 * demand where MRCACHE_ODP says: backend/odp.c; a miss prepares its memory first and
 * counts what it pinned: prepare.h), and says which access flags grant remote rights.
 * Invariants: calls only real functions, never our own hooks (no double counting, no
 * recursion into the cache); a range is watched by the userfaultfd source before the NIC
 * pins it, and unwatched once its registration failed, was deregistered (the cache never
 * deregisters in a hook) or left the cache for a caller of its own (mrc_verbs_disown); a
 * pd's implicit MR is never watched, and never deregistered here. */
#include <errno.h>
#include <infiniband/verbs.h>

#include "backend/odp.h"
#include "backend/prepare.h"
#include "backend/verbs_ops.h"
#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "util/hot.h"
#include "util/real.h"
#include "util/stats.h"

/* The rights that make the kernel pin pages for writing (its ib_access_writable). */
#define WRITABLE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

MRC_HOT static int verbs_reg(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                             uint32_t access, void **reg)
{
    (void)ctx;
    /* A patcher that wrote over an entry point we rely on without making the page
     * executable through our mprotect is found here, one entry point per miss. */
    mrc_patch_check();
    struct ibv_mr *implicit;
    if (mrc_odp_implicit_get(domain, addr, len, iova, access, &implicit)) {
        /* Follows the mapping: nothing to watch, nothing stale after an unmap. */
        mrc_stat_add(MRC_STAT_ODP_IMPLICIT, 1);
        *reg = implicit;
        return MRC_REG_SHARED;
    }
    /* Huge pages and a parallel fault-in first (each off below its threshold). */
    mrc_prepare(addr, len, (access & WRITABLE) != 0);
    /* Before the pinning: an unmap during the NIC call is then reported, and the cache's
     * race check (mrc_cache_unmap_begin's ring) keeps the registration out of the tree. */
    mrc_uffd_watch(addr, len);
    errno = 0;
    struct ibv_mr *mr = mrc_real.reg_mr_iova2(domain, (void *)(uintptr_t)addr, len, iova, access);
    if (!mr) {
        int err = errno ? -errno : -EINVAL;
        mrc_uffd_unwatch(addr, len);
        return err;
    }
    mrc_prepare_account(addr, len);
    *reg = mr;
    return 0;
}

/* Pinning failed even after the cache let its idle registrations go: on demand, where
 * the device and the memory allow. Otherwise the caller keeps the error pinning got. */
static int verbs_reg_last(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                          void **reg)
{
    if (!mrc_odp_fallback_ok(domain, addr, len, access))
        return -ENOMEM;
    int rc = verbs_reg(ctx, domain, addr, len, iova, access | IBV_ACCESS_ON_DEMAND, reg);
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
    /* The range as registered: libibverbs fills addr and length from the call, and an MR
     * is rereg'd only once out of the cache (mrc_verbs_disown let its watch go then). */
    struct ibv_mr *mr = reg;
    uint64_t addr = (uintptr_t)mr->addr, len = mr->length;
    int rc = mrc_real.dereg_mr(mr);
    if (!rc)
        mrc_uffd_unwatch(addr, len);
    return rc ? -rc : 0;
}

void mrc_verbs_disown(struct ibv_mr *mr)
{
    /* Its new owner deregisters it with the real ibv_dereg_mr, never through
     * verbs_dereg: the watch verbs_reg made is let go here, or it would stay (the
     * range's pages watched, its VMAs split) for the rest of the process. */
    mrc_uffd_unwatch((uintptr_t)mr->addr, mr->length);
}

const struct mrc_cache_ops mrc_verbs_ops = { .reg = verbs_reg, .reg_last = verbs_reg_last, .dereg = verbs_dereg };

void mrc_verbs_keys(const void *reg, uint32_t *lkey, uint32_t *rkey)
{
    const struct ibv_mr *mr = reg;
    *lkey = mr->lkey;
    *rkey = mr->rkey;
}

uint32_t mrc_verbs_remote_mask(void)
{
    /* Everything a peer can use an rkey for; MW_BIND lets it be delegated. */
    return IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
           IBV_ACCESS_MW_BIND;
}

uint32_t mrc_verbs_local_super_mask(void)
{
    return IBV_ACCESS_LOCAL_WRITE;
}

