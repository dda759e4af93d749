/* audit.h - MRCACHE_AUDIT: the work requests the program posts, checked against the MRs
 * it holds (runtime/audit.c). Off, nothing of it runs: the gates read one word. */
#ifndef MRC_AUDIT_H
#define MRC_AUDIT_H

#include <stdint.h>

struct ibv_mr;
struct ibv_context;

/* Non-zero while audit is on: the registration gates then take their slow path. */
extern int mrc_rt_audit_on;

/* At activation, with MRCACHE_AUDIT's value (enum mrc_cfg_audit). */
void mrc_rt_audit_init(int mode);

/* A registration of the program's succeeded (any route): mr is what it got, over
 * [va, +length) at iova (what its scatter/gather entries name; va NULL for device
 * memory, whose changes nothing sees). Its context's post calls are checked from now
 * on. Not from a hook. */
void mrc_rt_audit_reg(struct ibv_mr *mr, uint64_t iova, const void *va);

/* The program's MR that mr was, with this lkey, is gone (deregistered). */
void mrc_rt_audit_dereg(const struct ibv_mr *mr, uint32_t lkey);

/* The memory [first, last] under the program's MR mr changed while it held it (cause:
 * enum mrc_inval_cause): posts through it there are reported from now on. */
void mrc_rt_audit_changed(const struct ibv_mr *mr, uint64_t first, uint64_t last, int cause);

/* ctx is being closed: its calls are no longer ours to check. */
void mrc_rt_audit_forget_context(struct ibv_context *ctx);

/* In a forked child: the parent's MRs are not its own. */
void mrc_rt_audit_child(void);

#endif
