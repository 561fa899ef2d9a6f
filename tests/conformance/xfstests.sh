#!/usr/bin/env bash
# xfstests (fstests) on storefs forks, side by side with ext4 (issue 41).
#
#   bash tests/conformance/xfstests.sh                 # the CI list (xfstests-ci.list)
#   bash tests/conformance/xfstests.sh --list FILE     # the tests named in FILE
#   bash tests/conformance/xfstests.sh generic/001 generic/013
#   bash tests/conformance/xfstests.sh --full          # -g generic/quick (633 tests: hours)
#   bash tests/conformance/xfstests.sh --build-only    # build xfstests (or find it built), nothing else
#   ... --ext4-results DIR                             # the forks only; ext4's results from an earlier run
#
# What it does, as root:
# 1. xfstests from the tarball (commit 63a29724; no network needed): unpacked into
#    $XFSTESTS_DIR/src (default /var/tmp/storefs-xfstests/src, kept between runs
#    as a cache), tests/conformance/xfstests-*.patch applied, its build and run
#    dependencies installed with apt-get by name when missing, `make -j$(nproc)`.
#    A build of the same tarball and the same patches is reused.
# 2. The users xfstests switches to (fsgqa, fsgqa2, 123456-fsgqa, each with a
#    home) when missing, removed with their homes on exit (only those it made).
# 3. The baseline: two ext4 file systems on loop devices (sparse files in the
#    temp dir), TEST_DEV mkfs'd here, SCRATCH_DEV by the tests.
# 4. The file system under test: two stores, each with a fork of an empty
#    checkpoint (TEST_DEV and SCRATCH_DEV), mounted by xfstests itself through
#    `mount -t fuse.storefs` (FSTYP=fuse, FUSE_SUBTYP=.storefs, -o allow_other,
#    open_checks: opens reach the daemon and the chattr flags refuse them as
#    ext4's may_open does, which generic/079 checks; a fork's default is
#    zero-message opens, docs/design.md "Opens on forks").
#    The helpers mount-scripts/mount.fuse.storefs and umount.fuse.storefs are
#    installed in /sbin for the run and removed on exit; a file that was
#    there is put back.
# 5. The tests run on ext4, then on the forks; then per test both results, the
#    counts, "ext4 pass → fork fail" and "ext4 pass → fork not run" (with
#    xfstests' reason, then those reasons with their counts), and one summary
#    line last. With --ext4-results DIR the ext4 side is not run (no loop
#    devices): its results are DIR/result.xml (or DIR itself, a result.xml),
#    the results/ext4 of an earlier run kept with KEEP_WORK=1, run on the same
#    tests. For a second transport: the forks only, compared with the same
#    baseline, e.g.
#      STOREFS_TRANSPORT=uring bash tests/conformance/xfstests.sh --list L --ext4-results OLD/results/ext4
#    (with the kernel's enable_uring switch on: tests/uring.sh). Which
#    transport served the fork's test mount is printed (sampled every 10 s).
# Every mount, loop device, /sbin file and user it made is undone in a trap
# that runs on failure too.
#
# Exit status non-zero when a test of the CI list does not pass on the fork,
# or a test passes on ext4 and does not pass on the fork (with --full that
# includes the known gaps: docs/design.md, "xfstests (issue 41)").
#
# Environment:
#   STOREFS_BIN       the storefs binary (default: cargo build --release, target/release/storefs)
#   XFSTESTS_TARBALL  default ../shared/xfstests/xfstests-63a29724.tar.gz beside the repo
#   XFSTESTS_DIR      the build cache (default /var/tmp/storefs-xfstests)
#   XFSTESTS_TIMEOUT  seconds before one side's run is killed (default 900; --full: 36000)
#   STOREFS_TRANSPORT how the fork mounts are served (classic, uring, auto); storefs reads it
#   KEEP_WORK=1       keep the temp dir (results, xfstests' .full and .out.bad files)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/tests/conformance
export PATH="$HOME/.cargo/bin:$PATH" NO_COLOR=1

say() { echo "xfstests: $*"; }
die() { echo "xfstests: $*" >&2; exit 1; }

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
FULL=0 BUILD_ONLY=0 LIST= NAMES=() EXT4_XML=
while [ $# -gt 0 ]; do
    case $1 in
        --full) FULL=1 ;;
        --build-only) BUILD_ONLY=1 ;;
        --list) [ $# -ge 2 ] || die "--list needs a file"; LIST=$(realpath "$2") || exit 1; shift ;;
        --list=*) LIST=$(realpath "${1#--list=}") || exit 1 ;;
        --ext4-results) [ $# -ge 2 ] || die "--ext4-results needs a directory (an earlier run's results/ext4)"
            EXT4_XML=$2; shift ;;
        --ext4-results=*) EXT4_XML=${1#--ext4-results=} ;;
        -h|--help) usage ;;
        -*) echo "xfstests: unknown option $1" >&2; usage 2 ;;
        *) NAMES+=("$1") ;;
    esac
    shift
done
CI_LIST=$HERE/xfstests-ci.list
if [ "$FULL" = 0 ] && [ -z "$LIST" ] && [ ${#NAMES[@]} = 0 ]; then
    LIST=$CI_LIST
fi
if [ -n "$EXT4_XML" ]; then
    [ -d "$EXT4_XML" ] && EXT4_XML=$EXT4_XML/result.xml
    [ -s "$EXT4_XML" ] ||
        die "--ext4-results: no result.xml at $EXT4_XML; give the results/ext4 directory of a run kept with KEEP_WORK=1"
    EXT4_XML=$(realpath "$EXT4_XML")
fi
[ "$(id -u)" = 0 ] || die "run as root (mounts, loop devices, users, apt-get)"

# The tarball: XFSTESTS_TARBALL, else ../shared/xfstests/ beside the clone
# (where this project's machines keep it: they cannot fetch it). Without it
# the run is skipped, and says so as a count, not a pass.
TARBALL=${XFSTESTS_TARBALL:-$ROOT/../shared/xfstests/xfstests-63a29724.tar.gz}
if [ ! -f "$TARBALL" ]; then
    say "SKIPPED: no xfstests tarball at $TARBALL (set XFSTESTS_TARBALL); not one xfstests test ran"
    echo "0 passed, 0 failed, 0 not run on the fork; 1 skipped (no xfstests source)"
    exit 0
fi
XFSTESTS_DIR=${XFSTESTS_DIR:-/var/tmp/storefs-xfstests}
XSRC=$XFSTESTS_DIR/src
if [ "$FULL" = 1 ]; then
    XFSTESTS_TIMEOUT=${XFSTESTS_TIMEOUT:-36000}
else
    XFSTESTS_TIMEOUT=${XFSTESTS_TIMEOUT:-900}
fi

# ------------------------------------------------------------- cleanup trap
WORK=
MADE_USERS=()
LOOPS=()
# The helpers installed in /sbin for the run: each saved first when one is
# there, and put back (or removed) on exit.
HELPERS=(mount.fuse.storefs umount.fuse.storefs)
HELPERS_INSTALLED=()
CHECK_PID=
SAMPLER_PID=
cleanup() {
    local mp loop u i
    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
    if [ -n "$CHECK_PID" ] && kill -0 "$CHECK_PID" 2>/dev/null; then
        say "stopping xfstests (timeout's pid $CHECK_PID)"
        kill -TERM "$CHECK_PID" 2>/dev/null
        for i in $(seq 1 60); do
            kill -0 "$CHECK_PID" 2>/dev/null || break
            sleep 0.5
        done
        # timeout made check's process group, its own pid: what is left of it
        kill -KILL -- -"$CHECK_PID" 2>/dev/null
        wait "$CHECK_PID" 2>/dev/null
    fi
    if [ -n "$WORK" ]; then
        for mp in "$WORK"/mnt/*; do
            mountpoint -q "$mp" 2>/dev/null || continue
            case $mp in
                */fork-*) "${BIN:-storefs}" --store "$WORK/store-${mp##*/fork-}" umount --no-commit "$mp" >/dev/null 2>&1 ;;
                *) umount "$mp" 2>/dev/null ;;
            esac
            mountpoint -q "$mp" 2>/dev/null && umount -l "$mp" 2>/dev/null
        done
    fi
    for loop in "${LOOPS[@]}"; do
        losetup -d "$loop" 2>/dev/null || say "could not detach $loop"
    done
    for h in "${HELPERS_INSTALLED[@]}"; do
        if [ -e "$WORK/$h.saved" ] || [ -L "$WORK/$h.saved" ]; then
            mv -f "$WORK/$h.saved" "/sbin/$h"
        else
            rm -f "/sbin/$h"
        fi
    done
    for u in "${MADE_USERS[@]}"; do
        userdel --remove "$u" 2>/dev/null
        getent group "$u" >/dev/null && groupdel "$u" 2>/dev/null
    done
    if [ -n "$WORK" ]; then
        if [ -n "${KEEP_WORK:-}" ]; then
            echo "xfstests: kept $WORK" >&2
        else
            rm -rf "$WORK"
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------ build xfstests
# Debian 12 package names. Build: what configure checks for (libcap-dev,
# liburing-dev and libaio-dev are optional there; without them some of
# xfstests' helpers are not built and the tests using them do not run). Run:
# what common/config requires (xfs_io, bc, perl, awk) and what tests call
# (mkfs.ext4, getfattr/setfacl, fuser, uuidgen).
BUILD_PKGS="make gcc patch autoconf automake libtool libtool-bin pkg-config uuid-dev xfslibs-dev
    libacl1-dev libattr1-dev libaio-dev liburing-dev libcap-dev"
RUN_PKGS="xfsprogs e2fsprogs acl attr bc gawk perl psmisc python3 util-linux uuid-runtime fuse3"
install_missing() {
    local p missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} = 0 ] && return 0
    say "apt-get install ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
            || die "apt-get install ${missing[*]} failed"
    fi
}

build_xfstests() {
    local id patches=("$HERE"/xfstests-*.patch) p t0
    [ -e "${patches[0]}" ] || patches=()
    # What the build is made of: the tarball and the patches, by content.
    id=$( { sha256sum <"$TARBALL"; for p in "${patches[@]}"; do sha256sum <"$p"; done; } | sha256sum | cut -c1-16)
    install_missing $RUN_PKGS
    if [ -f "$XFSTESTS_DIR/build-id" ] && [ "$(cat "$XFSTESTS_DIR/build-id")" = "$id" ] &&
        [ -x "$XSRC/check" ] && [ -x "$XSRC/ltp/fsstress" ] && [ -x "$XSRC/ltp/fsx" ]; then
        say "xfstests already built in $XSRC ($(basename "$TARBALL"), ${#patches[@]} patch(es))"
        return 0
    fi
    install_missing $BUILD_PKGS
    t0=$(date +%s)
    rm -rf "$XSRC" "$XFSTESTS_DIR/build-id"
    mkdir -p "$XSRC" || die "cannot make $XSRC"
    tar -xzf "$TARBALL" -C "$XSRC" --strip-components=1 || die "cannot unpack $TARBALL"
    for p in "${patches[@]}"; do
        say "applying $(basename "$p")"
        patch -d "$XSRC" -p1 --quiet --forward <"$p" || die "$(basename "$p") does not apply"
    done
    say "building xfstests in $XSRC (make -j$(nproc); the log is $XFSTESTS_DIR/build.log)"
    if ! make -C "$XSRC" -j"$(nproc)" >"$XFSTESTS_DIR/build.log" 2>&1; then
        tail -30 "$XFSTESTS_DIR/build.log"
        die "xfstests build failed; its log is $XFSTESTS_DIR/build.log"
    fi
    echo "$id" >"$XFSTESTS_DIR/build-id"
    say "built xfstests in $(($(date +%s) - t0)) s"
}
mkdir -p "$XFSTESTS_DIR" || die "cannot make $XFSTESTS_DIR"
build_xfstests
[ "$BUILD_ONLY" = 1 ] && { say "build only: done"; exit 0; }

# ------------------------------------------------------------- storefs binary
if [ -n "${STOREFS_BIN:-}" ]; then
    BIN=$STOREFS_BIN
else
    cargo build --release --locked --bin storefs || die "cargo build failed"
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/storefs
fi
[ -x "$BIN" ] || die "no storefs binary at $BIN"
BIN=$(realpath "$BIN")
export STOREFS_BIN=$BIN
[ -c /dev/fuse ] || die "no /dev/fuse"

# -------------------------------------------------------------- the users
for u in fsgqa fsgqa2 123456-fsgqa; do
    id "$u" >/dev/null 2>&1 && continue
    # With a home: su(1) warns on stderr without one, which tests compare.
    # 123456-fsgqa starts with digits, which useradd takes only with --badname.
    useradd --user-group --create-home "$u" 2>/dev/null ||
        useradd --badname --user-group --create-home "$u" || die "cannot add user $u"
    MADE_USERS+=("$u")
done

WORK=$(mktemp -d /tmp/storefs-xfs-XXXXXX) || die "mktemp failed"
chmod 755 "$WORK"
mkdir -p "$WORK/mnt/ext4-test" "$WORK/mnt/ext4-scratch" "$WORK/mnt/fork-test" "$WORK/mnt/fork-scratch" \
    "$WORK/results" "$WORK/empty"

# ---------------------------------------------------------- the mount helpers
# /sbin/mount.fuse.storefs and /sbin/umount.fuse.storefs for the run: the
# project's own (mount-scripts/), as the Debian package installs them, running
# $STOREFS_BIN. mount(8) shows the source as given (TEST_DEV=xfs-test),
# `-o remount` changes the mount in place, and umount(8) of a fork returns
# once it is committed (or the next mount waits for its daemon).
install_helpers() {
    local h
    for h in "${HELPERS[@]}"; do
        if [ -e "/sbin/$h" ] || [ -L "/sbin/$h" ]; then
            cp -a "/sbin/$h" "$WORK/$h.saved" || die "cannot save /sbin/$h"
        fi
        HELPERS_INSTALLED+=("$h")
        install -m 755 "$ROOT/mount-scripts/$h" "/sbin/$h" || die "cannot install /sbin/$h"
    done
}
install_helpers

# ------------------------------------------------------------ the file systems
# ext4: sparse files on loop devices (none when its results are reused).
EXT4_TEST= EXT4_SCRATCH=
if [ -z "$EXT4_XML" ]; then
    for d in test scratch; do
        truncate -s 8G "$WORK/ext4-$d.img" || die "truncate failed"
        loop=$(losetup -f --show "$WORK/ext4-$d.img") || die "losetup failed"
        LOOPS+=("$loop")
        eval "EXT4_${d^^}=\$loop"
    done
    mkfs.ext4 -q -F "$EXT4_TEST" || die "mkfs.ext4 $EXT4_TEST failed"
fi

# Forks: a store each, an empty checkpoint, a fork of it.
for d in test scratch; do
    { "$BIN" --store "$WORK/store-$d" snapshot "$WORK/empty" --ref empty -m xfstests &&
        "$BIN" --store "$WORK/store-$d" fork empty --name "xfs-$d"; } >"$WORK/fork-$d.out" 2>&1 ||
        { cat "$WORK/fork-$d.out" >&2; die "cannot make the $d fork"; }
done

# One config file per side (no sections). xfstests mounts TEST_DEV itself.
cat >"$WORK/ext4.config" <<EOF
export FSTYP=ext4
export TEST_DEV=$EXT4_TEST
export TEST_DIR=$WORK/mnt/ext4-test
export SCRATCH_DEV=$EXT4_SCRATCH
export SCRATCH_MNT=$WORK/mnt/ext4-scratch
export RESULT_BASE=$WORK/results/ext4
EOF
cat >"$WORK/fork.config" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.storefs
export TEST_DEV=xfs-test
export TEST_DIR=$WORK/mnt/fork-test
export SCRATCH_DEV=xfs-scratch
export SCRATCH_MNT=$WORK/mnt/fork-scratch
export TEST_FS_MOUNT_OPTS="-o store=$WORK/store-test,allow_other,open_checks"
export MOUNT_OPTIONS="-o store=$WORK/store-scratch,allow_other,open_checks"
export RESULT_BASE=$WORK/results/fork
EOF

# ------------------------------------------------------------------ the tests
if [ "$FULL" = 1 ]; then
    SELECT=(-g generic/quick)
    : >"$WORK/tests"
    what="-g generic/quick"
else
    if [ -n "$LIST" ]; then
        sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$LIST" >"$WORK/tests"
    fi
    printf '%s\n' "${NAMES[@]}" | sed '/^$/d' >>"$WORK/tests"
    [ -s "$WORK/tests" ] || die "no tests to run"
    mapfile -t SELECT <"$WORK/tests"
    what="${#SELECT[@]} test(s)${LIST:+ from ${LIST#$ROOT/}}"
fi

declare -A SECS
run_side() {
    local side=$1 t0 rc
    say "$side: ./check $what (timeout ${XFSTESTS_TIMEOUT}s; log $WORK/$side.log)"
    t0=$(date +%s)
    # In the background and waited for, so that a signal to this script runs
    # its trap at once (which stops check: timeout passes the signal on to
    # check's whole process group, which is not this script's).
    (cd "$XSRC" && HOST_OPTIONS=$WORK/$side.config exec timeout --kill-after=30 "$XFSTESTS_TIMEOUT" \
        ./check -R xunit-quiet "${SELECT[@]}") >"$WORK/$side.log" 2>&1 &
    CHECK_PID=$!
    wait "$CHECK_PID"
    rc=$?
    CHECK_PID=
    SECS[$side]=$(($(date +%s) - t0))
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && say "$side: killed after ${XFSTESTS_TIMEOUT}s"
    say "$side: done in ${SECS[$side]} s (check exit $rc)"
    if [ ! -s "$WORK/results/$side/result.xml" ]; then
        say "$side: no result.xml; the end of check's output:"
        tail -20 "$WORK/$side.log"
    fi
}
if [ -z "$EXT4_XML" ]; then
    run_side ext4
    EXT4_XML=$WORK/results/ext4/result.xml
else
    say "ext4: not run; its results are $EXT4_XML"
    SECS[ext4]=reused
fi
# Which transport serves the fork's test mount, asked every 10 s while the
# forks run (`storefs status --json`; check unmounts it when it ends): a uring
# pass that fell back to /dev/fuse is seen here.
sample_transport() {
    while sleep 10; do
        "$BIN" --store "$WORK/store-test" status --json 2>/dev/null | python3 -c 'import json, sys
for m in json.load(sys.stdin):
    print((m.get("transport") or {}).get("name", "unknown"))' 2>/dev/null
    done >"$WORK/fork-transport"
}
sample_transport &
SAMPLER_PID=$!
run_side fork
kill "$SAMPLER_PID" 2>/dev/null
wait "$SAMPLER_PID" 2>/dev/null
SAMPLER_PID=
served=$(sort "$WORK/fork-transport" | uniq -c | awk '{printf "%s%s (%s samples)", sep, $2, $1; sep=", "}')
say "fork: the test mount was served over: ${served:-no sample (a run shorter than 10 s)}"
# xfstests leaves TEST_DEV mounted: unmount the forks with storefs (it commits
# and waits for the daemon; a failure there fails the run) and the ext4 ones,
# so the trap has nothing left to do.
UMOUNT_FAILED=0
for d in test scratch; do
    if mountpoint -q "$WORK/mnt/fork-$d" &&
        ! out=$("$BIN" --store "$WORK/store-$d" umount "$WORK/mnt/fork-$d" 2>&1); then
        say "storefs umount of the $d fork failed: $out"
        UMOUNT_FAILED=1
    fi
done
umount "$WORK/mnt/ext4-test" 2>/dev/null
umount "$WORK/mnt/ext4-scratch" 2>/dev/null

# A daemon that panicked is a failure whatever the tests said.
PANIC=0
if grep -l panicked "$WORK"/store-*/logs/* >/dev/null 2>&1; then
    say "a storefs daemon panicked:"
    grep -h -B2 -A5 panicked "$WORK"/store-*/logs/* | head -40
    PANIC=1
fi

# What each test that failed on the fork printed against what it should have
# (the temp dir and its results go on exit unless KEEP_WORK=1).
for bad in "$WORK"/results/fork/*/*.out.bad; do
    [ -f "$bad" ] || continue
    t=${bad#"$WORK"/results/fork/}
    t=${t%.out.bad}
    say "fork: $t's output against the expected (first 20 lines of the diff):"
    diff -u "$XSRC/tests/$t.out" "$bad" | sed -n '3,22p'
done


if [ "${SECS[ext4]}" = reused ]; then
    say "ext4 not run (results of $EXT4_XML), fork ${SECS[fork]} s; per test (ext4, fork):"
else
    say "ext4 ${SECS[ext4]} s, fork ${SECS[fork]} s; per test (ext4, fork):"
fi
ci_arg=
[ "$LIST" = "$CI_LIST" ] && ci_arg=$CI_LIST
python3 "$HERE/xfstests-results.py" "$EXT4_XML" "$WORK/results/fork/result.xml" \
    "$WORK/tests" "$ci_arg"
rc=$?
[ "$PANIC" = 0 ] && [ "$UMOUNT_FAILED" = 0 ] || rc=1
exit "$rc"
