#!/usr/bin/env bash
# The whole test suite: set up a fresh Debian 12 machine (as root), then run every
# test, including the ones that mount for real. CI runs exactly this.
# Order: the conformance suite (pjdfstest, fsx, EROFS checks; it prints its own
# `N passed, N failed, N skipped` line), xfstests' CI list on ext4 and on forks (its
# last line: the fork's counts, then ext4's), the package test (tests/package.sh), then
# cargo test (remote tests over s3s-fs), the two remote binaries that mount again
# over io_uring, then the three remote test binaries again over moto, whose
# summaries print last.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-debian.sh
# Every test is built to run (build.rs): the ones that need root (this script
# runs as root), and the S3 and Azure variants of the remote tests, whose
# servers start below. Without a server such a variant fails; the GCS
# variants, with no emulator here, are ignored and counted so.
export STOREFS_TEST_REMOTES=s3,azure
cargo build --locked --all-targets
# Every mount of this first pass on /dev/fuse, whatever the machine's switch for
# FUSE over io_uring says; the io_uring pass follows.
export STOREFS_TRANSPORT=classic
bash tests/conformance/run.sh
# xfstests: the fixed list tests/conformance/xfstests-ci.list on ext4 loop devices
# and on two forks, side by side (CONTRIBUTING.md, "Conformance"); builds xfstests from
# ../shared/xfstests once (cached in /var/tmp/storefs-xfstests) and prints the counts.
# About 2 minutes (3.5 with that first build) on 2 cores.
bash tests/conformance/xfstests.sh
# The Debian package: build, apt-get install, mount by mount(8) and fstab, man, purge.
bash tests/package.sh
# FUSE over io_uring (--transport uring): the conformance suite and the test
# binaries that mount, again with every mount served over the rings.
bash tests/uring.sh

# Two S3-compatible servers on free loopback ports, each stopped by pid when this
# script exits, whatever happens: s3s-fs (Rust; about half moto's CPU time per
# request) for the whole suite, and moto (Python) as a second implementation for the
# three remote binaries only. Both take the same dummy keys; the bucket is a directory for s3s-fs
# and a PUT for moto. s3s-fs's conditional PUT is not atomic (check, then write):
# a test of concurrent ref updates belongs on moto (CONTRIBUTING.md, "Testing").
# The variables the tests read are described in tests/common/mod.rs.
SERVER_PIDS=()
S3_ROOT=$(mktemp -d /tmp/storefs-s3s-fs.XXXXXX)
stop_servers() {
    for pid in "${SERVER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$S3_ROOT"
}
trap stop_servers EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_up NAME PID LOG URL: until URL answers (any HTTP status), or fail showing LOG.
wait_up() {
    for _ in $(seq 1 100); do
        curl -s -o /dev/null "$4" && return 0
        if ! kill -0 "$2" 2>/dev/null; then
            echo "test.sh: $1 exited; its log:" >&2; cat "$3" >&2; exit 1
        fi
        sleep 0.2
    done
    echo "test.sh: $1 did not answer at $4; its log: $3" >&2; exit 1
}
export AWS_ALLOW_HTTP=true AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=storefs-test AWS_SECRET_ACCESS_KEY=storefs-test
export STOREFS_TEST_S3_BUCKET=storefs-test

S3S_PORT=$(free_port)
S3S_LOG=$(mktemp /tmp/storefs-s3s-fs.XXXXXX.log)
mkdir "$S3_ROOT/$STOREFS_TEST_S3_BUCKET"
s3s-fs --host 127.0.0.1 --port "$S3S_PORT" --access-key "$AWS_ACCESS_KEY_ID" \
    --secret-key "$AWS_SECRET_ACCESS_KEY" "$S3_ROOT" >"$S3S_LOG" 2>&1 &
SERVER_PIDS+=($!)
S3S_ENDPOINT="http://127.0.0.1:$S3S_PORT"
wait_up s3s-fs "$!" "$S3S_LOG" "$S3S_ENDPOINT/"

MOTO_PORT=$(free_port)
MOTO_LOG=$(mktemp /tmp/storefs-moto.XXXXXX.log)
moto_server -H 127.0.0.1 -p "$MOTO_PORT" >"$MOTO_LOG" 2>&1 &
SERVER_PIDS+=($!)
MOTO_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
wait_up moto_server "$!" "$MOTO_LOG" "$MOTO_ENDPOINT/"
curl -sf -o /dev/null -X PUT "$MOTO_ENDPOINT/$STOREFS_TEST_S3_BUCKET" \
    || { echo "test.sh: cannot create bucket on $MOTO_ENDPOINT; moto log: $MOTO_LOG" >&2; exit 1; }
source scripts/azurite.sh # azurite for the az:// remote tests: installed if missing, stopped on exit

# Every test binary, the remote ones over s3s-fs ...
export STOREFS_TEST_S3_ENDPOINT="$S3S_ENDPOINT" AWS_ENDPOINT_URL="$S3S_ENDPOINT"
cargo test --locked --all-targets -- --test-threads=2
# The real-mount fork tests again, every fork parking all it can after each
# operation (CONTRIBUTING.md, "Testing").
STOREFS_TEST_CACHE_SIZE=0 cargo test --locked --test fork_mount --test fork_cli --test fork_acl --test checkout -- --test-threads=2
# ... the two that mount (lazy remote mounts) again over io_uring, on s3s-fs
# (tests/uring.sh ran every other mounting binary over the rings before the
# servers were up) ...
bash tests/uring.sh --remote
# ... and their S3 variants again over moto, the second implementation.
STOREFS_TEST_S3_ENDPOINT="$MOTO_ENDPOINT" AWS_ENDPOINT_URL="$MOTO_ENDPOINT" \
    cargo test --locked --test remote --test remote_mount --test remote_forks -- --test-threads=2 s3::
