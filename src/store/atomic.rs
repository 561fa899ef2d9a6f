//! Crash-safe file publication: temp file + fsync + rename + fsync of the parent.
//!
//! A failed fsync is reported, never retried: after a failed fsync the kernel may
//! have dropped the dirty pages, and a retry that "succeeds" would lie.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temp-file name unique within this process and across processes.
pub fn temp_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".{prefix}.{}.{}.tmp", std::process::id(), n)
}

/// Write `data` to `path` atomically: readers see the old file or the whole new one.
/// With `durable`, the parent directory is fsynced too, so the rename survives a crash.
pub fn write_file(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(temp_name(name));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        if durable {
            fsync_dir(dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// fsync a directory, making the names created or renamed in it durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
