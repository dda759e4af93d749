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
 * code, whatever the exported name resolves to. GCC wants the attributes glibc declares
 * (nothrow, leaf, malloc) repeated on an alias; clang has no copy attribute and does not
 * ask. */
#if defined(__has_attribute) && __has_attribute(copy)
#define MRC_ALIAS_OF(name) alias(#name), copy(name)
#else
#define MRC_ALIAS_OF(name) alias(#name)
#endif
#define MRC_OWN(name, own) extern __typeof__(name) own __attribute__((MRC_ALIAS_OF(name), visibility("hidden")))
#endif
