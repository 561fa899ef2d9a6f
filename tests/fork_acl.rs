//! POSIX ACLs on fork mounts (and read-only mounts) behave as on ext4: the
//! same `setfacl`/`chmod`/create operations on a native ext4 directory and on
//! a fork mount give the same modes and the same ACLs (`getfacl -n` and the
//! raw `system.posix_acl_*` bytes), before and after a journal replay, a
//! commit and a restore; an ACL grants what it says to another user (uid 99)
//! on a fork mount and on a read-only mount of the committed checkpoint.
//! Needs root, /dev/fuse, setfacl/getfacl, setpriv and rsync.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{Env, walk, xattrs};

/// Run `script` with `sh -c` in `dir` (as root unless `uid` is given); its
/// exit status as a bool.
fn sh_in(dir: &Path, uid: Option<u32>, script: &str) -> bool {
    let mut c = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "sh".into(),
            ]);
            c
        }
        None => Command::new("sh"),
    };
    let out = c.arg("-c").arg(script).current_dir(dir).output().unwrap();
    out.status.success()
}

/// Run `script` as root in `dir` and require success.
fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{script}` in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ACL operations of every test, run in `root` (native or a mount).
const OPS: &str = "set -e
umask 022
touch a b c d e p q
setfacl -m g:99:rw a
setfacl -m u:99:rwx,m::r b
chmod 640 b
setfacl -m u::rw,g::r,o::r c
setfacl -m g:99:rw,u:99:r d
setfacl -b d
setfacl -m u:99:rw e
setfacl -x u:99 e
chmod 600 p
setfacl -m u:99:rw p
chmod 600 q
touch s t
chown 99:50 s t
chmod 2775 s t
setpriv --reuid=99 --regid=99 --clear-groups setfacl -m u:1:r s
setpriv --reuid=99 --regid=99 --groups=50 setfacl -m u:1:r t
mkdir dd plain
setfacl -d -m u:99:rwx dd
setfacl -m u:99:rx dd
touch dd/f022 plain/f022
mkdir dd/sub022 plain/sub022
mkfifo dd/fifo
umask 077
touch dd/f077 plain/f077
mkdir dd/sub077
touch dd/sub077/deep
umask 022
chmod 750 dd/f022
setfacl -k dd/sub022
touch dd/sub022/none
find . -exec touch -h -d @1000000000 {} +
";

/// What must be equal between two trees: for every path, its mode, owner,
/// raw xattrs (ACLs byte for byte) and `getfacl -n` text.
fn acl_state(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for rel in std::iter::once(std::path::PathBuf::new()).chain(walk(root)) {
        let p = root.join(&rel);
        let m = fs::symlink_metadata(&p).unwrap();
        let getfacl = Command::new("getfacl")
            .args(["-n", "-p", "--omit-header"])
            .arg(&p)
            .output()
            .unwrap();
        assert!(getfacl.status.success(), "getfacl {}", p.display());
        out.push(format!(
            "{} mode {:o} owner {}:{} xattrs {:?}\n{}",
            rel.display(),
            m.mode(),
            m.uid(),
            m.gid(),
            xattrs(&p)
                .iter()
                .map(|(k, v)| {
                    let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
                    format!("{}={hex}", String::from_utf8_lossy(k))
                })
                .collect::<Vec<_>>(),
            String::from_utf8_lossy(&getfacl.stdout)
        ));
    }
    out
}

fn assert_same_acls(native: &Path, other: &Path, what: &str) {
    let (a, b) = (acl_state(native), acl_state(other));
    assert_eq!(a.len(), b.len(), "{what}: same paths");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "{what}: native (left) vs {what} (right)");
    }
}

/// `rsync -aHAXS --dry-run --itemize-changes` from `a` to `b` lists nothing.
fn assert_rsync_clean(a: &Path, b: &Path, what: &str) {
    let out = Command::new("rsync")
        .args(["-aHAXS", "--dry-run", "--itemize-changes"])
        .arg(format!("{}/", a.display()))
        .arg(format!("{}/", b.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "rsync: {}", common::stderr(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listed, "", "{what}: rsync -aHAXS itemizes changes");
}

/// Which of the permission probes uid 99 passes in `root`.
fn probes(root: &Path) -> Vec<(&'static str, bool)> {
    [
        ("write a (g:99:rw; uid 99 runs with gid 99)", "echo x >> a"),
        ("write p (u:99:rw on a 0600 file)", "echo x >> p"),
        ("read p", "cat p"),
        ("write q (0600, no ACL)", "echo x >> q"),
        ("read b (u:99 masked to r)", "cat b"),
        ("write b (mask r)", "echo x >> b"),
        ("create in dd (u:99:rx)", "touch dd/by99"),
        ("list dd", "ls dd"),
        (
            "write dd/f022 (inherited u:99, mask from chmod 750)",
            "echo x >> dd/f022",
        ),
        ("read dd/f077 (inherited, umask ignored)", "cat dd/f077"),
        ("write dd/f077", "echo x >> dd/f077"),
    ]
    .into_iter()
    .map(|(what, script)| (what, sh_in(root, Some(99), script)))
    .collect()
}

/// A store with a checkpoint of `origin` (one file), a fork `f` of it, and
/// `origin` kept as the native twin. Directories are reachable by uid 99.
fn setup(env: &Env) -> (std::path::PathBuf, std::path::PathBuf) {
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let native = env.path("native");
    fs::create_dir(&native).unwrap();
    fs::set_permissions(&native, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(native.join("base.txt"), b"base\n").unwrap();
    fs::set_permissions(native.join("base.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    env.ok([
        "snapshot".as_ref(),
        native.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    env.ok(["fork", "base", "--name", "f"]);
    let mnt = env.path("mnt");
    (native, mnt)
}

/// Mount `target` at `mnt` with `-o allow_other` (so uid 99 reaches it),
/// and a fork with `--writeback-cache` when STOREFS_TEST_WRITEBACK is set.
fn mount_as(env: &Env, target: &str, mnt: &Path) -> common::MountGuard {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "mount".as_ref(),
        "-o".as_ref(),
        "allow_other".as_ref(),
        target.as_ref(),
        mnt.as_os_str(),
    ];
    if target == "f" && std::env::var_os("STOREFS_TEST_WRITEBACK").is_some() {
        args.push("--writeback-cache".as_ref());
    }
    let out = env.run(args);
    let guard = env.guard_for(target);
    assert!(out.status.success(), "mount: {}", common::stderr(&out));
    guard
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn acls_on_a_fork_mount_behave_as_on_ext4() {
    let env = Env::new();
    let (native, mnt) = setup(&env);
    let m = mount_as(&env, "f", &mnt);
    sh(&native, OPS);
    sh(m.path(), OPS);
    assert_same_acls(&native, m.path(), "fork mount");
    assert_rsync_clean(&native, m.path(), "fork mount");
    // Spot checks of what ext4 does, so both sides cannot agree on a wrong
    // answer (e.g. an ACL silently dropped on both).
    let mode = |p: &str| fs::metadata(m.path().join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("a"), 0o664, "the mask is the group bits");
    assert_eq!(mode("dd/f077"), 0o664, "no umask under a default ACL");
    assert_eq!(mode("plain/f077"), 0o600, "umask without one");
    assert_eq!(mode("s"), 0o775, "setfacl by a non-member drops setgid");
    assert_eq!(mode("t"), 0o2775, "a supplementary group keeps it");
    let getfacl = Command::new("getfacl")
        .args(["-n", "--omit-header"])
        .arg(m.path().join("b"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&getfacl.stdout);
    assert!(text.contains("mask::r--"), "chmod 640 set the mask: {text}");
    // Permission checks read the ACLs.
    let want = probes(&native);
    assert!(want.iter().any(|(_, ok)| *ok) && want.iter().any(|(_, ok)| !*ok));
    assert_eq!(probes(m.path()), want, "uid 99 on the fork mount vs ext4");
    assert_same_acls(&native, m.path(), "fork mount after uid 99 worked");
    m.unmount();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn acls_survive_replay_commit_and_restore_and_bind_a_read_only_mount() {
    let env = Env::new();
    let (native, mnt) = setup(&env);
    let m = mount_as(&env, "f", &mnt);
    sh(&native, OPS);
    sh(m.path(), OPS);
    assert_same_acls(&native, m.path(), "fork mount");
    // Unmount without a commit, remount: the journal is replayed.
    let out = env.run(["umount".as_ref(), mnt.as_os_str(), "--no-commit".as_ref()]);
    assert!(out.status.success(), "umount: {}", common::stderr(&out));
    std::mem::forget(m);
    let m = mount_as(&env, "f", &mnt);
    assert_same_acls(&native, m.path(), "fork mount after replay");
    assert_rsync_clean(&native, m.path(), "fork mount after replay");
    m.unmount(); // commits
    let restored = env.path("restored");
    env.ok(["restore".as_ref(), "f".as_ref(), restored.as_os_str()]);
    assert_same_acls(&native, &restored, "restore");
    assert_rsync_clean(&native, &restored, "restore");
    // A read-only mount of the commit enforces the ACLs too.
    let head = env.ok(["log", "f"]);
    let head = head.split_whitespace().nth(1).unwrap().to_string();
    let ro = mount_as(&env, &head, &env.path("ro"));
    assert_same_acls(&native, ro.path(), "read-only mount");
    let read = |root: &Path| {
        [
            sh_in(root, Some(99), "cat p"),
            sh_in(root, Some(99), "cat q"),
            sh_in(root, Some(99), "cat dd/f077"),
            sh_in(root, Some(99), "ls dd"),
        ]
    };
    assert_eq!(read(&native), [true, false, true, true]);
    assert_eq!(
        read(ro.path()),
        read(&native),
        "uid 99 on a read-only mount"
    );
    ro.unmount();
}
