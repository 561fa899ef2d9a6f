//! Reads of files inside a store do not follow symlinks, do not wait on a
//! FIFO and do not read without bound (docs/security.md, "Files inside a
//! store"). Whoever can write a store can swap a ref, a checkpoint record, a
//! pack, a pack index or the multi-pack index for a symlink to a root-only
//! file, a symlink to `/dev/zero`, or a FIFO; root's read-only commands
//! (`refs`, `log`, `cat`, `ls`, `verify`) then fail (or, for the multi-pack
//! index, go on without it) with one line naming the file and what it is,
//! never print the file's bytes, never hang, never fill memory.
//!
//! Each command runs under a generous hang timeout (it is killed and the
//! test fails) and an address-space limit (an endless read fails the test
//! by aborting the command instead of exhausting the machine's memory).

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Env;

/// A command that has not exited by then hangs.
const HANG: Duration = Duration::from_secs(60);

/// The address space a command may use: far above what these commands need
/// on a small store, far below what an endless read would take.
const ADDRESS_SPACE: u64 = 4 << 30;

/// What a command did: its exit code (`None`: killed by a signal), stdout
/// and stderr.
struct Ran {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

/// Run storefs with `--store` and `args`, bounded in time and memory.
fn run(store: &Path, args: &[&OsStr]) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_storefs"));
    cmd.arg("--store")
        .arg(store)
        .args(args)
        .env_remove("STOREFS_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches no memory of the
    // parent; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    // Drain both pipes while waiting (at most 64 MiB of stdout is kept).
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = (&mut out).take(64 << 20).read_to_end(&mut b);
        let _ = std::io::copy(&mut out, &mut std::io::sink());
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = (&mut err).take(1 << 20).read_to_end(&mut b);
        let _ = std::io::copy(&mut err, &mut std::io::sink());
        b
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!("storefs {args:?} hung: killed after {HANG:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ran {
        code: status.code(),
        signal: status.signal(),
        stdout: out.join().unwrap(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
    }
}

/// What is planted in place of a file of the store.
#[derive(Clone, Copy, Debug)]
enum Plant {
    /// A symlink to a root-only file outside the store holding a secret.
    SecretLink,
    /// A symlink to `/dev/zero`.
    ZeroLink,
    /// A FIFO nobody writes to.
    Fifo,
}

/// The secret a root-only file outside the store holds.
const SECRET: &str = "root-only-secret-7f3a";

/// A file of the store a planted thing replaces.
#[derive(Clone, Copy, Debug)]
enum Target {
    Ref,
    Checkpoint,
    /// The pack holding the snapshot's objects.
    Pack,
    /// That pack's index (the multi-pack index removed first, so each
    /// pack's own index is read, as in a store from before it).
    PackIndex,
    /// The multi-pack index: without it the packs' own indexes are read,
    /// so a command may succeed; it must say why it went without.
    Midx,
    /// The log of packs published since the multi-pack index: a hint (the
    /// packs directory is listed instead), so a command may succeed.
    Published,
}

/// A store with ref `s1` (a small snapshot), and the env holding it.
fn store_with_snapshot() -> Env {
    let env = Env::new();
    common::snapshot_small(&env);
    env
}

/// The files in `dir` whose names end with `suffix`.
fn with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// The path of `target` in `env`'s store (after any set-up it needs).
fn target_path(env: &Env, target: Target) -> PathBuf {
    let packs = env.store.join("objects/packs");
    match target {
        Target::Ref => env.store.join("refs/s1"),
        Target::Checkpoint => {
            let id = fs::read_to_string(env.store.join("refs/s1")).unwrap();
            env.store
                .join("checkpoints")
                .join(format!("{}.json", id.trim()))
        }
        Target::Pack | Target::PackIndex => {
            if matches!(target, Target::PackIndex) {
                let _ = fs::remove_file(packs.join("index.midx"));
            }
            let ext = if matches!(target, Target::Pack) {
                ".pack"
            } else {
                ".idx"
            };
            let all = with_suffix(&packs, ext);
            assert_eq!(all.len(), 1, "one pack in a fresh small store: {all:?}");
            all[0].clone()
        }
        Target::Published => {
            let p = packs.join("published");
            assert!(p.is_file(), "a fresh store has a log of published packs");
            p
        }
        Target::Midx => {
            let p = packs.join("index.midx");
            assert!(p.is_file(), "a fresh store has a multi-pack index");
            p
        }
    }
}

/// Replace `path` with `plant`; the secret file (outside the store) when
/// one is made.
fn plant(env: &Env, path: &Path, plant: Plant) {
    fs::remove_file(path).unwrap();
    match plant {
        Plant::SecretLink => {
            let secret = env.path("secret");
            fs::write(&secret, format!("{SECRET}\n")).unwrap();
            fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
            symlink(&secret, path).unwrap();
        }
        Plant::ZeroLink => symlink("/dev/zero", path).unwrap(),
        Plant::Fifo => {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid C string; mkfifo touches nothing else.
            let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
            assert_eq!(rc, 0, "mkfifo {}", path.display());
        }
    }
}

/// The commands that read `target`.
fn commands(target: Target) -> Vec<Vec<&'static str>> {
    let mut v = vec![
        vec!["log", "s1"],
        vec!["cat", "s1", "d/a.txt"],
        vec!["ls", "s1"],
        vec!["verify"],
    ];
    if matches!(target, Target::Ref) {
        v.insert(0, vec!["refs"]);
    }
    if matches!(
        target,
        Target::Pack | Target::PackIndex | Target::Midx | Target::Published
    ) {
        // log reads no object.
        v.remove(0);
    }
    v
}

/// Plant `what` at each target in turn (a fresh store each) and run every
/// command that reads it.
fn check(what: Plant) {
    for target in [
        Target::Ref,
        Target::Checkpoint,
        Target::Pack,
        Target::PackIndex,
        Target::Midx,
        Target::Published,
    ] {
        let env = store_with_snapshot();
        let path = target_path(&env, target);
        plant(&env, &path, what);
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let said = match what {
            Plant::SecretLink | Plant::ZeroLink => "is a symlink",
            Plant::Fifo => "is not a regular file (a FIFO)",
        };
        for args in commands(target) {
            let argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
            let ran = run(&env.store, &argv);
            let ctx = format!("{what:?} at {target:?}, storefs {args:?}: {}", ran.stderr);
            assert_eq!(ran.signal, None, "killed by a signal: {ctx}");
            assert!(
                !ran.stderr.contains(SECRET)
                    && !String::from_utf8_lossy(&ran.stdout).contains(SECRET),
                "the secret was printed: {ctx}"
            );
            // verify reports a problem of a checkpoint on stdout, then sums
            // up on stderr.
            let verify = args[0] == "verify";
            let stdout = String::from_utf8_lossy(&ran.stdout);
            let ctx = format!("{ctx}\n(stdout: {stdout})");
            let said_where = if verify {
                format!("{stdout}{}", ran.stderr)
            } else {
                ran.stderr.clone()
            };
            let line = said_where
                .lines()
                .find(|l| l.contains(&name))
                .unwrap_or_else(|| panic!("no line names {name}: {ctx}"));
            assert!(line.contains(said), "the line does not say {said:?}: {ctx}");
            if matches!(target, Target::Midx | Target::Published) {
                // Read without it: the packs' own indexes serve.
                assert!(ran.code.is_some(), "{ctx}");
            } else if verify {
                assert_eq!(ran.code, Some(1), "should fail: {ctx}");
            } else if matches!(target, Target::PackIndex) {
                // An unreadable pack index is a warning (its line above),
                // and its objects are missing: the error that follows.
                assert_eq!(ran.code, Some(1), "should fail: {ctx}");
                assert_eq!(ran.stderr.trim_end().lines().count(), 2, "{ctx}");
            } else {
                assert_eq!(ran.code, Some(1), "should fail: {ctx}");
                assert_eq!(ran.stderr.trim_end().lines().count(), 1, "one line: {ctx}");
            }
        }
    }
}

#[test]
fn a_symlink_to_a_root_only_file_is_not_read() {
    check(Plant::SecretLink);
}

#[test]
fn a_symlink_to_dev_zero_is_not_read() {
    check(Plant::ZeroLink);
}

#[test]
fn a_fifo_is_not_waited_on() {
    check(Plant::Fifo);
}

/// `refs/` swapped for a symlink to a root-only directory: `refs` does not
/// list it (its names are root's) and `log` reads no ref through it; each
/// says why in one line.
#[test]
fn a_symlinked_refs_directory_is_not_listed() {
    let env = store_with_snapshot();
    let secret_dir = env.path("root-only");
    fs::create_dir(&secret_dir).unwrap();
    fs::write(secret_dir.join(SECRET), b"x").unwrap();
    fs::set_permissions(&secret_dir, fs::Permissions::from_mode(0o700)).unwrap();
    let refs = env.store.join("refs");
    fs::remove_dir_all(&refs).unwrap();
    symlink(&secret_dir, &refs).unwrap();
    // verify, which may write (quarantine), refuses such a store first.
    for args in [vec!["refs"], vec!["log", "s1"], vec!["verify"]] {
        let argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let ran = run(&env.store, &argv);
        let out = String::from_utf8_lossy(&ran.stdout);
        let ctx = format!("storefs {args:?}: {}{out}", ran.stderr);
        assert_eq!(ran.code, Some(1), "{ctx}");
        assert!(
            !ran.stderr.contains(SECRET) && !out.contains(SECRET),
            "{ctx}"
        );
        assert_eq!(ran.stderr.trim_end().lines().count(), 1, "{ctx}");
        let refs = refs.to_str().unwrap();
        assert!(
            ran.stderr.contains(refs) && ran.stderr.contains("is a symlink"),
            "{ctx}"
        );
    }
}

/// A fork's journal segment swapped for a FIFO (or a symlink to a root-only
/// file): `forks` (which scans the journal for uncommitted changes),
/// `forks --delete` and `commit` (which open the fork) each fail at once
/// with one line naming the segment, never wait on the FIFO and never read
/// the file the link names.
#[test]
fn a_planted_journal_segment_is_not_read() {
    for what in [Plant::Fifo, Plant::SecretLink] {
        let env = store_with_snapshot();
        env.ok(["fork", "s1", "--name", "f"]);
        // An uncommitted change, so the fork has a journal segment.
        env.ok(["checkout", "s1", "d", "--into", "f"]);
        let journal = env.store.join("forks/f/journal");
        let segments = with_suffix(&journal, ".wal");
        assert!(!segments.is_empty(), "a new fork has a journal segment");
        let seg = segments[0].clone();
        plant(&env, &seg, what);
        let name = seg.file_name().unwrap().to_str().unwrap().to_string();
        let said = match what {
            Plant::Fifo => "is not a regular file (a FIFO)",
            _ => "is a symlink",
        };
        for args in [
            vec!["forks"],
            vec!["forks", "--delete", "f"],
            vec!["commit", "f"],
        ] {
            let argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
            let ran = run(&env.store, &argv);
            let out = String::from_utf8_lossy(&ran.stdout);
            let ctx = format!("{what:?}, storefs {args:?}: {}{out}", ran.stderr);
            assert_eq!(ran.code, Some(1), "should fail: {ctx}");
            assert!(
                !ran.stderr.contains(SECRET) && !out.contains(SECRET),
                "{ctx}"
            );
            let line = ran
                .stderr
                .lines()
                .find(|l| l.contains(&name))
                .unwrap_or_else(|| panic!("no line names {name}: {ctx}"));
            assert!(line.contains(said), "the line does not say {said:?}: {ctx}");
        }
    }
}
