//! Forks across machines (issue 9, item 4) through the real binary: two stores
//! A and B stand for two machines sharing one remote, `file://` always and S3,
//! Azure and GCS when their servers are given (as in tests/remote.rs;
//! scripts/test.sh runs the S3 variants over moto). B forks A's
//! pushed checkpoint (`fork team:s1 --name s1-retry`), works on it in a
//! read-write mount and pushes the fork;
//! A pulls it, continues and pushes a fast-forward; B's push of a commit made
//! on its old head is refused naming both checkpoints; `pull --fork` refuses a
//! fork with uncommitted changes or a head that is not an ancestor, moves it
//! with --force (B kept its commit under another fork name), and B's next push
//! is accepted. Every mount is unmounted by a guard, on failure too.

#[macro_use]
mod common;

use std::fs;
use std::path::Path;

use common::{Env, MountGuard, RemoteKind, RemoteKind as Kind, env_with_remote, stderr};
use storefs::remote::Remote;

/// Machine A, machine B, the remote's URL and a handle on it; `None` for S3
/// when no server was given.
struct Setup {
    a: Env,
    b: Env,
    url: String,
    remote: Remote,
}

fn setup(kind: Kind) -> Setup {
    let (a, url, remote) = env_with_remote(kind, "f");
    Setup {
        a,
        b: Env::new(),
        url,
        remote,
    }
}

both_remotes!(root: fork_travels_between_machines);

fn ok(env: &Env, args: &[&str]) -> (String, String) {
    env.ok_in(&env.store, args)
}

/// Require exit 1 and a one-line message; returns it.
fn fails(env: &Env, args: &[&str]) -> String {
    env.fails_in(&env.store, args)
}

fn head(env: &Env, fork: &str) -> String {
    let (out, _) = ok(env, &["log", fork]);
    // `log` prints the head first: `checkpoint <id> (…)`.
    out.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("empty log of {fork}"))
        .to_string()
}

fn cat(env: &Env, target: &str, path: &str) -> String {
    ok(env, &["cat", target, path]).0
}

/// Mount fork `fork` of `env` read-write at `mp`, run `work` on it, unmount
/// (which commits). The guard unmounts even if `work` panics.
fn with_fork_mount(env: &Env, fork: &str, mp: &Path, work: impl FnOnce(&Path)) {
    fs::create_dir_all(mp).unwrap();
    let guard = env.mount(fork, Some(mp));
    work(guard.path());
    guard.unmount();
}

fn remote_ref(t: &Setup, name: &str) -> Option<String> {
    t.remote
        .get_bytes(&format!("refs/{name}"))
        .unwrap()
        .map(|b| String::from_utf8(b).unwrap().trim().to_string())
}

fn fork_travels_between_machines(kind: Kind) {
    let t = setup(kind);
    let (a, b) = (&t.a, &t.b);

    // A: a tree, snapshotted and pushed as s1.
    let src = a.path("src");
    fs::create_dir_all(src.join("state")).unwrap();
    fs::write(src.join("state/lead.json"), b"{\"turn\": 1}\n").unwrap();
    fs::write(src.join("notes.txt"), b"from A\n").unwrap();
    let (s1, _) = ok(a, &["snapshot", src.to_str().unwrap(), "--ref", "s1"]);
    let s1 = s1.trim().to_string();
    ok(a, &["remote", "add", "team", &t.url]);
    ok(a, &["push", "team", "s1"]);

    // B (an empty store): fork the remote ref.
    ok(b, &["remote", "add", "team", &t.url]);
    let (_, msg) = ok(b, &["fork", "team:s1", "--name", "s1-retry"]);
    assert!(msg.contains("team/s1"), "{msg}");
    assert_eq!(head(b, "s1-retry"), s1);
    // No local ref was made; fork.json records where the fork came from.
    assert_eq!(ok(b, &["refs"]).0, "");
    let info: serde_json::Value =
        serde_json::from_slice(&fs::read(b.store.join("forks/s1-retry/fork.json")).unwrap())
            .unwrap();
    assert_eq!(info["upstream"]["remote"], "team");
    assert_eq!(info["upstream"]["ref"], "s1");
    assert_eq!(info["base"], s1.as_str());
    // The pull was full: B reads every file without the remote.
    assert_eq!(cat(b, "s1-retry", "notes.txt"), "from A\n");
    let taken = fails(b, &["fork", "team:s1", "--name", "s1-retry"]);
    assert!(taken.contains("s1-retry"), "{taken}");
    let no_ref = fails(b, &["fork", "team:nope", "--name", "x"]);
    assert!(no_ref.contains("nope"), "{no_ref}");

    // B works on the fork, unmounts (commits) and pushes it under its name.
    let mp_b = b.path("mnt");
    with_fork_mount(b, "s1-retry", &mp_b, |m| {
        assert_eq!(fs::read(m.join("notes.txt")).unwrap(), b"from A\n");
        fs::write(m.join("b.txt"), b"from B\n").unwrap();
    });
    let b1 = head(b, "s1-retry");
    assert_ne!(b1, s1);
    ok(b, &["push", "team", "s1-retry"]);
    assert_eq!(remote_ref(&t, "s1-retry").as_deref(), Some(b1.as_str()));
    assert_eq!(remote_ref(&t, "s1").as_deref(), Some(s1.as_str()));

    // A pulls B's fork head and sees B's write.
    let (pulled, _) = ok(a, &["pull", "team", "s1-retry"]);
    assert_eq!(pulled.trim(), b1);
    assert_eq!(cat(a, "s1-retry", "b.txt"), "from B\n");

    // A continues on top of it and pushes: a fast-forward, accepted.
    ok(a, &["fork", "s1-retry", "--name", "a-work"]);
    let mp_a = a.path("mnt");
    with_fork_mount(a, "a-work", &mp_a, |m| {
        fs::write(m.join("a.txt"), b"from A again\n").unwrap();
    });
    let a1 = head(a, "a-work");
    let (_, report) = ok(a, &["push", "team", "a-work", "--as", "s1-retry"]);
    assert!(report.contains(&format!("ref was {b1}")), "{report}");
    assert_eq!(remote_ref(&t, "s1-retry").as_deref(), Some(a1.as_str()));

    // B commits again on its old head: its push is refused, naming both.
    with_fork_mount(b, "s1-retry", &mp_b, |m| {
        fs::write(m.join("b2.txt"), b"B, second\n").unwrap();
    });
    let b2 = head(b, "s1-retry");
    let refused = fails(b, &["push", "team", "s1-retry"]);
    assert!(
        refused.contains(&a1) && refused.contains(&b2),
        "names both checkpoints: {refused}"
    );
    assert_eq!(remote_ref(&t, "s1-retry").as_deref(), Some(a1.as_str()));

    // pull --fork refuses a fork with uncommitted changes …
    fs::create_dir_all(&mp_b).unwrap();
    let mut guard: MountGuard = b.mount("s1-retry", Some(&mp_b));
    fs::write(guard.path().join("b3.txt"), b"B, third\n").unwrap();
    let busy = fails(b, &["pull", "team", "s1-retry", "--fork", "s1-retry"]);
    assert!(
        busy.contains("in use"),
        "a mounted fork is not moved: {busy}"
    );
    let mp = guard.mountpoint.take().unwrap();
    let out = b.run(["umount".as_ref(), mp.as_os_str(), "--no-commit".as_ref()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dirty = fails(b, &["pull", "team", "s1-retry", "--fork", "s1-retry"]);
    assert!(
        dirty.contains("uncommitted") && dirty.contains("commit"),
        "{dirty}"
    );
    assert_eq!(head(b, "s1-retry"), b2);
    let (b3, _) = ok(b, &["commit", "s1-retry", "-m", "third"]);
    let b3 = b3.trim().to_string();

    // … and one whose head is not an ancestor of the pulled checkpoint.
    let diverged = fails(b, &["pull", "team", "s1-retry", "--fork", "s1-retry"]);
    assert!(
        diverged.contains(&b3) && diverged.contains(&a1) && diverged.contains("--force"),
        "{diverged}"
    );
    assert_eq!(head(b, "s1-retry"), b3);

    // B keeps its work under another name, then moves the fork with --force.
    ok(b, &["fork", "s1-retry", "--name", "s1-retry-mine"]);
    let (moved, msg) = ok(
        b,
        &["pull", "team", "s1-retry", "--fork", "s1-retry", "--force"],
    );
    assert_eq!(moved.trim(), a1);
    assert!(msg.contains("moved"), "{msg}");
    assert_eq!(head(b, "s1-retry"), a1);
    assert_eq!(head(b, "s1-retry-mine"), b3);
    assert_eq!(cat(b, "s1-retry-mine", "b3.txt"), "B, third\n");

    // The moved fork mounts at its new head (journal restarted) and B's
    // next push is a fast-forward.
    with_fork_mount(b, "s1-retry", &mp_b, |m| {
        assert_eq!(fs::read(m.join("a.txt")).unwrap(), b"from A again\n");
        assert_eq!(fs::read(m.join("b.txt")).unwrap(), b"from B\n");
        assert!(!m.join("b2.txt").exists());
        fs::write(m.join("b4.txt"), b"B, on top of A\n").unwrap();
    });
    let b4 = head(b, "s1-retry");
    let (_, report) = ok(b, &["push", "team", "s1-retry"]);
    assert!(report.contains(&format!("ref was {a1}")), "{report}");
    assert_eq!(remote_ref(&t, "s1-retry").as_deref(), Some(b4.as_str()));

    // A's fork a-work (no new changes) fast-forwards without --force.
    let (_, msg) = ok(a, &["pull", "team", "s1-retry", "--fork", "a-work"]);
    assert!(msg.contains("fork a-work"), "{msg}");
    assert_eq!(head(a, "a-work"), b4);
    with_fork_mount(a, "a-work", &mp_a, |m| {
        assert_eq!(fs::read(m.join("b4.txt")).unwrap(), b"B, on top of A\n");
    });
    assert_eq!(
        head(a, "a-work"),
        b4,
        "a mount without changes commits nothing"
    );
    // A pull into a fork that does not exist says how to make it.
    let none = fails(a, &["pull", "team", "s1-retry", "--fork", "nope"]);
    assert!(
        none.contains("storefs fork team:s1-retry --name nope"),
        "{none}"
    );
}
