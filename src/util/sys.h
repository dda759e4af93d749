/* sys.h - how libmrcache reaches the kernel for itself. Every system call it makes on its
 * own behalf is one of these: the memory it maps, advises, protects or unmaps, the files
 * and descriptors it opens, reads, writes, controls or closes, its futexes. Each is made
 * inline, never through libc's wrapper (another library, or our own patch source, may
 * have rewritten it) and never through libmrcache's own exports (a call of open, close,
 * ioctl or mmap from inside the library would bind to our own hook through the PLT and
 * run it on our own call). Each keeps libc's contract: -1 (MAP_FAILED, (void *)-1) with
 * errno set on failure, so it also stands in for libc's wrapper where a patched entry
 * point's mrc_real pointer must reach the kernel directly (monitor/patch.c).
 * The one deliberate exception is free: what libmrcache had from the allocator goes back
 * through the PLT to the exported free, so that a free of ours that trims the heap (or
 * gives back an mmapped chunk) passes the allocator hooks like the program's own. The
 * table of interposed functions (interposed.h) marks it so, and `make layers` refuses a
 * PLT call of any other interposed function (scripts/check-layers.sh). */
#ifndef MRC_SYS_H
#define MRC_SYS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

struct stat;
struct statfs;
struct iovec;
struct timespec;

/* ---- memory ---- */
void *mrc_sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int mrc_sys_munmap(void *addr, size_t len);
void *mrc_sys_mremap(void *old, size_t old_size, size_t new_size, int flags, ...);

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4   /* Linux 5.7; older headers lack it */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25     /* Linux 6.1 */
#endif
/* Sets out to mremap's optional fifth argument (the new address), read as glibc reads it:
 * for both flags that take one. A macro because va_start must be in the variadic
 * function itself. */
#define MRC_MREMAP_NEW_ADDR(flags, out)                       \
    do {                                                      \
        (out) = NULL;                                         \
        if ((flags) & (MREMAP_FIXED | MREMAP_DONTUNMAP)) {    \
            va_list mrc_ap_;                                  \
            va_start(mrc_ap_, flags);                         \
            (out) = va_arg(mrc_ap_, void *);                  \
            va_end(mrc_ap_);                                  \
        }                                                     \
    } while (0)

int mrc_sys_madvise(void *addr, size_t len, int advice);
int mrc_sys_mprotect(void *addr, size_t len, int prot);
ssize_t mrc_sys_process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags);
int mrc_sys_remap_file_pages(void *addr, size_t size, int prot, size_t pgoff, int flags);
void *mrc_sys_shmat(int id, const void *addr, int flags);
int mrc_sys_shmdt(const void *addr);
/* Also records the new break in __curbrk, which glibc's sbrk and malloc read. */
int mrc_sys_brk(void *addr);
void *mrc_sys_sbrk(intptr_t incr);
ssize_t mrc_sys_process_vm_readv(pid_t pid, const struct iovec *local, unsigned long nlocal,
                                 const struct iovec *remote, unsigned long nremote, unsigned long flags);
int mrc_sys_membarrier(int cmd, unsigned flags);

/* libmrcache's own memory (pool arenas, statistics blocks, tables): len bytes of zeroed,
 * private, anonymous read-write memory (flags: extra MAP_* bits), or NULL with errno set.
 * Made with the system call itself, so that no unmap monitor, ours or another library's
 * patch, ever sees it: our bookkeeping never reaches the cache's invalidation path. */
static inline void *mrc_raw_map(size_t len, int flags)
{
    void *p = mrc_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static inline void mrc_raw_unmap(void *p, size_t len)
{
    mrc_sys_munmap(p, len);
}

/* ---- files and descriptors ---- */
/* open(2) is openat(AT_FDCWD, ...); mode matters with O_CREAT or O_TMPFILE only. */
int mrc_sys_open(const char *path, int flags, mode_t mode);
int mrc_sys_openat(int dirfd, const char *path, int flags, mode_t mode);
ssize_t mrc_sys_read(int fd, void *buf, size_t n);
ssize_t mrc_sys_pread(int fd, void *buf, size_t n, off_t off);
ssize_t mrc_sys_write(int fd, const void *buf, size_t n);
ssize_t mrc_sys_pwrite(int fd, const void *buf, size_t n, off_t off);
int mrc_sys_close(int fd);
int mrc_sys_close_range(unsigned lo, unsigned hi, int flags);
int mrc_sys_dup2(int old, int new_);
int mrc_sys_dup3(int old, int new_, int flags);
int mrc_sys_fcntl(int fd, int cmd, long arg);
int mrc_sys_ioctl(int fd, unsigned long request, void *arg);
int mrc_sys_fstat(int fd, struct stat *st);
/* stat (flags 0) and lstat (AT_SYMLINK_NOFOLLOW) of a path relative to dirfd. */
int mrc_sys_fstatat(int dirfd, const char *path, struct stat *st, int flags);
int mrc_sys_fstatfs(int fd, struct statfs *st);
int mrc_sys_fchmod(int fd, mode_t mode);
int mrc_sys_unlink(const char *path);
int mrc_sys_mkdir(const char *path, mode_t mode);
ssize_t mrc_sys_readlink(const char *path, char *buf, size_t n);
int mrc_sys_ftruncate(int fd, off_t len);
int mrc_sys_truncate(const char *path, off_t len);
int mrc_sys_fallocate(int fd, int mode, off_t off, off_t len);
/* Directory entries (struct linux_dirent64) of fd into buf: bytes read, 0 at the end. */
ssize_t mrc_sys_getdents64(int fd, void *buf, size_t n);
int mrc_sys_memfd_create(const char *name, unsigned flags);
int mrc_sys_userfaultfd(int flags);

/* ---- threads ---- */
/* futex(2) on word with op and val; ts is the wait's timeout (NULL: none). */
long mrc_sys_futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts);
pid_t mrc_sys_gettid(void);

#endif
