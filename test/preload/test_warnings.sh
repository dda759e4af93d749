#!/usr/bin/env bash
# test_warnings.sh - the warnings that save hours, on the software NIC: each printed once
# (registrations from two threads and a forked child), none without its cause, and
# nothing at all in a program that never registers: MRCACHE_MONITOR=none; an MRCACHE_*
# variable the library does not know (with the closest known name), said once per job;
# fork-safe mode
# (RDMAV_FORK_SAFE, IBV_FORK_SAFE) where the kernel does not make it unneeded, and
# RDMAV_HUGEPAGES_SAFE with it; UCX's registration cache loaded; libfabric loaded (its
# cache off under ours, or beside it with another of its monitors); RLIMIT_MEMLOCK small
# beside what the program registers (as an unprivileged user).
# Usage: test_warnings.sh BUILD_DIR [PRELOAD_PREFIX]   (prints "ok - name" lines)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
WL=$B/test/warn_workload
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
skip() { echo "ok - $1 # SKIP $2"; }
unset RDMAV_FORK_SAFE IBV_FORK_SAFE RDMAV_HUGEPAGES_SAFE UCX_IB_REG_METHODS UCX_MEM_EVENTS FI_MR_CACHE_MONITOR
run() { env LD_LIBRARY_PATH="$B/snic" LD_PRELOAD="$PP$B/libmrcache.so" MRCACHE_STATS=off "$@" 2>"$tmp/err"; }
# The number of libmrcache lines on the last run's stderr matching a pattern.
count() { grep '^libmrcache\[' "$tmp/err" | grep -c -E -- "$1"; }
# Any of these warnings (other lines, such as a sanitizer build's notes, are not theirs).
ANY="MRCACHE_MONITOR=none|is not a libmrcache setting|fork-safe mode is on|RDMAV_HUGEPAGES_SAFE is set|registration cache is active|RLIMIT_MEMLOCK is|libfabric is loaded"
# NAME PATTERN N: the last run succeeded and printed N lines matching PATTERN, and none of
# the other warnings.
expect() {
    local rc=$? n all
    n=$(count "$2")
    all=$(count "$ANY")
    [ $rc -eq 0 ] && [ "$n" -eq "$3" ] && [ "$all" -eq "$3" ]
    local r=$?
    [ $r -eq 0 ] || { echo "# $1: exit $rc, $n lines matching '$2', $all in all:" >&2; cat "$tmp/err" >&2; }
    report "$1" $r
}

run "$WL"
expect no_warning_without_a_cause "$ANY" 0

run MRCACHE_MONITOR=none "$WL"
expect monitor_none_once 'MRCACHE_MONITOR=none' 1

run MRCACHE_MAX_ENTRY=5 "$WL"
expect misspelt_variable_named_with_the_closest 'MRCACHE_MAX_ENTRY is not a libmrcache setting \(did you mean MRCACHE_MAX_ENTRIES\?\)' 1
run MRCACHE_ZZQ=1 "$WL"
expect unknown_variable_named_without_a_guess 'MRCACHE_ZZQ is not a libmrcache setting; it has no effect' 1

# Said once per job: a shell's children with the same settings stay quiet; a child whose
# settings differ says its own.
run MRCACHE_LOG=loud bash -c '/bin/true; /bin/true; true'
[ "$(count 'MRCACHE_LOG="loud" is not valid')" -eq 1 ]
report bad_value_said_once_per_job $?
run MRCACHE_LOG=loud bash -c '/bin/true; MRCACHE_LOG=louder /bin/true; true'
[ "$(count 'MRCACHE_LOG="loud" is not valid')" -eq 1 ] && [ "$(count 'MRCACHE_LOG="louder" is not valid')" -eq 1 ]
report child_with_other_settings_says_its_own $?
run bash -c 'env' >"$tmp/env"
! grep -q '^MRCACHE_WARNED=' "$tmp/env"
report nothing_passed_on_when_nothing_was_said $?
run MRCACHE_MONITOR=none WL_COUNT=0 "$WL"
expect monitor_none_silent_without_registrations . 0

run SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 "$WL"
expect fork_safe_once 'fork-safe mode is on \(RDMAV_FORK_SAFE is set' 1
run SNIC_COPY_ON_FORK=0 IBV_FORK_SAFE=1 "$WL"
expect fork_safe_names_ibv_fork_safe 'fork-safe mode is on \(IBV_FORK_SAFE is set' 1
run SNIC_COPY_ON_FORK=1 RDMAV_FORK_SAFE=1 RDMAV_HUGEPAGES_SAFE=1 "$WL"
expect fork_safe_silent_where_unneeded "$ANY" 0
run SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 RDMAV_HUGEPAGES_SAFE=1 "$WL"
rc=$?
[ $rc -eq 0 ] && [ "$(count 'RDMAV_HUGEPAGES_SAFE is set')" -eq 1 ] && [ "$(count 'fork-safe mode is on')" -eq 1 ] &&
    [ "$(count "$ANY")" -eq 2 ]
report hugepages_safe_once_with_fork_safe $?

if run WL_UCX=1 WL_COUNT=0 "$WL"; then
    run WL_UCX=1 "$WL"
    expect ucx_rcache_once "UCX's registration cache is active" 1
    run WL_UCX=1 UCX_IB_REG_METHODS=direct "$WL"
    expect ucx_rcache_silent_with_direct_registration "$ANY" 0
    run WL_UCX=1 UCX_MEM_EVENTS=no "$WL"
    expect ucx_rcache_silent_without_memory_events "$ANY" 0
else
    for t in ucx_rcache_once ucx_rcache_silent_with_direct_registration ucx_rcache_silent_without_memory_events; do
        skip $t "UCX's libuct.so.0 and libucm.so.0 not loadable here (apt-get install libucx0)"
    done
fi

if run WL_FABRIC=1 WL_COUNT=0 "$WL"; then
    run WL_FABRIC=1 "$WL"
    expect libfabric_cache_off_once "libfabric is loaded: its registration cache stays off" 1
    run WL_FABRIC=1 FI_MR_CACHE_MONITOR=uffd "$WL"
    expect libfabric_second_cache_once "libfabric's registration cache is active .FI_MR_CACHE_MONITOR=uffd" 1
    run WL_FABRIC=1 FI_MR_CACHE_MONITOR=disabled "$WL"
    expect libfabric_silent_when_its_cache_is_disabled "$ANY" 0
else
    for t in libfabric_cache_off_once libfabric_second_cache_once libfabric_silent_when_its_cache_is_disabled; do
        skip $t "libfabric.so.1 not loadable here (apt-get install libfabric1)"
    done
fi

# RLIMIT_MEMLOCK binds an unprivileged process: 1 MiB, and 768 KiB registered passes half of
# it, 256 KiB does not. A uid of its own, and no child: the software NIC charges pins per
# user.
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    d="$tmp/user"
    mkdir -p "$d" && cp "$B/libmrcache.so" "$B"/snic/libibverbs.so.1 "$WL" "$d/" && chmod -R a+rX "$tmp"
    as_user() {
        setpriv --reuid=64997 --regid=64997 --clear-groups --inh-caps=-all bash -c \
            "ulimit -l 1024; cd $d; env $* LD_LIBRARY_PATH=$d LD_PRELOAD=$PP$d/libmrcache.so MRCACHE_STATS=off ./warn_workload" \
            2>"$tmp/err"
    }
    as_user WL_COUNT=12 WL_FORK=0
    expect memlock_once 'RLIMIT_MEMLOCK is 1024 KiB and this process now has [0-9]* KiB registered' 1
    as_user WL_COUNT=4 WL_FORK=0
    expect memlock_silent_within_half "$ANY" 0
else
    for t in memlock_once memlock_silent_within_half; do
        skip $t "needs root to switch to an unprivileged user"
    done
fi
# With CAP_IPC_LOCK the limit binds nothing.
if [ "$(id -u)" -eq 0 ]; then
    (ulimit -l 256 && run WL_COUNT=12 "$WL")
    expect memlock_silent_with_cap_ipc_lock "$ANY" 0
else
    skip memlock_silent_with_cap_ipc_lock "needs root for CAP_IPC_LOCK"
fi
exit 0
