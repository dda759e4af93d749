/* test_events.c - the cache core's side of its contract with the sources of memory
 * events (core/events.h), against a fake source and the counting fake back-end: every
 * back-end registration's range is watched before the back-end is called and let go
 * exactly once when it is gone (deregistered, failed, refused by an expansion, taken out
 * of the cache; a refused deregistration stays watched), after the back-end prepared
 * the memory, and never one the back-end shares;
 * events a source read but did not publish yet are flushed before a lookup; the sources
 * are checked before each back-end registration and never on a hit; what pins nothing
 * is prefetched on each get; a domain's flush tells the back-end; what is known of a
 * miss's memory is asked once per question and handed along, each registration getting
 * the description of its own range; the causes' names. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/cache.h"
#include "core/events.h"
#include "fake_backend.h"

#define PG 4096u
#define LW 0x1u
#define RW 0x2u

/* ---- the fake source: a multiset of watched ranges ---- */

#define MAX_WATCHED 64
static struct { uint64_t addr, len; } watched[MAX_WATCHED];
static unsigned nwatched;
static uint64_t watches, unwatches, unmatched, checks, quiesces;
static uint32_t pending;

static void src_watch(uint64_t addr, uint64_t len)
{
    watches++;
    if (nwatched < MAX_WATCHED) {
        watched[nwatched].addr = addr;
        watched[nwatched].len = len;
        nwatched++;
    }
}

static void src_unwatch(uint64_t addr, uint64_t len)
{
    unwatches++;
    for (unsigned i = 0; i < nwatched; i++)
        if (watched[i].addr == addr && watched[i].len == len) {
            watched[i] = watched[--nwatched];
            return;
        }
    unmatched++;   /* let go of a range never watched, or twice */
}

static int is_watched(uint64_t addr, uint64_t len)
{
    for (unsigned i = 0; i < nwatched; i++)
        if (watched[i].addr == addr && watched[i].len == len)
            return 1;
    return 0;
}

static void src_check(void)
{
    checks++;
}

/* ---- the back-end: the fake, checking that each range is watched when it is called ---- */

static struct fake_backend fb;
static struct mrc_cache cache;
static uint64_t regs_unwatched;    /* back-end registrations called on an unwatched range */
static uint64_t refuse_above;      /* registrations longer than this fail (0: none) */
static char dom_a, dom_b;
static void *shared_domain;        /* its registrations are one the back-end shares */
static void *unpinned_domain;      /* its registrations pin nothing */
static struct fake_reg shared_reg = { .live = 1 };

/* ---- the description of a range ---- */

static uint64_t described[8];       /* describe calls per question bit */
static uint64_t described_first;    /* the range of the last PAGEABLE question */
static uint64_t ranges_wrong;       /* back-end calls whose description was another range's */
static int ask_in_reg;              /* the back-end asks, twice per call */

static void src_describe(struct mrc_range *r, uint32_t ask)
{
    for (int b = 0; b < 3; b++)
        if (ask & (1u << b))
            described[b]++;
    if (ask & MRC_RANGE_HUGE_OK)
        r->huge_ok = 1;
    if (ask & MRC_RANGE_PAGEABLE) {
        r->pageable = 1;
        described_first = r->first;
    }
    if (ask & MRC_RANGE_VMA) {
        r->vma_ok = 1;
        r->vma.start = r->first & ~(uint64_t)(64 * PG - 1);
        r->vma.end = r->vma.start + 64 * PG;
    }
}

static int ev_reg(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                  struct mrc_range *r, void **out)
{
    if (!is_watched(addr, len))
        regs_unwatched++;
    if (r->first != addr || r->last != addr + len - 1)
        ranges_wrong++;
    for (int i = 0; ask_in_reg && i < 2; i++)
        if (!mrc_range_ask(r, MRC_RANGE_HUGE_OK | MRC_RANGE_PAGEABLE)->pageable)
            ranges_wrong++;
    if (refuse_above && len > refuse_above)
        return -EINVAL;
    int rc = fake_reg(ctx, domain, addr, len, iova, access, r, out);
    return rc == 0 && domain == unpinned_domain ? MRC_REG_UNPINNED : rc;
}

static int ev_dereg(void *ctx, void *reg)
{
    return reg == &shared_reg ? 0 : fake_dereg(ctx, reg);
}

static uint64_t shared_asked_watched;   /* the back-end asked to share while the range was watched */
static int ev_shared(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                     struct mrc_range *r, void **out)
{
    (void)ctx, (void)iova, (void)access, (void)r;
    if (is_watched(addr, len))
        shared_asked_watched++;
    if (domain != shared_domain)
        return 0;
    *out = &shared_reg;
    return 1;
}

/* What the back-end did to the memory before its pin: the range must not be watched yet
 * (a watched range refuses MADV_COLLAPSE of partly populated huge extents). */
static uint64_t prepares, prepared_watched;
static void ev_prepare(void *ctx, uint64_t addr, uint64_t len, uint32_t access, struct mrc_range *r)
{
    (void)ctx, (void)access, (void)r;
    prepares++;
    if (is_watched(addr, len))
        prepared_watched++;
}

static uint64_t prefetches, prefetch_iova, prefetch_len;
static void ev_prefetch(void *ctx, void *domain, void *reg, uint64_t iova, uint64_t len, uint32_t access)
{
    (void)ctx;
    (void)domain;
    (void)reg;
    (void)access;
    prefetches++;
    prefetch_iova = iova;
    prefetch_len = len;
}

static void *flushed_domain;
static uint64_t live_at_flush;
static void ev_domain_flushed(void *ctx, void *domain)
{
    (void)ctx;
    flushed_domain = domain;
    live_at_flush = fb.live;
}

/* quiesce: the unmap the source read (the range set here) is published now. */
static uint64_t held_addr, held_len;
static void src_quiesce(void)
{
    quiesces++;
    if (held_len)
        mrc_cache_invalidate(&cache, held_addr, held_len, MRC_INVAL_MUNMAP);
    held_len = 0;
    __atomic_store_n(&pending, 0u, __ATOMIC_RELEASE);
}

static int expand_wide(void *arg, struct mrc_range *r, uint32_t access, uint64_t *first, uint64_t *last)
{
    (void)arg;
    (void)access;
    if (!mrc_range_ask(r, MRC_RANGE_VMA)->vma_ok)
        return 0;
    *first = *first & ~(uint64_t)(16 * PG - 1);
    *last = *first + 16 * PG - 1;
    return 1;
}

static int cache_live;

static void end(void)
{
    if (!cache_live)
        return;
    cache_live = 0;
    struct mrc_cache_leftovers left;
    CHECK(mrc_cache_destroy(&cache, &left) == 0);
    CHECKF(watches == unwatches && nwatched == 0 && unmatched == 0,
           "at the end: %llu watches, %llu unwatches, %u ranges still watched, %llu unwatches of nothing",
           (unsigned long long)watches, (unsigned long long)unwatches, nwatched, (unsigned long long)unmatched);
    CHECKF(regs_unwatched == 0, "%llu registrations made on an unwatched range", (unsigned long long)regs_unwatched);
    CHECKF(prepared_watched == 0 && shared_asked_watched == 0,
           "%llu of %llu preparations and %llu share questions on a watched range", (unsigned long long)prepared_watched,
           (unsigned long long)prepares, (unsigned long long)shared_asked_watched);
}

static void start(int expand)
{
    end();
    fake_init(&fb);
    nwatched = 0;
    watches = unwatches = unmatched = checks = quiesces = regs_unwatched = 0;
    prefetches = 0;
    prepares = prepared_watched = shared_asked_watched = 0;
    refuse_above = 0;
    memset(described, 0, sizeof(described));
    ranges_wrong = 0;
    ask_in_reg = 0;
    shared_domain = unpinned_domain = flushed_domain = NULL;
    pending = 0;
    held_len = 0;
    struct mrc_cache_params p = {
        .ops = { .shared = ev_shared, .prepare = ev_prepare, .reg = ev_reg, .dereg = ev_dereg, .ctx = &fb,
                 .prefetch = ev_prefetch, .domain_flushed = ev_domain_flushed },
        .src = { .pending = &pending, .quiesce = src_quiesce, .check = src_check, .watch = src_watch,
                 .unwatch = src_unwatch, .describe = src_describe },
        .max_entries = 100,
        .max_bytes = 1ull << 30,
        .max_deferred_bytes = 1u << 20,
        .page_size = PG,
        .remote_mask = RW,
        .local_super_mask = LW,
        .expand = expand ? expand_wide : NULL,
    };
    CHECK(mrc_cache_init(&cache, &p) == 0);
    cache_live = 1;
}

static struct mrc_entry *get(void *dom, uint64_t addr, uint64_t len, uint32_t access)
{
    struct mrc_entry *e = NULL;
    int rc = mrc_cache_get(&cache, dom, addr, len, addr, access, &e);
    CHECKF(rc == 0, "get(%#llx, %llu) = %d", (unsigned long long)addr, (unsigned long long)len, rc);
    return e;
}

static void test_registration_watched_until_deregistered(void)
{
    start(0);
    struct mrc_entry *e = get(&dom_a, 0x100000, 3 * PG, LW);
    CHECK(watches == 1 && is_watched(0x100000, 3 * PG));
    CHECK(mrc_cache_put(&cache, e) == 0);
    e = get(&dom_a, 0x100000, PG, LW);   /* a hit: nothing more watched */
    CHECK(watches == 1 && fb.regs == 1);
    CHECK(mrc_cache_put(&cache, e) == 0);
    CHECK(is_watched(0x100000, 3 * PG));   /* idle in the cache: its pages still pinned */
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 0);
    CHECK(unwatches == 1 && nwatched == 0);
    end();
}

static void test_invalidated_entry_unwatched_at_its_deregistration(void)
{
    start(0);
    struct mrc_entry *e = get(&dom_a, 0x200000, PG, LW);
    mrc_cache_invalidate(&cache, 0x200000, PG, MRC_INVAL_MUNMAP);
    CHECK(unwatches == 0);   /* never in the invalidation: it may be a hook */
    CHECK(mrc_cache_put(&cache, e) == 0);
    CHECK(unwatches == 1 && nwatched == 0);
    end();
}

static void test_failed_registration_unwatched(void)
{
    start(0);
    fb.fail_errno = EINVAL;
    struct mrc_entry *e = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x300000, PG, 0x300000, LW, &e) == -EINVAL);
    CHECK(watches == 1 && unwatches == 1 && nwatched == 0);
    fb.fail_errno = 0;
    end();
}

static void test_refused_wider_range_unwatched(void)
{
    start(1);
    refuse_above = 4 * PG;   /* the expansion's 16 pages are refused, the request's page is not */
    struct mrc_entry *e = get(&dom_a, 0x400000 + 5 * PG, PG, LW);
    CHECK(mrc_entry_len(e) == PG);
    CHECK(watches == 2 && unwatches == 1 && is_watched(0x400000 + 5 * PG, PG));
    CHECK(mrc_cache_put(&cache, e) == 0);
    refuse_above = 0;
    e = get(&dom_a, 0x800000, PG, LW);   /* widened and made */
    CHECK(mrc_entry_len(e) == 16 * PG && is_watched(0x800000, 16 * PG));
    CHECK(mrc_cache_put(&cache, e) == 0);
    end();
}

static void test_shared_registration_never_watched(void)
{
    start(0);
    shared_domain = &dom_b;
    struct mrc_entry *e = get(&dom_b, 0x500000, PG, LW);
    CHECK(e->unpinned == MRC_REG_SHARED && prepares == 0);   /* nothing pinned, nothing prepared */
    CHECK(watches == 0 && unwatches == 0);
    CHECK(mrc_cache_put(&cache, e) == 0);
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 0);
    CHECK(unwatches == 0 && unmatched == 0);   /* its deregistration lets go of nothing */
    end();
}

static void test_prepared_before_watched(void)
{
    start(0);
    CHECK(mrc_cache_put(&cache, get(&dom_a, 0x580000, 4 * PG, LW)) == 0);
    CHECK(prepares == 1 && watches == 1);
    end();   /* checks prepared_watched */
}

static void test_taken_registration_unwatched(void)
{
    start(0);
    struct mrc_entry *e = get(&dom_a, 0x600000, 2 * PG, LW);
    void *reg;
    CHECK(mrc_cache_take(&cache, e, &reg) == 0);
    CHECK(unwatches == 1 && nwatched == 0);   /* its new owner deregisters it without us */
    CHECK(fake_dereg(&fb, reg) == 0);
    end();
}

static void test_refused_deregistration_stays_watched(void)
{
    start(0);
    struct mrc_entry *e = get(&dom_a, 0x700000, PG, LW);
    CHECK(mrc_cache_put(&cache, e) == 0);
    fb.dereg_fail_errno = EBUSY;
    fb.dereg_fail_left = UINT64_MAX;
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 1);
    CHECK(unwatches == 0 && is_watched(0x700000, PG));   /* still registered, still pinned */
    fb.dereg_fail_errno = 0;
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 0);
    CHECK(unwatches == 1 && nwatched == 0);
    end();
}

static void test_pending_events_published_before_the_lookup(void)
{
    start(0);
    struct mrc_entry *e = get(&dom_a, 0x900000, PG, LW);
    CHECK(mrc_cache_put(&cache, e) == 0);
    for (int i = 0; i < 10; i++)
        CHECK(mrc_cache_put(&cache, get(&dom_a, 0x900000, PG, LW)) == 0);
    CHECK(quiesces == 0 && fb.regs == 1);   /* nothing pending: nothing waited for */
    /* The source has read the unmap of the range; its unmapper returned and registers
     * the address again: the old registration must not serve it. */
    held_addr = 0x900000;
    held_len = PG;
    __atomic_store_n(&pending, 1u, __ATOMIC_RELEASE);
    e = get(&dom_a, 0x900000, PG, LW);
    CHECK(quiesces == 1);
    CHECKF(fb.regs == 2, "served by the registration of the unmapped pages (%llu registrations)",
           (unsigned long long)fb.regs);
    CHECK(mrc_cache_put(&cache, e) == 0);
    end();
}

static void test_sources_checked_before_each_registration_only(void)
{
    start(0);
    for (int i = 0; i < 4; i++)
        CHECK(mrc_cache_put(&cache, get(&dom_a, 0xa00000 + (uint64_t)i * 2 * PG, PG, LW)) == 0);
    CHECK(checks == 4);
    for (int i = 0; i < 4; i++)
        CHECK(mrc_cache_put(&cache, get(&dom_a, 0xa00000 + (uint64_t)i * 2 * PG, PG, LW)) == 0);
    CHECK(checks == 4);   /* hits ask nothing */
    end();
}

static void test_unpinned_prefetched_on_each_get(void)
{
    start(0);
    unpinned_domain = &dom_b;
    CHECK(mrc_cache_put(&cache, get(&dom_a, 0xb00000, PG, LW)) == 0);
    CHECK(prefetches == 0);   /* pinned: nothing to fault in */
    struct mrc_entry *e = NULL;
    CHECK(mrc_cache_get(&cache, &dom_b, 0xc00000 + 100, 200, 0xc00000 + 100, LW, &e) == 0);
    CHECK(prefetches == 1 && prefetch_iova == 0xc00000 + 100 && prefetch_len == 200);
    CHECK(mrc_cache_put(&cache, e) == 0);
    CHECK(mrc_cache_get(&cache, &dom_b, 0xc00000 + 300, 50, 0xc00000 + 300, LW, &e) == 0);   /* a hit */
    CHECK(prefetches == 2 && prefetch_iova == 0xc00000 + 300 && prefetch_len == 50);
    CHECK(mrc_cache_put(&cache, e) == 0);
    end();
}

static void test_domain_flush_tells_the_backend(void)
{
    start(0);
    CHECK(mrc_cache_put(&cache, get(&dom_a, 0xd00000, PG, LW)) == 0);
    CHECK(mrc_cache_put(&cache, get(&dom_b, 0xe00000, PG, LW)) == 0);
    CHECK(mrc_cache_flush_domain(&cache, &dom_a) == 0);
    CHECK(flushed_domain == &dom_a && live_at_flush == 1);   /* after its entries went, not the other's */
    CHECK(is_watched(0xe00000, PG) && !is_watched(0xd00000, PG));
    end();
}

static void test_range_described_once_and_handed_along(void)
{
    start(1);
    ask_in_reg = 1;
    refuse_above = 4 * PG;   /* the expansion's wider range is refused: the request is registered */
    fb.limit_bytes = 2 * PG;   /* ... and first refused for memory, then made once idle entries went */
    CHECK(mrc_cache_put(&cache, get(&dom_a, 0xf00000, 2 * PG, LW)) == 0);   /* fills the limit */
    memset(described, 0, sizeof(described));
    struct mrc_entry *e = get(&dom_a, 0xf40000, 2 * PG, LW);
    CHECK(fb.regs == 2 && mrc_entry_start(e) == 0xf40000);
    CHECKF(described[1] == 1, "the mapping asked %llu times", (unsigned long long)described[1]);
    /* The refused wider range had its own description; the request's two tries (the
     * second after evicting) share one. */
    CHECKF(described[2] == 2 && described_first == 0xf40000, "pageable asked %llu times, last for %#llx",
           (unsigned long long)described[2], (unsigned long long)described_first);
    CHECK(described[0] == 2);
    CHECK(ranges_wrong == 0);
    CHECK(mrc_cache_put(&cache, e) == 0);
    fb.limit_bytes = 0;
    end();
}

static void test_merged_union_described_once(void)
{
    start(0);
    ask_in_reg = 1;
    struct mrc_entry *a = get(&dom_a, 0x6000000, 4 * PG, LW);
    CHECK(mrc_cache_put(&cache, get(&dom_a, 0x6100000, 4 * PG, LW)) == 0);   /* idle, evictable */
    fb.limit_bytes = 10 * PG;   /* the union (6 pages) fits only once the idle entry went */
    memset(described, 0, sizeof(described));
    struct mrc_entry *b = get(&dom_a, 0x6000000 + 2 * PG, 4 * PG, LW);
    CHECK(mrc_entry_start(b) == 0x6000000 && mrc_entry_len(b) == 6 * PG);   /* merged */
    CHECKF(described[2] == 1 && described_first == 0x6000000,
           "the merged union's memory described %llu times in one miss", (unsigned long long)described[2]);
    CHECK(ranges_wrong == 0);
    fb.limit_bytes = 0;
    CHECK(mrc_cache_put(&cache, a) == 0);
    CHECK(mrc_cache_put(&cache, b) == 0);
    end();
}

static void test_cause_names(void)
{
    static const char *const names[MRC_INVAL_LAST] = {
        [MRC_INVAL_MUNMAP] = "munmap", [MRC_INVAL_MREMAP] = "mremap", [MRC_INVAL_MADVISE] = "madvise",
        [MRC_INVAL_MMAP_FIXED] = "mmap_fixed", [MRC_INVAL_SHM] = "shm", [MRC_INVAL_BRK] = "brk",
        [MRC_INVAL_FREE] = "free", [MRC_INVAL_TRIM] = "trim", [MRC_INVAL_API] = "api",
        [MRC_INVAL_SOURCE_LOST] = "source_lost", [MRC_INVAL_FILE] = "file",
    };
    for (int i = 0; i < MRC_INVAL_LAST; i++)
        CHECKF(names[i] && strcmp(mrc_inval_cause_name((enum mrc_inval_cause)i), names[i]) == 0,
               "cause %d is named %s", i, mrc_inval_cause_name((enum mrc_inval_cause)i));
}

int main(void)
{
    RUN(test_registration_watched_until_deregistered);
    RUN(test_invalidated_entry_unwatched_at_its_deregistration);
    RUN(test_failed_registration_unwatched);
    RUN(test_refused_wider_range_unwatched);
    RUN(test_shared_registration_never_watched);
    RUN(test_prepared_before_watched);
    RUN(test_taken_registration_unwatched);
    RUN(test_refused_deregistration_stays_watched);
    RUN(test_pending_events_published_before_the_lookup);
    RUN(test_sources_checked_before_each_registration_only);
    RUN(test_unpinned_prefetched_on_each_get);
    RUN(test_domain_flush_tells_the_backend);
    RUN(test_range_described_once_and_handed_along);
    RUN(test_merged_union_described_once);
    RUN(test_cause_names);
    CHECK_EXIT();
}
