/* hooks_malloc.c - the exported allocator functions that can give memory back to the
 * kernel; each forwards to monitor/glibc_heap.c, which calls the next allocator in the
 * chain (glibc's, or one preloaded after us). malloc and calloc are not interposed:
 * they never unmap, and interposing them would only tax every allocation. */
#include <malloc.h>
#include <stdlib.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "monitor/glibc_heap.h"
#include "monitor/unmap.h"
#include "util/real.h"

MRC_EXPORT void free(void *p)
{
    /* While the patched entry points see the allocator's unmaps themselves (the heap
     * monitor idle), the PLT calls of the objects loaded at start-up skip this
     * (runtime/route.c): the frees of objects loaded later, and calls through free's
     * address, still come. A call passed on (hooks idle, or nothing ever registered)
     * costs a few loads, a branch and a tail call. glibc's dynamic trim threshold is
     * mirrored only from the first free the hooks handle; until then the heap monitor
     * assumes the initial (lowest) one, which can only make it invalidate more, never
     * less. */
    void (*real)(void *) = __atomic_load_n(&mrc_real.free, __ATOMIC_RELAXED);
    if (__builtin_expect(real && (!__atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED) ||
                                  !mrc_sink_armed(&mrc_monitor.sink)), 1)) {
        real(p);
        return;
    }
    mrc_on_free(p);
}

MRC_EXPORT void *realloc(void *p, size_t n)
{
    return mrc_on_realloc(p, n);
}

MRC_EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
    return mrc_on_reallocarray(p, n, size);
}

MRC_EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    return mrc_on_posix_memalign(out, align, size);
}

MRC_EXPORT void *aligned_alloc(size_t align, size_t size)
{
    return mrc_on_aligned_alloc(align, size);
}

MRC_EXPORT void *memalign(size_t align, size_t size)
{
    return mrc_on_memalign(align, size);
}

MRC_EXPORT void *valloc(size_t size)
{
    return mrc_on_valloc(size);
}

MRC_EXPORT void *pvalloc(size_t size)
{
    return mrc_on_pvalloc(size);
}

MRC_EXPORT int malloc_trim(size_t pad)
{
    return mrc_on_malloc_trim(pad);
}

MRC_EXPORT int mallopt(int param, int value)
{
    return mrc_on_mallopt(param, value);
}

/* mrc_own_free among them: this free itself, whereas the name free may resolve to a
 * sanitizer's, preloaded first. */
MRC_OWN_ALL(MRC_FNS_MALLOC)
