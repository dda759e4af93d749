/* report_ext.h - the parts of the statistics dump of unbounded length, written through a
 * buffered writer after report.c's fixed buffer: the launcher rank, the largest cached
 * registrations, MR handles still registered (leaks, at exit) and the call sites. Not
 * from a hook (symbolizes, may allocate). */
#ifndef MRC_REPORT_EXT_H
#define MRC_REPORT_EXT_H

#include "util/outpath.h"
#include "util/report.h"

/* JSON: writes `,\n "rank": ..., "largest_mrs": {...}, "leaks": {...},\n "callsites":
 * {...}}\n`, i.e. the fields after "sizes" and the closing brace of the top-level
 * object. Text: the rank, largest registration, leak and call-site lines. 0 or -errno. */
int mrc_report_ext_write(int fd, const struct mrc_report *r, int json);

/* The largest cached registrations of r (none if r->mrs is NULL), as JSON (the
 * "largest_mrs" field and a comma after it) or text lines (report_mrs.c). */
void mrc_report_mrs_write(struct mrc_wbuf *w, const struct mrc_report *r, int json);

#endif
