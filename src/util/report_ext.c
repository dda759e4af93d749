/* report_ext.c - appends the rank, largest registration, leak and call-site sections to
 * a statistics dump.
 * Invariants: JSON fields are only added (the dump's "version" stays 1); the output is
 * streamed through a small buffer, so the number of call sites is not bounded by it. */
#include <unistd.h>

#include "util/callsite.h"
#include "util/leaks.h"
#include "util/outpath.h"
#include "util/report_ext.h"

int mrc_report_ext_write(int fd, const struct mrc_report *r, int json)
{
    struct mrc_wbuf w;
    mrc_wbuf_init(&w, fd);
    long rank = mrc_outpath_rank();
    if (json) {
        if (rank >= 0)
            mrc_wbuf_printf(&w, ",\n \"rank\": %ld,\n ", rank);
        else
            mrc_wbuf_printf(&w, ",\n \"rank\": null,\n ");
        mrc_report_mrs_write(&w, r, 1);
        mrc_leaks_write(&w, 1);
        mrc_wbuf_printf(&w, ",\n ");
        mrc_callsite_write(&w, 1);
        mrc_wbuf_printf(&w, "}\n");
    } else {
        if (rank >= 0)
            mrc_wbuf_printf(&w, "  rank %ld\n", rank);
        mrc_report_mrs_write(&w, r, 0);
        mrc_leaks_write(&w, 0);
        mrc_callsite_write(&w, 0);
    }
    return mrc_wbuf_flush(&w);
}
