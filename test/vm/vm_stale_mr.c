/* vm_stale_mr.c - the stale-MR hazard on a real provider (rxe), loopback RC QP pair
 * (test/lib/rdma_loop.h): register, deregister, munmap, mmap the same address, register
 * again, RDMA WRITE through the new MR and count what the *current* mapping shows.
 * --expect visible|stale names the passing outcome; --raw writes through the first MR,
 * never deregistered (no cache involved). Prints "ok - NAME" / "not ok - NAME" and
 * NAME_teardown. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "rdma_loop.h"
#include "vm_verbs.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
/* Fill words that no pattern word can equal: the pattern has a different top half. */
#define OLD_FILL 0xaaaaaaaaaaaaaaaaull
#define NEW_FILL 0x5555555555555555ull

static struct {
    const char *dev;
    const char *name;
    int gid_index;
    size_t size;
    int expect_stale; /* 1: the pattern must NOT be visible (stale MR); 0: all visible */
    int raw;          /* write through the first MR, never deregistered */
} opt = { "rxe0", NULL, 0, 1 << 20, 0, 0 };

static struct {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct rdma_loop loop;
} v;

static uint64_t pattern_word(size_t i)
{
    return 0xc0ffee0000000000ull ^ (uint64_t)i;
}

static int setup(void)
{
    v.ctx = vm_open_device(opt.dev);
    if (!v.ctx)
        return -1;
    v.pd = ibv_alloc_pd(v.ctx);
    if (!v.pd) {
        perror("ibv_alloc_pd");
        return -1;
    }
    return rdma_loop_open(&v.loop, v.pd, opt.gid_index);
}

/* One signalled RDMA WRITE on the loop into the peer's memory, waiting up to 10 s. */
static int rdma_write(struct ibv_mr *src_mr, void *src, void *dst, uint32_t rkey, size_t len)
{
    return rdma_loop_write(&v.loop, src_mr->lkey, src, (uintptr_t)dst, rkey, len) ? -1 : 0;
}

static int teardown_failed;

static void test_stale_mr(void)
{
    size_t words = opt.size / sizeof(uint64_t), i, seen = 0, new_fill = 0;
    struct ibv_mr *src_mr, *mr1, *mr2;
    uint64_t *src, *dst, *dst2;
    uint32_t rkey1;

    src = mmap(NULL, opt.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    dst = mmap(NULL, opt.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(src != MAP_FAILED && dst != MAP_FAILED);
    if (src == MAP_FAILED || dst == MAP_FAILED)
        return;
    for (i = 0; i < words; i++) {
        src[i] = pattern_word(i);
        dst[i] = OLD_FILL;
    }
    src_mr = ibv_reg_mr(v.pd, src, opt.size, IBV_ACCESS_LOCAL_WRITE);
    mr1 = ibv_reg_mr(v.pd, dst, opt.size, ACCESS);
    CHECKF(src_mr && mr1, "ibv_reg_mr: %s", strerror(errno));
    if (!src_mr || !mr1)
        return;
    /* mr1 must not be read after ibv_dereg_mr (a cache may reuse its handle for mr2). */
    rkey1 = mr1->rkey;
    fprintf(stderr, "# mr1 addr %p lkey 0x%x rkey 0x%x\n", mr1->addr, mr1->lkey, mr1->rkey);

    if (!opt.raw)
        CHECK(ibv_dereg_mr(mr1) == 0);
    /* The unmap a registration cache must notice; then the same address with new pages. */
    CHECK(munmap(dst, opt.size) == 0);
    dst2 = mmap(dst, opt.size, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECKF(dst2 == dst, "remap at %p gave %p (%s)", (void *)dst, (void *)dst2, strerror(errno));
    if (dst2 != dst)
        return;
    for (i = 0; i < words; i++)
        dst[i] = NEW_FILL;

    if (opt.raw) {
        mr2 = mr1;
    } else {
        mr2 = ibv_reg_mr(v.pd, dst, opt.size, ACCESS);
        CHECKF(mr2 != NULL, "second ibv_reg_mr: %s", strerror(errno));
        if (!mr2)
            return;
        fprintf(stderr, "# mr2 addr %p lkey 0x%x rkey 0x%x%s\n", mr2->addr, mr2->lkey,
                mr2->rkey, mr2->rkey == rkey1 ? " (same rkey as mr1: a cache hit)" : "");
    }

    CHECK(rdma_write(src_mr, src, dst, mr2->rkey, opt.size) == 0);
    for (i = 0; i < words; i++) {
        seen += dst[i] == pattern_word(i);
        new_fill += dst[i] == NEW_FILL;
    }
    fprintf(stderr, "# %zu of %zu bytes of the RDMA WRITE visible in the current mapping\n",
            seen * sizeof(uint64_t), opt.size);
    if (opt.expect_stale) {
        /* The write completed but went to the old, still-pinned pages: none of it here,
         * and the new mapping is untouched. */
        CHECKF(seen == 0, "expected a stale MR, but %zu bytes are visible", seen * sizeof(uint64_t));
        CHECK(new_fill == words);
    } else {
        CHECKF(seen == words, "only %zu of %zu bytes visible", seen * sizeof(uint64_t), opt.size);
    }

    if (ibv_dereg_mr(mr2) != 0 || ibv_dereg_mr(src_mr) != 0) {
        fprintf(stderr, "ibv_dereg_mr failed: %s\n", strerror(errno));
        teardown_failed++;
    }
    munmap(dst, opt.size);
    munmap(src, opt.size);
}

/* With a registration cache MRs outlive ibv_dereg_mr: the PD and device must still close. */
static void test_teardown(void)
{
    int rc;

    CHECK(teardown_failed == 0);
    CHECK(rdma_loop_close(&v.loop) == 0);
    if (v.pd)
        CHECKF((rc = ibv_dealloc_pd(v.pd)) == 0, "ibv_dealloc_pd: %s", strerror(rc));
    if (v.ctx)
        CHECKF((rc = ibv_close_device(v.ctx)) == 0, "ibv_close_device: %s", strerror(rc));
}

static void usage(void)
{
    fprintf(stderr, "usage: vm_stale_mr [-d dev] [-g gid_index] [-s bytes] [--raw] "
                    "--expect visible|stale NAME\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option lopts[] = {
        { "expect", required_argument, NULL, 'e' },
        { "raw", no_argument, NULL, 'r' },
        { NULL, 0, NULL, 0 },
    };
    char teardown_name[256];
    int c, expect_set = 0;

    while ((c = getopt_long(argc, argv, "d:g:s:", lopts, NULL)) != -1) {
        switch (c) {
        case 'd': opt.dev = optarg; break;
        case 'g': opt.gid_index = atoi(optarg); break;
        case 's': opt.size = strtoull(optarg, NULL, 0); break;
        case 'r': opt.raw = 1; break;
        case 'e':
            if (strcmp(optarg, "visible") && strcmp(optarg, "stale"))
                usage();
            opt.expect_stale = strcmp(optarg, "stale") == 0;
            expect_set = 1;
            break;
        default: usage();
        }
    }
    if (!expect_set || optind != argc - 1 || opt.size < 4096 || opt.size % 4096)
        usage();
    opt.name = argv[optind];
    snprintf(teardown_name, sizeof(teardown_name), "%s_teardown", opt.name);

    if (setup() != 0) {
        printf("not ok - %s\n", opt.name);
        fflush(stdout);
        return 1;
    }
    check_run(opt.name, test_stale_mr);
    check_run(teardown_name, test_teardown);
    CHECK_EXIT();
}
