#!/usr/bin/env bash
# Installs the Debian 12 packages that libmrcache's build and tests need.
# Idempotent and quiet when everything is present; when not root it prints the
# apt-get line to run and exits non-zero. The default set includes UCX's runtime
# (libucx0): test/ucs loads libucs, which patches libc as it loads. Extra package groups:
# --vm (Soft-RoCE VM harness, with Open MPI for its MPI job), --bench (UCX's headers for the benchmark comparison).
set -euo pipefail

pkgs=(build-essential pkg-config libibverbs-dev ibverbs-utils uthash-dev libunwind-dev liburing-dev libucx0)
for arg in "$@"; do
    case "$arg" in
        --vm) pkgs+=(qemu-system-x86 busybox-static cpio gzip kmod ibverbs-providers perftest iproute2 libucx0 ucx-utils xz-utils zstd
                    openmpi-bin libopenmpi-dev) ;;
        --bench) pkgs+=(libucx-dev libjemalloc2) ;;
        *) echo "install-deps.sh: unknown option '$arg' (known: --vm, --bench)" >&2; exit 2 ;;
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
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
