/* test_ucs.c - another library patching libc's unmap entry points after libmrcache did.
 * After a first registration the program dlopens LATE_LIB (default libucs.so.0, whose
 * libucm rewrites munmap, mmap, mremap, madvise, shmat, shmdt, brk and sbrk with its
 * bistro jumps as it loads, with UCX's default settings), then unmaps registered memory
 * the ways glibc does internally (run with MRCACHE_MALLOC_HOOKS=0, so only the patched
 * entry points can see them): libc's munmap called at its entry, free of an mmapped
 * chunk, heap trimming in free, a thread stack reused. Each maps the same address again,
 * registers again and writes through the new MR with the software NIC: the data must be
 * in the current mapping. EXPECT_STALE=1 (MRCACHE_MONITOR=none) inverts them: proof
 * that they can fail. With libucs, UCX's own VM_UNMAPPED callback must still fire for
 * those unmaps. LATE_LIB=none runs the same paths with nothing loaded late. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int expect_stale, with_ucs;
static long pg;
static int (*libc_munmap)(void *, size_t);

static void check_outcome(int visible, const char *what)
{
    if (expect_stale)
        CHECKF(!visible, "%s: expected the stale MR's write to be invisible", what);
    else
        CHECKF(visible, "%s: the write through the new MR is not in the current mapping: stale MR", what);
}

__attribute__((noipa)) static char *at(uintptr_t a)
{
    return (char *)a;
}

__attribute__((noipa)) static size_t chunk_field(uintptr_t mem)
{
    return *(volatile size_t *)(mem - sizeof(size_t));
}

/* ---- UCX's view: ucm_set_event_handler (ucm/api/ucm.h), looked up, not linked ---- */

#define UCM_EVENT_VM_UNMAPPED (1 << 17)
struct ucm_vm_event {        /* ucm_event_t's vm_unmapped member, at the union's start */
    void *address;
    size_t size;
};
static volatile uintptr_t ucx_watch;    /* the address whose unmap UCX must report */
static volatile int ucx_saw;

static void ucx_unmapped(int type, void *event, void *arg)
{
    const struct ucm_vm_event *e = event;
    (void)arg;
    uintptr_t a = (uintptr_t)e->address;
    if (type == UCM_EVENT_VM_UNMAPPED && ucx_watch >= a && ucx_watch < a + e->size)
        ucx_saw = 1;
}

static void ucx_expect(const void *p)
{
    ucx_saw = 0;
    ucx_watch = (uintptr_t)p;
}

static void ucx_check(const char *what)
{
    if (with_ucs)
        CHECKF(ucx_saw, "%s: UCX's VM_UNMAPPED callback did not fire: its hook was lost", what);
    ucx_watch = 0;
}

/* ---- the paths ---- */

#define LEN (1u << 20)

static void test_libc_munmap_entry(void)
{
    /* Called at libc's entry, as glibc's own callers reach it (no PLT, no preload hook). */
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    ucx_expect(p);
    CHECK(libc_munmap(p, LEN) == 0);
    ucx_check("munmap at libc's entry");
    CHECK(map_anon(p, LEN, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, p, LEN, 0x22), "munmap at libc's entry");
    ibv_dereg_mr(b);
    munmap(p, LEN);
}

static void test_plt_munmap_reaches_ucx(void)
{
    /* Through the PLT: the preload hook, whose "real" munmap must be UCX's hook now. */
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    ucx_expect(p);
    CHECK(munmap(p, LEN) == 0);
    ucx_check("munmap through the PLT");
    CHECK(map_anon(p, LEN, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, p, LEN, 0x22), "munmap through the PLT");
    ibv_dereg_mr(b);
    munmap(p, LEN);
}

#define BIG (40u << 20)   /* above glibc's largest dynamic mmap threshold: always mmapped */

static void test_free_of_mmapped_chunk(void)
{
    uintptr_t pa = (uintptr_t)malloc(BIG);
    char *p = at(pa);
    CHECK(p && (chunk_field(pa) & 2));
    char *chunk = at(pa - 16);
    size_t clen = chunk_field(pa) & ~(size_t)7;
    struct ibv_mr *a = ibv_reg_mr(pd, p, BIG, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, BIG, 0x11));
    ibv_dereg_mr(a);
    ucx_expect(p);
    free(p);   /* glibc munmaps the chunk internally */
    ucx_check("free of an mmapped chunk");
    p = at(pa);
    chunk = at(pa - 16);
    CHECK(map_anon(chunk, clen, MAP_FIXED_NOREPLACE) == chunk);
    struct ibv_mr *b = ibv_reg_mr(pd, p, BIG, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, p, BIG, 0x22), "free of an mmapped chunk");
    ibv_dereg_mr(b);
    munmap(chunk, clen);
}

static void heap_trim_body(void)
{
    /* A 4 MiB chunk at the main heap's top: freeing it trims the heap through __sbrk
     * inside glibc (UCX's sbrk hook, which calls brk(2) itself); the next malloc grows it
     * again with new pages. The NIC's small allocations go to a freed 1 MiB chunk below
     * a guard, so they do not land after ours and stop the trim. */
    CHECK(mallopt(M_MMAP_THRESHOLD, 64 << 20) == 1);
    char *w = map_anon(NULL, (size_t)pg, 0);
    struct ibv_mr *warm = ibv_reg_mr(pd, w, (size_t)pg, IBV_ACCESS_LOCAL_WRITE);
    CHECK(warm && ibv_dereg_mr(warm) == 0);
    void *room = malloc(1u << 20);
    void *guard = malloc(32);
    free(room);
    size_t n = 4u << 20;
    uintptr_t pa = (uintptr_t)malloc(n);
    char *p = at(pa);
    CHECK(p && !(chunk_field(pa) & 2));
    struct ibv_mr *a = ibv_reg_mr(pd, p, n, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, n, 0x11));
    ibv_dereg_mr(a);
    char *brk_before = sbrk(0);
    ucx_expect(p + n - 1);
    free(p);
    ucx_check("heap trimmed in free");
    CHECK((char *)sbrk(0) < brk_before);      /* the heap really shrank */
    char *q = malloc(n);
    CHECK((uintptr_t)q == pa);
    struct ibv_mr *b = ibv_reg_mr(pd, q, n, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, q, n, 0x22), "heap trimmed in free");
    ibv_dereg_mr(b);
    free(q);
    free(guard);
}

/* In a forked child with its own device: it moves the heap's end and changes malloc's
 * settings, which must not leak into the other tests. */
static void test_heap_trim_in_free(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        open_nic();
        check_failures = 0;
        heap_trim_body();
        _exit(check_failures ? 1 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* glibc madvises the unused part of a thread's stack at thread exit and gives the
 * cached stack to the next thread. */
#define STK_BUF (256u << 10)
static uintptr_t stack_addr[2];
static int stack_round;

__attribute__((noinline)) static void stack_body(void)
{
    __attribute__((aligned(4096))) char buf[STK_BUF];
    int r = stack_round;
    stack_addr[r] = (uintptr_t)buf;
    if (r == 0 || stack_addr[1] != stack_addr[0]) {
        struct ibv_mr *a = ibv_reg_mr(pd, buf, STK_BUF, IBV_ACCESS_LOCAL_WRITE);
        CHECK(a && write_visible(a, buf, STK_BUF, 0x11));
        if (a)
            ibv_dereg_mr(a);
        return;
    }
    struct ibv_mr *b = ibv_reg_mr(pd, buf, STK_BUF, IBV_ACCESS_LOCAL_WRITE);
    CHECK(b != NULL);
    check_outcome(b && write_visible(b, buf, STK_BUF, 0x22), "reused thread stack");
    if (b)
        ibv_dereg_mr(b);
    __asm__ volatile("" ::"r"(buf) : "memory");
}

static void *stack_thread(void *arg)
{
    (void)arg;
    stack_body();
    return NULL;
}

static void test_thread_stack_reuse(void)
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

static void new_pd(void)
{
    if (pd)
        ibv_dealloc_pd(pd);
    pd = ibv_alloc_pd(ctx);
    if (!pd)
        exit(2);
}

/* The late library, loaded once the cache is in use (as a transport plugin would be). */
static int load_late(const char *lib)
{
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    munmap(p, LEN);
    if (!strcmp(lib, "none"))
        return 0;
    if (!dlopen(lib, RTLD_NOW | RTLD_LOCAL)) {
        fprintf(stderr, "%s\n", dlerror());
        return strstr(lib, "libucs") ? 1 : -1;
    }
    if (!strstr(lib, "libucs"))
        return 0;
    void *ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD);
    int (*set)(int, int, void (*)(int, void *, void *), void *) =
        ucm ? (int (*)(int, int, void (*)(int, void *, void *), void *))dlsym(ucm, "ucm_set_event_handler") : NULL;
    CHECK(set != NULL);
    /* UCS_OK (0) only if UCX's own test of its hooks saw every event: it fails when a
     * preload hook sends its calls past UCX's patched entry points. */
    int st = set ? set(UCM_EVENT_VM_UNMAPPED, 0, ucx_unmapped, NULL) : -1;
    CHECKF(st == 0, "ucm_set_event_handler(VM_UNMAPPED) returned %d", st);
    with_ucs = 1;
    return 0;
}

static int late_missing;

static void test_late_library_loaded(void)
{
    const char *lib = getenv("LATE_LIB") ? getenv("LATE_LIB") : "libucs.so.0";
    int rc = load_late(lib);
    late_missing = rc == 1;
    CHECK(rc >= 0);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    pg = sysconf(_SC_PAGESIZE);
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    libc_munmap = (int (*)(void *, size_t))dlsym(libc, "munmap");
    const char *lib = getenv("LATE_LIB") ? getenv("LATE_LIB") : "libucs.so.0";
    /* Under a sanitizer the patch source steps aside: these paths are then the preload
     * hooks' documented blind spots, not a bug. */
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        check_skip("test_ucs", "the patch source steps aside under a sanitizer");
        return 0;
    }
    open_nic();
    new_pd();
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    if (!strstr(lib, "libucs")) {
        RUN(test_late_library_loaded);
    } else {
        /* Loaded in a test of its own only if installed: scripts/install-deps.sh does. */
        test_late_library_loaded();
        if (late_missing) {
            check_skip("test_ucs", "libucs.so.0 not installed (scripts/install-deps.sh installs libucx0)");
            return 0;
        }
        printf("%s - test_late_library_loaded\n", check_failures ? "not ok" : "ok");
        check_tests_failed += check_failures != 0;
    }
    if (check_tests_failed)
        CHECK_EXIT();
    RUN(test_libc_munmap_entry);
    RUN(test_plt_munmap_reaches_ucx);
    RUN(test_free_of_mmapped_chunk);
    RUN(test_heap_trim_in_free);
    if (!getenv("SKIP_STACK"))
        RUN(test_thread_stack_reuse);
    CHECK_EXIT();
}
