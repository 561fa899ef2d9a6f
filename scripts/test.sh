#!/usr/bin/env bash
# The whole test suite: set up a fresh Debian 12 machine (as root), then run every
# test, including the ones that mount for real. CI runs exactly this.
# Order: the conformance suite (pjdfstest, fsx, EROFS checks; it prints its own
# `N passed, N failed, N skipped` line), then cargo test, whose summary prints last.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-debian.sh
cargo build --locked --all-targets
bash tests/conformance/run.sh
cargo test --locked --all-targets -- --test-threads=2
