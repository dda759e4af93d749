/* thread.h - libmrcache's own helper threads (runtime/helper.c's, the userfaultfd handler), and
 * what they need to know about the program's threads.
 * Invariants: they run with every signal blocked, so a program's handler never runs on
 * them (it could call into the cache, or expect its own threads); they are detached:
 * nobody joins them; and they never keep a process alive: glibc ends a process with
 * exit(0) when the last of its threads ends, ours included, so a helper returns once it
 * sees only helpers left (mrc_thread_only_helpers), and glibc then exits on it. */
#ifndef MRC_THREAD_H
#define MRC_THREAD_H

/* Starts fn(arg) on a detached thread with all signals blocked, a small stack and the
 * given name (at most 15 characters), counted as a helper. Returns once the thread has
 * mapped what it maps for itself (its statistics block; its malloc arena too if it
 * mallocs), so that none of it can land in memory the program unmaps and maps again
 * after the start; or after 100 ms, if the thread's first malloc waits for a lock the
 * caller holds. 0 or the pthread_create error. fn calls mrc_thread_leave just before
 * it returns. Not from a hook. */
int mrc_thread_start(void *(*fn)(void *), void *arg, const char *name, int mallocs);

/* Non-zero on a thread mrc_thread_start made. */
extern __thread int mrc_thread_ours;

/* A helper about to return: no longer counted. */
void mrc_thread_leave(void);

/* Whether every thread left is a helper: the program's threads have all ended (the
 * main thread with pthread_exit, the others by returning or pthread_exit). glibc's own
 * count of its threads where it exports one (GLIBC_PRIVATE __nptl_nthreads: one load),
 * else /proc/self/stat. A helper counted late (just started) only makes this say 0. */
int mrc_thread_only_helpers(void);

/* Arranges, from the main thread at start-up, that left() is called when that thread
 * ends with pthread_exit (its thread-specific data destructors run), and when the only
 * thread of a forked child does: until then the program has a thread, so a helper need
 * not look. left must only wake a helper (no lock, no allocation). */
void mrc_thread_watch_main(void (*left)(void));

/* In a child, by any path of fork: it has no helper, and its one thread is the one to
 * watch. */
void mrc_thread_child_reset(void);

/* Whether the thread watched by mrc_thread_watch_main has ended (1 as well if it was
 * never watched: a helper must then look by itself). */
int mrc_thread_main_left(void);

/* Whether the process runs exactly one thread (/proc/self/stat); 0 when it cannot
 * tell. Without allocating. */
int mrc_thread_single(void);

#endif
