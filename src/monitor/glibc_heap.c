/* glibc_heap.c - predicts, before the call, what glibc's free/realloc will give back to
 * the kernel, and invalidates it first: an mmapped chunk's whole mapping; otherwise the
 * top of the heap that trimming would release, computed as glibc 2.26+ does (chunk
 * headers, coalescing with free neighbours, FASTBIN_CONSOLIDATION_THRESHOLD, the trim
 * threshold and top pad, whose dynamic changes we mirror). A free that keeps its pages
 * mapped invalidates nothing: that is where malloc/register/free loops get their hits.
 * Invariants: reads only headers of the chunk being freed and its neighbours; when a
 * setting is unknown (mallopt, environment), assumes threshold and pad 0 (invalidates
 * more, never less); after the call the main heap's end is checked again, and anything
 * released beyond the prediction is invalidated then (counted, logged once). */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor/glibc_heap.h"
#include "monitor/unmap.h"
#include "util/log.h"
#include "util/real.h"

/* glibc's own, for calls that arrive before the next allocator is known. */
extern void *__libc_malloc(size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

#define SZ 8u                         /* SIZE_SZ */
#define MINSIZE 32u
#define PREV_INUSE 1u
#define IS_MMAPPED 2u
#define NON_MAIN_ARENA 4u
#define SIZE_BITS 7u
#define CONSOLIDATION (64u << 10)     /* FASTBIN_CONSOLIDATION_THRESHOLD */
#define HEAP_MAX (64ul << 20)         /* HEAP_MAX_SIZE of a thread arena's heap */
#define HEAP_INFO_SIZE 48u            /* sizeof(heap_info), rounded to 16 */
#define ARENA_TOP_OFFSET 96u          /* offsetof(struct malloc_state, top) */
#define MMAP_THRESHOLD_MAX (32ul << 20)

static struct {
    uint64_t trim, pad, mmap_thr, max_fast;
    int no_dyn;
} sh = { 128u << 10, 128u << 10, 128u << 10, 128, 0 };

static int glibc;                     /* the next allocator is glibc's malloc */
static int late_logged;
int mrc_glibc_heap_watching;

int mrc_glibc_heap_watch(int on)
{
    return __atomic_exchange_n(&mrc_glibc_heap_watching, on, __ATOMIC_SEQ_CST);
}

/* Whether a call is watched: the hooks on, and the sink armed. */
static int watching(void)
{
    return __atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED) && mrc_sink_armed(&mrc_monitor.sink);
}

#define libc_ready mrc_real_ensure_libc

static void unknown_settings(void)
{
    sh.trim = 0;
    sh.pad = 0;
    sh.max_fast = 0;
    sh.no_dyn = 1;
}

int mrc_glibc_heap_init(void)
{
    glibc = mrc_real_alloc_is_glibc;
    if (getenv("MALLOC_TRIM_THRESHOLD_") || getenv("MALLOC_TOP_PAD_") || getenv("MALLOC_MMAP_THRESHOLD_") ||
        getenv("MALLOC_MMAP_MAX_") || getenv("MALLOC_ARENA_MAX") ||
        (getenv("GLIBC_TUNABLES") && strstr(getenv("GLIBC_TUNABLES"), "glibc.malloc.")))
        unknown_settings();
    return glibc;
}

static size_t *hdr(uintptr_t chunk) { return (size_t *)chunk; }
static size_t fsize(uintptr_t chunk) { return hdr(chunk)[1]; }
static size_t csize(uintptr_t chunk) { return hdr(chunk)[1] & ~(size_t)SIZE_BITS; }

#define CHUNK_WALK 64               /* chunks one mapping's walk may read */

/* Whether the program's malloc is glibc's: the next allocator after us may be, with
 * another ahead of us (a sanitizer's, preloaded first), whose memory is not glibc's
 * chunks and may not even be read. Asked once, outside any hook (dlsym may allocate). */
static int program_malloc_is_glibc(void)
{
    static int known;   /* 0 not yet asked, 1 glibc's, 2 another's */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (!k) {
        k = mrc_real_alloc_is_glibc && mrc_real_in_libc(dlsym(RTLD_DEFAULT, "malloc")) ? 1 : 2;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 1;
}

int mrc_glibc_mmapped_chunk(uint64_t start, uint64_t end, uint64_t addr, uint64_t *cs, uint64_t *ce)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !program_malloc_is_glibc())
        return 0;
    /* An mmapped chunk from malloc starts its mapping: prev_size 0 (memalign's offset
     * chunks, which do not, are left to the mapping's bounds), then its size, a multiple
     * of the page, with IS_MMAPPED. The next mapping, if the kernel joined one, follows. */
    uint64_t c = start;
    for (int i = 0; i < CHUNK_WALK && c + 2 * SZ <= end; i++) {
        size_t f = fsize((uintptr_t)c), sz = f & ~(size_t)SIZE_BITS;
        if (hdr((uintptr_t)c)[0] || !(f & IS_MMAPPED) || !sz || sz % (size_t)pg || sz > end - c)
            return 0;
        if (addr < c + sz) {
            *cs = c;
            *ce = c + sz;
            return 1;
        }
        c += sz;
    }
    return 0;
}

struct release {
    uint64_t lo, hi;                  /* [lo, hi): what the call may unmap */
    uint64_t lo2, hi2;                /* a second range (a thread heap's predecessor) */
    uintptr_t brk_before;             /* main arena: heap end before the call, else 0 */
};

/* What free(mem) may give back, for a chunk not mmapped. */
static void predict_free(uintptr_t mem, struct release *r)
{
    uintptr_t c = mem - 2 * SZ;
    size_t f = fsize(c), sz = f & ~(size_t)SIZE_BITS;
    if (sz <= sh.max_fast)
        return;                       /* a fastbin chunk is never coalesced at free */
    uintptr_t lo = c, heap = 0, end;
    if (f & NON_MAIN_ARENA) {
        heap = c & ~(HEAP_MAX - 1);
        end = heap + hdr(heap)[2];    /* heap_info.size */
    } else {
        end = (uintptr_t)mrc_real.sbrk(0);
        r->brk_before = end;
    }
    size_t merged = sz;
    if (!(f & PREV_INUSE)) {
        lo = c - hdr(c)[0];
        merged += hdr(c)[0];
    }
    uintptr_t next = c + sz;
    size_t nsz = csize(next);
    uintptr_t top;
    if (next + nsz == end) {
        top = lo;                     /* merges into the top chunk */
        merged = end - lo;
    } else {
        if (next + nsz + 2 * SZ <= end && !(fsize(next + nsz) & PREV_INUSE))
            merged += nsz;
        if (merged < CONSOLIDATION)
            return;                   /* glibc only trims after a large coalesced free */
        if (heap) {
            top = *(uintptr_t *)(hdr(heap)[0] + ARENA_TOP_OFFSET);
        } else {
            struct mallinfo2 mi = mallinfo2();
            top = end - mi.keepcost;
        }
        if (top < (heap ? heap : 0) || top > end)
            top = lo;                 /* unexpected: assume the worst */
    }
    if (merged < CONSOLIDATION)
        return;
    if (heap && top <= heap + HEAP_INFO_SIZE && hdr(heap)[1]) {
        /* The whole heap may be deleted, and its predecessor trimmed. */
        uintptr_t prev = hdr(heap)[1];
        r->lo = heap;
        r->hi = end;
        r->lo2 = prev;
        r->hi2 = prev + hdr(prev)[2];
        return;
    }
    uint64_t top_size = end - top;
    if (top_size < sh.trim || top_size - MINSIZE - 1 <= sh.pad)
        return;
    uint64_t pm = mrc_monitor.page_size - 1;
    uint64_t extra = (top_size - MINSIZE - 1 - sh.pad) & ~pm;
    if (extra) {
        r->lo = end - extra;
        r->hi = end;
    }
}

/* Fills r with what a call releasing chunk mem may unmap. */
static void predict(void *mem, struct release *r)
{
    memset(r, 0, sizeof(*r));
    uintptr_t c = (uintptr_t)mem - 2 * SZ;
    size_t f = fsize(c);
    if (f & IS_MMAPPED) {
        r->lo = c - hdr(c)[0];
        r->hi = c + (f & ~(size_t)SIZE_BITS);
        return;
    }
    predict_free((uintptr_t)mem, r);
}

struct pending {
    uint64_t t1, t2;
};

static void begin(const struct release *r, struct pending *p, enum mrc_inval_cause cause)
{
    if (r->hi > r->lo)
        p->t1 = mrc_sink_begin(&mrc_monitor.sink, r->lo, r->hi - r->lo, cause);
    if (r->hi2 > r->lo2)
        p->t2 = mrc_sink_begin(&mrc_monitor.sink, r->lo2, r->hi2 - r->lo2, cause);
}

static void done(const struct release *r, const struct pending *p, enum mrc_inval_cause cause)
{
    int saved = errno;
    if (r->hi > r->lo)
        mrc_sink_done(&mrc_monitor.sink, p->t1, r->lo, r->hi - r->lo, cause);
    if (r->hi2 > r->lo2)
        mrc_sink_done(&mrc_monitor.sink, p->t2, r->lo2, r->hi2 - r->lo2, cause);
    /* The main heap's end is cheap to read again: whatever went beyond the prediction
     * (fastbin consolidation merging into the top) is invalidated now. */
    uintptr_t before = r->brk_before;
    if (before) {
        uintptr_t after = (uintptr_t)mrc_real.sbrk(0);
        uintptr_t covered = r->hi > r->lo ? r->lo : before;
        if (after < covered) {
            mrc_sink_changed(&mrc_monitor.sink, after, covered - after, MRC_INVAL_TRIM);
            if (!__atomic_exchange_n(&late_logged, 1, __ATOMIC_RELAXED))
                MRC_INFO("heap trim released more than predicted; invalidated after the fact");
        }
    }
    errno = saved;
}

/* Mirrors glibc's dynamic mmap threshold: freeing an mmapped chunk raises it, and the
 * trim threshold with it (malloc.c, __libc_free). */
static void track_threshold(void *mem)
{
    size_t f = fsize((uintptr_t)mem - 2 * SZ);
    if ((f & IS_MMAPPED) && !sh.no_dyn && f > sh.mmap_thr && f <= MMAP_THRESHOLD_MAX) {
        sh.mmap_thr = f & ~(size_t)SIZE_BITS;
        sh.trim = 2 * sh.mmap_thr;
    }
}

void mrc_on_free(void *p)
{
    if (!libc_ready())
        return;   /* only while resolving the real functions: a bounded leak */
    if (!p || !glibc || !watching()) {
        mrc_real.free(p);
        return;
    }
    struct release r;
    struct pending pd = { 0, 0 };
    predict(p, &r);
    enum mrc_inval_cause cause = (fsize((uintptr_t)p - 2 * SZ) & IS_MMAPPED) ? MRC_INVAL_FREE : MRC_INVAL_TRIM;
    track_threshold(p);
    begin(&r, &pd, cause);
    mrc_real.free(p);
    done(&r, &pd, cause);
}

void *mrc_on_realloc(void *p, size_t n)
{
    if (!libc_ready())
        return __libc_realloc(p, n);
    if (!p || !glibc || !watching())
        return mrc_real.realloc(p, n);
    /* Moving, shrinking or freeing: at most what freeing the chunk may release, and
     * for an mmapped chunk its mapping (glibc mremaps it). */
    struct release r;
    struct pending pd = { 0, 0 };
    predict(p, &r);
    enum mrc_inval_cause cause = (fsize((uintptr_t)p - 2 * SZ) & IS_MMAPPED) ? MRC_INVAL_FREE : MRC_INVAL_TRIM;
    begin(&r, &pd, cause);
    void *q = mrc_real.realloc(p, n);
    done(&r, &pd, cause);
    return q;
}

void *mrc_on_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return mrc_on_realloc(p, total);
}

/* The memalign family frees the unused head and tail of what it carves out, which can
 * trim the heap: check the main heap's end around the call. */
#define AROUND_ALIGNED(call)                                                       \
    do {                                                                           \
        struct release r;                                                          \
        struct pending pd = { 0, 0 };                                              \
        memset(&r, 0, sizeof(r));                                                  \
        if (glibc && watching())                                                   \
            r.brk_before = (uintptr_t)mrc_real.sbrk(0);                            \
        call;                                                                      \
        if (r.brk_before)                                                          \
            done(&r, &pd, MRC_INVAL_TRIM);                                         \
    } while (0)

int mrc_on_posix_memalign(void **out, size_t align, size_t size)
{
    int rc;
    if (!libc_ready()) {
        *out = __libc_memalign(align, size);
        return *out ? 0 : ENOMEM;
    }
    AROUND_ALIGNED(rc = mrc_real.posix_memalign(out, align, size));
    return rc;
}

void *mrc_on_aligned_alloc(size_t align, size_t size)
{
    void *p;
    if (!libc_ready())
        return __libc_memalign(align, size);
    AROUND_ALIGNED(p = mrc_real.aligned_alloc(align, size));
    return p;
}

void *mrc_on_memalign(size_t align, size_t size)
{
    void *p;
    if (!libc_ready())
        return __libc_memalign(align, size);
    AROUND_ALIGNED(p = mrc_real.memalign(align, size));
    return p;
}

void *mrc_on_valloc(size_t size)
{
    void *p;
    if (!libc_ready())
        return __libc_valloc(size);
    AROUND_ALIGNED(p = mrc_real.valloc(size));
    return p;
}

void *mrc_on_pvalloc(size_t size)
{
    void *p;
    if (!libc_ready())
        return __libc_pvalloc(size);
    AROUND_ALIGNED(p = mrc_real.pvalloc(size));
    return p;
}

int mrc_on_malloc_trim(size_t pad)
{
    if (!libc_ready())
        return 0;
    if (!glibc || !watching())
        return mrc_real.malloc_trim(pad);
    /* malloc_trim discards the pages of free chunks in every arena: free memory can hold
     * no registration the program still uses, but idle cached ones may lie there. Rare
     * enough to drop them all rather than walk glibc's bins. */
    uint64_t t = mrc_sink_begin(&mrc_monitor.sink, 0, UINT64_MAX, MRC_INVAL_TRIM);
    int rc = mrc_real.malloc_trim(pad);
    mrc_sink_done(&mrc_monitor.sink, t, 0, UINT64_MAX, MRC_INVAL_TRIM);
    return rc;
}

int mrc_on_mallopt(int param, int value)
{
    if (!libc_ready())
        return 0;
    int rc = mrc_real.mallopt(param, value);
    if (rc == 1) {
        switch (param) {
        case M_TRIM_THRESHOLD: sh.trim = (uint64_t)(unsigned)value; sh.no_dyn = 1; break;
        case M_TOP_PAD: sh.pad = (uint64_t)(unsigned)value; sh.no_dyn = 1; break;
        case M_MMAP_THRESHOLD: case M_MMAP_MAX: sh.no_dyn = 1; break;
        case M_MXFAST: sh.max_fast = 0; break;   /* rounding rules differ: assume none */
        default: break;
        }
    }
    return rc;
}
