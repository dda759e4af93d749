/* main.c - libmrcache run as a program, as libc.so.6 can be: it says what it is and how
 * to use it, or answers mrcache(1)'s questions (--version, --config:
 * docs/library-self-description.md). Invariant: nothing of the cache starts (run as a
 * program the library's constructor does not run: the program's start code would). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mrcache.h"
#include "util/config.h"
#include "util/log.h"

/* The dynamic loader that runs us when the file is executed. */
const char mrc_interp[] __attribute__((section(".interp"), used)) = "/lib64/ld-linux-x86-64.so.2";

/* The first argument (after the file's own name), read from /proc: an entry point of a
 * shared object gets its arguments only on the stack, where C cannot portably look. */
static const char *first_arg(char *buf, size_t size)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, size - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = 0;
    size_t skip = strlen(buf) + 1;
    return (ssize_t)skip < n ? buf + skip : NULL;
}

/* The entry point (-Wl,-e): never returns. */
__attribute__((noreturn, force_align_arg_pointer, used)) void mrc_main(void);
void mrc_main(void)
{
    char buf[4096], out[640];
    const char *arg = first_arg(buf, sizeof(buf));
    int n;
    if (arg && !strcmp(arg, "--version")) {
        n = snprintf(out, sizeof(out), "libmrcache %d.%d\n", MRCACHE_VERSION_MAJOR, MRCACHE_VERSION_MINOR);
        mrc_write_all(1, out, (unsigned long)n);
        exit(0);
    }
    if (arg && !strcmp(arg, "--config")) {
        mrc_config_describe(1);
        exit(0);
    }
    n = snprintf(out, sizeof(out),
                 "libmrcache %d.%d: a registration cache for RDMA programs that need no change.\n"
                 "Run a program under it:\n"
                 "    mrcache [options] program [args]      (mrcache --help)\n"
                 "    LD_PRELOAD=libmrcache.so.%d program [args]\n"
                 "Settings are MRCACHE_* environment variables: mrcache --config, or libmrcache(7).\n"
                 "This file answers --version and --config. Licence: BSD-2-Clause.\n",
                 MRCACHE_VERSION_MAJOR, MRCACHE_VERSION_MINOR, MRCACHE_VERSION_MAJOR);
    mrc_write_all(1, out, (unsigned long)n);
    exit(arg ? 2 : 0);
}
