/* files.h - the calls that drop pages of a mapped file with no unmap (truncation, open
 * with O_TRUNC, fallocate's punching and moving): the mappings of the bytes that go, found
 * in the registry by the file's identity, published before the call and after it.
 * Invariants: until a registration is cached over a file's mapping a call costs a load
 * before it and one after; nothing allocates; errno is the real call's. */
#ifndef MRC_FILES_H
#define MRC_FILES_H

#include <stdint.h>
#include <sys/types.h>

#include "monitor/maps.h"

/* One call in progress, on the caller's stack. */
struct mrc_file_op {
    int state;                    /* see files.c */
    int dirfd, nofollow;          /* the path the call names, if any */
    const char *path;
    int fd;                       /* the descriptor the call names, if any (-1) */
    uint64_t dev, ino, lo, hi;    /* the file (ino 0: none known) and its bytes that go */
    unsigned n;                   /* ranges announced */
    uint64_t start[MRC_FILE_RANGES], len[MRC_FILE_RANGES], ticket[MRC_FILE_RANGES];
};

/* Whether a truncation must look at all: a registration may lie over a file's mapping. */
static inline int mrc_files_watching(void)
{
    return __atomic_load_n(&mrc_maps.files_cached, __ATOMIC_SEQ_CST) != 0;
}

/* Before a call that truncates the file at path (relative to dirfd; the last link not
 * followed if nofollow) to len bytes, or (fd >= 0) the file open as fd. */
void mrc_file_begin_path(struct mrc_file_op *op, int dirfd, const char *path, int nofollow, uint64_t len);
void mrc_file_begin_fd(struct mrc_file_op *op, int fd, uint64_t len);
/* Before fallocate(fd, mode, off, len): the bytes the mode drops (none for a plain
 * allocation; an unknown mode drops everything from off). */
void mrc_file_begin_fallocate(struct mrc_file_op *op, int fd, int mode, uint64_t off, uint64_t len);
/* Before shm_open(name, O_TRUNC): the object's file under /dev/shm. */
void mrc_file_begin_shm(struct mrc_file_op *op, const char *name);

/* After the call: fd is the descriptor it used or returned (-1: none), which tells the
 * file it changed if the name now reaches another. */
void mrc_file_done(struct mrc_file_op *op, int fd);

#endif
