//! Tests of the re-sync chunker (`rechunk.rs`) and of what a commit reads:
//! the chunk list a fold makes equals cutting the whole file from scratch
//! (`cut_chunks` on each data run, holes as holes) after random overwrites,
//! appends, truncates, punched holes and writes past the end, commit after
//! commit; and a commit reads only around what changed.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::rechunk::{ChunkIo, chunk_file};
use super::state::{FileData, Piece, PieceMap, Src, plan, punch};
use super::testing::{Rng, base_checkpoint};
use super::{Fallocate, FaultyIo, Fork, ROOT_INO, Result, SetAttr};
use crate::store::chunk::{MAX_CHUNK, cut_chunks};
use crate::store::{
    Content, Entry, Extent, Got, Kind, LocalBackend, ObjectId, ObjectMaintenance, ObjectRead,
    ObjectWrite, Store, Stored,
};

impl Rng {
    /// 1 to `max` bytes of [`Rng::content`].
    fn some(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max) as usize + 1;
        self.content(n)
    }
    /// Bytes of a mixed kind: random, zeros (FastCDC cuts those at
    /// `MAX_CHUNK`), or a short repeated pattern.
    fn content(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let part = (self.below(1 << 20) as usize + 1).min(n - out.len());
            match self.below(4) {
                0 => out.resize(out.len() + part, 0),
                1 => {
                    let pat = [self.next() as u8, self.next() as u8, b'x'];
                    out.extend((0..part).map(|i| pat[i % 3]));
                }
                _ => out.extend((0..part).map(|_| self.next() as u8)),
            }
        }
        out
    }
}

/// A file as bytes and which of them are data (the rest are holes).
#[derive(Clone, Default)]
struct Model {
    bytes: Vec<u8>,
    data: Vec<bool>,
}

impl Model {
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn write(&mut self, off: u64, d: &[u8]) {
        let (off, end) = (off as usize, off as usize + d.len());
        if end > self.bytes.len() {
            self.bytes.resize(end, 0);
            self.data.resize(end, false);
        }
        self.bytes[off..end].copy_from_slice(d);
        self.data[off..end].fill(true);
    }
    fn truncate(&mut self, size: u64) {
        self.bytes.resize(size as usize, 0);
        self.data.resize(size as usize, false);
    }
    fn punch(&mut self, off: u64, len: u64) {
        let end = (off + len).min(self.size()) as usize;
        let off = (off as usize).min(end);
        self.bytes[off..end].fill(0);
        self.data[off..end].fill(false);
    }

    /// The runs of the file: (start, end, data?).
    fn runs(&self) -> Vec<(usize, usize, bool)> {
        let mut out: Vec<(usize, usize, bool)> = Vec::new();
        for (i, &d) in self.data.iter().enumerate() {
            match out.last_mut() {
                Some(last) if last.2 == d => last.1 = i + 1,
                _ => out.push((i, i + 1, d)),
            }
        }
        out
    }

    /// Cutting the whole file from scratch: the reference.
    fn whole(&self) -> Vec<Extent> {
        let mut out = Vec::new();
        for (a, b, data) in self.runs() {
            if !data {
                out.push(Extent {
                    len: (b - a) as u64,
                    id: None,
                });
                continue;
            }
            cut_chunks(&self.bytes[a..b], (b - a) as u64, |c: Vec<u8>| {
                out.push(Extent {
                    len: c.len() as u64,
                    id: Some(ObjectId::of(&c)),
                });
                Ok(())
            })
            .unwrap();
        }
        out
    }
}

// ------------------------------------------------------------ in memory

/// Objects and journal data in memory.
#[derive(Default)]
struct Mem {
    objects: HashMap<ObjectId, Vec<u8>>,
    journal: HashMap<u64, Vec<u8>>,
    read: u64,
    stored: u64,
}

struct MemIo<'a> {
    mem: &'a mut Mem,
    pieces: &'a PieceMap,
}

impl ChunkIo for MemIo<'_> {
    fn read(&mut self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.mem.read += buf.len() as u64;
        let mut at = 0;
        for (len, src) in plan(self.pieces, pos, pos + buf.len() as u64) {
            let part = &mut buf[at..at + len as usize];
            let (from, off) = match src.expect("the chunker reads data only") {
                Src::Base { id, off } => (&self.mem.objects[&id], off),
                Src::Journal { seg, off } => (&self.mem.journal[&seg], off),
            };
            part.copy_from_slice(&from[off as usize..off as usize + part.len()]);
            at += len as usize;
        }
        Ok(())
    }
    fn put(&mut self, data: &[u8]) -> Result<ObjectId> {
        self.mem.stored += data.len() as u64;
        let id = ObjectId::of(data);
        self.mem.objects.insert(id, data.to_vec());
        Ok(id)
    }
}

/// A file's state and its model, changed as the fork's records change them.
struct Subject {
    f: FileData,
    m: Model,
    seg: u64,
}

impl Subject {
    fn write(&mut self, mem: &mut Mem, off: u64, d: &[u8]) {
        let j = mem.journal.entry(self.seg).or_default();
        let at = j.len() as u64;
        j.extend_from_slice(d);
        punch(&mut self.f.pieces, off, off + d.len() as u64);
        let src = Src::Journal {
            seg: self.seg,
            off: at,
        };
        self.f.pieces.insert(
            off,
            Piece {
                len: d.len() as u64,
                src,
            },
        );
        self.f.size = self.f.size.max(off + d.len() as u64);
        self.f.changed = true;
        self.m.write(off, d);
    }
    fn truncate(&mut self, size: u64) {
        if size != self.f.size {
            punch(&mut self.f.pieces, size, u64::MAX);
            self.f.size = size;
            self.f.changed = true;
        }
        self.m.truncate(size);
    }
    fn punch(&mut self, off: u64, len: u64) {
        let end = (off + len).min(self.f.size);
        if off < end {
            punch(&mut self.f.pieces, off, end);
            self.f.changed = true;
        }
        self.m.punch(off, len);
    }

    /// One random change.
    fn change(&mut self, mem: &mut Mem, rng: &mut Rng) {
        let size = self.f.size;
        match rng.below(10) {
            0..=2 => {
                let d = rng.some(5000);
                self.write(mem, rng.below(size), &d);
            }
            3 => {
                let d = rng.some(3 << 20);
                self.write(mem, rng.below(size), &d);
            }
            4 => {
                let d = rng.some(1 << 20);
                self.write(mem, size, &d);
            }
            5 => {
                let d = rng.some(300_000);
                self.write(mem, size + rng.below(2 << 20), &d);
            }
            6 => self.truncate(rng.below(size + 1)),
            7 => self.truncate(size + rng.below(1 << 20)),
            8 => self.punch(rng.below(size), rng.below(2 << 20) + 1),
            _ => {
                // The same bytes written again: new pieces, same content.
                let off = rng.below(size);
                let len = rng.below(400_000).min(size - off);
                let d = self.m.bytes[off as usize..(off + len) as usize].to_vec();
                if !d.is_empty()
                    && self.m.data[off as usize..(off + len) as usize]
                        .iter()
                        .all(|&x| x)
                {
                    self.write(mem, off, &d);
                }
            }
        }
    }

    /// Fold it (as a commit does) and check the result against the whole-file cut.
    fn fold(&mut self, mem: &mut Mem, what: &str) -> Vec<Extent> {
        mem.read = 0;
        mem.stored = 0;
        let ext = {
            let mut io = MemIo {
                mem,
                pieces: &self.f.pieces,
            };
            chunk_file(&self.f, &mut io).unwrap()
        };
        let want = self.m.whole();
        assert_eq!(ext.len(), want.len(), "{what}: number of extents");
        assert!(
            ext == want,
            "{what}: the chunk list is not the whole-file cut"
        );
        // As a commit's rebase does; nothing changed meanwhile.
        self.seg += 1;
        let read = self.f.pieces.clone();
        self.f.rebase_onto(self.seg, &ext, &read);
        assert!(!self.f.changed, "{what}: unchanged after the rebase");
        assert_eq!(
            self.f.pieces,
            FileData::from_extents(&ext, self.f.size).pieces
        );
        ext
    }
}

/// A base file of `m` as a snapshot stores it.
fn base(mem: &mut Mem, m: &Model) -> FileData {
    let ext = m.whole();
    let mut at = 0usize;
    for x in &ext {
        if let Some(id) = x.id {
            mem.objects
                .insert(id, m.bytes[at..at + x.len as usize].to_vec());
        }
        at += x.len as usize;
    }
    FileData::from_extents(&ext, m.size())
}

#[test]
fn random_changes_fold_to_the_whole_file_cut() {
    for seed in 1..=12u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut mem = Mem::default();
        let mut m = Model::default();
        let size = rng.below(5 << 20) as usize;
        m.write(0, &rng.content(size));
        if seed % 3 == 0 {
            // A sparse base: holes in the middle and at the end.
            m.punch(size as u64 / 3, 700_000);
            m.truncate(size as u64 + 123_456);
        }
        let f = if seed % 4 == 1 {
            // A file made on the fork: nothing committed yet.
            let mut s = Subject {
                f: FileData::empty(),
                m: Model::default(),
                seg: 0,
            };
            s.write(&mut mem, 0, &m.bytes.clone());
            s.m = m.clone();
            s.f
        } else {
            base(&mut mem, &m)
        };
        let mut s = Subject { f, m, seg: 0 };
        for round in 0..6 {
            for _ in 0..=rng.below(3) {
                s.change(&mut mem, &mut rng);
            }
            s.fold(&mut mem, &format!("seed {seed} round {round}"));
        }
        // Folding again without a change reads and stores nothing.
        s.f.changed = true;
        s.fold(&mut mem, &format!("seed {seed}: unchanged"));
        assert_eq!((mem.read, mem.stored), (0, 0), "seed {seed}");
    }
}

#[test]
fn a_small_overwrite_reads_and_stores_only_around_it() {
    let mut rng = Rng(99);
    let mut mem = Mem::default();
    let mut m = Model::default();
    m.write(
        0,
        &(0..24 << 20).map(|_| rng.next() as u8).collect::<Vec<_>>(),
    );
    let f = base(&mut mem, &m);
    let mut s = Subject { f, m, seg: 0 };
    for (i, off) in [0u64, 7 << 20, 12_345_678, (24 << 20) - 1]
        .into_iter()
        .enumerate()
    {
        s.write(&mut mem, off, b"x");
        s.fold(&mut mem, &format!("overwrite {i}"));
        let bound = 4 * u64::from(MAX_CHUNK);
        assert!(mem.read <= bound, "overwrite {i} read {} bytes", mem.read);
        assert!(
            mem.stored <= bound,
            "overwrite {i} stored {} bytes",
            mem.stored
        );
    }
    // An append reads the last chunk's neighbourhood, not the file.
    s.write(&mut mem, 24 << 20, &[5; 100_000]);
    s.fold(&mut mem, "append");
    assert!(
        mem.read <= 4 * u64::from(MAX_CHUNK),
        "append read {}",
        mem.read
    );
}

#[test]
fn edits_at_chunk_boundaries_fold_to_the_whole_file_cut() {
    // The cut at a boundary `c` read the byte at `c`: a one-byte change
    // there moves the cut, so the chunk before must be cut again.
    let mut rng = Rng(11);
    let mut mem = Mem::default();
    let mut m = Model::default();
    m.write(
        0,
        &(0..6 << 20).map(|_| rng.next() as u8).collect::<Vec<_>>(),
    );
    let f = base(&mut mem, &m);
    let mut s = Subject { f, m, seg: 0 };
    for k in 1..12 {
        let ext = s.f.committed.as_ref().unwrap().clone();
        let c: u64 = ext.iter().take(k).map(|x| x.len).sum();
        let byte = s.m.bytes[c as usize].wrapping_add(1 + k as u8);
        s.write(&mut mem, c, &[byte]);
        s.fold(&mut mem, &format!("byte at boundary {k}"));
        let byte = s.m.bytes[c as usize - 1].wrapping_add(1);
        s.write(&mut mem, c - 1, &[byte]);
        s.fold(&mut mem, &format!("byte before boundary {k}"));
    }
    // A run that ends at an old boundary, and one that ends just after it.
    let ext = s.f.committed.as_ref().unwrap().clone();
    let c: u64 = ext.iter().take(3).map(|x| x.len).sum();
    s.punch(c, 1 << 20);
    s.fold(&mut mem, "hole at a boundary");
    s.write(&mut mem, c, &[1]);
    s.fold(&mut mem, "one byte after the boundary");
    s.truncate(c - 1);
    s.fold(&mut mem, "truncated before the boundary");
}

#[test]
fn a_list_that_is_no_whole_file_cut_is_not_reused() {
    // 3 MiB of random bytes stored as 3 chunks of 1 MiB: not how FastCDC
    // cuts them, so nothing of it may be reused (the fold cuts it whole).
    let mut rng = Rng(5);
    let mut mem = Mem::default();
    let bytes: Vec<u8> = (0..3 << 20).map(|_| rng.next() as u8).collect();
    let ext: Vec<Extent> = bytes
        .chunks(1 << 20)
        .map(|c| {
            let id = ObjectId::of(c);
            mem.objects.insert(id, c.to_vec());
            Extent {
                len: c.len() as u64,
                id: Some(id),
            }
        })
        .collect();
    let mut m = Model::default();
    m.write(0, &bytes);
    let mut s = Subject {
        f: FileData::from_extents(&ext, m.size()),
        m,
        seg: 0,
    };
    s.write(&mut mem, 100, b"y");
    s.fold(&mut mem, "implausible base");
    // Too long a chunk (2 MiB): also not taken.
    let two = [ext[0].id.unwrap(), ext[1].id.unwrap()];
    let joined = [&mem.objects[&two[0]][..], &mem.objects[&two[1]][..]].concat();
    let id = ObjectId::of(&joined);
    mem.objects.insert(id, joined);
    let long = vec![
        Extent {
            len: 2 << 20,
            id: Some(id),
        },
        ext[2].clone(),
    ];
    let mut m = Model::default();
    m.write(0, &bytes);
    let mut s = Subject {
        f: FileData::from_extents(&long, 3 << 20),
        m,
        seg: 0,
    };
    s.write(&mut mem, 5 << 19, b"z");
    s.fold(&mut mem, "chunk over MAX_CHUNK");
}

// ------------------------------------------------------------ through a fork

/// A backend that counts what is read from it and asked of it.
struct Counting {
    inner: LocalBackend,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    contains: AtomicU64,
}

impl ObjectRead for Counting {
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        let r = self.inner.read(id)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let n = r.as_ref().map_or(0, |b| b.len() as u64);
        self.read_bytes.fetch_add(n, Ordering::Relaxed);
        Ok(r)
    }
    fn read_for_use(&self, id: &ObjectId) -> io::Result<Option<Got>> {
        Ok(self.read(id)?.map(Got::Stored))
    }
    fn contains(&self, id: &ObjectId) -> io::Result<bool> {
        self.contains.fetch_add(1, Ordering::Relaxed);
        self.inner.contains(id)
    }
    /// `None`: every read is whole, and counted.
    fn open_stored(&self, _id: &ObjectId) -> io::Result<Option<Stored>> {
        Ok(None)
    }
    fn locate(&self, id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>> {
        self.inner.locate(id)
    }
    fn prefetch(&self, _ids: &[ObjectId]) {}
}

impl ObjectWrite for Counting {
    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        self.inner.write(id, bytes)
    }
    /// As `contains`, counted.
    fn contains_for_write(&self, id: &ObjectId, _len: usize) -> io::Result<bool> {
        self.contains(id)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn wants_sync(&self, _min_objects: usize) -> bool {
        false
    }
    fn refresh(&self) -> io::Result<()> {
        self.inner.refresh()
    }
}

impl ObjectMaintenance for Counting {
    fn list(&self) -> io::Result<Vec<ObjectId>> {
        self.inner.list()
    }
    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>> {
        self.inner.stat(id)
    }
    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>> {
        self.inner.quarantine(id)
    }
    fn remove(&self, id: &ObjectId) -> io::Result<bool> {
        self.inner.remove(id)
    }
    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>> {
        self.inner.remove_many(ids)
    }
    fn sweep(&self, ids: &[ObjectId], dry_run: bool) -> io::Result<Vec<bool>> {
        self.inner.sweep(ids, dry_run)
    }
    fn consolidate(&self, movable: &dyn Fn(&ObjectId) -> bool) -> io::Result<(usize, usize)> {
        self.inner.consolidate(movable)
    }
    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        self.inner.remove_stale_temps(cutoff, dry_run)
    }
}

impl Counting {
    /// (reads, bytes read, contains) since the last call.
    fn take(&self) -> (u64, u64, u64) {
        (
            self.reads.swap(0, Ordering::Relaxed),
            self.read_bytes.swap(0, Ordering::Relaxed),
            self.contains.swap(0, Ordering::Relaxed),
        )
    }
}

struct Env {
    _tmp: tempfile::TempDir,
    store: Arc<Store>,
    counting: Arc<Counting>,
    io: FaultyIo,
    base: ObjectId,
}

/// A store (its objects counted) with a checkpoint of `files` (name, bytes).
fn env(files: &[(&str, Vec<u8>)]) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (name, bytes) in files {
        std::fs::write(src.join(name), bytes).unwrap();
    }
    let root = tmp.path().join("store");
    Store::open_or_create(&root).unwrap();
    let counting = Arc::new(Counting {
        inner: LocalBackend::new(root.join("objects")),
        reads: AtomicU64::new(0),
        read_bytes: AtomicU64::new(0),
        contains: AtomicU64::new(0),
    });
    let store = Arc::new(Store::open_with_backend(&root, counting.clone()).unwrap());
    let base = base_checkpoint(&store, &src, "/srv/rechunk");
    let io = FaultyIo::new();
    Fork::create_with(&store, Arc::new(io.clone()), "f", &base).unwrap();
    Env {
        _tmp: tmp,
        store,
        counting,
        io,
        base,
    }
}

impl Env {
    fn open(&self) -> Fork {
        Fork::open_with(self.store.clone(), Arc::new(self.io.clone()), "f").unwrap()
    }
}

/// The committed entry at `path` of fork `f`'s head.
fn committed(store: &Store, f: &Fork, path: &str) -> Entry {
    let c = store.read_checkpoint(&f.head()).unwrap();
    store.lookup_path(&c, path.as_bytes()).unwrap().unwrap()
}

/// Every regular file of checkpoint `id` is stored as cutting it whole
/// gives: each run of data extents is what `cut_chunks` makes of its bytes.
pub(super) fn assert_whole_file_cuts(store: &Store, id: &ObjectId) {
    let c = store.read_checkpoint(id).unwrap();
    let mut stack = vec![(store.root_entry(&c).unwrap(), PathBuf::from("/"))];
    while let Some((e, path)) = stack.pop() {
        match &e.content {
            Content::Tree(t) => {
                for child in store.get_tree(t, "test").unwrap().entries {
                    let p = path.join(Path::new(&*String::from_utf8_lossy(&child.name)));
                    stack.push((child, p));
                }
            }
            Content::Extents(ext) if e.kind == Kind::File => {
                let mut i = 0;
                while i < ext.len() {
                    if ext[i].id.is_none() {
                        i += 1;
                        continue;
                    }
                    let j = (i..ext.len())
                        .find(|&k| ext[k].id.is_none())
                        .unwrap_or(ext.len());
                    let mut bytes = Vec::new();
                    for x in &ext[i..j] {
                        bytes.extend(store.get_object(&x.id.unwrap(), "test").unwrap());
                    }
                    let mut want = Vec::new();
                    cut_chunks(&bytes[..], bytes.len() as u64, |c: Vec<u8>| {
                        want.push(Extent {
                            len: c.len() as u64,
                            id: Some(ObjectId::of(&c)),
                        });
                        Ok(())
                    })
                    .unwrap();
                    assert!(
                        ext[i..j] == want[..],
                        "{}: not the whole-file cut",
                        path.display()
                    );
                    i = j;
                }
            }
            _ => {}
        }
    }
}

#[test]
fn commits_of_a_changed_file_equal_the_whole_file_cut_across_reopen_and_crash() {
    let mut rng = Rng(17);
    let big = rng.content(9 << 20);
    let e = env(&[("big.bin", big.clone()), ("small", b"small".to_vec())]);
    let mut m = Model::default();
    m.write(0, &big);
    let mut f = e.open();
    for round in 0..8 {
        let ino = f.lookup(ROOT_INO, b"big.bin").unwrap().ino;
        for _ in 0..=rng.below(3) {
            let size = m.size();
            match rng.below(6) {
                0 | 1 => {
                    let d = rng.some(200_000);
                    let off = rng.below(size);
                    f.write(ino, off, &d).unwrap();
                    m.write(off, &d);
                }
                2 => {
                    let d = rng.some(600_000);
                    let off = size + rng.below(1 << 20);
                    f.write(ino, off, &d).unwrap();
                    m.write(off, &d);
                }
                3 => {
                    let size = rng.below(size + 1).max(1 << 20);
                    let attr = SetAttr {
                        size: Some(size),
                        ..Default::default()
                    };
                    f.setattr(ino, &attr).unwrap();
                    m.truncate(size);
                }
                4 => {
                    let (off, len) = (rng.below(size), rng.below(1 << 20) + 1);
                    f.fallocate(ino, off, len, Fallocate::PunchHole).unwrap();
                    m.punch(off, len);
                }
                _ => {
                    let len = rng.below(1 << 20) + 1;
                    f.fallocate(ino, size, len, Fallocate::Extend).unwrap();
                    m.truncate(size + len);
                }
            }
        }
        let head = f.commit(&format!("round {round}")).unwrap();
        assert_whole_file_cuts(&e.store, &head);
        let entry = committed(&e.store, &f, "big.bin");
        let Content::Extents(ext) = entry.content else {
            panic!("round {round}: no extents")
        };
        assert!(
            ext == m.whole(),
            "round {round}: not the whole-file cut of the model"
        );
        // Now and then the fork is reopened (a replay onto the new head)
        // or crashes after a synced write.
        match round % 3 {
            1 => {
                drop(f);
                f = e.open();
            }
            2 => {
                let ino = f.lookup(ROOT_INO, b"big.bin").unwrap().ino;
                f.write(ino, 4096, b"synced").unwrap();
                m.write(4096, b"synced");
                f.sync().unwrap();
                drop(f);
                e.io.crash();
                f = e.open();
            }
            _ => {}
        }
    }
}

#[test]
fn a_commit_reads_only_around_what_changed_and_not_files_committed_before() {
    let mut rng = Rng(3);
    let big: Vec<u8> = (0..16 << 20).map(|_| rng.next() as u8).collect();
    let e = env(&[("big.bin", big)]);
    let f = e.open();
    let ino = f.lookup(ROOT_INO, b"big.bin").unwrap().ino;
    // A 1 MiB overwrite in the middle of a 16 MiB base file.
    let patch: Vec<u8> = (0..1 << 20).map(|_| rng.next() as u8).collect();
    f.write(ino, 7 << 20, &patch).unwrap();
    e.counting.take();
    let head = f.commit("overwrite").unwrap();
    let (_, bytes, _) = e.counting.take();
    assert!(
        bytes <= 5 << 20,
        "the overwrite's commit read {bytes} bytes"
    );
    assert_whole_file_cuts(&e.store, &head);
    // Files written on the fork and committed are not read again by the
    // next commit, nor looked up in the store; nor are the trees of
    // directories where nothing changed stored again.
    let many = f.mkdir(ROOT_INO, b"many", 0o755, 0, 0).unwrap().ino;
    let mut dirs = Vec::new();
    for d in 0..10 {
        let dir = f
            .mkdir(many, format!("d{d}").as_bytes(), 0o755, 0, 0)
            .unwrap()
            .ino;
        for i in 0..20 {
            let n = format!("f{i}");
            let a = f
                .mknod(dir, n.as_bytes(), Kind::File, 0o644, 0, 0, 0)
                .unwrap();
            f.write(a.ino, 0, &rng.some(3000)).unwrap();
        }
        dirs.push(dir);
    }
    f.write(ino, 100, b"and the big file again").unwrap();
    f.commit("many").unwrap();
    let a = f
        .mknod(dirs[3], b"one-more", Kind::File, 0o644, 0, 0, 0)
        .unwrap();
    f.write(a.ino, 0, b"one more").unwrap();
    e.counting.take();
    f.commit("one more").unwrap();
    let (reads, _, contains) = e.counting.take();
    assert_eq!(reads, 0, "objects read by a commit of one new file");
    // The file, its directory, `many`, the root's tree and the root, and
    // the commit's operation log.
    assert!(
        contains <= 6,
        "{contains} objects looked up for one new file"
    );
    // Again and again beside `many`: the trees of directories a commit did
    // not visit (under one it reused) stay valid for the next ones.
    for round in 0..3 {
        let name = format!("beside-{round}");
        let a = f
            .mknod(ROOT_INO, name.as_bytes(), Kind::File, 0o644, 0, 0, 0)
            .unwrap();
        f.write(a.ino, 0, b"one more").unwrap();
        e.counting.take();
        f.commit("beside").unwrap();
        let (reads, _, contains) = e.counting.take();
        assert_eq!(reads, 0, "round {round}: objects read");
        // The file, the root's tree and the root, and the operation log.
        assert!(contains <= 4, "round {round}: {contains} objects looked up");
    }
    let head = f.head();
    assert_whole_file_cuts(&e.store, &head);
    // The base is untouched and still reads as it did.
    assert_eq!(e.store.read_checkpoint(&e.base).unwrap().parents, vec![]);
}
