/* common.h - helpers for the preload tests: open the device, register through the
 * ordinary verbs API (these programs know nothing of libmrcache), and check where an
 * RDMA write lands. Two data paths, chosen at run time: the software NIC's test API
 * (snic_*, looked up with dlsym, never linked) moves bytes into an MR's pinned pages by
 * lkey; on a real device (rxe in the VM) a loopback RC RDMA WRITE by rkey does. Header-only. */
#ifndef MRC_PRELOAD_COMMON_H
#define MRC_PRELOAD_COMMON_H

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "../../include/mrcache.h"  /* the cache's own count, on a real device */
#include "rdma_loop.h"
#include "snic.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;

/* The software NIC's test API, if the libibverbs.so.1 in use is the software NIC. Looked
 * up rather than linked, so the same sources also build against the system libibverbs. */
static struct {
    int real;   /* 1: a real device; the snic pointers are NULL */
    int (*local_write)(uint32_t lkey, uint64_t addr, const void *src, size_t len);
    int (*rdma_write)(uint32_t rkey, uint64_t remote_addr, const void *src, size_t len);
    void (*get_stats)(struct snic_stats *out);
    /* libibverbs' own registration calls, around any preload: the loop's source buffer is
     * the test's plumbing, so it stays out of libmrcache's cache and counts. */
    struct ibv_mr *(*real_reg)(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
    int (*real_dereg)(struct ibv_mr *);
} nic;

/* Access for MRs the tests write into with write_visible: a real device's RDMA WRITE
 * needs REMOTE_WRITE. Under libmrcache remote rights make the cache serve exact-range
 * matches only, which the stale tests still exercise (they re-register the same range).
 * A conditional of two constants, so verbs.h still sees constant flags (plain ibv_reg_mr). */
#define TEST_ACCESS(flags) (nic.real ? (flags) | IBV_ACCESS_REMOTE_WRITE : (flags))

/* Tests whose assertions read the software NIC's own counters or error codes. */
#define RUN_SOFT_NIC(fn, why) (nic.real ? check_skip(#fn, "real device: " why) : (void)RUN(fn))

/* ------------------------------------------------------------- real device: the loop
 * One loopback QP pair at a time, in the PD of the MR being written (a real NIC checks
 * that the rkey's PD is the QP's), with a 1 MiB source buffer registered in that PD
 * around the cache and held while the loop lives. Opened eagerly by open_nic and
 * nic_prepare_pd, so tests that lay out the heap see no verbs objects created midway;
 * lazily for any other PD (a forked child's own device). */
#define LOOP_SRC (1u << 20)
static struct {
    pthread_mutex_t lock;       /* the loop's CQ is polled by one writer at a time */
    struct rdma_loop l;
    pid_t pid;                  /* the process that opened it; 0: closed */
    unsigned char *src;
    struct ibv_mr *src_mr;
} loop = { .lock = PTHREAD_MUTEX_INITIALIZER };

static inline int test_gid_index(void)
{
    const char *s = getenv("MRCACHE_TEST_GID_INDEX");
    return s ? atoi(s) : 0;
}

/* Called with loop.lock held (or single-threaded). */
static inline void loop_close_locked(void)
{
    if (loop.pid != getpid()) {
        /* A forked child's copy of the parent's loop: the objects belong to the parent's
         * device file, which the child shares; destroying them would break the parent. */
        memset(&loop.l, 0, sizeof(loop.l));
        loop.pid = 0;
        loop.src = NULL;
        loop.src_mr = NULL;
        return;
    }
    rdma_loop_close(&loop.l);
    if (loop.src_mr)
        nic.real_dereg(loop.src_mr);
    if (loop.src)
        munmap(loop.src, LOOP_SRC);
    loop.src_mr = NULL;
    loop.src = NULL;
    loop.pid = 0;
}

static inline int loop_open_locked(struct ibv_pd *p)
{
    if (loop.pid && loop.pid == getpid() && loop.l.pd == p)
        return 0;
    loop_close_locked();
    /* The source comes from mmap, not malloc: some tests move the heap's end by hand. */
    loop.src = mmap(NULL, LOOP_SRC, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (loop.src == MAP_FAILED) {
        loop.src = NULL;
        return -1;
    }
    loop.pid = getpid();
    loop.src_mr = nic.real_reg(p, loop.src, LOOP_SRC, (uintptr_t)loop.src, IBV_ACCESS_LOCAL_WRITE);
    if (!loop.src_mr || rdma_loop_open(&loop.l, p, test_gid_index()) != 0) {
        fprintf(stderr, "cannot set up the loopback QP pair on %s\n",
                ibv_get_device_name(p->context->device));
        loop_close_locked();
        return -1;
    }
    return 0;
}

/* A peer's RDMA WRITE of len bytes to remote_addr (iova) through rkey of an MR in p, from
 * src, or of byte v if src is NULL; posted in 1 MiB pieces from the loop's source buffer.
 * Returns 0 or an errno value: EIO for a failed completion (on rxe a remote access error,
 * whether the rights or the range were wrong). */
static inline int loop_write(struct ibv_pd *p, uint32_t rkey, uint64_t remote_addr,
                             const void *src, unsigned char v, size_t len)
{
    int rc = 0;

    pthread_mutex_lock(&loop.lock);
    if (loop_open_locked(p) != 0)
        rc = EIO;
    else if (!src)
        memset(loop.src, v, LOOP_SRC);
    for (size_t off = 0; !rc && off < len; off += LOOP_SRC) {
        size_t n = len - off < LOOP_SRC ? len - off : LOOP_SRC;
        if (src)
            memcpy(loop.src, (const unsigned char *)src + off, n);
        if (rdma_loop_write(&loop.l, loop.src_mr->lkey, loop.src, remote_addr + off, rkey, n)) {
            /* A failed completion leaves both QPs in the error state: start afresh. */
            loop_close_locked();
            rc = EIO;
        }
    }
    pthread_mutex_unlock(&loop.lock);
    return rc;
}

/* On a real device, sets up the loop for p now rather than at its first write (tests
 * that lay out the heap must not see verbs objects created in the middle). */
static inline void nic_prepare_pd(struct ibv_pd *p)
{
    if (!nic.real)
        return;
    pthread_mutex_lock(&loop.lock);
    if (loop_open_locked(p) != 0) {
        fprintf(stderr, "no loopback QP pair on the test device\n");
        exit(2);
    }
    pthread_mutex_unlock(&loop.lock);
}

/* ibv_dealloc_pd for a PD the loop may be in (its QPs would make it fail EBUSY). */
static inline int nic_dealloc_pd(struct ibv_pd *p)
{
    pthread_mutex_lock(&loop.lock);
    if (loop.pid && loop.l.pd == p)
        loop_close_locked();
    pthread_mutex_unlock(&loop.lock);
    return ibv_dealloc_pd(p);
}

/* ------------------------------------------------------------- both */

/* Finds the software NIC's API, or on a real device libibverbs' own registration calls;
 * once (open_nic does it; the accessors too, for a program that never opened the NIC). */
static inline void nic_resolve(void)
{
    static int done;

    if (done)
        return;
    nic.local_write = (int (*)(uint32_t, uint64_t, const void *, size_t))dlsym(RTLD_DEFAULT, "snic_local_write");
    nic.rdma_write = (int (*)(uint32_t, uint64_t, const void *, size_t))dlsym(RTLD_DEFAULT, "snic_rdma_write");
    nic.get_stats = (void (*)(struct snic_stats *))dlsym(RTLD_DEFAULT, "snic_get_stats");
    nic.real = !nic.local_write;
    if (nic.real != !nic.rdma_write || nic.real != !nic.get_stats) {
        fprintf(stderr, "the software NIC's test API is incomplete\n");
        exit(2);
    }
    if (nic.real) {
        /* libibverbs is loaded (the program links it): its versioned symbols are the real
         * ones even under a preload, as NCCL finds them. */
        void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
        nic.real_reg = (struct ibv_mr *(*)(struct ibv_pd *, void *, size_t, uint64_t, unsigned))
            (lib ? dlvsym(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8") : NULL);
        nic.real_dereg = (int (*)(struct ibv_mr *))(lib ? dlvsym(lib, "ibv_dereg_mr", "IBVERBS_1.1") : NULL);
        if (!nic.real_reg || !nic.real_dereg) {
            fprintf(stderr, "libibverbs' own ibv_reg_mr_iova2/ibv_dereg_mr not found\n");
            exit(2);
        }
    }
    done = 1;
}

/* Opens MRCACHE_TEST_DEVICE (else the first device) and a pd; exits 2 if it cannot. */
static inline void open_nic(void)
{
    const char *want = getenv("MRCACHE_TEST_DEVICE");
    int n = 0, i = 0;

    nic_resolve();
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n < 1) {
        fprintf(stderr, "no RDMA device\n");
        exit(2);
    }
    if (want && *want)
        while (i < n && strcmp(ibv_get_device_name(list[i]), want) != 0)
            i++;
    if (i == n) {
        fprintf(stderr, "device %s not found (%d devices)\n", want, n);
        exit(2);
    }
    ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) {
        fprintf(stderr, "cannot open the device or allocate a pd\n");
        exit(2);
    }
    nic_prepare_pd(pd);
}

/* Registrations made on the device. Software NIC: its own counter. Real device: what
 * libmrcache reports as really registered (include/mrcache.h): rxe keeps no count a
 * process can read cheaply; the loop's source is registered around the cache. */
static inline uint64_t nic_regs(void)
{
    struct snic_stats s;
    struct mrcache_stats ms;

    nic_resolve();
    if (nic.real) {
        if (mrcache_stats_read(sizeof(ms), &ms) != 0) {
            fprintf(stderr, "real device without libmrcache: no registration count\n");
            exit(2);
        }
        return ms.real_regs;
    }
    nic.get_stats(&s);
    return s.reg_calls;
}

/* libmrcache's userfaultfd, found as a program could find it in /proc/self/fd: its
 * descriptor number, or -1. */
static inline int uffd_fd_find(void)
{
    char link[64], target[64];
    for (int fd = 3; fd < 1024; fd++) {
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = 0;
            if (strstr(target, "userfaultfd"))
                return fd;
        }
    }
    return -1;
}

/* MRs alive on the device. Software NIC: all of them, whoever made them. Real device:
 * the registrations libmrcache holds (made around it, the loop's source is not one), so
 * tests counting MRs made around the cache run only on the software NIC. */
static inline uint64_t nic_live(void)
{
    struct snic_stats s;
    struct mrcache_stats ms;

    nic_resolve();
    if (nic.real) {
        if (mrcache_stats_read(sizeof(ms), &ms) != 0) {
            fprintf(stderr, "real device without libmrcache: no count of live MRs\n");
            exit(2);
        }
        return ms.registrations;
    }
    nic.get_stats(&s);
    return s.live_mrs;
}

/* Whether the device can move an MR to new memory (IBV_REREG_MR_CHANGE_TRANSLATION),
 * tried on a registration of its own made around any preload (the real functions, as
 * dlvsym finds them), so the answer is the device's, not the cache's. The software NIC
 * can; rxe cannot (its kernel driver has no translation change). Real devices only: it
 * makes a registration the software NIC would count. */
static inline int nic_rereg_translation_works(void)
{
    void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    int (*rereg)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int) =
        (int (*)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int))
        (lib ? dlvsym(lib, "ibv_rereg_mr", "IBVERBS_1.1") : NULL);
    char *p = mmap(NULL, 2 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int ok = 0;

    if (rereg && nic.real_reg && p != MAP_FAILED) {
        struct ibv_mr *mr = nic.real_reg(pd, p, 1 << 16, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE);
        if (mr) {
            ok = rereg(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, p + (1 << 16), 1 << 16, 0) == 0;
            nic.real_dereg(mr);
        }
    }
    if (p != MAP_FAILED)
        munmap(p, 2 << 16);
    if (lib)
        dlclose(lib);
    return ok;
}

/* A peer's RDMA WRITE through rkey of an MR in pd: the software NIC's, or the loop's. */
static inline int nic_rdma_write(uint32_t rkey, uint64_t remote_addr, const void *src, size_t len)
{
    nic_resolve();
    if (!nic.real)
        return nic.rdma_write(rkey, remote_addr, src, len);
    return loop_write(pd, rkey, remote_addr, src, 0, len);
}

/* Writes byte v into [p, p+len) through mr and reports whether the current mapping sees
 * it: a stale MR writes into pages no longer mapped. Software NIC: into the pinned pages
 * by lkey; real device: a loopback RDMA WRITE by rkey (mr needs TEST_ACCESS). */
static inline int write_visible(struct ibv_mr *mr, void *p, size_t len, unsigned char v)
{
    int rc;

    nic_resolve();
    if (nic.real) {
        memset(p, (unsigned char)~v, len);
        rc = loop_write(mr->pd, mr->rkey, (uint64_t)(uintptr_t)p, NULL, v, len);
        if (rc)
            fprintf(stderr, "loopback RDMA WRITE: %s\n", strerror(rc));
    } else {
        /* The source comes from mmap, not malloc: some tests move the heap's end by hand. */
        unsigned char *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (src == MAP_FAILED)
            return 0;
        memset(src, v, len);
        memset(p, (unsigned char)~v, len);
        rc = nic.local_write(mr->lkey, (uint64_t)(uintptr_t)p, src, len);
        munmap(src, len);
        if (rc)
            fprintf(stderr, "snic_local_write: %s\n", strerror(rc));
    }
    if (rc)
        return 0;
    const unsigned char *q = p;
    for (size_t i = 0; i < len; i++)
        if (q[i] != v)
            return 0;
    return 1;
}

static inline void *map_anon(void *hint, size_t len, int flags)
{
    void *p = mmap(hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The kernel directly, as allocators that make their own system calls do: no hook and
 * no patched entry point sees these; only the userfaultfd source does. */
static inline long inline_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}

/* syscall(3)'s result and errno, made with the instruction (syscall(3) itself is hooked
 * as the calls it stands for): RAW_SYSCALL(SYS_munmap, p, len). */
static inline long raw_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    long r = inline_syscall6(n, a, b, c, d, e, f);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}
#define RAW_SYSCALL(...) RAW_SYSCALL_(__VA_ARGS__, 0, 0, 0, 0, 0, 0)
#define RAW_SYSCALL_(n, a, b, c, d, e, f, ...)                                                        \
    raw_syscall6((long)(n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

#endif
