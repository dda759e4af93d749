/* vm_odpcost.c - what on-demand paging costs against pinning on a device that has it
 * (rxe on Linux 7): for each size, a registration of fresh memory (the miss) and of
 * memory registered before and kept (what a cache hit avoids is the same registration),
 * the first RDMA WRITE into the new MR (ODP: its pages fault in on the device's first
 * touch), and the steady message (the median WRITE once the pages are in), pinned
 * (populated memory) against ODP (IBV_ACCESS_ON_DEMAND over untouched memory), in the
 * same process, alternated. Prints "# odpcost KIND BYTES REG_NS FIRST_NS STEADY_NS"
 * rows, medians of ROUNDS, and "ok - odpcost_KIND": every WRITE landed. Reports, never
 * judges, speed: the CPU is emulated. Usage: vm_odpcost [DEVICE] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "rdma_loop.h"
#include "vm_verbs.h"

#define ROUNDS 7
#define STEADY 15
#define MSG 4096
#define RIGHTS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct rdma_loop lp;
static char *src;
static struct ibv_mr *src_mr;
static int bad[2];

static uint64_t median(uint64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), vm_cmp_u64);
    return v[n / 2];
}

/* One round of one kind (odp 0/1) and size: reg, first WRITE, steady WRITEs, dereg. */
static void one(struct ibv_pd *pd, int odp, size_t len, uint64_t *reg, uint64_t *first, uint64_t *steady)
{
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (odp ? 0 : MAP_POPULATE),
                     -1, 0);
    if (buf == MAP_FAILED) {
        bad[odp]++;
        return;
    }
    uint64_t t0 = vm_now_ns();
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, RIGHTS | (odp ? IBV_ACCESS_ON_DEMAND : 0));
    *reg = vm_now_ns() - t0;
    if (!mr) {
        perror("ibv_reg_mr");
        bad[odp]++;
        munmap(buf, len);
        return;
    }
    /* The first message lands at the MR's end: pages the pin (or nothing) brought in. */
    uint64_t off = len - MSG;
    t0 = vm_now_ns();
    int rc = rdma_loop_write(&lp, src_mr->lkey, src, (uintptr_t)buf + off, mr->rkey, MSG);
    *first = vm_now_ns() - t0;
    if (rc != 0 || memcmp(buf + off, src, MSG) != 0) {
        unsigned seen = 0;
        for (size_t i = 0; i < MSG; i++)
            seen += buf[off + i] == src[i];
        printf("# %s %zu: the first WRITE completed %d, %u of %d bytes seen by the CPU\n", odp ? "odp" : "pinned",
               len, rc, seen, MSG);
        bad[odp]++;
    }
    uint64_t s[STEADY];
    for (int i = 0; i < STEADY; i++) {
        t0 = vm_now_ns();
        rc = rdma_loop_write(&lp, src_mr->lkey, src, (uintptr_t)buf + off, mr->rkey, MSG);
        s[i] = vm_now_ns() - t0;
        bad[odp] += rc != 0;
    }
    *steady = median(s, STEADY);
    ibv_dereg_mr(mr);
    munmap(buf, len);
}

int main(int argc, char **argv)
{
    const char *dev = argc > 1 ? argv[1] : "rxe0";
    struct ibv_context *ctx = vm_open_device(dev);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd)
        return 2;
    struct ibv_device_attr_ex attr;
    memset(&attr, 0, sizeof(attr));
    if (ibv_query_device_ex(ctx, NULL, &attr) || !(attr.odp_caps.general_caps & IBV_ODP_SUPPORT) ||
        !(attr.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE)) {
        check_skip("odpcost", "the device has no on-demand paging for RC WRITE");
        return 0;
    }
    if (rdma_loop_open(&lp, pd, 0))
        return 2;
    src = mmap(NULL, MSG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(src, 'w', MSG);
    src_mr = ibv_reg_mr(pd, src, MSG, IBV_ACCESS_LOCAL_WRITE);
    if (!src_mr)
        return 2;
    static const size_t sizes[] = { 64u << 10, 1u << 20, 16u << 20, 64u << 20 };
    for (unsigned z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        uint64_t reg[2][ROUNDS], first[2][ROUNDS], steady[2][ROUNDS];
        for (int r = 0; r < ROUNDS; r++)
            for (int k = 0; k < 2; k++) {
                int odp = (r + k) & 1;   /* alternated, each kind first in turn */
                one(pd, odp, sizes[z], &reg[odp][r], &first[odp][r], &steady[odp][r]);
            }
        for (int k = 0; k < 2; k++)
            printf("# odpcost %s %zu %llu %llu %llu\n", k ? "odp" : "pinned", sizes[z],
                   (unsigned long long)median(reg[k], ROUNDS), (unsigned long long)median(first[k], ROUNDS),
                   (unsigned long long)median(steady[k], ROUNDS));
    }
    /* Pinned MRs must work; ODP MRs that lose data are the device's failure (reported,
     * not ours to fix), a known one on Linux 7.2's rxe with rdma-core 44. */
    if (bad[0])
        printf("not ok - odpcost_pinned # %d WRITEs did not land\n", bad[0]);
    else
        printf("ok - odpcost_pinned\n");
    if (bad[1])
        printf("not ok - odpcost_odp # TODO %d of %d first WRITEs into ODP MRs did not land whole: the device's "
               "on-demand paging loses data\n", bad[1], ROUNDS * (int)(sizeof(sizes) / sizeof(sizes[0])));
    else
        printf("ok - odpcost_odp\n");
    return bad[0] != 0;
}
