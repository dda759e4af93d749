/* live.c - this process's live segment (runtime/live.h): made when the helper thread
 * starts (the first registration), written by that thread alone when a viewer asks,
 * removed at exit; one a killed process left is removed by the viewer, or by the next
 * process of the same user to make its own. Invariants: the
 * file is mapped and sized with raw system calls, so no monitor of ours records it or
 * sees it go; a hit never touches it (the viewer's wake costs the helper thread a
 * statistics sum and a walk of the cached entries, nothing on the program's threads). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/live.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/outpath.h"
#include "util/sys.h"

static struct mrc_live_seg *seg;
static char seg_path[64];

void mrc_live_path(char *buf, unsigned long size, unsigned uid, long pid)
{
    snprintf(buf, size, "%s/%s%u-%ld", MRC_LIVE_DIR, MRC_LIVE_PREFIX, uid, pid);
}

uint64_t mrc_live_start_ticks(long pid)
{
    char name[64], buf[1024];
    snprintf(name, sizeof(name), "/proc/%ld/stat", pid);
    if (mrc_read_text(name, buf, sizeof(buf)) < 0)
        return 0;
    /* The command may hold spaces and parentheses: fields count from its last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    unsigned field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

void mrc_live_scan(unsigned uid, int all, long only, void (*fn)(unsigned uid, long pid))
{
    int dfd = mrc_sys_open(MRC_LIVE_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dfd < 0)
        return;
    /* Small: the first registration's thread may have a small stack. */
    char buf[2048] __attribute__((aligned(8)));
    long n;
    size_t plen = strlen(MRC_LIVE_PREFIX);
    while ((n = mrc_sys_getdents64(dfd, buf, sizeof(buf))) > 0) {
        for (long off = 0; off < n;) {
            struct linux_dirent64 *d = (void *)(buf + off);
            off += d->d_reclen;
            if (strncmp(d->d_name, MRC_LIVE_PREFIX, plen))
                continue;
            char *end;
            unsigned long u = strtoul(d->d_name + plen, &end, 10);
            if (*end != '-')
                continue;
            long pid = strtol(end + 1, &end, 10);
            if (*end || pid <= 0 || (only > 0 && pid != only) || (!all && u != uid))
                continue;
            fn((unsigned)u, pid);
        }
    }
    mrc_sys_close(dfd);
}

/* A segment of this user's whose process is gone (killed, or ended by _exit, which runs
 * no atexit handler): removed, so that they do not pile up while no viewer runs. */
static void sweep(unsigned uid, long pid)
{
    if (pid == (long)getpid() || !kill((pid_t)pid, 0) || errno != ESRCH)
        return;
    char path[sizeof(seg_path)];
    mrc_live_path(path, sizeof(path), uid, pid);
    mrc_sys_unlink(path);
}

/* O_EXCL, so the file is never one somebody else made; one this user's process of the
 * same pid left (an image this one exec'd, or one killed before the pid came round) is
 * replaced: the pid is ours now. */
static int create(const char *path)
{
    int fd = mrc_sys_open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST)
        return fd;
    struct stat st;
    if (mrc_sys_fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid()) {
        errno = EEXIST;
        return -1;
    }
    mrc_sys_unlink(path);
    return mrc_sys_open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* The first of names that is set, or NULL. */
static const char *first_env(const char *const *names, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

static int32_t local_rank(void)
{
    static const char *const names[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                         "PALS_LOCAL_RANKID" };
    const char *v = first_env(names, sizeof(names) / sizeof(names[0]));
    char *end;
    long r = v ? strtol(v, &end, 10) : -1;
    return v && !*end && r >= 0 && r < INT32_MAX ? (int32_t)r : -1;
}

static void labels(struct mrc_live_seg *s)
{
    static const char *const jobs[] = { "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID" };
    if (gethostname(s->host, sizeof(s->host)))
        s->host[0] = 0;
    s->host[sizeof(s->host) - 1] = 0;
    const char *job = first_env(jobs, sizeof(jobs) / sizeof(jobs[0]));
    snprintf(s->job, sizeof(s->job), "%s", job ? job : "");
    long r = mrc_outpath_rank();
    s->rank = r >= 0 && r < INT32_MAX ? (int32_t)r : -1;
    s->local_rank = local_rank();
}

static uint32_t *open_segment(void)
{
    char path[sizeof(seg_path)];
    mrc_live_path(path, sizeof(path), (unsigned)geteuid(), (long)getpid());
    mrc_live_scan((unsigned)geteuid(), 0, 0, sweep);
    int fd = create(path);
    if (fd < 0) {
        MRC_WARN("no live view of this process (mrcache --top, --flush): cannot create %s: %s", path,
                 strerror(errno));
        return NULL;
    }
    void *p = MAP_FAILED;
    /* The umask only narrows the mode; a viewer of the same user must write requests.
     * The page is allocated now (fallocate, not ftruncate): on a full /dev/shm the first
     * store into a sparse page would be a SIGBUS, here it is an error and no view. */
    if (!mrc_sys_fchmod(fd, 0600) && !mrc_sys_fallocate(fd, 0, 0, (off_t)sizeof(struct mrc_live_seg)))
        p = mrc_sys_mmap(NULL, sizeof(struct mrc_live_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int saved = errno;
    mrc_sys_close(fd);
    if (p == MAP_FAILED) {
        mrc_sys_unlink(path);
        MRC_WARN("no live view of this process (mrcache --top, --flush): cannot map %s: %s", path,
                 strerror(saved));
        return NULL;
    }
    struct mrc_live_seg *s = p;
    s->size = sizeof(*s);
    s->pid = (uint64_t)getpid();
    s->start_ticks = mrc_live_start_ticks((long)getpid());
    long n = mrc_read_text("/proc/self/comm", s->comm, sizeof(s->comm));
    if (n > 0 && s->comm[n - 1] == '\n')
        s->comm[n - 1] = 0;
    labels(s);
    /* Last: a viewer takes the segment for what it is only once the rest is there. */
    __atomic_store_n(&s->magic, MRC_LIVE_MAGIC, __ATOMIC_RELEASE);
    memcpy(seg_path, path, sizeof(seg_path));
    seg = s;
    return &s->wake;
}

uint32_t *mrc_live_open(void)
{
    int saved = errno;
    uint32_t *word = open_segment();
    errno = saved;
    return word;
}

/* Bytes waiting for deregistration: invalidated (deferred) and refused by the NIC. */
static void publish(void)
{
    struct mrcache_stats st;
    struct mrc_gauges g;
    uint64_t idle = 0;
    if (mrc_rt_api_stats_read(sizeof(st), &st))
        memset(&st, 0, sizeof(st));
    mrc_cache_get_gauges(&mrc_rt.cache, &g);
    if (mrc_rt_cache_live())
        idle = mrc_cache_idle_bytes(&mrc_rt.cache);
    uint64_t waiting = g.deferred_bytes + g.failed_bytes;
    /* The gauges and the walk are two looks: what moved in between is not made up. */
    uint64_t in_use = g.bytes > idle + waiting ? g.bytes - idle - waiting : 0;
    uint32_t seq = seg->seq;
    __atomic_store_n(&seg->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    seg->snap_ns = mrc_now_ns();
    seg->stats = st;
    seg->pinned_in_use = in_use;
    seg->pinned_idle = idle;
    seg->pinned_waiting = waiting;
    __atomic_store_n(&seg->seq, seq + 2, __ATOMIC_RELEASE);
}

void mrc_live_serve(void)
{
    if (!seg)
        return;
    uint32_t flush = __atomic_load_n(&seg->flush_req, __ATOMIC_ACQUIRE);
    uint32_t snap = __atomic_load_n(&seg->snap_req, __ATOMIC_ACQUIRE);
    int flushing = flush != seg->flush_done;
    if (flushing && mrc_rt_cache_live()) {
        mrc_cache_flush(&mrc_rt.cache, NULL, NULL);
        seg->flushes++;
    }
    publish();
    /* After the snapshot: whoever waits for its request reads what it caused. */
    if (flushing)
        __atomic_store_n(&seg->flush_done, flush, __ATOMIC_RELEASE);
    __atomic_store_n(&seg->snap_done, snap, __ATOMIC_RELEASE);
}

void mrc_live_close(void)
{
    if (seg)
        mrc_sys_unlink(seg_path);
}

void mrc_live_forget(void)
{
    if (seg)
        mrc_sys_munmap(seg, sizeof(*seg));
    seg = NULL;
}
