/* snic_qp.c - RC queue pairs and shared receive queues, looped back within this process:
 * a QP's RTR dest_qp_num names its peer, and each work request is carried out whole when
 * it is posted, its data moved through the MRs' pinned pages (nic_dma) as a NIC's DMA
 * would, with a real NIC's checks and error completions. Invariants (qp_lock): qp_table
 * holds the live QPs by qp_num; a QP's receive queue is empty with an SRQ or in RESET and
 * ERR; srq users count its QPs; sq_used (atomic, freed by polls) counts the QP's send
 * requests whose slot no polled completion has freed yet, at most cap.max_send_wr. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "snic_priv.h"

/* The table allocates on insert; running out of memory there is not survivable. */
#define uthash_fatal(msg) (snic_log("QP table: %s", msg), abort())
#include <uthash.h>

#define QPN_MASK 0xffffffu /* QP numbers and PSNs are 24 bits */

/* One posted receive; its sges follow in the queue's sge array. */
struct rwqe {
    uint64_t wr_id;
    uint32_t num_sge;
};

/* A receive queue (a QP's or an SRQ's): a ring of receives, oldest at head. */
struct rq {
    struct rwqe *wqe;     /* max_wr */
    struct ibv_sge *sge;  /* max_sge per wqe */
    uint32_t max_wr, max_sge, head, count;
};

struct snic_srq {
    struct ibv_srq ibv; /* first: the ibv_srq we hand out */
    struct rq rq;
    uint32_t limit;     /* stored and reported; no async event ever reports it */
    unsigned long users;
    unsigned gen;
};

struct snic_qp {
    struct ibv_qp_ex ex;      /* first: ex.qp_base is the ibv_qp we hand out */
    struct ibv_qp_attr attr;  /* what ibv_modify_qp stored; attr.cap the queues' limits */
    bool sq_sig_all;
    struct snic_srq *srq;
    struct rq rq;
    uint32_t sq_used;
    uint32_t unsignalled;     /* successful unsignalled requests since the last completion */
    struct qpx *qpx;          /* the builders of a QP made with send_ops_flags */
    unsigned gen;
    UT_hash_handle hh;
};

static pthread_mutex_t qp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct snic_qp *qp_table;
static uint32_t qpn_last;
static unsigned long live_qps, live_srqs;
static uint32_t srq_handle_last;
static char bounce[1 << 16]; /* under qp_lock: the data of a transfer on its way */

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static int fail(int err)
{
    errno = err;
    return err;
}

static struct snic_qp *qp_of(struct ibv_qp *qp)
{
    return (struct snic_qp *)qp;
}

static uint32_t qpn(const struct snic_qp *qp)
{
    return qp->ex.qp_base.qp_num;
}

static void set_state(struct snic_qp *qp, enum ibv_qp_state state)
{
    qp->attr.qp_state = state;
    qp->ex.qp_base.state = state;
}

/* ---- fork ---- */

static void qp_fork_prepare(void)
{
    pthread_mutex_lock(&qp_lock);
}

static void qp_fork_parent(void)
{
    pthread_mutex_unlock(&qp_lock);
}

/* The child's NIC is fresh: the parent's QPs are no peers of its own (their table is
 * abandoned) and every verb on an inherited QP or SRQ fails EIO. */
static void qp_fork_child(void)
{
    qp_table = NULL;
    live_qps = live_srqs = 0;
    pthread_mutex_unlock(&qp_lock);
}

/* Registered at the first QP or SRQ, so after nic_init registered the device's handlers:
 * prepare handlers run in reverse order of registration, so fork takes the qp lock before
 * the nic lock, the lock order. */
static void qp_fork_register(void)
{
    pthread_atfork(qp_fork_prepare, qp_fork_parent, qp_fork_child);
}

/* ---- receive queues ---- */

static int rq_init(struct rq *rq, uint32_t max_wr, uint32_t max_sge)
{
    size_t n = max_wr ? max_wr : 1;

    *rq = (struct rq){ .max_wr = max_wr, .max_sge = max_sge };
    rq->wqe = calloc(n, sizeof(*rq->wqe));
    rq->sge = calloc(n * (max_sge ? max_sge : 1), sizeof(*rq->sge));
    if (rq->wqe && rq->sge)
        return 0;
    free(rq->wqe);
    free(rq->sge);
    return ENOMEM;
}

static void rq_free(struct rq *rq)
{
    free(rq->wqe);
    free(rq->sge);
}

static struct ibv_sge *rq_sges(const struct rq *rq, uint32_t slot)
{
    return rq->sge + (size_t)slot * rq->max_sge;
}

/* EINVAL for more sges than the queue takes, ENOMEM when it is full. */
static int rq_check(const struct rq *rq, const struct ibv_recv_wr *wr)
{
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge)
        return EINVAL;
    return rq->count == rq->max_wr ? ENOMEM : 0;
}

static void rq_add(struct rq *rq, const struct ibv_recv_wr *wr)
{
    uint32_t slot = (rq->head + rq->count) % rq->max_wr;

    rq->wqe[slot] = (struct rwqe){ .wr_id = wr->wr_id, .num_sge = (uint32_t)wr->num_sge };
    if (wr->num_sge)
        memcpy(rq_sges(rq, slot), wr->sg_list, (size_t)wr->num_sge * sizeof(*wr->sg_list));
    rq->count++;
}

static void rq_pop(struct rq *rq)
{
    rq->head = (rq->head + 1) % rq->max_wr;
    rq->count--;
}

/* Under qp_lock: a receive completion on qp's receive CQ. */
static void recv_done(struct snic_qp *qp, uint64_t wr_id, enum ibv_wc_status status,
                      enum ibv_wc_opcode opcode, uint32_t byte_len,
                      const struct ibv_send_wr *from_wr, uint32_t from_qpn)
{
    struct ibv_wc wc = {
        .wr_id = wr_id, .status = status, .opcode = opcode, .byte_len = byte_len,
        .qp_num = qpn(qp), .src_qp = from_qpn, .slid = 1,
    };

    if (status == IBV_WC_SUCCESS && from_wr &&
        (from_wr->opcode == IBV_WR_SEND_WITH_IMM ||
         from_wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)) {
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = from_wr->imm_data;
    }
    cq_push(qp->ex.qp_base.recv_cq, &wc, NULL, 0);
}

/* Under qp_lock: the QP enters the error state; its own posted receives complete with
 * IBV_WC_WR_FLUSH_ERR (an SRQ's stay for its other QPs). */
static void qp_error(struct snic_qp *qp)
{
    if (qp->attr.qp_state == IBV_QPS_ERR)
        return;
    set_state(qp, IBV_QPS_ERR);
    for (; qp->rq.count; rq_pop(&qp->rq))
        recv_done(qp, qp->rq.wqe[qp->rq.head].wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, NULL, 0);
}

/* Under qp_lock: RESET forgets everything: receives, completions not polled yet, and the
 * attributes, as a provider's reset does. */
static void qp_reset(struct snic_qp *qp)
{
    struct ibv_qp_cap cap = qp->attr.cap;

    qp->rq.head = qp->rq.count = 0;
    cq_purge(qp->ex.qp_base.send_cq, qpn(qp));
    cq_purge(qp->ex.qp_base.recv_cq, qpn(qp));
    __atomic_store_n(&qp->sq_used, 0, __ATOMIC_RELAXED);
    qp->unsignalled = 0;
    memset(&qp->attr, 0, sizeof(qp->attr));
    qp->attr.cap = cap;
    set_state(qp, IBV_QPS_RESET);
}

/* ---- data movement ---- */

/* One side of a transfer: segments of MRs of one PD, or host memory (inline data). */
struct sgl {
    const struct ibv_pd *pd; /* NULL: the addresses are host memory */
    const struct ibv_sge *sge;
    uint32_t n;
    unsigned need;           /* the rights its MRs must grant */
};

/* Under qp_lock: each segment's key, PD, range and rights, as the NIC checks them before
 * moving a byte; the total length in *len. */
static int sgl_check(const struct sgl *l, uint64_t *len)
{
    *len = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        const struct ibv_sge *s = &l->sge[i];
        int err = l->pd ? nic_dma(l->pd, s->lkey, s->addr, NULL, NULL, s->length, l->need) : 0;

        if (err)
            return err;
        *len += s->length;
    }
    return 0;
}

/* Where a transfer stands in an sgl. */
struct cursor {
    const struct sgl *l;
    uint32_t i, off;
};

/* Under qp_lock: moves n bytes (no more than are left) between the segments at c and
 * buf, into buf if to_buf, and advances c. Host memory is only ever a source. */
static int cursor_move(struct cursor *c, char *buf, size_t n, bool to_buf)
{
    while (n) {
        const struct ibv_sge *s = &c->l->sge[c->i];
        size_t k = s->length - c->off < n ? s->length - c->off : n;
        uint64_t at = s->addr + c->off;
        int err = 0;

        if (!c->l->pd)
            memcpy(buf, (const void *)(uintptr_t)at, k);
        else
            err = nic_dma(c->l->pd, s->lkey, at, to_buf ? NULL : buf, to_buf ? buf : NULL,
                             k, c->l->need);
        if (err)
            return err;
        buf += k;
        n -= k;
        c->off += (uint32_t)k;
        if (c->off == s->length) {
            c->i++;
            c->off = 0;
        }
    }
    return 0;
}

/* Under qp_lock: len bytes from src's segments to dst's (both checked, dst at least len
 * long). On failure *at_dst tells which side failed: an MR deregistered in between. */
static int transfer(const struct sgl *src, const struct sgl *dst, uint64_t len, bool *at_dst)
{
    struct cursor s = { .l = src }, d = { .l = dst };

    while (len) {
        size_t n = len < sizeof(bounce) ? (size_t)len : sizeof(bounce);
        int err = cursor_move(&s, bounce, n, true);

        *at_dst = false;
        if (!err) {
            *at_dst = true;
            err = cursor_move(&d, bounce, n, false);
        }
        if (err)
            return err;
        len -= n;
    }
    return 0;
}

/* ---- the send path ---- */

/* Under qp_lock: the QP qp is connected to, if it answers: one that exists, is in RTR or
 * RTS and is connected back to qp. Anything else drops the request, and the requester
 * gives up after its retries. */
static struct snic_qp *peer_of(const struct snic_qp *qp)
{
    uint32_t num = qp->attr.dest_qp_num;
    struct snic_qp *peer;

    HASH_FIND(hh, qp_table, &num, sizeof(num), peer);
    if (!peer || (peer->attr.qp_state != IBV_QPS_RTR && peer->attr.qp_state != IBV_QPS_RTS) ||
        peer->attr.dest_qp_num != qpn(qp))
        return NULL;
    return peer;
}

static struct rq *peer_rq(struct snic_qp *peer)
{
    return peer->srq ? &peer->srq->rq : &peer->rq;
}

/* A remote range as an sgl of the peer's PD. */
static struct sgl remote_sgl(const struct snic_qp *peer, struct ibv_sge *sge,
                             const struct ibv_send_wr *wr, uint64_t len, unsigned need)
{
    *sge = (struct ibv_sge){ .addr = wr->wr.rdma.remote_addr, .length = (uint32_t)len,
                             .lkey = wr->wr.rdma.rkey };
    return (struct sgl){ .pd = peer->ex.qp_base.pd, .sge = sge, .n = 1, .need = need };
}

/* The responder refuses what its QP or the rkey's MR does not allow: it enters the error
 * state, the requester sees IBV_WC_REM_ACCESS_ERR. */
static enum ibv_wc_status remote_refused(struct snic_qp *peer)
{
    qp_error(peer);
    return IBV_WC_REM_ACCESS_ERR;
}

static enum ibv_wc_status do_write(struct snic_qp *qp, struct snic_qp *peer,
                                   const struct ibv_send_wr *wr, const struct sgl *local,
                                   uint64_t len)
{
    bool imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    struct rq *rq = peer_rq(peer);
    struct ibv_sge rsge;
    struct sgl remote = remote_sgl(peer, &rsge, wr, len, IBV_ACCESS_REMOTE_WRITE);
    uint64_t unused;
    bool at_dst;

    /* The immediate needs a receive, and none means a receiver not ready (RNR). */
    if (imm && !rq->count)
        return IBV_WC_RNR_RETRY_EXC_ERR;
    if (!(peer->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) || sgl_check(&remote, &unused))
        return remote_refused(peer);
    if (transfer(local, &remote, len, &at_dst))
        return at_dst ? remote_refused(peer) : IBV_WC_LOC_PROT_ERR;
    if (imm) {
        uint64_t wr_id = rq->wqe[rq->head].wr_id;

        rq_pop(rq);
        recv_done(peer, wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, (uint32_t)len, wr,
                  qpn(qp));
    }
    return IBV_WC_SUCCESS;
}

/* The oldest receive takes the message; a receive the message does not fit, or whose
 * sges the NIC may not write, completes in error on the responder, which enters the error
 * state, and the requester learns it from the responder's NAK. */
static enum ibv_wc_status do_send(struct snic_qp *qp, struct snic_qp *peer,
                                  const struct ibv_send_wr *wr, const struct sgl *local,
                                  uint64_t len)
{
    struct rq *rq = peer_rq(peer);
    const struct ibv_pd *rpd = peer->srq ? peer->srq->ibv.pd : peer->ex.qp_base.pd;
    enum ibv_wc_status rstatus = IBV_WC_SUCCESS, status = IBV_WC_SUCCESS;
    struct sgl dst;
    uint64_t room, wr_id;
    bool at_dst;

    if (!rq->count)
        return IBV_WC_RNR_RETRY_EXC_ERR;
    dst = (struct sgl){ .pd = rpd, .sge = rq_sges(rq, rq->head),
                        .n = rq->wqe[rq->head].num_sge, .need = IBV_ACCESS_LOCAL_WRITE };
    if (sgl_check(&dst, &room)) {
        rstatus = IBV_WC_LOC_PROT_ERR;
        status = IBV_WC_REM_OP_ERR;
    } else if (room < len) {
        rstatus = IBV_WC_LOC_LEN_ERR;
        status = IBV_WC_REM_INV_REQ_ERR;
    } else if (transfer(local, &dst, len, &at_dst)) {
        if (!at_dst)
            return IBV_WC_LOC_PROT_ERR;
        rstatus = IBV_WC_LOC_PROT_ERR;
        status = IBV_WC_REM_OP_ERR;
    }
    wr_id = rq->wqe[rq->head].wr_id;
    rq_pop(rq);
    recv_done(peer, wr_id, rstatus, IBV_WC_RECV, rstatus == IBV_WC_SUCCESS ? (uint32_t)len : 0,
              wr, qpn(qp));
    if (rstatus != IBV_WC_SUCCESS)
        qp_error(peer);
    return status;
}

static enum ibv_wc_status do_read(struct snic_qp *peer, const struct ibv_send_wr *wr,
                                  const struct sgl *local, uint64_t len)
{
    struct ibv_sge rsge;
    struct sgl remote = remote_sgl(peer, &rsge, wr, len, IBV_ACCESS_REMOTE_READ);
    uint64_t unused;
    bool at_dst;

    if (!(peer->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) || sgl_check(&remote, &unused))
        return remote_refused(peer);
    if (transfer(&remote, local, len, &at_dst))
        return at_dst ? IBV_WC_LOC_PROT_ERR : remote_refused(peer);
    return IBV_WC_SUCCESS;
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
        return IBV_WC_SEND;
    default:
        return IBV_WC_RDMA_WRITE;
    }
}

/* Under qp_lock: the request's completion, if signalled; error completions always are,
 * and leave the QP in the error state. A completion frees its request's send slot and
 * those of the unsignalled requests before it, once polled. */
static void send_done(struct snic_qp *qp, const struct ibv_send_wr *wr, enum ibv_wc_status status,
                      uint32_t byte_len)
{
    struct ibv_wc wc = { .wr_id = wr->wr_id, .status = status, .opcode = wc_opcode(wr->opcode),
                         .byte_len = byte_len, .qp_num = qpn(qp) };

    if (status == IBV_WC_SUCCESS && !(wr->send_flags & IBV_SEND_SIGNALED) && !qp->sq_sig_all) {
        qp->unsignalled++;
        return;
    }
    cq_push(qp->ex.qp_base.send_cq, &wc, &qp->sq_used, qp->unsignalled + 1);
    qp->unsignalled = 0;
    if (status != IBV_WC_SUCCESS)
        qp_error(qp);
}

/* Under qp_lock: one valid request of a QP in RTS or ERR, start to completion. The local
 * sges are checked first: a request that cannot read (or, for a READ, write) its own
 * memory never leaves the QP. */
static void send_one(struct snic_qp *qp, const struct ibv_send_wr *wr)
{
    bool read = wr->opcode == IBV_WR_RDMA_READ;
    struct sgl local = {
        .pd = wr->send_flags & IBV_SEND_INLINE ? NULL : qp->ex.qp_base.pd, .sge = wr->sg_list,
        .n = (uint32_t)wr->num_sge, .need = read ? IBV_ACCESS_LOCAL_WRITE : 0,
    };
    enum ibv_wc_status status;
    struct snic_qp *peer;
    uint64_t len = 0;

    if (qp->attr.qp_state == IBV_QPS_ERR)
        status = IBV_WC_WR_FLUSH_ERR;
    else if (sgl_check(&local, &len))
        status = IBV_WC_LOC_PROT_ERR;
    else if (len > SNIC_MAX_MSG)
        status = IBV_WC_LOC_LEN_ERR;
    else if (!(peer = peer_of(qp)))
        status = IBV_WC_RETRY_EXC_ERR;
    else if (read)
        status = do_read(peer, wr, &local, len);
    else if (wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_IMM)
        status = do_send(qp, peer, wr, &local, len);
    else
        status = do_write(qp, peer, wr, &local, len);
    send_done(qp, wr, status, read && status == IBV_WC_SUCCESS ? (uint32_t)len : 0);
}

/* The checks a provider makes at post time: a known opcode, the sge count, inline data
 * within its limit (and never for a READ, which has nothing to send). */
static int send_check(const struct snic_qp *qp, const struct ibv_send_wr *wr)
{
    uint64_t inl = 0;

    switch (wr->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ:
        break;
    default:
        return EINVAL;
    }
    if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->attr.cap.max_send_sge)
        return EINVAL;
    if (!(wr->send_flags & IBV_SEND_INLINE))
        return 0;
    for (int i = 0; i < wr->num_sge; i++)
        inl += wr->sg_list[i].length;
    return wr->opcode == IBV_WR_RDMA_READ || inl > qp->attr.cap.max_inline_data ? EINVAL : 0;
}

/* ctx->ops.post_send. Requests are taken in order until one cannot be: before RTS
 * (EINVAL), a full send queue (ENOMEM: no polled completion freed the slots), an invalid
 * request (EINVAL); *bad_wr names it and the rest are not posted. In the error state
 * requests are accepted and flushed. */
int qp_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    struct snic_qp *qp = qp_of(ibqp);
    int err = nic_inherited(qp->gen, "ibv_post_send", "QP");

    if (!err) {
        pthread_mutex_lock(&qp_lock);
        for (; wr; wr = wr->next) {
            if (qp->attr.qp_state != IBV_QPS_RTS && qp->attr.qp_state != IBV_QPS_ERR)
                err = EINVAL;
            else if (__atomic_load_n(&qp->sq_used, __ATOMIC_RELAXED) >= qp->attr.cap.max_send_wr)
                err = ENOMEM;
            else
                err = send_check(qp, wr);
            if (err)
                break;
            __atomic_add_fetch(&qp->sq_used, 1, __ATOMIC_RELAXED);
            send_one(qp, wr);
        }
        pthread_mutex_unlock(&qp_lock);
    }
    if (err)
        *bad_wr = wr;
    return err;
}

uint32_t qp_send_room(struct ibv_qp *ibqp)
{
    struct snic_qp *qp = qp_of(ibqp);

    return qp->attr.cap.max_send_wr - __atomic_load_n(&qp->sq_used, __ATOMIC_RELAXED);
}

/* ---- receives ---- */

/* ctx->ops.post_recv: from INIT on (EINVAL in RESET or with an SRQ); in the error state
 * each receive completes at once with IBV_WC_WR_FLUSH_ERR. */
int qp_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    struct snic_qp *qp = qp_of(ibqp);
    int err = nic_inherited(qp->gen, "ibv_post_recv", "QP");

    if (!err) {
        pthread_mutex_lock(&qp_lock);
        for (; wr; wr = wr->next) {
            if (qp->srq || qp->attr.qp_state == IBV_QPS_RESET)
                err = EINVAL;
            else if (qp->attr.qp_state == IBV_QPS_ERR)
                err = wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->rq.max_sge ? EINVAL : 0;
            else
                err = rq_check(&qp->rq, wr);
            if (err)
                break;
            if (qp->attr.qp_state == IBV_QPS_ERR)
                recv_done(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, NULL, 0);
            else
                rq_add(&qp->rq, wr);
        }
        pthread_mutex_unlock(&qp_lock);
    }
    if (err)
        *bad_wr = wr;
    return err;
}

/* ctx->ops.post_srq_recv; errors as rq_check. */
int srq_post_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    struct snic_srq *srq = (struct snic_srq *)ibsrq;
    int err = nic_inherited(srq->gen, "ibv_post_srq_recv", "SRQ");

    if (!err) {
        pthread_mutex_lock(&qp_lock);
        for (; wr && !(err = rq_check(&srq->rq, wr)); wr = wr->next)
            rq_add(&srq->rq, wr);
        pthread_mutex_unlock(&qp_lock);
    }
    if (err)
        *bad_wr = wr;
    return err;
}

/* ---- QPs ---- */

/* Under qp_lock: 24 bits, never 0 or 1 (a port's special QPs), never a live one. */
static uint32_t qpn_new(void)
{
    struct snic_qp *hit;
    uint32_t num;

    do {
        num = qpn_last = (qpn_last + 1) & QPN_MASK;
        HASH_FIND(hh, qp_table, &num, sizeof(num), hit);
    } while (num < 2 || hit);
    return num;
}

static int cap_check(const struct ibv_qp_init_attr_ex *attr)
{
    const struct ibv_qp_cap *c = &attr->cap;

    if (c->max_send_wr > SNIC_MAX_QP_WR || c->max_send_sge > SNIC_MAX_SGE ||
        c->max_inline_data > SNIC_MAX_INLINE)
        return EINVAL;
    if (!attr->srq && (c->max_recv_wr > SNIC_MAX_QP_WR || c->max_recv_sge > SNIC_MAX_SGE))
        return EINVAL;
    return 0;
}

/* A QP of pd as attr asks (its cap updated to what it got: at least one sge per request,
 * no receive queue with an SRQ), with builders if ex. */
static struct ibv_qp *qp_create(struct ibv_pd *pd, struct ibv_qp_init_attr_ex *attr, bool ex)
{
    struct snic_srq *srq = (struct snic_srq *)attr->srq;
    struct snic_qp *qp;
    struct ibv_qp *q;
    int err;

    pthread_once(&fork_once, qp_fork_register);
    if (attr->qp_type != IBV_QPT_RC) {
        err = EOPNOTSUPP;
        goto fail;
    }
    err = cap_check(attr);
    if (!err && srq)
        err = nic_inherited(srq->gen, "ibv_create_qp", "SRQ");
    if (!err && srq && srq->ibv.context != pd->context)
        err = EINVAL;
    if (err)
        goto fail;
    err = nic_pd_hold(pd, "ibv_create_qp");
    if (err)
        goto fail;
    err = cq_attach(attr->send_cq, pd->context, "ibv_create_qp");
    if (err)
        goto unhold_pd;
    err = cq_attach(attr->recv_cq, pd->context, "ibv_create_qp");
    if (err)
        goto detach_send;
    err = ENOMEM;
    qp = calloc(1, sizeof(*qp));
    if (!qp)
        goto detach_recv;
    if (srq) {
        attr->cap.max_recv_wr = attr->cap.max_recv_sge = 0;
    } else {
        if (!attr->cap.max_recv_sge)
            attr->cap.max_recv_sge = 1;
        if (rq_init(&qp->rq, attr->cap.max_recv_wr, attr->cap.max_recv_sge))
            goto free_qp;
    }
    if (!attr->cap.max_send_sge)
        attr->cap.max_send_sge = 1;
    qp->attr.cap = attr->cap;
    if (ex && !(qp->qpx = qpx_new(&qp->ex, &qp->attr.cap)))
        goto free_rq;
    qp->sq_sig_all = attr->sq_sig_all != 0;
    qp->srq = srq;
    qp->gen = nic_gen_now();
    q = &qp->ex.qp_base;
    q->context = pd->context;
    q->qp_context = attr->qp_context;
    q->pd = pd;
    q->send_cq = attr->send_cq;
    q->recv_cq = attr->recv_cq;
    q->srq = attr->srq;
    q->qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->mutex, NULL);
    pthread_cond_init(&q->cond, NULL);
    set_state(qp, IBV_QPS_RESET);

    pthread_mutex_lock(&qp_lock);
    if (live_qps < SNIC_MAX_QP) {
        err = 0;
        live_qps++;
        q->qp_num = q->handle = qpn_new();
        HASH_ADD(hh, qp_table, ex.qp_base.qp_num, sizeof(q->qp_num), qp);
        if (srq)
            srq->users++;
    }
    pthread_mutex_unlock(&qp_lock);
    if (!err)
        return q;

    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mutex);
    qpx_free(qp->qpx);
free_rq:
    if (!srq)
        rq_free(&qp->rq);
free_qp:
    free(qp);
detach_recv:
    cq_detach(attr->recv_cq);
detach_send:
    cq_detach(attr->send_cq);
unhold_pd:
    nic_pd_unhold(pd);
fail:
    errno = err;
    return NULL;
}

/* RC only (EOPNOTSUPP for other types); a send and a receive CQ of pd's context, an
 * optional SRQ; cap within the device's limits (EINVAL), reported back. */
SNIC_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct ibv_qp_init_attr_ex ex = { .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd };
    struct ibv_qp *qp;

    if (!pd || !attr) {
        errno = EINVAL;
        return NULL;
    }
    /* The extended attributes begin with the plain ones (verbs.h casts one to the other). */
    memcpy(&ex, attr, sizeof(*attr));
    qp = qp_create(pd, &ex, false);
    if (qp)
        attr->cap = ex.cap;
    return qp;
}

/* The verbs_context's create_qp_ex: as ibv_create_qp, plus send_ops_flags (builders for
 * RDMA WRITE[_WITH_IMM], SEND[_WITH_IMM] and RDMA READ, reached by ibv_qp_to_qp_ex). Other
 * extensions (create flags, XRC, RSS, TSO) fail EOPNOTSUPP. */
struct ibv_qp *qp_create_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr)
{
    const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                         IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                         IBV_QP_EX_WITH_RDMA_READ;
    bool ex = attr && attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    int err = 0;

    if (!attr || !(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd ||
        attr->pd->context != context)
        err = EINVAL;
    else if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ||
             (ex && attr->send_ops_flags & ~ops))
        err = EOPNOTSUPP;
    if (err) {
        errno = err;
        return NULL;
    }
    return qp_create(attr->pd, attr, ex);
}

SNIC_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    return qp_of(qp)->qpx ? &qp_of(qp)->ex : NULL;
}

struct qpx *qp_qpx(struct ibv_qp_ex *qpx)
{
    return ((struct snic_qp *)qpx)->qpx;
}

/* ib_modify_qp_is_ok's table for RC: what each transition needs and may also take. To
 * RESET or ERR takes nothing but the state; SQD and SQE are not supported. */
static const struct {
    enum ibv_qp_state cur, next;
    int req, opt;
} transitions[] = {
    { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0 },
    { IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
    { IBV_QPS_INIT, IBV_QPS_RTR,
      IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
          IBV_QP_MIN_RNR_TIMER,
      IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX },
    { IBV_QPS_RTR, IBV_QPS_RTS,
      IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
          IBV_QP_MAX_QP_RD_ATOMIC,
      IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
          IBV_QP_PATH_MIG_STATE },
    { IBV_QPS_RTS, IBV_QPS_RTS, 0,
      IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
          IBV_QP_MIN_RNR_TIMER },
};

static bool transition_ok(enum ibv_qp_state cur, enum ibv_qp_state next, int mask)
{
    int given = mask & ~IBV_QP_STATE;

    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return !given;
    for (size_t i = 0; i < sizeof(transitions) / sizeof(transitions[0]); i++)
        if (transitions[i].cur == cur && transitions[i].next == next)
            return (given & transitions[i].req) == transitions[i].req &&
                   !(given & ~(transitions[i].req | transitions[i].opt));
    return false;
}

/* The values a transition may carry: the one port and P_Key, a real MTU, reads in flight
 * within the device's limit, the current state if named. Addresses are not looked at. */
static bool values_ok(const struct snic_qp *qp, const struct ibv_qp_attr *a, int mask)
{
    return !((mask & IBV_QP_CUR_STATE && a->cur_qp_state != qp->attr.qp_state) ||
             (mask & IBV_QP_PORT && a->port_num != 1) ||
             (mask & IBV_QP_PKEY_INDEX && a->pkey_index != 0) ||
             (mask & IBV_QP_PATH_MTU &&
              (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) ||
             (mask & IBV_QP_MAX_QP_RD_ATOMIC && a->max_rd_atomic > SNIC_MAX_RD_ATOM) ||
             (mask & IBV_QP_MAX_DEST_RD_ATOMIC && a->max_dest_rd_atomic > SNIC_MAX_RD_ATOM) ||
             (mask & IBV_QP_DEST_QPN && a->dest_qp_num > QPN_MASK));
}

static void store(struct ibv_qp_attr *to, const struct ibv_qp_attr *a, int mask)
{
    if (mask & IBV_QP_ACCESS_FLAGS)
        to->qp_access_flags = a->qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX)
        to->pkey_index = a->pkey_index;
    if (mask & IBV_QP_PORT)
        to->port_num = a->port_num;
    if (mask & IBV_QP_AV)
        to->ah_attr = a->ah_attr;
    if (mask & IBV_QP_PATH_MTU)
        to->path_mtu = a->path_mtu;
    if (mask & IBV_QP_DEST_QPN)
        to->dest_qp_num = a->dest_qp_num;
    if (mask & IBV_QP_RQ_PSN)
        to->rq_psn = a->rq_psn & QPN_MASK;
    if (mask & IBV_QP_SQ_PSN)
        to->sq_psn = a->sq_psn & QPN_MASK;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
        to->max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
        to->max_rd_atomic = a->max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER)
        to->min_rnr_timer = a->min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT)
        to->timeout = a->timeout;
    if (mask & IBV_QP_RETRY_CNT)
        to->retry_cnt = a->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY)
        to->rnr_retry = a->rnr_retry;
    if (mask & IBV_QP_PATH_MIG_STATE)
        to->path_mig_state = a->path_mig_state;
    if (mask & IBV_QP_ALT_PATH) {
        to->alt_ah_attr = a->alt_ah_attr;
        to->alt_pkey_index = a->alt_pkey_index;
        to->alt_port_num = a->alt_port_num;
        to->alt_timeout = a->alt_timeout;
    }
}

/* RESET -> INIT -> RTR -> RTS with the kernel's required and allowed attributes, any
 * state -> RESET or ERR; EINVAL otherwise, nothing changed. Entering ERR flushes the
 * posted receives; RESET drops them and the completions not polled yet. */
SNIC_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask)
{
    struct snic_qp *qp = qp_of(ibqp);
    enum ibv_qp_state next;
    int err;

    if (!qp || !attr)
        return fail(EINVAL);
    err = nic_inherited(qp->gen, "ibv_modify_qp", "QP");
    if (err)
        return fail(err);
    pthread_mutex_lock(&qp_lock);
    next = attr_mask & IBV_QP_STATE ? attr->qp_state : qp->attr.qp_state;
    if (!transition_ok(qp->attr.qp_state, next, attr_mask) || !values_ok(qp, attr, attr_mask))
        err = EINVAL;
    else if (next == IBV_QPS_RESET)
        qp_reset(qp);
    else if (next == IBV_QPS_ERR)
        qp_error(qp);
    else {
        store(&qp->attr, attr, attr_mask);
        set_state(qp, next);
    }
    pthread_mutex_unlock(&qp_lock);
    return err ? fail(err) : 0;
}

/* Every attribute, whatever attr_mask asks, as providers do. */
SNIC_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
                             struct ibv_qp_init_attr *init_attr)
{
    struct snic_qp *qp = qp_of(ibqp);
    int err;

    (void)attr_mask;
    if (!qp || !attr || !init_attr)
        return fail(EINVAL);
    err = nic_inherited(qp->gen, "ibv_query_qp", "QP");
    if (err)
        return fail(err);
    pthread_mutex_lock(&qp_lock);
    *attr = qp->attr;
    attr->cur_qp_state = qp->attr.qp_state;
    *init_attr = (struct ibv_qp_init_attr){
        .qp_context = ibqp->qp_context, .send_cq = ibqp->send_cq, .recv_cq = ibqp->recv_cq,
        .srq = ibqp->srq, .cap = qp->attr.cap, .qp_type = ibqp->qp_type,
        .sq_sig_all = qp->sq_sig_all,
    };
    pthread_mutex_unlock(&qp_lock);
    return 0;
}

/* Completions of the QP not polled yet are dropped, as a provider cleans its CQs. */
SNIC_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct snic_qp *qp = qp_of(ibqp);
    int err;

    if (!qp)
        return fail(EINVAL);
    err = nic_inherited(qp->gen, "ibv_destroy_qp", "QP");
    if (err)
        return fail(err);
    pthread_mutex_lock(&qp_lock);
    HASH_DELETE(hh, qp_table, qp);
    live_qps--;
    if (qp->srq)
        qp->srq->users--;
    cq_purge(ibqp->send_cq, qpn(qp));
    cq_purge(ibqp->recv_cq, qpn(qp));
    pthread_mutex_unlock(&qp_lock);
    cq_detach(ibqp->send_cq);
    cq_detach(ibqp->recv_cq);
    nic_pd_unhold(ibqp->pd);
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    qpx_free(qp->qpx);
    if (!qp->srq)
        rq_free(&qp->rq);
    free(qp);
    return 0;
}

/* Each request is carried out whole, in order, before its completion exists. */
SNIC_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op,
                                           uint32_t flags)
{
    (void)op;
    return qp && qp->qp_type == IBV_QPT_RC && !flags;
}

/* ---- SRQs ---- */

/* max_wr 1..SNIC_MAX_QP_WR, max_sge up to SNIC_MAX_SGE (EINVAL); srq_limit starts at 0. */
SNIC_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
    struct snic_srq *srq;
    int err = EINVAL;

    pthread_once(&fork_once, qp_fork_register);
    if (!pd || !init || !init->attr.max_wr || init->attr.max_wr > SNIC_MAX_QP_WR ||
        init->attr.max_sge > SNIC_MAX_SGE)
        goto fail;
    err = nic_pd_hold(pd, "ibv_create_srq");
    if (err)
        goto fail;
    err = ENOMEM;
    srq = calloc(1, sizeof(*srq));
    if (!srq)
        goto unhold_pd;
    if (!init->attr.max_sge)
        init->attr.max_sge = 1;
    if (rq_init(&srq->rq, init->attr.max_wr, init->attr.max_sge))
        goto free_srq;
    srq->gen = nic_gen_now();
    srq->ibv.context = pd->context;
    srq->ibv.srq_context = init->srq_context;
    srq->ibv.pd = pd;
    pthread_mutex_init(&srq->ibv.mutex, NULL);
    pthread_cond_init(&srq->ibv.cond, NULL);
    pthread_mutex_lock(&qp_lock);
    if (live_srqs < SNIC_MAX_SRQ) {
        err = 0;
        live_srqs++;
        srq->ibv.handle = ++srq_handle_last;
    }
    pthread_mutex_unlock(&qp_lock);
    if (!err)
        return &srq->ibv;
    pthread_cond_destroy(&srq->ibv.cond);
    pthread_mutex_destroy(&srq->ibv.mutex);
    rq_free(&srq->rq);
free_srq:
    free(srq);
unhold_pd:
    nic_pd_unhold(pd);
fail:
    errno = err;
    return NULL;
}

/* IBV_SRQ_LIMIT only (at most max_wr); the device cannot resize an SRQ (EINVAL). */
SNIC_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int attr_mask)
{
    struct snic_srq *srq = (struct snic_srq *)ibsrq;
    int err;

    if (!srq || !attr)
        return fail(EINVAL);
    err = nic_inherited(srq->gen, "ibv_modify_srq", "SRQ");
    if (err)
        return fail(err);
    if (attr_mask & ~IBV_SRQ_LIMIT ||
        (attr_mask & IBV_SRQ_LIMIT && attr->srq_limit > srq->rq.max_wr))
        return fail(EINVAL);
    if (attr_mask & IBV_SRQ_LIMIT) {
        pthread_mutex_lock(&qp_lock);
        srq->limit = attr->srq_limit;
        pthread_mutex_unlock(&qp_lock);
    }
    return 0;
}

SNIC_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    struct snic_srq *srq = (struct snic_srq *)ibsrq;
    int err;

    if (!srq || !attr)
        return fail(EINVAL);
    err = nic_inherited(srq->gen, "ibv_query_srq", "SRQ");
    if (err)
        return fail(err);
    pthread_mutex_lock(&qp_lock);
    *attr = (struct ibv_srq_attr){ .max_wr = srq->rq.max_wr, .max_sge = srq->rq.max_sge,
                                   .srq_limit = srq->limit };
    pthread_mutex_unlock(&qp_lock);
    return 0;
}

/* EBUSY while a QP uses it, as the kernel. */
SNIC_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    struct snic_srq *srq = (struct snic_srq *)ibsrq;
    int err;

    if (!srq)
        return fail(EINVAL);
    err = nic_inherited(srq->gen, "ibv_destroy_srq", "SRQ");
    if (err)
        return fail(err);
    pthread_mutex_lock(&qp_lock);
    if (srq->users)
        err = EBUSY;
    else
        live_srqs--;
    pthread_mutex_unlock(&qp_lock);
    if (err)
        return fail(err);
    nic_pd_unhold(ibsrq->pd);
    pthread_cond_destroy(&ibsrq->cond);
    pthread_mutex_destroy(&ibsrq->mutex);
    rq_free(&srq->rq);
    free(srq);
    return 0;
}
