/* dumpsig.h - statistics on demand for long-running programs: MRCACHE_DUMP_SIGNAL names a
 * signal whose handler only sets a flag (async-signal-safe); the next registration or
 * deregistration call, a context where writing files is safe, sees it and dumps.
 * Invariant: the handler touches nothing but one int; the dump never runs in a hook. */
#ifndef MRC_DUMPSIG_H
#define MRC_DUMPSIG_H

/* Set by the handler, cleared by the one who dumps. */
extern int mrc_dumpsig_flag;

/* The signal number a MRCACHE_DUMP_SIGNAL value names: "none"/"off"/"0" give 0; USR1,
 * USR2, HUP, WINCH, URG, PWR, RTMIN, RTMIN+n, RTMAX-n (optionally "SIG"-prefixed, any
 * case) or their numbers. Signals whose default action is a crash report, or that cannot
 * be caught, are refused: -1. */
int mrc_dumpsig_parse(const char *s);

/* Installs the flag-setting handler for signo (SA_RESTART: the program's system calls
 * are not interrupted) and remembers dump, run by mrc_dumpsig_poll. 0 or -errno; signo 0
 * does nothing. A handler the program installs later for the same signal replaces ours. */
int mrc_dumpsig_install(int signo, void (*dump)(void));

/* Runs the dump if the signal came; a no-op otherwise. */
void mrc_dumpsig_run(void);

/* For the registration path: one relaxed load when no signal came. Never call it from
 * a malloc or unmap hook (the dump opens a file and may allocate). */
static inline void mrc_dumpsig_poll(void)
{
    if (__builtin_expect(__atomic_load_n(&mrc_dumpsig_flag, __ATOMIC_RELAXED) != 0, 0))
        mrc_dumpsig_run();
}

#endif
