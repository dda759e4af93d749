/* bench_cache.c - the cache core's hit cost (get + put) with a fake back-end: 1 and 10k
 * entries, 1 and 2 threads, a miss's overhead beyond the registration itself, and one
 * invalidation over 16k entries (alone, and beside 16k that stay). Prints
 * ns per operation; timings are reported, never asserted (make bench, not make test). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/cache.h"
#include "util/clock.h"

#define PG 4096u

static int nop_reg(void *ctx, void *d, uint64_t a, uint64_t l, uint64_t i, uint32_t acc, struct mrc_range *r,
                   void **out)
{
    (void)ctx; (void)d; (void)l; (void)i; (void)acc; (void)r;
    *out = (void *)(uintptr_t)(a | 1);
    return 0;
}

static int nop_dereg(void *ctx, void *reg)
{
    (void)ctx; (void)reg;
    return 0;
}

static struct mrc_cache cache;
static char dom;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* A fresh cache holding n idle entries, room for max. */
static void setup_max(uint64_t n, uint64_t max)
{
    struct mrc_cache_params p = {
        .ops = { .reg = nop_reg, .dereg = nop_dereg }, .max_entries = max, .max_bytes = 1ull << 50,
        .max_deferred_bytes = 1ull << 30, .page_size = PG, .remote_mask = 2, .local_super_mask = 1,
    };
    mrc_cache_init(&cache, &p);
    for (uint64_t i = 0; i < n; i++) {   /* gaps between entries: no merging */
        struct mrc_entry *e;
        mrc_cache_get(&cache, &dom, 0x100000000ull + i * 4 * PG, PG, 0x100000000ull + i * 4 * PG, 1, &e);
        mrc_cache_put(&cache, e);
    }
}

static void setup(uint64_t n)
{
    setup_max(n, n + 16);
}

struct arg { uint64_t base; long ops; int random; uint64_t n; double ns; };

static void *hit_loop(void *v)
{
    struct arg *a = v;
    unsigned seed = 1;
    double t0 = now();
    for (long i = 0; i < a->ops; i++) {
        uint64_t addr = a->random ? 0x100000000ull + (uint64_t)(rand_r(&seed) % a->n) * 4 * PG : a->base;
        struct mrc_entry *e;
        mrc_cache_get(&cache, &dom, addr, PG, addr, 1, &e);
        mrc_cache_put(&cache, e);
    }
    a->ns = (now() - t0) / (double)a->ops;
    return NULL;
}

/* A loop that shares nothing: how much two threads slow each other down on this
 * machine by themselves (a VM's vCPUs may share a core or be contended). */
static void *alu_loop(void *v)
{
    struct arg *a = v;
    volatile uint64_t x = 0;
    double t0 = now();
    for (long i = 0; i < a->ops; i++)
        x += (uint64_t)i;
    a->ns = (now() - t0) / (double)a->ops;
    return NULL;
}

static double alu_ratio(void)
{
    struct arg one = { 0, 100000000, 0, 0, 0 }, two[2] = { one, one };
    alu_loop(&one);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, alu_loop, &two[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    return (two[0].ns + two[1].ns) / 2 / one.ns;
}

static double run(const char *name, uint64_t n, int threads, int random)
{
    setup(n);
    struct arg a[2];
    pthread_t t[2];
    for (int i = 0; i < threads; i++) {
        a[i] = (struct arg){ 0x100000000ull + (uint64_t)i * 4 * PG, 2000000, random, n, 0 };
        pthread_create(&t[i], NULL, hit_loop, &a[i]);
    }
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        sum += a[i].ns;
    }
    printf("%-44s %8.1f ns/op per thread\n", name, sum / threads);
    return sum / threads;
}

/* Best of 5, ns per entry: one invalidation of the first 16k of 'entries' idle ones (the
 * hook's part: the run is parked), the settling of the parked run (the work the hook no
 * longer does; here through the gauges, which settle first) and the deregistrations. */
static void invalidate_16k(int entries, const char *name)
{
    double best[3] = { 0, 0, 0 };
    for (int r = 0; r < 5; r++) {
        setup(entries);
        struct mrc_gauges g;
        double t0 = now();
        mrc_cache_invalidate(&cache, 0x100000000ull, 16384ull * 4 * PG, MRC_INVAL_MUNMAP);
        double t1 = now();
        mrc_cache_get_gauges(&cache, &g);
        double t2 = now();
        mrc_cache_drain(&cache);
        double v[3] = { t1 - t0, t2 - t1, now() - t2 };
        for (int k = 0; k < 3; k++)
            best[k] = r == 0 || v[k] / 16384 < best[k] ? v[k] / 16384 : best[k];
    }
    printf("%-44s %8.1f ns/entry in the hook; then %.1f to settle, %.1f to deregister (nop)\n",
           name, best[0], best[1], best[2]);
}

int main(void)
{
    mrc_clock_init();   /* as the library does: misses time the back-end in TSC ticks */
    double base = alu_ratio();
    double one = run("hit, 1 entry, 1 thread", 1, 1, 0);
    double two = run("hit, 1 entry each, 2 threads (private)", 2, 2, 0);
    double base2 = alu_ratio();
    printf("2 threads / 1 thread: hits %.2fx; a loop sharing nothing %.2fx (before) %.2fx (after)\n",
           two / one, base, base2);
    run("hit, 10k entries, 1 thread, same buffer", 10000, 1, 0);
    run("hit, 10k entries, 1 thread, random buffer", 10000, 1, 1);
    run("hit, 10k entries, 2 threads, random buffers", 10000, 2, 1);
    /* Miss overhead: registrations of fresh ranges, each released and evicted. */
    setup(0);
    double t0 = now();
    long n = 200000;
    for (long i = 0; i < n; i++) {
        struct mrc_entry *e;
        uint64_t addr = 0x200000000ull + (uint64_t)i * 4 * PG;
        mrc_cache_get(&cache, &dom, addr, PG, addr, 1, &e);
        mrc_cache_put(&cache, e);
        mrc_cache_invalidate(&cache, addr, PG, MRC_INVAL_MUNMAP);
    }
    printf("%-44s %8.1f ns/op\n", "miss + release + invalidate (nop back-end)", (now() - t0) / (double)n);
    /* As make bench's row 6 has it: the entries stay, ascending, so that every 16th
     * miss files the young set into a growing tree. */
    n = 200000;
    setup_max(0, (uint64_t)n);
    t0 = now();
    for (long i = 0; i < n; i++) {
        struct mrc_entry *e;
        uint64_t addr = 0x200000000ull + (uint64_t)i * 4 * PG;
        mrc_cache_get(&cache, &dom, addr, PG, addr, 1, &e);
        mrc_cache_put(&cache, e);
    }
    printf("%-44s %8.1f ns/op\n", "miss + release, 200k kept (nop back-end)", (now() - t0) / (double)n);
    /* One unmap over 16k idle entries (make bench's row 5): the cost per entry, alone and
     * beside 16k others that stay (the bench's row has both areas). */
    invalidate_16k(16384, "invalidate 16k idle entries at once");
    invalidate_16k(32768, "invalidate 16k of 32k idle entries");
    printf("bytes per cached entry: %zu (entry) + the caller's handle\n", sizeof(struct mrc_entry));
    return 0;
}
