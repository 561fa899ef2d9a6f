//! Fork heads: `forks/<name>/HEAD`, the one file of a fork the store reads.
//! The journal layer owns the rest of a fork's directory (its `fork.json`,
//! journal and lock) and moves HEAD; the store reads heads to resolve a fork's
//! name, to list forks and to keep their checkpoints alive in gc.

use std::io::ErrorKind;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Error, IoContext, ObjectId, Result, Store};

/// `forks/<name>/HEAD`: the fork's current checkpoint and the first journal
/// segment to replay onto it. Replaced atomically as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkHead {
    pub checkpoint: ObjectId,
    pub journal_from: u64,
}

impl ForkHead {
    /// The file's name in a fork's directory.
    pub const FILE: &'static str = "HEAD";
}

impl Store {
    /// Where forks live: `forks/<name>/` (created with the first fork).
    pub fn forks_dir(&self) -> PathBuf {
        self.root().join("forks")
    }

    /// Fork `name`'s HEAD, or `None` when there is no such fork (or its
    /// creation did not finish).
    pub fn read_fork_head(&self, name: &str) -> Result<Option<ForkHead>> {
        if Self::check_name(name).is_err() {
            return Ok(None);
        }
        let path = self.forks_dir().join(name).join(ForkHead::FILE);
        let bytes = match super::read_store_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at(&path),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
    }

    /// The head checkpoint of fork `name`, or `None` when there is no such fork.
    pub fn fork_head(&self, name: &str) -> Result<Option<ObjectId>> {
        Ok(self.read_fork_head(name)?.map(|h| h.checkpoint))
    }

    /// All forks and their heads, sorted by name. A fork whose creation did
    /// not finish (no HEAD) is not listed.
    pub fn list_forks(&self) -> Result<Vec<(String, ObjectId)>> {
        let mut out = Vec::new();
        for name in super::dir_names(&self.forks_dir())? {
            if let Some(id) = self.fork_head(&name)? {
                out.push((name, id));
            }
        }
        out.sort();
        Ok(out)
    }
}
