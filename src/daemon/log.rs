//! The daemon's log file: `logs/mount-<key>.log` in the store, one per
//! mountpoint, appended to by every daemon that mounts there.

use std::path::{Path, PathBuf};

use super::{Error, Result};
use crate::store::{ObjectId, Store};

/// `logs/mount-<key>.log` in the store, one file per mountpoint.
pub(super) fn log_path(store: &Store, mp: &Path) -> PathBuf {
    store.logs_dir().join(log_name(mp))
}

/// `mount-<key>.log`: the name of the log of a daemon serving at `mp`.
pub(super) fn log_name(mp: &Path) -> String {
    let key = ObjectId::of(mp.as_os_str().as_encoded_bytes()).to_hex();
    format!("mount-{}.log", &key[..16])
}

/// Open `path` (inside the store) for appending, as the daemon's stderr or
/// its log, never through a symlink (one planted there fails with `ELOOP`).
pub(super) fn open_log(path: &Path) -> Result<std::fs::File> {
    use rustix::fs::OFlags;
    let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE;
    crate::sys::open_nofollow(path, flags, 0o644).map_err(|source| Error::Log {
        path: path.to_path_buf(),
        source,
    })
}

/// Send the daemon's tracing to `path` (level `info`, or `STOREFS_LOG`).
pub(super) fn init_file_logging(path: &Path) -> Result<()> {
    let file = open_log(path)?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOREFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .try_init();
    Ok(())
}
