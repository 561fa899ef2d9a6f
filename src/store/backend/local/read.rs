//! [`ObjectRead`] for [`LocalBackend`]: whole reads (pending, packed or
//! loose), look-ups, and where a partial read finds an object's bytes.

use std::fs::File;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::LocalBackend;
use crate::store::backend::{Got, ObjectRead, Stored, StoredFile};
use crate::store::id::ObjectId;
use crate::store::pack::read_entry;

impl LocalBackend {
    /// Where a pending object's record is in the pack being written (the
    /// pack file, offset, length), its bytes flushed from the writer's
    /// buffer so a read of the file finds them; `None` when `id` is not
    /// pending.
    fn pending_at(&self, id: &ObjectId) -> io::Result<Option<(Arc<File>, u64, u32)>> {
        let pending = self
            .pending
            .lock()
            .get(id)
            .map(|p| (p.file.clone(), p.offset, p.len));
        if let Some((file, ..)) = &pending
            && let Some(w) = &mut self.writing.lock().current
            && Arc::ptr_eq(w.file(), file)
        {
            w.flush()?;
        }
        Ok(pending)
    }

    /// Stored bytes of a published packed object; `None` when not in a pack.
    pub(super) fn read_packed(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        // Another try after a rescan: gc may have repacked it meanwhile, or
        // the multi-pack index was wrong.
        for _ in 0..3 {
            let Some(loc) = self.lookup_pack(id, true)? else {
                return Ok(None);
            };
            let f = match self.open_pack(&loc.pack) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    self.rescan()?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !loc.via_midx {
                return f.read_entry(loc.offset, loc.len).map(Some);
            }
            match f.read_record(id, loc.offset, loc.len)? {
                Some(bytes) => return Ok(Some(bytes)),
                None => {
                    let view = self.packs.read().midx.clone();
                    if let Some(v) = view {
                        let e = io::Error::new(
                            ErrorKind::InvalidData,
                            format!("its entry for {id} does not match pack {}", loc.pack),
                        );
                        self.midx_failed(&v, &e);
                    }
                }
            }
        }
        Ok(None)
    }
}

/// The most bytes a loose object's file may hold: the largest object
/// ([`crate::store::MAX_OBJECT_SIZE`]) stored, with room for zstd's worst
/// case and a frame table. A larger file is not storefs's and is not read.
pub const MAX_LOOSE_FILE: u64 = crate::store::MAX_OBJECT_SIZE + crate::store::MAX_OBJECT_SIZE / 64;

/// A loose object's file opened for reading, with its size: reached without
/// a symlink, a regular file ([`crate::store::open_store_file`], whose
/// `fstat` gives the size: no more calls than an open and a stat), and no
/// larger than [`MAX_LOOSE_FILE`]. Errors name the path.
fn open_loose(path: &Path) -> io::Result<(File, u64)> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let (f, len) = match crate::store::open_store_file(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(e),
        Err(e) => return Err(named(e)),
    };
    if len > MAX_LOOSE_FILE {
        return Err(named(io::Error::new(
            ErrorKind::InvalidData,
            format!(
                "holds {len} bytes, more than the {MAX_LOOSE_FILE} bytes a loose object may; not read"
            ),
        )));
    }
    Ok((f, len))
}

impl ObjectRead for LocalBackend {
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        // Read without holding the lock.
        if let Some((file, offset, len)) = self.pending_at(id)? {
            return read_entry(&file, offset, len).map(Some);
        }
        // Most objects are packed: a pack the view knows of is looked up in
        // memory before a loose file is tried (which costs a failed open for
        // every packed object).
        if self.find_published(id)?.is_some()
            && let Some(bytes) = self.read_packed(id)?
        {
            return Ok(Some(bytes));
        }
        // A loose object (written by a storefs before 2026-12-05 or before
        // packs), or a pack published since the view's last scan.
        let path = self.path_of(id);
        match open_loose(&path) {
            // Past the page cache when it does not hold the file: the object
            // is decompressed from this buffer and dropped, and what is
            // kept of it is the decompressed chunk (a cold `cat` of 256
            // MiB: 10% less of the daemon's CPU, none of it in page cache
            // bookkeeping for pages nobody reads again).
            Ok((f, len)) => {
                let len = usize::try_from(len).map_err(|_| io::Error::other("object too large"))?;
                crate::sys::read_cold(&f, 0, len).map(Some)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => self.read_packed(id),
            Err(e) => Err(e),
        }
    }

    fn read_for_use(&self, id: &ObjectId) -> io::Result<Option<Got>> {
        Ok(self.read(id)?.map(Got::Stored))
    }

    fn contains(&self, id: &ObjectId) -> io::Result<bool> {
        // Packs first (the view, then a rescan if the directory changed);
        // loose only then: written by a storefs from before 2026-12-05
        // (large) or before packs (any size).
        Ok(self.known_in_memory(id)
            || self.lookup_pack(id, false)?.is_some()
            || self.loose_exists(id)?)
    }

    /// An object where it lies: a range of its pack (the pack's shared
    /// descriptors), of the pack being written when it is pending (its
    /// record flushed from the writer's buffer first), or a loose file (its
    /// own descriptor).
    /// The pack's record header is not read here: a wrong location gives
    /// frames that fail their checks, and the caller then reads the object
    /// whole, which checks it ([`ObjectRead::read`]).
    fn open_stored(&self, id: &ObjectId) -> io::Result<Option<Stored>> {
        if let Some((file, offset, len)) = self.pending_at(id)? {
            return Ok(Some(Stored::File {
                file: StoredFile::Pending(file),
                offset,
                len: u64::from(len),
            }));
        }
        if let Some(loc) = self.find_published(id)? {
            match self.open_pack(&loc.pack) {
                Ok(pack) => {
                    return Ok(Some(Stored::File {
                        file: StoredFile::Pack(pack),
                        offset: loc.offset,
                        len: u64::from(loc.len),
                    }));
                }
                // Removed by gc since the view's scan: the whole read rescans.
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        match open_loose(&self.path_of(id)) {
            Ok((file, len)) => Ok(Some(Stored::File {
                file: StoredFile::Own(file),
                offset: 0,
                len,
            })),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                Ok(self.read_packed(id)?.map(Stored::Bytes))
            }
            Err(e) => Err(e),
        }
    }

    /// A loose file, or a range of a pack (published objects only).
    fn locate(&self, id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>> {
        let loose = self.path_of(id);
        if let Ok(m) = crate::sys::metadata_nofollow(&loose) {
            return Ok(Some((loose, 0, m.len())));
        }
        Ok(self.lookup_pack(id, true)?.map(|loc| {
            (
                self.pack_path(&loc.pack, "pack"),
                loc.offset,
                u64::from(loc.len),
            )
        }))
    }

    /// Everything is here: nothing to fetch ahead.
    fn prefetch(&self, _ids: &[ObjectId]) {}
}
