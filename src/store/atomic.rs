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

use crate::sys;

/// A temp-file name nobody can guess: `.PREFIX.RANDOM.tmp`.
pub fn temp_name(prefix: &str) -> String {
    let mut r = [0u8; 8];
    // getrandom does not fail for 8 bytes on Linux >= 3.17; a failure would
    // still leave the name unique within this process with O_EXCL.
    let _ = sys::random_bytes(&mut r);
    format!(".{prefix}.{:016x}.tmp", u64::from_le_bytes(r))
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
    let (mut f, tmp) = sys::create_temp_in(&dir, prefix, mode)?;
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
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Read a whole file inside a store, not following a symlink anywhere on its path.
pub fn read_store_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = sys::open_nofollow(path, rustix::fs::OFlags::RDONLY, 0)?;
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}
