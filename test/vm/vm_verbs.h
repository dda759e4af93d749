/* vm_verbs.h - small helpers shared by the VM test programs (vm_stale_mr.c, vm_regcost.c):
 * open a verbs device by name, read a monotonic clock, compare for qsort. Header-only,
 * static functions, no state; a failure prints why on stderr and returns NULL. */
#ifndef MRC_TEST_VM_VERBS_H
#define MRC_TEST_VM_VERBS_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Opens the device called name (e.g. "rxe0"); NULL if it is absent or cannot be opened. */
static inline struct ibv_context *vm_open_device(const char *name)
{
    struct ibv_device **list;
    struct ibv_context *ctx = NULL;
    int i, n = 0;

    list = ibv_get_device_list(&n);
    if (!list) {
        perror("ibv_get_device_list");
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
            ctx = ibv_open_device(list[i]);
            if (!ctx)
                perror("ibv_open_device");
            break;
        }
    }
    if (i == n)
        fprintf(stderr, "device %s not found (%d devices)\n", name, n);
    ibv_free_device_list(list);
    return ctx;
}

static inline uint64_t vm_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int vm_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

#endif
