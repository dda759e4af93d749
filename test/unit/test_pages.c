/* test_pages.c - what a miss does to its memory before the pin, and what it counts of
 * the NIC's view after it, on real memory of this process with no NIC: the page-size
 * mix and translation entries of a known layout, the warning past 2^20 4 KiB pages,
 * MADV_HUGEPAGE over exactly the empty 2 MiB extents of a range's aligned interior,
 * MADV_COLLAPSE of populated extents with their data kept, no advice over special
 * memory or once the program said MADV_NOHUGEPAGE, and the parallel fault-in. A test
 * whose kernel or THP setting cannot show the effect says SKIP with the reason. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/pagescan.h"
#include "backend/prepare.h"
#include "runtime/state.h"
#include "check.h"
#include "monitor/maps.h"
#include "monitor/unmap.h"
#include "util/real.h"
#include "util/stats.h"

#define MIB (1ul << 20)
#define HUGE MRC_HUGE_SIZE


/* The back-end's preparation of [addr, addr + len) for a pin, described as the runtime
 * describes a miss's memory (the registry, the program's refusals). */
static void prepare(uint64_t addr, uint64_t len, int writable)
{
    struct mrc_range r;
    mrc_range_init(&r, addr, addr + len - 1, mrc_rt_describe);
    mrc_prepare(addr, len, writable, &r);
}
static const char *thp;   /* the system's setting: always, madvise or never */

static uint64_t stat_now(enum mrc_stat s)
{
    struct mrc_stats_block b;
    mrc_stats_sum(&b);
    return b.v[s];
}

static int scan_works(void)
{
    struct mrc_page_mix m;
    char probe[1] = { 1 };
    return mrc_pagescan_mix((uintptr_t)probe, (uintptr_t)probe + 1, &m) == 0;
}

static void configure(int mode, uint64_t populate_min, unsigned threads)
{
    struct mrc_prepare_params p = { mode, HUGE, populate_min, threads };
    mrc_prepare_init(&p);
    mrc_stats_reset();
}

static void test_mix_of_a_known_layout(void)
{
    if (!strcmp(thp, "never"))
        return (void)SKIP_TEST("transparent huge pages are disabled (never)");
    char *p = check_map_aligned(8 * MIB, HUGE);
    CHECK(p);
    if (!p)
        return;
    /* 4 MiB of huge pages, then 4 MiB of base pages whatever the system's setting. */
    CHECK(madvise(p, 4 * MIB, MADV_HUGEPAGE) == 0);
    CHECK(madvise(p + 4 * MIB, 4 * MIB, MADV_NOHUGEPAGE) == 0);
    memset(p, 1, 8 * MIB);
    struct mrc_page_mix m;
    CHECK(mrc_pagescan_mix((uintptr_t)p, (uintptr_t)p + 8 * MIB, &m) == 0);
    if (m.huge_bytes != 4 * MIB) {
        munmap(p, 8 * MIB);
        return (void)check_skipf("the kernel gave %llu KiB of huge pages for 4 MiB advised (no free huge page?)",
                                 (unsigned long long)m.huge_bytes >> 10);
    }
    configure(MRC_HUGE_OFF, 0, 1);
    mrc_prepare_account((uintptr_t)p, 8 * MIB);
    CHECK(stat_now(MRC_STAT_HUGE_PAGE_BYTES) == 4 * MIB);
    CHECK(stat_now(MRC_STAT_SMALL_PAGE_BYTES) == 4 * MIB);
    CHECKF(stat_now(MRC_STAT_NIC_ENTRIES) == 2 + 1024, "%llu", (unsigned long long)stat_now(MRC_STAT_NIC_ENTRIES));
    CHECK(stat_now(MRC_STAT_NIC_ENTRIES_4K) == 2048);
    CHECK(stat_now(MRC_STAT_REGS_OVER_1M_PAGES) == 0);
    /* A range that starts and ends inside pages counts the pages it touches. */
    mrc_stats_reset();
    mrc_prepare_account((uintptr_t)p + 4 * MIB + 100, 3 * MIB);
    CHECK(stat_now(MRC_STAT_NIC_ENTRIES_4K) == 769);
    CHECK(stat_now(MRC_STAT_NIC_ENTRIES) == 769);
    munmap(p, 8 * MIB);
}

static void test_warning_past_a_million_pages(void)
{
    size_t len = (4ul << 30) + 4096;   /* never touched: address space only */
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED)
        return;
    configure(MRC_HUGE_OFF, 0, 1);
    mrc_prepare_account((uintptr_t)p, 4ul << 30);   /* exactly 2^20 pages: no warning */
    CHECK(stat_now(MRC_STAT_REGS_OVER_1M_PAGES) == 0);
    mrc_prepare_account((uintptr_t)p, len);
    mrc_prepare_account((uintptr_t)p, len);
    CHECK(stat_now(MRC_STAT_REGS_OVER_1M_PAGES) == 2);
    CHECK(stat_now(MRC_STAT_NIC_ENTRIES_4K) == (1ull << 20) * 3 + 2);
    munmap(p, len);
}

static void test_advice_over_empty_extents_only(void)
{
    if (!scan_works())
        return (void)SKIP_TEST("the kernel lacks PAGEMAP_SCAN (Linux 6.7)");
    if (!strcmp(thp, "never"))
        return (void)SKIP_TEST("transparent huge pages are disabled (never): MADV_HUGEPAGE does nothing");
    char *p = check_map_aligned(10 * MIB, HUGE);
    CHECK(p);
    if (!p)
        return;
    p[2 * MIB + 8192] = 1;   /* the second extent is populated */
    configure(MRC_HUGE_ADVISE, 0, 1);
    /* From inside the first extent to inside the last: the interior is extents 1-3,
     * of which 2 and 3 are empty and 1 is not. */
    prepare((uintptr_t)p + 4096, 10 * MIB - 8192, 1);
    CHECKF(stat_now(MRC_STAT_HUGE_ADVISED) == 4 * MIB, "%llu KiB",
           (unsigned long long)stat_now(MRC_STAT_HUGE_ADVISED) >> 10);
    memset(p, 2, 10 * MIB);
    struct mrc_page_mix m;
    CHECK(mrc_pagescan_mix((uintptr_t)p, (uintptr_t)p + 10 * MIB, &m) == 0);
    if (strcmp(thp, "always"))   /* under always every extent may be huge anyway */
        CHECKF(m.huge_bytes <= 4 * MIB, "%llu KiB", (unsigned long long)m.huge_bytes >> 10);
    if (!m.huge_bytes)
        SKIP_TEST("the kernel gave no huge page for the advised extents (no free huge page?)");
    /* Below the threshold nothing is advised. */
    char *q = check_map_aligned(4 * MIB, HUGE);
    struct mrc_prepare_params big = { MRC_HUGE_ADVISE, 8 * MIB, 0, 1 };
    mrc_prepare_init(&big);
    mrc_stats_reset();
    prepare((uintptr_t)q, 4 * MIB, 1);
    CHECK(stat_now(MRC_STAT_HUGE_ADVISED) == 0);
    munmap(q, 4 * MIB);
    munmap(p, 10 * MIB);
}

static void test_collapse_keeps_data(void)
{
    if (!scan_works())
        return (void)SKIP_TEST("the kernel lacks PAGEMAP_SCAN (Linux 6.7)");
    char *p = check_map_aligned(4 * MIB, HUGE);
    CHECK(p);
    if (!p)
        return;
    for (size_t i = 0; i < 4 * MIB; i += 4096)
        p[i] = (char)(i >> 12);
    struct mrc_page_mix before, after;
    CHECK(mrc_pagescan_mix((uintptr_t)p, (uintptr_t)p + 4 * MIB, &before) == 0);
    if (before.huge_bytes) {
        munmap(p, 4 * MIB);
        return (void)SKIP_TEST("THP is always: touched memory is huge already");
    }
    configure(MRC_HUGE_COLLAPSE, 0, 1);
    prepare((uintptr_t)p, 4 * MIB, 1);
    CHECK(mrc_pagescan_mix((uintptr_t)p, (uintptr_t)p + 4 * MIB, &after) == 0);
    int bad = 0;
    for (size_t i = 0; i < 4 * MIB; i += 4096)
        bad += p[i] != (char)(i >> 12);
    CHECK(bad == 0);
    if (stat_now(MRC_STAT_COLLAPSE_FAILURES))
        SKIP_TEST("the kernel refused MADV_COLLAPSE here (no free huge page?)");
    else
        CHECKF(after.huge_bytes == 4 * MIB && stat_now(MRC_STAT_HUGE_COLLAPSED) == 4 * MIB, "%llu KiB huge",
               (unsigned long long)after.huge_bytes >> 10);
    munmap(p, 4 * MIB);
}

static void test_no_advice_over_special_or_refused_memory(void)
{
    char *p = mmap(NULL, 4 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    struct mrc_map_attr a = { .flags = MRC_MAP_SHARED };
    mrc_maps_set((uintptr_t)p, (uintptr_t)p + 4 * MIB, &a, mrc_maps_gen());
    configure(MRC_HUGE_COLLAPSE, 0, 1);
    prepare((uintptr_t)p, 4 * MIB, 1);
    CHECK(stat_now(MRC_STAT_HUGE_ADVISED) == 0);
    mrc_maps_clear((uintptr_t)p, (uintptr_t)p + 4 * MIB, mrc_maps_gen(), -1);
    munmap(p, 4 * MIB);
    /* Private memory, but the program has turned huge pages off somewhere. */
    char *q = check_map_aligned(4 * MIB, HUGE);
    prepare((uintptr_t)q, 4 * MIB, 1);
    uint64_t advised = stat_now(MRC_STAT_HUGE_ADVISED);
    mrc_stats_reset();
    char *r = check_map_aligned(4 * MIB, HUGE);
    CHECK(mrc_on_madvise(r, 4096, MADV_NOHUGEPAGE) == 0);
    prepare((uintptr_t)q, 4 * MIB, 1);
    CHECK(stat_now(MRC_STAT_HUGE_ADVISED) == 0);
    if (scan_works() && strcmp(thp, "never"))
        CHECK(advised == 4 * MIB);   /* the control: the same call advised before */
    __atomic_store_n(&mrc_monitor.nohugepage, 0, __ATOMIC_RELAXED);
    munmap(q, 4 * MIB);
    munmap(r, 4 * MIB);
}

static void test_populate_in_parallel(void)
{
    if (!scan_works())
        return (void)SKIP_TEST("the kernel lacks PAGEMAP_SCAN (Linux 6.7)");
    char *p = check_map_aligned(64 * MIB, HUGE);
    CHECK(p);
    if (!p)
        return;
    memset(p, 1, 8 * MIB);   /* resident already: not counted */
    configure(MRC_HUGE_OFF, 32 * MIB, 4);
    prepare((uintptr_t)p, 64 * MIB, 1);
    struct mrc_page_mix m;
    CHECK(mrc_pagescan_mix((uintptr_t)p, (uintptr_t)p + 64 * MIB, &m) == 0);
    CHECKF(m.absent_bytes == 0, "%llu KiB absent", (unsigned long long)m.absent_bytes >> 10);
    CHECK(stat_now(MRC_STAT_POPULATED) == 56 * MIB);
    CHECK(p[0] == 1 && p[8 * MIB] == 0);
    /* Below the threshold (or with one thread) the pin faults pages in itself. */
    char *q = check_map_aligned(16 * MIB, HUGE);
    mrc_stats_reset();
    prepare((uintptr_t)q, 16 * MIB, 1);
    configure(MRC_HUGE_OFF, 1 * MIB, 1);
    prepare((uintptr_t)q, 16 * MIB, 0);
    CHECK(stat_now(MRC_STAT_POPULATED) == 0);
    CHECK(mrc_pagescan_mix((uintptr_t)q, (uintptr_t)q + 16 * MIB, &m) == 0 && m.absent_bytes == 16 * MIB);
    munmap(q, 16 * MIB);
    munmap(p, 64 * MIB);
}

/* Runs recorded by a scan. */
struct runs {
    uint64_t s[16], e[16];
    unsigned n;
};

static int record(uint64_t s, uint64_t e, unsigned flags, void *arg)
{
    struct runs *r = arg;
    (void)flags;
    if (r->n && r->e[r->n - 1] == s) {   /* PAGEMAP_SCAN splits runs by hugeness */
        r->e[r->n - 1] = e;
        return 0;
    }
    if (r->n == 16)
        return -1;
    r->s[r->n] = s;
    r->e[r->n++] = e;
    return 0;
}

static void test_mincore_fallback_finds_the_same_runs(void)
{
    char *p = check_map_aligned(6 * MIB, HUGE);
    CHECK(p);
    if (!p)
        return;
    memset(p + 4096, 1, 3 * 4096);             /* pages 1-3 */
    memset(p + 2 * MIB - 4096, 1, 2 * 4096);   /* across the first window's end */
    p[6 * MIB - 1] = 1;                        /* the last page */
    struct runs a = { .n = 0 }, b = { .n = 0 };
    CHECK(mrc_pagescan_mincore((uintptr_t)p, (uintptr_t)p + 6 * MIB, record, &a) == 0);
    CHECK(a.n == 3);
    CHECK(a.s[0] == (uintptr_t)p + 4096 && a.e[0] == (uintptr_t)p + 4 * 4096);
    CHECK(a.s[1] == (uintptr_t)p + 2 * MIB - 4096 && a.e[1] == (uintptr_t)p + 2 * MIB + 4096);
    CHECK(a.s[2] == (uintptr_t)p + 6 * MIB - 4096 && a.e[2] == (uintptr_t)p + 6 * MIB);
    if (scan_works()) {
        CHECK(mrc_pagescan((uintptr_t)p, (uintptr_t)p + 6 * MIB, record, &b) == 0);
        CHECK(b.n == a.n && !memcmp(a.s, b.s, sizeof(a.s)) && !memcmp(a.e, b.e, sizeof(a.e)));
    }
    munmap(p, 6 * MIB);
}

int main(void)
{
    thp = check_thp_setting();
    mrc_real_resolve_libc();
    mrc_maps_start(4096, 0, 1);
    RUN(test_mix_of_a_known_layout);
    RUN(test_warning_past_a_million_pages);
    RUN(test_advice_over_empty_extents_only);
    RUN(test_collapse_keeps_data);
    RUN(test_no_advice_over_special_or_refused_memory);
    RUN(test_populate_in_parallel);
    RUN(test_mincore_fallback_finds_the_same_runs);
    CHECK_EXIT();
}
