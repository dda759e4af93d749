/* stats_shim.c - exports the statistics modules (call sites, leaks, output paths, dump
 * signal), which are hidden in libmrcache.so, from a small test library, so that a test
 * program calls them from its own object: as libmrcache's leading frames are skipped,
 * the test's functions are the captured call sites. Nothing here has logic. */
#include "util/callsite.h"
#include "util/dumpsig.h"
#include "util/leaks.h"
#include "util/outpath.h"
#include "util/report_ext.h"

#define SHIM __attribute__((visibility("default")))

SHIM void shim_callsite_init(uint64_t n, uint64_t k);
SHIM void *shim_count(uint64_t len, int hit);
SHIM int shim_capture(uint64_t *ips, int max);
SHIM void shim_create(struct mrc_leak_tag *t, uint64_t len, void *site, int hit);
SHIM void shim_release(struct mrc_leak_tag *t);
SHIM void shim_leaks_sum(struct mrc_leaks_summary *s);
SHIM int shim_ext_write(int fd, int json);
SHIM long shim_rank(void);
SHIM int shim_expand(const char *pattern, char *out, size_t size);
SHIM int shim_open(const char *pattern, unsigned flags, char *used, size_t size);
SHIM int shim_sig_parse(const char *s);
SHIM int shim_sig_install(int signo, void (*dump)(void));
SHIM void shim_sig_poll(void);
SHIM void shim_child_reset(void);

void shim_callsite_init(uint64_t n, uint64_t k) { mrc_callsite_init(n, k); }
void *shim_count(uint64_t len, int hit) { return mrc_callsite_top ? mrc_callsite_sample(len, hit) : NULL; }
int shim_capture(uint64_t *ips, int max) { return mrc_callsite_capture(ips, max); }
void shim_create(struct mrc_leak_tag *t, uint64_t len, void *site, int hit) { mrc_leaks_on_create(t, len, site, hit); }
void shim_release(struct mrc_leak_tag *t) { mrc_leaks_on_release(t); }
void shim_leaks_sum(struct mrc_leaks_summary *s) { mrc_leaks_sum(s); }
int shim_ext_write(int fd, int json)
{
    static const struct mrc_report none;   /* no cache here: no registrations to list */
    return mrc_report_ext_write(fd, &none, json);
}
long shim_rank(void) { return mrc_outpath_rank(); }
int shim_expand(const char *pattern, char *out, size_t size) { return mrc_outpath_expand(pattern, out, size); }
int shim_open(const char *pattern, unsigned flags, char *used, size_t size) { return mrc_outpath_open(pattern, flags, used, size); }
int shim_sig_parse(const char *s) { return mrc_dumpsig_parse(s); }
int shim_sig_install(int signo, void (*dump)(void)) { return mrc_dumpsig_install(signo, dump); }
void shim_sig_poll(void) { mrc_dumpsig_poll(); }
void shim_child_reset(void) { mrc_callsite_child_reset(); mrc_stats_child_reset(); }
