//! Tests for snapshot, restore and diff on real directories (run as root for
//! the chown, setuid and device parts; those are skipped otherwise).

use std::collections::BTreeMap;
use std::ffi::{CStr, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::unistd::{Uid, setfsuid};
use rustix::fs::{CWD, makedev};

use super::snapshot::test_hook;
use super::sys::{self, XattrTarget};
use super::*;
use crate::store::{Checkpoint, Content, Entry, Extent, Kind, ObjectId, Source, Store, Tree};

const FIXED_MTIME_NS: i64 = 1_600_000_000_123_456_789;

fn new_store(tmp: &Path) -> Store {
    Store::open_or_create(&tmp.join("store")).unwrap()
}

fn checkpoint(root: ObjectId) -> Checkpoint {
    Checkpoint {
        version: 1,
        root,
        parents: vec![],
        origin: None,
        time_ns: 0,
        message: String::new(),
        source: Source {
            kind: "snapshot".into(),
            ..Default::default()
        },
    }
}

fn snap(store: &Store, dir: &Path) -> SnapshotResult {
    snapshot(store, dir, &SnapshotOptions::default()).unwrap()
}

/// Deterministic pseudo-random bytes (xorshift), incompressible enough for chunking.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn cpath(p: &Path) -> std::ffi::CString {
    sys::cstring(p.as_os_str().as_bytes()).unwrap()
}

fn set_mtime(p: &Path, ns: i64) {
    let parent = File::open(p.parent().unwrap()).unwrap();
    let name = sys::cstring(p.file_name().unwrap().as_bytes()).unwrap();
    sys::lutimensat(parent.as_fd(), &name, ns).unwrap();
}

fn is_root() -> bool {
    crate::sys::is_root()
}

/// The directory tree the round trip test snapshots.
fn build_fixture(src: &Path) {
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::write(src.join("a/b/c/deep.txt"), b"deep\n").unwrap();
    fs::create_dir(src.join("empty_dir")).unwrap();
    File::create(src.join("zero")).unwrap();
    fs::write(src.join("big"), noise(3 << 20, 7)).unwrap();

    let sparse = File::create(src.join("sparse")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    sparse.write_all_at(&noise(4096, 9), 32 << 20).unwrap();

    symlink("/etc/hostname", src.join("abs_link")).unwrap();
    symlink("a/b/c/deep.txt", src.join("rel_link")).unwrap();
    symlink("nowhere/at/all", src.join("dangling")).unwrap();
    let fifo = cpath(&src.join("fifo"));
    sys::mknodat(CWD, &fifo, libc::S_IFIFO | 0o640, 0).unwrap();

    fs::write(src.join("hard1"), b"shared inode").unwrap();
    fs::hard_link(src.join("hard1"), src.join("a/hard2")).unwrap();

    fs::write(src.join("setuid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(src.join("setuid"), fs::Permissions::from_mode(0o4755)).unwrap();

    fs::write(src.join("owned"), b"owned by someone else").unwrap();
    if is_root() {
        std::os::unix::fs::lchown(src.join("owned"), Some(1234), Some(5678)).unwrap();
        let dev = cpath(&src.join("null_dev"));
        let _ = sys::mknodat(CWD, &dev, libc::S_IFCHR | 0o600, makedev(1, 3));
    }

    fs::write(src.join("xattr"), b"has xattrs").unwrap();
    XattrTarget::Path(&cpath(&src.join("xattr")))
        .set(b"user.test", b"\x00\xffvalue")
        .unwrap();

    fs::write(src.join(OsStr::from_bytes(b"caf\xe9")), b"latin-1 name").unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();

    fs::write(src.join("fixed_mtime"), b"old").unwrap();
    set_mtime(&src.join("fixed_mtime"), FIXED_MTIME_NS);
    set_mtime(&src.join("abs_link"), FIXED_MTIME_NS + 1);
    set_mtime(&src.join("a/b"), FIXED_MTIME_NS + 2);
}

/// Every path below `root` (relative, raw bytes) with its lstat, root as "".
fn walk(root: &Path) -> BTreeMap<Vec<u8>, (PathBuf, fs::Metadata)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(Vec::new(), root.to_path_buf())];
    while let Some((rel, path)) = stack.pop() {
        let meta = fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for ent in fs::read_dir(&path).unwrap() {
                let ent = ent.unwrap();
                let name = ent.file_name();
                let mut r = rel.clone();
                if !r.is_empty() {
                    r.push(b'/');
                }
                r.extend_from_slice(name.as_bytes());
                stack.push((r, ent.path()));
            }
        }
        out.insert(rel, (path, meta));
    }
    out
}

/// Assert that `b` is an exact copy of `a`: bytes, lstat, xattrs, link targets,
/// and the same hardlink structure.
fn assert_same_tree(a: &Path, b: &Path) {
    let (wa, wb) = (walk(a), walk(b));
    assert_eq!(
        wa.keys().collect::<Vec<_>>(),
        wb.keys().collect::<Vec<_>>(),
        "same paths"
    );
    let mut inodes_a: BTreeMap<u64, Vec<&[u8]>> = BTreeMap::new();
    let mut inodes_b: BTreeMap<u64, Vec<&[u8]>> = BTreeMap::new();
    for (rel, (pa, ma)) in &wa {
        let (pb, mb) = &wb[rel];
        let what = String::from_utf8_lossy(rel);
        assert_eq!(ma.mode(), mb.mode(), "{what}: mode");
        assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "{what}: owner");
        assert_eq!(
            (ma.mtime(), ma.mtime_nsec()),
            (mb.mtime(), mb.mtime_nsec()),
            "{what}: mtime"
        );
        assert_eq!(ma.nlink(), mb.nlink(), "{what}: nlink");
        assert_eq!(ma.rdev(), mb.rdev(), "{what}: rdev");
        assert_eq!(
            sys::read_xattrs(XattrTarget::Path(&cpath(pa))).unwrap(),
            sys::read_xattrs(XattrTarget::Path(&cpath(pb))).unwrap(),
            "{what}: xattrs"
        );
        if ma.is_dir() {
            continue;
        }
        assert_eq!(ma.size(), mb.size(), "{what}: size");
        if ma.file_type().is_symlink() {
            assert_eq!(
                fs::read_link(pa).unwrap(),
                fs::read_link(pb).unwrap(),
                "{what}: target"
            );
        } else if ma.is_file() {
            assert!(
                fs::read(pa).unwrap() == fs::read(pb).unwrap(),
                "{what}: bytes"
            );
            inodes_a.entry(ma.ino()).or_default().push(rel);
            inodes_b.entry(mb.ino()).or_default().push(rel);
        }
    }
    let mut groups_a: Vec<_> = inodes_a.into_values().collect();
    let mut groups_b: Vec<_> = inodes_b.into_values().collect();
    groups_a.sort();
    groups_b.sort();
    assert_eq!(groups_a, groups_b, "same hardlink structure");
}

#[test]
fn round_trip_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    build_fixture(&src);

    let res = snap(&store, &src);
    assert!(
        res.warnings.iter().any(|w| w.contains("sock")),
        "socket warned about: {:?}",
        res.warnings
    );
    let ckpt = checkpoint(res.root);

    // The snapshot itself: sparse holes, chunking, hardlink ids.
    let sparse = store.lookup_path(&ckpt, b"sparse").unwrap().unwrap();
    let Content::Extents(ext) = &sparse.content else {
        panic!("sparse is a file")
    };
    assert!(ext.iter().any(|x| x.id.is_none()), "holes kept: {ext:?}");
    assert!(sparse.allocated_bytes() < 1 << 20);
    let big = store.lookup_path(&ckpt, b"big").unwrap().unwrap();
    let Content::Extents(ext) = &big.content else {
        panic!("big is a file")
    };
    assert!(ext.len() >= 3, "3 MiB cut into several chunks");
    let h1 = store.lookup_path(&ckpt, b"hard1").unwrap().unwrap();
    let h2 = store.lookup_path(&ckpt, b"a/hard2").unwrap().unwrap();
    assert_eq!((h1.link_id, h1.nlink), (1, 2));
    assert_eq!((h2.link_id, h2.content), (1, h1.content));
    let zero = store.lookup_path(&ckpt, b"zero").unwrap().unwrap();
    assert_eq!(zero.content, Content::Extents(vec![]));

    let dest = tmp.path().join("restored/here");
    let stats = restore(&store, &ckpt, &dest).unwrap();
    assert_eq!(stats.entries, res.stats.entries);
    assert_same_tree(&src, &dest);

    let m = fs::metadata(dest.join("sparse")).unwrap();
    assert_eq!(m.size(), 64 << 20);
    assert!(
        m.blocks() * 512 < 1 << 20,
        "restored sparse: {} blocks",
        m.blocks()
    );
    assert_eq!(
        fs::symlink_metadata(dest.join("fixed_mtime"))
            .unwrap()
            .mtime_nsec(),
        FIXED_MTIME_NS % 1_000_000_000
    );
    if is_root() {
        let m = fs::metadata(dest.join("owned")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        assert_eq!(
            fs::metadata(dest.join("setuid")).unwrap().mode() & 0o7777,
            0o4755
        );
    }
}

#[test]
fn unchanged_tree_snapshots_identically() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    build_fixture(&src);
    let first = snap(&store, &src);
    assert!(first.stats.new_objects > 0);
    let opts = SnapshotOptions {
        threads: 1,
        ..Default::default()
    };
    let second = snapshot(&store, &src, &opts).unwrap();
    assert_eq!(second.root, first.root);
    assert_eq!(second.stats.new_objects, 0);
    assert_eq!(second.stats.new_bytes_compressed, 0);
    assert_eq!(second.stats.entries, first.stats.entries);
}

#[test]
fn edited_large_file_shares_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let data = noise(4 << 20, 3);
    fs::write(src.join("f"), &data).unwrap();
    let first = snap(&store, &src);
    let chunks = first.stats.new_objects - 2; // minus the directory and root trees
    assert!(chunks >= 8, "4 MiB is {chunks} chunks");

    let mut edited = b"inserted".to_vec();
    edited.extend_from_slice(&data);
    fs::write(src.join("f"), &edited).unwrap();
    let second = snap(&store, &src);
    assert_ne!(second.root, first.root);
    // One or two chunks around the edit, plus the two trees.
    assert!(
        second.stats.new_objects <= 5,
        "new objects: {}",
        second.stats.new_objects
    );
    let dest = tmp.path().join("out");
    restore(&store, &checkpoint(second.root), &dest).unwrap();
    assert!(fs::read(dest.join("f")).unwrap() == edited);
}

fn append_byte(path: &Path) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(b"x").unwrap();
}

#[test]
fn file_that_keeps_changing_fails_the_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let busy = src.join("busy.log");
    fs::write(&busy, noise(200_000, 1)).unwrap();
    test_hook::set(&busy, append_byte);
    let err = snapshot(&store, &src, &SnapshotOptions::default()).unwrap_err();
    test_hook::clear(&busy);
    assert!(matches!(err, Error::Changing { attempts: 3, .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("busy.log") && msg.contains("stop the writer"),
        "{msg}"
    );
}

static CHANGED_ONCE: AtomicU32 = AtomicU32::new(0);

fn append_once(path: &Path) {
    if CHANGED_ONCE.fetch_add(1, Ordering::SeqCst) == 0 {
        append_byte(path);
    }
}

#[test]
fn file_that_changes_once_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let file = src.join("once.log");
    fs::write(&file, b"first").unwrap();
    test_hook::set(&file, append_once);
    let res = snapshot(&store, &src, &SnapshotOptions::default());
    test_hook::clear(&file);
    let res = res.unwrap();
    let entry = store
        .lookup_path(&checkpoint(res.root), b"once.log")
        .unwrap()
        .unwrap();
    assert_eq!(entry.size, 6, "the content after the change");
    let dest = tmp.path().join("out");
    restore(&store, &checkpoint(res.root), &dest).unwrap();
    assert_eq!(fs::read(dest.join("once.log")).unwrap(), b"firstx");
}

#[test]
fn bad_snapshot_sources_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let missing = tmp.path().join("missing");
    let err = snapshot(&store, &missing, &SnapshotOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::NotFound(ref p) if *p == missing),
        "{err}"
    );
    let file = tmp.path().join("file");
    fs::write(&file, b"x").unwrap();
    let err = snapshot(&store, &file, &SnapshotOptions::default()).unwrap_err();
    assert!(
        matches!(err, Error::NotADirectory(ref p) if *p == file),
        "{err}"
    );
}

#[test]
fn unreadable_file_is_an_error_naming_it() {
    if !is_root() {
        eprintln!("skipped: needs root to switch the filesystem uid");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let secret = src.join("secret");
    fs::write(&secret, b"root only").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    // The filesystem uid is per thread and inherited by the snapshot's
    // workers; dropping it from 0 also drops CAP_DAC_OVERRIDE.
    setfsuid(Uid::from_raw(65534));
    let result = snapshot(&store, &src, &SnapshotOptions::default());
    setfsuid(Uid::from_raw(0));
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::PermissionDenied(ref p) if *p == secret),
        "{err}"
    );
}

/// Unmounts on drop, so a failing test does not leave a mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = crate::sys::detach(&self.0);
    }
}

#[test]
fn mount_points_are_not_crossed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("mnt")).unwrap();
    let target = src.join("mnt");
    let flags = rustix::mount::MountFlags::empty();
    if rustix::mount::mount("tmpfs", &target, "tmpfs", flags, None::<&CStr>).is_err() {
        eprintln!("skipped: cannot mount tmpfs here");
        return;
    }
    let _guard = Mounted(target);
    fs::write(src.join("mnt/inside"), b"other fs").unwrap();
    let res = snap(&store, &src);
    assert!(
        res.warnings.iter().any(|w| w.contains("mnt")),
        "{:?}",
        res.warnings
    );
    let ckpt = checkpoint(res.root);
    let mnt = store.lookup_path(&ckpt, b"mnt").unwrap().unwrap();
    assert_eq!(mnt.kind, Kind::Dir);
    assert!(store.lookup_path(&ckpt, b"mnt/inside").unwrap().is_none());
}

#[test]
fn restore_refuses_a_non_empty_destination() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let res = snap(&store, &src);
    let dest = tmp.path().join("dest");
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("already"), b"here").unwrap();
    let err = restore(&store, &checkpoint(res.root), &dest).unwrap_err();
    assert!(matches!(err, Error::DestNotEmpty(_)), "{err}");
    assert!(
        err.to_string()
            .contains("restore into a new or empty directory")
    );
    // An existing empty directory is fine.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    restore(&store, &checkpoint(res.root), &empty).unwrap();
    assert_eq!(fs::read(empty.join("f")).unwrap(), b"x");
}

#[test]
fn corrupt_chunk_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("victim"), b"precious bytes").unwrap();
    let res = snap(&store, &src);
    store.sync_objects().unwrap();
    let ckpt = checkpoint(res.root);
    let entry = store.lookup_path(&ckpt, b"victim").unwrap().unwrap();
    let Content::Extents(ext) = entry.content else {
        panic!("file")
    };
    let id = ext[0].id.unwrap();
    store
        .replace_stored_object(&id, &zstd::bulk::compress(b"tampered bytes", 3).unwrap())
        .unwrap();

    let err = restore(&store, &ckpt, &tmp.path().join("out")).unwrap_err();
    assert!(err.to_string().contains("victim"), "{err}");
    assert!(matches!(err, Error::Object { .. }), "{err}");
}

// ---- hostile trees, built directly with the store API ----

fn entry(name: &[u8], kind: Kind, content: Content, size: u64) -> Entry {
    Entry {
        name: name.to_vec(),
        kind,
        perm: 0o755,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        size,
        nlink: 1,
        link_id: 0,
        rdev: 0,
        xattrs: vec![],
        flags: 0,
        content,
    }
}

fn file(store: &Store, name: &[u8], data: &[u8]) -> Entry {
    let (id, _) = store.put_object(data).unwrap();
    let ext = vec![Extent {
        len: data.len() as u64,
        id: Some(id),
    }];
    entry(name, Kind::File, Content::Extents(ext), data.len() as u64)
}

fn dir(store: &Store, name: &[u8], entries: Vec<Entry>) -> Entry {
    // Not sorted on purpose: a hostile tree need not be.
    let (id, _) = store.put_tree(&Tree { entries }).unwrap();
    entry(name, Kind::Dir, Content::Tree(id), 0)
}

fn hostile_checkpoint(store: &Store, entries: Vec<Entry>) -> Checkpoint {
    let root = dir(store, b"", entries);
    checkpoint(store.put_root(root).unwrap().0)
}

#[test]
fn hostile_trees_cannot_escape_dest() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let outside_bytes = outside.as_os_str().as_bytes().to_vec();
    let link = |name: &[u8]| {
        entry(
            name,
            Kind::Symlink,
            Content::Target(outside_bytes.clone()),
            outside_bytes.len() as u64,
        )
    };

    let cases: Vec<(&str, Vec<Entry>)> = vec![
        ("dotdot file", vec![file(&store, b"..", b"evil")]),
        (
            "dotdot dir",
            vec![dir(&store, b"..", vec![file(&store, b"evil", b"evil")])],
        ),
        (
            "slash in name",
            vec![file(&store, b"../outside/evil", b"e")],
        ),
        ("dot", vec![dir(&store, b".", vec![])]),
        ("empty name", vec![file(&store, b"", b"e")]),
        ("nul in name", vec![file(&store, b"ev\0il", b"e")]),
        (
            "symlink then dir of the same name",
            vec![
                link(b"x"),
                dir(&store, b"x", vec![file(&store, b"evil", b"e")]),
            ],
        ),
        (
            "symlink then file of the same name",
            vec![link(b"x"), file(&store, b"x", b"evil")],
        ),
        (
            "hardlink through a symlink",
            vec![
                Entry {
                    link_id: 9,
                    ..link(b"x")
                },
                Entry {
                    link_id: 9,
                    nlink: 2,
                    ..file(&store, b"y", b"evil")
                },
            ],
        ),
    ];
    for (what, entries) in cases {
        let ckpt = hostile_checkpoint(&store, entries);
        let dest = tmp.path().join(format!("dest-{}", what.replace(' ', "-")));
        let result = restore(&store, &ckpt, &dest);
        let left: Vec<_> = fs::read_dir(&outside).unwrap().collect();
        assert!(left.is_empty(), "{what}: wrote outside dest: {left:?}");
        assert!(
            !tmp.path().join("evil").exists(),
            "{what}: wrote next to dest"
        );
        if what.starts_with("hardlink") {
            // Allowed: "y" becomes a second name of the symlink, inside dest.
            result.unwrap();
            assert!(fs::symlink_metadata(dest.join("y")).unwrap().is_symlink());
        } else {
            let err = result.unwrap_err();
            if what.starts_with("symlink") {
                assert!(matches!(err, Error::BadEntry { .. }), "{what}: {err}");
            } else {
                assert!(matches!(err, Error::BadName { .. }), "{what}: {err}");
            }
        }
    }
}

// ---- diff ----

#[test]
fn diff_reports_added_removed_and_changed_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("same/deeper")).unwrap();
    fs::write(src.join("same/deeper/f"), b"unchanged").unwrap();
    fs::create_dir(src.join("gone_dir")).unwrap();
    fs::write(src.join("gone_dir/inner"), b"x").unwrap();
    fs::write(src.join("removed"), b"bye").unwrap();
    fs::write(src.join("edited"), b"before").unwrap();
    fs::write(src.join("chmodded"), b"same").unwrap();
    let a = checkpoint(snap(&store, &src).root);

    fs::remove_file(src.join("removed")).unwrap();
    fs::remove_dir_all(src.join("gone_dir")).unwrap();
    fs::create_dir(src.join("new_dir")).unwrap();
    fs::write(src.join("new_dir/inner"), b"x").unwrap();
    fs::write(src.join("added"), b"hello").unwrap();
    fs::write(src.join("edited"), b"after!").unwrap();
    fs::set_permissions(src.join("chmodded"), fs::Permissions::from_mode(0o600)).unwrap();
    let b = checkpoint(snap(&store, &src).root);

    let changes = diff(&store, &a, &b).unwrap();
    let by_path: BTreeMap<&[u8], &ChangeKind> = changes
        .iter()
        .map(|c| (c.path.as_slice(), &c.kind))
        .collect();
    assert_eq!(by_path.get(&b"added"[..]), Some(&&ChangeKind::Added));
    assert_eq!(by_path.get(&b"new_dir"[..]), Some(&&ChangeKind::Added));
    assert_eq!(by_path.get(&b"removed"[..]), Some(&&ChangeKind::Removed));
    assert_eq!(by_path.get(&b"gone_dir"[..]), Some(&&ChangeKind::Removed));
    assert!(!by_path.contains_key(&b"new_dir/inner"[..]), "{changes:?}");
    assert!(!by_path.contains_key(&b"gone_dir/inner"[..]), "{changes:?}");
    assert!(
        !by_path.keys().any(|p| p.starts_with(b"same")),
        "{changes:?}"
    );
    match by_path.get(&b"edited"[..]) {
        Some(ChangeKind::Changed(what)) => assert!(what.contains("content"), "{what}"),
        other => panic!("edited: {other:?}"),
    }
    assert_eq!(
        by_path.get(&b"chmodded"[..]),
        Some(&&ChangeKind::Changed("mode".into()))
    );
    let paths: Vec<_> = changes.iter().map(|c| c.path.clone()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "sorted by path");
    assert!(diff(&store, &a, &a).unwrap().is_empty());
}

/// Round trip of a real directory: `STOREFS_TEST_DIR=/etc cargo test --release
/// -- --ignored real_directory`.
#[test]
#[ignore]
fn real_directory_round_trips() {
    let Some(src) = std::env::var_os("STOREFS_TEST_DIR") else {
        return;
    };
    let src = PathBuf::from(src);
    let tmp = tempfile::tempdir().unwrap();
    let store = new_store(tmp.path());
    let t = std::time::Instant::now();
    let res = snap(&store, &src);
    eprintln!("snapshot: {:?} in {:?}", res.stats, t.elapsed());
    let t = std::time::Instant::now();
    let again = snap(&store, &src);
    eprintln!("again: {:?} in {:?}", again.stats, t.elapsed());
    assert_eq!(again.root, res.root);
    let dest = tmp.path().join("out");
    let t = std::time::Instant::now();
    let stats = restore(&store, &checkpoint(res.root), &dest).unwrap();
    eprintln!("restore: {stats:?} in {:?}", t.elapsed());
    assert_same_tree(&src, &dest);
}

#[path = "incremental_tests.rs"]
mod incremental;

/// Counts what a long operation reports.
#[derive(Debug, Default)]
struct Counted {
    total: std::sync::Mutex<Option<u64>>,
    done: std::sync::atomic::AtomicU64,
    messages: AtomicU32,
}

impl crate::store::progress::Progress for Counted {
    fn set_total(&self, total: u64) {
        *self.total.lock().unwrap() = Some(total);
    }
    fn advance(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
    fn set_message(&self, _: String) {
        self.messages.fetch_add(1, Ordering::Relaxed);
    }
}

/// Restore, export and verify report their progress: the file bytes (of the
/// total the checkpoint's record gives) and objects, and entry counts.
#[test]
fn restore_export_and_verify_report_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for d in 0..3 {
        fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..700 {
            fs::write(
                src.join(format!("d{d}/f{f}")),
                format!("{d} {f}\n").repeat(f % 9),
            )
            .unwrap();
        }
    }
    let store = new_store(tmp.path());
    let res = snap(&store, &src);
    let mut ckpt = checkpoint(res.root);
    ckpt.source.stats = Some(res.stats.clone());
    let bytes: u64 = (0..700u64)
        .map(|f| (f % 9) * (format!("0 {f}\n").len() as u64))
        .sum::<u64>()
        * 3;
    assert_eq!(res.stats.bytes, bytes);

    let p = Counted::default();
    let stats = restore_with(&store, &ckpt, &tmp.path().join("out"), &p).unwrap();
    assert_eq!(stats.bytes, bytes);
    assert_eq!(*p.total.lock().unwrap(), Some(bytes));
    assert_eq!(p.done.load(Ordering::Relaxed), bytes);
    assert_eq!(
        p.messages.load(Ordering::Relaxed),
        2,
        "at 1,000 and 2,000 entries"
    );

    let p = std::sync::Arc::new(Counted::default());
    let id = store.write_checkpoint(&ckpt).unwrap();
    let opts = export::ExportOptions {
        compression: export::Compression::None,
        split: None,
        threads: 1,
        progress: p.clone(),
    };
    export::export(&store, &ckpt, &id, &tmp.path().join("x.tar"), &opts).unwrap();
    assert_eq!(*p.total.lock().unwrap(), Some(bytes));
    assert_eq!(p.done.load(Ordering::Relaxed), bytes);
    assert_eq!(p.messages.load(Ordering::Relaxed), 2);

    let p = Counted::default();
    let report = store.verify(&[id], 2, &p).unwrap();
    assert!(report.is_clean() && report.objects > 1000, "{report:?}");
    assert_eq!(*p.total.lock().unwrap(), Some(report.objects));
    assert_eq!(p.done.load(Ordering::Relaxed), report.objects);
}
