/* snic.h - test-only API of the software NIC (build/snic/libibverbs.so.1, node SNIC_1.0):
 * the "remote peer" and "local DMA engine" of a NIC, plus its counters; its verbs also
 * give loopback RC queue pairs whose data path is the same (see "Queue pairs" below).
 * Data moves into and out of the MR's pinned pages (io_uring fixed buffers), never
 * through the process page tables, so an MR whose memory was unmapped still hits the old
 * pages. Addresses are in the MR's iova space. Every call returns 0 or an errno value. */
#ifndef SNIC_H
#define SNIC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Environment, read once at load:
 *   SNIC_REG_COST_NS="FIXED[,PER_BYTE]"  every registration takes at least FIXED +
 *       PER_BYTE * length ns in total (busy wait), e.g. "16000,0.06" (UCX's NIC model);
 *       default 0; a bad value is reported on stderr once and ignored.
 *   SNIC_COPY_ON_FORK=0|1  ibv_is_fork_initialized() says IBV_FORK_UNNEEDED (1, default:
 *       true of io_uring pins on this kernel) or reports ibv_fork_init's state (0).
 *   RDMAV_FORK_SAFE / IBV_FORK_SAFE  as in rdma-core: ibv_fork_init() at the first
 *       ibv_get_device_list(), then registered pages are MADV_DONTFORK.
 *   SNIC_FAIL_REG / SNIC_FAIL_DEREG="ERR[:COUNT]"  arm the failure injector at load, as
 *       snic_fail_reg/snic_fail_dereg(ERR, COUNT) below: ERR an errno name (EBUSY, EIO,
 *       ENOMEM, EAGAIN, EFAULT, EINVAL, EPERM, EACCES) or number, COUNT a number or
 *       "always" (default 1); e.g. SNIC_FAIL_DEREG=EBUSY:3. A bad value is reported on
 *       stderr once and ignored.
 *   SNIC_ODP=0|explicit|implicit  on-demand paging (default 0: none, IBV_ACCESS_ON_DEMAND
 *       fails EOPNOTSUPP): ibv_query_device_ex reports odp_caps (explicit: IBV_ODP_SUPPORT,
 *       implicit: also IBV_ODP_SUPPORT_IMPLICIT, so ibv_reg_mr(pd, NULL, SIZE_MAX, ...ON_DEMAND)
 *       registers the whole address space). An ODP MR pins nothing (not in pinned_bytes,
 *       VmPin or RLIMIT_MEMLOCK); its DMA goes through the page tables at the time of the
 *       access, so it follows remaps (an unmapped page or a write to a read-only one fails
 *       EFAULT), and ibv_advise_mr prefetches pages into it.
 *   SNIC_ODP_FAULT_NS=N  the first access to each page of an ODP MR that no prefetch
 *       brought in takes N ns more (busy wait; default 0), a page fault's cost.
 *
 * Queue pairs: RC only, looped back within the process (RTR's dest_qp_num names the peer
 * QP, which must be in RTR or RTS and connected back, else the requester completes with
 * IBV_WC_RETRY_EXC_ERR). ibv_create_cq/destroy_cq, ctx->ops.poll_cq and req_notify_cq
 * (accepted, no events); ibv_create_qp and create_qp_ex (send_ops_flags for RDMA WRITE
 * [WITH_IMM], SEND[_WITH_IMM], RDMA READ: the ibv_wr_* builders of ibv_qp_to_qp_ex),
 * ibv_modify_qp with the kernel's RC transition table (RESET, INIT, RTR, RTS, ERR; port 1,
 * P_Key index 0), ibv_query_qp, ibv_destroy_qp; SRQs (ibv_create/query/destroy_srq,
 * ibv_modify_srq of IBV_SRQ_LIMIT only); ops.post_send, post_recv (from INIT on),
 * post_srq_recv. Each work request is carried out whole when posted: local sges through
 * their lkeys' pinned pages (LOCAL_WRITE for a READ's), the remote range through the rkey
 * with REMOTE_WRITE/REMOTE_READ granted by both the MR and the target QP; a key must name
 * an MR of its QP's PD (an lkey the requester's, an rkey or a receive's lkey the target's,
 * an SRQ's receives the SRQ's); IBV_SEND_INLINE reads the sge addresses themselves (up
 * to max_inline_data). A SEND or WRITE_WITH_IMM takes the target's (or its SRQ's) oldest
 * receive. Errors as a NIC reports them: a bad local sge
 * IBV_WC_LOC_PROT_ERR; a bad rkey, range or right IBV_WC_REM_ACCESS_ERR (the target QP
 * enters ERR too); no receive IBV_WC_RNR_RETRY_EXC_ERR at once, whatever rnr_retry; a
 * receive too small IBV_WC_LOC_LEN_ERR there and IBV_WC_REM_INV_REQ_ERR here, a receive
 * sge it may not write IBV_WC_LOC_PROT_ERR there and IBV_WC_REM_OP_ERR here. Error
 * completions come even unsignalled and leave the QP in ERR, where receives are flushed
 * (IBV_WC_WR_FLUSH_ERR) and later requests complete flushed. Posting fails EINVAL (with
 * *bad_wr) before RTS, for an unknown opcode, too many sges, too much inline data or an
 * inline READ, and ENOMEM on a full queue: a send slot is freed only when a completion at
 * or after it is polled, so a program must signal at least every max_send_wr requests.
 * RESET and ibv_destroy_qp drop the QP's completions not yet polled. Not supported: other
 * QP types, atomics, memory windows, SQD, completion channels and events (a channel
 * passed to ibv_create_cq is EINVAL), ibv_create_cq_ex, ibv_resize_cq, async events (so no
 * SRQ limit event), SRQ resizing. A CQ that overflows loses the completion, says so on
 * stderr once and fails every later poll with EOVERFLOW. Limits in ibv_query_device
 * (max_qp, max_qp_wr, max_sge, max_cqe, max_srq...); max_inline_data at most 256.
 *
 * fork(): the child gets a fresh NIC (own io_uring, opened lazily; counters at zero). It
 * may open the device, allocate PDs, register its own memory and use snic_* on its own
 * keys. The parent's keys are unknown to it (EINVAL); verbs on objects it inherited
 * (alloc_pd or create_cq on a context, reg/dealloc or create_qp/create_srq on a PD,
 * dereg/rereg of an MR, any verb on a CQ, QP or SRQ, posting and polling included) fail
 * with EIO and a stderr line, and never touch the parent's MRs; the parent's QPs are no
 * peers of the child's; ibv_close_device on an inherited context only frees the child's
 * copy. The parent is never affected by what the child does.
 *
 * Differences from a real NIC: memory must be writable (io_uring pins for write, so a
 * read-only mapping fails EFAULT even for a read-only MR); a THP-backed page is charged
 * to VmPin/RLIMIT_MEMLOCK whole; RLIMIT_MEMLOCK is charged per user, not per process;
 * ibv_close_device fails EBUSY while PDs or CQs remain, ibv_dealloc_pd while MRs, QPs or
 * SRQs do (rdma-core's kernel would clean up on close); work requests complete when
 * posted, in order, one at a time process-wide (no overlap, no timing); an ODP MR's
 * pages fault in once and stay in (no invalidation when memory is unmapped), and
 * ibv_rereg_mr of an ODP MR fails EOPNOTSUPP. */

/* A peer's RDMA WRITE of len bytes from src to [remote_addr, +len) of the MR with this
 * rkey. EINVAL: unknown or deregistered key, or range outside the MR; EACCES: the MR
 * lacks IBV_ACCESS_REMOTE_WRITE. */
int snic_rdma_write(uint32_t rkey, uint64_t remote_addr, const void *src, size_t len);

/* A peer's RDMA READ; needs IBV_ACCESS_REMOTE_READ. Errors as snic_rdma_write. */
int snic_rdma_read(uint32_t rkey, uint64_t remote_addr, void *dst, size_t len);

/* The NIC writing into local memory (a receive, a READ response) through an lkey;
 * needs IBV_ACCESS_LOCAL_WRITE. Errors as snic_rdma_write. */
int snic_local_write(uint32_t lkey, uint64_t addr, const void *src, size_t len);

/* The NIC reading local memory (a send) through an lkey; always allowed. */
int snic_local_read(uint32_t lkey, uint64_t addr, void *dst, size_t len);

/* Counters since the library was loaded; a forked child starts from zero (its NIC is
 * fresh: inherited objects fail EIO there, the parent's are untouched).
 * reg_calls/dereg_calls count MRs created/destroyed (successful calls only; rereg is
 * neither); iova2_entries counts every entry into ibv_reg_mr_iova2, including the PLT
 * re-entry from ibv_reg_mr and ibv_reg_mr_iova; pinned_bytes is the sum of the page spans
 * of the live MRs, what ib_umem_get adds to VmPin (io_uring charges a whole transparent
 * huge page for any part of it, so VmPin can exceed it for THP-backed memory);
 * pinned_peak is its maximum since snic_reset_peak. */
struct snic_stats {
    uint64_t live_mrs, live_pds, reg_calls, dereg_calls, iova2_entries, pinned_bytes,
        pinned_peak;
};

void snic_get_stats(struct snic_stats *out);

/* Restart pinned_peak from the current pinned_bytes. */
void snic_reset_peak(void);

/* Failure injection below any interposer (a cache in front of libibverbs cannot tell it
 * from the device): the next n calls fail with err, an errno value > 0, as the device
 * would refuse them. snic_fail_dereg: ibv_dereg_mr of a live MR fails (as with memory
 * windows still bound: EBUSY, or a dead device: EIO); the MR stays registered, pinned and
 * usable, and a later ibv_dereg_mr of it may succeed. snic_fail_reg: every ibv_reg_mr
 * variant fails after its argument checks, before pinning anything (rereg is never
 * affected). n = SNIC_FAIL_ALWAYS fails every call until disarmed; n = 0 disarms (err is
 * then ignored). Returns 0, or EINVAL for err <= 0 with n > 0. A forked child's NIC
 * starts disarmed, its counts at zero. */
#define SNIC_FAIL_ALWAYS UINT32_MAX
int snic_fail_reg(int err, uint32_t n);
int snic_fail_dereg(int err, uint32_t n);

/* The injector's state: failures still armed (SNIC_FAIL_ALWAYS if unbounded) and failures
 * injected since load, so a test can tell that its precondition happened. */
struct snic_faults {
    uint64_t reg_armed, reg_injected, dereg_armed, dereg_injected;
};

void snic_get_faults(struct snic_faults *out);

/* On-demand paging (SNIC_ODP): ODP MRs live now and made since load, page faults taken
 * by DMA (each paying SNIC_ODP_FAULT_NS), pages brought in by prefetch instead, and
 * ibv_advise_mr calls that reached the device. A forked child starts from zero. */
struct snic_odp_stats {
    uint64_t live_odp_mrs, odp_regs, faults, prefetched, advise_calls;
};

void snic_get_odp_stats(struct snic_odp_stats *out);

/* For tests: this process's VmPin (/proc/self/status) in kB, what the software NIC's
 * MRs pin; -1 if absent. */
static inline long snic_vmpin_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;

    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmPin:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

#endif
