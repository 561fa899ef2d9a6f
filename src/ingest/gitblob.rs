//! Large git blobs read as a stream (issue 38: "git blobs streamed").
//!
//! gix reads an object whole, so `import-git` would hold a blob's bytes in
//! memory, once per blob in flight. A blob over [`STREAM_ABOVE`] is read
//! here instead, as a stream, from wherever git keeps it whole:
//! - its loose file (`objects/xx/…`: zlib of `blob SIZE\0` and the bytes);
//! - an entry of a pack that holds it as a base object, not as a delta
//!   (git keeps a blob over `core.bigFileThreshold`, 512 MiB by default,
//!   out of deltas when it packs, and streams it the same way).
//!
//! The bytes are hashed as they pass ([`Verified`]): what was stored is the
//! blob named, or the import fails. A blob git holds only as a delta (or in
//! an alternate object directory) is not found here and is read whole by
//! gix, up to [`super::git::MAX_GIT_BLOB`]. Memory: a 64 KiB read buffer and
//! zlib's window, whatever the blob's size.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use flate2::bufread::ZlibDecoder;

/// Blobs larger than this are streamed when git keeps them whole.
pub const STREAM_ABOVE: u64 = 16 << 20;

/// Where blob `id` was found.
pub(super) enum Found {
    /// Its bytes, `size` of them (checked by [`Verified::finish`]).
    Stream(Verified<Box<dyn Read>>),
    /// Only as a delta in a pack: its base is needed whole.
    Delta,
    /// Neither loose nor in a pack of this object directory.
    NotHere,
}

/// Open blob `id` of `size` bytes (by its header) in the object directory
/// `objects` as a stream.
pub(super) fn open(objects: &Path, id: &gix::ObjectId, size: u64) -> io::Result<Found> {
    let hex = id.to_hex().to_string();
    let loose = objects.join(&hex[..2]).join(&hex[2..]);
    match File::open(&loose) {
        Ok(f) => {
            let mut z = ZlibDecoder::new(BufReader::with_capacity(64 << 10, f));
            check_loose_header(&mut z, size).map_err(|e| at(&loose, e))?;
            return Ok(Found::Stream(Verified::new(Box::new(z), id, size)));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(at(&loose, e)),
    }
    let packs = objects.join("pack");
    let names = match std::fs::read_dir(&packs) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::NotHere),
        Err(e) => return Err(at(&packs, e)),
    };
    let mut delta = false;
    for ent in names {
        let idx_path = ent.map_err(|e| at(&packs, e))?.path();
        if idx_path.extension().is_none_or(|x| x != "idx") {
            continue;
        }
        let kind = gix::hash::Kind::Sha1;
        let index =
            gix::odb::pack::index::File::at(&idx_path, kind).map_err(|e| bad(&idx_path, e))?;
        let Some(i) = index.lookup(id) else { continue };
        let offset = index.pack_offset_at_index(i);
        let pack_path = idx_path.with_extension("pack");
        let pack =
            gix::odb::pack::data::File::at(&pack_path, kind).map_err(|e| bad(&pack_path, e))?;
        let entry = pack.entry(offset).map_err(|e| bad(&pack_path, e))?;
        if entry.header.is_delta() {
            delta = true;
            continue;
        }
        if entry.header.as_kind() != Some(gix::objs::Kind::Blob) || entry.decompressed_size != size
        {
            return Err(bad(
                &pack_path,
                format_args!("the entry of {id} is not a blob of {size} bytes"),
            ));
        }
        let mut f = File::open(&pack_path).map_err(|e| at(&pack_path, e))?;
        f.seek(SeekFrom::Start(entry.data_offset))
            .map_err(|e| at(&pack_path, e))?;
        let z = ZlibDecoder::new(BufReader::with_capacity(64 << 10, f));
        return Ok(Found::Stream(Verified::new(Box::new(z), id, size)));
    }
    Ok(if delta { Found::Delta } else { Found::NotHere })
}

/// Read a loose object's header (`blob SIZE\0`) and check it.
fn check_loose_header(z: &mut impl Read, size: u64) -> io::Result<()> {
    let mut header = Vec::with_capacity(32);
    let mut b = [0u8; 1];
    loop {
        z.read_exact(&mut b)?;
        if b[0] == 0 {
            break;
        }
        header.push(b[0]);
        if header.len() > 32 {
            break;
        }
    }
    if header != format!("blob {size}").as_bytes() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("its header is not 'blob {size}'"),
        ));
    }
    Ok(())
}

/// A blob's bytes, hashed as they are read.
pub(super) struct Verified<R> {
    inner: R,
    hasher: gix::hash::Hasher,
    id: gix::ObjectId,
    size: u64,
    read: u64,
}

impl<R: Read> Verified<R> {
    fn new(inner: R, id: &gix::ObjectId, size: u64) -> Self {
        let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
        hasher.update(format!("blob {size}\0").as_bytes());
        Verified {
            inner,
            hasher,
            id: *id,
            size,
            read: 0,
        }
    }

    /// After the reader gave its bytes: exactly `size` of them, no more,
    /// and they hash to the blob's id.
    pub(super) fn finish(mut self) -> io::Result<()> {
        let mut more = [0u8; 1];
        if self.read == self.size && self.inner.read(&mut more)? != 0 {
            self.read += 1;
        }
        if self.read > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "blob {} gave more than the {} bytes its header says",
                    self.id, self.size
                ),
            ));
        }
        if self.read < self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "blob {} gave {} bytes where its header says {}",
                    self.id, self.read, self.size
                ),
            ));
        }
        match self.hasher.try_finalize() {
            Ok(got) if got == self.id => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the bytes read for blob {} do not hash to its id", self.id),
            )),
        }
    }
}

impl<R: Read> Read for Verified<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Never past the size: a longer stream is caught by finish.
        let room = (self.size - self.read).min(buf.len() as u64) as usize;
        if room == 0 {
            return Ok(0);
        }
        let n = self.inner.read(&mut buf[..room])?;
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn bad(path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob_id(data: &[u8]) -> gix::ObjectId {
        let mut h = gix::hash::hasher(gix::hash::Kind::Sha1);
        h.update(format!("blob {}\0", data.len()).as_bytes());
        h.update(data);
        h.try_finalize().unwrap()
    }

    fn drain(mut r: Verified<&[u8]>) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        r.finish()?;
        Ok(out)
    }

    #[test]
    fn a_stream_is_checked_against_its_id_and_its_size() {
        let data = b"hello, streamed blob\n".as_slice();
        let id = blob_id(data);
        assert_eq!(
            drain(Verified::new(data, &id, data.len() as u64)).unwrap(),
            data
        );
        // Other bytes of the same length: not the blob named.
        let other = b"hello, STREAMED blob\n".as_slice();
        let e = drain(Verified::new(other, &id, data.len() as u64)).unwrap_err();
        assert!(e.to_string().contains("do not hash to its id"), "{e}");
        // Fewer bytes than the header says, or more.
        let e = drain(Verified::new(&data[..5], &id, data.len() as u64)).unwrap_err();
        assert!(e.to_string().contains("gave 5 bytes"), "{e}");
        let longer = [data, b"x"].concat();
        let e = drain(Verified::new(&longer[..], &id, data.len() as u64)).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
    }

    #[test]
    fn a_loose_header_must_name_a_blob_of_the_size() {
        assert!(check_loose_header(&mut &b"blob 12\0rest"[..], 12).is_ok());
        assert!(check_loose_header(&mut &b"tree 12\0rest"[..], 12).is_err());
        assert!(check_loose_header(&mut &b"blob 13\0rest"[..], 12).is_err());
        assert!(check_loose_header(&mut &[b'1'; 64][..], 12).is_err());
    }
}
