/* uffd.c - userfaultfd events over the registered ranges. Each registration's pages are
 * registered with one userfaultfd, in write-protect mode, before the NIC pins them; the
 * kernel then reports every munmap, MAP_FIXED replacement, mremap shrink and brk shrink
 * (UNMAP), madvise discard (REMOVE) and mremap move (REMAP) touching them, whoever makes
 * the system call. A handler thread reads the events and publishes their ranges.
 * Invariants: write-protect mode only, and nothing here write-protects a page, so no page
 * fault is ever delivered (kernel-mode accesses, the NIC's own pinning among them, never
 * meet the userfaultfd); the handler blocks every signal, never allocates, never logs,
 * takes no lock but its sink's (the cache's, held by nobody across an unmap or a wait),
 * and reads events before anything that could block: the unmapping thread, which may hold
 * glibc's arena lock, waits for that read. Ranges are never unregistered (see
 * mrc_uffd_watch). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "monitor/uffd.h"
#include "monitor/unmap.h"
#include "util/log.h"
#include "util/rawmem.h"
#include "util/stats.h"
#include "util/thread.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1   /* Linux 5.11; the system headers may predate it */
#endif

#define FEATURES (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)
#define HUGE_2M (2ull << 20)

enum { OFF = -1, UNSTARTED = 0, ON = 1 };

unsigned mrc_uffd_busy;
static int state = OFF;
int mrc_uffd_watching;   /* state == ON, for the inline check (uffd.h) */
static int loud;                /* asked for by name: failing to start is a warning */
static int fd = -1;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

/* Registering part of a VMA splits it (at most two more VMAs per range). The process may
 * reach half of vm.max_map_count through our splits, never more, so that its own mmaps
 * never fail because of us. The estimate only grows (unmaps and merges are not seen
 * here); past the limit the maps are counted again, once per 1024 refusals. */
static long map_limit;
static long map_estimate;
static unsigned long map_refusals;

/* The self-test's range while it runs, and whether an event covered it. */
static uintptr_t probe_lo, probe_hi;
static int probe_seen;

#define SAY(...) (loud ? MRC_WARN(__VA_ARGS__) : MRC_INFO(__VA_ARGS__))

/* ---- waiting for the handler ---- */

void mrc_uffd_quiesce_wait(void)
{
    int saved = errno;
    unsigned v;
    while ((v = __atomic_load_n(&mrc_uffd_busy, __ATOMIC_ACQUIRE)) != 0) {
        if (v == 1 && !__atomic_compare_exchange_n(&mrc_uffd_busy, &v, 2, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
            continue;
        syscall(SYS_futex, &mrc_uffd_busy, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    }
    errno = saved;
}

/* ---- the handler ---- */

static void invalidate(uint64_t start, uint64_t end, enum mrc_inval_cause cause)
{
    if (end <= start)
        return;
    if (start < __atomic_load_n(&probe_hi, __ATOMIC_ACQUIRE) && probe_lo < end)
        __atomic_store_n(&probe_seen, 1, __ATOMIC_RELAXED);
    /* This thread's own counter block tells how many entries the event removed: those
     * no other source had invalidated before the kernel reported the unmap. */
    struct mrc_stats_block *b = mrc_stats_block();
    uint64_t before = __atomic_load_n(&b->v[MRC_STAT_INVALIDATED], __ATOMIC_RELAXED);
    mrc_sink_changed(&mrc_monitor.sink, start, end - start, cause);
    uint64_t n = __atomic_load_n(&b->v[MRC_STAT_INVALIDATED], __ATOMIC_RELAXED) - before;
    if (n)
        mrc_stat_add(MRC_STAT_UFFD_CAUGHT, n);
}

/* A page fault. None is expected: nothing write-protects a page of ours. If one came (the
 * program found our descriptor and used it), a thread would wait for us forever, so the
 * protection is lifted, which also wakes it. */
static void answer_fault(int ufd, const struct uffd_msg *m)
{
    uint64_t pg = mrc_monitor.page_size;
    struct uffdio_writeprotect wp = { .range = { m->arg.pagefault.address & ~(pg - 1), pg }, .mode = 0 };
    mrc_stat_add(MRC_STAT_UFFD_FAULTS, 1);     /* before the thread resumes and may look */
    if (ioctl(ufd, UFFDIO_WRITEPROTECT, &wp) != 0)
        ioctl(ufd, UFFDIO_WAKE, &wp.range);
}

static void handle(int ufd, const struct uffd_msg *m)
{
    switch (m->event) {
    case UFFD_EVENT_UNMAP:
        mrc_stat_add(MRC_STAT_UFFD_EVENTS, 1);
        invalidate(m->arg.remove.start, m->arg.remove.end, MRC_INVAL_MUNMAP);
        break;
    case UFFD_EVENT_REMOVE:
        /* Sent before the pages are discarded; MADV_FREE sends it too (an invalidation
         * it did not need: the event does not say which advice it was). */
        mrc_stat_add(MRC_STAT_UFFD_EVENTS, 1);
        invalidate(m->arg.remove.start, m->arg.remove.end, MRC_INVAL_MADVISE);
        break;
    case UFFD_EVENT_REMAP:
        /* Moved: the pages left the old range (the new one stays watched). */
        mrc_stat_add(MRC_STAT_UFFD_EVENTS, 1);
        invalidate(m->arg.remap.from, m->arg.remap.from + m->arg.remap.len, MRC_INVAL_MREMAP);
        break;
    case UFFD_EVENT_PAGEFAULT:
        answer_fault(ufd, m);
        break;
    default:
        break;
    }
}

static void *handler_main(void *arg)
{
    int ufd = (int)(intptr_t)arg;
    struct uffd_msg msg[32];
    struct pollfd p = { .fd = ufd, .events = POLLIN };
    (void)mrc_stats_block();   /* this thread's counters now, not while a thread waits on us */
    for (;;) {
        if (poll(&p, 1, -1) < 0)
            continue;
        if (p.revents & (POLLERR | POLLNVAL)) {
            /* The program closed our descriptor (a daemon closing every fd): the kernel
             * dropped the watches with it, and no thread can wait on it. Watch no more:
             * the number may come back as another file. */
            __atomic_store_n(&state, OFF, __ATOMIC_RELEASE);
            __atomic_store_n(&mrc_uffd_watching, 0, __ATOMIC_RELEASE);
            break;
        }
        /* Busy before the read: the unmapping thread resumes at the read, and must not
         * find the old entry until it is invalidated. */
        __atomic_store_n(&mrc_uffd_busy, 1, __ATOMIC_SEQ_CST);
        ssize_t n = read(ufd, msg, sizeof(msg));
        for (ssize_t i = 0; i < n / (ssize_t)sizeof(msg[0]); i++)
            handle(ufd, &msg[i]);
        if (__atomic_exchange_n(&mrc_uffd_busy, 0, __ATOMIC_RELEASE) == 2)
            syscall(SYS_futex, &mrc_uffd_busy, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
    return NULL;
}

/* ---- watching ---- */

/* VMAs of this process now (lines of /proc/self/maps), or -1. */
static long count_maps(void)
{
    int f = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return -1;
    char buf[4096];
    long lines = 0;
    ssize_t n;
    while ((n = read(f, buf, sizeof(buf))) > 0)
        for (char *q = buf; (q = memchr(q, '\n', (size_t)(buf + n - q))); q++)
            lines++;
    close(f);
    return n < 0 ? -1 : lines;
}

static int budget_take(void)
{
    if (__atomic_add_fetch(&map_estimate, 2, __ATOMIC_RELAXED) <= map_limit)
        return 1;
    __atomic_sub_fetch(&map_estimate, 2, __ATOMIC_RELAXED);
    if (__atomic_fetch_add(&map_refusals, 1, __ATOMIC_RELAXED) % 1024 != 0)
        return 0;
    long n = count_maps();
    if (n < 0)
        return 0;
    __atomic_store_n(&map_estimate, n + 2, __ATOMIC_RELAXED);
    return n + 2 <= map_limit;
}

/* 0 or an errno value. */
static int reg(uint64_t start, uint64_t end)
{
    struct uffdio_register r = { .range = { start, end - start }, .mode = UFFDIO_REGISTER_MODE_WP };
    return ioctl(fd, UFFDIO_REGISTER, &r) == 0 ? 0 : errno;
}

static void unwatched(int err)
{
    static int said[3];
    int k = err == EBUSY ? 0 : err == ENOSPC ? 1 : 2;
    mrc_stat_add(MRC_STAT_UFFD_UNWATCHED, 1);
    if (__atomic_exchange_n(&said[k], 1, __ATOMIC_RELAXED))
        return;
    /* Said once per reason; a warning if no other source watches that memory. */
    int alone = !mrc_monitor.preload && !__atomic_load_n(&mrc_monitor.patched, __ATOMIC_RELAXED);
    mrc_log(alone ? MRC_LOG_WARN : MRC_LOG_INFO,
            "uffd: a registration is not watched (%s): its unmaps are seen only by the other sources, if any "
            "(counted as uffd_unwatched)",
            k == 0   ? "the program has its own userfaultfd on that memory"
            : k == 1 ? "more would split VMAs past half of vm.max_map_count"
                     : err == EINVAL ? "file-backed memory, or memory the kernel cannot write-protect"
                                     : strerror(err));
}

/* Why not unregister when an entry goes: ranges overlap (merged, nested and concurrent
 * registrations share pages), so unwatching one entry's pages could unwatch another's;
 * and UFFDIO_UNREGISTER takes the address space's write lock and splits VMAs. A watched
 * range no longer registered costs one event per unmap, nothing more. */
void mrc_uffd_watch_slow(uint64_t addr, uint64_t len)
{
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != ON || !len)
        return;
    int saved = errno;
    uint64_t m = mrc_monitor.page_size - 1, start = addr & ~m, end = addr + len;
    end = end < addr || end + m < end ? ~m : (end + m) & ~m;
    int err = budget_take() ? reg(start, end) : ENOSPC;
    /* hugetlbfs takes whole huge pages only. */
    if (err == EINVAL && ((start | end) & (HUGE_2M - 1)) && end <= ~(HUGE_2M - 1))
        err = reg(start & ~(HUGE_2M - 1), (end + HUGE_2M - 1) & ~(HUGE_2M - 1));
    if (err)
        unwatched(err);
    errno = saved;
}

/* ---- start-up ---- */

void mrc_uffd_configure(int explicit_)
{
    loud = explicit_;
    state = UNSTARTED;
}

int mrc_uffd_on(void)
{
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE) != OFF;
}

static int open_fd(void)
{
    int f = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    /* Before Linux 5.11 the flag is unknown; nor is it needed there. */
    if (f < 0 && errno == EINVAL)
        f = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (f < 0) {
        SAY("uffd: userfaultfd refused (%s%s); raw unmap system calls on registered memory are not seen",
            strerror(errno), errno == EPERM ? ": a seccomp filter, or vm.unprivileged_userfaultfd=0" : "");
        return -1;
    }
    struct uffdio_api api = { .api = UFFD_API, .features = FEATURES };
    if (ioctl(f, UFFDIO_API, &api) != 0 || !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        SAY("uffd: the kernel does not report unmap events to a userfaultfd (%s); raw unmap system calls on "
            "registered memory are not seen",
            strerror(errno));
        close(f);
        return -1;
    }
    return f;
}

static long read_max_map_count(void)
{
    char buf[32];
    int f = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    ssize_t n = f < 0 ? -1 : read(f, buf, sizeof(buf) - 1);
    if (f >= 0)
        close(f);
    if (n <= 0)
        return 65530;   /* the kernel's default */
    buf[n] = 0;
    long v = strtol(buf, NULL, 10);
    return v > 0 ? v : 65530;
}

static int start_handler(int ufd)
{
    return mrc_thread_start(handler_main, (void *)(intptr_t)ufd, "mrcache-uffd");
}

/* Unmaps a page of a watched private mapping with a raw system call (what no hook sees)
 * and checks that the handler got the event. 1 seen, 0 not, -errno if it could not run. */
static int selftest(void)
{
    size_t pg = (size_t)mrc_monitor.page_size;
    char *p = mrc_raw_map(2 * pg, 0);
    if (!p)
        return -errno;
    p[0] = 1;
    int err = reg((uintptr_t)p, (uintptr_t)p + 2 * pg);
    if (err) {
        syscall(SYS_munmap, p, 2 * pg);
        return -err;
    }
    __atomic_store_n(&probe_seen, 0, __ATOMIC_RELAXED);
    probe_lo = (uintptr_t)p;
    __atomic_store_n(&probe_hi, (uintptr_t)p + 2 * pg, __ATOMIC_RELEASE);
    syscall(SYS_munmap, p, pg);     /* returns once the handler has read the event ... */
    mrc_uffd_quiesce();             /* ... which it has handled once no longer busy */
    __atomic_store_n(&probe_hi, 0, __ATOMIC_RELEASE);
    syscall(SYS_munmap, p + pg, pg);
    return __atomic_load_n(&probe_seen, __ATOMIC_RELAXED);
}

static int start_locked(void)
{
    map_limit = read_max_map_count() / 2;
    long n = count_maps();
    map_estimate = n > 0 ? n : 0;
    int f = open_fd();
    if (f < 0)
        return 0;
    int rc = start_handler(f);
    if (rc) {
        SAY("uffd: cannot start the event thread (%s); raw unmap system calls on registered memory are not "
            "seen", strerror(rc));
        close(f);
        return 0;
    }
    fd = f;
    /* If the test fails the descriptor stays open and read: a range it watched must
     * never leave an unmapping thread waiting. */
    rc = selftest();
    if (rc != 1) {
        SAY("uffd: self-test failed (%s); source off: raw unmap system calls on registered memory are not seen",
            rc < 0 ? strerror(-rc) : "an unmap of a watched range was not reported");
        return 0;
    }
    MRC_INFO("uffd: on: registered ranges are watched in write-protect mode; self-test: a raw munmap of a "
             "watched range was seen");
    return 1;
}

int mrc_uffd_start(void)
{
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s != UNSTARTED)
        return s == ON;
    pthread_mutex_lock(&start_lock);
    if (state == UNSTARTED) {
        __atomic_store_n(&state, start_locked() ? ON : OFF, __ATOMIC_RELEASE);
        __atomic_store_n(&mrc_uffd_watching, state == ON, __ATOMIC_RELEASE);
    }
    s = state;
    pthread_mutex_unlock(&start_lock);
    return s == ON;
}

void mrc_uffd_child_reset(void)
{
    if (fd >= 0)
        close(fd);
    fd = -1;
    mrc_uffd_busy = 0;
    probe_hi = 0;
    map_refusals = 0;
    pthread_mutex_init(&start_lock, NULL);
    if (state == ON)
        state = UNSTARTED;
    mrc_uffd_watching = 0;
}
