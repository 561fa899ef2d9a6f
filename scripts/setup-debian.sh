#!/usr/bin/env bash
# Install what storefs needs on Debian 12, as root. Idempotent.
# The Rust toolchain (cargo >= 1.88) must already be installed (rustup);
# Debian 12's own cargo is too old for this crate.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "setup-debian.sh: run as root (it uses apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# fuse3: fusermount3 and /etc/fuse.conf; attr: getfattr/setfattr for the demo;
# python3: the demo's "native tool"; psmisc: fuser(1) for busy mountpoints;
# zstd: the archive tests build split .tar.zst archives with tar | zstd | split.
apt-get install -y -qq fuse3 attr python3 psmisc zstd tar gzip coreutils >/dev/null

if ! command -v cargo >/dev/null; then
    echo "setup-debian.sh: cargo not found; install Rust >= 1.88 with rustup first" >&2
    exit 1
fi
if [ ! -e /dev/fuse ]; then
    modprobe fuse 2>/dev/null || true
fi
if [ ! -e /dev/fuse ]; then
    echo "setup-debian.sh: /dev/fuse is missing; load the fuse module or pass --device /dev/fuse to the container" >&2
    exit 1
fi
