//! Fold a fork's state into trees and objects: the content of a commit.
//!
//! - An unloaded or parked directory is its tree (`Dir::base_tree`), reused
//!   by id. A loaded one where nothing changed since a commit stored its
//!   tree reuses that tree
//!   ([`TreeCache`], [`stale_dirs`]); the commit copies such a directory
//!   without its entries and nothing under it ([`snapshot`]).
//! - A file whose data is unchanged since it was last committed (or since
//!   the base) reuses that chunk list (no reading).
//! - A changed file is cut as the store's one content-defined chunker
//!   (`store::chunk::cut_chunks`; snapshot and import cut through it too)
//!   cuts it whole, but only the chunks around what changed are read and cut:
//!   the others are taken from its committed chunk list (`rechunk.rs`, which
//!   says why the result is the same). Holes stay holes.
//! - Hardlinks: an inode that came from the base keeps its base `link_id`
//!   (other names of it may sit in unloaded subtrees, which keep that id);
//!   a new multi-link inode gets a fresh id derived from the parent
//!   checkpoint and the inode number, with the top bit set (base ids from
//!   snapshots are small counters, so they cannot collide; two fresh ids
//!   collide with probability 2^-63).
//! - If a base-hardlinked inode changed (data, metadata or link count), the
//!   names of it in unloaded subtrees would keep the old entry; the fold then
//!   loads every directory of the (throw-away) state first so all names are
//!   rebuilt. Rare and correct, but it reads the whole tree. The live state
//!   then takes the trees it stored for its unloaded and parked directories
//!   (and its loaded ones' caches), so the inode is clean again and the next
//!   commit loads nothing more, unless it changes again
//!   (`ForkState::rebase`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use parking_lot::Mutex;

use sha2::{Digest, Sha256};

use super::rechunk::{ChunkIo, chunk_file};
use super::state::{Data, Dir, ForkState, Inode, PieceMap, Src, TreeCache, plan};
use super::wal::Wal;
use super::{Error, Result};
use crate::store::model::ROOT_INO;
use crate::store::{Content, Entry, Extent, Kind, ObjectId, Stats, Store, Tree};

/// What a fold produced.
#[derive(Debug)]
pub struct Folded {
    /// The root tree (from [`Store::put_root`]).
    pub root: ObjectId,
    /// The extents of every file that was (re)chunked, by inode.
    pub extents: HashMap<u64, Vec<Extent>>,
    /// The pieces each of those files had when the fold read it.
    pub read: HashMap<u64, PieceMap>,
    /// The link id given to each hardlinked inode.
    pub link_ids: HashMap<u64, u64>,
    /// The tree of every loaded directory the fold visited, stored or
    /// reused, as of stamp [`Folded::at`]; when it loaded the whole tree,
    /// of every directory the live state numbers, loaded or not.
    pub trees: HashMap<u64, TreeCache>,
    /// Whether it loaded the whole tree ([`needs_full_load`]).
    pub full: bool,
    /// The state's stamp when it was taken.
    pub at: u64,
    pub stats: Stats,
}

/// Whether the fold must load the whole tree (module docs).
pub(super) fn needs_full_load(state: &ForkState) -> bool {
    state
        .inodes
        .values()
        .any(|n| n.kind != Kind::Dir && n.link_id != 0 && n.dirty)
}

/// What a commit folds, taken under the state lock: the inodes the fold
/// visits. Loaded directories where nothing changed since the last commit
/// ([`stale_dirs`]) are folded from their cached tree, so only they are
/// copied, without their entries, and what is under them is not. The whole
/// state when the fold will load the whole tree.
pub fn snapshot(state: &ForkState) -> ForkState {
    if needs_full_load(state) {
        return state.clone();
    }
    let stale = stale_dirs(state);
    let mut inodes: HashMap<u64, Box<Inode>> = HashMap::new();
    let take = |ino: u64, inodes: &mut HashMap<u64, Box<Inode>>| {
        if inodes.contains_key(&ino) {
            return;
        }
        let Some(n) = state.inodes.get(&ino) else {
            return;
        };
        let copy = match &n.data {
            Data::Dir(Dir::Loaded(_)) if !stale.contains(&ino) => Box::new(Inode {
                data: Data::Dir(Dir::Loaded(BTreeMap::new())),
                ..n.without_data()
            }),
            _ => n.clone(),
        };
        inodes.insert(ino, copy);
    };
    take(ROOT_INO, &mut inodes);
    for &d in &stale {
        take(d, &mut inodes);
        if let Some(Data::Dir(Dir::Loaded(kids))) = state.inodes.get(&d).map(|n| &n.data) {
            for &c in kids.values() {
                take(c, &mut inodes);
            }
        }
    }
    // Files unlinked while open are folded too.
    for (&ino, n) in &state.inodes {
        if n.nlink == 0 && matches!(n.data, Data::File(_)) {
            take(ino, &mut inodes);
        }
    }
    ForkState {
        inodes,
        next_ino: state.next_ino,
        by_link: state.by_link.clone(),
        replaying: state.replaying,
        fresh: state.fresh,
        after_map: None,
        changes: state.changes,
        stamp: state.stamp,
        base_trees: HashMap::new(),
        park_queue: Default::default(),
        parked_runs: Default::default(),
        parked: state.parked,
        parked_atimes: HashMap::new(),
        unparked: 0,
        budget: super::state::Budget::unbounded(),
        ops: Default::default(),
    }
}

/// Fold `state` (a [`snapshot`]; it may be modified: see the module docs).
/// `salt` (the parent checkpoint) seeds fresh link ids.
pub fn fold(state: &mut ForkState, store: &Store, wal: &Wal, salt: &ObjectId) -> Result<Folded> {
    let at = state.stamp;
    let needs_full_load = needs_full_load(state);
    // The numbers the live state has: directories `load_all` loads number
    // their children past them, numbers the live state may give others.
    let live = state.next_ino;
    if needs_full_load {
        state.load_all(store)?;
    }
    // After `load_all` no tree is reused; the trees of the directories the
    // live state numbers are kept (the live state takes them for its
    // unloaded and parked ones: they now hold every name of the changed
    // hardlinks, see `ForkState::rebase`).
    let stale = (!needs_full_load).then(|| stale_dirs(state));
    let mut f = Folder {
        state,
        store,
        wal,
        stale,
        live,
        out: Folded {
            root: ObjectId([0; 32]),
            extents: HashMap::new(),
            read: HashMap::new(),
            link_ids: HashMap::new(),
            trees: HashMap::new(),
            full: needs_full_load,
            at,
            stats: Stats::default(),
        },
    };
    for (&ino, n) in &f.state.inodes {
        if n.kind == Kind::Dir || n.nlink == 0 {
            continue;
        }
        let id = if n.link_id != 0 {
            n.link_id
        } else if n.nlink > 1 {
            let mut h = Sha256::new();
            h.update(salt.0);
            h.update(ino.to_le_bytes());
            let d = h.finalize();
            u64::from_le_bytes(d[..8].try_into().expect("8 bytes")) | 1 << 63
        } else {
            continue;
        };
        f.out.link_ids.insert(ino, id);
    }
    // Unlinked-but-open files are not in the tree, but their journal data
    // must be in objects before the segments holding it are deleted.
    let orphans: Vec<u64> = f
        .state
        .inodes
        .iter()
        .filter(|(_, n)| n.nlink == 0 && matches!(n.data, Data::File(_)))
        .map(|(i, _)| *i)
        .collect();
    for o in orphans {
        f.file_extents(o)?;
    }
    let root = f.dir_entry(ROOT_INO, Vec::new())?;
    // The root itself counts (docs/format.md: stats.entries, root included).
    f.out.stats.entries += 1;
    let (id, written) = store.put_root(root)?;
    f.count(written);
    f.out.root = id;
    Ok(f.out)
}

/// Trees already counted by [`subtree_stats`]: trees are immutable, so a
/// count never goes stale, and a fork's later commits read only new trees.
static TREE_STATS: LazyLock<Mutex<HashMap<ObjectId, (u64, u64)>>> = LazyLock::new(Default::default);
/// Bound on [`TREE_STATS`] (about 50 bytes an entry); cleared when reached.
const TREE_STATS_MAX: usize = 1 << 20;

/// Entries under tree `id` (at every depth, not counting the directory
/// itself) and the bytes of its regular files: an unchanged directory's share
/// of a commit's `stats`.
fn subtree_stats(store: &Store, id: &ObjectId) -> Result<(u64, u64)> {
    // Post-order with an explicit stack (no depth of nesting can overflow
    // the thread's): a tree is counted once its subtrees are, each read
    // once; counts found are kept here even after the memo is cleared.
    let mut known: HashMap<ObjectId, (u64, u64)> = HashMap::new();
    let mut stack: Vec<(ObjectId, Option<crate::store::Tree>)> = vec![(*id, None)];
    while let Some((tid, listed)) = stack.pop() {
        if known.contains_key(&tid) {
            continue;
        }
        if let Some(s) = TREE_STATS.lock().get(&tid) {
            known.insert(tid, *s);
            continue;
        }
        let Some(tree) = listed else {
            let tree = store.get_tree(&tid, "a directory of the fork's base")?;
            let subs: Vec<ObjectId> = tree
                .entries
                .iter()
                .filter_map(|e| match &e.content {
                    Content::Tree(sub) if !known.contains_key(sub) => Some(*sub),
                    _ => None,
                })
                .collect();
            stack.push((tid, Some(tree)));
            stack.extend(subs.into_iter().map(|s| (s, None)));
            continue;
        };
        let (mut entries, mut bytes) = (tree.entries.len() as u64, 0);
        for e in &tree.entries {
            match &e.content {
                Content::Tree(sub) => {
                    let (n, b) = known.get(sub).copied().unwrap_or_default();
                    entries += n;
                    bytes += b;
                }
                _ if e.kind == Kind::File => bytes += e.size,
                _ => {}
            }
        }
        known.insert(tid, (entries, bytes));
        let mut memo = TREE_STATS.lock();
        if memo.len() >= TREE_STATS_MAX {
            memo.clear();
        }
        memo.insert(tid, (entries, bytes));
    }
    Ok(known.get(id).copied().unwrap_or_default())
}

/// The loaded directories whose tree may differ from their cache (see
/// [`TreeCache`]): those without a cache, changed since it was taken, or
/// holding an inode changed since, and their ancestors. Every change goes
/// through `inode_mut`, which stamps the inode; a directory's entries are
/// its own data, so adding or removing one stamps it. A fold visits a
/// directory's children only after the directory, so a child's cache is
/// never newer than its parent's (checked, too).
fn stale_dirs(state: &ForkState) -> HashSet<u64> {
    let mut stale = HashSet::new();
    for (&ino, n) in &state.inodes {
        let Data::Dir(Dir::Loaded(kids)) = &n.data else {
            continue;
        };
        let fresh = n.tree.as_deref().is_some_and(|t| {
            n.stamp <= t.at
                && kids.values().all(|c| {
                    state.inodes.get(c).is_some_and(|c| {
                        c.stamp <= t.at && c.tree.as_deref().is_none_or(|ct| ct.at <= t.at)
                    })
                })
        });
        if fresh {
            continue;
        }
        let mut d = ino;
        while stale.insert(d) {
            let p = state.inodes.get(&d).map_or(d, |n| n.parent);
            if p == d {
                break;
            }
            d = p;
        }
    }
    stale
}

struct Folder<'a> {
    state: &'a ForkState,
    store: &'a Store,
    wal: &'a Wal,
    /// `None`: reuse no directory tree (the whole tree was loaded).
    stale: Option<HashSet<u64>>,
    /// Trees are kept for directories numbered below this.
    live: u64,
    out: Folded,
}

impl Folder<'_> {
    fn count(&mut self, written: u64) {
        if written > 0 {
            self.out.stats.new_objects += 1;
            self.out.stats.new_bytes_compressed += written;
        }
    }

    /// The entry of inode `ino` under `name`, with metadata only.
    fn meta(&self, ino: u64, n: &Inode, name: Vec<u8>) -> Entry {
        Entry {
            name,
            kind: n.kind,
            perm: n.perm,
            uid: n.uid,
            gid: n.gid,
            mtime_ns: n.mtime,
            ctime_ns: n.ctime,
            size: n.dsize,
            nlink: n.nlink,
            link_id: self.out.link_ids.get(&ino).copied().unwrap_or(0),
            rdev: n.rdev,
            xattrs: n
                .xattrs
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            flags: n.flags,
            content: Content::None,
        }
    }

    /// The entry of loaded directory `ino` with the tree of its cache, when
    /// nothing in it changed since (its subtree's stats counted).
    fn cached_dir(&mut self, ino: u64, name: &[u8]) -> Option<Entry> {
        let n = &self.state.inodes[&ino];
        if !matches!(n.data, Data::Dir(Dir::Loaded(_)))
            || self.stale.as_ref().is_none_or(|s| s.contains(&ino))
        {
            return None;
        }
        let t = *n.tree.as_deref()?;
        let mut e = self.meta(ino, n, name.to_vec());
        e.content = Content::Tree(t.id);
        self.out.stats.entries += t.entries;
        self.out.stats.bytes += t.bytes;
        let at = self.out.at;
        self.out.trees.insert(ino, TreeCache { at, ..t });
        Some(e)
    }

    /// A directory's entry, its tree stored (iteratively, deepest first).
    fn dir_entry(&mut self, ino: u64, name: Vec<u8>) -> Result<Entry> {
        // Explicit stack: (dir ino, name, child entries built so far, next
        // child index, stats when it started).
        struct Frame {
            ino: u64,
            name: Vec<u8>,
            kids: Vec<(Vec<u8>, u64)>,
            done: Vec<Entry>,
            before: (u64, u64),
        }
        let start = |s: &Self, ino: u64, name: Vec<u8>| -> Frame {
            let kids = match &s.state.inodes[&ino].data {
                Data::Dir(Dir::Loaded(k)) => k.iter().map(|(n, i)| (n.clone(), *i)).collect(),
                _ => Vec::new(),
            };
            Frame {
                ino,
                name,
                kids,
                done: Vec::new(),
                before: (s.out.stats.entries, s.out.stats.bytes),
            }
        };
        if let Some(e) = self.cached_dir(ino, &name) {
            return Ok(e);
        }
        let mut stack = vec![start(self, ino, name)];
        loop {
            let top = stack.last_mut().expect("non-empty");
            if top.done.len() < top.kids.len() {
                let (cname, cino) = top.kids[top.done.len()].clone();
                let c = &self.state.inodes[&cino];
                if c.kind == Kind::Dir {
                    if let Some(e) = self.cached_dir(cino, &cname) {
                        stack.last_mut().expect("non-empty").done.push(e);
                        continue;
                    }
                    let fr = start(self, cino, cname);
                    stack.push(fr);
                } else {
                    let e = self.leaf_entry(cino, cname)?;
                    stack.last_mut().expect("non-empty").done.push(e);
                }
                continue;
            }
            let fr = stack.pop().expect("non-empty");
            let n = &self.state.inodes[&fr.ino];
            let mut e = self.meta(fr.ino, n, fr.name);
            self.out.stats.entries += fr.done.len() as u64;
            self.out.stats.bytes += fr
                .done
                .iter()
                .filter(|c| c.kind == Kind::File)
                .map(|c| c.size)
                .sum::<u64>();
            let base = match &n.data {
                Data::Dir(d) => d.base_tree(),
                _ => None,
            };
            e.content = match base {
                Some(id) => {
                    let (entries, bytes) = subtree_stats(self.store, &id)?;
                    self.out.stats.entries += entries;
                    self.out.stats.bytes += bytes;
                    Content::Tree(id)
                }
                _ => {
                    let tree = Tree { entries: fr.done };
                    let (id, written) = self.store.put_tree(&tree)?;
                    self.count(written);
                    if fr.ino < self.live {
                        let t = TreeCache {
                            id,
                            entries: self.out.stats.entries - fr.before.0,
                            bytes: self.out.stats.bytes - fr.before.1,
                            at: self.out.at,
                        };
                        self.out.trees.insert(fr.ino, t);
                    }
                    Content::Tree(id)
                }
            };
            match stack.last_mut() {
                Some(parent) => parent.done.push(e),
                None => return Ok(e),
            }
        }
    }

    fn leaf_entry(&mut self, ino: u64, name: Vec<u8>) -> Result<Entry> {
        let n = &self.state.inodes[&ino];
        let mut e = self.meta(ino, n, name);
        match &n.data {
            Data::File(f) => {
                e.size = f.size;
                e.content = Content::Extents(self.file_extents(ino)?);
            }
            Data::Symlink(t) => {
                e.size = t.len() as u64;
                e.content = Content::Target(t.clone());
            }
            _ => {}
        }
        Ok(e)
    }

    /// A file's extents: its committed ones if unchanged, else chunked now
    /// (once per inode, shared by its hardlinks).
    fn file_extents(&mut self, ino: u64) -> Result<Vec<Extent>> {
        let state = self.state;
        let Data::File(f) = &state.inodes[&ino].data else {
            return Ok(Vec::new());
        };
        if !f.changed
            && let Some(committed) = &f.committed
        {
            return Ok(committed.as_ref().clone());
        }
        if let Some(done) = self.out.extents.get(&ino) {
            return Ok(done.clone());
        }
        let mut io = FileIo {
            store: self.store,
            wal: self.wal,
            pieces: &f.pieces,
            ino,
            cached: None,
            stats: &mut self.out.stats,
        };
        let extents = chunk_file(f, &mut io)?;
        self.out.extents.insert(ino, extents.clone());
        self.out.read.insert(ino, f.pieces.clone());
        Ok(extents)
    }
}

/// Reads a file's bytes from its pieces (base objects, verified, and journal
/// data) and stores its new chunks.
struct FileIo<'a> {
    store: &'a Store,
    wal: &'a Wal,
    pieces: &'a PieceMap,
    ino: u64,
    /// The base object read last (a window spans a few; reads go forward).
    cached: Option<(ObjectId, Vec<u8>)>,
    stats: &'a mut Stats,
}

impl ChunkIo for FileIo<'_> {
    fn read(&mut self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let mut at = 0usize;
        for (len, src) in plan(self.pieces, pos, pos + buf.len() as u64) {
            let part = &mut buf[at..at + len as usize];
            match src {
                None => part.fill(0),
                Some(Src::Journal { seg, off }) => self.wal.read(seg, off, part)?,
                Some(Src::Base { id, off }) => {
                    if self.cached.as_ref().is_none_or(|(c, _)| *c != id) {
                        let what = format!("fork inode {}", self.ino);
                        self.cached = Some((id, self.store.get_object(&id, &what)?));
                    }
                    let data = &self.cached.as_ref().expect("cached").1;
                    let from = off as usize;
                    let Some(s) = data.get(from..from + part.len()) else {
                        return Err(Error::Corrupt {
                            path: Default::default(),
                            detail: format!("object {id} is shorter than its extent"),
                        });
                    };
                    part.copy_from_slice(s);
                }
            }
            at += len as usize;
        }
        Ok(())
    }

    fn put(&mut self, data: &[u8]) -> Result<ObjectId> {
        let (id, written) = self.store.put_object(data)?;
        if written > 0 {
            self.stats.new_objects += 1;
            self.stats.new_bytes_compressed += written;
        }
        Ok(id)
    }
}
