/* odp.c - on-demand paging in the back-end: each context's odp_caps (asked once, through
 * the driver's query_device_ex op), one implicit ODP MR per pd with the count of cache
 * entries it serves, the checks that decide what ODP may serve, and prefetch.
 * Invariants: the tables' lock is never held across a NIC call (registrations race and
 * the loser deregisters its own); an implicit MR is deregistered only while no entry
 * holds it; a right is served on demand only where the device reports ODP for it. */
#include <pthread.h>
#include <string.h>

#include "backend/odp.h"
#include "util/config.h"
#include "util/log.h"
#include "util/real.h"
#include "util/stats.h"

#define MAX_DEVS 16
#define MAX_PDS 64

/* The flags an ODP registration may carry: rights, and relaxed ordering (a hint). */
#define ODP_FLAGS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
                   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING)
#define IMPLICIT_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND)

/* Each device asked, for the statistics; ctx NULL once closed (a new context of the
 * same device and capabilities takes its record again). */
static struct {
    struct ibv_context *ctx;
    char name[64];
    struct ibv_odp_caps caps;
} devs[MAX_DEVS];
static unsigned ndevs;

static struct {
    struct ibv_pd *pd;
    struct ibv_mr *mr;   /* NULL with refused set: the NIC would not make it */
    uint64_t refs;
    int refused;
} pds[MAX_PDS];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int mode, prefetch;

static const char *const mode_names[] = { "off", "fallback", "implicit" };   /* enum mrc_cfg_odp */

void mrc_odp_init(int m, int p)
{
    mode = m;
    prefetch = p;
}

const char *mrc_odp_mode_name(void)
{
    return mode_names[mode];
}

/* Says once per device what it supports, and why a mode asked for stays off there. */
static void caps_log(const char *name, const struct ibv_odp_caps *c)
{
    MRC_INFO("%s: odp_caps general %#llx, rc %#x, uc %#x, ud %#x", name, (unsigned long long)c->general_caps,
             c->per_transport_caps.rc_odp_caps, c->per_transport_caps.uc_odp_caps,
             c->per_transport_caps.ud_odp_caps);
    if (mode != MRC_CFG_ODP_OFF && !(c->general_caps & IBV_ODP_SUPPORT))
        MRC_WARN("MRCACHE_ODP=%s: %s has no on-demand paging; its registrations are pinned, as with off",
                 mode_names[mode], name);
    else if (mode == MRC_CFG_ODP_IMPLICIT && !(c->general_caps & IBV_ODP_SUPPORT_IMPLICIT))
        MRC_WARN("MRCACHE_ODP=implicit: %s has no implicit on-demand paging; its registrations are pinned, "
                 "on demand only where pinning fails", name);
}

/* ctx's capabilities: asked of the driver the first time (none if it cannot say). */
static struct ibv_odp_caps caps_of(struct ibv_context *ctx)
{
    struct ibv_odp_caps c;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < ndevs; i++)
        if (devs[i].ctx == ctx) {
            c = devs[i].caps;
            pthread_mutex_unlock(&lock);
            return c;
        }
    pthread_mutex_unlock(&lock);

    /* verbs.h's inline ibv_query_device_ex would fall back to the exported
     * ibv_query_device, which reports no odp_caps anyway. */
    struct ibv_device_attr_ex attr;
    memset(&attr, 0, sizeof(attr));
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_device_ex);
    if (!vctx || vctx->query_device_ex(ctx, NULL, &attr, sizeof(attr)) != 0)
        memset(&attr, 0, sizeof(attr));
    c = attr.odp_caps;

    char name[64] = "?";
    if (ctx->device)
        memcpy(name, ctx->device->name, sizeof(name) - 1);
    int fresh = 0;
    pthread_mutex_lock(&lock);
    unsigned i = 0;
    while (i < ndevs && devs[i].ctx != ctx &&
           (devs[i].ctx || strcmp(devs[i].name, name) || memcmp(&devs[i].caps, &c, sizeof(c))))
        i++;
    if (i == ndevs && ndevs < MAX_DEVS) {
        memcpy(devs[ndevs].name, name, sizeof(name));
        devs[ndevs].caps = c;
        fresh = 1;
        ndevs++;
    }
    if (i < ndevs && !devs[i].ctx)
        devs[i].ctx = ctx;
    pthread_mutex_unlock(&lock);
    if (fresh)
        caps_log(name, &c);
    return c;
}

/* What an RC QP needs of the device to use an MR with these rights on demand: sends read
 * it; receives (and READ responses) write it; a peer's WRITE, READ, ATOMIC. */
static uint32_t rc_needs(uint32_t access)
{
    uint32_t n = IBV_ODP_SUPPORT_SEND;
    if (access & IBV_ACCESS_LOCAL_WRITE)
        n |= IBV_ODP_SUPPORT_RECV;
    if (access & IBV_ACCESS_REMOTE_WRITE)
        n |= IBV_ODP_SUPPORT_WRITE;
    if (access & IBV_ACCESS_REMOTE_READ)
        n |= IBV_ODP_SUPPORT_READ;
    if (access & IBV_ACCESS_REMOTE_ATOMIC)
        n |= IBV_ODP_SUPPORT_ATOMIC;
    return n;
}

static int supports(const struct ibv_odp_caps *c, uint64_t general, uint32_t access)
{
    uint32_t need = rc_needs(access);
    return (c->general_caps & general) == general && (c->per_transport_caps.rc_odp_caps & need) == need;
}

int mrc_odp_fallback_ok(struct ibv_pd *pd, uint32_t access, struct mrc_range *r)
{
    if (mode == MRC_CFG_ODP_OFF || (access & ~(uint32_t)ODP_FLAGS))
        return 0;
    struct ibv_odp_caps c = caps_of(pd->context);
    return supports(&c, IBV_ODP_SUPPORT, access) && mrc_range_ask(r, MRC_RANGE_PAGEABLE)->pageable;
}

/* Under the lock: pd's slot, a free one (pd NULL) if it has none, or -1. */
static int slot_of(const struct ibv_pd *pd)
{
    int free_slot = -1;
    for (int i = 0; i < MAX_PDS; i++) {
        if (pds[i].pd == pd)
            return i;
        if (!pds[i].pd && free_slot < 0)
            free_slot = i;
    }
    return free_slot;
}

/* Under the lock: a reference on pd's implicit MR, if there is one. */
static struct ibv_mr *implicit_ref_locked(const struct ibv_pd *pd, int *refused)
{
    int i = slot_of(pd);
    *refused = i < 0 || (pds[i].pd == pd && pds[i].refused);
    if (i < 0 || pds[i].pd != pd || !pds[i].mr)
        return NULL;
    pds[i].refs++;
    return pds[i].mr;
}

int mrc_odp_implicit_get(struct ibv_pd *pd, uint64_t addr, uint64_t iova, uint32_t access, struct mrc_range *r,
                         struct ibv_mr **mr)
{
    if (mode == MRC_CFG_ODP_OFF)
        return 0;
    struct ibv_odp_caps c = caps_of(pd->context);   /* known from the context's first miss */
    if (mode != MRC_CFG_ODP_IMPLICIT || iova != addr || (access & ~(uint32_t)IBV_ACCESS_LOCAL_WRITE) ||
        !supports(&c, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT, IBV_ACCESS_LOCAL_WRITE) ||
        !mrc_range_ask(r, MRC_RANGE_PAGEABLE)->pageable)
        return 0;
    int refused;
    pthread_mutex_lock(&lock);
    *mr = implicit_ref_locked(pd, &refused);
    pthread_mutex_unlock(&lock);
    if (*mr || refused)
        return *mr != NULL;

    /* The first for this pd: registered outside the lock, kept unless another thread's
     * won meanwhile. */
    struct ibv_mr *made = mrc_real.reg_mr_iova2(pd, NULL, SIZE_MAX, 0, IMPLICIT_ACCESS);
    struct ibv_mr *extra = NULL;
    pthread_mutex_lock(&lock);
    *mr = implicit_ref_locked(pd, &refused);
    int i = slot_of(pd);
    if (*mr || i < 0) {
        extra = made;
    } else {
        pds[i].pd = pd;
        pds[i].mr = made;
        pds[i].refs = made != NULL;
        pds[i].refused = made == NULL;
        *mr = made;
    }
    pthread_mutex_unlock(&lock);
    if (!made)
        MRC_INFO("%s: the implicit ODP MR was refused (%s); registrations are pinned",
                 pd->context->device ? pd->context->device->name : "?", strerror(errno));
    if (extra)
        mrc_real.dereg_mr(extra);
    return *mr != NULL;
}

int mrc_odp_implicit_put(struct ibv_mr *mr)
{
    if (mode != MRC_CFG_ODP_IMPLICIT)
        return 0;
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_PDS && !found; i++)
        if (pds[i].mr == mr) {
            pds[i].refs--;
            found = 1;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

/* Deregisters the idle implicit MRs of pd (NULL: of every pd). */
static void release(const struct ibv_pd *pd)
{
    struct ibv_mr *idle[MAX_PDS];
    unsigned n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_PDS; i++)
        if (pds[i].pd && (!pd || pds[i].pd == pd) && !pds[i].refs) {
            if (pds[i].mr)
                idle[n++] = pds[i].mr;
            memset(&pds[i], 0, sizeof(pds[i]));
        }
    pthread_mutex_unlock(&lock);
    for (unsigned i = 0; i < n; i++)
        mrc_real.dereg_mr(idle[i]);
}

void mrc_odp_release_pd(struct ibv_pd *pd)
{
    if (mode == MRC_CFG_ODP_IMPLICIT)
        release(pd);
}

void mrc_odp_release_all(void)
{
    if (mode == MRC_CFG_ODP_IMPLICIT)
        release(NULL);
}

void mrc_odp_forget_context(struct ibv_context *ctx)
{
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < ndevs; i++)
        if (devs[i].ctx == ctx)
            devs[i].ctx = NULL;
    pthread_mutex_unlock(&lock);
}

void mrc_odp_child_reset(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&lock, &fresh, sizeof(lock));
    memset(pds, 0, sizeof(pds));
}

void mrc_odp_prefetch(struct ibv_pd *pd, uint32_t lkey, uint64_t iova, uint64_t len, uint32_t access)
{
    if (!prefetch)
        return;
    struct verbs_context *vctx = verbs_get_ctx_op(pd->context, advise_mr);
    if (!vctx)
        return;
    enum ibv_advise_mr_advice advice = access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                                           ? IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
                                           : IBV_ADVISE_MR_ADVICE_PREFETCH;
    /* An sge holds 32 bits of length: 1 GiB pieces. Advice only: a refusal changes
     * nothing but the first access's cost. */
    while (len) {
        uint64_t piece = len < (1ull << 30) ? len : 1ull << 30;
        struct ibv_sge sge = { .addr = iova, .length = (uint32_t)piece, .lkey = lkey };
        if (vctx->advise_mr(pd, advice, 0, &sge, 1))
            return;
        iova += piece;
        len -= piece;
    }
    mrc_stat_add(MRC_STAT_ODP_PREFETCHES, 1);
}

unsigned mrc_odp_devices(struct mrc_report_odp_dev *out, unsigned max)
{
    unsigned n = 0;
    pthread_mutex_lock(&lock);
    for (; n < ndevs && n < max; n++) {
        memcpy(out[n].name, devs[n].name, sizeof(out[n].name));
        out[n].general = devs[n].caps.general_caps;
        out[n].rc = devs[n].caps.per_transport_caps.rc_odp_caps;
        out[n].uc = devs[n].caps.per_transport_caps.uc_odp_caps;
        out[n].ud = devs[n].caps.per_transport_caps.ud_odp_caps;
    }
    pthread_mutex_unlock(&lock);
    return n;
}
