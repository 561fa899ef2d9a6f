//! storefs: a content-addressed store of directory checkpoints, and a FUSE daemon
//! that mounts them at their original absolute path.
//!
//! Layers, each depending only on those above it in this list:
//! 1. [`store`]: objects, trees, checkpoints, refs (no FUSE).
//! 2. [`ingest`]: directory snapshot, restore, diff, archive import and export.
//! 3. [`journal`]: forks: copy-on-write state over a checkpoint, its write-ahead
//!    journal, and commit into new checkpoints (no FUSE; the read-write mount
//!    and CLI verbs are not built yet).
//!    [`remote`] (beside them, on [`store`] only): push and pull checkpoints to
//!    object storage (S3 or a directory).
//! 4. [`fs`]: the FUSE layer; the only place that speaks errno.
//! 5. [`cli`]: clap commands that call the layers.

pub mod cli;
pub mod daemon;
pub mod fs;
pub mod ingest;
pub mod journal;
pub mod remote;
pub mod store;
pub mod sys;
