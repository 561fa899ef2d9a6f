//! The multi-pack index: one file, `objects/packs/index.midx`, listing the
//! objects of many packs sorted by id, searched in place (a few `pread`s per
//! lookup) instead of loaded into memory. Every snapshot, import or commit
//! publishes a pack; without this file every process that opens the store read
//! every pack's index into a hash map, so opening grew with the number of
//! packs and a mount's memory with the number of objects.
//!
//! Format (version 1), all integers little-endian:
//!
//! ```text
//! header  := "SFMIDX01" | npacks (u32) | count (u64) | fanout: 256 × u64
//!            | npacks × name (16 ASCII bytes, sorted)
//!            | sha256 of the entries | sha256 of the header before it
//! entries := count × (id (32) | pack (u32, into the names) | len (u32) | offset (u64))
//! ```
//!
//! `fanout[b]` is the number of entries whose id's first byte is at most `b`.
//! Entries are sorted by id; an id may appear more than once (an object that a
//! crash left in two packs). The header's checksum is checked when the file is
//! opened; the entries' when the file is read whole (rebuild, `list`). A
//! lookup checks the record header in the pack (`id | len`, see
//! [`super::pack`]) before it trusts an entry.
//!
//! The file is only ever a cache over immutable, published packs: each pack
//! keeps its own `.idx`, which is what publishes it. A pack the file names
//! whose `.idx` is gone (gc removed it) is ignored; a published pack the file
//! does not name is read through its own `.idx`. So any complete midx file,
//! however old, gives right answers, and it is replaced atomically (temp file,
//! `fsync`, `rename`, `fsync` of the directory) with no lock.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use super::atomic::{create_temp, fsync_dir, temp_name};
use super::id::ObjectId;
use super::pack::PackEntry;

/// The file's name in the packs directory.
pub const MIDX: &str = "index.midx";
/// The length of a local pack's name (16 hex digits).
pub const NAME_LEN: usize = 16;

/// What kind of packs a midx file lists: its magic and its packs' names.
/// The format is the same otherwise.
pub struct Flavor {
    magic: &'static [u8; 8],
    /// Every name is this many ASCII bytes.
    name_len: usize,
    valid: fn(&str) -> bool,
}

/// The local store's packs (`objects/packs/`), named by 16 hex digits.
pub const LOCAL: Flavor = Flavor {
    magic: b"SFMIDX01",
    name_len: NAME_LEN,
    valid: is_pack_name,
};

impl Flavor {
    /// A flavor of its own, for packs named otherwise (a remote's, in the
    /// store's cache of their indexes).
    pub const fn new(magic: &'static [u8; 8], name_len: usize, valid: fn(&str) -> bool) -> Flavor {
        Flavor {
            magic,
            name_len,
            valid,
        }
    }
}

const ENTRY: usize = 32 + 4 + 4 + 8;
/// Entries a lookup reads at once: the sparse index keeps the id of one
/// entry in this many (2 bytes an object: 600 KiB for 300,000).
const STRIDE: u64 = 16;
/// The sparse index's ids at most (4 MiB); a larger file keeps one id in
/// a larger power of two entries.
const MAX_SPARSE: u64 = 1 << 17;

/// One id in how many entries the sparse index of a file of `count` keeps.
fn stride_for(count: u64) -> u64 {
    count.div_ceil(MAX_SPARSE).next_power_of_two().max(STRIDE)
}

/// One entry: object `id` is `len` bytes at `offset` in pack number `pack`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MidxEntry {
    pub id: ObjectId,
    pub pack: u32,
    pub offset: u64,
    pub len: u32,
}

impl MidxEntry {
    /// Pack entry `e`, in pack number `pack`.
    pub fn of(e: &PackEntry, pack: u32) -> MidxEntry {
        MidxEntry {
            id: e.id,
            pack,
            offset: e.offset,
            len: e.len,
        }
    }

    fn encode(&self, out: &mut [u8]) {
        out[..32].copy_from_slice(&self.id.0);
        out[32..36].copy_from_slice(&self.pack.to_le_bytes());
        out[36..40].copy_from_slice(&self.len.to_le_bytes());
        out[40..48].copy_from_slice(&self.offset.to_le_bytes());
    }

    fn decode(b: &[u8]) -> MidxEntry {
        MidxEntry {
            id: ObjectId(b[..32].try_into().expect("32 bytes")),
            pack: u32::from_le_bytes(b[32..36].try_into().expect("4 bytes")),
            len: u32::from_le_bytes(b[36..40].try_into().expect("4 bytes")),
            offset: u64::from_le_bytes(b[40..48].try_into().expect("8 bytes")),
        }
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("multi-pack index: {what}"))
}

/// Whether `name` can be listed in a midx (packs this store writes are named so).
pub fn is_pack_name(name: &str) -> bool {
    name.len() == NAME_LEN && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An open midx file: its header in memory (about 2 KiB plus 16 bytes a pack),
/// its entries on disk.
pub struct Midx {
    file: File,
    /// To tell a replaced file from this one.
    pub identity: Identity,
    pub names: Vec<String>,
    fanout: Vec<u64>,
    count: u64,
    entries_at: u64,
    entries_sum: [u8; 32],
    /// Per fanout bucket, read whole at its first lookup: the id of every
    /// `stride`-th entry, so a lookup searches in memory and reads one
    /// range of `stride` entries (one `pread`).
    sparse: Vec<OnceLock<Box<[ObjectId]>>>,
    stride: u64,
}

/// Device, inode, size and modification time of a midx file: a file written
/// later differs in one of them even when its inode number was reused.
pub type Identity = (u64, u64, u64, i64, i64);

pub fn identity(meta: &fs::Metadata) -> Identity {
    (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
    )
}

/// The most packs a multi-pack index may name (its header, read whole, is
/// then at most 64 MiB).
const MAX_PACKS: usize = 1 << 22;

fn header_len(flavor: &Flavor, npacks: usize) -> u64 {
    (8 + 4 + 8 + 256 * 8 + npacks * flavor.name_len + 32 + 32) as u64
}

impl Midx {
    /// Open `path`, a [`LOCAL`] midx; `None` when there is none.
    /// `InvalidData` when it is not a whole midx file (bad header, wrong
    /// length).
    pub fn open(path: &Path) -> io::Result<Option<Midx>> {
        Midx::open_as(path, &LOCAL)
    }

    /// [`Midx::open`] for a midx of `flavor`.
    pub fn open_as(path: &Path, flavor: &Flavor) -> io::Result<Option<Midx>> {
        // Without following a symlink, a regular file only (read in place,
        // by offset: its header is checked against its size below).
        let file = match crate::store::open_store_file(path) {
            Ok((f, _)) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())));
            }
        };
        let meta = file.metadata()?;
        let mut fixed = [0u8; 20];
        file.read_exact_at(&mut fixed, 0)
            .map_err(|_| bad("shorter than its header"))?;
        if &fixed[..8] != flavor.magic {
            return Err(bad("not a storefs multi-pack index"));
        }
        let npacks = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes")) as usize;
        let count = u64::from_le_bytes(fixed[12..20].try_into().expect("8 bytes"));
        // Its header is read whole: no more pack names than a store has
        // packs (a million and more), whatever the file's size says.
        if npacks > MAX_PACKS {
            return Err(bad("more packs than a multi-pack index may name"));
        }
        let hlen = header_len(flavor, npacks);
        if count
            .checked_mul(ENTRY as u64)
            .and_then(|n| n.checked_add(hlen))
            != Some(meta.len())
        {
            return Err(bad("length does not match its header"));
        }
        let mut header = vec![0u8; hlen as usize];
        file.read_exact_at(&mut header, 0)?;
        let (body, sum) = header.split_at(header.len() - 32);
        if Sha256::digest(body).as_slice() != sum {
            return Err(bad("header checksum mismatch"));
        }
        let mut at = 20;
        let fanout: Vec<u64> = (0..256)
            .map(|i| {
                let o = at + i * 8;
                u64::from_le_bytes(body[o..o + 8].try_into().expect("8 bytes"))
            })
            .collect();
        at += 256 * 8;
        if fanout.windows(2).any(|w| w[0] > w[1]) || fanout[255] != count {
            return Err(bad("fanout table out of order"));
        }
        let mut names = Vec::with_capacity(npacks);
        let len = flavor.name_len;
        for i in 0..npacks {
            match std::str::from_utf8(&body[at + i * len..at + (i + 1) * len]) {
                Ok(s) if (flavor.valid)(s) => names.push(s.to_string()),
                _ => return Err(bad("bad pack name")),
            }
        }
        at += npacks * len;
        let entries_sum = body[at..at + 32].try_into().expect("32 bytes");
        Ok(Some(Midx {
            file,
            identity: identity(&meta),
            names,
            fanout,
            count,
            entries_at: hlen,
            entries_sum,
            sparse: (0..256).map(|_| OnceLock::new()).collect(),
            stride: stride_for(count),
        }))
    }

    /// The entries (objects) it lists.
    pub fn len(&self) -> u64 {
        self.count
    }

    fn read_entries(&self, from: u64, to: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; ((to - from) as usize) * ENTRY];
        self.file
            .read_exact_at(&mut buf, self.entries_at + from * ENTRY as u64)?;
        Ok(buf)
    }

    /// Bucket `b`'s sparse index: the id of its entries `lo`, `lo + stride`,
    /// … (read whole the first time).
    fn sparse(&self, b: usize, lo: u64, hi: u64) -> io::Result<&[ObjectId]> {
        if let Some(ids) = self.sparse[b].get() {
            return Ok(ids);
        }
        let buf = self.read_entries(lo, hi)?;
        let ids: Box<[ObjectId]> = buf
            .chunks_exact(ENTRY)
            .step_by(self.stride as usize)
            .map(|e| MidxEntry::decode(e).id)
            .collect();
        // Another thread may have set it meanwhile: the same ids.
        Ok(self.sparse[b].get_or_init(|| ids))
    }

    /// Every entry for `id` (usually none or one), in file order.
    pub fn lookup(&self, id: &ObjectId) -> io::Result<Vec<MidxEntry>> {
        let b = id.0[0] as usize;
        let lo = if b == 0 { 0 } else { self.fanout[b - 1] };
        let hi = self.fanout[b];
        let mut from = lo;
        if hi - lo > self.stride {
            // Entries up to `lo + (k - 1) * stride` are below `id`, and the
            // one at `lo + k * stride` (if any) is not: the first entry not
            // below `id` is in the `stride` entries after the former.
            let k = self.sparse(b, lo, hi)?.partition_point(|x| x < id) as u64;
            if k > 0 {
                from = lo + (k - 1) * self.stride + 1;
            }
        }
        // Equal ids can run past a range: read on while they match.
        let mut out = Vec::new();
        loop {
            let to = (from + self.stride).min(hi);
            if from >= to {
                return Ok(out);
            }
            let buf = self.read_entries(from, to)?;
            let entries: Vec<&[u8]> = buf.chunks_exact(ENTRY).collect();
            // The first entry not below `id`, by its id's bytes (sorted).
            let first = entries.partition_point(|e| e[..32] < id.0[..]);
            for e in &entries[first..] {
                if e[..32] != id.0[..] {
                    return Ok(out);
                }
                out.push(MidxEntry::decode(e));
            }
            from = to;
        }
    }

    /// Every entry in order, read in large blocks; the entries' checksum is
    /// checked after the last one, and a mismatch is the iterator's last item
    /// (an `InvalidData` error).
    pub fn iter(&self) -> io::Result<MidxIter<'_>> {
        let mut r = BufReader::with_capacity(1 << 20, &self.file);
        r.seek(SeekFrom::Start(self.entries_at))?;
        Ok(MidxIter {
            midx: self,
            r,
            left: self.count,
            hasher: Sha256::new(),
            prev: None,
            done: false,
        })
    }
}

/// See [`Midx::iter`].
pub struct MidxIter<'a> {
    midx: &'a Midx,
    r: BufReader<&'a File>,
    left: u64,
    hasher: Sha256,
    prev: Option<ObjectId>,
    done: bool,
}

impl Iterator for MidxIter<'_> {
    type Item = io::Result<MidxEntry>;

    fn next(&mut self) -> Option<io::Result<MidxEntry>> {
        if self.done {
            return None;
        }
        if self.left == 0 {
            self.done = true;
            let sum = std::mem::take(&mut self.hasher).finalize();
            return (sum.as_slice() != self.midx.entries_sum)
                .then(|| Err(bad("entries checksum mismatch")));
        }
        let mut buf = [0u8; ENTRY];
        if let Err(e) = self.r.read_exact(&mut buf) {
            self.done = true;
            return Some(Err(e));
        }
        self.left -= 1;
        self.hasher.update(buf);
        let e = MidxEntry::decode(&buf);
        if self.prev.is_some_and(|p| p > e.id) || e.pack as usize >= self.midx.names.len() {
            self.done = true;
            return Some(Err(bad("entries out of order or naming no pack")));
        }
        self.prev = Some(e.id);
        Some(Ok(e))
    }
}

/// Write a midx file at `dir/index.midx` over `names` (sorted, each
/// [`is_pack_name`]) from `entries` (sorted by id, `pack` indexing `names`),
/// atomically and durably. A crash leaves at most a temp file
/// (`.index.midx.*.tmp`), which readers never open and gc removes.
pub fn write(
    dir: &Path,
    names: &[String],
    entries: &mut dyn Iterator<Item = io::Result<MidxEntry>>,
) -> io::Result<()> {
    write_as(&dir.join(MIDX), &LOCAL, names, entries, true)
}

/// [`write`] a midx of `flavor` at `path`; its names are checked. Without
/// `durable` nothing is fsynced: for a reader that checks the whole file
/// when it opens it, so that what a crash left of it is written again.
pub fn write_as(
    path: &Path,
    flavor: &Flavor,
    names: &[String],
    entries: &mut dyn Iterator<Item = io::Result<MidxEntry>>,
    durable: bool,
) -> io::Result<()> {
    debug_assert!(names.windows(2).all(|w| w[0] < w[1]));
    if let Some(n) = names
        .iter()
        .find(|n| n.len() != flavor.name_len || !(flavor.valid)(n))
    {
        return Err(io::Error::other(format!(
            "multi-pack index: bad pack name {n:?}"
        )));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or(MIDX);
    let tmp = dir.join(temp_name(file_name));
    let result = (|| {
        let file = create_temp(&tmp, 0o444)?;
        let hlen = header_len(flavor, names.len());
        let mut w = BufWriter::with_capacity(1 << 20, &file);
        w.seek(SeekFrom::Start(hlen))?;
        let mut fanout = vec![0u64; 256];
        let mut count = 0u64;
        let mut hasher = Sha256::new();
        let mut buf = [0u8; ENTRY];
        let mut prev: Option<ObjectId> = None;
        for e in entries {
            let e = e?;
            if prev.is_some_and(|p| p > e.id) || e.pack as usize >= names.len() {
                return Err(io::Error::other("multi-pack index: entries out of order"));
            }
            prev = Some(e.id);
            e.encode(&mut buf);
            hasher.update(buf);
            w.write_all(&buf)?;
            fanout[e.id.0[0] as usize] += 1;
            count += 1;
        }
        for b in 1..256 {
            fanout[b] += fanout[b - 1];
        }
        w.flush()?;
        drop(w);
        let mut header = Vec::with_capacity(hlen as usize);
        header.extend_from_slice(flavor.magic);
        let npacks = u32::try_from(names.len()).map_err(io::Error::other)?;
        header.extend_from_slice(&npacks.to_le_bytes());
        header.extend_from_slice(&count.to_le_bytes());
        for f in &fanout {
            header.extend_from_slice(&f.to_le_bytes());
        }
        for n in names {
            header.extend_from_slice(n.as_bytes());
        }
        header.extend_from_slice(&hasher.finalize());
        let sum = Sha256::digest(&header);
        header.extend_from_slice(&sum);
        debug_assert_eq!(header.len() as u64, hlen);
        file.write_all_at(&header, 0)?;
        if durable {
            file.sync_all()?;
        }
        drop(file);
        crate::sys::rename_nofollow(&tmp, path)?;
        if durable { fsync_dir(dir) } else { Ok(()) }
    })();
    if result.is_err() {
        let _ = crate::sys::remove_nofollow(&tmp);
    }
    result
}

/// Merge a sorted stream of entries read from disk with sorted entries in
/// memory into one sorted stream; an error from `a` is passed on.
pub struct Merge<A: Iterator<Item = io::Result<MidxEntry>>, B: Iterator<Item = MidxEntry>> {
    a: std::iter::Peekable<A>,
    b: std::iter::Peekable<B>,
}

impl<A: Iterator<Item = io::Result<MidxEntry>>, B: Iterator<Item = MidxEntry>> Merge<A, B> {
    pub fn new(a: A, b: B) -> Self {
        Merge {
            a: a.peekable(),
            b: b.peekable(),
        }
    }
}

impl<A: Iterator<Item = io::Result<MidxEntry>>, B: Iterator<Item = MidxEntry>> Iterator
    for Merge<A, B>
{
    type Item = io::Result<MidxEntry>;
    fn next(&mut self) -> Option<io::Result<MidxEntry>> {
        match (self.a.peek(), self.b.peek()) {
            (Some(Ok(x)), Some(y)) if y.id < x.id => self.b.next().map(Ok),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next().map(Ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u32, pack: u32) -> MidxEntry {
        MidxEntry {
            id: ObjectId::of(&i.to_le_bytes()),
            pack,
            offset: u64::from(i) * 10,
            len: i + 1,
        }
    }

    #[test]
    fn lookups_find_every_entry_and_nothing_else() {
        let t = tempfile::tempdir().unwrap();
        let names = vec!["00000000000000aa".to_string(), "00000000000000bb".into()];
        let mut entries: Vec<MidxEntry> = (0..5000).map(|i| entry(i, i % 2)).collect();
        // The same object in both packs (a crash in the middle of a repack).
        let mut twice = entries[7];
        twice.pack = 1 - twice.pack;
        entries.push(twice);
        entries.sort_by_key(|e| e.id);
        write(
            t.path(),
            &names,
            &mut entries.iter().map(|e| Ok::<MidxEntry, io::Error>(*e)),
        )
        .unwrap();
        let m = Midx::open(&t.path().join(MIDX)).unwrap().unwrap();
        assert_eq!(m.names, names);
        assert_eq!(m.len(), 5001);
        for (i, e) in entries.iter().enumerate() {
            let found = m.lookup(&e.id).unwrap();
            let want: Vec<MidxEntry> = entries[i.saturating_sub(1)..(i + 2).min(entries.len())]
                .iter()
                .filter(|x| x.id == e.id)
                .copied()
                .collect();
            assert_eq!(found, want, "entry {i}");
        }
        assert_eq!(m.lookup(&twice.id).unwrap().len(), 2);
        assert!(m.lookup(&ObjectId::of(b"absent")).unwrap().is_empty());
        let all: Vec<MidxEntry> = m.iter().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(all, entries);
        // No temp file left.
        let left: Vec<_> = fs::read_dir(t.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn stride_keeps_the_sparse_index_bounded() {
        assert_eq!(stride_for(0), STRIDE);
        assert_eq!(stride_for(300_000), STRIDE);
        assert_eq!(stride_for(MAX_SPARSE * STRIDE), STRIDE);
        assert_eq!(stride_for(MAX_SPARSE * STRIDE + 1), 2 * STRIDE);
        for count in [1u64 << 22, 10_000_000, 1 << 30] {
            let s = stride_for(count);
            assert!(
                s.is_power_of_two() && count.div_ceil(s) <= MAX_SPARSE,
                "{count}: {s}"
            );
        }
    }

    /// One bucket of 1,000 ids, with runs of equal ids across range
    /// boundaries, searched with every stride: each id present is found
    /// with all its copies, and ids between them, before the first and
    /// after the last are not.
    #[test]
    fn lookups_at_every_stride_and_across_ranges() {
        let id = |n: u32, k: u8| {
            let mut b = [0u8; 32];
            b[0] = 0x42;
            b[1..5].copy_from_slice(&n.to_be_bytes());
            b[5] = k;
            ObjectId(b)
        };
        let mut entries = Vec::new();
        for n in 0..1000u32 {
            // Every 97th id is in 20 packs' worth of copies.
            let copies = if n % 97 == 3 { 20 } else { 1 };
            for c in 0..copies {
                entries.push(MidxEntry {
                    id: id(n * 2 + 1, 0),
                    pack: c,
                    offset: u64::from(n),
                    len: c,
                });
            }
        }
        entries.sort_by_key(|e| (e.id, e.pack));
        let names: Vec<String> = (0..20).map(|i| format!("{i:016x}")).collect();
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            &names,
            &mut entries.iter().map(|e| Ok::<MidxEntry, io::Error>(*e)),
        )
        .unwrap();
        for stride in [1, 2, 3, 16, 64, 4096] {
            let mut m = Midx::open(&t.path().join(MIDX)).unwrap().unwrap();
            m.stride = stride;
            for n in 0..=2000u32 {
                let want: Vec<MidxEntry> = entries
                    .iter()
                    .filter(|e| e.id == id(n, 0))
                    .copied()
                    .collect();
                assert_eq!(
                    m.lookup(&id(n, 0)).unwrap(),
                    want,
                    "stride {stride}, id {n}"
                );
                assert!(
                    m.lookup(&id(n, 1)).unwrap().is_empty(),
                    "stride {stride}, id {n}+"
                );
            }
            assert!(m.lookup(&ObjectId([0x41; 32])).unwrap().is_empty());
            assert!(m.lookup(&ObjectId([0x43; 32])).unwrap().is_empty());
        }
    }

    #[test]
    fn a_flavor_reads_only_its_own_files_and_writes_only_its_names() {
        static OTHER: Flavor = Flavor::new(b"SFTEST01", 3, |n| {
            n.bytes().all(|b| b.is_ascii_lowercase())
        });
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("other.midx");
        let names = vec!["abc".to_string(), "xyz".to_string()];
        let mut entries: Vec<MidxEntry> = (0..40).map(|i| entry(i, i % 2)).collect();
        entries.sort_by_key(|e| e.id);
        let mut all = entries.iter().map(|e| Ok::<MidxEntry, io::Error>(*e));
        write_as(&path, &OTHER, &names, &mut all, true).unwrap();
        let m = Midx::open_as(&path, &OTHER).unwrap().unwrap();
        assert_eq!(m.names, names);
        for e in &entries {
            assert_eq!(m.lookup(&e.id).unwrap(), vec![*e]);
        }
        assert!(Midx::open(&path).is_err(), "not a local midx");
        let mut none = std::iter::empty();
        for bad in [vec!["ab".to_string()], vec!["AB1".to_string()]] {
            assert!(
                write_as(&path, &OTHER, &bad, &mut none, true).is_err(),
                "{bad:?}"
            );
        }
        assert!(
            write_as(&path, &LOCAL, &names, &mut none, true).is_err(),
            "not 16 hex digits"
        );
    }

    #[test]
    fn damage_is_detected() {
        let t = tempfile::tempdir().unwrap();
        let names = vec!["00000000000000aa".to_string()];
        let mut entries: Vec<MidxEntry> = (0..100).map(|i| entry(i, 0)).collect();
        entries.sort_by_key(|e| e.id);
        write(
            t.path(),
            &names,
            &mut entries.iter().map(|e| Ok::<MidxEntry, io::Error>(*e)),
        )
        .unwrap();
        let path = t.path().join(MIDX);
        let good = fs::read(&path).unwrap();
        let hlen = header_len(&LOCAL, 1) as usize;
        let put = |b: &[u8]| {
            let _ = fs::remove_file(&path);
            fs::write(&path, b).unwrap();
        };
        // A header byte: refused at open.
        for i in [0, 9, 13, 100, hlen - 40, hlen - 1] {
            let mut b = good.clone();
            b[i] ^= 1;
            put(&b);
            assert!(Midx::open(&path).is_err(), "header byte {i}");
        }
        // Truncated: refused at open.
        put(&good[..good.len() - 1]);
        assert!(Midx::open(&path).is_err());
        // An entry byte: found when read whole.
        let mut b = good.clone();
        b[hlen + 40] ^= 1;
        put(&b);
        let m = Midx::open(&path).unwrap().unwrap();
        assert!(m.iter().unwrap().last().unwrap().is_err());
        put(&good);
        let m = Midx::open(&path).unwrap().unwrap();
        assert_eq!(m.iter().unwrap().filter(|e| e.is_err()).count(), 0);
    }
}
