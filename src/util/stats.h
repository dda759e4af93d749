/* stats.h - libmrcache's counters: an enum with a name table, per-thread blocks so that
 * hits on different threads never write a shared cache line, summed on demand.
 * Invariant: counting never allocates through malloc and never takes a lock after a
 * thread's first count (the block comes from a pool backed by mmap). */
#ifndef MRC_STATS_H
#define MRC_STATS_H

#include <stdint.h>

/* One counter per cause of invalidation (core/events.h names them), from
 * MRC_STAT_INVAL_BASE in the causes' order. */
#define MRC_STAT_INVAL_CAUSES 11

enum mrc_stat {
    MRC_STAT_REQUESTS,        /* registrations asked of the cache (*) */
    MRC_STAT_HITS,            /* served by a cached registration */
    MRC_STAT_MISSES,          /* needed a new registration */
    MRC_STAT_UNCACHED,        /* passed through: uncacheable flags, policy, disabled */
    MRC_STAT_UNCACHED_SHARED, /* ... of them, over memory another process may change (MRCACHE_SHARED) */
    MRC_STAT_UNCACHED_LARGE,  /* ... of them, larger than a cached registration may be (MRCACHE_LARGE) */
    MRC_STAT_RELEASES,        /* deregistrations that released a cached handle */
    MRC_STAT_MERGES,          /* entries absorbed into a larger registration */
    MRC_STAT_EXPANDED,        /* misses that registered the allocation around them (MRCACHE_EXPAND) */
    MRC_STAT_EXPAND_REFUSED,  /* ... whose wider registration the NIC refused: their own range instead */
    MRC_STAT_EVICTIONS,       /* idle entries deregistered to honour a limit */
    MRC_STAT_EXPIRED,         /* idle entries deregistered unused for MRCACHE_IDLE_TIMEOUT */
    MRC_STAT_ENOMEM_RETRIES,  /* back-end ENOMEM/EAGAIN answered by evicting and retrying */
    MRC_STAT_REG_FAILURES,    /* registrations that failed even after retrying */
    MRC_STAT_REAL_REGS,       /* calls to the back-end's registration (*) */
    MRC_STAT_REAL_DEREGS,     /* calls to the back-end's deregistration */
    MRC_STAT_DEREG_FAILURES,  /* ... that it refused (the registration stays, retried later) */
    MRC_STAT_DEFERRED,        /* deregistrations deferred out of an unmap hook */
    MRC_STAT_RACED,           /* misses whose range was invalidated while registering */
    MRC_STAT_REAL_REG_NS,     /* time spent in back-end registration (*) */
    MRC_STAT_REAL_DEREG_NS,   /* time spent in back-end deregistration */
    MRC_STAT_HANDLES_MADE,    /* MR handles handed out (the leak report's live count is */
    MRC_STAT_HANDLES_RELEASED, /* made minus released, summed over threads) */
    MRC_STAT_HANDLE_BYTES_MADE,
    MRC_STAT_HANDLE_BYTES_RELEASED,
    MRC_STAT_UFFD_EVENTS,     /* unmap/remove/remap events read from the userfaultfd */
    MRC_STAT_UFFD_CAUGHT,     /* entries only the userfaultfd saw go (the other sources missed them) */
    MRC_STAT_UFFD_FAULTS,     /* page faults answered in watched ranges */
    MRC_STAT_UFFD_UNWATCHED,  /* registrations the userfaultfd could not watch (file-backed, busy, limits) */
    MRC_STAT_VERIFY_CHECKS,   /* hits checked against /proc/self/pagemap (MRCACHE_VERIFY) */
    MRC_STAT_VERIFY_STALE,    /* ... whose pinned pages were no longer the mapped ones */
    MRC_STAT_FIRST_REG_NS,    /* the process's first back-end registration, which pays */
    MRC_STAT_FIRST_REG_BYTES, /* one-time costs: its time (ticks until summed) and size */
    MRC_STAT_ODP_FALLBACKS,   /* registrations made on demand (ODP) when pinning failed */
    MRC_STAT_ODP_IMPLICIT,    /* misses served by a pd's implicit ODP MR (no registration) */
    MRC_STAT_ODP_PREFETCHES,  /* ibv_advise_mr prefetches of registrations served by ODP */
    MRC_STAT_SMALL_PAGE_BYTES, /* bytes registered over base (4 KiB) pages ... */
    MRC_STAT_HUGE_PAGE_BYTES, /* ... and over huge pages, as found just after the pin */
    MRC_STAT_NIC_ENTRIES,     /* the NIC's translation entries: one per page found */
    MRC_STAT_NIC_ENTRIES_4K,  /* ... and without huge pages: one per 4 KiB */
    MRC_STAT_REGS_OVER_1M_PAGES, /* registrations spanning more than 2^20 4 KiB pages */
    MRC_STAT_HUGE_ADVISED,    /* bytes given MADV_HUGEPAGE before a pin (MRCACHE_HUGEPAGES) */
    MRC_STAT_HUGE_COLLAPSED,  /* bytes MADV_COLLAPSE made huge before a pin */
    MRC_STAT_COLLAPSE_FAILURES, /* MADV_COLLAPSE runs the kernel refused (registered as they were) */
    MRC_STAT_POPULATED,       /* bytes populated in parallel before a pin (MRCACHE_POPULATE) */
    MRC_STAT_PREPARE_NS,      /* time spent on advice, collapse and populating before pins */
    MRC_STAT_INVAL_IN_USE,    /* the program's MRs found registered over memory that changed */
    MRC_STAT_INVAL_IN_USE_LIB, /* ... of them, a self-monitoring library cache's: not reported */
    MRC_STAT_AUDIT_CHECKS,    /* scatter/gather entries of posted work requests checked (MRCACHE_AUDIT) */
    MRC_STAT_AUDIT_FAULTS,    /* ... that no MR of the program covers with its memory unchanged */
    MRC_STAT_INVALIDATED,     /* entries invalidated, all causes */
    MRC_STAT_INVAL_BASE,
    MRC_STAT_LAST = MRC_STAT_INVAL_BASE + MRC_STAT_INVAL_CAUSES
};
/* (*) Never counted directly: mrc_stats_sum adds them up from the histogram, which
 * counts the same events per size, so a registration writes one line of statistics
 * for them instead of three. */

/* Registration sizes in powers of two: bucket 0 is <= 4 KiB, the last is >= 2 GiB. */
#define MRC_HIST_BUCKETS 20
/* Per bucket: requests and hits (by the size requested) and the bytes the hits asked for;
 * back-end registrations, their time (ticks until summed, then ns), the fastest one's
 * (the same; 0: none yet; summed as the least of the blocks') and bytes (by the size
 * registered, merged and rounded). */
enum mrc_hist {
    MRC_HIST_REQUESTS, MRC_HIST_HITS, MRC_HIST_REGS, MRC_HIST_REG_NS, MRC_HIST_HIT_BYTES, MRC_HIST_REG_BYTES,
    MRC_HIST_REG_MIN, MRC_HIST_LAST
};
#define MRC_HIST_ROW 8   /* a bucket's row is one 64-byte line */

struct mrc_stats_block {
    uint64_t v[MRC_STAT_LAST];
    /* By size, then kind: the counts one registration makes share a cache line. */
    uint64_t hist[MRC_HIST_BUCKETS][MRC_HIST_ROW] __attribute__((aligned(64)));
    struct mrc_stats_block *next;   /* all blocks ever made, for summing */
    int owned;                      /* a live thread counts into it */
};

extern const char *const mrc_stat_names[MRC_STAT_LAST];

/* The calling thread's block (made on first use). Never NULL: falls back to a shared
 * block if no memory can be had, so counting cannot fail. */
struct mrc_stats_block *mrc_stats_thread_block(void);
extern __thread struct mrc_stats_block *mrc_stats_tls;

static inline struct mrc_stats_block *mrc_stats_block(void)
{
    struct mrc_stats_block *b = mrc_stats_tls;
    return __builtin_expect(b != NULL, 1) ? b : mrc_stats_thread_block();
}

/* The calling thread's hits so far: taken before and after a cache lookup, a difference
 * says the lookup was a hit (no other thread's hit can show). */
static inline uint64_t mrc_stats_thread_hits(void)
{
    return __atomic_load_n(&mrc_stats_block()->v[MRC_STAT_HITS], __ATOMIC_RELAXED);
}

/* Adds n to a counter of the calling thread's block. Thread-private line: no atomic
 * RMW; relaxed accesses, since mrc_stats_sum reads it from another thread. */
static inline void mrc_stats_bump(uint64_t *p, uint64_t n)
{
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* Adds n to counter s of the calling thread. */
static inline void mrc_stat_add(enum mrc_stat s, uint64_t n)
{
    mrc_stats_bump(&mrc_stats_block()->v[s], n);
}

static inline unsigned mrc_hist_bucket(uint64_t len)
{
    if (len <= 4096)
        return 0;
    unsigned b = (unsigned)(64 - __builtin_clzll(len - 1)) - 12;
    return b >= MRC_HIST_BUCKETS ? MRC_HIST_BUCKETS - 1 : b;
}

static inline void mrc_hist_add(enum mrc_hist h, uint64_t len, uint64_t n)
{
    mrc_stats_bump(&mrc_stats_block()->hist[mrc_hist_bucket(len)][h], n);
}

/* A back-end registration of len bytes that took ticks: its time among the fastest. */
static inline void mrc_hist_reg_time(uint64_t len, uint64_t ticks)
{
    uint64_t *row = mrc_stats_block()->hist[mrc_hist_bucket(len)];
    uint64_t t = ticks ? ticks : 1, min = __atomic_load_n(&row[MRC_HIST_REG_MIN], __ATOMIC_RELAXED);
    mrc_stats_bump(&row[MRC_HIST_REG_NS], ticks);
    if (!min || t < min)
        __atomic_store_n(&row[MRC_HIST_REG_MIN], t, __ATOMIC_RELAXED);
}

/* A cache hit of a len-byte request: its count, and its count and bytes by size. One
 * load of the thread's block for the three (the hit path's whole cost of counting). */
static inline void mrc_stats_hit(uint64_t len)
{
    struct mrc_stats_block *b = mrc_stats_block();
    uint64_t *row = b->hist[mrc_hist_bucket(len)];
    mrc_stats_bump(&b->v[MRC_STAT_HITS], 1);
    mrc_stats_bump(&row[MRC_HIST_HITS], 1);
    mrc_stats_bump(&row[MRC_HIST_HIT_BYTES], len);
}

/* The cache's gauges, a snapshot: back-end registrations alive (in the tree, in use,
 * deferred or refused) now and at their peak, in count and bytes; those in the tree;
 * those whose deregistration is deferred; those whose deregistration the back-end
 * refused (kept, retried). */
struct mrc_gauges {
    uint64_t entries, entries_peak, bytes, bytes_peak, tree_entries, tree_bytes,
             deferred, deferred_bytes, failed, failed_bytes;
};

/* Sums every thread's block into out (a snapshot; concurrent counts may or may not be in). */
void mrc_stats_sum(struct mrc_stats_block *out);

/* How many threads own a statistics block now (live threads that counted). */
unsigned mrc_stats_blocks_owned(void);

/* Zeroes every block (tests). */
void mrc_stats_reset(void);

/* In a forked child: a fresh lock, and an account of its own. */
void mrc_stats_child_reset(void);

#endif
