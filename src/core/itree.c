/* itree.c - augmented red-black interval tree (see itree.h), after Linux's lib/rbtree.c
 * and interval_tree_generic.h; long runs leave remove_range by split and join (Tarjan;
 * Blelloch et al., "Just Join for Parallel Ordered Sets", 2016), and a batch past either
 * end arrives in insert_many by join. Invariants between
 * calls: in-order is non-decreasing by start; the root is black; no red node has a red
 * child; every root-to-leaf path has the same number of black nodes; n->subtree_last
 * == max(n->last, children's subtree_last); a run cut out is such a tree of its own.
 * Rotations, splices and joins repair subtree_last locally as they go. No recursion, no
 * allocation, no count (a cut would not know its run's size). */
#include "core/itree.h"
#include "util/hot.h"

#include <inttypes.h>
#include <stdio.h>

typedef struct mrc_itree_node node_t;

#define BLACK ((uintptr_t)1)

static inline node_t *parent_of(const node_t *n)
{
    return (node_t *)(n->parent_color & ~BLACK);
}

/* A missing child counts as black, as in every red-black tree. */
static inline int is_black(const node_t *n)
{
    return !n || (n->parent_color & BLACK);
}

static inline int is_red(const node_t *n)
{
    return !is_black(n);
}

static inline void set_parent(node_t *n, node_t *p)
{
    n->parent_color = (uintptr_t)p | (n->parent_color & BLACK);
}

static inline void set_black(node_t *n)
{
    n->parent_color |= BLACK;
}

static inline void set_red(node_t *n)
{
    n->parent_color &= ~BLACK;
}

/* The value n->subtree_last must have, given correct values in its children. */
static inline uint64_t subtree_last_of(const node_t *n)
{
    uint64_t m = n->last;

    if (n->left && n->left->subtree_last > m)
        m = n->left->subtree_last;
    if (n->right && n->right->subtree_last > m)
        m = n->right->subtree_last;
    return m;
}

/* Recomputes subtree_last from n upwards, stopping below 'stop' or as soon as a value
 * is unchanged: the ancestors of an unchanged node only saw unchanged children. */
MRC_HOT static void propagate(node_t *n, const node_t *stop)
{
    while (n != stop) {
        uint64_t m = subtree_last_of(n);

        if (n->subtree_last == m)
            break;
        n->subtree_last = m;
        n = parent_of(n);
    }
}

/* Raises subtree_last to m from n upwards, for nodes that only gained a subtree whose
 * max is m: an ancestor at or above m already covers it, and so do all above that one.
 * Unlike propagate it reads no child, which off the path are cold. */
MRC_HOT static void raise_last(node_t *n, uint64_t m)
{
    for (; n && n->subtree_last < m; n = parent_of(n))
        n->subtree_last = m;
}

/* Makes 'new' take the place of 'old' as a child of p, or as *root if p is NULL. The
 * balancing code takes the root by address so that it also serves the detached trees
 * of mrc_itree_remove_range's cut. */
static inline void replace_child(node_t **root, node_t *p, const node_t *old, node_t *new)
{
    if (!p)
        *root = new;
    else if (p->left == old)
        p->left = new;
    else
        p->right = new;
}

/* The rotated subtree holds the same nodes, so its new top inherits the old top's
 * subtree_last and only the old top (now a child) needs recomputing. Colours stay. */
MRC_HOT static void rotate_left(node_t **root, node_t *x)
{
    node_t *y = x->right;
    node_t *p = parent_of(x);

    x->right = y->left;
    if (y->left)
        set_parent(y->left, x);
    set_parent(y, p);
    replace_child(root, p, x, y);
    y->left = x;
    set_parent(x, y);
    y->subtree_last = x->subtree_last;
    x->subtree_last = subtree_last_of(x);
}

MRC_HOT static void rotate_right(node_t **root, node_t *x)
{
    node_t *y = x->left;
    node_t *p = parent_of(x);

    x->left = y->right;
    if (y->right)
        set_parent(y->right, x);
    set_parent(y, p);
    replace_child(root, p, x, y);
    y->right = x;
    set_parent(x, y);
    y->subtree_last = x->subtree_last;
    x->subtree_last = subtree_last_of(x);
}

void mrc_itree_init(struct mrc_itree *t)
{
    t->root = NULL;
}

/* Restores the red-black rules after n was linked red below a node of the tree at
 * *root (CLRS RB-INSERT-FIXUP): as a leaf, or, for join, above two black subtrees of
 * the black height of its place. Returns 1 if the root ends up recoloured from red to
 * black, i.e. the tree's black height grew by one. */
MRC_HOT static int insert_fixup(node_t **root, node_t *n)
{
    node_t *p;

    while ((p = parent_of(n)) && is_red(p)) {
        node_t *g = parent_of(p);   /* exists: a red node is never the root */

        if (p == g->left) {
            node_t *u = g->right;

            if (is_red(u)) {        /* recolour and retry two levels up */
                set_black(p);
                set_black(u);
                set_red(g);
                n = g;
                continue;
            }
            if (n == p->right) {    /* make n an outer grandchild */
                rotate_left(root, p);
                n = p;
                p = parent_of(n);
            }
            set_black(p);
            set_red(g);
            rotate_right(root, g);
        } else {
            node_t *u = g->left;

            if (is_red(u)) {
                set_black(p);
                set_black(u);
                set_red(g);
                n = g;
                continue;
            }
            if (n == p->left) {
                rotate_right(root, p);
                n = p;
                p = parent_of(n);
            }
            set_black(p);
            set_red(g);
            rotate_left(root, g);
        }
        break;                      /* after the rotation the subtree top is black */
    }
    if (is_black(*root))
        return 0;
    set_black(*root);
    return 1;
}

MRC_HOT void mrc_itree_insert(struct mrc_itree *t, struct mrc_itree_node *n)
{
    node_t *p = NULL;
    node_t **link = &t->root;

    /* Every node on the descent path gains n in its subtree, so raise its
     * subtree_last now; the fixup rotations keep the values exact. */
    while (*link) {
        p = *link;
        if (p->subtree_last < n->last)
            p->subtree_last = n->last;
        /* Ties go right, so equal starts stay in insertion order. */
        link = n->start < p->start ? &p->left : &p->right;
    }
    n->subtree_last = n->last;
    n->left = n->right = NULL;
    n->parent_color = (uintptr_t)p;   /* red */
    *link = n;
    insert_fixup(&t->root, n);
}

/* Restores the red-black rules after a black node was unlinked from above x, leaving
 * x's side one black short (CLRS RB-DELETE-FIXUP). x may be NULL, hence xp. The
 * sibling w always exists: its side is at least one black node deep. */
static void remove_fixup(struct mrc_itree *t, node_t *x, node_t *xp)
{
    while (x != t->root && is_black(x)) {
        if (x == xp->left) {
            node_t *w = xp->right;

            if (is_red(w)) {
                set_black(w);
                set_red(xp);
                rotate_left(&t->root, xp);
                w = xp->right;
            }
            if (is_black(w->left) && is_black(w->right)) {
                set_red(w);
                x = xp;
                xp = parent_of(x);
                continue;
            }
            if (is_black(w->right)) {
                set_black(w->left);
                set_red(w);
                rotate_right(&t->root, w);
                w = xp->right;
            }
            w->parent_color = (w->parent_color & ~BLACK) | (xp->parent_color & BLACK);
            set_black(xp);
            set_black(w->right);
            rotate_left(&t->root, xp);
        } else {
            node_t *w = xp->left;

            if (is_red(w)) {
                set_black(w);
                set_red(xp);
                rotate_right(&t->root, xp);
                w = xp->left;
            }
            if (is_black(w->left) && is_black(w->right)) {
                set_red(w);
                x = xp;
                xp = parent_of(x);
                continue;
            }
            if (is_black(w->left)) {
                set_black(w->right);
                set_red(w);
                rotate_left(&t->root, w);
                w = xp->left;
            }
            w->parent_color = (w->parent_color & ~BLACK) | (xp->parent_color & BLACK);
            set_black(xp);
            set_black(w->left);
            rotate_right(&t->root, xp);
        }
        x = t->root;                /* the deficit is absorbed */
    }
    if (x)
        set_black(x);
}

void mrc_itree_remove(struct mrc_itree *t, struct mrc_itree_node *n)
{
    node_t *x, *xp;
    int removed_black;

    if (!n->left || !n->right) {
        /* At most one child: splice n out. */
        x = n->left ? n->left : n->right;
        xp = parent_of(n);
        removed_black = is_black(n);
        replace_child(&t->root, xp, n, x);
        if (x)
            set_parent(x, xp);
        propagate(xp, NULL);
    } else {
        /* Two children: n's successor s (leftmost of the right subtree, no left child)
         * takes n's place and colour; the hole moves to s's old position. */
        node_t *s = n->right;
        node_t *np = parent_of(n);

        while (s->left)
            s = s->left;
        x = s->right;
        removed_black = is_black(s);
        if (s == n->right) {
            xp = s;
        } else {
            xp = parent_of(s);
            xp->left = x;
            if (x)
                set_parent(x, xp);
            s->right = n->right;
            set_parent(n->right, s);
        }
        s->left = n->left;
        set_parent(n->left, s);
        s->parent_color = n->parent_color;
        replace_child(&t->root, np, n, s);
        /* s's subtree is n's minus n: start from n's value (possibly too high) and
         * fix the path from s's old parent up through s; early stops stay exact. */
        s->subtree_last = n->subtree_last;
        propagate(xp, s);
        propagate(s, NULL);
    }
    if (removed_black)
        remove_fixup(t, x, xp);
}

/* Leftmost node of n's subtree overlapping [start, last], or NULL.
 * Precondition: start <= n->subtree_last (some node reaches start). */
MRC_HOT static node_t *subtree_search(node_t *n, uint64_t start, uint64_t last)
{
    for (;;) {
        if (n->left && start <= n->left->subtree_last) {
            /* The leftmost node reaching start is in the left subtree; if it starts
             * after last, so does everything after it: no match anywhere here. */
            n = n->left;
            continue;
        }
        if (n->start > last)
            return NULL;
        if (start <= n->last)
            return n;
        n = n->right;
        if (!n || start > n->subtree_last)
            return NULL;
    }
}

MRC_HOT struct mrc_itree_node *mrc_itree_iter_first(const struct mrc_itree *t,
                                                    uint64_t start, uint64_t last)
{
    if (!t->root || start > last || t->root->subtree_last < start)
        return NULL;
    return subtree_search(t->root, start, last);
}

MRC_HOT struct mrc_itree_node *mrc_itree_iter_next(const struct mrc_itree_node *n,
                                                   uint64_t start, uint64_t last)
{
    const node_t *cur = n;
    node_t *r = n->right;

    if (start > last)
        return NULL;
    for (;;) {
        /* Invariant: cur->start <= last and r == cur->right. The in-order successors
         * of cur are its right subtree, then the ancestors entered from the left. */
        if (r && start <= r->subtree_last)
            return subtree_search(r, start, last);

        node_t *p;
        for (;;) {
            p = parent_of(cur);
            if (!p)
                return NULL;
            if (p->left == cur)
                break;
            cur = p;
        }
        if (p->start > last)
            return NULL;
        if (start <= p->last)
            return p;
        cur = p;
        r = p->right;
    }
}

/* ---- bulk removal: split and join ---- */

/* A detached red-black tree during a cut: its root (black, with no parent; NULL when
 * empty) and its black height (black nodes on every path from the root down to a
 * missing child; 0 when empty). */
struct piece {
    node_t *root;
    unsigned bh;
};

/* The subtree at n, of black height bh, cut loose as a piece. A red root turns black,
 * which only adds one to every path: join needs black roots. */
static struct piece detach(node_t *n, unsigned bh)
{
    struct piece p = { n, bh };

    if (n) {
        set_parent(n, NULL);
        if (is_red(n)) {
            set_black(n);
            p.bh++;
        }
    }
    return p;
}

/* Tarjan's join: one piece holding l's nodes, then k, then r's (l's starts <= k's <=
 * r's); k's old links are ignored. k goes down the taller piece's inner spine to the
 * first black node (or missing child) of the shorter one's black height, takes its
 * place in red with it and the shorter piece as children, and insert's fixup repairs
 * a red parent. O(|l.bh - r.bh| + 1) plus the fixup's recolourings. */
MRC_HOT static struct piece join(struct piece l, node_t *k, struct piece r)
{
    struct piece j;
    node_t *p = NULL;

    if (l.bh == r.bh) {                     /* k on top, black */
        k->left = l.root;
        k->right = r.root;
        j.root = k;
        j.bh = l.bh + 1;
        k->parent_color = BLACK;            /* a root: no parent */
    } else if (l.bh > r.bh) {
        /* l's root is black and taller, so the place is below it: p is set. */
        node_t *c = l.root;
        unsigned h = l.bh;

        while (is_red(c) || h != r.bh) {
            h -= is_black(c);
            p = c;
            c = c->right;
        }
        p->right = k;
        k->left = c;
        k->right = r.root;
        j = l;
    } else {
        node_t *c = r.root;
        unsigned h = r.bh;

        while (is_red(c) || h != l.bh) {
            h -= is_black(c);
            p = c;
            c = c->left;
        }
        p->left = k;
        k->left = l.root;
        k->right = c;
        j = r;
    }
    if (k->left)
        set_parent(k->left, k);
    if (k->right)
        set_parent(k->right, k);
    k->subtree_last = subtree_last_of(k);
    if (p) {
        k->parent_color = (uintptr_t)p;     /* red */
        raise_last(p, k->subtree_last);     /* p's side gained k and the other piece */
        j.bh += insert_fixup(&j.root, k);
    }
    return j;
}

/* Splits the tree at root (no parent) into its nodes with start <= bound (*lo) and the
 * rest (*hi), each in its old order. The search path for bound is climbed bottom up,
 * each node on it joining, with its subtree off the path, the side it belongs to: the
 * pieces each side receives come in non-decreasing black height, so the joins cost
 * O(log n) in all (Tarjan). No stack: a node's parent is read before it is relinked,
 * and black heights are counted up from the bottom. If min is not NULL, the first node
 * of *hi is kept out of it and returned there (NULL if *hi is empty): the deepest node
 * of the path above bound, which the caller uses to join the outer parts again. */
static void split(node_t *root, uint64_t bound, struct piece *lo, struct piece *hi,
                  node_t **min)
{
    struct piece l = { NULL, 0 }, r = { NULL, 0 };
    node_t *m = root, *bottom = NULL;
    unsigned h = 0;                         /* black height of m's children */

    /* Ties in start are all <= bound or all above it: equal starts stay together. */
    while (m) {
        bottom = m;
        m = m->start <= bound ? m->right : m->left;
    }
    if (min)
        *min = NULL;
    for (m = bottom; m;) {
        node_t *up = parent_of(m);
        unsigned black = is_black(m);

        if (m->start <= bound) {
            l = join(detach(m->left, h), m, l);
        } else if (min && !*min) {
            *min = m;
            r = detach(m->right, h);
        } else {
            r = join(r, m, detach(m->right, h));
        }
        h += black;
        m = up;
    }
    *lo = l;
    *hi = r;
}

/* ---- bulk insertion ---- */

/* Walks t's rightmost (right set) or leftmost spine. Returns t's black height; *edge is
 * the spine's last node (t's last or first in order), NULL for an empty tree. */
MRC_HOT static unsigned spine(const struct mrc_itree *t, int right, node_t **edge)
{
    unsigned bh = 0;

    *edge = NULL;
    for (node_t *n = t->root; n; n = right ? n->right : n->left) {
        bh += is_black(n);
        *edge = n;
    }
    return bh;
}

/* Links v[0..n) (in order) into a piece of their own with no rotation: the middle of
 * every index range on top, the shape of a binary search over it. Sibling ranges then
 * differ by at most one node, so every path down to a missing child passes
 * bh = floor(log2(n + 1)) nodes or one more: the levels above bh are full, and the
 * nodes one level deeper are red. Each node is found by that binary search, which also
 * visits its ancestors, and raises their subtree_last on the way: O(n log n) steps of a
 * few instructions, against n joins onto the piece's right spine (each walking it,
 * propagating up it and fixing it up: ~230 instructions a node, measured). */
MRC_HOT static struct piece build_piece(node_t **v, unsigned n)
{
    unsigned bh = 0;

    while (((uint64_t)2 << bh) - 1 <= n)
        bh++;
    for (unsigned i = 0; i < n; i++) {
        v[i]->left = v[i]->right = NULL;
        v[i]->subtree_last = v[i]->last;
    }
    for (unsigned i = 0; i < n; i++) {
        node_t *x = v[i], *p = NULL;
        unsigned lo = 0, hi = n, depth = 1, mid;
        int right = 0;

        while ((mid = lo + (hi - lo) / 2) != i) {
            p = v[mid];
            if (x->last > p->subtree_last)
                p->subtree_last = x->last;
            right = i > mid;
            if (right)
                lo = mid + 1;
            else
                hi = mid;
            depth++;
        }
        x->parent_color = (uintptr_t)p | (depth > bh ? 0 : BLACK);
        if (p) {
            if (right)
                p->right = x;
            else
                p->left = x;
        }
    }
    return (struct piece){ n ? v[n / 2] : NULL, bh };
}

MRC_HOT void mrc_itree_insert_many(struct mrc_itree *t, struct mrc_itree_node **nodes, unsigned n)
{
    struct piece whole = { t->root, 0 }, batch;
    node_t *edge;

    /* Stable insertion sort: equal starts keep the order given. */
    for (unsigned i = 1; i < n; i++) {
        node_t *x = nodes[i];
        unsigned j = i;

        for (; j > 0 && nodes[j - 1]->start > x->start; j--)
            nodes[j] = nodes[j - 1];
        nodes[j] = x;
    }
    if (n == 0)
        return;
    /* After every node (ties too: they go after), or before every one (strictly, for
     * the same reason): the batch becomes a piece of its own, joined on in one go. The
     * root tells which end can be the one, so that at most one spine is walked. */
    int after = !t->root || nodes[0]->start >= t->root->start, joinable = 0;
    if (after || nodes[n - 1]->start < t->root->start) {
        whole.bh = spine(t, after, &edge);
        joinable = !edge || (after ? edge->start <= nodes[0]->start : nodes[n - 1]->start < edge->start);
    }
    if (!joinable) {
        for (unsigned i = 0; i < n; i++)
            mrc_itree_insert(t, nodes[i]);
        return;
    }
    /* The pivot is the batch's first node (after) or last (before); the others make a
     * piece of their own. */
    batch = build_piece(nodes + after, n - 1);
    whole = after ? join(whole, nodes[0], batch) : join(batch, nodes[n - 1], whole);
    t->root = whole.root;
}

/* Runs up to this long are removed one by one, as a single unmap's are; longer ones
 * are cut out whole. Measured with test_itree --bench (runs of 32 and 33), a cut costs
 * about as much as 32 removals in a tree of 32k nodes (1.1 us) and as 45 in one of 1M
 * (4 us): so short runs keep their old cost, and long ones win from about here on. */
#define SHORT_RUN 32

/* The deepest possible red-black tree: one of fewer than 2^59 nodes (48-byte nodes in
 * a 64-bit address space) has paths of at most 2 * 59 nodes. */
#define MAX_DEPTH 118

/* Takes every node whose start lies in [start, last], a run of more than SHORT_RUN
 * nodes, out of t: splits it out (start - 1 and last are the bounds, so neither end
 * overflows) and joins the outer parts around the first node above the run. Of the
 * nodes that stay, only those on the two split paths and the join's spine are touched
 * (a walk over them all would miss the caches and the TLB). O(log n). Returns the run,
 * a red-black tree of its own. */
static node_t *cut_run(struct mrc_itree *t, uint64_t start, uint64_t last)
{
    struct piece below = { NULL, 0 }, rest = { t->root, 0 }, run, above;
    node_t *key;

    if (start > 0)
        split(t->root, start - 1, &below, &rest, NULL);
    split(rest.root, last, &run, &above, &key);
    t->root = key ? join(below, key, above).root : below.root;
    return run.root;
}

/* Calls fn on every node of a cut run, in order, with a stack of the ancestors still to
 * visit, so that no node is read once fn has had it; O(run), no rebalancing per node. */
size_t mrc_itree_walk_run(node_t *run, void (*fn)(struct mrc_itree_node *n, void *arg), void *arg)
{
    node_t *x, *stack[MAX_DEPTH];
    unsigned depth = 0;
    size_t walked = 0;

    for (x = run; x; x = x->left)
        stack[depth++] = x;
    while (depth) {
        /* The next node is found before fn runs, so that its loads overlap fn's. */
        x = stack[--depth];
        for (node_t *y = x->right; y; y = y->left)
            stack[depth++] = y;
        fn(x, arg);
        walked++;
    }
    return walked;
}

size_t mrc_itree_remove_range(struct mrc_itree *t, uint64_t start, uint64_t last,
                              void (*fn)(struct mrc_itree_node *n, void *arg), void *arg,
                              struct mrc_itree_node **cut)
{
    node_t *n = mrc_itree_iter_first(t, start, last), *next;
    node_t *run[SHORT_RUN];
    size_t removed = 0;
    unsigned k = 0;

    if (cut)
        *cut = NULL;
    /* The overlapping nodes in order: first those starting below the range and
     * reaching into it (usually none), one by one; then the contiguous run of nodes
     * starting in it, which all overlap it. */
    for (; n && n->start < start; n = next) {
        next = mrc_itree_iter_next(n, start, last);
        mrc_itree_remove(t, n);
        fn(n, arg);
        removed++;
    }
    for (; n && k < SHORT_RUN; n = mrc_itree_iter_next(n, start, last))
        run[k++] = n;
    if (n) {
        node_t *r = cut_run(t, start, last);
        if (!cut)
            return removed + mrc_itree_walk_run(r, fn, arg);
        *cut = r;
        return removed;
    }
    for (unsigned i = 0; i < k; i++) {
        mrc_itree_remove(t, run[i]);
        fn(run[i], arg);
    }
    return removed + k;
}

uint64_t mrc_itree_run_last(const struct mrc_itree_node *run)
{
    return run->subtree_last;
}

/* ---- invariant checker ---- */

/* A red-black tree of 2^64 nodes is at most 128 deep; deeper means a cycle. */
#define CHECK_MAX_DEPTH 130
#define CHECK_MAX_REPORTS 20

struct check_state {
    size_t visited;
    int errors;
};

static void check_report(struct check_state *st, const node_t *n, const char *what)
{
    if (st->errors++ < CHECK_MAX_REPORTS)
        fprintf(stderr, "mrc_itree_check: node %p [%#" PRIx64 ", %#" PRIx64 "]: %s\n",
                (const void *)n, n->start, n->last, what);
    else if (st->errors == CHECK_MAX_REPORTS + 1)
        fprintf(stderr, "mrc_itree_check: further errors not shown\n");
}

/* Checks n's subtree, whose starts must lie in [lo, hi]; returns its black height
 * (NULL leaves count as one black node), or -1 if the subtree was not walked. */
static int check_node(const node_t *n, const node_t *parent, uint64_t lo, uint64_t hi,
                      unsigned depth, struct check_state *st)
{
    int bl, br;

    if (!n)
        return 1;
    if (depth > CHECK_MAX_DEPTH) {
        check_report(st, n, "tree deeper than possible (a cycle)");
        return -1;
    }
    st->visited++;
    if (parent_of(n) != parent)
        check_report(st, n, "parent link does not point to the parent");
    if (n->start > n->last)
        check_report(st, n, "start > last");
    if (n->start < lo || n->start > hi)
        check_report(st, n, "start out of BST order");
    if (is_red(n) && (is_red(n->left) || is_red(n->right)))
        check_report(st, n, "red node with a red child");
    bl = check_node(n->left, n, lo, n->start, depth + 1, st);
    br = check_node(n->right, n, n->start, hi, depth + 1, st);
    if (bl < 0 || br < 0)
        return -1;
    if (n->subtree_last != subtree_last_of(n))
        check_report(st, n, "subtree_last is not the max of last over the subtree");
    if (bl != br)
        check_report(st, n, "black heights of the two subtrees differ");
    return bl + (is_black(n) ? 1 : 0);
}

int mrc_itree_check(const struct mrc_itree *t, size_t *nodes)
{
    struct check_state st = { .visited = 0, .errors = 0 };

    /* A parent on the root shows up as a bad parent link in check_node. */
    if (t->root && is_red(t->root))
        check_report(&st, t->root, "root is red");
    check_node(t->root, NULL, 0, UINT64_MAX, 0, &st);
    if (nodes)
        *nodes = st.visited;
    return st.errors ? -1 : 0;
}
