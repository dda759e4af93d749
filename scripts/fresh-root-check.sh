#!/usr/bin/env bash
# fresh-root-check.sh - runs the README's quick-start commands on a fresh minimal Debian 12:
# a debootstrap'ed root (cached as a tarball, rebuilt when its inputs change), a clone of
# this repository copied in, each command run as root in its own fresh copy of the root,
# inside private mount and pid namespaces (nothing mounted or started outlives the run).
# Ends with "N passed, N failed[, N skipped]". Needs root, debootstrap, unshare, git.
set -uo pipefail

usage() {
    cat <<'EOF'
Usage: scripts/fresh-root-check.sh [--cache DIR] [--ref REV] [--keep] [--only demo|test]
  --cache DIR   where the bootstrapped root's tarball and the downloaded packages are kept
                (default $FRESH_ROOT_CACHE or /var/cache/mrcache-fresh-root)
  --ref REV     the commit to clone into the root (default HEAD; WORKTREE: the working
                tree as it is, uncommitted changes and new files included)
  --keep        leave the roots in place (their paths are printed)
  --only WHICH  run only the demo command or only the test command
Environment: FRESH_ROOT_MIRROR (default: the host's apt mirror for bookworm),
FRESH_ROOT_MAX_AGE (days before the cached root is bootstrapped again; default 30).
EOF
}

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CACHE=${FRESH_ROOT_CACHE:-/var/cache/mrcache-fresh-root}
REF=HEAD KEEP=0 ONLY=
while [ $# -gt 0 ]; do
    case $1 in
    --cache) CACHE=${2:?--cache needs a directory}; shift 2 ;;
    --ref) REF=${2:?--ref needs a revision}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --only) ONLY=${2:?--only needs demo or test}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fresh-root-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $ONLY in ''|demo|test) ;; *) echo "fresh-root-check.sh: --only takes demo or test" >&2; exit 2 ;; esac

SUITE=bookworm VARIANT=minbase
# The README's quick-start commands, verbatim.
CMD_DEMO='scripts/install-deps.sh && make demo'
CMD_TEST='scripts/install-deps.sh && make test'

pass=0 fail=0 skip=0 todo=0
result() {  # result NAME STATUS [WHY]
    if [ "$2" -eq 0 ]; then echo "ok - $1"; pass=$((pass + 1)); else echo "not ok - $1${3:+ ($3)}"; fail=$((fail + 1)); fi
}
finish() {
    local summary="$pass passed, $fail failed"
    [ $skip -gt 0 ] && summary="$summary, $skip skipped"
    [ $todo -gt 0 ] && summary="$summary, $todo todo"
    echo "$summary"
    [ $fail -eq 0 ]
    exit
}
now() { date +%s; }

missing=
[ "$(id -u)" -eq 0 ] || missing="root"
for t in debootstrap unshare chroot git tar sha256sum flock; do
    command -v $t >/dev/null || missing="$missing${missing:+, }$t"
done
if [ -n "$missing" ]; then
    echo "not ok - fresh_root_prerequisites (needs $missing; scripts/install-deps.sh --fresh-root installs debootstrap)"
    fail=1
    finish
fi

# The mirror the host's apt uses for the suite: deb822 .sources files, then one-line lists.
host_mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$SUITE" '
            function flush() { if (deb && uri != "" && has) { print uri; found = 1; exit } deb = 0; uri = ""; has = 0 }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]*#/ { next }
            tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
            tolower($1) == "uris:" { uri = $2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) has = 1 }
            tolower($1) == "enabled:" && tolower($2) == "no" { deb = 0 }
            END { if (!found) flush() }' "$f"
    done | head -1 | grep . && return
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
        awk -v suite="$SUITE" '$1 == "deb" { i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /^\[/ || $i ~ /\]$/) i++;
                                              if ($(i + 1) == suite) { print $i; exit } }' | grep . && return
    echo http://deb.debian.org/debian
}
MIRROR=${FRESH_ROOT_MIRROR:-$(host_mirror)}
ARCH=$(dpkg --print-architecture)
DBS_VERSION=$(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo unknown)
# Everything that decides what debootstrap produces; a change makes a new tarball.
KEY=$(printf 'format 1\nsuite %s\nvariant %s\nmirror %s\narch %s\ndebootstrap %s\n' \
      "$SUITE" "$VARIANT" "$MIRROR" "$ARCH" "$DBS_VERSION" | sha256sum | cut -c1-16)
TARBALL=$CACHE/$SUITE-$VARIANT-$ARCH-$KEY.tar.gz
DEBS=$CACHE/debs
mkdir -p "$CACHE" "$DEBS/partial" || { result fresh_root_cache_dir 1 "cannot create $CACHE"; finish; }
echo "# root: $SUITE $VARIANT $ARCH from $MIRROR (debootstrap $DBS_VERSION), cache $TARBALL"

# 1. The bootstrapped root, under a lock (two CI jobs never bootstrap the same one at once).
exec 9>"$CACHE/lock"
flock 9
MAX_AGE=${FRESH_ROOT_MAX_AGE:-30}
if [ -f "$TARBALL" ] && [ -n "$(find "$TARBALL" -mtime +"$MAX_AGE" 2>/dev/null)" ]; then
    echo "# cached root older than $MAX_AGE days: bootstrapping again"
    rm -f "$TARBALL"
fi
t0=$(now)
if [ -f "$TARBALL" ]; then
    boot_note=cached
else
    tmpb=$(mktemp -d "$CACHE/bootstrap.XXXXXX")
    if debootstrap --variant="$VARIANT" --arch="$ARCH" "$SUITE" "$tmpb/root" "$MIRROR" >"$tmpb/debootstrap.log" 2>&1 &&
        tar -C "$tmpb/root" --numeric-owner -czf "$tmpb/root.tar.gz" . && mv "$tmpb/root.tar.gz" "$TARBALL"; then
        boot_note=bootstrapped
        # Older tarballs of other inputs are of no further use.
        find "$CACHE" -maxdepth 1 -name "$SUITE-$VARIANT-*.tar.gz" ! -name "${TARBALL##*/}" -delete
    else
        tail -20 "$tmpb/debootstrap.log"
        result fresh_root_bootstrap 1 "debootstrap $SUITE failed; log above"
        rm -rf --one-file-system "$tmpb"
        finish
    fi
    rm -rf --one-file-system "$tmpb"
fi
flock -u 9
t_boot=$(($(now) - t0))
echo "# bootstrap: ${t_boot}s ($boot_note)"

# 2. The source to copy in: a clone at REF (a real repository: the tests use git).
t0=$(now)
work=$(mktemp -d "${TMPDIR:-/tmp}/fresh-root.XXXXXX")
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    if [ "$KEEP" -eq 1 ]; then echo "# kept: $work"; else rm -rf --one-file-system "$work"; fi
}
trap cleanup EXIT
if [ "$REF" = WORKTREE ]; then
    # The working tree as it is, new files included (not those .gitignore names): a
    # commit made through a scratch index, referenced by nothing.
    idx=$work/index
    cp "$(git -C "$REPO" rev-parse --git-path index)" "$idx" &&
        GIT_INDEX_FILE=$idx git -C "$REPO" add -A &&
        tree=$(GIT_INDEX_FILE=$idx git -C "$REPO" write-tree) &&
        rev=$(git -C "$REPO" commit-tree "$tree" -p HEAD -m "working tree") ||
        { result fresh_root_clone 1 "cannot snapshot the working tree"; finish; }
else
    rev=$(git -C "$REPO" rev-parse --verify "$REF^{commit}") || { result fresh_root_clone 1 "no commit $REF"; finish; }
fi
if ! git clone -q --no-hardlinks --no-checkout "$REPO" "$work/clone" ||
    ! git -C "$work/clone" checkout -q --detach "$rev"; then
    result fresh_root_clone 1 "git clone of $REPO failed"
    finish
fi
echo "# source: $(git -C "$work/clone" log -1 --format='%h %s' | cut -c1-80)"

# 3. Each command in a fresh copy of the root. /proc is the namespace's own; /dev and /sys
#    are bound from the host; downloaded packages are kept in the cache between runs
#    (only the download is saved: every package is still installed from scratch).
run_in_root() {  # run_in_root NAME COMMAND
    local name=$1 cmd=$2 root=$work/$1 t1 rc
    t1=$(now)
    if ! mkdir -p "$root" || ! tar -C "$root" --numeric-owner -xzf "$TARBALL"; then
        result "readme_$name" 1 "cannot unpack the root"
        return
    fi
    cp -a "$work/clone" "$root/root/libmrcache"
    cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
    echo "# $name: root ready in $(($(now) - t1))s; running: $cmd"
    t1=$(now)
    # shellcheck disable=SC2016  # expanded by the inner shell
    unshare --mount --pid --fork --propagation private /bin/sh -c '
        set -e
        r=$1 debs=$2 cmd=$3
        mount -t proc proc "$r/proc"
        mount --rbind /dev "$r/dev"
        mount --rbind /sys "$r/sys"
        mount -t tmpfs tmpfs "$r/dev/shm"
        mount --bind "$debs" "$r/var/cache/apt/archives"
        exec chroot "$r" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            LANG=C.UTF-8 TERM=dumb /bin/bash -c "cd /root/libmrcache && $cmd"
    ' sh "$root" "$DEBS" "$cmd" >"$work/$name.log" 2>&1
    rc=$?
    eval "t_$name=\$((\$(now) - t1))"
    # The log outlives the roots, which go at exit (unless --keep): in the cache.
    mkdir -p "$CACHE/logs" && cp "$work/$name.log" "$CACHE/logs/$name.log"
    echo "# $name: exit $rc after $(($(now) - t1))s (log: $CACHE/logs/$name.log)"
    if [ "$name" = demo ]; then
        grep -q '^speed-up: ' "$work/$name.log"
        local r=$?
        [ $rc -ne 0 ] || [ $r -ne 0 ] && tail -30 "$work/$name.log" | sed 's/^/#   /'
        [ $rc -eq 0 ] && [ $r -eq 0 ]
        result readme_demo $? "'$cmd' exited $rc on a fresh root"
        return
    fi
    # The test run's own lines, and its counts added to ours.
    local line p f s t
    grep -E '^not ok - ' "$work/$name.log" | grep -v '# TODO'
    grep -A100 '^# failed:$' "$work/$name.log" | grep '^#   '   # the runner's list of failures
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$work/$name.log" | tail -1)
    if [ -z "$line" ]; then
        tail -30 "$work/$name.log" | sed 's/^/#   /'
        result readme_test 1 "'$cmd' printed no summary (exit $rc)"
        return
    fi
    echo "# make test: $line"
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.*, ([0-9]+) skipped.*/\1/p')
    t=$(echo "$line" | sed -nE 's/.*, ([0-9]+) todo.*/\1/p')
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + ${s:-0})); todo=$((todo + ${t:-0}))
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || result readme_test 1 "'$cmd' exited $rc"
}
t_demo=0 t_test=0
[ "$ONLY" = test ] || run_in_root demo "$CMD_DEMO"
[ "$ONLY" = demo ] || run_in_root test "$CMD_TEST"
echo "# timing: bootstrap ${t_boot}s ($boot_note), demo ${t_demo}s, test ${t_test}s, total $(($(now) - t0 + t_boot))s"
echo "# cache kept for the next run: $CACHE ($(du -sh "$CACHE" 2>/dev/null | cut -f1); remove it to reclaim the space)"
finish
