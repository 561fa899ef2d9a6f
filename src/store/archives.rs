//! The archive index: `archives/<sha256>.json`, one record per imported archive,
//! keyed by the sha256 of the whole (joined) archive. It lets `storefs mount
//! ARCHIVE --sha256 HEX` find an earlier import without reading the archive.
//! It also names each import for people ([`Store::list_archives`]): the name
//! the browse mount shows under `archives/`.

use std::ffi::OsStr;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{IoContext, ObjectId, Result, Store, is_hex, write_store_file};

/// What `archives/<sha256>.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveRecord {
    /// The checkpoint the archive was imported as.
    pub checkpoint: ObjectId,
    /// The archive's file names (parts in order), as given when it was imported.
    pub files: Vec<String>,
    /// When it was imported, nanoseconds since the epoch.
    pub time_ns: i64,
}

impl Store {
    fn archive_record_path(&self, sha256: &str) -> Option<PathBuf> {
        let hex = sha256.to_ascii_lowercase();
        (hex.len() == 64 && is_hex(&hex))
            .then(|| self.root().join("archives").join(format!("{hex}.json")))
    }

    /// The import of the archive whose sha256 is `sha256`, if there was one and
    /// its checkpoint still exists. A malformed record counts as absent.
    pub fn archive_record(&self, sha256: &str) -> Result<Option<ArchiveRecord>> {
        let Some(path) = self.archive_record_path(sha256) else {
            return Ok(None);
        };
        let bytes = match super::read_store_file(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at(&path),
        };
        let Ok(rec) = serde_json::from_slice::<ArchiveRecord>(&bytes) else {
            return Ok(None);
        };
        match self.read_checkpoint(&rec.checkpoint) {
            Ok(_) => Ok(Some(rec)),
            Err(super::Error::UnknownTarget(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Record (atomically, durably) that the archive `sha256` is checkpoint `rec.checkpoint`.
    pub fn set_archive_record(&self, sha256: &str, rec: &ArchiveRecord) -> Result<()> {
        let path = self
            .archive_record_path(sha256)
            .ok_or_else(|| super::Error::Invalid(format!("'{sha256}' is not a sha256")))?;
        let dir = self.root().join("archives");
        fs::create_dir_all(&dir).at(&dir)?;
        let mut data = serde_json::to_vec_pretty(rec).expect("record serializes");
        data.push(b'\n');
        write_store_file(&path, &data, 0o644, true).at(&path)
    }

    /// The archive index as (name, checkpoint), by name and then age: the name is
    /// the first file's base name; when several archives share it, all but
    /// the oldest get `@<first 12 hex of the archive's sha256>` appended. A
    /// record that cannot be read is skipped (and logged).
    pub fn list_archives(&self) -> Result<Vec<(String, ObjectId)>> {
        let mut records: Vec<(String, String, ArchiveRecord)> = Vec::new();
        for file in super::dir_names(&self.root().join("archives"))? {
            let Some(sha) = file.strip_suffix(".json") else {
                continue;
            };
            match self.archive_record(sha) {
                Ok(Some(rec)) => {
                    let name = rec
                        .files
                        .first()
                        .and_then(|f| Path::new(f).file_name())
                        .and_then(OsStr::to_str)
                        .filter(|n| n.len() <= 200 && n.bytes().all(|b| b != b'/' && b != 0))
                        .map_or_else(|| format!("archive-{}", &sha[..12]), str::to_string);
                    records.push((name, sha.to_string(), rec));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(archive = sha, error = %e, "skipping archive record"),
            }
        }
        records.sort_by(|a, b| (&a.0, a.2.time_ns, &a.1).cmp(&(&b.0, b.2.time_ns, &b.1)));
        let mut out: Vec<(String, ObjectId)> = Vec::with_capacity(records.len());
        for (i, (name, sha, rec)) in records.iter().enumerate() {
            let dup = i > 0 && records[i - 1].0 == *name;
            let name = if dup {
                format!("{name}@{}", &sha[..12])
            } else {
                name.clone()
            };
            out.push((name, rec.checkpoint));
        }
        Ok(out)
    }
}
