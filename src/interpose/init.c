/* init.c - start-up, fork and exit. The constructor reads the configuration, resolves
 * libc's functions and prepares the cache; nothing touches libibverbs until a
 * registration arrives. Exit (an atexit handler, which runs before any library's
 * destructor) deregisters idle entries while libibverbs is still loaded and dumps the
 * statistics. Invariants: init is idempotent and re-entrant calls pass through (the
 * state is 'initialising' before any call that could re-enter); a forked child forgets
 * the parent's cache without deregistering anything. */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MRCACHE_BUILDING_LIBRARY
#include "mrcache.h"

#include "backend/mr.h"
#include "backend/verbs_ops.h"
#include "interpose/drainer.h"
#include "interpose/real.h"
#include "interpose/route.h"
#include "interpose/state.h"
#include "monitor/glibc_heap.h"
#include "monitor/monitor.h"
#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "util/callsite.h"
#include "util/clock.h"
#include "util/dumpsig.h"
#include "util/leaks.h"
#include "util/log.h"
#include "util/report.h"

struct mrc_state mrc_g;

/* The active sources, e.g. "patch+preload+malloc", "patch(5/8)+preload+malloc+uffd". */
const char *mrc_monitor_name(void)
{
    static char name[48];
    const char *patch = mrc_patch_summary();
    int uffd = mrc_uffd_on();
    if (!mrc_g.watch_unmaps && !*patch && !uffd)
        return "none (unsafe)";
    snprintf(name, sizeof(name), "%s%s%s%s%s", patch, *patch && mrc_g.watch_unmaps ? "+" : "",
             !mrc_g.watch_unmaps ? "" : mrc_g.watch_malloc ? "preload+malloc" : "preload",
             uffd && (*patch || mrc_g.watch_unmaps) ? "+" : "", uffd ? "uffd" : "");
    return name;
}

static void dump_stats(int at_exit)
{
    const char *dest = mrc_g.cfg.stats;
    if (!strcmp(dest, "off"))
        return;
    struct mrc_report r;
    mrc_report_collect(&r, &mrc_g.cache, mrc_now_ns() - mrc_g.start_ns, mrc_monitor_name());
    if (!strcmp(dest, "auto")) {
        if (!r.s.v[MRC_STAT_REQUESTS] && !r.s.v[MRC_STAT_UNCACHED])
            return;     /* a process that never registered stays silent */
        dest = "stderr";
    }
    (void)at_exit;
    int fd = mrc_report_open_exit(dest);
    if (fd < 0)
        return;
    mrc_report_write(fd, &r, mrc_g.cfg.stats_format == MRC_STATS_JSON);
    if (fd != 2)
        close(fd);
}

/* MRCACHE_DUMP_SIGNAL's dump, run from a registration call: the same as the API's
 * mrcache_stats_dump to the configured destination (numbered files, pattern.N). */
static void dump_on_signal(void)
{
    (void)mrcache_stats_dump(MRCACHE_DUMP_CONFIGURED, 0);
}

static void on_exit_handler(void)
{
    if (!mrc_ready())
        return;
    /* libibverbs may have been unloaded with the plugin that brought it: then the
     * kernel releases the MRs with the process, and calling into it would crash. */
    void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib) {
        mrc_cache_flush(&mrc_g.cache, NULL, NULL);
        dlclose(lib);
    }
    dump_stats(1);
}

void mrc_on_first_registration(void)
{
    static int done;
    mrc_drainer_start();   /* cheap once started; a forked child starts its own */
    mrc_uffd_start();      /* the same; before any range is registered, so all are watched */
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    /* Registered now, not in the constructor, so that it runs before the destructors
     * of libraries loaded since (libibverbs, its providers). */
    atexit(on_exit_handler);
    mrc_patch_warn_pending();
    MRC_INFO("unmap sources: %s", mrc_monitor_name());
}

void mrc_before_fork(void)
{
    /* In rdma-core's fork-safe mode (ibv_fork_init, RDMAV_FORK_SAFE, on kernels without
     * copy-on-fork for pinned pages) registered pages are MADV_DONTFORK: absent in the
     * child. Memory the program deregistered must be there, so idle cached MRs are
     * deregistered first. Done before fork, not in an atfork handler, whose order
     * against libibverbs' own handlers is not ours to choose. */
    if (!mrc_ready() || !__atomic_load_n(&mrc_g.cache.active, __ATOMIC_ACQUIRE) || mrc_real_resolve_verbs() ||
        !mrc_real.is_fork_initialized || mrc_real.is_fork_initialized() != IBV_FORK_ENABLED)
        return;
    mrc_cache_flush(&mrc_g.cache, NULL, NULL);
}

/* Not the cache lock: the child re-creates the cache from its parameters alone, and glibc
 * takes its arena locks after these handlers, while a thread trimming a heap holds its
 * arena's lock and waits in an unmap hook for the cache lock (as does the userfaultfd
 * handler, which an unmapping thread that holds an arena lock may be waiting for). */
static void fork_prepare(void)
{
    mrc_callsite_fork_lock();   /* a leaf lock: its order against the others is free */
    pthread_mutex_lock(&mrc_g.handles.lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&mrc_g.handles.lock);
    mrc_callsite_fork_unlock();
}

static void fork_child(void)
{
    /* The child shares the parent's device file: deregistering an inherited MR would
     * deregister the parent's. Forget them; handles made before fork are ignored. */
    mrc_pool_reset_lock(&mrc_g.handles);
    mrc_drainer_forget();
    mrc_uffd_child_reset();
    mrc_g.fork_gen++;
    mrc_cache_forget(&mrc_g.cache);
    /* Forked while another thread was writing free's slots back: finish it here. */
    if (__atomic_load_n(&mrc_g.watch_malloc, __ATOMIC_ACQUIRE) && mrc_route_free_back())
        mrc_stop_caching("fork: the PLT calls of free cannot all be sent back through the allocator hooks");
    mrc_stats_child_reset();
    mrc_callsite_child_reset();
}

void mrc_init(void)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&mrc_g.ready, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    mrc_g.start_ns = mrc_now_ns();
    mrc_clock_init();
    mrc_config_load(&mrc_g.cfg);
    mrc_log_level = mrc_g.cfg.log_level;
    if (mrc_g.cfg.help)
        mrc_config_print_help(2);
    mrc_real_resolve_libc();
    mrc_mr_init();

    uint64_t max_bytes = mrc_g.cfg.max_bytes ? mrc_g.cfg.max_bytes : mrc_config_auto_max_bytes();
    long psz = sysconf(_SC_PAGESIZE);
    struct mrc_cache_params p = {
        .ops = mrc_verbs_ops,
        .max_entries = mrc_g.cfg.max_entries,
        .max_bytes = max_bytes,
        .max_deferred_bytes = mrc_g.cfg.max_deferred_bytes,
        .page_size = psz > 0 ? (uint64_t)psz : 4096,
        .remote_mask = mrc_verbs_remote_mask(),
        .local_super_mask = mrc_verbs_local_super_mask(),
        .remote_policy = (enum mrc_remote_policy)mrc_g.cfg.remote_policy,
        .deferred_full = mrc_drainer_wake,
    };
    mrc_cache_init(&mrc_g.cache, &p);
    mrc_g.watch_unmaps = (mrc_g.cfg.monitor & MRC_MONITOR_PRELOAD) != 0;
    mrc_g.malloc_usable = mrc_g.watch_unmaps && mrc_g.cfg.malloc_hooks && mrc_glibc_heap_init();
    mrc_g.watch_malloc = mrc_g.malloc_usable;
    if (mrc_g.cfg.monitor & MRC_MONITOR_PATCH)
        mrc_patch_install();
    unsigned seen = mrc_g.cfg.monitor ? mrc_patch_selftest(mrc_g.watch_unmaps) : 0;
    /* Every system call glibc's allocator unmaps with, seen from inside libc before it
     * happens: predicting the allocator's releases would only repeat that, on every free. */
    const unsigned malloc_paths = 1u << MRC_FN_MUNMAP | 1u << MRC_FN_MMAP | 1u << MRC_FN_MREMAP |
                                  1u << MRC_FN_MADVISE | 1u << MRC_FN_BRK | 1u << MRC_FN_COUNT;
    if (mrc_g.watch_malloc && (seen & malloc_paths) == malloc_paths) {
        mrc_g.watch_malloc = 0;
        MRC_INFO("allocator hooks idle: the patched entry points see glibc malloc's own unmaps");
    }
    /* auto: the userfaultfd joins when the self-test could not confirm every system call
     * that unmaps anonymous memory arriving at a patched entry point (a sanitizer, an
     * unknown glibc, another library's patch). It starts at the first registration. */
    const unsigned core = 1u << MRC_FN_MUNMAP | 1u << MRC_FN_MMAP | 1u << MRC_FN_MREMAP | 1u << MRC_FN_MADVISE;
    if ((mrc_g.cfg.monitor & MRC_MONITOR_UFFD) ||
        ((mrc_g.cfg.monitor & MRC_MONITOR_AUTO) && (seen & core) != core))
        mrc_uffd_configure((mrc_g.cfg.monitor & MRC_MONITOR_UFFD) != 0);
    if (!mrc_g.cfg.monitor)
        MRC_WARN("MRCACHE_MONITOR=none: unmapped memory is NOT invalidated; registrations may be stale");
    mrc_callsite_init(mrc_g.cfg.callsites, mrc_g.cfg.callsite_sample);
    if (mrc_dumpsig_install(mrc_g.cfg.dump_signal, dump_on_signal))
        MRC_WARN("MRCACHE_DUMP_SIGNAL: cannot install the handler for signal %d", mrc_g.cfg.dump_signal);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    MRC_DEBUG("ready: max %llu entries, %llu bytes; monitor %s", (unsigned long long)p.max_entries,
              (unsigned long long)p.max_bytes, mrc_monitor_name());
    __atomic_store_n(&mrc_g.ready, 2, __ATOMIC_RELEASE);
}

void mrc_stop_caching(const char *why)
{
    if (__atomic_exchange_n(&mrc_g.caching_off, 1, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&mrc_g.cfg.enable, 0, __ATOMIC_SEQ_CST);
    /* Nothing cached may be handed out again; the registrations in use stay their
     * holders', every later one passes straight through to libibverbs, and one under
     * way in the cache now stays its caller's alone. */
    mrc_cache_close(&mrc_g.cache, MRC_INVAL_SOURCE_LOST);
    MRC_ERROR("%s: caching is OFF from here on (every registration goes to the NIC)", why);
}

__attribute__((constructor)) static void mrc_constructor(void)
{
    mrc_init();
    /* Not in mrc_init, which a hook may run early (inside free, say): this binds lazy
     * slots and opens objects. The allocator hooks idle for good unless a patch is lost
     * later (patch.c's give_up puts the slots back). */
    if (mrc_ready() && !mrc_g.watch_malloc && mrc_g.cfg.direct_free) {
        unsigned n = mrc_route_free_direct();
        MRC_INFO("free: %u PLT slot%s call the allocator directly", n, n == 1 ? "" : "s");
    }
}
