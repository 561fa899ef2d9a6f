//! Issue 38, "High 1": an origin is data, and must not decide where root
//! mounts. Each reproduction of the attack exercise (an archive whose PAX
//! `STOREFS.origin` is `/root/.ssh`, a tree whose `STORE.json` root is
//! `/usr/local/sbin`, a remote ref with such an origin, through a lazy mount,
//! `pull` + `mount` and `fork` + `mount`) must be refused with nothing
//! mounted. The storefs commands run inside a private mount namespace with
//! fresh tmpfs over `/root` and `/usr/local`, so a failing test mounts
//! there and never over the real `/root/.ssh` or `/usr/local/sbin`; a
//! guard kills (by pid, from the store's mount records) any daemon one of
//! them started, which takes its namespace's mount with it.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Env, RemoteKind, remote_url, stderr};

/// In a new private mount namespace: tmpfs over /root (0700) and /usr/local
/// (with an empty sbin), then `storefs --store STORE ARGS`; then the
/// storefs mounts the namespace has are listed in a file, `$READ` (if set)
/// is printed, and each of those mounts is unmounted. Returns the command's
/// output (stdout, stderr, exit code of storefs) and the listed mounts;
/// `None` (the test is skipped, and says so) when no namespace can be made.
const SCRIPT: &str = r#"
mount -t tmpfs -o mode=0700 storefs-test /root || exit 97
mount -t tmpfs -o mode=0755 storefs-test /usr/local || exit 97
mkdir -p /usr/local/sbin || exit 97
"$BIN" --store "$STORE" "$@"
rc=$?
awk '$3 == "fuse.storefs" { print $2 }' /proc/self/mounts > "$MOUNTS"
if [ -n "${READ:-}" ]; then cat "$READ"; fi
for mp in $(cat "$MOUNTS"); do "$BIN" --store "$STORE" umount "$mp" >&2; done
exit $rc
"#;

struct Ns<'a> {
    env: &'a Env,
}

/// Kills every daemon the store's mount records name, on drop.
struct DaemonGuard(Vec<PathBuf>);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        for store in &self.0 {
            kill_daemons(store);
        }
    }
}

/// SIGTERM (the daemon unmounts and exits), then SIGKILL after 10 s, the
/// daemon of each record in `store/mounts/`.
fn kill_daemons(store: &Path) {
    let Ok(dir) = fs::read_dir(store.join("mounts")) else {
        return;
    };
    for e in dir.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(text) = fs::read_to_string(&p) else {
            continue;
        };
        let Ok(rec) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let Some(pid) = rec["pid"].as_i64().map(|p| p as i32).filter(|p| *p > 1) else {
            continue;
        };
        // SAFETY: a daemon this test's storefs started (its record is in
        // the test's own store).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: signal 0 only asks whether the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

impl Ns<'_> {
    fn run(&self, store: &Path, args: &[&str], read: Option<&str>) -> Option<(Output, String)> {
        let mounts = self.env.path(&format!("ns-mounts-{}", rand_tag()));
        let out = Command::new("unshare")
            .args([
                "-m",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                SCRIPT,
                "sh",
            ])
            .args(args)
            .env("BIN", env!("CARGO_BIN_EXE_storefs"))
            .env("STORE", store)
            .env("MOUNTS", &mounts)
            .env("READ", read.unwrap_or(""))
            .env_remove("STOREFS_STORE")
            .env_remove("STOREFS_ALLOW_ORIGIN")
            .output();
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                eprintln!("skipped: cannot run unshare(1): {e}");
                return None;
            }
        };
        if out.status.code() == Some(97) || !mounts.exists() {
            eprintln!(
                "skipped: no private mount namespace with tmpfs over /root here (needs root): {}",
                stderr(&out)
            );
            return None;
        }
        let listed = fs::read_to_string(&mounts).unwrap();
        Some((out, listed))
    }

    /// `storefs ARGS` in a namespace must fail with one line that names the
    /// origin and the way out, and mount nothing; returns the line.
    fn refused(&self, store: &Path, args: &[&str], origin: &str) -> Option<String> {
        let (out, mounts) = self.run(store, args, None)?;
        let err = stderr(&out);
        assert_eq!(
            mounts, "",
            "storefs {args:?} mounted (inside the test's namespace): {mounts} {err}"
        );
        assert_eq!(out.status.code(), Some(1), "storefs {args:?}: {err}");
        // `mount ARCHIVE` says what it imported first; the refusal is one line.
        let errors: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("storefs: error: "))
            .collect();
        assert_eq!(errors.len(), 1, "one error line: {err}");
        let err = errors[0].to_string();
        assert!(
            err.contains(&format!("origin {origin} is not an allowed mount place"))
                && err.contains("give a mountpoint (storefs mount ")
                && err.contains(&format!("--allow-origin {origin}")),
            "{err}"
        );
        Some(err)
    }
}

fn rand_tag() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A tree `proj/authorized_keys` in a tar whose PAX global header says
/// `STOREFS.origin=ORIGIN` (written by GNU tar), and optionally a
/// `STORE.json` naming `root`.
fn evil_tar(
    env: &Env,
    name: &str,
    pax_origin: Option<&str>,
    store_json_root: Option<&str>,
) -> PathBuf {
    let dir = env.path(&format!("{name}.src"));
    fs::create_dir_all(dir.join("proj")).unwrap();
    fs::write(
        dir.join("proj/authorized_keys"),
        b"ssh-ed25519 AAAA attacker\n",
    )
    .unwrap();
    if let Some(root) = store_json_root {
        fs::write(
            dir.join("proj/STORE.json"),
            serde_json::json!({ "root": root }).to_string(),
        )
        .unwrap();
    }
    let tar = env.path(name);
    let mut cmd = Command::new("tar");
    cmd.arg("--format=pax");
    if let Some(o) = pax_origin {
        cmd.arg(format!("--pax-option=STOREFS.origin={o}"));
    }
    let st = cmd
        .arg("-C")
        .arg(&dir)
        .arg("-cf")
        .arg(&tar)
        .arg("proj")
        .status()
        .unwrap();
    assert!(st.success(), "GNU tar");
    tar
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn an_archive_whose_pax_origin_is_root_ssh_is_not_mounted_there() {
    let env = Env::new();
    let _g = DaemonGuard(vec![env.store.clone()]);
    let ns = Ns { env: &env };
    let tar = evil_tar(&env, "evil.tar", Some("/root/.ssh"), None);
    let tar = tar.to_str().unwrap();
    // `mount ARCHIVE`: imported, then refused at the origin.
    let Some(err) = ns.refused(&env.store, &["mount", tar], "/root/.ssh") else {
        return;
    };
    assert!(err.contains("a dot-directory of a home"), "{err}");
    // It was imported; `mount` of the checkpoint by id is refused the same.
    let id = env.ok(["import", tar]).trim().to_string();
    ns.refused(&env.store, &["mount", &id], "/root/.ssh");

    // The opt-in (and the harness sees a mount when there is one): mounted
    // at /root/.ssh of the namespace, the attacker's file served there.
    let (out, mounts) = ns
        .run(
            &env.store,
            &["mount", &id, "--allow-origin", "/root/.ssh"],
            Some("/root/.ssh/authorized_keys"),
        )
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mounts, "/root/.ssh\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ssh-ed25519 AAAA attacker\n"
    );
    // A mountpoint the caller gives is the caller's choice.
    let mp = env.path("mnt");
    let (out, mounts) = ns
        .run(&env.store, &["mount", &id, mp.to_str().unwrap()], None)
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mounts.trim_end(), mp.to_str().unwrap());
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_tree_whose_store_json_root_is_usr_local_sbin_is_not_mounted_there() {
    let env = Env::new();
    let _g = DaemonGuard(vec![env.store.clone()]);
    let ns = Ns { env: &env };
    let tar = evil_tar(&env, "sbin.tar", None, Some("/usr/local/sbin"));
    let tar = tar.to_str().unwrap();
    let Some(err) = ns.refused(&env.store, &["mount", tar], "/usr/local/sbin") else {
        return;
    };
    assert!(err.contains("a system location, under /usr"), "{err}");
    // The environment variable is the opt-in too (a systemd unit's way).
    let id = env.ok(["import", tar]).trim().to_string();
    let out = Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            SCRIPT,
            "sh",
        ])
        .args(["mount", &id])
        .env("BIN", env!("CARGO_BIN_EXE_storefs"))
        .env("STORE", &env.store)
        .env("MOUNTS", env.path("env-mounts"))
        .env("STOREFS_ALLOW_ORIGIN", "/srv/x:/usr/local/sbin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(env.path("env-mounts")).unwrap(),
        "/usr/local/sbin\n"
    );
}

/// A store A whose ref `evil` (origin /root/.ssh) is pushed to a file://
/// remote `team` that the test's store (B) knows.
fn evil_remote(env: &Env) -> PathBuf {
    let a = env.path("a");
    let url = remote_url(RemoteKind::File, env.tmp.path(), "evil");
    let tar = evil_tar(env, "evil.tar", None, None);
    let run_a = |args: &[&str]| env.output_ok_in(&a, args);
    run_a(&["init"]);
    run_a(&[
        "import",
        tar.to_str().unwrap(),
        "--origin",
        "/root/.ssh",
        "--ref",
        "evil",
    ]);
    run_a(&["remote", "add", "team", &url]);
    run_a(&["push", "team", "evil"]);
    env.output_ok_in(&env.store, &["init"]);
    env.output_ok_in(&env.store, &["remote", "add", "team", &url]);
    a
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_lazy_mount_of_a_remote_ref_with_an_evil_origin_is_refused() {
    let env = Env::new();
    let a = evil_remote(&env);
    let _g = DaemonGuard(vec![env.store.clone(), a]);
    Ns { env: &env }.refused(&env.store, &["mount", "team:evil"], "/root/.ssh");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_pulled_ref_with_an_evil_origin_is_refused() {
    let env = Env::new();
    let a = evil_remote(&env);
    let _g = DaemonGuard(vec![env.store.clone(), a]);
    env.output_ok_in(&env.store, &["pull", "team", "evil"]);
    Ns { env: &env }.refused(&env.store, &["mount", "evil"], "/root/.ssh");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_fork_of_a_remote_ref_with_an_evil_origin_is_refused() {
    let env = Env::new();
    let a = evil_remote(&env);
    let _g = DaemonGuard(vec![env.store.clone(), a]);
    env.output_ok_in(&env.store, &["fork", "team:evil", "--name", "f"]);
    // The fork mounts read-write: an attacker's tree that root could even write to.
    Ns { env: &env }.refused(&env.store, &["mount", "f"], "/root/.ssh");
}
