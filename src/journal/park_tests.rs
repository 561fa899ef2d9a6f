//! Parking (`state/park.rs`) against the same fork without it: a walk of a
//! tree larger than the budget stays within it, every number the walk was
//! given keeps its inode, and changes made through numbers held across
//! parking (never walking from the root again) commit the same tree.

use std::fs;
use std::sync::Arc;

use super::fork::CommitStep;
use super::state::Budget;
use super::testing::base_checkpoint;
use super::*;
use crate::store::{Entry, Kind, ObjectId, Store};

/// Directories `top/dNN` (20) of 50 files each, with `sub/deep/x` below
/// each, and hardlinked pairs (`links/`, `top/d09/`: never parked, nor
/// `top` above it).
fn env() -> (tempfile::TempDir, Arc<Store>, ObjectId) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for d in 0..20 {
        let dir = src.join(format!("top/d{d:02}"));
        fs::create_dir_all(dir.join("sub/deep")).unwrap();
        for f in 0..50 {
            fs::write(dir.join(format!("f{f:02}")), format!("{d} {f}\n")).unwrap();
        }
        fs::write(dir.join("sub/deep/x"), b"deep").unwrap();
    }
    fs::create_dir_all(src.join("links")).unwrap();
    fs::write(src.join("links/one"), b"linked").unwrap();
    fs::hard_link(src.join("links/one"), src.join("links/two")).unwrap();
    fs::write(src.join("top/d09/l1"), b"linked too").unwrap();
    fs::hard_link(src.join("top/d09/l1"), src.join("top/d09/l2")).unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let base = base_checkpoint(&store, &src, "/srv/park");
    (tmp, store, base)
}

/// Fork `name` of `base` (made if missing), its table parked down to
/// `budget` inodes (`None`: never).
fn open(store: &Arc<Store>, base: &ObjectId, name: &str, budget: Option<usize>) -> Fork {
    if read_fork_info(store, name).unwrap().is_none() {
        Fork::create(store, name, base).unwrap();
    }
    let io = Arc::new(RealIo);
    match budget {
        Some(b) => Fork::open_parking(store.clone(), io, name, Budget::strict(b)).unwrap(),
        None => Fork::open_with(store.clone(), io, name).unwrap(),
    }
}

/// Every entry under `dir` as the kernel walks it (readdir, lookup, a
/// reference held on each file): (path, attributes), depth first. The
/// directory [`UNWALKED`] is looked up, not listed: it stays unloaded.
fn walk(f: &Fork, dir: u64, path: &str, out: &mut Vec<(String, Attr)>) {
    let (_, kids) = f.readdir(dir).unwrap();
    for k in kids {
        let name = String::from_utf8(k.name).unwrap();
        let a = f.lookup(dir, name.as_bytes()).unwrap();
        if a.kind == Kind::File {
            f.open_file(a.ino).unwrap();
        }
        let p = format!("{path}/{name}");
        out.push((p.clone(), a.clone()));
        if a.kind == Kind::Dir && p != UNWALKED {
            walk(f, a.ino, &p, out);
        }
    }
}

/// The whole fork walked from the root ([`walk`]).
fn walked(f: &Fork) -> Vec<(String, Attr)> {
    let mut seen = Vec::new();
    walk(f, ROOT_INO, "", &mut seen);
    seen
}

const UNWALKED: &str = "/top/d15/sub/deep";

fn ino_of(seen: &[(String, Attr)], path: &str) -> u64 {
    seen.iter().find(|(p, _)| p == path).unwrap().1.ino
}

#[test]
fn a_walk_stays_within_the_budget_and_every_number_keeps_its_inode() {
    let (_tmp, store, base) = env();
    let parking = open(&store, &base, "a", Some(100));
    let plain = open(&store, &base, "b", None);
    let (got, want) = (walked(&parking), walked(&plain));
    assert_eq!(got, want);
    assert!(got.len() > 1000);
    let (resident, parked, _) = parking.table();
    let (all, none, _) = plain.table();
    assert_eq!(none, 0);
    assert_eq!(resident as u64 + parked, all as u64);
    // The budget, the directories (which stay) and one directory's files.
    assert!(resident <= 100 + 64 + 52, "{resident} inodes in the table");
    assert!(parking.memory().state * 4 < plain.memory().state);
    // Every number still names its inode, in any order (each brings its
    // directory back, and the next operation parks it again).
    for (path, a) in got.iter().rev() {
        assert_eq!(&parking.getattr(a.ino).unwrap(), a, "{path}");
        if a.kind == Kind::File {
            assert_eq!(
                parking.read(a.ino, 0, 100).unwrap(),
                plain.read(a.ino, 0, 100).unwrap()
            );
        }
    }
    // Parked files keep the kernel's references: unlinked, one stays
    // readable by its number until released.
    let f = ino_of(&got, "/top/d05/f07");
    let d = ino_of(&got, "/top/d05");
    parking.unlink(d, b"f07").unwrap();
    assert_eq!(parking.read(f, 0, 100).unwrap(), b"5 7\n");
    parking.release(f);
    assert!(parking.getattr(f).is_err());
    // The journal loaded every directory: a replay parks as it goes, and
    // gives every number the inode it had.
    let before: Vec<_> = got
        .iter()
        .map(|(_, a)| parking.getattr(a.ino).ok())
        .collect();
    drop(parking);
    let parking = open(&store, &base, "a", Some(100));
    let (resident, ..) = parking.table();
    assert!(resident <= 100 + 64 + 52, "{resident} inodes after replay");
    let after: Vec<_> = got
        .iter()
        .map(|(_, a)| parking.getattr(a.ino).ok())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn changes_through_numbers_held_across_parking_commit_the_same_tree() {
    let (_tmp, store, base) = env();
    let mut roots = Vec::new();
    let mut attrs = Vec::new();
    for (name, budget) in [("a", Some(0)), ("b", None)] {
        let f = open(&store, &base, name, budget);
        let seen = walked(&f);
        // Each through a number from the walk: below parked directories.
        // A directory's own attributes, which its parent's tree holds (its
        // parent `d11` is parked, and nothing else brings it back).
        let set = SetAttr {
            perm: Some(0o700),
            ..SetAttr::default()
        };
        f.setattr(ino_of(&seen, "/top/d11/sub"), &set).unwrap();
        let deep = ino_of(&seen, "/top/d03/sub/deep");
        let n = f.make(deep, b"new", &NewNode::new(Kind::File, 0o644, 0, 0), false);
        f.write(n.unwrap().ino, 0, b"made below parked parents")
            .unwrap();
        f.write(ino_of(&seen, "/top/d07/f10"), 2, b"changed")
            .unwrap();
        // Loaded only now, below parked parents.
        f.mkdir(ino_of(&seen, UNWALKED), b"made", 0o755, 0, 0)
            .unwrap();
        f.rename(
            ino_of(&seen, "/top/d12/sub"),
            b"deep",
            ino_of(&seen, "/top/d13"),
            b"moved",
            RenameMode::Replace,
        )
        .unwrap();
        let head = f.commit("parked").unwrap();
        let root = store.read_checkpoint(&head).unwrap().root;
        roots.push(flatten(&store, &root, ""));
        // Replayed from the commit's inode map: the same numbers.
        drop(f);
        let f = open(&store, &base, name, budget);
        // Through a number from before: a directory a replayed inode map
        // bound below a parent it had parked meanwhile is still reached.
        f.write(ino_of(&seen, "/top/d09/f01"), 0, b"after the replay")
            .unwrap();
        let head = f.commit("replayed").unwrap();
        let root = store.read_checkpoint(&head).unwrap().root;
        roots.push(flatten(&store, &root, ""));
        let now: Vec<_> = seen
            .iter()
            .map(|(p, a)| {
                let got = f.getattr(a.ino).ok().map(|a| Attr {
                    atime_ns: 0,
                    mtime_ns: 0,
                    ctime_ns: 0,
                    ..a
                });
                (p.clone(), got)
            })
            .collect();
        attrs.push(now);
    }
    assert_eq!(roots[0], roots[2]);
    assert_eq!(roots[1], roots[3]);
    assert!(roots[0].iter().any(|(p, _)| p == "/top/d03/sub/deep/new"));
    assert!(roots[0].iter().any(|(p, _)| p == "/top/d13/moved/x"));
    assert!(roots[0].iter().any(|(p, _)| p == "/top/d15/sub/deep/made"));
    assert_eq!(attrs[0], attrs[1]);
    assert!(attrs[0].iter().all(|(_, a)| a.is_some()));
}

/// Every entry under tree `id` by path ([`crate::store::flatten`]), its
/// times zeroed (the two forks made their changes at different times).
fn flatten(store: &Store, id: &ObjectId, path: &str) -> Vec<(String, Entry)> {
    let mut out = crate::store::flatten(store, id, path);
    for (_, e) in &mut out {
        (e.mtime_ns, e.ctime_ns) = (0, 0);
    }
    out
}

#[test]
fn the_last_directories_used_stay_loaded_over_the_budget() {
    let (_tmp, store, base) = env();
    Fork::create(&store, "a", &base).unwrap();
    let io = Arc::new(RealIo);
    let f = Fork::open_parking(store.clone(), io, "a", Budget::of(20)).unwrap();
    let seen = walked(&f);
    // Reading the 50 files of a parked directory (more than the budget)
    // brings it back once, not once a file.
    let (_, _, before) = f.table();
    for f07 in seen.iter().filter(|(p, _)| p.starts_with("/top/d05/f")) {
        f.read(f07.1.ino, 0, 10).unwrap();
    }
    let (resident, _, after) = f.table();
    assert_eq!(after - before, 1);
    assert!(resident > 50);
    // Two directories taking turns: still once each.
    let d06: Vec<_> = seen
        .iter()
        .filter(|(p, _)| p.starts_with("/top/d06/f"))
        .collect();
    let d08: Vec<_> = seen
        .iter()
        .filter(|(p, _)| p.starts_with("/top/d08/f"))
        .collect();
    for (a, b) in d06.iter().zip(&d08) {
        f.read(a.1.ino, 0, 10).unwrap();
        f.read(b.1.ino, 0, 10).unwrap();
    }
    assert_eq!(f.table().2 - after, 2);
}

#[test]
fn what_a_commit_stored_is_parked_but_not_what_changed_during_it() {
    let (_tmp, store, base) = env();
    let mut trees = Vec::new();
    let mut tables = Vec::new();
    for (name, budget) in [("a", Some(0)), ("b", None)] {
        let f = open(&store, &base, name, budget);
        let seen = walked(&f);
        let at = |p: &str| ino_of(&seen, p);
        f.write(at("/top/d07/f10"), 0, b"before the commit")
            .unwrap();
        let new = NewNode::new(Kind::File, 0o600, 0, 0);
        f.make(at("/top/d08"), b"made", &new, false).unwrap();
        let set = SetAttr {
            perm: Some(0o711),
            ..SetAttr::default()
        };
        f.setattr(at("/top/d10/sub"), &set).unwrap();
        f.commit_with("racing", |step| {
            if step == CommitStep::Folded {
                f.write(at("/top/d07/f11"), 0, b"during the commit")
                    .unwrap();
                f.make(at("/top/d09/sub"), b"late", &new, false).unwrap();
            }
            Ok(())
        })
        .unwrap();
        // One more operation, so the parking fork trims after the rebase.
        f.getattr(ROOT_INO).unwrap();
        tables.push(f.table());
        let head = f.commit("after").unwrap();
        let root = store.read_checkpoint(&head).unwrap().root;
        trees.push(flatten(&store, &root, ""));
    }
    assert_eq!(trees[0], trees[1]);
    for p in ["/top/d08/made", "/top/d09/sub/late"] {
        assert!(trees[0].iter().any(|(q, _)| q == p), "{p}");
    }
    let content = |p: &str| {
        let (_, e) = trees[0].iter().find(|(q, _)| q == p).unwrap();
        e.size
    };
    assert_eq!(content("/top/d07/f10"), 17);
    assert_eq!(content("/top/d07/f11"), 17);
    // What the first commit stored was parked: d08 and d10 with their files
    // (about 100 inodes), not d07 (f11 changed after the snapshot), d09
    // (hardlinks) nor d09/sub (changed after it): about 170 stay.
    let (parked, plain) = (tables[0], tables[1]);
    assert!(parked.0 < 200, "{parked:?} against {plain:?}");
}

/// `a/l1` and `p/u/l2` are one inode; `p` also holds a plain file; `q/r`
/// and `z/zz` are directories of one file each.
fn linked_env() -> (tempfile::TempDir, Arc<Store>, ObjectId) {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    for d in ["a", "p/u", "q/r", "z/zz"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    fs::write(src.join("a/l1"), b"old").unwrap();
    fs::hard_link(src.join("a/l1"), src.join("p/u/l2")).unwrap();
    fs::write(src.join("a/other"), b"x").unwrap();
    fs::write(src.join("p/f"), b"plain").unwrap();
    fs::write(src.join("q/r/f1"), b"r").unwrap();
    fs::write(src.join("z/zz/g1"), b"g").unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let base = base_checkpoint(&store, &src, "/srv/linked");
    (tmp, store, base)
}

/// The content at `path` in checkpoint `id`.
fn content_at(store: &Store, id: &ObjectId, path: &str) -> Vec<u8> {
    let ckpt = store.read_checkpoint(id).unwrap();
    let e = store.lookup_path(&ckpt, path.as_bytes()).unwrap().unwrap();
    let mut out = Vec::new();
    store.copy_content(&e, &mut out, path).unwrap();
    out
}

#[test]
fn a_commit_that_loads_everything_for_a_hardlink_is_the_last_one_to() {
    let (_tmp, store, base) = linked_env();
    for (name, budget) in [("a", Some(0)), ("b", None)] {
        let f = open(&store, &base, name, budget);
        let a = f.lookup(ROOT_INO, b"a").unwrap().ino;
        let p = f.lookup(ROOT_INO, b"p").unwrap().ino;
        f.readdir(p).unwrap(); // `p` loaded (then parked on "a"), `p/u` not.
        let other = f.lookup(a, b"other").unwrap().ino;
        f.write(other, 0, b"0").unwrap();
        f.commit("caches the trees of the root, a and p").unwrap();
        let l1 = f.lookup(a, b"l1").unwrap().ino;
        f.write(l1, 0, b"new").unwrap();
        assert!(f.needs_full_load(), "{name}");
        // During that commit, `l1` changes again and `z` is loaded: `z/zz`
        // takes the first number the fold's own loads gave (to `q/r`).
        let first = f
            .commit_with("loads everything", |step| {
                if step == CommitStep::Folded {
                    f.write(l1, 0, b"NEW").unwrap();
                    let z = f.lookup(ROOT_INO, b"z").unwrap().ino;
                    f.readdir(z).unwrap();
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(content_at(&store, &first, "p/u/l2"), b"new", "{name}");
        assert!(f.needs_full_load(), "{name}: changed during the commit");
        let second = f.commit("loads everything again").unwrap();
        assert_eq!(content_at(&store, &second, "p/u/l2"), b"NEW", "{name}");
        assert!(!f.needs_full_load(), "{name}: the hardlink is clean again");
        f.write(other, 0, b"1").unwrap();
        let third = f.commit("loads nothing more").unwrap();
        assert!(!f.needs_full_load(), "{name}");
        for (path, want) in [
            ("p/u/l2", &b"NEW"[..]),
            ("a/l1", b"NEW"),
            ("a/other", b"1"),
            ("q/r/f1", b"r"),
            ("z/zz/g1", b"g"),
        ] {
            assert_eq!(content_at(&store, &third, path), want, "{name}: {path}");
        }
        // `p` folded again: its unloaded `u` by the tree the full fold stored.
        let pf = f.lookup(p, b"f").unwrap().ino;
        f.write(pf, 0, b"P").unwrap();
        let fourth = f.commit("p changed").unwrap();
        assert_eq!(content_at(&store, &fourth, "p/u/l2"), b"NEW", "{name}");
        // Changed again: the next commit loads everything again.
        f.write(l1, 0, b"3rd").unwrap();
        assert!(f.needs_full_load(), "{name}");
        let fifth = f.commit("again").unwrap();
        assert_eq!(content_at(&store, &fifth, "p/u/l2"), b"3rd", "{name}");
        let z = f.lookup(ROOT_INO, b"z").unwrap().ino;
        let zz = f.lookup(z, b"zz").unwrap().ino;
        let names: Vec<_> = f
            .readdir(zz)
            .unwrap()
            .1
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, [b"g1".to_vec()], "{name}");
        drop(f);
        let f = open(&store, &base, name, budget);
        assert!(!f.needs_full_load(), "{name} reopened");
    }
}

/// A parked file's atime, when it is not its mtime, comes back with it
/// (its tree keeps none): after a commit made its directory parkable, and
/// after a replay that parked what the commit's inode map bound before its
/// `Atimes` record came. The same atimes as a fork that never parks.
#[test]
fn a_parked_file_keeps_its_atime_across_a_commit_and_a_replay() {
    let (_tmp, store, base) = env();
    let mut atimes = Vec::new();
    for (name, budget) in [("a", Some(0)), ("b", None)] {
        let f = open(&store, &base, name, budget);
        let seen = walked(&f);
        let files: Vec<u64> = seen
            .iter()
            .filter(|(p, _)| p.starts_with("/top/d03/f") || p.starts_with("/top/d04/f"))
            .map(|(_, a)| a.ino)
            .collect();
        assert_eq!(files.len(), 100);
        for (i, &ino) in files.iter().enumerate() {
            let set = SetAttr {
                atime: Some(Time::At(1_000 + i as i64)),
                ..SetAttr::default()
            };
            f.setattr(ino, &set).unwrap();
        }
        let all = |f: &Fork| -> Vec<i64> {
            files
                .iter()
                .map(|&i| f.getattr(i).unwrap().atime_ns)
                .collect()
        };
        let want: Vec<i64> = (0..100).map(|i| 1_000 + i).collect();
        assert_eq!(all(&f), want, "{name}");
        f.commit("atimes").unwrap();
        // The commit settled d03 and d04: walked again, they are parked
        // (with a budget) and brought back, each file's atime with it.
        walked(&f);
        if budget.is_some() {
            assert!(f.table().1 > 0, "parked");
        }
        assert_eq!(all(&f), want, "{name}: after the commit");
        drop(f);
        let f = open(&store, &base, name, budget);
        assert_eq!(all(&f), want, "{name}: replayed");
        walked(&f);
        assert_eq!(all(&f), want, "{name}: replayed and walked");
        atimes.push(all(&f));
    }
    assert_eq!(atimes[0], atimes[1]);
}
