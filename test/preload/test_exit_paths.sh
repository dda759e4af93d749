#!/usr/bin/env bash
# test_exit_paths.sh - every way a registering program ends (exit_paths.c's modes) must
# end it as without libmrcache: the same exit status or fatal signal, with the default
# sources and with the userfaultfd one (its own thread). Liveness only: each run has a
# generous timeout (30 s) that only a hang reaches.
# Usage: [EXIT_CONFIGS="cache uffd"] test_exit_paths.sh BUILD_DIR [PRELOAD_PREFIX]
#        (prints "ok - name" lines; EXIT_CONFIGS picks the configurations under test)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
BIN=$B/test/never_exit_paths
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ulimit -c 0     # the signal modes must not leave core files behind
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }

# The configurations: the reference (no preload), the default sources where patching
# works (patch,preload: named, because under a sanitizer auto adds the userfaultfd), the
# userfaultfd.
read -r -a tested <<<"${EXIT_CONFIGS:-cache uffd}"
configs=(ref "${tested[@]}")
cfg_env() {
    case $1 in
    ref) echo "LD_LIBRARY_PATH=$B/snic" ;;
    cache) echo "LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PP$B/libmrcache.so MRCACHE_STATS=off MRCACHE_MONITOR=patch,preload" ;;
    uffd) echo "LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PP$B/libmrcache.so MRCACHE_STATS=off MRCACHE_MONITOR=patch,preload,uffd" ;;
    esac
}

# "exit N", "signal N" or "hung" (still running after 30 s: timeout's SIGKILL, 137; no
# mode dies of SIGKILL by itself).
describe() {
    local rc=$1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo hung
    elif [ "$rc" -gt 128 ]; then echo "signal $((rc - 128))"
    else echo "exit $rc"; fi
}

modes=(return pthread_exit pthread_exit_threads exit_from_thread exit_from_thread_while_registering
       _exit exec sigterm sigterm_from_thread sigsegv abort)

# All runs at once: a hang costs its 30 s once, not once per mode. They are small, but a
# normal user's pins count against one RLIMIT_MEMLOCK for all of the user's processes (the
# software NIC's io_uring buffers) and each run pins 2 MiB: then as many at once as fit
# in half of it.
slots=${#modes[@]}
slots=$((slots * ${#configs[@]}))
lim=$(ulimit -l)
if [ "$(id -u)" -ne 0 ] && [ "$lim" != unlimited ]; then
    slots=$((lim / 4096))
    [ "$slots" -ge 1 ] || slots=1
fi
for m in "${modes[@]}"; do
    for c in "${configs[@]}"; do
        while [ "$(jobs -rp | wc -l)" -ge "$slots" ]; do wait -n; done
        # The subshell's stderr is dropped: bash's "Segmentation fault" lines, expected.
        ( env $(cfg_env "$c") timeout -s KILL 30 "$BIN" "$m" >"$tmp/$m.$c.out" 2>&1
          echo $? >"$tmp/$m.$c.rc" ) 2>/dev/null &
    done
done

# SIGTERM to a process whose main thread has left with pthread_exit: it must end (by
# itself or by the signal), as it does without the cache.
for c in "${configs[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$slots" ]; do wait -n; done
    (
        env $(cfg_env "$c") "$BIN" pthread_exit_ready >"$tmp/sig.$c.out" 2>&1 &
        pid=$!
        for _ in $(seq 300); do grep -q ready "$tmp/sig.$c.out" && break; sleep 0.1; done
        kill -TERM "$pid" 2>/dev/null
        kill -INT "$pid" 2>/dev/null
        ( sleep 30; kill -KILL "$pid" 2>/dev/null ) &
        dog=$!
        wait "$pid"
        rc=$?
        kill "$dog" 2>/dev/null
        wait "$dog" 2>/dev/null
        if [ "$rc" -eq 137 ]; then echo hung; else echo ended; fi >"$tmp/sig.$c.rc"
    ) 2>/dev/null &
done
wait

for m in "${modes[@]}"; do
    want=$(describe "$(cat "$tmp/$m.ref.rc")")
    for c in "${tested[@]}"; do
        got=$(describe "$(cat "$tmp/$m.$c.rc")")
        r=0
        if [ "$got" != "$want" ]; then
            echo "  $m ($c): $got; without libmrcache: $want" >&2
            sed 's/^/    /' "$tmp/$m.$c.out" >&2
            r=1
        fi
        report "exit_path_${m}_${c}_as_without_cache" $r
    done
done
want=$(cat "$tmp/sig.ref.rc")
for c in "${tested[@]}"; do
    got=$(cat "$tmp/sig.$c.rc")
    r=0
    if [ "$got" != "$want" ]; then
        echo "  SIGTERM/SIGINT after pthread_exit ($c): $got; without libmrcache: $want" >&2
        r=1
    fi
    report "sigterm_after_pthread_exit_ends_process_${c}" $r
done
exit 0
