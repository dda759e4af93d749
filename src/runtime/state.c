/* state.c - the process-wide state (state.h) and how it reads in the statistics: which
 * unmap sources are active. Invariant: written only by the runtime's init, fork and
 * source-loss paths. */
#include <stdio.h>

#include "monitor/glibc_heap.h"
#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "runtime/state.h"

struct mrc_runtime mrc_rt;

/* The active sources, e.g. "patch+preload+malloc", "patch(5/8)+preload+malloc+uffd". */
const char *mrc_rt_monitor_name(void)
{
    static char name[48];
    const char *patch = mrc_patch_summary();
    int uffd = mrc_uffd_on();
    int malloc_on = __atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED);
    if (!mrc_rt.watch_unmaps && !*patch && !uffd)
        return "none (unsafe)";
    snprintf(name, sizeof(name), "%s%s%s%s%s", patch, *patch && mrc_rt.watch_unmaps ? "+" : "",
             !mrc_rt.watch_unmaps ? "" : malloc_on ? "preload+malloc" : "preload",
             uffd && (*patch || mrc_rt.watch_unmaps) ? "+" : "", uffd ? "uffd" : "");
    return name;
}
