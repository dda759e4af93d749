/* snic_fork.c - rdma-core's fork support: after ibv_fork_init (or RDMAV_FORK_SAFE) every
 * registered page is MADV_DONTFORK, refcounted so overlapping MRs work; and
 * ibv_is_fork_initialized. Invariants (range_lock): ranges holds disjoint page-aligned
 * [start, end) with refs >= 1, exactly the pages we made DONTFORK, and touching
 * neighbours differ in refs. RDMAV_HUGEPAGES_SAFE is not supported (base pages only). */
#include <errno.h>
#include <pthread.h>
#include <search.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "snic_priv.h"

struct range {
    uintptr_t start, end;
    unsigned long refs;
};

static pthread_mutex_t range_lock = PTHREAD_MUTEX_INITIALIZER;
static void *ranges; /* tsearch tree */
static atomic_bool enabled, too_late;
/* SNIC_COPY_ON_FORK=0|1: report IBV_FORK_UNNEEDED, as rdma-core does when the kernel has
 * copy-on-fork for pinned pages. Default 1: true of io_uring pins here, fork gives the
 * child copies of pinned anonymous pages (test_fork_parent_keeps_pinned_pages). */
static bool copy_on_fork = true;

/* Disjoint ranges order by position; overlapping ones compare equal, so a lookup with
 * [s, e) finds some range overlapping it. */
static int range_cmp(const void *x, const void *y)
{
    const struct range *a = x, *b = y;

    if (a->end <= b->start)
        return -1;
    if (b->end <= a->start)
        return 1;
    return 0;
}

static struct range *range_find(uintptr_t s, uintptr_t e)
{
    struct range key = { .start = s, .end = e };
    void *node = tfind(&key, &ranges, range_cmp);

    return node ? *(struct range **)node : NULL;
}

/* The lowest range overlapping [s, e): each retry looks strictly left of the last hit. */
static struct range *range_first(uintptr_t s, uintptr_t e)
{
    struct range *r = range_find(s, e), *left;

    while (r && r->start > s && (left = range_find(s, r->start)))
        r = left;
    return r;
}

static struct range *range_add(uintptr_t s, uintptr_t e, unsigned long refs)
{
    struct range *r = malloc(sizeof(*r));

    if (!r)
        return NULL;
    *r = (struct range){ .start = s, .end = e, .refs = refs };
    if (!tsearch(r, &ranges, range_cmp)) {
        free(r);
        return NULL;
    }
    return r;
}

static void range_del(struct range *r)
{
    tdelete(r, &ranges, range_cmp);
    free(r);
}

/* Cuts r at at (inside it); returns the upper part, or NULL without memory. */
static struct range *range_split(struct range *r, uintptr_t at)
{
    uintptr_t end = r->end;
    struct range *upper;

    r->end = at; /* shrinking keeps the tree ordered */
    upper = range_add(at, end, r->refs);
    if (!upper)
        r->end = end;
    return upper;
}

/* Restores "touching neighbours differ" around [s, e) after refcounts changed in it. */
static void range_merge(uintptr_t s, uintptr_t e)
{
    uintptr_t lo = s ? s - 1 : 0, hi = e + 1;
    struct range *r = range_first(lo, hi), *next;

    while (r && r->start < hi) {
        next = range_find(r->end, r->end + 1);
        if (next && next->start == r->end && next->refs == r->refs) {
            uintptr_t end = next->end;

            range_del(next);
            r->end = end; /* growing into the gap just freed keeps the order */
        } else {
            r = next && next->start < hi ? next : range_first(r->end, hi);
        }
    }
}

static int advise(uintptr_t s, uintptr_t e, int advice)
{
    return madvise((void *)s, e - s, advice) ? errno : 0;
}

/* Under range_lock. Drops one reference from the pages of [s, e); pages reaching zero
 * become forkable again (best effort, as rdma-core). Returns 0 or ENOMEM. */
static int dofork_locked(uintptr_t s, uintptr_t e)
{
    uintptr_t p = s;
    struct range *r;
    int err = 0;

    while (p < e && (r = range_first(p, e))) {
        if ((r->start < p && !(r = range_split(r, p))) || (r->end > e && !range_split(r, e))) {
            err = ENOMEM;
            break;
        }
        p = r->end;
        if (--r->refs == 0) {
            advise(r->start, r->end, MADV_DOFORK);
            range_del(r);
        }
    }
    range_merge(s, e);
    return err;
}

/* Under range_lock. Adds one reference to the pages of [s, e); pages new to the set are
 * made DONTFORK first. On failure every change is undone and errno set. */
static int dontfork_locked(uintptr_t s, uintptr_t e)
{
    uintptr_t p = s;
    int err = 0;

    while (p < e && !err) {
        struct range *r = range_first(p, e);

        if (!r || r->start > p) {
            uintptr_t gap_end = r ? r->start : e;

            err = advise(p, gap_end, MADV_DONTFORK);
            if (!err && !(r = range_add(p, gap_end, 1)))
                err = ENOMEM;
            if (err) /* madvise may have applied to part of the gap */
                advise(p, gap_end, MADV_DOFORK);
        } else if ((r->start < p && !(r = range_split(r, p))) ||
                   (r->end > e && !range_split(r, e))) {
            err = ENOMEM;
        } else {
            r->refs++;
        }
        if (!err)
            p = r->end;
    }
    if (!err) {
        range_merge(s, e);
        return 0;
    }
    dofork_locked(s, p);
    errno = err;
    return -1;
}

static void page_bounds(void *base, size_t size, uintptr_t *s, uintptr_t *e)
{
    uintptr_t mask = (uintptr_t)getpagesize() - 1;

    *s = (uintptr_t)base & ~mask;
    *e = ((uintptr_t)base + size + mask) & ~mask;
}

/* Both return 0, or -1 with errno (rdma-core returns the madvise result). Before
 * ibv_fork_init they do nothing but make a later ibv_fork_init fail. */
SNIC_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
    uintptr_t s, e;
    int ret;

    if (!atomic_load(&enabled)) {
        atomic_store(&too_late, true);
        return 0;
    }
    page_bounds(base, size, &s, &e);
    if (!base || !size || e <= s)
        return 0;
    pthread_mutex_lock(&range_lock);
    ret = dontfork_locked(s, e);
    pthread_mutex_unlock(&range_lock);
    return ret;
}

SNIC_EXPORT int ibv_dofork_range(void *base, size_t size)
{
    uintptr_t s, e;
    int err;

    if (!atomic_load(&enabled)) {
        atomic_store(&too_late, true);
        return 0;
    }
    page_bounds(base, size, &s, &e);
    if (!base || !size || e <= s)
        return 0;
    pthread_mutex_lock(&range_lock);
    err = dofork_locked(s, e);
    pthread_mutex_unlock(&range_lock);
    if (!err)
        return 0;
    errno = err;
    return -1;
}

/* 0, EINVAL once a registration happened without it, ENOSYS without MADV_DONTFORK. */
SNIC_EXPORT int ibv_fork_init(void)
{
    long page = getpagesize();
    void *probe;
    int err = 0;

    if (getenv("RDMAV_HUGEPAGES_SAFE"))
        snic_log("RDMAV_HUGEPAGES_SAFE is not supported: fork ranges use base pages, so "
                 "registering part of a huge page fails");
    pthread_mutex_lock(&range_lock);
    if (atomic_load(&enabled))
        goto out;
    err = EINVAL;
    if (atomic_load(&too_late))
        goto out;
    err = ENOMEM;
    if (posix_memalign(&probe, (size_t)page, (size_t)page))
        goto out;
    err = 0;
    if (madvise(probe, (size_t)page, MADV_DONTFORK) || madvise(probe, (size_t)page, MADV_DOFORK))
        err = ENOSYS;
    free(probe);
    if (!err)
        atomic_store(&enabled, true);
out:
    pthread_mutex_unlock(&range_lock);
    return err;
}

SNIC_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    if (copy_on_fork)
        return IBV_FORK_UNNEEDED;
    return atomic_load(&enabled) ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

/* rdma-core's check_env: set and not "0". */
static bool env_on(const char *name)
{
    const char *v = getenv(name);

    return v && strcmp(v, "0") != 0;
}

void fork_env_init(void)
{
    if ((env_on("RDMAV_FORK_SAFE") || env_on("IBV_FORK_SAFE")) && ibv_fork_init())
        snic_log("fork()-safety requested but ibv_fork_init failed");
}

static void range_fork_prepare(void)
{
    pthread_mutex_lock(&range_lock);
}

static void range_fork_release(void)
{
    pthread_mutex_unlock(&range_lock);
}

__attribute__((constructor)) static void fork_init_env(void)
{
    const char *v = getenv("SNIC_COPY_ON_FORK");

    if (v && strcmp(v, "0") && strcmp(v, "1"))
        snic_log("SNIC_COPY_ON_FORK=\"%s\" is not 0 or 1; using 1", v);
    else if (v)
        copy_on_fork = v[0] == '1';
    pthread_atfork(range_fork_prepare, range_fork_release, range_fork_release);
}
