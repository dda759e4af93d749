#!/bin/sh
# check-layers.sh - the rules of src/'s rooms, and of the library built from it.
#  - Includes point down: a file includes headers of its own layer or of layers below it,
#    never above, nor of a layer beside it. Layers, bottom to top: util, core, then
#    monitor, backend and verbs side by side, runtime, interpose; the cache core owns the
#    contract with the sources of memory events (core/events.h), which monitor publishes
#    through and the back-end reads its ranges' descriptions from; the public header (mrcache.h) is the runtime's and the interposition's;
#    the cache core includes no verbs and no dlfcn.h (it is tested with a fake back-end).
#    program/ (libmrcache run as a program: the viewer, --version, --config) stands on the
#    runtime beside the interposition: it is no hook and includes none of interpose/.
#  - One system-call layer: no file but util/sys.c makes a system call itself (the hook
#    of syscall(3) passes the program's on).
#  - Given the library (LIB), no JUMP_SLOT of it names an interposed function (the table
#    in util/interposed.h) that the table does not mark PLT_OK: such a call would enter
#    libmrcache's own hook (util/sys.h says why free may).
# Usage: check-layers.sh [SRC_DIR [LIB]]; prints each break and "ok - layers_point_down"
# or "not ok - layers_point_down"; exits 1 on any.
src=${1:-src}
lib=$2
rank() {
    case $1 in
    util) echo 1 ;; core) echo 2 ;; monitor) echo 3 ;; backend) echo 3 ;; verbs) echo 3 ;;
    runtime) echo 4 ;; interpose) echo 5 ;; program) echo 5 ;; mrcache.h) echo 4 ;; *) echo 0 ;;
    esac
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
for f in "$src"/*/*.[ch]; do
    [ -f "$f" ] || continue
    layer=$(basename "$(dirname "$f")")
    mine=$(rank "$layer")
    if [ "$mine" -eq 0 ]; then
        echo "$f: folder '$layer' is not a layer (util core monitor backend verbs runtime interpose program)"
        bad=1
        continue
    fi
    # Each quoted include as "line:target".
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):.*include[[:space:]]*"\([^"]*\)".*/\1:\2/' >"$tmp/includes"
    while IFS=: read -r line target; do
        case $target in
        */*) to=${target%%/*} ;;
        *) to=$target ;;
        esac
        [ "$to" = "$layer" ] && continue
        theirs=$(rank "$to")
        if [ "$theirs" -eq 0 ]; then
            echo "$f:$line: includes \"$target\", which is in no layer"
            bad=1
        elif [ "$theirs" -gt "$mine" ]; then
            echo "$f:$line: includes \"$target\": $to is above $layer"
            bad=1
        elif [ "$theirs" -eq "$mine" ] && [ "$to" != mrcache.h ]; then
            echo "$f:$line: includes \"$target\": $to stands beside $layer, not below it"
            bad=1
        fi
    done <"$tmp/includes"
    if [ "$layer" = core ] && grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<\(infiniband/\|dlfcn\.h\)' "$f"; then
        echo "$f: the cache core includes verbs or dlfcn.h"
        bad=1
    fi
    # A system call outside the layer: syscall(2), or the instruction itself. The hook
    # of syscall(3) is the program's call, passed on.
    if [ "${f#"$src"/}" != util/sys.c ] && [ "${f#"$src"/}" != interpose/hooks_syscall.c ]; then
        grep -nE '(^|[^_[:alnum:]])syscall[[:space:]]*\(|"syscall"' "$f" |
            grep -vE '^[0-9]+:[[:space:]]*(\*|/\*|//)' | while IFS=: read -r line text; do
                echo "$f:$line: makes a system call itself (util/sys.h is the one place)"
            done >"$tmp/sys"
        if [ -s "$tmp/sys" ]; then
            cat "$tmp/sys"
            bad=1
        fi
    fi
done
if [ -n "$lib" ]; then
    # The names the table forbids, expanded from the table itself.
    printf '#include "util/interposed.h"\nMRC_PLT_FORBIDDEN\n' |
        ${CC:-cc} -E -P -I"$src" -x c - 2>"$tmp/cpp.err" | tr -s ' \t' '\n\n' | grep . >"$tmp/forbidden"
    if [ ! -s "$tmp/forbidden" ]; then
        cat "$tmp/cpp.err"
        echo "$src/util/interposed.h: no interposed functions found in the table"
        bad=1
    elif ! readelf -rW "$lib" >"$tmp/relocs" 2>"$tmp/readelf.err"; then
        cat "$tmp/readelf.err"
        echo "$lib: cannot read its relocations"
        bad=1
    else
        awk '$3 ~ /JUMP_SLOT$/ { sub(/@.*/, "", $5); print $5 }' "$tmp/relocs" | sort -u >"$tmp/slots"
        sort -u "$tmp/forbidden" | comm -12 - "$tmp/slots" >"$tmp/hits"
        while read -r name; do
            echo "$lib: calls $name through its own PLT, into libmrcache's own hook (not PLT_OK in util/interposed.h: use util/sys.h)"
            bad=1
        done <"$tmp/hits"
    fi
fi
if [ "$bad" -eq 0 ]; then
    echo "ok - layers_point_down"
else
    echo "not ok - layers_point_down"
fi
exit "$bad"
