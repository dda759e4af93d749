/* snic_odp.c - on-demand paging: the capabilities the device reports (SNIC_ODP), the
 * modelled cost of a page fault (SNIC_ODP_FAULT_NS), and the data path of an ODP MR, which
 * pins nothing and reaches memory through the page tables at the time of each access (so
 * it is never stale). Invariants (the caller holds nic_lock): a page is in an MR's
 * faulted set iff a DMA or a prefetch brought it in since the MR was registered. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "snic.h"
#include "snic_priv.h"

#define uthash_fatal(msg) (snic_log("faulted pages: %s", msg), abort())
#include <uthash.h>

struct odp_page {
    uintptr_t pg; /* page number */
    UT_hash_handle hh;
};

/* What the device supports, per transport as mlx5 reports it (no UC). */
#define ODP_TRANSPORT (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | \
                       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV)

static uint64_t general; /* IBV_ODP_SUPPORT[_IMPLICIT], from SNIC_ODP */
static uint64_t fault_ns;
static struct snic_odp_stats ostats;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((constructor)) static void odp_env(void)
{
    const char *v = getenv("SNIC_ODP"), *f = getenv("SNIC_ODP_FAULT_NS");
    char *end;

    if (v && !strcmp(v, "explicit"))
        general = IBV_ODP_SUPPORT;
    else if (v && !strcmp(v, "implicit"))
        general = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
    else if (v && strcmp(v, "0"))
        snic_log("SNIC_ODP=\"%s\" is not 0, explicit or implicit; no on-demand paging", v);
    if (f) {
        errno = 0;
        unsigned long long ns = strtoull(f, &end, 10);

        if (end == f || *end || errno || *f == '-' || ns >= 1000000000ull)
            snic_log("SNIC_ODP_FAULT_NS=\"%s\" is not a number of ns below 1e9; faults cost "
                     "nothing extra", f);
        else
            fault_ns = ns;
    }
}

void odp_caps(struct ibv_odp_caps *caps)
{
    memset(caps, 0, sizeof(*caps));
    if (!general)
        return;
    caps->general_caps = general;
    caps->per_transport_caps.rc_odp_caps = ODP_TRANSPORT;
    caps->per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
}

int odp_on(void)
{
    return general != 0;
}

int odp_check(const void *addr, size_t len)
{
    if (!general)
        return EOPNOTSUPP;
    /* An implicit MR: the whole address space, as rdma-core spells it. */
    if (!addr && len == SIZE_MAX && !(general & IBV_ODP_SUPPORT_IMPLICIT))
        return EOPNOTSUPP;
    return 0;
}

/* Brings page pg in, paying the fault (a busy wait: the HCA stalls the QP meanwhile). */
static int page_in(struct odp_page **set, uintptr_t pg, int fault)
{
    struct odp_page *p;

    HASH_FIND(hh, *set, &pg, sizeof(pg), p);
    if (p)
        return 0;
    p = malloc(sizeof(*p));
    if (!p)
        return ENOMEM;
    p->pg = pg;
    HASH_ADD(hh, *set, pg, sizeof(p->pg), p);
    if (fault) {
        uint64_t until = now_ns() + fault_ns;

        ostats.faults++;
        while (fault_ns && now_ns() < until)
            ;
    } else {
        ostats.prefetched++;
    }
    return 0;
}

static int pages_in(struct odp_page **set, uintptr_t va, size_t len, int fault)
{
    uintptr_t psz = (uintptr_t)getpagesize();
    int err = 0;

    for (uintptr_t pg = va / psz; !err && pg <= (va + len - 1) / psz; pg++)
        err = page_in(set, pg, fault);
    return err;
}

/* Through the page tables as they are now: an unmapped page, or a write to a read-only
 * one, fails the access (EFAULT), as an ODP fault the kernel cannot resolve does. */
int odp_dma(struct odp_page **set, uintptr_t va, const void *src, void *dst, size_t len)
{
    struct iovec local = { dst, len }, remote = { (void *)va, len };
    ssize_t n;
    int err = pages_in(set, va, len, 1);

    if (err)
        return err;
    if (src)
        memcpy(&local.iov_base, &src, sizeof(src)); /* process_vm_writev only reads it */
    n = src ? process_vm_writev(getpid(), &local, 1, &remote, 1, 0)
            : process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    return n == (ssize_t)len ? 0 : EFAULT;
}

int odp_prefetch(struct odp_page **set, uintptr_t va, size_t len)
{
    ostats.advise_calls++;
    return len ? pages_in(set, va, len, 0) : 0;
}

void odp_release(struct odp_page **set)
{
    struct odp_page *p, *tmp;

    HASH_ITER(hh, *set, p, tmp) {
        HASH_DEL(*set, p);
        free(p);
    }
}

void odp_count_mr(int delta)
{
    ostats.live_odp_mrs += (uint64_t)(int64_t)delta;
    if (delta > 0)
        ostats.odp_regs++;
}

void odp_get_stats(struct snic_odp_stats *out)
{
    *out = ostats;
}

void odp_fork_child(void)
{
    memset(&ostats, 0, sizeof(ostats));
}
