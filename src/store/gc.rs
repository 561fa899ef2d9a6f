//! Garbage collection: delete objects that no checkpoint reaches.
//!
//! **What is kept.** Every checkpoint record is kept (they are the history, and
//! an id printed by `snapshot` must stay mountable), so every checkpoint is a
//! root; refs, fork heads and their parents, fork bases, archive index entries
//! and live mounts all name checkpoints and are covered by that. Objects
//! reachable from any checkpoint (its root tree, subtrees, file chunks) are
//! kept. Fork journals hold their data inline, not in objects.
//!
//! **Concurrent writers.** A snapshot, import or commit writes objects (or
//! finds them already present) before it publishes the checkpoint naming them.
//! Each holds a shared `flock` on `STORE/gc.lock` from before its first object
//! until its checkpoint (and ref/HEAD) is published ([`Store::write_lease`]).
//! gc marks without the lock, then takes it exclusively, marks checkpoints that
//! appeared meanwhile, and sweeps under it; so no writer is ever between
//! "object exists" and "checkpoint published" while gc deletes. Belt and braces:
//! objects modified less than `grace` ago (default 1 h) are never deleted,
//! nor any written since the oldest live fork mount started (a fork daemon
//! keeps the data of files unlinked while open in objects no checkpoint names).
//! `STORE/gc.running` (exclusive, non-blocking `flock`) keeps two gcs apart.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Content, Error, IoContext, ObjectId, Result, Store};
use crate::sys::{self, Lock};

/// Held by a writer (snapshot, import, commit) until its checkpoint is published.
#[derive(Debug)]
pub struct WriteLease {
    _file: File,
}

/// What gc does.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Objects modified more recently than this are kept even when unreachable.
    pub grace: Duration,
    /// Report, delete nothing.
    pub dry_run: bool,
}

/// What gc found and did.
#[derive(Clone, Debug, Default)]
pub struct GcReport {
    pub checkpoints: usize,
    /// Objects reachable from a checkpoint (kept).
    pub reachable: usize,
    /// Unreachable objects removed (or that would be, with `dry_run`), with their stored sizes.
    pub removed: Vec<(ObjectId, u64)>,
    /// Unreachable objects kept because they are younger than the cutoff.
    pub young: usize,
    pub young_bytes: u64,
    /// Temp files of interrupted writes removed (or that would be).
    pub temps: Vec<(PathBuf, u64)>,
    /// Nothing older than this was kept for being young.
    pub cutoff: Option<SystemTime>,
    /// Small packs merged, and the packs they became (none with `dry_run`).
    pub packs_merged: (usize, usize),
    /// Unreachable objects left in packs whose rewrite would copy far more
    /// than dropping them frees ([`super::ObjectMaintenance::sweep`]), and their stored
    /// bytes; a later gc drops them once more of their pack is unreachable.
    /// With `dry_run`: those a run would leave.
    pub in_packs: usize,
    pub in_packs_bytes: u64,
}

/// A lock file inside the store, never through a symlink.
fn open_lock(path: &Path) -> Result<File> {
    use rustix::fs::OFlags;
    sys::open_nofollow(path, OFlags::RDWR | OFlags::CREATE, 0o644).at(path)
}

/// The directories gc deletes in, each a real directory (gc refuses a store
/// where one is a symlink: it would delete where it leads). Its deletions
/// reach them without following a symlink too, so one swapped in later
/// fails them.
fn check_no_symlinks(root: &Path) -> Result<()> {
    for rel in ["objects", "objects/packs", "checkpoints"] {
        let p = root.join(rel);
        if crate::sys::metadata_nofollow(&p).is_ok_and(|m| !m.is_dir()) {
            return Err(Error::Invalid(format!(
                "{} is not a directory (a symlink?); gc deletes only inside its own store: make it a directory of this store again",
                p.display()
            )));
        }
    }
    Ok(())
}

/// Take `kind` of lock on `f`, calling `on_wait` first if it would block.
fn lock_or_wait(f: &File, kind: Lock, path: &Path, on_wait: &dyn Fn()) -> Result<()> {
    if !sys::try_lock(f, kind).at(path)? {
        on_wait();
        sys::lock(f, kind).at(path)?;
    }
    Ok(())
}

impl Store {
    fn gc_lock_path(&self) -> PathBuf {
        self.root().join("gc.lock")
    }

    /// A shared lock that keeps gc from sweeping while the caller writes
    /// objects and publishes the checkpoint that names them. Waits (with a
    /// warning) while a gc sweeps.
    pub fn write_lease(&self) -> Result<WriteLease> {
        let path = self.gc_lock_path();
        let f = open_lock(&path)?;
        lock_or_wait(&f, Lock::Shared, &path, &|| {
            tracing::warn!(
                "waiting for `storefs gc` to finish its sweep ({})",
                path.display()
            )
        })?;
        // Objects gc removed before now must not be taken as present.
        self.backend().refresh().at(&self.root().join("objects"))?;
        Ok(WriteLease { _file: f })
    }

    /// Delete (or with `dry_run` list) objects no checkpoint reaches. `on_wait`
    /// is called if gc must wait for writers to publish.
    pub fn gc(&self, opts: &GcOptions, on_wait: &dyn Fn()) -> Result<GcReport> {
        check_no_symlinks(self.root())?;
        let running = self.root().join("gc.running");
        let run_lock = open_lock(&running)?;
        match sys::try_lock(&run_lock, Lock::Exclusive) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::Invalid(format!(
                    "another `storefs gc` is running on this store ({} is locked); wait for it",
                    running.display()
                )));
            }
            Err(e) => return Err(e).at(&running),
        }

        // Mark without the lock: writers keep going.
        let mut marked = HashSet::new();
        let mut done = HashSet::new();
        self.mark_new(&mut done, &mut marked)?;

        // Sweep under the exclusive lock: no writer is between writing an
        // object (or finding it present) and publishing its checkpoint.
        let path = self.gc_lock_path();
        let lock = open_lock(&path)?;
        lock_or_wait(&lock, Lock::Exclusive, &path, on_wait)?;
        self.mark_new(&mut done, &mut marked)?;

        let mut cutoff = SystemTime::now()
            .checked_sub(opts.grace)
            .unwrap_or(UNIX_EPOCH);
        for m in self.live_mounts()? {
            if m.mode == "rw" {
                let started = UNIX_EPOCH + Duration::from_nanos(m.started_ns.max(0) as u64);
                cutoff = cutoff.min(started);
            }
        }
        let mut report = GcReport {
            checkpoints: done.len(),
            reachable: marked.len(),
            cutoff: Some(cutoff),
            ..Default::default()
        };
        let ctx = self.root().join("objects");
        let mut doomed = Vec::new();
        for id in self.backend().list().at(&ctx)? {
            if marked.contains(&id) {
                continue;
            }
            let Some((size, mtime)) = self.backend().stat(&id).at(&ctx)? else {
                continue;
            };
            if mtime >= cutoff {
                report.young += 1;
                report.young_bytes += size;
                continue;
            }
            doomed.push((id, size));
        }
        let ids: Vec<ObjectId> = doomed.iter().map(|(id, _)| *id).collect();
        let gone = self.backend().sweep(&ids, opts.dry_run).at(&ctx)?;
        for (d, gone) in doomed.into_iter().zip(gone) {
            if gone {
                report.removed.push(d);
            } else {
                report.in_packs += 1;
                report.in_packs_bytes += d.1;
            }
        }
        if !opts.dry_run {
            // Objects still unmarked here are young ones gc keeps: they stay
            // where they are, so they keep their age.
            report.packs_merged = self
                .backend()
                .consolidate(&|id| marked.contains(id))
                .at(&ctx)?;
        }
        report.temps = self
            .backend()
            .remove_stale_temps(cutoff, opts.dry_run)
            .at(&ctx)?;
        drop(lock);
        drop(run_lock);
        Ok(report)
    }

    /// Mark everything reachable from checkpoints not in `done` yet.
    fn mark_new(&self, done: &mut HashSet<ObjectId>, marked: &mut HashSet<ObjectId>) -> Result<()> {
        let refuse = |what: String, e: Error| Error::GcBlind {
            what,
            detail: e.to_string(),
        };
        for ck in self.list_checkpoints()? {
            if !done.insert(ck) {
                continue;
            }
            let c = self
                .read_checkpoint(&ck)
                .map_err(|e| refuse(format!("checkpoint {ck}"), e))?;
            // A partial checkpoint (lazy mount) lacks objects by design:
            // keep what it has, do not require the rest.
            self.mark_reachable_inner(&c.root, marked, "gc", self.is_partial(&ck))
                .map_err(|(tid, e)| refuse(format!("checkpoint {ck}: tree {tid}"), e))?;
            // A commit's operation log (not a tree: marked, not walked).
            if let Some(ops) = c.source.ops {
                marked.insert(ops);
            }
        }
        Ok(())
    }

    /// Add every object reachable from the tree `root` (itself, its subtrees,
    /// file chunks) to `marked`. Trees already in `marked` are not read again
    /// (their subtrees are taken as marked). On failure, the tree that could
    /// not be read and why. Used by gc and by push.
    pub fn mark_reachable(
        &self,
        root: &ObjectId,
        marked: &mut HashSet<ObjectId>,
        context: &str,
    ) -> std::result::Result<(), (ObjectId, Error)> {
        self.mark_reachable_inner(root, marked, context, false)
    }

    /// As [`Store::mark_reachable`]; with `skip_missing`, a tree that is not
    /// in the store is passed over (a partial checkpoint's).
    fn mark_reachable_inner(
        &self,
        root: &ObjectId,
        marked: &mut HashSet<ObjectId>,
        context: &str,
        skip_missing: bool,
    ) -> std::result::Result<(), (ObjectId, Error)> {
        let mut stack = vec![*root];
        while let Some(tid) = stack.pop() {
            if !marked.insert(tid) {
                continue;
            }
            let tree = match self.get_tree(&tid, context) {
                Ok(t) => t,
                Err(Error::Missing { .. }) if skip_missing => continue,
                Err(e) => return Err((tid, e)),
            };
            for e in tree.entries {
                match e.content {
                    Content::Tree(sub) => stack.push(sub),
                    Content::Extents(ext) => marked.extend(ext.iter().filter_map(|x| x.id)),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Parse a duration: `0`, `90s`, `30m`, `1h`, `2d`, `1h30m` (jiff's friendly
/// format, units up to weeks; a bare number is seconds).
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let hint = "use e.g. 0, 90s, 30m, 1h, 2d (units up to weeks)";
    let span: jiff::Span = s
        .parse()
        .map_err(|_| format!("'{s}' is not a duration: {hint}"))?;
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|_| format!("'{s}' is not a fixed duration: {hint}"))?;
    Duration::try_from(signed).map_err(|_| format!("duration '{s}' is negative"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("1y").is_err());
        assert!(parse_duration("-1h").is_err());
        assert!(parse_duration("").is_err());
    }
}
