//! A streaming tar reader: 512-byte headers in, entries out, memory bounded
//! by [`MAX_HEADER_BYTES`] per entry whatever the archive's size.
//!
//! It reads what GNU tar 1.34 (src/list.c, src/sparse.c, src/xheader.c) and
//! libarchive (archive_read_support_format_tar.c) read:
//!
//! - V7, ustar (with the `prefix` field), old GNU and PAX headers; checksums
//!   computed with unsigned or with signed bytes (old Unix tars);
//! - numeric fields in octal (leading spaces, space/NUL terminated, `-`
//!   for negatives), base-256 (`0x80`/`0xff` first byte, two's complement),
//!   or all spaces/NULs (= 0);
//! - GNU `L`/`K` long names (a redundant one replaces the earlier), PAX `x`
//!   (next entry) and `g` (all following entries) records whose length
//!   prefix governs (values may hold newlines or any byte);
//! - sparse files: old GNU `S` entries with their extension blocks, and PAX
//!   GNU sparse formats 0.0, 0.1 and 1.0 (the real name and size are
//!   decoded; the map is handed on so holes stay holes);
//! - a V7 regular entry whose name ends in `/` is a directory; directories
//!   and (GNU/ustar) hard links have no data whatever their size field says.
//!
//! The stored data of the current entry is read through [`Read`] on the
//! reader; what is not read is skipped by the next [`TarReader::next_entry`].

use std::io::{self, Read};

/// Largest total of headers, GNU long names, PAX records and sparse maps
/// before one entry (also the bound on all global records together).
pub const MAX_HEADER_BYTES: u64 = 8 << 20;
/// Tar block size.
pub const BLOCK: usize = 512;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TarKind {
    File,
    Dir,
    Symlink,
    HardLink,
    CharDev,
    BlockDev,
    Fifo,
    /// Not kept (volume label, multi-volume continuation, unknown type): its
    /// data is skipped; the caller counts it.
    Other,
}

/// One data segment of a sparse file: `len` bytes at `offset` of the file,
/// stored one after the other in the entry's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub len: u64,
}

/// One entry, with its extension records applied.
#[derive(Clone, Debug)]
pub struct TarEntry {
    pub path: Vec<u8>,
    pub link: Vec<u8>,
    pub typeflag: u8,
    pub kind: TarKind,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime_ns: i64,
    pub ctime_ns: Option<i64>,
    /// The file's size (for a sparse file its real size, holes included).
    pub size: u64,
    /// Bytes of data the archive holds for this entry (what `Read` yields).
    pub stored: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// The entry's ACLs come only as `SCHILY.acl.*` text, which is not
    /// imported (the caller warns).
    pub acl_text_only: bool,
    pub comment: Option<Vec<u8>>,
    /// For a sparse file: its data segments in file order; the data holds
    /// them one after the other, everything else is a hole.
    pub sparse: Option<Vec<Segment>>,
}

/// Why reading failed.
#[derive(Debug)]
pub enum TarError {
    /// The stream below failed (decompression, I/O).
    Io(io::Error),
    /// The stream ends inside a header or an entry's data.
    Truncated(String),
    /// The first block is not a tar header.
    NotTar,
    /// The archive structure is broken (checksum, record syntax).
    Corrupt(String),
    /// One entry's header cannot be used (names the entry).
    BadEntry { entry: Vec<u8>, detail: String },
}

impl From<io::Error> for TarError {
    fn from(e: io::Error) -> Self {
        TarError::Io(e)
    }
}

type Res<T> = std::result::Result<T, TarError>;

/// Reads entries from a tar stream.
pub struct TarReader<R> {
    inner: R,
    /// Stored data of the current entry not yet read.
    remaining: u64,
    /// Padding after the current entry's data.
    padding: u64,
    /// Bytes consumed from `inner`.
    offset: u64,
    /// Global (`g`) records, in order.
    globals: Vec<(Vec<u8>, Vec<u8>)>,
    globals_bytes: u64,
    end_marker: bool,
    headers: u64,
    /// Entries returned so far.
    entries: u64,
    /// Budget used before the current entry.
    used: u64,
    /// A header block read ahead (after a hard link with a size), to be used next.
    pushed: Option<[u8; BLOCK]>,
}

/// One PAX record set, as (key, value) pairs in order.
type Records = Vec<(Vec<u8>, Vec<u8>)>;

impl<R: Read> TarReader<R> {
    pub fn new(inner: R) -> Self {
        TarReader {
            inner,
            remaining: 0,
            padding: 0,
            offset: 0,
            globals: Vec::new(),
            globals_bytes: 0,
            end_marker: false,
            headers: 0,
            entries: 0,
            used: 0,
            pushed: None,
        }
    }

    /// Was the end-of-archive marker (a zero block) seen?
    pub fn end_marker_seen(&self) -> bool {
        self.end_marker
    }

    /// Headers read so far (of any type).
    pub fn headers(&self) -> u64 {
        self.headers
    }

    /// Bytes of the tar stream consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The value of a global (`g`) record, the last one given.
    pub fn global(&self, key: &[u8]) -> Option<&[u8]> {
        self.globals
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_slice())
    }

    /// The stream, for reading what follows the archive.
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// Read up to a full block; the count read (less than 512 only at the end).
    fn read_block(&mut self, buf: &mut [u8; BLOCK]) -> io::Result<usize> {
        let mut n = 0;
        while n < BLOCK {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.offset += n as u64;
        Ok(n)
    }

    fn charge(&mut self, n: u64) -> Res<()> {
        self.used = self.used.saturating_add(n);
        if self.used > MAX_HEADER_BYTES {
            return Err(TarError::Corrupt(format!(
                "an entry's headers (long names, PAX records, sparse maps) exceed {} MiB",
                MAX_HEADER_BYTES >> 20
            )));
        }
        Ok(())
    }

    /// A header block: `None` at the clean end of the stream.
    fn header_block(&mut self) -> Res<Option<[u8; BLOCK]>> {
        if let Some(b) = self.pushed.take() {
            self.charge(BLOCK as u64)?;
            return Ok(Some(b));
        }
        let mut b = [0u8; BLOCK];
        let n = self.read_block(&mut b)?;
        if n == 0 {
            return Ok(None);
        }
        if n < BLOCK {
            if self.headers == 0 {
                return Err(TarError::NotTar);
            }
            return Err(TarError::Truncated(format!(
                "the archive ends inside a header (byte {} of the tar stream)",
                self.offset
            )));
        }
        self.charge(BLOCK as u64)?;
        Ok(Some(b))
    }

    /// The data of an extension entry (`x`, `g`, `L`, `K`), padding skipped.
    fn read_ext(&mut self, size: u64) -> Res<Vec<u8>> {
        self.charge(size)?;
        let mut data = Vec::with_capacity(size.min(1 << 16) as usize);
        (&mut self.inner).take(size).read_to_end(&mut data)?;
        self.offset += data.len() as u64;
        if (data.len() as u64) < size {
            return Err(TarError::Truncated(format!(
                "the archive ends inside an extended header (byte {} of the tar stream)",
                self.offset
            )));
        }
        self.skip_bytes(pad(size))?;
        Ok(data)
    }

    fn skip_bytes(&mut self, n: u64) -> Res<()> {
        let got = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
        self.offset += got;
        if got < n {
            return Err(TarError::Truncated(format!(
                "the archive ends inside an entry's data (byte {} of the tar stream)",
                self.offset
            )));
        }
        Ok(())
    }

    /// Skip what is left of the current entry's data and padding.
    fn finish_entry(&mut self) -> Res<()> {
        let n = self.remaining.saturating_add(self.padding);
        self.remaining = 0;
        self.padding = 0;
        self.skip_bytes(n)
    }

    /// The next entry, `None` at the end of the archive (marker or end of stream).
    pub fn next_entry(&mut self) -> Res<Option<TarEntry>> {
        self.finish_entry()?;
        if self.end_marker {
            return Ok(None);
        }
        self.used = 0;
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut local: Records = Vec::new();
        loop {
            let Some(h) = self.header_block()? else {
                return Ok(None);
            };
            if h.iter().all(|&b| b == 0) {
                self.end_marker = true;
                return Ok(None);
            }
            if !checksum_ok(&h) {
                if self.headers == 0 {
                    return Err(TarError::NotTar);
                }
                return Err(TarError::Corrupt(format!(
                    "bad header checksum at byte {} of the tar stream",
                    self.offset - BLOCK as u64
                )));
            }
            self.headers += 1;
            let typeflag = h[156];
            let name_field = field_str(&h[0..100]);
            let bad = |what: &str, e: String| TarError::BadEntry {
                entry: name_field.to_vec(),
                detail: format!("bad {what} field: {e}"),
            };
            match typeflag {
                b'x' | b'X' | b'g' | b'L' | b'K' => {
                    let size = numeric(&h[124..136]).map_err(|e| bad("size", e))?;
                    let size = u64::try_from(size).map_err(|_| bad("size", "negative".into()))?;
                    let data = self.read_ext(size)?;
                    match typeflag {
                        b'L' => long_name = Some(field_str(&data).to_vec()),
                        b'K' => long_link = Some(field_str(&data).to_vec()),
                        b'g' => {
                            let recs = self.records(&data)?;
                            self.globals_bytes += size;
                            if self.globals_bytes > MAX_HEADER_BYTES {
                                return Err(TarError::Corrupt(format!(
                                    "global PAX records exceed {} MiB",
                                    MAX_HEADER_BYTES >> 20
                                )));
                            }
                            for (k, v) in recs {
                                self.globals.retain(|(gk, _)| *gk != k);
                                if !v.is_empty() {
                                    self.globals.push((k, v));
                                }
                            }
                        }
                        _ => {
                            let recs = self.records(&data)?;
                            local.extend(recs);
                        }
                    }
                    continue;
                }
                _ => {}
            }
            let entry = self.entry(&h, long_name.take(), long_link.take(), &local)?;
            self.entries += 1;
            return Ok(Some(entry));
        }
    }

    /// Parse PAX records; a malformed record is an error (GNU tar refuses
    /// such archives; libarchive only warns).
    fn records(&mut self, data: &[u8]) -> Res<Records> {
        parse_records(data).map_err(|(_, why)| {
            TarError::Corrupt(format!(
                "malformed PAX extended header before byte {} of the tar stream: {why}",
                self.offset
            ))
        })
    }

    /// Build the entry of header `h` with the records that came before it.
    fn entry(
        &mut self,
        h: &[u8; BLOCK],
        long_name: Option<Vec<u8>>,
        long_link: Option<Vec<u8>>,
        local: &Records,
    ) -> Res<TarEntry> {
        let typeflag = h[156];
        let magic = &h[257..263];
        let ustar = magic == b"ustar\0";
        let oldgnu = &h[257..265] == b"ustar  \0";

        // Names.
        let mut path = match long_name {
            Some(n) => n,
            None => {
                let name = field_str(&h[0..100]);
                let prefix = if ustar { field_str(&h[345..500]) } else { b"" };
                if prefix.is_empty() {
                    name.to_vec()
                } else {
                    let mut p = prefix.to_vec();
                    p.push(b'/');
                    p.extend_from_slice(name);
                    p
                }
            }
        };
        let mut link = long_link.unwrap_or_else(|| field_str(&h[157..257]).to_vec());

        // Records: globals first, then this entry's (later ones win).
        let mut pax = Pax::default();
        let globals = std::mem::take(&mut self.globals);
        for (k, v) in globals.iter().chain(local.iter()) {
            pax.apply(k, v, &path)?;
        }
        self.globals = globals;
        if let Some(p) = pax.path.take() {
            path = p;
        }
        if let Some(l) = pax.linkpath.take() {
            link = l;
        }
        let name_for_errors = path.clone();
        let bad = |what: &str, e: String| TarError::BadEntry {
            entry: name_for_errors.clone(),
            detail: format!("bad {what} field: {e}"),
        };
        let unsigned = |v: i64, what: &str| -> Res<u64> {
            u64::try_from(v).map_err(|_| bad(what, format!("negative ({v})")))
        };

        let mut kind = match typeflag {
            b'0' | 0 | b'7' => TarKind::File,
            b'S' => TarKind::File,
            b'1' => TarKind::HardLink,
            b'2' => TarKind::Symlink,
            b'3' => TarKind::CharDev,
            b'4' => TarKind::BlockDev,
            b'5' | b'D' => TarKind::Dir,
            b'6' => TarKind::Fifo,
            _ => TarKind::Other,
        };
        // Entries that are skipped need only their size.
        let lenient = kind == TarKind::Other;
        let num = |f: &[u8], what: &str| -> Res<i64> {
            match numeric(f) {
                Ok(v) => Ok(v),
                Err(_) if lenient => Ok(0),
                Err(e) => Err(bad(what, e)),
            }
        };
        let mode = num(&h[100..108], "mode")?;
        let mode = (mode as u64 & 0o7777) as u32;
        let uid = match pax.uid {
            Some(u) => u,
            None => unsigned(num(&h[108..116], "uid")?, "uid")?,
        };
        let gid = match pax.gid {
            Some(g) => g,
            None => unsigned(num(&h[116..124], "gid")?, "gid")?,
        };
        let mtime_ns = match pax.mtime {
            Some(t) => t,
            None => {
                let s = num(&h[136..148], "mtime")?;
                s.checked_mul(1_000_000_000)
                    .ok_or_else(|| bad("mtime", format!("{s} is out of range")))?
            }
        };
        let header_size = match pax.size {
            Some(s) => s,
            None => unsigned(numeric(&h[124..136]).map_err(|e| bad("size", e))?, "size")?,
        };
        let (dev_major, dev_minor) = if ustar || oldgnu {
            let d = |f: &[u8], what: &str| -> Res<u32> {
                let v = num(f, what)?;
                u32::try_from(v).map_err(|_| bad(what, format!("{v} is out of range")))
            };
            match typeflag {
                b'3' | b'4' => (d(&h[329..337], "devmajor")?, d(&h[337..345], "devminor")?),
                _ => (0, 0),
            }
        } else {
            (0, 0)
        };

        // Stored data bytes.
        let mut stored = match typeflag {
            // Directories, symlinks, devices and fifos have no data whatever
            // their size field says: GNU tar extracts them reading none (its
            // listing skips a symlink's or fifo's size and then fails), and
            // libarchive reads none. A GNU dumpdir (`D`) has data.
            b'2' | b'3' | b'4' | b'5' | b'6' => 0,
            _ => header_size,
        };
        // Old archives: a regular entry named `dir/` is a directory.
        if matches!(typeflag, 0 | b'0' | b'7') && path.last() == Some(&b'/') && pax.sparse_none() {
            kind = TarKind::Dir;
            stored = 0;
        }
        let mut size = match kind {
            TarKind::File | TarKind::HardLink => stored,
            _ => 0,
        };

        // Sparse files.
        let mut sparse = None;
        if typeflag == b'S' {
            let realsize = numeric(&h[483..495]).map_err(|e| bad("realsize", e))?;
            let realsize = unsigned(realsize, "realsize")?;
            let mut map = Vec::new();
            old_sparse(&h[386..482], 4, &mut map).map_err(|e| bad("sparse map", e))?;
            let mut extended = h[482] != 0;
            while extended {
                let mut b = [0u8; BLOCK];
                if self.read_block(&mut b)? < BLOCK {
                    return Err(TarError::Truncated(format!(
                        "the archive ends inside the sparse map of '{}'",
                        crate::ingest::escape(&path)
                    )));
                }
                self.charge(BLOCK as u64)?;
                old_sparse(&b[..504], 21, &mut map).map_err(|e| bad("sparse map", e))?;
                extended = b[504] != 0;
            }
            size = realsize;
            sparse = Some(map);
        } else if pax.sparse_seen() {
            if kind != TarKind::File {
                return Err(bad(
                    "type",
                    "GNU sparse records on an entry that is not a regular file".into(),
                ));
            }
            if let Some(n) = pax.sparse_name.take() {
                path = n;
            }
            match (pax.major, pax.minor) {
                (Some(1), Some(0)) | (Some(1), None) => {
                    size = pax
                        .realsize
                        .or(pax.sparse_size)
                        .ok_or_else(|| bad("sparse", "no GNU.sparse.realsize".into()))?;
                    self.remaining = stored;
                    let (map, used) = self.sparse_10(&path)?;
                    stored -= used;
                    sparse = Some(map);
                }
                (None | Some(0), _) => {
                    size = pax
                        .sparse_size
                        .or(pax.realsize)
                        .ok_or_else(|| bad("sparse", "no GNU.sparse.size".into()))?;
                    sparse = Some(std::mem::take(&mut pax.map));
                }
                (Some(a), b) => {
                    return Err(bad(
                        "sparse",
                        format!(
                            "GNU sparse format {a}.{} is not known",
                            b.map_or("?".into(), |b| b.to_string())
                        ),
                    ));
                }
            }
        }
        if let Some(map) = &mut sparse {
            // GNU tar extracts a sparse file up to the end of its last map
            // segment (a final zero-length one marks a trailing hole), not
            // to the declared real size: do the same.
            let declared = size;
            if let Some(last) = map.last() {
                let end = last.offset.saturating_add(last.len);
                if end > declared {
                    return Err(bad(
                        "sparse map",
                        format!("it ends at {end}, past the size {declared}"),
                    ));
                }
                size = end;
            } else {
                size = 0;
            }
            map.retain(|s| s.len > 0);
            let mut end = 0u64;
            let mut total = 0u64;
            for s in map.iter() {
                let stop = s.offset.checked_add(s.len);
                if s.offset < end || stop.is_none_or(|e| e > size) {
                    return Err(bad(
                        "sparse map",
                        format!(
                            "segment {}+{} overlaps another, is out of order or lies past the size {size}",
                            s.offset, s.len
                        ),
                    ));
                }
                end = s.offset + s.len;
                total += s.len;
            }
            if total > stored {
                return Err(bad(
                    "sparse map",
                    format!("it maps {total} bytes of data but the entry holds {stored}"),
                ));
            }
        }
        if kind == TarKind::HardLink && stored > 0 && pax.size.is_none() {
            // GNU tar reads no data for a hard link ("links 0 size on tape");
            // some writers put the target's size there with no data, others
            // the data. As libarchive: when a header (or the end) follows
            // right away, there is no data; otherwise skip it.
            let mut b = [0u8; BLOCK];
            let n = self.read_block(&mut b)?;
            if n == 0 {
                stored = 0;
            } else if n < BLOCK {
                return Err(TarError::Truncated(format!(
                    "the archive ends inside the data of '{}'",
                    crate::ingest::escape(&path)
                )));
            } else if b.iter().all(|&x| x == 0) || checksum_ok(&b) {
                self.pushed = Some(b);
                stored = 0;
            } else {
                self.skip_bytes(stored + pad(stored) - BLOCK as u64)?;
                stored = 0;
            }
            size = 0;
        }
        self.remaining = stored;
        self.padding = pad(stored);
        Ok(TarEntry {
            path,
            link,
            typeflag,
            kind,
            mode,
            uid,
            gid,
            mtime_ns,
            ctime_ns: pax.ctime,
            size,
            stored,
            dev_major: pax.devmajor.unwrap_or(dev_major),
            dev_minor: pax.devminor.unwrap_or(dev_minor),
            // ACL text is lost only when the binary ACL xattrs are absent
            // (storefs's export writes both).
            acl_text_only: pax.acl_text
                && !pax
                    .xattrs
                    .iter()
                    .any(|(n, _)| n.starts_with(b"system.posix_acl_")),
            xattrs: pax.xattrs,
            comment: pax.comment,
            sparse,
        })
    }

    /// GNU sparse 1.0: the map as decimal lines at the start of the data,
    /// padded to a block. Returns the map and the data bytes it took.
    fn sparse_10(&mut self, path: &[u8]) -> Res<(Vec<Segment>, u64)> {
        let start = self.remaining;
        let mut buf: Vec<u8> = Vec::new();
        let mut pos = 0;
        let mut line = |me: &mut Self| -> Res<u64> {
            loop {
                if let Some(i) = buf[pos..].iter().position(|&b| b == b'\n') {
                    let l = &buf[pos..pos + i];
                    pos += i + 1;
                    // GNU tar refuses '#' lines (libarchive skips them).
                    return decimal(l).ok_or_else(|| TarError::BadEntry {
                        entry: path.to_vec(),
                        detail: format!(
                            "bad GNU sparse 1.0 map line '{}'",
                            crate::ingest::escape(l)
                        ),
                    });
                }
                if me.remaining < BLOCK as u64 {
                    return Err(TarError::BadEntry {
                        entry: path.to_vec(),
                        detail: "the GNU sparse 1.0 map runs past the entry's data".into(),
                    });
                }
                let mut b = [0u8; BLOCK];
                if me.read_block(&mut b)? < BLOCK {
                    return Err(TarError::Truncated(format!(
                        "the archive ends inside the sparse map of '{}'",
                        crate::ingest::escape(path)
                    )));
                }
                me.remaining -= BLOCK as u64;
                me.charge(BLOCK as u64)?;
                buf.extend_from_slice(&b);
            }
        };
        let n = line(self)?;
        let mut map = Vec::new();
        for _ in 0..n {
            let offset = line(self)?;
            let len = line(self)?;
            map.push(Segment { offset, len });
        }
        Ok((map, start - self.remaining))
    }
}

impl<R: Read> Read for TarReader<R> {
    /// The current entry's stored data; `Ok(0)` at its end (or where the
    /// stream ends early: the caller compares with [`TarEntry::stored`]).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(self.remaining.min(usize::MAX as u64) as usize);
        let n = loop {
            match self.inner.read(&mut buf[..want]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        self.remaining -= n as u64;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Padding after `n` bytes of data.
fn pad(n: u64) -> u64 {
    (BLOCK as u64 - n % BLOCK as u64) % BLOCK as u64
}

/// A NUL-terminated string field (the whole field when it has no NUL).
pub fn field_str(f: &[u8]) -> &[u8] {
    match f.iter().position(|&b| b == 0) {
        Some(i) => &f[..i],
        None => f,
    }
}

/// Is the header's checksum right, summed with unsigned or with signed bytes?
pub fn checksum_ok(h: &[u8; BLOCK]) -> bool {
    let field = &h[148..156];
    if field
        .iter()
        .any(|&c| c != b' ' && c != 0 && !(b'0'..=b'7').contains(&c))
    {
        return false;
    }
    let Ok(want) = numeric(field) else {
        return false;
    };
    let mut unsigned: i64 = 0;
    let mut signed: i64 = 0;
    for (i, &b) in h.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += i64::from(b);
        signed += i64::from(b as i8);
    }
    want == unsigned || want == signed
}

/// A numeric header field: octal (leading spaces, optional `-`, ended by
/// space or NUL), base-256 (first byte 0x80 or 0xff, big-endian two's
/// complement), or all spaces/NULs (0).
pub fn numeric(f: &[u8]) -> Result<i64, String> {
    match f.first() {
        Some(&m) if m & 0x80 != 0 => return base256(f),
        None => return Ok(0),
        _ => {}
    }
    let mut i = 0;
    while i < f.len() && (f[i] == b' ' || f[i] == b'\t') {
        i += 1;
    }
    let neg = f.get(i) == Some(&b'-');
    if neg {
        i += 1;
    }
    let start = i;
    let mut v: i64 = 0;
    while i < f.len() && (b'0'..=b'7').contains(&f[i]) {
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(i64::from(f[i] - b'0')))
            .ok_or_else(|| "octal number too large".to_string())?;
        i += 1;
    }
    if i < f.len() && f[i] != 0 && f[i] != b' ' {
        return Err(format!(
            "'{}' is not an octal number",
            crate::ingest::escape(f)
        ));
    }
    if i == start && neg {
        return Err("'-' without digits".into());
    }
    Ok(if neg { -v } else { v })
}

fn base256(f: &[u8]) -> Result<i64, String> {
    let negative = f[0] & 0x40 != 0;
    // The first byte's sign-extended low 7 bits, then the rest big-endian.
    let mut v: i128 = if negative {
        i128::from(f[0] as i8) // 0xff.. → -1 .., 0xc0 → -64
    } else {
        i128::from(f[0] & 0x7f)
    };
    for &b in &f[1..] {
        v = v
            .checked_mul(256)
            .and_then(|v| v.checked_add(i128::from(b)))
            .ok_or_else(|| "base-256 number too large".to_string())?;
        if v > i128::from(i64::MAX) || v < i128::from(i64::MIN) {
            return Err("base-256 number out of range".into());
        }
    }
    Ok(v as i64)
}

/// A decimal number (PAX values, sparse maps).
fn decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Old GNU sparse map entries (24 bytes each: offset, numbytes); an entry
/// whose offset field starts with NUL ends the map.
fn old_sparse(b: &[u8], count: usize, map: &mut Vec<Segment>) -> Result<(), String> {
    for i in 0..count {
        let e = &b[i * 24..i * 24 + 24];
        if e[0] == 0 {
            break;
        }
        let offset = numeric(&e[..12])?;
        let len = numeric(&e[12..])?;
        let (Ok(offset), Ok(len)) = (u64::try_from(offset), u64::try_from(len)) else {
            return Err("negative offset or length".into());
        };
        map.push(Segment { offset, len });
    }
    Ok(())
}

/// Parse `LEN KEY=VALUE\n` records; the length governs (values may hold
/// newlines, NULs, any byte). NUL padding after the last record is allowed.
/// On error, the records parsed so far and why.
pub fn parse_records(data: &[u8]) -> Result<Records, (Records, String)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let Some(sp) = rest.iter().position(|&b| b == b' ') else {
            return Err((out, "a record without a length".into()));
        };
        let Some(len) = decimal(&rest[..sp]) else {
            return Err((out, "a record's length is not a number".into()));
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len <= sp + 1 || len > rest.len() {
            return Err((out, format!("a record's length {len} is wrong")));
        }
        let rec = &rest[sp + 1..len];
        let Some(rec) = rec.strip_suffix(b"\n") else {
            return Err((out, "a record does not end in a newline".into()));
        };
        let Some(eq) = rec.iter().position(|&b| b == b'=') else {
            return Err((out, "a record without '='".into()));
        };
        out.push((rec[..eq].to_vec(), rec[eq + 1..].to_vec()));
        pos += len;
    }
    Ok(out)
}

/// The PAX records that matter, applied in order.
#[derive(Default)]
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
    uid: Option<u64>,
    gid: Option<u64>,
    mtime: Option<i64>,
    ctime: Option<i64>,
    devmajor: Option<u32>,
    devminor: Option<u32>,
    comment: Option<Vec<u8>>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// `SCHILY.acl.access`/`SCHILY.acl.default` (ACLs as text, what `tar
    /// --acls` writes): not decoded.
    acl_text: bool,
    // GNU sparse.
    sparse_any: bool,
    major: Option<u64>,
    minor: Option<u64>,
    sparse_name: Option<Vec<u8>>,
    realsize: Option<u64>,
    sparse_size: Option<u64>,
    map: Vec<Segment>,
    pending_offset: Option<u64>,
}

impl Pax {
    fn sparse_seen(&self) -> bool {
        self.sparse_any
    }

    fn sparse_none(&self) -> bool {
        !self.sparse_any
    }

    fn apply(&mut self, k: &[u8], v: &[u8], path: &[u8]) -> Res<()> {
        let bad = |detail: String| TarError::BadEntry {
            entry: path.to_vec(),
            detail,
        };
        let num = |v: &[u8]| {
            decimal(v).ok_or_else(|| {
                bad(format!(
                    "PAX record {}={} is not a number",
                    crate::ingest::escape(k),
                    crate::ingest::escape(v)
                ))
            })
        };
        let time = |v: &[u8]| {
            pax_time(v).ok_or_else(|| {
                bad(format!(
                    "PAX record {}={} is not a time",
                    crate::ingest::escape(k),
                    crate::ingest::escape(v)
                ))
            })
        };
        // An empty value (in `x`) removes what a global record set.
        let empty = v.is_empty();
        match k {
            b"path" => self.path = (!empty).then(|| v.to_vec()),
            b"linkpath" => self.linkpath = (!empty).then(|| v.to_vec()),
            b"size" => self.size = if empty { None } else { Some(num(v)?) },
            b"uid" => self.uid = if empty { None } else { Some(num(v)?) },
            b"gid" => self.gid = if empty { None } else { Some(num(v)?) },
            b"mtime" => self.mtime = if empty { None } else { Some(time(v)?) },
            b"ctime" => self.ctime = if empty { None } else { Some(time(v)?) },
            b"comment" => self.comment = (!empty).then(|| v.to_vec()),
            b"SCHILY.devmajor" if !empty => {
                self.devmajor = Some(u32::try_from(num(v)?).map_err(|_| bad("devmajor".into()))?)
            }
            b"SCHILY.devminor" if !empty => {
                self.devminor = Some(u32::try_from(num(v)?).map_err(|_| bad("devminor".into()))?)
            }
            _ => {
                if let Some(name) = k.strip_prefix(b"SCHILY.xattr.") {
                    self.xattrs.retain(|(n, _)| n.as_slice() != name);
                    self.xattrs.push((name.to_vec(), v.to_vec()));
                } else if k.starts_with(b"SCHILY.acl.") {
                    self.acl_text |= !empty;
                } else if let Some(g) = k.strip_prefix(b"GNU.sparse.") {
                    self.sparse_any = true;
                    match g {
                        b"major" => self.major = Some(num(v)?),
                        b"minor" => self.minor = Some(num(v)?),
                        b"name" => self.sparse_name = Some(v.to_vec()),
                        b"realsize" => self.realsize = Some(num(v)?),
                        b"size" => self.sparse_size = Some(num(v)?),
                        b"numblocks" => {
                            num(v)?;
                        }
                        b"offset" => self.pending_offset = Some(num(v)?),
                        b"numbytes" => {
                            let offset = self.pending_offset.take().ok_or_else(|| {
                                bad("GNU.sparse.numbytes without GNU.sparse.offset".into())
                            })?;
                            self.map.push(Segment {
                                offset,
                                len: num(v)?,
                            });
                        }
                        b"map" => {
                            self.map.clear();
                            if !empty {
                                let nums = v
                                    .split(|&b| b == b',')
                                    .map(num)
                                    .collect::<Res<Vec<u64>>>()?;
                                if nums.len() % 2 != 0 {
                                    return Err(bad(
                                        "GNU.sparse.map has an odd count of numbers".into()
                                    ));
                                }
                                self.map.extend(nums.chunks(2).map(|c| Segment {
                                    offset: c[0],
                                    len: c[1],
                                }));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// Parse a PAX time (`1700000000.123456789`, possibly negative) as ns.
pub fn pax_time(v: &[u8]) -> Option<i64> {
    let (neg, s) = match v.strip_prefix(b"-") {
        Some(r) => (true, r),
        None => (false, v),
    };
    // Trailing bytes after the number are ignored, as GNU tar does.
    let digits = |t: &[u8]| t.iter().take_while(|b| b.is_ascii_digit()).count();
    let n = digits(s);
    if n == 0 {
        return None;
    }
    let secs: i64 = std::str::from_utf8(&s[..n]).ok()?.parse().ok()?;
    let frac = match s[n..].strip_prefix(b".") {
        Some(f) => &f[..digits(f)],
        None => &[][..],
    };
    let mut ns: i64 = 0;
    for (i, b) in frac.iter().take(9).enumerate() {
        ns += i64::from(b - b'0') * 10i64.pow(8 - i as u32);
    }
    let t = secs.checked_mul(1_000_000_000)?.checked_add(ns)?;
    Some(if neg { -t } else { t })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &[u8], typeflag: u8, size: u64) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name);
        h[100..108].copy_from_slice(b"0000644\0");
        h[108..116].copy_from_slice(b"0000000\0");
        h[116..124].copy_from_slice(b"0000000\0");
        h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
        h[136..148].copy_from_slice(b"14000000000\0");
        h[156] = typeflag;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        fix(&mut h);
        h
    }

    fn fix(h: &mut [u8; BLOCK]) {
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }

    fn data(d: &[u8]) -> Vec<u8> {
        let mut v = d.to_vec();
        v.resize(d.len() + pad(d.len() as u64) as usize, 0);
        v
    }

    fn pax(recs: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in recs {
            let body = k.len() + v.len() + 3;
            let mut len = body + 1;
            while format!("{len}").len() + body != len {
                len += 1;
            }
            out.extend_from_slice(format!("{len} {k}=").as_bytes());
            out.extend_from_slice(v);
            out.push(b'\n');
        }
        out
    }

    fn entries(bytes: &[u8]) -> Res<Vec<(TarEntry, Vec<u8>)>> {
        let mut r = TarReader::new(bytes);
        let mut out = Vec::new();
        while let Some(e) = r.next_entry()? {
            let mut d = Vec::new();
            r.read_to_end(&mut d)?;
            out.push((e, d));
        }
        Ok(out)
    }

    #[test]
    fn numeric_fields() {
        assert_eq!(numeric(b"0000644\0"), Ok(0o644));
        assert_eq!(numeric(b"   644 \0"), Ok(0o644));
        assert_eq!(numeric(b"        "), Ok(0));
        assert_eq!(numeric(b"\0\0\0\0\0\0\0\0"), Ok(0));
        assert_eq!(numeric(b"-0000012\0"), Ok(-10));
        assert!(numeric(b"12x4\0").is_err());
        // Base-256, positive and negative.
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[8..].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        assert_eq!(numeric(&f), Ok(0x1234_5678));
        let neg = (-86_400i64).to_be_bytes();
        let mut f = [0xffu8; 12];
        f[4..].copy_from_slice(&neg);
        assert_eq!(numeric(&f), Ok(-86_400));
        let mut f = [0u8; 12];
        f[0] = 0x80;
        f[1] = 0x7f;
        assert!(numeric(&f).is_err(), "past i64");
    }

    #[test]
    fn checksums_unsigned_and_signed() {
        let mut h = header(b"f\xe9", b'0', 0);
        assert!(checksum_ok(&h));
        // Old Unix tars summed signed chars.
        h[148..156].copy_from_slice(b"        ");
        let sum: i64 = h.iter().map(|&b| i64::from(b as i8)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        assert!(checksum_ok(&h));
        h[0] = b'g';
        assert!(!checksum_ok(&h));
    }

    #[test]
    fn pax_records_length_governs() {
        let recs = pax(&[("SCHILY.xattr.user.b", b"a\nb=\0c\n"), ("path", b"x")]);
        let r = parse_records(&recs).unwrap();
        assert_eq!(r[0].1, b"a\nb=\0c\n");
        assert_eq!(r[1], (b"path".to_vec(), b"x".to_vec()));
        assert!(parse_records(b"99 path=x\n").is_err());
        assert!(parse_records(b"abc").is_err());
        let mut padded = recs.clone();
        padded.extend_from_slice(&[0; 20]);
        assert_eq!(parse_records(&padded).unwrap().len(), 2);
    }

    #[test]
    fn pax_times() {
        assert_eq!(pax_time(b"1.5"), Some(1_500_000_000));
        assert_eq!(pax_time(b"-1000.5"), Some(-1_000_500_000_000));
        assert_eq!(
            pax_time(b"1748089464.951928467a"),
            Some(1_748_089_464_951_928_467)
        );
        assert_eq!(pax_time(b"x"), None);
    }

    #[test]
    fn sparse_maps() {
        // PAX 0.1 and 1.0 maps; old GNU entries.
        let mut ar = Vec::new();
        let recs = pax(&[
            ("GNU.sparse.size", b"10000"),
            ("GNU.sparse.numblocks", b"1"),
            ("GNU.sparse.name", b"real"),
            ("GNU.sparse.map", b"4096,3,10000,0"),
        ]);
        ar.extend_from_slice(&header(b"PaxHeaders/x", b'x', recs.len() as u64));
        ar.extend(data(&recs));
        ar.extend_from_slice(&header(b"GNUSparseFile.1/real", b'0', 3));
        ar.extend(data(b"abc"));
        let recs = pax(&[
            ("GNU.sparse.major", b"1"),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.name", b"ten"),
            ("GNU.sparse.realsize", b"1099511627776"),
        ]);
        ar.extend_from_slice(&header(b"PaxHeaders/y", b'x', recs.len() as u64));
        ar.extend(data(&recs));
        let mut body = data(b"2\n0\n2\n1099511627774\n2\n");
        body.extend_from_slice(b"xyzw");
        ar.extend_from_slice(&header(b"GNUSparseFile.1/ten", b'0', body.len() as u64));
        ar.extend(data(&body));
        ar.extend_from_slice(&[0; 1024]);
        let e = entries(&ar).unwrap();
        assert_eq!(e[0].0.path, b"real");
        assert_eq!(e[0].0.size, 10000);
        assert_eq!(
            e[0].0.sparse.as_deref(),
            Some(
                &[Segment {
                    offset: 4096,
                    len: 3
                }][..]
            )
        );
        assert_eq!(e[0].1, b"abc");
        assert_eq!(e[1].0.path, b"ten");
        assert_eq!(e[1].0.size, 1 << 40);
        assert_eq!(e[1].0.sparse.as_ref().unwrap().len(), 2);
        assert_eq!(e[1].1, b"xyzw");
        // A map past the size is refused.
        let recs = pax(&[("GNU.sparse.size", b"10"), ("GNU.sparse.map", b"8,3")]);
        let mut ar = header(b"PaxHeaders/x", b'x', recs.len() as u64).to_vec();
        ar.extend(data(&recs));
        ar.extend_from_slice(&header(b"f", b'0', 3));
        ar.extend(data(b"abc"));
        assert!(matches!(entries(&ar), Err(TarError::BadEntry { .. })));
    }

    #[test]
    fn directories_and_links_have_no_data() {
        let mut ar = Vec::new();
        let mut v7 = header(b"old/", 0, 0);
        v7[257..265].fill(0);
        fix(&mut v7);
        ar.extend_from_slice(&v7);
        ar.extend_from_slice(&header(b"d", b'5', 4096));
        ar.extend_from_slice(&header(b"h", b'1', 5));
        ar.extend_from_slice(&header(b"sym", b'2', 5));
        ar.extend_from_slice(&header(b"fifo", b'6', 3));
        ar.extend_from_slice(&header(b"f", b'0', 2));
        ar.extend(data(b"hi"));
        let e = entries(&ar).unwrap();
        let kinds: Vec<_> = e.iter().map(|(e, _)| e.kind).collect();
        use TarKind::*;
        assert_eq!(kinds, [Dir, Dir, HardLink, Symlink, Fifo, File]);
        assert_eq!(e[5].1, b"hi");
    }

    #[test]
    fn globals_apply_to_all_following_entries() {
        let mut ar = Vec::new();
        let g = pax(&[("STOREFS.origin", b"/srv/x"), ("uid", b"7")]);
        ar.extend_from_slice(&header(b"g", b'g', g.len() as u64));
        ar.extend(data(&g));
        ar.extend_from_slice(&header(b"a", b'0', 0));
        ar.extend_from_slice(&header(b"b", b'0', 0));
        let mut r = TarReader::new(&ar[..]);
        assert_eq!(r.next_entry().unwrap().unwrap().uid, 7);
        assert_eq!(r.next_entry().unwrap().unwrap().uid, 7);
        assert!(r.next_entry().unwrap().is_none());
        assert!(!r.end_marker_seen());
        assert_eq!(r.global(b"STOREFS.origin"), Some(&b"/srv/x"[..]));
    }

    #[test]
    fn mangled_headers_never_panic() {
        // A small archive of every kind of header, bytes changed at random
        // (checksums fixed up so the fields are parsed): errors, no panics.
        let mut ar = Vec::new();
        let recs = pax(&[
            ("GNU.sparse.major", b"1"),
            ("GNU.sparse.minor", b"0"),
            ("GNU.sparse.realsize", b"9000"),
            ("size", b"1024"),
        ]);
        ar.extend_from_slice(&header(b"PaxHeaders/y", b'x', recs.len() as u64));
        ar.extend(data(&recs));
        ar.extend_from_slice(&header(b"s", b'0', 1024));
        ar.extend(data(b"1\n10\n5\n"));
        ar.extend(data(b"hello"));
        let mut s = header(b"old", b'S', 5);
        s[386..398].copy_from_slice(b"00000000010\0");
        s[398..410].copy_from_slice(b"00000000005\0");
        s[483..495].copy_from_slice(b"00000000100\0");
        fix(&mut s);
        ar.extend_from_slice(&s);
        ar.extend(data(b"world"));
        ar.extend_from_slice(&header(b"h", b'1', 7));
        ar.extend_from_slice(&header(b"././@LongLink", b'L', 3));
        ar.extend(data(b"abc"));
        ar.extend_from_slice(&header(b"d/", 0, 0));
        ar.extend_from_slice(&[0; 1024]);
        assert_eq!(entries(&ar).unwrap().len(), 4);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut m = ar.clone();
            for _ in 0..1 + rand() % 4 {
                let at = (rand() % m.len() as u64) as usize;
                m[at] = match rand() % 4 {
                    0 => 0,
                    1 => 0xff,
                    2 => b'7',
                    _ => rand() as u8,
                };
            }
            for b in 0..m.len() / BLOCK {
                let h: &mut [u8; BLOCK] = (&mut m[b * BLOCK..(b + 1) * BLOCK]).try_into().unwrap();
                if rand() % 2 == 0 && !h.iter().all(|&x| x == 0) {
                    fix(h);
                }
            }
            let _ = entries(&m);
        }
    }

    #[test]
    fn not_a_tar() {
        assert!(matches!(
            entries(b"# storefs\nsome text\n"),
            Err(TarError::NotTar)
        ));
        assert!(matches!(entries(&[7u8; 2048]), Err(TarError::NotTar)));
    }
}
