/* hooks_file.c - the exported calls that drop pages of mapped files, in every form glibc
 * 2.36 exports (ftruncate, truncate, open/openat/creat with O_TRUNC and their 64-bit and
 * fortified forms, fopen/freopen "w", shm_open O_TRUNC, fallocate), each bracketed with
 * monitor/files.c; one that cannot drop a page goes straight on. Before the real
 * functions are known the kernel is asked directly (a stream: ENOSYS). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/export.h"
#include "monitor/files.h"
#include "util/real.h"

/* The fortified forms, called for an open whose flags the compiler could not see. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

#define READY(fn) (mrc_real_ensure_libc() && mrc_real.fn)

/* open's optional mode, read as glibc reads it. */
#define MODE_ARG(flags, mode)                                  \
    do {                                                       \
        (mode) = 0;                                            \
        if (__OPEN_NEEDS_MODE(flags)) {                        \
            va_list mrc_ap_;                                   \
            va_start(mrc_ap_, flags);                          \
            (mode) = (mode_t)va_arg(mrc_ap_, int);             \
            va_end(mrc_ap_);                                   \
        }                                                      \
    } while (0)

/* Returns call, bracketed when it truncates the file path names (relative to dirfd). */
#define TRUNCATING_OPEN(call, dirfd, path, flags)                                          \
    do {                                                                                  \
        if (!((flags) & O_TRUNC))                                                         \
            return call;                                                                  \
        struct mrc_file_op op_;                                                           \
        mrc_file_begin_path(&op_, dirfd, path, ((flags) & O_NOFOLLOW) != 0, 0);           \
        int fd_ = call;                                                                   \
        mrc_file_done(&op_, fd_);                                                         \
        return fd_;                                                                       \
    } while (0)

MRC_EXPORT int open(const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(open))
        return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
    TRUNCATING_OPEN(mrc_real.open(path, flags, mode), AT_FDCWD, path, flags);
}

MRC_EXPORT int open64(const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(open64))
        return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
    TRUNCATING_OPEN(mrc_real.open64(path, flags, mode), AT_FDCWD, path, flags);
}

MRC_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(openat))
        return (int)syscall(SYS_openat, dirfd, path, flags, mode);
    TRUNCATING_OPEN(mrc_real.openat(dirfd, path, flags, mode), dirfd, path, flags);
}

MRC_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(openat64))
        return (int)syscall(SYS_openat, dirfd, path, flags, mode);
    TRUNCATING_OPEN(mrc_real.openat64(dirfd, path, flags, mode), dirfd, path, flags);
}

MRC_EXPORT int __open_2(const char *path, int flags)
{
    if (!READY(open_2))
        return (int)syscall(SYS_openat, AT_FDCWD, path, flags);
    TRUNCATING_OPEN(mrc_real.open_2(path, flags), AT_FDCWD, path, flags);
}

MRC_EXPORT int __open64_2(const char *path, int flags)
{
    if (!READY(open64_2))
        return (int)syscall(SYS_openat, AT_FDCWD, path, flags);
    TRUNCATING_OPEN(mrc_real.open64_2(path, flags), AT_FDCWD, path, flags);
}

MRC_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
    if (!READY(openat_2))
        return (int)syscall(SYS_openat, dirfd, path, flags);
    TRUNCATING_OPEN(mrc_real.openat_2(dirfd, path, flags), dirfd, path, flags);
}

MRC_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
    if (!READY(openat64_2))
        return (int)syscall(SYS_openat, dirfd, path, flags);
    TRUNCATING_OPEN(mrc_real.openat64_2(dirfd, path, flags), dirfd, path, flags);
}

MRC_EXPORT int creat(const char *path, mode_t mode)
{
    if (!READY(creat))
        return (int)syscall(SYS_openat, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
    TRUNCATING_OPEN(mrc_real.creat(path, mode), AT_FDCWD, path, O_TRUNC);
}

MRC_EXPORT int creat64(const char *path, mode_t mode)
{
    if (!READY(creat64))
        return (int)syscall(SYS_openat, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
    TRUNCATING_OPEN(mrc_real.creat64(path, mode), AT_FDCWD, path, O_TRUNC);
}

MRC_EXPORT int shm_open(const char *name, int flags, mode_t mode)
{
    if (!READY(shm_open)) {
        errno = ENOSYS;
        return -1;
    }
    if (!(flags & O_TRUNC))
        return mrc_real.shm_open(name, flags, mode);
    struct mrc_file_op op;
    mrc_file_begin_shm(&op, name);
    int fd = mrc_real.shm_open(name, flags, mode);
    mrc_file_done(&op, fd);
    return fd;
}

/* Returns call (a stream opened with mode on path, or on fd's file if path is NULL),
 * bracketed when the mode truncates ("w", "w+", "wb", ...). The stream functions are
 * hooked themselves: glibc's fopen opens with its own __open, past the PLT. */
#define TRUNCATING_STREAM(call, path, mode, fd)                                            \
    do {                                                                                  \
        if (!(mode) || (mode)[0] != 'w')                                                  \
            return call;                                                                  \
        struct mrc_file_op op_;                                                           \
        if (path)                                                                         \
            mrc_file_begin_path(&op_, AT_FDCWD, path, 0, 0);                              \
        else                                                                              \
            mrc_file_begin_fd(&op_, fd, 0);                                               \
        FILE *f_ = call;                                                                  \
        mrc_file_done(&op_, f_ ? fileno(f_) : -1);                                        \
        return f_;                                                                        \
    } while (0)

#define STREAM_READY(fn)        \
    do {                        \
        if (!READY(fn)) {       \
            errno = ENOSYS;     \
            return NULL;        \
        }                       \
    } while (0)

MRC_EXPORT FILE *fopen(const char *path, const char *mode)
{
    STREAM_READY(fopen);
    TRUNCATING_STREAM(mrc_real.fopen(path, mode), path, mode, -1);
}

MRC_EXPORT FILE *fopen64(const char *path, const char *mode)
{
    STREAM_READY(fopen64);
    TRUNCATING_STREAM(mrc_real.fopen64(path, mode), path, mode, -1);
}

/* With no path, freopen opens the stream's own file again with the new mode. */
MRC_EXPORT FILE *freopen(const char *path, const char *mode, FILE *stream)
{
    STREAM_READY(freopen);
    TRUNCATING_STREAM(mrc_real.freopen(path, mode, stream), path, mode, stream ? fileno(stream) : -1);
}

MRC_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *stream)
{
    STREAM_READY(freopen64);
    TRUNCATING_STREAM(mrc_real.freopen64(path, mode, stream), path, mode, stream ? fileno(stream) : -1);
}

/* Returns call (a truncation of fd's file, or of path's, to len), bracketed. */
#define TRUNCATION(begin, call, fd)        \
    do {                                   \
        struct mrc_file_op op_;            \
        begin;                             \
        int rc_ = call;                    \
        mrc_file_done(&op_, fd);           \
        return rc_;                        \
    } while (0)

MRC_EXPORT int ftruncate(int fd, off_t len)
{
    if (!READY(ftruncate))
        return (int)syscall(SYS_ftruncate, fd, len);
    TRUNCATION(mrc_file_begin_fd(&op_, fd, (uint64_t)len), mrc_real.ftruncate(fd, len), fd);
}

MRC_EXPORT int ftruncate64(int fd, off64_t len)
{
    if (!READY(ftruncate64))
        return (int)syscall(SYS_ftruncate, fd, len);
    TRUNCATION(mrc_file_begin_fd(&op_, fd, (uint64_t)len), mrc_real.ftruncate64(fd, len), fd);
}

MRC_EXPORT int truncate(const char *path, off_t len)
{
    if (!READY(truncate))
        return (int)syscall(SYS_truncate, path, len);
    TRUNCATION(mrc_file_begin_path(&op_, AT_FDCWD, path, 0, (uint64_t)len), mrc_real.truncate(path, len), -1);
}

MRC_EXPORT int truncate64(const char *path, off64_t len)
{
    if (!READY(truncate64))
        return (int)syscall(SYS_truncate, path, len);
    TRUNCATION(mrc_file_begin_path(&op_, AT_FDCWD, path, 0, (uint64_t)len), mrc_real.truncate64(path, len), -1);
}

MRC_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
    if (!READY(fallocate))
        return (int)syscall(SYS_fallocate, fd, mode, off, len);
    TRUNCATION(mrc_file_begin_fallocate(&op_, fd, mode, (uint64_t)off, (uint64_t)len),
               mrc_real.fallocate(fd, mode, off, len), fd);
}

MRC_EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
    if (!READY(fallocate64))
        return (int)syscall(SYS_fallocate, fd, mode, off, len);
    TRUNCATION(mrc_file_begin_fallocate(&op_, fd, mode, (uint64_t)off, (uint64_t)len),
               mrc_real.fallocate64(fd, mode, off, len), fd);
}
