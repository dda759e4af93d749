/* leaks.c - live MR handle counts in per-thread blocks (created and released, count and
 * bytes), and the leak section of the dump. Invariants: blocks come from an mmap-backed
 * pool and are never freed (a dead thread's block is adopted by a later thread with its
 * counts, so sums never lose one); a handle created on one thread may be released on
 * another: only the sums are meaningful. */
#include <pthread.h>
#include <string.h>

#include "core/pool.h"
#include "util/callsite.h"
#include "util/leaks.h"
#include "util/outpath.h"

static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrc_pool pool;
static int pool_ready;
static struct mrc_leak_block *blocks;
static struct mrc_leak_block shared_block;   /* when no memory can be had: racy but counting */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
__thread struct mrc_leak_block *mrc_leaks_my_block;

static void block_release(void *arg)
{
    __atomic_store_n(&((struct mrc_leak_block *)arg)->owned, 0, __ATOMIC_RELEASE);
}

static void key_init(void)
{
    pthread_key_create(&exit_key, block_release);
}

struct mrc_leak_block *mrc_leaks_block_slow(void)
{
    pthread_once(&key_once, key_init);
    pthread_mutex_lock(&blocks_lock);
    if (!pool_ready) {
        mrc_pool_init(&pool, sizeof(struct mrc_leak_block), 1);
        pool_ready = 1;
    }
    struct mrc_leak_block *b;
    for (b = blocks; b; b = b->next)
        if (!__atomic_load_n(&b->owned, __ATOMIC_ACQUIRE))
            break;
    if (!b) {
        b = mrc_pool_get(&pool);
        if (b) {
            b->next = blocks;
            blocks = b;
        }
    }
    if (b)
        b->owned = 1;
    pthread_mutex_unlock(&blocks_lock);
    if (!b)
        b = &shared_block;
    pthread_setspecific(exit_key, b);
    mrc_leaks_my_block = b;
    return b;
}

void mrc_leaks_site_add(struct mrc_leak_tag *t, int dir)
{
    mrc_callsite_live_add(t->site, t->len, t->from_hit, dir);
}

static void sum_block(struct mrc_leaks_summary *s, const struct mrc_leak_block *b)
{
    uint64_t c = __atomic_load_n(&b->created, __ATOMIC_RELAXED), r = __atomic_load_n(&b->released, __ATOMIC_RELAXED);
    s->created += c;
    s->released += r;
    s->count += c - r;   /* wraps per block, comes right in the sum */
    s->bytes += __atomic_load_n(&b->bytes_created, __ATOMIC_RELAXED) -
                __atomic_load_n(&b->bytes_released, __ATOMIC_RELAXED);
}

void mrc_leaks_sum(struct mrc_leaks_summary *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&blocks_lock);
    for (struct mrc_leak_block *b = blocks; b; b = b->next)
        sum_block(out, b);
    sum_block(out, &shared_block);
    pthread_mutex_unlock(&blocks_lock);
}

void mrc_leaks_write(struct mrc_wbuf *w, int json)
{
    struct mrc_leaks_summary s;
    mrc_leaks_sum(&s);
    if (json) {
        mrc_wbuf_printf(w, "\"leaks\": {\"count\": %llu, \"bytes\": %llu, \"created\": %llu, \"released\": %llu, \"callsites\": ",
                        (unsigned long long)s.count, (unsigned long long)s.bytes, (unsigned long long)s.created,
                        (unsigned long long)s.released);
        mrc_callsite_write_list(w, MRC_CALLSITE_BY_LIVE, 1);
        mrc_wbuf_printf(w, "}");
        return;
    }
    mrc_wbuf_printf(w, "  MR handles registered and not deregistered (leaks, if this is the exit dump): %llu, %llu B (of %llu made)\n",
                    (unsigned long long)s.count, (unsigned long long)s.bytes, (unsigned long long)s.created);
    if (s.count)
        mrc_callsite_write_list(w, MRC_CALLSITE_BY_LIVE, 0);
}

static void zero_block(struct mrc_leak_block *b)
{
    b->created = b->released = b->bytes_created = b->bytes_released = 0;
}

void mrc_leaks_child_reset(void)
{
    /* Another thread may have held the lock at fork: it does not exist here. */
    pthread_mutex_init(&blocks_lock, NULL);
    if (pool_ready)
        pthread_mutex_init(&pool.lock, NULL);   /* only ever taken inside blocks_lock */
    for (struct mrc_leak_block *b = blocks; b; b = b->next)
        zero_block(b);
    zero_block(&shared_block);
}
