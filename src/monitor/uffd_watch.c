/* uffd_watch.c - what the userfaultfd source registers with the kernel: each live
 * registration's pages from its watch to its unwatch, counted per page (uffd_ranges), so
 * that pages leave when the last registration needing them goes (their VMAs merge); and
 * stepping aside where the program needs memory unwatched (an mremap moving or growing
 * it, its own UFFDIO_REGISTER), and out of the way of a munmap the other sources saw.
 * Invariants: every UFFDIO_(UN)REGISTER and count change is made under mrc_uffd_lock;
 * UFFDIO_UNREGISTER (the address space's write lock) runs only at a deregistration or
 * just before the program's mremap, munmap or UFFDIO_REGISTER, which take that lock
 * themselves, and in a munmap hook only with mrc_uffd_lock free; a refused watch is
 * counted too (as not registered), so that every watch and its unwatch match. */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "monitor/uffd.h"
#include "monitor/uffd_priv.h"
#include "monitor/uffd_ranges.h"
#include "monitor/unmap.h"
#include "util/real.h"
#include "util/sys.h"

#define HUGE_2M (2ull << 20)
#define UNREG_TRIES 64   /* ioctls one unwatch may spend on ranges the kernel refuses */
#define ORPHANS 8

static struct mrc_uffd_ranges ranges;

/* Ranges a raw mremap moved a watched mapping to (our registration went with it, no
 * watch counts it), settled at the next change under the lock. More are forgotten:
 * they stay registered, costing an event per unmap, as any unknown watch would. */
static struct { uint64_t start, end; } orphans[ORPHANS];
static unsigned norphans;

/* Registering part of a VMA splits it (at most two more VMAs per range). The process may
 * reach half of vm.max_map_count through our splits, never more, so that its own mmaps
 * never fail because of us. The estimate grows by two per registration and shrinks by
 * two per range given back; past the limit the maps are counted again, once per 1024
 * refusals, and after the program ran short of mappings (it maps more than we count).
 * Plain numbers: touched only under mrc_uffd_lock, but at start (before the descriptor
 * is published, which anything else that touches them waits for) and in a forked
 * child; map_limit is read anywhere (set before any watch). */
static long map_limit;
static long map_estimate;
static unsigned long map_refusals;

/* ---- the kernel ---- */

int mrc_uffd_register_raw(int f, uint64_t start, uint64_t end)
{
    struct uffdio_register r = { .range = { start, end - start }, .mode = UFFDIO_REGISTER_MODE_WP };
    return mrc_sys_ioctl(f, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

static int unregister_raw(int f, uint64_t start, uint64_t end)
{
    struct uffdio_range r = { start, end - start };
    return mrc_sys_ioctl(f, UFFDIO_UNREGISTER, &r) == 0 ? 0 : errno;
}

/* Under the lock: our descriptor, checked, or -1 (then lost). */
static int current_fd(void)
{
    int f = __atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE);
    if (f < 0)
        return -1;
    if (!mrc_uffd_fd_ours(f)) {
        mrc_uffd_lose("its descriptor was closed or replaced by a call libmrcache does not see");
        return -1;
    }
    return f;
}

#define FD_UNCHECKED (-2)

struct unreg {
    int fd;         /* FD_UNCHECKED: current_fd() at the first ioctl */
    int tries;
};

/* Under the lock: the descriptor u's ioctls use, or -1. Called from inside a walk of the
 * counts: a loss found here changes none of them (mrc_uffd_lose clears
 * mrc_uffd_watching before anything it calls could come back to them). */
static int unreg_fd(struct unreg *u)
{
    if (u->fd == FD_UNCHECKED)
        u->fd = current_fd();
    return u->fd;
}

/* Our registration leaves [start, end), which no live registration needs. The kernel
 * refuses (EINVAL) a range holding a mapping it cannot watch (a file mapped there since,
 * another userfaultfd's memory, a range with no mapping left) or starting inside a huge
 * page: then the huge pages around it are tried if no watch needs their other pages,
 * then halves, within the call's budget of ioctls. What stays refused stays registered,
 * which costs an event per unmap and nothing else. */
static void unregister_run(struct unreg *u, uint64_t start, uint64_t end)
{
    if (unreg_fd(u) < 0 || u->tries-- <= 0)
        return;
    int err = unregister_raw(u->fd, start, end);
    if (!err && (map_estimate -= 2) < 0)
        map_estimate = 0;
    if (err != EINVAL)
        return;
    uint64_t hs = start & ~(HUGE_2M - 1), he = (end + HUGE_2M - 1) & ~(HUGE_2M - 1);
    if ((hs != start || he != end) && he > hs && !mrc_uffd_ranges_used(&ranges, hs, start) &&
        !mrc_uffd_ranges_used(&ranges, end, he) && u->tries-- > 0 && !unregister_raw(u->fd, hs, he))
        return;
    uint64_t pg = mrc_monitor.page_size, pages = (end - start) / pg;
    if (pages < 2)
        return;
    uint64_t mid = start + pages / 2 * pg;
    unregister_run(u, start, mid);
    unregister_run(u, mid, end);
}

static void unregister_fn(void *arg, uint64_t start, uint64_t end)
{
    unregister_run(arg, start, end);
}

/* Under the lock: the orphans' pages no watch counts leave our registration; the
 * counted ones are ours again. */
static void settle_orphans(struct unreg *u)
{
    for (unsigned i = 0; i < norphans; i++)
        mrc_uffd_ranges_adopt(&ranges, orphans[i].start, orphans[i].end, unregister_fn, u);
    norphans = 0;
}

/* [addr, addr+len) widened to whole pages; 0 for an empty range. */
static int page_span(uint64_t addr, uint64_t len, uint64_t *start, uint64_t *end)
{
    uint64_t m = mrc_monitor.page_size - 1, e = addr + len;
    *start = addr & ~m;
    *end = e < addr || e + m < e ? ~m : (e + m) & ~m;
    return len && *end > *start;
}

/* ---- the budget ---- */

/* VMAs of this process now (lines of /proc/self/maps), or -1. */
static long count_maps(void)
{
    int f = mrc_sys_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (f < 0)
        return -1;
    char buf[4096];
    long lines = 0;
    ssize_t n;
    while ((n = mrc_sys_read(f, buf, sizeof(buf))) > 0)
        for (char *q = buf; (q = memchr(q, '\n', (size_t)(buf + n - q))); q++)
            lines++;
    mrc_sys_close(f);
    return n < 0 ? -1 : lines;
}

/* Under the lock. */
static int budget_take(void)
{
    if ((map_estimate += 2) <= map_limit)
        return 1;
    map_estimate -= 2;
    if (map_refusals++ % 1024 != 0)
        return 0;
    long n = count_maps();
    if (n < 0)
        return 0;
    map_estimate = n + 2;
    return n + 2 <= map_limit;
}

static long read_max_map_count(void)
{
    char buf[32];
    int f = mrc_sys_open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC, 0);
    ssize_t n = f < 0 ? -1 : mrc_sys_read(f, buf, sizeof(buf) - 1);
    if (f >= 0)
        mrc_sys_close(f);
    if (n <= 0)
        return 65530;   /* the kernel's default */
    buf[n] = 0;
    long v = strtol(buf, NULL, 10);
    return v > 0 ? v : 65530;
}

void mrc_uffd_watch_init(void)
{
    map_limit = read_max_map_count() / 2;
    long n = count_maps();
    map_estimate = n > 0 ? n : 0;
}

/* ---- watching ---- */

void mrc_uffd_watch(uint64_t addr, uint64_t len)
{
    uint64_t start, end;
    if (!__atomic_load_n(&mrc_uffd_watching, __ATOMIC_ACQUIRE) || !page_span(addr, len, &start, &end))
        return;
    int saved = errno, err = 0;
    pthread_mutex_lock(&mrc_uffd_lock);
    struct unreg u = { current_fd(), UNREG_TRIES };
    if (u.fd >= 0) {
        settle_orphans(&u);
        err = budget_take() ? mrc_uffd_register_raw(u.fd, start, end) : ENOSPC;
        /* hugetlbfs takes whole huge pages only. */
        if (err == EINVAL && ((start | end) & (HUGE_2M - 1)) && end <= ~(HUGE_2M - 1))
            err = mrc_uffd_register_raw(u.fd, start & ~(HUGE_2M - 1), (end + HUGE_2M - 1) & ~(HUGE_2M - 1));
        if (err && err != ENOSPC)
            map_estimate -= 2;   /* nothing was split */
        if (!err)
            __atomic_add_fetch(&mrc_monitor.maps_held, 1, __ATOMIC_RELAXED);
        mrc_uffd_ranges_add(&ranges, start, end, err == 0);
    }
    pthread_mutex_unlock(&mrc_uffd_lock);
    if (err)
        mrc_uffd_unwatched(err);
    errno = saved;
}

void mrc_uffd_unwatch(uint64_t addr, uint64_t len)
{
    uint64_t start, end;
    if (!__atomic_load_n(&mrc_uffd_watching, __ATOMIC_ACQUIRE) || !page_span(addr, len, &start, &end))
        return;
    int saved = errno;
    pthread_mutex_lock(&mrc_uffd_lock);
    /* The descriptor is checked (an fstat) only once a page is to leave our
     * registration: pages other registrations still need, or that were never watched,
     * make no ioctl. Counts changed before a loss is found there no longer matter: a
     * lost source never comes back on. */
    struct unreg u = { FD_UNCHECKED, UNREG_TRIES };
    if (__atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE) >= 0) {
        settle_orphans(&u);
        mrc_uffd_ranges_sub(&ranges, start, end, unregister_fn, &u);
    }
    pthread_mutex_unlock(&mrc_uffd_lock);
    errno = saved;
}

/* ---- the handler's news ---- */

void mrc_uffd_watch_gone(uint64_t start, uint64_t end)
{
    pthread_mutex_lock(&mrc_uffd_lock);
    mrc_uffd_ranges_clear(&ranges, start, end, NULL, NULL);
    for (unsigned i = 0; i < norphans;)
        if (start <= orphans[i].start && orphans[i].end <= end)
            orphans[i] = orphans[--norphans];
        else
            i++;
    pthread_mutex_unlock(&mrc_uffd_lock);
}

int mrc_uffd_watch_needed(uint64_t start, uint64_t end)
{
    pthread_mutex_lock(&mrc_uffd_lock);
    int needed = mrc_uffd_ranges_used(&ranges, start, end);
    pthread_mutex_unlock(&mrc_uffd_lock);
    return needed;
}

void mrc_uffd_watch_moved(uint64_t start, uint64_t end)
{
    pthread_mutex_lock(&mrc_uffd_lock);
    if (norphans < ORPHANS)
        orphans[norphans++].start = start, orphans[norphans - 1].end = end;
    pthread_mutex_unlock(&mrc_uffd_lock);
}

/* A mapping call needs at most this many more VMAs (an mremap of a piece between two). */
#define MAPS_MARGIN 8

int mrc_uffd_maps_full(void)
{
    long n = count_maps();
    return n < 0 || n + MAPS_MARGIN >= 2 * map_limit;
}

void mrc_uffd_watch_recount(void)
{
    pthread_mutex_lock(&mrc_uffd_lock);
    map_estimate = map_limit;   /* the next watch finds no room and counts */
    map_refusals = 0;
    pthread_mutex_unlock(&mrc_uffd_lock);
}

void mrc_uffd_watch_reset(void)
{
    __atomic_store_n(&mrc_monitor.maps_held, 0, __ATOMIC_RELAXED);
    mrc_uffd_ranges_reset(&ranges);
    norphans = 0;
    map_refusals = 0;
}

/* ---- stepping aside ---- */

/* Under the lock: our registration leaves [start, end) now, whatever counts it; returns
 * whether a live registration needed those pages (its entry must then be invalidated:
 * its unmaps would go unseen). */
static int step_aside(struct unreg *u, uint64_t start, uint64_t end)
{
    settle_orphans(u);
    return mrc_uffd_ranges_clear(&ranges, start, end, unregister_fn, u);
}

void mrc_uffd_before_mremap(void *old, size_t old_size, size_t new_size, int flags)
{
    uint64_t start, end;
    /* Shrinking in place works across VMAs; growing, MREMAP_FIXED and MREMAP_DONTUNMAP
     * need the source to be one mapping (EFAULT otherwise), and a move would take our
     * registration along to the new address. */
    if ((new_size <= old_size && !(flags & (MREMAP_FIXED | MREMAP_DONTUNMAP))) ||
        !page_span((uintptr_t)old, old_size, &start, &end))
        return;
    int saved = errno, needed = 0;
    pthread_mutex_lock(&mrc_uffd_lock);
    /* Most mremaps touch nothing of ours (glibc's realloc of a large chunk grows one):
     * with no page counted and no orphan to settle, step_aside would make no ioctl, so
     * the descriptor's fstat is not worth paying either. */
    if (norphans || mrc_uffd_ranges_used(&ranges, start, end)) {
        struct unreg u = { current_fd(), UNREG_TRIES };
        if (u.fd >= 0)
            needed = step_aside(&u, start, end);
    }
    pthread_mutex_unlock(&mrc_uffd_lock);
    /* A move invalidates the old range anyway; growing in place would keep entries
     * whose pages are no longer watched. */
    if (needed)
        mrc_sink_changed(&mrc_monitor.sink, start, end - start, MRC_INVAL_MREMAP);
    errno = saved;
}

/* A munmap the other sources have seen (their invalidation is published): nothing
 * cached over the range is handed out again, so the watch has nothing left to report
 * there, and reporting it would cost the caller a wait in the kernel for the handler's
 * read, two cross-CPU wake-ups (make uffd-bench). UFFDIO_UNREGISTER takes the address
 * space's write lock, which the munmap takes right after anyway; our lock only if free
 * (a watch may hold it while the kernel makes it wait): else the event reports it, as
 * it would any unmap. */
void mrc_uffd_before_munmap(uint64_t addr, uint64_t len)
{
    uint64_t start, end;
    if (!page_span(addr, len, &start, &end) || pthread_mutex_trylock(&mrc_uffd_lock) != 0)
        return;
    int saved = errno;
    if (norphans || mrc_uffd_ranges_used(&ranges, start, end)) {
        struct unreg u = { current_fd(), UNREG_TRIES };
        if (u.fd >= 0)
            step_aside(&u, start, end);
    }
    pthread_mutex_unlock(&mrc_uffd_lock);
    errno = saved;
}

/* The program's struct uffdio_register, read as the kernel reads it: a bad pointer must
 * come back as the call's EFAULT, never crash the program here. 1 if read. */
static int read_register_arg(const void *arg, struct uffdio_register *r)
{
    struct iovec local = { r, sizeof(*r) }, remote = { (void *)(uintptr_t)arg, sizeof(*r) };
    long n = mrc_sys_process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n == (long)sizeof(*r))
        return 1;
    if (n < 0 && errno != EFAULT && arg) {
        memcpy(r, arg, sizeof(*r));   /* the call is refused (seccomp): the program's pointer */
        return 1;
    }
    return 0;
}

int mrc_uffd_register_ioctl(int f, void *arg)
{
    int (*real)(int, unsigned long, ...) = mrc_real.ioctl;
    struct uffdio_register r;
    uint64_t start, end;
    int cur = __atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE);
    if (!real || cur < 0 || f == cur || !read_register_arg(arg, &r) ||
        !page_span(r.range.start, r.range.len, &start, &end))
        return real ? real(f, UFFDIO_REGISTER, arg) : mrc_sys_ioctl(f, UFFDIO_REGISTER, arg);
    int saved = errno;
    /* Invalidated first: from here on nothing cached over the range may be handed out,
     * since its unmaps are no longer reported. */
    mrc_sink_changed(&mrc_monitor.sink, start, end - start, MRC_INVAL_SOURCE_LOST);
    pthread_mutex_lock(&mrc_uffd_lock);
    struct unreg u = { current_fd(), UNREG_TRIES };
    if (u.fd >= 0) {
        step_aside(&u, start, end);
        /* And whatever of ours the counts do not know of (a watch left behind by a race). */
        unregister_raw(u.fd, start, end);
    }
    /* Under the lock: no watch of ours can come between and make the program's call fail. */
    errno = saved;
    int rc = real(f, UFFDIO_REGISTER, arg);
    saved = errno;
    pthread_mutex_unlock(&mrc_uffd_lock);
    errno = saved;
    return rc;
}
