/* test_snic_plt.c - proves the software NIC enters ibv_reg_mr_iova2 through the PLT, as
 * rdma-core does: this executable defines ibv_reg_mr_iova2 (exported, so it interposes
 * like an LD_PRELOAD would), counts entries and forwards with dlsym(RTLD_NEXT). Every
 * registration through ibv_reg_mr or ibv_reg_mr_iova must pass here exactly once. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "snic.h"

typedef struct ibv_mr *reg_fn(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);

static int entries;
static struct ibv_pd *pd;
static char *buf;
static size_t page;

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *p, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    static reg_fn *next;

    entries++;
    if (!next)
        next = (reg_fn *)dlsym(RTLD_NEXT, "ibv_reg_mr_iova2");
    if (!next) {
        errno = ENOSYS;
        return NULL;
    }
    return next(p, addr, length, iova, access);
}

static uint64_t nic_entries(void)
{
    struct snic_stats s;

    snic_get_stats(&s);
    return s.iova2_entries;
}

/* One registration through reg: the wrapper and the NIC's iova2 each entered once. */
static void check_once(struct ibv_mr *(*reg)(void))
{
    int e0 = entries;
    uint64_t n0 = nic_entries();
    struct ibv_mr *mr = reg();

    CHECK(mr != NULL);
    CHECKF(entries == e0 + 1, "wrapper entered %d times", entries - e0);
    CHECKF(nic_entries() == n0 + 1, "NIC iova2 entered %llu times",
           (unsigned long long)(nic_entries() - n0));
    if (mr)
        CHECK(ibv_dereg_mr(mr) == 0);
}

static struct ibv_mr *via_reg_mr(void)
{
    return (ibv_reg_mr)(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);
}

static struct ibv_mr *via_reg_mr_iova(void)
{
    return (ibv_reg_mr_iova)(pd, buf, page, 0x10000, IBV_ACCESS_LOCAL_WRITE);
}

static struct ibv_mr *via_iova2(void)
{
    return ibv_reg_mr_iova2(pd, buf, page, (uintptr_t)buf, IBV_ACCESS_LOCAL_WRITE);
}

static void test_reg_mr_reenters_iova2_through_plt(void)
{
    check_once(via_reg_mr);
}

static void test_reg_mr_iova_reenters_iova2_through_plt(void)
{
    check_once(via_reg_mr_iova);
}

static void test_direct_iova2_is_entered_once(void)
{
    check_once(via_iova2);
}

int main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;

    page = (size_t)sysconf(_SC_PAGESIZE);
    pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    buf = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!pd || buf == MAP_FAILED)
        return 1;
    RUN(test_reg_mr_reenters_iova2_through_plt);
    RUN(test_reg_mr_iova_reenters_iova2_through_plt);
    RUN(test_direct_iova2_is_entered_once);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    CHECK_EXIT();
}
