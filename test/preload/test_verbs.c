/* test_verbs.c - the interposed verbs calls, seen from an unmodified program: lazy
 * deregistration and hits, per-call handles with the caller's addr and length, rights
 * never widened, iova, dealloc_pd and close_device, double and foreign deregistration,
 * rereg on a cached handle, fork, and threads registering while others unmap. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int preloaded;   /* whether libmrcache is in front (the tests assert its effects) */

static void test_lazy_dereg_and_hit(void)
{
    void *p = map_anon(NULL, 1 << 20, 0);
    uint64_t regs = nic_regs();
    struct ibv_mr *a = ibv_reg_mr(pd, p, 1 << 20, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && ibv_dereg_mr(a) == 0);
    CHECK(nic_live() >= 1);                 /* still registered: lazy */
    struct ibv_mr *b = ibv_reg_mr(pd, p, 1 << 20, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b && nic_regs() == regs + 1);     /* served from the cache */
    CHECK(write_visible(b, p, 1 << 20, 7));
    ibv_dereg_mr(b);
    munmap(p, 1 << 20);
}

static void test_handles_carry_callers_range(void)
{
    char *p = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p + 100, 1000, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    struct ibv_mr *b = ibv_reg_mr(pd, p + 5000, 3000, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && b && a != b);
    CHECK(a->addr == p + 100 && a->length == 1000);
    CHECK(b->addr == p + 5000 && b->length == 3000);
    CHECK(a->pd == pd && a->context == ctx);
    /* Both served by one registration of the merged pages: same keys, both usable. */
    CHECK(write_visible(a, p + 100, 1000, 1) && write_visible(b, p + 5000, 3000, 2));
    CHECK(ibv_dereg_mr(a) == 0 && ibv_dereg_mr(b) == 0);
    munmap(p, 1 << 16);
}

static void test_verbs_macro_paths_count_once(void)
{
    /* verbs.h turns ibv_reg_mr into ibv_reg_mr (constant flags) or ibv_reg_mr_iova2
     * (variable flags); both reach us; the NIC sees one registration each. */
    void *p = map_anon(NULL, 1 << 16, 0), *q = map_anon(NULL, 1 << 16, 0);
    volatile int flags = IBV_ACCESS_LOCAL_WRITE;
    uint64_t regs = nic_regs();
    struct ibv_mr *a = ibv_reg_mr(pd, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *b = ibv_reg_mr(pd, q, 1 << 16, flags);
    struct ibv_mr *c = ibv_reg_mr_iova(pd, p, 1 << 16, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && b && c);
    CHECK(nic_regs() == regs + 2);
    ibv_dereg_mr(a);
    ibv_dereg_mr(b);
    ibv_dereg_mr(c);
    munmap(p, 1 << 16);
    munmap(q, 1 << 16);
}

static void test_remote_rights_never_widened(void)
{
    char *p = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *r = ibv_reg_mr(pd, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(r != NULL);
    char msg[64] = "written by a peer";
    CHECK(nic_rdma_write(r->rkey, (uintptr_t)p, msg, sizeof(msg)) == 0);
    CHECK(memcmp(p, msg, sizeof(msg)) == 0);
    ibv_dereg_mr(r);
    /* A local-only request must not get the cached remote-writable MR's rkey. */
    struct ibv_mr *l = ibv_reg_mr(pd, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    CHECK(l != NULL);
    int rc = nic_rdma_write(l->rkey, (uintptr_t)p, msg, sizeof(msg));
    CHECKF(rc == EACCES || rc == EINVAL, "a peer wrote through a local-only MR (rc %d)", rc);
    ibv_dereg_mr(l);
    /* A sub-range remote request gets its own exact registration. */
    struct ibv_mr *s = ibv_reg_mr(pd, p + 64, 128, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(s != NULL);
    rc = nic_rdma_write(s->rkey, (uintptr_t)p, msg, 8);
    CHECKF(rc == EINVAL, "a peer reached bytes outside the exposed range (rc %d)", rc);
    CHECK(nic_rdma_write(s->rkey, (uintptr_t)p + 64, msg, 8) == 0);
    ibv_dereg_mr(s);
    munmap(p, 1 << 16);
}

static void test_iova_registration(void)
{
    char *p = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *m = ibv_reg_mr_iova(pd, p, 1 << 16, 0x100000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(m != NULL);
    CHECK(m && m->addr == p);
    char msg[16] = "iova";
    CHECK(m && nic_rdma_write(m->rkey, 0x100000 + 32, msg, sizeof(msg)) == 0);
    CHECK(memcmp(p + 32, msg, sizeof(msg)) == 0);
    ibv_dereg_mr(m);
    munmap(p, 1 << 16);
}

static void test_dealloc_pd_and_close_device_succeed(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *c2 = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    struct ibv_pd *pd2 = ibv_alloc_pd(c2);
    void *p = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *m = ibv_reg_mr(pd2, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    /* Without the cache these succeed: all MRs were deregistered. */
    CHECK(ibv_dealloc_pd(pd2) == 0);
    struct ibv_pd *pd3 = ibv_alloc_pd(c2);
    m = ibv_reg_mr(pd3, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m != NULL);
    CHECK(ibv_dealloc_pd(pd3) == EBUSY);    /* and fail when the program still holds one */
    ibv_dereg_mr(m);
    CHECK(ibv_dealloc_pd(pd3) == 0);
    struct ibv_pd *pd4 = ibv_alloc_pd(c2);
    m = ibv_reg_mr(pd4, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    ibv_dereg_mr(m);
    CHECK(ibv_dealloc_pd(pd4) == 0);
    CHECK(ibv_close_device(c2) == 0);
    munmap(p, 1 << 16);
}

static void test_double_and_foreign_dereg(void)
{
    void *p = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *m = ibv_reg_mr(pd, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    if (preloaded)
        CHECK(ibv_dereg_mr(m) == EINVAL);
    /* Through libibverbs' own entry point, bound as NCCL's dlvsym binds it: under the
     * preload that entry leads to the cache too, and the idle registration of p serves it. */
    void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, uint64_t, unsigned) =
        (struct ibv_mr *(*)(struct ibv_pd *, void *, size_t, uint64_t, unsigned))dlvsym(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8");
    CHECK(real != NULL);
    uint64_t live = nic_live();
    struct ibv_mr *f = real(pd, p, 4096, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE);
    CHECK(f && nic_live() == live + !preloaded);
    CHECK(ibv_dereg_mr(f) == 0);
    CHECK(nic_live() == live);
    dlclose(lib);
    munmap(p, 1 << 16);
}

static void test_rereg_cached_handle(void)
{
    char *p = map_anon(NULL, 1 << 16, 0), *q = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, 1 << 16, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    struct ibv_mr *b = ibv_reg_mr(pd, p, 1 << 16, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));   /* shares a's registration */
    CHECK(a && b);
    CHECK(ibv_rereg_mr(a, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, q, 1 << 16, 0) == 0);
    CHECK(a->addr == q && a->length == 1 << 16);
    CHECK(write_visible(a, q, 1 << 16, 5));     /* a now covers q */
    CHECK(write_visible(b, p, 1 << 16, 6));     /* b still covers p, untouched */
    CHECK(ibv_dereg_mr(a) == 0 && ibv_dereg_mr(b) == 0);
    munmap(p, 1 << 16);
    munmap(q, 1 << 16);
}

static void test_fork_child_never_deregisters_parent(void)
{
    void *p = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *held = ibv_reg_mr(pd, p, 1 << 16, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    struct ibv_mr *idle = ibv_reg_mr(pd, (char *)p + 8192, 4096, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(held && idle);
    if (!held || !idle)
        return;
    ibv_dereg_mr(idle);
    /* Counted after fork() returns (it may release idle cached registrations first, as
     * MRCACHE_FORK says), before the child acts. */
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char sig;
        if (read(go[0], &sig, 1) != 1)
            _exit(2);
        /* The child releases what it inherited and registers its own memory. */
        int bad = ibv_dereg_mr(held) != 0;
        void *c = map_anon(NULL, 1 << 16, 0);
        struct ibv_context *cc = NULL;
        struct ibv_device **list = ibv_get_device_list(NULL);
        if (list && list[0])
            cc = ibv_open_device(list[0]);
        struct ibv_pd *cpd = cc ? ibv_alloc_pd(cc) : NULL;
        struct ibv_mr *m = cpd ? ibv_reg_mr(cpd, c, 1 << 16, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE)) : NULL;
        bad |= !m || !write_visible(m, c, 1 << 16, 9);
        _exit(bad);
    }
    uint64_t live = nic_live();
    CHECK(write(go[1], "g", 1) == 1);
    close(go[0]);
    close(go[1]);
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(nic_live() == live);
    CHECK(write_visible(held, p, 1 << 16, 4));  /* the parent's MR still works */
    ibv_dereg_mr(held);
    munmap(p, 1 << 16);
}

static void test_fork_safe_child_sees_released_memory(void)
{
    /* In fork-safe mode registered pages are absent in a child (MADV_DONTFORK). Pages
     * the program deregistered must be there, even though the cache kept them. Looked up,
     * not linked: rdma-core before 35 has no ibv_is_fork_initialized, and is in
     * fork-safe mode whenever RDMAV_FORK_SAFE asks for it. */
    int (*is_fork_initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ibv_is_fork_initialized");
    if (is_fork_initialized ? is_fork_initialized() != IBV_FORK_ENABLED : !getenv("RDMAV_FORK_SAFE")) {
        fprintf(stderr, "fork-safe mode is off: nothing to test\n");
        check_failures++;
        return;
    }
    char *p = map_anon(NULL, 1 << 16, 0);
    uint64_t live0 = nic_live();
    struct ibv_mr *m = ibv_reg_mr(pd, p, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    /* The case under test: the cache kept the deregistered MR (else the child's pages
     * are there whatever libmrcache does before a fork). */
    CHECKF(nic_live() == live0 + 1, "%llu MRs on the NIC after the release, %llu before: not kept",
           (unsigned long long)nic_live(), (unsigned long long)live0);
    p[100] = 42;
    pid_t pid = fork();
    if (pid == 0)
        _exit(p[100] == 42 ? 0 : 1);   /* faults if the page was left out of the child */
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    munmap(p, 1 << 16);
}

/* Unmapping registered memory defers the deregistrations (hooks may not make them);
 * past MRCACHE_MAX_DEFERRED (512K in this run, one buffer) they happen without another
 * verbs call: at most one buffer's may wait for the next. idle_ms: a pause before the
 * unmaps, long enough for the helper thread to stop polling, so that it must be woken (a
 * lost wake-up would leave the MRs pinned). The buffers lie apart (none merges with
 * another: a single merged registration would leave nothing to tell drained from
 * waiting), and all 4 MiB stay cached until the unmaps within a normal user's
 * RLIMIT_MEMLOCK (8 MiB), where evictions would deregister them at once instead. */
#define DRAIN_BUF (512u << 10)
#define DRAIN_N 8
static void deferred_drain_case(unsigned idle_ms)
{
    struct ibv_pd *own = ibv_alloc_pd(ctx);
    uint64_t live0 = nic_live();
    char *area = map_anon(NULL, 2 * DRAIN_N * DRAIN_BUF, 0);
    CHECK(area != NULL);
    if (!area)
        return;
    for (int i = 0; i < DRAIN_N; i++) {
        struct ibv_mr *m = ibv_reg_mr(own, area + 2 * i * DRAIN_BUF, DRAIN_BUF, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && ibv_dereg_mr(m) == 0);
    }
    CHECKF(nic_live() == live0 + DRAIN_N, "%llu MRs cached of %d", (unsigned long long)(nic_live() - live0), DRAIN_N);
    usleep(idle_ms * 1000u);
    for (int i = 0; i < DRAIN_N; i++)
        munmap(area + 2 * i * DRAIN_BUF, DRAIN_BUF);
    /* Eventually, not within a time bound: wait up to 10 s for the helper thread. */
    for (int t = 0; t < 1000 && nic_live() > live0 + 1; t++)
        usleep(10000);
    CHECKF(nic_live() <= live0 + 1, "%llu MRs still pinned", (unsigned long long)(nic_live() - live0));
    munmap(area, 2 * DRAIN_N * DRAIN_BUF);
    ibv_dealloc_pd(own);
}

/* glibc's malloc heaps (arenas) in this process, from malloc_info. */
static int malloc_heaps(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -1;
    malloc_info(0, f);
    fclose(f);
    int n = 0;
    for (const char *q = buf; (q = strstr(q, "<heap nr=")) != NULL; q++)
        n++;
    free(buf);
    return n;
}

/* The helper thread makes its malloc arena (an mmap of 64 MiB) when it starts, at the
 * first registration, not later in the background, when a hole the program has just
 * unmapped could receive it. Run first, in a process with no other threads. */
static void test_helper_arena_made_at_start(void)
{
    int before = malloc_heaps();
    char *p = map_anon(NULL, 4096, 0);
    struct ibv_mr *m = ibv_reg_mr(pd, p, 4096, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    /* Eventually, not within a time bound: the thread starts on its own. */
    int after = before;
    for (int t = 0; t < 500 && after <= before; t++) {
        usleep(10000);
        after = malloc_heaps();
    }
    CHECKF(before >= 1 && after == before + 1, "malloc heaps: %d before the first registration, %d after",
           before, after);
    /* p stays mapped: unmapping it would defer a deregistration into the next test's count. */
}

static void test_deferred_drained_without_further_calls(void)
{
    deferred_drain_case(0);
}

static void test_deferred_drained_after_helper_idle(void)
{
    deferred_drain_case(300);
}

#define THREADS 2
#define ROUNDS 300

static void *reg_thread(void *arg)
{
    long bad = 0;
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        /* Each round maps a buffer, registers it twice, unmaps it: a fresh mapping may
         * land where another thread's (or this one's) unmapped buffer was. */
        size_t len = 4096u << (i % 5);
        char *p = map_anon(NULL, len, 0);
        struct ibv_mr *m = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        bad += !m || !write_visible(m, p, len, (unsigned char)i);
        ibv_dereg_mr(m);
        m = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        bad += !m || !write_visible(m, p, len, (unsigned char)(i + 1));
        ibv_dereg_mr(m);
        munmap(p, len);
    }
    return (void *)bad;
}

static void test_threads_register_while_others_unmap(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, reg_thread, NULL);
    long bad = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    CHECKF(bad == 0, "%ld writes landed in stale pages", bad);
}

int main(void)
{
    preloaded = getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libmrcache");
    open_nic();
    if (getenv("DEFERRED_ONLY")) {
        if (dlsym(RTLD_DEFAULT, "__asan_init"))
            check_skip("test_helper_arena_made_at_start", "malloc is the sanitizer's: no glibc arenas");
        else
            RUN(test_helper_arena_made_at_start);
        RUN(test_deferred_drained_without_further_calls);
        RUN(test_deferred_drained_after_helper_idle);
        CHECK_EXIT();
    }
    if (getenv("FORK_SAFE_ONLY")) {
        RUN(test_fork_safe_child_sees_released_memory);
        CHECK_EXIT();
    }
    if (preloaded) {
        RUN(test_lazy_dereg_and_hit);
        RUN(test_verbs_macro_paths_count_once);
    }
    RUN(test_handles_carry_callers_range);
    RUN_SOFT_NIC(test_remote_rights_never_widened,
                 "rxe reports missing rights and an out-of-range address alike, by completion");
    RUN(test_iova_registration);
    RUN(test_dealloc_pd_and_close_device_succeed);
    RUN_SOFT_NIC(test_double_and_foreign_dereg, "counts the NIC's live MRs, a foreign one included");
    if (!nic.real || nic_rereg_translation_works())
        RUN(test_rereg_cached_handle);
    else
        check_skip("test_rereg_cached_handle", "the device cannot change an MR's translation");
    if (preloaded)
        RUN(test_fork_child_never_deregisters_parent);   /* our semantics, not the NIC's */
    RUN(test_threads_register_while_others_unmap);
    CHECK_EXIT();
}
