/* early.c - preloaded after libmrcache (LD_PRELOAD=libmrcache.so:libmrc_early.so), so its
 * constructor runs first: EARLY_THREAD=1 leaves a thread running, which must stop the
 * routing of free; EARLY_NO_PWRITE=1 forbids pwrite (seccomp), so a slot on a read-only
 * page must be routed another way, and its page must stay read-only. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "deny.h"

static void *idle(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

__attribute__((constructor)) static void early(void)
{
    const char *t = getenv("EARLY_THREAD"), *w = getenv("EARLY_NO_PWRITE");
    pthread_t th;
    if (t && atoi(t) && pthread_create(&th, NULL, idle, NULL)) {
        perror("early: pthread_create");
        exit(2);
    }
    if (w && atoi(w) && deny_syscall(SYS_pwrite64, 0, 0, EPERM)) {
        perror("early: seccomp");
        exit(2);
    }
}
