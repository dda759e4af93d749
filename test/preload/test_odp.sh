#!/usr/bin/env bash
# test_odp.sh - test_odp under every combination of what the software NIC supports
# (SNIC_ODP) and what the cache may do (MRCACHE_ODP, MRCACHE_ODP_PREFETCH), and what a
# process says about it: one warning line where a mode asked for stays off, the device's
# odp_caps at MRCACHE_LOG=info, and the statistics (text and JSON).
# Usage: test_odp.sh BUILD_DIR [PRELOAD_PREFIX]   (prints "ok - name" lines)
set -u
B=$(cd "$1" && pwd)
PP=${2:-}
RUN="env LD_LIBRARY_PATH=$B/snic LD_PRELOAD=$PP$B/libmrcache.so"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }

# Every combination; test_odp's own lines are prefixed with it.
for dev in 0 explicit implicit; do
    for mode in off fallback implicit; do
        for pf in 1 0; do
            [ "$pf" = 0 ] && [ "$dev/$mode" != implicit/implicit ] && continue
            name="snic_odp=$dev,mrcache_odp=$mode,prefetch=$pf"
            $RUN MRCACHE_STATS=off SNIC_ODP=$dev SNIC_ODP_FAULT_NS=20000 MRCACHE_ODP=$mode \
                MRCACHE_ODP_PREFETCH=$pf "$B/test/test_odp" >"$tmp/out" 2>"$tmp/err"
            r=$?
            sed "s/^\(not \)\{0,1\}ok - /&$name: /" "$tmp/out"
            grep -q '^not ok' "$tmp/out" && cat "$tmp/err" >&2
            [ $r -eq 0 ] || [ -n "$(grep '^not ok' "$tmp/out")" ] || report "$name: exit status" $r
            # What a mode that stays off says: one line per process that registered.
            lines=$(grep -c 'MRCACHE_ODP' "$tmp/err")
            case $dev/$mode in
            */off) [ "$lines" -eq 0 ] ;;
            0/*) [ "$lines" -ge 1 ] && [ "$(grep -c "has no on-demand paging; its registrations are pinned, as with off" "$tmp/err")" -eq "$lines" ] ;;
            explicit/implicit) [ "$lines" -ge 1 ] && [ "$(grep -c "has no implicit on-demand paging" "$tmp/err")" -eq "$lines" ] ;;
            *) [ "$lines" -eq 0 ] ;;
            esac
            report "$name: stderr says what stays off" $?
        done
    done
done

# With the userfaultfd source on: what the implicit MR serves is never given to it (no
# warning about a range it cannot watch, no unwatched count: test_implicit_never_watched).
$RUN MRCACHE_STATS=off SNIC_ODP=implicit MRCACHE_ODP=implicit MRCACHE_MONITOR=patch,preload,uffd "$B/test/test_odp" \
    >"$tmp/out" 2>"$tmp/err"
sed "s/^\(not \)\{0,1\}ok - /&uffd,mrcache_odp=implicit: /" "$tmp/out"
! grep -q 'uffd: a registration is not watched' "$tmp/err"
report implicit_odp_never_watched_warning $?

# The device's capabilities at info level, once per context.
$RUN MRCACHE_STATS=off MRCACHE_LOG=info SNIC_ODP=implicit MRCACHE_ODP=fallback "$B/test/test_odp" >/dev/null 2>"$tmp/info"
grep -q 'snic0: odp_caps general 0x3, rc 0x3f, uc 0, ud 0x3' "$tmp/info"
report odp_caps_at_log_info $?

# The statistics: the counters, the mode and the device's capabilities.
$RUN MRCACHE_STATS="$tmp/s.%p.json" MRCACHE_STATS_FORMAT=json SNIC_ODP=implicit MRCACHE_ODP=implicit \
    "$B/test/test_odp" >/dev/null 2>&1
python3 - "$tmp" <<'PY'
import glob, json, sys
runs = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/s.*.json")]
ok = len(runs) == 1   # the program (its forked child leaves with _exit)
for s in runs:
    c, odp = s["counters"], s["odp"]
    ok = ok and odp["mode"] == "implicit" and odp["devices"][0]["name"] == "snic0"
    ok = ok and odp["devices"][0]["general_caps"] == 3 and odp["devices"][0]["rc_odp_caps"] == 0x3f
fb = sum(s["counters"]["odp_fallbacks"] for s in runs)
imp = sum(s["counters"]["odp_implicit"] for s in runs)
pf = sum(s["counters"]["odp_prefetches"] for s in runs)
ok = ok and fb >= 1 and imp >= 64 and pf >= imp
if not ok:
    print("stats:", fb, imp, pf, json.dumps([s["odp"] for s in runs]), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
report odp_in_json_statistics $?
$RUN MRCACHE_STATS=stderr SNIC_ODP=implicit MRCACHE_ODP=fallback "$B/test/test_odp" >/dev/null 2>"$tmp/text"
grep -q 'on demand (MRCACHE_ODP=fallback): [1-9][0-9]* fallbacks, 0 served by implicit MRs, .* snic0 odp_caps 0x3 rc 0x3f uc 0 ud 0x3' "$tmp/text"
report odp_in_text_statistics $?
exit 0
