/* sys_verbs.h - the benchmark's registration interface over plain libibverbs calls, for
 * systems (a) no cache and (b) libmrcache preloaded: the same binary, so the only
 * difference between the two is LD_PRELOAD. Included once, by bench.c.
 * Invariant: sys_nic_reg/sys_nic_dereg reach the NIC itself (dlvsym on libibverbs'
 * own handle, which an interposer cannot shadow), so a run can time the bare
 * registration next to the cached path in one process. */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include "mrcache.h"

#define SYS_BINARY "verbs"

static struct ibv_context *sys_ctx;
static struct ibv_pd *sys_pd;
static struct ibv_mr *(*nic_reg_fn)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
static int (*nic_dereg_fn)(struct ibv_mr *);
static int sys_cached;   /* an interposer (libmrcache) serves ibv_reg_mr/ibv_dereg_mr */

static void sys_init(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1)
        die("no RDMA device (is LD_LIBRARY_PATH=build/snic set?)");
    sys_ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    sys_pd = sys_ctx ? ibv_alloc_pd(sys_ctx) : NULL;
    if (!sys_pd)
        die("cannot open the device or allocate a pd");
    void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        die("libibverbs.so.1 is not loaded");
    *(void **)&nic_reg_fn = dlvsym(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8");
    *(void **)&nic_dereg_fn = dlvsym(lib, "ibv_dereg_mr", "IBVERBS_1.1");
    if (!nic_reg_fn || !nic_dereg_fn)
        die("libibverbs lacks ibv_reg_mr_iova2@IBVERBS_1.8");
    /* What the program's own calls bind to: libibverbs' functions, or a preload's. */
    sys_cached = dlsym(RTLD_DEFAULT, "ibv_dereg_mr") != (void *)nic_dereg_fn;
}

static inline void *sys_reg(void *addr, size_t len)
{
    struct ibv_mr *mr = ibv_reg_mr(sys_pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("ibv_reg_mr failed");
    return mr;
}

static inline void sys_dereg(void *h)
{
    if (ibv_dereg_mr(h))
        die("ibv_dereg_mr failed");
}

static inline uint32_t sys_lkey(void *h)
{
    return ((struct ibv_mr *)h)->lkey;
}

/* The NIC's registration, past any cache. */
static inline void *sys_nic_reg(void *addr, size_t len)
{
    struct ibv_mr *mr = nic_reg_fn(sys_pd, addr, len, (uintptr_t)addr, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("ibv_reg_mr_iova2 (NIC) failed");
    return mr;
}

static inline void sys_nic_dereg(void *h)
{
    if (nic_dereg_fn(h))
        die("ibv_dereg_mr (NIC) failed");
}

/* An unmap the cache must see: munmap itself, which libmrcache's hook intercepts. */
static inline void sys_unmap(void *addr, size_t len)
{
    if (munmap(addr, len))
        die("munmap failed");
}

/* Tells the cache of a range already unmapped behind its back, without unmapping it
 * again: by now the range may hold another mapping (the helper thread's first malloc
 * arena was seen landing there, and a second munmap then took it away under glibc).
 * Without libmrcache this is -ENOSYS, and there is nothing to forget. */
static inline void sys_forget(void *addr, size_t len)
{
    mrcache_invalidate(addr, len, MRCACHE_INVALIDATE_DEFER);
}
