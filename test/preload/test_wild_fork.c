/* test_wild_fork.c - children made without fork(), so no pthread_atfork handler runs in
 * them: _Fork(), glibc's clone(), clone and clone3 and fork as raw system calls. Such a
 * child shares its parent's device file, as any child does (the software NIC too, having
 * no handler run either). Its registration must pin its own pages, not be handed the
 * parent's cached MR; its exit must not deregister the parent's MRs. With
 * WILD_FORK_SAFE=1 (run in rdma-core's fork-safe mode, on a NIC without copy-on-fork):
 * registered pages are left out of every child, so a buffer the parent registered and
 * released must be in the child whichever call made it. */
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>

#include "wild.h"

#define LEN (1u << 20)
#define CHILD_STACK (256u << 10)

enum how { VIA__FORK, VIA_CLONE, VIA_RAW_CLONE, VIA_RAW_CLONE3, VIA_RAW_FORK };
static const char *const how_name[] = {
    [VIA__FORK] = "_Fork", [VIA_CLONE] = "clone", [VIA_RAW_CLONE] = "raw_clone",
    [VIA_RAW_CLONE3] = "raw_clone3", [VIA_RAW_FORK] = "raw_fork",
};

/* What each test's child does, on the parent's buffer. */
static char *child_buf;
static int (*child_body)(void);

static int clone_entry(void *arg)
{
    (void)arg;
    _exit(child_body());
}

/* Starts a child that runs child_body and exits with its result. */
static pid_t spawn(enum how how)
{
    fflush(NULL);
    pid_t pid = -1;
    switch (how) {
    case VIA__FORK:
        pid = _Fork();
        break;
    case VIA_CLONE: {
        static char *stack;
        if (!stack)
            stack = map_anon(NULL, CHILD_STACK, 0);
        return stack ? clone(clone_entry, stack + CHILD_STACK, SIGCHLD, NULL) : -1;
    }
    case VIA_RAW_CLONE:
        pid = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
        break;
    case VIA_RAW_CLONE3: {
        struct { uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls; } args = {
            .exit_signal = SIGCHLD,
        };
        pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        break;
    }
    case VIA_RAW_FORK:
        pid = (pid_t)syscall(SYS_fork);
        break;
    }
    if (pid == 0)
        _exit(child_body());
    return pid;
}

/* The child's exit status, 0..255, or -1 (killed: a child that hangs is stopped by its
 * alarm). */
static int child_result(pid_t pid)
{
    int st = 0;
    CHECKF(pid > 0, "starting the child: %s", strerror(errno));
    if (pid <= 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    if (WIFSIGNALED(st))
        fprintf(stderr, "the child was killed by signal %d%s\n", WTERMSIG(st),
                WTERMSIG(st) == SIGALRM ? " (it hung)" : "");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the child registers the parent's (cached) buffer in the inherited pd ---- */

static int child_registers(void)
{
    alarm(30);
    struct ibv_mr *mr = ibv_reg_mr(pd, child_buf, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    if (!mr)
        return 2;
    int ok = write_visible(mr, child_buf, LEN, 0x22);
    ibv_dereg_mr(mr);
    release_cached_before_exit();
    return ok ? 0 : 1;   /* _exit: no exit handler (that is the other test) */
}

static enum how cur_how;

/* Run in a child of its own (in_child: a proper fork, with its own device): after such a
 * child used the shared device, the software NIC's queue state in the parent is behind. */
static void child_registers_body(void)
{
    child_buf = map_anon(NULL, LEN, 0);
    if (!first_registration(child_buf, LEN))
        return;
    child_body = child_registers;
    int r = child_result(spawn(cur_how));
    CHECKF(r == 0 || r == 1, "the child could not register (%d)", r);
    check_outcome(r == 0, "the child's write through the MR it registered");
    /* Where a stale MR's write went: into the parent's pages. */
    size_t hit = 0;
    for (size_t i = 0; i < LEN; i++)
        hit += (unsigned char)child_buf[i] == 0x22;
    if (!expect_stale)
        CHECKF(hit == 0, "%zu bytes of the child's write landed in the parent's buffer", hit);
}

/* ---- the child exits (exit(), so atexit handlers run) with the parent's MRs cached ---- */

static int child_exits(void)
{
    alarm(30);
    exit(0);
}

static void child_exit_body(void)
{
    child_buf = map_anon(NULL, LEN, 0);
    if (!first_registration(child_buf, LEN))
        return;
    child_body = child_exits;
    CHECK(child_result(spawn(cur_how)) == 0);
    registered_again(child_buf, LEN, "the parent's buffer registered again after a child exited");
}

/* The same with the parent's MR in use (never deregistered) while the child exits. */
static void child_exit_in_use_body(void)
{
    child_buf = map_anon(NULL, LEN, 0);
    struct ibv_mr *mr = ibv_reg_mr(pd, child_buf, LEN, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(mr != NULL);
    if (!mr)
        return;
    child_body = child_exits;
    CHECK(child_result(spawn(cur_how)) == 0);
    check_outcome(write_visible(mr, child_buf, LEN, 0x33), "the parent's MR in use while a child exited");
    ibv_dereg_mr(mr);
}

/* ---- the child's first call into libmrcache releases idle registrations ---- */

/* fork(): idle cached registrations are released before it (MRCACHE_FORK=release). */
static int child_forks(void)
{
    alarm(30);
    fflush(NULL);
    pid_t g = fork();
    if (g == 0)
        _exit(0);
    int st = 0;
    return g > 0 && waitpid(g, &st, 0) == g && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

/* MADV_COLLAPSE: idle registrations over the range are released before it (its result,
 * EAGAIN or EINVAL where the kernel cannot collapse, does not matter here). */
static int child_collapses(void)
{
    alarm(30);
    madvise(child_buf, LEN, MADV_COLLAPSE);
    return 0;
}

/* The parent's buffer, cached and idle, must still be registered at the NIC after such a
 * child: the child's release is of its parent's MRs, which it must forget first. */
static void child_releases_body(void)
{
    child_buf = map_anon(NULL, LEN, 0);
    if (!first_registration(child_buf, LEN))
        return;
    CHECK(child_result(spawn(cur_how)) == 0);
    registered_again(child_buf, LEN, "the parent's cached buffer registered again after a child released idle MRs");
}

static void child_fork_body(void)
{
    child_body = child_forks;
    child_releases_body();
}

static void child_collapse_body(void)
{
    child_body = child_collapses;
    child_releases_body();
}

/* ---- fork-safe mode: a released registration's pages are in the child ---- */

static int child_reads(void)
{
    alarm(30);
    return child_buf[100] == 42 ? 0 : 1;   /* faults where the page was left out */
}

static void child_sees_released_body(void)
{
    child_buf = map_anon(NULL, LEN, 0);
    if (!first_registration(child_buf, LEN))
        return;
    child_buf[100] = 42;
    child_body = child_reads;
    int r = child_result(spawn(cur_how));
    CHECKF(r == 0, "the child could not read the buffer the parent released (%s)",
           r < 0 ? "killed: its pages were left out" : "wrong data");
}

static void run_child_registers(void) { in_child(child_registers_body); }
static void run_child_fork(void) { in_child(child_fork_body); }
static void run_child_collapse(void) { in_child(child_collapse_body); }
static void run_child_exit(void) { in_child(child_exit_body); }
static void run_child_exit_in_use(void) { in_child(child_exit_in_use_body); }

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    /* test_child_of_<how>_<what> */
    static const struct {
        const char *what;
        void (*fn)(void);
    } kinds[] = {
        { "registers_its_own_pages", run_child_registers },
        { "exit_keeps_parents_cached_mr", run_child_exit },
        { "exit_keeps_parents_mr_in_use", run_child_exit_in_use },
        { "fork_keeps_parents_cached_mr", run_child_fork },
        { "madv_collapse_keeps_parents_cached_mr", run_child_collapse },
    };
    if (getenv("WILD_FORK_SAFE")) {
        int (*fork_status)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ibv_is_fork_initialized");
        if (!fork_status || fork_status() != IBV_FORK_ENABLED) {
            check_skip("test_child_sees_released_memory", "fork-safe mode is not in effect in this run");
            CHECK_EXIT();
        }
        for (int h = VIA__FORK; h <= VIA_RAW_FORK; h++) {
            char name[128];
            snprintf(name, sizeof(name), "test_child_of_%s_sees_released_memory_in_fork_safe_mode", how_name[h]);
            cur_how = (enum how)h;
            wild_run(name, child_sees_released_body);
        }
        CHECK_EXIT();
    }
    for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        for (int h = VIA__FORK; h <= VIA_RAW_FORK; h++) {
            char name[128];
            snprintf(name, sizeof(name), "test_child_of_%s_%s", how_name[h], kinds[k].what);
            cur_how = (enum how)h;
            wild_run(name, kinds[k].fn);
        }
    CHECK_EXIT();
}
