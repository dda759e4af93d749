#!/usr/bin/env bash
# test_api.sh BUILD_DIR [PRELOAD_PREFIX] - the public header from outside: it compiles as
# strict C99 and as C++; numbered dumps to a configured MRCACHE_STATS file leave the exit
# dump its name; `make install` into a temporary DESTDIR gives exactly the header, the
# library under its soname, a mrcache.pc that pkg-config turns into a working build, the
# commands (whose mrcache preloads that library) and the manual pages; `make uninstall`
# removes them all; ldconfig runs only for a live install.
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
probe=$root/test/package/api_probe.c

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

# 3. make install into a DESTDIR: exactly the files below; a build against it with
#    pkg-config only; its mrcache finds its own library (also once the tree is moved);
#    make uninstall leaves no file behind. ldconfig runs only for a live install.
name=make_install_header_pkgconfig_soname
dest=$tmp/dest
prefix=/opt/mrcache-test
# A clean environment: the outer make's jobserver and flags are not for this one.
mk() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$root" --no-print-directory BUILD="$B" "$@"; }
# A stand-in ldconfig first on PATH records each call.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho ldconfig >>"%s"\n' "$tmp/ldconfig.calls" >"$tmp/fakebin/ldconfig"
chmod +x "$tmp/fakebin/ldconfig"
PATH=$tmp/fakebin:$PATH mk install DESTDIR="$dest" PREFIX="$prefix" >"$tmp/install.log" 2>&1
r=$?
lib=$dest$prefix/lib
fail() { echo "install: $*" >&2; r=1; }
[ $r -eq 0 ] || { cat "$tmp/install.log" >&2; fail "make install failed"; }
[ -f "$lib/libmrcache.so.$major.$minor" ] && [ ! -L "$lib/libmrcache.so.$major.$minor" ] || fail "no libmrcache.so.$major.$minor"
[ "$(readlink "$lib/libmrcache.so.$major")" = "libmrcache.so.$major.$minor" ] || fail "libmrcache.so.$major link"
[ "$(readlink "$lib/libmrcache.so")" = "libmrcache.so.$major" ] || fail "libmrcache.so link"
readelf -d "$lib/libmrcache.so.$major.$minor" | grep -q "SONAME.*\[libmrcache.so.$major\]" || fail "soname"
cmp -s "$root/include/mrcache.h" "$dest$prefix/include/mrcache.h" || fail "header"
! grep -q '^#' "$lib/pkgconfig/mrcache.pc" || fail "mrcache.pc keeps its template's comment"
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
echo "$out" | grep -q "^libmrcache $major.$minor monitors [0-9]* stats 400$" || fail "probe preloaded: $out"
report $name $r

r=0
(cd "$dest" && find . ! -type d | sed 's|^\./||' | sort) >"$tmp/installed"
p=${prefix#/}
cat >"$tmp/expected" <<EOF_LIST
$p/bin/mrcache
$p/bin/mrcache-report
$p/include/mrcache.h
$p/lib/libmrcache.so
$p/lib/libmrcache.so.$major
$p/lib/libmrcache.so.$major.$minor
$p/lib/pkgconfig/mrcache.pc
$p/share/doc/libmrcache/LICENSE
$p/share/man/man1/mrcache-report.1
$p/share/man/man1/mrcache.1
$p/share/man/man3/mrcache.3
$p/share/man/man3/mrcache_flush.3
$p/share/man/man3/mrcache_invalidate.3
$p/share/man/man3/mrcache_monitors.3
$p/share/man/man3/mrcache_stats_dump.3
$p/share/man/man3/mrcache_stats_read.3
$p/share/man/man3/mrcache_version.3
$p/share/man/man7/libmrcache.7
EOF_LIST
sort -o "$tmp/expected" "$tmp/expected"
diff -u "$tmp/expected" "$tmp/installed" >&2 || r=1
[ -x "$dest$prefix/bin/mrcache" ] && [ -x "$dest$prefix/bin/mrcache-report" ] || { echo "commands not executable" >&2; r=1; }
[ ! -e "$tmp/ldconfig.calls" ] || { echo "ldconfig ran for a DESTDIR install" >&2; r=1; }
report make_install_installs_exactly_its_files $r

# The installed mrcache preloads the installed library, found from its own place.
r=0
bin=$dest$prefix/bin
out=$("$bin/mrcache" --version)
[ "$out" = "mrcache $major.$minor
libmrcache $major.$minor: $lib/libmrcache.so.$major" ] || { echo "installed mrcache --version: $out" >&2; r=1; }
env LD_LIBRARY_PATH="$BA/snic" ${PP:+LD_PRELOAD=${PP%:}} "$bin/mrcache" --json --stats="$tmp/inst.%p.json" "$BA/test/test_verbs" \
    >/dev/null 2>"$tmp/inst.err" || { cat "$tmp/inst.err" >&2; r=1; }
f=$(ls "$tmp"/inst.*.json 2>/dev/null | head -1)
[ -n "$f" ] && grep -q '"hits": [1-9]' "$f" || { echo "installed mrcache: no statistics with hits" >&2; r=1; }
LD_PRELOAD=${PP%:} "$bin/mrcache" printenv LD_PRELOAD | grep -qx "$PP$lib/libmrcache.so.$major" || { echo "LD_PRELOAD names another library" >&2; r=1; }
mv "$dest$prefix" "$tmp/moved"
out=$("$tmp/moved/bin/mrcache" --version | sed -n 2p)
[ "$out" = "libmrcache $major.$minor: $tmp/moved/lib/libmrcache.so.$major" ] || { echo "moved tree: $out" >&2; r=1; }
mv "$tmp/moved" "$dest$prefix"
if command -v python3 >/dev/null; then
    out=$("$bin/mrcache-report" --version)
    case $out in "mrcache-report $major.$minor "*) ;; *) echo "installed mrcache-report --version: $out" >&2; r=1 ;; esac
fi
if command -v man >/dev/null; then
    MANPATH=$dest$prefix/share/man MANWIDTH=80 man mrcache_flush 2>&1 | grep -q 'mrcache_flush(struct ibv_pd' ||
        { echo "man mrcache_flush does not show mrcache(3)" >&2; r=1; }
fi
report installed_mrcache_uses_installed_library $r

# make uninstall with the same PREFIX and DESTDIR: no file left, no link left, no directory.
PATH=$tmp/fakebin:$PATH mk uninstall DESTDIR="$dest" PREFIX="$prefix" >"$tmp/uninstall.log" 2>&1
r=$?
left=$(cd "$dest" && find . ! -type d)
# The directories it made go too: the prefix is its own.
[ $r -eq 0 ] && [ -z "$left" ] && [ ! -e "$tmp/ldconfig.calls" ] && [ ! -e "$dest$prefix" ]
r=$?
[ $r -eq 0 ] || { cat "$tmp/uninstall.log"; echo "left: $left"; } >&2
report make_uninstall_leaves_nothing $r

# As a normal user, into a prefix it cannot write: one line saying what to do instead.
if [ "$(id -u)" -ne 0 ]; then
    mk install PREFIX=/usr/local >/dev/null 2>"$tmp/denied.err"
    [ $? -ne 0 ] && grep -q 'make install: /usr/local is not writable by .*PREFIX=' "$tmp/denied.err"
    report make_install_unwritable_prefix_says_so $?
fi

# Into the live system (no DESTDIR) as root, install and uninstall each run ldconfig once.
if [ "$(id -u)" -eq 0 ]; then
    live=$tmp/live
    PATH=$tmp/fakebin:$PATH mk install PREFIX="$live" >"$tmp/live.log" 2>&1 &&
        [ "$(cat "$tmp/ldconfig.calls" 2>/dev/null)" = ldconfig ] &&
        PATH=$tmp/fakebin:$PATH mk uninstall PREFIX="$live" >>"$tmp/live.log" 2>&1 &&
        [ "$(wc -l <"$tmp/ldconfig.calls")" -eq 2 ] && [ ! -e "$live" ]
    r=$?
    [ $r -eq 0 ] || cat "$tmp/live.log" >&2
    report make_install_live_runs_ldconfig $r
else
    echo "ok - make_install_live_runs_ldconfig # SKIP needs root (ldconfig runs only for root's live installs)"
fi
