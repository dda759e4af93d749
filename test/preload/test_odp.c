/* test_odp.c - MRCACHE_ODP on the software NIC, an unmodified verbs program. What must
 * happen follows from the environment it runs in (test_odp.sh runs every combination):
 * SNIC_ODP (what the device supports), MRCACHE_ODP and MRCACHE_ODP_PREFETCH (what the
 * cache may do). Where the device lacks a capability every mode must behave as off.
 *   fallback: past RLIMIT_MEMLOCK registrations are made on demand, and their data is
 *     right after remaps even through an MR held across them; never for read-only memory;
 *   implicit: one NIC registration serves every local-only request, each handle with the
 *     caller's addr and length, and a remote request never gets the implicit MR;
 *   prefetch: the modelled first-touch fault cost is gone from a registration's first
 *     message (its latency printed with and without). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "../../include/mrcache.h"
#include "check.h"
#include "mrc_counter.h"
#include "snic.h"

#define BUF (64u << 10)
#define LW IBV_ACCESS_LOCAL_WRITE
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static size_t page;
static int fallback, implicit, prefetch;   /* what must happen here */

static int env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

static struct snic_stats nic(void)
{
    struct snic_stats s;
    snic_get_stats(&s);
    return s;
}

static struct snic_odp_stats odp(void)
{
    struct snic_odp_stats s;
    snic_get_odp_stats(&s);
    return s;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Fresh anonymous pages at at (MAP_FIXED) or anywhere, filled with c. */
static char *map_fill(void *at, size_t len, int c)
{
    char *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    memset(p, c, len);
    return p;
}

static uint64_t u(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

/* len bytes filled with c, with unmapped pages on either side: no registration of
 * another buffer is adjacent, so none merges with it. */
static char *map_apart(size_t len, int c)
{
    char *p = map_fill(NULL, len + 2 * page, c);
    munmap(p, page);
    munmap(p + page + len, page);
    return p + page;
}

/* Opens the device and a pd: the program's own, or a forked child's (which may not use
 * its parent's). */
static int open_pd(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    if (list && list[0] && (ctx = ibv_open_device(list[0])))
        pd = ibv_alloc_pd(ctx);
    ibv_free_device_list(list);
    return pd ? 0 : -1;
}

/* A peer's write through mr lands in the pages mapped at p now. */
static int lands(struct ibv_mr *mr, char *p, const char *what)
{
    size_t n = strlen(what);
    return snic_rdma_write(mr->rkey, u(p), what, n) == 0 && !memcmp(p, what, n);
}

/* ---- fallback ---- */

/* 1.1 MiB held at once under a 256 KiB limit, in pieces past which the software NIC's
 * pinning refuses at once (it waits for another process's charge to go while this one
 * alone would be within the limit). */
#define HELD 6
#define PIECE (192u << 10)

static int memlock_child(void)
{
    struct rlimit lim = { 256 << 10, 256 << 10 };
    if (setrlimit(RLIMIT_MEMLOCK, &lim) ||
        (geteuid() == 0 && (setgroups(0, NULL) || setgid(check_private_uid()) || setuid(check_private_uid())))) {
        fprintf(stderr, "cannot drop to a small RLIMIT_MEMLOCK: %s\n", strerror(errno));
        return 1;
    }
    if (open_pd())
        return fprintf(stderr, "no software NIC in the child: %s\n", strerror(errno)), 1;
    struct snic_odp_stats o0 = odp();
    char *area = map_fill(NULL, 2 * HELD * PIECE, 'a');
    madvise(area, 2 * HELD * PIECE, MADV_NOHUGEPAGE);   /* a huge page is charged whole */
    struct ibv_mr *mr[HELD];
    int made = 0, err = 0;
    for (int i = 0; i < HELD; i++) {
        errno = 0;
        mr[i] = ibv_reg_mr(pd, area + 2 * i * PIECE, PIECE, RW);
        made += mr[i] != NULL;
        if (!mr[i] && !err)
            err = errno;
    }
    uint64_t on_demand = odp().live_odp_mrs - o0.live_odp_mrs;
    if (!fallback) {
        /* As without ODP: the limit refuses what does not fit. */
        CHECKF(made < HELD && err == ENOMEM && on_demand == 0, "%d of %d made (%s), %llu on demand", made, HELD,
               strerror(err), (unsigned long long)on_demand);
    } else {
        CHECKF(made == HELD && on_demand >= HELD / 2, "%d of %d made (%s), %llu on demand", made, HELD, strerror(err),
               (unsigned long long)on_demand);
        CHECKF(nic().pinned_bytes <= lim.rlim_cur, "%llu B pinned", (unsigned long long)nic().pinned_bytes);
    }
    /* New pages under every buffer: an MR made on demand follows them, a pinned one
     * still writes the old pages (as it would without the cache). */
    map_fill(area, 2 * HELD * PIECE, 'b');
    uint64_t fresh = 0;
    for (int i = 0; i < HELD; i++)
        fresh += mr[i] && lands(mr[i], area + 2 * i * PIECE + 100, "after remap");
    CHECKF(fresh == on_demand, "%llu MRs follow the remap, %llu made on demand", (unsigned long long)fresh,
           (unsigned long long)on_demand);
    for (int i = 0; i < HELD; i++)
        if (mr[i])
            CHECK(ibv_dereg_mr(mr[i]) == 0);
    /* Registered again after the remap: right wherever it is served from. */
    for (int i = 0; i < HELD; i++) {
        char *b = area + 2 * i * PIECE;
        struct ibv_mr *again = ibv_reg_mr(pd, b, PIECE, RW);
        CHECK(again != NULL);
        if (again) {
            CHECK(lands(again, b + 200, "registered again"));
            CHECK(ibv_dereg_mr(again) == 0);
        }
    }
    munmap(area, 2 * HELD * PIECE);
    CHECK(ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0);
    return check_failures ? 1 : 0;
}

static void test_fallback_past_memlock(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int rc = memlock_child();
        /* _exit, and its live segment (made under a uid of its own) removed by hand. */
        char seg[64];
        snprintf(seg, sizeof(seg), "/dev/shm/mrcache-%u-%d", (unsigned)getuid(), (int)getpid());
        unlink(seg);
        _exit(rc);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The NIC refusing to pin twice (the first try, and the retry after idle entries were
 * released): a third, on-demand try would succeed, so whether it was made shows. */
static struct ibv_mr *refused_twice(char *p, size_t len, int access, int *injected)
{
    struct snic_faults f0, f1;
    snic_get_faults(&f0);
    snic_fail_reg(ENOMEM, 2);
    errno = 0;
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, access);
    int saved = errno;
    snic_get_faults(&f1);
    snic_fail_reg(0, 0);
    *injected = (int)(f1.reg_injected - f0.reg_injected);
    errno = saved;
    return mr;
}

static void test_fallback_never_for_read_only_memory(void)
{
    char *ro = map_apart(BUF, 'r'), *rw = map_apart(BUF, 'w');
    int injected;
    mprotect(ro, BUF, PROT_READ);
    uint64_t odp0 = odp().odp_regs;
    struct ibv_mr *mr = refused_twice(ro, BUF, 0, &injected);
    CHECKF(!mr && errno == ENOMEM && injected == 2 && odp().odp_regs == odp0, "%p %s, %d injected", (void *)mr,
           strerror(errno), injected);
    mr = refused_twice(rw, BUF, RW, &injected);   /* remote: never the implicit MR's */
    if (fallback) {
        CHECK(mr != NULL && odp().odp_regs == odp0 + 1);
    } else {
        CHECKF(!mr && errno == ENOMEM && odp().odp_regs == odp0, "%p %s", (void *)mr, strerror(errno));
    }
    if (mr)
        CHECK(ibv_dereg_mr(mr) == 0);
    munmap(ro, BUF);
    munmap(rw, BUF);
}

/* ---- implicit ---- */

#define MANY 64

static void test_implicit_serves_local_requests(void)
{
    char *b[MANY];
    struct ibv_mr *mr[MANY];
    struct snic_stats s0 = nic();
    for (int i = 0; i < MANY; i++) {
        b[i] = map_apart(BUF, 'i');
        mr[i] = ibv_reg_mr(pd, b[i] + i, BUF - (size_t)i, LW);
        CHECK(mr[i] != NULL);
        if (!mr[i])
            return;
        CHECK(mr[i]->addr == b[i] + i && mr[i]->length == BUF - (size_t)i);
        CHECK(snic_local_write(mr[i]->lkey, u(b[i] + i), "local", 5) == 0 && !memcmp(b[i] + i, "local", 5));
    }
    /* The implicit MR may be there already, made by an earlier test. */
    uint64_t regs = nic().reg_calls - s0.reg_calls;
    CHECKF(implicit ? regs <= 1 && odp().live_odp_mrs == 1 : regs == MANY, "%llu NIC registrations",
           (unsigned long long)regs);
    /* A remote request: a registration of its own, and the implicit MR's key grants a
     * peer nothing. */
    struct ibv_mr *remote = ibv_reg_mr(pd, b[0], BUF, RW);
    CHECK(remote != NULL && nic().reg_calls - s0.reg_calls == regs + 1);
    CHECK(remote && remote->rkey != mr[0]->rkey && lands(remote, b[0], "peer"));
    CHECK(snic_rdma_write(mr[0]->rkey, u(b[0]), "x", 1) == EACCES);
    /* New pages at the same address: registered again, right without a registration. */
    map_fill(b[1], BUF, 'n');
    struct ibv_mr *again = ibv_reg_mr(pd, b[1] + 1, BUF - 1, LW);
    CHECK(again && snic_local_write(again->lkey, u(b[1] + 1), "new", 3) == 0 && !memcmp(b[1] + 1, "new", 3));
    CHECK(!implicit || nic().reg_calls - s0.reg_calls == regs + 1);
    if (again)
        CHECK(ibv_dereg_mr(again) == 0);
    if (remote)
        CHECK(ibv_dereg_mr(remote) == 0);
    for (int i = 0; i < MANY; i++) {
        CHECK(ibv_dereg_mr(mr[i]) == 0);
        munmap(b[i], BUF);
    }
}

/* A request the implicit MR serves pins nothing: no source watches its range (a shared
 * file's pages, which the userfaultfd source cannot watch, are not even tried). */
static void test_implicit_never_watched(void)
{
    if (!implicit)
        return (void)SKIP_TEST("no implicit MR in this run");
    if (!(mrcache_monitors() & MRCACHE_MONITOR_UFFD))
        return (void)SKIP_TEST("the userfaultfd source is off in this run");
    char path[] = "/var/tmp/mrc-odp-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, BUF) == 0);
    unlink(path);
    char *p = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED)
        return;
    p[0] = 1;
    long long unwatched = mrc_counter("uffd_unwatched"), served = mrc_counter("odp_implicit");
    struct ibv_mr *mr = ibv_reg_mr(pd, p, BUF, LW);
    CHECK(mr && mrc_counter("odp_implicit") == served + 1);
    CHECKF(mrc_counter("uffd_unwatched") == unwatched, "the implicit MR's request was given to the userfaultfd source");
    if (mr)
        CHECK(ibv_dereg_mr(mr) == 0);
    munmap(p, BUF);
}

/* Memory ODP cannot serve is registered as without ODP: a read-only mapping here fails
 * as the NIC's pinning makes it fail. */
static void test_implicit_never_for_read_only_memory(void)
{
    char *ro = map_apart(BUF, 'r');
    mprotect(ro, BUF, PROT_READ);
    errno = 0;
    struct ibv_mr *mr = ibv_reg_mr(pd, ro, BUF, 0);
    CHECKF(!mr && errno == EFAULT, "%p %s", (void *)mr, strerror(errno));
    if (mr)
        ibv_dereg_mr(mr);
    munmap(ro, BUF);
}

/* ---- prefetch ---- */

/* The first message into a freshly registered buffer: its latency, and the page faults it
 * took. First of the tests: the software NIC never forgets a page an ODP MR faulted in, so
 * the buffer's addresses must be new to the implicit MR. */
static void test_first_message_latency(void)
{
    static char msg[BUF];
    char *b = map_apart(BUF, 'p');
    memset(msg, 'm', sizeof(msg));
    struct snic_odp_stats o0 = odp();
    struct ibv_mr *mr = ibv_reg_mr(pd, b, BUF, LW);
    CHECK(mr != NULL);
    if (!mr)
        return;
    uint64_t t0 = now_ns();
    CHECK(snic_local_write(mr->lkey, u(b), msg, BUF) == 0 && !memcmp(b, msg, BUF));
    uint64_t dt = now_ns() - t0, faults = odp().faults - o0.faults;
    uint64_t pages = BUF / page;
    if (!implicit)
        CHECK(faults == 0);   /* pinned: nothing to fault */
    else if (prefetch)
        CHECKF(faults == 0 && odp().prefetched - o0.prefetched == pages, "%llu faults",
               (unsigned long long)faults);
    else
        CHECKF(faults == pages, "%llu faults", (unsigned long long)faults);
    printf("# first message of %u KiB into a new registration: %.1f us, %llu page faults (%s)\n", BUF >> 10,
           (double)dt / 1e3, (unsigned long long)faults,
           !implicit ? "pinned" : prefetch ? "on demand, prefetched" : "on demand, not prefetched");
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(b, BUF);
}

static void test_pd_and_device_close(void)
{
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    CHECK(odp().live_odp_mrs == 0 && nic().live_mrs == 0);
}

int main(void)
{
    int dev_odp = env_is("SNIC_ODP", "explicit") || env_is("SNIC_ODP", "implicit");
    int mode_on = env_is("MRCACHE_ODP", "fallback") || env_is("MRCACHE_ODP", "implicit");
    fallback = dev_odp && mode_on;
    implicit = env_is("SNIC_ODP", "implicit") && env_is("MRCACHE_ODP", "implicit");
    prefetch = !env_is("MRCACHE_ODP_PREFETCH", "0");
    page = (size_t)sysconf(_SC_PAGESIZE);
    if (open_pd())
        return fprintf(stderr, "no software NIC: %s\n", strerror(errno)), 1;
    RUN(test_first_message_latency);
    RUN(test_fallback_past_memlock);
    RUN(test_fallback_never_for_read_only_memory);
    RUN(test_implicit_serves_local_requests);
    RUN(test_implicit_never_for_read_only_memory);
    RUN(test_implicit_never_watched);
    RUN(test_pd_and_device_close);
    CHECK_EXIT();
}
