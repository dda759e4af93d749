/* mrc_counter.h - one counter of libmrcache's statistics, by its name in the JSON dump
 * (mrcache_stats_dump): for the counters struct mrcache_stats does not carry. Used by
 * the tests and the benchmark; include mrcache.h first. Header-only. */
#ifndef MRC_TEST_COUNTER_H
#define MRC_TEST_COUNTER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The counter's value, or -1 (no libmrcache, no such counter, no temporary file). */
static inline long long mrc_counter(const char *name)
{
    static char buf[65536];
    char path[] = "/tmp/mrc_counter_XXXXXX", key[80];
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    long long v = -1;
    if (mrcache_stats_dump(fd, MRCACHE_DUMP_JSON) == 0) {
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        snprintf(key, sizeof(key), "\"%s\": ", name);
        const char *at = strstr(buf, key);
        if (at)
            v = atoll(at + strlen(key));
    }
    close(fd);
    return v;
}

#endif
