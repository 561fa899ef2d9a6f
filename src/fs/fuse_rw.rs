//! The fuser adapter for a fork: each `Filesystem` method unpacks its
//! arguments, calls [`ForkFs`] and turns the `Result` into a reply. No
//! filesystem logic here.
//!
//! No writeback cache (fuser does not ask for it): every `write(2)` reaches the
//! journal before it returns, so "fsync returned" means durable. Shared
//! writable mappings still work: the kernel writes dirty pages back as
//! `FUSE_WRITE_CACHE` writes on msync, munmap or fsync (and close: the
//! kernel writes dirty pages back before it would send `flush`).
//!
//! `flush` answers `ENOSYS`, so the kernel stops sending it: a close costs no
//! round trip. Writes arrive in requests of up to 1 MiB (fuser asks for
//! `FUSE_MAX_PAGES` with a 16 MiB `max_write`; the kernel caps it at
//! `fs.fuse.max_pages_limit`, 256 pages by default).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, CopyFileRangeFlags, FileAttr, FileHandle, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::fuse::{fail, file_type, reply_seek, seek_whence, system_time};
use super::readonly::{BLOCK_SIZE, XattrReply, kernel_dev};
use super::readwrite::{Caller, ForkFs, Opened, WriteCtx};
use super::{FsError, MountRelease, errno};
use crate::journal::{Attr, SetAttr, Time};

/// How long the kernel may cache entries and attributes. This daemon is the
/// only writer and every mutation replies with fresh attributes, so a short
/// TTL only bounds how stale a size seen by another open can be.
const TTL: Duration = Duration::from_secs(1);
/// Inode numbers are never reused within a fork, so one generation suffices.
const GENERATION: Generation = Generation(0);

/// The fuser `Filesystem` for a fork.
pub struct ForkAdapter {
    fs: ForkFs,
    release: MountRelease,
}

impl ForkAdapter {
    pub fn new(fs: ForkFs, release: MountRelease) -> ForkAdapter {
        ForkAdapter { fs, release }
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    let mtime = system_time(a.mtime_ns);
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime_ns),
        mtime,
        ctime: system_time(a.ctime_ns),
        crtime: mtime,
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: kernel_dev(a.rdev),
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

/// Nanoseconds since the epoch (negative before it), saturating.
fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

fn time(t: TimeOrNow) -> Time {
    match t {
        TimeOrNow::Now => Time::Now,
        TimeOrNow::SpecificTime(t) => Time::At(nanos(t)),
    }
}

fn fopen_flags(o: Opened) -> FopenFlags {
    if o.direct_io {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::empty()
    }
}

impl Filesystem for ForkAdapter {
    fn destroy(&mut self) {
        self.release.release();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // readdirplus fills the attribute cache while listing; a symlink's
        // target never changes; DIRECT_IO_ALLOW_MMAP lets O_APPEND (direct
        // I/O) handles be mapped shared. POSIX_ACL makes the kernel check
        // permissions against the ACL xattrs (and validate what setfacl
        // sets); keeping mode and ACLs in step and inheriting default ACLs
        // is ours (`store::acl`, applied by the fork), so DONT_MASK hands us the umask instead
        // of applying it (no umask under a default ACL). All optional.
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_CACHE_SYMLINKS,
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
            InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK,
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

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?mode, ?uid, ?gid, ?size))]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // ftruncate comes with its handle; the inode is all the fork needs.
        let attrs = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
        };
        match self.fs.setattr(ino.0, &attrs) {
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

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, mode))]
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        match self
            .fs
            .mknod(parent.0, name.as_bytes(), mode, umask, rdev, caller(req))
        {
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, mode))]
    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self
            .fs
            .mkdir(parent.0, name.as_bytes(), mode, umask, caller(req))
        {
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.fs.unlink(parent.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name))]
    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.fs.rmdir(parent.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?link_name))]
    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        match self
            .fs
            .symlink(parent.0, link_name.as_bytes(), target, caller(req))
        {
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, newparent = newparent.0, ?newname, flags = flags.bits()))]
    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.fs.rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags.bits(),
        ) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, newparent = newparent.0, ?newname))]
    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.fs.link(ino.0, newparent.0, newname.as_bytes()) {
            Ok(attr) => reply.entry(&TTL, &file_attr(&attr), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, flags = flags.0))]
    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.open(ino.0, flags.0) {
            Ok(o) => reply.opened(FileHandle(o.fh()), fopen_flags(o)),
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

    /// Not implemented: ENOSYS makes the kernel copy through read and write
    /// from now on (it stops asking), without fuser's warning.
    #[tracing::instrument(level = "debug", skip_all, fields(ino_in = ino_in.0, ino_out = ino_out.0))]
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        reply.error(errno(&FsError::NotNeeded));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, len = data.len(), write_flags = write_flags.bits(), flags = flags.0))]
    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // A write of an O_APPEND file lands at the journal's end of file, not
        // at the kernel's idea of it; page-cache writeback (mmap) always
        // carries its page's own offset (and may name any handle).
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let how = WriteCtx {
            append: flags.0 & libc::O_APPEND != 0 && !cached,
            direct: Opened::from_fh(fh.0).direct_io && !cached,
            caller: caller(req),
        };
        match self.fs.write(ino.0, offset, data, how) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fail(&e)),
        }
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
        // Writes are synchronous: nothing is pending at close, and locks are
        // the kernel's. ENOSYS stops the kernel sending flush on every
        // close(2) (a round trip each); it still writes back dirty mmap
        // pages itself before it would have sent one.
        reply.error(errno(&FsError::NotNeeded));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.release(ino.0);
        reply.ok();
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
        match self.fs.sync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
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
        let result = self.fs.readdir(ino.0, fh.0, offset, false, |item| {
            let name = OsStr::from_bytes(item.name);
            reply.add(
                INodeNo(item.ino),
                item.next_offset,
                file_type(item.kind),
                name,
            )
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
        let result = self.fs.readdir(ino.0, fh.0, offset, true, |item| {
            let Some(attr) = item.attr.as_ref() else {
                return false;
            };
            let name = OsStr::from_bytes(item.name);
            let attr = file_attr(attr);
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
        match self.fs.sync() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_avail,
                s.files,
                s.files_free,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name, len = value.len(), flags))]
    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self
            .fs
            .setxattr(ino.0, name.as_bytes(), value, flags, caller(req))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
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

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name))]
    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.fs.removexattr(ino.0, name.as_bytes()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0))]
    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Not sent with default_permissions (the kernel checks the mode bits
        // and ACLs).
        reply.ok();
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, mode, flags))]
    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self
            .fs
            .create(parent.0, name.as_bytes(), mode, umask, flags, caller(req))
        {
            Ok((attr, o)) => reply.created(
                &TTL,
                &file_attr(&attr),
                GENERATION,
                FileHandle(o.fh()),
                fopen_flags(o),
            ),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, length, mode))]
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.fs.fallocate(ino.0, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fail(&e)),
        }
    }
}
