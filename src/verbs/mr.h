/* mr.h - the verbs semantics over the cache: the MR handles libmrcache gives callers, and
 * the logic behind ibv_reg_mr (every variant), ibv_dereg_mr, ibv_rereg_mr, and what
 * ibv_dealloc_pd and ibv_close_device need first. Each function follows the errno
 * contract of the verbs call it implements. The runtime decides when a call reaches
 * these (ready, caching on) and wires them to the cache at init. */
#ifndef MRC_MR_H
#define MRC_MR_H

#include <stdint.h>

#include "core/cache.h"
#include "util/pool.h"

struct ibv_pd;
struct ibv_mr;
struct ibv_context;
struct mrc_callsite;

/* A handle that held memory an invalidation changed, as the held callback is told it. */
struct mrc_verbs_held {
    const struct ibv_mr *mr;     /* the handle, as the program holds it */
    uint64_t addr, len;          /* the handle's own range, as registered */
    uint32_t lkey, rkey, access;
    const void *caller;          /* the registration's return address (NULL: unknown) */
    struct mrc_callsite *site;   /* its call site's stack (MRCACHE_CALLSITES), or NULL */
};

typedef void mrc_verbs_held_fn(const struct mrc_verbs_held *held, const struct mrc_inuse_rec *rec, void *arg);

struct mrc_verbs {
    struct mrc_cache *cache;
    struct mrc_pool handles;
    const uint32_t *fork_gen;   /* the process's generation: handles of an older one are a parent's */
    mrc_verbs_held_fn *held;
    void *held_arg;
    uint32_t scanning;          /* mrc_verbs_in_use_find calls under way */
};

struct mrc_verbs_params {
    struct mrc_cache *cache;
    const uint32_t *fork_gen;
    /* Optional: told of each handle found holding memory that changed under it (from a
     * deregistration of it, or mrc_verbs_in_use_find). Not in a hook; any thread. */
    mrc_verbs_held_fn *held;
    void *held_arg;
    uint64_t verify_period;     /* MRCACHE_VERIFY: check 1 hit in N; 0 off */
    uint64_t max_entries;       /* sizes verify mode's side table */
};

/* Prepares v over its cache. At start-up, before any registration. */
void mrc_verbs_init(struct mrc_verbs *v, const struct mrc_verbs_params *p);

/* Set on a thread while its registration is inside the cache: libibverbs' own ibv_reg_mr
 * re-enters through ibv_reg_mr_iova2@plt, and that call must go straight to the NIC. */
extern __thread int mrc_verbs_tls_in_reg;
static inline int mrc_verbs_in_reg(void)
{
    return mrc_verbs_tls_in_reg;
}

/* Set by the exported registration calls: the return address the handle made next
 * keeps as its caller's. */
extern __thread const void *mrc_verbs_tls_caller;

/* ibv_reg_mr_iova2 semantics: a handle for [addr, addr+len) at iova, served from the
 * cache (pd, addr and len non-zero, access cacheable), or NULL + errno. */
struct ibv_mr *mrc_verbs_reg_mr(struct mrc_verbs *v, struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
                                unsigned int access);
/* The NIC's own registration, counted as uncached. */
struct ibv_mr *mrc_verbs_reg_uncached(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access);
struct ibv_mr *mrc_verbs_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                       int access, int counted);
/* 0 or an errno value; MRs that are not ours (v NULL: none is) go to libibverbs. */
int mrc_verbs_dereg_mr(struct mrc_verbs *v, struct ibv_mr *mr);
int mrc_verbs_rereg_mr(struct mrc_verbs *v, struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
                       int access);
/* Deregisters the idle cached MRs of a pd or a context: they would make it busy where
 * the program released them all. Returns how many stay because in use. */
uint64_t mrc_verbs_flush_pd(struct mrc_verbs *v, struct ibv_pd *pd);
uint64_t mrc_verbs_flush_context(struct mrc_verbs *v, struct ibv_context *ctx);

/* Calls the held callback for each live handle over a cached registration that held
 * memory of rec's range across that invalidation (registered before it, not
 * deregistered), each handle once in its life. Reads every handle slot without a lock
 * (the pool is type-stable): a handle deregistered meanwhile was told at its
 * deregistration, if not here. Not from a hook. */
void mrc_verbs_in_use_find(struct mrc_verbs *v, const struct mrc_inuse_rec *rec);

/* The handle pool's reserve (the helper thread's): see mrc_pool_set_reserve. */
void mrc_verbs_set_reserve(struct mrc_verbs *v, void (*low)(void *arg), void *arg);
void mrc_verbs_refill(struct mrc_verbs *v);

/* Fork: the handle pool's lock is held across fork; in the child it is made anew. */
void mrc_verbs_fork_prepare(struct mrc_verbs *v);
void mrc_verbs_fork_parent(struct mrc_verbs *v);
void mrc_verbs_fork_child(struct mrc_verbs *v);

#endif
