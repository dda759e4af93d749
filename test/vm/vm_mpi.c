/* vm_mpi.c - an Open MPI job as users write them, run by mpirun with 2 ranks over UCX
 * (rc_verbs on rxe): rank 0 sends 1 MiB messages to rank 1 and rank 1 sends them back,
 * from and into buffers that are
 *   reuse        the same buffers every iteration,
 *   free_malloc  freed and malloc'ed again every iteration (glibc's mmap threshold held at
 *                its default, 128 KiB, so each buffer is its own mapping and free unmaps it),
 *   remap        munmapped and mmapped again at the same address (MAP_FIXED_NOREPLACE:
 *                it lands there or fails, and the program checks which),
 * every received byte checked against a pattern distinct per iteration and direction. A
 * registration cache that serves a stale MR makes the NIC read or write the old pages:
 * the bytes received are then not the ones sent. Rank 0 prints one TAP line per pattern
 * with the count of wrong bytes over both ranks.
 *
 * Usage: vm_mpi [-i ITERS] [-s BYTES] [-e PATTERN=OUTCOME,...] NAME
 *   OUTCOME: fresh (no wrong byte; the default) or stale (wrong bytes required: the
 *   control that shows the test can fail).
 * Before the traffic each rank prints (as "# " lines) what munmap and mmap resolve to
 * after MPI_Init, with their first 16 bytes, and where a jump found there leads: a
 * library that patches entry points after libmrcache shows up there. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mrcache.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

enum pattern { P_REUSE, P_FREE_MALLOC, P_REMAP, P_COUNT };
static const char *const pattern_names[P_COUNT] = { "reuse", "free_malloc", "remap" };
enum outcome { O_FRESH, O_STALE, O_COUNT };
static const char *const outcome_names[O_COUNT] = { "fresh", "stale" };

static struct {
    int iters;
    size_t size;
    enum outcome expect[P_COUNT];
    const char *name;
} opt = { 12, 1 << 20, { O_FRESH, O_FRESH, O_FRESH }, NULL };

static int rank;

/* The byte at offset i of the message of (pattern, iteration, direction): consecutive
 * iterations differ in every byte (the low byte steps by an odd amount), so data left
 * over from the previous message never passes for the current one. */
static uint8_t pattern_byte(int p, int it, int dir, size_t i)
{
    uint32_t h = (uint32_t)(i >> 8) * 2654435761u;
    return (uint8_t)((uint8_t)i + (uint8_t)(h >> 24) + (uint8_t)(it * 37 + dir * 101 + p * 59 + 1));
}

static void fill(uint8_t *b, int p, int it, int dir)
{
    for (size_t i = 0; i < opt.size; i++)
        b[i] = pattern_byte(p, it, dir, i);
}

/* What a receive must overwrite: every byte differs from the expected one. */
static void poison(uint8_t *b, int p, int it, int dir)
{
    for (size_t i = 0; i < opt.size; i++)
        b[i] = (uint8_t)~pattern_byte(p, it, dir, i);
}

static uint64_t count_wrong(const uint8_t *b, int p, int it, int dir)
{
    uint64_t n = 0;
    for (size_t i = 0; i < opt.size; i++)
        n += b[i] != pattern_byte(p, it, dir, i);
    return n;
}

/* ------------------------------------------------------------------ entry points */

static void describe(const char *what, const void *addr, char *out, size_t len)
{
    Dl_info di;
    if (addr && dladdr(addr, &di) && di.dli_fname) {
        const char *f = strrchr(di.dli_fname, '/');
        snprintf(out, len, "%s %p = %s+0x%lx in %s", what, addr, di.dli_sname ? di.dli_sname : "?",
                 (unsigned long)((const char *)addr - (const char *)(di.dli_saddr ? di.dli_saddr : di.dli_fbase)),
                 f ? f + 1 : di.dli_fname);
    } else {
        snprintf(out, len, "%s %p (in no loaded object)", what, addr);
    }
}

/* The target of a jump at the start of a function, for the forms patchers write on
 * x86-64: jmp rel32; jmp *rel32(%rip); movabs $imm64,%rax|%r11 + jmp *%rax|*%r11. */
static const void *jump_target(const uint8_t *c)
{
    int32_t rel;
    uint64_t imm;
    if (c[0] == 0xe9) {
        memcpy(&rel, c + 1, 4);
        return c + 5 + rel;
    }
    if (c[0] == 0xff && c[1] == 0x25) {
        const void *slot;
        memcpy(&rel, c + 2, 4);
        memcpy(&slot, c + 6 + rel, sizeof(slot));
        return slot;
    }
    if (c[0] == 0x48 && c[1] == 0xb8 && c[10] == 0xff && c[11] == 0xe0) {
        memcpy(&imm, c + 2, 8);
        return (const void *)(uintptr_t)imm;
    }
    if (c[0] == 0x49 && c[1] == 0xbb && c[10] == 0x41 && c[11] == 0xff && c[12] == 0xe3) {
        memcpy(&imm, c + 2, 8);
        return (const void *)(uintptr_t)imm;
    }
    return NULL;
}

static void show_entry(const char *label, const void *fn)
{
    char d[512], t[512], hex[16 * 3 + 1];
    describe(label, fn, d, sizeof(d));
    if (!fn) {
        printf("# rank %d: %s\n", rank, d);
        return;
    }
    const uint8_t *c = fn;
    for (int i = 0; i < 16; i++)
        snprintf(hex + 3 * i, 4, "%02x ", c[i]);
    hex[47] = 0;
    /* Follow a chain of jumps (a patcher's trampoline in an anonymous page, say) to the
     * first code that is not one, at most 4 deep. */
    size_t n = 0;
    const void *to = jump_target(c);
    t[0] = 0;
    for (int hop = 0; to && hop < 4 && n < sizeof(t); hop++) {
        char one[256];
        describe(hop ? ", then" : "jumps to", to, one, sizeof(one));
        n += (size_t)snprintf(t + n, sizeof(t) - n, "%s", one);
        to = jump_target(to);
    }
    if (!t[0])
        snprintf(t, sizeof(t), "no jump");
    printf("# rank %d: %s: %s: %s\n", rank, d, hex, t);
    fflush(stdout);
}

static void show_entries(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    const char *names[] = { "munmap", "mmap" };
    for (int i = 0; i < 2; i++) {
        char label[64];
        snprintf(label, sizeof(label), "%s (RTLD_DEFAULT)", names[i]);
        show_entry(label, dlsym(RTLD_DEFAULT, names[i]));
        snprintf(label, sizeof(label), "%s (libc.so.6)", names[i]);
        show_entry(label, libc ? dlsym(libc, names[i]) : NULL);
    }
    int m = mrcache_monitors();
    if (m == -ENOSYS)
        printf("# rank %d: libmrcache not loaded\n", rank);
    else
        printf("# rank %d: libmrcache monitors 0x%x%s%s%s%s\n", rank, (unsigned)m,
               m & MRCACHE_MONITOR_PATCH ? " patch" : "", m & MRCACHE_MONITOR_PRELOAD ? " preload" : "",
               m & MRCACHE_MONITOR_MALLOC ? " malloc" : "", m & MRCACHE_MONITOR_UFFD ? " uffd" : "");
    fflush(stdout);
    if (libc)
        dlclose(libc);
}

/* ------------------------------------------------------------------ buffers */

struct bufs {
    uint8_t *b[2];   /* send, receive */
    int moved;       /* iterations where a buffer came back at another address */
    int misplaced;   /* remap: MAP_FIXED_NOREPLACE did not give the address back */
};

static uint8_t *map_at(void *hint, int *misplaced)
{
    void *p = mmap(hint, opt.size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0), -1, 0);
    if (p == MAP_FAILED || (hint && p != hint)) {
        if (hint) {
            fprintf(stderr, "rank %d: mmap at %p: %s\n", rank, hint,
                    p == MAP_FAILED ? strerror(errno) : "landed elsewhere");
            (*misplaced)++;
            if (p != MAP_FAILED)
                return p;
            p = mmap(NULL, opt.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        }
        if (p == MAP_FAILED) {
            perror("mmap");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    return p;
}

static uint8_t *alloc_one(void)
{
    uint8_t *p = malloc(opt.size);
    if (!p) {
        perror("malloc");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static void bufs_init(struct bufs *s, int p)
{
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < 2; k++)
        s->b[k] = p == P_REMAP ? map_at(NULL, &s->misplaced) : alloc_one();
}

/* Before iteration it > 0: give the buffers back and take new ones. */
static void bufs_renew(struct bufs *s, int p)
{
    if (p == P_REUSE)
        return;
    uint8_t *old[2] = { s->b[0], s->b[1] };
    if (p == P_FREE_MALLOC) {
        free(s->b[0]);
        free(s->b[1]);
        /* glibc keeps no cache of mmapped chunks: each free is a munmap, each malloc an
         * mmap, which the kernel places where the last one was (counted in "moved"). */
        s->b[0] = alloc_one();
        s->b[1] = alloc_one();
    } else {
        for (int k = 0; k < 2; k++) {
            if (munmap(s->b[k], opt.size)) {
                perror("munmap");
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            s->b[k] = map_at(old[k], &s->misplaced);
        }
    }
    for (int k = 0; k < 2; k++)
        s->moved += s->b[k] != old[k];
}

static void bufs_done(struct bufs *s, int p)
{
    for (int k = 0; k < 2; k++) {
        if (p == P_REMAP)
            munmap(s->b[k], opt.size);
        else
            free(s->b[k]);
    }
}

/* ------------------------------------------------------------------ traffic */

struct result {
    uint64_t wrong;        /* bytes received that differ from what was sent */
    uint64_t bad_msgs;     /* messages with at least one wrong byte */
    uint64_t first_bad;    /* first iteration with wrong data, +1 (0: none) */
    uint64_t moved, misplaced;
};

static void run_pattern(int p, struct result *r)
{
    struct bufs s;
    int peer = 1 - rank;
    memset(r, 0, sizeof(*r));
    bufs_init(&s, p);
    for (int it = 0; it < opt.iters; it++) {
        if (it)
            bufs_renew(&s, p);
        uint8_t *sb = s.b[0], *rb = s.b[1];
        uint64_t w;
        /* Direction 0: rank 0 -> rank 1; direction 1: back. */
        int dir_in = rank == 0 ? 1 : 0, dir_out = 1 - dir_in;
        poison(rb, p, it, dir_in);
        if (rank == 0) {
            fill(sb, p, it, dir_out);
            MPI_Send(sb, (int)opt.size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            MPI_Recv(rb, (int)opt.size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rb, (int)opt.size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            fill(sb, p, it, dir_out);
            MPI_Send(sb, (int)opt.size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
        }
        w = count_wrong(rb, p, it, dir_in);
        if (w) {
            r->wrong += w;
            r->bad_msgs++;
            if (!r->first_bad)
                r->first_bad = (uint64_t)it + 1;
            fprintf(stderr, "rank %d: %s iteration %d: %llu of %zu bytes wrong at %p\n", rank,
                    pattern_names[p], it, (unsigned long long)w, opt.size, (void *)rb);
        }
    }
    r->moved = (uint64_t)s.moved;
    r->misplaced = (uint64_t)s.misplaced;
    bufs_done(&s, p);
}

static int report(int p, const struct result *all)
{
    const struct result *a = &all[0], *b = &all[1];
    uint64_t wrong = a->wrong + b->wrong, msgs = a->bad_msgs + b->bad_msgs;
    uint64_t total = 2ull * (uint64_t)opt.iters * opt.size;
    uint64_t misplaced = a->misplaced + b->misplaced;
    char line[512];
    snprintf(line, sizeof(line),
             "%s_%s: %llu of %llu bytes received wrong (rank 0 %llu, rank 1 %llu), %llu of %d messages, "
             "%d iterations of %zu bytes",
             opt.name, pattern_names[p], (unsigned long long)wrong, (unsigned long long)total,
             (unsigned long long)a->wrong, (unsigned long long)b->wrong, (unsigned long long)msgs,
             2 * opt.iters, opt.iters, opt.size);
    int failed = 0;
    if (misplaced) {
        /* The remap pattern did not test what it says: never a pass, whatever the data. */
        printf("not ok - %s; mmap did not land at the old address %llu times\n", line,
               (unsigned long long)misplaced);
        failed = 1;
    } else if (opt.expect[p] == O_STALE) {
        if (wrong)
            printf("ok - %s (stale data expected)\n", line);
        else
            printf("not ok - %s; stale data expected, every byte arrived\n", line);
        failed = !wrong;
    } else {
        printf("%s - %s\n", wrong ? "not ok" : "ok", line);
        failed = wrong != 0;
    }
    uint64_t first = a->first_bad && (!b->first_bad || a->first_bad < b->first_bad) ? a->first_bad : b->first_bad;
    char when[32] = "none";
    if (first)
        snprintf(when, sizeof(when), "%llu", (unsigned long long)first - 1);
    printf("# %s_%s: first wrong iteration %s; buffers at a new address: rank 0 %llu, rank 1 %llu of %d\n",
           opt.name, pattern_names[p], when, (unsigned long long)a->moved,
           (unsigned long long)b->moved, p == P_REUSE ? 0 : 2 * (opt.iters - 1));
    fflush(stdout);
    return failed;
}

static int parse_expect(char *arg)
{
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        int p, o;
        if (!eq)
            return -1;
        *eq = 0;
        for (p = 0; p < P_COUNT && strcmp(tok, pattern_names[p]); p++)
            ;
        for (o = 0; o < O_COUNT && strcmp(eq + 1, outcome_names[o]); o++)
            ;
        if (p == P_COUNT || o == O_COUNT)
            return -1;
        opt.expect[p] = (enum outcome)o;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int c, size;
    while ((c = getopt(argc, argv, "i:s:e:")) != -1) {
        switch (c) {
        case 'i': opt.iters = atoi(optarg); break;
        case 's': opt.size = strtoul(optarg, NULL, 0); break;
        case 'e':
            if (parse_expect(optarg)) {
                fprintf(stderr, "vm_mpi: bad -e (PATTERN=fresh|stale,...; patterns reuse, free_malloc, remap)\n");
                return 2;
            }
            break;
        default: return 2;
        }
    }
    if (optind != argc - 1 || opt.iters < 2 || opt.size < 4096 || opt.size > (1u << 30)) {
        fprintf(stderr, "usage: vm_mpi [-i ITERS>=2] [-s BYTES] [-e PATTERN=OUTCOME,...] NAME\n");
        return 2;
    }
    opt.name = argv[optind];
    /* Keep malloc's mmap threshold fixed at its default (a fixed value also stops glibc
     * raising it after the first free of a mapped chunk): every 1 MiB buffer is then a
     * mapping of its own, given back by free and mapped again by the next malloc. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            printf("not ok - %s: needs exactly 2 ranks, got %d\n", opt.name, size);
        MPI_Finalize();
        return 1;
    }
    for (int r = 0; r < 2; r++) {
        if (r == rank)
            show_entries();
        MPI_Barrier(MPI_COMM_WORLD);
    }

    int failed = 0;
    for (int p = 0; p < P_COUNT; p++) {
        struct result mine, all[2];
        double t0 = MPI_Wtime();
        run_pattern(p, &mine);
        double t1 = MPI_Wtime();
        MPI_Gather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            failed |= report(p, all);
            printf("# %s_%s: %.2f s\n", opt.name, pattern_names[p], t1 - t0);
            fflush(stdout);
        }
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failed;
}
