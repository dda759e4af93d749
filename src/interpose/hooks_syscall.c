/* hooks_syscall.c - syscall(3), the generic wrapper: a program, a runtime or an
 * executable's own munmap that calls syscall(SYS_munmap, ...) reaches the kernel past
 * every named hook and every patched libc entry point. The numbers that stand for a call
 * libmrcache watches are watched as that call is (an unmap, a discard, a replacing
 * mapping, a child with a copy of the memory); every other number goes straight to
 * libc's. What the kernel returns and errno are those of the call the number stands for,
 * which is what syscall(3) returns for it. Only a system call instruction the program makes
 * itself stays unseen here (the userfaultfd source sees its unmaps). */
#include <errno.h>
#include <linux/sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "monitor/unmap.h"
#include "runtime/runtime.h"
#include "util/real.h"
#include "util/sys.h"

/* Whether clone3's arguments ask for a copy of the memory. Read without faulting (the
 * kernel answers EFAULT for a bad pointer, and so must the program's call, not a crash
 * here); unreadable arguments ask for nothing. */
static int clone3_copies(const void *args, size_t size)
{
    uint64_t flags = 0;
    if (!args || size < sizeof(flags))
        return 0;
    struct iovec local = { &flags, sizeof(flags) }, remote = { (void *)(uintptr_t)args, sizeof(flags) };
    if (mrc_sys_process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof(flags))
        return 0;
    return !(flags & CLONE_VM);
}

/* Six arguments are read and passed on whatever the number, as glibc's syscall(3) reads
 * its registers and its one stack slot: the last may lie past what the caller pushed,
 * which is why a sanitizer is told not to check this function's reads. */
MRC_EXPORT __attribute__((no_sanitize_address)) long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (!mrc_real_ensure_libc() || !mrc_real.syscall) {
        errno = ENOSYS;
        return -1;
    }
    /* Each watched number is observed as its call is, and then made directly: the next
     * definition of munmap may itself be a wrapper calling syscall(3) (tcmalloc's is),
     * which would come back here. */
    switch (nr) {
    case SYS_munmap:
        mrc_monitor_next((void *)mrc_sys_munmap);
        return mrc_on_munmap((void *)a, (size_t)b);
    case SYS_mmap:
        mrc_monitor_next((void *)mrc_sys_mmap);
        return (long)mrc_on_mmap((void *)a, (size_t)b, (int)c, (int)d, (int)e, (off_t)f);
    case SYS_mremap:
        mrc_monitor_next((void *)mrc_sys_mremap);
        return (long)mrc_on_mremap((void *)a, (size_t)b, (size_t)c, (int)d, (void *)e);
    case SYS_madvise:
        if ((int)c == MADV_COLLAPSE)
            mrc_rt_before_collapse((void *)a, (size_t)b);   /* as the madvise hook does */
        mrc_monitor_next((void *)mrc_sys_madvise);
        return mrc_on_madvise((void *)a, (size_t)b, (int)c);
    case SYS_shmat:
        mrc_monitor_next((void *)mrc_sys_shmat);
        return (long)mrc_on_shmat((int)a, (const void *)b, (int)c);
    case SYS_shmdt:
        mrc_monitor_next((void *)mrc_sys_shmdt);
        return mrc_on_shmdt((const void *)a);
    case SYS_fork:
        mrc_rt_before_fork();
        break;
    case SYS_clone:   /* x86-64's order: flags first */
        if (!(a & CLONE_VM))
            mrc_rt_before_fork();
        break;
    case SYS_clone3:
        if (clone3_copies((const void *)a, (size_t)b))
            mrc_rt_before_fork();
        break;
    default:
        break;
    }
    return mrc_real.syscall(nr, a, b, c, d, e, f);
}

MRC_OWN_ALL(MRC_FNS_SYSCALL)
