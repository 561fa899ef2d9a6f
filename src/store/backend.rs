//! Where compressed objects live. `LocalBackend` is a directory; a remote backend
//! (object storage) can implement the same trait without touching the layers above.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use parking_lot::Mutex;

use super::atomic::{fsync_dir, temp_name};
use super::id::ObjectId;

/// Storage of compressed object bytes by id. Implementations must be safe to call
/// from many threads, and `write` must never leave a partial object under `id`.
pub trait ObjectBackend: Send + Sync {
    /// The stored (compressed) bytes of `id`, or `None` when the backend lacks it.
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>>;
    /// Store `bytes` under `id`, atomically. Storing an id that exists is a no-op.
    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()>;
    /// Whether `id` is stored.
    fn contains(&self, id: &ObjectId) -> io::Result<bool>;
    /// Make every completed `write` durable (names included).
    fn sync(&self) -> io::Result<()>;
    /// Every stored id (for verify and gc).
    fn list(&self) -> io::Result<Vec<ObjectId>>;
    /// Move a bad object aside so it is no longer served; returns where it went.
    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>>;
    /// Stored size and modification time of `id` (for gc), or `None` when absent.
    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>>;
    /// Delete `id` (gc only); returns whether it was there.
    fn remove(&self, id: &ObjectId) -> io::Result<bool>;
    /// Temp files of writes that never finished (a crash), last modified before
    /// `cutoff`: their paths and sizes. Removed unless `dry_run`.
    fn remove_stale_temps(
        &self,
        _cutoff: SystemTime,
        _dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        Ok(Vec::new())
    }
}

/// Objects as files `objects/ab/cdef…` (first two hex digits fan out).
///
/// A write goes to a temp file in the object's fan-out directory and is held
/// there, pending, until `sync`, which callers run before publishing a checkpoint
/// or ref that names the new objects. `sync` makes all pending data durable with
/// one `syncfs`, only then renames each temp file to its object name, and fsyncs
/// the fan-out directories. So a crash never leaves a partial object under a valid
/// name (the name appears only after its data is on disk), while a snapshot of
/// thousands of small files costs one filesystem sync instead of one fsync per
/// file. Until `sync`, this process reads pending objects from their temp files.
/// Temp files of a process that died before `sync` are orphans (`.obj.*.tmp`),
/// never served.
pub struct LocalBackend {
    dir: PathBuf,
    dirty_dirs: Mutex<BTreeSet<u8>>,
    pending: Mutex<HashMap<ObjectId, PathBuf>>,
}

impl LocalBackend {
    pub fn new(dir: PathBuf) -> LocalBackend {
        LocalBackend {
            dir,
            dirty_dirs: Mutex::new(BTreeSet::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The file that holds `id`.
    pub fn path_of(&self, id: &ObjectId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Where `id` can be read now: its temp file while pending, else its name.
    fn readable_path(&self, id: &ObjectId) -> PathBuf {
        match self.pending.lock().get(id) {
            Some(tmp) => tmp.clone(),
            None => self.path_of(id),
        }
    }

    /// A new temp file in `fan`, creating the fan-out directory if needed.
    fn create_temp(&self, fan: &Path) -> io::Result<(PathBuf, File)> {
        let tmp = fan.join(temp_name("obj"));
        let open = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444)
                .open(&tmp)
        };
        let f = match open() {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                fs::create_dir_all(fan)?;
                fsync_dir(&self.dir)?;
                open()?
            }
            Err(e) => return Err(e),
        };
        Ok((tmp, f))
    }
}

impl Drop for LocalBackend {
    /// Objects written but never synced belong to nothing published: remove them.
    fn drop(&mut self) {
        for (_, tmp) in self.pending.get_mut().drain() {
            let _ = fs::remove_file(tmp);
        }
    }
}

impl ObjectBackend for LocalBackend {
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        match File::open(self.readable_path(id)) {
            Ok(mut f) => {
                let mut buf = Vec::new();
                f.read_to_end(&mut buf)?;
                Ok(Some(buf))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        if self.contains(id)? {
            return Ok(());
        }
        let path = self.path_of(id);
        let fan = path.parent().expect("object path has a parent");
        let (tmp, mut f) = self.create_temp(fan)?;
        if let Err(e) = f.write_all(bytes) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // Another thread may have written the same object meanwhile: keep one.
        let mut pending = self.pending.lock();
        if pending.contains_key(id) {
            drop(pending);
            let _ = fs::remove_file(&tmp);
        } else {
            pending.insert(*id, tmp);
        }
        Ok(())
    }

    fn contains(&self, id: &ObjectId) -> io::Result<bool> {
        if self.pending.lock().contains_key(id) {
            return Ok(true);
        }
        match fs::symlink_metadata(self.path_of(id)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn sync(&self) -> io::Result<()> {
        let pending: Vec<(ObjectId, PathBuf)> = self.pending.lock().drain().collect();
        if !pending.is_empty() {
            // One syncfs makes every pending temp file's data durable. A failure
            // is reported, not retried, and the objects stay pending.
            let dir = File::open(&self.dir)?;
            // SAFETY: syncfs on a valid open descriptor.
            if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
                let e = io::Error::last_os_error();
                self.pending.lock().extend(pending);
                return Err(e);
            }
            for (i, (id, tmp)) in pending.iter().enumerate() {
                if let Err(e) = fs::rename(tmp, self.path_of(id)) {
                    self.pending.lock().extend(pending[i..].iter().cloned());
                    return Err(e);
                }
                self.dirty_dirs.lock().insert(id.0[0]);
            }
        }
        let dirty: Vec<u8> = std::mem::take(&mut *self.dirty_dirs.lock())
            .into_iter()
            .collect();
        for (i, b) in dirty.iter().enumerate() {
            if let Err(e) = fsync_dir(&self.dir.join(format!("{b:02x}"))) {
                // Keep what is not yet known durable for the next sync.
                self.dirty_dirs.lock().extend(&dirty[i..]);
                return Err(e);
            }
        }
        Ok(())
    }

    fn list(&self) -> io::Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        for fan in read_dir_if_exists(&self.dir)? {
            let fan = fan?;
            let fan_name = fan.file_name();
            let Some(prefix) = fan_name.to_str().filter(|s| s.len() == 2) else {
                continue;
            };
            for obj in fs::read_dir(fan.path())? {
                let obj = obj?;
                if let Some(rest) = obj.file_name().to_str()
                    && let Some(id) = ObjectId::from_hex(&format!("{prefix}{rest}"))
                {
                    out.push(id);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>> {
        let qdir = self.dir.with_file_name("quarantine");
        fs::create_dir_all(&qdir)?;
        let dest = qdir.join(id.to_hex());
        match fs::rename(self.path_of(id), &dest) {
            Ok(()) => {
                fsync_dir(&qdir)?;
                Ok(Some(dest))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>> {
        match fs::symlink_metadata(self.path_of(id)) {
            Ok(m) => Ok(Some((m.len(), m.modified()?))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn remove(&self, id: &ObjectId) -> io::Result<bool> {
        match fs::remove_file(self.path_of(id)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut out = Vec::new();
        for fan in read_dir_if_exists(&self.dir)? {
            let fan = fan?;
            if !fan.file_type()?.is_dir() {
                continue;
            }
            for ent in fs::read_dir(fan.path())? {
                let ent = ent?;
                let name = ent.file_name();
                let Some(name) = name.to_str() else { continue };
                if !(name.starts_with(".obj.") && name.ends_with(".tmp")) {
                    continue;
                }
                let m = match ent.metadata() {
                    Ok(m) => m,
                    Err(e) if e.kind() == ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                };
                if m.modified()? >= cutoff {
                    continue;
                }
                if !dry_run {
                    match fs::remove_file(ent.path()) {
                        Ok(()) => {}
                        Err(e) if e.kind() == ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    }
                }
                out.push((ent.path(), m.len()));
            }
        }
        Ok(out)
    }
}

fn read_dir_if_exists(
    dir: &Path,
) -> io::Result<Box<dyn Iterator<Item = io::Result<fs::DirEntry>>>> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Box::new(rd)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Box::new(std::iter::empty())),
        Err(e) => Err(e),
    }
}
