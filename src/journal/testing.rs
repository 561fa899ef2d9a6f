//! The fixture the journal's test modules share. Test builds only.

use std::path::Path;

use crate::ingest::{self, SnapshotOptions};
use crate::store::{Checkpoint, ObjectId, Source, Store};

/// Snapshot the directory `src` into `store` and write it as a parentless
/// checkpoint with `origin`, at time 1, message "base": the checkpoint a
/// test forks.
pub fn base_checkpoint(store: &Store, src: &Path, origin: &str) -> ObjectId {
    let snap = ingest::snapshot(store, src, &SnapshotOptions::default()).unwrap();
    store
        .write_checkpoint(&Checkpoint {
            version: 1,
            root: snap.root,
            parents: vec![],
            origin: Some(origin.into()),
            time_ns: 1,
            message: "base".into(),
            source: Source {
                kind: "snapshot".into(),
                ..Default::default()
            },
        })
        .unwrap()
}
