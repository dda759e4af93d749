/* vm_regcost.c - times ibv_reg_mr + ibv_dereg_mr of one pre-faulted buffer, 4 KiB to 256 MiB,
 * on a real device: the provider's pinning cost without a preload, the hit cost under
 * libmrcache (every registration after the first hits). Prints medians as
 * "# regcost LABEL BYTES REG_NS DEREG_NS REPS" rows and "ok - regcost_LABEL". */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "vm_verbs.h"

#define MAX_REPS 64
/* Local access only: the pinning cost is the same on rxe, and a cache may treat remote
 * access (a capability handed to peers) differently, which is not what is measured here. */
#define ACCESS IBV_ACCESS_LOCAL_WRITE

static const char *label = "none";
static const char *dev = "rxe0";
static int max_reps = 31;

/* Repetitions for one size: many where a round is cheap, 5 where it takes milliseconds. */
static int reps_for(size_t size)
{
    int reps = size <= (1u << 20) ? 31 : size <= (16u << 20) ? 11 : 5;

    return reps < max_reps ? reps : max_reps;
}

static void test_regcost(void)
{
    uint64_t reg[MAX_REPS], dereg[MAX_REPS], t0, t1, t2;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    size_t size;
    int r, reps;

    ctx = vm_open_device(dev);
    CHECK(ctx != NULL);
    if (!ctx)
        return;
    pd = ibv_alloc_pd(ctx);
    CHECK(pd != NULL);
    if (!pd)
        return;
    for (size = 4096; size <= (256u << 20); size *= 4) {
        struct ibv_mr *mr;
        void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

        CHECK(buf != MAP_FAILED);
        if (buf == MAP_FAILED)
            break;
        reps = reps_for(size);
        /* One untimed round: the first touch of the provider's paths, or the cache miss. */
        mr = ibv_reg_mr(pd, buf, size, ACCESS);
        CHECKF(mr != NULL, "ibv_reg_mr(%zu): %s", size, strerror(errno));
        if (!mr || ibv_dereg_mr(mr) != 0) {
            munmap(buf, size);
            break;
        }
        for (r = 0; r < reps; r++) {
            t0 = vm_now_ns();
            mr = ibv_reg_mr(pd, buf, size, ACCESS);
            t1 = vm_now_ns();
            CHECK(mr != NULL);
            if (!mr)
                break;
            CHECK(ibv_dereg_mr(mr) == 0);
            t2 = vm_now_ns();
            reg[r] = t1 - t0;
            dereg[r] = t2 - t1;
        }
        munmap(buf, size);
        if (r < reps)
            break;
        qsort(reg, (size_t)reps, sizeof(reg[0]), vm_cmp_u64);
        qsort(dereg, (size_t)reps, sizeof(dereg[0]), vm_cmp_u64);
        printf("# regcost %s %zu %llu %llu %d\n", label, size, (unsigned long long)reg[reps / 2],
               (unsigned long long)dereg[reps / 2], reps);
        fflush(stdout);
    }
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
}

int main(int argc, char **argv)
{
    char name[128];

    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: vm_regcost LABEL [max_reps (1..%d)] [device]\n", MAX_REPS);
        return 2;
    }
    label = argv[1];
    if (argc > 2)
        max_reps = atoi(argv[2]);
    if (argc > 3)
        dev = argv[3];
    if (max_reps < 1 || max_reps > MAX_REPS)
        max_reps = 31;
    snprintf(name, sizeof(name), "regcost_%s", label);
    check_run(name, test_regcost);
    CHECK_EXIT();
}
