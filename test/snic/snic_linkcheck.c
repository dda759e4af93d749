/* snic_linkcheck.c - a program built against the system's libibverbs (its verbs.h, its
 * -libverbs) that test_abi.sh runs with LD_LIBRARY_PATH pointing at the software NIC.
 * Exit 0 iff it loaded, found snic0, registered memory through both ibv_reg_mr paths,
 * and the NIC's own counters (looked up by name) saw those registrations. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

struct snic_stats {
    uint64_t live_mrs, live_pds, reg_calls, dereg_calls, iova2_entries, pinned_bytes,
        pinned_peak;
};

typedef void get_stats_fn(struct snic_stats *);

int main(int argc, char **argv)
{
    get_stats_fn *get_stats = (get_stats_fn *)dlsym(RTLD_DEFAULT, "snic_get_stats");
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    static char buf[8192];
    int access = argc > 5 ? 0 : IBV_ACCESS_LOCAL_WRITE; /* not constant: the iova2 path */
    struct ibv_mr *a, *b;
    struct snic_stats s;

    (void)argv;
    if (!get_stats || !pd) {
        fprintf(stderr, "snic_linkcheck: not running on the software NIC\n");
        return 1;
    }
    a = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    b = ibv_reg_mr(pd, buf, sizeof(buf), access);
    get_stats(&s);
    if (!a || !b || s.live_mrs != 2 || s.iova2_entries != 2) {
        fprintf(stderr, "snic_linkcheck: registrations not seen by the NIC\n");
        return 1;
    }
    printf("%s\n", ibv_get_device_name(list[0]));
    if (ibv_dereg_mr(a) || ibv_dereg_mr(b) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
        return 1;
    ibv_free_device_list(list);
    return 0;
}
