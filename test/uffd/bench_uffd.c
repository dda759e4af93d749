/* bench_uffd.c - what the userfaultfd source costs (reported, never asserted).
 * Under the preload (run it once with MRCACHE_MONITOR=patch,preload, once with
 * patch,preload,uffd, and MRCACHE_MAX_ENTRIES small so that the NIC's tables stay
 * small): a registration miss (ibv_reg_mr of a new 4 KiB mapping; with uffd it includes
 * UFFDIO_REGISTER) and a raw munmap of a registered mapping (with uffd a round trip
 * through the handler thread). "kernel" alone (no preload): the bare UFFDIO_REGISTER
 * ioctl and munmap of a watched range with a minimal reader thread.
 * Usage: bench_uffd [verbs|kernel] [N]   (N mappings, default 10000) */
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

static int verbs(int n)
{
    int nd = 0;
    struct ibv_device **l = ibv_get_device_list(&nd);
    struct ibv_context *ctx = nd ? ibv_open_device(l[0]) : NULL;
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
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
    syscall(SYS_munmap, big, (size_t)n * 2 * SZ);
    unmap_all("munmap, watched (minimal reader)", p, n);
    char **q = map_all(n);
    unmap_all("munmap, not watched", q, n);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[2]) : 10000;
    return argc > 1 && !strcmp(argv[1], "kernel") ? kernel(n) : verbs(n);
}
