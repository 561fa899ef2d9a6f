//! Provenance end to end (issue 42): processes with different command names
//! change a mounted fork; `storefs ops` names each change's process before
//! and after commit, through the daemon and offline, and the browse mount
//! shows the same log as `checkpoints/<id>.ops.jsonl`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, MountGuard, stderr};
use serde_json::Value;

/// A copy of /bin/sh named `name`: its shell builtins (`echo`, `>`, `>>`)
/// change files as a process whose command (`/proc/PID/comm`) is `name`.
fn shell_named(env: &Env, name: &str) -> PathBuf {
    let dir = env.path("bin");
    fs::create_dir_all(&dir).unwrap();
    let to = dir.join(name);
    fs::copy(fs::canonicalize("/bin/sh").unwrap(), &to).unwrap();
    to
}

/// Run `script` with shell `sh` in `dir`; its pid. The copy of the shell
/// was just written: a child another test thread forked meanwhile holds its
/// write descriptor until that child's `exec`, and the kernel refuses to run
/// a file open for writing (`ETXTBSY`), so the spawn is tried again then,
/// for up to a second.
fn run_in(sh: &Path, dir: &Path, script: &str) -> u32 {
    let mut tries = 0;
    let mut child = loop {
        match Command::new(sh)
            .arg("-c")
            .arg(script)
            .current_dir(dir)
            .spawn()
        {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => break r.unwrap(),
        }
    };
    let pid = child.id();
    assert!(child.wait().unwrap().success(), "{script}");
    pid
}

/// A fork `f` of a checkpoint of {shared.txt, keep.txt, sub/}.
fn setup(env: &Env) {
    let src = env.path("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("shared.txt"), b"base\n").unwrap();
    fs::write(src.join("keep.txt"), b"keep\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    env.ok(["fork", "base", "--name", "f"]);
}

/// `storefs ops ARGS --json`: each line parsed.
fn ops_json(env: &Env, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["ops"];
    all.extend_from_slice(args);
    all.push("--json");
    env.ok(&all)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// (op, path, new path, command, pid) of each line.
fn rows(lines: &[Value]) -> Vec<(String, String, String, String, u64)> {
    lines
        .iter()
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or("").to_string();
            (
                s("op"),
                s("path"),
                s("new_path"),
                s("command"),
                l["pid"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn mount_browse(env: &Env, mp: &Path) -> MountGuard {
    let out = env.run(["mount".as_ref(), "--browse".as_ref(), mp.as_os_str()]);
    let guard = env.guard_for("(browse)");
    assert!(out.status.success(), "mount --browse: {}", stderr(&out));
    guard
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn ops_names_each_changes_process_before_and_after_commit_and_on_the_browse_mount() {
    let env = Env::new();
    setup(&env);
    let (alpha, beta) = (
        shell_named(&env, "alpha-agent"),
        shell_named(&env, "beta-agent"),
    );
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("f", Some(&mp));
    let a = run_in(
        &alpha,
        &mp,
        "echo one > a.txt; echo a >> shared.txt; echo a2 >> shared.txt",
    );
    let b = run_in(&beta, &mp, "echo b >> shared.txt; echo two > sub/b.txt");
    // A process of another name renames alpha's file.
    let mv = Command::new("mv")
        .args(["a.txt", "sub/moved.txt"])
        .current_dir(&mp)
        .status()
        .unwrap();
    assert!(mv.success());
    let (a, b) = (u64::from(a), u64::from(b));
    let s = String::from;
    let want = [
        (s("create"), s("a.txt"), s(""), s("alpha-agent"), a),
        (s("write"), s("a.txt"), s(""), s("alpha-agent"), a),
        // Two appends of one process to one file: one entry.
        (s("write"), s("shared.txt"), s(""), s("alpha-agent"), a),
        (s("write"), s("shared.txt"), s(""), s("beta-agent"), b),
        (s("create"), s("sub/b.txt"), s(""), s("beta-agent"), b),
        (s("write"), s("sub/b.txt"), s(""), s("beta-agent"), b),
    ];
    // Mounted, not committed: asked of the daemon.
    let pending = ops_json(&env, &["f"]);
    let got = rows(&pending);
    assert_eq!(got[..6], want[..], "{got:#?}");
    assert_eq!(
        (
            got[6].0.as_str(),
            got[6].1.as_str(),
            got[6].2.as_str(),
            got[6].3.as_str()
        ),
        ("rename", "a.txt", "sub/moved.txt", "mv")
    );
    assert_eq!(got.len(), 7, "{got:#?}");
    assert!(pending.iter().all(|l| l["checkpoint"].is_null()));
    assert_eq!(
        (pending[2]["count"].as_u64(), pending[2]["bytes"].as_u64()),
        (Some(2), Some(5))
    );
    // Filters.
    let by_beta = rows(&ops_json(&env, &["f", "--command", "beta-agent"]));
    assert_eq!(by_beta, want[3..6].to_vec());
    let by_pid = rows(&ops_json(&env, &["f", "--pid", &a.to_string()]));
    assert_eq!(by_pid, want[..3].to_vec());
    let under_sub = rows(&ops_json(&env, &["f", "--path", "sub"]));
    assert_eq!(under_sub.len(), 3, "{under_sub:#?}"); // b.txt twice, the rename into sub/
    // The human form names the processes too.
    let human = env.ok(["ops", "f"]);
    assert!(human.contains(&format!("pid {a} alpha-agent")), "{human}");
    assert!(human.contains("a.txt -> sub/moved.txt"), "{human}");

    // Committed while mounted: the same operations, now the commit's.
    let c1 = env.ok(["commit", "f"]).trim().to_string();
    let committed = ops_json(&env, &["f"]);
    assert_eq!(rows(&committed), got);
    assert!(committed.iter().all(|l| l["checkpoint"] == c1.as_str()));
    assert_eq!(rows(&ops_json(&env, &[&c1])), got);
    // A change after the commit is not committed, and its process is named.
    run_in(&beta, &mp, "echo again >> keep.txt");
    let after = ops_json(&env, &["f"]);
    let last = after.last().unwrap();
    assert_eq!(
        (last["op"].as_str(), last["path"].as_str()),
        (Some("write"), Some("keep.txt"))
    );
    assert_eq!(
        (last["command"].as_str(), last["checkpoint"].as_null()),
        (Some("beta-agent"), Some(()))
    );
    m.unmount(); // commits the rest

    // Unmounted: the head's commit has it.
    let all = ops_json(&env, &["f"]);
    assert_eq!(all.len(), got.len() + 1);
    let c2 = all.last().unwrap()["checkpoint"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(c2, c1);
    // gc keeps the logs (no grace period: only reachability keeps them).
    env.ok(["gc", "--grace", "0"]);
    assert_eq!(ops_json(&env, &["f"]), all);

    // The browse mount shows each commit's log, line for line.
    let bmp = env.path("browse");
    let b = mount_browse(&env, &bmp);
    let file = bmp.join(format!("checkpoints/{c1}.ops.jsonl"));
    let shown: Vec<Value> = fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows(&shown), got);
    let listed: Vec<String> = fs::read_dir(bmp.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".ops.jsonl"))
        .collect();
    assert_eq!(
        listed.len(),
        2,
        "only the two commits have a log: {listed:?}"
    );
    b.unmount();

    // A snapshot has no operation log, and says so.
    let base = env.ok(["ops", "base"]);
    assert!(base.contains("no operation log"), "{base}");
    assert!(env.ok(["ops", "base", "--json"]).is_empty());
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn writeback_without_a_requester_goes_to_the_files_last_writer() {
    let env = Env::new();
    setup(&env);
    let alpha = shell_named(&env, "alpha-agent");
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let out = env.run([
        "mount".as_ref(),
        "f".as_ref(),
        mp.as_os_str(),
        "--writeback-cache".as_ref(),
    ]);
    let m = env.guard_for("f");
    assert!(out.status.success(), "{}", stderr(&out));
    // The data reaches the daemon as writeback (on close), without a requester.
    let a = u64::from(run_in(&alpha, &mp, "echo one > a.txt; echo more >> a.txt"));
    let got = ops_json(&env, &["f", "--path", "a.txt"]);
    let writes: Vec<&Value> = got.iter().filter(|l| l["op"] == "write").collect();
    assert!(!writes.is_empty(), "{got:#?}");
    for w in &writes {
        assert_eq!(
            (w["command"].as_str(), w["pid"].as_u64()),
            (Some("alpha-agent"), Some(a)),
            "{got:#?}"
        );
    }
    m.unmount();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn revert_dry_run_lists_their_paths_and_a_later_change_by_another_as_a_conflict() {
    let env = Env::new();
    setup(&env);
    let (alpha, beta) = (
        shell_named(&env, "alpha-agent"),
        shell_named(&env, "beta-agent"),
    );
    let mp = env.path("mnt");
    fs::create_dir(&mp).unwrap();
    let m = env.mount("f", Some(&mp));
    run_in(&alpha, &mp, "echo new > a.txt; echo a >> shared.txt");
    env.ok(["commit", "f"]);
    run_in(&alpha, &mp, "echo changed > keep.txt");
    let b = run_in(&beta, &mp, "echo b >> shared.txt");
    // Alpha's paths, across a commit and what is not committed, through the
    // daemon: a.txt was not in the fork point, keep.txt was; beta appended to
    // shared.txt after alpha did.
    let out = env.run(["revert", "f", "--command", "alpha-agent", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8(out.stdout.clone()).unwrap(),
        format!(
            "remove\ta.txt\nconflict\tshared.txt\twrite shared.txt by pid {b} (beta-agent)\nrestore\tkeep.txt\n"
        )
    );
    assert!(stderr(&out).contains("1 path(s)"), "{}", stderr(&out));
    // Beta's one change came after alpha's: nothing to conflict with.
    let out = env.ok(["revert", "f", "--pid", &b.to_string(), "--dry-run"]);
    assert_eq!(out, "restore\tshared.txt\n");
    // A dry run changed nothing.
    assert_eq!(fs::read(mp.join("keep.txt")).unwrap(), b"changed\n");
    assert!(mp.join("a.txt").exists());
    m.unmount();
}

/// A copy of `/bin/TOOL` named `name` (in a directory of its own): run, it
/// is a process whose command is `name`.
fn tool_named(env: &Env, tool: &str, name: &str) -> PathBuf {
    let dir = env.path(&format!("bin-{tool}"));
    fs::create_dir_all(&dir).unwrap();
    let to = dir.join(name);
    let from = fs::canonicalize(Path::new("/bin").join(tool)).unwrap();
    fs::copy(from, &to).unwrap();
    to
}

/// Run `exe ARGS` in `dir`; its pid.
fn run_args(exe: &Path, dir: &Path, args: &[&str]) -> u32 {
    let mut child = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success(), "{exe:?} {args:?}");
    pid
}

/// Fork `f` of {shared.txt, keep.txt, old.txt, sub/, gone/{inner.txt,
/// deep/f.txt}}, mounted at TMP/mnt (the guard); processes named alpha-agent write, append,
/// overwrite (then a commit), remove a directory tree, rename a file into
/// sub/, make a directory and a file in it; then processes named beta-agent
/// append to alpha's shared.txt and create sub/b.txt. Returns beta's pid.
fn two_agents_change(env: &Env) -> (MountGuard, u32) {
    let src = env.path("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::create_dir_all(src.join("gone/deep")).unwrap();
    fs::write(src.join("shared.txt"), b"base\n").unwrap();
    fs::write(src.join("keep.txt"), b"keep\n").unwrap();
    fs::write(src.join("old.txt"), b"old\n").unwrap();
    fs::write(src.join("gone/inner.txt"), b"inner\n").unwrap();
    fs::write(src.join("gone/deep/f.txt"), b"deep\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    env.ok(["fork", "base", "--name", "f"]);
    let mp = &env.path("mnt");
    fs::create_dir(mp).unwrap();
    let m = env.mount("f", Some(mp));
    let alpha = |tool| tool_named(env, tool, "alpha-agent");
    let beta = shell_named(env, "beta-agent");
    run_in(
        &alpha("sh"),
        mp,
        "echo new > a.txt; echo a >> shared.txt; echo changed > keep.txt",
    );
    env.ok(["commit", "f"]);
    run_args(&alpha("rm"), mp, &["-r", "gone"]);
    run_args(&alpha("mv"), mp, &["old.txt", "sub/new.txt"]);
    run_args(&alpha("mkdir"), mp, &["made"]);
    run_in(&alpha("sh"), mp, "echo x > made/x");
    let b = run_in(&beta, mp, "echo b >> shared.txt; echo beta > sub/b.txt");
    (m, b)
}

/// `storefs revert f --command alpha-agent` after [`two_agents_change`]:
/// every path alpha changed is as the fork point has it (`storefs diff`
/// after a commit names only beta's changes and the directories whose
/// entries changed), beta's are left, shared.txt is a conflict; exit 1.
/// `mounted`: the fork stays mounted and the mount shows the result at once;
/// else it is unmounted (its changes committed) before the revert.
fn revert_restores_exactly_their_paths(mounted: bool) {
    let env = Env::new();
    let (m, b) = two_agents_change(&env);
    let mp = env.path("mnt");
    let m = match mounted {
        true => Some(m),
        false => {
            m.unmount();
            None
        }
    };
    let out = env.run(["revert", "f", "--command", "alpha-agent"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let mut got: Vec<String> = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    got.sort();
    let mut want = vec![
        "removed\ta.txt".to_string(),
        format!("conflict\tshared.txt\twrite shared.txt by pid {b} (beta-agent)"),
        "restored\tkeep.txt".into(),
        // Each path rm removed; the first one put back made gone/ again.
        "restored\tgone".into(),
        "restored\tgone/deep".into(),
        "restored\tgone/deep/f.txt".into(),
        "restored\tgone/inner.txt".into(),
        // Both paths of the rename.
        "restored\told.txt".into(),
        "removed\tsub/new.txt".into(),
        // made/ went first, and made/x with it.
        "removed\tmade".into(),
        "absent\tmade/x".into(),
    ];
    want.sort();
    assert_eq!(got, want);
    assert!(
        stderr(&out).contains("1 path(s) were left as they are"),
        "{}",
        stderr(&out)
    );
    if mounted {
        // Seen through the mount at once.
        assert_eq!(fs::read(mp.join("keep.txt")).unwrap(), b"keep\n");
        assert_eq!(fs::read(mp.join("old.txt")).unwrap(), b"old\n");
        assert_eq!(fs::read(mp.join("gone/deep/f.txt")).unwrap(), b"deep\n");
        assert_eq!(fs::read(mp.join("shared.txt")).unwrap(), b"base\na\nb\n");
        assert_eq!(fs::read(mp.join("sub/b.txt")).unwrap(), b"beta\n");
        for gone in ["a.txt", "sub/new.txt", "made"] {
            assert!(!mp.join(gone).exists(), "{gone}");
        }
    }
    env.ok(["commit", "f"]);
    // What differs from the fork point: beta's changes, and the mtimes of
    // the directories whose entries changed; alpha's paths are exact
    // (content, type, mode, owner, mtime).
    assert_eq!(
        env.ok(["diff", "base", "f"]),
        "M . (mtime)\nM shared.txt (content,mtime)\nM sub (mtime)\nA sub/b.txt\n"
    );
    if let Some(m) = m {
        m.unmount();
    }
}

#[test]
#[cfg_attr(
    not(storefs_root_tests),
    ignore = "needs root: it mounts, makes users or chowns (scripts/test.sh runs it)"
)]
fn revert_of_one_command_on_a_mounted_fork_restores_exactly_its_paths() {
    revert_restores_exactly_their_paths(true);
}

#[test]
#[cfg_attr(
    not(storefs_root_tests),
    ignore = "needs root: it mounts, makes users or chowns (scripts/test.sh runs it)"
)]
fn revert_of_one_command_on_an_unmounted_fork_restores_exactly_its_paths() {
    revert_restores_exactly_their_paths(false);
}

/// The checkpoint `target`'s operation log object (`source.ops`).
fn log_of(store: &Path, target: &str) -> storefs::store::ObjectId {
    let s = storefs::store::Store::open(store).unwrap();
    let id = s.resolve(target).unwrap();
    s.read_checkpoint(&id)
        .unwrap()
        .source
        .ops
        .expect("a commit keeps its log")
}

/// A checkout by the tool itself (the fork not mounted) is that process's
/// change; the commit's log goes with a push and a pull, survives the
/// remote's gc, and `verify` checks it.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn an_operation_log_travels_with_push_and_pull_and_verify_checks_it() {
    let env = Env::new();
    setup(&env);
    let other = env.path("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("shared.txt"), b"other\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        other.as_os_str(),
        "--ref".as_ref(),
        "other".as_ref(),
    ]);
    env.ok(["checkout", "other", "shared.txt", "--into", "f"]);
    let c1 = env.ok(["commit", "f"]).trim().to_string();
    let lines = ops_json(&env, &[&c1]);
    assert!(!lines.is_empty());
    for l in &lines {
        assert_eq!(l["path"], "shared.txt", "{lines:?}");
        assert_eq!(l["command"], "storefs", "{lines:?}");
        assert_ne!(l["pid"].as_u64(), Some(0), "{lines:?}");
    }

    // Push, then pull into another store: the same log.
    let remote = env.path("remote");
    let url = format!("file://{}", remote.display());
    env.ok(["remote", "add", "r", &url]);
    env.ok(["push", "r", "f"]);
    env.ok(["gc", "--remote", "r", "--grace", "0"]);
    let other_store = env.path("store2");
    env.ok_in(&other_store, &["remote", "add", "r", &url]);
    env.ok_in(&other_store, &["pull", "r", "f"]);
    let (pulled, _) = env.ok_in(&other_store, &["ops", &c1, "--json"]);
    let pulled: Vec<Value> = pulled
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(pulled, lines);
    let (report, _) = env.ok_in(&other_store, &["verify"]);
    assert!(!report.contains("operation log"), "{report}");

    // A damaged log: verify names it (and fails).
    let log = log_of(&other_store, &c1);
    common::damage(&other_store, &log);
    let out = env.run_with_store(&other_store, ["verify"]);
    assert!(!out.status.success());
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(said.contains("(operation log)"), "{said}");
}
