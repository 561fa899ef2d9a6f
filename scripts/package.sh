#!/usr/bin/env bash
# Build the Debian package storefs_VERSION_ARCH.deb (as root or not):
#   bash scripts/package.sh                 build (cargo build --release --locked), then package
#   bash scripts/package.sh --binary PATH   package PATH instead of building
#   bash scripts/package.sh --out DIR       write the .deb into DIR (default: target/debian)
# Prints the .deb's path on stdout. It holds:
#   /usr/bin/storefs                                   the binary
#   /usr/sbin/mount.fuse.storefs                       mount -t fuse.storefs / fstab helper
#   /usr/sbin/umount.fuse.storefs                      umount(8) helper (commits, waits)
#   /usr/sbin/storefs-umount-all                       unmount every storefs mount
#   /usr/lib/systemd/system/storefs@.service           long-running mount of a ref or fork
#   /usr/share/man/man1/storefs*.1.gz                  storefs(1) and one page per verb
#   /usr/share/bash-completion/completions/storefs     and zsh, fish completions
# and depends on fuse3. Built with dpkg-deb from a staged tree (no cargo-deb: nothing
# to compile but storefs). Install: apt-get install ./storefs_*.deb; remove: apt-get
# remove storefs (tests/package.sh does both).
set -euo pipefail
cd "$(dirname "$0")/.."

binary=
out=target/debian
while [ $# -gt 0 ]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "package.sh: unexpected argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$binary" ]; then
    cargo build --release --locked >&2
    binary="${CARGO_TARGET_DIR:-target}/release/storefs"
fi
[ -x "$binary" ] || { echo "package.sh: $binary is not an executable; build it or pass --binary" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d "${TMPDIR:-/tmp}/storefs-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root="$stage/storefs_${version}_$arch"

install -D -m 0755 "$binary" "$root/usr/bin/storefs"
strip --strip-debug "$root/usr/bin/storefs" 2>/dev/null || true
install -D -m 0755 mount-scripts/mount.fuse.storefs "$root/usr/sbin/mount.fuse.storefs"
install -D -m 0755 mount-scripts/umount.fuse.storefs "$root/usr/sbin/umount.fuse.storefs"
install -D -m 0755 mount-scripts/storefs-umount-all "$root/usr/sbin/storefs-umount-all"
# The unit as install.sh installs it, with the packaged binary's path.
install -d "$root/usr/lib/systemd/system"
sed 's|/usr/local/bin/storefs|/usr/bin/storefs|g; s|/sbin/storefs-umount-all|/usr/sbin/storefs-umount-all|g' \
    mount-scripts/storefs@.service >"$root/usr/lib/systemd/system/storefs@.service"

"$root/usr/bin/storefs" generate --man "$stage/man" --completions "$stage/completions"
install -d "$root/usr/share/man/man1"
for page in "$stage"/man/*.1; do
    gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
done
install -D -m 0644 "$stage/completions/storefs.bash" "$root/usr/share/bash-completion/completions/storefs"
install -D -m 0644 "$stage/completions/_storefs" "$root/usr/share/zsh/vendor-completions/_storefs"
install -D -m 0644 "$stage/completions/storefs.fish" "$root/usr/share/fish/vendor_completions.d/storefs.fish"
install -d "$root/usr/share/doc/storefs"
printf 'storefs %s\nLicense: MIT OR Apache-2.0, except src/store/merge/xdiff/ (a port of git'"'"'s xdiff,\nCopyright (C) 2003 Davide Libenzi and the git contributors): LGPL-2.1-or-later\n' "$version" >"$root/usr/share/doc/storefs/copyright"

install -d "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: storefs
Version: $version
Architecture: $arch
Maintainer: storefs developers <storefs@localhost>
Installed-Size: $size
Depends: fuse3, libc6 (>= 2.34), libgcc-s1
Section: utils
Priority: optional
Description: content-addressed checkpoints of directory trees, mounted by FUSE
 storefs records directory trees as deduplicated, compressed, verified
 checkpoints and mounts any checkpoint, archive or fork at the absolute path it
 was taken from: read-only, or copy-on-write for forks.
EOF
# systemd picks up the unit (and forgets it on removal) where it runs.
for script in postinst postrm; do
    cat >"$root/DEBIAN/$script" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload || true
fi
EOF
    chmod 0755 "$root/DEBIAN/$script"
done

mkdir -p "$out"
deb="$out/storefs_${version}_$arch.deb"
dpkg-deb --root-owner-group --build "$root" "$deb" >&2
echo "$deb"
