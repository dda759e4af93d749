/* uffd.h - the 'uffd' unmap source: a userfaultfd over every registered range, whose
 * unmap events (raw system calls included, which no hook sees) a handler thread turns
 * into invalidations. Internal functions return 0 or -errno. Invariant: a thread that
 * unmaps a watched range waits only until the handler has read the event; until the
 * handler has also invalidated it, mrc_uffd_busy is non-zero (see mrc_uffd_quiesce). */
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

/* At a registration, outside any hook: opens the userfaultfd, starts the handler and
 * runs the self-test, once per process (a forked child starts its own). Returns 1 if
 * the source is on. Cheap once done. */
int mrc_uffd_start(void);

/* Watches the pages of [addr, addr+len) before they are registered. Never fails the
 * registration: a range that cannot be watched (file-backed memory, another
 * userfaultfd, the VMA budget) is counted (uffd_unwatched) and left to the other
 * sources. Keeps errno. */
void mrc_uffd_watch_slow(uint64_t addr, uint64_t len);
/* Set while the source is on: the one load a registration pays when it is not. Inline,
 * since an out-of-line call would put one more code page on every miss's path. */
extern int mrc_uffd_watching;
static inline void mrc_uffd_watch(uint64_t addr, uint64_t len)
{
    if (__builtin_expect(__atomic_load_n(&mrc_uffd_watching, __ATOMIC_ACQUIRE), 0))
        mrc_uffd_watch_slow(addr, len);
}

/* Whether the source is on, or configured and not yet started (it starts at the first
 * registration). */
int mrc_uffd_on(void);

/* In a forked child: the inherited descriptor is the parent's (its ioctls would act on
 * the parent's address space) and the handler thread is gone; forget both. The child
 * opens its own at its first registration. */
void mrc_uffd_child_reset(void);

#endif
