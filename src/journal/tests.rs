//! Tests of the journal layer (no FUSE): record codec, WAL recovery, POSIX
//! semantics of fork operations, concurrency, replay equivalence, power loss
//! (with `FaultyIo`) during writes and at every commit step, and fold.

use std::collections::BTreeMap;
use std::fs;
use std::sync::{Arc, Barrier};

use super::fork::CommitStep;
use super::record::{self, InodeMap, Record};
use super::testing::{Rng, base_checkpoint};
use super::*;
use crate::ingest;
use crate::store::acl;
use crate::store::readahead::AHEAD_CHUNKS;
use crate::store::{Checkpoint, ForkHead, Kind, ObjectId, Store};

// ------------------------------------------------------------------ helpers

struct Env {
    _tmp: tempfile::TempDir,
    store: Arc<Store>,
    io: FaultyIo,
    base: ObjectId,
}

/// A store with a checkpoint of a small tree: files, a deep directory, a
/// 3 MiB file, hardlinks, a symlink, an empty directory.
fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("dir/sub/deeper")).unwrap();
    fs::create_dir_all(src.join("other/x")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    fs::write(src.join("hello.txt"), b"hello\n").unwrap();
    fs::write(src.join("dir/sub/deeper/deep.txt"), b"deep data\n").unwrap();
    fs::write(src.join("dir/a.txt"), b"a").unwrap();
    fs::write(src.join("other/x/y.txt"), b"unchanged").unwrap();
    let mut rng = Rng(7);
    fs::write(src.join("big.bin"), rng.bytes(3 << 20)).unwrap();
    fs::write(src.join("link1"), b"linked").unwrap();
    fs::hard_link(src.join("link1"), src.join("dir/link2")).unwrap();
    std::os::unix::fs::symlink("hello.txt", src.join("sym")).unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let base = base_checkpoint(&store, &src, "/srv/test");
    Env {
        _tmp: tmp,
        store,
        io: FaultyIo::new(),
        base,
    }
}

impl Env {
    fn create(&self, name: &str) {
        Fork::create_with(&self.store, Arc::new(self.io.clone()), name, &self.base).unwrap();
    }
    fn open(&self, name: &str) -> Fork {
        Fork::open_with(self.store.clone(), Arc::new(self.io.clone()), name).unwrap()
    }
    fn fork(&self) -> Fork {
        self.create("f");
        self.open("f")
    }
}

/// The inode at a slash-separated path.
fn ino(f: &Fork, path: &str) -> u64 {
    let mut cur = ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        cur = f.lookup(cur, c.as_bytes()).unwrap().ino;
    }
    cur
}

/// (parent inode, last name) of a path.
fn parent(f: &Fork, path: &str) -> (u64, Vec<u8>) {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    (ino(f, dir), name.as_bytes().to_vec())
}

fn read_all(f: &Fork, ino: u64) -> Vec<u8> {
    let size = f.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let part = f.read(ino, out.len() as u64, 1 << 20).unwrap();
        assert!(!part.is_empty());
        out.extend_from_slice(&part);
    }
    out
}

fn write_path(f: &Fork, path: &str, off: u64, data: &[u8]) {
    f.write(ino(f, path), off, data).unwrap();
}

fn cat(f: &Fork, path: &str) -> Vec<u8> {
    read_all(f, ino(f, path))
}

/// Everything a user can see in the fork, by path (inode numbers and atime
/// left out): the canonical dump compared across replays and crashes.
fn dump(f: &Fork) -> BTreeMap<String, String> {
    dump_with(f, true)
}

/// [`dump`] with or without mtime and ctime (runs at different times differ there).
fn dump_with(f: &Fork, times: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((dir, path)) = stack.pop() {
        let (_, list) = f.readdir(dir).unwrap();
        for e in list {
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = f.getattr(e.ino).unwrap();
            let content = match a.kind {
                Kind::File => {
                    let d = read_all(f, e.ino);
                    format!("{} bytes sha {}", d.len(), &ObjectId::of(&d).to_hex()[..16])
                }
                Kind::Symlink => String::from_utf8_lossy(&f.readlink(e.ino).unwrap()).into(),
                Kind::Dir => {
                    stack.push((e.ino, p.clone()));
                    String::new()
                }
                _ => format!("rdev {}", a.rdev),
            };
            let xattrs: Vec<String> = f
                .listxattr(e.ino)
                .unwrap()
                .into_iter()
                .map(|n| {
                    let v = f.getxattr(e.ino, &n).unwrap();
                    format!("{}={:?}", String::from_utf8_lossy(&n), v)
                })
                .collect();
            let t = if times {
                format!("mtime {} ctime {}", a.mtime_ns, a.ctime_ns)
            } else {
                String::new()
            };
            out.insert(
                p,
                format!(
                    "{:?} {:o} {}:{} nlink {} {t} size {} {content} {xattrs:?} flags {:x}",
                    a.kind,
                    a.perm,
                    a.uid,
                    a.gid,
                    a.nlink,
                    a.size,
                    f.flags(e.ino).unwrap()
                ),
            );
        }
    }
    out
}

fn journal_dir(env: &Env, name: &str) -> std::path::PathBuf {
    fork_dir(&env.store, name).join("journal")
}

// ------------------------------------------------------------------ records

fn sample_records() -> Vec<Record> {
    vec![
        Record::LoadDir {
            dir: 1,
            first_ino: 2,
        },
        Record::Create {
            parent: 1,
            name: b"n\xff".to_vec(),
            ino: 9,
            kind: Kind::Symlink,
            perm: 0o777,
            uid: 1,
            gid: 2,
            rdev: 3,
            time_ns: -4,
            target: Some(b"t".to_vec()),
        },
        Record::Create {
            parent: 1,
            name: b"f".to_vec(),
            ino: 10,
            kind: Kind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            time_ns: 5,
            target: None,
        },
        Record::Link {
            ino: 9,
            parent: 1,
            name: b"l".to_vec(),
            time_ns: 6,
        },
        Record::Unlink {
            parent: 1,
            name: b"l".to_vec(),
            time_ns: 7,
        },
        Record::Rename {
            parent: 1,
            name: b"a".to_vec(),
            new_parent: 2,
            new_name: b"b".to_vec(),
            flags: 2,
            time_ns: 8,
        },
        Record::Write {
            ino: 10,
            offset: 1 << 40,
            time_ns: 9,
            data: vec![1, 2, 3],
        },
        Record::Truncate {
            ino: 10,
            size: 0,
            time_ns: 10,
        },
        Record::PunchHole {
            ino: 10,
            offset: 3,
            len: 4,
            time_ns: 11,
        },
        Record::SetAttr {
            ino: 10,
            perm: Some(0o4755),
            uid: None,
            gid: Some(5),
            atime: None,
            mtime: Some(-1),
            ctime: 12,
        },
        Record::SetXattr {
            ino: 10,
            name: b"user.k".to_vec(),
            value: vec![0; 3],
            flags: 1,
            time_ns: 13,
        },
        Record::RemoveXattr {
            ino: 10,
            name: b"user.k".to_vec(),
            time_ns: 14,
        },
        Record::SetFlags {
            ino: 10,
            flags: 0x30,
            time_ns: 15,
        },
        Record::Tmpfile {
            parent: 1,
            ino: 11,
            perm: 0o600,
            uid: 7,
            gid: 8,
            time_ns: 15,
        },
        Record::RenameWhiteout {
            parent: 1,
            name: b"f".to_vec(),
            new_parent: 2,
            new_name: b"g".to_vec(),
            flags: 1,
            ino: 12,
            uid: 0,
            gid: 0,
            time_ns: 16,
        },
        Record::InodeMap(InodeMap {
            next_ino: 11,
            dirs: vec![(1, vec![(b"a".to_vec(), 2), (b"b".to_vec(), 3)])],
            links: vec![(1, 2)],
            orphans: vec![10],
        }),
        Record::Atimes(vec![(2, -7), (1 << 40, i64::MAX)]),
        Record::Atimes(Vec::new()),
    ]
}

#[test]
fn records_round_trip_and_hostile_bytes_never_panic() {
    for r in sample_records() {
        let enc = r.encode();
        assert_eq!(Record::decode(&enc).as_ref(), Some(&r));
        for cut in 0..enc.len() {
            assert_eq!(Record::decode(&enc[..cut]), None, "{r:?} cut at {cut}");
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert_eq!(Record::decode(&extra), None);
    }
    let mut rng = Rng(99);
    for _ in 0..20_000 {
        let n = rng.below(64) as usize;
        let mut b = rng.bytes(n);
        if !b.is_empty() {
            b[0] = (rng.below(14)) as u8;
        }
        let _ = Record::decode(&b);
    }
    // Huge counts are refused, not allocated.
    let mut m = vec![12u8, 1];
    m.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    assert_eq!(Record::decode(&m), None);
}

#[test]
fn a_write_is_its_head_then_its_data_and_frames_the_same_in_parts() {
    for data in [vec![], vec![7u8], vec![1u8; 300], vec![2u8; 1 << 20]] {
        let (ino, offset, t) = (10, (1 << 40) + 3, -9);
        let rec = Record::Write {
            ino,
            offset,
            time_ns: t,
            data: data.clone(),
        };
        let mut parts = record::write_head(ino, offset, t, data.len());
        parts.extend_from_slice(&data);
        assert_eq!(parts, rec.encode());
    }
    // A record appended in parts reads back as the whole frame.
    let (io, dir) = faulty_journal_dir();
    let wal = wal::Wal::open(Arc::new(io.clone()), dir, 0, |_, _, _| Ok(())).unwrap();
    let before = io.writes();
    let head = record::write_head(4, 5, 6, 3);
    let pos = wal.append_parts(&head, b"xyz").unwrap();
    assert_eq!(
        io.writes(),
        before + 1,
        "one write, so a fault tears one frame"
    );
    let mut payload = head.clone();
    payload.extend_from_slice(b"xyz");
    let frame = record::frame(&payload);
    let mut back = vec![0u8; frame.len()];
    wal.read(pos.seg, pos.offset, &mut back).unwrap();
    assert_eq!(back, frame);
}

#[test]
fn real_files_write_parts_back_to_back() {
    let tmp = tempfile::tempdir().unwrap();
    let f = RealIo.open(&tmp.path().join("seg"), true).unwrap();
    let big = vec![9u8; 3 << 20];
    f.write_parts_at(&[b"ab", b"", &big, b"c"], 5).unwrap();
    f.write_parts_at(&[], 0).unwrap();
    f.start_writeback(0, 1 << 20).unwrap();
    f.drop_behind(0, 1 << 20).unwrap();
    let mut want = vec![0u8; 5];
    want.extend_from_slice(b"ab");
    want.extend_from_slice(&big);
    want.push(b'c');
    assert_eq!(fs::read(tmp.path().join("seg")).unwrap(), want);
}

#[test]
fn write_behind_starts_writeback_of_every_8_mib_off_the_callers_thread_and_drops_the_range_before()
{
    let (io, dir) = faulty_journal_dir();
    let wal = wal::Wal::open(Arc::new(io.clone()), dir, 0, |_, _, _| Ok(())).unwrap();
    let data = vec![5u8; 1 << 20];
    let mut ends = Vec::new();
    for i in 0..20u64 {
        let head = record::write_head(2, i << 20, 0, data.len());
        wal.append_parts(&head, &data).unwrap();
        wal.write_behind();
        ends.push(wal.end().offset);
    }
    // Two hand-overs (after 8 and 16 MiB); the helper may merge them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let want_end = ends
        .iter()
        .copied()
        .find(|&e| e - wal::SEGMENT_HEADER >= 16 << 20);
    loop {
        let w = io.writebacks();
        let covered = w.last().map(|&(o, l)| o + l);
        // The helper drops the previous range just after it starts the next.
        if covered == want_end && io.dropped().len() + 1 == w.len() {
            assert_eq!(w[0].0, wal::SEGMENT_HEADER, "{w:?}");
            for pair in w.windows(2) {
                assert_eq!(pair[0].0 + pair[0].1, pair[1].0, "contiguous: {w:?}");
            }
            // Each range but the last leaves the page cache once the next
            // one was handed over (none if the helper merged them).
            assert_eq!(io.dropped(), w[..w.len() - 1], "{w:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{w:?} {want_end:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // The helper blocks every signal (a mount daemon's SIGTERM must reach its
    // signal thread, not kill the process through this one).
    let mut helpers = 0;
    for task in fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let comm = fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim() != "storefs-wal-beh" {
            continue;
        }
        helpers += 1;
        let status = fs::read_to_string(task.join("status")).unwrap_or_default();
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
            .unwrap();
        let bit = |sig: libc::c_int| 1u64 << (sig - 1);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            assert_ne!(blocked & bit(sig), 0, "signal {sig} not blocked: {status}");
        }
    }
    assert!(helpers >= 1);
    // A hint only: a sync still works.
    wal.sync().unwrap();
    drop(wal);
}

// ------------------------------------------------------------------ WAL

/// Where each frame of a segment's bytes starts, and where its records end
/// (at the end of the file or at the preallocated zeros after them).
fn frames(bytes: &[u8]) -> (Vec<usize>, usize) {
    let mut starts = Vec::new();
    let mut pos = wal::SEGMENT_HEADER as usize;
    while pos + 8 <= bytes.len() && bytes[pos..pos + 8] != [0; 8] {
        starts.push(pos);
        pos += 8 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    (starts, pos)
}

fn damage_last_frame(env: &Env, how: impl Fn(&mut Vec<u8>, usize)) {
    let dir = journal_dir(env, "f");
    let seg = dir.join(wal::segment_name(0));
    let mut bytes = env.io.contents(&seg).unwrap();
    let last = frames(&bytes)
        .0
        .pop()
        .unwrap_or(wal::SEGMENT_HEADER as usize);
    how(&mut bytes, last);
    env.io.set_contents(&seg, bytes);
}

#[test]
fn torn_tail_is_dropped_and_the_journal_reopens_and_appends() {
    type Damage = Box<dyn Fn(&mut Vec<u8>, usize)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("cut mid-frame", Box::new(|b, last| b.truncate(last + 11))),
        ("cut mid-header", Box::new(|b, last| b.truncate(last + 3))),
        (
            "flipped byte",
            // In the last frame's payload (the file ends in preallocated zeros).
            Box::new(|b, last| b[last + 9] ^= 0x40),
        ),
        (
            "zeros after",
            Box::new(|b, _| b.extend_from_slice(&[0; 100])),
        ),
    ];
    for (what, how) in cases {
        let env = env();
        let f = env.fork();
        let h = ino(&f, "hello.txt");
        f.write(h, 0, b"HELLO").unwrap();
        f.write(h, 6, b"second").unwrap();
        f.sync().unwrap();
        drop(f);
        damage_last_frame(&env, how);
        let f = env.open("f");
        let want: &[u8] = if what == "zeros after" {
            b"HELLO\nsecond"
        } else {
            b"HELLO\n"
        };
        assert_eq!(cat(&f, "hello.txt"), want, "{what}");
        f.write(h, 0, b"after").unwrap();
        f.sync().unwrap();
        drop(f);
        let f = env.open("f");
        assert_eq!(&cat(&f, "hello.txt")[..5], b"after", "{what}");
    }
}

#[test]
fn records_end_at_the_preallocated_zeros_and_reopening_cuts_them() {
    let env = env();
    let f = env.fork();
    let h = ino(&f, "hello.txt");
    f.write(h, 0, b"HELLO").unwrap();
    f.sync().unwrap();
    let seg = journal_dir(&env, "f").join(wal::segment_name(0));
    let synced = env.io.contents(&seg).unwrap();
    assert_eq!(
        synced.len() as u64 % wal::PREALLOCATE,
        0,
        "the segment's size runs ahead of its records"
    );
    // A second write whose first page never reached the disk, while a later
    // one did: its frame header reads as zeros, what follows as garbage.
    f.write(h, 6, b"lost").unwrap();
    drop(f);
    let mut bytes = env.io.contents(&seg).unwrap();
    let lost = *frames(&bytes).0.last().unwrap();
    bytes[lost..lost + 8].fill(0);
    env.io.set_contents(&seg, bytes);
    let f = env.open("f");
    assert_eq!(cat(&f, "hello.txt"), b"HELLO\n");
    assert_eq!(
        env.io.contents(&seg).unwrap().len(),
        lost,
        "reopening cut the segment back to its records"
    );
    // Appends resume there, and the garbage beyond never comes back.
    f.write(h, 0, b"after").unwrap();
    f.sync().unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(cat(&f, "hello.txt"), b"after\n");
}

/// An in-memory file system with an empty journal directory `/j`.
fn faulty_journal_dir() -> (FaultyIo, &'static std::path::Path) {
    let io = FaultyIo::new();
    let dir = std::path::Path::new("/j");
    io.create_dir_all(dir).unwrap();
    (io, dir)
}

#[test]
fn rotation_cuts_the_preallocated_zeros_of_the_segment_it_leaves() {
    let (io, dir) = faulty_journal_dir();
    let w = wal::Wal::open(Arc::new(io.clone()), dir, 0, |_, _, _| Ok(())).unwrap();
    let payload = Record::Unlink {
        parent: 1,
        name: b"x".to_vec(),
        time_ns: 0,
    }
    .encode();
    w.append(&payload).unwrap();
    let end = w.end().offset as usize;
    let seg0 = dir.join(wal::segment_name(0));
    assert_eq!(io.contents(&seg0).unwrap().len() as u64, wal::PREALLOCATE);
    assert_eq!(w.rotate(&[&payload]).unwrap(), 1);
    assert_eq!(
        io.contents(&seg0).unwrap().len(),
        end,
        "cut back to its records"
    );
    w.append(&payload).unwrap();
    drop(w);
    // Only the last segment may end in zeros; both replay, with all three records.
    let mut n = 0;
    wal::Wal::open(Arc::new(io.clone()), dir, 0, |_, _, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 3);
    // Zeros after the records of a segment that is not the last are damage.
    let mut bytes = io.contents(&seg0).unwrap();
    bytes.extend_from_slice(&[0; 64]);
    io.set_contents(&seg0, bytes);
    assert!(matches!(
        wal::Wal::open(Arc::new(io.clone()), dir, 0, |_, _, _| Ok(())),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn real_files_preallocate_zeros_reserved_or_written() {
    let tmp = tempfile::tempdir().unwrap();
    for how in [Prealloc::Reserve, Prealloc::Zeros] {
        let path = tmp.path().join(format!("{how:?}"));
        let f = RealIo.open(&path, true).unwrap();
        f.write_at(b"abc", 0).unwrap();
        f.allocate(3, (3 << 20) - 3, how).unwrap();
        f.sync_data().unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 3 << 20, "{how:?}");
        assert_eq!(&bytes[..3], b"abc");
        assert!(bytes[3..].iter().all(|&b| b == 0), "{how:?}");
        // What the kinds are for: ext4 marks reserved blocks unwritten (an
        // fdatasync after writing there commits their conversion), written
        // zeros are plain data.
        match unwritten_extents(&path) {
            Some(n) => assert_eq!(n > 0, how == Prealloc::Reserve, "{how:?}: {n} unwritten"),
            None => eprintln!(
                "{}: no FIEMAP here; extent kinds not checked",
                path.display()
            ),
        }
    }
}

/// How many of a file's extents are unwritten (FIEMAP), or `None` where the
/// file system does not say (tmpfs).
fn unwritten_extents(path: &std::path::Path) -> Option<usize> {
    #[repr(C)]
    struct Extent {
        logical: u64,
        physical: u64,
        length: u64,
        reserved64: [u64; 2],
        flags: u32,
        reserved: [u32; 3],
    }
    #[repr(C)]
    struct Map {
        start: u64,
        length: u64,
        flags: u32,
        mapped: u32,
        count: u32,
        reserved: u32,
        extents: [Extent; 32],
    }
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const FIEMAP_FLAG_SYNC: u32 = 1;
    const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
    let f = fs::File::open(path).unwrap();
    // SAFETY: all-zero bytes are a valid `Map` (plain integers).
    let mut map: Map = unsafe { std::mem::zeroed() };
    map.length = u64::MAX;
    map.flags = FIEMAP_FLAG_SYNC;
    map.count = 32;
    // SAFETY: `map` is a `struct fiemap` with room for `count` extents.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            FS_IOC_FIEMAP,
            &mut map as *mut Map,
        )
    };
    if rc != 0 {
        return None;
    }
    let mapped = (map.mapped as usize).min(32);
    assert!(mapped > 0, "{}: no extents", path.display());
    Some(
        map.extents[..mapped]
            .iter()
            .filter(|e| e.flags & FIEMAP_EXTENT_UNWRITTEN != 0)
            .count(),
    )
}

#[test]
fn a_preallocation_step_after_a_sync_is_written_zeros_and_one_without_is_reserved() {
    let (io, dir) = faulty_journal_dir();
    let wal = wal::Wal::open(Arc::new(io.clone()), dir, 0, |_, _, _| Ok(())).unwrap();
    let data = vec![7u8; 100 << 10];
    let write = |n: u64| {
        for i in 0..n {
            let head = record::write_head(2, i, 0, data.len());
            wal.append_parts(&head, &data).unwrap();
        }
    };
    let kinds = |io: &FaultyIo| io.allocations().iter().map(|a| a.2).collect::<Vec<_>>();
    // A large write synced at its end (a file copied in): every step reserved.
    write(25);
    wal.sync().unwrap();
    assert_eq!(kinds(&io), [Prealloc::Reserve; 3]);
    // Then writes synced one by one (a database): the step after a sync is
    // written zeros, and stays so while syncs go on.
    for _ in 0..25 {
        write(1);
        wal.sync().unwrap();
    }
    let k = kinds(&io);
    assert_eq!(k[3..], [Prealloc::Zeros; 2], "{k:?}");
    // The steps tile the segment from its header.
    let a = io.allocations();
    for pair in a.windows(2) {
        assert_eq!(pair[0].0 + pair[0].1, pair[1].0, "{a:?}");
    }
    assert_eq!(a[0].0, wal::SEGMENT_HEADER);
    // Writes again without syncs: reserved once the step after the last sync
    // is used up.
    write(30);
    let k = kinds(&io);
    assert_eq!(k[5], Prealloc::Zeros, "{k:?}");
    assert!(k[6..].iter().all(|&h| h == Prealloc::Reserve), "{k:?}");
    assert!(k.len() > 6, "{k:?}");
}

#[test]
fn second_open_is_busy_and_real_io_round_trips() {
    let env = env();
    Fork::create(&env.store, "real", &env.base).unwrap();
    let f = Fork::open(env.store.clone(), "real").unwrap();
    assert!(matches!(
        Fork::open(env.store.clone(), "real"),
        Err(Error::Busy(n)) if n == "real"
    ));
    let h = ino(&f, "hello.txt");
    f.write(h, 100, b"far").unwrap();
    f.sync().unwrap();
    let before = dump(&f);
    drop(f);
    let f = Fork::open(env.store.clone(), "real").unwrap();
    assert_eq!(dump(&f), before);
    // Fork names resolve to the head, after refs.
    assert_eq!(env.store.resolve("real").unwrap(), env.base);
    assert_eq!(
        env.store.list_forks().unwrap(),
        vec![("real".into(), env.base)]
    );
    let new = f.commit("c1").unwrap();
    assert_ne!(new, env.base);
    assert_eq!(env.store.resolve("real").unwrap(), new);
    let log = fork_log(&env.store, "real").unwrap();
    assert_eq!(
        log.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![new, env.base]
    );
    assert_eq!(log[0].1.source.kind, "commit");
    assert_eq!(log[0].1.origin.as_deref(), Some("/srv/test"));
    // Clashes.
    env.store.set_ref("r", &env.base).unwrap();
    assert!(matches!(
        Fork::create(&env.store, "r", &env.base),
        Err(Error::NameTaken(_))
    ));
    assert!(matches!(
        Fork::create(&env.store, "real", &env.base),
        Err(Error::NameTaken(_))
    ));
    assert!(matches!(
        Fork::create(&env.store, "..", &env.base),
        Err(Error::BadName(_))
    ));
    assert!(matches!(
        Fork::open(env.store.clone(), "nope"),
        Err(Error::NoFork(_))
    ));
}

// ------------------------------------------------------------------ semantics

#[test]
fn posix_semantics() {
    let env = env();
    let f = env.fork();
    let root = ROOT_INO;
    // Create, write at offsets, sparse write, read back.
    let a = f.create_open(root, b"new", 0o640, 1, 2).unwrap();
    assert_eq!(
        (a.kind, a.perm, a.uid, a.gid, a.size),
        (Kind::File, 0o640, 1, 2, 0)
    );
    f.write(a.ino, 0, b"abc").unwrap();
    f.write(a.ino, 1, b"XY").unwrap();
    assert_eq!(read_all(&f, a.ino), b"aXY");
    f.write(a.ino, 1 << 30, b"end").unwrap();
    let at = f.getattr(a.ino).unwrap();
    assert_eq!(at.size, (1 << 30) + 3);
    // As ext4: two 4 KiB blocks (8 sectors each), the hole between unallocated.
    assert_eq!(at.blocks, 16, "a far write leaves a hole, not stored zeros");
    assert_eq!(f.read(a.ino, 4096, 4).unwrap(), vec![0; 4]);
    assert_eq!(f.read(a.ino, 1 << 30, 100).unwrap(), b"end");
    // Truncate shrink and grow; punch hole; fallocate extend.
    f.setattr(
        a.ino,
        &SetAttr {
            size: Some(2),
            ..Default::default()
        },
    )
    .unwrap();
    f.setattr(
        a.ino,
        &SetAttr {
            size: Some(5),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(read_all(&f, a.ino), b"aX\0\0\0");
    f.write(a.ino, 0, b"12345678").unwrap();
    f.fallocate(a.ino, 2, 3, Fallocate::PunchHole).unwrap();
    assert_eq!(read_all(&f, a.ino), b"12\x00\x00\x00678");
    f.fallocate(a.ino, 0, 20, Fallocate::Extend).unwrap();
    assert_eq!(f.getattr(a.ino).unwrap().size, 20);
    f.fallocate(a.ino, 0, 40, Fallocate::KeepSize).unwrap();
    assert_eq!(f.getattr(a.ino).unwrap().size, 20);
    // Zero range: zeros inside, the size kept or grown to cover it.
    f.fallocate(a.ino, 1, 2, Fallocate::ZeroRange { keep_size: false })
        .unwrap();
    assert_eq!(&read_all(&f, a.ino)[..8], b"1\x00\x00\x00\x00678");
    f.fallocate(a.ino, 6, 30, Fallocate::ZeroRange { keep_size: true })
        .unwrap();
    assert_eq!(f.getattr(a.ino).unwrap().size, 20);
    assert_eq!(&read_all(&f, a.ino)[..8], b"1\x00\x00\x00\x006\x00\x00");
    f.fallocate(a.ino, 18, 10, Fallocate::ZeroRange { keep_size: false })
        .unwrap();
    assert_eq!(f.getattr(a.ino).unwrap().size, 28);
    // Base file edited in the middle.
    let h = ino(&f, "hello.txt");
    f.write(h, 1, b"E").unwrap();
    assert_eq!(read_all(&f, h), b"hEllo\n");
    // Appends.
    assert_eq!(f.append(h, b"more").unwrap(), 6);
    assert_eq!(read_all(&f, h), b"hEllo\nmore");

    // mkdir, EEXIST, rmdir ENOTEMPTY, unlink/rmdir kinds.
    let d = f.mkdir(root, b"d", 0o755, 0, 0).unwrap();
    assert!(matches!(
        f.mkdir(root, b"d", 0o755, 0, 0),
        Err(Error::Posix(Posix::Exists))
    ));
    let root_links = f.getattr(root).unwrap().nlink;
    f.mknod(d.ino, b"in", Kind::File, 0o600, 0, 0, 0).unwrap();
    assert!(matches!(
        f.rmdir(root, b"d"),
        Err(Error::Posix(Posix::NotEmpty))
    ));
    assert!(matches!(
        f.unlink(root, b"d"),
        Err(Error::Posix(Posix::IsDir))
    ));
    assert!(matches!(
        f.rmdir(d.ino, b"in"),
        Err(Error::Posix(Posix::NotDir))
    ));
    assert!(
        matches!(f.rmdir(root, b"dir"), Err(Error::Posix(Posix::NotEmpty))),
        "base dir, unloaded"
    );
    f.unlink(d.ino, b"in").unwrap();
    f.rmdir(root, b"d").unwrap();
    assert_eq!(f.getattr(root).unwrap().nlink, root_links - 1);
    assert!(matches!(
        f.lookup(root, b"d"),
        Err(Error::Posix(Posix::NotFound))
    ));
    assert!(matches!(
        f.lookup(root, &[b'x'; 256]),
        Err(Error::Posix(Posix::NotFound))
    ));
    assert!(matches!(
        f.mkdir(root, &[b'x'; 256], 0, 0, 0),
        Err(Error::Posix(Posix::NameTooLong))
    ));
    assert!(matches!(
        f.mkdir(root, b"a/b", 0, 0, 0),
        Err(Error::Posix(Posix::Invalid(_)))
    ));

    // Rename over an existing file, NOREPLACE, EXCHANGE, into itself.
    f.rename(root, b"new", root, b"hello.txt", RenameMode::Replace)
        .unwrap();
    assert_eq!(ino(&f, "hello.txt"), a.ino);
    assert!(matches!(
        f.lookup(root, b"new"),
        Err(Error::Posix(Posix::NotFound))
    ));
    assert!(matches!(
        f.rename(root, b"hello.txt", root, b"sym", RenameMode::NoReplace),
        Err(Error::Posix(Posix::Exists))
    ));
    let sym = ino(&f, "sym");
    f.rename(root, b"hello.txt", root, b"sym", RenameMode::Exchange)
        .unwrap();
    assert_eq!((ino(&f, "sym"), ino(&f, "hello.txt")), (a.ino, sym));
    let dir = ino(&f, "dir");
    let sub = ino(&f, "dir/sub");
    assert!(matches!(
        f.rename(root, b"dir", sub, b"loop", RenameMode::Replace),
        Err(Error::Posix(Posix::Invalid(_)))
    ));
    assert!(matches!(
        f.rename(root, b"sym", root, b"dir", RenameMode::Replace),
        Err(Error::Posix(Posix::IsDir))
    ));
    assert!(matches!(
        f.rename(root, b"dir", root, b"sym", RenameMode::Replace),
        Err(Error::Posix(Posix::NotDir))
    ));
    assert!(matches!(
        f.rename(root, b"empty", root, b"dir", RenameMode::Replace),
        Err(Error::Posix(Posix::NotEmpty))
    ));
    f.rename(root, b"empty", dir, b"moved", RenameMode::Replace)
        .unwrap();
    assert_eq!(f.lookup(dir, b"moved").unwrap().kind, Kind::Dir);
    assert_eq!(f.readdir(ino(&f, "dir/moved")).unwrap().0, dir);

    // Hardlinks: base group shares an inode; new links count.
    let l1 = ino(&f, "link1");
    assert_eq!(ino(&f, "dir/link2"), l1);
    assert_eq!(f.getattr(l1).unwrap().nlink, 2);
    f.link(l1, root, b"link3").unwrap();
    assert_eq!(f.getattr(l1).unwrap().nlink, 3);
    f.write(ino(&f, "link3"), 0, b"L").unwrap();
    assert_eq!(cat(&f, "dir/link2"), b"Linked");
    assert!(matches!(
        f.link(dir, root, b"dl"),
        Err(Error::Posix(Posix::Perm))
    ));
    f.unlink(root, b"link1").unwrap();
    assert_eq!(f.getattr(l1).unwrap().nlink, 2);

    // Unlink of an open file: readable and writable until released.
    let o = ino(&f, "other/x/y.txt");
    f.open_file(o).unwrap();
    f.unlink(ino(&f, "other/x"), b"y.txt").unwrap();
    assert_eq!(read_all(&f, o), b"unchanged");
    f.write(o, 0, b"U").unwrap();
    assert_eq!(read_all(&f, o), b"Unchanged");
    assert_eq!(f.getattr(o).unwrap().nlink, 0);
    f.release(o);
    assert!(matches!(f.getattr(o), Err(Error::Posix(Posix::NotFound))));

    // Symlinks, specials, metadata, xattrs.
    let s = f.symlink(root, b"s2", b"/abs/target", 5, 6).unwrap();
    assert_eq!(f.readlink(s.ino).unwrap(), b"/abs/target");
    assert!(matches!(
        f.readlink(dir),
        Err(Error::Posix(Posix::Invalid(_)))
    ));
    let fifo = f.mknod(root, b"fifo", Kind::Fifo, 0o600, 0, 0, 0).unwrap();
    assert_eq!(fifo.kind, Kind::Fifo);
    // The old hello.txt inode went when "new" replaced it.
    assert!(matches!(f.getattr(h), Err(Error::Posix(Posix::NotFound))));
    let h = a.ino;
    let t = f
        .setattr(
            h,
            &SetAttr {
                perm: Some(0o4711),
                uid: Some(7),
                gid: Some(8),
                mtime: Some(Time::At(42)),
                atime: Some(Time::At(41)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        (t.perm, t.uid, t.gid, t.mtime_ns, t.atime_ns),
        (0o4711, 7, 8, 42, 41)
    );
    assert!(matches!(
        f.getxattr(h, b"user.a"),
        Err(Error::Posix(Posix::NoXattr))
    ));
    assert!(matches!(
        f.setxattr(h, b"user.a", b"1", XattrMode::Replace),
        Err(Error::Posix(Posix::NoXattr))
    ));
    f.setxattr(h, b"user.a", b"1", XattrMode::Create).unwrap();
    assert!(matches!(
        f.setxattr(h, b"user.a", b"2", XattrMode::Create),
        Err(Error::Posix(Posix::XattrExists))
    ));
    f.setxattr(h, b"user.a", b"2", XattrMode::Replace).unwrap();
    f.setxattr(h, b"user.b", b"", XattrMode::Any).unwrap();
    assert_eq!(f.getxattr(h, b"user.a").unwrap(), b"2");
    assert_eq!(
        f.listxattr(h).unwrap(),
        vec![b"user.a".to_vec(), b"user.b".to_vec()]
    );
    f.removexattr(h, b"user.a").unwrap();
    assert!(matches!(
        f.removexattr(h, b"user.a"),
        Err(Error::Posix(Posix::NoXattr))
    ));
    assert!(matches!(
        f.setxattr(h, b"user.big", &vec![0; XATTR_SIZE_MAX + 1], XattrMode::Any),
        Err(Error::Posix(Posix::TooBig))
    ));
    assert!(matches!(
        f.write(h, MAX_FILE_SIZE, b"x"),
        Err(Error::Posix(Posix::FileTooLarge))
    ));
    let st = f.statfs().unwrap();
    assert!(st.files > 10 && st.name_max == 255);

    // Everything replays to the same state.
    f.sync().unwrap();
    let before = dump(&f);
    drop(f);
    assert_eq!(dump(&env.open("f")), before);
}

#[test]
fn mkdir_race_has_exactly_one_winner() {
    let env = env();
    let f = Arc::new(env.fork());
    for round in 0..20 {
        let name = format!("lock{round}");
        let n = 8;
        let barrier = Arc::new(Barrier::new(n));
        let wins: usize = (0..n)
            .map(|_| {
                let (f, b, name) = (f.clone(), barrier.clone(), name.clone());
                std::thread::spawn(move || {
                    b.wait();
                    match f.mkdir(ROOT_INO, name.as_bytes(), 0o700, 0, 0) {
                        Ok(_) => 1,
                        Err(Error::Posix(Posix::Exists)) => 0,
                        Err(e) => panic!("{e}"),
                    }
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(wins, 1, "round {round}");
    }
}

#[test]
fn concurrent_appends_all_land_without_overlap() {
    let env = env();
    let f = Arc::new(env.fork());
    let log = f.create_open(ROOT_INO, b"log", 0o644, 0, 0).unwrap().ino;
    let threads: Vec<_> = (0..2u8)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..500u32 {
                    let line = format!("{t}:{i:04}\n");
                    f.append(log, line.as_bytes()).unwrap();
                    if i % 50 == 0 {
                        f.sync().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let data = read_all(&f, log);
    assert_eq!(data.len(), 2 * 500 * 7);
    let lines: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 1000);
    for t in 0..2 {
        let mine: Vec<u32> = lines
            .iter()
            .filter(|l| l[0] == b'0' + t)
            .map(|l| std::str::from_utf8(&l[2..]).unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            mine,
            (0..500).collect::<Vec<_>>(),
            "thread {t} in order, complete"
        );
    }
}

// ------------------------------------------------------------------ replay

/// One random operation on a small namespace; errors are part of the game.
fn random_op(f: &Fork, rng: &mut Rng) {
    const NAMES: [&str; 6] = ["a", "b", "c", "dir", "dir/sub", "dir/b"];
    let pick = |rng: &mut Rng| NAMES[rng.below(NAMES.len() as u64) as usize];
    let lookup = |p: &str| -> Option<u64> {
        let mut cur = ROOT_INO;
        for c in p.split('/') {
            cur = f.lookup(cur, c.as_bytes()).ok()?.ino;
        }
        Some(cur)
    };
    let split = |p: &str| -> Option<(u64, Vec<u8>)> {
        let (d, n) = p.rsplit_once('/').unwrap_or(("", p));
        let di = if d.is_empty() {
            Some(ROOT_INO)
        } else {
            lookup(d)
        }?;
        Some((di, n.as_bytes().to_vec()))
    };
    let p = pick(rng);
    match rng.below(14) {
        0 => {
            if let Some((d, n)) = split(p) {
                let _ = f.mknod(d, &n, Kind::File, 0o644, 0, 0, 0);
            }
        }
        1 => {
            if let Some((d, n)) = split(p) {
                let _ = f.mkdir(d, &n, 0o755, 0, 0);
            }
        }
        2..=4 => {
            if let Some(i) = lookup(p) {
                let off = rng.below(300_000);
                let len = rng.below(70_000) as usize;
                let data = rng.bytes(len);
                let _ = f.write(i, off, &data);
            }
        }
        5 => {
            if let Some(i) = lookup(p) {
                let _ = f.setattr(
                    i,
                    &SetAttr {
                        size: Some(rng.below(200_000)),
                        ..Default::default()
                    },
                );
            }
        }
        6 => {
            if let Some((d, n)) = split(p) {
                let _ = if rng.below(2) == 0 {
                    f.unlink(d, &n)
                } else {
                    f.rmdir(d, &n)
                };
            }
        }
        7 => {
            let q = pick(rng);
            if let (Some((d, n)), Some((e, m))) = (split(p), split(q)) {
                let mode = [
                    RenameMode::Replace,
                    RenameMode::NoReplace,
                    RenameMode::Exchange,
                ][rng.below(3) as usize];
                let _ = f.rename(d, &n, e, &m, mode);
            }
        }
        8 => {
            let q = pick(rng);
            if let (Some(i), Some((e, m))) = (lookup(p), split(q)) {
                let _ = f.link(i, e, &m);
            }
        }
        9 => {
            if let Some(i) = lookup(p) {
                let _ = f.setxattr(i, b"user.x", &rng.bytes(5), XattrMode::Any);
                let _ = f.setattr(
                    i,
                    &SetAttr {
                        perm: Some(rng.below(0o7777) as u32),
                        ..Default::default()
                    },
                );
            }
        }
        10 => {
            if let Some(i) = lookup(p) {
                let off = rng.below(200_000);
                let _ = f.fallocate(i, off, rng.below(100_000) + 1, Fallocate::PunchHole);
            }
        }
        11 => {
            if let Some((d, n)) = split(p) {
                let _ = f.symlink(d, &n, b"target", 0, 0);
            }
        }
        12 => {
            if let Some(i) = lookup(p) {
                use crate::store::model::flags::{APPEND, IMMUTABLE, NODUMP};
                let flags = [0, IMMUTABLE, APPEND, NODUMP][rng.below(4) as usize];
                let _ = f.set_flags(i, flags);
            }
        }
        _ => {
            if let Some(i) = lookup(p) {
                let _ = f.append(i, &rng.bytes(100));
            }
        }
    }
}

#[test]
fn random_ops_replay_to_the_same_state() {
    for seed in 1..=12u64 {
        let env = env();
        let f = env.fork();
        let mut rng = Rng(seed * 0x9e37_79b9);
        for _ in 0..60 {
            random_op(&f, &mut rng);
        }
        let live = dump(&f);
        f.sync().unwrap();
        drop(f);
        env.io.crash();
        let f = env.open("f");
        assert_eq!(dump(&f), live, "seed {seed}");
        // And after a commit, replay from the new head with more changes.
        f.commit("c").unwrap();
        for _ in 0..30 {
            random_op(&f, &mut rng);
        }
        let live = dump(&f);
        f.sync().unwrap();
        drop(f);
        env.io.crash();
        assert_eq!(dump(&env.open("f")), live, "seed {seed} after commit");
    }
}

#[test]
fn the_inode_map_a_commit_writes_is_the_maps_encoding_and_replays() {
    for seed in 1..=6u64 {
        let env = env();
        let f = env.fork();
        let mut rng = Rng(seed * 0x2545_f491);
        for round in 0..3 {
            for _ in 0..40 {
                random_op(&f, &mut rng);
            }
            let (record, map) = f.inode_map_encodings();
            assert_eq!(record, map, "seed {seed} round {round}");
            assert!(matches!(Record::decode(&record), Some(Record::InodeMap(_))));
            f.commit("c").unwrap();
        }
        let live = dump(&f);
        drop(f);
        assert_eq!(
            dump(&env.open("f")),
            live,
            "seed {seed}: replays from the map"
        );
    }
}

// ------------------------------------------------------------------ power loss

/// A scripted workload: (operation, sync after it?).
fn workload(f: &Fork, step: usize) -> Result<()> {
    let root = ROOT_INO;
    match step {
        0 => f.mkdir(root, b"w", 0o755, 0, 0).map(|_| ()),
        1 => f
            .mknod(ino(f, "w"), b"log", Kind::File, 0o644, 0, 0, 0)
            .map(|_| ()),
        2 => f.write(ino(f, "w/log"), 0, &[b'x'; 5000]).map(|_| ()),
        3 => f.append(ino(f, "w/log"), b"second").map(|_| ()),
        4 => f.write(ino(f, "hello.txt"), 0, b"J").map(|_| ()),
        5 => f.rename(root, b"hello.txt", ino(f, "w"), b"h", RenameMode::Replace),
        6 => f
            .write(ino(f, "big.bin"), 1 << 20, &[7; 300_000])
            .map(|_| ()),
        7 => f.unlink(ino(f, "dir"), b"a.txt"),
        8 => f.setxattr(ino(f, "w/log"), b"user.k", b"v", XattrMode::Create),
        9 => f
            .setattr(
                ino(f, "w/log"),
                &SetAttr {
                    size: Some(100),
                    ..Default::default()
                },
            )
            .map(|_| ()),
        10 => f.symlink(root, b"s", b"w/h", 0, 0).map(|_| ()),
        _ => f.write(ino(f, "w/log"), 1 << 20, b"far").map(|_| ()),
    }
}
const STEPS: usize = 12;
const SYNC_AFTER: [usize; 4] = [1, 4, 7, 10];

#[test]
fn power_loss_at_every_write_keeps_synced_changes_and_whole_records() {
    // Expected states: after each step (live, without crash), times left out
    // since every run has its own clock readings.
    let mut env = env();
    let f = env.fork();
    let mut states = vec![dump_with(&f, false)];
    for s in 0..STEPS {
        workload(&f, s).unwrap();
        states.push(dump_with(&f, false));
    }
    drop(f);

    let mut cut = 0u64;
    let mut torn = 0usize;
    loop {
        // A fresh journal file system over the same store and base.
        env.io = FaultyIo::new();
        let f = env.fork();
        let _ = dump(&f); // load everything first, as the reference run did
        env.io.fail_write_after(cut, torn);
        let mut acked = 0; // states[acked] is durable
        let mut done = 0;
        let mut failed = false;
        for s in 0..STEPS {
            if workload(&f, s).is_err() {
                failed = true;
                break;
            }
            done = s + 1;
            if SYNC_AFTER.contains(&s) {
                if f.sync().is_err() {
                    failed = true;
                    break;
                }
                acked = s + 1;
            }
        }
        drop(f);
        env.io.crash();
        let f = env.open("f");
        let got = dump_with(&f, false);
        let ok = (acked..=done).find(|&j| states[j] == got);
        assert!(
            ok.is_some(),
            "cut {cut} torn {torn}: state after crash is not one of steps {acked}..={done}"
        );
        // The journal took appends again without repair.
        f.mknod(ROOT_INO, b"post", Kind::File, 0o600, 0, 0, 0)
            .unwrap();
        f.sync().unwrap();
        drop(f);
        if !failed {
            break;
        }
        torn = (torn + 7) % 23;
        cut += 1;
    }
    assert!(cut >= 12, "the workload made {cut} writes");
}

/// `FS_IOC_SHUTDOWN` ([`Fork::shut_down`]): with `flush` (DEFAULT,
/// LOGFLUSH) everything done before it is kept, without (NOLOGFLUSH) only
/// what was synced; the cut is durable (a crash after it changes nothing);
/// after it nothing more reaches the journal (no write, not a byte of the
/// segment changes), every operation and the commit fail with
/// [`Error::ShutDown`] but `statfs`, and the fork reopens with exactly those
/// records and goes on.
#[test]
fn a_shut_down_fork_appends_nothing_more_and_reopens_with_exactly_what_was_durable() {
    for (flush, crash) in [(false, false), (false, true), (true, false), (true, true)] {
        let env = env();
        let f = env.fork();
        write_path(&f, "hello.txt", 0, b"HELLO");
        f.sync().unwrap();
        let synced = dump(&f);
        write_path(&f, "dir/a.txt", 0, b"unsynced");
        f.unlink(ROOT_INO, b"link1").unwrap();
        let all = dump(&f);
        assert_ne!(all, synced);
        f.shut_down(flush).unwrap();
        assert!(f.is_shut_down());
        let segment = journal_dir(&env, "f").join(wal::segment_name(0));
        let (writes, bytes) = (env.io.writes(), env.io.contents(&segment).unwrap());
        let shut = |r: Result<()>| matches!(r, Err(Error::ShutDown { .. }));
        assert!(shut(f.lookup(ROOT_INO, b"hello.txt").map(drop)), "lookup");
        assert!(shut(f.getattr(ROOT_INO).map(drop)), "getattr");
        assert!(shut(f.readdir(ROOT_INO).map(drop)), "readdir");
        assert!(shut(f.write(ROOT_INO + 1, 0, b"x").map(drop)), "write");
        assert!(
            shut(f.mkdir(ROOT_INO, b"new", 0o755, 0, 0).map(drop)),
            "mkdir"
        );
        assert!(shut(f.sync()), "sync");
        assert!(shut(f.commit("after").map(drop)), "commit");
        assert!(f.statfs().is_ok(), "statfs still answers");
        f.shut_down(flush).unwrap();
        assert_eq!(
            env.io.writes(),
            writes,
            "nothing written after the shutdown"
        );
        assert_eq!(
            env.io.contents(&segment).unwrap(),
            bytes,
            "the segment is as cut"
        );
        let head = env.store.fork_head("f").unwrap();
        drop(f);
        assert_eq!(env.store.fork_head("f").unwrap(), head, "no commit");
        if crash {
            env.io.crash();
        }
        let f = env.open("f");
        let want = if flush { &all } else { &synced };
        assert_eq!(&dump(&f), want, "flush {flush}, crash {crash}");
        write_path(&f, "hello.txt", 0, b"again");
        f.commit("after the shutdown").unwrap();
        assert_eq!(cat(&f, "hello.txt"), b"again\n");
    }
}

#[test]
fn a_full_disk_refuses_the_record_and_the_journal_goes_on() {
    let env = env();
    let f = env.fork();
    write_path(&f, "hello.txt", 0, b"HELLO");
    f.sync().unwrap();
    let before = dump(&f);
    // The next write lands 100 bytes of its frame, then the disk is full.
    env.io.fail_write_with(0, 100, libc::ENOSPC);
    let err = f.write(ino(&f, "dir/a.txt"), 0, &[7u8; 4000]).unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err:?}");
    assert_eq!(dump(&f), before, "the refused write changed nothing");
    // Reads, deletes and (space freed) writes go on, and are durable.
    assert_eq!(cat(&f, "hello.txt"), b"HELLO\n");
    f.unlink(ROOT_INO, b"link1").unwrap();
    write_path(&f, "dir/a.txt", 0, b"after");
    f.sync().unwrap();
    let live = dump(&f);
    // A commit whose new segment meets a full disk: refused, the journal goes on.
    env.io.fail_write_with(0, 5, libc::ENOSPC);
    let err = f.commit("full").unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err:?}");
    write_path(&f, "hello.txt", 0, b"J");
    f.sync().unwrap();
    let live2 = dump(&f);
    assert_ne!(live, live2);
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(
        dump(&f),
        live2,
        "replay: the synced changes, no torn record"
    );
    f.commit("space freed").unwrap();
    assert_eq!(dump(&f), live2);
}

#[test]
fn power_loss_without_sync_loses_only_unsynced_changes() {
    for stop in 0..=STEPS {
        let env = env();
        let f = env.fork();
        let mut acked = 0;
        let mut states = vec![dump(&f)];
        for s in 0..stop {
            workload(&f, s).unwrap();
            if SYNC_AFTER.contains(&s) {
                f.sync().unwrap();
                acked = s + 1;
            }
            states.push(dump(&f));
        }
        drop(f);
        env.io.crash();
        let got = dump(&env.open("f"));
        assert!(
            (acked..=stop).any(|j| states[j] == got),
            "stop {stop}: lost a synced change"
        );
        assert_eq!(
            got, states[acked],
            "stop {stop}: unsynced records are not durable"
        );
    }
}

#[test]
fn crash_at_every_commit_step_keeps_old_or_new_head_and_all_content() {
    let steps = [
        Some(CommitStep::Rotated),
        Some(CommitStep::Folded),
        Some(CommitStep::CheckpointWritten),
        Some(CommitStep::HeadMoved),
        Some(CommitStep::Rebased),
        None,
    ];
    for stop in steps {
        let env = env();
        let f = env.fork();
        for s in 0..8 {
            workload(&f, s).unwrap();
        }
        f.sync().unwrap();
        let before = dump(&f);
        let result = f.commit_until("c", stop);
        assert_eq!(result.is_ok(), stop.is_none());
        // Writes continue after the (interrupted) commit and are synced.
        for s in 8..STEPS {
            workload(&f, s).unwrap();
        }
        f.sync().unwrap();
        let after = dump(&f);
        let head = f.head();
        super::rechunk_tests::assert_whole_file_cuts(&env.store, &head);
        drop(f);
        env.io.crash();
        let f = env.open("f");
        let moved = !matches!(
            stop,
            Some(CommitStep::Rotated | CommitStep::Folded | CommitStep::CheckpointWritten)
        );
        assert_eq!(f.head() != env.base, moved, "{stop:?}");
        assert_eq!(f.head(), head, "{stop:?}");
        assert_eq!(dump(&f), after, "{stop:?}");
        // The committed checkpoint holds exactly the pre-commit content.
        if moved {
            env.create("check");
            let mut info = read_json_head(&env, "check");
            info.checkpoint = f.head();
            set_head(&env, "check", &info);
            let c = env.open("check");
            assert_eq!(dump(&c), before, "{stop:?}: committed tree");
        }
        // A second commit finishes whatever the first left.
        let h2 = f.commit("again").unwrap();
        super::rechunk_tests::assert_whole_file_cuts(&env.store, &h2);
        drop(f);
        env.io.crash();
        let f = env.open("f");
        assert_eq!(f.head(), h2);
        assert_eq!(dump(&f), after, "{stop:?} after second commit");
        let segs = env.io.list(&journal_dir(&env, "f")).unwrap();
        assert_eq!(segs.len(), 1, "{stop:?}: trimmed to one segment: {segs:?}");
    }
}

fn read_json_head(env: &Env, name: &str) -> ForkHead {
    let b = env
        .io
        .read_file(&fork_dir(&env.store, name).join("HEAD"))
        .unwrap()
        .unwrap();
    serde_json::from_slice(&b).unwrap()
}

fn set_head(env: &Env, name: &str, h: &ForkHead) {
    env.io
        .write_atomic(
            &fork_dir(&env.store, name).join("HEAD"),
            &serde_json::to_vec(h).unwrap(),
        )
        .unwrap();
}

#[test]
fn open_unlinked_file_survives_a_commit() {
    let env = env();
    let f = env.fork();
    let o = f.create_open(ROOT_INO, b"tmp", 0o600, 0, 0).unwrap().ino;
    f.write(o, 0, b"scratch").unwrap();
    f.unlink(ROOT_INO, b"tmp").unwrap();
    f.commit("c").unwrap();
    assert_eq!(read_all(&f, o), b"scratch", "journal data moved to objects");
    f.write(o, 7, b"!").unwrap();
    assert_eq!(read_all(&f, o), b"scratch!");
    f.sync().unwrap();
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert!(matches!(
        f.lookup(ROOT_INO, b"tmp"),
        Err(Error::Posix(Posix::NotFound))
    ));
}

// ------------------------------------------------- O_TMPFILE and whiteouts

/// A file as `O_TMPFILE` makes it, in directory `dir`.
fn tmpfile(f: &Fork, dir: u64, perm: u32) -> Attr {
    let node = NewNode {
        umask: 0o022,
        ..NewNode::new(Kind::File, perm, 1000, 100)
    };
    f.tmpfile(dir, &node).unwrap()
}

#[test]
fn a_tmpfile_never_linked_is_gone_after_a_crash_and_a_commit() {
    let env = env();
    let f = env.fork();
    let before = dump(&f);
    let a = tmpfile(&f, ROOT_INO, 0o666);
    assert_eq!(
        (a.kind, a.nlink, a.perm, a.uid, a.gid),
        (Kind::File, 0, 0o644, 1000, 100)
    );
    f.write(a.ino, 0, b"scratch").unwrap();
    assert_eq!(read_all(&f, a.ino), b"scratch");
    // No name anywhere, and the directory is as it was (times too).
    assert_eq!(dump(&f), before);
    f.sync().unwrap();
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(dump(&f), before);
    assert!(matches!(
        f.getattr(a.ino),
        Err(Error::Posix(Posix::NotFound))
    ));
    // Nor does a commit store it (it is open here: an orphan).
    let b = tmpfile(&f, ino(&f, "dir"), 0o600);
    f.write(b.ino, 0, b"more").unwrap();
    f.commit("with an unnamed file").unwrap();
    assert_eq!(read_all(&f, b.ino), b"more");
    drop(f);
    let f = env.open("f");
    assert_eq!(dump(&f), before);
    assert!(f.getattr(b.ino).is_err());
}

#[test]
fn a_linked_tmpfile_survives_a_crash_after_sync() {
    let env = env();
    let f = env.fork();
    let a = tmpfile(&f, ROOT_INO, 0o640);
    f.write(a.ino, 0, b"published").unwrap();
    let linked = f.link(a.ino, ino(&f, "dir"), b"named").unwrap();
    assert_eq!((linked.ino, linked.nlink), (a.ino, 1));
    f.sync().unwrap();
    let live = dump(&f);
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(dump(&f), live);
    assert_eq!(cat(&f, "dir/named"), b"published");
    let got = f.getattr(ino(&f, "dir/named")).unwrap();
    assert_eq!(
        (got.perm, got.uid, got.gid, got.nlink),
        (0o640, 1000, 100, 1)
    );
    f.commit("c").unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(cat(&f, "dir/named"), b"published");
}

/// A link gives a tmpfile its first name only: once linked (and unlinked
/// again), or for a file unlinked while open, it is `ENOENT`, as the
/// kernel answers itself; and so after a commit, whose inode map keeps
/// the file but not its data.
#[test]
fn only_a_tmpfile_not_yet_named_nor_committed_may_be_linked() {
    let env = env();
    let f = env.fork();
    let not_found = |r: Result<Attr>| matches!(r, Err(Error::Posix(Posix::NotFound)));
    let a = tmpfile(&f, ROOT_INO, 0o600);
    f.link(a.ino, ROOT_INO, b"one").unwrap();
    f.unlink(ROOT_INO, b"one").unwrap();
    assert!(not_found(f.link(a.ino, ROOT_INO, b"two")));
    let o = f.create_open(ROOT_INO, b"tmp", 0o600, 0, 0).unwrap().ino;
    f.unlink(ROOT_INO, b"tmp").unwrap();
    assert!(not_found(f.link(o, ROOT_INO, b"back")));
    let b = tmpfile(&f, ROOT_INO, 0o600);
    f.write(b.ino, 0, b"before the commit").unwrap();
    f.commit("c").unwrap();
    assert!(not_found(f.link(b.ino, ROOT_INO, b"late")));
    assert_eq!(read_all(&f, b.ino), b"before the commit");
    // A new one after the commit may be.
    let c = tmpfile(&f, ROOT_INO, 0o600);
    f.link(c.ino, ROOT_INO, b"fresh").unwrap();
    // Only files: a tmpfile of a directory is refused.
    let dir = NewNode::new(Kind::Dir, 0o755, 0, 0);
    assert!(f.tmpfile(ROOT_INO, &dir).is_err());
    // chattr: no tmpfile in an immutable directory, no whiteout rename out
    // of an append-only one (it would lose the name); EPERM, as ext4.
    let dir = ino(&f, "dir");
    f.set_flags(dir, 0x10).unwrap();
    let node = NewNode::new(Kind::File, 0o600, 0, 0);
    let perm = |r: Result<()>| matches!(r, Err(Error::Posix(Posix::Immutable | Posix::AppendOnly)));
    assert!(perm(f.tmpfile(dir, &node).map(|_| ())));
    f.set_flags(dir, 0x20).unwrap();
    f.tmpfile(dir, &node).unwrap();
    let out = f.rename_whiteout(dir, b"a.txt", ROOT_INO, b"out", false, 0, 0);
    assert!(perm(out));
    f.set_flags(dir, 0).unwrap();
    // Released before it is named, it is gone.
    let d = tmpfile(&f, ROOT_INO, 0o600);
    f.release(d.ino);
    assert!(not_found(f.link(d.ino, ROOT_INO, b"gone")));
}

#[test]
fn a_whiteout_rename_is_one_record_and_replays() {
    let env = env();
    let f = env.fork();
    let d = ino(&f, "dir");
    // The records in the journal, but for loads and requesters.
    let changes = |f: &Fork| {
        f.sync().unwrap();
        let seg = journal_dir(&env, "f").join(wal::segment_name(0));
        let bytes = env.io.contents(&seg).unwrap();
        let payload = |at: usize| {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            Record::decode(&bytes[at + 8..at + 8 + len]).unwrap()
        };
        let recs = frames(&bytes).0.into_iter().map(payload);
        recs.filter(|r| !matches!(r, Record::LoadDir { .. } | Record::Who(_)))
            .collect::<Vec<_>>()
    };
    let n = changes(&f).len();
    f.rename_whiteout(ROOT_INO, b"hello.txt", d, b"moved", false, 1000, 100)
        .unwrap();
    let after = changes(&f);
    assert_eq!(after.len(), n + 1, "one record: {after:?}");
    assert!(matches!(after[n], Record::RenameWhiteout { .. }));
    assert_eq!(cat(&f, "dir/moved"), b"hello\n");
    let w = f.lookup(ROOT_INO, b"hello.txt").unwrap();
    assert_eq!(
        (w.kind, w.rdev, w.perm, w.uid, w.gid, w.nlink),
        (Kind::CharDev, 0, 0, 1000, 100, 1)
    );
    // NOREPLACE: refused over a name, nothing changed; a directory moves
    // too, leaving a whiteout.
    let before = dump(&f);
    let exists = f.rename_whiteout(ROOT_INO, b"sym", d, b"moved", true, 0, 0);
    assert!(matches!(exists, Err(Error::Posix(Posix::Exists))));
    assert_eq!(dump(&f), before);
    f.rename_whiteout(ROOT_INO, b"empty", d, b"e2", true, 0, 0)
        .unwrap();
    assert_eq!(f.lookup(ROOT_INO, b"empty").unwrap().kind, Kind::CharDev);
    assert_eq!(f.lookup(d, b"e2").unwrap().kind, Kind::Dir);
    f.sync().unwrap();
    let live = dump(&f);
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(dump(&f), live);
    f.commit("whiteouts").unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(dump(&f), live);
}

/// Cut anywhere (a torn tail, as a power loss leaves one), the journal
/// holds the whole whiteout rename or none of it: after replay the source
/// is at its old name and nothing at the new one, or it moved and a
/// whiteout is left; never one without the other.
#[test]
fn a_torn_whiteout_rename_is_all_or_nothing() {
    let env = env();
    let f = env.fork();
    let d = ino(&f, "dir");
    f.readdir(d).unwrap();
    f.sync().unwrap();
    let seg = journal_dir(&env, "f").join(wal::segment_name(0));
    let start = frames(&env.io.contents(&seg).unwrap()).1;
    f.rename_whiteout(ROOT_INO, b"hello.txt", d, b"moved", false, 0, 0)
        .unwrap();
    f.sync().unwrap();
    drop(f);
    let whole = env.io.contents(&seg).unwrap();
    let end = frames(&whole).1;
    let mut outcomes = std::collections::BTreeSet::new();
    for cut in start..=end {
        env.io.set_contents(&seg, whole[..cut].to_vec());
        let f = env.open("f");
        let old = f.lookup(ROOT_INO, b"hello.txt").map(|a| a.kind);
        let moved = f.lookup(d, b"moved").ok().map(|a| a.kind);
        match (old, moved) {
            (Ok(Kind::File), None) => outcomes.insert("before"),
            (Ok(Kind::CharDev), Some(Kind::File)) => outcomes.insert("after"),
            other => panic!("cut at {cut} of {start}..{end}: {other:?}"),
        };
    }
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

// ------------------------------------------------------------------ fold

#[test]
fn sequential_reads_of_a_base_file_read_ahead_and_drop_the_chunks_passed() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let mut want = Rng(11).bytes(12 << 20);
    fs::write(src.join("big.bin"), &want).unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let base = base_checkpoint(&store, &src, "/srv/test");
    Fork::create(&store, "f", &base).unwrap();
    let f = Fork::open(store, "f").unwrap();
    let i = ino(&f, "big.bin");
    // An edit in the middle: the reads mix the journal's bytes and the base's.
    f.write(i, 6 << 20, b"an edit").unwrap();
    want[6 << 20..(6 << 20) + 7].copy_from_slice(b"an edit");
    let chunks = f.base_chunks(i);
    let ids: Vec<ObjectId> = chunks.iter().map(|c| c.0).collect();
    assert!(ids.len() > 8, "a file of many chunks: {}", ids.len());

    // Five reads in a row: the read-ahead has ramped up to its full reach.
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(f.read(i, got.len() as u64, 131_072).unwrap());
    }
    let mut covered = 0;
    let here = chunks
        .iter()
        .position(|c| {
            covered += c.1;
            covered > got.len() as u64
        })
        .unwrap();
    // Queued, being read or read already: the next chunks, as many as the
    // read-ahead queues at once.
    for id in &ids[here + 1..=here + AHEAD_CHUNKS] {
        let (cached, in_flight) = f.chunk_held(id);
        // A worker may land it between the two looks.
        assert!(
            cached || in_flight || f.chunk_held(id).0,
            "{id} not read ahead"
        );
    }
    while got.len() < want.len() {
        got.extend(f.read(i, got.len() as u64, 131_072).unwrap());
    }
    assert!(got == want, "the bytes read differ");
    // The chunks of the first half are gone from the cache, the last is held.
    let half: Vec<_> = ids.iter().take(ids.len() / 2 - 1).collect();
    for id in &half {
        assert!(!f.chunk_held(id).0, "{id} passed long ago but still cached");
    }
    assert!(f.chunk_held(ids.last().unwrap()).0);
    // A random read afterwards reads its part again, correctly.
    assert_eq!(f.read(i, 10, 4096).unwrap(), want[10..4106]);
}

/// A file of many tiny `O_APPEND` writes (a piece each, as xfstests
/// generic/069 makes them), and a base file with such a tail, read
/// sequentially as the kernel reads: every byte right, and the read-ahead
/// still finds the base chunks ahead (its look is bounded in pieces, not
/// in bytes, since a sequential read once walked the whole rest of the file
/// at every read).
#[test]
fn sequential_reads_of_a_file_of_tiny_appends() {
    let env = env();
    let f = env.fork();
    let n = 20_000u32;
    let new = f.create_open(ROOT_INO, b"log", 0o644, 0, 0).unwrap().ino;
    let big = ino(&f, "big.bin");
    for i in 0..n {
        f.append(new, &i.to_le_bytes()).unwrap();
        f.append(big, &i.to_le_bytes()).unwrap();
    }
    let base = fs::read(env._tmp.path().join("src/big.bin")).unwrap();
    for (file, head) in [(new, &[][..]), (big, &base[..])] {
        let mut got = Vec::new();
        loop {
            let part = f.read(file, got.len() as u64, 131_072).unwrap();
            if part.is_empty() {
                break;
            }
            got.extend(part);
        }
        assert_eq!(got.len(), head.len() + 4 * n as usize);
        assert!(got[..head.len()] == *head, "the base part");
        for (i, w) in got[head.len()..].chunks(4).enumerate() {
            assert_eq!(w, (i as u32).to_le_bytes(), "append {i}");
        }
    }
}

/// How long a first sequential read of a file of `n` 4-byte appends takes
/// (`cargo test --release --lib -- --ignored tiny_appends_read_time
/// --nocapture`): a measurement for generic/069, not a test of a time.
#[test]
#[ignore]
fn tiny_appends_read_time() {
    for n in [100_000u32, 300_000, 600_000, 1_200_000] {
        let env = env();
        let f = env.fork();
        let file = f.create_open(ROOT_INO, b"log", 0o644, 0, 0).unwrap().ino;
        for i in 0..n {
            f.append(file, &i.to_le_bytes()).unwrap();
        }
        let t = std::time::Instant::now();
        let mut at = 0u64;
        loop {
            let part = f.read(file, at, 131_072).unwrap();
            if part.is_empty() {
                break;
            }
            at += part.len() as u64;
        }
        assert_eq!(at, 4 * u64::from(n));
        eprintln!("{n} appends: first read {:.2?}", t.elapsed());
    }
}

#[test]
fn a_small_random_read_of_a_base_file_decodes_only_its_part() {
    let env = env();
    let f = env.fork();
    let i = ino(&f, "big.bin");
    let want = fs::read(env._tmp.path().join("src/big.bin")).unwrap();
    let ids: Vec<ObjectId> = f.base_chunks(i).into_iter().map(|c| c.0).collect();
    // Each more than the read-ahead's slack away from the one before, and
    // one across the edge of two chunks.
    for at in [100_000u64, 1_300_000, 2_900_000, 65_530, 1_900_000] {
        let got = f.read(i, at, 4096).unwrap();
        let end = (at as usize + 4096).min(want.len());
        assert!(got == want[at as usize..end], "4 KiB at {at}");
    }
    for id in &ids {
        assert_eq!(f.chunk_held(id), (false, false), "{id} was read whole");
    }
    // A larger read reads its chunk whole (and keeps it).
    assert!(f.read(i, 700_000, 100_000).unwrap() == want[700_000..800_000]);
    assert!(ids.iter().any(|id| f.chunk_held(id).0));
}

#[test]
fn fold_changes_only_what_changed_and_shares_chunks() {
    let env = env();
    Fork::create(&env.store, "g", &env.base).unwrap();
    let f = Fork::open(env.store.clone(), "g").unwrap();
    write_path(&f, "dir/sub/deeper/deep.txt", 0, b"DEEP");
    write_path(&f, "big.bin", 1_500_000, b"an edit in the middle");
    let (p, n) = parent(&f, "dir/a.txt");
    f.unlink(p, &n).unwrap();
    f.mknod(ROOT_INO, b"added", Kind::File, 0o644, 0, 0, 0)
        .unwrap();
    // Loaded but unchanged: must keep its tree id.
    let _ = ino(&f, "other/x/y.txt");
    let new = f.commit("edit").unwrap();
    let a = env.store.read_checkpoint(&env.base).unwrap();
    let b = env.store.read_checkpoint(&new).unwrap();
    assert_eq!(b.parents, vec![env.base]);
    let changes: Vec<(String, ingest::ChangeKind)> = ingest::diff(&env.store, &a, &b)
        .unwrap()
        .into_iter()
        .map(|c| (String::from_utf8_lossy(&c.path).into_owned(), c.kind))
        .collect();
    let paths: Vec<&str> = changes.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            ".",
            "added",
            "big.bin",
            "dir",
            "dir/a.txt",
            "dir/sub/deeper/deep.txt"
        ],
        "{changes:?}"
    );
    for (p, k) in &changes {
        if let ingest::ChangeKind::Changed(what) = k
            && ["dir", "."].contains(&p.as_str())
        {
            assert_eq!(
                what, "mtime",
                "{p}: directories changed only by their entries"
            );
        }
    }
    let entry = |c: &Checkpoint, p: &str| env.store.lookup_path(c, p.as_bytes()).unwrap().unwrap();
    // Directories whose content changed deeper down get new trees but the
    // same metadata; untouched subtrees keep their tree ids.
    assert_ne!(entry(&a, "dir/sub"), entry(&b, "dir/sub"));
    for unchanged in [
        "other",
        "empty",
        "other/x/y.txt",
        "link1",
        "dir/link2",
        "sym",
    ] {
        assert_eq!(entry(&a, unchanged), entry(&b, unchanged), "{unchanged}");
    }
    let ext = |c: &Checkpoint| match entry(c, "big.bin").content {
        crate::store::Content::Extents(x) => x,
        _ => panic!(),
    };
    let (ea, eb) = (ext(&a), ext(&b));
    let shared = eb.iter().filter(|x| ea.contains(x)).count();
    assert!(ea.len() >= 6, "multi-chunk file: {}", ea.len());
    assert!(
        shared + 2 >= eb.len(),
        "shares most chunks: {shared} of {}",
        eb.len()
    );
    // The committed tree reads back as the fork did, and no changes = same head.
    let dumped = dump(&f);
    assert_eq!(f.commit("nothing").unwrap(), new);
    drop(f);
    let f = Fork::open(env.store.clone(), "g").unwrap();
    assert_eq!(dump(&f), dumped);
    let mut out = Vec::new();
    env.store
        .copy_content(&entry(&b, "big.bin"), &mut out, "big")
        .unwrap();
    assert_eq!(out, cat(&f, "big.bin"));
}

#[test]
fn commits_reuse_unchanged_directory_trees_and_keep_changes_at_any_depth() {
    let env = env();
    let f = env.fork();
    // Load everything once; the first commit stores every loaded tree.
    let _ = dump(&f);
    write_path(&f, "hello.txt", 0, b"H");
    f.commit("load").unwrap();
    let step = |i: usize, what: &str, op: &dyn Fn(&Fork)| {
        op(&f);
        let head = f.commit(what).unwrap();
        let name = format!("check{i}");
        env.create(&name);
        let mut info = read_json_head(&env, &name);
        info.checkpoint = head;
        set_head(&env, &name, &info);
        let c = env.open(&name);
        assert_eq!(dump(&c), dump(&f), "{what}: the commit holds the change");
        // Its stats count the whole tree, reused directories included.
        let ckpt = env.store.read_checkpoint(&head).unwrap();
        let stats = ckpt.source.stats.clone().unwrap();
        let (mut entries, mut bytes) = (0, 0);
        let mut stack = vec![env.store.root_entry(&ckpt).unwrap()];
        while let Some(e) = stack.pop() {
            entries += 1;
            match e.content {
                crate::store::Content::Tree(t) => {
                    stack.extend(env.store.get_tree(&t, "test").unwrap().entries)
                }
                _ if e.kind == Kind::File => bytes += e.size,
                _ => {}
            }
        }
        assert_eq!(
            (stats.entries, stats.bytes),
            (entries, bytes),
            "{what}: stats"
        );
    };
    step(0, "deep data", &|f| {
        write_path(f, "dir/sub/deeper/deep.txt", 3, b"X")
    });
    step(1, "xattr", &|f| {
        let i = ino(f, "other/x/y.txt");
        f.setxattr(i, b"user.k", b"v", XattrMode::Create).unwrap()
    });
    step(2, "dir mode", &|f| {
        let mode = SetAttr {
            perm: Some(0o700),
            ..Default::default()
        };
        f.setattr(ino(f, "other/x"), &mode).unwrap();
    });
    step(3, "rename across", &|f| {
        let (p, n) = parent(f, "other/x/y.txt");
        let to = ino(f, "dir/sub");
        f.rename(p, &n, to, b"y2", RenameMode::Replace).unwrap()
    });
    step(4, "hardlink", &|f| {
        f.link(ino(f, "dir/sub/y2"), ino(f, "empty"), b"hl")
            .unwrap();
    });
    step(5, "unlink a link", &|f| {
        f.unlink(ino(f, "empty"), b"hl").unwrap()
    });
    step(6, "deep mkdir", &|f| {
        let d = f
            .mkdir(ino(f, "dir/sub/deeper"), b"new", 0o755, 0, 0)
            .unwrap();
        let a = f.mknod(d.ino, b"n", Kind::File, 0o644, 0, 0, 0).unwrap();
        f.write(a.ino, 0, b"new file").unwrap();
    });
    step(7, "move a directory", &|f| {
        let to = ino(f, "other");
        f.rename(ino(f, "dir"), b"sub", to, b"sub", RenameMode::Replace)
            .unwrap()
    });
    step(8, "truncate", &|f| {
        let size = SetAttr {
            size: Some(12345),
            ..Default::default()
        };
        f.setattr(ino(f, "big.bin"), &size).unwrap();
    });
    step(9, "change in the moved directory", &|f| {
        write_path(f, "other/sub/deeper/new/n", 0, b"N")
    });
    step(10, "a hardlinked base file", &|f| {
        write_path(f, "dir/link2", 0, b"L")
    });
}

#[test]
fn hardlink_changed_through_one_name_is_consistent_in_the_commit() {
    let env = env();
    Fork::create(&env.store, "h", &env.base).unwrap();
    let f = Fork::open(env.store.clone(), "h").unwrap();
    // Only the root is loaded: dir/link2 sits in an unloaded subtree.
    let l1 = ino(&f, "link1");
    f.setattr(
        l1,
        &SetAttr {
            perm: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    f.write(l1, 0, b"CHANGED").unwrap();
    let new = f.commit("c").unwrap();
    let b = env.store.read_checkpoint(&new).unwrap();
    let e1 = env.store.lookup_path(&b, b"link1").unwrap().unwrap();
    let e2 = env.store.lookup_path(&b, b"dir/link2").unwrap().unwrap();
    assert_eq!(e1.link_id, e2.link_id);
    assert_eq!(e1.content, e2.content);
    assert_eq!((e1.perm, e2.perm), (0o600, 0o600));
    drop(f);
    let f = Fork::open(env.store.clone(), "h").unwrap();
    assert_eq!(ino(&f, "link1"), ino(&f, "dir/link2"));
    assert_eq!(cat(&f, "dir/link2"), b"CHANGED");
}

#[test]
fn move_head_needs_a_clean_journal_and_a_descendant() {
    let env = env();
    // Another fork makes a descendant of the base (as a pull would bring one).
    Fork::create(&env.store, "other", &env.base).unwrap();
    let o = Fork::open(env.store.clone(), "other").unwrap();
    o.write(ino(&o, "dir/a.txt"), 0, b"A from elsewhere")
        .unwrap();
    let next = o.commit("elsewhere").unwrap();
    drop(o);

    Fork::create(&env.store, "f", &env.base).unwrap();
    // Directory loads (a read-only walk) are not changes.
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert_eq!(cat(&f, "dir/sub/deeper/deep.txt"), b"deep data\n");
    drop(f);
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert!(!f.has_uncommitted());
    assert_eq!(f.move_head(&next, false).unwrap(), env.base);
    // It opens at the new head, its journal restarted there, and works on.
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert_eq!(f.head(), next);
    assert_eq!(cat(&f, "dir/a.txt"), b"A from elsewhere");
    f.write(ino(&f, "hello.txt"), 0, b"HELLO").unwrap();
    f.sync().unwrap();
    drop(f);
    // A change not committed: refused.
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert!(f.has_uncommitted());
    assert!(matches!(
        f.move_head(&env.base, true),
        Err(Error::Uncommitted(n)) if n == "f"
    ));
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert_eq!(cat(&f, "hello.txt"), b"HELLO\n");
    let mine = f.commit("mine").unwrap();
    drop(f);
    // Back to the base is not a fast-forward: refused unless forced.
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert!(matches!(
        f.move_head(&env.base, false),
        Err(Error::NotAncestor { head, new, .. }) if head == mine && new == env.base
    ));
    let f = Fork::open(env.store.clone(), "f").unwrap();
    let given = ino(&f, "hello.txt").max(ino(&f, "dir/sub/deeper/deep.txt"));
    // The write left hello.txt's atime before its mtime: the commit kept it.
    assert!(kept_atimes(&f).contains_key("/hello.txt"));
    assert_eq!(f.move_head(&env.base, true).unwrap(), mine);
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert_eq!(cat(&f, "hello.txt"), b"hello\n");
    // A head move starts from a fresh state: the fork's atimes are dropped.
    assert_eq!(kept_atimes(&f), BTreeMap::new());
    // Numbering goes on past the numbers given before the move: a file
    // handle of an inode from then never names another one (export).
    assert!(ino(&f, "hello.txt") > given);
    // A crash after a head move wrote HEAD but before its segment existed:
    // the next open starts the segment with a map, and records appended
    // after it replay at the open after that.
    Fork::create(&env.store, "c", &env.base).unwrap();
    let c = Fork::open(env.store.clone(), "c").unwrap();
    assert_eq!(cat(&c, "dir/a.txt"), b"a");
    // A commit with nothing to fold does nothing; one with a change rotates.
    assert_eq!(c.commit("nothing").unwrap(), env.base);
    assert_eq!(fs::read_dir(journal_dir(&env, "c")).unwrap().count(), 1);
    write_path(&c, "dir/a.txt", 0, b"A");
    c.commit("a change").unwrap();
    let _ = ino(&c, "other/x/y.txt");
    drop(c);
    let dir = fork_dir(&env.store, "c");
    let last = fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            u64::from_str_radix(n.trim_end_matches(".wal"), 16).unwrap()
        })
        .max()
        .unwrap();
    assert!(last > 0);
    fs::write(
        dir.join("HEAD"),
        serde_json::to_vec(&ForkHead {
            checkpoint: next,
            journal_from: last + 1,
        })
        .unwrap(),
    )
    .unwrap();
    let c = Fork::open(env.store.clone(), "c").unwrap();
    assert!(!c.has_uncommitted());
    c.write(ino(&c, "dir/sub/deeper/deep.txt"), 0, b"DEEP")
        .unwrap();
    c.sync().unwrap();
    drop(c);
    let c = Fork::open(env.store.clone(), "c").unwrap();
    assert_eq!(cat(&c, "dir/sub/deeper/deep.txt"), b"DEEP data\n");
    assert_eq!(cat(&c, "dir/a.txt"), b"A from elsewhere");
    drop(c);

    // fork.json written before `upstream` existed still loads.
    let info = read_fork_info(&env.store, "f").unwrap().unwrap();
    assert_eq!(info.upstream, None);
    let json = fs::read_to_string(fork_dir(&env.store, "f").join("fork.json")).unwrap();
    assert!(!json.contains("upstream"), "{json}");
}

// ------------------------------------------------------------------ ACLs

/// An ACL value as Linux hands it over: (tag, perm, id) entries.
fn acl_value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn acls_follow_the_mode_are_inherited_and_replay() {
    const U: u32 = u32::MAX;
    let env = env();
    let f = env.fork();
    let hello = ino(&f, "hello.txt");
    let perm = |i| f.getattr(i).unwrap().perm;
    let access = |i| f.getxattr(i, acl::ACCESS).ok();
    // setfacl -m g:99:rw on a 0644 file: the mask becomes the group bits.
    let g99 = acl_value(&[(1, 6, U), (4, 4, U), (8, 6, 99), (0x10, 6, U), (0x20, 4, U)]);
    f.setattr(
        hello,
        &SetAttr {
            perm: Some(0o2644),
            ..SetAttr::default()
        },
    )
    .unwrap();
    f.setxattr_as(hello, acl::ACCESS, &g99, XattrMode::Any, &|_| false)
        .unwrap();
    assert_eq!(perm(hello), 0o664, "mode from the ACL; setgid dropped");
    assert_eq!(access(hello), Some(g99.clone()), "stored byte for byte");
    // chmod rewrites the mask (and owner and other).
    f.setattr(
        hello,
        &SetAttr {
            perm: Some(0o640),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let masked = acl_value(&[(1, 6, U), (4, 4, U), (8, 6, 99), (0x10, 4, U), (0x20, 0, U)]);
    assert_eq!(access(hello), Some(masked));
    // An ACL the mode can say is not stored; removing a missing ACL is fine.
    let plain = acl_value(&[(1, 7, U), (4, 5, U), (0x20, 1, U)]);
    f.setxattr(hello, acl::ACCESS, &plain, XattrMode::Create)
        .unwrap();
    assert_eq!((perm(hello), access(hello)), (0o751, None));
    f.removexattr(hello, acl::ACCESS).unwrap();
    assert!(matches!(
        f.setxattr(hello, acl::ACCESS, b"junk", XattrMode::Any),
        Err(Error::Posix(Posix::Invalid(_)))
    ));
    // A default ACL: new entries are masked by it, not by the umask.
    let dir = f.mkdir(ROOT_INO, b"d", 0o755, 0, 0).unwrap().ino;
    let default = acl_value(&[(1, 7, U), (2, 7, 99), (4, 5, U), (0x10, 7, U), (0x20, 5, U)]);
    f.setxattr(dir, acl::DEFAULT, &default, XattrMode::Any)
        .unwrap();
    let new = |kind, perm, umask| NewNode {
        umask,
        ..NewNode::new(kind, perm, 0, 0)
    };
    let file = f
        .make(dir, b"f", &new(Kind::File, 0o666, 0o077), true)
        .unwrap();
    f.release(file.ino);
    assert_eq!(file.perm, 0o664);
    let inherited = acl_value(&[(1, 6, U), (2, 7, 99), (4, 5, U), (0x10, 6, U), (0x20, 4, U)]);
    assert_eq!(access(file.ino), Some(inherited));
    assert_eq!(f.getxattr(file.ino, acl::DEFAULT).ok(), None);
    let sub = f
        .make(dir, b"sub", &new(Kind::Dir, 0o777, 0o077), false)
        .unwrap();
    assert_eq!(sub.perm, 0o775);
    assert_eq!(f.getxattr(sub.ino, acl::DEFAULT).unwrap(), default);
    let link = f.symlink(dir, b"s", b"f", 0, 0).unwrap();
    assert_eq!((link.perm, access(link.ino)), (0o777, None));
    let plain_dir = f
        .make(ROOT_INO, b"p", &new(Kind::Dir, 0o777, 0o027), false)
        .unwrap();
    assert_eq!((plain_dir.perm, access(plain_dir.ino)), (0o750, None));
    // All of it is in the journal, and in a commit.
    let live = dump(&f);
    f.sync().unwrap();
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(dump(&f), live, "replayed");
    f.commit("acls").unwrap();
    drop(f);
    assert_eq!(dump(&env.open("f")), live, "committed");
}

// ------------------------------------------------------------------ copy_file_range

/// Bytes of records in the fork's journal segments (not the zeros
/// preallocated after them).
fn journal_bytes(env: &Env, name: &str) -> u64 {
    fs::read_dir(journal_dir(env, name))
        .unwrap()
        .map(|e| frames(&fs::read(e.unwrap().path()).unwrap()).1 as u64)
        .sum()
}

/// A new empty file at `path`; its inode.
fn new_file(f: &Fork, path: &str) -> u64 {
    let (p, n) = parent(f, path);
    let a = f.create_open(p, &n, 0o644, 0, 0).unwrap();
    f.release(a.ino);
    a.ino
}

#[test]
fn copy_range_shares_committed_data_and_copies_the_rest() {
    let env = env();
    // Real files, to measure the journal on disk.
    Fork::create(&env.store, "f", &env.base).unwrap();
    let f = Fork::open(env.store.clone(), "f").unwrap();
    let big = cat(&f, "big.bin");
    let src = ino(&f, "big.bin");
    // Committed data: shared, so the journal grows by records, not bytes.
    let before = journal_bytes(&env, "f");
    let dst = new_file(&f, "copy.bin");
    let n = f.copy_range(src, 0, dst, 0, 1 << 40).unwrap();
    assert_eq!(n, big.len() as u64, "clipped to the source's size");
    assert_eq!(read_all(&f, dst), big);
    let grew = journal_bytes(&env, "f") - before;
    assert!(
        grew < 64 << 10,
        "a 3 MiB copy of committed data logged {grew} bytes"
    );

    // Data written since the last commit is copied; a copy into the middle
    // of a file and past its end (a hole before it) lands where asked.
    write_path(&f, "big.bin", 100_000, b"fresh bytes");
    let mid = new_file(&f, "mid.bin");
    f.write(mid, 0, &[7u8; 50]).unwrap();
    assert_eq!(f.copy_range(src, 99_990, mid, 20, 40).unwrap(), 40);
    let mut want = vec![7u8; 60];
    want[20..60].copy_from_slice(&cat(&f, "big.bin")[99_990..100_030]);
    assert_eq!(read_all(&f, mid), want);
    assert_eq!(f.copy_range(src, 0, mid, 1000, 10).unwrap(), 10);
    want.resize(1000, 0);
    want.extend_from_slice(&big[..10]);
    assert_eq!(read_all(&f, mid), want);

    // A hole in the source punches the destination and extends it.
    let holey = new_file(&f, "holey");
    f.write(holey, 0, b"xx").unwrap();
    f.setattr(
        holey,
        &SetAttr {
            size: Some(5000),
            ..SetAttr::default()
        },
    )
    .unwrap();
    let filled = new_file(&f, "filled");
    f.write(filled, 0, &[1u8; 100]).unwrap();
    assert_eq!(f.copy_range(holey, 0, filled, 0, 1 << 20).unwrap(), 5000);
    let mut want = vec![0u8; 5000];
    want[..2].copy_from_slice(b"xx");
    assert_eq!(read_all(&f, filled), want);
    // Past the source's end: nothing.
    assert_eq!(f.copy_range(holey, 6000, filled, 0, 10).unwrap(), 0);
    // Not files: refused.
    assert!(f.copy_range(ROOT_INO, 0, filled, 0, 10).is_err());
    assert!(f.copy_range(src, 0, ROOT_INO, 0, 10).is_err());

    // Replay gives the same tree; so does a commit, and its checkpoint.
    let seen = dump(&f);
    drop(f);
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert_eq!(dump(&f), seen, "replayed");
    f.commit("copies").unwrap();
    assert_eq!(dump(&f), seen, "committed");
    drop(f);
    let f = Fork::open(env.store.clone(), "f").unwrap();
    assert_eq!(dump(&f), seen, "reopened after the commit");
}

/// A copy made while a commit folds: its pieces name committed data at
/// offsets where the fold read other bytes, and the commit's rebase must
/// leave them alone (and the next commit store them).
#[test]
fn copy_range_during_a_commit_survives_its_rebase() {
    let env = env();
    let f = env.fork();
    let big = cat(&f, "big.bin");
    let (src, dst) = (ino(&f, "big.bin"), ino(&f, "hello.txt"));
    // Both files changed, so the fold reads both and the rebase visits both.
    write_path(&f, "big.bin", 0, b"B");
    write_path(&f, "hello.txt", 0, b"H");
    let mut big_now = big.clone();
    big_now[0] = b'B';
    let mut copied = false;
    f.commit_with("racing", |step| {
        if step == CommitStep::Folded {
            // Committed data (past the edit) into the middle of hello.txt's
            // range the fold already read, and beyond.
            f.copy_range(src, 1_000_000, dst, 2, 200_000).unwrap();
            copied = true;
        }
        Ok(())
    })
    .unwrap();
    assert!(copied);
    let mut want = b"Hello\n".to_vec();
    want.truncate(2);
    want.extend_from_slice(&big_now[1_000_000..1_200_000]);
    assert_eq!(cat(&f, "hello.txt"), want, "live after the rebase");
    let head = f.commit("after").unwrap();
    assert_eq!(cat(&f, "hello.txt"), want, "live after the next commit");
    drop(f);
    let f = env.open("f");
    assert_eq!(cat(&f, "hello.txt"), want, "replayed");
    let ckpt = env.store.read_checkpoint(&head).unwrap();
    let entry = env.store.lookup_path(&ckpt, b"hello.txt").unwrap().unwrap();
    let mut out = Vec::new();
    env.store
        .copy_content(&entry, &mut out, "hello.txt")
        .unwrap();
    assert_eq!(out, want, "in the checkpoint");
}

// ------------------------------------------------------------ provenance

/// Requester `pid` named `command` (uid 1000).
fn who(pid: u32, command: &str) -> Arc<ops::Who> {
    Arc::new(ops::Who {
        pid,
        uid: 1000,
        command: command.as_bytes().to_vec(),
        run: Vec::new(),
    })
}

/// (op, path, new path, pid, command, count, bytes) of each line.
type Row = (String, String, Option<String>, u32, String, u64, u64);

fn rows(lines: &[ops::OpLine]) -> Vec<Row> {
    lines
        .iter()
        .map(|l| {
            let l = l.clone();
            (l.op, l.path, l.new_path, l.pid, l.command, l.count, l.bytes)
        })
        .collect()
}

fn row(
    op: &str,
    path: &str,
    new: Option<&str>,
    pid: u32,
    cmd: &str,
    count: u64,
    bytes: u64,
) -> Row {
    (
        op.into(),
        path.into(),
        new.map(Into::into),
        pid,
        cmd.into(),
        count,
        bytes,
    )
}

/// The operation log: a tmpfile is `tmpfile` at `<unlinked inode N>` (left
/// out of a revert) and its writes there, until a `link` names it; a
/// whiteout rename is a `rename` (the whiteout is no line of its own) and
/// the whiteout has the old name afterwards. The same after replay.
#[test]
fn the_operation_log_names_tmpfiles_and_whiteout_renames() {
    let e = env();
    e.create("p");
    let f = e.open("p");
    let dir = f.lookup(ROOT_INO, b"dir").unwrap().ino;
    let alpha = who(10, "alpha");
    let t = ops::on_behalf_of(alpha.clone(), || {
        let t = tmpfile(&f, dir, 0o600).ino;
        f.write(t, 0, b"abc").unwrap();
        f.link(t, dir, b"named").unwrap();
        f.rename_whiteout(dir, b"named", ROOT_INO, b"out", false, 0, 0)
            .unwrap();
        f.setattr(
            ino(&f, "dir/named"),
            &SetAttr {
                perm: Some(0o600),
                ..SetAttr::default()
            },
        )
        .unwrap();
        t
    });
    let unnamed = format!("<unlinked inode {t}>");
    let want = vec![
        row("tmpfile", &unnamed, None, 10, "alpha", 1, 0),
        row("write", &unnamed, None, 10, "alpha", 1, 3),
        row("link", "dir/named", None, 10, "alpha", 1, 0),
        row("rename", "dir/named", Some("out"), 10, "alpha", 1, 0),
        row("chmod", "dir/named", None, 10, "alpha", 1, 0),
    ];
    assert_eq!(rows(&f.uncommitted_ops()), want);
    f.sync().unwrap();
    drop(f);
    let f = e.open("p");
    assert_eq!(rows(&f.uncommitted_ops()), want, "replayed");
}

#[test]
fn every_change_names_its_requester_across_replay_and_commit() {
    let e = env();
    e.create("p");
    let f = e.open("p");
    let hello = f.lookup(ROOT_INO, b"hello.txt").unwrap().ino;
    let dir = f.lookup(ROOT_INO, b"dir").unwrap().ino;
    let (alpha, beta) = (who(10, "alpha"), who(20, "beta"));
    ops::on_behalf_of(alpha.clone(), || {
        // Three writes of one process to one file: one entry.
        f.write(hello, 0, b"HE").unwrap();
        f.append(hello, b"more").unwrap();
        f.write(hello, 100, b"x").unwrap();
        let new = f.create_open(dir, b"new.txt", 0o644, 0, 0).unwrap().ino;
        f.write(new, 0, b"abc").unwrap();
    });
    ops::on_behalf_of(beta.clone(), || {
        f.rename(dir, b"new.txt", ROOT_INO, b"moved.txt", RenameMode::Replace)
            .unwrap();
        f.unlink(dir, b"a.txt").unwrap();
        f.mkdir(ROOT_INO, b"d2", 0o755, 0, 0).unwrap();
        let set = SetAttr {
            perm: Some(0o600),
            ..SetAttr::default()
        };
        f.setattr(hello, &set).unwrap();
    });
    // Not on anyone's behalf: unknown.
    f.write(hello, 0, b"?").unwrap();
    let want = vec![
        row("write", "hello.txt", None, 10, "alpha", 3, 7),
        row("create", "dir/new.txt", None, 10, "alpha", 1, 0),
        row("write", "dir/new.txt", None, 10, "alpha", 1, 3),
        row("rename", "dir/new.txt", Some("moved.txt"), 20, "beta", 1, 0),
        row("unlink", "dir/a.txt", None, 20, "beta", 1, 0),
        row("mkdir", "d2", None, 20, "beta", 1, 0),
        row("chmod", "hello.txt", None, 20, "beta", 1, 0),
        row("write", "hello.txt", None, 0, "", 1, 1),
    ];
    assert_eq!(rows(&f.uncommitted_ops()), want);
    assert_eq!(f.uncommitted_ops()[0].range, Some([0, 101]));
    // The journal says the same after a reopen.
    drop(f);
    let f = e.open("p");
    assert_eq!(rows(&f.uncommitted_ops()), want);
    // A commit keeps it as an object its record names, and starts afresh.
    let c = f.commit("c1").unwrap();
    let ck = e.store.read_checkpoint(&c).unwrap();
    let id = ck.source.ops.expect("a commit names its operation log");
    let stored = e.store.get_object(&id, "ops").unwrap();
    assert_eq!(rows(&ops::from_jsonl(&stored).unwrap()), want);
    assert!(f.uncommitted_ops().is_empty());
    // The next segment names its requester again.
    ops::on_behalf_of(alpha, || f.write(hello, 0, b"again").unwrap());
    drop(f);
    let f = e.open("p");
    assert_eq!(
        rows(&f.uncommitted_ops()),
        vec![row("write", "hello.txt", None, 10, "alpha", 1, 5)]
    );
}

/// A directory renamed (or removed and made again) changes the paths of
/// what is below it: the log names each change at the path it had then,
/// live and after a replay (directories' paths are kept between changes).
#[test]
fn paths_below_a_moved_directory_follow_it() {
    let e = env();
    e.create("p");
    let f = e.open("p");
    let w = who(10, "w");
    ops::on_behalf_of(w, || {
        let a = f.mkdir(ROOT_INO, b"a", 0o755, 0, 0).unwrap().ino;
        let b = f.mkdir(a, b"b", 0o755, 0, 0).unwrap().ino;
        let x = f.create_open(b, b"x", 0o644, 0, 0).unwrap().ino;
        f.write(x, 0, b"1").unwrap();
        f.rename(ROOT_INO, b"a", ROOT_INO, b"z", RenameMode::Replace)
            .unwrap();
        f.write(x, 1, b"2").unwrap();
        let y = f.create_open(b, b"y", 0o644, 0, 0).unwrap().ino;
        f.write(y, 0, b"3").unwrap();
        // b moves up; a directory of the same name takes its old place.
        f.rename(a, b"b", ROOT_INO, b"b", RenameMode::Replace)
            .unwrap();
        let b2 = f.mkdir(a, b"b", 0o755, 0, 0).unwrap().ino;
        let q = f.create_open(b2, b"q", 0o644, 0, 0).unwrap().ino;
        f.write(q, 0, b"4").unwrap();
        f.write(x, 2, b"5").unwrap();
        f.unlink(b2, b"q").unwrap();
        f.rmdir(a, b"b").unwrap();
        let b3 = f.mkdir(ROOT_INO, b"c", 0o755, 0, 0).unwrap().ino;
        let r = f.create_open(b3, b"r", 0o644, 0, 0).unwrap().ino;
        f.write(r, 0, b"6").unwrap();
    });
    let paths = |f: &Fork| -> Vec<(String, String, Option<String>)> {
        f.uncommitted_ops()
            .into_iter()
            .map(|l| (l.op, l.path, l.new_path))
            .collect()
    };
    let s = |o: &str, p: &str, n: Option<&str>| (o.to_string(), p.to_string(), n.map(Into::into));
    let want = vec![
        s("mkdir", "a", None),
        s("mkdir", "a/b", None),
        s("create", "a/b/x", None),
        s("write", "a/b/x", None),
        s("rename", "a", Some("z")),
        s("write", "z/b/x", None),
        s("create", "z/b/y", None),
        s("write", "z/b/y", None),
        s("rename", "z/b", Some("b")),
        s("mkdir", "z/b", None),
        s("create", "z/b/q", None),
        s("write", "z/b/q", None),
        s("write", "b/x", None),
        s("unlink", "z/b/q", None),
        s("rmdir", "z/b", None),
        s("mkdir", "c", None),
        s("create", "c/r", None),
        s("write", "c/r", None),
    ];
    assert_eq!(paths(&f), want);
    drop(f);
    assert_eq!(paths(&e.open("p")), want, "after a replay");
}

#[test]
fn a_requester_is_journaled_once_until_it_changes() {
    let e = env();
    // On disk (the journal's bytes are measured).
    Fork::create(&e.store, "q", &e.base).unwrap();
    let f = Fork::open(e.store.clone(), "q").unwrap();
    let hello = f.lookup(ROOT_INO, b"hello.txt").unwrap().ino;
    let journal = e.store.root().join("forks/q/journal");
    let size = || -> u64 {
        fs::read_dir(&journal)
            .unwrap()
            .map(|d| {
                let p = d.unwrap().path();
                // Records end where the preallocated zeros start.
                let b = fs::read(&p).unwrap();
                b.iter().rposition(|&x| x != 0).map_or(0, |i| i as u64 + 1)
            })
            .sum()
    };
    let alpha = who(10, "alpha");
    ops::on_behalf_of(alpha.clone(), || f.append(hello, b"0123456789").unwrap());
    let one = size();
    ops::on_behalf_of(alpha.clone(), || f.append(hello, b"0123456789").unwrap());
    let two = size();
    ops::on_behalf_of(who(11, "beta"), || f.append(hello, b"0123456789").unwrap());
    let three = size();
    // The second append costs what an append costs without provenance; the
    // third one a `Who` record more.
    let append = two - one;
    assert!(three - two > append, "{one} {two} {three}");
    assert!(three - two < append + 40, "{one} {two} {three}");
}

// ------------------------------------------------------------------ chattr flags

/// Whether `r` failed with `EPERM` (immutable or append-only).
fn refused<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Posix(Posix::Immutable | Posix::AppendOnly)) => {}
        other => panic!("{what}: {other:?}, not EPERM"),
    }
}

#[test]
fn an_immutable_inode_refuses_every_change_until_the_flag_is_cleared() {
    use crate::store::model::flags::{APPEND, IMMUTABLE, NODUMP};
    let env = env();
    let f = env.fork();
    let root = ROOT_INO;
    let hello = ino(&f, "hello.txt");
    let dir = ino(&f, "dir");
    f.set_flags(hello, IMMUTABLE).unwrap();
    f.set_flags(dir, IMMUTABLE).unwrap();
    assert_eq!(f.flags(hello).unwrap(), IMMUTABLE);
    let before = dump(&f);
    refused(f.write(hello, 0, b"x"), "write");
    refused(f.append(hello, b"x"), "append");
    let size = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    refused(f.setattr(hello, &size), "truncate");
    for a in [
        SetAttr {
            perm: Some(0o600),
            ..SetAttr::default()
        },
        SetAttr {
            uid: Some(5),
            ..SetAttr::default()
        },
        SetAttr {
            mtime: Some(Time::Now),
            ..SetAttr::default()
        },
    ] {
        refused(f.setattr(hello, &a), "setattr");
    }
    refused(f.fallocate(hello, 0, 10, Fallocate::Extend), "fallocate");
    refused(f.fallocate(hello, 0, 1, Fallocate::PunchHole), "punch");
    refused(
        f.setxattr(hello, b"user.k", b"v", XattrMode::Any),
        "setxattr",
    );
    refused(f.unlink(root, b"hello.txt"), "unlink");
    refused(
        f.rename(root, b"hello.txt", root, b"moved", RenameMode::Replace),
        "rename",
    );
    refused(
        f.rename(root, b"link1", root, b"hello.txt", RenameMode::Replace),
        "rename over",
    );
    refused(f.link(hello, root, b"second"), "link");
    let big = ino(&f, "big.bin");
    refused(f.copy_range(big, 0, hello, 0, 10), "copy_file_range into");
    // The directory: no new name, none removed, none renamed in or out.
    refused(f.mkdir(dir, b"new", 0o755, 0, 0), "mkdir in");
    refused(f.create_open(dir, b"new", 0o644, 0, 0), "create in");
    refused(f.unlink(dir, b"a.txt"), "unlink in");
    refused(
        f.rename(dir, b"a.txt", root, b"out", RenameMode::Replace),
        "rename out",
    );
    refused(
        f.rename(root, b"sym", dir, b"in", RenameMode::Replace),
        "rename in",
    );
    // Other flags do not change while it stays immutable (as ext4).
    refused(f.set_flags(hello, IMMUTABLE | NODUMP), "another flag");
    refused(f.set_flags(hello, IMMUTABLE | APPEND), "append too");
    assert_eq!(dump(&f), before, "nothing changed");
    // Its contents change: a file in an immutable directory is not.
    f.write(ino(&f, "dir/a.txt"), 0, b"b").unwrap();
    // Cleared, everything works again.
    f.set_flags(hello, 0).unwrap();
    f.write(hello, 0, b"J").unwrap();
    f.unlink(root, b"hello.txt").unwrap();
    f.set_flags(dir, 0).unwrap();
    f.mkdir(dir, b"new", 0o755, 0, 0).unwrap();
}

#[test]
fn an_append_only_file_takes_appends_and_nothing_else() {
    use crate::store::model::flags::APPEND;
    let env = env();
    let f = env.fork();
    let root = ROOT_INO;
    let hello = ino(&f, "hello.txt");
    f.set_flags(hello, APPEND).unwrap();
    f.append(hello, b"more\n").unwrap();
    // A write at its end is an append; before it, not.
    f.write(hello, 11, b"end").unwrap();
    refused(f.write(hello, 0, b"x"), "overwrite");
    assert_eq!(cat(&f, "hello.txt"), b"hello\nmore\nend");
    // Writeback of the last page (the writeback cache) from its start: only
    // the bytes past the end are written, the page's others are the file's.
    f.write_back(hello, 0, b"HELLO\nMORE\nEND++").unwrap();
    assert_eq!(cat(&f, "hello.txt"), b"hello\nmore\nend++");
    for a in [
        SetAttr {
            size: Some(0),
            ..SetAttr::default()
        },
        SetAttr {
            size: Some(100),
            ..SetAttr::default()
        },
        SetAttr {
            perm: Some(0o600),
            ..SetAttr::default()
        },
        SetAttr {
            atime: Some(Time::At(5)),
            mtime: Some(Time::At(5)),
            ..SetAttr::default()
        },
    ] {
        refused(f.setattr(hello, &a), "setattr");
    }
    // Times set to now (touch) are allowed, as on Linux.
    let now = SetAttr {
        atime: Some(Time::Now),
        mtime: Some(Time::Now),
        ..SetAttr::default()
    };
    f.setattr(hello, &now).unwrap();
    // fallocate: the plain modes only (vfs_fallocate).
    f.fallocate(hello, 0, 4096, Fallocate::KeepSize).unwrap();
    f.fallocate(hello, 0, 8192, Fallocate::Extend).unwrap();
    refused(f.fallocate(hello, 0, 1, Fallocate::PunchHole), "punch");
    let zero = Fallocate::ZeroRange { keep_size: true };
    refused(f.fallocate(hello, 0, 1, zero), "zero range");
    refused(
        f.setxattr(hello, b"user.k", b"v", XattrMode::Any),
        "setxattr",
    );
    refused(f.unlink(root, b"hello.txt"), "unlink");
    refused(
        f.rename(root, b"hello.txt", root, b"m", RenameMode::Replace),
        "rename",
    );
    refused(f.link(hello, root, b"second"), "link");
    // An append-only directory takes new names but loses none.
    let dir = ino(&f, "dir");
    f.set_flags(dir, APPEND).unwrap();
    f.mkdir(dir, b"new", 0o755, 0, 0).unwrap();
    f.rename(root, b"sym", dir, b"sym", RenameMode::Replace)
        .unwrap();
    refused(f.unlink(dir, b"a.txt"), "unlink in");
    refused(
        f.rename(dir, b"a.txt", root, b"out", RenameMode::Replace),
        "rename out",
    );
    refused(
        f.rename(root, b"link1", dir, b"a.txt", RenameMode::Replace),
        "rename over",
    );
}

#[test]
fn flags_are_kept_by_commit_replay_and_checkout_and_unknown_ones_refused() {
    use crate::store::model::flags::{APPEND, IMMUTABLE, NOATIME, NODUMP};
    let env = env();
    let f = env.fork();
    let (hello, dir) = (ino(&f, "hello.txt"), ino(&f, "dir"));
    match f.set_flags(hello, 0x8) {
        Err(Error::Posix(Posix::Unsupported(_))) => {}
        other => panic!("FS_SYNC_FL: {other:?}"),
    }
    f.set_flags(hello, APPEND | NODUMP | NOATIME).unwrap();
    f.set_flags(dir, IMMUTABLE).unwrap();
    // Replayed after a crash.
    f.sync().unwrap();
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(
        f.flags(ino(&f, "hello.txt")).unwrap(),
        APPEND | NODUMP | NOATIME
    );
    assert_eq!(f.flags(ino(&f, "dir")).unwrap(), IMMUTABLE);
    // Committed: in the checkpoint's tree, and in the fork reopened on it.
    let head = f.commit("flags").unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(f.flags(ino(&f, "dir")).unwrap(), IMMUTABLE);
    refused(f.unlink(ino(&f, "dir"), b"a.txt"), "after reopening");
    let cp = env.store.read_checkpoint(&head).unwrap();
    let tree = |id: &ObjectId| env.store.get_tree(id, "test").unwrap();
    let top = tree(&tree(&cp.root).entries[0].tree_id().unwrap());
    assert_eq!(
        top.get(b"hello.txt").unwrap().flags,
        APPEND | NODUMP | NOATIME
    );
    let d = top.get(b"dir").unwrap();
    assert_eq!(d.flags, IMMUTABLE);
    assert_eq!(tree(&d.tree_id().unwrap()).get(b"a.txt").unwrap().flags, 0);
    // Checkout puts them back where they were cleared.
    f.set_flags(ino(&f, "hello.txt"), 0).unwrap();
    f.unlink(ROOT_INO, b"hello.txt").unwrap();
    f.checkout(&head, &[b"hello.txt".to_vec()]).unwrap();
    assert_eq!(
        f.flags(ino(&f, "hello.txt")).unwrap(),
        APPEND | NODUMP | NOATIME
    );
    // It replaces an entry whatever its flags, but not inside an immutable
    // directory (as for any process).
    f.set_flags(ino(&f, "big.bin"), IMMUTABLE).unwrap();
    f.checkout(&env.base, &[b"big.bin".to_vec()]).unwrap();
    assert_eq!(f.flags(ino(&f, "big.bin")).unwrap(), 0);
    refused(
        f.checkout(&env.base, &[b"dir/a.txt".to_vec()]),
        "checkout in +i",
    );
}

#[test]
fn a_merge_keeps_each_sides_flags_and_both_where_both_changed_them() {
    use crate::store::merge::{Options, merge_trees};
    use crate::store::model::flags::{APPEND, IMMUTABLE, NODUMP};
    let env = env();
    env.create("a");
    env.create("b");
    let (fa, fb) = (env.open("a"), env.open("b"));
    fa.set_flags(ino(&fa, "hello.txt"), IMMUTABLE).unwrap();
    fa.set_flags(ino(&fa, "link1"), NODUMP).unwrap();
    fb.set_flags(ino(&fb, "hello.txt"), APPEND).unwrap();
    fb.set_flags(ino(&fb, "sym"), NODUMP).unwrap();
    let (ca, cb) = (fa.commit("a").unwrap(), fb.commit("b").unwrap());
    let read = |id: &ObjectId| env.store.read_checkpoint(id).unwrap();
    let out = merge_trees(
        &env.store,
        &read(&env.base),
        &read(&ca),
        &read(&cb),
        &Options::default(),
    )
    .unwrap();
    assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
    let tree = |id: &ObjectId| env.store.get_tree(id, "test").unwrap();
    let top = tree(&out.root.tree_id().unwrap());
    let flags = |name: &[u8]| top.get(name).unwrap().flags;
    assert_eq!(flags(b"hello.txt"), IMMUTABLE | APPEND);
    assert_eq!(flags(b"link1"), NODUMP);
    assert_eq!(flags(b"sym"), NODUMP);
    assert_eq!(flags(b"big.bin"), 0);
}

// ------------------------------------------------------------------ atime

/// A read's atime under each policy: never without an option, relatime's
/// rule, every read under strictatime, directories left under nodiratime;
/// one `SetAttr` of the atime alone (the ctime stays), replayed after a
/// crash; kept by a commit (the tree has none: the `Atimes` record after
/// the commit's inode map has it).
#[test]
fn reads_update_atime_as_the_mount_option_says_and_replay_keeps_it() {
    use crate::store::model::AtimePolicy;
    let policy = |o: &str| AtimePolicy::from_options(o.split(',').filter(|o| !o.is_empty()));
    let env = env();
    let f = env.fork();
    let file = ino(&f, "hello.txt");
    let dir = ino(&f, "dir");
    let before = f.getattr(file).unwrap();
    // A base file's atime is its mtime.
    assert_eq!(before.atime_ns, before.mtime_ns);

    // No option (and noatime): nothing changes, nothing is logged.
    assert!(!f.touch_atime(file, policy("")).unwrap());
    assert!(!f.touch_atime(file, policy("strictatime,noatime")).unwrap());
    assert_eq!(f.getattr(file).unwrap(), before);

    // relatime: atime not after mtime, so updated once; then left.
    assert!(f.touch_atime(file, policy("relatime")).unwrap());
    let after = f.getattr(file).unwrap();
    assert!(after.atime_ns > before.mtime_ns, "{after:?}");
    assert_eq!(
        (after.mtime_ns, after.ctime_ns),
        (before.mtime_ns, before.ctime_ns),
        "an access changes neither mtime nor ctime"
    );
    assert!(!f.touch_atime(file, policy("relatime")).unwrap());
    assert_eq!(f.getattr(file).unwrap().atime_ns, after.atime_ns);
    // A write makes it due again.
    write_path(&f, "hello.txt", 0, b"H");
    assert!(f.touch_atime(file, policy("relatime")).unwrap());

    // strictatime: every read.
    let a1 = f.getattr(file).unwrap().atime_ns;
    std::thread::sleep(std::time::Duration::from_millis(2));
    assert!(f.touch_atime(file, policy("strictatime")).unwrap());
    let a2 = f.getattr(file).unwrap().atime_ns;
    assert!(a2 > a1, "{a1} {a2}");

    // Directories: updated, unless nodiratime.
    let d = f.getattr(dir).unwrap();
    assert!(
        !f.touch_atime(dir, policy("strictatime,nodiratime"))
            .unwrap()
    );
    assert_eq!(f.getattr(dir).unwrap().atime_ns, d.atime_ns);
    assert!(f.touch_atime(dir, policy("strictatime")).unwrap());
    let d2 = f.getattr(dir).unwrap();
    assert!(d2.atime_ns > d.atime_ns);
    assert_eq!(d2.ctime_ns, d.ctime_ns);

    // Replayed after a crash.
    let (file_attr, dir_attr) = (f.getattr(file).unwrap(), f.getattr(dir).unwrap());
    f.sync().unwrap();
    drop(f);
    env.io.crash();
    let f = env.open("f");
    assert_eq!(f.getattr(file).unwrap(), file_attr);
    assert_eq!(f.getattr(dir).unwrap(), dir_attr);

    // A commit keeps them, though the tree stores mtime and ctime only.
    f.commit("c").unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(f.getattr(file).unwrap(), file_attr);
    assert_eq!(f.getattr(dir).unwrap(), dir_attr);
    assert_ne!(file_attr.atime_ns, file_attr.mtime_ns);
}

/// Every path (the root is "/") whose atime is not its mtime, with that
/// atime: what a commit must keep.
fn kept_atimes(f: &Fork) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(ROOT_INO, String::new())];
    while let Some((ino, path)) = stack.pop() {
        let a = f.getattr(ino).unwrap();
        if a.atime_ns != a.mtime_ns {
            let shown = if path.is_empty() { "/" } else { &path };
            out.insert(shown.to_string(), a.atime_ns);
        }
        if a.kind == Kind::Dir {
            for e in f.readdir(ino).unwrap().1 {
                stack.push((
                    e.ino,
                    format!("{path}/{}", String::from_utf8_lossy(&e.name)),
                ));
            }
        }
    }
    out
}

/// The records of the segment HEAD's replay starts at, as written.
fn head_segment_records(env: &Env, name: &str) -> Vec<Record> {
    let head = read_json_head(env, name);
    let seg = journal_dir(env, name).join(wal::segment_name(head.journal_from));
    let bytes = env.io.contents(&seg).unwrap();
    frames(&bytes)
        .0
        .into_iter()
        .map(|at| {
            let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            Record::decode(&bytes[at + 8..at + 8 + len]).unwrap()
        })
        .collect()
}

/// An explicit atime, as `touch -a -d` sets it.
fn set_atime(f: &Fork, ino: u64, t: i64) {
    let a = SetAttr {
        atime: Some(Time::At(t)),
        ..Default::default()
    };
    f.setattr(ino, &a).unwrap();
}

/// generic/003 (issue 41): atimes are fork-local, as the inode numbers. A
/// commit writes those that differ from the mtime (reads under an atime
/// option, an explicit `utimensat`, a write after the last access) in an
/// `Atimes` record right after its inode map, and a replay from that
/// commit binds them: a remount after a commit shows the atimes of before.
/// A second commit keeps them (with changes and without reads); an inode
/// that is gone leaves the table; a fork whose atimes are all their mtimes
/// writes no such record.
#[test]
fn a_commit_keeps_atimes_and_a_replay_from_it_binds_them() {
    use crate::store::model::AtimePolicy;
    let strict = AtimePolicy::from_options(["strictatime"]);
    let env = env();
    let f = env.fork();
    // A chmod only: every atime is its mtime, so no record follows the map.
    f.setattr(
        ino(&f, "big.bin"),
        &SetAttr {
            perm: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    f.commit("chmod").unwrap();
    let recs = head_segment_records(&env, "f");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert!(matches!(recs[0], Record::InodeMap(_)));
    assert!(kept_atimes(&f).is_empty());

    // Reads (a file, a hardlinked file, a directory, the root, a deep
    // file), an atime before the mtime, a written file.
    for p in ["hello.txt", "link1", "dir", "", "dir/sub/deeper/deep.txt"] {
        assert!(f.touch_atime(ino(&f, p), strict).unwrap(), "{p}");
    }
    set_atime(&f, ino(&f, "other/x/y.txt"), 12345);
    write_path(&f, "dir/a.txt", 0, b"b");
    let kept = kept_atimes(&f);
    for p in [
        "/",
        "/hello.txt",
        "/link1",
        "/dir/link2",
        "/dir",
        "/dir/sub/deeper/deep.txt",
        "/other/x/y.txt",
        "/dir/a.txt",
    ] {
        assert!(kept.contains_key(p), "{p}: {kept:?}");
    }
    assert_eq!(kept["/other/x/y.txt"], 12345);
    f.commit("reads").unwrap();
    assert_eq!(kept_atimes(&f), kept, "live, after the commit");
    drop(f);
    let f = env.open("f");
    assert_eq!(kept_atimes(&f), kept, "replayed from the commit");
    let recs = head_segment_records(&env, "f");
    assert!(matches!(recs[1], Record::Atimes(_)), "{recs:?}");

    // A second commit with a change and no read keeps them.
    f.mkdir(ROOT_INO, b"new", 0o755, 0, 0).unwrap();
    f.commit("mkdir").unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(kept_atimes(&f), kept, "after a second commit");
    // One with nothing to commit leaves the journal as it is.
    f.commit("nothing").unwrap();
    drop(f);
    let f = env.open("f");
    assert_eq!(kept_atimes(&f), kept, "after an empty commit");

    // A removed file leaves the table: its number is in no record.
    let gone = ino(&f, "hello.txt");
    f.unlink(ROOT_INO, b"hello.txt").unwrap();
    let kept = kept_atimes(&f);
    assert!(!kept.contains_key("/hello.txt"));
    f.commit("rm").unwrap();
    let Some(Record::Atimes(list)) = head_segment_records(&env, "f").get(1).cloned() else {
        panic!("no atimes record");
    };
    assert!(list.iter().all(|&(i, _)| i != gone), "{list:?}");
    assert!(list.windows(2).all(|w| w[0].0 < w[1].0), "in number order");
    // Each listed number is a path kept_atimes found (a hardlink twice).
    let inos: std::collections::BTreeSet<u64> = kept.keys().map(|p| ino(&f, p)).collect();
    assert_eq!(
        list.iter().map(|&(i, _)| i).collect::<Vec<_>>(),
        Vec::from_iter(inos)
    );
    drop(f);
    let f = env.open("f");
    assert_eq!(kept_atimes(&f), kept, "after the removal's commit");
}

/// A crash at every step of a commit keeps the atimes of before it or of
/// after it (they are equal: the `Atimes` record is written and synced with
/// the inode map, before HEAD moves), and reads after the interrupted
/// commit too.
#[test]
fn a_crash_at_every_commit_step_keeps_the_atimes() {
    use crate::store::model::AtimePolicy;
    let strict = AtimePolicy::from_options(["strictatime"]);
    for stop in [
        Some(CommitStep::Rotated),
        Some(CommitStep::Folded),
        Some(CommitStep::CheckpointWritten),
        Some(CommitStep::HeadMoved),
        Some(CommitStep::Rebased),
        None,
    ] {
        let env = env();
        let f = env.fork();
        for p in ["hello.txt", "dir", "dir/a.txt"] {
            f.touch_atime(ino(&f, p), strict).unwrap();
        }
        set_atime(&f, ino(&f, "sym"), -3);
        write_path(&f, "dir/sub/deeper/deep.txt", 0, b"D");
        f.sync().unwrap();
        let before = kept_atimes(&f);
        assert_eq!(before.len(), 5, "{before:?}");
        assert_eq!(f.commit_until("c", stop).is_ok(), stop.is_none());
        assert_eq!(kept_atimes(&f), before, "{stop:?}: live");
        // A read after it, synced.
        std::thread::sleep(std::time::Duration::from_millis(2));
        f.touch_atime(ino(&f, "other/x/y.txt"), strict).unwrap();
        f.sync().unwrap();
        let after = kept_atimes(&f);
        assert_eq!(after.len(), 6);
        drop(f);
        env.io.crash();
        let f = env.open("f");
        assert_eq!(kept_atimes(&f), after, "{stop:?}: after a crash");
        // A second commit finishes what the first left.
        f.commit("again").unwrap();
        drop(f);
        env.io.crash();
        let f = env.open("f");
        assert_eq!(kept_atimes(&f), after, "{stop:?}: after the second commit");
    }
}

/// An `Atimes` record is read only right after an inode map: anywhere else
/// the journal is corrupt; after a map checked mid-replay (its commit did
/// not move HEAD) it is skipped.
#[test]
fn an_atimes_record_anywhere_but_after_an_inode_map_is_corrupt() {
    let env = env();
    let f = env.fork();
    let file = ino(&f, "hello.txt");
    f.with(|_, ctx| {
        ctx.wal
            .append(&Record::Atimes(vec![(file, 5)]).encode())
            .map(|_| ())
    })
    .unwrap();
    f.sync().unwrap();
    drop(f);
    let err = Fork::open_with(env.store.clone(), Arc::new(env.io.clone()), "f").err();
    assert!(
        matches!(&err, Some(Error::Corrupt { detail, .. }) if detail.contains("atime table")),
        "{err:?}"
    );
}

/// generic/069 (issue 41): a file of tiny `O_APPEND` writes has a piece per
/// write; its first read fetches the journal a span of nearby pieces at a
/// time (`journal_spans`), not a `pread` per write, with another file's
/// records between them too. A structural bound (pieces per read), no time.
#[test]
fn tiny_appends_are_read_back_a_span_at_a_time_not_a_read_per_write() {
    let env = env();
    let f = env.fork();
    let file = f.create_open(ROOT_INO, b"log", 0o644, 0, 0).unwrap().ino;
    let other = f
        .create_open(ROOT_INO, b"other.log", 0o644, 0, 0)
        .unwrap()
        .ino;
    let n = 20_000u32;
    for i in 0..n {
        f.append(file, &i.to_le_bytes()).unwrap();
        if i % 100 == 0 {
            f.append(other, &[7u8; 10]).unwrap();
        }
    }
    let plan = f.with(|st, _| st.plan_read(file, 0, u64::MAX)).unwrap();
    assert_eq!(plan.len(), n as usize, "a piece per append");
    let spans = state::journal_spans(&plan);
    // Every piece in exactly one span, in order.
    let mut next = 0;
    for &(first, count, _, _, len) in &spans {
        assert_eq!(first, next);
        assert!(len <= state::SPAN_MAX);
        next += count;
    }
    assert_eq!(next, plan.len());
    assert!(
        spans.len() * 1000 <= plan.len(),
        "{} reads for {} pieces",
        spans.len(),
        plan.len()
    );
    // And what the spans read is the file.
    let data = read_all(&f, file);
    assert_eq!(data.len(), 4 * n as usize);
    for (i, w) in data.chunks(4).enumerate() {
        assert_eq!(w, (i as u32).to_le_bytes(), "at {}", i * 4);
    }
    assert_eq!(read_all(&f, other), vec![7u8; 10 * (n as usize / 100)]);
}

/// chattr and atime together, as on Linux: `+A` (`FS_NOATIME_FL`) keeps an
/// inode's atime whatever the policy; an immutable file's atime is still
/// updated by a read (its other attributes are not).
#[test]
fn a_noatime_flag_keeps_atime_and_an_immutable_file_still_gets_one() {
    use crate::store::model::AtimePolicy;
    use crate::store::model::flags::{IMMUTABLE, NOATIME};
    let strict = AtimePolicy::from_options(["strictatime"]);
    let env = env();
    let f = env.fork();
    let file = ino(&f, "hello.txt");
    f.set_flags(file, NOATIME).unwrap();
    let before = f.getattr(file).unwrap();
    assert!(!f.touch_atime(file, strict).unwrap());
    assert_eq!(f.getattr(file).unwrap().atime_ns, before.atime_ns);
    f.set_flags(file, IMMUTABLE).unwrap();
    let before = f.getattr(file).unwrap();
    assert!(f.touch_atime(file, strict).unwrap());
    let after = f.getattr(file).unwrap();
    assert!(after.atime_ns > before.atime_ns, "{before:?} {after:?}");
    assert_eq!(after.ctime_ns, before.ctime_ns);
}
