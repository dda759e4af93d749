/* ucm_watch.h - UCX's own view of unmaps, for the tests that load UCX beside libmrcache:
 * its VM_UNMAPPED event must keep firing (a fix must chain UCX's hook, not take it away).
 * ucm_set_event_handler (ucm/api/ucm.h) is looked up in the loaded libucm, not linked. */
#ifndef MRC_UCM_WATCH_H
#define MRC_UCM_WATCH_H

#include <dlfcn.h>
#include <stdint.h>

#include "check.h"

#define UCM_EVENT_VM_UNMAPPED (1 << 17)
struct ucm_vm_event {   /* ucm_event_t's vm_unmapped member, at the union's start */
    void *address;
    size_t size;
};
static volatile uintptr_t ucx_watch;   /* the address whose unmap UCX must report */
static volatile int ucx_saw;
static int ucx_on;                     /* ucx_check asserts only while set */

static inline void ucx_unmapped(int type, void *event, void *arg)
{
    const struct ucm_vm_event *e = event;
    (void)arg;
    uintptr_t a = (uintptr_t)e->address;
    if (type == UCM_EVENT_VM_UNMAPPED && ucx_watch >= a && ucx_watch < a + e->size)
        ucx_saw = 1;
}

static inline void ucx_expect(const void *p)
{
    ucx_saw = 0;
    ucx_watch = (uintptr_t)p;
}

static inline void ucx_check(const char *what)
{
    if (ucx_on)
        CHECKF(ucx_saw, "%s: UCX's VM_UNMAPPED callback did not fire", what);
    ucx_watch = 0;
}

/* Installs ucx_unmapped in the loaded libucm (CHECKs that it is there and accepted):
 * ucm_set_event_handler's status, -1 if it was not found. */
static inline int ucx_watch_unmaps(void)
{
    void *ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD);
    int (*set)(int, int, void (*)(int, void *, void *), void *) =
        ucm ? (int (*)(int, int, void (*)(int, void *, void *), void *))dlsym(ucm, "ucm_set_event_handler") : NULL;
    CHECK(set != NULL);
    int st = set ? set(UCM_EVENT_VM_UNMAPPED, 0, ucx_unmapped, NULL) : -1;
    CHECKF(st == 0, "ucm_set_event_handler(VM_UNMAPPED) returned %d", st);
    return st;
}

#endif
