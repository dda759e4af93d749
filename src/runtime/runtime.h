/* runtime.h - what the interposition layer calls: start-up, the verbs entry points with
 * the process's gates in front of the verbs front-end (ready, caching on, first use),
 * fork, and the public API's logic. Each verbs function follows the errno contract of the
 * call it implements; each mrc_rt_api_* function returns 0, a count or -errno and may
 * change errno (the exported wrapper keeps the caller's). */
#ifndef MRC_RUNTIME_H
#define MRC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct ibv_mr;
struct ibv_context;
struct mrcache_stats;

/* Sets everything up (idempotent; the constructor calls it, a hook entered earlier may). */
void mrc_init(void);

/* From the constructor, after mrc_init: the exports the unmap path relies on (n of
 * them), watched against other libraries' patches. */
struct mrc_export;
void mrc_rt_guard_exports(const struct mrc_export *list, unsigned n);

/* From the constructor, after mrc_init: while the allocator hooks idle, the PLT calls of
 * free in the objects loaded so far go straight to the allocator instead of through
 * self_free (libmrcache's own free). */
void mrc_rt_free_direct(void (*self_free)(void *));

/* From the constructor, after mrc_init: libibverbs' entry points of the table's ENTRY
 * rows, each with the mrc_real pointer that finds it and our export it is to jump to
 * (runtime/bind.c does it before the first registration is cached). */
struct mrc_rt_entry {
    const char *name;
    void **real;
    void *own;
};
void mrc_rt_verbs_entries(const struct mrc_rt_entry *list, unsigned n);

/* The program's MRs that outlive their memory (inuse.c): the cache's in_use callback
 * (any hook), the front-end's held callback, the scan of the handles for what was
 * recorded (the helper's, and before statistics are read; not from a hook), and a
 * forked child's fresh start. */
struct mrc_verbs_held;
struct mrc_inuse_rec;
void mrc_rt_inuse_recorded(void *arg, uint64_t seq);
void mrc_rt_inuse_held(const struct mrc_verbs_held *h, const struct mrc_inuse_rec *rec, void *arg);
void mrc_rt_inuse_scan(void);
void mrc_rt_inuse_child(void);

struct ibv_mr *mrc_rt_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access,
                             const void *caller);
struct ibv_mr *mrc_rt_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                    int access);
int mrc_rt_dereg_mr(struct ibv_mr *mr);
int mrc_rt_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access);
int mrc_rt_dealloc_pd(struct ibv_pd *pd);
int mrc_rt_close_device(struct ibv_context *ctx);

/* Before the real fork (the exported fork's): what rdma-core's fork-safe mode needs,
 * and MRCACHE_FORK's release of idle registrations. */
void mrc_rt_before_fork(void);

/* Before madvise(MADV_COLLAPSE) (the exported madvise's): idle registrations over
 * [addr, addr+len) are deregistered, so that the pages can be collapsed as without the
 * cache. Keeps errno. */
void mrc_rt_before_collapse(const void *addr, size_t len);

int mrc_rt_api_monitors(void);
int mrc_rt_api_invalidate(const void *addr, size_t len, unsigned flags);
int mrc_rt_api_flush(struct ibv_pd *pd, unsigned flags);
int mrc_rt_api_stats_read(size_t size, struct mrcache_stats *out);
int mrc_rt_api_stats_dump(int fd, unsigned flags);

#endif
