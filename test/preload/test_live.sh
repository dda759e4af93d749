#!/bin/sh
# test_live.sh BUILD [PRELOAD_PREFIX] - the live view on the software NIC: a process under
# the cache publishes its counters in /dev/shm/mrcache-UID-PID (mode 0600, its user's
# only: another user cannot open it nor flush), `mrcache --once` shows them (text, JSON:
# requests, hits, misses, pinned bytes in use / idle / waiting, entries; the batch job
# and ranks it started with, --job keeping that job's alone; Prometheus' format), `mrcache
# --flush PID` and mrcache_flush() release the idle registrations of a program that makes
# no further verbs call (VmPin drops), the segment goes at exit, a killed or exec'd
# process's is removed by the viewer (a killed one also by the user's next process), and
# `mrcache --top` runs in a real terminal (tmux).
B=$1
PRE=${2:-}
LIB=$(cd "$B" && pwd)/libmrcache.so
PROG=$B/test/live_prog
tmp=$(mktemp -d)
pids=''
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; tmux kill-session -t "mrclive$$" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
skip() { echo "ok - $1 # SKIP $2"; }
uid=$(id -u)
KB=1024
SIZE=$((256 * KB))   # 16 of them: 4 MiB pinned at most, within an 8 MiB RLIMIT_MEMLOCK

# The viewer is the library file run as a program, which a sanitizer build cannot be:
# then the programs preload the sanitized library and the plain build's views them.
VIEWER=$LIB
if [ -n "$PRE" ]; then
    VIEWER=$(pwd)/build/libmrcache.so
    if [ ! -f "$VIEWER" ] || ! LD_PRELOAD='' "$VIEWER" --version >/dev/null 2>&1; then
        for t in segment_private once_counts once_text flush_releases_sleeper api_flush other_user_cannot_open \
                 labels_and_job_filter once_prometheus killed_segment_removed next_process_removes_dead_segment exec_segment_removed \
                 exit_removes_segment full_shm_warns_and_runs top_in_terminal; do
            skip "live_$t" "a sanitizer build cannot be run as a program, and there is no plain build/ to view with"
        done
        exit 0
    fi
fi
# The command from this tree, with the viewer of the library under test.
MRC="scripts/mrcache --lib $VIEWER"

# start NAME MODE: live_prog (16 buffers of 256 KiB registered 3 times, 4 held) under the
# preload; sets PID. Without a mode it reads a fifo held open (fd 8) until the test closes it.
start() {
    if [ -n "$2" ]; then
        LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PRE$LIB MRCACHE_STATS=off "$PROG" 16 $SIZE 3 4 "$2" </dev/null \
            >"$tmp/$1.out" 2>"$tmp/$1.err" &
    else
        mkfifo "$tmp/$1.in"
        LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PRE$LIB MRCACHE_STATS=off "$PROG" 16 $SIZE 3 4 <"$tmp/$1.in" \
            >"$tmp/$1.out" 2>"$tmp/$1.err" &
        exec 8>"$tmp/$1.in"
    fi
    PID=$!
    pids="$pids $PID"
    i=0
    while ! grep -q '^ready' "$tmp/$1.out" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    grep -q '^ready' "$tmp/$1.out" || { echo "live_prog did not start: $(cat "$tmp/$1.err")" >&2; return 1; }
}
vmpin() { awk '/^VmPin:/ {print $2}' "/proc/$1/status"; }
# json_field FILE PID FIELD: the process's field in an --once --json output.
json_field() {
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
print(next((p[sys.argv[3]] for p in d["processes"] if p["pid"] == int(sys.argv[2])), "absent"))' "$1" "$2" "$3"
}

# --- The segment and the counters -------------------------------------------------------
start a sleep
A=$PID
seg=/dev/shm/mrcache-$uid-$A
[ -f "$seg" ] && [ "$(stat -c '%a %u' "$seg")" = "600 $uid" ]
report live_segment_private $?

$MRC --once --json -d 0 >"$tmp/once.json" 2>"$tmp/once.err"
r=$?
for f in requests:48 hits:32 misses:16 entries:16 pinned_in_use:$((1024 * KB)) pinned_idle:$((3072 * KB)) \
         pinned_waiting:0 outlived_mrs:0 command:live_prog answered:True; do
    got=$(json_field "$tmp/once.json" "$A" "${f%%:*}")
    [ "$got" = "${f#*:}" ] || { echo "${f%%:*}: $got, expected ${f#*:}" >&2; r=1; }
done
[ $r -ne 0 ] && cat "$tmp/once.json" "$tmp/once.err" >&2
report live_once_counts $r

$MRC --once --sort pid -d 0.2 >"$tmp/once.txt"
r=$?
head -1 "$tmp/once.txt" | grep -q 'PID.*COMMAND.*REQ/s.*HIT%.*INUSE.*IDLE.*WAITING.*ENTRIES' || r=1
awk -v p="$A" '$1 == p && $2 == "live_prog" && $(NF-4) == "1.0M" && $(NF-3) == "3.0M" && $(NF-1) == 16 && $NF == 0 {f = 1} END {exit !f}' \
    "$tmp/once.txt" || r=1
[ $r -ne 0 ] && cat "$tmp/once.txt" >&2
report live_once_text $r

# --- MRs that outlived their memory: the 4 the program holds, its memory unmapped --------
start o outlive
O=$PID
r=0
$MRC --once --json -d 0 >"$tmp/outlive.json" 2>/dev/null || r=1
got=$(json_field "$tmp/outlive.json" "$O" outlived_mrs)
[ "$got" = 4 ] || { echo "outlived_mrs: $got, expected 4" >&2; r=1; }
[ "$(grep -c 'outlived its memory' "$tmp/o.err")" = 1 ] || { cat "$tmp/o.err" >&2; r=1; }
$MRC --once --prometheus -d 0 2>/dev/null | grep -q "^mrcache_outlived_mrs_total{.*pid=\"$O\"} 4$" || r=1
report live_outlived_mrs $r
kill "$O" 2>/dev/null

# --- Labels: the batch job and ranks a process started with; Prometheus' format ---------
SLURM_JOB_ID=job$$ OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_LOCAL_RANK=1 start j sleep
J=$PID
r=0
$MRC --once --json -d 0 --job "job$$" >"$tmp/job.json" 2>/dev/null || r=1
for f in job:job$$ rank:5 local_rank:1 host:"$(hostname)"; do
    got=$(json_field "$tmp/job.json" "$J" "${f%%:*}")
    [ "$got" = "${f#*:}" ] || { echo "${f%%:*}: $got, expected ${f#*:}" >&2; r=1; }
done
[ "$(json_field "$tmp/job.json" "$A" pid)" = absent ] || { echo "--job kept a process of no job" >&2; r=1; }
[ "$(json_field "$tmp/once.json" "$A" rank)" = None ] || r=1
report live_labels_and_job_filter $r
r=0
$MRC --once --prometheus -d 0 --job "job$$" >"$tmp/prom.txt" 2>/dev/null || r=1
grep -q '^# TYPE mrcache_requests_total counter$' "$tmp/prom.txt" &&
    grep -Eq "^mrcache_requests_total\{host=\"[^\"]*\",job=\"job$$\",rank=\"5\",local_rank=\"1\",command=\"live_prog\",pid=\"$J\"\} 48$" \
        "$tmp/prom.txt" &&
    grep -Eq "^mrcache_pinned_bytes\{.*pid=\"$J\",state=\"idle\"\} [0-9]+$" "$tmp/prom.txt" &&
    grep -Eq "^mrcache_registration_seconds_total\{.*pid=\"$J\"\} [0-9]+\.[0-9]{9}$" "$tmp/prom.txt" || r=1
# Every sample line is NAME{LABELS} VALUE, every family has HELP and TYPE.
awk '/^#/ {next} !/^[a-z_]+\{([a-z_]+="[^"]*",?)+\} [0-9.]+$/ {bad = 1} END {exit bad}' "$tmp/prom.txt" || r=1
[ "$(grep -c '^# HELP ' "$tmp/prom.txt")" -eq "$(grep -c '^# TYPE ' "$tmp/prom.txt")" ] || r=1
[ $r -ne 0 ] && cat "$tmp/prom.txt" >&2
report live_once_prometheus $r
kill "$J" 2>/dev/null

# --- Flush on demand ----------------------------------------------------------------------
# The program sleeps in pause(): only its helper thread can release anything.
r=0
before=$(vmpin "$A")
[ "$before" = 4096 ] || { echo "VmPin before the flush: $before kB, expected 4096" >&2; r=1; }
$MRC --flush "$A" >"$tmp/flush.out" 2>&1 || r=1
after=$(vmpin "$A")
[ "$after" = 1024 ] || { echo "VmPin after the flush: $after kB, expected 1024" >&2; r=1; }
grep -q "flushed process $A (live_prog): pinned 4.0M -> 1.0M; 3.0M idle released, 1.0M in use" "$tmp/flush.out" || r=1
$MRC --once --json -d 0 >"$tmp/after.json"
[ "$(json_field "$tmp/after.json" "$A" pinned_idle)" = 0 ] || r=1
[ $r -ne 0 ] && cat "$tmp/flush.out" >&2
report live_flush_releases_sleeper $r

LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PRE$LIB MRCACHE_STATS=off "$PROG" 16 $SIZE 3 4 api </dev/null >"$tmp/api.out" 2>&1
grep -q '^flush 4 vmpin 4096 1024$' "$tmp/api.out"
r=$?
[ $r -ne 0 ] && cat "$tmp/api.out" >&2
report live_api_flush $r

# --- Another user ---------------------------------------------------------------------------
if [ "$uid" -ne 0 ]; then
    skip live_other_user_cannot_open "needs root to run as nobody"
elif ! command -v setpriv >/dev/null; then
    skip live_other_user_cannot_open "no setpriv"
else
    start b sleep
    Bp=$PID
    asnobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
    r=0
    asnobody cat "/dev/shm/mrcache-0-$Bp" >/dev/null 2>&1 && { echo "nobody read the segment" >&2; r=1; }
    asnobody "$VIEWER" --once --json -d 0 >"$tmp/nobody.json" 2>&1 || r=1
    [ "$(json_field "$tmp/nobody.json" "$Bp" pid)" = absent ] || { echo "nobody sees process $Bp" >&2; r=1; }
    asnobody "$VIEWER" --flush "$Bp" >/dev/null 2>&1 && { echo "nobody flushed process $Bp" >&2; r=1; }
    [ "$(vmpin "$Bp")" = 4096 ] || r=1
    [ -f "/dev/shm/mrcache-0-$Bp" ] || r=1
    report live_other_user_cannot_open $r
fi

# --- Segments left behind, and removed ------------------------------------------------------
kill -9 "$A"
wait "$A" 2>/dev/null
# Any process of this user that registers removes such segments too: if one did already,
# the copy puts the killed process's segment back as it was.
if ! cp "$seg" "$tmp/seg.copy" 2>/dev/null; then
    skip live_killed_segment_removed "another process of this user removed the killed process's segment first"
    skip live_next_process_removes_dead_segment "no segment of a killed process to remove"
else
    r=0
    # A segment whose name's pid now runs another program (this shell) goes too.
    fake=/dev/shm/mrcache-$uid-$$
    cp "$tmp/seg.copy" "$fake"
    cp "$tmp/seg.copy" "$seg"
    $MRC --once --json -d 0 >"$tmp/dead.json" 2>"$tmp/dead.err" || { echo "--once failed" >&2; r=1; }
    python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); sys.exit(sorted(d["removed_dead"]) != sorted([int(sys.argv[2]), int(sys.argv[3])]))' \
        "$tmp/dead.json" "$A" "$$" || { cat "$tmp/dead.json" >&2; r=1; }
    [ -f "$seg" ] && { echo "the killed process's segment is still there" >&2; r=1; }
    [ -f "$fake" ] && { echo "the segment naming a reused pid is still there" >&2; rm -f "$fake"; r=1; }
    # In text, said on stderr.
    cp "$tmp/seg.copy" "$fake"
    $MRC --once -d 0 >/dev/null 2>"$tmp/dead.err"
    grep -q "^mrcache: removed the live segment of process $$, which is gone$" "$tmp/dead.err" || r=1
    [ -f "$fake" ] && { rm -f "$fake"; r=1; }
    report live_killed_segment_removed $r

    # Without a viewer: the next process of this user to register removes it (a process
    # ended by _exit, which runs no atexit handler, leaves one too).
    cp "$tmp/seg.copy" "$seg"
    LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PRE$LIB MRCACHE_STATS=off "$PROG" 1 4096 1 0 </dev/null >/dev/null 2>&1
    [ ! -e "$seg" ]
    report live_next_process_removes_dead_segment $?
fi

# A process that ran another program without the cache: its pid and start time stay.
start e exec
E=$PID
sleep 0.3
r=0
[ -f "/dev/shm/mrcache-$uid-$E" ] || { echo "no segment left by the exec" >&2; r=1; }
$MRC --once -d 0 >/dev/null 2>"$tmp/exec.err"
grep -q "^mrcache: removed the live segment of process $E, which runs another program now$" "$tmp/exec.err" || r=1
[ -f "/dev/shm/mrcache-$uid-$E" ] && r=1
[ $r -ne 0 ] && cat "$tmp/exec.err" >&2
report live_exec_segment_removed $r

start c ""
C=$PID
[ -f "/dev/shm/mrcache-$uid-$C" ]
had=$?
exec 8>&-    # end of its input: it exits
wait "$C"
rc=$?
[ $had -eq 0 ] && [ $rc -eq 0 ] && [ ! -e "/dev/shm/mrcache-$uid-$C" ]
report live_exit_removes_segment $?

# --- A full /dev/shm (a container's 64 MiB, filled by MPI): no view, one warning, no harm --
if [ "$uid" -ne 0 ] || ! command -v unshare >/dev/null; then
    skip live_full_shm_warns_and_runs "needs root and unshare, to mount a full /dev/shm of its own"
else
    # Propagation unchanged (in a chroot, / is no mount point, and unshare cannot make it
    # private), then /dev/shm alone made private, so the full one never reaches the
    # caller's namespace; exit 99: /dev/shm is no mount point to make private.
    unshare -m --propagation unchanged sh -c 'mount --make-rprivate /dev/shm 2>/dev/null || exit 99
        mount -t tmpfs -o size=4k tmpfs /dev/shm && dd if=/dev/zero of=/dev/shm/fill bs=4k count=1 2>/dev/null &&
        exec env "$@"' sh LD_LIBRARY_PATH="$B/snic" LD_PRELOAD="$PRE$LIB" MRCACHE_STATS=off "$PROG" 4 4096 2 0 \
        </dev/null >"$tmp/full.out" 2>"$tmp/full.err"
    rc=$?
    if [ $rc -eq 99 ]; then
        skip live_full_shm_warns_and_runs "/dev/shm is not a mount point of its own, to cover with a full one"
    else
        r=0
        if [ $rc -ne 0 ] || ! grep -q '^ready' "$tmp/full.out"; then echo "exit status $rc" >&2; r=1; fi
        [ "$(grep -c 'no live view of this process' "$tmp/full.err")" = 1 ] || r=1
        grep -q 'No space left on device' "$tmp/full.err" || r=1
        [ $r -ne 0 ] && cat "$tmp/full.err" >&2
        report live_full_shm_warns_and_runs $r
    fi
fi

# --- The refreshing view, in a real terminal ------------------------------------------------
if ! command -v tmux >/dev/null; then
    skip live_top_in_terminal "no tmux (scripts/install-deps.sh installs it)"
else
    start d sleep
    D=$PID
    s=mrclive$$
    r=0
    SHELL=/bin/sh tmux new-session -d -s "$s" -x 132 -y 30 "$MRC --top -d 0.5; echo TOP-EXITED \$?; sleep 30" || r=1
    sleep 1.5
    tmux capture-pane -p -t "$s" >"$tmp/screen1"
    grep -Eq '^mrcache --top .* [0-9]+ process(es)? .* pinned: ' "$tmp/screen1" || r=1
    grep -q 'sorted by req' "$tmp/screen1" || r=1
    grep -Eq "^ *$D live_prog .* 1.0M +3.0M +0 +16$" "$tmp/screen1" || r=1
    tmux send-keys -t "$s" e
    sleep 0.5
    tmux capture-pane -p -t "$s" >"$tmp/screen2"
    grep -q 'sorted by entries' "$tmp/screen2" || r=1
    tmux send-keys -t "$s" q
    sleep 0.5
    tmux capture-pane -p -t "$s" >"$tmp/screen3"
    grep -q '^TOP-EXITED 0$' "$tmp/screen3" || r=1
    if [ $r -ne 0 ]; then cat "$tmp/screen1" "$tmp/screen2" "$tmp/screen3" >&2; fi
    report live_top_in_terminal $r
fi
exit 0
