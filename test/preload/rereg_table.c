/* rereg_table.c - ibv_rereg_mr over a table of cases (every flag combination, invalid
 * flags and arguments, NULL and dead handles, the old buffer unmapped or replaced): per
 * case one line of what a program and a peer can observe: return value, errno, the MR's
 * addr/length/pd, whether its keys work, which pages a write through it lands in, and
 * the final ibv_dereg_mr. test_rereg_table.sh diffs the lines with and without libmrcache. */
#include <stdio.h>
#include <sys/mman.h>

#include "never.h"

#define LEN (64u << 10)
#define T IBV_REREG_MR_CHANGE_TRANSLATION
#define P IBV_REREG_MR_CHANGE_PD
#define A IBV_REREG_MR_CHANGE_ACCESS
#define LW IBV_ACCESS_LOCAL_WRITE
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

/* What happens to the MR's buffer before the rereg. */
enum pre { NONE, UNMAP, REPLACE, DEAD, SHARED, REREG_FIRST };
/* Symbolic arguments, resolved per case. */
enum where { W_NULL, W_P, W_P_INNER, W_Q, W_HOLE };
enum which_pd { PD_SAME, PD_OTHER, PD_NULL, PD_OTHER_CONTEXT };

struct rcase {
    const char *name;
    enum pre pre;
    unsigned reg_access;    /* the MR's access at registration */
    int flags;
    enum which_pd pd;
    enum where addr;
    size_t len;
    int access;
};

static const struct rcase cases[] = {
    { "no_flags", NONE, LW, 0, PD_SAME, W_NULL, 0, 0 },
    { "unknown_flag", NONE, LW, 8, PD_SAME, W_NULL, 0, 0 },
    { "unknown_flag_with_translation", NONE, LW, T | 8, PD_SAME, W_Q, LEN, 0 },
    { "translation", NONE, LW, T, PD_SAME, W_Q, LEN, 0 },
    { "translation_length_0", NONE, LW, T, PD_SAME, W_Q, 0, 0 },
    { "translation_addr_null", NONE, LW, T, PD_SAME, W_NULL, LEN, 0 },
    { "translation_to_unmapped", NONE, LW, T, PD_SAME, W_HOLE, LEN, 0 },
    { "translation_same_range", NONE, LW, T, PD_SAME, W_P, LEN, 0 },
    { "translation_inner_range", NONE, LW, T, PD_SAME, W_P_INNER, LEN / 2, 0 },
    { "pd", NONE, LW, P, PD_OTHER, W_NULL, 0, 0 },
    { "pd_null", NONE, LW, P, PD_NULL, W_NULL, 0, 0 },
    { "pd_of_other_context", NONE, LW, P, PD_OTHER_CONTEXT, W_NULL, 0, 0 },
    { "access_add_remote", NONE, LW, A, PD_SAME, W_NULL, 0, RW },
    { "access_revoke_remote", NONE, RW, A, PD_SAME, W_NULL, 0, LW },
    { "access_invalid", NONE, LW, A, PD_SAME, W_NULL, 0, IBV_ACCESS_REMOTE_WRITE },
    { "access_zero", NONE, LW, A, PD_SAME, W_NULL, 0, 0 },
    { "access_without_flag", NONE, LW, T, PD_SAME, W_Q, LEN, LW },
    { "translation_pd", NONE, LW, T | P, PD_OTHER, W_Q, LEN, 0 },
    { "translation_access", NONE, LW, T | A, PD_SAME, W_Q, LEN, RW },
    { "pd_access", NONE, LW, P | A, PD_OTHER, W_NULL, 0, RW },
    { "translation_pd_access", NONE, LW, T | P | A, PD_OTHER, W_Q, LEN, RW },
    { "remote_mr_translation", NONE, RW, T, PD_SAME, W_Q, LEN, 0 },
    { "null_mr", NONE, LW, T, PD_SAME, W_Q, LEN, 0 },
    { "dead_handle", DEAD, LW, T, PD_SAME, W_Q, LEN, 0 },
    { "after_unmap_translation", UNMAP, LW, T, PD_SAME, W_Q, LEN, 0 },
    { "after_unmap_access", UNMAP, LW, A, PD_SAME, W_NULL, 0, RW },
    { "after_unmap_pd", UNMAP, LW, P, PD_OTHER, W_NULL, 0, 0 },
    { "after_unmap_translation_pd_access", UNMAP, LW, T | P | A, PD_OTHER, W_Q, LEN, RW },
    { "after_replace_access", REPLACE, LW, A, PD_SAME, W_NULL, 0, RW },
    { "after_replace_pd", REPLACE, LW, P, PD_OTHER, W_NULL, 0, 0 },
    { "after_replace_translation_same_range", REPLACE, LW, T, PD_SAME, W_P, LEN, 0 },
    { "after_replace_translation", REPLACE, LW, T, PD_SAME, W_Q, LEN, 0 },
    { "shared_registration_translation", SHARED, LW, T, PD_SAME, W_Q, LEN, 0 },
    { "shared_registration_access", SHARED, LW, A, PD_SAME, W_NULL, 0, RW },
    { "second_rereg_translation", REREG_FIRST, LW, T, PD_SAME, W_P, LEN, 0 },
    { "second_rereg_access", REREG_FIRST, LW, A, PD_SAME, W_NULL, 0, RW },
};

static struct ibv_pd *pd2, *pd_x;   /* another pd; a pd of another context */
/* The MR's buffer, a target, where the old pages go when p is replaced, and memory no
 * registration can pin (PROT_NONE: reserved, so no later mapping lands there). */
static char *p, *q, *r, *hole;
static int preloaded;

static const char *ret_name(int ret)
{
    switch (ret) {
    case 0: return "0";
    case IBV_REREG_MR_ERR_INPUT: return "ERR_INPUT";
    case IBV_REREG_MR_ERR_DONT_FORK_NEW: return "ERR_DONT_FORK_NEW";
    case IBV_REREG_MR_ERR_DO_FORK_OLD: return "ERR_DO_FORK_OLD";
    case IBV_REREG_MR_ERR_CMD: return "ERR_CMD";
    case IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: return "ERR_CMD_AND_DO_FORK_NEW";
    default: return "other";
    }
}

static const char *err_name(int e)
{
    const char *n = e ? strerrorname_np(e) : "0";
    return n ? n : "other";
}

static const char *addr_name(const void *a)
{
    if (!a) return "NULL";
    if (a == p) return "p";
    if (a == p + 4096) return "p+4K";
    if (a == q) return "q";
    if (a == r) return "r";
    return "other";
}

static const char *pd_name(const struct ibv_pd *x)
{
    return x == pd ? "pd" : x == pd2 ? "pd2" : x == pd_x ? "pd_x" : "other";
}

/* Which of the mapped regions p, q, r show byte v (all of len bytes from the write's
 * offset, or part of them), "none" if none does. */
static void landed(char *out, size_t n, unsigned char v, const char *const *names, char *const *bufs, int nbufs)
{
    out[0] = 0;
    for (int i = 0; i < nbufs; i++) {
        if (!bufs[i])
            continue;
        size_t hits = 0;
        for (size_t k = 0; k < LEN; k++)
            hits += (unsigned char)bufs[i][k] == v;
        if (hits)
            snprintf(out + strlen(out), n - strlen(out), "%s%s%s", out[0] ? "+" : "", names[i],
                     hits == LEN ? "" : hits >= LEN / 2 ? "(half)" : "(part)");
    }
    if (!out[0])
        snprintf(out, n, "none");
}

/* The NIC writing v through lkey over [addr, addr+len): its result, and where it shows. */
static void write_through(char *out, size_t n, uint32_t lkey, const void *addr, size_t len, unsigned char v,
                          int p_mapped)
{
    static const char *const names[] = { "p", "q", "r" };
    char *bufs[] = { p_mapped ? p : NULL, q, r };
    unsigned char *src = malloc(len ? len : 1);
    for (int i = 0; i < 3; i++)
        if (bufs[i])
            memset(bufs[i], 0, LEN);
    memset(src, v, len ? len : 1);
    int rc = nic.local_write(lkey, (uint64_t)(uintptr_t)addr, src, len);
    free(src);
    char where[64];
    landed(where, sizeof(where), v, names, bufs, 3);
    snprintf(out, n, "%s:%s", err_name(rc), where);
}

static int peer_write(uint32_t rkey, const void *addr)
{
    char msg[64];
    memset(msg, 0x3c, sizeof(msg));
    return nic.rdma_write(rkey, (uint64_t)(uintptr_t)addr, msg, sizeof(msg));
}

/* A peer holding the rkey it was given before the rereg: whether it can still write.
 * Only that is compared, not the error: a NIC reports an unknown key and a missing right
 * alike (a remote access error). */
static const char *old_key_verdict(uint32_t rkey, const void *addr)
{
    return peer_write(rkey, addr) == 0 ? "allowed" : "denied";
}

static void run_case(const struct rcase *c)
{
    p = map_anon(NULL, LEN, 0);
    q = map_anon(NULL, LEN, 0);
    r = NULL;
    int p_mapped = 1;
    struct ibv_mr *mr = ibv_reg_mr(pd, p, LEN, c->reg_access), *other = NULL;
    if (!p || !q || !mr) {
        printf("case %s: setup failed\n", c->name);
        return;
    }
    uint32_t old_rkey = mr->rkey, old_lkey = mr->lkey;
    void *old_addr = mr->addr;
    switch (c->pre) {
    case NONE:
        break;
    case UNMAP:
        munmap(p, LEN);
        p_mapped = 0;
        break;
    case REPLACE: {
        /* The old pages move to r, fresh pages take p's place. */
        char *to = map_anon(NULL, LEN, 0);
        r = mremap(p, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, to);
        if (r == MAP_FAILED || map_anon(p, LEN, MAP_FIXED_NOREPLACE) != p) {
            printf("case %s: setup failed (mremap)\n", c->name);
            return;
        }
        break;
    }
    case DEAD:
        ibv_dereg_mr(mr);
        break;
    case SHARED:
        other = ibv_reg_mr(pd, p, LEN, c->reg_access);  /* the cache serves both from one registration */
        break;
    case REREG_FIRST:
        if (ibv_rereg_mr(mr, T, NULL, q, LEN, 0) != 0) {
            printf("case %s: setup failed (first rereg)\n", c->name);
            return;
        }
        break;
    }
    struct ibv_pd *npd = c->pd == PD_OTHER ? pd2 : c->pd == PD_NULL ? NULL : c->pd == PD_OTHER_CONTEXT ? pd_x : pd;
    void *addr = c->addr == W_P ? p : c->addr == W_P_INNER ? p + 4096 : c->addr == W_Q ? q : c->addr == W_HOLE ? hole : NULL;
    struct ibv_mr *target = !strcmp(c->name, "null_mr") ? NULL : mr;
    int ret, e;
    if (c->pre == DEAD && !preloaded) {
        /* A freed MR: libibverbs' behaviour is undefined (rdma-core reads freed memory).
         * The reference line is its contract for invalid input: ERR_INPUT, errno EINVAL. */
        ret = IBV_REREG_MR_ERR_INPUT;
        e = EINVAL;
    } else {
        errno = 0;
        ret = ibv_rereg_mr(target, c->flags, npd, addr, c->len, c->access);
        e = errno;
    }
    printf("case %s: ret=%s errno=%s", c->name, ret_name(ret), err_name(e));
    if (target && c->pre != DEAD) {
        char lw[80];
        write_through(lw, sizeof(lw), mr->lkey, mr->addr, mr->length, 0xa5, p_mapped);
        printf(" addr=%s length=%zu pd=%s keys=%s lkey_write=%s rkey_write=%s old_rkey=%s", addr_name(mr->addr),
               mr->length, pd_name(mr->pd), mr->lkey == old_lkey && mr->rkey == old_rkey ? "same" : "changed", lw,
               err_name(peer_write(mr->rkey, mr->addr)), old_key_verdict(old_rkey, old_addr));
        if (other) {
            char ow[80];
            write_through(ow, sizeof(ow), other->lkey, other->addr, other->length, 0x5a, p_mapped);
            printf(" other_handle_write=%s", ow);
        }
        printf(" dereg=%s", err_name(ibv_dereg_mr(mr)));
    }
    printf("\n");
    fflush(stdout);
    if (other)
        ibv_dereg_mr(other);
    if (p_mapped)
        munmap(p, LEN);
    munmap(q, LEN);
    if (r)
        munmap(r, LEN);
}

int main(void)
{
    preloaded = never_preloaded();
    open_nic();
    never_resolve_injector();   /* the software NIC is needed: its keys are what is compared */
    pd2 = ibv_alloc_pd(ctx);
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *c2 = list ? ibv_open_device(list[0]) : NULL;
    ibv_free_device_list(list);
    pd_x = c2 ? ibv_alloc_pd(c2) : NULL;
    hole = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!pd2 || !pd_x || hole == MAP_FAILED) {
        fprintf(stderr, "setup failed\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
    return 0;
}
