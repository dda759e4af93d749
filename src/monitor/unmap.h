/* unmap.h - the munmap family and discarding advice as memory events, from the preload
 * hooks (interpose/hooks_mem.c) and libc's patched entry points (patch.c): the range each
 * call changes, published before it and after it, and the registry of special mappings
 * kept. Each function performs the real call and returns its result with its errno; a
 * function patched in libc is watched whatever the preload source says. */
#ifndef MRC_UNMAP_H
#define MRC_UNMAP_H

#include <stdarg.h>
#include <stddef.h>
#include <sys/mman.h>
#include <stdint.h>
#include <sys/types.h>

#include "monitor/maps.h"
#include "core/events.h"
#include "util/interposed.h"
#include "util/sys.h"       /* MRC_MREMAP_NEW_ADDR */

struct iovec;

/* The entry points a source can watch, the table's patched rows (util/interposed.h); bit
 * (1u << MRC_FN_x) in mrc_monitor.patched. */
#define MRC_FN_ENUM_NOPATCH(id)
#define MRC_FN_ENUM_ENTRY(id)
#define MRC_FN_ENUM_SYSCALL(id, ID, sys, shape, follow, label, lost) MRC_FN_##ID,
#define MRC_FN_ENUM(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_FN_ENUM_, patch, id)
enum mrc_fn { MRC_FNS(MRC_FN_ENUM) MRC_FN_COUNT };

/* What every source of the monitor layer shares, set once by mrc_monitor_init (the
 * patched bits by patch.c). */
struct mrc_monitor {
    struct mrc_inval_sink sink;
    uint64_t page_size;
    int preload;            /* the preload hooks watch the calls made through the PLT */
    /* Set by patch.c before it writes each jump: the function's libc entry point now
     * lands here, and mrc_real's pointer for it reaches the kernel directly. */
    unsigned patched;
    /* Set while the userfaultfd source watches: called before every mremap, whatever
     * the other sources, since a watched part of the range makes a move or a growth
     * fail (EFAULT) and a move would take the watch along. */
    void (*before_mremap)(void *old, size_t old_size, size_t new_size, int flags);
    /* Set while the userfaultfd source watches: called by a munmap hook once the other
     * sources have published the range, before the call, so that the kernel has no
     * event to report about it and the caller does not wait for the handler. */
    void (*before_munmap)(uint64_t start, uint64_t len);
    /* Set once the program has asked for MADV_NOHUGEPAGE anywhere: a choice about huge
     * pages that libmrcache's own advice must not overrule. */
    uint32_t nohugepage;
    /* The ranges the userfaultfd source has watched (UFFDIO_REGISTER calls that took):
     * its watches split VMAs, which count against vm.max_map_count, so once there is one
     * a mapping call's ENOMEM is looked at. Only grows, but in a forked child (which
     * inherits no watch). */
    uint32_t maps_held;
    /* Set by the runtime: a mapping call was refused for want of memory or mappings
     * while maps_held; gives back what holds VMAs and returns whether the call is worth
     * making again. Any hook, any thread; errno is the caller's. */
    int (*maps_short)(void);
};

extern struct mrc_monitor mrc_monitor;

/* Wires the monitors to their sink. At start-up, before any source is installed. */
void mrc_monitor_init(const struct mrc_inval_sink *sink, uint64_t page_size, int preload);

/* The next mrc_on_* call of this thread ends in fn instead of libc's function (a chained
 * export: the other library's hook). */
void mrc_monitor_next(void *fn);

/* Whether the exported hooks must leave their fast path: the sink is armed, or the
 * registry holds records (which the munmap family must keep up to date). */
static inline int mrc_monitor_busy(void)
{
    return mrc_sink_armed(&mrc_monitor.sink) || mrc_maps_any();
}

/* After a mapping call that failed: whether to make it again (mrc_monitor.maps_short
 * gave back VMAs of ours); errno is kept. */
int mrc_monitor_maps_again(void);

/* Whether an mmap with these flags may make a mapping the registry keeps: shared,
 * hugetlb or a file's. Tests the flags only (no load). */
static inline int mrc_mmap_special(int flags)
{
    return (flags & MAP_TYPE) != MAP_PRIVATE || (flags & (MAP_ANONYMOUS | MAP_HUGETLB)) != MAP_ANONYMOUS;
}

int mrc_on_munmap(void *addr, size_t len);
/* The same, arriving through source entry point src (ld.so's private munmap). */
int mrc_on_munmap_from(enum mrc_fn src, void *addr, size_t len);
void *mrc_on_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *mrc_on_mremap(void *old, size_t old_size, size_t new_size, int flags, void *new_addr);
int mrc_on_madvise(void *addr, size_t len, int advice);
/* Each range with the madvise rule, whichever process the pidfd names. */
ssize_t mrc_on_process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags);
int mrc_on_remap_file_pages(void *addr, size_t size, int prot, size_t pgoff, int flags);
void *mrc_on_shmat(int id, const void *addr, int flags);
int mrc_on_shmdt(const void *addr);
int mrc_on_brk(void *addr);
void *mrc_on_sbrk(intptr_t incr);
/* sbrk_fn(incr), with the pages a shrinking call gives back invalidated around it; the
 * caller has decided the call is watched (patch_chain.c's chained sbrk uses it too). */
void *mrc_monitor_sbrk_shrink(void *(*sbrk_fn)(intptr_t), intptr_t incr);

#endif
