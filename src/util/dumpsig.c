/* dumpsig.c - the on-demand dump signal: parse its name, install a handler that sets a
 * flag, run the dump later from a safe context. Invariants: the handler is
 * async-signal-safe (one atomic store, errno untouched); each signal gives at most one
 * dump, and concurrent polls never dump twice for one signal. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/dumpsig.h"

int mrc_dumpsig_flag;
static void (*dump_fn)(void);

static void on_signal(int signo)
{
    (void)signo;
    __atomic_store_n(&mrc_dumpsig_flag, 1, __ATOMIC_RELAXED);
}

/* Signals a program can reasonably spare: none of them is a fault or job control. */
static int allowed(int signo)
{
    return signo == SIGUSR1 || signo == SIGUSR2 || signo == SIGHUP || signo == SIGWINCH || signo == SIGURG ||
           signo == SIGPWR || (signo >= SIGRTMIN && signo <= SIGRTMAX);
}

static int parse_uint(const char *s, int *out)
{
    if (!*s)
        return -1;
    long v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 1000)
            return -1;
        v = v * 10 + (*s - '0');
    }
    *out = (int)v;
    return 0;
}

int mrc_dumpsig_parse(const char *s)
{
    static const struct { const char *name; int signo; } names[] = {
        { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "HUP", SIGHUP },
        { "WINCH", SIGWINCH }, { "URG", SIGURG }, { "PWR", SIGPWR },
    };
    int n;
    if (!strcasecmp(s, "none") || !strcasecmp(s, "off") || !strcmp(s, "0"))
        return 0;
    if (!strncasecmp(s, "SIG", 3))
        s += 3;
    if (!parse_uint(s, &n))
        return allowed(n) ? n : -1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcasecmp(s, names[i].name))
            return names[i].signo;
    if (!strncasecmp(s, "RTMIN", 5)) {
        if (!s[5])
            return SIGRTMIN;
        if (s[5] == '+' && !parse_uint(s + 6, &n) && SIGRTMIN + n <= SIGRTMAX)
            return SIGRTMIN + n;
        return -1;
    }
    if (!strncasecmp(s, "RTMAX", 5)) {
        if (!s[5])
            return SIGRTMAX;
        if (s[5] == '-' && !parse_uint(s + 6, &n) && SIGRTMAX - n >= SIGRTMIN)
            return SIGRTMAX - n;
        return -1;
    }
    return -1;
}

int mrc_dumpsig_install(int signo, void (*dump)(void))
{
    if (!signo)
        return 0;
    if (!allowed(signo) || !dump)
        return -EINVAL;
    dump_fn = dump;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return sigaction(signo, &sa, NULL) ? -errno : 0;
}

void mrc_dumpsig_run(void)
{
    /* The exchange picks one caller per signal; a signal arriving during the dump sets
     * the flag again and gets its own, later dump. */
    if (!__atomic_exchange_n(&mrc_dumpsig_flag, 0, __ATOMIC_ACQ_REL) || !dump_fn)
        return;
    int saved = errno;   /* the verbs call we ride on must not see the dump's errno */
    dump_fn();
    errno = saved;
}
