//! Layer 3: forks — copy-on-write, read-write views of a checkpoint whose
//! changes go to a crash-safe journal and are folded back into the store as
//! new checkpoints. No FUSE types and no errno here: the fork speaks the file
//! system model of [`crate::store::model`], and its errors are the semantic
//! [`Error`] enum, a POSIX outcome ([`Posix`]) or a failure of the fork,
//! which `fs/` maps to errno.
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

/// The file system model the fork's operations speak (`store::model`).
pub use crate::store::model::{
    Attr, DirEntry, Fallocate, MAX_FILE_SIZE, NAME_MAX, Posix, ROOT_INO, RenameMode, SetAttr,
    StatFs, Time, XATTR_SIZE_MAX, XattrMode,
};
pub use checkout::{BadPath, Checkout, Done, relative_path};
pub use fork::{
    Fork, ForkInfo, ForkMemory, NewNode, Upstream, delete_fork, fork_dir, fork_log,
    has_uncommitted_changes, read_fork_info,
};
pub use io::{FaultyIo, JournalFile, JournalIo, Prealloc, RealIo};

use crate::store::{self, ObjectId};

/// What can go wrong on a fork: the POSIX outcome of an operation
/// ([`Posix`], which fs/ maps to its errno), or a failure of the fork itself.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// ENOENT, EEXIST, ENOTEMPTY, …: what POSIX says the operation answers.
    #[error(transparent)]
    Posix(#[from] Posix),
    /// The fork is open elsewhere (a mount or a commit holds its lock).
    #[error(
        "fork '{0}' is in use (mounted, in a run, or committing); unmount it or wait, then retry"
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
    /// The fork was shut down (`FS_IOC_SHUTDOWN`, [`Fork::shut_down`]): it
    /// takes no request that reads or changes it, appends nothing more to
    /// its journal and does not commit. `path`: its journal directory.
    #[error(
        "{path}: the fork was shut down (FS_IOC_SHUTDOWN) and takes no more requests; unmount it and mount it again (its journal replays what was synced)"
    )]
    ShutDown { path: PathBuf },
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
