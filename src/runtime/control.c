/* control.c - the public API's logic (include/mrcache.h; exported by interpose/api.c)
 * and the statistics dumps: at exit, on MRCACHE_DUMP_SIGNAL, on request. Invariants:
 * nothing is done before libmrcache is ready; none runs inside a hook, so each may call
 * the back-end (except where a flag says not); the public header's numbers (causes, monitor bits, the stats struct's layout) never change, so
 * the internal ones are translated here. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MRCACHE_BUILDING_LIBRARY
#include "mrcache.h"

#include "backend/odp.h"
#include "monitor/glibc_heap.h"
#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/clock.h"
#include "util/report.h"
#include "util/sys.h"

_Static_assert(sizeof(struct mrcache_stats) == MRCACHE_STATS_SIZE_V3 &&
                   offsetof(struct mrcache_stats, inval_in_use) == MRCACHE_STATS_SIZE_V2 &&
                   offsetof(struct mrcache_stats, uffd_events) == MRCACHE_STATS_SIZE_V1,
               "struct mrcache_stats grows only at its end: add a MRCACHE_STATS_SIZE_V3");

/* 0 once libmrcache is ready (initialised here if the call came before our constructor);
 * -EAGAIN only for a call made from inside our own initialisation. */
static int api_ready(void)
{
    if (__builtin_expect(!mrc_ready(), 0))
        mrc_rt_activate();
    if (!mrc_ready())
        return -EAGAIN;
    mrc_rt_fork_check();
    return 0;
}

static unsigned monitor_mask(void)
{
    return (mrc_rt.watch_unmaps ? MRCACHE_MONITOR_PRELOAD : 0u) |
           (__atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED) ? MRCACHE_MONITOR_MALLOC : 0u) |
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

int mrc_rt_api_monitors(void)
{
    int rc = api_ready();
    return rc ? rc : (int)monitor_mask();
}

int mrc_rt_api_invalidate(const void *addr, size_t len, unsigned flags)
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
    mrc_cache_invalidate(&mrc_rt.cache, a, len, MRC_INVAL_API);
    /* Not in a hook: the registrations just dropped can be unpinned now, unless the
     * caller is inside its allocator's locked path (the driver may allocate). */
    if (!(flags & MRCACHE_INVALIDATE_DEFER))
        mrc_cache_drain(&mrc_rt.cache);
    return 0;
}

int mrc_rt_api_flush(struct ibv_pd *pd, unsigned flags)
{
    if (flags)
        return -EINVAL;
    int rc = api_ready();
    if (rc)
        return rc;
    uint64_t busy = pd ? mrc_verbs_flush_pd(&mrc_rt.verbs, pd) : mrc_cache_flush(&mrc_rt.cache, NULL, NULL);
    return busy > INT_MAX ? INT_MAX : (int)busy;
}

/* The report's contents now. Gauges first: they settle runs an unmap parked, whose
 * invalidations are then in the statistics. */
static void collect(struct mrc_report *r)
{
    mrc_rt_inuse_scan();   /* a change not yet looked at is counted before the counts are read */
    mrc_cache_get_gauges(&mrc_rt.cache, &r->g);
    mrc_stats_sum(&r->s);
    r->wall_ns = mrc_now_ns() - mrc_rt.start_ns;
    r->monitor = mrc_rt_monitor_name();
    r->odp_mode = mrc_odp_mode_name();
    r->odp_ndevs = mrc_odp_devices(r->odp_devs, MRC_REPORT_ODP_DEVS);
}

/* collect, and the largest cached registrations (MRCACHE_DUMP_MRS) for a dump. Returns
 * their list, for the caller to free; NULL if none were asked for or there is no memory. */
static struct mrc_report_mr *collect_dump(struct mrc_report *r)
{
    collect(r);
    r->mrs = NULL;
    r->nmrs = 0;
    uint64_t period_ns = mrc_rt_expire_period_ns();
    r->idle_precision_ms = (period_ns + 999999) / 1000000;
    uint64_t n = mrc_rt.cfg.dump_mrs < r->g.tree_entries ? mrc_rt.cfg.dump_mrs : r->g.tree_entries;
    if (!n)
        return NULL;
    struct mrc_cache_mr *found = calloc(n, sizeof(*found));
    struct mrc_report_mr *mrs = calloc(n, sizeof(*mrs));
    if (found && mrs) {
        unsigned k = mrc_cache_largest(&mrc_rt.cache, found, (unsigned)n);
        for (unsigned i = 0; i < k; i++) {
            const struct mrc_cache_mr *f = &found[i];
            mrs[i] = (struct mrc_report_mr){
                .addr = f->addr, .len = f->len, .lkey = f->lkey, .rkey = f->rkey, .access = f->access,
                .users = f->users,
                .idle_ms = f->users || !period_ns ? MRC_REPORT_IDLE_UNKNOWN : f->idle_ticks * period_ns / 1000000,
            };
        }
        r->mrs = mrs;
        r->nmrs = k;
    } else {
        free(mrs);
        mrs = NULL;
    }
    free(found);
    return mrs;
}

int mrc_rt_api_stats_read(size_t size, struct mrcache_stats *out)
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
    s.enabled = __atomic_load_n(&mrc_rt.cfg.enable, __ATOMIC_RELAXED) ? 1 : 0;
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
    s.inval_in_use = v[MRC_STAT_INVAL_IN_USE];
    /* An older caller gets the prefix it knows; a newer one zeroes past ours. */
    memcpy(out, &s, s.size);
    if (size > s.size)
        memset((char *)out + s.size, 0, size - s.size);
    return 0;
}

static int configured_off(void)
{
    return !strcmp(mrc_rt.cfg.stats, "off");
}

/* Opens the configured destination (not "off") for a dump made now: 2 for stderr, a new
 * "<pattern>.N" file, or -errno. */
static int open_configured(void)
{
    static unsigned seq;
    const char *dest = mrc_rt.cfg.stats;
    if (!strcmp(dest, "auto") || !strcmp(dest, "stderr"))
        return 2;
    /* The exit dump will create the pattern's own name: never take it from it. */
    char pattern[sizeof(mrc_rt.cfg.stats) + 16];
    int n = snprintf(pattern, sizeof(pattern), "%s.%u", dest, __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    if (n < 0 || (size_t)n >= sizeof(pattern))
        return -ENAMETOOLONG;
    return mrc_report_open(pattern);
}

int mrc_rt_api_stats_dump(int fd, unsigned flags)
{
    if ((flags & ~(MRCACHE_DUMP_TEXT | MRCACHE_DUMP_JSON)) ||
        flags == (MRCACHE_DUMP_TEXT | MRCACHE_DUMP_JSON))
        return -EINVAL;
    if (fd < 0 && fd != MRCACHE_DUMP_CONFIGURED)
        return -EBADF;
    int rc = api_ready();
    if (rc)
        return rc;
    int json = flags ? (flags & MRCACHE_DUMP_JSON) != 0 : mrc_rt.cfg.stats_format == MRC_STATS_JSON;
    int out = fd;
    if (fd == MRCACHE_DUMP_CONFIGURED) {
        if (configured_off())
            return 0;    /* whoever configured the process asked for no statistics */
        out = open_configured();
        if (out < 0)
            return out;
    }
    struct mrc_report r;
    struct mrc_report_mr *mrs = collect_dump(&r);
    rc = mrc_report_write(out, &r, json);
    free(mrs);
    if (out != fd && out != 2)
        mrc_sys_close(out);
    return rc;
}

void mrc_rt_dump_now(void)
{
    (void)mrc_rt_api_stats_dump(MRCACHE_DUMP_CONFIGURED, 0);
}

void mrc_rt_dump_at_exit(void)
{
    const char *dest = mrc_rt.cfg.stats;
    if (configured_off())
        return;
    struct mrc_report r;
    struct mrc_report_mr *mrs = collect_dump(&r);
    if (!strcmp(dest, "auto")) {
        if (!r.s.v[MRC_STAT_REQUESTS] && !r.s.v[MRC_STAT_UNCACHED]) {
            free(mrs);
            return;     /* a process that never registered stays silent */
        }
        dest = "stderr";
    }
    int fd = mrc_report_open_exit(dest);
    if (fd >= 0) {
        mrc_report_write(fd, &r, mrc_rt.cfg.stats_format == MRC_STATS_JSON);
        if (fd != 2)
            mrc_sys_close(fd);
    }
    free(mrs);
}
