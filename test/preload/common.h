/* common.h - helpers for the preload tests: open the software NIC, register through the
 * ordinary verbs API (these programs know nothing of libmrcache), and check where an
 * RDMA write lands. Header-only; each test program includes it once. */
#ifndef MRC_PRELOAD_COMMON_H
#define MRC_PRELOAD_COMMON_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "snic.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static inline void open_nic(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1) {
        fprintf(stderr, "no RDMA device\n");
        exit(2);
    }
    ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) {
        fprintf(stderr, "cannot open the device or allocate a pd\n");
        exit(2);
    }
}

static inline uint64_t nic_regs(void)
{
    struct snic_stats s;
    snic_get_stats(&s);
    return s.reg_calls;
}

static inline uint64_t nic_live(void)
{
    struct snic_stats s;
    snic_get_stats(&s);
    return s.live_mrs;
}

/* Fills [p, p+len) of the pinned pages behind mr (by lkey) with byte v and reports
 * whether the current mapping sees it: a stale MR writes into pages no longer mapped. */
static inline int write_visible(struct ibv_mr *mr, void *p, size_t len, unsigned char v)
{
    /* The source comes from mmap, not malloc: some tests move the heap's end by hand. */
    unsigned char *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (src == MAP_FAILED)
        return 0;
    memset(src, v, len);
    memset(p, (unsigned char)~v, len);
    int rc = snic_local_write(mr->lkey, (uint64_t)(uintptr_t)p, src, len);
    munmap(src, len);
    if (rc) {
        fprintf(stderr, "snic_local_write: %s\n", strerror(rc));
        return 0;
    }
    const unsigned char *q = p;
    for (size_t i = 0; i < len; i++)
        if (q[i] != v)
            return 0;
    return 1;
}

static inline void *map_anon(void *hint, size_t len, int flags)
{
    void *p = mmap(hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

#endif
