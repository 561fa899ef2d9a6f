//! Where compressed objects live, behind three traits split by concern:
//! [`ObjectRead`] (what every reader needs), [`ObjectWrite`] (what a writer
//! needs: writes, `sync`) and [`ObjectMaintenance`] (verify, gc and
//! quarantine); [`ObjectBackend`] is all three, what a [`Store`] holds.
//! [`LocalBackend`] ([`local`]) is a directory; a lazy mount's backend
//! ([`crate::remote::LazyBackend`]) wraps one and fetches what it lacks.
//!
//! No method has a default body: a backend that wraps another (the lazy
//! one) cannot leave one to a default that does less than the inner
//! backend's (as `open_stored` once was, reading fetched objects whole), and
//! the compiler says so when a method is added.
//!
//! [`Store`]: crate::store::Store

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::id::ObjectId;
use super::pack::PackFile;

mod local;

pub use local::{LocalBackend, MAX_LOOSE_FILE, REPACK_UNUSED, SYNC_OBJECTS};
#[cfg(test)]
pub use local::{MIDX_TAIL_PACKS, PUBLISHED};

/// An object as [`ObjectRead::read_for_use`] hands it over.
pub enum Got {
    /// The stored (compressed) bytes, still to be verified.
    Stored(Vec<u8>),
    /// The content, decompressed and found to hash to the id.
    Verified(Vec<u8>),
}

/// Where a partial read finds an object's stored bytes
/// ([`ObjectRead::open_stored`]).
pub enum Stored {
    /// `len` stored bytes at `offset` in `file` (a loose object: offset 0).
    File {
        file: StoredFile,
        offset: u64,
        len: u64,
    },
    /// All the stored bytes, read already (an object the backend found only
    /// by reading it: in a pack published since its last look).
    Bytes(Vec<u8>),
}

/// The file a [`Stored::File`] lies in.
pub enum StoredFile {
    /// A loose object's file, opened for this read only.
    Own(File),
    /// A pack, its descriptors shared with the process's other reads: its
    /// flags and read-ahead advice are left as they are.
    Pack(Arc<PackFile>),
    /// A pack this process is still writing (its objects pending until
    /// `sync`: just written, or just fetched by a lazy mount), the writer's
    /// own descriptor: read through the page cache only, since the flags of
    /// a descriptor being written to are not to be touched.
    Pending(Arc<File>),
}

impl StoredFile {
    /// The descriptor reads through the page cache take.
    pub fn file(&self) -> &File {
        match self {
            StoredFile::Own(f) => f,
            StoredFile::Pack(p) => p.file(),
            StoredFile::Pending(f) => f,
        }
    }

    /// `n` bytes at `at`, past the page cache unless it holds them
    /// ([`crate::sys::read_cold`]); a pending pack's through it.
    pub fn read_cold(&self, at: u64, n: usize) -> io::Result<Vec<u8>> {
        match self {
            StoredFile::Own(f) => crate::sys::read_cold(f, at, n),
            StoredFile::Pack(p) => p.read_cold(at, n),
            StoredFile::Pending(f) => crate::sys::read_plain(f, at, n),
        }
    }
}

/// Reading objects. Implementations must be safe to call from many threads.
pub trait ObjectRead: Send + Sync {
    /// The stored (compressed) bytes of `id`, or `None` when the backend lacks it.
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>>;
    /// What [`Store::get_object`](super::Store::get_object) reads: the stored
    /// bytes, or the content when the backend verified it itself on the way
    /// in (a fetch from a remote), so it is not decompressed and hashed twice.
    /// A backend that does not verify: [`read`](ObjectRead::read), as
    /// [`Got::Stored`].
    fn read_for_use(&self, id: &ObjectId) -> io::Result<Option<Got>>;
    /// Whether `id` is stored.
    fn contains(&self, id: &ObjectId) -> io::Result<bool>;
    /// For a read of part of `id`: where its stored bytes are, so only the
    /// part needed is read ([`Stored`]); `None` when it is not stored here or
    /// the backend cannot say (the caller then reads it whole).
    fn open_stored(&self, id: &ObjectId) -> io::Result<Option<Stored>>;
    /// Where the stored bytes of `id` are on the local disk (file, offset,
    /// length), for a backend that keeps them there; `None` otherwise.
    fn locate(&self, id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>>;
    /// A hint that `ids` will probably be read soon (the next chunks of a file
    /// being read). A backend that fetches from far away may start fetching
    /// them in the background; one that has everything ignores it.
    fn prefetch(&self, ids: &[ObjectId]);
}

/// Writing objects. `write` must never leave a partial object under `id`.
pub trait ObjectWrite: Send + Sync {
    /// Store `bytes` under `id`, atomically. Storing an id that exists is a no-op.
    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()>;
    /// [`contains`](ObjectRead::contains) asked before writing an object of
    /// `len` bytes (before compression). A backend may leave out the places
    /// such an object is never written to; an answer of `false` for an
    /// object stored elsewhere only costs a second copy, never a loss.
    fn contains_for_write(&self, id: &ObjectId, len: usize) -> io::Result<bool>;
    /// Make every completed `write` durable (names included).
    fn sync(&self) -> io::Result<()>;
    /// Whether the writes not yet synced hold enough memory that a writer of
    /// many objects (a snapshot) should `sync` before writing more: at
    /// least `min_objects` of them (see [`SYNC_OBJECTS`] and
    /// `sync_if_many` of `dyn ObjectBackend`).
    fn wants_sync(&self, min_objects: usize) -> bool;
    /// Drop what this process believes is stored and look again. Writers call
    /// it once they hold the gc write lease (gc cannot remove anything until
    /// it is released), so `contains` never vouches for an object gc removed
    /// earlier, which a checkpoint would then name without it existing.
    fn refresh(&self) -> io::Result<()>;
}

/// What verify, gc and quarantine do to the objects.
pub trait ObjectMaintenance: Send + Sync {
    /// Every stored id (for verify and gc).
    fn list(&self) -> io::Result<Vec<ObjectId>>;
    /// Stored size and modification time of `id` (for gc), or `None` when absent.
    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>>;
    /// Move a bad object aside so it is no longer served; returns where it went.
    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>>;
    /// Delete `id` (gc only); returns whether it was there.
    fn remove(&self, id: &ObjectId) -> io::Result<bool>;
    /// Delete many objects at once (gc only); whether each was there. A
    /// backend that packs objects rewrites each pack once, not once per object.
    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>>;
    /// gc's sweep of unreachable objects: [`remove_many`](Self::remove_many),
    /// except that a backend that packs objects may leave an object in a
    /// pack whose rewrite without it would copy many times what it frees
    /// (`false` for it: a later sweep drops it once more of its pack is
    /// unreachable). With `dry_run` nothing is removed: what a sweep would
    /// remove.
    fn sweep(&self, ids: &[ObjectId], dry_run: bool) -> io::Result<Vec<bool>>;
    /// Merge many small packs into few (gc only, while no writer publishes).
    /// Only packs whose every object is `movable` take part: moving an object
    /// gives it a new modification time, which must not extend the grace of
    /// one that nothing reaches. Returns (packs merged, packs written).
    fn consolidate(&self, movable: &dyn Fn(&ObjectId) -> bool) -> io::Result<(usize, usize)>;
    /// Temp files of writes that never finished (a crash), last modified before
    /// `cutoff` or written by a process that is gone (whatever their age):
    /// their paths and sizes. Removed unless `dry_run`.
    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>>;
}

/// Storage of compressed object bytes by id: reads, writes and maintenance
/// ([`ObjectRead`], [`ObjectWrite`], [`ObjectMaintenance`]). Every type with
/// all three is one.
pub trait ObjectBackend: ObjectRead + ObjectWrite + ObjectMaintenance {}

impl<T: ObjectRead + ObjectWrite + ObjectMaintenance + ?Sized> ObjectBackend for T {}

impl dyn ObjectBackend + '_ {
    /// [`ObjectWrite::sync`] if [`ObjectWrite::wants_sync`]: what a writer
    /// of many objects calls as it goes.
    pub fn sync_if_many(&self, min_objects: usize) -> io::Result<()> {
        if self.wants_sync(min_objects) {
            self.sync()?;
        }
        Ok(())
    }
}
