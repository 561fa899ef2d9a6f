//! The core promise, end to end through the real binary and a real FUSE mount:
//! snapshot a store that records absolute paths, move it away, mount the
//! checkpoint at its origin, and find every byte and every `stat` field as it was.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use common::{Env, set_mtime, set_xattr, walk, xattrs};

/// A small agent store in the shape the seeds describe: STORE.json naming its own
/// absolute root, a native history JSONL naming files by absolute path, journals,
/// state, and the odd file kinds a real tree has.
fn make_store(root: &Path) {
    let r = root.display();
    fs::create_dir_all(root.join("native/lead/sessions")).unwrap();
    fs::create_dir_all(root.join("state")).unwrap();
    fs::create_dir_all(root.join("workspace/room/out")).unwrap();
    fs::create_dir_all(root.join("audit")).unwrap(); // empty dir
    fs::write(
        root.join("STORE.json"),
        format!(
            "{{\"root\": \"{r}\", \"model\": \"gpt-5.6\", \"native_home\": \"{r}/native/lead\"}}\n"
        ),
    )
    .unwrap();
    fs::write(
        root.join("state/lead.json"),
        b"{\"thread\": \"t-1\", \"turn\": 12}\n",
    )
    .unwrap();
    fs::write(
        root.join("state/runtime.json"),
        b"{\"python\": \"3.11.7\"}\n",
    )
    .unwrap();
    let mut journal = String::new();
    for i in 0..200 {
        journal.push_str(&format!(
            "{{\"seq\": {i}, \"event\": \"collect\", \"batch\": {}}}\n",
            i % 7
        ));
    }
    fs::write(root.join("workspace/room/out/_journal.jsonl"), journal).unwrap();
    let history = format!(
        "{{\"type\":\"read\",\"path\":\"{r}/state/lead.json\"}}\n\
         {{\"type\":\"read\",\"path\":\"{r}/workspace/room/out/_journal.jsonl\"}}\n\
         {{\"type\":\"read\",\"path\":\"{r}/STORE.json\"}}\n\
         {{\"type\":\"read\",\"path\":\"{r}/native/lead/big.log\"}}\n"
    );
    fs::write(root.join("native/lead/sessions/rollout.jsonl"), history).unwrap();
    // A multi-chunk file with some structure.
    let mut big = Vec::with_capacity(3 << 20);
    let mut x: u64 = 0x9e3779b97f4a7c15;
    while big.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big.extend_from_slice(format!("{:016x} line {}\n", x, big.len()).as_bytes());
    }
    fs::write(root.join("native/lead/big.log"), &big).unwrap();
    // Sparse: 64 MiB with 4 KiB of data in the middle.
    let mut sparse = fs::File::create(root.join("state/sparse.db")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    sparse.seek(SeekFrom::Start(32 << 20)).unwrap();
    sparse.write_all(&[7u8; 4096]).unwrap();
    drop(sparse);
    symlink(root.join("state/lead.json"), root.join("current-lead.json")).unwrap();
    symlink("../state/runtime.json", root.join("native/runtime-link")).unwrap();
    symlink("/nonexistent/dangling", root.join("dangling")).unwrap();
    fs::hard_link(
        root.join("state/lead.json"),
        root.join("native/lead-hardlink.json"),
    )
    .unwrap();
    fs::write(root.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o4755)).unwrap();
    fs::write(root.join("owned"), b"someone else's\n").unwrap();
    std::os::unix::fs::lchown(root.join("owned"), Some(1234), Some(5678)).unwrap();
    fs::create_dir(root.join("tmp-sticky")).unwrap();
    fs::set_permissions(root.join("tmp-sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    set_xattr(
        &root.join("state/lead.json"),
        "user.storefs.test",
        b"\x00binary\xff",
    );
    fs::write(
        root.join(std::ffi::OsStr::from_bytes(b"caf\xe9-latin1")),
        b"non-utf8 name\n",
    )
    .unwrap();
    let fifo = std::ffi::CString::new(root.join("pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    set_mtime(&root.join("STORE.json"), 1_700_000_000_123_456_789);
    fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
}

fn read_all(p: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    fs::File::open(p)?.read_to_end(&mut v)?;
    Ok(v)
}

/// Compare every path's bytes and stat between the original (moved) tree and the mount.
fn assert_same_tree(orig: &Path, mounted: &Path) {
    let paths = walk(orig);
    assert_eq!(paths, walk(mounted), "same names");
    assert!(paths.len() > 15);
    for rel in std::iter::once(std::path::PathBuf::new()).chain(paths) {
        let (a, b) = (orig.join(&rel), mounted.join(&rel));
        let (ma, mb) = (
            fs::symlink_metadata(&a).unwrap(),
            fs::symlink_metadata(&b).unwrap(),
        );
        let what = rel.display();
        assert_eq!(ma.mode(), mb.mode(), "mode of {what}");
        assert_eq!(
            (ma.uid(), ma.gid()),
            (mb.uid(), mb.gid()),
            "owner of {what}"
        );
        assert_eq!(ma.mtime(), mb.mtime(), "mtime of {what}");
        assert_eq!(ma.mtime_nsec(), mb.mtime_nsec(), "mtime ns of {what}");
        if !rel.as_os_str().is_empty() {
            // Moving the tree changed the root's ctime, nothing else's.
            assert_eq!(
                (ma.ctime(), ma.ctime_nsec()),
                (mb.ctime(), mb.ctime_nsec()),
                "ctime of {what}"
            );
        }
        if !ma.is_dir() {
            assert_eq!(ma.size(), mb.size(), "size of {what}");
            assert_eq!(ma.nlink(), mb.nlink(), "nlink of {what}");
        }
        assert_eq!(xattrs(&a), xattrs(&b), "xattrs of {what}");
        if ma.file_type().is_symlink() {
            assert_eq!(
                fs::read_link(&a).unwrap(),
                fs::read_link(&b).unwrap(),
                "target of {what}"
            );
        } else if ma.is_file() {
            assert_eq!(
                read_all(&a).unwrap(),
                read_all(&b).unwrap(),
                "bytes of {what}"
            );
        }
    }
    // Hardlinks are one inode in the mount too.
    let i1 = fs::metadata(mounted.join("state/lead.json")).unwrap().ino();
    let i2 = fs::metadata(mounted.join("native/lead-hardlink.json"))
        .unwrap()
        .ino();
    assert_eq!(i1, i2, "hardlinked paths share an inode");
    // Sparse stays sparse.
    let sparse = fs::metadata(mounted.join("state/sparse.db")).unwrap();
    assert_eq!(sparse.size(), 64 << 20);
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "sparse file reports {} blocks",
        sparse.blocks()
    );
}

#[test]
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
    assert_same_tree(&moved, &origin);

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
        fs::read_dir(&origin).unwrap().next().is_none(),
        "the mountpoint is empty again"
    );
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert!(status.is_empty());
}

#[test]
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
    let obj = env.store.join("objects").join(&hex[..2]).join(&hex[2..]);
    fs::set_permissions(&obj, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(
        &obj,
        zstd::bulk::compress(b"{\"python\": \"evil\"}\n", 3).unwrap(),
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
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    let pid = status[0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: the pid is the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while env.ok(["status", "--json"]).trim() != "[]" {
        assert!(
            std::time::Instant::now() < deadline,
            "status still lists a killed daemon"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
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
