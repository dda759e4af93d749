#!/usr/bin/env bash
# vm-build.sh - builds the Soft-RoCE test VM from Debian packages into a cache directory:
# vmlinux (extracted from Debian's bzImage), base.cpio.gz (kernel modules + Debian userspace,
# big, cached) and payload.cpio.gz (guest scripts, test programs, libmrcache.so; small).
# Each part is rebuilt only when the hash of its inputs changes. Nothing is installed into
# the host except the packages of scripts/install-deps.sh --vm; the kernel is only unpacked.
set -euo pipefail

usage() {
    cat <<EOF
Usage: vm-build.sh [-o DIR] [-l LIB] [-p PRELOAD_TEST[:VAR=VALUE,...]]... [-s FILE]... [-c VAR=VALUE]...
                   [PROGRAM...]
  -o DIR   cache/output directory (default \$VM_DIR or build/vm)
  -l LIB   libmrcache.so to copy into the guest as /vm/lib/libmrcache.so (default build/libmrcache.so)
  -p PROG[:VAR=VALUE,...]
           a project test program the guest runs under the preload against rxe
           (/vm/preload-tests), with these variables set; one run per -p, in order
  -s FILE  a library the preload tests load (by \$ORIGIN, or a path in their variables),
           copied beside them into /vm/preload-tests
  -c VAR=VALUE
           a setting of the guest tests (VAR=VALUE), written to /vm/tests.env
  -k unstable[:VERSION]
           the kernel from Debian's unstable suite instead of the host's (bookworm): its
           linux-binary and linux-modules packages of VERSION (e.g. 7.2.13+deb14), or,
           when the suite has moved on, the newest 7.x it has (said); the userspace
           stays the host's
  PROGRAM  test programs copied into the guest's /vm/bin
Environment: VM_KERNEL_DEB=/path/linux-image-*.deb uses that package instead of apt-get download.
Output: DIR/vmlinux DIR/base.cpio.gz DIR/payload.cpio.gz DIR/initrd.img (base + payload)
EOF
}

here=$(cd "$(dirname "$0")/.." && pwd)
out=${VM_DIR:-build/vm}
lib=build/libmrcache.so
ptests=()   # the -p arguments, as given (program and environment)
pfiles=()   # the -s arguments
conf=()     # the -c arguments
ksrc=''     # -k: unstable[:VERSION]
while getopts "o:l:p:s:c:k:h" opt; do
    case "$opt" in
        o) out=$OPTARG ;;
        l) lib=$OPTARG ;;
        p) ptests+=("$OPTARG") ;;
        s) pfiles+=("$OPTARG") ;;
        c) [[ "$OPTARG" =~ ^[A-Z_][A-Z0-9_]*=[A-Za-z0-9_.,:/+-]*$ ]] ||
               { echo "vm-build.sh: -c wants VAR=VALUE (no spaces or quotes): $OPTARG" >&2; exit 2; }
           conf+=("$OPTARG") ;;
        k) [[ "$OPTARG" =~ ^unstable(:[0-9][0-9A-Za-z.+~-]*)?$ ]] ||
               { echo "vm-build.sh: -k wants unstable[:VERSION]: $OPTARG" >&2; exit 2; }
           ksrc=$OPTARG ;;
        h) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
progs=("$@")
# The distinct programs of the -p runs (a program may run several times).
pprogs=()
for r in "${ptests[@]}"; do
    p=${r%%:*}
    [[ " ${pprogs[*]-} " == *" $p "* ]] || pprogs+=("$p")
done

log() { echo "vm-build: $*" >&2; }
die() { echo "vm-build: error: $*" >&2; exit 1; }
# Scratch directories, removed however the script ends (a half-built base never stays).
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

"$here/scripts/install-deps.sh" --vm

mkdir -p "$out"
out=$(cd "$out" && pwd)

# Debian userspace copied into the guest, from the host's installed packages (the same
# Debian release as the kernel). Binaries get their shared libraries through ldd; the
# dlopen'ed plugins (verbs provider, UCX transports, Open MPI's and PMIx's MCA components)
# are listed explicitly, and the data trees programs read at run time are copied whole.
# Open MPI 4.1 (ORTE: mpirun is orterun, no prterun) with its PMIx 4, hwloc and libevent.
userspace_pkgs=(busybox-static libibverbs1 ibverbs-providers ibverbs-utils perftest iproute2
                libucx0 ucx-utils librdmacm1 libc6
                openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7
                libevent-pthreads-2.1-7 libfabric1)
guest_bins=(/usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_send_bw /usr/bin/ibv_rc_pingpong
            /usr/bin/ibv_devinfo /usr/bin/ibv_devices /usr/bin/ucx_perftest /usr/bin/io_demo
            /usr/bin/ucx_info /usr/bin/rdma /usr/sbin/ip
            /usr/bin/orterun /usr/bin/orted /usr/bin/ompi_info)
multiarch=/usr/lib/x86_64-linux-gnu
guest_plugins=("$multiarch"/libibverbs/librxe-rdmav*.so "$multiarch"/ucx/*.so.0
               "$multiarch"/openmpi/lib/openmpi3/*.so "$multiarch"/pmix2/lib/pmix/*.so)
# Help texts (a missing one turns every error into "help file not found"), the system MCA
# parameter file and default hostfile, PMIx's own help and parameters.
guest_data=(/usr/share/openmpi /etc/openmpi "$multiarch"/pmix2/share)
# Debian's mpirun and mpiexec are alternatives symlinks to orterun: made directly here.
guest_links=(/usr/bin/mpirun:orterun /usr/bin/mpiexec:orterun /usr/bin/mpirun.openmpi:orterun)
# Module roots in load order; their dependencies come from depmod. crc32_generic is listed
# because rdma_rxe needs it at `rdma link add` time without declaring it (else ENOENT).
# configfs..rdma_ucm are what UCX's rdmacm transport needs.
module_roots=(dummy crc32_generic rdma_rxe configfs ib_cm iw_cm rdma_cm rdma_ucm)

# ---------------------------------------------------------------- kernel package
kernel_deb=${VM_KERNEL_DEB:-}
modules_deb=''   # a suite whose kernel packages its modules apart (unstable)
MIRROR=${VM_MIRROR:-http://deb.debian.org/debian}
if [ -n "$ksrc" ] && [ -z "$kernel_deb" ]; then
    want=${ksrc#unstable}; want=${want#:}
    mkdir -p "$out/dl"
    idx=$out/dl/unstable-Packages
    # The suite's index, a day old at most: its kernel moves on.
    if [ ! -s "$idx" ] || [ -n "$(find "$idx" -mmin +1440)" ]; then
        log "fetching unstable's package index"
        if ! curl -fsS "$MIRROR/dists/unstable/main/binary-amd64/Packages.xz" | xz -dc >"$idx.tmp"; then
            die "cannot fetch $MIRROR/dists/unstable/main/binary-amd64/Packages.xz"
        fi
        mv "$idx.tmp" "$idx"
    fi
    # "Package Filename" of the image and modules packages of each version.
    avail=$(awk '/^Package: linux-(image|modules|binary)-7\.[0-9.]+\+deb[0-9]+-amd64$/ { p = $2 } /^Filename:/ && p { print p, $2; p = "" }' "$idx")
    versions=$(echo "$avail" | sed -n 's/^linux-image-\(7\.[^ ]*\)-amd64 .*/\1/p' | sort -V)
    kv=$want
    if [ -z "$kv" ] || ! echo "$versions" | grep -qx "$kv"; then
        kv=$(echo "$versions" | tail -1)
        [ -n "$kv" ] || die "no 7.x kernel in unstable"
        log "unstable has no kernel ${want:-pinned}: taking the newest 7.x, $kv"
    fi
    fetch() {  # fetch PACKAGE -> its .deb in $out/dl
        local f
        f=$(echo "$avail" | awk -v p="$1" '$1 == p { print $2; exit }')
        [ -n "$f" ] || die "unstable lists no $1"
        local deb=$out/dl/${f##*/}
        if [ ! -s "$deb" ]; then
            log "downloading $1 from unstable"
            curl -fsS -o "$deb.tmp" "$MIRROR/$f" || die "cannot download $MIRROR/$f"
            mv "$deb.tmp" "$deb"
        fi
        echo "$deb"
    }
    # The image package is a shell there: the kernel is in linux-binary, its modules apart.
    kernel_deb=$(fetch "linux-binary-$kv-amd64")
    modules_deb=$(fetch "linux-modules-$kv-amd64")
elif [ -z "$kernel_deb" ]; then
    resolve_kernel() {
        kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
               awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
        [ -n "$kpkg" ] || return 1
        kver_deb=$(apt-cache show --no-all-versions "$kpkg" 2>/dev/null | awk '/^Version:/ { print $2; exit }')
        [ -n "$kver_deb" ]
    }
    # Package lists may be missing on a machine where every host package was already there.
    resolve_kernel || { log "apt-get update (kernel package not in the lists)"; apt-get update -qq >/dev/null; resolve_kernel; } ||
        die "cannot resolve linux-image-amd64 with apt-cache"
    download_kernel() {
        kernel_deb="$out/dl/${kpkg}_${kver_deb//:/%3a}_amd64.deb"
        [ -s "$kernel_deb" ] && return 0
        log "downloading $kpkg $kver_deb"
        mkdir -p "$out/dl"
        rm -f "$out"/dl/*.deb
        # apt-get download writes to the current directory (as root: _apt cannot write here).
        (cd "$out/dl" && apt-get download -q "$kpkg=$kver_deb" 2>&1 |
            { grep -v '^W: Download is performed unsandboxed' >&2 || true; }) && [ -s "$kernel_deb" ]
    }
    # Stale lists name a version the mirror no longer has: refresh them once and retry.
    download_kernel || { log "apt-get update (download failed)"; apt-get update -qq >/dev/null; resolve_kernel && download_kernel; } ||
        die "apt-get download $kpkg failed"
fi
[ -s "$kernel_deb" ] || die "no kernel package: $kernel_deb"

# ---------------------------------------------------------------- base key
pkg_versions=$(dpkg-query -W -f='${Package}=${Version}\n' "${userspace_pkgs[@]}" | sort) ||
    die "host packages missing (dpkg-query): ${userspace_pkgs[*]}"
base_key=$( {
    echo "kernel=$(basename "$kernel_deb") $(stat -c %s "$kernel_deb") ${modules_deb:+$(basename "$modules_deb")}"
    echo "$pkg_versions"
    echo "modules=${module_roots[*]}"
    # The base layout is defined by this script: any change to it rebuilds the base.
    sha256sum "$0" | cut -d' ' -f1
} | sha256sum | cut -d' ' -f1)

build_base() {
    local tmp kroot root kver vmlinuz
    tmp=$(mktemp -d "$out/base.tmp.XXXXXX")
    scratch+=("$tmp")
    kroot=$tmp/kernel root=$tmp/root
    log "unpacking $(basename "$kernel_deb")"
    # Only the kernel image and modules are needed; dpkg-deb keeps it out of the host's dpkg db.
    mkdir -p "$kroot"
    # Whatever of the kernel and its modules each package holds (a merged-/usr suite
    # ships them under usr/lib/modules); what is under usr/ moves up for the steps below.
    local deb
    for deb in "$kernel_deb" ${modules_deb:+"$modules_deb"}; do
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$kroot" --wildcards \
            './boot/vmlinuz-*' './lib/modules/*' './usr/lib/modules/*' 2>/dev/null || true
    done
    if [ -d "$kroot/usr/lib/modules" ]; then
        mkdir -p "$kroot/lib/modules"
        cp -a "$kroot/usr/lib/modules/." "$kroot/lib/modules/" && rm -rf "$kroot/usr/lib/modules"
    fi
    # A newer layout keeps the image beside its modules (usr/lib/modules/VERSION/vmlinuz).
    local img
    for img in "$kroot"/lib/modules/*/vmlinuz; do
        [ -f "$img" ] || continue
        mkdir -p "$kroot/boot"
        mv "$img" "$kroot/boot/vmlinuz-$(basename "$(dirname "$img")")"
    done
    if [ ! -d "$kroot/lib/modules" ] || ! ls "$kroot"/boot/vmlinuz-* >/dev/null 2>&1; then
        die "no kernel image or modules in $(basename "$kernel_deb") ${modules_deb:+$(basename "$modules_deb")}"
    fi
    kver=$(ls "$kroot/lib/modules")
    [ "$(echo "$kver" | wc -l)" -eq 1 ] || die "expected one kernel version in the package, got: $kver"
    vmlinuz=$kroot/boot/vmlinuz-$kver

    # The uncompressed ELF vmlinux boots through its PVH entry, skipping the bzImage's
    # self-decompression: about 3 s less per boot under TCG. Find the payload's xz magic
    # (zstd's for a newer kernel).
    local off found=
    for off in $(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | cut -d: -f1); do
        tail -c +"$((off + 1))" "$vmlinuz" | xz -dcq 2>/dev/null >"$tmp/vmlinux" || true
        if [ "$(head -c 4 "$tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ]; then found=1; break; fi
    done
    # A newer kernel is compressed with zstd instead.
    if [ -z "$found" ]; then
        for off in $(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$vmlinuz" | cut -d: -f1); do
            tail -c +"$((off + 1))" "$vmlinuz" | zstd -dcq 2>/dev/null >"$tmp/vmlinux" || true
            if [ "$(head -c 4 "$tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ]; then found=1; break; fi
        done
    fi
    [ -n "$found" ] || die "could not extract vmlinux from $vmlinuz"

    # The package ships no modules.dep: compute the dependency closure with depmod/modprobe
    # against the unpacked tree (-C /dev/null: ignore the host's modprobe options).
    # A suite that packages modules.builtin apart makes depmod warn: nothing is missing.
    depmod -b "$kroot" "$kver" 2> >(grep -v 'could not open modules.builtin' >&2)
    local m p mods=()
    for m in "${module_roots[@]}"; do
        # A module root the kernel has built in (crc32_generic on 7.x) has nothing to load.
        modprobe -C /dev/null -d "$kroot" -S "$kver" --show-depends "$m" >/dev/null 2>&1 ||
            { log "$m: no such module in $kver (built in): nothing to load"; continue; }
        while read -r p; do
            [[ " ${mods[*]-} " == *" $p "* ]] || mods+=("$p")
        done < <(modprobe -C /dev/null -d "$kroot" -S "$kver" --show-depends "$m" |
                 awk '$1 == "insmod" { print $2 }')
    done
    # Merged-/usr layout like the host, so paths from ldd are valid in the guest as they are.
    mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{proc,sys,dev,tmp,run,mnt,etc}
    ln -s usr/bin "$root/bin"; ln -s usr/sbin "$root/sbin"
    ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"
    : >"$root/etc/vm-modules"
    for p in "${mods[@]}"; do
        local rel=${p#"$kroot/lib/modules/$kver/"}
        # Compressed modules (a newer suite's) uncompressed: busybox's insmod takes plain ones.
        case $rel in
        *.ko.xz) mkdir -p "$(dirname "$root/usr/lib/modules/$kver/$rel")"
                 xz -dc "$p" >"$root/usr/lib/modules/$kver/${rel%.xz}"; rel=${rel%.xz} ;;
        *.ko.zst) mkdir -p "$(dirname "$root/usr/lib/modules/$kver/$rel")"
                  zstd -qdc "$p" >"$root/usr/lib/modules/$kver/${rel%.zst}"; rel=${rel%.zst} ;;
        *) install -D -m 0644 "$p" "$root/usr/lib/modules/$kver/$rel" ;;
        esac
        echo "/lib/modules/$kver/$rel" >>"$root/etc/vm-modules"
    done

    copy_closure "$root" "${guest_bins[@]}" "${guest_plugins[@]}"
    local d l
    for d in "${guest_data[@]}"; do
        [ -d "$d" ] || die "missing directory for the guest: $d"
        mkdir -p "$root$(dirname "$d")"
        cp -a "$d" "$root$(dirname "$d")/"
    done
    for l in "${guest_links[@]}"; do
        ln -sfn "${l#*:}" "$root${l%%:*}"
    done
    cp /bin/busybox "$root/usr/bin/busybox"
    # Busybox applets as symlinks, never shadowing a real Debian binary (ip, rdma).
    local a
    for a in $(/bin/busybox --list); do
        [ -e "$root/usr/bin/$a" ] || [ -e "$root/usr/sbin/$a" ] || ln -s busybox "$root/usr/bin/$a"
    done
    mkdir -p "$root/etc/libibverbs.d"
    cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
    # A host name: Open MPI refuses the kernel's default "(none)" as a node name.
    echo vm >"$root/etc/hostname"
    printf '127.0.0.1 localhost vm\n::1 localhost\n' >"$root/etc/hosts"
    printf 'hosts: files\npasswd: files\ngroup: files\n' >"$root/etc/nsswitch.conf"
    echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
    echo 'root:x:0:' >"$root/etc/group"
    echo "$kver" >"$root/etc/vm-kernel-release"
    echo "$pkg_versions" >"$root/etc/vm-packages"
    # The guest's ld.so.cache, so the loader finds libraries without scanning directories.
    local msg
    msg=$(ldconfig -r "$root" 2>&1) || die "ldconfig -r: $msg"

    # The payload builder skips libraries the base already has.
    (cd "$root" && find . -type f -o -type l | sed 's|^\.||' | sort) >"$tmp/base.files"
    (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 >"$tmp/base.cpio.gz"
    mv "$tmp/vmlinux" "$out/vmlinux"
    mv "$tmp/base.files" "$out/base.files"
    mv "$tmp/base.cpio.gz" "$out/base.cpio.gz"
    echo "$base_key" >"$out/base.key"
    log "base: kernel $kver, $(wc -l <"$root/etc/vm-modules") modules, $(du -h "$out/base.cpio.gz" | cut -f1) initramfs"
}

# Copies files and, through ldd, the shared libraries they need into ROOT at the same paths
# (the directory canonicalised, so /lib/x/libfoo.so.1 lands in /usr/lib/x/). A file listed
# in $skip_list (the base's manifest) is not copied again.
skip_list=/dev/null
copy_closure() {
    local root=$1 f dir dest
    shift
    local -A seen=()
    local queue=("$@")
    while [ ${#queue[@]} -gt 0 ]; do
        f=${queue[0]}; queue=("${queue[@]:1}")
        [ -n "${seen[$f]-}" ] && continue
        seen[$f]=1
        [ -e "$f" ] || die "missing file for the guest: $f"
        dir=$(realpath "$(dirname "$f")")
        dest=$dir/$(basename "$f")
        if ! grep -qxF "$dest" "$skip_list"; then
            mkdir -p "$root$dir"
            cp -L "$f" "$root$dest"
        fi
        # ldd prints "name => /path (addr)" and "/lib64/ld-linux... (addr)".
        while read -r p; do
            [ -n "$p" ] && queue+=("$p")
        done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
    done
}

if [ ! -s "$out/base.key" ] || [ "$(cat "$out/base.key")" != "$base_key" ] ||
   [ ! -s "$out/vmlinux" ] || [ ! -s "$out/base.cpio.gz" ]; then
    build_base
else
    log "base up to date"
fi

# ---------------------------------------------------------------- payload
# Our own files: small, so the key is simply the hash of their contents and names.
guest_scripts=("$here/test/vm/guest-init.sh" "$here/test/vm/guest-tests.sh")
payload_inputs=("${guest_scripts[@]}" "${progs[@]}" "${pprogs[@]}" "${pfiles[@]}")
[ -e "$lib" ] && payload_inputs+=("$lib")
payload_key=$( {
    echo "$base_key"
    echo "preload-tests: ${ptests[*]}"
    echo "settings: ${conf[*]-}"
    for f in "${payload_inputs[@]}"; do
        [ -f "$f" ] || die "missing payload input: $f"
        echo "$(basename "$f") $(sha256sum <"$f" | cut -d' ' -f1)"
    done
} | sha256sum | cut -d' ' -f1)

if [ -s "$out/payload.key" ] && [ "$(cat "$out/payload.key")" = "$payload_key" ] &&
   [ -s "$out/payload.cpio.gz" ] && [ -s "$out/initrd.img" ]; then
    log "payload up to date"
    exit 0
fi

tmp=$(mktemp -d "$out/payload.tmp.XXXXXX")
scratch+=("$tmp")
root=$tmp/root
mkdir -p "$root/vm/bin" "$root/vm/lib" "$root/vm/preload-tests"
install -m 0755 "$here/test/vm/guest-init.sh" "$root/init"
install -m 0755 "$here/test/vm/guest-tests.sh" "$root/vm/guest-tests.sh"
for p in "${progs[@]}"; do install -m 0755 "$p" "$root/vm/bin/"; done
for p in "${pprogs[@]}" "${pfiles[@]}"; do install -m 0755 "$p" "$root/vm/preload-tests/"; done
# One line per run for guest-tests.sh: NAME PROGRAM [VAR=VALUE]... (NAME is the program's,
# with the variables appended when there are any, so the runs' logs stay apart).
: >"$root/vm/preload-tests.runs"
for r in "${ptests[@]}"; do
    p=$(basename "${r%%:*}") envs=
    [ "$r" != "${r#*:}" ] && envs=${r#*:}
    name=$p${envs:+_$(echo "$envs" | tr '/,=' '__-')}
    echo "$name $p ${envs//,/ }" >>"$root/vm/preload-tests.runs"
done
# The guest tests' settings, sourced by guest-tests.sh.
: >"$root/vm/tests.env"
for c in "${conf[@]}"; do echo "$c" >>"$root/vm/tests.env"; done
if [ -e "$lib" ]; then
    install -m 0755 "$lib" "$root/vm/lib/libmrcache.so"
else
    # The guest reports the preload cases as failures; the build itself still succeeds so
    # the control cases run.
    log "warning: $lib does not exist; the guest will have no libmrcache.so"
fi
# Libraries our programs or libmrcache.so need beyond the base (e.g. a new dependency).
skip_list=$out/base.files
extra=("${progs[@]}" "${pprogs[@]}" "${pfiles[@]}")
[ -e "$lib" ] && extra+=("$lib")
if [ ${#extra[@]} -gt 0 ]; then
    copy_closure "$tmp/extra" "${extra[@]}"
    # copy_closure copied the inputs themselves too: keep only their libraries.
    for p in "${extra[@]}"; do rm -f "$tmp/extra$(realpath "$p")"; done
    if [ -d "$tmp/extra" ]; then
        find "$tmp/extra" -type d -empty -delete
        if [ -d "$tmp/extra" ]; then
            cp -a "$tmp/extra/." "$root/"
            log "extra libraries: $(cd "$tmp/extra" && find . -type f | tr '\n' ' ')"
        fi
    fi
fi
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$out/payload.cpio.gz"
# The kernel unpacks concatenated cpio archives in order: the payload is a second segment,
# so changing a test rewrites a few hundred KiB, never the base.
cat "$out/base.cpio.gz" "$out/payload.cpio.gz" >"$out/initrd.img.tmp"
mv "$out/initrd.img.tmp" "$out/initrd.img"
echo "$payload_key" >"$out/payload.key"
log "payload: $(du -h "$out/payload.cpio.gz" | cut -f1), initrd $(du -h "$out/initrd.img" | cut -f1)"
