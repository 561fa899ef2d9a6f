//! The git index: `git/<commit>.json`, one record per imported git commit,
//! keyed by the commit's hex id (40 digits for SHA-1 repositories, 64 for
//! SHA-256). It makes `import-git` incremental (a commit in the index is not
//! read again) and lets `git:COMMIT` (or a unique prefix) name the checkpoint
//! a commit was imported as, wherever a checkpoint is accepted.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Error, IoContext, ObjectId, Result, Store, is_hex, write_store_file};

/// What `git/<commit>.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitRecord {
    /// The checkpoint the commit was (last) imported as.
    pub checkpoint: ObjectId,
    /// The repository it was imported from (absolute path), for people.
    pub repo: String,
    /// When it was imported, nanoseconds since the epoch.
    pub time_ns: i64,
}

/// Whether `hex` can be a git object id: 40 or 64 lowercase hex digits.
fn is_commit_hex(hex: &str) -> bool {
    (hex.len() == 40 || hex.len() == 64) && is_hex(hex) && hex == hex.to_ascii_lowercase()
}

impl Store {
    fn git_dir(&self) -> PathBuf {
        self.root().join("git")
    }

    /// The import of git commit `commit` (hex), if there was one and its
    /// checkpoint still exists. A malformed record counts as absent.
    pub fn git_record(&self, commit: &str) -> Result<Option<GitRecord>> {
        if !is_commit_hex(commit) {
            return Ok(None);
        }
        let path = self.git_dir().join(format!("{commit}.json"));
        let bytes = match super::read_store_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at(&path),
        };
        let Ok(rec) = serde_json::from_slice::<GitRecord>(&bytes) else {
            return Ok(None);
        };
        Ok(self.has_checkpoint(&rec.checkpoint).then_some(rec))
    }

    /// Record (atomically) that git commit `commit` is checkpoint
    /// `rec.checkpoint`. The file is fsynced, its name is made durable by
    /// [`Store::sync_git_index`] (one directory fsync for many records).
    pub fn set_git_record(&self, commit: &str, rec: &GitRecord) -> Result<()> {
        if !is_commit_hex(commit) {
            return Err(Error::Invalid(format!("'{commit}' is not a git commit id")));
        }
        let dir = self.git_dir();
        fs::create_dir_all(&dir).at(&dir)?;
        let path = dir.join(format!("{commit}.json"));
        let mut data = serde_json::to_vec_pretty(rec).expect("record serializes");
        data.push(b'\n');
        write_store_file(&path, &data, 0o644, false).at(&path)
    }

    /// Make the names of the records written by [`Store::set_git_record`] durable.
    pub fn sync_git_index(&self) -> Result<()> {
        let dir = self.git_dir();
        if crate::sys::exists_nofollow(&dir) {
            super::fsync_dir(&dir).at(&dir)?;
        }
        Ok(())
    }

    /// Every imported git commit (hex) with its checkpoint, by commit id;
    /// malformed records and those whose checkpoint is gone are left out.
    pub fn list_git(&self) -> Result<Vec<(String, ObjectId)>> {
        let mut out = Vec::new();
        for (hex, rec) in self.git_records(|_| true)? {
            out.push((hex, rec.checkpoint));
        }
        Ok(out)
    }

    /// The records of the imported commits whose hex id `want` accepts, by
    /// commit id (malformed records and those whose checkpoint is gone are
    /// left out).
    fn git_records(&self, want: impl Fn(&str) -> bool) -> Result<Vec<(String, GitRecord)>> {
        let mut out = Vec::new();
        for name in super::dir_names(&self.git_dir())? {
            let Some(hex) = name.strip_suffix(".json").filter(|h| want(h)) else {
                continue;
            };
            if let Some(rec) = self.git_record(hex)? {
                out.push((hex.to_string(), rec));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The checkpoint of the imported git commit whose id starts with
    /// `prefix` (at least 4 hex digits): `git:PREFIX` as the user types it.
    pub fn resolve_git(&self, prefix: &str) -> Result<ObjectId> {
        let lower = prefix.to_ascii_lowercase();
        let unknown = || Error::NoGitCommit(prefix.to_string());
        if lower.len() < 4 || lower.len() > 64 || !is_hex(&lower) {
            return Err(unknown());
        }
        let found = self.git_records(|hex| hex.starts_with(&lower))?;
        match found.len() {
            0 => Err(unknown()),
            1 => Ok(found[0].1.checkpoint),
            n => Err(Error::Ambiguous {
                prefix: format!("git:{prefix}"),
                count: n,
                examples: found
                    .iter()
                    .take(3)
                    .map(|(h, _)| h[..12].to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}
