/* test_pinned_back.c - pinned memory the program released comes back, on the software
 * NIC, read where an operator reads it (VmPin in /proc/self/status). Modes (argv[1]):
 *   idle     MRCACHE_IDLE_TIMEOUT: a registration released and then left alone, the
 *            program sleeping with no further verbs call, is deregistered after the
 *            timeout and not before; one reused more often than that stays a hit;
 *   kept     the control (MRCACHE_IDLE_TIMEOUT=0): the same registration stays pinned;
 *   large    MRCACHE_LARGE: a registration larger than the bound is deregistered at its
 *            release and leaves the smaller cached ones alone (MRCACHE_MAX_BYTES=8M);
 *   large-kept  the control (MRCACHE_LARGE=1/1): the same registration stays cached. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)

/* VmPin of this process in bytes, or -1 if the kernel does not report it. */
static long long vm_pin(void)
{
    long long kib = check_status_field("VmPin:", 10);
    return kib < 0 ? -1 : kib * 1024;
}

/* VmPin before a test, or -1 (and the test skips) without it. */
static long long pin_base(void)
{
    long long base = vm_pin();
    if (base < 0)
        SKIP_TEST("no VmPin in /proc/self/status");
    return base;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec t = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&t, NULL);
}

static void *buffer(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, 1, len);
    return p;
}

/* Registers and releases len bytes at p: the cache keeps it (or not). */
static void reg_release(void *p, size_t len)
{
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr != NULL);
    if (mr)
        CHECK(ibv_dereg_mr(mr) == 0);
}

/* Sleeps, with no verbs call, until VmPin is at most want or limit seconds passed;
 * returns the seconds waited. */
static double wait_pin_at_most(long long want, double limit)
{
    double t0 = now_s();
    while (vm_pin() > want && now_s() - t0 < limit)
        sleep_s(0.01);
    return now_s() - t0;
}

static const double timeout = 1.0;   /* MRCACHE_IDLE_TIMEOUT=1s, set by the make fragment */

static void test_idle_released_while_asleep(void)
{
    long long base = pin_base();
    if (base < 0)
        return;
    size_t len = 1 * MIB;
    char *p = buffer(len);
    double t0 = now_s();
    reg_release(p, len);
    CHECKF(vm_pin() >= base + (long long)len, "VmPin %lld after the release, %lld before", vm_pin(), base);
    double waited = wait_pin_at_most(base, 3 * timeout);
    double idle = now_s() - t0;
    CHECKF(vm_pin() <= base, "VmPin %lld KiB after %.2f s asleep (before: %lld KiB)", vm_pin() / 1024, waited,
           base / 1024);
    CHECKF(idle >= timeout, "released after %.3f s, before the %.1f s timeout", idle, timeout);
    CHECKF(idle <= timeout * 1.125 + 0.5, "released only after %.3f s (timeout %.1f s)", idle, timeout);
    munmap(p, len);
}

static void test_reused_stays(void)
{
    size_t len = 256 * KIB;
    char *p = buffer(len);
    uint64_t regs0 = nic_regs();
    /* Reused every tenth of the timeout for twice the timeout: never idle that long. */
    for (double t0 = now_s(); now_s() - t0 < 2 * timeout; sleep_s(timeout / 10))
        reg_release(p, len);
    CHECKF(nic_regs() == regs0 + 1, "%llu registrations for one buffer reused within the timeout",
           (unsigned long long)(nic_regs() - regs0));
    munmap(p, len);
}

static void test_kept_without_timeout(void)
{
    long long base = pin_base();
    if (base < 0)
        return;
    size_t len = 1 * MIB;
    char *p = buffer(len);
    reg_release(p, len);
    sleep_s(3 * timeout);
    CHECKF(vm_pin() >= base + (long long)len, "VmPin %lld KiB: released without a timeout", vm_pin() / 1024);
    munmap(p, len);   /* invalidated: deregistered at the next verbs call or exit */
}

/* MRCACHE_MAX_BYTES=8M: 1/4 of it is 2 MiB. */
static void large_case(int kept)
{
    long long base = pin_base();
    if (base < 0)
        return;
    size_t small = 64 * KIB, big = 4 * MIB;
    char *s = buffer(small), *b = buffer(big);
    uint64_t regs0 = nic_regs();
    reg_release(s, small);
    reg_release(b, big);
    long long pinned = vm_pin() - base;
    if (kept)
        CHECKF(pinned >= (long long)(small + big), "VmPin +%lld KiB: the large one was not kept", pinned / 1024);
    else
        CHECKF(pinned >= (long long)small && pinned < (long long)big,
               "VmPin +%lld KiB after releasing a 4 MiB registration", pinned / 1024);
    reg_release(b, big);
    reg_release(s, small);
    CHECKF(nic_regs() == regs0 + (kept ? 2 : 3), "%llu registrations (the small one must hit%s)",
           (unsigned long long)(nic_regs() - regs0), kept ? ", and the large one" : "");
    munmap(s, small);
    munmap(b, big);
}

static void test_large_not_kept(void)
{
    large_case(0);
}

static void test_large_kept_as_control(void)
{
    large_case(1);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "idle";
    open_nic();
    if (!strcmp(mode, "idle")) {
        RUN(test_idle_released_while_asleep);
        RUN(test_reused_stays);
    } else if (!strcmp(mode, "kept")) {
        RUN(test_kept_without_timeout);
    } else if (!strcmp(mode, "large")) {
        RUN(test_large_not_kept);
    } else if (!strcmp(mode, "large-kept")) {
        RUN(test_large_kept_as_control);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    CHECK_EXIT();
}
