/* thread.c - starts libmrcache's helper threads and counts them, tells when only they
 * are left (see thread.h), and whether the process runs a single thread. Invariants: the
 * count rises only once a helper exists (pthread_create returned), so it never makes a
 * program thread look absent; a start returns once the new thread has mapped what it
 * maps for itself (or after a bounded wait: never a hang); nothing here allocates after
 * start-up. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/real.h"
#include "util/stats.h"
#include "util/sys.h"
#include "util/thread.h"

static unsigned helpers;            /* helpers running (started, not yet leaving) */
static int main_left = 1;           /* 1 until mrc_thread_watch_main watches a thread */
static void (*on_main_left)(void);
static pthread_key_t main_key;
static int main_keyed;              /* main_key exists */

__thread int mrc_thread_ours;

/* What a new helper runs first: fn and arg, passed without an allocation (helpers are
 * few, and each start takes its slot in turn). The slot is freed (fn NULL) by the starter
 * once the thread said it is ready, or by the thread if the starter stopped waiting. */
#define SLOT_STARTING 0u
#define SLOT_READY 1u             /* the thread has mapped its own memory */
#define SLOT_LEFT 2u              /* the starter stopped waiting: the thread frees the slot */
/* How long a start waits for the thread: its set-up takes tens of microseconds, but its
 * first malloc may need a lock the starter's caller holds (an allocator defined in the
 * program that registers memory under its own lock), which must not hang the process. */
#define START_WAIT_NS (100 * 1000000L)
static struct start_slot {
    void *(*fn)(void *);
    void *arg;
    int mallocs;
    uint32_t state;               /* futex word: SLOT_* */
} slots[8];
static unsigned next_slot;

static void *start_trampoline(void *p)
{
    struct start_slot *s = p;
    void *(*fn)(void *) = s->fn;
    void *arg = s->arg;
    mrc_thread_ours = 1;
    /* What the thread maps for itself, mapped before its starter goes on: later, it could
     * land in a hole the program has just unmapped and is about to map again at a fixed
     * address, which would replace it (a thread is first scheduled when the machine
     * lets it, under a sanitizer after its own set-up mappings too). glibc maps a
     * thread's malloc arena (64 MiB) at its first malloc; the statistics block comes with
     * the first count. Volatile: a malloc freed at once is otherwise compiled away. */
    if (s->mallocs) {
        void *volatile arena_probe = malloc(1);
        free(arena_probe);
    }
    (void)mrc_stats_block();
    uint32_t starting = SLOT_STARTING;
    if (__atomic_compare_exchange_n(&s->state, &starting, SLOT_READY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        mrc_sys_futex(&s->state, FUTEX_WAKE_PRIVATE, 1, NULL);   /* a wake on a reused slot only wakes early */
    else
        __atomic_store_n(&s->fn, NULL, __ATOMIC_RELEASE);
    return fn(arg);
}

int mrc_thread_start(void *(*fn)(void *), void *arg, const char *name, int mallocs)
{
    struct start_slot *slot = NULL;
    for (unsigned i = 0; i < 8 && !slot; i++) {
        struct start_slot *s = &slots[__atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED) % 8];
        void *(*none)(void *) = NULL;
        if (__atomic_compare_exchange_n(&s->fn, &none, fn, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            slot = s;
    }
    if (!slot)
        return EAGAIN;
    slot->arg = arg;
    slot->mallocs = mallocs;
    __atomic_store_n(&slot->state, SLOT_STARTING, __ATOMIC_RELAXED);
    /* The new thread inherits the mask: block everything around the create. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256u << 10);
    pthread_t t;
    int rc = pthread_create(&t, &attr, start_trampoline, slot);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        __atomic_store_n(&slot->fn, NULL, __ATOMIC_RELEASE);
        return rc;
    }
    __atomic_add_fetch(&helpers, 1, __ATOMIC_SEQ_CST);
    pthread_setname_np(t, name);
    uint64_t deadline = mrc_now_ns() + START_WAIT_NS;
    for (uint64_t now = mrc_now_ns(); now < deadline && __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) == SLOT_STARTING;
         now = mrc_now_ns()) {
        struct timespec left = { 0, (long)(deadline - now) };
        mrc_sys_futex(&slot->state, FUTEX_WAIT_PRIVATE, SLOT_STARTING, &left);
    }
    uint32_t starting = SLOT_STARTING;
    if (!__atomic_compare_exchange_n(&slot->state, &starting, SLOT_LEFT, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        __atomic_store_n(&slot->fn, NULL, __ATOMIC_RELEASE);   /* ready: the slot is the starter's to free */
    return 0;
}

void mrc_thread_leave(void)
{
    __atomic_sub_fetch(&helpers, 1, __ATOMIC_SEQ_CST);
}

/* /proc/self/stat's state (the main thread's: 'Z' once it ended with pthread_exit, while
 * it still counts among the threads) and num_threads (field 20). 0, or -1. */
static int proc_stat_threads(char *state, long *threads)
{
    char buf[1024];
    int fd = mrc_sys_open("/proc/self/stat", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    long n = mrc_sys_read(fd, buf, sizeof(buf) - 1);
    mrc_sys_close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')');   /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ' || !p[2])
        return -1;
    *state = p[2];
    p += 3;
    for (int field = 4; field <= 20; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    *threads = strtol(p, NULL, 10);
    return 0;
}

int mrc_thread_only_helpers(void)
{
    long mine = __atomic_load_n(&helpers, __ATOMIC_SEQ_CST);
    if (mrc_real.nptl_nthreads)
        return (long)__atomic_load_n(mrc_real.nptl_nthreads, __ATOMIC_SEQ_CST) <= mine;
    char state;
    long threads;
    if (proc_stat_threads(&state, &threads))
        return 0;
    return threads - (state == 'Z') <= mine;
}

static void main_key_gone(void *arg)
{
    (void)arg;
    __atomic_store_n(&main_left, 1, __ATOMIC_SEQ_CST);
    if (on_main_left)
        on_main_left();
}

void mrc_thread_child_reset(void)
{
    /* The forking thread is the child's only one, and no helper came along: nor did a
     * thread being started, whose slot would otherwise stay taken. */
    __atomic_store_n(&helpers, 0u, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < 8; i++)
        __atomic_store_n(&slots[i].fn, NULL, __ATOMIC_RELAXED);
    if (main_keyed && pthread_setspecific(main_key, &main_key) == 0)
        __atomic_store_n(&main_left, 0, __ATOMIC_RELAXED);
}

void mrc_thread_watch_main(void (*left)(void))
{
    on_main_left = left;
    /* The destructor runs for this thread only once it holds a value: at its
     * pthread_exit, not at the process's exit. */
    if (pthread_key_create(&main_key, main_key_gone) != 0)
        return;
    main_keyed = 1;
    if (mrc_sys_gettid() != getpid())
        return;   /* not the main thread: helpers look by themselves */
    if (pthread_setspecific(main_key, &main_key) == 0)
        __atomic_store_n(&main_left, 0, __ATOMIC_SEQ_CST);
}

int mrc_thread_main_left(void)
{
    return __atomic_load_n(&main_left, __ATOMIC_SEQ_CST);
}

int mrc_thread_single(void)
{
    char state;
    long threads;
    return proc_stat_threads(&state, &threads) == 0 && threads == 1;
}
