/* describe.c - what the runtime knows of memory a miss registers, for the cache core's
 * description of the range (core/events.h): whether huge pages may be advised there
 * (the registry of special mappings, and whether the program refused huge pages
 * anywhere), the kernel's mapping holding its first byte, and whether on-demand paging
 * can serve every page. Invariants: each answer is asked of its owner only when a
 * caller asks the question (the core asks each at most once per miss); never in a hook
 * (the kernel's answers open files); errno is kept. */
#include "monitor/maps.h"
#include "monitor/unmap.h"
#include "runtime/state.h"
#include "util/procmaps.h"

void mrc_rt_describe(struct mrc_range *r, uint32_t ask)
{
    if (ask & MRC_RANGE_HUGE_OK)
        r->huge_ok = !__atomic_load_n(&mrc_monitor.nohugepage, __ATOMIC_RELAXED) &&
                     !mrc_maps_special(r->first, r->last == UINT64_MAX ? UINT64_MAX : r->last + 1);
    if (ask & MRC_RANGE_VMA)
        r->vma_ok = mrc_procmaps_read_vma(r->first, &r->vma) == 0;
    if (ask & MRC_RANGE_PAGEABLE)
        r->pageable = mrc_procmaps_demand_pageable(r->first, r->last) != 0;
}
