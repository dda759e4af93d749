#!/usr/bin/env bash
# test_api.sh BUILD_DIR [PRELOAD_PREFIX] - the public header from outside: it compiles as
# strict C99 and as C++; numbered dumps to a configured MRCACHE_STATS file leave the exit
# dump its name; `make install` into a temporary DESTDIR gives the header, the library
# under its soname and a mrcache.pc that pkg-config turns into a working build.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$1
BA=$(cd "$B" && pwd)
PP=${2:-}
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
major=$(awk '$2 == "MRCACHE_VERSION_MAJOR" {print $3}' "$root/include/mrcache.h")
minor=$(awk '$2 == "MRCACHE_VERSION_MINOR" {print $3}' "$root/include/mrcache.h")
probe=$root/test/api/api_probe.c

# 1. Strict C99 (no _GNU_SOURCE: the RTLD_DEFAULT fallback) and C++, warnings as errors.
$CC -std=c99 -pedantic-errors -Wall -Wextra -Werror -Wshadow -Wcast-qual -Wconversion \
    -Wstrict-prototypes -Wmissing-prototypes -Wundef -I"$root/include" "$probe" -o "$tmp/probe_c99" -ldl
r=$?
[ $r -eq 0 ] && [ "$("$tmp/probe_c99")" = absent ] &&
    LD_PRELOAD="$PP$BA/libmrcache.so" MRCACHE_STATS=off "$tmp/probe_c99" | grep -q "^libmrcache $major.$minor monitors "
report header_strict_c99_with_and_without_preload $?
if command -v "${CXX:-c++}" >/dev/null; then
    "${CXX:-c++}" -x c++ -std=c++11 -Wall -Wextra -Werror -pedantic -I"$root/include" -c "$probe" -o "$tmp/probe_cxx.o"
    report header_compiles_as_cxx $?
else
    echo "ok - header_compiles_as_cxx # SKIP no C++ compiler"
fi

# 2. Dumps to the configured file pattern: numbered files, and the exit dump's own.
mkdir "$tmp/stats"
LD_LIBRARY_PATH="$BA/snic" LD_PRELOAD="$PP$BA/libmrcache.so" MRCACHE_STATS="$tmp/stats/s.%p" \
    API_ONLY=test_dump_configured "$BA/test/test_api" >"$tmp/dump.out" 2>&1
r=$?
grep -q '^ok - test_dump_configured' "$tmp/dump.out" && [ $r -eq 0 ] &&
    [ "$(ls "$tmp/stats" | wc -l)" -eq 1 ] && grep -q 'statistics (monitor:' "$tmp"/stats/s.*
r=$?
[ $r -eq 0 ] || { cat "$tmp/dump.out"; ls -l "$tmp/stats"; } >&2
report dump_to_configured_file_pattern $r

# 3. make install into a DESTDIR, then build against it with pkg-config only.
name=make_install_header_pkgconfig_soname
if ! grep -q 'mrcache\.pc' "$root/Makefile"; then
    echo "ok - $name # SKIP the Makefile's install does not install mrcache.pc yet"
    exit 0
fi
dest=$tmp/dest
prefix=/opt/mrcache-test
# A clean environment: the outer make's jobserver and flags are not for this one.
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$root" --no-print-directory install \
    BUILD="$B" DESTDIR="$dest" PREFIX="$prefix" >"$tmp/install.log" 2>&1
r=$?
lib=$dest$prefix/lib
fail() { echo "install: $*" >&2; r=1; }
[ $r -eq 0 ] || { cat "$tmp/install.log" >&2; fail "make install failed"; }
[ -f "$lib/libmrcache.so.$major.$minor" ] && [ ! -L "$lib/libmrcache.so.$major.$minor" ] || fail "no libmrcache.so.$major.$minor"
[ "$(readlink "$lib/libmrcache.so.$major")" = "libmrcache.so.$major.$minor" ] || fail "libmrcache.so.$major link"
[ "$(readlink "$lib/libmrcache.so")" = "libmrcache.so.$major" ] || fail "libmrcache.so link"
readelf -d "$lib/libmrcache.so.$major.$minor" | grep -q "SONAME.*\[libmrcache.so.$major\]" || fail "soname"
cmp -s "$root/include/mrcache.h" "$dest$prefix/include/mrcache.h" || fail "header"
# Only the installed tree: PKG_CONFIG_LIBDIR replaces the system's search path.
export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_LIBDIR=$lib/pkgconfig
[ "$(pkg-config --modversion mrcache)" = "$major.$minor" ] || fail "modversion $(pkg-config --modversion mrcache)"
[ "$(pkg-config --variable=preload mrcache)" = "$prefix/lib/libmrcache.so.$major" ] ||
    fail "preload variable $(pkg-config --variable=preload mrcache)"
# Staged in DESTDIR: the sysroot maps the installed paths into it, as in a package build.
flags=$(PKG_CONFIG_SYSROOT_DIR=$dest pkg-config --cflags --libs mrcache) || fail "pkg-config --cflags --libs"
echo "$flags" | grep -q -- "-I$dest$prefix/include" || fail "cflags: $flags"
# shellcheck disable=SC2086
$CC -std=gnu11 -Wall -Wextra -Werror "$probe" -o "$tmp/probe_pc" $flags || fail "build with pkg-config"
readelf -d "$tmp/probe_pc" | grep NEEDED | grep -q mrcache && fail "the program links libmrcache"
[ "$("$tmp/probe_pc")" = absent ] || fail "probe without preload"
out=$(LD_PRELOAD="$PP$lib/libmrcache.so.$major" MRCACHE_STATS=off "$tmp/probe_pc")
echo "$out" | grep -q "^libmrcache $major.$minor monitors [0-9]* stats 392$" || fail "probe preloaded: $out"
report $name $r
