/* hooks_verbs.c - the exported libibverbs entry points; each forwards to the runtime's
 * gate (runtime/verbs_entry.c) in front of the verbs front-end (verbs/mr.c). ibv_reg_mr
 * (1.1) and ibv_reg_mr_iova are served here without calling the real ones, which would
 * re-enter through ibv_reg_mr_iova2@plt: one registration is counted and cached once.
 * The IBVERBS_1.0 entry points of ancient binaries also bind here (unversioned
 * definitions satisfy any version); that ABI is not supported. */
#include <infiniband/verbs.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "runtime/runtime.h"
#include "util/hot.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

MRC_HOT MRC_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return mrc_rt_reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned int)access, __builtin_return_address(0));
}

MRC_HOT MRC_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
    return mrc_rt_reg_mr(pd, addr, length, iova, (unsigned int)access, __builtin_return_address(0));
}

MRC_HOT MRC_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                                   unsigned int access)
{
    return mrc_rt_reg_mr(pd, addr, length, iova, access, __builtin_return_address(0));
}

MRC_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
                                            int fd, int access)
{
    return mrc_rt_reg_dmabuf_mr(pd, offset, length, iova, fd, access);
}

MRC_HOT MRC_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    return mrc_rt_dereg_mr(mr);
}

MRC_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
                            int access)
{
    return mrc_rt_rereg_mr(mr, flags, pd, addr, length, access);
}

MRC_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    return mrc_rt_dealloc_pd(pd);
}

MRC_EXPORT int ibv_close_device(struct ibv_context *context)
{
    return mrc_rt_close_device(context);
}

MRC_OWN_ALL(MRC_FNS_VERBS)
