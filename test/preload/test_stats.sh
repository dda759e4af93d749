#!/usr/bin/env bash
# test_stats.sh - statistics as a process sees them: call sites and leaks in the dumps, %r
# names, no clobbering, destinations that are no file (/dev/null, /dev/fd/2, a fifo, a
# directory) and missing directories, a verbs process that never registers, the dump signal, libunwind loaded only when asked; 4 ranks at once
# merged by scripts/mrcache-report, the largest cached registrations in the dump and in
# the report per rank, and the report itself: pipes, JSON on stdout, text
# dumps, its plots for 2, 16 and 512 synthetic ranks, its text charts without matplotlib.
# Usage: test_stats.sh BUILD_DIR [PRELOAD_PREFIX]   (prints "ok - name" lines)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
REPORT=$HERE/../../scripts/mrcache-report
WL=$B/test/stats_workload
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
skip() { echo "ok - $1 # SKIP $2"; }
unset OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID
run() { env LD_LIBRARY_PATH="$B/snic" LD_PRELOAD="$PP$B/libmrcache.so" "$@"; }

# 0. The library never links libunwind: programs that do not ask never load it.
! readelf -d "$B/libmrcache.so" | grep -q 'NEEDED.*unwind'
report no_libunwind_dependency $?
out=$(run MRCACHE_STATS=off WL_MAPS=1 "$WL" 2>/dev/null)
[ "$out" = "libunwind absent" ]
report libunwind_not_loaded_when_off $?

# 1. Call sites and leaks in the JSON (4 leaked MRs of 64 KiB from leak_here).
run MRCACHE_CALLSITES=8 MRCACHE_STATS="$tmp/c.%p.json" MRCACHE_STATS_FORMAT=json WL_LEAKS=4 WL_MAPS=1 "$WL" \
    >"$tmp/c.out" 2>"$tmp/c.err"
rc=$?
f=$(ls "$tmp"/c.*.json 2>/dev/null | head -1)
[ $rc -eq 0 ] && [ -n "$f" ]
report workload_runs_and_dumps_json $?
python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c, cs = d["counters"], d["callsites"]
assert d["version"] == 1 and cs["top"] == 8 and cs["unwinder"] == "libunwind", cs
site = {s["frames"][0]["function"]: s for s in cs["sites"] if s["frames"]}
for fn in ("reg_hot", "reg_cold", "leak_here"):
    assert fn in site, (fn, [s["site"] for s in cs["sites"]])
assert site["reg_cold"]["misses"] == 10, site["reg_cold"]
assert site["leak_here"]["misses"] == 4 and site["leak_here"]["miss_bytes"] == 4 * 65536, site["leak_here"]
assert site["reg_hot"]["misses"] == 1, site["reg_hot"]
# Every miss is captured: the sites' misses add up to the cache's (+ uncached, none here).
assert sum(s["misses"] for s in cs["sites"]) == c["misses"], (c, cs)
# Hits are sampled about 1 in 64: 199 hits give a handful, estimated near 199.
h = site["reg_hot"]
assert 0 < h["sampled_hits"] < 30 and h["est_requests"] == 1 + 64 * h["sampled_hits"], h
assert site["reg_cold"]["frames"][1]["function"] == "main"
assert site["reg_cold"]["site"].startswith("reg_cold+0x") and "stats_workload" in site["reg_cold"]["site"]
PY
report callsites_in_json $?
python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
l = d["leaks"]
assert l["count"] == 4 and l["bytes"] == 4 * 65536, l
assert l["callsites"][0]["frames"][0]["function"] == "leak_here" and l["callsites"][0]["live"] == 4, l
assert l["created"] == d["counters"]["requests"], (l, d["counters"])
PY
report leaks_at_exit_json $?
grep -q "libunwind mapped" "$tmp/c.out"
report libunwind_loaded_when_asked $?
run MRCACHE_CALLSITES=4 MRCACHE_STATS=stderr WL_LEAKS=2 "$WL" 2>"$tmp/t.err" >/dev/null
grep -q 'top call sites by misses' "$tmp/t.err" && grep -q 'at reg_cold+0x' "$tmp/t.err" &&
    grep -q 'not deregistered (leaks, if this is the exit dump): 2, 131072 B' "$tmp/t.err" && grep -q '#1 live 2 (128.0 KiB)' "$tmp/t.err" &&
    grep -q 'at leak_here+0x' "$tmp/t.err"
report callsites_and_leaks_text $?
run MRCACHE_STATS="$tmp/off.json" MRCACHE_STATS_FORMAT=json "$WL" 2>/dev/null
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["callsites"]; assert c["top"]==0 and c["sites"]==[] and d["leaks"]["count"]==3 and d["leaks"]["callsites"]==[]' "$tmp/off.json"
report off_by_default_leaks_still_counted $?

# 2. %r from the launcher's variables; a taken name moves on to name.1, never clobbered.
run SLURM_PROCID=5 MRCACHE_STATS="$tmp/r.%r.json" MRCACHE_STATS_FORMAT=json "$WL" 2>/dev/null
PMI_RANK=2 SLURM_PROCID=9 run MRCACHE_STATS="$tmp/r.%r.json" MRCACHE_STATS_FORMAT=json "$WL" 2>/dev/null
run MRCACHE_STATS="$tmp/r.%r.json" MRCACHE_STATS_FORMAT=json "$WL" 2>/dev/null
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["rank"] == 5' "$tmp/r.5.json" &&
    python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["rank"] == 2' "$tmp/r.2.json" &&
    python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["rank"] is None' "$tmp/r.norank.json"
report rank_in_file_name_and_json $?
echo precious >"$tmp/taken.json"
run MRCACHE_STATS="$tmp/taken.json" MRCACHE_STATS_FORMAT=json "$WL" 2>"$tmp/taken.err"
[ "$(cat "$tmp/taken.json")" = precious ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/taken.json.1" &&
    grep -q 'writing .*taken.json.1 instead' "$tmp/taken.err"
report exit_dump_never_clobbers_takes_next_name $?
ln -s "$tmp/victim" "$tmp/planted.json"
run MRCACHE_STATS="$tmp/planted.json" "$WL" 2>/dev/null
[ ! -e "$tmp/victim" ] && [ -L "$tmp/planted.json" ] && grep -q 'hit rate' "$tmp/planted.json.1"
report exit_dump_never_follows_symlink $?
# One slow registration (300 ms, the second of 14) does not price the 199 hits: the
# estimate stays below that one delay (the mean of the registrations would give seconds).
run SNIC_SLOW_REG=2:300000000 MRCACHE_STATS="$tmp/slow.json" MRCACHE_STATS_FORMAT=json "$WL" 2>/dev/null
python3 - "$tmp/slow.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["counters"]
assert c["real_reg_ns"] > 300e6, c["real_reg_ns"]      # the outlier happened
assert 0 < d["saved_ns"] < 300e6, d["saved_ns"]
PY
report saved_estimate_robust_to_one_slow_registration $?
# Destinations that are no file are written to as they are, never replaced by a sibling.
run MRCACHE_STATS=/dev/null "$WL" 2>"$tmp/null.err"
[ -c /dev/null ] && [ ! -e /dev/null.1 ] && ! grep -q 'stats' "$tmp/null.err"
report dump_to_dev_null_replaces_nothing $?
run MRCACHE_STATS=/dev/fd/2 "$WL" 2>"$tmp/fd2.err"
grep -q 'hit rate' "$tmp/fd2.err" && [ ! -e /dev/fd/2.1 ]
report dump_to_dev_fd_2_reaches_stderr $?
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/fifo.out" &
reader=$!
run MRCACHE_STATS="$tmp/fifo" "$WL" 2>/dev/null
wait "$reader"
[ -p "$tmp/fifo" ] && [ ! -e "$tmp/fifo.1" ] && grep -q 'hit rate' "$tmp/fifo.out"
report dump_to_a_fifo_reaches_its_reader $?
# Missing directories are made (0700, under the umask); a directory is refused in one line.
(umask 022 && run MRCACHE_STATS="$tmp/made/deeper/s.%p.txt" "$WL" 2>"$tmp/made.err")
f=$(ls "$tmp"/made/deeper/s.*.txt 2>/dev/null | head -1)
[ -n "$f" ] && grep -q 'hit rate' "$f" && [ "$(stat -c %a "$tmp/made")" = 700 ] && ! grep -q 'stats' "$tmp/made.err"
report dump_makes_missing_directories $?
mkdir "$tmp/adir"
run MRCACHE_STATS="$tmp/adir" "$WL" 2>"$tmp/dir.err"
[ "$(grep -c 'is a directory' "$tmp/dir.err")" -eq 1 ] && [ ! -e "$tmp/adir.1" ] && [ -z "$(ls "$tmp/adir")" ]
report dump_to_a_directory_refused_in_one_line $?
# A process that loads libibverbs and never registers: reported when a destination is
# named, silent by default; a process that never loads it stays silent either way.
run MRCACHE_STATS=stderr ibv_devinfo >/dev/null 2>"$tmp/devinfo.err"
run ibv_devinfo >/dev/null 2>"$tmp/devinfo-auto.err"
run MRCACHE_STATS=stderr /bin/true 2>"$tmp/true.err"
grep -q 'registrations requested 0' "$tmp/devinfo.err" && ! grep -q 'statistics' "$tmp/devinfo-auto.err" &&
    ! grep -q 'statistics' "$tmp/true.err"
report named_destination_reports_a_verbs_process_that_never_registered $?

# 3. The dump signal: the handler sets a flag, the next registration dumps (pattern.1).
run MRCACHE_DUMP_SIGNAL=USR2 MRCACHE_STATS="$tmp/sig.%p.json" MRCACHE_STATS_FORMAT=json WL_SIGNAL=1 "$WL" 2>"$tmp/sig.err"
rc=$?
mid=$(ls "$tmp"/sig.*.json.1 2>/dev/null | head -1)
fin=${mid%.1}
[ $rc -eq 0 ] && [ -n "$mid" ] && [ -f "$fin" ] && python3 - "$mid" "$fin" <<'PY'
import json, sys
mid, fin = (json.load(open(p)) for p in sys.argv[1:3])
# The mid-run dump came from inside the last registration: before its own count.
assert mid["counters"]["requests"] == fin["counters"]["requests"] - 1, (mid["counters"], fin["counters"])
assert mid["pid"] == fin["pid"] and mid["wall_ns"] < fin["wall_ns"]
PY
report dump_signal_dumps_at_next_registration $?
run MRCACHE_DUMP_SIGNAL=SEGV MRCACHE_STATS=off "$WL" 2>"$tmp/badsig.err"
[ $? -eq 0 ] && grep -q 'MRCACHE_DUMP_SIGNAL="SEGV" is not valid' "$tmp/badsig.err"
report dump_signal_refuses_fault_signals $?

# 4. Four ranks at once (as srun would start them), merged by mrcache-report.
mkdir -p "$tmp/job"
pat="$tmp/job/s.%r.json"
for r in 0 1 2 3; do
    SLURM_PROCID=$r run MRCACHE_CALLSITES=8 MRCACHE_STATS="$pat" MRCACHE_STATS_FORMAT=json \
        WL_SCALE=$((50 + 100 * r)) WL_LEAKS=$r "$WL" 2>/dev/null &
done
wait
[ "$(ls "$tmp/job" | wc -l)" -eq 4 ]
report four_ranks_four_files $?
python3 "$REPORT" --json "$tmp/summary.json" --no-plots "$tmp"/job/*.json >"$tmp/report.txt" 2>"$tmp/report.err"
rc=$?
[ $rc -eq 0 ] && python3 - "$tmp/summary.json" "$tmp"/job/*.json <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
files = [json.load(open(p)) for p in sys.argv[2:]]
t = s["total"]
assert s["processes"] == 4 and len(s["ranks"]) == 4, s["processes"]
assert t["requests"] == sum(f["counters"]["requests"] for f in files)
assert t["hits"] == sum(f["counters"]["hits"] for f in files)
assert abs(t["hit_rate"] - t["hits"] / t["requests"]) < 1e-9
assert t["invalidations"]["munmap"] == sum(f["counters"]["inval_munmap"] for f in files) > 0
assert t["pinned_bytes_peak_max"] == max(f["gauges"]["pinned_bytes_peak"] for f in files)
rates = [r["hit_rate"] for r in s["ranks"]]
assert rates == sorted(rates), rates     # more hot repetitions per rank: higher hit rates
assert s["ranks"][0]["rank"] == 0 and s["ranks"][3]["rank"] == 3
top = {c["site"].split("+")[0]: c for c in s["callsites"]}
assert top["reg_cold"]["misses"] == 40 and top["reg_cold"]["ranks"] == 4, top["reg_cold"]
assert t["leaks"]["count"] == 0 + 1 + 2 + 3, t["leaks"]
for k in ("nic_entries_4k", "nic_entries", "small_page_bytes", "huge_page_bytes"):
    assert t["nic_view"][k] == sum(f["counters"][k] for f in files), k
assert t["nic_view"]["nic_entries_4k"] > 0
PY
report report_merges_four_ranks $?
grep -q 'hit rate' "$tmp/report.txt" && grep -q 'TOTAL' "$tmp/report.txt" && grep -q 'invalidations' "$tmp/report.txt" &&
    grep -q "^NIC's view: .* translation entries" "$tmp/report.txt"
report report_text_summary $?

# 4b. The dump's largest cached registrations: largest first, with the keys the program
# got (as `rdma res show mr` shows them), users, access and idle time; MRCACHE_DUMP_MRS
# bounds the list; without an idle timeout no idle time is made up; mrcache-report lists
# them per rank, in use or idle.
LM=$B/test/largest_mrs
mkdir -p "$tmp/lm"
for r in 0 1; do
    OMPI_COMM_WORLD_RANK=$r run MRCACHE_STATS=off MRCACHE_IDLE_TIMEOUT=8s LM_WAIT_MS=2500 "$LM" \
        "$tmp/lm/r$r.json" "$tmp/lm.r$r.txt" >"$tmp/lm.r$r.out" 2>"$tmp/lm.r$r.err" &
done
run MRCACHE_STATS=off MRCACHE_DUMP_MRS=2 MRCACHE_IDLE_TIMEOUT=0 "$LM" "$tmp/lm2.json" "$tmp/lm2.txt" \
    >"$tmp/lm2.out" 2>"$tmp/lm2.err"
rc=$?
wait
[ $rc -eq 0 ] && python3 - "$tmp/lm/r0.json" "$tmp/lm.r0.out" "$tmp/lm2.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["largest_mrs"]
got = [l.split()[1:] for l in open(sys.argv[2]) if l.startswith("mr ")]
want = sorted(((int(a), int(b), int(c), int(h)) for a, b, c, h in got), reverse=True)
mrs = d["mrs"]
assert [m["length"] for m in mrs] == [w[0] for w in want], mrs
assert [(m["lkey"], m["rkey"]) for m in mrs] == [(w[1], w[2]) for w in want], (mrs, want)
assert [m["users"] for m in mrs] == [w[3] for w in want], mrs
assert mrs[1]["access"] & 2 and not mrs[0]["access"] & 2, mrs      # 256 KiB: remote write
assert d["idle_precision_ms"] == 1000, d
assert mrs[0]["idle_ms"] is None, mrs[0]                              # held: in use
assert all(1000 <= m["idle_ms"] <= 4500 for m in mrs[1:]), mrs        # idle 2.5 s
two = json.load(open(sys.argv[3]))["largest_mrs"]
assert [m["length"] for m in two["mrs"]] == [1 << 20, 256 << 10], two
assert two["idle_precision_ms"] is None and all(m["idle_ms"] is None for m in two["mrs"]), two
PY
report dump_lists_largest_mrs $?
lkey=$(awk '$2 == 1048576 {printf "%#x", $3}' "$tmp/lm.r0.out")
grep -q 'largest cached registrations (idle times to within 1.0 s)' "$tmp/lm.r0.txt" &&
    grep -Eq "^ +0x[0-9a-f]+ +1048576 +$lkey .* 1 +- *\$" "$tmp/lm.r0.txt" &&
    grep -q 'idle times not measured' "$tmp/lm2.txt"
report dump_text_lists_largest_mrs $?
python3 "$REPORT" --no-plots "$tmp/lm" >"$tmp/lm.report" 2>&1 &&
    grep -q '^largest cached registrations per rank' "$tmp/lm.report" &&
    grep -q '^  rank 0 (pid' "$tmp/lm.report" && grep -q '^  rank 1 (pid' "$tmp/lm.report" &&
    grep -Eq "mrlen 1048576 +lkey $lkey .*in use \(1 handle\)" "$tmp/lm.report" &&
    grep -Eq 'mrlen 262144 .*idle [0-9.]+ s' "$tmp/lm.report" &&
    [ "$(python3 "$REPORT" --no-plots --mrs 1 "$tmp/lm" | grep -c 'mrlen ')" -eq 2 ]
report report_lists_largest_mrs_per_rank $?

# 5. The report on its own: synthetic jobs of 2, 16 and 512 ranks (test/preload/synth_ranks.py).
SYNTH=$HERE/synth_ranks.py
for n in 1 2 16 512; do python3 "$SYNTH" $n "$tmp/syn$n"; done
# A python3 with matplotlib for the PNG tests (the one on PATH first), and a way to hide
# it: a matplotlib package that refuses to import, first on PYTHONPATH.
PY_MPL=
for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null && "$py" -c 'import matplotlib' 2>/dev/null && { PY_MPL=$py; break; }
done
mkdir -p "$tmp/nompl/matplotlib"
echo 'raise ImportError("hidden by test_stats.sh")' >"$tmp/nompl/matplotlib/__init__.py"
nompl() { PYTHONPATH=$tmp/nompl python3 "$REPORT" "$@"; }

# A reader that goes away (| head) silences the report: no traceback, status 0, and the
# files it was asked for (JSON, and PNGs with matplotlib) are still written. The first
# run's stdout is a pipe whose read end is already closed (every write fails), the
# second's a real `| head -1`.
"${PY_MPL:-python3}" - "$REPORT" "$tmp/pipe.json" "$tmp/pipe.png" "$tmp/syn512" >"$tmp/pipe.out" 2>"$tmp/pipe.err" <<'PY'
import os, subprocess, sys
report, js, png, d = sys.argv[1:5]
r, w = os.pipe()
os.close(r)
p = subprocess.run([sys.executable, report, "--json", js, "--plots", png, d], stdout=w, stderr=subprocess.PIPE)
os.close(w)
sys.stderr.write(p.stderr.decode())
sys.exit(p.returncode)
PY
rc=$?
[ $rc -eq 0 ] && ! grep -q -v '^mrcache-report: matplotlib not importable' "$tmp/pipe.err" &&
    python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["processes"] == 512' "$tmp/pipe.json" &&
    { [ -z "$PY_MPL" ] || [ "$(ls "$tmp/pipe.png"/*.png | wc -l)" -eq 3 ]; }
r=$?
[ $r -eq 0 ] || { echo "status $rc"; cat "$tmp/pipe.err"; } >&2
report report_closed_pipe_quiet_and_files_written $r
set -o pipefail
nompl --json "$tmp/head.json" "$tmp/syn512" 2>"$tmp/head.err" | head -1 >"$tmp/head.out"
rc=$?
set +o pipefail
[ $rc -eq 0 ] && [ "$(cat "$tmp/head.out")" = "libmrcache statistics: 512 processes" ] &&
    ! grep -q -e Traceback -e BrokenPipe "$tmp/head.err" && [ -s "$tmp/head.json" ]
report report_piped_into_head_quiet $?

# --json -: stdout is the JSON summary and nothing else; the text goes to stderr.
nompl --json - "$tmp/syn16" >"$tmp/stdout.json" 2>"$tmp/stdout.err"
rc=$?
[ $rc -eq 0 ] && python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["processes"] == 16' "$tmp/stdout.json" &&
    grep -q '^libmrcache statistics: 16 processes' "$tmp/stdout.err" && grep -q 'hit rate per rank' "$tmp/stdout.err"
report report_json_to_stdout_is_pure_json $?

# A text dump as input: one line saying what it is and what to do; no parser error.
run MRCACHE_STATS="$tmp/text.dump" "$WL" 2>/dev/null
python3 "$REPORT" --no-plots "$tmp/text.dump" >"$tmp/td.out" 2>"$tmp/td.err"
rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <"$tmp/td.err")" -eq 1 ] && grep -q 'text dump.*MRCACHE_STATS_FORMAT=json' "$tmp/td.err" &&
    ! grep -q -e Expecting -e Traceback "$tmp/td.err" && [ ! -s "$tmp/td.out" ]
r=$?
[ $r -eq 0 ] || cat "$tmp/td.err" >&2
report report_text_dump_named_in_one_line $r
python3 "$REPORT" --no-plots "$tmp/text.dump" "$tmp"/syn2/*.json >"$tmp/td2.out" 2>"$tmp/td2.err"
[ $? -eq 0 ] && [ "$(wc -l <"$tmp/td2.err")" -eq 1 ] && grep -q '^libmrcache statistics: 2 processes' "$tmp/td2.out"
report report_text_dump_skipped_beside_json $?

# One process is "1 process".
python3 "$REPORT" --no-plots "$tmp/syn1" >"$tmp/one.out" 2>&1
grep -q '^libmrcache statistics: 1 process$' "$tmp/one.out"
report report_one_process_singular $?

# --version: this tree's version, from the public header.
v=$(awk '$2 == "MRCACHE_VERSION_MAJOR" {ma = $3} $2 == "MRCACHE_VERSION_MINOR" {mi = $3} END {print ma "." mi}' \
    "$HERE/../../include/mrcache.h")
out=$(python3 "$REPORT" --version)
[ $? -eq 0 ] && case $out in "mrcache-report $v "*) true ;; *) false ;; esac
report report_version $?

# Text charts when matplotlib cannot be imported: said once on stderr, no plot directory,
# and 512 ranks as a distribution (percentiles and ten bins), not 512 bars.
nompl --plots "$tmp/none" "$tmp/syn512" >"$tmp/txt.txt" 2>"$tmp/txt.err"
[ $? -eq 0 ] && grep -q 'registration sizes' "$tmp/txt.txt" && grep -q '^hit rate per rank (512 ranks)' "$tmp/txt.txt" &&
    grep -q '^  min 96.00%, p5 .*, median .*, max 99.60%' "$tmp/txt.txt" && grep -q 'matplotlib' "$tmp/txt.err" &&
    [ "$(sed -n '/^hit rate per rank/,/^$/p' "$tmp/txt.txt" | wc -l)" -le 13 ] && [ ! -e "$tmp/none" ]
report report_text_charts_without_matplotlib $?

# PNG plots: three per job; the hit-rate axis fitted to 96-99.6%; real registrations on a
# log axis beside requests; 512 ranks as histograms (not 512 bars) in a bounded figure.
if [ -n "$PY_MPL" ]; then
    MPLBACKEND=Agg "$PY_MPL" "$REPORT" --plots "$tmp/png" "$tmp"/job/*.json >"$tmp/png.txt" 2>&1
    n=$(ls "$tmp"/png/*.png 2>/dev/null | wc -l)
    r=1
    [ "$n" -eq 3 ] && r=0 && for p in "$tmp"/png/*.png; do head -c 8 "$p" | grep -q PNG || r=1; done
    report report_png_plots $r
    MPLBACKEND=Agg "$PY_MPL" - "$REPORT" "$tmp" <<'PY'
import importlib.machinery, importlib.util, os, struct, subprocess, sys
report, tmp = sys.argv[1:3]
loader = importlib.machinery.SourceFileLoader("mrcache_report", report)
spec = importlib.util.spec_from_loader("mrcache_report", loader)
m = importlib.util.module_from_spec(spec)
loader.exec_module(m)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
for n in (2, 16, 512):
    s = m.summarize(m.load([os.path.join(tmp, "syn%d" % n)]), 10)
    fig = m.plot_hit_rate(s, plt)
    ax = fig.axes[0]
    rates = [100 * r["hit_rate"] for r in s["ranks"]]
    lo, hi = (ax.get_ylim() if n <= m.MAX_RANKS_PER_BAR else ax.get_xlim())
    # The data fills most of the axis: 96% and 99.6% sit far apart.
    assert lo > 90 and hi <= 100 and (max(rates) - min(rates)) / (hi - lo) > 0.6, (n, lo, hi, min(rates), max(rates))
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    if n <= m.MAX_RANKS_PER_BAR:
        assert len(bars) == n, (n, len(bars))
    else:
        assert len(bars) <= 40 and sum(p.get_height() for p in bars) == n, (n, len(bars))
        assert any(l.get_label().startswith("median") for l in ax.get_lines()), "no percentile lines"
    plt.close(fig)
    fig = m.plot_sizes(s, plt)
    assert fig.axes[0].get_yscale() == "log", "registration sizes not on a log axis"
    plt.close(fig)
    fig = m.plot_pinned(s, plt)
    if n > m.MAX_RANKS_PER_BAR:
        assert len([p for p in fig.axes[0].patches if isinstance(p, Rectangle)]) <= 40
    plt.close(fig)
    out = os.path.join(tmp, "png%d" % n)
    subprocess.run([sys.executable, report, "--plots", out, os.path.join(tmp, "syn%d" % n)], check=True,
                   stdout=subprocess.DEVNULL)
    for f in os.listdir(out):
        with open(os.path.join(out, f), "rb") as fh:
            w, h = struct.unpack(">II", fh.read(24)[16:24])
        assert w <= 100 * m.MAX_FIG_WIDTH and h <= 500, (n, f, w, h)
PY
    report report_plots_fitted_log_and_many_ranks $?
else
    skip report_png_plots "python3-matplotlib not installed (scripts/install-deps.sh installs it)"
    skip report_plots_fitted_log_and_many_ranks "python3-matplotlib not installed (scripts/install-deps.sh installs it)"
fi
# 6. MRs that outlived their memory: mrcache-report adds them up apart from the causes of
# invalidation and names the ranks that had them.
mkdir -p "$tmp/inuse"
python3 "$HERE/synth_ranks.py" 3 "$tmp/inuse" 5 && python3 - "$tmp/inuse" <<'PY'
import json, os, sys
for r, n in ((0, 0), (1, 2), (2, 1)):
    p = os.path.join(sys.argv[1], "s.%d.json" % r)
    d = json.load(open(p))
    d["counters"]["inval_in_use"] = n
    json.dump(d, open(p, "w"))
PY
python3 "$REPORT" --json "$tmp/inuse.json" --no-plots "$tmp"/inuse/*.json >"$tmp/inuse.txt" &&
    python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["total"]; assert t["in_use"] == 3 and "in_use" not in t["invalidations"], t' "$tmp/inuse.json" &&
    grep -q '^MRs that outlived their memory .*: 3, by rank: 1 (2), 2 (1)$' "$tmp/inuse.txt"
report report_mrs_that_outlived_their_memory $?
exit 0
