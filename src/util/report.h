/* report.h - the statistics dump: counters, gauges and the size histogram as text or
 * versioned JSON, written with write(2) from a stack buffer (no malloc, no stdio). */
#ifndef MRC_REPORT_H
#define MRC_REPORT_H

#include "util/stats.h"

#define MRC_REPORT_JSON_VERSION 1

/* One of the largest cached registrations, as the dump lists them (for `rdma res show
 * mr`: its mrlen and lkey tell the lines apart). */
struct mrc_report_mr {
    uint64_t addr, len;
    uint64_t idle_ms;             /* since its last release; MRC_REPORT_IDLE_UNKNOWN if not measured */
    uint32_t lkey, rkey, access;
    uint32_t users;               /* handles holding it; 0: idle */
};
#define MRC_REPORT_IDLE_UNKNOWN UINT64_MAX
/* A device's on-demand paging capabilities (struct ibv_odp_caps). */
struct mrc_report_odp_dev {
    char name[64];
    uint64_t general;             /* IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_IMPLICIT */
    uint32_t rc, uc, ud;          /* IBV_ODP_SUPPORT_SEND, RECV, WRITE, ... per transport */
};

#define MRC_REPORT_ODP_DEVS 8

struct mrc_report {
    struct mrc_stats_block s;
    struct mrc_gauges g;
    uint64_t wall_ns;             /* since start-up */
    const char *monitor;          /* which unmap sources are active */
    /* The largest cached registrations, largest first (nmrs of them; mrs NULL: none
     * asked for), and the precision of their idle times (0: not measured). */
    const struct mrc_report_mr *mrs;
    unsigned nmrs;
    uint64_t idle_precision_ms;
    const char *odp_mode;         /* MRCACHE_ODP */
    unsigned odp_ndevs;           /* devices asked so far */
    struct mrc_report_odp_dev odp_devs[MRC_REPORT_ODP_DEVS];
};

/* The cost of a registration as measured here, modelled as fixed + per_byte * bytes: a
 * least-squares fit (neither part negative) to the registrations made, each size bucket's
 * mean weighted by its count, the process's first registration (which pays one-time
 * set-up) left out unless it is the only one. */
void mrc_report_reg_model(const struct mrc_report *r, double *fixed_ns, double *ns_per_byte);

/* Estimated time the hits saved: for each hit, a registration of the size it requested
 * (the model above, not the larger registration that served it) and, at its release, a
 * deregistration (the mean measured). */
uint64_t mrc_report_saved_ns(const struct mrc_report *r);

/* Writes the report to fd as text or JSON. 0 or -errno. */
int mrc_report_write(int fd, const struct mrc_report *r, int json);

/* Opens the stats destination: "stderr" gives 2; a path pattern (%p pid, %h host,
 * %r rank, %% %: util/outpath.h) is created without following a symlink and without
 * clobbering any existing file (-EEXIST). Returns the fd (the caller closes it unless it
 * is 2) or -errno. */
int mrc_report_open(const char *pattern);

/* The same for the exit dump: a taken name moves on to name.1, name.2, ... (with a
 * warning) rather than losing the report. */
int mrc_report_open_exit(const char *pattern);

#endif
