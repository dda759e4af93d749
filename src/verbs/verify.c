/* verify.c - MRCACHE_VERIFY (see verify.h): a side table of the page frames under each
 * cached registration, keyed by the entry object, checked on sampled hits.
 * Invariants: the table never allocates through malloc (one mmap'ed region, MAP_NORESERVE,
 * wiped in a forked child, whose registrations are its own); a record is trusted only
 * while its tag (range, back-end registration, lkey) matches the entry, since entry
 * objects are reused; a hit found stale is never returned.
 *
 * What is recorded and checked (the policy for large registrations): a registration of
 * up to REC_PAGES pages (512 KiB of 4 KiB pages) has every page's frame recorded, and a
 * check compares every page of the hit's request. A larger one has REC_WINDOWS windows of
 * WIN_PAGES contiguous pages recorded, spread evenly from its first page to its last; a
 * check compares one window that the request overlaps, the next one at the thread's next
 * check, so a registration's windows are all covered by REC_WINDOWS checks. A check is one
 * pread of at most REC_PAGES pagemap entries whatever the size (a pagemap read costs
 * microseconds per call, plus tens of ns per page), and a record is about 1 KiB. Mappings
 * are usually replaced whole (munmap + mmap, mremap, MAP_FIXED), which any window sees
 * at once; a remapping confined to pages between windows goes unseen, and a hit on a
 * small part of a large registration that meets no window is not checked (nor counted).
 *
 * A page counts as stale when it is not present (unmapped, never touched since it was
 * mapped again, or swapped: a pinned page is never swapped out or migrated) or maps
 * another frame. A file-backed page the kernel unmapped under memory pressure (its frame
 * stays pinned, a fault maps it back) would be reported too: a needless re-registration,
 * never a stale MR handed out. So would an entry object reused for the same range with a
 * back-end registration at the same address and with the same lkey, if another thread hit
 * it in the microseconds before its maker recorded it (the tag cannot tell the two). */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs/verify.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/sys.h"

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

#define PM_PRESENT (1ull << 63)
#define PM_PFN_MASK ((1ull << 55) - 1)   /* bits 0-54, when present */

#define REC_PAGES 128                    /* frames recorded per registration */
#define REC_WINDOWS 8                    /* ... in this many windows past REC_PAGES pages */
#define WIN_PAGES (REC_PAGES / REC_WINDOWS)

/* The side table's size, in records: MRCACHE_MAX_ENTRIES plus room for entries out of the
 * tree (in use, deferred), within bounds. Entry objects are never freed to the kernel, so
 * distinct keys are as many as the entries that ever lived at once. */
#define REC_SLACK 4096
#define REC_MAX (1u << 20)

struct vrec {
    uint32_t lock;                       /* a spin lock: held for a copy or a compare */
    uint32_t reported;                   /* this registration's staleness is logged and counted */
    uint64_t start, len;                 /* the tag: the entry's range when recorded, ... */
    const void *reg;                     /* ... its back-end registration ... */
    uint32_t lkey;                       /* ... and key (objects and addresses are reused) */
    uint64_t pfn[REC_PAGES];             /* 0: unknown (not present when recorded) */
};

#define REC_NONE UINT32_MAX              /* slot whose key came after the table filled */

struct vslot {
    uintptr_t key;                       /* the entry; 0 = empty; never removed */
    uint32_t rec;                        /* record index + 1; 0 while being set */
};

enum { PM_CLOSED, PM_OPENING, PM_OPEN };

/* The region's first page: wiped (zeroed) in a forked child with the rest. */
struct vhead {
    uint32_t pm_state;                   /* PM_CLOSED in a child: its pagemap is not open */
    uint32_t nrec;                       /* records handed out */
};

static struct {
    struct vhead *head;
    struct vslot *slots;
    struct vrec *recs;
    uint64_t slot_mask;
    uint32_t rec_cap;
    unsigned page_shift;
    int fd;                              /* not wiped: a child closes its parent's */
} V = { .fd = -1 };

uint64_t mrc_verify_period;
static int off_said, full_said;
static __thread uint64_t tls_countdown;  /* hits until the next check, per thread */
static __thread unsigned tls_turn;       /* which window of a large registration next */

static void verify_off(const char *why)
{
    __atomic_store_n(&mrc_verify_period, 0, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&off_said, 1, __ATOMIC_ACQ_REL))
        MRC_WARN("MRCACHE_VERIFY: %s: verification is off", why);
}

static const char no_pfn_why[] =
    "/proc/self/pagemap shows no page frame numbers (they need CAP_SYS_ADMIN when it is opened)";

static int pm_open(void)
{
    return mrc_sys_open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
}

/* The pagemap file of this process, opened again in a forked child: the one inherited
 * reads the parent's page tables. -1 if it cannot be opened. */
static int pm_fd(void)
{
    uint32_t s = __atomic_load_n(&V.head->pm_state, __ATOMIC_ACQUIRE);
    while (s != PM_OPEN) {
        if (s == PM_CLOSED &&
            __atomic_compare_exchange_n(&V.head->pm_state, &s, PM_OPENING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            if (V.fd >= 0)
                mrc_sys_close(V.fd);
            V.fd = pm_open();
            if (V.fd < 0)
                verify_off("cannot open /proc/self/pagemap");
            __atomic_store_n(&V.head->pm_state, PM_OPEN, __ATOMIC_RELEASE);
            return V.fd;
        }
        sched_yield();           /* another thread is opening it: a system call away */
        s = __atomic_load_n(&V.head->pm_state, __ATOMIC_ACQUIRE);
    }
    return V.fd;
}

enum { PM_OK, PM_UNREADABLE, PM_NO_PFN };

/* Reads n pagemap entries from page number first. PM_NO_PFN (and verification off) when
 * a present page shows frame 0: the file was opened without the privilege. */
static int pm_read(uint64_t first, unsigned n, uint64_t *out)
{
    int fd = pm_fd();
    if (fd < 0)
        return PM_UNREADABLE;
    ssize_t want = (ssize_t)(n * sizeof(uint64_t));
    if (mrc_sys_pread(fd, out, (size_t)want, (off_t)(first * sizeof(uint64_t))) != want)
        return PM_UNREADABLE;
    for (unsigned i = 0; i < n; i++)
        if ((out[i] & PM_PRESENT) && !(out[i] & PM_PFN_MASK)) {
            verify_off(no_pfn_why);
            return PM_NO_PFN;
        }
    return PM_OK;
}

static uint64_t key_hash(uintptr_t k)
{
    uint64_t h = (uint64_t)k;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static void table_full(void)
{
    if (!__atomic_exchange_n(&full_said, 1, __ATOMIC_ACQ_REL))
        MRC_WARN("MRCACHE_VERIFY: side table full (%u registrations): later ones are not verified", V.rec_cap);
}

/* The record of entry e, made on first sight; NULL when the table is full. Lock-free:
 * the key is claimed by compare-and-swap and the record index published after it. */
static struct vrec *rec_of(const struct mrc_entry *e)
{
    uintptr_t key = (uintptr_t)e;
    uint64_t i = key_hash(key) & V.slot_mask;
    for (uint64_t n = 0; n <= V.slot_mask; n++, i = (i + 1) & V.slot_mask) {
        struct vslot *s = &V.slots[i];
        uintptr_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
        if (k == 0) {
            if (__atomic_load_n(&V.head->nrec, __ATOMIC_RELAXED) >= V.rec_cap) {
                table_full();
                return NULL;
            }
            if (__atomic_compare_exchange_n(&s->key, &k, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                uint32_t r = __atomic_fetch_add(&V.head->nrec, 1, __ATOMIC_RELAXED);
                __atomic_store_n(&s->rec, r < V.rec_cap ? r + 1 : REC_NONE, __ATOMIC_RELEASE);
                if (r >= V.rec_cap) {
                    table_full();
                    return NULL;
                }
                return &V.recs[r];
            }
            /* k now holds the key another thread claimed this slot for. */
        }
        if (k != key)
            continue;
        uint32_t r;
        while (!(r = __atomic_load_n(&s->rec, __ATOMIC_ACQUIRE)))
            sched_yield();       /* its claimer is a few instructions from publishing */
        return r == REC_NONE ? NULL : &V.recs[r - 1];
    }
    table_full();
    return NULL;
}

static void rec_lock(struct vrec *r)
{
    while (__atomic_exchange_n(&r->lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void rec_unlock(struct vrec *r)
{
    __atomic_store_n(&r->lock, 0, __ATOMIC_RELEASE);
}

/* Which pages of a registration are recorded: nwin windows of wlen pages, window w
 * starting win_first(g, w) pages after page number first. */
struct geom {
    uint64_t first, npages;
    unsigned nwin, wlen;
};

static void geom_of(uint64_t start, uint64_t len, struct geom *g)
{
    g->first = start >> V.page_shift;
    g->npages = ((start + len - 1) >> V.page_shift) - g->first + 1;
    if (g->npages <= REC_PAGES) {
        g->nwin = 1;
        g->wlen = (unsigned)g->npages;
    } else {
        g->nwin = REC_WINDOWS;
        g->wlen = WIN_PAGES;
    }
}

static uint64_t win_first(const struct geom *g, unsigned w)
{
    return g->nwin == 1 ? 0 : (g->npages - g->wlen) * w / (g->nwin - 1);
}

static uint32_t entry_lkey(const struct mrc_entry *e)
{
    return ((const struct ibv_mr *)e->reg)->lkey;
}

static int tag_matches(const struct vrec *r, const struct mrc_entry *e, uint64_t start, uint64_t len)
{
    return r->start == start && r->len == len && r->reg == e->reg && r->lkey == entry_lkey(e);
}

/* Records the frames under e (the caller holds a reference): right after it was
 * registered, or at the first sight of an entry registered by another thread. */
static void record(const struct mrc_entry *e)
{
    struct vrec *r = rec_of(e);
    if (!r)
        return;
    uint64_t start = mrc_entry_start(e), len = mrc_entry_len(e);
    struct geom g;
    geom_of(start, len, &g);
    uint64_t pfn[REC_PAGES];
    for (unsigned w = 0; w < g.nwin; w++)
        if (pm_read(g.first + win_first(&g, w), g.wlen, pfn + w * g.wlen) != PM_OK)
            return;
    for (unsigned i = 0; i < g.nwin * g.wlen; i++)
        pfn[i] = (pfn[i] & PM_PRESENT) ? pfn[i] & PM_PFN_MASK : 0;
    rec_lock(r);
    r->start = start;
    r->len = len;
    r->reg = e->reg;
    r->lkey = entry_lkey(e);
    r->reported = 0;
    memcpy(r->pfn, pfn, g.nwin * g.wlen * sizeof(pfn[0]));
    rec_unlock(r);
}

enum { V_OK, V_UNCHECKED, V_STALE };

/* Compares the recorded frames of e within [addr, addr+len) with the current mapping.
 * V_STALE also when another thread found it first (only the first reports it). */
static int check(const struct mrc_entry *e, uint64_t addr, uint64_t len)
{
    struct vrec *r = rec_of(e);
    if (!r)
        return V_UNCHECKED;
    uint64_t start = mrc_entry_start(e), elen = mrc_entry_len(e);
    struct geom g;
    geom_of(start, elen, &g);
    uint64_t q0 = addr >> V.page_shift, q1 = (addr + len - 1) >> V.page_shift;
    unsigned over[REC_WINDOWS], nover = 0;
    for (unsigned w = 0; w < g.nwin; w++) {
        uint64_t wf = g.first + win_first(&g, w);
        if (wf <= q1 && q0 <= wf + g.wlen - 1)
            over[nover++] = w;
    }
    if (!nover)
        return V_UNCHECKED;
    /* One window per check, in turn: a pagemap read costs microseconds per call. */
    unsigned w = over[tls_turn++ % nover];
    uint64_t wf = g.first + win_first(&g, w), wl = wf + g.wlen - 1;
    uint64_t a = wf > q0 ? wf : q0, b = wl < q1 ? wl : q1;
    unsigned lo = w * g.wlen + (unsigned)(a - wf), hi = lo + (unsigned)(b - a + 1);
    uint64_t cur[REC_PAGES];
    if (pm_read(a, hi - lo, cur + lo) != PM_OK)
        return V_UNCHECKED;

    int stale = 0, first_report = 0;
    unsigned at;
    uint64_t was = 0;
    rec_lock(r);
    if (!tag_matches(r, e, start, elen)) {
        /* Made by another thread that has not recorded it yet, or first seen here. */
        rec_unlock(r);
        record(e);
        return V_UNCHECKED;
    }
    for (at = lo; at < hi; at++) {
        was = r->pfn[at];
        if (was && (!(cur[at] & PM_PRESENT) || (cur[at] & PM_PFN_MASK) != was)) {
            stale = 1;
            break;
        }
    }
    if (stale && !r->reported)
        first_report = r->reported = 1;
    rec_unlock(r);

    mrc_stat_add(MRC_STAT_VERIFY_CHECKS, 1);
    if (!stale)
        return V_OK;
    if (first_report) {
        mrc_stat_add(MRC_STAT_VERIFY_STALE, 1);
        uint64_t page = (wf + (at - w * g.wlen)) << V.page_shift;
        if (cur[at] & PM_PRESENT)
            MRC_ERROR("MRCACHE_VERIFY: stale registration [0x%llx, 0x%llx): page 0x%llx maps frame 0x%llx, "
                      "the MR pinned frame 0x%llx (an unmap no monitor saw); invalidated, registering again",
                      (unsigned long long)start, (unsigned long long)(start + elen), (unsigned long long)page,
                      (unsigned long long)(cur[at] & PM_PFN_MASK), (unsigned long long)was);
        else
            MRC_ERROR("MRCACHE_VERIFY: stale registration [0x%llx, 0x%llx): page 0x%llx is not the page the MR "
                      "pinned (not present now; an unmap no monitor saw); invalidated, registering again",
                      (unsigned long long)start, (unsigned long long)(start + elen), (unsigned long long)page);
    }
    return V_STALE;
}

void mrc_verify_init(uint64_t period, uint64_t max_entries)
{
    if (!period)
        return;
    long ps = sysconf(_SC_PAGESIZE);
    V.page_shift = (unsigned)__builtin_ctzl(ps > 0 ? (unsigned long)ps : 4096ul);
    uint64_t cap = max_entries < REC_MAX - REC_SLACK ? max_entries + REC_SLACK : REC_MAX;
    uint64_t nslots = 1;
    while (nslots < 2 * cap)     /* half full at most: short probes */
        nslots <<= 1;
    size_t head = 4096, slots = nslots * sizeof(struct vslot), recs = cap * sizeof(struct vrec);
    size_t size = (head + slots + recs + 4095) & ~(size_t)4095;
    /* MAP_NORESERVE, as only records in use are ever touched. */
    char *m = mrc_raw_map(size, MAP_NORESERVE);
    if (!m) {
        verify_off("cannot map the side table");
        return;
    }
    /* A forked child starts with an empty table and no pagemap file: its registrations
     * are its own, and a record lock held at fork by another thread would never open. */
    if (mrc_sys_madvise(m, size, MADV_WIPEONFORK)) {
        mrc_raw_unmap(m, size);
        verify_off("MADV_WIPEONFORK unsupported (Linux 4.14)");
        return;
    }
    V.head = (struct vhead *)m;
    V.slots = (struct vslot *)(m + (long)head);
    V.recs = (struct vrec *)(m + (long)(head + slots));
    V.slot_mask = nslots - 1;
    V.rec_cap = (uint32_t)cap;
    /* Opened now: the privilege is checked at open, so a program that drops it later
     * keeps verification. */
    V.fd = pm_open();
    if (V.fd < 0) {
        verify_off("cannot open /proc/self/pagemap");
        return;
    }
    V.head->pm_state = PM_OPEN;
    __atomic_store_n(&mrc_verify_period, period, __ATOMIC_RELAXED);
}

/* Whether this hit is the thread's one in period (the first hit is). */
static int sampled(uint64_t period)
{
    if (tls_countdown > 1) {
        tls_countdown--;
        return 0;
    }
    tls_countdown = period;
    return 1;
}

int mrc_verify_get(struct mrc_cache *c, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                   uint32_t access, struct mrc_entry **out)
{
    int saved = errno;
    /* The cache counts hits per thread: a change across the get says it was one. */
    uint64_t mark = mrc_stats_thread_hits();
    int rc = mrc_cache_get(c, domain, addr, len, iova, access, out);
    if (rc)
        return rc;
    uint64_t period = __atomic_load_n(&mrc_verify_period, __ATOMIC_RELAXED);
    if (!period)
        goto done;               /* turned off since the caller looked */
    if (mrc_stats_thread_hits() == mark) {
        record(*out);
        goto done;
    }
    if (!sampled(period) || check(*out, addr, len) != V_STALE)
        goto done;
    struct mrc_entry *e = *out;
    mrc_cache_invalidate(c, mrc_entry_start(e), mrc_entry_len(e), MRC_INVAL_API);
    mrc_cache_drop(c, e);
    /* No entry older than that invalidation can be found now, and a miss registering
     * across it is never cached: whatever this returns pinned the pages mapped now. */
    rc = mrc_cache_get(c, domain, addr, len, iova, access, out);
    if (rc)
        return rc;
    record(*out);
done:
    errno = saved;
    return 0;
}
