//! Where compressed objects live. `LocalBackend` is a directory; a remote backend
//! (object storage) can implement the same trait without touching the layers above.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, ErrorKind, Write};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use lru::LruCache;
use parking_lot::{Mutex, RwLock};
use rustix::fs::{AtFlags, Mode, OFlags};

use super::atomic::{fsync_dir, write_store_file};
use super::id::ObjectId;
use super::midx::{self, MIDX, Merge, Midx, MidxEntry};
use super::pack::{
    PACK_OBJECT_MAX, PACK_TARGET_SIZE, PackEntry, PackFile, PackWriter, decode_index, read_entry,
};

/// The directory under `objects/` that holds pack files.
pub const PACKS: &str = "packs";

/// In [`PACKS`]: the names of the packs published since the multi-pack index
/// was last written, one a line, appended after each publish (a hint: see
/// [`LocalBackend`]).
pub const PUBLISHED: &str = "published";

/// An object as [`ObjectBackend::read_for_use`] hands it over.
pub enum Got {
    /// The stored (compressed) bytes, still to be verified.
    Stored(Vec<u8>),
    /// The content, decompressed and found to hash to the id.
    Verified(Vec<u8>),
}

/// Where a partial read finds an object's stored bytes
/// ([`ObjectBackend::open_stored`]).
pub enum Stored {
    /// `len` stored bytes at `offset` in `file` (a loose object: offset 0).
    File {
        file: StoredFile,
        offset: u64,
        len: u64,
    },
    /// All the stored bytes, read already (a pending object).
    Bytes(Vec<u8>),
}

/// The file a [`Stored::File`] lies in.
pub enum StoredFile {
    /// A loose object's file, opened for this read only.
    Own(File),
    /// A pack, its descriptors shared with the process's other reads: its
    /// flags and read-ahead advice are left as they are.
    Pack(Arc<PackFile>),
}

impl StoredFile {
    /// The descriptor reads through the page cache take.
    pub fn file(&self) -> &File {
        match self {
            StoredFile::Own(f) => f,
            StoredFile::Pack(p) => p.file(),
        }
    }

    /// `n` bytes at `at`, past the page cache unless it holds them
    /// ([`crate::sys::read_cold`]).
    pub fn read_cold(&self, at: u64, n: usize) -> io::Result<Vec<u8>> {
        match self {
            StoredFile::Own(f) => crate::sys::read_cold(f, at, n),
            StoredFile::Pack(p) => p.read_cold(at, n),
        }
    }
}

/// Storage of compressed object bytes by id. Implementations must be safe to call
/// from many threads, and `write` must never leave a partial object under `id`.
pub trait ObjectBackend: Send + Sync {
    /// The stored (compressed) bytes of `id`, or `None` when the backend lacks it.
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>>;
    /// What [`Store::get_object`](super::Store::get_object) reads: the stored
    /// bytes, or the content when the backend verified it itself on the way
    /// in (a fetch from a remote), so it is not decompressed and hashed twice.
    /// The default is [`read`](ObjectBackend::read).
    fn read_for_use(&self, id: &ObjectId) -> io::Result<Option<Got>> {
        Ok(self.read(id)?.map(Got::Stored))
    }
    /// Store `bytes` under `id`, atomically. Storing an id that exists is a no-op.
    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()>;
    /// Whether `id` is stored.
    fn contains(&self, id: &ObjectId) -> io::Result<bool>;
    /// [`contains`](Self::contains) asked before writing an object of `len`
    /// bytes (before compression). A backend may leave out the places such
    /// an object is never written to; an answer of `false` for an object
    /// stored elsewhere only costs a second copy, never a loss.
    fn contains_for_write(&self, id: &ObjectId, _len: usize) -> io::Result<bool> {
        self.contains(id)
    }
    /// Make every completed `write` durable (names included).
    fn sync(&self) -> io::Result<()>;
    /// Whether the writes not yet synced hold enough memory that a writer of
    /// many objects (a snapshot) should `sync` before writing more: at
    /// least `min_objects` of them (see [`SYNC_OBJECTS`]).
    fn wants_sync(&self, _min_objects: usize) -> bool {
        false
    }
    /// [`ObjectBackend::sync`] if [`ObjectBackend::wants_sync`]: what a
    /// writer of many objects calls as it goes.
    fn sync_if_many(&self, min_objects: usize) -> io::Result<()> {
        if self.wants_sync(min_objects) {
            self.sync()?;
        }
        Ok(())
    }
    /// Every stored id (for verify and gc).
    fn list(&self) -> io::Result<Vec<ObjectId>>;
    /// Drop what this process believes is stored and look again. Writers call
    /// it once they hold the gc write lease (gc cannot remove anything until
    /// it is released), so `contains` never vouches for an object gc removed
    /// earlier, which a checkpoint would then name without it existing.
    fn refresh(&self) -> io::Result<()> {
        Ok(())
    }
    /// Where the stored bytes of `id` are on the local disk (file, offset,
    /// length), for a backend that keeps them there; `None` otherwise.
    fn locate(&self, _id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>> {
        Ok(None)
    }
    /// For a read of part of `id`: where its stored bytes are, so only the
    /// part needed is read ([`Stored`]); `None` when it is not stored here or
    /// the backend cannot say (the default: the caller reads it whole).
    fn open_stored(&self, _id: &ObjectId) -> io::Result<Option<Stored>> {
        Ok(None)
    }
    /// A hint that `ids` will probably be read soon (the next chunks of a file
    /// being read). A backend that fetches from far away may start fetching
    /// them in the background; the default ignores it.
    fn prefetch(&self, _ids: &[ObjectId]) {}
    /// Move a bad object aside so it is no longer served; returns where it went.
    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>>;
    /// Stored size and modification time of `id` (for gc), or `None` when absent.
    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>>;
    /// Delete `id` (gc only); returns whether it was there.
    fn remove(&self, id: &ObjectId) -> io::Result<bool>;
    /// Delete many objects at once (gc only); whether each was there. A
    /// backend that packs objects rewrites each pack once, not once per object.
    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>> {
        ids.iter().map(|id| self.remove(id)).collect()
    }
    /// gc's sweep of unreachable objects: [`ObjectBackend::remove_many`],
    /// except that a backend that packs objects may leave an object in a
    /// pack whose rewrite without it would copy many times what it frees
    /// (`false` for it: a later sweep drops it once more of its pack is
    /// unreachable). With `dry_run` nothing is removed: what a sweep would
    /// remove.
    fn sweep(&self, ids: &[ObjectId], dry_run: bool) -> io::Result<Vec<bool>> {
        if dry_run {
            return Ok(vec![true; ids.len()]);
        }
        self.remove_many(ids)
    }
    /// Merge many small packs into few (gc only, while no writer publishes).
    /// Only packs whose every object is `movable` take part: moving an object
    /// gives it a new modification time, which must not extend the grace of
    /// one that nothing reaches. Returns (packs merged, packs written).
    fn consolidate(&self, _movable: &dyn Fn(&ObjectId) -> bool) -> io::Result<(usize, usize)> {
        Ok((0, 0))
    }
    /// Temp files of writes that never finished (a crash), last modified before
    /// `cutoff` or written by a process that is gone (whatever their age):
    /// their paths and sizes. Removed unless `dry_run`.
    fn remove_stale_temps(
        &self,
        _cutoff: SystemTime,
        _dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        Ok(Vec::new())
    }
}

/// Objects in pack files under `objects/packs/` (see [`super::pack`]), and,
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
/// Published packs are found through the multi-pack index ([`super::midx`]),
/// searched in place, and the few packs it does not cover yet (the tail)
/// through their own indexes, loaded into memory. Packs other processes
/// publish later are found by rescanning the packs directory when it changed
/// (checked on a miss) or, for a read, on any miss. A write that leaves the
/// tail at [`MIDX_TAIL_PACKS`] packs or [`MIDX_TAIL_OBJECTS`] objects (or with
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
                let there = match fs::symlink_metadata(&idx) {
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

/// gc's sweep rewrites a pack to drop unreachable objects when more than
/// this share of its bytes is unreachable, or when what it keeps is at most
/// [`REPACK_SMALL`]: a pack of large chunks is not copied whole to drop one.
/// `gc --remote` repacks a remote's packs by the same share.
pub const REPACK_UNUSED: f64 = 0.10;
/// What a rewrite may always copy.
pub const REPACK_SMALL: u64 = 4 << 20;

/// Whether dropping `doomed` from `pack` is worth its rewrite
/// ([`REPACK_UNUSED`], [`REPACK_SMALL`]).
fn worth_rewriting(pack: &Pack, doomed: &HashSet<ObjectId>) -> bool {
    let (mut dead, mut all) = (0u64, 0u64);
    for e in &pack.entries {
        all += u64::from(e.len);
        if doomed.contains(&e.id) {
            dead += u64::from(e.len);
        }
    }
    all - dead <= REPACK_SMALL || dead as f64 > REPACK_UNUSED * all as f64
}

/// gc merges small packs (under half of [`PACK_TARGET_SIZE`]) once there are
/// this many: every snapshot or commit publishes one, and each is two files
/// (and a directory entry every rescan lists).
pub const MERGE_PACKS: usize = 8;

/// A write rebuilds the multi-pack index once this many published packs are
/// outside it...
pub const MIDX_TAIL_PACKS: usize = 16;
/// ...or this many objects (so a big import does not leave a big index in
/// every reader's memory).
pub const MIDX_TAIL_OBJECTS: usize = 4096;
/// A snapshot asks [`ObjectBackend::wants_sync`] with this many objects
/// (half a batch of the walk's entries: a batch of small files publishes):
/// the local backend says yes at that many pending objects (about 100 bytes
/// each in memory until published), or at an eighth of the objects the
/// multi-pack index covers when that is more: each sync then rewrites the
/// index once for at least an eighth of its size in new objects, so a large
/// snapshot into a large store does not rewrite it over and over.
pub const SYNC_OBJECTS: usize = 16_384;

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

    fn write_packed(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        let mut writing = self.writing.lock();
        if self.pending.lock().contains_key(id) {
            return Ok(());
        }
        let w = match &mut writing.current {
            Some(w) => w,
            None => writing.current.insert(PackWriter::create(&self.packs_dir)?),
        };
        let e = w.append(id, bytes)?;
        let file = w.file().clone();
        if w.is_full() {
            w.flush()?;
            let full = writing.current.take().expect("current pack");
            writing.full.push(full);
        }
        self.pending.lock().insert(
            *id,
            Pending {
                file,
                offset: e.offset,
                len: e.len,
            },
        );
        Ok(())
    }

    /// Where `id` is published as of the last scan, without rescanning.
    fn find_published(&self, id: &ObjectId) -> io::Result<Option<Loc>> {
        let tail = |packs: &Packs| {
            packs.objects.get(id).map(|(pack, offset, len)| Loc {
                pack: pack.name.clone(),
                offset: *offset,
                len: *len,
                mtime: Some(pack.mtime),
                via_midx: false,
            })
        };
        let view = {
            let packs = self.packs.read();
            if let Some(loc) = tail(&packs) {
                return Ok(Some(loc));
            }
            packs.midx.clone()
        };
        let Some(view) = view else { return Ok(None) };
        match view.find(id) {
            Ok(found) => Ok(found.map(|e| Loc {
                pack: view.midx.names[e.pack as usize].clone(),
                offset: e.offset,
                len: e.len,
                mtime: None,
                via_midx: true,
            })),
            Err(e) => {
                // Set aside: its packs are in the tail now.
                self.midx_failed(&view, &e);
                Ok(tail(&self.packs.read()))
            }
        }
    }

    /// The multi-pack index `view` could not be read or was wrong: warn, stop
    /// using it (every pack is then read through its own index) and rescan.
    fn midx_failed(&self, view: &MidxView, e: &io::Error) {
        tracing::warn!(error = %e, path = %self.packs_dir.join(MIDX).display(), "damaged multi-pack index; reading each pack's own index instead (the next snapshot, commit or gc rewrites it)");
        {
            let mut packs = self.packs.write();
            packs.bad_midx = Some(view.midx.identity);
            if packs
                .midx
                .as_ref()
                .is_some_and(|v| v.midx.identity == view.midx.identity)
            {
                packs.midx = None;
                packs.scanned = None;
            }
        }
        if let Err(e) = self.rescan() {
            tracing::warn!(error = %e, "rescanning the packs failed");
        }
    }

    /// The published pack holding `id`. On a miss the packs directory is
    /// rescanned when it changed since the last scan, or always with `force`.
    fn lookup_pack(&self, id: &ObjectId, force: bool) -> io::Result<Option<Loc>> {
        if let Some(found) = self.find_published(id)? {
            return Ok(Some(found));
        }
        let scanned = self.packs.read().scanned;
        if scanned.is_none() {
            // This process's first look: quick, then in full only for a read.
            self.rescan_quick()?;
            if let Some(found) = self.find_published(id)? {
                return Ok(Some(found));
            }
            if !force {
                return Ok(None);
            }
        } else if !force && scanned == self.packs_dir_mtime()? {
            return Ok(None);
        }
        self.rescan()?;
        self.find_published(id)
    }

    /// The multi-pack index as it is now: the one in use when the file was
    /// not replaced, `None` when there is none or it was found damaged.
    fn current_midx(&self) -> io::Result<Option<Arc<Midx>>> {
        let (current, bad) = {
            let packs = self.packs.read();
            (packs.midx.clone(), packs.bad_midx)
        };
        let midx_path = self.packs_dir.join(MIDX);
        match fs::metadata(&midx_path) {
            Ok(m) => {
                let identity = midx::identity(&m);
                if Some(identity) == bad {
                    Ok(None)
                } else if let Some(v) = current.filter(|v| v.midx.identity == identity) {
                    Ok(Some(v.midx.clone()))
                } else {
                    match Midx::open(&midx_path) {
                        Ok(m) => Ok(m.map(Arc::new)),
                        Err(e) => {
                            tracing::warn!(error = %e, path = %midx_path.display(), "unreadable multi-pack index; reading each pack's own index instead (the next snapshot, commit or gc rewrites it)");
                            self.packs.write().bad_midx = Some(identity);
                            Ok(None)
                        }
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The pack names in [`PUBLISHED`] (none when it is missing); lines that
    /// are not a pack name (a line torn by a crash) are skipped.
    fn read_published(&self) -> io::Result<BTreeSet<String>> {
        let text = match fs::read(self.packs_dir.join(PUBLISHED)) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => return Err(e),
        };
        Ok(text
            .split(|&b| b == b'\n')
            .filter_map(|l| std::str::from_utf8(l).ok())
            .filter(|n| midx::is_pack_name(n))
            .map(str::to_string)
            .collect())
    }

    /// A scan without listing the packs directory: the multi-pack index, its
    /// packs left unchecked until needed, and as the tail the packs
    /// [`PUBLISHED`] names that it does not cover (see [`LocalBackend`]).
    fn rescan_quick(&self) -> io::Result<()> {
        let mtime = self.packs_dir_mtime()?;
        let midx = self.current_midx()?;
        let logged = self.read_published()?;
        let covered: HashSet<&str> = midx
            .iter()
            .flat_map(|m| m.names.iter().map(String::as_str))
            .collect();
        let tail: BTreeSet<&String> = logged
            .iter()
            .filter(|n| !covered.contains(n.as_str()))
            .collect();
        let view = midx.map(|m| MidxView::new(m, &self.packs_dir, None));
        self.load_tail(tail, view, mtime, true)
    }

    /// Make `tail` (pack names) this process's tail: load the packs not yet
    /// loaded (those gone meanwhile are skipped), drop the others, and set
    /// the midx view and the scan state. After a `quick` scan, whose tail
    /// comes from the log, a pack loaded by an earlier scan is looked for
    /// again (gc may have removed it; the log does not say).
    fn load_tail(
        &self,
        mut tail: BTreeSet<&String>,
        view: Option<MidxView>,
        mtime: Option<SystemTime>,
        quick: bool,
    ) -> io::Result<()> {
        let known: HashSet<String> = self.packs.read().by_name.keys().cloned().collect();
        if quick {
            for name in &known {
                if tail.contains(name) && !self.pack_path(name, "idx").try_exists()? {
                    tail.remove(name);
                }
            }
        }
        let mut loaded = Vec::new();
        for name in tail.iter().filter(|n| !known.contains(**n)) {
            match self.load_pack(name) {
                Ok(Some(p)) => loaded.push(p),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(pack = %name, error = %e, "unreadable pack index; its objects are treated as missing (run `storefs verify`)");
                }
            }
        }
        let mut packs = self.packs.write();
        for gone in known.iter().filter(|n| !tail.contains(n)) {
            packs.remove(gone);
        }
        for p in loaded {
            packs.add(p);
        }
        packs.midx = view.map(Arc::new);
        packs.scanned = mtime;
        packs.quick = quick;
        Ok(())
    }

    /// Bring the view of the packs up to date with the packs directory: the
    /// multi-pack index (reopened when it was replaced), which of its packs
    /// are still there, and the indexes of the packs it does not cover.
    fn rescan(&self) -> io::Result<()> {
        // The time before the listing: a change during it triggers a rescan later.
        let mtime = self.packs_dir_mtime()?;
        // The midx before the listing: a pack it names is then either listed
        // or gone, and a pack published after it is listed (tail).
        let midx = self.current_midx()?;
        self.listings.fetch_add(1, Ordering::Relaxed);
        let mut names = BTreeSet::new();
        for ent in read_dir_if_exists(&self.packs_dir)? {
            let name = ent?.file_name();
            if let Some(n) = name.to_str().and_then(|n| n.strip_suffix(".idx"))
                && !n.starts_with('.')
            {
                names.insert(n.to_string());
            }
        }
        let covered: HashSet<&str> = midx
            .iter()
            .flat_map(|m| m.names.iter())
            .filter(|n| names.contains(*n))
            .map(String::as_str)
            .collect();
        let tail: BTreeSet<&String> = names
            .iter()
            .filter(|n| !covered.contains(n.as_str()))
            .collect();
        let view = midx.map(|m| MidxView::new(m, &self.packs_dir, Some(&names)));
        self.load_tail(tail, view, mtime, false)
    }

    /// Publish `w` (its data already durable) and add its name to
    /// [`PUBLISHED`], where a quick scan finds it. A failure to log is only
    /// a warning: the pack is published, and full scans list it.
    fn publish(&self, w: &mut PackWriter) -> io::Result<String> {
        let name = w.publish()?;
        let path = self.packs_dir.join(PUBLISHED);
        let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE;
        let logged = crate::sys::open_nofollow(&path, flags, 0o644)
            .and_then(|mut f| f.write_all(format!("{name}\n").as_bytes()));
        if let Err(e) = logged {
            tracing::warn!(path = %path.display(), error = %e, "cannot log a published pack; processes find it by listing the packs directory");
        }
        Ok(name)
    }

    /// After a new multi-pack index: [`PUBLISHED`] rewritten with the names of
    /// the tail only (the packs published after the index was written), so
    /// that it stays short. A line another process appends meanwhile may be
    /// lost: its pack is then found by full scans only, until the next index
    /// covers it (see [`LocalBackend`]).
    fn trim_published(&self) {
        let mut text = String::new();
        {
            let packs = self.packs.read();
            let mut names: Vec<&String> = packs
                .by_name
                .keys()
                .filter(|n| midx::is_pack_name(n))
                .collect();
            names.sort();
            for n in names {
                text.push_str(n);
                text.push('\n');
            }
        }
        let path = self.packs_dir.join(PUBLISHED);
        if let Err(e) = write_store_file(&path, text.as_bytes(), 0o644, false) {
            tracing::warn!(path = %path.display(), error = %e, "cannot rewrite the log of published packs; it only grows longer");
        }
    }

    /// Read a pack's index; `None` when it vanished meanwhile (gc).
    fn load_pack(&self, name: &str) -> io::Result<Option<Pack>> {
        let idx = match fs::read(self.pack_path(name, "idx")) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let entries = decode_index(&idx)?;
        let mtime = match fs::metadata(self.pack_path(name, "pack")) {
            Ok(m) => m.modified()?,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(Pack {
            name: name.to_string(),
            mtime,
            entries,
        }))
    }

    /// Every published pack (tail and midx), each as its own index describes
    /// it, one at a time (gc: consolidation).
    fn each_pack(&self, f: &mut dyn FnMut(Arc<Pack>)) -> io::Result<()> {
        self.rescan()?;
        let (tail, view) = {
            let packs = self.packs.read();
            let tail: Vec<Arc<Pack>> = packs.by_name.values().cloned().collect();
            (tail, packs.midx.clone())
        };
        for p in tail {
            f(p);
        }
        if let Some(v) = view {
            for name in v.alive_names()? {
                match self.load_pack(name) {
                    Ok(Some(p)) => f(Arc::new(p)),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(pack = %name, error = %e, "unreadable pack index; left as it is");
                    }
                }
            }
        }
        Ok(())
    }

    /// After a write: when the tail has grown past its bounds (or there is no
    /// multi-pack index yet), write a new one covering it. A failure is only
    /// a warning: the packs are published, just slower to find.
    fn maybe_rebuild_midx(&self) {
        let (tail_packs, tail_objects, has_midx) = {
            let packs = self.packs.read();
            (
                packs
                    .by_name
                    .keys()
                    .filter(|n| midx::is_pack_name(n))
                    .count(),
                packs.objects.len(),
                packs.midx.is_some(),
            )
        };
        if tail_packs > 0
            && (tail_packs >= MIDX_TAIL_PACKS || tail_objects >= MIDX_TAIL_OBJECTS || !has_midx)
        {
            self.rebuild_midx_or_warn();
        }
    }

    /// [`Self::rebuild_midx`], a failure only warned about (then rescanned,
    /// so this process's view matches the directory).
    fn rebuild_midx_or_warn(&self) {
        if let Err(e) = self.rebuild_midx() {
            tracing::warn!(error = %e, path = %self.packs_dir.join(MIDX).display(), "cannot write the multi-pack index; packs are read through their own indexes meanwhile");
            if let Err(e) = self.rescan() {
                tracing::warn!(error = %e, "rescanning the packs failed");
            }
        }
    }

    /// Write a new multi-pack index over every published pack: the old one's
    /// entries for packs still there, merged with the tail's. When the old
    /// one turns out damaged, from every pack's own index instead.
    fn rebuild_midx(&self) -> io::Result<()> {
        self.rescan()?;
        let (view, tail) = {
            let packs = self.packs.read();
            let tail: Vec<Arc<Pack>> = packs
                .by_name
                .values()
                .filter(|p| midx::is_pack_name(&p.name))
                .cloned()
                .collect();
            (packs.midx.clone(), tail)
        };
        let mut names: Vec<String> = tail.iter().map(|p| p.name.clone()).collect();
        if let Some(v) = &view {
            names.extend(v.alive_names()?.into_iter().cloned());
        }
        names.sort();
        names.dedup();
        if names.is_empty() {
            // No packs left (gc removed them all): no index either.
            match crate::sys::remove_nofollow(&self.packs_dir.join(MIDX)) {
                Ok(()) => fsync_dir(&self.packs_dir)?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            // Nor a log of packs published since.
            match crate::sys::remove_nofollow(&self.packs_dir.join(PUBLISHED)) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            return self.rescan();
        }
        let index_of = |name: &str| names.binary_search_by(|n| n.as_str().cmp(name)).ok();
        let mut fresh: Vec<MidxEntry> = Vec::new();
        for p in &tail {
            let pack = index_of(&p.name).expect("listed") as u32;
            fresh.extend(p.entries.iter().map(|e| MidxEntry::of(e, pack)));
        }
        fresh.sort_by_key(|e| e.id);
        let merged = match &view {
            None => midx::write(
                &self.packs_dir,
                &names,
                &mut fresh.into_iter().map(Ok::<MidxEntry, io::Error>),
            ),
            Some(v) => {
                let mut remap: Vec<Option<u32>> = Vec::with_capacity(v.midx.names.len());
                for (i, n) in v.midx.names.iter().enumerate() {
                    remap.push(if v.alive(i)? {
                        index_of(n).map(|i| i as u32)
                    } else {
                        None
                    });
                }
                let old = v.midx.iter()?.filter_map(|r| match r {
                    Ok(e) => remap[e.pack as usize].map(|pack| Ok(MidxEntry { pack, ..e })),
                    Err(e) => Some(Err(e)),
                });
                let result = midx::write(
                    &self.packs_dir,
                    &names,
                    &mut Merge::new(old, fresh.into_iter()),
                );
                match result {
                    Err(e) if e.kind() == ErrorKind::InvalidData => {
                        tracing::warn!(error = %e, "damaged multi-pack index; rebuilding it from every pack's own index");
                        self.write_midx_from_packs(&names)
                    }
                    r => r,
                }
            }
        };
        merged?;
        self.rescan()?;
        self.trim_published();
        Ok(())
    }

    /// Write a multi-pack index over `names` (sorted) from their own indexes.
    fn write_midx_from_packs(&self, names: &[String]) -> io::Result<()> {
        let mut entries = Vec::new();
        let mut kept = Vec::new();
        for name in names {
            if let Some(p) = self.load_pack(name)? {
                kept.push((p.name, p.entries));
            }
        }
        let names: Vec<String> = kept.iter().map(|(n, _)| n.clone()).collect();
        for (i, (_, es)) in kept.into_iter().enumerate() {
            entries.extend(es.iter().map(|e| MidxEntry::of(e, i as u32)));
        }
        entries.sort_by_key(|e| e.id);
        midx::write(
            &self.packs_dir,
            &names,
            &mut entries.into_iter().map(Ok::<MidxEntry, io::Error>),
        )
    }

    fn open_pack(&self, name: &str) -> io::Result<Arc<PackFile>> {
        if let Some(f) = self.files.lock().get(name) {
            return Ok(f.clone());
        }
        let f = Arc::new(PackFile::open(self.pack_path(name, "pack"))?);
        self.files.lock().put(name.to_string(), f.clone());
        Ok(f)
    }

    /// Stored bytes of a published packed object; `None` when not in a pack.
    fn read_packed(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        // Another try after a rescan: gc may have repacked it meanwhile, or
        // the multi-pack index was wrong.
        for _ in 0..3 {
            let Some(loc) = self.lookup_pack(id, true)? else {
                return Ok(None);
            };
            let f = match self.open_pack(&loc.pack) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.rescan()?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !loc.via_midx {
                return f.read_entry(loc.offset, loc.len).map(Some);
            }
            match f.read_record(id, loc.offset, loc.len)? {
                Some(bytes) => return Ok(Some(bytes)),
                None => {
                    let view = self.packs.read().midx.clone();
                    if let Some(v) = view {
                        let e = io::Error::new(
                            ErrorKind::InvalidData,
                            format!("its entry for {id} does not match pack {}", loc.pack),
                        );
                        self.midx_failed(&v, &e);
                    }
                }
            }
        }
        Ok(None)
    }

    /// Remove `ids`: loose files, and from every pack holding one (after a
    /// crash mid-repack an object can be in two), rewritten without them.
    /// With `thrifty` (gc's sweep), a pack is rewritten only where that pays:
    /// more than [`REPACK_UNUSED`] of its bytes go, or it keeps at most
    /// [`REPACK_SMALL`]; the others keep their objects (`false` for them).
    /// With `dry_run` (gc's only) nothing is removed or rewritten: `true`
    /// for what would be.
    fn remove_from_packs(
        &self,
        ids: &[ObjectId],
        thrifty: bool,
        dry_run: bool,
    ) -> io::Result<Vec<bool>> {
        let mut out = vec![false; ids.len()];
        for (i, id) in ids.iter().enumerate() {
            let path = self.path_of(id);
            let gone = if dry_run {
                fs::symlink_metadata(&path).map(|_| ())
            } else {
                crate::sys::remove_nofollow(&path)
            };
            match gone {
                Ok(()) => out[i] = true,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.rescan()?;
        let doomed: HashSet<ObjectId> = ids.iter().copied().collect();
        let (mut affected, view) = {
            let packs = self.packs.read();
            let tail: Vec<Arc<Pack>> = packs
                .by_name
                .values()
                .filter(|p| p.entries.iter().any(|e| doomed.contains(&e.id)))
                .cloned()
                .collect();
            (tail, packs.midx.clone())
        };
        if let Some(v) = view {
            let mut names = BTreeSet::new();
            for id in ids {
                for e in v.midx.lookup(id)? {
                    if v.alive(e.pack as usize)? {
                        names.insert(v.midx.names[e.pack as usize].clone());
                    }
                }
            }
            for name in names {
                if let Some(p) = self.load_pack(&name)? {
                    affected.push(Arc::new(p));
                }
            }
        }
        let (rewrite, kept): (Vec<_>, Vec<_>) = affected
            .into_iter()
            .partition(|p| !thrifty || worth_rewriting(p, &doomed));
        for pack in &rewrite {
            if !dry_run {
                self.rewrite(std::slice::from_ref(pack), &doomed)?;
            }
            for (i, id) in ids.iter().enumerate() {
                if pack.entries.iter().any(|e| e.id == *id) {
                    out[i] = true;
                }
            }
        }
        // Still there, in a pack kept whole.
        for pack in &kept {
            for (i, id) in ids.iter().enumerate() {
                if pack.entries.iter().any(|e| e.id == *id) {
                    out[i] = false;
                }
            }
        }
        if !rewrite.is_empty() && !dry_run {
            self.rebuild_midx_or_warn();
        }
        Ok(out)
    }

    /// Write the objects of `packs` that are not in `doomed` (each once) into
    /// new packs, a new one whenever one is full, publish them, then delete
    /// the old packs: a crash leaves an object twice, never nowhere. Returns
    /// how many packs it wrote.
    fn rewrite(&self, packs: &[Arc<Pack>], doomed: &HashSet<ObjectId>) -> io::Result<usize> {
        let mut written = 0;
        let mut current: Option<PackWriter> = None;
        let result = (|| {
            let mut seen = HashSet::new();
            for pack in packs {
                let mut old = None;
                for e in &pack.entries {
                    if doomed.contains(&e.id) || !seen.insert(e.id) {
                        continue;
                    }
                    let old = match &old {
                        Some(f) => f,
                        None => old.insert(self.open_pack(&pack.name)?),
                    };
                    let w = match &mut current {
                        Some(w) => w,
                        None => current.insert(PackWriter::create(&self.packs_dir)?),
                    };
                    w.append(&e.id, &old.read_entry(e.offset, e.len)?)?;
                    if w.is_full() {
                        w.sync_data()?;
                        self.publish(w)?;
                        current = None;
                        written += 1;
                    }
                }
            }
            if let Some(w) = &mut current {
                w.sync_data()?;
                self.publish(w)?;
                current = None;
                written += 1;
            }
            Ok::<(), io::Error>(())
        })();
        if let Err(e) = result {
            if let Some(w) = current {
                w.discard();
            }
            return Err(e);
        }
        for pack in packs {
            crate::sys::remove_nofollow(&self.pack_path(&pack.name, "idx"))?;
            self.files.lock().pop(&pack.name);
            match crate::sys::remove_nofollow(&self.pack_path(&pack.name, "pack")) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        fsync_dir(&self.packs_dir)?;
        Ok(written)
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

impl ObjectBackend for LocalBackend {
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        let pending = self
            .pending
            .lock()
            .get(id)
            .map(|p| (p.file.clone(), p.offset, p.len));
        // Read without holding the lock.
        if let Some((file, offset, len)) = pending {
            // Its record may still be in the writer's buffer.
            if let Some(w) = &mut self.writing.lock().current
                && Arc::ptr_eq(w.file(), &file)
            {
                w.flush()?;
            }
            return read_entry(&file, offset, len).map(Some);
        }
        // Most objects are packed: a pack the view knows of is looked up in
        // memory before a loose file is tried (which costs a failed open for
        // every packed object).
        if self.find_published(id)?.is_some()
            && let Some(bytes) = self.read_packed(id)?
        {
            return Ok(Some(bytes));
        }
        // A loose object (written by a storefs before 2026-12-05 or before
        // packs), or a pack published since the view's last scan.
        match File::open(self.path_of(id)) {
            // Past the page cache when it does not hold the file: the object
            // is decompressed from this buffer and dropped, and what is
            // kept of it is the decompressed chunk (a cold `cat` of 256
            // MiB: 10% less of the daemon's CPU, none of it in page cache
            // bookkeeping for pages nobody reads again).
            Ok(f) => {
                let len = f.metadata()?.len();
                let len = usize::try_from(len).map_err(|_| io::Error::other("object too large"))?;
                crate::sys::read_cold(&f, 0, len).map(Some)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => self.read_packed(id),
            Err(e) => Err(e),
        }
    }

    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        // Callers ask `contains` first; this catches another thread of this
        // process that wrote it since, without a look at the disk (a copy
        // published meanwhile, by another process or by this one's `sync`
        // into the multi-pack index, is written again: a duplicate costs
        // space, never a loss; a gc that merges the packs keeps one).
        if self.known_in_memory(id) {
            return Ok(());
        }
        self.write_packed(id, bytes)
    }

    fn contains(&self, id: &ObjectId) -> io::Result<bool> {
        // Packs first (the view, then a rescan if the directory changed);
        // loose only then: written by a storefs from before 2026-12-05
        // (large) or before packs (any size).
        Ok(self.known_in_memory(id)
            || self.lookup_pack(id, false)?.is_some()
            || self.loose_exists(id)?)
    }

    /// Every object is written to a pack, and an object of at most
    /// [`PACKED_ALWAYS`] bytes (which compresses to at most
    /// [`PACK_OBJECT_MAX`], zstd's bound) was never written loose by any
    /// storefs since packs. It is looked up only among this process's
    /// pending objects and its view of the packs (the tail in memory, the
    /// multi-pack index through its sparse index and one small read), which
    /// the writer's lease refreshed
    /// ([`Store::write_lease`](super::Store::write_lease)) and its own
    /// publishing keeps current. For each new small file of a snapshot that
    /// saves a negative look-up in a fan-out directory and an `fstat` of the
    /// packs directory. Missed, and written again: a small object a store
    /// from before packs holds loose, and one another process published
    /// since the lease (space only; a gc that merges packs keeps one copy).
    /// A larger one may be loose in a store written before 2026-12-05, and
    /// is looked for there too ([`ObjectBackend::contains`]).
    fn contains_for_write(&self, id: &ObjectId, len: usize) -> io::Result<bool> {
        if len > PACKED_ALWAYS {
            return self.contains(id);
        }
        Ok(self.known_in_memory(id) || self.find_published(id)?.is_some())
    }

    fn wants_sync(&self, min_objects: usize) -> bool {
        let pending = self.pending.lock().len();
        let indexed = self.packs.read().midx.as_ref().map_or(0, |v| v.midx.len());
        pending >= min_objects.max((indexed / 8) as usize)
    }

    fn sync(&self) -> io::Result<()> {
        let _one = self.syncing.lock();
        let mut packs: Vec<PackWriter> = {
            let mut writing = self.writing.lock();
            // Under the lock: a reader of a pending object flushes only the
            // current writer (a full one was flushed when it filled).
            if let Some(w) = &mut writing.current {
                w.flush()?;
            }
            let mut v = std::mem::take(&mut writing.full);
            v.extend(writing.current.take());
            v
        };
        // Packs not published when this returns go back for the next sync.
        let requeue = |rest: Vec<PackWriter>| self.writing.lock().full.extend(rest);
        if !packs.is_empty() {
            // One syncfs makes every pending pack's data durable. A failure
            // is reported, not retried; all stays pending.
            let dir = File::open(&self.dir)?;
            if let Err(e) = rustix::fs::syncfs(&dir) {
                requeue(packs);
                return Err(e.into());
            }
        }
        let published_any = !packs.is_empty();
        while let Some(mut w) = packs.pop() {
            match self.publish(&mut w) {
                Ok(name) => {
                    let pack = Pack {
                        name,
                        mtime: SystemTime::now(),
                        entries: w.entries().to_vec(),
                    };
                    let mut pending = self.pending.lock();
                    let mut published = self.packs.write();
                    for e in &pack.entries {
                        pending.remove(&e.id);
                    }
                    published.add(pack);
                }
                Err(e) => {
                    packs.push(w);
                    requeue(packs);
                    return Err(e);
                }
            }
        }
        if published_any {
            self.maybe_rebuild_midx();
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
        self.rescan()?;
        let view = {
            let packs = self.packs.read();
            out.extend(packs.objects.keys());
            packs.midx.clone()
        };
        if let Some(v) = view {
            let mut midx_ids = Vec::new();
            let read = v.midx.iter()?.try_for_each(|e| {
                let e = e?;
                if v.alive(e.pack as usize)? {
                    midx_ids.push(e.id);
                }
                Ok::<(), io::Error>(())
            });
            match read {
                Ok(()) => out.extend(midx_ids),
                Err(e) => {
                    // Every pack is in the tail once it is set aside.
                    self.midx_failed(&v, &e);
                    out.extend(self.packs.read().objects.keys());
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// A process that has only scanned quickly so far scans quickly again
    /// (and checks again each pack of the multi-pack index it uses); one
    /// that listed the directory lists it again.
    fn refresh(&self) -> io::Result<()> {
        let (scanned, quick) = {
            let packs = self.packs.read();
            (packs.scanned, packs.quick)
        };
        if scanned.is_none() || quick {
            self.rescan_quick()
        } else {
            self.rescan()
        }
    }

    /// A published object where it lies: a range of its pack (the pack's
    /// shared descriptors) or a loose file (its own descriptor). A pending
    /// one is read whole (its record may still be in the writer's buffer).
    /// The pack's record header is not read here: a wrong location gives
    /// frames that fail their checks, and the caller then reads the object
    /// whole, which checks it ([`ObjectBackend::read`]).
    fn open_stored(&self, id: &ObjectId) -> io::Result<Option<Stored>> {
        if self.pending.lock().contains_key(id) {
            return Ok(self.read(id)?.map(Stored::Bytes));
        }
        if let Some(loc) = self.find_published(id)? {
            match self.open_pack(&loc.pack) {
                Ok(pack) => {
                    return Ok(Some(Stored::File {
                        file: StoredFile::Pack(pack),
                        offset: loc.offset,
                        len: u64::from(loc.len),
                    }));
                }
                // Removed by gc since the view's scan: the whole read rescans.
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        match File::open(self.path_of(id)) {
            Ok(file) => {
                let len = file.metadata()?.len();
                Ok(Some(Stored::File {
                    file: StoredFile::Own(file),
                    offset: 0,
                    len,
                }))
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Ok(self.read_packed(id)?.map(Stored::Bytes))
            }
            Err(e) => Err(e),
        }
    }

    /// A loose file, or a range of a pack (published objects only).
    fn locate(&self, id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>> {
        let loose = self.path_of(id);
        if let Ok(m) = fs::symlink_metadata(&loose) {
            return Ok(Some((loose, 0, m.len())));
        }
        Ok(self.lookup_pack(id, true)?.map(|loc| {
            (
                self.pack_path(&loc.pack, "pack"),
                loc.offset,
                u64::from(loc.len),
            )
        }))
    }

    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>> {
        let qdir = self.dir.with_file_name("quarantine");
        fs::create_dir_all(&qdir)?;
        let dest = qdir.join(id.to_hex());
        match crate::sys::rename_nofollow(&self.path_of(id), &dest) {
            Ok(()) => {
                fsync_dir(&qdir)?;
                return Ok(Some(dest));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Packed: copy its bytes out durably, then drop it from its pack.
        let Some(bytes) = self.read_packed(id)? else {
            return Ok(None);
        };
        write_store_file(&dest, &bytes, 0o444, true)?;
        self.remove_many(&[*id])?;
        Ok(Some(dest))
    }

    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>> {
        match fs::symlink_metadata(self.path_of(id)) {
            Ok(m) => Ok(Some((m.len(), m.modified()?))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let Some(loc) = self.lookup_pack(id, true)? else {
                    return Ok(None);
                };
                let mtime = match loc.mtime {
                    Some(t) => t,
                    None => match fs::metadata(self.pack_path(&loc.pack, "pack")) {
                        Ok(m) => m.modified()?,
                        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                        Err(e) => return Err(e),
                    },
                };
                Ok(Some((u64::from(loc.len), mtime)))
            }
            Err(e) => Err(e),
        }
    }

    fn remove(&self, id: &ObjectId) -> io::Result<bool> {
        Ok(self.remove_many(&[*id])?[0])
    }

    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>> {
        self.remove_from_packs(ids, false, false)
    }

    fn sweep(&self, ids: &[ObjectId], dry_run: bool) -> io::Result<Vec<bool>> {
        self.remove_from_packs(ids, true, dry_run)
    }

    fn consolidate(&self, movable: &dyn Fn(&ObjectId) -> bool) -> io::Result<(usize, usize)> {
        let mut small: Vec<Arc<Pack>> = Vec::new();
        self.each_pack(&mut |p| {
            let bytes: u64 = p.entries.iter().map(|e| u64::from(e.len)).sum();
            if bytes < PACK_TARGET_SIZE / 2 && p.entries.iter().all(|e| movable(&e.id)) {
                small.push(p);
            }
        })?;
        if small.len() < MERGE_PACKS {
            return Ok((0, 0));
        }
        small.sort_by(|a, b| a.name.cmp(&b.name));
        let written = self.rewrite(&small, &HashSet::new())?;
        self.rebuild_midx_or_warn();
        Ok((small.len(), written))
    }

    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut out = Vec::new();
        let mut stale = |path: PathBuf, writer_gone: bool| -> io::Result<()> {
            let m = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            if !writer_gone && m.modified()? >= cutoff {
                return Ok(());
            }
            if !dry_run {
                match crate::sys::remove_nofollow(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            out.push((path, m.len()));
            Ok(())
        };
        for fan in read_dir_if_exists(&self.dir)? {
            let fan = fan?;
            if !fan.file_type()?.is_dir() {
                continue;
            }
            let packs = fan.file_name() == PACKS;
            for ent in fs::read_dir(fan.path())? {
                let name = ent?.file_name();
                let Some(name) = name.to_str() else { continue };
                let temp = name.starts_with('.') && name.ends_with(".tmp");
                // A pack whose index was never written: an interrupted sync.
                let orphan = packs
                    && name
                        .strip_suffix(".pack")
                        .is_some_and(|n| !self.pack_path(n, "idx").exists());
                if (temp && (packs || name.starts_with(".obj."))) || orphan {
                    // A temp file whose writer is gone is garbage whatever its age.
                    let gone = temp && super::atomic::temp_writer_gone(name);
                    stale(fan.path().join(name), gone)?;
                }
            }
        }
        Ok(out)
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

fn read_dir_if_exists(
    dir: &Path,
) -> io::Result<Box<dyn Iterator<Item = io::Result<fs::DirEntry>>>> {
    match fs::read_dir(dir) {
        Ok(rd) => Ok(Box::new(rd)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Box::new(std::iter::empty())),
        Err(e) => Err(e),
    }
}
