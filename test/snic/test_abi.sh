#!/usr/bin/env bash
# test_abi.sh SNIC_DIR LINKCHECK [PRELOAD] - the software NIC as a drop-in libibverbs.so.1:
# every symbol it exports is exported by Debian's library under the same default version;
# programs linked against the real library (LINKCHECK, ibv_devices, ibv_devinfo) run on
# it through LD_LIBRARY_PATH alone. PRELOAD (a sanitizer runtime, may be empty) goes first
# in LD_PRELOAD for programs that are not instrumented themselves.
set -u
dir=$1 linkcheck=$2 preload=${3:-}
lib=$dir/libibverbs.so.1
# ldconfig lives in /sbin, which a normal user's PATH lacks.
ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
sys=$("$ldconfig" -p | awk '$1 == "libibverbs.so.1" { print $NF; exit }')
run_on_snic() { LD_PRELOAD="$preload" LD_LIBRARY_PATH="$dir" "$@"; }
ok() { echo "ok - $1"; }
not_ok() { echo "not ok - $1"; shift; printf '  %s\n' "$@"; }

# "VERSION name" per defined dynamic symbol; a hidden (non-default) version is "(VERSION)".
exports() { objdump -T "$1" | awk '$0 !~ /\*UND\*/ && NF >= 7 && $NF != $(NF-1) { print $(NF-1), $NF }'; }

if [ -z "$sys" ]; then
    not_ok exports_are_debians "no system libibverbs.so.1 found by ldconfig"
else
    extra=$(comm -23 <(exports "$lib" | grep -v '^SNIC_1.0 ' | sort) <(exports "$sys" | sort))
    if [ -z "$extra" ]; then ok exports_are_debians; else not_ok exports_are_debians $extra; fi
fi

if exports "$lib" | grep -qx 'IBVERBS_1.1 ibv_reg_mr' &&
   exports "$lib" | grep -qx 'IBVERBS_1.8 ibv_reg_mr_iova2' &&
   [ "$(exports "$lib" | grep -c '^SNIC_1.0 snic_')" -eq 10 ]; then
    ok default_versions_and_snic_node
else
    not_ok default_versions_and_snic_node "$(exports "$lib" | grep -E 'reg_mr|snic_')"
fi

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libibverbs.so.1 ]; then ok soname; else not_ok soname "$soname"; fi

# Linked against the system library, so it only finds the NIC through LD_LIBRARY_PATH.
out=$(run_on_snic "$linkcheck" 2>&1)
if [ $? -eq 0 ] && [ "$out" = snic0 ] && ! LD_PRELOAD="$preload" "$linkcheck" >/dev/null 2>&1; then
    ok system_linked_program_runs_on_snic
else
    not_ok system_linked_program_runs_on_snic "$out"
fi

if ! command -v ibv_devices >/dev/null; then
    echo "ok - ibv_devices_lists_snic0 # SKIP ibverbs-utils not installed"
else
    out=$(run_on_snic ibv_devices 2>&1)
    if echo "$out" | grep -Eq '^\s*snic0\s+5e1c000000000001$'; then
        ok ibv_devices_lists_snic0
    else
        not_ok ibv_devices_lists_snic0 "$out"
    fi
    out=$(run_on_snic ibv_devinfo 2>&1)
    if [ $? -eq 0 ] && echo "$out" | grep -q 'hca_id:.*snic0' && echo "$out" | grep -q PORT_ACTIVE; then
        ok ibv_devinfo_shows_active_port
    else
        not_ok ibv_devinfo_shows_active_port "$out"
    fi
fi
