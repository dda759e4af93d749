/* vm_e2e.c - the end-to-end workload of `make bench` on a real device: a program sending
 * from 8 malloc'd buffers in turn, each message an RDMA WRITE over a loopback RC QP pair
 * into a target MR, registering every message; alternated, round by round in the same
 * process, with the same program registering each buffer once. Run without and with the
 * preload. Prints "# e2e LABEL BYTES PER_MSG_RATE ONCE_RATE PAIRED_RATIO" rows (messages
 * per CPU second of the process, medians of the rounds; the ratio is the median of each
 * per-message round over its neighbouring once-round) and "ok - e2e_LABEL": every message
 * arrived whole, in either way. Reports, never judges, speed: the CPU is emulated. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rdma_loop.h"
#include "vm_verbs.h"

#define BUFS 8
#define ROUNDS 5
#define SRC_ACCESS IBV_ACCESS_LOCAL_WRITE

static const char *label = "none";
static const char *dev = "rxe0";

struct e2e {
    struct rdma_loop loop;
    struct ibv_pd *pd;
    char *buf[BUFS], *dst;
    struct ibv_mr *once[BUFS], *dst_mr;
    size_t len;
    uint64_t m;   /* messages sent: the next one's fill byte */
    int bad;
};

static uint64_t cpu_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

/* One message from buffer m % BUFS, registered for it unless once is set. */
static int send_one(struct e2e *e, int once)
{
    char *b = e->buf[e->m % BUFS], fill = (char)(e->m & 0xff);
    struct ibv_mr *mr = once ? e->once[e->m % BUFS] : ibv_reg_mr(e->pd, b, e->len, SRC_ACCESS);

    if (!mr) {
        fprintf(stderr, "ibv_reg_mr(%zu): %s\n", e->len, strerror(errno));
        return -1;
    }
    memset(b, fill, e->len);
    e->dst[0] = e->dst[e->len - 1] = (char)~fill;
    if (rdma_loop_write(&e->loop, mr->lkey, b, (uintptr_t)e->dst, e->dst_mr->rkey, e->len) != 0)
        return -1;
    e->bad += e->dst[0] != fill || e->dst[e->len - 1] != fill;
    if (!once && ibv_dereg_mr(mr) != 0)
        return -1;
    e->m++;
    return 0;
}

/* Messages per CPU second over at least one turn through the buffers and 30 ms. */
static double round_rate(struct e2e *e, int once)
{
    uint64_t t0 = vm_now_ns(), c0 = cpu_ns(), n = 0;

    do {
        if (send_one(e, once) != 0)
            return -1;
    } while (++n < BUFS || vm_now_ns() - t0 < 30000000u);
    return (double)n * 1e9 / (double)(cpu_ns() - c0);
}

static int run_size(struct e2e *e, size_t len)
{
    double per[ROUNDS], once[ROUNDS], pair[ROUNDS];
    int i, r;

    e->len = len;
    e->m = 0;
    e->dst = malloc(len);
    e->dst_mr = e->dst ? ibv_reg_mr(e->pd, e->dst, len, RDMA_LOOP_QP_ACCESS) : NULL;
    if (!e->dst_mr)
        return -1;
    for (i = 0; i < BUFS; i++) {
        e->buf[i] = malloc(len);
        if (!e->buf[i])
            return -1;
        memset(e->buf[i], 0, len);
    }
    /* The first turn registers per message (a cache's misses), then the once-handles. */
    for (i = 0; i < BUFS; i++)
        if (send_one(e, 0) != 0)
            return -1;
    for (i = 0; i < BUFS; i++)
        if (!(e->once[i] = ibv_reg_mr(e->pd, e->buf[i], len, SRC_ACCESS)))
            return -1;
    for (r = 0; r < ROUNDS; r++) {   /* the order swapped in turn */
        if (r % 2)
            once[r] = round_rate(e, 1);
        per[r] = round_rate(e, 0);
        if (!(r % 2))
            once[r] = round_rate(e, 1);
        if (per[r] < 0 || once[r] < 0)
            return -1;
        pair[r] = per[r] / once[r];
    }
    printf("# e2e %s %zu %.1f %.1f %.4f\n", label, len, median(per, ROUNDS), median(once, ROUNDS),
           median(pair, ROUNDS));
    fflush(stdout);
    for (i = 0; i < BUFS; i++) {
        CHECK(ibv_dereg_mr(e->once[i]) == 0);
        free(e->buf[i]);
    }
    CHECK(ibv_dereg_mr(e->dst_mr) == 0);
    free(e->dst);
    return 0;
}

static void test_e2e(void)
{
    static struct e2e e;
    struct ibv_context *ctx = vm_open_device(dev);
    size_t len;

    CHECK(ctx != NULL);
    if (!ctx)
        return;
    e.pd = ibv_alloc_pd(ctx);
    CHECK(e.pd != NULL && rdma_loop_open(&e.loop, e.pd, 0) == 0);
    for (len = 4096; len <= (16u << 20); len *= 16)
        CHECKF(run_size(&e, len) == 0, "%zu-byte messages failed", len);
    CHECKF(e.bad == 0, "%d messages arrived wrong", e.bad);
    CHECK(rdma_loop_close(&e.loop) == 0);
    CHECK(ibv_dealloc_pd(e.pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
}

int main(int argc, char **argv)
{
    char name[128];

    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: vm_e2e LABEL [device]\n");
        return 2;
    }
    label = argv[1];
    if (argc > 2)
        dev = argv[2];
    snprintf(name, sizeof(name), "e2e_%s", label);
    check_run(name, test_e2e);
    CHECK_EXIT();
}
