/* stats.c - per-thread counter blocks and their sum.
 * Invariants: blocks are never freed (a thread's block is handed to a later thread at
 * exit, keeping its counts, so sums never lose a count); blocks come from mmap, never
 * malloc; the list of blocks only grows, at its head, under a lock. */
#include <pthread.h>
#include <string.h>

#include "util/clock.h"
#include "util/stats.h"
#include "util/sys.h"

const char *const mrc_stat_names[MRC_STAT_LAST] = {
    [MRC_STAT_REQUESTS] = "requests",
    [MRC_STAT_HITS] = "hits",
    [MRC_STAT_MISSES] = "misses",
    [MRC_STAT_UNCACHED] = "uncached",
    [MRC_STAT_UNCACHED_SHARED] = "uncached_shared",
    [MRC_STAT_UNCACHED_LARGE] = "uncached_large",
    [MRC_STAT_RELEASES] = "releases",
    [MRC_STAT_MERGES] = "merges",
    [MRC_STAT_EXPANDED] = "expanded",
    [MRC_STAT_EXPAND_REFUSED] = "expand_refused",
    [MRC_STAT_EVICTIONS] = "evictions",
    [MRC_STAT_EXPIRED] = "expired",
    [MRC_STAT_ENOMEM_RETRIES] = "enomem_retries",
    [MRC_STAT_REG_FAILURES] = "reg_failures",
    [MRC_STAT_REAL_REGS] = "real_regs",
    [MRC_STAT_REAL_DEREGS] = "real_deregs",
    [MRC_STAT_DEREG_FAILURES] = "dereg_failures",
    [MRC_STAT_DEFERRED] = "deferred_deregs",
    [MRC_STAT_RACED] = "raced_misses",
    [MRC_STAT_REAL_REG_NS] = "real_reg_ns",
    [MRC_STAT_REAL_DEREG_NS] = "real_dereg_ns",
    [MRC_STAT_HANDLES_MADE] = "handles_made",
    [MRC_STAT_HANDLES_RELEASED] = "handles_released",
    [MRC_STAT_HANDLE_BYTES_MADE] = "handle_bytes_made",
    [MRC_STAT_HANDLE_BYTES_RELEASED] = "handle_bytes_released",
    [MRC_STAT_UFFD_EVENTS] = "uffd_events",
    [MRC_STAT_UFFD_CAUGHT] = "uffd_caught",
    [MRC_STAT_UFFD_FAULTS] = "uffd_faults",
    [MRC_STAT_UFFD_UNWATCHED] = "uffd_unwatched",
    [MRC_STAT_VERIFY_CHECKS] = "verify_checks",
    [MRC_STAT_VERIFY_STALE] = "verify_stale",
    [MRC_STAT_FIRST_REG_NS] = "first_reg_ns",
    [MRC_STAT_FIRST_REG_BYTES] = "first_reg_bytes",
    [MRC_STAT_ODP_FALLBACKS] = "odp_fallbacks",
    [MRC_STAT_ODP_IMPLICIT] = "odp_implicit",
    [MRC_STAT_ODP_PREFETCHES] = "odp_prefetches",
    [MRC_STAT_SMALL_PAGE_BYTES] = "small_page_bytes",
    [MRC_STAT_HUGE_PAGE_BYTES] = "huge_page_bytes",
    [MRC_STAT_NIC_ENTRIES] = "nic_entries",
    [MRC_STAT_NIC_ENTRIES_4K] = "nic_entries_4k",
    [MRC_STAT_REGS_OVER_1M_PAGES] = "regs_over_1m_pages",
    [MRC_STAT_HUGE_ADVISED] = "huge_advised_bytes",
    [MRC_STAT_HUGE_COLLAPSED] = "huge_collapsed_bytes",
    [MRC_STAT_COLLAPSE_FAILURES] = "collapse_failures",
    [MRC_STAT_POPULATED] = "populated_bytes",
    [MRC_STAT_PREPARE_NS] = "prepare_ns",
    [MRC_STAT_INVAL_IN_USE] = "inval_in_use",
    [MRC_STAT_INVAL_IN_USE_LIB] = "inval_in_use_lib_cache",
    [MRC_STAT_AUDIT_CHECKS] = "audit_checks",
    [MRC_STAT_AUDIT_FAULTS] = "audit_faults",
    [MRC_STAT_INVALIDATED] = "invalidated",
    /* In the order of the causes (core/events.h), which name themselves by these. */
    [MRC_STAT_INVAL_BASE + 0] = "inval_munmap",
    [MRC_STAT_INVAL_BASE + 1] = "inval_mremap",
    [MRC_STAT_INVAL_BASE + 2] = "inval_madvise",
    [MRC_STAT_INVAL_BASE + 3] = "inval_mmap_fixed",
    [MRC_STAT_INVAL_BASE + 4] = "inval_shm",
    [MRC_STAT_INVAL_BASE + 5] = "inval_brk",
    [MRC_STAT_INVAL_BASE + 6] = "inval_free",
    [MRC_STAT_INVAL_BASE + 7] = "inval_trim",
    [MRC_STAT_INVAL_BASE + 8] = "inval_api",
    [MRC_STAT_INVAL_BASE + 9] = "inval_source_lost",
    [MRC_STAT_INVAL_BASE + 10] = "inval_file",
};

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrc_stats_block *blocks;          /* every block, newest first */
static struct mrc_stats_block shared_block;     /* when mmap fails: correct, if contended */
static pthread_key_t exit_key;
static int exit_key_ok;     /* without a key, an exiting thread's block stays owned */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
__thread struct mrc_stats_block *mrc_stats_tls;

static void block_release(void *arg)
{
    struct mrc_stats_block *b = arg;
    __atomic_store_n(&b->owned, 0, __ATOMIC_RELEASE);
}

static void key_init(void)
{
    exit_key_ok = pthread_key_create(&exit_key, block_release) == 0;
}

static struct mrc_stats_block *block_new(void)
{
    /* One page-rounded block each: a block is a few KiB and threads are few. */
    size_t size = (sizeof(struct mrc_stats_block) + 4095) & ~(size_t)4095;
    return mrc_raw_map(size, 0);
}

struct mrc_stats_block *mrc_stats_thread_block(void)
{
    struct mrc_stats_block *b = mrc_stats_tls;
    if (__builtin_expect(b != NULL, 1))
        return b;
    pthread_once(&key_once, key_init);
    pthread_mutex_lock(&blocks_lock);
    for (b = blocks; b; b = b->next)
        if (b != &shared_block && !__atomic_load_n(&b->owned, __ATOMIC_ACQUIRE))
            break;
    if (!b) {
        b = block_new();
        if (b) {
            b->next = blocks;
            blocks = b;
        }
    }
    if (b)
        b->owned = 1;
    pthread_mutex_unlock(&blocks_lock);
    if (!b) {
        /* Counting into the shared block races between threads; a lost count is
         * better than a failed registration. */
        b = &shared_block;
    }
    if (exit_key_ok)
        pthread_setspecific(exit_key, b);
    mrc_stats_tls = b;
    return b;
}

static void add_block(struct mrc_stats_block *out, const struct mrc_stats_block *b)
{
    for (int i = 0; i < MRC_STAT_LAST; i++)
        out->v[i] += __atomic_load_n(&b->v[i], __ATOMIC_RELAXED);
    for (int i = 0; i < MRC_HIST_BUCKETS; i++)
        for (int h = 0; h < MRC_HIST_LAST; h++) {
            uint64_t x = __atomic_load_n(&b->hist[i][h], __ATOMIC_RELAXED);
            if (h != MRC_HIST_REG_MIN)
                out->hist[i][h] += x;
            else if (x && (!out->hist[i][h] || x < out->hist[i][h]))
                out->hist[i][h] = x;
        }
}

void mrc_stats_sum(struct mrc_stats_block *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&blocks_lock);
    for (struct mrc_stats_block *b = blocks; b; b = b->next)
        add_block(out, b);
    add_block(out, &shared_block);
    pthread_mutex_unlock(&blocks_lock);
    /* The totals the histogram holds are not counted twice (see stats.h). */
    uint64_t reg_ticks = 0;
    for (int i = 0; i < MRC_HIST_BUCKETS; i++) {
        out->v[MRC_STAT_REQUESTS] += out->hist[i][MRC_HIST_REQUESTS];
        out->v[MRC_STAT_REAL_REGS] += out->hist[i][MRC_HIST_REGS];
        reg_ticks += out->hist[i][MRC_HIST_REG_NS];
        /* Counted in ticks (util/clock.h): a registration pays two counter reads. */
        out->hist[i][MRC_HIST_REG_NS] = mrc_ticks_to_ns(out->hist[i][MRC_HIST_REG_NS]);
        out->hist[i][MRC_HIST_REG_MIN] = mrc_ticks_to_ns(out->hist[i][MRC_HIST_REG_MIN]);
    }
    out->v[MRC_STAT_REAL_REG_NS] = mrc_ticks_to_ns(reg_ticks);
    out->v[MRC_STAT_FIRST_REG_NS] = mrc_ticks_to_ns(out->v[MRC_STAT_FIRST_REG_NS]);
    out->v[MRC_STAT_REAL_DEREG_NS] = mrc_ticks_to_ns(out->v[MRC_STAT_REAL_DEREG_NS]);
}

static void zero_block(struct mrc_stats_block *b)
{
    for (int i = 0; i < MRC_STAT_LAST; i++)
        __atomic_store_n(&b->v[i], 0, __ATOMIC_RELAXED);
    for (int i = 0; i < MRC_HIST_BUCKETS; i++)
        for (int h = 0; h < MRC_HIST_LAST; h++)
            __atomic_store_n(&b->hist[i][h], 0, __ATOMIC_RELAXED);
}

void mrc_stats_reset(void)
{
    pthread_mutex_lock(&blocks_lock);
    for (struct mrc_stats_block *b = blocks; b; b = b->next)
        zero_block(b);
    zero_block(&shared_block);
    pthread_mutex_unlock(&blocks_lock);
}

void mrc_stats_child_reset(void)
{
    /* Another thread may have held the lock at fork: it does not exist here. */
    pthread_mutex_init(&blocks_lock, NULL);
    mrc_stats_reset();
}

unsigned mrc_stats_blocks_owned(void)
{
    unsigned n = 0;
    pthread_mutex_lock(&blocks_lock);
    for (struct mrc_stats_block *b = blocks; b; b = b->next)
        n += b != &shared_block && __atomic_load_n(&b->owned, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&blocks_lock);
    return n;
}
