//! Crash-safe file publication: temp file + fsync + rename + fsync of the parent.
//!
//! A failed fsync is reported, never retried: after a failed fsync the kernel may
//! have dropped the dirty pages, and a retry that "succeeds" would lie.
//!
//! Temp files have random names and are created `O_EXCL|O_NOFOLLOW`: nobody can
//! plant a file or symlink where one will be written. [`write_store_file`], for
//! paths inside a store, also reaches the directory without following a symlink
//! anywhere on the path (docs/security.md, "Files inside a store").

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::RwLock;

use crate::sys;

/// A temp-file name nobody can guess, that names its writer:
/// `.PREFIX.PID.RANDOM.tmp` (RANDOM: 64 random bits in decimal). gc and
/// verify read the pid back ([`temp_owner`]) to tell a dead writer's file.
pub fn temp_name(prefix: &str) -> String {
    sys::temp_file_name(prefix)
}

/// Held (shared) while a temp file is created; taken for good by
/// [`stop_creating_temps`].
static CREATING: RwLock<()> = RwLock::new(());

/// Create the temp file `tmp` (readable and writable, `mode`; it must not
/// exist). Waits forever once [`stop_creating_temps`] was called.
pub fn create_temp(tmp: &Path, mode: u32) -> io::Result<File> {
    let _creating = CREATING.read().unwrap_or_else(|p| p.into_inner());
    let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL;
    sys::open_nofollow(tmp, flags, mode)
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
/// For a path the user named (it may lead through symlinks); inside a store,
/// [`write_store_file`].
pub fn write_file(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    write_in(File::open(dir)?, path, data, mode, durable)
}

/// [`write_file`] for a path inside a store: no symlink anywhere on `path` is
/// followed (`ELOOP` instead).
pub fn write_store_file(path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a file needs a directory"))?;
    write_in(sys::open_dir_nofollow(dir)?, path, data, mode, durable)
}

fn write_in(dir: File, path: &Path, data: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a file needs a name"))?;
    let prefix = name.to_str().unwrap_or("file");
    let creating = CREATING.read().unwrap_or_else(|p| p.into_inner());
    let (mut f, tmp) = sys::create_temp_in(&dir, prefix, mode)?;
    drop(creating);
    let result = (|| {
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, name)?;
        if durable {
            dir.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    }
    result
}

/// fsync a directory, making the names created or renamed in it durable.
/// Opened `O_DIRECTORY`: anything else there (a FIFO) fails at once.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)?
        .sync_all()
}

/// The most bytes a small record inside a store may hold, read whole: a
/// fork's `HEAD` and `fork.json`, a mount record, a remote's config, a
/// partial mark (storefs writes them far smaller). Past it, the read is
/// refused (docs/security.md, "Files inside a store").
pub const MAX_SMALL_RECORD: u64 = 1 << 20;

/// The most bytes a ref file may hold (storefs writes 65: an id and a newline).
pub const MAX_REF_FILE: u64 = 4 << 10;

/// Read a whole small record inside a store ([`MAX_SMALL_RECORD`] at most),
/// as [`read_store_file_capped`] does.
pub fn read_store_file(path: &Path) -> io::Result<Vec<u8>> {
    read_store_file_capped(path, MAX_SMALL_RECORD, "a store record")
}

/// Read a whole file inside a store: not following a symlink anywhere on its
/// path, refused unless a regular file (a FIFO is neither waited on nor
/// read), and refused when it holds more than `cap` bytes (`kind` names
/// what it is in that error: "a ref"). See [`sys::read_regular_nofollow`].
pub fn read_store_file_capped(path: &Path, cap: u64, kind: &str) -> io::Result<Vec<u8>> {
    sys::read_regular_nofollow(path, cap, kind)
}

/// Open a file inside a store for reading, as [`read_store_file`] does
/// (no symlink, a regular file), without reading it; with its size.
pub fn open_store_file(path: &Path) -> io::Result<(File, u64)> {
    sys::open_regular_nofollow(path)
}

/// The names in a directory inside a store, listed through a descriptor
/// reached without following a symlink; with whether each is a directory.
pub fn list_store_dir(dir: &Path) -> io::Result<Vec<(std::ffi::OsString, bool)>> {
    sys::list_dir_nofollow(dir)
}

/// [`list_store_dir`], with nothing listed when `dir` does not exist.
pub fn list_store_dir_if_exists(dir: &Path) -> io::Result<Vec<(std::ffi::OsString, bool)>> {
    match sys::list_dir_nofollow(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        r => r,
    }
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
