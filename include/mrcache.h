/* mrcache.h - the public API of libmrcache, for programs that know what the cache cannot
 * see (memory unmapped by raw syscalls, device memory managers) or want its statistics.
 * Invariants: header-only on the caller's side (no link dependency: each call looks up
 * the library's exported function once with dlsym and returns -ENOSYS when libmrcache is
 * not loaded); every call returns 0 (or a count, a mask) on success, -errno on failure. */
#ifndef MRCACHE_H
#define MRCACHE_H

/*
 * Using it
 * --------
 *   #include <mrcache.h>          cc prog.c $(pkg-config --cflags --libs mrcache)
 *   LD_PRELOAD=libmrcache.so.0 ./prog    (or without: the calls return -ENOSYS)
 *
 * The calls below are static inline wrappers. Each one resolves its function with
 * dlsym(RTLD_DEFAULT, "mrcache_...") at its first use in a translation unit, caches the
 * answer (atomically: safe from any thread) and calls through it. A program built with
 * this header therefore runs unchanged whether or not libmrcache is preloaded; only
 * dlsym is needed (in libc since glibc 2.34, in libdl before: pkg-config adds -ldl).
 * Do not link with -lmrcache: the library works only when preloaded, in front of
 * libibverbs. The answer "absent" is cached too: a libmrcache loaded later is not seen.
 * Errors are returned, never left in errno: every call leaves errno as it found it.
 *
 * ABI (libmrcache.so.0)
 * ---------------------
 * The exported symbols mrcache_version, mrcache_monitors, mrcache_invalidate,
 * mrcache_flush, mrcache_stats_read and mrcache_stats_dump are libmrcache's ABI, with the
 * signatures declared here. Because callers bind by name through dlsym, not through the
 * soname, the symbol name is the contract: a symbol's signature and meaning never change
 * incompatibly; a new behaviour gets a new flag (unknown flags fail with -EINVAL, so a
 * caller can probe for them) or a new symbol, and old symbols stay. A symbol missing from
 * an older library makes its wrapper return -ENOSYS. struct mrcache_stats grows only at
 * its end and is versioned by size. MRCACHE_VERSION_MAJOR is the soname's number and
 * changes only if a symbol is ever removed; MRCACHE_VERSION_MINOR grows with every
 * addition (a call, a flag, a stats field). There is no ELF symbol versioning: a named
 * version node would stop libmrcache's interposition of libc and libibverbs.
 */

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <dlfcn.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MRCACHE_VERSION_MAJOR 0
#define MRCACHE_VERSION_MINOR 3

struct ibv_pd;   /* from <infiniband/verbs.h>; only its address is used here */

/* Monitor sources: how libmrcache learns that registered memory went away. */
#define MRCACHE_MONITOR_PRELOAD 0x1u  /* munmap, mremap, madvise, mmap(MAP_FIXED), shmdt, brk hooks */
#define MRCACHE_MONITOR_MALLOC  0x2u  /* glibc malloc's own unmaps (free, trim), predicted */
#define MRCACHE_MONITOR_PATCH   0x4u  /* libc's entry points patched: glibc's own calls seen */
#define MRCACHE_MONITOR_UFFD    0x8u  /* userfaultfd events over registered ranges: raw syscalls seen */

/* Flags of mrcache_invalidate. */
#define MRCACHE_INVALIDATE_DEFER 0x1u /* do not deregister now (see mrcache_invalidate) */

/* mrcache_stats_dump: fd for the configured destination, and the format flags. */
#define MRCACHE_DUMP_CONFIGURED (-1)
#define MRCACHE_DUMP_TEXT 0x1u
#define MRCACHE_DUMP_JSON 0x2u

/* Why cached registrations were invalidated: indexes of invalidations_by_cause. */
enum mrcache_inval_cause {
    MRCACHE_INVAL_MUNMAP = 0,
    MRCACHE_INVAL_MREMAP = 1,
    MRCACHE_INVAL_MADVISE = 2,
    MRCACHE_INVAL_MMAP_FIXED = 3,
    MRCACHE_INVAL_SHM = 4,
    MRCACHE_INVAL_BRK = 5,
    MRCACHE_INVAL_FREE = 6,      /* free/realloc of a chunk malloc gives back to the kernel */
    MRCACHE_INVAL_TRIM = 7,      /* heap trimming */
    MRCACHE_INVAL_API = 8,       /* mrcache_invalidate */
    MRCACHE_INVAL_OTHER = 15,    /* a cause newer than this header */
    MRCACHE_INVAL_CAUSES = 16
};

/* A statistics snapshot. Versioned by size: fields are only ever added at the end.
 * Counters run from start-up (a forked child starts again from zero); gauges are now. */
struct mrcache_stats {
    uint32_t size;               /* bytes the library filled in; later fields are 0 */
    uint32_t monitors;           /* MRCACHE_MONITOR_* bits, as mrcache_monitors() */
    uint32_t enabled;            /* 1 if caching is on (MRCACHE_ENABLE) */
    uint32_t reserved;           /* 0 */
    uint64_t wall_ns;            /* time since libmrcache started */
    uint64_t requests;           /* registrations asked of the cache */
    uint64_t hits;               /* ... served by a cached registration */
    uint64_t misses;             /* ... that needed a new registration */
    uint64_t uncached;           /* passed through (uncacheable flags, policy) */
    uint64_t releases;           /* ibv_dereg_mr calls that released a cached MR */
    uint64_t merges;             /* entries absorbed into a larger registration */
    uint64_t evictions;          /* idle registrations dropped to honour a limit */
    uint64_t enomem_retries;     /* ENOMEM/EAGAIN answered by evicting and retrying */
    uint64_t reg_failures;       /* registrations that failed even after retrying */
    uint64_t real_regs;          /* registrations the NIC driver actually made */
    uint64_t real_deregs;        /* ... and deregistrations */
    uint64_t deferred_deregs;    /* deregistrations deferred out of an unmap */
    uint64_t raced_misses;       /* misses whose range was invalidated while registering */
    uint64_t real_reg_ns;        /* time in the driver's registration */
    uint64_t real_dereg_ns;      /* ... and deregistration */
    uint64_t saved_ns;           /* estimated registration time the hits avoided */
    uint64_t invalidations;      /* cached registrations invalidated, all causes */
    uint64_t invalidations_by_cause[MRCACHE_INVAL_CAUSES];  /* enum mrcache_inval_cause */
    uint64_t pinned_bytes;       /* bytes registered by the cache now (in use, idle, deferred) */
    uint64_t pinned_bytes_peak;
    uint64_t registrations;      /* the cache's live registrations now */
    uint64_t registrations_peak;
    uint64_t cached_entries;     /* findable in the cache now */
    uint64_t cached_bytes;
    uint64_t deferred;           /* invalidated, waiting for deregistration */
    uint64_t deferred_bytes;
    /* Since 0.2 (MRCACHE_STATS_SIZE_V2). */
    uint64_t uffd_events;        /* unmap events read from the userfaultfd source */
    uint64_t uffd_caught;        /* entries only the userfaultfd saw go */
    uint64_t uffd_unwatched;     /* registrations the userfaultfd could not watch */
    uint64_t verify_checks;      /* hits checked against /proc/self/pagemap */
    uint64_t verify_stale;       /* ... found stale (and re-registered) */
    /* Since 0.3 (MRCACHE_STATS_SIZE_V3). */
    uint64_t inval_in_use;       /* the program's MRs found still registered over memory
                                  * that was unmapped, freed, discarded or replaced */
};

/* The sizes of the versions of struct mrcache_stats: 0.1's, 0.2's, and 0.3's (this header's). */
#define MRCACHE_STATS_SIZE_V1 352
#define MRCACHE_STATS_SIZE_V2 392
#define MRCACHE_STATS_SIZE_V3 400

#ifdef MRCACHE_BUILDING_LIBRARY

/* Inside libmrcache (src/interpose/api.c, which exports them): the definitions behind
 * the wrappers below, with the same signatures and contracts. */
int mrcache_version(unsigned *major, unsigned *minor);
int mrcache_monitors(void);
int mrcache_invalidate(const void *addr, size_t len, unsigned flags);
int mrcache_flush(struct ibv_pd *pd, unsigned flags);
int mrcache_stats_read(size_t size, struct mrcache_stats *out);
int mrcache_stats_dump(int fd, unsigned flags);

#else

/* The wrappers' own names all start with mrcache__, so that none shadows a name of the
 * program's under -Wshadow; the contracts below use the plain parameter names of the
 * prototypes above. */

/* glibc defines RTLD_DEFAULT only under _GNU_SOURCE; its value is the null handle. */
#ifdef RTLD_DEFAULT
#define MRCACHE__RTLD_DEFAULT RTLD_DEFAULT
#else
#define MRCACHE__RTLD_DEFAULT ((void *)0)
#endif

/* Marks "looked up, not there" in a slot (no function lives at address 1). */
#define MRCACHE__ABSENT ((void *)(uintptr_t)1)

/* The function named name, or NULL when libmrcache is not loaded. Racing first calls
 * both look it up and store the same answer. */
static inline void *mrcache__resolve(void **mrcache__slotp, const char *mrcache__name)
{
    void *mrcache__p = __atomic_load_n(mrcache__slotp, __ATOMIC_ACQUIRE);
    if (!mrcache__p) {
        mrcache__p = dlsym(MRCACHE__RTLD_DEFAULT, mrcache__name);
        if (!mrcache__p)
            mrcache__p = MRCACHE__ABSENT;
        __atomic_store_n(mrcache__slotp, mrcache__p, __ATOMIC_RELEASE);
    }
    return mrcache__p == MRCACHE__ABSENT ? NULL : mrcache__p;
}

/* Declares mrcache__fn, a pointer to 'ret name params' in libmrcache, or returns
 * 'absent' from the calling wrapper. memcpy converts the object pointer dlsym returns
 * into a function pointer without the cast ISO C forbids. */
#define MRCACHE__BIND(ret, params, name, absent)                               \
    static void *mrcache__slot;                                                \
    ret(*mrcache__fn) params;                                                  \
    void *mrcache__p = mrcache__resolve(&mrcache__slot, name);                 \
    if (!mrcache__p)                                                           \
        return absent;                                                         \
    memcpy(&mrcache__fn, &mrcache__p, sizeof(mrcache__fn))

/* The library's version: 0 and *major, *minor set (either may be NULL); -ENOSYS when
 * libmrcache is not loaded (*major and *minor then 0). A program needing calls added in
 * minor N checks major == MRCACHE_VERSION_MAJOR && minor >= N. */
static inline int mrcache_version(unsigned *mrcache__major, unsigned *mrcache__minor)
{
    static void *mrcache__slot;
    int (*mrcache__fn)(unsigned *, unsigned *);
    void *mrcache__p = mrcache__resolve(&mrcache__slot, "mrcache_version");
    if (!mrcache__p) {
        if (mrcache__major)
            *mrcache__major = 0;
        if (mrcache__minor)
            *mrcache__minor = 0;
        return -ENOSYS;
    }
    memcpy(&mrcache__fn, &mrcache__p, sizeof(mrcache__fn));
    return mrcache__fn(mrcache__major, mrcache__minor);
}

/* Which monitor sources are active: a mask of MRCACHE_MONITOR_* bits (0 under
 * MRCACHE_MONITOR=none: then nothing is invalidated unless the program calls
 * mrcache_invalidate). -ENOSYS when libmrcache is not loaded. Bits may be added. */
static inline int mrcache_monitors(void)
{
    MRCACHE__BIND(int, (void), "mrcache_monitors", -ENOSYS);
    return mrcache__fn();
}

/* Tells the cache that [addr, addr+len) has gone away or changed behind its back (a raw
 * munmap syscall, an allocator or device-memory manager of its own, a mapping replaced):
 * no registration made before the call is handed out again for any part of the range.
 * Call it AFTER the change (a registration made between the call and the change would
 * pin the old pages); calling it before as well is harmless. MRs the program still holds
 * are not affected (they keep the pages they pinned, as without the cache).
 * flags 0: registrations this leaves unused are deregistered now, which calls into the
 * NIC driver (it may allocate): not from inside an allocator holding its own lock, not
 * from a signal handler. MRCACHE_INVALIDATE_DEFER: only invalidate; the deregistration
 * happens at the next registration or flush, so the call never leaves libmrcache and is
 * safe inside an allocator's free path. (Never async-signal-safe: it takes a mutex.)
 * Returns 0 (also when nothing was cached there and for len 0); -EINVAL for unknown
 * flags or a range that wraps around the address space; -ENOSYS when libmrcache is not
 * loaded. */
static inline int mrcache_invalidate(const void *mrcache__addr, size_t mrcache__len, unsigned mrcache__flags)
{
    MRCACHE__BIND(int, (const void *, size_t, unsigned), "mrcache_invalidate", -ENOSYS);
    return mrcache__fn(mrcache__addr, mrcache__len, mrcache__flags);
}

/* Deregisters the idle cached registrations of pd (of every pd if pd is NULL) and every
 * deferred deregistration, and asks again for those the NIC refused before. Registrations
 * the program still holds stay. flags must be 0.
 * Calls into the NIC driver: not from an allocator's locked path or a signal handler.
 * Returns how many matching registrations stay, in use or refused by the NIC again
 * (>= 0, at most INT_MAX);
 * -EINVAL for non-zero flags; -ENOSYS when libmrcache is not loaded. */
static inline int mrcache_flush(struct ibv_pd *mrcache__pd, unsigned mrcache__flags)
{
    MRCACHE__BIND(int, (struct ibv_pd *, unsigned), "mrcache_flush", -ENOSYS);
    return mrcache__fn(mrcache__pd, mrcache__flags);
}

/* Reads a statistics snapshot into *out; size is sizeof(*out) as the caller compiled it.
 * The library fills min(size, its own struct size) bytes, zeroes the rest and sets
 * out->size to the bytes filled. Returns 0; -EINVAL if out is NULL or size is below
 * MRCACHE_STATS_SIZE_V1; -ENOSYS when libmrcache is not loaded. *out is untouched on
 * error. Counters from other threads may or may not be in (no lock stops them). */
static inline int mrcache_stats_read(size_t mrcache__size, struct mrcache_stats *mrcache__out)
{
    MRCACHE__BIND(int, (size_t, struct mrcache_stats *), "mrcache_stats_read", -ENOSYS);
    return mrcache__fn(mrcache__size, mrcache__out);
}

/* Writes the statistics now, as libmrcache does at exit: to fd (>= 0; left open), or
 * with fd MRCACHE_DUMP_CONFIGURED to the MRCACHE_STATS destination: stderr for "stderr"
 * and "auto", nothing (and 0) for "off", and for a file pattern a new file named as the
 * pattern plus ".N" (N = 1, 2, ... per call in this process; the exit dump keeps the
 * plain name), created as the exit dump is (never through a symlink, never over an
 * existing file: -EEXIST). flags: MRCACHE_DUMP_TEXT or MRCACHE_DUMP_JSON (the JSON of
 * the exit dump, with its "version"), 0 for MRCACHE_STATS_FORMAT. Returns 0; -EINVAL for
 * unknown or both format flags; -EBADF for a negative fd other than
 * MRCACHE_DUMP_CONFIGURED; the write's or open's -errno; -ENOSYS when absent. */
static inline int mrcache_stats_dump(int mrcache__fd, unsigned mrcache__flags)
{
    MRCACHE__BIND(int, (int, unsigned), "mrcache_stats_dump", -ENOSYS);
    return mrcache__fn(mrcache__fd, mrcache__flags);
}

#undef MRCACHE__BIND

#endif /* MRCACHE_BUILDING_LIBRARY */

#ifdef __cplusplus
}
#endif

#endif
