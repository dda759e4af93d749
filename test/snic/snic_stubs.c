/* snic_stubs.c - the exported libibverbs calls the software NIC does not implement
 * (completion channels and events, CQ resizing, address handles, multicast, import, ECE,
 * the kernel-ABI copy helpers): they exist so that any program linked against the real
 * library loads, and each call fails loudly: one stderr line naming it, then the call's
 * own error (NULL/-1 with errno, or the errno value) EOPNOTSUPP.
 * Stubs ignore their arguments by design. */
#include <errno.h>

#include "snic_priv.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"

static void unsupported(const char *call)
{
    snic_log("%s is not implemented by the software NIC (EOPNOTSUPP)", call);
    errno = EOPNOTSUPP;
}

#define FAIL_NULL() do { unsupported(__func__); return NULL; } while (0)
#define FAIL_ERRNO() do { unsupported(__func__); return EOPNOTSUPP; } while (0)
#define FAIL_MINUS1() do { unsupported(__func__); return -1; } while (0)

/* rdma-core's historical helpers for its other libraries (librdmacm links them). */
struct ib_uverbs_qp_attr;
struct ib_uverbs_ah_attr;
struct ib_user_path_rec;
struct ibv_sa_path_rec;
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

SNIC_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
    unsupported(__func__);
}

SNIC_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
    unsupported(__func__);
}

SNIC_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst,
                                             struct ib_user_path_rec *src)
{
    unsupported(__func__);
}

SNIC_EXPORT void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst,
                                           struct ibv_sa_path_rec *src)
{
    unsupported(__func__);
}

SNIC_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    FAIL_NULL();
}

SNIC_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    FAIL_ERRNO();
}

SNIC_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    FAIL_MINUS1();
}

SNIC_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
    unsupported(__func__);
}

SNIC_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    FAIL_ERRNO();
}

SNIC_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                                 void **cq_context)
{
    FAIL_MINUS1();
}

SNIC_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    unsupported(__func__);
}

SNIC_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    FAIL_NULL();
}

SNIC_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    FAIL_ERRNO();
}

SNIC_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num,
                                    struct ibv_wc *wc, struct ibv_grh *grh,
                                    struct ibv_ah_attr *ah_attr)
{
    FAIL_MINUS1();
}

SNIC_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                                 struct ibv_grh *grh, uint8_t port_num)
{
    FAIL_NULL();
}

SNIC_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                            uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
    FAIL_ERRNO();
}

SNIC_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    FAIL_ERRNO();
}

SNIC_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    FAIL_ERRNO();
}

SNIC_EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
    FAIL_NULL();
}

SNIC_EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
    FAIL_NULL();
}

SNIC_EXPORT void ibv_unimport_pd(struct ibv_pd *pd)
{
    unsupported(__func__);
}

SNIC_EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
    FAIL_NULL();
}

SNIC_EXPORT void ibv_unimport_mr(struct ibv_mr *mr)
{
    unsupported(__func__);
}

SNIC_EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
    FAIL_NULL();
}

SNIC_EXPORT void ibv_unimport_dm(struct ibv_dm *dm)
{
    unsupported(__func__);
}

SNIC_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    FAIL_ERRNO();
}

SNIC_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    FAIL_ERRNO();
}
