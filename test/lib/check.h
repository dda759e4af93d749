/* check.h - the one test helper: CHECK records a failed condition, RUN runs a test
 * function and prints "ok - name", "not ok - name" or "ok - name # SKIP why"
 * (scripts/run-tests.sh counts these lines). A test binary's exit status is 1 if any test failed.
 * Every failed CHECK is reported once: in its test's line, or, made outside a test (in
 * main's set-up, between tests, after the last one, at exit), in a "not ok" line of its
 * own. Also what a test needs of the machine (a capability, room under RLIMIT_MEMLOCK),
 * for its reason to skip. Header-only. */
#ifndef MRC_TEST_CHECK_H
#define MRC_TEST_CHECK_H

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* A function the compiler must neither inline nor reason about across the call (a frame
 * a call-site test must see, an address a stale-memory test reads on purpose): GCC's
 * noipa; clang has no noipa, and noinline with optnone keeps the same promise. */
#if defined(__clang__)
#define CHECK_NOIPA __attribute__((noinline, optnone))
#else
#define CHECK_NOIPA __attribute__((noipa))
#endif

/* Before a loop whose call must stay one call instruction (one return address: one call
 * stack for a call-site test), not copies made by unrolling. */
#if defined(__clang__)
#define CHECK_NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define CHECK_NO_UNROLL _Pragma("GCC unroll 1")
#endif

static int check_failures;      /* failed CHECKs not reported yet: the running test's */
static int check_tests_failed;  /* tests with at least one failed CHECK */
static const char *check_skip_why;  /* set by SKIP_TEST in the running test */
static const char *check_last_test; /* the last test reported, to place a failure outside one */
/* Run inside each test after its body (a fixture's own checks of what the test left). */
static void (*check_after_test)(void);

/* Failed CHECKs since the last report, made outside any test: one "not ok" line that
 * says where (the CHECK lines on stderr say what). */
static inline void check_report_outside(void)
{
    if (!check_failures)
        return;
    fflush(stderr);
    check_tests_failed++;
    printf("not ok - outside_a_test: %d failed CHECK(s) %s%s\n", check_failures,
           check_last_test ? "after " : "before the first test", check_last_test ? check_last_test : "");
    fflush(stdout);
    check_failures = 0;
}

/* At exit, what nothing reported (a program that returns from main without CHECK_EXIT,
 * as after a SKIP, or a CHECK in an exit handler). */
static void check_exit_report(void)
{
    check_report_outside();
}

static inline void check_failed(void)
{
    static int armed;

    if (!check_failures++ && !armed) {
        armed = 1;
        atexit(check_exit_report);
    }
}

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            check_failed();                                                    \
        }                                                                      \
    } while (0)

/* CHECK with a formatted explanation, for values worth printing. */
#define CHECKF(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            check_failed();                                                    \
        }                                                                      \
    } while (0)

/* A running test whose precondition did not happen (an interleaving it waits for, a
 * resource): it reports SKIP with the reason instead of ok, unless a CHECK failed. */
#define SKIP_TEST(why) (check_skip_why = (why))

/* A user id no account has and no other process runs as, for a test that drops root:
 * pins are charged to the user, so another process of nobody's (another run of the
 * suite, say) would spend the test's RLIMIT_MEMLOCK. */
__attribute__((unused)) static unsigned check_private_uid(void)
{
    return 4000000u + (unsigned)getpid() % 1000000u;
}

/* order[0..n) = 0..n-1 in a random order fixed by seed (Fisher-Yates over rand_r). */
__attribute__((unused)) static void check_shuffle(unsigned *order, unsigned n, unsigned seed)
{
    for (unsigned i = 0; i < n; i++)
        order[i] = i;
    for (unsigned i = n ? n - 1 : 0; i > 0; i--) {
        unsigned j = (unsigned)rand_r(&seed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* SKIP_TEST with a formatted reason. */
static char check_skip_buf[256];
__attribute__((format(printf, 1, 2), unused)) static void check_skipf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(check_skip_buf, sizeof(check_skip_buf), fmt, ap);
    va_end(ap);
    check_skip_why = check_skip_buf;
}

/* The verdict of test name on the CHECKs since the last report (and its SKIP_TEST). */
static inline void check_report(const char *name)
{
    fflush(stderr);
    if (check_failures) {
        check_tests_failed++;
        printf("not ok - %s\n", name);
    } else if (check_skip_why) {
        printf("ok - %s # SKIP %s\n", name, check_skip_why);
    } else {
        printf("ok - %s\n", name);
    }
    fflush(stdout);
    check_failures = 0;
    check_skip_why = NULL;
    check_last_test = name;
}

/* Before a test: what failed outside one is reported first, never counted as its. */
static inline void check_begin(void)
{
    check_report_outside();
    check_skip_why = NULL;
}

static inline void check_run(const char *name, void (*fn)(void))
{
    check_begin();
    fn();
    if (check_after_test)
        check_after_test();
    check_report(name);
}

/* A test that cannot run here says so; it counts as skipped, never as passed. */
static inline void check_skip(const char *name, const char *why)
{
    printf("ok - %s # SKIP %s\n", name, why);
    fflush(stdout);
}

/* ---- what a test needs of the machine: a capability, room to pin memory ---- */

#define CHECK_CAP_IPC_LOCK 14   /* <linux/capability.h>: pins without RLIMIT_MEMLOCK */
#define CHECK_CAP_SYS_ADMIN 21  /* ... reads page frame numbers in /proc/PID/pagemap */

/* The value of field ("CapEff:", "VmPin:") in /proc/self/status, read as a number in
 * base, or -1 without it. No allocation: callable while a test lays out the heap. */
static inline long long check_status_field(const char *field, int base)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *p = strstr(buf, field);
    return p ? (long long)strtoull(p + strlen(field), NULL, base) : -1;
}

/* Whether capability cap is in this process's effective set (CapEff). */
static inline int check_has_cap(int cap)
{
    long long caps = check_status_field("CapEff:", 16);
    return caps > 0 && ((caps >> cap) & 1);
}

/* bytes as a reason says it: "40 MiB", "1029 MiB", "394.6 MiB", "64 KiB". */
static inline const char *check_size_str(char *buf, size_t len, unsigned long long bytes)
{
    static const char *const unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
    unsigned u = 0;
    while (u < 4 && bytes >= (1024ull << (10 * u)))
        u++;
    if (u > 0 && bytes % (1ull << (10 * u)) != 0 && bytes % (1ull << (10 * (u - 1))) == 0 &&
        bytes >> (10 * (u - 1)) < 10240)
        u--;   /* a whole number of the unit below rather than a rounded one */
    if (bytes % (1ull << (10 * u)) == 0)
        snprintf(buf, len, "%llu %s", bytes >> (10 * u), unit[u]);
    else
        snprintf(buf, len, "%.1f %s", (double)bytes / (double)(1ull << (10 * u)), unit[u]);
    return buf;
}

/* The number after "key:" on the last line of a /proc file that names it ("Hugepagesize"
 * in /proc/meminfo, "Private_Dirty" in /proc/self/smaps_rollup), or -1. */
static inline long check_proc_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, key, k) && line[k] == ':')
            v = strtol(line + k + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* The system's transparent huge page setting, the word in brackets of
 * /sys/kernel/mm/transparent_hugepage/enabled: "always", "madvise" or "never" (also
 * for a kernel without THP). */
static inline const char *check_thp_setting(void)
{
    static char word[16];
    char line[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    if (f) {
        if (!fgets(line, sizeof(line), f))
            line[0] = 0;
        fclose(f);
    }
    char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
    snprintf(word, sizeof(word), "%.*s", a && b ? (int)(b - a - 1) : 5, a && b ? a + 1 : "never");
    return word;
}

/* len bytes of fresh private anonymous memory starting on an align boundary (a power of
 * two), or NULL. */
static inline char *check_map_aligned(size_t len, size_t align)
{
    char *raw = mmap(NULL, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    munmap(p + len, (size_t)(raw + align - p));
    return p;
}

/* NULL if this process may pin bytes at once (CAP_IPC_LOCK, or an RLIMIT_MEMLOCK at
 * least that large); else the reason a test that pins that much skips, as "RLIMIT_MEMLOCK
 * is 8 MiB; this test pins 40 MiB (raise it with ulimit -l, or run as root)". The
 * software NIC charges pins to the user, as io_uring does, so what the user's other
 * processes pin counts too: a test should need well below the limit it checks. */
static inline const char *check_memlock_short(unsigned long long bytes)
{
    static char why[192];
    char lim[32], need[32];
    struct rlimit rl;
    if (check_has_cap(CHECK_CAP_IPC_LOCK) || getrlimit(RLIMIT_MEMLOCK, &rl) != 0 ||
        rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= bytes)
        return NULL;
    snprintf(why, sizeof(why), "RLIMIT_MEMLOCK is %s; this test pins %s (raise it with ulimit -l, or run as root)",
             check_size_str(lim, sizeof(lim), (unsigned long long)rl.rlim_cur),
             check_size_str(need, sizeof(need), bytes));
    return why;
}

#define RUN(fn) check_run(#fn, fn)
#define CHECK_EXIT()                                                           \
    do {                                                                       \
        check_report_outside();                                                \
        return check_tests_failed ? 1 : 0;                                     \
    } while (0)

#endif
