/* pool.h - fixed-size object pools backed by anonymous mmap (raw syscall), for cache
 * entries, MR handles and call sites, with an optional reserve of pre-touched memory
 * that another thread prepares. Invariants: memory is never returned to the kernel while
 * the pool lives, so an object's memory stays readable after it is freed (type-stable:
 * lock-free readers may look at a stale object and must re-validate it); no malloc;
 * thread-safe; a get never waits for the reserve's preparer. */
#ifndef MRC_POOL_H
#define MRC_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MRC_POOL_MAX_ARENAS 48
#define MRC_POOL_MAX_RESERVE 4          /* chunks a reserve may hold */

struct mrc_pool_chunk {
    char *start, *end;
};

struct mrc_pool {
    size_t obj_size;
    size_t chunk_size;                  /* a multiple of obj_size, about 64 KiB */
    int zero;                           /* zero objects on get */
    pthread_mutex_t lock;               /* everything below but arenas[] and narenas' readers */
    void *free_list;                    /* freed objects, linked through their first word */
    struct mrc_pool_chunk cur;          /* the chunk objects are handed out from */
    char *bump, *bump_end;              /* uncarved tail of the newest arena */
    /* The reserve: chunks touched by mrc_pool_refill, each claimed by one refiller
     * while it touches it (counted in 'preparing'), then published in ready[]. */
    unsigned reserve;                   /* chunks to keep ready (0: no reserve) */
    unsigned nready, preparing;         /* nready + preparing <= reserve */
    struct mrc_pool_chunk ready[MRC_POOL_MAX_RESERVE];
    void (*low)(void *arg);             /* asked to refill when the reserve runs low */
    void *low_arg;
    unsigned narenas;
    struct { uintptr_t start, end; } arenas[MRC_POOL_MAX_ARENAS];
    size_t live;                        /* objects handed out and not freed */
    size_t mapped;                      /* bytes of arenas */
};

/* Prepares an empty pool of obj_size-byte objects (rounded up to 16, or to 64 from 64
 * bytes up, so that such objects never share a cache line). Maps nothing yet; no reserve.
 * With zero == 0 a reused object keeps its old contents (but for the first word), for
 * objects that lock-free readers may still be looking at. */
void mrc_pool_init(struct mrc_pool *p, size_t obj_size, int zero);

/* Keeps 'chunks' (at most MRC_POOL_MAX_RESERVE; 0 turns the reserve off) chunks of fresh
 * memory ready, touched by mrc_pool_refill on another thread, so that a get rarely pays
 * a page's first touch (tens of microseconds in some VMs). low(arg) is called, without
 * the pool lock and from whatever thread gets, when the reserve is down to half and no
 * refill is under way: it must only wake the refilling thread (no blocking, no malloc,
 * no call into the pool). Any thread, any time. */
void mrc_pool_set_reserve(struct mrc_pool *p, unsigned chunks, void (*low)(void *arg), void *arg);

/* Tops the reserve up from the arenas already mapped (never maps one: only gets do, so
 * that every mapping the pool makes happens inside a registration call): claims chunks
 * under the lock, touches their pages (one write per page) without it, publishes them
 * under it. This moves the first-touch cost to the calling thread, it does not remove
 * it. Returns 0. Any thread, concurrently with gets and other refills; not from a hook
 * (slow). */
int mrc_pool_refill(struct mrc_pool *p);

/* Returns an object (zeroed if the pool zeroes), or NULL when the kernel gives no memory. */
void *mrc_pool_get(struct mrc_pool *p);

/* Up to n objects into objs[] under one lock acquisition, for a caller that keeps a few
 * at hand (fewer when the free list and the current chunk run out; 0 only when the
 * kernel gives no memory). Returns how many. */
size_t mrc_pool_get_many(struct mrc_pool *p, void **objs, size_t n);

/* Returns obj (from this pool) for reuse. */
void mrc_pool_put(struct mrc_pool *p, void *obj);

/* Whether ptr is the start of an object slot of this pool (live or free). Lock-free. */
int mrc_pool_owns(const struct mrc_pool *p, const void *ptr);

/* Objects handed out and not returned. */
size_t mrc_pool_live(struct mrc_pool *p);

/* Calls fn on every object slot carved so far, live or free (type-stable memory: fn
 * tells them apart by their contents, which may change under it). Not from a hook. */
void mrc_pool_scan(struct mrc_pool *p, void (*fn)(void *obj, void *arg), void *arg);

/* Returns every arena to the kernel. Only for a pool none of whose objects is in use or
 * will be read again (lock-free readers included); p must be initialised again before
 * any other call. */
void mrc_pool_destroy(struct mrc_pool *p);

/* In a forked child: a fresh lock, and chunks that a parent's thread was preparing are
 * forgotten (that thread is not in the child). Objects and ready chunks stay. */
void mrc_pool_reset_lock(struct mrc_pool *p);

#endif
