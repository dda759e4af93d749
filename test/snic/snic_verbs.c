/* snic_verbs.c - libibverbs' PD and MR calls, shaped like rdma-core 44's verbs.c where an
 * interposer can tell: ibv_reg_mr and ibv_reg_mr_iova tail-call ibv_reg_mr_iova2 through
 * the PLT (check-plt.sh verifies); fork ranges are taken before the device call and given
 * back on failure or dereg. Errors: pointer calls NULL + errno; int calls an errno value
 * (also in errno); ibv_rereg_mr 0 or an enum ibv_rereg_mr_err_code. */
#include <errno.h>
#include <stdbool.h>

#include "snic_priv.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static int fail(int err)
{
    errno = err;
    return err;
}

SNIC_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct ibv_pd *pd;

    if (!context) {
        errno = EINVAL;
        return NULL;
    }
    pd = nic_alloc_pd(context);
    if (pd)
        pd->context = context;
    return pd;
}

/* EBUSY while MRs, QPs or SRQs remain on the PD. */
SNIC_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    int err = pd ? nic_dealloc_pd(pd) : EINVAL;

    return err ? fail(err) : 0;
}

/* Every ibv_reg_mr variant lands here; entries are counted before anything else so the
 * PLT re-entry shows in snic_stats.iova2_entries even for calls that then fail. */
SNIC_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                            uint64_t iova, unsigned int access)
{
    bool odp = access & IBV_ACCESS_ON_DEMAND;
    struct ibv_mr *mr;
    int err;

    nic_count_iova2();
    if (!pd) {
        errno = EINVAL;
        return NULL;
    }
    if (!odp && ibv_dontfork_range(addr, length))
        return NULL;
    mr = nic_reg_mr(pd, addr, length, iova, access);
    if (mr) {
        mr->context = pd->context;
        mr->pd = pd;
        mr->addr = addr;
        mr->length = length;
    } else if (!odp) {
        err = errno;
        ibv_dofork_range(addr, length);
        errno = err;
    }
    return mr;
}

SNIC_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

SNIC_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
                                           uint64_t iova, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SNIC_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    void *addr;
    size_t length;
    int err;

    if (!mr)
        return fail(EINVAL);
    addr = mr->addr;
    length = mr->length;
    err = nic_dereg_mr(mr);
    if (err)
        return fail(err);
    ibv_dofork_range(addr, length);
    return 0;
}

/* rdma-core's input checks (ERR_INPUT, errno EINVAL), then the device (ERR_CMD with its
 * errno). The device call is all or nothing, so on ERR_CMD the MR is still usable. */
SNIC_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                             size_t length, int access)
{
    bool trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
    void *old_addr;
    size_t old_len;
    int err;

    if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || (trans && (!length || !addr)) ||
        (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (trans && ibv_dontfork_range(addr, length))
        return IBV_REREG_MR_ERR_DONT_FORK_NEW;
    old_addr = mr->addr;
    old_len = mr->length;
    err = nic_rereg_mr(mr, flags, pd, addr, length, access);
    if (err) {
        int ret = trans && ibv_dofork_range(addr, length) ? IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW
                                                          : IBV_REREG_MR_ERR_CMD;
        errno = err;
        return ret;
    }
    if (flags & IBV_REREG_MR_CHANGE_PD)
        mr->pd = pd;
    if (trans) {
        mr->addr = addr;
        mr->length = length;
        if (ibv_dofork_range(old_addr, old_len))
            return IBV_REREG_MR_ERR_DO_FORK_OLD;
    }
    return 0;
}

/* The device has no dma-buf importer (the kernel has no RDMA to hand one to). */
SNIC_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                             uint64_t iova, int fd, int access)
{
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
    snic_log("ibv_reg_dmabuf_mr is not supported by the software NIC (EOPNOTSUPP)");
    errno = EOPNOTSUPP;
    return NULL;
}
