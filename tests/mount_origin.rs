//! The core promise, end to end through the real binary and a real FUSE mount:
//! snapshot a store that records absolute paths, move it away, mount the
//! checkpoint at its origin, and find every byte and every `stat` field as it was.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{Env, assert_same_tree, make_store, read_all, walk};

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn snapshot_move_away_mount_at_origin_and_resume() {
    let env = Env::new();
    let origin = env.path("srv/_lead_sessions/s1-gpt56-calibration-v1");
    make_store(&origin);

    let out = env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
        "-m".as_ref(),
        "after-fleet".as_ref(),
    ]);
    let id = out.trim_end_matches('\n');
    assert_eq!(out.len(), 65, "stdout is the id and a newline: {out:?}");
    assert!(id.bytes().all(|c| c.is_ascii_hexdigit()));

    // Snapshotting the unchanged tree again writes no new objects.
    let objects_before = walk(&env.store.join("objects")).len();
    let again = env.ok(["snapshot".as_ref(), origin.as_os_str()]);
    assert_ne!(again.trim(), id, "a new checkpoint record");
    assert_eq!(
        walk(&env.store.join("objects")).len(),
        objects_before,
        "no new objects"
    );

    let moved = env.path("elsewhere");
    fs::rename(&origin, &moved).unwrap();
    assert!(!origin.exists());

    let m = env.mount("s1", None);
    assert_eq!(m.path(), origin, "mounted at the origin by default");
    assert_same_tree(&moved, &origin, true);
    // Sparse stays sparse.
    let sparse = fs::metadata(origin.join("state/sparse.db")).unwrap();
    assert_eq!(sparse.size(), 64 << 20);
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "sparse file reports {} blocks",
        sparse.blocks()
    );

    // A native tool that follows the absolute paths its history recorded.
    let history = fs::read_to_string(origin.join("native/lead/sessions/rollout.jsonl")).unwrap();
    for line in history.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let p = Path::new(v["path"].as_str().unwrap());
        assert!(p.starts_with(&origin));
        let rel = p.strip_prefix(&origin).unwrap();
        assert_eq!(read_all(p).unwrap(), read_all(&moved.join(rel)).unwrap());
    }
    let store_json: serde_json::Value =
        serde_json::from_slice(&read_all(&origin.join("STORE.json")).unwrap()).unwrap();
    assert_eq!(Path::new(store_json["root"].as_str().unwrap()), origin);

    // Random 4 KiB reads inside the multi-chunk file match.
    let big = read_all(&moved.join("native/lead/big.log")).unwrap();
    let mut f = fs::File::open(origin.join("native/lead/big.log")).unwrap();
    for off in [0u64, 4095, 65_536, 262_143, 1 << 20, (3 << 20) - 100] {
        let mut buf = vec![0u8; 4096];
        f.seek(SeekFrom::Start(off)).unwrap();
        let n = f.read(&mut buf).unwrap();
        assert!(n > 0);
        assert_eq!(
            &buf[..n],
            &big[off as usize..off as usize + n],
            "read at {off}"
        );
    }
    drop(f);

    // Read-only: every kind of write gets EROFS.
    let erofs =
        |r: std::io::Result<()>| assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS));
    erofs(fs::write(origin.join("new-file"), b"x"));
    erofs(
        fs::OpenOptions::new()
            .append(true)
            .open(origin.join("STORE.json"))
            .map(drop),
    );
    erofs(fs::remove_file(origin.join("STORE.json")));
    erofs(fs::create_dir(origin.join("lock.d")));
    erofs(fs::rename(origin.join("STORE.json"), origin.join("x")));
    erofs(fs::set_permissions(
        origin.join("STORE.json"),
        fs::Permissions::from_mode(0o600),
    ));

    // status lists it; a second mount at the same place is refused.
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0]["checkpoint"], id);
    assert_eq!(status[0]["mode"], "ro");
    assert_eq!(status[0]["target"], "s1");
    let busy = env.run(["mount", "s1"]);
    assert_eq!(busy.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("already a mount point"));

    m.unmount();
    assert!(
        !origin.exists() && env.path("srv/_lead_sessions").is_dir(),
        "the mountpoint the mount created is gone again, its parent that was there stays"
    );
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert!(status.is_empty());
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_corrupt_object_fails_only_its_file_with_eio() {
    let env = Env::new();
    let origin = env.path("src-tree");
    make_store(&origin);
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s".as_ref(),
    ]);

    // Find the object holding state/runtime.json and replace it with valid zstd of other bytes.
    let store = storefs::store::Store::open(&env.store).unwrap();
    let ck = store.read_checkpoint(&store.resolve("s").unwrap()).unwrap();
    let entry = store
        .lookup_path(&ck, b"state/runtime.json")
        .unwrap()
        .unwrap();
    let storefs::store::Content::Extents(ext) = &entry.content else {
        panic!("not a file")
    };
    let hex = ext[0].id.unwrap().to_hex();
    store
        .replace_stored_object(
            &ext[0].id.unwrap(),
            &zstd::bulk::compress(b"evil\n", 3).unwrap(),
        )
        .unwrap();

    let mp = env.path("mnt");
    let m = env.mount("s", Some(&mp));
    let err = read_all(&mp.join("state/runtime.json")).unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EIO),
        "corrupt chunk is EIO, never wrong bytes"
    );
    // The rest of the tree keeps working.
    assert_eq!(
        read_all(&mp.join("state/lead.json")).unwrap(),
        read_all(&origin.join("state/lead.json")).unwrap()
    );
    assert_eq!(
        read_all(&mp.join("native/lead/big.log")).unwrap(),
        read_all(&origin.join("native/lead/big.log")).unwrap()
    );
    m.unmount();
    let log = fs::read_dir(env.store.join("logs"))
        .unwrap()
        .map(|e| fs::read_to_string(e.unwrap().path()).unwrap())
        .collect::<String>();
    assert!(
        log.contains(&hex),
        "the daemon log names the corrupt object: {log}"
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_killed_daemon_is_reported_and_cleared_by_umount() {
    let env = Env::new();
    let origin = env.path("tree");
    fs::create_dir_all(origin.join("d")).unwrap();
    fs::write(origin.join("d/f"), b"data\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "k".as_ref(),
    ]);
    let mp = env.path("mnt");
    let m = env.mount("k", Some(&mp));
    common::kill_the_daemon(&env);
    let again = env.run(["mount".as_ref(), "k".as_ref(), mp.as_os_str()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("daemon that died"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    m.unmount(); // storefs umount clears the dead mount
    let m = env.mount("k", Some(&mp));
    assert_eq!(fs::read(mp.join("d/f")).unwrap(), b"data\n");
    m.unmount();
}

/// A tree with more entries than the mount keeps in memory (`--cache-size 1M`
/// keeps 4,096) has directories evicted and loaded again, with the same inode
/// numbers: two walks with the kernel's dentry and inode caches dropped in
/// between (so the second one asks the daemon again) see the same numbers,
/// hardlinks included, and the same bytes.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_tree_larger_than_the_inode_budget_keeps_its_inode_numbers() {
    let env = Env::new();
    let src = env.path("big");
    for d in 0..60 {
        fs::create_dir_all(src.join(format!("d{d:02}"))).unwrap();
        for f in 0..100 {
            fs::write(src.join(format!("d{d:02}/f{f:03}")), format!("{d}/{f}\n")).unwrap();
        }
    }
    fs::hard_link(src.join("d00/f000"), src.join("d59/link")).unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let mp = env.path("mnt");
    let out = env.run([
        "mount".as_ref(),
        "s1".as_ref(),
        mp.as_os_str(),
        "--cache-size".as_ref(),
        "1M".as_ref(),
    ]);
    let guard = env.guard_for("s1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inos = || -> Vec<(std::path::PathBuf, u64)> {
        walk(&mp)
            .into_iter()
            .map(|p| {
                let ino = fs::symlink_metadata(mp.join(&p)).unwrap().ino();
                (p, ino)
            })
            .collect()
    };
    let first = inos();
    assert_eq!(first.len(), 60 + 60 * 100 + 1);
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
    let second = inos();
    assert_eq!(first, second);
    let ino_of = |p: &str| first.iter().find(|(q, _)| q == Path::new(p)).unwrap().1;
    assert_eq!(ino_of("d00/f000"), ino_of("d59/link"));
    for (p, _) in &first {
        let (a, b) = (mp.join(p), src.join(p));
        if b.is_file() {
            assert_eq!(
                fs::read(&a).unwrap(),
                fs::read(&b).unwrap(),
                "{}",
                p.display()
            );
        }
    }
    guard.unmount();
}

/// Issue 38: the directories a mount created for a missing origin (the
/// mountpoint and its missing parents) are removed again when it is
/// unmounted, by `umount` and after a daemon that was killed alike; a
/// directory that was there before, or that someone else filled meanwhile,
/// stays.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn the_directories_a_mount_created_go_with_it() {
    let env = Env::new();
    let origin = env.path("pre/a/b/origin");
    fs::create_dir_all(&origin).unwrap();
    fs::write(origin.join("f"), b"data\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    fs::rename(env.path("pre/a"), env.path("moved")).unwrap();
    let pre = env.path("pre");
    let entries = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };

    // Created, then removed by `storefs umount`; `pre`, there before, stays.
    let m = env.mount("s1", None);
    assert_eq!(m.path(), origin);
    assert_eq!(fs::read(origin.join("f")).unwrap(), b"data\n");
    m.unmount();
    assert!(pre.is_dir(), "a directory that was there stays");
    assert!(
        entries(&pre).is_empty(),
        "pre/a and below are gone: {:?}",
        entries(&pre)
    );

    // Someone puts a file beside the mountpoint meanwhile: what holds it stays.
    let m = env.mount("s1", None);
    fs::write(env.path("pre/a/other"), b"x").unwrap();
    m.unmount();
    assert_eq!(entries(&env.path("pre/a")), ["other"]);
    fs::remove_dir_all(env.path("pre/a")).unwrap();

    // A daemon killed: `storefs umount` clears the dead mount and removes
    // what it created.
    let m = env.mount("s1", None);
    common::kill_the_daemon(&env);
    m.unmount();
    assert!(
        entries(&pre).is_empty(),
        "after a killed daemon: {:?}",
        entries(&pre)
    );

    // A mountpoint that was there, empty, stays, and so do its parents.
    fs::create_dir_all(&origin).unwrap();
    let m = env.mount("s1", None);
    m.unmount();
    assert!(origin.is_dir(), "a pre-existing mountpoint stays");
    assert!(entries(&origin).is_empty());
}
