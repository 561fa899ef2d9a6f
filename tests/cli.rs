//! The command line without mounts: every verb's help, exit codes, one-line errors
//! that name the thing, and nothing written to the store on bad input.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::{Env, walk};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn make_tree(env: &Env, name: &str) -> std::path::PathBuf {
    let d = env.path(name);
    fs::create_dir_all(d.join("sub")).unwrap();
    fs::write(d.join("a.txt"), b"alpha\n").unwrap();
    fs::write(d.join("sub/b.txt"), b"beta\n").unwrap();
    d
}

#[test]
fn every_verb_has_help_and_usage_errors_exit_2() {
    let env = Env::new();
    for verb in [
        "init", "snapshot", "refs", "log", "ls", "cat", "diff", "restore", "mount", "umount",
        "status",
    ] {
        let o = env.run([verb, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{verb} --help");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("Usage: storefs"),
            "{verb} help text"
        );
    }
    assert_eq!(env.run(["no-such-verb"]).status.code(), Some(2));
    assert_eq!(env.run(["cat", "only-one-arg"]).status.code(), Some(2));
    assert!(!env.store.exists(), "help and usage errors create no store");
}

#[test]
fn bad_input_is_one_clear_line_and_changes_nothing() {
    let env = Env::new();
    // Snapshot of a missing path: error names it; no store is created.
    let o = env.run(["snapshot", "/definitely/not/here"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/definitely/not/here"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1, "one line: {}", stderr(&o));
    assert!(!env.store.exists());

    let tree = make_tree(&env, "t");
    let o = env.run([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "bad/name".as_ref(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad ref name"), "{}", stderr(&o));
    assert!(
        !env.store.exists(),
        "a bad ref name is refused before anything is written"
    );

    env.ok([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let before = walk(&env.store);

    let o = env.run(["ls", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("'nope'") && stderr(&o).contains("storefs refs"),
        "{}",
        stderr(&o)
    );

    let o = env.run(["cat", "s1", "missing.txt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("missing.txt"), "{}", stderr(&o));

    let o = env.run(["cat", "s1", "sub"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));

    // Mountpoint not empty.
    let full = env.path("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("x"), b"x").unwrap();
    let o = env.run(["mount".as_ref(), "s1".as_ref(), full.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));

    // Mountpoint inside the store.
    let o = env.run([
        "mount".as_ref(),
        "s1".as_ref(),
        env.store.join("inside").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("overlaps the store"), "{}", stderr(&o));

    let o = env.run(["umount".as_ref(), env.path("t").as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not mounted"), "{}", stderr(&o));

    assert_eq!(
        walk(&env.store),
        before,
        "failed commands changed nothing in the store"
    );

    // A directory that is not a store.
    let notstore = env.path("t"); // has files, no marker
    let o = env.run_with_store(&notstore, ["refs"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is not a storefs store"),
        "{}",
        stderr(&o)
    );
    let o = env.run_with_store(&notstore, [OsStr::new("snapshot"), tree.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        !notstore.join("objects").exists(),
        "nothing written into a non-store"
    );
}

/// Without /dev/fuse (here: a private mount namespace with an empty /dev),
/// `mount` says what is missing and how to get it, in one line, and leaves no
/// mountpoint behind.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mount_without_dev_fuse_names_the_device_and_the_fix() {
    let env = Env::new();
    let tree = make_tree(&env, "t");
    env.ok([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let mp = env.path("mp");
    let o = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs none /dev && exec "$0" --store "$1" mount s1 "$2""#)
        .arg(env!("CARGO_BIN_EXE_storefs"))
        .arg(&env.store)
        .arg(&mp)
        .env_remove("STOREFS_STORE")
        .output()
        .expect("unshare (util-linux) runs");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/fuse is missing") && err.contains("modprobe fuse"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        !mp.exists(),
        "a mount that never happened leaves no mountpoint"
    );
}

#[test]
fn ambiguous_prefix_is_refused_and_unique_prefix_works() {
    let env = Env::new();
    let tree = make_tree(&env, "t");
    let first = env.ok(["snapshot".as_ref(), tree.as_os_str()]);
    let first = first.trim().to_string();
    // Checkpoints of the same tree written by the library (one per time),
    // until two ids share their first 4 hex digits (birthday bound: a few
    // hundred).
    let store = storefs::store::Store::open(&env.store).unwrap();
    let root = store
        .read_checkpoint(&store.resolve(&first).unwrap())
        .unwrap()
        .root;
    let mut seen = std::collections::HashMap::new();
    let mut shared = None;
    for t in 0..100_000i64 {
        let id = store
            .write_checkpoint(&storefs::store::Checkpoint {
                version: 1,
                root,
                parents: vec![],
                origin: None,
                time_ns: t,
                message: "n".into(),
                source: storefs::store::Source {
                    kind: "snapshot".into(),
                    ..Default::default()
                },
            })
            .unwrap()
            .to_hex();
        if seen.insert(id[..4].to_string(), id.clone()).is_some() {
            shared = Some(id[..4].to_string());
            break;
        }
    }
    let shared = shared.expect("two ids share 4 hex digits");
    let o = env.run(["ls", &shared]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("ambiguous"), "{}", stderr(&o));
    // Fewer than 4 digits never match an id: `ls f` is no checkpoint.
    let o = env.run(["ls", &first[..3]]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("at least 4 hex digits"),
        "{}",
        stderr(&o)
    );
    let unique = &first[..20];
    assert!(env.ok(["ls", unique]).contains("a.txt"));
}

#[test]
fn refs_log_ls_cat_diff_restore() {
    let env = Env::new();
    let tree = make_tree(&env, "t");
    let a = env.ok([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
        "-m".as_ref(),
        "first".as_ref(),
    ]);
    fs::write(tree.join("a.txt"), b"alpha two\n").unwrap();
    fs::remove_file(tree.join("sub/b.txt")).unwrap();
    fs::write(tree.join("c.txt"), b"gamma\n").unwrap();
    fs::set_permissions(tree.join("sub"), fs::Permissions::from_mode(0o700)).unwrap();
    let b = env.ok([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
        "-m".as_ref(),
        "second".as_ref(),
    ]);
    let (a, b) = (a.trim(), b.trim());

    assert_eq!(env.ok(["refs"]), format!("s1\t{b}\n"));
    let log = env.ok(["log", "s1"]);
    let pa = log.find(a).unwrap();
    let pb = log.find(b).unwrap();
    assert!(pb < pa, "newest first: {log}");
    assert!(
        log.contains("second") && log.contains("first") && log.contains(&format!("parent:  {a}"))
    );

    let ls = env.ok(["ls", "s1"]);
    assert!(
        ls.contains("a.txt") && ls.contains("c.txt") && ls.contains("sub/"),
        "{ls}"
    );
    assert_eq!(env.ok(["cat", a, "sub/b.txt"]), "beta\n");
    assert_eq!(env.ok(["cat", "s1", "/a.txt"]), "alpha two\n");

    let diff = env.ok(["diff", a, b]);
    assert!(diff.contains("M a.txt (content"), "{diff}");
    assert!(diff.contains("D sub/b.txt"), "{diff}");
    assert!(diff.contains("A c.txt"), "{diff}");
    assert!(
        diff.lines()
            .any(|l| l.starts_with("M sub ") && l.contains("mode")),
        "{diff}"
    );

    let dest = env.path("restored");
    env.ok(["restore".as_ref(), a.as_ref(), dest.as_os_str()]);
    assert_eq!(fs::read(dest.join("sub/b.txt")).unwrap(), b"beta\n");
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"alpha\n");
    let o = env.run(["restore".as_ref(), a.as_ref(), dest.as_os_str()]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "restore into a non-empty directory is refused"
    );
}

/// Issue 43, finding 9: with STOREFS_STORE (or STOREFS_TRANSPORT) set, usage
/// lines do not show `--store <DIR>` (`--transport <HOW>`) as if typed, and
/// the store is still taken from it; import's --origin says what it is.
#[test]
fn usage_lines_do_not_show_what_the_environment_gives() {
    let env = Env::new();
    let src = make_tree(&env, "t");
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let run = |args: &[&str], var: &str, value: &OsStr| {
        std::process::Command::new(env!("CARGO_BIN_EXE_storefs"))
            .args(args)
            .env_remove("STOREFS_STORE")
            .env_remove("STOREFS_TRANSPORT")
            .env(var, value)
            .output()
            .unwrap()
    };
    let o = run(&["ls"], "STOREFS_STORE", env.store.as_os_str());
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("Usage: storefs ls <CHECKPOINT> [PATH]"),
        "{err}"
    );
    assert!(!err.contains("--store"), "{err}");
    let o = run(&["mount"], "STOREFS_TRANSPORT", OsStr::new("classic"));
    let err = stderr(&o);
    assert!(err.contains("Usage: storefs mount"), "{err}");
    assert!(!err.contains("--transport"), "{err}");
    // Still read.
    let o = run(&["refs"], "STOREFS_STORE", env.store.as_os_str());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("s1\t"));
    let store = env.store.to_str().unwrap();
    let o = run(
        &["--store", store, "mount", "s1", "/nonexistent-x/y"],
        "STOREFS_TRANSPORT",
        OsStr::new("carrier-pigeon"),
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("STOREFS_TRANSPORT=carrier-pigeon"),
        "{}",
        stderr(&o)
    );

    let help = env.ok(["import", "--help"]);
    assert!(!help.contains("(default mountpoint)"), "{help}");
    assert!(help.contains("storefs mount"), "{help}");
}
