/* odp.h - on-demand paging in the back-end (MRCACHE_ODP): what each device supports (its
 * odp_caps, asked once per context), the implicit ODP MR of each pd, which requests ODP
 * may serve, and prefetch (MRCACHE_ODP_PREFETCH). Never for read-only or device memory,
 * never beyond what the device reports. Not from a hook. */
#ifndef MRC_ODP_H
#define MRC_ODP_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include "core/events.h"
#include "util/report.h"

/* At start-up: the mode (enum mrc_cfg_odp) and whether to prefetch. */
void mrc_odp_init(int mode, int prefetch);

/* The first try of a miss (any mode but off: the device's capabilities are asked at its
 * context's first miss). Under MRCACHE_ODP=implicit: 1 and *mr the pd's implicit ODP MR
 * (registered at its first use; a reference taken) if it can serve this local-only
 * request (iova == addr, no remote right, memory ODP can serve); else 0. */
int mrc_odp_implicit_get(struct ibv_pd *pd, uint64_t addr, uint64_t iova, uint32_t access, struct mrc_range *r,
                         struct ibv_mr **mr);

/* 1 if mr is an implicit ODP MR: its reference is dropped (it stays registered until
 * its pd is flushed or the process exits); 0 for any other MR. */
int mrc_odp_implicit_put(struct ibv_mr *mr);

/* Whether a request that could not be pinned may be registered on demand: the mode
 * allows it, the device supports ODP for each right access asks for (RC transport), and
 * the memory is ODP's to serve. */
int mrc_odp_fallback_ok(struct ibv_pd *pd, uint32_t access, struct mrc_range *r);

/* A registration served by an ODP MR: asks the device to fault [iova, iova+len) in, for
 * writing if access lets the NIC write, asynchronously (no flush). Unless
 * MRCACHE_ODP_PREFETCH=0 or the device has no advise_mr. */
void mrc_odp_prefetch(struct ibv_pd *pd, uint32_t lkey, uint64_t iova, uint64_t len, uint32_t access);

/* Deregisters pd's implicit MR if nothing holds it (before ibv_dealloc_pd). */
void mrc_odp_release_pd(struct ibv_pd *pd);
/* The same for every pd (exit). */
void mrc_odp_release_all(void);
/* ctx is being closed: its capabilities are forgotten (a new context may get its address). */
void mrc_odp_forget_context(struct ibv_context *ctx);
/* A forked child: the implicit MRs are the parent's; forgotten, never deregistered. */
void mrc_odp_child_reset(void);

/* The mode's name and what the devices asked so far support, for the statistics. */
const char *mrc_odp_mode_name(void);
unsigned mrc_odp_devices(struct mrc_report_odp_dev *out, unsigned max);

#endif
