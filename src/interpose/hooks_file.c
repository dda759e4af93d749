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
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "monitor/files.h"
#include "util/real.h"
#include "util/sys.h"

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

/* The real open of each exported form. */
enum opener { OPEN, OPEN64, OPENAT, OPENAT64, OPEN_2, OPEN64_2, OPENAT_2, OPENAT64_2, CREAT, CREAT64 };

static int real_open(enum opener how, int dirfd, const char *path, int flags, mode_t mode)
{
    switch (how) {
    case OPEN: return mrc_real.open(path, flags, mode);
    case OPEN64: return mrc_real.open64(path, flags, mode);
    case OPENAT: return mrc_real.openat(dirfd, path, flags, mode);
    case OPENAT64: return mrc_real.openat64(dirfd, path, flags, mode);
    case OPEN_2: return mrc_real.open_2(path, flags);
    case OPEN64_2: return mrc_real.open64_2(path, flags);
    case OPENAT_2: return mrc_real.openat_2(dirfd, path, flags);
    case OPENAT64_2: return mrc_real.openat64_2(dirfd, path, flags);
    case CREAT: return mrc_real.creat(path, mode);
    case CREAT64: return mrc_real.creat64(path, mode);
    }
    errno = ENOSYS;
    return -1;
}

/* An open that truncates the file path names (relative to dirfd), bracketed. Apart from
 * the exports (and its op off their stack), so that an open without O_TRUNC is a test
 * and a tail call. */
__attribute__((noinline)) static int open_truncating(enum opener how, int dirfd, const char *path, int flags,
                                                     mode_t mode)
{
    struct mrc_file_op op;
    mrc_file_begin_path(&op, dirfd, path, (flags & O_NOFOLLOW) != 0, 0);
    int fd = real_open(how, dirfd, path, flags, mode);
    mrc_file_done(&op, fd);
    return fd;
}

/* Returns call, or the same bracketed when it truncates. */
#define OPEN_CALL(how, call, dirfd, path, flags, mode)              \
    do {                                                            \
        if (__builtin_expect(!((flags) & O_TRUNC), 1))              \
            return call;                                            \
        return open_truncating(how, dirfd, path, flags, mode);      \
    } while (0)

MRC_EXPORT int open(const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(open))
        return mrc_sys_open(path, flags, mode);
    OPEN_CALL(OPEN, mrc_real.open(path, flags, mode), AT_FDCWD, path, flags, mode);
}

MRC_EXPORT int open64(const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(open64))
        return mrc_sys_open(path, flags, mode);
    OPEN_CALL(OPEN64, mrc_real.open64(path, flags, mode), AT_FDCWD, path, flags, mode);
}

MRC_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(openat))
        return mrc_sys_openat(dirfd, path, flags, mode);
    OPEN_CALL(OPENAT, mrc_real.openat(dirfd, path, flags, mode), dirfd, path, flags, mode);
}

MRC_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    mode_t mode;
    MODE_ARG(flags, mode);
    if (!READY(openat64))
        return mrc_sys_openat(dirfd, path, flags, mode);
    OPEN_CALL(OPENAT64, mrc_real.openat64(dirfd, path, flags, mode), dirfd, path, flags, mode);
}

MRC_EXPORT int __open_2(const char *path, int flags)
{
    if (!READY(open_2))
        return mrc_sys_open(path, flags, 0);
    OPEN_CALL(OPEN_2, mrc_real.open_2(path, flags), AT_FDCWD, path, flags, 0);
}

MRC_EXPORT int __open64_2(const char *path, int flags)
{
    if (!READY(open64_2))
        return mrc_sys_open(path, flags, 0);
    OPEN_CALL(OPEN64_2, mrc_real.open64_2(path, flags), AT_FDCWD, path, flags, 0);
}

MRC_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
    if (!READY(openat_2))
        return mrc_sys_openat(dirfd, path, flags, 0);
    OPEN_CALL(OPENAT_2, mrc_real.openat_2(dirfd, path, flags), dirfd, path, flags, 0);
}

MRC_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
    if (!READY(openat64_2))
        return mrc_sys_openat(dirfd, path, flags, 0);
    OPEN_CALL(OPENAT64_2, mrc_real.openat64_2(dirfd, path, flags), dirfd, path, flags, 0);
}

/* creat always truncates. */
MRC_EXPORT int creat(const char *path, mode_t mode)
{
    if (!READY(creat))
        return mrc_sys_open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
    return open_truncating(CREAT, AT_FDCWD, path, 0, mode);
}

MRC_EXPORT int creat64(const char *path, mode_t mode)
{
    if (!READY(creat64))
        return mrc_sys_open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
    return open_truncating(CREAT64, AT_FDCWD, path, 0, mode);
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

/* A stream opened with a mode that truncates ("w", "w+", "wb", ...) on path, or on
 * stream's own file if path is NULL (freopen), bracketed; apart, as open_truncating. The
 * stream functions are hooked themselves: glibc's fopen opens with its own __open, past
 * the PLT. */
enum streamer { FOPEN, FOPEN64, FREOPEN, FREOPEN64 };

__attribute__((noinline)) static FILE *stream_truncating(enum streamer how, const char *path, const char *mode,
                                                         FILE *stream)
{
    struct mrc_file_op op;
    if (path)
        mrc_file_begin_path(&op, AT_FDCWD, path, 0, 0);
    else
        mrc_file_begin_fd(&op, stream ? fileno(stream) : -1, 0);
    FILE *f = how == FOPEN     ? mrc_real.fopen(path, mode)
              : how == FOPEN64 ? mrc_real.fopen64(path, mode)
              : how == FREOPEN ? mrc_real.freopen(path, mode, stream)
                               : mrc_real.freopen64(path, mode, stream);
    mrc_file_done(&op, f ? fileno(f) : -1);
    return f;
}

#define STREAM_READY(fn)        \
    do {                        \
        if (!READY(fn)) {       \
            errno = ENOSYS;     \
            return NULL;        \
        }                       \
    } while (0)

#define TRUNCATES(mode) ((mode) && (mode)[0] == 'w')

MRC_EXPORT FILE *fopen(const char *path, const char *mode)
{
    STREAM_READY(fopen);
    return __builtin_expect(!TRUNCATES(mode), 1) ? mrc_real.fopen(path, mode)
                                                 : stream_truncating(FOPEN, path, mode, NULL);
}

MRC_EXPORT FILE *fopen64(const char *path, const char *mode)
{
    STREAM_READY(fopen64);
    return __builtin_expect(!TRUNCATES(mode), 1) ? mrc_real.fopen64(path, mode)
                                                 : stream_truncating(FOPEN64, path, mode, NULL);
}

MRC_EXPORT FILE *freopen(const char *path, const char *mode, FILE *stream)
{
    STREAM_READY(freopen);
    return __builtin_expect(!TRUNCATES(mode), 1) ? mrc_real.freopen(path, mode, stream)
                                                 : stream_truncating(FREOPEN, path, mode, stream);
}

MRC_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *stream)
{
    STREAM_READY(freopen64);
    return __builtin_expect(!TRUNCATES(mode), 1) ? mrc_real.freopen64(path, mode, stream)
                                                 : stream_truncating(FREOPEN64, path, mode, stream);
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
        return mrc_sys_ftruncate(fd, len);
    TRUNCATION(mrc_file_begin_fd(&op_, fd, (uint64_t)len), mrc_real.ftruncate(fd, len), fd);
}

MRC_EXPORT int ftruncate64(int fd, off64_t len)
{
    if (!READY(ftruncate64))
        return mrc_sys_ftruncate(fd, len);
    TRUNCATION(mrc_file_begin_fd(&op_, fd, (uint64_t)len), mrc_real.ftruncate64(fd, len), fd);
}

MRC_EXPORT int truncate(const char *path, off_t len)
{
    if (!READY(truncate))
        return mrc_sys_truncate(path, len);
    TRUNCATION(mrc_file_begin_path(&op_, AT_FDCWD, path, 0, (uint64_t)len), mrc_real.truncate(path, len), -1);
}

MRC_EXPORT int truncate64(const char *path, off64_t len)
{
    if (!READY(truncate64))
        return mrc_sys_truncate(path, len);
    TRUNCATION(mrc_file_begin_path(&op_, AT_FDCWD, path, 0, (uint64_t)len), mrc_real.truncate64(path, len), -1);
}

MRC_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
    if (!READY(fallocate))
        return mrc_sys_fallocate(fd, mode, off, len);
    TRUNCATION(mrc_file_begin_fallocate(&op_, fd, mode, (uint64_t)off, (uint64_t)len),
               mrc_real.fallocate(fd, mode, off, len), fd);
}

MRC_EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
    if (!READY(fallocate64))
        return mrc_sys_fallocate(fd, mode, off, len);
    TRUNCATION(mrc_file_begin_fallocate(&op_, fd, mode, (uint64_t)off, (uint64_t)len),
               mrc_real.fallocate64(fd, mode, off, len), fd);
}

MRC_OWN_ALL(MRC_FNS_FILE)
