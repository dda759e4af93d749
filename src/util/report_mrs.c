/* report_mrs.c - the dump's list of the largest cached registrations: address, length,
 * lkey, rkey, access, users and idle time, so that the lines of `rdma res show mr` (pid,
 * mrlen, lkey) can be told in use or idle. Invariants: JSON fields are only added; an
 * idle time that was not measured is null (text: "-"), never a guess. */
#include <stdio.h>

#include "util/report_ext.h"

void mrc_report_mrs_write(struct mrc_wbuf *w, const struct mrc_report *r, int json)
{
    unsigned n = r->mrs ? r->nmrs : 0;
    if (json) {
        mrc_wbuf_printf(w, "\"largest_mrs\": {\"idle_precision_ms\": ");
        if (r->idle_precision_ms)
            mrc_wbuf_printf(w, "%llu", (unsigned long long)r->idle_precision_ms);
        else
            mrc_wbuf_printf(w, "null");
        mrc_wbuf_printf(w, ", \"mrs\": [");
        for (unsigned i = 0; i < n; i++) {
            const struct mrc_report_mr *m = &r->mrs[i];
            mrc_wbuf_printf(w, "%s\n  {\"addr\": %llu, \"length\": %llu, \"lkey\": %u, \"rkey\": %u, \"access\": %u, "
                               "\"users\": %u, \"idle_ms\": ",
                            i ? "," : "", (unsigned long long)m->addr, (unsigned long long)m->len, m->lkey, m->rkey,
                            m->access, m->users);
            if (m->idle_ms == MRC_REPORT_IDLE_UNKNOWN)
                mrc_wbuf_printf(w, "null}");
            else
                mrc_wbuf_printf(w, "%llu}", (unsigned long long)m->idle_ms);
        }
        mrc_wbuf_printf(w, "]},\n ");
        return;
    }
    if (!n)
        return;
    if (r->idle_precision_ms)
        mrc_wbuf_printf(w, "  largest cached registrations (idle times to within %.1f s):\n",
                        (double)r->idle_precision_ms / 1e3);
    else
        mrc_wbuf_printf(w, "  largest cached registrations (idle times not measured: MRCACHE_IDLE_TIMEOUT=0):\n");
    mrc_wbuf_printf(w, "    %-18s %12s %10s %10s %6s %5s %9s\n", "address", "length", "lkey", "rkey", "access", "users",
                    "idle");
    for (unsigned i = 0; i < n; i++) {
        const struct mrc_report_mr *m = &r->mrs[i];
        char idle[24] = "-";
        if (m->idle_ms != MRC_REPORT_IDLE_UNKNOWN)
            snprintf(idle, sizeof(idle), "%.1f s", (double)m->idle_ms / 1e3);
        mrc_wbuf_printf(w, "    %#-18llx %12llu %#10x %#10x %#6x %5u %9s\n", (unsigned long long)m->addr,
                        (unsigned long long)m->len, m->lkey, m->rkey, m->access, m->users, idle);
    }
}
