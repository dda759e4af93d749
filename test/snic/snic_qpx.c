/* snic_qpx.c - the ibv_wr_* builders of an extended QP (struct ibv_qp_ex, rdma-core's
 * layout): between wr_start and wr_complete they collect requests as mlx5's do, each one
 * taking qp->wr_id and qp->wr_flags when its opcode is given and its data from the setter
 * that follows (inline data is copied at once). wr_complete posts them all through
 * qp_post_send, or none: not if a builder found an error (the first is kept and returned)
 * or they do not fit in the send queue; wr_abort drops them. As on any provider, one
 * thread builds on a QP at a time. Invariants: n <= cap.max_send_wr; slot i's request
 * points at its own sges or its own inline copy. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "snic_priv.h"

struct slot {
    struct ibv_send_wr wr;
    struct ibv_sge inl_sge; /* the inline data, as one segment of host memory */
};

struct qpx {
    struct ibv_qp_cap cap;
    struct slot *slot;    /* cap.max_send_wr */
    struct ibv_sge *sge;  /* cap.max_send_sge per slot */
    char *inl;            /* cap.max_inline_data per slot */
    uint32_t n;           /* requests collected since wr_start */
    int err;              /* the first builder error since wr_start */
};

static void latch(struct qpx *x, int err)
{
    if (!x->err)
        x->err = err;
}

static void x_start(struct ibv_qp_ex *q)
{
    struct qpx *x = qp_qpx(q);

    x->n = 0;
    x->err = 0;
}

/* A new request, or NULL (ENOMEM kept) beyond the send queue's size. */
static struct ibv_send_wr *x_new(struct ibv_qp_ex *q, enum ibv_wr_opcode opcode)
{
    struct qpx *x = qp_qpx(q);
    struct ibv_send_wr *wr;

    if (x->n == x->cap.max_send_wr) {
        latch(x, ENOMEM);
        return NULL;
    }
    wr = &x->slot[x->n].wr;
    *wr = (struct ibv_send_wr){ .wr_id = q->wr_id, .send_flags = q->wr_flags, .opcode = opcode,
                                .sg_list = x->sge + (size_t)x->n * x->cap.max_send_sge };
    x->n++;
    return wr;
}

/* The request the data setters fill: the last one begun; none (EINVAL kept) before the
 * first, and after an error nothing is filled: it is all dropped anyway. */
static struct slot *x_cur(struct qpx *x)
{
    if (!x->n)
        latch(x, EINVAL);
    return x->err ? NULL : &x->slot[x->n - 1];
}

static void x_rdma(struct ibv_qp_ex *q, enum ibv_wr_opcode opcode, uint32_t rkey,
                   uint64_t remote_addr, __be32 imm)
{
    struct ibv_send_wr *wr = x_new(q, opcode);

    if (wr) {
        wr->wr.rdma.rkey = rkey;
        wr->wr.rdma.remote_addr = remote_addr;
        wr->imm_data = imm;
    }
}

static void x_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr)
{
    x_rdma(q, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void x_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr,
                             __be32 imm)
{
    x_rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr, imm);
}

static void x_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t remote_addr)
{
    x_rdma(q, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void x_send(struct ibv_qp_ex *q)
{
    x_new(q, IBV_WR_SEND);
}

static void x_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
    struct ibv_send_wr *wr = x_new(q, IBV_WR_SEND_WITH_IMM);

    if (wr)
        wr->imm_data = imm;
}

static void x_set_sge_list(struct ibv_qp_ex *q, size_t num_sge, const struct ibv_sge *sg_list)
{
    struct qpx *x = qp_qpx(q);
    struct slot *s = x_cur(x);

    if (s && num_sge > x->cap.max_send_sge)
        latch(x, EINVAL);
    if (!s || x->err)
        return;
    s->wr.sg_list = x->sge + (size_t)(s - x->slot) * x->cap.max_send_sge;
    if (num_sge)
        memcpy(s->wr.sg_list, sg_list, num_sge * sizeof(*sg_list));
    s->wr.num_sge = (int)num_sge;
    s->wr.send_flags &= ~(unsigned)IBV_SEND_INLINE;
}

static void x_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
    const struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

    x_set_sge_list(q, 1, &sge);
}

/* Copies the buffers now, as a provider writes them into the WQE; a READ has no data to
 * send (EINVAL), and more than cap.max_inline_data bytes is EINVAL. */
static void x_set_inline_data_list(struct ibv_qp_ex *q, size_t num_buf,
                                   const struct ibv_data_buf *buf_list)
{
    struct qpx *x = qp_qpx(q);
    struct slot *s = x_cur(x);
    size_t len = 0;
    char *to;

    for (size_t i = 0; s && i < num_buf; i++)
        len += buf_list[i].length;
    if (s && (len > x->cap.max_inline_data || s->wr.opcode == IBV_WR_RDMA_READ))
        latch(x, EINVAL);
    if (!s || x->err)
        return;
    to = x->inl + (size_t)(s - x->slot) * x->cap.max_inline_data;
    s->inl_sge = (struct ibv_sge){ .addr = (uintptr_t)to, .length = (uint32_t)len };
    for (size_t i = 0; i < num_buf; to += buf_list[i++].length)
        memcpy(to, buf_list[i].addr, buf_list[i].length);
    s->wr.sg_list = &s->inl_sge;
    s->wr.num_sge = 1;
    s->wr.send_flags |= IBV_SEND_INLINE;
}

static void x_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
    const struct ibv_data_buf buf = { .addr = addr, .length = length };

    x_set_inline_data_list(q, 1, &buf);
}

/* 0, the first builder error, ENOMEM if the send queue has no room for them all, or
 * what qp_post_send refuses at the first request (a QP not in RTS: EINVAL). */
static int x_complete(struct ibv_qp_ex *q)
{
    struct qpx *x = qp_qpx(q);
    struct ibv_send_wr *bad;
    int err = x->err;

    if (!err && x->n > qp_send_room(&q->qp_base))
        err = ENOMEM;
    if (!err && x->n) {
        for (uint32_t i = 0; i < x->n; i++)
            x->slot[i].wr.next = i + 1 < x->n ? &x->slot[i + 1].wr : NULL;
        /* The post itself, not ctx->ops.post_send: an interposer wrapping the ops sees
         * the builders' calls, not the same requests a second time. */
        err = qp_post_send(&q->qp_base, &x->slot[0].wr, &bad);
    }
    x->n = 0;
    x->err = 0;
    return err;
}

static void x_abort(struct ibv_qp_ex *q)
{
    x_start(q);
}

struct qpx *qpx_new(struct ibv_qp_ex *q, const struct ibv_qp_cap *cap)
{
    size_t slots = cap->max_send_wr ? cap->max_send_wr : 1;
    struct qpx *x = calloc(1, sizeof(*x));

    if (!x)
        return NULL;
    x->cap = *cap;
    x->slot = calloc(slots, sizeof(*x->slot));
    x->sge = calloc(slots * cap->max_send_sge, sizeof(*x->sge));
    x->inl = malloc(slots * (cap->max_inline_data ? cap->max_inline_data : 1));
    if (!x->slot || !x->sge || !x->inl) {
        qpx_free(x);
        return NULL;
    }
    q->wr_start = x_start;
    q->wr_complete = x_complete;
    q->wr_abort = x_abort;
    q->wr_rdma_write = x_rdma_write;
    q->wr_rdma_write_imm = x_rdma_write_imm;
    q->wr_rdma_read = x_rdma_read;
    q->wr_send = x_send;
    q->wr_send_imm = x_send_imm;
    q->wr_set_sge = x_set_sge;
    q->wr_set_sge_list = x_set_sge_list;
    q->wr_set_inline_data = x_set_inline_data;
    q->wr_set_inline_data_list = x_set_inline_data_list;
    return x;
}

void qpx_free(struct qpx *x)
{
    if (!x)
        return;
    free(x->slot);
    free(x->sge);
    free(x->inl);
    free(x);
}
