/* drainer.h - the deregistration thread for MRs that unmap hooks had to defer. */
#ifndef MRC_DRAINER_H
#define MRC_DRAINER_H

/* Starts the thread once. Not from a hook. */
void mrc_drainer_start(void);

/* Wakes it (the cache's deferred_full callback): safe in any hook. */
void mrc_drainer_wake(void *arg);

/* In a forked child: the thread is not there; the next start makes a new one. */
void mrc_drainer_forget(void);

#endif
