/* expand.c - MRCACHE_EXPAND: a local-only miss registers the allocation around it (the
 * seeds' pool tiers, for programs that register pieces or fresh buffers), so that the
 * allocation's later pieces hit. Invariants: the wider range contains the miss's; what
 * it adds lies in the aligned window around the request and in the request's own
 * mapping (its malloc chunk, for one glibc mapped on its own), which the kernel reports
 * as private anonymous memory of the base page that the registration's access can pin
 * (readable; writable for a writable registration); asked on misses only, never in a
 * hook (it asks the kernel with a system call). */
#include <infiniband/verbs.h>

#include "monitor/glibc_heap.h"
#include "runtime/state.h"
#include "util/log.h"

static uint64_t window, base_page;

uint64_t mrc_rt_expand_init(uint64_t w, uint64_t max_bytes, uint64_t page_size)
{
    /* A quarter of the byte limit: one expanded registration then never crowds the
     * program's own out of RLIMIT_MEMLOCK (what the limit defaults to). */
    uint64_t asked = w;
    while (w && w > max_bytes / 4)
        w >>= 1;
    window = w >= 2 * page_size ? w : 0;
    if (window != asked)
        MRC_INFO("MRCACHE_EXPAND: a window of %llu bytes (a quarter of MRCACHE_MAX_BYTES at most)",
                 (unsigned long long)window);
    base_page = page_size;
    return window;
}

int mrc_rt_expand(void *arg, struct mrc_range *r, uint32_t access, uint64_t *first, uint64_t *last)
{
    (void)arg;
    uint64_t qf = r->first, ql = r->last;
    if (!mrc_range_ask(r, MRC_RANGE_VMA)->vma_ok)
        return 0;
    struct mrc_vma v = r->vma;
    if (v.shared || v.page_size != base_page || !v.readable || ((access & IBV_ACCESS_LOCAL_WRITE) && !v.writable))
        return 0;
    /* A malloc'd chunk glibc mapped on its own is the allocation: the kernel may have
     * joined its mapping with a neighbour's, which the program frees apart. */
    uint64_t cs, ce;
    if (mrc_glibc_mmapped_chunk(v.start, v.end, qf, &cs, &ce)) {
        v.start = cs;
        v.end = ce;
    }
    if (ql >= v.end)
        return 0;
    /* The window around the request, not around the merged range (which may already
     * reach past it): the part of the request's mapping inside it joins the range. */
    uint64_t wf = qf & ~(window - 1), wl = wf + (window - 1);
    uint64_t f = wf > v.start ? wf : v.start;
    uint64_t l = wl < v.end - 1 ? wl : v.end - 1;
    if (l < ql)
        l = ql;   /* a request past the window's end: nothing added there */
    f = f < *first ? f : *first;
    l = l > *last ? l : *last;
    if (f == *first && l == *last)
        return 0;
    *first = f;
    *last = l;
    return 1;
}
