/* check.h - the one test helper: CHECK records a failed condition, RUN runs a test
 * function and prints "ok - name", "not ok - name" or "ok - name # SKIP why"
 * (scripts/run-tests.sh counts these lines). A test binary's exit status is 1 if any test failed. Header-only. */
#ifndef MRC_TEST_CHECK_H
#define MRC_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A function the compiler must neither inline nor reason about across the call (a frame
 * a call-site test must see, an address a stale-memory test reads on purpose): GCC's
 * noipa; clang has no noipa, and noinline with optnone keeps the same promise. */
#if defined(__clang__)
#define CHECK_NOIPA __attribute__((noinline, optnone))
#else
#define CHECK_NOIPA __attribute__((noipa))
#endif

/* Before a loop whose call must stay one call instruction (one return address: one call
 * stack for a call-site test), not copies made by unrolling. */
#if defined(__clang__)
#define CHECK_NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define CHECK_NO_UNROLL _Pragma("GCC unroll 1")
#endif

static int check_failures;      /* failed CHECKs in the running test */
static int check_tests_failed;  /* tests with at least one failed CHECK */
static const char *check_skip_why;  /* set by SKIP_TEST in the running test */

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            check_failures++;                                                  \
        }                                                                      \
    } while (0)

/* CHECK with a formatted explanation, for values worth printing. */
#define CHECKF(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            check_failures++;                                                  \
        }                                                                      \
    } while (0)

/* A running test whose precondition did not happen (an interleaving it waits for, a
 * resource): it reports SKIP with the reason instead of ok, unless a CHECK failed. */
#define SKIP_TEST(why) (check_skip_why = (why))

static inline void check_run(const char *name, void (*fn)(void))
{
    check_failures = 0;
    check_skip_why = NULL;
    fn();
    fflush(stderr);
    if (check_failures) {
        check_tests_failed++;
        printf("not ok - %s\n", name);
    } else if (check_skip_why) {
        printf("ok - %s # SKIP %s\n", name, check_skip_why);
    } else {
        printf("ok - %s\n", name);
    }
    fflush(stdout);
}

/* A test that cannot run here says so; it counts as skipped, never as passed. */
static inline void check_skip(const char *name, const char *why)
{
    printf("ok - %s # SKIP %s\n", name, why);
    fflush(stdout);
}

#define RUN(fn) check_run(#fn, fn)
#define CHECK_EXIT() return check_tests_failed ? 1 : 0

#endif
