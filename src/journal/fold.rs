//! Fold a fork's state into trees and objects: the content of a commit.
//!
//! - An unloaded directory is its base tree, reused by id.
//! - A file whose data is unchanged reuses its base extents (no reading).
//! - A changed file is read piece by piece (base objects and journal data)
//!   and cut by [`cut_chunks`], the store's one content-defined chunker
//!   (snapshot and import cut through it too; a run of at most `MIN_CHUNK`
//!   bytes is one chunk), so an edited file shares most chunks with its base.
//!   Holes stay holes.
//! - Hardlinks: an inode that came from the base keeps its base `link_id`
//!   (other names of it may sit in unloaded subtrees, which keep that id);
//!   a new multi-link inode gets a fresh id derived from the parent
//!   checkpoint and the inode number, with the top bit set (base ids from
//!   snapshots are small counters, so they cannot collide; two fresh ids
//!   collide with probability 2^-63).
//! - If a base-hardlinked inode changed (data, metadata or link count), the
//!   names of it in unloaded subtrees would keep the old entry; the fold then
//!   loads every directory of the (throw-away) state first so all names are
//!   rebuilt. Rare and correct, but it reads the whole tree.

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::LazyLock;

use parking_lot::Mutex;

use sha2::{Digest, Sha256};

use super::state::{Data, Dir, ForkState, Inode, ROOT_INO, Src, plan};
use super::wal::Wal;
use super::{Error, Result};
use crate::store::chunk::cut_chunks;
use crate::store::{Content, Entry, Extent, Kind, ObjectId, Stats, Store, Tree};

/// What a fold produced.
#[derive(Debug)]
pub struct Folded {
    /// The root tree (from [`Store::put_root`]).
    pub root: ObjectId,
    /// The extents of every file that was (re)chunked, by inode.
    pub extents: HashMap<u64, Vec<Extent>>,
    /// The link id given to each hardlinked inode.
    pub link_ids: HashMap<u64, u64>,
    pub stats: Stats,
}

/// Fold `state` (a snapshot; it may be modified: see the module docs).
/// `salt` (the parent checkpoint) seeds fresh link ids.
pub fn fold(state: &mut ForkState, store: &Store, wal: &Wal, salt: &ObjectId) -> Result<Folded> {
    let needs_full_load = state
        .inodes
        .values()
        .any(|n| n.kind != Kind::Dir && n.link_id != 0 && n.dirty);
    if needs_full_load {
        state.load_all(store)?;
    }
    let mut f = Folder {
        state,
        store,
        wal,
        out: Folded {
            root: ObjectId([0; 32]),
            extents: HashMap::new(),
            link_ids: HashMap::new(),
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
    if let Some(s) = TREE_STATS.lock().get(id) {
        return Ok(*s);
    }
    let tree = store.get_tree(id, "a directory of the fork's base")?;
    let (mut entries, mut bytes) = (tree.entries.len() as u64, 0);
    for e in &tree.entries {
        match &e.content {
            Content::Tree(sub) => {
                let (n, b) = subtree_stats(store, sub)?;
                entries += n;
                bytes += b;
            }
            _ if e.kind == Kind::File => bytes += e.size,
            _ => {}
        }
    }
    let mut memo = TREE_STATS.lock();
    if memo.len() >= TREE_STATS_MAX {
        memo.clear();
    }
    memo.insert(*id, (entries, bytes));
    Ok((entries, bytes))
}

struct Folder<'a> {
    state: &'a ForkState,
    store: &'a Store,
    wal: &'a Wal,
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
            content: Content::None,
        }
    }

    /// A directory's entry, its tree stored (iteratively, deepest first).
    fn dir_entry(&mut self, ino: u64, name: Vec<u8>) -> Result<Entry> {
        // Explicit stack: (dir ino, name, child entries built so far, next child index).
        struct Frame {
            ino: u64,
            name: Vec<u8>,
            kids: Vec<(Vec<u8>, u64)>,
            done: Vec<Entry>,
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
            }
        };
        let mut stack = vec![start(self, ino, name)];
        loop {
            let top = stack.last_mut().expect("non-empty");
            if top.done.len() < top.kids.len() {
                let (cname, cino) = top.kids[top.done.len()].clone();
                let c = &self.state.inodes[&cino];
                if c.kind == Kind::Dir {
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
            e.content = match &n.data {
                Data::Dir(Dir::Unloaded(id)) => {
                    let (entries, bytes) = subtree_stats(self.store, id)?;
                    self.out.stats.entries += entries;
                    self.out.stats.bytes += bytes;
                    Content::Tree(*id)
                }
                _ => {
                    let tree = Tree { entries: fr.done };
                    let (id, written) = self.store.put_tree(&tree)?;
                    self.count(written);
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

    /// A file's extents: its base ones if unchanged, else chunked now (once
    /// per inode, shared by its hardlinks).
    fn file_extents(&mut self, ino: u64) -> Result<Vec<Extent>> {
        let Data::File(f) = &self.state.inodes[&ino].data else {
            return Ok(Vec::new());
        };
        if let Some(orig) = &f.orig {
            return Ok(orig.as_ref().clone());
        }
        if let Some(done) = self.out.extents.get(&ino) {
            return Ok(done.clone());
        }
        let segments = plan(&f.pieces, 0, f.size);
        let mut extents = Vec::new();
        let mut i = 0;
        while i < segments.len() {
            if segments[i].1.is_none() {
                extents.push(Extent {
                    len: segments[i].0,
                    id: None,
                });
                i += 1;
                continue;
            }
            let j = segments[i..]
                .iter()
                .position(|s| s.1.is_none())
                .map_or(segments.len(), |p| i + p);
            let run: Vec<(u64, Src)> = segments[i..j]
                .iter()
                .map(|(l, s)| (*l, s.expect("data")))
                .collect();
            self.chunk_run(ino, run, &mut extents)?;
            i = j;
        }
        self.out.extents.insert(ino, extents.clone());
        Ok(extents)
    }

    /// Cut a run of data into chunks and store them.
    fn chunk_run(
        &mut self,
        ino: u64,
        run: Vec<(u64, Src)>,
        extents: &mut Vec<Extent>,
    ) -> Result<()> {
        let total: u64 = run.iter().map(|r| r.0).sum();
        let mut reader = PieceReader {
            store: self.store,
            wal: self.wal,
            ino,
            run,
            idx: 0,
            within: 0,
            cached: None,
            error: None,
        };
        // Each chunk is stored as it is cut, so memory stays bounded.
        let mut failed: Option<Error> = None;
        let cut = cut_chunks(&mut reader, total, |data: Vec<u8>| {
            let stored = self.store.put_object(&data).map_err(Error::from);
            match stored {
                Ok((id, written)) => {
                    self.count(written);
                    extents.push(Extent {
                        len: data.len() as u64,
                        id: Some(id),
                    });
                    Ok(())
                }
                Err(e) => {
                    failed = Some(e);
                    Err(io::Error::other("store failed"))
                }
            }
        });
        if let Some(e) = reader.error.take().or(failed) {
            return Err(e);
        }
        cut.map_err(io_err)
    }
}

fn io_err(e: io::Error) -> Error {
    Error::Io {
        path: "journal fold".into(),
        source: e,
    }
}

/// Reads a run of pieces in order: base objects (verified) and journal data.
struct PieceReader<'a> {
    store: &'a Store,
    wal: &'a Wal,
    ino: u64,
    run: Vec<(u64, Src)>,
    idx: usize,
    within: u64,
    cached: Option<(ObjectId, Vec<u8>)>,
    /// The real error behind an io::Error returned to the chunker.
    error: Option<Error>,
}

impl Read for PieceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(&(len, src)) = self.run.get(self.idx) else {
            return Ok(0);
        };
        let left = len - self.within;
        let n = (buf.len() as u64).min(left) as usize;
        let r = match src {
            Src::Journal { seg, off } => self.wal.read(seg, off + self.within, &mut buf[..n]),
            Src::Base { id, off } => {
                if self.cached.as_ref().is_none_or(|(c, _)| *c != id) {
                    match self
                        .store
                        .get_object(&id, &format!("fork inode {}", self.ino))
                    {
                        Ok(d) => self.cached = Some((id, d)),
                        Err(e) => {
                            self.error = Some(e.into());
                            return Err(io::Error::other("object read failed"));
                        }
                    }
                }
                let data = &self.cached.as_ref().expect("cached").1;
                let from = (off + self.within) as usize;
                match data.get(from..from + n) {
                    Some(s) => {
                        buf[..n].copy_from_slice(s);
                        Ok(())
                    }
                    None => Err(Error::Corrupt {
                        path: Default::default(),
                        detail: format!("object {id} is shorter than its extent"),
                    }),
                }
            }
        };
        if let Err(e) = r {
            self.error = Some(e);
            return Err(io::Error::other("fork data read failed"));
        }
        self.within += n as u64;
        if self.within == len {
            self.idx += 1;
            self.within = 0;
        }
        Ok(n)
    }
}
