/* outpath.c - per-process output file names (%p %h %r %%) and their safe creation, and a
 * buffered fd writer. Invariants: a regular file is only ever created
 * (O_CREAT|O_EXCL|O_NOFOLLOW), never opened if it exists, so neither a planted symlink
 * nor another process's report can be written through; a destination that is no file
 * (a terminal, /dev/null, a pipe, /dev/stderr, /dev/fd/N) is written to as it is, never
 * replaced by a sibling; missing directories of the path are made (0700, under the
 * umask); nothing here allocates or uses stdio streams. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/outpath.h"
#include "util/sys.h"

/* Most specific first: under mpirun inside a Slurm allocation SLURM_PROCID numbers the
 * launcher's daemons, not the ranks, so it is only a last resort. */
static const char *const rank_vars[] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID" };

long mrc_outpath_rank(void)
{
    for (size_t i = 0; i < sizeof(rank_vars) / sizeof(rank_vars[0]); i++) {
        const char *s = getenv(rank_vars[i]);
        if (!s || !*s)
            continue;
        long v = 0;
        const char *p = s;
        for (; *p >= '0' && *p <= '9' && p - s < 9; p++)
            v = v * 10 + (*p - '0');
        if (!*p)
            return v;   /* else malformed: try the next variable */
    }
    return -1;
}

int mrc_outpath_expand(const char *pattern, char *out, size_t size)
{
    size_t n = 0;
    char tmp[72];
    for (const char *p = pattern; *p; p++) {
        const char *piece = tmp;
        if (*p != '%') {
            tmp[0] = *p;
            tmp[1] = 0;
        } else {
            p++;
            if (*p == 'p') {
                snprintf(tmp, sizeof(tmp), "%d", (int)getpid());
            } else if (*p == 'h') {
                tmp[0] = 0;
                gethostname(tmp, 64);
                tmp[64] = 0;
            } else if (*p == 'r') {
                long r = mrc_outpath_rank();
                if (r >= 0)
                    snprintf(tmp, sizeof(tmp), "%ld", r);
                else
                    piece = "norank";
            } else if (*p == '%') {
                piece = "%";
            } else {
                return -EINVAL;   /* includes a trailing '%' (*p == 0) */
            }
        }
        size_t m = strlen(piece);
        if (n + m >= size)
            return -ENAMETOOLONG;
        memcpy(out + n, piece, m);
        n += m;
    }
    if (n >= size)
        return -ENAMETOOLONG;
    out[n] = 0;
    return 0;
}

/* A name of one of the process's descriptors (its target may be a regular file, the
 * stream redirected there). */
static int descriptor_path(const char *path)
{
    static const char *const prefixes[] = { "/dev/fd/", "/proc/self/fd/", "/dev/stdout", "/dev/stderr" };
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (!strncmp(path, prefixes[i], strlen(prefixes[i])))
            return 1;
    return 0;
}

/* Makes each missing directory of path's (not its last component), as mkdir -p does:
 * 0 if they exist now. */
static int make_parents(const char *path)
{
    char dir[512];
    size_t n = strlen(path);
    if (n >= sizeof(dir))
        return -ENAMETOOLONG;
    memcpy(dir, path, n + 1);
    char *last = strrchr(dir, '/');
    if (!last || last == dir)
        return -ENOENT;
    *last = 0;
    for (char *p = dir + 1; ; p++) {
        if (*p != '/' && *p)
            continue;
        char c = *p;
        *p = 0;
        if (mrc_sys_mkdir(dir, 0700) != 0 && errno != EEXIST)
            return -errno;
        *p = c;
        if (!c)
            return 0;
    }
}

static int create_excl(const char *path)
{
    int fd = mrc_sys_open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    return fd >= 0 ? fd : -errno;
}

int mrc_outpath_open(const char *pattern, unsigned flags, char *used, size_t used_size)
{
    char path[512], alt[540];
    int rc = mrc_outpath_expand(pattern, path, sizeof(path));
    if (rc) {
        MRC_WARN("cannot create stats file from pattern \"%s\": %s", pattern,
                 rc == -EINVAL ? "unknown %-sequence (use %p, %h, %r or %%)" : strerror(-rc));
        return rc;
    }
    const char *name = path;
    struct stat st;
    int fd;
    if (mrc_sys_fstatat(AT_FDCWD, path, &st, 0) == 0 && (!S_ISREG(st.st_mode) || descriptor_path(path))) {
        if (S_ISDIR(st.st_mode)) {
            MRC_WARN("cannot write stats to %s: it is a directory (name a file in it, such as %s/mrcache.%%p.txt)",
                     path, path);
            return -EISDIR;
        }
        fd = mrc_sys_open(path, O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC, 0);
        if (fd < 0) {
            MRC_WARN("cannot write stats to %s: %s", path, strerror(errno));
            return -errno;
        }
        goto opened;
    }
    fd = create_excl(path);
    if (fd == -ENOENT && make_parents(path) == 0)
        fd = create_excl(path);
    if (fd == -EEXIST && (flags & MRC_OUTPATH_NEXT_FREE)) {
        /* Another process (same pattern without %p/%r), an earlier run or a planted
         * link has the name: a report is worth more than its exact name. O_EXCL makes
         * each try atomic, so concurrent processes never share a suffix. */
        for (unsigned i = 1; i <= MRC_OUTPATH_MAX_SUFFIX && fd == -EEXIST; i++) {
            snprintf(alt, sizeof(alt), "%s.%u", path, i);
            fd = create_excl(alt);
        }
        if (fd >= 0) {
            MRC_WARN("cannot create stats file %s: %s; writing %s instead", path, strerror(EEXIST), alt);
            name = alt;
        }
    }
    if (fd < 0) {
        MRC_WARN("cannot create stats file %s: %s", path, strerror(-fd));
        return fd;
    }
opened:
    if (used && used_size) {
        size_t m = strlen(name);
        if (m >= used_size)
            m = used_size - 1;
        memcpy(used, name, m);
        used[m] = 0;
    }
    return fd;
}

void mrc_wbuf_init(struct mrc_wbuf *w, int fd)
{
    w->fd = fd;
    w->err = 0;
    w->n = 0;
}

int mrc_wbuf_flush(struct mrc_wbuf *w)
{
    if (w->n && !w->err)
        w->err = mrc_write_all(w->fd, w->d, w->n);
    w->n = 0;
    return w->err;
}

void mrc_wbuf_printf(struct mrc_wbuf *w, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        size_t room = sizeof(w->d) - w->n;
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(w->d + w->n, room, fmt, ap);
        va_end(ap);
        if (m < 0)
            return;
        if ((size_t)m < room) {
            w->n += (size_t)m;
            return;
        }
        if (attempt == 0 && w->n) {
            mrc_wbuf_flush(w);   /* retry into an empty buffer */
            continue;
        }
        w->n = sizeof(w->d) - 1;   /* longer than the whole buffer: truncated */
        return;
    }
}

static void put_c(struct mrc_wbuf *w, char c)
{
    if (w->n == sizeof(w->d))
        mrc_wbuf_flush(w);
    w->d[w->n++] = c;
}

void mrc_wbuf_json_str(struct mrc_wbuf *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put_c(w, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            put_c(w, '\\');
            put_c(w, (char)*p);
        } else if (*p < 0x20 || *p >= 0x7f) {
            /* Bytes past ASCII too: a path need not be UTF-8, the JSON must be. */
            put_c(w, '\\');
            put_c(w, 'u');
            put_c(w, '0');
            put_c(w, '0');
            put_c(w, hex[*p >> 4]);
            put_c(w, hex[*p & 15]);
        } else {
            put_c(w, (char)*p);
        }
    }
    put_c(w, '"');
}
