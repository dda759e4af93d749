/* config.h - libmrcache's settings: one table of MRCACHE_* variables, read once at
 * start-up. Every value is validated; a bad one gets one warning naming the variable,
 * the value and the default used instead, never a failure. */
#ifndef MRC_CONFIG_H
#define MRC_CONFIG_H

#include <stdint.h>

enum mrc_stats_format { MRC_STATS_TEXT, MRC_STATS_JSON };
enum mrc_cfg_remote { MRC_CFG_REMOTE_EXACT, MRC_CFG_REMOTE_NEVER };
enum mrc_cfg_shared { MRC_CFG_SHARED_REGISTER, MRC_CFG_SHARED_CACHE };
enum mrc_cfg_odp { MRC_CFG_ODP_OFF, MRC_CFG_ODP_FALLBACK, MRC_CFG_ODP_IMPLICIT };
enum mrc_cfg_huge { MRC_CFG_HUGE_OFF, MRC_CFG_HUGE_ADVISE, MRC_CFG_HUGE_COLLAPSE };
enum mrc_cfg_audit { MRC_CFG_AUDIT_OFF, MRC_CFG_AUDIT_WARN, MRC_CFG_AUDIT_ABORT };

struct mrc_config {
    int enable;                 /* 0: every call passes straight through */
    uint64_t max_entries;
    uint64_t max_bytes;         /* 0 in the table means "auto" until resolved */
    uint64_t max_deferred_bytes;
    int remote_policy;          /* enum mrc_cfg_remote */
    int shared_policy;          /* enum mrc_cfg_shared */
    uint64_t expand;            /* MRCACHE_EXPAND: the window a local miss may widen to; 0 off */
    int log_level;              /* enum mrc_log_level */
    char stats[256];            /* "auto", "off", "stderr", or a path pattern (%p %h) */
    int stats_format;           /* enum mrc_stats_format */
    int monitor;                /* MRC_MONITOR_* bits */
    int malloc_hooks;           /* watch the allocator's own unmaps */
    int direct_free;            /* PLT calls of free skip ours while the hooks idle */
    int help;
    uint64_t callsites;         /* top N call stacks attributed; 0 = off */
    uint64_t callsite_sample;   /* hits captured 1 in about K */
    int dump_signal;            /* signal that asks for a dump; 0 = none */
    uint64_t verify;            /* check 1 hit in N against /proc/self/pagemap; 0 = off */
    int odp;                    /* enum mrc_cfg_odp */
    int odp_prefetch;           /* registrations served on demand are prefetched */
    int hugepages;              /* enum mrc_cfg_huge */
    uint64_t hugepages_min;     /* registrations at least this long get huge pages */
    uint64_t populate;          /* bytes not resident from which a miss populates first; 0 off */
    uint64_t populate_threads;  /* 0 means "auto" until resolved */
    uint64_t fork_keep;         /* MRCACHE_FORK: cached bytes kept across fork (0 release,
                                 * MRC_FORK_KEEP: keep all) */
    uint64_t idle_timeout_ms;   /* idle cached registrations unused this long go; 0 = never */
    uint64_t large;             /* MRCACHE_LARGE: a size, or MRC_LARGE_FRACTION | N for 1/N
                                 * of max_bytes (mrc_config_large_bytes) */
    uint64_t dump_mrs;          /* the dump lists this many of the largest cached MRs */
    int audit;                  /* enum mrc_cfg_audit: posted work requests checked */
};

#define MRC_LARGE_FRACTION (UINT64_C(1) << 63)

/* The largest registration the cache keeps: MRCACHE_LARGE resolved against max_bytes. */
static inline uint64_t mrc_config_large_bytes(const struct mrc_config *cfg, uint64_t max_bytes)
{
    if (cfg->large & MRC_LARGE_FRACTION)
        return max_bytes / (cfg->large & ~MRC_LARGE_FRACTION);
    return cfg->large;
}

#define MRC_FORK_KEEP UINT64_MAX

#define MRC_MONITOR_PRELOAD 1   /* the munmap-family and allocator hooks */
#define MRC_MONITOR_PATCH 2     /* libc's entry points patched */
#define MRC_MONITOR_UFFD 4      /* userfaultfd events over registered ranges */
#define MRC_MONITOR_AUTO 8      /* 'auto' was asked for: uffd joins if patching falls short */

/* Fills cfg from the environment (getenv only: no allocation). */
void mrc_config_load(struct mrc_config *cfg);

/* Before anything is said about the settings (a warning, the MRCACHE_HELP table):
 * whether to stay quiet, because the parent process said it already of the same
 * MRCACHE_* variables. */
int mrc_config_quiet(void);

/* From the constructor, after mrc_config_load: if this process said something about
 * its settings, its children are told (one environment variable), so that those with
 * the same settings stay quiet. Outside any hook (it calls setenv). */
void mrc_config_pass_on(void);

/* Writes the table (name, default, meaning) to fd: MRCACHE_HELP=1 (README.md and
 * libmrcache(7) list the same variables; the tests compare them). */
void mrc_config_print_help(int fd);

/* Writes the table for mrcache(1) (docs/library-self-description.md): "# libmrcache
 * config 1", then name, default, current value, source (default, environment, invalid)
 * and meaning, tab-separated, one line per variable. */
void mrc_config_describe(int fd);

/* Whether CAP_IPC_LOCK is effective: then RLIMIT_MEMLOCK does not bound pinning. */
int mrc_config_has_ipc_lock(void);

/* The default for max_bytes: RLIMIT_MEMLOCK when finite and the process cannot lock
 * memory freely, else a quarter of physical memory. */
uint64_t mrc_config_auto_max_bytes(void);

#endif
