/* patch_sys.c - glibc 2.36's munmap-family wrappers, re-done as inline system calls (see
 * patch_sys.h). Invariant: none of these goes through libc's entry points, which may
 * jump into a hook. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "monitor/patch_sys.h"
#include "monitor/patch_x86.h"
#include "monitor/unmap.h"

static long sys_result(long r)
{
    if ((unsigned long)r > -4096ul) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

int mrc_sys_munmap(void *a, size_t len)
{
    return (int)sys_result(MRC_SC(SYS_munmap, a, len, 0, 0, 0, 0));
}

void *mrc_sys_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (off & 4095) {           /* glibc's MMAP_OFF_LOW_MASK check */
        errno = EINVAL;
        return MAP_FAILED;
    }
    return (void *)sys_result(MRC_SC(SYS_mmap, a, len, prot, flags, fd, off));
}

void *mrc_sys_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    return (void *)sys_result(MRC_SC(SYS_mremap, old, old_size, new_size, flags, new_addr, 0));
}

int mrc_sys_madvise(void *a, size_t len, int advice)
{
    return (int)sys_result(MRC_SC(SYS_madvise, a, len, advice, 0, 0, 0));
}

void *mrc_sys_shmat(int id, const void *a, int flags)
{
    return (void *)sys_result(MRC_SC(SYS_shmat, id, a, flags, 0, 0, 0));
}

int mrc_sys_shmdt(const void *a)
{
    return (int)sys_result(MRC_SC(SYS_shmdt, a, 0, 0, 0, 0, 0));
}

extern void *__curbrk;

int mrc_sys_brk(void *a)
{
    void *r = (void *)MRC_SC(SYS_brk, a, 0, 0, 0, 0, 0);
    __curbrk = r;
    if ((uintptr_t)r < (uintptr_t)a) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

void *mrc_sys_sbrk(intptr_t incr)
{
    if (!__curbrk)
        mrc_sys_brk(NULL);      /* learns the break, as glibc's sbrk does */
    char *cur = __curbrk;
    return incr == 0 || mrc_sys_brk(cur + incr) == 0 ? cur : (void *)-1;
}
