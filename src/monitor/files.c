/* files.c - truncation and fallocate as memory events (files.h): identity (fstat/stat),
 * the bytes dropped, their mappings announced before the call and after it, and all of
 * them after it if files_cached was set meanwhile (that registration then pinned the new
 * pages or sees the announcement in its race check). Invariant: only regular files'
 * mappings hold pages a registration pins. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include <sys/stat.h>

#include "monitor/files.h"
#include "monitor/unmap.h"
#include "util/range.h"
#include "util/sys.h"

enum {
    IDLE,      /* nothing was marked at the start: the end looks again */
    BEGUN,     /* the ranges in op were announced */
    NOTHING,   /* the call drops no page (it grows the file, or only allocates) */
};

/* The files hooks are preload hooks: watched with the preload source. */
static int watching(void)
{
    return mrc_files_watching() && mrc_monitor.preload;
}

/* The regular file fd (if >= 0) or path names: 1 and *st, or 0. */
static int identity(int dirfd, const char *path, int nofollow, int fd, struct stat *st)
{
    int rc = fd >= 0  ? mrc_sys_fstat(fd, st)
             : path ? mrc_sys_fstatat(dirfd, path, st, nofollow ? AT_SYMLINK_NOFOLLOW : 0)
                    : -1;
    return rc == 0 && S_ISREG(st->st_mode);
}

static void begin(struct mrc_file_op *op, int dirfd, const char *path, int nofollow, int fd, uint64_t lo,
                  uint64_t hi, int truncating)
{
    /* Field by field: the usual call (nothing marked) should not clear the whole op. */
    op->state = IDLE;
    op->dirfd = dirfd;
    op->nofollow = nofollow;
    op->path = path;
    op->fd = fd;
    op->lo = lo;
    op->hi = hi;
    op->dev = op->ino = 0;
    op->n = 0;
    if (!watching())
        return;
    int saved = errno;
    struct stat st;
    op->state = BEGUN;
    if (identity(dirfd, path, nofollow, fd, &st)) {
        if (truncating && lo >= (uint64_t)st.st_size) {
            op->state = NOTHING;
        } else {
            op->dev = st.st_dev;
            op->ino = st.st_ino;
            op->n = mrc_maps_file_ranges(op->dev, op->ino, lo, hi, op->start, op->len, MRC_FILE_RANGES);
            for (unsigned i = 0; i < op->n; i++)
                op->ticket[i] = mrc_sink_begin(&mrc_monitor.sink, op->start[i], op->len[i], MRC_INVAL_FILE);
        }
    }
    errno = saved;
}

void mrc_file_begin_path(struct mrc_file_op *op, int dirfd, const char *path, int nofollow, uint64_t len)
{
    begin(op, dirfd, path, nofollow, -1, len, UINT64_MAX, 1);
}

void mrc_file_begin_fd(struct mrc_file_op *op, int fd, uint64_t len)
{
    begin(op, AT_FDCWD, NULL, 0, fd, len, UINT64_MAX, 1);
}

void mrc_file_begin_fallocate(struct mrc_file_op *op, int fd, int mode, uint64_t off, uint64_t len)
{
    int m = mode & ~FALLOC_FL_KEEP_SIZE;
    uint64_t end = mrc_range_end(off, len);
    if (m == 0) {
        op->state = NOTHING;   /* allocation: no page goes */
        return;
    }
    /* Punching, zeroing and unsharing replace the range's pages; collapsing and
     * inserting move every byte after off; a mode this does not know, the same. */
    int in_place = m == FALLOC_FL_PUNCH_HOLE || m == FALLOC_FL_ZERO_RANGE || m == FALLOC_FL_UNSHARE_RANGE;
    begin(op, AT_FDCWD, NULL, 0, fd, off, in_place ? end : UINT64_MAX, 0);
}

void mrc_file_begin_shm(struct mrc_file_op *op, const char *name)
{
    /* glibc's shm_open opens /dev/shm/NAME (without the leading slash). */
    static const char dir[] = "/dev/shm/";
    char path[sizeof(dir) + 256];
    while (name && *name == '/')
        name++;
    size_t n = name ? strlen(name) : 0;
    if (!name || n > 255) {
        begin(op, AT_FDCWD, NULL, 0, -1, 0, UINT64_MAX, 1);
        return;
    }
    memcpy(path, dir, sizeof(dir) - 1);
    memcpy(path + sizeof(dir) - 1, name, n + 1);
    begin(op, AT_FDCWD, path, 1, -1, 0, UINT64_MAX, 1);
    op->path = NULL;   /* the buffer goes with this frame: done asks the new descriptor */
}

void mrc_file_done(struct mrc_file_op *op, int fd)
{
    if (op->state == NOTHING || (op->state == IDLE && !watching()))
        return;
    int saved = errno;
    for (unsigned i = 0; i < op->n; i++)
        mrc_sink_done(&mrc_monitor.sink, op->ticket[i], op->start[i], op->len[i], MRC_INVAL_FILE);
    /* The file the call changed (the name may reach another file by now; a descriptor
     * the call named cannot), and its mappings marked while the call ran. */
    struct stat st;
    uint64_t dev = op->dev, ino = op->ino;
    if (!(ino && op->fd >= 0 && fd == op->fd) && identity(op->dirfd, op->path, op->nofollow, fd, &st)) {
        dev = st.st_dev;
        ino = st.st_ino;
    }
    if (ino && watching()) {
        uint64_t s[MRC_FILE_RANGES], l[MRC_FILE_RANGES];
        unsigned k = mrc_maps_file_ranges(dev, ino, op->lo, op->hi, s, l, MRC_FILE_RANGES);
        for (unsigned j = 0; j < k; j++) {
            int seen = 0;
            for (unsigned i = 0; i < op->n && !seen; i++)
                seen = dev == op->dev && ino == op->ino && s[j] == op->start[i] && l[j] == op->len[i];
            if (!seen)
                mrc_sink_changed(&mrc_monitor.sink, s[j], l[j], MRC_INVAL_FILE);
        }
    }
    errno = saved;
}
