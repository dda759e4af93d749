/* thread.c - starts libmrcache's helper threads (see thread.h for their invariants), and
 * tells whether the process runs a single thread, or only libmrcache's. */
#include <dirent.h>
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

/* The first bytes of path into buf (NUL-terminated): their length, or -1. */
static long read_head(const char *path, char *buf, size_t size)
{
    int fd = (int)syscall(SYS_open, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    long n = syscall(SYS_read, fd, buf, size - 1);
    syscall(SYS_close, fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return n;
}

/* A /proc stat line's state letter and name: the name is between the first '(' and the
 * last ')' (it may hold either). 0 if the line is not one. */
static char stat_state(char *line, char **name)
{
    char *open_paren = strchr(line, '('), *close_paren = strrchr(line, ')');
    if (!open_paren || !close_paren || close_paren < open_paren || close_paren[1] != ' ')
        return 0;
    *close_paren = 0;
    *name = open_paren + 1;
    return close_paren[2];
}

/* Whether the thread tid (digits) is alive and not one of ours: 1, 0, or -1 (gone). */
static int program_thread(const char *tid)
{
    char path[64] = "/proc/self/task/", line[256], *name;
    size_t n = strlen(path), k = strlen(tid);
    if (n + k + sizeof("/stat") > sizeof(path))
        return -1;
    memcpy(path + n, tid, k);
    memcpy(path + n + k, "/stat", sizeof("/stat"));
    if (read_head(path, line, sizeof(line)) <= 0)
        return -1;
    char st = stat_state(line, &name);
    if (!st || st == 'Z' || st == 'X')
        return -1;
    return strncmp(name, MRC_THREAD_PREFIX, sizeof(MRC_THREAD_PREFIX) - 1) != 0;
}

int mrc_thread_only_helpers(int *main_gone)
{
    char line[256], *name;
    *main_gone = 0;
    /* The main thread first: while it runs (the common case) one read answers. */
    if (read_head("/proc/self/stat", line, sizeof(line)) <= 0)
        return 0;
    char st = stat_state(line, &name);
    if (st != 'Z' && st != 'X')
        return 0;
    *main_gone = 1;
    int dir = (int)syscall(SYS_open, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return 0;
    char buf[2048] __attribute__((aligned(8)));
    long n;
    int others = 0;
    while (!others && (n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0)
        for (long at = 0; at < n && !others;) {
            struct dirent64 *d = (struct dirent64 *)(void *)(buf + at);
            at += d->d_reclen;
            if (d->d_name[0] >= '0' && d->d_name[0] <= '9' && strtol(d->d_name, NULL, 10) != getpid())
                others = program_thread(d->d_name) == 1;
        }
    syscall(SYS_close, dir);
    return !others && n == 0;
}
