/* test_huge.c - registrations made after libmrcache's huge-page advice, collapse and
 * parallel population, seen from an unmodified program on the software NIC: writes
 * through each MR land in the memory mapped now, also after part of the range was
 * unmapped and mapped again; the program's data survives a collapse; a registration
 * already over the range (whose pinned pages the kernel will not collapse) stays
 * correct; cold memory is populated before the pin; extents of base pages only partly
 * populated are collapsed whichever sources watch the range (a range the userfaultfd
 * source watches refuses that collapse, so it is watched after the preparation). The mode comes from the
 * environment (MRCACHE_HUGEPAGES, MRCACHE_POPULATE), as the program would run; the
 * counters each mode must move are read from libmrcache's JSON dump, and where the
 * library is not preloaded only the data is checked (the reference run). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "mrc_counter.h"

#define MIB (1ul << 20)
#define HUGE (2ul << 20)

static int preloaded;
static const char *mode = "off";   /* MRCACHE_HUGEPAGES */
static int populate_on;            /* MRCACHE_POPULATE names a size */
static int thp_never;

/* A counter of libmrcache's, read only where it is preloaded (mrc_counter fails the test
 * without it); 0 in the reference run, which checks the data alone. */
static long long counter(const char *name)
{
    return preloaded ? mrc_counter(name) : 0;
}

static int huge_mode(void)
{
    return preloaded && strcmp(mode, "off") && !thp_never;
}

static void test_cold_registration_lands_in_current_mapping(void)
{
    size_t len = 16 * MIB;
    char *p = check_map_aligned(len, HUGE);
    CHECK(p);
    if (!p)
        return;
    long long huge0 = counter("huge_page_bytes"), adv0 = counter("huge_advised_bytes");
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr);
    if (!mr)
        return;
    CHECK(write_visible(mr, p, len, 0x5a));
    if (huge_mode()) {
        CHECK(counter("huge_advised_bytes") - adv0 == (long long)len);
        if (counter("huge_page_bytes") == huge0)
            SKIP_TEST("advised, but the kernel gave no huge page (none free?)");
    } else if (preloaded) {
        CHECK(counter("huge_advised_bytes") == adv0);
    }
    CHECK(ibv_dereg_mr(mr) == 0);
    /* Part of the range unmapped and mapped again: the cached MR must not serve it. */
    CHECK(munmap(p + 6 * MIB, 2 * MIB) == 0);
    CHECK(map_anon(p + 6 * MIB, 2 * MIB, MAP_FIXED) == p + 6 * MIB);
    mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && write_visible(mr, p, len, 0xa5));
    if (mr)
        ibv_dereg_mr(mr);
    munmap(p, len);
}

static void test_program_data_survives(void)
{
    size_t len = 8 * MIB;
    char *p = check_map_aligned(len, HUGE);
    CHECK(p);
    if (!p)
        return;
    for (size_t i = 0; i < len; i += 512)
        p[i] = (char)(i / 512 * 7);
    long long col0 = counter("huge_collapsed_bytes");
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr);
    int bad = 0;
    for (size_t i = 0; i < len; i += 512)
        bad += p[i] != (char)(i / 512 * 7);
    CHECKF(bad == 0, "%d bytes changed", bad);
    if (mr)
        CHECK(write_visible(mr, p, len, 0x33));
    if (preloaded && !strcmp(mode, "collapse") && counter("huge_collapsed_bytes") == col0)
        SKIP_TEST("the kernel collapsed nothing here (THP always, or no free huge page)");
    if (mr)
        ibv_dereg_mr(mr);
    munmap(p, len);
}

static void test_registration_over_the_range_stays_correct(void)
{
    size_t len = 8 * MIB, small = 64 << 10;
    char *p = check_map_aligned(len, HUGE);
    CHECK(p);
    if (!p)
        return;
    memset(p, 1, len);
    /* Remote rights: an exact entry of its own, never merged into the one below, so its
     * pages stay pinned under that registration's collapse. */
    struct ibv_mr *a = ibv_reg_mr(pd, p + HUGE, small, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(a);
    long long refused0 = counter("collapse_failures");
    struct ibv_mr *b = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(b);
    if (!a || !b)
        return;
    CHECK(write_visible(a, p + HUGE, small, 0x11));
    CHECK(write_visible(b, p, len, 0x22));
    CHECK(write_visible(a, p + HUGE, small, 0x44));
    if (preloaded && !strcmp(mode, "collapse"))
        CHECKF(counter("collapse_failures") > refused0, "the pinned extent was not refused");
    ibv_dereg_mr(a);
    ibv_dereg_mr(b);
    munmap(p, len);
}

static int populate_known(void)
{
    char *page = map_anon(NULL, 4096, 0);
    int ok = page && madvise(page, 4096, MADV_POPULATE_WRITE) == 0;
    if (page)
        munmap(page, 4096);
    return ok;
}

static void test_cold_memory_populated_first(void)
{
    size_t len = 128 * MIB;
    char *p = check_map_aligned(len, HUGE);
    CHECK(p);
    if (!p)
        return;
    long long pop0 = counter("populated_bytes");
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr && write_visible(mr, p, len, 0x77));
    long long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (preloaded && populate_on && cpus > 1 && !populate_known())
        SKIP_TEST("the kernel lacks MADV_POPULATE_WRITE (Linux 5.14)");
    else if (preloaded && populate_on && cpus > 1)
        CHECK(counter("populated_bytes") - pop0 == (long long)len);
    else if (preloaded)
        CHECK(counter("populated_bytes") == pop0);
    if (mr)
        ibv_dereg_mr(mr);
    /* Without write access: populated for reading, and registered as well. */
    char *q = check_map_aligned(len, HUGE);
    struct ibv_mr *ro = q ? ibv_reg_mr(pd, q, len, 0) : NULL;
    CHECK(ro);
    if (ro)
        ibv_dereg_mr(ro);
    if (q)
        munmap(q, len);
    if (preloaded && !populate_on)
        CHECK(counter("populated_bytes") == pop0);
    munmap(p, len);
}

static void test_sparse_extents_collapse(void)
{
    if (!preloaded || strcmp(mode, "collapse"))
        return (void)SKIP_TEST("MRCACHE_HUGEPAGES is not collapse in this run");
    if (strcmp(check_thp_setting(), "madvise"))
        return (void)SKIP_TEST("needs THP in madvise mode (base pages unless advised)");
    size_t len = 8 * MIB;
    char *p = check_map_aligned(len, HUGE);
    CHECK(p);
    if (!p)
        return;
    for (size_t i = 0; i < len; i += 8192)   /* every other page: a sparse array */
        p[i] = (char)(i >> 13);
    long long col0 = counter("huge_collapsed_bytes"), ref0 = counter("collapse_failures");
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr);
    long long col = counter("huge_collapsed_bytes") - col0, ref = counter("collapse_failures") - ref0;
    if (ref && !col)
        CHECKF(0, "collapsed nothing of %zu bytes, %lld runs refused", len, ref);
    else if (ref)
        SKIP_TEST("the kernel refused part of the collapse (no free huge page?)");
    else
        CHECKF(col == (long long)len, "collapsed %lld of %zu bytes", col, len);
    int bad = 0;
    for (size_t i = 0; i < len; i += 8192)
        bad += p[i] != (char)(i >> 13);
    CHECK(bad == 0);
    if (mr)
        ibv_dereg_mr(mr);
    munmap(p, len);
}

int main(void)
{
    preloaded = getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "libmrcache");
    const char *m = getenv("MRCACHE_HUGEPAGES");
    if (m)
        mode = m;
    const char *pop = getenv("MRCACHE_POPULATE");
    populate_on = pop && strcmp(pop, "off") && strcmp(pop, "0");
    thp_never = !strcmp(check_thp_setting(), "never");
    open_nic();
    if (nic.real) {
        check_skip("test_huge", "the registrations here are the software NIC's (data by lkey)");
        CHECK_EXIT();
    }
    /* The cold test holds two 128 MiB registrations at once. */
    const char *short_of = check_memlock_short(256 * MIB);
    if (short_of) {
        check_skip("test_huge", short_of);
        CHECK_EXIT();
    }
    RUN(test_cold_registration_lands_in_current_mapping);
    RUN(test_program_data_survives);
    RUN(test_registration_over_the_range_stays_correct);
    RUN(test_cold_memory_populated_first);
    RUN(test_sparse_extents_collapse);
    CHECK_EXIT();
}
