/* pool.h - fixed-size object pools backed by anonymous mmap (raw syscall), for cache
 * entries and MR handles. Invariants: memory is never returned to the kernel, so an
 * object's memory stays readable after it is freed (type-stable: lock-free readers may
 * look at a stale object and must re-validate it); no malloc; thread-safe. */
#ifndef MRC_POOL_H
#define MRC_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MRC_POOL_MAX_ARENAS 48

struct mrc_pool {
    size_t obj_size;
    int zero;                           /* zero objects on get */
    pthread_mutex_t lock;
    void *free_list;                    /* freed objects, linked through their first word */
    char *bump, *bump_end;              /* untouched tail of the newest arena */
    unsigned narenas;
    struct { uintptr_t start, end; } arenas[MRC_POOL_MAX_ARENAS];
    size_t live;                        /* objects handed out and not freed */
    size_t mapped;                      /* bytes of arenas */
};

/* Prepares an empty pool of obj_size-byte objects (rounded up to 16, or to 64 from 64
 * bytes up, so that such objects never share a cache line). Maps nothing yet.
 * With zero == 0 a reused object keeps its old contents (but for the first word), for
 * objects that lock-free readers may still be looking at. */
void mrc_pool_init(struct mrc_pool *p, size_t obj_size, int zero);

/* Returns an object (zeroed if the pool zeroes), or NULL when the kernel gives no memory. */
void *mrc_pool_get(struct mrc_pool *p);

/* Returns obj (from this pool) for reuse. */
void mrc_pool_put(struct mrc_pool *p, void *obj);

/* Whether ptr is the start of an object slot of this pool (live or free). Lock-free. */
int mrc_pool_owns(const struct mrc_pool *p, const void *ptr);

/* Forgets every object without unmapping (a forked child's fresh start is a new init). */
void mrc_pool_reset_lock(struct mrc_pool *p);

#endif
