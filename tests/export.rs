//! Export as other tools read it: the origin in a PAX global header, files
//! with holes as PAX 1.0 sparse entries, every node type as GNU tar extracts
//! it; and origins checked wherever one is recorded or used (issue 15, items
//! 5, 7 and 8). Archives are checked with GNU tar, bsdtar and Python's
//! tarfile, and extracted into the test's own temp dirs.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Env, read_all, set_xattr, stderr, walk, xattrs};

/// Run a shell command; returns its output whatever the exit code.
fn sh(cmd: &str) -> Output {
    Command::new("bash").arg("-c").arg(cmd).output().unwrap()
}

/// Run a shell command that must succeed with nothing on stderr.
fn sh_clean(cmd: &str) -> String {
    let out = sh(cmd);
    assert!(out.status.success(), "{cmd}: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "{cmd} wrote to stderr");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// Snapshot `dir` under ref `name`; returns the checkpoint id.
fn snapshot(env: &Env, dir: &Path, name: &str) -> String {
    env.ok([
        "snapshot".as_ref(),
        dir.as_os_str(),
        "--ref".as_ref(),
        name.as_ref(),
    ])
    .trim()
    .to_string()
}

/// Export `target` to `out`.
fn export(env: &Env, target: &str, out: &Path) {
    env.ok([
        "export".as_ref(),
        target.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
}

fn checkpoint(env: &Env, id: &str) -> serde_json::Value {
    serde_json::from_slice(
        &fs::read(env.store.join(format!("checkpoints/{}.json", id.trim()))).unwrap(),
    )
    .unwrap()
}

/// What Python's tarfile sees: the global PAX headers, and each member's
/// name, type, PAX headers and sparse map.
fn python_listing(archive: &Path) -> serde_json::Value {
    let script = r#"
import json, sys, tarfile
t = tarfile.open(sys.argv[1], encoding="utf-8", errors="surrogateescape")
ms = [{"name": m.name.encode("utf-8", "surrogateescape").decode("latin-1"),
       "type": m.type.decode("latin-1"), "size": m.size,
       "pax": m.pax_headers, "sparse": m.sparse} for m in t.getmembers()]
print(json.dumps({"global": t.pax_headers, "members": ms}))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(archive)
        .output()
        .unwrap();
    assert!(out.status.success(), "python3 tarfile: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The data segments of a file as SEEK_DATA/SEEK_HOLE report them.
fn data_map(path: &Path) -> Vec<(i64, i64)> {
    let f = fs::File::open(path).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    let size = f.metadata().unwrap().len() as i64;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < size {
        // SAFETY: a valid open descriptor.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            break; // ENXIO: only a hole from here on
        }
        // SAFETY: as above: a valid open descriptor, no memory passed.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        out.push((data, hole));
        pos = hole;
    }
    out
}

/// Everything a restore must keep, per path under `root` (root included):
/// type and mode, owner, mtime to the nanosecond, size, device numbers,
/// symlink target, xattrs, bytes, data segments, and hardlink groups.
fn describe(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut first_of_inode: BTreeMap<u64, PathBuf> = BTreeMap::new();
    for rel in std::iter::once(PathBuf::new()).chain(walk(root)) {
        let p = root.join(&rel);
        let m = fs::symlink_metadata(&p).unwrap();
        let mut d = format!(
            "mode={:o} owner={}:{} mtime={}.{:09}",
            m.mode(),
            m.uid(),
            m.gid(),
            m.mtime(),
            m.mtime_nsec()
        );
        let ft = m.file_type();
        if !ft.is_dir() {
            d += &format!(" size={}", m.size());
        }
        if m.mode() & libc::S_IFMT == libc::S_IFCHR || m.mode() & libc::S_IFMT == libc::S_IFBLK {
            d += &format!(" rdev={}:{}", libc::major(m.rdev()), libc::minor(m.rdev()));
        }
        if ft.is_symlink() {
            d += &format!(" target={:?}", fs::read_link(&p).unwrap());
        } else {
            d += &format!(" xattrs={:?}", xattrs(&p));
        }
        if ft.is_file() {
            let bytes = read_all(&p).unwrap();
            d += &format!(
                " sha={} data={:?}",
                &storefs::store::to_hex(&sha256(&bytes))[..16],
                data_map(&p)
            );
            if m.nlink() > 1 {
                let first = first_of_inode.entry(m.ino()).or_insert_with(|| rel.clone());
                d += &format!(" links-with={first:?}");
            }
        }
        out.insert(rel, d);
    }
    out
}

fn sha256(b: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(b).to_vec()
}

fn assert_described_same(a: &Path, b: &Path, what: &str) {
    let (da, db) = (describe(a), describe(b));
    assert_eq!(
        da.keys().collect::<Vec<_>>(),
        db.keys().collect::<Vec<_>>(),
        "{what}: same names"
    );
    for (k, v) in &da {
        assert_eq!(v, &db[k], "{what}: {}", k.display());
    }
}

/// Write `len` bytes of `byte` at `offset` of an existing file.
fn write_at(path: &Path, offset: u64, len: usize, byte: u8) {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&vec![byte; len], offset).unwrap();
}

/// A file of `size` bytes, all hole, then `data` written at each offset.
fn sparse_file(path: &Path, size: u64, data: &[(u64, usize, u8)]) {
    let f = fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    drop(f);
    for &(off, len, byte) in data {
        write_at(path, off, len, byte);
    }
}

/// A tree with holes in every position: ending in a hole, starting with one,
/// only a hole, holes between data; a dense file; a hardlink to a sparse file.
fn make_sparse_tree(dir: &Path) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    sparse_file(&dir.join("ends-in-hole"), 3 << 20, &[(1 << 20, 4096, b'a')]);
    sparse_file(
        &dir.join("starts-with-hole"),
        2 << 20,
        &[((2 << 20) - 5000, 5000, b'b')],
    );
    sparse_file(&dir.join("only-hole"), 1 << 20, &[]);
    sparse_file(
        &dir.join("sub/holes-between"),
        (8 << 20) + 3,
        &[(0, 10, b'c'), (4 << 20, 70_000, b'd'), (8 << 20, 3, b'e')],
    );
    fs::write(dir.join("dense"), common::pseudo_random(200_000, 7)).unwrap();
    fs::hard_link(dir.join("ends-in-hole"), dir.join("sub/link-to-sparse")).unwrap();
    // The holes really are holes here (else the test proves nothing).
    assert_eq!(data_map(&dir.join("only-hole")), vec![]);
    assert_eq!(data_map(&dir.join("ends-in-hole")).len(), 1);
}

// ------------------------------------------------------------ item 5: origins

/// A small archive of one directory, made with GNU tar.
fn small_archive(env: &Env) -> PathBuf {
    let src = env.path("a/tree");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), b"x").unwrap();
    let archive = env.path("a.tar");
    sh_clean(&format!(
        "tar -cf {} -C {} tree",
        q(&archive),
        q(&env.path("a"))
    ));
    archive
}

fn list_checkpoints(env: &Env) -> usize {
    fs::read_dir(env.store.join("checkpoints")).map_or(0, |d| d.count())
}

#[test]
fn import_refuses_an_origin_with_dot_dot_and_drops_redundant_slashes() {
    let env = Env::new();
    let archive = small_archive(&env);
    let import = |origin: &str| {
        env.run([
            "import".as_ref(),
            archive.as_os_str(),
            "--origin".as_ref(),
            OsStr::new(origin),
        ])
    };
    for bad in ["/srv/x/../../etc", "/srv/x/..", "srv/x", "./x"] {
        let out = import(bad);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "--origin {bad} accepted: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("--origin") && err.contains("realpath"),
            "{err}"
        );
        assert_eq!(
            list_checkpoints(&env),
            0,
            "--origin {bad}: nothing published"
        );
    }
    // `//`, `.` and a trailing `/` name the same place: recorded canonical.
    let out = import("/srv//x/./y/");
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8(out.stdout).unwrap();
    assert_eq!(checkpoint(&env, &id)["origin"], "/srv/x/y");
}

/// Unmounts `0` when dropped, if something is mounted there.
struct UnmountOnDrop(PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
        let here = format!(" {} ", self.0.display());
        if mounts.lines().any(|l| l.contains(&here)) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
}

#[test]
fn mount_refuses_a_recorded_origin_that_is_not_canonical() {
    let env = Env::new();
    let dir = env.path("t");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("f"), b"x").unwrap();
    let id = snapshot(&env, &dir, "t");
    // A record as a store written before origins were checked may hold one.
    let mut ck = checkpoint(&env, &id);
    let sneaky = format!("{}/m/../elsewhere", env.tmp.path().display());
    ck["origin"] = sneaky.clone().into();
    let mut bytes = serde_json::to_vec_pretty(&ck).unwrap();
    bytes.push(b'\n');
    let bad_id = storefs::store::to_hex(&sha256(&bytes));
    fs::write(env.store.join(format!("checkpoints/{bad_id}.json")), &bytes).unwrap();

    // Before the fix it mounted at .../elsewhere: unmounted however the test ends.
    let _guard = UnmountOnDrop(env.path("elsewhere"));
    let out = env.run(["mount", &bad_id]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "mounted at {sneaky}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("'..'") && err.contains("storefs mount"),
        "{err}"
    );
    assert!(!env.path("elsewhere").exists(), "no mountpoint made");
}

// --------------------------------------------------- item 7: origin recorded

#[test]
#[cfg_attr(
    not(storefs_have_bsdtar),
    ignore = "needs bsdtar: apt-get install libarchive-tools (scripts/setup-debian.sh), then touch build.rs"
)]
fn export_records_the_origin_in_a_pax_global_header_other_tools_ignore() {
    let env = Env::new();
    // A plain directory: no STORE.json, so only the header carries the origin.
    let dir = env.path("srv/plain-dir");
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("sub/f"), b"hello").unwrap();
    snapshot(&env, &dir, "p");
    let archive = env.path("p.tar");
    export(&env, "p", &archive);

    // The first entry is a global header (typeflag 'g') with STOREFS.origin.
    let bytes = fs::read(&archive).unwrap();
    assert_eq!(bytes[156], b'g', "first entry is a PAX global header");
    let listing = python_listing(&archive);
    assert_eq!(
        listing["global"],
        serde_json::json!({"STOREFS.origin": dir.to_str().unwrap()})
    );

    // GNU tar and bsdtar list and extract the tree and nothing else, silently.
    let expected = "plain-dir/\nplain-dir/sub/\nplain-dir/sub/f\n";
    assert_eq!(sh_clean(&format!("tar -tf {}", q(&archive))), expected);
    assert_eq!(sh_clean(&format!("bsdtar -tf {}", q(&archive))), expected);
    for (tool, cmd) in [("gnu", "tar -xf"), ("bsd", "bsdtar -xf")] {
        let x = env.path(&format!("x-{tool}"));
        fs::create_dir_all(&x).unwrap();
        sh_clean(&format!("cd {} && {cmd} {}", q(&x), q(&archive)));
        assert_eq!(
            walk(&x),
            ["plain-dir", "plain-dir/sub", "plain-dir/sub/f"]
                .map(PathBuf::from)
                .to_vec(),
            "{tool}: no extra file"
        );
    }
}

/// Needs the import side of item 7 (the reader branch): STOREFS.origin read back.
#[test]
fn import_of_an_export_keeps_a_plain_directorys_origin() {
    let env = Env::new();
    let dir = env.path("srv/plain-dir");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("f"), b"hello").unwrap();
    let id = snapshot(&env, &dir, "p");
    let archive = env.path("p.tar.zst");
    export(&env, "p", &archive);
    let env2 = Env::new();
    let id2 = env2.ok(["import".as_ref(), archive.as_os_str()]);
    let (a, b) = (checkpoint(&env, &id), checkpoint(&env2, &id2));
    assert_eq!(
        b["origin"],
        dir.to_str().unwrap(),
        "origin from the global header"
    );
    assert_eq!(a["root"], b["root"], "same tree");
    // --origin still wins over the header.
    let id3 = env2.ok([
        "import".as_ref(),
        archive.as_os_str(),
        "--origin".as_ref(),
        "/srv/other".as_ref(),
    ]);
    assert_eq!(checkpoint(&env2, &id3)["origin"], "/srv/other");
}

/// Issue 43, finding 1: a tree whose STORE.json names another root, snapshotted
/// where it is, comes back from its export at the origin it was exported with
/// (the archive's record ranks above STORE.json); an archive without the record
/// (GNU tar's) still takes STORE.json's root.
#[test]
fn import_of_an_export_keeps_its_origin_over_the_store_json_inside() {
    let env = Env::new();
    let dir = env.path("srv/b");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("STORE.json"), br#"{"root": "/srv/a"}"#).unwrap();
    fs::write(dir.join("f"), b"hello").unwrap();
    let id = snapshot(&env, &dir, "b");
    assert_eq!(checkpoint(&env, &id)["origin"], dir.to_str().unwrap());
    let archive = env.path("b.tar.zst");
    export(&env, "b", &archive);

    let env2 = Env::new();
    let id2 = env2.ok(["import".as_ref(), archive.as_os_str()]);
    assert_eq!(
        checkpoint(&env2, &id2)["origin"],
        dir.to_str().unwrap(),
        "the exported origin, not STORE.json's root"
    );

    // Without the record, STORE.json's root.
    let plain = env.path("b-gnu.tar");
    sh_clean(&format!(
        "tar -C {} -cf {} b",
        q(&env.path("srv")),
        q(&plain)
    ));
    let env3 = Env::new();
    let id3 = env3.ok(["import".as_ref(), plain.as_os_str()]);
    assert_eq!(checkpoint(&env3, &id3)["origin"], "/srv/a");
}

/// Issue 43, finding 12: export prints what the manifest holds (relative
/// names, and the joined archive's line when split), nothing else.
#[test]
fn export_prints_the_manifests_lines() {
    let env = Env::new();
    let dir = env.path("srv/m");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("f"), common::pseudo_random(200_000, 12)).unwrap();
    snapshot(&env, &dir, "m");
    for split in [None, Some("64K")] {
        let out = env.path(&format!("m-{}.tar", split.unwrap_or("whole")));
        let mut args = vec![
            "export".as_ref(),
            "m".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ];
        if let Some(s) = split {
            args.extend(["--split".as_ref(), OsStr::new(s)]);
        }
        let printed = env.ok(&args);
        let manifest = fs::read_to_string(format!("{}.sha256", out.display())).unwrap();
        assert_eq!(printed, manifest, "{split:?}");
        let name = out.file_name().unwrap().to_str().unwrap();
        assert!(
            printed
                .lines()
                .last()
                .unwrap()
                .ends_with(&format!("  {name}"))
                || split.is_none(),
            "the joined archive's line: {printed}"
        );
        assert!(!printed.contains('/'), "relative names: {printed}");
    }
}

// ------------------------------------------------------ item 8: sparse files

#[test]
#[cfg_attr(
    not(storefs_have_bsdtar),
    ignore = "needs bsdtar: apt-get install libarchive-tools (scripts/setup-debian.sh), then touch build.rs"
)]
fn files_with_holes_export_as_pax_sparse_entries_gnu_tar_and_bsdtar_restore_sparse() {
    let env = Env::new();
    let dir = env.path("srv/sparse");
    make_sparse_tree(&dir);
    snapshot(&env, &dir, "s");
    let archive = env.path("s.tar");
    export(&env, "s", &archive);
    let apparent: u64 = walk(&dir)
        .iter()
        .map(|r| fs::symlink_metadata(dir.join(r)).unwrap().size())
        .sum();
    let archived = fs::metadata(&archive).unwrap().len();
    assert!(
        archived < 400_000,
        "{archived} bytes for {apparent} bytes of files: holes written as zeros"
    );

    // As GNU tar's `--format=posix --sparse --sparse-version=1.0` writes them.
    let listing = python_listing(&archive);
    let members: BTreeMap<String, &serde_json::Value> = listing["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_string(), m))
        .collect();
    for (rel, size, map) in [
        (
            "ends-in-hole",
            3u64 << 20,
            vec![(1u64 << 20, 4096u64), (3 << 20, 0)],
        ),
        ("starts-with-hole", 2 << 20, vec![((2 << 20) - 8192, 8192)]),
        ("only-hole", 1 << 20, vec![(1 << 20, 0)]),
        (
            "sub/holes-between",
            (8 << 20) + 3,
            vec![(0, 4096), (4 << 20, 73_728), (8 << 20, 3)],
        ),
    ] {
        let name = format!("sparse/{rel}");
        let m = members[&name];
        let pax = &m["pax"];
        assert_eq!(pax["GNU.sparse.major"], "1", "{rel}: {m}");
        assert_eq!(pax["GNU.sparse.minor"], "0", "{rel}");
        assert_eq!(pax["GNU.sparse.name"], name.as_str(), "{rel}");
        assert_eq!(pax["GNU.sparse.realsize"], size.to_string(), "{rel}");
        assert_eq!(m["size"], size, "{rel}");
        let got: Vec<(u64, u64)> = serde_json::from_value(m["sparse"].clone()).unwrap();
        assert_eq!(got, map, "{rel}: sparse map");
    }
    let dense = members["sparse/dense"];
    assert!(dense["sparse"].is_null(), "a file without holes is plain");
    assert!(
        !dense["pax"]
            .as_object()
            .unwrap()
            .contains_key("GNU.sparse.major")
    );
    assert_eq!(
        members["sparse/sub/link-to-sparse"]["type"], "1",
        "hardlink"
    );

    // GNU tar and bsdtar restore them sparse, byte for byte, silently.
    for (tool, cmd) in [
        ("gnu", "tar -xpS --numeric-owner -f"),
        ("bsd", "bsdtar -xp --numeric-owner -f"),
    ] {
        let x = env.path(&format!("x-{tool}"));
        fs::create_dir_all(&x).unwrap();
        sh_clean(&format!("cd {} && {cmd} {}", q(&x), q(&archive)));
        assert_described_same(&dir, &x.join("sparse"), tool);
    }
}

#[test]
fn a_terabyte_sparse_file_exports_to_a_small_archive_and_extracts_sparse() {
    let env = Env::new();
    let dir = env.path("srv/huge");
    fs::create_dir_all(&dir).unwrap();
    let size = 1u64 << 40;
    sparse_file(
        &dir.join("tb"),
        size,
        &[
            (1 << 30, 5000, b'x'),
            (1 << 39, 4096, b'y'),
            (size - 100, 100, b'z'),
        ],
    );
    snapshot(&env, &dir, "h");
    let archive = env.path("h.tar.zst");
    export(&env, "h", &archive);
    let archived = fs::metadata(&archive).unwrap().len();
    assert!(
        archived < 64 << 10,
        "{archived} bytes for a 1 TiB sparse file"
    );
    let x = env.path("x");
    fs::create_dir_all(&x).unwrap();
    sh_clean(&format!(
        "cd {} && zstd -qdc {} | tar -xpS -f -",
        q(&x),
        q(&archive)
    ));
    let (a, b) = (dir.join("tb"), x.join("huge/tb"));
    assert_eq!(fs::metadata(&b).unwrap().len(), size);
    assert_eq!(data_map(&a), data_map(&b), "the same data segments");
    assert!(fs::metadata(&b).unwrap().blocks() < 1024, "restored sparse");
    // The bytes of each segment (reading the whole file would read 1 TiB).
    let read = |p: &Path, off: u64, len: usize| {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; len];
        fs::File::open(p)
            .unwrap()
            .read_exact_at(&mut buf, off)
            .unwrap();
        buf
    };
    for (off, end) in data_map(&a) {
        let (off, len) = (off as u64, (end - off) as usize);
        assert_eq!(read(&a, off, len), read(&b, off, len), "bytes at {off}");
    }
}

/// Needs the import side of item 1 (the reader branch): PAX 1.0 sparse
/// entries decoded into holes.
#[test]
fn an_export_with_holes_reimports_to_the_same_tree() {
    let env = Env::new();
    let dir = env.path("srv/sparse");
    make_sparse_tree(&dir);
    let id = snapshot(&env, &dir, "s");
    for name in ["s.tar", "s.tar.zst"] {
        let archive = env.path(name);
        export(&env, "s", &archive);
        let env2 = Env::new();
        let id2 = env2.ok(["import".as_ref(), archive.as_os_str()]);
        assert_eq!(
            checkpoint(&env, &id)["root"],
            checkpoint(&env2, &id2)["root"],
            "{name}: import(export(x)) has x's tree, holes included"
        );
    }
}

// ------------------------------------------------ every node type, GNU tar

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn every_node_type_extracts_with_gnu_tar_as_it_was() {
    let env = Env::new();
    let dir = env.path("srv/kinds");
    make_sparse_tree(&dir);
    let p = |rel: &str| dir.join(rel);
    fs::write(p("suid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(
        p("suid"),
        std::os::unix::fs::PermissionsExt::from_mode(0o4755),
    )
    .unwrap();
    fs::create_dir(p("sticky")).unwrap();
    fs::set_permissions(
        p("sticky"),
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    fs::write(p("sticky/a"), b"a").unwrap();
    fs::hard_link(p("sticky/a"), p("a-link")).unwrap();
    symlink("dense", p("sym")).unwrap();
    symlink("t".repeat(300), p("long-target")).unwrap();
    symlink("/nonexistent/abs", p("dangling")).unwrap();
    let long_dir = p(&"d".repeat(150));
    fs::create_dir(&long_dir).unwrap();
    fs::write(long_dir.join("f".repeat(200)), b"long").unwrap();
    let bad = dir.join(OsStr::from_bytes(b"not-utf8-\xff\xfe"));
    fs::write(&bad, b"latin").unwrap();
    sparse_file(
        &dir.join(OsStr::from_bytes(b"sparse-\xe9")),
        1 << 20,
        &[(1000, 1, b'q')],
    );
    set_xattr(&p("dense"), "user.binary", b"\n\0\xff\nA=1\n");
    set_xattr(&p("sub"), "user.dir", b"on a directory");
    set_xattr(&p("ends-in-hole"), "user.sparse", b"on a sparse file");
    fs::write(p("big-ids"), b"").unwrap();
    let mk = sh(&format!(
        "cd {} && mkfifo fifo && mknod cdev c 1 3 && mknod bdev b 8 1 && mknod bigdev c 4095 1048575 \
         && chown 3000000:4000000 big-ids \
         && touch -h -d @-304430399.876543211 sub/holes-between sym \
         && touch -d @-0.5 dense && touch -d @-86400 sticky/a && touch -d @-1 sticky",
        q(&dir)
    ));
    assert!(mk.status.success(), "{}", stderr(&mk));
    snapshot(&env, &dir, "k");
    for name in ["k.tar", "k.tar.gz"] {
        let archive = env.path(name);
        export(&env, "k", &archive);
        let x = env.path(&format!("x-{name}"));
        fs::create_dir_all(&x).unwrap();
        // GNU tar warns of any time before 1970 ("implausibly old"); it
        // restores them exactly all the same.
        sh_clean(&format!(
            "cd {} && tar -xpS --xattrs --xattrs-include='*' --numeric-owner --warning=no-timestamp -f {}",
            q(&x),
            q(&archive)
        ));
        assert_described_same(&dir, &x.join("kinds"), name);
    }
}

#[test]
#[cfg_attr(
    not(storefs_have_bsdtar),
    ignore = "needs bsdtar: apt-get install libarchive-tools (scripts/setup-debian.sh), then touch build.rs"
)]
fn acls_extract_with_gnu_tar_and_bsdtar() {
    let env = Env::new();
    let dir = env.path("srv/acls");
    fs::create_dir_all(dir.join("d")).unwrap();
    fs::write(dir.join("f"), b"acl").unwrap();
    let acl = |d: &Path| sh_clean(&format!("cd {} && getfacl -n -p f d | grep -v '^#'", q(d)));
    sh_clean(&format!(
        "cd {} && setfacl -m u:1234:rw,g:55:r f && setfacl -d -m g:55:rx,u:7:rwx d",
        q(&dir)
    ));
    let want = acl(&dir);
    assert!(want.contains("user:1234:rw-") && want.contains("default:user:7:rwx"));
    snapshot(&env, &dir, "a");
    let archive = env.path("a.tar");
    export(&env, "a", &archive);
    for (tool, cmd) in [
        ("gnu xattrs", "tar -xp --xattrs --xattrs-include='*' -f"),
        ("gnu acls", "tar -xp --acls -f"),
        ("bsd", "bsdtar -xp -f"),
    ] {
        let x = env.path(&format!("x-{}", tool.replace(' ', "-")));
        fs::create_dir_all(&x).unwrap();
        sh_clean(&format!("cd {} && {cmd} {}", q(&x), q(&archive)));
        assert_eq!(acl(&x.join("acls")), want, "{tool}");
    }
}
