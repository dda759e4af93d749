/* bench_audit.c - what MRCACHE_AUDIT=warn costs a post: a loop of 64-byte RDMA WRITEs
 * (one scatter/gather entry each, signalled, polled) over the device's loopback QP pair,
 * from an MR of 64 buffers the program holds. Prints "post_ns N" (the median of ROUNDS
 * rounds of POSTS posts); run-bench-style A/B pairing is the caller's (audit-bench runs
 * it alternately with and without). Usage: bench_audit [POSTS] */
#include <stdio.h>

#include "common.h"

#define ROUNDS 9
#define LEN 64

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    unsigned posts = argc > 1 ? (unsigned)atoi(argv[1]) : 20000;
    struct rdma_loop lp;
    open_nic();
    if (rdma_loop_open(&lp, pd, test_gid_index()) != 0) {
        printf("post_ns skipped: the device has no loopback RC queue pairs\n");
        return 0;
    }
    char *src = map_anon(NULL, 64 * 4096, 0), *dst = map_anon(NULL, 4096, 0);
    memset(src, 1, 64 * 4096);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, 64 * 4096, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!smr || !dmr) {
        fprintf(stderr, "cannot register\n");
        return 2;
    }
    uint64_t ns[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = rdma_loop_now_ns();
        for (unsigned i = 0; i < posts; i++)
            if (rdma_loop_write(&lp, smr->lkey, src + (i % 64) * 4096, (uintptr_t)dst, dmr->rkey, LEN) != 0)
                return 1;
        ns[r] = (rdma_loop_now_ns() - t0) / posts;
    }
    qsort(ns, ROUNDS, sizeof(ns[0]), cmp);
    printf("post_ns %llu\n", (unsigned long long)ns[ROUNDS / 2]);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    rdma_loop_close(&lp);
    return 0;
}
