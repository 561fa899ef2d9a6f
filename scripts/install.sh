#!/usr/bin/env bash
# Install storefs and its helpers (as root):
#   /usr/local/bin/storefs                        the binary
#   /sbin/mount.fuse.storefs                      mount -t fuse.storefs / fstab helper
#   /sbin/umount.fuse.storefs                     umount(8) helper (commits, waits)
#   /sbin/storefs-umount-all                      unmount every storefs mount
#   /etc/systemd/system/storefs@.service          long-running mount of a ref or fork
#
#   bash scripts/install.sh                 build (cargo build --release --locked), then install
#   bash scripts/install.sh --binary PATH   install PATH instead of building
#   DESTDIR=/tmp/root bash scripts/install.sh ...   install under another root (packaging)
set -euo pipefail
cd "$(dirname "$0")/.."

binary=
while [ $# -gt 0 ]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$binary" ]; then
    cargo build --release --locked
    binary="${CARGO_TARGET_DIR:-target}/release/storefs"
fi
dest=${DESTDIR:-}

install -D -m 0755 "$binary" "$dest/usr/local/bin/storefs"
install -D -m 0755 mount-scripts/mount.fuse.storefs "$dest/sbin/mount.fuse.storefs"
install -D -m 0755 mount-scripts/umount.fuse.storefs "$dest/sbin/umount.fuse.storefs"
install -D -m 0755 mount-scripts/storefs-umount-all "$dest/sbin/storefs-umount-all"
install -D -m 0644 mount-scripts/storefs@.service "$dest/etc/systemd/system/storefs@.service"
echo "installed: $dest/usr/local/bin/storefs $dest/sbin/mount.fuse.storefs $dest/sbin/umount.fuse.storefs $dest/sbin/storefs-umount-all $dest/etc/systemd/system/storefs@.service"
if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
