//! The in-memory state of a fork: an inode table over a base checkpoint.
//!
//! Every change is a [`Record`]. A live operation checks the change
//! ([`ForkState::validate`]), appends its record to the journal, then applies
//! it ([`ForkState::mutate`]); replay runs `validate` + `mutate` on each
//! record read back. One code path for both, so they cannot diverge.
//!
//! **Inode numbers** must come out the same on replay, because records name
//! inodes. The root is 1. Base directories are loaded lazily: loading gives
//! the children consecutive new numbers from `next_ino`, in name order (a
//! hardlinked base entry whose `link_id` already has a live inode reuses it),
//! and is itself a record (`LoadDir`) so replay loads at the same point.
//! New inodes take `next_ino` too (recorded in `Create`). Numbers are never
//! reused. A commit writes an `InodeMap` that rebinds these numbers onto the
//! committed tree (see [`ForkState::inode_map`] and `apply_inode_map`).
//!
//! **File data** is a map of pieces by file offset: a run of a base object
//! (`Src::Base`) or of a `Write` record's data in a journal segment
//! (`Src::Journal`, read back with pread; never held in memory). Gaps are
//! holes: they read as zeros and are folded as holes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::ext4;
use super::record::{
    InodeMap, MAX_WRITE_DATA, RENAME_EXCHANGE, RENAME_NOREPLACE, Record, XATTR_CREATE,
    XATTR_REPLACE,
};
use super::wal::{Pos, Wal};
use super::{Attr, DirEntry, Error, Fallocate, RenameMode, Result, SetAttr, Time, XattrMode};
use crate::store::acl;
use crate::store::{Content, Entry, Extent, Kind, ObjectId, Store, Tree};

/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;
/// The largest file size (and write end) accepted: `off_t`'s maximum.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;
/// The longest name a directory entry may have.
pub const NAME_MAX: usize = 255;
/// The largest xattr value (as Linux's XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 64 * 1024;

/// Where a run of file bytes lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// Bytes from `off` of a stored object (verified when read).
    Base { id: ObjectId, off: u64 },
    /// Bytes at file offset `off` of journal segment `seg`.
    Journal { seg: u64, off: u64 },
}

impl Src {
    fn advance(self, by: u64) -> Src {
        match self {
            Src::Base { id, off } => Src::Base { id, off: off + by },
            Src::Journal { seg, off } => Src::Journal { seg, off: off + by },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub len: u64,
    pub src: Src,
}

#[derive(Clone, Debug)]
pub struct FileData {
    pub size: u64,
    /// Non-overlapping pieces by start offset; gaps are holes.
    pub pieces: BTreeMap<u64, Piece>,
    /// The base extents while the data is unchanged (fold reuses them).
    pub orig: Option<Arc<Vec<Extent>>>,
}

#[derive(Clone, Debug)]
pub enum Dir {
    /// Not read yet: the base tree object.
    Unloaded(ObjectId),
    Loaded(BTreeMap<Vec<u8>, u64>),
}

#[derive(Clone, Debug)]
pub enum Data {
    File(FileData),
    Dir(Dir),
    Symlink(Vec<u8>),
    Special,
}

#[derive(Clone, Debug)]
pub struct Inode {
    pub kind: Kind,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub nlink: u32,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub data: Data,
    /// Directories: the directory holding them (the root: itself).
    pub parent: u64,
    /// Open handles (files only; not journaled).
    pub open: u32,
    /// The base checkpoint's `link_id` of this inode (0: none).
    pub link_id: u64,
    /// Changed since it was loaded from the base.
    pub dirty: bool,
    /// `st_size` of a directory or special file (as the base recorded it).
    pub dsize: u64,
}

/// A segment of a read: `len` bytes from `src`, or zeros.
pub type ReadPlan = Vec<(u64, Option<Src>)>;

/// The fork's inodes.
#[derive(Clone, Debug)]
pub struct ForkState {
    pub inodes: HashMap<u64, Inode>,
    pub next_ino: u64,
    /// Base link ids that have an inode.
    pub by_link: HashMap<u64, u64>,
    /// During replay, unlinked files are kept (later records may still write
    /// to them, as an open handle did) and dropped by `finish_replay`.
    pub replaying: bool,
    /// The next record applied is the first of the replay: an `InodeMap`
    /// there rebinds numbers instead of being checked.
    pub fresh: bool,
    /// Records that changed the tree (not directory loads), replayed or
    /// appended, that no commit has folded yet: a commit with none to fold
    /// has nothing to do.
    pub changes: u64,
    prefetch: Option<(ObjectId, Arc<Tree>)>,
}

/// What live operations need besides the state.
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub wal: &'a Wal,
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt {
        path: Default::default(),
        detail: detail.into(),
    }
}

/// Names a directory entry may have (the kernel rejects the others).
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Error::Invalid("bad file name"));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong);
    }
    Ok(())
}

fn servable(name: &[u8]) -> bool {
    check_name(name).is_ok()
}

impl Inode {
    /// An inode from a base tree entry.
    fn from_entry(e: &Entry, parent: u64) -> Inode {
        let data = match (&e.content, e.kind) {
            (Content::Tree(id), Kind::Dir) => Data::Dir(Dir::Unloaded(*id)),
            (_, Kind::Dir) => Data::Dir(Dir::Loaded(BTreeMap::new())),
            (Content::Extents(ext), Kind::File) => {
                let mut pieces = BTreeMap::new();
                let mut at = 0u64;
                for x in ext {
                    if let Some(id) = x.id
                        && x.len > 0
                    {
                        pieces.insert(
                            at,
                            Piece {
                                len: x.len,
                                src: Src::Base { id, off: 0 },
                            },
                        );
                    }
                    at = at.saturating_add(x.len);
                }
                let mut f = FileData {
                    size: e.size,
                    pieces,
                    orig: Some(Arc::new(ext.clone())),
                };
                // A malformed entry (extents past the size) reads as its size.
                punch(&mut f.pieces, e.size, u64::MAX);
                Data::File(f)
            }
            (_, Kind::File) => Data::File(FileData {
                size: 0,
                pieces: BTreeMap::new(),
                orig: None,
            }),
            (Content::Target(t), Kind::Symlink) => Data::Symlink(t.clone()),
            (_, Kind::Symlink) => Data::Symlink(Vec::new()),
            _ => Data::Special,
        };
        Inode {
            kind: e.kind,
            perm: e.perm & 0o7777,
            uid: e.uid,
            gid: e.gid,
            rdev: e.rdev,
            atime: e.mtime_ns,
            mtime: e.mtime_ns,
            ctime: e.ctime_ns,
            nlink: e.nlink.max(1),
            xattrs: e.xattrs.iter().cloned().collect(),
            data,
            parent,
            open: 0,
            link_id: if e.kind == Kind::Dir { 0 } else { e.link_id },
            dirty: false,
            dsize: if matches!(e.kind, Kind::File | Kind::Symlink) {
                0
            } else {
                e.size
            },
        }
    }

    /// What `stat` shows: sizes and blocks as ext4 would have them
    /// ([`ext4`]); a symlink is always `rwxrwxrwx`. A directory not loaded
    /// yet shows one block here: [`super::Fork`] sizes it from its base tree.
    pub fn attr(&self, ino: u64) -> Attr {
        let (size, blocks) = match &self.data {
            Data::File(f) => (f.size, ext4::file_blocks(f.size, data_ranges(f, 0))),
            Data::Symlink(t) => (t.len() as u64, ext4::symlink_blocks(t.len() as u64)),
            Data::Dir(Dir::Loaded(k)) => ext4::dir_size(k.keys().map(Vec::len)),
            Data::Dir(Dir::Unloaded(_)) => ext4::dir_size([]),
            Data::Special => (self.dsize, 0),
        };
        Attr {
            ino,
            kind: self.kind,
            perm: if self.kind == Kind::Symlink {
                0o777
            } else {
                self.perm
            },
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            size,
            blocks,
            atime_ns: self.atime,
            mtime_ns: self.mtime,
            ctime_ns: self.ctime,
        }
    }

    fn file(&self) -> Result<&FileData> {
        match &self.data {
            Data::File(f) => Ok(f),
            Data::Dir(_) => Err(Error::IsDir),
            _ => Err(Error::Invalid("not a regular file")),
        }
    }

    fn file_mut(&mut self) -> &mut FileData {
        match &mut self.data {
            Data::File(f) => f,
            _ => unreachable!("validated as a file"),
        }
    }

    fn children(&self) -> Option<&BTreeMap<Vec<u8>, u64>> {
        match &self.data {
            Data::Dir(Dir::Loaded(k)) => Some(k),
            _ => None,
        }
    }

    fn children_mut(&mut self) -> &mut BTreeMap<Vec<u8>, u64> {
        match &mut self.data {
            Data::Dir(Dir::Loaded(k)) => k,
            _ => unreachable!("validated as a loaded directory"),
        }
    }
}

/// Remove the bytes `[start, end)` from a piece map (they become a hole).
pub fn punch(pieces: &mut BTreeMap<u64, Piece>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let hit: Vec<u64> = pieces
        .range(..end)
        .rev()
        .take_while(|(s, p)| **s + p.len > start)
        .map(|(s, _)| *s)
        .collect();
    for s in hit {
        let p = pieces.remove(&s).expect("listed");
        let pend = s + p.len;
        if s < start {
            pieces.insert(
                s,
                Piece {
                    len: start - s,
                    src: p.src,
                },
            );
        }
        if pend > end {
            pieces.insert(
                end,
                Piece {
                    len: pend - end,
                    src: p.src.advance(end - s),
                },
            );
        }
    }
}

/// The byte ranges `[start, end)` of a file's data (base extents and
/// journal writes; the gaps are holes), in order, from the piece holding
/// `from` on: the extent map `SEEK_DATA`/`SEEK_HOLE` and `st_blocks` read
/// ([`ext4`]). Adjacent pieces come as separate ranges.
pub fn data_ranges(f: &FileData, from: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let first = f
        .pieces
        .range(..=from)
        .next_back()
        .map_or(from, |(s, _)| *s);
    f.pieces
        .range(first..)
        .map(|(s, p)| (*s, s.saturating_add(p.len)))
}

/// The pieces (or holes) covering `[start, end)` of a piece map.
pub fn plan(pieces: &BTreeMap<u64, Piece>, start: u64, end: u64) -> ReadPlan {
    let mut out = Vec::new();
    let mut pos = start;
    let first = pieces
        .range(..=start)
        .next_back()
        .filter(|(s, p)| **s + p.len > start)
        .map(|(s, _)| *s)
        .unwrap_or(start);
    for (&s, p) in pieces.range(first..end) {
        if s > pos {
            out.push((s - pos, None));
            pos = s;
        }
        let pend = (s + p.len).min(end);
        if pend > pos {
            out.push((pend - pos, Some(p.src.advance(pos - s))));
            pos = pend;
        }
    }
    if end > pos {
        out.push((end - pos, None));
    }
    out
}

impl ForkState {
    /// A state holding only the root directory of a base checkpoint.
    pub fn new(root: &Entry) -> ForkState {
        let mut inodes = HashMap::new();
        let mut r = Inode::from_entry(root, ROOT_INO);
        r.link_id = 0;
        inodes.insert(ROOT_INO, r);
        ForkState {
            inodes,
            next_ino: ROOT_INO + 1,
            by_link: HashMap::new(),
            replaying: false,
            fresh: true,
            changes: 0,
            prefetch: None,
        }
    }

    pub fn inode(&self, ino: u64) -> Result<&Inode> {
        self.inodes.get(&ino).ok_or(Error::NotFound)
    }

    fn inode_mut(&mut self, ino: u64) -> &mut Inode {
        self.inodes.get_mut(&ino).expect("validated inode")
    }

    /// A loaded directory's children (validation helper).
    fn dir(&self, ino: u64) -> Result<&BTreeMap<Vec<u8>, u64>> {
        let n = self.inode(ino)?;
        match &n.data {
            Data::Dir(Dir::Loaded(k)) => Ok(k),
            Data::Dir(Dir::Unloaded(_)) => Err(corrupt(format!(
                "directory {ino} used before it was loaded"
            ))),
            _ => Err(Error::NotDir),
        }
    }

    // ------------------------------------------------------------ records

    /// Check that `rec` can apply to this state; nothing changes.
    pub fn validate(&mut self, store: &Store, rec: &Record) -> Result<()> {
        match rec {
            Record::LoadDir { dir, first_ino } => {
                let n = self.inode(*dir)?;
                let Data::Dir(Dir::Unloaded(id)) = n.data else {
                    return Err(corrupt(format!("directory {dir} loaded twice")));
                };
                if *first_ino != self.next_ino {
                    return Err(corrupt(format!(
                        "LoadDir numbers from {first_ino}, expected {}",
                        self.next_ino
                    )));
                }
                if self.prefetch.as_ref().is_none_or(|(p, _)| *p != id) {
                    let tree = store.get_tree(&id, &format!("directory inode {dir}"))?;
                    self.prefetch = Some((id, Arc::new(tree)));
                }
                Ok(())
            }
            Record::Create {
                parent,
                name,
                ino,
                kind,
                target,
                ..
            } => {
                check_name(name)?;
                if self.dir(*parent)?.contains_key(name) {
                    return Err(Error::Exists);
                }
                if *ino != self.next_ino {
                    return Err(corrupt(format!(
                        "new inode {ino}, expected {}",
                        self.next_ino
                    )));
                }
                if (*kind == Kind::Symlink) != target.is_some() {
                    return Err(Error::Invalid("symlink target"));
                }
                Ok(())
            }
            Record::Link {
                ino, parent, name, ..
            } => {
                let n = self.inode(*ino)?;
                if n.kind == Kind::Dir {
                    return Err(Error::Perm);
                }
                if n.nlink == 0 {
                    return Err(Error::NotFound);
                }
                if n.nlink == u32::MAX {
                    return Err(Error::TooManyLinks);
                }
                check_name(name)?;
                if self.dir(*parent)?.contains_key(name) {
                    return Err(Error::Exists);
                }
                Ok(())
            }
            Record::Unlink { parent, name, .. } => {
                let &ino = self.dir(*parent)?.get(name).ok_or(Error::NotFound)?;
                let n = self.inode(ino)?;
                if n.kind == Kind::Dir && !self.dir(ino)?.is_empty() {
                    return Err(Error::NotEmpty);
                }
                Ok(())
            }
            Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                ..
            } => self.validate_rename(*parent, name, *new_parent, new_name, *flags),
            Record::Write {
                ino, offset, data, ..
            } => {
                self.inode(*ino)?.file()?;
                if offset
                    .checked_add(data.len() as u64)
                    .is_none_or(|e| e > MAX_FILE_SIZE)
                {
                    return Err(Error::FileTooLarge);
                }
                Ok(())
            }
            Record::Truncate { ino, size, .. } => {
                self.inode(*ino)?.file()?;
                if *size > MAX_FILE_SIZE {
                    return Err(Error::FileTooLarge);
                }
                Ok(())
            }
            Record::PunchHole { ino, .. } => self.inode(*ino)?.file().map(|_| ()),
            Record::SetAttr { ino, .. } => self.inode(*ino).map(|_| ()),
            Record::SetXattr {
                ino,
                name,
                value,
                flags,
                ..
            } => {
                let n = self.inode(*ino)?;
                if name.is_empty() || name.len() > NAME_MAX {
                    return Err(Error::Invalid("bad xattr name"));
                }
                if value.len() > XATTR_SIZE_MAX {
                    return Err(Error::TooBig);
                }
                let exists = n.xattrs.contains_key(name);
                if flags & XATTR_CREATE != 0 && exists {
                    return Err(Error::XattrExists);
                }
                if flags & XATTR_REPLACE != 0 && !exists {
                    return Err(Error::NoXattr);
                }
                Ok(())
            }
            Record::RemoveXattr { ino, name, .. } => {
                if self.inode(*ino)?.xattrs.contains_key(name) {
                    Ok(())
                } else {
                    Err(Error::NoXattr)
                }
            }
            Record::InodeMap(_) => Ok(()),
        }
    }

    fn validate_rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Error::Invalid("rename flags"));
        }
        check_name(name)?;
        check_name(new_name)?;
        let &src = self.dir(parent)?.get(name).ok_or(Error::NotFound)?;
        let dst = self.dir(new_parent)?.get(new_name).copied();
        let src_dir = self.inode(src)?.kind == Kind::Dir;
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Error::NotFound)?;
            let dst_dir = self.inode(dst)?.kind == Kind::Dir;
            if (src_dir && self.is_ancestor(src, new_parent))
                || (dst_dir && self.is_ancestor(dst, parent))
            {
                return Err(Error::Invalid("a directory cannot move below itself"));
            }
            return Ok(());
        }
        if let Some(dst) = dst {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Error::Exists);
            }
            if dst == src {
                return Ok(());
            }
            let dst_dir = self.inode(dst)?.kind == Kind::Dir;
            match (src_dir, dst_dir) {
                (true, false) => return Err(Error::NotDir),
                (false, true) => return Err(Error::IsDir),
                (true, true) if !self.dir(dst)?.is_empty() => return Err(Error::NotEmpty),
                _ => {}
            }
        }
        if src_dir && self.is_ancestor(src, new_parent) {
            return Err(Error::Invalid("a directory cannot move below itself"));
        }
        Ok(())
    }

    /// Whether directory `a` is `d` or one of its ancestors.
    fn is_ancestor(&self, a: u64, mut d: u64) -> bool {
        for _ in 0..100_000 {
            if d == a {
                return true;
            }
            match self.inodes.get(&d) {
                Some(n) if n.parent != d => d = n.parent,
                _ => return false,
            }
        }
        true
    }

    /// Apply a validated record. `pos` and `plen` locate it in the journal
    /// (where a `Write`'s data is read back from).
    pub fn mutate(&mut self, store: &Store, rec: &Record, pos: Pos, plen: u64) -> Result<()> {
        self.fresh = false;
        if !matches!(rec, Record::LoadDir { .. }) {
            self.changes += 1;
        }
        match rec {
            Record::LoadDir { dir, .. } => {
                let Data::Dir(Dir::Unloaded(id)) = self.inode(*dir)?.data else {
                    return Err(corrupt("validated"));
                };
                let tree = match self.prefetch.take() {
                    Some((p, t)) if p == id => t,
                    _ => Arc::new(store.get_tree(&id, &format!("directory inode {dir}"))?),
                };
                self.load(*dir, &tree);
            }
            Record::Create {
                parent,
                name,
                ino,
                kind,
                perm,
                uid,
                gid,
                rdev,
                time_ns,
                target,
            } => {
                let t = *time_ns;
                let data = match kind {
                    Kind::File => Data::File(FileData {
                        size: 0,
                        pieces: BTreeMap::new(),
                        orig: None,
                    }),
                    Kind::Dir => Data::Dir(Dir::Loaded(BTreeMap::new())),
                    Kind::Symlink => Data::Symlink(target.clone().unwrap_or_default()),
                    _ => Data::Special,
                };
                let is_dir = *kind == Kind::Dir;
                self.inodes.insert(
                    *ino,
                    Inode {
                        kind: *kind,
                        perm: perm & 0o7777,
                        uid: *uid,
                        gid: *gid,
                        rdev: *rdev,
                        atime: t,
                        mtime: t,
                        ctime: t,
                        nlink: if is_dir { 2 } else { 1 },
                        xattrs: BTreeMap::new(),
                        data,
                        parent: if is_dir { *parent } else { 0 },
                        open: 0,
                        link_id: 0,
                        dirty: true,
                        dsize: 0,
                    },
                );
                self.next_ino = ino + 1;
                let p = self.inode_mut(*parent);
                p.children_mut().insert(name.clone(), *ino);
                if is_dir {
                    p.nlink += 1;
                }
                touch_dir(p, t);
            }
            Record::Link {
                ino,
                parent,
                name,
                time_ns,
            } => {
                let n = self.inode_mut(*ino);
                n.nlink += 1;
                n.ctime = *time_ns;
                n.dirty = true;
                let p = self.inode_mut(*parent);
                p.children_mut().insert(name.clone(), *ino);
                touch_dir(p, *time_ns);
            }
            Record::Unlink {
                parent,
                name,
                time_ns,
            } => {
                let p = self.inode_mut(*parent);
                let ino = p.children_mut().remove(name).expect("validated");
                touch_dir(p, *time_ns);
                self.drop_link(*parent, ino, *time_ns);
            }
            Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                time_ns,
            } => self.do_rename(*parent, name, *new_parent, new_name, *flags, *time_ns),
            Record::Write {
                ino,
                offset,
                time_ns,
                data,
            } => self.apply_write(*ino, *offset, *time_ns, data.len() as u64, pos, plen),
            Record::Truncate { ino, size, time_ns } => {
                let n = self.inode_mut(*ino);
                n.mtime = *time_ns;
                n.ctime = *time_ns;
                n.dirty = true;
                let f = n.file_mut();
                if f.size != *size {
                    f.orig = None;
                    punch(&mut f.pieces, *size, u64::MAX);
                    f.size = *size;
                }
            }
            Record::PunchHole {
                ino,
                offset,
                len,
                time_ns,
            } => {
                let n = self.inode_mut(*ino);
                n.mtime = *time_ns;
                n.ctime = *time_ns;
                n.dirty = true;
                let f = n.file_mut();
                let end = offset.saturating_add(*len).min(f.size);
                if *offset < end {
                    f.orig = None;
                    punch(&mut f.pieces, *offset, end);
                }
            }
            Record::SetAttr {
                ino,
                perm,
                uid,
                gid,
                atime,
                mtime,
                ctime,
            } => {
                let n = self.inode_mut(*ino);
                if let Some(p) = perm {
                    n.perm = p & 0o7777;
                }
                if let Some(u) = uid {
                    n.uid = *u;
                }
                if let Some(g) = gid {
                    n.gid = *g;
                }
                if let Some(a) = atime {
                    n.atime = *a;
                }
                if let Some(m) = mtime {
                    n.mtime = *m;
                }
                n.ctime = *ctime;
                n.dirty = true;
            }
            Record::SetXattr {
                ino,
                name,
                value,
                time_ns,
                ..
            } => {
                let n = self.inode_mut(*ino);
                n.xattrs.insert(name.clone(), value.clone());
                n.ctime = *time_ns;
                n.dirty = true;
            }
            Record::RemoveXattr { ino, name, time_ns } => {
                let n = self.inode_mut(*ino);
                n.xattrs.remove(name);
                n.ctime = *time_ns;
                n.dirty = true;
            }
            Record::InodeMap(_) => unreachable!("applied by apply()"),
        }
        Ok(())
    }

    /// Replay one record read from the journal.
    pub fn apply(&mut self, store: &Store, rec: &Record, pos: Pos, plen: u64) -> Result<()> {
        if let Record::InodeMap(m) = rec {
            let fresh = std::mem::replace(&mut self.fresh, false);
            return if fresh {
                self.bind_inode_map(store, m)
            } else {
                self.check_inode_map(m)
            };
        }
        self.validate(store, rec)?;
        self.mutate(store, rec, pos, plen)
    }

    /// A validated `Write` of `len` bytes at `offset` whose record's frame is
    /// at `pos` with a payload of `plen` bytes (data last).
    fn apply_write(&mut self, ino: u64, offset: u64, time_ns: i64, len: u64, pos: Pos, plen: u64) {
        let at = pos.offset + super::record::FRAME_HEADER as u64 + plen - len;
        let n = self.inode_mut(ino);
        n.mtime = time_ns;
        n.ctime = time_ns;
        n.dirty = true;
        let f = n.file_mut();
        f.orig = None;
        if len > 0 {
            punch(&mut f.pieces, offset, offset + len);
            f.pieces.insert(
                offset,
                Piece {
                    len,
                    src: Src::Journal {
                        seg: pos.seg,
                        off: at,
                    },
                },
            );
            f.size = f.size.max(offset + len);
        }
    }

    /// One link of `ino` (found in `parent`) is gone.
    fn drop_link(&mut self, parent: u64, ino: u64, t: i64) {
        let n = self.inode_mut(ino);
        n.ctime = t;
        n.dirty = true;
        if n.kind == Kind::Dir {
            self.inodes.remove(&ino);
            self.inode_mut(parent).nlink -= 1;
            return;
        }
        n.nlink = n.nlink.saturating_sub(1);
        if n.nlink == 0 && n.open == 0 && !self.replaying {
            self.inodes.remove(&ino);
        }
    }

    fn do_rename(&mut self, parent: u64, name: &[u8], np: u64, nn: &[u8], flags: u32, t: i64) {
        let src = self.inodes[&parent].children().expect("dir")[name];
        let dst = self.inodes[&np].children().expect("dir").get(nn).copied();
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.expect("validated");
            self.inode_mut(parent)
                .children_mut()
                .insert(name.to_vec(), dst);
            self.inode_mut(np).children_mut().insert(nn.to_vec(), src);
            for (ino, from, to) in [(src, parent, np), (dst, np, parent)] {
                let n = self.inode_mut(ino);
                n.ctime = t;
                if n.kind == Kind::Dir && from != to {
                    n.parent = to;
                    self.inode_mut(from).nlink -= 1;
                    self.inode_mut(to).nlink += 1;
                }
            }
        } else {
            if dst == Some(src) {
                return;
            }
            self.inode_mut(parent).children_mut().remove(name);
            if let Some(dst) = dst {
                self.drop_link(np, dst, t);
            }
            self.inode_mut(np).children_mut().insert(nn.to_vec(), src);
            let n = self.inode_mut(src);
            n.ctime = t;
            n.dirty = true;
            if n.kind == Kind::Dir {
                n.parent = np;
                self.inode_mut(parent).nlink -= 1;
                self.inode_mut(np).nlink += 1;
            }
        }
        touch_dir(self.inode_mut(parent), t);
        touch_dir(self.inode_mut(np), t);
    }

    /// Give the entries of base tree `tree` inode numbers as children of `dir`.
    fn load(&mut self, dir: u64, tree: &Tree) {
        let mut kids = BTreeMap::new();
        for e in &tree.entries {
            if !servable(&e.name) || kids.contains_key(&e.name) {
                continue;
            }
            let linked = e.kind != Kind::Dir && e.link_id != 0;
            let reuse = linked
                .then(|| self.by_link.get(&e.link_id).copied())
                .flatten()
                .filter(|i| {
                    self.inodes
                        .get(i)
                        .is_some_and(|n| n.nlink > 0 && n.kind == e.kind)
                });
            let ino = match reuse {
                Some(i) => i,
                None => {
                    let i = self.next_ino;
                    self.next_ino += 1;
                    self.inodes.insert(i, Inode::from_entry(e, dir));
                    if linked {
                        self.by_link.insert(e.link_id, i);
                    }
                    i
                }
            };
            kids.insert(e.name.clone(), ino);
        }
        self.inode_mut(dir).data = Data::Dir(Dir::Loaded(kids));
    }

    /// Load every unloaded directory (without journaling: used on a snapshot
    /// that is folded and thrown away).
    pub fn load_all(&mut self, store: &Store) -> Result<()> {
        let mut queue = VecDeque::from([ROOT_INO]);
        while let Some(d) = queue.pop_front() {
            if let Data::Dir(Dir::Unloaded(id)) = self.inodes[&d].data {
                let tree = store.get_tree(&id, &format!("directory inode {d}"))?;
                self.load(d, &tree);
            }
            for &k in self.inodes[&d].children().expect("loaded").values() {
                if self.inodes[&k].kind == Kind::Dir {
                    queue.push_back(k);
                }
            }
        }
        Ok(())
    }

    /// The end of a replay: unlinked files nobody can open any more go.
    pub fn finish_replay(&mut self) {
        self.replaying = false;
        self.fresh = false;
        self.inodes
            .retain(|_, n| n.kind == Kind::Dir || n.nlink > 0 || n.open > 0);
    }

    // ------------------------------------------------------------ inode map

    /// The live numbering, for the first record of a segment started by a
    /// commit: every loaded directory (parents first) with its children, the
    /// base link ids in use, and the open unlinked files.
    pub fn inode_map(&self) -> InodeMap {
        let mut dirs = Vec::new();
        let mut queue = VecDeque::from([ROOT_INO]);
        while let Some(d) = queue.pop_front() {
            let Some(kids) = self.inodes[&d].children() else {
                continue;
            };
            dirs.push((d, kids.iter().map(|(n, i)| (n.clone(), *i)).collect()));
            for &k in kids.values() {
                if self.inodes[&k].kind == Kind::Dir {
                    queue.push_back(k);
                }
            }
        }
        let mut links: Vec<(u64, u64)> = self
            .by_link
            .iter()
            .filter(|(_, i)| self.inodes.get(i).is_some_and(|n| n.nlink > 0))
            .map(|(l, i)| (*l, *i))
            .collect();
        links.sort_unstable();
        let mut orphans: Vec<u64> = self
            .inodes
            .iter()
            .filter(|(_, n)| n.nlink == 0 && n.kind == Kind::File)
            .map(|(i, _)| *i)
            .collect();
        orphans.sort_unstable();
        InodeMap {
            next_ino: self.next_ino,
            dirs,
            links,
            orphans,
        }
    }

    /// First record of a replay from a committed checkpoint: number the
    /// checkpoint's entries as the live fork had them.
    fn bind_inode_map(&mut self, store: &Store, m: &InodeMap) -> Result<()> {
        for (dir, kids) in &m.dirs {
            let Some(Inode {
                data: Data::Dir(Dir::Unloaded(id)),
                ..
            }) = self.inodes.get(dir)
            else {
                return Err(corrupt(format!(
                    "inode map names directory {dir}, which is not an unloaded directory"
                )));
            };
            let tree = store.get_tree(id, &format!("directory inode {dir}"))?;
            let want: BTreeMap<&[u8], u64> = kids.iter().map(|(n, i)| (&n[..], *i)).collect();
            let mut got = BTreeMap::new();
            for e in &tree.entries {
                if !servable(&e.name) || got.contains_key(&e.name) {
                    continue;
                }
                let &ino = want.get(&e.name[..]).ok_or_else(|| {
                    corrupt(format!(
                        "inode map lacks entry {:?} of directory {dir}",
                        String::from_utf8_lossy(&e.name)
                    ))
                })?;
                self.inodes
                    .entry(ino)
                    .or_insert_with(|| Inode::from_entry(e, *dir));
                got.insert(e.name.clone(), ino);
            }
            if got.len() != want.len() {
                return Err(corrupt(format!(
                    "inode map lists entries of directory {dir} the checkpoint lacks"
                )));
            }
            self.inode_mut(*dir).data = Data::Dir(Dir::Loaded(got));
        }
        self.by_link = m.links.iter().copied().collect();
        for &o in &m.orphans {
            self.inodes.entry(o).or_insert_with(|| Inode {
                kind: Kind::File,
                perm: 0,
                uid: 0,
                gid: 0,
                rdev: 0,
                atime: 0,
                mtime: 0,
                ctime: 0,
                nlink: 0,
                xattrs: BTreeMap::new(),
                data: Data::File(FileData {
                    size: 0,
                    pieces: BTreeMap::new(),
                    orig: None,
                }),
                parent: 0,
                open: 0,
                link_id: 0,
                dirty: true,
                dsize: 0,
            });
        }
        self.next_ino = m.next_ino;
        Ok(())
    }

    /// An inode map met mid-replay (the commit that wrote it did not move
    /// HEAD): it must describe the state replayed so far.
    fn check_inode_map(&self, m: &InodeMap) -> Result<()> {
        if m.next_ino != self.next_ino {
            return Err(corrupt(format!(
                "inode map says next inode {}, replay reached {}",
                m.next_ino, self.next_ino
            )));
        }
        for (dir, kids) in &m.dirs {
            let have = self.dir(*dir)?;
            if have.len() != kids.len() || kids.iter().any(|(n, i)| have.get(n) != Some(i)) {
                return Err(corrupt(format!(
                    "inode map disagrees with the replayed directory {dir}"
                )));
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ live ops

    fn log(&mut self, ctx: &Ctx<'_>, rec: Record) -> Result<()> {
        self.validate(ctx.store, &rec)?;
        let payload = rec.encode();
        let pos = ctx.wal.append(&payload)?;
        self.mutate(ctx.store, &rec, pos, payload.len() as u64)
    }

    /// Load directory `dir` if it is not yet (journaling the load).
    pub fn ensure_loaded(&mut self, ctx: &Ctx<'_>, dir: u64) -> Result<()> {
        match self.inode(dir)?.data {
            Data::Dir(Dir::Unloaded(_)) => self.log(
                ctx,
                Record::LoadDir {
                    dir,
                    first_ino: self.next_ino,
                },
            ),
            Data::Dir(Dir::Loaded(_)) => Ok(()),
            _ => Err(Error::NotDir),
        }
    }

    pub fn lookup(&mut self, ctx: &Ctx<'_>, parent: u64, name: &[u8]) -> Result<u64> {
        self.ensure_loaded(ctx, parent)?;
        match name {
            b"." => Ok(parent),
            b".." => Ok(self.inode(parent)?.parent),
            _ => self.dir(parent)?.get(name).copied().ok_or(Error::NotFound),
        }
    }

    pub fn readdir(&mut self, ctx: &Ctx<'_>, ino: u64) -> Result<(u64, Vec<DirEntry>)> {
        self.ensure_loaded(ctx, ino)?;
        let kids = self.dir(ino)?;
        let list = kids
            .iter()
            .map(|(n, i)| DirEntry {
                name: n.clone(),
                ino: *i,
                kind: self.inodes[i].kind,
            })
            .collect();
        Ok((self.inodes[&ino].parent, list))
    }

    /// What to read for `[offset, offset + size)` of file `ino`, clipped to its size.
    pub fn plan_read(&self, ino: u64, offset: u64, size: u64) -> Result<ReadPlan> {
        let f = self.inode(ino)?.file()?;
        if offset >= f.size {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(size).min(f.size);
        Ok(plan(&f.pieces, offset, end))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        name: &[u8],
        kind: Kind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<Vec<u8>>,
    ) -> Result<u64> {
        self.ensure_loaded(ctx, parent)?;
        let ino = self.next_ino;
        self.log(
            ctx,
            Record::Create {
                parent,
                name: name.to_vec(),
                ino,
                kind,
                perm,
                uid,
                gid,
                rdev,
                time_ns: now_ns(),
                target,
            },
        )?;
        Ok(ino)
    }

    pub fn link(&mut self, ctx: &Ctx<'_>, ino: u64, parent: u64, name: &[u8]) -> Result<()> {
        self.ensure_loaded(ctx, parent)?;
        self.log(
            ctx,
            Record::Link {
                ino,
                parent,
                name: name.to_vec(),
                time_ns: now_ns(),
            },
        )
    }

    /// unlink (`dir` false) or rmdir (`dir` true).
    pub fn remove(&mut self, ctx: &Ctx<'_>, parent: u64, name: &[u8], dir: bool) -> Result<()> {
        self.ensure_loaded(ctx, parent)?;
        let &ino = self.dir(parent)?.get(name).ok_or(Error::NotFound)?;
        match (self.inodes[&ino].kind == Kind::Dir, dir) {
            (true, false) => return Err(Error::IsDir),
            (false, true) => return Err(Error::NotDir),
            (true, true) => self.ensure_loaded(ctx, ino)?,
            _ => {}
        }
        self.log(
            ctx,
            Record::Unlink {
                parent,
                name: name.to_vec(),
                time_ns: now_ns(),
            },
        )
    }

    pub fn rename(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        self.ensure_loaded(ctx, parent)?;
        self.ensure_loaded(ctx, new_parent)?;
        // Replacing a directory needs to know it is empty.
        if let Some(&dst) = self.dir(new_parent)?.get(new_name)
            && self.inodes[&dst].kind == Kind::Dir
        {
            self.ensure_loaded(ctx, dst)?;
        }
        let flags = match mode {
            RenameMode::Replace => 0,
            RenameMode::NoReplace => RENAME_NOREPLACE,
            RenameMode::Exchange => RENAME_EXCHANGE,
        };
        self.log(
            ctx,
            Record::Rename {
                parent,
                name: name.to_vec(),
                new_parent,
                new_name: new_name.to_vec(),
                flags,
                time_ns: now_ns(),
            },
        )
    }

    /// Write `data` at `offset` (or at the end of the file when `offset` is
    /// `None`: O_APPEND); returns the offset written at. Split into records of
    /// at most [`MAX_WRITE_DATA`] bytes, all appended under the caller's lock.
    pub fn write(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        offset: Option<u64>,
        data: &[u8],
    ) -> Result<u64> {
        let f = self.inode(ino)?.file()?;
        let offset = offset.unwrap_or(f.size);
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > MAX_FILE_SIZE)
        {
            return Err(Error::FileTooLarge);
        }
        let t = now_ns();
        let mut at = offset;
        for part in data.chunks(MAX_WRITE_DATA) {
            // What `log` does for a `Record::Write` (checked above), without
            // copying the data into a record and its frame.
            let head = super::record::write_head(ino, at, t, part.len());
            let pos = ctx.wal.append_parts(&head, part)?;
            let plen = (head.len() + part.len()) as u64;
            self.fresh = false;
            self.changes += 1;
            self.apply_write(ino, at, t, part.len() as u64, pos, plen);
            at += part.len() as u64;
        }
        Ok(offset)
    }

    pub fn setattr(&mut self, ctx: &Ctx<'_>, ino: u64, a: &SetAttr) -> Result<()> {
        let t = now_ns();
        if let Some(size) = a.size {
            self.log(
                ctx,
                Record::Truncate {
                    ino,
                    size,
                    time_ns: t,
                },
            )?;
        }
        let time = |x: Option<Time>| {
            x.map(|v| match v {
                Time::Now => t,
                Time::At(ns) => ns,
            })
        };
        if a.perm.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.atime.is_some()
            || a.mtime.is_some()
        {
            self.log(
                ctx,
                Record::SetAttr {
                    ino,
                    perm: a.perm,
                    uid: a.uid,
                    gid: a.gid,
                    atime: time(a.atime),
                    mtime: time(a.mtime),
                    ctime: t,
                },
            )?;
        }
        if let Some(perm) = a.perm {
            self.chmod_acl(ctx, ino, perm, t)?;
        }
        Ok(())
    }

    /// After a chmod: an access ACL's owner, mask (or group) and other
    /// entries follow the new mode, as on ext4 ([`acl::Acl::chmod`]).
    fn chmod_acl(&mut self, ctx: &Ctx<'_>, ino: u64, perm: u32, t: i64) -> Result<()> {
        let Some(old) = self.inode(ino)?.xattrs.get(acl::ACCESS) else {
            return Ok(());
        };
        let Some(mut a) = acl::Acl::parse(old) else {
            return Ok(()); // not an ACL ext4 would have kept; left as it is
        };
        a.chmod(perm);
        let value = a.encode();
        if value == *old {
            return Ok(());
        }
        self.log(
            ctx,
            Record::SetXattr {
                ino,
                name: acl::ACCESS.to_vec(),
                value,
                flags: 0,
                time_ns: t,
            },
        )
    }

    pub fn fallocate(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        offset: u64,
        len: u64,
        mode: Fallocate,
    ) -> Result<()> {
        if len == 0 {
            return Err(Error::Invalid("fallocate of 0 bytes"));
        }
        let size = self.inode(ino)?.file()?.size;
        let end = offset.checked_add(len).ok_or(Error::FileTooLarge)?;
        let t = now_ns();
        match mode {
            Fallocate::PunchHole => self.log(
                ctx,
                Record::PunchHole {
                    ino,
                    offset,
                    len,
                    time_ns: t,
                },
            ),
            Fallocate::KeepSize => Ok(()),
            Fallocate::Extend if end > size => self.log(
                ctx,
                Record::Truncate {
                    ino,
                    size: end,
                    time_ns: t,
                },
            ),
            Fallocate::Extend => Ok(()),
        }
    }

    pub fn setxattr(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        let flags = match mode {
            XattrMode::Any => 0,
            XattrMode::Create => XATTR_CREATE,
            XattrMode::Replace => XATTR_REPLACE,
        };
        self.log(
            ctx,
            Record::SetXattr {
                ino,
                name: name.to_vec(),
                value: value.to_vec(),
                flags,
                time_ns: now_ns(),
            },
        )
    }

    pub fn removexattr(&mut self, ctx: &Ctx<'_>, ino: u64, name: &[u8]) -> Result<()> {
        self.log(
            ctx,
            Record::RemoveXattr {
                ino,
                name: name.to_vec(),
                time_ns: now_ns(),
            },
        )
    }

    pub fn open(&mut self, ino: u64) -> Result<()> {
        let n = self.inodes.get_mut(&ino).ok_or(Error::NotFound)?;
        if n.kind == Kind::File {
            n.open += 1;
        }
        Ok(())
    }

    pub fn release(&mut self, ino: u64) {
        if let Some(n) = self.inodes.get_mut(&ino)
            && n.kind == Kind::File
        {
            n.open = n.open.saturating_sub(1);
            if n.open == 0 && n.nlink == 0 {
                self.inodes.remove(&ino);
            }
        }
    }

    // ------------------------------------------------------------ rebase

    /// After a commit: data that came from segments before `seg` is now in the
    /// committed checkpoint; point those pieces at its objects. `folded` holds
    /// each folded file's extents by inode; `link_ids` the link ids the fold
    /// gave hardlinked inodes.
    pub fn rebase(
        &mut self,
        seg: u64,
        folded: &HashMap<u64, Vec<Extent>>,
        link_ids: &HashMap<u64, u64>,
    ) {
        for (ino, n) in self.inodes.iter_mut() {
            if let Some(&l) = link_ids.get(ino) {
                n.link_id = l;
            }
            let Data::File(f) = &mut n.data else {
                continue;
            };
            let old: Vec<(u64, Piece)> = f
                .pieces
                .iter()
                .filter(|(_, p)| matches!(p.src, Src::Journal { seg: s, .. } if s < seg))
                .map(|(s, p)| (*s, *p))
                .collect();
            if old.is_empty() {
                continue;
            }
            let Some(ext) = folded.get(ino) else {
                // Cannot happen: every file with journal data is folded.
                tracing::error!(ino, "journal data of a file missing from the fold");
                continue;
            };
            let starts: Vec<u64> = ext
                .iter()
                .scan(0u64, |acc, x| {
                    let s = *acc;
                    *acc += x.len;
                    Some(s)
                })
                .collect();
            for (s, p) in old {
                f.pieces.remove(&s);
                let end = s + p.len;
                let mut i = starts.partition_point(|&x| x <= s).saturating_sub(1);
                let mut pos = s;
                while pos < end && i < ext.len() {
                    let xend = starts[i] + ext[i].len;
                    let to = end.min(xend);
                    if let Some(id) = ext[i].id
                        && to > pos
                    {
                        f.pieces.insert(
                            pos,
                            Piece {
                                len: to - pos,
                                src: Src::Base {
                                    id,
                                    off: pos - starts[i],
                                },
                            },
                        );
                    }
                    pos = to;
                    i += 1;
                }
            }
        }
    }
}

fn touch_dir(n: &mut Inode, t: i64) {
    n.mtime = t;
    n.ctime = t;
    n.dirty = true;
}
