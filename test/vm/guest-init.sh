#!/bin/sh
# guest-init.sh - PID 1 of the Soft-RoCE test VM (busybox sh, installed as /init): mounts
# the pseudo filesystems, runs /vm/guest-tests.sh, powers off. It must never exit (PID 1
# exiting panics the kernel). The host counts the run as complete only when it sees the
# "vm: complete" line printed here after the tests returned.
# No `set -e`: a failed step must still reach the power-off; -u and pipefail catch mistakes.
set -uo pipefail
export PATH=/usr/bin:/usr/sbin:/bin:/sbin HOME=/root TMPDIR=/tmp

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm /dev/pts /root
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
[ -s /etc/hostname ] && hostname -F /etc/hostname
# Keep kernel messages off the serial console: a printk in the middle of an "ok - " line
# would corrupt the count. Warnings are shown at the end from dmesg instead.
echo "1 4 1 7" >/proc/sys/kernel/printk
# Pinning is what the tests measure; root has CAP_IPC_LOCK but programs may check the limit.
ulimit -l unlimited

echo "vm: booted $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPUs, $(awk '/MemTotal/ { print int($2 / 1024) " MiB" }' /proc/meminfo), uptime $(cut -d' ' -f1 /proc/uptime) s"
sh /vm/guest-tests.sh
rc=$?
echo "vm: complete (guest-tests.sh status $rc, uptime $(cut -d' ' -f1 /proc/uptime) s)"
sync
poweroff -f
# poweroff -f does not return; if it ever does, sleep rather than panic.
while :; do sleep 60; done
