#!/usr/bin/env bash
# The FUSE-over-io_uring pass of the test suite (scripts/test.sh calls it after the
# /dev/fuse pass): every mount served over the rings (`--transport uring`).
#
# 1. With the kernel's switch off, `storefs mount --transport uring` refuses and
#    names the switch.
# 2. With it on but without CAP_SYS_NICE, `--transport auto` serves over
#    /dev/fuse.
# 3. With it on: the conformance suite (pjdfstest, fsx with fewer operations,
#    EROFS checks) and the test binaries whose mounts exercise the transport
#    (listed below, with why the others are left to the /dev/fuse pass), with
#    STOREFS_TRANSPORT=uring, which storefs and the in-process test mounts read.
#    tests/fork_cli.rs checks through `status --json` that the rings answered.
#
# `tests/uring.sh --remote` (scripts/test.sh calls it once its S3 servers are up,
# with STOREFS_TEST_S3_ENDPOINT set) runs only the two remote binaries that
# mount, remote_mount and remote_forks (their S3 cases), over the rings.
#
# The switch (/sys/module/fuse/parameters/enable_uring) is global: it is put back
# as it was on exit, whatever happens. A kernel without FUSE over io_uring (older
# than 6.14, or built without CONFIG_FUSE_IO_URING) skips this pass and says so:
# a gap to report, not a pass. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PARAM=/sys/module/fuse/parameters/enable_uring
say() { echo "uring: $*"; }

if [ ! -e "$PARAM" ]; then
    say "SKIPPED: this kernel has no FUSE over io_uring ($PARAM is missing); every mount was tested on /dev/fuse only"
    exit 0
fi
WAS=$(cat "$PARAM")
WORK=$(mktemp -d /tmp/storefs-uring.XXXXXX)
cleanup() {
    if mountpoint -q "$WORK/mnt" 2>/dev/null; then
        "$BIN" --store "$WORK/store" umount "$WORK/mnt" >/dev/null 2>&1 || umount "$WORK/mnt" || true
    fi
    rm -rf "$WORK"
    echo "$WAS" >"$PARAM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --release --locked --bin storefs
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/storefs

if [ "${1:-}" = --remote ]; then
    echo Y >"$PARAM"
    STOREFS_TRANSPORT=uring cargo test --locked --test remote_mount --test remote_forks \
        -- --test-threads=2 s3::
    say "the lazy mounts of remote_mount and remote_forks were served over FUSE io_uring (switch put back to $WAS on exit)"
    exit 0
fi

# 1. Switched off: a refusal that names the switch, and nothing mounted.
echo N >"$PARAM"
mkdir -p "$WORK/src" "$WORK/mnt"
echo x >"$WORK/src/f"
"$BIN" --store "$WORK/store" init >/dev/null
"$BIN" --store "$WORK/store" snapshot "$WORK/src" --ref u >/dev/null
if out=$("$BIN" --store "$WORK/store" mount u "$WORK/mnt" --transport uring 2>&1); then
    say "FAILED: --transport uring mounted with enable_uring=N"
    exit 1
fi
if ! grep -q enable_uring <<<"$out" || mountpoint -q "$WORK/mnt"; then
    say "FAILED: the refusal does not name the switch, or left a mount: $out"
    exit 1
fi
say "switch off: --transport uring refused: $out"

# 2. Switched on, a daemon without CAP_SYS_NICE: `auto` serves over /dev/fuse
#    (its queues could not wake requesters on their own core; design.md).
echo Y >"$PARAM"
setpriv --bounding-set -sys_nice "$BIN" --store "$WORK/store" mount u "$WORK/mnt" --transport auto >/dev/null
transport=$("$BIN" --store "$WORK/store" status --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["transport"]["name"])')
"$BIN" --store "$WORK/store" umount "$WORK/mnt" >/dev/null
if [ "$transport" != /dev/fuse ]; then
    say "FAILED: --transport auto without CAP_SYS_NICE served over $transport, not /dev/fuse"
    exit 1
fi
say "switch on, no CAP_SYS_NICE: --transport auto served over /dev/fuse"

# 3. Switched on: everything that mounts, over the rings.
export STOREFS_TRANSPORT=uring
# fsx runs a third as long as on /dev/fuse (30,000 and 15,000 operations
# unless set): the same views, through the other transport's decoding of
# every operation fsx makes; the whole suite stays within CI's 20 minutes.
FSX_OPS=${FSX_OPS:-30000} FSX_COPY_OPS=${FSX_COPY_OPS:-15000} bash tests/conformance/run.sh
# The binaries whose mounts exercise the transport: every operation on a
# fork and on a checkpoint (fork_mount, fs_mount, mount_views), ACL xattrs
# (fork_acl), large reads and writes (large_file_reads), a whole tree's
# listing and attributes compared by rsync (lossless_tree), fork_cli,
# which checks that the rings answered, and fork_xfstests_regress (O_TMPFILE,
# whiteouts, chattr, atime, file handles over the rings). Both transports decode with one
# codec (src/fs/wire.rs) and call one dispatcher (src/fs/dispatch.rs); they
# differ only in how the bytes move (src/fs/devfuse.rs, src/fs/uring.rs), so
# the binaries that test what a view decides (mount_origin, hostile,
# memory_bound, archive, browse, cli_manners, maint) run on /dev/fuse only:
# about 4 minutes of CI.
cargo test --locked --no-fail-fast \
    --test fork_mount --test fs_mount --test fork_cli --test fork_acl --test mount_views \
    --test large_file_reads --test lossless_tree --test fork_xfstests_regress \
    -- --test-threads=2
say "every mount above was served over FUSE io_uring (switch put back to $WAS on exit)"
