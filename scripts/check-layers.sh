#!/bin/sh
# check-layers.sh - the include rule of src/: a file includes headers of its own layer or
# of layers below it, never above. Layers, bottom to top: util monitor core backend verbs
# runtime interpose. The public header (mrcache.h) is the runtime's and the
# interposition's; the cache core includes no verbs and no dlfcn.h (it is tested with a
# fake back-end). program/ (libmrcache run as a program: the viewer, --version, --config)
# stands on the runtime beside the interposition: it is no hook and includes none of
# interpose/. Usage: check-layers.sh [SRC_DIR]; prints each broken include and
# "ok - layers_point_down" or "not ok - layers_point_down"; exits 1 on any.
src=${1:-src}
rank() {
    case $1 in
    util) echo 1 ;; monitor) echo 2 ;; core) echo 3 ;; backend) echo 4 ;; verbs) echo 5 ;;
    runtime) echo 6 ;; interpose) echo 7 ;; program) echo 7 ;; mrcache.h) echo 6 ;; *) echo 0 ;;
    esac
}
bad=0
for f in "$src"/*/*.[ch]; do
    [ -f "$f" ] || continue
    layer=$(basename "$(dirname "$f")")
    mine=$(rank "$layer")
    if [ "$mine" -eq 0 ]; then
        echo "$f: folder '$layer' is not a layer (util monitor core backend verbs runtime interpose program)"
        bad=1
        continue
    fi
    # Each quoted include as "line:target".
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
        sed 's/^\([0-9]*\):.*include[[:space:]]*"\([^"]*\)".*/\1:\2/' >"${TMPDIR:-/tmp}/layers.$$"
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
    done <"${TMPDIR:-/tmp}/layers.$$"
    rm -f "${TMPDIR:-/tmp}/layers.$$"
    if [ "$layer" = core ] && grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<\(infiniband/\|dlfcn\.h\)' "$f"; then
        echo "$f: the cache core includes verbs or dlfcn.h"
        bad=1
    fi
done
if [ "$bad" -eq 0 ]; then
    echo "ok - layers_point_down"
else
    echo "not ok - layers_point_down"
fi
exit "$bad"
