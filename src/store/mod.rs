//! Layer 1: the content-addressed store. Objects (zstd, named by the sha256 of
//! their uncompressed bytes, verified on every read), trees, checkpoints, refs,
//! fork heads, the archive index, the registry of live mounts, and the
//! [`progress::Progress`] callback that long operations above report through.
//! Pure library: no FUSE here, no terminal output.

pub mod acl;
mod archives;
mod atomic;
mod backend;
mod cache;
mod checkpoint;
pub mod chunk;
pub mod codec;
mod forks;
pub mod framed;
mod gc;
mod gitindex;
mod id;
pub mod intmap;
pub mod merge;
pub(crate) mod midx;
pub mod model;
pub mod mounts;
mod pack;
pub mod progress;
pub mod readahead;
#[doc(hidden)]
pub mod testing;
mod tree;
mod verify;

use std::cell::RefCell;
use std::fs;
use std::io::{self, ErrorKind, Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use archives::ArchiveRecord;
pub use atomic::{
    MAX_REF_FILE, MAX_SMALL_RECORD, fsync_dir, list_store_dir, list_store_dir_if_exists,
    open_store_file, read_store_file, read_store_file_capped, write_file, write_store_file,
};
pub use backend::{
    Got, LocalBackend, MAX_LOOSE_FILE, ObjectBackend, ObjectMaintenance, ObjectRead, ObjectWrite,
    REPACK_UNUSED, SYNC_OBJECTS, Stored, StoredFile,
};
pub use cache::ChunkCache;
pub use checkpoint::{
    Checkpoint, GitSource, Source, Stats, Submodule, canonical_origin, check_origin, format_time,
};
pub use forks::ForkHead;
pub use gc::{GcOptions, GcReport, WriteLease, parse_duration};
pub use gitindex::GitRecord;
pub use id::{ObjectId, is_hex, to_hex};
pub use pack::{PackEntry, decode_index, encode_index, max_index_len};
#[cfg(test)]
pub(crate) use tree::flatten;
pub use tree::{Content, DecodeError, Entry, Extent, Kind, Tree};
pub use verify::{Bad, Problem, VerifyReport};

/// The file whose presence makes a directory a store.
pub const MARKER: &str = "storefs.json";
/// The largest object the store will decompress (a hostile object cannot make us
/// allocate more). Chunks are at most 4 MiB; trees of huge directories are larger.
pub const MAX_OBJECT_SIZE: u64 = 1 << 30;
/// The largest checkpoint record the store writes, reads or receives (4
/// MiB: a record is a root id, parents, a message and, for an imported git
/// commit, its submodule list; tens of thousands of submodules fit). A
/// larger one is refused before it is read whole, so a hostile record
/// cannot cost every later `log` its size in memory.
pub const MAX_CHECKPOINT_RECORD: u64 = 4 << 20;
/// Why a checkpoint record of `size` bytes (`what` names it) is refused:
/// it is over [`MAX_CHECKPOINT_RECORD`]; `None` when it is not.
pub fn record_too_large(size: u64, what: &str) -> Option<String> {
    (size > MAX_CHECKPOINT_RECORD).then(|| {
        format!(
            "{what} is {size} bytes, over the {} MiB a checkpoint record may have; refused unread",
            MAX_CHECKPOINT_RECORD >> 20
        )
    })
}
/// The fewest hex digits a checkpoint id prefix may have (as git's
/// abbreviations): a shorter one would match ids by accident.
pub const MIN_ID_PREFIX: usize = 4;
/// zstd level for objects: fast to write, fast to read.
pub const ZSTD_LEVEL: i32 = 3;
/// The page size reads are rounded to (a partial read's table read).
const PAGE: u64 = 4096;

/// Everything that can go wrong in the store, each naming the thing involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "{0} is not a storefs store (no {MARKER}); pass an empty or new directory with --store, or point at an existing store"
    )]
    NotAStore(PathBuf),
    /// The fix (`storefs init`) is the CLI's to name (`cli/hint.rs`), as for
    /// every message of this layer that a command fixes.
    #[error("no store at {0}")]
    NoStore(PathBuf),
    #[error(
        "cannot read the store {0}: permission denied (another user's store, or its mode keeps you out); run as the user who owns it, or pass a store of your own with --store DIR"
    )]
    NoAccess(PathBuf),
    #[error("object {id} is missing from the store ({context})")]
    Missing { id: ObjectId, context: String },
    #[error("object {id} is corrupt ({detail})")]
    Corrupt { id: ObjectId, detail: String },
    /// A checkpoint record over [`MAX_CHECKPOINT_RECORD`]: not storefs's
    /// (its records stay far below), and not an object `verify` can
    /// quarantine.
    #[error(
        "checkpoint {id}: {detail}; storefs never writes a record that large, so it came from elsewhere: remove STORE/checkpoints/{id}.json and the ref or fork that names it"
    )]
    RecordTooLarge { id: ObjectId, detail: String },
    #[error("no checkpoint, ref or fork named '{0}'")]
    UnknownTarget(String),
    #[error(
        "no ref or fork named '{0}', and it is too short for a checkpoint id prefix (give at least 4 hex digits)"
    )]
    PrefixTooShort(String),
    #[error("'{prefix}' is ambiguous: {count} ids start with it ({examples}); give more digits")]
    Ambiguous {
        prefix: String,
        count: usize,
        examples: String,
    },
    #[error("bad ref name '{0}': use letters, digits, '.', '_' and '-', not '.' or '..'")]
    BadRefName(String),
    /// `git:PREFIX` names no imported git commit (or is not 4 to 64 hex digits).
    #[error("no imported git commit starts with '{0}' (git:COMMIT takes 4 to 64 hex digits)")]
    NoGitCommit(String),
    /// The store contradicts itself (what, where): a damaged record or tree
    /// that a verify finds.
    #[error("{0}")]
    Damaged(String),
    /// gc refused to sweep: what it could not read, and why.
    #[error("{what}: {detail}; gc deletes nothing while it cannot tell what is reachable")]
    GcBlind { what: String, detail: String },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Refs by name, and the checkpoint each names ([`Store::list_refs`]).
pub type Refs = Vec<(String, ObjectId)>;

/// Attach the path to an io::Error.
pub trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A store on disk: `objects/`, `checkpoints/`, `refs/`, `mounts/`, `logs/`.
pub struct Store {
    root: PathBuf,
    backend: Arc<dyn ObjectBackend>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.root.display())
    }
}

/// Whether `root` holds the store's marker file; a store this user may
/// not look into is [`Error::NoAccess`], not "not a store".
fn has_marker(root: &Path) -> Result<bool> {
    match root.join(MARKER).try_exists() {
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Err(Error::NoAccess(root.into())),
        r => Ok(r.unwrap_or(false)),
    }
}

const SUBDIRS: &[&str] = &[
    "objects",
    "checkpoints",
    "refs",
    "mounts",
    "logs",
    "archives",
];

/// The version of the store's format that `storefs.json` records
/// (docs/format.md); `storefs --version` prints it.
pub const FORMAT_VERSION: u32 = 1;

/// The environment variable naming stores the caller trusts although another
/// user owns them or others may write them (colon-separated paths, or `*` for
/// every store), as git's `safe.directory`: see [`Store::open`].
pub const SAFE_STORES_ENV: &str = "STOREFS_SAFE_STORES";

impl Store {
    /// Open the store at `root`, creating it if the directory is missing or
    /// empty. An empty directory another user owns is never made a store (its
    /// owner could plant symlinks in it or read what is stored).
    pub fn open_or_create(root: &Path) -> Result<Store> {
        let root = absolute(root)?;
        if !has_marker(&root)? {
            match fs::read_dir(&root) {
                Ok(mut rd) => {
                    if rd.next().is_some() {
                        return Err(Error::NotAStore(root));
                    }
                    let owner = fs::metadata(&root).at(&root)?;
                    use std::os::unix::fs::MetadataExt;
                    if owner.uid() != crate::sys::euid() {
                        return Err(Error::Invalid(format!(
                            "{} is an empty directory owned by uid {}, not by you (uid {}): storefs makes a store only of a directory of your own; pass another --store",
                            root.display(),
                            owner.uid(),
                            crate::sys::euid()
                        )));
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    fs::create_dir_all(&root).at(&root)?;
                }
                Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                    return Err(Error::NoAccess(root));
                }
                Err(e) => return Err(e).at(&root),
            }
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).at(&root)?;
            for d in SUBDIRS {
                let p = root.join(d);
                match fs::DirBuilder::new().mode(0o755).create(&p) {
                    Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(e).at(&p),
                    _ => {}
                }
            }
            let marker = serde_json::json!({"format": "storefs", "version": FORMAT_VERSION});
            let path = fs::canonicalize(&root).at(&root)?.join(MARKER);
            write_store_file(&path, format!("{marker}\n").as_bytes(), 0o644, true).at(&path)?;
        }
        Self::open(&root)
    }

    /// Open an existing store to write in it (or delete from it); a missing
    /// one is an error. The store's root and top directories must be owned
    /// by the caller, not symlinks, and not writable by others who can reach
    /// them, unless [`SAFE_STORES_ENV`] names the store: otherwise another
    /// user could plant a symlink where the caller (root, say) will write.
    /// The root is resolved once (its own path may lead through symlinks);
    /// every file inside it is then opened without following any.
    pub fn open(root: &Path) -> Result<Store> {
        let store = Self::open_read_only(root)?;
        if !is_trusted(&store.root) {
            check_ownership(&store.root)?;
        }
        Ok(store)
    }

    /// Open an existing store only to read it: no ownership check (reading
    /// a store another user owns is that user's affair; objects are checked
    /// against their ids whatever the files are).
    pub fn open_read_only(root: &Path) -> Result<Store> {
        let root = absolute(root)?;
        if !has_marker(&root)? {
            return Err(if root.exists() {
                Error::NotAStore(root)
            } else {
                Error::NoStore(root)
            });
        }
        let root = fs::canonicalize(&root).at(&root)?;
        let backend = Arc::new(LocalBackend::new(root.join("objects")));
        Ok(Store { root, backend })
    }

    /// Open an existing store whose objects are served by `backend` instead
    /// of its own `objects/` directory (a lazy mount's fetching backend, which
    /// wraps a [`LocalBackend`] of the same store).
    pub fn open_with_backend(root: &Path, backend: Arc<dyn ObjectBackend>) -> Result<Store> {
        let store = Self::open(root)?;
        Ok(Store {
            root: store.root,
            backend,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn backend(&self) -> &Arc<dyn ObjectBackend> {
        &self.backend
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    // ---- objects ----

    /// Store `data` (compressed) unless an object with its id exists.
    /// Returns the id and the compressed size written (0 when it already existed).
    pub fn put_object(&self, data: &[u8]) -> Result<(ObjectId, u64)> {
        let id = ObjectId::of(data);
        if self
            .backend
            .contains_for_write(&id, data.len())
            .at(&self.object_context())?
        {
            return Ok((id, 0));
        }
        let compressed = compress(data).at(&self.object_context())?;
        self.backend
            .write(&id, &compressed)
            .at(&self.root.join("objects"))?;
        Ok((id, compressed.len() as u64))
    }

    /// Read, decompress and verify an object. `context` names what needed it
    /// (a path), for the error message.
    pub fn get_object(&self, id: &ObjectId, context: &str) -> Result<Vec<u8>> {
        match self.backend.read_for_use(id).at(&self.object_context())? {
            Some(Got::Stored(raw)) => Self::verify_stored(id, &raw),
            Some(Got::Verified(plain)) => Ok(plain),
            None => Err(Error::Missing {
                id: *id,
                context: context.to_string(),
            }),
        }
    }

    /// Check stored bytes (one zstd frame, as `ObjectRead::read` returns
    /// them) against `id`: they must decompress, and the result must hash to
    /// `id`. Returns the object's bytes. Every read of an object goes through
    /// here, local or fetched from a remote.
    pub fn verify_stored(id: &ObjectId, raw: &[u8]) -> Result<Vec<u8>> {
        let corrupt = |detail: String| Error::Corrupt { id: *id, detail };
        let out = decompress(raw).map_err(|e| corrupt(e.to_string()))?;
        let actual = ObjectId::of(&out);
        if actual != *id {
            return Err(corrupt(format!("content hashes to {actual}")));
        }
        Ok(out)
    }

    /// Bytes `range` of object `id`, whose content is `len` bytes long (as
    /// the tree that names it records; `None` for a caller that does not
    /// know, a fork's piece of a base chunk: then the length its stored
    /// length gives if it is stored raw, else its frame table's), reading and
    /// decompressing only the frames of a framed object ([`framed`]) that
    /// the range touches: one small read of its frame table and one of those
    /// frames. Each frame is checked by its zstd content checksum, the table
    /// against the object's stored length and `len`; the object's sha256 is
    /// checked by every whole read ([`Store::get_object`]: sequential reads,
    /// export, verify, push). `None` when the object is not framed, not
    /// readable in part here (a remote object not fetched yet), or anything
    /// about it looks wrong: the caller reads it whole, which reports what
    /// is wrong.
    pub fn read_range(
        &self,
        id: &ObjectId,
        len: Option<u64>,
        range: Range<u64>,
    ) -> Result<Option<Vec<u8>>> {
        let small = |len: u64| len <= framed::FRAME_SIZE as u64 || range.end > len;
        if range.start >= range.end || len.is_some_and(small) {
            return Ok(None);
        }
        let ctx = self.object_context();
        let Some(stored) = self.backend.open_stored(id).at(&ctx)? else {
            return Ok(None);
        };
        match stored {
            Stored::Bytes(raw) => {
                let Some(table) = raw_table(&raw) else {
                    return Ok(None);
                };
                let len = len.unwrap_or_else(|| table.content_len());
                if small(len) {
                    return Ok(None);
                }
                Ok(decode_range(&table, len, range, |r| {
                    Ok(raw
                        .get(r.start as usize..r.end as usize)
                        .map(<[u8]>::to_vec))
                })
                .at(&ctx)?)
            }
            Stored::File {
                file,
                offset,
                len: stored_len,
            } => {
                // Unknown: what it would be stored raw, or at most the stored
                // length (to size the table read; the table then says).
                let known = len.or_else(|| framed::raw_len(stored_len));
                let guess = framed::Guess::of(known.unwrap_or(stored_len), stored_len);
                // Stored raw (content that does not compress), as its length
                // says: the frames are where that puts them, one disk read
                // (past the page cache: the mount's page cache keeps what
                // the kernel asked for).
                if let Some(table) = guess.table_if_raw()
                    && let Some(len) = known
                    && !small(len)
                {
                    let read = |r: Range<u64>| {
                        let n = (r.end - r.start) as usize;
                        file.read_cold(offset + r.start, n).map(Some)
                    };
                    if let Some(out) = decode_range(&table, len, range.clone(), read).at(&ctx)? {
                        return Ok(Some(out));
                    }
                }
                let end = offset + stored_len;
                // The table: the last bytes of the object, from the page
                // where the longest table this store writes would start (a
                // read costs whole pages anyway).
                let tail_at = (end - guess.table_len.min(stored_len)) / PAGE * PAGE;
                let tail_at = tail_at.max(offset);
                // Only the bytes asked for, no read-ahead around them; the
                // table and where the frames probably are fetched together,
                // so the two disk reads overlap. Advice that fails costs
                // only that; a pack's shared descriptor keeps its read-ahead.
                if let StoredFile::Own(f) = &file {
                    let _ = rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::Random);
                }
                let file = file.file();
                let frames = guess.frames(range.clone());
                for (at, n) in [
                    (tail_at, end - tail_at),
                    (offset + frames.start, frames.end - frames.start),
                ] {
                    if let Some(n) = std::num::NonZeroU64::new(n) {
                        let _ =
                            rustix::fs::fadvise(file, at, Some(n), rustix::fs::Advice::WillNeed);
                    }
                }
                let mut tail = vec![0; (end - tail_at) as usize];
                file.read_exact_at(&mut tail, tail_at).at(&ctx)?;
                let Ok(Some(table_len)) = framed::table_len_from_footer(&tail) else {
                    return Ok(None);
                };
                if table_len as u64 > stored_len {
                    return Ok(None);
                }
                if table_len > tail.len() {
                    // Frames smaller than this store writes: one more read.
                    tail = vec![0; table_len];
                    file.read_exact_at(&mut tail, end - table_len as u64)
                        .at(&ctx)?;
                }
                let Ok(table) = framed::parse_table(&tail[tail.len() - table_len..], stored_len)
                else {
                    return Ok(None);
                };
                let len = len.unwrap_or_else(|| table.content_len());
                if small(len) {
                    return Ok(None);
                }
                let read = |r: Range<u64>| {
                    let mut buf = vec![0; (r.end - r.start) as usize];
                    file.read_exact_at(&mut buf, offset + r.start)?;
                    Ok(Some(buf))
                };
                Ok(decode_range(&table, len, range, read).at(&ctx)?)
            }
        }
    }

    /// Tell the backend `ids` will probably be read soon ([`ObjectRead::prefetch`]).
    pub fn prefetch(&self, ids: &[ObjectId]) {
        if !ids.is_empty() {
            self.backend.prefetch(ids);
        }
    }

    pub fn has_object(&self, id: &ObjectId) -> Result<bool> {
        self.backend.contains(id).at(&self.object_context())
    }

    /// Make every object written so far durable.
    pub fn sync_objects(&self) -> Result<()> {
        self.backend.sync().at(&self.object_context())
    }

    /// [`Store::sync_objects`] once the objects written and not yet synced
    /// (at least `min_objects`) hold enough memory: for a writer of many
    /// (snapshot, archive and git import). The store holds each unpublished
    /// object in memory (about 100 bytes); published ones are found through
    /// the multi-pack index on disk. Objects published before the writer's
    /// checkpoint are harmless if it fails (gc removes them; the writer's
    /// write lease keeps gc away meanwhile).
    pub fn sync_objects_if_many(&self, min_objects: usize) -> Result<()> {
        self.backend
            .sync_if_many(min_objects)
            .at(&self.object_context())
    }

    fn object_context(&self) -> PathBuf {
        self.root.join("objects")
    }

    // ---- trees ----

    pub fn put_tree(&self, tree: &Tree) -> Result<(ObjectId, u64)> {
        self.put_object(&tree.encode())
    }

    pub fn get_tree(&self, id: &ObjectId, context: &str) -> Result<Tree> {
        let data = self.get_object(id, context)?;
        Tree::decode(&data).map_err(|e| Error::Corrupt {
            id: *id,
            detail: e.to_string(),
        })
    }

    /// Store a root tree: the single entry "" describing the root directory.
    pub fn put_root(&self, mut root: Entry) -> Result<(ObjectId, u64)> {
        root.name.clear();
        self.put_tree(&Tree {
            entries: vec![root],
        })
    }

    /// The root directory entry of a checkpoint.
    pub fn root_entry(&self, ckpt: &Checkpoint) -> Result<Entry> {
        let t = self.get_tree(&ckpt.root, "root")?;
        match t.entries.into_iter().next() {
            Some(e) if e.kind == Kind::Dir => Ok(e),
            _ => Err(Error::Corrupt {
                id: ckpt.root,
                detail: "root tree does not hold one directory".into(),
            }),
        }
    }

    /// The entry at `path` (slash-separated, relative to the root; "" or "/" is the
    /// root itself), or `None` when nothing is there.
    pub fn lookup_path(&self, ckpt: &Checkpoint, path: &[u8]) -> Result<Option<Entry>> {
        let mut cur = self.root_entry(ckpt)?;
        for comp in path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            let Some(tid) = cur.tree_id() else {
                return Ok(None);
            };
            let tree = self.get_tree(&tid, &String::from_utf8_lossy(path))?;
            match tree.get(comp) {
                Some(e) => cur = e.clone(),
                None => return Ok(None),
            }
        }
        Ok(Some(cur))
    }

    /// Write a regular file's bytes (holes as zeros) to `out`, verifying every chunk.
    pub fn copy_content(&self, entry: &Entry, out: &mut dyn Write, path: &str) -> Result<()> {
        let Content::Extents(extents) = &entry.content else {
            return Ok(());
        };
        let zeros = [0u8; 64 * 1024];
        let io_err = |source| Error::Io {
            path: PathBuf::from(path),
            source,
        };
        for ext in extents {
            match &ext.id {
                Some(id) => out.write_all(&self.get_object(id, path)?).map_err(io_err)?,
                None => {
                    let mut left = ext.len;
                    while left > 0 {
                        let n = left.min(zeros.len() as u64) as usize;
                        out.write_all(&zeros[..n]).map_err(io_err)?;
                        left -= n as u64;
                    }
                }
            }
        }
        Ok(())
    }

    // ---- checkpoints ----

    /// Publish a checkpoint: objects made durable first, then the record.
    /// Its origin, if any, must be a canonical absolute path ([`check_origin`]).
    pub fn write_checkpoint(&self, ckpt: &Checkpoint) -> Result<ObjectId> {
        // Held while publishing: an interrupt waits for it (see [`publish_gate`]).
        let mut published = publish_gate();
        if let Some(o) = &ckpt.origin
            && let Some(why) = check_origin(o)
        {
            return Err(Error::Invalid(format!(
                "origin '{}' is not a canonical absolute path ({why}); give --origin with the path it stands for",
                o.escape_debug()
            )));
        }
        let bytes = ckpt.to_bytes();
        if bytes.len() as u64 > MAX_CHECKPOINT_RECORD {
            return Err(Error::Invalid(format!(
                "the checkpoint record would be {} bytes, over the {} MiB a record may have; shorten the message",
                bytes.len(),
                MAX_CHECKPOINT_RECORD >> 20
            )));
        }
        self.sync_objects()?;
        let id = ObjectId::of(&bytes);
        self.write_checkpoint_record(&id, &bytes)?;
        *published = true;
        Ok(id)
    }

    /// Temp files of writers that are gone (an interrupted snapshot or
    /// import, a crash), whatever their age: paths and sizes. `storefs gc`
    /// removes them.
    pub fn leftover_temps(&self) -> Result<Vec<(PathBuf, u64)>> {
        self.backend()
            .remove_stale_temps(std::time::UNIX_EPOCH, true)
            .at(&self.root().join("objects"))
    }

    /// Publish a checkpoint record as it was received (from a remote): its
    /// bytes must hash to `id`. The caller makes the objects it names durable
    /// first ([`Store::sync_objects`]).
    pub fn put_checkpoint_record(&self, id: &ObjectId, bytes: &[u8]) -> Result<()> {
        Self::verify_record(id, bytes, "received checkpoint record")?;
        self.write_checkpoint_record(id, bytes)
    }

    fn write_checkpoint_record(&self, id: &ObjectId, bytes: &[u8]) -> Result<()> {
        let path = self.checkpoint_path(id);
        if !crate::sys::exists_nofollow(&path) {
            write_store_file(&path, bytes, 0o444, true).at(&path)?;
        }
        Ok(())
    }

    /// Check a checkpoint record's bytes against its id (their sha256) and
    /// parse them. `what` names where the bytes came from.
    pub fn verify_record(id: &ObjectId, bytes: &[u8], what: &str) -> Result<Checkpoint> {
        Self::check_record_size(id, bytes.len() as u64, what)?;
        if ObjectId::of(bytes) != *id {
            return Err(Error::Corrupt {
                id: *id,
                detail: format!("{what} does not match its id"),
            });
        }
        serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
            id: *id,
            detail: format!("{what}: {e}"),
        })
    }

    /// Refuse a record of `size` bytes over [`MAX_CHECKPOINT_RECORD`].
    pub fn check_record_size(id: &ObjectId, size: u64, what: &str) -> Result<()> {
        match record_too_large(size, what) {
            None => Ok(()),
            Some(detail) => Err(Error::RecordTooLarge { id: *id, detail }),
        }
    }

    fn checkpoint_path(&self, id: &ObjectId) -> PathBuf {
        self.root.join("checkpoints").join(format!("{id}.json"))
    }

    /// Read a checkpoint record and check it against its id.
    pub fn read_checkpoint(&self, id: &ObjectId) -> Result<Checkpoint> {
        Ok(self.read_checkpoint_with_bytes(id)?.0)
    }

    /// A checkpoint record, checked against its id, with its exact bytes.
    pub fn read_checkpoint_with_bytes(&self, id: &ObjectId) -> Result<(Checkpoint, Vec<u8>)> {
        let path = self.checkpoint_path(id);
        let what = format!("checkpoint record {}", path.display());
        let (file, size) = match open_store_file(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::UnknownTarget(id.to_hex()));
            }
            Err(e) => return Err(e).at(&path),
        };
        Self::check_record_size(id, size, &what)?;
        let mut bytes = Vec::new();
        file.take(MAX_CHECKPOINT_RECORD + 1)
            .read_to_end(&mut bytes)
            .at(&path)?;
        let ckpt = Self::verify_record(id, &bytes, &what)?;
        Ok((ckpt, bytes))
    }

    fn partial_path(&self, id: &ObjectId) -> PathBuf {
        self.root.join("checkpoints").join(format!("{id}.partial"))
    }

    /// Mark checkpoint `id` as *partial*: its record is here but its objects
    /// may not be (a lazy mount of a remote checkpoint fetches them on first
    /// read). Written before the record. `note` (the remote's name) is kept
    /// in the file for people. gc keeps what is present of a partial
    /// checkpoint and does not require the rest; pull fetches the rest.
    pub fn mark_partial(&self, id: &ObjectId, note: &str) -> Result<()> {
        let path = self.partial_path(id);
        write_store_file(&path, format!("{note}\n").as_bytes(), 0o644, true).at(&path)
    }

    /// Whether checkpoint `id` is partial ([`Store::mark_partial`]).
    pub fn is_partial(&self, id: &ObjectId) -> bool {
        crate::sys::exists_nofollow(&self.partial_path(id))
    }

    /// Checkpoint `id` is complete now (every object it reaches is local and
    /// durable): drop the partial mark.
    pub fn clear_partial(&self, id: &ObjectId) -> Result<()> {
        let path = self.partial_path(id);
        match crate::sys::remove_nofollow(&path) {
            Ok(()) => fsync_dir(&self.root.join("checkpoints")).at(&path),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).at(&path),
        }
    }

    /// Whether the store holds checkpoint `id`'s record (not checked).
    pub fn has_checkpoint(&self, id: &ObjectId) -> bool {
        crate::sys::exists_nofollow(&self.checkpoint_path(id))
    }

    /// The file metadata of checkpoint `id`'s record (its size and time), or
    /// `None` when the store does not hold it.
    pub fn checkpoint_record_metadata(&self, id: &ObjectId) -> Result<Option<fs::Metadata>> {
        let path = self.checkpoint_path(id);
        match crate::sys::metadata_nofollow(&path) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at(&path),
        }
    }

    /// Checkpoint `id`'s record exactly as stored, checked against its id
    /// but not parsed. A missing record is an I/O error here.
    pub fn checkpoint_record_bytes(&self, id: &ObjectId) -> Result<Vec<u8>> {
        let path = self.checkpoint_path(id);
        let (file, size) = open_store_file(&path).at(&path)?;
        let what = format!("checkpoint record {}", path.display());
        Self::check_record_size(id, size, &what)?;
        let mut bytes = Vec::new();
        file.take(MAX_CHECKPOINT_RECORD + 1)
            .read_to_end(&mut bytes)
            .at(&path)?;
        if ObjectId::of(&bytes) != *id {
            return Err(Error::Corrupt {
                id: *id,
                detail: format!("checkpoint record {} does not match its id", path.display()),
            });
        }
        Ok(bytes)
    }

    /// `id` and every checkpoint it derives from (all parents, transitively),
    /// each once, `id` first. Every record is read and checked.
    pub fn ancestry(&self, id: &ObjectId) -> Result<Vec<(ObjectId, Checkpoint)>> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut queue = std::collections::VecDeque::from([*id]);
        while let Some(c) = queue.pop_front() {
            if !seen.insert(c) {
                continue;
            }
            let ckpt = self.read_checkpoint(&c)?;
            queue.extend(ckpt.parents.iter().copied());
            out.push((c, ckpt));
        }
        Ok(out)
    }

    /// Whether checkpoint `ancestor` is `id` or one it derives from.
    pub fn descends_from(&self, id: &ObjectId, ancestor: &ObjectId) -> Result<bool> {
        Ok(self.ancestry(id)?.iter().any(|(c, _)| c == ancestor))
    }

    /// Every checkpoint id in the store, sorted.
    pub fn list_checkpoints(&self) -> Result<Vec<ObjectId>> {
        let dir = self.root.join("checkpoints");
        let mut out = Vec::new();
        for (name, _) in list_store_dir(&dir).at(&dir)? {
            if let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(ObjectId::from_hex)
            {
                out.push(id);
            }
        }
        out.sort();
        Ok(out)
    }

    // ---- refs ----

    /// Check a ref (or fork) name: `[A-Za-z0-9._-]+`, not `.` or `..`.
    pub fn check_name(name: &str) -> Result<()> {
        let ok = !name.is_empty()
            && name != "."
            && name != ".."
            && name.len() <= 200
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
        if ok {
            Ok(())
        } else {
            Err(Error::BadRefName(name.to_string()))
        }
    }

    /// Point ref `name` at `id`, atomically and durably.
    pub fn set_ref(&self, name: &str, id: &ObjectId) -> Result<()> {
        Self::check_name(name)?;
        if self.fork_head(name)?.is_some() {
            return Err(Error::Invalid(format!(
                "'{name}' is a fork; a ref cannot take its name (pick another --ref)"
            )));
        }
        let path = self.root.join("refs").join(name);
        write_store_file(&path, format!("{id}\n").as_bytes(), 0o644, true).at(&path)
    }

    pub fn get_ref(&self, name: &str) -> Result<Option<ObjectId>> {
        if Self::check_name(name).is_err() {
            return Ok(None);
        }
        let path = self.root.join("refs").join(name);
        match read_store_file_capped(&path, MAX_REF_FILE, "a ref") {
            Ok(b) => ObjectId::from_hex(String::from_utf8_lossy(&b).trim())
                .map(Some)
                .ok_or_else(|| Error::Invalid(format!("{}: not a checkpoint id", path.display()))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at(&path),
        }
    }

    /// Delete ref `name`; its previous content (a checkpoint id, or
    /// whatever a damaged ref file held), or `None` when there was no such
    /// ref. The checkpoints it named stay until `gc` finds nothing else
    /// reaching them.
    pub fn delete_ref(&self, name: &str) -> Result<Option<String>> {
        Self::check_name(name)?;
        let dir = self.root.join("refs");
        let path = dir.join(name);
        let was = match read_store_file_capped(&path, MAX_REF_FILE, "a ref") {
            Ok(b) => String::from_utf8_lossy(&b).trim().to_string(),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at(&path),
        };
        match crate::sys::remove_nofollow(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at(&path),
        }
        atomic::fsync_dir(&dir).at(&dir)?;
        Ok(Some(was))
    }

    /// Every ref that names a checkpoint, sorted by name, and apart the
    /// names of those that cannot be read as one (a damaged ref file), with
    /// why: a listing goes on past them.
    pub fn list_refs_lossy(&self) -> Result<(Refs, Vec<(String, Error)>)> {
        let dir = self.root.join("refs");
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        for (name, _) in list_store_dir(&dir).at(&dir)? {
            let Some(name) = name.to_str().map(str::to_string) else {
                continue;
            };
            if name.starts_with('.') && name.ends_with(".tmp") {
                continue;
            }
            match self.get_ref(&name) {
                Ok(Some(id)) => good.push((name, id)),
                Ok(None) => {}
                Err(e) => bad.push((name, e)),
            }
        }
        good.sort();
        bad.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((good, bad))
    }

    /// All refs, sorted by name; an error if one cannot be read as a
    /// checkpoint id (gc and verify must not pass over it).
    pub fn list_refs(&self) -> Result<Vec<(String, ObjectId)>> {
        let (good, bad) = self.list_refs_lossy()?;
        match bad.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(good),
        }
    }

    /// Resolve what the user typed: a ref name, a fork name (its head), a
    /// full id, or a unique id prefix of at least [`MIN_ID_PREFIX`] hex
    /// digits — in that order; `git:COMMIT` (a git
    /// commit id or unique prefix) through the git index.
    pub fn resolve(&self, spec: &str) -> Result<ObjectId> {
        if let Some(commit) = spec.strip_prefix("git:") {
            return self.resolve_git(commit);
        }
        if let Some(id) = self.get_ref(spec)? {
            return Ok(id);
        }
        if let Some(id) = self.fork_head(spec)? {
            return Ok(id);
        }
        let lower = spec.to_ascii_lowercase();
        if is_hex(&lower) && lower.len() < MIN_ID_PREFIX {
            // `mount f` with no fork `f` must not mount whichever
            // checkpoint's id starts with f.
            return Err(Error::PrefixTooShort(spec.to_string()));
        }
        if is_hex(&lower) && lower.len() <= 64 {
            let matches: Vec<ObjectId> = self
                .list_checkpoints()?
                .into_iter()
                .filter(|id| id.to_hex().starts_with(&lower))
                .collect();
            match matches.len() {
                0 => {}
                1 => return Ok(matches[0]),
                n => {
                    return Err(Error::Ambiguous {
                        prefix: spec.to_string(),
                        count: n,
                        examples: matches
                            .iter()
                            .take(3)
                            .map(|m| m.to_hex()[..12].to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                    });
                }
            }
        }
        Err(Error::UnknownTarget(spec.to_string()))
    }
}

/// Whether [`SAFE_STORES_ENV`] names the store (or `file://` remote) at
/// `root`, or is `*`.
pub fn is_trusted(root: &Path) -> bool {
    let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let Some(list) = std::env::var_os(SAFE_STORES_ENV) else {
        return false;
    };
    std::env::split_paths(&list)
        .any(|p| p.as_os_str() == "*" || fs::canonicalize(&p).is_ok_and(|p| p == *root))
}

/// The directories whose owner and mode [`Store::open`] checks: the root,
/// its top directories and the packs (those that exist).
const CHECKED: &[&str] = &[
    "",
    "objects",
    "objects/packs",
    "checkpoints",
    "refs",
    "mounts",
    "logs",
    "archives",
    "forks",
    "remotes",
];

/// Refuse a store the caller cannot safely write (see [`Store::open`]): one
/// line naming the directory, its owner or mode, and the opt-in.
fn check_ownership(root: &Path) -> Result<()> {
    if let Some(problem) = ownership_problem(root)? {
        return Err(Error::Invalid(format!(
            "refusing to write to the store {}: {problem}, so another user could plant symlinks where storefs writes; use a store of your own, or trust this one with {SAFE_STORES_ENV}={}",
            root.display(),
            root.display()
        )));
    }
    Ok(())
}

/// What makes the store at `root` unsafe to write for the caller, if
/// anything: a checked directory that is a symlink, owned by another uid, or
/// writable by group or others who can reach it (the root's own mode decides
/// whether they can reach the directories inside: a 0700 root keeps them out).
/// `storefs doctor` reports the same.
pub fn ownership_problem(root: &Path) -> Result<Option<String>> {
    use std::os::unix::fs::MetadataExt;
    let me = crate::sys::euid();
    let root_mode = fs::metadata(root).at(root)?.mode();
    // Group or others may enter the root (search permission).
    let reachable = |m: u32| {
        (root_mode & 0o010 != 0 && m & 0o020 != 0) || (root_mode & 0o001 != 0 && m & 0o002 != 0)
    };
    for rel in CHECKED {
        let p = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        let m = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e).at(&p),
        };
        if m.file_type().is_symlink() {
            return Ok(Some(format!(
                "{} is a symlink, not a directory",
                p.display()
            )));
        }
        if m.uid() != me {
            return Ok(Some(format!(
                "{} is owned by uid {}, not by you (uid {me})",
                p.display(),
                m.uid()
            )));
        }
        let writable = if rel.is_empty() {
            m.mode() & 0o022 != 0
        } else {
            reachable(m.mode())
        };
        if writable {
            return Ok(Some(format!(
                "{} is writable by its group or others (mode {:04o})",
                p.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(None)
}

/// Make a path absolute against the current directory, without resolving symlinks.
pub fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).at(p)
}

/// Whether this process published a checkpoint, behind the lock
/// [`Store::write_checkpoint`] holds while it publishes one. A command that
/// is interrupted takes it (waiting for a publication under way) and keeps it
/// until it exits: then either its checkpoint was published (true) or none
/// will be.
pub fn publish_gate() -> std::sync::MutexGuard<'static, bool> {
    static GATE: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Remove the temp files this process was writing in the store at `root`
/// (objects, packs, records; [`atomic::temp_name`] names them after our pid):
/// what an interrupted snapshot or import leaves. For a process about to
/// exit: no thread of it creates a temp file afterwards. Returns how many
/// and their bytes; errors are skipped (gc finds what is left).
pub fn remove_own_temps(root: &Path) -> (usize, u64) {
    // No thread of ours makes a new one behind the sweep.
    atomic::stop_creating_temps();
    let me = std::process::id();
    let mut removed = (0, 0);
    let mut sweep = |dir: &Path| {
        let Ok(names) = list_store_dir(dir) else {
            return;
        };
        for (name, _) in names {
            if name.to_str().and_then(atomic::temp_owner) != Some(me) {
                continue;
            }
            let path = dir.join(&name);
            let size = crate::sys::metadata_nofollow(&path).map_or(0, |m| m.len());
            if crate::sys::remove_nofollow(&path).is_ok() {
                removed.0 += 1;
                removed.1 += size;
            }
        }
    };
    let Ok(top) = list_store_dir(root) else {
        return removed;
    };
    let dirs: Vec<PathBuf> = top
        .into_iter()
        .filter(|(_, is_dir)| *is_dir)
        .map(|(name, _)| root.join(name))
        .collect();
    for dir in dirs {
        sweep(&dir);
        if dir.file_name().is_some_and(|n| n == "objects") {
            let Ok(sub) = list_store_dir(&dir) else {
                continue;
            };
            for (name, is_dir) in sub {
                if is_dir {
                    sweep(&dir.join(name));
                }
            }
        }
    }
    sweep(root);
    removed
}

#[cfg(test)]
mod tests;

thread_local! {
    /// One zstd compression context per thread, reused for every object (a new
    /// context per object costs an allocation of a few hundred KiB).
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
    /// The same for the frames of framed objects: no content size in the
    /// frame header, a content checksum.
    static FRAMER: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
}

/// The frame table of stored bytes `raw`, when they are a framed object
/// whose table parses.
/// The names in directory `dir` that are UTF-8 (others are skipped), in
/// no order; none when `dir` does not exist (nothing was written there yet).
fn dir_names(dir: &Path) -> Result<Vec<String>> {
    let names = list_store_dir_if_exists(dir).at(dir)?;
    Ok(names
        .into_iter()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect())
}

fn raw_table(raw: &[u8]) -> Option<framed::FrameTable> {
    if framed::declares_size(raw) {
        return None;
    }
    let len = framed::table_len_from_footer(raw).ok()??;
    let at = raw.len().checked_sub(len)?;
    framed::parse_table(&raw[at..], raw.len() as u64).ok()
}

/// Bytes `range` of a framed object of `len` content bytes with `table`,
/// reading the stored span of the frames it touches with `read` (a stored
/// byte range; `None` when out of bounds). `None` when the table does not
/// describe `len` bytes or a frame is wrong.
fn decode_range(
    table: &framed::FrameTable,
    len: u64,
    range: Range<u64>,
    read: impl FnOnce(Range<u64>) -> io::Result<Option<Vec<u8>>>,
) -> io::Result<Option<Vec<u8>>> {
    let frames = table.covering(range.clone());
    let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
        return Ok(None);
    };
    if table.content_len() != len {
        return Ok(None);
    }
    let Some(span) = read(first.stored..last.stored_range().end)? else {
        return Ok(None);
    };
    let content = (last.start + u64::from(last.len) - first.start) as usize;
    let mut out = vec![0u8; content];
    for f in frames {
        let src = &span[(f.stored - first.stored) as usize..][..f.stored_len as usize];
        let at = (f.start - first.start) as usize;
        if !framed::has_checksum(src)
            || decompress_frame(src, &mut out[at..at + f.len as usize]).is_err()
        {
            return Ok(None);
        }
    }
    let skip = (range.start - first.start) as usize;
    out.truncate(skip + (range.end - range.start) as usize);
    out.drain(..skip);
    Ok(Some(out))
}

/// Decompress one frame into exactly `dst`.
fn decompress_frame(src: &[u8], dst: &mut [u8]) -> io::Result<()> {
    DECOMPRESSOR.with_borrow_mut(|d| {
        let d = match d {
            Some(d) => d,
            None => d.insert(zstd::bulk::Decompressor::new()?),
        };
        let n = d
            .decompress_to_buffer(src, dst)
            .map_err(|e| io::Error::other(format!("zstd: {e}")))?;
        if n != dst.len() {
            return Err(io::Error::other(format!(
                "zstd: a frame of {n} bytes where the frame table says {}",
                dst.len()
            )));
        }
        Ok(())
    })
}

/// zstd-compress an object at [`ZSTD_LEVEL`]: up to [`framed::FRAME_SIZE`]
/// bytes as one frame that records its content size, larger ones framed
/// ([`framed`]) so that part of them can be read alone.
fn compress(data: &[u8]) -> io::Result<Vec<u8>> {
    if data.len() > framed::FRAME_SIZE {
        return compress_framed(data);
    }
    COMPRESSOR.with_borrow_mut(|c| {
        let c = match c {
            Some(c) => c,
            None => c.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
        };
        c.compress(data)
    })
}

/// The framed layout: one frame per [`framed::FRAME_SIZE`] bytes, then the
/// table; content that compresses poorly is cut into
/// [`framed::SMALL_FRAME`]s instead, so that a random read of it reads and
/// checks 16 KiB, not 64. Each 64 KiB piece is compressed whole first: one
/// zstd stores raw becomes small raw frames built from it
/// ([`framed::put_raw_frame`]); one that compresses poorly is compressed
/// again in small pieces, and the pieces after a small one stay small
/// while they compress, but poorly.
fn compress_framed(data: &[u8]) -> io::Result<Vec<u8>> {
    FRAMER.with_borrow_mut(|c| {
        let c = match c {
            Some(c) => c,
            None => {
                let mut z = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
                z.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))?;
                z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
                c.insert(z)
            }
        };
        let mut out = Vec::with_capacity(data.len() / 2 + 1024);
        let mut sizes = Vec::with_capacity(framed::frame_count(data.len() as u64));
        let (mut at, mut small) = (0, false);
        while at < data.len() {
            let size = if small {
                framed::SMALL_FRAME
            } else {
                framed::FRAME_SIZE
            };
            let piece = &data[at..data.len().min(at + size)];
            let frame = c.compress(piece)?;
            let raw = frame.len() as u64 == piece.len() as u64 + framed::RAW_FRAME_OVERHEAD;
            if !small && piece.len() > framed::SMALL_FRAME {
                if raw {
                    for sub in piece.chunks(framed::SMALL_FRAME) {
                        let from = out.len();
                        framed::put_raw_frame(&mut out, sub);
                        sizes.push(((out.len() - from) as u32, sub.len() as u32));
                    }
                    at += piece.len();
                    continue;
                }
                if framed::poorly_compressed(frame.len(), piece.len()) {
                    small = true;
                    continue;
                }
            }
            // Small while it compresses poorly; where it does not compress at
            // all, the large pieces find that faster.
            small = small && !raw && framed::poorly_compressed(frame.len(), piece.len());
            sizes.push((frame.len() as u32, piece.len() as u32));
            out.extend_from_slice(&frame);
            at += piece.len();
        }
        framed::put_table(&mut out, &sizes);
        Ok(out)
    })
}

/// Decompress stored bytes, refusing output over [`MAX_OBJECT_SIZE`]. A
/// framed object ([`framed`]) decompresses frame by frame into an exact
/// buffer, its table checked; a frame that declares its size (every
/// single-frame object this store writes) in one call into an exact buffer;
/// (a frame of a declared size that lies about it streams, bounded).
fn decompress(raw: &[u8]) -> io::Result<Vec<u8>> {
    let too_big = || io::Error::other("larger than any object the store writes");
    if !framed::declares_size(raw) {
        // Not one frame with its size: framed (the store writes nothing else).
        let table = framed::table_len_from_footer(raw)
            .and_then(|len| len.ok_or(framed::Malformed("no frame table")))
            .and_then(|len| {
                raw.len()
                    .checked_sub(len)
                    .ok_or(framed::Malformed("frame table longer than the object"))
            })
            .and_then(|at| framed::parse_table(&raw[at..], raw.len() as u64))
            .map_err(|m| io::Error::other(format!("frame table: {}", m.0)))?;
        let len = table.content_len();
        if len > MAX_OBJECT_SIZE {
            return Err(too_big());
        }
        let mut out = vec![0u8; len as usize];
        for f in &table.frames {
            let src = &raw[f.stored as usize..][..f.stored_len as usize];
            decompress_frame(src, &mut out[f.start as usize..][..f.len as usize])?;
        }
        return Ok(out);
    }
    match zstd::zstd_safe::get_frame_content_size(raw) {
        Ok(Some(n)) if n > MAX_OBJECT_SIZE => Err(too_big()),
        Ok(Some(n)) => DECOMPRESSOR.with_borrow_mut(|d| {
            let d = match d {
                Some(d) => d,
                None => d.insert(zstd::bulk::Decompressor::new()?),
            };
            let out = d
                .decompress(raw, n as usize)
                .map_err(|e| io::Error::other(format!("zstd: {e}")))?;
            if out.len() as u64 != n {
                return Err(io::Error::other(format!(
                    "zstd: {} bytes where the frame declares {n}",
                    out.len()
                )));
            }
            Ok(out)
        }),
        _ => {
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(raw)
                .map_err(|e| io::Error::other(format!("zstd: {e}")))?
                .take(MAX_OBJECT_SIZE + 1)
                .read_to_end(&mut out)
                .map_err(|e| io::Error::other(format!("zstd: {e}")))?;
            if out.len() as u64 > MAX_OBJECT_SIZE {
                return Err(too_big());
            }
            Ok(out)
        }
    }
}
