/* uffd_priv.h - what the userfaultfd source's two files share: uffd.c (start, the
 * handler thread, the descriptor kept out of the program's way) and uffd_watch.c
 * (watching and unwatching ranges, stepping aside). Internal to the source. */
#ifndef MRC_UFFD_PRIV_H
#define MRC_UFFD_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum { MRC_UFFD_OFF = -1, MRC_UFFD_UNSTARTED = 0, MRC_UFFD_ON = 1 };
/* Set while the source is on: all a watch or unwatch reads while it is not. */
extern int mrc_uffd_watching;
extern int mrc_uffd_state;

/* Serialises every UFFDIO_REGISTER and UFFDIO_UNREGISTER libmrcache makes, the counts
 * that decide them (uffd_watch.c) and the moves of the descriptor. Held across those
 * ioctls and nothing else: never across a wait for the handler, which takes it only
 * after it has read its events. */
extern pthread_mutex_t mrc_uffd_lock;

/* Whether f is our userfaultfd (same device and inode, which identify one userfaultfd
 * since Linux 5.12); errno is fstat's when it is not there at all. */
int mrc_uffd_fd_ours(int f);

/* Our descriptor is gone or someone else's now (closed by a call no hook saw): the
 * source stops; once nothing holds the file (at most the handler's poll) the kernel
 * drops every watch. Once; any thread, any hook. */
void mrc_uffd_lose(const char *why);

/* Announces a failure to watch (counted as uffd_unwatched; said once per reason). */
void mrc_uffd_unwatched(int err);

/* UFFDIO_REGISTER of [start, end) in write-protect mode on f: 0 or an errno value. A
 * raw system call: libmrcache's own ioctl hook must not see ours. */
int mrc_uffd_register_raw(int f, uint64_t start, uint64_t end);

/* At start: the VMA budget from vm.max_map_count and the maps now. */
void mrc_uffd_watch_init(void);

/* The handler's news, each under mrc_uffd_lock. Our registration left [start, end)
 * (unmapped, or moved away). */
void mrc_uffd_watch_gone(uint64_t start, uint64_t end);
/* Pages of [start, end) were discarded: whether a live registration needed them. */
int mrc_uffd_watch_needed(uint64_t start, uint64_t end);
/* A watched mapping moved to [start, end) (a raw mremap): our registration is there now. */
void mrc_uffd_watch_moved(uint64_t start, uint64_t end);

/* In a forked child: no counts, no budget spent. */
void mrc_uffd_watch_reset(void);

/* The mremap step (mrc_monitor.before_mremap while the source is on). */
void mrc_uffd_before_mremap(void *old, size_t old_size, size_t new_size, int flags);
/* The munmap step (mrc_monitor.before_munmap while the source is on). */
void mrc_uffd_before_munmap(uint64_t start, uint64_t len);

#endif
