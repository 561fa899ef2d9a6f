//! Issue 15, first "Done when" bullet: every archive GNU tar extracts imports and
//! restores to the tree `tar -xp --xattrs --sparse --numeric-owner` makes (names, types,
//! modes, owners, mtimes of listed entries, bytes, hardlinks, xattrs, rdev, holes), a
//! read-only mount shows that same tree, and the export re-imports to the same root
//! tree; every archive GNU tar refuses is refused by `storefs import` with one line on
//! stderr, publishing nothing.
//!
//! The archives: tests/data/archives/ (libarchive's and tar-rs's test archives, see
//! SOURCES.md there) and archives this test makes with GNU tar (every --format, the
//! PAX sparse versions, --xattrs, gzip, zstd, xz, bzip2 and lzip) and bsdtar (pax, ustar, gnutar, v7)
//! from a tree with every node type tar can hold.
//!
//! Every difference of every archive is collected and reported in one assertion at the
//! end (one line per archive). Run as root (mounts, mknod, chown). STOREFS_BIN=PATH runs
//! another storefs build against the same yardstick.

mod treecmp;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use treecmp::*;

/// Limit for one storefs import/restore/export (a sparse file read as data can make a
/// 10 KiB archive take many minutes; the test reports that instead of hanging).
const LIMIT: Duration = Duration::from_secs(30);
/// GNU tar's own work (extract/list/create).
const TAR_LIMIT: Duration = Duration::from_secs(120);

const NATIVE_X: &str = "tar -xp --xattrs --xattrs-include='*' --sparse --numeric-owner";

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/archives")
}

fn require_root() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "archive_corpus runs as root (mounts, mknod, chown)"
    );
    require_tools(&[
        "tar", "bsdtar", "zstd", "gzip", "xz", "bzip2", "lzip", "setfattr", "mknod", "truncate",
    ]);
}

fn workdir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("corpus-{tag}-"))
        .tempdir_in("/tmp")
        .unwrap()
}

/// The archive as a plain tar GNU tar can read from a file: compressed ones are
/// decompressed by the matching tool (GNU tar does not detect every zstd frame
/// layout, e.g. pzstd's leading skippable frame). Err: the decompressor's message.
fn plain_tar(archive: &Path, dir: &Path) -> Result<PathBuf, String> {
    let head = fs::read(archive)
        .map(|b| b[..b.len().min(4)].to_vec())
        .unwrap_or_default();
    let tool = if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd])
        || (head.len() == 4 && head[1..] == [0x2a, 0x4d, 0x18] && head[0] & 0xf0 == 0x50)
    {
        "zstd -dc"
    } else if head.starts_with(&[0x1f, 0x8b]) {
        "gzip -dc"
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X']) {
        "xz -dc"
    } else if head.starts_with(b"BZh") {
        "bzip2 -dc"
    } else if head.starts_with(b"LZIP") {
        "lzip -dc"
    } else {
        return Ok(archive.to_path_buf());
    };
    let out = dir.join("plain.tar");
    let r = sh(&format!("{tool} < {} > {}", q(archive), q(&out)), TAR_LIMIT);
    if r.ok() {
        Ok(out)
    } else {
        Err(format!("{tool}: {}", r.why()))
    }
}

/// A name as GNU tar extracts it, relative to the extraction directory.
fn normalize(name: &[u8]) -> PathBuf {
    let parts: Vec<&[u8]> = name
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    PathBuf::from(os(&parts.join(&b'/')))
}

/// The names the archive lists (`tar -t`), normalized.
fn listed(plain: &Path) -> BTreeSet<PathBuf> {
    let r = sh(
        &format!("tar -t --quoting-style=literal -f {}", q(plain)),
        TAR_LIMIT,
    );
    r.stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(normalize)
        .collect()
}

/// Check one archive; every problem found, one string each.
fn check_archive(archive: &Path, dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let store = dir.join("store");
    let native = dir.join("native");
    fs::create_dir_all(&native).unwrap();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 1;
    let gnu = match plain_tar(archive, dir) {
        Err(e) => Err(e),
        Ok(plain) => {
            let r = sh(
                &format!("{NATIVE_X} -f {} -C {}", q(&plain), q(&native)),
                TAR_LIMIT,
            );
            if r.ok() { Ok(plain) } else { Err(r.why()) }
        }
    };
    let arg = archive.as_os_str();
    let plain = match gnu {
        Err(why) => {
            // GNU tar refuses it: storefs must refuse with one line and publish nothing.
            let r = storefs(&store, &[OsStr::new("import"), arg], LIMIT);
            if r.killed.is_some() {
                problems.push(format!(
                    "GNU tar refuses it ({}); storefs import {}",
                    clip(&why, 120),
                    r.why()
                ));
            } else if r.ok() {
                problems.push(format!(
                    "GNU tar refuses it ({}) but storefs import succeeded",
                    clip(&why, 160)
                ));
            } else {
                let lines = r.stderr.trim_end().lines().count();
                if lines != 1 {
                    problems.push(format!(
                        "refused with {lines} lines on stderr, not one: {}",
                        clip(&r.stderr.trim_end().replace('\n', " | "), 300)
                    ));
                }
                if r.stderr.contains('\0') {
                    problems.push("refusal prints a NUL byte".into());
                }
            }
            for d in ["checkpoints", "refs", "archives"] {
                let left: Vec<String> = entries_in(&store, d)
                    .into_iter()
                    .filter(|n| !n.starts_with('.') && !n.ends_with(".tmp"))
                    .collect();
                if !left.is_empty() {
                    problems.push(format!("a refused import left {d}/{}", left.join(",")));
                }
            }
            return problems;
        }
        Ok(p) => p,
    };

    let t = Instant::now();
    let imp = storefs(&store, &[OsStr::new("import"), arg], LIMIT);
    if !imp.ok() {
        problems.push(format!("import: {}", imp.why()));
        return problems;
    }
    let import_secs = t.elapsed().as_secs_f64();
    let id = imp.stdout_str().lines().last().unwrap_or("").to_string();

    // One top-level directory: the checkpoint is that directory (docs/format.md).
    let top: Vec<_> = fs::read_dir(&native).unwrap().flatten().collect();
    let mut names = listed(&plain);
    let (cmp_root, root_listed) =
        if top.len() == 1 && top[0].file_type().map(|f| f.is_dir()).unwrap_or(false) {
            let t = PathBuf::from(top[0].file_name());
            let inside: BTreeSet<PathBuf> = names
                .iter()
                .filter_map(|p| p.strip_prefix(&t).ok().map(Path::to_path_buf))
                .collect();
            let root_listed = names.contains(&t);
            names = inside;
            (native.join(&t), root_listed)
        } else {
            let root_listed = names.contains(Path::new(""));
            (native.clone(), root_listed)
        };
    let opts = Opts {
        listed: Some(names),
        root_meta: root_listed,
        fresh_after: Some(started),
        holes: true,
        blocks: false,
    };
    let native_alloc = allocated(&cmp_root);
    // Room for headers and padding; a copy that writes holes as data is stopped early.
    let budget = native_alloc * 2 + (16 << 20);

    // Restore.
    let t_restore = Instant::now();
    let restore = dir.join("restore");
    let r = storefs_watch(
        &store,
        &[OsStr::new("restore"), OsStr::new(&id), restore.as_os_str()],
        LIMIT,
        || {
            let a = allocated(&restore);
            (a > budget).then(|| {
                format!(
                    "stopped: the restore allocated {} MiB, GNU tar's extraction {} MiB (holes written as data)",
                    a >> 20,
                    native_alloc >> 20
                )
            })
        },
    );
    if r.ok() {
        let d = compare_trees(&cmp_root, &restore, &opts);
        if !d.is_empty() {
            problems.push(format!("restore: {}", summary(&d, 6)));
        }
    } else {
        problems.push(format!("restore: {}", r.why()));
    }
    let _ = fs::remove_dir_all(&restore);

    let restore_secs = t_restore.elapsed().as_secs_f64();
    // Read-only mount.
    let t_mount = Instant::now();
    let mnt = dir.join("mnt");
    match Mount::new(&store, &id, &mnt) {
        Ok(m) => {
            let d = compare_trees(&cmp_root, &mnt, &opts);
            if !d.is_empty() {
                problems.push(format!("mount: {}", summary(&d, 6)));
            }
            if let Err(e) = m.unmount() {
                problems.push(e);
            }
        }
        Err(e) => problems.push(e),
    }

    let mount_secs = t_mount.elapsed().as_secs_f64();
    let t_export = Instant::now();
    // Export, then re-import: the same root tree; GNU tar extracts the export to the
    // same tree (sparse files as sparse files).
    let exp = dir.join("export.tar");
    let r = storefs_watch(
        &store,
        &[
            OsStr::new("export"),
            OsStr::new(&id),
            OsStr::new("-o"),
            exp.as_os_str(),
        ],
        LIMIT,
        || {
            let n = fs::metadata(&exp).map(|m| m.len()).unwrap_or(0);
            (n > budget).then(|| {
                format!(
                    "stopped: the export wrote {} MiB, GNU tar's extraction allocates {} MiB (holes written as data)",
                    n >> 20,
                    native_alloc >> 20
                )
            })
        },
    );
    if !r.ok() {
        problems.push(format!("export: {}", r.why()));
    } else {
        let re = storefs(&store, &[OsStr::new("import"), exp.as_os_str()], LIMIT);
        if !re.ok() {
            problems.push(format!("re-import of the export: {}", re.why()));
        } else {
            let id2 = re.stdout_str().lines().last().unwrap_or("").to_string();
            match (root_tree(&store, &id), root_tree(&store, &id2)) {
                (Ok(a), Ok(b)) if a != b => problems.push(format!(
                    "export re-imports to root tree {}, not {}",
                    &b[..12],
                    &a[..12]
                )),
                (Err(e), _) | (_, Err(e)) => problems.push(format!("checkpoint record: {e}")),
                _ => {}
            }
        }
        let xdir = dir.join("export-native");
        fs::create_dir_all(&xdir).unwrap();
        let x = sh(
            &format!("{NATIVE_X} -f {} -C {}", q(&exp), q(&xdir)),
            TAR_LIMIT,
        );
        if !x.ok() {
            problems.push(format!("GNU tar cannot extract the export: {}", x.why()));
        } else {
            let tops: Vec<_> = fs::read_dir(&xdir).unwrap().flatten().collect();
            if tops.len() != 1 {
                problems.push(format!(
                    "the export has {} top-level entries, not one directory",
                    tops.len()
                ));
            } else {
                let d = compare_trees(&cmp_root, &tops[0].path(), &opts);
                if !d.is_empty() {
                    problems.push(format!("export extracted by GNU tar: {}", summary(&d, 6)));
                }
            }
        }
    }
    // Not an assertion on time: where the time went, for whoever reads the log.
    eprintln!(
        "  import {import_secs:.1} s, restore {restore_secs:.1} s, mount {mount_secs:.1} s, export and re-import {:.1} s",
        t_export.elapsed().as_secs_f64()
    );
    problems
}

/// Run every archive; one line per archive with problems.
fn run_all(archives: &[(String, PathBuf)], work: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, (label, a)) in archives.iter().enumerate() {
        let dir = work.join(format!("a{i}"));
        fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        let p = check_archive(a, &dir);
        eprintln!(
            "{label}: {} ({:.1} s)",
            if p.is_empty() { "ok" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        if !p.is_empty() {
            failures.push(format!("{label}: {}", p.join(" // ")));
        }
        let _ = fs::remove_dir_all(&dir);
    }
    failures
}

fn report(what: &str, total: usize, failures: &[String]) {
    if let Some(p) = std::env::var_os("STOREFS_CORPUS_REPORT") {
        let mut text = failures.join("\n");
        text.push('\n');
        let p = PathBuf::from(p).with_extension(what);
        let _ = fs::write(p, text);
    }
    assert!(
        failures.is_empty(),
        "{} of {total} {what} archives do not come through unchanged (bin {}):\n{}",
        failures.len(),
        bin().display(),
        failures.join("\n")
    );
}

/// The archives of tests/data/archives (libarchive, tar-rs), labelled
/// `SUBDIR/NAME`, sorted.
fn corpus_archives() -> Vec<(String, PathBuf)> {
    let mut archives = Vec::new();
    for sub in ["libarchive", "libarchive-tar", "tar-rs"] {
        let mut files: Vec<PathBuf> = fs::read_dir(corpus_dir().join(sub))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            archives.push((format!("{sub}/{name}"), f));
        }
    }
    archives
}

/// The archives of tests/data/archives (libarchive, tar-rs).
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn corpus_archives_match_gnu_tar() {
    require_root();
    let mut archives = corpus_archives();
    assert!(
        archives.len() > 80,
        "the corpus is missing: {}",
        corpus_dir().display()
    );
    if let Ok(only) = std::env::var("STOREFS_CORPUS_ONLY") {
        archives.retain(|(l, _)| l.contains(&only));
    }
    let work = workdir("stored");
    let failures = run_all(&archives, work.path());
    report("stored", archives.len(), &failures);
}

/// A tree with every node type tar can hold, under SRC/top. Returns its top directory.
/// Without `everything`, the tree lacks the two things readers most often refuse (a
/// pre-1970 mtime and an xattr value holding newlines), so a refusal of those does not
/// hide how the rest (sparse files, devices, long and non-UTF-8 names) comes through.
fn make_source(src: &Path, everything: bool) -> PathBuf {
    let top = src.join("top");
    let script = format!(
        r#"set -e
mkdir -p {top}
cd {top}
mkdir -p dir/sub emptydir
printf 'hello\n' > dir/file
: > empty
printf 'linked data\n' > linked
ln linked dir/hardlink
ln linked hardlink2
ln -s dir/file symlink
ln -s does/not/exist dangling
ln -s $(printf 't%.0s' $(seq 150)) longtarget
mkfifo fifo
mknod chardev c 1 3
mknod blockdev b 7 200
# Sparse: a hole at the start, data at 1 MiB and 2 MiB, a hole at the end (4 MiB).
truncate -s 4M sparse
head -c 65536 /dev/zero | tr '\0' 'a' | dd of=sparse bs=4096 seek=256 conv=notrunc status=none
head -c 4096 /dev/zero | tr '\0' 'b' | dd of=sparse bs=4096 seek=512 conv=notrunc status=none
truncate -s 1M allhole
printf 'old\n' > old
printf 'setuid\n' > setuid; chmod 4755 setuid
printf 'setgid\n' > setgid; chmod 2711 setgid
mkdir sticky; chmod 1777 sticky
printf 'private\n' > private; chmod 0600 private
printf 'none\n' > noperm; chmod 0000 noperm
printf 'exe\n' > exe; chmod 0755 exe
printf 'caf\n' > $'caf\xe9'
mkdir -p $(printf 'a%.0s' $(seq 60))/$(printf 'b%.0s' $(seq 60))
printf 'long\n' > $(printf 'a%.0s' $(seq 60))/$(printf 'b%.0s' $(seq 60))/$(printf 'c%.0s' $(seq 90))
setfattr -n user.bin -v {bin} dir/file
setfattr -n user.text -v hello dir/file
{nl}
setfattr -n trusted.t -v 0x0102 linked
chown 123456:654321 dir/file
chown -h 4242:4343 symlink
chown 1000:1000 dir
chown 2097152:2097153 private
chown 1000:100 .
chmod 0750 .
find . -depth -exec touch -h -d @1600000000.123456789 {{}} +
touch -h -d @1500000000 dir/sub
{old}
"#,
        top = q(&top),
        bin = if everything { "0x00ff0a41" } else { "0x00ff41" },
        nl = if everything {
            "setfattr -n user.nl -v 0x0a0a0a dir"
        } else {
            ""
        },
        old = if everything {
            "touch -d '1960-05-04 03:02:01.5' old"
        } else {
            ""
        },
    );
    let r = sh(&script, TAR_LIMIT);
    assert!(r.ok(), "building the source tree: {}", r.why());
    top
}

/// Archives GNU tar and bsdtar write of the source tree: (label, path, how it went).
fn make_archives(src: &Path, out: &Path) -> Vec<(String, PathBuf)> {
    let s = q(src);
    let top = q(&src.join("top"));
    let gnu = "tar -c --numeric-owner --sparse";
    let xa = "--xattrs --xattrs-include='*'";
    let mut cmds: Vec<(String, String)> = Vec::new();
    for f in ["gnu", "oldgnu", "ustar", "v7"] {
        cmds.push((
            format!("gnutar-{f}.tar"),
            format!("{gnu} --format={f} -f OUT -C {s} top"),
        ));
    }
    cmds.push((
        "gnutar-posix.tar".into(),
        format!("{gnu} --format=posix {xa} -f OUT -C {s} top"),
    ));
    for v in ["0.0", "0.1", "1.0"] {
        cmds.push((
            format!("gnutar-posix-sparse{v}.tar"),
            format!("{gnu} --format=posix --sparse-version={v} {xa} -f OUT -C {s} top"),
        ));
    }
    cmds.push((
        "gnutar-gnu-xattrs.tar".into(),
        format!("{gnu} --format=gnu {xa} -f OUT -C {s} top"),
    ));
    // The tree's contents at the archive root (a `./` entry, several top-level names).
    cmds.push((
        "gnutar-posix-dot.tar".into(),
        format!("{gnu} --format=posix {xa} -f OUT -C {top} ."),
    ));
    cmds.push((
        "gnutar-posix.tar.gz".into(),
        format!("{gnu} --format=posix {xa} -z -f OUT -C {s} top"),
    ));
    cmds.push((
        "gnutar-posix.tar.zst".into(),
        format!("{gnu} --format=posix {xa} --zstd -f OUT -C {s} top"),
    ));
    for (ext, flag) in [("xz", "--xz"), ("bz2", "--bzip2"), ("lz", "--lzip")] {
        cmds.push((
            format!("gnutar-posix.tar.{ext}"),
            format!("{gnu} --format=posix {xa} {flag} -f OUT -C {s} top"),
        ));
    }
    for f in ["pax", "ustar", "gnutar", "v7"] {
        cmds.push((
            format!("bsdtar-{f}.tar"),
            format!("bsdtar -c --format {f} --read-sparse --xattrs -f OUT -C {s} top"),
        ));
    }
    let mut archives = Vec::new();
    for (name, cmd) in cmds {
        let path = out.join(&name);
        let r = sh(&cmd.replace("OUT", &q(&path)), TAR_LIMIT);
        let written = fs::metadata(&path).map(|m| m.len() > 0).unwrap_or(false);
        if !r.ok() {
            // A format that cannot hold everything: the tool skips those entries (and
            // says so); the rest is still an archive worth checking.
            eprintln!(
                "note: {name}: the tool exited {:?} ({}){}",
                r.code,
                clip(&r.stderr.replace('\n', " | "), 200),
                if written {
                    "; checking what it wrote"
                } else {
                    "; nothing written"
                }
            );
        }
        if written {
            archives.push((name, path));
        }
    }
    archives
}

/// Archives GNU tar and bsdtar make of a tree with every node type.
/// The import closes directories the archive has left (stores their trees,
/// drops their entries) once it holds many: closing after every entry gives
/// each corpus archive the same outcome (root tree, counts, warnings, or the
/// error) as never closing.
#[test]
fn corpus_archives_import_the_same_closing_directories_early() {
    use storefs::ingest::archive::{Digests, ImportOptions, discover, import};
    let archives = corpus_archives();
    let mut differ = Vec::new();
    for (label, f) in &archives {
        let tmp = workdir("closing");
        let [early, end] = [0, usize::MAX].map(|open_entries| {
            let store =
                storefs::store::Store::open_or_create(&tmp.path().join(format!("s{open_entries}")))
                    .unwrap();
            let opts = ImportOptions {
                threads: 1,
                open_entries,
                ..ImportOptions::default()
            };
            discover(std::slice::from_ref(f))
                .and_then(|parts| import(&store, &parts, &Digests::default(), &opts))
                .map(|i| {
                    (
                        i.root,
                        i.top_name,
                        i.origin_hint,
                        i.warnings,
                        i.stats.entries,
                    )
                })
                .map_err(|e| e.to_string())
        });
        if early != end {
            differ.push(format!("{label}: {early:?} against {end:?}"));
        }
    }
    assert!(
        archives.len() > 80,
        "the corpus is missing: {}",
        corpus_dir().display()
    );
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn generated_archives_match_gnu_tar() {
    require_root();
    let work = workdir("gen");
    let src = work.path().join("src");
    make_source(&src, true);
    let out = work.path().join("archives");
    fs::create_dir_all(&out).unwrap();
    let mut archives = make_archives(&src, &out);
    assert!(
        archives.len() >= 14,
        "too few archives were made: {archives:?}"
    );
    let plain_src = work.path().join("src-plain");
    make_source(&plain_src, false);
    let plain_out = work.path().join("archives-plain");
    fs::create_dir_all(&plain_out).unwrap();
    for (name, path) in make_archives(&plain_src, &plain_out) {
        let keep = [
            "gnutar-gnu.tar",
            "gnutar-oldgnu.tar",
            "gnutar-posix-sparse0.0.tar",
            "gnutar-posix-sparse0.1.tar",
            "gnutar-posix-sparse1.0.tar",
            "bsdtar-pax.tar",
        ];
        if keep.contains(&name.as_str()) {
            archives.push((format!("no-1960-no-newline-xattr/{name}"), path));
        }
    }
    if let Ok(only) = std::env::var("STOREFS_CORPUS_ONLY") {
        archives.retain(|(l, _)| l.contains(&only));
    }
    let failures = run_all(&archives, &work.path().join("runs"));
    report("generated", archives.len(), &failures);
}

#[test]
fn normalize_names_like_gnu_tar() {
    assert_eq!(normalize(b"./a//b/"), PathBuf::from("a/b"));
    assert_eq!(normalize(b"/abs/x"), PathBuf::from("abs/x"));
    assert_eq!(normalize(b"./"), PathBuf::from(""));
    assert_eq!(normalize(b"caf\xe9/x").as_os_str().as_bytes(), b"caf\xe9/x");
}
