/* start.c - the constructor: the runtime sets everything up before main (a hook entered
 * earlier, inside another library's constructor, may have done it already), learns which
 * of our exports the patch source must watch, then lets the PLT calls of free skip
 * libmrcache's own free while its allocator hooks idle. */
#include "interpose/hooks.h"
#include "monitor/patch.h"
#include "runtime/runtime.h"

/* The exports the unmap path relies on: a patcher that finds these by name and writes
 * over them would take the program's calls away from our hooks. */
static const struct mrc_export exports[] = {
    { "munmap", (void *)mrc_own_munmap, MRC_EXPORT_MUNMAP },
    { "mmap", (void *)mrc_own_mmap, MRC_EXPORT_MMAP },
    { "mmap64", (void *)mrc_own_mmap64, MRC_EXPORT_MMAP64 },
    { "mremap", (void *)mrc_own_mremap, MRC_EXPORT_MREMAP },
    { "madvise", (void *)mrc_own_madvise, MRC_EXPORT_MADVISE },
    { "shmat", (void *)mrc_own_shmat, MRC_EXPORT_SHMAT },
    { "shmdt", (void *)mrc_own_shmdt, MRC_EXPORT_SHMDT },
    { "brk", (void *)mrc_own_brk, MRC_EXPORT_BRK },
    { "sbrk", (void *)mrc_own_sbrk, MRC_EXPORT_SBRK },
    { "free", (void *)mrc_hooks_free, -1 },
    { "realloc", (void *)mrc_own_realloc, -1 },
    { "reallocarray", (void *)mrc_own_reallocarray, -1 },
    { "posix_memalign", (void *)mrc_own_posix_memalign, -1 },
    { "aligned_alloc", (void *)mrc_own_aligned_alloc, -1 },
    { "memalign", (void *)mrc_own_memalign, -1 },
    { "valloc", (void *)mrc_own_valloc, -1 },
    { "pvalloc", (void *)mrc_own_pvalloc, -1 },
    { "malloc_trim", (void *)mrc_own_malloc_trim, -1 },
};

__attribute__((constructor)) static void mrc_start(void)
{
    mrc_init();
    mrc_rt_guard_exports(exports, sizeof(exports) / sizeof(exports[0]));
    mrc_rt_free_direct(mrc_hooks_free);
}
