/* inuse.c - the program's own MRs that outlive their memory. When an invalidation takes
 * memory from under a registration someone holds, the handles over it that the program
 * registered before the change and has not deregistered are found (verbs/mr.c), counted
 * in inval_in_use and reported once per registration call site: the keys, the range,
 * the cause and, with MRCACHE_CALLSITES, the stack that registered and the one that
 * unmapped. RDMA through such keys reaches the old pages, not what is mapped there now.
 * Registrations made by a library that keeps its own cache behind its own memory
 * monitor (UCX's uct, libfabric's providers) are not reported: those release such MRs
 * lazily, after the memory went, by design, and never use them again.
 * Invariants: nothing changes for the program (its MRs stay what they were); the
 * cache's callback runs in hooks and only stores and, at most every WAKE_NS, wakes the
 * helper; reports are made outside hooks (the handle's deregistration, the helper,
 * exit), without a lock held across a registration; the helper names addresses by object
 * and offset only (it must not allocate: see label_raw). */
#include <errno.h>
#include <stdint.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/audit.h"
#include "runtime/helper.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/callsite.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/outpath.h"
#include "util/stats.h"
#include "util/thread.h"

/* A program unmapping held memory in a loop wakes it 10/s; a woken helper polls for the
 * next 100 ms (helper.c), so what the throttle lets pass is found within that. */
#define WAKE_NS 100000000ull
#define SITES 64               /* call sites told so far; past them, every report is counted only */
#define STACKS 16              /* the unmapping stacks of the latest records */
#define STACK_DEPTH 8

static uint64_t last_wake_ns;
static const void *told[SITES];
static uint64_t lost_told;
static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;

/* The stack of the thread that made record seq, when call sites are on. seq is
 * written last (with ~0 while the slot is being written), so a reader that reads the
 * same seq before and after its copy has the slot whole. */
static struct {
    uint64_t seq;
    uint64_t ips[STACK_DEPTH];
} stacks[STACKS];

void mrc_rt_inuse_recorded(void *arg, uint64_t seq)
{
    (void)arg;
    int saved = errno;
    /* On our own threads (the userfaultfd handler) the stack would be ours, not the
     * unmapper's, who has returned already. */
    if (!mrc_thread_ours && __atomic_load_n(&mrc_callsite_top, __ATOMIC_RELAXED)) {
        __typeof__(stacks[0]) *s = &stacks[seq % STACKS];
        uint64_t ips[STACK_DEPTH] = { 0 };
        mrc_callsite_capture_any(ips, STACK_DEPTH);
        __atomic_store_n(&s->seq, ~0ull, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        for (int i = 0; i < STACK_DEPTH; i++)
            __atomic_store_n(&s->ips[i], ips[i], __ATOMIC_RELAXED);
        __atomic_store_n(&s->seq, seq, __ATOMIC_RELEASE);
    }
    uint64_t now = mrc_now_ns(), last = __atomic_load_n(&last_wake_ns, __ATOMIC_RELAXED);
    if (now - last >= WAKE_NS && __atomic_compare_exchange_n(&last_wake_ns, &last, now, 0, __ATOMIC_RELAXED,
                                                             __ATOMIC_RELAXED))
        mrc_helper_inuse();
    errno = saved;
}

static int stack_of(uint64_t seq, uint64_t *ips)
{
    __typeof__(stacks[0]) *s = &stacks[seq % STACKS];
    if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != seq)
        return 0;
    for (int i = 0; i < STACK_DEPTH; i++)
        ips[i] = __atomic_load_n(&s->ips[i], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq && ips[0];
}

/* The object a return address is in: its path ("" for the executable), or NULL. */
static const char *object_of(const void *ip)
{
    struct dl_find_object o;
    if (!ip || _dl_find_object((void *)(uintptr_t)ip, &o) != 0 || !o.dlfo_link_map)
        return NULL;
    return o.dlfo_link_map->l_name ? o.dlfo_link_map->l_name : "";
}

/* Libraries whose registration caches watch memory themselves and release lazily. */
static int own_cache(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    return !strncmp(b, "libuct", 6) || !strncmp(b, "libfabric", 9) || strstr(b, "-fi.so") != NULL;
}

/* Whether caller is a site not told yet: then it is from now on. */
static int first_from(const void *caller)
{
    for (unsigned i = 0; i < SITES; i++) {
        const void *seen = __atomic_load_n(&told[i], __ATOMIC_ACQUIRE);
        if (seen == caller)
            return 0;
        if (!seen) {
            const void *none = NULL;
            if (__atomic_compare_exchange_n(&told[i], &none, caller, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return 1;
            if (none == caller)
                return 0;
        }
    }
    return 0;
}

static const char *change_of(enum mrc_inval_cause c)
{
    switch (c) {
    case MRC_INVAL_MUNMAP: return "unmapped (munmap)";
    case MRC_INVAL_MREMAP: return "moved or shrunk (mremap)";
    case MRC_INVAL_MADVISE: return "discarded (madvise)";
    case MRC_INVAL_MMAP_FIXED: return "replaced (mmap MAP_FIXED)";
    case MRC_INVAL_SHM: return "detached (shmdt)";
    case MRC_INVAL_BRK: return "given back to the kernel (brk)";
    case MRC_INVAL_FREE: return "freed (free/realloc unmapped it)";
    case MRC_INVAL_TRIM: return "trimmed off the heap";
    case MRC_INVAL_API: return "declared changed (mrcache_invalidate)";
    case MRC_INVAL_FILE: return "cut from its file (truncate, hole punch)";
    default: return "changed";
    }
}

/* A return address as "object+0xoffset", from the loader's own table (no allocation,
 * no lock): all the helper thread says. It never symbolizes: reading symbol tables
 * allocates, and a mapping made then could land in the hole the program's change just
 * left, which the program may be about to map again at a fixed address. */
static void label_raw(uint64_t ip, char *out, size_t size)
{
    struct dl_find_object o;
    if (ip && _dl_find_object((void *)(uintptr_t)ip, &o) == 0 && o.dlfo_link_map) {
        const char *n = o.dlfo_link_map->l_name && *o.dlfo_link_map->l_name ? o.dlfo_link_map->l_name
                                                                           : program_invocation_short_name;
        const char *b = strrchr(n, '/');
        snprintf(out, size, "%s+0x%lx", b ? b + 1 : n, (unsigned long)(ip - o.dlfo_link_map->l_addr));
    } else {
        snprintf(out, size, "0x%llx", (unsigned long long)ip);
    }
}

static void label(uint64_t ip, char *out, size_t size)
{
    if (mrc_thread_ours)
        label_raw(ip, out, size);
    else
        mrc_callsite_label(ip, out, size);
}

static void say_stack(const char *what, const uint64_t *ips, int n)
{
    struct mrc_wbuf w;
    mrc_wbuf_init(&w, 2);
    mrc_wbuf_printf(&w, "libmrcache[%d]:   %s:\n", (int)getpid(), what);
    if (mrc_thread_ours) {
        char l[256];
        for (int i = 0; i < n && ips[i]; i++) {
            label_raw(ips[i], l, sizeof(l));
            mrc_wbuf_printf(&w, "libmrcache:     %s\n", l);
        }
    } else {
        mrc_callsite_write_stack(&w, ips, n, "libmrcache:     ");
    }
    mrc_wbuf_flush(&w);
}

void mrc_rt_inuse_held(const struct mrc_verbs_held *h, const struct mrc_inuse_rec *rec, void *arg)
{
    (void)arg;
    if (__atomic_load_n(&mrc_rt_audit_on, __ATOMIC_RELAXED))
        mrc_rt_audit_changed(h->mr, rec->first, rec->last, (int)rec->cause);
    const char *obj = object_of(h->caller);
    if (obj && own_cache(obj)) {
        mrc_stat_add(MRC_STAT_INVAL_IN_USE_LIB, 1);
        return;
    }
    mrc_stat_add(MRC_STAT_INVAL_IN_USE, 1);
    if (!first_from(h->caller) || mrc_log_level < MRC_LOG_WARN)
        return;
    char from[512];
    label((uint64_t)(uintptr_t)h->caller, from, sizeof(from));
    MRC_WARN("the program's MR lkey %#x rkey %#x over [%#llx, +%llu) outlived its memory: still registered, while "
             "the memory was %s (at [%#llx, %#llx]); RDMA through these keys reaches the old pages, not what is there "
             "now; registered from %s (more MRs from there are counted in inval_in_use only)",
             h->lkey, h->rkey, (unsigned long long)h->addr, (unsigned long long)h->len, change_of(rec->cause),
             (unsigned long long)(rec->first > h->addr ? rec->first : h->addr),
             (unsigned long long)(rec->last < h->addr + h->len - 1 ? rec->last : h->addr + h->len - 1), from);
    if (h->site)
        say_stack("registered at", mrc_callsite_ips(h->site), MRC_CALLSITE_DEPTH);
    uint64_t ips[STACK_DEPTH];
    if (stack_of(rec->seq, ips))
        say_stack("memory changed at", ips, STACK_DEPTH);
}

void mrc_rt_inuse_scan(void)
{
    if (!mrc_ready() || !mrc_cache_in_use_maybe(&mrc_rt.cache))
        return;
    pthread_mutex_lock(&scan_lock);
    for (int round = 0; round < 4; round++) {   /* bounded: records may keep coming */
        struct mrc_inuse_rec recs[MRC_INUSE_RING];
        uint64_t pos;
        unsigned n = mrc_cache_in_use_peek(&mrc_rt.cache, recs, MRC_INUSE_RING, &pos);
        for (unsigned i = 0; i < n; i++)
            mrc_verbs_in_use_find(&mrc_rt.verbs, &recs[i]);
        uint64_t lost = mrc_cache_in_use_retire(&mrc_rt.cache, pos, n);
        if (lost && !lost_told++)
            MRC_WARN("%llu changes under registered memory came faster than the MRs over them could be "
                     "checked: inval_in_use may count fewer than there are",
                     (unsigned long long)lost);
        if (!n)
            break;
    }
    pthread_mutex_unlock(&scan_lock);
}

void mrc_rt_inuse_child(void)
{
    pthread_mutex_init(&scan_lock, NULL);
    memset(told, 0, sizeof(told));
    memset(stacks, 0, sizeof(stacks));   /* the parent's numbers, not the child's */
    lost_told = 0;
    last_wake_ns = 0;
}
