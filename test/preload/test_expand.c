/* test_expand.c - MRCACHE_EXPAND on the software NIC: a local-only miss registers the
 * allocation around it, bounded by its window and its mapping, never with remote rights,
 * its exact range when the wider registration fails; every handle's data lands in the
 * current mapping, also after part of an expanded range is unmapped and mapped again.
 * EXPAND=on|off says what the run must see (off: the control, where every piece is a
 * registration of its own); EXPECT_STALE=1 (with MRCACHE_MONITOR=none) is the control of
 * the remap checks: there the old pages must show. The window is WINDOW (MRCACHE_EXPAND). */
#include <malloc.h>
#include <stdio.h>

#include "common.h"

#define KIB 1024ul
#define WINDOW (1024 * KIB)   /* the runs' MRCACHE_EXPAND */
#define PIECE (4 * KIB)

static int expand_on, expect_stale;
static int (*fail_reg)(int err, uint32_t n);

static uint64_t pinned(void)
{
    struct snic_stats s;
    nic.get_stats(&s);
    return s.pinned_bytes;
}

/* A test's memory: len bytes of fresh, touched memory aligned to WINDOW (buf), inside
 * the reservation that is unmapped at the end. */
struct area {
    char *res, *buf;
    size_t res_len;
};

static char *area_open(struct area *a, size_t len)
{
    a->res_len = len + WINDOW;
    a->res = map_anon(NULL, a->res_len, 0);
    CHECK(a->res);
    if (!a->res)
        return a->buf = NULL;
    a->buf = (char *)(((uintptr_t)a->res + WINDOW - 1) & ~(uintptr_t)(WINDOW - 1));
    memset(a->buf, 0x5a, len);
    return a->buf;
}

/* Deregisters the n handles (NULL ones skipped), drops what the cache keeps idle, and
 * unmaps the area (a NULL area: only the first two). */
static void area_close(struct area *a, struct ibv_mr **mrs, unsigned n)
{
    for (unsigned k = 0; k < n; k++)
        if (mrs[k])
            ibv_dereg_mr(mrs[k]);
    mrcache_flush(NULL, 0);
    if (a)
        munmap(a->res, a->res_len);
}

static struct ibv_mr *reg(void *p, size_t len, unsigned access)
{
    return ibv_reg_mr(pd, p, len, access);
}

/* 4 KiB pieces of two windows in random order (a fixed seed): with expansion the first
 * piece of each window registers it whole and the rest hit; each handle carries its own
 * range and moves data into the mapping. */
static void test_pieces_in_random_order(void)
{
    struct area ar;
    size_t len = 2 * WINDOW, n = len / PIECE;
    char *buf = area_open(&ar, len);
    if (!buf)
        return;
    unsigned order[512];
    check_shuffle(order, (unsigned)n, 7);
    uint64_t r0 = nic_regs(), p0 = pinned();
    int bad = 0;
    for (unsigned i = 0; i < n; i++) {
        char *p = buf + (size_t)order[i] * PIECE;
        struct ibv_mr *mr = reg(p, PIECE, IBV_ACCESS_LOCAL_WRITE);
        if (!mr || mr->addr != p || mr->length != PIECE || !write_visible(mr, p, PIECE, (unsigned char)i))
            bad++;
        if (mr)
            ibv_dereg_mr(mr);
    }
    CHECKF(bad == 0, "%d pieces failed", bad);
    uint64_t regs = nic_regs() - r0;
    CHECKF(regs == (expand_on ? 2 : n), "%llu NIC registrations for %zu pieces", (unsigned long long)regs, n);
    CHECKF(!expand_on || pinned() - p0 == len, "pinned %llu", (unsigned long long)(pinned() - p0));
    area_close(&ar, NULL, 0);
}

/* A 64 KiB mapping between two PROT_NONE pages: the window (1 MiB) is cut at the
 * mapping's ends, so exactly the mapping is pinned and the guard pages never are. */
static void test_bounded_by_the_mapping(void)
{
    /* m is up to a window less a page past area's start, and reaches 84 KiB past its
     * window's start (its guard page included). */
    const size_t alen = WINDOW + 84 * KIB;
    char *area = map_anon(NULL, alen, 0);
    CHECK(area);
    if (!area)
        return;
    /* Inside one window, so the window would reach past both ends. */
    char *m = (char *)(((uintptr_t)area + WINDOW - 1) & ~(uintptr_t)(WINDOW - 1)) + 16 * KIB;
    CHECK(mprotect(m - PIECE, PIECE, PROT_NONE) == 0);
    CHECK(mprotect(m + 64 * KIB, PIECE, PROT_NONE) == 0);
    memset(m, 1, 64 * KIB);
    uint64_t r0 = nic_regs(), p0 = pinned();
    struct ibv_mr *a = reg(m + 20 * KIB, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, m + 20 * KIB, PIECE, 3));
    uint64_t grew = pinned() - p0;
    CHECKF(grew == (expand_on ? 64 * KIB : PIECE), "pinned %llu", (unsigned long long)grew);
    struct ibv_mr *b = reg(m, PIECE, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *c = reg(m + 60 * KIB, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(b && c && write_visible(b, m, PIECE, 4) && write_visible(c, m + 60 * KIB, PIECE, 5));
    CHECKF(nic_regs() - r0 == (expand_on ? 1 : 3), "%llu registrations", (unsigned long long)(nic_regs() - r0));
    struct ibv_mr *all[] = { a, b, c };
    area_close(NULL, all, 3);
    munmap(area, alen);
}

/* Two 4 MiB malloc'd buffers, each a mapping glibc made on its own, that the kernel
 * joined into one: a piece next to their boundary registers the part of its window in
 * its own chunk only, and freeing the other buffer (its munmap) leaves that registration
 * cached. Needs glibc's malloc, and the two mappings side by side. */
static void test_bounded_by_the_malloc_chunk(void)
{
    enum { LEN = 4 << 20 };
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        SKIP_TEST("malloc is the sanitizer's: no glibc chunks");
        return;
    }
    char *a = malloc(LEN), *b = malloc(LEN);
    CHECK(a && b);
    if (!a || !b)
        return;
    /* glibc maps downwards: b's chunk ends where a's begins (each a page of header). */
    char *b_end = b + LEN, *a_chunk = a - 16;
    /* b's part of the window must hold two pieces: the one registered next to the
     * boundary, and the window's first, registered after a is freed. */
    if ((uintptr_t)a_chunk % (uintptr_t)sysconf(_SC_PAGESIZE) || b_end + 16 + 4096 < a_chunk ||
        (uintptr_t)a_chunk % WINDOW < 2 * PIECE) {
        check_skipf("chunks not side by side across a window with two pieces of b in it (%p, %p)", (void *)a,
                    (void *)b);
        free(a);
        free(b);
        return;
    }
    memset(a, 1, LEN);
    memset(b, 2, LEN);
    /* The last page of b before the boundary: its window reaches into a's chunk. */
    char *piece = (char *)(((uintptr_t)a_chunk - PIECE) & ~(uintptr_t)(PIECE - 1));
    uint64_t p0 = pinned(), r0 = nic_regs();
    struct ibv_mr *m = reg(piece, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && write_visible(m, piece, PIECE, 14));
    uint64_t grew = pinned() - p0, want = expand_on ? (uintptr_t)a_chunk - (uintptr_t)a_chunk / WINDOW * WINDOW : PIECE;
    CHECKF(grew == want, "pinned %llu, expected %llu", (unsigned long long)grew, (unsigned long long)want);
    if (m)
        ibv_dereg_mr(m);
    free(a);   /* munmap of a's chunk */
    char *first = (char *)((uintptr_t)piece & ~(uintptr_t)(WINDOW - 1));
    struct ibv_mr *m2 = reg(first, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m2 && write_visible(m2, first, PIECE, 15));
    CHECKF(nic_regs() - r0 == (expand_on ? 1u : 2u), "%llu registrations", (unsigned long long)(nic_regs() - r0));
    area_close(NULL, &m2, 1);
    free(b);
}

/* Remote rights keep the caller's exact range: only the requested bytes are pinned, a
 * neighbouring piece is a registration of its own, and the rkey reaches nothing past the
 * range (the software NIC refuses an address outside the MR with EINVAL). */
static void test_remote_rights_stay_exact(void)
{
    struct area ar;
    char *buf = area_open(&ar, WINDOW);
    if (!buf)
        return;
    unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    uint64_t r0 = nic_regs(), p0 = pinned();
    struct ibv_mr *a = reg(buf + 8 * KIB, PIECE, acc);
    CHECK(a && pinned() - p0 == PIECE);
    struct ibv_mr *b = reg(buf + 12 * KIB, PIECE, acc);
    CHECK(b && nic_regs() - r0 == 2);
    char x[16] = { 0 };
    if (a) {
        CHECK(nic.rdma_write(a->rkey, (uintptr_t)buf + 8 * KIB, x, sizeof(x)) == 0);
        CHECK(nic.rdma_write(a->rkey, (uintptr_t)buf + 12 * KIB, x, sizeof(x)) == EINVAL);
        CHECK(nic.rdma_write(a->rkey, (uintptr_t)buf + 4 * KIB, x, sizeof(x)) == EINVAL);
    }
    /* A local-only piece next to them still expands, and never lends them its range. */
    struct ibv_mr *c = reg(buf + 64 * KIB, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(c && write_visible(c, buf + 64 * KIB, PIECE, 9));
    struct ibv_mr *d = reg(buf + 16 * KIB, PIECE, acc);
    CHECK(d && nic_regs() - r0 == 4);
    if (d)
        CHECK(nic.rdma_write(d->rkey, (uintptr_t)buf + 20 * KIB, x, sizeof(x)) == EINVAL);
    struct ibv_mr *all[] = { a, b, c, d };
    area_close(&ar, all, 4);
}

/* The NIC refuses the wider registration: the caller's own range is registered instead,
 * and the call succeeds as it would without the cache. */
static void test_refused_expansion_falls_back(void)
{
    struct area ar;
    char *buf = area_open(&ar, WINDOW);
    if (!buf)
        return;
    uint64_t p0 = pinned();
    CHECK(fail_reg(EFAULT, 1) == 0);
    struct ibv_mr *a = reg(buf + 32 * KIB, PIECE, IBV_ACCESS_LOCAL_WRITE);
    int err = errno;
    CHECKF(expand_on ? a != NULL : a == NULL, "errno %d", err);
    if (a) {
        CHECK(pinned() - p0 == PIECE);   /* the page, not the window */
        CHECK(write_visible(a, buf + 32 * KIB, PIECE, 6));
    }
    fail_reg(0, 0);
    area_close(&ar, &a, 1);
}

/* A guard region (MADV_GUARD_INSTALL, Linux 6.13) splits no mapping: the window over it
 * cannot be pinned, so the NIC refuses the wider registration and the request's own
 * page is registered. */
#define GUARD_INSTALL 102
static void test_guard_region_in_the_window(void)
{
    struct area ar;
    char *buf = area_open(&ar, WINDOW);
    if (!buf)
        return;
    if (madvise(buf + 512 * KIB, PIECE, GUARD_INSTALL) != 0) {
        check_skipf("MADV_GUARD_INSTALL: %s (Linux 6.13+)", strerror(errno));
        area_close(&ar, NULL, 0);
        return;
    }
    uint64_t p0 = pinned();
    struct ibv_mr *a = reg(buf + 64 * KIB, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, buf + 64 * KIB, PIECE, 13));
    CHECKF(pinned() - p0 == PIECE, "pinned %llu", (unsigned long long)(pinned() - p0));
    area_close(&ar, &a, 1);
}

/* Part of an expanded range unmapped and mapped again, with one piece of it held and
 * another idle: registrations made after it write into the new pages, and the held
 * handle keeps writing into its own, still mapped. Under MRCACHE_MONITOR=none the
 * remapped pieces must come out stale. */
static void test_remap_part_of_expanded_range(void)
{
    struct area ar;
    char *buf = area_open(&ar, WINDOW);
    if (!buf)
        return;
    char *held = buf, *idle = buf + 256 * KIB, *moved = buf + 512 * KIB;
    struct ibv_mr *h = reg(held, PIECE, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *i = reg(idle, PIECE, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *m = reg(moved, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(h && i && m);
    if (!h || !i || !m) {
        struct ibv_mr *got[] = { h, i, m };
        area_close(&ar, got, 3);
        return;
    }
    ibv_dereg_mr(i);
    ibv_dereg_mr(m);
    /* 64 KiB around moved, and the idle piece's own page, replaced by fresh pages. */
    CHECK(munmap(moved - 32 * KIB, 64 * KIB) == 0);
    CHECK(map_anon(moved - 32 * KIB, 64 * KIB, MAP_FIXED) == moved - 32 * KIB);
    CHECK(mmap(idle, PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == idle);
    int fresh = 0;
    struct ibv_mr *m2 = reg(moved, PIECE, IBV_ACCESS_LOCAL_WRITE);
    fresh += m2 && write_visible(m2, moved, PIECE, 7);
    struct ibv_mr *i2 = reg(idle, PIECE, IBV_ACCESS_LOCAL_WRITE);
    fresh += i2 && write_visible(i2, idle, PIECE, 8);
    /* A piece never registered, in the replaced range but past the moved piece. */
    struct ibv_mr *n = reg(moved + 16 * KIB, PIECE, IBV_ACCESS_LOCAL_WRITE);
    fresh += n && write_visible(n, moved + 16 * KIB, PIECE, 10);
    CHECKF(fresh == (expect_stale ? 0 : 3), "%d of 3 fresh", fresh);
    CHECK(write_visible(h, held, PIECE, 11));
    /* The held piece registered again: the pages there never changed, so it must land. */
    struct ibv_mr *h2 = reg(held + PIECE, PIECE, IBV_ACCESS_LOCAL_WRITE);
    CHECK(h2 && write_visible(h2, held + PIECE, PIECE, 12));
    struct ibv_mr *all[] = { h, m2, i2, n, h2 };
    area_close(&ar, all, 5);
}

/* Fresh 64 KiB malloc'd buffers, each registered once, written through and freed at the
 * end; then the heap released and grown again, and the same again: each handle lands in
 * the pages mapped now. Under glibc's malloc the buffers lie next to each other in the
 * heap, and with its top pad at 4 MiB the heap is mapped ahead of them (by default it
 * grows 128 KiB past each, so a window reaches one or two buffers ahead): with
 * expansion nearly all registrations are hits. */
static void test_fresh_malloc_buffers(void)
{
    enum { N = 32, LEN = 64 * KIB };
    int asan = dlsym(RTLD_DEFAULT, "__asan_init") != NULL;
    mallopt(M_TOP_PAD, 4 << 20);
    for (int round = 0; round < 2; round++) {
        char *b[N];
        struct ibv_mr *mr[N];
        uint64_t r0 = nic_regs();
        int bad = 0;
        for (int k = 0; k < N; k++) {
            b[k] = malloc(LEN);
            CHECK(b[k]);
            if (!b[k])
                return;
            memset(b[k], 0, LEN);
            mr[k] = reg(b[k], LEN, IBV_ACCESS_LOCAL_WRITE);
            if (!mr[k] || !write_visible(mr[k], b[k], LEN, (unsigned char)(k + 1)))
                bad++;
        }
        uint64_t regs = nic_regs() - r0;
        CHECKF(bad == 0, "round %d: %d buffers failed", round, bad);
        if (!asan)
            CHECKF(expand_on ? regs <= N / 4 : regs == N, "round %d: %llu registrations for %d buffers", round,
                   (unsigned long long)regs, N);
        for (int k = 0; k < N; k++) {
            if (mr[k])
                ibv_dereg_mr(mr[k]);
            free(b[k]);
        }
        malloc_trim(0);
    }
    mallopt(M_TOP_PAD, 128 << 10);
    mrcache_flush(NULL, 0);
}

int main(void)
{
    const char *e = getenv("EXPAND");
    expand_on = e && !strcmp(e, "on");
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    if (nic.real) {
        check_skip("test_expand", "counts the software NIC's pinned bytes and uses its failure injector");
        return 0;
    }
    *(void **)&fail_reg = dlsym(RTLD_DEFAULT, "snic_fail_reg");
    if (!expect_stale) {
        RUN(test_pieces_in_random_order);
        RUN(test_bounded_by_the_mapping);
        RUN(test_bounded_by_the_malloc_chunk);
        RUN(test_remote_rights_stay_exact);
        RUN(test_refused_expansion_falls_back);
        RUN(test_guard_region_in_the_window);
        RUN(test_fresh_malloc_buffers);
    }
    RUN(test_remap_part_of_expanded_range);
    CHECK_EXIT();
}
