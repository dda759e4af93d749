/* snic_pin.c - pinning and DMA: an MR is io_uring fixed buffers (long-term pins in VmPin,
 * charged to RLIMIT_MEMLOCK for non-root), DMA is READ_FIXED/WRITE_FIXED against a memfd,
 * so it reaches the pinned pages, never the current page tables. Invariants (pin_lock): a
 * slot is on its ring's free stack iff its entry is empty; a buffer is at most 1 GiB and
 * all but an MR's first start on a page, so no page is pinned twice for one MR. */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include "snic_priv.h"

#define SEG_SHIFT  30                 /* 1 GiB per fixed buffer */
#define SLOT_BITS  14                 /* log2(SNIC_RING_SLOTS) */
#define WIRE_CHUNK ((size_t)1 << 20)  /* bounds the memfd's size */

struct ring {
    struct io_uring uring;
    uint32_t nfree;
    uint16_t free[SNIC_RING_SLOTS]; /* stack of empty slots */
};

static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ring *rings[SNIC_MAX_RINGS]; /* entries below nrings never change */
static unsigned nrings;
static unsigned hint; /* the ring that last had a free slot */
static int wire = -1; /* memfd: the other end of every DMA, opened lazily */

static uintptr_t page_mask(void)
{
    return (uintptr_t)getpagesize() - 1;
}

static uint32_t seg_get(const struct snic_pin *pin, uint32_t i)
{
    return pin->nseg == 1 ? pin->seg.one : pin->seg.many[i];
}

static void seg_set(struct snic_pin *pin, uint32_t i, uint32_t seg)
{
    if (pin->nseg == 1)
        pin->seg.one = seg;
    else
        pin->seg.many[i] = seg;
}

/* The bytes of buffer i: the MR cut at page-aligned GiB boundaries. */
static struct iovec seg_iov(const struct snic_pin *pin, uint32_t i)
{
    uintptr_t base = pin->addr & ~page_mask();
    uintptr_t lo = base + ((uintptr_t)i << SEG_SHIFT), hi = lo + ((uintptr_t)1 << SEG_SHIFT);
    uintptr_t end = pin->addr + pin->len;

    if (lo < pin->addr)
        lo = pin->addr;
    if (hi > end)
        hi = end;
    return (struct iovec){ .iov_base = (void *)lo, .iov_len = hi - lo };
}

static struct io_uring *seg_ring(uint32_t seg)
{
    return &rings[seg >> SLOT_BITS]->uring;
}

/* Under pin_lock. A new ring with an empty (sparse) table of SNIC_RING_SLOTS buffers. */
static int ring_new(void)
{
    struct ring *r;
    int ret;

    if (nrings == SNIC_MAX_RINGS)
        return ENOMEM;
    r = malloc(sizeof(*r));
    if (!r)
        return ENOMEM;
    ret = io_uring_queue_init(4, &r->uring, 0);
    if (!ret) {
        ret = io_uring_register_buffers_sparse(&r->uring, SNIC_RING_SLOTS);
        if (ret)
            io_uring_queue_exit(&r->uring);
    }
    if (ret) {
        snic_log("cannot set up an io_uring with %u fixed buffers: %s", SNIC_RING_SLOTS,
                 strerror(-ret));
        free(r);
        return -ret;
    }
    for (uint32_t i = 0; i < SNIC_RING_SLOTS; i++)
        r->free[i] = (uint16_t)(SNIC_RING_SLOTS - 1 - i);
    r->nfree = SNIC_RING_SLOTS;
    rings[nrings++] = r;
    return 0;
}

/* Under pin_lock. */
static int slot_get(uint32_t *seg)
{
    struct ring *r;
    int ret;

    for (unsigned i = 0; i < nrings && rings[hint]->nfree == 0; i++)
        hint = (hint + 1) % nrings;
    if (!nrings || rings[hint]->nfree == 0) {
        ret = ring_new();
        if (ret)
            return ret;
        hint = nrings - 1;
    }
    r = rings[hint];
    *seg = hint << SLOT_BITS | r->free[--r->nfree];
    return 0;
}

/* Under pin_lock. */
static void slot_put(uint32_t seg)
{
    struct ring *r = rings[seg >> SLOT_BITS];

    r->free[r->nfree++] = (uint16_t)(seg & (SNIC_RING_SLOTS - 1));
}

/* Pages this process has pinned. A real NIC charges its pins to the process
 * (mm->pinned_vm against RLIMIT_MEMLOCK); io_uring charges them to the user, across all of
 * the user's processes, and frees an exited process's charge a few milliseconds after it
 * is gone. A pin the user's charge refuses while this process alone would be within the
 * limit is therefore retried for up to PIN_WAIT_MS: processes run one after another see a
 * NIC's per-process limit, and a pin over the limit fails at once. */
#define PIN_WAIT_MS 1000
static uint64_t own_pages;

static uint64_t iov_pages(const struct iovec *iov)
{
    uintptr_t a = (uintptr_t)iov->iov_base, m = page_mask();

    return iov->iov_len ? (((a + iov->iov_len - 1) | m) - (a & ~m) + 1) / (m + 1) : 0;
}

/* Whether a refusal of need more pages may be another process's charge. */
static int charge_is_others(uint64_t need)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return __atomic_load_n(&own_pages, __ATOMIC_RELAXED) + need <= rl.rlim_cur / (page_mask() + 1);
}

/* Fills or empties a slot; the kernel pins or unpins right here. */
static int slot_update(uint32_t seg, const struct iovec *iov)
{
    int ret;

    for (unsigned waited = 0;; waited++) {
        do
            ret = io_uring_register_buffers_update_tag(seg_ring(seg), seg & (SNIC_RING_SLOTS - 1),
                                                       iov, NULL, 1);
        while (ret == -EINTR);
        if (ret != -ENOMEM || !iov->iov_len || waited == PIN_WAIT_MS || !charge_is_others(iov_pages(iov)))
            break;
        usleep(1000);
    }
    if (ret >= 0)
        __atomic_add_fetch(&own_pages, iov_pages(iov), __ATOMIC_RELAXED);
    return ret < 0 ? -ret : 0;
}

static void slot_clear(uint32_t seg, const struct iovec *was)
{
    const struct iovec none = { 0 };
    int err = slot_update(seg, &none);

    if (err) {
        /* The slot still holds the buffer: keep it off the free stack. */
        snic_log("cannot unpin fixed buffer %u of ring %u: %s (slot leaked)",
                 seg & (SNIC_RING_SLOTS - 1), seg >> SLOT_BITS, strerror(err));
        return;
    }
    __atomic_sub_fetch(&own_pages, iov_pages(was), __ATOMIC_RELAXED);
    pthread_mutex_lock(&pin_lock);
    slot_put(seg);
    pthread_mutex_unlock(&pin_lock);
}

int pin_range(struct snic_pin *pin, void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    uint32_t i, nseg = (uint32_t)(((a + len - 1) - (a & ~page_mask())) >> SEG_SHIFT) + 1;
    int err = 0;

    pin->addr = a;
    pin->len = len;
    pin->nseg = nseg;
    if (nseg > 1) {
        pin->seg.many = calloc(nseg, sizeof(*pin->seg.many));
        if (!pin->seg.many)
            return ENOMEM;
    }
    pthread_mutex_lock(&pin_lock);
    for (i = 0; i < nseg; i++) {
        uint32_t seg;

        err = slot_get(&seg);
        if (err)
            break;
        seg_set(pin, i, seg);
    }
    if (err)
        while (i-- > 0)
            slot_put(seg_get(pin, i));
    pthread_mutex_unlock(&pin_lock);

    for (i = 0; i < nseg && !err; i++) {
        struct iovec iov = seg_iov(pin, i);

        err = slot_update(seg_get(pin, i), &iov);
        if (err) {
            /* Unwind: the pinned ones are emptied, the rest were never filled. */
            for (uint32_t j = 0; j < i; j++) {
                struct iovec was = seg_iov(pin, j);

                slot_clear(seg_get(pin, j), &was);
            }
            pthread_mutex_lock(&pin_lock);
            for (uint32_t j = i; j < nseg; j++)
                slot_put(seg_get(pin, j));
            pthread_mutex_unlock(&pin_lock);
        }
    }
    if (err && nseg > 1)
        free(pin->seg.many);
    /* ib_umem_get reports an address range that wraps as EINVAL; io_uring as EOVERFLOW. */
    return err == EOVERFLOW ? EINVAL : err;
}

void pin_release(struct snic_pin *pin)
{
    for (uint32_t i = 0; i < pin->nseg; i++) {
        struct iovec was = seg_iov(pin, i);

        slot_clear(seg_get(pin, i), &was);
    }
    if (pin->nseg > 1)
        free(pin->seg.many);
}

/* Under pin_lock. One fixed read (wire -> pages) or write (pages -> wire) of n bytes at
 * file offset off; returns bytes moved or -errno. */
static int ring_dma(uint32_t seg, int into_pages, uintptr_t va, unsigned n, unsigned off)
{
    struct io_uring *ring = seg_ring(seg);
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring); /* the ring is always idle here */
    struct io_uring_cqe *cqe;
    int idx = (int)(seg & (SNIC_RING_SLOTS - 1)), ret;

    if (into_pages)
        io_uring_prep_read_fixed(sqe, wire, (void *)va, n, off, idx);
    else
        io_uring_prep_write_fixed(sqe, wire, (const void *)va, n, off, idx);
    do
        ret = io_uring_submit_and_wait(ring, 1);
    while (ret == -EINTR);
    if (ret < 0)
        return ret;
    do
        ret = io_uring_wait_cqe(ring, &cqe);
    while (ret == -EINTR);
    if (ret < 0)
        return ret;
    ret = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return ret;
}

/* Under pin_lock: one piece inside one buffer, at most WIRE_CHUNK bytes. */
static int dma_piece(uint32_t seg, uintptr_t va, const char *src, char *dst, size_t n)
{
    size_t done;
    ssize_t w;
    int ret;

    if (src)
        for (done = 0; done < n; done += (size_t)w) {
            w = pwrite(wire, src + done, n - done, (off_t)done);
            if (w < 0)
                return errno;
        }
    for (done = 0; done < n; done += (size_t)ret) {
        ret = ring_dma(seg, src != NULL, va + done, (unsigned)(n - done), (unsigned)done);
        if (ret < 0)
            return -ret;
        if (ret == 0)
            return EIO;
    }
    if (dst)
        for (done = 0; done < n; done += (size_t)w) {
            w = pread(wire, dst + done, n - done, (off_t)done);
            if (w < 0)
                return errno;
            if (w == 0)
                return EIO;
        }
    return 0;
}

int pin_dma(const struct snic_pin *pin, uintptr_t va, const void *src, void *dst, size_t len)
{
    uintptr_t base = pin->addr & ~page_mask();
    const char *s = src;
    char *d = dst;
    int err = 0;

    pthread_mutex_lock(&pin_lock);
    if (wire < 0) {
        wire = memfd_create("snic-wire", MFD_CLOEXEC);
        if (wire < 0)
            err = errno;
    }
    while (len && !err) {
        uint32_t i = (uint32_t)((va - base) >> SEG_SHIFT);
        uintptr_t seg_end = base + ((uintptr_t)(i + 1) << SEG_SHIFT);
        size_t n = len < WIRE_CHUNK ? len : WIRE_CHUNK;

        if (n > seg_end - va)
            n = seg_end - va;
        err = dma_piece(seg_get(pin, i), va, s, d, n);
        va += n;
        len -= n;
        if (s)
            s += n;
        else
            d += n;
    }
    pthread_mutex_unlock(&pin_lock);
    return err;
}

void pin_fork_prepare(void)
{
    pthread_mutex_lock(&pin_lock);
}

void pin_fork_parent(void)
{
    pthread_mutex_unlock(&pin_lock);
}

/* The child shares the parent's rings and wire (same open files, same ring memory): it
 * must never submit or update on them. Drop its references; it opens its own lazily. */
void pin_fork_child(void)
{
    for (unsigned i = 0; i < nrings; i++) {
        io_uring_queue_exit(&rings[i]->uring);
        free(rings[i]);
        rings[i] = NULL;
    }
    nrings = 0;
    hint = 0;
    if (wire >= 0)
        close(wire);
    wire = -1;
    pthread_mutex_unlock(&pin_lock);
}
