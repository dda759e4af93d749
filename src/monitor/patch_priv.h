/* patch_priv.h - what the patch source's files share: the entry points (patch.c), the
 * state of each watched one, and the self-test's probe. Not for other layers. */
#ifndef MRC_PATCH_PRIV_H
#define MRC_PATCH_PRIV_H

#include <stdint.h>

#include "monitor/unmap.h"

/* sbrk is not patched at start-up (glibc's sbrk calls brk, which is), but once another
 * library patches it, glibc's heap trimming (__sbrk with a negative increment) reaches
 * that library's hook instead of brk: it is watched and chained like the others. */
#define MRC_FN_SBRK MRC_FN_COUNT
#define MRC_PATCH_NFN (MRC_FN_COUNT + 1)

/* Where a target's entry point is found. */
enum mrc_patch_from {
    MRC_PATCH_FROM_LIBC,    /* libc's export of its name */
    MRC_PATCH_FROM_LDSO,    /* ld.so's private copy, by its shape alone */
};

/* The table's patched rows (util/interposed.h), by mrc_fn. */
struct mrc_patch_target {
    const char *name;
    const char *shape;      /* the first bytes, which the jump replaces and more */
    const char *follow;     /* bytes that must start within the first 96, or NULL */
    void *hook;             /* where the jump lands */
    void **real;            /* mrc_real's pointer, redirected to the direct call, or NULL */
    void *sys;              /* the direct call (util/sys.h) */
    enum mrc_patch_from from;
    const char *label;      /* the self-test's name for it */
    const char *lost;       /* what goes unseen once another library's patch takes it */
};

extern const struct mrc_patch_target mrc_patch_targets[MRC_FN_COUNT];

/* The watched entry points (NULL once given up) and their first 8 bytes as we last
 * left them; which mrc_fn bits are patched, and how many. */
extern uint8_t *mrc_patch_entry[MRC_PATCH_NFN];
extern uint64_t mrc_patch_head[MRC_PATCH_NFN];
extern unsigned mrc_patch_mask;
extern int mrc_patch_count;

/* Starts watching entry (its head is taken as ours now). */
void mrc_patch_watch(int fn, uint8_t *entry);

/* Whose code the jump at c leads to (an object's path), for the log. */
const char *mrc_patch_jump_owner(const uint8_t *c);

/* What still watches a function left unpatched. */
const char *mrc_patch_fallback(void);

/* Chains the foreign jump heading entry (now: its first 8 bytes) behind hook: the jump
 * moves into a stub, publish(id, moved) makes the moved copy the end of hook's path, and
 * only then does the entry jump to the stub, which goes on to hook. 0 if the jump cannot
 * be moved (nothing changed: the caller gives up); else 1, with *head the entry's new
 * first 8 bytes, or 0 if they changed again under us or could not be written (the next
 * check decides). name and own (one of libmrcache's exports) are for the log. */
int mrc_patch_chain_jump(uint8_t *entry, uint64_t now, void *hook, void (*publish)(unsigned id, void *moved),
                         unsigned id, const char *name, int own, uint64_t *head);

/* The guarded exports (patch_exports.c), by index below mrc_patch_exports(): whether one
 * lies in [lo, hi), whether its head changed, and chaining (or giving up) one that did;
 * mrc_patch_export_chain leaves one that did not alone. */
unsigned mrc_patch_exports(void);
int mrc_patch_export_touched(unsigned i, uintptr_t lo, uintptr_t hi);
int mrc_patch_export_changed(unsigned i);
void mrc_patch_export_chain(unsigned i);

/* The self-test's probe: between arm and disarm, each patched hook entered with an
 * address in [p, p+len) sets its mrc_fn bit, which disarm returns. */
void mrc_patch_probe_arm(const void *p, size_t len);
unsigned mrc_patch_probe_disarm(void);

#endif
