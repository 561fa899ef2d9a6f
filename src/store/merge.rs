//! Three-way merge of two checkpoints against their merge base (`storefs
//! merge`), into a new checkpoint whose parents are both.
//!
//! The walk compares tree ids first and reads a directory's tree only where
//! all three versions differ: an unchanged subtree, or one changed on one
//! side only, is taken by its id without being read, so merging two
//! branches of a large tree costs the directories on the paths to what both
//! changed (see [`Outcome::trees_read`]).
//!
//! Per path (docs/guide.md, "Bringing branches together"):
//! - changed on one side only: that side's entry, whole (bytes, type, mode,
//!   owner, xattrs, mtime); the same change on both sides: taken once
//!   (entries are compared without their ctime and hardlink id);
//! - a regular file changed on both sides: when both only appended to the
//!   base's bytes, the base, then ours' appended bytes, then theirs'; else
//!   when all three are text, the line merge of [`text`]; else a conflict;
//! - metadata changed on both sides: mode, owner and xattrs each merged
//!   three-way (different changes of one are a conflict), mtime the later,
//!   `chattr` flags three-way, both sides' together when both changed them;
//! - conflicts: both edited the same lines, edit against delete, a change
//!   of type (file against directory, ...), different symlink targets,
//!   different modes, owners, xattrs or device numbers, binary files.

pub mod text;
pub mod xdiff;

use std::collections::{HashMap, HashSet, VecDeque};

use super::chunk::cut_chunks;
use super::{Checkpoint, Content, Entry, Error, Extent, Kind, ObjectId, Result, Store, Tree};

/// A file larger than this is not merged line by line (a conflict instead).
pub const MAX_TEXT_MERGE: u64 = 256 << 20;

/// What to do with conflicts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Resolve {
    /// List them and publish nothing.
    #[default]
    Fail,
    /// Take ours' (A's) side of each (in a text file, of each conflicting hunk).
    Ours,
    /// Take theirs' (B's) side of each.
    Theirs,
    /// Conflict markers in text files; otherwise A's version at the path and
    /// B's beside it as `PATH.merge-B`.
    Both,
}

/// What kind of conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConflictKind {
    /// Both edited the same lines of a text file.
    Content,
    /// Both changed a file that is not text (or too large to merge by line).
    Binary,
    /// One side changed what the other deleted.
    EditDelete,
    /// The two sides made it different kinds of file (file against directory, ...).
    Type,
    /// Different symlink targets.
    Symlink,
    /// Different permission bits.
    Mode,
    /// Different owner or group.
    Owner,
    /// Different extended attributes.
    Xattrs,
    /// Different device numbers.
    Device,
}

impl ConflictKind {
    pub fn name(self) -> &'static str {
        match self {
            ConflictKind::Content => "content",
            ConflictKind::Binary => "binary",
            ConflictKind::EditDelete => "edit/delete",
            ConflictKind::Type => "type",
            ConflictKind::Symlink => "symlink",
            ConflictKind::Mode => "mode",
            ConflictKind::Owner => "owner",
            ConflictKind::Xattrs => "xattrs",
            ConflictKind::Device => "device",
        }
    }
}

/// One conflict: where, what, and how it was resolved (`None` when it was not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// Relative, '/'-separated, raw bytes ("." for the root directory).
    pub path: Vec<u8>,
    pub kind: ConflictKind,
    /// What each side did, in words.
    pub detail: String,
    /// `ours`, `theirs`, `markers`, or `kept B's version at PATH.merge-B`.
    pub resolution: Option<String>,
}

/// How to merge.
#[derive(Clone, Debug)]
pub struct Options {
    pub resolve: Resolve,
    /// Names of the two sides in conflict markers (`<<<<<<< A`, `>>>>>>> B`).
    pub label_a: String,
    pub label_b: String,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            resolve: Resolve::Fail,
            label_a: "A".into(),
            label_b: "B".into(),
        }
    }
}

/// The merged tree.
#[derive(Debug)]
pub struct Outcome {
    /// The root entry of the merged tree (also when conflicts are unresolved:
    /// then it holds A's side of each, and must not be published).
    pub root: Entry,
    /// Every conflict, sorted by path.
    pub conflicts: Vec<Conflict>,
    /// Tree objects read (the three roots' included): what the merge cost.
    pub trees_read: u64,
    /// Regular files whose bytes were read and merged.
    pub files_merged: u64,
}

impl Outcome {
    /// Whether conflicts are left that no `--conflicts` resolved.
    pub fn unresolved(&self) -> bool {
        self.conflicts.iter().any(|c| c.resolution.is_none())
    }
}

/// The merge bases of checkpoints `a` and `b`: their common ancestors
/// (through all parents) that are not ancestors of another common one. Empty
/// when they share no history; more than one after criss-cross merges.
pub fn merge_bases(store: &Store, a: &ObjectId, b: &ObjectId) -> Result<Vec<ObjectId>> {
    let mut parents: HashMap<ObjectId, Vec<ObjectId>> = HashMap::new();
    let from_a: HashSet<ObjectId> = store
        .ancestry(a)?
        .into_iter()
        .map(|(id, c)| {
            parents.insert(id, c.parents);
            id
        })
        .collect();
    let mut common = Vec::new();
    for (id, c) in store.ancestry(b)? {
        if from_a.contains(&id) {
            common.push(id);
        }
        parents.insert(id, c.parents);
    }
    // Drop every common ancestor that another one derives from.
    let mut beneath = HashSet::new();
    for c in &common {
        let mut queue: VecDeque<ObjectId> = parents.get(c).cloned().unwrap_or_default().into();
        while let Some(p) = queue.pop_front() {
            if beneath.insert(p) {
                queue.extend(parents.get(&p).cloned().unwrap_or_default());
            }
        }
    }
    Ok(common
        .into_iter()
        .filter(|c| !beneath.contains(c))
        .collect())
}

/// Merge the trees of checkpoints `a` and `b` against `base`'s. Writes the
/// merged trees and file contents as objects (nothing names them until a
/// checkpoint does), publishes nothing.
pub fn merge_trees(
    store: &Store,
    base: &Checkpoint,
    a: &Checkpoint,
    b: &Checkpoint,
    opts: &Options,
) -> Result<Outcome> {
    let (rb, ra, rt) = (
        store.root_entry(base)?,
        store.root_entry(a)?,
        store.root_entry(b)?,
    );
    let mut m = Merger {
        store,
        opts,
        conflicts: Vec::new(),
        trees_read: 3,
        files_merged: 0,
    };
    // The walk recurses once per directory level: on a thread whose stack
    // no nesting a path can have (PATH_MAX) comes near.
    let result = std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("merge".into())
            .stack_size(256 << 20)
            .spawn_scoped(s, || {
                let out = m.entry(b".", Some(&rb), Some(&ra), Some(&rt))?;
                Ok::<_, Error>((out, m))
            })
            .map_err(|e| Error::Invalid(format!("cannot start the merge thread: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(Error::Invalid("the merge thread panicked".into())))
    });
    let (out, m) = result?;
    let root = match out.into_iter().next() {
        Some(Side::Here(e)) if e.kind == Kind::Dir => e,
        // A conflict on the root itself always keeps a directory on A's side.
        _ => ra,
    };
    let mut conflicts = m.conflicts;
    conflicts.sort_by(|x, y| x.path.cmp(&y.path));
    Ok(Outcome {
        root,
        conflicts,
        trees_read: m.trees_read,
        files_merged: m.files_merged,
    })
}

struct Merger<'a> {
    store: &'a Store,
    opts: &'a Options,
    conflicts: Vec<Conflict>,
    trees_read: u64,
    files_merged: u64,
}

/// Whether two entries are the same but for ctime and hardlink id (what
/// changes without anything a user changed).
fn same(x: Option<&Entry>, y: Option<&Entry>) -> bool {
    match (x, y) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            x.kind == y.kind
                && x.perm == y.perm
                && (x.uid, x.gid) == (y.uid, y.gid)
                && x.mtime_ns == y.mtime_ns
                && x.size == y.size
                && x.nlink == y.nlink
                && x.rdev == y.rdev
                && x.xattrs == y.xattrs
                && x.flags == y.flags
                && x.content == y.content
        }
        _ => false,
    }
}

/// The three-way merge of one value: `Err(())` when both sides changed it
/// differently.
fn pick<T: PartialEq + Clone>(base: Option<T>, a: T, b: T) -> std::result::Result<T, ()> {
    if a == b || base.as_ref() == Some(&b) {
        Ok(a)
    } else if base.as_ref() == Some(&a) {
        Ok(b)
    } else {
        Err(())
    }
}

fn describe(e: Option<&Entry>) -> &'static str {
    e.map_or("deleted", |e| e.kind.described())
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    if prefix == b"." {
        return name.to_vec();
    }
    let mut p = prefix.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// `NAME.merge-B`, else `NAME.merge-B2`, ... : a name `taken` does not hold.
fn beside_name(name: &[u8], taken: &dyn Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut n = 1;
    loop {
        let mut v = name.to_vec();
        v.extend_from_slice(b".merge-B");
        if n > 1 {
            v.extend_from_slice(n.to_string().as_bytes());
        }
        if !taken(&v) {
            return v;
        }
        n += 1;
    }
}

impl Merger<'_> {
    fn conflict(&mut self, path: &[u8], kind: ConflictKind, detail: String) -> Option<String> {
        let resolution = match self.opts.resolve {
            Resolve::Fail => None,
            Resolve::Ours => Some("ours".to_string()),
            Resolve::Theirs => Some("theirs".to_string()),
            Resolve::Both => Some(match kind {
                ConflictKind::Content => "markers".to_string(),
                _ => format!(
                    "kept B's version at {}.merge-B",
                    String::from_utf8_lossy(path)
                ),
            }),
        };
        self.conflicts.push(Conflict {
            path: path.to_vec(),
            kind,
            detail,
            resolution: resolution.clone(),
        });
        resolution
    }

    /// A whole-entry conflict at `path`: what goes into the directory.
    /// `Both` keeps A's and B's beside it (named by the directory merge).
    fn whole(
        &mut self,
        path: &[u8],
        kind: ConflictKind,
        detail: String,
        a: Option<&Entry>,
        b: Option<&Entry>,
    ) -> Vec<Side> {
        self.conflict(path, kind, detail);
        match self.opts.resolve {
            Resolve::Fail | Resolve::Ours => a.cloned().map(Side::Here).into_iter().collect(),
            Resolve::Theirs => b.cloned().map(Side::Here).into_iter().collect(),
            Resolve::Both => {
                let mut v: Vec<Side> = a.cloned().map(Side::Here).into_iter().collect();
                v.extend(b.cloned().map(Side::Beside));
                v
            }
        }
    }

    /// The merge of one path: the entries that go into its directory (none,
    /// the merged entry, and with `--conflicts both` B's version beside).
    fn entry(
        &mut self,
        path: &[u8],
        base: Option<&Entry>,
        a: Option<&Entry>,
        b: Option<&Entry>,
    ) -> Result<Vec<Side>> {
        if same(a, b) || same(base, b) {
            return Ok(a.cloned().map(Side::Here).into_iter().collect());
        }
        if same(base, a) {
            return Ok(b.cloned().map(Side::Here).into_iter().collect());
        }
        // Both changed, differently.
        let (Some(ea), Some(eb)) = (a, b) else {
            let detail = match a {
                None => format!("deleted in A, changed in B ({})", describe(b)),
                Some(_) => format!("changed in A ({}), deleted in B", describe(a)),
            };
            return Ok(self.whole(path, ConflictKind::EditDelete, detail, a, b));
        };
        if ea.kind != eb.kind {
            let detail = format!("{} in A, {} in B", ea.kind.described(), eb.kind.described());
            return Ok(self.whole(path, ConflictKind::Type, detail, a, b));
        }
        // Same kind on both sides: base only counts when of that kind too.
        let base = base.filter(|e| e.kind == ea.kind);
        let mut out = ea.clone();
        let mut beside = None;
        match ea.kind {
            Kind::Dir => {
                let tb = base.and_then(Entry::tree_id);
                let (Some(ta), Some(tt)) = (ea.tree_id(), eb.tree_id()) else {
                    return Err(Error::Damaged(format!(
                        "{}: a directory entry without a tree",
                        String::from_utf8_lossy(path)
                    )));
                };
                let merged = match pick(tb, ta, tt) {
                    Ok(t) => t,
                    Err(()) => self.directory(path, tb, Some(ta), Some(tt))?,
                };
                out.content = Content::Tree(merged);
            }
            Kind::File => {
                if ea.content != eb.content || ea.size != eb.size {
                    match self.file(path, base, ea, eb)? {
                        FileMerge::Content(ext, size) => {
                            out.content = Content::Extents(ext);
                            out.size = size;
                        }
                        FileMerge::KeepA => {}
                        FileMerge::TakeB => {
                            out.content = eb.content.clone();
                            out.size = eb.size;
                        }
                        FileMerge::Beside => beside = Some(eb.clone()),
                    }
                }
            }
            Kind::Symlink => {
                let tb = base.map(|e| &e.content);
                match pick(tb, &ea.content, &eb.content) {
                    Ok(c) => out.content = c.clone(),
                    Err(()) => {
                        let detail = "A and B point it at different targets".to_string();
                        return Ok(self.whole(path, ConflictKind::Symlink, detail, a, b));
                    }
                }
                out.size = match &out.content {
                    Content::Target(t) => t.len() as u64,
                    _ => out.size,
                };
            }
            Kind::CharDev | Kind::BlockDev => {
                if let Err(()) = pick(base.map(|e| e.rdev), ea.rdev, eb.rdev) {
                    let detail = "A and B made it different devices".to_string();
                    return Ok(self.whole(path, ConflictKind::Device, detail, a, b));
                }
                out.rdev = pick(base.map(|e| e.rdev), ea.rdev, eb.rdev).unwrap_or(ea.rdev);
            }
            Kind::Fifo | Kind::Socket => {}
        }
        // Metadata, each three-way.
        match pick(base.map(|e| e.perm), ea.perm, eb.perm) {
            Ok(p) => out.perm = p,
            Err(()) => {
                let detail = format!("mode {:04o} in A, {:04o} in B", ea.perm, eb.perm);
                if self.meta_conflict(path, ConflictKind::Mode, detail, eb, &mut beside) {
                    out.perm = eb.perm;
                }
            }
        }
        match pick(
            base.map(|e| (e.uid, e.gid)),
            (ea.uid, ea.gid),
            (eb.uid, eb.gid),
        ) {
            Ok((u, g)) => (out.uid, out.gid) = (u, g),
            Err(()) => {
                let detail = format!(
                    "owner {}:{} in A, {}:{} in B",
                    ea.uid, ea.gid, eb.uid, eb.gid
                );
                if self.meta_conflict(path, ConflictKind::Owner, detail, eb, &mut beside) {
                    (out.uid, out.gid) = (eb.uid, eb.gid);
                }
            }
        }
        match pick(base.map(|e| &e.xattrs), &ea.xattrs, &eb.xattrs) {
            Ok(x) => out.xattrs = x.clone(),
            Err(()) => {
                let detail = "A and B set different extended attributes".to_string();
                if self.meta_conflict(path, ConflictKind::Xattrs, detail, eb, &mut beside) {
                    out.xattrs = eb.xattrs.clone();
                }
            }
        }
        // `chattr` flags: changed differently on both sides, both sides'
        // flags are kept (neither side's protection is lost).
        out.flags = pick(base.map(|e| e.flags), ea.flags, eb.flags).unwrap_or(ea.flags | eb.flags);
        out.mtime_ns = pick(base.map(|e| e.mtime_ns), ea.mtime_ns, eb.mtime_ns)
            .unwrap_or(ea.mtime_ns.max(eb.mtime_ns));
        out.ctime_ns = ea.ctime_ns.max(eb.ctime_ns);
        let mut v = vec![Side::Here(out)];
        v.extend(beside.map(Side::Beside));
        Ok(v)
    }

    /// A conflict on one piece of metadata: whether B's value is to be
    /// taken; with `--conflicts both`, B's whole entry goes beside.
    fn meta_conflict(
        &mut self,
        path: &[u8],
        kind: ConflictKind,
        detail: String,
        b: &Entry,
        beside: &mut Option<Entry>,
    ) -> bool {
        self.conflict(path, kind, detail);
        match self.opts.resolve {
            Resolve::Theirs => true,
            Resolve::Both => {
                beside.get_or_insert_with(|| b.clone());
                false
            }
            Resolve::Fail | Resolve::Ours => false,
        }
    }

    /// The merged tree of a directory all three sides have (`base` may be
    /// absent: added on both sides, or another kind in the base).
    fn directory(
        &mut self,
        path: &[u8],
        base: Option<ObjectId>,
        a: Option<ObjectId>,
        b: Option<ObjectId>,
    ) -> Result<ObjectId> {
        let context = String::from_utf8_lossy(path).into_owned();
        let mut read = |id: Option<ObjectId>| -> Result<Tree> {
            match id {
                None => Ok(Tree::default()),
                Some(id) => {
                    self.trees_read += 1;
                    self.store.get_tree(&id, &context)
                }
            }
        };
        let (t0, t1, t2) = (read(base)?, read(a)?, read(b)?);
        let mut names: Vec<&[u8]> = t0
            .entries
            .iter()
            .chain(&t1.entries)
            .chain(&t2.entries)
            .map(|e| e.name.as_slice())
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut entries = Vec::with_capacity(names.len());
        let mut beside = Vec::new();
        for name in &names {
            let p = join(path, name);
            for side in self.entry(&p, t0.get(name), t1.get(name), t2.get(name))? {
                match side {
                    Side::Here(e) => entries.push(e),
                    Side::Beside(e) => beside.push(e),
                }
            }
        }
        for mut e in beside {
            let taken =
                |n: &[u8]| names.binary_search(&n).is_ok() || entries.iter().any(|x| x.name == n);
            e.name = beside_name(&e.name, &taken);
            entries.push(e);
        }
        let mut tree = Tree { entries };
        tree.sort();
        Ok(self.store.put_tree(&tree)?.0)
    }

    /// The merge of a regular file's bytes, changed on both sides.
    fn file(
        &mut self,
        path: &[u8],
        base: Option<&Entry>,
        a: &Entry,
        b: &Entry,
    ) -> Result<FileMerge> {
        let ctx = String::from_utf8_lossy(path).into_owned();
        let too_large = [Some(a), Some(b), base]
            .iter()
            .flatten()
            .any(|e| e.size > MAX_TEXT_MERGE);
        if too_large {
            let detail = format!(
                "changed in A and in B, over the {} MiB merged by line",
                MAX_TEXT_MERGE >> 20
            );
            return Ok(self.bytes_conflict(path, ConflictKind::Binary, detail));
        }
        self.files_merged += 1;
        let bytes = |e: &Entry| -> Result<Vec<u8>> {
            let mut v = Vec::with_capacity(e.size as usize);
            self.store.copy_content(e, &mut v, &ctx)?;
            Ok(v)
        };
        let (ba, bb) = (bytes(a)?, bytes(b)?);
        let b0 = match base {
            Some(e) => Some(bytes(e)?),
            None => None,
        };
        // The append rule: both only appended to the base's bytes.
        if let Some(b0) = &b0
            && ba.starts_with(b0)
            && bb.starts_with(b0)
        {
            let mut out = ba.clone();
            out.extend_from_slice(&bb[b0.len()..]);
            return self.stored(&out, &ctx);
        }
        let b0 = b0.unwrap_or_default();
        if !(text::is_text(&b0) && text::is_text(&ba) && text::is_text(&bb)) {
            let detail = "changed in A and in B, not text".to_string();
            return Ok(self.bytes_conflict(path, ConflictKind::Binary, detail));
        }
        let favor = match self.opts.resolve {
            Resolve::Ours => text::Favor::Ours,
            Resolve::Theirs => text::Favor::Theirs,
            Resolve::Fail | Resolve::Both => text::Favor::Markers,
        };
        let merged = text::merge(&b0, &ba, &bb, favor, &self.opts.label_a, &self.opts.label_b);
        if merged.conflicts > 0 {
            let detail = format!(
                "A and B changed the same lines ({} conflicting hunk{})",
                merged.conflicts,
                if merged.conflicts == 1 { "" } else { "s" }
            );
            self.conflict(path, ConflictKind::Content, detail);
        }
        self.stored(&merged.bytes, &ctx)
    }

    /// A conflict over a whole file's bytes.
    fn bytes_conflict(&mut self, path: &[u8], kind: ConflictKind, detail: String) -> FileMerge {
        self.conflict(path, kind, detail);
        match self.opts.resolve {
            Resolve::Theirs => FileMerge::TakeB,
            Resolve::Both => FileMerge::Beside,
            Resolve::Fail | Resolve::Ours => FileMerge::KeepA,
        }
    }

    /// Store `data` as a file's chunks, cut as every other file is.
    fn stored(&self, data: &[u8], ctx: &str) -> Result<FileMerge> {
        let mut ext = Vec::new();
        cut_chunks(data, data.len() as u64, |chunk| {
            let (id, _) = self
                .store
                .put_object(&chunk)
                .map_err(std::io::Error::other)?;
            ext.push(Extent {
                len: chunk.len() as u64,
                id: Some(id),
            });
            Ok(())
        })
        .map_err(|source| Error::Io {
            path: ctx.into(),
            source,
        })?;
        Ok(FileMerge::Content(ext, data.len() as u64))
    }
}

/// An entry that goes into the merged directory: at its name, or (B's
/// version of a conflict under `--conflicts both`) beside it.
#[derive(Debug)]
enum Side {
    Here(Entry),
    Beside(Entry),
}

/// What a file's bytes become.
enum FileMerge {
    /// These extents and size.
    Content(Vec<Extent>, u64),
    /// A's content.
    KeepA,
    /// B's content.
    TakeB,
    /// A's content, and B's entry beside it.
    Beside,
}

/// How the merge ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A new checkpoint whose parents are A and B.
    Merged,
    /// B is A or an ancestor of A: A is the result, no checkpoint is written.
    UpToDate,
    /// A is the merge base: B is the result, no checkpoint is written.
    FastForward,
    /// Conflicts no `--conflicts` resolved: nothing is written.
    Conflicts,
}

/// What [`merge`] did.
#[derive(Debug)]
pub struct Merge {
    pub how: How,
    /// The result: the new checkpoint, A (up to date) or B (fast-forward);
    /// `None` when conflicts are left.
    pub checkpoint: Option<ObjectId>,
    pub base: ObjectId,
    /// The tree merge, unless up to date or a fast-forward.
    pub outcome: Option<Outcome>,
}

/// Merge checkpoint `b` into checkpoint `a` against `base` (default: their
/// merge base, which must be unique) and publish the result as a new
/// checkpoint whose parents are `a` and `b`, unless conflicts are left.
/// Nothing else is moved: the caller sets a ref or a fork's head.
pub fn merge(
    store: &Store,
    a: &ObjectId,
    b: &ObjectId,
    base: Option<ObjectId>,
    opts: &Options,
    message: &str,
) -> Result<Merge> {
    let base = match base {
        Some(base) => base,
        None => {
            let bases = merge_bases(store, a, b)?;
            match bases.as_slice() {
                [one] => *one,
                [] => {
                    return Err(Error::Invalid(format!(
                        "{} and {} share no history (no common parent); give the checkpoint to merge against with --base",
                        &a.to_hex()[..12],
                        &b.to_hex()[..12]
                    )));
                }
                many => {
                    return Err(Error::Invalid(format!(
                        "{} and {} have {} merge bases ({}); choose one with --base",
                        &a.to_hex()[..12],
                        &b.to_hex()[..12],
                        many.len(),
                        many.iter()
                            .map(|m| m.to_hex()[..12].to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
        }
    };
    let done = |how, checkpoint| Merge {
        how,
        checkpoint: Some(checkpoint),
        base,
        outcome: None,
    };
    if a == b || base == *b {
        return Ok(done(How::UpToDate, *a));
    }
    if base == *a {
        return Ok(done(How::FastForward, *b));
    }
    // Keeps gc from sweeping the objects written until the record names them.
    let _lease = store.write_lease()?;
    let (cb, ca, ct) = (
        store.read_checkpoint(&base)?,
        store.read_checkpoint(a)?,
        store.read_checkpoint(b)?,
    );
    let outcome = merge_trees(store, &cb, &ca, &ct, opts)?;
    if outcome.unresolved() {
        return Ok(Merge {
            how: How::Conflicts,
            checkpoint: None,
            base,
            outcome: Some(outcome),
        });
    }
    let (root, _) = store.put_root(outcome.root.clone())?;
    let ckpt = Checkpoint {
        version: 1,
        root,
        parents: vec![*a, *b],
        origin: ca
            .origin
            .clone()
            .filter(|o| super::check_origin(o).is_none()),
        time_ns: now_ns(),
        message: message.to_string(),
        source: super::Source {
            kind: "merge".into(),
            host: crate::sys::hostname(),
            ..Default::default()
        },
    };
    let id = store.write_checkpoint(&ckpt)?;
    Ok(Merge {
        how: How::Merged,
        checkpoint: Some(id),
        base,
        outcome: Some(outcome),
    })
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
