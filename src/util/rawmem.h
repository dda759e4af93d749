/* rawmem.h - libmrcache's own memory (pool arenas, statistics blocks, tables): private
 * anonymous mappings made with a raw system call. Invariant: no unmap monitor, ours or
 * another library's patch, ever sees them, so our bookkeeping never reaches the cache's
 * invalidation path and no hook recurses into itself. */
#ifndef MRC_RAWMEM_H
#define MRC_RAWMEM_H

#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* len bytes of zeroed read-write memory (flags: extra MAP_* bits), or NULL with errno set
 * (syscall(2) sets it). */
static inline void *mrc_raw_map(size_t len, int flags)
{
    long r = syscall(SYS_mmap, 0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return r == -1 ? NULL : (void *)r;
}

static inline void mrc_raw_unmap(void *p, size_t len)
{
    syscall(SYS_munmap, p, len);
}

#endif
