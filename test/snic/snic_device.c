/* snic_device.c - the one device "snic0": device list, contexts, device/port/GID/P_Key
 * attributes, sysfs helpers. A context's legacy ops are the data path (poll_cq,
 * req_notify_cq, post_send, post_recv, post_srq_recv: snic_cq.c, snic_qp.c) and it is a
 * verbs_context with only query_port, query_device_ex, advise_mr and create_qp_ex set, so
 * verbs.h's other inline verbs fail EOPNOTSUPP. The device is static; a context owns one
 * eventfd as cmd_fd and async_fd (never ready: no async events). One port (1), one GID,
 * one P_Key. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "snic_priv.h"

#undef ibv_query_port

#define SNIC_GUID    0x5e1c000000000001ULL
#define DEFAULT_PKEY 0xffff

/* From rdma-core's private driver.h, for ibv_devinfo. */
enum ibv_gid_type_sysfs {
    IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
    IBV_GID_TYPE_SYSFS_ROCE_V2,
};
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
                       enum ibv_gid_type_sysfs *type);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

/* The sysfs paths name a device that cannot exist, so reads through them fail cleanly
 * even on a host with real RDMA devices. */
static struct ibv_device snic_dev = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "snic0",
    .dev_name = "snic_uverbs0",
    .dev_path = "/sys/class/infiniband_verbs/snic_uverbs0",
    .ibdev_path = "/sys/class/infiniband/snic0",
};

SNIC_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    static pthread_once_t env_once = PTHREAD_ONCE_INIT;
    struct ibv_device **list;

    if (num_devices)
        *num_devices = 0;
    pthread_once(&env_once, fork_env_init);
    list = calloc(2, sizeof(*list));
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    list[0] = &snic_dev;
    if (num_devices)
        *num_devices = 1;
    return list;
}

SNIC_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

SNIC_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

SNIC_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
    return device == &snic_dev ? htobe64(SNIC_GUID) : 0;
}

SNIC_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
    return device == &snic_dev ? 0 : -1;
}

static void device_attr(struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "1.0 (software NIC)");
    a->node_guid = a->sys_image_guid = htobe64(SNIC_GUID);
    a->max_mr_size = UINT64_MAX;
    a->page_size_cap = ~(uint64_t)(getpagesize() - 1);
    a->hw_ver = 1;
    a->max_mr = (int)SNIC_MAX_MR;
    a->max_pd = (int)SNIC_MAX_PD;
    a->max_qp = (int)SNIC_MAX_QP;
    a->max_qp_wr = (int)SNIC_MAX_QP_WR;
    a->max_sge = a->max_sge_rd = (int)SNIC_MAX_SGE;
    a->max_cq = (int)SNIC_MAX_CQ;
    a->max_cqe = (int)SNIC_MAX_CQE;
    a->max_qp_rd_atom = a->max_qp_init_rd_atom = (int)SNIC_MAX_RD_ATOM;
    a->max_res_rd_atom = (int)(SNIC_MAX_RD_ATOM * SNIC_MAX_QP);
    a->max_srq = (int)SNIC_MAX_SRQ;
    a->max_srq_wr = (int)SNIC_MAX_QP_WR;
    a->max_srq_sge = (int)SNIC_MAX_SGE;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_pkeys = 1;
    a->phys_port_cnt = 1;
}

static int ctx_query_device_ex(struct ibv_context *context,
                               const struct ibv_query_device_ex_input *input,
                               struct ibv_device_attr_ex *attr, size_t attr_size)
{
    (void)context;
    if ((input && input->comp_mask) || attr_size < sizeof(attr->orig_attr))
        return EINVAL;
    memset(attr, 0, attr_size);
    device_attr(&attr->orig_attr);
    if (attr_size >= offsetof(struct ibv_device_attr_ex, odp_caps) + sizeof(attr->odp_caps))
        odp_caps(&attr->odp_caps);
    return 0;
}

/* Returns 0 or an errno value. */
SNIC_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr_out)
{
    if (!context || !device_attr_out)
        return EINVAL;
    device_attr(device_attr_out);
    return 0;
}

static int port_attr(uint8_t port, struct ibv_port_attr *p)
{
    if (port != 1)
        return EINVAL;
    memset(p, 0, sizeof(*p));
    p->state = IBV_PORT_ACTIVE;
    p->max_mtu = p->active_mtu = IBV_MTU_4096;
    p->gid_tbl_len = 1;
    p->max_msg_sz = SNIC_MAX_MSG;
    p->pkey_tbl_len = 1;
    p->lid = p->sm_lid = 1;
    p->max_vl_num = 1;
    p->active_width = 2;  /* 4X */
    p->active_speed = 32; /* EDR */
    p->phys_state = 5;    /* LinkUp */
    p->link_layer = IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

/* Callers built with other verbs.h versions pass their own struct size. */
static int ctx_query_port(struct ibv_context *context, uint8_t port_num,
                          struct ibv_port_attr *attr, size_t len)
{
    struct ibv_port_attr full;
    int err = port_attr(port_num, &full);

    (void)context;
    if (err)
        return err;
    memcpy(attr, &full, len < sizeof(full) ? len : sizeof(full));
    if (len > sizeof(full))
        memset((char *)attr + sizeof(full), 0, len - sizeof(full));
    return 0;
}

/* The exported symbol fills rdma-core's _compat_ibv_port_attr: the fields up to flags.
 * verbs.h's inline ibv_query_port reaches ctx_query_port directly instead. */
SNIC_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                               struct _compat_ibv_port_attr *port_attr_out)
{
    return ctx_query_port(context, port_num, (struct ibv_port_attr *)port_attr_out,
                          offsetof(struct ibv_port_attr, port_cap_flags2));
}

static union ibv_gid port_gid(void)
{
    union ibv_gid gid;

    gid.global.subnet_prefix = htobe64(0xfe80000000000000ULL);
    gid.global.interface_id = htobe64(SNIC_GUID);
    return gid;
}

/* Returns 0 or an errno value. */
SNIC_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num,
                                  uint32_t gid_index, struct ibv_gid_entry *entry,
                                  uint32_t flags, size_t entry_size)
{
    (void)context;
    if (flags || port_num != 1 || gid_index != 0 || entry_size < sizeof(*entry))
        return EINVAL;
    memset(entry, 0, entry_size);
    entry->gid = port_gid();
    entry->port_num = 1;
    entry->gid_type = IBV_GID_TYPE_IB;
    return 0;
}

/* Returns the number of entries or a negative errno value. */
SNIC_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context,
                                         struct ibv_gid_entry *entries, size_t max_entries,
                                         uint32_t flags, size_t entry_size)
{
    int err = max_entries ? _ibv_query_gid_ex(context, 1, 0, entries, flags, entry_size) : EINVAL;

    return err ? -err : 1;
}

/* Returns 0 or -1 with errno. */
SNIC_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                              union ibv_gid *gid)
{
    (void)context;
    if (port_num != 1 || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *gid = port_gid();
    return 0;
}

SNIC_EXPORT int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num,
                                   unsigned int index, enum ibv_gid_type_sysfs *type)
{
    (void)context;
    if (port_num != 1 || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
    return 0;
}

/* Returns 0 or -1 with errno. */
SNIC_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
                               __be16 *pkey)
{
    (void)context;
    if (port_num != 1 || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(DEFAULT_PKEY);
    return 0;
}

/* The index of pkey, or -1 (rdma-core's scan ends on the first failed query). */
SNIC_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
    (void)context;
    return port_num == 1 && pkey == htobe16(DEFAULT_PKEY) ? 0 : -1;
}

SNIC_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct snic_ctx *ctx;
    struct ibv_context *c;
    int fd;

    if (device != &snic_dev) {
        errno = ENODEV;
        return NULL;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        errno = ENOMEM;
        return NULL;
    }
    fd = eventfd(0, EFD_CLOEXEC);
    if (fd < 0) {
        free(ctx);
        return NULL;
    }
    c = &ctx->vctx.context;
    c->device = device;
    c->cmd_fd = c->async_fd = fd;
    c->num_comp_vectors = 1;
    pthread_mutex_init(&c->mutex, NULL);
    c->ops.poll_cq = cq_poll;
    c->ops.req_notify_cq = cq_req_notify;
    c->ops.post_send = qp_post_send;
    c->ops.post_recv = qp_post_recv;
    c->ops.post_srq_recv = srq_post_recv;
    c->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->vctx.sz = sizeof(ctx->vctx);
    ctx->vctx.query_port = ctx_query_port;
    ctx->vctx.query_device_ex = ctx_query_device_ex;
    ctx->vctx.advise_mr = nic_advise_mr;
    ctx->vctx.create_qp_ex = qp_create_ex;
    nic_ctx_init(ctx);
    return c;
}

/* EBUSY while PDs or CQs remain: stricter than rdma-core, whose kernel tears everything
 * down on close, so leaked PDs, MRs, CQs and QPs show up in tests. */
SNIC_EXPORT int ibv_close_device(struct ibv_context *context)
{
    struct snic_ctx *ctx;
    int err;

    if (!context) {
        errno = EINVAL;
        return EINVAL;
    }
    ctx = snic_ctx_of(context);
    err = nic_ctx_release(ctx);
    if (err) {
        errno = err;
        return err;
    }
    close(context->async_fd);
    pthread_mutex_destroy(&context->mutex);
    free(ctx);
    return 0;
}

static char sysfs_path[IBV_SYSFS_PATH_MAX] = "/sys";

/* rdma-core honours SYSFS_PATH unless running setuid. */
static void sysfs_path_init(void)
{
    const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
    size_t len;

    if (!env)
        return;
    snprintf(sysfs_path, sizeof(sysfs_path), "%s", env);
    len = strlen(sysfs_path);
    while (len > 0 && sysfs_path[len - 1] == '/')
        sysfs_path[--len] = '\0';
}

SNIC_EXPORT const char *ibv_get_sysfs_path(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, sysfs_path_init);
    return sysfs_path;
}

/* The length read, newline stripped and NUL-terminated, or -1. */
SNIC_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
    char path[PATH_MAX];
    ssize_t len;
    int fd;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path))
        return -1;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    len = read(fd, buf, size);
    close(fd);
    if (len > 0) {
        if (buf[len - 1] == '\n')
            buf[--len] = '\0';
        else if ((size_t)len < size)
            buf[len] = '\0';
        else
            return -1; /* no room for the terminator */
    }
    return (int)len;
}
