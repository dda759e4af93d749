#!/usr/bin/env python3
# synth_ranks.py - writes N synthetic libmrcache JSON dumps (one per rank, s.<rank>.json,
# the fields scripts/mrcache-report reads, as the library writes them), for testing the
# report on job sizes no test machine runs. Hit rates over 96-99.6% (most near the top), a few size
# buckets, pinned bytes per rank; deterministic for a given seed.
# Usage: synth_ranks.py N DIR [SEED]
import json
import os
import random
import sys


def rank_doc(rank, rng, n):
    requests = rng.randint(40000, 60000)
    # Most ranks near 99.6%, a tail down to 96.0% (cubed), shuffled across rank numbers.
    u = ((rank * 7919) % n) / max(n - 1, 1)
    hit_rate = 0.996 - 0.036 * u ** 3
    hits = int(requests * hit_rate)
    misses = requests - hits
    sizes, left_req, left_miss = [], requests, misses
    buckets = [4096, 65536, 1 << 20, 16 << 20]
    for i, mb in enumerate(buckets):
        if i == len(buckets) - 1:
            req, miss = left_req, left_miss
        else:
            req = int(requests * (0.5, 0.3, 0.15)[i])
            miss = min(left_miss, int(misses * (0.2, 0.3, 0.3)[i]))
        left_req -= req
        left_miss -= miss
        sizes.append({"max_bytes": mb, "requests": req, "hits": req - miss, "regs": miss,
                      "reg_ns": miss * (20000 + mb // 50)})
    reg_ns = sum(b["reg_ns"] for b in sizes)
    peak = rng.randint(64, 512) << 20
    return {
        "version": 1, "pid": 10000 + rank, "host": "node%03d" % (rank // 32), "monitor": "patch+preload",
        "wall_ns": 60 * 10**9 + rank, "rank": rank,
        "counters": {"requests": requests, "hits": hits, "misses": misses, "uncached": 0,
                     "real_regs": misses, "real_deregs": misses - 3, "real_reg_ns": reg_ns,
                     "inval_munmap": rng.randint(0, 40), "inval_free": rng.randint(0, 10), "inval_trim": 0},
        "hit_rate": round(hits / requests, 4),
        "saved_ns": hits * 25000,
        "gauges": {"pinned_bytes": peak // rng.randint(1, 4), "pinned_bytes_peak": peak,
                   "registrations": 3, "registrations_peak": 40, "cached_entries": 3,
                   "cached_bytes": peak // 4, "deferred": 0},
        "sizes": sizes,
        "leaks": {"count": rank % 3, "bytes": (rank % 3) * 65536, "created": requests,
                  "released": requests - rank % 3, "callsites": []},
    }


def main():
    n, out = int(sys.argv[1]), sys.argv[2]
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    os.makedirs(out, exist_ok=True)
    for r in range(n):
        with open(os.path.join(out, "s.%d.json" % r), "w") as fh:
            json.dump(rank_doc(r, rng, n), fh)


if __name__ == "__main__":
    main()
