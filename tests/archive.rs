//! Archives end to end through the real binary: a store archived with the
//! system `tar | zstd | split`, mounted straight from its first part at the
//! path it came from; corrupt, missing and reordered parts; the archive index
//! that makes a second mount skip the import; export round trips; and hostile
//! tars crafted with the `tar` crate.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Env, assert_same_tree, make_store, read_all, walk};

fn sh(cmd: &str) {
    let st = Command::new("bash").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
}

fn sh_out(cmd: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}");
    String::from_utf8(out.stdout).unwrap()
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// The lead-session store of the seeds, plus a store's own bookkeeping
/// (hash-named objects, checkpoints, refs). No sparse file: tar (without -S)
/// stores holes as zeros.
fn make_lead_store(root: &Path) {
    make_store(root);
    fs::remove_file(root.join("state/sparse.db")).unwrap();
    let obj =
        root.join("objects/9f/86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
    fs::create_dir_all(obj.parent().unwrap()).unwrap();
    fs::write(&obj, b"test").unwrap();
    fs::create_dir_all(root.join("checkpoints")).unwrap();
    fs::write(
        root.join("checkpoints/c-0001.json"),
        format!("{{\"root\": \"{}\", \"turn\": 12}}\n", root.display()),
    )
    .unwrap();
    fs::create_dir_all(root.join("refs")).unwrap();
    fs::write(root.join("refs/main"), b"c-0001\n").unwrap();
}

/// Archive `dir` like the seeds do; returns (first part, sha256 of the joined archive).
fn archive_split(dir: &Path, out_dir: &Path) -> (PathBuf, String) {
    fs::create_dir_all(out_dir).unwrap();
    let name = dir.file_name().unwrap().to_str().unwrap();
    let prefix = out_dir.join(format!("{name}.tar.zst.part"));
    sh(&format!(
        "tar --format=posix --xattrs -C {} -cf - {name} | zstd -q | split -b 256K -d - {}",
        q(dir.parent().unwrap()),
        q(&prefix)
    ));
    let hash = sh_out(&format!("cat {}* | sha256sum", q(&prefix)));
    (
        out_dir.join(format!("{name}.tar.zst.part00")),
        hash[..64].to_string(),
    )
}

fn parts_of(first: &Path) -> Vec<PathBuf> {
    let base = first.to_str().unwrap().trim_end_matches("00").to_string();
    let mut v: Vec<PathBuf> = fs::read_dir(first.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().starts_with(&base))
        .collect();
    v.sort();
    v
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn checkpoints(env: &Env) -> usize {
    fs::read_dir(env.store.join("checkpoints")).map_or(0, |d| d.count())
}

fn refs(env: &Env) -> usize {
    fs::read_dir(env.store.join("refs")).map_or(0, |d| d.count())
}

fn fuse_mounts_under(p: &Path) -> bool {
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.contains("fuse") && l.contains(p.to_str().unwrap()))
}

/// Mount an archive; returns a guard (found through `status`, like Env::mount).
fn mount_archive(env: &Env, args: &[&str]) -> (common::MountGuard, String) {
    let mut all = vec!["mount"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let guard = env.guard_for(args[0]);
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    assert!(guard.mountpoint.is_some(), "status does not list the mount");
    (guard, stderr(&out))
}

#[test]
fn mount_a_split_archive_at_its_origin() {
    let env = Env::new();
    let origin = env.path("srv/_lead_sessions/s1-gpt56-calibration-v1");
    make_lead_store(&origin);
    let (part0, hash) = archive_split(&origin, &env.path("backup"));
    assert!(parts_of(&part0).len() >= 3, "several parts");
    let kept = env.path("kept");
    fs::rename(&origin, &kept).unwrap();

    let (m, err) = mount_archive(&env, &[part0.to_str().unwrap(), "--sha256", &hash]);
    assert!(!err.contains("not verified"), "{err}");
    assert_eq!(m.path(), origin, "mounted at STORE.json's root");
    assert_same_tree(&kept, &origin, false);

    // The native history's absolute paths all open.
    let history = fs::read_to_string(origin.join("native/lead/sessions/rollout.jsonl")).unwrap();
    for line in history.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let p = Path::new(v["path"].as_str().unwrap());
        let rel = p.strip_prefix(&origin).unwrap();
        assert_eq!(read_all(p).unwrap(), read_all(&kept.join(rel)).unwrap());
    }
    // The checkpoint records the archive and its digest; the index names it.
    let rec: serde_json::Value =
        serde_json::from_slice(&fs::read(env.store.join(format!("archives/{hash}.json"))).unwrap())
            .unwrap();
    let id = rec["checkpoint"].as_str().unwrap().to_string();
    let ck: serde_json::Value = serde_json::from_slice(
        &fs::read(env.store.join(format!("checkpoints/{id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(ck["source"]["kind"], "import");
    assert_eq!(ck["source"]["sha256"], hash.as_str());
    assert_eq!(ck["origin"], origin.to_str().unwrap());
    assert_eq!(
        ck["source"]["files"].as_array().unwrap().len(),
        parts_of(&part0).len()
    );
    m.unmount();

    // Second mount: found in the index, no import (no new checkpoint, index untouched).
    let index = env.store.join(format!("archives/{hash}.json"));
    let before = (
        fs::read(&index).unwrap(),
        fs::metadata(&index).unwrap().mtime_nsec(),
        checkpoints(&env),
    );
    let (m, err) = mount_archive(&env, &[part0.to_str().unwrap(), "--sha256", &hash]);
    assert!(err.contains("already imported"), "{err}");
    assert_same_tree(&kept, &origin, false);
    m.unmount();
    // Without a digest: the parts are hashed and looked up, not imported again.
    let (m, err) = mount_archive(&env, &[part0.to_str().unwrap()]);
    assert!(err.contains("already imported"), "{err}");
    m.unmount();
    let after = (
        fs::read(&index).unwrap(),
        fs::metadata(&index).unwrap().mtime_nsec(),
        checkpoints(&env),
    );
    assert_eq!(before, after, "no re-import");
    assert!(!fuse_mounts_under(&env.path("")));
}

#[test]
fn corrupt_missing_and_reordered_parts() {
    let env = Env::new();
    let origin = env.path("srv/s2");
    make_lead_store(&origin);
    let backup = env.path("backup");
    let (part0, hash) = archive_split(&origin, &backup);
    let parts = parts_of(&part0);
    let manifest = env.path("s2.sha256");
    sh(&format!(
        "cd {} && sha256sum s2.tar.zst.part* > {m} && echo '{hash}  s2.tar.zst' >> {m}",
        q(&backup),
        m = q(&manifest)
    ));
    fs::rename(&origin, env.path("kept")).unwrap();

    // Reordered on the command line: sorted by suffix, and it verifies.
    let mut reordered: Vec<String> = parts
        .iter()
        .rev()
        .map(|p| p.display().to_string())
        .collect();
    reordered.insert(0, "import".into());
    reordered.extend(["--sha256".into(), hash.clone(), "--ref".into(), "s2".into()]);
    let id = env.ok(&reordered);
    assert_eq!(id.trim().len(), 64);

    // Corrupt a byte of part01 (in a fresh store).
    let env2 = Env::new();
    let mut bytes = fs::read(&parts[1]).unwrap();
    bytes[1000] ^= 0x55;
    let bad_dir = env2.path("bad");
    fs::create_dir_all(&bad_dir).unwrap();
    for p in &parts {
        fs::copy(p, bad_dir.join(p.file_name().unwrap())).unwrap();
    }
    fs::write(bad_dir.join("s2.tar.zst.part01"), &bytes).unwrap();
    let bad0 = bad_dir.join("s2.tar.zst.part00");
    let out = env2.run([
        "mount".as_ref(),
        bad0.as_os_str(),
        "--manifest".as_ref(),
        manifest.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(
        e.contains("s2.tar.zst.part01") && e.contains("mismatch"),
        "{e}"
    );
    assert_eq!(
        (checkpoints(&env2), refs(&env2)),
        (0, 0),
        "nothing published"
    );
    assert!(
        !env2.store.join("archives").exists()
            || fs::read_dir(env2.store.join("archives")).unwrap().count() == 0
    );
    assert!(!fuse_mounts_under(env2.tmp.path()) && !origin.exists());
    // With only --sha256, the message gives both digests.
    let out = env2.run([
        "import".as_ref(),
        bad0.as_os_str(),
        "--sha256".as_ref(),
        hash.as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    assert!(e.contains(&hash) && e.contains("expected"), "{e}");
    assert_eq!(checkpoints(&env2), 0);

    // A missing part is named.
    fs::remove_file(bad_dir.join("s2.tar.zst.part01")).unwrap();
    let out = env2.run(["import".as_ref(), bad0.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("s2.tar.zst.part01 is missing"),
        "{}",
        stderr(&out)
    );
    // Not the first part.
    let out = env2.run([
        "import".as_ref(),
        bad_dir.join("s2.tar.zst.part02").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("part00"), "{}", stderr(&out));
    assert_eq!(checkpoints(&env2), 0);
}

#[test]
fn export_round_trips_through_gnu_tar_and_import() {
    let env = Env::new();
    let origin = env.path("srv/s3-store");
    make_lead_store(&origin);
    let id = env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s3".as_ref(),
    ]);
    let root_of = |env: &Env, id: &str| -> String {
        let ck: serde_json::Value = serde_json::from_slice(
            &fs::read(env.store.join(format!("checkpoints/{}.json", id.trim()))).unwrap(),
        )
        .unwrap();
        ck["root"].as_str().unwrap().to_string()
    };
    let out_dir = env.path("out");
    fs::create_dir_all(&out_dir).unwrap();
    let file = out_dir.join("s3.tar.zst");
    env.ok([
        "export".as_ref(),
        "s3".as_ref(),
        "-o".as_ref(),
        file.as_os_str(),
        "--split".as_ref(),
        "1M".as_ref(),
    ]);
    let parts = parts_of(&out_dir.join("s3.tar.zst.part00"));
    assert!(parts.len() >= 2);
    let manifest = fs::read_to_string(out_dir.join("s3.tar.zst.sha256")).unwrap();
    assert_eq!(manifest.lines().count(), parts.len() + 1);
    sh(&format!(
        "cd {} && sha256sum --quiet -c --ignore-missing s3.tar.zst.sha256",
        q(&out_dir)
    ));
    let joined = sh_out(&format!("cat {}/s3.tar.zst.part* | sha256sum", q(&out_dir)));
    assert!(manifest.contains(&format!("{}  s3.tar.zst\n", &joined[..64])));

    // GNU tar lists and extracts it; the bytes are the original's.
    let x = env.path("extracted");
    fs::create_dir_all(&x).unwrap();
    sh(&format!(
        "cat {}/s3.tar.zst.part* | zstd -d | tar -tf - > /dev/null",
        q(&out_dir)
    ));
    sh(&format!(
        "cat {}/s3.tar.zst.part* | zstd -d | tar --xattrs -xf - -C {}",
        q(&out_dir),
        q(&x)
    ));
    let restored = x.join("s3-store");
    assert_eq!(walk(&restored), walk(&origin));
    for rel in walk(&origin) {
        let (a, b) = (origin.join(&rel), restored.join(&rel));
        let (ma, mb) = (
            fs::symlink_metadata(&a).unwrap(),
            fs::symlink_metadata(&b).unwrap(),
        );
        assert_eq!(ma.mode(), mb.mode(), "{}", rel.display());
        assert_eq!(
            (ma.mtime(), ma.mtime_nsec()),
            (mb.mtime(), mb.mtime_nsec()),
            "{}",
            rel.display()
        );
        if ma.is_file() {
            assert_eq!(
                read_all(&a).unwrap(),
                read_all(&b).unwrap(),
                "{}",
                rel.display()
            );
        }
    }

    // Re-import, in another store, gives the same tree; origin from STORE.json.
    let env2 = Env::new();
    let id2 = env2.ok([
        "import".as_ref(),
        out_dir.join("s3.tar.zst.part00").as_os_str(),
        "--manifest".as_ref(),
        out_dir.join("s3.tar.zst.sha256").as_os_str(),
    ]);
    assert_eq!(
        root_of(&env, &id),
        root_of(&env2, &id2),
        "import(export(x)) has x's tree"
    );
    // .tar.gz and plain tar too; importing the same archive twice gives the same id.
    for name in ["s3.tar.gz", "s3.tar"] {
        let f = out_dir.join(name);
        env.ok([
            "export".as_ref(),
            "s3".as_ref(),
            "-o".as_ref(),
            f.as_os_str(),
        ]);
        let a = env.ok(["import".as_ref(), f.as_os_str()]);
        let b = env.ok(["import".as_ref(), f.as_os_str()]);
        assert_eq!(a, b, "{name}: second import returns the first checkpoint");
        assert_eq!(root_of(&env, &a), root_of(&env, &id), "{name}");
    }
    // An archive named .zst that is really gzip: detected by magic bytes.
    let lying = out_dir.join("lying.tar.zst");
    fs::copy(out_dir.join("s3.tar.gz"), &lying).unwrap();
    let c = env.ok(["import".as_ref(), lying.as_os_str()]);
    assert_eq!(root_of(&env, &c), root_of(&env, &id));
}

// ------------------------------------------------------------- hostile tars

/// A tar entry with a raw name (no checks), for hostile archives.
fn raw_entry(
    b: &mut tar::Builder<Vec<u8>>,
    name: &[u8],
    kind: tar::EntryType,
    link: &[u8],
    data: &[u8],
    size: Option<u64>,
) {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name);
    h.set_entry_type(kind);
    h.set_mode(if kind == tar::EntryType::Directory {
        0o755
    } else {
        0o4755
    });
    h.set_size(size.unwrap_or(data.len() as u64));
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    if !link.is_empty() {
        h.set_link_name_literal(link).unwrap();
    }
    if matches!(kind, tar::EntryType::Char) {
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
    }
    h.set_cksum();
    b.append(&h, data).unwrap();
}

type Spec<'a> = &'a [(&'a [u8], tar::EntryType, &'a [u8], &'a [u8])];

fn tar_of(entries: Spec<'_>) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, link, data) in entries {
        raw_entry(&mut b, name, *kind, link, data, None);
    }
    b.into_inner().unwrap()
}

fn import_bytes(env: &Env, name: &str, bytes: &[u8]) -> std::process::Output {
    let p = env.path(name);
    fs::write(&p, bytes).unwrap();
    env.run([
        "import".as_ref(),
        p.as_os_str(),
        "--origin".as_ref(),
        "/srv/hostile".as_ref(),
    ])
}

#[test]
fn hostile_archives_are_refused_or_contained() {
    use tar::EntryType::{Char, Directory, Fifo, Link, Regular, Symlink};
    let env = Env::new();
    let refused: &[(&str, Vec<u8>, &str)] = &[
        (
            "dotdot",
            tar_of(&[(b"a/../../evil", Regular, b"", b"x")]),
            "'..'",
        ),
        (
            "through-symlink",
            tar_of(&[
                (b"a", Symlink, b"/etc", b""),
                (b"a/passwd", Regular, b"", b"x"),
            ]),
            "symlink 'a'",
        ),
        (
            "hardlink-missing",
            tar_of(&[(b"h", Link, b"nowhere", b"")]),
            "not earlier in the archive",
        ),
        (
            "hardlink-later",
            tar_of(&[(b"h", Link, b"f", b""), (b"f", Regular, b"", b"x")]),
            "not earlier",
        ),
        (
            "hardlink-outside",
            tar_of(&[(b"h", Link, b"../../etc/passwd", b"")]),
            "'..'",
        ),
        (
            "file-over-dir",
            tar_of(&[(b"d/f", Regular, b"", b"x"), (b"d", Regular, b"", b"y")]),
            "replaces a directory",
        ),
    ];
    for (name, bytes, want) in refused {
        let out = import_bytes(&env, name, bytes);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{name}: {}", stderr(&out));
    }
    // A name component longer than 255 bytes (PAX path record).
    let mut b = tar::Builder::new(Vec::new());
    let long = format!("d/{}", "n".repeat(300));
    b.append_pax_extensions([("path", long.as_bytes())])
        .unwrap();
    raw_entry(&mut b, b"short", Regular, b"", b"x", None);
    let out = import_bytes(&env, "long-name", &b.into_inner().unwrap());
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("longer than 255"), "{}", stderr(&out));

    // Declared size larger than the data: truncated, never pre-allocated.
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(&mut b, b"huge", Regular, b"", b"", Some(1 << 40));
    let mut bytes = b.into_inner().unwrap();
    bytes.extend_from_slice(&[7u8; 4096]);
    let out = import_bytes(&env, "huge", &bytes);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));

    // Truncated and corrupt compression name the file.
    let good = tar_of(&[(b"f", Regular, b"", &[1u8; 300_000])]);
    let z = zstd::bulk::compress(&good, 3).unwrap();
    let out = import_bytes(&env, "cut.tar.zst", &z[..z.len() / 2]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cut.tar.zst"), "{}", stderr(&out));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, &good).unwrap();
    let mut gz = gz.finish().unwrap();
    let n = gz.len();
    gz[n / 2] ^= 0xff;
    gz[n - 6] ^= 0xff; // and the CRC
    let out = import_bytes(&env, "bad.tar.gz", &gz);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("bad.tar.gz"), "{}", stderr(&out));
    assert_eq!(checkpoints(&env), 0, "nothing refused was published");

    // Contained: absolute names stripped, duplicates (later wins), devices,
    // fifos and setuid kept as metadata, symlinks kept as data, zero-filled
    // huge files stored as one chunk.
    let zeros = vec![0u8; 8 << 20];
    let ok = tar_of(&[
        (b"/abs/file", Regular, b"", b"absolute"),
        (b"./dup", Regular, b"", b"first"),
        (b"dup", Regular, b"", b"second"),
        (b"dev/null", Char, b"", b""),
        (b"dev/fifo", Fifo, b"", b""),
        (b"dev", Directory, b"", b""),
        (b"up", Symlink, b"../../../../etc/shadow", b""),
        (b"zeros", Regular, b"", &zeros),
        (b"zeros-link", Link, b"zeros", b""),
    ]);
    let objects = |env: &Env| {
        storefs::store::Store::open(&env.store)
            .unwrap()
            .backend()
            .list()
            .unwrap()
            .len()
    };
    let objects_before = objects(&env);
    let out = import_bytes(&env, "ok.tar", &ok);
    assert!(out.status.success(), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("absolute names") && e.contains("appears twice"),
        "{e}"
    );
    // 8 MiB of zeros: one chunk object; the rest are 3 small files and 4 trees.
    assert!(objects(&env) - objects_before <= 8, "zeros dedupe");
    let id = String::from_utf8(out.stdout).unwrap();
    let ls = env.ok(["ls", id.trim()]);
    assert!(
        ls.contains("abs/") && ls.contains("up -> ../../../../etc/shadow"),
        "{ls}"
    );
    assert!(
        ls.contains("-rwsr-xr-x   2") && ls.contains("zeros-link"),
        "{ls}"
    );
    assert_eq!(env.ok(["cat", id.trim(), "dup"]), "second");
    assert_eq!(env.ok(["cat", id.trim(), "abs/file"]), "absolute");
    let dev = env.ok(["ls", id.trim(), "dev"]);
    assert!(
        dev.contains("crwsr-xr-x") && dev.contains("prwsr-xr-x"),
        "{dev}"
    );
    // Mounted: nosuid,nodev; nothing outside the mount appeared.
    let mp = env.path("mnt");
    let m = env.mount(id.trim(), Some(&mp));
    assert_eq!(
        fs::read_link(mp.join("up")).unwrap(),
        Path::new("../../../../etc/shadow")
    );
    assert_eq!(fs::metadata(mp.join("zeros")).unwrap().len(), 8 << 20);
    assert!(fs::read(mp.join("dev/null")).is_err(), "nodev");
    m.unmount();
    assert!(!Path::new("/srv/hostile").exists() && !env.path("evil").exists());
}

#[test]
fn many_small_files_import_intact() {
    // More small files than a hasher batch holds, with identical ones among
    // them and a large file between: every file's bytes must come back.
    let env = Env::new();
    let src = env.path("srv/many");
    for i in 0..700 {
        let dir = src.join(format!("d{}", i % 9));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join(format!("f{i}.json")),
            format!("{{\"n\": {}}}\n", i % 250),
        )
        .unwrap();
        if i == 350 {
            let big: Vec<u8> = (0..3_000_000u32)
                .map(|x| (x.wrapping_mul(2654435761) >> 13) as u8)
                .collect();
            fs::write(dir.join("big.bin"), big).unwrap();
        }
    }
    let out_dir = env.path("out");
    fs::create_dir_all(&out_dir).unwrap();
    let archive = out_dir.join("many.tar.zst");
    sh(&format!(
        "tar -C {} -cf - many | zstd -q -o {}",
        q(src.parent().unwrap()),
        q(&archive)
    ));
    let id = env.ok(["import".as_ref(), archive.as_os_str()]);
    let restored = env.path("restored");
    env.ok(["restore".as_ref(), id.trim().as_ref(), restored.as_os_str()]);
    let files = walk(&src);
    assert!(files.len() > 700);
    assert_eq!(files, walk(&restored));
    for p in files {
        let (a, b) = (src.join(&p), restored.join(&p));
        if a.is_file() {
            assert_eq!(
                fs::read(&a).unwrap(),
                fs::read(&b).unwrap(),
                "{}",
                p.display()
            );
        }
    }
}
