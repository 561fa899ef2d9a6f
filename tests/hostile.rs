//! Hostile requests through a fork mount served by the real daemon (`storefs
//! mount FORK`): impossible names, overflowing offsets, sizes past every
//! limit, oversized xattrs, deep nesting, symlink loops. Where a native file
//! system has the same limit, each operation runs on the mount and on a plain
//! directory of the test's temp dir (ext4 or whatever /tmp is) and must give
//! the same result; elsewhere the expected errno is spelled out. After each
//! group the daemon must still be alive and its log must not say "panicked".
//! Needs root and /dev/fuse.

mod common;

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, MountGuard};

/// A fork of a small checkpoint mounted by the daemon, and a native twin of
/// the same tree.
struct Fixture {
    mounted: Option<MountGuard>,
    native: PathBuf,
    env: Env,
}

fn build_tree(root: &Path) {
    fs::create_dir_all(root.join("d/sub")).unwrap();
    fs::write(root.join("hello.txt"), b"hello\n").unwrap();
    fs::write(root.join("d/f"), b"f\n").unwrap();
}

fn mount_fork() -> Fixture {
    let env = Env::new();
    let src = env.path("src");
    build_tree(&src);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    env.ok(["fork", "base", "--name", "h"]);
    let mnt = env.path("mnt");
    let mounted = env.mount("h", Some(&mnt));
    let native = env.path("native");
    build_tree(&native);
    Fixture {
        mounted: Some(mounted),
        native,
        env,
    }
}

impl Fixture {
    fn mnt(&self) -> &Path {
        self.mounted.as_ref().unwrap().path()
    }

    /// Both roots: the mount first, then the native twin.
    fn roots(&self) -> [PathBuf; 2] {
        [self.mnt().to_path_buf(), self.native.clone()]
    }

    /// Run `op` on both roots and require the same outcome (errno or success).
    #[track_caller]
    fn same<T: std::fmt::Debug>(&self, what: &str, op: impl Fn(&Path) -> io::Result<T>) -> i32 {
        let [m, n] = self.roots();
        let on_mount = outcome(op(&m));
        let native = outcome(op(&n));
        assert_eq!(
            on_mount,
            native,
            "{what}: mount gave {on_mount} ({}), native gave {native} ({})",
            strerror(on_mount),
            strerror(native)
        );
        on_mount
    }

    fn log_text(&self) -> String {
        let mut text = String::new();
        if let Ok(dir) = fs::read_dir(self.env.store.join("logs")) {
            for e in dir.flatten() {
                text.push_str(&fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        text
    }

    /// The daemon still answers, still runs, and never panicked.
    #[track_caller]
    fn assert_alive(&self) {
        let status = self.env.ok(["status", "--json"]);
        let list: Vec<serde_json::Value> = serde_json::from_str(&status).unwrap();
        let pid = list
            .iter()
            .find(|m| m["target"] == "h")
            .and_then(|m| m["pid"].as_i64())
            .expect("the fork mount is listed");
        // SAFETY: signal 0 only checks that the process exists.
        assert_eq!(unsafe { libc::kill(pid as i32, 0) }, 0, "daemon is gone");
        fs::metadata(self.mnt().join("hello.txt")).expect("the mount answers");
        let log = self.log_text();
        assert!(!log.contains("panicked"), "daemon log:\n{log}");
    }

    /// Unmount (which commits) and mount again.
    fn remount(&mut self) {
        let mnt = self.mnt().to_path_buf();
        self.mounted.take().unwrap().unmount();
        let log = self.log_text();
        assert!(!log.contains("panicked"), "daemon log:\n{log}");
        self.mounted = Some(self.env.mount("h", Some(&mnt)));
    }
}

/// 0 for success, else the errno.
fn outcome<T>(r: io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn strerror(code: i32) -> String {
    if code == 0 {
        "ok".into()
    } else {
        io::Error::from_raw_os_error(code).to_string()
    }
}

fn errno_of<T>(r: io::Result<T>) -> i32 {
    match r {
        Ok(_) => panic!("should have failed"),
        Err(e) => e.raw_os_error().expect("an OS error"),
    }
}

fn cstr(bytes: &[u8]) -> CString {
    CString::new(bytes).unwrap()
}

fn path_c(p: &Path) -> CString {
    cstr(p.as_os_str().as_bytes())
}

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn lsetxattr(p: &Path, name: &[u8], value: &[u8]) -> io::Result<()> {
    let (c, n) = (path_c(p), cstr(name));
    // SAFETY: valid C strings and a buffer of value.len() bytes.
    let rc = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    check(rc.into()).map(drop)
}

fn lgetxattr(p: &Path, name: &[u8], size: usize) -> io::Result<Vec<u8>> {
    let (c, n) = (path_c(p), cstr(name));
    let mut buf = vec![0u8; size];
    // SAFETY: valid C strings and a buffer of `size` bytes.
    let rc = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), size) };
    let n = check(rc as libc::c_long)?;
    buf.truncate(n as usize);
    Ok(buf)
}

fn lremovexattr(p: &Path, name: &[u8]) -> io::Result<()> {
    let (c, n) = (path_c(p), cstr(name));
    // SAFETY: valid C strings.
    check(unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) }.into()).map(drop)
}

fn llistxattr(p: &Path, size: usize) -> io::Result<usize> {
    let c = path_c(p);
    let mut buf = vec![0u8; size];
    // SAFETY: a valid C string and a buffer of `size` bytes.
    let rc = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), size) };
    check(rc as libc::c_long).map(|n| n as usize)
}

fn fallocate(f: &File, mode: libc::c_int, offset: i64, len: i64) -> io::Result<()> {
    // SAFETY: a valid open fd.
    check(unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) }.into()).map(drop)
}

fn open_raw(path: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    // A raw byte string that may hold a NUL: the kernel reads up to the first.
    let mut bytes = path.to_vec();
    bytes.push(0);
    // SAFETY: bytes is NUL-terminated.
    let fd = unsafe { libc::open(bytes.as_ptr().cast(), flags, 0o644) };
    check(fd.into())?;
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn names_with_slash_nul_dotdot_and_too_long() {
    let fx = mount_fork();
    // A "/" in a name is a path separator; the daemon never sees one.
    fx.same("create under a missing dir", |r| {
        fs::write(r.join("missing/x"), b"")
    });
    fx.same("mkdir under a file", |r| {
        fs::create_dir(r.join("hello.txt/x"))
    });
    fx.same("open a file as a dir", |r| File::open(r.join("hello.txt/")));
    fx.same("create with trailing slash", |r| {
        fs::write(r.join("newfile/"), b"")
    });
    fx.same("rename onto a trailing slash", |r| {
        fs::rename(r.join("hello.txt"), r.join("d/f/"))
    });
    // A NUL ends the name: std refuses it outright, the kernel reads up to it.
    for r in fx.roots() {
        let e = fs::write(r.join("nul\0tail"), b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let raw = [r.as_os_str().as_bytes(), b"/nul\0tail"].concat();
        drop(open_raw(&raw, libc::O_CREAT | libc::O_WRONLY).unwrap());
        assert!(r.join("nul").exists());
        assert!(!r.join("nul\0tail").exists() && !r.join("tail").exists());
    }
    // "." and "..": never created, removed or renamed over.
    fx.same("mkdir ..", |r| fs::create_dir(r.join("d/..")));
    fx.same("mkdir .", |r| fs::create_dir(r.join("d/.")));
    fx.same("rmdir ..", |r| fs::remove_dir(r.join("d/sub/..")));
    fx.same("rmdir .", |r| fs::remove_dir(r.join("d/sub/.")));
    fx.same("unlink ..", |r| fs::remove_file(r.join("d/..")));
    fx.same("unlink .", |r| fs::remove_file(r.join("d/.")));
    fx.same("rename ..", |r| fs::rename(r.join("d/sub/.."), r.join("x")));
    fx.same("rename onto ..", |r| {
        fs::rename(r.join("d/sub"), r.join("d/sub/.."))
    });
    fx.same("rename onto .", |r| {
        fs::rename(r.join("d/f"), r.join("d/."))
    });
    fx.same("link to ..", |r| {
        fs::hard_link(r.join("hello.txt"), r.join("d/.."))
    });
    fx.same("symlink at ..", |r| symlink("t", r.join("d/..")));
    fx.same("mkfifo at ..", |r| {
        let c = path_c(&r.join("d/.."));
        // SAFETY: a valid C string.
        check(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }.into())
    });
    fx.same("dir into itself", |r| {
        fs::rename(r.join("d"), r.join("d/sub/d"))
    });
    // ".." through the tree stays consistent.
    fx.same("stat via ..", |r| fs::read(r.join("d/sub/../../hello.txt")));

    // Over 255 bytes: ENAMETOOLONG on every kind of call; 255 is fine.
    let long = "n".repeat(256);
    let ok = "n".repeat(255);
    // 128 two-byte characters: 256 bytes.
    let wide = "é".repeat(128);
    for name in [&long, &wide] {
        let code = fx.same("create long", |r| fs::write(r.join(name), b"x"));
        assert_eq!(code, libc::ENAMETOOLONG);
        fx.same("stat long", |r| fs::symlink_metadata(r.join(name)));
        fx.same("mkdir long", |r| fs::create_dir(r.join(name)));
        fx.same("symlink long", |r| symlink("t", r.join(name)));
        fx.same("link long", |r| {
            fs::hard_link(r.join("hello.txt"), r.join(name))
        });
        fx.same("rename long", |r| fs::rename(r.join("d/f"), r.join(name)));
        fx.same("unlink long", |r| fs::remove_file(r.join(name)));
        fx.same("rmdir long", |r| fs::remove_dir(r.join(name)));
    }
    assert_eq!(fx.same("create 255", |r| fs::write(r.join(&ok), b"x")), 0);
    fx.same("rename to 255", |r| {
        fs::rename(r.join(&ok), r.join("d/sub/y"))
    });
    // A path over PATH_MAX, and symlink targets up to and past it.
    let deep = format!("{}/x", ["a"; 2100].join("/"));
    let code = fx.same("path over PATH_MAX", |r| fs::metadata(r.join(&deep)));
    assert_eq!(code, libc::ENAMETOOLONG);
    let target = "t".repeat(4095);
    assert_eq!(
        fx.same("symlink 4095", |r| symlink(&target, r.join("longlink"))),
        0
    );
    fx.same("readlink 4095", |r| fs::read_link(r.join("longlink")));
    for r in fx.roots() {
        assert_eq!(
            fs::read_link(r.join("longlink")).unwrap().as_os_str().len(),
            4095
        );
    }
    let target = "t".repeat(4096);
    assert_eq!(
        fx.same("symlink 4096", |r| symlink(&target, r.join("longer"))),
        libc::ENAMETOOLONG
    );
    fx.assert_alive();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn offsets_and_sizes_past_every_limit() {
    let mut fx = mount_fork();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.mnt().join("hello.txt"))
        .unwrap();
    let max = i64::MAX as u64;
    // Offsets that do not fit an off_t: the kernel refuses them.
    assert_eq!(errno_of(f.write_at(b"x", u64::MAX)), libc::EINVAL);
    assert_eq!(errno_of(f.write_at(b"x", 1 << 63)), libc::EINVAL);
    let mut buf = [0u8; 16];
    assert_eq!(errno_of(f.read_at(&mut buf, u64::MAX)), libc::EINVAL);
    drop(f);
    // Reads far past the end read nothing; one whose end overflows an off_t
    // is the kernel's EINVAL.
    let read_at = |r: &Path, offset: u64| {
        let mut buf = [0u8; 16];
        File::open(r.join("hello.txt"))?.read_at(&mut buf, offset)
    };
    assert_eq!(fx.same("read at 2^40", |r| read_at(r, 1 << 40)), 0);
    assert_eq!(
        fx.same("read at 2^63-2", |r| read_at(r, max - 1)),
        libc::EINVAL
    );
    assert_eq!(fx.same("read at 2^63-16", |r| read_at(r, max - 16)), 0);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.mnt().join("hello.txt"))
        .unwrap();
    // A write whose end passes the largest file size.
    let e = errno_of(f.write_at(b"0123", max - 3));
    assert!(e == libc::EFBIG || e == libc::EINVAL, "errno {e}");
    // lseek: negative and past the largest size.
    // SAFETY: a valid open fd.
    let rc = unsafe { libc::lseek(f.as_raw_fd(), -1, libc::SEEK_SET) };
    assert_eq!(errno_of(check(rc)), libc::EINVAL);
    // SAFETY: a valid open fd.
    let rc = unsafe { libc::lseek(f.as_raw_fd(), max as i64, libc::SEEK_SET) };
    assert_eq!(rc, max as i64);
    // SAFETY: a valid open fd.
    let rc = unsafe { libc::lseek(f.as_raw_fd(), 10, libc::SEEK_CUR) };
    assert_eq!(errno_of(check(rc)), libc::EINVAL);
    // fallocate and truncate: overflow, negative, past the largest size.
    assert_eq!(errno_of(fallocate(&f, 0, i64::MAX - 10, 100)), libc::EFBIG);
    assert_eq!(errno_of(fallocate(&f, 0, 10, i64::MAX)), libc::EFBIG);
    assert_eq!(errno_of(fallocate(&f, 0, -1, 100)), libc::EINVAL);
    assert_eq!(errno_of(fallocate(&f, 0, 0, 0)), libc::EINVAL);
    // SAFETY: a valid open fd.
    let rc = unsafe { libc::ftruncate(f.as_raw_fd(), -1) };
    assert_eq!(errno_of(check(rc.into())), libc::EINVAL);
    // copy_file_range with offsets that overflow.
    let g = File::create(fx.mnt().join("copy")).unwrap();
    let mut off_in: i64 = i64::MAX - 1;
    let mut off_out: i64 = 0;
    // SAFETY: valid fds and offset pointers.
    let rc = unsafe {
        libc::copy_file_range(
            f.as_raw_fd(),
            &mut off_in,
            g.as_raw_fd(),
            &mut off_out,
            100,
            0,
        )
    };
    let r = check(rc as libc::c_long);
    assert!(
        matches!(r, Ok(0)) || errno_of(r) == libc::EOVERFLOW || rc < 0,
        "copy_file_range past the end"
    );
    drop(g);
    // The largest size exactly: a sparse file the daemon keeps, commits and
    // brings back.
    let sparse = File::create(fx.mnt().join("sparse")).unwrap();
    sparse.set_len(max).unwrap();
    assert_eq!(sparse.write_at(b"end", max - 3).unwrap(), 3);
    assert_eq!(sparse.metadata().unwrap().len(), max);
    drop((f, sparse));
    fx.assert_alive();

    // RLIMIT_FSIZE: EFBIG from write and truncate, as on the native twin.
    for r in fx.roots() {
        for (prog, args) in [
            (
                "dd",
                vec!["if=/dev/zero", "of=limited", "bs=1024", "count=3"],
            ),
            ("truncate", vec!["-s", "1M", "limited2"]),
        ] {
            let mut cmd = Command::new(prog);
            cmd.args(&args).current_dir(&r);
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    let lim = libc::rlimit {
                        rlim_cur: 2048,
                        rlim_max: 2048,
                    };
                    libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
                    libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                    Ok(())
                });
            }
            let out = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{prog} in {}", r.display());
            assert!(err.contains("File too large"), "{prog}: {err}");
        }
        assert_eq!(fs::metadata(r.join("limited")).unwrap().len(), 2048);
    }
    fx.assert_alive();

    fx.remount();
    let sparse = File::open(fx.mnt().join("sparse")).unwrap();
    assert_eq!(sparse.metadata().unwrap().len(), max);
    let mut end = [0u8; 3];
    sparse.read_exact_at(&mut end, max - 3).unwrap();
    assert_eq!(&end, b"end");
    let mut hole = [1u8; 8];
    sparse.read_exact_at(&mut hole, 1 << 40).unwrap();
    assert_eq!(hole, [0; 8]);
    fx.assert_alive();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn xattr_names_and_values_over_limits() {
    let fx = mount_fork();
    let file = |r: &Path| r.join("hello.txt");
    let name255 = [b"user.".as_slice(), &[b'k'; 250]].concat();
    let name256 = [b"user.".as_slice(), &[b'k'; 251]].concat();
    let code = fx.same("name of 255", |r| lsetxattr(&file(r), &name255, b"v"));
    assert_eq!(code, 0);
    fx.same("get 255", |r| lgetxattr(&file(r), &name255, 16));
    let code = fx.same("name of 256", |r| lsetxattr(&file(r), &name256, b"v"));
    assert_eq!(code, libc::ERANGE);
    fx.same("get 256", |r| lgetxattr(&file(r), &name256, 16));
    fx.same("remove 256", |r| lremovexattr(&file(r), &name256));
    fx.same("empty name", |r| lsetxattr(&file(r), b"", b"v"));
    fx.same("get empty name", |r| lgetxattr(&file(r), b"", 16));
    // A namespace the kernel does not know, and a bare prefix.
    fx.same("no namespace", |r| {
        lsetxattr(&file(r), b"nonamespace", b"v")
    });
    fx.same("get no namespace", |r| {
        lgetxattr(&file(r), b"nonamespace", 16)
    });
    fx.same("unknown namespace", |r| {
        lsetxattr(&file(r), b"bogus.k", b"v")
    });
    fx.same("bare user.", |r| lsetxattr(&file(r), b"user.", b"v"));
    // Values: 64 KiB is the limit of the interface; one more is E2BIG.
    let big = vec![b'v'; 64 * 1024 + 1];
    let code = fx.same("value over 64K", |r| lsetxattr(&file(r), b"user.big", &big));
    assert_eq!(code, libc::E2BIG);
    // A buffer too small for the value, and a zero-size probe.
    fx.same("set small", |r| {
        lsetxattr(&file(r), b"user.s", b"0123456789")
    });
    fx.same("get into short buffer", |r| {
        lgetxattr(&file(r), b"user.s", 4)
    });
    assert_eq!(
        lgetxattr(&file(fx.mnt()), b"user.s", 0).unwrap(),
        Vec::<u8>::new()
    );
    // user.* on a symlink is EPERM (the kernel's rule).
    for r in fx.roots() {
        symlink("hello.txt", r.join("sl")).unwrap();
    }
    fx.same("user xattr on a symlink", |r| {
        lsetxattr(&r.join("sl"), b"user.k", b"v")
    });
    // 64 KiB values on the mount (ext4 keeps xattrs in one block, so this part
    // is the mount's own): many of them, then a list longer than the 64 KiB a
    // listxattr may return.
    let mnt_file = file(fx.mnt());
    let value = vec![b'x'; 64 * 1024];
    lsetxattr(&mnt_file, b"user.max", &value).unwrap();
    assert_eq!(
        lgetxattr(&mnt_file, b"user.max", value.len()).unwrap(),
        value
    );
    for i in 0..300 {
        let name = format!("user.{i:03}{}", "n".repeat(240));
        lsetxattr(&mnt_file, name.as_bytes(), b"").unwrap();
    }
    // The kernel caps a FUSE size probe at XATTR_LIST_MAX; a list that does
    // not fit in that is E2BIG, as on a native file system.
    let needed = llistxattr(&mnt_file, 0).unwrap();
    assert!(needed >= 64 * 1024, "list of {needed} bytes");
    assert_eq!(errno_of(llistxattr(&mnt_file, needed)), libc::E2BIG);
    assert_eq!(errno_of(llistxattr(&mnt_file, 1 << 20)), libc::E2BIG);
    fx.assert_alive();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn deep_nesting_and_symlink_loops() {
    let mut fx = mount_fork();
    // 1000 directories deep, by openat/mkdirat (the path is far over PATH_MAX).
    const DEPTH: usize = 1000;
    let name = cstr(b"deeper");
    for r in fx.roots() {
        let mut dir = open_raw(r.as_os_str().as_bytes(), libc::O_DIRECTORY).unwrap();
        for _ in 0..DEPTH {
            // SAFETY: a valid dir fd and C string.
            let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) };
            check(rc.into()).unwrap();
            // SAFETY: as above.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_DIRECTORY | libc::O_RDONLY,
                )
            };
            check(fd.into()).unwrap();
            // SAFETY: a fresh fd we own.
            dir = unsafe { OwnedFd::from_raw_fd(fd) };
        }
        let leaf = cstr(b"leaf");
        // SAFETY: a valid dir fd and C string.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                leaf.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
        };
        check(fd.into()).unwrap();
        // SAFETY: a fresh fd.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    fx.assert_alive();

    // Symlink loops: two-cycle, self, and a chain past the kernel's 40.
    for r in fx.roots() {
        symlink("b", r.join("a")).unwrap();
        symlink("a", r.join("b")).unwrap();
        symlink("self", r.join("self")).unwrap();
        for i in 0..45 {
            symlink(format!("c{}", i + 1), r.join(format!("c{i}"))).unwrap();
        }
        fs::write(r.join("c45"), b"end of chain").unwrap();
    }
    for link in ["a", "self", "c0"] {
        let code = fx.same("open a loop", |r| File::open(r.join(link)));
        assert_eq!(code, libc::ELOOP, "{link}");
        fx.same("stat a loop", |r| fs::metadata(r.join(link)));
        fx.same("lstat a loop", |r| fs::symlink_metadata(r.join(link)));
        fx.same("create through a loop", |r| fs::write(r.join(link), b"x"));
        fx.same("mkdir through a loop", |r| {
            fs::create_dir(r.join(link).join("x"))
        });
        fx.same("O_NOFOLLOW", |r| {
            let raw = [r.as_os_str().as_bytes(), b"/", link.as_bytes()].concat();
            open_raw(&raw, libc::O_RDONLY | libc::O_NOFOLLOW)
        });
    }
    fx.same("chain of 5", |r| fs::read(r.join("c40")));
    fx.assert_alive();

    // The deep tree survives a commit (umount) and a remount.
    fx.remount();
    let mut p = fx.mnt().to_path_buf();
    let mut dir = open_raw(p.as_os_str().as_bytes(), libc::O_DIRECTORY).unwrap();
    for _ in 0..DEPTH {
        // SAFETY: a valid dir fd and C string.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_DIRECTORY | libc::O_RDONLY,
            )
        };
        // SAFETY: a fresh fd we own.
        dir = unsafe { OwnedFd::from_raw_fd(check(fd.into()).unwrap() as i32) };
    }
    let leaf = cstr(b"leaf");
    // SAFETY: all-zero is a valid libc::stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid dir fd, C string and stat buffer.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), leaf.as_ptr(), &mut st, 0) };
    check(rc.into()).unwrap();
    p.push("a");
    assert_eq!(errno_of(File::open(&p)), libc::ELOOP);
    fx.assert_alive();
}
