#!/usr/bin/env bash
# The Debian package, for real, as root (scripts/test.sh runs it after the
# conformance suite): build it with scripts/package.sh, `apt-get install` it,
# check what it installed (binary, helpers, unit, man pages, completions), mount a
# ref through `mount -t fuse.storefs` and through an /etc/fstab line (the source
# shown is the one given, `-o remount` starts no second daemon, umount(8) of a
# fork returns once it is committed and its daemon gone), read
# `man storefs-mount`, start and stop `storefs@REF.service` under a real systemd
# (booted in a throwaway systemd-nspawn container over this machine's /usr, since
# this machine's PID 1 is not systemd), then `apt-get purge` it and check that
# nothing is left.
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
owned=(/usr/bin/storefs /usr/sbin/mount.fuse.storefs /usr/sbin/umount.fuse.storefs /usr/sbin/storefs-umount-all)
mkdir -p "$work/aside"
for f in "${owned[@]}"; do
    if [ -e "$f" ] || [ -L "$f" ]; then mv "$f" "$work/aside/$(basename "$f")"; fi
done
mp="$work/mnt"
nspawn_pid=
cleanup() {
    set +e
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        kill "$nspawn_pid"; wait "$nspawn_pid" 2>/dev/null
    fi
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
for f in /usr/bin/storefs /usr/sbin/mount.fuse.storefs /usr/sbin/umount.fuse.storefs /usr/sbin/storefs-umount-all \
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
said=$(mount -t fuse.storefs pkgtest "$mp" -o "store=$work/store,relatime,nodiratime,noacl,x-test" 2>&1)
[ -z "$said" ] || fail "mount -t fuse.storefs printed on success: $said"
[ "$(cat "$mp/state/lead.json")" = '{"turn": 7}' ] || fail "mount -t fuse.storefs: wrong content"
grep -q " $mp fuse.storefs .*nosuid,nodev" /proc/mounts || fail "not mounted nosuid,nodev: $(grep " $mp " /proc/mounts)"
ok "mount -t fuse.storefs (relatime, nodiratime, noacl accepted; silent on success)"
# The source shown is the one given: findmnt -S and umount find it by it.
[ "$(findmnt -n -o TARGET -S pkgtest)" = "$mp" ] || fail "findmnt -S pkgtest: $(findmnt -n -S pkgtest)"
# The daemons serving $mp: their command line names it (mount --foreground).
daemons() { pgrep -f -- "mount .* $mp .*--foreground" || true; }
first=$(daemons)
[ "$(grep -c . <<<"$first")" = 1 ] || fail "daemons at $mp: $first"
said=$(mount -o remount,noexec "$mp" 2>&1) || fail "mount -o remount,noexec: $said"
findmnt -n -o OPTIONS "$mp" | grep -qw noexec || fail "remount did not apply noexec: $(findmnt -n -o OPTIONS "$mp")"
[ "$(daemons)" = "$first" ] || fail "mount -o remount started another daemon: $(daemons)"
umount pkgtest || fail "umount pkgtest (by the source)"
grep -qs " $mp " /proc/mounts && fail "umount pkgtest left the mount"
ok "the source is the one given (findmnt -S, umount SOURCE); -o remount in place"
# A fork: umount SOURCE (umount(8) reads the mount table, finds the type
# fuse.storefs and runs umount.fuse.storefs) returns once it is committed and
# its daemon has exited, so the next mount of it at once finds it free.
/usr/bin/storefs fork pkgtest --name pkgfork 2>/dev/null
mount -t fuse.storefs pkgfork "$mp" -o "store=$work/store" || fail "mount of the fork"
echo written >"$mp/new.txt"
pid=$(daemons)
umount pkgfork || fail "umount of the fork"
state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1 || true)
case $state in ''|Z|X) ;; *) fail "umount(8) returned before the fork's daemon (pid $pid) exited" ;; esac
mount -t fuse.storefs pkgfork "$mp" -o "store=$work/store" || fail "mount of the fork right after umount(8)"
[ "$(cat "$mp/new.txt")" = written ] || fail "the fork's write was not committed"
# umount /ABSOLUTE/MOUNTPOINT of a mount without userspace options: util-linux
# takes the type from statfs ("fuse") and runs no helper; the mount right
# after waits for the daemon still committing.
echo again >"$mp/new.txt"
umount "$mp" || fail "umount $mp"
mount -t fuse.storefs pkgfork "$mp" -o "store=$work/store" || fail "mount of the fork right after umount $mp"
[ "$(cat "$mp/new.txt")" = again ] || fail "the fork's second write was not committed"
umount pkgfork
ok "umount(8) of a fork commits and waits; a mount right after succeeds"
said=$(mount -t fuse.storefs no-such-ref "$mp" -o "store=$work/store" 2>&1) && fail "a mount of a missing ref succeeded"
case $said in *no-such-ref*) ;; *) fail "a failed mount said: $said" ;; esac
ok "mount -t fuse.storefs of a missing ref fails naming it"
printf 'pkgtest %s fuse.storefs store=%s,noauto,nofail 0 0\n' "$mp" "$work/store" >>/etc/fstab
mount "$mp"
[ "$(cat "$mp/state/lead.json")" = '{"turn": 7}' ] || fail "fstab mount: wrong content"
umount "$mp"
grep -qs " $mp " /proc/mounts && fail "umount(8) left the mount"
cp -p "$fstab_backup" /etc/fstab
ok "mount by an fstab line, umount(8)"

# The unit under a real systemd: boot one in a container whose root is a tmpfs
# with this machine's /usr (where the package put the binary and the unit),
# /dev/fuse, the test's directory, and the unit's settings in /etc/storefs.
# It talks to that systemd through nsenter (no machined or D-Bus here).
printf 'STOREFS_STORE=%s\nSTOREFS_MOUNTPOINT=%s\n' "$work/store" "$mp" >"$work/pkgtest.env"
systemd-nspawn -D / --volatile=yes --register=no --keep-unit -M storefs-pkgtest \
    --bind=/dev/fuse --bind="$work" --bind-ro="$work/pkgtest.env:/etc/storefs/pkgtest.env" \
    --bind-ro=/etc/alternatives -b systemd.firstboot=off >"$work/nspawn.log" 2>&1 &
nspawn_pid=$!
init=
for _ in $(seq 1 150); do
    init=$(pgrep -P "$nspawn_pid" | head -n1 || true)
    if [ -n "$init" ]; then
        state=$(nsenter -t "$init" -a systemctl is-system-running 2>/dev/null || true)
        case $state in running|degraded) break ;; esac
    fi
    kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited: $(tail -5 "$work/nspawn.log")"
    sleep 0.2
done
case ${state:-} in running|degraded) ;; *) fail "the container's systemd is not up (${state:-no state}): $(tail -5 "$work/nspawn.log")" ;; esac
in_box() { nsenter -t "$init" -a "$@"; }
# Type=notify: `systemctl start` returns once the daemon says READY=1, after
# the mount answers (under Type=simple the read below raced the mount).
[ "$(in_box systemctl show -p Type --value storefs@pkgtest.service)" = notify ] \
    || fail "storefs@.service is not Type=notify"
in_box systemctl start storefs@pkgtest.service || fail "systemctl start: $(in_box journalctl -u storefs@pkgtest.service --no-pager | tail -5)"
[ "$(in_box cat "$mp/state/lead.json")" = '{"turn": 7}' ] || fail "storefs@pkgtest.service: wrong content"
in_box systemctl is-active --quiet storefs@pkgtest.service || fail "the service is not active"
in_box systemctl stop storefs@pkgtest.service
in_box grep -qs " $mp fuse.storefs " /proc/mounts && fail "systemctl stop left the mount"
journal=$(in_box journalctl -u storefs@pkgtest.service --no-pager)
grep -qi "not found\|error\|failed" <<<"$journal" && fail "the unit's journal has errors: $journal"
grep -q "serving pkgtest at $mp" <<<"$journal" || fail "the daemon did not say it served: $journal"
in_box systemctl poweroff || true
wait "$nspawn_pid" || true
nspawn_pid=
ok "storefs@pkgtest.service started and stopped under systemd (in systemd-nspawn)"

DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq storefs >/dev/null
dpkg -s storefs >/dev/null 2>&1 && fail "storefs is still installed after purge"
left=$(while read -r f; do if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done <<<"$files")
[ -z "$left" ] || fail "left after purge: $left"
ok "purged; nothing of it left"
echo "tests/package.sh: all passed"
