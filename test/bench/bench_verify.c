/* bench_verify.c - the cost of a cache hit (ibv_reg_mr + ibv_dereg_mr of a cached range)
 * with and without MRCACHE_VERIFY, for 4 KiB and 1 MiB buffers: run it under the preload
 * with MRCACHE_VERIFY=0 and =1 (make verify-bench). Prints the median of 9 rounds. */
#include <time.h>

#include "common.h"

#define ROUNDS 9
#define ITERS 20000

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(void)
{
    static const size_t sizes[] = { 4096, 1 << 20 };
    const char *v = getenv("MRCACHE_VERIFY");
    open_nic();
    for (unsigned s = 0; s < 2; s++) {
        size_t len = sizes[s];
        char *p = map_anon(NULL, len, 0);
        if (!p)
            return 2;
        memset(p, 1, len);
        uint64_t ns[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            uint64_t t0 = now_ns();
            for (int i = 0; i < ITERS; i++) {
                struct ibv_mr *m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
                if (!m || ibv_dereg_mr(m))
                    return 1;
            }
            ns[r] = (now_ns() - t0) / ITERS;
        }
        qsort(ns, ROUNDS, sizeof(ns[0]), cmp_u64);
        printf("MRCACHE_VERIFY=%s  %7zu B: hit (reg + dereg) %llu ns\n", v ? v : "0", len,
               (unsigned long long)ns[ROUNDS / 2]);
        munmap(p, len);
    }
    return 0;
}
