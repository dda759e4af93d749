/* test_dereg_failure.c - the NIC (its injector) refusing the cache's deregistration of a
 * released MR (EBUSY, EIO): it stays owned, pinned and counted (dereg_failures), is retried,
 * and dealloc_pd/close_device succeed as without the cache once the cause is gone; refused
 * registrations fail with the NIC's errno. Run with and without the preload (the reference).
 * Usage: test_dereg_failure [exit]   ("exit": the retry at exit, checked from atexit) */
#include <sys/mman.h>

#include "never.h"

#define LEN (64u << 10)

static int preloaded;

/* A registration the program has made and released: cached (and still registered) under
 * the preload, deregistered without it. Its lkey is kept to tell when the NIC forgets it. */
struct released {
    char *buf;
    uint32_t lkey;
};

static struct released register_and_release(struct ibv_pd *p)
{
    struct released r = { map_anon(NULL, LEN, 0), 0 };
    struct ibv_mr *m = r.buf ? ibv_reg_mr(p, r.buf, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(m != NULL);
    if (m) {
        r.lkey = m->lkey;
        CHECK(ibv_dereg_mr(m) == 0);
    }
    return r;
}

static uint64_t injected_before;

static int failure_injected(void)
{
    return never_faults().dereg_injected > injected_before;
}

/* Arms one refusal of err, unmaps the released buffer (the cache's deregistration is
 * deferred out of the unmap) and makes the next cache call, a registration held in
 * pd_other (*held): the cache deregisters then (or its helper thread soon after) and the
 * NIC refuses. Without the preload nothing is deregistered, nothing refused. Returns 0,
 * with the test marked skipped, if under the preload no refusal happened. */
static int refuse_one_deferred_dereg(struct released *r, int err, struct ibv_pd *pd_other, struct ibv_mr **held,
                                     char **held_buf)
{
    injected_before = never_faults().dereg_injected;
    CHECK(inj.fail_dereg(err, 1) == 0);
    CHECK(munmap(r->buf, LEN) == 0);
    *held_buf = map_anon(NULL, LEN, 0);
    *held = ibv_reg_mr(pd_other, *held_buf, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(*held != NULL);
    if (preloaded && !never_eventually(failure_injected)) {
        inj.fail_dereg(0, 0);
        check_skipf("no deregistration reached the NIC after the unmap and the next registration (%s)",
                   strerror(err));
        return 0;
    }
    return 1;
}

static const int errs[] = { EBUSY, EIO };
#define NERRS (int)(sizeof(errs) / sizeof(errs[0]))

/* The refused deregistration is kept: the MR is still on the NIC, the cache still counts
 * its bytes as pinned and counts the failure; once the NIC accepts, dealloc_pd works and
 * nothing is left pinned. */
static void refused_dereg_kept_case(int err)
{
    never_quiesce();
    struct ibv_pd *p2 = ibv_alloc_pd(ctx), *p3 = ibv_alloc_pd(ctx);
    struct snic_stats n0 = never_nic();
    struct mrcache_stats s0 = never_stats();
    long long failures0 = never_json_counter("dereg_failures");
    struct released r = register_and_release(p2);
    struct ibv_mr *held;
    char *hb;
    if (!refuse_one_deferred_dereg(&r, err, p3, &held, &hb))
        return;
    if (preloaded) {
        struct snic_stats n1 = never_nic();
        struct mrcache_stats s1 = never_stats();
        CHECKF(n1.live_mrs == n0.live_mrs + 2, "NIC: %llu live MRs, expected the refused one and the held one",
               (unsigned long long)(n1.live_mrs - n0.live_mrs));
        CHECKF(s1.pinned_bytes - s0.pinned_bytes == n1.pinned_bytes - n0.pinned_bytes,
               "%s: the cache says %llu KiB pinned, the NIC has %llu KiB", strerror(err),
               (unsigned long long)((s1.pinned_bytes - s0.pinned_bytes) >> 10),
               (unsigned long long)((n1.pinned_bytes - n0.pinned_bytes) >> 10));
        long long failures = never_json_counter("dereg_failures");
        CHECKF(failures >= 0 && failures == (failures0 < 0 ? 0 : failures0) + 1,
               "statistics counter dereg_failures: %lld (absent: -1), expected %lld", failures,
               (failures0 < 0 ? 0 : failures0) + 1);
    }
    CHECK(inj.fail_dereg(0, 0) == 0);     /* the cause is gone */
    CHECK(held && ibv_dereg_mr(held) == 0);
    int rc2 = ibv_dealloc_pd(p2), rc3 = ibv_dealloc_pd(p3);
    CHECKF(rc2 == 0, "%s: ibv_dealloc_pd of the refused MR's pd: %s (0 without the cache)", strerror(err),
           strerror(rc2));
    CHECK(rc3 == 0);
    struct snic_stats n2 = never_nic();
    CHECKF(n2.live_mrs == n0.live_mrs && n2.pinned_bytes == n0.pinned_bytes,
           "%s: %lld MRs and %lld KiB still pinned after both pds were released", strerror(err),
           (long long)(n2.live_mrs - n0.live_mrs), (long long)(n2.pinned_bytes - n0.pinned_bytes) >> 10);
    munmap(hb, LEN);
}

static void test_refused_dereg_stays_owned_and_counted(void)
{
    for (int i = 0; i < NERRS && !check_skip_why; i++)
        refused_dereg_kept_case(errs[i]);
}

static uint32_t watched_key;
static const char *watched_buf;

static int watched_key_dead(void)
{
    return !never_key_alive(watched_key, watched_buf);
}

/* Once the NIC accepts again, the next cache call (or the helper thread) deregisters it:
 * its key dies without the program releasing anything more. */
static void test_refused_dereg_retried_at_next_call(void)
{
    for (int i = 0; i < NERRS; i++) {
        never_quiesce();
        struct ibv_pd *p2 = ibv_alloc_pd(ctx), *p3 = ibv_alloc_pd(ctx);
        struct released r = register_and_release(p2);
        struct ibv_mr *held;
        char *hb;
        if (!refuse_one_deferred_dereg(&r, errs[i], p3, &held, &hb))
            return;
        CHECK(inj.fail_dereg(0, 0) == 0);
        /* The next cache call: a registration and release in another pd. */
        struct released other = register_and_release(p3);
        watched_key = r.lkey;
        watched_buf = r.buf;
        CHECKF(never_eventually(watched_key_dead), "%s: the refused MR is still on the NIC after the next call",
               strerror(errs[i]));
        CHECK(held && ibv_dereg_mr(held) == 0);
        CHECK(ibv_dealloc_pd(p2) == 0 && ibv_dealloc_pd(p3) == 0);
        munmap(other.buf, LEN);
        munmap(hb, LEN);
    }
}

/* The refusal meets ibv_dealloc_pd itself (its flush of the pd's idle MRs is refused
 * once): by the time the NIC is asked to free the pd the cause is gone, so the kept
 * deregistration must be retried first, and dealloc_pd succeed as without the cache. */
static void test_dealloc_pd_retries_a_refused_dereg(void)
{
    for (int i = 0; i < NERRS; i++) {
        never_quiesce();
        struct ibv_pd *p2 = ibv_alloc_pd(ctx);
        struct snic_stats n0 = never_nic();
        struct released r = register_and_release(p2);
        injected_before = never_faults().dereg_injected;
        CHECK(inj.fail_dereg(errs[i], 1) == 0);
        int rc = ibv_dealloc_pd(p2);
        CHECK(inj.fail_dereg(0, 0) == 0);
        if (preloaded && !failure_injected()) {
            check_skipf("ibv_dealloc_pd made no deregistration (%s)", strerror(errs[i]));
            return;
        }
        CHECKF(rc == 0, "%s: ibv_dealloc_pd: %s (0 without the cache)", strerror(errs[i]), strerror(rc));
        if (rc)
            rc = ibv_dealloc_pd(p2);    /* the cause is gone: the retry, if any */
        struct snic_stats n1 = never_nic();
        CHECKF(n1.live_mrs == n0.live_mrs, "%s: %lld MRs left on the NIC", strerror(errs[i]),
               (long long)(n1.live_mrs - n0.live_mrs));
        munmap(r.buf, LEN);
    }
}

/* A pd on a second device context: ibv_dealloc_pd then ibv_close_device succeed once
 * the NIC accepts again. */
static void test_close_device_after_refused_dereg(void)
{
    never_quiesce();
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *c2 = list ? ibv_open_device(list[0]) : NULL;
    ibv_free_device_list(list);
    struct ibv_pd *p2 = c2 ? ibv_alloc_pd(c2) : NULL, *p3 = ibv_alloc_pd(ctx);
    CHECK(p2 && p3);
    if (!p2 || !p3)
        return;
    struct released r = register_and_release(p2);
    struct ibv_mr *held;
    char *hb;
    if (!refuse_one_deferred_dereg(&r, EIO, p3, &held, &hb))
        return;
    CHECK(inj.fail_dereg(0, 0) == 0);
    int rc = ibv_dealloc_pd(p2);
    CHECKF(rc == 0, "ibv_dealloc_pd on the second context: %s", strerror(rc));
    rc = ibv_close_device(c2);
    CHECKF(rc == 0, "ibv_close_device: %s", strerror(rc));
    CHECK(held && ibv_dereg_mr(held) == 0);
    CHECK(ibv_dealloc_pd(p3) == 0);
    munmap(hb, LEN);
}

/* The NIC refusing for as long as the test says (a window that stays bound): the cache
 * cannot hide that, but it must keep the MR counted and free the pd once it can. Without
 * the cache the program's own deregistration succeeded before the refusals began, so the
 * first dealloc_pd is the reference's only call. */
static void test_refused_until_cleared_then_dealloc_pd(void)
{
    never_quiesce();
    struct ibv_pd *p2 = ibv_alloc_pd(ctx);
    struct snic_stats n0 = never_nic();
    struct mrcache_stats s0 = never_stats();
    struct released r = register_and_release(p2);
    injected_before = never_faults().dereg_injected;
    CHECK(inj.fail_dereg(EBUSY, SNIC_FAIL_ALWAYS) == 0);
    int rc = ibv_dealloc_pd(p2);
    if (preloaded && rc != 0) {
        struct snic_stats n1 = never_nic();
        struct mrcache_stats s1 = never_stats();
        CHECKF(s1.pinned_bytes - s0.pinned_bytes == n1.pinned_bytes - n0.pinned_bytes,
               "while the NIC refuses: the cache says %llu KiB pinned, the NIC has %llu KiB",
               (unsigned long long)((s1.pinned_bytes - s0.pinned_bytes) >> 10),
               (unsigned long long)((n1.pinned_bytes - n0.pinned_bytes) >> 10));
        CHECK(inj.fail_dereg(0, 0) == 0);
        rc = ibv_dealloc_pd(p2);
        CHECKF(rc == 0, "ibv_dealloc_pd once the NIC accepts: %s", strerror(rc));
    }
    CHECK(inj.fail_dereg(0, 0) == 0);
    CHECKF(rc == 0, "ibv_dealloc_pd: %s", strerror(rc));
    struct snic_stats n2 = never_nic();
    CHECKF(n2.live_mrs == n0.live_mrs && n2.pinned_bytes == n0.pinned_bytes, "%lld MRs, %lld KiB left pinned",
           (long long)(n2.live_mrs - n0.live_mrs), (long long)(n2.pinned_bytes - n0.pinned_bytes) >> 10);
    munmap(r.buf, LEN);
}

/* A registration the NIC refuses fails with the NIC's errno, pins nothing, and is not
 * remembered: the next one succeeds. ENOMEM and EAGAIN are left out: the cache answers
 * them by evicting and retrying (docs/design.md, "Limits"). */
static void test_refused_registration_same_errno(void)
{
    static const int reg_errs[] = { EIO, EFAULT, EINVAL, EPERM, EACCES };
    for (unsigned i = 0; i < sizeof(reg_errs) / sizeof(reg_errs[0]); i++) {
        never_quiesce();
        char *p = map_anon(NULL, LEN, 0);   /* fresh memory: never a cache hit */
        struct snic_stats n0 = never_nic();
        struct mrcache_stats s0 = never_stats();
        CHECK(inj.fail_reg(reg_errs[i], 1) == 0);
        errno = 0;
        struct ibv_mr *m = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
        int e = errno;
        CHECK(inj.fail_reg(0, 0) == 0);
        CHECKF(!m && e == reg_errs[i], "injected %s: got %s, errno %s", strerror(reg_errs[i]), m ? "an MR" : "NULL",
               strerror(e));
        struct snic_stats n1 = never_nic();
        struct mrcache_stats s1 = never_stats();
        CHECKF(n1.live_mrs == n0.live_mrs && s1.pinned_bytes == s0.pinned_bytes,
               "after the refusal: %lld more MRs on the NIC, %lld more KiB pinned by the cache",
               (long long)(n1.live_mrs - n0.live_mrs), (long long)(s1.pinned_bytes - s0.pinned_bytes) >> 10);
        if (m)
            ibv_dereg_mr(m);
        m = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && write_visible(m, p, LEN, (unsigned char)i));
        if (m)
            ibv_dereg_mr(m);
        munmap(p, LEN);
    }
}

/* "exit": the refused deregistration is retried by the cache's exit handler. Ours was
 * registered before the first registration, so it runs after the cache's. */
static struct released exit_r;

static void check_at_exit(void)
{
    CHECKF(!never_key_alive(exit_r.lkey, exit_r.buf), "the refused MR is still registered at exit");
    int failed = check_failures != 0;
    check_report("test_refused_dereg_retried_at_exit");
    if (failed)
        _exit(1);
}

static int exit_mode(void)
{
    atexit(check_at_exit);
    open_nic();
    never_resolve_injector();
    struct ibv_pd *p2 = ibv_alloc_pd(ctx), *p3 = ibv_alloc_pd(ctx);
    exit_r = register_and_release(p2);
    struct ibv_mr *held;    /* still held at exit, as programs do */
    char *hb;
    int refused = refuse_one_deferred_dereg(&exit_r, EBUSY, p3, &held, &hb);
    CHECK(inj.fail_dereg(0, 0) == 0);
    if (!refused) {
        printf("ok - test_refused_dereg_retried_at_exit # SKIP %s\n", check_skip_why);
        fflush(stdout);
        _exit(0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    preloaded = never_preloaded();
    if (argc > 1 && !strcmp(argv[1], "exit"))
        return exit_mode();
    open_nic();
    never_resolve_injector();
    RUN(test_refused_dereg_stays_owned_and_counted);
    RUN(test_refused_dereg_retried_at_next_call);
    RUN(test_dealloc_pd_retries_a_refused_dereg);
    RUN(test_close_device_after_refused_dereg);
    RUN(test_refused_until_cleared_then_dealloc_pd);
    RUN(test_refused_registration_same_errno);
    CHECK_EXIT();
}
