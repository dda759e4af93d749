/* pool.c - bump allocation from geometrically growing mmap'd arenas, plus a free list.
 * Invariants: arenas are only ever added (published with a release store of narenas,
 * so mrc_pool_owns can read them without the lock); objects are 16-byte aligned, and
 * 64-byte aligned when they are a cache line or larger. */
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/pool.h"

#define ARENA_MIN (64u << 10)
#define ARENA_MAX (64u << 20)

void mrc_pool_init(struct mrc_pool *p, size_t obj_size, int zero)
{
    memset(p, 0, sizeof(*p));
    /* Objects of a cache line or more start on a line of their own: two threads using
     * neighbouring entries must not share a line (false sharing doubles a hit's cost). */
    p->obj_size = obj_size >= 64 ? (obj_size + 63) & ~(size_t)63 : (obj_size + 15) & ~(size_t)15;
    p->zero = zero;
    pthread_mutex_init(&p->lock, NULL);
}

/* Faults in the next window of fresh objects with one system call when the bump pointer
 * enters it: a page fault per first touch costs microseconds in a VM, on a miss's path.
 * Best effort (MADV_POPULATE_WRITE needs Linux 5.14); a window at a time keeps RSS near
 * what is used. */
#define PREFAULT_WINDOW (64u << 10)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void prefault(struct mrc_pool *p, const char *obj)
{
    uintptr_t a = (uintptr_t)obj, w = a & ~(uintptr_t)(PREFAULT_WINDOW - 1);
    if (a - w >= p->obj_size)
        return;                       /* not the first object of its window */
    uintptr_t end = w + PREFAULT_WINDOW;
    if (end > (uintptr_t)p->bump_end)
        end = (uintptr_t)p->bump_end;
    syscall(SYS_madvise, w, end - w, MADV_POPULATE_WRITE);
}

static int pool_grow(struct mrc_pool *p)
{
    if (p->narenas == MRC_POOL_MAX_ARENAS)
        return -1;
    size_t size = ARENA_MIN << (p->narenas < 10 ? p->narenas : 10);
    if (size > ARENA_MAX)
        size = ARENA_MAX;
    /* The raw syscall keeps our own memory out of every unmap monitor, ours included. */
    long r = syscall(SYS_mmap, 0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r < 0 && r > -4096)
        return -1;
    unsigned n = p->narenas;
    p->arenas[n].start = (uintptr_t)r;
    p->arenas[n].end = (uintptr_t)r + size;
    __atomic_store_n(&p->narenas, n + 1, __ATOMIC_RELEASE);
    p->bump = (char *)r;
    p->bump_end = (char *)r + size;
    p->mapped += size;
    return 0;
}

void *mrc_pool_get(struct mrc_pool *p)
{
    void *obj = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->free_list) {
        obj = p->free_list;
        p->free_list = *(void **)obj;
    } else if ((size_t)(p->bump_end - p->bump) >= p->obj_size || pool_grow(p) == 0) {
        obj = p->bump;
        p->bump += p->obj_size;
        prefault(p, obj);
    }
    if (obj)
        p->live++;
    pthread_mutex_unlock(&p->lock);
    if (obj && p->zero)
        memset(obj, 0, p->obj_size);
    else if (obj)
        *(void **)obj = NULL;
    return obj;
}

void mrc_pool_put(struct mrc_pool *p, void *obj)
{
    pthread_mutex_lock(&p->lock);
    *(void **)obj = p->free_list;
    p->free_list = obj;
    p->live--;
    pthread_mutex_unlock(&p->lock);
}

int mrc_pool_owns(const struct mrc_pool *p, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    unsigned n = __atomic_load_n(&p->narenas, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if (a >= p->arenas[i].start && a < p->arenas[i].end)
            return (a - p->arenas[i].start) % p->obj_size == 0;
    return 0;
}

void mrc_pool_reset_lock(struct mrc_pool *p)
{
    pthread_mutex_init(&p->lock, NULL);
}
