/* test_bind.c - verbs reached the ways programs that do not link libibverbs reach them:
 * dlopen + dlvsym of every verb at rdma-core's versions, as NCCL's ibvsymbols does
 * (route "dlvsym"), plain dlsym on the handle (route "dlsym"), and a plugin loaded with
 * RTLD_DEEPBIND that links libibverbs, exchanging MRs with the program both ways (route
 * "deepbind"). Under the preload every route must be cached (a repeat is served without
 * the NIC), every handle must deregister through whichever ibv_dereg_mr the caller holds,
 * memory unmapped and mapped again must get fresh pages, and at the end nothing may stay
 * pinned and the PD and device must close. Without the preload (EXPECT_CACHED=0) the
 * same checks hold but every registration reaches the NIC. FORK_HOW=fork or _Fork (run in
 * rdma-core's fork-safe mode, on a NIC without copy-on-fork): a buffer registered and
 * released through the route must be in a child made that way. */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "snic.h"

/* COUNT buffers held at once stay within a normal user's RLIMIT_MEMLOCK (8 MiB). */
#define LEN (128 << 10)
#define COUNT 24

typedef struct ibv_mr *reg_fn(struct ibv_pd *, void *, size_t, int);
typedef int dereg_fn(struct ibv_mr *);

static struct {
    struct ibv_device **(*get_device_list)(int *);
    void (*free_device_list)(struct ibv_device **);
    struct ibv_context *(*open_device)(struct ibv_device *);
    int (*close_device)(struct ibv_context *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    int (*dealloc_pd)(struct ibv_pd *);
    reg_fn *reg_mr;
    dereg_fn *dereg_mr;
    void (*stats)(struct snic_stats *);
    int (*local_write)(uint32_t, uint64_t, const void *, size_t);
} v;

/* The plugin's calls, and which side registers and which deregisters each MR. */
static reg_fn *plugin_reg;
static dereg_fn *plugin_dereg;
static int (*plugin_dealloc_pd)(struct ibv_pd *);
static int (*plugin_close_device)(struct ibv_context *);
static int expect_cached;
static const char *route;
static struct ibv_context *ctx;
static struct ibv_pd *pd;

static reg_fn *reg_for(int i)
{
    return plugin_reg && (i & 1) ? plugin_reg : v.reg_mr;
}

static dereg_fn *dereg_for(int i)
{
    return plugin_dereg && !(i & 1) ? plugin_dereg : v.dereg_mr;   /* the other side's */
}

static void *sym(void *h, const char *name, const char *version)
{
    void *f = version ? dlvsym(h, name, version) : dlsym(h, name);
    CHECKF(f != NULL, "%s: %s", name, dlerror());
    return f;
}

static int bind_verbs(const char *plugin)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "%s", dlerror());
    if (!h)
        return -1;
    int versioned = strcmp(route, "dlsym") != 0;
#define BIND(field, name, version) *(void **)&v.field = sym(h, name, versioned ? version : NULL)
    BIND(get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
    BIND(free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
    BIND(open_device, "ibv_open_device", "IBVERBS_1.1");
    BIND(close_device, "ibv_close_device", "IBVERBS_1.1");
    BIND(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
    BIND(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1");
    BIND(reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
    BIND(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
    BIND(stats, "snic_get_stats", "SNIC_1.0");
    BIND(local_write, "snic_local_write", "SNIC_1.0");
#undef BIND
    if (!strcmp(route, "deepbind")) {
        void *p = dlopen(plugin, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        CHECKF(p != NULL, "%s", dlerror());
        if (!p)
            return -1;
        *(void **)&plugin_reg = sym(p, "bp_reg_mr", NULL);
        *(void **)&plugin_dereg = sym(p, "bp_dereg_mr", NULL);
        *(void **)&plugin_dealloc_pd = sym(p, "bp_dealloc_pd", NULL);
        *(void **)&plugin_close_device = sym(p, "bp_close_device", NULL);
    }
    return check_failures ? -1 : 0;
}

static uint64_t reg_calls(void)
{
    struct snic_stats s;
    v.stats(&s);
    return s.reg_calls;
}

static void test_repeats_are_cached(void)
{
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint64_t before = reg_calls();
    for (int i = 0; i < 4; i++) {
        struct ibv_mr *mr = reg_for(i)(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr != NULL);
        if (mr)
            CHECKF(dereg_for(i)(mr) == 0, "deregistration %d", i);
    }
    uint64_t regs = reg_calls() - before;
    CHECKF(regs == (expect_cached ? 1u : 4u), "%llu registrations reached the NIC for 4 of one buffer",
           (unsigned long long)regs);
    munmap(p, LEN);
}

static void test_every_handle_deregisters(void)
{
    struct ibv_mr *mr[COUNT];
    char *p[COUNT];
    int failed = 0;
    for (int i = 0; i < COUNT; i++) {
        p[i] = malloc(LEN);
        mr[i] = reg_for(i)(pd, p[i], LEN, IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr[i] != NULL);
    }
    for (int i = 0; i < COUNT; i++)
        if (mr[i] && dereg_for(i)(mr[i]) != 0)
            failed++;
    CHECKF(failed == 0, "%d of %d deregistrations failed", failed, COUNT);
    for (int i = 0; i < COUNT; i++)
        free(p[i]);
}

/* Unmapped and mapped again at the same address: a registration must reach the new pages. */
static void test_remapped_memory_gets_new_pages(void)
{
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int stale = 0;
    for (int i = 0; i < 8; i++) {
        struct ibv_mr *mr = reg_for(i)(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr != NULL);
        if (!mr)
            break;
        char msg[32];
        snprintf(msg, sizeof(msg), "remap %d", i);
        CHECK(v.local_write(mr->lkey, (uint64_t)(uintptr_t)p, msg, sizeof(msg)) == 0);
        stale += memcmp(p, msg, sizeof(msg)) != 0;
        CHECK(dereg_for(i)(mr) == 0);
        munmap(p, LEN);
        char *q = mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        CHECK(q == p);
    }
    CHECKF(stale == 0, "%d of 8 writes landed in old pages", stale);
    munmap(p, LEN);
}

/* Registered pages are left out of a child in fork-safe mode: a released one must be in
 * it, whether the route's registration was cached or not. */
static void test_fork_child_sees_released_memory(void)
{
    const char *how = getenv("FORK_HOW");
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED)
        return;
    for (int i = 0; i < 2; i++) {   /* both sides' registration and deregistration */
        struct ibv_mr *mr = reg_for(i)(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr && dereg_for(i)(mr) == 0);
    }
    p[100] = 42;
    fflush(NULL);
    pid_t pid = !strcmp(how, "_Fork") ? _Fork() : fork();
    if (pid == 0)
        _exit(p[100] == 42 ? 0 : 1);   /* faults where the page was left out */
    int st = 0;
    CHECKF(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
           "the %s child could not read the released buffer (status %#x)", how, st);
    munmap(p, LEN);
}

static void test_nothing_pinned_at_close(void)
{
    struct ibv_mr *mr = reg_for(1)(pd, ctx, 4096, IBV_ACCESS_LOCAL_WRITE);   /* one left for the flush */
    (void)mr;
    int (*dealloc)(struct ibv_pd *) = plugin_dealloc_pd ? plugin_dealloc_pd : v.dealloc_pd;
    int (*close_dev)(struct ibv_context *) = plugin_close_device ? plugin_close_device : v.close_device;
    if (mr)
        CHECK(dereg_for(1)(mr) == 0);
    CHECKF(dealloc(pd) == 0, "ibv_dealloc_pd: %s", strerror(errno));
    CHECKF(close_dev(ctx) == 0, "ibv_close_device: %s", strerror(errno));
    struct snic_stats s;
    v.stats(&s);
    CHECKF(s.live_mrs == 0 && s.pinned_bytes == 0, "%llu MRs (%llu bytes) still registered",
           (unsigned long long)s.live_mrs, (unsigned long long)s.pinned_bytes);
}

int main(int argc, char **argv)
{
    route = argc > 1 ? argv[1] : "dlvsym";
    const char *e = getenv("EXPECT_CACHED");
    expect_cached = e && *e == '1';
    if (bind_verbs(argc > 2 ? argv[2] : "libmrc_bindplugin.so") == 0) {
        struct ibv_device **list = v.get_device_list(NULL);
        ctx = list && list[0] ? v.open_device(list[0]) : NULL;
        pd = ctx ? v.alloc_pd(ctx) : NULL;
        CHECK(pd != NULL);
        if (list)
            v.free_device_list(list);
    }
    if (pd) {
        RUN(test_repeats_are_cached);
        RUN(test_every_handle_deregisters);
        RUN(test_remapped_memory_gets_new_pages);
        if (getenv("FORK_HOW"))
            RUN(test_fork_child_sees_released_memory);
        RUN(test_nothing_pinned_at_close);
    }
    CHECK_EXIT();
}
