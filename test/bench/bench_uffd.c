/* bench_uffd.c - what the userfaultfd source costs (reported, never asserted).
 * Under the preload (run it once with MRCACHE_MONITOR=patch,preload, once with
 * patch,preload,uffd, and MRCACHE_MAX_ENTRIES small so that the NIC's tables stay
 * small): a registration miss (ibv_reg_mr of a new 4 KiB mapping; with uffd it includes
 * UFFDIO_REGISTER) and a raw munmap of a registered mapping (with uffd a round trip
 * through the handler thread). "munmap": munmap (libc's) of a 64 KiB buffer registered
 * and released, one at a time, then the same once its registration was deregistered. "hooks": close and ioctl, which the source's descriptor
 * and UFFDIO_REGISTER hooks stand in front of (run with and without the preload).
 * "kernel" alone (no preload): the bare UFFDIO_REGISTER and UFFDIO_UNREGISTER ioctls,
 * munmap of a watched range with a minimal reader thread, and UFFDIO_UNREGISTER while
 * another thread holds the address space's lock for reading (populating 1 GiB): it waits
 * for the write lock.
 * Usage: bench_uffd [verbs|munmap|hooks|kernel] [N]   (N mappings, default 10000) */
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mrcache.h"

#define SZ 4096u

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static char **map_all(int n)
{
    char **p = calloc((size_t)n, sizeof(*p));
    for (int i = 0; p && i < n; i++) {
        p[i] = (char *)syscall(SYS_mmap, 0, SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p[i] == MAP_FAILED)
            exit(2);
        p[i][0] = 1;
    }
    return p;
}

static void unmap_all(const char *what, char **p, int n)
{
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        syscall(SYS_munmap, p[i], SZ);
    printf("%-40s %8.0f ns\n", what, (double)(now_ns() - t0) / n);
}

static struct ibv_pd *open_pd(void)
{
    int nd = 0;
    struct ibv_device **l = ibv_get_device_list(&nd);
    struct ibv_context *ctx = nd ? ibv_open_device(l[0]) : NULL;
    return ctx ? ibv_alloc_pd(ctx) : NULL;
}

static int verbs(int n)
{
    struct ibv_pd *pd = open_pd();
    if (!pd)
        return 2;
    char **p = map_all(n);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, p[i], SZ, IBV_ACCESS_LOCAL_WRITE);
        if (!mr || ibv_dereg_mr(mr))
            return 1;
    }
    printf("%-40s %8.0f ns\n", "registration miss (reg+dereg, 4 KiB)", (double)(now_ns() - t0) / n);
    unmap_all("raw munmap of a registered mapping", p, n);
    char **q = map_all(n);
    unmap_all("raw munmap of an unregistered mapping", q, n);
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* munmap of a registered and released 64 KiB buffer, each timed on its own: the median
 * (a VM's scheduling makes the mean noisy) and the mean. flushed: the registration is
 * deregistered first (mrcache_flush), so that nothing needs the range any more. */
static int munmap_released(int n, int flushed)
{
    struct ibv_pd *pd = open_pd();
    uint64_t *t = calloc((size_t)n, sizeof(*t));
    if (!pd || !t)
        return 2;
    size_t sz = 64u << 10;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        char *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 2;
        memset(p, 1, sz);
        struct ibv_mr *mr = ibv_reg_mr(pd, p, sz, IBV_ACCESS_LOCAL_WRITE);
        if (!mr || ibv_dereg_mr(mr))
            return 1;
        if (flushed)
            mrcache_flush(NULL, 0);
        uint64_t t0 = now_ns();
        munmap(p, sz);
        t[i] = now_ns() - t0;
        total += t[i];
    }
    qsort(t, (size_t)n, sizeof(*t), cmp_u64);
    printf("%-40s %8.0f ns (mean %.0f ns)\n",
           flushed ? "munmap of a deregistered 64 KiB buffer" : "munmap of a released 64 KiB buffer",
           (double)t[n / 2], (double)total / n);
    free(t);
    return 0;
}

/* close (of a dup) and ioctl(FIONREAD) on a pipe: the calls the hooks stand in front of. */
static int hooks(int n)
{
    int pfd[2];
    if (pipe(pfd))
        return 2;
    n *= 100;
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++)
        close(dup(pfd[0]));
    uint64_t t1 = now_ns();
    for (int i = 0; i < n; i++) {
        int avail;
        ioctl(pfd[0], FIONREAD, &avail);
    }
    uint64_t t2 = now_ns();
    for (int i = 0; i < n; i++)
        syscall(SYS_close, dup(pfd[0]));
    uint64_t t3 = now_ns();
    printf("%-40s %8.1f ns\n", "close(dup(fd))", (double)(t1 - t0) / n);
    printf("%-40s %8.1f ns\n", "dup(fd) + raw close", (double)(t3 - t2) / n);
    printf("%-40s %8.1f ns\n", "ioctl(FIONREAD)", (double)(t2 - t1) / n);
    return 0;
}

static int ufd;

static void *reader(void *arg)
{
    (void)arg;
    struct uffd_msg m[32];
    struct pollfd pf = { .fd = ufd, .events = POLLIN };
    for (;;)
        if (poll(&pf, 1, -1) > 0)
            (void)!read(ufd, m, sizeof(m));
    return NULL;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static char *populate_buf;
static volatile int populating;
static void *populate(void *arg)
{
    (void)arg;
    populating = 1;
    madvise(populate_buf, 1ul << 30, MADV_POPULATE_WRITE);
    return NULL;
}

/* UFFDIO_UNREGISTER of one page while another thread populates 1 GiB, which holds the
 * address space's lock for reading: the ioctl waits for it to write. */
static void unregister_behind_reader(char *page)
{
    struct uffdio_register r = { .range = { (uintptr_t)page, SZ }, .mode = UFFDIO_REGISTER_MODE_WP };
    populate_buf = mmap(NULL, 1ul << 30, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    pthread_t t;
    if (populate_buf == MAP_FAILED || ioctl(ufd, UFFDIO_REGISTER, &r) || pthread_create(&t, NULL, populate, NULL))
        return;
    while (!populating)
        ;
    usleep(2000);
    uint64_t t0 = now_ns();
    struct uffdio_range u = { (uintptr_t)page, SZ };
    ioctl(ufd, UFFDIO_UNREGISTER, &u);
    uint64_t t1 = now_ns();
    pthread_join(t, NULL);
    uint64_t t2 = now_ns();
    printf("%-40s %8.1f ms (the populate: %.1f ms more)\n", "UFFDIO_UNREGISTER behind a 1 GiB populate",
           (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6);
    munmap(populate_buf, 1ul << 30);
}

static int kernel(int n)
{
    ufd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* UFFD_USER_MODE_ONLY */);
    struct uffdio_api api = { .api = UFFD_API, .features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
                                                           UFFD_FEATURE_EVENT_REMAP };
    if (ufd < 0 || ioctl(ufd, UFFDIO_API, &api))
        return 2;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    char **p = map_all(n);
    uint64_t t0 = now_ns();
    for (int i = 0; i < n; i++) {
        struct uffdio_register r = { .range = { (uintptr_t)p[i], SZ }, .mode = UFFDIO_REGISTER_MODE_WP };
        if (ioctl(ufd, UFFDIO_REGISTER, &r))
            return 1;
    }
    printf("%-40s %8.0f ns\n", "UFFDIO_REGISTER (WP, a whole mapping)", (double)(now_ns() - t0) / n);
    t0 = now_ns();
    for (int i = 0; i < n; i++) {
        struct uffdio_register r = { .range = { (uintptr_t)p[i], SZ }, .mode = UFFDIO_REGISTER_MODE_WP };
        ioctl(ufd, UFFDIO_REGISTER, &r);
    }
    printf("%-40s %8.0f ns\n", "UFFDIO_REGISTER again (already watched)", (double)(now_ns() - t0) / n);
    /* A page in the middle of a mapping: the VMA splits in three. */
    char *big = (char *)syscall(SYS_mmap, 0, (size_t)n * 2 * SZ, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    t0 = now_ns();
    for (int i = 0; i < n; i++) {
        struct uffdio_register r = { .range = { (uintptr_t)big + (2u * i + 1) * SZ, SZ },
                                     .mode = UFFDIO_REGISTER_MODE_WP };
        if (ioctl(ufd, UFFDIO_REGISTER, &r))
            return 1;
    }
    printf("%-40s %8.0f ns\n", "UFFDIO_REGISTER (a page inside: splits)", (double)(now_ns() - t0) / n);
    t0 = now_ns();
    for (int i = 0; i < n; i++) {
        struct uffdio_range r = { (uintptr_t)big + (2u * i + 1) * SZ, SZ };
        if (ioctl(ufd, UFFDIO_UNREGISTER, &r))
            return 1;
    }
    printf("%-40s %8.0f ns\n", "UFFDIO_UNREGISTER (a page inside: merges)", (double)(now_ns() - t0) / n);
    unregister_behind_reader(big);
    syscall(SYS_munmap, big, (size_t)n * 2 * SZ);
    unmap_all("munmap, watched (minimal reader)", p, n);
    char **q = map_all(n);
    unmap_all("munmap, not watched", q, n);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[2]) : 10000;
    const char *mode = argc > 1 ? argv[1] : "verbs";
    if (!strcmp(mode, "kernel"))
        return kernel(n);
    if (!strcmp(mode, "munmap"))
        return munmap_released(n, 0) || munmap_released(n, 1);
    if (!strcmp(mode, "hooks"))
        return hooks(n);
    return verbs(n);
}
