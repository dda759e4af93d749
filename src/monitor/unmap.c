/* unmap.c - the munmap family and discarding advice: each call's range, whole pages of the
 * mappings it touches, published to the sink before the call and after it, and the
 * registry (maps.h) kept up to date with what each call maps and unmaps; a call the kernel
 * refuses for want of mappings while the userfaultfd source's watches hold VMAs is made
 * again once the runtime gave them back (mrc_monitor.maps_short).
 * Invariants: with the sink unarmed and the registry empty a call is a load and a branch;
 * nothing allocates or deregisters; errno is the real call's; advice is default-deny. */
#include <errno.h>
#include <stdint.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/uio.h>
#include <unistd.h>

#include "monitor/maps.h"
#include "monitor/unmap.h"
#include "util/procmaps.h"
#include "util/range.h"
#include "util/real.h"

struct mrc_monitor mrc_monitor;

/* The call each function ends in: libc's (mrc_real), or, for a call that arrived through
 * one of libmrcache's own exported functions that another library patched and the patch
 * source chained (patch_exports.c), that library's hook, set just before by
 * mrc_monitor_next. Per thread, and taken at the call: a hook the other library calls
 * in turn never sees it again. */
static __thread void *next_override;

void mrc_monitor_next(void *fn)
{
    next_override = fn;
}

static inline void *take_next(void *dflt)
{
    void *n = next_override;
    if (__builtin_expect(n == NULL, 1))
        return dflt;
    next_override = NULL;
    return n;
}
#define NEXT(f) ((__typeof__(mrc_real.f))take_next((void *)mrc_real.f))

int mrc_monitor_maps_again(void)
{
    if (errno != ENOMEM || !__atomic_load_n(&mrc_monitor.maps_held, __ATOMIC_RELAXED))
        return 0;
    int (*give_back)(void) = __atomic_load_n(&mrc_monitor.maps_short, __ATOMIC_ACQUIRE);
    int saved = errno, again = give_back && give_back();
    errno = saved;
    return again;
}

/* NEXT(f)(args), made once more if it failed (returned bad) for want of mappings that
 * our watches hold: the program must not run out of mappings sooner than without us.
 * Both calls go to the same function. */
#define NEXT_MAPPING(f, bad, ...)                                        \
    ({                                                                   \
        __typeof__(mrc_real.f) f_ = NEXT(f);                             \
        __typeof__(f_(__VA_ARGS__)) r_ = f_(__VA_ARGS__);                \
        if (r_ == (bad) && mrc_monitor_maps_again())                     \
            r_ = f_(__VA_ARGS__);                                        \
        r_;                                                              \
    })

void mrc_monitor_init(const struct mrc_inval_sink *sink, uint64_t page_size, int preload)
{
    mrc_monitor.sink = *sink;
    mrc_monitor.page_size = page_size;
    mrc_monitor.preload = preload;
}

/* The fast path while nothing was ever registered: a load and a branch. A call is
 * watched when the preload source is on or its libc entry point is patched (then both
 * paths arrive here once: mrc_real's pointer is the direct syscall); the registry is kept
 * whatever the sources, unless it is off. */
static inline int watching(enum mrc_fn fn)
{
    return mrc_sink_armed(&mrc_monitor.sink) &&
           (mrc_monitor.preload || (__atomic_load_n(&mrc_monitor.patched, __ATOMIC_RELAXED) & (1u << fn)));
}

/* For the calls only the preload hooks see (no libc entry point of theirs is patched). */
static inline int watching_plt(void)
{
    return mrc_sink_armed(&mrc_monitor.sink) && mrc_monitor.preload;
}

/* libc's idea of the break. Read directly rather than through sbrk(0), which calls brk
 * when it is still unknown: with brk patched that would land back here. */
extern void *__curbrk;
static char *current_break(void)
{
    char *cur = __curbrk;
    if (!cur)
        cur = mrc_real.sbrk(0);
    return cur;
}

/* The range the kernel changes for [addr, addr+len): whole pages of every mapping it
 * touches, and at least of min_psz (a call that maps hugetlb memory). */
static void kernel_range(const void *addr, size_t len, uint64_t min_psz, uint64_t *start, uint64_t *plen)
{
    uint64_t psz = mrc_monitor.page_size > min_psz ? mrc_monitor.page_size : min_psz;
    mrc_range_round((uintptr_t)addr, len, psz, start, plen);
    /* Widening can reach a mapping of larger pages: widen again until none does. */
    for (int i = 0; i < 4; i++) {
        uint64_t p = mrc_maps_page_size(*start, mrc_range_end(*start, *plen));
        if (p <= psz)
            break;
        psz = p;
        mrc_range_round(*start, *plen, psz, start, plen);
    }
}

static uint64_t round_up(uint64_t v, uint64_t psz)
{
    return (v + psz - 1) < v ? UINT64_MAX & ~(psz - 1) : (v + psz - 1) & ~(psz - 1);
}


struct unmap_op {
    uint64_t start, len, ticket;
    enum mrc_inval_cause cause;
};

static void op_begin_range(struct unmap_op *op, uint64_t start, uint64_t len, enum mrc_inval_cause cause)
{
    op->start = start;
    op->len = len;
    op->cause = cause;
    op->ticket = mrc_sink_begin(&mrc_monitor.sink, op->start, op->len, cause);
}

static void op_begin(struct unmap_op *op, const void *addr, size_t len, uint64_t min_psz, enum mrc_inval_cause cause)
{
    uint64_t start, plen;
    kernel_range(addr, len, min_psz, &start, &plen);
    op_begin_range(op, start, plen, cause);
}

static void op_done(const struct unmap_op *op)
{
    int saved = errno;
    mrc_sink_done(&mrc_monitor.sink, op->ticket, op->start, op->len, op->cause);
    errno = saved;
}

int mrc_on_munmap(void *addr, size_t len)
{
    return mrc_on_munmap_from(MRC_FN_MUNMAP, addr, len);
}

int mrc_on_munmap_from(enum mrc_fn src, void *addr, size_t len)
{
    int watch = watching(src), keep = mrc_maps_any();
    if (!watch && !keep)
        return NEXT_MAPPING(munmap, -1, addr, len);
    uint64_t start, plen, gen = mrc_maps_gen();
    kernel_range(addr, len, 0, &start, &plen);
    struct unmap_op op = { .len = 0 };
    if (watch) {
        op_begin_range(&op, start, plen, MRC_INVAL_MUNMAP);
        void (*aside)(uint64_t, uint64_t) = __atomic_load_n(&mrc_monitor.before_munmap, __ATOMIC_ACQUIRE);
        if (aside)
            aside(start, plen);
    }
    int rc = NEXT_MAPPING(munmap, -1, addr, len);
    if (rc == 0 && keep)
        mrc_maps_clear(start, mrc_range_end(start, plen), gen, -1);
    if (watch)
        op_done(&op);
    return rc;
}

void *mrc_on_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    /* MAP_FIXED replaces whatever was mapped there; MAP_FIXED_NOREPLACE fails instead. */
    int watch = (flags & MAP_FIXED) && watching(MRC_FN_MMAP);
    int keep = __atomic_load_n(&mrc_maps.on, __ATOMIC_RELAXED) && (mrc_mmap_special(flags) || mrc_maps_any());
    if (!watch && !keep)
        return NEXT_MAPPING(mmap, MAP_FAILED, addr, len, prot, flags, fd, off);
    struct mrc_map_attr a;
    int special = keep && mrc_maps_describe(flags, fd, (uint64_t)off, &a);
    uint64_t psz = special && a.page_shift ? (uint64_t)1 << a.page_shift : mrc_monitor.page_size;
    uint64_t gen = mrc_maps_gen();
    struct unmap_op op = { .len = 0 };
    if (watch)
        op_begin(&op, addr, len, psz, MRC_INVAL_MMAP_FIXED);
    void *p = NEXT_MAPPING(mmap, MAP_FAILED, addr, len, prot, flags, fd, off);
    /* Recorded before the second announcement: a registration after it sees the record. */
    if (p != MAP_FAILED && keep)
        mrc_maps_set((uintptr_t)p, mrc_range_end((uintptr_t)p, round_up(len, psz)), special ? &a : NULL, gen);
    if (watch)
        op_done(&op);
    return p;
}

void *mrc_on_mremap(void *old, size_t old_size, size_t new_size, int flags, void *new_addr)
{
    void (*step_aside)(void *, size_t, size_t, int) = __atomic_load_n(&mrc_monitor.before_mremap, __ATOMIC_ACQUIRE);
    if (step_aside)
        step_aside(old, old_size, new_size, flags);
    int watch = watching(MRC_FN_MREMAP), keep = mrc_maps_any();
    if (!watch && !keep)
        return NEXT_MAPPING(mremap, MAP_FAILED, old, old_size, new_size, flags, new_addr);
    /* The mapping moved keeps its page size and what it maps. */
    uint64_t rs = 0, re = 0;
    struct mrc_map_attr ra;
    int have = keep && mrc_maps_at((uintptr_t)old, &rs, &re, &ra);
    uint64_t psz = mrc_maps_page_size((uintptr_t)old, (uintptr_t)old + 1);
    uint64_t osz = round_up(old_size, psz), nsz = round_up(new_size, psz), gen = mrc_maps_gen();
    /* Moving (possible with MAYMOVE, certain with FIXED or DONTUNMAP) takes the pages
     * away from the old range; shrinking takes the tail; MREMAP_FIXED also replaces
     * the target range. Growing in place keeps every registered page. */
    struct unmap_op a = { .len = 0 }, b = { .len = 0 };
    if (watch && old_size && (flags & MREMAP_MAYMOVE))
        op_begin(&a, old, osz, psz, MRC_INVAL_MREMAP);
    else if (watch && nsz < osz)
        op_begin(&a, (char *)old + nsz, osz - nsz, psz, MRC_INVAL_MREMAP);
    if (watch && (flags & MREMAP_FIXED))
        op_begin(&b, new_addr, nsz, psz, MRC_INVAL_MREMAP);
    void *p = NEXT_MAPPING(mremap, MAP_FAILED, old, old_size, new_size, flags, new_addr);
    if (p != MAP_FAILED && keep) {
        uint64_t o = (uintptr_t)old, n = (uintptr_t)p;
        if (n != o && old_size && !(flags & MREMAP_DONTUNMAP))
            mrc_maps_clear(o, mrc_range_end(o, osz), gen, -1);
        else if (n == o && nsz < osz)
            mrc_maps_clear(o + nsz, mrc_range_end(o, osz), gen, -1);
        if (have) {
            if (ra.flags & (MRC_MAP_FILE | MRC_MAP_SYSV))
                ra.off += o - rs;
            mrc_maps_set(n, mrc_range_end(n, nsz), &ra, gen);
        } else if (n != o) {
            mrc_maps_set(n, mrc_range_end(n, nsz), NULL, gen);
        }
    }
    if (a.len)
        op_done(&a);
    if (b.len)
        op_done(&b);
    return p;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

/* Advice measured to keep pinned pages where they are (Linux 6.18). Everything else, an
 * advice this list does not know included, is taken to discard them: DONTNEED, REMOVE,
 * DONTNEED_LOCKED, HWPOISON, SOFT_OFFLINE, GUARD_INSTALL and GUARD_REMOVE (6.13). FREE
 * never discards pinned pages; PAGEOUT and COLD skip them; COLLAPSE fails with EAGAIN on
 * them; the rest only change how pages are faulted, merged, dumped or forked. */
static int advice_keeps_pages(int advice)
{
    switch (advice) {
    case MADV_NORMAL: case MADV_RANDOM: case MADV_SEQUENTIAL: case MADV_WILLNEED: case MADV_FREE:
    case MADV_DONTFORK: case MADV_DOFORK: case MADV_MERGEABLE: case MADV_UNMERGEABLE: case MADV_HUGEPAGE:
    case MADV_NOHUGEPAGE: case MADV_DONTDUMP: case MADV_DODUMP: case MADV_WIPEONFORK: case MADV_KEEPONFORK:
    case MADV_COLD: case MADV_PAGEOUT: case MADV_POPULATE_READ: case MADV_POPULATE_WRITE: case MADV_COLLAPSE:
        return 1;
    default:
        return 0;
    }
}

int mrc_on_madvise(void *addr, size_t len, int advice)
{
    if (__builtin_expect(advice == MADV_NOHUGEPAGE, 0))
        __atomic_store_n(&mrc_monitor.nohugepage, 1, __ATOMIC_RELAXED);
    if (advice_keeps_pages(advice) || !watching(MRC_FN_MADVISE))
        return NEXT_MAPPING(madvise, -1, addr, len, advice);
    struct unmap_op op;
    op_begin(&op, addr, len, 0, MRC_INVAL_MADVISE);
    int rc = NEXT_MAPPING(madvise, -1, addr, len, advice);
    op_done(&op);
    return rc;
}

/* Ranges announced one by one, up to this many; the rest are folded into the last. */
#define IOV_OPS 32

ssize_t mrc_on_process_madvise(int pidfd, const struct iovec *iov, size_t n, int advice, unsigned flags)
{
    /* Any pidfd: on our own the kernel takes every advice; for another process's, the
     * same addresses here are invalidated for nothing, which is harmless. */
    if (advice_keeps_pages(advice) || !watching_plt() || !iov)
        return NEXT(process_madvise)(pidfd, iov, n, advice, flags);
    struct unmap_op op[IOV_OPS];
    unsigned k = 0;
    for (size_t i = 0; i < n && i < IOV_MAX; i++) {   /* the kernel refuses more */
        uint64_t s, l;
        if (!iov[i].iov_len)
            continue;
        kernel_range(iov[i].iov_base, iov[i].iov_len, 0, &s, &l);
        if (k == IOV_OPS) {
            /* Widen the last one (each is announced below, once). */
            mrc_range_union(&op[k - 1].start, &op[k - 1].len, s, l);
            continue;
        }
        op[k++] = (struct unmap_op){ s, l, 0, MRC_INVAL_MADVISE };
    }
    for (unsigned i = 0; i < k; i++)
        op[i].ticket = mrc_sink_begin(&mrc_monitor.sink, op[i].start, op[i].len, op[i].cause);
    ssize_t rc = NEXT(process_madvise)(pidfd, iov, n, advice, flags);
    for (unsigned i = 0; i < k; i++)
        op_done(&op[i]);
    return rc;
}

int mrc_on_remap_file_pages(void *addr, size_t size, int prot, size_t pgoff, int flags)
{
    /* Emulated by the kernel as an mmap of the same file over the range: its pages are
     * replaced by those of another offset. */
    int watch = watching_plt(), keep = mrc_maps_any();
    if (!watch && !keep)
        return NEXT(remap_file_pages)(addr, size, prot, pgoff, flags);
    uint64_t start, plen, rs, re, gen = mrc_maps_gen();
    kernel_range(addr, size, 0, &start, &plen);
    struct mrc_map_attr ra;
    int have = keep && mrc_maps_at(start, &rs, &re, &ra);
    struct unmap_op op = { .len = 0 };
    if (watch)
        op_begin_range(&op, start, plen, MRC_INVAL_MMAP_FIXED);
    int rc = NEXT(remap_file_pages)(addr, size, prot, pgoff, flags);
    if (rc == 0 && have && (ra.flags & MRC_MAP_FILE)) {
        ra.off = (uint64_t)pgoff * mrc_monitor.page_size;
        mrc_maps_set(start, mrc_range_end(start, plen), &ra, gen);
    }
    if (watch)
        op_done(&op);
    return rc;
}

void *mrc_on_shmat(int id, const void *addr, int flags)
{
    int watch = (flags & SHM_REMAP) && addr && watching(MRC_FN_SHMAT);
    int keep = __atomic_load_n(&mrc_maps.on, __ATOMIC_RELAXED);
    if (!watch && !keep)
        return NEXT_MAPPING(shmat, (void *)-1, id, addr, flags);
    int saved = errno;
    struct shmid_ds ds;
    int stat_ok = shmctl(id, IPC_STAT, &ds) == 0;
    errno = saved;
    /* The segment's page size is not known before it is attached (shm_segsz says 4096
     * for a SHM_HUGETLB segment attached over a whole huge page): the largest there is. */
    uint32_t huge = mrc_procmaps_huge_shift_max();
    uint64_t psz = huge ? (uint64_t)1 << huge : mrc_monitor.page_size, gen = mrc_maps_gen();
    struct unmap_op op = { .len = 0 };
    if (watch && stat_ok)
        op_begin(&op, addr, ds.shm_segsz, psz, MRC_INVAL_SHM);
    void *p = NEXT_MAPPING(shmat, (void *)-1, id, addr, flags);
    if (p != (void *)-1 && keep) {
        uint64_t end = 0, sid = 0;
        uint32_t shift = 0;
        if (!mrc_procmaps_read_sysv((uintptr_t)p, &end, &sid, &shift) && stat_ok)
            end = (uintptr_t)p + round_up(ds.shm_segsz, mrc_monitor.page_size);
        struct mrc_map_attr a = { MRC_MAP_SHARED | MRC_MAP_SYSV, shift, 0, (uint64_t)id, 0 };
        if (end)
            mrc_maps_set((uintptr_t)p, end, &a, gen);
    }
    if (op.len)
        op_done(&op);
    return p;
}

/* The span shmdt(addr) detaches: every piece of the attachment at addr (the mappings of
 * its segment at the offsets an attachment there would have, gaps or not) up to the
 * segment's size in its pages. 0 if addr starts no attachment. */
static uint64_t shm_span(uintptr_t addr, uint64_t *id, uint64_t *psz)
{
    uint64_t rs, end;
    struct mrc_map_attr a;
    uint32_t shift;
    if (mrc_maps_at(addr, &rs, &end, &a) && rs == addr && (a.flags & MRC_MAP_SYSV)) {
        *id = a.ino;
        shift = a.page_shift;
    } else if (!mrc_procmaps_read_sysv(addr, &end, id, &shift)) {
        return 0;
    }
    *psz = shift ? (uint64_t)1 << shift : mrc_monitor.page_size;
    int saved = errno;
    struct shmid_ds ds;
    uint64_t limit = UINT64_MAX;
    if (shmctl((int)*id, IPC_STAT, &ds) == 0) {
        limit = mrc_range_end(addr, round_up(ds.shm_segsz, *psz));
        end = end > limit ? end : limit;
    }
    errno = saved;
    uint64_t more = mrc_maps_sysv_end(addr, limit, *id);
    end = more > end ? more : end;
    return end - addr;
}

int mrc_on_shmdt(const void *addr)
{
    int watch = watching(MRC_FN_SHMDT), keep = mrc_maps_any();
    uint64_t len, id = 0, psz = mrc_monitor.page_size, gen = mrc_maps_gen();
    if ((!watch && !keep) || !(len = shm_span((uintptr_t)addr, &id, &psz)))
        return NEXT(shmdt)(addr);
    struct unmap_op op = { .len = 0 };
    if (watch)
        op_begin(&op, addr, len, psz, MRC_INVAL_SHM);
    int rc = NEXT(shmdt)(addr);
    if (rc == 0 && keep)
        mrc_maps_clear((uintptr_t)addr, mrc_range_end((uintptr_t)addr, len), gen, (int64_t)id);
    if (watch)
        op_done(&op);
    return rc;
}

int mrc_on_brk(void *addr)
{
    char *cur;
    if (!watching(MRC_FN_BRK) || (cur = current_break()) == (void *)-1 || (char *)addr >= cur)
        return NEXT_MAPPING(brk, -1, addr);
    struct unmap_op op;
    op_begin(&op, addr, (size_t)(cur - (char *)addr), 0, MRC_INVAL_BRK);
    int rc = NEXT_MAPPING(brk, -1, addr);
    op_done(&op);
    return rc;
}

void *mrc_monitor_sbrk_shrink(void *(*sbrk_fn)(intptr_t), intptr_t incr)
{
    char *cur;
    if (incr >= 0 || (cur = current_break()) == (void *)-1)
        return sbrk_fn(incr);
    struct unmap_op op;
    op_begin(&op, cur + incr, (size_t)-incr, 0, MRC_INVAL_BRK);
    void *p = sbrk_fn(incr);
    op_done(&op);
    return p;
}

void *mrc_on_sbrk(intptr_t incr)
{
    /* With brk patched, libc's sbrk calls it directly: that path invalidates. Not a call
     * chained to another library's sbrk hook, which may make the system call itself. */
    if (incr >= 0 || !watching(MRC_FN_BRK) ||
        ((__atomic_load_n(&mrc_monitor.patched, __ATOMIC_RELAXED) & (1u << MRC_FN_BRK)) && !next_override))
        return NEXT(sbrk)(incr);
    return mrc_monitor_sbrk_shrink(NEXT(sbrk), incr);
}
