/* itree.c - augmented red-black interval tree (see itree.h), after Linux's lib/rbtree.c
 * and interval_tree_generic.h. Invariants between calls: in-order is non-decreasing by
 * start; the root is black; no red node has a red child; every root-to-leaf path has
 * the same number of black nodes; n->subtree_last == max(n->last, children's
 * subtree_last). Rotations and splices repair subtree_last locally as they go. */
#include "core/itree.h"

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
static void propagate(node_t *n, const node_t *stop)
{
    while (n != stop) {
        uint64_t m = subtree_last_of(n);

        if (n->subtree_last == m)
            break;
        n->subtree_last = m;
        n = parent_of(n);
    }
}

/* Makes 'new' take the place of 'old' as a child of p (or as the root). */
static inline void replace_child(struct mrc_itree *t, node_t *p, const node_t *old, node_t *new)
{
    if (!p)
        t->root = new;
    else if (p->left == old)
        p->left = new;
    else
        p->right = new;
}

/* The rotated subtree holds the same nodes, so its new top inherits the old top's
 * subtree_last and only the old top (now a child) needs recomputing. Colours stay. */
static void rotate_left(struct mrc_itree *t, node_t *x)
{
    node_t *y = x->right;
    node_t *p = parent_of(x);

    x->right = y->left;
    if (y->left)
        set_parent(y->left, x);
    set_parent(y, p);
    replace_child(t, p, x, y);
    y->left = x;
    set_parent(x, y);
    y->subtree_last = x->subtree_last;
    x->subtree_last = subtree_last_of(x);
}

static void rotate_right(struct mrc_itree *t, node_t *x)
{
    node_t *y = x->left;
    node_t *p = parent_of(x);

    x->left = y->right;
    if (y->right)
        set_parent(y->right, x);
    set_parent(y, p);
    replace_child(t, p, x, y);
    y->right = x;
    set_parent(x, y);
    y->subtree_last = x->subtree_last;
    x->subtree_last = subtree_last_of(x);
}

void mrc_itree_init(struct mrc_itree *t)
{
    t->root = NULL;
    t->count = 0;
    t->npath = 0;
}

/* Restores the red-black rules after n was linked as a red leaf (CLRS RB-INSERT-FIXUP). */
static void insert_fixup(struct mrc_itree *t, node_t *n)
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
                rotate_left(t, p);
                n = p;
                p = parent_of(n);
            }
            set_black(p);
            set_red(g);
            rotate_right(t, g);
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
                rotate_right(t, p);
                n = p;
                p = parent_of(n);
            }
            set_black(p);
            set_red(g);
            rotate_left(t, g);
        }
        break;                      /* after the rotation the subtree top is black */
    }
    set_black(t->root);
}

void mrc_itree_insert(struct mrc_itree *t, struct mrc_itree_node *n)
{
    node_t *p = NULL;
    node_t **link = &t->root;
    unsigned depth = 0;

    for (unsigned i = 0; i < t->npath; i++)
        __builtin_prefetch(t->path[i], 1);
    /* Every node on the descent path gains n in its subtree, so raise its
     * subtree_last now; the fixup rotations keep the values exact. */
    while (*link) {
        p = *link;
        if (depth < MRC_ITREE_PATH)
            t->path[depth++] = p;
        if (p->subtree_last < n->last)
            p->subtree_last = n->last;
        /* Ties go right, so equal starts stay in insertion order. */
        link = n->start < p->start ? &p->left : &p->right;
    }
    t->npath = depth;
    n->subtree_last = n->last;
    n->left = n->right = NULL;
    n->parent_color = (uintptr_t)p;   /* red */
    *link = n;
    t->count++;
    insert_fixup(t, n);
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
                rotate_left(t, xp);
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
                rotate_right(t, w);
                w = xp->right;
            }
            w->parent_color = (w->parent_color & ~BLACK) | (xp->parent_color & BLACK);
            set_black(xp);
            set_black(w->right);
            rotate_left(t, xp);
        } else {
            node_t *w = xp->left;

            if (is_red(w)) {
                set_black(w);
                set_red(xp);
                rotate_right(t, xp);
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
                rotate_left(t, w);
                w = xp->left;
            }
            w->parent_color = (w->parent_color & ~BLACK) | (xp->parent_color & BLACK);
            set_black(xp);
            set_black(w->left);
            rotate_right(t, xp);
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
        replace_child(t, xp, n, x);
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
        replace_child(t, np, n, s);
        /* s's subtree is n's minus n: start from n's value (possibly too high) and
         * fix the path from s's old parent up through s; early stops stay exact. */
        s->subtree_last = n->subtree_last;
        propagate(xp, s);
        propagate(s, NULL);
    }
    t->count--;
    if (removed_black)
        remove_fixup(t, x, xp);
}

/* Leftmost node of n's subtree overlapping [start, last], or NULL.
 * Precondition: start <= n->subtree_last (some node reaches start). */
static node_t *subtree_search(node_t *n, uint64_t start, uint64_t last)
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

struct mrc_itree_node *mrc_itree_iter_first(const struct mrc_itree *t,
                                            uint64_t start, uint64_t last)
{
    if (!t->root || start > last || t->root->subtree_last < start)
        return NULL;
    return subtree_search(t->root, start, last);
}

struct mrc_itree_node *mrc_itree_iter_next(const struct mrc_itree_node *n,
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

/* ---- bulk removal ---- */

static node_t *leftmost(node_t *n)
{
    while (n->left)
        n = n->left;
    return n;
}

static node_t *rightmost(node_t *n)
{
    while (n->right)
        n = n->right;
    return n;
}

/* In-order successor; parent and left links only, plus n's own right link. */
static node_t *successor(const node_t *n)
{
    if (n->right)
        return leftmost(n->right);
    node_t *p = parent_of(n);
    while (p && p->left != n) {
        n = p;
        p = parent_of(p);
    }
    return p;
}

size_t mrc_itree_remove_range(struct mrc_itree *t, uint64_t start, uint64_t last,
                              void (*fn)(struct mrc_itree_node *n, void *arg), void *arg)
{
    size_t removed = 0;
    if (!t->root || start > last)
        return 0;
    /* Every start inside the range: every node overlaps it (a node's last is at least
     * its start). The tree is emptied in one in-order walk, no rebalancing. */
    if (leftmost(t->root)->start >= start && rightmost(t->root)->start <= last) {
        for (node_t *x = leftmost(t->root), *next; x; x = next) {
            next = successor(x);   /* before fn: x's links are garbage after it */
            fn(x, arg);
            removed++;
        }
        t->root = NULL;
        t->count = 0;
        t->npath = 0;
        return removed;
    }
    /* Otherwise one by one: measured in the preload, rebuilding the survivors of a
     * partial unmap (16k of 32k entries) cost twice the rebalancing removals, its walk
     * over every survivor missing the TLB and caches where removals touch log n nodes. */
    node_t *n = mrc_itree_iter_first(t, start, last);
    while (n) {
        node_t *next = mrc_itree_iter_next(n, start, last);
        mrc_itree_remove(t, n);
        fn(n, arg);
        removed++;
        n = next;
    }
    return removed;
}

/* ---- invariant checker ---- */

/* A red-black tree of 2^64 nodes is at most 128 deep; deeper means a cycle. */
#define CHECK_MAX_DEPTH 130
#define CHECK_MAX_REPORTS 20

struct check_state {
    size_t visited;
    size_t limit;               /* stop descending past this many nodes (cycles) */
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
    if (depth > CHECK_MAX_DEPTH || ++st->visited > st->limit) {
        check_report(st, n, "tree deeper or larger than possible (cycle or wrong count)");
        return -1;
    }
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

int mrc_itree_check(const struct mrc_itree *t)
{
    struct check_state st = { .visited = 0, .limit = t->count, .errors = 0 };

    /* A parent on the root shows up as a bad parent link in check_node. */
    if (t->root && is_red(t->root))
        check_report(&st, t->root, "root is red");
    if (check_node(t->root, NULL, 0, UINT64_MAX, 0, &st) >= 0 && st.visited != t->count) {
        fprintf(stderr, "mrc_itree_check: count %zu but %zu nodes reachable\n",
                t->count, st.visited);
        st.errors++;
    }
    return st.errors ? -1 : 0;
}
