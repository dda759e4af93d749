/* test_wild_ucx.c - UCX's libucm in the same process, loaded the way UCX's users load it:
 * dlopen of libucp.so.0 once the cache is in use, or (built with WILD_UCX_LINKED) linked
 * into the program. Its bistro lookup (dlsym(RTLD_NEXT), then RTLD_DEFAULT) then finds
 * libmrcache's own exported munmap family and overwrites its first bytes with a jump into
 * ucm_override_*, which makes the system call itself: the program's calls through its PLT
 * never reach our hook. Each test changes registered memory that way and registers again. */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include "ucm_watch.h"
#include "wild.h"

#define LEN (1u << 20)

/* The entry points libucm patches, as the program's PLT finds them. */
static const char *const entry_names[] = { "munmap", "mmap", "mremap", "madvise", "shmat", "shmdt", "brk", "sbrk" };
#define N_ENTRIES (sizeof(entry_names) / sizeof(entry_names[0]))
static unsigned char entry_before[N_ENTRIES][8];

static void entries_snapshot(unsigned char out[N_ENTRIES][8])
{
    for (unsigned i = 0; i < N_ENTRIES; i++) {
        const unsigned char *f = dlsym(RTLD_DEFAULT, entry_names[i]);
        memset(out[i], 0, 8);
        if (f)
            memcpy(out[i], f, 8);
    }
}

/* Says, per entry point the program's PLT reaches, whose it is and what is there now. */
static void entries_report(void)
{
    unsigned char now[N_ENTRIES][8];
    entries_snapshot(now);
    for (unsigned i = 0; i < N_ENTRIES; i++) {
        const unsigned char *f = dlsym(RTLD_DEFAULT, entry_names[i]);
        Dl_info at = { 0 }, to = { 0 };
        char target[256] = "";
        if (!f)
            continue;
        dladdr(f, &at);
        if (now[i][0] == 0xe9) {   /* jmp rel32 */
            int32_t rel;
            memcpy(&rel, now[i] + 1, 4);
            const unsigned char *t = f + 5 + rel;
            if (dladdr(t, &to) && to.dli_sname)
                snprintf(target, sizeof(target), ": jmp rel32 to %s in %s", to.dli_sname, to.dli_fname);
        }
#ifdef WILD_UCX_LINKED
        /* Linked: libucm patched as it loaded, before main; no "before" to show. */
        wild_note("%s at %s: %02x %02x %02x %02x %02x%s", entry_names[i], at.dli_fname ? at.dli_fname : "?",
                  now[i][0], now[i][1], now[i][2], now[i][3], now[i][4], target);
#else
        wild_note("%s at %s: %02x %02x %02x %02x %02x -> %02x %02x %02x %02x %02x%s%s", entry_names[i],
                  at.dli_fname ? at.dli_fname : "?", entry_before[i][0], entry_before[i][1], entry_before[i][2],
                  entry_before[i][3], entry_before[i][4], now[i][0], now[i][1], now[i][2], now[i][3], now[i][4],
                  memcmp(now[i], entry_before[i], 5) ? " (overwritten)" : " (unchanged)", target);
#endif
    }
}

/* ---- the paths, each through the program's PLT ---- */

static void test_munmap_through_plt_after_ucx(void)
{
    char *p = map_anon(NULL, LEN, 0);
    if (!first_registration(p, LEN))
        return;
    ucx_expect(p);
    CHECK(munmap(p, LEN) == 0);
    ucx_check("munmap");
    CHECK(map_anon(p, LEN, MAP_FIXED_NOREPLACE) == p);
    registered_again(p, LEN, "munmap, then mmap at the same address");
    munmap(p, LEN);
}

static void test_mmap_fixed_through_plt_after_ucx(void)
{
    char *p = map_anon(NULL, LEN, 0);
    if (!first_registration(p, LEN))
        return;
    ucx_expect(p);
    CHECK(map_anon(p, LEN, MAP_FIXED) == p);
    ucx_check("mmap(MAP_FIXED)");
    registered_again(p, LEN, "mmap(MAP_FIXED) over the buffer");
    munmap(p, LEN);
}

/* Shrunk and grown back in place: UCX 1.13's mremap hook takes four arguments, so a
 * MREMAP_FIXED move loses its target address, with or without libmrcache. */
static void test_mremap_shrink_grow_through_plt_after_ucx(void)
{
    char *p = map_anon(NULL, LEN, 0);
    if (!first_registration(p, LEN))
        return;
    ucx_expect(p + LEN / 2);
    CHECK(mremap(p, LEN, LEN / 2, 0) == p);
    ucx_check("mremap shrinking");
    CHECK(mremap(p, LEN / 2, LEN, 0) == p);
    registered_again(p, LEN, "mremap shrinking, then growing in place");
    munmap(p, LEN);
}

static void test_madvise_dontneed_through_plt_after_ucx(void)
{
    char *p = map_anon(NULL, LEN, 0);
    if (!first_registration(p, LEN))
        return;
    ucx_expect(p);
    CHECK(madvise(p, LEN, MADV_DONTNEED) == 0);
    ucx_check("madvise(MADV_DONTNEED)");
    registered_again(p, LEN, "madvise(MADV_DONTNEED)");
    munmap(p, LEN);
}

static void test_shmat_remap_through_plt_after_ucx(void)
{
    int id1 = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600), id2 = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    CHECK(id1 >= 0 && id2 >= 0);
    char *p = shmat(id1, NULL, 0);
    CHECK(p != (void *)-1);
    if (p != (void *)-1 && first_registration(p, LEN)) {
        ucx_expect(p);
        CHECK(shmat(id2, p, SHM_REMAP) == p);
        ucx_check("shmat(SHM_REMAP)");
        registered_again(p, LEN, "shmat(SHM_REMAP) of another segment");
    }
    if (p != (void *)-1)
        shmdt(p);
    shmctl(id1, IPC_RMID, NULL);
    shmctl(id2, IPC_RMID, NULL);
}

static void test_shmdt_through_plt_after_ucx(void)
{
    int id1 = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600), id2 = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    CHECK(id1 >= 0 && id2 >= 0);
    char *p = shmat(id1, NULL, 0);
    CHECK(p != (void *)-1);
    if (p != (void *)-1 && first_registration(p, LEN)) {
        ucx_expect(p);
        CHECK(shmdt(p) == 0);
        ucx_check("shmdt");
        CHECK(shmat(id2, p, 0) == p);
        registered_again(p, LEN, "shmdt, then shmat of another segment there");
        shmdt(p);
    }
    shmctl(id1, IPC_RMID, NULL);
    shmctl(id2, IPC_RMID, NULL);
}

/* Our own page-aligned piece at the heap's end, given back by shrink(p, len). */
static void heap_end_path(void (*shrink)(char *p, size_t len), const char *what)
{
    long pg = sysconf(_SC_PAGESIZE);
    char *cur = sbrk(0);
    size_t pad = (size_t)(-(uintptr_t)cur & (uintptr_t)(pg - 1));
    CHECK(sbrk((intptr_t)pad) == cur);
    char *p = sbrk(LEN);
    CHECK(p != (void *)-1);
    if (p == (void *)-1 || !first_registration(p, LEN))
        return;
    ucx_expect(p + LEN - 1);
    shrink(p, LEN);
    ucx_check(what);
    CHECK(sbrk(LEN) == p);
    registered_again(p, LEN, what);
    sbrk(-(intptr_t)(LEN + pad));
}

static void shrink_sbrk(char *p, size_t len)
{
    (void)p;
    CHECK(sbrk(-(intptr_t)len) != (void *)-1);
}

static void shrink_brk(char *p, size_t len)
{
    (void)len;
    CHECK(brk(p) == 0);
}

static void sbrk_body(void) { heap_end_path(shrink_sbrk, "sbrk shrinking the heap"); }
static void brk_body(void) { heap_end_path(shrink_brk, "brk shrinking the heap"); }

/* In a child: they move the heap's end. */
static void test_sbrk_shrink_through_plt_after_ucx(void) { in_child(sbrk_body); }
static void test_brk_shrink_through_plt_after_ucx(void) { in_child(brk_body); }

/* Loads UCX as its users do; 1 if it is not installed. */
static int load_ucx(void)
{
#ifndef WILD_UCX_LINKED
    /* libucp, not libucs: with libucs as the root of the load, libc follows libucm in
     * its lookup scope and RTLD_NEXT finds libc's munmap; under libucp nothing after
     * libucm defines it, and RTLD_DEFAULT finds the preloaded one. */
    if (!dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL)) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
#endif
    ucx_on = ucx_watch_unmaps() == 0;
    return 0;
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        check_skip("test_wild_ucx", "no patching under a sanitizer");
        return 0;
    }
    open_nic();
    new_pd();
    /* The cache in use before UCX arrives, as with a transport loaded late. */
    char *w = map_anon(NULL, LEN, 0);
    CHECK(first_registration(w, LEN));
    munmap(w, LEN);
    entries_snapshot(entry_before);
    if (load_ucx()) {
        check_skip("test_wild_ucx", "libucp.so.0 not installed (scripts/install-deps.sh installs libucx0)");
        return 0;
    }
    entries_report();
    WILD_RUN(test_munmap_through_plt_after_ucx);
    WILD_RUN(test_mmap_fixed_through_plt_after_ucx);
    WILD_RUN(test_mremap_shrink_grow_through_plt_after_ucx);
    WILD_RUN(test_madvise_dontneed_through_plt_after_ucx);
    WILD_RUN(test_shmat_remap_through_plt_after_ucx);
    WILD_RUN(test_shmdt_through_plt_after_ucx);
    WILD_RUN(test_sbrk_shrink_through_plt_after_ucx);
    WILD_RUN(test_brk_shrink_through_plt_after_ucx);
    CHECK_EXIT();
}
