//! storefs: a content-addressed store of directory checkpoints, and a FUSE daemon
//! that mounts them at their original absolute path.
//!
//! Modules in layer order; each imports only modules listed before it
//! (`docs/design.md` has the map and what each may not touch):
//! - [`sys`]: OS plumbing every layer may use (signals, flock, pid liveness,
//!   the mount table, unmount).
//! - [`store`]: objects, packs, trees, checkpoints, refs, fork heads, mount
//!   records, gc; the content format; the file system model every mount
//!   speaks ([`store::model`]: attributes, limits, POSIX outcomes and their
//!   errno table, the ext4 block model). No FUSE.
//! - [`ingest`], [`remote`], [`journal`], side by side on [`store`]: snapshot,
//!   restore, archives and export; remotes (push, pull, lazy fetch); forks
//!   (write-ahead journal, fork state, fold, commit).
//! - [`fs`]: what a mount serves (the views behind one trait: a checkpoint,
//!   a fork, the browse tree) and its two transports (fuser on `/dev/fuse`,
//!   and FUSE over io_uring); the only place that speaks errno.
//! - [`daemon`]: a running mount: what a target names, spawn, handshake,
//!   serve, signals, control socket, unmount.
//! - [`cli`]: clap verbs that parse, call and print, adding to an error the
//!   command that fixes it.

pub mod cli;
pub mod daemon;
pub mod fs;
pub mod ingest;
pub mod journal;
pub mod remote;
pub mod store;
pub mod sys;
