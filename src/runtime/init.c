/* init.c - start-up, fork, exit, and the decisions no lower layer makes: which sources
 * watch memory, what a lost source means, when caching stops. The constructor reads the
 * configuration, resolves libc's functions, wires the cache, the verbs front-end and the
 * monitors together and installs the sources; nothing touches libibverbs until a
 * registration arrives. Exit (an atexit handler, which runs before any library's
 * destructor) deregisters idle entries while libibverbs is still loaded and dumps the
 * statistics. Invariants: init is idempotent and re-entrant calls pass through (the
 * state is 'initialising' before any call that could re-enter); a forked child forgets
 * the parent's cache without deregistering anything. */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/odp.h"
#include "backend/prepare.h"
#include "backend/verbs_ops.h"
#include "monitor/glibc_heap.h"
#include "monitor/maps.h"
#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "monitor/unmap.h"
#include "runtime/audit.h"
#include "runtime/helper.h"
#include "runtime/live.h"
#include "runtime/route.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/callsite.h"
#include "util/clock.h"
#include "util/dumpsig.h"
#include "util/elfsyms.h"
#include "util/log.h"
#include "util/real.h"
#include "util/thread.h"

static int exit_dumped;

static void on_exit_handler(void)
{
    if (!mrc_ready())
        return;
    exit_dumped = 1;
    mrc_rt_fork_check();   /* a child's exit must not deregister its parent's MRs */
    /* libibverbs may have been unloaded with the plugin that brought it: then the
     * kernel releases the MRs with the process, and calling into it would crash. */
    void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib) {
        mrc_cache_flush(&mrc_rt.cache, NULL, NULL);
        mrc_odp_release_all();
        dlclose(lib);
    }
    mrc_rt_dump_at_exit();
    mrc_live_close();
}

/* What unmaps or discards memory past every hook and patched entry point, found in the
 * loaded code; auto adds the userfaultfd source for it, said once:
 * - the executable's own definitions of the calls that unmap: they bind its own calls
 *   (and, exported, every library's) ahead of our exports and of libc's patched entry
 *   points, so what they do reaches the kernel unseen unless they call syscall(3). Read
 *   from its file (its symbol table, which a stripped program lacks: then its exported
 *   definitions alone are found). A sanitizer linked into the program defines them too,
 *   and passes them on to us;
 * - a Go runtime (its build ID note, in the program or a library loaded so far): it
 *   discards its heap with madvise as a raw system call, and its slices come back at
 *   the same addresses. */
#define GO_BUILDID_NOTE 4
static void bypass_check(void)
{
    static const char *const names[] = { "munmap", "mmap", "mmap64", "mremap", "madvise" };
    enum { N = sizeof(names) / sizeof(names[0]) };
    if (!mrc_rt.cfg.monitor)
        return;
    char what[256] = "";
    unsigned defined = mrc_patch_step_aside_reason() ? 0 : mrc_elf_defines("/proc/self/exe", names, N);
    if (defined) {
        snprintf(what, sizeof(what), "the program defines its own");
        for (unsigned i = 0, k = 0; i < N; i++)
            if (defined & (1u << i))
                snprintf(what + strlen(what), sizeof(what) - strlen(what), "%s %s", k++ ? "," : "", names[i]);
    }
    const char *go = mrc_elf_loaded_note("Go", GO_BUILDID_NOTE);
    if (go)
        snprintf(what + strlen(what), sizeof(what) - strlen(what), "%s%s holds a Go runtime (it discards its heap "
                 "with raw madvise calls)", what[0] ? "; " : "", go);
    if (!what[0])
        return;
    if (mrc_uffd_on()) {
        MRC_INFO("%s: the userfaultfd source sees what they unmap", what);
    } else if (mrc_rt.cfg.monitor & MRC_MONITOR_AUTO) {
        mrc_uffd_configure(0);
        mrc_uffd_set_drain(mrc_helper_drain, NULL);
        MRC_WARN("%s: what they unmap reaches no hook of libmrcache's and no libc entry point, so the userfaultfd "
                 "source is added", what);
    } else {
        MRC_WARN("%s: what they unmap reaches no hook of libmrcache's and no libc entry point "
                 "(MRCACHE_MONITOR=auto or ...,uffd adds the userfaultfd source, which sees it)", what);
    }
}

/* MRCACHE_STATS naming a destination: statistics at exit from every process that loaded
 * libibverbs, even one that never registered (ibv_devinfo says it made none); the
 * shells and tools of a job that never load it stay quiet. Registered by the
 * constructor, so it runs after the first registration's handler, which dumps them. */
static void on_exit_named(void)
{
    if (!mrc_ready() || exit_dumped)
        return;
    void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib)
        return;
    dlclose(lib);
    mrc_rt_fork_check();
    mrc_rt_dump_at_exit();
}

void mrc_rt_first_registration(void)
{
    static int done;
    static pthread_once_t bypass_once = PTHREAD_ONCE_INIT;
    pthread_once(&bypass_once, bypass_check);   /* before the source would start */
    mrc_helper_start();    /* cheap once started; a forked child starts its own */
    mrc_uffd_start();      /* the same; before any range is registered, so all are watched */
    if (mrc_uffd_on())
        mrc_prepare_touch_first();   /* its watches split mappings */
    mrc_rt_bind_verbs();   /* before any handle of ours exists; waits for another thread's */
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return;
    if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    /* Registered now, not in the constructor, so that it runs before the destructors
     * of libraries loaded since (libibverbs, its providers). */
    atexit(on_exit_handler);
    mrc_log_notes_warn();
    mrc_rt_warn_first_registration();
    MRC_INFO("unmap sources: %s", mrc_rt_monitor_name());
}

/* A source of memory events lost what it watched (the patch source: another library
 * overwrote an entry point with code that cannot be chained). What it saw no longer
 * reaches us, so: the allocator hooks resume where they can (they predict free's and
 * trimming's unmaps), the program's frees are sent back through them, and nothing
 * cached before is trusted (what the other code unmapped before we noticed went
 * unseen). If the frees cannot all come back, or nothing still sees what was lost,
 * caching stops. */
static void source_lost(const char *lost, const char *still)
{
    int resumed = 0, unrouted = 0;
    if (mrc_rt.malloc_usable)
        resumed = !mrc_glibc_heap_watch(1);
    if (resumed && mrc_route_free_back())
        unrouted = 1;
    if (__atomic_load_n(&mrc_rt.cache.active, __ATOMIC_RELAXED))
        mrc_cache_invalidate(&mrc_rt.cache, 0, UINT64_MAX, MRC_INVAL_SOURCE_LOST);
    const char *how = resumed ? " (the allocator hooks are back on: free's unmaps and heap trimming are predicted)"
                      : __atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED)
                          ? " (the allocator hooks still predict free's unmaps and heap trimming)"
                          : " (MRCACHE_MALLOC_HOOKS=0 or no preload source: nothing predicts them)";
    if (!still) {
        /* Nothing sees those calls any more: caching cannot be trusted again. */
        mrc_rt_stop_caching(lost);
        return;
    }
    if (__atomic_load_n(&mrc_rt.cache.active, __ATOMIC_RELAXED))
        MRC_WARN("%s%s; %s", lost, how, still);   /* the first registration has passed: say it now */
    else
        mrc_log_note("%s%s; %s", lost, how, still);
    if (unrouted)
        mrc_rt_stop_caching("patch: the PLT calls of free cannot all be sent back through the allocator hooks "
                            "(a read-only page could not be made writable, or another library rebound one), "
                            "so free's unmaps would go unseen");
}

/* The cache's begin and done, behind the fork check: an unmap hook in a child made
 * without fork()'s handlers must not take a lock another of the parent's threads held at
 * the clone; the child forgets first. */
static uint64_t (*cache_begin)(void *, uint64_t, uint64_t, enum mrc_inval_cause);
static void (*cache_done)(void *, uint64_t, uint64_t, uint64_t, enum mrc_inval_cause);

static uint64_t forked_begin(void *arg, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    mrc_rt_fork_check();
    return cache_begin(arg, addr, len, cause);
}

static void forked_done(void *arg, uint64_t ticket, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    mrc_rt_fork_check();
    cache_done(arg, ticket, addr, len, cause);
}

/* Every system call glibc's allocator unmaps with, seen from inside libc before it
 * happens: predicting the allocator's releases would only repeat that, on every free. */
static const unsigned malloc_paths = 1u << MRC_FN_MUNMAP | 1u << MRC_FN_MMAP | 1u << MRC_FN_MREMAP |
                                     1u << MRC_FN_MADVISE | 1u << MRC_FN_BRK | 1u << MRC_FN_COUNT;
/* The system calls that unmap anonymous memory: without all of them confirmed at a
 * patched entry point, auto adds the userfaultfd source. */
static const unsigned core_paths = 1u << MRC_FN_MUNMAP | 1u << MRC_FN_MMAP | 1u << MRC_FN_MREMAP |
                                   1u << MRC_FN_MADVISE;

/* Which sources watch memory, from MRCACHE_MONITOR and what the patch source's
 * self-test confirms. */
static void sources_install(void)
{
    const struct mrc_config *cfg = &mrc_rt.cfg;
    struct mrc_inval_sink sink;
    mrc_cache_sink(&mrc_rt.cache, &sink);
    cache_begin = sink.begin;
    cache_done = sink.done;
    sink.begin = forked_begin;
    sink.done = forked_done;
    sink.source_lost = source_lost;
    mrc_rt.watch_unmaps = (cfg->monitor & MRC_MONITOR_PRELOAD) != 0;
    mrc_monitor_init(&sink, mrc_rt.cache.p.page_size, mrc_rt.watch_unmaps);
    mrc_monitor.maps_short = mrc_rt_maps_short;
    /* The registry of special mappings, before patching (its self-test maps and unmaps). */
    mrc_maps_start(mrc_rt.cache.p.page_size, cfg->shared_policy == MRC_CFG_SHARED_CACHE, cfg->monitor != 0);
    mrc_rt.malloc_usable = mrc_rt.watch_unmaps && cfg->malloc_hooks && mrc_glibc_heap_init();
    mrc_glibc_heap_watch(mrc_rt.malloc_usable);
    if (cfg->monitor & MRC_MONITOR_PATCH)
        mrc_patch_install();
    unsigned seen = cfg->monitor ? mrc_patch_selftest(mrc_rt.watch_unmaps) : 0;
    if (mrc_rt.malloc_usable && (seen & malloc_paths) == malloc_paths) {
        mrc_glibc_heap_watch(0);
        MRC_INFO("allocator hooks idle: the patched entry points see glibc malloc's own unmaps");
    }
    /* auto: the userfaultfd joins when the self-test could not confirm every system call
     * that unmaps anonymous memory arriving at a patched entry point (a sanitizer, an
     * unknown glibc, another library's patch). It starts at the first registration. */
    if ((cfg->monitor & MRC_MONITOR_UFFD) || ((cfg->monitor & MRC_MONITOR_AUTO) && (seen & core_paths) != core_paths)) {
        mrc_uffd_configure((cfg->monitor & MRC_MONITOR_UFFD) != 0);
        /* Deregistrations deferred at a discard keep their pages watched and their
         * mappings split until drained: the helper thread drains them. */
        mrc_uffd_set_drain(mrc_helper_drain, NULL);
    }
}

/* What a miss does to its memory before the pin, from the configuration. */
static void prepare_init(const struct mrc_config *cfg)
{
    static const int modes[] = { [MRC_CFG_HUGE_OFF] = MRC_HUGE_OFF, [MRC_CFG_HUGE_ADVISE] = MRC_HUGE_ADVISE,
                                 [MRC_CFG_HUGE_COLLAPSE] = MRC_HUGE_COLLAPSE };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t threads = cfg->populate_threads ? cfg->populate_threads : (uint64_t)(cpus > 8 ? 8 : cpus > 0 ? cpus : 1);
    struct mrc_prepare_params pp = {
        .huge_mode = modes[cfg->hugepages],
        .huge_min = cfg->hugepages_min,
        .populate_min = cfg->populate,
        .populate_threads = threads > 64 ? 64 : (unsigned)threads,
    };
    mrc_prepare_init(&pp);
}

/* What every process pays, registering or not: the configuration (and its warnings). No
 * system call of its own, nothing mapped or patched, no thread; libc's functions are
 * looked up by the first hook that needs one (util/real.h), or at activation.
 * Idempotent; a re-entrant call passes. */
static int light_state;   /* 0, 1 while under way, 2 done */

static void light_init(void)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&light_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    mrc_rt.start_ns = mrc_now_ns();
    mrc_clock_init();
    mrc_config_load(&mrc_rt.cfg);
    mrc_log_level = mrc_rt.cfg.log_level;
    if (mrc_rt.cfg.help && !mrc_config_quiet())
        mrc_config_print_help(2);
    if (strcmp(mrc_rt.cfg.stats, "auto") && strcmp(mrc_rt.cfg.stats, "off"))
        atexit(on_exit_named);
    __atomic_store_n(&light_state, 2, __ATOMIC_RELEASE);
}

static int is_verbs(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    return base && !strcmp(base + 1, "libibverbs.so.1");
}

/* Whether libibverbs is loaded: read from the loader's list, no system call. */
static int verbs_loaded(void)
{
    return dl_iterate_phdr(is_verbs, NULL) != 0;
}

/* The rest, once libibverbs is there (loaded with the program, or called through a
 * plugin that loaded it): the cache, the sources that watch memory (libc patched, the
 * allocator's prediction, the registry of special mappings), the fork mark. Before the
 * first registration is served, so that nothing cached predates a source. */
static void activate(void)
{
    light_init();
    if (__atomic_load_n(&light_state, __ATOMIC_ACQUIRE) != 2 || mrc_ready())
        return;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&mrc_rt.ready, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    mrc_real_resolve_libc();
    uint64_t max_bytes = mrc_rt.cfg.max_bytes ? mrc_rt.cfg.max_bytes : mrc_config_auto_max_bytes();
    long psz = sysconf(_SC_PAGESIZE);
    struct mrc_cache_params p = {
        .ops = mrc_backend_ops,
        .max_entries = mrc_rt.cfg.max_entries,
        .max_bytes = max_bytes,
        .max_entry_bytes = mrc_config_large_bytes(&mrc_rt.cfg, max_bytes),
        .max_deferred_bytes = mrc_rt.cfg.max_deferred_bytes,
        .page_size = psz > 0 ? (uint64_t)psz : 4096,
        .remote_mask = mrc_backend_remote_mask(),
        .local_super_mask = mrc_backend_local_super_mask(),
        .remote_policy = mrc_rt.cfg.remote_policy == MRC_CFG_REMOTE_NEVER ? MRC_REMOTE_NEVER : MRC_REMOTE_EXACT,
        .deferred_full = mrc_helper_drain,
        .in_use = mrc_rt_inuse_recorded,
        .admit_armed = &mrc_maps.interest,
        .admit = mrc_rt_admit,
        .keys = mrc_backend_keys,
        .src = {
            .pending = &mrc_uffd_busy,
            .quiesce = mrc_uffd_quiesce_wait,
            .check = mrc_patch_check,
            .watch = mrc_uffd_watch,
            .unwatch = mrc_uffd_unwatch,
            .describe = mrc_rt_describe,
        },
    };
    if (mrc_rt_expand_init(mrc_rt.cfg.expand, max_bytes, p.page_size))
        p.expand = mrc_rt_expand;
    mrc_rt_warn_setup(&p);
    /* Off: not even the last try, so nothing differs from a cache without ODP. */
    if (mrc_rt.cfg.odp == MRC_CFG_ODP_OFF)
        p.ops.reg_last = NULL;
    mrc_odp_init(mrc_rt.cfg.odp, mrc_rt.cfg.odp_prefetch);
    mrc_cache_init(&mrc_rt.cache, &p);
    mrc_rt_expire_init();
    struct mrc_verbs_params vp = {
        .cache = &mrc_rt.cache,
        .fork_gen = &mrc_rt.fork_gen,
        .verify_period = mrc_rt.cfg.verify,
        .max_entries = mrc_rt.cfg.max_entries,
        .held = mrc_rt_inuse_held,
    };
    mrc_verbs_init(&mrc_rt.verbs, &vp);
    mrc_rt_audit_init(mrc_rt.cfg.audit);
    prepare_init(&mrc_rt.cfg);
    sources_install();
    mrc_callsite_init(mrc_rt.cfg.callsites, mrc_rt.cfg.callsite_sample);
    if (mrc_dumpsig_install(mrc_rt.cfg.dump_signal, mrc_rt_dump_now))
        MRC_WARN("MRCACHE_DUMP_SIGNAL: cannot install the handler for signal %d", mrc_rt.cfg.dump_signal);
    mrc_rt_fork_init();
    mrc_rt_namespaces_init();
    /* The main thread ending with pthread_exit wakes the helper: glibc ends the process
     * when its last thread ends, and the helper threads must not be that thread for long. */
    mrc_thread_watch_main(mrc_helper_watch);
    MRC_DEBUG("ready: max %llu entries, %llu bytes; monitor %s", (unsigned long long)p.max_entries,
              (unsigned long long)p.max_bytes, mrc_rt_monitor_name());
    __atomic_store_n(&mrc_rt.ready, 2, __ATOMIC_RELEASE);
}


void mrc_init(void)
{
    if (mrc_ready())
        return;
    light_init();
    if (verbs_loaded())
        activate();   /* a program that links libibverbs: everything before main, as ever */
}

/* The constructor's own steps (start.c), kept for an activation that comes later. */
static const struct mrc_export *guard_list;
static unsigned guard_n;
static void (*self_free_fn)(void *);
static int guarded, routed;

static void guard_now(void)
{
    if (guarded || !guard_list || !mrc_ready())
        return;
    guarded = 1;
    /* Whatever the sources, the preload hooks are our exports: watched unless nothing
     * watches at all. */
    if (!mrc_rt.cfg.monitor)
        return;
    mrc_patch_guard_exports(guard_list, guard_n);
    mrc_patch_check_all();
}

static void free_direct_now(void)
{
    /* Not in mrc_init, which a hook may run early (inside free, say): this binds lazy
     * slots and opens objects. The allocator hooks idle for good unless a source is lost
     * later (source_lost puts the slots back). */
    if (routed || !self_free_fn || !mrc_ready())
        return;
    routed = 1;
    if (!__atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED) && mrc_rt.cfg.direct_free) {
        unsigned n = mrc_route_free_direct(self_free_fn);
        MRC_INFO("free: %u PLT slot%s call the allocator directly", n, n == 1 ? "" : "s");
    }
}

void mrc_rt_activate(void)
{
    if (!mrc_ready())
        activate();
    guard_now();
    free_direct_now();
}

void mrc_rt_stop_caching(const char *why)
{
    if (__atomic_exchange_n(&mrc_rt.caching_off, 1, __ATOMIC_SEQ_CST))
        return;
    __atomic_store_n(&mrc_rt.cfg.enable, 0, __ATOMIC_SEQ_CST);
    /* Nothing cached may be handed out again; the registrations in use stay their
     * holders', every later one passes straight through to libibverbs, and one under
     * way in the cache now stays its caller's alone. */
    mrc_cache_close(&mrc_rt.cache, MRC_INVAL_SOURCE_LOST);
    MRC_ERROR("%s: caching is OFF from here on (every registration goes to the NIC)", why);
}

void mrc_rt_guard_exports(const struct mrc_export *list, unsigned n)
{
    guard_list = list;
    guard_n = n;
    guard_now();
}

void mrc_rt_free_direct(void (*self_free)(void *))
{
    self_free_fn = self_free;
    free_direct_now();
}
