/* verbs_entry.c - the process's gates in front of the verbs front-end: a call reaches the
 * cache only once libmrcache is ready, caching is on and the call can be cached, and
 * never in a child that has not yet forgotten its parent's cache; the first one starts
 * what a cache in use needs; a pending MRCACHE_DUMP_SIGNAL dump is
 * written here, outside any hook. Invariants: every function keeps the errno contract
 * of the verbs call it implements; ibv_reg_mr (1.1) and ibv_reg_mr_iova re-enter
 * through ibv_reg_mr_iova2@plt inside libibverbs, and such a call goes straight on. */
#include <errno.h>
#include <infiniband/verbs.h>

#include "backend/odp.h"
#include "backend/verbs_ops.h"
#include "runtime/audit.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/dumpsig.h"
#include "util/hot.h"
#include "util/real.h"
#include "verbs/mr.h"

/* Everything but a cacheable registration on a ready cache in use: passes through or
 * starts what the first one needs. Out of line, so that the usual call's gate needs no
 * stack frame of its own. */
static struct ibv_mr *reg_route(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access)
{
    if (mrc_real_verbs()) {
        errno = ENOSYS;
        return NULL;
    }
    if (!mrc_ready() && !mrc_verbs_in_reg())
        mrc_rt_activate();   /* libibverbs came with a plugin: the first registration starts it all */
    if (!mrc_ready() || mrc_verbs_in_reg())
        return mrc_real.reg_mr_iova2(pd, addr, len, iova, access);
    if (!__atomic_load_n(&mrc_rt.cfg.enable, __ATOMIC_RELAXED)) {
        /* Caching stopped while running: what reaches the NIC is still counted. */
        if (__atomic_load_n(&mrc_rt.caching_off, __ATOMIC_RELAXED))
            return mrc_verbs_reg_uncached(pd, addr, len, iova, access);
        return mrc_real.reg_mr_iova2(pd, addr, len, iova, access);
    }
    mrc_rt_fork_check();
    if (!pd || !addr || !len || !mrc_backend_cacheable(access))
        return mrc_verbs_reg_uncached(pd, addr, len, iova, access);
    if (!__atomic_load_n(&mrc_rt.cache.active, __ATOMIC_RELAXED))
        mrc_rt_first_registration();   /* also in a forked child, whose cache starts unused */
    if (mrc_rt_ns_any())
        mrc_rt_namespaces_look();      /* another namespace's libc, before anything is served */
    mrc_dumpsig_poll();
    return mrc_verbs_reg_mr(&mrc_rt.verbs, pd, addr, len, iova, access);
}

static __attribute__((noinline, cold)) struct ibv_mr *reg_gated(struct ibv_pd *pd, void *addr, size_t len,
                                                                 uint64_t iova, unsigned int access)
{
    struct ibv_mr *mr = reg_route(pd, addr, len, iova, access);
    if (mr && __atomic_load_n(&mrc_rt_audit_on, __ATOMIC_ACQUIRE) && !mrc_verbs_in_reg())
        mrc_rt_audit_reg(mr, iova, addr);
    return mr;
}

MRC_HOT struct ibv_mr *mrc_rt_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access,
                                     const void *caller)
{
    mrc_verbs_tls_caller = caller;
    if (__builtin_expect(__atomic_load_n(&mrc_real_verbs_ready, __ATOMIC_ACQUIRE) && mrc_ready() &&
                             __atomic_load_n(&mrc_rt.cfg.enable, __ATOMIC_RELAXED) && !mrc_verbs_in_reg() &&
                             *__atomic_load_n(&mrc_rt_mark, __ATOMIC_RELAXED) && pd && addr && len &&
                             mrc_backend_cacheable(access) && __atomic_load_n(&mrc_rt.cache.active, __ATOMIC_RELAXED) &&
                             !__atomic_load_n(&mrc_dumpsig_flag, __ATOMIC_RELAXED) && !mrc_rt_ns_any() &&
                             !__atomic_load_n(&mrc_rt_audit_on, __ATOMIC_RELAXED),
                         1))
        return mrc_verbs_reg_mr(&mrc_rt.verbs, pd, addr, len, iova, access);
    return reg_gated(pd, addr, len, iova, access);
}

struct ibv_mr *mrc_rt_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                    int access)
{
    if (mrc_real_verbs()) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    struct ibv_mr *mr = mrc_verbs_reg_dmabuf_mr(pd, offset, len, iova, fd, access, mrc_ready());
    if (mr && __atomic_load_n(&mrc_rt_audit_on, __ATOMIC_ACQUIRE))
        mrc_rt_audit_reg(mr, iova, NULL);
    return mr;
}

static int dereg_route(struct ibv_mr *mr)
{
    if (!mr)
        return EINVAL;
    if (mrc_real_verbs())
        return ENOSYS;
    if (!mrc_ready())
        return mrc_verbs_dereg_mr(NULL, mr);
    mrc_rt_fork_check();
    mrc_dumpsig_poll();
    return mrc_verbs_dereg_mr(&mrc_rt.verbs, mr);
}

static __attribute__((noinline, cold)) int dereg_gated(struct ibv_mr *mr)
{
    if (!mr || !__atomic_load_n(&mrc_rt_audit_on, __ATOMIC_ACQUIRE))
        return dereg_route(mr);
    uint32_t lkey = mr->lkey;   /* the handle may be reused once it is gone */
    int rc = dereg_route(mr);
    if (!rc)
        mrc_rt_audit_dereg(mr, lkey);
    return rc;
}

MRC_HOT int mrc_rt_dereg_mr(struct ibv_mr *mr)
{
    if (__builtin_expect(mr && __atomic_load_n(&mrc_real_verbs_ready, __ATOMIC_ACQUIRE) && mrc_ready() &&
                             *__atomic_load_n(&mrc_rt_mark, __ATOMIC_RELAXED) &&
                             !__atomic_load_n(&mrc_dumpsig_flag, __ATOMIC_RELAXED) &&
                             !__atomic_load_n(&mrc_rt_audit_on, __ATOMIC_RELAXED),
                         1))
        return mrc_verbs_dereg_mr(&mrc_rt.verbs, mr);
    return dereg_gated(mr);
}

int mrc_rt_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access)
{
    if (mrc_real_verbs() || !mrc_real.rereg_mr) {
        errno = ENOSYS;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (mrc_ready())
        mrc_rt_fork_check();
    uint32_t lkey = mr ? mr->lkey : 0;
    int rc = mrc_verbs_rereg_mr(mrc_ready() ? &mrc_rt.verbs : NULL, mr, flags, pd, addr, len, access);
    /* Changed or not, the MR is what it says now (a failed rereg may have changed it);
     * one refused as input (a deregistered handle, say) is not the program's. */
    if (mr && rc != IBV_REREG_MR_ERR_INPUT && __atomic_load_n(&mrc_rt_audit_on, __ATOMIC_ACQUIRE)) {
        mrc_rt_audit_dereg(mr, lkey);
        mrc_rt_audit_reg(mr, (uintptr_t)mr->addr, mr->addr);
    }
    return rc;
}

int mrc_rt_dealloc_pd(struct ibv_pd *pd)
{
    if (mrc_real_verbs())
        return ENOSYS;
    if (mrc_ready()) {
        mrc_rt_fork_check();
        mrc_verbs_flush_pd(&mrc_rt.verbs, pd);
    }
    return mrc_real.dealloc_pd(pd);
}

int mrc_rt_close_device(struct ibv_context *ctx)
{
    if (mrc_real_verbs())
        return ENOSYS;
    if (mrc_ready()) {
        mrc_rt_fork_check();
        mrc_verbs_flush_context(&mrc_rt.verbs, ctx);
        mrc_odp_forget_context(ctx);   /* the device's capabilities, known from its first miss */
    }
    if (__atomic_load_n(&mrc_rt_audit_on, __ATOMIC_ACQUIRE))
        mrc_rt_audit_forget_context(ctx);
    return mrc_real.close_device(ctx);
}
