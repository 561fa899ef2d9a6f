//! Ingest's own OS calls, over rustix: extended attributes read in full,
//! `SEEK_DATA`/`SEEK_HOLE`, and the `*at` family restore creates a tree
//! with. Every function returns `io::Result` with the OS error; callers add
//! the path. Calls other layers make too live in [`crate::sys`].

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom, Timespec, Timestamps, XattrFlags};
use rustix::io::Errno;

/// A C string from raw name bytes; a NUL inside is an `InvalidInput` error.
pub fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))
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
    fn list_size(&self) -> rustix::io::Result<usize> {
        match self {
            XattrTarget::Path(p) => rustix::fs::llistxattr_query(*p),
            XattrTarget::Fd(fd) => rustix::fs::flistxattr_query(fd),
        }
    }

    fn list(&self, buf: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            XattrTarget::Path(p) => rustix::fs::llistxattr(*p, buf),
            XattrTarget::Fd(fd) => rustix::fs::flistxattr(fd, buf),
        }
    }

    fn size(&self, name: &CStr) -> rustix::io::Result<usize> {
        match self {
            XattrTarget::Path(p) => rustix::fs::lgetxattr_query(*p, name),
            XattrTarget::Fd(fd) => rustix::fs::fgetxattr_query(fd, name),
        }
    }

    fn get(&self, name: &CStr, buf: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            XattrTarget::Path(p) => rustix::fs::lgetxattr(*p, name, buf),
            XattrTarget::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
        }
    }

    /// Set one attribute (creating or replacing it).
    pub fn set(&self, name: &[u8], value: &[u8]) -> io::Result<()> {
        let name = cstring(name)?;
        let flags = XattrFlags::empty();
        Ok(match self {
            XattrTarget::Path(p) => rustix::fs::lsetxattr(*p, &name, value, flags),
            XattrTarget::Fd(fd) => rustix::fs::fsetxattr(fd, &name, value, flags),
        }?)
    }
}

/// Ask `size` how big the result is, then `read` it into a buffer that big,
/// again while it does not fit (the size can change between the two calls,
/// which shows as ERANGE).
fn read_sized(
    size: impl Fn() -> rustix::io::Result<usize>,
    read: impl Fn(&mut [u8]) -> rustix::io::Result<usize>,
) -> rustix::io::Result<Vec<u8>> {
    loop {
        let mut buf = vec![0u8; size()?];
        match read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// All extended attributes of `target`, sorted by name. A filesystem without
/// xattr support yields none; an attribute removed while listing is skipped.
pub fn read_xattrs(target: XattrTarget<'_>) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let names = match read_sized(|| target.list_size(), |b| target.list(b)) {
        Ok(n) => n,
        Err(Errno::NOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = cstring(name)?;
        match read_sized(|| target.size(&cname), |b| target.get(&cname, b)) {
            Ok(value) => out.push((name.to_vec(), value)),
            Err(Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok(out)
}

// ---- sparse files ----

/// Where the next data starts at or after `offset` (`SEEK_DATA`).
/// `Ok(None)` means ENXIO: no more data after `offset`.
pub fn next_data(fd: BorrowedFd<'_>, offset: u64) -> io::Result<Option<u64>> {
    seek(fd, SeekFrom::Data(offset))
}

/// Where the next hole starts at or after `offset` (`SEEK_HOLE`).
/// `Ok(None)` means ENXIO: `offset` is at or past the end.
pub fn next_hole(fd: BorrowedFd<'_>, offset: u64) -> io::Result<Option<u64>> {
    seek(fd, SeekFrom::Hole(offset))
}

fn seek(fd: BorrowedFd<'_>, to: SeekFrom) -> io::Result<Option<u64>> {
    match rustix::fs::seek(fd, to) {
        Ok(at) => Ok(Some(at)),
        Err(Errno::NXIO) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

// ---- fd-relative creation and metadata (restore) ----

/// `openat(dir, name, flags, mode)`, always with O_CLOEXEC.
pub fn openat(dir: BorrowedFd<'_>, name: &CStr, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    let mode = Mode::from_raw_mode(mode);
    Ok(rustix::fs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC,
        mode,
    )?)
}

/// Open an existing directory under `dir` without following a symlink.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW;
    openat(dir, name, flags, 0)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    Ok(rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode))?)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::symlinkat(target, dir, name)?)
}

/// `mknodat(dir, name, mode, rdev)`; `mode` holds the file type bits too.
pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, rdev: u64) -> io::Result<()> {
    let kind = FileType::from_raw_mode(mode);
    Ok(rustix::fs::mknodat(
        dir,
        name,
        kind,
        Mode::from_raw_mode(mode),
        rdev,
    )?)
}

/// Hardlink `old_dir/old` as `new_dir/new`, never following a symlink.
pub fn linkat(
    old_dir: BorrowedFd<'_>,
    old: &CStr,
    new_dir: BorrowedFd<'_>,
    new: &CStr,
) -> io::Result<()> {
    Ok(rustix::fs::linkat(
        old_dir,
        old,
        new_dir,
        new,
        AtFlags::empty(),
    )?)
}

/// The owner ids as `chown` takes them: -1 leaves one unchanged.
fn owner(uid: u32, gid: u32) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
    (
        (uid != u32::MAX).then(|| rustix::fs::Uid::from_raw(uid)),
        (gid != u32::MAX).then(|| rustix::fs::Gid::from_raw(gid)),
    )
}

/// `lchown` relative to `dir` (AT_SYMLINK_NOFOLLOW).
pub fn lchownat(dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = owner(uid, gid);
    Ok(rustix::fs::chownat(
        dir,
        name,
        uid,
        gid,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `chmod` relative to `dir`. Only call on names known not to be symlinks.
pub fn chmodat(dir: BorrowedFd<'_>, name: &CStr, perm: u32) -> io::Result<()> {
    let mode = Mode::from_raw_mode(perm);
    Ok(rustix::fs::chmodat(dir, name, mode, AtFlags::empty())?)
}

pub fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = owner(uid, gid);
    Ok(rustix::fs::fchown(fd, uid, gid)?)
}

pub fn fchmod(fd: BorrowedFd<'_>, perm: u32) -> io::Result<()> {
    Ok(rustix::fs::fchmod(fd, Mode::from_raw_mode(perm))?)
}

/// Access and modification time both `mtime_ns`.
fn timestamps(mtime_ns: i64) -> Timestamps {
    let ts = Timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000),
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000),
    };
    Timestamps {
        last_access: ts,
        last_modification: ts,
    }
}

/// Set atime and mtime of an open file to `mtime_ns`.
pub fn futimens(fd: BorrowedFd<'_>, mtime_ns: i64) -> io::Result<()> {
    Ok(rustix::fs::futimens(fd, &timestamps(mtime_ns))?)
}

/// Set atime and mtime of `dir/name` to `mtime_ns`, not following a symlink.
pub fn lutimensat(dir: BorrowedFd<'_>, name: &CStr, mtime_ns: i64) -> io::Result<()> {
    let times = timestamps(mtime_ns);
    Ok(rustix::fs::utimensat(
        dir,
        name,
        &times,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}
