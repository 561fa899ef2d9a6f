//! The import's tree builder closes directories the archive has left (stores
//! their trees and drops their entries) and opens them again when the
//! archive comes back: whatever the order of the entries, the result (root
//! tree, counts, warnings, or the error) is the one building everything at
//! the end gives. Each archive here is imported twice, closing after every
//! entry (`open_entries: 0`) and never.

use std::path::Path;

use proptest::prelude::*;

use super::{Digests, ImportOptions, discover, import};
use crate::store::{Content, Kind, ObjectId, Store};

#[derive(Clone, Debug)]
enum Op {
    Dir(String),
    File(String, u8),
    Symlink(String, String),
    /// A hardlink to an earlier regular file's path (which may name
    /// something else by then), or to any op's when there is none.
    Hard(String, usize),
    /// `./`: the archive root's own metadata.
    Root,
}

/// A tar of `ops` in order, written as GNU tar writes headers.
fn archive(ops: &[Op]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let path_of = |op: &Op| match op {
        Op::Dir(p) | Op::File(p, _) | Op::Symlink(p, _) | Op::Hard(p, _) => p.clone(),
        Op::Root => "./".into(),
    };
    for (i, op) in ops.iter().enumerate() {
        let mut h = tar::Header::new_gnu();
        let name = path_of(op);
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_mtime(1_700_000_000 + i as u64);
        h.set_uid(0);
        h.set_gid(0);
        let mut data = Vec::new();
        match op {
            Op::Dir(_) | Op::Root => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o700 + i as u32 % 0o77);
            }
            Op::File(_, seed) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                data = format!("{name} {seed}\n")
                    .repeat(*seed as usize)
                    .into_bytes();
            }
            Op::Symlink(_, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_link_name(target).unwrap();
                h.set_mode(0o777);
            }
            Op::Hard(_, to) => {
                // The `to`-th earlier regular file, or else the `to`-th op.
                let files: Vec<&Op> = ops[..i].iter().filter(|o| matches!(o, File(..))).collect();
                let target = match files.len() {
                    0 => path_of(&ops[*to % ops.len()]),
                    n => path_of(files[*to % n]),
                };
                h.set_entry_type(tar::EntryType::Link);
                h.set_link_name(target).unwrap();
                h.set_mode(0o644);
            }
        }
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

#[derive(Debug, PartialEq)]
struct Outcome {
    root: ObjectId,
    top: Option<Vec<u8>>,
    origin: Option<String>,
    warnings: Vec<String>,
    entries: u64,
    bytes: u64,
}

/// Import the archive at `path` into a new store under `dir`: the outcome,
/// the most entries held at once and the objects written.
fn import_at(
    dir: &Path,
    path: &Path,
    opts: ImportOptions,
) -> (Store, Result<(Outcome, usize, u64), String>) {
    let store = Store::open_or_create(dir).unwrap();
    let parts = discover(&[path.to_path_buf()]).unwrap();
    let result = import(&store, &parts, &Digests::default(), &opts)
        .map(|i| {
            let (held, objects) = (i.peak_entries_held, i.stats.new_objects);
            let outcome = Outcome {
                root: i.root,
                top: i.top_name,
                origin: i.origin_hint,
                warnings: i.warnings,
                entries: i.stats.entries,
                bytes: i.stats.bytes,
            };
            (outcome, held, objects)
        })
        .map_err(|e| e.to_string());
    (store, result)
}

/// Import `ops` closing after every entry, and never; the same outcome
/// both ways. Returns the first import's store and outcome.
fn assert_same(ops: &[Op]) -> (Store, Result<(Outcome, usize, u64), String>) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a.tar");
    std::fs::write(&path, archive(ops)).unwrap();
    let [closing, whole] = [0, usize::MAX].map(|open_entries| {
        let opts = ImportOptions {
            threads: 1,
            open_entries,
            ..ImportOptions::default()
        };
        import_at(&tmp.path().join(format!("s{open_entries}")), &path, opts)
    });
    assert_eq!(
        closing.1.as_ref().map(|r| &r.0),
        whole.1.as_ref().map(|r| &r.0),
        "{ops:?}"
    );
    closing
}

/// Every entry under root tree `root` ([`crate::store::flatten`]): (path,
/// kind, nlink, link_id, the file's bytes or the symlink's target).
fn listing(store: &Store, root: &ObjectId) -> Vec<(String, Kind, u32, u64, Vec<u8>)> {
    let entry = |(path, e): (String, crate::store::Entry)| {
        let bytes = match &e.content {
            Content::Target(t) => t.clone(),
            Content::Extents(_) => {
                let mut v = Vec::new();
                store.copy_content(&e, &mut v, "t").unwrap();
                v
            }
            _ => Vec::new(),
        };
        (path, e.kind, e.nlink, e.link_id, bytes)
    };
    crate::store::flatten(store, root, "")
        .into_iter()
        .map(entry)
        .collect()
}

use Op::*;

fn d(p: &str) -> Op {
    Dir(p.into())
}
fn f(p: &str, seed: u8) -> Op {
    File(p.into(), seed)
}

#[test]
fn an_archive_that_comes_back_to_a_closed_directory_imports_the_same_tree() {
    // Each is closed after every entry: `a` once `b/` comes, and so on.
    let ops = vec![
        d("t/"),
        d("t/a/"),
        f("t/a/x", 1),
        d("t/a/s/"),
        f("t/a/s/deep", 2),
        d("t/b/"),
        f("t/b/y", 3),
        // Back into a closed directory, and one below it.
        f("t/a/z", 4),
        f("t/a/s/deeper", 5),
        // Hardlinks to the third and fifth files: t/b/y, in a closed
        // directory, and t/a/s/deeper, two closed directories down from
        // the new t/c.
        Hard("t/b/h".into(), 2),
        f("t/c/new", 6),
        Hard("t/c/h2".into(), 4),
        // A closed directory named again: new metadata, entries kept.
        d("t/b/"),
        // Replaced: a file twice, an empty closed directory by a file.
        f("t/a/x", 7),
        d("t/e/"),
        f("t/f", 8),
        f("t/e", 9),
        Symlink("t/a/s/deep".into(), "../x".into()),
        f("t/STORE.json", 10),
    ];
    let (store, result) = assert_same(&ops);
    let (outcome, _, _) = result.expect("imports");
    assert_eq!(outcome.top.as_deref(), Some(b"t".as_slice()));
    assert_eq!(outcome.entries, 16);
    // What tar -x makes of it.
    let file = |p: &str, seed: u8| format!("{p} {seed}\n").repeat(seed as usize).into_bytes();
    let (dir, reg, sym) = (Kind::Dir, Kind::File, Kind::Symlink);
    let want = vec![
        ("/".into(), dir, 5, 0, vec![]),
        ("/STORE.json".into(), reg, 1, 0, file("t/STORE.json", 10)),
        ("/a".into(), dir, 3, 0, vec![]),
        ("/a/s".into(), dir, 2, 0, vec![]),
        ("/a/s/deep".into(), sym, 1, 0, b"../x".to_vec()),
        ("/a/s/deeper".into(), reg, 2, 1, file("t/a/s/deeper", 5)),
        ("/a/x".into(), reg, 1, 0, file("t/a/x", 7)),
        ("/a/z".into(), reg, 1, 0, file("t/a/z", 4)),
        ("/b".into(), dir, 2, 0, vec![]),
        ("/b/h".into(), reg, 2, 2, file("t/b/y", 3)),
        ("/b/y".into(), reg, 2, 2, file("t/b/y", 3)),
        ("/c".into(), dir, 2, 0, vec![]),
        ("/c/h2".into(), reg, 2, 1, file("t/a/s/deeper", 5)),
        ("/c/new".into(), reg, 1, 0, file("t/c/new", 6)),
        ("/e".into(), reg, 1, 0, file("t/e", 9)),
        ("/f".into(), reg, 1, 0, file("t/f", 8)),
    ];
    assert_eq!(listing(&store, &outcome.root), want);
}

#[test]
fn a_closed_directory_with_entries_is_not_replaced_by_a_file() {
    let err = assert_same(&[d("a/"), f("a/x", 1), d("b/"), f("a", 2)])
        .1
        .unwrap_err();
    assert!(
        err.contains("replaces a directory that has entries"),
        "{err}"
    );
}

#[test]
fn the_single_top_directory_closed_before_the_end_is_the_root() {
    // `./` closes `t` (not on its path); the root still has `t` alone.
    let ops = [
        d("t/"),
        f("t/STORE.json", 1),
        d("t/s/"),
        f("t/s/x", 2),
        Root,
    ];
    let (outcome, _, _) = assert_same(&ops).1.expect("imports");
    assert_eq!(outcome.top.as_deref(), Some(b"t".as_slice()));
}

/// An archive that takes turns between two directories: each is closed and
/// opened again at most twice (then it stays open), not at every turn, which
/// would store a new tree of it each time.
#[test]
fn an_archive_taking_turns_between_directories_does_not_store_them_at_each_turn() {
    let mut ops = vec![d("t/"), d("t/a/"), d("t/b/")];
    for i in 0..30 {
        ops.push(f(&format!("t/a/f{i:02}"), 1 + i % 9));
        ops.push(f(&format!("t/b/f{i:02}"), 1 + i % 9));
    }
    let (_, result) = assert_same(&ops);
    let (outcome, _, objects) = result.expect("imports");
    assert_eq!(outcome.entries, 63);
    // 60 files, and trees: the root, t, and a and b each stored at most three
    // times (closed twice before they stay open, then at the end).
    assert!(objects <= 60 + 2 + 6, "{objects} objects written");
}

/// An archive in the order tar writes, 20 directories of 200 files: closing
/// once 500 entries are held keeps about that many, where building at the
/// end holds them all; same tree.
#[test]
fn an_import_holds_the_entries_of_the_directories_it_is_in() {
    let mut ops = vec![d("top/")];
    for i in 0..20 {
        ops.push(d(&format!("top/d{i:02}/")));
        for j in 0..200 {
            ops.push(f(&format!("top/d{i:02}/f{j:03}"), 1 + (j % 5) as u8));
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("a.tar");
    std::fs::write(&path, archive(&ops)).unwrap();
    let run = |open_entries, sync_objects, at: &str| {
        let opts = ImportOptions {
            threads: 1,
            open_entries,
            sync_objects,
            ..ImportOptions::default()
        };
        let (store, r) = import_at(&tmp.path().join(at), &path, opts);
        let (outcome, held, _) = r.unwrap();
        let published = store.backend().list().unwrap().len();
        (outcome, held, published)
    };
    let (bounded, held, published) = run(500, 100, "bounded");
    let (whole, held_whole, published_whole) = run(usize::MAX, usize::MAX, "whole");
    assert_eq!(bounded, whole);
    assert!(held <= 500 + 200 + 3, "held {held} entries at once");
    assert!(held_whole > 4000, "held {held_whole} entries at once");
    // Objects are published as they pile up (nothing is until the checkpoint
    // is written when the threshold is never reached).
    assert!(published >= 3000, "{published} objects published");
    assert_eq!(published_whole, 0);
}

fn op() -> impl Strategy<Value = Op> {
    let dir = prop::collection::vec(prop::sample::select(vec!["d1", "d2", "d3"]), 1..=3);
    let top = prop::sample::select(vec!["", "", "", "t/"]);
    // Mostly names no directory has; sometimes one, for the clashes.
    let leaf = prop::sample::select([["f1", "f2", "f3"].repeat(5), vec!["d1"]].concat());
    let path = (top.clone(), dir.clone(), leaf).prop_map(|(t, d, l)| {
        let d = &d[..d.len() - 1];
        let mut p = t.to_string();
        for c in d {
            p.push_str(c);
            p.push('/');
        }
        p.push_str(l);
        p
    });
    let dir_path = (top, dir).prop_map(|(t, d)| format!("{t}{}/", d.join("/")));
    prop_oneof![
        3 => dir_path.prop_map(Dir),
        5 => (path.clone(), 1u8..20).prop_map(|(p, s)| File(p, s)),
        1 => (path.clone(), prop::sample::select(vec!["f1", "../f2", "/etc"]))
            .prop_map(|(p, t)| Symlink(p, t.into())),
        2 => (path, 0usize..40).prop_map(|(p, i)| Hard(p, i)),
        1 => Just(Root),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn closing_directories_early_changes_nothing(ops in prop::collection::vec(op(), 1..40)) {
        let _ = assert_same(&ops);
    }
}
