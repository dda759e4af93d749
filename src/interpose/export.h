/* export.h - marks the interposed symbols and the public API's mrcache_* (api.c): the
 * only ones libmrcache exports (everything else is hidden by -fvisibility=hidden).
 * No version script: an unversioned definition satisfies every versioned reference
 * (malloc@GLIBC_2.2.5, ibv_reg_mr@IBVERBS_1.1). */
#ifndef MRC_EXPORT_H
#define MRC_EXPORT_H
#define MRC_EXPORT __attribute__((visibility("default")))
#endif
