//! The fork directory, its head, and the commit protocol.
//!
//! ```text
//! STORE/forks/<name>/
//!   fork.json        {"name", "base": <fork point id>, "created_ns",
//!                     "upstream"?: {"remote", "ref"}}                   (never changes)
//!   HEAD             {"checkpoint": <id>, "journal_from": <seq>}       (replaced atomically)
//!   journal/<16 hex>.wal   segments >= journal_from, replayed in order onto HEAD's checkpoint
//!   lock             flock(LOCK_EX|LOCK_NB) while the fork is open (mount or commit)
//! ```
//! A fork directory without HEAD is a creation that did not finish; it is
//! not listed and its name stays taken (remove the directory to reuse it).
//!
//! **Commit** (`Fork::commit`): (1) under the state lock: rotate the journal
//! to segment S+1 whose first record is the live inode map, and copy what
//! the fold visits (`fold::snapshot`); (2) without the lock: fold the copy
//! into objects and trees and
//! write the checkpoint (parent = the head; objects synced first); (3) write
//! HEAD `{new, journal_from: S+1}` durably; (4) under the lock again: point
//! file pieces held in segments ≤ S at the new objects (rebase); (5) delete
//! segments ≤ S. A crash before (3) leaves the old HEAD and all segments
//! (replay checks the inode map it meets against the state); after (3) the
//! new HEAD, whose replay starts at S+1 and rebinds inode numbers from the
//! map; leftover segments < S+1 are deleted when the fork is next opened.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::fold::{fold, snapshot};
use super::io::{JournalIo, RealIo};
use super::prealloc::{self, Prealloc};
use super::record::Record;
use super::state::{
    Budget, Ctx, ForkState, INODE_BYTES, ReadPlan, Src, check_name, journal_spans, now_ns,
};
use super::wal::{Wal, segment_name};
use super::{Error, Result};
use crate::store::model::{
    AtimeMode, AtimePolicy, Attr, DirEntry, Fallocate, MAX_FILE_SIZE, NAME_MAX, Posix, RenameMode,
    SetAttr, StatFs, XattrMode, ext4,
};
use crate::store::readahead::{AHEAD_CHUNKS, DROP_BEHIND, ReadAhead};
use crate::store::{Checkpoint, ChunkCache, ForkHead, Kind, ObjectId, Source, Store, acl};

/// A new inode as its creator asks for it ([`Fork::make`]).
#[derive(Clone, Debug)]
pub struct NewNode<'a> {
    pub kind: Kind,
    /// The mode bits asked for (permissions, setuid, setgid, sticky).
    pub perm: u32,
    /// Cleared from `perm` unless the parent directory has a default ACL.
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
    /// A device node's number (the store's encoding); 0 otherwise.
    pub rdev: u64,
    /// A symlink's target.
    pub target: Option<&'a [u8]>,
}

impl NewNode<'_> {
    /// `kind` with `perm`, owned by `uid`:`gid`; no umask, rdev or target.
    pub fn new(kind: Kind, perm: u32, uid: u32, gid: u32) -> NewNode<'static> {
        NewNode {
            kind,
            perm,
            umask: 0,
            uid,
            gid,
            rdev: 0,
            target: None,
        }
    }
}

/// What an open fork's caches hold at most, unless the opener says
/// otherwise ([`Fork::open_sized`]: the mount daemon gives `--cache-size`):
/// three quarters for decompressed base chunks, a quarter for the inode
/// table's unchanged entries ([`STATE_SHARE`]).
const CACHE_BYTES: usize = 64 << 20;
/// The part of the cache bound that goes to the inode table's unchanged
/// entries (what parking bounds): one in this many bytes, as the read-only
/// views give their directories.
const STATE_SHARE: usize = 4;

/// What an open fork holds in memory, in bytes ([`Fork::memory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkMemory {
    /// The bound of both (`--cache-size`): the chunk cache takes three
    /// quarters, the table's unchanged entries a quarter.
    pub limit: usize,
    /// The bound of the chunk cache.
    pub chunk_limit: usize,
    /// Decompressed base chunks cached for reads (within `chunk_limit`).
    pub chunks: usize,
    /// The inode table, estimated ([`ForkState::memory_estimate`]): its
    /// unchanged entries (since the base or the last commit) are parked
    /// within a quarter of `limit`; what changed since stays. Not in `chunks`.
    pub state: usize,
}

/// `fork.json`: what a fork was made from. Never changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkInfo {
    pub name: String,
    /// The checkpoint the fork was made from.
    pub base: ObjectId,
    pub created_ns: i64,
    /// Where the base came from when the fork was made of a remote ref
    /// (`storefs fork team:s1 --name …`); absent otherwise and in fork.json
    /// files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
}

/// The remote ref a fork was made from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    /// The remote's name (`storefs remote list`).
    pub remote: String,
    /// The remote ref's name.
    #[serde(rename = "ref")]
    pub r#ref: String,
}

/// Where fork `name` lives.
pub fn fork_dir(store: &Store, name: &str) -> PathBuf {
    store.forks_dir().join(name)
}

/// Steps of a commit, after which a crash test can stop it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommitStep {
    Rotated,
    Folded,
    CheckpointWritten,
    HeadMoved,
    Rebased,
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(io: &dyn JournalIo, path: &Path) -> Result<Option<T>> {
    match io.read_file(path).map_err(io_at(path))? {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| Error::Corrupt {
                path: path.to_path_buf(),
                detail: e.to_string(),
            }),
    }
}

fn write_json<T: Serialize>(io: &dyn JournalIo, path: &Path, v: &T) -> Result<()> {
    let mut b = serde_json::to_vec_pretty(v).expect("serializes");
    b.push(b'\n');
    io.write_atomic(path, &b).map_err(io_at(path))
}

/// A fork's `fork.json`, or `None` when there is no such (complete) fork.
pub fn read_fork_info(store: &Store, name: &str) -> Result<Option<ForkInfo>> {
    if Store::check_name(name).is_err() {
        return Ok(None);
    }
    let dir = fork_dir(store, name);
    if read_json::<ForkHead>(&RealIo, &dir.join(ForkHead::FILE))?.is_none() {
        return Ok(None);
    }
    read_json(&RealIo, &dir.join("fork.json"))
}

/// Whether fork `name`'s journal holds changes no commit has taken yet
/// (records that change the tree: directory loads and inode maps do not
/// count, as when the fork is opened). Reads the journal only, so it also
/// answers for a mounted fork: what its daemon has journaled (with
/// `--writeback-cache`, writes the kernel still holds are not there yet).
pub fn has_uncommitted_changes(store: &Store, name: &str) -> Result<bool> {
    let head = store
        .read_fork_head(name)?
        .ok_or_else(|| Error::NoFork(name.into()))?;
    let dir = fork_dir(store, name).join("journal");
    super::wal::any_record(&dir, head.journal_from, |r| {
        !matches!(
            r,
            Record::InodeMap(_) | Record::Atimes(_) | Record::LoadDir { .. } | Record::Who(_)
        )
    })
    .map_err(io_at(&dir))
}

/// Delete fork `name`: its head, `fork.json`, journal and lock. Refused
/// while the fork is open (mounted, in a run, committing: [`Error::Busy`]),
/// and while its journal holds changes no commit has taken, unless
/// `discard` ([`Error::Uncommitted`]). Its checkpoints stay: a ref, another
/// fork or a merge may name them, and `gc` removes what nothing reaches.
/// The directory first moves out of sight in one rename, to a name no fork
/// can have (`NAME~deleted.PID`), then is removed; such a directory left by
/// a crash is removed by the next delete.
pub fn delete_fork(store: &Store, name: &str, discard: bool) -> Result<()> {
    if store.read_fork_head(name)?.is_none() {
        return Err(Error::NoFork(name.into()));
    }
    let dir = fork_dir(store, name);
    let lock_path = dir.join("lock");
    let _lock = RealIo
        .try_lock(&lock_path)
        .map_err(io_at(&lock_path))?
        .ok_or_else(|| Error::Busy(name.into()))?;
    if !discard && has_uncommitted_changes(store, name)? {
        return Err(Error::Uncommitted(name.into()));
    }
    let forks = store.forks_dir();
    let gone = forks.join(format!("{name}~deleted.{}", std::process::id()));
    std::fs::rename(&dir, &gone).map_err(io_at(&dir))?;
    crate::store::fsync_dir(&forks).map_err(io_at(&forks))?;
    for ent in std::fs::read_dir(&forks).map_err(io_at(&forks))? {
        let ent = ent.map_err(io_at(&forks))?;
        if ent.file_name().to_string_lossy().contains("~deleted.") {
            let path = ent.path();
            std::fs::remove_dir_all(&path).map_err(io_at(&path))?;
        }
    }
    Ok(())
}

/// The fork's history: its head, then parents (first parent only), down to
/// and including the fork point.
pub fn fork_log(store: &Store, name: &str) -> Result<Vec<(ObjectId, Checkpoint)>> {
    let info = read_fork_info(store, name)?.ok_or_else(|| Error::NoFork(name.into()))?;
    let mut id = store
        .fork_head(name)?
        .ok_or_else(|| Error::NoFork(name.into()))?;
    let mut out = Vec::new();
    loop {
        let c = store.read_checkpoint(&id)?;
        let next = c.parents.first().copied();
        out.push((id, c));
        match next {
            Some(p) if id != info.base => id = p,
            _ => break,
        }
    }
    Ok(out)
}

/// An open fork: the state, its journal and the lock. Every method is safe to
/// call from many threads; state changes are atomic with respect to each
/// other (one lock covers check, journal append and apply).
pub struct Fork {
    store: Arc<Store>,
    io: Arc<dyn JournalIo>,
    info: ForkInfo,
    dir: PathBuf,
    head: Mutex<ForkHead>,
    state: Mutex<ForkState>,
    wal: Wal,
    commit_lock: Mutex<()>,
    cache: Arc<ChunkCache>,
    /// Sequential reads of base files read their next chunks ahead.
    readahead: ReadAhead,
    /// The bound on the chunk cache and the table's unchanged entries together.
    cache_bytes: usize,
    /// Records replayed at open that change the tree (not directory loads
    /// or inode maps): uncommitted changes.
    replayed_changes: usize,
    /// What `fallocate` reserved, for `st_blocks` and `statfs` (not journaled).
    prealloc: Prealloc,
    /// The `storefs run` serving it, if one does ([`Fork::set_run`]).
    run: std::sync::OnceLock<String>,
    /// [`Fork::shut_down`] was called.
    shut: AtomicBool,
    _lock: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for Fork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fork({})", self.info.name)
    }
}

impl Fork {
    /// Create fork `name` of checkpoint `base`: instant, copies nothing.
    /// Fails with [`Error::NameTaken`] when a ref or fork has that name.
    pub fn create(store: &Store, name: &str, base: &ObjectId) -> Result<ForkInfo> {
        Self::create_with(store, Arc::new(RealIo), name, base)
    }

    /// [`Fork::create`], recording in fork.json the remote ref the base came from.
    pub fn create_from(
        store: &Store,
        name: &str,
        base: &ObjectId,
        upstream: Option<Upstream>,
    ) -> Result<ForkInfo> {
        Self::create_full(store, Arc::new(RealIo), name, base, upstream)
    }

    /// [`Fork::create`] through a given I/O implementation (tests).
    pub fn create_with(
        store: &Store,
        io: Arc<dyn JournalIo>,
        name: &str,
        base: &ObjectId,
    ) -> Result<ForkInfo> {
        Self::create_full(store, io, name, base, None)
    }

    fn create_full(
        store: &Store,
        io: Arc<dyn JournalIo>,
        name: &str,
        base: &ObjectId,
        upstream: Option<Upstream>,
    ) -> Result<ForkInfo> {
        if Store::check_name(name).is_err() {
            return Err(Error::BadName(name.into()));
        }
        if store.get_ref(name)?.is_some() {
            return Err(Error::NameTaken(name.into()));
        }
        store.read_checkpoint(base)?;
        let forks = store.forks_dir();
        io.create_dir_all(&forks).map_err(io_at(&forks))?;
        let dir = forks.join(name);
        match io.create_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::NameTaken(name.into()));
            }
            r => r.map_err(io_at(&dir))?,
        }
        let info = ForkInfo {
            name: name.into(),
            base: *base,
            created_ns: now_ns(),
            upstream,
        };
        write_json(&*io, &dir.join("fork.json"), &info)?;
        let journal = dir.join("journal");
        io.create_dir(&journal).map_err(io_at(&journal))?;
        io.sync_dir(&dir).map_err(io_at(&dir))?;
        // HEAD last: its presence makes the fork exist.
        let head = ForkHead {
            checkpoint: *base,
            journal_from: 0,
        };
        write_json(&*io, &dir.join(ForkHead::FILE), &head)?;
        io.sync_dir(&forks).map_err(io_at(&forks))?;
        Ok(info)
    }

    /// Open fork `name` for reading and writing: take its lock (a second
    /// opener gets [`Error::Busy`]), drop a finished commit's leftover
    /// segments, replay the journal onto the head (cutting a torn tail).
    /// Used by the mount daemon and by an offline commit alike.
    pub fn open(store: Arc<Store>, name: &str) -> Result<Fork> {
        Self::open_with(store, Arc::new(RealIo), name)
    }

    /// [`Fork::open`] with its caches bounded by `cache_bytes` (the mount
    /// daemon's `--cache-size`; see [`CACHE_BYTES`]), the inode table within
    /// its share while the journal replays, too.
    pub fn open_sized(store: Arc<Store>, name: &str, cache_bytes: usize) -> Result<Fork> {
        Self::open_full(store, Arc::new(RealIo), name, cache_bytes, None)
    }

    /// [`Fork::open`] through a given I/O implementation (tests).
    pub fn open_with(store: Arc<Store>, io: Arc<dyn JournalIo>, name: &str) -> Result<Fork> {
        Self::open_full(store, io, name, CACHE_BYTES, None)
    }

    /// [`Fork::open_with`] with an inode table parked within `budget`
    /// after every operation and every replayed record that leaves it above
    /// (tests: `Budget::strict(0)` parks all it can).
    #[cfg(test)]
    pub(crate) fn open_parking(
        store: Arc<Store>,
        io: Arc<dyn JournalIo>,
        name: &str,
        budget: Budget,
    ) -> Result<Fork> {
        Self::open_full(store, io, name, CACHE_BYTES, Some(budget))
    }

    /// Open, replay, and bound the caches by `cache_bytes`; `budget`: the
    /// inode table's if not its share of `cache_bytes`.
    fn open_full(
        store: Arc<Store>,
        io: Arc<dyn JournalIo>,
        name: &str,
        cache_bytes: usize,
        budget: Option<Budget>,
    ) -> Result<Fork> {
        if Store::check_name(name).is_err() {
            return Err(Error::NoFork(name.into()));
        }
        let dir = fork_dir(&store, name);
        let head: ForkHead = read_json(&*io, &dir.join(ForkHead::FILE))?
            .ok_or_else(|| Error::NoFork(name.into()))?;
        let lock_path = dir.join("lock");
        let lock = io
            .try_lock(&lock_path)
            .map_err(io_at(&lock_path))?
            .ok_or_else(|| Error::Busy(name.into()))?;
        // Re-read under the lock: a commit may have moved it meanwhile.
        let head: ForkHead = read_json(&*io, &dir.join(ForkHead::FILE))?.unwrap_or(head);
        let info: ForkInfo =
            read_json(&*io, &dir.join("fork.json"))?.ok_or_else(|| Error::Corrupt {
                path: dir.join("fork.json"),
                detail: "missing".into(),
            })?;
        let ckpt = store.read_checkpoint(&head.checkpoint)?;
        let root = store.root_entry(&ckpt)?;
        let mut state = ForkState::new(&root);
        state.ops.spill_in(&dir);
        state.replaying = true;
        let state_bytes = cache_bytes / STATE_SHARE;
        state.budget = budget.unwrap_or(Budget::of(state_bytes / INODE_BYTES));
        let journal = dir.join("journal");
        let mut first = true;
        let mut changes = 0usize;
        let wal = Wal::open(io.clone(), &journal, head.journal_from, |rec, pos, plen| {
            let at = || journal.join(segment_name(pos.seg));
            if first && head.journal_from > 0 && !matches!(rec, Record::InodeMap(_)) {
                return Err(Error::Corrupt {
                    path: at(),
                    detail: "a segment started by a commit must begin with an inode map".into(),
                });
            }
            first = false;
            if !matches!(
                rec,
                Record::InodeMap(_) | Record::Atimes(_) | Record::LoadDir { .. } | Record::Who(_)
            ) {
                changes += 1;
            }
            state.apply(&store, &rec, pos, plen).map_err(|e| match e {
                Error::Io { .. } | Error::Store(_) => e,
                Error::Corrupt { detail, .. } => Error::Corrupt {
                    path: at(),
                    detail: format!("record at offset {}: {detail}", pos.offset),
                },
                other => Error::Corrupt {
                    path: at(),
                    detail: format!("record at offset {} does not apply: {other}", pos.offset),
                },
            })
        })?;
        // A segment started by a head move that crashed before writing its
        // first record (HEAD is written first there) gets the map now, so
        // records appended to it replay later; the state is still fresh.
        if first && head.journal_from > 0 {
            wal.append(&state.inode_map_record(&store)?)?;
            wal.sync()?;
        }
        state.finish_replay();
        Ok(Fork {
            store,
            io,
            info,
            dir,
            head: Mutex::new(head),
            state: Mutex::new(state),
            wal,
            commit_lock: Mutex::new(()),
            cache: Arc::new(ChunkCache::new(cache_bytes - state_bytes)),
            readahead: ReadAhead::new(cache_bytes - state_bytes),
            cache_bytes,
            replayed_changes: changes,
            prealloc: Prealloc::default(),
            run: std::sync::OnceLock::new(),
            shut: AtomicBool::new(false),
            _lock: lock,
        })
    }

    /// Whether the next commit must load the whole tree (tests).
    #[cfg(test)]
    pub(crate) fn needs_full_load(&self) -> bool {
        super::fold::needs_full_load(&self.state.lock())
    }

    /// Inodes in the table, files parked out of it, and directories
    /// brought back so far (tests).
    #[cfg(test)]
    pub(crate) fn table(&self) -> (usize, u64, u64) {
        let st = self.state.lock();
        (st.inodes.len(), st.parked, st.unparked)
    }

    /// What it holds in memory now (walks the inode table under its lock).
    pub fn memory(&self) -> ForkMemory {
        ForkMemory {
            limit: self.cache_bytes,
            chunk_limit: self.cache.capacity(),
            chunks: self.cache.bytes(),
            state: self.state.lock().memory_estimate(),
        }
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn info(&self) -> &ForkInfo {
        &self.info
    }

    /// The checkpoint the fork's journal applies to.
    pub fn head(&self) -> ObjectId {
        self.head.lock().checkpoint
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The fork is served inside `storefs run` `run` (its id, the pid
    /// `runs/<pid>.json` names): the mount records it with every change.
    pub fn set_run(&self, run: &str) {
        let _ = self.run.set(run.to_string());
    }

    /// The run serving the fork ("" outside `storefs run`).
    pub fn run(&self) -> &str {
        self.run.get().map_or("", String::as_str)
    }

    /// The operations since the last commit, oldest first (what `storefs
    /// ops` shows of a fork after its commits).
    pub fn uncommitted_ops(&self) -> Vec<super::ops::OpLine> {
        let st = self.state.lock();
        st.ops.lines().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the uncommitted operations cannot be read");
            Vec::new()
        })
    }

    /// Shut the fork down (`FS_IOC_SHUTDOWN`, xfs's `XFS_IOC_GOINGDOWN`),
    /// as a power cut at this moment would leave it, less the kernel's part:
    /// with `flush` (the ioctl's `DEFAULT` and `LOGFLUSH`) the journal is
    /// synced first, so everything done so far is kept; without it
    /// (`NOLOGFLUSH`) only what was synced (or was on disk when the fork
    /// was opened) is. Then the journal is cut back to that ([`Wal::shut_down`])
    /// and takes nothing more, every later operation fails with
    /// [`Error::ShutDown`] (but [`Fork::statfs`], [`Fork::release`],
    /// [`Fork::uncommitted_ops`]), and so does [`Fork::commit`]: the journal
    /// stays, and opening the fork again replays exactly what was durable.
    /// A failed sync or cut is returned, and the fork is shut down all the
    /// same. Idempotent: a second call changes nothing.
    pub fn shut_down(&self, flush: bool) -> Result<()> {
        // Under the state lock: no operation is between its append and
        // its effect, and none starts after this.
        let _st = self.state.lock();
        if self.shut.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let synced = match flush {
            true => self.wal.sync(),
            false => Ok(()),
        };
        let cut = self.wal.shut_down();
        tracing::warn!(
            fork = %self.info.name,
            flush,
            cut_bytes = cut.as_ref().ok(),
            "fork shut down: it answers EIO from now on and will not commit; the next mount replays what was synced"
        );
        synced.and(cut.map(|_| ()))
    }

    /// The inodes in the table now (not the parked ones): what a mount
    /// has the kernel forget once the fork is shut down.
    pub fn resident_inodes(&self) -> Vec<u64> {
        self.state.lock().inodes.keys().copied().collect()
    }

    /// Whether [`Fork::shut_down`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut.load(Ordering::SeqCst)
    }

    fn shut_err(&self) -> Error {
        Error::ShutDown {
            path: self.dir.join("journal"),
        }
    }

    /// Run `f` under the state lock; then park directories if the inode
    /// table is over its budget (`state/park.rs`). Refused once the fork
    /// is shut down ([`Fork::shut_down`]): every operation comes here.
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&mut ForkState, &Ctx<'_>) -> Result<T>,
    ) -> Result<T> {
        if self.is_shut_down() {
            return Err(self.shut_err());
        }
        let ctx = Ctx {
            store: &self.store,
            wal: &self.wal,
            who: super::ops::requester(),
        };
        let mut st = self.state.lock();
        if self.is_shut_down() {
            return Err(self.shut_err());
        }
        let out = f(&mut st, &ctx);
        st.trim();
        out
    }

    /// [`Fork::with`] on inode `ino`, brought back first if it was parked.
    /// A change goes through [`Fork::with_change`] instead.
    fn with_ino<T>(
        &self,
        ino: u64,
        f: impl FnOnce(&mut ForkState, &Ctx<'_>) -> Result<T>,
    ) -> Result<T> {
        self.with(|st, ctx| {
            st.ensure_resident(ctx.store, ino)?;
            f(st, ctx)
        })
    }

    /// [`Fork::with`] for a change to inode `ino`: brought back if it was
    /// parked, and a directory's parent too (its tree holds the directory's
    /// attributes).
    fn with_change<T>(
        &self,
        ino: u64,
        f: impl FnOnce(&mut ForkState, &Ctx<'_>) -> Result<T>,
    ) -> Result<T> {
        self.with(|st, ctx| {
            st.ensure_changeable(ctx.store, ino)?;
            f(st, ctx)
        })
    }

    // ---------------------------------------------------------------- reads

    /// The entry `name` in directory `parent` ("." and ".." included).
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        self.with(|st, ctx| {
            let ino = st.lookup(ctx, parent, name)?;
            self.attr_of(st, ino)
        })
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.with_ino(ino, |st, _| self.attr_of(st, ino))
    }

    /// Inode `ino`'s attributes; a directory not loaded yet is sized from
    /// its base tree (read, not loaded: no journal record), as ext4 would
    /// size it ([`ext4::dir_size`]). One block if that tree cannot
    /// be read (listing it will fail and say why).
    fn attr_of(&self, st: &ForkState, ino: u64) -> Result<Attr> {
        let n = st.inode(ino)?;
        let mut attr = n.attr(ino);
        if let super::state::Data::File(f) = &n.data
            && let Some(held) = self.prealloc.of(ino)
        {
            let end = held.last().map_or(0, |r| r.1).max(f.size);
            let ranges = prealloc::with_reserved(super::state::data_ranges(f, 0), &held);
            attr.blocks = ext4::file_blocks(end, ranges);
        }
        if let super::state::Data::Dir(super::state::Dir::Unloaded(id)) = &n.data
            && let Ok(tree) = self.store.get_tree(id, &format!("directory inode {ino}"))
        {
            let names = tree.entries.iter().map(|e| &e.name);
            let lens = names.filter(|n| check_name(n).is_ok()).map(|n| n.len());
            (attr.size, attr.blocks) = ext4::dir_size(lens);
        }
        Ok(attr)
    }

    /// `lseek` `SEEK_DATA`/`SEEK_HOLE` on file `ino`, from the fork's extent
    /// map (base extents and journal writes are data, gaps are holes), as
    /// ext4 would answer ([`ext4::seek`]); `None` is `ENXIO`.
    pub fn seek(&self, ino: u64, offset: i64, whence: ext4::Seek) -> Result<Option<u64>> {
        self.with_ino(ino, |st, _| match &st.inode(ino)?.data {
            super::state::Data::File(f) => {
                let from = u64::try_from(offset).unwrap_or(0);
                let from = from - from % ext4::BLOCK;
                let ranges = super::state::data_ranges(f, from);
                Ok(ext4::seek(f.size, ranges, offset, whence))
            }
            super::state::Data::Dir(_) => Err(Posix::IsDir.into()),
            _ => Err(Posix::Invalid("not a regular file").into()),
        })
    }

    /// Directory `ino`'s parent and its entries in name order ("." and ".."
    /// not included).
    pub fn readdir(&self, ino: u64) -> Result<(u64, Vec<DirEntry>)> {
        self.with(|st, ctx| st.readdir(ctx, ino))
    }

    /// Up to `size` bytes of file `ino` from `offset` (fewer at the end).
    /// Base data is verified (a whole chunk by its sha256, a small random
    /// part by its frames' checksums, as on a read-only tree); journal data
    /// is read back from its segment. Sequential reads of base data read
    /// ahead and drop the chunks they passed ([`ReadAhead`]).
    /// The state lock is held only to find the pieces.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size));
        let run = self.readahead.sequential(ino, offset, end);
        let sequential = run > 0;
        // Journal segments are resolved to open handles under the state lock,
        // so a commit trimming them meanwhile cannot pull them away.
        let (plan, upcoming, passed) = self.with_ino(ino, |st, _| {
            let plan = st.plan_read(ino, offset, u64::from(size))?;
            let plan = plan
                .into_iter()
                .map(|(len, src)| {
                    let file = match src {
                        Some(Src::Journal { seg, .. }) => {
                            Some(self.wal.file(seg).ok_or_else(|| Error::Corrupt {
                                path: self.dir.join("journal").join(segment_name(seg)),
                                detail: format!("inode {ino} has data in a segment that is gone"),
                            })?)
                        }
                        _ => None,
                    };
                    Ok((len, src, file))
                })
                .collect::<Result<Vec<_>>>()?;
            if !sequential {
                return Ok((plan, Vec::new(), Vec::new()));
            }
            let ahead =
                st.ahead_chunks(ino, end, self.readahead.ahead_bytes(), AHEAD_CHUNKS * 4)?;
            Ok((plan, ahead, passed_chunks(st, ino, offset)?))
        })?;
        if sequential {
            self.readahead
                .ahead(&self.store, &self.cache, run, upcoming);
            self.readahead.drop_behind(&self.cache, passed);
        }
        let mut out = vec![0u8; plan.iter().map(|p| p.0 as usize).sum()];
        // Where each piece goes in `out`.
        let starts: Vec<usize> = plan
            .iter()
            .scan(0usize, |at, p| {
                let start = *at;
                *at += p.0 as usize;
                Some(start)
            })
            .collect();
        // Journal data: one read per span of nearby pieces (`journal_spans`).
        let sources: ReadPlan = plan.iter().map(|p| (p.0, p.1)).collect();
        let mut span_buf = Vec::new();
        for (first, count, seg, off, len) in journal_spans(&sources) {
            let file = plan[first].2.as_ref().expect("resolved above");
            let io = |source| Error::Io {
                path: self.dir.join("journal").join(segment_name(seg)),
                source,
            };
            if count == 1 {
                let at = starts[first];
                file.read_at(&mut out[at..at + len as usize], off)
                    .map_err(io)?;
                continue;
            }
            span_buf.resize(len as usize, 0);
            file.read_at(&mut span_buf, off).map_err(io)?;
            for i in first..first + count {
                let (plen, src, _) = &plan[i];
                let Some(Src::Journal { off: poff, .. }) = *src else {
                    unreachable!("a span holds journal pieces only");
                };
                let from = (poff - off) as usize;
                let at = starts[i];
                out[at..at + *plen as usize]
                    .copy_from_slice(&span_buf[from..from + *plen as usize]);
            }
        }
        for (i, (len, src, _)) in plan.into_iter().enumerate() {
            let len = len as usize;
            let at = starts[i];
            match src {
                None | Some(Src::Journal { .. }) => {}
                Some(Src::Base { id, off }) => {
                    // A small random read: only the frames it touches.
                    if !sequential && len as u64 <= PART_MAX {
                        let range = off..off + len as u64;
                        let part =
                            self.readahead
                                .part(&self.store, &self.cache, &id, None, range)?;
                        if let Some(part) = part
                            && part.len() == len
                        {
                            out[at..at + len].copy_from_slice(&part);
                            continue;
                        }
                    }
                    let chunk = self.readahead.fetch(
                        &self.store,
                        &self.cache,
                        &id,
                        || format!("fork inode {ino}"),
                        Vec::new,
                    )?;
                    let from = off as usize;
                    let slice = chunk.get(from..from + len).ok_or_else(|| Error::Corrupt {
                        path: self.dir.clone(),
                        detail: format!("object {id} is shorter than its extent (inode {ino})"),
                    })?;
                    out[at..at + len].copy_from_slice(slice);
                }
            }
        }
        Ok(out)
    }

    /// A read of `ino` (a file's `READ`, a directory's listing) under the
    /// mount's atime `policy`: its atime becomes now when the policy says
    /// so, one `SetAttr` record ([`ForkState::touch_atime`]); returns
    /// whether it changed. Looked at under the state lock first, so a read
    /// that changes nothing (relatime's usual case) writes nothing.
    pub fn touch_atime(&self, ino: u64, policy: AtimePolicy) -> Result<bool> {
        if policy.mode == AtimeMode::Never {
            return Ok(false);
        }
        let now = now_ns();
        if !self.with_ino(ino, |st, _| st.atime_due(ino, policy, now))? {
            return Ok(false);
        }
        self.with_change(ino, |st, ctx| st.touch_atime(ctx, ino, policy, now))
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.with_ino(ino, |st, _| match &st.inode(ino)?.data {
            super::state::Data::Symlink(t) => Ok(t.clone()),
            _ => Err(Posix::Invalid("not a symlink").into()),
        })
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        self.with_ino(ino, |st, _| {
            st.inode(ino)?
                .xattrs
                .get(name)
                .cloned()
                .ok_or(Posix::NoXattr.into())
        })
    }

    /// Attribute names, sorted.
    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        self.with_ino(ino, |st, _| {
            Ok(st.inode(ino)?.xattrs.keys().cloned().collect())
        })
    }

    pub fn statfs(&self) -> Result<StatFs> {
        // Not through `with`: answered after a shutdown too (`df`).
        let (files, reserved) = {
            let mut st = self.state.lock();
            let reserved = self.prealloc.reserved(|ino| !st.linked(ino));
            (st.inodes.len() as u64 + st.parked, reserved)
        };
        let root = self.store.root();
        if root.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(Posix::Invalid("store path holds NUL").into());
        }
        let s = rustix::fs::statvfs(root).map_err(|e| Error::Io {
            path: root.to_path_buf(),
            source: e.into(),
        })?;
        // Reserved space shows as used (`prealloc.rs`).
        let held = reserved.div_ceil(4096);
        Ok(StatFs {
            blocks: s.f_blocks * s.f_frsize / 4096,
            blocks_free: (s.f_bfree * s.f_frsize / 4096).saturating_sub(held),
            blocks_avail: (s.f_bavail * s.f_frsize / 4096).saturating_sub(held),
            block_size: 4096,
            files,
            files_free: u64::from(u32::MAX),
            name_max: NAME_MAX as u32,
        })
    }

    // ---------------------------------------------------------------- writes

    /// Create any kind of inode but a hardlink, in one step under the state
    /// lock: the entry, then the ACLs it inherits. When `parent` has a
    /// default ACL (and the new inode is not a symlink), the new inode's mode
    /// is masked by it instead of by the umask, it gets an access ACL unless
    /// the mode says it all, and a directory inherits the default ACL too
    /// ([`acl::Acl::create_masq`], as ext4). With `open`, the new file is
    /// also opened (O_CREAT|O_EXCL).
    pub fn make(&self, parent: u64, name: &[u8], node: &NewNode<'_>, open: bool) -> Result<Attr> {
        self.make_in(parent, Some(name), node, open)
    }

    /// A regular file with no name, open, as if made in `parent`
    /// (`O_TMPFILE`): nlink 0, its mode and ACLs as [`Fork::make`] gives a
    /// new file there. It lives while open, as a file unlinked while open;
    /// a [`Fork::link`] may give it a name, until the next commit (which
    /// keeps it alive but no longer linkable: docs/journal.md).
    pub fn tmpfile(&self, parent: u64, node: &NewNode<'_>) -> Result<Attr> {
        if node.kind != Kind::File {
            return Err(Posix::Invalid("O_TMPFILE of something other than a file").into());
        }
        self.make_in(parent, None, node, true)
    }

    /// [`Fork::make`], or with no name [`Fork::tmpfile`].
    fn make_in(
        &self,
        parent: u64,
        name: Option<&[u8]>,
        node: &NewNode<'_>,
        open: bool,
    ) -> Result<Attr> {
        let kind = node.kind;
        if kind == Kind::Symlink && node.target.is_none_or(<[u8]>::is_empty) {
            return Err(Posix::NotFound.into());
        }
        if kind != Kind::Symlink && node.target.is_some() {
            return Err(Posix::Invalid("a target for an inode that is not a symlink").into());
        }
        self.with(|st, ctx| {
            st.ensure_loaded(ctx, parent)?;
            let default = match kind {
                Kind::Symlink => None,
                _ => st.inode(parent)?.xattrs.get(acl::DEFAULT).and_then(|v| {
                    let a = acl::Acl::parse(v)?;
                    Some((a, v.clone()))
                }),
            };
            let (perm, access) = match &default {
                Some((a, _)) => {
                    let mut a = a.clone();
                    let (perm, store) = a.create_masq(node.perm);
                    (perm, store.then(|| a.encode()))
                }
                None => (node.perm & !(node.umask & 0o777), None),
            };
            let ino = match name {
                Some(name) => st.create(
                    ctx,
                    parent,
                    name,
                    kind,
                    perm,
                    node.uid,
                    node.gid,
                    node.rdev,
                    node.target.map(<[u8]>::to_vec),
                )?,
                None => st.tmpfile(ctx, parent, perm, node.uid, node.gid)?,
            };
            if let (Kind::Dir, Some((_, value))) = (kind, &default) {
                st.setxattr(ctx, ino, acl::DEFAULT, value, XattrMode::Any)?;
            }
            if let Some(value) = access {
                st.setxattr(ctx, ino, acl::ACCESS, &value, XattrMode::Any)?;
            }
            if open {
                st.open(ino)?;
            }
            Ok(st.inode(ino)?.attr(ino))
        })
    }

    /// Create a regular file, fifo, socket or device node (mknod/create).
    #[allow(clippy::too_many_arguments)] // mknod(2)'s arguments plus the owner
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
    ) -> Result<Attr> {
        if matches!(kind, Kind::Dir | Kind::Symlink) {
            return Err(Posix::Invalid("mknod of a directory or symlink").into());
        }
        let node = NewNode {
            rdev,
            ..NewNode::new(kind, perm, uid, gid)
        };
        self.make(parent, name, &node, false)
    }

    /// Create a regular file and open it (one atomic step): O_CREAT|O_EXCL.
    pub fn create_open(
        &self,
        parent: u64,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        self.make(
            parent,
            name,
            &NewNode::new(Kind::File, perm, uid, gid),
            true,
        )
    }

    /// mkdir: of callers racing for one name exactly one succeeds; the others get [`Posix::Exists`].
    pub fn mkdir(&self, parent: u64, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make(
            parent,
            name,
            &NewNode::new(Kind::Dir, perm, uid, gid),
            false,
        )
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let node = NewNode {
            target: Some(target),
            ..NewNode::new(Kind::Symlink, 0o777, uid, gid)
        };
        self.make(parent, name, &node, false)
    }

    /// A new name `new_name` in `new_parent` for inode `ino`.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Attr> {
        self.with_change(ino, |st, ctx| {
            st.link(ctx, ino, new_parent, new_name)?;
            Ok(st.inode(ino)?.attr(ino))
        })
    }

    /// unlink: an open file stays readable and writable through its handle
    /// until [`Fork::release`].
    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.with(|st, ctx| st.remove(ctx, parent, name, false))
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.with(|st, ctx| st.remove(ctx, parent, name, true))
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        self.with(|st, ctx| st.rename(ctx, parent, name, new_parent, new_name, mode))
    }

    /// [`Fork::rename`] that leaves a whiteout at the old name
    /// (`renameat2(RENAME_WHITEOUT)`, with `RENAME_NOREPLACE` when
    /// `noreplace`): a character device 0:0 with mode 0 owned by
    /// `uid`:`gid`, made in the same journal record as the rename.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_whiteout(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        noreplace: bool,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        self.with(|st, ctx| {
            st.rename_whiteout(ctx, parent, name, new_parent, new_name, noreplace, uid, gid)
        })
    }

    /// Count an open handle of `ino` (files stay alive while open).
    pub fn open_file(&self, ino: u64) -> Result<()> {
        self.with(|st, _| st.open(ino))
    }

    /// The last handle of an unlinked file going frees it.
    pub fn release(&self, ino: u64) {
        self.state.lock().release(ino, 1);
    }

    /// [`Fork::release`] of `count` handles at once (the kernel forgetting
    /// that many references). Any number, of anything, is harmless.
    pub fn release_many(&self, ino: u64, count: u64) {
        self.state.lock().release(ino, count);
    }

    /// Write `data` at `offset`; returns the bytes written (all of them).
    /// A write past the end leaves a hole.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.with_change(ino, |st, ctx| st.write(ctx, ino, Some(offset), data))?;
        self.written(ino, offset, data.len() as u64);
        self.wal.write_behind();
        Ok(data.len() as u32)
    }

    /// Write `data` at `offset` as page-cache writeback under the kernel's
    /// writeback cache: the kernel owns the file's times and sends them after
    /// the data (a `setattr`), so the file keeps its mtime (and its ctime
    /// becomes it) whichever of the two the daemon serves first.
    ///
    /// Of an append-only file, only what lies past its end is written: the
    /// kernel writes back whole pages, and the bytes of a page before the end
    /// are the file's own (nothing could change them: `flags.rs`).
    pub fn write_back(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32> {
        self.with_change(ino, |st, ctx| {
            let n = st.inode(ino)?;
            let t = n.mtime;
            let (mut offset, mut data) = (offset, data);
            if n.flags & crate::store::model::flags::APPEND != 0
                && let super::state::Data::File(f) = &n.data
            {
                let size = f.size;
                let skip = size.saturating_sub(offset).min(data.len() as u64);
                (offset, data) = (offset + skip, &data[skip as usize..]);
                if data.is_empty() {
                    return Ok(offset);
                }
            }
            st.write_at_time(ctx, ino, Some(offset), data, t)
        })?;
        self.written(ino, offset, data.len() as u64);
        self.wal.write_behind();
        Ok(data.len() as u32)
    }

    /// `copy_file_range` from file `src` to file `dst` (see
    /// [`ForkState::copy_range`]): committed data is shared, not copied;
    /// returns the bytes copied, which may be fewer than `len`.
    pub fn copy_range(
        &self,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> Result<u64> {
        let n = self.with(|st, ctx| {
            st.ensure_resident(ctx.store, src)?;
            st.ensure_changeable(ctx.store, dst)?;
            st.copy_range(ctx, src, src_off, dst, dst_off, len)
        })?;
        self.written(dst, dst_off, n);
        self.wal.write_behind();
        Ok(n)
    }

    /// O_APPEND: write at the current end, atomically with respect to other
    /// writers; returns the offset the data landed at.
    pub fn append(&self, ino: u64, data: &[u8]) -> Result<u64> {
        let at = self.with_change(ino, |st, ctx| st.write(ctx, ino, None, data))?;
        self.written(ino, at, data.len() as u64);
        self.wal.write_behind();
        Ok(at)
    }

    /// chmod, chown, utimens and truncate in one atomic step; returns the new attributes.
    pub fn setattr(&self, ino: u64, attrs: &SetAttr) -> Result<Attr> {
        self.with_change(ino, |st, ctx| {
            st.setattr(ctx, ino, attrs)?;
            if let Some(size) = attrs.size {
                self.prealloc.truncate(ino, size);
            }
            self.attr_of(st, ino)
        })
    }

    /// The `chattr` flags of `ino` (`FS_IOC_GETFLAGS`).
    pub fn flags(&self, ino: u64) -> Result<u32> {
        self.with_ino(ino, |st, _| st.flags(ino))
    }

    /// Whether the `chattr` flags of file `ino` let it be opened with the
    /// `open(2)` `flags` ([`ForkState::guard_open`]: `EPERM` where ext4
    /// refuses the open). An open changes nothing, so nothing is logged.
    pub fn guard_open(&self, ino: u64, flags: i32) -> Result<()> {
        self.with_ino(ino, |st, _| st.guard_open(ino, flags))
    }

    /// Set the `chattr` flags of `ino` (`FS_IOC_SETFLAGS`; who may is the
    /// caller's to check: `CAP_LINUX_IMMUTABLE` for `i` and `a`).
    pub fn set_flags(&self, ino: u64, flags: u32) -> Result<()> {
        self.with_change(ino, |st, ctx| st.set_flags(ctx, ino, flags))
    }

    /// `fallocate`. Mode 0 and `KeepSize` reserve the range's blocks
    /// (`prealloc.rs`): more than the free space left fails with
    /// [`Error::NoSpace`], as on ext4, before anything changes.
    pub fn fallocate(&self, ino: u64, offset: u64, len: u64, mode: Fallocate) -> Result<()> {
        let end = offset.checked_add(len).ok_or(Posix::FileTooLarge)?;
        let block = ext4::BLOCK;
        let (start, stop) = (offset - offset % block, end.saturating_add(block - 1));
        let stop = stop - stop % block;
        self.with_change(ino, |st, ctx| {
            if mode == Fallocate::PunchHole {
                st.fallocate(ctx, ino, offset, len, mode)?;
                self.prealloc.release(ino, offset, end);
                return Ok(());
            }
            if len != 0 && end <= MAX_FILE_SIZE {
                let need = self.prealloc.unreserved(ino, start, stop);
                let reserved = self.prealloc.reserved(|i| !st.linked(i));
                let root = self.store.root();
                let s = rustix::fs::statvfs(root).map_err(|e| Error::Io {
                    path: root.to_path_buf(),
                    source: e.into(),
                })?;
                let avail = (s.f_bavail * s.f_frsize).saturating_sub(reserved);
                if need > avail {
                    return Err(Error::NoSpace {
                        path: root.to_path_buf(),
                    });
                }
            }
            st.fallocate(ctx, ino, offset, len, mode)?;
            self.prealloc.add(ino, start, stop);
            Ok(())
        })
    }

    /// `len` bytes at `offset` of `ino` were written: data now, no longer
    /// reserved.
    fn written(&self, ino: u64, offset: u64, len: u64) {
        self.prealloc
            .release(ino, offset, offset.saturating_add(len));
    }

    /// setxattr by a caller who may keep a setgid bit (see [`Fork::setxattr_as`]).
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<()> {
        self.setxattr_as(ino, name, value, mode, &|_| true)
    }

    /// setxattr. An access ACL (`system.posix_acl_access`, validated by the
    /// kernel) also sets the mode's rwx bits from it, is not stored when the
    /// mode says it all, and clears setgid unless `in_group(file's gid)` (the
    /// caller is in that group or has `CAP_FSETID`), all in one step, as ext4
    /// (`posix_acl_update_mode`). ACLs ignore `mode`, as Linux does.
    pub fn setxattr_as(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
        in_group: &dyn Fn(u32) -> bool,
    ) -> Result<()> {
        if name != acl::ACCESS {
            let mode = if acl::is_acl(name) {
                XattrMode::Any
            } else {
                mode
            };
            return self.with_change(ino, |st, ctx| st.setxattr(ctx, ino, name, value, mode));
        }
        let a = acl::Acl::parse(value).ok_or(Posix::Invalid("a malformed POSIX ACL"))?;
        let (bits, equiv) = a.equiv_mode();
        self.with_change(ino, |st, ctx| {
            let n = st.inode(ino)?;
            let (old, gid, has) = (n.perm, n.gid, n.xattrs.contains_key(acl::ACCESS));
            if equiv {
                if has {
                    st.removexattr(ctx, ino, acl::ACCESS)?;
                }
            } else {
                st.setxattr(ctx, ino, acl::ACCESS, value, XattrMode::Any)?;
            }
            let mut perm = (old & !0o777) | bits;
            if perm & libc::S_ISGID != 0 && !in_group(gid) {
                perm &= !libc::S_ISGID;
            }
            let set = SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            st.setattr(ctx, ino, &set)
        })
    }

    /// removexattr; removing an ACL that is not there succeeds, as on ext4.
    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.with_change(ino, |st, ctx| {
            if acl::is_acl(name) && !st.inode(ino)?.xattrs.contains_key(name) {
                return Ok(());
            }
            st.removexattr(ctx, ino, name)
        })
    }

    /// fsync, fdatasync and fsyncdir of anything in the fork: when this
    /// returns, every change made before it was called survives a crash.
    /// Concurrent callers share one fdatasync of the journal.
    /// After [`Fork::shut_down`]: [`Error::ShutDown`].
    pub fn sync(&self) -> Result<()> {
        if self.is_shut_down() {
            return Err(self.shut_err());
        }
        self.wal.sync()
    }

    // ---------------------------------------------------------------- commit

    /// Fold the journal into a new checkpoint (parent: the current head),
    /// move the head to it and trim the journal; returns the new head. When
    /// nothing changed, the head stays and is returned (the journal is still
    /// trimmed of what it held). Writers are held up only while the journal
    /// rotates and the state is cloned, and while folded data is rebased.
    pub fn commit(&self, message: &str) -> Result<ObjectId> {
        self.commit_until(message, None)
    }

    pub(crate) fn commit_until(&self, message: &str, stop: Option<CommitStep>) -> Result<ObjectId> {
        self.commit_with(message, |s| {
            if stop == Some(s) {
                Err(Error::Posix(Posix::Invalid("simulated crash")))
            } else {
                Ok(())
            }
        })
    }

    /// A commit that calls `step` after each [`CommitStep`] (no lock held
    /// then) and stops where it fails: what crash tests and tests of
    /// changes made during a commit use.
    pub(crate) fn commit_with(
        &self,
        message: &str,
        mut step: impl FnMut(CommitStep) -> Result<()>,
    ) -> Result<ObjectId> {
        let _one = self.commit_lock.lock();
        if self.is_shut_down() {
            return Err(self.shut_err());
        }
        // Keeps `storefs gc` from sweeping until the new checkpoint and HEAD
        // are written (objects the fold wrote or found are named by then).
        let _lease = self.store.write_lease()?;
        let head = *self.head.lock();
        // (1) Rotate and snapshot under the state lock; nothing to fold:
        // HEAD is the commit (no new segment, no new checkpoint).
        let (seg, mut snap, folding, ops) = {
            let mut st = self.state.lock();
            if st.changes == 0 {
                return Ok(head.checkpoint);
            }
            let map = st.inode_map_record(&self.store)?;
            // The atimes the tree does not keep follow the map, in the same
            // synced write: a crash keeps both or neither.
            let atimes = st.atimes_record();
            let first: Vec<&[u8]> = std::iter::once(&map[..]).chain(atimes.as_deref()).collect();
            let seg = self.wal.rotate(&first)?;
            // The map lists unnamed open files as orphans, which a replay
            // from it binds empty: none may be given a name from now on.
            st.seal_tmpfiles();
            (seg, snapshot(&st), st.changes, st.ops.seal())
        };
        step(CommitStep::Rotated)?;
        // (2) Fold without it.
        let folded = fold(&mut snap, &self.store, &self.wal, &head.checkpoint)?;
        drop(snap);
        step(CommitStep::Folded)?;
        let parent = self.store.read_checkpoint(&head.checkpoint)?;
        let new = if folded.root == parent.root {
            head.checkpoint
        } else {
            let stats = folded.stats.clone();
            // The log of what this commit folds, as one object the record names.
            let ops_id = match ops.is_empty() {
                true => None,
                false => {
                    let path = self.dir.join("(operation log spill)");
                    let lines = ops.read().map_err(io_at(&path))?;
                    Some(self.store.put_object(&lines)?.0)
                }
            };
            let ckpt = Checkpoint {
                version: 1,
                root: folded.root,
                parents: vec![head.checkpoint],
                // A parent recorded before origins were checked may hold one
                // `write_checkpoint` refuses: the commit goes without it.
                origin: parent
                    .origin
                    .clone()
                    .filter(|o| crate::store::check_origin(o).is_none()),
                time_ns: now_ns(),
                message: message.to_string(),
                source: Source {
                    kind: "commit".into(),
                    path: None,
                    host: crate::sys::hostname(),
                    files: Vec::new(),
                    sha256: None,
                    stats: Some(stats),
                    git: None,
                    ops: ops_id,
                },
            };
            // Syncs objects before publishing the record.
            self.store.write_checkpoint(&ckpt)?
        };
        step(CommitStep::CheckpointWritten)?;
        // (3) Move HEAD durably.
        let new_head = ForkHead {
            checkpoint: new,
            journal_from: seg,
        };
        write_json(&*self.io, &self.dir.join(ForkHead::FILE), &new_head)?;
        *self.head.lock() = new_head;
        step(CommitStep::HeadMoved)?;
        // (4) Rebase, briefly under the state lock. Changes made since the
        // snapshot are left for the next commit.
        {
            let mut st = self.state.lock();
            st.rebase(
                seg,
                &folded.extents,
                &folded.read,
                &folded.link_ids,
                &folded.trees,
                folded.full.then_some(folded.at),
            );
            st.changes -= folding;
            st.ops.committed(&ops);
        }
        step(CommitStep::Rebased)?;
        // (5) Trim.
        self.wal.trim(seg)?;
        Ok(new)
    }

    /// The stored chunks file `ino` reads from, in file order, with the
    /// bytes of the file each covers there (tests).
    #[cfg(test)]
    pub(crate) fn base_chunks(&self, ino: u64) -> Vec<(ObjectId, u64)> {
        let plan = self
            .with_ino(ino, |st, _| st.plan_read(ino, 0, u64::MAX))
            .unwrap();
        base_chunks(&plan)
    }

    /// Whether chunk `id` is cached, and whether it is being read ahead (tests).
    #[cfg(test)]
    pub(crate) fn chunk_held(&self, id: &ObjectId) -> (bool, bool) {
        (self.cache.contains(id), self.readahead.in_flight(id))
    }

    /// The inode map record as a commit writes it, and the encoding of the
    /// [`InodeMap`](super::record::InodeMap) built from the same state.
    #[cfg(test)]
    pub(crate) fn inode_map_encodings(&self) -> (Vec<u8>, Vec<u8>) {
        let st = self.state.lock();
        (
            st.inode_map_record(&self.store).unwrap(),
            Record::InodeMap(st.inode_map(&self.store).unwrap()).encode(),
        )
    }

    /// Whether the journal held changes to the tree when the fork was
    /// opened (directory loads and inode maps do not count).
    pub fn has_uncommitted(&self) -> bool {
        self.replayed_changes > 0
    }

    /// Move the head of an open fork that holds no uncommitted changes to
    /// checkpoint `new` (e.g. one pulled from a remote), which must descend
    /// from the current head unless `force`. Returns the previous head.
    ///
    /// Opened just for this (the fork's lock is held, so it is not mounted).
    /// A changed journal is refused with [`Error::Uncommitted`]: only
    /// records that change the tree count, not directory loads. The journal
    /// restarts at segment S+1: HEAD `{new, S+1}` is written durably first,
    /// then S+1 is created with the inode map of a fresh state over `new` as
    /// its first record (numbering on from this fork's next number), then
    /// segments <= S go. A crash after HEAD leaves the
    /// old segments for the next open to delete (as after a commit) and
    /// perhaps no S+1, which the next open creates with that map.
    pub fn move_head(self, new: &ObjectId, force: bool) -> Result<ObjectId> {
        let _one = self.commit_lock.lock();
        let old = self.head.lock().checkpoint;
        if self.replayed_changes > 0 {
            return Err(Error::Uncommitted(self.info.name.clone()));
        }
        if old == *new {
            return Ok(old);
        }
        if !force && !self.store.descends_from(new, &old)? {
            return Err(Error::NotAncestor {
                name: self.info.name.clone(),
                head: old,
                new: *new,
            });
        }
        let ckpt = self.store.read_checkpoint(new)?;
        let root = self.store.root_entry(&ckpt)?;
        // Numbering goes on from where this fork's reached: a number is
        // never reused, so a file handle of an inode from before the move
        // resolves to nothing rather than to another file.
        let mut fresh = ForkState::new(&root);
        fresh.next_ino = fresh.next_ino.max(self.state.lock().next_ino);
        let map = fresh.inode_map_record(&self.store)?;
        // HEAD first: segment S+1 must not exist while HEAD names the old
        // head, whose replay would check the fresh map against its own state.
        let seg = self.wal.current_segment() + 1;
        let head = ForkHead {
            checkpoint: *new,
            journal_from: seg,
        };
        write_json(&*self.io, &self.dir.join(ForkHead::FILE), &head)?;
        *self.head.lock() = head;
        // A crash here leaves no segment S+1: the next open creates it and
        // writes its map (see `open_with`).
        let made = self.wal.rotate(&[&map])?;
        debug_assert_eq!(made, seg);
        self.wal.trim(seg)?;
        Ok(old)
    }
}

/// The stored chunks `plan` reads, in file order, each once per run of
/// pieces, with the bytes of the file it covers there.
#[cfg(test)]
fn base_chunks(plan: &super::state::ReadPlan) -> Vec<(ObjectId, u64)> {
    let mut out: Vec<(ObjectId, u64)> = Vec::new();
    for (len, src) in plan {
        if let Some(Src::Base { id, .. }) = src {
            match out.last_mut() {
                Some((last, n)) if *last == *id => *n += len,
                _ => out.push((*id, *len)),
            }
        }
    }
    out
}

/// The stored chunks a sequential reader at `offset` of file `ino` has
/// passed: their bytes in the [`DROP_WINDOW`] before `offset` less
/// [`DROP_BEHIND`] all end there (a chunk also read nearer `offset`, or
/// further on, stays).
fn passed_chunks(st: &ForkState, ino: u64, offset: u64) -> Result<Vec<ObjectId>> {
    let Some(behind) = offset.checked_sub(DROP_BEHIND) else {
        return Ok(Vec::new());
    };
    st.passed_chunks(ino, behind.saturating_sub(DROP_WINDOW), behind, offset)
}

/// A read of at most this much of a base chunk that is not cached, and not
/// part of a sequential read, decodes only the frames it touches (the
/// chunk's length is not at hand, so not a share of it as a read-only tree
/// decides; the kernel's random reads are a page or a few).
const PART_MAX: u64 = 32 << 10;

/// How much of a file before [`DROP_BEHIND`] each sequential read looks at
/// for chunks to drop (more than one read of the kernel's spans).
const DROP_WINDOW: u64 = 2 << 20;
