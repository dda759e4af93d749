/* test_monitor_paths.c - unmaps made inside glibc and ld.so, which only the patch
 * source sees: a thread's stack discarded at thread exit and reused, dlclose of a
 * library whose static buffer was registered then dlopen, free of an mmapped chunk,
 * malloc_trim and heap trimming in free with the allocator hooks off
 * (MRCACHE_MALLOC_HOOKS=0). Each registers,
 * changes the mapping, registers again and writes through the new MR: the data must be
 * in the current mapping (also in a forked child). EXPECT_STALE=1 (run with MRCACHE_MONITOR=preload or none)
 * inverts them: proof that patching is what makes them pass. Raw system calls are seen
 * by no libc patch: those stay stale in every mode (the documented limit). */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static int expect_stale;
static long pg;
static const char *bigbss_path;

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

/* ---- thread stacks: glibc madvises the unused stack at thread exit and caches it ---- */

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

/* ---- dlclose: ld.so unmaps the library with its own munmap ---- */

static void test_dlclose_dlopen(void)
{
    void *h = dlopen(bigbss_path, RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "%s", dlerror());
    if (!h)
        return;
    char *(*get)(unsigned long *) = (char *(*)(unsigned long *))dlsym(h, "bigbss_buf");
    unsigned long len = 0;
    char *p = get(&len);
    struct ibv_mr *a = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, len, 0x11));
    if (a)
        ibv_dereg_mr(a);
    uintptr_t pa = (uintptr_t)p;
    CHECK(dlclose(h) == 0);
    h = dlopen(bigbss_path, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL);
    if (!h)
        return;
    get = (char *(*)(unsigned long *))dlsym(h, "bigbss_buf");
    p = get(&len);
    CHECKF((uintptr_t)p == pa, "the library came back at another address");
    struct ibv_mr *b = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(b != NULL);
    check_outcome(b && write_visible(b, p, len, 0x22), "dlclose + dlopen");
    if (b)
        ibv_dereg_mr(b);
    dlclose(h);
}

/* ---- glibc's allocator, with libmrcache's allocator hooks off ---- */

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
    free(p);   /* glibc munmaps the chunk internally */
    p = at(pa);
    chunk = at(pa - 16);
    CHECK(map_anon(chunk, clen, MAP_FIXED_NOREPLACE) == chunk);
    struct ibv_mr *b = ibv_reg_mr(pd, p, BIG, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, p, BIG, 0x22), "free of an mmapped chunk");
    ibv_dereg_mr(b);
    munmap(chunk, clen);
}

static void test_malloc_trim(void)
{
    /* A freed chunk inside the heap: malloc_trim madvises its pages away. */
    size_t n = 112u << 10;
    uintptr_t pa = (uintptr_t)malloc(n);
    char *p = at(pa);
    char *guard = malloc(64);
    CHECK(p && guard && !(chunk_field(pa) & 2));
    struct ibv_mr *a = ibv_reg_mr(pd, p, n, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, n, 0x11));
    ibv_dereg_mr(a);
    free(p);
    CHECK(malloc_trim(0) == 1);
    char *q = malloc(n);
    CHECK((uintptr_t)q == pa);
    struct ibv_mr *b = ibv_reg_mr(pd, q, n, IBV_ACCESS_LOCAL_WRITE);
    size_t off = 2 * (size_t)pg, len = n - 4 * (size_t)pg;
    check_outcome(b && write_visible(b, q + off, len, 0x22), "malloc_trim");
    ibv_dereg_mr(b);
    free(q);
    free(guard);
}

static void heap_trim_body(void)
{
    /* A 4 MiB chunk at the main heap's top: freeing it trims the heap through sbrk and
     * brk inside glibc; the next malloc grows it again with new pages. The NIC's own
     * small allocations are carved from a freed 1 MiB chunk below a guard, so they do
     * not land after our chunk and stop the trim. */
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
    free(p);
    CHECK((char *)sbrk(0) < brk_before);      /* the heap really shrank */
    char *q = malloc(n);
    CHECK((uintptr_t)q == pa);
    struct ibv_mr *b = ibv_reg_mr(pd, q, n, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, q, n, 0x22), "heap trimmed in free");
    ibv_dereg_mr(b);
    free(q);
    free(guard);
}

/* Runs body in a forked child with its own device: it moves the heap's end or changes
 * malloc's settings (which must not leak into the other tests), or checks that a
 * child inherits the patched code (nothing is redone in a child). */
static void in_child(void (*body)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        open_nic();
        check_failures = 0;
        body();
        _exit(check_failures ? 1 : 0);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_heap_trim_in_free(void) { in_child(heap_trim_body); }
static void test_fork_child_keeps_patches(void) { in_child(test_free_of_mmapped_chunk); }

/* ---- raw system calls: no libc patch sees them (only a userfaultfd source would) ---- */

#define LEN (1u << 20)

static void raw_case(int inline_insn)
{
    void *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    long r;
    if (inline_insn)
        __asm__ volatile("syscall" : "=a"(r) : "0"((long)SYS_munmap), "D"(p), "S"((long)LEN) : "rcx", "r11", "memory");
    else
        r = syscall(SYS_munmap, p, LEN);
    CHECK(r == 0);
    CHECK(map_anon(p, LEN, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    int visible = b && write_visible(b, p, LEN, 0x22);
    int m = mrcache_monitors(), uffd = m > 0 && (m & MRCACHE_MONITOR_UFFD);
    if (uffd)   /* auto under a sanitizer: patching stands aside, the userfaultfd joins */
        CHECKF(visible, "the userfaultfd source is on, yet a raw munmap left a stale MR");
    else
        CHECKF(!visible, "a raw munmap was seen: update this test and the README's known limits");
    ibv_dereg_mr(b);
    munmap(p, LEN);
}

static void test_raw_syscall_munmap_stays_stale(void) { raw_case(0); }
static void test_inline_syscall_munmap_stays_stale(void) { raw_case(1); }

static void new_pd(void)
{
    if (pd)
        ibv_dealloc_pd(pd);
    pd = ibv_alloc_pd(ctx);
    if (!pd)
        exit(2);
}

int main(int argc, char **argv)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    bigbss_path = argc > 1 ? argv[1] : "libmrc_bigbss.so";
    pg = sysconf(_SC_PAGESIZE);
    open_nic();
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    RUN(test_raw_syscall_munmap_stays_stale);
    RUN(test_inline_syscall_munmap_stays_stale);
    /* Under a sanitizer the patch source steps aside (and its allocator is not glibc's):
     * the rest would show the preload hooks' documented blind spots, not a bug. */
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        check_skip("test_patched_paths", "the patch source steps aside under a sanitizer");
        CHECK_EXIT();
    }
    RUN(test_thread_stack_reuse);
    RUN(test_dlclose_dlopen);
    RUN(test_free_of_mmapped_chunk);
    RUN(test_malloc_trim);
    RUN(test_heap_trim_in_free);
    RUN(test_fork_child_keeps_patches);
    CHECK_EXIT();
}
