/* itree.h - augmented red-black interval tree of inclusive [start, last] uint64_t ranges.
 * Nodes are caller-owned and the tree never allocates or locks, so it is safe inside
 * free()/munmap() hooks; the caller serialises all calls on one tree. Order: by start,
 * equal starts in insertion order. Every node caches the max 'last' of its subtree,
 * which is what makes overlap queries O(log n + matches). */
#ifndef MRC_CORE_ITREE_H
#define MRC_CORE_ITREE_H

#include <stddef.h>
#include <stdint.h>

struct mrc_itree_node {
    uint64_t start, last;       /* set by the caller before insert; immutable while in the tree */
    uint64_t subtree_last;      /* max 'last' in this subtree: private to the tree */
    /* Private. Parent pointer with the colour in bit 0 (1 = black): nodes are at least
     * 8-byte aligned, and packing keeps the node at 48 bytes per cached entry. */
    uintptr_t parent_color;
    struct mrc_itree_node *left, *right;    /* private */
};

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(struct mrc_itree_node) == 48, "itree node grew: it is per cache entry");
#endif

struct mrc_itree {
    struct mrc_itree_node *root;
};

/* Makes t empty. A zero-filled struct mrc_itree is also a valid empty tree. */
void mrc_itree_init(struct mrc_itree *t);

/* Links n (start <= last, set by the caller) into t. O(log n). Equal ranges may coexist;
 * n is placed after every node with the same start. n must not already be in a tree. */
void mrc_itree_insert(struct mrc_itree *t, struct mrc_itree_node *n);

/* Links nodes[0..n) (each start <= last), as n mrc_itree_insert calls in that order
 * would, and sorts the array by start (an insertion sort: meant for small batches).
 * When they all start after every node of t (at or after the last one) or before every
 * one, they are joined on as one piece: one walk down a spine of t and one join,
 * O(log |t| + n log n) after the sort, instead of n descents from its root; otherwise
 * they go one by one, O(n log |t|). */
void mrc_itree_insert_many(struct mrc_itree *t, struct mrc_itree_node **nodes, unsigned n);

/* Unlinks n, which must be in t. O(log n). n's private fields are then garbage; the
 * order of the remaining nodes is unchanged. */
void mrc_itree_remove(struct mrc_itree *t, struct mrc_itree_node *n);

/* Removes every node overlapping [start, last] and calls fn(n, arg) on each, in order;
 * returns how many. fn must not use the tree, but may free or reuse n at once: the tree
 * never reads n again (its private fields are garbage). Nodes that start below the
 * range and reach into it (usually none) go one by one, O(log n) each, and so does a
 * run of up to 32 nodes starting inside it (a single unmap's usual case). A longer run
 * (an unmap over many cached buffers) is cut out whole by two red-black splits and a
 * join, O(log n), with no rebalancing per node. Then, if cut is NULL, it is walked
 * (O(run)); otherwise its root goes to *cut (NULL when nothing was cut), for the caller
 * to hand to mrc_itree_walk_run when it chooses, and the return value counts only the
 * nodes given to fn. A cut run's nodes are out of the tree: no query finds them. */
size_t mrc_itree_remove_range(struct mrc_itree *t, uint64_t start, uint64_t last,
                              void (*fn)(struct mrc_itree_node *n, void *arg), void *arg,
                              struct mrc_itree_node **cut);

/* The largest 'last' of a cut run's nodes (some may reach past the removed range). */
uint64_t mrc_itree_run_last(const struct mrc_itree_node *run);

/* Calls fn on every node of a run cut by mrc_itree_remove_range, in order, under the
 * same terms as remove_range's fn (fn may free n at once); returns how many. O(run). */
size_t mrc_itree_walk_run(struct mrc_itree_node *run, void (*fn)(struct mrc_itree_node *n, void *arg), void *arg);

/* First node (lowest start; equal starts in insertion order) overlapping [start, last],
 * i.e. node->start <= last && start <= node->last, or NULL. NULL if start > last.
 * O(log n). */
struct mrc_itree_node *mrc_itree_iter_first(const struct mrc_itree *t,
                                            uint64_t start, uint64_t last);

/* Next node after n, in the same order, overlapping [start, last], or NULL. Pass the
 * same range as to iter_first. O(log n) amortised per step.
 * To remove matches while iterating, fetch the next node before removing the current
 * one: removal keeps the order of the other nodes, so the walk continues correctly.
 * Inserting during a walk is allowed, but the new node may or may not be visited. */
struct mrc_itree_node *mrc_itree_iter_next(const struct mrc_itree_node *n,
                                           uint64_t start, uint64_t last);

/* Checks every invariant: BST order by start, start <= last, red-black rules (black
 * root, no red child of a red node, equal black heights), subtree_last, parent links,
 * no cycle. Returns 0 if all hold, else -1 after printing what broke to stderr; sets
 * *nodes (if not NULL) to the nodes reached. O(n); for tests and debug builds, never on
 * a hook path (it uses stdio). */
int mrc_itree_check(const struct mrc_itree *t, size_t *nodes);

#endif
