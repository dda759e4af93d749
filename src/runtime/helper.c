/* helper.c - the helper thread (helper.h): when it starts, what wakes it, what it runs
 * and when it ends. It drains the deregistrations the unmap hooks deferred past
 * MRCACHE_MAX_DEFERRED (hooks may not deregister, and a program that unmaps registered
 * memory and then makes no verbs call would keep those pages pinned), refills the pools'
 * reserves (reserve.c), answers the live view (live.c), makes the idle sweeps
 * (expire.c) and gives back idle registrations when the program runs short of mappings
 * (unpin.c); each of those jobs is its own file's, this one only runs them.
 * Invariants: started outside any hook (at the first registration); woken with one futex
 * call (no allocation, no lock, errno kept), or with none while it polls: after a refill
 * it looks again every POLL_NS for a while (POLLS times without work), since a futex wake
 * costs the waker ~30 us here and a stream of misses asks for a refill every 1024 misses;
 * its word lives in the live segment (runtime/live.h) when there is one, so a viewer in
 * another process wakes it too, to publish a snapshot or flush (futex calls are therefore
 * the shared kind); blocks every signal, so the program's handlers never run on it; never
 * keeps the process alive: once the main thread has left with pthread_exit it looks
 * every WATCH_NS whether the program's threads are all gone, and then returns (glibc
 * ends the process with exit(0) when its last thread ends); until then it sleeps until
 * woken, or with MRCACHE_IDLE_TIMEOUT until the next sweep; absent in a forked child
 * until its first registration. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "runtime/helper.h"
#include "runtime/live.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/sys.h"
#include "util/thread.h"

/* What the thread is asked to do: a deregistration drain or a refill of the pools'
 * reserves. Kept apart so that refills, asked for every few hundred misses, never
 * add drains (back-end calls) beside the program's own. */
#define WAKE_DRAIN 1u
#define WAKE_REFILL 2u
#define WAKE_INUSE 4u
#define WAKE_GIVE_BACK 8u

#define POLL_NS 2000000      /* a chunk (512 entries) lasts at least 2 ms of misses */
#define POLLS 50             /* then, 100 ms without work, back to sleeping until woken */
/* Once the main thread has left: how often to look whether any thread of the program is
 * left. The process outlives its last thread by at most this; the look is one load. */
#define WATCH_NS 20000000

static uint32_t own_word;
static uint32_t *wake_word = &own_word;   /* set before the thread starts */
static int polling;          /* the thread looks at wake_word by itself: no wake needed */
static int started;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
/* Give-backs asked for, and the count asked when the last one made began: the word
 * their waiters sleep on. */
static uint32_t gb_asked, gb_done;
static __thread int on_helper;

/* The program's threads are all gone: the reserves go (nobody refills them now), and
 * so does this thread, after which glibc exits, here or on the last other helper. */
static void leave(void)
{
    mrc_rt_reserve_take_back();
    mrc_thread_leave();
}

static void *helper_main(void *arg)
{
    (void)arg;
    on_helper = 1;
    unsigned idle = POLLS;
    for (;;) {
        uint32_t w;
        while (!(w = __atomic_exchange_n(wake_word, 0, __ATOMIC_SEQ_CST))) {
            mrc_rt_expire_due();
            if (idle < POLLS)
                mrc_rt_inuse_scan();   /* records the wake's throttle let pass, while polling */
            if (idle < POLLS) {
                struct timespec poll = { 0, POLL_NS };
                idle++;
                mrc_sys_futex(wake_word, FUTEX_WAIT, 0, &poll);
                continue;
            }
            /* Stop polling before the last look (the futex's own test of the word): a
             * waker that saw 'polling' set had already set its bit, which that test
             * sees; one that comes later sees 'polling' clear and wakes us. */
            __atomic_store_n(&polling, 0, __ATOMIC_SEQ_CST);
            if (!mrc_thread_main_left()) {
                struct timespec sweep;
                mrc_sys_futex(wake_word, FUTEX_WAIT, 0, mrc_rt_expire_wait(&sweep));
                continue;
            }
            if (mrc_thread_only_helpers()) {
                leave();
                return NULL;
            }
            struct timespec watch = { 0, WATCH_NS };
            mrc_sys_futex(wake_word, FUTEX_WAIT, 0, &watch);
        }
        if (w & (WAKE_REFILL | WAKE_INUSE)) {
            __atomic_store_n(&polling, 1, __ATOMIC_SEQ_CST);
            idle = 0;
        }
        if (w & WAKE_DRAIN)
            mrc_cache_drain(&mrc_rt.cache);
        if (w & WAKE_REFILL)
            mrc_rt_reserve_refill();
        if (w & WAKE_INUSE)
            mrc_rt_inuse_scan();
        if (w & MRC_LIVE_WAKE)
            mrc_live_serve();
        if (w & WAKE_GIVE_BACK) {
            /* Every give-back asked before the bit was taken is made by this one. */
            uint32_t asked = __atomic_load_n(&gb_asked, __ATOMIC_ACQUIRE);
            mrc_rt_unpin_for_maps();
            __atomic_store_n(&gb_done, asked, __ATOMIC_RELEASE);
            mrc_sys_futex(&gb_done, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL);
        }
    }
    return NULL;
}

void mrc_helper_start(void)
{
    if (__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&start_lock);
    if (!started) {
        uint32_t *shared = mrc_live_open();
        if (shared)
            wake_word = shared;
        int rc = mrc_thread_start(helper_main, NULL, "mrcache-helper", 1);
        if (rc)
            MRC_WARN("cannot start the helper thread (%d): deferred MRs wait for the next verbs call", rc);
        __atomic_store_n(&started, rc == 0, __ATOMIC_RELEASE);
        if (rc == 0)
            mrc_rt_reserve_give();
    }
    pthread_mutex_unlock(&start_lock);
}

/* A futex wake only when no request was pending (a pending one is seen with ours) and
 * the thread is not polling (it will see ours by itself). */
static void wake(uint32_t what)
{
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE) || __atomic_fetch_or(wake_word, what, __ATOMIC_SEQ_CST) ||
        __atomic_load_n(&polling, __ATOMIC_SEQ_CST))
        return;
    int saved = errno;
    mrc_sys_futex(wake_word, FUTEX_WAKE, 1, NULL);
    errno = saved;
}

void mrc_helper_drain(void *arg)
{
    (void)arg;
    wake(WAKE_DRAIN);
}

void mrc_helper_inuse(void)
{
    wake(WAKE_INUSE);
}

void mrc_helper_refill(void *arg)
{
    (void)arg;
    wake(WAKE_REFILL);
}

int mrc_helper_give_back(uint64_t wait_ns)
{
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE) || on_helper)
        return 0;
    int saved = errno;
    uint32_t want = __atomic_load_n(&gb_asked, __ATOMIC_ACQUIRE);
    if (want == __atomic_load_n(&gb_done, __ATOMIC_ACQUIRE)) {
        want = __atomic_add_fetch(&gb_asked, 1, __ATOMIC_ACQ_REL);
        wake(WAKE_GIVE_BACK);
    }
    uint64_t deadline = mrc_now_ns() + wait_ns;
    for (uint32_t done; (int32_t)((done = __atomic_load_n(&gb_done, __ATOMIC_ACQUIRE)) - want) < 0;) {
        uint64_t now = mrc_now_ns();
        if (now >= deadline)
            break;
        struct timespec left = { (time_t)((deadline - now) / 1000000000u), (long)((deadline - now) % 1000000000u) };
        mrc_sys_futex(&gb_done, FUTEX_WAIT_PRIVATE, done, &left);
    }
    errno = saved;
    return 1;
}

int mrc_helper_giving_back(void)
{
    return __atomic_load_n(&gb_asked, __ATOMIC_ACQUIRE) != __atomic_load_n(&gb_done, __ATOMIC_ACQUIRE);
}

void mrc_helper_watch(void)
{
    wake(0);   /* no work: it looks at the threads left, and keeps looking */
}

void mrc_helper_forget(void)
{
    gb_asked = gb_done = 0;
    started = 0;
    wake_word = &own_word;
    own_word = 0;
    polling = 0;
    pthread_mutex_init(&start_lock, NULL);
}
