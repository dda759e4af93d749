/* test_unmap_paths.c - for every way memory can leave a registered range: register,
 * deregister (cached), change the mapping, register the same range again, write through
 * the new MR into its pinned pages, and check that the current mapping sees the data.
 * A stale MR writes into the old pages and the data is invisible. With EXPECT_STALE=1
 * (run under MRCACHE_MONITOR=none) every check is inverted: proof that each test can
 * fail and that the stale effect is real. Raw system calls (syscall(2), an inline syscall
 * instruction, an allocator making its own) are seen only by the userfaultfd source:
 * without it they must come out stale. Plus: frees that keep their pages mapped must
 * keep their cache hits. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stale.h"

static long pg;

static void ch_munmap(void *p, size_t len)
{
    CHECK(munmap(p, len) == 0);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
}

static void ch_mmap_fixed(void *p, size_t len)
{
    CHECK(map_anon(p, len, MAP_FIXED) == p);
}

static void ch_mremap_shrink_grow(void *p, size_t len)
{
    CHECK(mremap(p, len, len / 2, 0) == p);
    CHECK(mremap(p, len / 2, len, 0) == p);
}

static void ch_mremap_move(void *p, size_t len)
{
    void *tmp = map_anon(NULL, len, 0);
    CHECK(tmp && mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, tmp) == tmp);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
    munmap(tmp, len);
}

static void ch_madv_dontneed(void *p, size_t len)
{
    CHECK(madvise(p, len, MADV_DONTNEED) == 0);
}

static void ch_madv_remove(void *p, size_t len)
{
    CHECK(madvise(p, len, MADV_REMOVE) == 0);
}

static void *inline_mmap(void *hint, size_t len, int flags)
{
    long r = inline_syscall6(SYS_mmap, (long)hint, (long)len, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return r < 0 && r > -4096 ? NULL : (void *)r;
}

/* Through syscall(3), which is hooked as the calls it stands for are. */
static void ch_syscall3_munmap(void *p, size_t len)
{
    CHECK(syscall(SYS_munmap, p, len) == 0);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
}

static void ch_syscall3_mmap_fixed(void *p, size_t len)
{
    CHECK(syscall(SYS_mmap, p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          (long)(uintptr_t)p);
}

static void ch_syscall3_madv_dontneed(void *p, size_t len)
{
    CHECK(syscall(SYS_madvise, p, len, MADV_DONTNEED) == 0);
}

static void ch_syscall3_mremap_move(void *p, size_t len)
{
    void *tmp = map_anon(NULL, len, 0);
    CHECK(tmp && syscall(SYS_mremap, p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, tmp) == (long)(uintptr_t)tmp);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
    munmap(tmp, len);
}

static void ch_inline_syscall_munmap(void *p, size_t len)
{
    CHECK(inline_syscall6(SYS_munmap, (long)p, (long)len, 0, 0, 0, 0) == 0);
    CHECK(inline_mmap(p, len, MAP_FIXED_NOREPLACE) == p);
}

#define LEN (1u << 20)

static void test_munmap(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_munmap, "the range registered again"); munmap(p, LEN); }
static void test_mmap_fixed(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_mmap_fixed, "the range registered again"); munmap(p, LEN); }
static void test_mremap_shrink_grow(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_mremap_shrink_grow, "the range registered again"); munmap(p, LEN); }
static void test_mremap_move(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_mremap_move, "the range registered again"); munmap(p, LEN); }
static void test_madvise_dontneed(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_madv_dontneed, "the range registered again"); munmap(p, LEN); }

/* One munmap over many registered buffers: a long run of entries, which the cache parks
 * inside the hook and walks later. Each buffer registered again must see the new pages. */
#define MANY 64
static void test_munmap_many_buffers(void)
{
    size_t slot = 2 * (size_t)pg, len = MANY * slot;   /* a page of gap: no merging */
    char *p = map_anon(NULL, len, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    for (int i = 0; i < MANY; i++) {
        struct ibv_mr *a = ibv_reg_mr(pd, p + i * slot, (size_t)pg, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECK(a != NULL && write_visible(a, p + i * slot, (size_t)pg, 0x11));
        CHECK(a == NULL || ibv_dereg_mr(a) == 0);
    }
    CHECK(munmap(p, len) == 0);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
    int visible = 0;
    for (int i = 0; i < MANY; i++) {
        struct ibv_mr *b = ibv_reg_mr(pd, p + i * slot, (size_t)pg, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECK(b != NULL);
        if (!b)
            continue;
        visible += write_visible(b, p + i * slot, (size_t)pg, 0x22);
        CHECK(ibv_dereg_mr(b) == 0);
    }
    /* All visible, or under EXPECT_STALE none. */
    check_outcome(expect_stale ? visible != 0 : visible == MANY, "64 buffers registered again");
    munmap(p, len);
}

static void test_madvise_remove(void)
{
    void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    stale_check(p, LEN, ch_madv_remove, "the range registered again");
    munmap(p, LEN);
}

static void test_madvise_free_keeps_hit(void)
{
    /* MADV_FREE never discards pinned pages: no invalidation, the hit stays valid. */
    void *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && ibv_dereg_mr(a) == 0);
    uint64_t regs = nic_regs();
    CHECK(madvise(p, LEN, MADV_FREE) == 0);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b && write_visible(b, p, LEN, 0x33));
    if (!expect_stale)
        CHECK(nic_regs() == regs);
    ibv_dereg_mr(b);
    munmap(p, LEN);
}

static int shm_new(size_t len)
{
    return shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
}

static void test_shmat_remap(void)
{
    int id1 = shm_new(LEN), id2 = shm_new(LEN);
    CHECK(id1 >= 0 && id2 >= 0);
    void *p = shmat(id1, NULL, 0);
    CHECK(p != (void *)-1);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    CHECK(shmat(id2, p, SHM_REMAP) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b != NULL);
    check_outcome(b && write_visible(b, p, LEN, 0x22), "shmat SHM_REMAP");
    ibv_dereg_mr(b);
    shmdt(p);
    shmctl(id1, IPC_RMID, NULL);
    shmctl(id2, IPC_RMID, NULL);
}

static void test_shmdt_shmat(void)
{
    int id1 = shm_new(LEN), id2 = shm_new(LEN);
    void *p = shmat(id1, NULL, 0);
    CHECK(p != (void *)-1);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    CHECK(shmdt(p) == 0);
    CHECK(shmat(id2, p, 0) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    check_outcome(b && write_visible(b, p, LEN, 0x22), "shmdt + shmat");
    ibv_dereg_mr(b);
    shmdt(p);
    shmctl(id1, IPC_RMID, NULL);
    shmctl(id2, IPC_RMID, NULL);
}

/* MRCACHE_SHARED: memory another process can change is registered anew for each caller
 * by default (counted as uncached, and as uncached_shared in the JSON), cached under
 * MRCACHE_SHARED=cache (and with no monitor, where nothing is kept track of). */
static void test_shared_memory_policy(void)
{
    const char *v = getenv("MRCACHE_SHARED");
    int cached = (v && !strcmp(v, "cache")) || mrcache_monitors() == 0;
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED)
        return;
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && ibv_dereg_mr(a) == 0);
    struct mrcache_stats s0, s1;
    CHECK(mrcache_stats_read(sizeof(s0), &s0) == 0);
    uint64_t regs = nic_regs();
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b && write_visible(b, p, LEN, 0x33));
    CHECK(mrcache_stats_read(sizeof(s1), &s1) == 0);
    if (cached)
        CHECKF(nic_regs() == regs && s1.hits == s0.hits + 1, "cached: %llu registrations",
               (unsigned long long)(nic_regs() - regs));
    else
        CHECKF(nic_regs() == regs + 1 && s1.uncached == s0.uncached + 1 && s1.hits == s0.hits,
               "not cached: %llu registrations, %llu uncached", (unsigned long long)(nic_regs() - regs),
               (unsigned long long)(s1.uncached - s0.uncached));
    CHECK(b && ibv_dereg_mr(b) == 0);
    int fd = memfd_create("stats", MFD_CLOEXEC);
    char json[65536] = "";
    if (fd >= 0 && mrcache_stats_dump(fd, MRCACHE_DUMP_JSON) == 0) {
        ssize_t n = pread(fd, json, sizeof(json) - 1, 0);
        json[n > 0 ? n : 0] = 0;
    }
    const char *c = strstr(json, "\"uncached_shared\": ");
    CHECKF(c && (cached ? atoll(c + 19) == 0 : atoll(c + 19) >= 2), "uncached_shared in the JSON: %s",
           c ? c + 19 : "absent");
    if (fd >= 0)
        close(fd);
    munmap(p, LEN);
}

static void ch_brk(void *p, size_t len)
{
    CHECK(sbrk(-(intptr_t)len) != (void *)-1);
    CHECK(sbrk((intptr_t)len) == p);
}

static void brk_shrink_body(void)
{
    /* Our own piece of the heap's end, page aligned; malloc copes with foreign sbrk. */
    char *cur = sbrk(0);
    size_t pad = (size_t)(-(uintptr_t)cur & (uintptr_t)(pg - 1));
    CHECK(sbrk((intptr_t)pad) == cur);
    char *p = sbrk(LEN);
    CHECK(p != (void *)-1);
    stale_check(p, LEN, ch_brk, "the range registered again");
    sbrk(-(intptr_t)(LEN + pad));
}

/* In a child: it moves the heap's end. */
static void test_brk_shrink(void) { in_child(brk_shrink_body); }

static void test_realloc_moves_mmapped_chunk(void)
{
    uintptr_t pa = (uintptr_t)malloc(BIG);
    char *p = at(pa);
    CHECK(p && (chunk_field(pa) & 2));
    char *chunk = at(pa - 16);
    size_t clen = chunk_field(pa) & ~(size_t)7;
    /* A neighbour right after the chunk: growing must move it. */
    void *fence = map_anon(chunk + clen, (size_t)pg, MAP_FIXED_NOREPLACE);
    big_pieces_register(pa);
    char *q = realloc(p, 2 * BIG);
    chunk = at(pa - 16);
    CHECK(q && (uintptr_t)q != pa);
    CHECK(map_anon(chunk, clen, MAP_FIXED_NOREPLACE) == chunk);
    big_pieces_register_again(pa, "realloc moving an mmapped chunk");
    munmap(chunk, clen);
    free(q);
    if (fence)
        munmap(fence, (size_t)pg);
}

static void test_free_keeping_pages_keeps_hits(void)
{
    /* malloc/register/free in a loop, the chunk never at the heap's top: every round
     * after the first is a cache hit, because no page left the mapping. */
    size_t n = 96u << 10;     /* below the mmap threshold: a heap chunk */
    char *p = malloc(n);
    char *guard = malloc(64);
    uint64_t regs0 = nic_regs();
    for (int i = 0; i < 10; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, p, n, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECK(mr && write_visible(mr, p, n, (unsigned char)i));
        ibv_dereg_mr(mr);
        uintptr_t pa = (uintptr_t)p;
        free(p);
        p = malloc(n);
        CHECK((uintptr_t)p == pa);
    }
    /* At most one: the first round may even hit a registration of these same pages. */
    CHECKF(nic_regs() - regs0 <= 1, "%llu registrations for 10 rounds", (unsigned long long)(nic_regs() - regs0));
    free(p);
    free(guard);
}

static void test_syscall3_munmap(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_syscall3_munmap, "the range registered again"); munmap(p, LEN); }
static void test_syscall3_mmap_fixed(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_syscall3_mmap_fixed, "the range registered again"); munmap(p, LEN); }
static void test_syscall3_madvise_dontneed(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_syscall3_madv_dontneed, "the range registered again"); munmap(p, LEN); }
static void test_syscall3_mremap_move(void) { void *p = map_anon(NULL, LEN, 0); stale_check(p, LEN, ch_syscall3_mremap_move, "the range registered again"); munmap(p, LEN); }

static void test_inline_syscall_munmap(void)
{
    void *p = map_anon(NULL, LEN, 0);
    stale_check(p, LEN, ch_inline_syscall_munmap, "the range registered again");
    munmap(p, LEN);
}

/* An allocator that maps and unmaps with its own system calls (as gperftools does):
 * alloc, register, free, alloc again at the same address, register again. */
static void test_raw_syscall_allocator(void)
{
    char *p = inline_mmap(NULL, LEN, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, LEN, 0x44));
    CHECK(a && ibv_dereg_mr(a) == 0);
    CHECK(inline_syscall6(SYS_munmap, (long)p, LEN, 0, 0, 0, 0) == 0);
    char *q = inline_mmap(p, LEN, MAP_FIXED_NOREPLACE);
    CHECK(q == p);
    struct ibv_mr *b = q ? ibv_reg_mr(pd, q, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE)) : NULL;
    CHECK(b != NULL);
    if (b) {
        check_outcome(write_visible(b, q, LEN, 0x55), "the allocator's own mmap");
        CHECK(ibv_dereg_mr(b) == 0);
    }
    if (q)
        inline_syscall6(SYS_munmap, (long)q, LEN, 0, 0, 0, 0);
}

/* Raw system calls are seen by the userfaultfd source alone: without it these tests
 * expect the stale MR (a negative control, run by default; test/preload/uffd.mk runs them
 * with it). */
static void (*raw_body)(void);
static void as_raw(void)
{
    int saved = expect_stale;
    expect_stale = expect_stale || !uffd_on();
    raw_body();
    expect_stale = saved;
}
#define RUN_RAW(fn) (new_pd(), raw_body = fn, check_run(#fn, as_raw))

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    pg = sysconf(_SC_PAGESIZE);
    open_nic();
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    RUN(test_munmap);
    RUN(test_munmap_many_buffers);
    RUN(test_mmap_fixed);
    RUN(test_mremap_shrink_grow);
    RUN(test_mremap_move);
    RUN(test_madvise_dontneed);
    RUN(test_madvise_remove);
    RUN(test_shmat_remap);
    RUN(test_shmdt_shmat);
    RUN(test_shared_memory_policy);
    RUN(test_brk_shrink);
    /* The userfaultfd reports MADV_FREE as it does MADV_DONTNEED: the source invalidates. */
    if (expect_stale)
        check_skip("test_madvise_free_keeps_hit", "no stale MR to expect: MADV_FREE keeps pinned pages");
    else if (uffd_on())
        check_skip("test_madvise_free_keeps_hit", "the userfaultfd source invalidates on MADV_FREE too");
    else
        RUN(test_madvise_free_keeps_hit);
    RUN(test_syscall3_munmap);
    RUN(test_syscall3_mmap_fixed);
    RUN(test_syscall3_madvise_dontneed);
    RUN(test_syscall3_mremap_move);
    RUN_RAW(test_inline_syscall_munmap);
    RUN_RAW(test_raw_syscall_allocator);
    /* The rest read glibc's chunk headers: meaningless under a sanitizer's allocator. */
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        check_skip("test_glibc_allocator_paths", "the allocator is the sanitizer's, not glibc's");
        CHECK_EXIT();
    }
    RUN(test_free_of_mmapped_chunk);
    RUN(test_realloc_moves_mmapped_chunk);
    RUN(test_malloc_trim);
    RUN(test_free_keeping_pages_keeps_hits);
    RUN(test_heap_trim_in_free);
    CHECK_EXIT();
}
