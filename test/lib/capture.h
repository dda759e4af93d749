/* capture.h - what libmrcache says on stderr while a test runs: capture_begin sends fd 2
 * to a temporary file, capture_end reads it into capture_said (and writes it on to the
 * real stderr, so the test log keeps it), capture_count counts a phrase in it.
 * Header-only; include check.h first. */
#ifndef MRC_TEST_CAPTURE_H
#define MRC_TEST_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int capture_saved_fd = -1;
static char capture_said[65536];

static inline void capture_begin(void)
{
    char path[] = "/tmp/mrc_capture_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    fflush(stderr);
    capture_saved_fd = dup(2);
    dup2(fd, 2);
    close(fd);
}

static inline void capture_end(void)
{
    ssize_t n = pread(2, capture_said, sizeof(capture_said) - 1, 0);
    capture_said[n > 0 ? n : 0] = 0;
    dup2(capture_saved_fd, 2);
    close(capture_saved_fd);
    if (capture_said[0])
        fprintf(stderr, "%s", capture_said);
}

/* How many times what occurs in what was said. */
static inline int capture_count(const char *what)
{
    int n = 0;
    for (const char *p = capture_said; (p = strstr(p, what)); p++)
        n++;
    return n;
}

#endif
