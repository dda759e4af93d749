/* callsite.h - where registrations come from: with MRCACHE_CALLSITES=N the stack of every
 * miss and of about 1 in K hits is captured and counted; dumps list the top N, symbolized.
 * Invariants: off (N = 0) costs one load per registration; the table is touched only on
 * the registration path and at dump time, never in a malloc or unmap hook; its memory is
 * mmap'ed and its lock is a leaf (nothing is locked inside it). */
#ifndef MRC_CALLSITE_H
#define MRC_CALLSITE_H

#include <stddef.h>
#include <stdint.h>

#include "util/stats.h"

#define MRC_CALLSITE_DEPTH 8          /* frames kept per stack, below libmrcache's own */
#define MRC_CALLSITE_MAX_TOP 1000     /* MRCACHE_CALLSITES is clamped to this */
#define MRC_CALLSITE_MAX_STACKS 4096  /* distinct stacks kept; later ones count as "other" */
#define MRC_CALLSITE_DEFAULT_SAMPLE 64

struct mrc_callsite;
struct mrc_wbuf;

/* The top N to report; 0 = off. Read on every registration. */
extern unsigned mrc_callsite_top;

/* Enables call sites: the top n stacks reported (0 = off, clamped to MRC_CALLSITE_MAX_TOP),
 * hits captured at random intervals of mean sample_k (1 = every hit). Before the first
 * registration (mrc_init). */
void mrc_callsite_init(uint64_t n, uint64_t sample_k);

/* The sampling period in force (K). */
unsigned mrc_callsite_sample_period(void);

/* The calling thread's hit count (0 when call sites are off: one load). Taken before
 * mrc_cache_get and passed to mrc_callsite_count after it: a difference says the request
 * was a hit (the cache counts per thread, so no other thread's hit shows). */
static inline uint64_t mrc_callsite_mark(void)
{
    if (__builtin_expect(!__atomic_load_n(&mrc_callsite_top, __ATOMIC_RELAXED), 1))
        return 0;
    return mrc_stats_thread_hits();
}

/* Counts one request of len bytes that was a hit (per the mark) or not, capturing the
 * stack on every miss and on sampled hits. Registration path only (takes the table lock;
 * the first call loads libunwind). Returns the site counted to, for the handle's leak
 * tag, or NULL (off, or a hit not sampled); *hit says which it was (0 when off). */
struct mrc_callsite *mrc_callsite_sample(uint64_t len, int hit);

static inline struct mrc_callsite *mrc_callsite_count(uint64_t len, uint64_t mark, int *hit)
{
    *hit = 0;
    if (__builtin_expect(!__atomic_load_n(&mrc_callsite_top, __ATOMIC_RELAXED), 1))
        return NULL;
    *hit = mrc_stats_thread_hits() != mark;
    return mrc_callsite_sample(len, *hit);
}

/* A handle attributed to site went live (dir 1) or was released (dir -1). Any thread,
 * O(1), lock-free (atomic adds on the site). */
void mrc_callsite_live_add(struct mrc_callsite *site, uint64_t len, int from_hit, int dir);

/* Raw capture, for tests and measurement: up to max return addresses below libmrcache's
 * (and libibverbs') leading frames. Returns how many. Registration path only. */
int mrc_callsite_capture(uint64_t *ips, int max);

/* The same from anywhere, hooks included: captures only while call sites are on and
 * libunwind (which neither allocates nor locks what a hook holds) is loaded already;
 * else 0. */
int mrc_callsite_capture_any(uint64_t *ips, int max);

/* The stack a site counts (MRC_CALLSITE_DEPTH return addresses, zero-padded). */
const uint64_t *mrc_callsite_ips(const struct mrc_callsite *s);

/* One return address as "function+0x.. (object)" (or "object+0x..", or the bare
 * address), into out. Not from a hook. */
void mrc_callsite_label(uint64_t ip, char *out, size_t size);

/* Writes up to n return addresses (to the first zero) as text lines, each indent then
 * "function+0x.. (object)", symbolized. Not from a hook. */
void mrc_callsite_write_stack(struct mrc_wbuf *w, const uint64_t *ips, int n, const char *indent);

enum mrc_callsite_order {
    MRC_CALLSITE_BY_MISSES,   /* misses, then estimated requests */
    MRC_CALLSITE_BY_LIVE,     /* estimated live bytes (handles not deregistered) */
};

/* Writes the top N sites in that order: JSON an array, text indented lines. Symbolizes
 * (reads the objects' symbol tables): dump time only, never in a hook. */
void mrc_callsite_write_list(struct mrc_wbuf *w, enum mrc_callsite_order order, int json);

/* Writes the call-site section: JSON `"callsites": {...}` (no leading comma), text lines
 * (nothing when off). */
void mrc_callsite_write(struct mrc_wbuf *w, int json);

/* Fork: prepare takes the table lock, the parent releases it; the child gets a fresh
 * lock and zero counts (its parent's registrations are not its own). */
void mrc_callsite_fork_lock(void);
void mrc_callsite_fork_unlock(void);
void mrc_callsite_child_reset(void);

#endif
