/* leaks.h - MR handles registered and not (yet) deregistered: counted at creation and
 * release in O(1) as ordinary per-thread counters (util/stats.h), attributed to call
 * sites when those are on. At exit, what is live leaked.
 * Invariants: the hooks never allocate, never lock after a thread's first count. */
#ifndef MRC_LEAKS_H
#define MRC_LEAKS_H

#include <stdint.h>

#include "util/stats.h"

struct mrc_callsite;
struct mrc_wbuf;

/* Lives in each MR handle: what its release must undo. Zeroed = not counted. */
struct mrc_leak_tag {
    struct mrc_callsite *site;   /* where it was registered, or NULL (off, unsampled hit) */
    uint64_t len;                /* bytes as the caller registered them */
    uint32_t counted;            /* 1 between on_create and on_release */
    uint32_t from_hit;           /* site attribution came from a sampled hit */
};

/* For call sites' live counts: out of line, only when a site is attributed. */
void mrc_leaks_site_add(struct mrc_leak_tag *t, int dir);

/* A handle of len bytes was handed out; site and hit from mrc_callsite_count (site may
 * be NULL). O(1), inline: a few instructions per registration. */
static inline void mrc_leaks_on_create(struct mrc_leak_tag *t, uint64_t len, struct mrc_callsite *site, int hit)
{
    mrc_stat_add(MRC_STAT_HANDLES_MADE, 1);
    mrc_stat_add(MRC_STAT_HANDLE_BYTES_MADE, len);
    t->len = len;
    t->site = site;
    t->from_hit = hit ? 1 : 0;
    t->counted = 1;
    if (site)
        mrc_leaks_site_add(t, 1);
}

/* The handle was deregistered (successfully: a failed dereg leaves it live). O(1);
 * a second call, or one for a tag never created, does nothing. */
static inline void mrc_leaks_on_release(struct mrc_leak_tag *t)
{
    if (!t->counted)
        return;
    t->counted = 0;
    mrc_stat_add(MRC_STAT_HANDLES_RELEASED, 1);
    mrc_stat_add(MRC_STAT_HANDLE_BYTES_RELEASED, t->len);
    if (t->site)
        mrc_leaks_site_add(t, -1);
}

struct mrc_leaks_summary {
    uint64_t count, bytes;       /* live now */
    uint64_t created, released;  /* since start-up (or fork) */
};

/* Sums every thread's counts (a snapshot: concurrent registrations may or may not be in). */
void mrc_leaks_sum(struct mrc_leaks_summary *out);

/* Writes the live handles: JSON `"leaks": {...}` (no leading comma) or text lines; with
 * call sites on, the top sites by live bytes. Not from a hook (symbolizes). */
void mrc_leaks_write(struct mrc_wbuf *w, int json);

#endif
