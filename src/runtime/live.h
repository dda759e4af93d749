/* live.h - the live segment: a small shared-memory file per process under the cache,
 * /dev/shm/mrcache-UID-PID, in which its helper thread publishes a snapshot of the
 * statistics when a viewer (mrcache --top, --once, --flush) asks, and through which the
 * viewer asks for a flush. Invariants: mode 0600, so only its user (or root) opens it;
 * one writer (the helper thread) publishes under a sequence count, odd while it writes;
 * requests are counters the viewer bumps, answered by storing the request served; the
 * viewer wakes the helper by setting MRC_LIVE_WAKE in 'wake' (the helper's futex word,
 * shared) and a FUTEX_WAKE on it, so a hit never writes here and never makes a call. */
#ifndef MRC_LIVE_H
#define MRC_LIVE_H

#include <stdint.h>

#ifndef MRCACHE_BUILDING_LIBRARY
#define MRCACHE_BUILDING_LIBRARY
#endif
#include "mrcache.h"

#define MRC_LIVE_DIR "/dev/shm"
#define MRC_LIVE_PREFIX "mrcache-"
#define MRC_LIVE_MAGIC 0x3365766c6372726dull   /* "mrrclve3" */
#define MRC_LIVE_WAKE 0x80000000u              /* in 'wake': a viewer asked */

struct mrc_live_seg {
    uint64_t magic;
    uint32_t size;               /* sizeof(struct mrc_live_seg) of the writer */
    uint32_t wake;               /* the helper thread's futex word */
    uint64_t pid;
    uint64_t start_ticks;        /* /proc/PID/stat's start time: tells a reused pid */
    char comm[16];               /* /proc/self/comm at creation */
    uint32_t snap_req, snap_done;    /* snapshot asked, and the last request answered */
    uint32_t flush_req, flush_done;  /* flush asked, and the last request done */
    uint32_t seq;                /* odd while the snapshot below is being written */
    uint32_t reserved;
    uint64_t snap_ns;            /* CLOCK_MONOTONIC of the snapshot */
    uint64_t flushes;            /* flushes done on request */
    struct mrcache_stats stats;
    uint64_t pinned_in_use;      /* registrations someone holds */
    uint64_t pinned_idle;        /* cached, held by nobody: what a flush releases */
    uint64_t pinned_waiting;     /* invalidated or refused, waiting for deregistration */
    /* What an operator labels it by, at creation: the host, the batch job
     * (SLURM_JOB_ID, PBS_JOBID, LSB_JOBID, FLUX_JOB_ID; empty outside one), the rank and
     * the rank on this node (-1 where no launcher says). */
    char host[64];
    char job[48];
    int32_t rank, local_rank;
};

/* The path of pid's segment of user uid, into buf. */
void mrc_live_path(char *buf, unsigned long size, unsigned uid, long pid);

/* Start time of process pid (field 22 of /proc/PID/stat), or 0 when it is gone. */
uint64_t mrc_live_start_ticks(long pid);

/* Calls fn(uid, pid) for each segment in MRC_LIVE_DIR of user uid (of every user if all
 * is set; only pid's if only > 0), by its name. */
void mrc_live_scan(unsigned uid, int all, long only, void (*fn)(unsigned uid, long pid));

/* The writer's side. */

/* Creates this process's segment (replacing one its pid left: an exec'd image, or an
 * older process of this user with the same pid; removing those of this user's processes
 * that are gone) and returns its wake word, or NULL (said once) when it cannot: the
 * helper then waits on a word of its own. Before the helper starts, not from a hook;
 * once per process (a forked child after mrc_live_forget); errno is kept. */
uint32_t *mrc_live_open(void);

/* Answers what a viewer asked: a flush first, then a snapshot. Helper thread only. */
void mrc_live_serve(void);

/* Removes the segment (exit). */
void mrc_live_close(void);

/* In a forked child: the parent's segment is not its own; it gets one at its first
 * registration. */
void mrc_live_forget(void);

#endif
