/* audit.c - MRCACHE_AUDIT=warn|abort: every scatter/gather entry of every work request
 * the program posts (ibv_post_send, ibv_post_recv, ibv_post_srq_recv through its
 * context's ops, and the ibv_wr_set_sge/ibv_wr_set_sge_list builders of extended QPs) is
 * checked against the MRs the program holds: an lkey no MR of the program has (it was
 * deregistered: the cache may still keep the registration, which the NIC then accepts),
 * a range outside the MR the lkey names (inside a wider cached registration, which the
 * NIC accepts), and memory that changed under the MR since it was registered (the NIC
 * moves the old pages). Each fault is said once per MR and kind (warn) and counted in
 * audit_faults, or stops the process with a core dump at the first (abort).
 * Invariants: off, nothing here runs (the gates read mrc_rt_audit_on); the program's
 * calls are forwarded unchanged, whatever the check finds; a context's calls are
 * checked from its first registration on (extended QPs created before it are not);
 * never in a hook: posts, registrations and deregistrations only. */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/audit.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/callsite.h"
#include "util/config.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/real.h"
#include "util/stats.h"
#include "verbs/mr.h"

int mrc_rt_audit_on;
static int audit_abort;

/* One MR the program holds. */
struct arec {
    void *pool_link;
    const struct ibv_mr *mr;      /* the program's handle */
    const struct ibv_context *ctx;   /* lkeys are a device's: two devices reuse them */
    uint32_t lkey;
    uint32_t told;                /* FAULT_* bits said */
    uint64_t first, last;         /* its own range, in its iova space (what sges name) */
    int64_t va_off;               /* virtual address - iova, for the changes (addresses) */
    uint64_t cfirst, clast;       /* memory that changed under it (cfirst > clast: none) */
    int cause;
    const void *caller;           /* its registration's return address */
    struct arec *next;
};

enum { FAULT_STALE = 1, FAULT_OUTSIDE = 2 };

#define BUCKETS 4096
static struct arec *buckets[BUCKETS];
static pthread_rwlock_t lock;   /* writers preferred (audit_init): posts never starve them */
static struct mrc_pool recs;

/* Unknown lkeys said so far. */
#define TOLD_KEYS 64
static uint32_t told_keys[TOLD_KEYS];
static unsigned ntold_keys;

static unsigned bucket_of(uint32_t lkey)
{
    return (lkey * 2654435761u) >> 20 & (BUCKETS - 1);
}

/* ---- contexts and QPs whose calls are checked ---- */

#define MAX_CTX 64
static struct hooked_ctx {
    struct ibv_context *ctx;
    int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
    int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
    int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
    struct ibv_qp *(*create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *);
    int closed;                   /* ibv_close_device ran: a context at this address is new */
} ctxs[MAX_CTX];
static unsigned nctx;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static struct hooked_ctx *ctx_of(const struct ibv_context *c)
{
    unsigned n = __atomic_load_n(&nctx, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if (__atomic_load_n(&ctxs[i].ctx, __ATOMIC_ACQUIRE) == c)
            return &ctxs[i];
    return NULL;
}

/* Extended QPs' builders, per QP (open addressing by its address). */
#define MAX_QPX 4096
static struct hooked_qpx {
    struct ibv_qp_ex *qpx;
    void (*set_sge)(struct ibv_qp_ex *, uint32_t, uint64_t, uint32_t);
    void (*set_sge_list)(struct ibv_qp_ex *, size_t, const struct ibv_sge *);
} qpxs[MAX_QPX];

static struct hooked_qpx *qpx_slot(const struct ibv_qp_ex *q, int make)
{
    unsigned h = (unsigned)(((uintptr_t)q >> 6) * 2654435761u) % MAX_QPX;
    for (unsigned i = 0; i < MAX_QPX; i++) {
        struct hooked_qpx *s = &qpxs[(h + i) % MAX_QPX];
        if (s->qpx == q)
            return s;
        if (!s->qpx)
            return make ? s : NULL;
    }
    return NULL;
}

/* ---- the check ---- */

static const char *change_word(int cause)
{
    return cause >= 0 && cause < MRC_INVAL_LAST ? mrc_inval_cause_name((enum mrc_inval_cause)cause) : "changed";
}

static void fault(const char *verb, uint32_t lkey, uint64_t addr, uint32_t len, const char *what)
{
    mrc_stat_add(MRC_STAT_AUDIT_FAULTS, 1);
    MRC_WARN("MRCACHE_AUDIT: %s posts [%#llx, +%u) through lkey %#x: %s", verb, (unsigned long long)addr, len, lkey,
             what);
    if (audit_abort) {
        MRC_WARN("MRCACHE_AUDIT=abort: stopping at the first fault, with a core dump");
        abort();
    }
}

static void check_sge(const struct ibv_context *ctx, const char *verb, uint32_t lkey, uint64_t addr, uint32_t len)
{
    if (!len)
        return;
    mrc_stat_add(MRC_STAT_AUDIT_CHECKS, 1);
    /* A change not yet matched to the MRs over it is, before this post is judged. */
    if (mrc_cache_in_use_maybe(&mrc_rt.cache))
        mrc_rt_inuse_scan();
    uint64_t last = addr + len - 1;
    int kind = 0, known = 0;
    struct arec found = { 0 };
    pthread_rwlock_rdlock(&lock);
    for (struct arec *r = buckets[bucket_of(lkey)]; r; r = r->next) {
        if (r->lkey != lkey || (ctx && r->ctx != ctx))
            continue;
        known = 1;
        if (addr < r->first || last > r->last) {
            if (!kind) {
                kind = FAULT_OUTSIDE;
                found = *r;
            }
            continue;
        }
        uint64_t va = addr + (uint64_t)r->va_off, va_last = last + (uint64_t)r->va_off;
        kind = r->cfirst <= r->clast && r->cfirst <= va_last && va <= r->clast ? FAULT_STALE : 0;
        found = *r;
        if (!kind)
            break;   /* one MR of the program covers it with its memory unchanged */
    }
    pthread_rwlock_unlock(&lock);
    if (known && !kind)
        return;
    char msg[512], from[256];
    if (!known) {
        pthread_rwlock_wrlock(&lock);
        int said = ntold_keys == TOLD_KEYS;   /* past that many, counted only */
        for (unsigned i = 0; i < ntold_keys && !said; i++)
            said = told_keys[i] == lkey;
        if (!said)
            told_keys[ntold_keys++] = lkey;
        pthread_rwlock_unlock(&lock);
        if (said) {
            mrc_stat_add(MRC_STAT_AUDIT_FAULTS, 1);
            return;
        }
        fault(verb, lkey, addr, len,
              "no MR of the program has this lkey (deregistered, or never registered here): a registration the "
              "cache keeps may still accept it, where without libmrcache the NIC would refuse it");
        return;
    }
    /* Said once per MR and kind: the record keeps what was said. */
    pthread_rwlock_wrlock(&lock);
    int said = 1;
    for (struct arec *r = buckets[bucket_of(lkey)]; r; r = r->next)
        if (r->mr == found.mr && r->lkey == lkey) {
            said = (r->told & (uint32_t)kind) != 0;
            r->told |= (uint32_t)kind;
            break;
        }
    pthread_rwlock_unlock(&lock);
    if (said) {
        mrc_stat_add(MRC_STAT_AUDIT_FAULTS, 1);
        return;
    }
    mrc_callsite_label((uint64_t)(uintptr_t)found.caller, from, sizeof(from));
    if (kind == FAULT_STALE)
        snprintf(msg, sizeof(msg),
                 "its MR [%#llx, +%llu) (registered from %s) outlived its memory: %s at [%#llx, %#llx] after it was "
                 "registered, so the NIC moves the old pages, not what is there now",
                 (unsigned long long)found.first, (unsigned long long)(found.last - found.first + 1), from,
                 change_word(found.cause), (unsigned long long)found.cfirst, (unsigned long long)found.clast);
    else
        snprintf(msg, sizeof(msg),
                 "outside its MR [%#llx, +%llu) (registered from %s): a wider registration the cache shares may "
                 "accept it, where without libmrcache the NIC would refuse it",
                 (unsigned long long)found.first, (unsigned long long)(found.last - found.first + 1), from);
    fault(verb, lkey, addr, len, msg);
}

static int audit_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct hooked_ctx *h = ctx_of(qp->context);
    for (struct ibv_send_wr *w = wr; w; w = w->next)
        if (!(w->send_flags & IBV_SEND_INLINE))
            for (int i = 0; i < w->num_sge; i++)
                check_sge(qp->context, "ibv_post_send", w->sg_list[i].lkey, w->sg_list[i].addr, w->sg_list[i].length);
    return h->post_send(qp, wr, bad);
}

static void check_recv(const struct ibv_context *ctx, const char *verb, const struct ibv_recv_wr *wr)
{
    for (const struct ibv_recv_wr *w = wr; w; w = w->next)
        for (int i = 0; i < w->num_sge; i++)
            check_sge(ctx, verb, w->sg_list[i].lkey, w->sg_list[i].addr, w->sg_list[i].length);
}

static int audit_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct hooked_ctx *h = ctx_of(qp->context);
    check_recv(qp->context, "ibv_post_recv", wr);
    return h->post_recv(qp, wr, bad);
}

static int audit_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct hooked_ctx *h = ctx_of(srq->context);
    check_recv(srq->context, "ibv_post_srq_recv", wr);
    return h->post_srq_recv(srq, wr, bad);
}

static void audit_wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len)
{
    check_sge(q->qp_base.context, "ibv_wr_set_sge", lkey, addr, len);
    qpx_slot(q, 0)->set_sge(q, lkey, addr, len);
}

static void audit_wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
    for (size_t i = 0; i < n; i++)
        check_sge(q->qp_base.context, "ibv_wr_set_sge_list", sg[i].lkey, sg[i].addr, sg[i].length);
    qpx_slot(q, 0)->set_sge_list(q, n, sg);
}

static struct ibv_qp *audit_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr)
{
    struct hooked_ctx *h = ctx_of(c);
    struct ibv_qp *qp = h->create_qp_ex(c, attr);
    if (!qp || !(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
        return qp;
    /* Its builders are the QP's own: each checked one is kept per QP. */
    struct ibv_qp_ex *(*to_ex)(struct ibv_qp *) = mrc_real.qp_to_qp_ex;
    struct ibv_qp_ex *q = to_ex ? to_ex(qp) : NULL;
    if (!q)
        return qp;
    pthread_mutex_lock(&ctx_lock);
    struct hooked_qpx *s = qpx_slot(q, 1);
    if (s && q->wr_set_sge != audit_wr_set_sge) {
        s->qpx = q;
        s->set_sge = q->wr_set_sge;
        s->set_sge_list = q->wr_set_sge_list;
        if (q->wr_set_sge)
            q->wr_set_sge = audit_wr_set_sge;
        if (q->wr_set_sge_list)
            q->wr_set_sge_list = audit_wr_set_sge_list;
    }
    pthread_mutex_unlock(&ctx_lock);
    return qp;
}

static void hook_context(struct ibv_context *c)
{
    struct hooked_ctx *h = c ? ctx_of(c) : NULL;
    if (!c || (h && !__atomic_load_n(&h->closed, __ATOMIC_ACQUIRE)))
        return;
    pthread_mutex_lock(&ctx_lock);
    h = ctx_of(c);
    if (!h && nctx < MAX_CTX)
        h = &ctxs[nctx];
    if (h && (h->ctx != c || h->closed)) {
        /* The slot is filled before the ops point at the wrappers, which find it by ctx;
         * a closed context's slot keeps serving a post that raced its close. */
        h->post_send = c->ops.post_send;
        h->post_recv = c->ops.post_recv;
        h->post_srq_recv = c->ops.post_srq_recv;
        struct verbs_context *v = verbs_get_ctx_op(c, create_qp_ex);
        h->create_qp_ex = v ? v->create_qp_ex : NULL;
        __atomic_store_n(&h->closed, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&h->ctx, c, __ATOMIC_RELEASE);
        if (h == &ctxs[nctx])
            __atomic_store_n(&nctx, nctx + 1, __ATOMIC_RELEASE);
        if (h->post_send)
            __atomic_store_n(&c->ops.post_send, audit_post_send, __ATOMIC_RELEASE);
        if (h->post_recv)
            __atomic_store_n(&c->ops.post_recv, audit_post_recv, __ATOMIC_RELEASE);
        if (h->post_srq_recv)
            __atomic_store_n(&c->ops.post_srq_recv, audit_post_srq_recv, __ATOMIC_RELEASE);
        if (v && h->create_qp_ex)
            __atomic_store_n(&v->create_qp_ex, audit_create_qp_ex, __ATOMIC_RELEASE);
    } else if (!h) {
        MRC_WARN("MRCACHE_AUDIT: more than %d device contexts: the posts of the others are not checked", MAX_CTX);
    }
    pthread_mutex_unlock(&ctx_lock);
}

void mrc_rt_audit_forget_context(struct ibv_context *c)
{
    pthread_mutex_lock(&ctx_lock);
    struct hooked_ctx *h = ctx_of(c);
    if (h) {
        c->ops.post_send = h->post_send;
        c->ops.post_recv = h->post_recv;
        c->ops.post_srq_recv = h->post_srq_recv;
        struct verbs_context *v = verbs_get_ctx_op(c, create_qp_ex);
        if (v && h->create_qp_ex)
            v->create_qp_ex = h->create_qp_ex;
        __atomic_store_n(&h->closed, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx_lock);
    /* Its MRs went with it. */
    pthread_rwlock_wrlock(&lock);
    for (unsigned b = 0; b < BUCKETS; b++)
        for (struct arec **p = &buckets[b]; *p;) {
            struct arec *r = *p;
            if (r->ctx == c) {
                *p = r->next;
                mrc_pool_put(&recs, r);
            } else {
                p = &r->next;
            }
        }
    pthread_rwlock_unlock(&lock);
}

/* ---- the program's MRs ---- */

/* Writers preferred: threads posting all the time must not keep registrations out. */
static void lock_init(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock, &a);
    pthread_rwlockattr_destroy(&a);
}

void mrc_rt_audit_init(int mode)
{
    if (mode == MRC_CFG_AUDIT_OFF)
        return;
    audit_abort = mode == MRC_CFG_AUDIT_ABORT;
    lock_init();
    mrc_pool_init(&recs, sizeof(struct arec), 1);
    __atomic_store_n(&mrc_rt_audit_on, 1, __ATOMIC_RELEASE);
}

void mrc_rt_audit_reg(struct ibv_mr *mr, uint64_t iova, const void *va)
{
    hook_context(mr->context);
    struct arec *r = mrc_pool_get(&recs);
    if (!r)
        return;
    r->mr = mr;
    r->ctx = mr->context;
    r->lkey = mr->lkey;
    r->first = iova;
    r->last = r->first + (mr->length ? mr->length - 1 : 0);
    r->va_off = (int64_t)((uintptr_t)va - iova);
    r->cfirst = 1;
    r->clast = 0;
    r->caller = mrc_verbs_tls_caller;
    pthread_rwlock_wrlock(&lock);
    struct arec **b = &buckets[bucket_of(r->lkey)];
    r->next = *b;
    *b = r;
    pthread_rwlock_unlock(&lock);
}

void mrc_rt_audit_dereg(const struct ibv_mr *mr, uint32_t lkey)
{
    struct arec *gone = NULL;
    pthread_rwlock_wrlock(&lock);
    for (struct arec **p = &buckets[bucket_of(lkey)]; *p; p = &(*p)->next)
        if ((*p)->mr == mr && (*p)->lkey == lkey) {
            gone = *p;
            *p = gone->next;
            break;
        }
    pthread_rwlock_unlock(&lock);
    if (gone)
        mrc_pool_put(&recs, gone);
}

void mrc_rt_audit_changed(const struct ibv_mr *mr, uint64_t first, uint64_t last, int cause)
{
    pthread_rwlock_wrlock(&lock);
    for (struct arec *r = buckets[bucket_of(mr->lkey)]; r; r = r->next)
        if (r->mr == mr && r->cfirst > r->clast) {
            /* Addresses, clipped to the MR's own (its iova range moved by va_off). */
            uint64_t lo = r->first + (uint64_t)r->va_off, hi = r->last + (uint64_t)r->va_off;
            r->cfirst = first > lo ? first : lo;
            r->clast = last < hi ? last : hi;
            r->cause = cause;
        }
    pthread_rwlock_unlock(&lock);
}

void mrc_rt_audit_child(void)
{
    if (!mrc_rt_audit_on)
        return;
    /* The parent's records stay in the old pool's memory, unreachable. */
    memset(buckets, 0, sizeof(buckets));
    mrc_pool_init(&recs, sizeof(struct arec), 1);
    lock_init();
    pthread_mutex_init(&ctx_lock, NULL);
    ntold_keys = 0;
}
