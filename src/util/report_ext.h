/* report_ext.h - the parts of the statistics dump of unbounded length, written through a
 * buffered writer after report.c's fixed buffer: the launcher rank, MR handles still
 * registered (leaks, at exit) and the call sites. Not from a hook (symbolizes, may allocate). */
#ifndef MRC_REPORT_EXT_H
#define MRC_REPORT_EXT_H

/* JSON: writes `,\n "rank": ..., "leaks": {...},\n "callsites": {...}}\n`, i.e. the
 * fields after "sizes" and the closing brace of the top-level object. Text: the rank,
 * leak and call-site lines. 0 or -errno. */
int mrc_report_ext_write(int fd, int json);

#endif
