/* fork.c - children, by any path, and the one rule of whether rdma-core's fork-safe mode
 * is in effect (what fork() must release first, what the warning says). fork() runs the
 * atfork handlers; _Fork(), clone()
 * without CLONE_VM and syscall(SYS_fork) run none, so a page marked MADV_WIPEONFORK,
 * which the kernel hands every such child zero-filled, tells a child from its parent:
 * the gates read it (two dependent loads), and a child found this way forgets its
 * parent's cache before anything else, exactly as the atfork child handler does.
 * Invariants: a child never uses or deregisters a registration its parent made; the
 * mark is non-zero in the process that set it up and in a child that has forgotten. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/odp.h"
#include "monitor/glibc_heap.h"
#include "monitor/maps.h"
#include "monitor/uffd.h"
#include "runtime/audit.h"
#include "runtime/helper.h"
#include "runtime/live.h"
#include "runtime/route.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/callsite.h"
#include "util/log.h"
#include "util/real.h"
#include "util/sys.h"
#include "util/thread.h"

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

/* Until the page exists (or where the kernel has no MADV_WIPEONFORK, Linux 4.14), a mark
 * that never reads zero: the atfork handlers alone tell children then. */
static uint32_t no_page = 1;
uint32_t *mrc_rt_mark = &no_page;

/* rdma-core's own test of the variables: set, and not "0". */
static const char *fork_safe_asked(void)
{
    static const char *const names[] = { "RDMAV_FORK_SAFE", "IBV_FORK_SAFE" };
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (v && strcmp(v, "0"))
            return names[i];
    }
    return NULL;
}

int mrc_rt_fork_safe(const char **asked)
{
    const char *env = fork_safe_asked();
    if (asked)
        *asked = env;
    if (mrc_real_verbs())
        return 0;   /* no libibverbs: nothing registers */
    if (mrc_real.is_fork_initialized)
        return mrc_real.is_fork_initialized() == IBV_FORK_ENABLED;
    /* rdma-core before 35: in effect whenever asked for, as those releases knew no
     * kernel that made it unneeded (a program's own ibv_fork_init goes unseen here). */
    return env != NULL;
}

void mrc_rt_before_fork(void)
{
    /* In rdma-core's fork-safe mode (ibv_fork_init, RDMAV_FORK_SAFE, on kernels without
     * copy-on-fork for pinned pages) registered pages are MADV_DONTFORK: absent in the
     * child. Memory the program deregistered must be there, so idle cached MRs are
     * deregistered first, whatever MRCACHE_FORK says. Done before fork, not in an atfork
     * handler, whose order against libibverbs' own handlers is not ours to choose. */
    if (!mrc_rt_cache_live() || mrc_verbs_in_reg())
        return;
    int saved = errno;
    if (mrc_rt_fork_safe(NULL))
        mrc_cache_flush(&mrc_rt.cache, NULL, NULL);
    else
        mrc_rt_unpin_before_fork();
    errno = saved;
}

/* Not the cache lock: the child re-creates the cache from its parameters alone, and glibc
 * takes its arena locks after these handlers, while a thread trimming a heap holds its
 * arena's lock and waits in an unmap hook for the cache lock (as does the userfaultfd
 * handler, which an unmapping thread that holds an arena lock may be waiting for). */
static void fork_prepare(void)
{
    mrc_callsite_fork_lock();   /* a leaf lock: its order against the others is free */
    mrc_verbs_fork_prepare(&mrc_rt.verbs);
}

static void fork_parent(void)
{
    mrc_verbs_fork_parent(&mrc_rt.verbs);
    mrc_callsite_fork_unlock();
}

/* The child, told by its atfork handler or found out by the mark: it shares the parent's
 * device file, and deregistering an inherited MR would deregister the parent's. Forget
 * them; handles made before fork are ignored. Without the handlers another of the
 * parent's threads may have held any of our locks at the clone: every one is made anew
 * here, none is taken. */
static void fork_child(void)
{
    mrc_verbs_fork_child(&mrc_rt.verbs);
    mrc_helper_forget();
    mrc_live_forget();
    mrc_uffd_child_reset();
    mrc_maps_child_reset();
    mrc_odp_child_reset();
    mrc_rt.fork_gen++;
    mrc_cache_forget(&mrc_rt.cache);
    /* Forked while another thread was writing free's slots back: finish it here. */
    if (__atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_ACQUIRE) && mrc_route_free_back())
        mrc_rt_stop_caching("fork: the PLT calls of free cannot all be sent back through the allocator hooks");
    mrc_stats_child_reset();
    mrc_callsite_child_reset();
    mrc_thread_child_reset();
    mrc_rt_inuse_child();
    mrc_rt_audit_child();
    __atomic_store_n(mrc_rt_mark, 1u, __ATOMIC_RELEASE);
}

void mrc_rt_child_detected(void)
{
    MRC_DEBUG("a child made without fork()'s handlers: forgetting the parent's registrations");
    fork_child();
}

void mrc_rt_fork_init(void)
{
    uint32_t *page = mrc_raw_map(4096, 0);
    if (page && mrc_sys_madvise(page, 4096, MADV_WIPEONFORK) == 0) {
        page[0] = 1;
        __atomic_store_n(&mrc_rt_mark, page, __ATOMIC_RELEASE);
    } else {
        if (page)
            mrc_raw_unmap(page, 4096);
        MRC_INFO("no MADV_WIPEONFORK here: children made without fork() (_Fork, clone) are not told apart");
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
