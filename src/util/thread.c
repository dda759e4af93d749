/* thread.c - starts libmrcache's helper threads (see thread.h for their invariants). */
#include <pthread.h>
#include <signal.h>

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
