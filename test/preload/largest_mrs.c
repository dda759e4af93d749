/* largest_mrs.c - a verbs program for the dump's list of the largest cached
 * registrations: registers 64 KiB, 1 MiB (held), 4 KiB and 256 KiB (remote write),
 * releases all but the 1 MiB one, prints "mr LENGTH LKEY RKEY HELD" for each (what
 * `rdma res show mr` would show of them), waits LM_WAIT_MS and writes the dump to the
 * files argv[1] (JSON) and argv[2] (text) through the public header. Exit 0 unless a
 * call fails. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"

static int dump_to(const char *path, unsigned flags)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = fd >= 0 ? mrcache_stats_dump(fd, flags) : -1;
    if (fd >= 0)
        close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    open_nic();
    static const size_t len[] = { 64 << 10, 1 << 20, 4 << 10, 256 << 10 };
    struct ibv_mr *held = NULL;
    int failed = 0;
    for (int i = 0; i < 4; i++) {
        char *p = map_anon(NULL, len[i], 0);
        int access = IBV_ACCESS_LOCAL_WRITE | (i == 3 ? IBV_ACCESS_REMOTE_WRITE : 0);
        struct ibv_mr *mr = p ? ibv_reg_mr(pd, p, len[i], access) : NULL;
        if (!mr)
            return 1;
        printf("mr %zu %u %u %d\n", len[i], mr->lkey, mr->rkey, i == 1);
        if (i == 1)
            held = mr;
        else
            failed |= ibv_dereg_mr(mr) != 0;
    }
    fflush(stdout);
    const char *wait = getenv("LM_WAIT_MS");
    long ms = wait ? atol(wait) : 0;
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000 };
    nanosleep(&t, NULL);
    failed |= dump_to(argv[1], MRCACHE_DUMP_JSON) != 0;
    failed |= dump_to(argv[2], MRCACHE_DUMP_TEXT) != 0;
    failed |= ibv_dereg_mr(held) != 0;
    return failed;
}
