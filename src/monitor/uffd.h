/* uffd.h - the 'uffd' unmap source: a userfaultfd over every registered range, whose
 * unmap events (raw system calls included, which no hook sees) a handler thread turns
 * into invalidations. Internal functions return 0 or -errno. Invariants: a thread that
 * unmaps a watched range waits only until the handler has read the event; until the
 * handler has also invalidated it, mrc_uffd_busy is non-zero (see mrc_uffd_quiesce);
 * a range stays watched exactly while a live registration (cached, in use or waiting
 * for deregistration) needs its pages; the program never meets the source: not in its
 * VMAs after release, its mremap, its own userfaultfd, or its descriptor numbers. */
#ifndef MRC_UFFD_H
#define MRC_UFFD_H

#include <stdint.h>

/* Non-zero from before the handler reads events until their invalidations are done:
 * 1 busy, 2 busy with waiters (futex word). */
extern unsigned mrc_uffd_busy;

void mrc_uffd_quiesce_wait(void);

/* Waits until events already read are invalidated. A thread whose munmap of a watched
 * range has returned may then remap the address and register it: that registration
 * must not find the old entry. One load while the handler is idle (acquire: after a
 * wait, the invalidations are visible). Safe in hooks; never call it with the cache
 * lock held (the handler needs it). */
static inline void mrc_uffd_quiesce(void)
{
    if (__builtin_expect(__atomic_load_n(&mrc_uffd_busy, __ATOMIC_ACQUIRE) != 0, 0))
        mrc_uffd_quiesce_wait();
}

/* Whether to run the source (at start-up, from init). explicit_: MRCACHE_MONITOR named
 * uffd, so failing to start is a warning rather than information. Opens nothing. */
void mrc_uffd_configure(int explicit_);

/* drain(arg) is called from the handler thread after events discarded pages a live
 * registration needed (madvise): the cache then holds deregistrations it deferred,
 * whose watches stay (splitting the program's VMAs) until someone deregisters them. It
 * must not block or allocate. At start-up, before the first registration. */
void mrc_uffd_set_drain(void (*drain)(void *arg), void *arg);

/* At a registration, outside any hook: opens the userfaultfd, starts the handler and
 * runs the self-test, once per process (a forked child starts its own). Returns 1 if
 * the source is on. Cheap once done. */
int mrc_uffd_start(void);

/* Watches the pages of [addr, addr+len) before they are registered: one more live
 * registration needs them. Never fails the registration: a range that cannot be watched
 * (file-backed memory, another userfaultfd, the VMA budget) is counted (uffd_unwatched)
 * and left to the other sources. Every call is matched by one mrc_uffd_unwatch of the
 * same range once the registration is gone (or failed). Keeps errno. */
void mrc_uffd_watch(uint64_t addr, uint64_t len);

/* The registration watched with mrc_uffd_watch(addr, len) is gone: the pages no other
 * live registration needs leave the kernel's registration (their VMAs merge again). It
 * takes the address space's write lock (UFFDIO_UNREGISTER): never from an unmap hook,
 * only where a deregistration may happen. Keeps errno. Both cost one load while the
 * source is off. */
void mrc_uffd_unwatch(uint64_t addr, uint64_t len);

/* A mapping call was refused with ENOMEM: whether the process is within a few VMAs of
 * vm.max_map_count (counted now), which the watches' splits may be the cause of; else
 * the refusal was about memory or unmapped addresses, and giving back watches would
 * not help. And, when it was: the budget's estimate is counted again at the next watch
 * (the program's own mappings are not in it). */
int mrc_uffd_maps_full(void);
void mrc_uffd_watch_recount(void);

/* Whether the source is on, or configured and not yet started (it starts at the first
 * registration). */
int mrc_uffd_on(void);

/* The descriptor's number in the process's table, -1 while there is none: the hooks of
 * close, close_range, closefrom, dup2 and dup3 compare against it (their fast path). */
extern int mrc_uffd_fd;

/* The program closes or replaces descriptors, ours among them (the hooks' slow paths):
 * ours first moves to a free number outside them (never 0-2), so that the numbers the
 * program names are its own and the handler keeps reading; then the call is made. Each
 * returns what the real call returns, with its errno. Any thread; never allocate. */
int mrc_uffd_close(int fd);
int mrc_uffd_close_range(unsigned lo, unsigned hi, int flags);
void mrc_uffd_closefrom(int lo);
int mrc_uffd_dup2(int old, int new_);
int mrc_uffd_dup3(int old, int new_, int flags);

/* ioctl(fd, UFFDIO_REGISTER, arg) made by the program: on a userfaultfd that is not
 * ours, the range is first invalidated and our registration leaves it (the program's
 * own would fail with EBUSY), then the call is made. Later watches of the range are
 * refused by the kernel (counted as uffd_unwatched). Returns the real call's result. */
int mrc_uffd_register_ioctl(int fd, void *arg);

/* In a forked child: the inherited descriptor is the parent's (its ioctls would act on
 * the parent's address space) and the handler thread is gone; forget both, and every
 * count. The child opens its own at its first registration. */
void mrc_uffd_child_reset(void);

#endif
