/* rdma_loop.h - a loopback RC QP pair on a real verbs device (rxe in the VM): two QPs of
 * one PD, connected to each other through the port's own GID, so an RDMA WRITE posted on
 * qp[0] goes through the provider's whole data path into memory registered in that PD.
 * Header-only, static functions; shared by test/vm/vm_stale_mr.c and test/lib/common.h.
 * Calls return 0 or -1 with the reason on stderr; nothing here allocates after open. */
#ifndef MRC_TEST_RDMA_LOOP_H
#define MRC_TEST_RDMA_LOOP_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The rights the loop's target QP grants: what an RDMA WRITE or READ into the PD needs. */
#define RDMA_LOOP_QP_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct rdma_loop {
    struct ibv_pd *pd;          /* the caller's: MRs written through the loop must be in it */
    struct ibv_cq *cq;          /* both QPs' send and receive completions */
    struct ibv_qp *qp[2];       /* qp[0] posts, qp[1] is the target */
    union ibv_gid gid;
    struct ibv_port_attr port;
    int gid_index;
};

static inline uint64_t rdma_loop_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int rdma_loop_connect(struct rdma_loop *l, struct ibv_qp *qp, uint32_t dest_qpn)
{
    struct ibv_qp_attr a;
    int rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = RDMA_LOOP_QP_ACCESS;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc)
        return rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = l->port.active_mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    /* RoCE: addressed by GID (our own: loopback), no LID. */
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = l->gid;
    a.ah_attr.grh.sgid_index = (uint8_t)l->gid_index;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.dlid = l->port.lid;
    a.ah_attr.port_num = 1;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        return rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                 IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Destroys what rdma_loop_open created (not the PD); returns the first error (an errno
 * value), so a teardown test can assert it. Safe on a partly opened or zeroed loop. */
static inline int rdma_loop_close(struct rdma_loop *l)
{
    int i, rc, first = 0;

    for (i = 0; i < 2; i++)
        if (l->qp[i] && (rc = ibv_destroy_qp(l->qp[i])) != 0) {
            fprintf(stderr, "ibv_destroy_qp: %s\n", strerror(rc));
            first = first ? first : rc;
        }
    if (l->cq && (rc = ibv_destroy_cq(l->cq)) != 0) {
        fprintf(stderr, "ibv_destroy_cq: %s\n", strerror(rc));
        first = first ? first : rc;
    }
    memset(l, 0, sizeof(*l));
    return first;
}

/* Creates and connects the QP pair in pd on port 1 of its device; the port must be ACTIVE.
 * On failure nothing stays allocated. */
static inline int rdma_loop_open(struct rdma_loop *l, struct ibv_pd *pd, int gid_index)
{
    struct ibv_qp_init_attr qa;
    int i, rc;

    memset(l, 0, sizeof(*l));
    l->pd = pd;
    l->gid_index = gid_index;
    if ((rc = ibv_query_port(pd->context, 1, &l->port)) != 0) {
        fprintf(stderr, "ibv_query_port: %s\n", strerror(rc));
        return -1;
    }
    if (l->port.state != IBV_PORT_ACTIVE) {
        fprintf(stderr, "%s port 1 is not ACTIVE (state %d)\n",
                ibv_get_device_name(pd->context->device), l->port.state);
        return -1;
    }
    if (ibv_query_gid(pd->context, 1, gid_index, &l->gid)) {
        perror("ibv_query_gid");
        return -1;
    }
    l->cq = ibv_create_cq(pd->context, 16, NULL, NULL, 0);
    if (!l->cq) {
        perror("ibv_create_cq");
        goto err_close;
    }
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = l->cq;
    qa.recv_cq = l->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    for (i = 0; i < 2; i++) {
        l->qp[i] = ibv_create_qp(pd, &qa);
        if (!l->qp[i]) {
            perror("ibv_create_qp");
            goto err_close;
        }
    }
    for (i = 0; i < 2; i++) {
        rc = rdma_loop_connect(l, l->qp[i], l->qp[1 - i]->qp_num);
        if (rc) {
            fprintf(stderr, "connecting QP %d: %s\n", i, strerror(rc));
            goto err_close;
        }
    }
    return 0;

err_close:
    rdma_loop_close(l);
    return -1;
}

/* One signalled RDMA WRITE (or READ) of len bytes between local (registered in the
 * loop's PD, lkey) and remote_addr in the MR with rkey, waiting up to 10 s for its
 * completion. Returns 0, or the failed completion's status (an ibv_wc_status > 0; the QP
 * is then in the error state and the loop must be reopened), or -1 if nothing completed
 * or posting failed. */
static inline int rdma_loop_rdma(struct rdma_loop *l, enum ibv_wr_opcode op, uint32_t lkey, const void *local,
                                 uint64_t remote_addr, uint32_t rkey, size_t len)
{
    struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey };
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc;
    uint64_t deadline = rdma_loop_now_ns() + 10ull * 1000000000u;
    const char *name = op == IBV_WR_RDMA_READ ? "RDMA READ" : "RDMA WRITE";
    int n, rc;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    if ((rc = ibv_post_send(l->qp[0], &wr, &bad)) != 0) {
        fprintf(stderr, "ibv_post_send: %s\n", strerror(rc));
        return -1;
    }
    do {
        n = ibv_poll_cq(l->cq, 1, &wc);
    } while (n == 0 && rdma_loop_now_ns() < deadline);
    if (n <= 0) {
        fprintf(stderr, "no completion for the %s (%d)\n", name, n);
        return -1;
    }
    if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "%s completed with %s\n", name, ibv_wc_status_str(wc.status));
        return (int)wc.status;
    }
    return 0;
}

static inline int rdma_loop_write(struct rdma_loop *l, uint32_t lkey, const void *src, uint64_t remote_addr,
                                  uint32_t rkey, size_t len)
{
    return rdma_loop_rdma(l, IBV_WR_RDMA_WRITE, lkey, src, remote_addr, rkey, len);
}

static inline int rdma_loop_read(struct rdma_loop *l, uint32_t lkey, void *dst, uint64_t remote_addr, uint32_t rkey,
                                 size_t len)
{
    return rdma_loop_rdma(l, IBV_WR_RDMA_READ, lkey, dst, remote_addr, rkey, len);
}

#endif
