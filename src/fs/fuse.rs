//! The fuser adapter, one for every [`View`]: each `Filesystem` method
//! unpacks its arguments, builds the request's [`Caller`], calls the view and
//! turns the `Result` into a reply. No filesystem logic and no policy here:
//! TTLs, capabilities and handles are the view's. What lives here is FUSE's
//! wire form: errno (through [`errno`]), `lseek` whence, `FileAttr`, file
//! types, times and the kernel's device-number encoding.
//!
//! Whatever the view, `flush` and `ioctl` have one answer: `flush` answers
//! `ENOSYS`, so the kernel stops sending it (a close costs no round trip);
//! no `ioctl` is implemented (`ENOTTY`).
//!
//! The view is a `Box<dyn View>`: one adapter type serves every mount, and a
//! virtual call per request is nothing next to the kernel round trip.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};

use super::view::{
    Attr, BLOCK_SIZE, Caller, Capability, DirItem, Entry, Opened, Readdir, SetAttr, Time, View,
    WriteCtx, XattrReply,
};
use super::{FsError, MountRelease, Result, errno};
use crate::journal::ext4::Seek;
use crate::store::Kind;
use crate::sys;

/// Inode numbers are never reused within a mount, so one generation suffices.
pub(super) const GENERATION: Generation = Generation(0);

/// The fuser `Filesystem` serving a view.
pub struct FuseAdapter {
    view: Arc<dyn View>,
    release: MountRelease,
    /// Set when this mount wants FUSE over io_uring: INIT asks the kernel
    /// for it and stores here whether it agreed (see [`super::uring`]).
    uring: Option<Arc<AtomicBool>>,
}

impl FuseAdapter {
    /// The adapter for `view`; `uring` as [`FuseAdapter::uring`].
    pub fn new(
        view: Arc<dyn View>,
        release: MountRelease,
        uring: Option<Arc<AtomicBool>>,
    ) -> FuseAdapter {
        FuseAdapter {
            view,
            release,
            uring,
        }
    }
}

/// The caller of a request (its umask is 0: only create, mkdir and mknod
/// carry one).
fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
        umask: 0,
    }
}

/// The caller of a `create`, `mkdir` or `mknod`, which carry its umask.
fn caller_with_umask(req: &Request, umask: u32) -> Caller {
    Caller {
        umask,
        ..caller(req)
    }
}

/// Log an operation's failure (at debug: ENOENT is routine; store failures were
/// already warned about) and give its errno.
pub(super) fn fail(e: &FsError) -> Errno {
    tracing::debug!(error = %e, "fails");
    errno(e)
}

/// The replies that end with `ok` or an errno.
trait Finish {
    fn ok(self);
    fn error(self, e: Errno);
}

macro_rules! finish {
    ($($reply:ty),*) => {$(
        impl Finish for $reply {
            fn ok(self) {
                <$reply>::ok(self)
            }
            fn error(self, e: Errno) {
                <$reply>::error(self, e)
            }
        }
    )*};
}
finish!(ReplyEmpty, ReplyDirectory, ReplyDirectoryPlus);

fn reply_done(result: Result<()>, reply: impl Finish) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fail(&e)),
    }
}

fn reply_entry(result: Result<Entry>, reply: ReplyEntry) {
    match result {
        Ok(e) => reply.entry(&e.ttl, &file_attr(&e.attr), GENERATION),
        Err(e) => reply.error(fail(&e)),
    }
}

fn reply_attr(result: Result<Entry>, reply: ReplyAttr) {
    match result {
        Ok(e) => reply.attr(&e.ttl, &file_attr(&e.attr)),
        Err(e) => reply.error(fail(&e)),
    }
}

fn reply_data(result: Result<Vec<u8>>, reply: ReplyData) {
    match result {
        Ok(data) => reply.data(&data),
        Err(e) => reply.error(fail(&e)),
    }
}

fn reply_xattr(result: Result<XattrReply>, reply: ReplyXattr) {
    match result {
        Ok(XattrReply::Size(n)) => reply.size(n),
        Ok(XattrReply::Data(bytes)) => reply.data(&bytes),
        Err(e) => reply.error(fail(&e)),
    }
}

fn reply_open(result: Result<Opened>, reply: ReplyOpen) {
    match result {
        // Zero-message opens from now on (see `Opened::Stateless`).
        Ok(Opened::Stateless) => reply.error(errno(&FsError::NotNeeded)),
        Ok(o) => {
            let (fh, flags) = handle(o);
            reply.opened(fh, flags);
        }
        Err(e) => reply.error(fail(&e)),
    }
}

fn reply_created(result: Result<(Entry, Opened)>, reply: ReplyCreate) {
    match result {
        Ok((e, o)) => {
            let (fh, open_flags) = handle(o);
            reply.created(&e.ttl, &file_attr(&e.attr), GENERATION, fh, open_flags);
        }
        Err(e) => reply.error(fail(&e)),
    }
}

/// The handle and open flags given to the kernel.
pub(super) fn handle(o: Opened) -> (FileHandle, FopenFlags) {
    match o {
        Opened::Stateless => (FileHandle(0), FopenFlags::empty()),
        Opened::Handle { fh, keep_cache } => {
            let mut flags = FopenFlags::empty();
            if keep_cache {
                flags |= FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE;
            }
            (FileHandle(fh), flags)
        }
    }
}

/// The `lseek` whence a view answers: `SEEK_DATA` or `SEEK_HOLE` (the kernel
/// answers the others itself and never sends them).
pub(super) fn seek_whence(whence: i32) -> Result<Seek> {
    match whence {
        libc::SEEK_DATA => Ok(Seek::Data),
        libc::SEEK_HOLE => Ok(Seek::Hole),
        _ => Err(FsError::Invalid(
            "lseek whence other than SEEK_DATA or SEEK_HOLE",
        )),
    }
}

fn init_flags(c: Capability) -> InitFlags {
    match c {
        Capability::ReaddirPlus => InitFlags::FUSE_DO_READDIRPLUS,
        Capability::CacheSymlinks => InitFlags::FUSE_CACHE_SYMLINKS,
        Capability::KillPrivV2 => InitFlags::FUSE_HANDLE_KILLPRIV_V2,
        Capability::PosixAcl => InitFlags::FUSE_POSIX_ACL,
        Capability::PosixAclViewUmask => InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK,
        Capability::WritebackCache => InitFlags::FUSE_WRITEBACK_CACHE,
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

/// What `lookup` answers ([`look_up`]): an entry, or that the name is absent
/// for this long (a negative entry: node id 0, cached that long).
pub(super) enum Looked {
    Entry(Entry),
    Absent(Duration),
}

/// The lookup of `name` in `parent`, with the negative-entry rule: the view
/// found nothing there and gives `parent` a negative TTL
/// ([`View::negative_ttl`], asked after every lookup).
pub(super) fn look_up(view: &dyn View, c: &Caller, parent: u64, name: &[u8]) -> Result<Looked> {
    let found = view.lookup(c, parent, name);
    match (found, view.negative_ttl(parent)) {
        (Err(e), Some(ttl)) if e.is_not_found() => Ok(Looked::Absent(ttl)),
        (found, _) => found.map(Looked::Entry),
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

/// Re-encode a userspace `dev_t` (the store's encoding) in the kernel's
/// 32-bit `new_encode_dev` form, which is what FUSE's `rdev` carries.
pub(super) fn kernel_dev(rdev: u64) -> u32 {
    let (major, minor) = (sys::major(rdev), sys::minor(rdev));
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// A device number in the kernel's 32-bit form (what FUSE's `mknod`
/// carries) as a userspace `dev_t`; the inverse of [`kernel_dev`].
pub(super) fn user_dev(kernel: u32) -> u64 {
    let major = (kernel & 0xfff00) >> 8;
    let minor = (kernel & 0xff) | ((kernel >> 12) & 0xfff00);
    sys::makedev(major, minor)
}

/// The replies a directory listing fills: `readdir`'s and `readdirplus`'s.
trait Listing: Finish {
    /// Whether the items it takes carry their attributes.
    const PLUS: bool;
    /// Add `item`; true once the reply is full.
    fn add_item(&mut self, item: DirItem<'_>) -> bool;
}

impl Listing for ReplyDirectory {
    const PLUS: bool = false;
    fn add_item(&mut self, item: DirItem<'_>) -> bool {
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
    fn add_item(&mut self, item: DirItem<'_>) -> bool {
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
            GENERATION,
        )
    }
}

// The `Filesystem` methods that differ only in their names or reply types
// are written once each, by the macros below, inside its `impl`.

/// `fsync` and `fsyncdir`: [`View::sync`], whatever the handle.
macro_rules! sync {
    ($($name:ident),*) => {$(
        #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
        fn $name(
            &self,
            req: &Request,
            ino: INodeNo,
            _fh: FileHandle,
            _datasync: bool,
            reply: ReplyEmpty,
        ) {
            reply_done(self.view.sync(&caller(req)), reply);
        }
    )*};
}

/// `readdir` and `readdirplus`: one listing, into the method's [`Listing`].
macro_rules! list {
    ($($name:ident: $reply:ty),*) => {$(
        #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, pid = req.pid()))]
        fn $name(
            &self,
            req: &Request,
            ino: INodeNo,
            fh: FileHandle,
            offset: u64,
            mut reply: $reply,
        ) {
            let at = Readdir {
                fh: fh.0,
                offset,
                plus: <$reply as Listing>::PLUS,
            };
            let listed = self
                .view
                .readdir(&caller(req), ino.0, at, &mut |item| reply.add_item(item));
            reply_done(listed, reply);
        }
    )*};
}

/// `mknod`, `mkdir` and `create`: the requests that make a node and carry
/// the caller's umask. Each names its own arguments after the common ones,
/// its reply and reply function, and its view call on `view`, the caller
/// `c` (with the umask), `parent`, `name` (bytes) and `mode`.
macro_rules! make_node {
    ($(
        $name:ident($($arg:ident: $ty:ty),*) -> $reply:ty, $answer:ident,
            |$view:ident, $c:ident, $parent:ident, $n:ident, $mode:ident| $make:expr;
    )*) => {$(
        #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, mode, $($arg,)* pid = req.pid()))]
        fn $name(
            &self,
            req: &Request,
            parent: INodeNo,
            name: &OsStr,
            mode: u32,
            umask: u32,
            $($arg: $ty,)*
            reply: $reply,
        ) {
            let $view = &*self.view;
            let $c = &caller_with_umask(req, umask);
            let ($parent, $n, $mode) = (parent.0, name.as_bytes(), mode);
            $answer($make, reply);
        }
    )*};
}

impl Filesystem for FuseAdapter {
    fn destroy(&mut self) {
        self.release.release();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        for &c in self.view.capabilities() {
            if let Err(missing) = config.add_capabilities(init_flags(c)) {
                tracing::info!(
                    ?missing,
                    "kernel lacks a FUSE capability; continuing without it"
                );
            }
        }
        if let Some(agreed) = &self.uring {
            // Every request and reply must fit one ring entry's payload.
            let max_write = super::uring::PAYLOAD as u32;
            match config.add_capabilities(InitFlags::FUSE_OVER_IO_URING) {
                Ok(()) if config.set_max_write(max_write).is_ok() => {
                    agreed.store(true, Ordering::Release);
                }
                Ok(()) => tracing::warn!("cannot set max_write for io_uring; using /dev/fuse"),
                Err(_) => tracing::info!(
                    "the kernel does not offer FUSE over io_uring (enable_uring=N, or older than 6.14); using /dev/fuse"
                ),
            }
        }
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, pid = req.pid()))]
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match look_up(&*self.view, &caller(req), parent.0, name.as_bytes()) {
            Ok(Looked::Entry(e)) => reply.entry(&e.ttl, &file_attr(&e.attr), GENERATION),
            // Node id 0 with a timeout: "absent", cached that long.
            Ok(Looked::Absent(ttl)) => reply.entry(&ttl, &negative_attr(), GENERATION),
            Err(e) => reply.error(fail(&e)),
        }
    }

    /// One of the kernel's references to `ino` less (the view's lifetimes).
    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, nlookup))]
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.view.forget(ino.0, nlookup);
    }

    // `batch_forget`: fuser's default calls `forget` for each node (its
    // `ForgetOne` is not public in 0.18).

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply_attr(self.view.getattr(&caller(req), ino.0), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?mode, ?uid, ?gid, ?size, pid = req.pid()))]
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
        reply_attr(self.view.setattr(&caller(req), ino.0, &attrs), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        reply_data(self.view.readlink(&caller(req), ino.0), reply);
    }

    make_node! {
        mknod(rdev: u32) -> ReplyEntry, reply_entry,
            |view, c, parent, name, mode| view.mknod(c, parent, name, mode, user_dev(rdev));
        mkdir() -> ReplyEntry, reply_entry,
            |view, c, parent, name, mode| view.mkdir(c, parent, name, mode);
        create(flags: i32) -> ReplyCreate, reply_created,
            |view, c, parent, name, mode| view.create(c, parent, name, mode, flags);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, pid = req.pid()))]
    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_done(
            self.view.unlink(&caller(req), parent.0, name.as_bytes()),
            reply,
        );
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, pid = req.pid()))]
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_done(
            self.view.rmdir(&caller(req), parent.0, name.as_bytes()),
            reply,
        );
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?link_name, pid = req.pid()))]
    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        let made = self
            .view
            .symlink(&caller(req), parent.0, link_name.as_bytes(), target);
        reply_entry(made, reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(parent = parent.0, ?name, newparent = newparent.0, ?newname, flags = flags.bits(), pid = req.pid()))]
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
        let renamed = self.view.rename(
            &caller(req),
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags.bits(),
        );
        reply_done(renamed, reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, newparent = newparent.0, ?newname, pid = req.pid()))]
    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let linked = self
            .view
            .link(&caller(req), ino.0, newparent.0, newname.as_bytes());
        reply_entry(linked, reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, flags = flags.0, pid = req.pid()))]
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply_open(self.view.open(&caller(req), ino.0, flags.0), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, size, pid = req.pid()))]
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
        reply_data(self.view.read(&caller(req), ino.0, offset, size), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, whence, pid = req.pid()))]
    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let found = seek_whence(whence)
            .and_then(|w| self.view.seek(&caller(req), ino.0, offset, w))
            .and_then(|o| o.ok_or(FsError::NoSeekTarget));
        match found {
            // Offsets come from i64 file sizes.
            Ok(offset) => reply.offset(offset.min(i64::MAX as u64) as i64),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, cmd = cmd, pid = req.pid()))]
    fn ioctl(
        &self,
        req: &Request,
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

    /// The view's copy, at most what the reply's 32-bit count can say. A view
    /// that does not copy answers ENOSYS: the kernel then copies through
    /// read and write from now on (it stops asking), without fuser's warning.
    #[tracing::instrument(level = "debug", skip_all, fields(ino_in = ino_in.0, offset_in, ino_out = ino_out.0, offset_out, len, pid = req.pid()))]
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
        let len = len.min(u64::from(u32::MAX) & !0xfff);
        let from = (ino_in.0, offset_in);
        let to = (ino_out.0, offset_out);
        match self.view.copy_file_range(&caller(req), from, to, len) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, len = data.len(), write_flags = write_flags.bits(), flags = flags.0, pid = req.pid()))]
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
        let how = WriteCtx {
            offset,
            flags: flags.0,
            writeback: write_flags.contains(WriteFlags::FUSE_WRITE_CACHE),
            kill_suidgid: write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
        };
        match self.view.write(&caller(req), ino.0, data, how) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(fail(&e)),
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // No view keeps anything pending at close, and locks are the
        // kernel's. ENOSYS stops the kernel sending flush on every close(2);
        // it still writes back the file's dirty pages (mmap, or any write
        // under the writeback cache) itself before it would have sent one.
        reply.error(errno(&FsError::NotNeeded));
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
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
        self.view.release(&caller(req), ino.0);
        reply.ok();
    }

    sync!(fsync, fsyncdir);

    list!(readdir: ReplyDirectory, readdirplus: ReplyDirectoryPlus);

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply_open(self.view.opendir(&caller(req), ino.0), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.view.releasedir(&caller(req), fh.0);
        reply.ok();
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, pid = req.pid()))]
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.view.statfs(&caller(req)) {
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

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name, len = value.len(), flags, pid = req.pid()))]
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
        let set = self
            .view
            .setxattr(&caller(req), ino.0, name.as_bytes(), value, flags);
        reply_done(set, reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name, size, pid = req.pid()))]
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply_xattr(
            self.view
                .getxattr(&caller(req), ino.0, name.as_bytes(), size),
            reply,
        );
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, size, pid = req.pid()))]
    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(self.view.listxattr(&caller(req), ino.0, size), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, ?name, pid = req.pid()))]
    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_done(
            self.view.removexattr(&caller(req), ino.0, name.as_bytes()),
            reply,
        );
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, mask = mask.bits(), pid = req.pid()))]
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply_done(self.view.access(&caller(req), ino.0, mask.bits()), reply);
    }

    #[tracing::instrument(level = "debug", skip_all, fields(ino = ino.0, offset, length, mode, pid = req.pid()))]
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
        let done = self
            .view
            .fallocate(&caller(req), ino.0, offset, length, mode);
        reply_done(done, reply);
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

    #[test]
    fn device_numbers_use_the_kernel_encoding() {
        assert_eq!(kernel_dev(sys::makedev(8, 1)), 0x801);
        assert_eq!(kernel_dev(sys::makedev(1, 0x1234)), 0x120_0134);
        // Majors and minors past 8 bits use every field of the kernel's form.
        for (major, minor) in [(1, 3), (259, 70_000), (4095, (1 << 20) - 1)] {
            let rdev = sys::makedev(major, minor);
            assert_eq!(user_dev(kernel_dev(rdev)), rdev, "{major}:{minor}");
        }
    }
}
