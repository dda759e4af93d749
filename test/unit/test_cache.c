/* test_cache.c - the cache core against a counting fake back-end: rights, iova offsets,
 * merging, limits and LRU order, ENOMEM retry, invalidation (in use, deferred, never
 * calling the back-end; one by one and in bulk), flush by domain, forget, gauges and
 * their peaks, the idle bytes, back-end time counted in ticks, a thread's spare entries, the entry
 * pool (batched gets; its reserve, refilled from another thread while gets run and
 * asked for at half), and a threaded stress in which no lookup may return an entry
 * overlapping a range whose invalidation has returned; runs parked by an unmap (never
 * served by a hint, walked in the hook once every slot is taken, settled by flush,
 * eviction and an ENOMEM retry, counted toward the deferred bound); an unmap while a
 * miss registers; a closed cache, closed while a miss registers too; deregistrations
 * the back-end refuses (kept, counted, retried by misses ever less often, by flush,
 * ENOMEM and destroy at once; a private one left with its caller); limits met as
 * registrations held past them are released; a registration taken out of the cache by
 * its only holder, or retired from it while held; registrations too large to keep; idle
 * entries expired; the largest cached registrations listed; the pinned notice. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "core/cache.h"
#include "fake_backend.h"
#include "util/clock.h"

/* Access bits of the tests' own: the core is told which are remote and which local. */
#define LW  0x1u    /* local write */
#define RW  0x2u    /* remote write */
#define RR  0x4u    /* remote read */
#define RLX 0x100u  /* a flag that changes semantics: must match */
#define PG  4096u

static struct fake_backend fb;
static struct mrc_cache cache;
static int cache_live;      /* cache was initialised and not destroyed since */
static uint64_t forgotten;  /* back-end registrations a forget left to "the parent" */
static char dom_a, dom_b;   /* two domains (pds) */

/* Destroys the test's cache, as a program's exit would: everything the test got must
 * have been released (no entry still held, every entry object back in the pool, nothing
 * deferred), and then every registration the back-end made must be gone. A test that
 * forgot a cache on purpose (a forked child's) leaves the old registrations to it. */
static void cache_end(void)
{
    if (!cache_live)
        return;
    cache_live = 0;
    struct mrc_cache_leftovers left;
    int rc = mrc_cache_destroy(&cache, &left);
    CHECKF(rc == 0, "cache destroyed with %llu entries held, %llu entry objects not returned",
           (unsigned long long)left.in_use, (unsigned long long)left.entries);
    CHECKF(rc || fb.live == forgotten, "%llu registrations left on the back-end",
           (unsigned long long)(fb.live - forgotten));
}

/* Initialises the test's cache, destroying the one before (see cache_end). */
static int cache_start(const struct mrc_cache_params *p)
{
    cache_end();
    int rc = mrc_cache_init(&cache, p);
    cache_live = rc == 0;
    return rc;
}

static void setup_with(uint64_t max_entries, uint64_t max_bytes, enum mrc_remote_policy pol)
{
    cache_end();
    fake_init(&fb);
    forgotten = 0;
    struct mrc_cache_params p = {
        .ops = { .reg = fake_reg, .dereg = fake_dereg, .ctx = &fb },
        .max_entries = max_entries,
        .max_bytes = max_bytes,
        .max_deferred_bytes = 1u << 20,
        .page_size = PG,
        .remote_mask = RW | RR,
        .local_super_mask = LW,
        .remote_policy = pol,
    };
    CHECK(cache_start(&p) == 0);
}

/* Entries in the interval tree proper (not young, not parked), as its checker counts
 * them; (size_t)-1 if its invariants are broken. */
static size_t tree_nodes(void)
{
    size_t n;

    return mrc_itree_check(&cache.tree, &n) == 0 ? n : (size_t)-1;
}

/* Entries a lookup can find: in the tree or young (not parked). */
static size_t indexed(void)
{
    return tree_nodes() + cache.nyoung;
}

static void setup(void)
{
    setup_with(1000, 1ull << 40, MRC_REMOTE_EXACT);
}

static struct mrc_entry *get(void *dom, uint64_t addr, uint64_t len, uint32_t access)
{
    struct mrc_entry *e = NULL;
    int rc = mrc_cache_get(&cache, dom, addr, len, addr, access, &e);
    CHECKF(rc == 0, "get(%#llx, %llu, %#x) = %d", (unsigned long long)addr, (unsigned long long)len, access, rc);
    return e;
}

static struct fake_reg *reg_of(struct mrc_entry *e) { return e->reg; }

static void test_hit_after_release(void)
{
    setup();
    struct mrc_entry *e1 = get(&dom_a, 0x10000, 100, LW);
    mrc_cache_put(&cache, e1);
    struct mrc_entry *e2 = get(&dom_a, 0x10000, 100, LW);
    CHECK(e2 == e1);
    CHECK(fb.regs == 1 && fb.deregs == 0);
    mrc_cache_put(&cache, e2);
    CHECK(fb.live == 1);        /* lazy: still registered */
}

static void test_local_rounded_to_pages_and_subrange_hits(void)
{
    setup();
    struct mrc_entry *e = get(&dom_a, 0x10010, 100, LW);
    CHECK(mrc_entry_start(e) == 0x10000 && mrc_entry_len(e) == PG);
    struct mrc_entry *e2 = get(&dom_a, 0x10800, 0x100, LW);   /* same page */
    CHECK(e2 == e && fb.regs == 1);
    mrc_cache_put(&cache, e);
    mrc_cache_put(&cache, e2);
}

static void test_local_superset_serves_read_only_but_not_reverse(void)
{
    setup();
    struct mrc_entry *w = get(&dom_a, 0x20000, PG, LW);
    struct mrc_entry *r = get(&dom_a, 0x20000, PG, 0);
    CHECK(r == w && fb.regs == 1);          /* read-only served by local-write */
    mrc_cache_put(&cache, r);
    mrc_cache_put(&cache, w);

    setup();
    struct mrc_entry *ro = get(&dom_a, 0x20000, PG, 0);
    struct mrc_entry *rw = get(&dom_a, 0x20000, PG, LW);
    CHECK(rw != ro && fb.regs == 2);        /* local-write never served by read-only */
    CHECK(reg_of(rw)->access == LW);
    mrc_cache_put(&cache, ro);
    mrc_cache_put(&cache, rw);
}

static void test_remote_entry_never_serves_local_request(void)
{
    setup();
    struct mrc_entry *rem = get(&dom_a, 0x30000, PG, LW | RW);
    struct mrc_entry *loc = get(&dom_a, 0x30000, PG, LW);
    CHECK(loc != rem && fb.regs == 2);
    CHECK(!(reg_of(loc)->access & RW));     /* the local caller's key grants no remote write */
    mrc_cache_put(&cache, rem);
    mrc_cache_put(&cache, loc);
}

static void test_remote_exact_bytes_and_rights(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x40010, 1000, LW | RW);
    CHECK(mrc_entry_start(a) == 0x40010 && mrc_entry_len(a) == 1000);   /* not rounded */
    mrc_cache_put(&cache, a);
    struct mrc_entry *same = get(&dom_a, 0x40010, 1000, LW | RW);
    CHECK(same == a && fb.regs == 1);
    struct mrc_entry *sub = get(&dom_a, 0x40020, 100, LW | RW);         /* inside, but not exact */
    CHECK(sub != a);
    struct mrc_entry *more = get(&dom_a, 0x40010, 1000, LW | RW | RR);  /* more rights */
    CHECK(more != a);
    struct mrc_entry *fewer = get(&dom_a, 0x40010, 1000, RR);           /* fewer rights */
    CHECK(fewer != a && fewer != more);
    CHECK(fb.regs == 4);
    mrc_cache_put(&cache, same);
    mrc_cache_put(&cache, sub);
    mrc_cache_put(&cache, more);
    mrc_cache_put(&cache, fewer);
}

static void test_remote_never_policy(void)
{
    setup_with(1000, 1ull << 40, MRC_REMOTE_NEVER);
    struct mrc_entry *a = get(&dom_a, 0x40000, PG, LW | RW);
    mrc_cache_put(&cache, a);
    CHECK(fb.live == 0);                    /* rkey revoked at release */
    struct mrc_entry *l = get(&dom_a, 0x40000, PG, LW);
    mrc_cache_put(&cache, l);
    CHECK(fb.live == 1);                    /* local ones still cached */
}

static void test_semantic_flag_must_match(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x50000, PG, LW | RLX);
    struct mrc_entry *b = get(&dom_a, 0x50000, PG, LW);
    CHECK(a != b && fb.regs == 2);
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, b);
}

static void test_domain_and_iova_offset_in_key(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x60000, PG, LW);
    struct mrc_entry *b = get(&dom_b, 0x60000, PG, LW);
    CHECK(a != b && fb.regs == 2);
    struct mrc_entry *z = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x60000, PG, 0x1000, LW, &z) == 0);
    CHECK(z != a && reg_of(z)->iova == 0x1000 && reg_of(z)->addr == 0x60000);
    struct mrc_entry *z2 = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x60000, PG, 0x1000, LW, &z2) == 0);
    CHECK(z2 == z && fb.regs == 3);         /* same offset: a hit */
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, b);
    mrc_cache_put(&cache, z);
    mrc_cache_put(&cache, z2);
}

static void test_merge_overlapping(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x100000, 2 * PG, LW);
    struct mrc_entry *b = get(&dom_a, 0x101000, 2 * PG, LW);   /* shares a page: merged */
    CHECK(mrc_entry_start(b) == 0x100000 && mrc_entry_len(b) == 3 * PG);
    CHECK(fb.regs == 2);
    /* a left the tree but stays valid for its user. */
    CHECK(reg_of(a)->live);
    mrc_cache_put(&cache, a);
    CHECK(!reg_of(a)->live && fb.live == 1);
    struct mrc_entry *c2 = get(&dom_a, 0x100800, PG, LW);     /* inside the union: hit */
    CHECK(c2 == b && fb.regs == 2);
    mrc_cache_put(&cache, b);
    mrc_cache_put(&cache, c2);
    CHECK(indexed() == 1);
}

/* Neighbours that only touch stay apart: their union would pin no less than they do, and
 * registering it would pin the neighbour's pages again. */
static void test_adjacent_entries_stay_apart(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x100000, PG, LW);
    struct mrc_entry *b = get(&dom_a, 0x101000, PG, LW);
    CHECKF(mrc_entry_start(b) == 0x101000 && mrc_entry_len(b) == PG, "registered [%#llx, +%llu)",
           (unsigned long long)mrc_entry_start(b), (unsigned long long)mrc_entry_len(b));
    CHECK(fb.regs == 2 && fb.reg_bytes == 2 * PG && indexed() == 2);
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, b);
    CHECK(fb.live == 2);   /* both cached */
}

/* A merge may at most double what the miss registers: a one-page request overlapping a
 * long entry registers its own page, and a chain of overlapping buffers re-registers no
 * more than twice its bytes in all. */
static void test_merge_at_most_doubles_the_request(void)
{
    setup();
    struct mrc_entry *big = get(&dom_a, 0x200000, 16 * PG, LW);
    struct mrc_entry *p = get(&dom_a, 0x20f000, 2 * PG, LW);  /* its last page and the next */
    CHECKF(mrc_entry_start(p) == 0x20f000 && mrc_entry_len(p) == 2 * PG, "registered [%#llx, +%llu)",
           (unsigned long long)mrc_entry_start(p), (unsigned long long)mrc_entry_len(p));
    CHECK(reg_of(big)->live && indexed() == 2);
    mrc_cache_put(&cache, big);
    mrc_cache_put(&cache, p);

    /* Eight buffers of four pages, each overlapping the one before by a page. */
    setup();
    uint64_t b0 = fb.reg_bytes;
    for (uint64_t i = 0; i < 8; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x400000 + i * 3 * PG, 4 * PG, LW));
    CHECKF(fb.reg_bytes - b0 <= 2 * 8 * 4 * PG, "registered %llu bytes for 8 requests of %llu",
           (unsigned long long)(fb.reg_bytes - b0), (unsigned long long)(4 * PG));
}

/* The newest MRC_YOUNG entries wait outside the tree: a lookup no hint serves still
 * finds them, an unmap still takes them (and its hints stop serving them), and the miss
 * that finds the set full files it into the tree: after the tree's last entry
 * (ascending addresses), then before its first (descending). */
static void test_young_entries(void)
{
    setup();
    const uint64_t base = 0x60000000, slot = 3 * PG;   /* two pages each, a page apart */
    struct mrc_entry *e[MRC_YOUNG];
    for (int i = 0; i < MRC_YOUNG; i++) {
        e[i] = get(&dom_a, base + i * slot, 2 * PG, LW);
        mrc_cache_put(&cache, e[i]);
    }
    CHECK(cache.nyoung == MRC_YOUNG && tree_nodes() == 0 && cache.tree_count == MRC_YOUNG);
    for (int i = 0; i < MRC_YOUNG; i++) {   /* second pages: no hint yet */
        struct mrc_entry *h = get(&dom_a, base + i * slot + PG, PG, LW);
        CHECKF(h == e[i], "young entry %d not found", i);
        mrc_cache_put(&cache, h);
    }
    CHECK(fb.regs == MRC_YOUNG);
    /* Entry 3's second page and entry 4's first, with entry 3 in use. */
    struct mrc_entry *held = get(&dom_a, base + 3 * slot, 2 * PG, LW);
    CHECK(held == e[3]);
    mrc_cache_invalidate(&cache, base + 3 * slot + PG, 3 * PG, MRC_INVAL_MUNMAP);
    CHECKF(cache.nyoung == MRC_YOUNG - 2 && cache.tree_count == MRC_YOUNG - 2 && cache.ndeferred == 1,
           "%u young, %ju counted, %ju deferred", cache.nyoung, (uintmax_t)cache.tree_count,
           (uintmax_t)cache.ndeferred);
    CHECK(!(e[3]->flags & MRC_E_IN_TREE) && !(e[4]->flags & MRC_E_IN_TREE) && e[3]->ref == 1);
    struct mrc_entry *m = get(&dom_a, base + 3 * slot + PG, PG, LW);   /* its hint must not serve */
    CHECK(m != e[3] && fb.regs == MRC_YOUNG + 1 && fb.live == MRC_YOUNG && reg_of(held)->live);
    mrc_cache_put(&cache, m);
    mrc_cache_put(&cache, held);
    CHECK(fb.live == MRC_YOUNG - 1 && cache.nyoung == MRC_YOUNG - 1 && tree_nodes() == 0);
    struct mrc_entry *f = get(&dom_a, base + MRC_YOUNG * slot, PG, LW);   /* fills the set */
    mrc_cache_put(&cache, f);
    f = get(&dom_a, base + (MRC_YOUNG + 1) * slot, PG, LW);               /* files it */
    mrc_cache_put(&cache, f);
    CHECK(cache.nyoung == 1 && tree_nodes() == MRC_YOUNG && cache.tree_count == MRC_YOUNG + 1);
    CHECK(tree_nodes() != (size_t)-1);
    for (int i = 0; i < MRC_YOUNG; i++)   /* filed: the tree itself finds them */
        if (i != 3 && i != 4)
            CHECKF(mrc_itree_iter_first(&cache.tree, base + i * slot + PG, base + i * slot + PG) == &e[i]->node,
                   "entry %d not in the tree", i);
    mrc_cache_drain(&cache);   /* files the last one too */
    CHECK(cache.nyoung == 0 && tree_nodes() == MRC_YOUNG + 1);
    struct mrc_entry *d[MRC_YOUNG];
    for (int i = 0; i < MRC_YOUNG; i++) {   /* descending, below them all */
        d[i] = get(&dom_a, base - (uint64_t)(i + 1) * slot, PG, LW);
        mrc_cache_put(&cache, d[i]);
    }
    CHECK(cache.nyoung == MRC_YOUNG && tree_nodes() == MRC_YOUNG + 1);
    mrc_cache_put(&cache, get(&dom_a, base - (MRC_YOUNG + 1) * slot, PG, LW));
    CHECK(cache.nyoung == 1 && tree_nodes() == 2 * MRC_YOUNG + 1 && tree_nodes() != (size_t)-1);
    for (int i = 0; i < MRC_YOUNG; i++) {
        uint64_t a = base - (uint64_t)(i + 1) * slot;
        CHECKF(mrc_itree_iter_first(&cache.tree, a, a) == &d[i]->node, "entry %d below not in the tree", i);
    }
    uint64_t regs = fb.regs;
    for (int i = 0; i < MRC_YOUNG; i++)
        if (i != 3 && i != 4) {
            struct mrc_entry *h = get(&dom_a, base + i * slot, 2 * PG, LW);
            CHECK(h == e[i]);
            mrc_cache_put(&cache, h);
        }
    for (int i = 0; i <= MRC_YOUNG; i++)
        mrc_cache_put(&cache, get(&dom_a, base - (uint64_t)(i + 1) * slot, PG, LW));
    CHECK(fb.regs == regs);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0 && cache.tree_count == 0 && cache.nyoung == 0 && tree_nodes() == 0);
}

/* One unmap over a long run in the tree and young entries after it: the run is parked,
 * the young ones are invalidated in the hook, and nothing of either is found again. */
static void test_unmap_parks_run_and_takes_young(void)
{
    setup();
    const uint64_t base = 0x64000000;
    for (uint64_t i = 0; i < 40; i++)
        mrc_cache_put(&cache, get(&dom_a, base + i * 2 * PG, PG, LW));
    mrc_cache_drain(&cache);
    for (uint64_t i = 40; i < 48; i++)
        mrc_cache_put(&cache, get(&dom_a, base + i * 2 * PG, PG, LW));
    CHECK(cache.nyoung == 8 && tree_nodes() == 40);
    mrc_cache_invalidate(&cache, base, 96 * PG, MRC_INVAL_MUNMAP);
    CHECKF(cache.nparked == 1 && cache.nyoung == 0 && cache.ndeferred == 8 && cache.tree_count == 40,
           "%u parked, %u young, %ju deferred, %ju counted", cache.nparked, cache.nyoung,
           (uintmax_t)cache.ndeferred, (uintmax_t)cache.tree_count);
    for (uint64_t i = 0; i < 48; i += 7)
        mrc_cache_put(&cache, get(&dom_a, base + i * 2 * PG, PG, LW));
    CHECK(fb.regs == 48 + 7 && fb.live == 7 && cache.nparked == 0 && cache.tree_count == 7);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0);
}

static void test_no_merge_across_keys_or_remote(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x200000, PG, LW);
    struct mrc_entry *b = get(&dom_b, 0x201000, PG, LW);
    struct mrc_entry *c1 = get(&dom_a, 0x202000, PG, 0);
    struct mrc_entry *r1 = get(&dom_a, 0x203000, PG, LW | RW);
    struct mrc_entry *r2 = get(&dom_a, 0x204000, PG, LW | RW);
    CHECK(mrc_entry_len(b) == PG && mrc_entry_len(c1) == PG);
    CHECK(mrc_entry_len(r1) == PG && mrc_entry_len(r2) == PG);
    CHECK(fb.regs == 5 && indexed() == 5);
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, b);
    mrc_cache_put(&cache, c1);
    mrc_cache_put(&cache, r1);
    mrc_cache_put(&cache, r2);
}

static void test_limit_entries_evicts_lru(void)
{
    setup_with(3, 1ull << 40, MRC_REMOTE_EXACT);
    /* Separate pages with gaps, so nothing merges. */
    struct mrc_entry *e[4];
    for (int i = 0; i < 3; i++)
        e[i] = get(&dom_a, 0x1000000 + (uint64_t)i * 0x10000, PG, LW);
    struct fake_reg *ra = reg_of(e[0]), *rb = reg_of(e[1]), *rc = reg_of(e[2]);
    for (int i = 0; i < 3; i++)
        mrc_cache_put(&cache, e[i]);
    /* Touch A again: B becomes least recently used. */
    mrc_cache_put(&cache, get(&dom_a, 0x1000000, PG, LW));
    e[3] = get(&dom_a, 0x1030000, PG, LW);
    CHECK(!rb->live && ra->live && rc->live);
    CHECK(indexed() == 3);
    mrc_cache_put(&cache, e[3]);
}

static void test_limit_never_evicts_in_use(void)
{
    setup_with(2, 1ull << 40, MRC_REMOTE_EXACT);
    struct mrc_entry *a = get(&dom_a, 0x1000000, PG, LW);
    struct mrc_entry *b = get(&dom_a, 0x1100000, PG, LW);
    struct mrc_entry *c1 = get(&dom_a, 0x1200000, PG, LW);
    CHECK(reg_of(a)->live && reg_of(b)->live && reg_of(c1)->live);
    CHECK(fb.deregs == 0);
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, b);
    mrc_cache_put(&cache, c1);
    struct mrc_entry *d = get(&dom_a, 0x1300000, PG, LW);
    CHECK(indexed() <= 2);
    mrc_cache_put(&cache, d);
}

static void test_limit_bytes(void)
{
    setup_with(1000, 3 * PG, MRC_REMOTE_EXACT);
    for (int i = 0; i < 5; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x2000000 + (uint64_t)i * 0x10000, PG, LW));
    CHECK(cache.tree_bytes <= 3 * PG);
    CHECK(fb.live_bytes <= 3 * PG);
    CHECK(fb.deregs == 2);
}

static void test_enomem_evicts_and_retries(void)
{
    setup();
    fb.limit_bytes = 4 * PG;
    for (int i = 0; i < 4; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x3000000 + (uint64_t)i * 0x10000, PG, LW));
    CHECK(fb.live == 4);
    /* The back-end is full of idle cached entries: a fifth must still succeed. */
    struct mrc_entry *e = get(&dom_a, 0x3100000, 2 * PG, LW);
    CHECK(e != NULL);
    CHECK(fb.live_bytes <= 4 * PG);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.bytes == fb.live_bytes);
    if (e)
        mrc_cache_put(&cache, e);
}

static void test_enomem_with_all_in_use_fails(void)
{
    setup();
    fb.limit_bytes = 2 * PG;
    struct mrc_entry *a = get(&dom_a, 0x3000000, 2 * PG, LW);
    struct mrc_entry *b = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x3100000, PG, 0x3100000, LW, &b) == -ENOMEM);
    CHECK(reg_of(a)->live);
    mrc_cache_put(&cache, a);
}

/* A last try that pins nothing: registered past the limit, out of the pinned gauges,
 * deregistered as any; one that fails leaves the caller the first error. */
static int last_calls, last_fails;
static int last_unpinned(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                         struct mrc_range *r, void **reg)
{
    last_calls++;
    if (last_fails)
        return -EOPNOTSUPP;
    struct fake_backend *f = ctx;
    uint64_t limit = f->limit_bytes;
    f->limit_bytes = 0;
    int rc = fake_reg(ctx, domain, addr, len, iova, access, r, reg);
    f->limit_bytes = limit;
    return rc ? rc : MRC_REG_UNPINNED;
}

static void setup_last_try(void)
{
    setup();
    cache.p.ops.reg_last = last_unpinned;
    last_calls = last_fails = 0;
}

static void test_last_try_pins_nothing(void)
{
    setup_last_try();
    fb.limit_bytes = 2 * PG;
    struct mrc_entry *a = get(&dom_a, 0x3000000, 2 * PG, LW);
    struct mrc_entry *b = get(&dom_a, 0x3100000, 4 * PG, LW);
    CHECK(a && b && last_calls == 1 && fb.live == 2);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECKF(g.bytes == 2 * PG && g.entries == 2, "%llu bytes, %llu entries", (unsigned long long)g.bytes,
           (unsigned long long)g.entries);
    mrc_cache_put(&cache, b);
    struct mrc_entry *again = get(&dom_a, 0x3100000, 4 * PG, LW);
    CHECK(again == b && last_calls == 1);   /* cached under the caller's key */
    mrc_cache_put(&cache, again);
    mrc_cache_put(&cache, a);
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 0 && fb.live == 0);
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.bytes == 0 && g.entries == 0);
}

static void test_failed_last_try_keeps_first_error(void)
{
    setup_last_try();
    last_fails = 1;
    fb.limit_bytes = 2 * PG;
    struct mrc_entry *a = get(&dom_a, 0x3000000, 2 * PG, LW), *b = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x3100000, PG, 0x3100000, LW, &b) == -ENOMEM && last_calls == 1);
    fb.limit_bytes = 0;
    fb.fail_errno = EACCES;   /* not out of memory: no last try */
    CHECK(mrc_cache_get(&cache, &dom_a, 0x3200000, PG, 0x3200000, LW, &b) == -EACCES && last_calls == 1);
    fb.fail_errno = 0;
    mrc_cache_put(&cache, a);
}

/* A registration the back-end shares: no registration counted or timed, nothing pinned. */
static void *shared_reg_obj;
static int reg_shared(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                      struct mrc_range *r, void **reg)
{
    (void)ctx, (void)domain, (void)addr, (void)len, (void)iova, (void)access, (void)r;
    *reg = &shared_reg_obj;
    return 1;
}

static int dereg_shared(void *ctx, void *reg)
{
    (void)ctx;
    return reg == &shared_reg_obj ? 0 : -EINVAL;
}

static void test_shared_registration_is_not_counted(void)
{
    setup();
    cache.p.ops.shared = reg_shared;
    cache.p.ops.dereg = dereg_shared;
    struct mrc_stats_block s0, s1;
    mrc_stats_sum(&s0);
    struct mrc_entry *e = get(&dom_a, 0x3000000, 4 * PG, LW);
    CHECK(e && e->reg == &shared_reg_obj);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.bytes == 0 && g.entries == 1);
    mrc_cache_put(&cache, e);
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 0);
    mrc_stats_sum(&s1);
    CHECK(s1.v[MRC_STAT_MISSES] == s0.v[MRC_STAT_MISSES] + 1);
    CHECK(s1.v[MRC_STAT_REAL_REGS] == s0.v[MRC_STAT_REAL_REGS] && s1.v[MRC_STAT_REAL_DEREGS] == s0.v[MRC_STAT_REAL_DEREGS]);
    CHECK(fb.regs == 0);   /* never pinned */
    cache.p.ops.shared = NULL;
    cache.p.ops.dereg = fake_dereg;
}

static void test_backend_error_passes_through(void)
{
    setup();
    fb.fail_errno = EACCES;
    struct mrc_entry *e = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x10000, PG, 0x10000, LW, &e) == -EACCES);
    fb.fail_errno = 0;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x10000, 0, 0x10000, LW, &e) == -EINVAL);
}

/* MRCACHE_EXPAND's hook, faked: widens a miss to the 16-page window around its request. */
#define XWIN (16 * PG)
static unsigned expand_calls;

static int fake_expand(void *arg, struct mrc_range *r, uint32_t access, uint64_t *first, uint64_t *last)
{
    (void)arg, (void)access;
    uint64_t qf = r->first, ql = r->last;
    expand_calls++;
    uint64_t wf = qf & ~(XWIN - 1), wl = wf + XWIN - 1;
    if (ql > wl)
        return 0;
    *first = wf < *first ? wf : *first;
    *last = wl > *last ? wl : *last;
    return 1;
}

/* From now on the cache expands (single-threaded: as if set at init). */
static void expand_on(void)
{
    cache.p.expand = fake_expand;
    expand_calls = 0;
}

static void test_expand_widens_local_misses_only(void)
{
    setup();
    expand_on();
    struct mrc_entry *a = get(&dom_a, 0x200000 + 3 * PG, PG, LW);
    CHECK(mrc_entry_start(a) == 0x200000 && mrc_entry_len(a) == XWIN && expand_calls == 1);
    struct mrc_entry *b = get(&dom_a, 0x200000 + 15 * PG, PG, LW);   /* a later piece: a hit */
    CHECK(b == a && fb.regs == 1 && expand_calls == 1);
    /* Remote rights: never asked, the bytes exact. */
    struct mrc_entry *r = get(&dom_a, 0x300010, 100, LW | RW);
    CHECK(mrc_entry_start(r) == 0x300010 && mrc_entry_len(r) == 100 && expand_calls == 1);
    /* An iova other than the address: never asked either. */
    struct mrc_entry *o = NULL;
    CHECK(mrc_cache_get(&cache, &dom_a, 0x400000, PG, 0x9000, LW, &o) == 0);
    CHECK(o && mrc_entry_len(o) == PG && expand_calls == 1);
    struct mrc_entry *all[] = { a, b, r, o };
    for (unsigned i = 0; i < 4; i++)
        if (all[i])
            mrc_cache_put(&cache, all[i]);
    struct mrc_stats_block s;
    mrc_stats_sum(&s);
    CHECK(s.v[MRC_STAT_EXPANDED] == 1);
}

/* The back-end refuses the wider range (out of pinnable memory): the miss registers its
 * own page, and nothing idle was evicted for the attempt. */
static void test_expand_refused_registers_own_range(void)
{
    setup();
    struct mrc_entry *idle = get(&dom_a, 0x500000, PG, LW);
    mrc_cache_put(&cache, idle);
    expand_on();
    fb.limit_bytes = 4 * PG;
    struct mrc_stats_block s0, s1;
    mrc_stats_sum(&s0);
    struct mrc_entry *e = get(&dom_a, 0x600000 + 5 * PG, PG, LW);
    mrc_stats_sum(&s1);
    CHECK(e && mrc_entry_start(e) == 0x600000 + 5 * PG && mrc_entry_len(e) == PG);
    CHECK(reg_of(idle)->live && fb.live == 2);
    CHECK(s1.v[MRC_STAT_EXPAND_REFUSED] == s0.v[MRC_STAT_EXPAND_REFUSED] + 1 &&
          s1.v[MRC_STAT_EXPANDED] == s0.v[MRC_STAT_EXPANDED]);
    if (e)
        mrc_cache_put(&cache, e);
}

/* Idle entries of the key inside the window, not touching the request, leave the tree
 * for the wider registration. */
static void test_expand_supersedes_entries_inside(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0x700000 + 8 * PG, PG, LW));
    mrc_cache_put(&cache, get(&dom_a, 0x700000 + 12 * PG, PG, LW));
    CHECK(indexed() == 2);
    expand_on();
    struct mrc_entry *e = get(&dom_a, 0x700000, PG, LW);
    CHECK(e && mrc_entry_len(e) == XWIN && indexed() == 1 && fb.live == 1);
    if (e)
        mrc_cache_put(&cache, e);
}

static void test_invalidate_idle_defers_and_never_calls_backend(void)
{
    setup();
    for (int i = 0; i < 8; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x4000000 + (uint64_t)i * 0x10000, PG, LW));
    fb.forbidden = 1;
    mrc_cache_invalidate(&cache, 0x4000000, 0x80000, MRC_INVAL_MUNMAP);
    fb.forbidden = 0;
    CHECK(fb.forbidden_calls == 0);
    CHECK(indexed() == 0);
    CHECK(cache.ndeferred == 8 && fb.live == 8);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 0 && cache.ndeferred == 0);
}

static void test_invalidate_then_lookup_misses(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x5000000, 4 * PG, LW);
    mrc_cache_put(&cache, a);
    struct fake_reg *old = reg_of(a);
    mrc_cache_invalidate(&cache, 0x5002000, 1, MRC_INVAL_MADVISE);   /* one byte inside */
    struct mrc_entry *b = get(&dom_a, 0x5000000, 4 * PG, LW);
    CHECK(reg_of(b) != old && fb.regs == 2);
    CHECK(!old->live);          /* the next call drained it */
    mrc_cache_put(&cache, b);
}

static void test_invalidate_in_use_deregisters_at_last_release(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x6000000, PG, LW);
    struct mrc_entry *a2 = get(&dom_a, 0x6000000, PG, LW);
    CHECK(a == a2);
    mrc_cache_invalidate(&cache, 0x6000000, PG, MRC_INVAL_MUNMAP);
    CHECK(reg_of(a)->live && cache.ndeferred == 0);
    mrc_cache_put(&cache, a);
    CHECK(reg_of(a)->live);
    mrc_cache_put(&cache, a2);
    CHECK(!reg_of(a2)->live && fb.deregs == 1);
}

static void test_invalidate_outside_and_at_top_of_space(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x7000000, PG, LW);
    mrc_cache_put(&cache, a);
    mrc_cache_invalidate(&cache, 0x7001000, PG, MRC_INVAL_MUNMAP);    /* adjacent, not overlapping */
    mrc_cache_invalidate(&cache, 0x6fff000, PG, MRC_INVAL_MUNMAP);
    CHECK(indexed() == 1);
    struct mrc_entry *top = get(&dom_a, UINT64_MAX - PG + 1, PG, LW);
    CHECK(top && mrc_entry_start(top) == UINT64_MAX - PG + 1 && top->node.last == UINT64_MAX);
    mrc_cache_put(&cache, top);
    mrc_cache_invalidate(&cache, UINT64_MAX - 10, 100, MRC_INVAL_MUNMAP);   /* wraps: clamped */
    CHECK(indexed() == 1);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 1);
}

static void test_deferred_drained_by_next_call(void)
{
    setup();
    for (int i = 0; i < 20; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x8000000 + (uint64_t)i * 0x10000, PG, LW));
    mrc_cache_invalidate(&cache, 0x8000000, 0x200000, MRC_INVAL_MUNMAP);
    CHECK(cache.ndeferred == 20 && cache.deferred_bytes == 20 * PG);
    struct mrc_entry *e = get(&dom_b, 0x9000000, PG, LW);     /* any later call */
    CHECK(cache.ndeferred == 0 && fb.live == 1);
    mrc_cache_put(&cache, e);
}

static int full_calls;
static void on_full(void *arg)
{
    (void)arg;
    full_calls++;
}

static void test_deferred_bound_calls_for_help(void)
{
    cache_end();
    fake_init(&fb);
    forgotten = 0;
    struct mrc_cache_params p = {
        .ops = { .reg = fake_reg, .dereg = fake_dereg, .ctx = &fb },
        .max_entries = 1000, .max_bytes = 1ull << 40, .max_deferred_bytes = 4 * PG,
        .page_size = PG, .remote_mask = RW | RR, .local_super_mask = LW,
        .deferred_full = on_full,
    };
    CHECK(cache_start(&p) == 0);
    full_calls = 0;
    for (int i = 0; i < 8; i++)
        mrc_cache_put(&cache, get(&dom_a, 0xd000000 + (uint64_t)i * 0x10000, PG, LW));
    fb.forbidden = 1;
    for (int i = 0; i < 4; i++)     /* 4 pages deferred: at the bound, not past it */
        mrc_cache_invalidate(&cache, 0xd000000 + (uint64_t)i * 0x10000, PG, MRC_INVAL_MUNMAP);
    CHECK(full_calls == 0);
    mrc_cache_invalidate(&cache, 0xd040000, PG, MRC_INVAL_MUNMAP);
    CHECK(full_calls == 1);
    fb.forbidden = 0;
    CHECK(fb.forbidden_calls == 0);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 3);
}

/* A parked run counts toward the bound by its range, at most what the tree holds: 40
 * one-page entries unmapped by an 80-page range count 40 pages. */
static void test_parked_bound_calls_for_help(void)
{
    for (int past = 0; past < 2; past++) {
        cache_end();
    fake_init(&fb);
    forgotten = 0;
        struct mrc_cache_params p = {
            .ops = { .reg = fake_reg, .dereg = fake_dereg, .ctx = &fb },
            .max_entries = 1000, .max_bytes = 1ull << 40,
            .max_deferred_bytes = past ? 39 * PG : 40 * PG,
            .page_size = PG, .remote_mask = RW | RR, .local_super_mask = LW,
            .deferred_full = on_full,
        };
        CHECK(cache_start(&p) == 0);
        full_calls = 0;
        for (uint64_t i = 0; i < 40; i++)
            mrc_cache_put(&cache, get(&dom_a, 0xd000000 + i * 2 * PG, PG, LW));
        mrc_cache_drain(&cache);   /* all 40 in the tree, none young: one run */
        mrc_cache_invalidate(&cache, 0xd000000, 80 * PG, MRC_INVAL_MUNMAP);
        CHECK(cache.nparked == 1 && cache.parked_bytes == 40 * PG);
        CHECKF(full_calls == past, "bound %d pages: %d calls", past ? 39 : 40, full_calls);
        mrc_cache_drain(&cache);
        CHECK(cache.nparked == 0 && cache.parked_bytes == 0 && fb.live == 0);
    }
}

static int match_domain(const struct mrc_entry *e, void *arg) { return e->domain == arg; }

static void test_flush_by_domain(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0xa000000, PG, LW));
    mrc_cache_put(&cache, get(&dom_b, 0xa100000, PG, LW));
    struct mrc_entry *busy = get(&dom_a, 0xa200000, PG, LW);
    uint64_t left = mrc_cache_flush(&cache, match_domain, &dom_a);
    CHECK(left == 1);                       /* the in-use one stays */
    CHECK(fb.live == 2 && reg_of(busy)->live);
    mrc_cache_put(&cache, busy);
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_a) == 0);
    CHECK(fb.live == 1);                    /* dom_b untouched */
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0);
}

/* Idle bytes count the cached entries nobody holds: not those in use, not invalidated
 * ones, and a hit on an idle entry makes it in use again. */
static void test_idle_bytes(void)
{
    setup();
    CHECK(mrc_cache_idle_bytes(&cache) == 0);
    mrc_cache_put(&cache, get(&dom_a, 0xb000000, PG, LW));
    mrc_cache_put(&cache, get(&dom_a, 0xb100000, 2 * PG, LW));
    struct mrc_entry *busy = get(&dom_b, 0xb200000, 4 * PG, LW);
    mrc_cache_put(&cache, get(&dom_a, 0xb300000, 8 * PG, LW));
    CHECK(mrc_cache_idle_bytes(&cache) == 11 * PG);
    struct mrc_entry *again = get(&dom_a, 0xb100000, 2 * PG, LW);
    CHECK(mrc_cache_idle_bytes(&cache) == 9 * PG);
    mrc_cache_invalidate(&cache, 0xb300000, PG, MRC_INVAL_MUNMAP);
    CHECK(mrc_cache_idle_bytes(&cache) == PG);
    mrc_cache_put(&cache, again);
    mrc_cache_put(&cache, busy);
    CHECK(mrc_cache_idle_bytes(&cache) == 7 * PG);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(mrc_cache_idle_bytes(&cache) == 0);
}

/* ---- deregistrations the back-end refuses ---- */

static uint64_t stat_now(enum mrc_stat which)
{
    struct mrc_stats_block b;
    mrc_stats_sum(&b);
    return b.v[which];
}

static void refuse_deregs(int err, uint64_t times)
{
    fb.dereg_fail_errno = err;
    fb.dereg_fail_left = times;
}

/* An invalidated entry whose deregistration is refused stays registered: counted in the
 * gauges (as pinned, and as failed) and as a failure, out of the tree, never handed out;
 * a miss after the next registration retries it. */
static void test_refused_dereg_kept_and_retried_by_a_miss(void)
{
    setup();
    mrc_stats_reset();
    mrc_cache_put(&cache, get(&dom_a, 0x3000000, 2 * PG, LW));
    refuse_deregs(EBUSY, 1);
    mrc_cache_invalidate(&cache, 0x3000000, 2 * PG, MRC_INVAL_MUNMAP);
    mrc_cache_drain(&cache);
    CHECK(fb.dereg_refused == 1 && fb.live == 1);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECKF(g.entries == 1 && g.bytes == 2 * PG && g.failed == 1 && g.failed_bytes == 2 * PG && g.tree_entries == 0,
           "%llu registrations, %llu bytes, %llu failed", (unsigned long long)g.entries,
           (unsigned long long)g.bytes, (unsigned long long)g.failed);
    CHECK(stat_now(MRC_STAT_DEREG_FAILURES) == 1);
    struct mrc_entry *e = get(&dom_a, 0x3000000, 2 * PG, LW);   /* a miss, never the refused one */
    CHECK(fb.regs == 2 && fb.live == 2);
    struct mrc_entry *f = get(&dom_b, 0x3100000, PG, LW);       /* the retry */
    CHECK(fb.live == 2 && reg_of(e)->live && reg_of(f)->live);
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.failed == 0 && g.entries == 2 && g.bytes == 3 * PG);
    mrc_cache_put(&cache, e);
    mrc_cache_put(&cache, f);
}

/* A back-end that goes on refusing is asked by misses ever less often (the wait between
 * two retries doubles), by flush at once; once it accepts, the entry goes. */
static void test_refused_dereg_asked_less_often_by_misses(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0x3200000, PG, LW));
    refuse_deregs(EIO, UINT64_MAX);
    mrc_cache_invalidate(&cache, 0x3200000, PG, MRC_INVAL_MUNMAP);
    mrc_cache_drain(&cache);
    CHECK(fb.dereg_refused == 1);
    for (uint64_t i = 0; i < 200; i++)
        mrc_cache_put(&cache, get(&dom_b, 0x4000000 + i * 2 * PG, PG, LW));
    CHECKF(fb.dereg_refused >= 2 && fb.dereg_refused <= 12, "asked %llu times over 200 misses",
           (unsigned long long)fb.dereg_refused);
    uint64_t before = fb.dereg_refused;
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_a) == 1);   /* refused again: it stays */
    CHECK(fb.dereg_refused == before + 1 && fb.live == 201);
    refuse_deregs(0, 0);
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_a) == 0);
    CHECK(fb.live == 200);
}

/* A flush of one domain (ibv_dealloc_pd's) asks again right away for its own refused
 * entries, those it was just refused among them, and for no other domain's. */
static void test_flush_retries_the_refused_of_its_domain(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0x3300000, PG, LW));
    mrc_cache_put(&cache, get(&dom_b, 0x3400000, PG, LW));
    refuse_deregs(EBUSY, 2);
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_a) == 1);   /* refused, and refused again */
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_b) == 0);
    CHECK(fb.live == 1);
    refuse_deregs(EBUSY, 1);
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_a) == 1);   /* an old refusal: asked once */
    CHECK(mrc_cache_flush(&cache, match_domain, &dom_a) == 0);
    CHECK(fb.live == 0 && fb.dereg_refused == 3);
}

/* A private registration (never cached, here MRC_REMOTE_NEVER) is its caller's alone:
 * the back-end's refusal is the caller's answer and it still holds the entry; released
 * by a caller that cannot keep it, a refused one waits on the failed list. */
static void test_private_refused_stays_with_its_caller(void)
{
    setup_with(1000, 1ull << 40, MRC_REMOTE_NEVER);
    struct mrc_entry *e = get(&dom_a, 0x3500000, PG, LW | RW);
    refuse_deregs(EBUSY, 1);
    CHECK(mrc_cache_put(&cache, e) == -EBUSY);
    CHECK(reg_of(e)->live && e->ref == 1);
    CHECK(mrc_cache_put(&cache, e) == 0);
    CHECK(fb.live == 0);
    e = get(&dom_a, 0x3500000, PG, LW | RW);
    refuse_deregs(EBUSY, 1);
    mrc_cache_drop(&cache, e);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.failed == 1 && fb.live == 1);
    CHECK(mrc_cache_flush(&cache, NULL, NULL) == 0 && fb.live == 0);
}

/* Out of pinnable memory, the refused entries are asked again with the idle ones. */
static void test_enomem_retries_the_refused(void)
{
    setup();
    fb.limit_bytes = 2 * PG;
    mrc_cache_put(&cache, get(&dom_a, 0x3600000, 2 * PG, LW));
    refuse_deregs(EBUSY, 1);
    mrc_cache_invalidate(&cache, 0x3600000, 2 * PG, MRC_INVAL_MUNMAP);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 1);
    struct mrc_entry *e = get(&dom_a, 0x3700000, PG, LW);
    CHECK(e && fb.live == 1 && fb.live_bytes == PG);
    mrc_cache_put(&cache, e);
}

/* destroy says what the back-end still refuses, and the cache stays usable until then. */
static void test_destroy_reports_the_refused(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0x3800000, PG, LW));
    refuse_deregs(EIO, UINT64_MAX);
    struct mrc_cache_leftovers left;
    CHECK(mrc_cache_destroy(&cache, &left) == -EBUSY);
    CHECKF(left.failed == 1 && left.in_use == 0 && left.entries == 1, "%llu failed, %llu held, %llu objects out",
           (unsigned long long)left.failed, (unsigned long long)left.in_use, (unsigned long long)left.entries);
    CHECK(fb.live == 1);
    refuse_deregs(0, 0);   /* cache_end destroys it for good */
}

/* Registrations held past the limits are evicted as they are released, without waiting
 * for a miss; the last ones released stay, within the limits. */
static void test_limits_met_at_release(void)
{
    setup_with(4, 1ull << 40, MRC_REMOTE_EXACT);
    struct mrc_entry *e[10];
    struct fake_reg *r[10];
    for (int i = 0; i < 10; i++) {
        e[i] = get(&dom_a, 0x5000000 + (uint64_t)i * 0x10000, PG, LW);
        r[i] = reg_of(e[i]);
    }
    CHECK(fb.live == 10 && cache.over_limit);   /* all in use: nothing could go */
    for (int i = 0; i < 10; i++)
        mrc_cache_put(&cache, e[i]);
    CHECKF(fb.live == 4 && cache.tree_count == 4, "%llu registered after the releases",
           (unsigned long long)fb.live);
    CHECK(!cache.over_limit);
    for (int i = 6; i < 10; i++)
        CHECK(r[i]->live);
    mrc_cache_put(&cache, get(&dom_a, 0x5090000, PG, LW));      /* still a hit */
    CHECK(fb.regs == 10);

    setup_with(1000, 3 * PG, MRC_REMOTE_EXACT);
    for (int i = 0; i < 5; i++)
        e[i] = get(&dom_a, 0x6000000 + (uint64_t)i * 0x10000, PG, LW);
    for (int i = 0; i < 5; i++)
        mrc_cache_put(&cache, e[i]);
    CHECK(fb.live_bytes <= 3 * PG && cache.tree_bytes <= 3 * PG);
}

/* ---- a registration taken out of the cache (ibv_rereg_mr's) ---- */

/* A caller alone holding an entry takes its registration: the cache forgets it (gauges
 * included) without deregistering, and a later request registers anew; held by another
 * too, nothing changes. Invalidated and parked entries can be taken as well. */
static void test_take_only_when_alone(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x7000000, PG, LW), *a2 = get(&dom_a, 0x7000000, PG, LW);
    void *reg = NULL;
    CHECK(a2 == a && mrc_cache_take(&cache, a, &reg) == -EBUSY && !reg);
    mrc_cache_put(&cache, a2);
    struct fake_reg *ra = reg_of(a);
    CHECK(mrc_cache_take(&cache, a, &reg) == 0 && reg == ra);
    CHECK(ra->live && fb.deregs == 0);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.entries == 0 && g.tree_entries == 0 && g.bytes == 0);
    struct mrc_entry *again = get(&dom_a, 0x7000000, PG, LW);
    CHECK(fb.regs == 2 && reg_of(again) != ra);
    mrc_cache_put(&cache, again);
    fake_dereg(&fb, reg);   /* the taker's to deregister */

    struct mrc_entry *b = get(&dom_a, 0x7100000, PG, LW);        /* invalidated while held */
    mrc_cache_invalidate(&cache, 0x7100000, PG, MRC_INVAL_MUNMAP);
    CHECK(mrc_cache_take(&cache, b, &reg) == 0 && ((struct fake_reg *)reg)->live);
    fake_dereg(&fb, reg);

    struct mrc_entry *held = NULL;                               /* in a parked run */
    for (uint64_t i = 0; i < 40; i++) {
        struct mrc_entry *e = get(&dom_a, 0x7200000 + i * 2 * PG, PG, LW);
        if (i == 20)
            held = e;
        else
            mrc_cache_put(&cache, e);
    }
    mrc_cache_drain(&cache);
    mrc_cache_invalidate(&cache, 0x7200000, 80 * PG, MRC_INVAL_MUNMAP);
    CHECK(cache.nparked == 1);
    CHECK(mrc_cache_take(&cache, held, &reg) == 0 && ((struct fake_reg *)reg)->live);
    fake_dereg(&fb, reg);
}

/* A retired entry serves no later request; its holders keep it, and it is deregistered
 * at the last release (a remote registration's rkey dies with its last holder). */
static void test_retire_keeps_holders(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x7300000, PG, LW | RW), *a2 = get(&dom_a, 0x7300000, PG, LW | RW);
    CHECK(a2 == a);
    mrc_cache_retire(&cache, a);
    struct mrc_entry *b = get(&dom_a, 0x7300000, PG, LW | RW);
    CHECK(b != a && fb.regs == 2);
    mrc_cache_put(&cache, a);
    CHECK(reg_of(a)->live);
    mrc_cache_put(&cache, a2);
    CHECK(fb.deregs == 1 && fb.live == 1);
    mrc_cache_put(&cache, b);
}

static void test_forget_never_deregisters(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0xb000000, PG, LW));
    struct mrc_entry *held = get(&dom_a, 0xb100000, PG, LW);
    (void)held;
    for (uint64_t i = 0; i < 40; i++)   /* and a parked run: forgotten too, not settled */
        mrc_cache_put(&cache, get(&dom_a, 0xb200000 + i * 2 * PG, PG, LW));
    mrc_cache_drain(&cache);
    mrc_cache_invalidate(&cache, 0xb200000, 80 * PG, MRC_INVAL_MUNMAP);
    CHECK(cache.nparked == 1);
    forgotten = fb.live;
    mrc_cache_forget(&cache);
    CHECK(fb.deregs == 0);
    CHECK(indexed() == 0 && cache.nparked == 0);
    struct mrc_entry *e = get(&dom_a, 0xb000000, PG, LW);   /* registers anew */
    CHECK(fb.regs == 43 && fb.deregs == 0);
    mrc_cache_put(&cache, e);
}

static void test_gauges_and_stats(void)
{
    setup();
    mrc_stats_reset();
    struct mrc_entry *a = get(&dom_a, 0xc000000, 2 * PG, LW);
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, get(&dom_a, 0xc000000, PG, LW));
    struct mrc_stats_block s;
    mrc_stats_sum(&s);
    CHECK(s.v[MRC_STAT_REQUESTS] == 2 && s.v[MRC_STAT_HITS] == 1 && s.v[MRC_STAT_MISSES] == 1);
    CHECK(s.v[MRC_STAT_REAL_REGS] == 1);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.entries == 1 && g.bytes == 2 * PG && g.bytes_peak == 2 * PG && g.tree_entries == 1);
    mrc_cache_invalidate(&cache, 0xc000000, PG, MRC_INVAL_BRK);
    mrc_stats_sum(&s);
    CHECK(s.v[MRC_STAT_INVALIDATED] == 1 && s.v[MRC_STAT_INVAL_BASE + MRC_INVAL_BRK] == 1);
}

/* Live registrations are made minus freed; the peaks stay at the highest live count
 * even after deregistrations bring it down, and rise only past it. */
static void test_gauges_peak_after_deregistrations(void)
{
    setup();
    for (uint64_t i = 0; i < 3; i++)
        mrc_cache_put(&cache, get(&dom_a, 0xd000000 + i * 2 * PG, PG, LW));
    mrc_cache_invalidate(&cache, 0xd000000, 6 * PG, MRC_INVAL_MUNMAP);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 0);
    struct mrc_entry *e = get(&dom_a, 0xd100000, 2 * PG, LW);
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);
    CHECKF(g.entries == 1 && g.entries_peak == 3, "entries %llu, peak %llu", (unsigned long long)g.entries,
           (unsigned long long)g.entries_peak);
    CHECK(g.bytes == 2 * PG && g.bytes_peak == 3 * PG);
    for (uint64_t i = 0; i < 3; i++)
        mrc_cache_put(&cache, get(&dom_a, 0xd200000 + i * 2 * PG, PG, LW));
    mrc_cache_get_gauges(&cache, &g);
    CHECK(g.entries == 4 && g.entries_peak == 4 && g.bytes_peak == 5 * PG);
    mrc_cache_put(&cache, e);
}

/* A registration that takes SLOW_NS of CLOCK_MONOTONIC, as the back-end itself sees it. */
#define SLOW_NS 3000000u
static uint64_t slow_seen_ns;

static int slow_reg(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova, uint32_t access,
                    struct mrc_range *r, void **out)
{
    uint64_t t0 = mrc_now_ns(), t;
    while ((t = mrc_now_ns()) - t0 < SLOW_NS)
        ;
    slow_seen_ns += t - t0;
    return fake_reg(ctx, domain, addr, len, iova, access, r, out);
}

/* The back-end's time is counted in cheap ticks (the TSC where it is invariant) and
 * summed as nanoseconds: the figure must agree with CLOCK_MONOTONIC over the same calls
 * (two clocks compared, no bound on how long anything takes), and two sums of the same
 * counts must agree exactly. */
static void test_reg_time_counted_in_ns(void)
{
    mrc_clock_init();
    cache_end();
    fake_init(&fb);
    forgotten = 0;
    struct mrc_cache_params p = {
        .ops = { .reg = slow_reg, .dereg = fake_dereg, .ctx = &fb }, .max_entries = 100, .max_bytes = 1ull << 40,
        .max_deferred_bytes = 1u << 20, .page_size = PG, .remote_mask = RW | RR, .local_super_mask = LW,
    };
    CHECK(cache_start(&p) == 0);
    mrc_stats_reset();
    slow_seen_ns = 0;
    for (uint64_t i = 0; i < 4; i++)
        mrc_cache_put(&cache, get(&dom_a, 0xf000000 + i * 2 * PG, PG, LW));
    struct mrc_stats_block s1, s2;
    mrc_stats_sum(&s1);
    mrc_stats_sum(&s2);
    uint64_t ns = s1.v[MRC_STAT_REAL_REG_NS];
    CHECKF(ns >= slow_seen_ns - slow_seen_ns / 100 && ns <= slow_seen_ns + slow_seen_ns / 20,
           "counted %llu ns, the back-end saw %llu ns", (unsigned long long)ns, (unsigned long long)slow_seen_ns);
    CHECK(s2.v[MRC_STAT_REAL_REG_NS] == ns);
    uint64_t hist = 0;
    for (int i = 0; i < MRC_HIST_BUCKETS; i++)
        hist += s1.hist[i][MRC_HIST_REG_NS];
    CHECKF(hist >= ns - ns / 1000 && hist <= ns + ns / 1000, "histogram %llu ns, total %llu ns",
           (unsigned long long)hist, (unsigned long long)ns);
}

/* A thread's spare entries go back to the pool when it exits: only the one its miss
 * used (still cached) stays out. */
static void *one_miss_thread(void *arg)
{
    (void)arg;
    mrc_cache_put(&cache, get(&dom_a, 0xe000000, PG, LW));
    return NULL;
}

static void test_thread_spares_return_at_exit(void)
{
    setup();
    pthread_t t;
    pthread_create(&t, NULL, one_miss_thread, NULL);
    pthread_join(t, NULL);
    CHECKF(cache.entries.live == 1, "%zu entries out of the pool", cache.entries.live);
    CHECK(cache.tree_count == 1);
}

/* Consecutive misses of one thread get entries at ascending addresses (the pool's
 * order), so a walk of the tree in address order reads memory forwards. */
static void test_spares_in_pool_order(void)
{
    setup();
    struct mrc_entry *e[5];
    for (int i = 0; i < 5; i++) {
        e[i] = get(&dom_a, 0xe200000 + (uint64_t)i * 2 * PG, PG, LW);
        mrc_cache_put(&cache, e[i]);
    }
    for (int i = 1; i < 5; i++)
        CHECKF((char *)e[i] > (char *)e[i - 1], "entry %d at %p, entry %d at %p", i, (void *)e[i], i - 1,
               (void *)e[i - 1]);
}

/* A miss made at thread exit by another library's key destructor, after the spares went
 * back: the spares it takes go back too (glibc runs destructors again for keys set
 * during a round). */
static pthread_key_t late_key;

static void late_miss(void *arg)
{
    (void)arg;
    mrc_cache_put(&cache, get(&dom_a, 0xe100000, PG, LW));
}

static void *miss_then_late_miss(void *arg)
{
    (void)arg;
    mrc_cache_put(&cache, get(&dom_a, 0xe000000, PG, LW));
    pthread_setspecific(late_key, &late_key);
    return NULL;
}

static void test_thread_spares_return_after_late_miss(void)
{
    setup();
    mrc_cache_put(&cache, get(&dom_a, 0xdf00000, PG, LW));   /* our key first: runs first */
    size_t mine = cache.entries.live;                        /* this thread's entry and spares */
    CHECK(pthread_key_create(&late_key, late_miss) == 0);
    pthread_t t;
    pthread_create(&t, NULL, miss_then_late_miss, NULL);
    pthread_join(t, NULL);
    pthread_key_delete(late_key);
    CHECK(cache.tree_count == 3);
    CHECKF(cache.entries.live == mine + 2, "%zu entries out of the pool, %zu expected", cache.entries.live,
           mine + 2);
}

static void test_invalidate_bulk_in_use_and_idle(void)
{
    setup_with(100000, 1ull << 40, MRC_REMOTE_EXACT);
    enum { N = 600 };
    static struct mrc_entry *held[N];
    for (uint64_t i = 0; i < N; i++) {   /* gaps: no merging; every third one kept in use */
        held[i] = get(&dom_a, 0x20000000 + i * 2 * PG, PG, LW);
        if (i % 3) {
            mrc_cache_put(&cache, held[i]);
            held[i] = NULL;
        }
    }
    /* An entry reaching into the range from below, and one past it. */
    mrc_cache_put(&cache, get(&dom_b, 0x1fff0000, 0x10000 + PG, LW));
    mrc_cache_put(&cache, get(&dom_a, 0x30000000, PG, LW));
    fb.forbidden = 1;
    /* Slots 100..499 of 602 entries, then slot 0 and the one from below. */
    mrc_cache_invalidate(&cache, 0x20000000 + 100 * 2 * PG, 400 * 2 * PG, MRC_INVAL_MUNMAP);
    mrc_cache_invalidate(&cache, 0x20000000, PG, MRC_INVAL_MUNMAP);   /* slot 0 and the one from below */
    fb.forbidden = 0;
    CHECK(fb.forbidden_calls == 0);
    /* The 400 starting in the first range are a long run: parked, out of the tree (no
     * query finds one) but still counted by the cache, and nothing of theirs deferred
     * yet. */
    CHECK(cache.nparked == 1);
    CHECK(mrc_itree_iter_first(&cache.tree, 0x20000000 + 100 * 2 * PG, 0x20000000 + 500 * 2 * PG - 1) == NULL);
    CHECKF(indexed() == 602 - 400 - 2 && cache.tree_count == 602 - 2, "%zu in the tree", indexed());
    CHECK(cache.ndeferred == 1);                     /* the one from below */
    struct mrc_gauges g;
    mrc_cache_get_gauges(&cache, &g);                /* settles the run first */
    CHECK(cache.nparked == 0);
    CHECK(tree_nodes() != (size_t)-1);
    CHECKF(indexed() == 602 - 400 - 2, "%zu in the tree", indexed());
    CHECK(cache.tree_count == indexed());
    uint64_t want_deferred = 1;                      /* the one from below */
    for (uint64_t i = 0; i < N; i++)
        if ((i == 0 || (i >= 100 && i < 500)) && !held[i])
            want_deferred++;
    CHECKF(cache.ndeferred == want_deferred && cache.deferred_bytes == want_deferred * PG +
           0x10000, "%llu deferred, want %llu", (unsigned long long)cache.ndeferred,
           (unsigned long long)want_deferred);
    CHECK(g.tree_entries == 200 && g.tree_bytes == 200 * PG);
    /* In-use invalidated entries stay valid for their holders, are never found again,
     * and go at their last release; the survivors still hit. */
    for (uint64_t i = 0; i < N; i++) {
        int gone = i == 0 || (i >= 100 && i < 500);
        if (held[i]) {
            CHECK(reg_of(held[i])->live);
            CHECK(!!(held[i]->flags & MRC_E_IN_TREE) == !gone);
        }
        uint64_t regs = fb.regs;
        struct mrc_entry *e = get(&dom_a, 0x20000000 + i * 2 * PG, PG, LW);
        CHECKF((fb.regs != regs) == gone, "slot %llu: %s", (unsigned long long)i, gone ? "hit" : "missed");
        CHECK(!held[i] || (e == held[i]) == !gone);
        mrc_cache_put(&cache, e);
        if (held[i]) {
            struct fake_reg *r = reg_of(held[i]);
            mrc_cache_put(&cache, held[i]);
            CHECK(r->live == !gone);
        }
    }
    CHECK(tree_nodes() != (size_t)-1);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0);
}

static void test_invalidate_everything_at_once(void)
{
    setup_with(100000, 1ull << 40, MRC_REMOTE_EXACT);
    for (uint64_t i = 0; i < 300; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x40000000 + i * 2 * PG, PG, LW));
    mrc_cache_drain(&cache);
    mrc_cache_invalidate(&cache, 0, UINT64_MAX, MRC_INVAL_MUNMAP);
    /* Parked whole: nothing left in the tree, the per-entry work not done yet. */
    CHECK(cache.tree.root == NULL && cache.nparked == 1 && cache.tree_count == 300 && cache.ndeferred == 0);
    CHECK(tree_nodes() != (size_t)-1);
    struct mrc_entry *e = get(&dom_a, 0x40000000, PG, LW);   /* the drain settles and deregisters; a miss */
    CHECK(fb.regs == 301 && fb.live == 1 && indexed() == 1 && cache.tree_count == 1);
    CHECK(cache.nparked == 0 && cache.ndeferred == 0 && cache.tree_bytes == PG);
    CHECK(cache.lru.lru_next == e && e->lru_next == &cache.lru);
    mrc_cache_put(&cache, e);
}

/* Parked runs and hints: a thread whose hint points into a parked run asks while the
 * lock is busy (so its get cannot settle the run first). It must not be handed the
 * parked entry: it waits for the lock, and registers anew. Two runs are parked, the
 * hint's in the older slot. */
enum { PARK_N = 80 };
static struct mrc_entry *park_old[PARK_N];
static struct mrc_entry *park_got;
static struct fake_reg *park_old_reg;   /* entry 0's: its memory may be reused, not this */
static int park_phase, park_hit;

static void *park_user(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < PARK_N; i++) {
        park_old[i] = get(&dom_a, 0x50000000 + i * 2 * PG, PG, LW);
        mrc_cache_put(&cache, park_old[i]);
    }
    mrc_cache_drain(&cache);   /* none young: both halves are runs of the tree */
    /* A hit makes entry 0 the newest hint of its set. */
    uint64_t regs = fb.regs;
    struct mrc_entry *e = get(&dom_a, 0x50000000, PG, LW);
    park_hit = e == park_old[0] && fb.regs == regs;
    park_old_reg = reg_of(e);
    mrc_cache_put(&cache, e);
    __atomic_store_n(&park_phase, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&park_phase, __ATOMIC_SEQ_CST) != 2)
        sched_yield();
    park_got = get(&dom_a, 0x50000000, PG, LW);
    return NULL;
}

static void test_parked_run_never_served_by_hints(void)
{
    setup_with(100000, 1ull << 40, MRC_REMOTE_EXACT);
    pthread_t u;
    pthread_create(&u, NULL, park_user, NULL);
    while (__atomic_load_n(&park_phase, __ATOMIC_SEQ_CST) != 1)
        sched_yield();
    CHECK(park_hit);
    mrc_cache_invalidate(&cache, 0x50000000, PARK_N / 2 * 2 * PG, MRC_INVAL_MUNMAP);
    mrc_cache_invalidate(&cache, 0x50000000 + PARK_N / 2 * 2 * PG, PARK_N / 2 * 2 * PG, MRC_INVAL_MUNMAP);
    CHECK(cache.nparked == 2);
    pthread_mutex_lock(&cache.lock);
    __atomic_store_n(&park_phase, 2, __ATOMIC_SEQ_CST);
    /* Long enough for the get to reach its hint while we hold the lock (if it were to
     * take the parked entry, it would not need the lock at all). */
    struct timespec wait = { 0, 50 * 1000 * 1000 };
    nanosleep(&wait, NULL);
    pthread_mutex_unlock(&cache.lock);
    pthread_join(u, NULL);
    CHECK(park_got != NULL && reg_of(park_got) != park_old_reg && !park_old_reg->live);
    CHECK(fb.regs == PARK_N + 1 && reg_of(park_got)->live);
    mrc_cache_put(&cache, park_got);
    park_phase = 0;
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0 && cache.nparked == 0);
}

/* Shared hints: a thread cycling through more buffers than its own hints hold leaves
 * each in the cache's shared hints, and a thread of its own (no hints yet) is then
 * served there without the lock, which the test holds; one that was invalidated, or
 * belongs to the cache a forked child forgot, is never served from them. */
enum { SHARED_N = 300 };
static uint64_t shared_addr(unsigned i)
{
    return 0x58000000 + (uint64_t)i * 2 * PG;
}

static struct mrc_entry *shared_got;
static int shared_done;

static void *shared_user(void *arg)
{
    shared_got = get(&dom_a, shared_addr((unsigned)(uintptr_t)arg), PG, LW);
    __atomic_store_n(&shared_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Gets buffer i on a thread of its own while holding the cache lock for up to wait_ms
 * (a served get takes microseconds): whether it finished while the lock was held. */
/* Runs fn(arg) on a thread of its own while holding the cache lock for up to wait_ms,
 * or until fn sets *done: whether it did while the lock was held. */
static int done_while_locked(void *(*fn)(void *), void *arg, int *done, int wait_ms)
{
    pthread_t u;
    __atomic_store_n(done, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&cache.lock);
    pthread_create(&u, NULL, fn, arg);
    for (int k = 0; k < wait_ms && !__atomic_load_n(done, __ATOMIC_SEQ_CST); k++) {
        struct timespec ms = { 0, 1000 * 1000 };
        nanosleep(&ms, NULL);
    }
    int r = __atomic_load_n(done, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&cache.lock);
    pthread_join(u, NULL);
    return r;
}

static int got_without_lock(unsigned i, int wait_ms)
{
    shared_got = NULL;
    return done_while_locked(shared_user, (void *)(uintptr_t)i, &shared_done, wait_ms);
}

static void test_shared_hints(void)
{
    setup();
    CHECK(cache.shared == NULL);
    for (unsigned i = 0; i < SHARED_N; i++)
        mrc_cache_put(&cache, get(&dom_a, shared_addr(i), PG, LW));
    mrc_cache_drain(&cache);
    CHECK(cache.shared == NULL);                /* misses set none */
    struct mrc_entry *first[SHARED_N];
    for (unsigned i = 0; i < SHARED_N; i++) {   /* hits the tree answers */
        first[i] = get(&dom_a, shared_addr(i), PG, LW);
        mrc_cache_put(&cache, first[i]);
    }
    CHECK(cache.shared != NULL && fb.regs == SHARED_N);
    unsigned served = 0;
    for (unsigned i = 0; i < SHARED_N; i += 37)
        if (got_without_lock(i, 10000)) {
            served += shared_got == first[i];
            mrc_cache_put(&cache, shared_got);
        }
    CHECKF(served == (SHARED_N + 36) / 37, "%u served without the lock", served);
    CHECK(fb.regs == SHARED_N);
    /* Invalidated while a user holds it (so it is alive, out of the tree): a fresh
     * thread registers anew (it waits for the lock to do so). */
    struct mrc_entry *held = get(&dom_a, shared_addr(5), PG, LW);
    struct fake_reg *old = reg_of(held);
    CHECK(held == first[5]);
    mrc_cache_invalidate(&cache, shared_addr(5), PG, MRC_INVAL_MUNMAP);
    CHECK(!got_without_lock(5, 200) && shared_got && shared_got != held && reg_of(shared_got) != old);
    CHECK(fb.regs == SHARED_N + 1 && old->live);
    mrc_cache_put(&cache, shared_got);
    mrc_cache_put(&cache, held);
    CHECK(!old->live);
    /* A forked child's cache starts with no shared hints: nothing of the parent's serves. */
    forgotten = fb.live;
    mrc_cache_forget(&cache);
    CHECK(cache.shared == NULL);
    CHECK(!got_without_lock(37, 200) && shared_got && shared_got != first[37]);
    mrc_cache_put(&cache, shared_got);
}

/* A pool of 4096 buffers 128 KiB apart, each used twice (the second time the tree
 * answers): a thread of its own then gets every one of them while the test holds the
 * lock. Their shared hints must all be there: 2 per set, no third one pushing one out
 * (a hash of the page alone crowded them into 2284 sets). */
enum { POOL_N = 4096 };
static uint64_t pool_addr(unsigned i)
{
    return 0x100000000ull + (uint64_t)i * 32 * PG;
}

static int pool_done;
static unsigned pool_at;
static struct mrc_entry *pool_got[POOL_N];

/* Only gets: a release may take the lock (every 16th LRU move). */
static void *pool_user(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < POOL_N; i++) {
        __atomic_store_n(&pool_at, i, __ATOMIC_SEQ_CST);
        pool_got[i] = get(&dom_a, pool_addr(i), 16 * PG, LW);
    }
    __atomic_store_n(&pool_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_shared_hints_hold_a_pool(void)
{
    setup_with(100000, 1ull << 40, MRC_REMOTE_EXACT);
    for (int pass = 0; pass < 2; pass++)
        for (unsigned i = 0; i < POOL_N; i++)
            mrc_cache_put(&cache, get(&dom_a, pool_addr(i), 16 * PG, LW));
    CHECK(fb.regs == POOL_N);
    CHECKF(done_while_locked(pool_user, NULL, &pool_done, 10000), "stopped at %u", pool_at);
    CHECK(fb.regs == POOL_N);
    for (unsigned i = 0; i < POOL_N; i++)
        mrc_cache_put(&cache, pool_got[i]);
}

/* A back-end that runs in_reg (once) while it registers, as an unmap on another thread
 * or a nested lookup would; a non-zero return fails the registration with it. */
static int (*in_reg)(uint64_t addr, uint64_t len);
static int reg_hooked(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                      uint32_t access, struct mrc_range *r, void **out)
{
    int (*f)(uint64_t, uint64_t) = in_reg;
    in_reg = NULL;
    int rc = f ? f(addr, len) : 0;
    return rc ? rc : fake_reg(ctx, domain, addr, len, iova, access, r, out);
}

static void setup_hooked(uint64_t max_entries, uint64_t max_bytes)
{
    cache_end();
    fake_init(&fb);
    forgotten = 0;
    in_reg = NULL;
    struct mrc_cache_params p = {
        .ops = { .reg = reg_hooked, .dereg = fake_dereg, .ctx = &fb },
        .max_entries = max_entries, .max_bytes = max_bytes, .max_deferred_bytes = 1u << 20,
        .page_size = PG, .remote_mask = RW | RR, .local_super_mask = LW,
    };
    CHECK(cache_start(&p) == 0);
}

/* Closes the cache while a miss is registering. */
static int close_now(uint64_t addr, uint64_t len)
{
    (void)addr, (void)len;
    mrc_cache_close(&cache, MRC_INVAL_SOURCE_LOST);
    return 0;
}

/* Closed: what was cached is gone (idle entries deregistered, one in use at its last
 * release), and nothing registered from then on is cached, a miss under way at the
 * close included: each request registers anew and is deregistered at its release. */
static void test_close_caches_nothing(void)
{
    setup_hooked(1000, 1ull << 40);
    mrc_cache_put(&cache, get(&dom_a, 0x80000, PG, LW));
    struct mrc_entry *held = get(&dom_a, 0x90000, PG, LW);
    in_reg = close_now;
    struct mrc_entry *e = get(&dom_a, 0xa0000, PG, LW);
    CHECK(e && (e->flags & MRC_E_PRIVATE));
    CHECK(indexed() == 0 && cache.tree_count == 0);
    mrc_cache_put(&cache, e);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 1 && fb.regs == 3);           /* only the held one is left */
    for (int i = 0; i < 2; i++) {
        struct mrc_entry *again = get(&dom_a, 0x80000, PG, LW);
        CHECK(again && (again->flags & MRC_E_PRIVATE));
        mrc_cache_put(&cache, again);
    }
    CHECK(fb.regs == 5 && fb.live == 1);
    mrc_cache_put(&cache, held);
    mrc_cache_drain(&cache);
    CHECK(fb.live == 0 && fb.deregs == 5 && indexed() == 0);
    /* A forked child's cache stays closed. */
    forgotten = fb.live;
    mrc_cache_forget(&cache);
    struct mrc_entry *child = get(&dom_a, 0x80000, PG, LW);
    CHECK(child && (child->flags & MRC_E_PRIVATE));
    mrc_cache_put(&cache, child);
}

/* Registers the second page of the range being registered, as another thread's miss
 * would during the back-end call. */
static struct mrc_entry *inner_got;
static int register_inner(uint64_t addr, uint64_t len)
{
    (void)len;
    inner_got = get(&dom_a, addr + PG, PG, LW);
    return 0;
}

/* A miss whose lookup saw no entry of its key skips the superseding walk unless
 * something was registered meanwhile: an entry of the key registered inside its range
 * while its back-end call ran is still superseded, and stays valid for its user. */
static void test_supersede_entry_made_during_registration(void)
{
    setup_hooked(1000, 1ull << 40);
    mrc_stats_reset();
    inner_got = NULL;
    in_reg = register_inner;
    struct mrc_entry *outer = get(&dom_a, 0x7100000, 4 * PG, LW);
    CHECK(inner_got && inner_got != outer && fb.regs == 2);
    CHECK(indexed() == 1 && cache.tree_count == 1);
    struct mrc_stats_block s;
    mrc_stats_sum(&s);
    CHECK(s.v[MRC_STAT_MERGES] == 1);
    CHECK(reg_of(inner_got)->live);
    mrc_cache_put(&cache, inner_got);
    CHECK(!reg_of(inner_got)->live);             /* its last release deregistered it */
    struct mrc_entry *again = get(&dom_a, 0x7101000, PG, LW);
    CHECK(again == outer && fb.regs == 2);
    mrc_cache_put(&cache, again);
    mrc_cache_put(&cache, outer);
}

/* A miss that merges an entry an unmap has begun to take. The unmap has announced its
 * range (the entry's second page) and waits for the lock, which the miss (queued first)
 * takes: its request overlaps the entry's first page, so its lookup still finds the
 * entry and merges it. Its registration then pins the unmapped page after the unmap's
 * begin returned and before the munmap (gen counts the page's mappings). Once the munmap
 * is done, a registration of that page on another thread, before the unmap's done, must
 * not be handed that registration. (The order of the two waiters is the lock's: if the
 * unmap went first, nothing merges, and the test says SKIP.) */
static uint64_t mu_gen, mu_pinned_gen;
static int mu_begun, mu_munmapped;
static struct mrc_entry *mu_got;

static int mu_pin(uint64_t addr, uint64_t len)
{
    (void)addr, (void)len;
    while (!__atomic_load_n(&mu_begun, __ATOMIC_SEQ_CST))
        sched_yield();
    mu_pinned_gen = __atomic_load_n(&mu_gen, __ATOMIC_SEQ_CST);
    return 0;
}

static void *mu_miss(void *arg)
{
    (void)arg;
    mu_got = get(&dom_a, 0x7300000, 2 * PG, LW);
    return NULL;
}

static void *mu_unmap(void *arg)
{
    (void)arg;
    uint64_t t = mrc_cache_unmap_begin(&cache, 0x7302000, PG, MRC_INVAL_MUNMAP);
    __atomic_store_n(&mu_begun, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&mu_munmapped, __ATOMIC_SEQ_CST))
        sched_yield();
    mrc_cache_unmap_done(&cache, t, 0x7302000, PG, MRC_INVAL_MUNMAP);
    return NULL;
}

static void test_merge_across_an_unmap_begun(void)
{
    setup_hooked(1000, 1ull << 40);
    mu_gen = mu_pinned_gen = 0;
    mu_begun = mu_munmapped = 0;
    mrc_cache_put(&cache, get(&dom_a, 0x7301000, 2 * PG, LW));
    in_reg = mu_pin;
    pthread_t m, u;
    struct timespec ms = { 0, 20 * 1000 * 1000 };
    pthread_mutex_lock(&cache.lock);
    uint64_t s0 = __atomic_load_n(&cache.inval_seq, __ATOMIC_SEQ_CST);
    pthread_create(&m, NULL, mu_miss, NULL);
    nanosleep(&ms, NULL);
    pthread_create(&u, NULL, mu_unmap, NULL);
    while (__atomic_load_n(&cache.inval_seq, __ATOMIC_SEQ_CST) == s0)
        sched_yield();
    nanosleep(&ms, NULL);
    pthread_mutex_unlock(&cache.lock);
    pthread_join(m, NULL);
    __atomic_fetch_add(&mu_gen, 1, __ATOMIC_SEQ_CST);   /* the munmap */
    struct mrc_entry *h = get(&dom_a, 0x7302000, PG, LW);
    CHECKF(!(h == mu_got && mu_pinned_gen < mu_gen), "served [%#llx, +%llu), pinned before the munmap",
           (unsigned long long)mrc_entry_start(h), (unsigned long long)mrc_entry_len(h));
    mrc_cache_put(&cache, h);
    __atomic_store_n(&mu_munmapped, 1, __ATOMIC_SEQ_CST);
    pthread_join(u, NULL);
    if (mrc_entry_len(mu_got) < 3 * PG)
        SKIP_TEST("the unmap took the lock before the miss: nothing was merged");
    mrc_cache_put(&cache, mu_got);
}

/* Parks the 45 slots at 0x70000000. */
static int park_45(uint64_t addr, uint64_t len)
{
    (void)addr, (void)len;
    mrc_cache_invalidate(&cache, 0x70000000, 45 * 2 * PG, MRC_INVAL_MUNMAP);
    return 0;
}

/* An unmap parks while slots are free; with all taken it walks the run itself. Flush
 * and eviction settle parked runs first (their entries are on the LRU, out of the tree). */
static void test_parked_slots_full_flush_and_evict(void)
{
    setup_with(100000, 1ull << 40, MRC_REMOTE_EXACT);
    const uint64_t runs = MRC_PARKED + 1, per = 40;
    for (uint64_t r = 0; r < runs; r++)
        for (uint64_t i = 0; i < per; i++)
            mrc_cache_put(&cache, get(&dom_a, 0x60000000 + (r * per + i) * 2 * PG, PG, LW));
    fb.forbidden = 1;
    for (uint64_t r = 0; r < runs; r++)
        mrc_cache_invalidate(&cache, 0x60000000 + r * per * 2 * PG, per * 2 * PG, MRC_INVAL_MUNMAP);
    fb.forbidden = 0;
    CHECK(fb.forbidden_calls == 0);
    CHECK(cache.nparked == MRC_PARKED && cache.ndeferred == per);   /* the last one walked */
    CHECK(cache.tree.root == NULL && tree_nodes() != (size_t)-1);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(cache.nparked == 0 && indexed() == 0 && cache.tree_count == 0);
    CHECK(fb.live == 0 && fb.deregs == runs * per);

    /* Eviction after a registration: 45 idle one-page entries and A (two pages), at the
     * byte limit. A miss overlapping A registers their union (so its entry goes in after
     * the back-end call), and an unmap parks the 45 meanwhile: over the limit, the miss
     * must settle them, not evict them out of a tree they are no longer in. */
    setup_hooked(100000, 47 * PG);
    for (uint64_t i = 0; i < 45; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x70000000 + i * 2 * PG, PG, LW));
    mrc_cache_put(&cache, get(&dom_a, 0x71000000, 2 * PG, LW));
    in_reg = park_45;
    struct mrc_entry *e = get(&dom_a, 0x71001000, 2 * PG, LW);
    CHECK(in_reg == NULL && cache.nparked == 0 && tree_nodes() != (size_t)-1);
    CHECK(mrc_entry_start(e) == 0x71000000 && mrc_entry_len(e) == 3 * PG);
    CHECK(cache.tree_count == 1 && indexed() == 1 && fb.deregs == 46 && fb.live == 1);
    mrc_cache_put(&cache, e);
    mrc_cache_flush(&cache, NULL, NULL);

    /* Out of pinnable memory (45 pages, all held by idle entries that an unmap parks
     * while the miss registers): evicting everything idle for the retry must deregister
     * the parked ones too, or the retry fails again. */
    setup_hooked(100000, 1ull << 40);
    for (uint64_t i = 0; i < 45; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x70000000 + i * 2 * PG, PG, LW));
    fb.limit_bytes = 45 * PG;
    in_reg = park_45;
    e = get(&dom_a, 0x72000000, PG, LW);
    CHECK(in_reg == NULL && cache.nparked == 0 && cache.ndeferred == 0);
    CHECK(tree_nodes() != (size_t)-1 && cache.tree_count == 1);
    CHECK(fb.deregs == 45 && fb.live == 1);
    mrc_cache_put(&cache, e);
    mrc_cache_flush(&cache, NULL, NULL);
}

/* ---- an unmap while a miss registers ---- */

static int unmap_request(uint64_t addr, uint64_t len)
{
    mrc_cache_invalidate(&cache, addr, len, MRC_INVAL_MUNMAP);
    return 0;
}

static int unmap_41_slots(uint64_t addr, uint64_t len)
{
    (void)addr, (void)len;
    mrc_cache_invalidate(&cache, 0x80300000, 41 * 2 * PG, MRC_INVAL_MUNMAP);
    return 0;
}

/* An unmap of a miss's range while it registers (walked, or parked with a long run of
 * idle entries): the registration may hold the old pages, so it goes to its caller
 * alone and is deregistered at its release, never served again. */
static void test_unmapped_while_registering_is_private(void)
{
    setup_hooked(1000, 1ull << 40);
    in_reg = unmap_request;
    struct mrc_entry *e = get(&dom_a, 0x80200000, PG, LW);
    CHECK((e->flags & ~MRC_E_HELD) == MRC_E_PRIVATE && e->ref == 1 && cache.tree_count == 0);
    struct fake_reg *r = reg_of(e);
    mrc_cache_put(&cache, e);
    CHECK(!r->live);
    uint64_t regs = fb.regs;
    mrc_cache_put(&cache, get(&dom_a, 0x80200000, PG, LW));
    CHECK(fb.regs == regs + 1);

    for (uint64_t i = 0; i < 40; i++)
        mrc_cache_put(&cache, get(&dom_a, 0x80300000 + i * 2 * PG, PG, LW));
    mrc_cache_drain(&cache);
    in_reg = unmap_41_slots;
    e = get(&dom_a, 0x80300000 + 40 * 2 * PG, PG, LW);   /* just after the 40 */
    CHECK(cache.nparked == 1 && (e->flags & ~MRC_E_HELD) == MRC_E_PRIVATE);
    r = reg_of(e);
    mrc_cache_put(&cache, e);
    CHECK(!r->live);
    regs = fb.regs;
    mrc_cache_put(&cache, get(&dom_a, 0x80300000 + 40 * 2 * PG, PG, LW));
    CHECK(cache.nparked == 0 && fb.regs == regs + 1);
    CHECK(tree_nodes() != (size_t)-1);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0);
}

/* ---- the entry pool's reserve ---- */

static struct mrc_pool tpool;
static unsigned low_calls;
static void on_low(void *arg)
{
    (void)arg;
    __atomic_fetch_add(&low_calls, 1, __ATOMIC_RELAXED);
}

static void test_pool_reserve_used_before_fresh_chunks(void)
{
    mrc_pool_init(&tpool, sizeof(struct mrc_entry), 0);
    low_calls = 0;
    void *first = mrc_pool_get(&tpool);      /* no reserve: carved by the get itself */
    CHECK(first && tpool.nready == 0 && low_calls == 0 && tpool.narenas == 1);
    mrc_pool_set_reserve(&tpool, 2, on_low, NULL);
    /* The first arena is one chunk, the get's: a refill never maps an arena itself. */
    CHECK(mrc_pool_refill(&tpool) == 0 && tpool.nready == 0 && tpool.narenas == 1);
    size_t left = (size_t)(tpool.cur.end - tpool.cur.start) / tpool.obj_size;
    for (size_t i = 0; i < left; i++)
        mrc_pool_get(&tpool);
    CHECK(low_calls == 0);
    char *g = mrc_pool_get(&tpool);          /* none ready: the get maps and carves, asks */
    CHECK(g && tpool.narenas == 2 && low_calls == 1);
    CHECK(mrc_pool_refill(&tpool) == 0 && tpool.nready == 1 && tpool.preparing == 0);
    CHECK(mrc_pool_refill(&tpool) == 0 && tpool.nready == 1);   /* arena used up: no more */
    struct mrc_pool_chunk a = tpool.ready[0];
    size_t per_chunk = (size_t)(a.end - a.start) / tpool.obj_size;
    CHECK(per_chunk >= 2 && (size_t)(a.end - a.start) % tpool.obj_size == 0);
    /* The rest of the current chunk first, then the ready one, asking for a refill. */
    left = (size_t)(tpool.cur.end - tpool.cur.start) / tpool.obj_size;
    for (size_t i = 0; i < left; i++)
        mrc_pool_get(&tpool);
    CHECK(tpool.nready == 1 && low_calls == 1);
    char *o = mrc_pool_get(&tpool);
    CHECK(o >= a.start && o < a.end && tpool.nready == 0 && low_calls == 2);
    for (size_t i = 1; i < per_chunk; i++)
        mrc_pool_get(&tpool);
    CHECK(low_calls == 2);
    char *fresh = mrc_pool_get(&tpool);      /* none ready: a new arena, carved here */
    CHECK(fresh && mrc_pool_owns(&tpool, fresh) && low_calls == 3 && tpool.narenas == 3);
    CHECK(!(fresh >= a.start && fresh < a.end));
    CHECK(mrc_pool_refill(&tpool) == 0 && tpool.nready == 2);   /* up to the reserve */
    mrc_pool_put(&tpool, o);                 /* freed objects before any chunk */
    CHECK(mrc_pool_get(&tpool) == o);
    CHECK(!mrc_pool_owns(&tpool, o + 16) && !mrc_pool_owns(&tpool, &tpool));
    mrc_pool_set_reserve(&tpool, 0, on_low, NULL);
    CHECK(mrc_pool_refill(&tpool) == 0 && tpool.nready == 2);   /* ready chunks stay */
}

/* With a reserve of 4, the refiller is asked only once half of it is used: one wake-up
 * (a system call) per two chunks, not per chunk. */
static void test_pool_reserve_wakes_at_half(void)
{
    mrc_pool_init(&tpool, sizeof(struct mrc_entry), 0);
    mrc_pool_set_reserve(&tpool, 4, on_low, NULL);
    /* Use chunks up, refilling after each, until the arenas (which grow, and which only
     * gets map) have room for a full reserve. */
    for (int i = 0; i < 64 && tpool.nready < 4; i++) {
        while (tpool.cur.start != tpool.cur.end)
            mrc_pool_get(&tpool);
        mrc_pool_get(&tpool);
        CHECK(mrc_pool_refill(&tpool) == 0);
    }
    CHECKF(tpool.nready == 4, "%u chunks ready", tpool.nready);
    unsigned asked = low_calls;
    for (int chunk = 1; chunk <= 2; chunk++) {
        while (tpool.cur.start != tpool.cur.end)
            mrc_pool_get(&tpool);
        mrc_pool_get(&tpool);                /* takes a ready chunk */
        CHECKF(low_calls == asked + (chunk == 2), "chunk %d: %u calls", chunk, low_calls - asked);
    }
    CHECK(tpool.nready == 2);
}

/* get_many: the free list first, then the current chunk, never past one new chunk. */
static void test_pool_get_many(void)
{
    mrc_pool_init(&tpool, sizeof(struct mrc_entry), 0);
    void *o[8];
    CHECK(mrc_pool_get_many(&tpool, o, 8) == 8 && tpool.live == 8);
    for (int i = 1; i < 8; i++)
        CHECK((char *)o[i] == (char *)o[i - 1] + tpool.obj_size);
    mrc_pool_put(&tpool, o[2]);
    mrc_pool_put(&tpool, o[5]);
    void *p[4];
    CHECK(mrc_pool_get_many(&tpool, p, 4) == 4 && tpool.live == 10);
    CHECK(p[0] == o[5] && p[1] == o[2]);                   /* freed ones first */
    CHECK((char *)p[2] == (char *)o[7] + tpool.obj_size);  /* then the chunk */
    size_t left = (size_t)(tpool.cur.end - tpool.cur.start) / tpool.obj_size;
    void **rest = calloc(left + 8, sizeof(void *));
    CHECK(mrc_pool_get_many(&tpool, rest, left) == left && tpool.cur.start == tpool.cur.end);
    size_t per_chunk = tpool.chunk_size / tpool.obj_size;
    CHECK(per_chunk >= 8);
    /* More than a chunk holds: one new chunk, then stop. */
    void **big = calloc(per_chunk + 8, sizeof(void *));
    CHECK(mrc_pool_get_many(&tpool, big, per_chunk + 8) <= per_chunk);
    free(big);
    free(rest);
}

#define POOL_GETTERS 2
#ifndef POOL_OBJS
#define POOL_OBJS 20000   /* per getter: about 40 chunks of 128-byte objects each */
#endif

static uint32_t refill_wake, refill_stop;
static void *pool_objs[POOL_GETTERS][POOL_OBJS];

static void wake_refiller(void *arg)
{
    (void)arg;
    __atomic_store_n(&refill_wake, 1, __ATOMIC_RELEASE);
}

static void *pool_refiller(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&refill_stop, __ATOMIC_ACQUIRE)) {
        if (__atomic_exchange_n(&refill_wake, 0, __ATOMIC_ACQ_REL))
            CHECK(mrc_pool_refill(&tpool) == 0);
        else
            sched_yield();
    }
    return NULL;
}

static void *pool_getter(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    for (int i = 0; i < POOL_OBJS; i++) {
        uint64_t *o = mrc_pool_get(&tpool);
        pool_objs[id][i] = o;
        if (!o)
            continue;
        /* Every word: an object handed out twice, or overlapping another, is caught. */
        for (size_t w = 0; w < tpool.obj_size / 8; w++)
            o[w] = id << 32 | (uint64_t)i;
        if (i % 7 == 3) {                    /* some go back and come out again */
            mrc_pool_put(&tpool, o);
            pool_objs[id][i] = NULL;
        }
    }
    return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void test_pool_gets_race_refills(void)
{
    mrc_pool_init(&tpool, sizeof(struct mrc_entry), 0);
    mrc_pool_set_reserve(&tpool, 2, wake_refiller, NULL);
    refill_wake = 1;
    refill_stop = 0;
    pthread_t r, g[POOL_GETTERS];
    pthread_create(&r, NULL, pool_refiller, NULL);
    for (uintptr_t i = 0; i < POOL_GETTERS; i++)
        pthread_create(&g[i], NULL, pool_getter, (void *)i);
    for (int i = 0; i < POOL_GETTERS; i++)
        pthread_join(g[i], NULL);
    __atomic_store_n(&refill_stop, 1, __ATOMIC_RELEASE);
    pthread_join(r, NULL);
    static uintptr_t all[POOL_GETTERS * POOL_OBJS];
    size_t n = 0, bad = 0;
    for (uintptr_t id = 0; id < POOL_GETTERS; id++)
        for (int i = 0; i < POOL_OBJS; i++) {
            uint64_t *o = pool_objs[id][i];
            if (!o)
                continue;
            all[n++] = (uintptr_t)o;
            bad += !mrc_pool_owns(&tpool, o) || ((uintptr_t)o & 63) != 0;
            for (size_t w = 0; w < tpool.obj_size / 8; w++)
                bad += o[w] != (id << 32 | (uint64_t)i);
        }
    CHECKF(bad == 0, "%zu objects not owned, misaligned or overwritten", bad);
    qsort(all, n, sizeof(all[0]), cmp_ptr);
    size_t dup = 0;
    for (size_t i = 1; i < n; i++)
        dup += all[i] - all[i - 1] < tpool.obj_size;
    CHECKF(dup == 0, "%zu objects overlap", dup);
    CHECK(n > POOL_GETTERS * POOL_OBJS / 2);
    CHECK(tpool.live == n && tpool.preparing == 0);
    CHECK(tpool.nready <= 2);
}

/* ---- threads ---- */

#define STRESS_THREADS 3
#define STRESS_SLOTS 64
#ifndef STRESS_OPS
#define STRESS_OPS 200000
#endif

/* Each slot's "mapping generation" models its pages: the invalidator does what an
 * unmap hook does (invalidate, unmap = bump the generation, invalidate again if a miss
 * was registering), then publishes the generation as done. A registration remembers the
 * generations it pinned; an entry handed out with a generation older than one that was
 * done before the request began is a stale registration. */
static uint64_t slot_gen[STRESS_SLOTS];
static uint64_t done_gen[STRESS_SLOTS];
static uint64_t stress_violations;
/* Slots a page apart (requests of two slots merge into larger entries) or two (one entry per slot,
 * so that an unmap over more than 32 of them parks a run). */
static uint64_t stress_stride = PG;
static int stress_long_runs;

struct stress_reg {
    struct fake_reg fr;         /* first: the fake back-end's record */
    uint64_t gen[STRESS_SLOTS];
};

static int stress_reg_fn(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                         uint32_t access, struct mrc_range *range, void **out)
{
    struct fake_reg *fr;
    int rc = fake_reg(ctx, domain, addr, len, iova, access, range, (void **)&fr);
    if (rc)
        return rc;
    struct stress_reg *r = calloc(1, sizeof(*r));
    r->fr = *fr;
    fr->live = 0;               /* replaced by r */
    uint64_t s0 = (addr - 0x10000000) / stress_stride, s1 = (addr + len - 1 - 0x10000000) / stress_stride;
    for (uint64_t s = s0; s <= s1 && s < STRESS_SLOTS; s++)
        r->gen[s] = __atomic_load_n(&slot_gen[s], __ATOMIC_SEQ_CST);
    /* A real registration takes microseconds after pinning: widen that window. */
    sched_yield();
    *out = r;
    return 0;
}

static void *stress_user(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    struct mrc_entry *held = NULL;
    for (int i = 0; i < STRESS_OPS; i++) {
        unsigned s = (unsigned)rand_r(&seed) % STRESS_SLOTS;
        /* Slots a page apart: a request of two overlaps its neighbours' entries, and
         * merges them. */
        unsigned n = stress_stride == PG && s + 1 < STRESS_SLOTS ? 1 + (unsigned)rand_r(&seed) % 2 : 1;
        struct mrc_entry *e = NULL;
        uint64_t before[2];
        for (unsigned k = 0; k < n; k++)
            before[k] = __atomic_load_n(&done_gen[s + k], __ATOMIC_SEQ_CST);
        uint64_t addr = 0x10000000 + (uint64_t)s * stress_stride;
        if (mrc_cache_get(&cache, &dom_a, addr, n * PG, addr, LW, &e) != 0)
            continue;
        struct stress_reg *r = e->reg;
        for (unsigned k = 0; k < n; k++)
            if (r->gen[s + k] < before[k])
                __atomic_fetch_add(&stress_violations, 1, __ATOMIC_RELAXED);
        /* Each entry is held until the next one is in hand, as a program keeps an MR
         * while it uses it: an invalidated entry with a user is exactly what the hints
         * must no longer hand out. */
        if (held)
            mrc_cache_put(&cache, held);
        held = e;
    }
    if (held)
        mrc_cache_put(&cache, held);
    return NULL;
}

static int stress_stop;
static uint64_t stress_parks;   /* unmaps after which a run was parked (maybe by another) */

static void *stress_invalidator(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!__atomic_load_n(&stress_stop, __ATOMIC_SEQ_CST)) {
        unsigned s = (unsigned)rand_r(&seed) % STRESS_SLOTS;
        unsigned n = 1 + (unsigned)rand_r(&seed) % 4;
        if (stress_long_runs && rand_r(&seed) % 8 == 0)
            n = 33 + (unsigned)rand_r(&seed) % 32;
        if (rand_r(&seed) % 64 == 0) {        /* every slot: often the whole tree at once */
            s = 0;
            n = STRESS_SLOTS;
        }
        if (s + n > STRESS_SLOTS)
            n = STRESS_SLOTS - s;
        uint64_t addr = 0x10000000 + (uint64_t)s * stress_stride, len = (uint64_t)n * stress_stride;
        uint64_t ticket = mrc_cache_unmap_begin(&cache, addr, len, MRC_INVAL_MUNMAP);
        if (__atomic_load_n(&cache.nparked, __ATOMIC_ACQUIRE))
            stress_parks++;
        for (unsigned k = s; k < s + n; k++)
            __atomic_fetch_add(&slot_gen[k], 1, __ATOMIC_SEQ_CST);
        mrc_cache_unmap_done(&cache, ticket, addr, len, MRC_INVAL_MUNMAP);
        for (unsigned k = s; k < s + n; k++)
            __atomic_store_n(&done_gen[k], __atomic_load_n(&slot_gen[k], __ATOMIC_SEQ_CST), __ATOMIC_SEQ_CST);
        /* Entries then live long enough to reach other threads' hints. */
        sched_yield();
    }
    return NULL;
}

/* Holds the cache lock for short spells, as a miss or a settling drain does: a get's
 * drain then finds the lock busy, and its hint lookup meets runs still parked. */
static void *stress_locker(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stress_stop, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&cache.lock);
        for (volatile int i = 0; i < 2000; i++)
            ;
        pthread_mutex_unlock(&cache.lock);
        sched_yield();
    }
    return NULL;
}

static int stress_dereg_fn(void *ctx, void *reg)
{
    struct stress_reg *r = reg;
    return fake_dereg(ctx, &r->fr);
}

static void stress_run(uint64_t stride, int long_runs)
{
    stress_stride = stride;
    stress_long_runs = long_runs;
    stress_violations = 0;
    stress_parks = 0;
    cache_end();
    fake_init(&fb);
    forgotten = 0;
    struct mrc_cache_params p = {
        .ops = { .reg = stress_reg_fn, .dereg = stress_dereg_fn, .ctx = &fb },
        .max_entries = 48, .max_bytes = 1ull << 40, .max_deferred_bytes = 1u << 20,
        .page_size = PG, .remote_mask = RW | RR, .local_super_mask = LW,
    };
    CHECK(cache_start(&p) == 0);
    pthread_t u[STRESS_THREADS], inv, locker;
    stress_stop = 0;
    pthread_create(&inv, NULL, stress_invalidator, (void *)7);
    if (long_runs)
        pthread_create(&locker, NULL, stress_locker, NULL);
    for (uintptr_t i = 0; i < STRESS_THREADS; i++)
        pthread_create(&u[i], NULL, stress_user, (void *)(i + 1));
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(u[i], NULL);
    __atomic_store_n(&stress_stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(inv, NULL);
    if (long_runs)
        pthread_join(locker, NULL);
    CHECKF(stress_violations == 0, "%llu stale entries returned", (unsigned long long)stress_violations);
    CHECKF(!long_runs || stress_parks > 0, "no run was ever parked");
    mrc_cache_flush(&cache, NULL, NULL);
    CHECKF(fb.live == 0, "%llu registrations left after flush", (unsigned long long)fb.live);
    CHECK(fb.forbidden_calls == 0);
}

static void test_threads_never_return_invalidated(void)
{
    stress_run(PG, 0);
}

/* The same with runs parked by the unmaps, while other threads' hints point into them. */
static void test_threads_never_return_parked(void)
{
    stress_run(2 * PG, 1);
}

/* Destroy reports an entry still held (and keeps the cache usable), deregisters idle,
 * deferred and parked entries, and succeeds once everything is released. */
static void test_destroy_reports_what_is_left(void)
{
    setup();
    struct mrc_entry *held = get(&dom_a, 0x10000, PG, LW);
    for (uint64_t i = 0; i < 100; i++)   /* a run long enough to park */
        mrc_cache_put(&cache, get(&dom_a, 0x100000 + i * 2 * PG, PG, LW));
    mrc_cache_drain(&cache);               /* young entries into the tree */
    mrc_cache_put(&cache, get(&dom_b, 0x900000, PG, LW));
    mrc_cache_invalidate(&cache, 0x100000, 200 * PG, MRC_INVAL_MUNMAP);
    mrc_cache_invalidate(&cache, 0x900000, PG, MRC_INVAL_MUNMAP);
    CHECK(cache.nparked == 1 && cache.ndeferred == 1);
    struct mrc_cache_leftovers left;
    CHECK(mrc_cache_destroy(&cache, &left) == -EBUSY);
    CHECKF(left.in_use == 1 && left.entries == 1, "%llu held, %llu objects out",
           (unsigned long long)left.in_use, (unsigned long long)left.entries);
    CHECK(fb.live == 1 && fb.deregs == 101);     /* all but the one held */
    mrc_cache_put(&cache, held);
    CHECK(mrc_cache_destroy(&cache, &left) == 0 && left.in_use == 0 && left.entries == 0);
    CHECK(fb.live == 0);
    cache_live = 0;
}

/* A request larger than max_entry_bytes is its caller's alone: deregistered at its
 * release, never pushing the cache's other entries out; smaller ones are cached, and a
 * merge never grows an entry past the bound. */
static void test_large_registrations_not_kept(void)
{
    setup_with(1000, 64 * PG, MRC_REMOTE_EXACT);
    cache.p.max_entry_bytes = 16 * PG;
    struct mrc_entry *small = get(&dom_a, 0x100000, PG, LW);
    mrc_cache_put(&cache, small);
    struct mrc_entry *big = get(&dom_a, 0x800000, 17 * PG, LW);
    CHECK(big && (big->flags & MRC_E_PRIVATE));
    struct mrc_entry *again = get(&dom_a, 0x800000, 17 * PG, LW);
    CHECK(again && again != big && fb.regs == 3);   /* two holders, two registrations */
    mrc_cache_put(&cache, again);
    mrc_cache_put(&cache, big);
    CHECK(fb.live == 1);                            /* both gone at their release */
    struct mrc_entry *hit = get(&dom_a, 0x100000, PG, LW);
    CHECK(hit == small && fb.regs == 3);            /* the small one stayed */
    mrc_cache_put(&cache, hit);
    /* Exactly the bound is kept; an overlapping request whose union would pass it (23
     * pages, within twice the request and half the byte limit) is not merged. */
    struct mrc_entry *edge = get(&dom_a, 0x400000, 16 * PG, LW);
    CHECK(edge && !(edge->flags & MRC_E_PRIVATE));
    mrc_cache_put(&cache, edge);
    struct mrc_entry *next = get(&dom_a, 0x400000 + 8 * PG, 15 * PG, LW);
    CHECK(next && next != edge && mrc_entry_len(next) == 15 * PG && !(next->flags & MRC_E_PRIVATE));
    mrc_cache_put(&cache, next);
    struct mrc_stats_block s;
    mrc_stats_sum(&s);
    CHECK(s.v[MRC_STAT_UNCACHED_LARGE] >= 2);
}

/* An idle entry goes once `ticks` expiries passed without its use; one used meanwhile,
 * or in use, stays; the deferred go too; the LRU's order is kept. */
static void test_expire_idle(void)
{
    setup();
    struct mrc_entry *a = get(&dom_a, 0x100000, PG, LW);
    struct mrc_entry *b = get(&dom_a, 0x200000, PG, LW);
    struct mrc_entry *held = get(&dom_a, 0x300000, PG, LW);
    mrc_cache_put(&cache, a);
    mrc_cache_put(&cache, b);
    CHECK(mrc_cache_expire(&cache, 3) == 0);
    CHECK(mrc_cache_expire(&cache, 3) == 0);
    struct mrc_entry *b2 = get(&dom_a, 0x200000, PG, LW);   /* b used again */
    CHECK(b2 == b);
    mrc_cache_put(&cache, b2);
    CHECK(mrc_cache_expire(&cache, 3) == 1 && fb.live == 2);   /* a: three ticks idle */
    CHECK(mrc_cache_expire(&cache, 3) == 0);
    CHECK(mrc_cache_expire(&cache, 3) == 1 && fb.live == 1);   /* then b, stamped at tick 2 */
    for (int i = 0; i < 5; i++)
        CHECK(mrc_cache_expire(&cache, 3) == 0);               /* held stays */
    CHECK(fb.live == 1 && cache.tree_count == 1);
    mrc_cache_put(&cache, held);
    /* Invalidated, deferred: the next expiry deregisters it. */
    struct mrc_entry *d = get(&dom_a, 0x500000, PG, LW);
    mrc_cache_put(&cache, d);
    mrc_cache_invalidate(&cache, 0x500000, PG, MRC_INVAL_API);
    CHECK(cache.ndeferred == 1);
    mrc_cache_expire(&cache, 100);
    CHECK(cache.ndeferred == 0 && fb.live == 1);
    struct mrc_stats_block s;
    mrc_stats_sum(&s);
    CHECK(s.v[MRC_STAT_EXPIRED] >= 2);
}

/* More entries than one chunk of an expiry: all seen once, the lock let go between. */
static void test_expire_many(void)
{
    setup_with(5000, 1ull << 40, MRC_REMOTE_EXACT);
    enum { N = 1000 };
    static struct mrc_entry *e[N];
    for (int i = 0; i < N; i++)
        e[i] = get(&dom_a, 0x1000000 + (uint64_t)i * 2 * PG, PG, LW);
    for (int i = 0; i < N; i++)
        if (i % 3)
            mrc_cache_put(&cache, e[i]);
    CHECK(mrc_cache_expire(&cache, 2) == 0);   /* one tick idle */
    uint64_t idle = 0;
    for (int i = 0; i < N; i++)
        idle += i % 3 != 0;
    CHECK(mrc_cache_expire(&cache, 2) == idle);
    CHECK(cache.tree_count == N - idle && fb.live == N - idle);
    for (int i = 0; i < N; i += 3)
        mrc_cache_put(&cache, e[i]);
}

static void test_keys(const void *reg, uint32_t *lkey, uint32_t *rkey)
{
    const struct fake_reg *r = reg;
    *lkey = (uint32_t)(r->addr >> 12);
    *rkey = (uint32_t)r->len;
}

/* The largest cached registrations, largest first, with their keys, users and idle
 * ticks; private ones are not the cache's. */
static void test_largest(void)
{
    setup();
    cache.p.keys = test_keys;
    struct mrc_entry *e1 = get(&dom_a, 0x100000, 2 * PG, LW);
    struct mrc_entry *e2 = get(&dom_a, 0x200000, 8 * PG, LW);
    struct mrc_entry *e3 = get(&dom_a, 0x300000, 4 * PG, RW);
    struct mrc_entry *e4 = get(&dom_a, 0x400000, PG, LW);
    mrc_cache_put(&cache, e2);
    mrc_cache_expire(&cache, 100);
    mrc_cache_expire(&cache, 100);
    struct mrc_cache_mr top[3];
    CHECK(mrc_cache_largest(&cache, top, 3) == 3);
    CHECK(top[0].addr == 0x200000 && top[0].len == 8 * PG && top[0].users == 0 && top[0].idle_ticks == 2);
    CHECK(top[0].lkey == 0x200 && top[0].rkey == 8 * PG);
    CHECK(top[1].addr == 0x300000 && top[1].users == 1 && top[1].access == RW && top[1].idle_ticks == 0);
    CHECK(top[2].addr == 0x100000 && top[2].users == 1);
    struct mrc_cache_mr all[8];
    CHECK(mrc_cache_largest(&cache, all, 8) == 4 && all[3].len == PG);
    mrc_cache_put(&cache, e1);
    mrc_cache_put(&cache, e3);
    mrc_cache_put(&cache, e4);
}

static uint64_t noticed_bytes;
static int notices;

static void notice(uint64_t bytes)
{
    noticed_bytes = bytes;
    notices++;
}

/* The pinned notice: once, at the registration that passes its bound, private ones
 * counted too; never again after the bytes fall back and rise past it once more. */
static void test_pinned_notice_once(void)
{
    setup();
    cache.p.pinned_notice = notice;
    cache.p.pinned_notice_bytes = 4 * PG;
    notices = 0;
    struct mrc_entry *a = get(&dom_a, 0x100000, 2 * PG, LW);
    struct mrc_entry *b = get(&dom_a, 0x200000, 2 * PG, RW);
    CHECK(notices == 0);                                     /* 4 pages: not past it */
    cache.p.max_entry_bytes = PG;                            /* the next is private */
    struct mrc_entry *c = get(&dom_a, 0x300000, 2 * PG, LW);
    CHECK(notices == 1 && noticed_bytes == 6 * PG && (c->flags & MRC_E_PRIVATE));
    mrc_cache_put(&cache, c);
    mrc_cache_put(&cache, b);
    mrc_cache_put(&cache, a);
    mrc_cache_flush(&cache, NULL, NULL);
    struct mrc_entry *d = get(&dom_a, 0x400000, 8 * PG, LW);   /* private, past it again */
    CHECK(notices == 1);
    mrc_cache_put(&cache, d);
}

/* In-use records: what the layer above is told of memory changed under a holder. */
static uint64_t inuse_notified, inuse_last_seq;
static void on_in_use(void *arg, uint64_t seq)
{
    (void)arg;
    inuse_notified++;
    inuse_last_seq = seq;
}

static void setup_in_use(uint64_t max_entry_bytes)
{
    setup();
    struct mrc_cache_params p = cache.p;
    cache_end();
    p.in_use = on_in_use;
    p.max_entry_bytes = max_entry_bytes;
    inuse_notified = inuse_last_seq = 0;
    CHECK(cache_start(&p) == 0);
}

/* Peeks, peeks again (the same records: peeking takes nothing), then retires. */
static unsigned take_in_use(struct mrc_inuse_rec *r, unsigned max, uint64_t *lost)
{
    uint64_t pos, pos2;
    unsigned n = mrc_cache_in_use_peek(&cache, r, max, &pos);
    struct mrc_inuse_rec again[MRC_INUSE_RING];
    unsigned n2 = mrc_cache_in_use_peek(&cache, again, max < MRC_INUSE_RING ? max : MRC_INUSE_RING, &pos2);
    CHECK(n2 == n && pos2 == pos && (!n || again[0].seq == r[0].seq));
    uint64_t l = mrc_cache_in_use_retire(&cache, pos, n);
    if (lost)
        *lost = l;
    return n;
}

/* An entry a holder still has is recorded with the range and the cause; an idle one,
 * a closing cache and a lost source are not. */
static void test_in_use_recorded_only_under_a_holder(void)
{
    setup_in_use(0);
    struct mrc_inuse_rec r[4];
    uint64_t lost;
    const uint64_t a = 0x70000000, b = 0x71000000;
    struct mrc_entry *held = get(&dom_a, a, 4 * PG, LW);
    mrc_cache_put(&cache, get(&dom_a, b, 4 * PG, LW));   /* idle */
    uint64_t mark = mrc_cache_inval_mark(&cache);
    mrc_cache_invalidate(&cache, b, 4 * PG, MRC_INVAL_MUNMAP);
    CHECK(!mrc_cache_in_use_pending(&cache) && inuse_notified == 0 && take_in_use(r, 4, &lost) == 0);
    mrc_cache_invalidate(&cache, a + PG, PG, MRC_INVAL_MADVISE);
    CHECK(mrc_cache_in_use_pending(&cache) && inuse_notified == 1);
    CHECK(take_in_use(r, 4, &lost) == 1 && lost == 0 && !mrc_cache_in_use_pending(&cache));
    CHECKF(r[0].first == a + PG && r[0].last == a + 2 * PG - 1 && r[0].cause == MRC_INVAL_MADVISE &&
               r[0].seq == inuse_last_seq && mark <= r[0].seq,
           "record [%#jx, %#jx] cause %d seq %ju (mark %ju)", (uintmax_t)r[0].first, (uintmax_t)r[0].last,
           (int)r[0].cause, (uintmax_t)r[0].seq, (uintmax_t)mark);
    /* A holder that read its mark after the invalidation did not hold across it. */
    CHECK(mrc_cache_inval_mark(&cache) > r[0].seq);
    mrc_cache_put(&cache, held);
    struct mrc_entry *again = get(&dom_a, a, 4 * PG, LW);
    mrc_cache_invalidate(&cache, 0, UINT64_MAX, MRC_INVAL_SOURCE_LOST);
    CHECK(take_in_use(r, 4, &lost) == 0);
    mrc_cache_put(&cache, again);
    struct mrc_entry *third = get(&dom_a, a, 4 * PG, LW);
    mrc_cache_close(&cache, MRC_INVAL_API);
    CHECK(take_in_use(r, 4, &lost) == 0 && inuse_notified == 1);
    mrc_cache_put(&cache, third);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0);
}

/* A registration its caller has alone (too large to keep, raced, retired) is seen by an
 * invalidation although no tree holds it; once released it is not. */
static void test_in_use_private_and_retired_holders(void)
{
    setup_in_use(16 * PG);
    struct mrc_inuse_rec r[4];
    const uint64_t big = 0x72000000, small = 0x73000000;
    struct mrc_entry *p = get(&dom_a, big, 64 * PG, LW);
    CHECK(p->flags & MRC_E_PRIVATE);
    mrc_cache_invalidate(&cache, big + 63 * PG, PG, MRC_INVAL_MUNMAP);
    CHECK(take_in_use(r, 4, NULL) == 1 && r[0].first == big + 63 * PG && r[0].cause == MRC_INVAL_MUNMAP);
    CHECK(mrc_cache_put(&cache, p) == 0 && cache.nheld == 0);
    mrc_cache_invalidate(&cache, big, 64 * PG, MRC_INVAL_MUNMAP);
    CHECK(take_in_use(r, 4, NULL) == 0);
    struct mrc_entry *s = get(&dom_a, small, PG, LW);
    mrc_cache_retire(&cache, s);
    CHECK(cache.nheld == 1);
    mrc_cache_invalidate(&cache, small, PG, MRC_INVAL_FILE);
    CHECK(take_in_use(r, 4, NULL) == 1 && r[0].cause == MRC_INVAL_FILE);
    mrc_cache_put(&cache, s);
    CHECK(cache.nheld == 0 && fb.live == 0);
}

/* A parked run's holders are recorded when it is settled, under the unmap's number;
 * records past the ring are counted as lost, never block. */
static void test_in_use_parked_and_lost(void)
{
    setup_in_use(0);
    struct mrc_inuse_rec r[MRC_INUSE_RING];
    uint64_t lost;
    const uint64_t base = 0x74000000;
    struct mrc_entry *held = NULL;
    for (uint64_t i = 0; i < 40; i++) {
        struct mrc_entry *e = get(&dom_a, base + i * 2 * PG, PG, LW);
        if (i == 20)
            held = e;
        else
            mrc_cache_put(&cache, e);
    }
    mrc_cache_drain(&cache);
    mrc_cache_invalidate(&cache, base, 80 * PG, MRC_INVAL_MREMAP);
    CHECK(cache.nparked == 1);
    CHECK(take_in_use(r, MRC_INUSE_RING, &lost) == 1 && r[0].cause == MRC_INVAL_MREMAP && r[0].first == base &&
          lost == 0);
    /* Out of the tree now: a later change there finds no holder (the first said it). */
    mrc_cache_invalidate(&cache, base + 40 * PG, PG, MRC_INVAL_MUNMAP);
    CHECK(take_in_use(r, MRC_INUSE_RING, &lost) == 0);
    mrc_cache_put(&cache, held);
    struct mrc_entry *kept = get(&dom_a, base, PG, LW);
    mrc_cache_retire(&cache, kept);   /* held out of the tree: every change is seen */
    for (unsigned i = 0; i < MRC_INUSE_RING + 3; i++)
        mrc_cache_invalidate(&cache, base, PG, MRC_INVAL_MUNMAP);
    CHECKF(take_in_use(r, MRC_INUSE_RING, &lost) == MRC_INUSE_RING && lost == 3, "lost %ju", (uintmax_t)lost);
    CHECK(r[0].seq < r[MRC_INUSE_RING - 1].seq);
    mrc_cache_put(&cache, kept);
    mrc_cache_flush(&cache, NULL, NULL);
    CHECK(fb.live == 0);
}

int main(void)
{
    check_after_test = cache_end;   /* each test's cache destroyed and checked, within it */
    RUN(test_hit_after_release);
    RUN(test_local_rounded_to_pages_and_subrange_hits);
    RUN(test_local_superset_serves_read_only_but_not_reverse);
    RUN(test_remote_entry_never_serves_local_request);
    RUN(test_remote_exact_bytes_and_rights);
    RUN(test_remote_never_policy);
    RUN(test_semantic_flag_must_match);
    RUN(test_domain_and_iova_offset_in_key);
    RUN(test_merge_overlapping);
    RUN(test_adjacent_entries_stay_apart);
    RUN(test_merge_at_most_doubles_the_request);
    RUN(test_no_merge_across_keys_or_remote);
    RUN(test_supersede_entry_made_during_registration);
    RUN(test_merge_across_an_unmap_begun);
    RUN(test_young_entries);
    RUN(test_unmap_parks_run_and_takes_young);
    RUN(test_limit_entries_evicts_lru);
    RUN(test_limit_never_evicts_in_use);
    RUN(test_limit_bytes);
    RUN(test_enomem_evicts_and_retries);
    RUN(test_enomem_with_all_in_use_fails);
    RUN(test_last_try_pins_nothing);
    RUN(test_failed_last_try_keeps_first_error);
    RUN(test_shared_registration_is_not_counted);
    RUN(test_backend_error_passes_through);
    RUN(test_expand_widens_local_misses_only);
    RUN(test_expand_refused_registers_own_range);
    RUN(test_expand_supersedes_entries_inside);
    RUN(test_invalidate_idle_defers_and_never_calls_backend);
    RUN(test_invalidate_then_lookup_misses);
    RUN(test_invalidate_in_use_deregisters_at_last_release);
    RUN(test_invalidate_outside_and_at_top_of_space);
    RUN(test_deferred_drained_by_next_call);
    RUN(test_deferred_bound_calls_for_help);
    RUN(test_parked_bound_calls_for_help);
    RUN(test_flush_by_domain);
    RUN(test_idle_bytes);
    RUN(test_refused_dereg_kept_and_retried_by_a_miss);
    RUN(test_refused_dereg_asked_less_often_by_misses);
    RUN(test_flush_retries_the_refused_of_its_domain);
    RUN(test_private_refused_stays_with_its_caller);
    RUN(test_enomem_retries_the_refused);
    RUN(test_destroy_reports_the_refused);
    RUN(test_limits_met_at_release);
    RUN(test_take_only_when_alone);
    RUN(test_retire_keeps_holders);
    RUN(test_forget_never_deregisters);
    RUN(test_close_caches_nothing);
    RUN(test_gauges_and_stats);
    RUN(test_gauges_peak_after_deregistrations);
    RUN(test_reg_time_counted_in_ns);
    RUN(test_thread_spares_return_at_exit);
    RUN(test_spares_in_pool_order);
    RUN(test_thread_spares_return_after_late_miss);
    RUN(test_pool_get_many);
    RUN(test_pool_reserve_wakes_at_half);
    RUN(test_invalidate_bulk_in_use_and_idle);
    RUN(test_invalidate_everything_at_once);
    RUN(test_parked_run_never_served_by_hints);
    RUN(test_shared_hints);
    RUN(test_shared_hints_hold_a_pool);
    RUN(test_parked_slots_full_flush_and_evict);
    RUN(test_unmapped_while_registering_is_private);
    RUN(test_pool_reserve_used_before_fresh_chunks);
    RUN(test_pool_gets_race_refills);
    RUN(test_threads_never_return_invalidated);
    RUN(test_threads_never_return_parked);
    RUN(test_destroy_reports_what_is_left);
    RUN(test_large_registrations_not_kept);
    RUN(test_expire_idle);
    RUN(test_expire_many);
    RUN(test_largest);
    RUN(test_pinned_notice_once);
    RUN(test_in_use_recorded_only_under_a_holder);
    RUN(test_in_use_private_and_retired_holders);
    RUN(test_in_use_parked_and_lost);
    CHECK_EXIT();
}
