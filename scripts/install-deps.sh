#!/usr/bin/env bash
# Installs the Debian 12 packages that libmrcache's build and `make test` need.
# Idempotent and quiet when everything is present; when not root it prints the
# apt-get line to run and exits non-zero. The default set is everything the tests run:
# UCX's runtime (test/ucs loads libucs, which patches libc as it loads), jemalloc,
# tcmalloc and mimalloc (other allocators after us), golang-go (a cgo program's Go heap),
# python3 and matplotlib
# (mrcache-report and its plots), git (the benchmark patch is checked against the
# sources), groff and man-db (the manual pages are rendered), shellcheck (mrcache is
# checked as POSIX sh), tmux (mrcache --top is tested in a real terminal). Extra groups: --vm
# (Soft-RoCE VM harness, with Open MPI for its MPI job), --bench (UCX's headers for the
# benchmark comparison; strace for idle-bench), --fresh-root (scripts/fresh-root-check.sh's debootstrap).
set -euo pipefail

pkgs=(build-essential pkg-config libibverbs-dev ibverbs-utils uthash-dev libunwind-dev liburing-dev libucx0
      libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 golang-go python3 python3-matplotlib git groff-base man-db shellcheck tmux)
for arg in "$@"; do
    case "$arg" in
        --vm) pkgs+=(qemu-system-x86 busybox-static cpio gzip kmod ibverbs-providers perftest iproute2 libucx0 ucx-utils xz-utils zstd curl
                    openmpi-bin libopenmpi-dev) ;;
        --bench) pkgs+=(libucx-dev libjemalloc2 strace) ;;
        --fresh-root) pkgs+=(debootstrap) ;;
        *) echo "install-deps.sh: unknown option '$arg' (known: --vm, --bench, --fresh-root)" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps.sh: missing packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
fi
echo "install-deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# apt's own notice that debconf has no apt-utils to pre-configure with is not an error.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    2> >(grep -v '^debconf: delaying package configuration, since apt-utils is not installed' >&2)
