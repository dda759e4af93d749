/* api.c - the exported public API (include/mrcache.h): thin calls into the cache and
 * the report layers. Invariants: these symbols are ABI (their names and signatures never
 * change incompatibly: see the header); every call returns 0 or a count, or -errno, and
 * leaves errno as it found it; none runs inside a hook, so each may call the back-end
 * (except where a flag says not). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MRCACHE_BUILDING_LIBRARY
#include "mrcache.h"

#include "interpose/export.h"
#include "interpose/state.h"
#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "util/clock.h"
#include "util/report.h"

_Static_assert(sizeof(struct mrcache_stats) == MRCACHE_STATS_SIZE_V2 &&
                   offsetof(struct mrcache_stats, uffd_events) == MRCACHE_STATS_SIZE_V1,
               "struct mrcache_stats grows only at its end: add a MRCACHE_STATS_SIZE_V3");

/* 0 once libmrcache is ready; a call arriving before our constructor initialises it.
 * -EAGAIN only for a call made from inside our own initialisation. */
static int api_ready(void)
{
    if (!mrc_ready())
        mrc_init();
    return mrc_ready() ? 0 : -EAGAIN;
}

static unsigned monitor_mask(void)
{
    return (mrc_g.watch_unmaps ? MRCACHE_MONITOR_PRELOAD : 0u) |
           (mrc_g.watch_malloc ? MRCACHE_MONITOR_MALLOC : 0u) |
           (*mrc_patch_summary() ? MRCACHE_MONITOR_PATCH : 0u) |
           (mrc_uffd_on() ? MRCACHE_MONITOR_UFFD : 0u);
}

/* The public index of an internal cause: the internal enum may grow and reorder, the
 * public one never changes. */
static int public_cause(int cause)
{
    switch (cause) {
    case MRC_INVAL_MUNMAP: return MRCACHE_INVAL_MUNMAP;
    case MRC_INVAL_MREMAP: return MRCACHE_INVAL_MREMAP;
    case MRC_INVAL_MADVISE: return MRCACHE_INVAL_MADVISE;
    case MRC_INVAL_MMAP_FIXED: return MRCACHE_INVAL_MMAP_FIXED;
    case MRC_INVAL_SHM: return MRCACHE_INVAL_SHM;
    case MRC_INVAL_BRK: return MRCACHE_INVAL_BRK;
    case MRC_INVAL_FREE: return MRCACHE_INVAL_FREE;
    case MRC_INVAL_TRIM: return MRCACHE_INVAL_TRIM;
    case MRC_INVAL_API: return MRCACHE_INVAL_API;
    default: return MRCACHE_INVAL_OTHER;
    }
}

MRC_EXPORT int mrcache_version(unsigned *major, unsigned *minor)
{
    if (major)
        *major = MRCACHE_VERSION_MAJOR;
    if (minor)
        *minor = MRCACHE_VERSION_MINOR;
    return 0;
}

static int do_monitors(void)
{
    int rc = api_ready();
    return rc ? rc : (int)monitor_mask();
}

static int do_invalidate(const void *addr, size_t len, unsigned flags)
{
    if (flags & ~MRCACHE_INVALIDATE_DEFER)
        return -EINVAL;
    uintptr_t a = (uintptr_t)addr;
    if (len && a + len - 1 < a)
        return -EINVAL;
    int rc = api_ready();
    if (rc)
        return rc;
    if (!len)
        return 0;
    mrc_cache_invalidate(&mrc_g.cache, a, len, MRC_INVAL_API);
    /* Not in a hook: the registrations just dropped can be unpinned now, unless the
     * caller is inside its allocator's locked path (the driver may allocate). */
    if (!(flags & MRCACHE_INVALIDATE_DEFER))
        mrc_cache_drain(&mrc_g.cache);
    return 0;
}

static int match_pd(const struct mrc_entry *e, void *pd)
{
    return e->domain == pd;
}

static int do_flush(struct ibv_pd *pd, unsigned flags)
{
    if (flags)
        return -EINVAL;
    int rc = api_ready();
    if (rc)
        return rc;
    /* The cache's domain is the caller's pd (backend/mr.c keys entries on it). */
    uint64_t busy = pd ? mrc_cache_flush(&mrc_g.cache, match_pd, pd) : mrc_cache_flush(&mrc_g.cache, NULL, NULL);
    return busy > INT_MAX ? INT_MAX : (int)busy;
}

static void collect(struct mrc_report *r)
{
    mrc_report_collect(r, &mrc_g.cache, mrc_now_ns() - mrc_g.start_ns, mrc_monitor_name());
}

static int do_stats_read(size_t size, struct mrcache_stats *out)
{
    if (!out || size < MRCACHE_STATS_SIZE_V1)
        return -EINVAL;
    int rc = api_ready();
    if (rc)
        return rc;
    struct mrc_report r;
    collect(&r);
    const uint64_t *v = r.s.v;
    struct mrcache_stats s;
    memset(&s, 0, sizeof(s));
    s.size = (uint32_t)(size < sizeof(s) ? size : sizeof(s));
    s.monitors = monitor_mask();
    s.enabled = __atomic_load_n(&mrc_g.cfg.enable, __ATOMIC_RELAXED) ? 1 : 0;
    s.wall_ns = r.wall_ns;
    s.requests = v[MRC_STAT_REQUESTS];
    s.hits = v[MRC_STAT_HITS];
    s.misses = v[MRC_STAT_MISSES];
    s.uncached = v[MRC_STAT_UNCACHED];
    s.releases = v[MRC_STAT_RELEASES];
    s.merges = v[MRC_STAT_MERGES];
    s.evictions = v[MRC_STAT_EVICTIONS];
    s.enomem_retries = v[MRC_STAT_ENOMEM_RETRIES];
    s.reg_failures = v[MRC_STAT_REG_FAILURES];
    s.real_regs = v[MRC_STAT_REAL_REGS];
    s.real_deregs = v[MRC_STAT_REAL_DEREGS];
    s.deferred_deregs = v[MRC_STAT_DEFERRED];
    s.raced_misses = v[MRC_STAT_RACED];
    s.real_reg_ns = v[MRC_STAT_REAL_REG_NS];
    s.real_dereg_ns = v[MRC_STAT_REAL_DEREG_NS];
    s.saved_ns = mrc_report_saved_ns(&r);
    s.invalidations = v[MRC_STAT_INVALIDATED];
    for (int i = 0; i < MRC_INVAL_LAST; i++)
        s.invalidations_by_cause[public_cause(i)] += v[MRC_STAT_INVAL_BASE + i];
    s.pinned_bytes = r.g.bytes;
    s.pinned_bytes_peak = r.g.bytes_peak;
    s.registrations = r.g.entries;
    s.registrations_peak = r.g.entries_peak;
    s.cached_entries = r.g.tree_entries;
    s.cached_bytes = r.g.tree_bytes;
    s.deferred = r.g.deferred;
    s.deferred_bytes = r.g.deferred_bytes;
    s.uffd_events = v[MRC_STAT_UFFD_EVENTS];
    s.uffd_caught = v[MRC_STAT_UFFD_CAUGHT];
    s.uffd_unwatched = v[MRC_STAT_UFFD_UNWATCHED];
    s.verify_checks = v[MRC_STAT_VERIFY_CHECKS];
    s.verify_stale = v[MRC_STAT_VERIFY_STALE];
    /* An older caller gets the prefix it knows; a newer one zeroes past ours. */
    memcpy(out, &s, s.size);
    if (size > s.size)
        memset((char *)out + s.size, 0, size - s.size);
    return 0;
}

static int configured_off(void)
{
    return !strcmp(mrc_g.cfg.stats, "off");
}

/* Opens the configured destination (not "off") for a dump made now: 2 for stderr, a new
 * "<pattern>.N" file, or -errno. */
static int open_configured(void)
{
    static unsigned seq;
    const char *dest = mrc_g.cfg.stats;
    if (!strcmp(dest, "auto") || !strcmp(dest, "stderr"))
        return 2;
    /* The exit dump will create the pattern's own name: never take it from it. */
    char pattern[sizeof(mrc_g.cfg.stats) + 16];
    int n = snprintf(pattern, sizeof(pattern), "%s.%u", dest, __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    if (n < 0 || (size_t)n >= sizeof(pattern))
        return -ENAMETOOLONG;
    return mrc_report_open(pattern);
}

static int do_stats_dump(int fd, unsigned flags)
{
    if ((flags & ~(MRCACHE_DUMP_TEXT | MRCACHE_DUMP_JSON)) ||
        flags == (MRCACHE_DUMP_TEXT | MRCACHE_DUMP_JSON))
        return -EINVAL;
    if (fd < 0 && fd != MRCACHE_DUMP_CONFIGURED)
        return -EBADF;
    int rc = api_ready();
    if (rc)
        return rc;
    int json = flags ? (flags & MRCACHE_DUMP_JSON) != 0 : mrc_g.cfg.stats_format == MRC_STATS_JSON;
    int out = fd;
    if (fd == MRCACHE_DUMP_CONFIGURED) {
        if (configured_off())
            return 0;    /* whoever configured the process asked for no statistics */
        out = open_configured();
        if (out < 0)
            return out;
    }
    struct mrc_report r;
    collect(&r);
    rc = mrc_report_write(out, &r, json);
    if (out != fd && out != 2)
        close(out);
    return rc;
}

/* The exported entry points: errno is the caller's (an allocator calling from free must
 * not see it change); the result is in the return value. */
#define KEEP_ERRNO(call)                                                       \
    do {                                                                       \
        int saved_errno_ = errno;                                              \
        int rc_ = (call);                                                      \
        errno = saved_errno_;                                                  \
        return rc_;                                                            \
    } while (0)

MRC_EXPORT int mrcache_monitors(void)
{
    KEEP_ERRNO(do_monitors());
}

MRC_EXPORT int mrcache_invalidate(const void *addr, size_t len, unsigned flags)
{
    KEEP_ERRNO(do_invalidate(addr, len, flags));
}

MRC_EXPORT int mrcache_flush(struct ibv_pd *pd, unsigned flags)
{
    KEEP_ERRNO(do_flush(pd, flags));
}

MRC_EXPORT int mrcache_stats_read(size_t size, struct mrcache_stats *out)
{
    KEEP_ERRNO(do_stats_read(size, out));
}

MRC_EXPORT int mrcache_stats_dump(int fd, unsigned flags)
{
    KEEP_ERRNO(do_stats_dump(fd, flags));
}
