//! `storefs snapshot` with a parent: unchanged files are taken from the
//! parent's stat cache, and the result is the tree a full snapshot gives.
//! (That unchanged files are not even opened is proved in the unit tests,
//! src/ingest/incremental_tests.rs, with a hook that records every open.)

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{Env, assert_same_tree, make_store, set_mtime, walk};
use storefs::ingest::statcache::{now_ns, racy};

/// Snapshot `dir` with `args`; (checkpoint id, stderr).
fn snap(env: &Env, dir: &Path, args: &[&str]) -> (String, String) {
    let mut all = vec!["snapshot", dir.to_str().unwrap(), "-v"];
    all.extend_from_slice(args);
    let (out, err) = env.ok_in(&env.store, &all);
    (out.trim().to_string(), err)
}

/// A checkpoint record's JSON.
fn record(env: &Env, id: &str) -> serde_json::Value {
    let path = env.store.join("checkpoints").join(format!("{id}.json"));
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

fn root_of(env: &Env, id: &str) -> String {
    record(env, id)["root"].as_str().unwrap().to_string()
}

/// Regular files (inodes) under `dir`.
fn inodes(dir: &Path) -> usize {
    walk(dir)
        .iter()
        .map(|rel| fs::symlink_metadata(dir.join(rel)).unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.ino())
        .collect::<BTreeSet<_>>()
        .len()
}

/// Wait until every file's ctime under `dir` is older than a snapshot
/// starting now can doubt (racy timestamps): a file written just before a
/// snapshot is rightly read again by the next one. Waits, asserts nothing
/// about time.
fn settle(dir: &Path) {
    let newest = walk(dir)
        .iter()
        .map(|rel| fs::symlink_metadata(dir.join(rel)).unwrap())
        .map(|m| m.ctime() * 1_000_000_000 + m.ctime_nsec())
        .max()
        .unwrap();
    while racy(newest, now_ns()) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The tree `make_store` builds plus a directory of small files.
fn fixture(env: &Env) -> std::path::PathBuf {
    let src = env.path("src");
    make_store(&src);
    fs::create_dir(src.join("many")).unwrap();
    for i in 0..20 {
        fs::write(src.join(format!("many/f{i:02}")), format!("file {i}\n")).unwrap();
    }
    settle(&src);
    src
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_second_snapshot_reads_only_changed_files_and_equals_a_full_one() {
    let env = Env::new();
    let src = fixture(&env);
    let n = inodes(&src);
    let (first, err) = snap(&env, &src, &["--ref", "s"]);
    assert!(
        err.contains(&format!("{n} files read, 0 unchanged")),
        "{err}"
    );

    // Two files grow, one is added, one removed, one replaced by another
    // inode with the same size and mtime.
    fs::write(src.join("many/f03"), "file 3, longer now\n").unwrap();
    fs::write(
        src.join("state/runtime.json"),
        "{\"python\": \"3.12.1\", \"x\": 1}\n",
    )
    .unwrap();
    fs::write(src.join("many/new"), "new\n").unwrap();
    fs::remove_file(src.join("many/f07")).unwrap();
    let old = fs::symlink_metadata(src.join("many/f11")).unwrap();
    fs::write(src.join("many/f11.tmp"), "FILE 11\n").unwrap();
    set_mtime(
        &src.join("many/f11.tmp"),
        old.mtime() * 1_000_000_000 + old.mtime_nsec(),
    );
    fs::rename(src.join("many/f11.tmp"), src.join("many/f11")).unwrap();

    let (second, err) = snap(&env, &src, &["--ref", "s"]);
    let unchanged = n - 4; // f03, runtime.json, f11 changed; f07 gone
    assert!(
        err.contains(&format!(
            "4 files read, {unchanged} unchanged since {}",
            &first[..12]
        )),
        "{err}"
    );
    assert_eq!(record(&env, &second)["parents"][0], first.as_str());

    let (full, err) = snap(&env, &src, &["--full"]);
    assert!(
        err.contains(&format!("{n} files read, 0 unchanged")),
        "{err}"
    );
    assert_eq!(root_of(&env, &second), root_of(&env, &full));

    let dest = env.path("restored");
    env.ok(["restore", second.as_str(), dest.to_str().unwrap()]);
    assert_same_tree(&src, &dest, false);
    assert_eq!(fs::read(dest.join("many/f11")).unwrap(), b"FILE 11\n");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_file_stamped_at_the_parents_start_is_read_again() {
    let env = Env::new();
    let src = fixture(&env);
    let n = inodes(&src);
    // An mtime in the future is not older than any snapshot's start.
    set_mtime(&src.join("many/f05"), now_ns() + 3600 * 1_000_000_000);
    settle(&src);
    snap(&env, &src, &["--ref", "r"]);
    for _ in 0..2 {
        let (_, err) = snap(&env, &src, &["--ref", "r"]);
        assert!(
            err.contains(&format!("1 files read, {} unchanged", n - 1)),
            "{err}"
        );
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn only_the_heads_of_refs_keep_a_stat_cache() {
    let env = Env::new();
    let src = fixture(&env);
    let caches = || {
        let mut names: Vec<String> = fs::read_dir(env.store.join("statcache"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let other = env.path("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("f"), "other\n").unwrap();
    let (a, _) = snap(&env, &other, &["--ref", "o"]);
    snap(&env, &src, &["--ref", "s"]);
    let mut heads = Vec::new();
    for i in 0..5 {
        fs::write(
            src.join("many/f01"),
            format!(
                "turn {i}
"
            ),
        )
        .unwrap();
        let (id, err) = snap(&env, &src, &["--ref", "s"]);
        assert!(err.contains("1 files read"), "{err}");
        heads.push(id);
    }
    // `s`'s head and `o`'s; none of the five checkpoints `s` moved past.
    let mut want = vec![a.clone(), heads[4].clone()];
    want.sort();
    assert_eq!(caches(), want);
    // A snapshot without a ref keeps its own (nothing moved past it)...
    let (loose, _) = snap(&env, &src, &["--parent", &heads[4]]);
    assert!(caches().contains(&loose));
    // ...until gc, past its grace period, which keeps the heads'.
    let (_, err) = env.ok_in(&env.store, &["gc", "--grace", "1h"]);
    assert!(err.contains("0 stat cache(s)"), "{err}");
    assert!(caches().contains(&loose));
    let (out, err) = env.ok_in(&env.store, &["gc", "--grace", "0s"]);
    assert!(err.contains("1 stat cache(s)"), "{err}");
    assert!(out.contains(&loose), "{out}");
    assert_eq!(caches(), want);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn without_a_usable_parent_every_file_is_read() {
    let env = Env::new();
    let src = fixture(&env);
    let n = inodes(&src);
    let every = format!("{n} files read, 0 unchanged");
    let (first, _) = snap(&env, &src, &["--ref", "s"]);
    let (id, err) = snap(&env, &src, &["--ref", "s", "--full"]);
    assert!(err.contains(&every), "--full: {err}");
    assert_eq!(root_of(&env, &id), root_of(&env, &first));

    // --parent names any checkpoint; from another directory it is refused.
    let other = env.path("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("f"), "other\n").unwrap();
    let (other_id, _) = snap(&env, &other, &["--ref", "o"]);
    let (id, err) = snap(&env, &src, &["--parent", "o"]);
    assert!(
        err.contains("reading every file") && err.contains("taken from"),
        "{err}"
    );
    assert!(err.contains(&every), "{err}");
    assert_eq!(record(&env, &id)["parents"][0], other_id.as_str());
    // A ref's head keeps its stat cache; a checkpoint the ref moved past
    // does not (its cache went when the ref moved), so it is read in full.
    let (_, err) = snap(&env, &src, &["--parent", &id]);
    assert!(
        err.contains(&format!("0 files read, {n} unchanged")),
        "{err}"
    );
    assert!(!env.store.join("statcache").join(&first).exists());
    let (_, err) = snap(&env, &src, &["--parent", &first]);
    assert!(
        err.contains("has no stat cache") && err.contains(&every),
        "{err}"
    );

    // No stat cache (a store written before it existed), or a damaged one.
    let (last, _) = snap(&env, &src, &["--ref", "s"]);
    let cache = env.store.join("statcache").join(&last);
    let good = fs::read(&cache).unwrap();
    fs::remove_file(&cache).unwrap();
    let (_, err) = snap(&env, &src, &["--parent", &last]);
    assert!(
        err.contains("has no stat cache") && err.contains(&every),
        "{err}"
    );
    fs::write(&cache, &good[..good.len() / 2]).unwrap();
    let (_, err) = snap(&env, &src, &["--parent", &last]);
    assert!(
        err.contains("damaged stat cache") && err.contains(&every),
        "{err}"
    );

    let msg = env.fails_in(
        &env.store,
        &["snapshot", src.to_str().unwrap(), "--parent", "nope"],
    );
    assert!(msg.contains("nope"), "{msg}");
}
