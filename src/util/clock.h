/* clock.h - timestamps: wall time in nanoseconds, and cheap ticks for timing back-end
 * calls on the miss path. Invariants: ticks are the CPU's time-stamp counter where it
 * runs at a constant rate in every power state (CPUID's invariant-TSC bit), else
 * CLOCK_MONOTONIC nanoseconds; a tick count becomes nanoseconds only through
 * mrc_ticks_to_ns, at a rate measured once. Statistics
 * keep ticks and convert when summed, so a miss pays two counter reads (~11 ns each
 * here) instead of two clock_gettime calls (~26 ns each, kvm-clock). */
#ifndef MRC_CLOCK_H
#define MRC_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

extern int mrc_clock_tsc;   /* ticks are TSC cycles (set once, by mrc_clock_init) */

static inline uint64_t mrc_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline uint64_t mrc_ticks(void)
{
#if defined(__x86_64__)
    if (__builtin_expect(mrc_clock_tsc, 1))
        return __rdtsc();
#endif
    return mrc_now_ns();
}

/* Ticks since t0 (from mrc_ticks on any core), or 0 if the count went backwards: the
 * invariant-TSC bit promises a constant rate, not that every core's counter agrees, and
 * the calling thread may have moved to another core in between. */
static inline uint64_t mrc_ticks_since(uint64_t t0)
{
    int64_t d = (int64_t)(mrc_ticks() - t0);
    return d > 0 ? (uint64_t)d : 0;
}

/* Chooses the tick source and records the calibration's starting point. Call once,
 * before any thread takes ticks (start-up); later calls do nothing. */
void mrc_clock_init(void);

/* ticks as nanoseconds (exact for the monotonic fallback). The TSC's rate is measured
 * once, at the first call, against CLOCK_MONOTONIC since mrc_clock_init, and then kept,
 * so equal tick counts always give equal nanoseconds. The first call may sleep up to
 * 1 ms (only within 1 ms of start-up). Not for hooks. */
uint64_t mrc_ticks_to_ns(uint64_t ticks);

#endif
