/* warn.c - warnings that save an operator hours, each printed once and only where its
 * cause is there: at the first registration, MRCACHE_MONITOR=none, rdma-core's fork-safe
 * mode in effect (fork.c's rule; and RDMAV_HUGEPAGES_SAFE with it), another registration cache in the
 * process (UCX's, with its memory hooks; libfabric's, on or switched off by our patches); and, at the registration that makes the
 * registered bytes pass half of RLIMIT_MEMLOCK, that limit. Invariants: the first
 * registration's checks run outside any hook, once per process (a forked child inherits
 * what its parent said); the RLIMIT_MEMLOCK one runs under the cache lock and only
 * formats and writes a line. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "runtime/state.h"
#include "util/log.h"

static int is_no(const char *v)
{
    return !strcmp(v, "0") || !strcasecmp(v, "n") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
           !strcasecmp(v, "false");
}

static void warn_fork_safe(void)
{
    const char *env;
    if (!mrc_rt_fork_safe(&env))
        return;
    MRC_WARN("fork-safe mode is on (%s%s, and this kernel or rdma-core does not make it unneeded): each "
             "registration also calls madvise(MADV_DONTFORK) on its range, which splits mappings toward "
             "vm.max_map_count, registered memory is absent in forked children, and idle cached registrations "
             "are deregistered before every fork (Linux 5.13 with rdma-core 35 need none of it)",
             env ? env : "the program called ibv_fork_init", env ? " is set" : "");
    /* rdma-core reads it only in fork-safe mode, where it costs every registration a
     * search for its range's page size. */
    if (getenv("RDMAV_HUGEPAGES_SAFE"))
        MRC_WARN("RDMAV_HUGEPAGES_SAFE is set: in fork-safe mode every ibv_reg_mr also looks up its range's page "
                 "size (58x slower in rdma-core before mid-2020, about 1.1x since); unset it unless the "
                 "program registers huge pages");
}

/* UCX's registration cache (the IB transport's rcache, its default, kept up to date by
 * libucm's memory hooks): both caches then hold the same registrations. Told by UCX's
 * transport layer and memory hooks being loaded when registrations begin (a UCX that
 * registers memory has opened its transports by then). */
static void warn_other_cache(void)
{
    void *ucm = dlopen("libucm.so.0", RTLD_LAZY | RTLD_NOLOAD);
    void *ib = dlopen("libuct.so.0", RTLD_LAZY | RTLD_NOLOAD);
    const char *methods = getenv("UCX_IB_REG_METHODS");
    const char *events = getenv("UCX_MEM_EVENTS");
    if (ucm && ib && (!events || !is_no(events)) && (!methods || strstr(methods, "rcache")))
        MRC_WARN("UCX's registration cache is active in this process (libucm's memory hooks and UCX's transports "
                 "are loaded, UCX_IB_REG_METHODS %s): both caches keep the same registrations pinned; set "
                 "UCX_IB_REG_METHODS=direct to leave caching to libmrcache, or MRCACHE_ENABLE=0 to leave it to UCX",
                 methods ? "includes rcache" : "is at its default, rcache first");
    if (ib)
        dlclose(ib);
    if (ucm)
        dlclose(ucm);
}

/* libfabric (1.17) watches memory for its cache with memhooks by default, which refuses
 * to install over the jump at libc's mmap entry (its log says so only at info level): its
 * cache is then off and ours serves its repeats. With another of its monitors it caches
 * beside us, as UCX does. */
static void warn_libfabric(void)
{
    void *fi = dlopen("libfabric.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!fi)
        return;
    const char *mon = getenv("FI_MR_CACHE_MONITOR");
    if (mon && (!strcmp(mon, "uffd") || !strcmp(mon, "kdreg2")))
        MRC_WARN("libfabric's registration cache is active in this process (FI_MR_CACHE_MONITOR=%s): both caches "
                 "keep the same registrations pinned; unset it to leave caching to libmrcache",
                 mon);
    else if (!mon || strcmp(mon, "disabled"))
        MRC_WARN("libfabric is loaded: its registration cache stays off under libmrcache (its memhooks monitor "
                 "does not install over libmrcache's patched libc entry points), and libmrcache serves its repeat "
                 "registrations; FI_MR_CACHE_MONITOR=disabled says so to libfabric and silences this");
    dlclose(fi);
}

void mrc_rt_warn_first_registration(void)
{
    if (!mrc_rt.cfg.monitor)
        MRC_WARN("MRCACHE_MONITOR=none: unmapped memory is NOT invalidated; registrations may be stale");
    warn_fork_safe();
    warn_other_cache();
    warn_libfabric();
}

/* RLIMIT_MEMLOCK when it bounds this process's pinning (finite, no CAP_IPC_LOCK), else 0. */
static uint64_t memlock_limit(void)
{
    struct rlimit rl;
    if (mrc_config_has_ipc_lock() || getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return rl.rlim_cur;
}

static uint64_t memlock;

static void memlock_notice(uint64_t bytes)
{
    MRC_WARN("RLIMIT_MEMLOCK is %llu KiB and this process now has %llu KiB registered: registrations past the "
             "limit fail (the cache first deregisters its idle ones, and registers them again when reused); "
             "raise it with 'ulimit -l unlimited' in the shell that starts the program, LimitMEMLOCK=infinity for "
             "a systemd service, or '* - memlock unlimited' in /etc/security/limits.conf",
             (unsigned long long)(memlock >> 10), (unsigned long long)(bytes >> 10));
}

void mrc_rt_warn_setup(struct mrc_cache_params *p)
{
    memlock = memlock_limit();
    if (!memlock)
        return;
    p->pinned_notice_bytes = memlock / 2;
    p->pinned_notice = memlock_notice;
}
