/* hooks_process.c - every exported call that makes a child with a copy of the memory:
 * fork, _Fork and clone without CLONE_VM (syscall(3)'s fork, clone and clone3 come
 * through hooks_syscall.c to the same rule). Each deregisters idle cached MRs first, as
 * MRCACHE_FORK says or rdma-core's fork-safe mode needs (see mrc_rt_before_fork), then
 * makes the child: in fork-safe mode the pages of a released registration are otherwise
 * absent in any child, whichever call made it. Children that share the memory (CLONE_VM:
 * threads, vfork, posix_spawn, system) need nothing: they see the parent's pages. */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "runtime/runtime.h"
#include "util/real.h"

MRC_EXPORT pid_t fork(void)
{
    if (!mrc_real_ensure_libc() || !mrc_real.fork) {
        errno = ENOSYS;
        return -1;
    }
    mrc_rt_before_fork();
    return mrc_real.fork();
}

MRC_EXPORT pid_t _Fork(void)
{
    if (!mrc_real_ensure_libc() || !mrc_real.fork_bare) {
        errno = ENOSYS;
        return -1;
    }
    mrc_rt_before_fork();
    return mrc_real.fork_bare();
}

/* The optional arguments passed in registers are read whether or not flags asks for
 * them, as glibc's clone reads them (it uses each only where flags says so); the last,
 * on the caller's stack, only where flags says the caller passed it. */
MRC_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    pid_t *parent_tid = va_arg(ap, pid_t *);
    void *tls = va_arg(ap, void *);
    pid_t *child_tid = flags & (CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID) ? va_arg(ap, pid_t *) : NULL;
    va_end(ap);
    if (!mrc_real_ensure_libc() || !mrc_real.clone) {
        errno = ENOSYS;
        return -1;
    }
    if (!(flags & CLONE_VM))
        mrc_rt_before_fork();
    return mrc_real.clone(fn, stack, flags, arg, parent_tid, tls, child_tid);
}

MRC_OWN_ALL(MRC_FNS_PROCESS)
