/* snic_priv.h - what the software NIC's files share; nothing here is exported.
 * Layers, as in rdma-core: snic_verbs.c/snic_device.c (libibverbs: argument checks, fork
 * ranges) -> snic_nic.c (the device: objects, keys, rights, counters) -> snic_pin.c
 * (io_uring pins and DMA). Internal calls return 0 or an errno value unless stated.
 * Lock order: nic lock before pin lock; the fork-range lock is never nested. */
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

/* One opened device. ibv_context must be a verbs_context (abi_compat, sz) so verbs.h's
 * inline extended verbs find the ops we leave NULL and fail with EOPNOTSUPP. */
struct snic_ctx {
    struct verbs_context vctx;
    unsigned long live_pds; /* under the nic lock */
    unsigned gen;           /* nic generation at open; see nic_inherited() */
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

/* snic_fork.c: RDMAV_FORK_SAFE / IBV_FORK_SAFE, read at the first ibv_get_device_list. */
void fork_env_init(void);

/* Exported by snic_fork.c; rdma-core declares them only in its private driver.h. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

#endif
