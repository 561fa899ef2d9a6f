//! `storefs remote`, `push` and `pull` through the real binary, against a
//! `file://` remote always and against a real S3-compatible server when
//! `STOREFS_TEST_S3_ENDPOINT` is set (scripts/test.sh runs this binary twice, over
//! s3s-fs and over moto, each on loopback, and sets it with AWS_ENDPOINT_URL,
//! AWS_ALLOW_HTTP, dummy keys and AWS_REGION; the variables are described in
//! tests/common/mod.rs, "remotes"). Every body runs for both; when the variable
//! is set and the server does not answer, the S3 tests fail.

#[macro_use]
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{
    Env, RemoteKind, RemoteKind as Kind, assert_same_tree, chunk_of, env_with_remote, make_store,
    pseudo_random,
};
use storefs::remote::Remote;
use storefs::store::ObjectId;

struct Setup {
    env: Env,
    url: String,
    remote: Remote,
}

/// A fresh env and an empty remote of `kind`; `None` for S3 when no server was given.
fn setup(kind: Kind) -> Option<Setup> {
    let (env, url, remote) = env_with_remote(kind, "t")?;
    Some(Setup { env, url, remote })
}

both_remotes!(
    push_pull_round_trip,
    conflicting_push_refused_unless_forced,
    interrupted_push_resumes,
    tampered_object_fails_pull,
    missing_object_fails_pull,
    ref_update_is_conditional,
);

impl Setup {
    fn store(&self, which: &str) -> PathBuf {
        self.env.path(which)
    }

    fn run(&self, store: &str, args: &[&str]) -> Output {
        self.env.run_with_store(&self.store(store), args)
    }

    fn ok(&self, store: &str, args: &[&str]) -> (String, String) {
        self.env.ok_in(&self.store(store), args)
    }

    fn fails(&self, store: &str, args: &[&str]) -> String {
        self.env.fails_in(&self.store(store), args)
    }

    /// A tree to push: the agent-store fixture plus a 3 MiB file of
    /// pseudo-random bytes (several chunks, stored loose).
    fn make_tree(&self) -> PathBuf {
        let src = self.env.path("src");
        make_store(&src);
        fs::write(src.join("big.bin"), pseudo_random(3 << 20, 7)).unwrap();
        src
    }

    /// [`Setup::make_tree`] snapshotted in store `a` as `s1` and pushed to
    /// `team`, which store `b` has as a remote too; the tree.
    fn pushed_from_a(&self) -> PathBuf {
        let src = self.make_tree();
        self.snapshot("a", &src);
        self.add_remote("a");
        self.ok("a", &["push", "team", "s1"]);
        self.add_remote("b");
        src
    }

    fn snapshot(&self, store: &str, dir: &Path) -> String {
        let (out, _) = self.ok(store, &["snapshot", dir.to_str().unwrap(), "--ref", "s1"]);
        out.trim().to_string()
    }

    fn add_remote(&self, store: &str) {
        self.ok(store, &["remote", "add", "team", &self.url]);
    }

    fn remote_ref(&self, name: &str) -> Option<String> {
        self.remote
            .get_bytes(&format!("refs/{name}"))
            .unwrap()
            .map(|b| String::from_utf8(b).unwrap().trim().to_string())
    }
}

/// The "N of M objects uploaded" numbers from push's report.
fn uploaded(report: &str) -> (usize, usize) {
    let (before, _) = report
        .split_once(" objects uploaded")
        .unwrap_or_else(|| panic!("no report: {report}"));
    let words: Vec<&str> = before.split_whitespace().rev().take(3).collect();
    assert_eq!(words[1], "of", "{report}");
    (words[2].parse().unwrap(), words[0].parse().unwrap())
}

/// The first chunk of `path` in checkpoint `target` of `store`.
fn push_pull_round_trip(kind: Kind) {
    let Some(t) = setup(kind) else { return };
    let src = t.make_tree();
    let id = t.snapshot("a", &src);
    t.add_remote("a");
    t.ok("a", &["remote", "list"]);
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    let (n, m) = uploaded(&report);
    assert_eq!(n, m, "a first push uploads everything: {report}");
    assert!(m > 10, "{report}");
    assert_eq!(t.remote.list_objects().unwrap().len(), m);
    assert_eq!(t.remote_ref("s1").as_deref(), Some(id.as_str()));

    // A second push uploads nothing and leaves the remote as it was.
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    assert_eq!(uploaded(&report), (0, m), "{report}");
    assert!(report.contains("0 records uploaded"), "{report}");
    assert_eq!(t.remote.list_objects().unwrap().len(), m);

    // Another store pulls it: same tree, byte and metadata exact.
    t.add_remote("b");
    let (out, report) = t.ok("b", &["pull", "team", "s1"]);
    assert_eq!(out.trim(), id);
    assert!(report.contains(&format!("{m} objects fetched")), "{report}");
    let (refs, _) = t.ok("b", &["refs"]);
    assert_eq!(refs, format!("s1\t{id}\n"));
    let restored = t.env.path("restored");
    t.ok("b", &["restore", "s1", restored.to_str().unwrap()]);
    assert_same_tree(&src, &restored, false);
    let out = t.run("b", &["cat", "s1", "big.bin"]);
    assert!(out.status.success());
    assert_eq!(out.stdout, fs::read(src.join("big.bin")).unwrap());
    t.ok("b", &["verify"]);

    // Pulling again fetches nothing; --as names another local ref.
    let (_, report) = t.ok("b", &["pull", "team", "s1", "--as", "copy"]);
    assert!(report.contains("0 objects fetched"), "{report}");
    assert!(report.contains("0 records fetched"), "{report}");
    let (refs, _) = t.ok("b", &["refs"]);
    assert_eq!(refs, format!("copy\t{id}\ns1\t{id}\n"));

    // A history travels: a second checkpoint on top, pushed and pulled,
    // brings only what changed.
    fs::write(src.join("state/new.json"), b"{\"n\": 2}\n").unwrap();
    let id2 = t.snapshot("a", &src);
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    let (n2, _) = uploaded(&report);
    assert!((1..6).contains(&n2), "only the changed objects: {report}");
    let (out, _) = t.ok("b", &["pull", "team", "s1"]);
    assert_eq!(out.trim(), id2);
    let (log, _) = t.ok("b", &["log", "s1"]);
    assert!(log.contains(&id) && log.contains(&id2), "{log}");

    // Unknown remotes, refs and URLs: one line naming them.
    let err = t.fails("b", &["pull", "nope", "s1"]);
    assert!(err.contains("no remote named 'nope'"), "{err}");
    let err = t.fails("b", &["pull", "team", "nothere"]);
    assert!(err.contains("no ref 'nothere'"), "{err}");
    let err = t.fails("b", &["remote", "add", "x", "http://example.com/b"]);
    assert!(
        err.contains("http://example.com/b") && err.contains("s3://"),
        "{err}"
    );
    let err = t.fails("b", &["remote", "add", "team", &t.url]);
    assert!(err.contains("exists already"), "{err}");
    t.ok("b", &["remote", "remove", "team"]);
    let (list, _) = t.ok("b", &["remote", "list"]);
    assert_eq!(list, "");
}

fn conflicting_push_refused_unless_forced(kind: Kind) {
    let Some(t) = setup(kind) else { return };
    let src = t.make_tree();
    t.snapshot("a", &src);
    t.add_remote("a");
    t.add_remote("b");
    t.ok("a", &["push", "team", "s1"]);
    t.ok("b", &["pull", "team", "s1"]);

    // B commits on top and pushes: a fast-forward, accepted.
    let b_tree = t.env.path("b-tree");
    t.ok("b", &["restore", "s1", b_tree.to_str().unwrap()]);
    fs::write(b_tree.join("state/from-b.json"), b"{}\n").unwrap();
    let id_b = t.snapshot("b", &b_tree);
    t.ok("b", &["push", "team", "s1"]);
    assert_eq!(t.remote_ref("s1").as_deref(), Some(id_b.as_str()));

    // A commits something else (newer, unrelated to B's) and pushes: refused.
    fs::write(src.join("state/from-a.json"), b"{\"a\": 1}\n").unwrap();
    let id_a = t.snapshot("a", &src);
    let err = t.fails("a", &["push", "team", "s1"]);
    assert!(
        err.contains(&format!(
            "remote ref team/s1 is at {id_b}, which is not an ancestor of {id_a}"
        )) && err.contains("--force"),
        "{err}"
    );
    assert_eq!(t.remote_ref("s1").as_deref(), Some(id_b.as_str()));

    // --force moves it.
    t.ok("a", &["push", "team", "s1", "--force"]);
    assert_eq!(t.remote_ref("s1").as_deref(), Some(id_a.as_str()));

    // B pulling would move its ref off its own checkpoint: refused, --as or --force.
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        err.contains(&format!("local ref s1 is at {id_b}")) && err.contains("--force"),
        "{err}"
    );
    let (out, _) = t.ok("b", &["pull", "team", "s1", "--as", "theirs"]);
    assert_eq!(out.trim(), id_a);
    t.ok("b", &["pull", "team", "s1", "--force"]);
    let (refs, _) = t.ok("b", &["refs"]);
    assert_eq!(refs, format!("s1\t{id_a}\ntheirs\t{id_a}\n"));

    // Pushing a checkpoint under another remote name with --as.
    t.ok("b", &["push", "team", &id_b, "--as", "b-work"]);
    assert_eq!(t.remote_ref("b-work").as_deref(), Some(id_b.as_str()));
    let err = t.fails("b", &["push", "team", &id_b]);
    assert!(err.contains("--as"), "{err}");
}

fn interrupted_push_resumes(kind: Kind) {
    let Some(t) = setup(kind) else { return };
    let src = t.make_tree();
    let id = t.snapshot("a", &src);
    t.add_remote("a");
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    let (_, m) = uploaded(&report);

    // What an interruption before the ref leaves: some objects, no record, no ref.
    let mut objs: Vec<ObjectId> = t.remote.list_objects().unwrap().into_iter().collect();
    objs.sort();
    let gone: Vec<ObjectId> = objs.iter().step_by(2).copied().collect();
    for o in &gone {
        t.remote.delete(&format!("objects/{o}")).unwrap();
    }
    t.remote.delete(&format!("checkpoints/{id}.json")).unwrap();
    t.remote.delete("refs/s1").unwrap();

    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    assert_eq!(uploaded(&report), (gone.len(), m), "{report}");
    assert!(report.contains("1 records uploaded"), "{report}");
    assert_eq!(t.remote.list_objects().unwrap().len(), m);

    t.add_remote("b");
    let (out, _) = t.ok("b", &["pull", "team", "s1"]);
    assert_eq!(out.trim(), id);
    let restored = t.env.path("restored");
    t.ok("b", &["restore", "s1", restored.to_str().unwrap()]);
    assert_same_tree(&src, &restored, false);
}

/// Nothing published in store `b`: no ref, no checkpoint.
fn assert_nothing_published(t: &Setup) {
    let (refs, _) = t.ok("b", &["refs"]);
    assert_eq!(refs, "");
    let ckpts = fs::read_dir(t.store("b").join("checkpoints"))
        .unwrap()
        .count();
    assert_eq!(ckpts, 0, "no checkpoint record written");
}

fn tampered_object_fails_pull(kind: Kind) {
    let Some(t) = setup(kind) else { return };
    let src = t.pushed_from_a();

    // A well-formed zstd frame of other bytes under the chunk's name.
    let victim = chunk_of(&t.store("a"), "s1", "big.bin");
    let other = zstd::bulk::compress(&pseudo_random(1000, 9), 3).unwrap();
    t.remote
        .put_bytes(&format!("objects/{victim}"), &other)
        .unwrap();
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        err.contains(&victim.to_hex()) && err.contains("corrupt") && err.contains("'team'"),
        "{err}"
    );
    assert_nothing_published(&t);

    // Bytes that are not zstd at all.
    t.remote
        .put_bytes(&format!("objects/{victim}"), b"garbage")
        .unwrap();
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        err.contains(&victim.to_hex()) && err.contains("corrupt"),
        "{err}"
    );
    assert_nothing_published(&t);

    // A tampered checkpoint record.
    let id = t.remote_ref("s1").unwrap();
    let key = format!("checkpoints/{id}.json");
    let mut rec = t.remote.get_bytes(&key).unwrap().unwrap();
    rec.extend_from_slice(b" ");
    t.remote.put_bytes(&key, &rec).unwrap();
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(err.contains(&id) && err.contains("record"), "{err}");
    assert_nothing_published(&t);

    // Repaired by pushing again (the pusher re-uploads only what is missing,
    // so delete the bad ones first, as a repair would), then the pull works.
    t.remote.delete(&format!("objects/{victim}")).unwrap();
    t.remote.delete(&key).unwrap();
    t.ok("a", &["push", "team", "s1"]);
    t.ok("b", &["pull", "team", "s1"]);
    let out = t.run("b", &["cat", "s1", "big.bin"]);
    assert_eq!(out.stdout, fs::read(src.join("big.bin")).unwrap());
}

fn missing_object_fails_pull(kind: Kind) {
    let Some(t) = setup(kind) else { return };
    t.pushed_from_a();
    let victim = chunk_of(&t.store("a"), "s1", "big.bin");
    t.remote.delete(&format!("objects/{victim}")).unwrap();
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        err.contains(&victim.to_hex()) && err.contains("missing"),
        "{err}"
    );
    assert_nothing_published(&t);
}

/// The ref write is a compare-and-swap: a write against a version someone
/// else has replaced fails (on S3 the server checks the ETag; on file:// the
/// check runs under the ref lock).
fn ref_update_is_conditional(kind: Kind) {
    let Some(t) = setup(kind) else { return };
    assert_eq!(t.remote.has_conditional_put(), matches!(kind, Kind::S3));
    let a = "a".repeat(64);
    let b = "b".repeat(64);
    let c = "c".repeat(64);
    assert!(t.remote.put_ref_if("r", None, &a).unwrap(), "create");
    assert!(
        !t.remote.put_ref_if("r", None, &b).unwrap(),
        "create over an existing ref must fail"
    );
    let (content, v1) = t.remote.get_ref("r").unwrap().unwrap();
    assert_eq!(content, a);
    // Someone else moves it.
    assert!(t.remote.put_ref_if("r", Some(v1.clone()), &b).unwrap());
    // Our write against the old version fails and leaves theirs.
    assert!(!t.remote.put_ref_if("r", Some(v1), &c).unwrap());
    assert_eq!(t.remote.get_ref("r").unwrap().unwrap().0, b);
}
