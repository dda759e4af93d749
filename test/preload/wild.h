/* wild.h - what the wild programs (test_wild_*.c) share: a run that can end in SKIP from
 * inside the test (the change it needs did not happen here: no huge pages, a mode the file
 * system lacks), the register / change / register-again steps of every test, the physical
 * frame behind an address, and huge pages reserved for the run and given back at its end.
 * Header-only, over stale.h. */
#ifndef MRC_WILD_H
#define MRC_WILD_H

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "stale.h"

/* Why the running test's change is a known limit in this run (no source of the run can
 * see it); empty while the test must pass. Failures before it was declared stay failures. */
static char wild_todo_why[256];
static int wild_todo_at;


/* A fact about the kernel a test measured, for the reader of the log (run-tests.sh counts
 * only "ok"/"not ok" lines). */
__attribute__((format(printf, 1, 2), unused)) static void wild_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("# ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

/* The run's limit for the check that follows: its failure is reported as "not ok - name
 * # TODO why" (counted apart, not as a failure), a pass as "ok - name # TODO why" (the
 * limit is gone). Declared only in the run where no source sees the change, right
 * before the check it excuses. */
__attribute__((format(printf, 1, 2), unused)) static void wild_todo(const char *fmt, ...)
{
    wild_todo_at = check_failures;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(wild_todo_why, sizeof(wild_todo_why), fmt, ap);
    va_end(ap);
}

/* Whether libmrcache is preloaded in this run (mrcache_monitors() answers). */
static inline int wild_preloaded(void)
{
    return mrcache_monitors() >= 0;
}

/* Whether this run caches registrations over shared memory (MRCACHE_SHARED=cache): then
 * a change another process, or no libc call, makes to it is a known limit. */
static inline int wild_shared_cached(void)
{
    const char *v = getenv("MRCACHE_SHARED");
    return wild_preloaded() && v && !strcmp(v, "cache");
}

/* check_run with a pd of its own (a stale entry of one test never serves another), a
 * SKIP the test can declare (a failed CHECK still fails it) and a TODO for the run's
 * known limit. */
static inline void wild_run(const char *name, void (*fn)(void))
{
    check_begin();
    new_pd();
    wild_todo_why[0] = 0;
    wild_todo_at = 0;
    fn();
    if (check_after_test)
        check_after_test();
    fflush(stderr);
    if (wild_todo_why[0] && !wild_todo_at && check_failures) {
        printf("not ok - %s # TODO %s\n", name, wild_todo_why);
    } else if (wild_todo_why[0] && !check_failures && !check_skip_why) {
        printf("ok - %s # TODO %s\n", name, wild_todo_why);
    } else {
        check_report(name);
        return;
    }
    fflush(stdout);
    check_failures = 0;
    check_last_test = name;
}
#define WILD_RUN(fn) wild_run(#fn, fn)

/* The first use of a buffer: registered, written through, deregistered. Under the
 * preload the MR stays cached, pinning these pages. Returns 1 if all of it worked. */
static inline int first_registration(void *p, size_t len)
{
    struct ibv_mr *a = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a != NULL);
    if (!a)
        return 0;
    int ok = write_visible(a, p, len, 0x11);
    CHECK(ok);
    CHECK(ibv_dereg_mr(a) == 0);
    return ok;
}

/* The same range registered again after its memory changed: the write through the new MR
 * must be in the pages mapped there now. */
static inline void registered_again(void *p, size_t len, const char *what)
{
    struct ibv_mr *b = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECKF(b != NULL, "%s: registering again: %s", what, strerror(errno));
    if (!b)
        return;
    check_outcome(write_visible(b, p, len, 0x22), what);
    CHECK(ibv_dereg_mr(b) == 0);
}

/* The physical frame mapped at p now (no fault is taken), or 0: not present, or frames
 * hidden (reading them needs CAP_SYS_ADMIN). */
static inline uint64_t page_frame(const void *p)
{
    uint64_t e = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long pg = sysconf(_SC_PAGESIZE);
    if (pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p / (uintptr_t)pg * sizeof(e))) != (ssize_t)sizeof(e))
        e = 0;
    close(fd);
    return (e >> 63) ? e & ((1ull << 55) - 1) : 0;
}

/* Whether the page at p differs from before_frame (0: frames hidden, then by its content:
 * first_registration left 0x11 there). Reads p, so it is mapped again. */
static inline int page_replaced(const char *p, uint64_t before_frame)
{
    unsigned char v = *(volatile const unsigned char *)p;
    uint64_t now = page_frame(p);
    if (before_frame && now)
        return now != before_frame;
    return v != 0x11;
}

/* Whether the file system under fd is tmpfs (no block device: memfd, /dev/shm, ...). */
static inline int fd_on_tmpfs(int fd)
{
    struct statfs s;
    return fstatfs(fd, &s) == 0 && s.f_type == 0x01021994;   /* TMPFS_MAGIC */
}

/* ---- huge pages: the pool's size is raised for the run, given back at its end ---- */

static long huge_old = -1, huge_set;   /* nr_hugepages before us, and what we wrote */
static pid_t huge_owner;               /* only the process that raised it lowers it */

static inline long read_long(const char *path)
{
    char buf[64] = { 0 };
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    return n > 0 ? strtol(buf, NULL, 10) : -1;
}

static inline int write_long(const char *path, long v)
{
    char buf[32];
    int fd = open(path, O_WRONLY | O_CLOEXEC), n = snprintf(buf, sizeof(buf), "%ld\n", v);
    if (fd < 0)
        return -errno;
    int rc = write(fd, buf, (size_t)n) == n ? 0 : -errno;
    close(fd);
    return rc;
}

/* The default huge page size in bytes (0 without hugetlb). */
static inline size_t huge_size(void)
{
    long kb = check_proc_field("/proc/meminfo", "Hugepagesize");
    return kb > 0 ? (size_t)kb << 10 : 0;
}

static inline void hugepages_give_back(void)
{
    if (huge_old < 0 || getpid() != huge_owner)
        return;
    /* Only our own raise is undone: a value someone else set meanwhile is theirs. */
    if (read_long("/proc/sys/vm/nr_hugepages") == huge_set)
        write_long("/proc/sys/vm/nr_hugepages", huge_old);
    huge_old = -1;
}

/* A run stopped by timeout(1) or ^C gives the pages back too, then dies of the signal. */
static inline void hugepages_on_signal(int sig)
{
    hugepages_give_back();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* At least n free default-size huge pages, raising vm.nr_hugepages if needed (given back
 * at exit). 0 and a reason in why otherwise. */
static inline int hugepages_reserve(long n, char *why, size_t whylen)
{
    if (!huge_size()) {
        snprintf(why, whylen, "no hugetlb support in this kernel");
        return 0;
    }
    long avail = check_proc_field("/proc/meminfo", "HugePages_Free") - check_proc_field("/proc/meminfo", "HugePages_Rsvd");
    if (avail >= n)
        return 1;
    long cur = read_long("/proc/sys/vm/nr_hugepages");
    if (cur < 0) {
        snprintf(why, whylen, "cannot read /proc/sys/vm/nr_hugepages");
        return 0;
    }
    int rc = write_long("/proc/sys/vm/nr_hugepages", cur + (n - avail));
    if (rc) {
        snprintf(why, whylen, "%ld huge pages free and /proc/sys/vm/nr_hugepages not writable: %s",
                 avail, strerror(-rc));
        return 0;
    }
    if (huge_old < 0) {
        huge_old = cur;
        huge_owner = getpid();
        atexit(hugepages_give_back);
        signal(SIGTERM, hugepages_on_signal);
        signal(SIGINT, hugepages_on_signal);
        signal(SIGHUP, hugepages_on_signal);
    }
    huge_set = read_long("/proc/sys/vm/nr_hugepages");
    /* On stdout, where the runner keeps it with the test's lines: the machine's setting
     * changed, for this run only. */
    printf("# vm.nr_hugepages raised from %ld to %ld for this test; set back at its end\n", cur, huge_set);
    fflush(stdout);
    avail = check_proc_field("/proc/meminfo", "HugePages_Free") - check_proc_field("/proc/meminfo", "HugePages_Rsvd");
    if (avail < n) {
        snprintf(why, whylen, "asked for %ld huge pages, the kernel found %ld (memory fragmented?)", n, avail);
        return 0;
    }
    return 1;
}

#endif
