//! `storefs checkout TARGET PATH… --into FORK` (issue 42): files and
//! directories put back into unmounted forks, mounted forks (seen through
//! the same mount at once: the kernel is made to forget what it cached) and
//! a fork held by a `storefs run`; metadata-exact, data shared (the journal
//! grows by records, not by the files' bytes); the refusals. Real FUSE
//! mounts: needs root and /dev/fuse (a build that is not root's ignores them).

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Env;

/// A store with checkpoint `s1` of `common::make_store`'s tree at
/// `TMP/origin` (left in place: what every check compares against).
fn store_with_s1(env: &Env) -> PathBuf {
    let origin = env.path("origin");
    common::make_store(&origin);
    env.ok(["init"]);
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    origin
}

/// `rel` under `want` and under `got` are the same: names, type, mode,
/// owner, mtime to the nanosecond, size, device number, xattrs, symlink
/// targets and bytes, for it and everything under it.
fn assert_same(want: &Path, got: &Path, rel: &str) {
    let (w, g) = (want.join(rel), got.join(rel));
    let mut paths = vec![PathBuf::new()];
    if fs::symlink_metadata(&w).unwrap().is_dir() {
        let names = common::walk(&w);
        assert_eq!(names, common::walk(&g), "names under {rel}");
        paths.extend(names);
    }
    for p in paths {
        // (`join("")` would add a slash: not a directory.)
        let (a, b) = match p.as_os_str().is_empty() {
            true => (w.clone(), g.clone()),
            false => (w.join(&p), g.join(&p)),
        };
        let what = Path::new(rel).join(&p);
        let what = what.display();
        let (ma, mb) = (
            fs::symlink_metadata(&a).unwrap(),
            fs::symlink_metadata(&b).unwrap_or_else(|e| panic!("{what}: {e}")),
        );
        assert_eq!(ma.mode(), mb.mode(), "mode of {what}");
        assert_eq!(
            (ma.uid(), ma.gid()),
            (mb.uid(), mb.gid()),
            "owner of {what}"
        );
        assert_eq!(
            (ma.mtime(), ma.mtime_nsec()),
            (mb.mtime(), mb.mtime_nsec()),
            "mtime of {what}"
        );
        assert_eq!(ma.rdev(), mb.rdev(), "rdev of {what}");
        assert_eq!(common::xattrs(&a), common::xattrs(&b), "xattrs of {what}");
        if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&a).unwrap(), fs::read_link(&b).unwrap());
        } else if ma.is_file() {
            assert_eq!(ma.size(), mb.size(), "size of {what}");
            assert!(
                common::read_all(&a).unwrap() == common::read_all(&b).unwrap(),
                "bytes of {what}"
            );
        }
    }
}

fn checkout(env: &Env, args: &[&OsStr]) -> (String, String) {
    let mut all: Vec<&OsStr> = vec![OsStr::new("checkout")];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let err = common::stderr(&out);
    assert!(out.status.success(), "checkout {args:?} failed: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn files_and_a_directory_into_an_unmounted_fork() {
    let env = Env::new();
    let origin = store_with_s1(&env);
    env.ok(["fork", "s1", "--name", "f1"]);
    // Damage the fork through a mount; unmounting commits it.
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("f1", Some(&mp));
    fs::write(mp.join("state/lead.json"), "damaged\n").unwrap();
    fs::remove_file(mp.join("state/runtime.json")).unwrap();
    fs::write(mp.join("state/new.json"), "{}\n").unwrap();
    fs::remove_file(mp.join("state/sparse.db")).unwrap();
    fs::write(mp.join("native/lead/big.log"), "short now\n").unwrap();
    fs::set_permissions(mp.join("run.sh"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(mp.join("pipe")).unwrap();
    fs::write(mp.join("added.txt"), "not in s1\n").unwrap();
    m.unmount();

    let before = common::journal_bytes(&env.store, "f1");
    let (out, err) = checkout(
        &env,
        &[
            os("s1"),
            os("state"),
            os("native/lead/big.log"),
            os("./run.sh"),
            os("pipe"),
            os("added.txt"),
            os("nowhere/at/all"),
            os("--into"),
            os("f1"),
        ],
    );
    assert_eq!(
        out,
        "restored\tstate\nrestored\tnative/lead/big.log\nrestored\trun.sh\nrestored\tpipe\n\
         removed\tadded.txt\nabsent\tnowhere/at/all\n"
    );
    assert!(
        err.contains("not committed yet: `storefs commit f1`"),
        "{err}"
    );
    // 3 MiB of big.log and the sparse file's data are named, not copied.
    let grew = common::journal_bytes(&env.store, "f1") - before;
    assert!(grew < 64 << 10, "the journal grew by {grew} bytes");

    // As the journal replays at mount, then as the commit at unmount folded it.
    for round in ["replayed", "committed"] {
        let m = env.mount("f1", Some(&mp));
        for rel in ["state", "native/lead/big.log", "run.sh", "pipe", "owned"] {
            assert_same(&origin, &mp, rel);
        }
        assert!(!mp.join("added.txt").exists(), "{round}");
        assert!(!mp.join("nowhere").exists(), "{round}");
        // Holes stay holes: 4 KiB of data in 64 MiB.
        let sparse = fs::metadata(mp.join("state/sparse.db")).unwrap();
        assert!(
            sparse.blocks() * 512 < 1 << 20,
            "{round}: {}",
            sparse.blocks()
        );
        // Its hardlink (native/lead-hardlink.json) was not checked out: the
        // file is one of its own now (docs: not exact).
        assert_eq!(
            fs::metadata(mp.join("state/lead.json")).unwrap().nlink(),
            1,
            "{round}"
        );
        m.unmount();
    }
    assert!(
        fs::metadata(origin.join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_directory_and_files_into_a_mounted_fork_are_seen_at_once() {
    let env = Env::new();
    let origin = store_with_s1(&env);
    env.ok(["fork", "s1", "--name", "f2"]);
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("f2", Some(&mp));
    // Changes the kernel caches: bytes read, a name found absent, attributes.
    fs::write(mp.join("state/lead.json"), "damaged\n").unwrap();
    assert_eq!(fs::read(mp.join("state/lead.json")).unwrap(), b"damaged\n");
    fs::remove_file(mp.join("state/runtime.json")).unwrap();
    assert!(fs::metadata(mp.join("state/runtime.json")).is_err());
    fs::create_dir_all(mp.join("workspace/room/extra")).unwrap();
    fs::write(mp.join("workspace/room/extra/x"), "x\n").unwrap();
    fs::remove_file(mp.join("workspace/room/out/_journal.jsonl")).unwrap();
    fs::write(mp.join("native/lead/big.log"), "short\n").unwrap();
    fs::set_permissions(mp.join("run.sh"), fs::Permissions::from_mode(0o700)).unwrap();
    let _ = common::walk(&mp);

    // One path absolute under the mountpoint, one under the fork's origin.
    let big = mp.join("native/lead/big.log");
    let run = origin.join("run.sh");
    let (out, _) = checkout(
        &env,
        &[
            os("s1"),
            os("state"),
            os("workspace"),
            big.as_os_str(),
            run.as_os_str(),
            // Inside one given before, and the other name of its inode.
            os("state/lead.json"),
            os("native/lead-hardlink.json"),
            os("--into"),
            os("f2"),
        ],
    );
    assert_eq!(
        out,
        "restored\tstate\nrestored\tworkspace\nrestored\tnative/lead/big.log\nrestored\trun.sh\n\
         restored\tstate/lead.json\nrestored\tnative/lead-hardlink.json\n"
    );
    // Through the same mount, at once (state's own mtime is now: the
    // second path changed its entries).
    for rel in [
        "state/lead.json",
        "state/runtime.json",
        "state/sparse.db",
        "workspace",
        "native/lead/big.log",
        "run.sh",
        "native/lead-hardlink.json",
    ] {
        assert_same(&origin, &mp, rel);
    }
    assert!(!mp.join("workspace/room/extra").exists());
    // A hardlink among the checked-out entries is one inode again.
    let (a, b) = (
        fs::metadata(mp.join("state/lead.json")).unwrap(),
        fs::metadata(mp.join("native/lead-hardlink.json")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));

    // The fork's own head as the target: undo what is not committed.
    env.ok(["commit", "f2"]);
    fs::write(mp.join("state/lead.json"), "again\n").unwrap();
    fs::write(mp.join("state/more.json"), "{}\n").unwrap();
    let (out, _) = checkout(
        &env,
        &[
            os("f2"),
            os("state/lead.json"),
            os("state/more.json"),
            os("--into"),
            os("f2"),
        ],
    );
    assert_eq!(out, "restored\tstate/lead.json\nremoved\tstate/more.json\n");
    // (state's own mtime is now: its entries changed.)
    assert_same(&origin, &mp, "state/lead.json");
    assert!(!mp.join("state/more.json").exists());
    // The daemon journaled the checkout as the client's change (the
    // `storefs` process on the other end of its socket).
    let ops = env.ok(["ops", "f2", "--json"]);
    let last: serde_json::Value = serde_json::from_str(ops.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["command"].as_str(), last["checkpoint"].is_null()),
        (Some("storefs"), true),
        "{ops}"
    );
    assert_ne!(last["pid"].as_u64(), Some(0), "{ops}");
    m.unmount();

    // What the daemon journaled and committed at unmount holds.
    let m = env.mount("f2", Some(&mp));
    for rel in [
        "state/lead.json",
        "state/runtime.json",
        "state/sparse.db",
        "workspace",
        "native/lead/big.log",
        "run.sh",
    ] {
        assert_same(&origin, &mp, rel);
    }
    assert!(!mp.join("state/more.json").exists());
    m.unmount();
}

/// A `storefs run` in the background, killed and reaped when dropped.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait (at most 60 s) for `p` to exist while `run` runs.
fn wait_for(p: &Path, run: &mut Running) {
    let t0 = Instant::now();
    while !p.exists() {
        let child = run.0.as_mut().unwrap();
        if child.try_wait().unwrap().is_some() {
            let out = run.0.take().unwrap().wait_with_output().unwrap();
            panic!("the run ended: {}", common::stderr(&out));
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} never came",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_fork_held_by_a_run_is_changed_through_its_daemon_or_refused() {
    let env = Env::new();
    let origin = store_with_s1(&env);
    // The run mounts the fork at the origin, which must be empty or missing.
    let want = env.path("want");
    fs::rename(&origin, &want).unwrap();
    let bar = env.path("bar");
    fs::create_dir(&bar).unwrap();
    let (o, b) = (origin.display(), bar.display());
    let script = format!(
        "set -e; echo damaged > {o}/state/lead.json; touch {b}/ready; \
         while [ ! -e {b}/go ]; do sleep 0.05; done; cat {o}/state/lead.json > {b}/seen"
    );
    let child = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(["run", "s1", "--fork", "r1", "--", "sh", "-c", &script])
        .env_remove("STOREFS_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut run = Running(Some(child));
    wait_for(&bar.join("ready"), &mut run);

    // Its daemon cannot be reached: refused, one line, naming the run.
    let sock = fs::read_dir(env.store.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension() == Some(OsStr::new("sock")))
        .expect("the run's control socket");
    let away = sock.with_extension("away");
    fs::rename(&sock, &away).unwrap();
    let err = env.fails_in(
        &env.store,
        &["checkout", "s1", "state/lead.json", "--into", "r1"],
    );
    fs::rename(&away, &sock).unwrap();
    assert!(err.contains("held by `storefs run` pid"), "{err}");
    assert!(err.contains("wait for the run to end"), "{err}");

    let (out, _) = checkout(
        &env,
        &[os("s1"), os("state/lead.json"), os("--into"), os("r1")],
    );
    assert_eq!(out, "restored\tstate/lead.json\n");
    fs::write(bar.join("go"), "").unwrap();
    let out = run.0.take().unwrap().wait_with_output().unwrap();
    assert!(out.status.success(), "run: {}", common::stderr(&out));
    assert_eq!(
        fs::read(bar.join("seen")).unwrap(),
        fs::read(want.join("state/lead.json")).unwrap()
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn unsafe_paths_and_forks_in_use_are_refused_with_the_fix() {
    let env = Env::new();
    let origin = store_with_s1(&env);
    env.ok(["fork", "s1", "--name", "f3"]);
    let refused = |args: &[&str]| {
        let mut all = vec!["checkout"];
        all.extend_from_slice(args);
        env.fails_in(&env.store, &all)
    };
    let err = refused(&["s1", "state/../../etc", "--into", "f3"]);
    assert!(
        err.contains("'state/../../etc' has a '..' component"),
        "{err}"
    );
    let err = refused(&["s1", ".", "--into", "f3"]);
    assert!(err.contains("is the fork's root"), "{err}");
    let err = refused(&["s1", "/etc/passwd", "--into", "f3"]);
    assert!(err.contains("not under the fork's origin"), "{err}");
    assert!(err.contains(&origin.display().to_string()), "{err}");
    let err = refused(&["s1", "state", "--into", "nope"]);
    assert!(err.contains("no fork named 'nope'"), "{err}");
    let err = refused(&["nope", "state", "--into", "f3"]);
    assert!(err.contains("nope"), "{err}");

    // A fork file where the target has a directory above the path.
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("f3", Some(&mp));
    fs::remove_dir_all(mp.join("state")).unwrap();
    fs::write(mp.join("state"), "a file now\n").unwrap();
    let err = refused(&["s1", "run.sh", "state/lead.json", "--into", "f3"]);
    assert!(
        err.contains("the fork has a file at 'state' where the target has a directory; check out 'state' itself"),
        "{err}"
    );
    // Nothing changed, not even the path before it.
    assert_eq!(fs::read(mp.join("state")).unwrap(), b"a file now\n");
    // Another fork with uncommitted changes as the target.
    let err = refused(&["f3", "state", "--into", "s1-other"]);
    assert!(err.contains("no fork named 's1-other'"), "{err}");
    env.ok(["fork", "s1", "--name", "f4"]);
    let err = refused(&["f3", "state", "--into", "f4"]);
    assert!(
        err.contains("fork 'f3'") && err.contains("uncommitted changes"),
        "{err}"
    );
    m.unmount();

    // A fork whose lock another process holds (here: this test).
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(env.store.join("forks/f4/lock"))
        .unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    let err = refused(&["s1", "state", "--into", "f4"]);
    assert!(err.contains("fork 'f4' is in use"), "{err}");
    drop(lock);
    let (out, _) = checkout(
        &env,
        &[
            os("s1"),
            os("state"),
            os("gone"),
            os("--into"),
            os("f4"),
            os("--json"),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fork"], "f4");
    assert_eq!(v["paths"][0]["path"], "state");
    assert_eq!(v["paths"][0]["done"], "restored");
    assert_eq!(v["paths"][1]["done"], "absent");
    assert!(v["created"].as_u64().unwrap() >= 4, "{v}");
}

/// Under the writeback cache the kernel owns a file's size and times: a
/// checkout still shows the target's at once (new inodes, the names and
/// their directory forgotten).
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn into_a_fork_mounted_with_the_writeback_cache() {
    let env = Env::new();
    let origin = store_with_s1(&env);
    env.ok(["fork", "s1", "--name", "f5"]);
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let out = env.run([
        "mount".as_ref(),
        "f5".as_ref(),
        mp.as_os_str(),
        "--writeback-cache".as_ref(),
    ]);
    let m = env.guard_for("f5");
    assert!(out.status.success(), "mount: {}", common::stderr(&out));
    fs::write(mp.join("state/runtime.json"), "a longer body than before\n").unwrap();
    let _ = fs::metadata(mp.join("state/runtime.json")).unwrap();
    fs::write(mp.join("native/lead/big.log"), "short\n").unwrap();
    let (out, _) = checkout(
        &env,
        &[
            os("s1"),
            os("state/runtime.json"),
            os("native/lead/big.log"),
            os("--into"),
            os("f5"),
        ],
    );
    assert_eq!(
        out,
        "restored\tstate/runtime.json\nrestored\tnative/lead/big.log\n"
    );
    assert_same(&origin, &mp, "state/runtime.json");
    assert_same(&origin, &mp, "native/lead/big.log");
    m.unmount();
}
