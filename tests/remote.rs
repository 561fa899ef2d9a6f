//! `storefs remote`, `push` and `pull` through the real binary, against a
//! `file://` remote always and against a real S3-compatible server when
//! `STOREFS_TEST_S3_ENDPOINT` is set (scripts/test.sh runs this binary over
//! moto on loopback, and sets it
//! with AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, dummy keys and AWS_REGION; the
//! variables are described in tests/common/mod.rs, "remotes"). Every body runs
//! for each; when the variable is set and the server does not answer, the S3
//! tests fail. Likewise `az://` against azurite when
//! `STOREFS_TEST_AZURE_CONTAINER` is set (scripts/azurite.sh) and `gs://` when
//! `STOREFS_TEST_GCS_BUCKET` is set (tests/common/mod.rs, `RemoteKind`).

#[macro_use]
mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{
    Env, RemoteKind, RemoteKind as Kind, assert_same_tree, chunk_of, env_with_remote, make_store,
    pack_of, pseudo_random, replace_in_pack, unpack_remote,
};
use storefs::remote::Remote;
use storefs::store::ObjectId;

struct Setup {
    env: Env,
    url: String,
    remote: Remote,
}

/// A fresh env and an empty remote of `kind`; `None` for S3 when no server was given.
fn setup(kind: Kind) -> Setup {
    let (env, url, remote) = env_with_remote(kind, "t");
    Setup { env, url, remote }
}

both_remotes!(
    root:
    push_pull_round_trip,
    conflicting_push_refused_unless_forced,
    interrupted_push_resumes,
    tampered_object_fails_pull,
    missing_object_fails_pull,
    ref_update_is_conditional,
    remote_without_packs_still_works,
    remote_gc_reclaims_what_deleted_refs_reached,
    remote_gc_spares_the_young_and_the_locked,
    remote_gc_and_pushes_race_and_lose_nothing,
    a_long_history_pulls_whole_and_only_its_own,
);

/// A pull of more objects than a writer holds before publishing (16,384)
/// publishes them as they pile up, as the snapshot does, and still ends
/// with the whole checkpoint, verified.
#[test]
fn a_pull_of_many_objects_publishes_as_it_goes() {
    let t = setup(RemoteKind::File);
    // Imported from a tar made in memory: 20,000 files written out would
    // take seconds of this test's time.
    let mut b = tar::Builder::new(Vec::new());
    for d in 0..20 {
        for i in 0..1000 {
            let data = format!("{d} {i}\n");
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(1_700_000_000);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, format!("d{d:02}/{i}"), data.as_bytes())
                .unwrap();
        }
    }
    let archive = t.env.path("many.tar");
    fs::write(&archive, b.into_inner().unwrap()).unwrap();
    t.ok("a", &["import", archive.to_str().unwrap(), "--ref", "s1"]);
    t.add_remote("a");
    t.ok("a", &["push", "team", "s1"]);
    t.add_remote("b");
    t.ok("b", &["pull", "team", "s1"]);
    let packs = fs::read_dir(t.store("b").join("objects/packs"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().unwrap().ends_with(".idx"))
        .count();
    assert!(packs >= 2, "{packs} pack(s): published once, at the end");
    // Every object the checkpoint reaches is here and hashes to its name.
    let (_, err) = t.ok("b", &["verify"]);
    assert!(
        err.contains("verified 1 checkpoint(s), 20022 object(s)"),
        "{err}"
    );
}

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
    /// pseudo-random bytes (several chunks, each over 64 KiB stored).
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

/// The "(N bytes)" of push's report.
fn bytes_uploaded(report: &str) -> u64 {
    let (_, after) = report.split_once(" objects uploaded (").unwrap();
    after.split_once(" bytes)").unwrap().0.parse().unwrap()
}

/// The root tree of `target` in `store`.
fn root_of(store: &Path, target: &str) -> ObjectId {
    let s = storefs::store::Store::open(store).unwrap();
    s.read_checkpoint(&s.resolve(target).unwrap()).unwrap().root
}

fn push_pull_round_trip(kind: Kind) {
    let t = setup(kind);
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
    // In packs, not one remote object each: one pack of trees, one of chunks.
    let packs = t.remote.list_packs().unwrap();
    let kinds: Vec<&str> = packs.iter().map(|(s, _)| &s[..2]).collect();
    assert_eq!(packs.len(), 2, "{kinds:?}");
    assert!(kinds.contains(&"t-") && kinds.contains(&"d-"), "{kinds:?}");
    let (tree_pack, tree_entries) = pack_of(&t.remote, &root_of(&t.store("a"), "s1"));
    assert!(
        tree_pack.starts_with("t-") && tree_entries.len() > 1,
        "{tree_pack}"
    );
    assert!(
        t.remote
            .get_bytes(&format!(
                "objects/{}",
                chunk_of(&t.store("a"), "s1", "big.bin")
            ))
            .unwrap()
            .is_none(),
        "nothing loose"
    );

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
    let t = setup(kind);
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
    let t = setup(kind);
    let src = t.make_tree();
    let id = t.snapshot("a", &src);
    t.add_remote("a");
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    let (_, m) = uploaded(&report);

    let first_bytes = bytes_uploaded(&report);

    // What an interruption before the ref leaves: the chunk pack sent but
    // not its index, the tree pack not sent, no record, no ref.
    let packs = t.remote.list_packs().unwrap();
    let (data, data_entries) = packs.iter().find(|(s, _)| s.starts_with("d-")).unwrap();
    let (trees, tree_entries) = packs.iter().find(|(s, _)| s.starts_with("t-")).unwrap();
    t.remote.delete(&format!("packs/{data}.idx")).unwrap();
    t.remote.delete(&format!("packs/{trees}.idx")).unwrap();
    t.remote.delete(&format!("packs/{trees}.pack")).unwrap();
    t.remote.delete(&format!("checkpoints/{id}.json")).unwrap();
    t.remote.delete("refs/s1").unwrap();
    assert!(
        t.remote.list_objects().unwrap().is_empty(),
        "a pack without index is not read"
    );

    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    assert_eq!(uploaded(&report), (m, m), "{report}");
    assert_eq!(data_entries.len() + tree_entries.len(), m);
    assert!(report.contains("1 records uploaded"), "{report}");
    // The chunk pack was there whole (same objects, same order, same name):
    // only its index and the tree pack went again.
    let again = bytes_uploaded(&report);
    assert!(
        again < first_bytes / 4,
        "{again} of {first_bytes}: {report}"
    );
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
    let t = setup(kind);
    let src = t.pushed_from_a();

    // A well-formed zstd frame of other bytes under the chunk's name.
    let victim = chunk_of(&t.store("a"), "s1", "big.bin");
    let other = zstd::bulk::compress(&pseudo_random(1000, 9), 3).unwrap();
    replace_in_pack(&t.remote, &victim, &other);
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        err.contains(&victim.to_hex()) && err.contains("corrupt") && err.contains("'team'"),
        "{err}"
    );
    assert_nothing_published(&t);

    // Bytes that are not zstd at all.
    replace_in_pack(&t.remote, &victim, b"garbage");
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
    // so delete the bad pack first, as a repair would), then the pull works.
    let (bad, _) = pack_of(&t.remote, &victim);
    t.remote.delete(&format!("packs/{bad}.idx")).unwrap();
    t.remote.delete(&format!("packs/{bad}.pack")).unwrap();
    t.remote.delete(&key).unwrap();
    t.ok("a", &["push", "team", "s1"]);
    t.ok("b", &["pull", "team", "s1"]);
    let out = t.run("b", &["cat", "s1", "big.bin"]);
    assert_eq!(out.stdout, fs::read(src.join("big.bin")).unwrap());
}

fn missing_object_fails_pull(kind: Kind) {
    let t = setup(kind);
    t.pushed_from_a();
    let victim = chunk_of(&t.store("a"), "s1", "big.bin");
    let (stem, entries) = pack_of(&t.remote, &victim);
    let names_one = |err: &str| entries.iter().any(|e| err.contains(&e.id.to_hex()));
    // The pack gone, its index still there: not published, so not read.
    let pack = t
        .remote
        .get_bytes(&format!("packs/{stem}.pack"))
        .unwrap()
        .unwrap();
    t.remote.delete(&format!("packs/{stem}.pack")).unwrap();
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        names_one(&err) && err.contains("missing") && err.contains("in no pack"),
        "{err}"
    );
    assert_nothing_published(&t);
    // The index gone.
    t.remote
        .put_bytes(&format!("packs/{stem}.pack"), &pack)
        .unwrap();
    t.remote.delete(&format!("packs/{stem}.idx")).unwrap();
    let err = t.fails("b", &["pull", "team", "s1"]);
    assert!(
        names_one(&err) && err.contains("missing") && err.contains("in no pack"),
        "{err}"
    );
    assert_nothing_published(&t);
}

/// A remote written before packs (every object loose under `objects/`)
/// still pulls, and a push to it sends only what it lacks.
fn remote_without_packs_still_works(kind: Kind) {
    let t = setup(kind);
    let src = t.pushed_from_a();
    unpack_remote(&t.remote);
    assert!(t.remote.list_packs().unwrap().is_empty());
    let (_, report) = t.ok("b", &["pull", "team", "s1"]);
    assert!(!report.contains(" 0 objects fetched"), "{report}");
    let restored = t.env.path("restored");
    t.ok("b", &["restore", "s1", restored.to_str().unwrap()]);
    assert_same_tree(&src, &restored, false);
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    assert_eq!(uploaded(&report).0, 0, "{report}");
    fs::write(src.join("state/new.json"), b"{\"n\": 3}\n").unwrap();
    t.snapshot("a", &src);
    let (_, report) = t.ok("a", &["push", "team", "s1"]);
    assert!((1..6).contains(&uploaded(&report).0), "{report}");
    t.ok("b", &["pull", "team", "s1"]);
    t.ok("b", &["verify"]);
}

/// The ref write is a compare-and-swap: a write against a version someone
/// else has replaced fails (on S3 and Azure the server checks the ETag, on GCS
/// the generation; on file:// the
/// check runs under the ref lock).
fn ref_update_is_conditional(kind: Kind) {
    let t = setup(kind);
    assert_eq!(t.remote.has_conditional_put(), !matches!(kind, Kind::File));
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

/// Every stored byte on the remote under `packs/` and `objects/`.
fn remote_bytes(r: &Remote) -> u64 {
    let packs: u64 = r
        .list_packs()
        .unwrap()
        .iter()
        .map(|(stem, _)| {
            r.get_bytes(&format!("packs/{stem}.pack"))
                .unwrap()
                .unwrap()
                .len() as u64
        })
        .sum();
    let loose: u64 = r
        .list_objects()
        .unwrap()
        .iter()
        .filter_map(|id| r.get_bytes(&format!("objects/{id}")).unwrap())
        .map(|b| b.len() as u64)
        .sum();
    packs + loose
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Four refs of trees that share a base and each add 1 MiB of their own;
/// two refs deleted; gc --remote deletes what only those reached, repacks
/// a pack that became mostly garbage, and every remaining ref pulls intact.
fn remote_gc_reclaims_what_deleted_refs_reached(kind: Kind) {
    let t = setup(kind);
    let base = t.make_tree();
    t.add_remote("a");
    let mut trees = Vec::new();
    for i in 0..4 {
        let dir = t.env.path(&format!("tree{i}"));
        make_store(&dir);
        fs::copy(base.join("big.bin"), dir.join("shared.bin")).unwrap();
        fs::write(dir.join("own.bin"), pseudo_random(1 << 20, 100 + i)).unwrap();
        t.ok(
            "a",
            &["snapshot", dir.to_str().unwrap(), "--ref", &format!("r{i}")],
        );
        t.ok("a", &["push", "team", &format!("r{i}")]);
        trees.push(dir);
    }
    // r0 moves (forced) to a checkpoint not descending from its first one,
    // which kept only its shared.bin: its own 1 MiB sits in a pack with
    // shared.bin's chunks... which r1..r3 still reach, so that pack is
    // mostly garbage only in part; r0's new own bytes are a fresh pack.
    fs::write(trees[0].join("own.bin"), pseudo_random(1 << 20, 200)).unwrap();
    t.ok(
        "a",
        &["snapshot", trees[0].to_str().unwrap(), "--ref", "r0-new"],
    );
    t.ok("a", &["push", "team", "r0-new", "--as", "r0", "--force"]);
    let (refs, _) = t.ok("a", &["remote", "refs", "team"]);
    assert_eq!(refs.lines().count(), 4, "{refs}");
    t.ok("a", &["remote", "delete-ref", "team", "r1"]);
    t.ok("a", &["remote", "delete-ref", "team", "r3"]);
    let err = t.fails("a", &["remote", "delete-ref", "team", "r3"]);
    assert!(err.contains("no ref 'r3'"), "{err}");

    // --dry-run changes nothing.
    let before = remote_bytes(&t.remote);
    let packs_before = t.remote.list_packs().unwrap();
    let (out, _) = t.ok(
        "a",
        &[
            "gc",
            "--remote",
            "team",
            "--grace",
            "0",
            "--dry-run",
            "--json",
        ],
    );
    let dry = json(&out);
    assert_eq!(t.remote.list_packs().unwrap(), packs_before);
    assert!(dry["reclaimed_bytes"].as_u64().unwrap() > 2 << 20, "{dry}");

    let (out, _) = t.ok("a", &["gc", "--remote", "team", "--grace", "0", "--json"]);
    let r = json(&out);
    let (unreachable, reclaimed) = (
        r["unreachable_bytes"].as_u64().unwrap(),
        r["reclaimed_bytes"].as_u64().unwrap(),
    );
    assert_eq!(r["refs"], 2, "{r}");
    assert!(reclaimed * 10 >= unreachable * 9, "{r}");
    assert_eq!(
        reclaimed,
        dry["reclaimed_bytes"].as_u64().unwrap(),
        "{r} {dry}"
    );
    assert!(r["packs_deleted"].as_u64().unwrap() >= 2, "{r}");
    // r0's first chunk pack holds its old own.bin among live chunks.
    assert!(r["packs_repacked"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["bytes_copied"].as_u64().unwrap() > 1 << 20, "{r}");
    assert!(
        r["records_deleted"].as_u64().unwrap() >= 3,
        "r0's first, r1, r3: {r}"
    );
    let after = remote_bytes(&t.remote);
    assert!(
        before - after >= reclaimed * 9 / 10 && after < before - (3 << 20),
        "{before} -> {after}: {r}"
    );
    // A second gc finds (almost) nothing.
    let (out, _) = t.ok("a", &["gc", "--remote", "team", "--grace", "0", "--json"]);
    assert_eq!(json(&out)["packs_deleted"], 0, "{out}");

    // What the kept refs reach is all there: pulled into an empty store.
    t.add_remote("b");
    for (r, dir) in [("r0", &trees[0]), ("r2", &trees[2])] {
        t.ok("b", &["pull", "team", r]);
        let restored = t.env.path(&format!("restored-{r}"));
        t.ok("b", &["restore", r, restored.to_str().unwrap()]);
        assert_same_tree(dir, &restored, false);
    }
    t.ok("b", &["verify"]);
    let err = t.fails("b", &["pull", "team", "r1"]);
    assert!(err.contains("no ref 'r1'"), "{err}");
}

/// The grace period spares what is young; a lock held by a push (or by a
/// gc) stops the other; a lock left unrefreshed for 30 minutes is ignored.
fn remote_gc_spares_the_young_and_the_locked(kind: Kind) {
    let t = setup(kind);
    t.pushed_from_a();
    // A killed push's pack (no index) and a deleted ref's objects, all young.
    let junk = format!("packs/d-{}.pack", "5".repeat(64));
    t.remote.put_bytes(&junk, b"half a pack").unwrap();
    t.ok("a", &["remote", "delete-ref", "team", "s1"]);
    let before = remote_bytes(&t.remote);
    let (out, _) = t.ok("a", &["gc", "--remote", "team", "--json"]);
    let r = json(&out);
    assert_eq!(r["reclaimed_bytes"], 0, "default grace 1h: {r}");
    assert!(r["young"].as_u64().unwrap() >= 3, "{r}");
    assert_eq!(remote_bytes(&t.remote), before);

    // Someone's gc holds the lock: a push refuses, and changes nothing.
    let lock = "locks/op-00000000000000aa.json";
    t.remote
        .put_bytes(
            lock,
            br#"{"kind":"gc","host":"elsewhere","pid":7,"time":0}"#,
        )
        .unwrap();
    let err = t.fails("a", &["push", "team", "s1"]);
    assert!(
        err.contains("busy") && err.contains("a gc by elsewhere (pid 7)"),
        "{err}"
    );
    assert_eq!(t.remote_ref("s1"), None);
    let err = t.fails("a", &["gc", "--remote", "team", "--grace", "0"]);
    assert!(err.contains("busy"), "{err}");
    // A push's lock: gc refuses, another push goes on.
    t.remote
        .put_bytes(
            lock,
            br#"{"kind":"push","host":"elsewhere","pid":8,"time":0}"#,
        )
        .unwrap();
    let err = t.fails("a", &["gc", "--remote", "team", "--grace", "0"]);
    assert!(err.contains("a push by elsewhere (pid 8)"), "{err}");
    t.ok("a", &["push", "team", "s1"]);
    // Stale (a file:// remote lets the test age it): ignored.
    if let Kind::File = kind {
        let path = Path::new(t.url.strip_prefix("file://").unwrap()).join(lock);
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        t.ok("a", &["gc", "--remote", "team", "--grace", "0"]);
        assert!(
            t.remote.get_bytes(&junk).unwrap().is_none(),
            "the killed push's pack is gone"
        );
    }
    t.remote.delete(lock).unwrap();
    // Our own locks are gone once each command ends.
    let left: Vec<String> = t
        .remote
        .list_keys("locks")
        .unwrap()
        .into_iter()
        .filter(|k| k.contains("/op-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Pushes and gcs from two threads at once, the gc deleting what each
/// round's push reuses (the same objects, unreachable between rounds; a
/// push refused as busy is retried, a gc refused as busy runs again later):
/// every push that succeeded left a ref whose objects are all there.
fn remote_gc_and_pushes_race_and_lose_nothing(kind: Kind) {
    let t = setup(kind);
    let src = t.make_tree();
    t.snapshot("a", &src);
    t.add_remote("a");
    t.add_remote("b");
    let rounds = 10;
    let done = std::sync::atomic::AtomicBool::new(false);
    let (pushed, gcs) = std::thread::scope(|sc| {
        let pusher = sc.spawn(|| {
            // Stops the collector however this thread ends (a failed
            // assertion included), so a failure fails the test, never hangs it.
            struct Done<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            let _done = Done(&done);
            let mut ok = 0;
            for i in 0..rounds {
                // A push refused because a gc runs is retried until it goes through.
                for attempt in 0.. {
                    let out = t.run("a", &["push", "team", "s1", "--as", "keep"]);
                    if out.status.success() {
                        break;
                    }
                    let err = String::from_utf8_lossy(&out.stderr);
                    assert!(err.contains("busy") && attempt < 200, "push {i}: {err}");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                ok += 1;
                // Everything the ref reaches is there: pulled whole.
                let out = t.run("b", &["pull", "team", "keep", "--as", &format!("k{i}")]);
                assert!(
                    out.status.success(),
                    "pull {i}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                t.ok("a", &["remote", "delete-ref", "team", "keep"]);
                // b holds what it pulled; start b afresh so the next pull fetches.
                fs::remove_dir_all(t.store("b")).unwrap();
                t.add_remote("b");
            }
            ok
        });
        let collector = sc.spawn(|| {
            let mut ok = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let out = t.run("a", &["gc", "--remote", "team", "--grace", "0"]);
                if out.status.success() {
                    ok += 1;
                } else {
                    let err = String::from_utf8_lossy(&out.stderr);
                    assert!(err.contains("busy"), "gc: {err}");
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            ok
        });
        (pusher.join().unwrap(), collector.join().unwrap())
    });
    assert!(
        pushed == rounds && gcs > 0,
        "{pushed} pushes and {gcs} gcs got through"
    );
}

/// A history longer than the records pull fetches one by one (8): the rest
/// come from one listing, fetched at once; records of another ref on the
/// remote are fetched too but not published here.
fn a_long_history_pulls_whole_and_only_its_own(kind: Kind) {
    let t = setup(kind);
    let src = t.make_tree();
    t.add_remote("a");
    let mut ids = Vec::new();
    for i in 0..12 {
        fs::write(src.join("state/turn.json"), format!("{{\"turn\": {i}}}\n")).unwrap();
        ids.push(t.snapshot("a", &src));
    }
    t.ok("a", &["push", "team", "s1"]);
    let other = t.env.path("other");
    make_store(&other);
    for i in 0..3 {
        fs::write(other.join("x.json"), format!("{i}\n")).unwrap();
        t.ok("a", &["snapshot", other.to_str().unwrap(), "--ref", "o"]);
    }
    t.ok("a", &["push", "team", "o"]);

    t.add_remote("b");
    let (_, report) = t.ok("b", &["pull", "team", "s1"]);
    assert!(report.contains("12 records fetched"), "{report}");
    let (log, _) = t.ok("b", &["log", "s1"]);
    for id in &ids {
        assert!(log.contains(id.as_str()), "{id} missing from\n{log}");
    }
    let records = fs::read_dir(t.store("b").join("checkpoints"))
        .unwrap()
        .count();
    assert_eq!(records, 12, "only s1's history is published");
    t.ok("b", &["verify"]);
}

/// `remote add` takes `gs://` and `az://` URLs (checked, not contacted) and,
/// refusing a URL, names every scheme in one line; `remote add --help` says
/// where each backend's credentials come from.
#[test]
fn cloud_urls_are_accepted_and_bad_ones_name_every_scheme() {
    let env = Env::new();
    let store = env.path("s");
    env.ok_in(&store, &["remote", "add", "g", "gs://bucket/team/x"]);
    env.ok_in(&store, &["remote", "add", "z", "az://container/team"]);
    let (list, _) = env.ok_in(&store, &["remote", "list"]);
    assert_eq!(list, "g\tgs://bucket/team/x\nz\taz://container/team\n");
    for bad in ["gcs://bucket/x", "azure://c/x", "gs://", "az://c/../x"] {
        let err = env.fails_in(&store, &["remote", "add", "b", bad]);
        for s in [bad, "s3://", "gs://", "az://", "file:///"] {
            assert!(err.contains(s), "{s} not in: {err}");
        }
    }
    let (help, _) = env.ok_in(&store, &["remote", "add", "--help"]);
    for s in [
        "gs://BUCKET/PREFIX",
        "az://CONTAINER/PREFIX",
        "GOOGLE_",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_USE_EMULATOR",
        "compare-and-swap",
    ] {
        assert!(help.contains(s), "{s} not in --help: {help}");
    }
}

/// Issue 38: one bad file under a `file://` remote's `refs/` (a name no ref
/// has, a name that is not UTF-8, a name object_store cannot take, content
/// that is no checkpoint id) does not make `remote refs` fail: the good ref
/// is listed and each bad file gets one warning line naming it.
#[test]
fn remote_refs_lists_the_good_refs_and_warns_once_per_bad_file() {
    use std::os::unix::ffi::OsStrExt;
    let t = setup(RemoteKind::File);
    let src = t.env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), "f").unwrap();
    let id = t.snapshot("a", &src);
    t.add_remote("a");
    t.ok("a", &["push", "team", "s1"]);
    let refs = Path::new(t.url.strip_prefix("file://").unwrap()).join("refs");
    fs::write(refs.join("bad name"), format!("{id}\n")).unwrap();
    fs::write(
        refs.join(std::ffi::OsStr::from_bytes(b"latin\xe9")),
        format!("{id}\n"),
    )
    .unwrap();
    fs::write(refs.join("pct%zz"), format!("{id}\n")).unwrap();
    fs::write(refs.join("garbage"), "not an id \x1b[31m\n").unwrap();

    let (out, err) = t.ok("a", &["remote", "refs", "team"]);
    assert_eq!(out, format!("s1\t{id}\n"), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "one warning per bad file: {err}");
    for (bad, line) in [
        ("bad name", "'bad name'"),
        ("latin", "latin"),
        ("pct%zz", "pct%zz"),
        ("garbage", "team/garbage"),
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("storefs: warning: skipping") && l.contains(line)),
            "no warning naming {bad}: {err}"
        );
    }
    assert!(!err.contains('\x1b'), "content is shown escaped: {err}");
    let (json, _) = t.ok("a", &["remote", "refs", "team", "--json"]);
    let list: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["name"], "s1");
}
