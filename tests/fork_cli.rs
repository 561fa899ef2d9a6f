//! Forks end to end through the real binary: fork a checkpoint, mount it
//! read-write at its origin, work on it the way agents do, commit while mounted,
//! unmount (which commits), survive a SIGKILL of the daemon after fsync, and keep
//! the base checkpoint exactly as it was.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use common::{Env, walk};

fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("state")).unwrap();
    fs::create_dir_all(root.join("out")).unwrap();
    fs::write(
        root.join("STORE.json"),
        format!("{{\"root\": \"{}\"}}\n", root.display()),
    )
    .unwrap();
    fs::write(root.join("state/lead.json"), b"{\"turn\": 11}\n").unwrap();
    fs::write(root.join("out/_journal.jsonl"), b"{\"seq\": 0}\n").unwrap();
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What an agent does in one turn: append to its journal (O_APPEND), rewrite
/// state with temp + rename, take and release a mkdir lock, fsync.
fn agent_turn(root: &Path, turn: u32) {
    fs::create_dir(root.join("run.lock")).unwrap();
    let mut j = fs::OpenOptions::new()
        .append(true)
        .open(root.join("out/_journal.jsonl"))
        .unwrap();
    writeln!(j, "{{\"seq\": {turn}}}").unwrap();
    j.sync_all().unwrap();
    let tmp = root.join("state/.lead.json.tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .unwrap();
    writeln!(f, "{{\"turn\": {turn}}}").unwrap();
    f.sync_all().unwrap();
    fs::rename(&tmp, root.join("state/lead.json")).unwrap();
    fs::File::open(root.join("state"))
        .unwrap()
        .sync_all()
        .unwrap();
    assert_eq!(
        fs::create_dir(root.join("run.lock")).unwrap_err().kind(),
        std::io::ErrorKind::AlreadyExists
    );
    fs::remove_dir(root.join("run.lock")).unwrap();
}

/// What [`agent_turn`] 1 wrote (and fsynced) on the fixture is under `root`.
fn assert_turn_one_kept(root: &Path) {
    assert_eq!(
        fs::read(root.join("state/lead.json")).unwrap(),
        b"{\"turn\": 1}\n"
    );
    assert_eq!(
        fs::read(root.join("out/_journal.jsonl")).unwrap(),
        b"{\"seq\": 0}\n{\"seq\": 1}\n"
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fork_mount_rw_commit_unmount_and_the_base_stays() {
    let env = Env::new();
    let origin = env.path("srv/s1");
    make_tree(&origin);
    let base = env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let base = base.trim().to_string();
    let moved = env.path("original");
    fs::rename(&origin, &moved).unwrap();

    env.ok(["fork", "s1", "--name", "s1-retry"]);
    let clash = env.run(["fork", "s1", "--name", "s1"]);
    assert_eq!(clash.status.code(), Some(1), "{}", stderr(&clash));
    let bad = env.run(["fork", "s1", "--name", "a/b"]);
    assert_eq!(bad.status.code(), Some(1));
    let taken = env.run([
        "snapshot".as_ref(),
        moved.as_os_str(),
        "--ref".as_ref(),
        "s1-retry".as_ref(),
    ]);
    assert_eq!(
        taken.status.code(),
        Some(1),
        "a ref cannot take a fork's name"
    );

    let m = env.mount("s1-retry", None);
    assert_eq!(m.path(), origin, "a fork mounts at its origin");
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert_eq!(status[0]["mode"], "rw");

    agent_turn(&origin, 12);
    let c1 = env.ok(["commit", "s1-retry", "-m", "turn 12"]);
    let c1 = c1.trim().to_string();
    assert_eq!(c1.len(), 64);
    assert_ne!(c1, base);
    // Writes go on after a commit of the mounted fork.
    agent_turn(&origin, 13);
    fs::write(origin.join("out/new.txt"), b"new file\n").unwrap();
    m.unmount(); // commits first

    // The base is exactly as it was; the fork's head has everything.
    assert_eq!(env.ok(["cat", "s1", "state/lead.json"]), "{\"turn\": 11}\n");
    assert_eq!(
        env.ok(["cat", "s1-retry", "state/lead.json"]),
        "{\"turn\": 13}\n"
    );
    assert_eq!(
        env.ok(["cat", "s1-retry", "out/_journal.jsonl"]),
        "{\"seq\": 0}\n{\"seq\": 12}\n{\"seq\": 13}\n"
    );
    assert_eq!(env.ok(["cat", &c1, "state/lead.json"]), "{\"turn\": 12}\n");
    let diff = env.ok(["diff", "s1", "s1-retry"]);
    assert!(
        diff.contains("A out/new.txt") && diff.contains("M state/lead.json"),
        "{diff}"
    );
    assert!(
        !diff.contains("run.lock") && !diff.contains(".tmp"),
        "{diff}"
    );
    let log = env.ok(["log", "s1-retry"]);
    assert!(
        log.contains(&c1) && log.contains(&base) && log.contains("turn 12"),
        "{log}"
    );
    assert_eq!(env.ok(["refs"]), format!("s1\t{base}\n"));

    // A read-only mount of the base still shows the original.
    let ro = env.mount("s1", Some(&env.path("ro")));
    assert_eq!(
        fs::read(ro.path().join("state/lead.json")).unwrap(),
        b"{\"turn\": 11}\n"
    );
    ro.unmount();
    // The fork never touched the original directory either.
    assert_eq!(walk(&moved).len(), 5);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fsynced_writes_survive_a_killed_daemon_and_no_commit_keeps_the_journal() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "b".as_ref(),
    ]);
    env.ok(["fork", "b", "--name", "f"]);
    let mp = env.path("mnt");

    let m = env.mount("f", Some(&mp));
    agent_turn(&mp, 1); // fsyncs everything it writes
    common::kill_the_daemon(&env);
    m.unmount(); // clears the dead mount

    // The journal replays: what fsync acknowledged is there.
    let m = env.mount("f", Some(&mp));
    assert_turn_one_kept(&mp);
    fs::write(mp.join("kept.txt"), b"journal only\n").unwrap();
    let head_before = env.ok(["log", "f"]);
    let out = env.run(["umount".as_ref(), mp.as_os_str(), "--no-commit".as_ref()]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::mem::forget(m); // already unmounted by hand
    assert_eq!(
        env.ok(["log", "f"]),
        head_before,
        "--no-commit moved no head"
    );

    // Offline commit of the unmounted fork folds the kept journal.
    let id = env.ok(["commit", "f", "-m", "offline"]);
    assert_eq!(env.ok(["cat", id.trim(), "kept.txt"]), "journal only\n");
    assert_eq!(env.ok(["cat", "f", "state/lead.json"]), "{\"turn\": 1}\n");
}

// ------------------------------------------------------- the writeback cache

/// Mount fork `name` at `mp` with `--writeback-cache` (and `extra`).
fn mount_writeback(env: &Env, name: &str, mp: &Path, extra: &[&str]) -> common::MountGuard {
    let mut args = vec!["mount", name, mp.to_str().unwrap(), "--writeback-cache"];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    let guard = env.guard_for(name);
    assert!(out.status.success(), "mount failed: {}", stderr(&out));
    assert!(guard.mountpoint.is_some(), "status does not list the mount");
    guard
}

/// A process that writes `text` to `path` (appending, or from its start
/// after truncating it) and holds it open, without closing or fsyncing it,
/// until killed. Not this process, nor a shell: every close of a FUSE
/// file's descriptor writes its dirty pages back, and a process spawned here
/// would close its copy (close-on-exec), as a shell's redirection closes its
/// duplicate.
fn hold_open(path: &Path, text: &str, append: bool) -> Holder {
    use std::io::BufRead;
    const HOLD: &str = "import os, sys, time
mode = os.O_APPEND if sys.argv[3] == 'a' else os.O_TRUNC
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | mode, 0o644)
os.write(fd, sys.argv[2].encode())
print('ready', flush=True)
time.sleep(600)";
    let mut child = std::process::Command::new("python3")
        .args(["-c", HOLD])
        .arg(path)
        .arg(text)
        .arg(if append { "a" } else { "t" })
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let holder = Holder(child);
    assert_eq!(line, "ready\n", "the holder wrote");
    holder
}

/// A [`hold_open`] process, killed when dropped (its close then writes back
/// what is left), on failure too.
struct Holder(std::process::Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fork `f` of a snapshot of `make_tree`.
fn fork_of_tree(env: &Env) {
    let src = env.path("src");
    make_tree(&src);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "b".as_ref(),
    ]);
    env.ok(["fork", "b", "--name", "f"]);
}

/// Under the writeback cache, bytes written to a file still open (neither
/// closed nor fsynced: the kernel holds them dirty, up to 30 s) are in a
/// commit asked for through the CLI, and in a periodic commit: the daemon
/// has the kernel write them back first.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn writes_the_kernel_still_holds_are_in_cli_and_periodic_commits() {
    let env = Env::new();
    fork_of_tree(&env);
    let mp = env.path("mnt");
    let m = mount_writeback(&env, "f", &mp, &[]);
    let f = hold_open(&mp.join("out/open.log"), "held by the kernel\n", false);
    let j = hold_open(&mp.join("out/_journal.jsonl"), "{\"seq\": 1}\n", true);
    let id = env.ok(["commit", "f", "-m", "open files"]);
    assert_eq!(
        env.ok(["cat", id.trim(), "out/open.log"]),
        "held by the kernel\n"
    );
    assert_eq!(
        env.ok(["cat", id.trim(), "out/_journal.jsonl"]),
        "{\"seq\": 0}\n{\"seq\": 1}\n",
        "an O_APPEND write lands at the kernel's end of file"
    );
    drop(f);
    drop(j);
    m.unmount();

    // --commit-interval: the commit thread writes back before each commit.
    let m = mount_writeback(&env, "f", &mp, &["--commit-interval", "1"]);
    let f = hold_open(&mp.join("out/open.log"), "periodic\n", true);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let log = env.ok(["log", "f"]);
        if log.contains("periodic commit")
            && env.ok(["cat", "f", "out/open.log"]) == "held by the kernel\nperiodic\n"
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no periodic commit holds the open file's bytes: {log}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    drop(f);
    m.unmount();
}

/// Under the writeback cache, what fsync acknowledged survives a SIGKILL of
/// the daemon (fsync writes the kernel's dirty pages back, then syncs the
/// journal), for an agent's turn and a large file written in pieces.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fsynced_writes_survive_a_killed_daemon_under_writeback() {
    let env = Env::new();
    fork_of_tree(&env);
    let mp = env.path("mnt");
    let m = mount_writeback(&env, "f", &mp, &[]);
    agent_turn(&mp, 1);
    let big = common::pseudo_random(3 << 20, 7);
    let mut f = fs::File::create(mp.join("big.bin")).unwrap();
    for piece in big.chunks(100_000) {
        f.write_all(piece).unwrap();
    }
    f.sync_all().unwrap();
    common::kill_the_daemon(&env);
    drop(f);
    m.unmount(); // clears the dead mount

    let m = mount_writeback(&env, "f", &mp, &[]);
    assert_turn_one_kept(&mp);
    assert!(fs::read(mp.join("big.bin")).unwrap() == big);
    m.unmount();
}

/// Under the writeback cache the kernel owns a file's mtime while it writes:
/// the mtime `stat` showed after write + close is the one committed, and
/// the one the next mount shows, for a closed file and one still open at
/// the commit (its times are sent after its data, whichever the daemon
/// serves first). The size too.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mtime_after_write_and_close_is_what_stat_said_before_the_commit() {
    let env = Env::new();
    fork_of_tree(&env);
    let mp = env.path("mnt");
    let m = mount_writeback(&env, "f", &mp, &[]);
    let mut seen = Vec::new();
    for i in 0..20 {
        let name = format!("out/file{i}");
        let mut f = fs::File::create(mp.join(&name)).unwrap();
        for _ in 0..3 {
            f.write_all(&common::pseudo_random(5000, i)).unwrap();
        }
        drop(f);
        seen.push((name, fs::metadata(mp.join(format!("out/file{i}"))).unwrap()));
    }
    let open = hold_open(&mp.join("state/lead.json"), "more\n", true);
    seen.push((
        "state/lead.json".into(),
        fs::metadata(mp.join("state/lead.json")).unwrap(),
    ));
    let id = env.ok(["commit", "f", "-m", "times"]);
    drop(open);
    m.unmount();

    let ro = env.mount(id.trim(), Some(&env.path("ro")));
    let again = mount_writeback(&env, "f", &mp, &[]);
    for (name, before) in &seen {
        for root in [ro.path(), again.path()] {
            let after = fs::metadata(root.join(name)).unwrap();
            assert_eq!(
                (after.mtime(), after.mtime_nsec(), after.len()),
                (before.mtime(), before.mtime_nsec(), before.len()),
                "{name} under {}",
                root.display()
            );
        }
    }
    again.unmount();
    ro.unmount();
}

/// Under the writeback cache `SEEK_DATA`/`SEEK_HOLE` see the data the kernel
/// still holds (the fork's extent map does not have it yet): the kernel
/// answers them from its own size.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn seek_data_sees_what_the_kernel_holds_under_writeback() {
    use std::os::fd::AsRawFd;
    let env = Env::new();
    fork_of_tree(&env);
    let mp = env.path("mnt");
    let m = mount_writeback(&env, "f", &mp, &[]);
    let text = "not written back yet\n";
    let holder = hold_open(&mp.join("out/dirty"), text, false);
    let f = fs::File::open(mp.join("out/dirty")).unwrap();
    // SAFETY: lseek on a descriptor this test owns.
    let (data, hole) = unsafe {
        (
            libc::lseek(f.as_raw_fd(), 0, libc::SEEK_DATA),
            libc::lseek(f.as_raw_fd(), 0, libc::SEEK_HOLE),
        )
    };
    assert_eq!((data, hole), (0, text.len() as i64));
    drop((f, holder));
    m.unmount();
}

/// Every mount is served by the transport scripts/test.sh asks for through
/// `STOREFS_TRANSPORT` (the suite runs once on `/dev/fuse`, once on FUSE over
/// io_uring), and `status --json` says which, with the requests the rings
/// answered.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn the_transport_asked_for_serves_read_only_and_fork_mounts() {
    let env = Env::new();
    let origin = env.path("srv/t");
    make_tree(&origin);
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "t".as_ref(),
    ]);
    env.ok(["fork", "t", "--name", "tw"]);
    let (ro, rw) = (env.path("ro"), env.path("rw"));
    let g1 = env.mount("t", Some(&ro));
    let g2 = env.mount("tw", Some(&rw));
    assert_eq!(
        fs::read(ro.join("state/lead.json")).unwrap(),
        b"{\"turn\": 11}\n"
    );
    fs::write(rw.join("state/new.json"), b"{}").unwrap();
    assert_eq!(fs::read(rw.join("state/new.json")).unwrap(), b"{}");
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert_eq!(status.len(), 2);
    let asked = std::env::var("STOREFS_TRANSPORT").unwrap_or_default();
    for m in &status {
        let t = &m["transport"];
        let served = t["ring_requests"].as_u64().unwrap_or_else(|| panic!("{m}"));
        match asked.as_str() {
            "uring" => {
                assert_eq!(t["name"], "io_uring", "{m}");
                assert!(served > 0, "no request came over the rings: {m}");
            }
            "classic" => {
                assert_eq!(t["name"], "/dev/fuse", "{m}");
                assert_eq!(served, 0, "{m}");
            }
            // auto: whichever the kernel offers.
            _ => assert!(t["name"] == "io_uring" || t["name"] == "/dev/fuse", "{m}"),
        }
    }
    g2.unmount();
    g1.unmount();
}

/// Issue 43, finding 4: `commit REF` advises a fork name that works (the
/// ref's own name is taken by the ref), and following the advice works.
#[test]
fn commit_of_a_ref_advises_a_fork_name_that_is_free() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    // s1-work is taken (a ref): the advice moves on to s1-work2.
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1-work".as_ref(),
    ]);
    let err = env.fails_in(&env.store, &["commit", "s1"]);
    assert!(err.contains("'s1' is a ref, not a fork"), "{err}");
    let advice = "storefs fork s1 --name s1-work2";
    assert!(err.contains(advice), "{err}");
    let args: Vec<&str> = advice.split(' ').skip(1).collect();
    env.ok(&args);
    let id = env.ok(["commit", "s1-work2"]);
    assert_eq!(id.trim().len(), 64, "{id}");
}

/// A snapshot of [`make_tree`] as ref `s1` and two forks of it, `a` and
/// `b`: the tree's directory and the checkpoint's id.
fn two_forks(env: &Env) -> (std::path::PathBuf, String) {
    let src = env.path("src");
    make_tree(&src);
    let base = env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    env.ok(["fork", "s1", "--name", "a"]);
    env.ok(["fork", "s1", "--name", "b"]);
    (src, base.trim().to_string())
}

/// Issue 43, finding 5: `storefs forks` lists every fork with its head, fork
/// point, uncommitted changes and where it is mounted; `refs` points to it,
/// and a typo of it is hinted.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn forks_lists_heads_fork_points_changes_and_mounts() {
    let env = Env::new();
    let (_, base) = two_forks(&env);
    let base = base.as_str();
    assert_eq!(
        env.ok(["forks"]),
        format!("a\t{base}\t{base}\tno\t-\nb\t{base}\t{base}\tno\t-\n")
    );
    let mp = env.path("mnt-a");
    let m = env.mount("a", Some(&mp));
    fs::write(mp.join("new.txt"), b"new").unwrap();
    let line = |name: &str| {
        env.ok(["forks"])
            .lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap()
            .to_string()
    };
    assert_eq!(
        line("a"),
        format!("a\t{base}\t{base}\tyes\t{}", mp.display())
    );
    let j: serde_json::Value = serde_json::from_str(&env.ok(["forks", "--json"])).unwrap();
    assert_eq!(j[0]["name"], "a");
    assert_eq!(j[0]["uncommitted"], true);
    assert_eq!(j[0]["fork_point"], base);
    assert_eq!(j[0]["mounted"]["mountpoint"], mp.to_str().unwrap());
    assert!(j[0]["mounted"]["pid"].as_u64().unwrap() > 0);
    assert_eq!(j[0]["upstream"], serde_json::Value::Null);
    assert_eq!(j[1]["mounted"], serde_json::Value::Null);
    assert_eq!(j[1]["uncommitted"], false);

    let head = env.ok(["commit", "a"]);
    assert_eq!(
        line("a"),
        format!("a\t{}\t{base}\tno\t{}", head.trim(), mp.display())
    );
    m.unmount();
    // Changes journaled by a mount that was not committed (--no-commit).
    let mut m = env.mount("b", Some(&mp));
    fs::write(mp.join("other.txt"), b"x").unwrap();
    let out = env.run(["umount".as_ref(), mp.as_os_str(), "--no-commit".as_ref()]);
    assert!(out.status.success(), "{}", stderr(&out));
    m.mountpoint = None;
    assert_eq!(line("b"), format!("b\t{base}\t{base}\tyes\t-"));

    let help = env.ok(["refs", "--help"]);
    assert!(help.contains("storefs forks"), "{help}");
    let err = env.fails_in(&env.store, &["ls", "no-such-thing"]);
    assert!(err.contains("`storefs forks` forks"), "{err}");
    let typo = env.run(["forkss"]);
    assert_eq!(typo.status.code(), Some(2));
    assert!(stderr(&typo).contains("'forks'"), "{}", stderr(&typo));
}

/// `refs --delete` and `forks --delete`: a mounted fork and one with
/// uncommitted changes are refused (the latter deleted with --discard); a
/// damaged ref file is named by `refs`, which lists the others and exits 1,
/// and `refs --delete` removes it; the checkpoints stay until gc.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn refs_and_forks_are_deleted_and_a_damaged_ref_is_named() {
    let env = Env::new();
    let (src, base) = two_forks(&env);
    let base = base.as_str();
    let second = env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s2".as_ref(),
    ]);
    let second = second.trim();

    // A damaged ref: listed apart, the others still listed, exit 1.
    fs::write(env.store.join("refs/bad"), b"not an id\n").unwrap();
    let out = env.run(["refs"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("s1\t{base}\ns2\t{second}\n")
    );
    assert!(stderr(&out).contains("ref 'bad'"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refs --delete bad"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        env.ok(["refs", "--delete", "bad", "s2"]),
        format!("bad\tnot an id\ns2\t{second}\n")
    );
    assert_eq!(env.ok(["refs"]), format!("s1\t{base}\n"));
    let err = env.fails_in(&env.store, &["refs", "--delete", "s2"]);
    assert!(err.contains("no ref named 's2'"), "{err}");
    let err = env.fails_in(&env.store, &["refs", "--delete", "a"]);
    assert!(err.contains("is a fork"), "{err}");

    // A mounted fork is refused; unmounted with changes, refused without --discard.
    let mp = env.path("mnt-a");
    let mut m = env.mount("a", Some(&mp));
    fs::write(mp.join("new.txt"), b"new").unwrap();
    let err = env.fails_in(&env.store, &["forks", "--delete", "a"]);
    assert!(err.contains("in use"), "{err}");
    let out = env.run(["umount".as_ref(), mp.as_os_str(), "--no-commit".as_ref()]);
    assert!(out.status.success(), "{}", stderr(&out));
    m.mountpoint = None;
    let err = env.fails_in(&env.store, &["forks", "--delete", "a"]);
    assert!(
        err.contains("uncommitted changes") && err.contains("--discard"),
        "{err}"
    );
    assert!(
        env.store.join("forks/a").is_dir(),
        "refused: nothing deleted"
    );
    assert_eq!(
        env.ok(["forks", "--delete", "a", "b", "--discard"]),
        format!("a\t{base}\nb\t{base}\n")
    );
    assert_eq!(env.ok(["forks"]), "");
    assert_eq!(
        fs::read_dir(env.store.join("forks")).unwrap().count(),
        0,
        "nothing left of the forks"
    );
    let err = env.fails_in(&env.store, &["forks", "--delete", "s1"]);
    assert!(err.contains("is a ref"), "{err}");
    // The checkpoint is still there (s1 names it) and still whole.
    env.ok(["verify"]);
    assert_eq!(env.ok(["cat", "s1", "state/lead.json"]), "{\"turn\": 11}\n");
}

/// Issue 43, finding 6: `status` shows a fork's chunk cache, as README says:
/// it fills as the fork's files are read (its inode table apart, in --json).
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn status_shows_a_forks_chunk_cache_filling_as_it_is_read() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    fs::write(src.join("data.bin"), common::pseudo_random(1 << 20, 43)).unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    env.ok(["fork", "s1", "--name", "f"]);
    let mp = env.path("mnt");
    // Its own cache size: STOREFS_TEST_CACHE_SIZE=0 (scripts/test.sh's second
    // pass) would leave no cache to fill.
    let out = env.run([
        "mount".as_ref(),
        "f".as_ref(),
        mp.as_os_str(),
        "--cache-size".as_ref(),
        "64M".as_ref(),
    ]);
    let m = env.guard_for("f");
    assert!(out.status.success(), "{}", stderr(&out));
    let cache = || {
        let j: serde_json::Value = serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
        j.as_array()
            .unwrap()
            .iter()
            .find(|s| s["target"] == "f")
            .unwrap()["cache"]
            .clone()
    };
    assert!(cache()["state"].as_u64().is_some(), "{}", cache());
    assert_eq!(fs::read(mp.join("data.bin")).unwrap().len(), 1 << 20);
    let c = cache();
    assert!(c["chunks"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["bytes"], c["chunks"], "{c}");
    let text = env.ok(["status"]);
    let row = text
        .lines()
        .find(|l| l.contains(" f "))
        .unwrap()
        .to_string();
    assert!(row.contains("M/") && !row.contains(" 0.0M/"), "{row}");
    // (The command table that once said so lives in docs/guide.md now.)
    let guide = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide.md")).unwrap();
    assert!(
        guide.contains("storefs status") && !guide.contains("(none for a fork)"),
        "docs/guide.md says a fork's status shows no cache"
    );
    m.unmount();
}

/// Issue 43, finding 8: `storefs ls` shows a directory's size as the mount's
/// `stat` does, for a directory made in a fork (recorded with size 0) and a
/// large one alike.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn ls_shows_a_directorys_size_as_the_mount_does() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    env.ok(["fork", "s1", "--name", "f"]);
    let mp = env.path("mnt");
    let m = env.mount("f", Some(&mp));
    fs::create_dir(mp.join("made")).unwrap();
    fs::create_dir(mp.join("big")).unwrap();
    for i in 0..400 {
        fs::write(
            mp.join(format!("big/entry-with-a-longish-name-{i:04}")),
            b"",
        )
        .unwrap();
    }
    m.unmount(); // commits
    let ro = env.path("ro");
    let m = env.mount("f", Some(&ro));
    let listing = env.ok(["ls", "f"]);
    let json: serde_json::Value = serde_json::from_str(&env.ok(["ls", "f", "--json"])).unwrap();
    for name in ["made", "big", "state"] {
        let stat = fs::metadata(ro.join(name)).unwrap().size();
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" {name}/")))
            .unwrap();
        let shown: u64 = line.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert_eq!(shown, stat, "{name}: {line}");
        let j = json
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap();
        assert_eq!(j["size"], stat, "{name}: {j}");
    }
    assert!(fs::metadata(ro.join("big")).unwrap().size() > 4096);
    m.unmount();
}

/// Issue 43, finding 13: `umount` of a busy fork checks busy first (nothing
/// committed, nothing said about a commit), and says "committed" only for a
/// commit that made a checkpoint.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn umount_of_a_busy_fork_commits_nothing_and_never_claims_a_commit() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    let base = env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    env.ok(["fork", "s1", "--name", "live"]);
    let mp = env.path("mnt");
    let mut m = env.mount("live", Some(&mp));
    fs::write(mp.join("new.txt"), b"new").unwrap();
    let held = fs::File::open(mp.join("new.txt")).unwrap();
    let out = env.run(["umount".as_ref(), mp.as_os_str()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("is busy") && err.contains(&std::process::id().to_string()),
        "{err}"
    );
    assert!(!err.contains("storefs: committed"), "{err}");
    let line = env.ok(["forks"]);
    assert!(
        line.starts_with(&format!("live\t{}\t", base.trim())) && line.contains("\tyes\t"),
        "head unmoved, changes uncommitted: {line}"
    );
    drop(held);
    let out = env.run(["umount".as_ref(), mp.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    m.mountpoint = None;
    let head = env.ok(["log", "live", "--json"]);
    let head: serde_json::Value = serde_json::from_str(&head).unwrap();
    let head = head[0]["id"].as_str().unwrap().to_string();
    assert_ne!(head, base.trim());
    assert!(
        stderr(&out).contains(&format!("committed live as {}", &head[..12])),
        "{}",
        stderr(&out)
    );
    // Nothing changed since: no commit, and no "committed" line.
    let m = env.mount("live", Some(&mp));
    let _ = fs::read(mp.join("new.txt")).unwrap();
    let out = env.run(["umount".as_ref(), mp.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("committed"), "{}", stderr(&out));
    let mut m = m;
    m.mountpoint = None;
    assert_eq!(env.ok(["forks"]).split('\t').nth(1), Some(head.as_str()));
}

/// xfstests generic/604 (issue 41): `umount MNT &` and, 10 ms later, a
/// mount of the same fork there. The unmount commits before the kernel
/// mount goes, so the place was still taken ("is already a mount point");
/// the mount now waits for the daemon `storefs umount` marked as going,
/// and then mounts. Also: an unmount that gives up (busy) takes its mark
/// back, and a mount then finds the place taken, without waiting out the
/// commit timeout.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_mount_right_after_an_umount_of_the_same_fork_waits_for_it() {
    let env = Env::new();
    let src = env.path("src");
    make_tree(&src);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    env.ok(["fork", "s1", "--name", "live"]);
    let mp = env.path("mnt");
    let m = env.mount("live", Some(&mp));
    for i in 0..200 {
        fs::write(mp.join(format!("f{i}")), vec![b'x'; 4096]).unwrap();
    }
    let umount = std::process::Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .arg("umount")
        .arg(&mp)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(10));
    let again = env.run(["mount".as_ref(), "live".as_ref(), mp.as_os_str()]);
    let out = umount.wait_with_output().unwrap();
    assert!(out.status.success(), "umount: {}", stderr(&out));
    assert!(again.status.success(), "mount: {}", stderr(&again));
    assert_eq!(fs::read(mp.join("f199")).unwrap().len(), 4096);
    // Busy: the unmount gives up, and a mount finds the place taken.
    let held = fs::File::open(mp.join("f0")).unwrap();
    let out = env.run(["umount".as_ref(), mp.as_os_str()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let taken = env.run(["mount".as_ref(), "live".as_ref(), mp.as_os_str()]);
    assert!(!taken.status.success(), "mounted twice");
    drop(held);
    // The guard of the first mount unmounts the second, at the same place.
    m.unmount();
}
