//! Issue 15, second "Done when" bullet: a tree with holes, device nodes, fifos,
//! hardlinks, xattrs and POSIX ACLs looks the same to ordinary tools natively, on a
//! read-only mount of its snapshot, on a fork mount of it and restored:
//! `rsync -aHAXS --dry-run --itemize-changes` from the native tree to the copy shows
//! nothing, `du -s` and `du -s --apparent-size` agree, and
//! `tar --sparse --format=gnu --sort=name --numeric-owner -c . | sha256sum` is the same.
//! The same tree built inside a fork mount (mknod, setfacl, sparse writes on the fork)
//! must also match, mounted and restored after its commit.
//!
//! Every difference is collected and asserted once at the end. Run as root.
//! STOREFS_BIN=PATH runs another storefs build.

mod treecmp;

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::time::Duration;
use treecmp::*;

const LIMIT: Duration = Duration::from_secs(60);

/// Build the tree in `dir` (existing, empty). Every command that fails is named on stderr.
fn build_script(dir: &Path) -> String {
    format!(
        r#"trap 'echo "failed: $BASH_COMMAND" >&2' ERR
cd {dir} || exit 1
mkdir -p d/sub sticky
printf 'hello\n' > d/file
: > empty
seq 1 60000 > big
printf 'linked\n' > linked
ln linked d/hard
ln linked hard2
ln -s d/file sym
ln -s nowhere dangling
mkfifo fifo
mknod cdev c 1 7
mknod bdev b 7 201
# Holes at the start, in the middle and at the end.
truncate -s 4M sparse
head -c 65536 /dev/zero | tr '\0' 'a' | dd of=sparse bs=4096 seek=256 conv=notrunc status=none
head -c 4096 /dev/zero | tr '\0' 'b' | dd of=sparse bs=4096 seek=512 conv=notrunc status=none
truncate -s 2M allhole
setfattr -n user.bin -v 0x00ff0a41 d/file
setfattr -n user.dir -v x d
setfattr -n trusted.t -v 0x0102 linked
setfacl -m u:1234:rwx,g:5678:r-x,m::rwx d/file
setfacl -d -m u:1234:rx d
setfacl -m g:99:rw sparse
printf 'suid\n' > suid
chmod 4755 suid
chmod 1777 sticky
chmod 0600 big
chown 1000:1000 d/file
chown -h 4242:4343 sym
chown 1000:100 .
chmod 0750 .
find . -depth -exec touch -h -d @1600000000.123456789 {{}} +
touch -h -d @1500000000 d/sub
"#,
        dir = q(dir)
    )
}

/// What the tools say about a tree: (rsync itemize output from `native`, du -s,
/// du -s --apparent-size, sha256 of a GNU tar of it).
struct Views {
    du: String,
    du_apparent: String,
    tar_sha: String,
}

fn views(dir: &Path) -> Result<Views, String> {
    let one = |cmd: String| -> Result<String, String> {
        let r = sh(&cmd, LIMIT);
        if r.ok() {
            Ok(r.stdout_str())
        } else {
            Err(format!("`{cmd}`: {}", r.why()))
        }
    };
    Ok(Views {
        du: one(format!("du -s {} | cut -f1", q(dir)))?,
        du_apparent: one(format!("du -s --apparent-size {} | cut -f1", q(dir)))?,
        tar_sha: one(format!(
            "tar -C {} --sparse --format=gnu --sort=name --numeric-owner -cf - . | sha256sum | cut -c1-64",
            q(dir)
        ))?,
    })
}

/// Compare a copy with the native tree by the three tools; one string per difference.
fn compare(native: &Path, nv: &Views, copy: &Path) -> Vec<String> {
    let mut d = Vec::new();
    let r = sh(
        &format!(
            "rsync -aHAXS --dry-run --itemize-changes {}/ {}/",
            q(native),
            q(copy)
        ),
        LIMIT,
    );
    if !r.ok() {
        d.push(format!("rsync: {}", r.why()));
    } else {
        let out = String::from_utf8_lossy(&r.stdout).trim().to_string();
        if !out.is_empty() {
            d.push(format!(
                "rsync -aHAXS --dry-run --itemize-changes shows: {}",
                clip(&out.replace('\n', " | "), 400)
            ));
        }
    }
    match views(copy) {
        Err(e) => d.push(e),
        Ok(v) => {
            if v.du != nv.du {
                d.push(format!("du -s {} (native {})", v.du, nv.du));
            }
            if v.du_apparent != nv.du_apparent {
                d.push(format!(
                    "du -s --apparent-size {} (native {})",
                    v.du_apparent, nv.du_apparent
                ));
            }
            if v.tar_sha != nv.tar_sha {
                let tv = |dir: &Path| {
                    sh(
                        &format!(
                            "tar -C {} --sparse --format=gnu --sort=name --numeric-owner -cvvf /dev/null . 2>&1",
                            q(dir)
                        ),
                        LIMIT,
                    )
                    .stdout
                };
                let (a, b) = (tv(native), tv(copy));
                let a = String::from_utf8_lossy(&a);
                let b = String::from_utf8_lossy(&b);
                let la: Vec<&str> = a.lines().collect();
                let lb: Vec<&str> = b.lines().collect();
                let mut first: Vec<String> = la
                    .iter()
                    .filter(|x| !lb.contains(x))
                    .take(3)
                    .map(|x| format!("native only `{x}`"))
                    .collect();
                first.extend(
                    lb.iter()
                        .filter(|y| !la.contains(y))
                        .take(3)
                        .map(|y| format!("copy only `{y}`")),
                );
                d.push(format!(
                    "tar --sparse --format=gnu differs (first listing differences: {})",
                    clip(&first.join("; "), 400)
                ));
            }
        }
    }
    // The per-node comparison names what the tools only hint at.
    let opts = Opts {
        listed: None,
        root_meta: true,
        fresh_after: None,
        holes: true,
        blocks: true,
    };
    let nodes = compare_trees(native, copy, &opts);
    if !nodes.is_empty() {
        d.push(format!("nodes: {}", summary(&nodes, 6)));
    }
    d
}

fn ok_id(r: &Run, what: &str, failures: &mut Vec<String>) -> Option<String> {
    if r.ok() {
        Some(r.stdout_str().lines().last().unwrap_or("").to_string())
    } else {
        failures.push(format!("{what}: {}", r.why()));
        None
    }
}

/// A work dir with the native tree built in WORK/native, and what the tools say of it.
fn native_tree() -> (tempfile::TempDir, Views) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "lossless_tree runs as root");
    require_tools(&["rsync", "setfacl", "setfattr", "du", "tar", "sha256sum"]);
    let work = tempfile::Builder::new()
        .prefix("corpus-lossless-")
        .tempdir_in("/tmp")
        .unwrap();
    let native = work.path().join("native");
    fs::create_dir_all(&native).unwrap();
    let r = sh(&build_script(&native), LIMIT);
    assert!(
        r.ok() && r.stderr.trim().is_empty(),
        "building the native tree: {}",
        r.why()
    );
    let nv = views(&native).unwrap();
    (work, nv)
}

fn finish(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} differences from the native tree (bin {}):\n{}",
        failures.len(),
        bin().display(),
        failures.join("\n")
    );
}

/// The snapshot of the tree: restored, mounted read-only, and mounted as a fork.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn lossless_tree_through_mount_fork_and_restore() {
    let (work, nv) = native_tree();
    let w = work.path();
    let store = w.join("store");
    let native = w.join("native");
    let mut failures: Vec<String> = Vec::new();
    let check = |label: &str, copy: &Path, failures: &mut Vec<String>| {
        for d in compare(&native, &nv, copy) {
            failures.push(format!("{label}: {d}"));
        }
    };

    let snap = storefs(&store, &[OsStr::new("snapshot"), native.as_os_str()], LIMIT);
    let Some(id) = ok_id(&snap, "snapshot", &mut failures) else {
        panic!("{}", failures.join("\n"));
    };

    // Restore.
    let restore = w.join("restore");
    let r = storefs(
        &store,
        &[OsStr::new("restore"), OsStr::new(&id), restore.as_os_str()],
        LIMIT,
    );
    if r.ok() {
        check("restore", &restore, &mut failures);
    } else {
        failures.push(format!("restore: {}", r.why()));
    }

    // Read-only mount of the snapshot.
    match Mount::new(&store, &id, &w.join("mnt-ro")) {
        Ok(m) => {
            check("read-only mount", &m.path.clone(), &mut failures);
            if let Err(e) = m.unmount() {
                failures.push(format!("read-only mount: {e}"));
            }
        }
        Err(e) => failures.push(format!("read-only mount: {e}")),
    }

    // A fork mount of it.
    let f = storefs(
        &store,
        &[
            OsStr::new("fork"),
            OsStr::new(&id),
            OsStr::new("--name"),
            OsStr::new("lossless"),
        ],
        LIMIT,
    );
    if f.ok() {
        match Mount::new(&store, "lossless", &w.join("mnt-fork")) {
            Ok(m) => {
                check("fork mount", &m.path.clone(), &mut failures);
                if let Err(e) = m.unmount() {
                    failures.push(format!("fork mount: {e}"));
                }
            }
            Err(e) => failures.push(format!("fork mount: {e}")),
        }
    } else {
        failures.push(format!("fork: {}", f.why()));
    }

    finish(&failures);
}

/// The same tree made inside a fork of an empty checkpoint (mknod of devices, setfacl,
/// sparse writes on the fork): mounted, then restored from the fork's commit.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn tree_built_in_a_fork_is_lossless() {
    let (work, nv) = native_tree();
    let w = work.path();
    let store = w.join("store");
    let native = w.join("native");
    let mut failures: Vec<String> = Vec::new();
    let check = |label: &str, copy: &Path, failures: &mut Vec<String>| {
        for d in compare(&native, &nv, copy) {
            failures.push(format!("{label}: {d}"));
        }
    };
    // The same tree made inside a fork of an empty checkpoint: mounted, then restored
    // from the fork's commit.
    let empty = w.join("empty");
    fs::create_dir_all(&empty).unwrap();
    let e = storefs(&store, &[OsStr::new("snapshot"), empty.as_os_str()], LIMIT);
    if let Some(eid) = ok_id(&e, "snapshot of an empty dir", &mut failures) {
        let f = storefs(
            &store,
            &[
                OsStr::new("fork"),
                OsStr::new(&eid),
                OsStr::new("--name"),
                OsStr::new("built"),
            ],
            LIMIT,
        );
        if !f.ok() {
            failures.push(format!("fork of the empty checkpoint: {}", f.why()));
        } else {
            match Mount::new(&store, "built", &w.join("mnt-built")) {
                Ok(m) => {
                    let b = sh(&build_script(&m.path), LIMIT);
                    if !b.stderr.trim().is_empty() || b.killed.is_some() {
                        failures.push(format!(
                            "building the tree in a fork mount: {}",
                            clip(&b.stderr.trim().replace('\n', " | "), 400)
                        ));
                    }
                    check("tree built in a fork mount", &m.path.clone(), &mut failures);
                    if let Err(e) = m.unmount() {
                        failures.push(format!("fork mount (built): {e}"));
                    }
                    let restore2 = w.join("restore-built");
                    let r = storefs(
                        &store,
                        &[
                            OsStr::new("restore"),
                            OsStr::new("built"),
                            restore2.as_os_str(),
                        ],
                        LIMIT,
                    );
                    if r.ok() {
                        check("restore of the fork's commit", &restore2, &mut failures);
                    } else {
                        failures.push(format!("restore of the fork's commit: {}", r.why()));
                    }
                }
                Err(e) => failures.push(format!("fork mount (built): {e}")),
            }
        }
    }

    finish(&failures);
}
