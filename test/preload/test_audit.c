/* test_audit.c - MRCACHE_AUDIT on the programs it is for, over a loopback RC QP pair
 * (the software NIC's QPs, or rxe's in the VM): a correct program posts without a word;
 * a program that posts through an MR whose memory it unmapped and mapped again, or freed
 * and allocated again (a pool that keeps its MRs), through a dlopen handle of libibverbs
 * with a cache of its own, or with the lkey of an MR it deregistered (a registration the
 * cache still keeps), or past its MR's own range (inside a wider cached registration),
 * is reported once per MR and kind, counted in audit_faults, and its work request still
 * goes to the NIC unchanged; receives and extended QPs' builders are checked too;
 * MRCACHE_AUDIT=abort stops the process at the first fault with SIGABRT. Needs
 * MRCACHE_AUDIT=warn; AUDIT_OFF=1 runs the control with audit off (nothing is checked). */
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <sys/wait.h>

#include "common.h"
#include "capture.h"
#include "mrc_counter.h"

#define PG 4096ul
#define LOCAL (IBV_ACCESS_LOCAL_WRITE)
#define TARGET (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct rdma_loop lp;
static int audit_off;
static char *dst;                /* the WRITEs' target, registered for the whole run */
static struct ibv_mr *dst_mr;

/* One RDMA WRITE of len bytes from src (lkey) into dst: the completion's status (0). */
static int write_from(uint32_t lkey, const void *src, size_t len)
{
    int rc = rdma_loop_write(&lp, lkey, src, (uintptr_t)dst, dst_mr->rkey, len);
    if (rc > 0) {   /* an error completion leaves the QPs in error: a new pair */
        rdma_loop_close(&lp);
        CHECK(rdma_loop_open(&lp, pd, test_gid_index()) == 0);
    }
    return rc;
}

static long long faults(void)
{
    return mrc_counter("audit_faults");
}

static void test_correct_program_says_nothing(void)
{
    long long f0 = faults(), c0 = mrc_counter("audit_checks");
    char *src = map_anon(NULL, 4 * PG, 0);
    memset(src, 7, 4 * PG);
    capture_begin();
    struct ibv_mr *mr = ibv_reg_mr(pd, src, 4 * PG, LOCAL);
    CHECK(mr && write_from(mr->lkey, src, 4 * PG) == 0 && dst[0] == 7 && dst[4 * PG - 1] == 7);
    CHECK(ibv_dereg_mr(mr) == 0);
    capture_end();
    CHECKF(capture_count("MRCACHE_AUDIT") == 0, "said: %s", capture_said);
    CHECK(faults() == f0);
    long long c1 = mrc_counter("audit_checks");
    CHECKF(audit_off ? c1 == c0 : c1 > c0, "%lld checks, from %lld", c1, c0);
    munmap(src, 4 * PG);
}

/* An MR whose iova is not its address (zero-based): its entries name iovas. */
static void test_zero_based_mr_says_nothing(void)
{
    long long f0 = faults();
    char *src = map_anon(NULL, 4 * PG, 0);
    memset(src, 0x21, 4 * PG);
    struct ibv_mr *mr = ibv_reg_mr_iova(pd, src, 4 * PG, 0, LOCAL);
    CHECK(mr);
    if (!mr)
        return;
    capture_begin();
    int rc = rdma_loop_write(&lp, mr->lkey, (const void *)(uintptr_t)PG, (uintptr_t)dst, dst_mr->rkey, PG);
    capture_end();
    CHECKF(rc == 0 && dst[0] == 0x21, "the WRITE from iova %lu: %d, moved %d", PG, rc, dst[0]);
    CHECKF(capture_count("MRCACHE_AUDIT") == 0 && faults() == f0, "said: %s", capture_said);
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(src, 4 * PG);
}

/* The memory went and came back under a kept MR: the NIC still reads the old pages. */
static void test_post_after_the_memory_was_replaced(void)
{
    long long f0 = faults();
    char *src = map_anon(NULL, 4 * PG, 0);
    memset(src, 1, 4 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, src, 4 * PG, LOCAL);
    CHECK(mr);
    munmap(src, 4 * PG);
    CHECK(map_anon(src, 4 * PG, MAP_FIXED) == src);
    memset(src, 2, 4 * PG);
    capture_begin();
    for (int i = 0; i < 3; i++)
        CHECK(write_from(mr->lkey, src, PG) == 0);
    capture_end();
    CHECKF(dst[0] == 1, "the WRITE moved %d, not the old pages' 1", dst[0]);   /* unchanged: as without audit */
    if (audit_off) {
        CHECK(capture_count("MRCACHE_AUDIT") == 0 && faults() == f0);
    } else {
        CHECKF(capture_count("MRCACHE_AUDIT") == 1 && capture_count("after it was registered") == 1 && strstr(capture_said, "memory: munmap at"),
               "said: %s", capture_said);
        CHECK(faults() == f0 + 3);
    }
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(src, 4 * PG);
}

/* A pool keeps its MR across free and malloc: the next buffer there is not the MR's. */
static void test_pool_across_free_and_malloc(void)
{
    long long f0 = faults();
    char *a = malloc(8u << 20);   /* past the mmap threshold: free unmaps it */
    CHECK(a);
    memset(a, 3, 8u << 20);
    struct ibv_mr *mr = ibv_reg_mr(pd, a, 1u << 20, LOCAL);
    CHECK(mr);
    volatile uintptr_t at = (uintptr_t)a;   /* the address the MR was made for; the memory goes */
    long long inval0 = mrc_counter("invalidated");
    free(a);
    unsigned char vec;
    if (mincore((void *)at, 4096, &vec) == 0 || mrc_counter("invalidated") == inval0) {
        SKIP_TEST("the allocator's free was not an unmap libmrcache saw (a sanitizer's own allocator)");
        CHECK(ibv_dereg_mr(mr) == 0);
        return;
    }
    capture_begin();
    CHECK(write_from(mr->lkey, (const void *)at, PG) == 0);
    capture_end();
    CHECKF(audit_off || (capture_count("MRCACHE_AUDIT") == 1 && capture_count("after it was registered") == 1 && faults() == f0 + 1),
           "said: %s", capture_said);
    CHECK(ibv_dereg_mr(mr) == 0);
}

/* The lkey of an MR the program deregistered: the cache keeps the registration idle, so
 * the NIC takes it; without libmrcache it would not. */
static void test_lkey_of_a_deregistered_mr(void)
{
    long long f0 = faults();
    char *src = map_anon(NULL, 2 * PG, 0);
    memset(src, 4, 2 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, src, 2 * PG, LOCAL);
    CHECK(mr);
    uint32_t lkey = mr->lkey;
    CHECK(ibv_dereg_mr(mr) == 0);
    capture_begin();
    int rc = write_from(lkey, src, PG);
    capture_end();
    CHECKF(rc == 0, "the cached registration refused the WRITE (%d)", rc);
    CHECKF(audit_off || (capture_count("no MR of the program has this lkey") == 1 && faults() == f0 + 1), "said: %s", capture_said);
    mrcache_flush(NULL, 0);
    munmap(src, 2 * PG);
}

/* Past its own MR, inside the wider registration the MR shares. */
static void test_past_the_mr_inside_a_wider_registration(void)
{
    long long f0 = faults();
    char *src = map_anon(NULL, 8 * PG, 0);
    memset(src, 5, 8 * PG);
    struct ibv_mr *wide = ibv_reg_mr(pd, src, 8 * PG, LOCAL);
    struct ibv_mr *narrow = ibv_reg_mr(pd, src, PG, LOCAL);
    CHECK(wide && narrow && narrow->lkey == wide->lkey);
    CHECK(ibv_dereg_mr(wide) == 0);
    capture_begin();
    CHECK(write_from(narrow->lkey, src + 4 * PG, PG) == 0);
    capture_end();
    CHECKF(audit_off || (capture_count("outside its MR") == 1 && faults() == f0 + 1), "said: %s", capture_said);
    CHECK(ibv_dereg_mr(narrow) == 0);
    mrcache_flush(NULL, 0);
    munmap(src, 8 * PG);
}

/* Receives are checked too. */
static void test_receive_into_a_replaced_buffer(void)
{
    long long f0 = faults();
    char *buf = map_anon(NULL, 2 * PG, 0);
    memset(buf, 6, 2 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 2 * PG, LOCAL);
    CHECK(mr);
    CHECK(madvise(buf, 2 * PG, MADV_DONTNEED) == 0);
    struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)PG, mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 }, *bad;
    capture_begin();
    CHECK(ibv_post_recv(lp.qp[1], &wr, &bad) == 0);
    capture_end();
    CHECKF(audit_off || (capture_count("ibv_post_recv") == 1 && strstr(capture_said, "madvise") && faults() == f0 + 1), "capture_said: %s",
           capture_said);
    /* The posted receive stays on the target QP: a fresh pair for the next tests. */
    rdma_loop_close(&lp);
    CHECK(rdma_loop_open(&lp, pd, test_gid_index()) == 0);
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(buf, 2 * PG);
}

/* A cache of the program's own, through a dlopen handle (as NCCL's): the same. */
static void test_own_cache_through_a_handle(void)
{
    long long f0 = faults();
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(h);
    if (!h)
        return;
    struct ibv_mr *(*reg)(struct ibv_pd *, void *, size_t, int) =
        (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int)) dlsym(h, "ibv_reg_mr");
    int (*dereg)(struct ibv_mr *) = (int (*)(struct ibv_mr *))dlsym(h, "ibv_dereg_mr");
    char *src = map_anon(NULL, 2 * PG, 0);
    memset(src, 8, 2 * PG);
    struct ibv_mr *mr = reg && dereg ? reg(pd, src, 2 * PG, LOCAL) : NULL;
    CHECK(mr);
    if (mr) {
        munmap(src, 2 * PG);
        CHECK(map_anon(src, 2 * PG, MAP_FIXED) == src);
        capture_begin();
        CHECK(write_from(mr->lkey, src, PG) == 0);
        capture_end();
        CHECKF(audit_off || (capture_count("MRCACHE_AUDIT") == 1 && capture_count("after it was registered") == 1 &&
                             faults() == f0 + 1),
               "said: %s", capture_said);
        CHECK(dereg(mr) == 0);
    }
    munmap(src, 2 * PG);
    dlclose(h);
}

/* Extended QPs: ibv_wr_set_sge is checked as ibv_post_send is. */
static void test_extended_qp_builders(void)
{
    struct ibv_qp_init_attr_ex qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = lp.cq;
    qa.recv_cq = lp.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.pd = pd;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
    if (!qp) {
        SKIP_TEST("the device has no extended QPs (ibv_create_qp_ex failed)");
        return;
    }
    struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
    CHECK(qx);
    long long f0 = faults();
    char *src = map_anon(NULL, 2 * PG, 0);
    memset(src, 9, 2 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, src, 2 * PG, LOCAL);
    CHECK(mr);
    munmap(src, 2 * PG);
    capture_begin();
    if (qx) {
        /* Builders only, never completed: what is checked is the entry the program sets. */
        ibv_wr_start(qx);
        qx->wr_id = 1;
        ibv_wr_rdma_write(qx, dst_mr->rkey, (uintptr_t)dst);
        ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)src, (uint32_t)PG);
        ibv_wr_abort(qx);
    }
    capture_end();
    CHECKF(audit_off || (capture_count("ibv_wr_set_sge") == 1 && faults() == f0 + 1), "said: %s", capture_said);
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_destroy_qp(qp) == 0);
}

/* abort: the first fault ends the process with SIGABRT (and a core dump where allowed). */
static void test_abort_stops_at_the_first(void)
{
    if (audit_off) {
        SKIP_TEST("audit is off in this run");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = { 0, 0 };
        setrlimit(RLIMIT_CORE, &no_core);   /* no core file in the test's directory */
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        setenv("MRCACHE_AUDIT", "abort", 1);   /* read when the new image starts */
        _exit(execl("/proc/self/exe", "test_audit", "--abort-child", (char *)NULL) == -1 ? 3 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "status %#x", st);
}

/* The child of the abort test: audit=abort (its environment), one stale post. */
static int abort_child(void)
{
    char *src = map_anon(NULL, PG, 0);
    memset(src, 1, PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, src, PG, LOCAL);
    if (!mr)
        return 2;
    munmap(src, PG);
    map_anon(src, PG, MAP_FIXED);
    write_from(mr->lkey, src, PG);
    return 1;   /* not stopped: the test fails on the exit status */
}

int main(int argc, char **argv)
{
    int child = argc > 1 && !strcmp(argv[1], "--abort-child");
    audit_off = getenv("AUDIT_OFF") != NULL;
    open_nic();
    if (rdma_loop_open(&lp, pd, test_gid_index()) != 0) {
        check_skip("test_audit", "the device has no loopback RC queue pairs");
        return 0;
    }
    dst = map_anon(NULL, 16 * PG, 0);
    dst_mr = ibv_reg_mr(pd, dst, 16 * PG, TARGET);
    if (!dst_mr) {
        fprintf(stderr, "cannot register the target\n");
        return 2;
    }
    if (child)
        return abort_child();
    RUN(test_correct_program_says_nothing);
    RUN(test_zero_based_mr_says_nothing);
    RUN(test_post_after_the_memory_was_replaced);
    RUN(test_pool_across_free_and_malloc);
    RUN(test_lkey_of_a_deregistered_mr);
    RUN(test_past_the_mr_inside_a_wider_registration);
    RUN(test_receive_into_a_replaced_buffer);
    RUN(test_own_cache_through_a_handle);
    RUN(test_extended_qp_builders);
    RUN(test_abort_stops_at_the_first);
    CHECK_EXIT();
}
