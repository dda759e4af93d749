/* test_uffd_side_effects.c - the userfaultfd source (MRCACHE_MONITOR=...,uffd) must not
 * change the program: its VMA count after registering, releasing and freeing, and after
 * a rereg of a cached registration and its release; mremap of a partly registered
 * mapping; its own UFFDIO_REGISTER; a descriptor number it reuses after closing all it
 * did not open. Run with and without the preload (the reference).
 * Usage: test_uffd_side_effects vma|rereg|mremap|own_uffd|close_range|close_range_unmap */
#include <dirent.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "never.h"

#define MIB (1024ull * 1024)

static long pg;

/* The cache at work before the measurement: its helper threads, pools and userfaultfd
 * exist already, so only what the test does is counted. */
static void warm_up(void)
{
    char *w = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *m = w ? ibv_reg_mr(pd, w, 1 << 16, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(m && ibv_dereg_mr(m) == 0);
    never_quiesce();
}

/* ---- vma ---- */

#define NPAGES 4000
/* The library's own mappings may come and go meanwhile; under ASan its allocator also
 * maps a region (two VMAs) per size class at first use, as the NIC's tables grow with
 * 4000 registrations alive at once. */
#ifdef __SANITIZE_ADDRESS__
#define VMA_SLACK 64
#else
#define VMA_SLACK 16
#endif

static long vma0;

static int vmas_back(void)
{
    return never_maps() <= vma0 + VMA_SLACK;
}

/* 4000 separate pages of one mapping registered and released, then freed as allocators
 * free (MADV_DONTNEED: the mapping stays, its pages go): the VMA count must come back
 * to what it was, as without the cache. */
static void test_vma_count_after_release_and_free(void)
{
    warm_up();
    char *p = map_anon(NULL, 2ull * NPAGES * (size_t)pg, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 1, 2ull * NPAGES * (size_t)pg);
    vma0 = never_maps();
    for (int i = 0; i < NPAGES; i++) {
        struct ibv_mr *m = ibv_reg_mr(pd, p + 2ll * i * pg, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && ibv_dereg_mr(m) == 0);
    }
    long registered = never_maps();
    CHECK(madvise(p, 2ull * NPAGES * (size_t)pg, MADV_DONTNEED) == 0);
    int ok = never_eventually(vmas_back);
    long after = never_maps();
    printf("# VMAs: %ld before, %ld after registering and releasing %d pages, %ld after freeing them (%s)\n",
           vma0, registered, NPAGES, after, never_preloaded() ? "libmrcache" : "no cache");
    CHECKF(ok, "%ld VMAs after freeing, %ld before", after, vma0);
    munmap(p, 2ull * NPAGES * (size_t)pg);
}

/* ---- rereg ---- */

/* The VMAs that [p, p+len) spans, from /proc/self/maps. */
static int vmas_in(const char *p, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    uintptr_t a = (uintptr_t)p, end = a + len, lo, hi;
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo < end && a < hi)
            n++;
    if (f)
        fclose(f);
    return n;
}

#define REREG_PAGES 8
static char *rereg_map;

static int rereg_map_whole(void)
{
    return vmas_in(rereg_map, 2ull * REREG_PAGES * (size_t)pg) == 1;
}

/* Separate pages of one mapping registered, released and registered again (a hit: the
 * cached registration, its page watched), then rereg'd (a new access, or a new
 * translation onto the page beside it), which hands the registration to the handle
 * alone, and deregistered: nothing is left watched, the mapping is one VMA again, as
 * without the cache. */
static void test_vmas_after_rereg_of_cached_registration(void)
{
    warm_up();
    size_t len = 2ull * REREG_PAGES * (size_t)pg;
    char *p = map_anon(NULL, len, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    memset(p, 1, len);
    rereg_map = p;
    int split = 0;
    for (int i = 0; i < REREG_PAGES; i++) {
        char *a = p + 2ll * i * pg, *to = i & 1 ? a + pg : a;
        struct ibv_mr *m = ibv_reg_mr(pd, a, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m && ibv_dereg_mr(m) == 0);
        m = ibv_reg_mr(pd, a, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m != NULL);
        if (!m)
            continue;
        if (vmas_in(p, len) > 1)
            split = 1;
        int rc = i & 1 ? ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, to, (size_t)pg, 0)
                       : ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
        CHECKF(rc == 0, "ibv_rereg_mr of page %d: %d (%s)", i, rc, strerror(errno));
        CHECK(write_visible(m, to, (size_t)pg, (unsigned char)(0x30 + i)));
        CHECK(ibv_dereg_mr(m) == 0);
    }
    int ok = never_eventually(rereg_map_whole);
    printf("# the mapping: %d VMAs after %d rereg'd registrations were released (%s; split while registered: %s)\n",
           vmas_in(p, len), REREG_PAGES, never_preloaded() ? "libmrcache" : "no cache", split ? "yes" : "no");
    CHECKF(ok, "the mapping spans %d VMAs once its rereg'd registrations are gone (1 without the cache)",
           vmas_in(p, len));
    if (never_preloaded() && !split && ok)
        check_skipf("no registration split the mapping: the userfaultfd source is not watching here");
    munmap(p, len);
}

/* ---- mremap ---- */

/* Whether [a, a+len) is mapped throughout, from /proc/self/maps (before touching it: a
 * hole would fault). */
static int mapped_throughout(uintptr_t a, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    uintptr_t at = a, end = a + len, lo, hi;
    char line[512];
    while (f && at < end && fgets(line, sizeof(line), f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= at && at < hi)
            at = hi;
    if (f)
        fclose(f);
    return at >= end;
}

static int pattern_intact(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i += (size_t)pg)
        if (p[i] != (char)(i / (size_t)pg))
            return 0;
    return 1;
}

/* A 4 MiB mapping whose second MiB was registered and released, grown to 8 MiB with
 * MREMAP_MAYMOVE (fixed 0) or moved whole onto another mapping with MREMAP_FIXED (1):
 * succeeds as without the cache, and failed or not the program's memory is whole (no
 * hole to fault in later) with its data; the NIC's writes through a registration of
 * the moved memory land in it. */
static void mremap_case(int fixed)
{
    size_t len = 4 * MIB, to_len = fixed ? len : 2 * len;
    char *p = map_anon(NULL, len, 0), *dst = fixed ? map_anon(NULL, len, 0) : NULL;
    CHECK(p != NULL && (!fixed || dst != NULL));
    if (!p || (fixed && !dst))
        return;
    for (size_t i = 0; i < len; i += (size_t)pg)
        p[i] = (char)(i / (size_t)pg);
    struct ibv_mr *m = ibv_reg_mr(pd, p + MIB, MIB, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    for (size_t i = MIB; i < 2 * MIB; i += (size_t)pg)
        p[i] = (char)(i / (size_t)pg);
    errno = 0;
    char *n = fixed ? mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) : mremap(p, len, to_len, MREMAP_MAYMOVE);
    int e = errno;
    const char *what = fixed ? "mremap(MREMAP_FIXED) moving" : "mremap(MREMAP_MAYMOVE) growing";
    CHECKF(n != MAP_FAILED, "%s the partly registered mapping: %s (succeeds without the cache)", what, strerror(e));
    char *now = n != MAP_FAILED ? n : p;
    int whole = mapped_throughout((uintptr_t)now, len);
    CHECKF(whole, "after %s it (%s), [%p, +4 MiB) is not mapped throughout", what,
           n != MAP_FAILED ? "moved" : "failed", (void *)now);
    if (whole) {
        CHECK(pattern_intact(now, len));
        struct ibv_mr *m2 = ibv_reg_mr(pd, now + MIB, MIB, IBV_ACCESS_LOCAL_WRITE);
        CHECK(m2 && write_visible(m2, now + MIB, MIB, 0x6b));
        if (m2)
            ibv_dereg_mr(m2);
    }
    munmap(now, n != MAP_FAILED ? to_len : len);
    if (fixed && n == MAP_FAILED)
        munmap(dst, len);
}

static void test_mremap_partly_registered_mapping(void)
{
    warm_up();
    mremap_case(0);
    mremap_case(1);
}

/* ---- own_uffd ---- */

/* The program's own userfaultfd on memory it registered and released (the cache may
 * still hold it): UFFDIO_REGISTER works as without the cache, and so does the memory. */
static void test_own_userfaultfd_on_released_memory(void)
{
    warm_up();
    int own = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* UFFD_USER_MODE_ONLY */);
    if (own < 0)
        own = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (own < 0) {
        check_skipf("userfaultfd refused here: %s", strerror(errno));
        return;
    }
    struct uffdio_api api = { .api = UFFD_API };
    CHECK(ioctl(own, UFFDIO_API, &api) == 0);
    size_t len = MIB;
    char *p = map_anon(NULL, len, 0);
    CHECK(p != NULL);
    memset(p, 1, len);
    struct ibv_mr *m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && ibv_dereg_mr(m) == 0);
    struct uffdio_register r = { .range = { (uintptr_t)p, len }, .mode = UFFDIO_REGISTER_MODE_MISSING };
    errno = 0;
    int rc = ioctl(own, UFFDIO_REGISTER, &r);
    CHECKF(rc == 0, "the program's UFFDIO_REGISTER on memory it registered and released: %s (0 without the cache)",
           strerror(errno));
    if (rc == 0) {
        struct uffdio_range u = { (uintptr_t)p, len };
        CHECK(ioctl(own, UFFDIO_UNREGISTER, &u) == 0);
    }
    m = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && write_visible(m, p, len, 0x21));
    if (m)
        ibv_dereg_mr(m);
    close(own);
    munmap(p, len);
}

/* ---- close_range ---- */

/* One past the highest descriptor open now. */
static int fd_end(void)
{
    int end = 3;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int self = d ? dirfd(d) : -1;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' && atoi(de->d_name) != self && atoi(de->d_name) >= end)
            end = atoi(de->d_name) + 1;
    if (d)
        closedir(d);
    return end;
}

/* The program unmapping memory it once registered, from a thread, so that an unmap that
 * never returns is reported rather than hanging the test: 1 if it returned within 10 s. */
static char *unmap_buf;
static int unmap_done;

static void *unmap_thread(void *arg)
{
    (void)arg;
    munmap(unmap_buf, MIB);
    __atomic_store_n(&unmap_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int unmapped(void)
{
    return __atomic_load_n(&unmap_done, __ATOMIC_ACQUIRE);
}

static int unmap_returns(char *p)
{
    pthread_t t;
    unmap_buf = p;
    unmap_done = 0;
    if (pthread_create(&t, NULL, unmap_thread, NULL) != 0)
        return 0;
    if (!never_eventually(unmapped))
        return 0;   /* the thread stays blocked; the process ends without it */
    pthread_join(t, NULL);
    return 1;
}

/* A daemon's habit: close every descriptor it did not open itself (close_range from the
 * first one after its own), then open others, which take the freed numbers: here a
 * pipe on the userfaultfd's old number. Opened first, around the cache, the NIC's own
 * descriptors (its rings and DMA file) stay below the closed range, as a real device's
 * file does when a program opens it before registering. Leaves the pipe in *rd, *wr and
 * two registered and released buffers in p[0], p[1]; 0 if the test is skipped. */
static int close_range_setup(char **p, int *rd, int *wr, int *ufd_out)
{
    void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
    struct ibv_mr *(*real_reg)(struct ibv_pd *, void *, size_t, uint64_t, unsigned) =
        (struct ibv_mr *(*)(struct ibv_pd *, void *, size_t, uint64_t, unsigned))
        (lib ? dlvsym(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8") : NULL);
    char *own = map_anon(NULL, 1 << 16, 0);
    struct ibv_mr *own_mr = real_reg && own ? real_reg(pd, own, 1 << 16, (uintptr_t)own, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(own_mr && write_visible(own_mr, own, 1 << 16, 1));    /* the NIC's files are open now */
    int first = fd_end();
    /* The registrations: through the cache (which opens its userfaultfd), released. */
    for (int i = 0; i < 2; i++) {
        p[i] = map_anon(NULL, MIB, 0);
        struct ibv_mr *m = p[i] ? ibv_reg_mr(pd, p[i], MIB, IBV_ACCESS_LOCAL_WRITE) : NULL;
        CHECK(m && ibv_dereg_mr(m) == 0);
    }
    int ufd = uffd_fd_find();
    *ufd_out = ufd;
    if (never_preloaded() && ufd < 0) {
        check_skipf("no userfaultfd open: run with MRCACHE_MONITOR=patch,preload,uffd");
        return 0;
    }
    if (ufd >= 0 && ufd < first) {
        check_skipf("the userfaultfd (%d) is below the program's own descriptors (%d)", ufd, first);
        return 0;
    }
    CHECK(syscall(SYS_close_range, first, ~0u, 0) == 0);
    int fds[2];
    CHECK(pipe(fds) == 0);
    *rd = fds[0];
    *wr = fds[1];
    if (*wr == ufd) {
        *wr = dup(fds[1]);
        close(fds[1]);
    }
    if (ufd >= 0 && *rd != ufd) {
        /* Whichever descriptor the program opens next takes a freed number; make it
         * this one's. */
        CHECK(dup2(fds[0], ufd) == ufd);
        close(fds[0]);
        *rd = ufd;
    }
    return 1;
}

/* Writes 256 bytes into the pipe (unless already written) and reads them back: they must
 * all reach the program, nobody else may take them. Bounded: 10 s for bytes written. */
static void pipe_roundtrip(int rd, int wr, int ufd, int written)
{
    char msg[256], got[256] = { 0 };
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (char)(i * 7 + 1);
    if (!written)
        CHECK(write(wr, msg, sizeof(msg)) == (ssize_t)sizeof(msg));
    size_t have = 0;
    struct pollfd pf = { .fd = rd, .events = POLLIN };
    while (have < sizeof(got) && poll(&pf, 1, 10000) == 1) {
        ssize_t n = read(rd, got + have, sizeof(got) - have);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    CHECKF(have == sizeof(msg) && !memcmp(got, msg, sizeof(msg)),
           "the program read %zu of the %zu bytes it wrote into its pipe (fd %d, the userfaultfd's number was %d)",
           have, sizeof(msg), rd, ufd);
}

/* Registrations still work after it all. */
static void registration_works(void)
{
    char *q = map_anon(NULL, MIB, 0);
    struct ibv_mr *mq = q ? ibv_reg_mr(pd, q, MIB, IBV_ACCESS_LOCAL_WRITE) : NULL;
    CHECK(mq && write_visible(mq, q, MIB, 0x44));
    if (mq)
        ibv_dereg_mr(mq);
    munmap(q, MIB);
}

/* Data in the pipe first, then the program unmaps memory it once registered: the unmap
 * returns, and the data reaches the program intact. */
static void test_close_range_then_reused_number(void)
{
    char *p[2];
    int rd, wr, ufd;
    if (!close_range_setup(p, &rd, &wr, &ufd))
        return;
    char msg[256];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (char)(i * 7 + 1);
    CHECK(write(wr, msg, sizeof(msg)) == (ssize_t)sizeof(msg));
    int ret = unmap_returns(p[0]);
    CHECKF(ret, "munmap of memory the program once registered did not return (10 s)");
    if (!ret)
        return;
    pipe_roundtrip(rd, wr, ufd, 1);
    CHECKF(unmap_returns(p[1]), "a second munmap did not return (10 s)");
    registration_works();
}

/* The program unmaps memory it once registered while its pipe is empty: the unmap
 * returns, and data it writes afterwards reaches it intact. */
static void test_unmap_after_close_range_returns(void)
{
    char *p[2];
    int rd, wr, ufd;
    if (!close_range_setup(p, &rd, &wr, &ufd))
        return;
    int ret = unmap_returns(p[0]);
    CHECKF(ret, "munmap of memory the program once registered did not return (10 s)");
    if (!ret)
        return;
    pipe_roundtrip(rd, wr, ufd, 0);
    CHECKF(unmap_returns(p[1]), "a second munmap did not return (10 s)");
    registration_works();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    pg = sysconf(_SC_PAGESIZE);
    /* A daemon starts by closing what it inherited: here, so that the descriptors the
     * test later counts as its own are only the NIC's. */
    if (!strncmp(mode, "close_range", 11) && syscall(SYS_close_range, 3, ~0u, 0) != 0) {
        perror("close_range");
        return 2;
    }
    open_nic();
    never_resolve_injector();   /* the software NIC is needed */
    if (!strcmp(mode, "vma"))
        RUN(test_vma_count_after_release_and_free);
    else if (!strcmp(mode, "rereg"))
        RUN(test_vmas_after_rereg_of_cached_registration);
    else if (!strcmp(mode, "mremap"))
        RUN(test_mremap_partly_registered_mapping);
    else if (!strcmp(mode, "own_uffd"))
        RUN(test_own_userfaultfd_on_released_memory);
    else if (!strcmp(mode, "close_range"))
        RUN(test_close_range_then_reused_number);
    else if (!strcmp(mode, "close_range_unmap"))
        RUN(test_unmap_after_close_range_returns);
    else {
        fprintf(stderr, "usage: test_uffd_side_effects vma|rereg|mremap|own_uffd|close_range|close_range_unmap\n");
        return 2;
    }
    CHECK_EXIT();
}
