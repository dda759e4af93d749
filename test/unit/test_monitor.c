/* test_monitor.c - the monitors on their own, against a fake sink that records what they
 * publish: no cache, no runtime, no preload. Each munmap-family call must announce the
 * range the kernel takes (rounded to pages) before the call and the same range after it
 * with the same ticket; calls that take nothing (mmap without MAP_FIXED, MADV_FREE,
 * growing in place) announce nothing; nothing at all while the sink is not armed; and
 * glibc's free of an mmapped chunk announces the chunk's mapping. */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "check.h"
#include "monitor/glibc_heap.h"
#include "monitor/unmap.h"
#include "util/real.h"

#define MAXEV 16

struct event {
    int done;                   /* 0: begin, 1: done */
    uint64_t addr, len, ticket;
    enum mrc_inval_cause cause;
};

static struct {
    uint32_t armed;
    unsigned n;
    uint64_t next_ticket;
    struct event ev[MAXEV];
    const char *lost;
} fs;

static uint64_t fake_begin(void *arg, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    (void)arg;
    uint64_t t = ++fs.next_ticket;
    if (fs.n < MAXEV)
        fs.ev[fs.n++] = (struct event){ 0, addr, len, t, cause };
    return t;
}

static void fake_done(void *arg, uint64_t ticket, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    (void)arg;
    if (fs.n < MAXEV)
        fs.ev[fs.n++] = (struct event){ 1, addr, len, ticket, cause };
}

static void fake_lost(const char *lost, const char *still)
{
    (void)still;
    fs.lost = lost;
}

static long pg;

static void reset(int armed)
{
    memset(&fs, 0, sizeof(fs));
    fs.armed = (uint32_t)armed;
}

/* The events must be exactly one begin and one done of [addr, addr+len) for cause. */
static void expect_pair(uintptr_t addr, size_t len, enum mrc_inval_cause cause)
{
    CHECKF(fs.n == 2, "%u events, want a begin and a done", fs.n);
    if (fs.n != 2)
        return;
    for (int i = 0; i < 2; i++) {
        CHECKF(fs.ev[i].done == i && fs.ev[i].addr == addr && fs.ev[i].len == len && fs.ev[i].cause == cause,
               "event %d: %s [%#llx, +%#llx) cause %d, want %s [%#llx, +%#llx) cause %d", i,
               fs.ev[i].done ? "done" : "begin", (unsigned long long)fs.ev[i].addr,
               (unsigned long long)fs.ev[i].len, fs.ev[i].cause, i ? "done" : "begin", (unsigned long long)addr,
               (unsigned long long)len, cause);
    }
    CHECK(fs.ev[0].ticket == fs.ev[1].ticket);
}

static char *map(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return p == MAP_FAILED ? NULL : p;
}

static void test_nothing_while_not_armed(void)
{
    reset(0);
    char *p = map(4 * (size_t)pg);
    CHECK(p && mrc_on_munmap(p, 4 * (size_t)pg) == 0);
    CHECK(fs.n == 0);
}

static void test_munmap_rounded_to_pages(void)
{
    reset(1);
    char *p = map(4 * (size_t)pg);
    if (!p)
        return;
    /* From the second page to a byte inside the third: the kernel takes both whole. */
    CHECK(mrc_on_munmap(p + pg, (size_t)pg + 100) == 0);
    expect_pair((uintptr_t)p + (uintptr_t)pg, 2 * (size_t)pg, MRC_INVAL_MUNMAP);
    munmap(p, 4 * (size_t)pg);
}

static void test_mmap_only_fixed_replaces(void)
{
    reset(1);
    char *p = mrc_on_mmap(NULL, (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED && fs.n == 0);
    char *q = mrc_on_mmap(p, (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(q == p);
    expect_pair((uintptr_t)p, (size_t)pg, MRC_INVAL_MMAP_FIXED);
    munmap(p, (size_t)pg);
}

static void test_mremap_takes_the_tail_or_the_whole(void)
{
    reset(1);
    char *p = map(4 * (size_t)pg);
    if (!p)
        return;
    CHECK(mrc_on_mremap(p, 4 * (size_t)pg, 2 * (size_t)pg, 0, NULL) == p);   /* shrink in place */
    expect_pair((uintptr_t)p + 2 * (uintptr_t)pg, 2 * (size_t)pg, MRC_INVAL_MREMAP);
    reset(1);
    CHECK(mrc_on_mremap(p, 2 * (size_t)pg, (size_t)pg, MREMAP_MAYMOVE, NULL) != MAP_FAILED);
    expect_pair((uintptr_t)p, 2 * (size_t)pg, MRC_INVAL_MREMAP);   /* may move: all of it */
    munmap(p, (size_t)pg);
}

static void test_madvise_discards_only(void)
{
    reset(1);
    char *p = map(2 * (size_t)pg);
    if (!p)
        return;
    CHECK(mrc_on_madvise(p, (size_t)pg, MADV_FREE) == 0);
    CHECK(mrc_on_madvise(p, (size_t)pg, MADV_WILLNEED) == 0);
    CHECK(fs.n == 0);
    CHECK(mrc_on_madvise(p, (size_t)pg, MADV_DONTNEED) == 0);
    expect_pair((uintptr_t)p, (size_t)pg, MRC_INVAL_MADVISE);
    munmap(p, 2 * (size_t)pg);
}

static void test_shmdt_takes_the_segment(void)
{
    reset(1);
    int id = shmget(IPC_PRIVATE, 2 * (size_t)pg, IPC_CREAT | 0600);
    CHECK(id >= 0);
    if (id < 0)
        return;
    char *p = shmat(id, NULL, 0);
    shmctl(id, IPC_RMID, NULL);
    CHECK(p != (void *)-1);
    if (p == (void *)-1)
        return;
    CHECK(mrc_on_shmdt(p) == 0);
    expect_pair((uintptr_t)p, 2 * (size_t)pg, MRC_INVAL_SHM);
}

static void test_free_of_mmapped_chunk(void)
{
    if (!mrc_glibc_heap_init()) {
        SKIP_TEST("the allocator is not glibc's");
        return;
    }
    mrc_glibc_heap_watch(1);
    size_t big = 4u << 20;       /* above the mmap threshold: a mapping of its own */
    char *m = malloc(big);
    CHECK(m != NULL);
    if (!m)
        return;
    reset(1);
    mrc_on_free(m);
    CHECKF(fs.n == 2 && fs.ev[0].addr <= (uintptr_t)m && fs.ev[0].addr + fs.ev[0].len >= (uintptr_t)m + big &&
               fs.ev[0].cause == MRC_INVAL_FREE,
           "%u events; the first [%#llx, +%#llx) cause %d for a chunk at %p", fs.n,
           (unsigned long long)fs.ev[0].addr, (unsigned long long)fs.ev[0].len, fs.ev[0].cause, (void *)m);
    reset(1);
    mrc_glibc_heap_watch(0);    /* off: free only forwards */
    mrc_on_free(malloc(big));
    CHECK(fs.n == 0);
}

int main(void)
{
    pg = sysconf(_SC_PAGESIZE);
    mrc_real_resolve_libc();
    struct mrc_inval_sink sink = { &fs.armed, fake_begin, fake_done, NULL, fake_lost };
    mrc_monitor_init(&sink, (uint64_t)pg, 1);
    RUN(test_nothing_while_not_armed);
    RUN(test_munmap_rounded_to_pages);
    RUN(test_mmap_only_fixed_replaces);
    RUN(test_mremap_takes_the_tail_or_the_whole);
    RUN(test_madvise_discards_only);
    RUN(test_shmdt_takes_the_segment);
    RUN(test_free_of_mmapped_chunk);
    CHECK_EXIT();
}
