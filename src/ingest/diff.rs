//! Compare two checkpoints entry by entry.
//!
//! Subtrees with the same tree id are skipped without being read. A path that
//! exists on one side only is reported once (an added or removed directory
//! lists the directory itself, not its contents). A path on both sides is
//! `Changed` with the list of what differs. The root directory is reported as
//! `"."` when its own metadata differs. ctime is ignored (it changes whenever
//! anything is touched), and so are hardlink ids (they are renumbered when
//! links are added earlier in the tree); link counts are compared instead.

use crate::store::{Checkpoint, Content, Entry, Kind, ObjectId, Store};

use super::{Error, Result, join};

/// How a path differs between the two checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// Only in the second checkpoint.
    Added,
    /// Only in the first checkpoint.
    Removed,
    /// In both, differing in the listed aspects, joined by ",": any of
    /// "type", "content", "target", "mode", "owner", "mtime", "xattrs",
    /// "flags" (`chattr`), "links".
    Changed(String),
}

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Relative, '/'-separated, raw bytes ("." for the root directory).
    pub path: Vec<u8>,
    pub kind: ChangeKind,
}

/// The differences from checkpoint `a` to checkpoint `b`, sorted by path.
pub fn diff(store: &Store, a: &Checkpoint, b: &Checkpoint) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    if a.root == b.root {
        return Ok(out);
    }
    let (ra, rb) = (store.root_entry(a)?, store.root_entry(b)?);
    compare(&ra, &rb, b".", &mut out);
    if let (Some(ta), Some(tb)) = (ra.tree_id(), rb.tree_id()) {
        diff_trees(store, ta, tb, &[], &mut out)?;
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    Ok(out)
}

/// Report the differences between the trees `a` and `b` found under
/// `prefix`, and between their subtrees, with a worklist instead of
/// recursion (no depth of nesting can overflow the stack; the caller sorts).
fn diff_trees(
    store: &Store,
    a: ObjectId,
    b: ObjectId,
    prefix: &[u8],
    out: &mut Vec<Change>,
) -> Result<()> {
    let mut todo = vec![(a, b, prefix.to_vec())];
    while let Some((a, b, prefix)) = todo.pop() {
        diff_pair(store, a, b, &prefix, out, &mut todo)?;
    }
    Ok(())
}

/// The differences between the entries of trees `a` and `b`; pairs of
/// subtrees to compare go to `todo`.
fn diff_pair(
    store: &Store,
    a: ObjectId,
    b: ObjectId,
    prefix: &[u8],
    out: &mut Vec<Change>,
    todo: &mut Vec<(ObjectId, ObjectId, Vec<u8>)>,
) -> Result<()> {
    if a == b {
        return Ok(());
    }
    let context = String::from_utf8_lossy(prefix).into_owned();
    let ta = store.get_tree(&a, &context).map_err(Error::Store)?;
    let tb = store.get_tree(&b, &context).map_err(Error::Store)?;
    let (mut i, mut j) = (0, 0);
    while i < ta.entries.len() || j < tb.entries.len() {
        let ea = ta.entries.get(i);
        let eb = tb.entries.get(j);
        let order = match (ea, eb) {
            (Some(x), Some(y)) => x.name.cmp(&y.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match (order, ea, eb) {
            (std::cmp::Ordering::Less, Some(x), _) => {
                push(out, join(prefix, &x.name), ChangeKind::Removed);
                i += 1;
            }
            (std::cmp::Ordering::Greater, _, Some(y)) => {
                push(out, join(prefix, &y.name), ChangeKind::Added);
                j += 1;
            }
            (_, Some(x), Some(y)) => {
                let path = join(prefix, &x.name);
                compare(x, y, &path, out);
                if let (Some(sa), Some(sb)) = (x.tree_id(), y.tree_id()) {
                    todo.push((sa, sb, path));
                }
                i += 1;
                j += 1;
            }
            _ => break,
        }
    }
    Ok(())
}

/// Report `path` as changed if the entries differ in anything but their
/// directory contents (which are compared entry by entry).
fn compare(a: &Entry, b: &Entry, path: &[u8], out: &mut Vec<Change>) {
    let what = differences(a, b);
    if !what.is_empty() {
        push(out, path.to_vec(), ChangeKind::Changed(what.join(",")));
    }
}

/// What differs between two entries of the same name.
fn differences(a: &Entry, b: &Entry) -> Vec<&'static str> {
    if a.kind != b.kind {
        return vec!["type"];
    }
    let mut what = Vec::new();
    match (&a.content, &b.content) {
        (Content::Target(x), Content::Target(y)) if x != y => what.push("target"),
        (Content::Extents(x), Content::Extents(y)) if x != y || a.size != b.size => {
            what.push("content")
        }
        _ if matches!(a.kind, Kind::CharDev | Kind::BlockDev) && a.rdev != b.rdev => {
            what.push("content")
        }
        _ => {}
    }
    if a.perm != b.perm {
        what.push("mode");
    }
    if (a.uid, a.gid) != (b.uid, b.gid) {
        what.push("owner");
    }
    if a.mtime_ns != b.mtime_ns {
        what.push("mtime");
    }
    if a.xattrs != b.xattrs {
        what.push("xattrs");
    }
    if a.flags != b.flags {
        what.push("flags");
    }
    if a.kind != Kind::Dir && a.nlink != b.nlink {
        what.push("links");
    }
    what
}

fn push(out: &mut Vec<Change>, path: Vec<u8>, kind: ChangeKind) {
    out.push(Change { path, kind });
}
