//! A path that vanishes while a snapshot runs (issue 43, finding 10): the
//! snapshot is still published without it, the path is named on stderr and
//! the exit status is 3. Deterministic: debug builds remove the path named by
//! `STOREFS_TEST_VANISH` just before the snapshot opens (a file) or lists (a
//! directory) it, after its directory's listing named it.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use common::Env;

/// `storefs snapshot DIR --ref r` with `vanish` removed at the last moment.
fn snapshot_vanishing(env: &Env, dir: &Path, vanish: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(["snapshot", "--ref", "r"])
        .arg(dir)
        .env_remove("STOREFS_STORE")
        .env("STOREFS_TEST_VANISH", vanish)
        .output()
        .unwrap()
}

fn tree(env: &Env) -> std::path::PathBuf {
    let d = env.path("tree");
    fs::create_dir_all(d.join("sub/deeper")).unwrap();
    fs::write(d.join("keep.txt"), b"kept\n").unwrap();
    fs::write(d.join("tmp.XXXX"), b"a temp file renamed away\n").unwrap();
    fs::write(d.join("sub/b.txt"), b"beta\n").unwrap();
    fs::write(d.join("sub/deeper/c.txt"), b"gamma\n").unwrap();
    d
}

fn check_published(env: &Env, out: &Output, gone: &Path, listing: &[&str]) {
    let err = common::stderr(out);
    assert_eq!(out.status.code(), Some(3), "exit 3 expected: {err}");
    let id = String::from_utf8(out.stdout.clone()).unwrap();
    let id = id.trim();
    assert_eq!(id.len(), 64, "the checkpoint id on stdout: {id:?} ({err})");
    assert_eq!(env.ok(["refs"]).trim(), format!("r\t{id}"), "the ref moved");
    let warning = format!(
        "storefs: warning: {}: vanished while the snapshot ran",
        gone.display()
    );
    assert!(err.contains(&warning), "names the path: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    // The checkpoint holds the tree without the path, and the tree as it
    // is now (the hook removed the path): restored, the two are the same.
    let dest = env.path(&format!("restored-{}", &id[..12]));
    env.ok([OsStr::new("restore"), OsStr::new(id), dest.as_os_str()]);
    let names: Vec<String> = common::walk(&dest)
        .iter()
        .map(|p| p.to_str().unwrap().to_string())
        .collect();
    assert_eq!(names, listing);
}

#[test]
fn a_file_that_vanishes_before_it_is_read_is_left_out_with_exit_3() {
    let env = Env::new();
    let dir = tree(&env);
    let gone = dir.join("tmp.XXXX");
    let out = snapshot_vanishing(&env, &dir, &gone);
    assert!(!gone.exists(), "the hook removed it");
    check_published(
        &env,
        &out,
        &gone,
        &[
            "keep.txt",
            "sub",
            "sub/b.txt",
            "sub/deeper",
            "sub/deeper/c.txt",
        ],
    );
    assert_eq!(env.ok(["cat", "r", "keep.txt"]), "kept\n");
    // The next snapshot of the same tree (parent: that one) is whole again.
    let out = env.run(["snapshot", "--ref", "r", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
}

#[test]
fn a_directory_that_vanishes_before_it_is_listed_is_left_out_with_exit_3() {
    let env = Env::new();
    let dir = tree(&env);
    let gone = dir.join("sub/deeper");
    let out = snapshot_vanishing(&env, &dir, &gone);
    assert!(!gone.exists(), "the hook removed it");
    check_published(
        &env,
        &out,
        &gone,
        &["keep.txt", "sub", "sub/b.txt", "tmp.XXXX"],
    );
    assert_eq!(env.ok(["cat", "r", "sub/b.txt"]), "beta\n");
}

#[test]
fn snapshot_help_documents_exit_3() {
    let env = Env::new();
    let help = env.ok(["snapshot", "--help"]);
    assert!(help.contains("exit status is 3"), "{help}");
}
