/* test_snic.c - tests of the software NIC through libibverbs and snic.h, one function per
 * behaviour. Behaviour that depends on the environment read at load (SNIC_REG_COST_NS,
 * RDMAV_FORK_SAFE, SNIC_COPY_ON_FORK) runs in a re-exec of this binary ("child modes",
 * exit status 0 = pass); the RLIMIT_MEMLOCK test runs in a forked child as a user of
 * its own.
 * Timing is only ever asserted as a lower bound. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
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

#include "check.h"
#include "snic.h"

#define RW_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static size_t page;

/* Anonymous pages, touched, never transparent huge pages (io_uring charges a whole huge
 * page for any part of it, which would blur the VmPin checks). */
static char *map_pages(size_t n)
{
    char *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    madvise(p, n * page, MADV_NOHUGEPAGE);
    memset(p, 0, n * page);
    return p;
}

static struct snic_stats stats(void)
{
    struct snic_stats s;

    snic_get_stats(&s);
    return s;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t u(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

/* NULL if this process may pin bytes, and 4 MiB besides for the program's other MRs
 * (CAP_IPC_LOCK, or that much RLIMIT_MEMLOCK); else why a test that pins them skips. */
static const char *pin_short(uint64_t bytes)
{
    return check_memlock_short(bytes + (4 << 20));
}

/* Runs fn with stderr sent to buf (NUL-terminated). */
static void capture_stderr(void (*fn)(void), char *buf, size_t size)
{
    int fds[2], saved;
    ssize_t n, total = 0;

    fflush(stderr);
    if (pipe(fds)) {
        perror("pipe");
        exit(2);
    }
    saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    while ((n = read(fds[0], buf + total, size - 1 - (size_t)total)) > 0)
        total += n;
    buf[total] = '\0';
    close(fds[0]);
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;

    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);

        if (memmem(line, len, needle, strlen(needle)))
            n++;
        line += len + (end != NULL);
    }
    return n;
}

/* Re-executes this binary in a child mode with "NAME=VALUE" settings (a NULL-terminated
 * list); returns its exit status (-1 if killed) and its stderr in err. */
static int spawn_self(const char *mode, const char *const *env, char *err, size_t size)
{
    int fds[2], status;
    ssize_t n, total = 0;
    pid_t pid;

    fflush(NULL);
    if (pipe(fds)) {
        perror("pipe");
        exit(2);
    }
    pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        unsetenv("SNIC_REG_COST_NS");
        unsetenv("SNIC_COPY_ON_FORK");
        unsetenv("RDMAV_FORK_SAFE");
        unsetenv("IBV_FORK_SAFE");
        for (; *env; env++)
            putenv((char *)(uintptr_t)*env);
        execl("/proc/self/exe", "test_snic", mode, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    while ((n = read(fds[0], err + total, size - 1 - (size_t)total)) > 0)
        total += n;
    err[total] = '\0';
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "child mode %s: status %#x, stderr:\n%s", mode, status, err);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    return 0;
}

/* A forked child's verdict: 0 if every condition held. */
__attribute__((format(printf, 1, 2))) static int child_fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static int wait_child(pid_t pid)
{
    int status;

    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- device and context ---- */

static void test_device_list(void)
{
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);

    CHECK(list && n == 1 && list[0] && !list[1]);
    if (!list)
        return;
    CHECK(!strcmp(ibv_get_device_name(list[0]), "snic0"));
    CHECK(ibv_get_device_guid(list[0]) != 0);
    CHECK(list[0]->node_type == IBV_NODE_CA && list[0]->transport_type == IBV_TRANSPORT_IB);
    CHECK(ibv_get_device_index(list[0]) == 0);
    ibv_free_device_list(list);
}

static void test_context_is_verbs_context(void)
{
    struct verbs_context *vctx = verbs_get_ctx(ctx);

    CHECK(ctx->abi_compat == __VERBS_ABI_IS_EXTENDED);
    CHECK(vctx && vctx->sz >= sizeof(*vctx));
    CHECK(vctx && &vctx->context == ctx);
    CHECK(ctx->async_fd >= 0 && fcntl(ctx->async_fd, F_GETFD) >= 0);
}

static void test_query_device(void)
{
    struct ibv_device_attr attr;
    struct ibv_device_attr_ex ex;

    CHECK(ibv_query_device(ctx, &attr) == 0);
    CHECK(attr.phys_port_cnt == 1 && attr.max_mr >= 100000 && attr.max_pd > 0);
    CHECK(attr.node_guid != 0 && attr.max_mr_size >= (1ULL << 40));
    memset(&ex, 0xff, sizeof(ex));
    CHECK(ibv_query_device_ex(ctx, NULL, &ex) == 0);
    CHECK(ex.orig_attr.max_mr == attr.max_mr && ex.comp_mask == 0 && ex.max_dm_size == 0);
}

static void test_query_port_gid_pkey(void)
{
    struct ibv_port_attr attr;
    union ibv_gid gid;
    struct ibv_gid_entry entry;
    __be16 pkey;

    CHECK(ibv_query_port(ctx, 1, &attr) == 0); /* verbs.h inline -> vctx->query_port */
    CHECK(attr.state == IBV_PORT_ACTIVE && attr.link_layer == IBV_LINK_LAYER_INFINIBAND);
    CHECK(attr.lid == 1 && attr.gid_tbl_len == 1 && attr.active_mtu == IBV_MTU_4096);
    CHECK(ibv_query_port(ctx, 2, &attr) == EINVAL);
    /* The exported symbol fills the compat prefix only. */
    memset(&attr, 0, sizeof(attr));
    attr.port_cap_flags2 = 0x5a5a;
    CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&attr) == 0);
    CHECK(attr.state == IBV_PORT_ACTIVE && attr.port_cap_flags2 == 0x5a5a);

    CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0);
    CHECK(gid.raw[0] == 0xfe && gid.raw[1] == 0x80 && gid.global.interface_id != 0);
    CHECK(ibv_query_gid(ctx, 1, 1, &gid) == -1 && errno == EINVAL);
    CHECK(ibv_query_gid_ex(ctx, 1, 0, &entry, 0) == 0);
    CHECK(entry.gid_type == IBV_GID_TYPE_IB && !memcmp(&entry.gid, &gid, sizeof(gid)));
    CHECK(ibv_query_gid_table(ctx, &entry, 1, 0) == 1);
    CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == htobe16(0xffff));
    CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1);
    CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0);
}

static void test_strings_and_rates(void)
{
    CHECK(!strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active"));
    CHECK(!strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter"));
    CHECK(!strcmp(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error"));
    CHECK(!strcmp(ibv_wc_status_str((enum ibv_wc_status)999), "unknown"));
    CHECK(!strcmp(ibv_event_type_str(IBV_EVENT_PORT_ERR), "port error"));
    CHECK(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4 && mult_to_ibv_rate(4) == IBV_RATE_10_GBPS);
    CHECK(ibv_rate_to_mult(IBV_RATE_100_GBPS) == -1 && mult_to_ibv_rate(3) == IBV_RATE_MAX);
    CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
    CHECK(mbps_to_ibv_rate(53125) == IBV_RATE_50_GBPS);
}

/* Inline extended verbs find a NULL op and fail cleanly instead of crashing. */
static void test_missing_extended_ops_fail_eopnotsupp(void)
{
    struct ibv_cq_init_attr_ex cq_attr = { .cqe = 4 };
    struct ibv_sge sge = { 0 };

    errno = 0;
    CHECK(ibv_alloc_null_mr(pd) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_reg_dm_mr(pd, NULL, 0, page, 0) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_alloc_mw(pd, IBV_MW_TYPE_1) == NULL && errno == EOPNOTSUPP);
    CHECK(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1) == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &cq_attr) == NULL && errno == EOPNOTSUPP);
}

static int stub_ret, stub_errno;
static void *stub_ptr;

static void call_stubs(void)
{
    stub_ptr = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    stub_errno = errno;
    stub_ret = ibv_destroy_qp(NULL);
}

static struct ibv_mr *dmabuf_mr;
static int dmabuf_errno;

static void call_dmabuf(void)
{
    dmabuf_mr = ibv_reg_dmabuf_mr(pd, 0, page, 0, -1, IBV_ACCESS_LOCAL_WRITE);
    dmabuf_errno = errno;
}

/* Unimplemented calls say so on stderr, one line each, and return their error. */
static void test_unimplemented_calls_fail_loudly(void)
{
    char err[4096];

    capture_stderr(call_stubs, err, sizeof(err));
    CHECK(stub_ptr == NULL && stub_errno == EOPNOTSUPP && stub_ret == EOPNOTSUPP);
    CHECKF(count_lines_with(err, "ibv_create_cq") == 1, "stderr: %s", err);
    CHECKF(count_lines_with(err, "ibv_destroy_qp") == 1, "stderr: %s", err);
    capture_stderr(call_dmabuf, err, sizeof(err));
    CHECK(dmabuf_mr == NULL && dmabuf_errno == EOPNOTSUPP);
    CHECKF(count_lines_with(err, "ibv_reg_dmabuf_mr") == 1, "stderr: %s", err);
}

static void test_close_device_busy_with_pd(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *c2 = ibv_open_device(list[0]);
    struct ibv_pd *p2 = c2 ? ibv_alloc_pd(c2) : NULL;

    ibv_free_device_list(list);
    CHECK(c2 && p2 && p2->context == c2);
    if (!p2)
        return;
    CHECK(stats().live_pds == 2);
    CHECK(ibv_close_device(c2) == EBUSY);
    CHECK(ibv_dealloc_pd(p2) == 0);
    CHECK(ibv_close_device(c2) == 0);
    CHECK(stats().live_pds == 1);
}

/* ---- registration ---- */

static void test_reg_fills_mr(void)
{
    char *buf = map_pages(2);
    struct snic_stats s0 = stats();
    struct ibv_mr *mr = ibv_reg_mr(pd, buf + 10, page, RW_ALL);

    CHECK(mr && mr->addr == buf + 10 && mr->length == page);
    CHECK(mr && mr->pd == pd && mr->context == ctx && mr->lkey == mr->rkey && mr->lkey != 0);
    CHECK(stats().live_mrs == s0.live_mrs + 1 && stats().reg_calls == s0.reg_calls + 1);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    CHECK(stats().live_mrs == s0.live_mrs && stats().dereg_calls == s0.dereg_calls + 1);
    munmap(buf, 2 * page);
}

static void test_reg_mr_and_iova_enter_iova2_once(void)
{
    char *buf = map_pages(1);
    struct snic_stats s0 = stats();
    int access = IBV_ACCESS_LOCAL_WRITE;
    struct ibv_mr *a = (ibv_reg_mr)(pd, buf, page, access);
    struct snic_stats s1 = stats();
    struct ibv_mr *b = (ibv_reg_mr_iova)(pd, buf, page, u(buf), access);
    struct snic_stats s2 = stats();
    struct ibv_mr *c = ibv_reg_mr_iova2(pd, buf, page, u(buf), (unsigned)access);
    struct snic_stats s3 = stats();
    struct ibv_mr *d = ibv_reg_mr(pd, buf, page, access); /* not constant: the macro's iova2 */
    struct snic_stats s4 = stats();

    CHECK(a && b && c && d);
    CHECK(s1.iova2_entries == s0.iova2_entries + 1 && s1.reg_calls == s0.reg_calls + 1);
    CHECK(s2.iova2_entries == s1.iova2_entries + 1);
    CHECK(s3.iova2_entries == s2.iova2_entries + 1);
    CHECK(s4.iova2_entries == s3.iova2_entries + 1);
    /* Entries are counted even when the registration then fails. */
    CHECK((ibv_reg_mr)(pd, buf, 0, access) == NULL);
    CHECK(stats().iova2_entries == s4.iova2_entries + 1 && stats().reg_calls == s4.reg_calls);
    ibv_dereg_mr(a), ibv_dereg_mr(b), ibv_dereg_mr(c), ibv_dereg_mr(d);
    munmap(buf, page);
}

static bool reg_fails(void *addr, size_t len, uint64_t iova, unsigned access, int err)
{
    struct ibv_mr *mr;

    errno = 0;
    mr = ibv_reg_mr_iova2(pd, addr, len, iova, access);
    if (mr) {
        ibv_dereg_mr(mr);
        return false;
    }
    return errno == err;
}

static void test_reg_rejects_like_the_kernel(void)
{
    char *buf = map_pages(2);
    char *hole = map_pages(1);
    struct snic_stats s0 = stats();

    munmap(hole, page);
    CHECK(reg_fails(buf, page, u(buf), IBV_ACCESS_REMOTE_WRITE, EINVAL));
    CHECK(reg_fails(buf, page, u(buf), IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ, EINVAL));
    CHECK(reg_fails(buf, page, u(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND, EOPNOTSUPP));
    CHECK(reg_fails(buf, page, u(buf), 1u << 15, EINVAL));
    CHECK(reg_fails(buf, 0, u(buf), IBV_ACCESS_LOCAL_WRITE, EINVAL));
    CHECK(reg_fails(buf, SIZE_MAX - 10, u(buf), IBV_ACCESS_LOCAL_WRITE, EINVAL));
    CHECK(reg_fails(buf, page, u(buf) + 8, IBV_ACCESS_LOCAL_WRITE, EINVAL)); /* page offset */
    CHECK(reg_fails(hole, page, u(hole), IBV_ACCESS_LOCAL_WRITE, EFAULT));
    errno = 0;
    CHECK(ibv_reg_mr(NULL, buf, page, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
    /* Optional-range bits are accepted (and ignored) as on a kernel that knows them. */
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    CHECK(mr != NULL);
    ibv_dereg_mr(mr);
    CHECK(stats().live_mrs == s0.live_mrs && stats().pinned_bytes == s0.pinned_bytes);
    munmap(buf, 2 * page);
}

static void test_dealloc_pd_busy_with_mr(void)
{
    char *buf = map_pages(1);
    struct ibv_pd *p2 = ibv_alloc_pd(ctx);
    struct ibv_mr *mr = p2 ? ibv_reg_mr(p2, buf, page, 0) : NULL;

    CHECK(p2 && mr);
    if (!mr)
        return;
    CHECK(ibv_dealloc_pd(p2) == EBUSY);
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_dealloc_pd(p2) == 0);
    munmap(buf, page);
}

/* ---- DMA: keys, ranges, rights ---- */

static void test_rdma_write_read_roundtrip(void)
{
    char *buf = map_pages(4), out[64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4 * page, RW_ALL);

    CHECK(mr != NULL);
    if (!mr)
        return;
    CHECK(snic_rdma_write(mr->rkey, u(buf) + page - 3, "across pages", 12) == 0);
    CHECK(!memcmp(buf + page - 3, "across pages", 12));
    memcpy(buf + 3 * page, "written by the CPU", 18);
    CHECK(snic_rdma_read(mr->rkey, u(buf) + 3 * page, out, 18) == 0);
    CHECK(!memcmp(out, "written by the CPU", 18));
    CHECK(snic_local_write(mr->lkey, u(buf) + 5, "local", 5) == 0 && !memcmp(buf + 5, "local", 5));
    CHECK(snic_local_read(mr->lkey, u(buf) + 5, out, 5) == 0 && !memcmp(out, "local", 5));
    ibv_dereg_mr(mr);
    munmap(buf, 4 * page);
}

static void test_unknown_or_dead_key_is_einval(void)
{
    char *buf = map_pages(1), out[4];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, RW_ALL);
    uint32_t key = mr ? mr->rkey : 0;

    CHECK(snic_rdma_write(0, u(buf), "x", 1) == EINVAL);
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    CHECK(snic_rdma_write(key, u(buf), "x", 1) == EINVAL);
    CHECK(snic_rdma_read(key, u(buf), out, 1) == EINVAL);
    CHECK(snic_local_read(key, u(buf), out, 1) == EINVAL);
    munmap(buf, page);
}

static void test_range_outside_mr_is_einval(void)
{
    char *buf = map_pages(3), out[8];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf + page, page, RW_ALL);
    uint64_t lo = u(buf) + page, hi = lo + page;

    CHECK(mr != NULL);
    if (!mr)
        return;
    CHECK(snic_rdma_write(mr->rkey, lo - 1, "xy", 2) == EINVAL);
    CHECK(snic_rdma_write(mr->rkey, hi - 1, "xy", 2) == EINVAL);
    CHECK(snic_rdma_read(mr->rkey, hi, out, 1) == EINVAL);
    CHECK(snic_rdma_read(mr->rkey, UINT64_MAX, out, 1) == EINVAL);
    CHECK(snic_rdma_write(mr->rkey, hi - 2, "xy", 2) == 0);
    CHECK(snic_rdma_write(mr->rkey, hi, "", 0) == 0);
    CHECK(buf[page - 1] == 0 && buf[2 * page] == 0); /* nothing leaked outside */
    ibv_dereg_mr(mr);
    munmap(buf, 3 * page);
}

static void test_missing_right_is_eacces(void)
{
    char *buf = map_pages(1), out[4];
    struct ibv_mr *lw = ibv_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *ro = ibv_reg_mr(pd, buf, page, 0);

    CHECK(lw && ro);
    if (!lw || !ro)
        return;
    CHECK(snic_rdma_write(lw->rkey, u(buf), "x", 1) == EACCES);
    CHECK(snic_rdma_read(lw->rkey, u(buf), out, 1) == EACCES);
    CHECK(snic_local_write(lw->lkey, u(buf), "x", 1) == 0);
    CHECK(snic_local_write(ro->lkey, u(buf), "y", 1) == EACCES);
    CHECK(snic_local_read(ro->lkey, u(buf), out, 1) == 0 && out[0] == 'x');
    CHECK(snic_rdma_write(ro->rkey, u(buf) + page, "x", 1) == EINVAL); /* range first */
    ibv_dereg_mr(lw);
    ibv_dereg_mr(ro);
    munmap(buf, page);
}

static void test_iova_differs_from_addr(void)
{
    char *buf = map_pages(4), out[8];
    uint64_t iova = 0x7e5700000000ULL;
    struct ibv_mr *mr = ibv_reg_mr_iova(pd, buf, 4 * page, iova, RW_ALL);
    struct ibv_mr *zb = ibv_reg_mr_iova2(pd, buf + page, page, 0, RW_ALL); /* zero-based */

    CHECK(mr && zb && mr->addr == buf);
    if (!mr || !zb)
        return;
    CHECK(snic_rdma_write(mr->rkey, iova + page + 7, "iova", 4) == 0);
    CHECK(!memcmp(buf + page + 7, "iova", 4));
    CHECK(snic_rdma_write(mr->rkey, u(buf) + 7, "addr", 4) == EINVAL); /* not iova space */
    CHECK(snic_rdma_read(zb->rkey, 7, out, 4) == 0 && !memcmp(out, "iova", 4));
    CHECK(snic_rdma_read(zb->rkey, page, out, 1) == EINVAL);
    ibv_dereg_mr(mr);
    ibv_dereg_mr(zb);
    munmap(buf, 4 * page);
}

/* The point of the NIC: DMA goes to the pinned pages, not to what is mapped now. */
static void test_stale_mr_writes_old_pages_after_remap(void)
{
    char *buf = map_pages(4), *again, out[8];
    struct ibv_mr *mr;
    long pin0 = snic_vmpin_kb(), pin1;

    memset(buf, 'a', 4 * page);
    mr = ibv_reg_mr(pd, buf, 4 * page, RW_ALL);
    CHECK(mr != NULL);
    if (!mr)
        return;
    pin1 = snic_vmpin_kb();
    munmap(buf, 4 * page);
    again = mmap(buf, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0);
    CHECK(again == buf);
    CHECK(snic_vmpin_kb() == pin1); /* the old pages are still pinned */
    CHECK(snic_rdma_write(mr->rkey, u(buf) + 10, "stale", 5) == 0);
    CHECK(again[10] == 0 && again[0] == 0); /* the new mapping saw nothing */
    CHECK(snic_rdma_read(mr->rkey, u(buf) + 8, out, 7) == 0 && !memcmp(out, "aastale", 7));
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(snic_vmpin_kb() == pin0);
    munmap(again, 4 * page);
}

static void test_fresh_mr_after_remap_sees_writes(void)
{
    char *buf = map_pages(4), *again;
    struct ibv_mr *old = ibv_reg_mr(pd, buf, 4 * page, RW_ALL), *fresh;

    munmap(buf, 4 * page);
    again = mmap(buf, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                 -1, 0);
    CHECK(old && again == buf);
    fresh = ibv_reg_mr(pd, again, 4 * page, RW_ALL);
    CHECK(fresh != NULL);
    if (!old || !fresh)
        return;
    CHECK(fresh->rkey != old->rkey);
    CHECK(snic_rdma_write(fresh->rkey, u(again) + 10, "fresh", 5) == 0);
    CHECK(!memcmp(again + 10, "fresh", 5));
    ibv_dereg_mr(old);
    ibv_dereg_mr(fresh);
    munmap(again, 4 * page);
}

/* ---- pinning ---- */

static void test_pinned_bytes_match_vmpin(void)
{
    char *buf = map_pages(80);
    struct snic_stats s0 = stats();
    long pin0 = snic_vmpin_kb();
    struct ibv_mr *a = ibv_reg_mr(pd, buf, 1, 0);                       /* 1 page */
    struct ibv_mr *b = ibv_reg_mr(pd, buf + page + 100, 4 * page, 0);   /* 5 pages */
    struct ibv_mr *c = ibv_reg_mr(pd, buf + 8 * page, 64 * page, 0);     /* 64 pages */
    uint64_t want = 70 * page;

    CHECK(a && b && c);
    CHECKF(stats().pinned_bytes - s0.pinned_bytes == want, "%llu",
           (unsigned long long)(stats().pinned_bytes - s0.pinned_bytes));
    CHECKF((uint64_t)(snic_vmpin_kb() - pin0) * 1024 == want, "VmPin +%ld kB", snic_vmpin_kb() - pin0);
    CHECK(stats().pinned_peak >= stats().pinned_bytes);
    ibv_dereg_mr(a), ibv_dereg_mr(b), ibv_dereg_mr(c);
    CHECK(stats().pinned_bytes == s0.pinned_bytes);
    CHECK(snic_vmpin_kb() == pin0);
    CHECK(stats().pinned_peak >= s0.pinned_bytes + want);
    snic_reset_peak();
    CHECK(stats().pinned_peak == stats().pinned_bytes);
    munmap(buf, 80 * page);
}

/* Over 1 GiB: split over several fixed buffers; DMA crosses the split. */
static void test_mr_larger_than_1gib(void)
{
    size_t len = (1UL << 30) + 2 * page, n = len / page + 1;
    char *buf = map_pages(n), out[16];
    long pin0 = snic_vmpin_kb();
    struct ibv_mr *mr = ibv_reg_mr(pd, buf + 100, len, RW_ALL);
    uint64_t split = u(buf) + (1UL << 30);

    CHECK(mr != NULL);
    if (mr) {
        CHECK((uint64_t)(snic_vmpin_kb() - pin0) * 1024 == (len / page + 1) * page);
        CHECK(snic_rdma_write(mr->rkey, split - 5, "0123456789", 10) == 0);
        CHECK(!memcmp(buf + (1UL << 30) - 5, "0123456789", 10));
        memcpy(buf + len + 90, "tail", 4);
        CHECK(snic_rdma_read(mr->rkey, u(buf) + 100 + len - 10, out, 10) == 0);
        CHECK(!memcmp(out, "tail", 4));
        ibv_dereg_mr(mr);
    }
    CHECK(snic_vmpin_kb() == pin0);
    munmap(buf, n * page);
}

/* More live MRs than one io_uring holds (16384 slots each). */
static void test_100k_live_mrs(void)
{
    enum { N = 100000, PAGES = 64 };
    struct ibv_mr **mrs = calloc(N, sizeof(*mrs));
    char *buf = map_pages(PAGES), out[4];
    struct snic_stats s0 = stats();
    long pin0 = snic_vmpin_kb();
    int made = 0;

    for (int i = 0; i < N; i++) {
        mrs[i] = ibv_reg_mr(pd, buf + (size_t)(i % PAGES) * page, page, RW_ALL);
        if (!mrs[i])
            break;
        made++;
    }
    CHECKF(made == N, "stopped at %d: %s", made, strerror(errno));
    CHECK(stats().live_mrs == s0.live_mrs + (uint64_t)made);
    CHECK(stats().pinned_bytes == s0.pinned_bytes + (uint64_t)made * page);
    CHECK((uint64_t)(snic_vmpin_kb() - pin0) * 1024 == (uint64_t)made * page);
    /* The last MRs live in the last ring; the first ring pins the same pages again. */
    for (int i = made - 3; i < made && i >= 0; i++) {
        struct ibv_mr *twin = mrs[i % 16384];

        CHECK(snic_rdma_write(mrs[i]->rkey, u(mrs[i]->addr) + 16, &i, sizeof(i)) == 0);
        CHECK(!memcmp((char *)mrs[i]->addr + 16, &i, sizeof(i)));
        CHECK(twin->addr == mrs[i]->addr);
        CHECK(snic_rdma_read(twin->rkey, u(twin->addr) + 16, out, 4) == 0 && !memcmp(out, &i, 4));
    }
    for (int i = 0; i < made; i++)
        CHECK(ibv_dereg_mr(mrs[i]) == 0);
    CHECK(stats().live_mrs == s0.live_mrs && stats().pinned_bytes == s0.pinned_bytes);
    CHECK(snic_vmpin_kb() == pin0);
    free(mrs);
    munmap(buf, PAGES * page);
}

/* ---- rereg ---- */

static void test_rereg_translation(void)
{
    char *b1 = map_pages(4), *b2 = map_pages(4);
    struct ibv_mr *mr = ibv_reg_mr(pd, b1, 4 * page, RW_ALL);
    struct snic_stats s0 = stats();
    uint32_t old_key;

    CHECK(mr != NULL);
    if (!mr)
        return;
    old_key = mr->rkey;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b2, 2 * page, 0) == 0);
    CHECK(mr->addr == b2 && mr->length == 2 * page && mr->rkey != old_key);
    CHECK(mr->lkey == mr->rkey && mr->pd == pd);
    CHECK(snic_rdma_write(old_key, u(b1), "x", 1) == EINVAL);
    CHECK(snic_rdma_write(mr->rkey, u(b2) + 1, "moved", 5) == 0 && !memcmp(b2 + 1, "moved", 5));
    CHECK(snic_rdma_write(mr->rkey, u(b2) + 2 * page, "x", 1) == EINVAL);
    CHECK(stats().pinned_bytes == s0.pinned_bytes - 2 * page);
    CHECK(stats().live_mrs == s0.live_mrs && stats().reg_calls == s0.reg_calls);
    /* A failed translation leaves the MR as it was. */
    munmap(b1, 4 * page);
    errno = 0;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b1, page, 0) ==
          IBV_REREG_MR_ERR_CMD && errno == EFAULT);
    CHECK(mr->addr == b2 && snic_rdma_write(mr->rkey, u(b2), "y", 1) == 0 && b2[0] == 'y');
    ibv_dereg_mr(mr);
    munmap(b2, 4 * page);
}

static void test_rereg_access_and_pd(void)
{
    char *buf = map_pages(1);
    struct ibv_pd *p1 = ibv_alloc_pd(ctx), *p2 = ibv_alloc_pd(ctx);
    struct ibv_mr *mr = ibv_reg_mr(p1, buf, page, RW_ALL);

    CHECK(p1 && p2 && mr);
    if (!mr)
        return;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0);
    CHECK(snic_rdma_write(mr->rkey, u(buf), "x", 1) == EACCES);
    CHECK(snic_local_write(mr->lkey, u(buf), "x", 1) == 0);
    errno = 0;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
          IBV_REREG_MR_ERR_CMD && errno == EINVAL);
    CHECK(snic_local_write(mr->lkey, u(buf), "y", 1) == 0); /* unchanged */
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, p2, NULL, 0, 0) == 0 && mr->pd == p2);
    CHECK(ibv_dealloc_pd(p2) == EBUSY);
    CHECK(ibv_dealloc_pd(p1) == 0);
    errno = 0;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD &&
          errno == EINVAL);
    ibv_dereg_mr(mr);
    CHECK(ibv_dealloc_pd(p2) == 0);
    munmap(buf, page);
}

static void test_rereg_input_errors(void)
{
    char *buf = map_pages(1);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);

    CHECK(mr != NULL);
    if (!mr)
        return;
    errno = 0;
    CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
          IBV_REREG_MR_ERR_INPUT);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf, 0, 0) ==
          IBV_REREG_MR_ERR_INPUT);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, page, 0) ==
          IBV_REREG_MR_ERR_INPUT);
    errno = 0;
    CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL);
    CHECK(snic_local_write(mr->lkey, u(buf), "z", 1) == 0);
    ibv_dereg_mr(mr);
    munmap(buf, page);
}

/* ---- threads ---- */

struct worker {
    pthread_t tid;
    int failures;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    char *buf = map_pages(16), out[8];

    for (int i = 0; i < 400; i++) {
        size_t off = (size_t)(i % 8) * page + (size_t)(i % 7), len = page + (size_t)(i % 5) * 300;
        struct ibv_mr *mr = ibv_reg_mr(pd, buf + off, len, RW_ALL);
        uint32_t v = (uint32_t)i * 2654435761u;

        if (!mr) {
            w->failures++;
            continue;
        }
        if (snic_rdma_write(mr->rkey, u(buf) + off + 1, &v, 4) || memcmp(buf + off + 1, &v, 4))
            w->failures++;
        if (snic_rdma_read(mr->rkey, u(buf) + off + 1, out, 4) || memcmp(out, &v, 4))
            w->failures++;
        if (ibv_dereg_mr(mr))
            w->failures++;
    }
    munmap(buf, 16 * page);
    return NULL;
}

static void test_threads_register_concurrently(void)
{
    struct worker w[4] = { 0 };
    struct snic_stats s0 = stats();

    for (int i = 0; i < 4; i++)
        pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(w[i].tid, NULL);
        CHECKF(w[i].failures == 0, "thread %d: %d failures", i, w[i].failures);
    }
    CHECK(stats().live_mrs == s0.live_mrs && stats().reg_calls == s0.reg_calls + 1600);
    CHECK(stats().pinned_bytes == s0.pinned_bytes);
}

/* ---- fork ---- */

static void test_fork_status_and_late_fork_init(void)
{
    char *buf = map_pages(1);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, 0);

    CHECK(mr != NULL);
    ibv_dereg_mr(mr);
    /* Default: io_uring pins are copied for a child at fork, as with copy-on-fork RDMA. */
    CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
    CHECK(ibv_fork_init() == EINVAL); /* rdma-core: too late after a registration */
    munmap(buf, page);
}

/* The parent keeps its pinned pages across fork even if it writes while the child
 * lives (the kernel gives the child the copies): what IBV_FORK_UNNEEDED promises. */
static void test_fork_parent_keeps_pinned_pages(void)
{
    char *buf = map_pages(1), out[8];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, RW_ALL);
    int go[2];
    pid_t pid;
    char c;

    CHECK(mr != NULL && pipe(go) == 0);
    if (!mr)
        return;
    memcpy(buf, "before", 6);
    pid = fork();
    if (pid == 0) {
        ssize_t r = read(go[0], &c, 1);

        _exit(r == 1 && !memcmp(buf, "before", 6) ? 0 : 1);
    }
    memcpy(buf, "parent", 6);
    CHECK(snic_local_read(mr->lkey, u(buf), out, 6) == 0 && !memcmp(out, "parent", 6));
    CHECK(snic_rdma_write(mr->rkey, u(buf), "remote", 6) == 0 && !memcmp(buf, "remote", 6));
    CHECK(write(go[1], "g", 1) == 1);
    CHECK(wait_child(pid) == 0);
    close(go[0]);
    close(go[1]);
    ibv_dereg_mr(mr);
    munmap(buf, page);
}

static int fork_child_checks(struct ibv_mr *inherited, char *buf)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *c = ibv_open_device(list[0]);
    struct ibv_pd *p = c ? ibv_alloc_pd(c) : NULL;
    struct ibv_mr *mr = p ? ibv_reg_mr(p, buf, page, RW_ALL) : NULL;
    struct snic_stats s = stats();

    if (s.live_mrs != 1 || s.live_pds != 1)
        return child_fail("child stats: %llu MRs, %llu PDs", (unsigned long long)s.live_mrs,
                          (unsigned long long)s.live_pds);
    if (snic_rdma_write(inherited->rkey, u(buf), "c", 1) != EINVAL)
        return child_fail("inherited rkey works in the child");
    if (ibv_dereg_mr(inherited) != EIO || ibv_alloc_pd(ctx) != NULL)
        return child_fail("inherited objects usable in the child");
    if (!mr || snic_rdma_write(mr->rkey, u(buf), "child", 5) || memcmp(buf, "child", 5))
        return child_fail("own MR in the child failed");
    if (ibv_dereg_mr(mr) || ibv_dealloc_pd(p) || ibv_close_device(c))
        return child_fail("child cleanup failed");
    ibv_free_device_list(list);
    return 0;
}

/* A child gets its own NIC: inherited objects fail (EIO) without touching the parent's,
 * the parent's keys are unknown, and the child can register its own memory. */
static void test_fork_child_has_own_nic(void)
{
    char *buf = map_pages(1), out[8];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, RW_ALL);
    struct snic_stats s0 = stats();
    pid_t pid;

    CHECK(mr != NULL);
    if (!mr)
        return;
    memcpy(buf, "parent", 6);
    fflush(NULL);
    pid = fork();
    if (pid == 0)
        _exit(fork_child_checks(mr, buf));
    CHECK(wait_child(pid) == 0);
    CHECK(snic_rdma_read(mr->rkey, u(buf), out, 6) == 0 && !memcmp(out, "parent", 6));
    CHECK(snic_rdma_write(mr->rkey, u(buf), "again", 5) == 0 && !memcmp(buf, "again", 5));
    CHECK(stats().live_mrs == s0.live_mrs && stats().iova2_entries == s0.iova2_entries);
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(buf, page);
}

/* ---- limits ---- */

static int memlock_child(void)
{
    struct rlimit lim = { 128 << 10, 128 << 10 };
    struct ibv_device **list;
    struct ibv_context *c;
    struct ibv_pd *p;
    struct ibv_mr *a, *b;
    char *buf;

    uid_t id = check_private_uid();

    if (setrlimit(RLIMIT_MEMLOCK, &lim) || setgroups(0, NULL) || setgid(id) || setuid(id))
        return child_fail("cannot become user %u: %s", (unsigned)id, strerror(errno));
    buf = map_pages(64);
    list = ibv_get_device_list(NULL);
    c = ibv_open_device(list[0]);
    p = c ? ibv_alloc_pd(c) : NULL;
    a = p ? ibv_reg_mr(p, buf, 8 * page, IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (!a)
        return child_fail("32 KiB under a 128 KiB limit failed: %s", strerror(errno));
    errno = 0;
    b = ibv_reg_mr(p, buf + 16 * page, 32 * page, IBV_ACCESS_LOCAL_WRITE);
    if (b || errno != ENOMEM)
        return child_fail("160 KiB pinned under a 128 KiB limit: %p, %s", (void *)b,
                          strerror(errno));
    if (ibv_dereg_mr(a))
        return child_fail("dereg failed");
    b = ibv_reg_mr(p, buf + 16 * page, 16 * page, IBV_ACCESS_LOCAL_WRITE);
    if (!b)
        return child_fail("64 KiB after unpinning failed: %s", strerror(errno));
    if (ibv_dereg_mr(b) || ibv_dealloc_pd(p) || ibv_close_device(c))
        return child_fail("cleanup failed");
    ibv_free_device_list(list);
    return 0;
}

/* Non-root pins are charged to RLIMIT_MEMLOCK; past it registration fails ENOMEM. */
static void test_memlock_limit_unprivileged(void)
{
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid == 0)
        _exit(memlock_child());
    CHECK(wait_child(pid) == 0);
}

/* ---- environment (child modes) ---- */

static void test_reg_cost_at_least_modelled(void)
{
    const char *env[] = { "SNIC_REG_COST_NS=16000,0.06", NULL };
    char err[4096];

    CHECK(spawn_self("cost", env, err, sizeof(err)) == 0);
}

static void test_reg_cost_bad_value_warns_once(void)
{
    const char *env[] = { "SNIC_REG_COST_NS=16000,fast", NULL };
    char err[4096];

    CHECK(spawn_self("cost-bad", env, err, sizeof(err)) == 0);
    CHECKF(count_lines_with(err, "SNIC_REG_COST_NS") == 1, "stderr: %s", err);
}

static void test_fork_safe_dontfork_ranges(void)
{
    const char *env[] = { "RDMAV_FORK_SAFE=1", "SNIC_COPY_ON_FORK=0", NULL };
    char err[4096];

    CHECK(spawn_self("fork-safe", env, err, sizeof(err)) == 0);
}

static void test_fork_ranges_match_page_refcounts(void)
{
    const char *env[] = { "RDMAV_FORK_SAFE=1", NULL };
    char err[4096];

    CHECK(spawn_self("fork-ranges", env, err, sizeof(err)) == 0);
}

static void test_fork_init_before_registration(void)
{
    const char *env[] = { "SNIC_COPY_ON_FORK=0", NULL };
    char err[4096];

    CHECK(spawn_self("fork-init", env, err, sizeof(err)) == 0);
}

static int mode_cost(void)
{
    size_t sizes[] = { page, 1 << 20, 4 << 20 }; /* within the default 8 MiB memlock */

    for (size_t i = 0; i < 3; i++) {
        char *buf = map_pages(sizes[i] / page);
        uint64_t model = 16000 + sizes[i] * 6 / 100, t0 = now_ns(), took;
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizes[i], IBV_ACCESS_LOCAL_WRITE);

        took = now_ns() - t0;
        if (!mr)
            return child_fail("reg failed: %s", strerror(errno));
        if (took < model)
            return child_fail("%zu bytes took %llu ns < %llu ns", sizes[i],
                              (unsigned long long)took, (unsigned long long)model);
        ibv_dereg_mr(mr);
        munmap(buf, sizes[i]);
    }
    return 0;
}

static int mode_cost_bad(void)
{
    char *buf = map_pages(1);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);

    return mr && !ibv_dereg_mr(mr) ? 0 : child_fail("registration failed");
}

/* Bit i: page i of buf is in a mapping with VM_DONTCOPY ("dc" in smaps VmFlags). */
static uint64_t dontfork_mask(const char *buf, int pages)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    uintptr_t lo = 0, hi = 0, b = (uintptr_t)buf;
    uint64_t mask = 0;
    char line[512];

    while (f && fgets(line, sizeof(line), f)) {
        unsigned long l, h;

        if (sscanf(line, "%lx-%lx", &l, &h) == 2) {
            lo = l;
            hi = h;
        } else if (!strncmp(line, "VmFlags:", 8) && strstr(line, " dc")) {
            for (int i = 0; i < pages; i++)
                if (b + (size_t)i * page >= lo && b + (size_t)i * page < hi)
                    mask |= 1ULL << i;
        }
    }
    if (f)
        fclose(f);
    return mask;
}

static int mode_fork_safe(void)
{
    char *buf = map_pages(8);
    struct ibv_mr *a, *b;
    uint64_t m;
    pid_t pid;

    if (ibv_is_fork_initialized() != IBV_FORK_ENABLED)
        return child_fail("RDMAV_FORK_SAFE=1 did not enable fork safety");
    a = ibv_reg_mr(pd, buf, 4 * page, IBV_ACCESS_LOCAL_WRITE);           /* pages 0-3 */
    b = ibv_reg_mr(pd, buf + 2 * page + 9, 3 * page, IBV_ACCESS_LOCAL_WRITE); /* 2-5 */
    if (!a || !b)
        return child_fail("reg failed: %s", strerror(errno));
    if ((m = dontfork_mask(buf, 8)) != 0x3f)
        return child_fail("DONTFORK pages %#llx, want 0x3f", (unsigned long long)m);
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        unsigned char vec;

        /* mincore fails ENOMEM where nothing is mapped: the pages were not inherited. */
        _exit(mincore(buf, page, &vec) == -1 && errno == ENOMEM &&
                      mincore(buf + 6 * page, page, &vec) == 0
                  ? 0
                  : 1);
    }
    if (wait_child(pid) != 0)
        return child_fail("a DONTFORK page was inherited by a child");
    ibv_dereg_mr(a);
    if ((m = dontfork_mask(buf, 8)) != 0x3c)
        return child_fail("after one dereg DONTFORK pages %#llx, want 0x3c", (unsigned long long)m);
    ibv_dereg_mr(b);
    if ((m = dontfork_mask(buf, 8)) != 0)
        return child_fail("after both deregs DONTFORK pages %#llx, want 0", (unsigned long long)m);
    /* A failed registration gives its pages back. */
    munmap(buf + 7 * page, page);
    errno = 0;
    if (ibv_reg_mr(pd, buf + 6 * page, 2 * page, 0) || dontfork_mask(buf, 7))
        return child_fail("failed reg left DONTFORK pages (errno %d)", errno);
    return 0;
}

static int mode_fork_init(void)
{
    char *buf = map_pages(1);
    struct ibv_mr *mr;

    if (ibv_is_fork_initialized() != IBV_FORK_DISABLED)
        return child_fail("fork safety on before ibv_fork_init");
    if (ibv_fork_init() || ibv_fork_init())
        return child_fail("ibv_fork_init failed");
    if (ibv_is_fork_initialized() != IBV_FORK_ENABLED)
        return child_fail("not IBV_FORK_ENABLED after ibv_fork_init");
    mr = ibv_reg_mr(pd, buf, page, IBV_ACCESS_LOCAL_WRITE);
    if (!mr || !dontfork_mask(buf, 1) || ibv_dereg_mr(mr) || dontfork_mask(buf, 1))
        return child_fail("registration did not toggle DONTFORK");
    return 0;
}

/* Random overlapping registrations against a per-page reference count (fixed seed). */
static int mode_fork_ranges(void)
{
    enum { PAGES = 64, LIVE = 12, STEPS = 400 };
    char *buf = map_pages(PAGES);
    struct ibv_mr *live[LIVE] = { 0 };
    int refs[PAGES] = { 0 };
    unsigned seed = 12345;

    for (int step = 0; step < STEPS; step++) {
        int slot = rand_r(&seed) % LIVE;
        struct ibv_mr *mr = live[slot];
        size_t first = (size_t)(mr ? (char *)mr->addr - buf : 0) / page, n;
        uint64_t want = 0;

        if (mr) {
            n = ((size_t)((char *)mr->addr - buf) + mr->length + page - 1) / page - first;
            if (ibv_dereg_mr(mr))
                return child_fail("dereg failed");
            live[slot] = NULL;
            for (size_t i = first; i < first + n; i++)
                refs[i]--;
        } else {
            size_t off = (size_t)(rand_r(&seed) % (PAGES - 8)) * page + (size_t)(rand_r(&seed) % 64);
            size_t len = (size_t)(rand_r(&seed) % (8 * (int)page - 64)) + 1;

            live[slot] = ibv_reg_mr(pd, buf + off, len, 0);
            if (!live[slot])
                return child_fail("reg failed: %s", strerror(errno));
            for (size_t i = off / page; i < (off + len + page - 1) / page; i++)
                refs[i]++;
        }
        for (int i = 0; i < PAGES; i++)
            want |= (uint64_t)(refs[i] > 0) << i;
        if (dontfork_mask(buf, PAGES) != want)
            return child_fail("step %d: DONTFORK pages %#llx, want %#llx", step,
                              (unsigned long long)dontfork_mask(buf, PAGES),
                              (unsigned long long)want);
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i])
            ibv_dereg_mr(live[i]);
    return dontfork_mask(buf, PAGES) ? child_fail("pages left DONTFORK") : 0;
}

static int run_mode(const char *mode)
{
    if (!strcmp(mode, "cost"))
        return mode_cost();
    if (!strcmp(mode, "cost-bad"))
        return mode_cost_bad();
    if (!strcmp(mode, "fork-safe"))
        return mode_fork_safe();
    if (!strcmp(mode, "fork-init"))
        return mode_fork_init();
    if (!strcmp(mode, "fork-ranges"))
        return mode_fork_ranges();
    return child_fail("unknown mode %s", mode);
}

/* Last: every test released what it made, so the device closes with no MR, no pd and
 * nothing pinned. */
static void test_nothing_left_at_close(void)
{
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    struct snic_stats s = stats();
    CHECKF(s.live_mrs == 0 && s.live_pds == 0 && s.pinned_bytes == 0, "%llu MRs, %llu pds, %llu bytes pinned",
           (unsigned long long)s.live_mrs, (unsigned long long)s.live_pds, (unsigned long long)s.pinned_bytes);
}

int main(int argc, char **argv)
{
    struct ibv_device **list;
    int ret;

    page = (size_t)sysconf(_SC_PAGESIZE);
    /* ibv_get_device_list before anything: that is when RDMAV_FORK_SAFE is read. */
    list = ibv_get_device_list(NULL);
    ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
    pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    ibv_free_device_list(list);
    if (!pd) {
        fprintf(stderr, "cannot open the software NIC: %s\n", strerror(errno));
        return 1;
    }
    if (argc > 1) {
        ret = run_mode(argv[1]);
        ibv_dealloc_pd(pd);
        ibv_close_device(ctx);
        return ret;
    }

    RUN(test_device_list);
    RUN(test_context_is_verbs_context);
    RUN(test_query_device);
    RUN(test_query_port_gid_pkey);
    RUN(test_strings_and_rates);
    RUN(test_missing_extended_ops_fail_eopnotsupp);
    RUN(test_unimplemented_calls_fail_loudly);
    RUN(test_close_device_busy_with_pd);
    RUN(test_reg_fills_mr);
    RUN(test_reg_mr_and_iova_enter_iova2_once);
    RUN(test_reg_rejects_like_the_kernel);
    RUN(test_dealloc_pd_busy_with_mr);
    RUN(test_rdma_write_read_roundtrip);
    RUN(test_unknown_or_dead_key_is_einval);
    RUN(test_range_outside_mr_is_einval);
    RUN(test_missing_right_is_eacces);
    RUN(test_iova_differs_from_addr);
    RUN(test_stale_mr_writes_old_pages_after_remap);
    RUN(test_fresh_mr_after_remap_sees_writes);
    RUN(test_pinned_bytes_match_vmpin);
    if (!pin_short((1ULL << 30) + (1 << 20)))
        RUN(test_mr_larger_than_1gib);
    else
        check_skip("test_mr_larger_than_1gib", pin_short((1ULL << 30) + (1 << 20)));
    if (!pin_short(100000ULL * 4096))
        RUN(test_100k_live_mrs);
    else
        check_skip("test_100k_live_mrs", pin_short(100000ULL * 4096));
    RUN(test_rereg_translation);
    RUN(test_rereg_access_and_pd);
    RUN(test_rereg_input_errors);
    RUN(test_threads_register_concurrently);
    RUN(test_fork_status_and_late_fork_init);
    RUN(test_fork_parent_keeps_pinned_pages);
    RUN(test_fork_child_has_own_nic);
    if (geteuid() == 0)
        RUN(test_memlock_limit_unprivileged);
    else
        check_skip("test_memlock_limit_unprivileged", "needs root to become an unprivileged user");
    RUN(test_reg_cost_at_least_modelled);
    RUN(test_reg_cost_bad_value_warns_once);
    RUN(test_fork_safe_dontfork_ranges);
    RUN(test_fork_ranges_match_page_refcounts);
    RUN(test_fork_init_before_registration);
    RUN(test_nothing_left_at_close);
    CHECK_EXIT();
}
