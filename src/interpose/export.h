/* export.h - marks the interposed symbols and the public API's mrcache_* (api.c): the
 * only ones libmrcache exports (everything else is hidden by -fvisibility=hidden).
 * No version script: an unversioned definition satisfies every versioned reference
 * (malloc@GLIBC_2.2.5, ibv_reg_mr@IBVERBS_1.1). */
#ifndef MRC_EXPORT_H
#define MRC_EXPORT_H
/* Aligned to 16: another library may overwrite an export's first bytes, and the patch
 * source puts its jump back with one aligned 8-byte store. */
#define MRC_EXPORT __attribute__((visibility("default"), aligned(16)))

/* A hidden second name for an export defined in the same file: its address is our own
 * code, whatever the exported name resolves to. */
#define MRC_OWN(name, own) \
    extern __typeof__(name) own __attribute__((alias(#name), copy(name), visibility("hidden")))
#endif
