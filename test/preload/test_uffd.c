/* test_uffd.c - the userfaultfd source (MRCACHE_MONITOR=uffd), seen from an unmodified
 * program on the software NIC: every raw system call that takes pages away from a
 * registered range (munmap, madvise, mremap, MAP_FIXED) followed by a new mapping at the
 * same address and a new registration must show the NIC's write in the current mapping,
 * and be counted as caught by the userfaultfd. With EXPECT_STALE=1 (run without the
 * source) the same writes must be lost: the tests can fail. Plus graceful degradation
 * (memory the program already watches with its own userfaultfd, file-backed memory, a
 * kernel that refuses userfaultfd), faults answered, fork, threads, exit, a page two
 * registrations share, and the descriptor moved out of the way of the program's close.
 * Usage: test_uffd [paths|refused|exit|auto|budget|maplimit]   (a hang is a failure: run under
 * timeout) */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stale.h"

#define LEN (1u << 20)

static struct mrcache_stats stats(void)
{
    struct mrcache_stats s;
    memset(&s, 0, sizeof(s));
    CHECK(mrcache_stats_read(sizeof(s), &s) == 0);
    return s;
}

/* The kernel directly: no hook, no patched entry point. */
static void *raw_mmap(void *hint, size_t len, int flags)
{
    long r = RAW_SYSCALL(SYS_mmap, hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return r == -1 ? NULL : (void *)r;
}

/* Register, write, deregister (cached), change the mapping with raw system calls,
 * register the same range again and write through the new MR: the current mapping must
 * see it (or, without the source, must not). */
typedef void (*change_fn)(char *p, size_t len);

static void raw_check(change_fn change)
{
    char *p = raw_mmap(NULL, LEN, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, LEN, 0x11));
    CHECK(a && ibv_dereg_mr(a) == 0);
    uint64_t caught = stats().uffd_caught;
    change(p, LEN);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(b != NULL);
    if (b) {
        check_outcome(write_visible(b, p, LEN, 0x22), "raw system call");
        if (!expect_stale)
            CHECK(stats().uffd_caught > caught);
        CHECK(ibv_dereg_mr(b) == 0);
    }
    RAW_SYSCALL(SYS_munmap, p, LEN);
}

static void ch_munmap(char *p, size_t len)
{
    CHECK(RAW_SYSCALL(SYS_munmap, p, len) == 0);
    CHECK(raw_mmap(p, len, MAP_FIXED_NOREPLACE) == p);
}

static void ch_madvise(char *p, size_t len)
{
    CHECK(RAW_SYSCALL(SYS_madvise, p, len, MADV_DONTNEED) == 0);
}

static void ch_mremap_away(char *p, size_t len)
{
    char *to = raw_mmap(NULL, len, 0);
    CHECK(to != NULL);
    CHECK(to && (char *)RAW_SYSCALL(SYS_mremap, p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to);
    CHECK(raw_mmap(p, len, MAP_FIXED_NOREPLACE) == p);
    if (to)
        RAW_SYSCALL(SYS_munmap, to, len);
}

static void ch_mremap_shrink_grow(char *p, size_t len)
{
    CHECK((char *)RAW_SYSCALL(SYS_mremap, p, len, len / 2, 0) == p);
    CHECK(raw_mmap(p + len / 2, len / 2, MAP_FIXED_NOREPLACE) == p + len / 2);
}

static void ch_mmap_fixed(char *p, size_t len)
{
    CHECK(raw_mmap(p, len, MAP_FIXED) == p);
}

static void test_raw_munmap(void) { raw_check(ch_munmap); }
static void test_raw_madvise_dontneed(void) { raw_check(ch_madvise); }
static void test_raw_mremap_move(void) { raw_check(ch_mremap_away); }
static void test_raw_mremap_shrink(void) { raw_check(ch_mremap_shrink_grow); }
static void test_raw_mmap_fixed(void) { raw_check(ch_mmap_fixed); }

/* Two live registrations sharing a page (different pds, so never merged): the one
 * that goes takes its own pages out of the kernel's registration, never the shared
 * one, whose raw munmap must still be seen by the other. */
static void test_shared_page_stays_watched(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    struct ibv_pd *other = ibv_alloc_pd(ctx);
    char *p = raw_mmap(NULL, 2 * (size_t)pg, 0);
    CHECK(other && p);
    if (!other || !p)
        return;
    struct ibv_mr *outer = ibv_reg_mr(other, p, 2 * (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *inner = ibv_reg_mr(pd, p + pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(outer && ibv_dereg_mr(outer) == 0);
    CHECK(inner && write_visible(inner, p + pg, (size_t)pg, 0x55));
    CHECK(inner && ibv_dereg_mr(inner) == 0);
    CHECK(mrcache_flush(other, 0) == 0);    /* the outer registration is deregistered */
    uint64_t caught = stats().uffd_caught;
    CHECK(RAW_SYSCALL(SYS_munmap, p + pg, pg) == 0);
    CHECK(raw_mmap(p + pg, (size_t)pg, MAP_FIXED_NOREPLACE) == p + pg);
    struct ibv_mr *again = ibv_reg_mr(pd, p + pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(again != NULL);
    if (again) {
        check_outcome(write_visible(again, p + pg, (size_t)pg, 0x66), "raw munmap of a page two registrations shared");
        CHECK(stats().uffd_caught > caught);
        CHECK(ibv_dereg_mr(again) == 0);
    }
    RAW_SYSCALL(SYS_munmap, p, 2 * pg);
    ibv_dealloc_pd(other);
}

/* Registers [p, p+LEN), which the source cannot watch: it works as without the source,
 * and is counted as unwatched. */
static void unwatched_check(char *p, unsigned char v)
{
    uint64_t before = stats().uffd_unwatched;
    struct ibv_mr *mr = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECKF(mr != NULL, "registration failed: %s", strerror(errno));
    CHECK(mr && write_visible(mr, p, LEN, v));
    CHECK(stats().uffd_unwatched == before + 1);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
}

/* Memory the program watches with a userfaultfd of its own: ours is refused (EBUSY).
 * The registration must work as without us, and be counted as unwatched. */
static void test_program_owns_a_userfaultfd(void)
{
    int own = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* UFFD_USER_MODE_ONLY */);
    if (own < 0)
        own = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    CHECKF(own >= 0, "userfaultfd: %s", strerror(errno));
    if (own < 0)
        return;
    struct uffdio_api api = { .api = UFFD_API };
    CHECK(ioctl(own, UFFDIO_API, &api) == 0);
    char *p = raw_mmap(NULL, LEN, 0);
    CHECK(p != NULL);
    memset(p, 1, LEN);      /* populated: the NIC's pinning meets no missing page */
    struct uffdio_register r = { .range = { (uintptr_t)p, LEN }, .mode = UFFDIO_REGISTER_MODE_MISSING };
    CHECK(ioctl(own, UFFDIO_REGISTER, &r) == 0);
    unwatched_check(p, 0x33);
    CHECK(munmap(p, LEN) == 0);
    close(own);
}

/* File-backed memory cannot be watched (EINVAL): counted, and registered all the same. */
static void test_file_backed_unwatched(void)
{
    char path[] = "/tmp/mrc_uffd_XXXXXX";
    int f = mkstemp(path);
    CHECK(f >= 0);
    if (f < 0)
        return;
    unlink(path);
    CHECK(ftruncate(f, LEN) == 0);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, f, 0);
    CHECK(p != MAP_FAILED);
    unwatched_check(p, 0x44);
    munmap(p, LEN);
    close(f);
}

static uint64_t faults_answered(void)
{
    char buf[1 << 16];
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    CHECK(mrcache_stats_dump(pfd[1], MRCACHE_DUMP_JSON) == 0);
    close(pfd[1]);
    ssize_t n = read(pfd[0], buf, sizeof(buf) - 1);
    close(pfd[0]);
    buf[n > 0 ? n : 0] = 0;
    const char *f = strstr(buf, "\"uffd_faults\":");
    return f ? strtoull(f + 14, NULL, 10) : ~0ull;
}

/* Nothing of ours write-protects a page, so no fault ever comes; if one did (here: the
 * program write-protects a watched page through our descriptor), the writer must not
 * wait forever: the handler lifts the protection. */
static void test_fault_is_answered(void)
{
    char *p = raw_mmap(NULL, LEN, 0);
    CHECK(p != NULL);
    memset(p, 1, LEN);
    struct ibv_mr *mr = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr != NULL);
    uint64_t before = faults_answered();
    CHECK(before == 0);      /* writes to watched pages never fault */
    int fd = uffd_fd_find();
    CHECK(fd >= 0);
    struct uffdio_writeprotect wp = { .range = { (uintptr_t)p, 4096 }, .mode = UFFDIO_WRITEPROTECT_MODE_WP };
    CHECKF(fd >= 0 && ioctl(fd, UFFDIO_WRITEPROTECT, &wp) == 0, "UFFDIO_WRITEPROTECT: %s", strerror(errno));
    *(volatile char *)p = 2;     /* faults; returns once answered */
    CHECK(p[0] == 2);
    CHECK(faults_answered() == before + 1);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    RAW_SYSCALL(SYS_munmap, p, LEN);
}

/* A raw munmap of a registered and released range is still seen (the source watches). */
static void still_watching(const char *after)
{
    char *p = raw_mmap(NULL, LEN, 0);
    struct ibv_mr *a = p ? ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(a && ibv_dereg_mr(a) == 0);
    uint64_t caught = stats().uffd_caught;
    CHECK(p && RAW_SYSCALL(SYS_munmap, p, LEN) == 0);
    CHECK(p && raw_mmap(p, LEN, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *b = p ? ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECKF(b && write_visible(b, p, LEN, 0x5a), "after %s: stale", after);
    CHECKF(stats().uffd_caught > caught, "after %s: the raw munmap was not seen", after);
    CHECK(b && ibv_dereg_mr(b) == 0);
    RAW_SYSCALL(SYS_munmap, p, LEN);
}

/* The program closes or replaces libmrcache's descriptor through libc (a daemon closing
 * what it did not open, dup2 onto a number it believes free): the number is the
 * program's from then on, what it puts there is its own (no byte of a pipe lost), and
 * the source keeps watching on another number. */
static void test_descriptor_moves_out_of_the_way(void)
{
    still_watching("the start");
    int n = uffd_fd_find();
    CHECK(n >= 3);
    CHECK(close(n) == 0);
    CHECK(fcntl(n, F_GETFD) == -1 && errno == EBADF);
    int fds[2];
    CHECK(pipe(fds) == 0);
    if (fds[0] != n && fds[1] != n) {
        CHECK(dup2(fds[0], n) == n);
        close(fds[0]);
        fds[0] = n;
    }
    CHECK(write(fds[1], "0123456789abcdef", 16) == 16);
    still_watching("close");
    int m = uffd_fd_find();
    CHECK(m >= 3 && m != n);
    CHECK(close_range((unsigned)m, (unsigned)m, 0) == 0);
    still_watching("close_range");
    int k = uffd_fd_find();
    CHECK(k >= 3 && k != m && dup2(fds[1], k) == k);
    still_watching("dup2 onto it");
    char got[16];
    CHECK(read(fds[0], got, sizeof(got)) == 16 && !memcmp(got, "0123456789abcdef", 16));
    CHECK(uffd_fd_find() >= 3 && uffd_on());
    close(fds[0]);
    close(fds[1]);
    close(k);
}

/* Several threads, each in a pd of its own, unmapping watched ranges with raw system
 * calls at once: none may wait for ever, and each sees its data in its new mappings. */
static void *churn(void *arg)
{
    struct ibv_pd *own = ibv_alloc_pd(ctx);
    int *bad = arg;
    for (int i = 0; own && i < 200; i++) {
        char *p = raw_mmap(NULL, 64 << 10, 0);
        struct ibv_mr *mr = p ? ibv_reg_mr(own, p, 64 << 10, IBV_ACCESS_LOCAL_WRITE) : NULL;
        if (!mr || ibv_dereg_mr(mr) != 0 || RAW_SYSCALL(SYS_munmap, p, 64 << 10) != 0) {
            (*bad)++;
            break;
        }
        if (raw_mmap(p, 64 << 10, MAP_FIXED_NOREPLACE) != p)
            continue;       /* another thread mapped the address first: its pd is not ours */
        mr = ibv_reg_mr(own, p, 64 << 10, IBV_ACCESS_LOCAL_WRITE);
        if (!mr || write_visible(mr, p, 64 << 10, (unsigned char)i) != !expect_stale)
            (*bad)++;
        if (mr)
            ibv_dereg_mr(mr);
        RAW_SYSCALL(SYS_munmap, p, 64 << 10);
    }
    if (!own)
        (*bad)++;
    else
        ibv_dealloc_pd(own);
    return NULL;
}

static void test_threads_unmapping_at_once(void)
{
    pthread_t t[6];
    int bad[6] = { 0 };
    for (int i = 0; i < 6; i++)
        CHECK(pthread_create(&t[i], NULL, churn, &bad[i]) == 0);
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        CHECKF(bad[i] == 0, "thread %d: %d failures", i, bad[i]);
    }
}

/* A munmap a hook sees (libc's, with the patch or preload source on) is published by the
 * hook, and the watch leaves the range first: the kernel then has no event for it, so
 * the caller never waits for the handler thread. */
static void test_seen_munmap_makes_no_event(void)
{
    if (!uffd_on()) {
        SKIP_TEST("the userfaultfd source is off");
        return;
    }
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *q = raw_mmap(NULL, LEN, 0);
    CHECK(p != MAP_FAILED && q != NULL);
    if (p == MAP_FAILED || !q)
        return;
    memset(p, 1, LEN);
    struct ibv_mr *mr = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    struct mrcache_stats s0 = stats();
    CHECK(munmap(p, LEN) == 0);
    /* A registration waits until the handler has published what it read. */
    mr = ibv_reg_mr(pd, q, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    struct mrcache_stats s1 = stats();
    if (s1.uffd_caught > s0.uffd_caught) {
        SKIP_TEST("no hook sees libc's munmap here: the userfaultfd source alone saw it");
    } else {
        CHECK(s1.invalidations > s0.invalidations);
        CHECKF(s1.uffd_events == s0.uffd_events, "%llu events for a munmap a hook had seen",
               (unsigned long long)(s1.uffd_events - s0.uffd_events));
    }
    RAW_SYSCALL(SYS_munmap, q, LEN);
}

/* A forked child: its address space is not watched by the parent's userfaultfd (the
 * registrations are not inherited), so it starts its own. */
static void child_watches(void)
{
    raw_check(ch_munmap);
    CHECK(uffd_on());
}

static void test_fork_child_watches_its_own(void)
{
    in_child(child_watches);
    raw_check(ch_munmap);   /* and the parent still does */
}

/* The kernel refuses userfaultfd (a seccomp filter, as a container's profile may): the
 * cache works without the source, says so, and raw unmaps are not seen. */
static void refuse_userfaultfd(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "cannot install the seccomp filter: %s\n", strerror(errno));
        exit(2);
    }
}

static void test_refused_degrades(void)
{
    CHECK(syscall(SYS_userfaultfd, O_CLOEXEC) == -1 && errno == EPERM);   /* the filter works */
    expect_stale = 1;
    raw_check(ch_munmap);       /* registrations work; the raw unmap is unseen */
    CHECK(!uffd_on());
    CHECK(mrcache_monitors() > 0);   /* run with other sources: they stay */
}

/* At exit: a thread still discarding a watched range, and an atexit handler (run after
 * libmrcache's own) unmapping another: the process must finish (the caller's timeout
 * turns a hang into a failure). */
static char *exit_buf, *churn_buf;
static void unmap_at_exit(void)
{
    CHECK(RAW_SYSCALL(SYS_munmap, exit_buf, LEN) == 0);
    check_report("unmap_after_libmrcache_exit_handler");
}

static void *discard_forever(void *arg)
{
    (void)arg;
    for (unsigned i = 0;; i++) {
        churn_buf[0] = (char)i;
        RAW_SYSCALL(SYS_madvise, churn_buf, LEN, MADV_DONTNEED);
    }
    return NULL;
}

static void exit_while_unmapping(void)
{
    atexit(unmap_at_exit);      /* before the first registration: runs after ours */
    exit_buf = raw_mmap(NULL, LEN, 0);
    churn_buf = raw_mmap(NULL, LEN, 0);
    /* Held, not released: a range stays watched while a registration needs it, and the
     * exit handler deregisters what is released (both ranges must still be watched when
     * they are unmapped). */
    struct ibv_mr *a = ibv_reg_mr(pd, exit_buf, LEN, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *b = ibv_reg_mr(pd, churn_buf, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && b);
    CHECK(uffd_on());
    uint64_t events = stats().uffd_events;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, discard_forever, NULL) == 0);
    while (stats().uffd_events < events + 100)
        sched_yield();          /* the thread is well under way */
}

static long read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f && fscanf(f, "%ld", &v) != 1)
        v = -1;
    if (f)
        fclose(f);
    return v;
}

static long maps_now(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    long n = 0;
    for (int c; f && (c = fgetc(f)) != EOF;)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

/* Watching a page inside a larger mapping splits it in three. Registering thousands of
 * isolated pages must stop splitting at half of vm.max_map_count (counted as unwatched),
 * and the program's own mappings must still succeed. */
static void test_vma_budget(void)
{
    long limit = read_long("/proc/sys/vm/max_map_count");
    CHECK(limit > 0);
    long pg = sysconf(_SC_PAGESIZE), n = limit / 4 + 1000;
    /* Watches are removed with their registrations: the cache must keep them all. */
    const char *short_by = check_memlock_short((unsigned long long)(n * pg));
    if (short_by) {
        SKIP_TEST(short_by);
        return;
    }
    char *p = raw_mmap(NULL, (size_t)(2 * n * pg), 0);
    CHECK(p != NULL);
    if (!p || limit <= 0)
        return;
    uint64_t unwatched = stats().uffd_unwatched;
    for (long i = 0; i < n; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, p + 2 * i * pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
        CHECKF(mr != NULL, "registration %ld: %s", i, strerror(errno));
        if (!mr)
            break;
        ibv_dereg_mr(mr);
    }
    long maps = maps_now();
    CHECKF(maps <= limit / 2 + 64, "%ld VMAs, past half of vm.max_map_count (%ld)", maps, limit);
    CHECK(stats().uffd_unwatched > unwatched);
    char *own[1000];
    int ok = 0;
    for (int i = 0; i < 1000; i++)
        ok += (own[i] = raw_mmap(NULL, (size_t)pg, 0)) != NULL;
    CHECK(ok == 1000);
    for (int i = 0; i < 1000; i++)
        if (own[i])
            RAW_SYSCALL(SYS_munmap, own[i], pg);
    RAW_SYSCALL(SYS_munmap, p, 2 * n * pg);
}

/* Mappings through libc until the kernel refuses one (at most cap), one page each, their
 * protections alternating so that none merges with the one before; kept in out. */
static long fill_maps(void **out, long cap, int *err)
{
    long pg = sysconf(_SC_PAGESIZE), n = 0;
    *err = 0;
    while (n < cap) {
        void *q = mmap(NULL, (size_t)pg, n % 2 ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q == MAP_FAILED) {
            *err = errno;
            break;
        }
        out[n++] = q;
    }
    return n;
}

/* The watches over idle cached registrations split VMAs (a page watched inside a larger
 * mapping makes three), and every VMA counts against vm.max_map_count. A program that
 * fills its address space with mappings must get as many of its own as it would without
 * the cache: when its mapping call is refused, what the cache holds idle goes and the
 * call is made again. */
static void test_maps_last_as_long(void)
{
    long limit = read_long("/proc/sys/vm/max_map_count");
    long pg = sysconf(_SC_PAGESIZE), n = 4000;
    if (limit <= 0 || limit > (1l << 20)) {
        SKIP_TEST("vm.max_map_count is too large to fill here");
        return;
    }
    const char *short_by = check_memlock_short((unsigned long long)(n * pg));
    if (short_by) {
        SKIP_TEST(short_by);
        return;
    }
    /* Never touched, and between guard pages of another protection: it merges with no
     * neighbour, whose anon_vma it would share. */
    char *g = raw_mmap(NULL, (size_t)((2 * n + 2) * pg), 0), *p = g ? g + pg : NULL;
    void **own = calloc((size_t)limit + 16, sizeof(*own));
    CHECK(g != NULL && own != NULL);
    if (!g || !own)
        return;
    CHECK(mprotect(g, (size_t)pg, PROT_NONE) == 0 && mprotect(p + 2 * n * pg, (size_t)pg, PROT_NONE) == 0);
    /* The helper threads exist before the program's mappings are counted. */
    struct ibv_mr *first = ibv_reg_mr(pd, p, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(first && ibv_dereg_mr(first) == 0);
    long before = maps_now();
    for (long i = 1; i < n; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, p + 2 * i * pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
        CHECKF(mr != NULL, "registration %ld: %s", i, strerror(errno));
        if (!mr)
            break;
        ibv_dereg_mr(mr);
    }
    long split = maps_now() - before;
    if (split < n) {
        SKIP_TEST("the watches split no mapping");
        RAW_SYSCALL(SYS_munmap, g, (2 * n + 2) * pg);
        free(own);
        return;
    }
    int err;
    long got = fill_maps(own, limit + 16, &err);
    /* Without the cache the program has `before` mappings less its share of the big
     * one's pieces; a few more go to the library's own threads and records. */
    CHECKF(got >= limit - before - 64, "%ld mappings of the program's own, %ld expected (%ld VMAs were the "
           "cache's splits, %s)", got, limit - before, split, strerror(err));
    CHECKF(err == ENOMEM, "the last mapping failed with %s", strerror(err));
    for (long i = 0; i < got; i++)
        RAW_SYSCALL(SYS_munmap, own[i], pg);
    /* The cache goes on: a page registered again works. */
    struct ibv_mr *again = ibv_reg_mr(pd, p + 2 * pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(again && write_visible(again, p + 2 * pg, (size_t)pg, 0x33));
    CHECK(again && ibv_dereg_mr(again) == 0);
    RAW_SYSCALL(SYS_munmap, g, (2 * n + 2) * pg);
    free(own);
}

/* An ENOMEM that is not about mappings (mprotect and madvise over a hole say so too)
 * gives nothing back: what is cached idle stays, and is hit again. */
static void test_hole_keeps_cache(void)
{
    long pg = sysconf(_SC_PAGESIZE);
    char *p = raw_mmap(NULL, (size_t)(3 * pg), 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *mr = ibv_reg_mr(pd, p, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    RAW_SYSCALL(SYS_munmap, p + pg, pg);   /* the hole, where nothing maps until the end */
    errno = 0;
    CHECK(mprotect(p + pg, (size_t)pg, PROT_READ) == -1 && errno == ENOMEM);
    errno = 0;
    CHECK(madvise(p + pg, (size_t)pg, MADV_WILLNEED) == -1 && errno == ENOMEM);
    uint64_t hits = stats().hits;
    mr = ibv_reg_mr(pd, p, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECKF(stats().hits == hits + 1, "the idle registration was given back for an ENOMEM over a hole");
    CHECK(mr && write_visible(mr, p, (size_t)pg, 0x44));
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    RAW_SYSCALL(SYS_munmap, p, pg);
    RAW_SYSCALL(SYS_munmap, p + 2 * pg, pg);
}

/* MRCACHE_MONITOR=auto: the userfaultfd joins exactly when patching falls short
 * (EXPECT_UFFD, from the caller, who knows whether libc can be patched here). */
static void test_auto_rule(void)
{
    char *p = raw_mmap(NULL, LEN, 0);
    struct ibv_mr *mr = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    int want = atoi(getenv("EXPECT_UFFD") ? getenv("EXPECT_UFFD") : "0");
    CHECKF(uffd_on() == want, "uffd %s, expected %s", uffd_on() ? "on" : "off", want ? "on" : "off");
    RAW_SYSCALL(SYS_munmap, p, LEN);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "paths";
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    if (!strcmp(mode, "refused"))
        refuse_userfaultfd();
    open_nic();
    if (nic.real) {
        check_skip("test_uffd", "the software NIC's test API is needed");
        return 0;
    }
    if (!strcmp(mode, "refused")) {
        RUN(test_refused_degrades);
        CHECK_EXIT();
    }
    if (!strcmp(mode, "budget")) {
        new_pd();
        RUN(test_vma_budget);
        CHECK_EXIT();
    }
    if (!strcmp(mode, "maplimit")) {
        new_pd();
        RUN(test_hole_keeps_cache);
        RUN(test_maps_last_as_long);
        CHECK_EXIT();
    }
    if (!strcmp(mode, "auto")) {
        RUN(test_auto_rule);
        CHECK_EXIT();
    }
    if (!strcmp(mode, "exit")) {
        exit_while_unmapping();
        return 0;       /* exit(): the thread is still unmapping */
    }
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    RUN(test_raw_munmap);
    RUN(test_raw_madvise_dontneed);
    RUN(test_raw_mremap_move);
    RUN(test_raw_mremap_shrink);
    RUN(test_raw_mmap_fixed);
    if (expect_stale)
        CHECK_EXIT();
    RUN(test_threads_unmapping_at_once);
    RUN(test_seen_munmap_makes_no_event);
    RUN(test_shared_page_stays_watched);
    RUN(test_program_owns_a_userfaultfd);
    RUN(test_file_backed_unwatched);
    RUN(test_fault_is_answered);
    RUN(test_descriptor_moves_out_of_the_way);
    RUN(test_fork_child_watches_its_own);
    CHECK_EXIT();
}
