//! The inode table: inode number -> node (an entry of the checkpoint, the
//! directory it was first found in, and for directories their children once
//! loaded).
//!
//! Inode numbers are handed out on first sight (lookup or readdir of the parent)
//! and never reused, so they stay stable for the life of the mount; `forget` need
//! not do anything. Entries sharing a non-zero `link_id` (hardlinks) get one inode.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::store::{Content, Entry, Kind};

/// The root directory's inode number (FUSE's `FUSE_ROOT_ID`).
pub const ROOT_INO: u64 = 1;

/// Parent links are followed at most this far when rebuilding a path for a log
/// line (they cannot loop, but a bound costs nothing).
const MAX_PATH_DEPTH: usize = 4096;

/// One inode of the mount.
#[derive(Debug)]
pub struct Node {
    pub ino: u64,
    /// The directory this inode was first found in; the root is its own parent.
    pub parent: u64,
    /// The checkpoint's entry; its `name` is the name in `parent`.
    pub entry: Entry,
    /// Bytes of stored (non-hole) data, for `st_blocks`; saturates on hostile sizes.
    pub allocated: u64,
    /// For regular files: the offset where each extent starts, or `None` when the
    /// extents do not add up to the file size (a malformed tree; reads fail).
    pub extent_starts: Option<Vec<u64>>,
}

/// A loaded directory: its children's names (sorted) and inode numbers.
pub type Children = Vec<(Vec<u8>, u64)>;

/// The table of every inode handed out so far. Safe to share between threads.
pub struct InodeTable {
    inner: RwLock<Inner>,
}

struct Inner {
    nodes: HashMap<u64, Arc<Node>>,
    children: HashMap<u64, Arc<Children>>,
    by_link_id: HashMap<u64, u64>,
    next_ino: u64,
}

impl InodeTable {
    /// A table holding only the root directory.
    pub fn new(root: Entry) -> InodeTable {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT_INO, Arc::new(Node::new(ROOT_INO, ROOT_INO, root)));
        InodeTable {
            inner: RwLock::new(Inner {
                nodes,
                children: HashMap::new(),
                by_link_id: HashMap::new(),
                next_ino: ROOT_INO + 1,
            }),
        }
    }

    /// The node for `ino`, if that number was handed out.
    pub fn get(&self, ino: u64) -> Option<Arc<Node>> {
        self.inner.read().nodes.get(&ino).cloned()
    }

    /// The children of directory `ino`, if already loaded.
    pub fn children(&self, ino: u64) -> Option<Arc<Children>> {
        self.inner.read().children.get(&ino).cloned()
    }

    /// Record the entries of directory `dir` (from its tree object), giving each
    /// an inode number. If another thread loaded it first, its result is kept,
    /// so a name maps to one inode number for the life of the mount.
    pub fn insert_children(&self, dir: u64, mut entries: Vec<Entry>) -> Arc<Children> {
        let mut inner = self.inner.write();
        if let Some(existing) = inner.children.get(&dir) {
            return existing.clone();
        }
        // Trees are sorted by the store; sort again so a hostile tree cannot
        // break the binary search in lookup.
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
        let mut list = Vec::with_capacity(entries.len());
        for entry in entries {
            let name = entry.name.clone();
            let ino = inner.assign(dir, entry);
            list.push((name, ino));
        }
        let list = Arc::new(list);
        inner.children.insert(dir, list.clone());
        list
    }

    /// The path of `ino` relative to the mount root, as raw bytes ("" for the
    /// root). A hardlinked file is named by the first link that was seen.
    pub fn path(&self, ino: u64) -> Vec<u8> {
        let inner = self.inner.read();
        let mut names: Vec<&[u8]> = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO && names.len() < MAX_PATH_DEPTH {
            let Some(node) = inner.nodes.get(&cur) else {
                break;
            };
            names.push(&node.entry.name);
            cur = node.parent;
        }
        names.reverse();
        names.join(&b'/')
    }

    /// How many inodes have been handed out.
    pub fn len(&self) -> usize {
        self.inner.read().nodes.len()
    }
}

impl Inner {
    /// The inode number for `entry` found in directory `parent`: the one already
    /// given to its hardlink group, or a new one.
    fn assign(&mut self, parent: u64, entry: Entry) -> u64 {
        let link_id = entry.link_id;
        let linkable = link_id != 0 && entry.kind != Kind::Dir;
        if linkable && let Some(&ino) = self.by_link_id.get(&link_id) {
            // A hostile tree could reuse a link id for different kinds of file.
            let same_kind = self
                .nodes
                .get(&ino)
                .is_some_and(|n| n.entry.kind == entry.kind);
            if same_kind {
                return ino;
            }
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes
            .insert(ino, Arc::new(Node::new(ino, parent, entry)));
        if linkable {
            self.by_link_id.entry(link_id).or_insert(ino);
        }
        ino
    }
}

impl Node {
    fn new(ino: u64, parent: u64, entry: Entry) -> Node {
        let (allocated, extent_starts) = match &entry.content {
            Content::Extents(extents) => {
                let allocated = extents
                    .iter()
                    .filter(|e| e.id.is_some())
                    .fold(0u64, |sum, e| sum.saturating_add(e.len));
                (allocated, extent_starts(&entry))
            }
            Content::Target(target) => (target.len() as u64, None),
            Content::None | Content::Tree(_) => (0, None),
        };
        Node {
            ino,
            parent,
            entry,
            allocated,
            extent_starts,
        }
    }
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
    use crate::store::{Extent, ObjectId};

    fn entry(name: &str, kind: Kind, link_id: u64, content: Content) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind,
            perm: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            size: 0,
            nlink: 1,
            link_id,
            rdev: 0,
            xattrs: vec![],
            content,
        }
    }

    #[test]
    fn hardlinks_share_an_inode_and_numbers_are_stable() {
        let id = ObjectId::of(b"d");
        let t = InodeTable::new(entry("", Kind::Dir, 0, Content::Tree(id)));
        let kids = t.insert_children(
            ROOT_INO,
            vec![
                entry("b", Kind::File, 9, Content::Extents(vec![])),
                entry("a", Kind::File, 9, Content::Extents(vec![])),
                entry("d", Kind::Dir, 0, Content::Tree(id)),
            ],
        );
        let names: Vec<&[u8]> = kids.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(names, [b"a".as_slice(), b"b", b"d"]);
        assert_eq!(kids[0].1, kids[1].1, "one inode for the link group");
        assert_ne!(kids[0].1, kids[2].1);
        let again = t.insert_children(ROOT_INO, vec![]);
        assert_eq!(*again, *kids, "a second load keeps the first numbers");
        let sub = t.insert_children(
            kids[2].1,
            vec![entry("x", Kind::File, 0, Content::Extents(vec![]))],
        );
        assert_eq!(t.path(sub[0].1), b"d/x");
        assert_eq!(t.path(ROOT_INO), b"");
    }

    #[test]
    fn unservable_names_are_dropped() {
        let id = ObjectId::of(b"d");
        let t = InodeTable::new(entry("", Kind::Dir, 0, Content::Tree(id)));
        let long = "x".repeat(256);
        let names = ["", ".", "..", "a/b", "nul\0", long.as_str(), "ok"];
        let kids = t.insert_children(
            ROOT_INO,
            names
                .iter()
                .map(|n| entry(n, Kind::File, 0, Content::Extents(vec![])))
                .collect(),
        );
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
