/* sys_ucx.h - the benchmark's registration interface over UCX's ucs_rcache (system (c)),
 * used as a library over the same software-NIC ibv_reg_mr. Included once, by bench.c.
 * Invariants: UCX installs no memory hook (UCM_EVENT_FLAG_NO_INSTALL, plus the run's
 * UCX_MEM_* settings): every unmap the cache must see is fed by ucm_vm_munmap; regions
 * embed ucs_rcache_region_t first and keep the NIC's MR beside it. */
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include <ucs/sys/string.h>

#define SYS_BINARY "ucx"

struct bench_region {
    ucs_rcache_region_t super;   /* first: the rcache hands us this pointer */
    struct ibv_mr *mr;
};

static struct ibv_context *sys_ctx;
static struct ibv_pd *sys_pd;
static ucs_rcache_t *sys_rcache;
static const int sys_cached = 1;

static ucs_status_t ucx_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                ucs_rcache_region_t *region, uint16_t flags)
{
    (void)context, (void)rcache, (void)arg, (void)flags;
    struct bench_region *r = (struct bench_region *)region;
    r->mr = ibv_reg_mr(sys_pd, (void *)region->super.start, region->super.end - region->super.start,
                       IBV_ACCESS_LOCAL_WRITE);
    return r->mr ? UCS_OK : UCS_ERR_IO_ERROR;
}

static void ucx_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
    (void)context, (void)rcache;
    ibv_dereg_mr(((struct bench_region *)region)->mr);
}

static void ucx_dump_region(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region,
                            char *buf, size_t max)
{
    (void)context, (void)rcache;
    snprintf(buf, max, "lkey 0x%x", ((struct bench_region *)region)->mr->lkey);
}

static const ucs_rcache_ops_t ucx_ops = { ucx_mem_reg, ucx_mem_dereg, ucx_dump_region };

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
    /* As UCX's IB memory domain configures it, minus the hooks (see the header). */
    ucs_rcache_params_t p = {
        .region_struct_size = sizeof(struct bench_region),
        .alignment = UCS_RCACHE_MIN_ALIGNMENT,
        .max_alignment = 4096,
        .ucm_events = UCM_EVENT_VM_UNMAPPED | UCM_EVENT_FLAG_NO_INSTALL,
        .ucm_event_priority = 1000,
        .ops = &ucx_ops,
        .context = NULL,
        .flags = 0,
        .max_regions = (unsigned long)-1,
        .max_size = UCS_MEMUNITS_INF,
        .max_unreleased = UCS_MEMUNITS_INF,
    };
    if (ucs_rcache_create(&p, "bench", NULL, &sys_rcache) != UCS_OK)
        die("ucs_rcache_create failed");
}

static inline void *sys_reg(void *addr, size_t len)
{
    ucs_rcache_region_t *r;
    if (ucs_rcache_get(sys_rcache, addr, len, PROT_READ | PROT_WRITE, NULL, &r) != UCS_OK)
        die("ucs_rcache_get failed");
    return r;
}

static inline void sys_dereg(void *h)
{
    ucs_rcache_region_put(sys_rcache, h);
}

static inline uint32_t sys_lkey(void *h)
{
    return ((struct bench_region *)h)->mr->lkey;
}

static inline void *sys_nic_reg(void *addr, size_t len)
{
    struct ibv_mr *mr = ibv_reg_mr(sys_pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        die("ibv_reg_mr (NIC) failed");
    return mr;
}

static inline void sys_nic_dereg(void *h)
{
    if (ibv_dereg_mr(h))
        die("ibv_dereg_mr (NIC) failed");
}

/* What UCX's munmap hook would do, then the unmap itself. */
static inline void sys_unmap(void *addr, size_t len)
{
    ucm_vm_munmap(addr, len);
    if (munmap(addr, len))
        die("munmap failed");
}

/* Tells the rcache about a range already unmapped behind its back. */
static inline void sys_forget(void *addr, size_t len)
{
    ucm_vm_munmap(addr, len);
}
