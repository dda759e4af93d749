/* hooks_mem.c - the exported munmap family and the calls that discard or replace pages
 * in place (process_madvise, remap_file_pages); each forwards to monitor/unmap.c (a
 * MADV_COLLAPSE first lets the runtime release idle registrations over its range). Before
 * the real functions are known (a call during our own symbol lookup) the kernel is
 * asked directly (util/sys.h, which sets errno as libc does), so nothing here can recurse
 * or fail for want of a pointer. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/uio.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "monitor/unmap.h"
#include "runtime/runtime.h"
#include "util/real.h"
#include "util/sys.h"

/* The slow paths apart, so that the fast ones are a test and a tail call: with them
 * inline the compiler saves every argument register first, on every call. */
__attribute__((noinline)) static int munmap_watched(void *addr, size_t len)
{
    if (!mrc_real_ensure_libc() || !mrc_real.munmap)
        return mrc_sys_munmap(addr, len);
    return mrc_on_munmap(addr, len);
}

__attribute__((noinline)) static void *mmap_watched(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (!mrc_real_ensure_libc() || !mrc_real.mmap)
        return mrc_sys_mmap(addr, len, prot, flags, fd, off);
    return mrc_on_mmap(addr, len, prot, flags, fd, off);
}

MRC_EXPORT int munmap(void *addr, size_t len)
{
    /* The fast path while nothing was ever registered and no special mapping exists: a
     * few loads, a branch, a tail call. */
    int (*real)(void *, size_t) = __atomic_load_n(&mrc_real.munmap, __ATOMIC_RELAXED);
    if (__builtin_expect(real && !mrc_monitor_busy(), 1))
        return real(addr, len);
    return munmap_watched(addr, len);
}

MRC_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *(*real)(void *, size_t, int, int, int, off_t) = __atomic_load_n(&mrc_real.mmap, __ATOMIC_RELAXED);
    /* What mrc_on_mmap would pass straight on: no record to keep, nothing replaced
     * under a registration (only MAP_FIXED replaces). A refusal for want of the VMAs our
     * watches hold is made again, as there. */
    if (__builtin_expect(real && !mrc_mmap_special(flags) && !mrc_maps_any() &&
                             (!(flags & MAP_FIXED) || !mrc_sink_armed(&mrc_monitor.sink)), 1)) {
        void *p = real(addr, len, prot, flags, fd, off);
        if (__builtin_expect(p == MAP_FAILED, 0) && mrc_monitor_maps_again())
            p = real(addr, len, prot, flags, fd, off);
        return p;
    }
    return mmap_watched(addr, len, prot, flags, fd, off);
}

/* Our own mmap, by its hidden name: the exported one would be a call through the PLT. */
MRC_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mrc_own_mmap(addr, len, prot, flags, fd, off);
}

MRC_EXPORT void *mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    if (!mrc_real_ensure_libc() || !mrc_real.mremap)
        return mrc_sys_mremap(old, old_size, new_size, flags, new_addr);
    return mrc_on_mremap(old, old_size, new_size, flags, new_addr);
}

MRC_EXPORT int madvise(void *addr, size_t len, int advice)
{
    if (!mrc_real_ensure_libc() || !mrc_real.madvise)
        return mrc_sys_madvise(addr, len, advice);
    if (__builtin_expect(advice == MADV_COLLAPSE, 0))
        mrc_rt_before_collapse(addr, len);   /* pinned idle pages would refuse it */
    return mrc_on_madvise(addr, len, advice);
}

MRC_EXPORT ssize_t process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags)
{
    if (!mrc_real_ensure_libc() || !mrc_real.process_madvise)
        return mrc_sys_process_madvise(pidfd, iov, n, advice, flags);
    return mrc_on_process_madvise(pidfd, iov, n, advice, flags);
}

MRC_EXPORT int remap_file_pages(void *addr, size_t size, int prot, size_t pgoff, int flags)
{
    if (!mrc_real_ensure_libc() || !mrc_real.remap_file_pages)
        return mrc_sys_remap_file_pages(addr, size, prot, pgoff, flags);
    return mrc_on_remap_file_pages(addr, size, prot, pgoff, flags);
}

MRC_EXPORT void *shmat(int id, const void *addr, int flags)
{
    if (!mrc_real_ensure_libc() || !mrc_real.shmat)
        return mrc_sys_shmat(id, addr, flags);
    return mrc_on_shmat(id, addr, flags);
}

MRC_EXPORT int shmdt(const void *addr)
{
    if (!mrc_real_ensure_libc() || !mrc_real.shmdt)
        return mrc_sys_shmdt(addr);
    return mrc_on_shmdt(addr);
}

MRC_EXPORT int brk(void *addr)
{
    if (!mrc_real_ensure_libc() || !mrc_real.brk) {
        errno = ENOMEM;
        return -1;
    }
    return mrc_on_brk(addr);
}

MRC_EXPORT void *sbrk(intptr_t incr)
{
    if (!mrc_real_ensure_libc() || !mrc_real.sbrk) {
        errno = ENOMEM;
        return (void *)-1;
    }
    return mrc_on_sbrk(incr);
}
MRC_OWN_ALL(MRC_FNS_MEM)
