//! `storefs run` (issue 39): forks of one checkpoint run at their one origin
//! at the same time, each in a private mount namespace; the host sees no
//! mount and no directory. Real FUSE mounts: needs root (the ordinary-user
//! test adds a user and opens /dev/fuse to it for its duration, both undone
//! in guards). A build that is not root's ignores them (build.rs).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Env;

/// A `storefs run` started in the background; SIGKILLed and reaped when
/// dropped if it still runs (its daemons then unmount and exit: they die
/// with it), so a failing test leaves no process behind.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }

    fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn storefs(store: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_storefs"));
    c.arg("--store").arg(store).env_remove("STOREFS_STORE");
    c
}

fn start(store: &Path, args: &[&str]) -> Running {
    let child = storefs(store)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Running(Some(child))
}

fn run(store: &Path, args: &[&str]) -> Output {
    start(store, args).wait()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The mounts under `dir` in this (the host's) mount namespace.
fn mounts_under(dir: &Path) -> Vec<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| Path::new(mp).starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// A store with checkpoint `base` of a lead session at `ORIGIN`
/// (`TMP/srv/_lead_sessions/lead`), whose `_lead_sessions` is then moved
/// away: on the host the origin and its parent do not exist.
fn lead_store(env: &Env) -> PathBuf {
    let origin = env.path("srv/_lead_sessions/lead");
    fs::create_dir_all(origin.join("state")).unwrap();
    fs::write(origin.join("history.jsonl"), "{\"turn\":0}\n").unwrap();
    fs::write(origin.join("state/lead.json"), "{\"branch\":null}\n").unwrap();
    fs::write(origin.join("notes.md"), "the lead's notes\n").unwrap();
    env.ok(["init"]);
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
        "-m".as_ref(),
        "after-fleet".as_ref(),
    ]);
    fs::rename(env.path("srv/_lead_sessions"), env.path("moved")).unwrap();
    assert!(!env.path("srv/_lead_sessions").exists());
    origin
}

/// A shell command run as a branch: appends to the history, replaces
/// state/lead.json by temp + rename, then waits (at most 60 s) until all
/// `n` branches have reached the barrier directory `bar` (outside the mount).
fn branch_script(origin: &Path, bar: &Path, name: &str, n: usize) -> String {
    let o = origin.display();
    let b = bar.display();
    format!(
        "set -e; cd {o}; echo '{{\"turn\":1,\"branch\":\"{name}\"}}' >> history.jsonl; \
         printf '{{\"branch\":\"{name}\"}}\\n' > state/.lead.tmp; mv state/.lead.tmp state/lead.json; \
         touch {b}/{name}; i=0; while [ $(ls {b} | wc -l) -lt {n} ]; do \
         i=$((i+1)); [ $i -lt 600 ] || {{ echo 'barrier timeout' >&2; exit 9; }}; sleep 0.1; done; \
         ls {b} | wc -l > {b}/../seen-{name}"
    )
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn four_forks_run_at_one_origin_at_once_and_each_commit_holds_its_own_writes() {
    let env = Env::new();
    let origin = lead_store(&env);
    let bar = env.path("barrier");
    fs::create_dir(&bar).unwrap();
    let names = ["b1", "b2", "b3", "b4"];
    let runs: Vec<Running> = names
        .iter()
        .map(|name| {
            let script = branch_script(&origin, &bar, name, names.len());
            start(
                &env.store,
                &[
                    "base",
                    "--fork",
                    name,
                    "-m",
                    &format!("branch {name}"),
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
        })
        .collect();
    for (name, r) in names.iter().zip(runs) {
        let out = r.wait();
        assert!(
            out.status.success(),
            "{name}: {:?} {}",
            out.status,
            text(&out.stderr)
        );
        // Every branch saw all four at the barrier: they overlapped in time.
        assert_eq!(
            fs::read_to_string(env.path(&format!("seen-{name}")))
                .unwrap()
                .trim(),
            "4"
        );
        assert!(
            text(&out.stderr).contains(&format!("committed {name} as ")),
            "{}",
            text(&out.stderr)
        );
    }
    for name in names {
        let history = env.ok(["cat", name, "history.jsonl"]);
        assert_eq!(
            history,
            format!("{{\"turn\":0}}\n{{\"turn\":1,\"branch\":\"{name}\"}}\n"),
            "{name}'s history holds its own turn alone"
        );
        let lead = env.ok(["cat", name, "state/lead.json"]);
        assert_eq!(lead, format!("{{\"branch\":\"{name}\"}}\n"));
        let diff = env.ok(["diff", "base", name]);
        let changed: Vec<&str> = diff
            .lines()
            .map(|l| l.split(' ').nth(1).unwrap_or(""))
            .collect();
        assert_eq!(
            changed,
            ["history.jsonl", "state", "state/lead.json"],
            "{name}: {diff}"
        );
        let log = env.ok(["log", name]);
        assert!(log.contains(&format!("branch {name}")), "{log}");
    }
    // Siblings differ by their own writes alone.
    let d = env.ok(["diff", "b1", "b2"]);
    let changed: Vec<&str> = d
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        changed,
        ["history.jsonl", "state", "state/lead.json"],
        "{d}"
    );
    // The host: nothing created, nothing mounted, no run left.
    assert!(!env.path("srv/_lead_sessions").exists());
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
    assert_eq!(env.ok(["status", "--json"]).trim(), "[]");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn exit_codes_and_signals_pass_through_and_nothing_changed_commits_nothing() {
    let env = Env::new();
    let origin = lead_store(&env);
    let o = origin.display().to_string();
    let out = run(
        &env.store,
        &["base", "--fork", "e1", "--", "sh", "-c", "exit 7"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("e1 unchanged; nothing committed"));
    let head = env.ok(["forks"]);
    let out = run(
        &env.store,
        &["e1", "--", "sh", "-c", "kill -TERM $$; sleep 5"],
    );
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert_eq!(env.ok(["forks"]), head, "no empty commit");
    // Standard streams and the environment pass through; the cwd under
    // the origin is the mount's.
    let out = storefs(&env.store)
        .current_dir(env.tmp.path())
        .args(["run", "e1", "--", "sh", "-c"])
        .arg(format!("cd {o} && echo \"$SFS_TEST\" && cat notes.md"))
        .env("SFS_TEST", "passed")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "passed\nthe lead's notes\n");

    // SIGTERM to `run` reaches CMD, which commits its last words.
    let bar = env.path("ready");
    let script = format!(
        "trap 'echo term > {o}/signal; exit 5' TERM; touch {}; while :; do sleep 0.05; done",
        bar.display()
    );
    let r = start(
        &env.store,
        &["e1", "-m", "signalled", "--", "sh", "-c", &script],
    );
    wait_for(&bar);
    kill(r.pid(), libc::SIGTERM);
    let out = r.wait();
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(env.ok(["cat", "e1", "signal"]), "term\n");
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_held_fork_is_refused_naming_its_run_and_status_commit_umount_know_the_run() {
    let env = Env::new();
    let origin = lead_store(&env);
    let ready = env.path("ready");
    let stop = env.path("stop");
    let script = format!(
        "echo one > {}/w; touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        origin.display(),
        ready.display(),
        stop.display()
    );
    let r = start(
        &env.store,
        &["base", "--fork", "h1", "--", "sh", "-c", &script],
    );
    wait_for(&ready);
    let pid = r.pid().to_string();
    // Another run of the same fork, and a mount of it: refused, naming the run.
    let out = run(&env.store, &["h1", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("run pid {pid}")), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let err = env.fails_in(
        &env.store,
        &["mount", "h1", env.path("mp").to_str().unwrap()],
    );
    assert!(err.contains(&format!("run pid {pid}")), "{err}");
    // status lists the run.
    let st: serde_json::Value = serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    let row = &st[0];
    assert_eq!(row["target"], "h1", "{st}");
    assert_eq!(row["mountpoint"], origin.to_str().unwrap());
    assert_eq!(row["run"]["pid"].to_string(), pid);
    let table = env.ok(["status"]);
    assert!(table.contains(&format!("run {pid}")), "{table}");
    // forks names the run.
    let forks = env.ok(["forks"]);
    assert!(
        forks.contains(&format!("{} (run {pid})", origin.display())),
        "{forks}"
    );
    // commit works inside the run.
    let id = env.ok(["commit", "h1", "-m", "from outside"]);
    assert_eq!(env.ok(["cat", id.trim(), "w"]), "one\n");
    // umount names the run.
    let err = env.fails_in(&env.store, &["umount", "h1"]);
    assert!(err.contains(&format!("run pid {pid}")), "{err}");
    fs::write(&stop, "").unwrap();
    let out = r.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
}

/// The pid of the daemon serving run `r`'s first target, from its record
/// in `STORE/runs/`.
fn daemon_of(env: &Env, r: &Running) -> u32 {
    let rec: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(env.store.join(format!("runs/{}.json", r.pid()))).unwrap(),
    )
    .unwrap();
    let daemon = rec["targets"][0]["daemon_pid"].as_u64().unwrap() as u32;
    assert!(daemon > 1, "{rec}");
    daemon
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: a plain kill(2) of a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

fn wait_for(p: &Path) {
    let t = Instant::now();
    while !p.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{} never appeared",
            p.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The ordinary user's path: a user who owns a store but not the root-owned
/// directory its origin lies under (`/srv/...`, missing on the host) runs two
/// forks there at once. The run is a user namespace owning a mount
/// namespace; /dev/fuse is opened to all users (mode 0666, as Debian's udev
/// rule has it) for the test's duration.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn an_ordinary_user_runs_two_forks_at_an_origin_under_a_root_owned_directory() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if let Some(why) = storefs::daemon::ns::userns_blocker() {
        panic!("this machine forbids user namespaces to ordinary users: {why}");
    }
    let user = common::TestUser::create("run").expect("useradd");
    let _fuse = common::DevFuseOpen::new();
    let top = tempfile::Builder::new()
        .prefix("storefs-run-user")
        .tempdir()
        .unwrap();
    fs::set_permissions(top.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let chown =
        |p: &Path| nix::unistd::chown(p, Some(user.uid.into()), Some(user.gid.into())).unwrap();
    let home = top.path().join("u");
    fs::create_dir(&home).unwrap();
    chown(&home);
    let store = home.join("store");
    // The origin: under /srv (root's), in a directory that exists only
    // while the user snapshots it.
    let srv = PathBuf::from(format!("/srv/sfs-run-{}", std::process::id()));
    let origin = srv.join("lead");
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
    let gone = Gone(srv.clone());
    // A host entry beside the origin's missing part, which `ls /srv` inside
    // the run must still show.
    let beside = PathBuf::from(format!("/srv/sfs-run-{}-host", std::process::id()));
    fs::create_dir(&beside).unwrap();
    let _beside = Gone(beside.clone());
    fs::create_dir_all(&origin).unwrap();
    fs::write(origin.join("history.jsonl"), "{\"turn\":0}\n").unwrap();
    for p in [&origin, &origin.join("history.jsonl")] {
        chown(p);
    }
    let as_user = |args: &[&str]| {
        let out = storefs(&store)
            .args(args)
            .env("HOME", &home)
            .current_dir(&home)
            .uid(user.uid)
            .gid(user.gid)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    as_user(&["init"]);
    as_user(&["snapshot", origin.to_str().unwrap(), "--ref", "base"]);
    drop(gone);
    assert!(!srv.exists());
    let o = origin.display().to_string();
    let spawn = |name: &str| {
        let script = format!(
            "set -e; [ \"$(id -u)\" = {} ]; cd {o}; echo '{{\"turn\":1,\"branch\":\"{name}\"}}' >> history.jsonl; ls /srv | grep -qx {}",
            user.uid,
            beside.file_name().unwrap().to_str().unwrap()
        );
        storefs(&store)
            .args(["run", "base", "--fork", name, "--", "sh", "-c", &script])
            .env("HOME", &home)
            .current_dir(&home)
            .uid(user.uid)
            .gid(user.gid)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map(|c| Running(Some(c)))
            .unwrap()
    };
    let runs = [spawn("u1"), spawn("u2")];
    for (name, r) in ["u1", "u2"].into_iter().zip(runs) {
        let out = r.wait();
        assert!(
            out.status.success(),
            "{name}: {:?} {}",
            out.status,
            text(&out.stderr)
        );
        assert_eq!(
            as_user(&["cat", name, "history.jsonl"]),
            format!("{{\"turn\":0}}\n{{\"turn\":1,\"branch\":\"{name}\"}}\n")
        );
    }
    // The host: nothing made under /srv, nothing mounted.
    assert!(!srv.exists(), "{} was made on the host", srv.display());
    assert_eq!(mounts_under(Path::new("/srv")), Vec::<String>::new());
    assert_eq!(mounts_under(top.path()), Vec::<String>::new());
}

/// kill -9 of `storefs run` itself: its init and CMD die with it (the PID
/// namespace goes), each daemon is told (parent-death SIGTERM), unmounts and
/// commits what the fork holds, and exits; nothing is left on the host, and
/// the fork runs again.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_killed_run_leaves_no_daemon_or_mount_and_its_fork_keeps_the_writes() {
    let env = Env::new();
    let origin = lead_store(&env);
    let ready = env.path("ready");
    let script = format!(
        "echo written > {}/w; sync {}/w; touch {}; while :; do sleep 0.05; done",
        origin.display(),
        origin.display(),
        ready.display()
    );
    let r = start(
        &env.store,
        &["base", "--fork", "k1", "--", "sh", "-c", &script],
    );
    wait_for(&ready);
    let daemon = daemon_of(&env, &r) as i32;
    kill(r.pid(), libc::SIGKILL);
    let _ = r.wait();
    let t = Instant::now();
    // SAFETY: kill(2) with signal 0 only asks whether the pid exists.
    while unsafe { libc::kill(daemon, 0) } == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "daemon {daemon} still runs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(env.ok(["status", "--json"]).trim(), "[]");
    assert_eq!(env.ok(["cat", "k1", "w"]), "written\n");
    assert!(!env.path("srv/_lead_sessions").exists());
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
    let out = run(
        &env.store,
        &["k1", "--", "cat", &format!("{}/w", origin.display())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "written\n");
}

/// kill -9 of CMD: the run ends as on a normal exit (status 137), and the
/// fork is committed with what CMD wrote.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_killed_command_is_committed_as_on_a_normal_exit() {
    let env = Env::new();
    let origin = lead_store(&env);
    let script = format!(
        "echo before-kill > {}/w; sync {}/w; kill -9 $$",
        origin.display(),
        origin.display()
    );
    let out = run(
        &env.store,
        &["base", "--fork", "c1", "--", "sh", "-c", &script],
    );
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("committed c1 as "),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(env.ok(["cat", "c1", "w"]), "before-kill\n");
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
}

/// kill -9 of a run's daemon: CMD sees errors on the mount, `run` exits
/// non-zero with one line saying the daemon died and that the next run
/// replays the journal, and it does: what CMD had fsynced is there.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_killed_daemon_is_reported_and_the_next_run_replays_its_journal() {
    let env = Env::new();
    let origin = lead_store(&env);
    let (ready, go) = (env.path("ready"), env.path("go"));
    let o = origin.display();
    let script = format!(
        "echo synced > {o}/w; sync {o}/w; touch {}; while [ ! -e {} ]; do sleep 0.05; done; cat {o}/w && exit 0; exit 4",
        ready.display(),
        go.display()
    );
    let r = start(
        &env.store,
        &["base", "--fork", "d1", "--", "sh", "-c", &script],
    );
    wait_for(&ready);
    let daemon = daemon_of(&env, &r);
    kill(daemon, libc::SIGKILL);
    fs::write(&go, "").unwrap();
    let out = r.wait();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "CMD saw the mount fail: {err}");
    assert!(
        err.contains(&format!("the daemon serving d1 (pid {daemon}) died"))
            && err.contains("replays its journal"),
        "{err}"
    );
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
    let out = run(&env.store, &["d1", "--", "cat", &format!("{o}/w")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "synced\n");
}

/// `--with`: a fork of the lead read-write at its origin and a room (a
/// checkpoint of another tree) read-only at its own, both missing on the
/// host. CMD reads the room and writes the lead; a write to the room is
/// refused (EROFS); only the fork is committed, and the host has no mount.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn with_mounts_a_second_target_read_only_at_its_own_origin() {
    let env = Env::new();
    let lead = lead_store(&env);
    let room = env.path("srv/rooms/room-7");
    fs::create_dir_all(&room).unwrap();
    fs::write(room.join("plan.md"), "slice 3: parser\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        room.as_os_str(),
        "--ref".as_ref(),
        "room".as_ref(),
    ]);
    fs::rename(env.path("srv/rooms"), env.path("moved-rooms")).unwrap();
    let script = format!(
        "set -e; cat {r}/plan.md >> {l}/notes.md; \
         if (echo x > {r}/plan.md) 2>{l}/room-write.err; then exit 3; fi",
        r = room.display(),
        l = lead.display()
    );
    let out = run(
        &env.store,
        &[
            "base",
            "--fork",
            "w1",
            "--with",
            "room",
            "-m",
            "read the room",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        env.ok(["cat", "w1", "notes.md"]),
        "the lead's notes\nslice 3: parser\n"
    );
    let err = env.ok(["cat", "w1", "room-write.err"]);
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(env.ok(["cat", "room", "plan.md"]), "slice 3: parser\n");
    let log = env.ok(["log", "w1"]);
    assert!(log.contains("read the room"), "{log}");
    assert!(!env.path("srv/rooms").exists(), "nothing made on the host");
    assert_eq!(mounts_under(env.tmp.path()), Vec::<String>::new());
}
