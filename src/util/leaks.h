/* leaks.h - MR handles registered and not (yet) deregistered: counted at creation and
 * release in O(1) without locks or shared cache lines (per-thread blocks, summed on
 * demand), attributed to call sites when those are on. At exit, what is live leaked.
 * Invariants: the hooks never allocate, never lock after a thread's first count. */
#ifndef MRC_LEAKS_H
#define MRC_LEAKS_H

#include <stdint.h>

struct mrc_callsite;
struct mrc_wbuf;

/* Lives in each MR handle: what its release must undo. Zeroed = not counted. */
struct mrc_leak_tag {
    struct mrc_callsite *site;   /* where it was registered, or NULL (off, unsampled hit) */
    uint64_t len;                /* bytes as the caller registered them */
    uint32_t counted;            /* 1 between on_create and on_release */
    uint32_t from_hit;           /* site attribution came from a sampled hit */
};

/* A thread's counts: its own cache line, written only by that thread. */
struct mrc_leak_block {
    void *pool_link;             /* the pool's first word (blocks are never put back) */
    uint64_t created, released, bytes_created, bytes_released;
    struct mrc_leak_block *next; /* every block ever made */
    int owned;                   /* a live thread counts into it */
} __attribute__((aligned(64)));

extern __thread struct mrc_leak_block *mrc_leaks_my_block;

/* The calling thread's block, made on first use (never NULL: a shared one if no memory). */
struct mrc_leak_block *mrc_leaks_block_slow(void);

/* For call sites' live counts: out of line, only when a site is attributed. */
void mrc_leaks_site_add(struct mrc_leak_tag *t, int dir);

/* Thread-private line: a relaxed load and store, no atomic read-modify-write. */
static inline void mrc_leaks_add_(uint64_t *p, uint64_t n)
{
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* A handle of len bytes was handed out; site and hit from mrc_callsite_count (site may
 * be NULL). O(1), inline: a few instructions per registration. */
static inline void mrc_leaks_on_create(struct mrc_leak_tag *t, uint64_t len, struct mrc_callsite *site, int hit)
{
    struct mrc_leak_block *b = mrc_leaks_my_block;
    if (__builtin_expect(!b, 0))
        b = mrc_leaks_block_slow();
    mrc_leaks_add_(&b->created, 1);
    mrc_leaks_add_(&b->bytes_created, len);
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
    struct mrc_leak_block *b = mrc_leaks_my_block;
    if (__builtin_expect(!b, 0))
        b = mrc_leaks_block_slow();
    mrc_leaks_add_(&b->released, 1);
    mrc_leaks_add_(&b->bytes_released, t->len);
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

/* In a forked child: a fresh lock and zero counts (the parent's handles are not ours). */
void mrc_leaks_child_reset(void);

#endif
