//! Thin, safe wrappers over the libc calls std does not offer: extended
//! attributes, `SEEK_DATA`/`SEEK_HOLE`, and the `*at` family used by restore.
//! Every function returns `io::Result` with the OS error; callers add the path.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A C string from raw name bytes; a NUL inside is an `InvalidInput` error.
pub fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

// ---- extended attributes ----

/// What to read or write extended attributes of. Never follows a symlink.
#[derive(Clone, Copy)]
pub enum XattrTarget<'a> {
    /// A path, with the `l*xattr` calls (the last component is not followed).
    Path(&'a CStr),
    /// An open file.
    Fd(BorrowedFd<'a>),
}

impl XattrTarget<'_> {
    fn list(&self, buf: &mut [u8]) -> io::Result<usize> {
        let (ptr, len) = (buf.as_mut_ptr().cast::<libc::c_char>(), buf.len());
        // SAFETY: `ptr`/`len` describe a writable buffer; the path is NUL-terminated.
        check_size(unsafe {
            match self {
                XattrTarget::Path(p) => libc::llistxattr(p.as_ptr(), ptr, len),
                XattrTarget::Fd(fd) => libc::flistxattr(fd.as_raw_fd(), ptr, len),
            }
        })
    }

    fn get(&self, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
        let (ptr, len) = (buf.as_mut_ptr().cast::<libc::c_void>(), buf.len());
        // SAFETY: as above; `name` is NUL-terminated.
        check_size(unsafe {
            match self {
                XattrTarget::Path(p) => libc::lgetxattr(p.as_ptr(), name.as_ptr(), ptr, len),
                XattrTarget::Fd(fd) => libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), ptr, len),
            }
        })
    }

    /// Set one attribute (creating or replacing it).
    pub fn set(&self, name: &[u8], value: &[u8]) -> io::Result<()> {
        let name = cstring(name)?;
        let (ptr, len) = (value.as_ptr().cast::<libc::c_void>(), value.len());
        // SAFETY: `ptr`/`len` describe a readable buffer; strings are NUL-terminated.
        check(unsafe {
            match self {
                XattrTarget::Path(p) => libc::lsetxattr(p.as_ptr(), name.as_ptr(), ptr, len, 0),
                XattrTarget::Fd(fd) => libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), ptr, len, 0),
            }
        })
    }
}

/// Call `f` with a growing buffer until the result fits (the size can change
/// between the size query and the read, which shows as ERANGE).
fn read_sized(mut f: impl FnMut(&mut [u8]) -> io::Result<usize>) -> io::Result<Vec<u8>> {
    loop {
        let size = f(&mut [])?;
        let mut buf = vec![0u8; size];
        match f(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// All extended attributes of `target`, sorted by name. A filesystem without
/// xattr support yields none; an attribute removed while listing is skipped.
pub fn read_xattrs(target: XattrTarget<'_>) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let names = match read_sized(|b| target.list(b)) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = cstring(name)?;
        match read_sized(|b| target.get(&cname, b)) {
            Ok(value) => out.push((name.to_vec(), value)),
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort();
    Ok(out)
}

// ---- sparse files ----

/// Where the next data (`SEEK_DATA`) or hole (`SEEK_HOLE`) starts at or after
/// `offset`. `Ok(None)` means ENXIO: no more data after `offset`.
pub fn seek(fd: BorrowedFd<'_>, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    // SAFETY: lseek on a valid fd has no memory effects.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), offset as libc::off_t, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(e)
    }
}

// ---- fd-relative creation and metadata (restore) ----

/// `openat(dir, name, flags, mode)`, always with O_CLOEXEC.
pub fn openat(dir: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; a non-negative result is a new fd we own.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open an existing directory under `dir` without following a symlink.
pub fn open_dir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )
}

pub fn mkdirat(dir: RawFd, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::mkdirat(dir, name.as_ptr(), mode) })
}

pub fn symlinkat(target: &CStr, dir: RawFd, name: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir, name.as_ptr()) })
}

pub fn mknodat(dir: RawFd, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::mknodat(dir, name.as_ptr(), mode, rdev as libc::dev_t) })
}

/// Hardlink `old_dir/old` as `new_dir/new`, never following a symlink.
pub fn linkat(old_dir: RawFd, old: &CStr, new_dir: RawFd, new: &CStr) -> io::Result<()> {
    // SAFETY: both strings are NUL-terminated; flags 0 = do not follow symlinks.
    check(unsafe { libc::linkat(old_dir, old.as_ptr(), new_dir, new.as_ptr(), 0) })
}

/// `lchown` relative to `dir` (AT_SYMLINK_NOFOLLOW).
pub fn lchownat(dir: RawFd, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::fchownat(dir, name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
}

/// `chmod` relative to `dir`. Only call on names known not to be symlinks.
pub fn chmodat(dir: RawFd, name: &CStr, perm: u32) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    check(unsafe { libc::fchmodat(dir, name.as_ptr(), perm, 0) })
}

pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain syscall on a valid fd.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })
}

pub fn fchmod(fd: BorrowedFd<'_>, perm: u32) -> io::Result<()> {
    // SAFETY: plain syscall on a valid fd.
    check(unsafe { libc::fchmod(fd.as_raw_fd(), perm) })
}

fn timespecs(mtime_ns: i64) -> [libc::timespec; 2] {
    let ts = libc::timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000) as libc::time_t,
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as _,
    };
    [ts, ts]
}

/// Set atime and mtime of an open file to `mtime_ns`.
pub fn futimens(fd: BorrowedFd<'_>, mtime_ns: i64) -> io::Result<()> {
    let ts = timespecs(mtime_ns);
    // SAFETY: `ts` is a valid array of two timespecs.
    check(unsafe { libc::futimens(fd.as_raw_fd(), ts.as_ptr()) })
}

/// Set atime and mtime of `dir/name` to `mtime_ns`, not following a symlink.
pub fn lutimensat(dir: RawFd, name: &CStr, mtime_ns: i64) -> io::Result<()> {
    let ts = timespecs(mtime_ns);
    // SAFETY: `ts` is a valid array of two timespecs; `name` is NUL-terminated.
    check(unsafe { libc::utimensat(dir, name.as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
}

/// Whether this process runs as root (decides which restore failures are errors).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}
