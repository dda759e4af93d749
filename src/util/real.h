/* real.h - the functions libmrcache interposes, as typed pointers to the next
 * definition (mrc_real.munmap, ...), one for each row of the table (interposed.h) with a
 * next definition, all resolved in real.c.
 * Invariants: libc's are resolved in the constructor, before any hook needs them (a hook
 * entered earlier resolves them itself, once); libibverbs' lazily on first use, because
 * the library may arrive later inside a plugin opened with RTLD_LOCAL. */
#ifndef MRC_REAL_H
#define MRC_REAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/interposed.h"

struct iovec;
struct ibv_pd;
struct ibv_mr;
struct ibv_context;
struct ibv_qp;
struct ibv_qp_ex;

/* A pointer for each row that has a next definition (interposed.h), in the table's order. */
#define MRC_REAL_FIELD_LIBC(decl) decl;
#define MRC_REAL_FIELD_VERBS(decl, version, need) decl;
#define MRC_REAL_FIELD_OWN(decl)
#define MRC_REAL_FIELD_LDSO(decl)
#define MRC_REAL_FIELD(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_REAL_FIELD_, where, ret(*id) params)
#define MRC_REAL_DATA(sym, id, type, version) const type *id;

struct mrc_real_fns {
    MRC_FNS(MRC_REAL_FIELD)
    MRC_DATA(MRC_REAL_DATA)
};

extern struct mrc_real_fns mrc_real;

/* Whether the next allocator is glibc's own (its chunk headers may then be read). */
extern int mrc_real_alloc_is_glibc;

/* Whether fn's code lies in libc.so.6 itself (not in an object that exports the same
 * names). Any thread, any hook: never allocates. */
int mrc_real_in_libc(const void *fn);

/* Resolves the libc functions. Idempotent. */
void mrc_real_resolve_libc(void);
/* Set once they are resolved (a pointer may still be NULL: a function this libc lacks). */
extern int mrc_real_libc_ready;

/* For hooks entered before the constructor: resolves libc's functions unless this
 * thread is resolving them already (dlsym may call back into a hook). Returns 1 when
 * mrc_real's libc pointers are usable, 0 when the hook must fall back on its own. The
 * common case (resolved) inline: every hook asks. */
int mrc_real_ensure_libc_slow(void);
static inline int mrc_real_ensure_libc(void)
{
    return __builtin_expect(__atomic_load_n(&mrc_real_libc_ready, __ATOMIC_ACQUIRE), 1) || mrc_real_ensure_libc_slow();
}

/* Resolves the libibverbs functions if not yet done. 0, or -ENOSYS if libibverbs is
 * not loaded in this process. */
int mrc_real_resolve_verbs(void);
extern int mrc_real_verbs_ready;

/* The same, with the common case (done already) inline: every verbs hook asks. */
static inline int mrc_real_verbs(void)
{
    return __builtin_expect(__atomic_load_n(&mrc_real_verbs_ready, __ATOMIC_ACQUIRE), 1) ? 0
                                                                                       : mrc_real_resolve_verbs();
}

#endif
