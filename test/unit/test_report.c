/* test_report.c - the statistics' estimate of the time the hits saved, on reports made
 * up with a known cost of registering: fixed + per_byte * bytes, registrations merged
 * into sizes other than the hits', a first registration paying one-time set-up. The
 * estimate must be what the hits' own sizes would have cost (and their deregistrations),
 * within 2%: not what the larger merged registrations cost, not skewed by the first. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "util/report.h"

#define FIXED 16000.0   /* ns: UCX's model of a NIC's registration */
#define PER_BYTE 0.06   /* ns per byte */

static double cost(uint64_t bytes) { return FIXED + PER_BYTE * (double)bytes; }

static void reg(struct mrc_report *r, uint64_t bytes, double ns)
{
    unsigned k = mrc_hist_bucket(bytes);
    r->s.hist[k][MRC_HIST_REGS]++;
    r->s.hist[k][MRC_HIST_REG_NS] += (uint64_t)ns;
    r->s.hist[k][MRC_HIST_REG_BYTES] += bytes;
    r->s.v[MRC_STAT_REAL_REGS]++;
    if (r->s.v[MRC_STAT_REAL_REGS] == 1) {
        r->s.v[MRC_STAT_FIRST_REG_NS] = (uint64_t)ns;
        r->s.v[MRC_STAT_FIRST_REG_BYTES] = bytes;
    }
}

static void hits(struct mrc_report *r, uint64_t bytes, uint64_t n)
{
    unsigned k = mrc_hist_bucket(bytes);
    r->s.hist[k][MRC_HIST_HITS] += n;
    r->s.hist[k][MRC_HIST_HIT_BYTES] += n * bytes;
}

static int near(double got, double want)
{
    return fabs(got - want) <= 0.02 * want;
}

/* A program registering the same 64 KiB message 20,000 times: its buffers' first
 * registrations merged into 128 KiB .. 576 KiB, the first of them ten times the model. */
static void test_hits_cost_their_own_size(void)
{
    struct mrc_report r;
    memset(&r, 0, sizeof(r));
    reg(&r, 128u << 10, 10 * cost(128u << 10));
    for (uint64_t kib = 192; kib <= 576; kib += 64)
        reg(&r, kib << 10, cost(kib << 10));
    hits(&r, 64u << 10, 19992);
    r.s.v[MRC_STAT_REAL_DEREGS] = 8;
    r.s.v[MRC_STAT_REAL_DEREG_NS] = 8 * 4000;
    double fixed, per_byte;
    mrc_report_reg_model(&r, &fixed, &per_byte);
    CHECKF(near(fixed, FIXED) && fabs(per_byte - PER_BYTE) < 0.005, "model %.0f ns + %.4f ns/B", fixed, per_byte);
    double want = 19992 * (cost(64u << 10) + 4000);
    double got = (double)mrc_report_saved_ns(&r);
    CHECKF(near(got, want), "saved %.0f ns, want %.0f", got, want);
}

/* One registration only (the first): the hits of its size cost what it cost. */
static void test_one_registration(void)
{
    struct mrc_report r;
    memset(&r, 0, sizeof(r));
    reg(&r, 1u << 20, cost(1u << 20));
    hits(&r, 1u << 20, 1000);
    double got = (double)mrc_report_saved_ns(&r), want = 1000 * cost(1u << 20);
    CHECKF(near(got, want), "saved %.0f ns, want %.0f", got, want);
}

/* Registrations of many sizes, hits of many sizes: each hit at its own size. */
static void test_mixed_sizes(void)
{
    struct mrc_report r;
    memset(&r, 0, sizeof(r));
    for (uint64_t b = 4096; b <= (64u << 20); b *= 2)
        for (int i = 0; i < 3; i++)
            reg(&r, b, cost(b));
    double want = 0;
    for (uint64_t b = 8192; b <= (16u << 20); b *= 4) {
        hits(&r, b, 100);
        hits(&r, b / 4 * 3, 100);    /* inside a bucket, not at its top */
        want += 100 * cost(b) + 100 * cost(b / 4 * 3);
    }
    double got = (double)mrc_report_saved_ns(&r);
    CHECKF(near(got, want), "saved %.0f ns, want %.0f", got, want);
}

/* Nothing registered: nothing to model, nothing claimed. */
static void test_no_registration(void)
{
    struct mrc_report r;
    memset(&r, 0, sizeof(r));
    hits(&r, 4096, 10);
    CHECK(mrc_report_saved_ns(&r) == 0);
}

int main(void)
{
    RUN(test_hits_cost_their_own_size);
    RUN(test_one_registration);
    RUN(test_mixed_sizes);
    RUN(test_no_registration);
    CHECK_EXIT();
}
