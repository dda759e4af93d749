/* prepare.c - huge pages and parallel population before a miss's pin: one page scan
 * of the range classifies its 2 MiB extents (empty, base pages, huge) and counts what
 * is not resident; empty extents get MADV_HUGEPAGE (so that the fault-in makes huge
 * pages), extents of base pages MADV_COLLAPSE (in collapse mode), and a large enough
 * absent part is populated by several threads; and, while a source that watches by
 * splitting mappings is on, a writable pin's first page is faulted in before the watch
 * (mrc_prepare_touch_first). Invariants: advice goes only where the
 * range's description says huge pages may be (private anonymous memory, and none once
 * the program has said MADV_NOHUGEPAGE anywhere: runtime/describe.c), asked only when a
 * range is large enough for advice;
 * advice goes straight to the kernel (raw system calls: it discards nothing, so no
 * monitor needs it, and libmrcache's madvise hook would release cached registrations
 * before a collapse); every failure leaves the registration to proceed as it would. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/pagescan.h"
#include "backend/prepare.h"
#include "util/clock.h"
#include "util/hot.h"
#include "util/log.h"
#include "util/stats.h"
#include "util/sys.h"

static struct mrc_prepare_params prm;
static uint64_t page;
static int touch_first;   /* mrc_prepare_touch_first was called */
static int thp_never;   /* THP disabled system-wide: MADV_HUGEPAGE would change nothing */

/* Advice calls per registration at most: each run of extents advised may split a
 * mapping in two, and the process's mappings are bounded (vm.max_map_count). */
#define MAX_ADVICE 64
/* Each populating thread gets at least this much; below two shares the pin's own
 * fault-in is as fast. */
#define POPULATE_SHARE (16ull << 20)

static int thp_disabled(void)
{
    char buf[128];
    int fd = mrc_sys_open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 1;   /* a kernel without THP */
    ssize_t n = mrc_sys_read(fd, buf, sizeof(buf) - 1);
    mrc_sys_close(fd);
    if (n <= 0)
        return 1;
    buf[n] = 0;
    return strstr(buf, "[never]") != NULL;
}

void mrc_prepare_init(const struct mrc_prepare_params *p)
{
    prm = *p;
    long pg = sysconf(_SC_PAGESIZE);
    page = pg > 0 ? (uint64_t)pg : 4096;
    if (prm.populate_threads < 1)
        prm.populate_threads = 1;
    if (prm.huge_min < MRC_HUGE_SIZE)
        prm.huge_min = MRC_HUGE_SIZE;
    if (prm.huge_mode != MRC_HUGE_OFF && thp_disabled()) {
        thp_never = 1;
        MRC_INFO("MRCACHE_HUGEPAGES: transparent huge pages are disabled here (never); %s",
                 prm.huge_mode == MRC_HUGE_COLLAPSE ? "only MADV_COLLAPSE is tried" : "nothing to advise");
    }
}

enum extent_class { EXT_NONE, EXT_EMPTY, EXT_SMALL, EXT_HUGE };

/* The scan's state: the extents of [lo, hi) (the range's 2 MiB-aligned interior) are
 * classified in order; cur is the first not yet classified, cls what its part seen so
 * far holds. Consecutive extents of one class form a run, advised when it ends. */
struct walk {
    uint64_t lo, hi, cur;
    unsigned cls;
    uint64_t run_s, run_e;
    unsigned run_cls;
    unsigned advice;        /* calls made */
    int huge;               /* advice is on */
    /* What is not resident, over the whole range: its bytes and bounds. */
    uint64_t start, end, absent, absent_lo, absent_hi, seen;
    uint64_t advised, collapsed, refused;
};

static long raw_madvise(uint64_t s, uint64_t e, int advice)
{
    return mrc_sys_madvise((void *)(uintptr_t)s, (size_t)(e - s), advice);
}

static void run_flush(struct walk *w)
{
    if (w->run_e <= w->run_s || w->advice >= MAX_ADVICE)
        return;
    if (w->run_cls == EXT_EMPTY && !thp_never) {
        w->advice++;
        if (raw_madvise(w->run_s, w->run_e, MADV_HUGEPAGE) == 0)
            w->advised += w->run_e - w->run_s;
    } else if (w->run_cls == EXT_SMALL && prm.huge_mode == MRC_HUGE_COLLAPSE) {
        /* Synchronous; the kernel refuses extents with pinned pages (EAGAIN), which are
         * then registered as they are. */
        w->advice++;
        if (raw_madvise(w->run_s, w->run_e, MADV_COLLAPSE) == 0)
            w->collapsed += w->run_e - w->run_s;
        else
            w->refused++;
    }
    w->run_s = w->run_e = 0;
}

static void extent_done(struct walk *w, uint64_t s, uint64_t e, unsigned cls)
{
    if (w->run_e == s && w->run_cls == cls) {
        w->run_e = e;
        return;
    }
    run_flush(w);
    w->run_s = s;
    w->run_e = e;
    w->run_cls = cls;
}

/* Classifies the extents that end at or before upto (aligned): the one at cur with
 * what was seen of it, the rest empty. */
static void advance(struct walk *w, uint64_t upto)
{
    if (upto > w->hi)
        upto = w->hi;
    if (w->cur < upto && w->cls != EXT_NONE) {
        extent_done(w, w->cur, w->cur + MRC_HUGE_SIZE, w->cls);
        w->cur += MRC_HUGE_SIZE;
        w->cls = EXT_NONE;
    }
    if (w->cur < upto) {
        extent_done(w, w->cur, upto, EXT_EMPTY);
        w->cur = upto;
    }
}

static void absent_add(struct walk *w, uint64_t s, uint64_t e)
{
    if (e <= s)
        return;
    w->absent += e - s;
    if (!w->absent_hi)
        w->absent_lo = s;
    w->absent_hi = e;
}

static int walk_fn(uint64_t s, uint64_t e, unsigned flags, void *arg)
{
    struct walk *w = arg;
    absent_add(w, w->seen, s);
    w->seen = e;
    if (!w->huge)
        return 0;
    if (s < w->cur)
        s = w->cur;
    if (e > w->hi)
        e = w->hi;
    if (s >= e)
        return 0;
    advance(w, s & ~(MRC_HUGE_SIZE - 1));
    /* A PMD-mapped page fills its extent: an extent is huge or of base pages. */
    unsigned cls = flags & MRC_PAGES_HUGE ? EXT_HUGE : EXT_SMALL;
    while (w->cur < e) {
        unsigned c = w->cls > cls ? w->cls : cls;   /* with what an earlier run showed */
        if (w->cur + MRC_HUGE_SIZE > e) {
            w->cls = c;   /* the rest of this extent comes with a later run */
            break;
        }
        extent_done(w, w->cur, w->cur + MRC_HUGE_SIZE, c);
        w->cur += MRC_HUGE_SIZE;
        w->cls = EXT_NONE;
    }
    return 0;
}

static int wants_huge(uint64_t len, struct mrc_range *r)
{
    return prm.huge_mode != MRC_HUGE_OFF && len >= prm.huge_min && mrc_range_ask(r, MRC_RANGE_HUGE_OK)->huge_ok;
}

void mrc_prepare_touch_first(void)
{
    __atomic_store_n(&touch_first, 1, __ATOMIC_RELAXED);
}

static void advise_and_populate(uint64_t addr, uint64_t len, int writable, int huge, int populate)
{
    uint64_t t0 = mrc_now_ns();
    struct walk w = { .start = addr, .end = addr + len, .seen = addr, .huge = huge };
    w.lo = (addr + MRC_HUGE_SIZE - 1) & ~(MRC_HUGE_SIZE - 1);
    w.hi = (addr + len) & ~(MRC_HUGE_SIZE - 1);
    w.cur = w.lo;
    if (w.hi <= w.lo)
        w.huge = 0;
    if (mrc_pagescan_resident(addr, addr + len, walk_fn, &w) != 0)
        return;   /* no scan, no knowledge: register as is */
    absent_add(&w, w.seen, w.end);
    if (w.huge) {
        advance(&w, w.hi);
        run_flush(&w);
    }
    if (populate && w.absent >= prm.populate_min) {
        unsigned n = prm.populate_threads;
        if (w.absent / POPULATE_SHARE < n)
            n = (unsigned)(w.absent / POPULATE_SHARE);
        if (n > 1 && mrc_populate(w.absent_lo, w.absent_hi, writable, n) == 0)
            mrc_stat_add(MRC_STAT_POPULATED, w.absent);
    }
    mrc_stat_add(MRC_STAT_HUGE_ADVISED, w.advised);
    mrc_stat_add(MRC_STAT_HUGE_COLLAPSED, w.collapsed);
    mrc_stat_add(MRC_STAT_COLLAPSE_FAILURES, w.refused);
    mrc_stat_add(MRC_STAT_PREPARE_NS, mrc_now_ns() - t0);
}

MRC_HOT void mrc_prepare(uint64_t addr, uint64_t len, int writable, struct mrc_range *r)
{
    int huge = wants_huge(len, r);
    int populate = prm.populate_min && len >= prm.populate_min && prm.populate_threads > 1;
    if (huge || populate)
        advise_and_populate(addr, len, writable, huge, populate);
    /* What the pin does to the first page next (a write fault), done before the watch
     * and after the advice (a huge page then): the mapping gets its anon_vma while
     * whole, so that the pieces a watch splits off share it and merge back when the
     * watch goes. Refused (read-only memory, a kernel before 5.14): the pin finds out. */
    if (writable && __atomic_load_n(&touch_first, __ATOMIC_RELAXED))
        mrc_sys_madvise((void *)(uintptr_t)(addr & ~(page - 1)), page, MADV_POPULATE_WRITE);
}
