//! [`ObjectWrite`] for [`LocalBackend`]: writes into this process's open
//! pack, `sync` (one `syncfs`, then each pack published by its index), and
//! the multi-pack index rewritten as the tail of new packs grows.

use std::io::{self, ErrorKind, Write};
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::OFlags;

use super::{LocalBackend, PACKED_ALWAYS, PUBLISHED, Pack, Pending};
use crate::store::atomic::{fsync_dir, write_store_file};
use crate::store::backend::{ObjectRead, ObjectWrite};
use crate::store::id::ObjectId;
use crate::store::midx::{self, MIDX, Merge, MidxEntry};
use crate::store::pack::PackWriter;

/// A write rebuilds the multi-pack index once this many published packs are
/// outside it...
pub const MIDX_TAIL_PACKS: usize = 16;
/// ...or this many objects (so a big import does not leave a big index in
/// every reader's memory).
pub const MIDX_TAIL_OBJECTS: usize = 4096;
/// A snapshot asks [`ObjectWrite::wants_sync`](super::ObjectWrite::wants_sync) with this many objects
/// (half a batch of the walk's entries: a batch of small files publishes):
/// the local backend says yes at that many pending objects (about 100 bytes
/// each in memory until published), or at an eighth of the objects the
/// multi-pack index covers when that is more: each sync then rewrites the
/// index once for at least an eighth of its size in new objects, so a large
/// snapshot into a large store does not rewrite it over and over.
pub const SYNC_OBJECTS: usize = 16_384;

impl LocalBackend {
    pub(super) fn write_packed(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        let mut writing = self.writing.lock();
        if self.pending.lock().contains_key(id) {
            return Ok(());
        }
        let w = match &mut writing.current {
            Some(w) => w,
            None => writing.current.insert(PackWriter::create(&self.packs_dir)?),
        };
        let e = w.append(id, bytes)?;
        let file = w.file().clone();
        if w.is_full() {
            w.flush()?;
            let full = writing.current.take().expect("current pack");
            writing.full.push(full);
        }
        self.pending.lock().insert(
            *id,
            Pending {
                file,
                offset: e.offset,
                len: e.len,
            },
        );
        Ok(())
    }

    /// Publish `w` (its data already durable) and add its name to
    /// [`PUBLISHED`], where a quick scan finds it. A failure to log is only
    /// a warning: the pack is published, and full scans list it.
    pub(super) fn publish(&self, w: &mut PackWriter) -> io::Result<String> {
        let name = w.publish()?;
        let path = self.packs_dir.join(PUBLISHED);
        let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE;
        let logged = crate::sys::open_nofollow(&path, flags, 0o644)
            .and_then(|mut f| f.write_all(format!("{name}\n").as_bytes()));
        if let Err(e) = logged {
            tracing::warn!(path = %path.display(), error = %e, "cannot log a published pack; processes find it by listing the packs directory");
        }
        Ok(name)
    }

    /// After a new multi-pack index: [`PUBLISHED`] rewritten with the names of
    /// the tail only (the packs published after the index was written), so
    /// that it stays short. A line another process appends meanwhile may be
    /// lost: its pack is then found by full scans only, until the next index
    /// covers it (see [`LocalBackend`]).
    pub(super) fn trim_published(&self) {
        let mut text = String::new();
        {
            let packs = self.packs.read();
            let mut names: Vec<&String> = packs
                .by_name
                .keys()
                .filter(|n| midx::is_pack_name(n))
                .collect();
            names.sort();
            for n in names {
                text.push_str(n);
                text.push('\n');
            }
        }
        let path = self.packs_dir.join(PUBLISHED);
        if let Err(e) = write_store_file(&path, text.as_bytes(), 0o644, false) {
            tracing::warn!(path = %path.display(), error = %e, "cannot rewrite the log of published packs; it only grows longer");
        }
    }

    /// After a write: when the tail has grown past its bounds (or there is no
    /// multi-pack index yet), write a new one covering it. A failure is only
    /// a warning: the packs are published, just slower to find.
    pub(super) fn maybe_rebuild_midx(&self) {
        let (tail_packs, tail_objects, has_midx) = {
            let packs = self.packs.read();
            (
                packs
                    .by_name
                    .keys()
                    .filter(|n| midx::is_pack_name(n))
                    .count(),
                packs.objects.len(),
                packs.midx.is_some(),
            )
        };
        if tail_packs > 0
            && (tail_packs >= MIDX_TAIL_PACKS || tail_objects >= MIDX_TAIL_OBJECTS || !has_midx)
        {
            self.rebuild_midx_or_warn();
        }
    }

    /// [`Self::rebuild_midx`], a failure only warned about (then rescanned,
    /// so this process's view matches the directory).
    pub(super) fn rebuild_midx_or_warn(&self) {
        if let Err(e) = self.rebuild_midx() {
            tracing::warn!(error = %e, path = %self.packs_dir.join(MIDX).display(), "cannot write the multi-pack index; packs are read through their own indexes meanwhile");
            if let Err(e) = self.rescan() {
                tracing::warn!(error = %e, "rescanning the packs failed");
            }
        }
    }

    /// Write a new multi-pack index over every published pack: the old one's
    /// entries for packs still there, merged with the tail's. When the old
    /// one turns out damaged, from every pack's own index instead.
    pub(super) fn rebuild_midx(&self) -> io::Result<()> {
        self.rescan()?;
        let (view, tail) = {
            let packs = self.packs.read();
            let tail: Vec<Arc<Pack>> = packs
                .by_name
                .values()
                .filter(|p| midx::is_pack_name(&p.name))
                .cloned()
                .collect();
            (packs.midx.clone(), tail)
        };
        let mut names: Vec<String> = tail.iter().map(|p| p.name.clone()).collect();
        if let Some(v) = &view {
            names.extend(v.alive_names()?.into_iter().cloned());
        }
        names.sort();
        names.dedup();
        if names.is_empty() {
            // No packs left (gc removed them all): no index either.
            match crate::sys::remove_nofollow(&self.packs_dir.join(MIDX)) {
                Ok(()) => fsync_dir(&self.packs_dir)?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            // Nor a log of packs published since.
            match crate::sys::remove_nofollow(&self.packs_dir.join(PUBLISHED)) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            return self.rescan();
        }
        let index_of = |name: &str| names.binary_search_by(|n| n.as_str().cmp(name)).ok();
        let mut fresh: Vec<MidxEntry> = Vec::new();
        for p in &tail {
            let pack = index_of(&p.name).expect("listed") as u32;
            fresh.extend(p.entries.iter().map(|e| MidxEntry::of(e, pack)));
        }
        fresh.sort_by_key(|e| e.id);
        let merged = match &view {
            None => midx::write(
                &self.packs_dir,
                &names,
                &mut fresh.into_iter().map(Ok::<MidxEntry, io::Error>),
            ),
            Some(v) => {
                let mut remap: Vec<Option<u32>> = Vec::with_capacity(v.midx.names.len());
                for (i, n) in v.midx.names.iter().enumerate() {
                    remap.push(if v.alive(i)? {
                        index_of(n).map(|i| i as u32)
                    } else {
                        None
                    });
                }
                let old = v.midx.iter()?.filter_map(|r| match r {
                    Ok(e) => remap[e.pack as usize].map(|pack| Ok(MidxEntry { pack, ..e })),
                    Err(e) => Some(Err(e)),
                });
                let result = midx::write(
                    &self.packs_dir,
                    &names,
                    &mut Merge::new(old, fresh.into_iter()),
                );
                match result {
                    Err(e) if e.kind() == ErrorKind::InvalidData => {
                        tracing::warn!(error = %e, "damaged multi-pack index; rebuilding it from every pack's own index");
                        self.write_midx_from_packs(&names)
                    }
                    r => r,
                }
            }
        };
        merged?;
        self.rescan()?;
        self.trim_published();
        Ok(())
    }

    /// Write a multi-pack index over `names` (sorted) from their own indexes.
    pub(super) fn write_midx_from_packs(&self, names: &[String]) -> io::Result<()> {
        let mut entries = Vec::new();
        let mut kept = Vec::new();
        for name in names {
            if let Some(p) = self.load_pack(name)? {
                kept.push((p.name, p.entries));
            }
        }
        let names: Vec<String> = kept.iter().map(|(n, _)| n.clone()).collect();
        for (i, (_, es)) in kept.into_iter().enumerate() {
            entries.extend(es.iter().map(|e| MidxEntry::of(e, i as u32)));
        }
        entries.sort_by_key(|e| e.id);
        midx::write(
            &self.packs_dir,
            &names,
            &mut entries.into_iter().map(Ok::<MidxEntry, io::Error>),
        )
    }
}

impl ObjectWrite for LocalBackend {
    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        // Callers ask `contains` first; this catches another thread of this
        // process that wrote it since, without a look at the disk (a copy
        // published meanwhile, by another process or by this one's `sync`
        // into the multi-pack index, is written again: a duplicate costs
        // space, never a loss; a gc that merges the packs keeps one).
        if self.known_in_memory(id) {
            return Ok(());
        }
        self.write_packed(id, bytes)
    }

    /// Every object is written to a pack, and an object of at most
    /// [`PACKED_ALWAYS`] bytes (which compresses to at most
    /// [`PACK_OBJECT_MAX`], zstd's bound) was never written loose by any
    /// storefs since packs. It is looked up only among this process's
    /// pending objects and its view of the packs (the tail in memory, the
    /// multi-pack index through its sparse index and one small read), which
    /// the writer's lease refreshed
    /// ([`Store::write_lease`](crate::store::Store::write_lease)) and its own
    /// publishing keeps current. For each new small file of a snapshot that
    /// saves a negative look-up in a fan-out directory and an `fstat` of the
    /// packs directory. Missed, and written again: a small object a store
    /// from before packs holds loose, and one another process published
    /// since the lease (space only; a gc that merges packs keeps one copy).
    /// A larger one may be loose in a store written before 2026-12-05, and
    /// is looked for there too ([`ObjectRead::contains`]).
    fn contains_for_write(&self, id: &ObjectId, len: usize) -> io::Result<bool> {
        if len > PACKED_ALWAYS {
            return self.contains(id);
        }
        Ok(self.known_in_memory(id) || self.find_published(id)?.is_some())
    }

    fn wants_sync(&self, min_objects: usize) -> bool {
        let pending = self.pending.lock().len();
        let indexed = self.packs.read().midx.as_ref().map_or(0, |v| v.midx.len());
        pending >= min_objects.max((indexed / 8) as usize)
    }

    fn sync(&self) -> io::Result<()> {
        let _one = self.syncing.lock();
        let mut packs: Vec<PackWriter> = {
            let mut writing = self.writing.lock();
            // Under the lock: a reader of a pending object flushes only the
            // current writer (a full one was flushed when it filled).
            if let Some(w) = &mut writing.current {
                w.flush()?;
            }
            let mut v = std::mem::take(&mut writing.full);
            v.extend(writing.current.take());
            v
        };
        // Packs not published when this returns go back for the next sync.
        let requeue = |rest: Vec<PackWriter>| self.writing.lock().full.extend(rest);
        if !packs.is_empty() {
            // One syncfs makes every pending pack's data durable. A failure
            // is reported, not retried; all stays pending.
            let dir = crate::sys::open_dir_nofollow(&self.dir)?;
            if let Err(e) = rustix::fs::syncfs(&dir) {
                requeue(packs);
                return Err(e.into());
            }
        }
        let published_any = !packs.is_empty();
        while let Some(mut w) = packs.pop() {
            match self.publish(&mut w) {
                Ok(name) => {
                    let pack = Pack {
                        name,
                        mtime: SystemTime::now(),
                        entries: w.entries().to_vec(),
                    };
                    let mut pending = self.pending.lock();
                    let mut published = self.packs.write();
                    for e in &pack.entries {
                        pending.remove(&e.id);
                    }
                    published.add(pack);
                }
                Err(e) => {
                    packs.push(w);
                    requeue(packs);
                    return Err(e);
                }
            }
        }
        if published_any {
            self.maybe_rebuild_midx();
        }
        Ok(())
    }

    /// A process that has only scanned quickly so far scans quickly again
    /// (and checks again each pack of the multi-pack index it uses); one
    /// that listed the directory lists it again.
    fn refresh(&self) -> io::Result<()> {
        let (scanned, quick) = {
            let packs = self.packs.read();
            (packs.scanned, packs.quick)
        };
        if scanned.is_none() || quick {
            self.rescan_quick()
        } else {
            self.rescan()
        }
    }
}
