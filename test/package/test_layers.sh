#!/bin/sh
# test_layers.sh - the layer check must pass on the tree and its library, and fail on each
# kind of planted break, in a scratch copy of src/: an include from a layer above (the
# cache core reaching into the runtime, or into a source of memory events, whose contract
# it owns), an include from a layer beside (the verbs front-end reaching into the
# back-end past the cache, the back-end into a source instead of its range's description), a folder that is no layer, verbs in the cache core, the program including a hook's header, a system call outside util/sys.c; and in
# the library: a PLT call of an interposed function (a small object that calls its own
# close), and free's call through the PLT once the table no longer marks it deliberate.
# Usage: test_layers.sh LIB (the library built from src/).
here=$(cd "$(dirname "$0")/../.." && pwd)
lib=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { "$here/scripts/check-layers.sh" "$@" >"$tmp/out" 2>&1; }
plant() { # NAME: a fresh copy of src/ in $tmp/NAME
    rm -rf "$tmp/$1"
    cp -r "$here/src" "$tmp/$1"
}
expect_refused() { # TEST MESSAGE ARGS...: the check fails on ARGS and says MESSAGE
    t=$1 m=$2
    shift 2
    if ! check "$@" && grep -q "$m" "$tmp/out"; then
        echo "ok - $t"
    else
        cat "$tmp/out"
        echo "not ok - $t"
    fi
}

if check "$here/src" "$lib"; then echo "ok - layers_tree_passes"; else cat "$tmp/out"; echo "not ok - layers_tree_passes"; fi

plant up
sed -i '0,/#include "core\/cache.h"/s//#include "core\/cache.h"\n#include "runtime\/state.h"/' "$tmp/up/core/cache.c"
expect_refused layers_upward_include_fails 'core/cache.c:[0-9]*: includes "runtime/state.h": runtime is above core' "$tmp/up"

plant source
sed -i '0,/#include "core\/cache.h"/s//#include "core\/cache.h"\n#include "monitor\/uffd.h"/' "$tmp/source/core/cache.c"
expect_refused layers_core_into_source_fails 'core/cache.c:[0-9]*: includes "monitor/uffd.h": monitor is above core' "$tmp/source"

plant beside
sed -i '0,/#include "util\/callsite.h"/s//#include "util\/callsite.h"\n#include "backend\/verbs_ops.h"/' "$tmp/beside/verbs/mr.c"
expect_refused layers_frontend_beside_backend_fails 'verbs/mr.c:[0-9]*: includes "backend/verbs_ops.h": backend stands beside verbs' "$tmp/beside"

plant backend_monitor
sed -i '0,/#include "backend\/odp.h"/s//#include "backend\/odp.h"\n#include "monitor\/maps.h"/' "$tmp/backend_monitor/backend/odp.c"
expect_refused layers_backend_beside_monitor_fails 'backend/odp.c:[0-9]*: includes "monitor/maps.h": monitor stands beside backend' "$tmp/backend_monitor"

plant folder
mkdir "$tmp/folder/misc" && printf '/* a file in no layer */\n' >"$tmp/folder/misc/x.c"
expect_refused layers_unknown_folder_fails "folder 'misc' is not a layer" "$tmp/folder"

plant verbs
sed -i '0,/#include <errno.h>/s//#include <errno.h>\n#include <infiniband\/verbs.h>/' "$tmp/verbs/core/cache.c"
expect_refused layers_verbs_in_core_fails 'core/cache.c: the cache core includes verbs' "$tmp/verbs"

plant program
sed -i '0,/#include "program\/top.h"/s//#include "program\/top.h"\n#include "interpose\/hooks.h"/' "$tmp/program/program/main.c"
expect_refused layers_program_beside_hooks_fails 'program/main.c:[0-9]*: includes "interpose/hooks.h": interpose stands beside program' "$tmp/program"

plant syscall
printf 'long mrc_planted(void);\nlong mrc_planted(void)\n{\n    return syscall(SYS_getpid);\n}\n' >>"$tmp/syscall/runtime/state.c"
expect_refused layers_syscall_outside_sys_fails 'runtime/state.c:[0-9]*: makes a system call itself' "$tmp/syscall"

# An object that defines close and calls it, as the library once called its own open,
# close, ioctl and mmap: with -fPIC the call goes through its PLT to whatever close binds to.
printf 'int close(int fd);\nint close(int fd) { return fd; }\nint probe(int fd);\nint probe(int fd) { return close(fd) + 1; }\n' >"$tmp/plt.c"
${CC:-cc} -O0 -fPIC -shared -o "$tmp/plt.so" "$tmp/plt.c"
expect_refused layers_plt_call_fails "plt.so: calls close through its own PLT" "$here/src" "$tmp/plt.so"

# The rule is the table's: free's call through the PLT is refused once its row says PLT_NO.
plant table
sed -i 's/^\(    F(free, free, .*\)PLT_OK)/\1PLT_NO)/' "$tmp/table/util/interposed.h"
if grep -q 'F(free, free, .*PLT_NO)' "$tmp/table/util/interposed.h"; then
    expect_refused layers_plt_rule_from_table "calls free through its own PLT" "$tmp/table" "$lib"
else
    echo "not ok - layers_plt_rule_from_table (free's row not found in util/interposed.h)"
fi
