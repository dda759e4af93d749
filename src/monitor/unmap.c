/* unmap.c - the munmap family: each call's doomed range, published to the sink before
 * the call and after it (mrc_sink_begin/done; the receiver decides what a registration
 * racing with the call means).
 * Invariants: while the sink is not armed each call is a load and a branch; nothing here
 * allocates or deregisters; errno is the real call's. MADV_FREE is not an unmap: the
 * kernel never discards pinned pages on MADV_FREE, so a registration stays valid. A call
 * is watched when the preload source is on or its libc entry point is patched (then both
 * paths arrive here once: mrc_real's pointer is the direct syscall). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "monitor/unmap.h"
#include "util/real.h"

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif

struct mrc_monitor mrc_monitor;

void mrc_monitor_init(const struct mrc_inval_sink *sink, uint64_t page_size, int preload)
{
    mrc_monitor.sink = *sink;
    mrc_monitor.page_size = page_size;
    mrc_monitor.preload = preload;
}

/* The fast path while nothing was ever registered: a load and a branch. */
static inline int watching(enum mrc_fn fn)
{
    return mrc_sink_armed(&mrc_monitor.sink) &&
           (mrc_monitor.preload || (__atomic_load_n(&mrc_monitor.patched, __ATOMIC_RELAXED) & (1u << fn)));
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

static uint64_t page_mask(void)
{
    return mrc_monitor.page_size - 1;
}

/* [addr, addr+len) widened to whole pages, as the kernel applies it. */
static void page_range(const void *addr, size_t len, uint64_t *start, uint64_t *plen)
{
    uint64_t m = page_mask(), a = (uintptr_t)addr & ~m;
    uint64_t end = (uintptr_t)addr + len;
    end = end < (uintptr_t)addr ? UINT64_MAX : end;
    end = (end + m) < end ? UINT64_MAX : ((end + m) & ~m);
    *start = a;
    *plen = end - a;
}

struct unmap_op {
    uint64_t start, len, ticket;
    enum mrc_inval_cause cause;
};

static void op_begin(struct unmap_op *op, const void *addr, size_t len, enum mrc_inval_cause cause)
{
    page_range(addr, len, &op->start, &op->len);
    op->cause = cause;
    op->ticket = mrc_sink_begin(&mrc_monitor.sink, op->start, op->len, cause);
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
    if (!watching(src))
        return mrc_real.munmap(addr, len);
    struct unmap_op op;
    op_begin(&op, addr, len, MRC_INVAL_MUNMAP);
    int rc = mrc_real.munmap(addr, len);
    op_done(&op);
    return rc;
}

void *mrc_on_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    /* MAP_FIXED replaces whatever was mapped there; MAP_FIXED_NOREPLACE fails instead. */
    if (!(flags & MAP_FIXED) || !watching(MRC_FN_MMAP))
        return mrc_real.mmap(addr, len, prot, flags, fd, off);
    struct unmap_op op;
    op_begin(&op, addr, len, MRC_INVAL_MMAP_FIXED);
    void *p = mrc_real.mmap(addr, len, prot, flags, fd, off);
    op_done(&op);
    return p;
}

void *mrc_on_mremap(void *old, size_t old_size, size_t new_size, int flags, void *new_addr)
{
    void (*step_aside)(void *, size_t, size_t, int) = __atomic_load_n(&mrc_monitor.before_mremap, __ATOMIC_ACQUIRE);
    if (step_aside)
        step_aside(old, old_size, new_size, flags);
    if (!watching(MRC_FN_MREMAP))
        return mrc_real.mremap(old, old_size, new_size, flags, new_addr);
    /* Moving (possible with MAYMOVE, certain with FIXED or DONTUNMAP) takes the pages
     * away from the old range; shrinking takes the tail; MREMAP_FIXED also replaces
     * the target range. Growing in place keeps every registered page. */
    struct unmap_op a = { .len = 0 }, b = { .len = 0 };
    if (old_size && (flags & MREMAP_MAYMOVE))
        op_begin(&a, old, old_size, MRC_INVAL_MREMAP);
    else if (new_size < old_size)
        op_begin(&a, (char *)old + new_size, old_size - new_size, MRC_INVAL_MREMAP);
    if (flags & MREMAP_FIXED)
        op_begin(&b, new_addr, new_size, MRC_INVAL_MREMAP);
    void *p = mrc_real.mremap(old, old_size, new_size, flags, new_addr);
    if (a.len)
        op_done(&a);
    if (b.len)
        op_done(&b);
    return p;
}

int mrc_on_madvise(void *addr, size_t len, int advice)
{
    if (!watching(MRC_FN_MADVISE) ||
        (advice != MADV_DONTNEED && advice != MADV_REMOVE && advice != MADV_DONTNEED_LOCKED))
        return mrc_real.madvise(addr, len, advice);
    struct unmap_op op;
    op_begin(&op, addr, len, MRC_INVAL_MADVISE);
    int rc = mrc_real.madvise(addr, len, advice);
    op_done(&op);
    return rc;
}

void *mrc_on_shmat(int id, const void *addr, int flags)
{
    struct shmid_ds ds;
    if (!watching(MRC_FN_SHMAT) || !(flags & SHM_REMAP) || !addr || shmctl(id, IPC_STAT, &ds) != 0)
        return mrc_real.shmat(id, addr, flags);
    struct unmap_op op;
    op_begin(&op, addr, ds.shm_segsz, MRC_INVAL_SHM);
    void *p = mrc_real.shmat(id, addr, flags);
    op_done(&op);
    return p;
}

/* The extent of the System V segment attached at addr: the mapping that starts there
 * in /proc/self/maps, with the mappings of the same file that follow it contiguously.
 * Read with raw read(2) into a stack buffer: no malloc, no stdio. 0 if not found. */
static uint64_t shm_extent(uintptr_t addr)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[8192];
    size_t have = 0;
    uintptr_t end = 0;
    unsigned long inode = 0;
    int found = 0, done = 0;
    while (!done) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = 0;
        char *line = buf, *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            unsigned long s, e, ino = 0, off;
            char perms[8];
            unsigned dmaj, dmin;
            if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &s, &e, perms, &off, &dmaj, &dmin, &ino) == 7) {
                if (!found && s == addr) {
                    found = 1;
                    end = e;
                    inode = ino;
                } else if (found) {
                    if (s == end && ino == inode)
                        end = e;
                    else {
                        done = 1;
                        break;
                    }
                }
            }
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
    }
    close(fd);
    return found ? end - addr : 0;
}

int mrc_on_shmdt(const void *addr)
{
    uint64_t len;
    if (!watching(MRC_FN_SHMDT) || !(len = shm_extent((uintptr_t)addr)))
        return mrc_real.shmdt(addr);
    struct unmap_op op;
    op_begin(&op, addr, len, MRC_INVAL_SHM);
    int rc = mrc_real.shmdt(addr);
    op_done(&op);
    return rc;
}

int mrc_on_brk(void *addr)
{
    char *cur;
    if (!watching(MRC_FN_BRK) || (cur = current_break()) == (void *)-1 || (char *)addr >= cur)
        return mrc_real.brk(addr);
    struct unmap_op op;
    op_begin(&op, addr, (size_t)(cur - (char *)addr), MRC_INVAL_BRK);
    int rc = mrc_real.brk(addr);
    op_done(&op);
    return rc;
}

void *mrc_monitor_sbrk_shrink(void *(*sbrk_fn)(intptr_t), intptr_t incr)
{
    char *cur;
    if (incr >= 0 || (cur = current_break()) == (void *)-1)
        return sbrk_fn(incr);
    struct unmap_op op;
    op_begin(&op, cur + incr, (size_t)-incr, MRC_INVAL_BRK);
    void *p = sbrk_fn(incr);
    op_done(&op);
    return p;
}

void *mrc_on_sbrk(intptr_t incr)
{
    /* With brk patched, libc's sbrk calls it directly: that path invalidates. */
    if (incr >= 0 || (__atomic_load_n(&mrc_monitor.patched, __ATOMIC_RELAXED) & (1u << MRC_FN_BRK)) ||
        !watching(MRC_FN_BRK))
        return mrc_real.sbrk(incr);
    return mrc_monitor_sbrk_shrink(mrc_real.sbrk, incr);
}
