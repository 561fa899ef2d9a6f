//! Test only: fuser 0.18's own parsing and encoding of every request, the
//! second implementation [`super::wire`]'s codec is pinned to. Until
//! storefs served `/dev/fuse` with its own codec ([`super::devfuse`]) this
//! was the classic transport (`FuseAdapter`'s `Filesystem` methods, one per
//! op); the differential tests in `wire.rs` run fuser with it over a socket
//! pair and require the same reply bytes and the same view calls from
//! storefs's codec on both transports. An op fuser does not parse gets
//! fuser's `ENOSYS` here; adding an op to storefs does not need it here.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, Generation,
    INodeNo, IoctlFlags, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::dispatch::{self, Op, Reply, kernel_attr};
use super::view::{BLOCK_SIZE, Caller, DirItem, Readdir, View, XattrReply};
use crate::store::Kind;
use crate::store::model::{Attr, SetAttr, Time};

/// fuser's `Filesystem` serving a view through [`dispatch::dispatch`].
pub(crate) struct Reference {
    view: Arc<dyn View>,
}

impl Reference {
    pub(crate) fn new(view: Arc<dyn View>) -> Reference {
        Reference { view }
    }

    /// Serve `op` on node `ino` for `req` and answer through `reply`.
    fn serve(&self, req: &Request, ino: INodeNo, op: Op<'_>, reply: impl Answer) {
        reply.answer(dispatch::dispatch(&*self.view, request(req, ino, op)));
    }
}

/// The decoded request (the caller's umask is 0: the ops that carry one
/// have it in their [`Op`]).
fn request<'a>(req: &Request, ino: INodeNo, op: Op<'a>) -> dispatch::Request<'a> {
    dispatch::Request {
        unique: req.unique().0,
        ino: ino.0,
        caller: Caller {
            uid: req.uid(),
            gid: req.gid(),
            pid: req.pid(),
            umask: 0,
        },
        op,
    }
}

/// A fuser reply that takes the dispatcher's answer.
trait Answer {
    fn answer(self, r: Result<Reply, Errno>);
}

/// A reply of a kind the request cannot carry: a bug of the dispatcher's.
fn unexpected(r: &Reply) -> Errno {
    tracing::error!(reply = ?r, "a reply the request cannot carry");
    Errno::EIO
}

/// Each fuser reply type, with the [`Reply`]s it carries.
macro_rules! answer {
    ($($ty:ty as $r:ident { $($pat:pat => $body:expr),* $(,)? })*) => {$(
        impl Answer for $ty {
            fn answer(self, result: Result<Reply, Errno>) {
                let $r = self;
                match result {
                    $(Ok($pat) => $body,)*
                    #[allow(unreachable_patterns)]
                    Ok(other) => $r.error(unexpected(&other)),
                    Err(e) => $r.error(e),
                }
            }
        }
    )*};
}

answer! {
    ReplyEntry as r {
        Reply::Entry(e, g) => r.entry(&e.ttl, &file_attr(&e.attr), g),
        // Node id 0 with a timeout: "absent", cached that long.
        Reply::Absent(ttl) => r.entry(&ttl, &negative_attr(), Generation(0)),
    }
    ReplyAttr as r { Reply::Attr(e) => r.attr(&e.ttl, &file_attr(&e.attr)) }
    ReplyData as r { Reply::Data(d) => r.data(&d) }
    ReplyXattr as r {
        Reply::Xattr(XattrReply::Size(n)) => r.size(n),
        Reply::Xattr(XattrReply::Data(d)) => r.data(&d),
    }
    ReplyOpen as r { Reply::Opened(h) => r.opened(FileHandle(h.fh), h.flags) }
    ReplyCreate as r {
        Reply::Created(e, g, h) => {
            r.created(&e.ttl, &file_attr(&e.attr), g, FileHandle(h.fh), h.flags)
        }
    }
    ReplyWrite as r { Reply::Written(n) => r.written(n) }
    ReplyLseek as r { Reply::Offset(o) => r.offset(o) }
    ReplyEmpty as r { Reply::Empty => r.ok() }
    ReplyDirectory as r { Reply::Empty => r.ok() }
    ReplyDirectoryPlus as r { Reply::Empty => r.ok() }
    ReplyIoctl as r { Reply::Ioctl(d) => r.ioctl(0, &d) }
    ReplyStatfs as r {
        Reply::StatFs(s) => r.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_avail,
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
            s.block_size,
        ),
    }
}

fn file_type(kind: Kind) -> FileType {
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
fn system_time(ns: i64) -> SystemTime {
    let magnitude = Duration::from_nanos(ns.unsigned_abs());
    let t = if ns >= 0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    };
    t.unwrap_or(UNIX_EPOCH)
}

/// Nanoseconds since the epoch (negative before it), saturating.
fn nanos(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// A time a request carried, as nanoseconds since the epoch. The kernel
/// sends a `timespec`: seconds, then nanoseconds always added. fuser 0.18
/// (`system_time_from_time`) subtracts the nanoseconds of a time before the
/// epoch instead: (-2 s, +0.5 s), which is -1.5 s, arrives as the epoch
/// minus 2.5 s. Before the epoch this reads its whole seconds and adds its
/// nanoseconds back, as the kernel meant (the io_uring transport reads the
/// `timespec` itself: `wire::sent_time`).
fn sent_nanos(t: SystemTime) -> i64 {
    match UNIX_EPOCH.duration_since(t) {
        Ok(before) if before.subsec_nanos() != 0 => {
            let secs = i128::from(before.as_secs());
            let ns = -secs * 1_000_000_000 + i128::from(before.subsec_nanos());
            ns.clamp(i128::from(i64::MIN), 0) as i64
        }
        _ => nanos(t),
    }
}

fn time(t: TimeOrNow) -> Time {
    match t {
        TimeOrNow::Now => Time::Now,
        TimeOrNow::SpecificTime(t) => Time::At(sent_nanos(t)),
    }
}

/// fuser's form of [`kernel_attr`] (fuser encodes it back to those bytes).
fn file_attr(a: &Attr) -> FileAttr {
    let k = kernel_attr(a);
    let mtime = system_time(a.mtime_ns);
    FileAttr {
        ino: INodeNo(k.ino),
        size: k.size,
        blocks: k.blocks,
        atime: system_time(a.atime_ns),
        mtime,
        ctime: system_time(a.ctime_ns),
        crtime: mtime,
        kind: file_type(a.kind),
        perm: (k.mode & 0o7777) as u16,
        nlink: k.nlink,
        uid: k.uid,
        gid: k.gid,
        rdev: k.rdev,
        blksize: k.blksize,
        flags: k.flags,
    }
}

/// The attributes of a negative entry: node id 0, nothing else read.
fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

/// The replies a directory listing fills: `readdir`'s and `readdirplus`'s.
trait Listing: Answer {
    /// Whether the items it takes carry their attributes.
    const PLUS: bool;
    /// Add `item` (`view`'s: its generation, [`dispatch::generation`]);
    /// true once the reply is full.
    fn add_item(&mut self, view: &dyn View, item: DirItem<'_>) -> bool;
}

impl Listing for ReplyDirectory {
    const PLUS: bool = false;
    fn add_item(&mut self, _: &dyn View, item: DirItem<'_>) -> bool {
        let name = OsStr::from_bytes(item.name);
        self.add(
            INodeNo(item.ino),
            item.next_offset,
            file_type(item.kind),
            name,
        )
    }
}

impl Listing for ReplyDirectoryPlus {
    const PLUS: bool = true;
    /// An item without its attributes ends the reply.
    fn add_item(&mut self, view: &dyn View, item: DirItem<'_>) -> bool {
        let Some(entry) = item.entry else {
            return false;
        };
        let name = OsStr::from_bytes(item.name);
        let attr = file_attr(&entry.attr);
        self.add(
            attr.ino,
            item.next_offset,
            name,
            &entry.ttl,
            &attr,
            dispatch::generation(view, attr.ino.0),
        )
    }
}

/// `readdir` and `readdirplus`: one listing, into the method's [`Listing`].
macro_rules! list {
    ($($name:ident: $reply:ty),*) => {$(
        fn $name(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: $reply) {
            let at = Readdir {
                fh: fh.0,
                offset,
                plus: <$reply as Listing>::PLUS,
            };
            let view = &*self.view;
            let add = Box::new(|item: DirItem<'_>| reply.add_item(view, item));
            let listed = dispatch::dispatch(&*self.view, request(req, ino, Op::ReadDir { at, add }));
            reply.answer(listed);
        }
    )*};
}

impl Filesystem for Reference {
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.as_bytes();
        self.serve(req, parent, Op::Lookup { name }, reply);
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        // No reply: the answer is `Reply::Nothing`.
        let _ = dispatch::dispatch(&*self.view, request(req, ino, Op::Forget { nlookup }));
    }

    // `batch_forget`: fuser's default calls `forget` for each node (its
    // `ForgetOne` is not public in 0.18).

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.serve(req, ino, Op::GetAttr, reply);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // ftruncate comes with its handle; the inode is all a view needs.
        let attrs = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
            ctime: ctime.map(sent_nanos),
        };
        self.serve(req, ino, Op::SetAttr(attrs), reply);
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.serve(req, ino, Op::ReadLink, reply);
    }

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
        let name = name.as_bytes();
        let op = Op::MkNod {
            name,
            mode,
            umask,
            rdev,
        };
        self.serve(req, parent, op, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let name = name.as_bytes();
        self.serve(req, parent, Op::MkDir { name, mode, umask }, reply);
    }

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
        let name = name.as_bytes();
        let op = Op::Create {
            name,
            mode,
            umask,
            flags,
        };
        self.serve(req, parent, op, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes();
        self.serve(req, parent, Op::Unlink { name }, reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes();
        self.serve(req, parent, Op::RmDir { name }, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let name = link_name.as_bytes();
        let target = target.as_os_str().as_bytes();
        self.serve(req, parent, Op::Symlink { name, target }, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let op = Op::Rename {
            name: name.as_bytes(),
            new_parent: newparent.0,
            new_name: newname.as_bytes(),
            flags: flags.bits(),
        };
        self.serve(req, parent, op, reply);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let op = Op::Link {
            ino: ino.0,
            new_name: newname.as_bytes(),
        };
        self.serve(req, newparent, op, reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.serve(req, ino, Op::Open { flags: flags.0 }, reply);
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.serve(req, ino, Op::Read { offset, size }, reply);
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        self.serve(req, ino, Op::Lseek { offset, whence }, reply);
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let unrestricted = flags.contains(IoctlFlags::FUSE_IOCTL_UNRESTRICTED);
        let op = Op::Ioctl {
            unrestricted,
            cmd,
            // fuser does not pass it on.
            arg: 0,
            in_data,
            out_size,
        };
        self.serve(req, ino, op, reply);
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let op = Op::CopyFileRange {
            offset_in,
            ino_out: ino_out.0,
            offset_out,
            len,
        };
        self.serve(req, ino_in, op, reply);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let op = Op::Write {
            offset,
            data,
            flags: flags.0,
            writeback: write_flags.contains(WriteFlags::FUSE_WRITE_CACHE),
            kill_suidgid: write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
        };
        self.serve(req, ino, op, reply);
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.serve(req, ino, Op::Flush, reply);
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.serve(req, ino, Op::Release, reply);
    }

    fn fsync(&self, req: &Request, ino: INodeNo, _fh: FileHandle, _data: bool, reply: ReplyEmpty) {
        self.serve(req, ino, Op::Sync, reply);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _data: bool,
        reply: ReplyEmpty,
    ) {
        self.serve(req, ino, Op::Sync, reply);
    }

    list!(readdir: ReplyDirectory, readdirplus: ReplyDirectoryPlus);

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.serve(req, ino, Op::OpenDir, reply);
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.serve(req, ino, Op::ReleaseDir { fh: fh.0 }, reply);
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.serve(req, ino, Op::StatFs, reply);
    }

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
        let name = name.as_bytes();
        self.serve(req, ino, Op::SetXattr { name, value, flags }, reply);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name.as_bytes();
        self.serve(req, ino, Op::GetXattr { name, size }, reply);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.serve(req, ino, Op::ListXattr { size }, reply);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes();
        self.serve(req, ino, Op::RemoveXattr { name }, reply);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.serve(req, ino, Op::Access { mask: mask.bits() }, reply);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let op = Op::Fallocate {
            offset,
            length,
            mode,
        };
        self.serve(req, ino, op, reply);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_the_epoch_keep_their_nanoseconds() {
        // What fuser 0.18 makes of the kernel's (-2 s, +0.5 s).
        let fusers = UNIX_EPOCH - Duration::new(2, 500_000_000);
        assert_eq!(sent_nanos(fusers), -1_500_000_000);
        assert_eq!(
            sent_nanos(UNIX_EPOCH - Duration::from_secs(2)),
            -2_000_000_000
        );
        let after = UNIX_EPOCH + Duration::new(3, 250);
        assert_eq!(sent_nanos(after), 3_000_000_250);
    }
}
