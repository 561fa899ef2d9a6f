//! Layer 2: snapshot of a directory, restore, diff.
//!
//! - [`snapshot`] walks a directory (never following symlinks, never crossing
//!   into another filesystem), chunks file contents with FastCDC and stores
//!   objects and trees; it returns the root tree id for the CLI to publish.
//! - [`restore`] recreates a checkpoint byte- and metadata-exactly inside an
//!   empty directory, using only directory-fd-relative syscalls so a hostile
//!   tree cannot write outside it.
//! - [`diff`] compares two checkpoints entry by entry.

pub mod archive;
pub mod diff;
pub mod export;
pub mod git;
mod gitblob;
mod lookahead;
pub mod restore;
pub mod snapshot;
pub mod statcache;
mod sys;

use std::io;
use std::path::{Path, PathBuf};

pub use diff::{Change, ChangeKind, diff};
pub use restore::{RestoreStats, restore, restore_with};
pub use snapshot::{SnapshotOptions, SnapshotResult, snapshot};
pub use statcache::Parent;

use crate::store;

/// `a/b` from a tree-relative path (`a`, empty for the root) and a name:
/// the '/'-separated raw paths restore, diff and the git import report.
fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    if rel.is_empty() {
        return name.to_vec();
    }
    let mut p = Vec::with_capacity(rel.len() + 1 + name.len());
    p.extend_from_slice(rel);
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// Everything that can go wrong while snapshotting, restoring or diffing.
/// Each variant names the path involved and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call on `path` failed.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The directory to snapshot does not exist.
    #[error("{0} does not exist; pass an existing directory")]
    NotFound(PathBuf),
    /// The path to snapshot or restore into is not a directory.
    #[error("{0} is not a directory (symlinks are not followed); pass a directory")]
    NotADirectory(PathBuf),
    /// A file or directory could not be read or written for lack of permission.
    #[error("{0}: permission denied; run as a user that can access it (or as root)")]
    PermissionDenied(PathBuf),
    /// A file kept changing while its content was read.
    #[error("{path} changed while being read {attempts} times; stop the writer or snapshot again")]
    Changing { path: PathBuf, attempts: u32 },
    /// The restore destination already holds files.
    #[error("{0} is not empty; restore into a new or empty directory")]
    DestNotEmpty(PathBuf),
    /// A tree entry whose name could escape or confuse the destination.
    #[error(
        "{dir}: refusing entry name {name:?} (empty, '.', '..', or containing '/' or NUL); the checkpoint is corrupt or hostile"
    )]
    BadName { dir: PathBuf, name: String },
    /// A tree entry that contradicts itself (e.g. extents not adding up to the size).
    #[error("{path}: malformed entry: {detail}; the checkpoint is corrupt")]
    BadEntry { path: PathBuf, detail: String },
    /// Creating a device node needs privileges this process lacks.
    #[error("{path}: cannot create device node: {source}; restore as root (CAP_MKNOD)")]
    Mknod { path: PathBuf, source: io::Error },
    /// An object needed for `path` is missing or corrupt.
    #[error("{path}: {source}")]
    Object { path: PathBuf, source: store::Error },
    /// An archive that cannot be imported as given (no file, bad digest syntax, …).
    #[error("{0}")]
    Archive(String),
    /// A part of a split archive is not there.
    #[error(
        "{0} is missing: the parts of a split archive must be numbered without gaps; put it beside the others"
    )]
    PartMissing(PathBuf),
    /// The archive's bytes are not what the digest says.
    #[error(
        "sha256 mismatch for {what}: expected {expected}, got {actual}{hint}; the archive is corrupt or incomplete, nothing was imported"
    )]
    DigestMismatch {
        what: String,
        expected: String,
        actual: String,
        hint: String,
    },
    /// Corrupt compressed data or tar structure in a part.
    #[error("{part}: corrupt archive data: {detail}; nothing was imported")]
    Corrupt { part: String, detail: String },
    /// The archive ends before its data does.
    #[error("truncated archive: {0}; nothing was imported")]
    Truncated(String),
    /// An entry the import rules refuse (docs/format.md, "Archive import rules").
    #[error("archive entry '{entry}': {detail}; nothing was imported")]
    HostileEntry { entry: String, detail: String },
    /// A digest manifest that cannot be used.
    #[error("manifest {path}: {detail}")]
    Manifest { path: PathBuf, detail: String },
    /// A git repository that cannot be imported (shallow, corrupt, no refs, …).
    #[error("{0}")]
    Git(String),
    /// A git blob over the size `import-git` holds in memory whole.
    #[error(
        "{}: '{path}' is a blob of {size} bytes that git holds only as a delta (or in an alternate object directory), over the {max_mib} MiB import-git reads whole; nothing was imported",
        repo.display()
    )]
    GitBlobTooLarge {
        repo: PathBuf,
        path: String,
        size: u64,
        max_mib: u64,
    },
    /// Any other store error (trees, checkpoints).
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// Result of this layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wrap an io::Error for `path`, turning EACCES into [`Error::PermissionDenied`].
    pub(crate) fn io(path: &Path, source: io::Error) -> Error {
        let path = path.to_path_buf();
        match source.raw_os_error() {
            Some(libc::EACCES) => Error::PermissionDenied(path),
            _ => Error::Io { path, source },
        }
    }
}

/// A name for a message: UTF-8 text as is, except control characters and
/// backslashes, which are escaped (`\n`, `\t`, `\\`, `\x01`), as are bytes
/// that are not UTF-8 (`\xff`). One line, whatever the name holds.
pub fn escape(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    let mut b = [0u8; 4];
                    for byte in c.encode_utf8(&mut b).bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Attach a path to an io::Result.
pub(crate) trait IoAt<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoAt<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}

#[cfg(test)]
mod tests;

/// Debug builds only, for the tests of a path that vanishes while a snapshot
/// runs: when `STOREFS_TEST_VANISH` names `path`, it is removed just before
/// the snapshot opens it (a file, to read it) or lists it (a directory).
/// Release builds compile this to nothing.
fn testing_vanish(path: &Path) {
    #[cfg(debug_assertions)]
    {
        static VANISH: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
        let target = VANISH.get_or_init(|| std::env::var_os("STOREFS_TEST_VANISH").map(Into::into));
        if target.as_deref() == Some(path) {
            let _ = std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path));
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = path;
}
