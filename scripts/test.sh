#!/usr/bin/env bash
# The whole test suite: set up a fresh Debian 12 machine (as root), then run every
# test, including the ones that mount for real. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-debian.sh
cargo build --locked --all-targets
cargo test --locked --all-targets -- --test-threads=2
