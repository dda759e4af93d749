/* clock.c - picks the tick source and converts ticks to nanoseconds (see clock.h).
 * Invariants: the calibration origin is written once, before mrc_clock_tsc is set; the
 * rate is measured once, at the first conversion (over at least CALIBRATE_NS since the
 * origin), and never changes after: two snapshots of the same counters always convert
 * to the same nanoseconds. */
#include <time.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "util/clock.h"

#define CALIBRATE_NS 1000000u   /* at least 1 ms between the two pairs of readings */
#define PAIR_TRIES 8            /* the tightest of this many pairs is kept */

int mrc_clock_tsc;
static uint64_t tsc0, ns0;
static uint64_t rate;           /* ns per tick, 32.32 fixed point; 0 until measured */

/* Whether the TSC ticks at one rate whatever the core's frequency or sleep state: CPUID
 * leaf 0x80000007, EDX bit 8 ("invariant TSC"). Hypervisors that cannot promise it
 * (migration between hosts of different rates) hide the bit. */
static int tsc_invariant(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
        return 0;
    __cpuid(0x80000007u, a, b, c, d);
    (void)a, (void)b, (void)c;
    return (d >> 8) & 1;
#else
    return 0;
#endif
}

/* A TSC reading and the monotonic time at the same moment, as near as can be told: the
 * TSC read between two clock reads, of the tightest of a few tries (a preemption
 * between the reads would skew the rate), stamped with their midpoint. The error is
 * then tens of nanoseconds per pair: over 1 ms, below 1e-4 of the rate. */
static void read_pair(uint64_t *ns, uint64_t *tsc)
{
#if defined(__x86_64__)
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < PAIR_TRIES; i++) {
        uint64_t a = mrc_now_ns(), t = __rdtsc(), b = mrc_now_ns();
        if (b - a < best) {
            best = b - a;
            *ns = a + (b - a) / 2;
            *tsc = t;
        }
    }
#else
    *ns = mrc_now_ns();
    *tsc = 0;
#endif
}

void mrc_clock_init(void)
{
    if (mrc_clock_tsc || !tsc_invariant())
        return;
    read_pair(&ns0, &tsc0);
    __atomic_store_n(&mrc_clock_tsc, 1, __ATOMIC_RELEASE);
}

static uint64_t measure_rate(void)
{
    uint64_t ns, tsc;
    read_pair(&ns, &tsc);
    if (ns - ns0 < CALIBRATE_NS) {
        /* Asked within a millisecond of start-up (a very short program): wait it out. */
        uint64_t left = CALIBRATE_NS - (ns - ns0);
        struct timespec t = { 0, (long)left };
        while (nanosleep(&t, &t))
            ;
        read_pair(&ns, &tsc);
    }
    if (tsc <= tsc0)
        return 1ull << 32;   /* a TSC that did not advance: count ticks as ns */
    return (uint64_t)(((unsigned __int128)(ns - ns0) << 32) / (tsc - tsc0));
}

uint64_t mrc_ticks_to_ns(uint64_t ticks)
{
    if (!__atomic_load_n(&mrc_clock_tsc, __ATOMIC_ACQUIRE))
        return ticks;
    uint64_t r = __atomic_load_n(&rate, __ATOMIC_ACQUIRE);
    if (!r) {
        /* Racing first conversions measure alike; the first to store wins for good. */
        uint64_t expected = 0, mine = measure_rate();
        r = __atomic_compare_exchange_n(&rate, &expected, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
                ? mine
                : expected;
    }
    return (uint64_t)(((unsigned __int128)ticks * r) >> 32);
}
