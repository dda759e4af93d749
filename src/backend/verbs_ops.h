/* verbs_ops.h - the cache's back-end over libibverbs: registration through the real
 * ibv_reg_mr_iova2, deregistration through the real ibv_dereg_mr, prefetch of what is
 * served on demand, and the access bits the cache must tell apart. */
#ifndef MRC_VERBS_OPS_H
#define MRC_VERBS_OPS_H

#include <infiniband/verbs.h>

#include "core/cache.h"

extern const struct mrc_cache_ops mrc_backend_ops;

/* The lkey and rkey of a registration mrc_backend_ops made (the cache params' keys). */
void mrc_backend_keys(const void *reg, uint32_t *lkey, uint32_t *rkey);

/* Access bits: remote ones (matched exactly) and those a local request may get more of. */
uint32_t mrc_backend_remote_mask(void);
uint32_t mrc_backend_local_super_mask(void);

/* Whether a registration with these access flags can be cached at all: ODP pins nothing
 * (it faults pages in), zero-based changes the address space. Inline: every
 * registration asks. */
static inline int mrc_backend_cacheable(unsigned int access)
{
    return !(access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED));
}

#endif
