/* test_uffd_ranges.c - the userfaultfd source's count of watches per page
 * (monitor/uffd_ranges.c) against a brute-force model: a count and a flag per page.
 * Random overlapping adds, subs, clears, adopts and queries with a fixed seed; every run
 * a call reports must be exactly the model's (joined where contiguous), and every page's
 * use must agree after each call. Plus the cases the source relies on, by name. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "monitor/uffd_ranges.h"

#define PG 4096ull
#define NPAGES 192
#define BASE (1ull << 30)
#define OPS 50000

static uint32_t count[NPAGES];
static uint8_t reg[NPAGES];

static uint64_t addr(unsigned page)
{
    return BASE + page * PG;
}

/* What a call reported, page by page (runs must not overlap or touch). */
static uint8_t got[NPAGES];
static int runs_bad;
static uint64_t last_end;

static void record(void *arg, uint64_t start, uint64_t end)
{
    (void)arg;
    if (start >= end || (start - BASE) % PG || (end - BASE) % PG || start < BASE || end > addr(NPAGES) ||
        (last_end && start <= last_end))   /* in order, and never touching the previous run */
        runs_bad = 1;
    last_end = end;
    for (uint64_t a = start; a < end && a < addr(NPAGES); a += PG)
        got[(a - BASE) / PG] = 1;
}

static void reset_record(void)
{
    memset(got, 0, sizeof(got));
    runs_bad = 0;
    last_end = 0;
}

static void check_record(const uint8_t *want, const char *what)
{
    CHECKF(!runs_bad, "%s: runs out of order, touching or misaligned", what);
    CHECKF(!memcmp(got, want, sizeof(got)), "%s: the reported pages differ from the model's", what);
}

static uint32_t rnd_state = 12345;
static uint32_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 17;
    rnd_state ^= rnd_state << 5;
    return rnd_state;
}

static void test_against_model(void)
{
    struct mrc_uffd_ranges r = { 0 };
    memset(count, 0, sizeof(count));
    memset(reg, 0, sizeof(reg));
    /* Live watches, so that subs undo adds as the source does. */
    static struct { unsigned s, e; } live[4096];
    unsigned nlive = 0;
    for (int op = 0; op < OPS && !check_failures; op++) {
        uint8_t want[NPAGES] = { 0 };
        unsigned k = rnd() % 10, s = rnd() % NPAGES, len = 1 + rnd() % (rnd() % 4 ? 8 : 64);
        unsigned e = s + len > NPAGES ? NPAGES : s + len;
        reset_record();
        if (k < 4 && nlive < 4096) {
            int regd = rnd() % 3 != 0;
            CHECK(mrc_uffd_ranges_add(&r, addr(s), addr(e), regd) == 0);
            for (unsigned p = s; p < e; p++) {
                count[p]++;
                reg[p] |= (uint8_t)regd;
            }
            live[nlive].s = s;
            live[nlive++].e = e;
        } else if (k < 8 && nlive) {
            unsigned i = rnd() % nlive;
            s = live[i].s;
            e = live[i].e;
            live[i] = live[--nlive];
            mrc_uffd_ranges_sub(&r, addr(s), addr(e), record, NULL);
            for (unsigned p = s; p < e; p++)
                if (count[p] && !--count[p]) {
                    want[p] = reg[p];
                    reg[p] = 0;
                }
            check_record(want, "sub");
        } else if (k == 8) {
            int any = 0;
            for (unsigned p = s; p < e; p++) {
                any |= count[p] != 0;
                want[p] = count[p] && reg[p];
                reg[p] = 0;
            }
            CHECK(mrc_uffd_ranges_clear(&r, addr(s), addr(e), record, NULL) == any);
            check_record(want, "clear");
        } else {
            mrc_uffd_ranges_adopt(&r, addr(s), addr(e), record, NULL);
            for (unsigned p = s; p < e; p++) {
                want[p] = count[p] == 0;
                if (count[p])
                    reg[p] = 1;
            }
            check_record(want, "adopt");
        }
        for (unsigned p = 0; p < NPAGES; p++)
            CHECKF(mrc_uffd_ranges_used(&r, addr(p), addr(p + 1)) == (count[p] != 0), "op %d: page %u", op, p);
    }
    CHECK(!r.broken);
}

/* Nested, overlapping and repeated watches: a page leaves only with its last watch. */
static void test_nested_and_overlapping(void)
{
    struct mrc_uffd_ranges r = { 0 };
    uint8_t want[NPAGES] = { 0 };
    CHECK(mrc_uffd_ranges_add(&r, addr(0), addr(8), 1) == 0);     /* a merged registration */
    CHECK(mrc_uffd_ranges_add(&r, addr(2), addr(4), 1) == 0);     /* nested in it */
    CHECK(mrc_uffd_ranges_add(&r, addr(6), addr(10), 1) == 0);    /* overlapping its end */
    CHECK(mrc_uffd_ranges_add(&r, addr(6), addr(10), 1) == 0);    /* the same range again */
    reset_record();
    mrc_uffd_ranges_sub(&r, addr(0), addr(8), record, NULL);
    for (unsigned p = 0; p < 6; p++)
        want[p] = p < 2 || p >= 4;
    check_record(want, "the merged one goes: its own pages only");
    reset_record();
    memset(want, 0, sizeof(want));
    mrc_uffd_ranges_sub(&r, addr(6), addr(10), record, NULL);
    check_record(want, "one of two identical watches goes: nothing");
    reset_record();
    mrc_uffd_ranges_sub(&r, addr(6), addr(10), record, NULL);
    for (unsigned p = 6; p < 10; p++)
        want[p] = 1;
    check_record(want, "the other goes");
    CHECK(mrc_uffd_ranges_used(&r, addr(2), addr(4)));
    CHECK(!mrc_uffd_ranges_used(&r, addr(4), addr(64)));
}

/* A watch the kernel refused is counted, so that its unwatch takes nothing from a
 * registration that was watched; pages whose watch left with an unmap are not reported. */
static void test_refused_and_gone(void)
{
    struct mrc_uffd_ranges r = { 0 };
    uint8_t want[NPAGES] = { 0 };
    CHECK(mrc_uffd_ranges_add(&r, addr(0), addr(4), 1) == 0);
    CHECK(mrc_uffd_ranges_add(&r, addr(2), addr(6), 0) == 0);     /* refused (EBUSY, say) */
    reset_record();
    mrc_uffd_ranges_sub(&r, addr(2), addr(6), record, NULL);
    check_record(want, "the refused one goes: nothing was ours only through it");
    CHECK(mrc_uffd_ranges_clear(&r, addr(3), addr(9), NULL, NULL) == 1);   /* unmapped */
    reset_record();
    mrc_uffd_ranges_sub(&r, addr(0), addr(4), record, NULL);
    want[0] = want[1] = want[2] = 1;
    check_record(want, "the unmapped page is not asked to leave again");
    CHECK(!mrc_uffd_ranges_used(&r, 0, ~0ull));
}

int main(void)
{
    RUN(test_against_model);
    RUN(test_nested_and_overlapping);
    RUN(test_refused_and_gone);
    CHECK_EXIT();
}
