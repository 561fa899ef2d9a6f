//! Shared helpers for the integration tests: run the real `storefs` binary against
//! a private store, and unmount in a guard that runs on failure too.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub store: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("storefs-test-")
            .tempdir()
            .unwrap();
        let store = tmp.path().join("store");
        Env { tmp, store }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Run storefs with `--store`; returns the output whatever the exit code.
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_with_store(&self.store, args)
    }

    /// Run storefs with another `--store`. A `mount` gets `--cache-size`
    /// [`test_cache_size`] when that is set and it has none of its own.
    pub fn run_with_store<I, S>(&self, store: &Path, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
        let extra: Vec<String> = match (args.first(), test_cache_size()) {
            (Some(a), Some(size)) if a == "mount" && !args.iter().any(|a| a == "--cache-size") => {
                vec!["--cache-size".into(), size.to_string()]
            }
            _ => vec![],
        };
        Command::new(env!("CARGO_BIN_EXE_storefs"))
            .arg("--store")
            .arg(store)
            .args(args)
            .args(extra)
            .env_remove("STOREFS_STORE")
            .output()
            .unwrap()
    }

    /// Run and require success; returns stdout.
    pub fn ok<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "storefs failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run with `--store store` and require success; its output.
    pub fn output_ok_in(&self, store: &Path, args: &[&str]) -> Output {
        let out = self.run_with_store(store, args);
        assert!(
            out.status.success(),
            "storefs {args:?} failed ({}): {}",
            out.status,
            stderr(&out)
        );
        out
    }

    /// Run with `--store store` and require success and UTF-8 on stdout;
    /// (stdout, stderr).
    pub fn ok_in(&self, store: &Path, args: &[&str]) -> (String, String) {
        let out = self.output_ok_in(store, args);
        let err = stderr(&out);
        (String::from_utf8(out.stdout).unwrap(), err)
    }

    /// Run with `--store store` and require exit 1 with a one-line message;
    /// returns the message.
    pub fn fails_in(&self, store: &Path, args: &[&str]) -> String {
        let out = self.run_with_store(store, args);
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "storefs {args:?} should fail with exit 1: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        err
    }

    /// A guard for the live mount whose target is `target` (none: an empty guard).
    pub fn guard_for(&self, target: &str) -> MountGuard {
        let status = self.ok(["status", "--json"]);
        let list: Vec<serde_json::Value> = serde_json::from_str(&status).unwrap();
        MountGuard {
            store: self.store.clone(),
            mountpoint: list
                .iter()
                .find(|m| m["target"] == target)
                .map(|m| PathBuf::from(m["mountpoint"].as_str().unwrap())),
        }
    }

    /// Mount and return a guard that unmounts when dropped.
    pub fn mount(&self, target: &str, mountpoint: Option<&Path>) -> MountGuard {
        let mut args: Vec<&OsStr> = vec![OsStr::new("mount"), OsStr::new(target)];
        if let Some(m) = mountpoint {
            args.push(m.as_os_str());
        }
        let out = self.run(&args);
        // Register the guard before asserting, so a half-made mount is cleaned up.
        let guard = self.guard_for(target);
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            guard.mountpoint.is_some(),
            "mount succeeded but status does not list it"
        );
        guard
    }
}

pub struct MountGuard {
    store: PathBuf,
    pub mountpoint: Option<PathBuf>,
}

impl MountGuard {
    pub fn path(&self) -> &Path {
        self.mountpoint.as_deref().unwrap()
    }

    /// Unmount now through the CLI and require success.
    /// On failure the guard keeps the mountpoint, so its Drop still cleans up.
    pub fn unmount(mut self) {
        if let Some(mp) = self.mountpoint.clone() {
            let out = umount_cli(&self.store, &mp);
            assert!(
                out.status.success(),
                "umount failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            self.mountpoint = None;
        }
    }
}

/// `storefs umount MP`, retried while the mount is busy. Tests of one binary
/// run in parallel threads of one process, and a child that another thread
/// forks holds a copy of every descriptor this thread has open until the
/// child execs (close-on-exec closes it only then), so a mount whose files
/// this thread has already closed can still be busy for a moment. A mount
/// that stays busy for 10 s is reported as the CLI reported it.
fn umount_cli(store: &Path, mp: &Path) -> Output {
    let mut tries = 0;
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
            .arg("--store")
            .arg(store)
            .arg("umount")
            .arg(mp)
            .output()
            .unwrap();
        let busy = String::from_utf8_lossy(&out.stderr).contains(" is busy: ");
        if out.status.success() || !busy || tries == 100 {
            return out;
        }
        tries += 1;
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Some(mp) = self.mountpoint.take() {
            let out = umount_cli(&self.store, &mp);
            if !out.status.success() {
                // Last resort, so no test leaves a mount behind.
                let _ = Command::new("umount").arg("-l").arg(&mp).status();
            }
        }
    }
}

/// Every path under `root` (relative), sorted, without following symlinks.
/// A small tree (`d/a.txt`, a 100 kB `b.txt`) snapshotted into `env`'s
/// store as ref `s1`; its origin.
pub fn snapshot_small(env: &Env) -> PathBuf {
    let origin = env.path("origin");
    fs::create_dir_all(origin.join("d")).unwrap();
    fs::write(origin.join("d/a.txt"), b"alpha\n").unwrap();
    fs::write(origin.join("b.txt"), vec![7u8; 100_000]).unwrap();
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    origin
}

pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&rel))
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(r.clone());
            }
            out.push(r);
        }
    }
    out.sort();
    out
}

/// All xattrs of a path (not following symlinks), sorted.
pub fn xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: buffers are valid for their lengths.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "llistxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cn = std::ffi::CString::new(name).unwrap();
        let mut val = vec![0u8; 65536];
        // SAFETY: `c` and `cn` are NUL-terminated strings and `val` a buffer of
        // `val.len()` bytes, all alive for the call.
        let m =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
        assert!(m >= 0, "lgetxattr {}", path.display());
        val.truncate(m as usize);
        out.push((name.to_vec(), val));
    }
    out.sort();
    out
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let cn = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "lsetxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Set mtime (and atime) of a path to `ns` since the epoch, not following symlinks.
pub fn set_mtime(path: &Path, ns: i64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let ts = libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    };
    let times = [ts, ts];
    // SAFETY: valid C string and array of two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0);
}

/// A small agent store in the shape the seeds describe: STORE.json naming its own
/// absolute root, a native history JSONL naming files by absolute path, journals,
/// state, and the odd file kinds a real tree has.
pub fn make_store(root: &Path) {
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

pub fn read_all(p: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    fs::File::open(p)?.read_to_end(&mut v)?;
    Ok(v)
}

/// Compare every path's bytes and stat between the original (moved) tree and the mount.
/// `ctime`: compare ctimes too (a snapshot keeps them; a tar archive does not).
pub fn assert_same_tree(orig: &Path, mounted: &Path, ctime: bool) {
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
        if ctime && !rel.as_os_str().is_empty() {
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
}

// ---- remotes (tests/remote*.rs) ----
//
// Each remote test body runs once per kind of remote ([`both_remotes!`]):
// over `file://` always, and over S3, Azure and GCS only when the build
// named that kind in STOREFS_TEST_REMOTES (build.rs; scripts/test.sh builds
// with `s3,azure`); otherwise those variants are ignored, with the reason.
// A variant built to run fails when its server is not given:
//   STOREFS_TEST_S3_ENDPOINT  the server, e.g. http://127.0.0.1:PORT; scripts/test.sh runs
//                             moto. An unreachable server fails.
//   AWS_ENDPOINT_URL          the same URL (checked): what the storefs binary reads
//   STOREFS_TEST_S3_BUCKET    an existing bucket (default storefs-test); each test
//                             uses its own fresh prefix in it
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ALLOW_HTTP=true
//                             as the server wants them (dummy keys on loopback)
//   STOREFS_TEST_AZURE_CONTAINER, AZURITE_BLOB_STORAGE_URL   azurite (scripts/azurite.sh)
//   STOREFS_TEST_GCS_BUCKET, GOOGLE_BASE_URL                  a GCS emulator (none in CI)

/// Where a remote test's remote lives: every remote test body runs for each
/// (see [`both_remotes!`]); all but `File` only when their server is given.
#[derive(Clone, Copy, Debug)]
pub enum RemoteKind {
    File,
    S3,
    /// `az://` against azurite (scripts/azurite.sh), when
    /// `STOREFS_TEST_AZURE_CONTAINER` is set.
    Azure,
    /// `gs://` against a GCS emulator, when `STOREFS_TEST_GCS_BUCKET` is set.
    Gcs,
}

impl RemoteKind {
    /// The environment a daemon or command needs to find this kind's server
    /// unreachable (a closed loopback port); `None` for `File`.
    pub fn unreachable_env(self) -> Option<(&'static str, &'static str)> {
        match self {
            RemoteKind::File => None,
            RemoteKind::S3 => Some(("AWS_ENDPOINT_URL", "http://127.0.0.1:9")),
            RemoteKind::Azure => Some(("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:9")),
            RemoteKind::Gcs => Some(("GOOGLE_BASE_URL", "http://127.0.0.1:9")),
        }
    }
}

static REMOTE_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A fresh, empty remote URL: `file://DIR/remote`, or for S3, Azure and GCS
/// a unique prefix (starting `tag`) in the test bucket or container. Panics
/// when that kind's variable is not set: its variant was built to run
/// (STOREFS_TEST_REMOTES), so a missing server is a failure, not a pass.
pub fn remote_url(kind: RemoteKind, dir: &Path, tag: &str) -> String {
    let n = REMOTE_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let unique = format!("{tag}-{}-{nanos}-{n}", std::process::id());
    let given = |var: &str| {
        std::env::var(var).unwrap_or_else(|_| {
            panic!(
                "the {kind:?} variant was built to run (STOREFS_TEST_REMOTES), but {var} is not set: start its server (scripts/test.sh does), or build without it"
            )
        })
    };
    match kind {
        RemoteKind::File => format!("file://{}", dir.join("remote").display()),
        RemoteKind::S3 => {
            let endpoint = given("STOREFS_TEST_S3_ENDPOINT");
            assert_eq!(
                std::env::var("AWS_ENDPOINT_URL").ok().as_deref(),
                Some(endpoint.as_str()),
                "STOREFS_TEST_S3_ENDPOINT is set: AWS_ENDPOINT_URL must name the same server (scripts/test.sh sets both)"
            );
            let bucket =
                std::env::var("STOREFS_TEST_S3_BUCKET").unwrap_or_else(|_| "storefs-test".into());
            format!("s3://{bucket}/{unique}")
        }
        RemoteKind::Azure => {
            let container = given("STOREFS_TEST_AZURE_CONTAINER");
            format!("az://{container}/{unique}")
        }
        RemoteKind::Gcs => {
            let bucket = given("STOREFS_TEST_GCS_BUCKET");
            format!("gs://{bucket}/{unique}")
        }
    }
}

/// `len` deterministic pseudo-random (incompressible) bytes for `seed`.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The id of the first chunk of file `path` in checkpoint `target` of `store`.
pub fn chunk_of(store: &Path, target: &str, path: &str) -> storefs::store::ObjectId {
    let s = storefs::store::Store::open(store).unwrap();
    let ck = s.read_checkpoint(&s.resolve(target).unwrap()).unwrap();
    let e = s.lookup_path(&ck, path.as_bytes()).unwrap().unwrap();
    match e.content {
        storefs::store::Content::Extents(x) => x[0].id.unwrap(),
        _ => panic!("{path} is not a file"),
    }
}

/// Write a checkpoint of `root` (a snapshot's root tree, written by the
/// library rather than the CLI) with no parents, from `origin`; its id.
pub fn checkpoint_of_root(
    store: &storefs::store::Store,
    root: storefs::store::ObjectId,
    origin: Option<String>,
) -> storefs::store::ObjectId {
    store
        .write_checkpoint(&storefs::store::Checkpoint {
            version: 1,
            root,
            parents: vec![],
            origin,
            time_ns: 1,
            message: "base".into(),
            source: storefs::store::Source {
                kind: "snapshot".into(),
                ..Default::default()
            },
        })
        .unwrap()
}

/// A command's stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh env and an empty remote of `kind` (its URL tagged `tag`), opened
/// and probed.
pub fn env_with_remote(kind: RemoteKind, tag: &str) -> (Env, String, storefs::remote::Remote) {
    let env = Env::new();
    let url = remote_url(kind, env.tmp.path(), tag);
    let remote = open_probed_remote(&url);
    (env, url, remote)
}

/// Open remote `team` at `url` and check the server answers: a probe written,
/// read back and deleted. Panics (the test fails) when it does not.
pub fn open_probed_remote(url: &str) -> storefs::remote::Remote {
    let remote = storefs::remote::Remote::open_url("team", url).unwrap();
    remote
        .put_bytes("probe", b"ok")
        .unwrap_or_else(|e| panic!("remote {url} does not answer: {e}"));
    assert_eq!(
        remote.get_bytes("probe").unwrap().as_deref(),
        Some(&b"ok"[..])
    );
    remote.delete("probe").unwrap();
    remote
}

/// `both_remotes!(a, b)`: tests `file::a`, `s3::a`, `azure::a`, `gcs::a`, …
/// calling `a(RemoteKind::File)` etc. The S3, Azure and GCS variants are
/// ignored unless the build named them in STOREFS_TEST_REMOTES (build.rs).
/// `both_remotes!(root: a, b)`: the same for tests that need root (they
/// mount), every variant ignored in a build without `storefs_root_tests`.
#[allow(unused_macros)]
macro_rules! both_remotes {
    (root: $($name:ident),* $(,)?) => {
        both_remotes!(@variants storefs_root_tests; $($name),*);
    };
    // `$root`: the cfg without which every variant is ignored as needing
    // root (`all()`: none).
    (@variants $root:meta; $($name:ident),*) => {
        mod file {
            $(
                #[test]
                #[cfg_attr(not($root), ignore = "needs root; scripts/test.sh runs it")]
                fn $name() { super::$name(super::RemoteKind::File) }
            )*
        }
        mod s3 {
            $(
                #[test]
                #[cfg_attr(not($root), ignore = "needs root; scripts/test.sh runs it")]
                #[cfg_attr(all($root, not(storefs_test_s3)), ignore = "S3 variant: not built to run (STOREFS_TEST_REMOTES=s3 and a server: scripts/test.sh)")]
                fn $name() { super::$name(super::RemoteKind::S3) }
            )*
        }
        mod azure {
            $(
                #[test]
                #[cfg_attr(not($root), ignore = "needs root; scripts/test.sh runs it")]
                #[cfg_attr(all($root, not(storefs_test_azure)), ignore = "Azure variant: not built to run (STOREFS_TEST_REMOTES=azure and azurite: scripts/test.sh)")]
                fn $name() { super::$name(super::RemoteKind::Azure) }
            )*
        }
        mod gcs {
            $(
                #[test]
                #[cfg_attr(not($root), ignore = "needs root; scripts/test.sh runs it")]
                #[cfg_attr(all($root, not(storefs_test_gcs)), ignore = "GCS variant: not built to run (STOREFS_TEST_REMOTES=gcs and a GCS emulator, which scripts/test.sh does not start)")]
                fn $name() { super::$name(super::RemoteKind::Gcs) }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        both_remotes!(@variants all(); $($name),*);
    };
}

/// SIGKILL the daemon of the store's one live mount, and wait (10 s at
/// most) until `storefs status` lists no live mount: its mount stays, dead,
/// until `storefs umount`.
pub fn kill_the_daemon(env: &Env) {
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    let pid = status[0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: the daemon of a mount the test made.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
        if list.iter().all(|m| m["mode"] == "dead") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "status still lists a killed daemon"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The remote pack holding `id` (docs/format.md, "Remotes"): its stem and entries.
#[allow(dead_code)]
pub fn pack_of(
    remote: &storefs::remote::Remote,
    id: &storefs::store::ObjectId,
) -> (String, Vec<storefs::store::PackEntry>) {
    remote
        .list_packs()
        .unwrap()
        .into_iter()
        .find(|(_, entries)| entries.iter().any(|e| e.id == *id))
        .unwrap_or_else(|| panic!("object {id} is in no remote pack"))
}

/// Tamper with a remote: rewrite the pack holding `id` (same name) with
/// `raw` as that object's stored bytes and an index that matches.
#[allow(dead_code)]
pub fn replace_in_pack(
    remote: &storefs::remote::Remote,
    id: &storefs::store::ObjectId,
    raw: &[u8],
) {
    let (stem, mut entries) = pack_of(remote, id);
    let old = remote
        .get_bytes(&format!("packs/{stem}.pack"))
        .unwrap()
        .unwrap();
    entries.sort_by_key(|e| e.offset);
    let mut pack = Vec::new();
    let mut new_entries = Vec::new();
    for e in &entries {
        let bytes: &[u8] = if e.id == *id {
            raw
        } else {
            &old[e.offset as usize..(e.offset + e.len as u64) as usize]
        };
        pack.extend_from_slice(&e.id.0);
        pack.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        new_entries.push(storefs::store::PackEntry {
            id: e.id,
            offset: pack.len() as u64,
            len: bytes.len() as u32,
        });
        pack.extend_from_slice(bytes);
    }
    remote
        .put_bytes(&format!("packs/{stem}.pack"), &pack)
        .unwrap();
    remote
        .put_bytes(
            &format!("packs/{stem}.idx"),
            &storefs::store::encode_index(&mut new_entries),
        )
        .unwrap();
}

/// Turn a remote into the layout storefs wrote before packs: every object
/// loose under `objects/<id>`, no `packs/`.
#[allow(dead_code)]
pub fn unpack_remote(remote: &storefs::remote::Remote) {
    for (stem, entries) in remote.list_packs().unwrap() {
        let pack = remote
            .get_bytes(&format!("packs/{stem}.pack"))
            .unwrap()
            .unwrap();
        for e in entries {
            let raw = &pack[e.offset as usize..(e.offset + e.len as u64) as usize];
            remote.put_bytes(&format!("objects/{}", e.id), raw).unwrap();
        }
        remote.delete(&format!("packs/{stem}.idx")).unwrap();
        remote.delete(&format!("packs/{stem}.pack")).unwrap();
    }
}

/// The transport of the tests' in-process mounts (`MountConfig`):
/// `STOREFS_TRANSPORT` (`uring`, `classic`, `auto`), as `storefs mount
/// --transport` reads it for the CLI's; scripts/test.sh runs the suite on both.
pub fn transport() -> storefs::fs::Transport {
    std::env::var("STOREFS_TRANSPORT")
        .ok()
        .and_then(|t| storefs::fs::Transport::from_name(&t))
        .unwrap_or_default()
}

/// `STOREFS_TEST_CACHE_SIZE`, in bytes: the `--cache-size` of every mount the
/// tests make through the CLI, and the cache of the forks `tests/fork_mount.rs`
/// mounts in process. `0` has a fork park every directory it can after each
/// operation (docs/design.md, "Memory"): `STOREFS_TEST_CACHE_SIZE=0 cargo test
/// --test fork_mount --test fork_cli`.
pub fn test_cache_size() -> Option<usize> {
    let v = std::env::var("STOREFS_TEST_CACHE_SIZE").ok()?;
    Some(
        v.parse()
            .expect("STOREFS_TEST_CACHE_SIZE is a number of bytes"),
    )
}

/// A user made for one test (`useradd`), removed with its home
/// (`userdel -r`) when dropped.
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl TestUser {
    /// `None` (and a note) when this is not root or `useradd` is missing.
    pub fn create(tag: &str) -> Option<TestUser> {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: not root, so no test user can be made");
            return None;
        }
        let name = format!("sfs-{tag}-{}", std::process::id());
        let made = Command::new("useradd")
            .args(["-m", "-U", "-s", "/bin/sh", &name])
            .output();
        match made {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("useradd {name}: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => {
                eprintln!("skipped: cannot run useradd ({e})");
                return None;
            }
        }
        let mut user = TestUser {
            name,
            uid: 0,
            gid: 0,
        };
        let u = nix::unistd::User::from_name(&user.name)
            .unwrap()
            .expect("the user just made");
        (user.uid, user.gid) = (u.uid.as_raw(), u.gid.as_raw());
        Some(user)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").args(["-r", &self.name]).output();
    }
}

/// `/dev/fuse` opened to every user (mode 0666, as Debian's udev rule makes
/// it) while this lives; its mode before is put back when dropped.
pub struct DevFuseOpen(u32);

impl DevFuseOpen {
    pub fn new() -> DevFuseOpen {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = std::fs::metadata("/dev/fuse").expect("/dev/fuse").mode() & 0o7777;
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).unwrap();
        DevFuseOpen(mode)
    }
}

impl Drop for DevFuseOpen {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}

/// Bytes of records in fork `name`'s journal segments in `store`: each
/// segment's header and its frames (u32 length, u32 crc, payload), up to the
/// zeros preallocated after them (docs/journal.md).
pub fn journal_bytes(store: &Path, name: &str) -> u64 {
    fs::read_dir(store.join("forks").join(name).join("journal"))
        .unwrap()
        .map(|e| {
            let bytes = fs::read(e.unwrap().path()).unwrap();
            let mut pos = storefs::journal::wal::SEGMENT_HEADER as usize;
            while pos + 8 <= bytes.len() && bytes[pos..pos + 8] != [0; 8] {
                pos += 8 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            }
            pos as u64
        })
        .sum()
}

/// Flip the last stored byte of object `id` in store `store`, wherever it
/// is stored (loose or in a pack); the stored bytes after the damage.
#[allow(dead_code)]
pub fn damage(store: &Path, id: &storefs::store::ObjectId) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let (path, offset, len) = storefs::store::Store::open(store)
        .unwrap()
        .backend()
        .locate(id)
        .unwrap()
        .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset + len - 1).unwrap();
    f.write_all_at(&[b[0] ^ 0xff], offset + len - 1).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    let mut stored = vec![0u8; len as usize];
    f.read_exact_at(&mut stored, offset).unwrap();
    stored
}
