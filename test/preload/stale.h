/* stale.h - what the programs that change registered memory behind the cache's back share
 * (test_unmap_paths, test_monitor_paths, test_ucs, test_uffd, test_verify, ...): a pd per
 * test, the verdict EXPECT_STALE inverts, the register / change / register-again check, glibc's chunk headers read by address, a forked
 * child's run (which releases what it cached before it exits), whether page frame numbers
 * can be read, and the glibc paths several of them take (a thread's reused stack, free of
 * an mmapped chunk, malloc_trim, heap trimming in free). Header-only, over common.h. */
#ifndef MRC_PRELOAD_STALE_H
#define MRC_PRELOAD_STALE_H

#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>

#include "common.h"

/* Set by main from EXPECT_STALE: the run leaves out the source that would see the
 * change, so the write through the new MR must be lost (proof that the checks can fail). */
static int expect_stale;

/* Each test registers in a pd of its own: the cache keys on the pd, so a stale entry
 * left by one test (in a run with no source that sees its change) cannot serve another.
 * The pd is freed inside the test that used it, after its body: ibv_dealloc_pd fails
 * (EBUSY) while the program still holds an MR of it, so a test that leaves one
 * registered fails itself, the last one too. The cache's own entries of the pd go with
 * it (libmrcache flushes them first). */
static inline void release_pd(void)
{
    if (!pd)
        return;
    int rc = nic_dealloc_pd(pd);
    CHECKF(rc == 0, "ibv_dealloc_pd: %s: an MR of the test's pd is still registered", strerror(rc));
    pd = NULL;
}

static inline void alloc_pd(void)
{
    pd = ibv_alloc_pd(ctx);
    if (!pd) {
        fprintf(stderr, "ibv_alloc_pd failed\n");
        exit(2);
    }
    nic_prepare_pd(pd);     /* a real device's loopback QPs: before the test lays out memory */
}

/* After each test's body (check_after_test): its pd freed, and a fresh one for what
 * follows (a test that registers in the pd it finds). */
static void pd_after_test(void)
{
    release_pd();
    alloc_pd();
}

static inline void new_pd(void)
{
    pd_after_test();
    check_after_test = pd_after_test;
}

/* The verdict on a write through a new MR of memory that was changed: in the current
 * mapping, or under EXPECT_STALE lost in the old pages. */
static inline void check_outcome(int visible, const char *what)
{
    if (expect_stale)
        CHECKF(!visible, "%s: expected the stale MR's write to be invisible", what);
    else
        CHECKF(visible, "%s: the write through the new MR is not in the current mapping: stale MR", what);
}

/* The core check: p registered and written through, deregistered (cached under the
 * preload), changed by change, registered again: the write through the new MR must be
 * in the current pages (check_outcome; what names the change). */
typedef void (*stale_change_fn)(void *p, size_t len);
__attribute__((unused)) static void stale_check(void *p, size_t len, stale_change_fn change, const char *what)
{
    struct ibv_mr *a = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a != NULL);
    if (!a)
        return;
    CHECK(write_visible(a, p, len, 0x11));
    CHECK(ibv_dereg_mr(a) == 0);
    change(p, len);
    struct ibv_mr *b = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b != NULL);
    if (!b)
        return;
    check_outcome(write_visible(b, p, len, 0x22), what);
    CHECK(ibv_dereg_mr(b) == 0);
}

/* The same over a fresh private anonymous mapping of len bytes, unmapped after. */
__attribute__((unused)) static void stale_check_fresh(size_t len, stale_change_fn change, const char *what)
{
    void *p = map_anon(NULL, len, 0);
    CHECK(p != NULL);
    if (p)
        stale_check(p, len, change, what);
    munmap(p, len);
}

/* Whether libmrcache runs its userfaultfd source, the only one that sees raw system calls. */
static inline int uffd_on(void)
{
    int m = mrcache_monitors();
    return m > 0 && (m & MRCACHE_MONITOR_UFFD);
}

/* Why a test that reads page frame numbers (as MRCACHE_VERIFY does) skips without them. */
#define FRAMES_HIDDEN_WHY "reading page frame numbers needs CAP_SYS_ADMIN"

/* Whether /proc/self/pagemap shows this process its page frame numbers: the kernel shows
 * them to an opener with CAP_SYS_ADMIN (in the initial user namespace), and 0 for every
 * frame to anyone else. Read for a page of this stack, which is present. */
static inline int pagemap_shows_frames(void)
{
    volatile char here = 1;
    uint64_t e = 0;
    long pg = sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    off_t off = (off_t)((uintptr_t)&here / (uintptr_t)pg * sizeof(e));
    if (pread(fd, &e, sizeof(e), off) != (ssize_t)sizeof(e))
        e = 0;
    close(fd);
    return (e >> 63) && (e & ((1ull << 55) - 1)) != 0;
}

/* Before a child's _exit: deregisters the registrations libmrcache keeps cached, as
 * exit() would (its exit handler does; _exit runs none). The software NIC charges pinned
 * pages to the user, shared by all the user's processes, and an exited process's pins are
 * released some milliseconds later, when the kernel tears its io_uring down: children
 * leaving their cached registrations behind, one test after the other, could exhaust a
 * normal user's RLIMIT_MEMLOCK for the next test. A real NIC charges each process and
 * unpins at exit. Without libmrcache (-ENOSYS) there is nothing cached. */
static inline void release_cached_before_exit(void)
{
    (void)mrcache_flush(NULL, 0);
}

/* Runs body in a forked child with its own device: it moves the heap's end or changes
 * malloc's settings (which must not leak into the other tests), or checks what a child
 * inherits. The child's failures fail the calling test. */
static inline void in_child(void (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        open_nic();     /* a child opens its own device, as a real one must */
        check_failures = 0;
        body();
        release_cached_before_exit();
        _exit(check_failures ? 1 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A program that also watches unmaps another way (test_ucs: UCX's own callback) sets
 * these; the shared paths below call them around the unmaps glibc makes inside. */
static struct {
    void (*expect)(const void *addr);   /* addr: in what the next unmap takes */
    void (*check)(const char *what);    /* that unmap is done */
} unmap_watch;

static inline void unmap_watch_expect(const void *addr)
{
    if (unmap_watch.expect)
        unmap_watch.expect(addr);
}

static inline void unmap_watch_check(const char *what)
{
    if (unmap_watch.check)
        unmap_watch.check(what);
}

/* ---- glibc's allocator ---- */

/* glibc's size field of the chunk at mem, read as an address would be: the compiler must
 * not reason about the object (these tests use addresses after free on purpose). */
CHECK_NOIPA __attribute__((unused)) static size_t chunk_field(uintptr_t mem)
{
    return *(volatile size_t *)(mem - sizeof(size_t));
}

/* An address kept across free/realloc, as a number: a pointer again when used. */
CHECK_NOIPA __attribute__((unused)) static char *at(uintptr_t a)
{
    return (char *)a;
}

/* A chunk glibc always mmaps: above its largest dynamic mmap threshold (32 MiB), so it
 * is mmapped whatever was freed before, and freeing it leaves the threshold (and with it
 * the heap tests' layout) where it was. */
#define BIG (40u << 20)

/* What the tests register of a BIG chunk: its first and its last MiB, at the two ends of
 * the mapping glibc unmaps or moves inside free or realloc. The chunk must be that large,
 * the registrations need not: an invalidation that missed part of the mapping leaves one
 * of them stale, and the 2 MiB they pin fit a normal user's RLIMIT_MEMLOCK (8 MiB), which
 * the whole chunk would not. */
#define BIG_PIECE (1u << 20)
#define BIG_PIECES 2

/* Piece i of the BIG allocation at mem (malloc's pointer, kept as a number). */
static inline char *big_piece(uintptr_t mem, int i)
{
    return at(i == 0 ? mem : mem + BIG - BIG_PIECE);
}

/* The first use of each piece: registered, written through, deregistered (under the
 * preload the MRs stay cached). */
static inline void big_pieces_register(uintptr_t mem)
{
    for (int i = 0; i < BIG_PIECES; i++) {
        char *q = big_piece(mem, i);
        struct ibv_mr *a = ibv_reg_mr(pd, q, BIG_PIECE, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECKF(a && write_visible(a, q, BIG_PIECE, 0x11), "piece %d of the chunk", i);
        if (a)
            ibv_dereg_mr(a);
    }
}

/* After the chunk's mapping went and was mapped anew at the same address: each piece
 * registered again must write into the new pages. */
static inline void big_pieces_register_again(uintptr_t mem, const char *what)
{
    static const char *const where[BIG_PIECES] = { "its first MiB", "its last MiB" };
    for (int i = 0; i < BIG_PIECES; i++) {
        char *q = big_piece(mem, i), w[160];
        snprintf(w, sizeof(w), "%s, %s", what, where[i]);
        struct ibv_mr *b = ibv_reg_mr(pd, q, BIG_PIECE, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        check_outcome(b && write_visible(b, q, BIG_PIECE, 0x22), w);
        if (b)
            ibv_dereg_mr(b);
    }
}

static inline void test_free_of_mmapped_chunk(void)
{
    uintptr_t pa = (uintptr_t)malloc(BIG);
    char *p = at(pa);
    CHECK(p && (chunk_field(pa) & 2));
    char *chunk = at(pa - 16);
    size_t clen = chunk_field(pa) & ~(size_t)7;
    big_pieces_register(pa);
    unmap_watch_expect(p);
    free(p);   /* glibc munmaps the chunk internally: no munmap hook sees it */
    unmap_watch_check("free of an mmapped chunk");
    chunk = at(pa - 16);
    CHECK(map_anon(chunk, clen, MAP_FIXED_NOREPLACE) == chunk);
    big_pieces_register_again(pa, "free of an mmapped chunk");
    munmap(chunk, clen);
}

static inline void test_malloc_trim(void)
{
    /* A freed chunk inside the heap (a neighbour keeps it from the top): malloc_trim
     * discards its pages; the next malloc of the same size gets it back, zero-filled.
     * 112 KiB stays below glibc's initial mmap threshold. */
    size_t n = 112u << 10, page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t pa = (uintptr_t)malloc(n);
    char *p = at(pa);
    char *guard = malloc(64);
    CHECK(p && guard && !(chunk_field(pa) & 2));
    struct ibv_mr *a = ibv_reg_mr(pd, p, n, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, n, 0x11));
    ibv_dereg_mr(a);
    free(p);
    CHECK(malloc_trim(0) == 1);
    char *q = malloc(n);
    CHECK((uintptr_t)q == pa);
    struct ibv_mr *b = ibv_reg_mr(pd, q, n, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    /* malloc_trim discards whole pages inside the free chunk, not its first page. */
    size_t off = 2 * page, len = n - 4 * page;
    check_outcome(b && write_visible(b, q + off, len, 0x22), "malloc_trim");
    ibv_dereg_mr(b);
    free(q);
    free(guard);
}

static inline void heap_trim_body(void)
{
    /* A 4 MiB chunk at the main heap's top: freeing it trims the heap (above the 128 KiB
     * trim threshold) through sbrk inside glibc, and the next malloc grows it again with
     * new pages. */
    CHECK(mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1);
    /* A free 1 MiB chunk below a guard: the NIC's own small allocations while
     * registering are carved from it, not after our chunk (which would keep our chunk
     * from the heap's top and stop the trim this test is about). */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *w = map_anon(NULL, page, 0);
    struct ibv_mr *warm = ibv_reg_mr(pd, w, page, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));   /* the NIC's lazy set-up */
    CHECK(warm && ibv_dereg_mr(warm) == 0);
    void *room = malloc(1u << 20);
    void *guard = malloc(32);
    free(room);
    size_t n = 4u << 20;
    uintptr_t pa = (uintptr_t)malloc(n);
    char *p = at(pa);
    CHECK(p && !(chunk_field(pa) & 2));
    struct ibv_mr *a = ibv_reg_mr(pd, p, n, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, n, 0x11));
    ibv_dereg_mr(a);
    char *brk_before = sbrk(0);
    unmap_watch_expect(p + n - 1);
    free(p);
    unmap_watch_check("heap trimmed in free");
    CHECK((char *)sbrk(0) < brk_before);      /* the heap really shrank */
    char *q = malloc(n);
    CHECK((uintptr_t)q == pa);
    struct ibv_mr *b = ibv_reg_mr(pd, q, n, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    check_outcome(b && write_visible(b, q, n, 0x22), "heap trimmed in free");
    ibv_dereg_mr(b);
    free(q);
    free(guard);
}

/* In a child: it moves the heap's end and changes malloc's settings. */
static inline void test_heap_trim_in_free(void) { in_child(heap_trim_body); }

/* ---- thread stacks: glibc madvises the unused stack at thread exit and gives the cached
 * stack to the next thread ---- */

#define STK_BUF (256u << 10)
static uintptr_t stack_addr[2];
static int stack_round;

__attribute__((noinline, unused)) static void stack_body(void)
{
    __attribute__((aligned(4096))) char buf[STK_BUF];
    int r = stack_round;
    stack_addr[r] = (uintptr_t)buf;
    if (r == 0 || stack_addr[1] != stack_addr[0]) {
        struct ibv_mr *a = ibv_reg_mr(pd, buf, STK_BUF, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECK(a && write_visible(a, buf, STK_BUF, 0x11));
        if (a)
            ibv_dereg_mr(a);
        return;
    }
    struct ibv_mr *b = ibv_reg_mr(pd, buf, STK_BUF, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b != NULL);
    check_outcome(b && write_visible(b, buf, STK_BUF, 0x22), "reused thread stack");
    if (b)
        ibv_dereg_mr(b);
    __asm__ volatile("" ::"r"(buf) : "memory");
}

static inline void *stack_thread(void *arg)
{
    (void)arg;
    stack_body();
    return NULL;
}

static inline void test_thread_stack_reuse(void)
{
    pthread_attr_t at_;
    pthread_attr_init(&at_);
    pthread_attr_setstacksize(&at_, 2u << 20);
    for (stack_round = 0; stack_round < 2; stack_round++) {
        pthread_t t;
        CHECK(pthread_create(&t, &at_, stack_thread, NULL) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    pthread_attr_destroy(&at_);
    CHECKF(stack_addr[0] == stack_addr[1], "the second thread did not get the first one's stack");
}

#endif
