/* uffd.c - the userfaultfd source's start, its handler thread and its descriptor. The
 * kernel reports every munmap, MAP_FIXED replacement, mremap and brk shrink (UNMAP),
 * madvise discard (REMOVE) and mremap move (REMAP) of a registered range (uffd_watch.c),
 * whoever makes the call; the handler publishes them. Invariants: write-protect mode,
 * nothing write-protected, so no fault is ever delivered; the handler blocks every
 * signal, never allocates, reads events before anything that could block (the unmapper,
 * maybe holding glibc's arena lock, waits for that read) and then takes only its sink's
 * lock and mrc_uffd_lock (never held across a wait for it); it never reads a number it
 * has not checked is still ours, follows the descriptor when the program's close or dup
 * moves it, and ends when only libmrcache's threads are left. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "monitor/uffd.h"
#include "monitor/uffd_priv.h"
#include "monitor/unmap.h"
#include "util/log.h"
#include "util/real.h"
#include "util/stats.h"
#include "util/sys.h"
#include "util/thread.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1   /* Linux 5.11; the system headers may predate it */
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC 4
#endif

#define FEATURES (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)

/* How often the idle handler looks whether the program's threads are all gone: while
 * the main thread runs, and once it has left with pthread_exit. Two looks in a row must
 * agree before it ends (a thread created meanwhile shows in the second). */
#define LOOK_MS 1000
#define LOOK_MS_MAIN_GONE 100

unsigned mrc_uffd_busy;
int mrc_uffd_state = MRC_UFFD_OFF;
int mrc_uffd_watching;          /* state == ON, for the inline checks (uffd.h) */
int mrc_uffd_fd = -1;
pthread_mutex_t mrc_uffd_lock = PTHREAD_MUTEX_INITIALIZER;
static int loud;                /* asked for by name: failing to start is a warning */
static dev_t fd_dev;            /* what our descriptor is: its number may come to be another's */
static ino_t fd_ino;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*drain_fn)(void *);
static void *drain_arg;

/* A registered page of ours nobody unmaps: a discard of it is an event the handler
 * must read, which makes it leave a poll of an old number (see kick). */
static char *kick_page;

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
        mrc_sys_futex(&mrc_uffd_busy, FUTEX_WAIT_PRIVATE, 2, NULL);
    }
    errno = saved;
}

/* ---- the descriptor ---- */

int mrc_uffd_fd_ours(int f)
{
    struct stat st;
    return f >= 0 && mrc_sys_fstat(f, &st) == 0 && st.st_ino == fd_ino && st.st_dev == fd_dev;
}

/* The state, and what follows it: mrc_uffd_watching (the inline checks) and the mremap
 * step. A watch the step does not know of makes the program's growing or moving mremap
 * fail: turned on, the step is in place before a watch can be made; turned off, watches
 * stop first and the step goes last. */
static void set_state(int s)
{
    if (s == MRC_UFFD_ON) {
        __atomic_store_n(&mrc_monitor.before_mremap, mrc_uffd_before_mremap, __ATOMIC_RELEASE);
        __atomic_store_n(&mrc_monitor.before_munmap, mrc_uffd_before_munmap, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&mrc_uffd_watching, 0, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&mrc_uffd_state, s, __ATOMIC_RELEASE);
    if (s == MRC_UFFD_ON)
        __atomic_store_n(&mrc_uffd_watching, 1, __ATOMIC_RELEASE);
    else {
        __atomic_store_n(&mrc_monitor.before_mremap, NULL, __ATOMIC_RELEASE);
        __atomic_store_n(&mrc_monitor.before_munmap, NULL, __ATOMIC_RELEASE);
    }
}

static int others_watch(void)
{
    return mrc_monitor.preload || __atomic_load_n(&mrc_monitor.patched, __ATOMIC_RELAXED);
}

void mrc_uffd_lose(const char *why)
{
    if (__atomic_exchange_n(&mrc_uffd_fd, -1, __ATOMIC_ACQ_REL) < 0)
        return;
    set_state(MRC_UFFD_OFF);
    if (others_watch()) {
        mrc_log(loud ? MRC_LOG_WARN : MRC_LOG_INFO,
                "uffd: %s; source off: raw unmap system calls on registered memory are no longer seen", why);
    } else if (mrc_monitor.sink.source_lost) {
        /* Nothing else sees unmaps: what the cache would keep could go stale unseen. */
        mrc_monitor.sink.source_lost("uffd: the program closed or replaced libmrcache's userfaultfd with a call "
                                     "libmrcache does not see; nothing watches unmaps of registered memory now",
                                     NULL);
    }
}

/* Makes the handler leave its poll of the old number before the program's call: a
 * discard of the kick page is an event, and returns once the handler has read it (from
 * the new number, or from the old one, which stays open until then). Only after a move:
 * a handler that has stopped reading would leave it waiting for as long as a number
 * holds the file. */
static void kick(void)
{
    if (kick_page)
        mrc_sys_madvise(kick_page, (size_t)mrc_monitor.page_size, MADV_DONTNEED);
}

/* A duplicate of ours on a free number outside [lo, hi], never 0-2 (the standard
 * streams a daemon reopens), or -1. */
static int dup_outside(int cur, unsigned lo, unsigned hi)
{
    int m = mrc_sys_fcntl(cur, F_DUPFD_CLOEXEC, 3);
    if (m >= 0 && ((unsigned)m < lo || (unsigned)m > hi))
        return m;
    if (m >= 0)
        mrc_sys_close(m);
    return hi < INT_MAX ? mrc_sys_fcntl(cur, F_DUPFD_CLOEXEC, (long)hi + 1) : -1;
}

/* The program is about to close [lo, hi] or put another file on a number in it. Ours
 * moves out of the range if it is in it (the numbers are then the program's own, as
 * without us); *left is then the old number, still ours until the program's call, else
 * -1. Returns ours if it stays in the range (no free number outside), else -1; a number
 * that is not ours any more is lost. Keeps errno. */
static int evict(unsigned lo, unsigned hi, int *left)
{
    *left = -1;
    int cur = __atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE);
    if (cur < 0 || (unsigned)cur < lo || (unsigned)cur > hi)
        return -1;      /* close_range(n, ~0U) with no descriptor of ours, say */
    int saved = errno, stays = -1;
    pthread_mutex_lock(&mrc_uffd_lock);
    cur = __atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE);
    if (cur >= 0 && (unsigned)cur >= lo && (unsigned)cur <= hi) {
        if (!mrc_uffd_fd_ours(cur)) {
            mrc_uffd_lose("its descriptor was closed or replaced by a call libmrcache does not see");
        } else {
            int m = dup_outside(cur, lo, hi);
            if (m >= 0)
                __atomic_store_n(&mrc_uffd_fd, m, __ATOMIC_RELEASE);
            *left = m >= 0 ? cur : -1;
            stays = m >= 0 ? -1 : cur;
        }
    }
    pthread_mutex_unlock(&mrc_uffd_lock);
    if (*left >= 0)
        kick();
    errno = saved;
    return stays;
}

/* Ours stays where the program puts another file or closes: it is lost with the call
 * (the handler finds the number closed or not ours at its next look). */
static void lose_to_program(int stays)
{
    if (stays >= 0) {
        int saved = errno;
        mrc_uffd_lose("the program closed its descriptor and no other number was free");
        errno = saved;
    }
}

/* After the program's call: if it failed, the old number it named still holds our file
 * (a duplicate the program never had): closed, as it would be free without us. */
static int after_call(int rc, int failed, int left)
{
    if (failed && left >= 0) {
        int saved = errno;
        if (mrc_uffd_fd_ours(left))
            mrc_sys_close(left);
        errno = saved;
    }
    return rc;
}

static int real_close_range(unsigned lo, unsigned hi, int flags)
{
    return mrc_real.close_range ? mrc_real.close_range(lo, hi, flags)
                                : mrc_sys_close_range(lo, hi, flags);
}

int mrc_uffd_close(int f)
{
    int left;
    if (f >= 0)
        lose_to_program(evict((unsigned)f, (unsigned)f, &left));
    return mrc_real.close ? mrc_real.close(f) : mrc_sys_close(f);
}

int mrc_uffd_close_range(unsigned lo, unsigned hi, int flags)
{
    int left = -1, stays = lo <= hi && !(flags & CLOSE_RANGE_CLOEXEC) ? evict(lo, hi, &left) : -1;
    if (stays < 0) {
        int rc = real_close_range(lo, hi, flags);
        return after_call(rc, rc != 0, left);
    }
    /* Every number outside the range is taken: the range is closed around ours. */
    int rc = (unsigned)stays > lo ? real_close_range(lo, (unsigned)stays - 1, flags) : 0;
    if (rc == 0 && (unsigned)stays < hi)
        rc = real_close_range((unsigned)stays + 1, hi, flags);
    return rc;
}

void mrc_uffd_closefrom(int lo)
{
    int left, stays = lo >= 0 ? evict((unsigned)lo, UINT_MAX, &left) : -1;
    if (stays >= 0) {
        if (stays > lo)
            real_close_range((unsigned)lo, (unsigned)stays - 1, 0);
        lo = stays + 1;
    }
    if (mrc_real.closefrom)
        mrc_real.closefrom(lo);
    else
        real_close_range((unsigned)lo, UINT_MAX, 0);
}

int mrc_uffd_dup2(int old, int new_)
{
    int left = -1;
    if (old != new_ && new_ >= 0)
        lose_to_program(evict((unsigned)new_, (unsigned)new_, &left));
    int rc = mrc_real.dup2 ? mrc_real.dup2(old, new_) : mrc_sys_dup2(old, new_);
    return after_call(rc, rc < 0, left);
}

int mrc_uffd_dup3(int old, int new_, int flags)
{
    int left = -1;
    if (old != new_ && new_ >= 0)
        lose_to_program(evict((unsigned)new_, (unsigned)new_, &left));
    int rc = mrc_real.dup3 ? mrc_real.dup3(old, new_, flags) : mrc_sys_dup3(old, new_, flags);
    return after_call(rc, rc < 0, left);
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
    if (mrc_sys_ioctl(ufd, UFFDIO_WRITEPROTECT, &wp) != 0)
        mrc_sys_ioctl(ufd, UFFDIO_WAKE, &wp.range);
}

/* One event; returns whether it discarded pages a live registration needed, while
 * their mapping (split by our registration) stays: the cache's deregistrations are then
 * to be drained, so that the watches go and the VMAs merge. An unmapped range's watch
 * went with its mapping. */
static int handle(int ufd, const struct uffd_msg *m)
{
    switch (m->event) {
    case UFFD_EVENT_UNMAP:
        mrc_stat_add(MRC_STAT_UFFD_EVENTS, 1);
        invalidate(m->arg.remove.start, m->arg.remove.end, MRC_INVAL_MUNMAP);
        mrc_uffd_watch_gone(m->arg.remove.start, m->arg.remove.end);
        return 0;
    case UFFD_EVENT_REMOVE:
        if (m->arg.remove.start == (uintptr_t)kick_page)
            return 0;   /* a descriptor move asking the handler to look again */
        /* Sent before the pages are discarded; MADV_FREE sends it too (an invalidation
         * it did not need: the event does not say which advice it was). */
        mrc_stat_add(MRC_STAT_UFFD_EVENTS, 1);
        invalidate(m->arg.remove.start, m->arg.remove.end, MRC_INVAL_MADVISE);
        return mrc_uffd_watch_needed(m->arg.remove.start, m->arg.remove.end);
    case UFFD_EVENT_REMAP: {
        /* Moved: the pages left the old range, and our registration went along. */
        uint64_t from = m->arg.remap.from, len = m->arg.remap.len;
        mrc_stat_add(MRC_STAT_UFFD_EVENTS, 1);
        invalidate(from, from + len, MRC_INVAL_MREMAP);
        mrc_uffd_watch_gone(from, from + len);
        mrc_uffd_watch_moved(m->arg.remap.to, m->arg.remap.to + len);
        return 0;
    }
    case UFFD_EVENT_PAGEFAULT:
        answer_fault(ufd, m);
        return 0;
    default:
        return 0;
    }
}

/* Only libmrcache's threads are left (the program's have all ended, main with
 * pthread_exit): the handler ends so that the process can, closing the descriptor
 * first, which drops every watch, so that an unmap made later (at exit) waits for no
 * reader. */
static void retire(void)
{
    set_state(MRC_UFFD_OFF);
    pthread_mutex_lock(&mrc_uffd_lock);
    int f = __atomic_exchange_n(&mrc_uffd_fd, -1, __ATOMIC_ACQ_REL);
    if (f >= 0 && mrc_uffd_fd_ours(f))
        mrc_sys_close(f);
    pthread_mutex_unlock(&mrc_uffd_lock);
}

/* An idle look: 1 if the handler is to end. */
static int idle_look(int *period, unsigned *agree)
{
    /* While the main thread runs the process has a program thread: no need to look. */
    int main_gone = mrc_thread_main_left();
    *agree = main_gone && mrc_thread_only_helpers() ? *agree + 1 : 0;
    *period = main_gone ? LOOK_MS_MAIN_GONE : LOOK_MS;
    return *agree >= 2;
}

static void *handler_main(void *arg)
{
    (void)arg;
    struct uffd_msg msg[32];
    int period = LOOK_MS;
    unsigned agree = 0;
    for (;;) {
        int cur = __atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE);
        if (cur < 0)
            break;          /* lost: the handler lets the file go with its poll */
        struct pollfd p = { .fd = cur, .events = POLLIN };
        int r = poll(&p, 1, period);
        /* Moved meanwhile: the old number may be the program's file by now; never read
         * it, poll the new one. */
        if (__atomic_load_n(&mrc_uffd_fd, __ATOMIC_ACQUIRE) != cur || r < 0)
            continue;
        if (!mrc_uffd_fd_ours(cur)) {
            mrc_uffd_lose("its descriptor was closed or replaced by a call libmrcache does not see");
            break;
        }
        if (r == 0) {
            if (idle_look(&period, &agree)) {
                retire();
                break;
            }
            continue;
        }
        agree = 0;
        if (p.revents & POLLERR) {
            /* Poll needs O_NONBLOCK, and the program cleared it on our file. */
            if (mrc_sys_fcntl(cur, F_SETFL, O_NONBLOCK) != 0) {
                mrc_uffd_lose("its descriptor cannot be polled");
                break;
            }
            continue;
        }
        /* Busy before the read: the unmapping thread resumes at the read, and must not
         * find the old entry until it is invalidated. */
        __atomic_store_n(&mrc_uffd_busy, 1, __ATOMIC_SEQ_CST);
        ssize_t n = mrc_sys_read(cur, msg, sizeof(msg));
        int changed = 0;
        for (ssize_t i = 0; i < n / (ssize_t)sizeof(msg[0]); i++)
            changed |= handle(cur, &msg[i]);
        if (__atomic_exchange_n(&mrc_uffd_busy, 0, __ATOMIC_RELEASE) == 2)
            mrc_sys_futex(&mrc_uffd_busy, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
        if (changed && drain_fn)
            drain_fn(drain_arg);
    }
    mrc_thread_leave();
    return NULL;
}

/* ---- failures to watch ---- */

void mrc_uffd_unwatched(int err)
{
    static int said[3];
    int k = err == EBUSY ? 0 : err == ENOSPC ? 1 : 2;
    mrc_stat_add(MRC_STAT_UFFD_UNWATCHED, 1);
    if (__atomic_exchange_n(&said[k], 1, __ATOMIC_RELAXED))
        return;
    /* Said once per reason; a warning if no other source watches that memory. */
    mrc_log(others_watch() ? MRC_LOG_INFO : MRC_LOG_WARN,
            "uffd: a registration is not watched (%s): its unmaps are seen only by the other sources, if any "
            "(counted as uffd_unwatched)",
            k == 0   ? "the program has its own userfaultfd on that memory"
            : k == 1 ? "more would split VMAs past half of vm.max_map_count"
                     : err == EINVAL ? "file-backed memory, or memory the kernel cannot write-protect"
                                     : strerror(err));
}

/* ---- start-up ---- */

void mrc_uffd_configure(int explicit_)
{
    loud = explicit_;
    mrc_uffd_state = MRC_UFFD_UNSTARTED;
}

void mrc_uffd_set_drain(void (*drain)(void *arg), void *arg)
{
    drain_arg = arg;
    drain_fn = drain;
}

int mrc_uffd_on(void)
{
    return __atomic_load_n(&mrc_uffd_state, __ATOMIC_ACQUIRE) != MRC_UFFD_OFF;
}

static int open_fd(void)
{
    int f = mrc_sys_userfaultfd(O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    /* Before Linux 5.11 the flag is unknown; nor is it needed there. */
    if (f < 0 && errno == EINVAL)
        f = mrc_sys_userfaultfd(O_CLOEXEC | O_NONBLOCK);
    if (f < 0) {
        SAY("uffd: userfaultfd refused (%s%s); raw unmap system calls on registered memory are not seen",
            strerror(errno), errno == EPERM ? ": a seccomp filter, or vm.unprivileged_userfaultfd=0" : "");
        return -1;
    }
    struct uffdio_api api = { .api = UFFD_API, .features = FEATURES };
    if (mrc_sys_ioctl(f, UFFDIO_API, &api) != 0 || !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        SAY("uffd: the kernel does not report unmap events to a userfaultfd (%s); raw unmap system calls on "
            "registered memory are not seen",
            strerror(errno));
        mrc_sys_close(f);
        return -1;
    }
    /* Never on a standard stream's number: a daemon closes those and reopens them. */
    if (f < 3) {
        int high = mrc_sys_fcntl(f, F_DUPFD_CLOEXEC, 3);
        mrc_sys_close(f);
        f = high;
    }
    struct stat st;
    if (f < 0 || mrc_sys_fstat(f, &st) != 0) {
        if (f >= 0)
            mrc_sys_close(f);
        return -1;
    }
    fd_dev = st.st_dev;
    fd_ino = st.st_ino;
    return f;
}

static int start_handler(void)
{
    return mrc_thread_start(handler_main, NULL, "mrcache-uffd", 0);
}

/* Unmaps a page of a watched private mapping with a raw system call (what no hook sees)
 * and checks that the handler got the event; the other page stays, registered, as the
 * kick page. 1 seen, 0 not, -errno if it could not run. */
static int selftest(void)
{
    size_t pg = (size_t)mrc_monitor.page_size;
    char *p = mrc_raw_map(2 * pg, 0);
    if (!p)
        return -errno;
    p[0] = 1;
    int err = mrc_uffd_register_raw(mrc_uffd_fd, (uintptr_t)p, (uintptr_t)p + 2 * pg);
    if (err) {
        mrc_sys_munmap(p, 2 * pg);
        return -err;
    }
    __atomic_store_n(&probe_seen, 0, __ATOMIC_RELAXED);
    probe_lo = (uintptr_t)p;
    __atomic_store_n(&probe_hi, (uintptr_t)p + pg, __ATOMIC_RELEASE);
    mrc_sys_munmap(p, pg);     /* returns once the handler has read the event ... */
    mrc_uffd_quiesce();             /* ... which it has handled once no longer busy */
    __atomic_store_n(&probe_hi, 0, __ATOMIC_RELEASE);
    kick_page = p + pg;
    return __atomic_load_n(&probe_seen, __ATOMIC_RELAXED);
}

static int start_locked(void)
{
    mrc_uffd_watch_init();
    int f = open_fd();
    if (f < 0)
        return 0;
    __atomic_store_n(&mrc_uffd_fd, f, __ATOMIC_RELEASE);
    int rc = start_handler();
    if (rc) {
        SAY("uffd: cannot start the event thread (%s); raw unmap system calls on registered memory are not "
            "seen", strerror(rc));
        __atomic_store_n(&mrc_uffd_fd, -1, __ATOMIC_RELEASE);
        mrc_sys_close(f);
        return 0;
    }
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
    int s = __atomic_load_n(&mrc_uffd_state, __ATOMIC_ACQUIRE);
    if (s != MRC_UFFD_UNSTARTED)
        return s == MRC_UFFD_ON;
    pthread_mutex_lock(&start_lock);
    if (mrc_uffd_state == MRC_UFFD_UNSTARTED)
        set_state(start_locked() ? MRC_UFFD_ON : MRC_UFFD_OFF);
    s = mrc_uffd_state;
    pthread_mutex_unlock(&start_lock);
    return s == MRC_UFFD_ON;
}

void mrc_uffd_child_reset(void)
{
    /* The parent's lock may have been held at fork: a fresh one, and the counts forgotten
     * (the child's mappings are not registered: no UFFD_FEATURE_EVENT_FORK). */
    int f = mrc_uffd_fd;
    mrc_uffd_fd = -1;
    if (f >= 0)
        mrc_sys_close(f);
    if (kick_page)
        mrc_sys_munmap(kick_page, (size_t)mrc_monitor.page_size);
    kick_page = NULL;
    mrc_uffd_busy = 0;
    probe_hi = 0;
    pthread_mutex_init(&start_lock, NULL);
    pthread_mutex_init(&mrc_uffd_lock, NULL);
    mrc_uffd_watch_reset();
    set_state(mrc_uffd_state == MRC_UFFD_ON ? MRC_UFFD_UNSTARTED : mrc_uffd_state);
}
