//! The fixtures the journal's test modules share. Test builds only.

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

/// Deterministic pseudo-random numbers (xorshift64*): the same seed gives the
/// same sequence, so a failing test names its seed and reruns it. Test
/// modules add their own generators (`impl Rng` beside their tests).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
