//! The inode table: inode number -> node (an entry of the checkpoint and the
//! directory it was first found in) and, for directories, their children.
//!
//! Numbers are handed out a directory at a time: the first time a directory's
//! children are listed they get a contiguous range, recorded for good with the
//! directory's tree id (a few dozen bytes per directory). The nodes and child
//! lists themselves are a cache of recently used directories, the
//! [`DirCache`], bounded in bytes and shared by every table of a mount (a
//! browse mount has one table per checkpoint): an evicted directory is
//! rebuilt from its tree object, in the same order, so every number keeps
//! meaning the same entry for the life of the mount and `forget` need not do
//! anything. Entries sharing a non-zero `link_id` (hardlinks) get one inode:
//! the number of the first one seen; the others' slots in their ranges stay
//! unused.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use crate::store::model::{ROOT_INO, ext4};
use crate::store::{Content, Entry, Extent, Kind, ObjectId};

/// Parent links are followed at most this far when rebuilding a path for a log
/// line (they cannot loop, but a bound costs nothing).
const MAX_PATH_DEPTH: usize = 4096;

/// What malloc adds to each allocation (its header and rounding), about.
const ALLOC_OVERHEAD: usize = 16;

/// What a numbered directory costs for good: its [`Range`] and its place in
/// the table's map, about.
const RANGE_BYTES: usize = size_of::<Range>() + 3 * size_of::<u64>() + 8;

/// What a hardlink group costs for good in the table's map, about.
const LINK_BYTES: usize = 4 * size_of::<u64>() + 8;

/// One inode of the mount.
#[derive(Debug)]
pub struct Node {
    pub ino: u64,
    /// The directory this inode was first found in; the root is its own parent.
    pub parent: u64,
    /// The checkpoint's entry; its `name` is the name in `parent`.
    pub entry: Entry,
    /// `st_blocks` of a regular file or symlink as ext4 would allocate it
    /// ([`crate::store::model::ext4`]); 0 for the others (a directory's depends on
    /// its children).
    pub blocks: u64,
    /// For regular files: the offset where each extent starts, or `None` when the
    /// extents do not add up to the file size (a malformed tree; reads fail).
    pub extent_starts: Option<Vec<u64>>,
}

/// A loaded directory: its children's names (sorted) and inode numbers.
pub type Children = Vec<(Vec<u8>, u64)>;

/// What the table knows of an inode number.
pub enum Found {
    Node(Arc<Node>),
    /// Numbered, but its directory is not in memory: load tree `tree` and
    /// give its entries to [`InodeTable::insert_children`] for `dir`.
    Evicted {
        dir: u64,
        tree: ObjectId,
    },
    /// Never handed out.
    Unknown,
}

/// The directories in memory of every inode table of one mount, least
/// recently used evicted first, within a byte budget that also pays for
/// what the tables keep for good (the numbering: [`RANGE_BYTES`] per
/// directory listed, [`LINK_BYTES`] per hardlink group). The directory
/// being loaded is always kept, even when it alone is over the budget.
/// Safe to share between threads.
pub struct DirCache {
    lru: Mutex<DirLru>,
    budget: usize,
    /// Bytes of numbering the tables keep for good.
    fixed: AtomicUsize,
    next_table: AtomicU64,
}

struct DirLru {
    /// (table, directory inode) -> the directory.
    dirs: LruCache<(u64, u64), Loaded>,
    /// Bytes of the directories in `dirs` ([`Loaded::bytes`]).
    bytes: usize,
}

impl DirCache {
    /// A cache of at most about `budget` bytes.
    pub fn new(budget: usize) -> DirCache {
        DirCache {
            lru: Mutex::new(DirLru {
                dirs: LruCache::unbounded(),
                bytes: 0,
            }),
            budget,
            fixed: AtomicUsize::new(0),
            next_table: AtomicU64::new(0),
        }
    }

    /// Bytes held now: the directories in memory and the tables' numbering.
    pub fn bytes(&self) -> usize {
        self.lru.lock().bytes + self.fixed.load(Ordering::Relaxed)
    }

    /// The budget in bytes.
    #[cfg(test)]
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Charge `bytes` a view keeps for good outside any table (a browse
    /// mount's records and store nodes) against the budget.
    pub fn keep(&self, bytes: usize) {
        self.fixed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// How many directories are in memory.
    #[cfg(test)]
    pub fn dirs(&self) -> usize {
        self.lru.lock().dirs.len()
    }

    /// Add `loaded` for (`table`, `dir`), then evict the least recently used
    /// others until the whole fits the budget. What is evicted is dropped
    /// after the lock is released.
    fn put(&self, table: u64, dir: u64, loaded: Loaded) {
        let mut evicted = Vec::new();
        {
            let mut g = self.lru.lock();
            g.bytes += loaded.bytes;
            if let Some(old) = g.dirs.put((table, dir), loaded) {
                g.bytes -= old.bytes;
                evicted.push(old);
            }
            let fixed = self.fixed.load(Ordering::Relaxed);
            while g.bytes + fixed > self.budget && g.dirs.len() > 1 {
                match g.dirs.pop_lru() {
                    Some((_, l)) => {
                        g.bytes -= l.bytes;
                        evicted.push(l);
                    }
                    None => break,
                }
            }
        }
        drop(evicted);
    }

    /// Run `f` on the directory (`table`, `dir`) if in memory, marking it used.
    fn with<T>(&self, table: u64, dir: u64, f: impl FnOnce(&Loaded) -> T) -> Option<T> {
        self.lru.lock().dirs.get(&(table, dir)).map(f)
    }
}

impl std::fmt::Debug for DirCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DirCache({}/{} bytes)", self.bytes(), self.budget)
    }
}

/// The table of every inode handed out so far. Safe to share between threads.
pub struct InodeTable {
    root: Arc<Node>,
    /// This table's key in `cache`.
    id: u64,
    cache: Arc<DirCache>,
    inner: Mutex<Inner>,
}

/// The numbers a directory's children got.
struct Range {
    first: u64,
    len: u64,
    dir: u64,
    tree: ObjectId,
}

/// A directory in memory: its child list, and the nodes of its range
/// (`None` for a hardlink whose inode is numbered elsewhere).
struct Loaded {
    children: Arc<Children>,
    nodes: Vec<Option<Arc<Node>>>,
    /// What all this costs in memory, about ([`node_bytes`]).
    bytes: usize,
}

struct Inner {
    /// Every range handed out, in number order.
    ranges: Vec<Range>,
    /// Directory inode -> its range's index.
    range_of: HashMap<u64, usize>,
    /// Link id -> the inode of the first entry seen with it, and its kind.
    by_link_id: HashMap<u64, (u64, Kind)>,
    next_ino: u64,
    /// Bytes of `ranges`, `range_of` and `by_link_id`, charged to the cache.
    fixed: usize,
}

impl InodeTable {
    /// A table holding only the root directory, keeping the children of
    /// recently used directories in `cache` (shared with the mount's other
    /// tables).
    pub fn new(root: Entry, cache: Arc<DirCache>) -> InodeTable {
        InodeTable {
            root: Arc::new(Node::new(ROOT_INO, ROOT_INO, root)),
            id: cache.next_table.fetch_add(1, Ordering::Relaxed),
            cache,
            inner: Mutex::new(Inner {
                ranges: Vec::new(),
                range_of: HashMap::new(),
                by_link_id: HashMap::new(),
                next_ino: ROOT_INO + 1,
                fixed: 0,
            }),
        }
    }

    /// The node for `ino`, or which directory to load to get it.
    pub fn get(&self, ino: u64) -> Found {
        if ino == ROOT_INO {
            return Found::Node(self.root.clone());
        }
        let (first, dir, tree) = {
            let inner = self.inner.lock();
            let i = inner.ranges.partition_point(|r| r.first <= ino);
            let Some(r) = i.checked_sub(1).map(|i| &inner.ranges[i]) else {
                return Found::Unknown;
            };
            if ino >= r.first + r.len {
                return Found::Unknown;
            }
            (r.first, r.dir, r.tree)
        };
        let found = self.cache.with(self.id, dir, |l| {
            match &l.nodes[(ino - first) as usize] {
                Some(n) => Found::Node(n.clone()),
                // The unused slot of a hardlink: never handed out.
                None => Found::Unknown,
            }
        });
        found.unwrap_or(Found::Evicted { dir, tree })
    }

    /// The children of directory `dir`, if in memory.
    pub fn children(&self, dir: u64) -> Option<Arc<Children>> {
        self.cache.with(self.id, dir, |l| l.children.clone())
    }

    /// Record the entries of directory `dir` (from its tree object `tree`):
    /// the first time, each gets a new inode number; after an eviction, the
    /// same numbers again. If another thread loaded it meanwhile, its result
    /// is kept.
    pub fn insert_children(
        &self,
        dir: u64,
        tree: ObjectId,
        mut entries: Vec<Entry>,
    ) -> Arc<Children> {
        // Trees are sorted by the store; sort again so a hostile tree cannot
        // break the binary search in lookup. The same tree always gives the
        // same list, so a reload numbers it as the first load did.
        let before = entries.len();
        entries.retain(|e| servable_name(&e.name));
        if entries.len() != before {
            tracing::warn!(
                dir,
                skipped = before - entries.len(),
                "skipping entries whose names no directory can hold"
            );
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        entries.dedup_by(|a, b| a.name == b.name);
        // Lock order: the table, then the cache.
        let mut inner = self.inner.lock();
        if let Some(children) = self.children(dir) {
            return children;
        }
        let fixed_before = inner.fixed;
        let first = match inner.range_of.get(&dir) {
            Some(&i) => inner.ranges[i].first,
            None => {
                let first = inner.next_ino;
                let len = entries.len() as u64;
                inner.next_ino += len;
                let index = inner.ranges.len();
                inner.ranges.push(Range {
                    first,
                    len,
                    dir,
                    tree,
                });
                inner.range_of.insert(dir, index);
                inner.fixed += RANGE_BYTES;
                first
            }
        };
        let mut children = Vec::with_capacity(entries.len());
        let mut nodes = Vec::with_capacity(entries.len());
        let mut bytes = size_of::<Loaded>() + 4 * ALLOC_OVERHEAD + 64;
        for (i, entry) in entries.into_iter().enumerate() {
            let slot = first + i as u64;
            let name = entry.name.clone();
            bytes += node_bytes(&entry);
            let ino = inner.link_target(slot, &entry);
            nodes.push((ino == slot).then(|| Arc::new(Node::new(slot, dir, entry))));
            children.push((name, ino));
        }
        let children = Arc::new(children);
        let grown = inner.fixed - fixed_before;
        self.cache.fixed.fetch_add(grown, Ordering::Relaxed);
        self.cache.put(
            self.id,
            dir,
            Loaded {
                children: children.clone(),
                nodes,
                bytes,
            },
        );
        children
    }

    /// The path of `ino` relative to the mount root, as raw bytes ("" for the
    /// root), from the directories in memory; see [`InodeTable::path_with`].
    pub fn path(&self, ino: u64) -> Vec<u8> {
        self.path_with(ino, |i| match self.get(i) {
            Found::Node(n) => Some(n),
            _ => None,
        })
    }

    /// The path of `ino` relative to the mount root, following parents that
    /// `node_of` gives; a part it cannot give is written `<inode N>`. A
    /// hardlinked file is named by the first link that was seen.
    pub fn path_with(&self, ino: u64, node_of: impl Fn(u64) -> Option<Arc<Node>>) -> Vec<u8> {
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO && names.len() < MAX_PATH_DEPTH {
            let Some(node) = node_of(cur) else {
                names.push(format!("<inode {cur}>").into_bytes());
                break;
            };
            names.push(node.entry.name.clone());
            cur = node.parent;
        }
        names.reverse();
        names.join(&b'/')
    }

    /// How many inode numbers have been handed out.
    pub fn len(&self) -> usize {
        (self.inner.lock().next_ino - ROOT_INO) as usize
    }
}

impl Drop for InodeTable {
    /// Its numbering is no longer kept (its directories in the cache go as
    /// they are evicted).
    fn drop(&mut self) {
        let fixed = self.inner.get_mut().fixed;
        self.cache.fixed.fetch_sub(fixed, Ordering::Relaxed);
    }
}

impl Inner {
    /// The inode number for `entry` in slot `slot`: the slot itself, or the
    /// number already given to its hardlink group.
    fn link_target(&mut self, slot: u64, entry: &Entry) -> u64 {
        let link_id = entry.link_id;
        if link_id == 0 || entry.kind == Kind::Dir {
            return slot;
        }
        match self.by_link_id.get(&link_id) {
            // A hostile tree could reuse a link id for different kinds of file.
            Some(&(ino, kind)) if kind == entry.kind => ino,
            Some(_) => slot,
            None => {
                self.by_link_id.insert(link_id, (slot, entry.kind));
                self.fixed += LINK_BYTES;
                slot
            }
        }
    }
}

impl Node {
    fn new(ino: u64, parent: u64, entry: Entry) -> Node {
        let (blocks, extent_starts) = match &entry.content {
            Content::Extents(extents) => {
                let starts = extent_starts(&entry);
                // Malformed extents (reads fail): counted as stored bytes.
                let blocks = match &starts {
                    Some(starts) => ext4::file_blocks(entry.size, data_ranges(extents, starts, 0)),
                    None => ext4::file_blocks(entry.size, [(0, entry.allocated_bytes())]),
                };
                (blocks, starts)
            }
            Content::Target(target) => (ext4::symlink_blocks(target.len() as u64), None),
            Content::None | Content::Tree(_) => (0, None),
        };
        Node {
            ino,
            parent,
            entry,
            blocks,
            extent_starts,
        }
    }
}

/// What the node of `e` costs in memory with its share of its directory's
/// child list, about: the node behind its `Arc`, its name twice (the entry's
/// and the child list's), its extents and their starts, its symlink target
/// and its extended attributes.
fn node_bytes(e: &Entry) -> usize {
    let content = match &e.content {
        Content::Extents(x) => {
            x.len() * (size_of::<Extent>() + size_of::<u64>()) + 2 * ALLOC_OVERHEAD
        }
        Content::Target(t) => t.len() + ALLOC_OVERHEAD,
        Content::None | Content::Tree(_) => 0,
    };
    let xattrs: usize = e
        .xattrs
        .iter()
        .map(|(k, v)| k.len() + v.len() + size_of::<(Vec<u8>, Vec<u8>)>() + 2 * ALLOC_OVERHEAD)
        .sum();
    size_of::<Node>()
        + 2 * size_of::<usize>()
        + ALLOC_OVERHEAD
        + 2 * (e.name.len() + ALLOC_OVERHEAD)
        + size_of::<(Vec<u8>, u64)>()
        + size_of::<Option<Arc<Node>>>()
        + content
        + xattrs
}

/// Whether a name can appear in a directory listing. The kernel rejects a whole
/// readdir reply holding an empty, over-long or slash-bearing name, so a hostile
/// tree's bad names are dropped instead.
fn servable_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != b"."
        && name != b".."
        && !name.contains(&b'/')
        && !name.contains(&0)
}

/// The byte ranges `[start, end)` of a file's stored (non-hole) extents, in
/// order, from the extent holding `from` on; `starts` from [`extent_starts`].
pub fn data_ranges<'a>(
    extents: &'a [Extent],
    starts: &'a [u64],
    from: u64,
) -> impl Iterator<Item = (u64, u64)> + 'a {
    let first = starts.partition_point(|&s| s <= from).saturating_sub(1);
    extents
        .iter()
        .zip(starts)
        .skip(first)
        .filter(|(e, _)| e.id.is_some() && e.len > 0)
        .map(|(e, &s)| (s, s.saturating_add(e.len)))
}

/// Where each extent of a regular file starts, or `None` when the extent
/// lengths overflow or do not add up to the entry's size.
fn extent_starts(entry: &Entry) -> Option<Vec<u64>> {
    let Content::Extents(extents) = &entry.content else {
        return None;
    };
    let mut starts = Vec::with_capacity(extents.len());
    let mut offset = 0u64;
    for extent in extents {
        starts.push(offset);
        offset = offset.checked_add(extent.len)?;
    }
    (offset == entry.size).then_some(starts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Extent;

    fn entry(name: &str, kind: Kind, link_id: u64, content: Content) -> Entry {
        Entry {
            link_id,
            ..crate::fs::testing::entry(name, kind, content)
        }
    }

    fn file(name: &str, link_id: u64) -> Entry {
        entry(name, Kind::File, link_id, Content::Extents(vec![]))
    }

    fn table(root: Entry, budget: usize) -> InodeTable {
        InodeTable::new(root, Arc::new(DirCache::new(budget)))
    }

    /// The node of `ino`, loading `trees[dir]` when it was evicted.
    fn node(t: &InodeTable, trees: &HashMap<u64, Vec<Entry>>, ino: u64) -> Arc<Node> {
        match t.get(ino) {
            Found::Node(n) => n,
            Found::Evicted { dir, tree } => {
                t.insert_children(dir, tree, trees[&dir].clone());
                match t.get(ino) {
                    Found::Node(n) => n,
                    _ => panic!("{ino} not there after loading {dir}"),
                }
            }
            Found::Unknown => panic!("{ino} unknown"),
        }
    }

    #[test]
    fn hardlinks_share_an_inode_and_numbers_are_stable() {
        let id = ObjectId::of(b"d");
        let t = table(entry("", Kind::Dir, 0, Content::Tree(id)), 1 << 20);
        let kids = t.insert_children(
            ROOT_INO,
            id,
            vec![
                file("b", 9),
                file("a", 9),
                entry("d", Kind::Dir, 0, Content::Tree(id)),
            ],
        );
        let names: Vec<&[u8]> = kids.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(names, [b"a".as_slice(), b"b", b"d"]);
        assert_eq!(kids[0].1, kids[1].1, "one inode for the link group");
        assert_ne!(kids[0].1, kids[2].1);
        let again = t.insert_children(ROOT_INO, id, vec![]);
        assert_eq!(*again, *kids, "a second load keeps the first numbers");
        let sub = t.insert_children(kids[2].1, id, vec![file("x", 0)]);
        assert_eq!(t.path(sub[0].1), b"d/x");
        assert_eq!(t.path(ROOT_INO), b"");
        assert!(matches!(t.get(kids[1].1 + 1000), Found::Unknown));
    }

    #[test]
    fn evicted_directories_come_back_with_the_same_numbers() {
        let root_id = ObjectId::of(b"root");
        let dir_id = |i: u64| ObjectId::of(&i.to_le_bytes());
        // A budget of about two directories of 4 files (with the numbering),
        // and 10 of them.
        let four = 4 * node_bytes(&file("f0-0", 0)) + size_of::<Loaded>() + 4 * ALLOC_OVERHEAD + 64;
        let budget = 2 * four + 11 * RANGE_BYTES + LINK_BYTES;
        let t = table(entry("", Kind::Dir, 0, Content::Tree(root_id)), budget);
        let mut trees: HashMap<u64, Vec<Entry>> = HashMap::new();
        let root: Vec<Entry> = (0..10)
            .map(|i| entry(&format!("d{i}"), Kind::Dir, 0, Content::Tree(dir_id(i))))
            .collect();
        trees.insert(ROOT_INO, root.clone());
        let dirs = t.insert_children(ROOT_INO, root_id, root);
        let mut seen = Vec::new();
        for (i, (_, dir)) in dirs.iter().enumerate() {
            // File "h" in every directory is one hardlink group.
            let kids: Vec<Entry> = (0..3)
                .map(|j| file(&format!("f{i}-{j}"), 0))
                .chain([file("h", 77)])
                .collect();
            trees.insert(*dir, kids.clone());
            let list = t.insert_children(*dir, dir_id(i as u64), kids);
            seen.push((*dir, list));
            assert!(t.cache.bytes() <= budget, "budget kept: {:?}", t.cache);
        }
        assert!(t.cache.dirs() < 11, "something was evicted");
        let h = seen[0].1[3].1;
        for (dir, list) in &seen {
            assert_eq!(list[3].1, h, "one inode for the link group in {dir}");
            for (name, ino) in list.iter() {
                let n = node(&t, &trees, *ino);
                assert_eq!(n.ino, *ino);
                if name != b"h" {
                    assert_eq!(&n.entry.name, name);
                    assert_eq!(n.parent, *dir);
                    // From memory only: an evicted directory is a number.
                    let path = t.path(*ino);
                    let full = [b"d".as_slice(), &n.entry.name[1..2], b"/", name].concat();
                    let short = [format!("<inode {dir}>/").as_bytes(), name].concat();
                    assert!(path == full || path == short, "{path:?}");
                }
            }
            // Listing it again after evictions: the same names and numbers.
            let again = match t.children(*dir) {
                Some(c) => c,
                None => t.insert_children(*dir, ObjectId::of(b"unused"), trees[dir].clone()),
            };
            assert_eq!(*again, **list);
        }
        assert_eq!(
            node(&t, &trees, h).parent,
            seen[0].0,
            "named by its first link"
        );
        assert_eq!(t.len(), 1 + 10 + 10 * 4);
    }

    #[test]
    fn tables_share_one_budget_and_give_back_their_numbering() {
        let id = ObjectId::of(b"d");
        let root = || entry("", Kind::Dir, 0, Content::Tree(id));
        let files = |n: usize| {
            (0..n)
                .map(|i| file(&format!("f{i}"), 0))
                .collect::<Vec<_>>()
        };
        let one = 100 * node_bytes(&file("f00", 0)) + size_of::<Loaded>() + 4 * ALLOC_OVERHEAD + 64;
        let cache = Arc::new(DirCache::new(one + one / 2));
        let a = InodeTable::new(root(), cache.clone());
        let b = InodeTable::new(root(), cache.clone());
        a.insert_children(ROOT_INO, id, files(100));
        assert!(a.children(ROOT_INO).is_some());
        b.insert_children(ROOT_INO, id, files(100));
        assert!(a.children(ROOT_INO).is_none(), "b's directory evicted a's");
        assert!(b.children(ROOT_INO).is_some());
        assert!(cache.bytes() <= cache.budget(), "{cache:?}");
        assert_eq!(cache.dirs(), 1);
        // Each table keeps its numbering for good, charged to the cache.
        let with_both = cache.bytes();
        drop(a);
        assert_eq!(cache.bytes(), with_both - RANGE_BYTES);
        // One directory over the whole budget is still served.
        let c = InodeTable::new(root(), cache.clone());
        assert_eq!(c.insert_children(ROOT_INO, id, files(300)).len(), 300);
        assert!(c.children(ROOT_INO).is_some());
        assert_eq!(cache.dirs(), 1);
    }

    #[test]
    fn unservable_names_are_dropped() {
        let id = ObjectId::of(b"d");
        let t = table(entry("", Kind::Dir, 0, Content::Tree(id)), 1 << 20);
        let long = "x".repeat(256);
        let names = ["", ".", "..", "a/b", "nul\0", long.as_str(), "ok"];
        let kids = t.insert_children(ROOT_INO, id, names.iter().map(|n| file(n, 0)).collect());
        assert_eq!(kids.len(), 1);
        assert_eq!(kids[0].0, b"ok");
    }

    #[test]
    fn extent_starts_reject_bad_sums() {
        let mut e = entry(
            "f",
            Kind::File,
            0,
            Content::Extents(vec![
                Extent { len: 3, id: None },
                Extent { len: 4, id: None },
            ]),
        );
        e.size = 7;
        assert_eq!(extent_starts(&e), Some(vec![0, 3]));
        e.size = 8;
        assert_eq!(extent_starts(&e), None);
        e.content = Content::Extents(vec![
            Extent {
                len: u64::MAX,
                id: None,
            },
            Extent { len: 2, id: None },
        ]);
        assert_eq!(extent_starts(&e), None);
    }
}
