/* config.c - the table of MRCACHE_* variables, their parsers, and the help text.
 * Invariants: one row per variable (name, default, meaning, parser, field); parsing
 * never allocates and never fails the process: a bad value is reported once and the
 * default is kept. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/config.h"
#include "util/dumpsig.h"
#include "util/log.h"

typedef int (*mrc_parse_fn)(const char *s, void *field);

struct mrc_config_row {
    const char *name;
    const char *def;
    const char *help;
    mrc_parse_fn parse;
    size_t offset;
};

/* Help lines are wrapped to this width (the meaning starts at column 35). */
#define HELP_WIDTH 100
/* A refused value's warning is one line of at most this many characters: the value is
 * quoted in what room is left, at least QUOTE_MIN of it. */
#define WARN_WIDTH 119
#define WARN_FORMAT "%s=\"%.*s%s\" is not valid (expected %s); using %s"
#define QUOTE_MIN 8

static int parse_bool(const char *s, void *f)
{
    if (!strcmp(s, "1") || !strcasecmp(s, "y") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") ||
        !strcasecmp(s, "true"))
        *(int *)f = 1;
    else if (!strcmp(s, "0") || !strcasecmp(s, "n") || !strcasecmp(s, "no") || !strcasecmp(s, "off") ||
             !strcasecmp(s, "false"))
        *(int *)f = 0;
    else
        return -1;
    return 0;
}

/* The decimal number s starts with into *v, *end after it: 0, or -1 if there is none. */
static int parse_leading(const char *s, unsigned long long *v, char **end)
{
    if (*s == '-' || !*s)
        return -1;
    errno = 0;
    *v = strtoull(s, end, 10);
    return errno || *end == s ? -1 : 0;
}

/* A count or a size: decimal with an optional K, M, G or T suffix (powers of 1024). */
static int parse_u64(const char *s, void *f)
{
    char *end;
    unsigned long long v;
    if (parse_leading(s, &v, &end))
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *(uint64_t *)f = (uint64_t)v << shift;
    return 0;
}

static int parse_positive(const char *s, void *f)
{
    uint64_t v;
    if (parse_u64(s, &v) || v == 0)
        return -1;
    *(uint64_t *)f = v;
    return 0;
}

/* The index of s among the n names (case-insensitive), or -1. */
static int word_index(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcasecmp(s, names[i]))
            return i;
    return -1;
}

static int parse_size_or_auto(const char *s, void *f)
{
    if (!strcasecmp(s, "auto")) {
        *(uint64_t *)f = 0;
        return 0;
    }
    return parse_positive(s, f);
}

/* One of n words into an int field: its index, which is the value of the enum the
 * names are listed in the order of. */
static int parse_word(const char *s, const char *const *names, int n, void *f)
{
    int i = word_index(s, names, n);
    if (i < 0)
        return -1;
    *(int *)f = i;
    return 0;
}

static int parse_remote(const char *s, void *f)
{
    static const char *const names[] = { "exact", "never" };   /* enum mrc_cfg_remote */
    return parse_word(s, names, 2, f);
}

static int parse_shared(const char *s, void *f)
{
    static const char *const names[] = { "register", "cache" };   /* enum mrc_cfg_shared */
    return parse_word(s, names, 2, f);
}

static int parse_odp(const char *s, void *f)
{
    static const char *const names[] = { "off", "fallback", "implicit" };   /* enum mrc_cfg_odp */
    return parse_word(s, names, 3, f);
}

static int parse_audit(const char *s, void *f)
{
    static const char *const names[] = { "off", "warn", "abort" };   /* enum mrc_cfg_audit */
    return parse_word(s, names, 3, f);
}

static int parse_huge(const char *s, void *f)
{
    static const char *const names[] = { "off", "advise", "collapse" };   /* enum mrc_cfg_huge */
    return parse_word(s, names, 3, f);
}

/* A size, or off (the same as 0). */
static int parse_size_or_off(const char *s, void *f)
{
    if (!strcasecmp(s, "off")) {
        *(uint64_t *)f = 0;
        return 0;
    }
    return parse_u64(s, f);
}

static int parse_log(const char *s, void *f)
{
    static const char *const names[] = { "error", "warn", "info", "debug" };   /* enum mrc_log_level */
    return parse_word(s, names, 4, f);
}

/* A yes/no word is a switch, never a file name: MRCACHE_STATS=1 or =on would otherwise
 * drop a file called "1" or "on" in the working directory. "./on" names that file. */
static int parse_stats(const char *s, void *f)
{
    int on;
    if (parse_bool(s, &on) == 0)
        s = on ? "stderr" : "off";
    size_t n = strlen(s);
    if (n == 0 || n >= 256)
        return -1;
    memcpy(f, s, n + 1);
    return 0;
}

static int parse_format(const char *s, void *f)
{
    static const char *const names[] = { "text", "json" };   /* enum mrc_stats_format */
    return parse_word(s, names, 2, f);
}

/* A list of sources separated by commas or '+' (the spelling the statistics use):
 * auto (= patch,preload, and uffd where patching falls short), preload, patch, uffd; or
 * none alone. An unknown word, or none with another, makes the whole value invalid. */
static int parse_monitor(const char *s, void *f)
{
    int bits = 0, none = 0, words = 0;
    while (*s) {
        size_t n = strcspn(s, ",+");
        if ((n == 4 && !strncasecmp(s, "auto", 4)))
            bits |= MRC_MONITOR_PATCH | MRC_MONITOR_PRELOAD | MRC_MONITOR_AUTO;
        else if (n == 7 && !strncasecmp(s, "preload", 7))
            bits |= MRC_MONITOR_PRELOAD;
        else if (n == 5 && !strncasecmp(s, "patch", 5))
            bits |= MRC_MONITOR_PATCH;
        else if (n == 4 && !strncasecmp(s, "uffd", 4))
            bits |= MRC_MONITOR_UFFD;
        else if (n == 4 && !strncasecmp(s, "none", 4))
            none = 1;
        else
            return -1;
        words++;
        s += n;
        if ((*s == ',' || *s == '+') && !*++s)
            return -1;
    }
    if (!words || (none && words > 1))
        return -1;
    *(int *)f = bits;
    return 0;
}

static int parse_signal(const char *s, void *f)
{
    int signo = mrc_dumpsig_parse(s);
    if (signo < 0)
        return -1;
    *(int *)f = signo;
    return 0;
}

/* What fork() does with idle cached registrations: release (0), keep (MRC_FORK_KEEP), or
 * a size: released only when the cache holds more than that. */
static int parse_fork(const char *s, void *f)
{
    if (!strcasecmp(s, "release")) {
        *(uint64_t *)f = 0;
        return 0;
    }
    if (!strcasecmp(s, "keep")) {
        *(uint64_t *)f = MRC_FORK_KEEP;
        return 0;
    }
    return parse_u64(s, f);
}

/* MRCACHE_EXPAND: off (or 0), or the window as a power of two of at least 8K. */
static int parse_expand(const char *s, void *f)
{
    if (parse_size_or_off(s, f))
        return -1;
    uint64_t v = *(uint64_t *)f;
    return v && (v < 8192 || (v & (v - 1))) ? -1 : 0;
}

/* A duration: 0 (never), or a number with ms, s (the default unit), m or h. Kept in ms. */
static int parse_duration(const char *s, void *f)
{
    char *end;
    unsigned long long v;
    if (parse_leading(s, &v, &end))
        return -1;
    uint64_t unit = 1000;
    if (!strcasecmp(end, "ms"))
        unit = 1;
    else if (!strcasecmp(end, "m"))
        unit = 60000;
    else if (!strcasecmp(end, "h"))
        unit = 3600000;
    else if (*end && strcasecmp(end, "s"))
        return -1;
    if (v > UINT64_MAX / unit / 1000000)   /* its nanoseconds must fit */
        return -1;
    *(uint64_t *)f = v * unit;
    return 0;
}

/* The largest registration kept after its release: 1/N of MRCACHE_MAX_BYTES, or a size. */
static int parse_large(const char *s, void *f)
{
    if (!strncmp(s, "1/", 2)) {
        uint64_t n;
        if (parse_positive(s + 2, &n) || (n & MRC_LARGE_FRACTION) || strpbrk(s + 2, "kKmMgGtTbB"))
            return -1;
        *(uint64_t *)f = MRC_LARGE_FRACTION | n;
        return 0;
    }
    uint64_t v;
    if (parse_positive(s, &v) || (v & MRC_LARGE_FRACTION))
        return -1;
    *(uint64_t *)f = v;
    return 0;
}

#define ROW(n, d, h, p, field) { n, d, h, p, offsetof(struct mrc_config, field) }

static const struct mrc_config_row rows[] = {
    ROW("MRCACHE_ENABLE", "1", "0 makes every call pass straight through to libibverbs", parse_bool, enable),
    ROW("MRCACHE_MAX_ENTRIES", "65536", "cached registrations kept; idle ones past this are evicted, least recently used first",
        parse_positive, max_entries),
    ROW("MRCACHE_MAX_BYTES", "auto", "registered bytes kept (K/M/G/T suffixes); auto: RLIMIT_MEMLOCK if finite and the process lacks CAP_IPC_LOCK, else 1/4 of RAM",
        parse_size_or_auto, max_bytes),
    ROW("MRCACHE_MAX_DEFERRED", "256M", "bytes of registrations invalidated inside unmap hooks that may wait for the next verbs call; past this a helper thread deregisters them",
        parse_positive, max_deferred_bytes),
    ROW("MRCACHE_REMOTE", "exact", "remote-access registrations: exact (cached, reused only for the same range and rights) or never (deregistered at ibv_dereg_mr, rkey revoked)",
        parse_remote, remote_policy),
    ROW("MRCACHE_SHARED", "register", "registrations over memory another process can change (file mappings, MAP_PRIVATE ones too, shm, memfd, shared anonymous): register (for their caller alone, not cached) or cache (cached: only if no other process truncates, punches or MADV_REMOVEs it)",
        parse_shared, shared_policy),
    ROW("MRCACHE_EXPAND", "off", "a local-only registration that misses registers the allocation around it instead: its private anonymous mapping, within the aligned window of this size (a power of two, K/M/G suffixes, at most a quarter of MRCACHE_MAX_BYTES), so that later pieces of it hit; never with remote rights, never across a mapping, its exact range if the wider one fails; off (or 0) registers what is asked",
        parse_expand, expand),
    ROW("MRCACHE_LOG", "warn", "log level: error, warn, info, debug", parse_log, log_level),
    ROW("MRCACHE_STATS", "auto", "statistics at exit: auto (stderr, if anything was registered), off (or 0, no, false), stderr (or 1, on, yes, true), or a file path where %p is the pid, %h the host, %r the rank (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID), %% a literal %",
        parse_stats, stats),
    ROW("MRCACHE_STATS_FORMAT", "text", "text or json", parse_format, stats_format),
    ROW("MRCACHE_MONITOR", "auto", "how unmaps are seen, a list separated by commas or +: auto (= patch,preload, plus uffd if patching falls short), patch (libc's munmap-family entry points patched, so glibc's own calls are seen), preload (munmap-family and allocator hooks), uffd (userfaultfd events over registered ranges: also raw system calls), none (UNSAFE: no invalidation; for demonstrations only)",
        parse_monitor, monitor),
    ROW("MRCACHE_MALLOC_HOOKS", "1", "0 stops watching glibc malloc's own unmaps (free of mmapped chunks, heap trimming)",
        parse_bool, malloc_hooks),
    ROW("MRCACHE_DIRECT_FREE", "1", "1: while libc's patched entry points see the allocator's unmaps, the PLT calls of free in the objects loaded at start-up go straight to the allocator (no cost per free); 0: every free passes through libmrcache",
        parse_bool, direct_free),
    ROW("MRCACHE_CALLSITES", "0", "attribute registrations, misses, bytes and leaked MRs to the top N call stacks (libunwind); 0 = off",
        parse_u64, callsites),
    ROW("MRCACHE_CALLSITES_SAMPLE", "64", "with MRCACHE_CALLSITES: every miss is captured, hits 1 in about K (random intervals; 1 = all)",
        parse_positive, callsite_sample),
    ROW("MRCACHE_DUMP_SIGNAL", "none", "a signal (USR1, USR2, HUP, RTMIN+n, ...) that asks for a statistics dump, written at the next registration or deregistration call",
        parse_signal, dump_signal),
    ROW("MRCACHE_VERIFY", "0", "check hits against /proc/self/pagemap: 0 off, 1 every hit, N one hit in N; a stale registration is logged, counted and replaced (needs CAP_SYS_ADMIN to read frame numbers; without it verification is off, said once)",
        parse_u64, verify),
    ROW("MRCACHE_FORK", "release", "what fork() does with idle cached registrations, whose pinned pages the kernel copies into the child: release (deregistered first), keep, or a size (K/M/G/T: released when the cache holds more)",
        parse_fork, fork_keep),
    ROW("MRCACHE_IDLE_TIMEOUT", "30s", "an idle cached registration unused this long is deregistered by the helper thread, even if the program makes no further verbs call (ms, s, m, h; 0 = never)",
        parse_duration, idle_timeout_ms),
    ROW("MRCACHE_LARGE", "1/4", "a registration larger than this (1/N of MRCACHE_MAX_BYTES, or a size with K/M/G/T) is not kept after its release, so one giant buffer does not push the rest of the cache out",
        parse_large, large),
    ROW("MRCACHE_DUMP_MRS", "10", "the statistics dump lists this many of the largest cached registrations (address, length, lkey, rkey, access, users, idle time); 0 = none",
        parse_u64, dump_mrs),
    ROW("MRCACHE_ODP", "off", "on-demand paging where the device supports it: off; fallback (a registration that cannot be pinned, even after idle ones were released, is made with IBV_ACCESS_ON_DEMAND); implicit (as fallback, and local-only registrations are served by one implicit ODP MR per pd). Never for read-only or device memory",
        parse_odp, odp),
    ROW("MRCACHE_ODP_PREFETCH", "1", "1: a registration served by an ODP MR asks the device to prefetch its pages (ibv_advise_mr, asynchronous); 0: its pages fault in at first access",
        parse_bool, odp_prefetch),
    ROW("MRCACHE_HUGEPAGES", "off", "huge pages under large registrations of private anonymous memory: off, advise (MADV_HUGEPAGE over the 2 MiB extents not yet populated, so that the pin faults in huge pages) or collapse (advise, and MADV_COLLAPSE over populated extents before the pin; extents pinned already are refused by the kernel and registered as they are)",
        parse_huge, hugepages),
    ROW("MRCACHE_HUGEPAGES_MIN", "2M", "with MRCACHE_HUGEPAGES: registrations at least this long (at least 2M) get huge pages",
        parse_positive, hugepages_min),
    ROW("MRCACHE_POPULATE", "off", "a size (64M, say): a miss with at least this many bytes not yet resident faults them in with several threads before the pin (MADV_POPULATE_WRITE, or _READ without write access; Linux 5.14+); off or 0: never (the default: see docs/benchmarks.md)",
        parse_size_or_off, populate),
    ROW("MRCACHE_POPULATE_THREADS", "auto", "threads that populate, the registering one included: auto (the online CPUs, at most 8) or a number (1: the pin faults pages in alone)",
        parse_size_or_auto, populate_threads),
    ROW("MRCACHE_AUDIT", "off", "every work request the program posts is checked: each scatter/gather entry's lkey and range against the MRs the program holds and the memory changes since each was made; off, warn (one line per MR and kind of fault, then counted in audit_faults) or abort (a core dump at the first)",
        parse_audit, audit),
    ROW("MRCACHE_HELP", "0", "1 prints this table at start-up", parse_bool, help),
};

/* What a parser accepts, in a few words, for the one-line warning about a value it
 * refused. */
static const char *expected(mrc_parse_fn parse)
{
    static const struct { mrc_parse_fn parse; const char *what; } words[] = {
        { parse_bool, "0 or 1" },
        { parse_u64, "a number" },
        { parse_positive, "a number above 0" },
        { parse_size_or_auto, "auto or a size" },
        { parse_remote, "exact or never" },
        { parse_log, "error|warn|info|debug" },
        { parse_stats, "auto|off|stderr|a file" },
        { parse_format, "text or json" },
        { parse_monitor, "auto or patch,preload,uffd" },
        { parse_signal, "none or USR1|USR2|HUP..." },
        { parse_fork, "release, keep or a size" },
        { parse_shared, "register or cache" },
        { parse_expand, "off or a power of two >= 8K" },
        { parse_duration, "0 or a time (ms, s, m, h)" },
        { parse_large, "1/N or a size" },
        { parse_odp, "off, fallback or implicit" },
        { parse_huge, "off, advise or collapse" },
        { parse_audit, "off, warn or abort" },
        { parse_size_or_off, "off or a size" },
    };
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (words[i].parse == parse)
            return words[i].what;
    return "see MRCACHE_HELP=1";
}

/* The edit distance between a and b (names of at most 63 characters; longer ones are
 * far from every name). */
static unsigned distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    unsigned row[64];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* What a parent that spoke about its settings leaves its children: a digest of the
 * MRCACHE_* variables it warned about, so that a child with the same ones stays quiet
 * (a job script's every ls would otherwise repeat the warning). Set only when something
 * was said: a program whose settings are fine never sees it. */
#define SAID_VAR "MRCACHE_WARNED"

/* Variables of the MRCACHE_ prefix that are not settings: the digest, the test suite's. */
static const char *const foreign[] = { SAID_VAR, "MRCACHE_TEST_DEVICE", "MRCACHE_TEST_GID_INDEX" };

static char digest[17];   /* of this process's MRCACHE_* variables, in hex */
static int said_before;   /* the parent said it all: this process stays quiet */
static int spoke;         /* this process warned about its settings, or printed the table */

/* FNV-1a over the MRCACHE_* entries of the environment, the digest's own left out. */
static void digest_settings(void)
{
    extern char **environ;
    uint64_t h = 1469598103934665603ull;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "MRCACHE_", 8) || !strncmp(*e, SAID_VAR "=", sizeof(SAID_VAR)))
            continue;
        for (const unsigned char *c = (const unsigned char *)*e; *c; c++)
            h = (h ^ *c) * 1099511628211ull;
        h = (h ^ '\n') * 1099511628211ull;
    }
    snprintf(digest, sizeof(digest), "%016llx", (unsigned long long)h);
    const char *was = getenv(SAID_VAR);
    said_before = was && !strcmp(was, digest);
}

int mrc_config_quiet(void)
{
    if (!said_before)
        spoke = 1;   /* the caller is about to say something about the settings */
    return said_before;
}

void mrc_config_pass_on(void)
{
    if (spoke && !said_before)
        setenv(SAID_VAR, digest, 1);
}

/* One line for each MRCACHE_* variable the library does not know (a misspelt name is
 * otherwise silently without effect), naming the closest known one. */
static void warn_unknown(void)
{
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        char name[64];
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        if (strncmp(*e, "MRCACHE_", 8) || n >= sizeof(name))
            continue;
        memcpy(name, *e, n);
        name[n] = 0;
        int known = 0;
        const char *closest = NULL;
        unsigned best = 99;
        for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]) && !known; i++) {
            known = !strcmp(name, rows[i].name);
            unsigned d = distance(name + 8, rows[i].name + 8);
            if (d < best) {
                best = d;
                closest = rows[i].name;
            }
        }
        for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]) && !known; i++)
            known = !strcmp(name, foreign[i]);
        if (known || mrc_config_quiet())
            continue;
        if (closest && best <= 3 && 2 * best < strlen(name + 8))   /* close, and not a guess */
            MRC_WARN("%s is not a libmrcache setting (did you mean %s?); it has no effect", name, closest);
        else
            MRC_WARN("%s is not a libmrcache setting; it has no effect (mrcache --config lists them)", name);
    }
}

void mrc_config_load(struct mrc_config *cfg)
{
    digest_settings();
    warn_unknown();
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct mrc_config_row *r = &rows[i];
        void *field = (char *)cfg + r->offset;
        if (r->parse(r->def, field) != 0)
            MRC_ERROR("internal: bad default for %s", r->name);
        const char *v = getenv(r->name);
        if (v && r->parse(v, field) != 0 && mrc_config_quiet()) {
            r->parse(r->def, field);
        } else if (v && r->parse(v, field) != 0) {
            /* The line without the value ("libmrcache[pid]: " and the fixed words) takes
             * what it takes; the value is quoted in the rest. */
            const char *what = expected(r->parse);
            int rest = snprintf(NULL, 0, "libmrcache[%d]: " WARN_FORMAT, (int)getpid(), r->name, 0, "", "", what,
                                r->def);
            int room = WARN_WIDTH - rest < QUOTE_MIN + 3 ? QUOTE_MIN : WARN_WIDTH - rest - 3;
            int len = (int)strnlen(v, (size_t)room + 4);
            int cut = len > room + 3;
            MRC_WARN(WARN_FORMAT, r->name, cut ? room : len, v, cut ? "..." : "", what, r->def);
            r->parse(r->def, field);
        }
    }
}

/* Writes "name default meaning", the meaning wrapped at spaces to HELP_WIDTH, its
 * continuation lines indented to where it starts. */
static void help_row(int fd, const char *name, const char *def, const char *help)
{
    char line[HELP_WIDTH + 2];
    int n = snprintf(line, sizeof(line), "%-25s %-8s ", name, def);
    if (n < 0 || n >= HELP_WIDTH)
        n = 0;
    size_t indent = (size_t)n, room = HELP_WIDTH - indent;
    const char *p = help;
    do {
        size_t len = strlen(p), take = len;
        if (len > room) {
            take = room;
            while (take > 0 && p[take] != ' ')
                take--;
            if (!take)
                take = room;   /* a word longer than the line: cut it */
        }
        if (p != help) {
            memset(line, ' ', indent);
            n = (int)indent;
        }
        memcpy(line + n, p, take);
        line[(size_t)n + take] = '\n';
        mrc_write_all(fd, line, (unsigned long)n + take + 1);
        p += take;
        while (*p == ' ')
            p++;
    } while (*p);
}

void mrc_config_print_help(int fd)
{
    help_row(fd, "variable", "default", "meaning");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        help_row(fd, rows[i].name, rows[i].def, rows[i].help);
}

void mrc_config_describe(int fd)
{
    char line[1024];
    static const char head[] = "# libmrcache config 1\n";
    mrc_write_all(fd, head, sizeof(head) - 1);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct mrc_config_row *r = &rows[i];
        const char *v = getenv(r->name);
        /* The parser writes the field where it lies in a scratch configuration. */
        struct mrc_config scratch;
        const char *source = "default", *current = r->def;
        if (v && r->parse(v, (char *)&scratch + r->offset) == 0) {
            source = "environment";
            current = v;
        } else if (v) {
            source = "invalid";
        }
        int n = snprintf(line, sizeof(line), "%s\t%s\t%s\t%s\t%s\n", r->name, r->def, current, source, r->help);
        if (n > (int)sizeof(line) - 1)
            n = (int)sizeof(line) - 1;
        mrc_write_all(fd, line, (unsigned long)n);
    }
}

int mrc_config_has_ipc_lock(void)
{
    char buf[4096];
    if (mrc_read_text("/proc/self/status", buf, sizeof(buf)) < 0)
        return 0;
    const char *p = strstr(buf, "CapEff:");
    if (!p)
        return 0;
    unsigned long long caps = strtoull(p + 7, NULL, 16);
    return (caps >> 14) & 1;   /* CAP_IPC_LOCK */
}

uint64_t mrc_config_auto_max_bytes(void)
{
    struct rlimit rl;
    if (!mrc_config_has_ipc_lock() && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        return rl.rlim_cur;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return 1ull << 30;
    return (uint64_t)pages * (uint64_t)psz / 4;
}
