/* mr.c - per-call MR handles over shared cached registrations.
 * Invariants: every successful registration returns its own handle (struct ibv_mr first,
 * so the caller's pointer is the handle) carrying the caller's addr and length and the
 * shared keys; a handle is ours iff it lies in the handle pool and is marked live;
 * foreign MRs (made before we were ready, dmabuf, ODP, ...) pass through untouched; a
 * handle made in an older fork generation (a parent's) is never deregistered. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <infiniband/verbs.h>
#include <string.h>

#include "util/callsite.h"
#include "util/hot.h"
#include "util/leaks.h"
#include "util/real.h"
#include "util/stats.h"
#include "verbs/mr.h"
#include "verbs/verify.h"

#define HANDLE_LIVE 0x4d52434c   /* "MRCL" */
#define HANDLE_FREE 0x66726565
/* Being deregistered by its owner: its fields still stand until it is freed. A scan still
 * reports it, so that a scan which retires a record before the deregistration looks for
 * it has told every handle the record concerns. */
#define HANDLE_DEREG 0x64657267

struct mrc_handle {
    struct ibv_mr mr;            /* what the caller holds: first */
    uint32_t magic;
    uint32_t fork_gen;
    uint32_t access;             /* as the caller asked, for rereg */
    uint32_t reported;           /* REPORT_*: found holding memory that changed (once per handle) */
    struct mrc_entry *entry;     /* the cached registration, or NULL ... */
    struct ibv_mr *priv;         /* ... for a private one (after rereg) */
    uint64_t iova;
    union {
        struct mrc_handle *next_free;   /* free */
        const void *caller;             /* live: the return address of the registration */
    };
    uint64_t mark;               /* mrc_cache_inval_mark after its get (mrc_inuse_rec) */
    struct mrc_leak_tag leak;    /* counted live until deregistered: the leak report */
};

/* A few free handles per thread, so that hits on different threads share no lock. */
#define TLS_HANDLES 32
static __thread struct mrc_handle *tls_free;
static __thread unsigned tls_nfree;
__thread int mrc_verbs_tls_in_reg;
__thread const void *mrc_verbs_tls_caller;
static pthread_key_t tls_key;     /* returns a dead thread's free handles to the pool */
static __thread int tls_keyed;
static struct mrc_pool *tls_pool; /* the pool those handles go back to */

static void tls_handles_release(void *arg)
{
    (void)arg;
    while (tls_free) {
        struct mrc_handle *h = tls_free;
        tls_free = h->next_free;
        mrc_pool_put(tls_pool, h);
    }
    tls_nfree = 0;
}

void mrc_verbs_init(struct mrc_verbs *v, const struct mrc_verbs_params *p)
{
    v->cache = p->cache;
    v->fork_gen = p->fork_gen;
    v->held = p->held;
    v->held_arg = p->held_arg;
    mrc_pool_init(&v->handles, sizeof(struct mrc_handle), 1);
    tls_pool = &v->handles;
    pthread_key_create(&tls_key, tls_handles_release);
    mrc_verify_init(p->verify_period, p->max_entries);
}

MRC_HOT static struct mrc_handle *handle_alloc(struct mrc_verbs *v)
{
    struct mrc_handle *h = tls_free;
    if (h) {
        tls_free = h->next_free;
        tls_nfree--;
        memset(h, 0, sizeof(*h));
        return h;
    }
    return mrc_pool_get(&v->handles);
}

MRC_HOT static void handle_free(struct mrc_verbs *v, struct mrc_handle *h)
{
    __atomic_store_n(&h->magic, HANDLE_FREE, __ATOMIC_RELEASE);
    if (!tls_keyed) {
        pthread_setspecific(tls_key, &tls_free);   /* non-NULL: run the destructor */
        tls_keyed = 1;
    }
    if (tls_nfree < TLS_HANDLES) {
        h->next_free = tls_free;
        tls_free = h;
        tls_nfree++;
        return;
    }
    mrc_pool_put(&v->handles, h);
}

/* Our live handle, or NULL for an MR that is not ours. */
MRC_HOT static struct mrc_handle *handle_of(struct mrc_verbs *v, struct ibv_mr *mr)
{
    if (!v || !mrc_pool_owns(&v->handles, mr))
        return NULL;
    return (struct mrc_handle *)mr;
}

/* What the handle shows of the registration real it stands for: the device's names for
 * it (context, pd, handle, keys). Its range is the handle's own. */
MRC_HOT static void handle_copy_keys(struct mrc_handle *h, const struct ibv_mr *real)
{
    h->mr.context = real->context;
    h->mr.pd = real->pd;
    h->mr.handle = real->handle;
    h->mr.lkey = real->lkey;
    h->mr.rkey = real->rkey;
}

struct ibv_mr *mrc_verbs_reg_uncached(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
    mrc_stat_add(MRC_STAT_UNCACHED, 1);
    return mrc_real.reg_mr_iova2(pd, addr, len, iova, access);
}

MRC_HOT struct ibv_mr *mrc_verbs_reg_mr(struct mrc_verbs *v, struct ibv_pd *pd, void *addr, size_t len,
                                        uint64_t iova, unsigned int access)
{
    struct mrc_handle *h = handle_alloc(v);
    if (!h) {
        errno = ENOMEM;
        return NULL;
    }
    struct mrc_entry *e;
    uint64_t mark = mrc_callsite_mark();   /* call sites: tells a hit from a miss */
    mrc_verbs_tls_in_reg = 1;
    /* MRCACHE_VERIFY off, this is all it costs a hit: one load, one predictable branch. */
    int rc = mrc_verify_on() ? mrc_verify_get(v->cache, pd, (uintptr_t)addr, len, iova, access, &e)
                             : mrc_cache_get(v->cache, pd, (uintptr_t)addr, len, iova, access, &e);
    mrc_verbs_tls_in_reg = 0;
    if (rc) {
        handle_free(v, h);
        errno = -rc;
        return NULL;
    }
    handle_copy_keys(h, e->reg);
    h->mr.addr = addr;
    h->mr.length = len;
    h->access = access;
    h->iova = iova;
    h->entry = e;
    h->fork_gen = *v->fork_gen;
    h->caller = mrc_verbs_tls_caller;
    h->mark = mrc_cache_inval_mark(v->cache);
    int hit;
    struct mrc_callsite *site = mrc_callsite_count(len, mark, &hit);
    mrc_leaks_on_create(&h->leak, len, site, hit);
    __atomic_store_n(&h->magic, HANDLE_LIVE, __ATOMIC_RELEASE);
    return &h->mr;
}

struct ibv_mr *mrc_verbs_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                       int access, int counted)
{
    if (!mrc_real.reg_dmabuf_mr) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    /* Device memory: no pages of ours to watch, so never cached. */
    if (counted)
        mrc_stat_add(MRC_STAT_UNCACHED, 1);
    return mrc_real.reg_dmabuf_mr(pd, offset, len, iova, fd, access);
}

/* Whether a scan may tell h: live, or being deregistered (its fields stand until freed). */
static int scan_may_tell(const struct mrc_handle *h)
{
    uint32_t m = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
    return m == HANDLE_LIVE || m == HANDLE_DEREG;
}

/* A handle's report: none yet, being made (by a scan or the deregistration), made. */
#define REPORT_NONE 0u
#define REPORT_TAKING 1u
#define REPORT_TOLD 2u

/* Whether h (live, or being deregistered: owned) held memory of rec across it, not told
 * yet: then told, once. A scan that finds the report being made leaves it; the
 * deregistration waits for a scan making it, which gives it back if the handle was freed
 * under it (its copy may mix in a reused handle's fields): so "unmapped, then
 * deregistered" is told by the time the deregistration returns. */
static void held_check(struct mrc_verbs *v, struct mrc_handle *h, const struct mrc_inuse_rec *rec, int owned)
{
    /* An MR served on demand follows the mapping: it cannot outlive its memory. */
    if ((!owned && !scan_may_tell(h)) || h->fork_gen != *v->fork_gen ||
        !h->entry || h->entry->unpinned || __atomic_load_n(&h->reported, __ATOMIC_ACQUIRE) == REPORT_TOLD ||
        h->mark > rec->seq)
        return;
    uint64_t first = (uintptr_t)h->mr.addr, last = first + h->mr.length - 1;
    if (last < rec->first || first > rec->last)
        return;
    for (;;) {
        uint32_t seen = REPORT_NONE;
        if (__atomic_compare_exchange_n(&h->reported, &seen, REPORT_TAKING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
        if (seen == REPORT_TOLD || !owned)
            return;
        sched_yield();   /* a scan is making it: it gives it back or tells it */
    }
    struct mrc_verbs_held held = {
        .mr = &h->mr, .addr = first, .len = h->mr.length, .lkey = h->mr.lkey, .rkey = h->mr.rkey,
        .access = h->access, .caller = h->caller, .site = h->leak.site,
    };
    /* A scan's copy is whole only if h was not freed under it. */
    if (!owned && !scan_may_tell(h)) {
        __atomic_store_n(&h->reported, REPORT_NONE, __ATOMIC_RELEASE);
        return;
    }
    v->held(&held, rec, v->held_arg);
    __atomic_store_n(&h->reported, REPORT_TOLD, __ATOMIC_RELEASE);
}

/* At its deregistration, a handle is checked against the records waiting, so that one
 * deregistered after its memory went is told whether or not a scan came first. */
static __attribute__((noinline, cold)) void held_check_own(struct mrc_verbs *v, struct mrc_handle *h)
{
    struct mrc_inuse_rec recs[MRC_INUSE_RING];
    uint64_t pos;
    unsigned n = mrc_cache_in_use_peek(v->cache, recs, MRC_INUSE_RING, &pos);
    for (unsigned i = 0; i < n; i++)
        held_check(v, h, &recs[i], 1);
    /* A scan may have taken h first: its report is out only once the scan is over. */
    while (__atomic_load_n(&v->scanning, __ATOMIC_SEQ_CST))
        sched_yield();
}

struct held_scan {
    struct mrc_verbs *v;
    const struct mrc_inuse_rec *rec;
};

static void held_scan_one(void *obj, void *arg)
{
    struct held_scan *s = arg;
    held_check(s->v, obj, s->rec, 0);
}

void mrc_verbs_in_use_find(struct mrc_verbs *v, const struct mrc_inuse_rec *rec)
{
    struct held_scan s = { v, rec };
    if (!v->held)
        return;
    __atomic_add_fetch(&v->scanning, 1, __ATOMIC_SEQ_CST);
    mrc_pool_scan(&v->handles, held_scan_one, &s);
    __atomic_sub_fetch(&v->scanning, 1, __ATOMIC_SEQ_CST);
}

MRC_HOT int mrc_verbs_dereg_mr(struct mrc_verbs *v, struct ibv_mr *mr)
{
    struct mrc_handle *h = handle_of(v, mr);
    if (!h)
        return mrc_real.dereg_mr(mr);
    /* A load and a store, not a locked exchange: deregistering one MR from two threads
     * at once is a program error under verbs too; a second deregistration later is
     * what this catches. */
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != HANDLE_LIVE)
        return EINVAL;          /* deregistered already: never touch it twice */
    __atomic_store_n(&h->magic, HANDLE_DEREG, __ATOMIC_RELAXED);
    if (h->fork_gen != *v->fork_gen) {
        /* Made by our parent before fork: its registration shares the device file with
         * the parent, which still uses it. Forget the handle, touch nothing. */
        handle_free(v, h);
        return 0;
    }
    if (h->entry) {
        /* A record stays pending until the scans that take it are over, and those tell
         * a handle being deregistered too: a handle whose memory went before this call
         * is told here or by one of them. */
        if (__builtin_expect(mrc_cache_in_use_maybe(v->cache) || __atomic_load_n(&v->scanning, __ATOMIC_RELAXED), 0) &&
            v->held)
            held_check_own(v, h);
        /* A registration the cache never shared (raced an unmap, MRCACHE_REMOTE=never)
         * is deregistered now: the NIC's refusal is the caller's, as without the cache. */
        int rc = mrc_cache_put(v->cache, h->entry);
        if (rc) {
            __atomic_store_n(&h->magic, HANDLE_LIVE, __ATOMIC_RELEASE);
            return -rc;
        }
        mrc_stat_add(MRC_STAT_RELEASES, 1);
    } else {
        int rc = mrc_real.dereg_mr(h->priv);
        if (rc) {
            __atomic_store_n(&h->magic, HANDLE_LIVE, __ATOMIC_RELEASE);
            return rc;
        }
    }
    mrc_leaks_on_release(&h->leak);
    handle_free(v, h);
    return 0;
}

/* The handle after a rereg of its own MR (real): the keys and pd as the MR has them now;
 * its range only if a new translation took (the MR may be a cached registration the
 * handle took over, wider than what its caller registered). */
static void rereg_done(struct mrc_handle *h, const struct ibv_mr *real, int flags, int rc, int access)
{
    handle_copy_keys(h, real);
    if (rc != 0 && rc != IBV_REREG_MR_ERR_DO_FORK_OLD)   /* the MR changed only with these */
        return;
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        h->mr.addr = real->addr;
        h->mr.length = real->length;
        h->iova = (uintptr_t)real->addr;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS)
        h->access = (uint32_t)access;
}

/* ibv_rereg_mr of a handle over a cached registration. Alone holding it, the handle
 * takes the registration out of the cache and it is changed in place: libibverbs' own
 * semantics (the same MR, its old pages even if the memory was unmapped or replaced
 * since, its keys changed as the driver changes them). Unless that would let a peer
 * reach more than the caller registered (the registration was rounded out or merged,
 * and the new rights are remote without a new translation), or others hold it: then
 * the handle gets a registration of its own, the new translation or its own range
 * again (which pins the pages mapped there now, and fails where nothing is), and the
 * rereg applies to that; a shared registration with remote rights leaves the cache,
 * so that its rkey dies with its last holder. */
static int rereg_cached(struct mrc_verbs *v, struct mrc_handle *h, int flags, struct ibv_pd *pd, void *addr,
                        size_t len, int access)
{
    struct mrc_entry *e = h->entry;
    struct ibv_mr *real = e->reg;
    if (!flags)
        return mrc_real.rereg_mr(real, flags, pd, addr, len, access);   /* refused before any change */
    int trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
    uint32_t remote = v->cache->p.remote_mask, entry_access = e->access;
    uint32_t new_access = flags & IBV_REREG_MR_CHANGE_ACCESS ? (uint32_t)access : h->access;
    int exact = mrc_entry_start(e) == (uintptr_t)h->mr.addr && mrc_entry_len(e) == h->mr.length &&
                e->iova_off == (int64_t)(h->iova - (uintptr_t)h->mr.addr);
    void *taken;
    /* A pd's implicit MR serves other handles too: never taken, never changed. */
    if (e->unpinned != MRC_REG_SHARED && (exact || trans || !(new_access & remote)) &&
        mrc_cache_take(v->cache, e, &taken) == 0) {
        h->entry = NULL;
        h->priv = taken;
        /* An entry with more local rights than asked for served this handle: the MR
         * gets exactly the caller's rights, as its own registration had. */
        int f = flags, acc = access;
        if (entry_access != h->access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) {
            f |= IBV_REREG_MR_CHANGE_ACCESS;
            acc = (int)h->access;
        }
        int rc = mrc_real.rereg_mr(h->priv, f, pd, addr, len, acc);
        rereg_done(h, h->priv, f, rc, acc);
        return rc;
    }
    struct ibv_mr *priv = trans ? mrc_real.reg_mr_iova2(h->mr.pd, addr, len, (uintptr_t)addr, h->access)
                                : mrc_real.reg_mr_iova2(h->mr.pd, h->mr.addr, h->mr.length, h->iova, h->access);
    if (!priv)
        return IBV_REREG_MR_ERR_CMD;   /* errno: the NIC's */
    int rest = flags & ~IBV_REREG_MR_CHANGE_TRANSLATION;
    int rc = rest ? mrc_real.rereg_mr(priv, rest, pd, NULL, 0, access) : 0;
    int saved = errno;
    if (rc) {
        mrc_real.dereg_mr(priv);
        errno = saved;
        return rc;
    }
    if (entry_access & remote)
        mrc_cache_retire(v->cache, e);
    mrc_cache_drop(v->cache, e);
    h->entry = NULL;
    h->priv = priv;
    rereg_done(h, priv, flags, 0, access);
    errno = saved;
    return 0;
}

int mrc_verbs_rereg_mr(struct mrc_verbs *v, struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
                       int access)
{
    if (!mr) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    struct mrc_handle *h = handle_of(v, mr);
    if (!h)
        return mrc_real.rereg_mr(mr, flags, pd, addr, len, access);
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != HANDLE_LIVE || h->fork_gen != *v->fork_gen) {
        errno = EINVAL;   /* deregistered, or our parent's */
        return IBV_REREG_MR_ERR_INPUT;
    }
    /* libibverbs' own checks, before the driver is asked: done here first, so that a bad
     * call changes nothing of ours either. */
    if ((flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !len)) ||
        (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (h->entry)
        return rereg_cached(v, h, flags, pd, addr, len, access);
    int rc = mrc_real.rereg_mr(h->priv, flags, pd, addr, len, access);
    rereg_done(h, h->priv, flags, rc, access);
    return rc;
}

static int match_context(const struct mrc_entry *e, void *ctx)
{
    return ((struct ibv_mr *)e->reg)->context == ctx;
}

uint64_t mrc_verbs_flush_pd(struct mrc_verbs *v, struct ibv_pd *pd)
{
    return mrc_cache_flush_domain(v->cache, pd);
}

uint64_t mrc_verbs_flush_context(struct mrc_verbs *v, struct ibv_context *ctx)
{
    return mrc_cache_flush(v->cache, match_context, ctx);
}

void mrc_verbs_set_reserve(struct mrc_verbs *v, void (*low)(void *arg), void *arg)
{
    /* One chunk (about 1k handles) covers a burst of registrations kept open. */
    mrc_pool_set_reserve(&v->handles, low ? 1 : 0, low, arg);
}

void mrc_verbs_refill(struct mrc_verbs *v)
{
    mrc_pool_refill(&v->handles);
}

void mrc_verbs_fork_prepare(struct mrc_verbs *v)
{
    pthread_mutex_lock(&v->handles.lock);
}

void mrc_verbs_fork_parent(struct mrc_verbs *v)
{
    pthread_mutex_unlock(&v->handles.lock);
}

void mrc_verbs_fork_child(struct mrc_verbs *v)
{
    mrc_pool_reset_lock(&v->handles);
    v->scanning = 0;   /* a scan under way in the parent has no thread here */
}
