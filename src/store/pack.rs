//! Pack files: many objects in one file, so a snapshot of 20,000 small files
//! creates a few files instead of 20,000 (file creation, not hashing or
//! compression, dominated such a snapshot on ext4), and a 4 GiB file 64
//! instead of 16,000 (a cold random read of it then costs no chunk file's
//! directory block or inode).
//!
//! In `objects/packs/`:
//! - `NAME.pack`: records, each `id (32 bytes) | len (u32 LE) | len bytes` (the
//!   stored, compressed object). Self-describing, so an index can be rebuilt.
//! - `NAME.idx`: `b"SFIDX001"`, count (u64 LE), then `count` entries sorted by
//!   id, each `id (32) | offset (u64 LE) | len (u32 LE)` (offset of the
//!   object's bytes in the pack), then the sha256 of everything before it.
//!
//! A pack is published by its index: the pack's data is made durable and the
//! pack renamed to its name first, then the index is written (temp + fsync +
//! rename) and the directory fsynced. A pack without an index is an
//! interrupted write, never read, removed by gc after its grace period.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};

use super::atomic::{create_temp, fsync_dir, temp_name, write_store_file};
use super::id::ObjectId;

/// Objects whose stored (compressed) size is at most this are *small*: read
/// through the page cache, and always packed. Larger ones (chunks of large
/// files) were loose files before 2026-12-05 and are packed since; a pack
/// read of one goes past the page cache ([`PackFile::read_cold`]).
pub const PACK_OBJECT_MAX: usize = 64 * 1024;
/// A pack being written is closed at this size and a new one begun.
pub const PACK_TARGET_SIZE: u64 = 64 << 20;

const IDX_MAGIC: &[u8; 8] = b"SFIDX001";
const IDX_ENTRY: usize = 32 + 8 + 4;
const RECORD_HEADER: u64 = 32 + 4;

/// Where one object's stored bytes are in a pack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackEntry {
    pub id: ObjectId,
    pub offset: u64,
    pub len: u32,
}

/// The index file's bytes for `entries` (sorted here).
pub fn encode_index(entries: &mut [PackEntry]) -> Vec<u8> {
    entries.sort_by_key(|e| e.id);
    let mut out = Vec::with_capacity(16 + entries.len() * IDX_ENTRY + 32);
    out.extend_from_slice(IDX_MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries.iter() {
        out.extend_from_slice(&e.id.0);
        out.extend_from_slice(&e.offset.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The most bytes the index of a pack of `pack_len` bytes can need: one
/// entry per record, each record at least its header. A larger index is not
/// storefs's and is not read (a pack index is read whole).
pub fn max_index_len(pack_len: u64) -> u64 {
    let records = pack_len / RECORD_HEADER + 1;
    (16 + 32u64).saturating_add(records.saturating_mul(IDX_ENTRY as u64))
}

/// Parse an index file; `InvalidData` when it is not one or its checksum fails.
pub fn decode_index(bytes: &[u8]) -> io::Result<Vec<PackEntry>> {
    let bad =
        |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("pack index: {what}"));
    if bytes.len() < 16 + 32 || &bytes[..8] != IDX_MAGIC {
        return Err(bad("not a storefs pack index"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != sum {
        return Err(bad("checksum mismatch"));
    }
    let count = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    let entries = &body[16..];
    if count.checked_mul(IDX_ENTRY as u64) != Some(entries.len() as u64) {
        return Err(bad("length does not match its entry count"));
    }
    Ok(entries
        .chunks_exact(IDX_ENTRY)
        .map(|e| PackEntry {
            id: ObjectId(e[..32].try_into().expect("32 bytes")),
            offset: u64::from_le_bytes(e[32..40].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(e[40..44].try_into().expect("4 bytes")),
        })
        .collect())
}

/// A published pack open for reading, shared by a process's threads: reads
/// through the page cache, and past it for large objects the cache does not
/// hold, through a second descriptor opened with `O_DIRECT` on first use
/// (none where the file system refuses it, or the pack is gone by then).
pub struct PackFile {
    file: File,
    path: PathBuf,
    /// Its size when opened (a published pack never changes): every read
    /// is checked against it before a buffer is allocated.
    size: u64,
    direct: OnceLock<Option<File>>,
}

impl PackFile {
    /// Opened without following a symlink, and only when it is a regular
    /// file ([`crate::store::open_store_file`]).
    pub fn open(path: PathBuf) -> io::Result<PackFile> {
        let (file, size) = crate::store::open_store_file(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(PackFile {
            file,
            path,
            size,
            direct: OnceLock::new(),
        })
    }

    /// The descriptor through the page cache.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// `n` bytes at `at`, past the page cache unless it holds them
    /// ([`crate::sys::read_cold_via`]).
    pub fn read_cold(&self, at: u64, n: usize) -> io::Result<Vec<u8>> {
        within(&self.path, self.size, at, n)?;
        // The same file again, reached without a symlink (one swapped in
        // since the first open, or another file there, is not used).
        let direct = self.direct.get_or_init(|| {
            use rustix::fs::OFlags;
            let flags = OFlags::RDONLY | OFlags::DIRECT | OFlags::NONBLOCK;
            let d = crate::sys::open_nofollow(&self.path, flags, 0).ok()?;
            let (a, b) = (
                rustix::fs::fstat(&d).ok()?,
                rustix::fs::fstat(&self.file).ok()?,
            );
            (a.st_dev == b.st_dev && a.st_ino == b.st_ino).then_some(d)
        });
        match direct {
            Some(d) => crate::sys::read_cold_via(&self.file, d, at, n),
            None => crate::sys::read_plain(&self.file, at, n),
        }
    }

    /// One object's stored bytes, through the page cache for a small one
    /// ([`PACK_OBJECT_MAX`]) and past it for a large one.
    pub fn read_entry(&self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        if len as usize > PACK_OBJECT_MAX {
            return self.read_cold(offset, len as usize);
        }
        within(&self.path, self.size, offset, len as usize)?;
        crate::sys::read_plain(&self.file, offset, len as usize)
    }

    /// One object's stored bytes, checking first that the record's header
    /// names `id` and `len`; `None` when it does not (the caller's index is
    /// wrong). The header is read with the bytes, in one read.
    pub fn read_record(&self, id: &ObjectId, offset: u64, len: u32) -> io::Result<Option<Vec<u8>>> {
        let Some(start) = offset.checked_sub(RECORD_HEADER) else {
            return Ok(None);
        };
        // An entry of nearly 4 GiB: no such record (it would wrap).
        let Some(with_header) = len.checked_add(RECORD_HEADER as u32) else {
            return Ok(None);
        };
        let mut buf = match self.read_entry(start, with_header) {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        };
        if buf[..32] != id.0 || buf[32..36] != len.to_le_bytes() {
            return Ok(None);
        }
        buf.drain(..RECORD_HEADER as usize);
        Ok(Some(buf))
    }
}

/// Read one object's stored bytes from a pack being written (its own
/// descriptor: through the page cache, where the record was just written).
pub fn read_entry(file: &File, offset: u64, len: u32) -> io::Result<Vec<u8>> {
    within(
        Path::new("(pack being written)"),
        file.metadata()?.len(),
        offset,
        len as usize,
    )?;
    crate::sys::read_plain(file, offset, len as usize)
}

/// `n` bytes at `at` lie within a pack of `size` bytes; else an
/// `UnexpectedEof` error, before anything is allocated for them (an index
/// entry claiming 4 GiB of a small pack is a damaged or hostile entry).
fn within(path: &Path, size: u64, at: u64, n: usize) -> io::Result<()> {
    if at.checked_add(n as u64).is_some_and(|end| end <= size) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "pack {}: an entry of {n} bytes at offset {at} lies past its end ({size} bytes); its index is damaged",
            path.display()
        ),
    ))
}

/// A pack being written: a temp file in the packs directory that objects are
/// appended to, published by [`PackWriter::publish`].
pub struct PackWriter {
    dir: PathBuf,
    name: String,
    tmp: PathBuf,
    file: Arc<File>,
    len: u64,
    entries: Vec<PackEntry>,
    /// Records appended after the first `len - buf.len()` bytes, not yet
    /// written to the file: one `pwrite` per [`WRITE_BUFFER`] bytes instead of
    /// one per object (a snapshot of 300k small files spent 8% of its time in
    /// them). [`PackWriter::flush`] writes them; nothing reads them before.
    buf: Vec<u8>,
    /// The pack is under its final name (only its index is missing).
    renamed: bool,
}

/// Bytes of records a [`PackWriter`] holds before writing them.
const WRITE_BUFFER: usize = 1 << 20;

impl PackWriter {
    /// A new, empty pack in `dir` (created if missing).
    pub fn create(dir: &Path) -> io::Result<PackWriter> {
        if !crate::sys::is_dir_nofollow(dir) {
            fs::create_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                fsync_dir(parent)?;
            }
        }
        let mut rnd = [0u8; 8];
        crate::sys::random_bytes(&mut rnd)?;
        let name: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = dir.join(temp_name("pack"));
        let file = create_temp(&tmp, 0o444)?;
        Ok(PackWriter {
            dir: dir.to_path_buf(),
            name,
            tmp,
            file: Arc::new(file),
            len: 0,
            entries: Vec::new(),
            buf: Vec::new(),
            renamed: false,
        })
    }

    /// Append an object; where its bytes will be. They reach the file by
    /// [`flush`](Self::flush) (or once the buffer is full): read them only after.
    pub fn append(&mut self, id: &ObjectId, bytes: &[u8]) -> io::Result<PackEntry> {
        let len = u32::try_from(bytes.len()).map_err(io::Error::other)?;
        if self.buf.len() + RECORD_HEADER as usize + bytes.len() > WRITE_BUFFER {
            self.flush()?;
        }
        self.buf.extend_from_slice(&id.0);
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf.extend_from_slice(bytes);
        let entry = PackEntry {
            id: *id,
            offset: self.len + RECORD_HEADER,
            len,
        };
        self.len += RECORD_HEADER + u64::from(len);
        self.entries.push(entry);
        Ok(entry)
    }

    /// Write the buffered records to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let at = self.len - self.buf.len() as u64;
            self.file.write_all_at(&self.buf, at)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Write the buffered records and make the pack's data durable.
    pub fn sync_data(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }

    /// The pack file (records appended since the last flush are not in it yet).
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    pub fn is_full(&self) -> bool {
        self.len >= PACK_TARGET_SIZE
    }

    pub fn entries(&self) -> &[PackEntry] {
        &self.entries
    }

    /// Publish the pack. The caller has made its data durable (syncfs or
    /// fsync). Renames it, fsyncs the directory, writes the index durably.
    /// Safe to call again after a failure. Returns the pack's name.
    pub fn publish(&mut self) -> io::Result<String> {
        if !self.buf.is_empty() {
            // Its data would not be among what the caller made durable.
            return Err(io::Error::other(
                "internal error: a pack was published before its records were written",
            ));
        }
        if !self.renamed {
            crate::sys::rename_nofollow(&self.tmp, &self.dir.join(format!("{}.pack", self.name)))?;
            self.renamed = true;
            fsync_dir(&self.dir)?;
        }
        let idx = encode_index(&mut self.entries.clone());
        write_store_file(
            &self.dir.join(format!("{}.idx", self.name)),
            &idx,
            0o444,
            true,
        )?;
        Ok(self.name.clone())
    }

    /// Remove the unpublished pack (its objects were never published).
    pub fn discard(&self) {
        let path = if self.renamed {
            self.dir.join(format!("{}.pack", self.name))
        } else {
            self.tmp.clone()
        };
        let _ = crate::sys::remove_nofollow(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_round_trips_and_detects_damage() {
        let mut entries: Vec<PackEntry> = (0u8..5)
            .map(|i| PackEntry {
                id: ObjectId::of(&[i]),
                offset: u64::from(i) * 100,
                len: u32::from(i) + 7,
            })
            .collect();
        let bytes = encode_index(&mut entries);
        let back = decode_index(&bytes).unwrap();
        assert_eq!(back, entries);
        assert!(back.windows(2).all(|w| w[0].id < w[1].id), "sorted by id");
        for i in [0, 9, 20, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(decode_index(&bad).is_err(), "flipped byte {i} accepted");
        }
        assert!(decode_index(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn a_pack_is_opened_as_a_regular_file_and_read_past_the_cache_only_as_itself() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("packs");
        let mut w = PackWriter::create(&dir).unwrap();
        let big = vec![5u8; 4 * PACK_OBJECT_MAX];
        let e = w.append(&ObjectId::of(&big), &big).unwrap();
        w.flush().unwrap();
        let name = w.publish().unwrap();
        let path = dir.join(format!("{name}.pack"));
        // The descriptor past the page cache is the same file (ext4, xfs
        // and btrfs allow O_DIRECT; tmpfs does not, and then none is used).
        let pack = PackFile::open(path.clone()).unwrap();
        assert_eq!(pack.read_cold(e.offset, big.len()).unwrap(), big);
        if let Some(Some(d)) = pack.direct.get() {
            let (a, b) = (
                rustix::fs::fstat(d).unwrap(),
                rustix::fs::fstat(pack.file()).unwrap(),
            );
            assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
        }
        // Another file put there after the open is not read past the cache.
        let pack = PackFile::open(path.clone()).unwrap();
        let other = dir.join("other");
        fs::write(&other, vec![9u8; pack.size as usize]).unwrap();
        fs::rename(&other, &path).unwrap();
        assert_eq!(pack.read_cold(e.offset, big.len()).unwrap(), big);
        assert!(matches!(pack.direct.get(), Some(None)));
        // A symlink or a FIFO there is not opened at all.
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let e = PackFile::open(path.clone()).err().unwrap();
        assert!(e.to_string().contains("is a symlink"), "{e}");
    }

    #[test]
    fn an_entry_past_the_pack_end_is_refused_before_it_is_read() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("packs");
        let mut w = PackWriter::create(&dir).unwrap();
        let id = ObjectId::of(b"a");
        let a = w.append(&id, b"stored a").unwrap();
        w.flush().unwrap();
        let name = w.publish().unwrap();
        let pack = PackFile::open(dir.join(format!("{name}.pack"))).unwrap();
        assert_eq!(pack.read_entry(a.offset, a.len).unwrap(), b"stored a");
        // An index entry claiming 4 GiB (or 1 MiB, read past the page
        // cache) of a 44-byte pack: an error naming it, nothing allocated.
        for len in [0xFFFF_FFF0, 1 << 20, a.len + 1] {
            let e = pack.read_entry(a.offset, len).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
            assert!(
                e.to_string().contains("lies past its end (44 bytes)"),
                "{e}"
            );
            assert_eq!(pack.read_record(&id, a.offset, len).unwrap(), None);
        }
        let e = read_entry(pack.file(), u64::MAX - 2, 8).unwrap_err();
        assert!(e.to_string().contains("lies past its end"), "{e}");
    }

    #[test]
    fn records_are_readable_before_and_after_publish() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("packs");
        let mut w = PackWriter::create(&dir).unwrap();
        let a = w.append(&ObjectId::of(b"a"), b"stored a").unwrap();
        let b = w.append(&ObjectId::of(b"b"), b"stored bee").unwrap();
        // Buffered until flushed: not in the file, and not publishable.
        assert_eq!(w.file().metadata().unwrap().len(), 0);
        assert!(w.publish().is_err(), "published with buffered records");
        w.flush().unwrap();
        assert_eq!(
            read_entry(w.file(), b.offset, b.len).unwrap(),
            b"stored bee"
        );
        let name = w.publish().unwrap();
        let idx = decode_index(&fs::read(dir.join(format!("{name}.idx"))).unwrap()).unwrap();
        let pack = File::open(dir.join(format!("{name}.pack"))).unwrap();
        for e in idx {
            let want: &[u8] = if e == a { b"stored a" } else { b"stored bee" };
            assert_eq!(read_entry(&pack, e.offset, e.len).unwrap(), want);
        }
        // The record header names the object: the pack alone is enough.
        let mut head = [0u8; 32];
        pack.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(head, ObjectId::of(b"a").0);
    }
}
