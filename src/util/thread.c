/* thread.c - starts libmrcache's helper threads (see thread.h for their invariants), and
 * tells whether the process runs a single thread. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/thread.h"

int mrc_thread_start(void *(*fn)(void *), void *arg, const char *name)
{
    /* The new thread inherits the mask: block everything around the create. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256u << 10);
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        pthread_setname_np(t, name);
    return rc;
}

int mrc_thread_single(void)
{
    /* Raw system calls: this runs during start-up, and libc's wrappers may be patched. */
    char buf[4096];   /* "Threads:" follows the Groups line, which can be long */
    int fd = (int)syscall(SYS_open, "/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *t = strstr(buf, "\nThreads:");
    return t && strtol(t + 9, NULL, 10) == 1;
}
