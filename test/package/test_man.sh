#!/usr/bin/env bash
# test_man.sh BUILD_DIR [PRELOAD_PREFIX] - the manual pages: each renders without a single
# groff warning and through man -l; libmrcache(7)'s variables are the library's table (as
# man/gen-variables.sh writes it); mrcache(1) and mrcache-report(1) document every option
# the commands accept; mrcache(3) names every call of the header; each names the license.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$(cd "$1" && pwd)
PP=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
report() { if [ "$2" -eq 0 ]; then echo "ok - $1"; else echo "not ok - $1"; fi; }
pages="libmrcache.7 mrcache.1 mrcache-report.1 mrcache.3"
major=$(awk '$2 == "MRCACHE_VERSION_MAJOR" {print $3}' "$root/include/mrcache.h")
minor=$(awk '$2 == "MRCACHE_VERSION_MINOR" {print $3}' "$root/include/mrcache.h")

# 1. Rendering: groff with every warning on, and man -l, both silent.
if command -v groff >/dev/null; then
    for p in $pages; do
        f=$B/man/$p
        r=0
        [ -f "$f" ] || { echo "$f not built" >&2; r=1; }
        [ $r -eq 0 ] && { groff -ww -man -Tutf8 -z "$f" 2>"$tmp/groff.err" || r=1; }
        [ -s "$tmp/groff.err" ] && { sed "s|^|$p: |" "$tmp/groff.err" >&2; r=1; }
        report "man_${p}_renders_without_warnings" $r
    done
else
    for p in $pages; do echo "ok - man_${p}_renders_without_warnings # SKIP groff not installed (scripts/install-deps.sh installs groff-base)"; done
fi
if command -v man >/dev/null; then
    r=0
    for p in $pages; do
        MANWIDTH=80 man -l "$B/man/$p" >"$tmp/man.out" 2>"$tmp/man.err" || r=1
        [ -s "$tmp/man.err" ] && { sed "s|^|$p: |" "$tmp/man.err" >&2; r=1; }
        # The page's name heads it, with the version filled in.
        head -1 "$tmp/man.out" | grep -qi "^${p%.*}(${p##*.})" || { echo "$p: no header line" >&2; r=1; }
        grep -q "libmrcache $major\.$minor" "$tmp/man.out" || { echo "$p: version $major.$minor not in the footer" >&2; r=1; }
    done
    report man_pages_open_with_man_l $r
else
    echo "ok - man_pages_open_with_man_l # SKIP man not installed (scripts/install-deps.sh installs man-db)"
fi
r=0
grep -l '@[A-Z_]*@' $(printf "$B/man/%s " $pages) >&2 && r=1
report man_pages_have_no_placeholders_left $r

# 2. libmrcache(7)'s variables are exactly the library's table, names, defaults and meanings.
"$root/man/gen-variables.sh" "$B/libmrcache.so" "$PP" >"$tmp/vars.gen" 2>"$tmp/vars.err"
r=$?
sed -n '/^\.\\" BEGIN VARIABLES/,/^\.\\" END VARIABLES/p' "$root/man/libmrcache.7" | sed '1d;$d' >"$tmp/vars.page"
[ $r -eq 0 ] && [ -s "$tmp/vars.page" ] && diff -u "$tmp/vars.page" "$tmp/vars.gen" >"$tmp/vars.diff"
r=$?
[ $r -eq 0 ] || { cat "$tmp/vars.err" "$tmp/vars.diff"; echo "(man/gen-variables.sh --update $1/libmrcache.so rewrites them)"; } >&2
report man_variables_match_library_table $r
# The same names as MRCACHE_HELP=1 prints, counted independently of the generator.
LD_PRELOAD="$PP$B/libmrcache.so" MRCACHE_HELP=1 MRCACHE_STATS=off /bin/true 2>&1 | awk '/^MRCACHE_/ {print $1}' | sort >"$tmp/help.names"
awk '/^\.TP/ {tp = 1; next} tp && $1 == ".BR" {print $2} {tp = 0}' "$tmp/vars.page" | sort >"$tmp/page.names"
[ -s "$tmp/help.names" ] && cmp -s "$tmp/help.names" "$tmp/page.names"
r=$?
[ $r -eq 0 ] || diff "$tmp/help.names" "$tmp/page.names" >&2
report man_variable_names_are_help_names $r

# 3. Every option the commands accept is in their page (as roff writes it: \-\-name).
opts=$("$root/scripts/mrcache" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
r=0
[ -n "$opts" ] || r=1
for o in $opts; do
    grep -qF -- "$(printf '%s' "$o" | sed 's/-/\\-/g')" "$root/man/mrcache.1" || { echo "mrcache.1 lacks $o" >&2; r=1; }
done
report man_mrcache_1_documents_every_option $r
if command -v python3 >/dev/null; then
    opts=$(python3 "$root/scripts/mrcache-report" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
    r=0
    [ -n "$opts" ] || r=1
    for o in $opts; do
        grep -qF -- "$(printf '%s' "$o" | sed 's/-/\\-/g')" "$root/man/mrcache-report.1" || { echo "mrcache-report.1 lacks $o" >&2; r=1; }
    done
    report man_mrcache_report_1_documents_every_option $r
else
    echo "ok - man_mrcache_report_1_documents_every_option # SKIP python3 not installed"
fi
# 4. mrcache(3) names every call of the public header.
calls=$(sed -n 's/^static inline int \(mrcache_[a-z_]*\)(.*/\1/p' "$root/include/mrcache.h")
r=0
[ "$(echo "$calls" | wc -w)" -ge 6 ] || r=1
for c in $calls; do
    sed -n '/^\.SH NAME/,/^\.SH/p' "$root/man/mrcache.3" | grep -qw "$c" || { echo "mrcache.3's NAME lacks $c" >&2; r=1; }
    grep -q "^\.BI\? \"int $c(" "$root/man/mrcache.3" || { echo "mrcache.3's SYNOPSIS lacks $c" >&2; r=1; }
    grep -qw "$c" "$root/Makefile" || { echo "the Makefile installs no page for $c" >&2; r=1; }
done
report man_mrcache_3_names_every_call $r
# 5. Each page names the license, as the LICENSE file does.
r=0
grep -q 'BSD 2-Clause License' "$root/LICENSE" || r=1
for p in $pages; do grep -q 'BSD 2\\-Clause License' "$root/man/$p" || { echo "$p does not name the license" >&2; r=1; }; done
report man_pages_name_the_license $r
exit 0
