/* test_inuse.c - the program's own MRs that outlive their memory, on the software NIC: an
 * MR still registered when its memory is unmapped, freed, discarded, moved or replaced
 * is counted in inval_in_use and reported once per registration call site, with its
 * keys and the cause; one deregistered first, one made after the change, one whose own
 * range the change missed (though its registration was shared with one it hit), and a
 * forked child's inherited ones are not; the MR itself stays what it was (its writes
 * still land in the old pages, as without libmrcache). Run also with
 * MRCACHE_REMOTE=never, where remote-access registrations are their caller's alone. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/wait.h>

#include "common.h"
#include "capture.h"
#include "mrc_counter.h"

#define PG 4096ul

static int reports(void)
{
    return capture_count("outlived its memory");
}

/* Whether the report names the registering function fn: the helper thread, which may
 * come first, names the object and offset instead ("test_inuse+0x..."). */
static int names_site(const char *fn)
{
    char sym[128];
    snprintf(sym, sizeof(sym), "registered from %s+0x", fn);
    return strstr(capture_said, sym) || strstr(capture_said, "registered from test_inuse+0x");
}

/* Whether a report names this lkey. */
static int reported_key(uint32_t lkey)
{
    char k[32];
    snprintf(k, sizeof(k), "lkey %#x ", lkey);
    return strstr(capture_said, k) != NULL;
}

/* A real device's RDMA WRITE (write_visible) needs remote write. */
static unsigned access_of_run(void)
{
    return getenv("REMOTE") || nic.real ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_LOCAL_WRITE;
}

/* One call site for the once-per-site check (a tail call: its return address is in
 * the caller). */
static CHECK_NOIPA struct ibv_mr *reg_here(void *p, size_t len)
{
    return ibv_reg_mr(pd, p, len, access_of_run());
}

static void test_unmapped_under_a_live_mr(void)
{
    long long n0 = mrc_counter("inval_in_use");
    char *p = map_anon(NULL, 16 * PG, 0);
    memset(p, 1, 16 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, p, 8 * PG, access_of_run());
    CHECK(mr);
    capture_begin();
    munmap(p, 16 * PG);
    /* The program keeps the MR and maps something else there: it still writes into the
     * old pages, exactly as without libmrcache. */
    char *q = map_anon(p, 16 * PG, MAP_FIXED);
    CHECK(q == p);
    CHECK(!write_visible(mr, q, PG, 0x42));
    CHECK(ibv_dereg_mr(mr) == 0);
    capture_end();
    CHECKF(reports() == 1 && reported_key(mr->lkey) && strstr(capture_said, "unmapped (munmap)"), "said: %s", capture_said);
    CHECK(mrc_counter("inval_in_use") == n0 + 1);
    munmap(q, 16 * PG);
}

/* Many times over, "munmap, then dereg" is counted by the time the deregistration
 * returns, while the helper thread, woken by the unmaps, scans the handles for the same
 * records (a short wait between the two gives its scan room to run between them). */
static void test_unmapped_then_deregistered_always_counted(void)
{
    int rounds = nic.real ? 2000 : 20000, short_of = 0;
    long long n = mrc_counter("inval_in_use");
    for (int i = 0; i < rounds && short_of < 10; i++) {
        char *p = map_anon(NULL, 4 * PG, 0);
        memset(p, 1, 4 * PG);
        struct ibv_mr *mr = ibv_reg_mr(pd, p, 4 * PG, access_of_run());
        CHECK(mr);
        if (!mr)
            return;
        munmap(p, 4 * PG);
        for (volatile int k = 0; k < (i % 64) * 200; k++)
            ;
        CHECK(ibv_dereg_mr(mr) == 0);
        long long now = mrc_counter("inval_in_use");
        short_of += now < n + 1;
        n = now;
    }
    CHECKF(short_of == 0, "%d deregistrations returned before their MR was counted", short_of);
}

/* Deregistered first, the MR is idle in the cache when the memory goes: nothing to say;
 * and an MR made after a change is not its holder. */
static void test_deregistered_first_or_made_after(void)
{
    long long n0 = mrc_counter("inval_in_use");
    capture_begin();
    char *p = map_anon(NULL, 8 * PG, 0);
    memset(p, 1, 8 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, p, 8 * PG, access_of_run());
    CHECK(mr && ibv_dereg_mr(mr) == 0);
    munmap(p, 8 * PG);
    p = map_anon(p, 8 * PG, MAP_FIXED);
    memset(p, 2, 8 * PG);
    mr = ibv_reg_mr(pd, p, 8 * PG, access_of_run());
    CHECK(mr && write_visible(mr, p, 8 * PG, 0x17));
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(p, 8 * PG);
    capture_end();
    CHECKF(reports() == 0, "said: %s", capture_said);
    CHECK(mrc_counter("inval_in_use") == n0);
}

/* Two MRs served by one registration (a wider one made first, local-only so that it
 * serves both): the change of one MR's page says nothing of the other, whose own memory
 * is untouched (seen through it where the software NIC writes by lkey). */
static void test_only_the_mr_whose_range_changed(void)
{
    long long n0 = mrc_counter("inval_in_use");
    char *p = map_anon(NULL, 16 * PG, 0);
    memset(p, 1, 16 * PG);
    struct ibv_mr *wide = ibv_reg_mr(pd, p, 16 * PG, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *a = ibv_reg_mr(pd, p, PG, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *b = ibv_reg_mr(pd, p + 8 * PG, PG, IBV_ACCESS_LOCAL_WRITE);
    CHECK(wide && a && b && a->lkey == wide->lkey && b->lkey == wide->lkey);
    CHECK(ibv_dereg_mr(wide) == 0);
    capture_begin();
    CHECK(madvise(p, PG, MADV_DONTNEED) == 0);
    if (!nic.real)
        CHECK(write_visible(b, p + 8 * PG, PG, 0x33));   /* b's pages are still the mapped ones */
    CHECK(ibv_dereg_mr(a) == 0 && ibv_dereg_mr(b) == 0);
    capture_end();
    CHECKF(reports() == 1 && strstr(capture_said, "discarded (madvise)"), "said: %s", capture_said);
    char range[64];
    snprintf(range, sizeof(range), "over [%p, +%lu)", (void *)p, PG);
    CHECKF(strstr(capture_said, range) != NULL, "want %s in: %s", range, capture_said);
    CHECK(mrc_counter("inval_in_use") == n0 + 1);
    munmap(p, 16 * PG);
}

/* Kept and never deregistered (a pool): the count is there when the statistics are
 * read, without a deregistration to find it; a freed malloc chunk is a change too. */
static void test_kept_in_a_pool(void)
{
    long long n0 = mrc_counter("inval_in_use");
    char *chunk = malloc(4u << 20);   /* past the mmap threshold: free unmaps it */
    CHECK(chunk);
    memset(chunk, 3, 4u << 20);
    struct ibv_mr *mr = ibv_reg_mr(pd, chunk, 1u << 20, access_of_run());
    CHECK(mr);
    volatile uintptr_t at = (uintptr_t)chunk;
    long long inval0 = mrc_counter("invalidated");
    capture_begin();
    free(chunk);
    long long n1 = mrc_counter("inval_in_use");
    capture_end();
    unsigned char vec;
    if (mincore((void *)at, 4096, &vec) == 0 || mrc_counter("invalidated") == inval0) {
        SKIP_TEST("the allocator's free was not an unmap libmrcache saw (a sanitizer's own allocator)");
        CHECK(ibv_dereg_mr(mr) == 0);
        return;
    }
    CHECKF(n1 == n0 + 1 && reports() == 1 && reported_key(mr->lkey), "counted %lld (from %lld); said: %s", n1, n0,
           capture_said);
    CHECK(ibv_dereg_mr(mr) == 0);
}

/* Many MRs from one call site: each counted, one report. */
static void test_once_per_call_site(void)
{
    long long n0 = mrc_counter("inval_in_use");
    capture_begin();
    struct ibv_mr *mrs[3];
    CHECK_NO_UNROLL
    for (int i = 0; i < 3; i++) {
        char *p = map_anon(NULL, 4 * PG, 0);
        memset(p, 4, 4 * PG);
        mrs[i] = reg_here(p, 4 * PG);
        CHECK(mrs[i]);
        void *q = mremap(p, 4 * PG, PG, 0);   /* shrunk: three pages of it gone */
        CHECK(q == p);
        munmap(p, PG);
    }
    for (int i = 0; i < 3; i++)
        CHECK(ibv_dereg_mr(mrs[i]) == 0);
    capture_end();
    CHECKF(reports() == 1 && names_site("test_once_per_call_site"), "said: %s", capture_said);
    CHECK(mrc_counter("inval_in_use") == n0 + 3);
}

/* A forked child has its parent's MRs, not its own: their memory going in the child is
 * the child's business, not a report of either. */
static void test_fork_child_says_nothing(void)
{
    long long n0 = mrc_counter("inval_in_use");
    char *p = map_anon(NULL, 4 * PG, 0);
    memset(p, 5, 4 * PG);
    struct ibv_mr *mr = ibv_reg_mr(pd, p, 4 * PG, access_of_run());
    CHECK(mr);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        munmap(p, 4 * PG);
        long long n = -1;
        mrc_counter_read("inval_in_use", &n);
        char c = n == 0 ? 'y' : 'n';
        if (write(fds[1], &c, 1) != 1)
            _exit(2);
        _exit(0);
    }
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1 && c == 'y');
    int st;
    waitpid(pid, &st, 0);
    close(fds[0]);
    close(fds[1]);
    CHECK(write_visible(mr, p, 4 * PG, 0x55));
    CHECK(ibv_dereg_mr(mr) == 0);
    munmap(p, 4 * PG);
    CHECK(mrc_counter("inval_in_use") == n0);
}

/* A registration cache of the program's own, called through a dlopen handle of
 * libibverbs (as NCCL's is): its MRs outliving their memory are reported, naming the
 * caller. */
static void test_own_cache_through_a_handle(void)
{
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(h);
    if (!h)
        return;
    struct ibv_mr *(*reg)(struct ibv_pd *, void *, size_t, int) = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int))dlsym(h, "ibv_reg_mr");
    int (*dereg)(struct ibv_mr *) = (int (*)(struct ibv_mr *))dlsym(h, "ibv_dereg_mr");
    CHECK(reg && dereg);
    long long n0 = mrc_counter("inval_in_use");
    char *p = map_anon(NULL, 4 * PG, 0);
    memset(p, 6, 4 * PG);
    struct ibv_mr *mr = reg(pd, p, 4 * PG, (int)access_of_run());
    CHECK(mr);
    capture_begin();
    munmap(p, 4 * PG);
    CHECK(dereg(mr) == 0);
    capture_end();
    CHECKF(reports() == 1 && names_site("test_own_cache_through_a_handle"), "said: %s", capture_said);
    CHECK(mrc_counter("inval_in_use") == n0 + 1);
    dlclose(h);
}

int main(void)
{
    open_nic();
    if (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "libmrcache")) {
        check_skip("test_inuse", "libmrcache is not preloaded");
        return 0;
    }
    RUN(test_unmapped_under_a_live_mr);
    RUN(test_deregistered_first_or_made_after);
    RUN(test_only_the_mr_whose_range_changed);
    RUN(test_kept_in_a_pool);
    RUN(test_once_per_call_site);
    RUN(test_fork_child_says_nothing);
    RUN(test_own_cache_through_a_handle);
    RUN(test_unmapped_then_deregistered_always_counted);
    CHECK_EXIT();
}
