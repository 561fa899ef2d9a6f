//! Seeded multi-threaded stress of one fork against reference models (no
//! FUSE; issue 8 item 4).
//!
//! For each seed, on one open fork of a small base checkpoint, at once:
//! - `WORKERS` threads, each owning directory `w<t>` and a model of it (name →
//!   bytes), doing a seeded sequence of create, write at random offsets (past
//!   the end: sparse), append, truncate (shrink and grow), rename over
//!   existing names (sometimes while the replaced file is open), unlink,
//!   open-unlink-read-release with the handle held across later ops (and
//!   written through), sync and full directory checks; after every op the
//!   touched names read exactly as the model says;
//! - a renamer in `r/` publishing versions of `cur` by write-`tmp`-then-rename;
//! - a committer calling `commit` in a loop;
//! - a reader doing readdir/lookup/read of random names everywhere (only
//!   `NotFound` may fail) and checking that `r/cur` always exists, always
//!   reads as one whole version, and never goes back to an older one.
//!
//! Then: the fork equals the models; dropped and reopened (replay after the
//! last commit) it still does; committed and reopened, so does the head
//! checkpoint read through the store. Every assertion names the seed.
//!
//! Seeded rather than a proptest state machine: the threads interleave
//! differently on every run, so a failing sequence would neither replay nor
//! shrink. The sequential model of a fork is `model_tests.rs`.

use std::collections::BTreeMap;
use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::state::Budget;
use super::testing::{Rng, base_checkpoint};
use super::*;
use crate::store::{ObjectId, Store};

const SEEDS: [u64; 5] = [
    0x5eed_0001,
    0xdead_beef_1234,
    0x0123_4567_89ab_cdef,
    42,
    0xf0f0_7777,
];
const WORKERS: usize = 4;
const OPS: usize = 3000;
/// Distinct names per worker directory (small, so renames hit existing names).
const NAMES: u64 = 8;
/// Files stay below this size.
const MAX_SIZE: u64 = 256 << 10;
/// Versions the renamer publishes.
const VERSIONS: u32 = 1000;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A generator per worker: `seed` spread over `stream` through splitmix64.
impl Rng {
    fn new(seed: u64, stream: u64) -> Rng {
        let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    fn name(&mut self) -> Vec<u8> {
        format!("f{}", self.below(NAMES)).into_bytes()
    }
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The content of version `n` of `r/cur`: `n` as u32 LE, `1 + n % 700` times.
fn version(n: u32) -> Vec<u8> {
    n.to_le_bytes().repeat(1 + (n % 700) as usize)
}

/// The version a whole `r/cur` holds, or `None` for a torn or mixed one.
fn parse_version(data: &[u8]) -> Option<u32> {
    let n = u32::from_le_bytes(data.get(..4)?.try_into().ok()?);
    (data == version(n).as_slice()).then_some(n)
}

/// All of file `ino`, read in pieces (the size as `getattr` says).
fn read_all(f: &Fork, ino: u64) -> Result<Vec<u8>> {
    let size = f.getattr(ino)?.size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let part = f.read(ino, out.len() as u64, 64 << 10)?;
        if part.is_empty() {
            break;
        }
        out.extend_from_slice(&part);
    }
    Ok(out)
}

/// A store with a base checkpoint: `w<t>/f0` (5000 bytes) and `w<t>/f1`
/// (70 KiB) per worker, and `r/cur` at version 0. Returns the models.
fn setup(seed: u64) -> (tempfile::TempDir, Arc<Store>, ObjectId, Vec<Model>) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let mut rng = Rng::new(seed, 999);
    let mut models = Vec::new();
    for t in 0..WORKERS {
        let dir = src.join(format!("w{t}"));
        fs::create_dir_all(&dir).unwrap();
        let mut m = Model::new();
        for (name, len) in [("f0", 5000), ("f1", 70 << 10)] {
            let data = rng.bytes(len);
            fs::write(dir.join(name), &data).unwrap();
            m.insert(name.as_bytes().to_vec(), data);
        }
        models.push(m);
    }
    fs::create_dir_all(src.join("r")).unwrap();
    fs::write(src.join("r/cur"), version(0)).unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let base = base_checkpoint(&store, &src, "/srv/stress");
    (tmp, store, base, models)
}

/// A file unlinked (or renamed over) while this worker held it open.
struct Held {
    ino: u64,
    data: Vec<u8>,
    /// Ops left before it is released.
    left: u32,
}

struct Worker {
    seed: u64,
    t: usize,
    dir: u64,
    model: Model,
    held: Vec<Held>,
    rng: Rng,
    step: usize,
    op: String,
}

impl Worker {
    fn ctx(&self) -> String {
        format!(
            "seed {:#x} worker {} step {} op {}",
            self.seed, self.t, self.step, self.op
        )
    }

    fn ok<T>(&self, r: Result<T>) -> T {
        r.unwrap_or_else(|e| panic!("{}: unexpected error: {e}", self.ctx()))
    }

    fn ino(&self, f: &Fork, name: &[u8]) -> u64 {
        self.ok(f.lookup(self.dir, name)).ino
    }

    /// `name` reads as the model says (or is absent when the model has no such name).
    fn check(&self, f: &Fork, name: &[u8]) {
        match (self.model.get(name), f.lookup(self.dir, name)) {
            (None, Err(Error::Posix(Posix::NotFound))) => {}
            (None, r) => panic!("{}: {} should be absent: {r:?}", self.ctx(), show(name)),
            (Some(want), Ok(a)) => {
                assert_eq!(a.kind, crate::store::Kind::File, "{}", self.ctx());
                assert_eq!(
                    a.size,
                    want.len() as u64,
                    "{}: size of {}",
                    self.ctx(),
                    show(name)
                );
                let got = self.ok(read_all(f, a.ino));
                assert!(got == *want, "{}: content of {}", self.ctx(), show(name));
            }
            (Some(_), Err(e)) => panic!("{}: lookup {}: {e}", self.ctx(), show(name)),
        }
    }

    /// The whole directory reads as the model says.
    fn check_dir(&self, f: &Fork) {
        let (_, list) = self.ok(f.readdir(self.dir));
        let names: Vec<_> = list.iter().map(|e| e.name.clone()).collect();
        let want: Vec<_> = self.model.keys().cloned().collect();
        assert_eq!(names, want, "{}: readdir", self.ctx());
        for name in &want {
            self.check(f, name);
        }
    }

    fn check_held(&self, f: &Fork, h: &Held) {
        let got = self.ok(read_all(f, h.ino));
        assert!(
            got == h.data,
            "{}: open unlinked inode {}",
            self.ctx(),
            h.ino
        );
    }

    fn pick(&mut self) -> Option<Vec<u8>> {
        let n = self.model.len() as u64;
        (n > 0).then(|| {
            let i = self.rng.below(n) as usize;
            self.model.keys().nth(i).unwrap().clone()
        })
    }

    fn hold(&mut self, f: &Fork, name: &[u8]) {
        let ino = self.ino(f, name);
        self.ok(f.open_file(ino));
        let data = self.model[name].clone();
        let left = 1 + self.rng.below(30) as u32;
        self.held.push(Held { ino, data, left });
    }

    fn step(&mut self, f: &Fork) {
        let roll = self.rng.below(100);
        let touched: Vec<Vec<u8>> = match roll {
            0..15 => {
                let name = self.rng.name();
                self.op = format!("create {}", show(&name));
                match f.create_open(self.dir, &name, 0o644, 0, 0) {
                    Ok(a) => {
                        assert!(
                            !self.model.contains_key(&name),
                            "{}: created over",
                            self.ctx()
                        );
                        f.release(a.ino);
                        self.model.insert(name.clone(), Vec::new());
                    }
                    Err(Error::Posix(Posix::Exists)) => {
                        assert!(self.model.contains_key(&name), "{}: Exists", self.ctx())
                    }
                    Err(e) => panic!("{}: {e}", self.ctx()),
                }
                vec![name]
            }
            15..40 => {
                let Some(name) = self.pick() else { return };
                let len = self.model[&name].len() as u64;
                let n = 1 + self.rng.below(4096);
                let off = self.rng.below(len + 8192).min(MAX_SIZE - n);
                let data = self.rng.bytes(n as usize);
                self.op = format!("write {} at {off} len {n} (size {len})", show(&name));
                let ino = self.ino(f, &name);
                assert_eq!(
                    self.ok(f.write(ino, off, &data)),
                    n as u32,
                    "{}",
                    self.ctx()
                );
                let m = self.model.get_mut(&name).unwrap();
                let end = (off + n) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
                vec![name]
            }
            40..50 => {
                let Some(name) = self.pick() else { return };
                let len = self.model[&name].len();
                let n = (1 + self.rng.below(3000) as usize).min(MAX_SIZE as usize - len);
                let data = self.rng.bytes(n);
                self.op = format!("append {} len {n} (size {len})", show(&name));
                let ino = self.ino(f, &name);
                assert_eq!(self.ok(f.append(ino, &data)), len as u64, "{}", self.ctx());
                self.model.get_mut(&name).unwrap().extend_from_slice(&data);
                vec![name]
            }
            50..60 => {
                let Some(name) = self.pick() else { return };
                let len = self.model[&name].len() as u64;
                let size = self.rng.below(len * 3 / 2 + 4096).min(MAX_SIZE);
                self.op = format!("truncate {} to {size} (size {len})", show(&name));
                let ino = self.ino(f, &name);
                let set = SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                let a = self.ok(f.setattr(ino, &set));
                assert_eq!(a.size, size, "{}", self.ctx());
                self.model.get_mut(&name).unwrap().resize(size as usize, 0);
                vec![name]
            }
            60..72 => {
                let Some(from) = self.pick() else { return };
                let to = self.rng.name();
                let open_dst = self.model.contains_key(&to) && from != to && self.rng.below(3) == 0;
                self.op = format!(
                    "rename {} over {}{}",
                    show(&from),
                    show(&to),
                    if open_dst { " (open)" } else { "" }
                );
                if open_dst {
                    self.hold(f, &to);
                }
                self.ok(f.rename(self.dir, &from, self.dir, &to, RenameMode::Replace));
                let data = self.model.remove(&from).unwrap();
                self.model.insert(to.clone(), data);
                vec![from, to]
            }
            72..80 => {
                let Some(name) = self.pick() else { return };
                self.op = format!("unlink {}", show(&name));
                self.ok(f.unlink(self.dir, &name));
                self.model.remove(&name);
                vec![name]
            }
            80..88 => {
                let Some(name) = self.pick() else { return };
                self.op = format!("open-unlink {}", show(&name));
                self.hold(f, &name);
                self.ok(f.unlink(self.dir, &name));
                self.model.remove(&name);
                self.check_held(f, self.held.last().unwrap());
                vec![name]
            }
            88..94 => {
                if self.held.is_empty() {
                    return;
                }
                let i = self.rng.below(self.held.len() as u64) as usize;
                let len = self.held[i].data.len() as u64;
                let n = 1 + self.rng.below(2048);
                let off = self.rng.below(len + 4096).min(MAX_SIZE - n);
                let data = self.rng.bytes(n as usize);
                let ino = self.held[i].ino;
                self.op = format!("write open unlinked inode {ino} at {off} len {n}");
                self.ok(f.write(ino, off, &data));
                let h = &mut self.held[i];
                let end = (off + n) as usize;
                if h.data.len() < end {
                    h.data.resize(end, 0);
                }
                h.data[off as usize..end].copy_from_slice(&data);
                self.check_held(f, &self.held[i]);
                vec![]
            }
            94..97 => {
                self.op = "sync".into();
                self.ok(f.sync());
                vec![]
            }
            _ => {
                self.op = "check dir".into();
                self.check_dir(f);
                vec![]
            }
        };
        for name in &touched {
            self.check(f, name);
        }
        // Held handles: still readable; release the ones whose time is up,
        // after which the inode is gone.
        let mut i = 0;
        while i < self.held.len() {
            self.held[i].left -= 1;
            if self.held[i].left == 0 {
                let h = self.held.swap_remove(i);
                self.check_held(f, &h);
                f.release(h.ino);
                assert!(
                    matches!(f.getattr(h.ino), Err(Error::Posix(Posix::NotFound))),
                    "{}: released unlinked inode {} still there",
                    self.ctx(),
                    h.ino
                );
            } else {
                i += 1;
            }
        }
    }

    fn run(mut self, f: &Fork) -> Model {
        for step in 0..OPS {
            self.step = step;
            self.step(f);
        }
        self.op = "finish".into();
        for h in std::mem::take(&mut self.held) {
            self.check_held(f, &h);
            f.release(h.ino);
        }
        self.check_dir(f);
        self.model
    }
}

/// `r/cur` goes through versions 1..=VERSIONS by write-tmp-then-rename.
fn renamer(f: &Fork, seed: u64) {
    let r = f.lookup(ROOT_INO, b"r").unwrap().ino;
    for n in 1..=VERSIONS {
        let ctx = || format!("seed {seed:#x} renamer version {n}");
        let tmp = f
            .create_open(r, b"tmp", 0o644, 0, 0)
            .unwrap_or_else(|e| panic!("{}: create: {e}", ctx()));
        let data = version(n);
        // In two writes, so a torn publication would show.
        let half = data.len() / 2;
        f.write(tmp.ino, 0, &data[..half]).unwrap();
        f.write(tmp.ino, half as u64, &data[half..]).unwrap();
        f.release(tmp.ino);
        f.rename(r, b"tmp", r, b"cur", RenameMode::Replace)
            .unwrap_or_else(|e| panic!("{}: rename: {e}", ctx()));
        if n % 50 == 0 {
            f.sync().unwrap();
        }
    }
}

/// Random readdir/lookup/read everywhere while the others run; only
/// `NotFound` may fail, and `r/cur` never vanishes, tears or goes back.
fn reader(f: &Fork, seed: u64, done: &AtomicBool) -> usize {
    let mut rng = Rng::new(seed, 1000);
    let ctx = |what: &str| format!("seed {seed:#x} reader: {what}");
    let dirs: Vec<u64> = (0..WORKERS)
        .map(|t| f.lookup(ROOT_INO, format!("w{t}").as_bytes()).unwrap().ino)
        .collect();
    let r = f.lookup(ROOT_INO, b"r").unwrap().ino;
    let mut last = 0;
    let mut rounds = 0;
    let lenient = |r: Result<Vec<u8>>, what: &str| match r {
        Ok(_) | Err(Error::Posix(Posix::NotFound)) => {}
        Err(e) => panic!("{}", ctx(&format!("{what}: {e}"))),
    };
    while !done.load(Ordering::Acquire) {
        rounds += 1;
        let d = dirs[rng.below(WORKERS as u64) as usize];
        let (_, list) = f
            .readdir(d)
            .unwrap_or_else(|e| panic!("{}", ctx(&format!("readdir: {e}"))));
        for e in list {
            // A name listed may be gone by now (unlink, rename), nothing else.
            match f.lookup(d, &e.name) {
                Ok(a) => lenient(read_all(f, a.ino), "read listed"),
                Err(Error::Posix(Posix::NotFound)) => {}
                Err(err) => panic!("{}", ctx(&format!("lookup {}: {err}", show(&e.name)))),
            }
        }
        let name = rng.name();
        match f.lookup(d, &name) {
            Ok(a) => lenient(read_all(f, a.ino), "read random"),
            Err(Error::Posix(Posix::NotFound)) => {}
            Err(err) => panic!("{}", ctx(&format!("lookup {}: {err}", show(&name)))),
        }
        // r/cur: opened so its inode cannot go away while read; a rename
        // between lookup and open may free it (retry).
        let data = loop {
            let a = f
                .lookup(r, b"cur")
                .unwrap_or_else(|e| panic!("{}", ctx(&format!("r/cur vanished: {e}"))));
            match f.open_file(a.ino) {
                Ok(()) => {}
                Err(Error::Posix(Posix::NotFound)) => continue,
                Err(e) => panic!("{}", ctx(&format!("open r/cur: {e}"))),
            }
            let data = read_all(f, a.ino);
            f.release(a.ino);
            break data.unwrap_or_else(|e| panic!("{}", ctx(&format!("read r/cur: {e}"))));
        };
        let n = parse_version(&data)
            .unwrap_or_else(|| panic!("{}", ctx(&format!("torn r/cur, {} bytes", data.len()))));
        assert!(
            n >= last,
            "{}",
            ctx(&format!("r/cur went back {last} -> {n}"))
        );
        last = n;
    }
    rounds
}

/// The fork's content equals the models (and `r/cur` the last version).
fn compare_fork(f: &Fork, models: &[Model], seed: u64, stage: &str) {
    let ctx = |what: String| format!("seed {seed:#x} {stage}: {what}");
    let (_, root) = f.readdir(ROOT_INO).unwrap();
    let mut want: Vec<Vec<u8>> = (0..WORKERS).map(|t| format!("w{t}").into_bytes()).collect();
    want.push(b"r".to_vec());
    want.sort();
    let names: Vec<_> = root.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names, want, "{}", ctx("root".into()));
    for (t, model) in models.iter().enumerate() {
        let dir = f.lookup(ROOT_INO, format!("w{t}").as_bytes()).unwrap().ino;
        let (_, list) = f.readdir(dir).unwrap();
        let names: Vec<_> = list.iter().map(|e| e.name.clone()).collect();
        let keys: Vec<_> = model.keys().cloned().collect();
        assert_eq!(names, keys, "{}", ctx(format!("readdir w{t}")));
        for (name, data) in model {
            let a = f
                .lookup(dir, name)
                .unwrap_or_else(|e| panic!("{}", ctx(format!("w{t}/{}: {e}", show(name)))));
            let got = read_all(f, a.ino).unwrap();
            assert!(
                got == *data,
                "{}",
                ctx(format!("content of w{t}/{}", show(name)))
            );
        }
    }
    let r = f.lookup(ROOT_INO, b"r").unwrap().ino;
    let (_, list) = f.readdir(r).unwrap();
    assert_eq!(list.len(), 1, "{}", ctx("r/ holds only cur".into()));
    let cur = f.lookup(r, b"cur").unwrap().ino;
    assert_eq!(
        read_all(f, cur).unwrap(),
        version(VERSIONS),
        "{}",
        ctx("r/cur".into())
    );
}

/// The checkpoint's content, read through the store, equals the models.
fn compare_checkpoint(store: &Store, id: &ObjectId, models: &[Model], seed: u64) {
    let ctx = |what: String| format!("seed {seed:#x} checkpoint {id}: {what}");
    let ckpt = store.read_checkpoint(id).unwrap();
    let content = |path: &str| {
        let e = store
            .lookup_path(&ckpt, path.as_bytes())
            .unwrap()
            .unwrap_or_else(|| panic!("{}", ctx(format!("{path} missing"))));
        let mut out = Vec::new();
        store.copy_content(&e, &mut out, path).unwrap();
        assert_eq!(
            out.len() as u64,
            e.size,
            "{}",
            ctx(format!("size of {path}"))
        );
        out
    };
    for (t, model) in models.iter().enumerate() {
        let dir = store
            .lookup_path(&ckpt, format!("w{t}").as_bytes())
            .unwrap()
            .unwrap();
        let tree = store.get_tree(&dir.tree_id().unwrap(), "w").unwrap();
        let names: Vec<_> = tree.entries.iter().map(|e| e.name.clone()).collect();
        let keys: Vec<_> = model.keys().cloned().collect();
        assert_eq!(names, keys, "{}", ctx(format!("tree of w{t}")));
        for (name, data) in model {
            let path = format!("w{t}/{}", show(name));
            assert!(
                content(&path) == *data,
                "{}",
                ctx(format!("content of {path}"))
            );
        }
    }
    assert_eq!(
        content("r/cur"),
        version(VERSIONS),
        "{}",
        ctx("r/cur".into())
    );
}

/// The fork, opened to park everything it can after every operation and
/// replayed record (`park`) or not.
fn open_fork(store: &Arc<Store>, park: bool) -> Fork {
    let io = Arc::new(RealIo);
    if park {
        Fork::open_parking(store.clone(), io, "stress", Budget::strict(0)).unwrap()
    } else {
        Fork::open_with(store.clone(), io, "stress").unwrap()
    }
}

fn run_seed(seed: u64, park: bool) {
    let (_tmp, store, base, base_models) = setup(seed);
    Fork::create(&store, "stress", &base).unwrap();
    let f = Arc::new(open_fork(&store, park));
    let done = AtomicBool::new(false);
    let commits = AtomicUsize::new(0);
    let models: Vec<Model> = std::thread::scope(|s| {
        let workers: Vec<_> = base_models
            .into_iter()
            .enumerate()
            .map(|(t, model)| {
                let f = &*f;
                s.spawn(move || {
                    let dir = f.lookup(ROOT_INO, format!("w{t}").as_bytes()).unwrap().ino;
                    Worker {
                        seed,
                        t,
                        dir,
                        model,
                        held: Vec::new(),
                        rng: Rng::new(seed, t as u64),
                        step: 0,
                        op: String::new(),
                    }
                    .run(f)
                })
            })
            .collect();
        let ren = s.spawn(|| renamer(&f, seed));
        let rd = s.spawn(|| reader(&f, seed, &done));
        let com = s.spawn(|| {
            let mut n = 0;
            while !done.load(Ordering::Acquire) {
                f.commit(&format!("stress {seed:#x} #{n}"))
                    .unwrap_or_else(|e| panic!("seed {seed:#x} commit {n}: {e}"));
                n += 1;
                commits.store(n, Ordering::Relaxed);
            }
        });
        // A panicking worker must still stop the loops, or the scope hangs.
        let models: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        let ren = ren.join();
        done.store(true, Ordering::Release);
        let rd = rd.join();
        let com = com.join();
        let models: Vec<Model> = models
            .into_iter()
            .map(|m| m.unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        for r in [ren.map(|_| ()), rd.map(|_| ()), com] {
            r.unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
        models
    });
    eprintln!(
        "seed {seed:#x}: {} commits during the run",
        commits.load(Ordering::Relaxed)
    );
    compare_fork(&f, &models, seed, "after the run");
    // Replay from the last commit.
    drop(Arc::try_unwrap(f).expect("threads are done"));
    let f = open_fork(&store, park);
    compare_fork(&f, &models, seed, "reopened");
    // Commit everything, reopen, and read the head checkpoint.
    let head = f.commit("final").unwrap();
    drop(f);
    let f = open_fork(&store, park);
    assert_eq!(
        f.head(),
        head,
        "seed {seed:#x}: head after the final commit"
    );
    compare_fork(&f, &models, seed, "committed and reopened");
    compare_checkpoint(&store, &head, &models, seed);
}

#[test]
fn stress_fork_against_models() {
    for seed in SEEDS {
        run_seed(seed, false);
    }
}

/// The same with a fork that parks all it can after every operation: the
/// base directories the workers have not changed yet, and everything once
/// reopened from a commit (`state/park.rs`).
#[test]
fn stress_parking_fork_against_models() {
    for seed in &SEEDS[..2] {
        run_seed(*seed, true);
    }
}
