/* drainer.h - the cache's helper thread: deregisters MRs that unmap hooks had to defer,
 * and keeps the entry and handle pools' reserves of touched memory filled; it never keeps
 * the process alive. */
#ifndef MRC_DRAINER_H
#define MRC_DRAINER_H

/* Starts the thread once and gives the pools their reserves. Not from a hook. */
void mrc_drainer_start(void);

/* Wakes it to drain (the cache's deferred_full callback): safe in any hook. */
void mrc_drainer_wake(void *arg);

/* Wakes it to refill the reserves (the pools' low-reserve callback): the same. */
void mrc_drainer_refill(void *arg);

/* The main thread has left (pthread_exit): the thread then looks, from time to time,
 * whether the program's threads are all gone, and ends once they are, so that the
 * process ends as it would without it. Safe in a thread-specific data destructor. */
void mrc_drainer_watch(void);

/* In a forked child: the thread is not there; the next start makes a new one. */
void mrc_drainer_forget(void);

#endif
