/* snic_nic.c - the device: PDs, MRs and keys, the kernel's access checks, the cost model
 * (SNIC_REG_COST_NS, SNIC_SLOW_REG), the failure injector (snic_fail_*, SNIC_FAIL_*),
 * counters, the DMA of snic.h's calls and of work requests, and ibv_advise_mr.
 * Invariants (nic_lock): an MR is in mr_table iff live and, unless ODP, pinned (a refused
 * dereg leaves it so); live_pds/live_mrs/live_cqs/holds count live children; pinned_bytes
 * sums the page spans of the pinned MRs in mr_table; an object with gen != nic_gen was
 * inherited (nic_fork_child). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "snic.h"
#include "snic_priv.h"

/* The key table allocates on insert; running out of memory there is not survivable. */
#define uthash_fatal(msg) (snic_log("key table: %s", msg), abort())
#include <uthash.h>

/* Access bits the kernel knows (ib_check_mr_access). FLUSH_GLOBAL/PERSISTENT (1<<8, 1<<9,
 * kernel 6.2) postdate rdma-core 44's headers; like most devices this one has neither. */
#define ACCESS_FLUSH (1u << 8 | 1u << 9)
#define ACCESS_KNOWN (((1u << 10) - 1) | IBV_ACCESS_OPTIONAL_RANGE)

struct snic_pd {
    struct ibv_pd ibv; /* first: the ibv_pd we hand out */
    struct snic_ctx *ctx;
    unsigned long live_mrs;
    unsigned long holds; /* QPs and SRQs (nic_pd_hold) */
    unsigned gen;
};

struct snic_mr {
    struct ibv_mr ibv; /* first: the ibv_mr we hand out */
    struct snic_pd *pd;
    uint64_t iova;
    unsigned access;
    unsigned gen;
    uint32_t key; /* lkey == rkey; never reused while 2^32 others are handed out */
    bool odp;     /* pins nothing: pin.addr/len only bound it, faulted holds its pages */
    struct snic_pin pin;
    struct odp_page *faulted;
    UT_hash_handle hh; /* mr_table, by key */
};

static pthread_mutex_t nic_lock = PTHREAD_MUTEX_INITIALIZER;
static struct snic_mr *mr_table;
static uint32_t key_last, pd_handle_last;
static struct snic_stats stats; /* all but iova2_entries, which is counted unlocked */
static atomic_uint_fast64_t iova2_entries;
static unsigned nic_gen;

static bool cost_on;
static uint64_t cost_fixed_ns;
static double cost_ns_per_byte;
/* SNIC_SLOW_REG="N:NS": the N-th registration (from 1) takes NS more, an outlier. */
static uint64_t slow_nth, slow_ns;
static atomic_uint_fast64_t regs_timed;

/* One kind of injected failure (under nic_lock): the next 'armed' calls fail with err. */
struct fault {
    int err;
    uint32_t armed;     /* SNIC_FAIL_ALWAYS: until disarmed */
    uint64_t injected;
};
static struct fault fault_reg, fault_dereg;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* SNIC_REG_COST_NS="FIXED[,PER_BYTE]" in ns, read once at load. */
static void cost_parse(void)
{
    const char *env = getenv("SNIC_REG_COST_NS");
    double fixed, per = 0;
    char *end;
    bool ok;

    if (!env)
        return;
    errno = 0;
    fixed = strtod(env, &end);
    ok = end != env;
    if (ok && *end == ',') {
        const char *p = end + 1;

        per = strtod(p, &end);
        ok = end != p;
    }
    ok = ok && *end == '\0' && !errno && isfinite(fixed) && isfinite(per) && fixed >= 0 &&
         per >= 0 && fixed < 1e12 && per < 1e6;
    if (!ok) {
        snic_log("SNIC_REG_COST_NS=\"%s\" is not FIXED[,PER_BYTE] in ns (e.g. 16000,0.06; "
                 "0 <= FIXED < 1e12, 0 <= PER_BYTE < 1e6); registrations cost nothing extra",
                 env);
        return;
    }
    cost_fixed_ns = (uint64_t)fixed;
    cost_ns_per_byte = per;
    cost_on = fixed > 0 || per > 0;
}

static void slow_parse(void)
{
    const char *env = getenv("SNIC_SLOW_REG");
    char *end;

    if (!env)
        return;
    slow_nth = strtoull(env, &end, 10);
    if (*end == ':')
        slow_ns = strtoull(end + 1, &end, 10);
    if (*end || !slow_nth || !slow_ns) {
        snic_log("SNIC_SLOW_REG=\"%s\" is not N:NS (the N-th registration takes NS more)", env);
        slow_nth = 0;
        return;
    }
    cost_on = true;
}

static const struct {
    const char *name;
    int err;
} fault_names[] = {
    { "EBUSY", EBUSY }, { "EIO", EIO },       { "ENOMEM", ENOMEM }, { "EAGAIN", EAGAIN },
    { "EFAULT", EFAULT }, { "EINVAL", EINVAL }, { "EPERM", EPERM },   { "EACCES", EACCES },
};

/* "ERR[:COUNT]" (snic.h), read once at load; 0 or EINVAL. */
static int fault_parse(const char *env, struct fault *f)
{
    const char *colon = strchr(env, ':');
    size_t n = colon ? (size_t)(colon - env) : strlen(env);
    unsigned long long count = 1;
    int err = 0;
    char *end;

    for (size_t i = 0; i < sizeof(fault_names) / sizeof(fault_names[0]); i++)
        if (strlen(fault_names[i].name) == n && !strncmp(env, fault_names[i].name, n))
            err = fault_names[i].err;
    if (!err) {
        long v = strtol(env, &end, 10);

        if (end != env + n || n == 0 || v <= 0 || v > 4095)
            return EINVAL;
        err = (int)v;
    }
    if (colon && !strcmp(colon + 1, "always")) {
        count = SNIC_FAIL_ALWAYS;
    } else if (colon) {
        errno = 0;
        count = strtoull(colon + 1, &end, 10);
        if (end == colon + 1 || *end || errno || count >= SNIC_FAIL_ALWAYS || colon[1] == '-')
            return EINVAL;
    }
    f->err = err;
    f->armed = (uint32_t)count;
    return 0;
}

static void fault_env(const char *name, struct fault *f)
{
    const char *env = getenv(name);

    if (env && fault_parse(env, f))
        snic_log("%s=\"%s\" is not ERR[:COUNT] (an errno name such as EBUSY or a number, then "
                 "a count or \"always\"; e.g. EBUSY:3); nothing is injected", name, env);
}

/* Under nic_lock: the error to fail this call with, or 0. */
static int fault_take(struct fault *f)
{
    if (!f->armed)
        return 0;
    if (f->armed != SNIC_FAIL_ALWAYS)
        f->armed--;
    f->injected++;
    return f->err;
}

static int fault_arm(struct fault *f, int err, uint32_t n)
{
    if (n && err <= 0)
        return EINVAL;
    pthread_mutex_lock(&nic_lock);
    f->err = err;
    f->armed = n;
    pthread_mutex_unlock(&nic_lock);
    return 0;
}

SNIC_EXPORT int snic_fail_reg(int err, uint32_t n)
{
    return fault_arm(&fault_reg, err, n);
}

SNIC_EXPORT int snic_fail_dereg(int err, uint32_t n)
{
    return fault_arm(&fault_dereg, err, n);
}

SNIC_EXPORT void snic_get_faults(struct snic_faults *out)
{
    pthread_mutex_lock(&nic_lock);
    out->reg_armed = fault_reg.armed;
    out->reg_injected = fault_reg.injected;
    out->dereg_armed = fault_dereg.armed;
    out->dereg_injected = fault_dereg.injected;
    pthread_mutex_unlock(&nic_lock);
}

/* A registration takes at least the modelled time in total, pinning included: the model
 * (UCX's) is of a whole registration on a real NIC. Busy, as a caller blocked in the
 * kernel for the firmware would be, and accurate where a sleep would not be. */
static void cost_wait(uint64_t t0, size_t len)
{
    uint64_t until;

    if (!cost_on)
        return;
    until = t0 + cost_fixed_ns + (uint64_t)(cost_ns_per_byte * (double)len);
    if (slow_nth && atomic_fetch_add(&regs_timed, 1) + 1 == slow_nth)
        until += slow_ns;
    while (now_ns() < until)
        ;
}

static uint64_t cost_start(void)
{
    return cost_on ? now_ns() : 0;
}

int nic_inherited(unsigned gen, const char *call, const char *what)
{
    if (gen == nic_gen)
        return 0;
    snic_log("%s: this %s was created before fork() by the parent; the child's NIC does not "
             "know it (the parent's is untouched)", call, what);
    return EIO;
}

/* ib_check_mr_access; on-demand paging only as SNIC_ODP allows. */
static int check_access(unsigned access)
{
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE))
        return EINVAL;
    if (access & ~ACCESS_KNOWN)
        return EINVAL;
    if (access & ACCESS_FLUSH)
        return EOPNOTSUPP;
    return 0;
}

/* The bytes of whole pages [addr, addr+len) touches: what ib_umem_get adds to VmPin. */
static uint64_t span(uintptr_t addr, size_t len)
{
    uintptr_t mask = (uintptr_t)getpagesize() - 1;

    return ((addr + len + mask) & ~mask) - (addr & ~mask);
}

/* Under nic_lock. */
static void pinned_add(uint64_t bytes)
{
    stats.pinned_bytes += bytes;
    if (stats.pinned_bytes > stats.pinned_peak)
        stats.pinned_peak = stats.pinned_bytes;
}

/* Under nic_lock. */
static uint32_t key_new(void)
{
    struct snic_mr *hit;
    uint32_t key;

    do {
        key = ++key_last;
        HASH_FIND(hh, mr_table, &key, sizeof(key), hit);
    } while (!key || hit);
    return key;
}

void nic_ctx_init(struct snic_ctx *ctx)
{
    ctx->gen = nic_gen;
}

int nic_ctx_release(struct snic_ctx *ctx)
{
    bool busy;

    /* A child closing an inherited context frees only its own copy. */
    if (ctx->gen != nic_gen)
        return 0;
    pthread_mutex_lock(&nic_lock);
    busy = ctx->live_pds || ctx->live_cqs;
    pthread_mutex_unlock(&nic_lock);
    return busy ? EBUSY : 0;
}

unsigned nic_gen_now(void)
{
    return nic_gen;
}

int nic_ctx_hold(struct snic_ctx *ctx, const char *call)
{
    int err = nic_inherited(ctx->gen, call, "context");

    if (err)
        return err;
    pthread_mutex_lock(&nic_lock);
    ctx->live_cqs++;
    pthread_mutex_unlock(&nic_lock);
    return 0;
}

void nic_ctx_unhold(struct snic_ctx *ctx)
{
    pthread_mutex_lock(&nic_lock);
    ctx->live_cqs--;
    pthread_mutex_unlock(&nic_lock);
}

int nic_pd_hold(struct ibv_pd *ibpd, const char *call)
{
    struct snic_pd *pd = (struct snic_pd *)ibpd;
    int err = nic_inherited(pd->gen, call, "PD");

    if (err)
        return err;
    pthread_mutex_lock(&nic_lock);
    pd->holds++;
    pthread_mutex_unlock(&nic_lock);
    return 0;
}

void nic_pd_unhold(struct ibv_pd *ibpd)
{
    struct snic_pd *pd = (struct snic_pd *)ibpd;

    pthread_mutex_lock(&nic_lock);
    pd->holds--;
    pthread_mutex_unlock(&nic_lock);
}

struct ibv_pd *nic_alloc_pd(struct ibv_context *context)
{
    struct snic_ctx *ctx = snic_ctx_of(context);
    struct snic_pd *pd;
    int err = nic_inherited(ctx->gen, "ibv_alloc_pd", "context");

    if (err)
        goto fail;
    err = ENOMEM;
    pd = calloc(1, sizeof(*pd));
    if (!pd)
        goto fail;
    pd->ctx = ctx;
    pd->gen = nic_gen;
    pthread_mutex_lock(&nic_lock);
    if (stats.live_pds < SNIC_MAX_PD) {
        err = 0;
        pd->ibv.handle = ++pd_handle_last;
        ctx->live_pds++;
        stats.live_pds++;
    }
    pthread_mutex_unlock(&nic_lock);
    if (!err)
        return &pd->ibv;
    free(pd);
fail:
    errno = err;
    return NULL;
}

int nic_dealloc_pd(struct ibv_pd *ibpd)
{
    struct snic_pd *pd = (struct snic_pd *)ibpd;
    int err = nic_inherited(pd->gen, "ibv_dealloc_pd", "PD");

    if (err)
        return err;
    pthread_mutex_lock(&nic_lock);
    if (pd->live_mrs || pd->holds) {
        err = EBUSY;
    } else {
        pd->ctx->live_pds--;
        stats.live_pds--;
    }
    pthread_mutex_unlock(&nic_lock);
    if (!err)
        free(pd);
    return err;
}

struct ibv_mr *nic_reg_mr(struct ibv_pd *ibpd, void *addr, size_t len, uint64_t iova,
                          unsigned access)
{
    struct snic_pd *pd = (struct snic_pd *)ibpd;
    uintptr_t a = (uintptr_t)addr, page_off = (uintptr_t)getpagesize() - 1;
    uint64_t t0 = cost_start();
    struct snic_mr *mr;
    int err = nic_inherited(pd->gen, "ibv_reg_mr", "PD");

    /* In the kernel's order: ib_uverbs_reg_mr wants start and hca_va at the same page
     * offset, then the access check, then ib_umem_get refuses empty or wrapping ranges. */
    if (!err && ((a ^ iova) & page_off))
        err = EINVAL;
    if (!err)
        err = check_access(access);
    if (!err && (access & IBV_ACCESS_ON_DEMAND))
        err = odp_check(addr, len);
    if (!err && (!len || a + len < a))
        err = EINVAL;
    if (!err) {
        /* The device refusing a valid request (snic_fail_reg). */
        pthread_mutex_lock(&nic_lock);
        err = fault_take(&fault_reg);
        pthread_mutex_unlock(&nic_lock);
    }
    if (err)
        goto fail;
    err = ENOMEM;
    mr = calloc(1, sizeof(*mr));
    if (!mr)
        goto fail;
    mr->odp = access & IBV_ACCESS_ON_DEMAND;
    if (mr->odp) {
        mr->pin.addr = a;
        mr->pin.len = len;
    } else if ((err = pin_range(&mr->pin, addr, len))) {
        free(mr);
        goto fail;
    }
    cost_wait(t0, mr->odp ? 0 : len);
    mr->pd = pd;
    mr->iova = iova;
    mr->access = access;
    mr->gen = nic_gen;

    pthread_mutex_lock(&nic_lock);
    mr->key = key_new();
    HASH_ADD(hh, mr_table, key, sizeof(mr->key), mr);
    pd->live_mrs++;
    stats.live_mrs++;
    stats.reg_calls++;
    if (mr->odp)
        odp_count_mr(1);
    else
        pinned_add(span(a, len));
    mr->ibv.handle = mr->ibv.lkey = mr->ibv.rkey = mr->key;
    pthread_mutex_unlock(&nic_lock);
    return &mr->ibv;
fail:
    errno = err;
    return NULL;
}

int nic_dereg_mr(struct ibv_mr *ibmr)
{
    struct snic_mr *mr = (struct snic_mr *)ibmr;
    int err = nic_inherited(mr->gen, "ibv_dereg_mr", "MR");

    if (err)
        return err;
    pthread_mutex_lock(&nic_lock);
    /* The device refusing (snic_fail_dereg): the MR stays registered and pinned. */
    err = fault_take(&fault_dereg);
    if (err) {
        pthread_mutex_unlock(&nic_lock);
        return err;
    }
    HASH_DELETE(hh, mr_table, mr);
    mr->pd->live_mrs--;
    stats.live_mrs--;
    stats.dereg_calls++;
    if (mr->odp) {
        odp_count_mr(-1);
        odp_release(&mr->faulted);
    } else {
        stats.pinned_bytes -= span(mr->pin.addr, mr->pin.len);
    }
    pthread_mutex_unlock(&nic_lock);
    /* No DMA can use the pin now: DMA looks the key up and runs under nic_lock. */
    if (!mr->odp)
        pin_release(&mr->pin);
    free(mr);
    return 0;
}

/* ib_uverbs_rereg_mr's checks, then all or nothing: on error the MR is unchanged. A new
 * translation gets new keys (mlx5 makes a new mkey then), so an old rkey stops working. */
int nic_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *ibpd, void *addr, size_t len,
                 int access)
{
    struct snic_mr *mr = (struct snic_mr *)ibmr;
    struct snic_pd *npd = (struct snic_pd *)ibpd;
    struct snic_pin pin = { 0 }, old = { 0 };
    bool trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
    uintptr_t a = (uintptr_t)addr;
    uint64_t t0;
    int err = nic_inherited(mr->gen, "ibv_rereg_mr", "MR");

    if (err)
        return err;
    if (!flags)
        return EINVAL;
    if (mr->odp || (flags & IBV_REREG_MR_CHANGE_ACCESS && access & IBV_ACCESS_ON_DEMAND))
        return EOPNOTSUPP;
    if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && (err = check_access((unsigned)access)))
        return err;
    if ((flags & IBV_REREG_MR_CHANGE_PD) &&
        (!npd || npd->gen != nic_gen || npd->ctx != mr->pd->ctx))
        return EINVAL;
    if (trans) {
        if (!len || a + len < a)
            return EINVAL;
        t0 = cost_start();
        err = pin_range(&pin, addr, len);
        if (err)
            return err;
        cost_wait(t0, len);
    }

    pthread_mutex_lock(&nic_lock);
    if (trans) {
        HASH_DELETE(hh, mr_table, mr);
        stats.pinned_bytes -= span(mr->pin.addr, mr->pin.len);
        old = mr->pin;
        mr->pin = pin;
        mr->iova = a; /* providers pass addr as the new hca_va */
        mr->key = key_new();
        HASH_ADD(hh, mr_table, key, sizeof(mr->key), mr);
        pinned_add(span(a, len));
        mr->ibv.handle = mr->ibv.lkey = mr->ibv.rkey = mr->key;
    }
    if (flags & IBV_REREG_MR_CHANGE_PD) {
        mr->pd->live_mrs--;
        npd->live_mrs++;
        mr->pd = npd;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS)
        mr->access = (unsigned)access;
    pthread_mutex_unlock(&nic_lock);
    if (trans)
        pin_release(&old);
    return 0;
}

void nic_count_iova2(void)
{
    atomic_fetch_add_explicit(&iova2_entries, 1, memory_order_relaxed);
}

/* Key (of an MR of pd, unless pd is NULL), then range (in iova space), then rights; the
 * DMA runs under nic_lock so the MR cannot be deregistered or re-translated under it.
 * With neither src nor dst only the checks are made. */
int nic_dma(const struct ibv_pd *pd, uint32_t key, uint64_t addr, const void *src, void *dst,
            size_t len, unsigned need)
{
    struct snic_mr *mr;
    uint64_t off;
    int err;

    pthread_mutex_lock(&nic_lock);
    HASH_FIND(hh, mr_table, &key, sizeof(key), mr);
    if (!mr || (pd && &mr->pd->ibv != pd)) {
        err = EINVAL;
        goto out;
    }
    off = addr - mr->iova;
    if (addr < mr->iova || off > mr->pin.len || len > mr->pin.len - off)
        err = EINVAL;
    else if ((mr->access & need) != need)
        err = EACCES;
    else if (!len || (!src && !dst))
        err = 0;
    else if (mr->odp)
        err = odp_dma(&mr->faulted, mr->pin.addr + off, src, dst, len);
    else
        err = pin_dma(&mr->pin, mr->pin.addr + off, src, dst, len);
out:
    pthread_mutex_unlock(&nic_lock);
    return err;
}

SNIC_EXPORT int snic_rdma_write(uint32_t rkey, uint64_t remote_addr, const void *src,
                                size_t len)
{
    return nic_dma(NULL, rkey, remote_addr, src, NULL, len, IBV_ACCESS_REMOTE_WRITE);
}

SNIC_EXPORT int snic_rdma_read(uint32_t rkey, uint64_t remote_addr, void *dst, size_t len)
{
    return nic_dma(NULL, rkey, remote_addr, NULL, dst, len, IBV_ACCESS_REMOTE_READ);
}

SNIC_EXPORT int snic_local_write(uint32_t lkey, uint64_t addr, const void *src, size_t len)
{
    return nic_dma(NULL, lkey, addr, src, NULL, len, IBV_ACCESS_LOCAL_WRITE);
}

SNIC_EXPORT int snic_local_read(uint32_t lkey, uint64_t addr, void *dst, size_t len)
{
    return nic_dma(NULL, lkey, addr, NULL, dst, len, 0);
}

SNIC_EXPORT void snic_get_stats(struct snic_stats *out)
{
    pthread_mutex_lock(&nic_lock);
    *out = stats;
    out->iova2_entries = atomic_load_explicit(&iova2_entries, memory_order_relaxed);
    pthread_mutex_unlock(&nic_lock);
}

/* EOPNOTSUPP without ODP; then rdma-core's checks (a known advice and flag, an sge), and
 * each sge: an lkey of an ODP MR of this PD, its range inside the MR. Prefetching is done
 * at once, so the answer is the same with or without IBV_ADVISE_MR_FLAG_FLUSH. */
int nic_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                  struct ibv_sge *sg_list, uint32_t num_sge)
{
    int err = 0;

    if (!odp_on())
        return EOPNOTSUPP;
    if ((advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
         advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) ||
        (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !num_sge || !sg_list)
        return EINVAL;
    pthread_mutex_lock(&nic_lock);
    for (uint32_t i = 0; i < num_sge && !err; i++) {
        struct snic_mr *mr;
        uint64_t off;

        HASH_FIND(hh, mr_table, &sg_list[i].lkey, sizeof(sg_list[i].lkey), mr);
        off = mr ? sg_list[i].addr - mr->iova : 0;
        if (!mr || !mr->odp || &mr->pd->ibv != pd || sg_list[i].addr < mr->iova ||
            off > mr->pin.len || sg_list[i].length > mr->pin.len - off)
            err = EINVAL;
        else
            err = odp_prefetch(&mr->faulted, mr->pin.addr + off, sg_list[i].length);
    }
    pthread_mutex_unlock(&nic_lock);
    return err;
}

SNIC_EXPORT void snic_get_odp_stats(struct snic_odp_stats *out)
{
    pthread_mutex_lock(&nic_lock);
    odp_get_stats(out);
    pthread_mutex_unlock(&nic_lock);
}

SNIC_EXPORT void snic_reset_peak(void)
{
    pthread_mutex_lock(&nic_lock);
    stats.pinned_peak = stats.pinned_bytes;
    pthread_mutex_unlock(&nic_lock);
}

static void nic_fork_prepare(void)
{
    pthread_mutex_lock(&nic_lock);
    pin_fork_prepare();
}

static void nic_fork_parent(void)
{
    pin_fork_parent();
    pthread_mutex_unlock(&nic_lock);
}

/* The child gets a fresh NIC: the parent's MRs stay pinned by the parent's rings and the
 * child's copies of them (and of their table) are simply abandoned. */
static void nic_fork_child(void)
{
    pin_fork_child();
    mr_table = NULL;
    memset(&stats, 0, sizeof(stats));
    memset(&fault_reg, 0, sizeof(fault_reg));
    memset(&fault_dereg, 0, sizeof(fault_dereg));
    atomic_store_explicit(&iova2_entries, 0, memory_order_relaxed);
    odp_fork_child();
    nic_gen++;
    pthread_mutex_unlock(&nic_lock);
}

__attribute__((constructor)) static void nic_init(void)
{
    cost_parse();
    slow_parse();
    fault_env("SNIC_FAIL_REG", &fault_reg);
    fault_env("SNIC_FAIL_DEREG", &fault_dereg);
    pthread_atfork(nic_fork_prepare, nic_fork_parent, nic_fork_child);
}
