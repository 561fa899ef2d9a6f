//! Crash-safe file publication: temp file + fsync + rename + fsync of the parent.
//!
//! A failed fsync is reported, never retried: after a failed fsync the kernel may
//! have dropped the dirty pages, and a retry that "succeeds" would lie.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temp-file name unique within this process and across processes.
pub fn temp_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".{prefix}.{}.{}.tmp", std::process::id(), n)
}

/// Held (shared) while a temp file is created; taken for good by
/// [`stop_creating_temps`].
static CREATING: RwLock<()> = RwLock::new(());

/// Create the temp file `tmp` (readable and writable, `mode`; it must not
/// exist). Waits forever once [`stop_creating_temps`] was called.
pub fn create_temp(tmp: &Path, mode: u32) -> io::Result<File> {
    let _creating = CREATING.read().unwrap_or_else(|p| p.into_inner());
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(tmp)
}

/// From now on, no thread of this process creates a temp file (those that
/// try wait until the process exits): for a process about to exit that
/// removes its temp files first.
pub fn stop_creating_temps() {
    std::mem::forget(CREATING.write().unwrap_or_else(|p| p.into_inner()));
}

/// The pid in a [`temp_name`] (`.PREFIX.PID.N.tmp`), if `name` is one.
pub fn temp_owner(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut fields = inner.rsplitn(3, '.');
    let n = fields.next()?;
    let pid = fields.next()?;
    fields.next()?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether the process that wrote the temp file `name` is gone: its pid no
/// longer runs, or runs a program that is not storefs (the pid was reused).
/// A temp file of such a writer is garbage at once. False when `name` is not
/// a temp name, and when unsure (another user's process we may not inspect).
pub fn temp_writer_gone(name: &str) -> bool {
    let Some(pid) = temp_owner(name) else {
        return false;
    };
    if pid == std::process::id() {
        return false;
    }
    if !crate::sys::pid_alive(pid) {
        return true;
    }
    match crate::sys::process_exe(pid) {
        Ok(exe) => !is_storefs_exe(&exe),
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// A storefs binary (whatever its directory, also after it was replaced on
/// disk), or the program we run (the test binaries of this crate).
fn is_storefs_exe(exe: &Path) -> bool {
    let named = exe
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("storefs"));
    named || std::env::current_exe().is_ok_and(|me| me == exe)
}

/// Write `data` to `path` atomically: readers see the old file or the whole new one.
/// With `durable`, the parent directory is fsynced too, so the rename survives a crash.
pub fn write_file(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(temp_name(name));
    let result = (|| {
        let mut f = create_temp(&tmp, mode)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_name_their_writer() {
        let name = temp_name("pack");
        assert_eq!(temp_owner(&name), Some(std::process::id()));
        assert!(!temp_writer_gone(&name), "ours");
        assert_eq!(temp_owner(".index.midx.999.0.tmp"), Some(999));
        assert_eq!(temp_owner(".1f.json.42.7.tmp"), Some(42));
        assert_eq!(temp_owner(".pack.x.0.tmp"), None);
        assert_eq!(temp_owner("pack.1.0.tmp"), None);
        assert_eq!(temp_owner(".pack.1.0"), None);
        assert!(!temp_writer_gone("pack.1.0"));
        // A pid that runs something other than storefs, and one that is gone.
        let mut other = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let reused = format!(".pack.{}.0.tmp", other.id());
        let gone = temp_writer_gone(&reused);
        other.kill().unwrap();
        other.wait().unwrap();
        assert!(gone, "a pid running sleep");
        assert!(temp_writer_gone(&reused), "a pid that is gone");
    }
}
