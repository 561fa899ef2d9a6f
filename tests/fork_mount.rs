//! Real read-write FUSE mounts of a fork, through the kernel (std::fs and
//! libc). Needs root and /dev/fuse.
//!
//! Each test builds its own store from a snapshot of a small temp directory,
//! creates and opens a fork of it, mounts it with `mount_fork` and serves on a
//! thread. Mount tests run one at a time (`SERIAL`); the guard unmounts and
//! joins the serving thread on failure too.

mod common;

use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use storefs::daemon::{serve, unmount};
use storefs::fs::{MountConfig, mount_fork};
use storefs::ingest::{self, SnapshotOptions};
use storefs::journal::{Fork, ROOT_INO};
use storefs::store::{ObjectId, Store};

static SERIAL: Mutex<()> = Mutex::new(());

const HELLO: &[u8] = b"hello from the base checkpoint\n";

/// A pattern of `len` bytes that differs for each `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + seed as u64 * 7 + i as u64 / 251) as u8)
        .collect()
}

/// Unmounts (if still mounted) and joins the serving thread when dropped.
struct MountGuard {
    mnt: PathBuf,
    serving: Option<JoinHandle<io::Result<()>>>,
}

impl MountGuard {
    /// Unmount now and wait (bounded) for serve() to return; give its result.
    fn unmount_and_join(&mut self) -> io::Result<()> {
        unmount(&self.mnt)?;
        let handle = self.serving.take().expect("serving thread");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !handle.is_finished() {
            assert!(Instant::now() < deadline, "serve() did not return");
            std::thread::sleep(Duration::from_millis(20));
        }
        handle.join().expect("serve thread panicked")
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if is_mounted(&self.mnt)
            && let Err(e) = unmount(&self.mnt)
        {
            eprintln!("cleanup: {e}; detaching lazily");
            let c = CString::new(self.mnt.as_os_str().as_bytes()).unwrap();
            // SAFETY: c is a valid path string.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        if let Some(handle) = self.serving.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if handle.is_finished() {
                let _ = handle.join();
            } else {
                eprintln!("cleanup: serve() still running at {}", self.mnt.display());
            }
        }
    }
}

fn is_mounted(mnt: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let want = mnt.to_str().unwrap();
    mounts.lines().any(|l| l.split(' ').nth(1) == Some(want))
}

/// A fork of a small checkpoint, mounted read-write. Fields drop in order:
/// the mount first, then the fork, the store and the temp dirs.
struct Fixture {
    mounted: MountGuard,
    fork: Option<Arc<Fork>>,
    store: Arc<Store>,
    base: ObjectId,
    base_root: ObjectId,
    tmp: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

/// The base tree: hello.txt, big.bin (200 KiB), sub/{a,b}, empty/.
fn build_source(src: &Path) {
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::create_dir_all(src.join("empty")).unwrap();
    fs::write(src.join("hello.txt"), HELLO).unwrap();
    fs::write(src.join("big.bin"), pattern(1, 200 * 1024)).unwrap();
    fs::write(src.join("sub/a"), b"a\n").unwrap();
    fs::write(src.join("sub/b"), b"b\n").unwrap();
}

/// Open a fork as the daemon does; with `STOREFS_TEST_CACHE_SIZE` set, within
/// that cache (0 parks every directory it can after each operation).
fn open_fork(store: Arc<Store>, name: &str) -> storefs::journal::Result<Fork> {
    match common::test_cache_size() {
        Some(size) => Fork::open_sized(store, name, size),
        None => Fork::open(store, name),
    }
}

fn mount_fixture() -> Fixture {
    mount_fixture_with(|_| {})
}

fn mount_fixture_with(adjust: impl FnOnce(&mut MountConfig)) -> Fixture {
    mount_fixture_of(build_source, |store| open_fork(store, "f1"), adjust)
}

/// A fork of a checkpoint of the tree `build` makes, opened by `open`.
fn mount_fixture_of(
    build: fn(&Path),
    open: impl FnOnce(Arc<Store>) -> storefs::journal::Result<Fork>,
    adjust: impl FnOnce(&mut MountConfig),
) -> Fixture {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    build(&src);
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let snap = ingest::snapshot(&store, &src, &SnapshotOptions::default()).unwrap();
    let base = common::checkpoint_of_root(&store, snap.root, Some(src.display().to_string()));
    Fork::create(&store, "f1", &base).unwrap();
    let fork = Arc::new(open(store.clone()).unwrap());
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut cfg = MountConfig {
        mountpoint: mnt.clone(),
        fsname: "f1".into(),
        extra_options: vec![],
        cache_bytes: 1 << 20,
        threads: 2,
        // The whole file runs under the writeback cache too (see
        // docs/journal.md): STOREFS_TEST_WRITEBACK=1 cargo test --test fork_mount
        writeback_cache: std::env::var_os("STOREFS_TEST_WRITEBACK").is_some(),
        transport: common::transport(),
    };
    adjust(&mut cfg);
    let mounted = mount_fork(fork.clone(), &cfg).unwrap();
    let serving = std::thread::spawn(move || serve(mounted));
    Fixture {
        mounted: MountGuard {
            mnt,
            serving: Some(serving),
        },
        fork: Some(fork),
        store,
        base,
        base_root: snap.root,
        tmp,
        _serial: serial,
    }
}

impl Fixture {
    fn path(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.mounted.mnt.join(name.as_ref())
    }

    fn fork(&self) -> &Arc<Fork> {
        self.fork.as_ref().unwrap()
    }

    /// The base checkpoint is as it was: same root tree, and hello.txt read
    /// through the store still has the base bytes.
    fn assert_base_untouched(&self) {
        let ckpt = self.store.read_checkpoint(&self.base).unwrap();
        assert_eq!(ckpt.root, self.base_root);
        let entry = self
            .store
            .lookup_path(&ckpt, b"hello.txt")
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        self.store
            .copy_content(&entry, &mut out, "hello.txt")
            .unwrap();
        assert_eq!(out, HELLO);
        let sub = self.store.lookup_path(&ckpt, b"sub/a").unwrap();
        assert!(sub.is_some(), "sub/a is still in the base");
    }

    /// The daemon still answers.
    fn assert_alive(&self) {
        assert_eq!(fs::read(self.path("hello.txt")).unwrap().len(), HELLO.len());
        assert!(fs::metadata(self.path("sub")).unwrap().is_dir());
    }
}

fn os_error<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("operation should fail")
        .raw_os_error()
        .expect("an OS error")
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// -1 → the errno, else Ok(return value).
fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let (a, b) = (cstr(from), cstr(to));
    // SAFETY: valid C strings; the syscall takes these arguments.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    check(rc).map(|_| ())
}

fn fallocate(f: &File, mode: libc::c_int, offset: i64, len: i64) -> io::Result<()> {
    // SAFETY: a valid open fd.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) };
    check(rc.into()).map(|_| ())
}

fn setxattr(p: &Path, name: &str, value: &[u8], flags: libc::c_int) -> io::Result<()> {
    let (p, n) = (cstr(p), CString::new(name).unwrap());
    // SAFETY: valid strings and buffer.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    check(rc.into()).map(|_| ())
}

/// getxattr with a buffer of `size` bytes (0: the size probe).
fn getxattr(p: &Path, name: &str, size: usize) -> io::Result<Vec<u8>> {
    let (p, n) = (cstr(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    // SAFETY: valid strings; buf holds size bytes (or is null with size 0).
    let rc = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), ptr, size) };
    let n = check(rc as libc::c_long)? as usize;
    if size == 0 {
        return Ok(vec![0; n]);
    }
    buf.truncate(n);
    Ok(buf)
}

fn listxattr(p: &Path) -> io::Result<Vec<u8>> {
    let p = cstr(p);
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid string and buffer.
    let rc = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(check(rc as libc::c_long)? as usize);
    Ok(buf)
}

fn removexattr(p: &Path, name: &str) -> io::Result<()> {
    let (p, n) = (cstr(p), CString::new(name).unwrap());
    // SAFETY: valid strings.
    let rc = unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) };
    check(rc.into()).map(|_| ())
}

fn read_all(p: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    File::open(p).unwrap().read_to_end(&mut v).unwrap();
    v
}

/// Read `path` (slash-separated) through a fork's API.
fn fork_read(fork: &Fork, path: &str) -> Vec<u8> {
    let mut ino = ROOT_INO;
    for part in path.split('/') {
        ino = fork.lookup(ino, part.as_bytes()).unwrap().ino;
    }
    let size = fork.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let chunk = fork.read(ino, out.len() as u64, 1 << 20).unwrap();
        assert!(!chunk.is_empty());
        out.extend(chunk);
    }
    out
}

// ------------------------------------------------------------------- tests

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mount_is_rw_with_the_usual_options() {
    let fx = mount_fixture();
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == fx.mounted.mnt.to_str())
        .expect("mounted");
    assert!(line.starts_with("f1 "), "{line}");
    assert!(line.contains(" fuse.storefs "), "{line}");
    let opts = line.split(' ').nth(3).unwrap();
    for o in ["rw", "nosuid", "nodev", "default_permissions"] {
        assert!(opts.split(',').any(|x| x == o), "{o} missing in {opts}");
    }
    fx.assert_base_untouched();
}

#[test]
fn ro_option_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    build_source(&src);
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let snap = ingest::snapshot(&store, &src, &SnapshotOptions::default()).unwrap();
    let base = common::checkpoint_of_root(&store, snap.root, None);
    Fork::create(&store, "f1", &base).unwrap();
    let fork = Arc::new(Fork::open(store.clone(), "f1").unwrap());
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    for bad in ["ro", "suid", "dev", "fsname=x", "auto_unmount"] {
        let cfg = MountConfig {
            mountpoint: mnt.clone(),
            fsname: "f1".into(),
            extra_options: vec![bad.into()],
            cache_bytes: 1 << 20,
            threads: 1,
            writeback_cache: false,
            transport: common::transport(),
        };
        let err = mount_fork(fork.clone(), &cfg).err().expect("refused");
        assert!(err.to_string().contains(bad), "{err}");
    }
    assert!(!is_mounted(&mnt));
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn create_write_read_at_any_offset() {
    let fx = mount_fixture();
    let p = fx.path("new.bin");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"start", 0).unwrap();
    f.write_all_at(b"far", 100_000).unwrap();
    f.write_all_at(b"mid", 50_000).unwrap();
    let mut want = vec![0u8; 100_003];
    want[..5].copy_from_slice(b"start");
    want[50_000..50_003].copy_from_slice(b"mid");
    want[100_000..].copy_from_slice(b"far");
    assert_eq!(read_all(&p), want);
    assert_eq!(fs::metadata(&p).unwrap().len(), 100_003);
    // Overwrite inside a base file, across chunk-sized distances.
    let big = fx.path("big.bin");
    let g = OpenOptions::new().write(true).open(&big).unwrap();
    g.write_all_at(&pattern(9, 5000), 70_000).unwrap();
    drop(g);
    let mut want = pattern(1, 200 * 1024);
    want[70_000..75_000].copy_from_slice(&pattern(9, 5000));
    assert_eq!(read_all(&big), want);
    // A large write (several journal records) in one call.
    let large = pattern(3, 3 << 20);
    fs::write(fx.path("large.bin"), &large).unwrap();
    assert_eq!(read_all(&fx.path("large.bin")), large);
    // Writing extends; reading past the end is empty.
    let mut buf = [0u8; 10];
    assert_eq!(f.read_at(&mut buf, 200_000).unwrap(), 0);
    fx.assert_base_untouched();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn appends_from_two_processes_never_overwrite() {
    let fx = mount_fixture();
    let script = r#"for i in $(seq 500); do echo "$1 $i" >> file; done"#;
    let spawn = |who: &str| {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(who)
            .current_dir(&fx.mounted.mnt)
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn("a"), spawn("b"));
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    let text = String::from_utf8(read_all(&fx.path("file"))).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1000, "{text}");
    for who in ["a", "b"] {
        let mine: Vec<u32> = lines
            .iter()
            .filter_map(|l| l.strip_prefix(who).and_then(|r| r.strip_prefix(' ')))
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(mine, (1..=500).collect::<Vec<_>>(), "writer {who}");
    }
    // An O_APPEND handle appends at the real end even after a plain write
    // moved it.
    let mut f = OpenOptions::new()
        .append(true)
        .open(fx.path("hello.txt"))
        .unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(fx.path("hello.txt"))
        .unwrap()
        .write_all_at(b"XY", HELLO.len() as u64)
        .unwrap();
    f.write_all(b"Z").unwrap();
    let mut want = HELLO.to_vec();
    want.extend_from_slice(b"XYZ");
    assert_eq!(read_all(&fx.path("hello.txt")), want);
}

/// The kernel keeps a fork's pages across opens and remembers absent names
/// (long TTLs, `FOPEN_KEEP_CACHE`, negative entries): what it keeps must
/// never be stale. Bytes appended past the page cache (an `O_APPEND` handle
/// is direct I/O) are seen by the next open of a reader that cached the old
/// end of the file; a name looked up while absent can be made and found.
/// (A fork has no direct-I/O handles: every write goes through the page
/// cache, which the kernel keeps across its zero-message opens.)
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn kernel_caches_never_show_stale_bytes_or_names() {
    let fx = mount_fixture();
    let p = fx.path("hello.txt");
    // Cache the whole last page, zeros past the end of file included.
    assert_eq!(fs::read(&p).unwrap(), HELLO);
    let mut want = HELLO.to_vec();
    for round in 0..3u8 {
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[b'0' + round; 5]).unwrap();
        drop(f);
        want.extend_from_slice(&[b'0' + round; 5]);
        assert_eq!(fs::read(&p).unwrap(), want, "after append {round}");
        // A second read keeps the cache (nothing changed): still right.
        assert_eq!(fs::read(&p).unwrap(), want);
    }
    // A plain (cached) write is seen at once, and after a reopen.
    fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .write_all_at(b"hey", 0)
        .unwrap();
    want[..3].copy_from_slice(b"hey");
    assert_eq!(fs::read(&p).unwrap(), want);
    // Truncate then append through another handle.
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"");
    OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(b"new")
        .unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"new");

    // Absent names: looked up (negative entries), then made through every
    // kind of call that makes a name, then found.
    let names = ["n-file", "n-dir", "n-link", "n-sym", "n-renamed"];
    for n in names {
        assert!(fs::symlink_metadata(fx.path(n)).is_err(), "{n} absent");
    }
    fs::write(fx.path("n-file"), b"f").unwrap();
    fs::create_dir(fx.path("n-dir")).unwrap();
    fs::hard_link(fx.path("n-file"), fx.path("n-link")).unwrap();
    std::os::unix::fs::symlink("n-file", fx.path("n-sym")).unwrap();
    fs::write(fx.path("tmp"), b"r").unwrap();
    fs::rename(fx.path("tmp"), fx.path("n-renamed")).unwrap();
    for n in names {
        assert!(fs::symlink_metadata(fx.path(n)).is_ok(), "{n} found");
    }
    assert_eq!(fs::metadata(fx.path("n-file")).unwrap().nlink(), 2);
    // And gone again: the kernel must not keep the positive entries.
    fs::remove_file(fx.path("n-link")).unwrap();
    assert!(fs::symlink_metadata(fx.path("n-link")).is_err());
    assert_eq!(fs::metadata(fx.path("n-file")).unwrap().nlink(), 1);
}

/// `cp` uses `copy_file_range`: committed data is shared (the journal grows
/// by a record, not by the file), data written on the fork is copied, and
/// both read back and commit as the source.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn cp_shares_committed_data_through_copy_file_range() {
    let fx = mount_fixture();
    let big = fs::read(fx.path("big.bin")).unwrap();
    let before = common::journal_bytes(&fx.tmp.path().join("store"), "f1");
    let cp = |a: &str, b: &str| {
        let st = Command::new("cp")
            .arg(fx.path(a))
            .arg(fx.path(b))
            .status()
            .unwrap();
        assert!(st.success(), "cp {a} {b}");
    };
    cp("big.bin", "copy.bin");
    assert_eq!(fs::read(fx.path("copy.bin")).unwrap(), big);
    let grew = common::journal_bytes(&fx.tmp.path().join("store"), "f1") - before;
    assert!(
        grew < 16 << 10,
        "cp of a {}-byte committed file logged {grew} bytes",
        big.len()
    );
    // Written on the fork, then copied: the bytes themselves.
    let fresh = pattern(9, 70_000);
    fs::write(fx.path("fresh.bin"), &fresh).unwrap();
    cp("fresh.bin", "fresh-copy.bin");
    assert_eq!(fs::read(fx.path("fresh-copy.bin")).unwrap(), fresh);
    // A copy into the middle of a file, through the call itself.
    let src = File::open(fx.path("big.bin")).unwrap();
    let dst = OpenOptions::new()
        .write(true)
        .open(fx.path("hello.txt"))
        .unwrap();
    let (mut off_in, mut off_out) = (1000i64, 2i64);
    // SAFETY: both descriptors are open for the call and both offsets are
    // live `i64`s it may update.
    let n = unsafe {
        libc::copy_file_range(
            src.as_raw_fd(),
            &mut off_in,
            dst.as_raw_fd(),
            &mut off_out,
            5000,
            0,
        )
    };
    assert_eq!(n, 5000, "{}", io::Error::last_os_error());
    drop((src, dst));
    let mut want = HELLO[..2].to_vec();
    want.extend_from_slice(&big[1000..6000]);
    assert_eq!(fs::read(fx.path("hello.txt")).unwrap(), want);
    // Committed: the checkpoint holds the same bytes.
    let head = fx.fork().commit("copies").unwrap();
    let ckpt = fx.store.read_checkpoint(&head).unwrap();
    for (path, bytes) in [
        ("copy.bin", &big),
        ("fresh-copy.bin", &fresh),
        ("hello.txt", &want),
    ] {
        let entry = fx.store.lookup_path(&ckpt, path.as_bytes()).unwrap();
        let mut out = Vec::new();
        fx.store
            .copy_content(&entry.unwrap(), &mut out, path)
            .unwrap();
        assert_eq!(&out, bytes, "{path} in the commit");
        assert_eq!(&fork_read(fx.fork(), path), bytes, "{path} live");
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn truncate_ftruncate_and_fallocate() {
    let fx = mount_fixture();
    let p = fx.path("big.bin");
    // truncate(2) by path, shrink.
    let c = cstr(&p);
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 1000) }, 0);
    assert_eq!(read_all(&p), pattern(1, 1000));
    // ftruncate grows with zeros.
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    f.set_len(3000).unwrap();
    let mut want = pattern(1, 1000);
    want.resize(3000, 0);
    assert_eq!(read_all(&p), want);
    // O_TRUNC empties.
    fs::write(fx.path("hello.txt"), b"").unwrap();
    assert_eq!(fs::metadata(fx.path("hello.txt")).unwrap().len(), 0);
    // fallocate mode 0 extends, KEEP_SIZE does not, PUNCH_HOLE zeros.
    fallocate(&f, 0, 0, 8192).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 8192);
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 100_000).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 8192);
    fallocate(
        &f,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        10,
        20,
    )
    .unwrap();
    want.resize(8192, 0);
    want[10..30].fill(0);
    assert_eq!(read_all(&p), want);
    // Zero range: zeros inside the file; past its end it grows the file,
    // or not with KEEP_SIZE.
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 0, 10).unwrap();
    want[..10].fill(0);
    assert_eq!(read_all(&p), want);
    fallocate(
        &f,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        8000,
        400,
    )
    .unwrap();
    assert_eq!(read_all(&p), want);
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 8100, 200).unwrap();
    want.resize(8300, 0);
    assert_eq!(read_all(&p), want);
    // Modes a fork does not serve are refused, changing nothing.
    assert_eq!(
        os_error(fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096)),
        libc::EOPNOTSUPP
    );
    assert_eq!(read_all(&p), want);
    fx.assert_base_untouched();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn sparse_write_stays_sparse() {
    let fx = mount_fixture();
    let p = fx.path("sparse");
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    f.write_all_at(b"end", 1 << 30).unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!(m.len(), (1 << 30) + 3);
    assert!(m.blocks() <= 16, "blocks {}", m.blocks());
    let mut buf = vec![1u8; 4096];
    File::open(&p)
        .unwrap()
        .read_exact_at(&mut buf, 1 << 20)
        .unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn unlinked_open_file_stays_readable() {
    let fx = mount_fixture();
    let p = fx.path("doomed");
    fs::write(&p, b"still here").unwrap();
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    assert_eq!(os_error(fs::metadata(&p)), libc::ENOENT);
    let mut buf = [0u8; 10];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"still here");
    f.write_all_at(b"STILL", 0).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"STILL here");
    assert_eq!(f.metadata().unwrap().nlink(), 0);
    // Unlink of a base file that is open.
    let g = File::open(fx.path("sub/a")).unwrap();
    fs::remove_file(fx.path("sub/a")).unwrap();
    let mut a = [0u8; 2];
    g.read_exact_at(&mut a, 0).unwrap();
    assert_eq!(&a, b"a\n");
    drop((f, g));
    fx.assert_base_untouched();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn directories_and_renames() {
    let fx = mount_fixture();
    fs::create_dir(fx.path("d")).unwrap();
    fs::write(fx.path("d/x"), b"x").unwrap();
    assert_eq!(os_error(fs::remove_dir(fx.path("d"))), libc::ENOTEMPTY);
    assert_eq!(os_error(fs::remove_dir(fx.path("sub"))), libc::ENOTEMPTY);
    assert_eq!(os_error(fs::create_dir(fx.path("d"))), libc::EEXIST);
    fs::remove_file(fx.path("d/x")).unwrap();
    fs::remove_dir(fx.path("d")).unwrap();
    fs::remove_dir(fx.path("empty")).unwrap();
    let mut names: Vec<_> = fs::read_dir(&fx.mounted.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["big.bin", "hello.txt", "sub"]);

    // rename over an existing file.
    fs::write(fx.path("one"), b"1").unwrap();
    fs::write(fx.path("two"), b"2").unwrap();
    fs::rename(fx.path("one"), fx.path("two")).unwrap();
    assert_eq!(fs::read(fx.path("two")).unwrap(), b"1");
    assert_eq!(os_error(fs::metadata(fx.path("one"))), libc::ENOENT);
    // NOREPLACE.
    fs::write(fx.path("three"), b"3").unwrap();
    assert_eq!(
        os_error(renameat2(
            &fx.path("three"),
            &fx.path("two"),
            libc::RENAME_NOREPLACE
        )),
        libc::EEXIST
    );
    renameat2(&fx.path("three"), &fx.path("four"), libc::RENAME_NOREPLACE).unwrap();
    // Flags the kernel refuses (RENAME_WHITEOUT alone is
    // fork_xfstests_regress's).
    assert_eq!(
        os_error(renameat2(
            &fx.path("four"),
            &fx.path("five"),
            libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE
        )),
        libc::EINVAL
    );
    // EXCHANGE, file with directory.
    renameat2(&fx.path("four"), &fx.path("sub"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(fs::read(fx.path("sub")).unwrap(), b"3");
    assert_eq!(fs::read(fx.path("four/b")).unwrap(), b"b\n");
    // Directory rename across parents.
    fs::create_dir(fx.path("n")).unwrap();
    fs::rename(fx.path("four"), fx.path("n/moved")).unwrap();
    assert_eq!(fs::read(fx.path("n/moved/a")).unwrap(), b"a\n");
    assert_eq!(
        os_error(fs::rename(fx.path("n"), fx.path("n/moved/inside"))),
        libc::EINVAL
    );
    fx.assert_base_untouched();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mkdir_as_a_lock_has_one_winner() {
    let fx = mount_fixture();
    for round in 0..5 {
        let lock = fx.path(format!("lock{round}"));
        let n = 8;
        let barrier = Arc::new(Barrier::new(n));
        let results: Vec<io::Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let (barrier, lock) = (barrier.clone(), lock.clone());
                    s.spawn(move || {
                        barrier.wait();
                        fs::create_dir(&lock)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        for r in results.into_iter().filter(|r| r.is_err()) {
            assert_eq!(os_error(r), libc::EEXIST);
        }
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn symlinks_links_and_metadata() {
    let fx = mount_fixture();
    std::os::unix::fs::symlink("/some/abs/target", fx.path("ln")).unwrap();
    assert_eq!(
        fs::read_link(fx.path("ln")).unwrap(),
        Path::new("/some/abs/target")
    );
    std::os::unix::fs::symlink("hello.txt", fx.path("rel")).unwrap();
    assert_eq!(fs::read(fx.path("rel")).unwrap(), HELLO);

    fs::hard_link(fx.path("hello.txt"), fx.path("hard")).unwrap();
    let (a, b) = (
        fs::metadata(fx.path("hello.txt")).unwrap(),
        fs::metadata(fx.path("hard")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino());
    assert_eq!(a.nlink(), 2);
    assert_eq!(b.nlink(), 2);
    fs::write(fx.path("hard"), b"via the link").unwrap();
    assert_eq!(fs::read(fx.path("hello.txt")).unwrap(), b"via the link");
    assert_eq!(
        os_error(fs::hard_link(fx.path("sub"), fx.path("dl"))),
        libc::EPERM
    );

    // chmod, chown, utimensat (a given time and UTIME_NOW).
    let p = fx.path("big.bin");
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
    std::os::unix::fs::chown(&p, Some(1234), Some(5678)).unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    let c = cstr(&p);
    let times = [
        libc::timespec {
            tv_sec: 1_600_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 1_500_000_000,
            tv_nsec: 123_456_789,
        },
    ];
    assert_eq!(
        // SAFETY: valid path and two timespecs.
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_500_000_000, 123_456_789));
    assert_eq!((m.atime(), m.atime_nsec()), (1_600_000_000, 5));
    let now = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    ];
    assert_eq!(
        // SAFETY: as above.
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), now.as_ptr(), 0) },
        0
    );
    let m = fs::metadata(&p).unwrap();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((m.mtime() - wall).abs() < 60, "mtime {}", m.mtime());
    assert_eq!(m.atime(), 1_600_000_000, "UTIME_OMIT keeps atime");
    // Before the epoch, with nanoseconds: -1.5 s is (-2 s, +0.5 s) to the
    // kernel, and must come back so (fuser 0.18 alone would make it -2.5 s).
    let before = [
        libc::timespec {
            tv_sec: -2,
            tv_nsec: 500_000_000,
        },
        libc::timespec {
            tv_sec: -86_401,
            tv_nsec: 1,
        },
    ];
    assert_eq!(
        // SAFETY: valid path and two timespecs.
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), before.as_ptr(), 0) },
        0
    );
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.atime(), m.atime_nsec()), (-2, 500_000_000));
    assert_eq!((m.mtime(), m.mtime_nsec()), (-86_401, 1));

    // chown clears setuid (the kernel sends the mode change).
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4755)).unwrap();
    std::os::unix::fs::chown(&p, Some(4321), None).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o755);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn new_entries_take_umask_owner_and_setgid_group() {
    let fx = mount_fixture();
    // umask applies (the shell's, not this process's).
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 027 && touch f && mkdir d && mkfifo p")
        .current_dir(&fx.mounted.mnt)
        .status()
        .unwrap();
    assert!(out.success());
    assert_eq!(fs::metadata(fx.path("f")).unwrap().mode() & 0o7777, 0o640);
    assert_eq!(fs::metadata(fx.path("d")).unwrap().mode() & 0o7777, 0o750);
    let fifo = fs::metadata(fx.path("p")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()));
    assert_eq!(fifo.mode() & 0o7777, 0o640);

    // A setgid directory gives its group; new directories inherit S_ISGID.
    let g = fx.path("g");
    fs::create_dir(&g).unwrap();
    std::os::unix::fs::chown(&g, None, Some(777)).unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o2775)).unwrap();
    fs::write(g.join("file"), b"x").unwrap();
    fs::create_dir(g.join("dir")).unwrap();
    std::os::unix::fs::symlink("t", g.join("ln")).unwrap();
    let f = fs::metadata(g.join("file")).unwrap();
    assert_eq!((f.uid(), f.gid()), (0, 777));
    assert_eq!(f.mode() & libc::S_ISGID, 0);
    let d = fs::metadata(g.join("dir")).unwrap();
    assert_eq!(d.gid(), 777);
    assert_ne!(d.mode() & libc::S_ISGID, 0, "new dir inherits setgid");
    assert_eq!(fs::symlink_metadata(g.join("ln")).unwrap().gid(), 777);
    // Outside it, the creator's group.
    assert_eq!(fs::metadata(fx.path("f")).unwrap().gid(), 0);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn setuid_is_cleared_by_a_write_of_another_user() {
    // allow_other, and a path the other user can walk.
    let fx = mount_fixture_with(|c| c.extra_options = vec!["allow_other".into()]);
    fs::set_permissions(fx.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for (name, how) in [
        ("cached", "printf x 1<> \"$0\""),
        ("appended", "printf x >> \"$0\""),
        ("truncated", "truncate -s 1 \"$0\""),
        ("emptied", ": > \"$0\""),
    ] {
        let p = fx.path(name);
        fs::write(&p, b"#!/bin/sh\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o6777)).unwrap();
        let status = Command::new("sh")
            .arg("-c")
            .arg(how)
            .arg(&p)
            .uid(65534)
            .gid(65534)
            .status()
            .unwrap();
        assert!(status.success(), "{name}: write as nobody failed");
        let mode = fs::metadata(&p).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o777, "{name}: setuid/setgid left: {mode:o}");
    }
    // Root (CAP_FSETID) keeps them.
    let p = fx.path("root");
    fs::write(&p, b"x").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4755)).unwrap();
    OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(b"y")
        .unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o4755);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn xattrs() {
    let fx = mount_fixture();
    let p = fx.path("hello.txt");
    setxattr(&p, "user.k", b"value\0bytes", 0).unwrap();
    assert_eq!(getxattr(&p, "user.k", 0).unwrap().len(), 11);
    assert_eq!(getxattr(&p, "user.k", 64).unwrap(), b"value\0bytes");
    assert_eq!(os_error(getxattr(&p, "user.k", 3)), libc::ERANGE);
    assert_eq!(
        os_error(setxattr(&p, "user.k", b"v", libc::XATTR_CREATE)),
        libc::EEXIST
    );
    assert_eq!(
        os_error(setxattr(&p, "user.missing", b"v", libc::XATTR_REPLACE)),
        libc::ENODATA
    );
    setxattr(&p, "user.k", b"new", libc::XATTR_REPLACE).unwrap();
    setxattr(&p, "user.a", b"", libc::XATTR_CREATE).unwrap();
    assert_eq!(listxattr(&p).unwrap(), b"user.a\0user.k\0");
    removexattr(&p, "user.k").unwrap();
    assert_eq!(os_error(getxattr(&p, "user.k", 64)), libc::ENODATA);
    assert_eq!(os_error(removexattr(&p, "user.k")), libc::ENODATA);
    assert_eq!(listxattr(&p).unwrap(), b"user.a\0");
    // On a directory too.
    setxattr(&fx.path("sub"), "user.d", b"dir", 0).unwrap();
    assert_eq!(getxattr(&fx.path("sub"), "user.d", 16).unwrap(), b"dir");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fsync_fdatasync_fsyncdir() {
    let fx = mount_fixture();
    let mut f = File::create(fx.path("durable")).unwrap();
    f.write_all(b"data").unwrap();
    f.sync_all().unwrap();
    f.write_all(b"more").unwrap();
    f.sync_data().unwrap();
    File::open(&fx.mounted.mnt).unwrap().sync_all().unwrap();
    File::open(fx.path("sub")).unwrap().sync_all().unwrap();
    assert_eq!(fs::read(fx.path("durable")).unwrap(), b"datamore");
    // The fork answers for what the mount wrote.
    assert_eq!(fork_read(fx.fork(), "durable"), b"datamore");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn shared_mmap_writes_reach_the_fork() {
    let fx = mount_fixture();
    let p = fx.path("mapped");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    let len = 3 * 4096;
    f.set_len(len as u64).unwrap();
    // SAFETY: a fresh shared mapping of len bytes of an open file.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", io::Error::last_os_error());
    // SAFETY: the mapping is len bytes long and writable.
    let bytes = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), len) };
    bytes[..5].copy_from_slice(b"mmap!");
    bytes[5000..5004].copy_from_slice(b"page");
    // SAFETY: map/len are the mapping made above.
    assert_eq!(unsafe { libc::msync(map, len, libc::MS_SYNC) }, 0);
    // SAFETY: as above; bytes is not used after this.
    assert_eq!(unsafe { libc::munmap(map, len) }, 0);
    drop(f);
    let got = read_all(&p);
    assert_eq!(&got[..5], b"mmap!");
    assert_eq!(&got[5000..5004], b"page");
    assert_eq!(got.len(), len);
    // msync wrote it to the journal: the fork's own read sees it.
    assert_eq!(&fork_read(fx.fork(), "mapped")[5000..5004], b"page");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn statfs_reports_the_store_file_system() {
    let fx = mount_fixture();
    let c = cstr(&fx.mounted.mnt);
    // SAFETY: all-zero bytes are a valid `struct statvfs` (plain integers).
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a statvfs buffer for the call.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    assert_eq!(rc, 0);
    assert_eq!(s.f_namemax, 255);
    assert_eq!(s.f_bsize, 4096);
    assert!(s.f_blocks > 0);
    assert!(s.f_bavail <= s.f_blocks);
    assert!(s.f_files >= 1);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn hostile_inputs_fail_cleanly() {
    let fx = mount_fixture();
    let long = "n".repeat(256);
    let ok = "n".repeat(255);
    assert_eq!(
        os_error(fs::write(fx.path(&long), b"x")),
        libc::ENAMETOOLONG
    );
    assert_eq!(os_error(fs::metadata(fx.path(&long))), libc::ENAMETOOLONG);
    assert_eq!(os_error(fs::create_dir(fx.path(&long))), libc::ENAMETOOLONG);
    assert_eq!(
        os_error(fs::rename(fx.path("hello.txt"), fx.path(&long))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        os_error(std::os::unix::fs::symlink("t", fx.path(&long))),
        libc::ENAMETOOLONG
    );
    fs::write(fx.path(&ok), b"255 is fine").unwrap();
    assert_eq!(fs::read(fx.path(&ok)).unwrap(), b"255 is fine");

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.path("big.bin"))
        .unwrap();
    let max = i64::MAX as u64;
    // Linux refuses an end past i64::MAX with EINVAL before FUSE sees it.
    let e = os_error(f.write_at(b"x", max));
    assert!(e == libc::EINVAL || e == libc::EFBIG, "errno {e}");
    assert_eq!(os_error(f.write_at(b"x", u64::MAX)), libc::EINVAL);
    assert_eq!(os_error(f.write_at(b"x", u64::MAX - 5)), libc::EINVAL);
    let e = os_error(f.write_at(b"0123", max - 3));
    assert!(e == libc::EINVAL || e == libc::EFBIG, "errno {e}");
    // Up to the largest size exactly: fine, and sparse.
    assert_eq!(f.write_at(b"012", max - 3).unwrap(), 3);
    assert_eq!(f.metadata().unwrap().len(), max);
    let mut buf = [0u8; 3];
    assert_eq!(f.read_at(&mut buf, max - 3).unwrap(), 3);
    assert_eq!(&buf, b"012");
    f.set_len(1000).unwrap();
    assert_eq!(os_error(fallocate(&f, 0, i64::MAX - 10, 100)), libc::EFBIG);
    assert_eq!(os_error(fallocate(&f, 0, -1, 100)), libc::EINVAL);
    // SAFETY: a valid open fd.
    let rc = unsafe { libc::ftruncate(f.as_raw_fd(), -1) };
    assert_eq!(os_error(check(rc.into())), libc::EINVAL);

    let big = vec![b'v'; 64 * 1024 + 1];
    let e = os_error(setxattr(&fx.path("hello.txt"), "user.big", &big, 0));
    assert!(e == libc::E2BIG || e == libc::ENOSPC, "errno {e}");
    let max_value = vec![b'v'; 64 * 1024];
    setxattr(&fx.path("hello.txt"), "user.max", &max_value, 0).unwrap();
    assert_eq!(
        getxattr(&fx.path("hello.txt"), "user.max", 64 * 1024).unwrap(),
        max_value
    );
    assert_eq!(
        os_error(setxattr(&fx.path("hello.txt"), "user.x", b"v", 3)),
        libc::EINVAL
    );
    fx.assert_alive();
    fx.assert_base_untouched();
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn commit_while_mounted_then_reopen() {
    let mut fx = mount_fixture();
    fs::write(fx.path("hello.txt"), b"changed in the fork\n").unwrap();
    fs::create_dir(fx.path("newdir")).unwrap();
    fs::write(fx.path("newdir/file"), pattern(5, 100_000)).unwrap();
    fs::remove_file(fx.path("sub/b")).unwrap();
    let keep_open = OpenOptions::new()
        .read(true)
        .write(true)
        .open(fx.path("big.bin"))
        .unwrap();
    keep_open.write_all_at(b"before commit", 10).unwrap();

    let head = fx.fork().commit("m").unwrap();
    assert_ne!(head, fx.base);
    let ckpt = fx.store.read_checkpoint(&head).unwrap();
    assert_eq!(ckpt.parents, vec![fx.base]);
    assert_eq!(ckpt.message, "m");

    // Writes continue after the commit, from another thread, and are visible.
    let mnt = fx.mounted.mnt.clone();
    std::thread::spawn(move || {
        fs::write(mnt.join("after"), b"after commit").unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(mnt.join("newdir/file"))
            .unwrap();
        f.write_all(b"tail").unwrap();
    })
    .join()
    .unwrap();
    keep_open.write_all_at(b"after commit!", 20).unwrap();
    assert_eq!(fs::read(fx.path("after")).unwrap(), b"after commit");
    let mut want_file = pattern(5, 100_000);
    want_file.extend_from_slice(b"tail");
    assert_eq!(fs::read(fx.path("newdir/file")).unwrap(), want_file);
    let mut want_big = pattern(1, 200 * 1024);
    want_big[10..23].copy_from_slice(b"before commit");
    want_big[20..33].copy_from_slice(b"after commit!");
    assert_eq!(fs::read(fx.path("big.bin")).unwrap(), want_big);
    drop(keep_open);

    // Unmount, drop our handle (the fork's lock goes with the last one),
    // reopen, and find everything.
    fx.mounted.unmount_and_join().unwrap();
    assert!(!is_mounted(&fx.mounted.mnt));
    drop(fx.fork.take());
    let fork = open_fork(fx.store.clone(), "f1").unwrap();
    assert_eq!(fork.head(), head);
    assert_eq!(fork_read(&fork, "hello.txt"), b"changed in the fork\n");
    assert_eq!(fork_read(&fork, "after"), b"after commit");
    assert_eq!(fork_read(&fork, "newdir/file"), want_file);
    assert_eq!(fork_read(&fork, "big.bin"), want_big);
    assert_eq!(fork_read(&fork, "sub/a"), b"a\n");
    assert!(fork.lookup(ROOT_INO, b"sub").is_ok());
    let sub = fork.lookup(ROOT_INO, b"sub").unwrap().ino;
    assert!(fork.lookup(sub, b"b").is_err());
    // The committed checkpoint has the pre-commit state.
    let entry = fx.store.lookup_path(&ckpt, b"hello.txt").unwrap().unwrap();
    let mut out = Vec::new();
    fx.store
        .copy_content(&entry, &mut out, "hello.txt")
        .unwrap();
    assert_eq!(out, b"changed in the fork\n");
    assert!(fx.store.lookup_path(&ckpt, b"after").unwrap().is_none());
    fx.assert_base_untouched();
}

// ------------------------------------------------------------ device nodes

fn mknod(p: &Path, mode: libc::mode_t, dev: libc::dev_t) -> io::Result<()> {
    let c = cstr(p);
    // SAFETY: a valid path string.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    check(rc.into()).map(|_| ())
}

/// The two device nodes the device tests make: a character device with small
/// numbers, and a block device whose major and minor need every field of the
/// kernel's 32-bit encoding (major > 255, minor > 65535).
const CHR: (u32, u32) = (1, 3);
const BLK: (u32, u32) = (259, 70_000);

/// (is char device, is block device, rdev, mode & 07777, uid, gid, nlink)
fn dev_stat(p: &Path) -> (bool, bool, u64, u32, u32, u32, u64) {
    use std::os::unix::fs::FileTypeExt;
    let m = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let t = m.file_type();
    (
        t.is_char_device(),
        t.is_block_device(),
        m.rdev(),
        m.mode() & 0o7777,
        m.uid(),
        m.gid(),
        m.nlink(),
    )
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn device_nodes_are_recorded_with_type_and_rdev() {
    use std::os::unix::fs::FileTypeExt;
    let mut fx = mount_fixture();
    let cdev = libc::makedev(CHR.0, CHR.1);
    let bdev = libc::makedev(BLK.0, BLK.1);
    // Modes without group/other write bits, so the umask cannot change them.
    mknod(&fx.path("chr"), libc::S_IFCHR | 0o640, cdev).unwrap();
    mknod(&fx.path("sub/blk"), libc::S_IFBLK | 0o604, bdev).unwrap();
    assert_eq!(
        dev_stat(&fx.path("chr")),
        (true, false, cdev, 0o640, 0, 0, 1)
    );
    assert_eq!(
        dev_stat(&fx.path("sub/blk")),
        (false, true, bdev, 0o604, 0, 0, 1)
    );
    // The same name again: EEXIST, as on any file system.
    let again = mknod(&fx.path("chr"), libc::S_IFCHR | 0o640, cdev);
    assert_eq!(os_error(again), libc::EEXIST);
    // The mount is nodev: the kernel refuses to open one.
    assert_eq!(os_error(File::open(fx.path("chr"))), libc::EACCES);

    // chmod, chown, link, rename, unlink, readdir.
    fs::set_permissions(fx.path("chr"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(fx.path("chr"), Some(1234), Some(5678)).unwrap();
    fs::hard_link(fx.path("chr"), fx.path("sub/chr2")).unwrap();
    assert_eq!(
        dev_stat(&fx.path("sub/chr2")),
        (true, false, cdev, 0o600, 1234, 5678, 2)
    );
    fs::rename(fx.path("sub/blk"), fx.path("blk")).unwrap();
    assert_eq!(
        os_error(fs::symlink_metadata(fx.path("sub/blk"))),
        libc::ENOENT
    );
    let types: Vec<(String, bool, bool)> = fs::read_dir(fx.mounted.mnt.clone())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                t.is_char_device(),
                t.is_block_device(),
            )
        })
        .filter(|(n, _, _)| n == "chr" || n == "blk")
        .collect();
    assert_eq!(types.len(), 2, "{types:?}");
    for (name, c, b) in types {
        assert_eq!((c, b), (name == "chr", name == "blk"), "{name}");
    }
    fs::remove_file(fx.path("sub/chr2")).unwrap();
    let want_chr = (true, false, cdev, 0o600, 1234, 5678, 1);
    let want_blk = (false, true, bdev, 0o604, 0, 0, 1);
    assert_eq!(dev_stat(&fx.path("chr")), want_chr);
    assert_eq!(dev_stat(&fx.path("blk")), want_blk);

    // Unmount and reopen the fork: the journal replays both nodes.
    fx.mounted.unmount_and_join().unwrap();
    drop(fx.fork.take());
    let fork = open_fork(fx.store.clone(), "f1").unwrap();
    let c = fork.lookup(ROOT_INO, b"chr").unwrap();
    assert_eq!(
        (c.kind, c.rdev, c.perm, c.uid, c.gid, c.nlink),
        (storefs::store::Kind::CharDev, cdev, 0o600, 1234, 5678, 1)
    );
    let b = fork.lookup(ROOT_INO, b"blk").unwrap();
    assert_eq!(
        (b.kind, b.rdev, b.perm),
        (storefs::store::Kind::BlockDev, bdev, 0o604)
    );

    // Commit folds them into the tree: kinds 5 and 6 with their rdev.
    let head = fork.commit("devices").unwrap();
    let ckpt = fx.store.read_checkpoint(&head).unwrap();
    let e = fx.store.lookup_path(&ckpt, b"chr").unwrap().unwrap();
    assert_eq!(
        (e.kind, e.rdev, e.perm, e.uid, e.gid, e.nlink),
        (storefs::store::Kind::CharDev, cdev, 0o600, 1234, 5678, 1)
    );
    let e = fx.store.lookup_path(&ckpt, b"blk").unwrap().unwrap();
    assert_eq!(
        (e.kind, e.rdev, e.perm),
        (storefs::store::Kind::BlockDev, bdev, 0o604)
    );
    assert!(fx.store.lookup_path(&ckpt, b"sub/chr2").unwrap().is_none());
    assert!(fx.store.lookup_path(&ckpt, b"sub/blk").unwrap().is_none());
    fx.assert_base_untouched();
}

/// Run the storefs binary with `--store`; its output, whatever the exit code.
fn storefs_cli(store: &Path, args: &[&OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("STOREFS_STORE")
        .output()
        .unwrap()
}

/// Run it and require success; its stdout.
fn storefs_ok(store: &Path, args: &[&str]) -> String {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let out = storefs_cli(store, &args);
    assert!(
        out.status.success(),
        "storefs {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A mount made by `storefs mount` (a daemon): unmounted without a commit
/// when dropped, also when the daemon is dead.
struct CliMount {
    store: PathBuf,
    mnt: PathBuf,
}

impl CliMount {
    fn mount(store: &Path, target: &str, mnt: &Path) -> CliMount {
        let guard = CliMount {
            store: store.to_path_buf(),
            mnt: mnt.to_path_buf(),
        };
        storefs_ok(store, &["mount", target, mnt.to_str().unwrap()]);
        guard
    }

    /// Unmount through the CLI (which commits) and require success.
    fn unmount(self) {
        storefs_ok(&self.store, &["umount", self.mnt.to_str().unwrap()]);
    }
}

impl Drop for CliMount {
    fn drop(&mut self) {
        let listed = fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(1) == self.mnt.to_str());
        if listed {
            let args = [
                OsStr::new("umount"),
                self.mnt.as_os_str(),
                OsStr::new("--no-commit"),
            ];
            if !storefs_cli(&self.store, &args).status.success() {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn device_nodes_survive_a_killed_daemon_commit_and_restore() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("file"), b"base\n").unwrap();
    let src_arg = src.to_str().unwrap();
    storefs_ok(&store, &["snapshot", src_arg, "--ref", "b"]);
    storefs_ok(&store, &["fork", "b", "--name", "f"]);
    let mnt = tmp.path().join("mnt");
    let cdev = libc::makedev(CHR.0, CHR.1);
    let bdev = libc::makedev(BLK.0, BLK.1);
    let want_chr = (true, false, cdev, 0o640, 1234, 5678, 1);
    let want_blk = (false, true, bdev, 0o604, 0, 0, 1);

    let m = CliMount::mount(&store, "f", &mnt);
    mknod(&mnt.join("chr"), libc::S_IFCHR | 0o640, cdev).unwrap();
    mknod(&mnt.join("blk"), libc::S_IFBLK | 0o604, bdev).unwrap();
    std::os::unix::fs::chown(mnt.join("chr"), Some(1234), Some(5678)).unwrap();
    File::open(&mnt).unwrap().sync_all().unwrap();

    // SIGKILL the daemon after the fsync; the journal brings both back.
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&storefs_ok(&store, &["status", "--json"])).unwrap();
    let pid = status[0]["pid"].as_i64().unwrap() as i32;
    // SAFETY: the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let live = |store| {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&storefs_ok(store, &["status", "--json"])).unwrap();
        list.iter().any(|m| m["mode"] != "dead")
    };
    while live(&store) {
        assert!(
            Instant::now() < deadline,
            "the killed daemon is still listed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(m); // clears the dead mount
    let m = CliMount::mount(&store, "f", &mnt);
    assert_eq!(dev_stat(&mnt.join("chr")), want_chr);
    assert_eq!(dev_stat(&mnt.join("blk")), want_blk);
    m.unmount(); // commits

    // The committed tree lists them as ls -l does: type letter, "major, minor".
    let ls = storefs_ok(&store, &["ls", "f"]);
    let line = |name: &str| {
        ls.lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("no {name} in\n{ls}"))
            .to_string()
    };
    let (c, b) = (line("chr"), line("blk"));
    assert!(c.starts_with("crw-r----- "), "{c}");
    assert!(c.contains(" 1234 ") && c.contains(" 5678 "), "{c}");
    assert!(c.contains(&format!(" {}, {} ", CHR.0, CHR.1)), "{c}");
    assert!(b.starts_with("brw----r-- "), "{b}");
    assert!(b.contains(&format!(" {}, {} ", BLK.0, BLK.1)), "{b}");

    // Restore as root makes the nodes with mknod, same numbers and owners.
    let dest = tmp.path().join("restored");
    storefs_ok(&store, &["restore", "f", dest.to_str().unwrap()]);
    assert_eq!(dev_stat(&dest.join("chr")), want_chr);
    assert_eq!(dev_stat(&dest.join("blk")), want_blk);
    assert_eq!(fs::read(dest.join("file")).unwrap(), b"base\n");

    // Without CAP_MKNOD the restore stops at the first device node, naming it
    // and the fix, with exit 1.
    let dest2 = tmp.path().join("restored2");
    let out = Command::new("setpriv")
        .args(["--inh-caps=-mknod", "--bounding-set=-mknod"])
        .arg(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&store)
        .args(["restore", "f"])
        .arg(&dest2)
        .env_remove("STOREFS_STORE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("blk: cannot create device node") && err.contains("restore as root"),
        "{err}"
    );
}

/// 30 directories of 40 files, each with `sub/` of 5 (1,410 entries), for a
/// fork whose inode table holds about 40 (see the test below).
fn build_wide_source(src: &Path) {
    for d in 0..30 {
        let dir = src.join(format!("d{d:02}"));
        fs::create_dir_all(dir.join("sub")).unwrap();
        for f in 0..40 {
            fs::write(dir.join(format!("f{f:02}")), format!("{d} {f}\n")).unwrap();
        }
        for f in 0..5 {
            fs::write(dir.join(format!("sub/s{f}")), pattern(d as u8, 3000 + f)).unwrap();
        }
    }
}

/// The output of `cmd`, which must succeed (else what it printed is shown).
fn output_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `find` of `root` as (path, kind, mode, links, size) lines, sorted.
fn listing(root: &Path) -> String {
    let out = output_of(Command::new("find").arg(root).args([
        "-mindepth",
        "1",
        "-printf",
        "%P %y %m %n %s\n",
    ]));
    let mut lines: Vec<_> = out.lines().map(String::from).collect();
    lines.sort();
    lines.join("\n")
}

/// Two trees have the same names, kinds, modes, link counts, sizes
/// (their listings: the first lines that differ are shown) and contents.
fn same_tree(a: &Path, b: &Path) {
    let (la, lb) = (listing(a), listing(b));
    let (sa, sb): (std::collections::BTreeSet<_>, std::collections::BTreeSet<_>) =
        (la.lines().collect(), lb.lines().collect());
    let only_a: Vec<_> = sa.difference(&sb).take(5).collect();
    let only_b: Vec<_> = sb.difference(&sa).take(5).collect();
    assert!(
        only_a.is_empty() && only_b.is_empty(),
        "{} has {only_a:?}, {} has {only_b:?}",
        a.display(),
        b.display()
    );
    output_of(Command::new("diff").arg("-r").arg(a).arg(b));
}

/// `script` run by `sh -e` in `dir`: its output.
fn sh_out(script: &str, dir: &Path) -> String {
    output_of(Command::new("sh").args(["-ec", script]).current_dir(dir))
}

/// The kernel forgets the inodes it does not use (`forget` reaches the
/// daemon for every file it had looked up).
fn drop_kernel_caches() {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

/// A fork whose inode table is far smaller than its tree (parking, docs/
/// design.md: its budget is a quarter of 64 KiB, about 40 inodes) serves a
/// walk, keeps every inode number, keeps an open file of a parked directory
/// readable after its unlink, and takes changes made by real tools through
/// numbers the kernel holds: the mount and the commit match the same tools
/// run on a native copy; so do git (init, add, commit, fsck, status,
/// ls-files), rsync and tar over the whole tree after the commit.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_tree_larger_than_the_inode_budget_matches_native() {
    let fx = mount_fixture_of(
        build_wide_source,
        |store| Fork::open_sized(store, "f1", 64 << 10),
        |_| {},
    );
    let mnt = fx.mounted.mnt.clone();
    let native = fx.tmp.path().join("native");
    output_of(
        Command::new("cp")
            .arg("-a")
            .arg(fx.tmp.path().join("src"))
            .arg(&native),
    );
    same_tree(&mnt, &native);
    // 1,410 entries loaded would take about 550 KB.
    let state = fx.fork().memory().state;
    assert!(state < 300 << 10, "the inode table holds {state} bytes");

    // Numbers survive parking, and the kernel forgetting them.
    let numbers =
        |root: &Path| output_of(Command::new("find").arg(root).args(["-printf", "%i %P\n"]));
    let before = numbers(&mnt);
    drop_kernel_caches();
    assert_eq!(numbers(&mnt), before);

    // An open file in a directory parked since: unlinked, still readable.
    let mut held = File::open(mnt.join("d05/f07")).unwrap();
    listing(&mnt);
    fs::remove_file(mnt.join("d05/f07")).unwrap();
    fs::remove_file(native.join("d05/f07")).unwrap();
    listing(&mnt);
    let mut got = String::new();
    held.read_to_string(&mut got).unwrap();
    assert_eq!(got, "5 7\n");
    drop(held);

    // Changes by tools, on both; the walks between park what they passed.
    // (The last two through cached entries only: the directories above
    // them stay parked.)
    let script = "find . -name s3 -path './d2*' -delete; echo more >> d07/f03; \
                  mv d08/sub d09/moved; cp -r d11 d11copy; rm -r d12; \
                  ln d14/f01 d14/hard; chmod 700 d10/sub; touch -d @1000000000 d13/sub";
    sh_out(script, &mnt);
    sh_out(script, &native);
    let head = fx.fork().commit("parked").unwrap();
    same_tree(&mnt, &native);

    // The commit holds the same tree: read back through the store.
    let restored = fx.tmp.path().join("restored");
    storefs_ok(
        fx.tmp.path().join("store").as_path(),
        &["restore", &head.to_string(), restored.to_str().unwrap()],
    );
    same_tree(&restored, &native);
    let mtime = |root: &Path| fs::metadata(root.join("d13/sub")).unwrap().mtime();
    assert_eq!(mtime(&mnt), 1_000_000_000);
    assert_eq!(mtime(&restored), 1_000_000_000);
    drop_kernel_caches();
    same_tree(&mnt, &native);

    // After the commit (what it stored is parked again): git, rsync and tar
    // over the whole tree, on both. Git's objects and index hold times, so
    // what is compared is what git says of the tree.
    let tools = "git init -q . && git add -A && \
                 git -c user.name=t -c user.email=t@example.com commit -qm all && \
                 git fsck --no-progress && git status --porcelain && git ls-files -s && \
                 rm -rf .git && rsync -a d00/ d00-rsync/ && \
                 mkdir untar && tar cf - d01 d13 | tar xf - -C untar";
    let said = sh_out(tools, &mnt);
    assert_eq!(said, sh_out(tools, &native));
    assert!(said.lines().count() > 1000, "git lists the tree: {said}");
    same_tree(&mnt, &native);
}
