/* outpath.h - where per-process output goes: file patterns with %p (pid), %h (host), %r
 * (launcher rank) and %%, created without following a symlink and without clobbering any
 * existing file; plus a small buffered writer for dumps of unbounded length.
 * Invariants: no stdio streams, no malloc; functions return 0, a count or -errno. */
#ifndef MRC_OUTPATH_H
#define MRC_OUTPATH_H

#include <stddef.h>
#include <stdint.h>

/* mrc_outpath_open flags. */
#define MRC_OUTPATH_NEXT_FREE 1u   /* name taken: the first free of name.1, name.2, ... */

#define MRC_OUTPATH_MAX_SUFFIX 999 /* how far NEXT_FREE looks before giving up (-EEXIST) */

/* This process's rank in a parallel job: the first of OMPI_COMM_WORLD_RANK, PMI_RANK,
 * PMIX_RANK, SLURM_PROCID that holds a decimal number, or -1 (not launched as a rank). */
long mrc_outpath_rank(void);

/* Expands pattern into out: %p the pid, %h the host name, %r the rank ("norank" without
 * one), %% a '%'. 0, -EINVAL for another %x or a trailing %, -ENAMETOOLONG. */
int mrc_outpath_expand(const char *pattern, char *out, size_t size);

/* Creates a new file (0644) from pattern with O_EXCL|O_NOFOLLOW: never through a
 * symlink, never over an existing file. With MRC_OUTPATH_NEXT_FREE a taken name (file,
 * directory or symlink alike) moves on to name.1, name.2, ... and says so once on
 * stderr. The name used is copied to used (if not NULL). Returns the fd or -errno. */
int mrc_outpath_open(const char *pattern, unsigned flags, char *used, size_t used_size);

/* Buffered writes to an fd, for dumps longer than one stack buffer. The first error
 * sticks in err and later writes are dropped. */
struct mrc_wbuf {
    int fd;
    int err;            /* 0 or the first -errno */
    size_t n;
    char d[4096];
};

void mrc_wbuf_init(struct mrc_wbuf *w, int fd);
void mrc_wbuf_printf(struct mrc_wbuf *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes s as a JSON string literal: quotes and backslashes escaped, bytes outside
 * printable ASCII as \u00XX (a file name need not be UTF-8; the JSON must be valid). */
void mrc_wbuf_json_str(struct mrc_wbuf *w, const char *s);
/* Writes what is buffered; returns w->err. */
int mrc_wbuf_flush(struct mrc_wbuf *w);

#endif
