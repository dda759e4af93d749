/* test_handle_verbs.c - the MR verbs taken from a library handle, as NCCL's ibvsymbols
 * takes them (dlopen + dlvsym at rdma-core's versions), by a program that also links
 * libibverbs (so its data path works on any device: the software NIC's, or a loopback
 * RDMA WRITE on rxe in the VM). Handles made through either route deregister through
 * the other; repeats through the handle are cached under the preload; memory unmapped,
 * or freed and malloc'd again, gets fresh pages; and the PD and the device close through
 * the handle's calls. Without the preload the same checks hold, uncounted. */
#include "stale.h"

#define LEN (1u << 20)
#define COUNT 16
#define SMALL (256u << 10)   /* COUNT of them stay cached within a normal user's 8 MiB RLIMIT_MEMLOCK */

static struct {
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    int (*dereg_mr)(struct ibv_mr *);
    int (*dealloc_pd)(struct ibv_pd *);
    int (*close_device)(struct ibv_context *);
} h;

static int preloaded;

static void bind_handle(void)
{
    void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        exit(2);
    }
    *(void **)&h.reg_mr = dlvsym(lib, "ibv_reg_mr", "IBVERBS_1.1");
    *(void **)&h.dereg_mr = dlvsym(lib, "ibv_dereg_mr", "IBVERBS_1.1");
    *(void **)&h.dealloc_pd = dlvsym(lib, "ibv_dealloc_pd", "IBVERBS_1.1");
    *(void **)&h.close_device = dlvsym(lib, "ibv_close_device", "IBVERBS_1.1");
    if (!h.reg_mr || !h.dereg_mr || !h.dealloc_pd || !h.close_device) {
        fprintf(stderr, "libibverbs' versioned MR calls not found\n");
        exit(2);
    }
}

static struct ibv_mr *hreg(void *p, size_t len)
{
    return h.reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
}

static void test_handle_repeats_are_cached(void)
{
    char *p = map_anon(NULL, COUNT * 2 * (size_t)SMALL, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    uint64_t regs0 = preloaded ? nic_regs() : 0;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < COUNT; i++) {
            char *b = p + (size_t)i * 2 * SMALL;   /* apart: none merges with another */
            struct ibv_mr *mr = hreg(b, SMALL);
            CHECK(mr && write_visible(mr, b, SMALL, (unsigned char)(0x10 + round)));
            CHECK(mr && h.dereg_mr(mr) == 0);
        }
    if (preloaded)
        CHECKF(nic_regs() - regs0 == COUNT, "%llu registrations for %d buffers registered twice",
               (unsigned long long)(nic_regs() - regs0), COUNT);
    munmap(p, COUNT * 2 * (size_t)SMALL);
}

static void test_handles_deregister_through_either_route(void)
{
    char *p = map_anon(NULL, 2 * (size_t)LEN, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *linked = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    struct ibv_mr *bound = hreg(p + LEN, LEN);
    CHECK(linked && write_visible(linked, p, LEN, 0x21));
    CHECK(bound && write_visible(bound, p + LEN, LEN, 0x22));
    CHECKF(linked && h.dereg_mr(linked) == 0, "the handle's ibv_dereg_mr refused a linked registration");
    CHECKF(bound && ibv_dereg_mr(bound) == 0, "the linked ibv_dereg_mr refused the handle's registration");
    munmap(p, 2 * (size_t)LEN);
}

static void ch_munmap(void *p, size_t len)
{
    CHECK(munmap(p, len) == 0);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
}

static void test_handle_remapped_memory_gets_new_pages(void)
{
    char *p = map_anon(NULL, LEN, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *a = hreg(p, LEN);
    CHECK(a && write_visible(a, p, LEN, 0x31) && h.dereg_mr(a) == 0);
    ch_munmap(p, LEN);
    struct ibv_mr *b = hreg(p, LEN);
    CHECK(b != NULL);
    check_outcome(b && write_visible(b, p, LEN, 0x32), "registered through the handle after a munmap");
    CHECK(b && h.dereg_mr(b) == 0);
    munmap(p, LEN);
}

/* An mmapped chunk: free unmaps it inside libc, malloc maps it again at the same place. */
static void test_handle_freed_and_malloced_gets_new_pages(void)
{
    char *p = malloc(LEN);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *a = hreg(p, LEN);
    CHECK(a && write_visible(a, p, LEN, 0x41) && h.dereg_mr(a) == 0);
    free(p);
    char *q = malloc(LEN);
    if (q != p) {
        SKIP_TEST("malloc gave another address: nothing to be stale");
        free(q);
        return;
    }
    struct ibv_mr *b = hreg(q, LEN);
    CHECK(b != NULL);
    check_outcome(b && write_visible(b, q, LEN, 0x42), "registered through the handle after free and malloc");
    CHECK(b && h.dereg_mr(b) == 0);
    free(q);
}

/* Last: the cache holds registrations of the pd and the device; the handle's calls must
 * release them first, as the linked ones do. */
static void test_handle_closes_pd_and_device(void)
{
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *mr = p ? hreg(p, LEN) : NULL;
    CHECK(mr && h.dereg_mr(mr) == 0);   /* cached under the preload */
    pthread_mutex_lock(&loop.lock);     /* the loop's QPs would keep the pd busy */
    if (loop.pid && loop.l.pd == pd)
        loop_close_locked();
    pthread_mutex_unlock(&loop.lock);
    CHECKF(h.dealloc_pd(pd) == 0, "the handle's ibv_dealloc_pd: %s", strerror(errno));
    pd = NULL;
    CHECKF(h.close_device(ctx) == 0, "the handle's ibv_close_device: %s", strerror(errno));
    ctx = NULL;
    if (p)
        munmap(p, LEN);
}

int main(void)
{
    mallopt(M_MMAP_THRESHOLD, 128 << 10);   /* fixed: a freed chunk's size does not raise it */
    preloaded = mrcache_monitors() >= 0;
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    bind_handle();
    RUN(test_handle_repeats_are_cached);
    RUN(test_handles_deregister_through_either_route);
    RUN(test_handle_remapped_memory_gets_new_pages);
    RUN(test_handle_freed_and_malloced_gets_new_pages);
    RUN(test_handle_closes_pd_and_device);
    CHECK_EXIT();
}
