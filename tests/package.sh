#!/usr/bin/env bash
# The Debian package, for real, as root (scripts/test.sh runs it after the
# conformance suite): build it with scripts/package.sh, `apt-get install` it,
# check what it installed (binary, helpers, unit, man pages, completions), mount a
# ref through `mount -t fuse.storefs` and through an /etc/fstab line, read
# `man storefs-mount`, then `apt-get purge` it and check that nothing is left.
# A trap unmounts, restores /etc/fstab and any storefs files that were there
# before (e.g. from scripts/install.sh), and purges the package, on failure too.
#   bash tests/package.sh [--binary PATH]   (default: target/release/storefs, built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

binary=target/release/storefs
case "${1:-}" in
    --binary) binary=$2 ;;
    "") ;;
    *) echo "package.sh: unexpected argument '$1'" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "tests/package.sh: run as root (it installs a package)" >&2; exit 1; }
[ -x "$binary" ] || cargo build --release --locked

fail() { echo "tests/package.sh: FAILED: $*" >&2; exit 1; }
ok() { echo "tests/package.sh: ok: $*"; }

work=$(mktemp -d /tmp/storefs-pkgtest.XXXXXX)
fstab_backup="$work/fstab"
cp -p /etc/fstab "$fstab_backup"
# Files of the package that exist now without a package owning them (an
# install.sh install, a test's symlink): put aside, put back at the end.
owned=(/usr/bin/storefs /usr/sbin/mount.fuse.storefs /usr/sbin/storefs-umount-all)
mkdir -p "$work/aside"
for f in "${owned[@]}"; do
    if [ -e "$f" ] || [ -L "$f" ]; then mv "$f" "$work/aside/$(basename "$f")"; fi
done
mp="$work/mnt"
cleanup() {
    set +e
    if grep -qs " $mp fuse.storefs " /proc/mounts; then
        "$binary" --store "$work/store" umount "$mp" >/dev/null 2>&1 || umount -l "$mp"
    fi
    cp -p "$fstab_backup" /etc/fstab
    if dpkg -s storefs >/dev/null 2>&1; then apt-get purge -y -qq storefs >/dev/null 2>&1; fi
    for f in "${owned[@]}"; do
        if [ -e "$work/aside/$(basename "$f")" ] || [ -L "$work/aside/$(basename "$f")" ]; then
            mv "$work/aside/$(basename "$f")" "$f"
        fi
    done
    rm -rf "$work"
}
trap cleanup EXIT

dpkg -s storefs >/dev/null 2>&1 && fail "a storefs package is installed already; remove it first"
deb=$(bash scripts/package.sh --binary "$binary" --out "$work")
[ -f "$deb" ] || fail "scripts/package.sh printed '$deb', which is not a file"
ok "built $(basename "$deb")"
dpkg-deb --field "$deb" Depends | grep -qw fuse3 || fail "the package does not depend on fuse3"

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null
dpkg -s storefs >/dev/null || fail "apt-get install did not install storefs"
files=$(dpkg -L storefs)
for f in /usr/bin/storefs /usr/sbin/mount.fuse.storefs /usr/sbin/storefs-umount-all \
    /usr/lib/systemd/system/storefs@.service /usr/share/man/man1/storefs.1.gz \
    /usr/share/man/man1/storefs-mount.1.gz /usr/share/man/man1/storefs-remote-add.1.gz \
    /usr/share/bash-completion/completions/storefs /usr/share/zsh/vendor-completions/_storefs \
    /usr/share/fish/vendor_completions.d/storefs.fish; do
    grep -qx "$f" <<<"$files" || fail "the package does not hold $f"
    [ -e "$f" ] || fail "$f is not installed"
done
ok "installed: $(grep -c . <<<"$files") paths"

/usr/bin/storefs --version | grep -q "(store format 1)" || fail "storefs --version: $(/usr/bin/storefs --version)"
grep -q "ExecStart=/usr/bin/storefs " /usr/lib/systemd/system/storefs@.service \
    || fail "the unit does not run /usr/bin/storefs"
if command -v systemd-analyze >/dev/null; then
    said=$(systemd-analyze verify /usr/lib/systemd/system/storefs@.service 2>&1) \
        || fail "systemd-analyze verify refuses the unit: $said"
    [ -z "$said" ] || fail "systemd-analyze verify complains about the unit: $said"
    ok "systemd-analyze verify storefs@.service"
fi

# man, through man-db's index of the installed pages.
page=$(MANPAGER=cat MANWIDTH=100 man storefs-mount 2>&1) || fail "man storefs-mount: $page"
grep -q "Mount a checkpoint or archive read-only" <<<"$page" || fail "man storefs-mount shows: $(head -5 <<<"$page")"
MANPAGER=cat man storefs 2>/dev/null | grep -q "MOUNT(8) AND FSTAB" || fail "storefs(1) has no fstab section"
ok "man storefs-mount, man storefs"
# bash completion: the function it registers completes verbs.
words=$(bash -c 'source /usr/share/bash-completion/completions/storefs
    COMP_WORDS=(storefs mou); COMP_CWORD=1; COMP_LINE="storefs mou"; COMP_POINT=${#COMP_LINE}
    _storefs storefs mou storefs; printf "%s\n" "${COMPREPLY[@]}"')
grep -qx mount <<<"$words" || fail "bash completion of 'storefs mou' gave: $words"
ok "bash completes 'storefs mou' to mount"

# A store with one ref, mounted by mount(8) and by fstab.
export STOREFS_STORE="$work/store"
mkdir -p "$work/src/state" "$mp"
printf '{"turn": 7}\n' >"$work/src/state/lead.json"
/usr/bin/storefs snapshot "$work/src" --ref pkgtest >/dev/null
mount -t fuse.storefs pkgtest "$mp" -o "store=$work/store"
[ "$(cat "$mp/state/lead.json")" = '{"turn": 7}' ] || fail "mount -t fuse.storefs: wrong content"
grep -q " $mp fuse.storefs .*nosuid,nodev" /proc/mounts || fail "not mounted nosuid,nodev: $(grep " $mp " /proc/mounts)"
/usr/bin/storefs umount "$mp"
ok "mount -t fuse.storefs"
printf 'pkgtest %s fuse.storefs store=%s,noauto,nofail 0 0\n' "$mp" "$work/store" >>/etc/fstab
mount "$mp"
[ "$(cat "$mp/state/lead.json")" = '{"turn": 7}' ] || fail "fstab mount: wrong content"
umount "$mp"
grep -qs " $mp " /proc/mounts && fail "umount(8) left the mount"
cp -p "$fstab_backup" /etc/fstab
ok "mount by an fstab line, umount(8)"

DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq storefs >/dev/null
dpkg -s storefs >/dev/null 2>&1 && fail "storefs is still installed after purge"
left=$(while read -r f; do if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done <<<"$files")
[ -z "$left" ] || fail "left after purge: $left"
ok "purged; nothing of it left"
echo "tests/package.sh: all passed"
