/* warn_workload.c - a verbs program for the warnings' tests: WL_COUNT registrations of
 * WL_SIZE bytes (default 8 of 64 KiB), held until the end, from the main thread and a
 * second one, then (unless WL_FORK=0) a forked child that registers as many; with
 * WL_UCX=1 it first loads UCX's transport layer and memory hooks (as a UCX program has
 * them), with WL_FABRIC=1 libfabric; WL_COUNT=0 registers nothing. Exit 0, or 3 if
 * WL_UCX=1 or WL_FABRIC=1 and the library is not installed, 1 if a call fails. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "common.h"

static size_t size = 64 << 10;
static int count = 8;

/* Registers half of the buffers (or all, alone) and keeps them: 0 or 1 on a failure. */
static void *register_some(void *arg)
{
    int n = *(int *)arg;
    for (int i = 0; i < n; i++) {
        /* A gap after each: buffers the cache would merge pin their pages twice. */
        char *p = map_anon(NULL, 2 * size, 0);
        if (!p || !ibv_reg_mr(pd, p, size, IBV_ACCESS_LOCAL_WRITE))
            return (void *)1;
    }
    return NULL;
}

static int run_all(void)
{
    int half = count / 2, rest = count - count / 2;
    pthread_t t;
    void *r1 = NULL, *r2;
    if (pthread_create(&t, NULL, register_some, &half))
        return 1;
    r2 = register_some(&rest);
    pthread_join(t, &r1);
    return r1 || r2;
}

int main(void)
{
    const char *s = getenv("WL_SIZE"), *c = getenv("WL_COUNT");
    if (s)
        size = strtoull(s, NULL, 0);
    if (c)
        count = atoi(c);
    /* libuct brings libucs, and libucs brings libucm (UCX's IB transport itself links the
     * system's libibverbs providers, which the software NIC cannot stand in for). */
    if (getenv("WL_UCX") && (!dlopen("libuct.so.0", RTLD_NOW | RTLD_GLOBAL) ||
                             !dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD)))
        return 3;
    if (getenv("WL_FABRIC") && !dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL))
        return 3;
    open_nic();
    if (!count)
        return 0;
    if (run_all())
        return 1;
    const char *f = getenv("WL_FORK");
    if (f && !strcmp(f, "0"))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        open_nic();   /* the parent's device and PD are not the child's */
        _exit(run_all());
    }
    int st = 0;
    return pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st);
}
