#!/usr/bin/env bash
# The conformance suite: pjdfstest and fsx against a storefs fork mount, and
# EROFS checks on a read-only checkpoint mount. Builds storefs (release),
# makes a store and a fork in a temp dir, mounts, runs, unmounts (in a trap
# that runs on failure too). Needs root, /dev/fuse, and the tools that
# scripts/setup-debian.sh installs (pjdfstest, fsx, the pjdfstest users).
#
# Environment:
#   FSX_OPS   fsx operations (default 100000; release checks: 1000000)
#   FSX_SEED  fsx seed (default 20260801)
#   PJDFSTEST_TIMEOUT  seconds before the pjdfstest run is killed (default 900)
#
#   FSX_COPY_OPS  operations of the second fsx run, with copy_file_range
#             (default FSX_OPS / 2)
#   FORK_MOUNT_ARGS  more arguments for every fork mount (e.g.
#             --writeback-cache); default none
#   STOREFS_TRANSPORT  how every mount is served: classic (/dev/fuse), uring
#             (FUSE over io_uring) or auto (the default); storefs reads it
#
# Prints one plain line last: `N passed, N failed, N skipped` over every check
# (pjdfstest cases, EROFS checks, fsx runs and the remount comparison). Exits
# non-zero if anything failed, or if pjdfstest passed fewer cases on the fork
# mount than in a native scratch directory. No pjdfstest case is excluded.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/tests/conformance
FSX_OPS=${FSX_OPS:-100000}
FSX_SEED=${FSX_SEED:-20260801}
PJDFSTEST_TIMEOUT=${PJDFSTEST_TIMEOUT:-900}
FORK_MOUNT_ARGS=${FORK_MOUNT_ARGS:-}
export PATH="$HOME/.cargo/bin:$PATH" NO_COLOR=1

say() { echo "conformance: $*"; }
die() { echo "conformance: $*" >&2; exit 1; }

for tool in pjdfstest fsx python3 mountpoint; do
    command -v "$tool" >/dev/null || die "$tool not found; run scripts/setup-debian.sh"
done
[ "$(id -u)" = 0 ] || die "run as root (pjdfstest switches users; mounts)"

cargo build --release --locked --bin storefs || die "cargo build failed"
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/storefs
[ -x "$BIN" ] || die "no binary at $BIN"

WORK=$(mktemp -d /tmp/storefs-conform.XXXXXX)
# pjdfstest switches to unprivileged users, who must reach the mount.
chmod 755 "$WORK"
STORE=$WORK/store
RO=$WORK/mnt-ro
RW=$WORK/mnt-rw
CP=$WORK/mnt-copy
sf() { "$BIN" --store "$STORE" "$@"; }

cleanup() {
    local mp
    for mp in "$RO" "$RW" "$CP"; do
        if mountpoint -q "$mp" 2>/dev/null; then
            sf umount --no-commit "$mp" >/dev/null 2>&1 || umount -l "$mp" 2>/dev/null || true
        fi
    done
    if [ -n "${KEEP_WORK:-}" ]; then
        echo "conformance: kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PASSED=0 FAILED=0 SKIPPED=0
pass() { PASSED=$((PASSED + $1)); }
fail() { FAILED=$((FAILED + $1)); }
skip() { SKIPPED=$((SKIPPED + $1)); }

# ------------------------------------------------------------------ the store
SRC=$WORK/src
mkdir -p "$SRC/dir" "$SRC/empty"
printf 'file\n' >"$SRC/file"
printf 'inner\n' >"$SRC/dir/inner"
ln -s file "$SRC/link"
mkfifo "$SRC/fifo"
setfattr -n user.k -v v "$SRC/file" 2>/dev/null ||
    python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.k", b"v")' "$SRC/file"
sf snapshot "$SRC" --ref base -m conformance >/dev/null || die "snapshot failed"

# ------------------------------------------------- read-only checkpoint mount
say "EROFS checks on a read-only checkpoint mount"
sf mount base "$RO" || die "mount base failed"
out=$(python3 "$HERE/erofs.py" "$RO")
echo "$out" | grep -v '^RESULT' || true
sf umount "$RO" || die "umount $RO failed"
res=$(echo "$out" | sed -n 's/^RESULT passed=\([0-9]*\) failed=\([0-9]*\)$/\1 \2/p')
[ -n "$res" ] || die "erofs.py printed no result"
read -r p f <<<"$res"
say "erofs (checkpoint mount): $p passed, $f failed"
pass "$p"
fail "$f"

# ----------------------------------------------------------- fork mount: pjdfstest
sf fork base --name conform >/dev/null || die "fork failed"
sf mount conform "$RW" -o allow_other $FORK_MOUNT_ARGS || die "mount conform failed"
mkdir -p "$WORK/secondary" "$WORK/enum" "$WORK/bin"
# pjdfstest cannot list its cases: learn every name from a run in a scratch
# directory of the native file system (a few seconds), then run every case on
# the mount by name. That native run is also the baseline: the mount must pass
# at least as many cases. It runs with the same configuration except that it
# never remounts the host's file system (allow_remount = false) and has no
# secondary file system (-s), so its EROFS and EXDEV cases are skipped: on
# ext4 with Linux 6.18, 383 of 398 pass natively (0 fail).
sed 's/^allow_remount = true/allow_remount = false/' "$HERE/pjdfstest.toml" >"$WORK/enum.toml"
(cd "$WORK/enum" && pjdfstest -c "$WORK/enum.toml" -p "$WORK/enum") >"$WORK/enum.log" 2>&1
python3 "$HERE/pjdfstest-results.py" select "$WORK/enum.log" \
    >"$WORK/cases" || die "could not list pjdfstest's cases; its output is in $WORK/enum.log"
# The EROFS cases run `mount -o remount,ro MOUNTPOINT` and back; for a
# fuse.storefs mount mount(8) would call mount.fuse3, which would try to start
# a new daemon. -i (no helper) makes it a plain remount of the existing mount.
printf '#!/bin/sh\nexec /usr/bin/mount -i "$@"\n' >"$WORK/bin/mount"
chmod 755 "$WORK/bin/mount"
# The EROFS cases run on their own, after the rest: open::einval_invalid_combination
# leaks a descriptor open for writing (pjdfstest 0.2.2), and while a process
# holds one, `remount,ro` fails with EBUSY on any file system.
grep -v '::erofs_' "$WORK/cases" >"$WORK/cases-main"
grep '::erofs_' "$WORK/cases" >"$WORK/cases-erofs"
say "pjdfstest on the fork mount: $(wc -l <"$WORK/cases") cases (timeout ${PJDFSTEST_TIMEOUT}s)"
: >"$WORK/pjdfstest.log"
for set in main erofs; do
    (cd "$RW" && PATH="$WORK/bin:$PATH" timeout --kill-after=30 "$PJDFSTEST_TIMEOUT" \
        pjdfstest -c "$HERE/pjdfstest.toml" -p "$RW" -s "$WORK/secondary" \
        -e $(cat "$WORK/cases-$set")) >>"$WORK/pjdfstest.log" 2>&1
done
python3 "$HERE/pjdfstest-results.py" count "$WORK/pjdfstest.log" \
    "$WORK/enum.log" 2 >"$WORK/pjdfstest.summary"
prc=$?
grep -v '^RESULT' "$WORK/pjdfstest.summary"
res=$(sed -n 's/^RESULT passed=\([0-9]*\) failed=\([0-9]*\) skipped=\([0-9]*\)$/\1 \2 \3/p' "$WORK/pjdfstest.summary")
if [ -z "$res" ]; then
    say "could not read pjdfstest's results; the end of its output:"
    tail -50 "$WORK/pjdfstest.log"
    fail 1
else
    read -r p f s <<<"$res"
    pass "$p"
    fail "$f"
    skip "$s"
    [ "$prc" = 0 ] || [ "$f" != 0 ] || fail 1
fi

# ----------------------------------------------------------- fork mount: fsx
. "$HERE/fsx.sh"

# ------------------------------------------------------------- the daemon logs
if grep -rl panicked "$STORE/logs" >/dev/null 2>&1; then
    say "a daemon panicked:"
    grep -r -B2 -A5 panicked "$STORE/logs" | head -40
    fail 1
else
    pass 1
fi

say "totals over pjdfstest, EROFS checks, fsx and the remount comparison (transport: ${STOREFS_TRANSPORT:-auto}):"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
