#!/bin/sh
# gen-variables.sh - the ENVIRONMENT entries of libmrcache(7), made from the library's own
# table (the MRCACHE_HELP=1 output of a process under the preload), so the manual page
# cannot drift from the library: test/package/test_man.sh compares the two.
# Usage: man/gen-variables.sh LIBRARY [PRELOAD_PREFIX]            prints the entries (roff)
#        man/gen-variables.sh --update LIBRARY [PRELOAD_PREFIX]   rewrites them in man/libmrcache.7
# (PRELOAD_PREFIX: what must be preloaded first, as a sanitizer build's runtime "libasan.so:")
set -eu
update=0
[ "${1:-}" = --update ] && { update=1; shift; }
[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: man/gen-variables.sh [--update] LIBRARY [PRELOAD_PREFIX]" >&2; exit 2; }
lib=$1 prefix=${2:-}
case $lib in /*) ;; *) lib=$(pwd)/$lib ;; esac
page=$(cd "$(dirname "$0")" && pwd)/libmrcache.7
BEGIN='.\" BEGIN VARIABLES (man/gen-variables.sh writes this part from MRCACHE_HELP=1; do not edit)'
END='.\" END VARIABLES'

entries() {
    # Nothing of the caller's MRCACHE_* settings may change the table's defaults.
    env -i PATH="${PATH:-/usr/bin:/bin}" LD_PRELOAD="$prefix$lib" MRCACHE_HELP=1 MRCACHE_STATS=off /bin/true 2>&1 |
        awk 'function out() {
                 if (name == "") return
                 gsub(/\\/, "\\e", text)
                 printf ".TP\n.BR %s \" (default: \" \"%s\" )\n%s\n", name, def, text; n++; name = "" }
             $1 ~ /^MRCACHE_[A-Z0-9_]+$/ {
                 out(); name = $1; def = $2; sub(/^[ \t]*[^ \t]+[ \t]+[^ \t]+[ \t]+/, ""); text = $0; next }
             /^[ \t]+[^ \t]/ && name != "" { sub(/^[ \t]+/, ""); text = text " " $0; next }
             { out() }
             END { out(); if (!n) exit 1 }'
}

out=$(entries) || { echo "gen-variables.sh: $lib printed no MRCACHE_HELP table" >&2; exit 1; }
if [ $update -eq 0 ]; then
    printf '%s\n' "$out"
    exit 0
fi
grep -qF "$BEGIN" "$page" && grep -qF "$END" "$page" || { echo "gen-variables.sh: no markers in $page" >&2; exit 1; }
tmp=$page.tmp
{
    sed "/^\.\\\\\" BEGIN VARIABLES/q" "$page"
    printf '%s\n' "$out"
    sed -n "/^\.\\\\\" END VARIABLES/,\$p" "$page"
} >"$tmp" && mv "$tmp" "$page"
