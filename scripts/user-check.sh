#!/usr/bin/env bash
# user-check.sh - the README's test command as a normal user: a user made for it
# (mrcache-ci), a fresh clone of this repository's HEAD in a temporary
# directory it owns, a normal user's PATH (no /sbin) and the kernel's default
# RLIMIT_MEMLOCK of 8 MiB. Prints make test's output, ending with its summary line, and
# exits with its status. Run as root (it makes the user); CI runs it after the root phases.
set -uo pipefail
user=${USER_CHECK_NAME:-mrcache-ci}
if [ "$(id -u)" -ne 0 ]; then
    echo "user-check.sh: run as root (it creates the user $user)" >&2
    exit 2
fi
id -u "$user" >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash "$user" || exit 1
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/user-check.XXXXXX)
trap 'rm -rf "$dir"' EXIT
git clone -q "$src" "$dir/libmrcache" || exit 1
chown -R "$user": "$dir"
home=$(getent passwd "$user" | cut -d: -f6)
echo "user-check.sh: make test as $user (uid $(id -u "$user")) in a fresh clone, RLIMIT_MEMLOCK 8 MiB"
runuser -u "$user" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" LANG=C.UTF-8 \
    bash -c "ulimit -l 8192 && cd '$dir/libmrcache' && make test"
