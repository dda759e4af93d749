/* snic_priv.h - what the software NIC's files share; nothing here is exported.
 * Layers, as in rdma-core: snic_verbs.c/snic_device.c (libibverbs: argument checks, fork
 * ranges) and snic_qpx.c -> snic_qp.c (queue pairs, the data path) -> snic_cq.c
 * (completion queues) and snic_nic.c (the device: objects, keys, rights, counters) ->
 * snic_pin.c (io_uring pins and DMA). Internal calls return 0 or an errno value unless
 * stated. Lock order: qp lock before nic lock before pin lock; a CQ's lock is taken last
 * (nothing is locked under it); the fork-range lock is never nested. */
#ifndef SNIC_PRIV_H
#define SNIC_PRIV_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#define SNIC_EXPORT __attribute__((visibility("default")))

/* Resource limits the device reports and enforces. */
#define SNIC_MAX_RINGS    64u              /* io_uring instances (fds) per process */
#define SNIC_RING_SLOTS   16384u           /* the kernel's IORING_MAX_REG_BUFFERS */
#define SNIC_MAX_MR       (SNIC_MAX_RINGS * SNIC_RING_SLOTS)
#define SNIC_MAX_PD       (1u << 24)
#define SNIC_MAX_CQ       (1u << 16)
#define SNIC_MAX_CQE      (1u << 20)       /* entries of one CQ */
#define SNIC_MAX_QP       (1u << 16)
#define SNIC_MAX_SRQ      (1u << 16)
#define SNIC_MAX_QP_WR    16384u           /* per send queue, receive queue or SRQ */
#define SNIC_MAX_SGE      32u
#define SNIC_MAX_INLINE   256u             /* bytes of IBV_SEND_INLINE data per request */
#define SNIC_MAX_RD_ATOM  16u              /* stored and reported; reads never wait */
#define SNIC_MAX_MSG      (1u << 31)       /* the port's max_msg_sz */

/* One opened device. ibv_context must be a verbs_context (abi_compat, sz) so verbs.h's
 * inline extended verbs find the ops we leave NULL and fail with EOPNOTSUPP. */
struct snic_ctx {
    struct verbs_context vctx;
    unsigned long live_pds, live_cqs; /* under the nic lock */
    unsigned gen;                     /* nic generation at open; see nic_inherited() */
};

static inline struct snic_ctx *snic_ctx_of(struct ibv_context *c)
{
    return (struct snic_ctx *)((char *)c - offsetof(struct snic_ctx, vctx.context));
}

/* One stderr line "snic: ...", written with a single write(2). */
void snic_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* snic_nic.c: the device's objects. Pointer calls return NULL and set errno. */
void nic_ctx_init(struct snic_ctx *ctx);
int nic_ctx_release(struct snic_ctx *ctx); /* EBUSY while PDs remain */
struct ibv_pd *nic_alloc_pd(struct ibv_context *context);
int nic_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *nic_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
                          unsigned access);
int nic_dereg_mr(struct ibv_mr *mr);
int nic_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
                 int access);
void nic_count_iova2(void);
/* EIO, with a stderr line saying call met a what inherited across fork(), if gen is not
 * this process's NIC generation; else 0. New objects take nic_gen_now(). */
int nic_inherited(unsigned gen, const char *call, const char *what);
unsigned nic_gen_now(void);
/* A QP or SRQ holds its PD, a CQ its context: ibv_dealloc_pd and ibv_close_device fail
 * EBUSY while held. A hold on an inherited object fails EIO (nic_inherited, as call). */
int nic_pd_hold(struct ibv_pd *pd, const char *call);
void nic_pd_unhold(struct ibv_pd *pd);
int nic_ctx_hold(struct snic_ctx *ctx, const char *call);
void nic_ctx_unhold(struct snic_ctx *ctx);
/* DMA to [addr, addr+len) (iova space) through key, for snic.h's calls (pd NULL) and work
 * requests (pd: the MR must be of it): EINVAL for an unknown key, an MR of another PD or
 * a range outside the MR, EACCES without the rights need; then the DMA (exactly one of
 * src/dst), or with both NULL the checks alone. */
int nic_dma(const struct ibv_pd *pd, uint32_t key, uint64_t addr, const void *src, void *dst,
            size_t len, unsigned need);

/* snic_pin.c: pinned pages of one MR, one io_uring fixed-buffer slot per GiB. */
struct snic_pin {
    uintptr_t addr;
    size_t len;
    uint32_t nseg;
    union {
        uint32_t one;   /* nseg == 1 (no allocation, and the struct stays copyable) */
        uint32_t *many; /* nseg > 1 */
    } seg;              /* ring index << 14 | slot */
};

/* Pins [addr, addr+len) (len > 0, no wrap). ENOMEM past RLIMIT_MEMLOCK or out of slots,
 * EFAULT for unmapped or read-only memory. Needs no lock. */
int pin_range(struct snic_pin *pin, void *addr, size_t len);
/* Unpins; the pages go back to the kernel once no DMA uses them. */
void pin_release(struct snic_pin *pin);
/* DMA between the pinned pages at va (inside the pin) and src (into the pages) or dst
 * (out of them); exactly one of src/dst is non-NULL. The caller keeps the pin alive. */
int pin_dma(const struct snic_pin *pin, uintptr_t va, const void *src, void *dst,
            size_t len);
void pin_fork_prepare(void);
void pin_fork_parent(void);
void pin_fork_child(void);

/* snic_odp.c: on-demand paging, under nic_lock. A set of faulted pages starts NULL. */
struct odp_page;
void odp_caps(struct ibv_odp_caps *caps);
int odp_on(void);
int odp_check(const void *addr, size_t len); /* EOPNOTSUPP without the capability */
int odp_dma(struct odp_page **set, uintptr_t va, const void *src, void *dst, size_t len);
int odp_prefetch(struct odp_page **set, uintptr_t va, size_t len);
void odp_release(struct odp_page **set);
void odp_count_mr(int delta);
struct snic_odp_stats;
void odp_get_stats(struct snic_odp_stats *out);
void odp_fork_child(void);
/* snic_nic.c: ibv_advise_mr, the verbs_context op. */
int nic_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                  struct ibv_sge *sg_list, uint32_t num_sge);

/* snic_cq.c: completion queues (ctx->ops.poll_cq, req_notify_cq). A send completion
 * carries the sending QP's count of send slots in use and how many slots it frees when
 * polled: the send queue drains as the program polls, as on a real provider. */
int cq_poll(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int cq_req_notify(struct ibv_cq *cq, int solicited_only);
/* A QP uses cq: EINVAL unless it is a CQ of context, EIO if inherited (as call). */
int cq_attach(struct ibv_cq *cq, struct ibv_context *context, const char *call);
void cq_detach(struct ibv_cq *cq);
/* Appends wc; sq_used (or NULL) is decremented by sq_free when it is polled. A full CQ
 * drops it and is overrun from then on (stderr line; polls fail). */
void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc, uint32_t *sq_used, uint32_t sq_free);
/* Drops the completions of QP qp_num not polled yet (its destroy, or its reset). */
void cq_purge(struct ibv_cq *cq, uint32_t qp_num);

/* snic_qp.c: RC queue pairs and SRQs, connected by QP number within this process; the
 * data path runs at post time (ctx->ops.post_send, post_recv, post_srq_recv, and the
 * verbs_context's create_qp_ex). */
int qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int qp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int srq_post_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
struct ibv_qp *qp_create_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
/* For snic_qpx.c: an extended QP's builder state, and its free send slots. */
struct qpx;
struct qpx *qp_qpx(struct ibv_qp_ex *qpx);
uint32_t qp_send_room(struct ibv_qp *qp);

/* snic_qpx.c: the ibv_wr_* builders of an extended QP, set in qpx; they collect work
 * requests within cap, and wr_complete posts them all through qp_post_send or none.
 * NULL without memory. */
struct qpx *qpx_new(struct ibv_qp_ex *qpx, const struct ibv_qp_cap *cap);
void qpx_free(struct qpx *x);

/* snic_fork.c: RDMAV_FORK_SAFE / IBV_FORK_SAFE, read at the first ibv_get_device_list. */
void fork_env_init(void);

/* Exported by snic_fork.c; rdma-core declares them only in its private driver.h. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

#endif
