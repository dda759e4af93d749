/* callsite.c - call stacks of registrations: capture (libunwind, dlopen'ed at the first
 * capture: programs that never ask pay nothing), a uthash table, ELF symbolization at dump.
 * Invariants: the table, its buckets and nodes live in mmap'ed memory (never malloc: its
 * lock is a leaf, no allocator hook runs under it); nodes are never freed, so a handle's
 * site pointer stays valid for the life of the process. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "util/pool.h"
#include "util/callsite.h"
#include "util/log.h"
#include "util/outpath.h"
#include "util/sys.h"

/* uthash's memory: whole pages by raw syscall, so neither our hooks nor the program's
 * allocator ever see the table; out of memory is survivable (the stack counts as other). */
static void *table_alloc(size_t sz);
static void table_free(void *p, size_t sz);
static int table_oom;
#define uthash_malloc(sz) table_alloc(sz)
#define uthash_free(ptr, sz) table_free(ptr, sz)
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (table_oom = 1)
#include <uthash.h>

struct mrc_callsite {
    void *pool_link;                  /* the pool's word while free (never, in practice) */
    uint64_t ip[MRC_CALLSITE_DEPTH];  /* the key: return addresses, zero-padded */
    /* Under the table lock: */
    uint64_t misses, miss_bytes, hits, hit_bytes;
    /* Any thread, atomically: handles attributed here and still registered. */
    uint64_t live_miss, live_miss_bytes, live_hit, live_hit_bytes;
    UT_hash_handle hh;
};

unsigned mrc_callsite_top;
static unsigned sample_k = MRC_CALLSITE_DEFAULT_SAMPLE;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrc_callsite *table;
static struct mrc_callsite other;     /* stacks past MRC_CALLSITE_MAX_STACKS, or no memory */
static struct mrc_pool nodes;
static unsigned nstacks;

static __thread int64_t tls_countdown;   /* hits until the next sampled one */
static __thread uint64_t tls_rng;

static void *table_alloc(size_t sz)
{
    size_t len = (sz + sizeof(size_t) + 4095) & ~(size_t)4095;
    char *p = mrc_raw_map(len, 0);
    if (!p)
        return NULL;
    *(size_t *)p = len;
    return p + 16;   /* keeps uthash's 16-byte alignment expectations */
}

static void table_free(void *ptr, size_t sz)
{
    (void)sz;
    if (!ptr)
        return;
    char *base = (char *)ptr - 16;
    mrc_raw_unmap(base, *(size_t *)base);
}

void mrc_callsite_init(uint64_t n, uint64_t k)
{
    static int nodes_ready;   /* a second init (tests) changes n and k, keeps the stacks */
    if (!nodes_ready) {
        mrc_pool_init(&nodes, sizeof(struct mrc_callsite), 1);
        nodes_ready = 1;
    }
    sample_k = k == 0 ? MRC_CALLSITE_DEFAULT_SAMPLE : (k > (1u << 20) ? 1u << 20 : (unsigned)k);
    __atomic_store_n(&mrc_callsite_top, n > MRC_CALLSITE_MAX_TOP ? MRC_CALLSITE_MAX_TOP : (unsigned)n,
                     __ATOMIC_RELEASE);
}

unsigned mrc_callsite_sample_period(void)
{
    return sample_k;
}

/* ---- capture ---------------------------------------------------------------------- */

typedef int (*backtrace_fn)(void **buf, int size);
static backtrace_fn bt;
static int bt_unw;           /* bt is libunwind's (set once, in bt_load) */
static const char *bt_name = "none";
static pthread_once_t bt_once = PTHREAD_ONCE_INIT;

/* Executable segments whose leading frames are not the program's: libmrcache itself,
 * the unwinder, and libibverbs (whose ibv_reg_mr may call our ibv_reg_mr_iova2). */
#define MAX_SKIP 16
static struct { uintptr_t lo, hi; } skip[MAX_SKIP];
static int nskip;

static int skip_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t self = (uintptr_t)arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && self >= lo && self < lo + ph->p_memsz)
            mine = 1;
    }
    if (!mine && !strstr(name, "libibverbs.so") && !strstr(name, "libunwind"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum && nskip < MAX_SKIP; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            skip[nskip].lo = info->dlpi_addr + ph->p_vaddr;
            skip[nskip].hi = skip[nskip].lo + ph->p_memsz;
            nskip++;
        }
    }
    return 0;
}

static void bt_load(void)
{
    /* By soname: the unversioned libunwind.so may be LLVM's, a different library. Local,
     * so that its backtrace and _Unwind_* never interpose on anyone's. */
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h)
        bt = (backtrace_fn)dlsym(h, "unw_backtrace");
    if (bt) {
        bt_name = "libunwind";
        __atomic_store_n(&bt_unw, 1, __ATOMIC_RELEASE);
    } else {
        MRC_INFO("MRCACHE_CALLSITES: libunwind.so.8 not found (%s); using glibc's backtrace", dlerror());
        bt = backtrace;
        bt_name = "glibc";
    }
    dl_iterate_phdr(skip_cb, (void *)(uintptr_t)&bt_load);
}

static int in_skip(uintptr_t ip)
{
    for (int i = 0; i < nskip; i++)
        if (ip >= skip[i].lo && ip < skip[i].hi)
            return 1;
    return 0;
}

int mrc_callsite_capture(uint64_t *ips, int max)
{
    pthread_once(&bt_once, bt_load);
    void *raw[MRC_CALLSITE_DEPTH + 24];
    int n = bt(raw, (int)(sizeof(raw) / sizeof(raw[0])));
    int i = 0, d = 0;
    while (i < n && in_skip((uintptr_t)raw[i]))
        i++;
    for (; i < n && d < max; i++)
        ips[d++] = (uint64_t)(uintptr_t)raw[i];
    return d;
}

int mrc_callsite_capture_any(uint64_t *ips, int max)
{
    if (!__atomic_load_n(&mrc_callsite_top, __ATOMIC_RELAXED) || !__atomic_load_n(&bt_unw, __ATOMIC_ACQUIRE))
        return 0;
    return mrc_callsite_capture(ips, max);
}

/* The next sampled hit: uniform in [1, 2K-1], mean K; random, so that a program whose
 * registrations alternate between sites in step with K cannot hide one of them. */
static int64_t next_interval(void)
{
    if (sample_k <= 1)
        return 1;
    uint64_t x = tls_rng;
    if (!x) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        x = ((uint64_t)(uintptr_t)&tls_rng * 0x9e3779b97f4a7c15ull) ^ (uint64_t)t.tv_nsec ^ 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    tls_rng = x;
    return 1 + (int64_t)(x % (2u * sample_k - 1));
}

struct mrc_callsite *mrc_callsite_sample(uint64_t len, int hit)
{
    if (hit) {
        if (--tls_countdown > 0)
            return NULL;
        tls_countdown = next_interval();
    }
    uint64_t key[MRC_CALLSITE_DEPTH];
    memset(key, 0, sizeof(key));
    mrc_callsite_capture(key, MRC_CALLSITE_DEPTH);

    pthread_mutex_lock(&table_lock);
    struct mrc_callsite *s;
    HASH_FIND(hh, table, key, sizeof(key), s);
    if (!s) {
        s = nstacks < MRC_CALLSITE_MAX_STACKS ? mrc_pool_get(&nodes) : NULL;
        if (s) {
            memcpy(s->ip, key, sizeof(key));
            table_oom = 0;
            HASH_ADD(hh, table, ip, sizeof(key), s);
            if (table_oom) {
                mrc_pool_put(&nodes, s);
                s = NULL;
            } else {
                nstacks++;
            }
        }
        if (!s)
            s = &other;
    }
    if (hit) {
        s->hits++;
        s->hit_bytes += len;
    } else {
        s->misses++;
        s->miss_bytes += len;
    }
    pthread_mutex_unlock(&table_lock);
    return s;
}

void mrc_callsite_live_add(struct mrc_callsite *s, uint64_t len, int from_hit, int dir)
{
    uint64_t n = dir > 0 ? 1 : (uint64_t)-1, b = dir > 0 ? len : (uint64_t)0 - len;
    if (from_hit) {
        __atomic_fetch_add(&s->live_hit, n, __ATOMIC_RELAXED);
        __atomic_fetch_add(&s->live_hit_bytes, b, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_add(&s->live_miss, n, __ATOMIC_RELAXED);
        __atomic_fetch_add(&s->live_miss_bytes, b, __ATOMIC_RELAXED);
    }
}

/* ---- symbolization (dump time) ----------------------------------------------------- */

struct fsym {
    uint64_t value, size;
    uint32_t name;
};

struct sym_obj {
    uintptr_t bias;
    char name[256];       /* as the loader knows it ("" for the main program) */
    char path[256];       /* for display: the main program's real path */
    int fd;               /* -1: no symbols */
    struct fsym *syms;
    size_t nsyms;
    uint64_t stroff, strsize;
};

#define MAX_OBJS 32
struct symbolizer {
    struct sym_obj obj[MAX_OBJS];
    int n;
};

struct find_arg {
    uintptr_t ip;
    uintptr_t bias;
    const char *name;
    int found;
};

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find_arg *a = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a->ip >= lo && a->ip < lo + ph->p_memsz) {
            a->bias = info->dlpi_addr;
            a->name = info->dlpi_name ? info->dlpi_name : "";
            a->found = 1;
            return 1;
        }
    }
    return 0;
}

static void obj_load(struct sym_obj *o)
{
    o->fd = -1;
    const char *file = o->name[0] ? o->name : "/proc/self/exe";
    if (!o->name[0]) {
        ssize_t m = mrc_sys_readlink("/proc/self/exe", o->path, sizeof(o->path) - 1);
        o->path[m > 0 ? m : 0] = 0;
    } else {
        memcpy(o->path, o->name, sizeof(o->path));
    }
    int fd = mrc_sys_open(file, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return;
    Elf64_Ehdr eh;
    Elf64_Shdr *sh = NULL;
    if (mrc_sys_pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || !eh.e_shnum)
        goto fail;
    sh = malloc(eh.e_shnum * sizeof(*sh));
    if (!sh ||
        mrc_sys_pread(fd, sh, eh.e_shnum * sizeof(*sh), (off_t)eh.e_shoff) != (ssize_t)(eh.e_shnum * sizeof(*sh)))
        goto fail;
    /* The full symbol table names static functions too; a stripped object has only
     * its dynamic one. */
    int pick = -1;
    for (int i = 0; i < eh.e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && pick < 0))
            pick = (sh[i].sh_type == SHT_SYMTAB || pick < 0) ? i : pick;
    if (pick < 0 || sh[pick].sh_link >= eh.e_shnum || sh[pick].sh_entsize != sizeof(Elf64_Sym))
        goto fail;
    size_t total = sh[pick].sh_size / sizeof(Elf64_Sym);
    if (total > (1u << 24))
        goto fail;
    o->syms = malloc((total ? total : 1) * sizeof(struct fsym));
    if (!o->syms)
        goto fail;
    Elf64_Sym chunk[256];
    for (size_t done = 0; done < total;) {
        size_t m = total - done < 256 ? total - done : 256;
        if (mrc_sys_pread(fd, chunk, m * sizeof(Elf64_Sym), (off_t)(sh[pick].sh_offset + done * sizeof(Elf64_Sym))) !=
            (ssize_t)(m * sizeof(Elf64_Sym)))
            break;
        for (size_t i = 0; i < m; i++) {
            int type = ELF64_ST_TYPE(chunk[i].st_info);
            if ((type == STT_FUNC || type == STT_GNU_IFUNC) && chunk[i].st_shndx != SHN_UNDEF && chunk[i].st_value)
                o->syms[o->nsyms++] = (struct fsym){ chunk[i].st_value, chunk[i].st_size, chunk[i].st_name };
        }
        done += m;
    }
    o->stroff = sh[sh[pick].sh_link].sh_offset;
    o->strsize = sh[sh[pick].sh_link].sh_size;
    o->fd = fd;
    free(sh);
    return;
fail:
    free(sh);
    mrc_sys_close(fd);
}

static struct sym_obj *obj_of(struct symbolizer *z, uintptr_t ip)
{
    struct find_arg a = { ip, 0, NULL, 0 };
    dl_iterate_phdr(find_cb, &a);
    if (!a.found)
        return NULL;
    for (int i = 0; i < z->n; i++)
        if (z->obj[i].bias == a.bias && !strncmp(z->obj[i].name, a.name, sizeof(z->obj[i].name) - 1))
            return &z->obj[i];
    if (z->n == MAX_OBJS)
        return NULL;
    struct sym_obj *o = &z->obj[z->n++];
    memset(o, 0, sizeof(*o));
    o->bias = a.bias;
    strncpy(o->name, a.name, sizeof(o->name) - 1);
    obj_load(o);
    return o;
}

static void symbolizer_free(struct symbolizer *z)
{
    for (int i = 0; i < z->n; i++) {
        free(z->obj[i].syms);
        if (z->obj[i].fd >= 0)
            mrc_sys_close(z->obj[i].fd);
    }
    z->n = 0;
}

struct frame_info {
    uint64_t ip, obj_off, fn_off;
    const char *object;          /* full path, or NULL: not in any loaded object */
    char fn[256];                /* "" when unknown */
};

static void symbolize(struct symbolizer *z, uint64_t ip, struct frame_info *f)
{
    memset(f, 0, sizeof(*f));
    f->ip = ip;
    struct sym_obj *o = obj_of(z, (uintptr_t)ip);
    if (!o)
        return;
    f->object = o->path;
    f->obj_off = ip - o->bias;
    /* A return address: the call is the byte before it (it may end the function). */
    uint64_t a = f->obj_off - 1;
    const struct fsym *best = NULL;
    for (size_t i = 0; i < o->nsyms && !best; i++)
        if (o->syms[i].value <= a && a < o->syms[i].value + o->syms[i].size)
            best = &o->syms[i];
    if (!best || best->name >= o->strsize)
        return;
    ssize_t m = mrc_sys_pread(o->fd, f->fn, sizeof(f->fn) - 1, (off_t)(o->stroff + best->name));
    f->fn[m > 0 ? m : 0] = 0;
    f->fn[sizeof(f->fn) - 1] = 0;
    f->fn_off = f->obj_off - best->value;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void label_of(const struct frame_info *f, char *out, size_t size)
{
    if (f->fn[0] && f->object)
        snprintf(out, size, "%s+0x%llx (%s)", f->fn, (unsigned long long)f->fn_off, base_name(f->object));
    else if (f->object)
        snprintf(out, size, "%s+0x%llx", base_name(f->object), (unsigned long long)f->obj_off);
    else
        snprintf(out, size, "0x%llx", (unsigned long long)f->ip);
}

static void write_label(struct mrc_wbuf *w, const struct frame_info *f, int json)
{
    char tmp[400];
    label_of(f, tmp, sizeof(tmp));
    if (json)
        mrc_wbuf_json_str(w, tmp);
    else
        mrc_wbuf_printf(w, "%s", tmp);
}

const uint64_t *mrc_callsite_ips(const struct mrc_callsite *s)
{
    return s->ip;
}

void mrc_callsite_label(uint64_t ip, char *out, size_t size)
{
    struct symbolizer *z = calloc(1, sizeof(*z));
    struct frame_info f = { .ip = ip };
    if (z)
        symbolize(z, ip, &f);
    label_of(&f, out, size);
    if (z)
        symbolizer_free(z);
    free(z);
}

void mrc_callsite_write_stack(struct mrc_wbuf *w, const uint64_t *ips, int n, const char *indent)
{
    struct symbolizer *z = calloc(1, sizeof(*z));
    for (int i = 0; i < n && ips[i]; i++) {
        struct frame_info f;
        if (z)
            symbolize(z, ips[i], &f);
        else
            f = (struct frame_info){ .ip = ips[i] };
        mrc_wbuf_printf(w, "%s", indent);
        write_label(w, &f, 0);
        mrc_wbuf_printf(w, "\n");
    }
    if (z)
        symbolizer_free(z);
    free(z);
}

/* ---- listing ----------------------------------------------------------------------- */

struct snap {
    uint64_t ip[MRC_CALLSITE_DEPTH];
    uint64_t misses, miss_bytes, hits, hit_bytes;
    uint64_t live, live_bytes;   /* estimated: hit-attributed ones scaled by K */
    int other;
};

static void snap_of(struct snap *d, const struct mrc_callsite *s)
{
    memcpy(d->ip, s->ip, sizeof(d->ip));
    d->misses = s->misses;
    d->miss_bytes = s->miss_bytes;
    d->hits = s->hits;
    d->hit_bytes = s->hit_bytes;
    d->live = __atomic_load_n(&s->live_miss, __ATOMIC_RELAXED) +
              __atomic_load_n(&s->live_hit, __ATOMIC_RELAXED) * sample_k;
    d->live_bytes = __atomic_load_n(&s->live_miss_bytes, __ATOMIC_RELAXED) +
                    __atomic_load_n(&s->live_hit_bytes, __ATOMIC_RELAXED) * sample_k;
    d->other = s == &other;
}

static uint64_t est_requests(const struct snap *s)
{
    return s->misses + s->hits * sample_k;
}

static int by_misses(const void *a, const void *b)
{
    const struct snap *x = a, *y = b;
    if (x->misses != y->misses)
        return x->misses > y->misses ? -1 : 1;
    if (est_requests(x) != est_requests(y))
        return est_requests(x) > est_requests(y) ? -1 : 1;
    return 0;
}

static int by_live(const void *a, const void *b)
{
    const struct snap *x = a, *y = b;
    if (x->live_bytes != y->live_bytes)
        return x->live_bytes > y->live_bytes ? -1 : 1;
    if (x->live != y->live)
        return x->live > y->live ? -1 : 1;
    return 0;
}

/* Copies the table out under the lock, so that symbolizing (files, malloc) runs without it. */
static struct snap *snapshot(size_t *count)
{
    pthread_mutex_lock(&table_lock);
    size_t cap = nstacks + 1;
    pthread_mutex_unlock(&table_lock);
    cap += 64;   /* stacks added meanwhile; any beyond are left out of this dump */
    struct snap *v = malloc(cap * sizeof(*v));
    if (!v)
        return NULL;
    size_t n = 0;
    pthread_mutex_lock(&table_lock);
    for (struct mrc_callsite *s = table; s && n < cap - 1; s = s->hh.next)
        snap_of(&v[n++], s);
    if (other.misses || other.hits)
        snap_of(&v[n++], &other);
    pthread_mutex_unlock(&table_lock);
    *count = n;
    return v;
}

static void human(char *out, size_t n, uint64_t b)
{
    if (b >= (1ull << 30))
        snprintf(out, n, "%.1f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(out, n, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024)
        snprintf(out, n, "%.1f KiB", (double)b / 1024.0);
    else
        snprintf(out, n, "%llu B", (unsigned long long)b);
}

static void write_site(struct mrc_wbuf *w, struct symbolizer *z, const struct snap *s, int rank, int json,
                       enum mrc_callsite_order order)
{
    int depth = 0;
    while (depth < MRC_CALLSITE_DEPTH && s->ip[depth])
        depth++;
    struct frame_info f;
    if (json) {
        mrc_wbuf_printf(w, "%s{\"misses\": %llu, \"miss_bytes\": %llu, \"sampled_hits\": %llu, "
                           "\"sampled_hit_bytes\": %llu, \"est_requests\": %llu, \"est_bytes\": %llu, "
                           "\"live\": %llu, \"live_bytes\": %llu, \"site\": ",
                        rank ? ",\n   " : "\n   ", (unsigned long long)s->misses, (unsigned long long)s->miss_bytes,
                        (unsigned long long)s->hits, (unsigned long long)s->hit_bytes,
                        (unsigned long long)est_requests(s),
                        (unsigned long long)(s->miss_bytes + s->hit_bytes * sample_k), (unsigned long long)s->live,
                        (unsigned long long)s->live_bytes);
        if (s->other) {
            mrc_wbuf_json_str(w, "(other call stacks)");
        } else if (!depth) {
            mrc_wbuf_json_str(w, "(no stack)");
        } else {
            symbolize(z, s->ip[0], &f);
            write_label(w, &f, 1);
        }
        mrc_wbuf_printf(w, ", \"frames\": [");
        for (int i = 0; i < depth; i++) {
            symbolize(z, s->ip[i], &f);
            mrc_wbuf_printf(w, "%s{\"ip\": %llu, \"object\": ", i ? ", " : "", (unsigned long long)f.ip);
            if (f.object)
                mrc_wbuf_json_str(w, f.object);
            else
                mrc_wbuf_printf(w, "null");
            mrc_wbuf_printf(w, ", \"object_offset\": %llu, \"function\": ", (unsigned long long)f.obj_off);
            if (f.fn[0]) {
                mrc_wbuf_json_str(w, f.fn);
                mrc_wbuf_printf(w, ", \"offset\": %llu}", (unsigned long long)f.fn_off);
            } else {
                mrc_wbuf_printf(w, "null, \"offset\": null}");
            }
        }
        mrc_wbuf_printf(w, "]}");
        return;
    }
    char b1[32], b2[32];
    if (order == MRC_CALLSITE_BY_LIVE) {
        human(b1, sizeof(b1), s->live_bytes);
        mrc_wbuf_printf(w, "    #%d live %s%llu (%s)\n", rank + 1, s->hits ? "~" : "", (unsigned long long)s->live, b1);
    } else {
        human(b1, sizeof(b1), s->miss_bytes);
        human(b2, sizeof(b2), s->miss_bytes + s->hit_bytes * sample_k);
        mrc_wbuf_printf(w, "    #%d misses %llu (%s); requests %s%llu (%s%s)\n", rank + 1,
                        (unsigned long long)s->misses, b1, s->hits ? "~" : "", (unsigned long long)est_requests(s),
                        s->hits ? "~" : "", b2);
    }
    mrc_wbuf_printf(w, "       at ");
    if (s->other || !depth)
        mrc_wbuf_printf(w, "%s", s->other ? "(other call stacks)" : "(no stack)");
    for (int i = 0; i < depth && i < 4; i++) {
        symbolize(z, s->ip[i], &f);
        if (i)
            mrc_wbuf_printf(w, " < ");
        write_label(w, &f, 0);
    }
    mrc_wbuf_printf(w, "\n");
}

void mrc_callsite_write_list(struct mrc_wbuf *w, enum mrc_callsite_order order, int json)
{
    unsigned top = __atomic_load_n(&mrc_callsite_top, __ATOMIC_RELAXED);
    size_t n = 0;
    struct snap *v = top ? snapshot(&n) : NULL;
    if (v && n)
        qsort(v, n, sizeof(*v), order == MRC_CALLSITE_BY_LIVE ? by_live : by_misses);
    if (json)
        mrc_wbuf_printf(w, "[");
    struct symbolizer *z = v ? calloc(1, sizeof(*z)) : NULL;
    int shown = 0;
    for (size_t i = 0; z && i < n && shown < (int)top; i++) {
        if (order == MRC_CALLSITE_BY_LIVE && !v[i].live)
            break;
        write_site(w, z, &v[i], shown++, json, order);
    }
    if (json)
        mrc_wbuf_printf(w, "%s]", shown ? "\n  " : "");
    if (z)
        symbolizer_free(z);
    free(z);
    free(v);
}

void mrc_callsite_write(struct mrc_wbuf *w, int json)
{
    unsigned top = __atomic_load_n(&mrc_callsite_top, __ATOMIC_RELAXED);
    if (json) {
        pthread_mutex_lock(&table_lock);
        unsigned stacks = nstacks;
        uint64_t other_n = other.misses + other.hits;
        pthread_mutex_unlock(&table_lock);
        mrc_wbuf_printf(w, "\"callsites\": {\"top\": %u, \"sample_period\": %u, \"depth\": %d, \"unwinder\": \"%s\", "
                           "\"stacks\": %u, \"other_counted\": %llu, \"sites\": ",
                        top, sample_k, MRC_CALLSITE_DEPTH, bt_name, stacks, (unsigned long long)other_n);
        mrc_callsite_write_list(w, MRC_CALLSITE_BY_MISSES, 1);
        mrc_wbuf_printf(w, "}");
        return;
    }
    if (!top)
        return;
    mrc_wbuf_printf(w, "  top call sites by misses (hits sampled 1 in %u on average; ~ estimated):\n", sample_k);
    mrc_callsite_write_list(w, MRC_CALLSITE_BY_MISSES, 0);
}

/* ---- fork -------------------------------------------------------------------------- */

void mrc_callsite_fork_lock(void)
{
    pthread_mutex_lock(&table_lock);
}

void mrc_callsite_fork_unlock(void)
{
    pthread_mutex_unlock(&table_lock);
}

static void zero_site(struct mrc_callsite *s)
{
    s->misses = s->miss_bytes = s->hits = s->hit_bytes = 0;
    s->live_miss = s->live_miss_bytes = s->live_hit = s->live_hit_bytes = 0;
}

void mrc_callsite_child_reset(void)
{
    /* Stacks are kept (the child runs the same code); their counts start from zero. */
    pthread_mutex_init(&table_lock, NULL);
    pthread_mutex_init(&nodes.lock, NULL);
    for (struct mrc_callsite *s = table; s; s = s->hh.next)
        zero_site(s);
    zero_site(&other);
}
