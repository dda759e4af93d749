/* populate.c - faults a range in with several threads before the NIC pins it
 * (MADV_POPULATE_READ/WRITE, Linux 5.14+): the pin then finds its pages present, and the
 * page faults of a cold range, which the pin would take one after another, are spread
 * over the cores. Invariants: the threads are joined before returning (none outlives
 * the registration), run with every signal blocked and on small stacks; a thread that
 * cannot be started leaves its share to the caller; the advice goes straight to the
 * kernel (it discards nothing). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/pagescan.h"
#include "backend/prepare.h"
#include "util/sys.h"

#define MAX_THREADS 64
#define STACK_SIZE (64u << 10)

static int populate_missing;   /* the kernel refused the advice as unknown */

struct share {
    uint64_t start, end;
    int advice;
    int rc;
};

static void *share_run(void *arg)
{
    struct share *sh = arg;
    sh->rc = 0;
    if (sh->end > sh->start &&
        mrc_sys_madvise((void *)(uintptr_t)sh->start, (size_t)(sh->end - sh->start), sh->advice) != 0)
        sh->rc = -errno;
    return NULL;
}

/* EINVAL also answers a range of device memory (VM_IO, VM_PFNMAP): asked again of a
 * page of this stack, it says whether the kernel knows the advice at all. */
static int advice_unknown(void)
{
    char here;
    uintptr_t page = (uintptr_t)&here & ~(uintptr_t)4095;
    return mrc_sys_madvise((void *)page, (size_t)4096, MADV_POPULATE_READ) != 0 && errno == EINVAL;
}

int mrc_populate(uint64_t start, uint64_t end, int writable, unsigned threads)
{
    if (__atomic_load_n(&populate_missing, __ATOMIC_RELAXED))
        return -EOPNOTSUPP;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads < 1)
        threads = 1;
    struct share sh[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = { 0 };
    /* Shares on 2 MiB boundaries: two threads never fault in one huge page together. */
    uint64_t per = ((end - start) / threads + MRC_HUGE_SIZE - 1) & ~(MRC_HUGE_SIZE - 1);
    for (unsigned i = 0; i < threads; i++) {
        uint64_t s = start + per * i, e = s + per;
        sh[i] = (struct share){ s < end ? s : end, e < end && i + 1 < threads ? e : end,
                                writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ, 0 };
    }
    pthread_attr_t attr;
    int attr_ok = pthread_attr_init(&attr) == 0;
    if (attr_ok)
        pthread_attr_setstacksize(&attr, STACK_SIZE);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (unsigned i = 1; i < threads; i++) {
        started[i] = pthread_create(&tid[i], attr_ok ? &attr : NULL, share_run, &sh[i]) == 0;
        if (started[i])
            pthread_setname_np(tid[i], "mrcache-pop");
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (attr_ok)
        pthread_attr_destroy(&attr);
    share_run(&sh[0]);
    for (unsigned i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            share_run(&sh[i]);
    }
    for (unsigned i = 0; i < threads; i++) {
        if (sh[i].rc == -EINVAL && advice_unknown()) {
            __atomic_store_n(&populate_missing, 1, __ATOMIC_RELAXED);
            return -EOPNOTSUPP;
        }
        if (sh[i].rc)
            return sh[i].rc;
    }
    return 0;
}
