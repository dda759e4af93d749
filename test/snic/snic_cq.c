/* snic_cq.c - completion queues: ibv_create_cq/ibv_destroy_cq and the context's poll_cq
 * and req_notify_cq. A CQ is a ring of completions under the CQ's own lock, taken last
 * (posts push under the qp lock; a poll takes nothing else), so polling never waits for a
 * post's DMA. Invariants (the CQ's lock): count entries from head, count <= size; once
 * overrun (a completion found no room) every poll fails; users counts the QPs on it. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "snic_priv.h"

struct cqe {
    struct ibv_wc wc;
    uint32_t *sq_used; /* the sending QP's busy send slots; NULL for a receive */
    uint32_t sq_free;  /* how many of them this completion frees when polled */
};

struct snic_cq {
    struct ibv_cq ibv; /* first: the ibv_cq we hand out */
    pthread_mutex_t lock;
    struct cqe *ring;
    uint32_t size, head, count;
    bool overrun;
    unsigned long users;
    unsigned gen;
};

static atomic_uint live_cqs; /* against SNIC_MAX_CQ */
static atomic_uint handle_last;

static int fail(int err)
{
    errno = err;
    return err;
}

/* cqe entries exactly (reported back in cq->cqe). No completion channel can exist here
 * (ibv_create_comp_channel fails), so channel must be NULL; one completion vector. */
SNIC_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                         struct ibv_comp_channel *channel, int comp_vector)
{
    struct snic_cq *cq;
    int err = EINVAL;

    if (!context || cqe < 1 || (unsigned)cqe > SNIC_MAX_CQE || channel || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors)
        goto fail;
    err = nic_ctx_hold(snic_ctx_of(context), "ibv_create_cq");
    if (err)
        goto fail;
    err = ENOMEM;
    if (atomic_fetch_add(&live_cqs, 1) >= SNIC_MAX_CQ)
        goto uncount;
    cq = calloc(1, sizeof(*cq));
    if (!cq)
        goto uncount;
    cq->ring = calloc((size_t)cqe, sizeof(*cq->ring));
    if (!cq->ring)
        goto free_cq;
    pthread_mutex_init(&cq->lock, NULL);
    cq->size = (uint32_t)cqe;
    cq->gen = nic_gen_now();
    cq->ibv.context = context;
    cq->ibv.cq_context = cq_context;
    cq->ibv.handle = atomic_fetch_add(&handle_last, 1) + 1;
    cq->ibv.cqe = cqe;
    pthread_mutex_init(&cq->ibv.mutex, NULL);
    pthread_cond_init(&cq->ibv.cond, NULL);
    return &cq->ibv;

free_cq:
    free(cq);
uncount:
    atomic_fetch_sub(&live_cqs, 1);
    nic_ctx_unhold(snic_ctx_of(context));
fail:
    errno = err;
    return NULL;
}

/* EBUSY while a QP uses it, as the kernel. Completions not polled are lost. */
SNIC_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;
    bool busy;
    int err;

    if (!cq)
        return fail(EINVAL);
    err = nic_inherited(cq->gen, "ibv_destroy_cq", "CQ");
    if (err)
        return fail(err);
    pthread_mutex_lock(&cq->lock);
    busy = cq->users != 0;
    pthread_mutex_unlock(&cq->lock);
    if (busy)
        return fail(EBUSY);
    nic_ctx_unhold(snic_ctx_of(cq->ibv.context));
    atomic_fetch_sub(&live_cqs, 1);
    pthread_cond_destroy(&cq->ibv.cond);
    pthread_mutex_destroy(&cq->ibv.mutex);
    pthread_mutex_destroy(&cq->lock);
    free(cq->ring);
    free(cq);
    return 0;
}

/* The number of completions returned (oldest first), or -1 with errno: EIO for an
 * inherited CQ, EOVERFLOW once the CQ was overrun. */
int cq_poll(struct ibv_cq *ibcq, int num_entries, struct ibv_wc *wc)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;
    int n = 0;

    if (nic_inherited(cq->gen, "ibv_poll_cq", "CQ")) {
        errno = EIO;
        return -1;
    }
    pthread_mutex_lock(&cq->lock);
    if (cq->overrun)
        n = -1;
    while (n >= 0 && n < num_entries && cq->count) {
        struct cqe *e = &cq->ring[cq->head];

        wc[n++] = e->wc;
        if (e->sq_used)
            __atomic_sub_fetch(e->sq_used, e->sq_free, __ATOMIC_RELAXED);
        cq->head = (cq->head + 1) % cq->size;
        cq->count--;
    }
    pthread_mutex_unlock(&cq->lock);
    if (n < 0)
        errno = EOVERFLOW;
    return n;
}

/* Without completion channels there is no event to arm; accepted as a provider would. */
int cq_req_notify(struct ibv_cq *ibcq, int solicited_only)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;

    (void)solicited_only;
    return nic_inherited(cq->gen, "ibv_req_notify_cq", "CQ");
}

int cq_attach(struct ibv_cq *ibcq, struct ibv_context *context, const char *call)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;
    int err;

    if (!cq)
        return EINVAL;
    err = nic_inherited(cq->gen, call, "CQ");
    if (err)
        return err;
    if (cq->ibv.context != context)
        return EINVAL;
    pthread_mutex_lock(&cq->lock);
    cq->users++;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

void cq_detach(struct ibv_cq *ibcq)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;

    pthread_mutex_lock(&cq->lock);
    cq->users--;
    pthread_mutex_unlock(&cq->lock);
}

void cq_push(struct ibv_cq *ibcq, const struct ibv_wc *wc, uint32_t *sq_used, uint32_t sq_free)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;
    bool first_overrun = false;

    pthread_mutex_lock(&cq->lock);
    if (cq->count == cq->size) {
        first_overrun = !cq->overrun;
        cq->overrun = true;
    } else {
        struct cqe *e = &cq->ring[(cq->head + cq->count) % cq->size];

        e->wc = *wc;
        e->sq_used = sq_used;
        e->sq_free = sq_free;
        cq->count++;
    }
    pthread_mutex_unlock(&cq->lock);
    if (first_overrun)
        snic_log("CQ %u of %d entries overrun: a completion of QP %#x was lost; ibv_poll_cq "
                 "fails EOVERFLOW from now on", cq->ibv.handle, cq->ibv.cqe, wc->qp_num);
}

void cq_purge(struct ibv_cq *ibcq, uint32_t qp_num)
{
    struct snic_cq *cq = (struct snic_cq *)ibcq;
    uint32_t kept = 0;

    pthread_mutex_lock(&cq->lock);
    for (uint32_t i = 0; i < cq->count; i++) {
        struct cqe e = cq->ring[(cq->head + i) % cq->size];

        if (e.wc.qp_num != qp_num)
            cq->ring[(cq->head + kept++) % cq->size] = e;
    }
    cq->count = kept;
    pthread_mutex_unlock(&cq->lock);
}

/* The child's NIC is fresh: inherited CQs are never touched there, nor counted. */
static void cq_fork_child(void)
{
    atomic_store(&live_cqs, 0);
}

__attribute__((constructor)) static void cq_init(void)
{
    pthread_atfork(NULL, NULL, cq_fork_child);
}
