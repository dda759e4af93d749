/* uffd_ranges.h - how many live watches of the userfaultfd source need each page, so
 * that a page leaves the kernel's registration only when no live registration needs it
 * (ranges overlap: merged, nested and concurrent registrations share pages). Kept as
 * disjoint runs of pages, each with its count and whether our registration is believed
 * to be on it. Not thread-safe: the caller serialises every call. Never allocates
 * through malloc (nodes come from a pool of raw mappings, never returned); a zeroed
 * struct is an empty map. */
#ifndef MRC_UFFD_RANGES_H
#define MRC_UFFD_RANGES_H

#include <stdint.h>

#include "util/pool.h"

struct mrc_uffd_node;

struct mrc_uffd_ranges {
    struct mrc_uffd_node *root;   /* runs by start address */
    struct mrc_pool pool;         /* the nodes; obj_size 0 until the first */
    uint32_t seed;
    /* A node could not be had: counts are no longer kept, nothing is ever reported as
     * unneeded again (watches then stay, which costs events, never correctness). */
    int broken;
};

/* Called for each run [start, end) a call reports; neighbouring runs are joined. It may
 * call mrc_uffd_ranges_used on the same map, nothing else. */
typedef void (*mrc_uffd_run_fn)(void *arg, uint64_t start, uint64_t end);

/* One more watch of [start, end) (page-aligned): each page's count grows by one;
 * registered: our registration is on the range now. 0, or -ENOMEM (the map is broken). */
int mrc_uffd_ranges_add(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, int registered);

/* One watch of [start, end) fewer: fn for each run whose count fell to 0 where our
 * registration was believed to be. Pages no watch counts are left alone. */
void mrc_uffd_ranges_sub(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, mrc_uffd_run_fn fn, void *arg);

/* Our registration has left [start, end) (unmapped, moved, or removed by us): fn (may be
 * NULL) for each counted run where it was believed to be. Returns whether any page of
 * the range is counted (1 if the map is broken). */
int mrc_uffd_ranges_clear(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, mrc_uffd_run_fn fn, void *arg);

/* Our registration is on [start, end) now (a watched mapping moved there): counted pages
 * are marked registered, and fn is called for each run no watch counts. */
void mrc_uffd_ranges_adopt(struct mrc_uffd_ranges *r, uint64_t start, uint64_t end, mrc_uffd_run_fn fn, void *arg);

/* Whether any page of [start, end) is counted (1 if the map is broken). */
int mrc_uffd_ranges_used(const struct mrc_uffd_ranges *r, uint64_t start, uint64_t end);

/* Forgets every count without touching the nodes (a forked child, whose copy may have
 * been taken in the middle of a change). */
void mrc_uffd_ranges_reset(struct mrc_uffd_ranges *r);

#endif
