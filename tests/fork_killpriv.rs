//! Setuid and setgid on a fork mount (issue 38, Medium 5): every way of
//! changing a file's data by a caller without `CAP_FSETID` (buffered and
//! `O_DIRECT` writes, `fallocate`, hole punching, `copy_file_range` into it,
//! `ftruncate`, `O_TRUNC`) clears `S_ISUID`, and `S_ISGID` when the file is
//! group-executable, as ext4 does (xfstests generic/355, 683, 684); root keeps
//! both, root without `CAP_FSETID` does not. The cleared modes are in the
//! commit and come back with a restore. With and without the writeback cache.
//! Needs root and /dev/fuse.
//!
//! The unprivileged caller is uid/gid 65534 with no supplementary groups, set
//! in a forked child with raw syscalls (no account is made, so none is left).

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::Env;

/// The unprivileged caller (nobody).
const NOBODY: u32 = 65534;
const CAP_FSETID: u32 = 4;

/// What a caller does to a file.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Write,
    Direct,
    Fallocate,
    PunchHole,
    CopyRange,
    Truncate,
    OpenTrunc,
}

const OPS: [Op; 7] = [
    Op::Write,
    Op::Direct,
    Op::Fallocate,
    Op::PunchHole,
    Op::CopyRange,
    Op::Truncate,
    Op::OpenTrunc,
];

/// Who does it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Nobody,
    Root,
    /// Root with `CAP_FSETID` dropped from its effective set.
    RootWithoutFsetid,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The child's side of [`run`]: only system calls (no allocation after fork).
/// 0 on success, else the errno (or 100+ for a failed credential change).
///
/// # Safety
/// Called in a freshly forked child; `p`, `s` and `buf` (4096 bytes, 4096-aligned) are valid.
unsafe fn child(who: Who, op: Op, p: &CString, s: &CString, buf: *mut u8) -> i32 {
    // SAFETY: plain system calls on valid pointers (the caller's contract).
    unsafe {
        let errno = || *libc::__errno_location();
        match who {
            Who::Nobody => {
                let none: *const libc::gid_t = std::ptr::null();
                if libc::syscall(libc::SYS_setgroups, 0, none) != 0
                    || libc::syscall(libc::SYS_setresgid, NOBODY, NOBODY, NOBODY) != 0
                    || libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY) != 0
                {
                    return 100;
                }
            }
            Who::RootWithoutFsetid => {
                let mut hdr = CapHeader {
                    version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
                    pid: 0,
                };
                let mut data = [CapData::default(); 2];
                if libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) != 0 {
                    return 101;
                }
                data[0].effective &= !(1 << CAP_FSETID);
                if libc::syscall(libc::SYS_capset, &hdr, data.as_ptr()) != 0 {
                    return 102;
                }
            }
            Who::Root => {}
        }
        let flags = match op {
            Op::Direct => libc::O_WRONLY | libc::O_DIRECT,
            Op::OpenTrunc => libc::O_WRONLY | libc::O_TRUNC,
            _ => libc::O_WRONLY,
        };
        let fd = libc::open(p.as_ptr(), flags);
        if fd < 0 {
            return errno();
        }
        let ok = match op {
            Op::Write => libc::pwrite(fd, buf.cast(), 1, 0) == 1,
            Op::Direct => libc::pwrite(fd, buf.cast(), 4096, 0) == 4096,
            Op::Fallocate => libc::fallocate(fd, 0, 0, 16384) == 0,
            Op::PunchHole => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                libc::fallocate(fd, mode, 0, 4096) == 0
            }
            Op::CopyRange => {
                let from = libc::open(s.as_ptr(), libc::O_RDONLY);
                let null: *mut libc::loff_t = std::ptr::null_mut();
                from >= 0 && libc::copy_file_range(from, null, fd, null, 4096, 0) == 4096
            }
            Op::Truncate => libc::ftruncate(fd, 1) == 0,
            Op::OpenTrunc => true,
        };
        if ok { 0 } else { errno() }
    }
}

/// Do `op` to `path` as `who` in a child process (`src`: the source of a
/// copy); panics with the errno when it fails.
fn run(who: Who, op: Op, path: &Path, src: &Path) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let s = CString::new(src.as_os_str().as_bytes()).unwrap();
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a non-zero size; freed below.
    let buf = unsafe { std::alloc::alloc(layout) };
    assert!(!buf.is_null());
    // SAFETY: buf holds 4096 bytes.
    unsafe { buf.write_bytes(b'w', 4096) };
    // SAFETY: the child only makes system calls and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: in the child, with valid arguments.
        unsafe { libc::_exit(child(who, op, &p, &s, buf)) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    assert!(libc::WIFEXITED(status), "{who:?} {op:?}: child died");
    let code = libc::WEXITSTATUS(status);
    assert_eq!(
        code,
        0,
        "{who:?} {op:?} on {}: {}",
        path.display(),
        if code >= 100 {
            "could not change credentials".to_string()
        } else {
            std::io::Error::from_raw_os_error(code).to_string()
        }
    );
}

/// The mode `stat(2)` shows (basic stats, as coreutils' `stat` and
/// xfstests ask: std's `metadata` asks statx for the birth time too, which
/// a FUSE kernel always fetches fresh, so it would not see a stale cache).
fn mode(p: &Path) -> u32 {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: all-zero bytes are a valid `struct stat` (plain integers).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(
        // SAFETY: a valid NUL-terminated path and a stat buffer for the call.
        unsafe { libc::stat(c.as_ptr(), &mut st) },
        0,
        "stat {}",
        p.display()
    );
    st.st_mode & 0o7777
}

/// What ext4 leaves of `before` after `who` changed the file's data.
fn expected(who: Who, before: u32) -> u32 {
    if who == Who::Root {
        return before;
    }
    let mut m = before & !libc::S_ISUID;
    // Setgid goes when group-executable, or when the caller is outside the
    // file's group (the kernel's setattr_should_drop_sgid): nobody is
    // outside group 0, the files' group; root without CAP_FSETID is in it.
    if m & libc::S_IXGRP != 0 || who == Who::Nobody {
        m &= !libc::S_ISGID;
    }
    m
}

/// Every (who, mode before) of the matrix: xfstests' cases.
/// (6666 and 4666, not executable, are generic/355's: there the kernel kept
/// the mode it had cached, 6666, until told to forget it.)
const CASES: [(Who, u32); 8] = [
    (Who::Nobody, 0o6777),
    (Who::Nobody, 0o4777),
    (Who::Nobody, 0o2777),
    (Who::Nobody, 0o2666),
    (Who::Nobody, 0o6666),
    (Who::Nobody, 0o4666),
    (Who::Root, 0o6777),
    (Who::RootWithoutFsetid, 0o6777),
];

/// Run the whole matrix in `dir` (a fork mount); (file name, mode) of
/// every file it changed.
fn matrix(dir: &Path) -> Vec<(String, u32)> {
    let src = dir.join("src");
    fs::write(&src, vec![b's'; 8192]).unwrap();
    fs::set_permissions(&src, fs::Permissions::from_mode(0o644)).unwrap();
    let mut wrong = Vec::new();
    let mut got = Vec::new();
    for op in OPS {
        for (who, before) in CASES {
            let name = format!("{op:?}-{who:?}-{before:o}");
            let p = dir.join(&name);
            fs::write(&p, vec![b'x'; 8192]).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(before)).unwrap();
            assert_eq!(mode(&p), before, "{name}: chmod");
            run(who, op, &p, &src);
            let (now, want) = (mode(&p), expected(who, before));
            if now != want {
                wrong.push(format!("{name}: {now:o}, ext4 leaves {want:o}"));
            }
            got.push((name, now));
        }
    }
    assert!(
        wrong.is_empty(),
        "setuid/setgid as ext4 leaves them:\n{}",
        wrong.join("\n")
    );
    got
}

/// A store with a fork `f` of an empty checkpoint, mounted with
/// `allow_other` (nobody reaches it) at `mnt`, and `--writeback-cache` if
/// asked.
fn mount_fork(env: &Env, writeback: bool) -> common::MountGuard {
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let origin = env.path("origin");
    fs::create_dir(&origin).unwrap();
    fs::set_permissions(&origin, fs::Permissions::from_mode(0o777)).unwrap();
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    env.ok(["fork", "base", "--name", "f"]);
    let mnt = env.path("mnt");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "mount".as_ref(),
        "-o".as_ref(),
        "allow_other".as_ref(),
        "f".as_ref(),
        mnt.as_os_str(),
    ];
    if writeback {
        args.push("--writeback-cache".as_ref());
    }
    let out = env.run(args);
    let guard = env.guard_for("f");
    assert!(out.status.success(), "mount: {}", common::stderr(&out));
    guard
}

/// The matrix on a mount, then the commit restored: the same modes.
fn kill_priv_on_every_write_path(writeback: bool) {
    let env = Env::new();
    let m = mount_fork(&env, writeback);
    let got = matrix(m.path());
    let id = env.ok(["commit", "f", "-m", "setuid"]);
    let restored = env.path("restored");
    env.ok(["restore".as_ref(), id.trim().as_ref(), restored.as_os_str()]);
    for (name, want) in &got {
        assert_eq!(
            mode(&restored.join(name)),
            *want,
            "{name} after commit and restore"
        );
    }
    m.unmount();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn setuid_and_setgid_are_cleared_on_every_write_path_as_ext4_does() {
    kill_priv_on_every_write_path(false);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn setuid_and_setgid_are_cleared_on_every_write_path_with_the_writeback_cache() {
    kill_priv_on_every_write_path(true);
}

/// generic/355's shape: another program (here `sh`, as nobody, outside the
/// file's group) writes, appends or allocates, then `stat(1)` looks: both
/// bits gone (generic/683, 684). The kernel kept the mode it had cached
/// (6666) until the daemon told it to forget it.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn stat_after_another_programs_write_shows_the_cleared_bits() {
    let env = Env::new();
    let m = mount_fork(&env, false);
    for (name, script) in [
        ("append", "printf x >> \"$0\""),
        (
            "overwrite",
            "printf x | dd of=\"$0\" conv=notrunc 2>/dev/null",
        ),
        ("fallocate", "fallocate -l 16384 \"$0\""),
        ("punch", "fallocate -p -o 0 -l 4096 \"$0\""),
    ] {
        let p = m.path().join(name);
        fs::write(&p, vec![b'x'; 8192]).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o6666)).unwrap();
        let shown = || {
            let o = std::process::Command::new("stat")
                .args(["-c", "%a"])
                .arg(&p)
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        assert_eq!(shown(), "6666");
        let o = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
                script,
            ])
            .arg(&p)
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: {}", common::stderr(&o));
        assert_eq!(shown(), "666", "{name}: setuid or setgid still shown");
    }
    m.unmount();
}
