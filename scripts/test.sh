#!/usr/bin/env bash
# The whole test suite: set up a fresh Debian 12 machine (as root), then run every
# test, including the ones that mount for real. CI runs exactly this.
# Order: the conformance suite (pjdfstest, fsx, EROFS checks; it prints its own
# `N passed, N failed, N skipped` line), xfstests' CI list on ext4 and on forks (its
# last line: the fork's counts, then ext4's), the package test (tests/package.sh), then
# cargo test (remote tests over moto and azurite), then the two remote binaries
# that mount again over io_uring, whose summaries print last.
set -euo pipefail
cd "$(dirname "$0")/.."

# Where the time goes: each step's seconds, printed as a table when the script
# ends (CI's budget is 20 minutes; CONTRIBUTING.md, "Testing").
PHASES=() PHASE= PHASE_AT=$SECONDS
phase() {
    [ -n "$PHASE" ] && PHASES+=("$(printf '%5d s  %s' $((SECONDS - PHASE_AT)) "$PHASE")")
    PHASE=$1 PHASE_AT=$SECONDS
    [ -n "$1" ] && echo "test.sh: -- $1 (at $SECONDS s)"
    return 0
}
print_phases() {
    phase ""
    echo "test.sh: time per step (${SECONDS} s in all):"
    printf '%s\n' "${PHASES[@]}"
}
trap print_phases EXIT

phase "set-up (apt-get, moto, pjdfstest, fsx)"
bash scripts/setup-debian.sh
# Every test is built to run (build.rs): the ones that need root (this script
# runs as root), and the S3 and Azure variants of the remote tests, whose
# servers start below. Without a server such a variant fails; the GCS
# variants, with no emulator here, are ignored and counted so.
export STOREFS_TEST_REMOTES=s3,azure
phase "debug build of every target"
cargo build --locked --all-targets
# Every mount of this first pass on /dev/fuse, whatever the machine's switch for
# FUSE over io_uring says; the io_uring pass follows.
export STOREFS_TRANSPORT=classic
phase "conformance on /dev/fuse (release build, pjdfstest, fsx)"
bash tests/conformance/run.sh
# xfstests: the fixed list tests/conformance/xfstests-ci.list on ext4 loop devices
# and on two forks, side by side (CONTRIBUTING.md, "Conformance"); builds xfstests from
# ../shared/xfstests once (cached in /var/tmp/storefs-xfstests) and prints the counts.
# About 2 minutes (3.5 with that first build) on 2 cores.
phase "xfstests CI list (ext4 and forks)"
bash tests/conformance/xfstests.sh
# The Debian package: build, apt-get install, mount by mount(8) and fstab, man, purge.
phase "package test"
bash tests/package.sh
# FUSE over io_uring (--transport uring): the conformance suite and the test
# binaries that mount, again with every mount served over the rings.
phase "io_uring pass (conformance and mounting binaries)"
bash tests/uring.sh

# The S3-compatible server of the remote tests: moto (Python) on a free loopback
# port, stopped by pid when this script exits, whatever happens; its conditional
# PUT (If-None-Match: *, If-Match) is atomic, as ref updates need. (Until
# 2026-12-07 s3s-fs, a Rust server, ran every binary and moto the remote ones a
# second time: compiling s3s-fs cost CI 2 to 4 of its 20 minutes; it is now
# installed only for bench/remote_link.py, by `setup-debian.sh --bench`.)
# The variables the tests read are described in tests/common/mod.rs.
phase "S3 server (moto) and azurite"
SERVER_PIDS=()
stop_servers() {
    print_phases
    for pid in "${SERVER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
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

MOTO_PORT=$(free_port)
MOTO_LOG=$(mktemp /tmp/storefs-moto.XXXXXX.log)
moto_server -H 127.0.0.1 -p "$MOTO_PORT" >"$MOTO_LOG" 2>&1 &
SERVER_PIDS+=($!)
MOTO_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
wait_up moto_server "$!" "$MOTO_LOG" "$MOTO_ENDPOINT/"
curl -sf -o /dev/null -X PUT "$MOTO_ENDPOINT/$STOREFS_TEST_S3_BUCKET" \
    || { echo "test.sh: cannot create bucket on $MOTO_ENDPOINT; moto log: $MOTO_LOG" >&2; exit 1; }
source scripts/azurite.sh # azurite for the az:// remote tests: installed if missing, stopped on exit

# Every test binary, the remote ones over moto and azurite ...
export STOREFS_TEST_S3_ENDPOINT="$MOTO_ENDPOINT" AWS_ENDPOINT_URL="$MOTO_ENDPOINT"
phase "cargo test, every target (remotes over moto and azurite)"
cargo test --locked --all-targets -- --test-threads=2
phase "fork tests again with --cache-size 0"
# The real-mount fork tests again, every fork parking all it can after each
# operation (CONTRIBUTING.md, "Testing").
STOREFS_TEST_CACHE_SIZE=0 cargo test --locked --test fork_mount --test fork_cli --test fork_acl --test checkout -- --test-threads=2
# ... and the two that mount (lazy remote mounts) again over io_uring, on moto
# (tests/uring.sh ran every other mounting binary over the rings before the
# server was up).
phase "remote mounts over io_uring"
bash tests/uring.sh --remote
