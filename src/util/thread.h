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

/* How every helper thread's name starts: what tells them from the program's threads. */
#define MRC_THREAD_PREFIX "mrcache-"

/* Whether only libmrcache's helpers still run: the main thread has ended (it left with
 * pthread_exit: a zombie until the process ends) and every other live thread is named
 * MRC_THREAD_PREFIX.... *main_gone tells whether the main thread has ended. 0 when it
 * cannot tell. Raw system calls into stack buffers: no allocation, no stdio. */
int mrc_thread_only_helpers(int *main_gone);

#endif
