/* hooks_fd.c - the exported descriptor calls the userfaultfd source must see before the
 * program makes them: close, close_range, closefrom, dup2 and dup3 naming the source's
 * descriptor (it moves out of the way first), and ioctl(UFFDIO_REGISTER) (the source
 * steps aside from the range first); the logic is in monitor/uffd.c. Invariants: the
 * fast path is one compare and the real call, with its result and errno; before the
 * real functions are known the kernel is asked directly. */
#include <linux/userfaultfd.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "monitor/uffd.h"
#include "util/real.h"
#include "util/sys.h"

/* Ours, or -1. With none, the compares below still send close(-1), dup2 or dup3 onto
 * -1 and closefrom of a negative number to the slow path, which then makes the same
 * call: all rare. */
static inline int our_fd(void)
{
    return __atomic_load_n(&mrc_uffd_fd, __ATOMIC_RELAXED);
}

MRC_EXPORT int close(int fd)
{
    int (*real)(int) = mrc_real.close;
    if (__builtin_expect(fd == our_fd(), 0) || !real)
        return mrc_uffd_close(fd);
    return real(fd);
}

MRC_EXPORT int close_range(unsigned int lo, unsigned int hi, int flags)
{
    int (*real)(unsigned int, unsigned int, int) = mrc_real.close_range;
    int f = our_fd();
    /* f in [lo, hi] in one unsigned compare; -1 would be taken for ~0U, which the usual
     * close_range(n, ~0U) covers. */
    if (__builtin_expect(f >= 0 && (unsigned)f - lo <= hi - lo, 0) || !real)
        return mrc_uffd_close_range(lo, hi, flags);
    return real(lo, hi, flags);
}

MRC_EXPORT void closefrom(int lo)
{
    void (*real)(int) = mrc_real.closefrom;
    if (__builtin_expect(our_fd() >= lo, 0) || !real)
        mrc_uffd_closefrom(lo);
    else
        real(lo);
}

MRC_EXPORT int dup2(int old, int new_)
{
    int (*real)(int, int) = mrc_real.dup2;
    if (__builtin_expect(new_ == our_fd(), 0) || !real)
        return mrc_uffd_dup2(old, new_);
    return real(old, new_);
}

MRC_EXPORT int dup3(int old, int new_, int flags)
{
    int (*real)(int, int, int) = mrc_real.dup3;
    if (__builtin_expect(new_ == our_fd(), 0) || !real)
        return mrc_uffd_dup3(old, new_, flags);
    return real(old, new_, flags);
}

MRC_EXPORT int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int (*real)(int, unsigned long, ...) = mrc_real.ioctl;
    if (__builtin_expect(request == UFFDIO_REGISTER, 0))
        return mrc_uffd_register_ioctl(fd, arg);
    return real ? real(fd, request, arg) : mrc_sys_ioctl(fd, request, arg);
}

MRC_OWN_ALL(MRC_FNS_FD)
