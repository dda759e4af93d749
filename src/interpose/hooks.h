/* hooks.h - what the interposition layer's files share: libmrcache's own exported free,
 * for the constructor to tell the runtime which PLT slots hold it. */
#ifndef MRC_HOOKS_H
#define MRC_HOOKS_H

/* libmrcache's own free (hooks_malloc.c), whatever the name free resolves to. */
void mrc_hooks_free(void *p);

#endif
