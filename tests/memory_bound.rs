//! `--cache-size` bounds what a mount's caches hold, and `status` reports it:
//! after reading many times the flag's worth of file data and directories,
//! through a read-only mount and through a browse mount of several
//! checkpoints, and through a fork (whose inode table is reported apart),
//! `status --json` shows each daemon's RSS and its cache use,
//! never over the flag. (The RSS itself is an environment measurement:
//! bench/scale/memory.py compares it with the flag.) Needs root and /dev/fuse.

mod common;

use std::fs;
use std::path::Path;

use common::{Env, MountGuard, pseudo_random, walk};

const CACHE: u64 = 1 << 20;

/// A tree with `files` incompressible files of 200 KiB (several times
/// [`CACHE`] in all) and `dirs` directories of 300 entries each.
fn make_tree(root: &Path, files: usize, dirs: usize, seed: u64) {
    fs::create_dir_all(root.join("data")).unwrap();
    for i in 0..files {
        fs::write(
            root.join(format!("data/f{i}")),
            pseudo_random(200 * 1024, seed * 1000 + i as u64),
        )
        .unwrap();
    }
    for d in 0..dirs {
        let dir = root.join(format!("dir{d}"));
        fs::create_dir(&dir).unwrap();
        for i in 0..300 {
            fs::write(dir.join(format!("entry-with-a-longish-name-{i:04}")), b"").unwrap();
        }
    }
}

/// This mount's line of `status --json`.
fn status_of(env: &Env, mountpoint: &Path) -> serde_json::Value {
    let list: Vec<serde_json::Value> = serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    list.into_iter()
        .find(|m| m["mountpoint"].as_str() == Some(mountpoint.to_str().unwrap()))
        .unwrap_or_else(|| panic!("status does not list {}", mountpoint.display()))
}

/// Check what status says of the mount at `mountpoint`: its RSS, and its
/// cache use within `CACHE`; returns (chunks, dirs) bytes.
fn check_status(env: &Env, mountpoint: &Path) -> (u64, u64) {
    let st = status_of(env, mountpoint);
    let rss = st["rss_bytes"].as_u64().expect("rss_bytes");
    let peak = st["peak_rss_bytes"].as_u64().expect("peak_rss_bytes");
    assert!(rss > 0 && peak >= rss, "rss {rss}, peak {peak}");
    let cache = &st["cache"];
    let limit = cache["limit"].as_u64().expect("cache.limit");
    let bytes = cache["bytes"].as_u64().expect("cache.bytes");
    let chunks = cache["chunks"].as_u64().expect("cache.chunks");
    let dirs = cache["dirs"].as_u64().expect("cache.dirs");
    assert_eq!(limit, CACHE, "the flag: {st}");
    assert_eq!(bytes, chunks + dirs, "{st}");
    assert!(bytes <= limit, "cache use over --cache-size: {st}");
    (chunks, dirs)
}

/// Read every file under `root` and stat every entry, checking the cache
/// bound after every few files; returns the bytes read.
fn read_everything(env: &Env, root: &Path, mountpoint: &Path) -> u64 {
    let mut read = 0;
    for (i, rel) in walk(root).into_iter().enumerate() {
        let p = root.join(&rel);
        let meta = fs::symlink_metadata(&p).unwrap();
        if meta.is_file() {
            read += fs::read(&p).unwrap().len() as u64;
        }
        if i % 500 == 0 {
            check_status(env, mountpoint);
        }
    }
    read
}

fn mount_with_cache(env: &Env, args: &[&str], target: &str) -> MountGuard {
    let out = env.run(args);
    let guard = env.guard_for(target);
    assert!(out.status.success(), "mount: {}", common::stderr(&out));
    assert!(guard.mountpoint.is_some(), "status does not list the mount");
    guard
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_read_only_mount_keeps_its_caches_within_the_flag_and_reports_them() {
    let env = Env::new();
    let tree = env.path("tree");
    make_tree(&tree, 24, 6, 1);
    let id = env
        .ok(["snapshot", tree.to_str().unwrap()])
        .trim()
        .to_string();
    let mp = env.path("ro");
    let guard = mount_with_cache(
        &env,
        &["mount", "--cache-size", "1M", &id, mp.to_str().unwrap()],
        &id,
    );
    let (chunks, _) = check_status(&env, &mp);
    assert_eq!(chunks, 0, "nothing read yet");
    let read = read_everything(&env, &mp, &mp);
    assert!(
        read > 4 * CACHE,
        "read {read} bytes: several times the flag"
    );
    let (chunks, dirs) = check_status(&env, &mp);
    assert!(chunks > CACHE / 4, "the chunk cache is in use: {chunks}");
    assert!(dirs > 0, "directories are counted: {dirs}");
    // The human table shows it too.
    let table = env.ok(["status"]);
    assert!(table.contains("/1.0M"), "{table}");
    guard.unmount();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_browse_mount_shares_one_bound_between_its_checkpoints() {
    let env = Env::new();
    for k in 0..4 {
        let tree = env.path(&format!("tree{k}"));
        make_tree(&tree, 8, 6, 10 + k);
        env.ok(["snapshot", tree.to_str().unwrap()]);
    }
    let mp = env.path("browse");
    let guard = mount_with_cache(
        &env,
        &[
            "mount",
            "--browse",
            "--cache-size",
            "1M",
            mp.to_str().unwrap(),
        ],
        "(browse)",
    );
    let checkpoints = mp.join("checkpoints");
    let mut read = 0;
    for ent in fs::read_dir(&checkpoints).unwrap() {
        let p = ent.unwrap().path();
        if p.is_dir() {
            read += read_everything(&env, &p, &mp);
        }
    }
    assert!(
        read > 4 * CACHE,
        "read {read} bytes: several times the flag"
    );
    // Four checkpoints of 1,800 entries: more than a quarter of the flag in
    // directories if each tree kept its own.
    let (_, dirs) = check_status(&env, &mp);
    assert!(dirs > CACHE / 8, "directories are counted: {dirs}");
    guard.unmount();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_fork_bounds_its_caches_by_the_flag_and_reports_its_state_apart() {
    let env = Env::new();
    let tree = env.path("tree");
    make_tree(&tree, 24, 20, 3);
    env.ok(["snapshot", tree.to_str().unwrap(), "--ref", "b"]);
    env.ok(["fork", "b", "--name", "f"]);
    let mp = env.path("fork");
    let guard = mount_with_cache(
        &env,
        &["mount", "--cache-size", "1M", "f", mp.to_str().unwrap()],
        "f",
    );
    let state_of = |env: &Env| -> u64 {
        let st = status_of(env, &mp);
        st["cache"]["state"]
            .as_u64()
            .unwrap_or_else(|| panic!("a fork reports its state: {st}"))
    };
    let (chunks, dirs) = check_status(&env, &mp);
    assert_eq!(
        (chunks, dirs),
        (0, 0),
        "nothing read yet, and no directory cache"
    );
    let before = state_of(&env);
    // Reading the base goes through the fork's chunk cache, within the flag.
    let read = read_everything(&env, &mp, &mp);
    assert!(
        read > 4 * CACHE,
        "read {read} bytes: several times the flag"
    );
    let (chunks, _) = check_status(&env, &mp);
    assert!(chunks > CACHE / 4, "the chunk cache is in use: {chunks}");
    // The inode table grows with what the fork lists, and is shown apart;
    // its base entries are parked within a quarter of the flag (6,000
    // entries loaded would take about 2.3 MB; parked: the quarter, the last
    // two directories used, and about 12 bytes an entry).
    let listed = state_of(&env);
    assert!(
        listed > before,
        "listing 6,000 entries grows the state: {before} -> {listed}"
    );
    assert!(
        listed < CACHE,
        "listing 6,000 entries keeps the state within its share: {listed}"
    );
    // New files are the fork's changes: they stay until a commit stores
    // them (statfs counts parked inodes too).
    let inodes = || rustix::fs::statvfs(&mp).unwrap().f_files;
    let listed_inodes = inodes();
    fs::create_dir(mp.join("new")).unwrap();
    for i in 0..500 {
        fs::write(mp.join(format!("new/f{i:04}")), b"x").unwrap();
    }
    assert_eq!(inodes(), listed_inodes + 501);
    // (Meanwhile the table parked more of the base: no comparison with
    // `listed`.)
    let made = state_of(&env);
    env.ok(["commit", "f", "-m", "new files"]);
    assert_eq!(inodes(), listed_inodes + 501, "after the commit");
    let committed = state_of(&env);
    assert!(
        committed + 500 * 200 < made,
        "committed, they are parked: {made} -> {committed}"
    );
    guard.unmount();
}
