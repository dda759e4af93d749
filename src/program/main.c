/* main.c - libmrcache run as a program, as libc.so.6 can be: it says what it is and how
 * to use it, or answers mrcache(1)'s questions (--version, --config:
 * docs/library-self-description.md), or views the processes under the cache (--top,
 * --once, --flush: top.c). Invariant: nothing of the cache starts (run as a
 * program the library's constructor does not run: the program's start code would). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcache.h"
#include "program/top.h"
#include "util/config.h"
#include "util/log.h"

/* The dynamic loader that runs us when the file is executed. */
const char mrc_interp[] __attribute__((section(".interp"), used)) = "/lib64/ld-linux-x86-64.so.2";

/* The arguments after the file's own name, read from /proc: an entry point of a shared
 * object gets them only on the stack, where C cannot portably look. Returns their count. */
static int args(char *buf, size_t size, char **argv, int max)
{
    long n = mrc_read_text("/proc/self/cmdline", buf, size);
    if (n < 0)
        return 0;
    int argc = 0;
    for (long at = (long)strlen(buf) + 1; at < n && argc < max; at += (long)strlen(buf + at) + 1)
        argv[argc++] = buf + at;
    return argc;
}

/* The entry point (-Wl,-e): never returns. */
__attribute__((noreturn, force_align_arg_pointer, used)) void mrc_main(void);
void mrc_main(void)
{
    char buf[4096], out[640], *argv[32];
    int argc = args(buf, sizeof(buf), argv, 32);
    const char *arg = argc ? argv[0] : NULL;
    int n;
    if (arg && (!strcmp(arg, "--top") || !strcmp(arg, "--once") || !strcmp(arg, "--flush")))
        exit(mrc_top_main(argc, argv));
    if (arg && !strcmp(arg, "--version")) {
        n = snprintf(out, sizeof(out), "libmrcache %d.%d\n", MRCACHE_VERSION_MAJOR, MRCACHE_VERSION_MINOR);
        mrc_write_all(1, out, (unsigned long)n);
        exit(0);
    }
    if (arg && !strcmp(arg, "--config")) {
        mrc_config_describe(1);
        exit(0);
    }
    int help = arg && (!strcmp(arg, "--help") || !strcmp(arg, "-h"));
    if (arg && !help) {
        n = snprintf(out, sizeof(out), "libmrcache: unknown option '%.200s'\n", arg);
        mrc_write_all(2, out, (unsigned long)n);
    }
    n = snprintf(out, sizeof(out),
                 "libmrcache %d.%d: a registration cache for RDMA programs that need no change.\n"
                 "Run a program under it:\n"
                 "    mrcache [options] program [args]      (mrcache --help)\n"
                 "    LD_PRELOAD=libmrcache.so.%d program [args]\n"
                 "Settings are MRCACHE_* environment variables: mrcache --config, or libmrcache(7).\n"
                 "This file answers --version, --config, --top, --once, --flush and --help.\n"
                 "Licence: BSD-2-Clause.\n",
                 MRCACHE_VERSION_MAJOR, MRCACHE_VERSION_MINOR, MRCACHE_VERSION_MAJOR);
    mrc_write_all(arg && !help ? 2 : 1, out, (unsigned long)n);
    exit(arg && !help ? 2 : 0);
}
