/* real.h - the functions libmrcache interposes, as typed pointers to the next
 * definition (mrc_real.munmap, ...), all resolved in real.c.
 * Invariants: libc's are resolved in the constructor, before any hook needs them (a hook
 * entered earlier resolves them itself, once); libibverbs' lazily on first use, because
 * the library may arrive later inside a plugin opened with RTLD_LOCAL. */
#ifndef MRC_REAL_H
#define MRC_REAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct iovec;
struct ibv_pd;
struct ibv_mr;
struct ibv_context;

struct mrc_real_fns {
    /* libc: memory */
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    int (*munmap)(void *, size_t);
    void *(*mremap)(void *, size_t, size_t, int, ...);
    int (*madvise)(void *, size_t, int);
    void *(*shmat)(int, const void *, int);
    int (*shmdt)(const void *);
    int (*brk)(void *);
    void *(*sbrk)(intptr_t);
    int (*mprotect)(void *, size_t, int);
    ssize_t (*process_madvise)(int, const struct iovec *, size_t, int, unsigned);
    int (*remap_file_pages)(void *, size_t, int, size_t, int);
    /* libc: what drops pages of a file (each as the program names it) */
    int (*ftruncate)(int, off_t);
    int (*ftruncate64)(int, off64_t);
    int (*truncate)(const char *, off_t);
    int (*truncate64)(const char *, off64_t);
    int (*fallocate)(int, int, off_t, off_t);
    int (*fallocate64)(int, int, off64_t, off64_t);
    int (*open)(const char *, int, ...);
    int (*open64)(const char *, int, ...);
    int (*openat)(int, const char *, int, ...);
    int (*openat64)(int, const char *, int, ...);
    int (*open_2)(const char *, int);           /* __open_2: fortified open without a mode */
    int (*open64_2)(const char *, int);
    int (*openat_2)(int, const char *, int);
    int (*openat64_2)(int, const char *, int);
    int (*creat)(const char *, mode_t);
    int (*creat64)(const char *, mode_t);
    FILE *(*fopen)(const char *, const char *);
    FILE *(*fopen64)(const char *, const char *);
    FILE *(*freopen)(const char *, const char *, FILE *);
    FILE *(*freopen64)(const char *, const char *, FILE *);
    int (*shm_open)(const char *, int, mode_t);
    /* libc: allocator (the next one in the chain, glibc's or a preloaded one's) */
    void (*free)(void *);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    int (*malloc_trim)(size_t);
    int (*mallopt)(int, int);
    pid_t (*fork)(void);
    /* libc: descriptors (the userfaultfd source keeps its own out of the program's way) */
    int (*close)(int);
    int (*close_range)(unsigned int, unsigned int, int);   /* NULL before glibc 2.34 */
    void (*closefrom)(int);                                /* the same */
    int (*dup2)(int, int);
    int (*dup3)(int, int, int);
    int (*ioctl)(int, unsigned long, ...);
    /* libibverbs */
    struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
    int (*dereg_mr)(struct ibv_mr *);
    int (*rereg_mr)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int);
    int (*dealloc_pd)(struct ibv_pd *);
    int (*close_device)(struct ibv_context *);
    int (*is_fork_initialized)(void);   /* enum ibv_fork_status; NULL before rdma-core 35 */
    /* glibc's count of its threads (GLIBC_PRIVATE data, what libthread_db reads; the
     * process ends when it reaches 0), or NULL with another libc. */
    const unsigned *nptl_nthreads;
};

extern struct mrc_real_fns mrc_real;

/* Whether the next allocator is glibc's own (its chunk headers may then be read). */
extern int mrc_real_alloc_is_glibc;

/* Whether fn's code lies in libc.so.6 itself (not in an object that exports the same
 * names). Any thread, any hook: never allocates. */
int mrc_real_in_libc(const void *fn);

/* Resolves the libc functions. Idempotent. */
void mrc_real_resolve_libc(void);

/* For hooks entered before the constructor: resolves libc's functions unless this
 * thread is resolving them already (dlsym may call back into a hook). Returns 1 when
 * mrc_real's libc pointers are usable, 0 when the hook must fall back on its own. The
 * common case (resolved) inline: every hook asks. */
int mrc_real_ensure_libc_slow(void);
static inline int mrc_real_ensure_libc(void)
{
    return __builtin_expect(__atomic_load_n(&mrc_real.munmap, __ATOMIC_ACQUIRE) != NULL, 1) ||
           mrc_real_ensure_libc_slow();
}

/* Resolves the libibverbs functions if not yet done. 0, or -ENOSYS if libibverbs is
 * not loaded in this process. */
int mrc_real_resolve_verbs(void);
extern int mrc_real_verbs_ready;

/* The same, with the common case (done already) inline: every verbs hook asks. */
static inline int mrc_real_verbs(void)
{
    return __builtin_expect(__atomic_load_n(&mrc_real_verbs_ready, __ATOMIC_ACQUIRE), 1) ? 0
                                                                                       : mrc_real_resolve_verbs();
}

#endif
