/* test_verify.c - MRCACHE_VERIFY under the preload, on the software NIC (whose DMA goes to
 * the pinned pages, so a stale MR shows as missing data). Which tests run follows the
 * environment the runner sets:
 *   MRCACHE_MONITOR=none, MRCACHE_VERIFY=1: no unmap is seen, so only verification stands
 *     between the program and a stale MR; each remapping must be caught (verify_stale,
 *     one error naming the range) and the write must land in the new mapping.
 *   ... with MRCACHE_VERIFY=0 and EXPECT_STALE=1: the same writes must land in the old
 *     pages (the tests can fail, the effect is real).
 *   default monitor, MRCACHE_VERIFY=N: hits are checked (N=1: all, else one in N per
 *     thread) and never found stale, also when entry objects are reused, by threads at
 *     once, and in a forked child; an unmap by raw system call is caught (N=1).
 *   VERIFY_UNPRIV=1 (run without CAP_SYS_ADMIN): nothing is checked or counted, and
 *     registrations work; the shell wrapper checks the message is said once.
 * With verification on but page frame numbers hidden (no CAP_SYS_ADMIN), each test says
 * SKIP with that reason; `test_verify frames` tells the wrapper which case it is in. */
#include <sys/syscall.h>
#include <sys/wait.h>

#include "stale.h"

static uint64_t period;
static long pg;

static struct mrcache_stats stats_now(void)
{
    struct mrcache_stats s;
    memset(&s, 0, sizeof(s));
    if (mrcache_stats_read(sizeof(s), &s) != 0) {
        fprintf(stderr, "mrcache_stats_read failed: is libmrcache preloaded?\n");
        exit(2);
    }
    return s;
}

/* stderr into a file while fn runs; what was written, NUL-terminated, in buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t size)
{
    char path[] = "/tmp/mrc_verify_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    buf[0] = 0;
    if (fd < 0 || saved < 0) {
        fn(arg);
        return;
    }
    unlink(path);
    dup2(fd, 2);
    fn(arg);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, buf, size - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
}

struct remap {
    char *p;
    size_t len, moved_off, moved_len;   /* the part mapped anew */
    int touch;                          /* fault the new pages in before registering */
    struct ibv_mr *mr;
};

static void register_again(void *arg)
{
    struct remap *r = arg;
    r->mr = ibv_reg_mr(pd, r->p, r->len, IBV_ACCESS_LOCAL_WRITE);
}

/* Register, deregister (cached), map [moved_off, +moved_len) anew at the same address,
 * register again, write through the new MR. Under MRCACHE_MONITOR=none the cache never
 * hears of the unmap: verification must catch it, or the write lands in the old pages. */
static void stale_case(size_t len, size_t moved_off, size_t moved_len, int touch)
{
    new_pd();
    struct remap r = { .len = len, .moved_off = moved_off, .moved_len = moved_len, .touch = touch };
    r.p = map_anon(NULL, len, 0);
    CHECK(r.p != NULL);
    if (!r.p)
        return;
    struct ibv_mr *a = ibv_reg_mr(pd, r.p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, r.p, len, 0x11));
    if (!a)
        return;
    CHECK(ibv_dereg_mr(a) == 0);
    struct mrcache_stats s0 = stats_now();

    char *q = r.p + moved_off;
    CHECK(munmap(q, moved_len) == 0);
    CHECK(map_anon(q, moved_len, MAP_FIXED_NOREPLACE) == q);
    if (touch)
        memset(q, 0x5a, moved_len);
    char log[4096];
    capture_stderr(register_again, &r, log, sizeof(log));
    struct mrcache_stats s1 = stats_now();
    CHECK(r.mr != NULL);
    if (!r.mr)
        return;
    int visible = write_visible(r.mr, r.p, len, 0x22);
    if (expect_stale) {
        CHECKF(!visible, "the write should have landed in the old pages");
        CHECK(s1.verify_stale == s0.verify_stale);
        CHECK(s1.hits == s0.hits + 1);
    } else {
        CHECKF(visible, "stale MR handed out: the write landed in the old pages");
        CHECKF(s1.verify_stale == s0.verify_stale + 1, "verify_stale %llu -> %llu",
               (unsigned long long)s0.verify_stale, (unsigned long long)s1.verify_stale);
        CHECK(s1.verify_checks == s0.verify_checks + 1);
        CHECK(s1.invalidations_by_cause[MRCACHE_INVAL_API] > s0.invalidations_by_cause[MRCACHE_INVAL_API]);
        CHECK(s1.real_regs == s0.real_regs + 1);
        /* One error, naming a range that covers the registration. */
        unsigned long long lo = 0, hi = 0;
        const char *m = strstr(log, "MRCACHE_VERIFY: stale registration [");
        CHECKF(m && sscanf(m, "MRCACHE_VERIFY: stale registration [%llx, %llx)", &lo, &hi) == 2 &&
                   lo <= (uintptr_t)r.p && (uintptr_t)r.p + len <= hi,
               "log: %s", log);
        CHECKF(m && !strstr(m + 1, "MRCACHE_VERIFY: stale"), "more than one report: %s", log);
    }
    CHECK(ibv_dereg_mr(r.mr) == 0);
    /* Left mapped: a later mmap must not reuse the address while a stale entry may
     * cover it (nothing invalidates under MRCACHE_MONITOR=none). */
}

static void test_stale_remap_untouched(void)
{
    stale_case(16 * pg, 0, 16 * pg, 0);     /* the new pages are not even present */
}

static void test_stale_remap_touched(void)
{
    stale_case(16 * pg, 0, 16 * pg, 1);     /* present, other frames */
}

static void test_stale_one_page_in_the_middle(void)
{
    stale_case(64 * pg, 37 * pg, pg, 1);
}

static void test_stale_large_sampled(void)
{
    stale_case(1024 * pg, 0, 1024 * pg, 1); /* past the full-record size: windows */
}

/* One page remapped at the end of a large registration: the windows are checked one per
 * hit, in turn, so it is caught within 8 hits (REC_WINDOWS in verify.c), after which the
 * MR is right; never, without verification. */
static void test_stale_large_partial_caught_in_turn(void)
{
    new_pd();
    size_t len = 1024 * pg;
    char *p = map_anon(NULL, len, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 1, len);
    struct ibv_mr *m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    char *q = p + len - pg;
    CHECK(munmap(q, pg) == 0 && map_anon(q, pg, MAP_FIXED_NOREPLACE) == q);
    memset(q, 2, pg);
    struct mrcache_stats s0 = stats_now();
    int hits = 0;
    for (; hits < 8; hits++) {
        m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && ibv_dereg_mr(m) == 0);
        if (stats_now().verify_stale != s0.verify_stale)
            break;
    }
    m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m != NULL);
    int visible = m && write_visible(m, p, len, 0x55);
    struct mrcache_stats s1 = stats_now();
    if (expect_stale) {
        CHECK(!visible && s1.verify_stale == s0.verify_stale);
    } else {
        CHECKF(hits < 8 && s1.verify_stale == s0.verify_stale + 1, "caught after %d hits", hits);
        CHECK(visible);
    }
    if (m)
        ibv_dereg_mr(m);
}

/* Registers [p, p+len) n times, deregistering each: n-1 hits. */
static void reg_loop(void *p, size_t len, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_mr *m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m != NULL);
        if (!m)
            return;
        CHECK(ibv_dereg_mr(m) == 0);
    }
}

static void test_hits_checked_never_stale(void)
{
    new_pd();
    static const size_t sizes[] = { 4096, 16 << 10, 1 << 20, 8 << 20 };
    struct mrcache_stats s0 = stats_now();
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char *p = map_anon(NULL, sizes[i], 0);
        CHECK(p != NULL);
        if (!p)
            return;
        memset(p, 1, sizes[i]);
        reg_loop(p, sizes[i], 200);
        struct ibv_mr *m = ibv_reg_mr(pd, p, sizes[i], IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && write_visible(m, p, sizes[i], 7));
        if (m)
            ibv_dereg_mr(m);
        munmap(p, sizes[i]);
    }
    struct mrcache_stats s1 = stats_now();
    uint64_t hits = s1.hits - s0.hits;
    CHECKF(hits == 4 * 200, "hits %llu", (unsigned long long)hits);
    CHECKF(s1.verify_stale == s0.verify_stale, "%llu false positives",
           (unsigned long long)(s1.verify_stale - s0.verify_stale));
    /* Every hit of a whole registration meets recorded pages: all are checked at N=1. */
    if (period == 1)
        CHECKF(s1.verify_checks - s0.verify_checks == hits, "checks %llu, hits %llu",
               (unsigned long long)(s1.verify_checks - s0.verify_checks), (unsigned long long)hits);
}

/* Sub-ranges of a merged and of a large registration: hits, never stale. */
static void test_subrange_and_merged_hits(void)
{
    new_pd();
    size_t len = 4 << 20;
    char *p = map_anon(NULL, len, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 1, len);
    struct mrcache_stats s0 = stats_now();
    struct ibv_mr *a = ibv_reg_mr(pd, p, 64 * pg, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *b = ibv_reg_mr(pd, p + 64 * pg, 64 * pg, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *all = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);   /* merges a, b */
    CHECK(a && b && all);
    for (size_t off = 0; off + 3 * pg <= len; off += 61 * pg)
        reg_loop(p + off + 100, 3 * pg - 200, 3);
    CHECK(all && write_visible(all, p, len, 3));
    if (a)
        ibv_dereg_mr(a);
    if (b)
        ibv_dereg_mr(b);
    if (all)
        ibv_dereg_mr(all);
    struct mrcache_stats s1 = stats_now();
    CHECK(s1.hits - s0.hits >= 3 * (len / (61 * pg)));
    if (period == 1)             /* some sub-ranges meet recorded windows (at 0, for one) */
        CHECK(s1.verify_checks > s0.verify_checks);
    CHECK(s1.verify_stale == s0.verify_stale);
    munmap(p, len);
}

/* With the monitor on, an unmap invalidates and the next registration is a miss that
 * very likely reuses the freed entry object for the same range: its record must be
 * renewed, not compared (that would be a false positive). */
static void test_reused_entry_no_false_positive(void)
{
    new_pd();
    size_t len = 16 * pg;
    struct mrcache_stats s0 = stats_now();
    for (int i = 0; i < 50; i++) {
        char *p = map_anon(NULL, len, 0);
        CHECK(p != NULL);
        if (!p)
            return;
        memset(p, i, len);
        reg_loop(p, len, 3);
        struct ibv_mr *m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && write_visible(m, p, len, (unsigned char)(i + 1)));
        if (m)
            ibv_dereg_mr(m);
        munmap(p, len);          /* the monitor invalidates; the next map_anon reuses p */
    }
    struct mrcache_stats s1 = stats_now();
    CHECKF(s1.verify_stale == s0.verify_stale, "%llu false positives",
           (unsigned long long)(s1.verify_stale - s0.verify_stale));
    CHECK(s1.verify_checks > s0.verify_checks);
    CHECK(s1.misses - s0.misses >= 50);
}

#define THREADS 4
#define THREAD_HITS 1000

static void *hit_thread(void *arg)
{
    (void)arg;
    /* Pages 2-5 of 8: the threads' registrations are never adjacent, so none merges
     * with another's (a merge would make a hit a miss). */
    char *p = map_anon(NULL, 8 * pg, 0);
    if (!p)
        return (void *)1;
    memset(p, 1, 8 * pg);
    reg_loop(p + 2 * pg, 4 * pg, THREAD_HITS + 1);
    munmap(p, 8 * pg);
    return NULL;
}

/* One hit in N per thread is checked: about hits/N in all. */
static void test_sampled_one_in_n(void)
{
    new_pd();
    struct mrcache_stats s0 = stats_now();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, hit_thread, NULL);
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    CHECK(bad == 0);
    struct mrcache_stats s1 = stats_now();
    uint64_t hits = s1.hits - s0.hits, checks = s1.verify_checks - s0.verify_checks;
    uint64_t want = hits / period;
    /* Nearly all hits (a miss now and then is the cache's business: a registration racing
     * with another thread's invalidation is not cached). */
    CHECKF(hits >= THREADS * (THREAD_HITS - 10), "hits %llu", (unsigned long long)hits);
    /* Each thread checks its first hit, then every N-th: ceil(hits/N) per thread. */
    CHECKF(checks >= want && checks <= want + THREADS, "checks %llu for %llu hits at 1 in %llu",
           (unsigned long long)checks, (unsigned long long)hits, (unsigned long long)period);
    CHECK(s1.verify_stale == s0.verify_stale);
}

static char *shared_buf;

static void *shared_thread(void *arg)
{
    (void)arg;
    reg_loop(shared_buf, 32 * pg, THREAD_HITS);
    return NULL;
}

/* Threads hitting one registration at once: records and checks of one entry race, and
 * must never see staleness. */
static void test_threads_share_one_registration(void)
{
    new_pd();
    shared_buf = map_anon(NULL, 32 * pg, 0);
    CHECK(shared_buf != NULL);
    if (!shared_buf)
        return;
    memset(shared_buf, 1, 32 * pg);
    struct mrcache_stats s0 = stats_now();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, shared_thread, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct mrcache_stats s1 = stats_now();
    CHECK(s1.hits - s0.hits >= THREADS * (THREAD_HITS - 1));
    CHECK(s1.verify_checks - s0.verify_checks >= (s1.hits - s0.hits) / period - THREADS);
    CHECK(s1.verify_stale == s0.verify_stale);
    munmap(shared_buf, 32 * pg);
}

/* An unmap made with a raw system call, which the preload and patch monitors cannot see:
 * what verification is for. Returns 0 if the re-registration's write is visible and
 * verification caught it (or a monitor did: the userfaultfd source sees raw calls);
 * else a bit per failure. */
static int raw_remap_case(struct ibv_pd *p_d)
{
    size_t len = 16 * pg;
    char *p = map_anon(NULL, len, 0);
    if (!p)
        return 1;
    memset(p, 1, len);
    struct ibv_mr *m = ibv_reg_mr(p_d, p, len, IBV_ACCESS_LOCAL_WRITE);
    if (!m || ibv_dereg_mr(m))
        return 1;
    struct mrcache_stats s0 = stats_now();
    if (RAW_SYSCALL(SYS_munmap, p, len) ||
        RAW_SYSCALL(SYS_mmap, p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) !=
            (long)p)
        return 2;
    memset(p, 2, len);
    m = ibv_reg_mr(p_d, p, len, IBV_ACCESS_LOCAL_WRITE);
    struct mrcache_stats s1 = stats_now();
    int bad = !m ? 4 : !write_visible(m, p, len, 0x44) ? 8 : 0;
    if (s1.verify_stale != s0.verify_stale + 1 && s1.invalidations == s0.invalidations)
        bad |= 16;
    if (m)
        ibv_dereg_mr(m);
    munmap(p, len);
    return bad;
}

static void test_raw_syscall_remap_caught(void)
{
    new_pd();
    int bad = raw_remap_case(pd);
    CHECKF(bad == 0, "failures 0x%x", bad);
}

/* A forked child reads its own pagemap, not the inherited file (which shows the
 * parent's page tables: every check would pass), and keeps a table of its own: it
 * catches a raw remapping, and its ordinary hits are checked and never stale. */
static void test_forked_child_verifies_its_own(void)
{
    char *p = map_anon(NULL, 16 * pg, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 1, 16 * pg);
    reg_loop(p, 16 * pg, 3);     /* cached in the parent; the child forgets it */
    pid_t pid = fork();
    if (pid == 0) {
        struct ibv_device **list = ibv_get_device_list(NULL);
        struct ibv_context *cc = list && list[0] ? ibv_open_device(list[0]) : NULL;
        struct ibv_pd *cpd = cc ? ibv_alloc_pd(cc) : NULL;
        if (!cpd)
            _exit(3);
        memset(p, 2, 16 * pg);   /* the child's own copies of the pages */
        struct mrcache_stats c0 = stats_now();
        int bad = 0;
        for (int i = 0; i < 20 && !bad; i++) {
            struct ibv_mr *m = ibv_reg_mr(cpd, p, 16 * pg, IBV_ACCESS_LOCAL_WRITE);
            bad = !m || !write_visible(m, p, 16 * pg, (unsigned char)i) || ibv_dereg_mr(m);
        }
        struct mrcache_stats c1 = stats_now();
        if (c1.verify_stale != c0.verify_stale)
            bad |= 4;
        if (c1.verify_checks - c0.verify_checks < 19 / period)
            bad |= 8;
        if (period == 1)
            bad |= raw_remap_case(cpd) << 4;
        _exit(bad);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
    munmap(p, 16 * pg);
}

/* Without the privilege: nothing checked, nothing counted, registrations still right. */
static void test_unprivileged_off(void)
{
    new_pd();
    char *p = map_anon(NULL, 16 * pg, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct mrcache_stats s0 = stats_now();
    for (int i = 0; i < 100; i++) {
        struct ibv_mr *m = ibv_reg_mr(pd, p, 16 * pg, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && write_visible(m, p, 16 * pg, (unsigned char)i));
        if (m)
            ibv_dereg_mr(m);
    }
    munmap(p, 16 * pg);         /* the monitor still invalidates */
    CHECK(map_anon(p, 16 * pg, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *m = ibv_reg_mr(pd, p, 16 * pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && write_visible(m, p, 16 * pg, 0x33));
    if (m)
        ibv_dereg_mr(m);
    struct mrcache_stats s1 = stats_now();
    CHECK(s1.hits - s0.hits == 99);
    CHECK(s1.verify_checks == 0 && s1.verify_stale == 0);
    munmap(p, 16 * pg);
}

/* The tests that need verification on: without frame numbers, a SKIP with the reason
 * (the EXPECT_STALE run needs none: verification is off there by choice). */
static const char *frames_why;
#undef RUN
#define RUN(fn) (frames_why ? check_skip(#fn, frames_why) : check_run(#fn, fn))

int main(int argc, char **argv)
{
    const char *v = getenv("MRCACHE_VERIFY"), *mon = getenv("MRCACHE_MONITOR");
    /* "frames": exit status 0 if this process can read page frame numbers (for
     * test_verify.sh, which picks its cases by it). */
    if (argc > 1 && !strcmp(argv[1], "frames"))
        return pagemap_shows_frames() ? 0 : 1;
    period = v ? strtoull(v, NULL, 10) : 0;
    expect_stale = getenv("EXPECT_STALE") != NULL;
    pg = sysconf(_SC_PAGESIZE);
    open_nic();
    if (nic.real) {
        check_skip("test_verify", "the software NIC's DMA shows stale pages; rxe runs test_unmap_paths");
        return 0;
    }
    if (getenv("VERIFY_UNPRIV")) {
        if (pagemap_shows_frames()) {
            fprintf(stderr, "VERIFY_UNPRIV=1: run without CAP_SYS_ADMIN\n");
            return 2;
        }
        check_run("test_unprivileged_off", test_unprivileged_off);
        CHECK_EXIT();
    }
    int none = mon && !strcmp(mon, "none");
    if (none ? period > 1 || expect_stale != (period == 0) : period == 0 || expect_stale) {
        fprintf(stderr, "run with MRCACHE_MONITOR=none and MRCACHE_VERIFY=1 (or =0 and EXPECT_STALE=1), "
                        "or with a monitor and MRCACHE_VERIFY=N\n");
        return 2;
    }
    if (period && !pagemap_shows_frames())
        frames_why = FRAMES_HIDDEN_WHY;
    if (none) {
        RUN(test_stale_remap_untouched);
        RUN(test_stale_remap_touched);
        RUN(test_stale_one_page_in_the_middle);
        RUN(test_stale_large_sampled);
        RUN(test_stale_large_partial_caught_in_turn);
        CHECK_EXIT();
    }
    RUN(test_hits_checked_never_stale);
    RUN(test_subrange_and_merged_hits);
    RUN(test_reused_entry_no_false_positive);
    RUN(test_sampled_one_in_n);
    RUN(test_threads_share_one_registration);
    if (period == 1)
        RUN(test_raw_syscall_remap_caught);
    else
        check_skip("test_raw_syscall_remap_caught", "needs every hit checked (MRCACHE_VERIFY=1)");
    RUN(test_forked_child_verifies_its_own);
    CHECK_EXIT();
}
