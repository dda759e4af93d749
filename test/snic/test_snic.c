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
#include <sched.h>
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
    stub_ptr = ibv_create_comp_channel(ctx);
    stub_errno = errno;
    stub_ret = ibv_destroy_ah(NULL);
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
    CHECKF(count_lines_with(err, "ibv_create_comp_channel") == 1, "stderr: %s", err);
    CHECKF(count_lines_with(err, "ibv_destroy_ah") == 1, "stderr: %s", err);
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

/* ---- queue pairs: loopback RC through the MRs' pinned pages ---- */

/* Two connected RC QPs of pd: qp[0] posts, qp[1] is the target. Both QPs' sends complete
 * on scq, their receives on rcq. */
struct loop {
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp[2];
};

#define QP_SGE    4
#define QP_INLINE 64

static struct ibv_qp *qp_make(struct ibv_pd *p, struct loop *l, struct ibv_srq *srq,
                              uint32_t max_send_wr)
{
    struct ibv_qp_init_attr a = {
        .send_cq = l->scq, .recv_cq = l->rcq, .srq = srq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = max_send_wr, .max_recv_wr = 8, .max_send_sge = QP_SGE,
                 .max_recv_sge = QP_SGE, .max_inline_data = QP_INLINE },
    };

    return ibv_create_qp(p, &a);
}

/* RESET -> INIT -> RTR -> RTS towards QP dest, granting the peer access; 0 or the error
 * of the modify that failed. */
static int qp_connect(struct ibv_qp *qp, uint32_t dest, unsigned access)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

    if (rc)
        return rc;
    a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dest,
                              .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
                              .ah_attr = { .dlid = 1, .port_num = 1 } };
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return rc;
    a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                              .max_rd_atomic = 1 };
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* To RESET or ERR: transitions that take nothing but the state. */
static int qp_move(struct ibv_qp *qp, enum ibv_qp_state state)
{
    struct ibv_qp_attr a = { .qp_state = state };

    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* a and b connected to each other, each granting the other everything. */
static bool qp_pair(struct ibv_qp *a, struct ibv_qp *b)
{
    return !qp_connect(a, b->qp_num, RW_ALL) && !qp_connect(b, a->qp_num, RW_ALL);
}

/* The target grants target_access; qp[0] grants everything. */
static bool loop_open(struct loop *l, unsigned target_access)
{
    memset(l, 0, sizeof(*l));
    l->scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    l->rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    if (!l->scq || !l->rcq)
        return false;
    l->qp[0] = qp_make(pd, l, NULL, 16);
    l->qp[1] = qp_make(pd, l, NULL, 16);
    return l->qp[0] && l->qp[1] && !qp_connect(l->qp[0], l->qp[1]->qp_num, RW_ALL) &&
           !qp_connect(l->qp[1], l->qp[0]->qp_num, target_access);
}

static void loop_close(struct loop *l)
{
    for (int i = 0; i < 2; i++)
        if (l->qp[i])
            CHECK(ibv_destroy_qp(l->qp[i]) == 0);
    if (l->scq)
        CHECK(ibv_destroy_cq(l->scq) == 0);
    if (l->rcq)
        CHECK(ibv_destroy_cq(l->rcq) == 0);
}

static struct ibv_sge sge_at(const struct ibv_mr *mr, const void *addr, uint32_t len)
{
    return (struct ibv_sge){ .addr = u(addr), .length = len, .lkey = mr ? mr->lkey : 0 };
}

static int post_wr(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_sge *sge, int n,
                   uint32_t rkey, uint64_t remote_addr, unsigned flags, uint64_t wr_id)
{
    struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = n, .opcode = op,
                              .send_flags = flags, .imm_data = htobe32(0xc0ffee) },
                       *bad = NULL;

    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

static int post_recv_wr(struct ibv_qp *qp, struct ibv_sge *sge, int n, uint64_t wr_id)
{
    struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = n }, *bad = NULL;

    return ibv_post_recv(qp, &wr, &bad);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;

    return ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) ? (enum ibv_qp_state)-1 : a.qp_state;
}

/* The one completion on cq, or status -1 if there is not exactly one. */
static struct ibv_wc poll_one(struct ibv_cq *cq)
{
    struct ibv_wc wc[2];

    if (ibv_poll_cq(cq, 2, wc) != 1)
        wc[0] = (struct ibv_wc){ .status = (enum ibv_wc_status)-1 };
    return wc[0];
}

static void test_qp_lifecycle_and_limits(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *c2 = ibv_open_device(list[0]);
    struct ibv_pd *p2 = ibv_alloc_pd(ctx);
    struct loop l = { .scq = ibv_create_cq(ctx, 8, NULL, NULL, 0) };
    struct ibv_qp_init_attr a = { .send_cq = l.scq, .recv_cq = l.scq, .qp_type = IBV_QPT_RC,
                                  .cap = { .max_send_wr = 4, .max_recv_wr = 4 } };
    struct ibv_cq *other = c2 ? ibv_create_cq(c2, 1, NULL, NULL, 0) : NULL;
    struct ibv_device_attr dev;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr qa;

    ibv_free_device_list(list);
    CHECK(l.scq && l.scq->cqe == 8 && l.scq->context == ctx && other && p2);
    if (!l.scq || !other || !p2)
        return;
    l.qp[0] = ibv_create_qp(p2, &a);
    CHECK(l.qp[0] && a.cap.max_send_wr == 4 && a.cap.max_recv_wr == 4 && a.cap.max_send_sge >= 1);
    l.qp[1] = ibv_create_qp(p2, &a);
    CHECK(l.qp[1] && l.qp[0] && l.qp[0]->qp_num != l.qp[1]->qp_num && l.qp[0]->qp_num > 1);
    if (!l.qp[0] || !l.qp[1])
        return;
    CHECK(l.qp[0]->state == IBV_QPS_RESET && l.qp[0]->pd == p2 && l.qp[0]->context == ctx);

    /* The kernel's transition table: nothing skips a state, and a transition takes what
     * it needs, no more, with valid values. */
    qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
    CHECK(ibv_modify_qp(l.qp[0], &qa, IBV_QP_STATE) == EINVAL);
    qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
    CHECK(ibv_modify_qp(l.qp[0], &qa, IBV_QP_STATE | IBV_QP_PORT) == EINVAL);
    CHECK(ibv_modify_qp(l.qp[0], &qa, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX |
                                          IBV_QP_ACCESS_FLAGS | IBV_QP_TIMEOUT) == EINVAL);
    qa.port_num = 2;
    CHECK(ibv_modify_qp(l.qp[0], &qa, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX |
                                          IBV_QP_ACCESS_FLAGS) == EINVAL);
    CHECK(l.qp[0]->state == IBV_QPS_RESET);
    CHECK(qp_connect(l.qp[0], l.qp[1]->qp_num, RW_ALL) == 0);
    CHECK(ibv_query_qp(l.qp[0], &qa, IBV_QP_STATE, &ia) == 0);
    CHECK(qa.qp_state == IBV_QPS_RTS && l.qp[0]->state == IBV_QPS_RTS);
    CHECK(qa.dest_qp_num == l.qp[1]->qp_num && qa.qp_access_flags == RW_ALL && qa.timeout == 14 &&
          qa.max_dest_rd_atomic == 1 && qa.path_mtu == IBV_MTU_4096 && qa.cap.max_send_wr == 4);
    CHECK(ia.send_cq == l.scq && ia.qp_type == IBV_QPT_RC && ia.cap.max_recv_wr == 4);
    qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET };
    CHECK(ibv_modify_qp(l.qp[0], &qa, IBV_QP_STATE) == 0 && qp_state(l.qp[0]) == IBV_QPS_RESET);
    CHECK(ibv_query_qp(l.qp[0], &qa, IBV_QP_DEST_QPN, &ia) == 0 && qa.dest_qp_num == 0);

    /* Only RC; limits and foreign objects refused as a device refuses them. */
    a.qp_type = IBV_QPT_UD;
    errno = 0;
    CHECK(ibv_create_qp(p2, &a) == NULL && errno == EOPNOTSUPP);
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_sge = 1000;
    errno = 0;
    CHECK(ibv_create_qp(p2, &a) == NULL && errno == EINVAL);
    a.cap.max_send_sge = 1;
    a.recv_cq = other;
    errno = 0;
    CHECK(ibv_create_qp(p2, &a) == NULL && errno == EINVAL);
    a.recv_cq = NULL;
    errno = 0;
    CHECK(ibv_create_qp(p2, &a) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 4, NULL, NULL, 1) == NULL && errno == EINVAL);
    CHECK(ibv_query_device(ctx, &dev) == 0);
    CHECK(dev.max_qp > 0 && dev.max_qp_wr > 0 && dev.max_sge >= QP_SGE && dev.max_cq > 0 &&
          dev.max_cqe > 0 && dev.max_srq > 0 && dev.max_srq_wr > 0);
    CHECK(ibv_query_qp_data_in_order(l.qp[0], IBV_WR_RDMA_WRITE, 0) == 1);

    /* What a QP uses stays until it goes; a CQ keeps its context open. */
    CHECK(ibv_destroy_cq(l.scq) == EBUSY);
    CHECK(ibv_dealloc_pd(p2) == EBUSY);
    CHECK(ibv_close_device(c2) == EBUSY);
    loop_close(&l);
    CHECK(ibv_dealloc_pd(p2) == 0);
    CHECK(ibv_destroy_cq(other) == 0 && ibv_close_device(c2) == 0);
}

static void test_qp_rdma_write_and_read(void)
{
    char *src = map_pages(2), *dst = map_pages(2);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, 2 * page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 2 * page, RW_ALL);
    struct ibv_sge sge[2];
    struct ibv_wc wc;
    struct loop l;

    CHECK(smr && dmr && loop_open(&l, RW_ALL));
    if (!smr || !dmr || !l.qp[1])
        return;
    memcpy(src, "hello, ", 7);
    memcpy(src + page, "world", 5);
    /* Gathered from two sges, written across a page boundary of the target. */
    sge[0] = sge_at(smr, src, 7);
    sge[1] = sge_at(smr, src + page, 5);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, sge, 2, dmr->rkey, u(dst) + page - 4,
                  IBV_SEND_SIGNALED, 7) == 0);
    CHECK(!memcmp(dst + page - 4, "hello, world", 12) && dst[page - 5] == 0 && dst[page + 8] == 0);
    wc = poll_one(l.scq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 7 && wc.opcode == IBV_WC_RDMA_WRITE &&
          wc.qp_num == l.qp[0]->qp_num);
    CHECK(ibv_poll_cq(l.rcq, 1, &wc) == 0); /* a plain WRITE consumes no receive */

    /* READ it back, scattered over two sges. */
    sge[0] = sge_at(smr, src + 100, 5);
    sge[1] = sge_at(smr, src + page + 100, 7);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_READ, sge, 2, dmr->rkey, u(dst) + page - 4,
                  IBV_SEND_SIGNALED, 8) == 0);
    CHECK(!memcmp(src + 100, "hello", 5) && !memcmp(src + page + 100, ", world", 7));
    wc = poll_one(l.scq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 8 && wc.opcode == IBV_WC_RDMA_READ &&
          wc.byte_len == 12);
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, 2 * page);
    munmap(dst, 2 * page);
}

/* The point of the NIC, through QPs: a WRITE into a stale MR lands in its old pages, and
 * a WRITE out of a stale MR carries what its old pages hold, never what is mapped now. */
static void test_qp_stale_mr_moves_old_pages(void)
{
    char *src = map_pages(1), *dst = map_pages(1), *out = map_pages(1), *again;
    struct ibv_mr *smr, *dmr, *omr;
    struct ibv_sge sge;
    struct loop l;
    char peek[8];

    memset(dst, 'o', page);
    memcpy(src, "stale", 5);
    smr = ibv_reg_mr(pd, src, page, RW_ALL);
    dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    omr = ibv_reg_mr(pd, out, page, RW_ALL);
    CHECK(smr && dmr && omr && loop_open(&l, RW_ALL));
    if (!smr || !dmr || !omr || !l.qp[1])
        return;
    munmap(dst, page);
    again = mmap(dst, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(again == dst);
    sge = sge_at(smr, src, 5);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, dmr->rkey, u(dst) + 10, IBV_SEND_SIGNALED,
                  1) == 0);
    CHECK(poll_one(l.scq).status == IBV_WC_SUCCESS);
    CHECK(again[10] == 0); /* the new mapping saw nothing */
    CHECK(snic_rdma_read(dmr->rkey, u(dst) + 8, peek, 7) == 0 && !memcmp(peek, "oostale", 7));

    munmap(src, page);
    CHECK(mmap(src, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          src);
    memcpy(src, "fresh", 5);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, omr->rkey, u(out), IBV_SEND_SIGNALED, 2) == 0);
    CHECK(poll_one(l.scq).status == IBV_WC_SUCCESS);
    CHECK(!memcmp(out, "stale", 5)); /* the old pages, not the CPU's "fresh" */
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    ibv_dereg_mr(omr);
    munmap(src, page);
    munmap(again, page);
    munmap(out, page);
}

static void test_qp_send_scatters_into_oldest_receive(void)
{
    char *src = map_pages(1), *dst = map_pages(2);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 2 * page, RW_ALL);
    struct ibv_sge ssge, rsge[2];
    struct ibv_wc wc;
    struct loop l;

    CHECK(smr && dmr && loop_open(&l, RW_ALL));
    if (!smr || !dmr || !l.qp[1])
        return;
    memcpy(src, "0123456789ab", 12);
    rsge[0] = sge_at(dmr, dst, 4);
    rsge[1] = sge_at(dmr, dst + page - 2, 16);
    CHECK(post_recv_wr(l.qp[1], rsge, 2, 21) == 0);
    ssge = sge_at(smr, src, 10);
    CHECK(post_wr(l.qp[0], IBV_WR_SEND_WITH_IMM, &ssge, 1, 0, 0, IBV_SEND_SIGNALED, 22) == 0);
    CHECK(!memcmp(dst, "0123", 4) && dst[4] == 0 && !memcmp(dst + page - 2, "456789", 6) &&
          dst[page + 4] == 0);
    wc = poll_one(l.rcq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 21 && wc.opcode == IBV_WC_RECV &&
          wc.byte_len == 10 && wc.qp_num == l.qp[1]->qp_num && wc.src_qp == l.qp[0]->qp_num);
    CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0xc0ffee));
    wc = poll_one(l.scq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 22 && wc.opcode == IBV_WC_SEND);

    /* WRITE_WITH_IMM: the data goes where the rkey says; a receive reports it. */
    CHECK(post_recv_wr(l.qp[1], NULL, 0, 23) == 0);
    ssge = sge_at(smr, src + 10, 2);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE_WITH_IMM, &ssge, 1, dmr->rkey, u(dst) + 200, 0, 24) == 0);
    CHECK(!memcmp(dst + 200, "ab", 2));
    wc = poll_one(l.rcq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 23 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
          wc.byte_len == 2 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0xc0ffee));
    CHECK(ibv_poll_cq(l.scq, 1, &wc) == 0); /* unsignalled */

    /* Receives are taken oldest first; a plain SEND carries no immediate. */
    rsge[0] = sge_at(dmr, dst + 300, 1);
    rsge[1] = sge_at(dmr, dst + 400, 1);
    CHECK(post_recv_wr(l.qp[1], &rsge[0], 1, 31) == 0 && post_recv_wr(l.qp[1], &rsge[1], 1, 32) == 0);
    ssge = sge_at(smr, src + 1, 1);
    CHECK(post_wr(l.qp[0], IBV_WR_SEND, &ssge, 1, 0, 0, 0, 33) == 0);
    ssge = sge_at(smr, src + 2, 1);
    CHECK(post_wr(l.qp[0], IBV_WR_SEND, &ssge, 1, 0, 0, 0, 34) == 0);
    CHECK(dst[300] == '1' && dst[400] == '2');
    CHECK(ibv_poll_cq(l.rcq, 1, &wc) == 1 && wc.wr_id == 31 && !(wc.wc_flags & IBV_WC_WITH_IMM));
    CHECK(ibv_poll_cq(l.rcq, 1, &wc) == 1 && wc.wr_id == 32 && wc.byte_len == 1);
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, page);
    munmap(dst, 2 * page);
}

/* One request on a fresh loop whose target grants target_access, after recv (if any) was
 * posted on the target: the requester's completion (status -1 if none or several), the
 * target's receive completion in *rwc (status -1 if none), both QPs' states after it, and
 * whether the target's buffer tgt is still all zero. */
struct outcome {
    struct ibv_wc wc, rwc;
    enum ibv_qp_state state[2];
    bool tgt_untouched;
};

static struct outcome one_request(unsigned target_access, struct ibv_recv_wr *recv,
                                  struct ibv_send_wr *wr, const char *tgt, size_t len)
{
    struct outcome o = { .wc.status = (enum ibv_wc_status)-1, .rwc.status = (enum ibv_wc_status)-1 };
    struct ibv_recv_wr *rbad;
    struct ibv_send_wr *bad;
    struct loop l;

    if (loop_open(&l, target_access) && (!recv || ibv_post_recv(l.qp[1], recv, &rbad) == 0) &&
        ibv_post_send(l.qp[0], wr, &bad) == 0) {
        o.wc = poll_one(l.scq);
        o.rwc = poll_one(l.rcq);
        o.state[0] = qp_state(l.qp[0]);
        o.state[1] = qp_state(l.qp[1]);
    }
    o.tgt_untouched = true;
    for (size_t i = 0; i < len; i++)
        o.tgt_untouched = o.tgt_untouched && !tgt[i];
    loop_close(&l);
    return o;
}

/* The requester's own memory: an unknown lkey, a range outside the MR, another PD's MR,
 * a READ into an MR without LOCAL_WRITE. Error completions come even unsignalled; the
 * requester enters the error state, the target is untouched and stays in RTS. */
static void test_qp_bad_lkey_is_local_protection_error(void)
{
    char *src = map_pages(1), *dst = map_pages(1);
    struct ibv_pd *p2 = ibv_alloc_pd(ctx);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *ro = ibv_reg_mr(pd, src, page, 0);
    struct ibv_mr *other = p2 ? ibv_reg_mr(p2, src, page, RW_ALL) : NULL;
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_sge sge;
    struct ibv_send_wr wr = { .wr_id = 5, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE };
    struct { uint32_t lkey; uint64_t addr; uint32_t len; enum ibv_wr_opcode op; } bad[] = {
        { 0, u(src), 4, IBV_WR_RDMA_WRITE },
        { 0, u(src) + page - 2, 4, IBV_WR_RDMA_WRITE },
        { 0, u(src), 4, IBV_WR_SEND },
        { 0, u(src), 4, IBV_WR_RDMA_READ },
    };

    CHECK(p2 && smr && ro && other && dmr);
    if (!p2 || !smr || !ro || !other || !dmr)
        return;
    memset(src, 's', page);
    bad[0].lkey = smr->lkey + 1000;
    bad[1].lkey = smr->lkey;
    bad[2].lkey = other->lkey;
    bad[3].lkey = ro->lkey;
    wr.wr.rdma.rkey = dmr->rkey;
    wr.wr.rdma.remote_addr = u(dst);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct outcome o;

        sge = (struct ibv_sge){ .addr = bad[i].addr, .length = bad[i].len, .lkey = bad[i].lkey };
        wr.opcode = bad[i].op;
        o = one_request(RW_ALL, NULL, &wr, dst, page);
        CHECKF(o.wc.status == IBV_WC_LOC_PROT_ERR && o.wc.wr_id == 5, "case %zu: %s", i,
               ibv_wc_status_str(o.wc.status));
        CHECKF(o.state[0] == IBV_QPS_ERR && o.state[1] == IBV_QPS_RTS, "case %zu: states %d %d", i,
               o.state[0], o.state[1]);
        CHECKF(o.tgt_untouched && src[0] == 's', "case %zu", i);
    }
    ibv_dereg_mr(smr);
    ibv_dereg_mr(ro);
    ibv_dereg_mr(other);
    ibv_dereg_mr(dmr);
    ibv_dealloc_pd(p2);
    munmap(src, page);
    munmap(dst, page);
}

/* The responder's checks: an unknown rkey, a range past the MR, an MR without
 * REMOTE_WRITE (or REMOTE_READ), another PD's MR, a target QP that grants no remote
 * write. The requester sees IBV_WC_REM_ACCESS_ERR; both QPs enter the error state; the
 * target's memory is untouched. */
static void test_qp_bad_rkey_is_remote_access_error(void)
{
    char *src = map_pages(1), *dst = map_pages(1);
    struct ibv_pd *p2 = ibv_alloc_pd(ctx);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_mr *lw = ibv_reg_mr(pd, dst, page, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *other = p2 ? ibv_reg_mr(p2, dst, page, RW_ALL) : NULL;
    struct ibv_sge sge;
    struct ibv_send_wr wr = { .wr_id = 6, .sg_list = &sge, .num_sge = 1 };
    struct { uint32_t rkey; uint64_t addr; unsigned qp_access; enum ibv_wr_opcode op; } bad[] = {
        { 0, u(dst), RW_ALL, IBV_WR_RDMA_WRITE },
        { 0, u(dst) + page - 2, RW_ALL, IBV_WR_RDMA_WRITE },
        { 0, u(dst), RW_ALL, IBV_WR_RDMA_WRITE },
        { 0, u(dst), RW_ALL, IBV_WR_RDMA_READ },
        { 0, u(dst), RW_ALL, IBV_WR_RDMA_WRITE },
        { 0, u(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, IBV_WR_RDMA_WRITE },
        { 0, u(dst), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, IBV_WR_RDMA_READ },
    };

    CHECK(p2 && smr && dmr && lw && other);
    if (!p2 || !smr || !dmr || !lw || !other)
        return;
    memset(src, 's', page);
    bad[0].rkey = dmr->rkey + 1000;
    bad[1].rkey = dmr->rkey;
    bad[2].rkey = lw->rkey;
    bad[3].rkey = lw->rkey;
    bad[4].rkey = other->rkey;
    bad[5].rkey = bad[6].rkey = dmr->rkey;
    sge = sge_at(smr, src, 4);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct outcome o;

        wr.opcode = bad[i].op;
        wr.wr.rdma.rkey = bad[i].rkey;
        wr.wr.rdma.remote_addr = bad[i].addr;
        memset(src + 8, 0, 8);
        o = one_request(bad[i].qp_access, NULL, &wr, dst, page);
        CHECKF(o.wc.status == IBV_WC_REM_ACCESS_ERR && o.wc.wr_id == 6, "case %zu: %s", i,
               ibv_wc_status_str(o.wc.status));
        CHECKF(o.state[0] == IBV_QPS_ERR && o.state[1] == IBV_QPS_ERR, "case %zu: states %d %d", i,
               o.state[0], o.state[1]);
        CHECKF(o.tgt_untouched, "case %zu", i);
    }
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    ibv_dereg_mr(lw);
    ibv_dereg_mr(other);
    ibv_dealloc_pd(p2);
    munmap(src, page);
    munmap(dst, page);
}

/* Failures of a SEND at the target: no receive posted (RNR, the target unaffected), a
 * receive too small (LOC_LEN_ERR there, REM_INV_REQ_ERR here), a receive whose lkey is
 * bad (LOC_PROT_ERR there, REM_OP_ERR here), a peer that is not connected back. */
static void test_qp_send_failures_at_the_target(void)
{
    char *src = map_pages(1), *dst = map_pages(1);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_sge ssge, rsge;
    struct ibv_recv_wr recv = { .wr_id = 40, .sg_list = &rsge, .num_sge = 1 };
    struct ibv_send_wr wr = { .wr_id = 41, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND };
    struct outcome o;
    struct loop l;

    CHECK(smr && dmr);
    if (!smr || !dmr)
        return;
    memset(src, 's', page);
    ssge = sge_at(smr, src, 8);
    o = one_request(RW_ALL, NULL, &wr, dst, page);
    CHECK(o.wc.status == IBV_WC_RNR_RETRY_EXC_ERR && o.wc.wr_id == 41 && (int)o.rwc.status == -1);
    CHECK(o.state[0] == IBV_QPS_ERR && o.state[1] == IBV_QPS_RTS && o.tgt_untouched);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.wr.rdma.rkey = dmr->rkey;
    wr.wr.rdma.remote_addr = u(dst);
    o = one_request(RW_ALL, NULL, &wr, dst, page);
    CHECK(o.wc.status == IBV_WC_RNR_RETRY_EXC_ERR && o.tgt_untouched);

    wr.opcode = IBV_WR_SEND;
    rsge = sge_at(dmr, dst, 7);
    o = one_request(RW_ALL, &recv, &wr, dst, page);
    CHECK(o.wc.status == IBV_WC_REM_INV_REQ_ERR && o.rwc.status == IBV_WC_LOC_LEN_ERR &&
          o.rwc.wr_id == 40);
    CHECK(o.state[0] == IBV_QPS_ERR && o.state[1] == IBV_QPS_ERR);

    rsge = sge_at(dmr, dst, 8);
    rsge.lkey += 1000;
    o = one_request(RW_ALL, &recv, &wr, dst, page);
    CHECK(o.wc.status == IBV_WC_REM_OP_ERR && o.rwc.status == IBV_WC_LOC_PROT_ERR && o.tgt_untouched);
    CHECK(o.state[0] == IBV_QPS_ERR && o.state[1] == IBV_QPS_ERR);

    /* A peer connected elsewhere drops the requests: the requester gives up. */
    CHECK(loop_open(&l, RW_ALL));
    if (l.qp[1]) {
        struct ibv_send_wr *bad;

        CHECK(qp_move(l.qp[1], IBV_QPS_RESET) == 0 &&
              qp_connect(l.qp[1], l.qp[1]->qp_num, RW_ALL) == 0);
        wr.opcode = IBV_WR_RDMA_WRITE;
        CHECK(ibv_post_send(l.qp[0], &wr, &bad) == 0);
        CHECK(poll_one(l.scq).status == IBV_WC_RETRY_EXC_ERR && dst[0] == 0);
    }
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, page);
    munmap(dst, page);
}

/* IBV_SEND_INLINE reads the sge addresses themselves when posting: no MR, no lkey. More
 * than max_inline_data, or an inline READ, fails the post; the QP is unharmed. */
static void test_qp_inline_data_needs_no_mr(void)
{
    char *dst = map_pages(1), msg[] = "inline!", big[QP_INLINE + 1] = { 0 };
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_sge sge = { .addr = u(msg), .length = 7, .lkey = 0xdead }, rsge;
    struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED },
                       *bad = NULL;
    struct loop l;

    CHECK(dmr && loop_open(&l, RW_ALL));
    if (!dmr || !l.qp[1])
        return;
    rsge = sge_at(dmr, dst, 16);
    CHECK(post_recv_wr(l.qp[1], &rsge, 1, 10) == 0);
    CHECK(ibv_post_send(l.qp[0], &wr, &bad) == 0);
    CHECK(!memcmp(dst, "inline!", 7) && poll_one(l.rcq).byte_len == 7);
    CHECK(poll_one(l.scq).status == IBV_WC_SUCCESS);
    msg[0] = 'I';
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.rkey = dmr->rkey;
    wr.wr.rdma.remote_addr = u(dst) + 100;
    CHECK(ibv_post_send(l.qp[0], &wr, &bad) == 0);
    CHECK(!memcmp(dst + 100, "Inline!", 7) && poll_one(l.scq).status == IBV_WC_SUCCESS);

    sge = (struct ibv_sge){ .addr = u(big), .length = sizeof(big) };
    CHECK(ibv_post_send(l.qp[0], &wr, &bad) == EINVAL && bad == &wr);
    sge.length = 4;
    wr.opcode = IBV_WR_RDMA_READ;
    bad = NULL;
    CHECK(ibv_post_send(l.qp[0], &wr, &bad) == EINVAL && bad == &wr);
    CHECK(ibv_poll_cq(l.scq, 1, &(struct ibv_wc){ 0 }) == 0 && qp_state(l.qp[0]) == IBV_QPS_RTS);
    loop_close(&l);
    ibv_dereg_mr(dmr);
    munmap(dst, page);
}

/* A chain is taken in order; an invalid request (too many sges, an opcode the device
 * lacks) stops it there: it fails the post, *bad_wr names it, what came before is done
 * and what follows is not. Only signalled requests complete. */
static void test_qp_chain_stops_at_invalid_request(void)
{
    char *src = map_pages(1), *dst = map_pages(1);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_sge sge[3];
    struct ibv_send_wr wr[3], *bad;
    struct ibv_wc wc[4];
    struct loop l;

    CHECK(smr && dmr && loop_open(&l, RW_ALL));
    if (!smr || !dmr || !l.qp[1])
        return;
    memcpy(src, "abc", 3);
    for (int i = 0; i < 3; i++) {
        sge[i] = sge_at(smr, src + i, 1);
        wr[i] = (struct ibv_send_wr){ .wr_id = 60 + (uint64_t)i, .next = i < 2 ? &wr[i + 1] : NULL,
                                      .sg_list = &sge[i], .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE };
        wr[i].wr.rdma.rkey = dmr->rkey;
        wr[i].wr.rdma.remote_addr = u(dst) + 10 * (uint64_t)i;
    }
    wr[2].send_flags = IBV_SEND_SIGNALED;
    CHECK(ibv_post_send(l.qp[0], wr, &bad) == 0);
    CHECK(dst[0] == 'a' && dst[10] == 'b' && dst[20] == 'c');
    CHECK(ibv_poll_cq(l.scq, 4, wc) == 1 && wc[0].wr_id == 62);

    memset(dst, 0, 32);
    wr[1].num_sge = QP_SGE + 1;
    CHECK(ibv_post_send(l.qp[0], wr, &bad) == EINVAL && bad == &wr[1]);
    CHECK(dst[0] == 'a' && dst[10] == 0 && dst[20] == 0);
    wr[1].num_sge = 1;
    wr[1].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    bad = NULL;
    CHECK(ibv_post_send(l.qp[0], &wr[1], &bad) == EINVAL && bad == &wr[1] && dst[20] == 0);
    CHECK(ibv_poll_cq(l.scq, 4, wc) == 0 && qp_state(l.qp[0]) == IBV_QPS_RTS);
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, page);
    munmap(dst, page);
}

/* The send queue holds max_send_wr requests until a polled completion frees them (its own
 * and the unsignalled ones before it), as on a real provider; posting before RTS fails,
 * receiving works from INIT on. */
static void test_qp_send_queue_frees_on_poll(void)
{
    char *buf = map_pages(1);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, RW_ALL);
    struct ibv_sge sge = sge_at(mr, buf, 1);
    struct loop l = { .scq = ibv_create_cq(ctx, 8, NULL, NULL, 0),
                      .rcq = ibv_create_cq(ctx, 8, NULL, NULL, 0) };
    struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = RW_ALL };
    struct ibv_wc wc;

    l.qp[0] = l.scq && l.rcq ? qp_make(pd, &l, NULL, 2) : NULL;
    l.qp[1] = l.qp[0] ? qp_make(pd, &l, NULL, 2) : NULL;
    CHECK(mr && l.qp[1]);
    if (!mr || !l.qp[1])
        return;
    CHECK(post_recv_wr(l.qp[1], &sge, 1, 1) == EINVAL); /* RESET */
    CHECK(ibv_modify_qp(l.qp[1], &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                            IBV_QP_ACCESS_FLAGS) == 0);
    CHECK(post_recv_wr(l.qp[1], &sge, 1, 1) == 0);
    CHECK(post_wr(l.qp[1], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), 0, 2) == EINVAL);
    CHECK(qp_connect(l.qp[0], l.qp[1]->qp_num, RW_ALL) == 0);
    CHECK(qp_move(l.qp[1], IBV_QPS_RESET) == 0);
    CHECK(ibv_poll_cq(l.rcq, 1, &wc) == 0); /* RESET drops receives without completions */
    CHECK(qp_connect(l.qp[1], l.qp[0]->qp_num, RW_ALL) == 0);

    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), 0, 3) == 0);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), IBV_SEND_SIGNALED, 4) == 0);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), IBV_SEND_SIGNALED, 5) ==
          ENOMEM);
    CHECK(ibv_poll_cq(l.scq, 1, &wc) == 1 && wc.wr_id == 4);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), IBV_SEND_SIGNALED, 5) == 0);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), IBV_SEND_SIGNALED, 6) == 0);
    CHECK(ibv_poll_cq(l.scq, 1, &wc) == 1 && wc.wr_id == 5);
    /* RESET drops the QP's completions not polled yet and empties its send queue... */
    CHECK(qp_move(l.qp[0], IBV_QPS_RESET) == 0);
    CHECK(ibv_poll_cq(l.scq, 1, &wc) == 0);
    CHECK(qp_connect(l.qp[0], l.qp[1]->qp_num, RW_ALL) == 0);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), IBV_SEND_SIGNALED, 7) == 0);
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf), IBV_SEND_SIGNALED, 8) == 0);
    /* ... and so does destroying it, as a provider cleans its CQs. */
    CHECK(ibv_destroy_qp(l.qp[0]) == 0);
    l.qp[0] = NULL;
    CHECK(ibv_poll_cq(l.scq, 1, &wc) == 0);
    loop_close(&l);
    ibv_dereg_mr(mr);
    munmap(buf, page);
}

/* The error state flushes: posted receives complete with IBV_WC_WR_FLUSH_ERR in order,
 * and so does every later request on either queue. */
static void test_qp_error_state_flushes(void)
{
    char *buf = map_pages(1);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, page, RW_ALL);
    struct ibv_sge sge = sge_at(mr, buf, 1);
    struct ibv_wc wc[4];
    struct loop l;

    CHECK(mr && loop_open(&l, RW_ALL));
    if (!mr || !l.qp[1])
        return;
    CHECK(post_recv_wr(l.qp[1], &sge, 1, 71) == 0 && post_recv_wr(l.qp[1], &sge, 1, 72) == 0);
    CHECK(qp_move(l.qp[1], IBV_QPS_ERR) == 0);
    CHECK(ibv_poll_cq(l.rcq, 4, wc) == 2 && wc[0].wr_id == 71 && wc[1].wr_id == 72 &&
          wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[1].status == IBV_WC_WR_FLUSH_ERR &&
          wc[0].qp_num == l.qp[1]->qp_num);
    CHECK(post_recv_wr(l.qp[1], &sge, 1, 73) == 0);
    CHECK(ibv_poll_cq(l.rcq, 4, wc) == 1 && wc[0].wr_id == 73 && wc[0].status == IBV_WC_WR_FLUSH_ERR);
    buf[0] = 'x';
    CHECK(post_wr(l.qp[1], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf) + 1, 0, 74) == 0);
    CHECK(ibv_poll_cq(l.scq, 4, wc) == 1 && wc[0].wr_id == 74 && wc[0].status == IBV_WC_WR_FLUSH_ERR &&
          buf[1] == 0);
    /* A target in the error state answers nothing: the requester gives up. */
    CHECK(post_wr(l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, mr->rkey, u(buf) + 1, 0, 75) == 0);
    CHECK(ibv_poll_cq(l.scq, 4, wc) == 1 && wc[0].status == IBV_WC_RETRY_EXC_ERR && buf[1] == 0);
    loop_close(&l);
    ibv_dereg_mr(mr);
    munmap(buf, page);
}

/* Receives posted to an SRQ serve every QP on it, oldest first; the QP that took one is
 * named in its completion. */
static void test_srq_serves_its_qps(void)
{
    char *src = map_pages(1), *dst = map_pages(1);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_srq_init_attr sa = { .attr = { .max_wr = 2, .max_sge = 1 } };
    struct ibv_srq *srq = ibv_create_srq(pd, &sa);
    struct loop a, b;
    struct ibv_sge ssge, rsge[2];
    struct ibv_recv_wr rwr[2], *rbad = NULL;
    struct ibv_srq_attr qa;
    struct ibv_wc wc;

    CHECK(smr && dmr && srq && sa.attr.max_wr == 2);
    if (!smr || !dmr || !srq)
        return;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    a.scq = b.scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    a.rcq = b.rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    a.qp[0] = qp_make(pd, &a, NULL, 4);
    b.qp[0] = qp_make(pd, &a, NULL, 4);
    a.qp[1] = qp_make(pd, &a, srq, 4);
    b.qp[1] = qp_make(pd, &a, srq, 4);
    CHECK(a.qp[0] && b.qp[0] && a.qp[1] && b.qp[1]);
    if (!a.qp[0] || !b.qp[0] || !a.qp[1] || !b.qp[1])
        return;
    CHECK(qp_pair(a.qp[0], a.qp[1]));
    CHECK(qp_pair(b.qp[0], b.qp[1]));
    memcpy(src, "xy", 2);
    for (int i = 0; i < 2; i++) {
        rsge[i] = sge_at(dmr, dst + 100 * i, 1);
        rwr[i] = (struct ibv_recv_wr){ .wr_id = 80 + (uint64_t)i, .next = i ? NULL : &rwr[1],
                                       .sg_list = &rsge[i], .num_sge = 1 };
    }
    CHECK(ibv_post_srq_recv(srq, rwr, &rbad) == 0);
    CHECK(ibv_post_srq_recv(srq, rwr, &rbad) == ENOMEM && rbad == rwr);
    CHECK(post_recv_wr(a.qp[1], rsge, 1, 1) == EINVAL); /* a QP on an SRQ has no queue */

    ssge = sge_at(smr, src, 1);
    CHECK(post_wr(b.qp[0], IBV_WR_SEND, &ssge, 1, 0, 0, 0, 0) == 0);
    ssge = sge_at(smr, src + 1, 1);
    CHECK(post_wr(a.qp[0], IBV_WR_SEND, &ssge, 1, 0, 0, 0, 0) == 0);
    CHECK(dst[0] == 'x' && dst[100] == 'y');
    CHECK(ibv_poll_cq(a.rcq, 1, &wc) == 1 && wc.wr_id == 80 && wc.qp_num == b.qp[1]->qp_num);
    CHECK(ibv_poll_cq(a.rcq, 1, &wc) == 1 && wc.wr_id == 81 && wc.qp_num == a.qp[1]->qp_num);
    CHECK(post_wr(a.qp[0], IBV_WR_SEND, &ssge, 1, 0, 0, 0, 0) == 0);
    CHECK(ibv_poll_cq(a.scq, 1, &wc) == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR);
    /* The QP that errs flushes nothing of the SRQ's. */
    CHECK(ibv_post_srq_recv(srq, rwr, &rbad) == 0);
    CHECK(qp_move(a.qp[1], IBV_QPS_ERR) == 0);
    CHECK(ibv_poll_cq(a.rcq, 1, &wc) == 0);

    rwr[0].num_sge = 2;
    rwr[0].next = NULL;
    CHECK(ibv_post_srq_recv(srq, rwr, &rbad) == EINVAL && rbad == rwr);
    CHECK(ibv_query_srq(srq, &qa) == 0 && qa.max_wr == 2 && qa.max_sge == 1 && qa.srq_limit == 0);
    qa.srq_limit = 1;
    CHECK(ibv_modify_srq(srq, &qa, IBV_SRQ_LIMIT) == 0);
    CHECK(ibv_query_srq(srq, &qa) == 0 && qa.srq_limit == 1);
    qa.srq_limit = 3;
    CHECK(ibv_modify_srq(srq, &qa, IBV_SRQ_LIMIT) == EINVAL);
    qa.max_wr = 4;
    CHECK(ibv_modify_srq(srq, &qa, IBV_SRQ_MAX_WR) == EINVAL);
    CHECK(ibv_destroy_srq(srq) == EBUSY);
    CHECK(ibv_destroy_qp(b.qp[0]) == 0 && ibv_destroy_qp(b.qp[1]) == 0);
    b.qp[0] = b.qp[1] = NULL;
    b.scq = b.rcq = NULL;
    loop_close(&a);
    CHECK(ibv_destroy_srq(srq) == 0);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, page);
    munmap(dst, page);
}

/* Extended QPs: the builders collect requests (each with qp->wr_id and qp->wr_flags as
 * they were at its opcode) and wr_complete posts them all; an error in any builder, or
 * wr_abort, posts none. */
static void test_qp_ex_builders_post_all_or_none(void)
{
    char *src = map_pages(1), *dst = map_pages(1), msg[] = "copied";
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_sge list[QP_SGE + 1], rsge;
    struct loop l = { .scq = ibv_create_cq(ctx, 16, NULL, NULL, 0),
                      .rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0) };
    struct ibv_qp_init_attr_ex ax = {
        .send_cq = l.scq, .recv_cq = l.rcq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = QP_SGE, .max_recv_sge = 1,
                 .max_inline_data = QP_INLINE },
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
        .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ,
    };
    struct ibv_qp_ex *x;
    struct ibv_wc wc[4];

    l.qp[0] = l.scq && l.rcq ? ibv_create_qp_ex(ctx, &ax) : NULL;
    l.qp[1] = l.qp[0] ? qp_make(pd, &l, NULL, 8) : NULL;
    x = l.qp[0] ? ibv_qp_to_qp_ex(l.qp[0]) : NULL;
    CHECK(smr && dmr && x && l.qp[1] && &x->qp_base == l.qp[0]);
    if (!smr || !dmr || !x || !l.qp[1])
        return;
    CHECK(ibv_qp_to_qp_ex(l.qp[1]) == NULL); /* made without send_ops_flags */
    CHECK(qp_pair(l.qp[0], l.qp[1]));
    memcpy(src, "built", 5);
    rsge = sge_at(dmr, dst + 100, 16);
    CHECK(post_recv_wr(l.qp[1], &rsge, 1, 90) == 0);

    ibv_wr_start(x);
    x->wr_id = 91;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(x, dmr->rkey, u(dst));
    ibv_wr_set_sge(x, smr->lkey, u(src), 5);
    x->wr_id = 92;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, msg, 6);
    msg[0] = 'C'; /* inline data is copied when given */
    x->wr_id = 93;
    ibv_wr_rdma_read(x, dmr->rkey, u(dst));
    list[0] = sge_at(smr, src + 200, 2);
    list[1] = sge_at(smr, src + 300, 3);
    ibv_wr_set_sge_list(x, 2, list);
    CHECK(dst[0] == 0 && dst[100] == 0); /* nothing moves before wr_complete */
    CHECK(ibv_wr_complete(x) == 0);
    CHECK(!memcmp(dst, "built", 5) && !memcmp(dst + 100, "copied", 6));
    CHECK(!memcmp(src + 200, "bu", 2) && !memcmp(src + 300, "ilt", 3));
    CHECK(ibv_poll_cq(l.scq, 4, wc) == 3 && wc[0].wr_id == 91 && wc[1].wr_id == 92 &&
          wc[2].wr_id == 93 && wc[1].opcode == IBV_WC_SEND && wc[2].opcode == IBV_WC_RDMA_READ &&
          wc[2].byte_len == 5);
    CHECK(ibv_poll_cq(l.rcq, 4, wc) == 1 && wc[0].wr_id == 90 && wc[0].byte_len == 6);

    /* Too many sges in the second request: the first is not posted either. */
    memset(dst, 0, 16);
    ibv_wr_start(x);
    ibv_wr_rdma_write(x, dmr->rkey, u(dst));
    ibv_wr_set_sge(x, smr->lkey, u(src), 5);
    ibv_wr_rdma_write(x, dmr->rkey, u(dst) + 8);
    for (int i = 0; i <= QP_SGE; i++)
        list[i] = sge_at(smr, src, 1);
    ibv_wr_set_sge_list(x, QP_SGE + 1, list);
    CHECK(ibv_wr_complete(x) == EINVAL);
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, src, QP_INLINE + 1);
    CHECK(ibv_wr_complete(x) == EINVAL);
    ibv_wr_start(x);
    ibv_wr_rdma_write(x, dmr->rkey, u(dst));
    ibv_wr_set_sge(x, smr->lkey, u(src), 5);
    ibv_wr_abort(x);
    CHECK(dst[0] == 0 && ibv_poll_cq(l.scq, 4, wc) == 0 && qp_state(l.qp[0]) == IBV_QPS_RTS);

    /* More than the send queue holds: ENOMEM, nothing posted. */
    ibv_wr_start(x);
    for (int i = 0; i < 9; i++) {
        ibv_wr_rdma_write(x, dmr->rkey, u(dst));
        ibv_wr_set_sge(x, smr->lkey, u(src), 5);
    }
    CHECK(ibv_wr_complete(x) == ENOMEM && dst[0] == 0);

    /* What the device lacks, create_qp_ex refuses. */
    ax.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
    errno = 0;
    CHECK(ibv_create_qp_ex(ctx, &ax) == NULL && errno == EOPNOTSUPP);
    ax.send_ops_flags = IBV_QP_EX_WITH_SEND;
    ax.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
    errno = 0;
    CHECK(ibv_create_qp_ex(ctx, &ax) == NULL && errno == EOPNOTSUPP);
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, page);
    munmap(dst, page);
}

static struct ibv_qp *inherited_qp;
static struct ibv_send_wr *inherited_wr;
static int inherited_ret;

static void post_on_inherited(void)
{
    struct ibv_send_wr *bad = NULL;

    inherited_ret = ibv_post_send(inherited_qp, inherited_wr, &bad);
    inherited_ret = bad == inherited_wr ? inherited_ret : -1;
}

/* A forked child cannot post on the QPs it inherited (EIO and a stderr line); the parent's
 * memory and completions are untouched and its QPs keep working. */
static void test_qp_fork_child_cannot_post(void)
{
    char *src = map_pages(1), *dst = map_pages(1);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, page, RW_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, page, RW_ALL);
    struct ibv_sge sge = sge_at(smr, src, 5);
    struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                              .send_flags = IBV_SEND_SIGNALED };
    struct ibv_wc wc;
    struct loop l;
    pid_t pid;

    CHECK(smr && dmr && loop_open(&l, RW_ALL));
    if (!smr || !dmr || !l.qp[1])
        return;
    memcpy(src, "child", 5);
    wr.wr.rdma.rkey = dmr->rkey;
    wr.wr.rdma.remote_addr = u(dst);
    inherited_qp = l.qp[0];
    inherited_wr = &wr;
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        char err[1024];

        capture_stderr(post_on_inherited, err, sizeof(err));
        _exit(inherited_ret == EIO && count_lines_with(err, "ibv_post_send") == 1 ? 0 : 1);
    }
    CHECK(wait_child(pid) == 0);
    CHECK(dst[0] == 0 && ibv_poll_cq(l.scq, 1, &wc) == 0);
    memcpy(src, "paren", 5);
    CHECK(ibv_post_send(l.qp[0], &wr, &(struct ibv_send_wr *){ NULL }) == 0);
    CHECK(!memcmp(dst, "paren", 5) && poll_one(l.scq).status == IBV_WC_SUCCESS);
    loop_close(&l);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    munmap(src, page);
    munmap(dst, page);
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

/* A QP pair with a thread posting signalled RDMA WRITEs, waiting for room in the send
 * queue, and another polling the completions that make the room. */
struct qp_worker {
    pthread_t poster, poller;
    struct loop l;
    char *buf; /* source in the first page, target in the second */
    struct ibv_mr *mr;
    int failures;
};

#define QP_WORKER_WRITES 500u

static void *qp_poster_main(void *arg)
{
    struct qp_worker *w = arg;

    for (uint32_t i = 0; i < QP_WORKER_WRITES; i++) {
        uint32_t v = i * 2654435761u, slot = i % 64 * 4;
        struct ibv_sge sge = sge_at(w->mr, w->buf + slot, 4);
        int rc;

        memcpy(w->buf + slot, &v, 4);
        while ((rc = post_wr(w->l.qp[0], IBV_WR_RDMA_WRITE, &sge, 1, w->mr->rkey,
                             u(w->buf) + page + slot, IBV_SEND_SIGNALED, i)) == ENOMEM)
            sched_yield();
        if (rc || memcmp(w->buf + page + slot, &v, 4))
            w->failures++;
    }
    return NULL;
}

static void *qp_poller_main(void *arg)
{
    struct qp_worker *w = arg;
    uint32_t next = 0;

    while (next < QP_WORKER_WRITES) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(w->l.scq, 8, wc);

        if (n < 0)
            w->failures++;
        for (int i = 0; i < n; i++)
            if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != next++)
                w->failures++;
        if (n <= 0)
            sched_yield();
    }
    return NULL;
}

static void test_qp_threads_post_and_poll(void)
{
    struct qp_worker q[3] = { 0 };
    struct worker r[2] = { 0 };

    for (int i = 0; i < 3; i++) {
        q[i].buf = map_pages(2);
        q[i].mr = ibv_reg_mr(pd, q[i].buf, 2 * page, RW_ALL);
        CHECK(q[i].mr && loop_open(&q[i].l, RW_ALL));
        if (!q[i].mr || !q[i].l.qp[1])
            return;
    }
    for (int i = 0; i < 3; i++) {
        pthread_create(&q[i].poster, NULL, qp_poster_main, &q[i]);
        pthread_create(&q[i].poller, NULL, qp_poller_main, &q[i]);
    }
    for (int i = 0; i < 2; i++)
        pthread_create(&r[i].tid, NULL, worker_main, &r[i]);
    for (int i = 0; i < 2; i++) {
        pthread_join(r[i].tid, NULL);
        CHECKF(r[i].failures == 0, "registering thread %d: %d failures", i, r[i].failures);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(q[i].poster, NULL);
        pthread_join(q[i].poller, NULL);
        CHECKF(q[i].failures == 0, "QP pair %d: %d failures", i, q[i].failures);
        loop_close(&q[i].l);
        ibv_dereg_mr(q[i].mr);
        munmap(q[i].buf, 2 * page);
    }
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
    RUN(test_qp_lifecycle_and_limits);
    RUN(test_qp_rdma_write_and_read);
    RUN(test_qp_stale_mr_moves_old_pages);
    RUN(test_qp_send_scatters_into_oldest_receive);
    RUN(test_qp_bad_lkey_is_local_protection_error);
    RUN(test_qp_bad_rkey_is_remote_access_error);
    RUN(test_qp_send_failures_at_the_target);
    RUN(test_qp_inline_data_needs_no_mr);
    RUN(test_qp_chain_stops_at_invalid_request);
    RUN(test_qp_send_queue_frees_on_poll);
    RUN(test_qp_error_state_flushes);
    RUN(test_srq_serves_its_qps);
    RUN(test_qp_ex_builders_post_all_or_none);
    RUN(test_qp_fork_child_cannot_post);
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
    RUN(test_qp_threads_post_and_poll);
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
