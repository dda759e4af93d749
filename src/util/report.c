/* report.c - formats the statistics into a fixed stack buffer, as text or JSON.
 * Invariants: no allocation, no stdio streams; the JSON's top-level "version" changes
 * only when a field changes meaning or disappears (fields may be added). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/outpath.h"
#include "util/report.h"
#include "util/report_ext.h"

struct buf {
    char d[16384];
    size_t n;
};

__attribute__((format(printf, 2, 3))) static void put(struct buf *b, const char *fmt, ...)
{
    if (b->n >= sizeof(b->d) - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(b->d + b->n, sizeof(b->d) - b->n, fmt, ap);
    va_end(ap);
    if (m > 0)
        b->n += (size_t)m < sizeof(b->d) - b->n ? (size_t)m : sizeof(b->d) - b->n - 1;
}

void mrc_report_reg_model(const struct mrc_report *r, double *fixed_ns, double *ns_per_byte)
{
    const uint64_t *v = r->s.v;
    /* The first registration left out, unless it is the only one. */
    int skip_first = v[MRC_STAT_REAL_REGS] > 1 && v[MRC_STAT_FIRST_REG_BYTES];
    unsigned first_bucket = mrc_hist_bucket(v[MRC_STAT_FIRST_REG_BYTES]);
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    int points = 0;
    for (unsigned k = 0; k < MRC_HIST_BUCKETS; k++) {
        double w = (double)r->s.hist[k][MRC_HIST_REGS], ns = (double)r->s.hist[k][MRC_HIST_REG_NS];
        double bytes = (double)r->s.hist[k][MRC_HIST_REG_BYTES];
        if (skip_first && k == first_bucket) {
            w -= 1;
            ns -= (double)v[MRC_STAT_FIRST_REG_NS];
            bytes -= (double)v[MRC_STAT_FIRST_REG_BYTES];
        }
        if (w <= 0 || ns < 0 || bytes <= 0)
            continue;
        /* A size's cost, robust to the odd slow registration (a page fault storm, a
         * preempted thread): its mean, but at most twice its fastest. Registrations of
         * one bucket's sizes (within 2x of each other) cost within about 2x of each
         * other when nothing else intervenes; one that took a second would otherwise
         * price every hit of its size at a fraction of that second. */
        double fastest = (double)r->s.hist[k][MRC_HIST_REG_MIN];
        double x = bytes / w, y = ns / w;
        if (fastest > 0 && y > 2 * fastest)
            y = 2 * fastest;
        n += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
        points++;
    }
    double fixed = 0, per_byte = 0;
    if (n > 0) {
        double var = n * sxx - sx * sx;
        fixed = sy / n;   /* one size only: its mean cost */
        if (points > 1 && var > 0) {
            per_byte = (n * sxy - sx * sy) / var;
            fixed = (sy - per_byte * sx) / n;
            if (per_byte < 0) {          /* costs falling with size: noise; a mean */
                per_byte = 0;
                fixed = sy / n;
            } else if (fixed < 0) {      /* through the origin instead */
                fixed = 0;
                per_byte = sxy / sxx;
            }
        }
    }
    *fixed_ns = fixed;
    *ns_per_byte = per_byte;
}

/* mrc_report_saved_ns with the model already fitted. */
static uint64_t saved_ns(const struct mrc_report *r, double fixed, double per_byte)
{
    double saved = 0;
    /* The hits priced here, the histogram's: v[MRC_STAT_HITS] is summed apart from it,
     * and a snapshot taken while a thread counts may hold a hit in one and not the other. */
    uint64_t hits = 0;
    for (int k = 0; k < MRC_HIST_BUCKETS; k++) {
        hits += r->s.hist[k][MRC_HIST_HITS];
        saved += (double)r->s.hist[k][MRC_HIST_HITS] * fixed + (double)r->s.hist[k][MRC_HIST_HIT_BYTES] * per_byte;
    }
    /* Each hit's release is a deregistration the NIC did not make either. */
    if (r->s.v[MRC_STAT_REAL_DEREGS])
        saved += (double)hits * (double)r->s.v[MRC_STAT_REAL_DEREG_NS] / (double)r->s.v[MRC_STAT_REAL_DEREGS];
    return saved > 0 ? (uint64_t)saved : 0;
}

uint64_t mrc_report_saved_ns(const struct mrc_report *r)
{
    double fixed, per_byte;
    mrc_report_reg_model(r, &fixed, &per_byte);
    return saved_ns(r, fixed, per_byte);
}

static double pct(uint64_t a, uint64_t b)
{
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

static const char *bucket_label(int b, char *tmp, size_t n)
{
    uint64_t hi = 4096ull << b;
    if (b == MRC_HIST_BUCKETS - 1)
        snprintf(tmp, n, ">%lluM", (unsigned long long)((hi >> 1) >> 20));
    else if (hi >= (1ull << 20))
        snprintf(tmp, n, "<=%lluM", (unsigned long long)(hi >> 20));
    else
        snprintf(tmp, n, "<=%lluK", (unsigned long long)(hi >> 10));
    return tmp;
}

/* What the NIC was handed (the page-size mix at each pin) and what misses did to their
 * memory before pinning it. */
static void write_nic_view(struct buf *b, const uint64_t *v)
{
    if (v[MRC_STAT_NIC_ENTRIES_4K])
        put(b, "  NIC's view: %llu B in 4 KiB pages, %llu B in huge pages; translation entries %llu (%llu at 4 KiB)"
               "; %llu registrations past 2^20 4 KiB pages\n",
            (unsigned long long)v[MRC_STAT_SMALL_PAGE_BYTES], (unsigned long long)v[MRC_STAT_HUGE_PAGE_BYTES],
            (unsigned long long)v[MRC_STAT_NIC_ENTRIES], (unsigned long long)v[MRC_STAT_NIC_ENTRIES_4K],
            (unsigned long long)v[MRC_STAT_REGS_OVER_1M_PAGES]);
    if (v[MRC_STAT_HUGE_ADVISED] || v[MRC_STAT_HUGE_COLLAPSED] || v[MRC_STAT_COLLAPSE_FAILURES] ||
        v[MRC_STAT_POPULATED])
        put(b, "  before pins: %llu B advised huge, %llu B collapsed (%llu runs refused), %llu B populated in "
               "parallel; %.3f ms\n",
            (unsigned long long)v[MRC_STAT_HUGE_ADVISED], (unsigned long long)v[MRC_STAT_HUGE_COLLAPSED],
            (unsigned long long)v[MRC_STAT_COLLAPSE_FAILURES], (unsigned long long)v[MRC_STAT_POPULATED],
            (double)v[MRC_STAT_PREPARE_NS] / 1e6);
}

static void write_text(struct buf *b, const struct mrc_report *r)
{
    const uint64_t *v = r->s.v;
    double fixed, per_byte;
    mrc_report_reg_model(r, &fixed, &per_byte);
    uint64_t saved = saved_ns(r, fixed, per_byte);
    put(b, "libmrcache[%d] statistics (monitor: %s)\n", (int)getpid(), r->monitor);
    put(b, "  registrations requested %llu: hits %llu, misses %llu, uncached %llu (%llu over shared memory, %llu large); hit rate %.1f%%\n",
        (unsigned long long)v[MRC_STAT_REQUESTS], (unsigned long long)v[MRC_STAT_HITS],
        (unsigned long long)v[MRC_STAT_MISSES], (unsigned long long)v[MRC_STAT_UNCACHED],
        (unsigned long long)v[MRC_STAT_UNCACHED_SHARED], (unsigned long long)v[MRC_STAT_UNCACHED_LARGE],
        pct(v[MRC_STAT_HITS], v[MRC_STAT_REQUESTS]));
    put(b, "  registrations avoided %llu (real: %llu reg, %llu dereg); merges %llu, expanded %llu (%llu refused), evictions %llu, expired idle %llu, enomem retries %llu, failures %llu\n",
        (unsigned long long)v[MRC_STAT_HITS], (unsigned long long)v[MRC_STAT_REAL_REGS],
        (unsigned long long)v[MRC_STAT_REAL_DEREGS], (unsigned long long)v[MRC_STAT_MERGES],
        (unsigned long long)v[MRC_STAT_EXPANDED], (unsigned long long)v[MRC_STAT_EXPAND_REFUSED],
        (unsigned long long)v[MRC_STAT_EVICTIONS], (unsigned long long)v[MRC_STAT_EXPIRED],
        (unsigned long long)v[MRC_STAT_ENOMEM_RETRIES], (unsigned long long)v[MRC_STAT_REG_FAILURES]);
    put(b, "  invalidated %llu:", (unsigned long long)v[MRC_STAT_INVALIDATED]);
    for (int i = 0; i < MRC_STAT_INVAL_CAUSES; i++)
        put(b, " %s %llu", mrc_stat_names[MRC_STAT_INVAL_BASE + i] + sizeof "inval_" - 1, (unsigned long long)v[MRC_STAT_INVAL_BASE + i]);
    put(b, "\n  deferred deregistrations %llu, raced misses %llu\n", (unsigned long long)v[MRC_STAT_DEFERRED],
        (unsigned long long)v[MRC_STAT_RACED]);
    if (v[MRC_STAT_INVAL_IN_USE])
        put(b, "  MRs that outlived their memory %llu: still registered when it was unmapped or replaced "
               "(RDMA through them reaches the old pages)\n",
            (unsigned long long)v[MRC_STAT_INVAL_IN_USE]);
    if (v[MRC_STAT_AUDIT_CHECKS])
        put(b, "  audit (MRCACHE_AUDIT): %llu scatter/gather entries of posted work requests checked, %llu FAULTS\n",
            (unsigned long long)v[MRC_STAT_AUDIT_CHECKS], (unsigned long long)v[MRC_STAT_AUDIT_FAULTS]);
    if (v[MRC_STAT_INVAL_IN_USE_LIB])
        put(b, "  MRs of libraries' own caches (UCX, libfabric) over memory that changed %llu: released lazily "
               "by them, not reported\n",
            (unsigned long long)v[MRC_STAT_INVAL_IN_USE_LIB]);
    if (v[MRC_STAT_UFFD_EVENTS] || v[MRC_STAT_UFFD_UNWATCHED] || v[MRC_STAT_UFFD_FAULTS])
        put(b, "  userfaultfd: %llu events, %llu entries caught that other sources missed, %llu faults answered, %llu registrations unwatched\n",
            (unsigned long long)v[MRC_STAT_UFFD_EVENTS], (unsigned long long)v[MRC_STAT_UFFD_CAUGHT],
            (unsigned long long)v[MRC_STAT_UFFD_FAULTS], (unsigned long long)v[MRC_STAT_UFFD_UNWATCHED]);
    if (v[MRC_STAT_VERIFY_CHECKS])
        put(b, "  verify: %llu hits checked against pagemap, %llu STALE\n", (unsigned long long)v[MRC_STAT_VERIFY_CHECKS],
            (unsigned long long)v[MRC_STAT_VERIFY_STALE]);
    const char *odp = r->odp_mode ? r->odp_mode : "off";
    if (strcmp(odp, "off") || v[MRC_STAT_ODP_FALLBACKS] || v[MRC_STAT_ODP_IMPLICIT]) {
        put(b, "  on demand (MRCACHE_ODP=%s): %llu fallbacks, %llu served by implicit MRs, %llu prefetches;",
            odp, (unsigned long long)v[MRC_STAT_ODP_FALLBACKS], (unsigned long long)v[MRC_STAT_ODP_IMPLICIT],
            (unsigned long long)v[MRC_STAT_ODP_PREFETCHES]);
        for (unsigned i = 0; i < r->odp_ndevs; i++)
            put(b, " %s odp_caps %#llx rc %#x uc %#x ud %#x", r->odp_devs[i].name,
                (unsigned long long)r->odp_devs[i].general, r->odp_devs[i].rc, r->odp_devs[i].uc, r->odp_devs[i].ud);
        put(b, "%s\n", r->odp_ndevs ? "" : " no device asked");
    }
    write_nic_view(b, v);
    put(b, "  pinned now %llu B in %llu registrations (peak %llu B, %llu registrations)\n",
        (unsigned long long)r->g.bytes, (unsigned long long)r->g.entries, (unsigned long long)r->g.bytes_peak,
        (unsigned long long)r->g.entries_peak);
    if (r->g.failed)
        put(b, "  deregistrations the NIC refused %llu; %llu registrations (%llu B) still refused, kept and retried\n",
            (unsigned long long)v[MRC_STAT_DEREG_FAILURES], (unsigned long long)r->g.failed,
            (unsigned long long)r->g.failed_bytes);
    else if (v[MRC_STAT_DEREG_FAILURES])
        put(b, "  deregistrations the NIC refused %llu; all went through when retried\n",
            (unsigned long long)v[MRC_STAT_DEREG_FAILURES]);
    put(b, "  time in real registration %.3f ms, deregistration %.3f ms; estimated time saved %.3f ms "
           "(a registration modelled as %.1f us + %.3f ns/B)\n",
        (double)v[MRC_STAT_REAL_REG_NS] / 1e6, (double)v[MRC_STAT_REAL_DEREG_NS] / 1e6, (double)saved / 1e6,
        fixed / 1e3, per_byte);
    put(b, "  sizes: %-8s %10s %10s %10s %12s\n", "bucket", "requests", "hits", "regs", "avg reg us");
    for (int i = 0; i < MRC_HIST_BUCKETS; i++) {
        uint64_t req = r->s.hist[i][MRC_HIST_REQUESTS];
        if (!req && !r->s.hist[i][MRC_HIST_REGS])
            continue;
        char tmp[16];
        uint64_t regs = r->s.hist[i][MRC_HIST_REGS];
        put(b, "         %-8s %10llu %10llu %10llu %12.2f\n", bucket_label(i, tmp, sizeof(tmp)),
            (unsigned long long)req, (unsigned long long)r->s.hist[i][MRC_HIST_HITS], (unsigned long long)regs,
            regs ? (double)r->s.hist[i][MRC_HIST_REG_NS] / (double)regs / 1e3 : 0.0);
    }
}

static void write_json(struct buf *b, const struct mrc_report *r)
{
    const uint64_t *v = r->s.v;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    put(b, "{\"version\": %d, \"pid\": %d, \"host\": \"%s\", \"monitor\": \"%s\", \"wall_ns\": %llu,\n",
        MRC_REPORT_JSON_VERSION, (int)getpid(), host, r->monitor, (unsigned long long)r->wall_ns);
    put(b, " \"counters\": {");
    for (int i = 0; i < MRC_STAT_LAST; i++)
        put(b, "%s\"%s\": %llu", i ? ", " : "", mrc_stat_names[i], (unsigned long long)v[i]);
    put(b, "},\n \"hit_rate\": %.4f, \"saved_ns\": %llu,\n", pct(v[MRC_STAT_HITS], v[MRC_STAT_REQUESTS]) / 100,
        (unsigned long long)mrc_report_saved_ns(r));
    put(b, " \"gauges\": {\"pinned_bytes\": %llu, \"pinned_bytes_peak\": %llu, \"registrations\": %llu, "
           "\"registrations_peak\": %llu, \"cached_entries\": %llu, \"cached_bytes\": %llu, \"deferred\": %llu, "
           "\"failed\": %llu, \"failed_bytes\": %llu},\n",
        (unsigned long long)r->g.bytes, (unsigned long long)r->g.bytes_peak, (unsigned long long)r->g.entries,
        (unsigned long long)r->g.entries_peak, (unsigned long long)r->g.tree_entries,
        (unsigned long long)r->g.tree_bytes, (unsigned long long)r->g.deferred, (unsigned long long)r->g.failed,
        (unsigned long long)r->g.failed_bytes);
    put(b, " \"odp\": {\"mode\": \"%s\", \"devices\": [", r->odp_mode ? r->odp_mode : "off");
    for (unsigned i = 0; i < r->odp_ndevs; i++)
        put(b, "%s{\"name\": \"%s\", \"general_caps\": %llu, \"rc_odp_caps\": %u, \"uc_odp_caps\": %u, "
               "\"ud_odp_caps\": %u}",
            i ? ", " : "", r->odp_devs[i].name, (unsigned long long)r->odp_devs[i].general, r->odp_devs[i].rc,
            r->odp_devs[i].uc, r->odp_devs[i].ud);
    put(b, "]},\n");
    put(b, " \"sizes\": [");
    int first = 1;
    for (int i = 0; i < MRC_HIST_BUCKETS; i++) {
        if (!r->s.hist[i][MRC_HIST_REQUESTS] && !r->s.hist[i][MRC_HIST_REGS])
            continue;
        put(b, "%s{\"max_bytes\": %llu, \"requests\": %llu, \"hits\": %llu, \"regs\": %llu, \"reg_ns\": %llu, "
               "\"hit_bytes\": %llu, \"reg_bytes\": %llu}",
            first ? "" : ", ", i == MRC_HIST_BUCKETS - 1 ? 0ull : (unsigned long long)(4096ull << i),
            (unsigned long long)r->s.hist[i][MRC_HIST_REQUESTS], (unsigned long long)r->s.hist[i][MRC_HIST_HITS],
            (unsigned long long)r->s.hist[i][MRC_HIST_REGS], (unsigned long long)r->s.hist[i][MRC_HIST_REG_NS],
            (unsigned long long)r->s.hist[i][MRC_HIST_HIT_BYTES], (unsigned long long)r->s.hist[i][MRC_HIST_REG_BYTES]);
        first = 0;
    }
    put(b, "]");   /* mrc_report_ext_write adds the rest and closes the object */
}

int mrc_report_write(int fd, const struct mrc_report *r, int json)
{
    struct buf b;
    b.n = 0;
    if (json)
        write_json(&b, r);
    else
        write_text(&b, r);
    int rc = mrc_write_all(fd, b.d, b.n);
    return rc ? rc : mrc_report_ext_write(fd, r, json);
}

int mrc_report_open(const char *pattern)
{
    if (!strcmp(pattern, "stderr"))
        return 2;
    return mrc_outpath_open(pattern, 0, NULL, 0);
}

int mrc_report_open_exit(const char *pattern)
{
    if (!strcmp(pattern, "stderr"))
        return 2;
    return mrc_outpath_open(pattern, MRC_OUTPATH_NEXT_FREE, NULL, 0);
}
