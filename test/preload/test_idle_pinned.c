/* test_idle_pinned.c - released registrations the cache keeps pinned must not cost the
 * program: "limits" hold right after releases; "fork" copies no more than is in use;
 * "collapse" (MADV_COLLAPSE) works as without the cache. Run with and without the preload
 * (the reference). Usage: test_idle_pinned limits|fork|collapse
 * (limits under MRCACHE_MAX_ENTRIES=8 MRCACHE_MAX_BYTES=1M) */
#include <sys/wait.h>
#include <time.h>

#include "never.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

#define KIB 1024ull
#define MIB (1024ull * 1024)

/* ---- limits ---- */

#define LIMIT_ENTRIES 8
#define LIMIT_BYTES MIB
#define NBUF 64
#define BUF (64u << 10)

static struct snic_stats nic0;

static int within_limits(void)
{
    struct snic_stats n = never_nic();
    return n.pinned_bytes - nic0.pinned_bytes <= LIMIT_BYTES && n.live_mrs - nic0.live_mrs <= LIMIT_ENTRIES;
}

/* 64 buffers of 64 KiB (4 MiB, within a normal user's 8 MiB of RLIMIT_MEMLOCK; apart so
 * none merge) registered and held at once, then all released: the cache holds 64 idle
 * registrations over its limits of 8 and 1 MiB, and must come back within them without
 * another registration. */
static void test_limits_hold_after_releases(void)
{
    const char *e = getenv("MRCACHE_MAX_ENTRIES"), *b = getenv("MRCACHE_MAX_BYTES");
    if (never_preloaded() && (!e || strcmp(e, "8") || !b || strcmp(b, "1M"))) {
        check_skipf("run with MRCACHE_MAX_ENTRIES=8 MRCACHE_MAX_BYTES=1M");
        return;
    }
    char *p = map_anon(NULL, 2ull * NBUF * BUF, 0);
    struct ibv_mr *mr[NBUF];
    CHECK(p != NULL);
    if (!p)
        return;
    nic0 = never_nic();
    for (int i = 0; i < NBUF; i++) {
        mr[i] = ibv_reg_mr(pd, p + 2ull * i * BUF, BUF, IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr[i] != NULL);
    }
    for (int i = 0; i < NBUF; i++)
        if (mr[i])
            CHECK(ibv_dereg_mr(mr[i]) == 0);
    int ok = never_eventually(within_limits);
    struct snic_stats n = never_nic();
    CHECKF(ok, "after the releases, with no further call: %llu MRs, %llu KiB pinned (limits %d, %llu KiB)",
           (unsigned long long)(n.live_mrs - nic0.live_mrs),
           (unsigned long long)((n.pinned_bytes - nic0.pinned_bytes) / KIB), LIMIT_ENTRIES, LIMIT_BYTES / KIB);
    printf("# after releasing %d registrations of %u KiB: %llu MRs, %llu KiB pinned\n", NBUF, BUF >> 10,
           (unsigned long long)(n.live_mrs - nic0.live_mrs), (unsigned long long)((n.pinned_bytes - nic0.pinned_bytes) / KIB));
    munmap(p, 2ull * NBUF * BUF);
}

/* ---- fork ---- */

#define FORK_LEN (256ull * MIB)
#define FORK_PIECE (16ull * MIB)
#define FORK_SLACK (64ull * MIB)    /* what a cache may keep pinned over private memory at fork */

static double fork_ms;   /* how long the last fork() call took in the parent: printed only */

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The child's private pages right after fork (smaps_rollup Private_Dirty), in bytes:
 * pages shared copy-on-write with the parent are Shared_Dirty; pages the kernel copied
 * into the child at fork (pinned anonymous pages) are the child's own. -1 on failure. */
static long long fork_child_private(void)
{
    int fd[2];
    long long v = -1;
    if (pipe(fd) != 0)
        return -1;
    fflush(stdout);
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid > 0)
        fork_ms = now_ms() - t0;
    if (pid == 0) {
        long kib = check_proc_field("/proc/self/smaps_rollup", "Private_Dirty");
        ssize_t w = write(fd[1], &kib, sizeof(kib));
        _exit(w == (ssize_t)sizeof(kib) ? 0 : 1);
    }
    close(fd[1]);
    long kib;
    if (pid > 0 && read(fd[0], &kib, sizeof(kib)) == (ssize_t)sizeof(kib) && kib >= 0)
        v = (long long)kib * (long long)KIB;
    close(fd[0]);
    int st;
    if (pid > 0)
        waitpid(pid, &st, 0);
    return v;
}

static void register_pieces(char *p, struct ibv_mr **mr)
{
    for (unsigned i = 0; i < FORK_LEN / FORK_PIECE; i++) {
        mr[i] = ibv_reg_mr(pd, p + i * FORK_PIECE, FORK_PIECE, IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr[i] != NULL);
    }
}

/* 256 MiB of private memory registered in 16 MiB pieces. Held at fork, the kernel copies
 * the pinned pages into the child (measured here as the precondition); released, a fork
 * must copy no more than the program holds (0) plus FORK_SLACK, as without the cache. */
static void test_fork_copies_only_what_is_in_use(void)
{
    const char *short_by = check_memlock_short(FORK_LEN);
    if (short_by) {
        SKIP_TEST(short_by);
        return;
    }
    struct ibv_mr *mr[FORK_LEN / FORK_PIECE];
    char *p = map_anon(NULL, FORK_LEN, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 1, FORK_LEN);
    long long none = fork_child_private();
    double none_ms = fork_ms;
    register_pieces(p, mr);
    long long held = fork_child_private();
    double held_ms = fork_ms;
    for (unsigned i = 0; i < FORK_LEN / FORK_PIECE; i++)
        if (mr[i])
            CHECK(ibv_dereg_mr(mr[i]) == 0);
    long long released = fork_child_private();
    double released_ms = fork_ms;
    long long again = fork_child_private();
    const char *who = never_preloaded() ? "libmrcache" : "no cache";
    printf("# fork child's private memory: %.1f MiB before any registration, %.1f MiB with 256 MiB "
           "registered and held, %.1f MiB after releasing it, %.1f MiB at the next fork (%s)\n",
           (double)none / MIB, (double)held / MIB, (double)released / MIB, (double)again / MIB, who);
    printf("# fork() took %.2f ms before any registration, %.2f ms held, %.2f ms after releasing, "
           "%.2f ms at the next fork (%s)\n", none_ms, held_ms, released_ms, fork_ms, who);
    CHECK(none >= 0 && held >= 0 && released >= 0 && again >= 0);
    if (held < none + (long long)(FORK_LEN / 2)) {
        check_skipf("the kernel did not copy pinned pages into the child (%lld MiB held, %lld MiB copied)",
                   (long long)(FORK_LEN / MIB), (held - none) / (long long)MIB);
    } else {
        CHECKF(released <= none + (long long)FORK_SLACK && again <= none + (long long)FORK_SLACK,
               "after releasing every registration a fork copied %lld MiB, the next %lld MiB (%lld MiB with "
               "nothing registered)", released / (long long)MIB, again / (long long)MIB, none / (long long)MIB);
    }
    /* The memory stays the program's and the NIC's writes land in it. */
    struct ibv_mr *m = ibv_reg_mr(pd, p, FORK_PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && write_visible(m, p, FORK_PIECE, 9));
    if (m)
        ibv_dereg_mr(m);
    munmap(p, FORK_LEN);
}

/* ---- collapse ---- */

#define HUGE (2ull * MIB)

static int thp_possible(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = "";
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = 0;
        fclose(f);
    }
    return line[0] && !strstr(line, "[never]");
}

/* A 2 MiB-aligned region made of base pages (faulted in while MADV_NOHUGEPAGE), then
 * eligible for huge pages again. */
static char *base_page_region(char **map)
{
    char *m = map_anon(NULL, 2 * HUGE, 0);
    *map = m;
    if (!m)
        return NULL;
    char *p = (char *)(((uintptr_t)m + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    if (madvise(p, HUGE, MADV_NOHUGEPAGE) != 0)
        return NULL;
    memset(p, 7, HUGE);
    if (madvise(p, HUGE, MADV_HUGEPAGE) != 0)
        return NULL;
    return p;
}

static int collapse(char *p, int *err)
{
    errno = 0;
    int rc = madvise(p, HUGE, MADV_COLLAPSE);
    *err = rc ? errno : 0;
    return rc;
}

/* MADV_COLLAPSE of memory the program registered and released succeeds as it does
 * without the cache. Controls: memory never registered (collapses here, or SKIP) and
 * memory still registered (the pinned pages refuse: measured, printed). */
static void test_collapse_after_release(void)
{
    if (!thp_possible()) {
        check_skipf("transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled)");
        return;
    }
    char *m0, *m1, *m2;
    char *control = base_page_region(&m0);
    int err;
    CHECK(control != NULL);
    if (!control)
        return;
    if (collapse(control, &err) != 0) {
        check_skipf("MADV_COLLAPSE fails here on memory never registered (%s)", strerror(err));
        munmap(m0, 2 * HUGE);
        return;
    }
    /* Held: the program's own registration; the same with and without the cache. */
    char *held = base_page_region(&m1);
    struct ibv_mr *h = held ? ibv_reg_mr(pd, held, HUGE, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(h != NULL);
    int held_rc = held ? collapse(held, &err) : -1;
    printf("# MADV_COLLAPSE on 2 MiB registered and in use: %s\n", held_rc ? strerror(err) : "0 (collapsed)");
    if (h)
        ibv_dereg_mr(h);
    /* Released. */
    char *p = base_page_region(&m2);
    struct ibv_mr *r = p ? ibv_reg_mr(pd, p, HUGE, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(r && write_visible(r, p, HUGE, 0x5a));
    CHECK(r && ibv_dereg_mr(r) == 0);
    int rc = p ? collapse(p, &err) : -1;
    printf("# MADV_COLLAPSE on 2 MiB registered and released: %s (%s)\n", rc ? strerror(err) : "0 (collapsed)",
           never_preloaded() ? "libmrcache" : "no cache");
    CHECKF(rc == 0, "MADV_COLLAPSE of released memory: %s (0 without the cache)", strerror(err));
    for (size_t i = 0; p && i < HUGE; i += 4096)
        if (p[i] != 0x5a) {
            CHECKF(0, "data changed at offset %zu", i);
            break;
        }
    munmap(m0, 2 * HUGE);
    munmap(m1, 2 * HUGE);
    munmap(m2, 2 * HUGE);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    open_nic();
    never_resolve_injector();   /* the software NIC: its counters are the measure */
    if (!strcmp(mode, "limits"))
        RUN(test_limits_hold_after_releases);
    else if (!strcmp(mode, "fork"))
        RUN(test_fork_copies_only_what_is_in_use);
    else if (!strcmp(mode, "collapse"))
        RUN(test_collapse_after_release);
    else {
        fprintf(stderr, "usage: test_idle_pinned limits|fork|collapse\n");
        return 2;
    }
    CHECK_EXIT();
}
