/* admit.c - which misses the cache may keep: under MRCACHE_SHARED=register (the default) a
 * registration over memory another process can change (MAP_SHARED files, shm, memfd,
 * shared anonymous memory) is its caller's alone: no hook here sees that process.
 * Invariant: asked only while the registry says an admission must look (a miss pays one
 * load otherwise), without the cache lock. */
#include "monitor/maps.h"
#include "runtime/state.h"
#include "util/stats.h"

int mrc_rt_admit(void *arg, struct mrc_range *r)
{
    (void)arg;
    if (!mrc_maps_admit(r->first, r->last))
        return 0;
    mrc_stat_add(MRC_STAT_UNCACHED_SHARED, 1);
    return 1;
}
