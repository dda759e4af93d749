/* state.h - the process-wide state, owned by the runtime and included by runtime files
 * only: configuration, the cache, the verbs front-end over it, readiness, whether caching
 * stopped, the fork generation. Layers below get what they need as parameters or
 * callbacks at init. Invariant: nothing is touched before mrc_ready(); until then every
 * call passes straight through. */
#ifndef MRC_STATE_H
#define MRC_STATE_H

#include <stdint.h>

#include "core/cache.h"
#include "util/config.h"
#include "verbs/mr.h"

struct mrc_runtime {
    struct mrc_config cfg;
    struct mrc_cache cache;
    struct mrc_verbs verbs;
    int ready;              /* 0 not yet, 1 initialising, 2 ready */
    uint32_t fork_gen;      /* bumped in a forked child: older handles are the parent's */
    int watch_unmaps;       /* MRCACHE_MONITOR's preload source: the munmap-family hooks */
    int malloc_usable;      /* the allocator hooks may run (preload on, MRCACHE_MALLOC_HOOKS,
                             * glibc's allocator): they resume if a patch is lost */
    int caching_off;        /* caching stopped at run time: cfg.enable is 0 from then on */
    uint64_t start_ns;
};

extern struct mrc_runtime mrc_rt;

static inline int mrc_ready(void)
{
    return __atomic_load_n(&mrc_rt.ready, __ATOMIC_ACQUIRE) == 2;
}

/* Fork by any path (fork.c). The mark reads zero in a child made without fork()'s
 * handlers (_Fork, clone, syscall): the gates check it, and such a child then
 * forgets its parent's cache, as the atfork child handler does. */
extern uint32_t *mrc_rt_mark;
void mrc_rt_child_detected(void);
static inline void mrc_rt_fork_check(void)
{
    if (__builtin_expect(!*__atomic_load_n(&mrc_rt_mark, __ATOMIC_RELAXED), 0))
        mrc_rt_child_detected();
}

/* Other link-map namespaces (namespaces.c): the loader's version of its list, which
 * reads 2 once a namespace besides the program's exists; the gates then look for a libc
 * not seen before (mrc_rt_namespaces_look), outside any hook. */
extern const int *mrc_rt_ns_version;
static inline int mrc_rt_ns_any(void)
{
    return __builtin_expect(*__atomic_load_n(&mrc_rt_ns_version, __ATOMIC_RELAXED) >= 2, 0);
}
void mrc_rt_namespaces_init(void);
void mrc_rt_namespaces_look(void);

/* Whether the cache may hold registrations of this process to release: ready, in use,
 * and its own (a child made without fork()'s handlers forgets its parent's first). For
 * the paths that release idle registrations outside the verbs gates (fork, collapse). */
static inline int mrc_rt_cache_live(void)
{
    if (!mrc_ready())
        return 0;
    mrc_rt_fork_check();
    return __atomic_load_n(&mrc_rt.cache.active, __ATOMIC_ACQUIRE) != 0;
}

/* MRCACHE_IDLE_TIMEOUT (expire.c): set up from the configuration (init); the sweep
 * period in ns (0: off); how long the helper thread may sleep before the next sweep
 * (NULL: no sweeps, sleep until woken); and the sweep, made when its time has come.
 * The last two only on the helper thread. */
void mrc_rt_expire_init(void);
uint64_t mrc_rt_expire_period_ns(void);
struct timespec;
const struct timespec *mrc_rt_expire_wait(struct timespec *ts);
void mrc_rt_expire_due(void);

/* The warnings that need a cause (warn.c): the RLIMIT_MEMLOCK notice armed in the
 * cache's parameters (init, before the cache is made); the rest, once, at the first
 * registration. */
void mrc_rt_warn_setup(struct mrc_cache_params *p);
void mrc_rt_warn_first_registration(void);

/* MRCACHE_FORK's release of idle registrations before a fork (unpin.c). */
void mrc_rt_unpin_before_fork(void);

/* The program ran short of mappings (mrc_monitor.maps_short, unpin.c): the idle
 * registrations go on the helper thread (mrc_rt_unpin_for_maps), their watches' VMAs
 * with them; returns whether the refused call is worth making again. Any hook. */
int mrc_rt_maps_short(void);
void mrc_rt_unpin_for_maps(void);

/* Maps the mark page and installs the atfork handlers. From init. */
void mrc_rt_fork_init(void);

/* Whether rdma-core's fork-safe mode is in effect (fork.c): registrations then mark their
 * ranges MADV_DONTFORK, so idle cached ones must go before a fork. *asked (if asked) is
 * the variable that asks for it (RDMAV_FORK_SAFE, IBV_FORK_SAFE), or NULL. Outside hooks. */
int mrc_rt_fork_safe(const char **asked);

/* Which unmap sources are active, as the statistics name them ("patch+preload+malloc"). */
const char *mrc_rt_monitor_name(void);

/* Called on the first registration: starts the helper threads and arranges the
 * exit-time flush and statistics dump. */
void mrc_rt_first_registration(void);

/* Everything a cache in use needs (the sources, the cache, the constructor's guards),
 * once: mrc_init does it when libibverbs is loaded with the program, else the first
 * verbs call or API call does, outside any hook. Until then a process pays only for
 * its configuration and libc's pointers. */
void mrc_rt_activate(void);

/* Makes libibverbs' entry points of the table's ENTRY rows lead to our exports (bind.c);
 * once per process, every caller returning only when it is done. */
void mrc_rt_bind_verbs(void);

/* The statistics dump to the configured destination: at exit (under the plain name), or
 * now (MRCACHE_DUMP_SIGNAL's, as mrcache_stats_dump's: pattern.N files). */
void mrc_rt_dump_at_exit(void);
void mrc_rt_dump_now(void);

/* The cache's admission (cache params' admit): 1 if the miss over r's range must stay
 * its caller's alone under MRCACHE_SHARED (admit.c). */
int mrc_rt_admit(void *arg, struct mrc_range *r);

/* The description of a miss's memory (the cache's sources' describe: describe.c). */
void mrc_rt_describe(struct mrc_range *r, uint32_t ask);

/* MRCACHE_EXPAND (expand.c): the window a local miss may widen to, clipped to a quarter
 * of the cache's byte limit; 0 when off. From init. */
uint64_t mrc_rt_expand_init(uint64_t window, uint64_t max_bytes, uint64_t page_size);
/* The cache's expansion (cache params' expand): widens [*first, *last] by the part of
 * the request r's mapping inside the window around the request, when that mapping is
 * private anonymous memory the access can pin; 1 if it did. */
int mrc_rt_expand(void *arg, struct mrc_range *r, uint32_t access, uint64_t *first, uint64_t *last);

/* For when an unmap source is lost and cannot be made good: no registration is served
 * from the cache again (those cached are invalidated, later ones pass straight
 * through). Says why, once, as an error. Safe in any hook. */
void mrc_rt_stop_caching(const char *why);

#endif
