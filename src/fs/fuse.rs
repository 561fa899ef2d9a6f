//! The fuser adapter: each `Filesystem` method unpacks its arguments, calls
//! [`ReadOnlyFs`] and turns the `Result` into a reply. No filesystem logic here.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::readonly::{Attr, BLOCK_SIZE, ReadOnlyFs, XattrReply};
use super::{FsError, MountRelease, errno};
use crate::journal::ext4::Seek;
use crate::store::Kind;

/// How long the kernel may cache entries and attributes. A checkpoint never
/// changes, so this is long.
const TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Inodes are never reused, so one generation suffices.
const GENERATION: Generation = Generation(0);

/// The fuser `Filesystem` for a read-only checkpoint.
pub struct FuseAdapter {
    fs: ReadOnlyFs,
    release: MountRelease,
}

impl FuseAdapter {
    pub fn new(fs: ReadOnlyFs, release: MountRelease) -> FuseAdapter {
        FuseAdapter { fs, release }
    }
}

/// Log an operation's failure (at debug: ENOENT is routine; store failures were
/// already warned about) and give its errno.
pub(super) fn fail(e: &FsError) -> Errno {
    tracing::debug!(error = %e, "fails");
    errno(e)
}

/// The `lseek` whence a view answers: `SEEK_DATA` or `SEEK_HOLE` (the kernel
/// answers the others itself and never sends them).
pub(super) fn seek_whence(whence: i32) -> Result<Seek, FsError> {
    match whence {
        libc::SEEK_DATA => Ok(Seek::Data),
        libc::SEEK_HOLE => Ok(Seek::Hole),
        _ => Err(FsError::Invalid(
            "lseek whence other than SEEK_DATA or SEEK_HOLE",
        )),
    }
}

/// Reply to `lseek` with a view's answer (`None`: `ENXIO`).
pub(super) fn reply_seek(result: Result<Option<u64>, FsError>, reply: ReplyLseek) {
    match result.and_then(|o| o.ok_or(FsError::NoSeekTarget)) {
        // Offsets come from i64 file sizes.
        Ok(offset) => reply.offset(offset.min(i64::MAX as u64) as i64),
        Err(e) => reply.error(fail(&e)),
    }
}

pub(super) fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

/// Nanoseconds since the epoch (either side) as a `SystemTime`; the epoch
/// itself if out of range.
pub(super) fn system_time(ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(ns.unsigned_abs());
    let t = if ns >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    };
    t.unwrap_or(UNIX_EPOCH)
}

pub(super) fn file_attr(a: &Attr) -> FileAttr {
    let mtime = system_time(a.mtime_ns);
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: mtime,
        mtime,
        ctime: system_time(a.ctime_ns),
        crtime: mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

impl Filesystem for FuseAdapter {
    fn destroy(&mut self) {
        self.release.release();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // readdirplus fills the attribute cache while listing; symlink caching
        // spares readlink calls; POSIX_ACL makes the kernel check permissions
        // against the stored ACL xattrs, as ext4 would. All optional: run
        // without them if the kernel lacks them.
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_POSIX_ACL,
        ] {
            if let Err(missing) = config.add_capabilities(flag) {
                tracing::info!(
                    ?missing,
                    "kernel lacks a FUSE capability; continuing without it"
                );
            }
        }
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.fs.lookup(parent.0, name.as_bytes()) {
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, flags = flags.0))]
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.open(ino.0, flags.0) {
            // A checkpoint's files need no per-open state: ENOSYS switches the
            // kernel to zero-message opens that keep the page cache.
            Ok(()) => reply.error(errno(&FsError::NotNeeded)),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, size))]
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.fs.read(ino.0, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, whence))]
    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        reply_seek(
            seek_whence(whence).and_then(|w| self.fs.seek(ino.0, offset, w)),
            reply,
        );
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, cmd = cmd))]
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(fail(&FsError::NoIoctl));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // No per-open state to flush: ENOSYS stops the kernel sending flush on close.
        reply.error(errno(&FsError::NotNeeded));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.getattr(ino.0) {
            // Zero-message opendir from now on, with the directory cache kept.
            Ok(attr) if attr.kind == Kind::Dir => reply.error(errno(&FsError::NotNeeded)),
            Ok(_) => reply.error(fail(&FsError::NotDir)),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset))]
    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.fs.readdir(ino.0, offset, |item| {
            let kind = file_type(item.attr.kind);
            let name = OsStr::from_bytes(item.name);
            reply.add(INodeNo(item.attr.ino), item.next_offset, kind, name)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset))]
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let result = self.fs.readdir(ino.0, offset, |item| {
            let name = OsStr::from_bytes(item.name);
            let attr = file_attr(&item.attr);
            reply.add(attr.ino, item.next_offset, name, &TTL, &attr, GENERATION)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    #[tracing::instrument(level = "debug", skip_all)]
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks,
            0,
            0,
            s.files,
            0,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name, size))]
    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.fs.getxattr(ino.0, name.as_bytes(), size) {
            Ok(XattrReply::Size(n)) => reply.size(n),
            Ok(XattrReply::Data(value)) => reply.data(&value),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, size))]
    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs.listxattr(ino.0, size) {
            Ok(XattrReply::Size(n)) => reply.size(n),
            Ok(XattrReply::Data(names)) => reply.data(&names),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, mask = mask.bits()))]
    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.fs.access(ino.0, mask.bits()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    // ---- every write is refused ----

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?link_name))]
    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?newname))]
    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        _newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name))]
    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name))]
    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(fail(&FsError::ReadOnly));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }
}
