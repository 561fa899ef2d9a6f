//! Incremental snapshots: a parent's stat cache lets unchanged files be
//! reused without opening them (proved with the open-recording test hook),
//! and an incremental snapshot equals a full one of the same state.

use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::ingest::statcache::{self, Parent, Stat, racy};

const SEC: i64 = 1_000_000_000;

fn mtime_ns(m: &fs::Metadata) -> i64 {
    m.mtime() * SEC + m.mtime_nsec()
}

fn ctime_ns(m: &fs::Metadata) -> i64 {
    m.ctime() * SEC + m.ctime_nsec()
}

/// Write `res` as a checkpoint of `dir` with its stat cache, as the CLI does;
/// returns it as a parent for the next snapshot.
fn publish(store: &Store, dir: &Path, res: &SnapshotResult) -> Parent {
    let mut ckpt = checkpoint(res.root);
    ckpt.origin = Some(dir.to_str().unwrap().to_string());
    ckpt.time_ns = statcache::now_ns();
    let id = store.write_checkpoint(&ckpt).unwrap();
    statcache::save(store, &id, &res.stat_cache).unwrap();
    Parent::load(store, &id, &ckpt, dir.to_str().unwrap()).unwrap()
}

fn snap_from(store: &Store, dir: &Path, parent: Option<&Parent>) -> SnapshotResult {
    let opts = SnapshotOptions {
        parent: parent.cloned(),
        ..Default::default()
    };
    snapshot(store, dir, &opts).unwrap()
}

/// The files under `dir` the snapshot opened, relative, sorted.
fn opened(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = test_hook::take_opened(dir)
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn set_times(p: &Path, mtime_ns: i64) {
    let t = UNIX_EPOCH + Duration::from_nanos(mtime_ns as u64);
    File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_times(fs::FileTimes::new().set_accessed(t).set_modified(t))
        .unwrap();
}

/// A tree of small files, with a hardlink pair, an xattr, a sparse file, a
/// symlink and nested directories. Every regular file's mtime is old.
fn fixture(src: &Path) {
    fs::create_dir_all(src.join("d/e")).unwrap();
    fs::create_dir_all(src.join("d.x")).unwrap();
    for (i, name) in ["a", "b", "c", "d/f", "d/e/g", "d.x/h", "z"]
        .iter()
        .enumerate()
    {
        fs::write(src.join(name), format!("content of {name} {i}\n")).unwrap();
    }
    fs::write(src.join("big"), noise(600 << 10, 3)).unwrap();
    let sparse = File::create(src.join("sparse")).unwrap();
    sparse.set_len(8 << 20).unwrap();
    sparse.write_all_at(&noise(4096, 5), 4 << 20).unwrap();
    fs::write(src.join("hard1"), b"shared inode").unwrap();
    fs::hard_link(src.join("hard1"), src.join("d/hard2")).unwrap();
    fs::write(src.join("xattr"), b"has xattrs").unwrap();
    XattrTarget::Path(&cpath(&src.join("xattr")))
        .set(b"user.k", b"v")
        .unwrap();
    symlink("a", src.join("link")).unwrap();
    for (rel, (path, meta)) in walk(src) {
        if meta.is_file() {
            set_times(&path, FIXED_MTIME_NS + rel.len() as i64);
        }
    }
}

/// Wait until no ctime under `dir` is racy against a snapshot starting now
/// (files written just before a snapshot are rightly read again by the next
/// one). Then a change made after that snapshot started gets a ctime the
/// kernel's clock cannot confuse with the old one. Waits; asserts nothing.
fn settle(dir: &Path) {
    let newest = walk(dir).values().map(|(_, m)| ctime_ns(m)).max().unwrap();
    while racy(newest, statcache::now_ns()) {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A parent that started 10 s from now: the fixture's files (ctime now) are
/// then not racy against it, whatever the speed of this machine.
fn started_later(mut p: Parent) -> Parent {
    p.started_ns = statcache::now_ns() + 10 * SEC;
    p
}

/// Every regular file path of the fixture, one per inode: `hard1` is read
/// through `d/hard2`, its first name in walk order.
const FILES: [&str; 11] = [
    "a", "b", "big", "c", "d.x/h", "d/e/g", "d/f", "d/hard2", "sparse", "xattr", "z",
];

#[test]
fn unchanged_files_are_not_opened_and_the_tree_is_the_full_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fixture(&src);
    settle(&src);
    let first = snap_from(&store, &src, None);
    assert_eq!(opened(&src), FILES, "a first snapshot reads every file");
    assert_eq!((first.files_read, first.files_reused), (11, 0));
    let parent = publish(&store, &src, &first);

    // Nothing changed: nothing opened, same tree.
    let again = snap_from(&store, &src, Some(&parent));
    assert_eq!(opened(&src), Vec::<String>::new());
    assert_eq!((again.files_read, again.files_reused), (0, 11));
    assert_eq!(again.root, first.root);

    // Change some: a new size, a new file, one removed, one replaced by
    // another inode with the same size and mtime, an xattr set (ctime), a
    // hardlink's other name written.
    fs::write(src.join("b"), b"b grew longer than before\n").unwrap();
    fs::write(src.join("d/e/new"), b"new").unwrap();
    fs::remove_file(src.join("c")).unwrap();
    let old = fs::symlink_metadata(src.join("d/f")).unwrap();
    let same_size = vec![b'Q'; old.size() as usize];
    fs::write(src.join("d/f.tmp"), &same_size).unwrap();
    set_times(&src.join("d/f.tmp"), mtime_ns(&old));
    fs::rename(src.join("d/f.tmp"), src.join("d/f")).unwrap();
    XattrTarget::Path(&cpath(&src.join("z")))
        .set(b"user.new", b"1")
        .unwrap();
    fs::write(src.join("d/hard2"), b"shared, changed").unwrap();

    let incremental = snap_from(&store, &src, Some(&parent));
    assert_eq!(
        opened(&src),
        ["b", "d/e/new", "d/f", "d/hard2", "z"],
        "only changed files are read"
    );
    assert_eq!((incremental.files_read, incremental.files_reused), (5, 6));
    let full = snap_from(&store, &src, None);
    assert_eq!(opened(&src).len(), 11);
    assert_eq!(incremental.root, full.root, "incremental = full");
    assert_eq!(
        (incremental.stats.entries, incremental.stats.bytes),
        (full.stats.entries, full.stats.bytes),
        "the record's counts do not depend on what was read"
    );

    let dest = tmp.path().join("restored");
    restore(&store, &checkpoint(incremental.root), &dest).unwrap();
    assert_same_tree(&src, &dest);
    assert_eq!(fs::read(dest.join("d/f")).unwrap(), same_size);
}

#[test]
fn racy_files_are_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fixture(&src);
    // A file stamped at the parent's start: it could have changed again in
    // the same tick after the parent read it.
    let t = statcache::now_ns() + 1000 * SEC + 123_456_789;
    set_times(&src.join("a"), t);
    let first = snap_from(&store, &src, None);
    opened(&src);
    let mut parent = publish(&store, &src, &first);

    for (started, read) in [
        (t, vec!["a"]),
        (t + 10_000_000, vec!["a"]),
        (t + SEC / 2, vec![]),
    ] {
        parent.started_ns = started;
        let res = snap_from(&store, &src, Some(&parent));
        assert_eq!(opened(&src), read, "parent started at t+{}", started - t);
        assert_eq!(res.root, first.root);
    }

    // Whole seconds (a coarse filesystem, or a time set by hand): 2 s of doubt.
    assert!(racy(100 * SEC, 101 * SEC + SEC / 2));
    assert!(!racy(100 * SEC, 102 * SEC + SEC / 10));
    // Nanoseconds: only the clock slack.
    assert!(racy(100 * SEC + 7, 100 * SEC + 10_000_000));
    assert!(!racy(100 * SEC + 7, 100 * SEC + SEC / 10));
    // Milliseconds (exFAT-like): 1 ms granularity on top.
    assert!(racy(100 * SEC + 5_000_000, 100 * SEC + 25_500_000));
}

#[test]
fn a_file_matches_only_on_device_inode_size_mtime_and_ctime() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fixture(&src);
    let first = snap_from(&store, &src, None);
    let parent = started_later(publish(&store, &src, &first));
    let ckpt = checkpoint(first.root);
    let entry = store.lookup_path(&ckpt, b"a").unwrap().unwrap();
    let m = fs::symlink_metadata(src.join("a")).unwrap();
    let now = Stat {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: mtime_ns(&m),
        ctime_ns: ctime_ns(&m),
    };
    assert!(parent.unchanged(&entry, m.ino(), &now));
    assert!(!parent.unchanged(&entry, m.ino() + 1, &now), "cache inode");
    for changed in [
        Stat {
            dev: now.dev + 1,
            ..now
        },
        Stat {
            ino: now.ino + 1,
            ..now
        },
        Stat {
            size: now.size + 1,
            ..now
        },
        Stat {
            mtime_ns: now.mtime_ns + 1,
            ..now
        },
        Stat {
            ctime_ns: now.ctime_ns + 1,
            ..now
        },
    ] {
        assert!(!parent.unchanged(&entry, m.ino(), &changed), "{changed:?}");
    }
    let mut racy_parent = parent.clone();
    racy_parent.started_ns = now.ctime_ns;
    assert!(!racy_parent.unchanged(&entry, m.ino(), &now), "ctime racy");
}

#[test]
fn a_parent_without_a_usable_stat_cache_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fixture(&src);
    let first = snap_from(&store, &src, None);
    let origin = src.to_str().unwrap();
    let mut ckpt = checkpoint(first.root);
    ckpt.origin = Some(origin.to_string());
    let id = store.write_checkpoint(&ckpt).unwrap();

    let why = Parent::load(&store, &id, &ckpt, origin).unwrap_err();
    assert!(why.contains("no stat cache"), "{why}");
    statcache::save(&store, &id, &first.stat_cache).unwrap();
    assert!(Parent::load(&store, &id, &ckpt, origin).is_ok());
    let why = Parent::load(&store, &id, &ckpt, "/elsewhere").unwrap_err();
    assert!(why.contains("not /elsewhere"), "{why}");

    // Cut short (a crash while it was written) or flipped: refused.
    let path = statcache::path(&store, &id);
    let good = fs::read(&path).unwrap();
    for bad in [good[..good.len() - 3].to_vec(), {
        let mut b = good.clone();
        let mid = b.len() / 2;
        b[mid] ^= 0x40;
        b
    }] {
        fs::write(&path, &bad).unwrap();
        let why = Parent::load(&store, &id, &ckpt, origin).unwrap_err();
        assert!(why.contains("stat cache"), "{why}");
    }
}

#[test]
fn directories_are_ordered_as_the_walk_visits_them() {
    use std::cmp::Ordering::Less;
    let walk_order: [&[u8]; 6] = [b"", b"a", b"a/b", b"a/b/c", b"a.b", b"b"];
    for w in walk_order.windows(2) {
        assert_eq!(statcache::dir_order(w[0], w[1]), Less, "{w:?}");
    }
}

/// `n` directories of `per_dir` files plus a subdirectory `sub` of as many
/// files, all old (not racy). Returns every regular file's path.
fn wide_fixture(src: &Path, n: usize, per_dir: usize) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for d in 0..n {
        let dir = src.join(format!("d{d:02}"));
        fs::create_dir_all(dir.join("sub")).unwrap();
        for f in 0..per_dir {
            for p in [dir.join(format!("f{f}")), dir.join(format!("sub/f{f}"))] {
                fs::write(&p, format!("{} {f}\n", p.display())).unwrap();
                set_times(&p, FIXED_MTIME_NS);
                files.push(p);
            }
        }
    }
    files
}

#[test]
fn an_unchanged_subtree_keeps_the_parents_tree_and_the_walk_holds_only_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    let (n, per_dir) = (20, 10);
    wide_fixture(&src, n, per_dir);
    let entries = 1 + n * (2 + 2 * per_dir);
    settle(&src);
    let first = snap_from(&store, &src, None);
    assert_eq!(first.stats.entries, entries as u64);
    opened(&src);
    let parent = publish(&store, &src, &first);
    // At most: the root, its directories, and one directory and its `sub`.
    let path_only = 1 + n + (per_dir + 1) + per_dir;

    let again = snap_from(&store, &src, Some(&parent));
    assert_eq!(again.root, first.root);
    assert_eq!(
        test_hook::last_walk(&src),
        (path_only, 0),
        "nothing changed: every tree is the parent's, no subtree kept"
    );

    fs::write(src.join("d07/sub/f3"), b"changed deep down\n").unwrap();
    let incremental = snap_from(&store, &src, Some(&parent));
    assert_eq!(opened(&src), ["d07/sub/f3"]);
    let (peak, stored) = test_hook::last_walk(&src);
    assert_eq!(
        peak,
        path_only + (2 * per_dir + 1),
        "the walk holds the current path and the changed directory, not the tree"
    );
    assert_eq!(stored, 0, "the other trees are the parent's");
    let full = snap_from(&store, &src, None);
    opened(&src);
    assert_eq!(incremental.root, full.root);
    assert_eq!(
        test_hook::last_walk(&src).0,
        entries,
        "a full walk reads all"
    );
}

/// A small deterministic generator (xorshift) for the random changes.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        (!v.is_empty()).then(|| &v[self.below(v.len())])
    }
}

/// One random change under `src`: content, rename, delete, new empty
/// directory, xattr only, mode only, hardlink, symlink, same-size rewrite.
fn random_change(src: &Path, rng: &mut Rng, serial: usize) -> String {
    let all = walk(src);
    let files: Vec<&PathBuf> = all
        .values()
        .filter(|(_, m)| m.is_file())
        .map(|(p, _)| p)
        .collect();
    let dirs: Vec<&PathBuf> = all
        .values()
        .filter(|(_, m)| m.is_dir())
        .map(|(p, _)| p)
        .collect();
    let (Some(&file), Some(&dir)) = (rng.pick(&files), rng.pick(&dirs)) else {
        return "nothing".into();
    };
    let fresh = |d: &Path| d.join(format!("new{serial}"));
    match rng.below(10) {
        0 => {
            let mut f = File::options().append(true).open(file).unwrap();
            f.write_all(format!("more {serial}\n").as_bytes()).unwrap();
            format!("append {}", file.display())
        }
        1 => {
            let m = fs::symlink_metadata(file).unwrap();
            fs::write(file, vec![b'0' + (serial % 10) as u8; m.size() as usize]).unwrap();
            set_times(file, mtime_ns(&m));
            format!("same size and mtime {}", file.display())
        }
        2 => {
            fs::rename(file, fresh(dir)).unwrap();
            format!("move {} to {}", file.display(), dir.display())
        }
        3 if dir != &src.to_path_buf() => {
            let to = fresh(dir.parent().unwrap());
            fs::rename(dir, &to).unwrap();
            format!("rename dir {} to {}", dir.display(), to.display())
        }
        4 if dir != &src.to_path_buf() => {
            fs::remove_dir_all(dir).unwrap();
            format!("delete dir {}", dir.display())
        }
        5 => {
            fs::create_dir(fresh(dir)).unwrap();
            format!("new empty dir in {}", dir.display())
        }
        6 => {
            let target = if serial.is_multiple_of(2) { file } else { dir };
            XattrTarget::Path(&cpath(target))
                .set(b"user.r", format!("{serial}").as_bytes())
                .unwrap();
            format!("xattr on {}", target.display())
        }
        7 => {
            let target = if serial.is_multiple_of(2) { file } else { dir };
            let mode = fs::symlink_metadata(target).unwrap().mode() & 0o7777;
            fs::set_permissions(target, fs::Permissions::from_mode(mode ^ 0o010)).unwrap();
            format!("chmod {}", target.display())
        }
        8 => {
            fs::hard_link(file, fresh(dir)).unwrap();
            format!("hardlink {} in {}", file.display(), dir.display())
        }
        _ => {
            symlink(file, fresh(dir)).unwrap();
            format!("symlink in {}", dir.display())
        }
    }
}

#[test]
fn random_changes_give_the_full_snapshots_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    // Three levels of directories, files at every level.
    for a in 0..3 {
        for b in 0..3 {
            for c in 0..3 {
                let d = src.join(format!("a{a}/b{b}/c{c}"));
                fs::create_dir_all(&d).unwrap();
                for (i, dir) in [
                    d.clone(),
                    src.join(format!("a{a}/b{b}")),
                    src.join(format!("a{a}")),
                ]
                .iter()
                .enumerate()
                {
                    let p = dir.join(format!("f{c}{i}"));
                    fs::write(&p, format!("{}\n", p.display())).unwrap();
                    set_times(&p, FIXED_MTIME_NS);
                }
            }
        }
    }
    settle(&src);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut parent = publish(&store, &src, &snap_from(&store, &src, None));
    let mut serial = 0;
    for round in 0..24 {
        let mut done = Vec::new();
        for _ in 0..1 + rng.below(4) {
            serial += 1;
            done.push(random_change(&src, &mut rng, serial));
        }
        // Half the rounds right away (changed files racy), half settled
        // (only changed files read, unchanged subtrees reused).
        if round % 2 == 0 {
            settle(&src);
        }
        let incremental = snap_from(&store, &src, Some(&parent));
        let full = snap_from(&store, &src, None);
        opened(&src);
        assert_eq!(
            incremental.root, full.root,
            "round {round} after {done:?}: incremental = full"
        );
        assert_eq!(
            (incremental.stats.entries, incremental.stats.bytes),
            (full.stats.entries, full.stats.bytes)
        );
        parent = publish(&store, &src, &incremental);
    }
    let dest = tmp.path().join("restored");
    restore(&store, &checkpoint(parent.root), &dest).unwrap();
    assert_same_tree(&src, &dest);
}

#[test]
fn a_cache_is_retired_only_when_no_ref_keeps_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fixture(&src);
    let store = Store::open_or_create(&tmp.path().join("store")).unwrap();
    let res = snap_from(&store, &src, None);
    let a = publish(&store, &src, &res).id;
    let cache = statcache::path(&store, &a);
    store.set_ref("s", &a).unwrap();
    store.set_ref("t", &a).unwrap();
    // `s` moved on; `t` still names it.
    let b = publish(&store, &src, &snap_from(&store, &src, None)).id;
    store.set_ref("s", &b).unwrap();
    assert!(!statcache::retire(&store, &a).unwrap());
    assert!(cache.exists());
    store.set_ref("t", &b).unwrap();
    assert!(statcache::retire(&store, &a).unwrap());
    assert!(!cache.exists());
    // Nothing left to remove: not an error.
    assert!(!statcache::retire(&store, &a).unwrap());
    assert!(statcache::path(&store, &b).exists());
}

fn snap_batched(
    store: &Store,
    dir: &Path,
    parent: Option<&Parent>,
    batch: usize,
) -> SnapshotResult {
    let opts = SnapshotOptions {
        parent: parent.cloned(),
        batch_entries: batch,
        // Publish after every batch that wrote anything.
        sync_objects: 1,
        ..Default::default()
    };
    snapshot(store, dir, &opts).unwrap()
}

/// A walk that reads what it found every few entries (and stores the
/// directories done, and publishes the objects) gives the tree of a walk
/// that reads everything at its end, reads each file once, leaves a whole
/// stat cache, and holds a fraction of the tree's entries at a time.
#[test]
fn batches_give_the_same_tree_and_bound_the_walk() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    // Hardlinks within and across directories, a large and a sparse file,
    // symlinks, special files, xattrs, an empty directory.
    build_fixture(&src);
    wide_fixture(&src.join("wide"), 30, 5);
    // A hardlink whose paths are far apart in the walk: the first one's
    // directory waits for the second.
    fs::hard_link(src.join("wide/d00/f0"), src.join("wide/d29/sub/late")).unwrap();
    settle(&src);
    let whole = snap_batched(&store, &src, None, usize::MAX);
    let mut read_whole = opened(&src);
    read_whole.sort();
    let entries = whole.stats.entries as usize;
    assert_eq!(
        test_hook::last_walk(&src).0,
        entries,
        "one batch: the walk holds all"
    );
    for batch in [1, 2, 7, 40] {
        // A store of its own: every object is new, and published as the
        // walk goes (a pack at each sync).
        let store = new_store(&tmp.path().join(format!("batch{batch}")));
        let b = snap_batched(&store, &src, None, batch);
        let packs = fs::read_dir(tmp.path().join(format!("batch{batch}/store/objects/packs")))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some(OsStr::new("idx")))
            .count();
        assert!(packs > 2, "batch {batch}: {packs} packs published");
        assert_eq!(b.root, whole.root, "batch {batch}: the same tree");
        assert_eq!(
            (b.stats.entries, b.stats.bytes, b.files_read),
            (whole.stats.entries, whole.stats.bytes, whole.files_read),
            "batch {batch}"
        );
        assert_eq!(
            opened(&src),
            read_whole,
            "batch {batch}: each file read once"
        );
        let peak = test_hook::last_walk(&src).0;
        assert!(
            peak < entries / 2,
            "batch {batch}: the walk held {peak} of {entries} entries"
        );
        // Its stat cache covers every file: on it, nothing is read again.
        let parent = publish(&store, &src, &b);
        let again = snap_batched(&store, &src, Some(&parent), batch);
        assert_eq!(again.root, whole.root, "batch {batch}: incremental");
        assert_eq!(opened(&src), Vec::<String>::new(), "batch {batch}");
        let dest = tmp.path().join(format!("restored{batch}"));
        restore(&store, &checkpoint(b.root), &dest).unwrap();
        assert_same_tree(&src, &dest);
    }
}

/// Random changes, each snapshot in batches of 3 entries on the last one as
/// parent: each equals a full snapshot in one batch.
#[test]
fn batched_incremental_snapshots_equal_full_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    wide_fixture(&src, 6, 4);
    settle(&src);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut parent = publish(&store, &src, &snap_batched(&store, &src, None, 3));
    for round in 0..12 {
        let change = random_change(&src, &mut rng, round);
        if round % 2 == 0 {
            settle(&src);
        }
        let incremental = snap_batched(&store, &src, Some(&parent), 3);
        let full = snap_batched(&store, &src, None, usize::MAX);
        opened(&src);
        assert_eq!(incremental.root, full.root, "round {round} after {change}");
        parent = publish(&store, &src, &incremental);
    }
}

/// A batch that stores a directory before the paths of a hardlink moves
/// them down in the walk's memory: the paths found before it and after it
/// still name the one inode (its first path's entry, the link count).
#[test]
fn hardlink_paths_on_both_sides_of_a_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    // `p` closes with files to read; `q/first` and `r/second` are numbered
    // before the batch that opening `s` starts (which stores `p`),
    // `t/third` after it.
    for d in ["p", "q", "r", "s", "t"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    for f in 0..3 {
        fs::write(src.join(format!("p/f{f}")), format!("p {f}\n")).unwrap();
    }
    fs::write(src.join("q/first"), b"one inode, three paths\n").unwrap();
    fs::hard_link(src.join("q/first"), src.join("r/second")).unwrap();
    fs::hard_link(src.join("q/first"), src.join("t/third")).unwrap();
    for g in 0..30 {
        fs::write(src.join(format!("s/g{g:02}")), format!("s {g}\n")).unwrap();
    }
    settle(&src);
    let whole = snap_batched(&store, &src, None, usize::MAX);
    let batched = snap_batched(&store, &src, None, 20);
    assert_eq!(batched.root, whole.root);
    let dest = tmp.path().join("restored");
    restore(&store, &checkpoint(batched.root), &dest).unwrap();
    assert_same_tree(&src, &dest);
    let ino = |p: &str| fs::metadata(dest.join(p)).unwrap().ino();
    assert_eq!(ino("q/first"), ino("r/second"));
    assert_eq!(ino("q/first"), ino("t/third"));
}
