/* uffd_ranges.c - the userfaultfd source's count of watches per page (uffd_ranges.h):
 * runs [start, end) in a treap keyed by start. Invariants: runs never overlap and never
 * have a count of 0; neighbouring runs with the same count and flag are joined after
 * every change; a change first cuts the runs straddling its ends, so that it applies to
 * whole runs. Each call costs O((runs it touches + 1) * log runs). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "monitor/uffd_ranges.h"

struct mrc_uffd_node {
    uint64_t start, end;
    uint32_t count;
    uint32_t reg;                 /* our registration is believed to be on these pages */
    uint32_t prio;
    struct mrc_uffd_node *left, *right;
};

typedef struct mrc_uffd_node node;

static uint32_t next_prio(struct mrc_uffd_ranges *r)
{
    uint32_t x = r->seed ? r->seed : 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    r->seed = x;
    return x;
}

static node *node_new(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, uint32_t count, uint32_t reg)
{
    /* A zeroed map is an empty one: its pool is made at the first node. */
    if (!r->pool.obj_size)
        mrc_pool_init(&r->pool, sizeof(node), 0);
    node *n = mrc_pool_get(&r->pool);
    if (!n)
        return NULL;
    *n = (node){ start, end, count, reg, next_prio(r), NULL, NULL };
    return n;
}

/* t split into the runs starting before key (*lo) and the others (*hi). */
static void split(node *t, uint64_t key, node **lo, node **hi)
{
    if (!t) {
        *lo = *hi = NULL;
    } else if (t->start < key) {
        split(t->right, key, &t->right, hi);
        *lo = t;
    } else {
        split(t->left, key, lo, &t->left);
        *hi = t;
    }
}

/* Every run of a starts before every run of b. */
static node *merge(node *a, node *b)
{
    if (!a || !b)
        return a ? a : b;
    if (a->prio > b->prio) {
        a->right = merge(a->right, b);
        return a;
    }
    b->left = merge(a, b->left);
    return b;
}

static void insert(struct mrc_uffd_ranges *r, node *n)
{
    node *lo, *hi;
    split(r->root, n->start, &lo, &hi);
    r->root = merge(merge(lo, n), hi);
}

static void erase(struct mrc_uffd_ranges *r, uint64_t start)
{
    node *lo, *mid, *hi;
    split(r->root, start, &lo, &mid);
    split(mid, start + 1, &mid, &hi);
    if (mid)
        mrc_pool_put(&r->pool, mid);
    r->root = merge(lo, hi);
}

/* The run with the greatest start <= k, or NULL. */
static node *find_le(const struct mrc_uffd_ranges *r, uint64_t k)
{
    node *t = r->root, *best = NULL;
    while (t) {
        if (t->start <= k) {
            best = t;
            t = t->right;
        } else {
            t = t->left;
        }
    }
    return best;
}

/* The run with the least start >= k, or NULL. */
static node *find_ge(const struct mrc_uffd_ranges *r, uint64_t k)
{
    node *t = r->root, *best = NULL;
    while (t) {
        if (t->start >= k) {
            best = t;
            t = t->left;
        } else {
            t = t->right;
        }
    }
    return best;
}

/* No run straddles k afterwards. 0, or -1 without memory. */
static int cut(struct mrc_uffd_ranges *r, uint64_t k)
{
    node *n = find_le(r, k);
    if (!n || n->start == k || n->end <= k)
        return 0;
    node *m = node_new(r, k, n->end, n->count, n->reg);
    if (!m)
        return -1;
    n->end = k;
    insert(r, m);
    return 0;
}

static int cut_both(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end)
{
    if (cut(r, start) || cut(r, end)) {
        r->broken = 1;
        return -1;
    }
    return 0;
}

/* Joins equal neighbours from the run before start to the run at end. */
static void join(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end)
{
    node *n = start ? find_le(r, start - 1) : NULL;
    if (!n)
        n = find_ge(r, start);
    while (n && n->start < end) {
        node *next = find_ge(r, n->start + 1);
        if (!next)
            return;
        if (next->start == n->end && next->count == n->count && next->reg == n->reg) {
            uint64_t e = next->end;
            erase(r, next->start);
            n->end = e;
        } else {
            n = next;
        }
    }
}

/* Reported runs, joined while contiguous. */
struct runs {
    mrc_uffd_run_fn fn;
    void *arg;
    uint64_t start, end;      /* pending; empty when equal */
};

static void run_add(struct runs *u, uint64_t start, uint64_t end)
{
    if (!u->fn)
        return;
    if (u->end != u->start && u->end == start) {
        u->end = end;
        return;
    }
    if (u->end != u->start)
        u->fn(u->arg, u->start, u->end);
    u->start = start;
    u->end = end;
}

static void run_flush(struct runs *u)
{
    if (u->fn && u->end != u->start)
        u->fn(u->arg, u->start, u->end);
    u->start = u->end = 0;
}

/* Walks [start, end) (cut already) in order: each run's count grows by grow, and its
 * flag takes registered; each gap no run covers is reported to gaps if given, else filled
 * with a run of count 1. 0, or -ENOMEM (broken). */
static int walk(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, uint32_t grow, int registered,
                struct runs *gaps)
{
    for (uint64_t at = start; at < end;) {
        node *n = find_ge(r, at);
        uint64_t gap_end = n && n->start < end ? n->start : end;
        if (at < gap_end) {
            node *m = gaps ? NULL : node_new(r, at, gap_end, 1, registered != 0);
            if (gaps)
                run_add(gaps, at, gap_end);
            else if (m)
                insert(r, m);
            else {
                r->broken = 1;
                return -ENOMEM;
            }
            at = gap_end;
            continue;
        }
        n->count += grow;
        n->reg |= registered != 0;
        at = n->end;
    }
    join(r, start, end);
    return 0;
}

int mrc_uffd_ranges_add(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, int registered)
{
    if (r->broken || cut_both(r, start, end))
        return -ENOMEM;
    return walk(r, start, end, 1, registered, NULL);
}

void mrc_uffd_ranges_sub(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, mrc_uffd_run_fn fn, void *arg)
{
    if (r->broken || cut_both(r, start, end))
        return;
    struct runs u = { fn, arg, 0, 0 };
    for (uint64_t at = start; at < end;) {
        node *n = find_ge(r, at);
        if (!n || n->start >= end)
            break;
        at = n->end;
        if (--n->count)
            continue;
        uint64_t s = n->start, e = n->end;
        int reg = n->reg != 0;
        erase(r, s);
        if (reg)
            run_add(&u, s, e);
    }
    join(r, start, end);
    run_flush(&u);
}

int mrc_uffd_ranges_clear(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, mrc_uffd_run_fn fn, void *arg)
{
    if (r->broken)
        return 1;
    if (!mrc_uffd_ranges_used(r, start, end))
        return 0;
    if (cut_both(r, start, end))
        return 1;
    struct runs u = { fn, arg, 0, 0 };
    for (node *n = find_ge(r, start); n && n->start < end; n = find_ge(r, n->end)) {
        if (n->reg)
            run_add(&u, n->start, n->end);
        n->reg = 0;
    }
    join(r, start, end);
    run_flush(&u);
    return 1;
}

void mrc_uffd_ranges_adopt(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, mrc_uffd_run_fn fn, void *arg)
{
    if (r->broken || cut_both(r, start, end))
        return;
    struct runs u = { fn, arg, 0, 0 };
    walk(r, start, end, 0, 1, &u);
    run_flush(&u);
}

int mrc_uffd_ranges_used(const struct mrc_uffd_ranges *r, uint64_t start, uint64_t end)
{
    if (r->broken)
        return 1;
    if (start >= end)
        return 0;
    const node *n = find_le(r, start);
    if (n && n->end > start)
        return 1;
    n = find_ge(r, start);
    return n && n->start < end;
}

void mrc_uffd_ranges_reset(struct mrc_uffd_ranges *r)
{
    /* The nodes stay behind in the old pool, whose lock and free list another thread of
     * the parent may have been changing: a new pool is made at the next node. */
    r->root = NULL;
    memset(&r->pool, 0, sizeof(r->pool));
    r->broken = 0;
}
