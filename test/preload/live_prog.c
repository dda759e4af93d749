/* live_prog.c - an RDMA program for the live-view tests: registers COUNT buffers of SIZE
 * bytes (a page apart, so that a cache cannot merge them) REPS times (the first pass
 * misses, the others hit), deregisters all but HOLD of them (released: idle in a cache),
 * prints "ready PID" and then makes no further verbs call: it waits for the end of its
 * standard input, or in pause() with "sleep" until killed. With "api" it first prints
 * VmPin, calls mrcache_flush(NULL, 0) (the header's call) and prints VmPin again; with
 * "exec" it then becomes `sleep 600` without the preload (the same pid, no cache); with
 * "outlive" it unmaps the memory under the HOLD MRs it keeps, then waits as "sleep".
 * Usage: live_prog COUNT SIZE REPS HOLD [sleep|api|exec|outlive]. Exit status 1 when a verbs call
 * fails. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../include/mrcache.h"
#include "snic.h"

int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    unsigned count = (unsigned)atoi(argv[1]), reps = (unsigned)atoi(argv[3]), hold = (unsigned)atoi(argv[4]);
    size_t size = strtoul(argv[2], NULL, 0);
    struct ibv_device **devs = ibv_get_device_list(NULL);
    struct ibv_context *ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd)
        return 1;
    size_t stride = size + (size_t)sysconf(_SC_PAGESIZE);
    char *mem = mmap(NULL, count * stride, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 1;
    memset(mem, 1, count * stride);
    struct ibv_mr **mrs = calloc(count, sizeof(*mrs));
    for (unsigned r = 0; r < reps; r++)
        for (unsigned i = 0; i < count; i++) {
            mrs[i] = ibv_reg_mr(pd, mem + i * stride, size, IBV_ACCESS_LOCAL_WRITE);
            if (!mrs[i])
                return 1;
            if ((r + 1 < reps || i >= hold) && ibv_dereg_mr(mrs[i]))
                return 1;
        }
    if (argc > 5 && !strcmp(argv[5], "api")) {
        long before = snic_vmpin_kb();
        int busy = mrcache_flush(NULL, 0);
        printf("flush %d vmpin %ld %ld\n", busy, before, snic_vmpin_kb());
    }
    int outlive = argc > 5 && !strcmp(argv[5], "outlive");
    if (outlive)
        munmap(mem, count * stride);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (argc > 5 && !strcmp(argv[5], "exec")) {
        unsetenv("LD_PRELOAD");
        execlp("sleep", "sleep", "600", (char *)NULL);
        return 1;
    }
    if ((argc > 5 && !strcmp(argv[5], "sleep")) || outlive)
        for (;;)
            pause();
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}
