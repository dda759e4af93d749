/* bench.c - the workloads of `make bench`, one per command, written once over
 * the registration interface of sys_verbs.h (systems (a) no cache and (b) libmrcache,
 * one binary run with and without LD_PRELOAD) or sys_ucx.h (system (c), UCX's rcache).
 * Prints "key value" lines; run-bench.sh alternates the processes, bench_report.c turns
 * the medians into the table. Invariants: timed loops do no I/O and allocate nothing of
 * their own; each loop checks against the NIC's counters that it did what it claims
 * (hits never reach the NIC; without a cache every registration does). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "snic.h"

static void die(const char *what)
{
    fprintf(stderr, "bench: %s (errno %d: %s)\n", what, errno, strerror(errno));
    exit(1);
}

#if BENCH_UCX
#include "sys_ucx.h"
#else
#include "sys_verbs.h"
#endif

#define KIB 1024ul
#define MIB (1024ul * KIB)
#define HOT_LEN (64 * KIB)    /* the buffer the hit workloads register */
#define SMALL 4096ul          /* a filler entry: one page ... */
#define SLOT 8192ul           /* ... with a page of gap, so neighbours never merge */
#define ROUNDS 5              /* timed rounds per process; the process prints their median */

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* CPU time of the calling thread, kernel time included: what the operations cost, and
 * not what other processes on a shared machine take from us while we wait to run. */
static uint64_t cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t minor_faults(void)
{
    struct rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return (uint64_t)u.ru_minflt;
}

static void put(const char *key, double v)
{
    printf("%s %.4f\n", key, v);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t nic_regs(void)
{
    struct snic_stats s;
    snic_get_stats(&s);
    return s.reg_calls;
}

/* A hit must not reach the NIC; without a cache every registration must. */
static void check_nic(uint64_t regs_before, uint64_t ops, const char *what)
{
    uint64_t got = nic_regs() - regs_before, want = sys_cached ? 0 : ops;
    if (got != want) {
        fprintf(stderr, "bench: %s: %llu NIC registrations for %llu operations, expected %llu\n", what,
                (unsigned long long)got, (unsigned long long)ops, (unsigned long long)want);
        exit(1);
    }
}

/* Reserved address space; pages appear when touched or pinned. */
static char *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    return p;
}

/* Address space for n slots (a page each, then a page of gap), backed by a shared
 * memory file mapped again every WINDOW slots. Pinning or touching a slot is then a
 * minor fault on a page that already exists: on this VM a first touch of fresh memory
 * costs ~12 us, which would make a million entries take a minute to set up. The caches
 * key on virtual addresses, so sharing the physical pages changes nothing they do.
 * There are SLOT_FILES files: areas timed against each other must not share pages
 * (of two areas on the same pages, the one unmapped second, which drops the pages'
 * last mappings, cost 25-45 ns more per page). */
#define WINDOW 16384ul
#define SLOT_FILES 2
static int slot_fd[SLOT_FILES] = { -1, -1 };

static char *slots_map_on(unsigned file, uint64_t n)
{
    const size_t win = WINDOW * SLOT;
    if (slot_fd[file] < 0) {
        slot_fd[file] = memfd_create("bench-slots", MFD_CLOEXEC);
        if (slot_fd[file] < 0 || ftruncate(slot_fd[file], (off_t)win))
            die("memfd");
    }
    uint64_t nwin = (n + WINDOW - 1) / WINDOW;
    char *base = map(nwin * win);
    for (uint64_t w = 0; w < nwin; w++)
        if (mmap(base + w * win, win, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, slot_fd[file], 0) ==
            MAP_FAILED)
            die("mmap (slots)");
    return base;
}

static char *slots_map(uint64_t n)
{
    return slots_map_on(0, n);
}

static size_t slots_len(uint64_t n)
{
    return (size_t)((n + WINDOW - 1) / WINDOW) * WINDOW * SLOT;
}

static void touch_slots(char *base, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        memset(base + i * SLOT, 1, SMALL);
}

/* Registers slot i of base for i in [from, to). With a cache each is released at once
 * and stays cached (one live NIC MR per entry); without one it is kept in keep[]. */
static void fill(char *base, uint64_t from, uint64_t to, void **keep)
{
    for (uint64_t i = from; i < to; i++) {
        void *h = sys_reg(base + i * SLOT, SMALL);
        if (sys_cached)
            sys_dereg(h);
        else
            keep[i] = h;
    }
}

static void unfill(uint64_t from, uint64_t to, void **keep)
{
    if (!sys_cached)
        for (uint64_t i = from; i < to; i++)
            sys_dereg(keep[i]);
}

/* ---- 1. hits among 1, 10k and 1M entries ---- */

static double hit_loop(char *const *bufs, unsigned nbufs, uint64_t iters)
{
    uint64_t r0 = nic_regs(), t0 = cpu_ns();
    for (uint64_t i = 0; i < iters; i++) {
        void *h = sys_reg(bufs[i % nbufs], HOT_LEN);
        sys_dereg(h);
    }
    double ns = (double)(cpu_ns() - t0) / (double)iters;
    check_nic(r0, iters, "hit loop");
    return ns;
}

/* Iterations for about target_ms, from a short trial. */
static uint64_t calibrate(char *const *bufs, unsigned nbufs, double target_ms)
{
    uint64_t n = sys_cached ? 20000 : 200;
    double ns = hit_loop(bufs, nbufs, n);
    uint64_t iters = (uint64_t)(target_ms * 1e6 / (ns > 1 ? ns : 1));
    return iters < 100 ? 100 : iters;
}

static double hit_measure(char *const *bufs, unsigned nbufs)
{
    double v[ROUNDS];
    uint64_t iters = calibrate(bufs, nbufs, 20);
    for (int r = 0; r < ROUNDS; r++)
        v[r] = hit_loop(bufs, nbufs, iters);
    return median(v, ROUNDS);
}

#define ROTATE 16
#define ROTATE_MANY 4096

static void w_hit(void)
{
    static const struct { uint64_t n; const char *key; } sizes[] = {
        { 1, "hit_1" }, { 10000, "hit_10k" }, { 1000000, "hit_1m" },
    };
    const uint64_t max = 1000000;
    char *hot = map(HOT_LEN);
    memset(hot, 1, HOT_LEN);
    sys_dereg(sys_reg(hot, HOT_LEN));   /* the miss that caches it */
    char *fillers = slots_map(max);
    void **keep = sys_cached ? NULL : calloc(max, sizeof(void *));
    uint64_t have = 1;                   /* entries: the hot buffer, then fillers */
    for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        fill(fillers, have - 1, sizes[s].n - 1, keep);
        have = sizes[s].n;
        put(sizes[s].key, hit_measure(&hot, 1));
    }
    /* The same among 1M, cycling through more buffers than a thread keeps at hand: each
     * hit must find its entry among all the others. */
    char *rot = map(ROTATE * 2 * HOT_LEN), *bufs[ROTATE];
    for (unsigned i = 0; i < ROTATE; i++) {
        bufs[i] = rot + i * 2 * HOT_LEN;
        memset(bufs[i], 1, HOT_LEN);
        sys_dereg(sys_reg(bufs[i], HOT_LEN));
    }
    put("hit16_1m", hit_measure(bufs, ROTATE));
    /* And through thousands, far more than a thread's hints hold, each 389 buffers
     * (50 MiB) after the one before, as a program with a large pool of buffers does. */
    char *many = map((uint64_t)ROTATE_MANY * 2 * HOT_LEN), **mbufs = calloc(ROTATE_MANY, sizeof(char *));
    if (!mbufs)
        die("calloc");
    for (unsigned i = 0; i < ROTATE_MANY; i++) {
        mbufs[i] = many + (uint64_t)(i * 389u % ROTATE_MANY) * 2 * HOT_LEN;
        memset(mbufs[i], 1, HOT_LEN);
        sys_dereg(sys_reg(mbufs[i], HOT_LEN));
    }
    put("hit4k_1m", hit_measure(mbufs, ROTATE_MANY));
    /* Exit without unregistering a million MRs one by one (seconds, and nothing of what
     * is measured): the kernel releases the pins with the process. */
    fflush(stdout);
    _exit(0);
}

/* ---- 2. two threads hitting private buffers ---- */

struct thr {
    pthread_t tid;
    int cpu;
    char *buf;
    uint64_t iters;
    pthread_barrier_t *start;
    double ns;       /* CPU time per operation */
    double busy;     /* CPU time / wall time of the timed loop: 1 = never preempted */
};

static void *thr_main(void *arg)
{
    struct thr *t = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);   /* best effort */
    for (int i = 0; i < 1000; i++)                               /* this thread's warm-up */
        sys_dereg(sys_reg(t->buf, HOT_LEN));
    pthread_barrier_wait(t->start);
    uint64_t w0 = now_ns(), c0 = cpu_ns();
    for (uint64_t i = 0; i < t->iters; i++)
        sys_dereg(sys_reg(t->buf, HOT_LEN));
    uint64_t c = cpu_ns() - c0, w = now_ns() - w0;
    t->ns = (double)c / (double)t->iters;
    t->busy = (double)c / (double)w;
    return NULL;
}

/* Per-operation CPU time of n threads running at once (their mean); *busy is the least
 * CPU/wall ratio among them: below 1, a thread was preempted and contended less. */
static double thr_run(char **bufs, int n, uint64_t iters, double *busy)
{
    struct thr t[2];
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        t[i] = (struct thr){ .cpu = i, .buf = bufs[i], .iters = iters, .start = &b };
        if (pthread_create(&t[i].tid, NULL, thr_main, &t[i]))
            die("pthread_create");
    }
    double sum = 0;
    *busy = 1;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i].tid, NULL);
        sum += t[i].ns;
        if (t[i].busy < *busy)
            *busy = t[i].busy;
    }
    pthread_barrier_destroy(&b);
    return sum / n;
}

static void w_threads(void)
{
    /* Private buffers a gap apart: separate mappings may be adjacent, and adjacent
     * same-rights ranges may be merged into one shared registration. */
    char *area = map(4 * HOT_LEN), *bufs[2] = { area, area + 2 * HOT_LEN };
    memset(area, 1, 4 * HOT_LEN);
    for (int i = 0; i < 2; i++)
        sys_dereg(sys_reg(bufs[i], HOT_LEN));
    uint64_t iters = calibrate(bufs, 1, 50);
    enum { TRIES = 3 * ROUNDS };
    double one[TRIES], two[TRIES], busy[TRIES], good1[TRIES], good2[TRIES], gbusy[TRIES];
    int got = 0, tries = 0;
    uint64_t r0 = nic_regs();
    /* Rounds in which both threads ran throughout count; on a busy machine a few more
     * tries, and failing that every round, with how busy the threads were. */
    for (; got < ROUNDS && tries < TRIES; tries++) {
        double b1;
        one[tries] = thr_run(bufs, 1, iters, &b1);
        two[tries] = thr_run(bufs, 2, iters, &busy[tries]);
        if (busy[tries] >= 0.9) {
            good1[got] = one[tries];
            good2[got] = two[tries];
            gbusy[got++] = busy[tries];
        }
    }
    check_nic(r0, (uint64_t)tries * (3 * iters + 3000), "thread loops");
    if (got < ROUNDS / 2 + 1) {
        fprintf(stderr, "bench: threads: in %d of %d rounds a thread was preempted (machine busy)\n",
                tries - got, tries);
        put("thr_1t", median(one, tries));
        put("thr_2t", median(two, tries));
        put("thr_busy", median(busy, tries));
        return;
    }
    put("thr_1t", median(good1, got));
    put("thr_2t", median(good2, got));
    put("thr_busy", median(gbusy, got));
}

/* ---- 3. a program that registers every message ---- */

static void w_permsg(size_t len, const char *key)
{
    char *buf = map(len);
    memset(buf, 1, len);
    double v[3];
    uint64_t total = 0, r0 = nic_regs();
    for (int r = -1; r < 3; r++) {   /* round -1 warms up (and makes the cached entry) */
        uint64_t t0 = now_ns(), c0 = cpu_ns(), n = 0;
        do {
            void *h = sys_reg(buf, len);
            ((volatile char *)buf)[n % len] = (char)n;   /* the "message" */
            sys_dereg(h);
            n++;
        } while (now_ns() - t0 < 150000000u || n < 20);
        total += n;
        if (r >= 0)
            v[r] = (double)n * 1e9 / (double)(cpu_ns() - c0);
    }
    if (sys_cached)
        r0++;   /* the one miss */
    check_nic(r0, total, "per-message loop");
    put(key, median(v, 3));
#if !BENCH_UCX
    /* What the statistics claim each hit saved, for the report to set beside the measured
     * difference of the run without a cache. */
    struct mrcache_stats st;
    if (sys_cached && mrcache_stats_read(sizeof(st), &st) == 0 && st.hits) {
        char k[64];
        snprintf(k, sizeof(k), "%s_saved", key);
        put(k, (double)st.saved_ns / (double)st.hits);
    }
#endif
}

/* ---- 4. the preload's tax on programs that never register ---- */

#define MSLOTS 4096
static void *mslot[MSLOTS];

static void w_tax_malloc(void)
{
    /* Random sizes from 16 B to 1 KiB over a working set of 4096 blocks, each written
     * once: what an allocation-heavy program does between its computations. */
    const uint64_t ops = 2000000;
    uint64_t x = 88172645463325252ull;
    double v[ROUNDS];
    for (int r = -1; r < ROUNDS; r++) {
        uint64_t t0 = cpu_ns();
        for (uint64_t i = 0; i < ops; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            unsigned j = (unsigned)(x >> 20) % MSLOTS;
            size_t size = 16 + (size_t)(x >> 40) % 1009;
            free(mslot[j]);
            mslot[j] = malloc(size);
            if (!mslot[j])
                die("malloc");
            memset(mslot[j], (int)i, 16);
        }
        if (r >= 0)
            v[r] = (double)(cpu_ns() - t0) / (double)ops;
    }
    put("tax_malloc", median(v, ROUNDS));
}

static void w_tax_munmap(void)
{
    /* Map, touch, unmap 64 KiB: a program managing its own buffers with mmap. */
    const uint64_t ops = 2000;
    double v[ROUNDS];
    for (int r = -1; r < ROUNDS; r++) {
        uint64_t t0 = cpu_ns();
        for (uint64_t i = 0; i < ops; i++) {
            char *p = mmap(NULL, 64 * KIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                die("mmap");
            p[0] = 1;
            if (munmap(p, 64 * KIB))
                die("munmap");
        }
        if (r >= 0)
            v[r] = (double)(cpu_ns() - t0) / (double)ops;
    }
    put("tax_munmap", median(v, ROUNDS));
}

/* ---- 5. munmap over 16k cached entries ---- */

static void raw_munmap(void *addr, size_t len)
{
    if (syscall(SYS_munmap, addr, len))
        die("munmap (raw)");
}

/* One round: both areas mapped and filled, area h unmapped through the cache's path
 * and the other by the kernel alone, the hooked one first or second; adds the CPU
 * times to *hooked and *plain. */
static void unmap_round(uint64_t n, void **keep[2], char *dummy, int h, int hooked_first, double *hooked,
                        double *plain)
{
    char *area[2] = { slots_map_on(0, n), slots_map_on(1, n) };
    const size_t len = slots_len(n);
    fill(area[0], 0, n, keep[0]);
    fill(area[1], 0, n, keep[1]);
    for (int k = 0; k < 2; k++) {
        int through_hook = (k == 0) == hooked_first;
        uint64_t t0 = cpu_ns();
        if (through_hook)
            sys_unmap(area[h], len);
        else
            raw_munmap(area[!h], len);
        *(through_hook ? hooked : plain) += (double)(cpu_ns() - t0);
    }
    sys_forget(area[!h], len);   /* the cache learns of that one too: no stale entries */
    unfill(0, n, keep[0]);
    unfill(0, n, keep[1]);
    /* A cache deregisters what the unmaps invalidated at its next call. */
    sys_dereg(sys_reg(dummy, SMALL));
}

static void w_unmap(void)
{
    /* Two areas of 16k registered pages each, on pages of their own (see slots_map_on):
     * one unmapped by the kernel alone (no hook sees it), the other through the cache's
     * unmap path. The difference is the hook. The areas also differ by themselves: in
     * one process one area's pages took ~25 ns more each to unmap than the other's, and
     * which one changed from process to process. So each block of four rounds gives
     * each area each role, once first and once second, and the block's figure is its
     * hooked time minus its plain time. The process's first round, twice as slow as the
     * rest, is not counted. */
    const uint64_t n = 16384;
    void **keep[2] = { calloc(n, sizeof(void *)), calloc(n, sizeof(void *)) };
    double v[ROUNDS], raw[ROUNDS], hooked = 0, plain = 0;
    char *dummy = map(SMALL);
    memset(dummy, 1, SMALL);
    unmap_round(n, keep, dummy, 0, 1, &hooked, &plain);
    for (int b = 0; b < ROUNDS; b++) {
        hooked = plain = 0;
        for (int q = 0; q < 4; q++)
            unmap_round(n, keep, dummy, q & 1, (q >> 1) ^ (b & 1), &hooked, &plain);
        v[b] = (hooked - plain) / (4.0 * (double)n);
        raw[b] = plain / (4.0 * (double)n);
    }
    free(keep[0]);
    free(keep[1]);
    put("unmap_entry", median(v, ROUNDS));
    put("unmap_raw_entry", median(raw, ROUNDS));
}

/* ---- 6. miss overhead ---- */

static void w_miss(uint64_t stride, const char *key)
{
    /* Batches of first registrations of fresh pages, alternating between the NIC alone
     * and the cache's miss path (register + release, as a program does); the cached
     * MRs and the NIC's stay registered, so both grow the NIC's tables alike. Each batch
     * takes its slots in address order (stride 1) or in an odd stride's order, so that
     * consecutive registrations land far apart, as a pool's buffers registered as they
     * are first used do. */
    if (!sys_cached)
        return;   /* without a cache there is nothing on top */
    const uint64_t b = 1024;
    char name[48];
    enum { R = 8 };
    char *base = slots_map(2 * R * b);
    touch_slots(base, 2 * R * b);
    void **keep = calloc(R * b, sizeof(void *));
    double v[R], nic[R];
    uint64_t kept = 0, fn = 0, fc = 0;
    for (int r = 0; r < R; r++) {
        char *a = base + 2 * r * b * SLOT, *c = a + b * SLOT;
        uint64_t tn = 0, tc = 0;
        for (int k = 0; k < 2; k++) {
            uint64_t t0 = cpu_ns(), f0 = minor_faults();
            if ((k ^ r) & 1) {
                uint64_t r0 = nic_regs();
                for (uint64_t i = 0; i < b; i++)
                    sys_dereg(sys_reg(c + (i * stride % b) * SLOT, SMALL));
                tc = cpu_ns() - t0;
                fc += minor_faults() - f0;
                if (nic_regs() - r0 != b)
                    die("a miss did not register");
            } else {
                for (uint64_t i = 0; i < b; i++)
                    keep[kept++] = sys_nic_reg(a + (i * stride % b) * SLOT, SMALL);
                tn = cpu_ns() - t0;
                fn += minor_faults() - f0;
            }
        }
        v[r] = ((double)tc - (double)tn) / (double)b;
        nic[r] = (double)tn / (double)b;
    }
    for (uint64_t i = 0; i < kept; i++)
        sys_nic_dereg(keep[i]);
    snprintf(name, sizeof(name), "%s_over", key);
    put(name, median(v, R));
    snprintf(name, sizeof(name), "%s_nic", key);
    put(name, median(nic, R));
    /* Page faults per registration, beyond pinning: fresh memory the path touches. On
     * a VM where a first touch is dear, these explain much of the overhead. */
    snprintf(name, sizeof(name), "%s_faults_over", key);
    put(name, ((double)fc - (double)fn) / (double)(R * b));
}

/* ---- 7. memory per cached entry ---- */

static double rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size, res;
    if (!f || fscanf(f, "%lu %lu", &size, &res) != 2)
        die("/proc/self/statm");
    fclose(f);
    return (double)res * (double)sysconf(_SC_PAGESIZE);
}

static void w_memory(void)
{
    /* RSS growth over 100k registered (and, with a cache, released) pages that were
     * touched beforehand: the NIC's own per-MR memory, plus the cache's per entry. */
    const uint64_t n = 100000;
    char *base = slots_map(n + 1);
    touch_slots(base, n + 1);
    void **keep = calloc(n + 1, sizeof(void *));
    memset(keep, 0, (n + 1) * sizeof(void *));   /* resident before the first reading */
    fill(base, n, n + 1, keep);                  /* first-use set-up stays out of the delta */
    double before = rss_bytes();
    fill(base, 0, n, keep);
    double after = rss_bytes();
    put("mem_entry", (after - before) / (double)n);
}

/* ---- 8. end to end: the program as a user runs it, against itself registering once ---- */

#define E2E_BUFS 8
#define E2E_ROUNDS 9   /* per way of registering, alternated finely: load changes hit both */

/* Process CPU time: every thread's, the cache's helper thread included. */
static uint64_t proc_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One message from buffer m % E2E_BUFS: the program writes it, the NIC reads all of it
 * from the pinned pages (what a send costs the host), and its first and last bytes are
 * checked. once[] holds the buffers' own registrations, or is NULL: then the message is
 * registered and released, as the program does. */
static void e2e_send(char *const *buf, void *const *once, size_t len, char *wire, uint64_t m)
{
    char *b = buf[m % E2E_BUFS];
    void *h = once ? once[m % E2E_BUFS] : sys_reg(b, len);
    memset(b, (int)(m & 0xff), len);
    wire[0] = wire[len - 1] = (char)~m;
    uint32_t lkey = once ? ((struct ibv_mr *)h)->lkey : sys_lkey(h);   /* sys_nic_reg's are MRs */
    if (snic_local_read(lkey, (uintptr_t)b, wire, len) || wire[0] != (char)(m & 0xff) ||
        wire[len - 1] != (char)(m & 0xff)) {
        fprintf(stderr, "bench: e2e: message %llu arrived wrong\n", (unsigned long long)m);
        exit(1);
    }
    if (!once)
        sys_dereg(h);
}

/* Messages per CPU second over at least one turn through the buffers and 60 ms. */
static double e2e_round(char *const *buf, void *const *once, size_t len, char *wire, uint64_t *m,
                        uint64_t *sent)
{
    uint64_t t0 = now_ns(), c0 = proc_cpu_ns(), n = 0;
    do
        e2e_send(buf, once, len, wire, (*m)++);
    while (++n < E2E_BUFS || now_ns() - t0 < 60000000u);
    *sent += n;
    return (double)n * 1e9 / (double)(proc_cpu_ns() - c0);
}

/* A program sending from E2E_BUFS malloc'd buffers in turn and registering every message,
 * and, alternated with it in the same process, the same program registering each buffer
 * once with the NIC itself. Reports both rates and the median of their ratios round by
 * round, the CPU time of the first turn through
 * the buffers (on fresh memory, which the first pin of a page may make dearer than any
 * later one: only the systems' first turns compare), and the NIC's peak pinned bytes
 * over that turn, as a multiple of the bytes the program registers: after it every
 * message is a hit (checked), so the peak cannot grow. */
static void w_e2e(size_t len, const char *key)
{
    char *buf[E2E_BUFS], *wire = malloc(len);
    void *once[E2E_BUFS];
    if (!wire)
        die("malloc");
    memset(wire, 0, len);
    for (int i = 0; i < E2E_BUFS; i++) {
        if (!(buf[i] = malloc(len)))
            die("malloc");
        memset(buf[i], 0, len);
    }
    snic_reset_peak();
    uint64_t m = 0, c0 = proc_cpu_ns();
    for (int i = 0; i < E2E_BUFS; i++)
        e2e_send(buf, NULL, len, wire, m++);
    double first = (double)(proc_cpu_ns() - c0) / 1e6;
    struct snic_stats st;
    snic_get_stats(&st);
    for (int i = 0; i < E2E_BUFS; i++)
        once[i] = sys_nic_reg(buf[i], len);
    double per[E2E_ROUNDS], reg_once[E2E_ROUNDS];
    uint64_t r0 = nic_regs(), per_sent = 0, once_sent = 0;
    for (int r = 0; r < E2E_ROUNDS; r++) {   /* the order swapped in turn */
        if (r % 2)
            reg_once[r] = e2e_round(buf, once, len, wire, &m, &once_sent);
        per[r] = e2e_round(buf, NULL, len, wire, &m, &per_sent);
        if (!(r % 2))
            reg_once[r] = e2e_round(buf, once, len, wire, &m, &once_sent);
    }
    check_nic(r0, per_sent, "end-to-end loop");
    /* The ratio of each round to its neighbour of the other way, before the medians sort them. */
    double pair[E2E_ROUNDS];
    for (int r = 0; r < E2E_ROUNDS; r++)
        pair[r] = per[r] / reg_once[r];
    char k[64];
    snprintf(k, sizeof(k), "%s_vs_once", key);
    put(k, median(pair, E2E_ROUNDS));
    put(key, median(per, E2E_ROUNDS));
    snprintf(k, sizeof(k), "%s_once", key);
    put(k, median(reg_once, E2E_ROUNDS));
    snprintf(k, sizeof(k), "%s_first", key);
    put(k, first);
    snprintf(k, sizeof(k), "%s_pin", key);
    put(k, (double)st.pinned_peak / (double)(E2E_BUFS * len));
    for (int i = 0; i < E2E_BUFS; i++) {
        sys_nic_dereg(once[i]);
        free(buf[i]);
    }
    free(wire);
}

/* ---- 9. allocation-sized registrations (MRCACHE_EXPAND) ---- */

/* The key's suffix: which libmrcache configuration the figure is of ("_x" with
 * MRCACHE_EXPAND on), so that one column can show both. */
static const char *expand_suffix(void)
{
    const char *e = getenv("MRCACHE_EXPAND");
    return sys_cached && e && strcmp(e, "off") && strcmp(e, "0") ? "_x" : "";
}

static void put_expand(const char *key, double v)
{
    char k[48];
    snprintf(k, sizeof(k), "%s%s", key, expand_suffix());
    put(k, v);
}

/* A program registering 4 KiB pieces of 4 MiB buffers, each piece once, in random order
 * across the buffers (a fixed seed), releasing each after use; every round's buffers are
 * fresh (mapped and written before the timing, unmapped after it). Throughput (pieces
 * per CPU second) and the share of pieces no NIC registration was made for. */
static void w_pieces(void)
{
    enum { NB = 8, R = 3 };
    const size_t blen = 4 * MIB, per = blen / SMALL, n = NB * per;
    unsigned *order = malloc(n * sizeof(*order));
    char *buf[NB];
    double v[R];
    uint64_t regs = 0;
    srand(11);
    for (int r = 0; r < R; r++) {
        for (int b = 0; b < NB; b++) {
            buf[b] = map(blen);
            memset(buf[b], r + 1, blen);
        }
        for (size_t i = 0; i < n; i++)
            order[i] = (unsigned)i;
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = (size_t)rand() % (i + 1);
            unsigned t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        uint64_t r0 = nic_regs(), c0 = cpu_ns();
        for (size_t i = 0; i < n; i++)
            sys_dereg(sys_reg(buf[order[i] / per] + (order[i] % per) * SMALL, SMALL));
        v[r] = (double)n * 1e9 / (double)(cpu_ns() - c0);
        regs += nic_regs() - r0;
        for (int b = 0; b < NB; b++)
            sys_unmap(buf[b], blen);
    }
    if (!sys_cached)
        check_nic(nic_regs() - regs, (uint64_t)R * n, "piecewise loop");
    free(order);
    put_expand("pieces", median(v, R));
    put_expand("pieces_hits", 100.0 * (1.0 - (double)regs / (double)(R * n)));
}

/* A program that mallocs a fresh 64 KiB message buffer for every message, registers it,
 * and frees it with its registration once 64 later messages are under way (messages in
 * flight). Messages per CPU second and the share served without a NIC registration. */
static void w_fresh(void)
{
    enum { INFLIGHT = 64, N = 16384 };
    void *mem[INFLIGHT] = { 0 }, *h[INFLIGHT] = { 0 };
    uint64_t r0 = nic_regs(), c0 = cpu_ns();
    for (unsigned i = 0; i < N; i++) {
        unsigned k = i % INFLIGHT;
        if (mem[k]) {
            sys_dereg(h[k]);
            free(mem[k]);
        }
        mem[k] = malloc(HOT_LEN);
        if (!mem[k])
            die("malloc");
        memset(mem[k], (int)i, 256);   /* the message's header */
        h[k] = sys_reg(mem[k], HOT_LEN);
    }
    double rate = (double)N * 1e9 / (double)(cpu_ns() - c0);
    uint64_t regs = nic_regs() - r0;
    if (!sys_cached)
        check_nic(r0, N, "fresh-buffer loop");
    for (unsigned k = 0; k < INFLIGHT; k++) {
        sys_dereg(h[k]);
        free(mem[k]);
    }
    put_expand("fresh", rate);
    put_expand("fresh_hits", 100.0 * (1.0 - (double)regs / N));
}

/* ---- 10. large registrations: huge pages and cold memory ---- */

#if !BENCH_UCX
#include "backend/pagescan.h"
#include "mrc_counter.h"

/* One registration of mib MiB on a 2 MiB boundary, populated by the program first (the
 * first touch timed with it) or cold: its wall time whole (touch + registration), the
 * registration call, the pin alone (the call less what libmrcache did to the memory
 * first) and the NIC's translation entries after it. Wall time: the parallel fault-in
 * runs on other threads. The variant (libmrcache's settings, or 4k without it) names
 * the figures. */
static void w_regbig(size_t mib, int cold)
{
    const char *variant = sys_cached ? getenv("BENCH_VARIANT") : "4k";
    if (!variant)
        variant = "default";
    size_t len = mib * MIB;
    char *raw = mmap(NULL, len + 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        die("mmap");
    char *p = (char *)(((uintptr_t)raw + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
    long long prep0 = 0, prep1 = 0;
    if (sys_cached)
        (void)mrc_counter_read("prepare_ns", &prep0);
    uint64_t t0 = now_ns();
    if (!cold)
        memset(p, 1, len);
    uint64_t t1 = now_ns();
    struct ibv_mr *mr = ibv_reg_mr(sys_pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    uint64_t t2 = now_ns();
    if (!mr) {
        fprintf(stderr, "bench: regbig %zu MiB: ibv_reg_mr: %s (RLIMIT_MEMLOCK?); no figures\n", mib, strerror(errno));
        return;
    }
    double prep = sys_cached && mrc_counter_read("prepare_ns", &prep1) == 0 ? (double)(prep1 - prep0) : 0;
    struct mrc_page_mix m;
    double entries = mrc_pagescan_mix((uintptr_t)p, (uintptr_t)p + len, &m) == 0 ? (double)m.entries : NAN;
    char key[64];
    const char *state = cold ? "cold" : "warm";
    snprintf(key, sizeof(key), "big%zu_%s_%s_total", mib, state, variant);
    put(key, (double)(t2 - t0) / 1e6);
    snprintf(key, sizeof(key), "big%zu_%s_%s_reg", mib, state, variant);
    put(key, (double)(t2 - t1) / 1e6);
    snprintf(key, sizeof(key), "big%zu_%s_%s_pin", mib, state, variant);
    put(key, ((double)(t2 - t1) - prep) / 1e6);
    snprintf(key, sizeof(key), "big%zu_%s_%s_ent", mib, state, variant);
    put(key, entries);
    ibv_dereg_mr(mr);
    mrcache_flush(NULL, 0);   /* the pinned pages go now, not at exit */
    munmap(raw, len + 2 * MIB);
}
#endif

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SYSTEM WORKLOAD\n  SYSTEM: nocache|mrcache (verbs binary), ucx\n"
                        "  WORKLOAD: hit threads msg1m msg16m tax-malloc tax-munmap unmap miss miss-scattered memory\n"
                        "            e2e-KIB (end to end, messages of KIB KiB) pieces fresh\n"
                        "            regbig (verbs binary; BENCH_BIG_MIB=N BENCH_BIG_STATE=warm|cold)\n",
                argv[0]);
        return 2;
    }
    const char *w = argv[2];
    /* The programs that never register never touch the NIC either. */
    if (!strcmp(w, "tax-malloc"))
        w_tax_malloc();
    else if (!strcmp(w, "tax-munmap"))
        w_tax_munmap();
    else {
        sys_init();
        int want = strcmp(argv[1], "nocache") != 0;
        if (want != sys_cached) {
            fprintf(stderr, "bench: system %s, but the %s binary %s a cache (LD_PRELOAD?)\n", argv[1],
                    SYS_BINARY, sys_cached ? "has" : "lacks");
            return 1;
        }
        if (!strcmp(w, "hit"))
            w_hit();
        else if (!strcmp(w, "threads"))
            w_threads();
        else if (!strcmp(w, "msg1m"))
            w_permsg(1 * MIB, "msg_1m");
        else if (!strcmp(w, "msg16m"))
            w_permsg(16 * MIB, "msg_16m");
        else if (!strcmp(w, "unmap"))
            w_unmap();
        else if (!strcmp(w, "miss"))
            w_miss(1, "miss");
        else if (!strcmp(w, "miss-scattered"))
            w_miss(389, "miss_sc");   /* odd, so a permutation of the batch: 3 MiB apart */
        else if (!strcmp(w, "memory"))
            w_memory();
        else if (!strncmp(w, "e2e-", 4) && strtoul(w + 4, NULL, 10))
            w_e2e(strtoul(w + 4, NULL, 10) * KIB, w);
        else if (!strcmp(w, "pieces"))
            w_pieces();
        else if (!strcmp(w, "fresh"))
            w_fresh();
#if !BENCH_UCX
        else if (!strcmp(w, "regbig") && getenv("BENCH_BIG_MIB") && getenv("BENCH_BIG_STATE"))
            w_regbig(strtoul(getenv("BENCH_BIG_MIB"), NULL, 10), !strcmp(getenv("BENCH_BIG_STATE"), "cold"));
#endif
        else {
            fprintf(stderr, "bench: unknown workload %s\n", w);
            return 2;
        }
    }
    return 0;
}
