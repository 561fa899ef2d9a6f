//! The browse mount end to end through the real binary: `storefs mount --browse`
//! shows every checkpoint (tree and record), refs, forks with their history and
//! imported archives; new refs, checkpoints and forks show up without a
//! remount; everything is read-only; a corrupt object fails only its file.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Env, MountGuard};
use storefs::store::ObjectId;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn snapshot(env: &Env, dir: &Path, r#ref: &str, msg: &str) -> String {
    let id = env.ok([
        "snapshot".as_ref(),
        dir.as_os_str(),
        "--ref".as_ref(),
        r#ref.as_ref(),
        "-m".as_ref(),
        msg.as_ref(),
    ]);
    id.trim().to_string()
}

/// `storefs mount --browse MP`, with a guard that unmounts (on failure too).
fn mount_browse(env: &Env, mp: &Path) -> MountGuard {
    let out = env.run(["mount".as_ref(), "--browse".as_ref(), mp.as_os_str()]);
    let guard = env.guard_for("(browse)");
    assert!(out.status.success(), "mount --browse: {}", stderr(&out));
    assert_eq!(guard.mountpoint.as_deref(), Some(mp));
    guard
}

/// The ids of every checkpoint in the store, from its directory.
fn store_checkpoints(env: &Env) -> BTreeSet<String> {
    fs::read_dir(env.store.join("checkpoints"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect()
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn link(p: &Path) -> String {
    fs::read_link(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .into_os_string()
        .into_string()
        .unwrap()
}

/// Poll `check` until it holds, failing after a generous deadline.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> Option<i32> {
    r.unwrap_err().raw_os_error()
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn browse_shows_checkpoints_refs_forks_and_archives_and_follows_the_store() {
    let env = Env::new();
    let src = env.path("srv/s1");
    fs::create_dir_all(src.join("out")).unwrap();
    fs::create_dir_all(src.join("state")).unwrap();
    fs::write(
        src.join("out/_journal.jsonl"),
        b"{\"event\": \"collect\", \"seq\": 0}\n",
    )
    .unwrap();
    fs::write(src.join("state/lead.json"), b"{\"turn\": 1}\n").unwrap();
    let c1 = snapshot(&env, &src, "s1", "one");
    fs::write(src.join("state/lead.json"), b"{\"turn\": 2}\n").unwrap();
    let c2 = snapshot(&env, &src, "s1", "two");

    // A fork with one change, committed through a read-write mount.
    env.ok(["fork", "s1", "--name", "s1-retry"]);
    let fm = env.mount("s1-retry", Some(&env.path("forkmnt")));
    fs::write(fm.path().join("state/lead.json"), b"{\"turn\": 3}\n").unwrap();
    fs::write(fm.path().join("out/new.txt"), b"only in the fork\n").unwrap();
    fm.unmount(); // commits
    let log = env.ok(["log", "s1-retry"]);
    let c3 = log.split_whitespace().nth(1).unwrap().to_string();
    assert_eq!(c3.len(), 64, "{log}");
    assert_ne!(c3, c2);

    // A small archive, imported.
    let arch = env.path("arch/s9");
    fs::create_dir_all(&arch).unwrap();
    fs::write(arch.join("notes.txt"), b"archived notes\n").unwrap();
    let tar = env.path("s9.tar");
    let st = Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(env.path("arch"))
        .arg("s9")
        .status()
        .unwrap();
    assert!(st.success());
    let c4 = env.ok(["import".as_ref(), tar.as_os_str()]);
    let c4 = c4.trim().to_string();

    let mp = env.path("browse");
    let m = mount_browse(&env, &mp);
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0]["mode"], "browse");
    assert_eq!(status[0]["mountpoint"], mp.to_str().unwrap());

    assert_eq!(
        names(&mp),
        ["archives", "checkpoints", "forks", "git", "refs"]
            .map(String::from)
            .into()
    );

    // checkpoints/: a directory and a record per checkpoint, and the
    // operation log of each commit that has one.
    let ids = store_checkpoints(&env);
    assert_eq!(ids.len(), 4);
    for id in [&c1, &c2, &c3, &c4] {
        assert!(ids.contains(id), "{id}");
    }
    let has_ops = |id: &str| {
        let rec = fs::read(env.store.join("checkpoints").join(format!("{id}.json"))).unwrap();
        let rec: serde_json::Value = serde_json::from_slice(&rec).unwrap();
        rec["source"]["ops"].is_string()
    };
    let expected: BTreeSet<String> = ids
        .iter()
        .flat_map(|id| [id.clone(), format!("{id}.json")])
        .chain(
            ids.iter()
                .filter(|id| has_ops(id))
                .map(|id| format!("{id}.ops.jsonl")),
        )
        .collect();
    assert_eq!(
        expected.len(),
        2 * ids.len() + 1,
        "the fork's one commit has an operation log"
    );
    assert_eq!(names(&mp.join("checkpoints")), expected);
    for id in &ids {
        let rec = mp.join("checkpoints").join(format!("{id}.json"));
        let want = fs::read(env.store.join("checkpoints").join(format!("{id}.json"))).unwrap();
        assert_eq!(fs::read(&rec).unwrap(), want, "record of {id}");
        assert_eq!(fs::metadata(&rec).unwrap().len(), want.len() as u64);
        assert!(mp.join("checkpoints").join(id).is_dir());
    }
    let ck = |id: &str| mp.join("checkpoints").join(id);
    assert_eq!(
        fs::read(ck(&c1).join("state/lead.json")).unwrap(),
        b"{\"turn\": 1}\n"
    );
    assert_eq!(
        fs::read(ck(&c4).join("notes.txt")).unwrap(),
        b"archived notes\n"
    );

    // refs/: symlinks into checkpoints/.
    assert_eq!(names(&mp.join("refs")), ["s1".to_string()].into());
    assert_eq!(link(&mp.join("refs/s1")), format!("../checkpoints/{c2}"));
    assert_eq!(
        fs::read(mp.join("refs/s1/state/lead.json")).unwrap(),
        b"{\"turn\": 2}\n"
    );

    // forks/<name>/head and history/ from the fork point (0) to the head.
    let fork = mp.join("forks/s1-retry");
    assert_eq!(names(&mp.join("forks")), ["s1-retry".to_string()].into());
    assert_eq!(names(&fork), ["head", "history"].map(String::from).into());
    assert_eq!(link(&fork.join("head")), format!("../../checkpoints/{c3}"));
    let history = fork.join("history");
    assert_eq!(
        names(&history),
        [format!("0-{c2}"), format!("1-{c3}")].into()
    );
    assert_eq!(
        link(&history.join(format!("0-{c2}"))),
        format!("../../../checkpoints/{c2}")
    );
    assert_eq!(
        fs::read(history.join(format!("1-{c3}")).join("out/new.txt")).unwrap(),
        b"only in the fork\n"
    );

    // archives/: the archive's file name -> its checkpoint.
    assert_eq!(names(&mp.join("archives")), ["s9.tar".to_string()].into());
    assert_eq!(
        link(&mp.join("archives/s9.tar")),
        format!("../checkpoints/{c4}")
    );
    assert_eq!(
        fs::read(mp.join("archives/s9.tar/notes.txt")).unwrap(),
        b"archived notes\n"
    );

    // diff -r between the ref and the fork's head shows exactly the fork's change.
    let out = Command::new("diff")
        .arg("-r")
        .arg(mp.join("refs/s1/"))
        .arg(mp.join("forks/s1-retry/head/"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let diff = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = diff.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Only in ") && l.ends_with("/out: new.txt")),
        "{diff}"
    );
    assert!(lines.contains(&"< {\"turn\": 2}"), "{diff}");
    assert!(lines.contains(&"> {\"turn\": 3}"), "{diff}");
    assert!(
        lines
            .iter()
            .filter(|l| l.starts_with("diff ") || l.starts_with("Only in "))
            .count()
            == 2,
        "exactly two differences: {diff}"
    );

    // A grep across every checkpoint's journal (checkpoints/*/out/_journal.jsonl).
    let mut hits = Vec::new();
    for name in names(&mp.join("checkpoints")) {
        let journal = ck(&name).join("out/_journal.jsonl");
        if !ck(&name).is_dir() || !journal.exists() {
            continue;
        }
        let text = fs::read_to_string(&journal).unwrap();
        hits.extend(
            text.lines()
                .filter(|l| l.contains("collect"))
                .map(|_| name.clone()),
        );
    }
    let want: BTreeSet<&String> = [&c1, &c2, &c3].into();
    assert_eq!(hits.iter().collect::<BTreeSet<_>>(), want);
    assert_eq!(hits.len(), 3);

    // Read-only everywhere.
    let erofs = Some(libc::EROFS);
    assert_eq!(errno(fs::write(mp.join("refs/new"), b"x")), erofs);
    assert_eq!(errno(fs::remove_file(mp.join("refs/s1"))), erofs);
    assert_eq!(errno(fs::create_dir(mp.join("forks/z"))), erofs);
    assert_eq!(errno(fs::write(ck(&c1).join("state/x"), b"x")), erofs);
    assert_eq!(
        errno(
            fs::OpenOptions::new()
                .write(true)
                .open(mp.join("checkpoints").join(format!("{c1}.json")))
        ),
        erofs
    );
    assert_eq!(
        errno(
            fs::OpenOptions::new()
                .append(true)
                .open(ck(&c1).join("out/_journal.jsonl"))
        ),
        erofs
    );
    assert_eq!(
        errno(fs::set_permissions(
            ck(&c1).join("state"),
            fs::Permissions::from_mode(0o777)
        )),
        erofs
    );

    // The store moves on; the mount follows without a remount.
    fs::write(src.join("state/lead.json"), b"{\"turn\": 4}\n").unwrap();
    let c5 = snapshot(&env, &src, "new", "after mounting");
    eventually("refs/new appears", || {
        fs::read_link(mp.join("refs/new"))
            .is_ok_and(|t| t == Path::new("..").join("checkpoints").join(&c5))
    });
    assert_eq!(
        fs::read(mp.join("refs/new/state/lead.json")).unwrap(),
        b"{\"turn\": 4}\n"
    );
    eventually("checkpoints/ lists the new checkpoint", || {
        names(&mp.join("checkpoints")).contains(&format!("{c5}.json"))
    });
    // A moved ref points at its new target.
    let c6 = snapshot(&env, &src, "s1", "moved");
    assert_ne!(c6, c5, "a new parent makes a new record");
    eventually("refs/s1 follows the move", || {
        link(&mp.join("refs/s1")) == format!("../checkpoints/{c6}")
    });
    env.ok(["fork", "new", "--name", "late"]);
    eventually("forks/late appears", || {
        fs::read_link(mp.join("forks/late/head"))
            .is_ok_and(|t| t == Path::new(&format!("../../checkpoints/{c5}")))
    });
    // A name that is not there is not there (and does not stick).
    assert_eq!(
        fs::symlink_metadata(mp.join("refs/nope"))
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );

    m.unmount();
    assert_eq!(env.ok(["status", "--json"]).trim(), "[]");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn browse_corrupt_objects_fail_only_their_file() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    let bad = b"these bytes get corrupted in the store before the first read\n";
    fs::write(src.join("bad.txt"), bad).unwrap();
    fs::write(src.join("good.txt"), b"fine\n").unwrap();
    let c1 = snapshot(&env, &src, "a", "with a bad chunk");
    fs::write(src.join("other.txt"), b"other\n").unwrap();
    let c2 = snapshot(&env, &src, "b", "record gets corrupted");

    // bad.txt's one chunk: valid zstd of other bytes.
    let hex = ObjectId::of(bad).to_hex();
    storefs::store::Store::open(&env.store)
        .unwrap()
        .replace_stored_object(
            &ObjectId::of(bad),
            &zstd::bulk::compress(b"other bytes", 3).unwrap(),
        )
        .unwrap();
    // c2's record: bytes that no longer hash to its id.
    let record = env.store.join("checkpoints").join(format!("{c2}.json"));
    let mut bytes = fs::read(&record).unwrap();
    bytes.extend_from_slice(b" ");
    fs::set_permissions(&record, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&record, &bytes).unwrap();

    let mp = env.path("browse");
    let m = mount_browse(&env, &mp);
    let ck = |id: &str| mp.join("checkpoints").join(id);
    let eio = Some(libc::EIO);
    assert_eq!(errno(fs::read(ck(&c1).join("bad.txt"))), eio);
    assert_eq!(fs::read(ck(&c1).join("good.txt")).unwrap(), b"fine\n");
    assert_eq!(
        fs::metadata(ck(&c1).join("bad.txt")).unwrap().len(),
        bad.len() as u64
    );
    // The corrupt record: its .json and its tree fail, nothing else does.
    assert_eq!(
        errno(fs::read(mp.join("checkpoints").join(format!("{c2}.json")))),
        eio
    );
    assert_eq!(errno(fs::read_dir(ck(&c2))), eio);
    assert!(names(&mp.join("checkpoints")).contains(&c2), "still listed");
    assert!(
        fs::read(mp.join("checkpoints").join(format!("{c1}.json")))
            .unwrap()
            .starts_with(b"{")
    );
    assert_eq!(fs::read(mp.join("refs/a/good.txt")).unwrap(), b"fine\n");
    // The daemon warned, naming the object.
    let log = status_log(&env);
    let text = fs::read_to_string(&log).unwrap();
    assert!(
        text.lines().any(|l| l.contains("WARN") && l.contains(&hex)),
        "no warning naming {hex} in {}:\n{text}",
        log.display()
    );
    m.unmount();
}

/// The log file of the (single) live mount.
fn status_log(env: &Env) -> PathBuf {
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    PathBuf::from(status[0]["log"].as_str().unwrap())
}

#[test]
fn browse_needs_only_a_mountpoint() {
    let env = Env::new();
    env.ok(["init"]);
    let out = env.run([
        "mount".as_ref(),
        "--browse".as_ref(),
        env.path("a").as_os_str(),
        env.path("b").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("only a mountpoint"),
        "{}",
        stderr(&out)
    );
    let out = env.run(["mount", "--browse"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    // Inside the store is refused, as for any mount.
    let out = env.run([
        "mount".as_ref(),
        "--browse".as_ref(),
        env.store.join("x").as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!env.path("a").exists() && !env.path("b").exists());
}
