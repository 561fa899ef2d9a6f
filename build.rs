//! Which tests `cargo test` runs, decided once per build (nothing here
//! touches the storefs binary or library).
//!
//! - `storefs_root_tests`: the tests that need root (they mount with FUSE,
//!   make users, chown) run. Set when this build runs as root and
//!   `/dev/fuse` exists; `STOREFS_ROOT_TESTS=1` or `=0` decides instead.
//!   Without it those tests are compiled as ignored, each with the reason,
//!   so an ordinary user's `cargo test` passes and its summary counts them
//!   as ignored, never as passed.
//! - `storefs_test_s3`, `storefs_test_azure`, `storefs_test_gcs`: the remote
//!   tests' variants against those servers run. Set by naming them in
//!   `STOREFS_TEST_REMOTES` (comma-separated; scripts/test.sh builds with
//!   `s3,azure` and starts both servers). A variant built to run whose
//!   server is not given fails; one not built to run is ignored.
//! - `storefs_have_bsdtar`: `bsdtar` (Debian's libarchive-tools, which
//!   scripts/setup-debian.sh installs) is on `PATH` when this script runs, so
//!   the tests that check archives with it run; without it they are ignored,
//!   with the reason (after installing it, `touch build.rs`).
//! - `storefs_have_chattr`: `chattr`, `lsattr` (e2fsprogs) and `setpriv`
//!   (util-linux) are on `PATH`, so the mount test of `chattr` runs; the
//!   same otherwise.

use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=STOREFS_ROOT_TESTS");
    println!("cargo::rerun-if-env-changed=STOREFS_TEST_REMOTES");
    println!("cargo::rustc-check-cfg=cfg(storefs_root_tests)");
    let root = match std::env::var("STOREFS_ROOT_TESTS").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => effective_uid() == Some(0) && Path::new("/dev/fuse").exists(),
    };
    if root {
        println!("cargo::rustc-cfg=storefs_root_tests");
    }
    // Not `rerun-if-env-changed=PATH`: every script that put ~/.cargo/bin in
    // front of PATH made cargo build the storefs crate and relink every test
    // binary again (CI rebuilt it four times, about 2.5 of its 20 minutes).
    // bsdtar installed after the first build is seen after `touch build.rs`.
    println!("cargo::rustc-check-cfg=cfg(storefs_have_bsdtar)");
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| d.join("bsdtar").is_file()) {
        println!("cargo::rustc-cfg=storefs_have_bsdtar");
    }
    // chattr, lsattr (e2fsprogs) and setpriv (util-linux), likewise.
    println!("cargo::rustc-check-cfg=cfg(storefs_have_chattr)");
    let on_path = |tool: &str| std::env::split_paths(&path).any(|d| d.join(tool).is_file());
    if ["chattr", "lsattr", "setpriv"].into_iter().all(on_path) {
        println!("cargo::rustc-cfg=storefs_have_chattr");
    }
    let remotes = std::env::var("STOREFS_TEST_REMOTES").unwrap_or_default();
    for kind in ["s3", "azure", "gcs"] {
        println!("cargo::rustc-check-cfg=cfg(storefs_test_{kind})");
        if remotes.split(',').any(|k| k.trim() == kind) {
            println!("cargo::rustc-cfg=storefs_test_{kind}");
        }
    }
}

/// The effective uid of this build, from `/proc/self/status`.
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let ids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    ids.split_whitespace().nth(1)?.parse().ok()
}
