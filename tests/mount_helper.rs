//! The mount(8) helpers for real (issue 41, scope 3): `mount -t fuse.storefs`,
//! `findmnt -S`, `mount -o remount` and `umount` through
//! mount-scripts/mount.fuse.storefs and umount.fuse.storefs, running this
//! build's binary ($STOREFS_BIN). Root only, as every mounting test.
//!
//! mount(8) finds helpers only in /sbin, which is the machine's: a test that
//! needs them runs in a child of this binary in a private mount namespace
//! (`unshare --mount`) where /sbin shows them (a read-only overlay over it),
//! so nothing global changes, an installed helper is neither used nor
//! touched, and its mounts are its own.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{Env, pseudo_random, stderr};

/// Set in the child that runs a test's body inside the namespace.
const INSIDE: &str = "STOREFS_TEST_MOUNT_HELPER_NS";

/// Run `body`, the body of test `name`, where /sbin holds the helpers of
/// mount-scripts/: this process, when it is the child in the namespace;
/// else a child of this binary, running only `name`, in a new one.
fn with_helpers(name: &str, body: impl FnOnce(&Env)) {
    if std::env::var_os(INSIDE).is_some() {
        let env = env();
        let top = env.path("sbin-top");
        fs::create_dir_all(&top).unwrap();
        for h in ["mount.fuse.storefs", "umount.fuse.storefs"] {
            let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("mount-scripts")
                .join(h);
            std::os::unix::fs::symlink(&script, top.join(h)).unwrap();
        }
        let sbin = fs::canonicalize("/sbin").unwrap();
        let lower = format!("lowerdir={}:{}", top.display(), sbin.display());
        ok(
            "mount",
            &[
                "-t",
                "overlay",
                "storefs-mh",
                "-o",
                &lower,
                sbin.to_str().unwrap(),
            ],
        );
        return body(&env);
    }
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "in the namespace: {said}");
    assert!(said.contains("1 passed"), "the test did not run: {said}");
}

/// Unmounts `0` on drop if it is still a storefs mount: `storefs umount`
/// (a fork is committed), else lazily.
struct Unmount(PathBuf, PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if mount_line(&self.0).is_some() {
            let ok = Command::new(env!("CARGO_BIN_EXE_storefs"))
                .arg("--store")
                .arg(&self.1)
                .arg("umount")
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount")
                    .arg("-i")
                    .arg("-l")
                    .arg(&self.0)
                    .status();
            }
        }
    }
}

/// A tmpfs mounted at `0` (a mount that is not storefs), unmounted on drop.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-i").arg(&self.0).status();
    }
}

/// An environment whose directory is /tmp/storefs-mh-*.
fn env() -> Env {
    let tmp = tempfile::Builder::new()
        .prefix("storefs-mh-")
        .tempdir()
        .unwrap();
    let store = tmp.path().join("store");
    Env { tmp, store }
}

/// A ref `r` of a small tree, and fork `name` of it.
fn fork(env: &Env, name: &str) {
    let src = env.path("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/a.txt"), b"base\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "r".as_ref(),
    ]);
    env.ok(["fork", "r", "--name", name]);
}

/// `mount`/`umount`/`findmnt` with this build as the helpers' storefs.
fn run(prog: &str, args: &[&str]) -> Output {
    Command::new(prog)
        .args(args)
        .env("STOREFS_BIN", env!("CARGO_BIN_EXE_storefs"))
        .env_remove("STOREFS_STORE")
        .output()
        .unwrap()
}

fn ok(prog: &str, args: &[&str]) -> String {
    let out = run(prog, args);
    assert!(
        out.status.success(),
        "{prog} {args:?} failed ({}): {}",
        out.status,
        stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// (source, the mount's options, the file system's options) of the mount at `mp`.
fn mount_line(mp: &Path) -> Option<(String, String, String)> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info.lines().rfind(|l| l.split(' ').nth(4) == mp.to_str())?;
    let f: Vec<&str> = line.split(' ').collect();
    let sep = f.iter().position(|x| *x == "-").unwrap();
    Some((f[sep + 2].into(), f[5].into(), f[sep + 3].into()))
}

fn has(opts: &str, o: &str) -> bool {
    opts.split(',').any(|x| x == o)
}

/// The storefs daemons serving at `mp`: processes whose command line is a
/// `storefs … mount … MP … --foreground`.
fn daemons_at(mp: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let has_arg = |a: &[u8]| args.contains(&a);
        if has_arg(b"mount") && has_arg(b"--foreground") && has_arg(mp.to_str().unwrap().as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

/// Whether process `pid` is alive (a zombie is not).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

fn head(env: &Env, fork: &str) -> String {
    let forks = env.ok(["forks"]);
    forks
        .lines()
        .find(|l| l.split('\t').next() == Some(fork))
        .and_then(|l| l.split('\t').nth(1))
        .unwrap_or_else(|| panic!("fork {fork} not in: {forks}"))
        .to_string()
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mount_8_shows_the_source_given_remounts_in_place_and_umount_waits_for_the_commit() {
    with_helpers(
        "mount_8_shows_the_source_given_remounts_in_place_and_umount_waits_for_the_commit",
        mount_8,
    );
}

fn mount_8(env: &Env) {
    let name = format!("mh-{}", std::process::id());
    fork(env, &name);
    let mp = env.path("mnt");
    fs::create_dir_all(&mp).unwrap();
    let mps = mp.to_str().unwrap();

    // Standard options accepted, applied or ignored; silent on success.
    let opts = format!(
        "store={},noatime,noexec,sync,dirsync,_netdev,x-test.a=1,defaults,nodiratime,acl",
        env.store.display()
    );
    let out = run("mount", &["-t", "fuse.storefs", &name, mps, "-o", &opts]);
    let _unmount = Unmount(mp.clone(), env.store.clone());
    assert!(out.status.success(), "mount: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "mount(8) is silent on success");
    let (source, mopts, sopts) = mount_line(&mp).expect("mounted");
    // 1. The source is what was given to mount(8).
    assert_eq!(source, name);
    for o in ["rw", "nosuid", "nodev", "noexec", "noatime"] {
        assert!(has(&mopts, o), "{o} not in {mopts}");
    }
    for o in ["sync", "dirsync"] {
        assert!(has(&sopts, o), "{o} not in {sopts}");
    }
    let found = ok("findmnt", &["-n", "-o", "TARGET", "-S", &name]);
    assert_eq!(found.trim(), mps, "findmnt -S {name}");
    let daemon = daemons_at(&mp);
    assert_eq!(daemon.len(), 1, "one daemon: {daemon:?}");
    fs::write(mp.join("new.txt"), b"written\n").unwrap();

    // 2. -o remount: the kernel's flags change, the daemon stays the one.
    ok("mount", &["-o", "remount,ro", mps]);
    let (_, mopts, _) = mount_line(&mp).unwrap();
    assert!(has(&mopts, "ro"), "{mopts}");
    let err = fs::write(mp.join("other.txt"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let out = run(
        "mount",
        &["-o", "remount,rw,exec,strictatime,allow_other", mps],
    );
    assert!(out.status.success(), "remount: {}", stderr(&out));
    // What cannot change on a mounted FUSE file system is named, not refused.
    assert!(stderr(&out).contains("allow_other ("), "{}", stderr(&out));
    let (_, mopts, _) = mount_line(&mp).unwrap();
    assert!(has(&mopts, "rw") && !has(&mopts, "noexec"), "{mopts}");
    assert!(
        !has(&mopts, "noatime") && !has(&mopts, "relatime"),
        "{mopts}"
    );
    assert!(has(&mopts, "nosuid") && has(&mopts, "nodev"), "{mopts}");
    fs::write(mp.join("other.txt"), b"after remount\n").unwrap();
    assert_eq!(daemons_at(&mp), daemon, "no second daemon");

    // A remount of what is not a storefs mount fails, naming it.
    let plain = env.path("plain");
    fs::create_dir_all(&plain).unwrap();
    let out = run(
        "mount",
        &[
            "-t",
            "fuse.storefs",
            "-o",
            "remount",
            "x",
            plain.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(plain.to_str().unwrap()),
        "{}",
        stderr(&out)
    );
    let t = env.path("tmpfs");
    fs::create_dir_all(&t).unwrap();
    ok(
        "mount",
        &["-t", "tmpfs", "-o", "size=1m", "mh", t.to_str().unwrap()],
    );
    let _tmpfs = Tmpfs(t.clone());
    let out = run(
        "mount",
        &[
            "-t",
            "fuse.storefs",
            "-o",
            "remount,ro",
            "x",
            t.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains(t.to_str().unwrap()) && said.contains("tmpfs"),
        "{said}"
    );
    assert!(
        has(&mount_line(&t).unwrap().1, "rw"),
        "the tmpfs was left alone"
    );

    // 3. umount by the source: it returns once the fork is committed and
    // its daemon has exited, so the next mount of the fork finds it free.
    let before = head(env, &name);
    let out = run("umount", &[&name]);
    assert!(out.status.success(), "umount {name}: {}", stderr(&out));
    assert_eq!(stderr(&out), "", "umount(8) is silent on success");
    assert!(mount_line(&mp).is_none(), "still mounted");
    assert!(
        !alive(daemon[0]),
        "umount returned before the daemon exited"
    );
    assert_ne!(head(env, &name), before, "not committed");
    // Mounted again at once, without userspace options (no utab entry):
    // `umount /ABSOLUTE/MOUNTPOINT` then takes the type from statfs
    // ("fuse"), runs no helper and returns as soon as the kernel mount is
    // gone; the next mount of the fork waits for the daemon still committing.
    let plain = format!("store={}", env.store.display());
    let out = run("mount", &["-t", "fuse.storefs", &name, mps, "-o", &plain]);
    assert!(out.status.success(), "mount again: {}", stderr(&out));
    assert_eq!(fs::read(mp.join("other.txt")).unwrap(), b"after remount\n");
    fs::write(mp.join("big"), pseudo_random(8 << 20, 7)).unwrap();
    ok("umount", &[mps]);
    assert!(mount_line(&mp).is_none(), "umount MOUNTPOINT left it");
    let out = run("mount", &["-t", "fuse.storefs", &name, mps, "-o", &plain]);
    assert!(
        out.status.success(),
        "mount right after umount MOUNTPOINT: {}",
        stderr(&out)
    );
    assert_eq!(fs::read(mp.join("big")).unwrap(), pseudo_random(8 << 20, 7));
    ok("umount", &[&name]);
    assert!(mount_line(&mp).is_none(), "umount {name} left it");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_mount_of_a_fork_waits_for_the_daemon_of_its_last_mount_to_commit() {
    let env = env();
    let name = format!("mw-{}", std::process::id());
    fork(&env, &name);
    let mp = env.path("m1");
    let mp2 = env.path("m2");
    let mut g = env.mount(&name, Some(&mp));
    let daemon = daemons_at(&mp);
    assert_eq!(daemon.len(), 1, "{daemon:?}");
    // Enough to commit that the daemon is still at it when the next mount
    // starts (the test passes either way once the wait works).
    for i in 0..4 {
        fs::write(mp.join(format!("big{i}")), pseudo_random(4 << 20, i)).unwrap();
    }
    // The kernel mount alone goes (umount -i: no helper, no waiting).
    ok("umount", &["-i", mp.to_str().unwrap()]);
    g.mountpoint = None;
    let out = env.run(["mount".as_ref(), name.as_str().as_ref(), mp2.as_os_str()]);
    let _unmount = Unmount(mp2.clone(), env.store.clone());
    assert!(
        out.status.success(),
        "mount right after umount: {}",
        stderr(&out)
    );
    assert!(!alive(daemon[0]), "the last daemon still runs");
    assert_eq!(
        fs::read(mp2.join("big3")).unwrap(),
        pseudo_random(4 << 20, 3),
        "the last mount's writes were committed"
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mount_helper_works_through_mount_8_and_fstab() {
    with_helpers(
        "mount_helper_works_through_mount_8_and_fstab",
        through_mount_8_and_fstab,
    );
}

/// A ref through `mount -t fuse.storefs` (fstab's bookkeeping options
/// dropped) and umount(8), then through an fstab line (`mount -T`, so the
/// system's fstab is untouched; allow_other passed on), unmounted by
/// `storefs-umount-all --target` (only mounts of that target).
fn through_mount_8_and_fstab(env: &Env) {
    let src = env.path("src");
    fs::create_dir_all(src.join("state")).unwrap();
    fs::write(src.join("state/run.json"), b"{\"ok\": true}\n").unwrap();
    let target = format!("helper-{}", std::process::id());
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        target.as_ref(),
    ]);
    let mp = env.path("mnt");
    fs::create_dir_all(&mp).unwrap();
    let mps = mp.to_str().unwrap();
    let store_opt = format!(
        "store={},noauto,nofail,_netdev,x-systemd.automount,defaults,user",
        env.store.display()
    );

    let out = run(
        "mount",
        &["-t", "fuse.storefs", &target, mps, "-o", &store_opt],
    );
    let _unmount = Unmount(mp.clone(), env.store.clone());
    assert!(out.status.success(), "mount: {}", stderr(&out));
    assert_eq!(
        fs::read(mp.join("state/run.json")).unwrap(),
        b"{\"ok\": true}\n"
    );
    let daemon = daemons_at(&mp);
    // umount(8) unmounts it and returns once the daemon has exited.
    ok("umount", &[mps]);
    assert!(mount_line(&mp).is_none());
    assert!(daemon.iter().all(|p| !alive(*p)), "{daemon:?} still run");

    let fstab = env.path("fstab");
    fs::write(
        &fstab,
        format!("{target} {mps} fuse.storefs {store_opt},allow_other 0 0\n"),
    )
    .unwrap();
    ok("mount", &["-T", fstab.to_str().unwrap(), mps]);
    let (source, _, sopts) = mount_line(&mp).expect("mounted from the fstab line");
    assert_eq!(source, target);
    assert!(
        has(&sopts, "allow_other"),
        "allow_other not passed on: {sopts}"
    );

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("mount-scripts/storefs-umount-all");
    let out = Command::new(&script)
        .args(["--target", "not-this-one"])
        .env("STOREFS_BIN", env!("CARGO_BIN_EXE_storefs"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        mount_line(&mp).is_some(),
        "unmounted another target's mount"
    );
    let out = Command::new(&script)
        .args(["--target", &target])
        .env("STOREFS_BIN", env!("CARGO_BIN_EXE_storefs"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        mount_line(&mp).is_none(),
        "storefs-umount-all --target left it"
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mount_8_passes_the_atime_options_on_and_drops_them_with_ro() {
    with_helpers(
        "mount_8_passes_the_atime_options_on_and_drops_them_with_ro",
        atime_options,
    );
}

/// mount(8)'s `-o strictatime` reaches the fork (a read updates atime);
/// without an atime option, and with `ro,strictatime`, reads leave it.
fn atime_options(env: &Env) {
    use std::os::unix::fs::MetadataExt;
    let name = format!("mh-at-{}", std::process::id());
    fork(env, &name);
    let mp = env.path("mnt");
    fs::create_dir_all(&mp).unwrap();
    let mps = mp.to_str().unwrap();
    let file = mp.join("d/a.txt");
    let atime = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.atime(), m.atime_nsec())
    };
    for (opts, updates) in [
        ("", false),
        (",strictatime", true),
        (",ro,strictatime", false),
    ] {
        let opts = format!("store={}{opts}", env.store.display());
        ok("mount", &["-t", "fuse.storefs", &name, mps, "-o", &opts]);
        let unmount = Unmount(mp.clone(), env.store.clone());
        let before = atime(&file);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(fs::read(&file).unwrap(), b"base\n");
        assert_eq!(atime(&file) != before, updates, "-o {opts}");
        drop(unmount);
    }
}
