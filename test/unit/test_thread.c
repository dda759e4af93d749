/* test_thread.c - libmrcache's helper threads (util/thread.c): a start returns only once
 * the new thread has mapped what it maps for itself (its statistics block, its malloc
 * arena when it mallocs), so that none of it can land in a hole the program unmaps and
 * maps again right after; the thread runs with every signal blocked and knows it is
 * ours; the count of helpers follows starts and leaves. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>

#include "check.h"
#include "util/stats.h"
#include "util/thread.h"

static int go, ours_seen, blocked_seen, block_seen;
static int done;

static void *parked(void *arg)
{
    (void)arg;
    __atomic_store_n(&ours_seen, mrc_thread_ours, __ATOMIC_RELAXED);
    __atomic_store_n(&block_seen, mrc_stats_tls != NULL, __ATOMIC_RELAXED);
    sigset_t m;
    pthread_sigmask(SIG_SETMASK, NULL, &m);
    __atomic_store_n(&blocked_seen, sigismember(&m, SIGINT) && sigismember(&m, SIGUSR1), __ATOMIC_RELAXED);
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
        sched_yield();
    mrc_thread_leave();
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Waits until the thread let go, and its exit released its statistics block. */
static void finish(unsigned owned_before)
{
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        sched_yield();
    for (int i = 0; i < 100000 && mrc_stats_blocks_owned() != owned_before; i++)
        sched_yield();
}

static void test_start_returns_after_the_threads_own_mappings(void)
{
    (void)mrc_stats_block();   /* this thread's, before counting */
    for (int round = 0; round < 50; round++) {
        go = done = 0;
        unsigned before = mrc_stats_blocks_owned();
        CHECK(mrc_thread_start(parked, NULL, "mrc-test", round % 2) == 0);
        unsigned after = mrc_stats_blocks_owned();
        CHECKF(after == before + 1, "round %d: %u blocks owned before the start, %u when it returned", round, before,
               after);
        finish(before);
        if (after != before + 1)
            return;
    }
}

static void test_thread_is_ours_with_signals_blocked(void)
{
    go = done = 0;
    unsigned before = mrc_stats_blocks_owned();
    CHECK(mrc_thread_start(parked, NULL, "mrc-test", 0) == 0);
    finish(before);
    CHECK(__atomic_load_n(&ours_seen, __ATOMIC_RELAXED) == 1);
    CHECK(__atomic_load_n(&block_seen, __ATOMIC_RELAXED) == 1);
    CHECK(__atomic_load_n(&blocked_seen, __ATOMIC_RELAXED) == 1);
    CHECK(mrc_thread_ours == 0);   /* the starter is the program's */
}

int main(void)
{
    RUN(test_start_returns_after_the_threads_own_mappings);
    RUN(test_thread_is_ours_with_signals_blocked);
    CHECK_EXIT();
}
