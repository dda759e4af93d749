/* bind_plugin.c - a plugin that links libibverbs and is loaded with RTLD_DEEPBIND, so its
 * verbs calls bind to libibverbs' own entry points, never to the preload's exports. It
 * registers and deregisters for the program (test_bind.c), which hands MRs both ways. */
#include <infiniband/verbs.h>

#define BP_EXPORT __attribute__((visibility("default")))

BP_EXPORT struct ibv_mr *bp_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
BP_EXPORT int bp_dereg_mr(struct ibv_mr *mr);
BP_EXPORT int bp_dealloc_pd(struct ibv_pd *pd);
BP_EXPORT int bp_close_device(struct ibv_context *ctx);

struct ibv_mr *bp_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ibv_reg_mr(pd, addr, len, access);
}

int bp_dereg_mr(struct ibv_mr *mr)
{
    return ibv_dereg_mr(mr);
}

int bp_dealloc_pd(struct ibv_pd *pd)
{
    return ibv_dealloc_pd(pd);
}

int bp_close_device(struct ibv_context *ctx)
{
    return ibv_close_device(ctx);
}
