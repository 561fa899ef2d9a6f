//! Mounting as a user other than root (issue 43, finding 15): a user who may
//! not open /dev/fuse and a user who asks for `-o allow_other` without
//! `user_allow_other` in /etc/fuse.conf each get one line that names the
//! real fix. Needs root (to add a test user and change /dev/fuse's mode for
//! the test; both are undone in guards).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A user made for the test; removed (with its home) when dropped.
struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
    home: PathBuf,
}

impl TestUser {
    fn add(home: &Path) -> Option<TestUser> {
        let name = format!("sfs6{}", std::process::id());
        let ok = Command::new("useradd")
            .args(["-m", "-s", "/usr/sbin/nologin", "-d"])
            .arg(home)
            .arg(&name)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIP: cannot add a test user (useradd; needs root)");
            return None;
        }
        let user = nix::unistd::User::from_name(&name).ok().flatten();
        let Some(user) = user else {
            let _ = Command::new("userdel").args(["-r", &name]).status();
            eprintln!("SKIP: the test user {name} has no passwd entry");
            return None;
        };
        Some(TestUser {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: home.to_path_buf(),
        })
    }

    /// storefs as this user, with its own store.
    fn storefs(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_storefs"))
            .arg("--store")
            .arg(self.home.join("store"))
            .args(args)
            .env_remove("STOREFS_STORE")
            .env("HOME", &self.home)
            .uid(self.uid)
            .gid(self.gid)
            .output()
            .unwrap()
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel")
            .args(["-r", &self.name])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// /dev/fuse's mode, restored when dropped.
struct DevFuseMode(u32);

impl DevFuseMode {
    fn set(mode: u32) -> Option<DevFuseMode> {
        let old = fs::metadata("/dev/fuse").ok()?.mode() & 0o7777;
        fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(mode)).ok()?;
        Some(DevFuseMode(old))
    }
}

impl Drop for DevFuseMode {
    fn drop(&mut self) {
        let _ = fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(self.0));
    }
}

fn one_line(o: &Output) -> String {
    let err = common::stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit 1 expected: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("\\n"), "no escaped newline: {err}");
    err
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_user_without_dev_fuse_or_user_allow_other_is_told_the_real_fix() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: no /dev/fuse");
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("storefs-nonroot-")
        .tempdir()
        .unwrap();
    fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let Some(user) = TestUser::add(&tmp.path().join("home")) else {
        return;
    };
    let src = user.home.join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a.txt"), b"a\n").unwrap();
    let mp = user.home.join("mnt");
    fs::create_dir(&mp).unwrap();
    for p in [&user.home, &src, &src.join("a.txt"), &mp] {
        std::os::unix::fs::lchown(p, Some(user.uid), Some(user.gid)).unwrap();
    }
    let snap = user.storefs(&["snapshot", src.to_str().unwrap(), "--ref", "r"]);
    assert!(snap.status.success(), "{}", common::stderr(&snap));

    // /dev/fuse as this machine has it: 0600, root's.
    let Some(guard) = DevFuseMode::set(0o600) else {
        eprintln!("SKIP: cannot change /dev/fuse's mode");
        return;
    };
    let err = one_line(&user.storefs(&["mount", "r", mp.to_str().unwrap()]));
    assert!(
        err.contains("not permitted to open /dev/fuse (mode 0600, owner root, group root): "),
        "names the device and its mode: {err}"
    );
    assert!(err.contains("chmod 0666 /dev/fuse"), "names the fix: {err}");
    assert!(
        !err.contains("fuse group"),
        "no group that does not exist: {err}"
    );

    // /dev/fuse open to all (as Debian ships it), -o allow_other without
    // user_allow_other in /etc/fuse.conf.
    drop(guard);
    let conf = fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    if conf.lines().any(|l| l.trim() == "user_allow_other") {
        eprintln!("SKIP (allow_other case): /etc/fuse.conf has user_allow_other");
        return;
    }
    let Some(_guard) = DevFuseMode::set(0o666) else {
        eprintln!("SKIP: cannot change /dev/fuse's mode");
        return;
    };
    let out = user.storefs(&["mount", "r", mp.to_str().unwrap(), "-o", "allow_other"]);
    if out.status.success() {
        let _ = user.storefs(&["umount", mp.to_str().unwrap()]);
        panic!("a user's allow_other mount succeeded without user_allow_other");
    }
    let err = one_line(&out);
    assert!(
        err.contains("user_allow_other") && err.contains("/etc/fuse.conf"),
        "names the line and the file: {err}"
    );
    assert!(
        err.contains("without allow_other"),
        "names the other way: {err}"
    );
    assert!(
        !err.contains("fusermount3: "),
        "not fusermount3's text: {err}"
    );
    assert_eq!(
        err.matches("cannot mount at").count(),
        1,
        "said once: {err}"
    );
}
