/* mrc_demo.c - the demo: an ordinary verbs program that registers every message it
 * sends, as many do (register, let the NIC read it, deregister). It knows nothing of
 * libmrcache; scripts/demo.sh runs it without and with the preload. On the software NIC
 * the "send" is the NIC reading the pinned pages, checked against what was written. */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*nic_read_fn)(uint32_t lkey, uint64_t addr, void *dst, size_t len);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 1u << 20;
    long count = argc > 2 ? atol(argv[2]) : 2000;
    int nbuf = 8;
    if (size == 0 || count <= 0) {
        fprintf(stderr, "usage: %s [message bytes] [messages]\n", argv[0]);
        return 2;
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        fprintf(stderr, "mrc_demo: no RDMA device\n");
        return 2;
    }
    struct ibv_context *ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) {
        fprintf(stderr, "mrc_demo: cannot open %s\n", ibv_get_device_name(list[0]));
        return 1;
    }
    /* The software NIC can show the data path; a real one is used for registration. */
    nic_read_fn nic_read = (nic_read_fn)dlsym(RTLD_DEFAULT, "snic_local_read");
    char *buf[8];
    for (int i = 0; i < nbuf; i++)
        buf[i] = malloc(size);
    char *check = malloc(size);
    long bad = 0;
    double t0 = now();
    for (long m = 0; m < count; m++) {
        char *b = buf[m % nbuf];
        memset(b, (int)(m & 0xff), size);
        struct ibv_mr *mr = ibv_reg_mr(pd, b, size, IBV_ACCESS_LOCAL_WRITE);
        if (!mr) {
            perror("ibv_reg_mr");
            return 1;
        }
        if (nic_read) {
            check[0] = check[size - 1] = (char)~m;
            bad += nic_read(mr->lkey, (uintptr_t)b, check, size) != 0 || check[0] != (char)(m & 0xff) ||
                   check[size - 1] != (char)(m & 0xff);
        }
        ibv_dereg_mr(mr);
    }
    double dt = now() - t0;
    printf("mrc_demo: %s, %ld messages of %zu bytes: %.0f messages/s, %.1f MB/s%s\n",
           ibv_get_device_name(list[0]), count, size, (double)count / dt, (double)count * (double)size / dt / 1e6,
           bad ? " -- DATA ERRORS" : (nic_read ? ", data verified" : ""));
    for (int i = 0; i < nbuf; i++)
        free(buf[i]);
    free(check);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return bad ? 1 : 0;
}
