/* vm_prep.c - make bench's large-registration and piecewise workloads on a real device
 * (rxe in the VM), run by the guest without the preload and under it with each of
 * MRCACHE_HUGEPAGES and MRCACHE_EXPAND's settings:
 *   vm_prep LABEL big    one 256 MiB registration on a 2 MiB boundary, populated first
 *                        or cold: "# prep big LABEL STATE TOTAL_US REG_US"
 *   vm_prep LABEL pieces every 4 KiB piece of 8 fresh 4 MiB buffers registered once and
 *                        released, in random order: "# prep pieces LABEL PIECES_PER_S"
 * Each run also writes through a registration with an RDMA WRITE and checks it landed
 * ("ok - prep_MODE_LABEL"). Reports, never judges, speed: the CPU is emulated. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "rdma_loop.h"
#include "vm_verbs.h"

#define MIB (1024ul * 1024)
#define BIG (256 * MIB)
#define PIECE 4096ul
#define PBUF (4 * MIB)
#define PBUFS 8

static const char *label = "none";
static struct ibv_pd *pd;
static struct rdma_loop loop;
static char src[PIECE];
static struct ibv_mr *src_mr;

/* An RDMA WRITE of a page into p through mr (which must grant REMOTE_WRITE), checked. */
static int write_lands(struct ibv_mr *mr, char *p, unsigned char fill)
{
    memset(src, fill, sizeof(src));
    if (rdma_loop_write(&loop, src_mr->lkey, src, (uintptr_t)p, mr->rkey, PIECE) != 0)
        return 0;
    return p[0] == (char)fill && p[PIECE - 1] == (char)fill;
}

/* 256 MiB on a 2 MiB boundary: touched first (the touch timed with it) or left cold. */
static void big(int cold)
{
    char *raw = mmap(NULL, BIG + 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(raw != MAP_FAILED);
    if (raw == MAP_FAILED)
        return;
    char *buf = (char *)(((uintptr_t)raw + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
    uint64_t t0 = vm_now_ns();
    if (!cold)
        memset(buf, 1, BIG);
    uint64_t t1 = vm_now_ns();
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, BIG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    uint64_t t2 = vm_now_ns();
    CHECKF(mr != NULL, "ibv_reg_mr(256 MiB): %s", strerror(errno));
    if (mr) {
        CHECK(write_lands(mr, buf + BIG - PIECE, 0x5a));
        printf("# prep big %s %s %.0f %.0f\n", label, cold ? "cold" : "warm", (double)(t2 - t0) / 1e3,
               (double)(t2 - t1) / 1e3);
        CHECK(ibv_dereg_mr(mr) == 0);
    }
    munmap(raw, BIG + 2 * MIB);
}

static void pieces(void)
{
    enum { N = PBUFS * (PBUF / PIECE) };
    static unsigned order[N];
    char *buf[PBUFS];
    for (int b = 0; b < PBUFS; b++) {
        buf[b] = mmap(NULL, PBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(buf[b] != MAP_FAILED);
        if (buf[b] == MAP_FAILED)
            return;
        memset(buf[b], 2, PBUF);
    }
    check_shuffle(order, N, 11);
    int bad = 0;
    uint64_t t0 = vm_now_ns();
    for (unsigned i = 0; i < N; i++) {
        char *p = buf[order[i] / (PBUF / PIECE)] + (order[i] % (PBUF / PIECE)) * PIECE;
        struct ibv_mr *mr = ibv_reg_mr(pd, p, PIECE, IBV_ACCESS_LOCAL_WRITE);
        bad += !mr;
        if (mr)
            ibv_dereg_mr(mr);
    }
    double rate = (double)N * 1e9 / (double)(vm_now_ns() - t0);
    CHECKF(bad == 0, "%d pieces failed to register", bad);
    /* One piece again, with a remote right (exact, never widened), written through. */
    struct ibv_mr *mr = ibv_reg_mr(pd, buf[3] + 5 * PIECE, PIECE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr != NULL && write_lands(mr, buf[3] + 5 * PIECE, 0x33));
    if (mr)
        ibv_dereg_mr(mr);
    printf("# prep pieces %s %.0f\n", label, rate);
    for (int b = 0; b < PBUFS; b++)
        munmap(buf[b], PBUF);
}

static const char *mode;

static void test_prep(void)
{
    struct ibv_context *ctx = vm_open_device("rxe0");
    CHECK(ctx != NULL);
    if (!ctx)
        return;
    pd = ibv_alloc_pd(ctx);
    src_mr = pd ? ibv_reg_mr(pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(src_mr != NULL && rdma_loop_open(&loop, pd, 0) == 0);
    if (!strcmp(mode, "big")) {
        big(0);
        big(1);
    } else {
        pieces();
    }
    fflush(stdout);
    CHECK(rdma_loop_close(&loop) == 0);
    CHECK(ibv_dereg_mr(src_mr) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
}

int main(int argc, char **argv)
{
    char name[128];

    if (argc != 3 || (strcmp(argv[2], "big") && strcmp(argv[2], "pieces"))) {
        fprintf(stderr, "usage: vm_prep LABEL big|pieces\n");
        return 2;
    }
    label = argv[1];
    mode = argv[2];
    snprintf(name, sizeof(name), "prep_%s_%s", mode, label);
    check_run(name, test_prep);
    CHECK_EXIT();
}
