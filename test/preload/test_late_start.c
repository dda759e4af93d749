/* test_late_start.c - libmrcache starting everything at the first registration of a
 * program that did not link libibverbs, while other threads run through the very entry
 * points it patches: in each of ROUNDS children (argv[1], default 300), three threads
 * loop on munmap, mmap(MAP_FIXED), madvise(MADV_DONTNEED), malloc and free while the main
 * thread loads libibverbs with dlopen and registers (libc's entry points and libibverbs'
 * are rewritten then). Every child must live, its threads must keep running through the
 * rewrite, and the cache must have started (mrcache_monitors() > 0 under the preload).
 * After the start, a buffer replaced by mmap(MAP_FIXED) is registered again and must get
 * the new pages (the patched path sees the call). */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "snic.h"

#define LEN (64u << 10)
#define THREADS 3

static volatile int stop;
static unsigned long laps[THREADS];

static void *churn(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    char *own = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (own == MAP_FAILED)
        return NULL;
    while (!stop) {
        own[0] = 1;
        madvise(own, LEN, MADV_DONTNEED);
        mmap(own, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        char *q = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (q != MAP_FAILED)
            munmap(q, LEN);
        free(malloc(1 + (laps[k] & 0xffff)));
        free(malloc(256 << 10));   /* an mmapped chunk: free unmaps inside libc */
        __atomic_add_fetch(&laps[k], 1, __ATOMIC_RELAXED);
    }
    munmap(own, LEN);
    return NULL;
}

static int child(void)
{
    alarm(60);
    pthread_t t[THREADS];
    for (unsigned k = 0; k < THREADS; k++)
        if (pthread_create(&t[k], NULL, churn, (void *)(uintptr_t)k))
            return 10;
    while (!__atomic_load_n(&laps[THREADS - 1], __ATOMIC_RELAXED))
        sched_yield();
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 11;
    struct ibv_device **(*list_fn)(int *) = (struct ibv_device **(*)(int *))dlsym(h, "ibv_get_device_list");
    struct ibv_context *(*open_fn)(struct ibv_device *) = (struct ibv_context *(*)(struct ibv_device *))dlsym(h, "ibv_open_device");
    struct ibv_pd *(*pd_fn)(struct ibv_context *) = (struct ibv_pd *(*)(struct ibv_context *))dlsym(h, "ibv_alloc_pd");
    struct ibv_mr *(*reg)(struct ibv_pd *, void *, size_t, int) =
        (struct ibv_mr *(*)(struct ibv_pd *, void *, size_t, int))dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1");
    int (*dereg)(struct ibv_mr *) = (int (*)(struct ibv_mr *))dlvsym(h, "ibv_dereg_mr", "IBVERBS_1.1");
    int (*local_write)(uint32_t, uint64_t, const void *, size_t) =
        (int (*)(uint32_t, uint64_t, const void *, size_t))dlsym(h, "snic_local_write");
    if (!list_fn || !open_fn || !pd_fn || !reg || !dereg || !local_write)
        return 12;
    struct ibv_device **list = list_fn(NULL);
    struct ibv_context *ctx = list && list[0] ? open_fn(list[0]) : NULL;
    struct ibv_pd *pd = ctx ? pd_fn(ctx) : NULL;
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct ibv_mr *a = pd ? reg(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;   /* everything starts here */
    if (!a || dereg(a))
        return 13;
    /* Every thread laps again after the rewrite (none is stuck in a rewritten entry). */
    unsigned long before[THREADS];
    for (unsigned k = 0; k < THREADS; k++)
        before[k] = __atomic_load_n(&laps[k], __ATOMIC_RELAXED);
    int rc = 0;
    for (unsigned k = 0; k < THREADS && !rc; k++) {
        int waited = 0;
        while (__atomic_load_n(&laps[k], __ATOMIC_RELAXED) == before[k] && waited++ < 5000)
            usleep(1000);
        if (__atomic_load_n(&laps[k], __ATOMIC_RELAXED) == before[k])
            rc = 14;
    }
    int (*monitors)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mrcache_monitors");
    if (!rc && monitors && getenv("EXPECT_STARTED") && monitors() <= 0)
        rc = 15;
    /* The new pages after an mmap(MAP_FIXED) over the buffer, made through the (now
     * patched) libc (an munmap would leave the address to the other threads' mmaps). */
    if (!rc && mmap(p, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p)
        rc = 16;
    struct ibv_mr *b = rc ? NULL : reg(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    char v = 0x5a;
    if (!rc && (!b || local_write(b->lkey, (uintptr_t)p + 100, &v, 1) || p[100] != 0x5a))
        rc = 17;
    if (b)
        dereg(b);
    stop = 1;
    for (unsigned k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    return rc;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    int bad = 0, first_rc = 0;
    for (int i = 0; i < rounds; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0)
            _exit(child());
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
            if (!bad++)
                first_rc = WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
        }
    }
    CHECKF(bad == 0, "%d of %d children failed (the first: %s %d)", bad, rounds, first_rc < 0 ? "signal" : "status",
           first_rc < 0 ? -first_rc : first_rc);
    check_report("test_first_registration_starts_while_threads_unmap");
    CHECK_EXIT();
}
