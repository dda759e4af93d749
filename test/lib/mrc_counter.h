/* mrc_counter.h - one counter of libmrcache's statistics, by its name in the JSON dump
 * (mrcache_stats_dump): for the counters struct mrcache_stats does not carry. A test
 * asks with mrc_counter, which fails the test when there is no such counter (a counter
 * renamed or gone must not let an "unchanged" check pass on -1 == -1); the benchmark
 * with mrc_counter_read. Include mrcache.h first. Header-only. */
#ifndef MRC_TEST_COUNTER_H
#define MRC_TEST_COUNTER_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* The counter's value in *v: 0, or -ENOSYS (no libmrcache), -ENOENT (no such counter),
 * -errno (no temporary file for the dump). */
static inline int mrc_counter_read(const char *name, long long *v)
{
    static char buf[65536];
    char path[] = "/tmp/mrc_counter_XXXXXX", key[80];
    int fd = mkstemp(path);
    if (fd < 0)
        return -errno;
    unlink(path);
    int rc = mrcache_stats_dump(fd, MRCACHE_DUMP_JSON);
    if (rc == 0) {
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        snprintf(key, sizeof(key), "\"%s\": ", name);
        const char *at = strstr(buf, key);
        rc = at ? 0 : -ENOENT;
        if (at)
            *v = atoll(at + strlen(key));
    }
    close(fd);
    return rc;
}

/* The counter's value for a test; a failed CHECK and -1 if it cannot be read. */
static inline long long mrc_counter(const char *name)
{
    long long v = -1;
    int rc = mrc_counter_read(name, &v);
    CHECKF(rc == 0, "libmrcache's counter %s: %s", name,
           rc == -ENOENT ? "not in its JSON dump" : rc == -ENOSYS ? "libmrcache is not preloaded" : strerror(-rc));
    return rc == 0 ? v : -1;
}

#endif
