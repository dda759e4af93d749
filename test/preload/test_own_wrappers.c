/* test_own_wrappers.c - a program that defines munmap, mmap and madvise itself with the
 * system call instruction, as some runtimes and test frameworks do: its calls (and,
 * built with -rdynamic, every library's) reach its definitions before libmrcache's hooks
 * and libc's patched entry points, and nothing of libc's sees them. Each test registers,
 * deregisters (cached), changes the memory through the program's own function, registers
 * again and writes through the new MR: the data must be in the current pages, which
 * under the preload the userfaultfd source (added for such a program) sees to. Run
 * without the preload as the reference; EXPECT_STALE=1 inverts the verdicts (run with a
 * source list that leaves the userfaultfd out: proof that the changes are unseen). */
#include <sys/syscall.h>

#include "stale.h"

#define LEN (1u << 20)

int munmap(void *p, size_t len)
{
    return (int)RAW_SYSCALL(SYS_munmap, p, len);
}

void *mmap(void *p, size_t len, int prot, int flags, int fd, off_t off)
{
    return (void *)RAW_SYSCALL(SYS_mmap, p, len, prot, flags, fd, off);
}

int madvise(void *p, size_t len, int advice)
{
    return (int)RAW_SYSCALL(SYS_madvise, p, len, advice);
}

static void ch_munmap(void *p, size_t len)
{
    CHECK(munmap(p, len) == 0);
    CHECK(map_anon(p, len, MAP_FIXED_NOREPLACE) == p);
}

static void ch_mmap_fixed(void *p, size_t len)
{
    CHECK(map_anon(p, len, MAP_FIXED) == p);
}

static void ch_dontneed(void *p, size_t len)
{
    CHECK(madvise(p, len, MADV_DONTNEED) == 0);
}

static void test_own_munmap(void) { stale_check_fresh(LEN, ch_munmap, "the program's own munmap"); }
static void test_own_mmap_fixed(void) { stale_check_fresh(LEN, ch_mmap_fixed, "the program's own mmap(MAP_FIXED)"); }
static void test_own_madvise_dontneed(void) { stale_check_fresh(LEN, ch_dontneed, "the program's own madvise"); }

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    RUN(test_own_munmap);
    RUN(test_own_mmap_fixed);
    RUN(test_own_madvise_dontneed);
    CHECK_EXIT();
}
