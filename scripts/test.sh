#!/usr/bin/env bash
# The whole test suite: set up a fresh Debian 12 machine (as root), then run every
# test, including the ones that mount for real. CI runs exactly this.
# Order: the conformance suite (pjdfstest, fsx, EROFS checks; it prints its own
# `N passed, N failed, N skipped` line), the package test (tests/package.sh), then
# cargo test, whose summary prints last.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-debian.sh
cargo build --locked --all-targets
bash tests/conformance/run.sh
# The Debian package: build, apt-get install, mount by mount(8) and fstab, man, purge.
bash tests/package.sh

# An S3-compatible server (moto) on a free loopback port for tests/remote.rs,
# stopped by pid when this script exits, whatever happens.
MOTO_PID=
stop_moto() { if [ -n "$MOTO_PID" ]; then kill "$MOTO_PID" 2>/dev/null || true; wait "$MOTO_PID" 2>/dev/null || true; fi; }
trap stop_moto EXIT
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MOTO_LOG=$(mktemp /tmp/storefs-moto.XXXXXX.log)
moto_server -H 127.0.0.1 -p "$PORT" >"$MOTO_LOG" 2>&1 &
MOTO_PID=$!
export STOREFS_TEST_S3_ENDPOINT="http://127.0.0.1:$PORT"
export AWS_ENDPOINT_URL="$STOREFS_TEST_S3_ENDPOINT" AWS_ALLOW_HTTP=true AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=storefs-test AWS_SECRET_ACCESS_KEY=storefs-test
export STOREFS_TEST_S3_BUCKET=storefs-test
for _ in $(seq 1 100); do
    curl -s -o /dev/null "$STOREFS_TEST_S3_ENDPOINT/" && break
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
        echo "test.sh: moto_server exited; its log:" >&2; cat "$MOTO_LOG" >&2; exit 1
    fi
    sleep 0.2
done
curl -sf -o /dev/null -X PUT "$STOREFS_TEST_S3_ENDPOINT/$STOREFS_TEST_S3_BUCKET" \
    || { echo "test.sh: cannot create bucket on $STOREFS_TEST_S3_ENDPOINT; moto log: $MOTO_LOG" >&2; exit 1; }
source scripts/azurite.sh # azurite for the az:// remote tests: installed if missing, stopped on exit

cargo test --locked --all-targets -- --test-threads=2
