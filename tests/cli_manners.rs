//! What a user of a Unix tool expects of the command line (issue 15, items
//! 13, 15, 16): quiet exit on a closed pipe, commit records that count their
//! entries, `status` that follows a fork's head and lists dead mounts,
//! `umount NAME`, messages that name the thing the user typed.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{Env, stderr, walk};

/// A store with refs `s1` and `s2`: 5,000 files, each changed between the
/// two (so `diff`, like `ls`, prints more than a pipe buffer), and one 4 MiB
/// file.
fn big_store(env: &Env) -> std::path::PathBuf {
    let src = env.path("src");
    fs::create_dir_all(src.join("many")).unwrap();
    fs::write(src.join("big"), common::pseudo_random(4 << 20, 7)).unwrap();
    for (round, name) in ["s1", "s2"].iter().enumerate() {
        for i in 0..5000 {
            fs::write(
                src.join(format!("many/file-{i:05}")),
                format!("{round} {i}"),
            )
            .unwrap();
        }
        env.ok([
            "snapshot".as_ref(),
            src.as_os_str(),
            "--ref".as_ref(),
            name.as_ref(),
        ]);
    }
    src
}

/// A store with ref `s1`: one file, `f`.
fn small_store(env: &Env) {
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("f"), "f").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
}

/// `storefs ARGS | head -c 10`: storefs's exit status (as bash reports it)
/// and its stderr.
fn into_head(env: &Env, args: &str) -> (i32, String) {
    let err = env.path("stderr");
    let script = format!(
        "'{}' --store '{}' {args} 2>'{}' | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}",
        env!("CARGO_BIN_EXE_storefs"),
        env.store.display(),
        err.display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    (code, fs::read_to_string(err).unwrap())
}

#[test]
fn a_closed_pipe_ends_quietly_like_coreutils() {
    let env = Env::new();
    big_store(&env);
    for args in ["cat s1 big", "diff s1 s2", "ls s1 many"] {
        let (code, err) = into_head(&env, args);
        // Killed by SIGPIPE (bash: 128 + 13), as `cat big | head` is; no message.
        assert_eq!(
            code, 141,
            "storefs {args} | head: exit {code}, stderr {err:?}"
        );
        assert_eq!(err, "", "storefs {args} | head printed on stderr");
    }
}

#[test]
fn a_commit_record_counts_its_entries() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::write(src.join("a/b/f"), "f").unwrap();
    fs::write(src.join("top"), "top").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    env.ok(["fork", "s1", "--name", "w"]);
    let mp = env.path("mnt");
    let m = env.mount("w", Some(&mp));
    fs::write(mp.join("new"), "12345").unwrap();
    fs::create_dir(mp.join("d2")).unwrap();
    fs::write(mp.join("d2/x"), "x").unwrap();
    fs::remove_file(mp.join("top")).unwrap();
    let id = env.ok(["commit", "w"]).trim().to_string();
    // status follows the fork's head after a commit.
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert_eq!(
        status[0]["checkpoint"],
        id.as_str(),
        "status shows the head"
    );
    m.unmount();
    let rec: serde_json::Value = serde_json::from_slice(
        &fs::read(env.store.join(format!("checkpoints/{id}.json"))).unwrap(),
    )
    .unwrap();
    let restored = env.path("restored");
    env.ok(["restore".as_ref(), id.as_ref(), restored.as_os_str()]);
    // Root included (docs/format.md).
    let entries = walk(&restored).len() as u64 + 1;
    assert_eq!(rec["source"]["stats"]["entries"], entries, "{rec}");
    assert_eq!(rec["source"]["stats"]["bytes"], 1 + 5 + 1, "{rec}");
}

#[test]
fn status_lists_a_dead_mount_and_umount_by_name_clears_it() {
    let env = Env::new();
    small_store(&env);
    let mp = env.path("mnt");
    let guard = env.mount("s1", Some(&mp));
    common::kill_the_daemon(&env);
    let out = env.run(["status"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.ends_with(mp.to_str().unwrap()))
        .unwrap_or_else(|| panic!("status does not list the dead mount: {text}"));
    assert!(line.starts_with("dead"), "{line}");
    assert!(line.contains("s1"), "the target is named: {line}");
    assert!(stderr(&out).contains("storefs umount"), "the fix is named");
    let json: Vec<serde_json::Value> = serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    assert_eq!(json[0]["mode"], "dead");
    // umount by the ref's name.
    env.ok(["umount", "s1"]);
    drop(guard);
    assert!(!common_mounted(&mp), "still mounted");
    assert_eq!(env.ok(["status", "--json"]).trim(), "[]");
    // Nothing of the dead daemon is left: its record and its control socket.
    let left: Vec<_> = fs::read_dir(env.store.join("mounts"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left in mounts/: {left:?}");
}

#[test]
fn umount_takes_the_name_of_what_is_mounted() {
    let env = Env::new();
    small_store(&env);
    env.ok(["fork", "s1", "--name", "w"]);
    let (ro, rw) = (env.path("ro"), env.path("rw"));
    let g1 = env.mount("s1", Some(&ro));
    let g2 = env.mount("w", Some(&rw));
    fs::write(rw.join("g"), "g").unwrap();
    env.ok(["umount", "w"]);
    env.ok(["umount", "s1"]);
    drop((g1, g2));
    assert!(!common_mounted(&ro) && !common_mounted(&rw));
    // The fork was committed on the way out, as umount MOUNTPOINT does.
    assert_eq!(env.ok(["cat", "w", "g"]), "g");
    // A name nothing is mounted from still says what is wrong.
    let err = env.fails_in(&env.store, &["umount", "nothing"]);
    assert!(err.contains("is not mounted"), "{err}");
}

/// Issue 43, finding 3: a name nothing is mounted from is not read as a path
/// relative to the cwd, and an archive mount is unmounted by the target
/// `status` shows (its absolute path), also when it was mounted by a
/// relative one.
#[test]
fn umount_resolves_names_and_archive_targets_first() {
    let env = Env::new();
    small_store(&env);
    let cwd = env.path("cwd");
    fs::create_dir_all(&cwd).unwrap();
    let in_cwd = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_storefs"))
            .arg("--store")
            .arg(&env.store)
            .args(args)
            .current_dir(&cwd)
            .env_remove("STOREFS_STORE")
            .output()
            .unwrap()
    };
    let o = in_cwd(&["umount", "s1"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("storefs: error: s1 is not mounted"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");

    env.ok([
        "export".as_ref(),
        "s1".as_ref(),
        "-o".as_ref(),
        cwd.join("a.tar").as_os_str(),
    ]);
    let mp = env.path("am");
    let o = in_cwd(&["mount", "a.tar", mp.to_str().unwrap()]);
    let archive = cwd.join("a.tar").display().to_string();
    let mut guard = env.guard_for(&archive);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        guard.mountpoint.is_some(),
        "status shows the archive's absolute path"
    );
    // By the target status shows, from anywhere.
    env.ok(["umount", archive.as_str()]);
    assert!(!common_mounted(&mp));
    guard.mountpoint = None;
    // By the target as the status table shows it (shortened with a '…').
    let o = in_cwd(&["mount", "a.tar", mp.to_str().unwrap()]);
    let mut guard = env.guard_for(&archive);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = env.ok(["status"]);
    let shown = table
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .nth(3)
        .unwrap()
        .to_string();
    assert!(shown.contains('…'), "{table}");
    env.ok(["umount", shown.as_str()]);
    assert!(!common_mounted(&mp));
    guard.mountpoint = None;
    // By the relative path it was mounted with, from its cwd.
    let o = in_cwd(&["mount", "a.tar", mp.to_str().unwrap()]);
    let mut guard = env.guard_for(&archive);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = in_cwd(&["umount", "a.tar"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!common_mounted(&mp));
    guard.mountpoint = None;
}

#[test]
fn messages_name_what_the_user_typed() {
    let env = Env::new();
    small_store(&env);
    let err = env.fails_in(&env.store, &["mount", "missing.tar.zst"]);
    assert!(err.contains("missing.tar.zst: no such file"), "{err}");
    let err = env.fails_in(&env.store, &["fork", "s1", "--name", "a/b"]);
    assert!(err.contains("bad fork name 'a/b'"), "{err}");
    for verb in ["snapshot", "ls", "import", "export", "verify", "mount"] {
        let help = env.ok([verb, "--help"]);
        for line in help.lines() {
            assert!(
                line.matches("[default:").count() <= 1,
                "storefs {verb} --help repeats a default: {line}"
            );
        }
    }
    for verb in ["ls", "cat", "diff", "restore", "export", "log", "push"] {
        let help = env.ok([verb, "--help"]);
        assert!(
            help.contains("fork"),
            "storefs {verb} --help names fork names"
        );
    }
}

fn common_mounted(p: &Path) -> bool {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == p.to_str())
}

#[test]
fn messages_escape_control_characters_in_names() {
    let env = Env::new();
    small_store(&env);
    let err = env.fails_in(&env.store, &["cat", "s1", "a\x1b[2Jb\nc"]);
    assert!(!err.contains('\x1b'), "raw ESC on stderr: {err:?}");
    assert!(err.contains("a\\x1b[2Jb\\nc"), "{err:?}");
}

/// Issue 21: `generate` writes storefs(1), a page for every verb `--help`
/// lists (nested ones too), and the three shells' completions; `--version`
/// names the store format.
#[test]
fn generate_writes_a_man_page_per_verb_and_completions() {
    let env = Env::new();
    let man = env.path("man");
    let comp = env.path("comp");
    env.ok([
        "generate".as_ref(),
        "--man".as_ref(),
        man.as_os_str(),
        "--completions".as_ref(),
        comp.as_os_str(),
    ]);
    // The verbs as --help lists them: the lines under "Commands:".
    let help = env.ok(["--help"]);
    let verbs: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .collect();
    assert!(verbs.len() > 15 && verbs.contains(&"mount"), "{verbs:?}");
    for verb in verbs
        .iter()
        .map(|v| format!("storefs-{v}.1"))
        .chain(["storefs.1".into(), "storefs-remote-add.1".into()])
    {
        let page = fs::read_to_string(man.join(&verb)).unwrap_or_else(|e| panic!("{verb}: {e}"));
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{verb} is not roff"
        );
    }
    let overview = fs::read_to_string(man.join("storefs.1")).unwrap();
    for section in ["ENVIRONMENT", "FILES", "FSTAB", "STOREFS_STORE"] {
        assert!(overview.contains(section), "storefs(1) lacks {section}");
    }
    for f in ["storefs.bash", "_storefs", "storefs.fish"] {
        let text = fs::read_to_string(comp.join(f)).unwrap();
        assert!(text.contains("snapshot"), "{f} does not complete the verbs");
    }
    // Neither flag: a usage error (exit 2), nothing written.
    let out = env.run(["generate"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let version = env.ok(["--version"]);
    assert!(version.contains("(store format 1)"), "{version}");
}

/// Issue 21: `doctor` says, one line per check, what this machine has of
/// what mounts need; here (root, /dev/fuse) nothing is missing. Without
/// fusermount3 on PATH, root is told it does not need it.
#[test]
fn doctor_reports_one_line_per_check_with_fixes() {
    let env = Env::new();
    let out = env.ok(["doctor"]);
    let lines: Vec<&str> = out.lines().collect();
    // Five about mounting, one about fs.protected_symlinks (no store here).
    assert_eq!(lines.len(), 6, "{out}");
    for l in &lines {
        assert!(
            l.starts_with("ok ")
                || l.starts_with("note ")
                || l.starts_with("missing ")
                || l.starts_with("warning "),
            "{l}"
        );
        assert!(
            !l.starts_with("note ") || l.contains("; fix: "),
            "a note without a fix: {l}"
        );
    }
    assert!(
        lines[0].starts_with("ok") && lines[0].contains("/dev/fuse"),
        "{out}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("doctor")
        .env("PATH", "")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("note     fusermount3: not installed (root does not need it); fix: apt-get install fuse3"),
        "{text}"
    );
}
