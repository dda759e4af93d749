/* memlock.c - run as an unprivileged user with a small RLIMIT_MEMLOCK: idle cached
 * registrations hold locked memory, and a registration that fits the limit without the
 * cache must still succeed with it (the cache evicts and retries). */
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

#define BUF (64u << 10)

static void test_registration_never_fails_where_it_would_fit(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_MEMLOCK, &rl) == 0);
    CHECKF(rl.rlim_cur <= 512u << 10, "run with a small RLIMIT_MEMLOCK (now %llu)", (unsigned long long)rl.rlim_cur);
    size_t n = rl.rlim_cur / BUF;             /* how many buffers fit at once */
    char *p = map_anon(NULL, (n + 8) * 2 * BUF, 0);
    CHECK(p != NULL);
    /* Register and release many distinct buffers (gaps between them: no merging): only
     * a few fit the limit at once, so idle ones must make room. */
    for (size_t i = 0; i < n + 8; i++) {
        char *b = p + i * 2 * BUF;
        struct ibv_mr *mr = ibv_reg_mr(pd, b, BUF, IBV_ACCESS_LOCAL_WRITE);
        CHECKF(mr != NULL, "buffer %zu of %zu failed: %s", i, n + 8, strerror(errno));
        if (mr) {
            CHECK(write_visible(mr, b, BUF, (unsigned char)i));
            ibv_dereg_mr(mr);
        }
    }
}

int main(void)
{
    if (getuid() == 0) {
        check_skip("test_registration_never_fails_where_it_would_fit", "must run unprivileged");
        return 0;
    }
    open_nic();
    RUN(test_registration_never_fails_where_it_would_fit);
    CHECK_EXIT();
}
