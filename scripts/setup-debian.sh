#!/usr/bin/env bash
# Install what storefs needs on Debian 12, as root. Idempotent.
#   bash scripts/setup-debian.sh --demo   what the demo needs: fuse3 (fusermount3,
#                                         /etc/fuse.conf), attr, python3, psmisc
#   bash scripts/setup-debian.sh          that plus every test tool: zstd, bsdtar,
#                                         rsync, xz/bzip2/lzip, acl and libacl1-dev,
#                                         curl, git, moto (pip), pjdfstest and fsx
#                                         (cargo install, compiled: a few minutes), the
#                                         pjdfstest user `tests`, man-db, dpkg-dev,
#                                         systemd and systemd-nspawn (package test)
#   bash scripts/setup-debian.sh --bench  that plus what only the benches use: s3s-fs
#                                         (cargo install, about 2 minutes), iproute2
#                                         and restic (bench/remote_link.py)
# The Rust toolchain (cargo >= 1.88) must already be installed (rustup);
# Debian 12's own cargo is too old for this crate.
set -euo pipefail

mode=all
case "${1:-}" in
    "") ;;
    --demo) mode=demo ;;
    --bench) mode=bench ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup-debian.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
    echo "setup-debian.sh: run as root (it uses apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# fuse3: fusermount3 and /etc/fuse.conf; attr: getfattr/setfattr;
# python3: the demo's "native tool"; psmisc: fuser(1) for busy mountpoints.
apt-get install -y -qq fuse3 attr python3 psmisc tar coreutils >/dev/null

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
[ "$mode" = demo ] && exit 0

# The tests from here on.
# zstd: the archive tests build split .tar.zst archives with tar | zstd | split.
apt-get install -y -qq zstd gzip >/dev/null
# The archive corpus and lossless-tree tests (tests/archive_corpus.rs, tests/lossless_tree.rs):
# bsdtar (libarchive-tools) writes archives to compare with GNU tar; rsync -aHAXS compares trees;
# xz-utils, bzip2 and lzip let GNU tar extract the corpus archives in those compressions.
apt-get install -y -qq libarchive-tools rsync xz-utils bzip2 lzip >/dev/null
# tests/import_git.rs builds its repositories with the git CLI and compares with `git archive`.
apt-get install -y -qq git >/dev/null
# The conformance suite (tests/conformance/run.sh): pjdfstest links libacl;
# util-linux gives mount(8) for its EROFS cases (remount ro and back).
apt-get install -y -qq libacl1-dev acl util-linux >/dev/null
# The package test (tests/package.sh): man-db reads the installed pages; dpkg-deb builds it;
# systemd-container's systemd-nspawn boots a systemd to run the unit under.
apt-get install -y -qq man-db dpkg-dev systemd systemd-container >/dev/null
# pjdfstest switches to two dummy users: nobody (in nogroup on Debian) and tests.
if ! id tests >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir / \
        --shell /usr/sbin/nologin --comment "Dummy user for pjdfstest" tests
fi

# The remote tests (tests/remote*.rs) run against an S3-compatible server on
# loopback that scripts/test.sh starts: moto; curl creates its bucket.
apt-get install -y -qq curl >/dev/null
if ! command -v moto_server >/dev/null; then
    if ! command -v pip3 >/dev/null && ! command -v pip >/dev/null; then
        apt-get install -y -qq python3-pip >/dev/null
    fi
    PIP=$(command -v pip3 || command -v pip)
    # Debian's system Python refuses global pip installs (PEP 668) without this flag.
    "$PIP" install --quiet 'moto[server]==5.2.1' 2>/dev/null \
        || "$PIP" install --quiet --break-system-packages 'moto[server]==5.2.1'
fi

# pjdfstest and fsx (the Rust rewrites), compiled once; skipped when installed.
export PATH="$HOME/.cargo/bin:$PATH"
version_of() { case "$1" in pjdfstest) echo 0.2.2 ;; fsx) echo 0.3.2 ;; esac; }
# At opt-level 1 without debug info, as s3s-fs below: they wait on the file
# system under test, and compiling them is CI time (about half of it at
# opt-level 3).
for tool in pjdfstest fsx; do
    if ! command -v "$tool" >/dev/null; then
        echo "setup-debian.sh: cargo install $tool (compiles it; a minute or two)" >&2
        CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 \
            cargo install --locked --quiet "$tool@$(version_of "$tool")"
    fi
done
# The benches only, from here on (--bench).
[ "$mode" = bench ] || exit 0
# s3s-fs: the fast S3 server (Rust; files in a directory) of bench/remote_link.py
# (until 2026-12-07 also of the tests: its compile was 2 to 4 of CI's 20
# minutes). 0.14.1 is the newest release that builds with rustc < 1.96 and has
# conditional PUT (If-None-Match: *, If-Match: ETAG). Compiled once, skipped when
# this version is installed; at opt-level 1 without debug info: 2 minutes on 2
# CPUs instead of 4.
S3S_FS_VERSION=0.14.1
if [ "$(s3s-fs --version 2>/dev/null)" != "s3s-fs $S3S_FS_VERSION" ]; then
    echo "setup-debian.sh: cargo install s3s-fs $S3S_FS_VERSION (compiles it; about 2 minutes)" >&2
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 \
        cargo install --locked --quiet --features binary "s3s-fs@$S3S_FS_VERSION"
fi
# bench/remote_link.py (a bench, not a test): iproute2 (ip netns, tc) for its link,
# restic as the peer it is compared with.
apt-get install -y -qq iproute2 restic >/dev/null
