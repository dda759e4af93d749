/* test_start_locked.c - a program whose own allocator (defined in the executable)
 * makes a heap for each thread at its first malloc under the allocator's lock, and
 * registers the memory of a pool it grows while holding that lock: its first ibv_reg_mr
 * is made with the lock held. libmrcache starts its helper threads at the first
 * registration and waits for them to map their own memory, which for the helper includes
 * its first malloc: that wait must end (bounded) rather than hang the process. Run under
 * timeout: a hang fails. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static pthread_mutex_t heaps = PTHREAD_MUTEX_INITIALIZER;
static __thread int heap_ready;
static unsigned long heaps_made;

/* A thread's first allocation makes its heap, under the allocator's lock. */
static void heap_for_thread(void)
{
    if (__builtin_expect(heap_ready, 1))
        return;
    heap_ready = 1;
    pthread_mutex_lock(&heaps);
    heaps_made++;
    pthread_mutex_unlock(&heaps);
}

__attribute__((visibility("default"))) void *malloc(size_t n)
{
    heap_for_thread();
    return __libc_malloc(n);
}
__attribute__((visibility("default"))) void *calloc(size_t n, size_t s)
{
    heap_for_thread();
    return __libc_calloc(n, s);
}
__attribute__((visibility("default"))) void *realloc(void *p, size_t n)
{
    heap_for_thread();
    return __libc_realloc(p, n);
}
__attribute__((visibility("default"))) void free(void *p)
{
    __libc_free(p);
}

static void test_pool_registered_under_allocator_lock(void)
{
    free(malloc(1));   /* this thread's heap exists */
    size_t len = 1 << 20;
    char *pool = check_map_aligned(len, 4096);
    CHECK(pool);
    if (!pool)
        return;
    pthread_mutex_lock(&heaps);   /* the pool grows under the allocator's lock */
    struct ibv_mr *mr = ibv_reg_mr(pd, pool, len, IBV_ACCESS_LOCAL_WRITE);
    pthread_mutex_unlock(&heaps);
    CHECK(mr);
    if (mr) {
        CHECK(write_visible(mr, pool, len, 0x5a));
        CHECK(ibv_dereg_mr(mr) == 0);
    }
    munmap(pool, len);
}

int main(void)
{
    open_nic();
    RUN(test_pool_registered_under_allocator_lock);
    CHECK_EXIT();
}
