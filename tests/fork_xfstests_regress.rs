//! xfstests failures on a fork mount (issue 41), one test per failure fixed,
//! each doing what the xfstests case does and checking what it checks (the
//! full comparison with ext4 is `tests/conformance/xfstests.sh`); file
//! handles on a checkpoint mount too. Needs root and /dev/fuse; every mount
//! is unmounted by a guard, on failure too.

mod common;

use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use common::Env;

/// A store with a fork `f` of an empty checkpoint, mounted at `mnt`.
fn mount_fork(env: &Env) -> common::MountGuard {
    mount_fork_with(env, &[])
}

/// [`mount_fork`] with these `storefs mount` arguments too.
fn mount_fork_with(env: &Env, extra: &[&str]) -> common::MountGuard {
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let origin = env.path("origin");
    fs::create_dir(&origin).unwrap();
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    env.ok(["fork", "base", "--name", "f"]);
    let mnt = env.path("mnt");
    let mut args = vec!["mount".as_ref(), "f".as_ref(), mnt.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let out = env.run(args);
    let guard = env.guard_for("f");
    assert!(out.status.success(), "mount: {}", common::stderr(&out));
    guard
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// `fstat` of an open descriptor.
fn fstat(f: &fs::File) -> std::io::Result<fs::Metadata> {
    f.metadata()
}

/// generic/035: a directory held open answers `fstat` (nlink 0) once a
/// rename replaced it or an rmdir removed it; a file replaced by a rename
/// too. Was ESTALE/ENOENT for directories.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fstat_of_an_open_directory_replaced_or_removed_answers_with_nlink_0() {
    let env = Env::new();
    let m = mount_fork(&env);
    let d = m.path();
    for (a, b, dir) in [("file1", "file2", false), ("dir1", "dir2", true)] {
        let (pa, pb) = (d.join(a), d.join(b));
        if dir {
            fs::create_dir(&pa).unwrap();
            fs::create_dir(&pb).unwrap();
        } else {
            fs::write(&pa, b"a").unwrap();
            fs::write(&pb, b"b").unwrap();
        }
        let held = fs::File::open(&pb).unwrap();
        fs::rename(&pa, &pb).unwrap();
        let st = fstat(&held).unwrap_or_else(|e| panic!("fstat of replaced {b}: {e}"));
        assert_eq!(st.nlink(), 0, "{b} replaced by a rename");
        assert_eq!(st.is_dir(), dir);
        drop(held);
        // The new one is there, with its links.
        let now = fs::metadata(&pb).unwrap();
        assert_eq!(now.nlink(), if dir { 2 } else { 1 });
    }
    // rmdir of a directory held open.
    let gone = d.join("gone");
    fs::create_dir(&gone).unwrap();
    let held = fs::File::open(&gone).unwrap();
    let ino = held.metadata().unwrap().ino();
    fs::remove_dir(&gone).unwrap();
    let st = fstat(&held).expect("fstat of a removed directory");
    assert_eq!((st.nlink(), st.ino(), st.is_dir()), (0, ino, true));
    drop(held);
    assert!(!gone.exists());
    // A new directory of that name is another one.
    fs::create_dir(&gone).unwrap();
    assert_ne!(fs::metadata(&gone).unwrap().ino(), ino);
    assert_eq!(fs::metadata(&gone).unwrap().nlink(), 2);
    m.unmount();
}

/// generic/069: several writers appending 4-byte integers through
/// `O_APPEND` at once, each file read back whole and in order before any
/// commit (its first read walked the rest of the file at every read: a
/// million appends took a minute; the time is measured, not asserted:
/// `journal::tests::tiny_appends_read_time`).
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn files_of_many_tiny_o_append_writes_read_back_whole() {
    let env = Env::new();
    let m = mount_fork(&env);
    let sizes = [1u32, 20, 300, 40_000, 150_000, 12_345];
    std::thread::scope(|s| {
        for n in sizes {
            let p = m.path().join(format!("testfile.{n}"));
            s.spawn(move || {
                let mut f = fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                    .unwrap();
                for i in 0..n {
                    assert_eq!(f.write(&i.to_ne_bytes()).unwrap(), 4);
                }
            });
        }
    });
    for n in sizes {
        let mut data = Vec::new();
        fs::File::open(m.path().join(format!("testfile.{n}")))
            .unwrap()
            .read_to_end(&mut data)
            .unwrap();
        assert_eq!(data.len(), 4 * n as usize, "testfile.{n}");
        for (i, w) in data.chunks(4).enumerate() {
            assert_eq!(w, (i as u32).to_ne_bytes(), "testfile.{n} at {}", i * 4);
        }
    }
    m.unmount();
}

/// `fallocate(fd, mode, offset, len)`; the errno on failure.
fn fallocate(f: &fs::File, mode: i32, offset: u64, len: u64) -> Result<(), i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid descriptor; plain integers.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, len as i64) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    }
}

/// Free space of the file system at `p`, in bytes (as `df` shows it).
fn avail(p: &Path) -> u64 {
    // SAFETY: a zeroed statvfs is valid for statvfs to fill.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and buffer.
    assert_eq!(unsafe { libc::statvfs(cstr(p).as_ptr(), &mut s) }, 0);
    s.f_bavail * s.f_frsize
}

/// generic/213: `fallocate` of twice the free space fails with ENOSPC (it
/// succeeded); one of less than it succeeds, shows as used in `statfs`
/// while the file lives, and its space comes back with the file.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fallocate_of_more_than_the_free_space_fails_with_enospc() {
    let env = Env::new();
    let m = mount_fork(&env);
    let p = m.path().join("ouch");
    let free = avail(m.path());
    let f = fs::File::create(&p).unwrap();
    assert_eq!(fallocate(&f, 0, 0, 2 * free), Err(libc::ENOSPC));
    assert_eq!(
        f.metadata().unwrap().len(),
        0,
        "a refused fallocate changes nothing"
    );
    let keep = libc::FALLOC_FL_KEEP_SIZE;
    assert_eq!(fallocate(&f, keep, 0, 2 * free), Err(libc::ENOSPC));
    let some = (free / 4).min(1 << 30) & !4095;
    fallocate(&f, 0, 0, some).unwrap();
    assert_eq!(f.metadata().unwrap().len(), some);
    let after = avail(m.path());
    assert!(
        after + some / 2 < free,
        "the reservation shows as used: {free} free before, {after} after {some}"
    );
    // Twice what is left now fails too.
    assert_eq!(fallocate(&f, 0, some, 2 * after), Err(libc::ENOSPC));
    drop(f);
    fs::remove_file(&p).unwrap();
    assert!(
        avail(m.path()) + some / 2 > free,
        "the space comes back with the file"
    );
    m.unmount();
}

/// generic/568: `fallocate` counts the blocks it reserves in `st_blocks`
/// (it left 0), and a write into the range does not add any; past the end
/// with `KEEP_SIZE` too; a hole punched or a truncate gives them back.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn fallocate_counts_blocks_and_a_write_in_the_range_adds_none() {
    let env = Env::new();
    let m = mount_fork(&env);
    let p = m.path().join("falloctest");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .mode(0o644)
        .open(&p)
        .unwrap();
    let blocks = || fs::metadata(&p).unwrap().blocks();
    // Two bytes across a block boundary: two blocks.
    fallocate(&f, 0, 4095, 2).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 4097);
    assert_eq!(blocks(), 16, "two 4 KiB blocks reserved");
    use std::os::unix::fs::FileExt;
    f.write_all_at(b"xy", 4095).unwrap();
    assert_eq!(blocks(), 16, "the write landed in reserved blocks");
    assert_eq!(f.metadata().unwrap().len(), 4097, "and kept the size");
    let mut back = [0u8; 4097];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back[..4095].iter().all(|&b| b == 0));
    assert_eq!(&back[4095..], b"xy");
    // KEEP_SIZE past the end: counted, the size unchanged.
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 8192, 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 4097);
    assert_eq!(blocks(), 16 + (1 << 20) / 512);
    // A hole punched in it gives its blocks back; so does a truncate.
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    fallocate(&f, punch, 8192, 1 << 19).unwrap();
    assert_eq!(blocks(), 16 + (1 << 19) / 512);
    f.set_len(4097).unwrap();
    assert_eq!(blocks(), 16);
    drop(f);
    m.unmount();
}

/// `struct file_handle` with room for the largest handle (`MAX_HANDLE_SZ`).
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; libc::MAX_HANDLE_SZ as usize],
}

/// `name_to_handle_at(AT_FDCWD, p, …, 0)`.
fn handle_of(p: &Path) -> FileHandle {
    let mut h = FileHandle {
        handle_bytes: libc::MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; libc::MAX_HANDLE_SZ as usize],
    };
    let mut mount_id: libc::c_int = 0;
    let path = cstr(p);
    // SAFETY: a NUL-terminated path, a handle with room for the
    // `handle_bytes` it says, and an int for the mount id.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            path.as_ptr(),
            &mut h as *mut FileHandle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    let e = std::io::Error::last_os_error();
    assert_eq!(r, 0, "name_to_handle_at {}: {e}", p.display());
    h
}

/// `open_by_handle_at(mount, h, O_RDONLY)`: the file, or the errno.
fn open_by_handle(mount: &fs::File, h: &FileHandle) -> Result<fs::File, i32> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a valid descriptor and a handle name_to_handle_at filled.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            h as *const FileHandle,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    // SAFETY: a descriptor the call just opened, owned by nothing else.
    Ok(unsafe { fs::File::from_raw_fd(fd as i32) })
}

/// The kernel drops every dentry and inode it is not using: a handle then
/// resolves through the daemon (FUSE LOOKUP of "." by node id).
fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
}

/// generic/426, 467, 477 (issue 41): a file handle opens its file and its
/// directory once the kernel forgot them (export support: the daemon
/// answers "." by inode number), and after an unmount (a commit) and a
/// mount again; a handle of a file unlinked, and released, is stale. Was
/// ESTALE for every handle the kernel had forgotten.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn file_handles_open_their_file_after_a_cache_drop_and_a_remount() {
    let env = Env::new();
    let m = mount_fork(&env);
    let mnt = m.path().to_path_buf();
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/f"), b"hello").unwrap();
    fs::write(mnt.join("gone"), b"x").unwrap();
    fs::write(mnt.join("held"), b"y").unwrap();
    let (f, d) = (handle_of(&mnt.join("d/f")), handle_of(&mnt.join("d")));
    let (gone, held) = (handle_of(&mnt.join("gone")), handle_of(&mnt.join("held")));
    let d_ino = fs::metadata(mnt.join("d")).unwrap().ino();
    fs::remove_file(mnt.join("gone")).unwrap();
    let open = fs::File::open(mnt.join("held")).unwrap();
    fs::remove_file(mnt.join("held")).unwrap();

    let root = fs::File::open(&mnt).unwrap();
    drop_caches();
    let read = |h: &FileHandle, root: &fs::File| {
        let mut s = String::new();
        let mut file = open_by_handle(root, h).unwrap_or_else(|e| panic!("errno {e}"));
        file.read_to_string(&mut s).unwrap();
        s
    };
    assert_eq!(read(&f, &root), "hello");
    let dir = open_by_handle(&root, &d).expect("the directory by its handle");
    assert_eq!(dir.metadata().unwrap().ino(), d_ino);
    assert_eq!(open_by_handle(&root, &gone).unwrap_err(), libc::ESTALE);
    // Unlinked and still open: the kernel has it; once closed, stale.
    assert_eq!(read(&held, &root), "y");
    drop(open);
    drop_caches();
    assert_eq!(open_by_handle(&root, &held).unwrap_err(), libc::ESTALE);
    drop((root, dir));

    // The numbers are the fork's, kept by the unmount's commit.
    m.unmount();
    let m = env.mount("f", Some(&mnt));
    let root = fs::File::open(&mnt).unwrap();
    assert_eq!(read(&f, &root), "hello");
    let dir = open_by_handle(&root, &d).expect("the directory after a remount");
    assert_eq!(dir.metadata().unwrap().ino(), d_ino);
    assert_eq!(open_by_handle(&root, &gone).unwrap_err(), libc::ESTALE);
    drop((root, dir));
    m.unmount();
}

/// A checkpoint mounted read-only numbers its inodes as it lists them, so
/// its file handles last one mount: they open their file and directory
/// after a cache drop, and are stale after an unmount and a mount again
/// (another generation), never another file.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn file_handles_of_a_checkpoint_mount_last_the_mount() {
    let env = Env::new();
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let origin = env.path("origin");
    fs::create_dir_all(origin.join("d")).unwrap();
    fs::write(origin.join("d/f"), b"hello").unwrap();
    fs::write(origin.join("other"), b"other").unwrap();
    env.ok([
        "snapshot".as_ref(),
        origin.as_os_str(),
        "--ref".as_ref(),
        "base".as_ref(),
    ]);
    let mnt = env.path("mnt");
    let m = env.mount("base", Some(&mnt));
    let (f, d) = (handle_of(&mnt.join("d/f")), handle_of(&mnt.join("d")));
    let root = fs::File::open(&mnt).unwrap();
    drop_caches();
    let mut s = String::new();
    let mut file = open_by_handle(&root, &f).unwrap_or_else(|e| panic!("errno {e}"));
    file.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello");
    let dir = open_by_handle(&root, &d).expect("the directory by its handle");
    assert!(dir.metadata().unwrap().is_dir());
    drop((root, file, dir));
    m.unmount();

    // Listed in another order this time: "other" takes a number first.
    let m = env.mount("base", Some(&mnt));
    fs::read(mnt.join("other")).unwrap();
    fs::read(mnt.join("d/f")).unwrap();
    let root = fs::File::open(&mnt).unwrap();
    drop_caches();
    assert_eq!(open_by_handle(&root, &f).unwrap_err(), libc::ESTALE);
    assert_eq!(open_by_handle(&root, &d).unwrap_err(), libc::ESTALE);
    drop(root);
    m.unmount();
}

/// A user namespace whose ids 0 and 1000 are the host's 1000 and 0 (and
/// nothing else), held by a child process (`sleep`) killed and reaped when
/// this is dropped.
struct SwappedUserNs {
    child: std::process::Child,
    ns: fs::File,
}

impl SwappedUserNs {
    fn new() -> SwappedUserNs {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("600");
        // SAFETY: between fork and exec the child only calls unshare(2),
        // which is async-signal-safe, and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // `spawn` returns once the child has exec'd: it has unshared.
        let child = cmd.spawn().expect("sleep in a new user namespace");
        let held = SwappedUserNs {
            ns: fs::File::open(format!("/proc/{}/ns/user", child.id())).unwrap(),
            child,
        };
        for map in ["uid_map", "gid_map"] {
            let path = format!("/proc/{}/{map}", held.child.id());
            fs::write(&path, "0 1000 1\n1000 0 1\n").unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        held
    }
}

impl Drop for SwappedUserNs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A detached idmapped bind mount of `dir` (`open_tree(OPEN_TREE_CLONE)`,
/// then `mount_setattr(MOUNT_ATTR_IDMAP)` with `userns`); the kernel
/// unmounts it when the descriptor is closed (the guard), and
/// `/proc/self/fd/N/…` reaches it. The errno when the kernel refuses.
fn idmapped_clone(dir: &Path, userns: &fs::File) -> Result<std::os::fd::OwnedFd, i32> {
    use rustix::mount::{OpenTreeFlags, open_tree};
    use std::os::fd::AsRawFd;
    let tree = open_tree(
        rustix::fs::CWD,
        dir,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )
    .unwrap_or_else(|e| panic!("open_tree {}: {e}", dir.display()));
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid descriptor, an empty NUL-terminated path with
    // AT_EMPTY_PATH, and a `mount_attr` of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const libc::mount_attr,
            size_of::<libc::mount_attr>(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    Ok(tree)
}

/// Issue 41, idmapped mounts (generic/633, 644, 645, 656, 689, 696, 697,
/// 698 need them): a fork mounted with `-o allow_other` takes an idmapped
/// bind mount (`FUSE_ALLOW_IDMAP`); what root makes through it is owned
/// in the fork by the id root maps to (1000), whether made by creat,
/// mkdir, symlink, mknod or given by a chown, and shows as root's through
/// the idmapped mount; a chown to 1000 there stores 0. Without
/// `allow_other` the daemon does not ask for it and the kernel refuses
/// the idmapped mount (EINVAL). A checkpoint mount takes one as well.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn an_idmapped_mount_of_a_fork_creates_files_owned_by_the_mapped_id() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{PermissionsExt, symlink};
    let ns = SwappedUserNs::new();

    // Owner-only mount: no FUSE_ALLOW_IDMAP, so the kernel refuses.
    let env = Env::new();
    let m = mount_fork(&env);
    assert_eq!(idmapped_clone(m.path(), &ns.ns).err(), Some(libc::EINVAL));
    m.unmount();

    let env = Env::new();
    let m = mount_fork_with(&env, &["-o", "allow_other"]);
    let plain = m.path().to_path_buf();
    fs::create_dir(plain.join("d")).unwrap();
    fs::write(plain.join("by-root"), b"r").unwrap();
    {
        let tree = idmapped_clone(&plain, &ns.ns).expect("an idmapped mount of the fork");
        let mapped = Path::new("/proc/self/fd").join(tree.as_raw_fd().to_string());
        let owner = |p: &Path| {
            let st = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (st.uid(), st.gid())
        };
        // The fork's root (0:0) and a file root made show as 1000 there.
        let root = fs::metadata(&mapped).unwrap(); // (lstat would see the fd's link)
        assert_eq!((root.uid(), root.gid()), (1000, 1000));
        assert_eq!(owner(&mapped.join("by-root")), (1000, 1000));
        // Made through the idmapped mount by root: 1000 in the fork.
        fs::write(mapped.join("file"), b"x").unwrap();
        fs::create_dir(mapped.join("dir")).unwrap();
        symlink("file", mapped.join("link")).unwrap();
        let fifo = cstr(&mapped.join("fifo"));
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        fs::write(mapped.join("d/nested"), b"y").unwrap();
        for name in ["file", "dir", "link", "fifo", "d/nested"] {
            assert_eq!(owner(&plain.join(name)), (1000, 1000), "{name} in the fork");
            assert_eq!(
                owner(&mapped.join(name)),
                (0, 0),
                "{name} through the idmapped mount"
            );
        }
        // chown through the idmapped mount: the kernel maps the new ids.
        std::os::unix::fs::lchown(mapped.join("by-root"), Some(0), Some(0)).unwrap();
        assert_eq!(owner(&plain.join("by-root")), (1000, 1000));
        std::os::unix::fs::lchown(mapped.join("file"), Some(1000), Some(1000)).unwrap();
        assert_eq!(owner(&plain.join("file")), (0, 0));
        // Requests without ids (write, chmod, rename, unlink) still work.
        fs::write(mapped.join("d/nested"), b"yy").unwrap();
        fs::set_permissions(mapped.join("dir"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::rename(mapped.join("d/nested"), mapped.join("moved")).unwrap();
        fs::remove_file(mapped.join("link")).unwrap();
        assert_eq!(fs::read(plain.join("moved")).unwrap(), b"yy");
        assert_eq!(owner(&plain.join("moved")), (1000, 1000));
        // The plain mount still makes files as the caller (root).
        fs::write(plain.join("plain"), b"p").unwrap();
        assert_eq!(owner(&plain.join("plain")), (0, 0));
    }
    m.unmount();

    // The owners are the fork's: after a commit and a mount they are the same.
    let mnt = env.path("mnt");
    let m = env.mount("f", Some(&mnt));
    for (name, ids) in [
        ("file", (0, 0)),
        ("dir", (1000, 1000)),
        ("moved", (1000, 1000)),
    ] {
        let st = fs::symlink_metadata(mnt.join(name)).unwrap();
        assert_eq!((st.uid(), st.gid()), ids, "{name} after a remount");
    }
    m.unmount();

    // A checkpoint mount (read-only) with allow_other takes one too, and
    // shows its owners mapped.
    let tree = env.path("tree");
    fs::create_dir(&tree).unwrap();
    fs::write(tree.join("of-1000"), b"a").unwrap();
    std::os::unix::fs::lchown(tree.join("of-1000"), Some(1000), Some(1000)).unwrap();
    fs::write(tree.join("of-root"), b"b").unwrap();
    env.ok([
        "snapshot".as_ref(),
        tree.as_os_str(),
        "--ref".as_ref(),
        "ro".as_ref(),
    ]);
    let ro = env.path("ro");
    let out = env.run([
        "mount".as_ref(),
        "ro".as_ref(),
        ro.as_os_str(),
        "-o".as_ref(),
        "allow_other".as_ref(),
    ]);
    let m = env.guard_for("ro");
    assert!(out.status.success(), "mount: {}", common::stderr(&out));
    {
        let tree = idmapped_clone(&ro, &ns.ns).expect("an idmapped mount of a checkpoint");
        let mapped = Path::new("/proc/self/fd").join(tree.as_raw_fd().to_string());
        for (name, ids) in [("of-1000", (0, 0)), ("of-root", (1000, 1000))] {
            let st = fs::symlink_metadata(mapped.join(name)).unwrap();
            assert_eq!(
                (st.uid(), st.gid()),
                ids,
                "{name} in the idmapped checkpoint"
            );
        }
        assert_eq!(fs::read(mapped.join("of-1000")).unwrap(), b"a");
    }
    m.unmount();
}

/// The transport serving the one mount of `env` (`storefs status --json`):
/// `"io_uring"` or `"/dev/fuse"`.
fn served_over(env: &Env) -> String {
    let status: Vec<serde_json::Value> =
        serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    let name = &status[0]["transport"]["name"];
    name.as_str()
        .unwrap_or_else(|| panic!("{status:?}"))
        .to_string()
}

/// `open(dir, O_TMPFILE | extra, mode)`.
fn open_tmpfile(dir: &Path, extra: i32, mode: u32) -> Result<fs::File, i32> {
    use std::os::fd::FromRawFd;
    let d = cstr(dir);
    // SAFETY: a NUL-terminated path; the descriptor returned is owned here.
    let fd = unsafe { libc::open(d.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | extra, mode) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// `linkat` of an open file to `to`: through `/proc/self/fd` (as xfs_io's
/// `flink` and most programs), or with `AT_EMPTY_PATH`.
fn link_open_file(f: &fs::File, to: &Path, empty_path: bool) -> Result<(), i32> {
    use std::os::fd::AsRawFd;
    let to = cstr(to);
    let r = if empty_path {
        // SAFETY: NUL-terminated paths and a live descriptor.
        unsafe {
            libc::linkat(
                f.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        }
    } else {
        let proc = cstr(&Path::new("/proc/self/fd").join(f.as_raw_fd().to_string()));
        // SAFETY: NUL-terminated paths.
        unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        }
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// This process's umask, without changing it (other tests run alongside).
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"));
    u32::from_str_radix(line.expect("a Umask: line").trim(), 8).unwrap()
}

/// generic/004, 530, 531 and overlayfs (699): `O_TMPFILE` makes a file
/// with no name, open, which `linkat` names later (through
/// `/proc/self/fd` or with `AT_EMPTY_PATH`), unless it was opened
/// `O_EXCL`; one never named leaves nothing behind. Both transports decode
/// `FUSE_TMPFILE` with storefs's own codec (fuser, which answered it
/// `ENOSYS`, no longer serves requests), so it runs in full on either.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn o_tmpfile_makes_an_unnamed_file_that_linkat_names() {
    let env = Env::new();
    let m = mount_fork(&env);
    let mnt = m.path().to_path_buf();
    fs::create_dir(mnt.join("dir")).unwrap();
    let transport = served_over(&env);
    let mut t = open_tmpfile(&mnt.join("dir"), 0, 0o666)
        .unwrap_or_else(|e| panic!("O_TMPFILE over {transport}: errno {e}"));
    // An open file with no name: nlink 0, the create's mode and owner.
    t.write_all(b"tmpfile data").unwrap();
    let st = fstat(&t).unwrap();
    assert_eq!(st.nlink(), 0);
    assert_eq!(st.mode(), libc::S_IFREG | (0o666 & !umask()));
    assert_eq!((st.uid(), st.gid(), st.len()), (0, 0, 12));
    assert_eq!(fs::read_dir(mnt.join("dir")).unwrap().count(), 0);
    // Named through /proc/self/fd.
    link_open_file(&t, &mnt.join("dir/named"), false).unwrap();
    assert_eq!(fstat(&t).unwrap().nlink(), 1);
    t.write_all(b", more").unwrap();
    drop(t);
    assert_eq!(
        fs::read(mnt.join("dir/named")).unwrap(),
        b"tmpfile data, more"
    );
    // Named with AT_EMPTY_PATH (root has CAP_DAC_READ_SEARCH).
    let mut u = open_tmpfile(&mnt, 0, 0o600).unwrap();
    u.write_all(b"second").unwrap();
    link_open_file(&u, &mnt.join("second"), true).unwrap();
    // A second name for it is an ordinary link; both stay.
    link_open_file(&u, &mnt.join("second-again"), true).unwrap();
    assert_eq!(fstat(&u).unwrap().nlink(), 2);
    drop(u);
    // O_EXCL: never linkable (the kernel's I_LINKABLE).
    let x = open_tmpfile(&mnt, libc::O_EXCL, 0o600).unwrap();
    assert_eq!(
        link_open_file(&x, &mnt.join("excl"), false),
        Err(libc::ENOENT)
    );
    drop(x);
    // One closed without a name leaves nothing.
    let mut gone = open_tmpfile(&mnt, 0, 0o600).unwrap();
    gone.write_all(b"nobody").unwrap();
    drop(gone);
    let mut names: Vec<String> = fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["dir", "second", "second-again"]);
    m.unmount();

    // What was named is the fork's: after the unmount's commit and a mount.
    let m = env.mount("f", Some(&mnt));
    assert_eq!(
        fs::read(mnt.join("dir/named")).unwrap(),
        b"tmpfile data, more"
    );
    assert_eq!(fs::read(mnt.join("second-again")).unwrap(), b"second");
    assert_eq!(fs::read_dir(&mnt).unwrap().count(), 3);
    m.unmount();
}

/// `renameat2(old, new, flags)` at `AT_FDCWD`; the errno on failure.
fn renameat2(old: &Path, new: &Path, flags: u32) -> Result<(), i32> {
    let (old, new) = (cstr(old), cstr(new));
    // SAFETY: NUL-terminated paths.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            old.as_ptr(),
            libc::AT_FDCWD,
            new.as_ptr(),
            flags,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// generic/078 and overlayfs (699): `RENAME_WHITEOUT` moves the file and
/// leaves a whiteout (a character device 0:0, mode 0, the caller's) at the
/// old name; with `RENAME_NOREPLACE` it refuses an existing name, with
/// `RENAME_EXCHANGE` it is `EINVAL`; on either transport. A user who is
/// not root may make one (no `CAP_MKNOD` needed since Linux 5.8, "vfs:
/// allow unprivileged whiteout creation"; ext4 here answers the same),
/// owned by that user; the kernel's permission checks of the rename apply.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn rename_whiteout_leaves_a_whiteout_at_the_old_name() {
    use std::os::unix::fs::FileTypeExt;
    let env = Env::new();
    let m = mount_fork_with(&env, &["-o", "allow_other"]);
    let mnt = m.path().to_path_buf();
    fs::write(mnt.join("a"), b"moved data").unwrap();
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/inside"), b"in d").unwrap();
    renameat2(&mnt.join("a"), &mnt.join("b"), libc::RENAME_WHITEOUT).unwrap();
    assert_eq!(fs::read(mnt.join("b")).unwrap(), b"moved data");
    let w = fs::symlink_metadata(mnt.join("a")).unwrap();
    assert!(w.file_type().is_char_device(), "{w:?}");
    assert_eq!(
        (w.rdev(), w.mode() & 0o7777, w.uid(), w.gid()),
        (0, 0, 0, 0)
    );
    // A directory moves too, with what is in it.
    renameat2(&mnt.join("d"), &mnt.join("e"), libc::RENAME_WHITEOUT).unwrap();
    assert!(
        fs::symlink_metadata(mnt.join("d"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert_eq!(fs::read(mnt.join("e/inside")).unwrap(), b"in d");
    // NOREPLACE over a name: EEXIST, both left as they were.
    fs::write(mnt.join("c"), b"c").unwrap();
    let noreplace = libc::RENAME_WHITEOUT | libc::RENAME_NOREPLACE;
    assert_eq!(
        renameat2(&mnt.join("c"), &mnt.join("b"), noreplace),
        Err(libc::EEXIST)
    );
    assert_eq!(fs::read(mnt.join("c")).unwrap(), b"c");
    renameat2(&mnt.join("c"), &mnt.join("c2"), noreplace).unwrap();
    assert!(
        fs::symlink_metadata(mnt.join("c"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
    let exchange = libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE;
    assert_eq!(
        renameat2(&mnt.join("b"), &mnt.join("c2"), exchange),
        Err(libc::EINVAL)
    );

    // A user who is not root: a whiteout of its own.
    match common::TestUser::create("whiteout") {
        None => eprintln!("skipped (this part): no test user, so no caller who is not root"),
        Some(user) => {
            fs::create_dir(mnt.join("u")).unwrap();
            fs::set_permissions(mnt.join("u"), fs::Permissions::from_mode(0o777)).unwrap();
            fs::write(mnt.join("u/f"), b"f").unwrap();
            let script = "import ctypes, sys\n\
                libc = ctypes.CDLL(None, use_errno=True)\n\
                r = libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), int(sys.argv[3]))\n\
                print(ctypes.get_errno() if r else 0)\n";
            let as_user = |from: &str, to: &str, flags: u32| {
                let out = std::process::Command::new("setpriv")
                    .arg(format!("--reuid={}", user.uid))
                    .arg(format!("--regid={}", user.gid))
                    .args(["--clear-groups", "/usr/bin/python3", "-c", script])
                    .arg(mnt.join(from))
                    .arg(mnt.join(to))
                    .arg(flags.to_string())
                    .output()
                    .expect("setpriv and python3");
                assert!(out.status.success(), "{}", common::stderr(&out));
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse::<i32>()
                    .unwrap()
            };
            assert_eq!(as_user("u/f", "u/g", libc::RENAME_WHITEOUT), 0);
            assert_eq!(fs::read(mnt.join("u/g")).unwrap(), b"f");
            let w = fs::symlink_metadata(mnt.join("u/f")).unwrap();
            assert!(w.file_type().is_char_device(), "{w:?}");
            assert_eq!((w.rdev(), w.uid(), w.gid()), (0, user.uid, user.gid));
            // Where the user may not write, the kernel refuses first.
            fs::write(mnt.join("root-only"), b"r").unwrap();
            let refused = as_user("root-only", "u/h", libc::RENAME_WHITEOUT);
            assert_eq!(refused, libc::EACCES);
            assert_eq!(fs::read(mnt.join("root-only")).unwrap(), b"r");
        }
    }
    m.unmount();

    // The whiteouts are the fork's: after the unmount's commit and a mount.
    let mnt = env.path("mnt");
    let m = env.mount("f", Some(&mnt));
    for name in ["a", "c", "d"] {
        let w = fs::symlink_metadata(mnt.join(name)).unwrap();
        assert!(w.file_type().is_char_device(), "{name}: {w:?}");
        assert_eq!(w.rdev(), 0);
    }
    assert_eq!(fs::read(mnt.join("b")).unwrap(), b"moved data");
    m.unmount();
}

/// `lsattr -d PATH`'s flag letters (the first word), or its error.
fn lsattr(p: &Path) -> Result<String, String> {
    let out = std::process::Command::new("lsattr")
        .arg("-d")
        .arg(p)
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .replace('-', "")),
        false => Err(common::stderr(&out)),
    }
}

/// `chattr ARG PATH`, as root or (`as_user`: uid and gid) through setpriv
/// without capabilities; its stderr when it fails.
fn chattr(arg: &str, p: &Path, as_user: Option<u32>) -> Result<(), String> {
    let mut cmd = match as_user {
        None => std::process::Command::new("chattr"),
        Some(id) => {
            let mut c = std::process::Command::new("setpriv");
            c.arg(format!("--reuid={id}"))
                .arg(format!("--regid={id}"))
                .arg("--clear-groups")
                .arg("chattr");
            c
        }
    };
    let out = cmd.arg(arg).arg(p).output().unwrap();
    match out.status.success() {
        true => Ok(()),
        false => Err(common::stderr(&out)),
    }
}

/// The errno of an I/O result that must have failed.
fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>, what: &str) -> i32 {
    r.expect_err(&format!("{what} should fail"))
        .raw_os_error()
        .unwrap()
}

/// `open(p, flags)`, the access mode included in `flags`.
fn open_flags(p: &Path, flags: i32) -> std::io::Result<fs::File> {
    let mut how = fs::OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => how.write(true),
        libc::O_RDWR => how.read(true).write(true),
        _ => how.read(true),
    };
    how.custom_flags(flags & !libc::O_ACCMODE).open(p)
}

/// generic/079 and 545 (issue 41): `chattr +i`/`+a` on a fork, with the
/// real chattr and lsattr (FS_IOC_SETFLAGS/GETFLAGS through FUSE_IOCTL): an
/// immutable file takes no write, truncate or removal, an immutable
/// directory no new or removed name, an append-only file only appends; the
/// flags survive a commit and a mount of the fork, and show on a read-only
/// mount of the checkpoint; a user without CAP_LINUX_IMMUTABLE sets only
/// the other flags, and only on a file of their own. Opens are refused as
/// ext4's `may_open` refuses them (079's `t_immutable`): an immutable file
/// opened for writing or with `O_TRUNC`, an append-only one opened for
/// writing without `O_APPEND`, or with `O_TRUNC`, fail with EPERM at the
/// open (the fork answers `FUSE_OPEN`); reading opens, and appending ones of
/// an append-only file, succeed. A descriptor opened before the flag was
/// set still has its writes refused. That is with `-o open_checks`; a fork
/// mounted without it opens such a file for writing (zero-message opens)
/// and refuses the write.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
#[cfg_attr(
    all(storefs_root_tests, not(storefs_have_chattr)),
    ignore = "needs chattr, lsattr and setpriv (e2fsprogs, util-linux)"
)]
fn chattr_immutable_and_append_only_hold_on_a_fork_and_after_a_commit() {
    const EPERM: i32 = libc::EPERM;
    let env = Env::new();
    // Users other than root reach it; opens are checked (`-o open_checks`).
    let m = mount_fork_with(&env, &["-o", "allow_other,open_checks"]);
    let d = m.path().to_path_buf();
    let (log, frozen, dir, mine) = (
        d.join("log"),
        d.join("frozen"),
        d.join("dir"),
        d.join("mine"),
    );
    fs::write(&log, b"one\n").unwrap();
    fs::write(&frozen, b"ice").unwrap();
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("x"), b"x").unwrap();
    fs::write(&mine, b"m").unwrap();
    std::os::unix::fs::chown(&mine, Some(1000), Some(1000)).unwrap();
    assert_eq!(lsattr(&log).unwrap(), "");

    // Append-only: appends land, nothing else. A descriptor opened for
    // writing before the flag was set keeps its writes refused.
    let mut held = fs::OpenOptions::new().write(true).open(&log).unwrap();
    chattr("+a", &log, None).unwrap();
    assert_eq!(lsattr(&log).unwrap(), "a");
    let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"two\n").unwrap();
    drop(f);
    let rw_append = fs::OpenOptions::new().read(true).append(true).open(&log);
    drop(rw_append.expect("O_RDWR | O_APPEND of +a opens"));
    assert_eq!(errno_of(held.write_all(b"X"), "overwrite of +a"), EPERM);
    drop(held);
    // Refused at the open: for writing without O_APPEND, and O_TRUNC.
    let w = fs::OpenOptions::new().write(true).open(&log);
    assert_eq!(errno_of(w, "O_WRONLY of +a"), EPERM);
    let rw = fs::OpenOptions::new().read(true).write(true).open(&log);
    assert_eq!(errno_of(rw, "O_RDWR of +a"), EPERM);
    let trunc = fs::OpenOptions::new().write(true).truncate(true).open(&log);
    assert_eq!(errno_of(trunc, "O_TRUNC of +a"), EPERM);
    let append_trunc = open_flags(&log, libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC);
    assert_eq!(errno_of(append_trunc, "O_APPEND | O_TRUNC of +a"), EPERM);
    assert_eq!(errno_of(fs::remove_file(&log), "rm of +a"), EPERM);
    assert_eq!(errno_of(fs::rename(&log, d.join("l2")), "mv of +a"), EPERM);
    assert_eq!(fs::read(&log).unwrap(), b"one\ntwo\n");

    // Immutable file and directory.
    let mut held = fs::OpenOptions::new().write(true).open(&frozen).unwrap();
    chattr("+i", &frozen, None).unwrap();
    chattr("+i", &dir, None).unwrap();
    assert_eq!(lsattr(&frozen).unwrap(), "i");
    assert_eq!(lsattr(&dir).unwrap(), "i");
    assert_eq!(errno_of(held.write_all(b"X"), "write to +i"), EPERM);
    drop(held);
    // Refused at the open: any write access, O_TRUNC; reading opens.
    let opens = [
        ("O_WRONLY", libc::O_WRONLY),
        ("O_RDWR", libc::O_RDWR),
        ("O_WRONLY | O_APPEND", libc::O_WRONLY | libc::O_APPEND),
        ("O_WRONLY | O_TRUNC", libc::O_WRONLY | libc::O_TRUNC),
        ("O_RDONLY | O_TRUNC", libc::O_RDONLY | libc::O_TRUNC),
    ];
    for (what, flags) in opens {
        let opened = open_flags(&frozen, flags);
        assert_eq!(errno_of(opened, &format!("{what} of +i")), EPERM);
    }
    let mut read = String::new();
    fs::File::open(&frozen)
        .expect("O_RDONLY of +i opens")
        .read_to_string(&mut read)
        .unwrap();
    assert_eq!(read, "ice");
    let chmod = fs::set_permissions(&frozen, fs::Permissions::from_mode(0o600));
    assert_eq!(errno_of(chmod, "chmod of +i"), EPERM);
    assert_eq!(errno_of(fs::remove_file(&frozen), "rm of +i"), EPERM);
    assert_eq!(
        errno_of(fs::hard_link(&frozen, d.join("h")), "ln of +i"),
        EPERM
    );
    assert_eq!(
        errno_of(fs::write(dir.join("new"), b""), "create in +i"),
        EPERM
    );
    assert_eq!(errno_of(fs::remove_file(dir.join("x")), "rm in +i"), EPERM);
    fs::write(dir.join("x"), b"y").unwrap(); // the file itself is not immutable
    assert_eq!(fs::read(&frozen).unwrap(), b"ice");

    // Without CAP_LINUX_IMMUTABLE: the owner sets d, not i; others nothing.
    assert!(chattr("+i", &mine, Some(1000)).is_err(), "+i by its owner");
    chattr("+d", &mine, Some(1000)).unwrap();
    assert!(
        chattr("+d", &log, Some(1000)).is_err(),
        "+d by another user"
    );
    assert!(
        chattr("-a", &log, Some(1000)).is_err(),
        "-a by another user"
    );
    assert_eq!(lsattr(&mine).unwrap(), "d");

    // Kept by a commit, and by a mount of the fork after it.
    let head = env.ok(["commit", "f", "-m", "flags"]);
    let head = head.trim().to_string();
    m.unmount();
    let m = env.mount("f", Some(&d));
    assert_eq!(lsattr(&log).unwrap(), "a");
    assert_eq!(lsattr(&frozen).unwrap(), "i");
    assert_eq!(lsattr(&dir).unwrap(), "i");
    assert_eq!(lsattr(&mine).unwrap(), "d");
    assert_eq!(
        errno_of(fs::remove_file(&frozen), "rm of +i after a mount"),
        EPERM
    );
    // Mounted without `open_checks`: opens are zero-message, so opening the
    // immutable file for writing succeeds, and its write is refused.
    let mut w = fs::OpenOptions::new()
        .write(true)
        .open(&frozen)
        .expect("a zero-message open of +i for writing");
    assert_eq!(errno_of(w.write_all(b"x"), "write of +i"), EPERM);
    drop(w);
    // Cleared, the file changes again.
    chattr("-i", &frozen, None).unwrap();
    fs::write(&frozen, b"water").unwrap();
    m.unmount();

    // A read-only mount of the checkpoint shows them, and changes none.
    let ro = env.path("ro");
    fs::create_dir(&ro).unwrap();
    let c = env.mount(&head, Some(&ro));
    assert_eq!(lsattr(&ro.join("log")).unwrap(), "a");
    assert_eq!(lsattr(&ro.join("frozen")).unwrap(), "i");
    assert!(
        chattr("-i", &ro.join("frozen"), None).is_err(),
        "chattr on a checkpoint"
    );
    c.unmount();
}

/// A file's or directory's atime as `stat` shows it (ns).
fn atime_of(p: &Path) -> i128 {
    let m = fs::metadata(p).unwrap();
    i128::from(m.atime()) * 1_000_000_000 + i128::from(m.atime_nsec())
}

/// Read the file at `p` through a new open, after a moment (so a new atime
/// differs), and list directory `d`.
fn access(p: &Path, d: &Path) {
    std::thread::sleep(std::time::Duration::from_millis(5));
    fs::read(p).unwrap();
    assert_eq!(fs::read_dir(d).unwrap().count(), 0);
}

/// generic/003 (issue 41): a fork updates atime on reads only under an
/// explicit atime option: never by default; under relatime when the
/// atime is not after the mtime (once after a write or a commit, then not);
/// under strictatime at every read; a listing updates the directory's. The
/// atime lives in the journal: a mount again without a commit replays it.
/// Was: never updated.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn reads_update_atime_only_under_an_explicit_atime_option() {
    let env = Env::new();
    let m = mount_fork(&env);
    let mnt = m.path().to_path_buf();
    let (f, d) = (mnt.join("f"), mnt.join("d"));
    fs::write(&f, b"data").unwrap();
    fs::create_dir(&d).unwrap();
    let remount = |m: common::MountGuard, commit: bool, opts: &[&str]| {
        if commit {
            m.unmount();
        } else {
            let mut m = m;
            env.ok(["umount".as_ref(), "--no-commit".as_ref(), mnt.as_os_str()]);
            m.mountpoint = None;
        }
        let mut args = vec!["mount".as_ref(), "f".as_ref(), mnt.as_os_str()];
        args.extend(opts.iter().map(std::ffi::OsStr::new));
        let out = env.run(args);
        let guard = env.guard_for("f");
        assert!(out.status.success(), "mount: {}", common::stderr(&out));
        guard
    };

    // No option: reads leave atime.
    let (fa, da) = (atime_of(&f), atime_of(&d));
    access(&f, &d);
    assert_eq!((atime_of(&f), atime_of(&d)), (fa, da), "default: no update");

    // relatime, the atime not after the mtime (the file was written after
    // it was made, the directory is as made): updated once.
    let m = remount(m, true, &["-o", "relatime"]);
    let (fa, da) = (atime_of(&f), atime_of(&d));
    access(&f, &d);
    let (fb, db) = (atime_of(&f), atime_of(&d));
    assert!(
        fb > fa && db > da,
        "relatime, atime == mtime: {fa} {fb}, {da} {db}"
    );
    access(&f, &d);
    assert_eq!((atime_of(&f), atime_of(&d)), (fb, db), "relatime: once");

    // strictatime: every read; the atime of before came back by replay.
    let m = remount(m, false, &["-o", "strictatime"]);
    assert_eq!((atime_of(&f), atime_of(&d)), (fb, db), "replayed");
    access(&f, &d);
    let fc = atime_of(&f);
    assert!(fc > fb, "strictatime: {fb} {fc}");
    access(&f, &d);
    let (fd, dd) = (atime_of(&f), atime_of(&d));
    assert!(fd > fc && dd > db, "strictatime again: {fc} {fd}");

    // nodiratime: files still, directories not.
    let m = remount(m, false, &["-o", "strictatime,nodiratime"]);
    access(&f, &d);
    assert!(atime_of(&f) > fd);
    assert_eq!(atime_of(&d), dd, "nodiratime");

    // Without an option again: nothing.
    let m = remount(m, false, &[]);
    let (fe, de) = (atime_of(&f), atime_of(&d));
    access(&f, &d);
    assert_eq!((atime_of(&f), atime_of(&d)), (fe, de), "default again");
    m.unmount();
}

/// generic/003 (issue 41): atimes outlive the commit an unmount makes.
/// Mounted with `-o relatime`, a read sets a file's and a listing a
/// directory's atime, and `touch -a` another's (before its mtime); the
/// unmount commits; the next mount (without an atime option) shows the
/// same atimes. A checkpoint's read-only mount shows atime = mtime (a tree
/// keeps none; the atimes are the fork's). Was: every atime read as the
/// mtime after the commit.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn atimes_outlive_the_commit_an_unmount_makes() {
    let env = Env::new();
    let m = mount_fork_with(&env, &["-o", "relatime"]);
    let mnt = m.path().to_path_buf();
    let (f, d, t) = (mnt.join("f"), mnt.join("d"), mnt.join("t"));
    fs::write(&f, b"data").unwrap();
    fs::create_dir(&d).unwrap();
    fs::write(&t, b"touched").unwrap();
    access(&f, &d);
    let (fa, da) = (atime_of(&f), atime_of(&d));
    let mtime_of = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec())
    };
    assert!(fa > mtime_of(&f) && da > mtime_of(&d), "relatime read");
    // `touch -a -d @1600000000.000000005`: an atime before the mtime.
    let past = std::time::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 5);
    fs::File::open(&t)
        .unwrap()
        .set_times(fs::FileTimes::new().set_accessed(past))
        .unwrap();
    let ta = atime_of(&t);
    assert_eq!(ta, 1_600_000_000_000_000_005);

    m.unmount();
    let m = env.mount("f", Some(&mnt));
    assert_eq!(
        atime_of(&f),
        fa,
        "a read's atime after the unmount's commit"
    );
    assert_eq!(atime_of(&d), da, "a listing's atime after the commit");
    assert_eq!(atime_of(&t), ta, "touch -a after the commit");
    // The commit made a checkpoint (the files are new): its read-only
    // mount has no atimes of its own.
    let head = env.ok(["commit", "f", "-m", "nothing new"]);
    m.unmount();
    let ro = env.path("ro");
    fs::create_dir(&ro).unwrap();
    let c = env.mount(head.trim(), Some(&ro));
    for p in ["f", "d", "t"] {
        assert_eq!(atime_of(&ro.join(p)), mtime_of(&ro.join(p)), "{p}");
    }
    c.unmount();
    // And the fork, mounted again, still has them.
    let m = env.mount("f", Some(&mnt));
    assert_eq!((atime_of(&f), atime_of(&d), atime_of(&t)), (fa, da, ta));
    m.unmount();
}

/// `XFS_IOC_GOINGDOWN` (`_IOR('X', 125, __u32)`, ext4's `FS_IOC_SHUTDOWN`),
/// as xfstests' `godown` sends it on the mountpoint.
const GOINGDOWN: u32 = 0x8004_587d;

/// `ioctl(fd, GOINGDOWN, &flag)`: 0 or the errno.
fn godown(f: &fs::File, flag: u32) -> i32 {
    use std::os::fd::AsRawFd;
    // SAFETY: the argument points at a live u32, which the ioctl reads.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), GOINGDOWN as _, &flag as *const u32) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// The shutdown tests (generic/050, 392, 468, 505, ...: `godown` or
/// `xfs_io -c shutdown`): a fork shut down with `NOLOGFLUSH` answers
/// every lookup, `stat`, read, listing and change with `EIO` (pages the
/// kernel cached included), still answers `statfs` and a second shutdown;
/// `storefs umount` then unmounts without a commit (the head stays, the
/// journal is kept), and the next mount replays what was durable: the file
/// fsynced before the shutdown is there, the one written without a sync is
/// not, or as a power cut would leave it.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_fork_shut_down_answers_eio_and_the_next_mount_replays_what_was_synced() {
    let env = Env::new();
    let m = mount_fork(&env);
    let d = m.path().to_path_buf();
    let store = storefs::store::Store::open(&env.store).unwrap();
    let head = store.fork_head("f").unwrap();
    let mut synced = fs::File::create(d.join("synced")).unwrap();
    synced.write_all(b"kept").unwrap();
    synced.sync_all().unwrap();
    drop(synced);
    fs::write(d.join("unsynced"), b"cut").unwrap();
    // Read once: the kernel holds its pages and attributes.
    assert_eq!(fs::read(d.join("unsynced")).unwrap(), b"cut");

    let root = fs::File::open(&d).unwrap();
    assert_eq!(godown(&root, 2), 0, "NOLOGFLUSH shutdown");
    for name in ["synced", "unsynced"] {
        let what = format!("read {name}");
        assert_eq!(errno_of(fs::read(d.join(name)), &what), libc::EIO, "{what}");
        let what = format!("stat {name}");
        assert_eq!(
            errno_of(fs::metadata(d.join(name)), &what),
            libc::EIO,
            "{what}"
        );
    }
    assert_eq!(errno_of(fs::read_dir(&d), "readdir"), libc::EIO);
    assert_eq!(
        errno_of(fs::write(d.join("new"), b"x"), "create"),
        libc::EIO
    );
    assert_eq!(
        errno_of(fs::metadata(d.join("absent")), "lookup"),
        libc::EIO
    );
    assert_eq!(errno_of(root.sync_all(), "fsync"), libc::EIO);
    assert!(
        rustix::fs::fstatvfs(&root).is_ok(),
        "statfs (df) still answers"
    );
    assert_eq!(godown(&root, 2), 0, "a second shutdown");
    drop(root);

    m.unmount();
    assert_eq!(store.fork_head("f").unwrap(), head, "no commit on unmount");
    assert!(
        common::journal_bytes(&env.store, "f") > 0,
        "the journal is kept"
    );

    let m = env.mount("f", Some(&d));
    assert_eq!(fs::read(d.join("synced")).unwrap(), b"kept");
    // Written without a sync: cut, unless the kernel wrote the journal's
    // page back before the shutdown (its writeback: then as a power cut
    // would leave it, part of it or all). The exact cut is checked in
    // `journal::tests::a_shut_down_fork_…`.
    match fs::read(d.join("unsynced")) {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
        Ok(b) => assert!(b.is_empty() || b == b"cut", "{b:?}"),
    }
    m.unmount();
    assert_ne!(
        store.fork_head("f").unwrap(),
        head,
        "committed after the remount"
    );
}
