//! Files inside a store and a `file://` remote are reached without following
//! symlinks, a store another user owns (or others may write) is refused for
//! writing unless trusted, gc deletes only inside its own store, and a forged
//! mount record makes `umount` signal, wait on or unmount nothing
//! (docs/security.md, "Files inside a store"). Each test plants what an
//! attacker who could write the store would have planted, and checks that
//! root (the tests run as root) did not write, delete or unmount through it.
//!
//! "Another user" is a uid no account has (chown to it): the checks compare
//! uids and modes, so no account needs to be made (or left behind).

mod common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use common::{Env, snapshot_small as snapshot, stderr};

/// A uid (and gid) no account on a test machine has.
const STRANGER: u32 = 4_242_421;

/// A root-only file outside every store, with bytes that must not change.
fn victim(env: &Env, name: &str) -> (PathBuf, Vec<u8>) {
    let p = env.path(name);
    let bytes = format!("secret of {name}\n").into_bytes();
    fs::write(&p, &bytes).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    (p, bytes)
}

/// The first 16 hex digits of sha256(`mp`): the key of a mountpoint's log and record.
fn key_of(mp: &Path) -> String {
    storefs::store::ObjectId::of(mp.as_os_str().as_encoded_bytes()).to_hex()[..16].to_string()
}

fn chown_tree(p: &Path, uid: u32) {
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{uid}:{uid}"))
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = common::walk(dir)
        .into_iter()
        .filter(|p| dir.join(p).is_file())
        .map(|p| {
            let b = fs::read(dir.join(&p)).unwrap();
            (p, b)
        })
        .collect();
    out.sort();
    out
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_symlink_planted_at_the_mount_log_is_not_followed() {
    let env = Env::new();
    snapshot(&env);
    let mp = env.path("mnt");
    let (victim, bytes) = victim(&env, "victim-log");
    let log = env
        .store
        .join("logs")
        .join(format!("mount-{}.log", key_of(&mp)));
    symlink(&victim, &log).unwrap();
    let out = env.run(["mount".as_ref(), "s1".as_ref(), mp.as_os_str()]);
    let _guard = env.guard_for("s1");
    assert_eq!(
        fs::read(&victim).unwrap(),
        bytes,
        "the daemon wrote through the symlink"
    );
    assert!(
        !out.status.success(),
        "mount through a planted log symlink should fail"
    );
    let err = stderr(&out);
    assert!(
        err.contains("mount-") && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

#[test]
fn a_symlink_planted_at_published_is_not_followed() {
    let env = Env::new();
    env.ok(["init"]);
    let packs = env.store.join("objects/packs");
    fs::create_dir_all(&packs).unwrap();
    let (victim, bytes) = victim(&env, "victim-published");
    symlink(&victim, packs.join("published")).unwrap();
    snapshot(&env);
    assert_eq!(
        fs::read(&victim).unwrap(),
        bytes,
        "publish appended through the symlink"
    );
    // The snapshot itself is whole.
    assert_eq!(env.ok(["cat", "s1", "d/a.txt"]), "alpha\n");
}

#[test]
fn a_symlink_planted_at_a_fork_lock_is_not_followed() {
    let env = Env::new();
    snapshot(&env);
    env.ok(["fork", "s1", "--name", "f"]);
    let fork = env.store.join("forks/f");
    // The lock: a dangling link to where root would create a file.
    let lock_target = env.path("created-through-lock");
    let _ = fs::remove_file(fork.join("lock"));
    symlink(&lock_target, fork.join("lock")).unwrap();
    let out = env.run(["commit", "f", "-m", "x"]);
    assert!(
        !lock_target.exists(),
        "the lock was created through the symlink"
    );
    assert!(!out.status.success(), "{}", stderr(&out));
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_symlink_planted_at_the_next_journal_segment_is_not_followed() {
    let env = Env::new();
    let origin = snapshot(&env);
    fs::rename(&origin, env.path("moved")).unwrap();
    env.ok(["fork", "s1", "--name", "f"]);
    let mut m = env.mount("f", None);
    fs::write(m.path().join("new.txt"), b"written in the fork\n").unwrap();
    // The segments a commit would start next, each a link to a root-only file.
    let journal = env.store.join("forks/f/journal");
    let last = fs::read_dir(&journal)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            u64::from_str_radix(name.strip_suffix(".wal")?, 16).ok()
        })
        .max()
        .expect("the mounted fork has a segment");
    let (victim, bytes) = victim(&env, "victim-segment");
    for seq in last + 1..last + 5 {
        symlink(&victim, journal.join(format!("{seq:016x}.wal"))).unwrap();
    }
    let out = env.run(["commit", "f", "-m", "y"]);
    assert_eq!(
        fs::read(&victim).unwrap(),
        bytes,
        "journal bytes went through the symlink ({})",
        stderr(&out)
    );
    assert!(!out.status.success(), "the commit cannot start its segment");
    let out = env.run([
        "umount".as_ref(),
        "--no-commit".as_ref(),
        m.path().as_os_str(),
    ]);
    if out.status.success() {
        m.mountpoint = None;
    }
    assert_eq!(fs::read(&victim).unwrap(), bytes);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn an_empty_directory_of_another_user_is_not_made_a_store() {
    let env = Env::new();
    let dir = env.path("theirs");
    fs::create_dir(&dir).unwrap();
    chown_tree(&dir, STRANGER);
    let err = env.fails_in(&dir, &["init"]);
    assert!(
        err.contains("owned by uid") && err.contains(&dir.display().to_string()),
        "{err}"
    );
    assert!(
        fs::read_dir(&dir).unwrap().next().is_none(),
        "something was written there"
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_store_of_another_user_is_refused_for_writes_unless_trusted() {
    let env = Env::new();
    let origin = snapshot(&env);
    chown_tree(&env.store, STRANGER);
    let before = files_under(&env.store);
    let err = env.fails_in(
        &env.store,
        &["snapshot", origin.to_str().unwrap(), "--ref", "s2"],
    );
    assert!(
        err.contains("refusing to write")
            && err.contains("STOREFS_SAFE_STORES")
            && err.contains("uid"),
        "{err}"
    );
    let err = env.fails_in(&env.store, &["gc"]);
    assert!(err.contains("STOREFS_SAFE_STORES"), "{err}");
    assert_eq!(files_under(&env.store), before, "a refused command wrote");
    // Reading is fine.
    assert_eq!(env.ok(["cat", "s1", "d/a.txt"]), "alpha\n");
    // Trusted, it writes.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(["snapshot", origin.to_str().unwrap(), "--ref", "s2"])
        .env("STOREFS_SAFE_STORES", &env.store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_store_others_may_write_is_refused_and_doctor_warns() {
    let env = Env::new();
    snapshot(&env);
    fs::set_permissions(&env.store, fs::Permissions::from_mode(0o777)).unwrap();
    let err = env.fails_in(&env.store, &["gc"]);
    assert!(err.contains("writable by its group or others"), "{err}");
    let out = env.run(["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("warning") && l.contains("store ownership")),
        "{text}"
    );
    fs::set_permissions(&env.store, fs::Permissions::from_mode(0o700)).unwrap();
    let out = env.run(["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok") && l.contains("store ownership")),
        "{text}"
    );
}

#[test]
fn gc_with_packs_symlinked_to_another_store_removes_nothing_there() {
    let env = Env::new();
    snapshot(&env);
    // Another store, whose objects this store's checkpoints do not reach.
    let other = env.path("other");
    let tree = env.path("other-tree");
    fs::create_dir_all(&tree).unwrap();
    fs::write(tree.join("only-there"), vec![3u8; 50_000]).unwrap();
    env.ok_in(&other, &["snapshot", tree.to_str().unwrap(), "--ref", "o"]);
    let their_packs = other.join("objects/packs");
    let before = files_under(&their_packs);
    assert!(!before.is_empty());

    let packs = env.store.join("objects/packs");
    fs::rename(&packs, env.path("own-packs")).unwrap();
    symlink(&their_packs, &packs).unwrap();
    let out = env.run(["gc", "--grace", "0s"]);
    assert_eq!(
        files_under(&their_packs),
        before,
        "gc deleted in another store: {}",
        stderr(&out)
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("objects/packs") && err.trim_end().lines().count() == 1,
        "{err}"
    );
    env.ok_in(&other, &["verify"]);
}

#[test]
fn gc_remote_with_packs_symlinked_deletes_nothing_through_it() {
    let env = Env::new();
    snapshot(&env);
    let private = env.path("private-remote");
    let shared = env.path("shared-remote");
    // The private remote holds a checkpoint the shared one's refs never name.
    env.ok([
        "remote",
        "add",
        "private",
        &format!("file://{}", private.display()),
    ]);
    env.ok(["push", "private", "s1"]);
    let before = files_under(&private.join("packs"));
    assert!(!before.is_empty());
    env.ok([
        "remote",
        "add",
        "shared",
        &format!("file://{}", shared.display()),
    ]);
    fs::create_dir_all(&shared).unwrap();
    symlink(private.join("packs"), shared.join("packs")).unwrap();
    let out = env.run(["gc", "--remote", "shared", "--grace", "0s"]);
    assert_eq!(
        files_under(&private.join("packs")),
        before,
        "gc --remote deleted through a symlink: {}",
        stderr(&out)
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is a symlink"), "{}", stderr(&out));
    // Nor does push write through it.
    let out = env.run(["push", "shared", "s1"]);
    assert!(!out.status.success());
    assert_eq!(files_under(&private.join("packs")), before);
}

/// A `file://` remote opened (its check passed: nothing in it was a
/// symlink), then, before the operation, `packs` (or a file in it) swapped
/// for a symlink: what a writer of the remote could do between the check
/// and the writes. Push, pull and `gc --remote` go through the remote's own
/// store, which follows no symlink: each fails naming the link, and nothing
/// is written, read or deleted where it leads.
mod swapped_after_the_check {
    use super::*;
    use storefs::remote::{PullOptions, PushOptions, Remote, RemoteGcOptions};
    use storefs::store::{Store, progress::no_progress};

    fn url(dir: &Path) -> String {
        format!("file://{}", dir.display())
    }

    fn push_opts() -> PushOptions {
        PushOptions {
            force: false,
            progress: no_progress(),
        }
    }

    /// A store with checkpoint `s1`, pushed to the remote at `dir` as
    /// `s1`; the store and the checkpoint.
    fn pushed(env: &Env, dir: &Path) -> (Store, storefs::store::ObjectId) {
        snapshot(env);
        let store = Store::open(&env.store).unwrap();
        let id = store.get_ref("s1").unwrap().unwrap();
        let remote = Remote::open_url("r", &url(dir)).unwrap();
        remote.push(&store, &id, "s1", &push_opts()).unwrap();
        (store, id)
    }

    fn says_symlink(err: &str) {
        assert!(
            err.contains("is a symlink") && err.contains("packs") && err.lines().count() == 1,
            "{err}"
        );
    }

    #[test]
    fn push_writes_nothing_through_a_symlinked_packs() {
        let env = Env::new();
        snapshot(&env);
        let store = Store::open(&env.store).unwrap();
        let id = store.get_ref("s1").unwrap().unwrap();
        let dir = env.path("remote");
        let (victim, _) = victim(&env, "victim-file");
        let elsewhere = env.path("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::copy(&victim, elsewhere.join("keep")).unwrap();
        let before = files_under(&elsewhere);

        let remote = Remote::open_url("r", &url(&dir)).unwrap();
        symlink(&elsewhere, dir.join("packs")).unwrap();
        let err = remote
            .push(&store, &id, "s1", &push_opts())
            .unwrap_err()
            .to_string();
        says_symlink(&err);
        assert_eq!(files_under(&elsewhere), before);
        assert!(remote.get_ref("s1").unwrap().is_none(), "no ref published");
    }

    #[test]
    fn pull_reads_nothing_through_a_symlinked_pack_file_or_packs() {
        let env = Env::new();
        let dir = env.path("remote");
        pushed(&env, &dir);
        let other = Env::new();
        let theirs = Store::open_or_create(&other.store).unwrap();
        let pull = |remote: &Remote| {
            let opts = PullOptions {
                force: false,
                progress: no_progress(),
            };
            remote.pull(&theirs, "s1", Some("s1"), &opts)
        };

        // A file in packs/: its index, replaced by a link to a copy of itself.
        let idx = fs::read_dir(dir.join("packs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "idx"))
            .unwrap();
        let copy = env.path("idx-copy");
        let remote = Remote::open_url("r", &url(&dir)).unwrap();
        fs::rename(&idx, &copy).unwrap();
        symlink(&copy, &idx).unwrap();
        says_symlink(&pull(&remote).unwrap_err().to_string());
        fs::remove_file(&idx).unwrap();
        fs::rename(&copy, &idx).unwrap();

        // packs/ itself, a link to where it was moved.
        let remote = Remote::open_url("r", &url(&dir)).unwrap();
        let moved = env.path("packs-moved");
        fs::rename(dir.join("packs"), &moved).unwrap();
        symlink(&moved, dir.join("packs")).unwrap();
        says_symlink(&pull(&remote).unwrap_err().to_string());
        assert!(theirs.get_ref("s1").unwrap().is_none(), "nothing pulled");

        // Put back, the same pull goes through.
        fs::remove_file(dir.join("packs")).unwrap();
        fs::rename(&moved, dir.join("packs")).unwrap();
        pull(&remote).unwrap();
    }

    #[test]
    fn gc_deletes_nothing_through_a_symlinked_packs() {
        let env = Env::new();
        let dir = env.path("remote");
        let (store, _) = pushed(&env, &dir);
        // Its ref gone, everything in packs/ is garbage to a gc.
        let remote = Remote::open_url("r", &url(&dir)).unwrap();
        remote.delete_ref("s1").unwrap();
        let elsewhere = env.path("elsewhere");
        fs::rename(dir.join("packs"), &elsewhere).unwrap();
        let before = files_under(&elsewhere);
        assert!(!before.is_empty());

        let remote = Remote::open_url("r", &url(&dir)).unwrap();
        symlink(&elsewhere, dir.join("packs")).unwrap();
        let opts = RemoteGcOptions {
            dry_run: false,
            grace: std::time::Duration::ZERO,
            progress: no_progress(),
        };
        says_symlink(&remote.gc(&store, &opts).unwrap_err().to_string());
        assert_eq!(files_under(&elsewhere), before);
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_forged_mount_record_unmounts_and_waits_on_nothing() {
    let env = Env::new();
    snapshot(&env);
    // A real mount of another store.
    let other = Env::new();
    let tree = other.path("t");
    fs::create_dir_all(&tree).unwrap();
    fs::write(tree.join("x"), b"x\n").unwrap();
    other.ok([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "o".as_ref(),
    ]);
    let theirs = other.mount("o", Some(&other.path("mnt")));
    let mp = theirs.path().to_path_buf();

    // In this store, records naming that mount, with pid 1 and with the pid
    // of a process that is not its daemon.
    let mounts = env.store.join("mounts");
    fs::create_dir_all(&mounts).unwrap();
    let me = std::process::id();
    for (i, pid) in [1u32, me].into_iter().enumerate() {
        let rec = serde_json::json!({
            "mountpoint": mp.to_str().unwrap(),
            "target": format!("victim{i}"),
            "checkpoint": "",
            "pid": pid,
            "mode": "ro",
            "log": "",
            "started_ns": 0,
        });
        let name = format!("{}{i}.json", &key_of(&mp)[..15]);
        fs::write(mounts.join(name), rec.to_string()).unwrap();
    }
    for name in ["victim0", "victim1"] {
        let out = env.run(["umount", name]);
        assert!(
            !out.status.success(),
            "umount {name} succeeded: {}",
            stderr(&out)
        );
        assert!(
            common::read_all(&mp.join("x")).is_ok(),
            "umount {name} unmounted another store's mount"
        );
    }
    assert!(
        env.ok(["status", "--json"]).trim() == "[]",
        "forged records listed as live"
    );
    theirs.unmount();
}
