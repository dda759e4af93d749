/* top.c - the viewer of the live segments (runtime/live.h), run through the library file
 * as a program for mrcache(1): --top (a refreshing view of every process under the
 * cache, like top), --once (one snapshot: text, JSON or Prometheus' text format, each
 * process labelled by host, batch job and ranks) and --flush PID. Invariants: it
 * reads only the segments its user may open (root: all); a segment whose process is gone
 * (or whose pid now names another process) is removed, and said; it never allocates
 * (nothing of the cache runs here: see main.c), reaches the kernel through util/sys.h,
 * and leaves the terminal as it found it. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <linux/futex.h>
#include <stddef.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "program/top.h"
#include "runtime/live.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/sys.h"

#define MAX_PROCS 1024
#define ANSWER_NS 500000000ull     /* how long a round waits for the helper threads */

struct proc {
    long pid;
    unsigned uid;
    struct mrc_live_seg snap;
    int answered;                 /* it answered this round's request */
};

struct row {
    long pid;
    char comm[16];
    char host[64], job[48];
    int rank, local_rank;
    double req_s, hit_s, miss_s, inval_s, reg_ms_s, hit_pct;
    uint64_t requests, hits, misses, invalidations, reg_ns, entries;
    uint64_t in_use, idle, waiting;
    uint64_t outlived;           /* the program's MRs found registered over memory that changed */
    int stale;
};

enum sort_key { SORT_PID, SORT_REQ, SORT_HIT, SORT_PINNED, SORT_IDLE, SORT_ENTRIES, SORT_JOB };
static const char *const sort_names[] = { "pid", "req", "hit", "pinned", "idle", "entries", "job" };
static const char *only_job;   /* --job: the processes of that batch job alone */

static struct proc procs[MAX_PROCS], prev[MAX_PROCS];
static unsigned nprocs, nprev;
static struct row rows[MAX_PROCS];
static struct { long pid; int exec; } removed[MAX_PROCS];
static unsigned nremoved;
static volatile sig_atomic_t stop;

/* Output through one buffer, written whole. */
static char out[1 << 16];
static size_t outlen;

__attribute__((format(printf, 1, 2))) static void put(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + outlen, sizeof(out) - outlen, fmt, ap);
    va_end(ap);
    if (n > 0)
        outlen += (size_t)n < sizeof(out) - outlen ? (size_t)n : sizeof(out) - outlen - 1;
}

static void flush_out(int fd)
{
    mrc_write_all(fd, out, outlen);
    outlen = 0;
}

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0)
        mrc_write_all(2, buf, (unsigned long)n < sizeof(buf) ? (unsigned long)n : sizeof(buf) - 1);
}

static void sleep_ns(uint64_t ns)
{
    struct timespec t = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
    nanosleep(&t, NULL);
}

static void forget(const char *path, long pid, int exec)
{
    if (!mrc_sys_unlink(path) && nremoved < MAX_PROCS) {
        removed[nremoved].pid = pid;
        removed[nremoved++].exec = exec;
    }
}

/* Whether process pid maps path: 1, 0, or -1 when its maps cannot be read. A process
 * that ran another program (exec) without the cache keeps its pid and start time, but
 * no longer maps its segment. */
static int maps_file(long pid, const char *path)
{
    char name[64], buf[8192];
    snprintf(name, sizeof(name), "/proc/%ld/maps", pid);
    int fd = mrc_sys_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    size_t plen = strlen(path), have = 0;
    int found = 0;
    ssize_t n;
    /* Each read keeps the last plen bytes of the one before: a name cut by a read is found. */
    while (!found && (n = mrc_sys_read(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
        have += (size_t)n;
        buf[have] = 0;
        found = strstr(buf, path) != NULL;
        if (have > plen) {
            memmove(buf, buf + have - plen, plen);
            have = plen;
        }
    }
    mrc_sys_close(fd);
    return found;
}

/* The segment of path mapped, or NULL. The segment of a process that is gone (or whose
 * pid now names a process started later) is removed, whatever it holds. */
static struct mrc_live_seg *attach(const char *path, long pid)
{
    uint64_t ticks = mrc_live_start_ticks(pid);
    int fd = mrc_sys_open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (ticks && !mrc_sys_fstat(fd, &st) && S_ISREG(st.st_mode) &&
        st.st_size >= (off_t)sizeof(struct mrc_live_seg))
        p = mrc_sys_mmap(NULL, sizeof(struct mrc_live_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    mrc_sys_close(fd);
    struct mrc_live_seg *s = p == MAP_FAILED ? NULL : p;
    int made = s && __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == MRC_LIVE_MAGIC;
    if (!ticks || (made && (s->pid != (uint64_t)pid || s->start_ticks != ticks))) {
        forget(path, pid, 0);
        made = 0;
    }
    if (s && !made)
        mrc_sys_munmap(s, sizeof(*s));
    return made ? s : NULL;
}

static void ask(struct mrc_live_seg *s, int flush, uint32_t *snap_req, uint32_t *flush_req)
{
    if (flush)
        *flush_req = __atomic_add_fetch(&s->flush_req, 1, __ATOMIC_SEQ_CST);
    *snap_req = __atomic_add_fetch(&s->snap_req, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_or(&s->wake, MRC_LIVE_WAKE, __ATOMIC_SEQ_CST);
    mrc_sys_futex(&s->wake, FUTEX_WAKE, 1, NULL);
}

static int reached(const uint32_t *done, uint32_t req)
{
    return (int32_t)(__atomic_load_n(done, __ATOMIC_ACQUIRE) - req) >= 0;
}

/* A consistent copy of the published snapshot (0), or -1 while the writer is busy. */
static int copy_snapshot(const struct mrc_live_seg *s, struct mrc_live_seg *to)
{
    for (int i = 0; i < 1000; i++) {
        uint32_t a = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
        if (a & 1) {
            sleep_ns(100000);
            continue;
        }
        memcpy(to, (const void *)s, sizeof(*to));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) == a)
            return 0;
    }
    return -1;
}

static void add_proc(unsigned uid, long pid)
{
    if (nprocs < MAX_PROCS)
        procs[nprocs++] = (struct proc){ .pid = pid, .uid = uid };
}

/* One round: every process's snapshot, asked of its helper thread now (a flush first
 * when flush is set), waiting up to ANSWER_NS for the answers; a process that does not
 * answer shows its last snapshot, marked stale. */
static void round_trip(long only, int flush, uint32_t *flushed)
{
    static struct mrc_live_seg *maps[MAX_PROCS];
    static uint32_t sreq[MAX_PROCS], freq[MAX_PROCS];
    nprocs = 0;
    unsigned me = (unsigned)geteuid();
    mrc_live_scan(me, me == 0, only, add_proc);   /* another user's are not ours to open */
    unsigned n = 0;
    for (unsigned i = 0; i < nprocs; i++) {
        char path[64];
        mrc_live_path(path, sizeof(path), procs[i].uid, procs[i].pid);
        struct mrc_live_seg *s = attach(path, procs[i].pid);
        if (!s)
            continue;
        if (only_job && strncmp(s->job, only_job, sizeof(s->job))) {
            mrc_sys_munmap(s, sizeof(*s));
            continue;
        }
        procs[n] = procs[i];
        maps[n] = s;
        ask(s, flush, &sreq[n], &freq[n]);
        n++;
    }
    nprocs = n;
    uint64_t deadline = mrc_now_ns() + (flush ? 20 * ANSWER_NS : ANSWER_NS);
    for (;;) {
        unsigned waiting = 0;
        for (unsigned i = 0; i < n; i++)
            waiting += !reached(&maps[i]->snap_done, sreq[i]) || (flush && !reached(&maps[i]->flush_done, freq[i]));
        if (!waiting || mrc_now_ns() > deadline)
            break;
        sleep_ns(1000000);
    }
    unsigned kept = 0;
    for (unsigned i = 0; i < n; i++) {
        procs[i].answered = reached(&maps[i]->snap_done, sreq[i]);
        if (!procs[i].answered) {
            char path[64];
            mrc_live_path(path, sizeof(path), procs[i].uid, procs[i].pid);
            if (!maps_file(procs[i].pid, path)) {
                forget(path, procs[i].pid, 1);
                mrc_sys_munmap(maps[i], sizeof(*maps[i]));
                continue;
            }
        }
        if (flushed)
            *flushed = reached(&maps[i]->flush_done, freq[i]);
        if (copy_snapshot(maps[i], &procs[i].snap))
            procs[i].answered = 0;
        mrc_sys_munmap(maps[i], sizeof(*maps[i]));
        procs[kept++] = procs[i];
    }
    nprocs = kept;
}

static double per_s(uint64_t now, uint64_t then, double dt)
{
    return dt > 0 && now >= then ? (double)(now - then) / dt : 0;
}

/* Rows from this round, rates against the round before (same process: same start), or
 * over the process's life when there is none. */
static void make_rows(void)
{
    for (unsigned i = 0; i < nprocs; i++) {
        const struct mrc_live_seg *s = &procs[i].snap;
        const struct mrcache_stats *a = &s->stats;
        struct mrcache_stats zero;
        memset(&zero, 0, sizeof(zero));
        const struct mrcache_stats *b = &zero;
        double dt = (double)a->wall_ns / 1e9;
        for (unsigned j = 0; j < nprev; j++)
            if (prev[j].pid == procs[i].pid && prev[j].snap.start_ticks == s->start_ticks &&
                s->snap_ns > prev[j].snap.snap_ns) {
                b = &prev[j].snap.stats;
                dt = (double)(s->snap_ns - prev[j].snap.snap_ns) / 1e9;
                break;
            }
        struct row *r = &rows[i];
        memset(r, 0, sizeof(*r));
        r->pid = procs[i].pid;
        memcpy(r->comm, s->comm, sizeof(r->comm));
        r->comm[sizeof(r->comm) - 1] = 0;
        memcpy(r->host, s->host, sizeof(r->host));
        r->host[sizeof(r->host) - 1] = 0;
        memcpy(r->job, s->job, sizeof(r->job));
        r->job[sizeof(r->job) - 1] = 0;
        r->rank = s->rank;
        r->local_rank = s->local_rank;
        r->req_s = per_s(a->requests, b->requests, dt);
        r->hit_s = per_s(a->hits, b->hits, dt);
        r->miss_s = per_s(a->misses, b->misses, dt);
        r->inval_s = per_s(a->invalidations, b->invalidations, dt);
        r->reg_ms_s = per_s(a->real_reg_ns, b->real_reg_ns, dt) / 1e6;
        uint64_t dreq = a->hits + a->misses - b->hits - b->misses;
        uint64_t all = a->hits + a->misses;
        r->hit_pct = dreq ? 100.0 * (double)(a->hits - b->hits) / (double)dreq
                     : all ? 100.0 * (double)a->hits / (double)all : 0;
        r->requests = a->requests;
        r->hits = a->hits;
        r->misses = a->misses;
        r->invalidations = a->invalidations;
        r->reg_ns = a->real_reg_ns;
        r->entries = a->cached_entries;
        r->in_use = s->pinned_in_use;
        r->idle = s->pinned_idle;
        r->waiting = s->pinned_waiting;
        r->outlived = a->inval_in_use;
        r->stale = !procs[i].answered;
    }
    memcpy(prev, procs, nprocs * sizeof(procs[0]));
    nprev = nprocs;
}

static enum sort_key sort_by = SORT_REQ;

static int cmp_rows(const void *x, const void *y)
{
    const struct row *a = x, *b = y;
    double ka, kb;
    switch (sort_by) {
    case SORT_REQ: ka = a->req_s; kb = b->req_s; break;
    case SORT_HIT: ka = a->hit_pct; kb = b->hit_pct; break;
    case SORT_PINNED: ka = (double)(a->in_use + a->idle + a->waiting); kb = (double)(b->in_use + b->idle + b->waiting); break;
    case SORT_IDLE: ka = (double)a->idle; kb = (double)b->idle; break;
    case SORT_ENTRIES: ka = (double)a->entries; kb = (double)b->entries; break;
    case SORT_JOB: {   /* by job, then rank, then pid */
        int c = strcmp(a->job, b->job);
        if (c)
            return c;
        if (a->rank != b->rank)
            return (a->rank > b->rank) - (a->rank < b->rank);
        return (a->pid > b->pid) - (a->pid < b->pid);
    }
    default: return (a->pid > b->pid) - (a->pid < b->pid);
    }
    if (ka != kb)
        return ka < kb ? 1 : -1;   /* largest first, as top does */
    return (a->pid > b->pid) - (a->pid < b->pid);
}

/* A size in at most 6 characters: 0, 512, 4.0K, 17M, 1.5G. */
static const char *human(char *buf, size_t size, uint64_t v)
{
    static const char units[] = "KMGTP";
    if (v < 1024) {
        snprintf(buf, size, "%llu", (unsigned long long)v);
        return buf;
    }
    double d = (double)v;
    int u = -1;
    while (d >= 1024 && u < 4) {
        d /= 1024;
        u++;
    }
    snprintf(buf, size, d < 10 ? "%.1f%c" : "%.0f%c", d, units[u]);
    return buf;
}

/* The table's lines, cut to width characters (0: whole). */
static void put_line(unsigned width, const char *line)
{
    put("%.*s\n", width ? (int)width : (int)strlen(line), line);
}

static void put_header(unsigned width)
{
    char line[256];
    snprintf(line, sizeof(line), "%7s %-15s %-10s %5s %9s %9s %9s %6s %8s %8s %7s %7s %7s %7s %8s", "PID", "COMMAND",
             "JOB", "RANK", "REQ/s", "HIT/s", "MISS/s", "HIT%", "INVAL/s", "REGms/s", "INUSE", "IDLE", "WAITING", "ENTRIES",
             "OUTLIVED");
    put_line(width, line);
}

static void put_row(unsigned width, const struct row *r)
{
    char line[256], u[16], i[16], w[16], rank[12];
    snprintf(rank, sizeof(rank), r->rank >= 0 ? "%d" : "-", r->rank);
    snprintf(line, sizeof(line), "%7ld %-15s %-10.10s %5s %9.0f %9.0f %9.0f %5.1f%c %8.0f %8.2f %7s %7s %7s %7llu %8llu",
             r->pid, r->comm, r->job[0] ? r->job : "-", rank, r->req_s, r->hit_s, r->miss_s, r->hit_pct, r->stale ? '?' : ' ', r->inval_s, r->reg_ms_s,
             human(u, sizeof(u), r->in_use), human(i, sizeof(i), r->idle), human(w, sizeof(w), r->waiting),
             (unsigned long long)r->entries, (unsigned long long)r->outlived);
    put_line(width, line);
}

/* A JSON string of at most 15 characters of a command name. */
static void put_json_str(const char *s)
{
    put("\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put("\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            put("\\u%04x", c);
        else
            put("%c", c);
    }
    put("\"");
}

static void put_json(double interval)
{
    put("{\"version\": 1, \"interval_s\": %.3f, \"sorted_by\": \"%s\", \"processes\": [", interval,
        sort_names[sort_by]);
    for (unsigned k = 0; k < nprocs; k++) {
        const struct row *r = &rows[k];
        put("%s\n  {\"pid\": %ld, \"command\": ", k ? "," : "", r->pid);
        put_json_str(r->comm);
        put(", \"host\": ");
        put_json_str(r->host);
        put(", \"job\": ");
        if (r->job[0])
            put_json_str(r->job);
        else
            put("null");
        if (r->rank >= 0)
            put(", \"rank\": %d", r->rank);
        else
            put(", \"rank\": null");
        if (r->local_rank >= 0)
            put(", \"local_rank\": %d", r->local_rank);
        else
            put(", \"local_rank\": null");
        put(", \"answered\": %s, \"requests_per_s\": %.3f, \"hits_per_s\": %.3f, \"misses_per_s\": %.3f, "
            "\"hit_rate\": %.4f, \"invalidations_per_s\": %.3f, \"registration_ms_per_s\": %.4f, "
            "\"requests\": %llu, \"hits\": %llu, \"misses\": %llu, \"invalidations\": %llu, "
            "\"registration_ns\": %llu, \"entries\": %llu, \"pinned_in_use\": %llu, \"pinned_idle\": %llu, "
            "\"pinned_waiting\": %llu, \"outlived_mrs\": %llu}",
            r->stale ? "false" : "true", r->req_s, r->hit_s, r->miss_s, r->hit_pct / 100, r->inval_s, r->reg_ms_s,
            (unsigned long long)r->requests, (unsigned long long)r->hits, (unsigned long long)r->misses,
            (unsigned long long)r->invalidations, (unsigned long long)r->reg_ns, (unsigned long long)r->entries,
            (unsigned long long)r->in_use, (unsigned long long)r->idle, (unsigned long long)r->waiting,
            (unsigned long long)r->outlived);
    }
    put("%s], \"removed_dead\": [", nprocs ? "\n" : "");
    for (unsigned k = 0; k < nremoved; k++)
        put("%s%ld", k ? ", " : "", removed[k].pid);
    put("]}\n");
}

/* A label value in the text exposition format: backslash, quote and newline escaped. */
static void put_prom_label(const char *name, const char *v, int more)
{
    put("%s=\"", name);
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            put("\\%c", *v);
        else if (*v == '\n')
            put("\\n");
        else
            put("%c", *v);
    }
    put("\"%s", more ? "," : "");
}

static void put_prom_labels(const struct row *r, const char *extra)
{
    char pid[24], rank[12], local[12];
    snprintf(pid, sizeof(pid), "%ld", r->pid);
    snprintf(rank, sizeof(rank), "%d", r->rank);
    snprintf(local, sizeof(local), "%d", r->local_rank);
    put("{");
    put_prom_label("host", r->host, 1);
    if (r->job[0])
        put_prom_label("job", r->job, 1);
    if (r->rank >= 0)
        put_prom_label("rank", rank, 1);
    if (r->local_rank >= 0)
        put_prom_label("local_rank", local, 1);
    put_prom_label("command", r->comm, 1);
    put_prom_label("pid", pid, extra != NULL);
    if (extra)
        put("%s", extra);
    put("}");
}

/* Prometheus' text exposition format (what the node exporter's textfile collector
 * reads): one family per quantity, a sample per process, labelled by host, job, rank,
 * rank on the node, command and pid. */
static void put_prometheus(void)
{
    static const struct {
        const char *name, *type, *help;
        size_t off;   /* of the row's uint64_t; (size_t)-1: the pinned bytes by state */
    } fam[] = {
        { "mrcache_requests_total", "counter", "Registrations requested of the cache.", offsetof(struct row, requests) },
        { "mrcache_hits_total", "counter", "Requests served from the cache.", offsetof(struct row, hits) },
        { "mrcache_misses_total", "counter", "Requests registered with the NIC.", offsetof(struct row, misses) },
        { "mrcache_invalidations_total", "counter", "Cached registrations invalidated by memory changes.",
          offsetof(struct row, invalidations) },
        { "mrcache_registration_seconds_total", "counter", "Time spent in the NIC's registrations.",
          offsetof(struct row, reg_ns) },
        { "mrcache_entries", "gauge", "Registrations in the cache.", offsetof(struct row, entries) },
        { "mrcache_outlived_mrs_total", "counter",
          "The program's MRs found still registered over memory that was unmapped or replaced.",
          offsetof(struct row, outlived) },
        { "mrcache_pinned_bytes", "gauge", "Bytes registered, by state (in_use, idle, waiting).", (size_t)-1 },
    };
    for (unsigned f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        put("# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name, fam[f].type);
        for (unsigned k = 0; k < nprocs; k++) {
            const struct row *r = &rows[k];
            if (fam[f].off == (size_t)-1) {
                static const char *const st[] = { "state=\"in_use\"", "state=\"idle\"", "state=\"waiting\"" };
                const uint64_t v[] = { r->in_use, r->idle, r->waiting };
                for (unsigned i = 0; i < 3; i++) {
                    put("%s", fam[f].name);
                    put_prom_labels(r, st[i]);
                    put(" %llu\n", (unsigned long long)v[i]);
                }
                continue;
            }
            uint64_t v;
            memcpy(&v, (const char *)r + fam[f].off, sizeof(v));
            put("%s", fam[f].name);
            put_prom_labels(r, NULL);
            if (fam[f].off == offsetof(struct row, reg_ns))
                put(" %.9f\n", (double)v / 1e9);
            else
                put(" %llu\n", (unsigned long long)v);
        }
    }
}

static void say_removed(void)
{
    for (unsigned k = 0; k < nremoved; k++)
        say("mrcache: removed the live segment of process %ld, which %s\n", removed[k].pid,
            removed[k].exec ? "runs another program now" : "is gone");
    nremoved = 0;
}

enum once_format { ONCE_TEXT, ONCE_JSON, ONCE_PROMETHEUS };

static int once(double interval, enum once_format format)
{
    if (interval > 0) {
        round_trip(0, 0, NULL);
        make_rows();
        sleep_ns((uint64_t)(interval * 1e9));
    }
    round_trip(0, 0, NULL);
    make_rows();
    qsort(rows, nprocs, sizeof(rows[0]), cmp_rows);
    if (format == ONCE_JSON) {
        put_json(interval);
    } else if (format == ONCE_PROMETHEUS) {
        say_removed();
        put_prometheus();
    } else {
        say_removed();
        put_header(0);
        for (unsigned k = 0; k < nprocs; k++)
            put_row(0, &rows[k]);
    }
    flush_out(1);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* One screen: a summary line, the keys, the header and as many rows as fit. */
static void draw(double interval)
{
    struct winsize ws = { 0 };
    unsigned height = 24, width = 120;
    if (!mrc_sys_ioctl(1, TIOCGWINSZ, &ws) && ws.ws_row && ws.ws_col) {
        height = ws.ws_row;
        width = ws.ws_col;
    }
    uint64_t in_use = 0, idle = 0, waiting = 0;
    double req = 0;
    for (unsigned k = 0; k < nprocs; k++) {
        in_use += rows[k].in_use;
        idle += rows[k].idle;
        waiting += rows[k].waiting;
        req += rows[k].req_s;
    }
    char a[16], b[16], c[16], line[256];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    put("\033[H\033[2J");
    snprintf(line, sizeof(line),
             "mrcache --top  %02d:%02d:%02d  %u process%s  %.0f req/s  pinned: %s in use, %s idle, %s waiting",
             tm.tm_hour, tm.tm_min, tm.tm_sec, nprocs, nprocs == 1 ? "" : "es", req, human(a, sizeof(a), in_use), human(b, sizeof(b), idle),
             human(c, sizeof(c), waiting));
    put_line(width, line);
    snprintf(line, sizeof(line),
             "every %.1fs, sorted by %s; keys: p pid, r req/s, h hit%%, b pinned, i idle, e entries, j job, q quit",
             interval, sort_names[sort_by]);
    put_line(width, line);
    put("\n");
    put_header(width);
    /* As many rows as fit: none wraps or scrolls the view. */
    for (unsigned k = 0; k < nprocs && k + 5 < height; k++)
        put_row(width, &rows[k]);
    flush_out(1);
}

static int top(double interval)
{
    struct termios saved, raw;
    int tty = isatty(0) && !tcgetattr(0, &saved);
    if (tty) {
        raw = saved;
        raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tcsetattr(0, TCSANOW, &raw);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    put("\033[?1049h\033[?25l");   /* the alternate screen, no cursor: top's manners */
    while (!stop) {
        round_trip(0, 0, NULL);
        make_rows();
        qsort(rows, nprocs, sizeof(rows[0]), cmp_rows);
        nremoved = 0;
        draw(interval);
        struct pollfd pf = { .fd = 0, .events = POLLIN };
        uint64_t until = mrc_now_ns() + (uint64_t)(interval * 1e9);
        int redraw = 0;
        while (!stop && !redraw) {
            uint64_t now = mrc_now_ns();
            if (now >= until)
                break;
            int ms = (int)((until - now) / 1000000) + 1;
            if (poll(&pf, 1, ms) <= 0 || !(pf.revents & POLLIN))
                continue;
            char key;
            if (mrc_sys_read(0, &key, 1) != 1) {
                pf.fd = -1;   /* end of input: keep refreshing, read no more */
                continue;
            }
            const char *keys = "prhbiej";
            const char *k = strchr(keys, key);
            if (key == 'q')
                stop = 1;
            else if (key && k) {
                sort_by = (enum sort_key)(k - keys);
                qsort(rows, nprocs, sizeof(rows[0]), cmp_rows);
                draw(interval);
            }
        }
    }
    put("\033[?25h\033[?1049l");
    flush_out(1);
    if (tty)
        tcsetattr(0, TCSANOW, &saved);
    return 0;
}

static int flush_pid(long pid)
{
    round_trip(pid, 0, NULL);
    if (!nprocs) {
        say_removed();
        say("mrcache: no process %ld under libmrcache with a live segment\n", pid);
        return 1;
    }
    struct mrc_live_seg before = procs[0].snap;
    uint32_t done = 0;
    round_trip(pid, 1, &done);
    if (!nprocs || !done) {
        say("mrcache: process %ld did not answer the flush\n", pid);
        return 1;
    }
    const struct mrc_live_seg *s = &procs[0].snap;
    char a[16], b[16], c[16], d[16], e[16];
    put("mrcache: flushed process %ld (%s): pinned %s -> %s; %s idle released, %s in use, %s waiting\n", pid,
        s->comm, human(a, sizeof(a), before.stats.pinned_bytes), human(b, sizeof(b), s->stats.pinned_bytes),
        human(c, sizeof(c), before.pinned_idle), human(d, sizeof(d), s->pinned_in_use),
        human(e, sizeof(e), s->pinned_waiting));
    flush_out(1);
    return 0;
}

/* A usage error of the viewer's: what is wrong, named, then the usage; status 125, as
 * mrcache's own errors (it runs this in its place). */
static int usage(const char *what, const char *arg)
{
    say("mrcache: %s%s%s%s\n", what, arg ? " '" : "", arg ? arg : "", arg ? "'" : "");
    say("usage: mrcache --top [-d SECONDS] [--sort KEY] [--job ID]\n"
        "       mrcache --once [--json | --prometheus] [-d SECONDS] [--sort KEY] [--job ID]\n"
        "       mrcache --flush PID\n");
    return 125;
}

int mrc_top_main(int argc, char **argv)
{
    const char *mode = argv[0];
    double interval = !strcmp(mode, "--top") ? 2.0 : 1.0;
    enum once_format format = ONCE_TEXT;
    long pid = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--json") && !strcmp(mode, "--once")) {
            format = ONCE_JSON;
        } else if (!strcmp(argv[i], "--prometheus") && !strcmp(mode, "--once")) {
            format = ONCE_PROMETHEUS;
        } else if (!strcmp(argv[i], "--job") && strcmp(mode, "--flush")) {
            if (i + 1 >= argc)
                return usage("--job needs a batch job id", NULL);
            only_job = argv[++i];
        } else if (!strcmp(argv[i], "-d") && strcmp(mode, "--flush")) {
            if (i + 1 >= argc)
                return usage("-d needs a number of seconds", NULL);
            interval = strtod(argv[++i], &end);
            if (*end || interval < 0 || interval > 3600 || (interval < 0.1 && !strcmp(mode, "--top")))
                return usage(!strcmp(mode, "--top") ? "-d takes 0.1 to 3600 seconds, not"
                                                    : "-d takes 0 to 3600 seconds, not",
                             argv[i]);
        } else if (!strcmp(argv[i], "--sort") && strcmp(mode, "--flush")) {
            if (i + 1 >= argc)
                return usage("--sort needs a key (pid, req, hit, pinned, idle, entries or job)", NULL);
            unsigned k = 0;
            while (k < sizeof(sort_names) / sizeof(sort_names[0]) && strcmp(sort_names[k], argv[i + 1]))
                k++;
            if (k == sizeof(sort_names) / sizeof(sort_names[0]))
                return usage("--sort takes pid, req, hit, pinned, idle, entries or job, not", argv[i + 1]);
            sort_by = (enum sort_key)k;
            i++;
        } else if (!strcmp(mode, "--flush") && !pid) {
            pid = strtol(argv[i], &end, 10);
            if (*end || pid <= 0)
                return usage("--flush takes a process id, not", argv[i]);
        } else {
            return usage(mode[2] == 'f' ? "--flush takes one process id; this is one more:" : "unknown option for the view:",
                         argv[i]);
        }
    }
    if (!strcmp(mode, "--flush"))
        return pid ? flush_pid(pid) : usage("--flush needs a process id", NULL);
    if (!strcmp(mode, "--once"))
        return once(interval, format);
    return top(interval);
}
