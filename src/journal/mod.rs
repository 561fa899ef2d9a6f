//! Layer 3: forks — copy-on-write, read-write views of a checkpoint whose
//! changes go to a crash-safe journal and are folded back into the store as
//! new checkpoints. No FUSE types and no errno here: errors are the semantic
//! [`Error`] enum, which `fs/` maps to errno.
//!
//! - [`Fork::create`] makes a named fork of a checkpoint (copies nothing);
//!   [`Fork::open`] takes the fork's lock, replays its journal and serves
//!   inode-level operations ([`Fork::lookup`], [`Fork::write`], …);
//!   [`Fork::sync`] is every flavour of fsync; [`Fork::commit`] folds the
//!   journal into a checkpoint and moves the fork's head.
//! - `record.rs`: the record format; `wal.rs`: segments, torn-tail recovery,
//!   group commit; `io.rs`: the I/O trait, [`RealIo`] and the fault-injecting
//!   [`FaultyIo`]; `state/`: inodes, POSIX semantics, replay (a module per
//!   family of records, each record's checks and effect side by side);
//!   `fold.rs`: state → trees; `rechunk.rs`: a changed file re-cut only around
//!   its changes; `fork.rs`: the fork directory, HEAD and commit protocol.
//!
//! The on-disk format and the durability contract are in `docs/journal.md`.
//!
//! Limits, honestly: no permission checks here (the mount is expected to use
//! the kernel's `default_permissions`); a commit writes the inode map of every
//! loaded directory and scans the inode table under the state lock (it copies
//! only what changed); the fork's own lock is not checked against a
//! concurrent `Fork::create` of a ref of the same name.

mod checkout;
pub mod ext4;
mod fold;
mod fork;
pub mod io;
pub mod ops;
mod prealloc;
mod rechunk;
pub mod record;
mod state;
pub mod wal;

use std::io as stdio;
use std::path::PathBuf;

pub use checkout::{BadPath, Checkout, Done, relative_path};
pub use fork::{
    Fork, ForkInfo, ForkMemory, NewNode, StatFs, Upstream, fork_dir, fork_log,
    has_uncommitted_changes, read_fork_info,
};
pub use io::{FaultyIo, JournalFile, JournalIo, Prealloc, RealIo};
pub use state::{MAX_FILE_SIZE, NAME_MAX, ROOT_INO, XATTR_SIZE_MAX};

use crate::store::{self, Kind, ObjectId};

/// What can go wrong on a fork. The first group are the POSIX outcomes of
/// operations (fs/ maps each to one errno); the rest are failures of the
/// fork itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// ENOENT: no such name or inode.
    #[error("no such file or directory")]
    NotFound,
    /// EEXIST.
    #[error("file exists")]
    Exists,
    /// ENOTEMPTY.
    #[error("directory not empty")]
    NotEmpty,
    /// ENOTDIR.
    #[error("not a directory")]
    NotDir,
    /// EISDIR.
    #[error("is a directory")]
    IsDir,
    /// EINVAL, with what was wrong.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// EPERM (e.g. a hard link to a directory).
    #[error("operation not permitted")]
    Perm,
    /// ENAMETOOLONG: a name longer than [`NAME_MAX`] bytes.
    #[error("file name too long")]
    NameTooLong,
    /// ENODATA: no such extended attribute (or XATTR_REPLACE of a missing one).
    #[error("no such extended attribute")]
    NoXattr,
    /// EEXIST for XATTR_CREATE of an existing attribute.
    #[error("extended attribute exists")]
    XattrExists,
    /// E2BIG: an xattr value over [`XATTR_SIZE_MAX`].
    #[error("extended attribute value too large")]
    TooBig,
    /// EFBIG: past [`MAX_FILE_SIZE`].
    #[error("file too large")]
    FileTooLarge,
    /// EMLINK.
    #[error("too many links")]
    TooManyLinks,
    /// The fork is open elsewhere (a mount or a commit holds its lock).
    #[error(
        "fork '{0}' is in use (mounted, or a commit is running); unmount it or wait, then retry"
    )]
    Busy(String),
    /// No fork of that name.
    #[error("no fork named '{0}'")]
    NoFork(String),
    /// A fork name outside `[A-Za-z0-9._-]+` (or `.`/`..`).
    #[error("bad fork name '{0}': use letters, digits, '.', '_' and '-', not '.' or '..'")]
    BadName(String),
    /// A fork's name is taken by a ref or another fork.
    #[error("'{0}' is already the name of a ref or a fork; pick another name")]
    NameTaken(String),
    /// The fork's journal holds changes not yet committed (moving its head
    /// would lose them).
    #[error("fork '{0}' has uncommitted changes in its journal")]
    Uncommitted(String),
    /// A head move that is not a fast-forward.
    #[error(
        "fork '{name}' is at {head}, which is not an ancestor of {new}: moving the head would lose its checkpoints"
    )]
    NotAncestor {
        name: String,
        head: ObjectId,
        new: ObjectId,
    },
    /// A request refused before anything changed (`storefs checkout` of an
    /// unsafe path, ...), with what to do instead.
    #[error("{0}")]
    Refused(String),
    /// I/O on a fork file failed (EIO through a mount).
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: stdio::Error },
    /// ENOSPC (or EDQUOT): the journal could not take a record because its
    /// file system is full. Nothing of the record remains and the journal
    /// keeps working: the operation may be retried once space is freed.
    #[error(
        "{path}: no space left for the fork's journal; free space on its file system, then retry"
    )]
    NoSpace { path: PathBuf },
    /// The store failed (missing or corrupt object, I/O).
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The journal or fork directory holds something that cannot be right
    /// (not a torn tail, which is repaired silently but for a warning).
    #[error("{path}: corrupt fork journal: {detail}")]
    Corrupt { path: PathBuf, detail: String },
}

/// Result of this layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What `stat` shows of a fork inode (and, through `fs::view::Attr`, of
/// every mount's inodes).
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

/// A time to set with [`Fork::setattr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Time {
    /// UTIME_NOW: the current time.
    Now,
    /// Nanoseconds since the epoch.
    At(i64),
}

/// What [`Fork::setattr`] changes; `None` fields are left alone. A size is a
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
    /// RENAME_NOREPLACE: fail with [`Error::Exists`] if the destination exists.
    NoReplace,
    /// RENAME_EXCHANGE: swap two existing names.
    Exchange,
}

/// setxattr flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    Any,
    /// XATTR_CREATE: fail with [`Error::XattrExists`] if it exists.
    Create,
    /// XATTR_REPLACE: fail with [`Error::NoXattr`] if it does not.
    Replace,
}

/// fallocate modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallocate {
    /// Mode 0: extend the size to cover the range (the new part reads as zeros).
    Extend,
    /// FALLOC_FL_KEEP_SIZE alone: the size stays; the blocks are counted as
    /// reserved for the life of the open fork (`prealloc.rs`: data lives in
    /// the journal, so nothing is reserved on disk).
    KeepSize,
    /// FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE: the range becomes a hole.
    PunchHole,
    /// FALLOC_FL_ZERO_RANGE (`keep_size`: with FALLOC_FL_KEEP_SIZE): the
    /// range reads as zeros (its part inside the file becomes a hole), its
    /// blocks are counted as reserved, as `KeepSize`'s, and without
    /// `keep_size` the size grows to cover it, as `Extend`'s.
    ZeroRange { keep_size: bool },
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod model_tests;

#[cfg(test)]
mod park_tests;

#[cfg(test)]
mod stress_tests;

#[cfg(test)]
mod rechunk_tests;
