/* maps.c - the registry (maps.h): a sorted array of records read under a sequence count
 * and changed under a short lock, seeded from the lines util/procmaps.c parses, and what
 * a line or a new mapping says a record is. Invariants: arrays are never unmapped (a
 * reader of an old copy reads again); no malloc, no call into the cache; a record that
 * cannot be kept makes the registry lost, and every answer the worst case. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>

#include "monitor/maps.h"
#include "util/procmaps.h"
#include "util/range.h"
#include "util/sys.h"

#define HUGETLBFS_MAGIC 0x958458f6
#define LOST_BIAS (1u << 30)     /* added to the counters once lost: they never reach 0 again */

struct mrc_maps_words mrc_maps = { .lo = UINT64_MAX };

/* ---- records ---- */

struct rec {
    uint64_t start, end, dev, ino, off, gen;
    uint32_t flags, shift;
    uint64_t spare;
};

/* Each array's first slot holds its capacity (in spare), so a reader that loaded an old
 * array with a newer count reads only what that array holds. */
#define STATIC_RECS 32
static struct rec static_block[STATIC_RECS + 1] = { [0] = { .spare = STATIC_RECS } };
static struct rec *recs = static_block + 1;   /* published with a release store (inside a write) */
static uint32_t cap = STATIC_RECS;
static uint32_t seq;                     /* odd while a writer changes the array */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t base = 4096;
static int shared_cached;

/* Acquire loads and release stores throughout (plain moves on x86): a reader's loads of
 * a record then happen before its second look at the sequence, and a writer's stores
 * after its first (the sequence count without fences, which ThreadSanitizer lacks). */
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static void rec_load(struct rec *dst, const struct rec *src)
{
    dst->start = LOAD_ACQ(&src->start);
    dst->end = LOAD_ACQ(&src->end);
    dst->dev = LOAD_ACQ(&src->dev);
    dst->ino = LOAD_ACQ(&src->ino);
    dst->off = LOAD_ACQ(&src->off);
    dst->gen = LOAD_ACQ(&src->gen);
    dst->flags = LOAD_ACQ(&src->flags);
    dst->shift = LOAD_ACQ(&src->shift);
    dst->spare = 0;
}

static void rec_store(struct rec *dst, const struct rec *src)
{
    STORE_REL(&dst->start, src->start);
    STORE_REL(&dst->end, src->end);
    STORE_REL(&dst->dev, src->dev);
    STORE_REL(&dst->ino, src->ino);
    STORE_REL(&dst->off, src->off);
    STORE_REL(&dst->gen, src->gen);
    STORE_REL(&dst->flags, src->flags);
    STORE_REL(&dst->shift, src->shift);
}

/* A file's mapping whose registrations are cached. A private one is admitted as shared
 * memory is: another process that truncates the file drops its pages too (the kernel
 * unmaps the private copies beyond the new end), and no hook sees that process. */
static int cached_file(uint32_t flags)
{
    return (flags & MRC_MAP_FILE) && shared_cached;
}

static int refused(uint32_t flags)
{
    return (flags & (MRC_MAP_SHARED | MRC_MAP_FILE)) && !shared_cached;
}

static void interest_update(void)
{
    uint32_t v = mrc_maps.nrefused + (mrc_maps.files_cached ? 0 : mrc_maps.nfile);
    __atomic_store_n(&mrc_maps.interest, mrc_maps.lost ? v + LOST_BIAS : v, __ATOMIC_SEQ_CST);
}

/* Counts r in (sign 1) or out of (-1) the words the hooks read. Under the lock. */
static void account(const struct rec *r, int sign)
{
    uint32_t d = (uint32_t)sign;
    STORE_REL(&mrc_maps.n, mrc_maps.n + d);
    if (r->shift)
        STORE_REL(&mrc_maps.nhuge, mrc_maps.nhuge + d);
    if (refused(r->flags))
        STORE_REL(&mrc_maps.nrefused, mrc_maps.nrefused + d);
    if (cached_file(r->flags))
        STORE_REL(&mrc_maps.nfile, mrc_maps.nfile + d);
    interest_update();
}

/* The first record (of n in v) whose end lies past addr. */
static uint32_t find(const struct rec *v, uint32_t n, uint64_t addr)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (LOAD_ACQ(&v[mid].end) <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- writers: under the lock, inside a write section ---- */

static void lose(void)
{
    if (mrc_maps.lost)
        return;
    STORE_REL(&mrc_maps.lost, 1u);
    STORE_REL(&mrc_maps.files_cached, 1u);
    STORE_REL(&mrc_maps.nhuge, mrc_maps.nhuge + LOST_BIAS);
    interest_update();
}

/* Room for extra more records; 0 or -1 (then the registry is lost). */
static int reserve(uint32_t extra)
{
    uint32_t n = mrc_maps.n;
    if (n + extra <= cap)
        return 0;
    uint32_t ncap = cap * 2;
    while (ncap < n + extra)
        ncap *= 2;
    struct rec *v = mrc_raw_map(((size_t)ncap + 1) * sizeof(struct rec), 0);
    if (!v) {
        lose();
        return -1;
    }
    v[0].spare = ncap;
    v++;
    memcpy(v, recs, (size_t)n * sizeof(struct rec));
    __atomic_store_n(&recs, v, __ATOMIC_RELEASE);
    cap = ncap;
    return 0;
}

static void write_begin(void)
{
    pthread_mutex_lock(&lock);
    STORE_REL(&seq, seq + 1);
}

static void write_end(void)
{
    uint32_t n = mrc_maps.n;
    __atomic_store_n(&mrc_maps.lo, n ? recs[0].start : UINT64_MAX, __ATOMIC_RELEASE);
    __atomic_store_n(&mrc_maps.hi, n ? recs[n - 1].end : 0, __ATOMIC_RELEASE);
    __atomic_store_n(&seq, seq + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
}

static void remove_at(uint32_t i)
{
    uint32_t n = mrc_maps.n;
    for (uint32_t j = i; j + 1 < n; j++)
        rec_store(&recs[j], &recs[j + 1]);
}

/* Inserts r at i (room reserved; n counted by account). */
static void insert_at(uint32_t i, const struct rec *r)
{
    for (uint32_t j = mrc_maps.n; j > i; j--)
        rec_store(&recs[j], &recs[j - 1]);
    rec_store(&recs[i], r);
}

/* Cuts [start, end) out of the records made at or before gen (of segment sysv_id only,
 * if >= 0). At most one record grows into two: room for one more must be reserved. */
static void clear_locked(uint64_t start, uint64_t end, uint64_t gen, int64_t sysv_id)
{
    uint32_t i = find(recs, mrc_maps.n, start);
    while (i < mrc_maps.n && recs[i].start < end) {
        struct rec r = recs[i];
        if (r.gen > gen || (sysv_id >= 0 && (!(r.flags & MRC_MAP_SYSV) || r.ino != (uint64_t)sysv_id))) {
            i++;
            continue;
        }
        remove_at(i);
        account(&r, -1);
        if (r.start < start) {
            struct rec left = r;
            left.end = start;
            insert_at(i++, &left);
            account(&left, 1);
        }
        if (r.end > end) {
            struct rec right = r;
            right.start = end;
            if (r.flags & (MRC_MAP_FILE | MRC_MAP_SYSV))
                right.off += end - r.start;
            insert_at(i++, &right);
            account(&right, 1);
        }
    }
}

/* Records [start, end) as a says, cut from older records (under the lock). */
static void set_locked(uint64_t start, uint64_t end, const struct mrc_map_attr *a, uint64_t gen)
{
    clear_locked(start, end, gen, -1);
    uint32_t i = find(recs, mrc_maps.n, start);
    if (i < mrc_maps.n && recs[i].start < end) {
        /* A record made since gen overlaps: a mapping made there meanwhile, in an order
         * we cannot tell. It stays, as special as either could be. */
        for (; i < mrc_maps.n && recs[i].start < end; i++) {
            struct rec r = recs[i];
            account(&r, -1);
            r.flags |= a->flags & MRC_MAP_SHARED;
            r.shift = r.shift > a->page_shift ? r.shift : a->page_shift;
            rec_store(&recs[i], &r);
            account(&r, 1);
        }
        return;
    }
    struct rec r = { .start = start, .end = end, .dev = a->dev, .ino = a->ino, .off = a->off,
                     .gen = mrc_maps.gen + 1, .flags = a->flags, .shift = a->page_shift };
    insert_at(i, &r);
    account(&r, 1);
    __atomic_store_n(&mrc_maps.gen, r.gen, __ATOMIC_RELEASE);
}

void mrc_maps_set(uint64_t start, uint64_t end, const struct mrc_map_attr *a, uint64_t gen)
{
    if (!a || !(a->flags || a->page_shift)) {
        mrc_maps_clear(start, end, gen, -1);   /* no lock unless something is there */
        return;
    }
    if (!LOAD_ACQ(&mrc_maps.on) || start >= end)
        return;
    int saved = errno;
    write_begin();
    if (reserve(2) == 0)
        set_locked(start, end, a, gen);
    write_end();
    errno = saved;
}

/* ---- readers: no lock; a read is retried while a writer moved the sequence ---- */

struct reader {
    uint32_t s;
    const struct rec *v;
    uint32_t n;
};

static void read_begin(struct reader *r)
{
    for (;;) {
        r->s = __atomic_load_n(&seq, __ATOMIC_ACQUIRE);
        if (!(r->s & 1))
            break;
        __builtin_ia32_pause();
    }
    r->v = __atomic_load_n(&recs, __ATOMIC_ACQUIRE);
    r->n = LOAD_ACQ(&mrc_maps.n);
    uint64_t c = LOAD_ACQ(&r->v[-1].spare);
    if (r->n > c)   /* a torn view: the sequence check rejects it */
        r->n = (uint32_t)c;
}

static int read_again(const struct reader *r)
{
    return LOAD_ACQ(&seq) != r->s;
}

/* Calls fn(r, in, out) for the records overlapping [start, end) in address order, until
 * it returns non-zero, over one consistent view: out (out_size bytes) is zeroed before
 * each attempt, since a writer may make the reader start again. */
typedef int (*visit_fn)(const struct rec *r, const void *in, void *out);

static void visit(uint64_t start, uint64_t end, visit_fn fn, const void *in, void *out, size_t out_size)
{
    struct reader rd;
    do {
        read_begin(&rd);
        memset(out, 0, out_size);
        for (uint32_t i = find(rd.v, rd.n, start); i < rd.n; i++) {
            struct rec r;
            rec_load(&r, &rd.v[i]);
            if (r.start >= end || fn(&r, in, out))
                break;
        }
    } while (read_again(&rd));
}

/* Whether [start, end) lies outside every record's bounds: then no look at the records
 * is needed (a record made later describes a mapping made after this call's range was
 * known, or announced to the sink). */
static int outside(uint64_t start, uint64_t end)
{
    return end <= __atomic_load_n(&mrc_maps.lo, __ATOMIC_ACQUIRE) ||
           start >= __atomic_load_n(&mrc_maps.hi, __ATOMIC_ACQUIRE);
}

#define OVERLAPS 0x80000000u

/* The flags of the records overlapping [start, end), with OVERLAPS if there is one: the
 * common answer (none) in a few loads, for the paths that ask on every call (a miss's
 * admission, an unmap's cut, the page size of a range). */
static uint32_t overlap_flags(uint64_t start, uint64_t end)
{
    if (outside(start, end))
        return 0;
    struct reader rd;
    uint32_t any;
    do {
        read_begin(&rd);
        any = 0;
        for (uint32_t i = find(rd.v, rd.n, start); i < rd.n && LOAD_ACQ(&rd.v[i].start) < end; i++)
            any |= LOAD_ACQ(&rd.v[i].flags) | OVERLAPS;
    } while (read_again(&rd));
    return any;
}

struct older_in {
    uint64_t gen;
    int64_t sysv_id;
};

static int older_fn(const struct rec *r, const void *in, void *out)
{
    const struct older_in *o = in;
    int *found = out;
    *found = r->gen <= o->gen && (o->sysv_id < 0 || ((r->flags & MRC_MAP_SYSV) && r->ino == (uint64_t)o->sysv_id));
    return *found;
}

void mrc_maps_clear(uint64_t start, uint64_t end, uint64_t gen, int64_t sysv_id)
{
    if (!mrc_maps_any() || start >= end || outside(start, end))
        return;
    struct older_in in = { gen, sysv_id };
    int found;
    visit(start, end, older_fn, &in, &found, sizeof(found));
    if (!found)
        return;   /* nothing to cut: no lock */
    int saved = errno;
    write_begin();
    if (reserve(1) == 0)
        clear_locked(start, end, gen, sysv_id);
    write_end();
    errno = saved;
}

static int shift_fn(const struct rec *r, const void *in, void *out)
{
    (void)in;
    uint32_t *shift = out;
    *shift = r->shift > *shift ? r->shift : *shift;
    return 0;
}

uint64_t mrc_maps_page_size(uint64_t start, uint64_t end)
{
    if (__builtin_expect(!LOAD_ACQ(&mrc_maps.nhuge), 1))
        return base;
    if (LOAD_ACQ(&mrc_maps.lost))
        return mrc_procmaps_huge_shift_max() ? (uint64_t)1 << mrc_procmaps_huge_shift_max() : base;
    if (outside(start, end))
        return base;
    uint32_t shift;
    visit(start, end, shift_fn, NULL, &shift, sizeof(shift));
    return shift ? (uint64_t)1 << shift : base;
}

int mrc_maps_special(uint64_t start, uint64_t end)
{
    if (!LOAD_ACQ(&mrc_maps.on) || LOAD_ACQ(&mrc_maps.lost))
        return 1;
    return overlap_flags(start, end) != 0;
}

static int first_fn(const struct rec *r, const void *in, void *out)
{
    (void)in;
    *(struct rec *)out = *r;
    return 1;
}

int mrc_maps_at(uint64_t addr, uint64_t *start, uint64_t *end, struct mrc_map_attr *a)
{
    if (!mrc_maps_any())
        return 0;
    struct rec r;
    visit(addr, addr + 1, first_fn, NULL, &r, sizeof(r));
    if (r.end <= addr || r.start > addr)
        return 0;
    *start = r.start;
    *end = r.end;
    *a = (struct mrc_map_attr){ r.flags, r.shift, r.dev, r.ino, r.off };
    return 1;
}

static int sysv_end_fn(const struct rec *r, const void *in, void *out)
{
    uint64_t *end = out;
    if ((r->flags & MRC_MAP_SYSV) && r->ino == *(const uint64_t *)in && r->end > *end)
        *end = r->end;
    return 0;
}

uint64_t mrc_maps_sysv_end(uint64_t addr, uint64_t limit, uint64_t id)
{
    if (!mrc_maps_any())
        return 0;
    uint64_t end;
    visit(addr, limit, sysv_end_fn, &id, &end, sizeof(end));
    return end;
}

int mrc_maps_admit(uint64_t first, uint64_t last)
{
    if (LOAD_ACQ(&mrc_maps.lost))
        return !shared_cached;
    uint32_t any = overlap_flags(first, last == UINT64_MAX ? UINT64_MAX : last + 1);
    if (refused(any))
        return 1;
    /* Set before the registration is made, so that a truncation that found it clear
     * has either run before the pages are pinned or looks again after its call. */
    if (cached_file(any) && !LOAD_ACQ(&mrc_maps.files_cached)) {
        pthread_mutex_lock(&lock);
        __atomic_store_n(&mrc_maps.files_cached, 1u, __ATOMIC_SEQ_CST);
        interest_update();
        pthread_mutex_unlock(&lock);
    }
    return 0;
}

struct file_in {
    uint64_t dev, ino, lo, hi;
    unsigned max;
};

struct file_out {
    unsigned k;
    uint64_t start[MRC_FILE_RANGES], len[MRC_FILE_RANGES];
};

static int file_fn(const struct rec *r, const void *in, void *out)
{
    const struct file_in *f = in;
    struct file_out *o = out;
    uint64_t flen = r->end - r->start;
    if (!(r->flags & MRC_MAP_FILE) || r->dev != f->dev || r->ino != f->ino ||
        r->off >= f->hi || r->off + flen <= f->lo)
        return 0;
    uint64_t a = r->start + (f->lo > r->off ? f->lo - r->off : 0);
    uint64_t b = f->hi - r->off >= flen ? r->end : r->start + (f->hi - r->off);
    uint64_t s, l;
    mrc_range_round(a, b - a, r->shift ? (uint64_t)1 << r->shift : base, &s, &l);
    if (o->k < f->max) {
        o->start[o->k] = s;
        o->len[o->k++] = l;
    } else {
        mrc_range_union(&o->start[f->max - 1], &o->len[f->max - 1], s, l);   /* folded into the last */
    }
    return 0;
}

unsigned mrc_maps_file_ranges(uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi, uint64_t *start, uint64_t *len,
                              unsigned max)
{
    if (LOAD_ACQ(&mrc_maps.lost)) {
        start[0] = 0;
        len[0] = UINT64_MAX;
        return 1;
    }
    struct file_in in = { dev, ino, lo, hi, max < MRC_FILE_RANGES ? max : MRC_FILE_RANGES };
    struct file_out o;
    visit(0, UINT64_MAX, file_fn, &in, &o, sizeof(o));
    memcpy(start, o.start, o.k * sizeof(*start));
    memcpy(len, o.len, o.k * sizeof(*len));
    return o.k;
}

/* ---- the seed ---- */

#define MAX_EXEC 256
struct seed {
    struct { uint64_t dev, ino; } exec[MAX_EXEC];   /* files with an executable mapping: ELF objects */
    unsigned nexec;
    int exec_full;
};

static int seed_exec(const struct mrc_procmaps_line *l, void *arg)
{
    struct seed *sd = arg;
    if (l->perms[2] != 'x' || !l->ino)
        return 0;
    if (sd->nexec == MAX_EXEC) {
        sd->exec_full = 1;
        return 0;
    }
    sd->exec[sd->nexec].dev = l->dev;
    sd->exec[sd->nexec++].ino = l->ino;
    return 0;
}

static int prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* What the mapping of line l is, as a record would say: 1 if special. */
static int classify_line(const struct mrc_procmaps_line *l, const struct seed *sd, struct mrc_map_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->page_shift = mrc_procmaps_huge_shift(l->dev);
    int shared = l->perms[3] == 's';
    const char *p = l->path;
    if (!l->ino || *p == '[' || prefix(p, "anon_inode:"))
        return a->page_shift != 0;   /* anonymous, a kernel special, a descriptor's own memory */
    if (prefix(p, "/SYSV")) {
        a->flags = MRC_MAP_SHARED | MRC_MAP_SYSV;
        a->ino = l->ino;
        a->dev = l->dev;
        a->off = l->off;
        return 1;
    }
    if (prefix(p, "/dev/zero")) {
        a->flags = shared ? MRC_MAP_SHARED : 0;   /* shared (or private) anonymous memory */
        return a->flags || a->page_shift;
    }
    if (mrc_procmaps_device_path(p)) {
        struct stat st;
        if (mrc_sys_fstatat(AT_FDCWD, p, &st, 0) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)))
            return 0;   /* device memory: not pages a registration pins */
    }
    if (shared)
        a->flags |= MRC_MAP_SHARED;
    int elf = sd->exec_full;
    for (unsigned i = 0; i < sd->nexec && !elf; i++)
        elf = sd->exec[i].dev == l->dev && sd->exec[i].ino == l->ino;
    /* An ELF object's private mappings are not the program's data: their file is not
     * truncated under a running program (and ld.so maps them past our hooks). */
    if (!elf || shared) {
        a->flags |= MRC_MAP_FILE;
        a->dev = l->dev;
        a->ino = l->ino;
        a->off = l->off;
    }
    return a->flags || a->page_shift;
}

static int seed_line(const struct mrc_procmaps_line *l, void *arg)
{
    struct mrc_map_attr a;
    if (classify_line(l, arg, &a))
        mrc_maps_set(l->start, l->end, &a, mrc_maps_gen());
    return 0;
}

static void seed(void)
{
    static struct seed sd;   /* 4 KiB: not on a stack that may be a hook's */
    memset(&sd, 0, sizeof(sd));
    mrc_procmaps_each_line("/proc/self/maps", seed_exec, &sd);
    mrc_procmaps_each_line("/proc/self/maps", seed_line, &sd);
}

void mrc_maps_start(uint64_t base_page, int cache_shared, int on)
{
    int saved = errno;
    base = base_page;
    shared_cached = cache_shared;
    STORE_REL(&mrc_maps.files_cached, 0u);
    interest_update();
    mrc_procmaps_learn_hugetlb();
    STORE_REL(&mrc_maps.on, (uint32_t)(on != 0));
    if (on)
        seed();
    errno = saved;
}

void mrc_maps_child_reset(void)
{
    if (!LOAD_ACQ(&mrc_maps.on))
        return;
    if (pthread_mutex_trylock(&lock) == 0 && !(seq & 1)) {
        pthread_mutex_unlock(&lock);
        return;
    }
    /* A thread of the parent was changing the array: it is not in the child. */
    int saved = errno;
    pthread_mutex_init(&lock, NULL);
    seq = 0;
    uint64_t gen = mrc_maps.gen;
    uint32_t files_cached = mrc_maps.files_cached;
    memset(&mrc_maps, 0, sizeof(mrc_maps));
    mrc_maps.on = 1;
    mrc_maps.gen = gen;
    mrc_maps.files_cached = files_cached;
    mrc_maps.lo = UINT64_MAX;
    seed();
    errno = saved;
}

/* ---- what a new mapping is ---- */

static uint32_t log2_of(uint64_t v)
{
    return v ? 63u - (uint32_t)__builtin_clzll(v) : 0;
}

int mrc_maps_describe(int flags, int fd, uint64_t off, struct mrc_map_attr *a)
{
    memset(a, 0, sizeof(*a));
    int shared = (flags & MAP_TYPE) != MAP_PRIVATE;
    if (flags & MAP_HUGETLB) {
        uint32_t s = (uint32_t)(flags >> MAP_HUGE_SHIFT) & MAP_HUGE_MASK;
        a->page_shift = s ? s : mrc_procmaps_huge_default();
    }
    if (!(flags & MAP_ANONYMOUS)) {
        int saved = errno;
        struct stat st;
        int ok = mrc_sys_fstat(fd, &st) == 0;
        if (ok && S_ISREG(st.st_mode)) {
            a->flags = MRC_MAP_FILE;
            a->dev = st.st_dev;
            a->ino = st.st_ino;
            a->off = off;
            struct statfs sf;
            if ((uint64_t)st.st_blksize > base && mrc_sys_fstatfs(fd, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC)
                a->page_shift = log2_of((uint64_t)sf.f_bsize);
        } else if (!(ok && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 5))) {
            shared = 0;   /* device memory, a descriptor's own memory: not pages a registration pins */
        }
        errno = saved;
    }
    if (shared)
        a->flags |= MRC_MAP_SHARED;
    return a->flags || a->page_shift;
}
