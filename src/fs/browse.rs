//! The browse view: the whole store as one read-only tree, on inode numbers
//! ([`View`]).
//!
//! ```text
//! /                            root
//!   checkpoints/               one directory per checkpoint id, and <id>.json
//!     <id>/                    the checkpoint's tree (a CheckpointView of its own)
//!     <id>.json                the checkpoint record, byte for byte
//!     <id>.ops.jsonl           a commit's operation log (when it has one:
//!                              `storefs ops`, docs/format.md "Operation logs")
//!   refs/<name>                symlink -> ../checkpoints/<id>
//!   forks/<name>/head          symlink -> ../../checkpoints/<head id>
//!   forks/<name>/history/<n>-<id>   symlinks, n = 0 at the fork point up to the head
//!   archives/<name>            symlink -> ../checkpoints/<id>, one per archive index entry
//!   git/<commit>               symlink -> ../checkpoints/<id>, one per imported git commit
//! ```
//!
//! **Inode numbers.** The top 24 bits of an inode number say whose it is: 0 for
//! the store's own nodes ([`Node`]: the root, the listings, the `.json` files
//! and the symlinks), `k >= 1` for the `k`-th checkpoint seen since the mount
//! started, whose tree is served by its own [`CheckpointView`] (sharing one chunk
//! cache) with its local inode numbers in the low 40 bits. A store node's
//! number is keyed by everything it shows (a ref's number is for that name
//! *and* that target), so a moved ref gets a new inode and the kernel can never
//! serve the old target from its caches; numbers are never reused.
//!
//! **Freshness.** The store's own nodes (the root, `checkpoints/`, `refs/`,
//! `forks/…`, `archives/`, `git/`) change: their listings are re-read on every
//! `opendir` and `lookup`, their entries and attributes live [`STORE_TTL`],
//! and their directories are opened without a directory cache, so new
//! checkpoints, refs and forks show within a second. A checkpoint's tree never
//! changes: it is cached like a checkpoint mount's, and its directories are
//! opened with the kernel keeping their listings (`opendir` cannot be
//! zero-message here: the kernel would then cache the store's listings too).
//! `open` is zero-message for every file: each is immutable (a `<id>.json`
//! record too). Cached symlink targets are safe: a store symlink's inode is
//! tied to its target (a moved ref is a new inode).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use super::caches::Caches;
use super::checkpoint::{self, CheckpointView};
use super::view::{
    self, AddItem, BLOCK_SIZE, Caller, Capability, DirItem, Entry, Opened, Readdir, View,
    XattrReply,
};
use super::{FsError, Result};
use crate::journal;
use crate::store::model::{Attr, NAME_MAX, Posix, ROOT_INO, StatFs, ext4};
use crate::store::{Kind, ObjectId, Store};

/// Bits of an inode number local to one checkpoint's tree.
const LOCAL_BITS: u32 = 40;
const LOCAL_MASK: u64 = (1 << LOCAL_BITS) - 1;
/// The most checkpoints one mount can show (slot numbers fill the top 24 bits).
const MAX_SLOTS: u64 = (1 << (64 - LOCAL_BITS)) - 1;

/// What the mount keeps for good, about, charged to the directory cache's
/// budget ([`Caches`]): per store node (in the table and its map), per
/// checkpoint seen (its slot), per checkpoint tree served (its view, inode
/// table and root node), per record read (beyond its bytes).
const KEPT_NODE_BYTES: usize = 2 * std::mem::size_of::<Node>() + 96;
const KEPT_SLOT_BYTES: usize = std::mem::size_of::<Slot>() + 96;
const KEPT_TREE_BYTES: usize = 1024;
const KEPT_RECORD_BYTES: usize = 96;

/// How long the kernel may cache the store's own entries and attributes.
const STORE_TTL: Duration = Duration::from_secs(1);

/// Whether `ino` is one of the store's own nodes, whose listings and links
/// change (rather than part of a checkpoint's tree, which never does).
fn is_store_node(ino: u64) -> bool {
    ino >> LOCAL_BITS == 0
}

/// The TTL of entries found in, or of the attributes of, `ino`.
fn ttl(ino: u64) -> Duration {
    if is_store_node(ino) {
        STORE_TTL
    } else {
        checkpoint::TTL
    }
}

/// A node of the store's own tree (everything outside the checkpoints' trees).
/// Each value is one inode; it holds all that the node shows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Root,
    /// `checkpoints/`
    Checkpoints,
    /// `refs/`
    Refs,
    /// `forks/`
    Forks,
    /// `archives/`
    Archives,
    /// `git/`
    Git,
    /// `checkpoints/<id>.json`
    Record(ObjectId),
    /// `checkpoints/<id>.ops.jsonl`: the operation log checkpoint `id` names.
    OpsLog(ObjectId),
    /// `refs/<name>` -> `../checkpoints/<id>`
    Ref {
        name: String,
        target: ObjectId,
    },
    /// `forks/<name>/`
    Fork(String),
    /// `forks/<name>/head` -> `../../checkpoints/<id>`
    ForkHead {
        fork: String,
        target: ObjectId,
    },
    /// `forks/<name>/history/`
    History(String),
    /// `forks/<name>/history/<n>-<id>` -> `../../../checkpoints/<id>`
    HistoryLink {
        fork: String,
        n: usize,
        target: ObjectId,
    },
    /// `archives/<name>` -> `../checkpoints/<id>`
    Archive {
        name: String,
        target: ObjectId,
    },
    /// `git/<commit>` -> `../checkpoints/<id>`
    GitCommit {
        commit: String,
        target: ObjectId,
    },
}

/// The fixed nodes, numbered 1..=6 in this order.
const FIXED: [Node; 6] = [
    Node::Root,
    Node::Checkpoints,
    Node::Refs,
    Node::Forks,
    Node::Archives,
    Node::Git,
];

impl Node {
    /// The directory holding this node (directories only; the root is its own).
    fn parent(&self) -> Node {
        match self {
            Node::Root
            | Node::Checkpoints
            | Node::Refs
            | Node::Forks
            | Node::Archives
            | Node::Git => Node::Root,
            Node::Record(_) | Node::OpsLog(_) => Node::Checkpoints,
            Node::Ref { .. } => Node::Refs,
            Node::Fork(_) => Node::Forks,
            Node::ForkHead { fork, .. } | Node::History(fork) => Node::Fork(fork.clone()),
            Node::HistoryLink { fork, .. } => Node::History(fork.clone()),
            Node::Archive { .. } => Node::Archives,
            Node::GitCommit { .. } => Node::Git,
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Node::Root
            | Node::Checkpoints
            | Node::Refs
            | Node::Forks
            | Node::Archives
            | Node::Git
            | Node::Fork(_)
            | Node::History(_) => Kind::Dir,
            Node::Record(_) | Node::OpsLog(_) => Kind::File,
            Node::Ref { .. }
            | Node::ForkHead { .. }
            | Node::HistoryLink { .. }
            | Node::Archive { .. }
            | Node::GitCommit { .. } => Kind::Symlink,
        }
    }

    /// A symlink's target.
    fn target(&self) -> Option<String> {
        let (up, id) = match self {
            Node::Ref { target, .. }
            | Node::Archive { target, .. }
            | Node::GitCommit { target, .. } => ("..", target),
            Node::ForkHead { target, .. } => ("../..", target),
            Node::HistoryLink { target, .. } => ("../../..", target),
            _ => return None,
        };
        Some(format!("{up}/checkpoints/{id}"))
    }
}

/// An entry of a store directory: a store node or a checkpoint's root.
#[derive(Clone, Debug)]
enum Child {
    Node(Node),
    Checkpoint(ObjectId),
}

/// One listing of a store directory, taken at `opendir` and kept until
/// `releasedir`, so that a listing read in several replies is consistent.
type Listing = Vec<(Vec<u8>, Child)>;

/// One checkpoint's tree, loaded on first use.
struct Slot {
    id: ObjectId,
    fs: RwLock<Option<Arc<CheckpointView>>>,
}

/// Store nodes <-> inode numbers, and checkpoints <-> slots.
#[derive(Default)]
struct Table {
    nodes: Vec<Node>,
    node_inos: HashMap<Node, u64>,
    slots: Vec<Arc<Slot>>,
    slot_of: HashMap<ObjectId, u64>,
}

/// The whole store, served read-only.
pub struct BrowseView {
    store: Arc<Store>,
    /// Shared by every checkpoint's tree.
    caches: Caches,
    mountpoint: PathBuf,
    table: RwLock<Table>,
    /// Verified checkpoint records (they never change).
    records: RwLock<HashMap<ObjectId, Arc<Vec<u8>>>>,
    /// The operation log read last (by its object id).
    last_ops: Mutex<Option<(ObjectId, Arc<Vec<u8>>)>>,
    listings: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    /// Owner and times of the store's own nodes: the mount's owner, its start.
    uid: u32,
    gid: u32,
    started_ns: i64,
    /// Its inodes' generation ([`View::generation`]): its numbers (store
    /// nodes, checkpoint slots, their trees' inodes) are this mount's own.
    generation: u64,
}

impl BrowseView {
    pub fn new(store: Arc<Store>, caches: Caches, mountpoint: PathBuf) -> BrowseView {
        let table = Table {
            nodes: FIXED.to_vec(),
            node_inos: FIXED.iter().cloned().zip(1..).collect(),
            ..Table::default()
        };
        let started_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        BrowseView {
            store,
            caches,
            mountpoint,
            table: RwLock::new(table),
            records: RwLock::new(HashMap::new()),
            last_ops: Mutex::new(None),
            listings: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            started_ns,
            generation: view::mount_generation(),
        }
    }
}

impl View for BrowseView {
    fn capabilities(&self) -> &'static [Capability] {
        view::READ_ONLY_CAPABILITIES
    }

    fn generation(&self) -> u64 {
        self.generation
    }

    /// Inside a checkpoint's tree, absent names stay absent; the store's own
    /// listings gain names as checkpoints are made, so those are asked again.
    fn negative_ttl(&self, parent: u64) -> Option<Duration> {
        (!is_store_node(parent)).then(|| ttl(parent))
    }

    fn lookup(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<Entry> {
        let attr = match self.resolve(parent)? {
            Resolved::Tree(_, _, local) if local == ROOT_INO && name == b".." => {
                self.node_attr(&Node::Checkpoints, 2)
            }
            Resolved::Tree(slot, fs, local) => {
                self.global_attr(slot, fs.lookup(c, local, name)?.attr)?
            }
            Resolved::Node(node) => {
                let child = match name {
                    b"." => Child::Node(node.clone()),
                    b".." => Child::Node(node.parent()),
                    _ => self.find(&node, name)?.ok_or(Posix::NotFound)?,
                };
                self.child_attr(c, &child)?
            }
        };
        Ok(Entry {
            attr,
            ttl: ttl(parent),
        })
    }

    fn getattr(&self, c: &Caller, ino: u64) -> Result<Entry> {
        let attr = match self.resolve(ino)? {
            Resolved::Tree(slot, fs, local) => {
                self.global_attr(slot, fs.getattr(c, local)?.attr)?
            }
            Resolved::Node(node) => self.node_attr(&node, ino),
        };
        Ok(Entry {
            attr,
            ttl: ttl(ino),
        })
    }

    /// A store directory's listing is read now; a checkpoint's directory
    /// keeps its listing in the kernel's cache.
    fn opendir(&self, c: &Caller, ino: u64) -> Result<Opened> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => {
                fs.opendir(c, local)?;
                Ok(Opened::Handle {
                    fh: 0,
                    keep_cache: true,
                })
            }
            Resolved::Node(node) => {
                let listing = Arc::new(self.list(&node)?);
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.listings.lock().insert(fh, listing);
                Ok(Opened::Handle {
                    fh,
                    keep_cache: false,
                })
            }
        }
    }

    fn releasedir(&self, _: &Caller, fh: u64) {
        self.listings.lock().remove(&fh);
    }

    /// Every item carries its attributes. `at.fh` is what `opendir` gave; an
    /// unknown handle lists afresh.
    fn readdir(&self, c: &Caller, ino: u64, at: Readdir, add: &mut AddItem<'_>) -> Result<()> {
        let node = match self.resolve(ino)? {
            Resolved::Tree(slot, fs, local) => {
                let mut failed = None;
                fs.readdir(c, local, at, &mut |mut item| {
                    if local == ROOT_INO && item.name == b".." {
                        let attr = self.node_attr(&Node::Checkpoints, 2);
                        let entry = Entry {
                            attr,
                            ttl: ttl(ino),
                        };
                        item = DirItem::with(item.next_offset, item.name, entry);
                    } else {
                        match self.global(slot, item.ino) {
                            Ok(global) => item.ino = global,
                            Err(e) => {
                                failed = Some(e);
                                return true;
                            }
                        }
                        if let Some(entry) = &mut item.entry {
                            entry.attr.ino = item.ino;
                        }
                    }
                    add(item)
                })?;
                return failed.map_or(Ok(()), Err);
            }
            Resolved::Node(node) => node,
        };
        let listing = match self.listings.lock().get(&at.fh) {
            Some(l) => l.clone(),
            None => Arc::new(self.list(&node)?),
        };
        let dots = [
            (b".".to_vec(), Child::Node(node.clone())),
            (b"..".to_vec(), Child::Node(node.parent())),
        ];
        let start = usize::try_from(at.offset).unwrap_or(usize::MAX);
        for (i, (name, child)) in dots.iter().chain(listing.iter()).enumerate().skip(start) {
            let attr = match self.child_attr(c, child) {
                Ok(attr) => attr,
                // Listed anyway (as a directory or file with no permissions);
                // using it fails with the error, which was logged.
                Err(_) => self.placeholder_attr(child)?,
            };
            let entry = Entry {
                attr,
                ttl: ttl(ino),
            };
            if add(DirItem::with(i as u64 + 1, name, entry)) {
                break;
            }
        }
        Ok(())
    }

    /// Only for reading, and zero-message: every file here is immutable.
    fn open(&self, c: &Caller, ino: u64, flags: i32) -> Result<Opened> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.open(c, local, flags),
            Resolved::Node(_) => view::open_read_only(flags),
        }
    }

    fn access(&self, _: &Caller, ino: u64, mask: i32) -> Result<()> {
        self.resolve(ino)?;
        view::access_read_only(mask)
    }

    fn read(&self, c: &Caller, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.read(c, local, offset, size),
            Resolved::Node(node @ (Node::Record(_) | Node::OpsLog(_))) => {
                let bytes = self.file_bytes(&node)?;
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let end = start.saturating_add(size as usize).min(bytes.len());
                Ok(bytes[start..end].to_vec())
            }
            Resolved::Node(node) if node.kind() == Kind::Dir => Err(Posix::IsDir.into()),
            Resolved::Node(_) => Err(Posix::Invalid("not a regular file").into()),
        }
    }

    /// From the extents inside a checkpoint; a record file is all data.
    fn seek(&self, c: &Caller, ino: u64, offset: i64, whence: ext4::Seek) -> Result<Option<u64>> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.seek(c, local, offset, whence),
            Resolved::Node(node @ (Node::Record(_) | Node::OpsLog(_))) => {
                let size = self.file_bytes(&node)?.len() as u64;
                Ok(ext4::seek(size, [(0, size)], offset, whence))
            }
            Resolved::Node(node) if node.kind() == Kind::Dir => Err(Posix::IsDir.into()),
            Resolved::Node(_) => Err(Posix::Invalid("not a regular file").into()),
        }
    }

    fn readlink(&self, c: &Caller, ino: u64) -> Result<Vec<u8>> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.readlink(c, local),
            Resolved::Node(node) => node
                .target()
                .map(String::into_bytes)
                .ok_or(Posix::NotSymlink.into()),
        }
    }

    fn getxattr(&self, c: &Caller, ino: u64, name: &[u8], size: u32) -> Result<XattrReply> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.getxattr(c, local, name, size),
            Resolved::Node(_) => Err(Posix::NoXattr.into()),
        }
    }

    fn get_flags(&self, c: &Caller, ino: u64) -> Result<u32> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.get_flags(c, local),
            Resolved::Node(_) => Ok(0),
        }
    }

    fn listxattr(&self, c: &Caller, ino: u64, size: u32) -> Result<XattrReply> {
        match self.resolve(ino)? {
            Resolved::Tree(_, fs, local) => fs.listxattr(c, local, size),
            Resolved::Node(_) => view::sized(Vec::new(), size),
        }
    }

    /// Nothing is free, and the totals are not known without reading every
    /// checkpoint: the checkpoints and nodes seen so far are counted.
    fn statfs(&self, _: &Caller) -> Result<StatFs> {
        let t = self.table.read();
        Ok(StatFs {
            blocks: 0,
            blocks_free: 0,
            blocks_avail: 0,
            block_size: BLOCK_SIZE,
            files: (t.nodes.len() + t.slots.len()) as u64,
            files_free: 0,
            name_max: NAME_MAX as u32,
        })
    }
}

impl BrowseView {
    // ---- inode numbers ----

    fn resolve(&self, ino: u64) -> Result<Resolved> {
        let (slot, local) = (ino >> LOCAL_BITS, ino & LOCAL_MASK);
        if slot == 0 {
            let node = usize::try_from(local)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| self.table.read().nodes.get(i).cloned())
                .ok_or(FsError::UnknownInode(ino))?;
            return Ok(Resolved::Node(node));
        }
        let s = self
            .table
            .read()
            .slots
            .get((slot - 1) as usize)
            .cloned()
            .ok_or(FsError::UnknownInode(ino))?;
        Ok(Resolved::Tree(slot, self.tree(&s)?, local))
    }

    /// The inode number of a store node, assigned on first sight.
    fn node_ino(&self, node: &Node) -> Result<u64> {
        if let Some(&ino) = self.table.read().node_inos.get(node) {
            return Ok(ino);
        }
        let mut t = self.table.write();
        if let Some(&ino) = t.node_inos.get(node) {
            return Ok(ino);
        }
        let ino = t.nodes.len() as u64 + 1;
        if ino > LOCAL_MASK {
            return Err(Posix::Invalid("too many store nodes for one mount").into());
        }
        t.nodes.push(node.clone());
        t.node_inos.insert(node.clone(), ino);
        self.caches.dirs.keep(KEPT_NODE_BYTES);
        Ok(ino)
    }

    /// The slot number of a checkpoint, assigned on first sight.
    fn slot_of(&self, id: &ObjectId) -> Result<(u64, Arc<Slot>)> {
        let get = |t: &Table| {
            t.slot_of
                .get(id)
                .map(|&k| (k, t.slots[(k - 1) as usize].clone()))
        };
        if let Some(found) = get(&self.table.read()) {
            return Ok(found);
        }
        let mut t = self.table.write();
        if let Some(found) = get(&t) {
            return Ok(found);
        }
        let k = t.slots.len() as u64 + 1;
        if k > MAX_SLOTS {
            return Err(Posix::Invalid("too many checkpoints for one mount").into());
        }
        let slot = Arc::new(Slot {
            id: *id,
            fs: RwLock::new(None),
        });
        t.slots.push(slot.clone());
        self.caches.dirs.keep(KEPT_SLOT_BYTES);
        t.slot_of.insert(*id, k);
        Ok((k, slot))
    }

    /// A checkpoint's tree, loading its record and root on first use. A
    /// failure is not remembered: the next use tries again.
    fn tree(&self, slot: &Slot) -> Result<Arc<CheckpointView>> {
        if let Some(fs) = slot.fs.read().as_ref() {
            return Ok(fs.clone());
        }
        let id = slot.id;
        let loaded = self
            .store
            .read_checkpoint(&id)
            .and_then(|record| Ok((self.store.root_entry(&record)?, record)));
        let (root, record) = loaded.map_err(|e| {
            tracing::warn!(checkpoint = %id, error = %e, "cannot load checkpoint; it gets EIO");
            FsError::Store(e)
        })?;
        let fs = Arc::new(CheckpointView::new(
            self.store.clone(),
            root,
            &self.caches,
            self.mountpoint.join("checkpoints").join(id.to_hex()),
            record.source.stats,
        ));
        // Another thread may have loaded it meanwhile: keep the first.
        let mut kept = slot.fs.write();
        if kept.is_none() {
            self.caches.dirs.keep(KEPT_TREE_BYTES);
        }
        Ok(kept.get_or_insert(fs).clone())
    }

    /// The mount's inode number of a checkpoint tree's inode `local`.
    fn global(&self, slot: u64, local: u64) -> Result<u64> {
        if local > LOCAL_MASK {
            return Err(Posix::Invalid("too many inodes in one checkpoint").into());
        }
        Ok(local | slot << LOCAL_BITS)
    }

    /// A checkpoint tree's attributes with the inode number made global.
    fn global_attr(&self, slot: u64, mut attr: Attr) -> Result<Attr> {
        attr.ino = self.global(slot, attr.ino)?;
        Ok(attr)
    }

    // ---- attributes ----

    fn child_attr(&self, c: &Caller, child: &Child) -> Result<Attr> {
        match child {
            Child::Node(node) => Ok(self.node_attr(node, self.node_ino(node)?)),
            Child::Checkpoint(id) => {
                let (k, slot) = self.slot_of(id)?;
                let root = self.tree(&slot)?.getattr(c, ROOT_INO)?;
                self.global_attr(k, root.attr)
            }
        }
    }

    /// Listed attributes for a child whose own could not be loaded.
    fn placeholder_attr(&self, child: &Child) -> Result<Attr> {
        let (ino, kind) = match child {
            Child::Node(node) => (self.node_ino(node)?, node.kind()),
            Child::Checkpoint(id) => ((self.slot_of(id)?.0 << LOCAL_BITS) | ROOT_INO, Kind::Dir),
        };
        let mut attr = self.base_attr(ino, kind);
        attr.perm = 0;
        Ok(attr)
    }

    fn base_attr(&self, ino: u64, kind: Kind) -> Attr {
        // The store's directories: one ext4 block, whatever they list.
        let (size, blocks) = match kind {
            Kind::Dir => ext4::dir_size([]),
            _ => (0, 0),
        };
        Attr {
            ino,
            kind,
            perm: if kind == Kind::Dir { 0o555 } else { 0o444 },
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            size,
            blocks,
            atime_ns: self.started_ns,
            mtime_ns: self.started_ns,
            ctime_ns: self.started_ns,
        }
    }

    fn node_attr(&self, node: &Node, ino: u64) -> Attr {
        let mut attr = self.base_attr(ino, node.kind());
        match node {
            Node::Record(id) | Node::OpsLog(id) => {
                // The record file's size and time (an operation log's size,
                // the record's time); a record that went away still stats
                // (reading it fails).
                if let Ok(Some(meta)) = self.store.checkpoint_record_metadata(id) {
                    let len = match node {
                        Node::OpsLog(_) => self.file_bytes(node).map_or(0, |b| b.len() as u64),
                        _ => meta.len(),
                    };
                    attr.size = len;
                    attr.blocks = ext4::file_blocks(len, [(0, len)]);
                    attr.mtime_ns = meta
                        .mtime()
                        .saturating_mul(1_000_000_000)
                        .saturating_add(meta.mtime_nsec());
                    attr.atime_ns = attr.mtime_ns;
                    attr.ctime_ns = attr.mtime_ns;
                }
            }
            _ => {
                if let Some(target) = node.target() {
                    attr.perm = 0o777;
                    attr.size = target.len() as u64;
                    attr.blocks = ext4::symlink_blocks(attr.size);
                }
            }
        }
        attr
    }

    // ---- the store's listings ----

    /// The entry `name` of store directory `node`, read from the store now.
    fn find(&self, node: &Node, name: &[u8]) -> Result<Option<Child>> {
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(None);
        };
        Ok(match node {
            Node::Root => FIXED[1..]
                .iter()
                .find(|n| root_name(n) == Some(name))
                .cloned()
                .map(Child::Node),
            Node::Checkpoints => {
                // `<id>`, `<id>.json` or `<id>.ops.jsonl`.
                let (hex, suffix) = [".ops.jsonl", ".json"]
                    .into_iter()
                    .find_map(|s| Some((name.strip_suffix(s)?, s)))
                    .unwrap_or((name, ""));
                match ObjectId::from_hex(hex).filter(|id| id.to_hex() == hex) {
                    Some(id) if self.record_exists(&id)? => match suffix {
                        ".json" => Some(Child::Node(Node::Record(id))),
                        "" => Some(Child::Checkpoint(id)),
                        _ => self.ops_of(&id).map(|_| Child::Node(Node::OpsLog(id))),
                    },
                    _ => None,
                }
            }
            Node::Refs => self.store.get_ref(name)?.map(|target| {
                Child::Node(Node::Ref {
                    name: name.to_string(),
                    target,
                })
            }),
            Node::Forks => self
                .store
                .fork_head(name)?
                .map(|_| Child::Node(Node::Fork(name.to_string()))),
            Node::Fork(fork) => match name {
                "head" => self.store.fork_head(fork)?.map(|target| {
                    Child::Node(Node::ForkHead {
                        fork: fork.clone(),
                        target,
                    })
                }),
                "history" => self
                    .store
                    .fork_head(fork)?
                    .map(|_| Child::Node(Node::History(fork.clone()))),
                _ => None,
            },
            Node::History(_) | Node::Archives | Node::Git => self
                .list(node)?
                .into_iter()
                .find(|(n, _)| n == name.as_bytes())
                .map(|(_, c)| c),
            _ => return Err(Posix::NotDir.into()),
        })
    }

    /// The entries of store directory `node` (without "." and ".."), sorted.
    fn list(&self, node: &Node) -> Result<Listing> {
        let named = |name: String, node: Node| (name.into_bytes(), Child::Node(node));
        let mut out: Listing = match node {
            Node::Root => FIXED[1..]
                .iter()
                .filter_map(|n| Some(named(root_name(n)?.to_string(), n.clone())))
                .collect(),
            Node::Checkpoints => {
                let mut out = Vec::new();
                for id in self.store.list_checkpoints()? {
                    out.push((id.to_hex().into_bytes(), Child::Checkpoint(id)));
                    out.push(named(format!("{id}.json"), Node::Record(id)));
                    if self.ops_of(&id).is_some() {
                        out.push(named(format!("{id}.ops.jsonl"), Node::OpsLog(id)));
                    }
                }
                out
            }
            Node::Refs => self
                .store
                .list_refs()?
                .into_iter()
                .map(|(name, target)| {
                    let node = Node::Ref {
                        name: name.clone(),
                        target,
                    };
                    named(name, node)
                })
                .collect(),
            Node::Forks => self
                .store
                .list_forks()?
                .into_iter()
                .map(|(name, _)| named(name.clone(), Node::Fork(name)))
                .collect(),
            Node::Fork(fork) => match self.store.fork_head(fork)? {
                None => Vec::new(),
                Some(target) => vec![
                    named(
                        "head".into(),
                        Node::ForkHead {
                            fork: fork.clone(),
                            target,
                        },
                    ),
                    named("history".into(), Node::History(fork.clone())),
                ],
            },
            Node::History(fork) => self.history(fork)?,
            Node::Archives => self
                .store
                .list_archives()
                .map_err(store_err)?
                .into_iter()
                .map(|(name, target)| {
                    let node = Node::Archive {
                        name: name.clone(),
                        target,
                    };
                    named(name, node)
                })
                .collect(),
            Node::Git => self
                .store
                .list_git()
                .map_err(store_err)?
                .into_iter()
                .map(|(commit, target)| {
                    let node = Node::GitCommit {
                        commit: commit.clone(),
                        target,
                    };
                    named(commit, node)
                })
                .collect(),
            _ => return Err(Posix::NotDir.into()),
        };
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// A fork's history, from the fork point (0) to the head.
    fn history(&self, fork: &str) -> Result<Listing> {
        let log = match journal::fork_log(&self.store, fork) {
            Ok(log) => log,
            Err(journal::Error::NoFork(_)) => return Ok(Vec::new()),
            Err(e) => {
                tracing::warn!(fork, error = %e, "cannot read the fork's history");
                return Err(e.into());
            }
        };
        Ok(log
            .into_iter()
            .rev()
            .enumerate()
            .map(|(n, (target, _))| {
                let node = Node::HistoryLink {
                    fork: fork.to_string(),
                    n,
                    target,
                };
                (format!("{n}-{target}").into_bytes(), Child::Node(node))
            })
            .collect())
    }

    fn record_exists(&self, id: &ObjectId) -> Result<bool> {
        let meta = self.store.checkpoint_record_metadata(id);
        Ok(meta.map_err(store_err)?.is_some())
    }

    /// The operation log checkpoint `id` names, if it names one (and its
    /// record can be read).
    fn ops_of(&self, id: &ObjectId) -> Option<ObjectId> {
        let bytes = self.record(id).ok()?;
        let ck: crate::store::Checkpoint = serde_json::from_slice(&bytes).ok()?;
        ck.source.ops
    }

    /// The bytes of a record or operation log file. The last operation log
    /// read is kept (the kernel reads a file in pieces).
    fn file_bytes(&self, node: &Node) -> Result<Arc<Vec<u8>>> {
        let id = match node {
            Node::Record(id) => return self.record(id),
            Node::OpsLog(id) => id,
            _ => return Err(Posix::Invalid("not a regular file").into()),
        };
        let obj = self.ops_of(id).ok_or(Posix::NotFound)?;
        let mut last = self.last_ops.lock();
        if let Some((at, bytes)) = &*last
            && *at == obj
        {
            return Ok(bytes.clone());
        }
        let context = format!("operation log of checkpoint {id}");
        let bytes = Arc::new(self.store.get_object(&obj, &context).map_err(store_err)?);
        *last = Some((obj, bytes.clone()));
        Ok(bytes)
    }

    /// A checkpoint record's bytes, checked against its id.
    fn record(&self, id: &ObjectId) -> Result<Arc<Vec<u8>>> {
        if let Some(bytes) = self.records.read().get(id) {
            return Ok(bytes.clone());
        }
        let bytes = Arc::new(self.store.checkpoint_record_bytes(id).map_err(store_err)?);
        if self.records.write().insert(*id, bytes.clone()).is_none() {
            self.caches.dirs.keep(bytes.len() + KEPT_RECORD_BYTES);
        }
        Ok(bytes)
    }
}

/// What an inode number stands for.
enum Resolved {
    Node(Node),
    /// A checkpoint's tree: its slot, its filesystem, the local inode number.
    Tree(u64, Arc<CheckpointView>, u64),
}

/// The name of a fixed node in the root.
fn root_name(node: &Node) -> Option<&'static str> {
    match node {
        Node::Checkpoints => Some("checkpoints"),
        Node::Refs => Some("refs"),
        Node::Forks => Some("forks"),
        Node::Archives => Some("archives"),
        Node::Git => Some("git"),
        _ => None,
    }
}

fn store_err(e: crate::store::Error) -> FsError {
    tracing::warn!(error = %e, "store read failed; it gets EIO");
    FsError::Store(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ArchiveRecord, Checkpoint, Content, Entry, Extent, Source, Tree};

    use crate::fs::testing::{self, ROOT as C, fh, plus};

    fn entry(name: &str, kind: Kind, content: Content, size: u64) -> Entry {
        Entry {
            perm: 0o755,
            size,
            ..testing::entry(name, kind, content)
        }
    }

    /// A checkpoint whose root holds one file `f` with `data`.
    fn checkpoint(store: &Store, data: &[u8], parents: Vec<ObjectId>) -> ObjectId {
        let (chunk, _) = store.put_object(data).unwrap();
        let extents = vec![Extent {
            len: data.len() as u64,
            id: Some(chunk),
        }];
        let file = entry(
            "f",
            Kind::File,
            Content::Extents(extents),
            data.len() as u64,
        );
        let (tree, _) = store
            .put_tree(&Tree {
                entries: vec![file],
            })
            .unwrap();
        let (root, _) = store
            .put_root(entry("", Kind::Dir, Content::Tree(tree), 0))
            .unwrap();
        store
            .write_checkpoint(&Checkpoint {
                source: Source {
                    kind: "snapshot".into(),
                    ..Source::default()
                },
                ..testing::checkpoint(root, parents, String::from_utf8_lossy(data).into_owned())
            })
            .unwrap()
    }

    fn browse() -> (tempfile::TempDir, Arc<Store>, BrowseView) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_or_create(&dir.path().join("s")).unwrap());
        let fs = BrowseView::new(store.clone(), Caches::new(1 << 20), "/b".into());
        (dir, store, fs)
    }

    /// Directory `ino`'s whole listing with attributes, through a handle.
    fn listing(fs: &BrowseView, ino: u64) -> Vec<(String, crate::fs::view::Entry)> {
        let fh = fh(fs.opendir(C, ino).unwrap());
        let mut out = Vec::new();
        fs.readdir(C, ino, plus(fh, 0), &mut |item| {
            let name = String::from_utf8(item.name.to_vec()).unwrap();
            out.push((name, item.entry.unwrap()));
            false
        })
        .unwrap();
        fs.releasedir(C, fh);
        out
    }

    fn path(fs: &BrowseView, path: &str) -> Attr {
        let mut attr = fs.getattr(C, ROOT_INO).unwrap().attr;
        for name in path.split('/') {
            attr = fs.lookup(C, attr.ino, name.as_bytes()).unwrap().attr;
        }
        attr
    }

    #[test]
    fn trees_get_their_own_inode_ranges_and_records_read_back() {
        let (_dir, store, fs) = browse();
        let a = checkpoint(&store, b"one", vec![]);
        let b = checkpoint(&store, b"two", vec![a]);
        let names: Vec<String> = listing(&fs, 2).into_iter().map(|(n, _)| n).collect();
        let mut want = vec![
            ".".to_string(),
            "..".into(),
            a.to_hex(),
            format!("{a}.json"),
            b.to_hex(),
            format!("{b}.json"),
        ];
        want[2..].sort();
        assert_eq!(names, want);
        let fa = path(&fs, &format!("checkpoints/{a}/f"));
        let fb = path(&fs, &format!("checkpoints/{b}/f"));
        assert!(!is_store_node(fa.ino) && !is_store_node(fb.ino));
        assert_ne!(
            fa.ino >> LOCAL_BITS,
            fb.ino >> LOCAL_BITS,
            "one range per tree"
        );
        assert_eq!(fs.read(C, fa.ino, 0, 100).unwrap(), b"one");
        assert_eq!(fs.read(C, fb.ino, 1, 100).unwrap(), b"wo");
        // ".." of a checkpoint's root is checkpoints/.
        let root_a = path(&fs, &format!("checkpoints/{a}"));
        assert_eq!(fs.lookup(C, root_a.ino, b"..").unwrap().attr.ino, 2);
        let rec = path(&fs, &format!("checkpoints/{b}.json"));
        let bytes = fs.read(C, rec.ino, 0, 1 << 20).unwrap();
        assert_eq!(ObjectId::of(&bytes), b);
        assert_eq!(rec.size, bytes.len() as u64);
        assert!(matches!(
            fs.lookup(
                C,
                2,
                b"0000000000000000000000000000000000000000000000000000000000000000"
            ),
            Err(FsError::Posix(Posix::NotFound))
        ));
        assert!(matches!(
            fs.lookup(C, 2, a.to_hex().to_uppercase().as_bytes()),
            Err(FsError::Posix(Posix::NotFound))
        ));
    }

    #[test]
    fn store_nodes_live_a_second_and_trees_a_day() {
        let (_dir, store, fs) = browse();
        let a = checkpoint(&store, b"one", vec![]);
        let ttls =
            |ino| -> Vec<Duration> { listing(&fs, ino).into_iter().map(|(_, e)| e.ttl).collect() };
        // Found in a store directory (a checkpoint's root too): short.
        let root_a = fs.lookup(C, 2, a.to_hex().as_bytes()).unwrap();
        assert_eq!(root_a.ttl, STORE_TTL);
        assert!(ttls(2).iter().all(|&t| t == STORE_TTL));
        assert_eq!(fs.getattr(C, 2).unwrap().ttl, STORE_TTL);
        // In a checkpoint's tree, ".." of its root too: long.
        let root_a = root_a.attr.ino;
        assert_eq!(fs.getattr(C, root_a).unwrap().ttl, checkpoint::TTL);
        assert_eq!(fs.lookup(C, root_a, b"f").unwrap().ttl, checkpoint::TTL);
        assert_eq!(fs.lookup(C, root_a, b"..").unwrap().ttl, checkpoint::TTL);
        assert!(ttls(root_a).iter().all(|&t| t == checkpoint::TTL));
        assert_eq!(ttls(root_a).len(), 3);
        // Absent names: remembered in a tree, asked again in the store's
        // directories (a new checkpoint adds names there).
        assert_eq!(fs.negative_ttl(root_a), Some(checkpoint::TTL));
        for store_dir in [1, 2] {
            assert_eq!(fs.negative_ttl(store_dir), None);
        }
    }

    #[test]
    fn a_moved_ref_is_a_new_inode_with_the_new_target() {
        let (_dir, store, fs) = browse();
        let a = checkpoint(&store, b"one", vec![]);
        let b = checkpoint(&store, b"two", vec![a]);
        store.set_ref("s1", &a).unwrap();
        let before = path(&fs, "refs/s1");
        assert_eq!(before.kind, Kind::Symlink);
        assert_eq!(
            fs.readlink(C, before.ino).unwrap(),
            format!("../checkpoints/{a}").as_bytes()
        );
        store.set_ref("s1", &b).unwrap();
        let after = path(&fs, "refs/s1");
        assert_ne!(before.ino, after.ino);
        assert_eq!(
            fs.readlink(C, after.ino).unwrap(),
            format!("../checkpoints/{b}").as_bytes()
        );
        // The old inode still answers (the kernel may hold it), with the old target.
        assert_eq!(
            fs.readlink(C, before.ino).unwrap(),
            format!("../checkpoints/{a}").as_bytes()
        );
        assert_eq!(
            path(&fs, "refs/s1").ino,
            after.ino,
            "stable while unchanged"
        );
    }

    #[test]
    fn fork_history_and_archive_names() {
        let (_dir, store, fs) = browse();
        let a = checkpoint(&store, b"one", vec![]);
        let b = checkpoint(&store, b"two", vec![a]);
        journal::Fork::create(&store, "x", &a).unwrap();
        let names: Vec<String> = listing(&fs, path(&fs, "forks/x").ino)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, [".", "..", "head", "history"]);
        let hist: Vec<String> = listing(&fs, path(&fs, "forks/x/history").ino)
            .into_iter()
            .skip(2)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(hist, [format!("0-{a}")]);
        let head = path(&fs, "forks/x/head");
        assert_eq!(
            fs.readlink(C, head.ino).unwrap(),
            format!("../../checkpoints/{a}").as_bytes()
        );

        for (sha, file, time_ns, ck) in [
            ("a".repeat(64), "/x/s1.tar.zst.part00", 1, a),
            ("b".repeat(64), "/y/s1.tar.zst.part00", 2, b),
            ("c".repeat(64), "/z/other.tar", 3, b),
        ] {
            let rec = ArchiveRecord {
                checkpoint: ck,
                files: vec![file.into()],
                time_ns,
            };
            store.set_archive_record(&sha, &rec).unwrap();
        }
        let names: Vec<String> = listing(&fs, 5)
            .into_iter()
            .skip(2)
            .map(|(n, _)| n)
            .collect();
        let dup = format!("s1.tar.zst.part00@{}", "b".repeat(12));
        assert_eq!(names, ["other.tar", "s1.tar.zst.part00", dup.as_str()]);
        let link = path(&fs, "archives/s1.tar.zst.part00");
        assert_eq!(
            fs.readlink(C, link.ino).unwrap(),
            format!("../checkpoints/{a}").as_bytes()
        );
        let link = path(&fs, &format!("archives/{dup}"));
        assert_eq!(
            fs.readlink(C, link.ino).unwrap(),
            format!("../checkpoints/{b}").as_bytes()
        );
    }

    #[test]
    fn store_nodes_refuse_writes_and_have_no_xattrs() {
        let (_dir, _store, fs) = browse();
        assert!(matches!(
            fs.open(C, 2, libc::O_RDWR),
            Err(FsError::Posix(Posix::ReadOnly))
        ));
        assert!(matches!(
            fs.access(C, 3, libc::W_OK),
            Err(FsError::Posix(Posix::ReadOnly))
        ));
        assert!(fs.access(C, 3, libc::R_OK).is_ok());
        assert_eq!(fs.listxattr(C, 1, 0).unwrap(), XattrReply::Size(0));
        assert!(matches!(
            fs.getxattr(C, 1, b"user.x", 10),
            Err(FsError::Posix(Posix::NoXattr))
        ));
        assert!(matches!(
            fs.getattr(C, 999),
            Err(FsError::UnknownInode(999))
        ));
        assert!(matches!(
            fs.getattr(C, 7 << LOCAL_BITS | 1),
            Err(FsError::UnknownInode(_))
        ));
    }
}
