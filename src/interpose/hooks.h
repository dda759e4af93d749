/* hooks.h - what the interposition layer's files share: a second, hidden name for each
 * export the table of interposed functions guards (util/interposed.h), mrc_own_<id>,
 * whose address is our own code whatever the exported name resolves to, for the
 * constructor to hand to the runtime (which PLT slots hold our free, which entry points
 * the patch source must watch). Each hooks_*.c file ends with the aliases of its rows:
 * MRC_OWN_ALL(its group's list). Rows of patch kind ENTRY get mrc_entry_<id> the same way,
 * the targets of libibverbs' rewritten entry points. */
#ifndef MRC_HOOKS_H
#define MRC_HOOKS_H

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "interpose/export.h"
#include "util/interposed.h"

struct ibv_pd;
struct ibv_mr;
struct ibv_context;
struct ibv_qp;
struct ibv_qp_ex;

#define MRC_OWN_DECL_NOGUARD(ret, id, params)
#define MRC_OWN_DECL_GUARD(ret, id, params) ret mrc_own_##id params;
#define MRC_OWN_DECL_CHAIN(ret, id, params, kind) ret mrc_own_##id params;
#define MRC_OWN_DECL(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_OWN_DECL_, guard, ret, id, params)
MRC_FNS(MRC_OWN_DECL)

/* The same for the rows whose libibverbs entry point jumps to our export: mrc_entry_<id>. */
#define MRC_ENTRY_DECL_NOPATCH(ret, id, params)
#define MRC_ENTRY_DECL_SYSCALL(ret, id, params, ...)
#define MRC_ENTRY_DECL_ENTRY(ret, id, params) ret mrc_entry_##id params;
#define MRC_ENTRY_DECL(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_ENTRY_DECL_, patch, ret, id, params)
MRC_FNS(MRC_ENTRY_DECL)

/* The aliases of one group's rows (MRC_FNS_MEM, ...), after the exports they name. */
#define MRC_OWN_DEF_NOGUARD(sym, id)
#define MRC_OWN_DEF_GUARD(sym, id) MRC_OWN(sym, mrc_own_##id);
#define MRC_OWN_DEF_CHAIN(sym, id, kind) MRC_OWN(sym, mrc_own_##id);
#define MRC_OWN_DEF(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_OWN_DEF_, guard, sym, id)
#define MRC_ENTRY_DEF_NOPATCH(sym, id)
#define MRC_ENTRY_DEF_SYSCALL(sym, id, ...)
#define MRC_ENTRY_DEF_ENTRY(sym, id) MRC_OWN(sym, mrc_entry_##id);
#define MRC_ENTRY_DEF(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_ENTRY_DEF_, patch, sym, id)
#define MRC_OWN_ALL(group) group(MRC_OWN_DEF) group(MRC_ENTRY_DEF)

#endif
