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
#include <unistd.h>

#include "stale.h"
#include "ucm_watch.h"

static int (*libc_munmap)(void *, size_t);

/* ---- the paths ---- */

#define LEN (1u << 20)

/* Registers, unmaps with unmap, maps the same address again and registers again. */
static void munmap_path(int (*unmap)(void *, size_t), const char *what)
{
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && write_visible(a, p, LEN, 0x11));
    ibv_dereg_mr(a);
    ucx_expect(p);
    CHECK(unmap(p, LEN) == 0);
    ucx_check(what);
    CHECK(map_anon(p, LEN, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    check_outcome(b && write_visible(b, p, LEN, 0x22), what);
    ibv_dereg_mr(b);
    munmap(p, LEN);
}

/* Called at libc's entry, as glibc's own callers reach it (no PLT, no preload hook). */
static void test_libc_munmap_entry(void) { munmap_path(libc_munmap, "munmap at libc's entry"); }

/* Through the PLT: the preload hook, whose "real" munmap must be UCX's hook now. */
static void test_plt_munmap_reaches_ucx(void) { munmap_path(munmap, "munmap through the PLT"); }

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
    /* UCS_OK (0) only if UCX's own test of its hooks saw every event: it fails when a
     * preload hook sends its calls past UCX's patched entry points. */
    ucx_watch_unmaps();
    ucx_on = 1;
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
    /* The glibc paths of stale.h report their unmaps to UCX's view too (heap trimming
     * goes through UCX's sbrk hook, which calls brk(2) itself). */
    unmap_watch.expect = ucx_expect;
    unmap_watch.check = ucx_check;
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
        check_report("test_late_library_loaded");
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
