/* test_patched_exports.c - another library overwriting libmrcache's own exported munmap
 * after the cache is in use (test/preload/libmrc_fakepatch.so with FAKEPATCH_TARGET=name,
 * loaded with dlopen as a transport plugin would be): the program's munmap through its
 * PLT must still invalidate. With FAKEPATCH_PROTECT=raw the patcher changes the page's
 * protection with the system call, so only the registration path's look at the entry
 * points (a few per miss) can notice it: the test makes misses before the munmap (not
 * with NO_MISSES, where the mprotect hook alone must have noticed). The
 * patcher's own hook must keep receiving the calls (it says "fakepatch: intact" at exit).
 * EXPECT_OFF: the patch cannot be chained, so caching must stop and every registration
 * reach the NIC (fresh data, and nothing served from the cache). */
#include <dlfcn.h>

#include "stale.h"

#define LEN (64u << 10)
#define MISSES 64      /* more than twice the watched entry points, one per miss */

static void test_munmap_through_patched_export(void)
{
    char *p = map_anon(NULL, LEN, 0);
    CHECK(p != NULL);
    if (!p)
        return;
    struct ibv_mr *a = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, LEN, 0x11));
    CHECK(a && ibv_dereg_mr(a) == 0);
    CHECKF(dlopen(getenv("LATE_PATCH"), RTLD_NOW | RTLD_LOCAL) != NULL, "%s", dlerror());
    /* Misses on buffers of their own: the registration path looks at the entry points. */
    char *q = getenv("NO_MISSES") ? NULL : map_anon(NULL, MISSES * 2 * 4096, 0);
    for (int i = 0; q && i < MISSES; i++) {
        struct ibv_mr *m = ibv_reg_mr(pd, q + i * 2 * 4096, 4096, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECK(m && ibv_dereg_mr(m) == 0);
    }
    uint64_t regs = nic_regs();
    CHECK(munmap(p, LEN) == 0);
    CHECK(map_anon(p, LEN, MAP_FIXED_NOREPLACE) == p);
    struct ibv_mr *b = ibv_reg_mr(pd, p, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(b != NULL);
    if (b) {
        check_outcome(write_visible(b, p, LEN, 0x22), "the buffer mapped again after a munmap through the patched export");
        CHECK(ibv_dereg_mr(b) == 0);
    }
    CHECKF(nic_regs() == regs + 1, "%llu registrations for the buffer mapped again", (unsigned long long)(nic_regs() - regs));
    if (getenv("EXPECT_OFF")) {
        struct mrcache_stats s;
        CHECK(mrcache_stats_read(sizeof(s), &s) == 0 && !s.enabled);
    }
    munmap(p, LEN);
    if (q)
        munmap(q, MISSES * 2 * 4096);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    new_pd();
    RUN(test_munmap_through_patched_export);
    CHECK_EXIT();
}
