/* bench_audit.c - what MRCACHE_AUDIT=warn costs a post, over the device's loopback QP
 * pair: the post call alone (ibv_post_recv of one scatter/gather entry into an MR of 64
 * buffers the program holds; the queue flushed between batches, untimed), and a whole
 * message (a 64-byte RDMA WRITE, signalled, polled). Prints "recv_post_ns N write_ns M",
 * medians of ROUNDS rounds; the A/B pairing is the caller's (audit-bench alternates
 * processes with and without). Usage: bench_audit [POSTS] */
#include <stdio.h>

#include "common.h"

#define ROUNDS 9
#define LEN 64
#define BATCH 512   /* receives posted between resets */

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    unsigned posts = argc > 1 ? (unsigned)atoi(argv[1]) : 51200;
    struct rdma_loop lp;
    open_nic();
    if (rdma_loop_open(&lp, pd, test_gid_index()) != 0) {
        printf("post_ns skipped: the device has no loopback RC queue pairs\n");
        return 0;
    }
    char *src = map_anon(NULL, 64 * 4096, 0), *dst = map_anon(NULL, 4096, 0);
    memset(src, 1, 64 * 4096);
    struct ibv_mr *smr = ibv_reg_mr(pd, src, 64 * 4096, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!smr || !dmr) {
        fprintf(stderr, "cannot register\n");
        return 2;
    }
    /* A QP of its own for the receives: a deep queue, emptied by a reset between batches. */
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = lp.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 1;
    qa.cap.max_recv_wr = BATCH;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    struct ibv_qp *rq = ibv_create_qp(pd, &qa);
    if (!rq) {
        perror("ibv_create_qp");
        return 2;
    }
    uint64_t rns[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t spent = 0;
        for (unsigned done = 0; done < posts;) {
            struct ibv_qp_attr at = { .qp_state = IBV_QPS_RESET };
            ibv_modify_qp(rq, &at, IBV_QP_STATE);
            memset(&at, 0, sizeof(at));
            at.qp_state = IBV_QPS_INIT;
            at.port_num = 1;
            at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
            if (ibv_modify_qp(rq, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
                return 1;
            uint64_t t0 = rdma_loop_now_ns();
            for (unsigned k = 0; k < BATCH && done < posts; k++, done++) {
                struct ibv_sge sge = { (uintptr_t)(src + (done % 64) * 4096), LEN, smr->lkey };
                struct ibv_recv_wr wr = { .wr_id = done, .sg_list = &sge, .num_sge = 1 }, *bad;
                if (ibv_post_recv(rq, &wr, &bad))
                    return 1;
            }
            spent += rdma_loop_now_ns() - t0;
        }
        rns[r] = spent / posts;
    }
    ibv_destroy_qp(rq);
    uint64_t ns[ROUNDS];
    posts /= 256;   /* whole messages cost far more */
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = rdma_loop_now_ns();
        for (unsigned i = 0; i < posts; i++)
            if (rdma_loop_write(&lp, smr->lkey, src + (i % 64) * 4096, (uintptr_t)dst, dmr->rkey, LEN) != 0)
                return 1;
        ns[r] = (rdma_loop_now_ns() - t0) / posts;
    }
    qsort(ns, ROUNDS, sizeof(ns[0]), cmp);
    qsort(rns, ROUNDS, sizeof(rns[0]), cmp);
    printf("recv_post_ns %llu write_ns %llu\n", (unsigned long long)rns[ROUNDS / 2], (unsigned long long)ns[ROUNDS / 2]);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    rdma_loop_close(&lp);
    return 0;
}
