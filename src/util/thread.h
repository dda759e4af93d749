/* thread.h - libmrcache's own helper threads (the drainer, the userfaultfd handler).
 * Invariant: they run with every signal blocked, so a program's handler never runs on
 * them (it could call into the cache, or expect its own threads), and they are detached:
 * nobody joins them, they end with the process. */
#ifndef MRC_THREAD_H
#define MRC_THREAD_H

/* Starts fn(arg) on a detached thread with all signals blocked, a small stack and the
 * given name (at most 15 characters). 0 or the pthread_create error. */
int mrc_thread_start(void *(*fn)(void *), void *arg, const char *name);

/* Whether the process runs exactly one thread (/proc/self/status); 0 when it cannot
 * tell. Without allocating. */
int mrc_thread_single(void);

#endif
