/* helper.h - the helper thread: it runs, off the program's threads, what hooks may not do
 * and what should not delay a registration, each when asked: the deregistrations unmap
 * hooks deferred (the cache's drain), the refill of the pools' reserves (reserve.c), the
 * live view's snapshots and flushes (live.c), the idle sweeps (expire.c) and the release
 * of idle registrations when the program runs short of mappings (unpin.c). It never
 * keeps the process alive. */
#ifndef MRC_HELPER_H
#define MRC_HELPER_H

#include <stdint.h>

/* Starts the thread once and has the reserves given to the pools. Not from a hook. */
void mrc_helper_start(void);

/* Asks it to drain the deferred deregistrations (the cache's deferred_full callback):
 * safe in any hook. */
void mrc_helper_drain(void *arg);

/* Asks it to look for the program's MRs over memory that changed (runtime/inuse.c):
 * the same. */
void mrc_helper_inuse(void);

/* Asks it to refill the reserves (the pools' low-reserve callback): the same. */
void mrc_helper_refill(void *arg);

/* Asks it to give back the idle registrations (runtime/unpin.c, when the program runs
 * short of mappings), or joins a give-back under way, and waits, at most wait_ns, until
 * it is made. 0 if it was not asked (not started, or this is the helper). Safe in any
 * hook: the wait is bounded because the caller may hold a lock the deregistrations need. */
int mrc_helper_give_back(uint64_t wait_ns);
/* Whether a give-back was asked for and is not made yet. */
int mrc_helper_giving_back(void);

/* The main thread has left (pthread_exit): the thread then looks, from time to time,
 * whether the program's threads are all gone, and ends once they are, so that the
 * process ends as it would without it. Safe in a thread-specific data destructor. */
void mrc_helper_watch(void);

/* In a forked child: the thread is not there; the next start makes a new one. */
void mrc_helper_forget(void);

/* The pools' reserves of touched memory (reserve.c): given to the cache's entry pool and
 * the front-end's handle pool when the helper starts (and filled once), refilled on it
 * when asked, taken back when it leaves. */
void mrc_rt_reserve_give(void);
void mrc_rt_reserve_refill(void);
void mrc_rt_reserve_take_back(void);

#endif
