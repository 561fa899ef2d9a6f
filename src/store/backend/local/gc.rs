//! [`ObjectMaintenance`] for [`LocalBackend`]: listing, quarantine, removal
//! (packs rewritten without what goes, where that pays), merging small
//! packs, and temp files left by crashes.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io::{self, ErrorKind};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::{LocalBackend, PACKS, Pack, read_dir_if_exists};
use crate::store::atomic::{fsync_dir, write_store_file};
use crate::store::backend::ObjectMaintenance;
use crate::store::id::ObjectId;
use crate::store::pack::{PACK_TARGET_SIZE, PackWriter};

/// gc's sweep rewrites a pack to drop unreachable objects when more than
/// this share of its bytes is unreachable, or when what it keeps is at most
/// [`REPACK_SMALL`]: a pack of large chunks is not copied whole to drop one.
/// `gc --remote` repacks a remote's packs by the same share.
pub const REPACK_UNUSED: f64 = 0.10;
/// What a rewrite may always copy.
pub const REPACK_SMALL: u64 = 4 << 20;

/// Whether dropping `doomed` from `pack` is worth its rewrite
/// ([`REPACK_UNUSED`], [`REPACK_SMALL`]).
fn worth_rewriting(pack: &Pack, doomed: &HashSet<ObjectId>) -> bool {
    let (mut dead, mut all) = (0u64, 0u64);
    for e in &pack.entries {
        all += u64::from(e.len);
        if doomed.contains(&e.id) {
            dead += u64::from(e.len);
        }
    }
    all - dead <= REPACK_SMALL || dead as f64 > REPACK_UNUSED * all as f64
}

/// gc merges small packs (under half of [`PACK_TARGET_SIZE`]) once there are
/// this many: every snapshot or commit publishes one, and each is two files
/// (and a directory entry every rescan lists).
pub const MERGE_PACKS: usize = 8;

impl LocalBackend {
    /// Every published pack (tail and midx), each as its own index describes
    /// it, one at a time (gc: consolidation).
    pub(super) fn each_pack(&self, f: &mut dyn FnMut(Arc<Pack>)) -> io::Result<()> {
        self.rescan()?;
        let (tail, view) = {
            let packs = self.packs.read();
            let tail: Vec<Arc<Pack>> = packs.by_name.values().cloned().collect();
            (tail, packs.midx.clone())
        };
        for p in tail {
            f(p);
        }
        if let Some(v) = view {
            for name in v.alive_names()? {
                match self.load_pack(name) {
                    Ok(Some(p)) => f(Arc::new(p)),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(pack = %name, error = %e, "unreadable pack index; left as it is");
                    }
                }
            }
        }
        Ok(())
    }

    /// Remove `ids`: loose files, and from every pack holding one (after a
    /// crash mid-repack an object can be in two), rewritten without them.
    /// With `thrifty` (gc's sweep), a pack is rewritten only where that pays:
    /// more than [`REPACK_UNUSED`] of its bytes go, or it keeps at most
    /// [`REPACK_SMALL`]; the others keep their objects (`false` for them).
    /// With `dry_run` (gc's only) nothing is removed or rewritten: `true`
    /// for what would be.
    pub(super) fn remove_from_packs(
        &self,
        ids: &[ObjectId],
        thrifty: bool,
        dry_run: bool,
    ) -> io::Result<Vec<bool>> {
        let mut out = vec![false; ids.len()];
        for (i, id) in ids.iter().enumerate() {
            let path = self.path_of(id);
            let gone = if dry_run {
                crate::sys::metadata_nofollow(&path).map(|_| ())
            } else {
                crate::sys::remove_nofollow(&path)
            };
            match gone {
                Ok(()) => out[i] = true,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.rescan()?;
        let doomed: HashSet<ObjectId> = ids.iter().copied().collect();
        let (mut affected, view) = {
            let packs = self.packs.read();
            let tail: Vec<Arc<Pack>> = packs
                .by_name
                .values()
                .filter(|p| p.entries.iter().any(|e| doomed.contains(&e.id)))
                .cloned()
                .collect();
            (tail, packs.midx.clone())
        };
        if let Some(v) = view {
            let mut names = BTreeSet::new();
            for id in ids {
                for e in v.midx.lookup(id)? {
                    if v.alive(e.pack as usize)? {
                        names.insert(v.midx.names[e.pack as usize].clone());
                    }
                }
            }
            for name in names {
                if let Some(p) = self.load_pack(&name)? {
                    affected.push(Arc::new(p));
                }
            }
        }
        let (rewrite, kept): (Vec<_>, Vec<_>) = affected
            .into_iter()
            .partition(|p| !thrifty || worth_rewriting(p, &doomed));
        for pack in &rewrite {
            if !dry_run {
                self.rewrite(std::slice::from_ref(pack), &doomed)?;
            }
            for (i, id) in ids.iter().enumerate() {
                if pack.entries.iter().any(|e| e.id == *id) {
                    out[i] = true;
                }
            }
        }
        // Still there, in a pack kept whole.
        for pack in &kept {
            for (i, id) in ids.iter().enumerate() {
                if pack.entries.iter().any(|e| e.id == *id) {
                    out[i] = false;
                }
            }
        }
        if !rewrite.is_empty() && !dry_run {
            self.rebuild_midx_or_warn();
        }
        Ok(out)
    }

    /// Write the objects of `packs` that are not in `doomed` (each once) into
    /// new packs, a new one whenever one is full, publish them, then delete
    /// the old packs: a crash leaves an object twice, never nowhere. Returns
    /// how many packs it wrote.
    pub(super) fn rewrite(
        &self,
        packs: &[Arc<Pack>],
        doomed: &HashSet<ObjectId>,
    ) -> io::Result<usize> {
        let mut written = 0;
        let mut current: Option<PackWriter> = None;
        let result = (|| {
            let mut seen = HashSet::new();
            for pack in packs {
                let mut old = None;
                for e in &pack.entries {
                    if doomed.contains(&e.id) || !seen.insert(e.id) {
                        continue;
                    }
                    let old = match &old {
                        Some(f) => f,
                        None => old.insert(self.open_pack(&pack.name)?),
                    };
                    let w = match &mut current {
                        Some(w) => w,
                        None => current.insert(PackWriter::create(&self.packs_dir)?),
                    };
                    w.append(&e.id, &old.read_entry(e.offset, e.len)?)?;
                    if w.is_full() {
                        w.sync_data()?;
                        self.publish(w)?;
                        current = None;
                        written += 1;
                    }
                }
            }
            if let Some(w) = &mut current {
                w.sync_data()?;
                self.publish(w)?;
                current = None;
                written += 1;
            }
            Ok::<(), io::Error>(())
        })();
        if let Err(e) = result {
            if let Some(w) = current {
                w.discard();
            }
            return Err(e);
        }
        for pack in packs {
            crate::sys::remove_nofollow(&self.pack_path(&pack.name, "idx"))?;
            self.files.lock().pop(&pack.name);
            match crate::sys::remove_nofollow(&self.pack_path(&pack.name, "pack")) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        fsync_dir(&self.packs_dir)?;
        Ok(written)
    }
}

impl ObjectMaintenance for LocalBackend {
    fn list(&self) -> io::Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        for (fan_name, is_dir) in read_dir_if_exists(&self.dir)? {
            let Some(prefix) = fan_name.to_str().filter(|s| s.len() == 2 && is_dir) else {
                continue;
            };
            for (obj, _) in crate::store::list_store_dir(&self.dir.join(&fan_name))? {
                if let Some(rest) = obj.to_str()
                    && let Some(id) = ObjectId::from_hex(&format!("{prefix}{rest}"))
                {
                    out.push(id);
                }
            }
        }
        self.rescan()?;
        let view = {
            let packs = self.packs.read();
            out.extend(packs.objects.keys());
            packs.midx.clone()
        };
        if let Some(v) = view {
            let mut midx_ids = Vec::new();
            let read = v.midx.iter()?.try_for_each(|e| {
                let e = e?;
                if v.alive(e.pack as usize)? {
                    midx_ids.push(e.id);
                }
                Ok::<(), io::Error>(())
            });
            match read {
                Ok(()) => out.extend(midx_ids),
                Err(e) => {
                    // Every pack is in the tail once it is set aside.
                    self.midx_failed(&v, &e);
                    out.extend(self.packs.read().objects.keys());
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>> {
        match crate::sys::metadata_nofollow(&self.path_of(id)) {
            Ok(m) => Ok(Some((m.len(), m.modified()?))),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let Some(loc) = self.lookup_pack(id, true)? else {
                    return Ok(None);
                };
                let mtime = match loc.mtime {
                    Some(t) => t,
                    None => match crate::sys::metadata_nofollow(&self.pack_path(&loc.pack, "pack"))
                    {
                        Ok(m) => m.modified()?,
                        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                        Err(e) => return Err(e),
                    },
                };
                Ok(Some((u64::from(loc.len), mtime)))
            }
            Err(e) => Err(e),
        }
    }

    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>> {
        let qdir = self.dir.with_file_name("quarantine");
        fs::create_dir_all(&qdir)?;
        let dest = qdir.join(id.to_hex());
        match crate::sys::rename_nofollow(&self.path_of(id), &dest) {
            Ok(()) => {
                fsync_dir(&qdir)?;
                return Ok(Some(dest));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Packed: copy its bytes out durably, then drop it from its pack.
        let Some(bytes) = self.read_packed(id)? else {
            return Ok(None);
        };
        write_store_file(&dest, &bytes, 0o444, true)?;
        self.remove_many(&[*id])?;
        Ok(Some(dest))
    }

    fn remove(&self, id: &ObjectId) -> io::Result<bool> {
        Ok(self.remove_many(&[*id])?[0])
    }

    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>> {
        self.remove_from_packs(ids, false, false)
    }

    fn sweep(&self, ids: &[ObjectId], dry_run: bool) -> io::Result<Vec<bool>> {
        self.remove_from_packs(ids, true, dry_run)
    }

    fn consolidate(&self, movable: &dyn Fn(&ObjectId) -> bool) -> io::Result<(usize, usize)> {
        let mut small: Vec<Arc<Pack>> = Vec::new();
        self.each_pack(&mut |p| {
            let bytes: u64 = p.entries.iter().map(|e| u64::from(e.len)).sum();
            if bytes < PACK_TARGET_SIZE / 2 && p.entries.iter().all(|e| movable(&e.id)) {
                small.push(p);
            }
        })?;
        if small.len() < MERGE_PACKS {
            return Ok((0, 0));
        }
        small.sort_by(|a, b| a.name.cmp(&b.name));
        let written = self.rewrite(&small, &HashSet::new())?;
        self.rebuild_midx_or_warn();
        Ok((small.len(), written))
    }

    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut out = Vec::new();
        let mut stale = |path: PathBuf, writer_gone: bool| -> io::Result<()> {
            let m = match crate::sys::metadata_nofollow(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            if !writer_gone && m.modified()? >= cutoff {
                return Ok(());
            }
            if !dry_run {
                match crate::sys::remove_nofollow(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
            out.push((path, m.len()));
            Ok(())
        };
        for (fan, is_dir) in read_dir_if_exists(&self.dir)? {
            if !is_dir {
                continue;
            }
            let packs = fan == PACKS;
            let fan_path = self.dir.join(&fan);
            for (name, _) in crate::store::list_store_dir(&fan_path)? {
                let Some(name) = name.to_str() else { continue };
                let temp = name.starts_with('.') && name.ends_with(".tmp");
                // A pack whose index was never written: an interrupted sync.
                let orphan = packs
                    && name
                        .strip_suffix(".pack")
                        .is_some_and(|n| !crate::sys::exists_nofollow(&self.pack_path(n, "idx")));
                if (temp && (packs || name.starts_with(".obj."))) || orphan {
                    // A temp file whose writer is gone is garbage whatever its age.
                    let gone = temp && crate::store::atomic::temp_writer_gone(name);
                    stale(fan_path.join(name), gone)?;
                }
            }
        }
        Ok(out)
    }
}
