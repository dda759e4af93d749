/* plugin.c - a transport plugin in miniature: it links libibverbs and is loaded with
 * dlopen(RTLD_LOCAL) by a program that does not, as UCX, libfabric and MPI load theirs.
 * plugin_run registers the same buffer twice and returns how many checks failed. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "snic.h"

__attribute__((visibility("default"))) int plugin_run(int expect_cached);

int plugin_run(int expect_cached)
{
    int fails = 0;
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd)
        return 100;
    char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct snic_stats s0, s1;
    snic_get_stats(&s0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
    fails += !a || ibv_dereg_mr(a) != 0;
    struct ibv_mr *b = ibv_reg_mr(pd, p, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
    fails += !b;
    snic_get_stats(&s1);
    uint64_t regs = s1.reg_calls - s0.reg_calls;
    if (expect_cached ? regs != 1 : regs != 2) {
        fprintf(stderr, "plugin: %llu NIC registrations, expected %d\n", (unsigned long long)regs,
                expect_cached ? 1 : 2);
        fails++;
    }
    /* Unmapped and mapped again: the cached entry must not serve the new pages. */
    ibv_dereg_mr(b);
    munmap(p, 1 << 20);
    char *q = mmap(p, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    struct ibv_mr *c = ibv_reg_mr(pd, q, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
    char msg[32] = "fresh pages";
    fails += !c || snic_local_write(c->lkey, (uintptr_t)q, msg, sizeof(msg)) != 0 || memcmp(q, msg, sizeof(msg));
    ibv_dereg_mr(c);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return fails;
}
