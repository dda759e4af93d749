/* test_callsite.c - the statistics modules on their own (through stats_shim.so, so that
 * this program's functions are the call sites): output patterns and safe creation, the
 * dump signal, call-site attribution and sampling, leak accounting, the JSON section
 * (validated by python3), fork, and the cost of a capture (printed as "# " lines). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "util/leaks.h"
#include "util/outpath.h"

void shim_callsite_init(uint64_t n, uint64_t k);
void *shim_count(uint64_t len, int hit);
int shim_capture(uint64_t *ips, int max);
void shim_create(struct mrc_leak_tag *t, uint64_t len, void *site, int hit);
void shim_release(struct mrc_leak_tag *t);
void shim_leaks_sum(struct mrc_leaks_summary *s);
int shim_ext_write(int fd, int json);
long shim_rank(void);
int shim_expand(const char *pattern, char *out, size_t size);
int shim_open(const char *pattern, unsigned flags, char *used, size_t size);
int shim_sig_parse(const char *s);
int shim_sig_install(int signo, void (*dump)(void));
void shim_sig_poll(void);
void shim_child_reset(void);

static char dir[256];

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Runs python3 on the JSON section (wrapped into an object) with a snippet that prints
 * one line; returns it (static buffer), or "" if python3 failed (invalid JSON). */
static const char *json_query(const char *py)
{
    static char out[4096];
    char path[300], cmd[1200];
    snprintf(path, sizeof(path), "%s/ext.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return "";
    CHECK(write(fd, "{\"x\": 0", 7) == 7);
    CHECK(shim_ext_write(fd, 1) == 0);
    close(fd);
    snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); %s' %s", py, path);
    FILE *p = popen(cmd, "r");
    out[0] = 0;
    if (p) {
        if (!fgets(out, sizeof(out), p))
            out[0] = 0;
        pclose(p);
    }
    out[strcspn(out, "\n")] = 0;
    return out;
}

static void test_outpath_expand(void)
{
    char out[256], want[256], host[70] = "";
    gethostname(host, 64);
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("PMIX_RANK");
    unsetenv("SLURM_PROCID");
    CHECK(shim_expand("a.%p.%h.%r.%%", out, sizeof(out)) == 0);
    snprintf(want, sizeof(want), "a.%d.%s.norank.%%", (int)getpid(), host);
    CHECKF(!strcmp(out, want), "%s vs %s", out, want);
    CHECK(shim_expand("bad%x", out, sizeof(out)) == -EINVAL);
    CHECK(shim_expand("trailing%", out, sizeof(out)) == -EINVAL);
    CHECK(shim_expand("%p%p%p%p", out, 8) == -ENAMETOOLONG);
    setenv("SLURM_PROCID", "7", 1);
    CHECK(shim_rank() == 7);
    setenv("PMIX_RANK", "5", 1);
    CHECK(shim_rank() == 5);
    setenv("PMI_RANK", "x3", 1);   /* malformed: skipped */
    CHECK(shim_rank() == 5);
    setenv("OMPI_COMM_WORLD_RANK", "12", 1);
    CHECK(shim_rank() == 12);
    CHECK(shim_expand("s.%r.json", out, sizeof(out)) == 0 && !strcmp(out, "s.12.json"));
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("PMIX_RANK");
    unsetenv("SLURM_PROCID");
    CHECK(shim_rank() == -1);
}

static void test_outpath_never_clobbers(void)
{
    char pat[300], used[300], path[320];
    snprintf(pat, sizeof(pat), "%s/o.%%p", dir);
    int fd = shim_open(pat, 0, used, sizeof(used));
    CHECK(fd >= 0);
    close(fd);
    snprintf(path, sizeof(path), "%s/o.%d", dir, (int)getpid());
    CHECK(!strcmp(used, path));
    CHECK(shim_open(pat, 0, NULL, 0) == -EEXIST);              /* strict: the API's contract */
    fd = shim_open(pat, MRC_OUTPATH_NEXT_FREE, used, sizeof(used));   /* the exit dump's */
    CHECK(fd >= 0);
    close(fd);
    snprintf(path, sizeof(path), "%s/o.%d.1", dir, (int)getpid());
    CHECKF(!strcmp(used, path), "%s", used);
    /* A planted symlink is never followed, even with NEXT_FREE. */
    char target[300], link[300];
    snprintf(target, sizeof(target), "%s/target", dir);
    snprintf(link, sizeof(link), "%s/link", dir);
    fd = open(target, O_WRONLY | O_CREAT, 0644);
    close(fd);
    CHECK(symlink(target, link) == 0);
    CHECK(shim_open(link, 0, NULL, 0) == -EEXIST);
    fd = shim_open(link, MRC_OUTPATH_NEXT_FREE, used, sizeof(used));
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    close(fd);
    struct stat st;
    CHECK(stat(target, &st) == 0 && st.st_size == 0);
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
}

static int dumps;
static void count_dump(void)
{
    dumps++;
}

static void test_dump_signal(void)
{
    CHECK(shim_sig_parse("none") == 0 && shim_sig_parse("0") == 0);
    CHECK(shim_sig_parse("USR2") == SIGUSR2 && shim_sig_parse("SIGUSR1") == SIGUSR1);
    CHECK(shim_sig_parse("usr2") == SIGUSR2 && shim_sig_parse("12") == SIGUSR2);
    CHECK(shim_sig_parse("RTMIN+2") == SIGRTMIN + 2 && shim_sig_parse("RTMAX-1") == SIGRTMAX - 1);
    CHECK(shim_sig_parse("SEGV") == -1 && shim_sig_parse("9") == -1 && shim_sig_parse("KILL") == -1);
    CHECK(shim_sig_parse("RTMIN+999") == -1 && shim_sig_parse("") == -1 && shim_sig_parse("USR3") == -1);
    CHECK(shim_sig_install(SIGSEGV, count_dump) == -EINVAL);
    CHECK(shim_sig_install(SIGUSR2, count_dump) == 0);
    shim_sig_poll();
    CHECK(dumps == 0);        /* nothing until the signal */
    raise(SIGUSR2);           /* the handler only sets the flag: no dump inside it */
    CHECK(dumps == 0);
    errno = 1234;
    shim_sig_poll();
    CHECK(dumps == 1 && errno == 1234);
    shim_sig_poll();
    CHECK(dumps == 1);        /* one dump per signal */
    raise(SIGUSR2);
    raise(SIGUSR2);
    shim_sig_poll();
    shim_sig_poll();
    CHECK(dumps == 2);        /* signals before the poll coalesce */
    signal(SIGUSR2, SIG_DFL);
}

static void test_off_costs_nothing(void)
{
    /* Before init: off. No capture, no site, and the section says so. */
    CHECK(shim_count(4096, 0) == NULL && shim_count(4096, 1) == NULL);
    const char *r = json_query("c=d[\"callsites\"]; print(c[\"top\"], len(c[\"sites\"]), d[\"leaks\"][\"count\"])");
    CHECKF(!strcmp(r, "0 0 0"), "%s", r);
}

static volatile int sink;

CHECK_NOIPA static void *site_a(uint64_t len)
{
    sink = 1;   /* distinct bodies: identical functions would be folded into one */
    void *s = shim_count(len, 0);
    __asm__ volatile("" ::: "memory");   /* not a tail call: site_a stays on the stack */
    return s;
}

CHECK_NOIPA static void *site_b(uint64_t len)
{
    sink = 2;   /* distinct bodies: identical functions would be folded into one */
    void *s = shim_count(len, 1);
    __asm__ volatile("" ::: "memory");
    return s;
}

CHECK_NOIPA static void *leak_site(uint64_t len)
{
    sink = 3;   /* distinct bodies: identical functions would be folded into one */
    void *s = shim_count(len, 0);
    __asm__ volatile("" ::: "memory");
    return s;
}

static void test_attribution(void)
{
    shim_callsite_init(16, 1);   /* every hit captured: exact */
    void *a[6], *b = NULL;
    CHECK_NO_UNROLL
    for (int i = 0; i < 6; i++)
        a[i] = site_a(4096);
    CHECK_NO_UNROLL
    for (int i = 0; i < 7; i++)
        b = site_b(8192);
    CHECK(a[0] && b && a[0] != b);
    for (int i = 1; i < 6; i++)
        CHECK(a[i] == a[0]);     /* the same stack is the same site */
    const char *r = json_query(
        "c=d[\"callsites\"]; s={x[\"frames\"][0][\"function\"]: x for x in c[\"sites\"]}; "
        "A=s[\"site_a\"]; B=s[\"site_b\"]; "
        "print(c[\"top\"], c[\"sample_period\"], c[\"unwinder\"], A[\"misses\"], A[\"miss_bytes\"], "
        "B[\"misses\"], B[\"sampled_hits\"], B[\"est_requests\"], B[\"est_bytes\"], "
        "A[\"site\"].startswith(\"site_a+0x\"), A[\"frames\"][0][\"object\"].endswith(\"test_callsite\"), "
        "c[\"sites\"][0][\"frames\"][0][\"function\"])");
    CHECKF(!strcmp(r, "16 1 libunwind 6 24576 0 7 7 57344 True True site_a"), "%s", r);
}

/* Not inlined: its own name is frame 1 of the stacks it makes. */
CHECK_NOIPA static void test_sampling_estimate(void)
{
    shim_callsite_init(16, 64);
    const int n = 64000;
    int sampled = 0;
    CHECK_NO_UNROLL
    for (int i = 0; i < n; i++)
        sampled += site_b(8192) != NULL;
    /* Mean interval 64: about 1000 samples; far outside this range is a broken sampler. */
    CHECKF(sampled > 700 && sampled < 1300, "%d sampled", sampled);
    /* Called from here, site_b is a stack of its own (frame 1 differs). */
    const char *r = json_query("s=[x for x in d[\"callsites\"][\"sites\"] if x[\"frames\"][0][\"function\"]==\"site_b\" "
                               "and x[\"frames\"][1][\"function\"]==\"test_sampling_estimate\"][0]; "
                               "print(s[\"sampled_hits\"], s[\"est_requests\"])");
    long hits = 0, est = 0;
    CHECKF(sscanf(r, "%ld %ld", &hits, &est) == 2, "%s", r);
    CHECKF(hits == sampled && est == (long)sampled * 64, "%s (sampled %d)", r, sampled);
}

static void test_leaks(void)
{
    shim_callsite_init(16, 1);
    struct mrc_leak_tag t[4];
    memset(t, 0, sizeof(t));
    CHECK_NO_UNROLL
    for (int i = 0; i < 3; i++)
        shim_create(&t[i], 1000 + (uint64_t)i, leak_site(1000 + (uint64_t)i), 0);
    shim_create(&t[3], 50, NULL, 1);   /* an unsampled hit: counted, not attributed */
    struct mrc_leaks_summary s;
    shim_leaks_sum(&s);
    CHECK(s.count == 4 && s.bytes == 3053);
    shim_release(&t[1]);
    shim_release(&t[1]);               /* twice: once only */
    shim_release(&t[3]);
    shim_leaks_sum(&s);
    CHECKF(s.count == 2 && s.bytes == 2002 && s.created == 4 && s.released == 2, "%llu %llu",
           (unsigned long long)s.count, (unsigned long long)s.bytes);
    const char *r = json_query("l=d[\"leaks\"]; x=l[\"callsites\"][0]; "
                               "print(l[\"count\"], l[\"bytes\"], len(l[\"callsites\"]), x[\"live\"], x[\"live_bytes\"], "
                               "x[\"frames\"][0][\"function\"])");
    CHECKF(!strcmp(r, "2 2002 1 2 2002 leak_site"), "%s", r);
    shim_release(&t[0]);
    shim_release(&t[2]);
    r = json_query("l=d[\"leaks\"]; print(l[\"count\"], len(l[\"callsites\"]))");
    CHECKF(!strcmp(r, "0 0"), "%s", r);
}

static void test_text_section(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/ext.txt", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && shim_ext_write(fd, 0) == 0);
    char buf[8192];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    CHECK(strstr(buf, "top call sites by misses") != NULL);
    CHECK(strstr(buf, "at site_a+0x") != NULL);
    CHECK(strstr(buf, "not deregistered") != NULL);
}

static void test_fork_child_starts_from_zero(void)
{
    struct mrc_leak_tag t;
    memset(&t, 0, sizeof(t));
    shim_create(&t, 4096, leak_site(4096), 0);
    pid_t pid = fork();
    if (pid == 0) {
        shim_child_reset();
        struct mrc_leaks_summary s;
        shim_leaks_sum(&s);
        const char *r = json_query("s=[x for x in d[\"callsites\"][\"sites\"] if x[\"misses\"]]; print(len(s))");
        _exit(s.count == 0 && !strcmp(r, "0") ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct mrc_leaks_summary s;
    shim_leaks_sum(&s);
    CHECK(s.count == 1);   /* the parent's own count is untouched */
    shim_release(&t);
}

__attribute__((noinline)) static uint64_t deep(int d, uint64_t (*fn)(void))
{
    uint64_t r = d ? deep(d - 1, fn) : fn();
    __asm__ volatile("" ::: "memory");
    return r;
}

/* Each timing is the best of 5 runs: the machine is shared, the minimum is the cost. */
static uint64_t time_misses(void)
{
    const int n = 20000;
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < n; i++)
            site_a(4096);
        uint64_t t = (now_ns() - t0) / n;
        best = t < best ? t : best;
    }
    return best;
}

static uint64_t time_hits(void)
{
    const int n = 200000;
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < n; i++)
            site_b(4096);
        uint64_t t = (now_ns() - t0) * 1000 / n;   /* picoseconds: sub-nanosecond resolution */
        best = t < best ? t : best;
    }
    return best;
}

static uint64_t time_raw(void)
{
    const int n = 20000;
    uint64_t ips[8], best = UINT64_MAX;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < n; i++)
            shim_capture(ips, 8);
        uint64_t t = (now_ns() - t0) / n;
        best = t < best ? t : best;
    }
    return best;
}

/* The cost of a capture: misses (every one captured), hits (1 in 64 captured), off. */
static void test_capture_cost(void)
{
    shim_callsite_init(16, 64);
    time_misses();   /* warm: libunwind's caches */
    uint64_t raw = time_raw(), miss = time_misses(), miss_deep = deep(20, time_misses);
    uint64_t hit_ps = time_hits();
    shim_callsite_init(0, 64);
    uint64_t off_ps = time_hits();
    printf("# capture cost: unw_backtrace alone %llu ns; per miss (capture + table) %llu ns, "
           "%llu ns 20 frames deeper; per hit %.1f ns (1 in 64 sampled); off %.1f ns\n",
           (unsigned long long)raw, (unsigned long long)miss, (unsigned long long)miss_deep, (double)hit_ps / 1000,
           (double)off_ps / 1000);
    /* Loose bounds: they catch an unwinder gone slow (no frame cache, reading files). */
    CHECKF(miss < 50000 && miss_deep < 100000, "%llu ns per capture", (unsigned long long)miss);
    CHECKF(hit_ps < 2000000, "%.1f ns per hit", (double)hit_ps / 1000);
    shim_callsite_init(16, 64);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mrc_stats_test.XXXXXX");
    if (!mkdtemp(dir))
        return 2;
    RUN(test_outpath_expand);
    RUN(test_outpath_never_clobbers);
    RUN(test_dump_signal);
    RUN(test_off_costs_nothing);
    RUN(test_attribution);
    RUN(test_sampling_estimate);
    RUN(test_leaks);
    RUN(test_text_section);
    RUN(test_fork_child_starts_from_zero);
    RUN(test_capture_cost);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return 2;
    CHECK_EXIT();
}
