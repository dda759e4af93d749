/* test_snic_odp.c - the software NIC's on-demand paging (SNIC_ODP, SNIC_ODP_FAULT_NS, read
 * at load; snic.mk runs this binary with each setting and the test reads them too):
 * the capabilities reported, ODP MRs that pin nothing and follow remaps, the modelled
 * fault cost and ibv_advise_mr prefetch removing it, implicit MRs, and EOPNOTSUPP where
 * the device has none of it. Timing is only ever asserted as a bound the model sets. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check.h"
#include "snic.h"

#define ODP_LW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND)
#define PAGES 8

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static size_t page;
static int odp, implicit;     /* what SNIC_ODP promises */
static uint64_t fault_ns;

static struct snic_odp_stats ostats(void)
{
    struct snic_odp_stats s;

    snic_get_odp_stats(&s);
    return s;
}

static uint64_t pinned(void)
{
    struct snic_stats s;

    snic_get_stats(&s);
    return s.pinned_bytes;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static char *map_pages(void *at, size_t n, int c)
{
    char *p = mmap(at, n * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);

    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(p, c, n * page);
    return p;
}

static uint64_t u(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

static void test_caps_as_configured(void)
{
    struct ibv_device_attr_ex attr;

    CHECK(ibv_query_device_ex(ctx, NULL, &attr) == 0);
    CHECK(!!(attr.odp_caps.general_caps & IBV_ODP_SUPPORT) == odp);
    CHECK(!!(attr.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) == implicit);
    uint32_t rc = attr.odp_caps.per_transport_caps.rc_odp_caps;
    CHECK(odp ? (rc & IBV_ODP_SUPPORT_WRITE) && (rc & IBV_ODP_SUPPORT_READ) && (rc & IBV_ODP_SUPPORT_RECV)
              : rc == 0);
}

static void test_no_odp_is_eopnotsupp(void)
{
    char *buf = map_pages(NULL, 1, 0);

    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, page, ODP_LW) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_reg_mr(pd, NULL, SIZE_MAX, ODP_LW) == NULL && errno == EOPNOTSUPP);
    munmap(buf, page);
}

/* An ODP MR pins nothing and reaches the pages mapped at the time of each access. */
static void test_odp_mr_follows_remap(void)
{
    char *buf = map_pages(NULL, PAGES, 'a'), out[8];
    uint64_t pin0 = pinned();
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, PAGES * page, ODP_LW | IBV_ACCESS_REMOTE_WRITE);

    CHECK(mr != NULL);
    if (!mr)
        return;
    CHECK(pinned() == pin0 && ostats().live_odp_mrs == 1);
    CHECK(snic_local_write(mr->lkey, u(buf + page), "first", 5) == 0 && !memcmp(buf + page, "first", 5));
    map_pages(buf, PAGES, 'b');   /* the same address, new pages */
    CHECK(snic_rdma_write(mr->rkey, u(buf + page), "second", 6) == 0 && !memcmp(buf + page, "second", 6));
    CHECK(snic_local_read(mr->lkey, u(buf + 2 * page), out, 3) == 0 && !memcmp(out, "bbb", 3));
    /* A page that is gone, and one that cannot be written, fail the access. */
    munmap(buf + 3 * page, page);
    CHECK(snic_local_read(mr->lkey, u(buf + 3 * page), out, 1) == EFAULT);
    mprotect(buf + 4 * page, page, PROT_READ);
    CHECK(snic_local_write(mr->lkey, u(buf + 4 * page), "x", 1) == EFAULT);
    CHECK(snic_local_read(mr->lkey, u(buf + 4 * page), out, 1) == 0 && out[0] == 'b');
    CHECK(ibv_dereg_mr(mr) == 0 && ostats().live_odp_mrs == 0);
    munmap(buf, PAGES * page);
}

/* Each page's first access pays the fault; prefetched pages do not. */
static void test_fault_cost_and_prefetch(void)
{
    char *buf = map_pages(NULL, PAGES, 'c'), out[PAGES * 64];
    struct ibv_mr *a = ibv_reg_mr(pd, buf, PAGES * page, ODP_LW);
    struct ibv_mr *b = ibv_reg_mr(pd, buf, PAGES * page, ODP_LW);
    struct snic_odp_stats s0 = ostats();

    CHECK(a && b);
    if (!a || !b)
        return;
    uint64_t t0 = now_ns();
    CHECK(snic_local_read(a->lkey, u(buf), out, 1) == 0);
    for (int i = 1; i < PAGES; i++)
        CHECK(snic_local_read(a->lkey, u(buf + (size_t)i * page), out, 1) == 0);
    uint64_t cold = now_ns() - t0;
    t0 = now_ns();
    for (int i = 0; i < PAGES; i++)
        CHECK(snic_local_read(a->lkey, u(buf + (size_t)i * page), out, 1) == 0);
    uint64_t warm = now_ns() - t0;
    CHECKF(ostats().faults == s0.faults + PAGES, "%llu faults", (unsigned long long)(ostats().faults - s0.faults));
    CHECKF(cold >= PAGES * fault_ns, "cold %llu ns", (unsigned long long)cold);

    struct ibv_sge sge = { .addr = u(buf), .length = (uint32_t)(PAGES * page), .lkey = b->lkey };
    CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1) == 0);
    CHECK(ostats().prefetched == s0.prefetched + PAGES && ostats().advise_calls == s0.advise_calls + 1);
    t0 = now_ns();
    for (int i = 0; i < PAGES; i++)
        CHECK(snic_local_write(b->lkey, u(buf + (size_t)i * page), "p", 1) == 0);
    uint64_t prefetched = now_ns() - t0;
    CHECK(ostats().faults == s0.faults + PAGES);
    printf("# %d pages at %llu ns a fault: first access %llu ns, again %llu ns, prefetched %llu ns\n", PAGES,
           (unsigned long long)fault_ns, (unsigned long long)cold, (unsigned long long)warm,
           (unsigned long long)prefetched);
    /* Bad advice: a pinned MR, a foreign lkey, a range outside the MR. */
    struct ibv_mr *pin = ibv_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge bad[] = { { u(buf), (uint32_t)page, pin ? pin->lkey : 0 },
                             { u(buf), (uint32_t)page, 0xdeadbeef },
                             { u(buf), (uint32_t)(PAGES + 1) * (uint32_t)page, b->lkey } };
    for (int i = 0; i < 3; i++)
        CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &bad[i], 1) == EINVAL);
    CHECK(pin && ibv_dereg_mr(pin) == 0);
    CHECK(ibv_dereg_mr(a) == 0 && ibv_dereg_mr(b) == 0);
    munmap(buf, PAGES * page);
}

/* One MR over the whole address space, as rdma-core spells it. */
static void test_implicit_mr(void)
{
    char *x = map_pages(NULL, 1, 'x'), *y = map_pages(NULL, 1, 'y'), out[2];
    struct ibv_mr *mr = ibv_reg_mr(pd, NULL, SIZE_MAX, ODP_LW);

    if (!implicit) {
        CHECK(mr == NULL && errno == EOPNOTSUPP);
    } else {
        CHECK(mr != NULL);
        CHECK(mr && snic_local_read(mr->lkey, u(x), out, 1) == 0 && out[0] == 'x');
        CHECK(mr && snic_local_write(mr->lkey, u(y), "Y", 1) == 0 && y[0] == 'Y');
        CHECK(mr && ibv_dereg_mr(mr) == 0);
    }
    munmap(x, page);
    munmap(y, page);
}

static void test_rereg_of_odp_mr_refused(void)
{
    char *buf = map_pages(NULL, 1, 0);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, ODP_LW);

    CHECK(mr != NULL);
    CHECK(mr && ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
                    IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    munmap(buf, page);
}

/* Last: nothing made here is left. */
static void test_nothing_left(void)
{
    CHECK(ostats().live_odp_mrs == 0 && pinned() == 0);
    CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0);
}

int main(void)
{
    const char *env = getenv("SNIC_ODP"), *f = getenv("SNIC_ODP_FAULT_NS");
    struct ibv_device **list = ibv_get_device_list(NULL);

    page = (size_t)sysconf(_SC_PAGESIZE);
    odp = env && (!strcmp(env, "explicit") || !strcmp(env, "implicit"));
    implicit = env && !strcmp(env, "implicit");
    fault_ns = f ? strtoull(f, NULL, 10) : 0;
    if (list && list[0] && (ctx = ibv_open_device(list[0])))
        pd = ibv_alloc_pd(ctx);
    ibv_free_device_list(list);
    if (!pd)
        return fprintf(stderr, "no software NIC to test: %s\n", strerror(errno)), 1;
    RUN(test_caps_as_configured);
    if (!odp) {
        RUN(test_no_odp_is_eopnotsupp);
    } else {
        RUN(test_odp_mr_follows_remap);
        RUN(test_fault_cost_and_prefetch);
        RUN(test_implicit_mr);
        RUN(test_rereg_of_odp_mr_refused);
    }
    RUN(test_nothing_left);
    CHECK_EXIT();
}
