//! `--json` on every verb that lists or reports (issue 21): each prints one
//! JSON document that parses and holds what the human output says, with the
//! schemas of docs/format.md ("Command output as JSON"). A non-UTF-8 name
//! comes with its exact bytes. Pushes to and pulls from a `file://` remote.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;

use common::{Env, stderr};
use serde_json::Value;

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn every_listing_and_report_has_json_that_parses() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(src.join("state")).unwrap();
    fs::write(src.join("state/lead.json"), b"{\"turn\": 1}\n").unwrap();
    fs::write(src.join("gone.txt"), b"bye\n").unwrap();
    std::os::unix::fs::symlink("state/lead.json", src.join("link")).unwrap();
    let odd = OsStr::from_bytes(b"caf\xe9.txt");
    fs::write(src.join(odd), b"latin-1 name\n").unwrap();
    // Large and incompressible: one chunk, corrupted below.
    fs::write(src.join("big.bin"), common::pseudo_random(200 << 10, 5)).unwrap();
    let s = src.to_str().unwrap();
    let id1 = env
        .ok(["snapshot", s, "--ref", "s1", "-m", "first"])
        .trim()
        .to_string();
    fs::write(src.join("state/lead.json"), b"{\"turn\": 2}\n").unwrap();
    fs::remove_file(src.join("gone.txt")).unwrap();
    fs::write(src.join("new.txt"), b"hi\n").unwrap();
    let id2 = env
        .ok(["snapshot", s, "--ref", "s1", "-m", "second"])
        .trim()
        .to_string();

    // refs
    let refs = parse(&env.ok(["refs", "--json"]));
    assert_eq!(refs, serde_json::json!([{"name": "s1", "checkpoint": id2}]));

    // log: newest first along first parents, with labels and the source.
    let log = parse(&env.ok(["log", "s1", "--json"]));
    let log = log.as_array().unwrap();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0]["id"], id2.as_str());
    assert_eq!(log[0]["labels"], serde_json::json!(["s1"]));
    assert_eq!(log[0]["parents"], serde_json::json!([id1]));
    assert_eq!(log[0]["message"], "second");
    assert_eq!(
        log[0]["origin"],
        fs::canonicalize(&src).unwrap().to_str().unwrap()
    );
    assert_eq!(log[0]["source"]["kind"], "snapshot");
    assert!(log[1]["time_ns"].as_i64().unwrap() <= log[0]["time_ns"].as_i64().unwrap());

    // ls: kinds, modes, a symlink's target, the exact bytes of a bad name.
    let ls = parse(&env.ok(["ls", &id1, "--json"]));
    let by_name = |n: &str| -> Value {
        ls.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no {n} in {ls}"))
    };
    assert_eq!(by_name("state")["kind"], "dir");
    assert_eq!(by_name("link")["kind"], "symlink");
    assert_eq!(by_name("link")["target"], "state/lead.json");
    assert_eq!(by_name("gone.txt")["size"], 4);
    assert_eq!(by_name("gone.txt")["kind"], "file");
    assert!(by_name("gone.txt")["mode"].as_str().unwrap().len() == 4);
    let bad = by_name("caf\u{fffd}.txt");
    assert_eq!(
        bad["name_bytes"],
        serde_json::json!(b"caf\xe9.txt".to_vec())
    );
    assert!(
        by_name("state")["name_bytes"].is_null(),
        "UTF-8 names carry no bytes"
    );

    // diff
    let diff = parse(&env.ok(["diff", &id1, &id2, "--json"]));
    let changes: Vec<(String, String)> = diff
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["change"].as_str().unwrap().into(),
                c["path"].as_str().unwrap().into(),
            )
        })
        .collect();
    for want in [
        ("D", "gone.txt"),
        ("A", "new.txt"),
        ("M", "state/lead.json"),
    ] {
        assert!(
            changes.contains(&(want.0.into(), want.1.into())),
            "{want:?} not in {changes:?}"
        );
    }

    // verify: a clean store.
    let v = parse(&env.ok(["verify", "--json"]));
    assert_eq!(v["checkpoints"], 2);
    assert!(v["objects"].as_u64().unwrap() > 0);
    assert_eq!(v["problems"], serde_json::json!([]));

    // gc --dry-run: nothing unreachable yet.
    let gc = parse(&env.ok(["gc", "--dry-run", "--json"]));
    assert_eq!(gc["dry_run"], true);
    assert_eq!(gc["checkpoints"], 2);
    assert_eq!(gc["removed"], serde_json::json!([]));

    // remote list, push, pull through a file:// remote.
    let rdir = env.path("remote");
    fs::create_dir_all(&rdir).unwrap();
    let url = format!("file://{}", rdir.display());
    env.ok(["remote", "add", "r", &url]);
    let list = parse(&env.ok(["remote", "list", "--json"]));
    assert_eq!(list, serde_json::json!([{"name": "r", "url": url}]));
    let push = parse(&env.ok(["push", "r", "s1", "--json"]));
    assert_eq!(push["ref"], "s1");
    assert_eq!(push["checkpoint"], id2.as_str());
    assert_eq!(push["checkpoints"], 2);
    assert!(push["objects_uploaded"].as_u64().unwrap() > 0);
    assert!(push["previous"].is_null(), "{push}");
    let pull = parse(&env.ok(["pull", "r", "s1", "--as", "copy", "--json"]));
    assert_eq!(pull["checkpoint"], id2.as_str());
    assert_eq!(pull["local_ref"], "copy");
    assert_eq!(pull["objects_fetched"], 0, "everything is here already");

    // verify --json reports problems and still fails.
    let chunk = common::chunk_of(&env.store, &id1, "big.bin");
    let store = storefs::store::Store::open(&env.store).unwrap();
    let mut bad = store.backend().read(&chunk).unwrap().unwrap();
    bad[..8].copy_from_slice(b"not zstd");
    store.replace_stored_object(&chunk, &bad).unwrap();
    drop(store);
    let out = env.run(["verify", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v = parse(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(v["corrupt"], 1, "{v}");
    let problem = &v["problems"][0];
    assert_eq!(problem["path"], "/big.bin", "{v}");
    assert!(!problem["what"].as_str().unwrap().is_empty(), "{v}");
}
