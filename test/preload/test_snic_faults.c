/* test_snic_faults.c - the software NIC's failure injector (snic.h: snic_fail_reg,
 * snic_fail_dereg, snic_get_faults, SNIC_FAIL_REG/SNIC_FAIL_DEREG), without any preload:
 * a refused deregistration leaves the MR registered, pinned and usable; a refused
 * registration pins nothing; counts, "always", disarming, the environment, fork.
 * Usage: test_snic_faults [env-child]   (env-child: run by the test itself) */
#include <sys/wait.h>

#include "never.h"

#define LEN (64u << 10)

static void test_refused_dereg_keeps_mr(void)
{
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *m = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m != NULL);
    if (!m)
        return;
    struct snic_stats s0 = never_nic();
    struct snic_faults f0 = never_faults();
    CHECK(inj.fail_dereg(EBUSY, 2) == 0);
    CHECK(never_faults().dereg_armed == 2);
    CHECK(ibv_dereg_mr(m) == EBUSY && errno == EBUSY);
    CHECK(ibv_dereg_mr(m) == EBUSY);
    struct snic_stats s1 = never_nic();
    CHECK(s1.live_mrs == s0.live_mrs && s1.pinned_bytes == s0.pinned_bytes && s1.dereg_calls == s0.dereg_calls);
    CHECK(write_visible(m, p, LEN, 3));         /* still registered, still usable */
    CHECK(ibv_dealloc_pd(pd) == EBUSY);         /* as with any live MR */
    struct snic_faults f1 = never_faults();
    CHECK(f1.dereg_armed == 0 && f1.dereg_injected == f0.dereg_injected + 2);
    CHECK(ibv_dereg_mr(m) == 0);                /* the cause is gone */
    CHECK(never_nic().live_mrs == s0.live_mrs - 1);
    munmap(p, LEN);
}

static void test_always_until_disarmed(void)
{
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *m = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m != NULL);
    CHECK(inj.fail_dereg(EIO, SNIC_FAIL_ALWAYS) == 0);
    for (int i = 0; i < 5; i++)
        CHECK(ibv_dereg_mr(m) == EIO);
    CHECK(never_faults().dereg_armed == SNIC_FAIL_ALWAYS);
    CHECK(inj.fail_dereg(0, 0) == 0);
    CHECK(ibv_dereg_mr(m) == 0);
    CHECK(inj.fail_dereg(0, 1) == EINVAL && inj.fail_reg(-5, 1) == EINVAL);
    CHECK(never_faults().dereg_armed == 0);
    munmap(p, LEN);
}

static void test_refused_registration_pins_nothing(void)
{
    char *p = map_anon(NULL, LEN, 0);
    struct snic_stats s0 = never_nic();
    CHECK(inj.fail_reg(EIO, 1) == 0);
    /* Argument errors come first and do not use up the injected failure. */
    errno = 0;
    CHECK(ibv_reg_mr(pd, p, 0, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EIO);
    struct snic_stats s1 = never_nic();
    CHECK(s1.live_mrs == s0.live_mrs && s1.pinned_bytes == s0.pinned_bytes && s1.reg_calls == s0.reg_calls);
    struct ibv_mr *m = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m && write_visible(m, p, LEN, 4));
    CHECK(m && ibv_dereg_mr(m) == 0);
    munmap(p, LEN);
}

/* A forked child's NIC is fresh: nothing armed, nothing counted. */
static void test_fork_child_starts_disarmed(void)
{
    CHECK(inj.fail_dereg(EBUSY, 3) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        struct snic_faults f = never_faults();
        _exit(f.dereg_armed == 0 && f.dereg_injected == 0 ? 0 : 1);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(never_faults().dereg_armed == 3);     /* the parent's stays */
    CHECK(inj.fail_dereg(0, 0) == 0);
}

static int run_self(const char *var, const char *value, char *err, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s='%s' /proc/%d/exe env-child 2>&1", var, value, getpid());
    FILE *f = popen(cmd, "r");
    size_t len = f ? fread(err, 1, n - 1, f) : 0;
    err[len] = 0;
    int st = f ? pclose(f) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* SNIC_FAIL_DEREG=EIO:2 and SNIC_FAIL_REG=5 arm at load; a bad value is said once and
 * arms nothing. */
static void test_environment(void)
{
    char out[1024];
    CHECKF(run_self("SNIC_FAIL_DEREG", "EIO:2", out, sizeof(out)) == 0, "%s", out);
    CHECKF(run_self("SNIC_FAIL_REG", "5", out, sizeof(out)) == 0, "%s", out);
    CHECKF(run_self("SNIC_FAIL_DEREG", "EIO:always", out, sizeof(out)) == 0, "%s", out);
    CHECKF(run_self("SNIC_FAIL_DEREG", "bogus:x", out, sizeof(out)) == 0 && strstr(out, "SNIC_FAIL_DEREG=\"bogus:x\""),
           "%s", out);
}

static int env_child(void)
{
    struct snic_faults f = never_faults();
    const char *d = getenv("SNIC_FAIL_DEREG"), *r = getenv("SNIC_FAIL_REG");
    if (d && !strcmp(d, "EIO:2"))
        return f.dereg_armed == 2 ? 0 : 1;
    if (d && !strcmp(d, "EIO:always"))
        return f.dereg_armed == SNIC_FAIL_ALWAYS ? 0 : 1;
    if (d)
        return f.dereg_armed == 0 ? 0 : 1;
    if (r && !strcmp(r, "5")) {
        char *p = map_anon(NULL, LEN, 0);
        errno = 0;
        return f.reg_armed == 1 && !ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) && errno == EIO ? 0 : 1;
    }
    return 1;
}

int main(int argc, char **argv)
{
    open_nic();
    never_resolve_injector();
    if (argc > 1 && !strcmp(argv[1], "env-child"))
        return env_child();
    if (never_preloaded()) {
        check_skip("test_snic_faults", "the software NIC's own test runs without libmrcache");
        return 0;
    }
    RUN(test_refused_dereg_keeps_mr);
    RUN(test_always_until_disarmed);
    RUN(test_refused_registration_pins_nothing);
    RUN(test_fork_child_starts_disarmed);
    RUN(test_environment);
    CHECK_EXIT();
}
