//! Real FUSE mounts of a small checkpoint built with the store API. Needs root
//! (or fusermount3) and /dev/fuse.
//!
//! Tests run one at a time (`SERIAL`): the signal test finds the daemon's signal
//! thread by name, and must not find another test's.

mod common;

use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use storefs::daemon::{serve, unmount};
use storefs::fs::{MountConfig, MountError, mount_checkpoint};
use storefs::store::{Checkpoint, Content, Entry, Extent, Kind, ObjectId, Source, Store, Tree};

static SERIAL: Mutex<()> = Mutex::new(());

/// Everything the daemon logs in this test binary (a global subscriber, so
/// every thread's events land here).
static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct LogWriter;

impl io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        LOGS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn capture_logs() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| LogWriter)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
    });
}

fn logs() -> String {
    String::from_utf8_lossy(&LOGS.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
}

const MTIME_NS: i64 = 1_700_000_000_123_456_789;
const CTIME_NS: i64 = 1_700_000_100_000_000_007;
const LINK_TARGET: &[u8] = b"/srv/origin/abs/target";
const XATTR_VALUE: &[u8] = b"v\0\xffalue";
const NON_UTF8_NAME: &[u8] = b"caf\xe9.txt";
const BAD_CONTENT: &[u8] = b"this chunk is corrupted on disk before the first read";

/// A pattern of `len` bytes that differs for each `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + seed as u64 * 7 + i as u64 / 251) as u8)
        .collect()
}

/// The expected bytes of multi.bin: 1000 of A, 5000 zeros, 3000 of B, 2000 of C.
fn multi_bytes() -> Vec<u8> {
    let mut v = pattern(1, 1000);
    v.extend(std::iter::repeat_n(0u8, 5000));
    v.extend(pattern(2, 3000));
    v.extend(pattern(3, 2000));
    v
}

fn entry(name: &[u8], kind: Kind, perm: u32, content: Content) -> Entry {
    let size = match &content {
        Content::Extents(ext) => ext.iter().map(|e| e.len).sum(),
        Content::Target(t) => t.len() as u64,
        _ => 0,
    };
    Entry {
        name: name.to_vec(),
        kind,
        perm,
        uid: 0,
        gid: 0,
        mtime_ns: MTIME_NS,
        ctime_ns: CTIME_NS,
        size,
        nlink: if kind == Kind::Dir { 2 } else { 1 },
        link_id: 0,
        rdev: 0,
        xattrs: vec![],
        flags: 0,
        content,
    }
}

/// A one-chunk file.
fn small_file(store: &Store, name: &[u8], perm: u32, data: &[u8]) -> Entry {
    let extents = if data.is_empty() {
        vec![]
    } else {
        let (id, _) = store.put_object(data).unwrap();
        vec![Extent {
            len: data.len() as u64,
            id: Some(id),
        }]
    };
    entry(name, Kind::File, perm, Content::Extents(extents))
}

fn dir(store: &Store, name: &[u8], entries: Vec<Entry>) -> Entry {
    let mut tree = Tree { entries };
    tree.sort();
    let (id, _) = store.put_tree(&tree).unwrap();
    entry(name, Kind::Dir, 0o755, Content::Tree(id))
}

/// Build the test checkpoint; returns its id and the id of bad.txt's chunk.
fn build_checkpoint(store: &Store) -> (ObjectId, ObjectId) {
    let mut parts = Vec::new();
    for (seed, len) in [(1u8, 1000usize), (2, 3000), (3, 2000)] {
        let (id, _) = store.put_object(&pattern(seed, len)).unwrap();
        parts.push(Extent {
            len: len as u64,
            id: Some(id),
        });
    }
    parts.insert(
        1,
        Extent {
            len: 5000,
            id: None,
        },
    );
    let mut multi = entry(b"multi.bin", Kind::File, 0o640, Content::Extents(parts));
    multi.uid = 1234;
    multi.gid = 5678;

    let mut hard_a = small_file(store, b"hard_a", 0o644, b"hardlinked\n");
    hard_a.nlink = 2;
    hard_a.link_id = 7;
    let mut hard_b = hard_a.clone();
    hard_b.name = b"hard_b".to_vec();

    let mut xattr_file = small_file(store, b"xattr_file", 0o644, b"x");
    xattr_file.xattrs = vec![(b"user.k".to_vec(), XATTR_VALUE.to_vec())];

    let bad = small_file(store, b"bad.txt", 0o644, BAD_CONTENT);
    let Content::Extents(ext) = &bad.content else {
        unreachable!()
    };
    let bad_id = ext[0].id.unwrap();

    let sub = dir(
        store,
        b"sub",
        vec![hard_a, dir(store, b"deeper_empty", vec![])],
    );
    let mut root = dir(
        store,
        b"",
        vec![
            multi,
            hard_b,
            xattr_file,
            bad,
            sub,
            dir(store, b"empty_dir", vec![]),
            entry(
                b"abs_link",
                Kind::Symlink,
                0o777,
                Content::Target(LINK_TARGET.to_vec()),
            ),
            small_file(store, NON_UTF8_NAME, 0o644, b"non-utf8 name\n"),
            small_file(store, b"setuid_bin", 0o4755, b"#!/bin/sh\nexit 0\n"),
            small_file(store, b"empty.txt", 0o644, b""),
        ],
    );
    root.nlink = 4;
    let (root_id, _) = store.put_root(root).unwrap();
    let ckpt = Checkpoint {
        version: 1,
        root: root_id,
        parents: vec![],
        origin: Some("/srv/origin".into()),
        time_ns: MTIME_NS,
        message: "fs_mount test".into(),
        source: Source {
            kind: "snapshot".into(),
            ..Default::default()
        },
    };
    (store.write_checkpoint(&ckpt).unwrap(), bad_id)
}

/// A mounted test checkpoint. Dropping it (also on panic) unmounts and joins
/// the serving thread; the temp dirs go after.
struct Fixture {
    mounted: MountGuard,
    store: Arc<Store>,
    bad_id: ObjectId,
    _tmp: tempfile::TempDir,
    _serial: MutexGuard<'static, ()>,
}

struct MountGuard {
    mnt: PathBuf,
    serving: Option<JoinHandle<io::Result<()>>>,
}

impl MountGuard {
    /// Wait (bounded) for serve() to return, and give its result.
    fn wait_serve(&mut self) -> io::Result<()> {
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
        // Join without panicking (this may run during a panic).
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

fn mount_config(mnt: &Path) -> MountConfig {
    MountConfig {
        mountpoint: mnt.to_path_buf(),
        fsname: "test".into(),
        extra_options: vec![],
        cache_bytes: 1 << 20,
        threads: 2,
        writeback_cache: false,
        transport: common::transport(),
    }
}

fn mount_fixture() -> Fixture {
    mount_fixture_with(|_| {})
}

/// Mount the test checkpoint after `adjust` has changed the default config.
fn mount_fixture_with(adjust: impl FnOnce(&mut MountConfig)) -> Fixture {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    capture_logs();
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let (ckpt, bad_id) = build_checkpoint(&store);
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut cfg = mount_config(&mnt);
    adjust(&mut cfg);
    let mounted = mount_checkpoint(store.clone(), ckpt, &cfg).unwrap();
    let serving = std::thread::spawn(move || serve(mounted));
    Fixture {
        mounted: MountGuard {
            mnt,
            serving: Some(serving),
        },
        store,
        bad_id,
        _tmp: tmp,
        _serial: serial,
    }
}

impl Fixture {
    fn path(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.mounted.mnt.join(name.as_ref())
    }
}

/// The /proc/mounts line for `mnt`, if mounted.
fn mount_line(mnt: &Path) -> Option<String> {
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    let want = mnt.to_str().unwrap();
    mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(want))
        .map(str::to_string)
}

fn is_mounted(mnt: &Path) -> bool {
    mount_line(mnt).is_some()
}

fn os_error<T: std::fmt::Debug>(r: io::Result<T>) -> Option<i32> {
    r.expect_err("operation should fail").raw_os_error()
}

fn read_at(f: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[done..], offset + done as u64).unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// lgetxattr with a buffer of `size` bytes: Ok(value or length) or the errno.
fn lgetxattr(p: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let name = CString::new(name).unwrap();
    let mut buf = vec![0u8; size];
    // SAFETY: pointers are valid for the given sizes.
    let n = unsafe {
        libc::lgetxattr(
            c_path(p).as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            size,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap());
    }
    if size == 0 {
        return Ok(n.to_string().into_bytes());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// All names in a directory as readdir(3) returns them, "." and ".." included.
fn raw_listing(p: &Path) -> Vec<Vec<u8>> {
    let mut names = Vec::new();
    // SAFETY: standard opendir/readdir/closedir use on a valid path.
    unsafe {
        let d = libc::opendir(c_path(p).as_ptr());
        assert!(!d.is_null(), "opendir {}", p.display());
        loop {
            let ent = libc::readdir(d);
            if ent.is_null() {
                break;
            }
            names.push(
                std::ffi::CStr::from_ptr((*ent).d_name.as_ptr())
                    .to_bytes()
                    .to_vec(),
            );
        }
        libc::closedir(d);
    }
    names.sort();
    names
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn file_bytes_at_any_offset() {
    let fx = mount_fixture();
    let expected = multi_bytes();
    assert_eq!(fs::read(fx.path("multi.bin")).unwrap(), expected);

    let f = File::open(fx.path("multi.bin")).unwrap();
    let cases: &[(u64, usize)] = &[
        (0, 1),
        (990, 20),     // A -> hole
        (999, 2),      // last byte of A, first of the hole
        (1000, 5000),  // exactly the hole
        (3000, 100),   // inside the hole
        (5990, 20),    // hole -> B
        (8990, 20),    // B -> C
        (500, 10_000), // across every extent
        (10_990, 20),  // short read at the end
        (11_000, 10),  // at the end
        (50_000, 10),  // past the end
    ];
    for &(offset, len) in cases {
        let start = (offset as usize).min(expected.len());
        let end = (offset as usize + len).min(expected.len());
        assert_eq!(
            read_at(&f, offset, len),
            &expected[start..end],
            "read of {len} at {offset}"
        );
    }
    // Pseudo-random offsets and lengths.
    let mut x: u64 = 12345;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (x >> 33) % 11_100;
        let len = ((x >> 13) % 3000) as usize + 1;
        let start = (offset as usize).min(expected.len());
        let end = (offset as usize + len).min(expected.len());
        assert_eq!(read_at(&f, offset, len), &expected[start..end]);
    }

    assert_eq!(fs::read(fx.path("hard_b")).unwrap(), b"hardlinked\n");
    assert_eq!(fs::read(fx.path("sub/hard_a")).unwrap(), b"hardlinked\n");
    assert_eq!(
        fs::read(fx.path(OsStr::from_bytes(NON_UTF8_NAME))).unwrap(),
        b"non-utf8 name\n"
    );
    assert_eq!(fs::read(fx.path("empty.txt")).unwrap(), b"");
    assert_eq!(fs::read(fx.path("bad.txt")).unwrap(), BAD_CONTENT);
    // A second read is served from caches and is still right.
    assert_eq!(fs::read(fx.path("multi.bin")).unwrap(), expected);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn metadata_matches_the_checkpoint() {
    let fx = mount_fixture();
    let m = fs::metadata(fx.path("multi.bin")).unwrap();
    assert!(m.is_file());
    assert_eq!(m.mode(), libc::S_IFREG | 0o640);
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    assert_eq!(m.size(), 11_000);
    assert_eq!(
        m.blocks(),
        24,
        "as ext4: the 4 KiB blocks data touches (0, 1, 2); the hole covers none whole"
    );
    assert_eq!(m.blksize(), 4096);
    assert_eq!(m.nlink(), 1);
    assert_eq!(m.mtime() * 1_000_000_000 + m.mtime_nsec(), MTIME_NS);
    assert_eq!(m.atime() * 1_000_000_000 + m.atime_nsec(), MTIME_NS);
    assert_eq!(m.ctime() * 1_000_000_000 + m.ctime_nsec(), CTIME_NS);

    let setuid = fs::metadata(fx.path("setuid_bin")).unwrap();
    assert_eq!(setuid.mode() & 0o7777, 0o4755);

    let a = fs::metadata(fx.path("sub/hard_a")).unwrap();
    let b = fs::metadata(fx.path("hard_b")).unwrap();
    assert_eq!(a.ino(), b.ino(), "hardlinks are one inode");
    assert_eq!((a.nlink(), b.nlink()), (2, 2));
    assert_ne!(a.ino(), m.ino());
    assert_eq!(fs::metadata(fx.path("multi.bin")).unwrap().ino(), m.ino());

    let root = fs::metadata(fx.path("")).unwrap();
    assert!(root.is_dir());
    assert_eq!(root.mode() & 0o7777, 0o755);
    assert!(fs::metadata(fx.path("empty_dir")).unwrap().is_dir());

    // Symlink: not followed, target byte-exact.
    let l = fs::symlink_metadata(fx.path("abs_link")).unwrap();
    assert!(l.file_type().is_symlink());
    assert_eq!(l.size(), LINK_TARGET.len() as u64);
    assert_eq!(
        fs::read_link(fx.path("abs_link"))
            .unwrap()
            .into_os_string()
            .into_vec(),
        LINK_TARGET
    );
    assert_eq!(
        os_error(fs::read_link(fx.path("multi.bin"))),
        Some(libc::EINVAL)
    );

    // Xattrs: size probe, value, too-small buffer, absent name, list.
    let xf = fx.path("xattr_file");
    assert_eq!(
        lgetxattr(&xf, "user.k", 0).unwrap(),
        XATTR_VALUE.len().to_string().into_bytes()
    );
    assert_eq!(lgetxattr(&xf, "user.k", 64).unwrap(), XATTR_VALUE);
    assert_eq!(lgetxattr(&xf, "user.k", 2), Err(libc::ERANGE));
    assert_eq!(lgetxattr(&xf, "user.absent", 64), Err(libc::ENODATA));
    let mut list = vec![0u8; 64];
    // SAFETY: buffer valid for its length.
    let n = unsafe { libc::llistxattr(c_path(&xf).as_ptr(), list.as_mut_ptr().cast(), list.len()) };
    assert_eq!(n, 7);
    assert_eq!(&list[..7], b"user.k\0");

    // Listings, with . and .., and a non-UTF-8 name.
    let mut want: Vec<Vec<u8>> = [
        ".",
        "..",
        "abs_link",
        "bad.txt",
        "empty.txt",
        "empty_dir",
        "hard_b",
        "multi.bin",
        "setuid_bin",
        "sub",
        "xattr_file",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    want.push(NON_UTF8_NAME.to_vec());
    want.sort();
    assert_eq!(raw_listing(&fx.path("")), want);
    assert_eq!(
        raw_listing(&fx.path("empty_dir")),
        [b".".to_vec(), b"..".to_vec()]
    );
    let sub: Vec<OsString> = fs::read_dir(fx.path("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let mut sub: Vec<&str> = sub.iter().map(|n| n.to_str().unwrap()).collect();
    sub.sort();
    assert_eq!(sub, ["deeper_empty", "hard_a"]);
    // readdir's inode numbers agree with stat's.
    for e in fs::read_dir(fx.path("")).unwrap() {
        let e = e.unwrap();
        assert_eq!(e.ino(), fs::symlink_metadata(e.path()).unwrap().ino());
    }
    assert_eq!(
        os_error(fs::metadata(fx.path("no_such_file"))),
        Some(libc::ENOENT)
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn writes_fail_with_erofs() {
    let fx = mount_fixture();
    let file = fx.path("multi.bin");
    let erofs = Some(libc::EROFS);
    assert_eq!(os_error(File::create(fx.path("new.txt"))), erofs);
    assert_eq!(os_error(OpenOptions::new().write(true).open(&file)), erofs);
    assert_eq!(
        os_error(OpenOptions::new().read(true).write(true).open(&file)),
        erofs
    );
    assert_eq!(os_error(OpenOptions::new().append(true).open(&file)), erofs);
    assert_eq!(os_error(fs::remove_file(&file)), erofs);
    assert_eq!(os_error(fs::create_dir(fx.path("newdir"))), erofs);
    assert_eq!(os_error(fs::remove_dir(fx.path("empty_dir"))), erofs);
    assert_eq!(os_error(fs::rename(&file, fx.path("moved"))), erofs);
    assert_eq!(os_error(fs::hard_link(&file, fx.path("link"))), erofs);
    assert_eq!(
        os_error(std::os::unix::fs::symlink("/x", fx.path("sym"))),
        erofs
    );
    assert_eq!(
        os_error(fs::set_permissions(
            &file,
            fs::Permissions::from_mode(0o777)
        )),
        erofs
    );
    // SAFETY: valid path and name strings, value buffer of 1 byte.
    let rc = unsafe {
        libc::lsetxattr(
            c_path(&file).as_ptr(),
            c"user.new".as_ptr(),
            b"v".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(rc, -1);
    assert_eq!(io::Error::last_os_error().raw_os_error(), erofs);
    // SAFETY: valid path string.
    let rc = unsafe { libc::access(c_path(&file).as_ptr(), libc::W_OK) };
    assert_eq!(rc, -1);
    assert_eq!(io::Error::last_os_error().raw_os_error(), erofs);
    // Nothing changed.
    assert_eq!(fs::read(&file).unwrap(), multi_bytes());
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn corrupt_chunk_fails_only_that_file() {
    let fx = mount_fixture();
    // Replace bad.txt's chunk with valid zstd of other bytes, before any read.
    let hex = fx.bad_id.to_hex();
    fx.store
        .replace_stored_object(
            &fx.bad_id,
            &zstd::bulk::compress(b"other bytes", 3).unwrap(),
        )
        .unwrap();

    let err = fs::read(fx.path("bad.txt")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // The daemon warned, naming the object and the file.
    let log = logs();
    let warned = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains(&hex))
        .unwrap_or_else(|| panic!("no warning for {hex} in:\n{log}"));
    assert!(
        warned.contains(fx.path("bad.txt").to_str().unwrap()),
        "{warned}"
    );
    let mut f = File::open(fx.path("bad.txt")).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(
        f.read(&mut buf).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    // stat still works; everything else reads fine.
    assert_eq!(
        fs::metadata(fx.path("bad.txt")).unwrap().len(),
        BAD_CONTENT.len() as u64
    );
    assert_eq!(fs::read(fx.path("multi.bin")).unwrap(), multi_bytes());
    assert_eq!(fs::read(fx.path("hard_b")).unwrap(), b"hardlinked\n");
    assert_eq!(raw_listing(&fx.path("sub")).len(), 4);

    // A corrupt tree object: listing that directory fails, the rest works.
    let empty_tree = ObjectId::of(&Tree::default().encode());
    let (_, _, len) = fx.store.backend().locate(&empty_tree).unwrap().unwrap();
    fx.store
        .replace_stored_object(&empty_tree, &vec![b'x'; len as usize])
        .unwrap();
    let err = fs::read_dir(fx.path("empty_dir"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // sub/deeper_empty has the same (empty) tree, but listing `sub` above
    // read it, verified, for deeper_empty's size: its entries are in memory.
    assert_eq!(
        os_error(fs::metadata(fx.path("sub/deeper_empty/x"))),
        Some(libc::ENOENT)
    );
    assert_eq!(fs::read(fx.path("sub/hard_a")).unwrap(), b"hardlinked\n");
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn second_read_is_served_from_the_kernel_page_cache() {
    // No chunk cache in the daemon: only the kernel can serve a second read.
    let fx = mount_fixture_with(|cfg| cfg.cache_bytes = 0);
    assert_eq!(fs::read(fx.path("bad.txt")).unwrap(), BAD_CONTENT);
    assert!(fx.store.backend().remove(&fx.bad_id).unwrap());
    // FOPEN_KEEP_CACHE: a new open keeps the pages; the object is not read again.
    assert_eq!(fs::read(fx.path("bad.txt")).unwrap(), BAD_CONTENT);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn mount_options_show_and_unmount_ends_serve() {
    let mut fx = mount_fixture();
    let line = mount_line(&fx.mounted.mnt).expect("mounted");
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[0], "test", "{line}");
    assert_eq!(fields[2], "fuse.storefs", "{line}");
    let opts: Vec<&str> = fields[3].split(',').collect();
    for want in ["ro", "nosuid", "nodev", "default_permissions"] {
        assert!(opts.contains(&want), "{want} missing from {line}");
    }
    unmount(&fx.mounted.mnt).unwrap();
    fx.mounted.wait_serve().unwrap();
    assert!(!is_mounted(&fx.mounted.mnt));
    let err = unmount(&fx.mounted.mnt).unwrap_err();
    assert!(
        err.to_string().contains(fx.mounted.mnt.to_str().unwrap()),
        "error names the path: {err}"
    );
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn stop_signal_unmounts_cleanly() {
    let mut fx = mount_fixture();
    assert_eq!(fs::read(fx.path("hard_b")).unwrap(), b"hardlinked\n");
    // Direct SIGTERM at the daemon's signal thread (a process-wide signal would
    // kill the test harness, whose threads do not block it).
    let tid = signal_thread_tid().expect("storefs-signals thread");
    // SAFETY: tgkill on our own process and one of its threads.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    fx.mounted.wait_serve().unwrap();
    assert!(!is_mounted(&fx.mounted.mnt));
}

/// The thread id of the (only) running storefs signal thread.
fn signal_thread_tid() -> Option<libc::pid_t> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        for task in fs::read_dir("/proc/self/task").unwrap() {
            let task = task.unwrap();
            let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() == "storefs-signals" {
                return task.file_name().to_str()?.parse().ok();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn conflicting_options_are_refused_before_mounting() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
    let (ckpt, _) = build_checkpoint(&store);
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    for bad in ["rw", "suid", "dev", "auto_unmount", "fsname=x"] {
        let mut cfg = mount_config(&mnt);
        cfg.extra_options = vec![bad.into()];
        let r = mount_checkpoint(store.clone(), ckpt, &cfg);
        assert!(matches!(r, Err(MountError::BadOption { .. })), "{bad}");
    }
    let mut cfg = mount_config(&mnt);
    cfg.mountpoint = tmp.path().join("missing");
    let r = mount_checkpoint(store.clone(), ckpt, &cfg);
    assert!(matches!(r, Err(MountError::Mount { .. })));
    assert!(!is_mounted(&mnt));
}
