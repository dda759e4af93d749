/* never.h - what the "never worse than no cache" tests share: whether libmrcache is in
 * front, the software NIC's failure injector and counters (looked up with dlsym, as
 * common.h does), a counter of the cache's JSON statistics, this process's VMAs, and a
 * bounded wait. Each test runs the same program with and without
 * the preload; the run without it is the reference. Header-only, over common.h. */
#ifndef MRC_NEVER_H
#define MRC_NEVER_H

#include <fcntl.h>
#include <sys/syscall.h>

#include "common.h"

/* Whether libmrcache answers (its public API is there): the run under test, not the
 * reference. */
static inline int never_preloaded(void)
{
    return mrcache_monitors() != -ENOSYS;
}

static struct {
    int (*fail_reg)(int, uint32_t);
    int (*fail_dereg)(int, uint32_t);
    void (*get_faults)(struct snic_faults *);
    int (*local_read)(uint32_t, uint64_t, void *, size_t);
} inj;

/* The software NIC's injector, or exit 2: these tests need the software NIC. */
static inline void never_resolve_injector(void)
{
    inj.fail_reg = (int (*)(int, uint32_t))dlsym(RTLD_DEFAULT, "snic_fail_reg");
    inj.fail_dereg = (int (*)(int, uint32_t))dlsym(RTLD_DEFAULT, "snic_fail_dereg");
    inj.get_faults = (void (*)(struct snic_faults *))dlsym(RTLD_DEFAULT, "snic_get_faults");
    inj.local_read = (int (*)(uint32_t, uint64_t, void *, size_t))dlsym(RTLD_DEFAULT, "snic_local_read");
    if (!inj.fail_reg || !inj.fail_dereg || !inj.get_faults || !inj.local_read) {
        fprintf(stderr, "the software NIC's failure injector (snic_fail_*) is not there\n");
        exit(2);
    }
}

static inline struct snic_faults never_faults(void)
{
    struct snic_faults f;
    inj.get_faults(&f);
    return f;
}

/* Whether the NIC still knows an lkey: a one-byte read through it at addr works (it
 * reads the pinned pages, mapped or not). */
static inline int never_key_alive(uint32_t lkey, const void *addr)
{
    char c;
    return inj.local_read(lkey, (uint64_t)(uintptr_t)addr, &c, 1) == 0;
}

static inline struct snic_stats never_nic(void)
{
    struct snic_stats s;
    nic_resolve();
    nic.get_stats(&s);
    return s;
}

/* The cache's statistics snapshot (all zero without the preload). */
static inline struct mrcache_stats never_stats(void)
{
    struct mrcache_stats s;
    memset(&s, 0, sizeof(s));
    if (mrcache_stats_read(sizeof(s), &s) != 0)
        memset(&s, 0, sizeof(s));
    return s;
}

/* A counter of the JSON dump's "counters" object by name: its value, or -1 if the dump
 * has no such counter (or there is no libmrcache). Through a memfd: the dump can exceed
 * a pipe's buffer. */
static inline long long never_json_counter(const char *name)
{
    int fd = memfd_create("never-stats", MFD_CLOEXEC);
    long long v = -1;
    if (fd < 0)
        return -1;
    if (mrcache_stats_dump(fd, MRCACHE_DUMP_JSON) == 0) {
        off_t len = lseek(fd, 0, SEEK_END);
        char *buf = len > 0 ? malloc((size_t)len + 1) : NULL;
        if (buf && pread(fd, buf, (size_t)len, 0) == len) {
            buf[len] = 0;
            char key[96];
            snprintf(key, sizeof(key), "\"%s\":", name);
            const char *c = strstr(buf, "\"counters\"");
            const char *k = c ? strstr(c, key) : NULL;
            if (k)
                v = strtoll(k + strlen(key), NULL, 10);
        }
        free(buf);
    }
    close(fd);
    return v;
}

/* Deregisters what the cache holds idle or deferred, so that a test's baseline counts
 * are not moved by what an earlier test left in it. Nothing without the preload. */
static inline void never_quiesce(void)
{
    (void)mrcache_flush(NULL, 0);
}

/* Lines of /proc/self/maps: the VMAs of this process. */
static inline long never_maps(void)
{
    int f = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    char buf[4096];
    long lines = 0;
    ssize_t n;
    if (f < 0)
        return -1;
    while ((n = read(f, buf, sizeof(buf))) > 0)
        for (char *q = buf; (q = memchr(q, '\n', (size_t)(buf + n - q))); q++)
            lines++;
    close(f);
    return lines;
}

/* Waits until cond() holds, looking every 10 ms, for at most 10 s: "eventually", as a
 * helper thread may do the work; never an assertion on how long it took. */
static inline int never_eventually(int (*cond)(void))
{
    for (int i = 0; i < 1000; i++) {
        if (cond())
            return 1;
        usleep(10000);
    }
    return cond();
}

#endif
