//! The I/O the fork directory goes through: a small trait with the real
//! implementation ([`RealIo`]) and a fault-injecting one for power-loss tests
//! ([`FaultyIo`]).
//!
//! Everything in `STORE/forks/<name>/` (fork.json, HEAD, the journal segments
//! and the lock) goes through [`JournalIo`]; objects and checkpoints go through
//! the store, which makes them durable before a fork's HEAD names them.

use std::any::Any;
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{self, ErrorKind, IoSlice};
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rustix::fs::Advice;
use rustix::io::Errno;

use crate::sys::{self, SyncRange};

/// One open journal file. Offsets are explicit (pread/pwrite); the file
/// position is never used, so one handle can be shared by threads.
pub trait JournalFile: Send + Sync {
    /// Write all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Write `bufs` back to back at `offset`, as one write: a fault-injecting
    /// implementation counts (and tears) it as one `write_at` of their
    /// concatenation, which is what the default does.
    fn write_parts_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.write_at(&bufs.concat(), offset)
    }
    /// Fill `buf` from `offset`; reading past the end is an `UnexpectedEof` error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn size(&self) -> io::Result<u64>;
    /// fdatasync: every write completed before the call is durable when it returns.
    fn sync_data(&self) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Give the file `len` bytes of zeros from `offset`, growing its size to
    /// cover them, so that a later write there, then `sync_data`, changes no
    /// size and allocates nothing. `how` says whether the blocks are only
    /// reserved or written (see [`Prealloc`]). A hint: the caller goes on
    /// without it when it fails, and the file may then have grown by part of
    /// `len`.
    fn allocate(&self, _offset: u64, _len: u64, _how: Prealloc) -> io::Result<()> {
        Ok(())
    }
    /// Start writing `len` bytes from `offset` back to disk without waiting
    /// (a hint: durability still needs [`JournalFile::sync_data`]).
    fn start_writeback(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Wait for the writeback of `len` bytes from `offset` (started earlier by
    /// [`JournalFile::start_writeback`]) and drop those now clean pages from
    /// the page cache (a hint: dirty pages are never dropped).
    fn drop_behind(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// How far from `from` (up to `to`) the file's bytes are on disk
    /// without a sync of this log: written back by the kernel (its own
    /// writeback, or a `sync` of the file system), so a power cut now
    /// would keep them. `from` when that is not known (the default).
    fn written_back(&self, from: u64, _to: u64) -> u64 {
        from
    }
}

/// How [`JournalFile::allocate`] gives a file its zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prealloc {
    /// `fallocate` mode 0: blocks reserved, marked unwritten, nothing written.
    /// Costs almost nothing, but ext4 converts an unwritten extent to written
    /// when data lands in it, so every fdatasync after a write there still
    /// commits ext4's journal.
    Reserve,
    /// Zeros written through the page cache. Costs a write of `len` bytes (and
    /// their writeback, by the next fdatasync); a later write there is an
    /// overwrite, whose fdatasync flushes data and commits no metadata at all
    /// (measured here: 90-120 us against 140-180 us for a small write).
    Zeros,
}

/// The file-system operations a fork directory needs.
pub trait JournalIo: Send + Sync {
    /// Create one directory; `AlreadyExists` if it is there.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Create a directory and its missing parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Open a file for reading and writing, creating it (empty) when `create`.
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn JournalFile>>;
    /// The names in a directory.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// fsync a directory: names created or removed in it become durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Replace `path` with `data` atomically and durably (temp, fsync, rename, fsync dir).
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// A whole small file, or `None` when it does not exist.
    fn read_file(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Take an exclusive lock on `path` (created if missing) without waiting;
    /// `None` when someone else holds it. The lock lasts as long as the guard.
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn Any + Send + Sync>>>;
}

// ------------------------------------------------------------------ real

/// The real file system (std, and rustix for what std lacks).
#[derive(Clone, Copy, Debug, Default)]
pub struct RealIo;

/// A journal file, and a second descriptor of it for the write-behind
/// helper: waiting for writeback through a descriptor consumes a writeback
/// error for that descriptor only (errseq), so the helper's waits can never
/// hide an error from the fdatasync of the first.
struct RealFile(File, File);

impl JournalFile for RealFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    /// pwritev, so a record's data goes from the caller's buffer to the page
    /// cache without being copied behind its header first.
    fn write_parts_at(&self, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
        let mut parts: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
        let mut first = 0;
        while first < parts.len() {
            if i64::try_from(offset).is_err() {
                return Err(io::Error::from_raw_os_error(libc::EFBIG));
            }
            // rustix passes at most IOV_MAX of them; the loop writes the rest.
            let iov: Vec<IoSlice<'_>> = parts[first..].iter().map(|b| IoSlice::new(b)).collect();
            let mut n = match rustix::io::pwritev(&self.0, &iov, offset) {
                Ok(0) => return Err(io::Error::from(ErrorKind::WriteZero)),
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            offset += n as u64;
            while n > 0 {
                let len = parts[first].len();
                if n >= len {
                    n -= len;
                    first += 1;
                } else {
                    parts[first] = &parts[first][n..];
                    n = 0;
                }
            }
        }
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn allocate(&self, offset: u64, len: u64, how: Prealloc) -> io::Result<()> {
        if !fits_off_t(offset, len) {
            return Ok(());
        }
        match how {
            Prealloc::Reserve => Ok(rustix::fs::fallocate(
                &self.0,
                rustix::fs::FallocateFlags::empty(),
                offset,
                len,
            )?),
            Prealloc::Zeros => {
                static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
                let mut parts = Vec::new();
                let mut left = len;
                while left > 0 {
                    let n = left.min(ZEROS.len() as u64);
                    parts.push(&ZEROS[..n as usize]);
                    left -= n;
                }
                self.write_parts_at(&parts, offset)
            }
        }
    }
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        if !fits_off_t(offset, len) {
            return Ok(());
        }
        sys::sync_file_range(&self.0, offset, len, SyncRange::Start)
    }
    fn drop_behind(&self, offset: u64, len: u64) -> io::Result<()> {
        if !fits_off_t(offset, len) {
            return Ok(());
        }
        sys::sync_file_range(&self.1, offset, len, SyncRange::Wait)?;
        let len = NonZeroU64::new(len);
        Ok(rustix::fs::fadvise(&self.1, offset, len, Advice::DontNeed)?)
    }
    /// No page dirty or under writeback (`cachestat(2)`).
    fn written_back(&self, from: u64, to: u64) -> u64 {
        sys::written_back_to(&self.0, from, to)
    }
}

/// Whether `len` bytes from `offset` are a range the kernel takes (fit an
/// `off_t`); the write-behind calls are hints, so one that does not is
/// skipped.
fn fits_off_t(offset: u64, len: u64) -> bool {
    i64::try_from(offset).is_ok() && i64::try_from(len).is_ok()
}

/// Every path is inside a store (`forks/NAME/...`, absolute under its
/// canonical root): opened, created, renamed and removed without following a
/// symlink anywhere on it (a symlink planted at the next segment or the lock
/// fails with `ELOOP` instead of leading the write elsewhere).
impl JournalIo for RealIo {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        crate::sys::create_dir_nofollow(path, 0o755)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        match crate::sys::create_dir_nofollow(path, 0o755) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && crate::sys::is_dir_nofollow(path) => {
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let parent = path.parent().ok_or(e)?;
                self.create_dir_all(parent)?;
                match crate::sys::create_dir_nofollow(path, 0o755) {
                    Err(e)
                        if e.kind() == ErrorKind::AlreadyExists
                            && crate::sys::is_dir_nofollow(path) =>
                    {
                        Ok(())
                    }
                    r => r,
                }
            }
            Err(e) => Err(e),
        }
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn JournalFile>> {
        use rustix::fs::OFlags;
        let flags = if create {
            OFlags::RDWR | OFlags::CREATE
        } else {
            OFlags::RDWR
        };
        // O_NONBLOCK, then a regular-file check: a FIFO or a device planted
        // under a segment's name is refused, never read (it would block or
        // never end). O_NONBLOCK changes nothing for a regular file.
        let f = crate::sys::open_nofollow(path, flags | OFlags::NONBLOCK, 0o600)
            .map_err(crate::sys::no_symlink)?;
        crate::sys::regular_size(&f)?;
        let hints = crate::sys::open_nofollow(path, OFlags::RDONLY | OFlags::NONBLOCK, 0)?;
        Ok(Arc::new(RealFile(f, hints)))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for (name, _) in crate::sys::list_dir_nofollow(dir)? {
            if let Some(n) = name.to_str() {
                out.push(n.to_string());
            }
        }
        Ok(out)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        crate::sys::remove_nofollow(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        crate::sys::open_dir_nofollow(dir)?.sync_all()
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        crate::store::write_store_file(path, data, 0o644, true)
    }
    fn read_file(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match crate::store::read_store_file(path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn Any + Send + Sync>>> {
        use rustix::fs::OFlags;
        let f = crate::sys::open_nofollow(path, OFlags::RDWR | OFlags::CREATE, 0o600)?;
        // Closing the fd (dropping the guard) releases the lock.
        Ok(crate::sys::try_lock(&f, crate::sys::Lock::Exclusive)?
            .then(|| Box::new(f) as Box<dyn Any + Send + Sync>))
    }
}

// ------------------------------------------------------------------ faulty

/// An in-memory file system that models what survives a crash.
///
/// Each file has a *volatile* image (what reads see) and a *durable* image
/// (what a crash leaves): `sync_data` copies the first to the second. Names
/// are durable only once their directory is synced (`sync_dir`), except
/// `write_atomic`, which is durable when it returns. [`FaultyIo::crash`]
/// reverts every name and file to its durable state; open handles from before
/// the crash keep working on the images they had, as the old process would
/// (tests drop them). [`FaultyIo::fail_write_after`] makes a later write fail
/// with EIO, optionally after writing only a prefix (a torn write).
#[derive(Clone, Default)]
pub struct FaultyIo {
    inner: Arc<Mutex<Faulty>>,
}

#[derive(Default)]
struct Faulty {
    /// Visible names -> file.
    names: BTreeMap<PathBuf, Arc<FaultyFile>>,
    /// Names a crash keeps.
    durable_names: BTreeMap<PathBuf, Arc<FaultyFile>>,
    dirs: HashSet<PathBuf>,
    durable_dirs: HashSet<PathBuf>,
    locks: Arc<Mutex<HashSet<PathBuf>>>,
    /// Writes left before the failing one (`None`: never fail).
    fail_after: Option<u64>,
    /// How many bytes of the failing write land (a torn write).
    torn_prefix: usize,
    /// The errno of the failing write (0: EIO).
    fail_errno: i32,
    writes: u64,
    /// `start_writeback` calls so far: (offset, len). No effect on the images.
    writebacks: Vec<(u64, u64)>,
    /// `drop_behind` calls so far: (offset, len). No effect on the images.
    dropped: Vec<(u64, u64)>,
    /// `allocate` calls so far: (offset, len, how).
    allocations: Vec<(u64, u64, Prealloc)>,
}

struct FaultyFile {
    io: std::sync::Weak<Mutex<Faulty>>,
    data: Mutex<Images>,
}

#[derive(Clone, Default)]
struct Images {
    volatile: Vec<u8>,
    durable: Vec<u8>,
}

impl FaultyIo {
    pub fn new() -> FaultyIo {
        FaultyIo::default()
    }

    /// Simulate a power loss: forget every name whose directory was not
    /// synced and every byte that was not `sync_data`ed.
    pub fn crash(&self) {
        let mut g = self.inner.lock();
        g.names = g.durable_names.clone();
        g.dirs = g.durable_dirs.clone();
        g.locks.lock().clear();
        for f in g.names.values() {
            let mut d = f.data.lock();
            d.volatile = d.durable.clone();
        }
        // Files are shared with pre-crash handles: give surviving names fresh
        // file objects so old handles cannot write into the new "boot".
        let fresh: BTreeMap<PathBuf, Arc<FaultyFile>> = g
            .names
            .iter()
            .map(|(p, f)| {
                let d = f.data.lock().clone();
                (
                    p.clone(),
                    Arc::new(FaultyFile {
                        io: Arc::downgrade(&self.inner),
                        data: Mutex::new(d),
                    }),
                )
            })
            .collect();
        g.names = fresh.clone();
        g.durable_names = fresh;
        g.fail_after = None;
    }

    /// The `n`-th write from now (0 = the next one) fails with EIO after
    /// writing `torn_prefix` bytes of it; later writes succeed again.
    pub fn fail_write_after(&self, n: u64, torn_prefix: usize) {
        self.fail_write_with(n, torn_prefix, libc::EIO);
    }

    /// [`FaultyIo::fail_write_after`] with another errno (ENOSPC: a full disk).
    pub fn fail_write_with(&self, n: u64, torn_prefix: usize, errno: i32) {
        let mut g = self.inner.lock();
        g.fail_after = Some(n);
        g.torn_prefix = torn_prefix;
        g.fail_errno = errno;
    }

    /// Writes (write_at calls) so far.
    pub fn writes(&self) -> u64 {
        self.inner.lock().writes
    }

    /// The ranges whose writeback was started so far (write-behind hints).
    pub fn writebacks(&self) -> Vec<(u64, u64)> {
        self.inner.lock().writebacks.clone()
    }

    /// The ranges dropped from the page cache so far (drop-behind hints).
    pub fn dropped(&self) -> Vec<(u64, u64)> {
        self.inner.lock().dropped.clone()
    }

    /// The preallocations so far: (offset, len, how).
    pub fn allocations(&self) -> Vec<(u64, u64, Prealloc)> {
        self.inner.lock().allocations.clone()
    }

    /// The visible bytes of a file, for tests that damage a journal.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let g = self.inner.lock();
        g.names.get(path).map(|f| f.data.lock().volatile.clone())
    }

    /// Replace a file's bytes, durably (to simulate damage on disk).
    pub fn set_contents(&self, path: &Path, bytes: Vec<u8>) {
        let g = self.inner.lock();
        if let Some(f) = g.names.get(path) {
            let mut d = f.data.lock();
            d.volatile = bytes.clone();
            d.durable = bytes;
        }
    }

    fn new_file(&self, data: Vec<u8>, durable: Vec<u8>) -> Arc<FaultyFile> {
        Arc::new(FaultyFile {
            io: Arc::downgrade(&self.inner),
            data: Mutex::new(Images {
                volatile: data,
                durable,
            }),
        })
    }

    fn parent_exists(g: &Faulty, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) if !g.dirs.contains(p) => Err(io::Error::from(ErrorKind::NotFound)),
            _ => Ok(()),
        }
    }
}

impl JournalFile for FaultyFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut n = buf.len();
        let mut fail = 0;
        if let Some(io) = self.io.upgrade() {
            let mut g = io.lock();
            g.writes += 1;
            if let Some(left) = g.fail_after {
                if left == 0 {
                    g.fail_after = None;
                    n = g.torn_prefix.min(buf.len());
                    fail = g.fail_errno;
                } else {
                    g.fail_after = Some(left - 1);
                }
            }
        }
        let mut d = self.data.lock();
        let end = offset as usize + n;
        if d.volatile.len() < end {
            d.volatile.resize(end, 0);
        }
        d.volatile[offset as usize..end].copy_from_slice(&buf[..n]);
        match fail {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.data.lock();
        let start =
            usize::try_from(offset).map_err(|_| io::Error::from(ErrorKind::UnexpectedEof))?;
        let end = start
            .checked_add(buf.len())
            .filter(|&e| e <= d.volatile.len())
            .ok_or_else(|| io::Error::from(ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(&d.volatile[start..end]);
        Ok(())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.data.lock().volatile.len() as u64)
    }
    fn sync_data(&self) -> io::Result<()> {
        let mut d = self.data.lock();
        d.durable = d.volatile.clone();
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.data.lock().volatile.resize(len as usize, 0);
        Ok(())
    }
    /// Grows the visible image with zeros, as either kind of preallocation
    /// grows the size; a crash before the next `sync_data` forgets it. Counts
    /// as no write (it is a hint); the kinds are recorded for tests.
    fn allocate(&self, offset: u64, len: u64, how: Prealloc) -> io::Result<()> {
        if let Some(io) = self.io.upgrade() {
            io.lock().allocations.push((offset, len, how));
        }
        let mut d = self.data.lock();
        let end = (offset + len) as usize;
        if d.volatile.len() < end {
            d.volatile.resize(end, 0);
        }
        Ok(())
    }
    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        if let Some(io) = self.io.upgrade() {
            io.lock().writebacks.push((offset, len));
        }
        Ok(())
    }
    fn drop_behind(&self, offset: u64, len: u64) -> io::Result<()> {
        if let Some(io) = self.io.upgrade() {
            io.lock().dropped.push((offset, len));
        }
        Ok(())
    }
}

struct FaultyLock {
    set: Arc<Mutex<HashSet<PathBuf>>>,
    path: PathBuf,
}

impl Drop for FaultyLock {
    fn drop(&mut self) {
        self.set.lock().remove(&self.path);
    }
}

impl JournalIo for FaultyIo {
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut g = self.inner.lock();
        Self::parent_exists(&g, path)?;
        if !g.dirs.insert(path.to_path_buf()) {
            return Err(io::Error::from(ErrorKind::AlreadyExists));
        }
        Ok(())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut g = self.inner.lock();
        // Directories made with create_dir_all are treated as durable at once
        // (the store's own directories exist before any fork does).
        for a in path.ancestors() {
            g.dirs.insert(a.to_path_buf());
            g.durable_dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn JournalFile>> {
        let g = self.inner.lock();
        if let Some(f) = g.names.get(path) {
            return Ok(f.clone());
        }
        if !create {
            return Err(io::Error::from(ErrorKind::NotFound));
        }
        Self::parent_exists(&g, path)?;
        drop(g);
        let f = self.new_file(Vec::new(), Vec::new());
        let mut g = self.inner.lock();
        g.names.insert(path.to_path_buf(), f.clone());
        Ok(f)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let g = self.inner.lock();
        if !g.dirs.contains(dir) {
            return Err(io::Error::from(ErrorKind::NotFound));
        }
        let files = g.names.keys();
        let dirs = g.dirs.iter();
        Ok(files
            .chain(dirs)
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut g = self.inner.lock();
        g.names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::from(ErrorKind::NotFound))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut g = self.inner.lock();
        let g = &mut *g;
        g.durable_names.retain(|p, _| p.parent() != Some(dir));
        for (p, f) in &g.names {
            if p.parent() == Some(dir) {
                g.durable_names.insert(p.clone(), f.clone());
            }
        }
        g.durable_dirs.retain(|p| p.parent() != Some(dir));
        for p in &g.dirs {
            if p.parent() == Some(dir) {
                g.durable_dirs.insert(p.clone());
            }
        }
        Ok(())
    }
    fn write_atomic(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut g = self.inner.lock();
        Self::parent_exists(&g, path)?;
        let f = Arc::new(FaultyFile {
            io: Arc::downgrade(&self.inner),
            data: Mutex::new(Images {
                volatile: data.to_vec(),
                durable: data.to_vec(),
            }),
        });
        g.names.insert(path.to_path_buf(), f.clone());
        g.durable_names.insert(path.to_path_buf(), f);
        // The rename's directory is synced: the parent dir itself must survive.
        if let Some(p) = path.parent() {
            g.durable_dirs.insert(p.to_path_buf());
        }
        Ok(())
    }
    fn read_file(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        Ok(self.contents(path))
    }
    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn Any + Send + Sync>>> {
        let set = self.inner.lock().locks.clone();
        if !set.lock().insert(path.to_path_buf()) {
            return Ok(None);
        }
        Ok(Some(Box::new(FaultyLock {
            set,
            path: path.to_path_buf(),
        })))
    }
}
