//! The inode table: what one fork inode holds ([`Inode`], its [`Data`]), how
//! a base tree entry becomes one, what `stat` shows of it, and the table's
//! lookups and open-handle counts.
//!
//! Owns no record: changes to inodes are made by the record families
//! (`namespace.rs`, `data.rs`, `attrs.rs`).

use std::collections::BTreeMap;

use super::super::Result;
use super::extents::{FileData, data_ranges};
use super::{ForkState, corrupt};
use crate::store::model::{Attr, Posix, ext4};
use crate::store::{Content, Entry, Kind, ObjectId};

#[derive(Clone, Debug)]
pub enum Dir {
    /// Not read yet: the base tree object.
    Unloaded(ObjectId),
    Loaded(BTreeMap<Vec<u8>, u64>),
    /// Loaded, then put away to bound memory: its children keep their
    /// numbers, its files are not in the table (`park.rs`).
    Parked(Box<Parked>),
}

impl Dir {
    /// The tree an unloaded or parked directory is, whole: the base's, or
    /// for a parked one the tree a commit stored for it since.
    pub fn base_tree(&self) -> Option<ObjectId> {
        match self {
            Dir::Unloaded(id) => Some(*id),
            Dir::Parked(p) => Some(p.id),
            Dir::Loaded(_) => None,
        }
    }
}

/// A parked directory: unchanged since tree `id` (the base tree it was
/// loaded from, or the tree a commit stored for it since), like everything
/// under it, so the tree gives its entries back.
#[derive(Clone, Debug)]
pub struct Parked {
    pub id: ObjectId,
    /// The children's inode numbers, in name order (the tree's order).
    pub inos: Box<[u64]>,
    /// Their open counts (the kernel's references count as one).
    pub opens: Box<[u32]>,
    /// `st_size` and `st_blocks` of the directory (as [`ext4::dir_size`]).
    pub size: (u64, u64),
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
    /// `chattr` flags ([`crate::store::model::flags`]; `flags.rs`).
    pub flags: u32,
    pub data: Data,
    /// Directories: the directory holding them (the root: itself).
    pub parent: u64,
    /// Open handles (files only; not journaled).
    pub open: u32,
    /// A file made with no name (`Tmpfile`) and not linked since: the one
    /// kind of unlinked file a `Link` may give a name (the kernel refuses
    /// the others, and an `O_TMPFILE | O_EXCL` one, itself: `I_LINKABLE`).
    /// Cleared at a commit ([`ForkState::seal_tmpfiles`]).
    pub tmpfile: bool,
    /// The base checkpoint's `link_id` of this inode (0: none).
    pub link_id: u64,
    /// Changed since it was loaded from the base, or since a commit stored
    /// it (`park.rs`: `settle`).
    pub dirty: bool,
    /// `st_size` of a directory or special file (as the base recorded it).
    pub dsize: u64,
    /// [`ForkState::stamp`] when the inode last changed (0: not since it
    /// was loaded or made).
    pub stamp: u64,
    /// A loaded directory: its tree as the last commit stored it (boxed:
    /// most inodes are files, and every inode would carry its 56 bytes).
    pub tree: Option<Box<TreeCache>>,
}

/// A loaded directory's tree as a commit stored it, valid while nothing in
/// the directory changed since (`journal::fold` checks the stamps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeCache {
    pub id: ObjectId,
    /// Entries under it at every depth, and the bytes of its regular files.
    pub entries: u64,
    pub bytes: u64,
    /// [`ForkState::stamp`] when the commit's state was taken.
    pub at: u64,
}

impl Inode {
    /// A new inode made on the fork (not from the base): all times `t`, one
    /// link, owned by root with no permissions, no parent; the caller sets
    /// what differs.
    pub(super) fn fresh(kind: Kind, data: Data, t: i64) -> Inode {
        Inode {
            kind,
            perm: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
            nlink: 1,
            xattrs: BTreeMap::new(),
            flags: 0,
            data,
            parent: 0,
            open: 0,
            tmpfile: false,
            link_id: 0,
            dirty: true,
            dsize: 0,
            stamp: 0,
            tree: None,
        }
    }

    /// An inode from a base tree entry.
    pub(super) fn from_entry(e: &Entry, parent: u64) -> Inode {
        let data = match (&e.content, e.kind) {
            (Content::Tree(id), Kind::Dir) => Data::Dir(Dir::Unloaded(*id)),
            (_, Kind::Dir) => Data::Dir(Dir::Loaded(BTreeMap::new())),
            (Content::Extents(ext), Kind::File) => Data::File(FileData::from_extents(ext, e.size)),
            (_, Kind::File) => Data::File(FileData::empty()),
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
            flags: e.flags,
            data,
            parent,
            open: 0,
            tmpfile: false,
            link_id: if e.kind == Kind::Dir { 0 } else { e.link_id },
            dirty: false,
            dsize: if matches!(e.kind, Kind::File | Kind::Symlink) {
                0
            } else {
                e.size
            },
            stamp: 0,
            tree: None,
        }
    }

    /// A copy of everything but the data (which is `Data::Special`).
    pub fn without_data(&self) -> Inode {
        Inode {
            kind: self.kind,
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            nlink: self.nlink,
            xattrs: self.xattrs.clone(),
            flags: self.flags,
            data: Data::Special,
            parent: self.parent,
            open: self.open,
            tmpfile: self.tmpfile,
            link_id: self.link_id,
            dirty: self.dirty,
            dsize: self.dsize,
            stamp: self.stamp,
            tree: self.tree.clone(),
        }
    }

    /// What `stat` shows: sizes and blocks as ext4 would have them
    /// ([`ext4`]); a symlink is always `rwxrwxrwx`. A directory not loaded
    /// yet shows one block here: [`super::super::Fork`] sizes it from its base tree.
    pub fn attr(&self, ino: u64) -> Attr {
        let (size, blocks) = match &self.data {
            Data::File(f) => (f.size, ext4::file_blocks(f.size, data_ranges(f, 0))),
            Data::Symlink(t) => (t.len() as u64, ext4::symlink_blocks(t.len() as u64)),
            Data::Dir(Dir::Loaded(k)) => ext4::dir_size(k.keys().map(Vec::len)),
            Data::Dir(Dir::Unloaded(_)) => ext4::dir_size([]),
            Data::Dir(Dir::Parked(p)) => p.size,
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

    pub(super) fn file(&self) -> Result<&FileData> {
        match &self.data {
            Data::File(f) => Ok(f),
            Data::Dir(_) => Err(Posix::IsDir.into()),
            _ => Err(Posix::Invalid("not a regular file").into()),
        }
    }

    pub(super) fn file_mut(&mut self) -> &mut FileData {
        match &mut self.data {
            Data::File(f) => f,
            _ => unreachable!("validated as a file"),
        }
    }

    pub(super) fn children(&self) -> Option<&BTreeMap<Vec<u8>, u64>> {
        match &self.data {
            Data::Dir(Dir::Loaded(k)) => Some(k),
            _ => None,
        }
    }

    pub(super) fn children_mut(&mut self) -> &mut BTreeMap<Vec<u8>, u64> {
        match &mut self.data {
            Data::Dir(Dir::Loaded(k)) => k,
            _ => unreachable!("validated as a loaded directory"),
        }
    }

    /// Data changed at `t`.
    pub(super) fn touch_data(&mut self, t: i64) {
        self.mtime = t;
        self.ctime = t;
        self.dirty = true;
    }

    /// Metadata changed at `t`.
    pub(super) fn touch_meta(&mut self, t: i64) {
        self.ctime = t;
        self.dirty = true;
    }
}

impl ForkState {
    pub fn inode(&self, ino: u64) -> Result<&Inode> {
        self.inodes
            .get(&ino)
            .map(|n| &**n)
            .ok_or(Posix::NotFound.into())
    }

    /// Inode `ino` to change: every change of the tree goes through here,
    /// which stamps it (see [`Inode::stamp`]).
    pub(super) fn inode_mut(&mut self, ino: u64) -> &mut Inode {
        self.stamp += 1;
        let n = self.inodes.get_mut(&ino).expect("validated inode");
        n.stamp = self.stamp;
        n
    }

    /// A loaded directory's children (for checks: an unloaded one is an error).
    pub(super) fn dir(&self, ino: u64) -> Result<&BTreeMap<Vec<u8>, u64>> {
        let n = self.inode(ino)?;
        match &n.data {
            Data::Dir(Dir::Loaded(k)) => Ok(k),
            Data::Dir(Dir::Unloaded(_) | Dir::Parked(_)) => Err(corrupt(format!(
                "directory {ino} used before it was loaded"
            ))),
            _ => Err(Posix::NotDir.into()),
        }
    }

    /// A handle on `ino` was opened (counted for files: an unlinked file
    /// stays while open).
    pub fn open(&mut self, ino: u64) -> Result<()> {
        let Some(n) = self.inodes.get_mut(&ino) else {
            // A file of a parked directory stays parked.
            let open = self.parked_open(ino).ok_or(Posix::NotFound)?;
            *open = open.saturating_add(1);
            return Ok(());
        };
        if n.kind == Kind::File {
            n.open = n.open.saturating_add(1);
        }
        Ok(())
    }

    /// Whether inode `ino` exists with a name, resident or parked (an
    /// unlinked file kept open does not count).
    pub fn linked(&mut self, ino: u64) -> bool {
        match self.inodes.get(&ino) {
            Some(n) => n.nlink > 0,
            None => self.parked_open(ino).is_some(),
        }
    }

    /// `count` handles on `ino` were closed; the last one of an unlinked
    /// file drops it.
    pub fn release(&mut self, ino: u64, count: u64) {
        let count = u32::try_from(count).unwrap_or(u32::MAX);
        let Some(n) = self.inodes.get_mut(&ino) else {
            if let Some(open) = self.parked_open(ino) {
                *open = open.saturating_sub(count);
            }
            return;
        };
        if n.kind == Kind::File {
            n.open = n.open.saturating_sub(count);
            if n.open == 0 && n.nlink == 0 {
                self.inodes.remove(&ino);
            }
        }
    }
}
