//! The file system model every mount shares, below the layers that serve
//! it: what `stat`, `statfs` and `setattr` speak ([`Attr`], [`SetAttr`],
//! [`Time`], [`StatFs`], [`DirEntry`]), the flags of `renameat2`, `setxattr`
//! and `fallocate` decoded ([`RenameMode`], [`XattrMode`], [`Fallocate`]),
//! the limits ([`ROOT_INO`], [`NAME_MAX`], [`XATTR_SIZE_MAX`],
//! [`MAX_FILE_SIZE`]), the POSIX outcomes of operations with their one errno
//! table ([`Posix`]), and what ext4 would report for a file's blocks and
//! holes ([`ext4`]).
//!
//! The read-only views of `fs/` and the fork of `journal/` both speak it, so
//! it lives here, below both. No FUSE types: `fs/` turns [`Posix::errno`]
//! into the kernel's reply.

pub mod ext4;
mod posix;

pub use posix::Posix;

use super::Kind;

/// The root directory's inode number (FUSE's root node id, and a fork's
/// root's).
pub const ROOT_INO: u64 = 1;
/// The largest file size (and write end) accepted: `off_t`'s maximum.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;
/// The longest name a directory entry may have (and `statfs` reports).
pub const NAME_MAX: usize = 255;
/// The largest xattr value (as Linux's XATTR_SIZE_MAX).
pub const XATTR_SIZE_MAX: usize = 64 * 1024;

/// Inode flags as `chattr` and `lsattr` speak them (`FS_IOC_GETFLAGS`,
/// `FS_IOC_SETFLAGS`; `linux/fs.h`'s `FS_*_FL`), and their `FS_XFLAG_*`
/// forms (`FS_IOC_FSGETXATTR`, `FS_IOC_FSSETXATTR`).
pub mod flags {
    /// `FS_IMMUTABLE_FL` (`chattr +i`): no change to the inode at all.
    pub const IMMUTABLE: u32 = 0x10;
    /// `FS_APPEND_FL` (`chattr +a`): data only appended, nothing else changed.
    pub const APPEND: u32 = 0x20;
    /// `FS_NODUMP_FL` (`chattr +d`): kept, means nothing to storefs.
    pub const NODUMP: u32 = 0x40;
    /// `FS_NOATIME_FL` (`chattr +A`): kept; storefs never updates atime anyway.
    pub const NOATIME: u32 = 0x80;
    /// The flags a fork keeps; setting any other is `EOPNOTSUPP`, as ext4
    /// refuses the flags it does not know.
    pub const KEPT: u32 = IMMUTABLE | APPEND | NODUMP | NOATIME;
    /// Both flags that need `CAP_LINUX_IMMUTABLE` to set or clear.
    pub const PROTECTED: u32 = IMMUTABLE | APPEND;

    /// `FS_XFLAG_IMMUTABLE`, `_APPEND`, `_NODUMP`, `_NOATIME`.
    const X: [(u32, u32); 4] = [
        (IMMUTABLE, 0x8),
        (APPEND, 0x10),
        (NODUMP, 0x80),
        (NOATIME, 0x40),
    ];

    /// The `FS_XFLAG_*` form of `flags` (only [`KEPT`] ones).
    pub fn to_xflags(flags: u32) -> u32 {
        X.iter()
            .filter(|(f, _)| flags & f != 0)
            .map(|(_, x)| x)
            .sum()
    }

    /// The `FS_*_FL` form of `xflags`; `None` when it holds one we do not keep.
    pub fn from_xflags(xflags: u32) -> Option<u32> {
        let known: u32 = X.iter().map(|(_, x)| x).sum();
        (xflags & !known == 0).then(|| {
            X.iter()
                .filter(|(_, x)| xflags & x != 0)
                .map(|(f, _)| f)
                .sum()
        })
    }
}

/// What `stat` shows of an inode, on every mount: a checkpoint's, the
/// browse mount's and a fork's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky.
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Device number (the store's encoding, as in trees).
    pub rdev: u64,
    pub size: u64,
    /// 512-byte blocks of stored data (holes excluded).
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// One name in a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: Kind,
}

/// A time to set with `setattr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Time {
    /// UTIME_NOW: the current time.
    Now,
    /// Nanoseconds since the epoch.
    At(i64),
}

/// What `setattr` changes; `None` fields are left alone. A size is a
/// truncate (shrink or grow with a hole).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Time>,
    pub mtime: Option<Time>,
    /// The change time to record (ns since the epoch): the kernel's, sent
    /// with the times it owns under the writeback cache. `None`: now.
    pub ctime: Option<i64>,
}

/// renameat2 behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenameMode {
    /// Plain rename: atomically replaces an existing destination.
    Replace,
    /// RENAME_NOREPLACE: fail with [`Posix::Exists`] if the destination exists.
    NoReplace,
    /// RENAME_EXCHANGE: swap two existing names.
    Exchange,
}

/// setxattr flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    Any,
    /// XATTR_CREATE: fail with [`Posix::XattrExists`] if it exists.
    Create,
    /// XATTR_REPLACE: fail with [`Posix::NoXattr`] if it does not.
    Replace,
}

/// fallocate modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallocate {
    /// Mode 0: extend the size to cover the range (the new part reads as zeros).
    Extend,
    /// FALLOC_FL_KEEP_SIZE alone: the size stays; the blocks are counted as
    /// reserved for the life of the open fork (`journal/prealloc.rs`: data
    /// lives in the journal, so nothing is reserved on disk).
    KeepSize,
    /// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: the range becomes a hole.
    PunchHole,
    /// FALLOC_FL_ZERO_RANGE (`keep_size`: with FALLOC_FL_KEEP_SIZE): the
    /// range reads as zeros (its part inside the file becomes a hole), its
    /// blocks are counted as reserved, as `KeepSize`'s, and without
    /// `keep_size` the size grows to cover it, as `Extend`'s.
    ZeroRange { keep_size: bool },
}

/// What `statfs` reports for a mount. A fork's blocks are those of the file
/// system holding the store (where the journal grows), its files the inodes
/// it knows now; a read-only mount has nothing free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub block_size: u32,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}
