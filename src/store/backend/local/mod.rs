//! [`LocalBackend`]: objects in pack files (and, from older stores, loose
//! files) under a store's `objects/`. This file holds its state and the
//! helpers every part uses; [`view`] finds published packs, [`read`],
//! [`write`] and [`gc`] implement the three traits of [`super`].

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{self, ErrorKind};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use lru::LruCache;
use parking_lot::{Mutex, RwLock};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::store::id::ObjectId;
use crate::store::midx::{self, Midx, MidxEntry};
use crate::store::pack::{
    PACK_OBJECT_MAX, PackEntry, PackFile, PackWriter, decode_index, max_index_len,
};

mod gc;
mod read;
mod view;
mod write;

pub use gc::REPACK_UNUSED;
pub use read::MAX_LOOSE_FILE;
#[cfg(test)]
pub use write::MIDX_TAIL_PACKS;
pub use write::SYNC_OBJECTS;

/// The directory under `objects/` that holds pack files.
pub const PACKS: &str = "packs";

/// In [`PACKS`]: the names of the packs published since the multi-pack index
/// was last written, one a line, appended after each publish (a hint: see
/// [`LocalBackend`]).
pub const PUBLISHED: &str = "published";

/// Objects in pack files under `objects/packs/` (see [`crate::store::pack`]), and,
/// read and removed but no longer written, as files `objects/ab/cdef…`
/// (first two hex digits fan out): every object of a store written before
/// packs, and the large ones (over [`PACK_OBJECT_MAX`] stored) of a store
/// written before 2026-12-05.
///
/// A write is held pending until `sync`, which callers run before publishing
/// a checkpoint or ref that names the new objects: appended to this process's
/// open pack. `sync` makes all pending data durable with one `syncfs`, only
/// then publishes each pack by writing its index, and fsyncs the directory.
/// So a crash never leaves a partial object in a published pack, while a
/// snapshot of thousands of files costs one filesystem sync and a few files
/// (a 1 GiB file: 17 packs and their indexes, not 3,400 loose files). Until `sync`, this
/// process reads pending objects from where they were written. Packs of a
/// process that died before `sync` are orphans, never served, removed by gc.
///
/// Published packs are found through the multi-pack index ([`crate::store::midx`]),
/// searched in place, and the few packs it does not cover yet (the tail)
/// through their own indexes, loaded into memory. Packs other processes
/// publish later are found by rescanning the packs directory when it changed
/// (checked on a miss) or, for a read, on any miss. A write that leaves the
/// tail at [`MIDX_TAIL_PACKS`](write::MIDX_TAIL_PACKS) packs or [`MIDX_TAIL_OBJECTS`](write::MIDX_TAIL_OBJECTS) objects (or with
/// no multi-pack index at all) writes a new multi-pack index covering them.
///
/// A process's first look at the packs does not list the directory, whose
/// length grows with every snapshot until gc merges the packs: it takes the
/// tail from [`PUBLISHED`] (*a quick scan*), and checks that a pack the
/// multi-pack index names is still there when an object is first found in it
/// (gc may have removed it). A pack missing from the log (published by an
/// older storefs, or its line lost to a crash or to a concurrent rewrite of
/// the log) is then unknown until a full scan: `contains` may answer no for its
/// objects, which costs a duplicate copy, never a loss; a read's miss always
/// scans in full.
pub struct LocalBackend {
    dir: PathBuf,
    packs_dir: PathBuf,
    /// Written, not yet published (until `sync`).
    pending: Mutex<HashMap<ObjectId, Pending>>,
    /// Unpublished packs this process is writing. Lock order: `writing`, then
    /// `pending`, then `packs`.
    writing: Mutex<Writing>,
    /// Published packs.
    packs: RwLock<Packs>,
    /// Open pack files, least recently used closed first.
    files: Mutex<LruCache<String, Arc<PackFile>>>,
    /// `dir` and `packs_dir` held open (`O_PATH`) once they exist, so the
    /// look-ups every new object costs (is it loose? did the packs directory
    /// change?) are a `statat`/`fstat` on a descriptor, not a walk of the
    /// store's whole path: a snapshot of 300k small files spent a fifth of its
    /// time walking those paths.
    dir_fd: OnceLock<File>,
    packs_dir_fd: OnceLock<File>,
    /// Full scans (listings of the packs directory) so far.
    listings: AtomicU64,
    /// Held through a `sync`, so syncs run one at a time (a pull's tasks
    /// publish as objects pile up).
    syncing: Mutex<()>,
}

/// Where a pending object can be read: its record in a pack being written.
struct Pending {
    file: Arc<File>,
    offset: u64,
    len: u32,
}

#[derive(Default)]
struct Writing {
    current: Option<PackWriter>,
    full: Vec<PackWriter>,
}

/// A published pack, as its index describes it.
struct Pack {
    name: String,
    mtime: SystemTime,
    entries: Vec<PackEntry>,
}

/// The multi-pack index as of the last scan.
struct MidxView {
    midx: Arc<Midx>,
    /// Per pack the midx names: whether its index was there (gc removes
    /// packs; the midx may be older): [`ALIVE`] or [`GONE`] as the last full
    /// scan listed it, or [`UNCHECKED`] after a quick scan until the pack is
    /// first needed.
    alive: Vec<AtomicU8>,
    packs_dir: PathBuf,
}

const UNCHECKED: u8 = 0;
const ALIVE: u8 = 1;
const GONE: u8 = 2;

impl MidxView {
    /// `midx` with each pack alive as the full scan `listed` says, or with
    /// no pack checked yet after a quick scan (`None`).
    fn new(midx: Arc<Midx>, packs_dir: &Path, listed: Option<&BTreeSet<String>>) -> MidxView {
        let alive = midx
            .names
            .iter()
            .map(|n| {
                AtomicU8::new(match listed {
                    None => UNCHECKED,
                    Some(l) if l.contains(n) => ALIVE,
                    Some(_) => GONE,
                })
            })
            .collect();
        MidxView {
            midx,
            alive,
            packs_dir: packs_dir.to_path_buf(),
        }
    }

    /// Whether pack `i` of the midx is there: as the last full scan listed
    /// it, or (after a quick scan) whether its index exists now, asked once.
    fn alive(&self, i: usize) -> io::Result<bool> {
        let Some(state) = self.alive.get(i) else {
            return Ok(false);
        };
        match state.load(Ordering::Acquire) {
            ALIVE => Ok(true),
            GONE => Ok(false),
            _ => {
                let idx = self.packs_dir.join(format!("{}.idx", self.midx.names[i]));
                let there = match crate::sys::metadata_nofollow(&idx) {
                    Ok(_) => true,
                    Err(e) if e.kind() == ErrorKind::NotFound => false,
                    Err(e) => return Err(e),
                };
                state.store(if there { ALIVE } else { GONE }, Ordering::Release);
                Ok(there)
            }
        }
    }

    /// The names of the packs that are there.
    fn alive_names(&self) -> io::Result<Vec<&String>> {
        let mut out = Vec::new();
        for (i, n) in self.midx.names.iter().enumerate() {
            if self.alive(i)? {
                out.push(n);
            }
        }
        Ok(out)
    }

    /// The first entry for `id` in a pack that is still there.
    fn find(&self, id: &ObjectId) -> io::Result<Option<MidxEntry>> {
        for e in self.midx.lookup(id)? {
            if self.alive(e.pack as usize)? {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }
}

/// Where a published packed object is.
struct Loc {
    pack: String,
    offset: u64,
    len: u32,
    /// The pack's modification time, when known without a `stat`.
    mtime: Option<SystemTime>,
    /// Found through the multi-pack index: the record header in the pack is
    /// checked before the bytes are trusted.
    via_midx: bool,
}

#[derive(Default)]
struct Packs {
    /// Modification time of the packs directory when it was last scanned.
    scanned: Option<SystemTime>,
    /// Whether the last scan was quick (the tail from [`PUBLISHED`], not from
    /// a listing).
    quick: bool,
    midx: Option<Arc<MidxView>>,
    /// (device, inode) of a multi-pack index found damaged: not used again
    /// (the next write replaces it).
    bad_midx: Option<midx::Identity>,
    /// Published packs the midx does not cover (the tail), indexed in memory.
    by_name: HashMap<String, Arc<Pack>>,
    objects: HashMap<ObjectId, (Arc<Pack>, u64, u32)>,
}

impl Packs {
    fn add(&mut self, pack: Pack) {
        let pack = Arc::new(pack);
        for e in &pack.entries {
            self.objects.insert(e.id, (pack.clone(), e.offset, e.len));
        }
        self.by_name.insert(pack.name.clone(), pack);
    }

    fn remove(&mut self, name: &str) {
        if let Some(pack) = self.by_name.remove(name) {
            for e in &pack.entries {
                if self
                    .objects
                    .get(&e.id)
                    .is_some_and(|(p, ..)| Arc::ptr_eq(p, &pack))
                {
                    self.objects.remove(&e.id);
                }
            }
        }
    }
}

/// The largest object (before compression) whose stored form is sure to fit
/// in [`PACK_OBJECT_MAX`]: zstd's worst case adds 1/256 and a few bytes.
const PACKED_ALWAYS: usize = PACK_OBJECT_MAX - PACK_OBJECT_MAX / 256 - 1024;

/// Open pack files kept per process (each read of a packed object needs one).
const OPEN_PACKS: usize = 64;

impl LocalBackend {
    pub fn new(dir: PathBuf) -> LocalBackend {
        LocalBackend {
            packs_dir: dir.join(PACKS),
            dir,
            pending: Mutex::new(HashMap::new()),
            writing: Mutex::new(Writing::default()),
            packs: RwLock::new(Packs::default()),
            files: Mutex::new(LruCache::new(
                NonZeroUsize::new(OPEN_PACKS).expect("nonzero"),
            )),
            dir_fd: OnceLock::new(),
            packs_dir_fd: OnceLock::new(),
            listings: AtomicU64::new(0),
            syncing: Mutex::new(()),
        }
    }

    /// How many times this backend listed its packs directory (a full scan).
    pub fn listings(&self) -> u64 {
        self.listings.load(Ordering::Relaxed)
    }

    /// Whether `id` is stored loose (published: its final name exists).
    fn loose_exists(&self, id: &ObjectId) -> io::Result<bool> {
        let Some(dir) = held_dir(&self.dir_fd, &self.dir)? else {
            return Ok(false);
        };
        let hex = id.to_hex();
        let rel = format!("{}/{}", &hex[..2], &hex[2..]);
        match rustix::fs::statat(dir, rel.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Modification time of the packs directory (`None` while it does not exist).
    fn packs_dir_mtime(&self) -> io::Result<Option<SystemTime>> {
        match held_dir(&self.packs_dir_fd, &self.packs_dir)? {
            Some(dir) => Ok(Some(dir.metadata()?.modified()?)),
            None => Ok(None),
        }
    }

    /// Whether `id` is pending or in a pack this process indexes in memory
    /// (the tail), without a look at the disk.
    fn known_in_memory(&self, id: &ObjectId) -> bool {
        self.pending.lock().contains_key(id) || self.packs.read().objects.contains_key(id)
    }

    /// The file that holds `id` when it is stored loose.
    pub fn path_of(&self, id: &ObjectId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    fn pack_path(&self, name: &str, ext: &str) -> PathBuf {
        self.packs_dir.join(format!("{name}.{ext}"))
    }

    fn open_pack(&self, name: &str) -> io::Result<Arc<PackFile>> {
        if let Some(f) = self.files.lock().get(name) {
            return Ok(f.clone());
        }
        let f = Arc::new(PackFile::open(self.pack_path(name, "pack"))?);
        self.files.lock().put(name.to_string(), f.clone());
        Ok(f)
    }

    /// Read a pack's index; `None` when it vanished meanwhile (gc).
    /// The index is read without following a symlink, and only when it is
    /// a regular file no larger than its pack's records could need
    /// ([`max_index_len`]).
    fn load_pack(&self, name: &str) -> io::Result<Option<Pack>> {
        let pack = match crate::sys::metadata_nofollow(&self.pack_path(name, "pack")) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let idx_path = self.pack_path(name, "idx");
        let cap = max_index_len(pack.len());
        let idx =
            match crate::store::read_store_file_capped(&idx_path, cap, "the index of its pack") {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: {e}", idx_path.display()),
                    ));
                }
            };
        let entries = decode_index(&idx)?;
        let mtime = pack.modified()?;
        Ok(Some(Pack {
            name: name.to_string(),
            mtime,
            entries,
        }))
    }
}

impl Drop for LocalBackend {
    /// Objects written but never synced belong to nothing published: remove them.
    fn drop(&mut self) {
        let writing = self.writing.get_mut();
        for w in writing.full.iter().chain(writing.current.iter()) {
            w.discard();
        }
    }
}

/// `dir` opened `O_PATH` the first time it exists, then the same descriptor
/// (a store's object directories are created once and never replaced); `None`
/// while it does not exist.
fn held_dir<'a>(held: &'a OnceLock<File>, dir: &Path) -> io::Result<Option<&'a File>> {
    if let Some(f) = held.get() {
        return Ok(Some(f));
    }
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match rustix::fs::open(dir, flags, Mode::empty()) {
        Ok(fd) => Ok(Some(held.get_or_init(|| File::from(fd)))),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The names in `dir` and whether each is a directory, listed through a
/// descriptor reached without following a symlink; none when `dir` is missing.
fn read_dir_if_exists(dir: &Path) -> io::Result<Vec<(std::ffi::OsString, bool)>> {
    crate::store::list_store_dir_if_exists(dir)
}
