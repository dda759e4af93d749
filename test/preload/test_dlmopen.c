/* test_dlmopen.c - memory registered through the program's verbs and changed by a
 * library in a link-map namespace of its own (dlmopen(LM_ID_NEWLM)), which calls its own
 * copy of libc: munmap, MADV_DONTNEED, MAP_FIXED, mremap and free of a malloc'd buffer
 * (an mmapped chunk, unmapped inside that libc). Each registers, deregisters (cached),
 * lets the namespace change the memory, registers again and writes through the new MR:
 * the data must be in the current pages. The first test caches its buffer before the
 * namespace exists. EXPECT_STALE=1 (run with no source) inverts the verdicts: proof that
 * the changes are real. argv[1]: the library. */
#include <dlfcn.h>

#include "wild.h"

#define LEN (1u << 20)

static const char *lib_path;
static void *ns;
static int (*ns_munmap)(void *, size_t);
static int (*ns_madvise)(void *, size_t, int);
static void *(*ns_mmap_fixed)(void *, size_t);
static void *(*ns_mremap_move)(void *, size_t, void *);
static void *(*ns_malloc)(size_t);
static void (*ns_free)(void *);
static int (*ns_failed_munmap_errno)(void);

static void load_namespace(void)
{
    ns = dlmopen(LM_ID_NEWLM, lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!ns) {
        fprintf(stderr, "dlmopen %s: %s\n", lib_path, dlerror());
        exit(2);
    }
#define SYM(name) *(void **)&name = dlsym(ns, #name)
    SYM(ns_munmap);
    SYM(ns_madvise);
    SYM(ns_mmap_fixed);
    SYM(ns_mremap_move);
    SYM(ns_malloc);
    SYM(ns_free);
    SYM(ns_failed_munmap_errno);
    if (!ns_munmap || !ns_madvise || !ns_mmap_fixed || !ns_mremap_move || !ns_malloc || !ns_free ||
        !ns_failed_munmap_errno) {
        fprintf(stderr, "%s lacks a function\n", lib_path);
        exit(2);
    }
}

static void ch_munmap(void *p, size_t len)
{
    CHECK(ns_munmap(p, len) == 0);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
}

static void ch_dontneed(void *p, size_t len)
{
    CHECK(ns_madvise(p, len, MADV_DONTNEED) == 0);
}

static void ch_mmap_fixed(void *p, size_t len)
{
    CHECK(ns_mmap_fixed(p, len) == p);
}

static void ch_mremap_move(void *p, size_t len)
{
    void *to = map_anon(NULL, len, 0);
    CHECK(to && ns_mremap_move(p, len, to) == to);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
    munmap(to, len);
}

/* Cached before the namespace exists, unmapped by it before the next registration. */
static void test_cached_before_the_namespace_existed(void)
{
    void *p = map_anon(NULL, LEN, 0);
    first_registration(p, LEN);
    load_namespace();
    ch_munmap(p, LEN);
    registered_again(p, LEN, "cached before dlmopen, unmapped by the namespace's libc");
    munmap(p, LEN);
}

static void test_namespace_munmap(void) { stale_check_fresh(LEN, ch_munmap, "the namespace's munmap"); }
static void test_namespace_madvise_dontneed(void) { stale_check_fresh(LEN, ch_dontneed, "the namespace's MADV_DONTNEED"); }
static void test_namespace_mmap_fixed(void) { stale_check_fresh(LEN, ch_mmap_fixed, "the namespace's MAP_FIXED"); }
static void test_namespace_mremap_move(void) { stale_check_fresh(LEN, ch_mremap_move, "the namespace's mremap"); }

/* A buffer of the namespace's malloc (an mmapped chunk), freed: that libc unmaps it
 * from inside itself. Fresh pages mapped at the same place are registered again. */
static void test_namespace_free(void)
{
    char *p = ns_malloc(LEN);
    CHECK(p != NULL);
    if (!p)
        return;
    first_registration(p, LEN);
    long pg = sysconf(_SC_PAGESIZE);
    char *base = (char *)((uintptr_t)p & ~(uintptr_t)(pg - 1));
    size_t maplen = ((size_t)(p - base) + LEN + (size_t)pg - 1) & ~(size_t)(pg - 1);
    ns_free(p);
    CHECK(map_anon(base, maplen, MAP_FIXED_NOREPLACE) == base);   /* fails if free kept it */
    registered_again(p, LEN, "the namespace's free of an mmapped chunk");
    munmap(base, maplen);
}

/* Its callers read their own libc's errno, even from a patched entry point. */
static void test_namespace_errno_kept(void)
{
    CHECK(ns_failed_munmap_errno() == EINVAL);
}

int main(int argc, char **argv)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    lib_path = argc > 1 ? argv[1] : "libmrc_nslib.so";
    open_nic();
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    RUN(test_cached_before_the_namespace_existed);
    RUN(test_namespace_munmap);
    RUN(test_namespace_madvise_dontneed);
    RUN(test_namespace_mmap_fixed);
    RUN(test_namespace_mremap_move);
    RUN(test_namespace_free);
    RUN(test_namespace_errno_kept);
    CHECK_EXIT();
}
