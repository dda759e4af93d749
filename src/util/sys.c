/* sys.c - the system calls of sys.h, each made inline with libc's errno rule. Invariant:
 * nothing here calls a libc function (on x86-64 not even syscall(3)) or any export of
 * libmrcache, so no hook, ours or another library's, ever sees libmrcache's own calls. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/sys.h"

#if defined(__x86_64__)
static inline long sc6(long n, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}
#else
#include <dlfcn.h>

/* Elsewhere through libc's own syscall(3), looked up past ours (interpose/hooks_syscall.c
 * sends some numbers to our hooks, which call back here); its -1 and errno become the
 * kernel's -errno, so that the rule below is the same everywhere. */
static inline long sc6(long n, long a, long b, long c, long d, long e, long f)
{
    static long (*next)(long, ...);
    if (!next)
        next = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    long r = next(n, a, b, c, d, e, f);
    return r == -1 ? -errno : r;
}
#endif

#define SC(n, a, b, c, d, e, f) sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

/* The kernel's -errno as libc's -1 and errno. */
static long result(long r)
{
    if ((unsigned long)r > -4096ul) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

#define CALL(n, a, b, c, d, e, f) result(SC(n, a, b, c, d, e, f))

/* ---- memory ---- */

void *mrc_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (off & 4095) {           /* glibc's MMAP_OFF_LOW_MASK check */
        errno = EINVAL;
        return MAP_FAILED;
    }
    return (void *)CALL(SYS_mmap, addr, len, prot, flags, fd, off);
}

int mrc_sys_munmap(void *addr, size_t len)
{
    return (int)CALL(SYS_munmap, addr, len, 0, 0, 0, 0);
}

void *mrc_sys_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    return (void *)CALL(SYS_mremap, old, old_size, new_size, flags, new_addr, 0);
}

int mrc_sys_madvise(void *addr, size_t len, int advice)
{
    return (int)CALL(SYS_madvise, addr, len, advice, 0, 0, 0);
}

int mrc_sys_mprotect(void *addr, size_t len, int prot)
{
    return (int)CALL(SYS_mprotect, addr, len, prot, 0, 0, 0);
}

ssize_t mrc_sys_process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags)
{
    return CALL(SYS_process_madvise, pidfd, iov, n, advice, flags, 0);
}

int mrc_sys_remap_file_pages(void *addr, size_t size, int prot, size_t pgoff, int flags)
{
    return (int)CALL(SYS_remap_file_pages, addr, size, prot, pgoff, flags, 0);
}

void *mrc_sys_shmat(int id, const void *addr, int flags)
{
    return (void *)CALL(SYS_shmat, id, addr, flags, 0, 0, 0);
}

int mrc_sys_shmdt(const void *addr)
{
    return (int)CALL(SYS_shmdt, addr, 0, 0, 0, 0, 0);
}

extern void *__curbrk;

int mrc_sys_brk(void *addr)
{
    void *r = (void *)SC(SYS_brk, addr, 0, 0, 0, 0, 0);
    __curbrk = r;
    if ((uintptr_t)r < (uintptr_t)addr) {
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

ssize_t mrc_sys_process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                 const struct iovec *remote, unsigned long nremote, unsigned long flags)
{
    return CALL(SYS_process_vm_readv, pid, local, nlocal, remote, nremote, flags);
}

int mrc_sys_membarrier(int cmd, unsigned flags)
{
    return (int)CALL(SYS_membarrier, cmd, flags, 0, 0, 0, 0);
}

/* ---- files and descriptors ---- */

int mrc_sys_open(const char *path, int flags, mode_t mode)
{
    return mrc_sys_openat(AT_FDCWD, path, flags, mode);
}

int mrc_sys_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    return (int)CALL(SYS_openat, dirfd, path, flags, mode, 0, 0);
}

ssize_t mrc_sys_read(int fd, void *buf, size_t n)
{
    return CALL(SYS_read, fd, buf, n, 0, 0, 0);
}

ssize_t mrc_sys_pread(int fd, void *buf, size_t n, off_t off)
{
    return CALL(SYS_pread64, fd, buf, n, off, 0, 0);
}

ssize_t mrc_sys_write(int fd, const void *buf, size_t n)
{
    return CALL(SYS_write, fd, buf, n, 0, 0, 0);
}

ssize_t mrc_sys_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return CALL(SYS_pwrite64, fd, buf, n, off, 0, 0);
}

int mrc_sys_close(int fd)
{
    return (int)CALL(SYS_close, fd, 0, 0, 0, 0, 0);
}

int mrc_sys_close_range(unsigned lo, unsigned hi, int flags)
{
    return (int)CALL(SYS_close_range, lo, hi, flags, 0, 0, 0);
}

int mrc_sys_dup2(int old, int new_)
{
#ifdef SYS_dup2
    return (int)CALL(SYS_dup2, old, new_, 0, 0, 0, 0);
#else
    if (old == new_)   /* dup3 refuses what dup2 allows: a valid descriptor onto itself */
        return mrc_sys_fcntl(old, F_GETFD, 0) < 0 ? -1 : new_;
    return mrc_sys_dup3(old, new_, 0);
#endif
}

int mrc_sys_dup3(int old, int new_, int flags)
{
    return (int)CALL(SYS_dup3, old, new_, flags, 0, 0, 0);
}

int mrc_sys_fcntl(int fd, int cmd, long arg)
{
    return (int)CALL(SYS_fcntl, fd, cmd, arg, 0, 0, 0);
}

int mrc_sys_ioctl(int fd, unsigned long request, void *arg)
{
    return (int)CALL(SYS_ioctl, fd, request, arg, 0, 0, 0);
}

int mrc_sys_fstat(int fd, struct stat *st)
{
    return mrc_sys_fstatat(fd, "", st, AT_EMPTY_PATH);
}

int mrc_sys_fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
    return (int)CALL(SYS_newfstatat, dirfd, path, st, flags, 0, 0);
}

int mrc_sys_fstatfs(int fd, struct statfs *st)
{
    return (int)CALL(SYS_fstatfs, fd, st, 0, 0, 0, 0);
}

int mrc_sys_fchmod(int fd, mode_t mode)
{
    return (int)CALL(SYS_fchmod, fd, mode, 0, 0, 0, 0);
}

int mrc_sys_unlink(const char *path)
{
    return (int)CALL(SYS_unlinkat, AT_FDCWD, path, 0, 0, 0, 0);
}

int mrc_sys_mkdir(const char *path, mode_t mode)
{
    return (int)CALL(SYS_mkdirat, AT_FDCWD, path, mode, 0, 0, 0);
}

ssize_t mrc_sys_readlink(const char *path, char *buf, size_t n)
{
    return CALL(SYS_readlinkat, AT_FDCWD, path, buf, n, 0, 0);
}

int mrc_sys_ftruncate(int fd, off_t len)
{
    return (int)CALL(SYS_ftruncate, fd, len, 0, 0, 0, 0);
}

int mrc_sys_truncate(const char *path, off_t len)
{
    return (int)CALL(SYS_truncate, path, len, 0, 0, 0, 0);
}

int mrc_sys_fallocate(int fd, int mode, off_t off, off_t len)
{
    return (int)CALL(SYS_fallocate, fd, mode, off, len, 0, 0);
}

ssize_t mrc_sys_getdents64(int fd, void *buf, size_t n)
{
    return CALL(SYS_getdents64, fd, buf, n, 0, 0, 0);
}

int mrc_sys_memfd_create(const char *name, unsigned flags)
{
    return (int)CALL(SYS_memfd_create, name, flags, 0, 0, 0, 0);
}

int mrc_sys_userfaultfd(int flags)
{
    return (int)CALL(SYS_userfaultfd, flags, 0, 0, 0, 0, 0);
}

/* ---- threads ---- */

long mrc_sys_futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return CALL(SYS_futex, word, op, val, ts, 0, 0);
}

pid_t mrc_sys_gettid(void)
{
    return (pid_t)SC(SYS_gettid, 0, 0, 0, 0, 0, 0);
}
