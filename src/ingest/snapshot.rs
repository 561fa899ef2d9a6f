//! Snapshot a directory tree into the store.
//!
//! Three phases, the first two taking turns:
//! 1. **Walk** (one thread): depth first in name order, list each directory
//!    through one fd and `fstatat` its entries relative to it, read symlink
//!    targets and xattrs of non-regular files, number hardlinks, skip mount
//!    points. With a parent snapshot, a regular file whose stat matches the
//!    parent's ([`Parent::unchanged`]) takes the parent's entry. When a
//!    directory's last child is done and nothing below it waits (no file to
//!    read, no hardlink to count), its tree is stored at once (or, when its
//!    entries are exactly the parent's, the parent's tree id is taken without
//!    encoding it) and its subtree's nodes are dropped.
//! 2. **Content** (`threads` readers + `threads` hashers), every
//!    [`BATCH_ENTRIES`] entries the walk finds and once at its end: each
//!    reader takes one regular file at a time, finds its data segments with
//!    `SEEK_DATA`/`SEEK_HOLE`, cuts each with FastCDC and hands the chunks to
//!    a bounded channel; hashers compress and store them. After a batch, the
//!    directories the walk has closed and that no longer wait are stored and
//!    their subtrees dropped ([`Walk::read_batch`]), and once enough objects
//!    wait the store publishes them ([`Store::sync_objects_if_many`]), so their index
//!    leaves memory too. Memory holds the current path, the entries found
//!    since the last batch and the directories with a hardlink below them
//!    (their link counts are known at the end), not the whole tree: about
//!    65 MiB for a first snapshot of 300,000 files, against 236 MiB when the
//!    walk read everything at its end.
//! 3. **Trees** (one thread): store the directories still pending, deepest
//!    first, then the root tree.
//!
//! Every file's content is read between two `fstat`s of the open fd which must
//! agree with each other and with the metadata recorded for the entry; a file
//! that keeps changing fails the snapshot (see [`MAX_READ_ATTEMPTS`]).
//! Directories, symlinks and special files are recorded as the walk saw them.
//! A path that vanishes while the snapshot runs (`ENOENT` after its directory's
//! listing named it: on `lstat`, on listing a directory, on reading a symlink
//! or xattrs, on opening a file to read it) is left out and named in
//! [`SnapshotResult::vanished`]; the snapshot is still made (tar and restic
//! do the same). A file with other hard links that vanishes still fails it.

use std::collections::HashMap;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};

use super::lookahead::Lookahead;
use super::statcache::{self, Parent, StatCacheData};
use super::sys::{self, XattrTarget};
use super::{Error, IoAt, Result};
use crate::store::chunk::{ChunkJob, Counters, Hashers, hash_chunks, send_chunks};
use crate::store::progress::{Progress, SharedProgress, no_progress};
use crate::store::{self, Content, Entry, Extent, Kind, ObjectId, Store, Tree};

pub use crate::store::chunk::{AVG_CHUNK, MAX_CHUNK, MIN_CHUNK};
/// How many times a file's content is read before a file that keeps changing
/// fails the snapshot.
pub const MAX_READ_ATTEMPTS: u32 = 3;

/// How to snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotOptions {
    /// Worker threads for reading and for hashing/compressing; 0 = all cores.
    pub threads: usize,
    /// Told the total bytes once the walk is done, advanced as bytes are
    /// read, given entry counts as messages; finished when the snapshot ends
    /// (success or failure).
    pub progress: SharedProgress,
    /// A previous snapshot of the same directory: regular files it recorded
    /// with the same (device, inode, size, mtime, ctime) are taken from it
    /// without being opened. `None` reads every file.
    pub parent: Option<Parent>,
    /// Each time the walk has found this many more entries, it reads the
    /// files found so far and stores the directories that no longer wait,
    /// so memory does not grow with the tree ([`BATCH_ENTRIES`]).
    pub batch_entries: usize,
    /// After a batch, the objects written are published (synced) once at
    /// least this many wait, so their index leaves memory
    /// ([`store::SYNC_OBJECTS`]).
    pub sync_objects: usize,
}

/// The walk reads what it found every this many entries: about 10 MiB of
/// walk state (a few hundred bytes an entry), and batches large enough that
/// the readers rarely wait for each other.
pub const BATCH_ENTRIES: usize = 32_768;

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            threads: 0,
            progress: no_progress(),
            parent: None,
            batch_entries: BATCH_ENTRIES,
            sync_objects: store::SYNC_OBJECTS,
        }
    }
}

/// What a snapshot produced. Nothing is published: the caller writes the
/// checkpoint (and ref) naming `root`.
#[derive(Clone, Debug)]
pub struct SnapshotResult {
    /// The root tree, as returned by [`Store::put_root`].
    pub root: ObjectId,
    /// Entries seen (root included), file bytes, and what was newly stored.
    pub stats: store::Stats,
    /// Things the caller should tell the user (mount points skipped, sockets
    /// kept as metadata only).
    pub warnings: Vec<String>,
    /// Paths that vanished while the snapshot ran and are not in it (in the
    /// order they were found gone).
    pub vanished: Vec<PathBuf>,
    /// Regular files (inodes) whose content was read.
    pub files_read: u64,
    /// Regular files (inodes) taken unchanged from the parent.
    pub files_reused: u64,
    /// The stat cache of this snapshot, for [`statcache::save`] once the
    /// checkpoint is written.
    pub stat_cache: StatCacheData,
}

/// Snapshot the directory `dir` into `store` and return its root tree id.
///
/// Fails, naming the path, when `dir` is missing or not a directory, when a
/// file or directory cannot be read, or when a file keeps changing while it is
/// read. Objects stored before a failure are harmless (unreferenced).
pub fn snapshot(store: &Store, dir: &Path, opts: &SnapshotOptions) -> Result<SnapshotResult> {
    let result = run(store, dir, opts);
    opts.progress.finish();
    result
}

fn run(store: &Store, dir: &Path, opts: &SnapshotOptions) -> Result<SnapshotResult> {
    let root_meta = match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => m,
        Ok(_) => return Err(Error::NotADirectory(dir.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::NotFound(dir.to_path_buf()));
        }
        Err(e) => return Err(Error::io(dir, e)),
    };
    // Before the first lstat: files not older than this are racy next time.
    let started_ns = statcache::now_ns();
    let counters = Counters::default();
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let mut walk = Walk::new(
        store,
        opts,
        threads,
        &counters,
        statcache::Writer::new(started_ns, root_meta.dev()),
    );
    walk.run(dir, &Meta::of(&root_meta))?;
    #[cfg(test)]
    test_hook::walked(dir, walk.peak_nodes, walk.trees_stored);
    walk.assign_links();
    // Its workers are idle now.
    walk.lookahead = Lookahead::start(0);

    // Only directories with something left to do are still in `nodes`.
    let jobs: Vec<usize> = (0..walk.nodes.len())
        .filter(|&i| walk.nodes[i].needs_content())
        .collect();
    walk.read_jobs(jobs)?;
    walk.copy_links();
    let root = walk.store_waiting()?;
    let stat_cache = walk.cache.finish().map_err(|e| Error::io(dir, e))?;
    Ok(SnapshotResult {
        root,
        stats: store::Stats {
            entries: walk.entries,
            bytes: walk.file_bytes,
            new_objects: counters.objects.load(Ordering::Relaxed),
            new_bytes_compressed: counters.bytes.load(Ordering::Relaxed),
        },
        warnings: walk.warnings,
        vanished: walk.vanished,
        files_read: walk.files_read,
        files_reused: walk.files_reused,
        stat_cache,
    })
}

// ---------------------------------------------------------------- walk

/// What must not change while a file is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Stamp {
    fn of(m: &Metadata) -> Stamp {
        Stamp {
            ino: m.ino(),
            size: m.size(),
            mtime_ns: mtime_ns(m),
            ctime_ns: ctime_ns(m),
        }
    }
}

/// What the walk takes from an `lstat`: from std's `Metadata` for the root,
/// from `fstatat` relative to the directory for everything below it (one
/// path component to resolve instead of the whole path).
#[derive(Clone, Copy, Debug)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    dev: u64,
    ino: u64,
    nlink: u64,
    rdev: u64,
}

impl Meta {
    fn of(m: &Metadata) -> Meta {
        Meta {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            size: m.size(),
            mtime_ns: mtime_ns(m),
            ctime_ns: ctime_ns(m),
            dev: m.dev(),
            ino: m.ino(),
            nlink: m.nlink(),
            rdev: m.rdev(),
        }
    }

    // The field types differ between rustix's backends and architectures.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn of_stat(s: &rustix::fs::Stat) -> Meta {
        let ns = |sec: i64, nsec: i64| sec.saturating_mul(1_000_000_000).saturating_add(nsec);
        Meta {
            mode: s.st_mode as u32,
            uid: s.st_uid as u32,
            gid: s.st_gid as u32,
            size: u64::try_from(s.st_size).unwrap_or(0),
            mtime_ns: ns(s.st_mtime as i64, s.st_mtime_nsec as i64),
            ctime_ns: ns(s.st_ctime as i64, s.st_ctime_nsec as i64),
            dev: s.st_dev as u64,
            ino: s.st_ino as u64,
            nlink: s.st_nlink as u64,
            rdev: s.st_rdev as u64,
        }
    }

    /// What the stat cache matches a file on.
    fn stat(&self) -> statcache::Stat {
        statcache::Stat {
            dev: self.dev,
            ino: self.ino,
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
        }
    }
}

fn mtime_ns(m: &Metadata) -> i64 {
    m.mtime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.mtime_nsec())
}

fn ctime_ns(m: &Metadata) -> i64 {
    m.ctime()
        .saturating_mul(1_000_000_000)
        .saturating_add(m.ctime_nsec())
}

/// One path of the tree, in memory until its tree is written. Kept small:
/// the path is rebuilt from the parents' names ([`node_path`]), the stamp
/// from the entry and `ino`. Only directories with work left after the walk
/// (files to read, hardlinks to count) keep their subtree's nodes; the nodes
/// below a directory whose tree the walk could write are dropped at once.
struct Node {
    /// Its entry; `content` is filled in by the content and tree phases.
    entry: Entry,
    /// Its directory (the root's is itself, 0).
    parent: usize,
    /// Children (directories only), in name order: `children.0..children.1`.
    children: (usize, usize),
    /// st_dev and st_ino.
    dev: u64,
    ino: u64,
    /// st_nlink > 1 and not a directory.
    hardlinked: bool,
    /// False for a directory with another filesystem mounted on it.
    descend: bool,
    /// A regular file whose content and xattrs were taken from the parent.
    reused: bool,
    /// A regular file whose content was read by a batch during the walk.
    read: bool,
    /// A directory with a hardlink below it: it waits for the walk's end,
    /// when link counts are known.
    linked: bool,
    /// A directory whose tree is stored (`entry.content` names it, no children).
    done: bool,
    /// Gone from disk before it could be read (a file) or listed (a
    /// directory): left out of its directory's tree.
    vanished: bool,
    /// For a hardlink that is not the first path of its inode: the first one.
    primary: Option<usize>,
    /// A listed directory's group in the stat cache.
    slot: Option<usize>,
}

impl Node {
    /// Regular files whose content this node must read (one path per inode).
    fn needs_content(&self) -> bool {
        self.entry.kind == Kind::File
            && self.primary.is_none()
            && !self.reused
            && !self.read
            && !self.vanished
    }

    /// A directory whose tree is not stored yet (listed or not).
    fn tree_pending(&self) -> bool {
        self.entry.kind == Kind::Dir && !self.done
    }

    /// What must not change while the file is read: as the walk saw it.
    fn stamp(&self) -> Stamp {
        Stamp {
            ino: self.ino,
            size: self.entry.size,
            mtime_ns: self.entry.mtime_ns,
            ctime_ns: self.entry.ctime_ns,
        }
    }

    fn children(&self) -> std::ops::Range<usize> {
        self.children.0..self.children.1
    }
}

/// Where node `idx` is on disk: `root` joined with its and its parents' names.
fn node_path(nodes: &[Node], root: &Path, mut idx: usize) -> PathBuf {
    let mut names = Vec::new();
    while idx != 0 {
        names.push(&nodes[idx].entry.name);
        idx = nodes[idx].parent;
    }
    let mut path = root.to_path_buf();
    for name in names.iter().rev() {
        path.push(std::ffi::OsStr::from_bytes(name));
    }
    path
}

/// The path of node `idx` relative to the root, '/'-separated ("" for the root).
fn rel_path(nodes: &[Node], mut idx: usize) -> Vec<u8> {
    let mut names = Vec::new();
    while idx != 0 {
        names.push(nodes[idx].entry.name.as_slice());
        idx = nodes[idx].parent;
    }
    names.reverse();
    names.join(&b'/')
}

/// An entry from lstat metadata, without content, xattrs or link info.
fn entry_from(name: Vec<u8>, kind: Kind, m: &Meta) -> Entry {
    Entry {
        name,
        kind,
        perm: m.mode & 0o7777,
        uid: m.uid,
        gid: m.gid,
        mtime_ns: m.mtime_ns,
        ctime_ns: m.ctime_ns,
        size: m.size,
        nlink: 1,
        link_id: 0,
        rdev: match kind {
            Kind::CharDev | Kind::BlockDev => m.rdev,
            _ => 0,
        },
        xattrs: Vec::new(),
        flags: 0,
        content: Content::None,
    }
}

/// A directory being walked: its children are visited in name order, and
/// when the last one is done its tree is written (or left for after the
/// content phase when something below it is still to be read or counted).
struct Frame {
    /// Its node.
    idx: usize,
    /// Its children's nodes, and the next one to visit.
    children: std::ops::Range<usize>,
    next: usize,
    /// The device it is on (directories on another are not entered).
    dev: u64,
    /// The parent snapshot's tree for it: its id is reused when the new tree
    /// has exactly the same entries.
    parent_tree: Option<(ObjectId, Tree)>,
    /// A hardlink is below it (it waits for the link counts).
    linked: bool,
}

struct Walk<'p> {
    /// The current path's directories and their children, plus every
    /// directory still pending (and what is below it).
    nodes: Vec<Node>,
    warnings: Vec<String>,
    vanished: Vec<PathBuf>,
    progress: &'p dyn Progress,
    store: &'p Store,
    counters: &'p Counters,
    /// The directory walked (paths in the stat cache are relative to it).
    root: PathBuf,
    /// The parent snapshot, its directories in step with the walk, and the
    /// parent's tree of each directory not listed yet.
    parent: Option<(&'p Parent, statcache::Cursor<'p>)>,
    parent_trees: HashMap<usize, ObjectId>,
    /// The stat cache, one group per listed directory in walk order.
    cache: statcache::Writer,
    /// Hardlinked inodes: (link id, first path's node, paths seen).
    links: HashMap<(u64, u64), (u64, usize, u32)>,
    /// Entries seen (root included), regular files' bytes (one count per
    /// inode), and files taken unchanged from the parent.
    entries: u64,
    file_bytes: u64,
    files_reused: u64,
    /// The most nodes held at once, and the trees the walk stored (rather
    /// than reusing the parent's): for tests of what the walk keeps.
    peak_nodes: usize,
    trees_stored: usize,
    /// Lists the directories the walk will enter next, on other threads.
    lookahead: Lookahead,
    /// Reader (and hasher) threads for the content phase.
    threads: usize,
    /// When `nodes` reaches this length, the files found so far are read
    /// ([`Walk::read_batch`]); then it moves `batch` further.
    batch_at: usize,
    batch: usize,
    /// Publish the objects written once this many wait ([`Store::sync_objects_if_many`]).
    sync_objects: usize,
    /// Files read so far (inodes), and their bytes (the progress total).
    files_read: u64,
    bytes_to_read: u64,
}

impl<'p> Walk<'p> {
    /// A walk for `opts` with `threads` readers (and as many listers, unless
    /// `STOREFS_SNAPSHOT_LISTERS` says otherwise).
    fn new(
        store: &'p Store,
        opts: &'p SnapshotOptions,
        threads: usize,
        counters: &'p Counters,
        cache: statcache::Writer,
    ) -> Self {
        let batch = opts.batch_entries.max(1);
        let parent = opts.parent.as_ref();
        Walk {
            nodes: Vec::new(),
            warnings: Vec::new(),
            vanished: Vec::new(),
            progress: &*opts.progress,
            store,
            counters,
            root: PathBuf::new(),
            parent: parent.map(|p| (p, p.cursor())),
            parent_trees: HashMap::new(),
            cache,
            links: HashMap::new(),
            entries: 0,
            file_bytes: 0,
            files_reused: 0,
            peak_nodes: 0,
            trees_stored: 0,
            lookahead: Lookahead::start(lookahead_threads(threads)),
            threads,
            batch_at: batch,
            batch,
            sync_objects: opts.sync_objects,
            files_read: 0,
            bytes_to_read: 0,
        }
    }

    /// Visit `root` and everything below it, depth first in name order (the
    /// order hardlinks get their ids in). Children always get larger indices
    /// than their directory, and a directory's subtree is the end of `nodes`
    /// while it is walked.
    fn run(&mut self, root: &Path, root_meta: &Meta) -> Result<()> {
        self.root = root.to_path_buf();
        let node = self
            .make_node(Some(root), 0, Vec::new(), Kind::Dir, root_meta)?
            .ok_or_else(|| Error::NotFound(root.to_path_buf()))?;
        self.nodes.push(node);
        self.entries = 1;
        if let Some((parent, _)) = &self.parent {
            // A parent whose trees cannot be read is no parent: read every file.
            let root_tree = self.store.get_tree(&parent.root, "parent root").ok();
            if let Some(id) = root_tree.and_then(|t| t.entries.first()?.tree_id()) {
                self.parent_trees.insert(0, id);
            }
        }
        let mut stack = vec![self.open_dir(0, root_meta.dev)?];
        loop {
            if self.nodes.len() >= self.batch_at {
                self.read_batch(&mut stack)?;
            }
            let Some(top) = stack.last_mut() else { break };
            let c = top.next;
            if c == top.children.end {
                let Some(frame) = stack.pop() else { break };
                if self.finish_dir(frame)?
                    && let Some(up) = stack.last_mut()
                {
                    up.linked = true;
                }
                continue;
            }
            top.next += 1;
            let node = &self.nodes[c];
            match node.entry.kind {
                Kind::Dir if node.descend => {
                    let dev = top.dev;
                    let frame = self.open_dir(c, dev)?;
                    stack.push(frame);
                }
                Kind::Dir => {
                    // Another filesystem's mount point: an empty directory.
                    let (id, written) =
                        self.store
                            .put_tree(&Tree::default())
                            .map_err(|source| Error::Object {
                                path: node_path(&self.nodes, &self.root, c),
                                source,
                            })?;
                    self.counters.add(written);
                    let node = &mut self.nodes[c];
                    node.entry.content = Content::Tree(id);
                    node.entry.nlink = 2;
                    node.done = true;
                }
                Kind::File => {
                    if self.link(c) {
                        top.linked = true;
                    }
                    let node = &self.nodes[c];
                    if node.primary.is_none() {
                        self.file_bytes += node.entry.size;
                        self.files_reused += u64::from(node.reused);
                    }
                }
                _ => {
                    if self.link(c) {
                        top.linked = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// Give hardlinked node `idx` its link id (in walk order) and, unless it
    /// is the first path of its inode, its primary. Whether it is hardlinked.
    fn link(&mut self, idx: usize) -> bool {
        let node = &self.nodes[idx];
        if !node.hardlinked {
            return false;
        }
        let next_id = self.links.len() as u64 + 1;
        let group = self
            .links
            .entry((node.dev, node.ino))
            .or_insert((next_id, idx, 0));
        group.2 += 1;
        let (link_id, first) = (group.0, group.1);
        let node = &mut self.nodes[idx];
        node.entry.link_id = link_id;
        if first != idx {
            node.primary = Some(first);
        }
        true
    }

    /// List directory `idx` (on `dev`) and start walking it.
    fn open_dir(&mut self, idx: usize, dev: u64) -> Result<Frame> {
        self.nodes[idx].slot = Some(self.cache.reserve());
        let view = self.parent_of_dir(idx);
        let children = self.read_dir(idx, dev, view.as_ref())?;
        self.nodes[idx].children = (children.start, children.end);
        Ok(Frame {
            idx,
            next: children.start,
            children,
            dev,
            parent_tree: view.map(|(id, tree, _)| (id, tree)),
            linked: false,
        })
    }

    /// All of directory `frame.idx`'s children are walked: store its tree and
    /// drop its subtree's nodes, unless something below it waits (a file to
    /// read, a directory whose tree waits, a hardlink to count: then a later
    /// batch or [`Walk::store_waiting`] stores it). Whether a hardlink is below it
    /// (its parent then waits for the walk's end too).
    fn finish_dir(&mut self, frame: Frame) -> Result<bool> {
        let idx = frame.idx;
        if self.nodes[idx].vanished {
            // Listed as gone: nothing below it, no tree.
            return Ok(false);
        }
        let subdirs = frame
            .children
            .clone()
            .filter(|&c| self.nodes[c].entry.kind == Kind::Dir && !self.nodes[c].vanished)
            .count();
        self.nodes[idx].entry.nlink = 2 + subdirs as u32;
        self.nodes[idx].linked = frame.linked;
        if frame.linked || self.any_waits(frame.children.clone()) {
            return Ok(frame.linked);
        }
        if self.store_tree(idx, frame.parent_tree)? {
            self.trees_stored += 1;
        }
        self.nodes.truncate(frame.children.start);
        self.nodes[idx].children = (frame.children.start, frame.children.start);
        Ok(false)
    }

    /// Whether one of `children` still waits: a file to read, a directory
    /// whose tree is not stored.
    fn any_waits(&self, mut children: std::ops::Range<usize>) -> bool {
        children.any(|c| {
            let n = &self.nodes[c];
            n.needs_content() || n.tree_pending()
        })
    }

    /// lstat the entries of directory `idx` (sorted by name) and add them as
    /// nodes. Directories on another device than `dev` are added empty.
    fn read_dir(
        &mut self,
        idx: usize,
        dev: u64,
        parent: Option<&(ObjectId, Tree, Option<statcache::Group<'p>>)>,
    ) -> Result<std::ops::Range<usize>> {
        let dir = node_path(&self.nodes, &self.root, idx);
        let first = self.nodes.len();
        let listing = match self.lookahead.take(&dir) {
            Ok(l) => l,
            Err(e) if idx != 0 && e.kind() == io::ErrorKind::NotFound => {
                self.vanish(idx, dir);
                return Ok(first..first);
            }
            Err(e) => return Err(Error::io(&dir, e)),
        };
        let parent_entries = parent.map(|(_, tree, _)| tree);
        let parent_snapshot = self.parent.as_ref().map(|(p, _)| *p);
        for (name, stat) in listing.names.into_iter().zip(listing.stats) {
            let child_path = || dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
            let meta = match stat {
                Ok(s) => Meta::of_stat(&s),
                Err(rustix::io::Errno::NOENT) => {
                    self.vanished.push(child_path());
                    continue;
                }
                Err(e) => return Err(Error::io(&child_path(), e.into())),
            };
            let Some(kind) = Kind::from_mode(meta.mode) else {
                self.warn(format!(
                    "{}: unknown file type; skipped",
                    child_path().display()
                ));
                continue;
            };
            if kind == Kind::Dir && meta.dev != dev {
                self.warn(format!(
                    "{}: a different filesystem is mounted here; recorded as an empty directory",
                    child_path().display()
                ));
            }
            if kind == Kind::Socket {
                self.warn(format!(
                    "{}: socket kept as metadata only",
                    child_path().display()
                ));
            }
            // Only other kinds than regular files need the path here.
            let path = (kind != Kind::File).then(child_path);
            let name = name.into_bytes();
            let before = parent_entries.and_then(|t| t.get(&name));
            let Some(mut node) = self.make_node(path.as_deref(), idx, name, kind, &meta)? else {
                // Only a path read by name vanishes here: not a regular file's.
                self.vanished.extend(path);
                continue;
            };
            node.descend &= meta.dev == dev;
            if let (Some((_, _, files)), Some(before), Some(p)) = (parent, before, parent_snapshot)
            {
                match kind {
                    Kind::File => {
                        let ino = files.as_ref().and_then(|f| f.ino(&node.entry.name));
                        if let Some(ino) = ino
                            && p.unchanged(before, ino, &meta.stat())
                        {
                            node.entry.content = before.content.clone();
                            node.entry.xattrs = before.xattrs.clone();
                            node.reused = true;
                        }
                    }
                    Kind::Dir if node.descend => {
                        if let Some(id) = before.tree_id() {
                            self.parent_trees.insert(self.nodes.len(), id);
                        }
                    }
                    _ => {}
                }
            }
            self.nodes.push(node);
            self.entries += 1;
            if self.entries.is_multiple_of(1024) {
                self.progress
                    .set_message(format!("scanning: {} entries", self.entries));
            }
        }
        self.peak_nodes = self.peak_nodes.max(self.nodes.len());
        let subdirs = self.nodes[first..]
            .iter()
            .filter(|n| n.descend)
            .map(|n| dir.join(std::ffi::OsStr::from_bytes(&n.entry.name)))
            .collect();
        self.lookahead.ahead(subdirs);
        Ok(first..self.nodes.len())
    }

    /// The parent snapshot's view of directory `idx`: its tree's id, the
    /// tree, and the inodes of its files. `None` when there is no parent or
    /// the parent had no directory there.
    fn parent_of_dir(
        &mut self,
        idx: usize,
    ) -> Option<(ObjectId, Tree, Option<statcache::Group<'p>>)> {
        let tree_id = self.parent_trees.remove(&idx)?;
        let (_, cursor) = self.parent.as_mut()?;
        let tree = self.store.get_tree(&tree_id, "parent tree").ok()?;
        let files = cursor.files_of(&rel_path(&self.nodes, idx));
        Some((tree_id, tree, files))
    }

    /// A node for an entry seen by lstat as `meta`. `path` is needed for
    /// anything but a regular file (symlink target, xattrs: a regular file's
    /// are read through the open fd with its content). `None` when the path
    /// vanished meanwhile (ENOENT).
    fn make_node(
        &self,
        path: Option<&Path>,
        parent: usize,
        name: Vec<u8>,
        kind: Kind,
        meta: &Meta,
    ) -> Result<Option<Node>> {
        let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
        let mut entry = entry_from(name, kind, meta);
        if let Some(path) = path.filter(|_| kind != Kind::File) {
            if kind == Kind::Symlink {
                let target = match fs::read_link(path) {
                    Ok(t) => t,
                    Err(e) if gone(&e) => return Ok(None),
                    Err(e) => return Err(Error::io(path, e)),
                };
                entry.content = Content::Target(target.into_os_string().into_encoded_bytes());
            }
            let cpath = sys::cstring(path.as_os_str().as_bytes()).at(path)?;
            entry.xattrs = match sys::read_xattrs(XattrTarget::Path(&cpath)) {
                Ok(x) => x,
                Err(e) if gone(&e) => return Ok(None),
                Err(e) => return Err(Error::io(path, e)),
            };
        }
        Ok(Some(Node {
            entry,
            parent,
            children: (0, 0),
            dev: meta.dev,
            ino: meta.ino,
            hardlinked: kind != Kind::Dir && meta.nlink > 1,
            descend: kind == Kind::Dir,
            reused: false,
            read: false,
            linked: false,
            done: false,
            vanished: false,
            primary: None,
            slot: None,
        }))
    }

    /// Returned to the caller, which decides how to show it (not logged here).
    fn warn(&mut self, msg: String) {
        self.warnings.push(msg);
    }

    /// Node `idx` (at `path`) is gone from disk: leave it out of its
    /// directory's tree, and out of the counts.
    fn vanish(&mut self, idx: usize, path: PathBuf) {
        let node = &mut self.nodes[idx];
        node.vanished = true;
        node.done = true;
        self.entries -= 1;
        if node.entry.kind == Kind::File {
            self.file_bytes -= node.entry.size;
        }
        self.vanished.push(path);
    }

    /// Give hardlinked paths their `nlink` (paths of the inode inside the
    /// snapshot, known once the walk is done). Their directories are all
    /// still pending.
    fn assign_links(&mut self) {
        if self.links.is_empty() {
            return;
        }
        for node in &mut self.nodes {
            if node.hardlinked {
                node.entry.nlink = self.links[&(node.dev, node.ino)].2;
            }
        }
    }

    /// Read the content of every file found so far that needs it (a
    /// hardlink only once the walk has numbered it), store the tree of every
    /// listed directory that no longer waits, and drop the nodes below
    /// those: the walk then holds the current path, the directories with a
    /// hardlink below and the nodes found since, whatever the tree's size.
    fn read_batch(&mut self, stack: &mut [Frame]) -> Result<()> {
        let jobs: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.needs_content() && !(n.hardlinked && n.entry.link_id == 0)
            })
            .collect();
        self.read_jobs(jobs)?;
        let mut open = vec![false; self.nodes.len()];
        for f in stack.iter() {
            open[f.idx] = true;
        }
        // Children have larger indices than their directory: deepest first.
        let mut stored = vec![false; self.nodes.len()];
        for idx in (0..self.nodes.len()).rev() {
            let n = &self.nodes[idx];
            // Listed (a slot), closed, not waiting for link counts.
            if !n.tree_pending()
                || n.slot.is_none()
                || open[idx]
                || n.linked
                || self.any_waits(n.children())
            {
                continue;
            }
            if self.store_tree(idx, None)? {
                self.trees_stored += 1;
            }
            stored[idx] = true;
        }
        self.drop_below(&stored, stack);
        // Publish what the batches wrote once it is many objects.
        self.store.sync_objects_if_many(self.sync_objects)?;
        self.batch_at = self.nodes.len() + self.batch;
        Ok(())
    }

    /// Read `jobs` (nodes needing content) and put their contents in.
    fn read_jobs(&mut self, mut jobs: Vec<usize>) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        // Large files first, largest first, so one does not start last and
        // run alone; the others in walk order, so a reader takes the files
        // of one directory one after another (it opens them relative to
        // it). Results are keyed by node: the order does not affect the tree.
        jobs.sort_by_key(|&i| {
            let size = self.nodes[i].entry.size;
            std::cmp::Reverse(if size > u64::from(MAX_CHUNK) { size } else { 0 })
        });
        self.bytes_to_read += jobs.iter().map(|&i| self.nodes[i].entry.size).sum::<u64>();
        self.files_read += jobs.len() as u64;
        self.progress.set_total(self.bytes_to_read);
        self.progress.set_message(format!(
            "{} entries, {} files to read so far, {} unchanged",
            self.entries, self.files_read, self.files_reused
        ));
        let contents = read_contents(
            self.store,
            &self.root,
            &self.nodes,
            &jobs,
            self.threads,
            self.counters,
            self.progress,
        )?;
        self.apply_read(contents);
        Ok(())
    }

    /// Store the tree of closed directory `idx`, all of whose children are
    /// complete (their entries move into it), and fill its stat cache group
    /// (the inodes its files were read from). `parent_tree`: the parent
    /// snapshot's tree there, whose id is taken when it has the same
    /// entries (the same entries encode to the same bytes). Whether a tree
    /// was written.
    fn store_tree(&mut self, idx: usize, parent_tree: Option<(ObjectId, Tree)>) -> Result<bool> {
        if let Some(slot) = self.nodes[idx].slot {
            let files = self.nodes[idx]
                .children()
                .map(|c| &self.nodes[c])
                .filter(|n| n.entry.kind == Kind::File && !n.vanished)
                .map(|n| (n.entry.name.as_slice(), n.ino));
            self.cache.fill(slot, &rel_path(&self.nodes, idx), files);
        }
        let present: Vec<usize> = self.nodes[idx]
            .children()
            .filter(|&c| !self.nodes[c].vanished)
            .collect();
        let mut tree = Tree {
            entries: present
                .into_iter()
                .map(|c| std::mem::replace(&mut self.nodes[c].entry, moved()))
                .collect(),
        };
        tree.sort();
        let (id, wrote) = match parent_tree {
            Some((id, parent)) if parent.entries == tree.entries => (id, false),
            _ => {
                let (id, written) = self.store.put_tree(&tree).map_err(|source| Error::Object {
                    path: node_path(&self.nodes, &self.root, idx),
                    source,
                })?;
                self.counters.add(written);
                (id, true)
            }
        };
        let node = &mut self.nodes[idx];
        node.entry.content = Content::Tree(id);
        node.done = true;
        Ok(wrote)
    }

    /// Store one tree per directory the walk left waiting, children before
    /// parents (call after [`Walk::copy_links`]), then the root tree.
    fn store_waiting(&mut self) -> Result<ObjectId> {
        for idx in (0..self.nodes.len()).rev() {
            if self.nodes[idx].tree_pending() {
                self.store_tree(idx, None)?;
            }
        }
        let root_entry = std::mem::replace(&mut self.nodes[0].entry, moved());
        let (root, written) = self.store.put_root(root_entry)?;
        self.counters.add(written);
        Ok(root)
    }

    /// Remove the nodes below the directories marked in `stored` and
    /// renumber the rest (and what refers to them: parents, children,
    /// first paths of hardlinks, the parent snapshot's trees, `stack`).
    fn drop_below(&mut self, stored: &[bool], stack: &mut [Frame]) {
        const GONE: usize = usize::MAX;
        let len = self.nodes.len();
        let mut new_idx = vec![GONE; len];
        let mut next = 0;
        for i in 0..len {
            let p = self.nodes[i].parent;
            let gone = i > 0 && (stored[p] || new_idx[p] == GONE);
            if !gone {
                new_idx[i] = next;
                next += 1;
            }
        }
        if next == len {
            return;
        }
        let mut i = 0;
        self.nodes.retain(|_| {
            i += 1;
            new_idx[i - 1] != GONE
        });
        let map = |i: usize| new_idx[i];
        for node in &mut self.nodes {
            node.parent = map(node.parent);
            node.children = if node.children.0 < node.children.1 && !node.done {
                let start = map(node.children.0);
                (start, start + node.children.1 - node.children.0)
            } else {
                (0, 0)
            };
            node.primary = node.primary.map(map);
        }
        for group in self.links.values_mut() {
            group.1 = map(group.1);
        }
        self.parent_trees = std::mem::take(&mut self.parent_trees)
            .into_iter()
            .filter(|&(i, _)| new_idx[i] != GONE)
            .map(|(i, id)| (map(i), id))
            .collect();
        let len = self.nodes.len();
        for f in stack {
            f.idx = map(f.idx);
            // An open directory's children are all kept (none is stored);
            // an empty one's range may start past the end.
            let start = if f.children.is_empty() {
                len
            } else {
                map(f.children.start)
            };
            let shift = |x: usize| start + (x - f.children.start);
            f.next = shift(f.next);
            f.children = start..shift(f.children.end);
        }
    }

    /// Put read contents into their entries (metadata refreshed from the
    /// fstat the content was read under) and mark them read; leave out the
    /// files that vanished before they could be opened.
    fn apply_read(&mut self, contents: Vec<ReadFiles>) {
        for (idx, c) in contents.into_iter().flatten() {
            let Some(c) = c else {
                let path = node_path(&self.nodes, &self.root, idx);
                self.vanish(idx, path);
                self.files_read -= 1;
                continue;
            };
            self.nodes[idx].read = true;
            let e = &mut self.nodes[idx].entry;
            e.perm = c.stat.perm;
            e.uid = c.stat.uid;
            e.gid = c.stat.gid;
            e.mtime_ns = c.stat.mtime_ns;
            e.ctime_ns = c.stat.ctime_ns;
            e.size = c.stat.size;
            e.xattrs = c.xattrs;
            e.content = Content::Extents(c.extents);
            self.nodes[idx].ino = c.stat.ino;
        }
    }

    /// Copy each hardlink's first path's entry to its other paths (when
    /// every content is read).
    fn copy_links(&mut self) {
        for idx in 0..self.nodes.len() {
            if let Some(first) = self.nodes[idx].primary {
                let mut entry = self.nodes[first].entry.clone();
                entry.name = std::mem::take(&mut self.nodes[idx].entry.name);
                self.nodes[idx].entry = entry;
                self.nodes[idx].ino = self.nodes[first].ino;
            }
        }
    }
}

// ---------------------------------------------------------------- content

/// A file's content as read under one stable fstat.
struct FileContent {
    extents: Vec<Extent>,
    stat: FileStat,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The fstat a file's content was read under: what its entry takes from it.
struct FileStat {
    perm: u32,
    uid: u32,
    gid: u32,
    mtime_ns: i64,
    ctime_ns: i64,
    size: u64,
    ino: u64,
}

impl FileStat {
    fn of(m: &Metadata) -> FileStat {
        FileStat {
            perm: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            mtime_ns: mtime_ns(m),
            ctime_ns: ctime_ns(m),
            size: m.size(),
            ino: m.ino(),
        }
    }
}

/// Workers listing directories ahead of the walk: `STOREFS_SNAPSHOT_LISTERS`
/// when set (0 turns the look-ahead off), else one per core.
fn lookahead_threads(threads: usize) -> usize {
    std::env::var("STOREFS_SNAPSHOT_LISTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(threads)
}

/// What one reader read: (node, its content, or `None` when it vanished).
type ReadFiles = Vec<(usize, Option<FileContent>)>;

/// What a reader thread shares with the others.
struct Readers<'a> {
    store: &'a Store,
    counters: &'a Counters,
    nodes: &'a [Node],
    root: &'a Path,
    jobs: &'a [usize],
    next: AtomicUsize,
    failed: AtomicBool,
    progress: &'a dyn Progress,
}

/// Read every job's content with `threads` readers feeding `threads` hashers:
/// each reader's results, apart.
fn read_contents(
    store: &Store,
    root: &Path,
    nodes: &[Node],
    jobs: &[usize],
    threads: usize,
    counters: &Counters,
    progress: &dyn Progress,
) -> Result<Vec<ReadFiles>> {
    let shared = Readers {
        store,
        counters,
        nodes,
        root,
        jobs,
        next: AtomicUsize::new(0),
        failed: AtomicBool::new(false),
        progress,
    };
    let (chunk_tx, chunk_rx) = mpsc::sync_channel::<ChunkJob>(threads * 2);
    let chunk_rx = Mutex::new(chunk_rx);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| hash_chunks(store, &chunk_rx, counters));
        }
        let readers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = chunk_tx.clone();
                let shared = &shared;
                s.spawn(move || read_files(shared, tx))
            })
            .collect();
        drop(chunk_tx);
        let mut out = Vec::with_capacity(threads);
        let mut first_err = None;
        for r in readers {
            match r.join() {
                Ok(Ok(v)) => out.push(v),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })
}

/// Reader thread: take files until none are left or another reader failed.
fn read_files(shared: &Readers<'_>, tx: SyncSender<ChunkJob>) -> Result<ReadFiles> {
    let hashers = Hashers::inline(&tx, shared.store, shared.counters);
    let mut out = Vec::new();
    // The directory of the last file read, held open: the files of one
    // directory come one after another, and opening each relative to it
    // walks one name instead of the whole path (a fifth of a snapshot of
    // 300k small files went to walking paths).
    let mut dir: Option<(usize, Option<OwnedFd>)> = None;
    while !shared.failed.load(Ordering::Relaxed) {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        let Some(&idx) = shared.jobs.get(i) else {
            break;
        };
        let node = &shared.nodes[idx];
        let path = node_path(shared.nodes, shared.root, idx);
        if dir.as_ref().map(|d| d.0) != Some(node.parent) {
            // When it cannot be opened, each file is opened by its whole
            // path, whose error then names the file.
            let fd = path.parent().and_then(|d| {
                use rustix::fs::{Mode, OFlags};
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                rustix::fs::open(d, flags, Mode::empty()).ok()
            });
            dir = Some((node.parent, fd));
        }
        let at = dir.as_ref().and_then(|d| d.1.as_ref()).map(|fd| At {
            dir: fd.as_fd(),
            name: &node.entry.name,
        });
        match read_file(node, &path, at, &hashers, shared.progress) {
            // A hard link's other paths copy this one's entry: when it is
            // gone they have nothing to copy (rare: temp files have one link).
            Ok(None) if node.hardlinked => {
                shared.failed.store(true, Ordering::Relaxed);
                return Err(Error::io(&path, io::ErrorKind::NotFound.into()));
            }
            Ok(c) => out.push((idx, c)),
            Err(e) => {
                shared.failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// Outcome of one attempt at reading a file.
enum Attempt {
    Stable(FileContent),
    /// The file changed; this is what it looks like now.
    Changed(Stamp),
    /// The file is gone (ENOENT on open).
    Vanished,
}

/// Read a file's content, retrying while it changes under us; `None` when
/// it vanished before it could be opened.
fn read_file(
    node: &Node,
    path: &Path,
    at: Option<At<'_>>,
    hashers: &Hashers<'_>,
    progress: &dyn Progress,
) -> Result<Option<FileContent>> {
    let mut expected = node.stamp();
    for _ in 0..MAX_READ_ATTEMPTS {
        match read_once(path, at, expected, hashers, progress)? {
            Attempt::Stable(c) => return Ok(Some(c)),
            Attempt::Changed(now) => expected = now,
            Attempt::Vanished => return Ok(None),
        }
    }
    Err(Error::Changing {
        path: path.to_path_buf(),
        attempts: MAX_READ_ATTEMPTS,
    })
}

/// A file named relative to its directory, held open.
#[derive(Clone, Copy)]
struct At<'a> {
    dir: BorrowedFd<'a>,
    name: &'a [u8],
}

/// Open `path` (by `at` when given: the same file, found by one name)
/// without following symlinks and without updating atime when allowed
/// (O_NOATIME needs ownership or CAP_FOWNER). O_NONBLOCK keeps a fifo
/// swapped in for the file from blocking the open.
fn open_for_read(path: &Path, at: Option<At<'_>>) -> io::Result<File> {
    #[cfg(test)]
    test_hook::opened(path);
    super::testing_vanish(path);
    let open = |extra: i32| match at {
        Some(at) => {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::RDONLY
                | OFlags::NOFOLLOW
                | OFlags::NONBLOCK
                | OFlags::CLOEXEC
                | OFlags::from_bits_retain(extra as u32);
            rustix::fs::openat(at.dir, at.name, flags, Mode::empty())
                .map(File::from)
                .map_err(io::Error::from)
        }
        None => OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | extra)
            .open(path),
    };
    match open(libc::O_NOATIME) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(0),
        r => r,
    }
}

/// One attempt: fstat, read xattrs and content, fstat again.
fn read_once(
    path: &Path,
    at: Option<At<'_>>,
    expected: Stamp,
    hashers: &Hashers<'_>,
    progress: &dyn Progress,
) -> Result<Attempt> {
    let file = match open_for_read(path, at) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Attempt::Vanished),
        Err(e) => return Err(Error::io(path, e)),
    };
    let before = file.metadata().at(path)?;
    if Stamp::of(&before) != expected || !before.is_file() {
        return Ok(Attempt::Changed(Stamp::of(&before)));
    }
    #[cfg(test)]
    test_hook::run(path);
    let xattrs = sys::read_xattrs(XattrTarget::Fd(file.as_fd())).at(path)?;
    let extents = read_extents(
        &file,
        before.size(),
        maybe_sparse(&before),
        hashers,
        progress,
    )
    .at(path)?;
    let after = file.metadata().at(path)?;
    match extents {
        Some(extents) if Stamp::of(&after) == expected => Ok(Attempt::Stable(FileContent {
            extents,
            stat: FileStat::of(&before),
            xattrs,
        })),
        _ => Ok(Attempt::Changed(Stamp::of(&after))),
    }
}

/// Whether a file may have holes: fewer blocks allocated than its size needs.
/// A file that fails this test has none worth keeping (blocks beyond EOF or an
/// xattr block can hide a hole; it is then stored as zeros, content intact),
/// and skipping SEEK_DATA/SEEK_HOLE saves two syscalls per small file.
fn maybe_sparse(m: &Metadata) -> bool {
    m.blocks().saturating_mul(512) < m.size()
}

/// The file's extents: holes found with SEEK_DATA/SEEK_HOLE and data segments
/// cut into chunks. `None` when the file turned out shorter than `size`.
fn read_extents(
    file: &File,
    size: u64,
    maybe_sparse: bool,
    hashers: &Hashers<'_>,
    progress: &dyn Progress,
) -> io::Result<Option<Vec<Extent>>> {
    let mut extents = Vec::new();
    let mut pos = 0;
    let mut sparse = maybe_sparse;
    while pos < size {
        let data = if sparse {
            match sys::next_data(file.as_fd(), pos) {
                Ok(d) => d.unwrap_or(size).min(size),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    sparse = false;
                    pos
                }
                Err(e) => return Err(e),
            }
        } else {
            pos
        };
        if data > pos {
            extents.push(Extent {
                len: data - pos,
                id: None,
            });
            progress.advance(data - pos);
        }
        if data >= size {
            break;
        }
        let end = if sparse {
            match sys::next_hole(file.as_fd(), data)? {
                Some(h) if h > data => h.min(size),
                _ => size,
            }
        } else {
            size
        };
        if !chunk_segment(file, data, end - data, &mut extents, hashers, progress)? {
            return Ok(None);
        }
        pos = end;
    }
    Ok(Some(extents))
}

/// Cut `len` bytes at `offset` into chunks, store them through the hashers and
/// append their extents. `false` when fewer than `len` bytes could be read.
fn chunk_segment(
    file: &File,
    offset: u64,
    len: u64,
    extents: &mut Vec<Extent>,
    hashers: &Hashers<'_>,
    progress: &dyn Progress,
) -> io::Result<bool> {
    let reader = SegmentReader {
        file,
        offset,
        remaining: len,
    };
    let pending = send_chunks(reader, len, hashers, progress)?;
    let complete = pending.total() == len;
    extents.extend(pending.wait()?);
    Ok(complete)
}

/// Reads `remaining` bytes from `offset` with pread (the fd offset is unused).
struct SegmentReader<'a> {
    file: &'a File,
    offset: u64,
    remaining: u64,
}

impl Read for SegmentReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = loop {
            match self.file.read_at(&mut buf[..want], self.offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r?,
            }
        };
        self.offset += n as u64;
        self.remaining -= n as u64;
        Ok(n)
    }
}

// ---------------------------------------------------------------- trees

/// What is left of a node whose entry went into its directory's tree.
fn moved() -> Entry {
    Entry {
        name: Vec::new(),
        kind: Kind::File,
        perm: 0,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        size: 0,
        nlink: 0,
        link_id: 0,
        rdev: 0,
        xattrs: Vec::new(),
        flags: 0,
        content: Content::None,
    }
}

/// A test-only hook run between the first fstat and the read of a file, to
/// make "file changed while read" deterministic.
#[cfg(test)]
pub(crate) mod test_hook {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    type Hook = fn(&Path);
    static HOOKS: Mutex<Vec<(PathBuf, Hook)>> = Mutex::new(Vec::new());

    /// Run `hook` whenever the snapshot is about to read `path`.
    pub fn set(path: &Path, hook: Hook) {
        HOOKS.lock().unwrap().push((path.to_path_buf(), hook));
    }

    pub fn clear(path: &Path) {
        HOOKS.lock().unwrap().retain(|(p, _)| p != path);
    }

    static OPENED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    pub(super) fn opened(path: &Path) {
        OPENED.lock().unwrap().push(path.to_path_buf());
    }

    /// The files under `dir` the snapshot opened since the last call (in
    /// any order), forgotten by this call.
    pub fn take_opened(dir: &Path) -> Vec<PathBuf> {
        let mut all = OPENED.lock().unwrap();
        let (mine, others) = all.drain(..).partition(|p: &PathBuf| p.starts_with(dir));
        *all = others;
        mine
    }

    /// Per walk of a directory: (the most nodes held at once, trees the
    /// walk stored instead of reusing the parent's).
    static WALKED: Mutex<Vec<(PathBuf, (usize, usize))>> = Mutex::new(Vec::new());

    pub(super) fn walked(dir: &Path, peak_nodes: usize, trees_stored: usize) {
        let mut all = WALKED.lock().unwrap();
        all.retain(|(p, _)| p != dir);
        all.push((dir.to_path_buf(), (peak_nodes, trees_stored)));
    }

    /// The last walk of `dir`: (most nodes held at once, trees stored by
    /// the walk).
    pub fn last_walk(dir: &Path) -> (usize, usize) {
        let all = WALKED.lock().unwrap();
        all.iter().rev().find(|(p, _)| p == dir).unwrap().1
    }

    pub(super) fn run(path: &Path) {
        let hooks: Vec<Hook> = HOOKS
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, h)| *h)
            .collect();
        for h in hooks {
            h(path);
        }
    }
}
