/* pool.c - geometrically growing mmap'd arenas carved into chunks of about 64 KiB, a
 * current chunk objects are cut from, a free list, and an optional reserve of chunks
 * that another thread touched beforehand. Invariants: arenas are only ever added
 * (published with a release store of narenas, so mrc_pool_owns can read them without
 * the lock); chunks are carved from an arena's start in multiples of obj_size, so every
 * object sits at start + k * obj_size; a chunk belongs to exactly one of: a refiller
 * touching it (unpublished, so its writes race with nobody), ready[], cur; objects are
 * 16-byte aligned, and 64-byte aligned when they are a cache line or larger. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/pool.h"
#include "util/hot.h"
#include "util/sys.h"

#define ARENA_MIN (64u << 10)
#define ARENA_MAX (64u << 20)
#define CHUNK (64u << 10)
#define PAGE 4096u          /* the smallest page size: a touch per PAGE covers every page */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

void mrc_pool_init(struct mrc_pool *p, size_t obj_size, int zero)
{
    memset(p, 0, sizeof(*p));
    /* Objects of a cache line or more start on a line of their own: two threads using
     * neighbouring entries must not share a line (false sharing doubles a hit's cost). */
    p->obj_size = obj_size >= 64 ? (obj_size + 63) & ~(size_t)63 : (obj_size + 15) & ~(size_t)15;
    p->chunk_size = p->obj_size >= CHUNK ? p->obj_size : CHUNK - CHUNK % p->obj_size;
    p->zero = zero;
    pthread_mutex_init(&p->lock, NULL);
}

static int pool_grow(struct mrc_pool *p)
{
    if (p->narenas == MRC_POOL_MAX_ARENAS)
        return -1;
    size_t size = ARENA_MIN << (p->narenas < 10 ? p->narenas : 10);
    if (size > ARENA_MAX)
        size = ARENA_MAX;
    if (size < p->obj_size)
        size = (p->obj_size + PAGE - 1) & ~(size_t)(PAGE - 1);
    char *r = mrc_raw_map(size, 0);
    if (!r)
        return -1;
    unsigned n = p->narenas;
    p->arenas[n].start = (uintptr_t)r;
    p->arenas[n].end = (uintptr_t)r + size;
    __atomic_store_n(&p->narenas, n + 1, __ATOMIC_RELEASE);
    p->bump = r;
    p->bump_end = r + size;
    p->mapped += size;
    return 0;
}

/* Cuts the next chunk (shorter at an arena's end) from the newest arena, mapping a new
 * arena when fewer than one object is left and grow is set. Under the lock; *c is
 * untouched on failure. */
static int carve_locked(struct mrc_pool *p, struct mrc_pool_chunk *c, int grow)
{
    if ((size_t)(p->bump_end - p->bump) < p->obj_size && (!grow || pool_grow(p)))
        return -1;
    size_t n = (size_t)(p->bump_end - p->bump);
    if (n > p->chunk_size)
        n = p->chunk_size;
    n -= n % p->obj_size;
    c->start = p->bump;
    c->end = p->bump + n;
    p->bump += n;
    return 0;
}

/* Faults a chunk's pages in with one system call instead of a fault per page. Best
 * effort (Linux 5.14+). The range is widened to whole pages: populating a neighbour's
 * page writes nothing to it. */
static void populate(const struct mrc_pool_chunk *c)
{
    uintptr_t a = (uintptr_t)c->start & ~(uintptr_t)(PAGE - 1);
    mrc_sys_madvise((void *)a, (uintptr_t)c->end - a, MADV_POPULATE_WRITE);
}

/* Populates, then writes once into every page of the chunk (at an address inside the
 * chunk, which the caller alone holds). Some VMs charge tens of microseconds for the
 * first user-mode write to a page even after it is populated; after one write from any
 * thread of the process, later ones cost what they should. Fresh arena memory is zero,
 * so writing 0 changes no object. */
static void touch(const struct mrc_pool_chunk *c)
{
    populate(c);
    for (char *a = c->start; a < c->end; a = (char *)(((uintptr_t)a | (PAGE - 1)) + 1))
        *(volatile char *)a = 0;
}

void mrc_pool_set_reserve(struct mrc_pool *p, unsigned chunks, void (*low)(void *arg), void *arg)
{
    pthread_mutex_lock(&p->lock);
    /* Lowering it leaves ready chunks in place: they are used before new ones. */
    p->reserve = chunks < MRC_POOL_MAX_RESERVE ? chunks : MRC_POOL_MAX_RESERVE;
    p->low = chunks ? low : NULL;
    p->low_arg = arg;
    pthread_mutex_unlock(&p->lock);
}

int mrc_pool_refill(struct mrc_pool *p)
{
    for (;;) {
        struct mrc_pool_chunk c;
        pthread_mutex_lock(&p->lock);
        /* nready + preparing never exceeds the largest reserve: ready[] has room. */
        /* Only from arenas the gets mapped: a mapping made by this (background) thread
         * could land in the hole a program has just unmapped and means to map again
         * at the same address (MAP_FIXED_NOREPLACE), at a moment the program cannot
         * foresee. Arenas grow geometrically, so the gets rarely map one. */
        int want = p->nready + p->preparing < p->reserve;
        int rc = want ? carve_locked(p, &c, 0) : 0;
        if (want && rc == 0)
            p->preparing++;
        pthread_mutex_unlock(&p->lock);
        if (!want || rc)
            return 0;
        touch(&c);
        pthread_mutex_lock(&p->lock);
        p->preparing--;
        p->ready[p->nready++] = c;
        pthread_mutex_unlock(&p->lock);
    }
}

MRC_HOT size_t mrc_pool_get_many(struct mrc_pool *p, void **objs, size_t n)
{
    size_t got = 0, reused;
    void *next = NULL;
    struct mrc_pool_chunk fresh = { NULL, NULL };
    void (*low)(void *arg) = NULL;
    void *low_arg = NULL;
    pthread_mutex_lock(&p->lock);
    while (got < n && p->free_list) {
        objs[got] = p->free_list;
        p->free_list = next = *(void **)objs[got++];
    }
    reused = got;
    if (got < n) {   /* the free list is empty */
        /* At most one new chunk per call: one populate, one wake-up of the refiller. */
        if (p->cur.start == p->cur.end) {
            if (p->nready)
                p->cur = p->ready[--p->nready];
            else if (carve_locked(p, &p->cur, 1) == 0)
                fresh = p->cur;      /* none ready: today's caller pays the first touch */
            /* With a refill under way, the refiller looks at nready again before it
             * stops: only an idle one needs asking. Once the reserve is down to half:
             * a wake-up is a system call and an IPI (~30 us in a VM), so each one
             * asks for several chunks. */
            if (p->low && !p->preparing && 2 * p->nready <= p->reserve) {
                /* The refiller never maps: give it the next arena now, here, inside
                 * the caller's registration (one mmap, nothing touched). */
                if ((size_t)(p->bump_end - p->bump) < p->obj_size)
                    pool_grow(p);
                low = p->low;
                low_arg = p->low_arg;
            }
        }
        while (got < n && p->cur.start != p->cur.end) {
            objs[got++] = p->cur.start;
            p->cur.start += p->obj_size;
        }
        next = p->cur.start != p->cur.end ? p->cur.start : NULL;
    }
    p->live += got;
    pthread_mutex_unlock(&p->lock);
    /* Outside the lock: other gets may cut objects from the chunk meanwhile, and
     * populating writes nothing they could see. */
    if (fresh.start)
        populate(&fresh);
    if (low)
        low(low_arg);
    /* The next get's object, prefetched for writing: its lines were last written by
     * another core (the refiller's, or the kernel's zeroing on it) or by a user long
     * ago, and fetching them now overlaps whatever the caller does until then. */
    if (next) {
        __builtin_prefetch(next, 1);
        if (p->obj_size > 64)
            __builtin_prefetch((char *)next + 64, 1);
    }
    /* Objects cut from a chunk are untouched arena memory, zero already: writing them
     * here would fetch cold lines for nothing (the caller's first use fetches them). */
    for (size_t i = 0; i < reused; i++) {
        if (p->zero)
            memset(objs[i], 0, p->obj_size);
        else
            *(void **)objs[i] = NULL;
    }
    return got;
}

void *mrc_pool_get(struct mrc_pool *p)
{
    void *obj;
    return mrc_pool_get_many(p, &obj, 1) ? obj : NULL;
}

void mrc_pool_put(struct mrc_pool *p, void *obj)
{
    pthread_mutex_lock(&p->lock);
    *(void **)obj = p->free_list;
    p->free_list = obj;
    p->live--;
    pthread_mutex_unlock(&p->lock);
}

MRC_HOT int mrc_pool_owns(const struct mrc_pool *p, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    unsigned n = __atomic_load_n(&p->narenas, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if (a >= p->arenas[i].start && a < p->arenas[i].end)
            return (a - p->arenas[i].start) % p->obj_size == 0;
    return 0;
}

void mrc_pool_scan(struct mrc_pool *p, void (*fn)(void *obj, void *arg), void *arg)
{
    pthread_mutex_lock(&p->lock);
    unsigned n = p->narenas;
    uintptr_t bump = (uintptr_t)p->bump;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++) {
        uintptr_t end = p->arenas[i].end;
        if (i == n - 1 && bump >= p->arenas[i].start && bump < end)
            end = bump;   /* never carved: never touched, and never to be read in */
        for (uintptr_t a = p->arenas[i].start; a + p->obj_size <= end; a += p->obj_size)
            fn((void *)a, arg);
    }
}

void mrc_pool_reset_lock(struct mrc_pool *p)
{
    pthread_mutex_init(&p->lock, NULL);
    p->preparing = 0;
}

size_t mrc_pool_live(struct mrc_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->live;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void mrc_pool_destroy(struct mrc_pool *p)
{
    for (unsigned i = 0; i < p->narenas; i++)
        mrc_raw_unmap((void *)p->arenas[i].start, p->arenas[i].end - p->arenas[i].start);
    pthread_mutex_destroy(&p->lock);
    memset(p, 0, sizeof(*p));
}
