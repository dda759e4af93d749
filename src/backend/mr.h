/* mr.h - the MR handles libmrcache gives callers, and the logic behind the interposed
 * ibv_reg_mr family, ibv_dereg_mr, ibv_rereg_mr, ibv_dealloc_pd and ibv_close_device.
 * Each function follows the errno contract of the verbs call it implements. */
#ifndef MRC_MR_H
#define MRC_MR_H

#include <stdint.h>

struct ibv_pd;
struct ibv_mr;
struct ibv_context;

/* ibv_reg_mr_iova2 semantics: an MR for [addr, addr+len) at iova, or NULL + errno. */
struct ibv_mr *mrc_on_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access);
struct ibv_mr *mrc_on_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                    int access);
/* 0 or an errno value. */
int mrc_on_dereg_mr(struct ibv_mr *mr);
int mrc_on_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access);
int mrc_on_dealloc_pd(struct ibv_pd *pd);
int mrc_on_close_device(struct ibv_context *ctx);

/* Handles live in this pool (mr.c); fork marks the older ones as the parent's. */
void mrc_mr_init(void);

#endif
