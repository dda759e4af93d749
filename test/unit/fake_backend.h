/* fake_backend.h - a counting back-end for the cache core's tests: every registration
 * is a heap record; a byte limit makes it fail with ENOMEM like RLIMIT_MEMLOCK; it can
 * refuse deregistrations (EBUSY, as with a memory window bound); a flag catches back-end
 * calls made while a test says none may happen (inside a "hook").
 * Records are never freed, so a double deregistration is detected, not undefined. */
#ifndef MRC_TEST_FAKE_BACKEND_H
#define MRC_TEST_FAKE_BACKEND_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

struct fake_reg {
    void *domain;
    uint64_t addr, len, iova;
    uint32_t access;
    int live;
};

struct fake_backend {
    pthread_mutex_t lock;
    uint64_t regs, deregs, live, live_bytes;
    uint64_t reg_bytes;            /* every registration's length, summed */
    uint64_t limit_bytes;          /* 0: no limit */
    int forbidden;                 /* a back-end call now is a test failure */
    uint64_t forbidden_calls;
    int fail_errno;                /* next registrations fail with this, while non-zero */
    int dereg_fail_errno;          /* deregistrations fail with this (the MR stays) ... */
    uint64_t dereg_fail_left;      /* ... this many more times (UINT64_MAX: until cleared) */
    uint64_t dereg_refused;        /* deregistrations refused so far */
};

static int fake_reg(void *ctx, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                    uint32_t access, struct mrc_range *range, void **out)
{
    struct fake_backend *f = ctx;
    (void)range;
    pthread_mutex_lock(&f->lock);
    if (f->forbidden)
        f->forbidden_calls++;
    if (f->fail_errno) {
        int e = f->fail_errno;
        pthread_mutex_unlock(&f->lock);
        return -e;
    }
    if (f->limit_bytes && f->live_bytes + len > f->limit_bytes) {
        pthread_mutex_unlock(&f->lock);
        return -ENOMEM;
    }
    struct fake_reg *r = calloc(1, sizeof(*r));
    r->domain = domain;
    r->addr = addr;
    r->len = len;
    r->iova = iova;
    r->access = access;
    r->live = 1;
    f->regs++;
    f->live++;
    f->live_bytes += len;
    f->reg_bytes += len;
    pthread_mutex_unlock(&f->lock);
    *out = r;
    return 0;
}

static int fake_dereg(void *ctx, void *reg)
{
    struct fake_backend *f = ctx;
    struct fake_reg *r = reg;
    pthread_mutex_lock(&f->lock);
    if (f->forbidden)
        f->forbidden_calls++;
    if (!r->live) {
        /* A double deregistration: make it impossible to miss. */
        f->forbidden_calls += 1000;
    }
    if (f->dereg_fail_errno && f->dereg_fail_left) {
        int e = f->dereg_fail_errno;
        if (f->dereg_fail_left != UINT64_MAX && !--f->dereg_fail_left)
            f->dereg_fail_errno = 0;
        f->dereg_refused++;
        pthread_mutex_unlock(&f->lock);
        return -e;
    }
    r->live = 0;
    f->deregs++;
    f->live--;
    f->live_bytes -= r->len;
    pthread_mutex_unlock(&f->lock);
    /* Kept, not freed, so that a second deregistration is counted, not undefined. */
    return 0;
}

static inline void fake_init(struct fake_backend *f)
{
    *f = (struct fake_backend){0};
    pthread_mutex_init(&f->lock, NULL);
}

#endif
