/* stats_workload.c - a verbs program with known call sites: reg_hot (1 miss, then hits),
 * reg_cold (10 misses), leak_here (never deregistered). WL_SCALE (hot repetitions, 200),
 * WL_LEAKS (3), WL_SIGNAL=1 (raise SIGUSR2, then register once more), WL_MAPS=1 (print
 * whether libunwind is mapped). Exit 0 unless a verbs call fails. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define LEN 65536
static int failed;

CHECK_NOIPA static void reg_hot(char *p, int n)
{
    for (int i = 0; i < n; i++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE);
        if (!mr || ibv_dereg_mr(mr))
            failed = 1;
    }
}

CHECK_NOIPA static void reg_cold(char *base, int n)
{
    /* One page apart but each its own mapping's worth: distinct registrations. */
    for (int i = 0; i < n; i++) {
        char *p = map_anon(NULL, LEN, 0);
        struct ibv_mr *mr = p ? ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
        if (!mr || ibv_dereg_mr(mr))
            failed = 1;
        if (p)
            munmap(p, LEN);
    }
    (void)base;
}

CHECK_NOIPA static struct ibv_mr *leak_here(void)
{
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *mr = p ? ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
    __asm__ volatile("" ::: "memory");   /* no tail call: leak_here stays on the stack */
    return mr;
}

static int env_int(const char *name, int def)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

int main(void)
{
    open_nic();
    char *hot = map_anon(NULL, LEN, 0);
    if (!hot)
        return 2;
    reg_hot(hot, env_int("WL_SCALE", 200));
    reg_cold(hot, 10);
    for (int i = env_int("WL_LEAKS", 3); i > 0; i--)
        if (!leak_here())
            failed = 1;
    if (env_int("WL_SIGNAL", 0)) {
        raise(SIGUSR2);
        reg_hot(hot, 1);   /* the dump happens here, in a registration call */
    }
    if (env_int("WL_MAPS", 0)) {
        FILE *f = fopen("/proc/self/maps", "r");
        char line[512];
        int found = 0;
        while (f && fgets(line, sizeof(line), f))
            if (strstr(line, "libunwind"))
                found = 1;
        if (f)
            fclose(f);
        printf("libunwind %s\n", found ? "mapped" : "absent");
    }
    return failed;
}
