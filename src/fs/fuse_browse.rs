//! The fuser adapter for the browse mount: each `Filesystem` method unpacks its
//! arguments, calls [`BrowseFs`] and turns the `Result` into a reply. The only
//! policy here is caching:
//!
//! - The store's own nodes (the root, `checkpoints/`, `refs/`, `forks/…`,
//!   `archives/`) change: their entries and attributes live [`STORE_TTL`], and
//!   their directories are opened without `FOPEN_CACHE_DIR`, so a listing
//!   re-reads the store and new checkpoints, refs and forks show within a
//!   second.
//! - A checkpoint's tree never changes: a day, like a read-only mount, and its
//!   directories are opened with `FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE`.
//! - `open` (files only) answers `ENOSYS`: zero-message opens that keep the
//!   page cache; every file here is immutable (a `<id>.json` record too).
//!   `opendir` cannot: the kernel would then cache every directory's listing.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::browse::BrowseFs;
use super::fuse::{fail, file_attr, file_type, reply_seek, seek_whence};
use super::readonly::XattrReply;
use super::{FsError, MountRelease, errno};

/// How long the kernel may cache the store's own entries and attributes.
pub const STORE_TTL: Duration = Duration::from_secs(1);
/// The same for a checkpoint's tree, which never changes.
const TREE_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Inodes are never reused, so one generation suffices.
const GENERATION: Generation = Generation(0);

/// The TTL for entries found in, or attributes of, `ino`.
fn ttl(ino: u64) -> &'static Duration {
    if BrowseFs::is_store_node(ino) {
        &STORE_TTL
    } else {
        &TREE_TTL
    }
}

/// The fuser `Filesystem` for a browse mount.
pub struct BrowseAdapter {
    fs: BrowseFs,
    release: MountRelease,
}

impl BrowseAdapter {
    pub fn new(fs: BrowseFs, release: MountRelease) -> BrowseAdapter {
        BrowseAdapter { fs, release }
    }
}

impl Filesystem for BrowseAdapter {
    fn destroy(&mut self) {
        self.release.release();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // As for a read-only mount (ACLs in checkpoints are enforced). Cached symlink targets are safe: a store
        // symlink's inode is tied to its target (a moved ref is a new inode).
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
            Ok(attr) => reply.entry(ttl(parent.0), &file_attr(&attr), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(attr) => reply.attr(ttl(ino.0), &file_attr(&attr)),
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
        match self.fs.opendir(ino.0) {
            Ok(open) => {
                let flags = if open.cache {
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    FopenFlags::empty()
                };
                reply.opened(FileHandle(open.fh), flags);
            }
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset))]
    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.fs.readdir(ino.0, fh.0, offset, |item| {
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
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let result = self.fs.readdir(ino.0, fh.0, offset, |item| {
            let name = OsStr::from_bytes(item.name);
            let attr = file_attr(&item.attr);
            reply.add(
                attr.ino,
                item.next_offset,
                name,
                ttl(ino.0),
                &attr,
                GENERATION,
            )
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
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
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

    // ---- every write is refused (the kernel refuses most first: the mount is ro) ----

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
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

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
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

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(fail(&FsError::ReadOnly));
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(fail(&FsError::ReadOnly));
    }
}
