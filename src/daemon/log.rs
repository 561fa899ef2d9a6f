//! The daemon's log file: `logs/mount-<key>.log` in the store, one per
//! mountpoint, appended to by every daemon that mounts there (a run's
//! daemons log beside its sockets, `runs/<pid>-<n>.log`).
//!
//! Bounded: once a log would pass [`max_log_bytes`] (8 MiB, or
//! `STOREFS_LOG_MAX_BYTES`) it is moved to `NAME.1`, replacing the one
//! before, and started again, so one log name never holds more than about
//! twice the cap, however long the daemons run or however often they start.

use std::io::Write;
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

/// Send the daemon's tracing to `path` (level `info`, or `STOREFS_LOG`),
/// bounded ([`BoundedLog`]).
pub(super) fn init_file_logging(path: &Path) -> Result<()> {
    let log = BoundedLog::open(path, max_log_bytes())?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOREFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::sync::Mutex::new(log))
        .with_ansi(false)
        .try_init();
    Ok(())
}

/// Open `path` for appending as a new daemon's stderr, moved aside first
/// when already over the cap (stderr itself is not bounded, but only a
/// panic or an early failure writes there).
pub(super) fn open_log_for_stderr(path: &Path) -> Result<std::fs::File> {
    rotate_if_over(path, max_log_bytes())?;
    open_log(path)
}

/// The cap on one log file: `STOREFS_LOG_MAX_BYTES`, else 8 MiB (at least
/// 4 KiB).
pub(super) fn max_log_bytes() -> u64 {
    std::env::var("STOREFS_LOG_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8 << 20)
        .max(4096)
}

/// `path` with `.1` added: where a full log goes.
fn previous(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".1");
    PathBuf::from(p)
}

/// Move the log `path` to `path.1`, replacing it.
fn move_aside(path: &Path) -> std::io::Result<()> {
    crate::sys::rename_nofollow(path, &previous(path))
}

/// Move `path` to `path.1` when it holds `cap` bytes or more.
fn rotate_if_over(path: &Path, cap: u64) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() && m.len() >= cap => move_aside(path).map_err(|source| Error::Log {
            path: path.to_path_buf(),
            source,
        }),
        _ => Ok(()),
    }
}

/// An append-only log file that is moved to `NAME.1` and started again
/// before a write would take it past `cap` bytes.
pub(super) struct BoundedLog {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
    cap: u64,
}

impl BoundedLog {
    pub(super) fn open(path: &Path, cap: u64) -> Result<BoundedLog> {
        rotate_if_over(path, cap)?;
        let file = open_log(path)?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(BoundedLog {
            path: path.to_path_buf(),
            file,
            len,
            cap,
        })
    }

    fn start_again(&mut self) -> std::io::Result<()> {
        move_aside(&self.path)?;
        self.file = open_log(&self.path).map_err(std::io::Error::other)?;
        self.len = 0;
        Ok(())
    }
}

impl Write for BoundedLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.len > 0 && self.len + buf.len() as u64 > self.cap {
            // A log that cannot be moved aside (the store gone read-only)
            // keeps growing rather than losing the line.
            let _ = self.start_again();
        }
        let n = self.file.write(buf)?;
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_moved_aside_before_it_passes_its_cap() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("mount-x.log");
        let mut log = BoundedLog::open(&path, 4096).unwrap();
        let line = [b'a'; 100];
        for _ in 0..1000 {
            log.write_all(&line).unwrap();
            log.write_all(b"\n").unwrap();
        }
        let len = |p: &Path| std::fs::metadata(p).unwrap().len();
        assert!(len(&path) <= 4096, "{}", len(&path));
        assert!(len(&previous(&path)) <= 4096);
        assert!(len(&previous(&path)) > 4000, "the one before is kept whole");
        assert!(!t.path().join("mount-x.log.1.1").exists());
        // Reopened over its cap (a daemon started on a full log): moved first.
        std::fs::write(&path, vec![b'b'; 5000]).unwrap();
        drop(BoundedLog::open(&path, 4096).unwrap());
        assert_eq!(len(&path), 0);
        assert_eq!(len(&previous(&path)), 5000);
    }
}
