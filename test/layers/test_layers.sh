#!/bin/sh
# test_layers.sh - the layer check must pass on the tree and fail on each kind of planted
# break, in a scratch copy of src/: an include from a layer above (the cache core
# reaching into the runtime), a folder that is no layer, verbs in the cache core, the
# program including a hook's header.
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { "$here/scripts/check-layers.sh" "$1" >"$tmp/out" 2>&1; }
plant() { # NAME: a fresh copy of src/ in $tmp/NAME
    rm -rf "$tmp/$1"
    cp -r "$here/src" "$tmp/$1"
}
expect_refused() { # TEST DIR MESSAGE: the check fails on DIR and says MESSAGE
    if ! check "$2" && grep -q "$3" "$tmp/out"; then
        echo "ok - $1"
    else
        cat "$tmp/out"
        echo "not ok - $1"
    fi
}

if check "$here/src"; then echo "ok - layers_tree_passes"; else cat "$tmp/out"; echo "not ok - layers_tree_passes"; fi

plant up
sed -i '0,/#include "core\/cache.h"/s//#include "core\/cache.h"\n#include "runtime\/state.h"/' "$tmp/up/core/cache.c"
expect_refused layers_upward_include_fails "$tmp/up" 'core/cache.c:[0-9]*: includes "runtime/state.h": runtime is above core'

plant folder
mkdir "$tmp/folder/misc" && printf '/* a file in no layer */\n' >"$tmp/folder/misc/x.c"
expect_refused layers_unknown_folder_fails "$tmp/folder" "folder 'misc' is not a layer"

plant verbs
sed -i '0,/#include <errno.h>/s//#include <errno.h>\n#include <infiniband\/verbs.h>/' "$tmp/verbs/core/cache.c"
expect_refused layers_verbs_in_core_fails "$tmp/verbs" 'core/cache.c: the cache core includes verbs'

plant program
sed -i '0,/#include "program\/top.h"/s//#include "program\/top.h"\n#include "interpose\/hooks.h"/' "$tmp/program/program/main.c"
expect_refused layers_program_beside_hooks_fails "$tmp/program" 'program/main.c:[0-9]*: includes "interpose/hooks.h": interpose stands beside program'
