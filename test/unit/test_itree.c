/* test_itree.c - the interval tree against a brute-force model with fixed seeds:
 * random insert/remove/query mixes over adversarial range shapes (nested, equal starts,
 * duplicates, touching, top of the address space, single points), every query's full
 * result set and order compared, mrc_itree_check after every batch; and tests that
 * the checker itself fails on corrupted trees; remove_range's cut (split and join) on
 * random trees and on one of 100k nodes. "--bench" times insert/remove/lookup and
 * remove_range. */
#include "core/itree.h"
#include "check.h"

#include <stdint.h>
#include <time.h>

/* Random operations in test_random_vs_model: cheap enough (about 0.3 s, 1 s under
 * TSan) to run in full in every build; -D to soak for longer. */
#ifndef ITREE_TEST_OPS
#define ITREE_TEST_OPS 1000000
#endif

#define MAX64 UINT64_MAX

static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
    rng_state = seed;
}

/* splitmix64: tiny, full 64-bit output, fixed sequence per seed. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rnd_below(uint64_t n)
{
    return rnd() % n;
}

/* ---- the model: a pool of nodes, a dense list of the live ones ---- */

/* Room for test_remove_range_cuts' trees of a few thousand nodes; the random mix keeps
 * to its own, smaller bound so that its model scans stay cheap. */
#define POOL 4096
#define RANDOM_LIVE_MAX 2048

struct tnode {
    struct mrc_itree_node n;    /* first, so a tree node converts back */
    uint64_t seq;               /* insertion number: equal starts iterate in this order */
    unsigned stamp;             /* last query that returned it: catches duplicates */
    int live_pos;               /* index in live[], -1 when not in the tree */
};

static struct tnode pool[POOL];
static int live[POOL];
static int live_n;
static int free_list[POOL];
static int free_n;
static uint64_t insert_seq;
static unsigned query_stamp;
static struct mrc_itree tree;

static void model_reset(void)
{
    mrc_itree_init(&tree);
    memset(pool, 0, sizeof(pool));
    live_n = 0;
    free_n = 0;
    for (int i = POOL - 1; i >= 0; i--) {
        pool[i].live_pos = -1;
        free_list[free_n++] = i;
    }
    insert_seq = 0;
    query_stamp = 0;
}

static struct tnode *tnode_of(struct mrc_itree_node *n)
{
    return (struct tnode *)n;
}

static void model_insert(uint64_t start, uint64_t last)
{
    int i = free_list[--free_n];
    struct tnode *tn = &pool[i];

    tn->n.start = start;
    tn->n.last = last;
    tn->seq = ++insert_seq;
    tn->live_pos = live_n;
    live[live_n++] = i;
    mrc_itree_insert(&tree, &tn->n);
}

/* Inserts the k ranges gen made, in one mrc_itree_insert_many call: the array's order
 * is their insertion order (seq), as if inserted one by one. */
static void model_insert_many(int k, void (*gen)(int i, uint64_t *start, uint64_t *last))
{
    struct mrc_itree_node *nodes[64];

    for (int j = 0; j < k; j++) {
        int i = free_list[--free_n];
        struct tnode *tn = &pool[i];

        gen(j, &tn->n.start, &tn->n.last);
        tn->seq = ++insert_seq;
        tn->live_pos = live_n;
        live[live_n++] = i;
        nodes[j] = &tn->n;
    }
    mrc_itree_insert_many(&tree, nodes, (unsigned)k);
    for (int j = 1; j < k; j++)
        CHECKF(nodes[j - 1]->start <= nodes[j]->start, "batch not sorted at %d", j);
}

static void model_forget(struct tnode *tn)
{
    int pos = tn->live_pos;
    int moved = live[--live_n];

    live[pos] = moved;
    pool[moved].live_pos = pos;
    tn->live_pos = -1;
    free_list[free_n++] = (int)(tn - pool);
}

static void model_remove(struct tnode *tn)
{
    mrc_itree_remove(&tree, &tn->n);
    model_forget(tn);
}

static int overlaps(const struct mrc_itree_node *n, uint64_t start, uint64_t last)
{
    return n->start <= last && start <= n->last;
}

/* Runs [start, last] on the tree and on the model; CHECKs that both return the same
 * set, that the tree returns each node once in (start, insertion) order. Returns the
 * number of matches. */
static int compare_query(uint64_t start, uint64_t last)
{
    unsigned stamp = ++query_stamp;
    int got = 0, want = 0, bad = 0;
    const struct tnode *prev = NULL;

    for (struct mrc_itree_node *n = mrc_itree_iter_first(&tree, start, last); n;
         n = mrc_itree_iter_next(n, start, last)) {
        struct tnode *tn = tnode_of(n);

        if (tn < pool || tn >= pool + POOL || tn->live_pos < 0 || tn->stamp == stamp ||
            !overlaps(n, start, last)) {
            bad++;
            break;              /* a foreign or repeated node: the walk may loop */
        }
        if (prev && (prev->n.start > n->start ||
                     (prev->n.start == n->start && prev->seq > tn->seq)))
            bad++;
        tn->stamp = stamp;
        prev = tn;
        got++;
    }
    for (int i = 0; i < live_n; i++) {
        const struct tnode *tn = &pool[live[i]];

        if (overlaps(&tn->n, start, last)) {
            want++;
            if (tn->stamp != stamp)
                bad++;
        }
    }
    CHECKF(!bad && got == want, "query [%#jx, %#jx]: tree %d nodes, model %d, %d bad",
           (uintmax_t)start, (uintmax_t)last, got, want, bad);
    return want;
}

/* ---- adversarial range shapes ---- */

enum shape {
    SHAPE_TINY,         /* [0, 64): equal starts, duplicates, nesting, touching */
    SHAPE_POINT,        /* start == last */
    SHAPE_TOP,          /* at or near UINT64_MAX */
    SHAPE_NESTED,       /* concentric shells around one centre */
    SHAPE_HUGE,         /* [0, x], [x, MAX], [0, MAX] */
    SHAPE_RANDOM,       /* anywhere in 64 bits */
    SHAPE_PAGES,        /* page-aligned, touching neighbours */
    SHAPE_TOUCH,        /* adjacent to a live node */
    SHAPE_DUP,          /* a copy of a live node */
    SHAPE_COUNT
};

static void gen_range(unsigned mask, uint64_t *start, uint64_t *last)
{
    enum shape s;
    uint64_t a, b;

    do
        s = (enum shape)rnd_below(SHAPE_COUNT);
    while (!(mask & (1u << s)));
    if ((s == SHAPE_TOUCH || s == SHAPE_DUP) && live_n == 0)
        s = SHAPE_TINY;

    switch (s) {
    case SHAPE_TINY:
        a = rnd_below(48);
        b = a + rnd_below(16);
        break;
    case SHAPE_POINT:
        a = b = rnd_below(4) ? rnd_below(64) : rnd();
        if (rnd_below(8) == 0)
            a = b = rnd_below(2) ? MAX64 : 0;
        break;
    case SHAPE_TOP:
        a = MAX64 - rnd_below(40);
        b = rnd_below(2) ? MAX64 : a + rnd_below(MAX64 - a + 1);
        break;
    case SHAPE_NESTED: {
        uint64_t k = rnd_below(32), c = 1ULL << 40;

        a = c - k * 4096;
        b = c + k * 4096 + 4095;
        break;
    }
    case SHAPE_HUGE:
        switch (rnd_below(3)) {
        case 0:  a = 0; b = MAX64; break;
        case 1:  a = 0; b = rnd(); break;
        default: a = rnd(); b = MAX64; break;
        }
        break;
    case SHAPE_RANDOM:
        a = rnd();
        b = rnd();
        if (a > b) {
            uint64_t t = a;
            a = b;
            b = t;
        }
        break;
    case SHAPE_PAGES:
        a = 0x7f0000000000ULL + rnd_below(256) * 4096;
        b = a + (1 + rnd_below(8)) * 4096 - 1;
        break;
    case SHAPE_TOUCH: {
        const struct tnode *tn = &pool[live[rnd_below((uint64_t)live_n)]];

        if (tn->n.last != MAX64 && (tn->n.start == 0 || rnd_below(2))) {
            a = tn->n.last + 1;
            b = a + rnd_below(4096);
            if (b < a)
                b = MAX64;
        } else if (tn->n.start != 0) {
            b = tn->n.start - 1;
            a = b - (b < 4096 ? b : rnd_below(4096));
        } else {
            a = 0;                      /* [0, MAX] touches nothing: duplicate it */
            b = MAX64;
        }
        break;
    }
    case SHAPE_DUP:
    default: {
        const struct tnode *tn = &pool[live[rnd_below((uint64_t)live_n)]];

        a = tn->n.start;
        b = tn->n.last;
        break;
    }
    }
    *start = a;
    *last = b;
}

/* A query range: mostly points and ranges of the same shapes, plus the whole space,
 * the extremes, and points just around a live node's ends. */
static void gen_query(unsigned mask, uint64_t *start, uint64_t *last)
{
    switch (rnd_below(8)) {
    case 0:
        *start = 0;
        *last = MAX64;
        return;
    case 1:
        *start = *last = rnd_below(2) ? MAX64 : 0;
        return;
    case 2:
    case 3:
        if (live_n) {
            const struct tnode *tn = &pool[live[rnd_below((uint64_t)live_n)]];
            uint64_t p;

            switch (rnd_below(4)) {
            case 0:  p = tn->n.start; break;
            case 1:  p = tn->n.last; break;
            case 2:  p = tn->n.start - 1; break;    /* wraps at 0: fine, a point */
            default: p = tn->n.last + 1; break;
            }
            *start = *last = p;
            return;
        }
        /* fall through */
    default:
        gen_range(mask, start, last);
        if (rnd_below(3) == 0)
            *last = *start;             /* a single point of that shape */
        return;
    }
}

/* Removes every node overlapping [start, last] while walking, fetching the next node
 * before removing the current one (the documented pattern); CHECKs the removed set. */
static void remove_matching(uint64_t start, uint64_t last)
{
    int want = 0, got = 0, bad = 0;

    for (int i = 0; i < live_n; i++)
        want += overlaps(&pool[live[i]].n, start, last);
    struct mrc_itree_node *n = mrc_itree_iter_first(&tree, start, last);
    while (n) {
        struct mrc_itree_node *next = mrc_itree_iter_next(n, start, last);
        struct tnode *tn = tnode_of(n);

        if (tn->live_pos < 0 || !overlaps(n, start, last) || got > want) {
            bad++;
            break;
        }
        model_remove(tn);
        got++;
        n = next;
    }
    CHECKF(!bad && got == want, "remove-while-iterating [%#jx, %#jx]: removed %d of %d, %d bad",
           (uintmax_t)start, (uintmax_t)last, got, want, bad);
}

/* Overwrites what the tree keeps in a node, as a callback that frees or reuses it
 * would: a tree that still reads a node handed to its callback crashes or breaks. */
static void poison(struct mrc_itree_node *n)
{
    n->left = n->right = (struct mrc_itree_node *)(uintptr_t)0xdead0000dead0000ULL;
    n->parent_color = (uintptr_t)0xbad0000bad0000ULL;
    n->subtree_last = 0;
}

/* mrc_itree_remove_range's callback: each node once, live, overlapping, in (start,
 * insertion) order; the model forgets it and its links are poisoned. */
struct range_check {
    uint64_t start, last;
    int have_prev;                 /* the previous node's key, copied: its tnode may be */
    uint64_t prev_start, prev_seq; /* reused by an insertion before the next callback */
    uint64_t max_last;             /* the largest last seen */
    int got, bad;
};

static void range_removed(struct mrc_itree_node *n, void *arg)
{
    struct range_check *rc = arg;
    struct tnode *tn = tnode_of(n);

    if (tn->live_pos < 0 || !overlaps(n, rc->start, rc->last) ||
        (rc->have_prev && (rc->prev_start > n->start ||
                           (rc->prev_start == n->start && rc->prev_seq > tn->seq)))) {
        rc->bad++;
        return;
    }
    rc->have_prev = 1;
    if (n->last > rc->max_last)
        rc->max_last = n->last;
    rc->prev_start = n->start;
    rc->prev_seq = tn->seq;
    model_forget(tn);
    poison(n);
    rc->got++;
}

static int tree_consistent(void);

/* Set: remove_range keeps long runs cut out (mrc_itree_remove_range's cut), checks the
 * tree while one is out, inserts into the emptied range, and only then walks the run. */
static int park_mode;
/* Nodes of the model in a run cut out and not yet walked: live in the model, not in the
 * tree. */
static int parked_n;

/* The same removal in one call (short runs one by one, long ones cut out whole). */
static void remove_range(uint64_t start, uint64_t last)
{
    int want = 0;
    struct mrc_itree_node *run = NULL;

    for (int i = 0; i < live_n; i++)
        want += overlaps(&pool[live[i]].n, start, last);
    struct range_check rc = { .start = start, .last = last };
    size_t n = mrc_itree_remove_range(&tree, start, last, range_removed, &rc, park_mode ? &run : NULL);
    if (run) {
        /* Cut out: still live in the model, out of the tree and every query. */
        parked_n = want - (int)n;
        CHECK(parked_n > 0 && mrc_itree_iter_first(&tree, start, last) == NULL);
        CHECK(tree_consistent());
        int added = 0;
        for (; added < 3 && free_n > 0; added++)
            model_insert(start, start);
        uint64_t run_last = mrc_itree_run_last(run);
        rc.max_last = 0;
        size_t walked = mrc_itree_walk_run(run, range_removed, &rc);
        CHECKF(run_last == rc.max_last, "parked run: largest last %#jx, its root says %#jx",
               (uintmax_t)rc.max_last, (uintmax_t)run_last);
        CHECKF(walked == (size_t)parked_n, "parked run: %zu walked, %d cut out", walked, parked_n);
        n += walked;
        parked_n = 0;
        /* The new nodes are in the tree, never in the run. */
        for (struct mrc_itree_node *x = mrc_itree_iter_first(&tree, start, last); x;
             x = mrc_itree_iter_next(x, start, last))
            added--;
        CHECKF(added == 0, "parked range [%#jx, %#jx]: insertions while parked lost",
               (uintmax_t)start, (uintmax_t)last);
    }
    CHECKF(!rc.bad && rc.got == want && n == (size_t)want,
           "remove_range [%#jx, %#jx]: %zu returned, %d removed of %d, %d bad",
           (uintmax_t)start, (uintmax_t)last, n, rc.got, want, rc.bad);
}

/* A range spanning two random live nodes (often a large share of the tree), or now
 * and then the whole space (which remove_range cuts out whole). */
static void gen_wide(uint64_t *start, uint64_t *last)
{
    if (live_n == 0 || rnd_below(8) == 0) {
        *start = 0;
        *last = UINT64_MAX;
        return;
    }
    const struct tnode *a = &pool[live[rnd_below((uint64_t)live_n)]];
    const struct tnode *b = &pool[live[rnd_below((uint64_t)live_n)]];
    *start = a->n.start < b->n.start ? a->n.start : b->n.start;
    *last = a->n.last > b->n.last ? a->n.last : b->n.last;
}

/* The nodes t holds, as its checker counts them, or -1 if an invariant is broken. */
static long checked_nodes(const struct mrc_itree *t)
{
    size_t n;

    return mrc_itree_check(t, &n) == 0 ? (long)n : -1;
}

static int tree_consistent(void)
{
    long n = checked_nodes(&tree);
    int ok = n == live_n - parked_n;

    CHECKF(ok, "tree invariants or node count (%ld, model %d) broken", n, live_n - parked_n);
    return ok;
}

/* A batch for mrc_itree_insert_many: past the tree's last start (ties included), before
 * its first (strictly), or drawn like any insertion (then it interleaves, or not). */
static unsigned batch_mask, batch_kind;
static uint64_t batch_at;

static void gen_batch(int i, uint64_t *start, uint64_t *last)
{
    if (i == 0) {
        struct mrc_itree_node *edge = NULL;

        batch_kind = (unsigned)rnd_below(3);
        for (int j = 0; j < live_n; j++) {
            struct mrc_itree_node *n = &pool[live[j]].n;

            if (!edge || (batch_kind == 0 ? n->start > edge->start : n->start < edge->start))
                edge = n;
        }
        batch_at = !edge ? rnd() : edge->start;
        if (batch_kind == 1 && batch_at < 64)
            batch_kind = 2;
    }
    if (batch_kind == 0) {              /* ascending or equal from the last start */
        *start = batch_at + (rnd_below(3) ? rnd_below(1000) : 0);
        if (*start < batch_at)
            *start = batch_at;
    } else if (batch_kind == 1) {       /* below the first start */
        *start = rnd_below(batch_at);
    } else {
        gen_range(batch_mask, start, last);
        return;
    }
    *last = *start + rnd_below(MAX64 - *start < 5000 ? MAX64 - *start + 1 : 5000);
}

/* The main test: ITREE_TEST_OPS random operations in phases; each phase draws a size
 * target and a subset of shapes, so the tree repeatedly grows, shrinks and empties
 * with one kind of adversarial content at a time and with mixtures. */
static void test_random_vs_model(void)
{
    const long ops = ITREE_TEST_OPS;
    const unsigned all = (1u << SHAPE_COUNT) - 1;
    long done = 0, queries = 0, matches = 0;

    rng_seed(0x6d72636163686531ULL);
    model_reset();
    while (done < ops && check_failures == 0) {
        unsigned mask = rnd_below(3) ? (unsigned)rnd_below(all) + 1 : all;
        int target = (int)(1 + rnd_below(rnd_below(4) ? 256 : RANDOM_LIVE_MAX - 64));
        long phase_ops = 2000 + (long)rnd_below(30000);

        for (long i = 0; i < phase_ops && done < ops; i++, done++) {
            uint64_t r = rnd_below(100), s, l;

            if (r < 40) {
                gen_query(mask, &s, &l);
                matches += compare_query(s, l);
                queries++;
            } else if (r < 41) {
                gen_query(mask, &s, &l);
                remove_matching(s, l);
            } else if (r < 42) {
                if (rnd_below(2))
                    gen_query(mask, &s, &l);
                else
                    gen_wide(&s, &l);
                remove_range(s, l);
                if (!tree_consistent())
                    return;
            } else if (r < 45) {
                if (free_n < 64)
                    continue;
                batch_mask = mask;
                model_insert_many(1 + (int)rnd_below(20), gen_batch);
            } else if (live_n < target ? r < 80 : r < 55) {
                if (free_n == 0)
                    continue;
                gen_range(mask, &s, &l);
                model_insert(s, l);
            } else if (live_n > 0) {
                model_remove(&pool[live[rnd_below((uint64_t)live_n)]]);
            }
            if ((done & 255) == 255 && !tree_consistent())
                return;
        }
        /* Drain some phases completely so the empty tree and regrowth are covered. */
        if (rnd_below(8) == 0)
            while (live_n > 0)
                model_remove(&pool[live[rnd_below((uint64_t)live_n)]]);
        if (!tree_consistent())
            return;
    }
    CHECK(done == ops);
    printf("# %ld ops, %ld queries, %ld matches compared\n", done, queries, matches);
}

/* Monotonic and identical keys are the classic rebalancing stressors; check often
 * so a transient violation cannot hide between batches. */
enum { SEQ_N = 1500 };

static void seq_range(int pattern, uint64_t i, uint64_t *s, uint64_t *l)
{
    switch (pattern) {
    case 0:  *s = 2 * i; *l = *s + i % 5; break;                /* ascending */
    case 1:  *s = 2 * (SEQ_N - i); *l = *s + i % 5; break;      /* descending */
    case 2:  *s = 7; *l = 7; break;                             /* pure duplicates */
    case 3:  *s = 7; *l = 7 + i; break;                         /* equal starts */
    case 4:  *s = MAX64 - i; *l = MAX64; break;                 /* top, descending */
    default: *s = i; *l = MAX64 - i; break;                     /* nested shells */
    }
}

static void test_sequential_and_equal(void)
{
    for (int pattern = 0; pattern < 6; pattern++) {
        model_reset();
        for (uint64_t i = 0; i < SEQ_N; i++) {
            uint64_t s, l;

            seq_range(pattern, i, &s, &l);
            model_insert(s, l);
            if ((i & 15) == 0 && !tree_consistent())
                return;
        }
        compare_query(0, MAX64);
        compare_query(7, 7);
        compare_query(SEQ_N, SEQ_N);
        compare_query(MAX64, MAX64);
        /* Remove front to back, back to front, or from the middle of the live list. */
        while (live_n > 0) {
            struct mrc_itree_node *n = mrc_itree_iter_first(&tree, 0, MAX64);

            if (pattern % 3 == 1) {
                for (struct mrc_itree_node *m = n; m; m = mrc_itree_iter_next(m, 0, MAX64))
                    n = m;
            } else if (pattern % 3 == 2) {
                n = &pool[live[live_n / 2]].n;
            }
            model_remove(tnode_of(n));
            if ((live_n & 15) == 0 && !tree_consistent())
                return;
        }
        CHECK(tree.root == NULL && checked_nodes(&tree) == 0);
    }
}

/* Batches of mrc_itree_insert_many as the cache files its young entries: appended to a
 * growing tree (ties with the last start included), prepended (descending addresses),
 * interleaved, and a first-start tie (which cannot go before, so goes node by node). */
static uint64_t seq_next;
static int tie_first;   /* gen_up's first node repeats the tree's last start */

static void gen_up(int i, uint64_t *start, uint64_t *last)
{
    /* Every third repeats its predecessor's start, and so may the first. */
    *start = seq_next + (i % 3 == 2 || (i == 0 && tie_first) ? 0 : 2);
    seq_next = *start;
    *last = *start + (uint64_t)i % 7;
}

static void gen_down(int i, uint64_t *start, uint64_t *last)
{
    seq_next -= 3;
    *start = seq_next;
    *last = *start + (uint64_t)i % 4;
}

static void gen_spread(int i, uint64_t *start, uint64_t *last)
{
    *start = 1000000 + (uint64_t)i * 997 % 64 * 7919;
    *last = *start + 100;
}

static void gen_first_tie(int i, uint64_t *start, uint64_t *last)
{
    *start = i ? 5 : tnode_of(mrc_itree_iter_first(&tree, 0, MAX64))->n.start;
    *last = *start + 1;
}

/* Every batch size up to the model's 64, past the last start and before the first:
 * the piece the batch becomes has a different shape (how many full levels, which nodes
 * red) at each. */
static void test_insert_many_sizes(void)
{
    model_reset();
    seq_next = 1u << 30;
    for (int k = 1; k <= 64 && check_failures == 0; k++) {
        tie_first = k % 2;
        model_insert_many(k, gen_up);
        if (!tree_consistent())
            return;
    }
    compare_query(0, MAX64);
    seq_next = 1u << 29;
    for (int k = 1; k <= 40 && check_failures == 0; k++) {
        model_insert_many(k, gen_down);
        if (!tree_consistent())
            return;
    }
    compare_query(0, MAX64);
}

static void test_insert_many(void)
{
    model_reset();
    seq_next = 1u << 30;
    for (int b = 0; b < 100 && check_failures == 0; b++) {
        tie_first = b % 2;
        model_insert_many(1 + b % 16, gen_up);
        if (!tree_consistent())
            return;
        compare_query(0, MAX64);
    }
    seq_next = 1u << 29;
    for (int b = 0; b < 100 && check_failures == 0; b++) {
        model_insert_many(1 + b % 17, gen_down);
        if (!tree_consistent())
            return;
        compare_query(0, MAX64);
    }
    model_insert_many(16, gen_spread);
    model_insert_many(16, gen_spread);      /* the same ranges again: every start a tie */
    model_insert_many(3, gen_first_tie);
    CHECK(tree_consistent());
    compare_query(0, MAX64);
    compare_query(1000000, 1000000 + 7919);
    for (int i = 0; i < 2000 && check_failures == 0; i++) {
        uint64_t s = rnd_below(1u << 31), l = s + rnd_below(1u << 20);
        compare_query(s, l);
    }
    model_insert_many(0, gen_up);
    CHECK(tree_consistent());
}

/* Exact expected answers at the top of the address space, where an exclusive end
 * would overflow. */
static void test_top_of_address_space(void)
{
    struct mrc_itree t;
    struct mrc_itree_node a = { .start = MAX64, .last = MAX64 };
    struct mrc_itree_node b = { .start = MAX64 - 1, .last = MAX64 };
    struct mrc_itree_node c = { .start = 0, .last = MAX64 };
    struct mrc_itree_node d = { .start = MAX64 - 4096, .last = MAX64 - 2 };
    struct mrc_itree_node *n;

    mrc_itree_init(&t);
    mrc_itree_insert(&t, &a);
    mrc_itree_insert(&t, &b);
    mrc_itree_insert(&t, &c);
    mrc_itree_insert(&t, &d);
    CHECK(mrc_itree_check(&t, NULL) == 0);

    n = mrc_itree_iter_first(&t, MAX64, MAX64);
    CHECK(n == &c);
    n = n ? mrc_itree_iter_next(n, MAX64, MAX64) : NULL;
    CHECK(n == &b);
    n = n ? mrc_itree_iter_next(n, MAX64, MAX64) : NULL;
    CHECK(n == &a);
    CHECK(!n || mrc_itree_iter_next(n, MAX64, MAX64) == NULL);

    n = mrc_itree_iter_first(&t, MAX64 - 2, MAX64 - 2);
    CHECK(n == &c);
    n = n ? mrc_itree_iter_next(n, MAX64 - 2, MAX64 - 2) : NULL;
    CHECK(n == &d);
    CHECK(!n || mrc_itree_iter_next(n, MAX64 - 2, MAX64 - 2) == NULL);

    mrc_itree_remove(&t, &c);
    CHECK(mrc_itree_iter_first(&t, 0, MAX64 - 4097) == NULL);
    CHECK(mrc_itree_iter_first(&t, MAX64 - 1, MAX64) == &b);
    CHECK(checked_nodes(&t) == 3);
}

/* remove_range over a tree of disjoint ranges: none, a few (one by one), a tenth, half
 * and all (cut out whole), a reversed range; the tree stays valid and usable after. */
static void test_remove_range_shares(void)
{
    static const struct { uint64_t from, to; } cut[] = {
        { 5000, 5000 }, { 100, 104 }, { 200, 299 }, { 300, 799 }, { 0, 999 }, { 0, 999 },
    };

    for (unsigned k = 0; k < sizeof(cut) / sizeof(cut[0]); k++) {
        model_reset();
        for (uint64_t i = 0; i < 1000; i++)
            model_insert(i * 16, i * 16 + 7);
        uint64_t s = cut[k].from * 16, l = cut[k].to * 16 + 7;
        if (k == 5)
            model_remove(&pool[live[0]]);   /* all that is left, with the bounds kept */
        remove_range(cut[k].from == 5000 ? s + 8 : s, l);
        if (!tree_consistent())
            return;
        for (uint64_t i = 0; i < 100; i++)
            model_insert(i * 160 + 8, i * 160 + 8);
        remove_range(1000, 2000);
        if (!tree_consistent())
            return;
        CHECK(compare_query(0, UINT64_MAX) == live_n);
    }
    model_reset();
    model_insert(10, 20);
    struct range_check rc = { .start = 20, .last = 10 };
    CHECK(mrc_itree_remove_range(&tree, 20, 10, range_removed, &rc, NULL) == 0);   /* reversed: none */
    CHECK(rc.got == 0 && checked_nodes(&tree) == 1 && live_n == 1);
}

/* ---- remove_range's cut (split, join) against the model ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* A value in [lo, hi], one of the two edges half of the time. */
static uint64_t pick_between(uint64_t lo, uint64_t hi)
{
    switch (rnd_below(4)) {
    case 0:  return lo;
    case 1:  return hi;
    default: return hi - lo == MAX64 ? rnd() : lo + rnd_below(hi - lo + 1);
    }
}

/* A node for the cut tests: starts on a coarse grid of about n / 2 values, so equal
 * starts sit at most cut boundaries; lasts mostly short, some long (straddlers of a
 * later cut), a few at the ends of the address space or of any shape. */
static void cut_node(int n, uint64_t *start, uint64_t *last)
{
    uint64_t r = rnd_below(100), s = rnd_below((uint64_t)n / 2 + 2) * 64;

    if (r < 75) {
        *start = s;
        *last = s + rnd_below(64);
    } else if (r < 90) {
        *start = s;
        *last = s + rnd_below(64 * 64);
    } else if (r < 95) {
        switch (rnd_below(4)) {
        case 0:  *start = 0; *last = rnd_below(2) ? 0 : rnd_below(64 * 64); break;
        case 1:  *start = MAX64 - rnd_below(2); *last = MAX64; break;
        case 2:  *start = s; *last = MAX64; break;
        default: *start = 0; *last = MAX64; break;
        }
    } else {
        gen_range((1u << SHAPE_COUNT) - 1, start, last);
    }
}

/* A range whose starts-inside run holds about w of the live nodes (exactly w when the
 * starts at its ends are distinct): its ends lie anywhere between the neighbouring
 * distinct starts, or at 0 and UINT64_MAX. w == 0: a gap, the space below the lowest
 * start or above the highest, or any range. */
static void cut_range(int w, uint64_t *start, uint64_t *last)
{
    static uint64_t st[POOL];
    int n = live_n;

    for (int i = 0; i < n; i++)
        st[i] = pool[live[i]].n.start;
    qsort(st, (size_t)n, sizeof(st[0]), cmp_u64);
    if (w > n)
        w = n;
    if (w <= 0) {
        int i = n ? (int)rnd_below((uint64_t)n) : 0;

        if (n && rnd_below(2) && (i + 1 < n ? st[i + 1] - st[i] > 1 : st[i] < MAX64)) {
            *start = st[i] + 1;     /* strictly between two starts, or above all */
            *last = pick_between(*start, i + 1 < n ? st[i + 1] - 1 : MAX64);
        } else if (n && rnd_below(2) && st[0] > 0) {
            *start = 0;
            *last = pick_between(0, st[0] - 1);
        } else {
            gen_range((1u << SHAPE_COUNT) - 1, start, last);
        }
        return;
    }
    int i = (int)rnd_below((uint64_t)(n - w + 1)), j = i + w - 1;
    *start = pick_between(i == 0 ? 0 : st[i - 1] + (st[i - 1] < st[i]), st[i]);
    *last = pick_between(st[j], j == n - 1 ? MAX64 : st[j + 1] - (st[j + 1] > st[j]));
}

/* Random trees of 0 to 3000 nodes, built by insertions and removals (so shapes and
 * colours vary), cut by ranges of every size: none, one, a few, either side of the
 * one-by-one threshold (32 in itree.c), half, all but one, all. After each cut: the
 * callback saw exactly the model's overlapping set in order (remove_range), the tree
 * is valid with the right count, and later insertions, removals and queries agree.
 * Every other tree parks its long runs instead (remove_range's park_mode). */
static void test_remove_range_cuts(void)
{
    long cuts = 0, removed = 0;

    rng_seed(0x637574736a6f696eULL);
    for (int round = 0; round < 400 && check_failures == 0; round++) {
        int n;

        park_mode = round & 1;

        switch (rnd_below(5)) {
        case 0:  n = (int)rnd_below(3); break;
        case 1:  n = 2 + (int)rnd_below(40); break;
        case 2:  n = 30 + (int)rnd_below(60); break;
        case 3:  n = 90 + (int)rnd_below(400); break;
        default: n = 500 + (int)rnd_below(2500); break;
        }
        model_reset();
        for (int i = 0; i < 2 * n + 4 || live_n < n; i++) {
            uint64_t s, l;

            if (live_n > 0 && (rnd_below(10) < 3 || live_n > n)) {
                model_remove(&pool[live[rnd_below((uint64_t)live_n)]]);
            } else {
                cut_node(n, &s, &l);
                model_insert(s, l);
            }
        }
        if (!tree_consistent())
            goto out;
        for (int c = 0; c < 4; c++) {
            uint64_t s, l;
            int w, before = live_n;

            switch (rnd_below(8)) {
            case 0:  w = 0; break;
            case 1:  w = 1; break;
            case 2:  w = 2 + (int)rnd_below(4); break;
            case 3:  w = 28 + (int)rnd_below(12); break;
            case 4:  w = live_n / 2; break;
            case 5:  w = live_n - 1; break;
            case 6:  w = live_n; break;
            default: w = (int)rnd_below((uint64_t)live_n + 1); break;
            }
            cut_range(w, &s, &l);
            remove_range(s, l);
            cuts++;
            removed += before - live_n;
            if (!tree_consistent())
                goto out;
            /* The rest of the tree is as usable as before. */
            for (int k = 0; k < 24; k++) {
                uint64_t r = rnd_below(3);

                if (r == 0 && free_n > 0) {
                    cut_node(n, &s, &l);
                    model_insert(s, l);
                } else if (r == 1 && live_n > 0) {
                    model_remove(&pool[live[rnd_below((uint64_t)live_n)]]);
                } else {
                    gen_query((1u << SHAPE_COUNT) - 1, &s, &l);
                    compare_query(s, l);
                }
            }
            CHECK(compare_query(0, MAX64) == live_n);
            if (!tree_consistent())
                goto out;
        }
    }
    printf("# %ld cuts, %ld nodes removed\n", cuts, removed);
out:
    park_mode = 0;   /* also after a failure: the tests that follow remove_range plainly */
}

/* One cut in a tree of 100k nodes (a cache's worth), inserted in random order: the
 * middle half goes, with every node reaching into it from below, and equal starts at
 * both ends. The callback sees exactly those, in order; the other half stays intact
 * and in order; then [0, UINT64_MAX] takes the rest. */
enum { BIG_N = 100000 };

struct big_node {
    struct mrc_itree_node n;    /* first */
    uint32_t seq;               /* insertion number: the order of equal starts */
    uint8_t removed;
};

struct big_check {
    uint64_t start, last;
    const struct big_node *prev;
    size_t got, bad;
};

static void big_removed(struct mrc_itree_node *n, void *arg)
{
    struct big_check *bc = arg;
    struct big_node *b = (struct big_node *)n;

    if (b->removed || !overlaps(n, bc->start, bc->last) ||
        (bc->prev && (bc->prev->n.start > n->start ||
                      (bc->prev->n.start == n->start && bc->prev->seq > b->seq))))
        bc->bad++;
    b->removed = 1;
    poison(n);
    bc->prev = b;
    bc->got++;
}

static void test_remove_range_large(void)
{
    struct big_node *nodes = calloc(BIG_N, sizeof(*nodes));
    uint32_t *order = calloc(BIG_N, sizeof(*order));
    struct mrc_itree t;
    size_t want = 0, left = 0, bad = 0;

    CHECK(nodes && order);
    if (!nodes || !order) {
        free(nodes);
        free(order);
        return;
    }
    rng_seed(0x6269677472656521ULL);
    for (uint32_t i = 0; i < BIG_N; i++) {
        /* Pairs of equal starts; one node in 97 spans the next 6400 pairs. */
        nodes[i].n.start = (uint64_t)(i / 2) * 16;
        nodes[i].n.last = nodes[i].n.start + (i % 97 == 0 ? 6400 * 16 : 7);
        order[i] = i;
    }
    for (uint32_t i = BIG_N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rnd_below(i + 1), x = order[i];

        order[i] = order[j];
        order[j] = x;
    }
    mrc_itree_init(&t);
    for (uint32_t i = 0; i < BIG_N; i++) {
        nodes[order[i]].seq = i;
        mrc_itree_insert(&t, &nodes[order[i]].n);
    }
    CHECK(mrc_itree_check(&t, NULL) == 0);

    uint64_t s = (uint64_t)(BIG_N / 8) * 16, l = (uint64_t)(3 * BIG_N / 8) * 16 - 1;
    for (uint32_t i = 0; i < BIG_N; i++)
        want += overlaps(&nodes[i].n, s, l);
    struct big_check bc = { s, l, NULL, 0, 0 };
    size_t got = mrc_itree_remove_range(&t, s, l, big_removed, &bc, NULL);
    CHECKF(got == want && bc.got == want && bc.bad == 0,
           "middle half: %zu returned, %zu seen of %zu, %zu bad", got, bc.got, want, bc.bad);
    CHECK(want > BIG_N / 2 && checked_nodes(&t) == (long)(BIG_N - want));

    /* Survivors: every node not removed, once each, in (start, insertion) order. */
    const struct big_node *prev = NULL;
    for (struct mrc_itree_node *n = mrc_itree_iter_first(&t, 0, MAX64); n;
         n = mrc_itree_iter_next(n, 0, MAX64)) {
        const struct big_node *b = (const struct big_node *)n;

        if (b->removed || overlaps(n, s, l) ||
            (prev && (prev->n.start > n->start ||
                      (prev->n.start == n->start && prev->seq > b->seq)))) {
            bad++;
            break;
        }
        prev = b;
        left++;
    }
    CHECKF(bad == 0 && left == BIG_N - want, "survivors: %zu of %zu, %zu bad",
           left, BIG_N - want, bad);
    CHECK(mrc_itree_iter_first(&t, s + 8, s + 8) == NULL);

    struct big_check all = { 0, MAX64, NULL, 0, 0 };
    CHECK(mrc_itree_remove_range(&t, 0, MAX64, big_removed, &all, NULL) == BIG_N - want);
    CHECK(all.bad == 0 && t.root == NULL && checked_nodes(&t) == 0);
    free(nodes);
    free(order);
}

static void test_empty_and_reversed(void)
{
    struct mrc_itree t;
    struct mrc_itree_node a = { .start = 10, .last = 20 };

    mrc_itree_init(&t);
    CHECK(mrc_itree_check(&t, NULL) == 0);
    CHECK(mrc_itree_iter_first(&t, 0, MAX64) == NULL);
    mrc_itree_insert(&t, &a);
    CHECK(mrc_itree_iter_first(&t, 15, 15) == &a);
    CHECK(mrc_itree_iter_first(&t, 21, MAX64) == NULL);
    CHECK(mrc_itree_iter_first(&t, 0, 9) == NULL);
    /* start > last is an empty query, even though [20, 10] "touches" a's inside. */
    CHECK(mrc_itree_iter_first(&t, 20, 10) == NULL);
    CHECK(mrc_itree_iter_next(&a, 20, 10) == NULL);
    mrc_itree_remove(&t, &a);
    CHECK(t.root == NULL && checked_nodes(&t) == 0);
}

/* Builds a valid random tree in the pool; the caller corrupts it. */
static void build_sample_tree(void)
{
    rng_seed(42);
    model_reset();
    for (int i = 0; i < 200; i++) {
        uint64_t s = rnd_below(1000);

        model_insert(s, s + rnd_below(100));
    }
}

static struct mrc_itree_node *find_node(int want_red, int want_children)
{
    for (int i = 0; i < live_n; i++) {
        struct mrc_itree_node *n = &pool[live[i]].n;
        int red = !(n->parent_color & 1);
        int kids = (n->left != NULL) + (n->right != NULL);

        if ((want_red < 0 || red == want_red) && kids >= want_children && n != tree.root)
            return n;
    }
    return NULL;
}

/* The checker guards every other test, so it must itself be able to fail: each
 * deliberate corruption must be reported, and undoing it must make the tree pass. */
static void test_checker_detects_corruption(void)
{
    struct mrc_itree_node *n;
    uint64_t saved;
    uintptr_t saved_pc;

    build_sample_tree();
    CHECK(mrc_itree_check(&tree, NULL) == 0);
    fprintf(stderr, "# test_checker_detects_corruption: complaints below are expected\n");

    n = find_node(-1, 2);
    CHECK(n != NULL);
    if (!n)
        return;

    saved = n->subtree_last;                    /* augmented value */
    n->subtree_last = saved + 1;
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    n->subtree_last = saved;

    saved = n->start;                           /* BST order, start <= last kept */
    n->start = n->left->start > 0 ? n->left->start - 1 : n->right->start + 1;
    if (n->start > n->last)
        n->start = n->left->start - 1;          /* underflows only if both fail */
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    n->start = saved;

    saved = n->last;                            /* start > last */
    n->last = n->start - 1;
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    n->last = saved;

    saved_pc = n->parent_color;                 /* colour: flipping any node breaks */
    n->parent_color ^= 1;                       /* red-red and/or black height */
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    n->parent_color = saved_pc;

    struct mrc_itree_node *r = find_node(1, 0); /* red to black: only black height */
    CHECK(r != NULL);
    if (r) {
        r->parent_color |= 1;
        CHECK(mrc_itree_check(&tree, NULL) == -1);
        r->parent_color &= ~(uintptr_t)1;
    }

    /* Only red-red: a black node with a red parent and two red children swaps colour
     * with its children, so black heights stay and it clashes with its parent. */
    struct mrc_itree_node *b = NULL;
    for (int i = 0; i < live_n && !b; i++) {
        struct mrc_itree_node *m = &pool[live[i]].n;
        const struct mrc_itree_node *mp = (const void *)(m->parent_color & ~(uintptr_t)1);

        if ((m->parent_color & 1) && mp && !(mp->parent_color & 1) && m->left &&
            m->right && !(m->left->parent_color & 1) && !(m->right->parent_color & 1))
            b = m;
    }
    CHECK(b != NULL);
    if (b) {
        b->parent_color ^= 1;
        b->left->parent_color ^= 1;
        b->right->parent_color ^= 1;
        CHECK(mrc_itree_check(&tree, NULL) == -1);
        b->parent_color ^= 1;
        b->left->parent_color ^= 1;
        b->right->parent_color ^= 1;
    }

    saved_pc = n->left->parent_color;           /* parent link */
    n->left->parent_color = (uintptr_t)n->right | (saved_pc & 1);
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    n->left->parent_color = saved_pc;

    tree.root->parent_color &= ~(uintptr_t)1;   /* red root */
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    tree.root->parent_color |= 1;

    CHECK(checked_nodes(&tree) == live_n);      /* the nodes it counts are the model's */

    struct mrc_itree_node *leaf = NULL;         /* a cycle must not hang the checker */
    for (leaf = tree.root; leaf->left; leaf = leaf->left)
        ;
    leaf->left = tree.root;
    CHECK(mrc_itree_check(&tree, NULL) == -1);
    leaf->left = NULL;

    CHECK(mrc_itree_check(&tree, NULL) == 0);
    fprintf(stderr, "# test_checker_detects_corruption: end of expected complaints\n");
}

/* ---- micro-benchmark (not part of the test run) ---- */

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Cache-like content: page-aligned registrations of 1-256 pages in a 47-bit space;
 * lookups ask for a buffer inside a random registration, as mrc_cache would. */
static void bench(size_t n)
{
    struct mrc_itree_node *nodes = calloc(n, sizeof(*nodes));
    size_t *order = calloc(n, sizeof(*order));
    const size_t lookups = 1000000;
    struct mrc_itree t;
    volatile uintptr_t sink = 0;
    double t0, t_ins, t_look, t_rem;

    if (!nodes || !order) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    rng_seed(7);
    mrc_itree_init(&t);
    for (size_t i = 0; i < n; i++) {
        nodes[i].start = (rnd_below(1ULL << 35)) << 12;
        nodes[i].last = nodes[i].start + ((1 + rnd_below(256)) << 12) - 1;
        order[i] = i;
    }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rnd_below(i + 1), x = order[i];

        order[i] = order[j];
        order[j] = x;
    }

    t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        mrc_itree_insert(&t, &nodes[i]);
    t_ins = (now_ns() - t0) / (double)n;

    t0 = now_ns();
    for (size_t i = 0; i < lookups; i++) {
        const struct mrc_itree_node *r = &nodes[order[i % n]];

        sink += (uintptr_t)mrc_itree_iter_first(&t, r->start + 64, r->start + 4095);
    }
    t_look = (now_ns() - t0) / (double)lookups;

    t0 = now_ns();
    for (size_t i = 0; i < n; i++)
        mrc_itree_remove(&t, &nodes[order[i]]);
    t_rem = (now_ns() - t0) / (double)n;

    printf("itree bench %8zu nodes: insert %6.1f ns, lookup (iter_first) %6.1f ns, "
           "remove %6.1f ns%s\n", n, t_ins, t_look, t_rem, t.root ? " (nodes left!)" : "");
    (void)sink;
    free(nodes);
    free(order);
}

static void bench_drop(struct mrc_itree_node *n, void *arg)
{
    (void)n;
    ++*(size_t *)arg;
}

/* remove_range in a tree of n disjoint ranges inserted in random order: runs of 1, of
 * 32 (the longest removed one by one) and 33 (the shortest cut out whole), of 256, at
 * random places (each put back, untimed), then the middle half in one call. */
static void bench_remove_range(size_t n)
{
    static const size_t runs[] = { 1, 32, 33, 256 };
    struct mrc_itree_node *nodes = calloc(n, sizeof(*nodes));
    size_t *order = calloc(n, sizeof(*order)), dropped = 0;
    struct mrc_itree t;
    double t0, total;

    if (!nodes || !order) {
        fprintf(stderr, "bench: out of memory\n");
        exit(1);
    }
    rng_seed(8);
    mrc_itree_init(&t);
    for (size_t i = 0; i < n; i++) {
        nodes[i].start = 0x100000000ULL + i * 0x4000;
        nodes[i].last = nodes[i].start + 0xfff;
        order[i] = i;
    }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rnd_below(i + 1), x = order[i];

        order[i] = order[j];
        order[j] = x;
    }
    for (size_t i = 0; i < n; i++)
        mrc_itree_insert(&t, &nodes[order[i]]);
    for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
        const size_t k = runs[r], reps = 2000;

        total = 0;
        for (size_t rep = 0; rep < reps; rep++) {
            size_t i = rnd_below(n - k);

            t0 = now_ns();
            mrc_itree_remove_range(&t, nodes[i].start, nodes[i + k - 1].last, bench_drop, &dropped, NULL);
            total += now_ns() - t0;
            for (size_t j = i; j < i + k; j++)
                mrc_itree_insert(&t, &nodes[j]);
        }
        printf("itree bench %8zu nodes: remove_range of %3zu nodes %8.1f ns (%5.1f ns/node)\n",
               n, k, total / (double)reps, total / (double)(reps * k));
    }
    dropped = 0;
    t0 = now_ns();
    mrc_itree_remove_range(&t, nodes[n / 4].start, nodes[3 * n / 4 - 1].last, bench_drop, &dropped, NULL);
    total = now_ns() - t0;
    printf("itree bench %8zu nodes: remove_range of the middle half %5.1f ns/node%s\n", n,
           total / (double)(3 * n / 4 - n / 4), dropped == 3 * n / 4 - n / 4 ? "" : " (count!)");
    free(nodes);
    free(order);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        bench(10000);
        bench(1000000);
        bench_remove_range(32768);
        bench_remove_range(1000000);
        return 0;
    }
    RUN(test_empty_and_reversed);
    RUN(test_top_of_address_space);
    RUN(test_checker_detects_corruption);
    RUN(test_sequential_and_equal);
    RUN(test_insert_many);
    RUN(test_insert_many_sizes);
    RUN(test_remove_range_shares);
    RUN(test_remove_range_cuts);
    RUN(test_remove_range_large);
    RUN(test_random_vs_model);
    CHECK_EXIT();
}
