//! Forks end to end through the real binary: fork a checkpoint, mount it
//! read-write at its origin, work on it the way agents do, commit while mounted,
//! unmount (which commits), survive a SIGKILL of the daemon after fsync, and keep
//! the base checkpoint exactly as it was.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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

#[test]
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
    assert_eq!(
        fs::read(mp.join("state/lead.json")).unwrap(),
        b"{\"turn\": 1}\n"
    );
    assert_eq!(
        fs::read(mp.join("out/_journal.jsonl")).unwrap(),
        b"{\"seq\": 0}\n{\"seq\": 1}\n"
    );
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
