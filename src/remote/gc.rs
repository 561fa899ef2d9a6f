//! `storefs gc --remote NAME`: delete from a remote what no remote ref
//! reaches (docs/design.md, "Remote gc").
//!
//! Under the remote's gc lock (see [`super::lock`]: no push runs meanwhile,
//! and a gc does not start while one does):
//! 1. mark: every checkpoint the refs reach (records, parents), and every
//!    object their trees reach (trees read from this store when it has
//!    them, else from the remote's tree packs, read whole);
//! 2. sweep, sparing anything modified within `--grace` (a push by a
//!    storefs that takes no lock, a clock that disagrees): a pack none of
//!    whose objects is reached is deleted (index first, then pack); a pack
//!    whose unreached bytes pass [`REPACK_UNUSED`] of it is repacked (its
//!    reached objects, each verified, into new packs that are published
//!    before the old one is deleted); a pack without its index (a killed
//!    push) is deleted; so are unreached loose objects (written before packs),
//!    duplicates of packed ones, and unreached checkpoint records.
//!
//! Each reached object is kept in one place: the pack the index names for
//! it (the first by name); copies elsewhere count as unreached.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjPath;

use super::lock::{LockKind, now_secs};
use super::ops::{Moved, RecordSource};
use super::pack::{self, PackBuilder, PackKind};
use super::{PARALLEL, Remote, Result};
use crate::store::REPACK_UNUSED;
use crate::store::progress::SharedProgress;
use crate::store::{self, ObjectId, Store};

/// How a remote gc behaves.
#[derive(Clone, Debug)]
pub struct RemoteGcOptions {
    /// Say what would be deleted; delete and write nothing.
    pub dry_run: bool,
    /// Never delete or repack anything modified less than this long ago.
    pub grace: Duration,
    /// Told the objects to copy when repacking, advanced per object.
    pub progress: SharedProgress,
}

/// What a remote gc did (or, with `dry_run`, would do). Sizes are stored bytes.
#[derive(Clone, Debug, Default)]
pub struct RemoteGcReport {
    pub refs: usize,
    /// Checkpoints the refs reach.
    pub checkpoints: usize,
    /// Objects those reach.
    pub reachable: usize,
    /// Unreached bytes on the remote before: in packs, loose, in packs without index.
    pub unreachable_bytes: u64,
    /// Of those, what was deleted (by deleting or repacking packs, loose objects).
    pub reclaimed_bytes: u64,
    /// Packs deleted whole (nothing in them reached).
    pub packs_deleted: usize,
    /// Packs repacked, and the new packs their reached objects went into.
    pub packs_repacked: usize,
    pub packs_written: usize,
    /// Reached bytes copied into new packs.
    pub bytes_copied: u64,
    /// Packs without an index (killed pushes) deleted.
    pub incomplete_deleted: usize,
    pub loose_deleted: usize,
    pub records_deleted: usize,
    /// Unreached things left because they are younger than the grace period.
    pub young: usize,
    /// Unreached bytes left in packs kept (under [`REPACK_UNUSED`], or young).
    pub unreachable_kept: u64,
}

/// An object in a pack: id, offset, stored length.
type Range = (ObjectId, u64, u32);

/// A key directly under a listed directory.
struct Listed {
    key: String,
    /// Its name with the listing's suffix taken off.
    name: String,
    size: u64,
    /// Seconds since the epoch (the server's clock).
    modified: i64,
}

impl Listed {
    fn id(&self) -> Option<ObjectId> {
        ObjectId::from_hex(&self.name)
    }
}

impl Remote {
    /// Delete what no remote ref reaches (see the module documentation).
    pub fn gc(&self, store: &Store, opts: &RemoteGcOptions) -> Result<RemoteGcReport> {
        self.rt.block_on(async {
            let lock = self.lock_op(LockKind::Gc).await?;
            let r = self.gc_locked(store, opts).await;
            self.unlock_op(lock).await;
            r
        })
    }

    async fn gc_locked(&self, store: &Store, opts: &RemoteGcOptions) -> Result<RemoteGcReport> {
        let mut rep = RemoteGcReport::default();
        let cutoff = now_secs() - opts.grace.as_secs() as i64;
        let young = |modified: i64| modified > cutoff;

        // Mark: checkpoints.
        let mut queue = VecDeque::new();
        for r in self.list_dir("refs", "").await? {
            // A ref deleted since the listing (delete-ref takes no lock) is gone.
            if let Some(id) = self.read_ref_id_if_any(&r.name).await? {
                queue.push_back(id);
                rep.refs += 1;
            }
        }
        let mut checkpoints: HashMap<ObjectId, store::Checkpoint> = HashMap::new();
        let mut records = RecordSource::default();
        while let Some(id) = queue.pop_front() {
            if checkpoints.contains_key(&id) {
                continue;
            }
            let ckpt = if store.has_checkpoint(&id) {
                store.read_checkpoint(&id)?
            } else {
                records.get(self, store, id).await?.0
            };
            queue.extend(ckpt.parents.iter().copied());
            checkpoints.insert(id, ckpt);
        }
        rep.checkpoints = checkpoints.len();

        // Mark: objects, trees level by level.
        let (index, listing) = self.pack_index(store.root()).await?;
        let backend = store.backend().clone();
        let roots = checkpoints.iter().map(|(ck, c)| (c.root, *ck)).collect();
        let (mut reached, _) = self
            .walk_trees(&index, &backend, roots, false, &mut Moved::default())
            .await?;
        // Commits' operation logs (blobs, not walked).
        reached.extend(checkpoints.values().filter_map(|c| c.source.ops));
        rep.reachable = reached.len();

        // Sweep: packs.
        let published: HashSet<&str> = listing.published.iter().map(|p| p.stem.as_str()).collect();
        let modified: HashMap<&str, i64> = listing
            .keys
            .iter()
            .filter_map(|k| {
                Some((
                    k.key.strip_prefix("packs/")?.strip_suffix(".pack")?,
                    k.modified,
                ))
            })
            .collect();
        let mut delete_packs: Vec<String> = Vec::new();
        let mut repack: Vec<(u32, Vec<Range>)> = Vec::new();
        // Each pack's reachable objects (an object in two packs counts in
        // the one lookups give), in one pass over the index.
        let mut live: Vec<Vec<Range>> = vec![Vec::new(); index.packs.len()];
        for e in index.entries()? {
            let (id, l, first) = e?;
            if first && reached.contains(&id) {
                live[l.pack as usize].push((id, l.offset, l.len));
            }
        }
        for (i, (p, live)) in index.packs.iter().zip(live).enumerate() {
            let live_bytes: u64 = live.iter().map(|l| l.2 as u64 + pack::RECORD_HEADER).sum();
            let dead = p.size.saturating_sub(live_bytes);
            rep.unreachable_bytes += dead;
            if dead == 0 {
                continue;
            }
            if young(modified.get(p.stem.as_str()).copied().unwrap_or(i64::MAX)) {
                rep.young += 1;
                rep.unreachable_kept += dead;
            } else if live.is_empty() {
                delete_packs.push(p.stem.clone());
                rep.packs_deleted += 1;
                rep.reclaimed_bytes += dead;
            } else if dead as f64 > REPACK_UNUSED * p.size as f64 {
                repack.push((i as u32, live));
                rep.reclaimed_bytes += dead;
            } else {
                rep.unreachable_kept += dead;
            }
        }
        // Keys under packs/ that publish nothing: a pack without its index
        // (a killed push), an index without its pack, names not ours.
        let mut stray: Vec<String> = Vec::new();
        for k in &listing.keys {
            let name = k.key.trim_start_matches("packs/");
            let stem = name.trim_end_matches(".pack").trim_end_matches(".idx");
            if published.contains(stem) {
                continue;
            }
            rep.unreachable_bytes += k.size;
            if young(k.modified) {
                rep.young += 1;
            } else {
                stray.push(k.key.clone());
                rep.reclaimed_bytes += k.size;
                if name.ends_with(".pack") {
                    rep.incomplete_deleted += 1;
                }
            }
        }

        // Sweep: loose objects (written before packs) and records.
        let mut delete_keys: Vec<String> = Vec::new();
        for o in self.list_dir("objects", "").await? {
            let Some(id) = o.id() else { continue };
            if reached.contains(&id) && !index.contains(&id)? {
                continue;
            }
            rep.unreachable_bytes += o.size;
            if young(o.modified) {
                rep.young += 1;
            } else {
                delete_keys.push(o.key);
                rep.loose_deleted += 1;
                rep.reclaimed_bytes += o.size;
            }
        }
        let mut delete_records = Vec::new();
        for r in self.list_dir("checkpoints", ".json").await? {
            if r.id().is_none_or(|id| checkpoints.contains_key(&id)) {
                continue;
            }
            if young(r.modified) {
                rep.young += 1;
            } else {
                delete_records.push(r.key);
                rep.records_deleted += 1;
            }
        }
        rep.packs_repacked = repack.len();
        if opts.dry_run {
            rep.bytes_copied = repack
                .iter()
                .flat_map(|(_, l)| l.iter().map(|x| x.2 as u64))
                .sum();
            return Ok(rep);
        }

        // Repack: new packs published before the old ones go.
        opts.progress
            .set_total(repack.iter().map(|(_, l)| l.len() as u64).sum());
        let mut builders: HashMap<PackKind, PackBuilder> = HashMap::new();
        let mut built = Vec::new();
        for (p, live) in &repack {
            let info = &index.packs[*p as usize];
            let err = |what: String, e| self.backend_err(what, e);
            let (objs, _) =
                pack::read_objects(&self.objects, &info.stem, live, false, &err).await?;
            let objs = self.check_all(objs).await?;
            let b = builders
                .entry(info.kind)
                .or_insert_with(|| PackBuilder::new(info.kind));
            for (id, raw) in &objs {
                b.push(id, raw);
                rep.bytes_copied += raw.len() as u64;
                if b.is_full() {
                    built.push(std::mem::replace(b, PackBuilder::new(info.kind)).finish());
                }
            }
            opts.progress.advance(objs.len() as u64);
            delete_packs.push(info.stem.clone());
        }
        built.extend(
            builders
                .into_values()
                .filter(|b| !b.is_empty())
                .map(PackBuilder::finish),
        );
        rep.packs_written = built.len();
        let err = |what: String, e| self.backend_err(what, e);
        futures::stream::iter(built)
            .map(|b| pack::upload(&self.objects, b, &err))
            .buffer_unordered(4)
            .try_collect::<Vec<u64>>()
            .await?;

        // Delete: indexes first (a reader never sees an index without its pack).
        self.delete_all(delete_packs.iter().map(|s| pack::idx_key(s)).collect())
            .await?;
        let mut keys: Vec<String> = delete_packs.iter().map(|s| pack::pack_key(s)).collect();
        keys.extend(stray);
        keys.extend(delete_keys);
        keys.extend(delete_records);
        self.delete_all(keys).await?;
        Ok(rep)
    }

    /// Delete `keys`, several at once; gone already is fine.
    async fn delete_all(&self, keys: Vec<String>) -> Result<()> {
        futures::stream::iter(keys)
            .map(|key| async move {
                match self.objects.delete(&ObjPath::from(key.as_str())).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(self.backend_err(format!("deleting {key}"), e)),
                }
            })
            .buffer_unordered(PARALLEL)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Keys directly under `dir/` whose names end in `suffix`.
    async fn list_dir(&self, dir: &str, suffix: &str) -> Result<Vec<Listed>> {
        Ok(self
            .list_metas(dir)
            .await?
            .into_iter()
            .filter_map(|m| {
                let name = m.location.filename()?.strip_suffix(suffix)?.to_string();
                Some(Listed {
                    key: m.location.to_string(),
                    name,
                    size: m.size,
                    modified: m.last_modified.timestamp(),
                })
            })
            .collect())
    }
}
