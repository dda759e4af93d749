/* snic_log.c - the NIC's one way to complain: a single "snic: ..." line on stderr.
 * One write(2) per line so lines from concurrent threads never interleave; no stdio, so
 * it is safe in fork handlers and never allocates. Long messages are truncated. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "snic_priv.h"

void snic_log(const char *fmt, ...)
{
    char line[512];
    int saved = errno;
    int n = snprintf(line, sizeof(line), "snic: ");
    va_list ap;

    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* A failed write to stderr has nowhere left to be reported. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
    errno = saved;
}
