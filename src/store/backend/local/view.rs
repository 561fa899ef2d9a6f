//! Where published objects are: this process's view of the packs (the
//! multi-pack index and the tail of packs it does not cover), scans of the
//! packs directory, and look-ups through them.

use std::collections::{BTreeSet, HashSet};
use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use super::{Loc, LocalBackend, MidxView, PUBLISHED, Packs, read_dir_if_exists};
use crate::store::id::ObjectId;
use crate::store::midx::{self, MIDX, Midx};

impl LocalBackend {
    /// Where `id` is published as of the last scan, without rescanning.
    pub(super) fn find_published(&self, id: &ObjectId) -> io::Result<Option<Loc>> {
        let tail = |packs: &Packs| {
            packs.objects.get(id).map(|(pack, offset, len)| Loc {
                pack: pack.name.clone(),
                offset: *offset,
                len: *len,
                mtime: Some(pack.mtime),
                via_midx: false,
            })
        };
        let view = {
            let packs = self.packs.read();
            if let Some(loc) = tail(&packs) {
                return Ok(Some(loc));
            }
            packs.midx.clone()
        };
        let Some(view) = view else { return Ok(None) };
        match view.find(id) {
            Ok(found) => Ok(found.map(|e| Loc {
                pack: view.midx.names[e.pack as usize].clone(),
                offset: e.offset,
                len: e.len,
                mtime: None,
                via_midx: true,
            })),
            Err(e) => {
                // Set aside: its packs are in the tail now.
                self.midx_failed(&view, &e);
                Ok(tail(&self.packs.read()))
            }
        }
    }

    /// The multi-pack index `view` could not be read or was wrong: warn, stop
    /// using it (every pack is then read through its own index) and rescan.
    pub(super) fn midx_failed(&self, view: &MidxView, e: &io::Error) {
        tracing::warn!(error = %e, path = %self.packs_dir.join(MIDX).display(), "damaged multi-pack index; reading each pack's own index instead (the next snapshot, commit or gc rewrites it)");
        {
            let mut packs = self.packs.write();
            packs.bad_midx = Some(view.midx.identity);
            if packs
                .midx
                .as_ref()
                .is_some_and(|v| v.midx.identity == view.midx.identity)
            {
                packs.midx = None;
                packs.scanned = None;
            }
        }
        if let Err(e) = self.rescan() {
            tracing::warn!(error = %e, "rescanning the packs failed");
        }
    }

    /// The published pack holding `id`. On a miss the packs directory is
    /// rescanned when it changed since the last scan, or always with `force`.
    pub(super) fn lookup_pack(&self, id: &ObjectId, force: bool) -> io::Result<Option<Loc>> {
        if let Some(found) = self.find_published(id)? {
            return Ok(Some(found));
        }
        let scanned = self.packs.read().scanned;
        if scanned.is_none() {
            // This process's first look: quick, then in full only for a read.
            self.rescan_quick()?;
            if let Some(found) = self.find_published(id)? {
                return Ok(Some(found));
            }
            if !force {
                return Ok(None);
            }
        } else if !force && scanned == self.packs_dir_mtime()? {
            return Ok(None);
        }
        self.rescan()?;
        self.find_published(id)
    }

    /// The multi-pack index as it is now: the one in use when the file was
    /// not replaced, `None` when there is none or it was found damaged.
    pub(super) fn current_midx(&self) -> io::Result<Option<Arc<Midx>>> {
        let (current, bad) = {
            let packs = self.packs.read();
            (packs.midx.clone(), packs.bad_midx)
        };
        let midx_path = self.packs_dir.join(MIDX);
        match crate::sys::metadata_nofollow(&midx_path) {
            Ok(m) => {
                let identity = midx::identity(&m);
                if Some(identity) == bad {
                    Ok(None)
                } else if let Some(v) = current.filter(|v| v.midx.identity == identity) {
                    Ok(Some(v.midx.clone()))
                } else {
                    match Midx::open(&midx_path) {
                        Ok(m) => Ok(m.map(Arc::new)),
                        Err(e) => {
                            tracing::warn!(error = %e, path = %midx_path.display(), "unreadable multi-pack index; reading each pack's own index instead (the next snapshot, commit or gc rewrites it)");
                            self.packs.write().bad_midx = Some(identity);
                            Ok(None)
                        }
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The pack names in [`PUBLISHED`] (none when it is missing); lines that
    /// are not a pack name (a line torn by a crash) are skipped.
    pub(super) fn read_published(&self) -> io::Result<BTreeSet<String>> {
        let path = self.packs_dir.join(PUBLISHED);
        let text = match crate::store::read_store_file_capped(
            &path,
            MAX_PUBLISHED_LOG,
            "the published-packs log",
        ) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeSet::new()),
            Err(e) => {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
            }
        };
        Ok(text
            .split(|&b| b == b'\n')
            .filter_map(|l| std::str::from_utf8(l).ok())
            .filter(|n| midx::is_pack_name(n))
            .map(str::to_string)
            .collect())
    }

    /// A scan without listing the packs directory: the multi-pack index, its
    /// packs left unchecked until needed, and as the tail the packs
    /// [`PUBLISHED`] names that it does not cover (see [`LocalBackend`]).
    pub(super) fn rescan_quick(&self) -> io::Result<()> {
        let mtime = self.packs_dir_mtime()?;
        let midx = self.current_midx()?;
        // A log that is no regular file (a symlink or a FIFO planted there)
        // or too long: the hint is not used, the directory is listed.
        let logged = match self.read_published() {
            Ok(logged) => logged,
            Err(e) if e.kind() == ErrorKind::InvalidData => {
                tracing::warn!(error = %e, "unreadable log of published packs; listing the packs directory instead");
                return self.rescan();
            }
            Err(e) => return Err(e),
        };
        let covered: HashSet<&str> = midx
            .iter()
            .flat_map(|m| m.names.iter().map(String::as_str))
            .collect();
        let tail: BTreeSet<&String> = logged
            .iter()
            .filter(|n| !covered.contains(n.as_str()))
            .collect();
        let view = midx.map(|m| MidxView::new(m, &self.packs_dir, None));
        self.load_tail(tail, view, mtime, true)
    }

    /// Make `tail` (pack names) this process's tail: load the packs not yet
    /// loaded (those gone meanwhile are skipped), drop the others, and set
    /// the midx view and the scan state. After a `quick` scan, whose tail
    /// comes from the log, a pack loaded by an earlier scan is looked for
    /// again (gc may have removed it; the log does not say).
    pub(super) fn load_tail(
        &self,
        mut tail: BTreeSet<&String>,
        view: Option<MidxView>,
        mtime: Option<SystemTime>,
        quick: bool,
    ) -> io::Result<()> {
        let known: HashSet<String> = self.packs.read().by_name.keys().cloned().collect();
        if quick {
            for name in &known {
                if tail.contains(name) && !self.pack_path(name, "idx").try_exists()? {
                    tail.remove(name);
                }
            }
        }
        let mut loaded = Vec::new();
        for name in tail.iter().filter(|n| !known.contains(**n)) {
            match self.load_pack(name) {
                Ok(Some(p)) => loaded.push(p),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(pack = %name, error = %e, "unreadable pack index; its objects are treated as missing (run `storefs verify`)");
                }
            }
        }
        let mut packs = self.packs.write();
        for gone in known.iter().filter(|n| !tail.contains(n)) {
            packs.remove(gone);
        }
        for p in loaded {
            packs.add(p);
        }
        packs.midx = view.map(Arc::new);
        packs.scanned = mtime;
        packs.quick = quick;
        Ok(())
    }

    /// Bring the view of the packs up to date with the packs directory: the
    /// multi-pack index (reopened when it was replaced), which of its packs
    /// are still there, and the indexes of the packs it does not cover.
    pub(super) fn rescan(&self) -> io::Result<()> {
        // The time before the listing: a change during it triggers a rescan later.
        let mtime = self.packs_dir_mtime()?;
        // The midx before the listing: a pack it names is then either listed
        // or gone, and a pack published after it is listed (tail).
        let midx = self.current_midx()?;
        self.listings.fetch_add(1, Ordering::Relaxed);
        let mut names = BTreeSet::new();
        for (name, _) in read_dir_if_exists(&self.packs_dir)? {
            if let Some(n) = name.to_str().and_then(|n| n.strip_suffix(".idx"))
                && !n.starts_with('.')
            {
                names.insert(n.to_string());
            }
        }
        let covered: HashSet<&str> = midx
            .iter()
            .flat_map(|m| m.names.iter())
            .filter(|n| names.contains(*n))
            .map(String::as_str)
            .collect();
        let tail: BTreeSet<&String> = names
            .iter()
            .filter(|n| !covered.contains(n.as_str()))
            .collect();
        let view = midx.map(|m| MidxView::new(m, &self.packs_dir, Some(&names)));
        self.load_tail(tail, view, mtime, false)
    }
}

/// The most bytes [`PUBLISHED`] may hold when read: about a million pack
/// names (a line is 17 bytes); storefs's own log stays far below.
pub const MAX_PUBLISHED_LOG: u64 = 64 << 20;
