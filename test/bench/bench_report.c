/* bench_report.c - turns the "SYSTEM KEY VALUE" lines of run-bench.sh (one per process
 * and figure) into the results table: printed, and written as JSON and markdown.
 * Usage: bench_report RAW JSON MD MACHINE. Invariants: every figure is the median over
 * the alternated processes of one system; every ratio compares systems measured in the
 * same run; a figure that is missing shows as "-" and its goal as not met. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum sys { NOCACHE, MRCACHE, UCX, NSYS };
static const char *const sys_names[NSYS] = { "nocache", "mrcache", "ucx" };

#define MAXKEYS 256
#define MAXVALS 64

struct series {
    char key[32];
    double v[NSYS][MAXVALS];
    int n[NSYS];
};

static struct series ser[MAXKEYS];
static int nser;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    char sys[32], key[32];
    double v;
    while (fscanf(f, "%31s %31s %lf", sys, key, &v) == 3) {
        int s = -1;
        for (int i = 0; i < NSYS; i++)
            if (!strcmp(sys, sys_names[i]))
                s = i;
        if (s < 0)
            continue;
        int k = 0;
        while (k < nser && strcmp(ser[k].key, key))
            k++;
        if (k == nser) {
            if (nser == MAXKEYS)
                continue;
            snprintf(ser[nser++].key, sizeof(ser[0].key), "%s", key);
        }
        if (ser[k].n[s] < MAXVALS)
            ser[k].v[s][ser[k].n[s]++] = v;
    }
    fclose(f);
}

/* Median over processes of one system's figure, or NAN if it never ran. */
static double med(enum sys s, const char *key)
{
    for (int k = 0; k < nser; k++) {
        if (strcmp(ser[k].key, key) || !ser[k].n[s])
            continue;
        int n = ser[k].n[s];
        double v[MAXVALS];
        memcpy(v, ser[k].v[s], sizeof(double) * (size_t)n);
        qsort(v, (size_t)n, sizeof(double), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
    return NAN;
}

struct row {
    char workload[96];
    char cell[NSYS][48];
    double fig[NSYS];     /* the figure behind each cell, for the JSON */
    char unit[16];
    double ratio;
    char ratio_what[32];
    char goal[64];
    int met;              /* 1 met, 0 missed, -1 not judged (the run could not show it) */
};

static struct row rows[64];
static int nrows;

/* A cell: pre, v with prec decimals, then unit ("-" if v is missing). */
static void cell(struct row *r, enum sys s, double v, int prec, const char *pre, const char *unit)
{
    r->fig[s] = v;
    if (isnan(v))
        snprintf(r->cell[s], sizeof(r->cell[s]), "-");
    else
        snprintf(r->cell[s], sizeof(r->cell[s]), "%s%.*f%s", pre, prec, v, unit);
}

static struct row *row_new(const char *workload, const char *unit)
{
    struct row *r = &rows[nrows++];
    memset(r, 0, sizeof(*r));
    snprintf(r->workload, sizeof(r->workload), "%s", workload);
    snprintf(r->unit, sizeof(r->unit), "%s", unit);
    for (int s = 0; s < NSYS; s++)
        cell(r, (enum sys)s, NAN, 0, "", "");
    r->ratio = NAN;
    return r;
}

static void verdict(struct row *r, double ratio, const char *what, int le, double bound, const char *goal)
{
    r->ratio = ratio;
    snprintf(r->ratio_what, sizeof(r->ratio_what), "%s", what);
    snprintf(r->goal, sizeof(r->goal), "%s", goal);
    r->met = !isnan(ratio) && (le ? ratio <= bound : ratio >= bound);
}

/* A figure of row 10: size MiB, warm or cold, under a variant, one metric. */
static double big(unsigned mib, const char *state, const char *variant, const char *metric)
{
    char key[64];
    snprintf(key, sizeof(key), "big%u_%s_%s_%s", mib, state, variant, metric);
    return med(strcmp(variant, "4k") ? MRCACHE : NOCACHE, key);
}

/* Row 10: a large registration, its whole time (first touch + registration) and the
 * registration call; populated memory is judged by the call, cold memory by the whole. */
static void build_big(void)
{
    static const unsigned sizes[] = { 64, 512, 2048 };
    static const struct { const char *state, *variant, *what; } cases[] = {
        { "warm", "default", "populated, libmrcache defaults" },
        { "warm", "advise", "populated, advise" },
        { "warm", "collapse", "populated, collapse" },
        { "cold", "default", "cold, libmrcache defaults" },
        { "cold", "pop2", "cold, populate, 2 threads" },
        { "cold", "pop4", "cold, populate, 4 threads" },
        { "cold", "advise", "cold, advise" },
        { "cold", "advpop", "cold, advise + populate, 2 threads" },
        { "cold", "collapse", "cold, collapse" },
    };
    for (unsigned z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        unsigned mib = sizes[z];
        double fewest = NAN;
        for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            char name[96];
            snprintf(name, sizeof(name), "10. register %u MiB, %s", mib, cases[c].what);
            struct row *r = row_new(name, "ms");
            const char *st = cases[c].state;
            double at = big(mib, st, "4k", "total"), ar = big(mib, st, "4k", "reg");
            double bt = big(mib, st, cases[c].variant, "total"), br = big(mib, st, cases[c].variant, "reg");
            double bp = big(mib, st, cases[c].variant, "pin");
            r->fig[NOCACHE] = at;
            r->fig[MRCACHE] = bt;
            if (!isnan(at))
                snprintf(r->cell[NOCACHE], sizeof(r->cell[NOCACHE]), "%.1f (reg %.1f)", at, ar);
            if (!isnan(bt))
                snprintf(r->cell[MRCACHE], sizeof(r->cell[MRCACHE]), "%.1f (reg %.1f, pin %.1f)", bt, br, bp);
            if (!strcmp(st, "warm"))
                verdict(r, ar / br, "registration, 4k/this", 0, 3.0, ">= 3x faster registration");
            else
                verdict(r, at / bt, "total, 4k/this", 0, 1.5, ">= 1.5x faster in total");
            double e = big(mib, st, cases[c].variant, "ent");
            if (!isnan(e) && (isnan(fewest) || e < fewest))
                fewest = e;
        }
        char name[96];
        snprintf(name, sizeof(name), "10. NIC translation entries, %u MiB (fewest of any variant)", mib);
        struct row *r = row_new(name, "entries");
        cell(r, NOCACHE, big(mib, "cold", "4k", "ent"), 0, "", "");
        cell(r, MRCACHE, fewest, 0, "", "");
        verdict(r, r->fig[NOCACHE] / fewest, "4k/fewest", 0, 100.0, ">= 100x fewer");
    }
}

static void build(void)
{
    static const struct { const char *key, *name; } hits[] = {
        { "hit_1", "1. hit, 64 KiB, 1 entry" },
        { "hit_10k", "1. hit, 64 KiB, 10k entries" },
        { "hit_1m", "1. hit, 64 KiB, 1M entries" },
        { "hit16_1m", "1. hit, 16 buffers in turn, 1M entries" },
        { "hit4k_1m", "1. hit, 4096 buffers in turn, 1M entries" },
    };
    for (unsigned i = 0; i < sizeof(hits) / sizeof(hits[0]); i++) {
        struct row *r = row_new(hits[i].name, "ns/op");
        for (int s = 0; s < NSYS; s++)
            cell(r, (enum sys)s, med((enum sys)s, hits[i].key), 1, "", " ns");
        verdict(r, r->fig[MRCACHE] / r->fig[UCX], "mrcache/ucx", 1, 1.0, "<= 1.00x UCX");
    }

    struct row *r = row_new("2. two threads, private buffers (x 1 thread)", "ns/op");
    double two[NSYS], one[NSYS];
    for (int s = 0; s < NSYS; s++) {
        one[s] = med((enum sys)s, "thr_1t");
        two[s] = med((enum sys)s, "thr_2t");
        r->fig[s] = two[s];
        if (isnan(two[s]))
            snprintf(r->cell[s], sizeof(r->cell[s]), "-");
        else
            snprintf(r->cell[s], sizeof(r->cell[s]), "%.1f ns (%.2fx)", two[s], two[s] / one[s]);
    }
    verdict(r, two[MRCACHE] / one[MRCACHE], "mrcache 2T/1T", 1, 1.2, "<= 1.20x 1 thread");
    /* Threads preempted by other work did not contend all along: no verdict then. */
    double busy = med(MRCACHE, "thr_busy");
    if (!isnan(busy) && busy < 0.9) {
        r->met = -1;
        snprintf(r->goal, sizeof(r->goal), "<= 1.20x 1 thread (threads ran %.0f%%)", busy * 100);
    }

    static const struct { const char *key, *name; } msgs[] = {
        { "msg_1m", "3. register per message, 1 MiB" },
        { "msg_16m", "3. register per message, 16 MiB" },
    };
    for (unsigned i = 0; i < 2; i++) {
        r = row_new(msgs[i].name, "msg/s");
        for (int s = 0; s < NSYS; s++)
            cell(r, (enum sys)s, med((enum sys)s, msgs[i].key), 0, "", " msg/s");
        verdict(r, r->fig[MRCACHE] / r->fig[NOCACHE], "mrcache/nocache", 0, 20.0, ">= 20x no cache");
    }

    r = row_new("4. preload tax, malloc-heavy", "ns/op");
    cell(r, NOCACHE, med(NOCACHE, "tax_malloc"), 2, "", " ns");
    cell(r, MRCACHE, med(MRCACHE, "tax_malloc"), 2, "", " ns");
    verdict(r, r->fig[MRCACHE] / r->fig[NOCACHE], "mrcache/nocache", 1, 1.02, "<= 1.02x no preload");
    r = row_new("4. preload tax, munmap-heavy", "ns/op");
    cell(r, NOCACHE, med(NOCACHE, "tax_munmap"), 0, "", " ns");
    cell(r, MRCACHE, med(MRCACHE, "tax_munmap"), 0, "", " ns");
    verdict(r, r->fig[MRCACHE] / r->fig[NOCACHE], "mrcache/nocache", 1, 1.05, "<= 1.05x no preload");

    r = row_new("5. munmap over 16k entries, hook per entry", "ns/entry");
    for (int s = 0; s < NSYS; s++)
        cell(r, (enum sys)s, med((enum sys)s, "unmap_entry"), 1, "", " ns");
    verdict(r, r->fig[MRCACHE] / r->fig[UCX], "mrcache/ucx", 1, 1.0 / 6,
            "<= UCX/6 (0.2 of UCX's 1.2 us)");

    static const struct { const char *over, *nic, *name; } misses[] = {
        { "miss_over", "miss_nic", "6. miss overhead over the NIC registration" },
        { "miss_sc_over", "miss_sc_nic", "6. miss overhead, buffers out of address order" },
    };
    for (unsigned i = 0; i < 2; i++) {
        r = row_new(misses[i].name, "ns");
        cell(r, MRCACHE, med(MRCACHE, misses[i].over), 0, "", " ns");
        cell(r, UCX, med(UCX, misses[i].over), 0, "", " ns");
        r->fig[NOCACHE] = med(MRCACHE, misses[i].nic);
        snprintf(r->cell[NOCACHE], sizeof(r->cell[NOCACHE]), "(NIC %.0f ns)", r->fig[NOCACHE]);
        verdict(r, r->fig[MRCACHE] / r->fig[UCX], "mrcache/ucx", 1, 1.0, "<= 1.00x UCX");
    }

    r = row_new("7. memory per cached entry (NIC's own per MR subtracted)", "B");
    double nic = med(NOCACHE, "mem_entry");
    cell(r, NOCACHE, nic, 0, "(NIC ", " B)");
    cell(r, MRCACHE, med(MRCACHE, "mem_entry") - nic, 0, "", " B");
    cell(r, UCX, med(UCX, "mem_entry") - nic, 0, "", " B");
    verdict(r, r->fig[MRCACHE], "mrcache bytes", 1, 128, "<= 128 B");

    /* Row 9: libmrcache's column is MRCACHE_EXPAND=8M (keys ending _x), its figure with
     * expansion off beside it. */
    static const struct { const char *key, *name, *unit; double goal; } pieces[] = {
        { "pieces", "9. 4 KiB pieces of 4 MiB buffers, random order", "pieces/s", 10.0 },
        { "fresh", "9. fresh 64 KiB malloc'd buffer per message", "msg/s", 1.0 },
    };
    for (unsigned i = 0; i < 2; i++) {
        char kx[48], kh[48], khx[48], goal[48];
        snprintf(kx, sizeof(kx), "%s_x", pieces[i].key);
        snprintf(kh, sizeof(kh), "%s_hits", pieces[i].key);
        snprintf(khx, sizeof(khx), "%s_hits_x", pieces[i].key);
        r = row_new(pieces[i].name, pieces[i].unit);
        cell(r, NOCACHE, med(NOCACHE, pieces[i].key), 0, "", "");
        cell(r, UCX, med(UCX, pieces[i].key), 0, "", "");
        double on = med(MRCACHE, kx), off = med(MRCACHE, pieces[i].key);
        r->fig[MRCACHE] = on;
        snprintf(r->cell[MRCACHE], sizeof(r->cell[MRCACHE]), "%.0f (off: %.0f)", on, off);
        snprintf(goal, sizeof(goal), ">= %.0fx EXPAND off", pieces[i].goal);
        verdict(r, on / off, "expand on/off", 0, pieces[i].goal, goal);
        struct row *h = row_new("9.   ... registrations served without the NIC", "%");
        cell(h, UCX, med(UCX, kh), 2, "", "%");
        on = med(MRCACHE, khx);
        h->fig[MRCACHE] = on;
        snprintf(h->cell[MRCACHE], sizeof(h->cell[MRCACHE]), "%.2f%% (off: %.2f%%)", on, med(MRCACHE, kh));
        verdict(h, on, "mrcache % hits", 0, 99.0, ">= 99% with EXPAND");
    }
    build_big();
}

/* The end-to-end rows: a program sending from 8 buffers in turn, registering every
 * message, against the same program registering each buffer once. */
static const struct { const char *key, *name; } e2e[] = {
    { "e2e-4", "4 KiB" }, { "e2e-64", "64 KiB" }, { "e2e-1024", "1 MiB" },
    { "e2e-16384", "16 MiB" }, { "e2e-262144", "256 MiB" },
};
#define NE2E (sizeof(e2e) / sizeof(e2e[0]))
#define E2E_GOAL 0.97   /* of registering once, and at least UCX's rcache */

struct e2e_row {
    double rate[NSYS], once, own_once[NSYS], vs_own[NSYS], first[NSYS], pin[NSYS];
    double vs_once, vs_ucx;
    int met;
    char miss[40];   /* which goal was missed, or "" */
};
static struct e2e_row erows[NE2E];

static double med_of(enum sys s, const char *key, const char *suffix)
{
    char k[64];
    snprintf(k, sizeof(k), "%s%s", key, suffix);
    return med(s, k);
}

static void build_e2e(void)
{
    for (unsigned i = 0; i < NE2E; i++) {
        struct e2e_row *r = &erows[i];
        for (int s = 0; s < NSYS; s++) {
            r->rate[s] = med_of((enum sys)s, e2e[i].key, "");
            r->own_once[s] = med_of((enum sys)s, e2e[i].key, "_once");
            r->vs_own[s] = med_of((enum sys)s, e2e[i].key, "_vs_once");
            r->first[s] = med_of((enum sys)s, e2e[i].key, "_first");
            r->pin[s] = med_of((enum sys)s, e2e[i].key, "_pin");
        }
        /* Registering once is the program without any cache: the no-cache processes. The
         * verdict takes each cache against its own process's once-rounds, alternated
         * with its per-message rounds: processes here differ by more than the goal's 3%. */
        r->once = r->own_once[NOCACHE];
        r->vs_once = r->vs_own[MRCACHE];
        r->vs_ucx = r->vs_once / r->vs_own[UCX];
        int once_ok = r->vs_once >= E2E_GOAL, ucx_ok = r->vs_ucx >= 1.0;
        r->met = once_ok && ucx_ok;
        snprintf(r->miss, sizeof(r->miss), "%s", r->met ? "" : !once_ok && !ucx_ok ? " (below both goals)"
                                                          : !once_ok ? " (below 0.97x once)" : " (below UCX)");
    }
}

/* A rate with three significant digits at least: 8.4/s, 127/s, 264066/s. */
static const char *rate_str(char *buf, size_t n, double v)
{
    snprintf(buf, n, v < 100 ? "%.1f/s" : "%.0f/s", v);
    return buf;
}

static void print_e2e(FILE *f, int md)
{
    static const char *const hdr[] = { "message", "(a) no cache", "(b) libmrcache", "(c) UCX rcache",
                                       "registered once", "(b)/once", "(c)/once", "(b)/(c)",
                                       "(b)/once, across processes", "first turn (a), (b), (c)",
                                       "peak pinned (b), (c)" };
    if (md) {
        fprintf(f, "\n### End to end: registering every message against registering once\n\n|");
        for (unsigned h = 0; h < sizeof(hdr) / sizeof(hdr[0]); h++)
            fprintf(f, " %s |", hdr[h]);
        fprintf(f, "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        fprintf(f, "\nend to end (messages per CPU second; 8 buffers in turn):\n");
        fprintf(f, "%-8s %10s %10s %10s %10s %8s %8s %8s %8s %26s %s\n", "message", "no cache", "libmrcache",
                "UCX", "once", "b/once", "c/once", "b/c", "b/once(a)", "first turn a, b, c ms", "pinned b, c");
    }
    for (unsigned i = 0; i < NE2E; i++) {
        const struct e2e_row *r = &erows[i];
        double c = r->vs_own[UCX], across = r->rate[MRCACHE] / r->once;
        char ra[24], rb[24], rc[24], ro[24];
        rate_str(ra, sizeof(ra), r->rate[NOCACHE]);
        rate_str(rb, sizeof(rb), r->rate[MRCACHE]);
        rate_str(rc, sizeof(rc), r->rate[UCX]);
        rate_str(ro, sizeof(ro), r->once);
        if (md)
            fprintf(f, "| %s | %s | %s | %s | %s | %.3fx%s | %.3fx | %.3fx | %.3fx | %.1f, %.1f, %.1f ms | "
                       "%.2fx, %.2fx |\n",
                    e2e[i].name, ra, rb, rc, ro, r->vs_once, r->miss, c, r->vs_ucx, across, r->first[NOCACHE],
                    r->first[MRCACHE], r->first[UCX], r->pin[MRCACHE], r->pin[UCX]);
        else
            fprintf(f, "%-8s %10s %10s %10s %10s %7.3fx %7.3fx %7.3fx %7.3fx %8.1f, %7.1f, %7.1f %5.2fx, %.2fx%s\n",
                    e2e[i].name, ra, rb, rc, ro, r->vs_once, c, r->vs_ucx, across, r->first[NOCACHE],
                    r->first[MRCACHE], r->first[UCX], r->pin[MRCACHE], r->pin[UCX], r->miss);
    }
    if (md)
        fprintf(f, "\nA program sends from 8 malloc'd buffers in turn: it writes the message, the software "
                   "NIC reads all of it from the pinned pages, the ends are checked. (a)-(c) register and "
                   "release every message; \"registered once\" is the same program registering each buffer "
                   "once with the NIC, in the no-cache processes. Every process alternates 9 rounds of each "
                   "way (at least 60 ms and one turn through the buffers each); (b)/once and (c)/once are the "
                   "medians of each per-message round divided by its neighbouring once-round in the same "
                   "process, which the load of a shared machine moves with it; \"across processes\" divides (b) by the no-cache processes' "
                   "once-rounds instead. Rates are messages per CPU second of the whole process (helper "
                   "threads included), medians of the rounds and of the processes. The first turn is the "
                   "CPU time of each system's first 8 messages on fresh memory, registrations included. "
                   "Peak pinned is the NIC's peak pinned bytes over the first turn, as a multiple of the "
                   "bytes the program registers (8 buffers). Goal: (b) >= %.2fx once and >= (c), both "
                   "measured against their own process.\n",
                E2E_GOAL);
}

static void print_table(FILE *f, int md, const char *machine)
{
    static const char *const hdr[] = { "workload", "(a) no cache", "(b) libmrcache", "(c) UCX rcache", "ratio" };
    if (md) {
        fprintf(f, "Machine: %s\n\n", machine);
        fprintf(f, "| %s | %s | %s | %s | %s |\n", hdr[0], hdr[1], hdr[2], hdr[3], hdr[4]);
        fprintf(f, "|---|---:|---:|---:|---:|\n");
    } else {
        fprintf(f, "machine: %s\n", machine);
        fprintf(f, "%-58s %-18s %-18s %-18s %s\n", hdr[0], hdr[1], hdr[2], hdr[3], hdr[4]);
    }
    for (int i = 0; i < nrows; i++) {
        struct row *r = &rows[i];
        char ratio[64];
        if (isnan(r->ratio))
            snprintf(ratio, sizeof(ratio), "-");
        else if (!strcmp(r->ratio_what, "mrcache bytes"))
            snprintf(ratio, sizeof(ratio), "%.0f B", r->ratio);
        else if (!strcmp(r->ratio_what, "mrcache % hits"))
            snprintf(ratio, sizeof(ratio), "%.2f%% hits", r->ratio);
        else
            snprintf(ratio, sizeof(ratio), "%.3fx %s", r->ratio, r->ratio_what);
        if (r->met < 0)   /* the threads did not run together: the ratio says little */
            strncat(ratio, " (machine busy)", sizeof(ratio) - strlen(ratio) - 1);
        if (md)
            fprintf(f, "| %s | %s | %s | %s | %s |\n", r->workload, r->cell[0], r->cell[1], r->cell[2], ratio);
        else
            fprintf(f, "%-58s %-18s %-18s %-18s %s\n", r->workload, r->cell[0], r->cell[1], r->cell[2], ratio);
    }
    /* The statistics' estimate of the time saved, beside what the run without a cache
     * measured: the per-message time it took minus libmrcache's. */
    static const char *const msgs[] = { "msg_1m", "msg_16m" };
    for (int i = 0; i < 2; i++) {
        char k[64];
        snprintf(k, sizeof(k), "%s_saved", msgs[i]);
        double est = med(MRCACHE, k), a = med(NOCACHE, msgs[i]), b = med(MRCACHE, msgs[i]);
        if (isnan(est) || isnan(a) || isnan(b) || a <= 0 || b <= 0)
            continue;
        fprintf(f, "%sRow 3, %s: the statistics estimate %.1f us saved per hit; the run without a cache took "
                   "%.1f us more per message.\n",
                md && i == 0 ? "\n" : "", i ? "16 MiB" : "1 MiB", est / 1e3, (1e9 / a - 1e9 / b) / 1e3);
    }
    if (md)
        fprintf(f, "\nMedians of alternated processes per system; each process reports the median of its "
                   "rounds. Times are the measuring thread's CPU time (kernel time included). (c) is "
                   "UCX's ucs_rcache used as a library over the same software NIC, its hooks off. "
                   "Row 1 (16 buffers) cycles through buffers in turn; with 4096, through more than "
                   "a thread's hints hold (64), 389 buffers apart. Row 2 gives each system's two-thread figure and its ratio to one thread. "
                   "Row 3 models the NIC's cost as 16 us + 0.06 ns/B. Row 5 is the munmap through the "
                   "cache's unmap path minus a raw munmap of as many pinned pages of a second area, "
                   "per entry, the areas' roles and the order swapped in turn; (a), with no hook at "
                   "all, shows the measurement's own error. Row 6 "
                   "is a miss (register + release) minus the NIC's registration alone, same process, "
                   "each batch of 1024 one-page buffers in address order, or in a stride of 389 "
                   "slots (3 MiB apart). "
                   "Row 9 runs libmrcache with MRCACHE_EXPAND=8M, its figure with expansion off in "
                   "brackets, the NIC's cost modelled as in row 3; each piece and each message is "
                   "registered once, on fresh memory (pieces: 8 buffers a round, mapped and written "
                   "first; messages: 64 in flight). "
                   "Row 7 subtracts the NIC's own memory per MR (first column), measured without a "
                   "cache. Rows 5 and 6 compare with UCX measured in the same run; rows 4 and 6 "
                   "run four times the processes of the other rows, row 5 twice as many (each timing "
                   "four times the rounds). A thread "
                   "round counts only if both threads ran (CPU/wall >= 0.9); if most did not, row 2 "
                   "shows every round, marked machine busy. Row 10 times one registration per "
                   "process, on a 2 MiB boundary, in wall time (ms): the program's first touch and the "
                   "registration together, then the registration call (reg) and the NIC's pin alone "
                   "(pin: the call less libmrcache's advice, collapse and fault-in); (a) is the same "
                   "program without a cache, in 4 KiB pages. Populated rows compare the registration "
                   "call, cold rows the whole.\n");
    print_e2e(f, md);
}

static void json_num(FILE *f, double v)
{
    if (isnan(v))
        fprintf(f, "null");
    else
        fprintf(f, "%.4f", v);
}

static void write_json(FILE *f, const char *machine)
{
    fprintf(f, "{\n  \"machine\": \"%s\",\n  \"rows\": [\n", machine);
    for (int i = 0; i < nrows; i++) {
        struct row *r = &rows[i];
        fprintf(f, "    {\"workload\": \"%s\", \"unit\": \"%s\"", r->workload, r->unit);
        for (int s = 0; s < NSYS; s++) {
            fprintf(f, ", \"%s\": ", sys_names[s]);
            json_num(f, r->fig[s]);
        }
        fprintf(f, ", \"ratio\": ");
        json_num(f, r->ratio);
        fprintf(f, ", \"ratio_of\": \"%s\"}%s\n", r->ratio_what, i + 1 < nrows ? "," : "");
    }
    fprintf(f, "  ],\n  \"end_to_end\": [\n");
    for (unsigned i = 0; i < NE2E; i++) {
        const struct e2e_row *r = &erows[i];
        fprintf(f, "    {\"message\": \"%s\", \"unit\": \"msg/s\"", e2e[i].name);
        for (int s = 0; s < NSYS; s++) {
            fprintf(f, ", \"%s\": ", sys_names[s]);
            json_num(f, r->rate[s]);
        }
        fprintf(f, ", \"once\": ");
        json_num(f, r->once);
        fprintf(f, ", \"mrcache_over_once\": ");
        json_num(f, r->vs_once);
        fprintf(f, ", \"mrcache_over_ucx\": ");
        json_num(f, r->vs_ucx);
        fprintf(f, ", \"mrcache_peak_pinned\": ");
        json_num(f, r->pin[MRCACHE]);
        fprintf(f, ", \"ucx_peak_pinned\": ");
        json_num(f, r->pin[UCX]);
        fprintf(f, ", \"met\": %s}%s\n", r->met ? "true" : "false", i + 1 < NE2E ? "," : "");
    }
    fprintf(f, "  ],\n  \"runs\": {\n");
    for (int k = 0; k < nser; k++) {
        fprintf(f, "    \"%s\": {", ser[k].key);
        for (int s = 0; s < NSYS; s++) {
            fprintf(f, "%s\"%s\": [", s ? ", " : "", sys_names[s]);
            for (int j = 0; j < ser[k].n[s]; j++) {
                fprintf(f, j ? ", " : "");
                json_num(f, ser[k].v[s][j]);
            }
            fprintf(f, "]");
        }
        fprintf(f, "}%s\n", k + 1 < nser ? "," : "");
    }
    fprintf(f, "  }\n}\n");
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s RAW JSON MD MACHINE\n", argv[0]);
        return 2;
    }
    load(argv[1]);
    build();
    build_e2e();
    print_table(stdout, 0, argv[4]);
    FILE *j = fopen(argv[2], "w"), *m = fopen(argv[3], "w");
    if (!j || !m) {
        perror("output");
        return 1;
    }
    write_json(j, argv[4]);
    print_table(m, 1, argv[4]);
    fclose(j);
    fclose(m);
    return 0;
}
