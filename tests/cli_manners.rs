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
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
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
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
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
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
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
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
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
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn doctor_reports_one_line_per_check_with_fixes() {
    let env = Env::new();
    let out = env.ok(["doctor"]);
    let lines: Vec<&str> = out.lines().collect();
    // Five about mounting, one about user namespaces (`storefs run`), two
    // about fs.protected_symlinks and fs.protected_hardlinks (no store here).
    assert_eq!(lines.len(), 8, "{out}");
    assert!(
        lines.iter().any(|l| l.contains("fs.protected_hardlinks:")),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.contains("user namespaces:")),
        "{out}"
    );
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

/// `storefs --store STORE ARGS` run with its stdout and stderr on a
/// terminal: under `script` (util-linux), which gives it a pty; what the
/// terminal got. `None` (and a note) when `script` is not installed.
fn on_a_terminal(env: &Env, args: &[&[u8]], vars: &[(&str, &str)]) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    // The command line for script's shell, each word in single quotes.
    let quote = |w: &[u8]| {
        let mut q = b"'".to_vec();
        for &b in w {
            if b == b'\'' {
                q.extend_from_slice(b"'\\''");
            } else {
                q.push(b);
            }
        }
        q.push(b'\'');
        q
    };
    let mut line = quote(env!("CARGO_BIN_EXE_storefs").as_bytes());
    for w in [&b"--store"[..], env.store.as_os_str().as_bytes()]
        .into_iter()
        .chain(args.iter().copied())
    {
        line.push(b' ');
        line.extend(quote(w));
    }
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c"])
        .arg(std::ffi::OsStr::from_bytes(&line))
        .arg("/dev/null")
        .env_remove("NO_COLOR")
        .env_remove("STOREFS_STORE");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    match cmd.output() {
        Ok(out) => {
            assert!(out.status.success(), "under script: {}", stderr(&out));
            Some(out.stdout)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: `script` (util-linux) is not installed, so no terminal to test on");
            None
        }
        Err(e) => panic!("script: {e}"),
    }
}

/// Issue 38: names with control bytes (ESC sequences, a newline, a C1 byte,
/// a bidirectional override) are shown escaped by `ls`, `diff` and `log`
/// on a terminal, and written as they are to a pipe, so `diff A B | cut`
/// loses nothing.
#[test]
fn names_with_control_bytes_are_escaped_on_a_terminal_and_raw_in_a_pipe() {
    use std::os::unix::ffi::OsStrExt;
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("plain"), "p").unwrap();
    let snap = |r: &str, msg: &str| {
        env.ok([
            "snapshot".as_ref(),
            src.as_os_str(),
            "--ref".as_ref(),
            r.as_ref(),
            "-m".as_ref(),
            msg.as_ref(),
        ])
    };
    snap("s1", "first");
    let names: [&[u8]; 4] = [
        b"a\x1b[31mb",
        b"c\nd",
        b"e\x9bf",
        "rl\u{202e}txt".as_bytes(),
    ];
    for n in names {
        fs::write(src.join(std::ffi::OsStr::from_bytes(n)), "x").unwrap();
    }
    std::os::unix::fs::symlink("to\x1b]0;title\x07", src.join("link")).unwrap();
    snap("s2", "second\n\x1b]0;pwned\x07 line");

    let hostile = |out: &[u8]| {
        out.contains(&0x1b)
            || out.contains(&0x9b)
            || out.contains(&0x07)
            || out.windows(3).any(|w| w == "\u{202e}".as_bytes())
    };
    let Some(ls) = on_a_terminal(&env, &[b"ls", b"s2"], &[]) else {
        return;
    };
    let text = String::from_utf8_lossy(&ls);
    assert!(!hostile(&ls), "ls on a terminal: {text:?}");
    for shown in [
        "a\\x1b[31mb",
        "c\\nd",
        "e\\x9bf",
        "rl\\u{202e}txt",
        "link -> to\\x1b]0;title\\x07",
    ] {
        assert!(text.contains(shown), "{shown} not in {text:?}");
    }
    let diff = on_a_terminal(&env, &[b"diff", b"s1", b"s2"], &[]).unwrap();
    let text = String::from_utf8_lossy(&diff);
    assert!(!hostile(&diff), "diff on a terminal: {text:?}");
    assert!(
        text.contains("A a\\x1b[31mb") && text.contains("A c\\nd"),
        "{text:?}"
    );
    let log = on_a_terminal(&env, &[b"log", b"s2"], &[]).unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(!hostile(&log), "log on a terminal: {text:?}");
    assert!(text.contains("\\x1b]0;pwned\\x07 line"), "{text:?}");

    // Through a pipe, the bytes are the names.
    let out = env.run(["diff", "s1", "s2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for n in names {
        let mut line = b"A ".to_vec();
        line.extend_from_slice(n);
        line.push(b'\n');
        assert!(
            out.stdout.windows(line.len()).any(|w| w == line),
            "{:?} not raw in {:?}",
            String::from_utf8_lossy(n),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let out = env.run(["ls", "s2"]);
    assert!(out.stdout.windows(8).any(|w| w == b"a\x1b[31mb\n"));
}

/// Issue 38: colour codes only go to a terminal. A warning from the layers
/// below (a damaged multi-pack index) and an error, with stderr to a pipe,
/// carry no ESC byte; on a terminal the warning is coloured unless
/// `NO_COLOR` is set.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn no_colour_codes_on_a_redirected_stderr() {
    let env = Env::new();
    small_store(&env);
    let midx = env.store.join("objects/packs/index.midx");
    assert!(
        midx.parent().unwrap().is_dir(),
        "packs at {}",
        midx.display()
    );
    fs::write(&midx, b"not a multi-pack index").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(["cat", "s1", "f"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("multi-pack index"), "no warning: {err:?}");
    assert!(!err.contains('\x1b'), "colour codes in a pipe: {err:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(["ls", "no-such-ref"])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains('\x1b'), "colour codes in a pipe: {err:?}");

    fs::write(&midx, b"not a multi-pack index").unwrap();
    let Some(tty) = on_a_terminal(&env, &[b"cat", b"s1", b"f"], &[]) else {
        return;
    };
    assert!(
        tty.contains(&0x1b),
        "a terminal gets colour: {:?}",
        String::from_utf8_lossy(&tty)
    );
    fs::write(&midx, b"not a multi-pack index").unwrap();
    let tty = on_a_terminal(&env, &[b"cat", b"s1", b"f"], &[("NO_COLOR", "1")]).unwrap();
    let text = String::from_utf8_lossy(&tty);
    assert!(text.contains("multi-pack index"), "{text:?}");
    assert!(!tty.contains(&0x1b), "NO_COLOR: {text:?}");
}

/// Issue 38: a store the user may not read (root's, mode 0700) is
/// "permission denied", naming the store and what to do, not "not a
/// storefs store".
#[test]
fn a_store_the_user_cannot_read_is_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::new();
    small_store(&env);
    let Some(user) = common::TestUser::create("perm") else {
        return;
    };
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&env.store, fs::Permissions::from_mode(0o700)).unwrap();
    for args in [&["ls", "s1"][..], &["refs"], &["snapshot", "/tmp"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
            .arg("--store")
            .arg(&env.store)
            .args(args)
            .env("HOME", "/nonexistent")
            .env_remove("STOREFS_STORE")
            .uid(user.uid)
            .gid(user.gid)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("permission denied")
                && err.contains(&env.store.display().to_string())
                && err.contains("--store"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("not a storefs store"), "{args:?}: {err}");
    }
}
