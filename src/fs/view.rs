//! What a mount serves, on inode numbers: the [`View`] trait and the types it
//! speaks. No FUSE types here: [`super::fuse`] adapts any view to fuser, and
//! errors are [`FsError`]s that [`super::errno`] maps.
//!
//! Three views implement it: a checkpoint read-only ([`super::checkpoint`]),
//! the whole store read-only ([`super::browse`]) and a fork read-write
//! ([`super::fork`]). Whatever differs between them is decided here by the
//! view: the TTL of every entry it returns, the kernel capabilities it asks
//! for, its open and directory handles. Writes default to the read-only
//! refusal, so a read-only view implements only the reads.

use std::time::Duration;

use super::{FsError, Result};
use crate::store::Kind;
use crate::store::model::ext4::{self, Seek};
use crate::store::model::{Attr, Fallocate, Posix, RenameMode, SetAttr, StatFs, XattrMode};

/// The block size reported by `stat` (`st_blksize`) and `statfs`.
pub const BLOCK_SIZE: u32 = ext4::BLOCK as u32;

/// The uid and gid of a request that carries none (`FUSE_INVALID_UIDGID`).
/// Once a mount allows idmapped mounts ([`Capability::AllowIdmap`]) the
/// kernel sends ids only with the requests that make an inode (`mknod`,
/// `mkdir`, `symlink`, `create`, `tmpfile`, a whiteout rename): there they are
/// the creator's fsuid and fsgid as the file system stores them (mapped
/// through the idmapped mount it came by); every other request, on any
/// mount of that file system, idmapped or not, has this in both.
pub const NO_ID: u32 = u32::MAX;

/// Who asks: the requester's ids as the kernel gives them with each request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    /// The fsuid, or [`NO_ID`] (see there; [`Caller::fs_ids`] fills it in).
    pub uid: u32,
    /// The fsgid, or [`NO_ID`].
    pub gid: u32,
    /// The requesting process (0: unknown), for its supplementary groups.
    pub pid: u32,
    /// The caller's umask, sent with `create`, `mkdir` and `mknod` (0 with
    /// every other request); the kernel leaves applying it to the view.
    pub umask: u32,
}

impl Caller {
    /// Whether the caller is in group `gid` (its own group or a
    /// supplementary one, read from `/proc/PID/status`) or is root (standing
    /// in for `CAP_FSETID`). An id the request did not carry ([`NO_ID`]) is
    /// the process's own, from the same file: unmapped, so through an
    /// idmapped mount this can differ from the kernel's answer (which maps
    /// the file's group into the mount); the kernel decides the cases that
    /// matter most itself (a write's `FUSE_WRITE_KILL_SUIDGID`).
    pub fn in_group(self, gid: u32) -> bool {
        if self.uid == 0 || (self.gid == gid && self.gid != NO_ID) {
            return true;
        }
        if self.pid == 0 {
            return false;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid));
        status.ok().is_some_and(|s| {
            let field = |name| s.lines().find_map(|l| l.strip_prefix(name));
            (self.uid == NO_ID && fs_id(field("Uid:")) == Some(0))
                || (self.gid == NO_ID && fs_id(field("Gid:")) == Some(gid))
                || field("Groups:")
                    .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
        })
    }

    /// The caller's fsuid and fsgid: the request's, or for an id it did not
    /// carry ([`NO_ID`]) the requesting process's, read from
    /// `/proc/PID/status` (as the daemon's user namespace sees it; not
    /// mapped through an idmapped mount). [`NO_ID`] where that cannot be
    /// read either (pid 0, the process gone).
    pub fn fs_ids(self) -> (u32, u32) {
        if (self.uid != NO_ID && self.gid != NO_ID) || self.pid == 0 {
            return (self.uid, self.gid);
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid));
        let status = status.unwrap_or_default();
        let field = |name| status.lines().find_map(|l| l.strip_prefix(name));
        let or_process = |id, name| match id {
            NO_ID => fs_id(field(name)).unwrap_or(NO_ID),
            id => id,
        };
        (or_process(self.uid, "Uid:"), or_process(self.gid, "Gid:"))
    }

    /// Whether the caller holds `CAP_FSETID`, so its writes keep setuid and
    /// setgid (the kernel's `capable(CAP_FSETID)`), for the requests that
    /// carry no flag saying so (`fallocate`, `copy_file_range`, truncate):
    /// the effective capabilities in `/proc/PID/status` (PID is the
    /// requesting thread), counted only in the daemon's user namespace (a
    /// capability in a user namespace of its own is not `capable()`; one
    /// whose namespace cannot be read counts). A process that cannot be read (gone, or pid 0: not in the daemon's pid
    /// namespace) holds it when its uid is 0 (not when the request carried
    /// no uid, [`NO_ID`]).
    pub fn has_fsetid(self) -> bool {
        const CAP_FSETID: u32 = 4;
        self.capable(CAP_FSETID)
    }

    /// Whether the caller holds `CAP_LINUX_IMMUTABLE`, which setting or
    /// clearing the immutable and append-only flags takes (`chattr +i`,
    /// `+a`), decided as [`Caller::has_fsetid`] decides its capability.
    pub fn has_linux_immutable(self) -> bool {
        const CAP_LINUX_IMMUTABLE: u32 = 9;
        self.capable(CAP_LINUX_IMMUTABLE)
    }

    /// Whether the caller holds capability `cap` (see [`Caller::has_fsetid`]).
    pub fn capable(self, cap: u32) -> bool {
        if self.pid != 0
            && let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            && let Some(caps) = status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        {
            let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/user")).ok();
            let theirs = ns(&self.pid.to_string());
            let same_ns = theirs.is_none() || theirs == ns("self");
            return caps & (1 << cap) != 0 && same_ns;
        }
        self.uid == 0
    }
}

/// How a shutdown ioctl (`FS_IOC_SHUTDOWN`, `XFS_IOC_GOINGDOWN`) asks the
/// file system to go down: its `__u32` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// 0, `FS_SHUTDOWN_FLAGS_DEFAULT`: sync the file system, then shut down.
    Default,
    /// 1, `LOGFLUSH`: flush the log (the journal), then shut down.
    LogFlush,
    /// 2, `NOLOGFLUSH`: shut down now; what was not synced is lost.
    NoLogFlush,
}

impl Shutdown {
    /// The flag the caller passed, `None` when it could not be read (the
    /// kernel does not send it: see `dispatch.rs`): [`Shutdown::LogFlush`],
    /// which keeps the most. Another value is `EINVAL`, as on xfs and ext4.
    pub fn from_flag(flag: Option<u32>) -> Result<Shutdown> {
        match flag {
            Some(0) => Ok(Shutdown::Default),
            Some(1) | None => Ok(Shutdown::LogFlush),
            Some(2) => Ok(Shutdown::NoLogFlush),
            Some(_) => Err(Posix::Invalid("shutdown flag (0, 1 or 2)").into()),
        }
    }

    /// Whether what was written is made durable first.
    pub fn flushes(self) -> bool {
        self != Shutdown::NoLogFlush
    }
}

/// The filesystem id (the fourth of real, effective, saved, filesystem) of
/// a `Uid:` or `Gid:` line of `/proc/PID/status`.
fn fs_id(line: Option<&str>) -> Option<u32> {
    line?.split_whitespace().nth(3)?.parse().ok()
}

/// An inode's attributes and how long the kernel may cache them (and the
/// name that led to them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub attr: Attr,
    pub ttl: Duration,
}

/// One directory entry handed to a `readdir` callback.
pub struct DirItem<'a> {
    /// The offset that resumes the listing after this entry.
    pub next_offset: u64,
    pub name: &'a [u8],
    pub ino: u64,
    pub kind: Kind,
    /// The entry's attributes: given when asked for (readdirplus); a view
    /// may give them always. An item without them is left out of a
    /// readdirplus reply.
    pub entry: Option<Entry>,
}

impl<'a> DirItem<'a> {
    /// An item with its attributes.
    pub fn with(next_offset: u64, name: &'a [u8], entry: Entry) -> DirItem<'a> {
        DirItem {
            next_offset,
            name,
            ino: entry.attr.ino,
            kind: entry.attr.kind,
            entry: Some(entry),
        }
    }
}

/// A `readdir` request: where the listing resumes and what it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readdir {
    /// The handle `opendir` gave (0 for a view that gives none).
    pub fh: u64,
    /// 0 = start; else the `next_offset` of the last item taken.
    pub offset: u64,
    /// Items carry their attributes (readdirplus).
    pub plus: bool,
}

/// What a listing hands each item to: true once the reply is full.
pub type AddItem<'a> = dyn FnMut(DirItem<'_>) -> bool + 'a;

/// The answer to `open` and `opendir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// No per-open state. The kernel is told `ENOSYS` ("not needed") and stops
    /// sending this request; it then keeps its page cache (files) or
    /// directory cache (directories), as for `FOPEN_KEEP_CACHE |
    /// FOPEN_CACHE_DIR` ("zero-message opens").
    Stateless,
    /// Handle `fh` for the requests that follow on this open.
    Handle {
        fh: u64,
        /// The kernel may keep what it cached of this node before this open:
        /// a file's pages, a directory's listing (`FOPEN_KEEP_CACHE`, and
        /// `FOPEN_CACHE_DIR` for a directory). False: it drops them.
        keep_cache: bool,
    },
}

/// Where and how a write reached the view.
#[derive(Clone, Copy, Debug)]
pub struct WriteCtx {
    /// Where in the file the data goes.
    pub offset: u64,
    /// The `open(2)` flags of the handle (`O_APPEND`, …).
    pub flags: i32,
    /// Page-cache writeback (mmap, or a cached handle's data): it carries its
    /// page's own offset, and may come through any handle.
    pub writeback: bool,
    /// The kernel asks the view to clear setuid/setgid with this write
    /// (`FUSE_WRITE_KILL_SUIDGID`, with [`Capability::KillPrivV2`]).
    pub kill_suidgid: bool,
}

/// The answer to `getxattr`/`listxattr`: the size (for a size-0 probe) or the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// An optional kernel feature a view asks for at `init`; a kernel without it
/// is served without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// `readdirplus`: listings fill the attribute cache.
    ReaddirPlus,
    /// The kernel caches symlink targets.
    CacheSymlinks,
    /// The kernel checks permissions against the ACL xattrs, as ext4 would.
    PosixAcl,
    /// `FUSE_HANDLE_KILLPRIV_V2`: the view clears setuid/setgid on a write
    /// the kernel flags ([`WriteCtx::kill_suidgid`]), on a truncate,
    /// `fallocate` or `copy_file_range` by a caller without `CAP_FSETID`
    /// ([`Caller::has_fsetid`]) and on a chown; the kernel then marks the
    /// superblock `SB_NOSEC` and stops asking for `security.capability`
    /// before every write.
    KillPrivV2,
    /// [`Capability::PosixAcl`], with the umask handed to the view instead of
    /// applied by the kernel (no umask under a default ACL); both or neither.
    PosixAclViewUmask,
    /// `FUSE_WRITEBACK_CACHE`: writes land in the kernel's page cache and
    /// reach the view later, as page-cache writeback (on close, fsync,
    /// syncfs, memory pressure or after 30 s), each at its own offset
    /// ([`WriteCtx::writeback`]). The kernel then owns a regular file's size,
    /// mtime and ctime: it ignores those in the view's replies, handles
    /// `O_APPEND` itself, and sends the times as a `setattr` of its own
    /// (with its ctime, [`SetAttr::ctime`]) after the data.
    WritebackCache,
    /// `FUSE_EXPORT_SUPPORT`: file handles (`name_to_handle_at`, NFS) resolve
    /// after the kernel forgot the inode. A handle is the node id and its
    /// generation ([`View::generation`]); the kernel then asks for `"."` in
    /// any inode the handle names (a file too) and `".."` in a directory,
    /// and the reply's node id and generation must be the handle's: the
    /// view answers both by number for every inode it still has, and
    /// "absent" or `ESTALE` (both the kernel's `ESTALE`) for one it has not.
    ExportSupport,
    /// `FUSE_ALLOW_IDMAP`: the mount may be idmapped (`mount_setattr(2)`
    /// with `MOUNT_ATTR_IDMAP`; kernel 6.12 or later, and only with
    /// `default_permissions`, which every storefs mount has: without it the
    /// kernel fails the connection). The kernel then maps ids itself: the
    /// owner a creating request carries and the ids of a chown are the
    /// file system's, the attributes the view returns are mapped into the
    /// mount, and permissions are checked there. In return every request
    /// that makes no inode comes without ids ([`NO_ID`]), on every mount of
    /// the file system; the adapter asks for it only on a mount that
    /// admits every user (`allow_other`), because fuser's own uid filter
    /// (and the ring's copy of it) would refuse those requests otherwise.
    AllowIdmap,
}

/// The capabilities of a read-only view: readdirplus, cached symlinks,
/// ACLs enforced by the kernel, file handles for the life of the mount
/// (its numbers are its own: a [`mount_generation`] makes a handle from
/// another mount stale), and idmapped mounts (a read-only view reads no
/// ids from requests; the kernel maps the owners it shows).
pub const READ_ONLY_CAPABILITIES: &[Capability] = &[
    Capability::ReaddirPlus,
    Capability::CacheSymlinks,
    Capability::PosixAcl,
    Capability::ExportSupport,
    Capability::AllowIdmap,
];

/// A generation for a view whose inode numbers last one mount
/// ([`View::generation`]): random, in 1..=`u32::MAX` (the kernel keeps 32
/// bits), so a file handle from another mount names a generation this one
/// does not give (one chance in 2^32 that it does).
pub fn mount_generation() -> u64 {
    let mut b = [0u8; 4];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()) != Ok(4) {
        // No randomness: the time's low bits, still unlike the last mount's.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        b = (now.map_or(1, |d| d.subsec_nanos() ^ d.as_secs() as u32)).to_ne_bytes();
    }
    u64::from(u32::from_ne_bytes(b).max(1))
}

/// A filesystem served on inode numbers. Every request comes with its
/// [`Caller`]; views that do not care ignore it. Writes (from `setattr` on)
/// refuse with [`Posix::ReadOnly`] unless the view serves them.
#[allow(unused_variables)] // the defaults use none
pub trait View: Send + Sync {
    /// The kernel features to ask for at `init`.
    fn capabilities(&self) -> &'static [Capability];

    /// How long the kernel may remember that a name is absent from directory
    /// `parent` (a negative entry) after [`View::lookup`] found nothing there.
    /// Only for directories that change through this mount alone, or never:
    /// the kernel drops the negative entry when a name is made through it.
    /// `None` (the default): it asks again next time.
    fn negative_ttl(&self, parent: u64) -> Option<Duration> {
        None
    }

    /// The generation of every inode but the root's (always 0) in this
    /// view's entries: a file handle carries it with the inode number, and
    /// resolves only to an inode that has it again
    /// ([`Capability::ExportSupport`]). 0 (the default) for a view whose
    /// numbers name one inode for good (a fork); a view whose numbers last
    /// one mount takes a [`mount_generation`].
    fn generation(&self) -> u64 {
        0
    }

    /// The entry `name` in directory `parent`.
    fn lookup(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<Entry>;

    fn getattr(&self, c: &Caller, ino: u64) -> Result<Entry>;

    /// A symlink's target, byte-exact.
    fn readlink(&self, c: &Caller, ino: u64) -> Result<Vec<u8>>;

    /// Open file `ino` with the `open(2)` flags.
    fn open(&self, c: &Caller, ino: u64, flags: i32) -> Result<Opened>;

    /// Up to `size` bytes of file `ino` from `offset`; empty at or past the end.
    fn read(&self, c: &Caller, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>>;

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE`, as ext4 would answer
    /// ([`ext4::seek`]); `None` is `ENXIO`.
    fn seek(&self, c: &Caller, ino: u64, offset: i64, whence: Seek) -> Result<Option<u64>>;

    fn opendir(&self, c: &Caller, ino: u64) -> Result<Opened>;

    /// List directory `ino` as `at` asks ("." and ".." come first), calling
    /// `add` for each entry until it returns true (the reply is full).
    fn readdir(&self, c: &Caller, ino: u64, at: Readdir, add: &mut AddItem<'_>) -> Result<()>;

    fn statfs(&self, c: &Caller) -> Result<StatFs>;

    /// The value of xattr `name`; `size` 0 asks for its length only.
    fn getxattr(&self, c: &Caller, ino: u64, name: &[u8], size: u32) -> Result<XattrReply>;

    /// The xattr names, each NUL-terminated; `size` 0 asks for the length only.
    fn listxattr(&self, c: &Caller, ino: u64, size: u32) -> Result<XattrReply>;

    /// `access(2)` (the kernel checks the mode bits: `default_permissions`).
    fn access(&self, c: &Caller, ino: u64, mask: i32) -> Result<()>;

    /// The `chattr` flags of `ino` (`FS_IOC_GETFLAGS`, `lsattr`;
    /// [`crate::store::model::flags`]). The default: no such ioctl.
    fn get_flags(&self, c: &Caller, ino: u64) -> Result<u32> {
        Err(Posix::NoIoctl.into())
    }

    /// Shut the file system down (`FS_IOC_SHUTDOWN`): `flag` reads the
    /// caller's argument ([`Shutdown::from_flag`]; `None`: unreadable),
    /// called once the caller may shut it down. From then on
    /// [`View::is_shut_down`] is true. The default: no such ioctl
    /// (read-only views).
    fn shut_down(&self, c: &Caller, flag: &dyn Fn() -> Option<u32>) -> Result<()> {
        Err(Posix::NoIoctl.into())
    }

    /// Whether [`View::shut_down`] happened: the dispatcher then fails every
    /// request that reads or changes the file system with `EIO`.
    fn is_shut_down(&self) -> bool {
        false
    }

    /// The last close of a handle [`View::open`] gave.
    fn release(&self, c: &Caller, ino: u64) {}

    /// The kernel dropped `nlookup` of its references to `ino` (each entry
    /// it was given is one: lookup, create, mknod, mkdir, symlink, link and
    /// readdirplus items other than "." and "..").
    fn forget(&self, ino: u64, nlookup: u64) {}

    /// The end of a directory handle [`View::opendir`] gave.
    fn releasedir(&self, c: &Caller, fh: u64) {}

    /// fsync, fdatasync, fsyncdir: returns once everything done so far is durable.
    fn sync(&self, c: &Caller) -> Result<()> {
        Ok(())
    }

    // ---- writes: refused unless the view serves them ----

    fn setattr(&self, c: &Caller, ino: u64, attrs: &SetAttr) -> Result<Entry> {
        Err(Posix::ReadOnly.into())
    }

    /// `mknod(2)`; `rdev` is a userspace `dev_t`.
    fn mknod(&self, c: &Caller, parent: u64, name: &[u8], mode: u32, rdev: u64) -> Result<Entry> {
        Err(Posix::ReadOnly.into())
    }

    fn mkdir(&self, c: &Caller, parent: u64, name: &[u8], mode: u32) -> Result<Entry> {
        Err(Posix::ReadOnly.into())
    }

    fn symlink(&self, c: &Caller, parent: u64, name: &[u8], target: &[u8]) -> Result<Entry> {
        Err(Posix::ReadOnly.into())
    }

    fn link(&self, c: &Caller, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Entry> {
        Err(Posix::ReadOnly.into())
    }

    fn unlink(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    fn rmdir(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    /// `renameat2(2)`, its flags decoded ([`super::dispatch`]).
    fn rename(
        &self,
        c: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    /// Create and open a regular file (`O_CREAT`; the kernel looked it up first).
    fn create(
        &self,
        c: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<(Entry, Opened)> {
        Err(Posix::ReadOnly.into())
    }

    /// `open(2)` with `O_TMPFILE` in directory `parent` (`FUSE_TMPFILE`):
    /// a regular file with no name (nlink 0), open, which a `link` may name
    /// later (the kernel refuses that for an `O_EXCL` one itself). Mode,
    /// umask and owner as [`View::create`].
    fn tmpfile(&self, c: &Caller, parent: u64, mode: u32, flags: i32) -> Result<(Entry, Opened)> {
        Err(Posix::ReadOnly.into())
    }

    /// `renameat2(2)` with `RENAME_WHITEOUT` (and `RENAME_NOREPLACE` when
    /// `noreplace`): the rename, and a whiteout (a character device 0:0,
    /// mode 0, the caller's) at the old name, in one step. Any user may
    /// (Linux 5.8 dropped the `CAP_MKNOD` check); the kernel refuses
    /// `RENAME_WHITEOUT | RENAME_EXCHANGE` before it asks.
    fn rename_whiteout(
        &self,
        c: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        noreplace: bool,
    ) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    /// Write `data` to file `ino` through handle `how.fh` at `how.offset`;
    /// returns the bytes written.
    fn write(&self, c: &Caller, ino: u64, data: &[u8], how: WriteCtx) -> Result<u32> {
        Err(Posix::ReadOnly.into())
    }

    /// `setxattr(2)`, its flags (`XATTR_CREATE`, `XATTR_REPLACE`) decoded.
    fn setxattr(
        &self,
        c: &Caller,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    fn removexattr(&self, c: &Caller, ino: u64, name: &[u8]) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    /// Set the `chattr` flags of `ino` (`FS_IOC_SETFLAGS`).
    fn set_flags(&self, c: &Caller, ino: u64, flags: u32) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    /// `fallocate(2)`, its `mode` bits decoded.
    fn fallocate(&self, c: &Caller, ino: u64, offset: u64, len: u64, how: Fallocate) -> Result<()> {
        Err(Posix::ReadOnly.into())
    }

    /// `copy_file_range(2)` within this mount: up to `len` bytes of `from`
    /// to `to`; the bytes copied (fewer is a short copy the caller repeats).
    /// The default, [`FsError::NotNeeded`], makes the kernel copy through
    /// read and write and stop asking.
    fn copy_file_range(
        &self,
        c: &Caller,
        from: (u64, u64),
        to: (u64, u64),
        len: u64,
    ) -> Result<u64> {
        Err(FsError::NotNeeded)
    }
}

/// What a read-only view answers to an open with `flags` (the `open(2)`
/// flags) that it may serve: any write access or `O_TRUNC` is refused, and a
/// read needs no per-open state.
pub fn open_read_only(flags: i32) -> Result<Opened> {
    if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
        return Err(Posix::ReadOnly.into());
    }
    Ok(Opened::Stateless)
}

/// What a read-only view answers to `access(2)` of an inode it has: writing is
/// refused; the kernel checks the mode bits (`default_permissions`).
pub fn access_read_only(mask: i32) -> Result<()> {
    if mask & libc::W_OK != 0 {
        return Err(Posix::ReadOnly.into());
    }
    Ok(())
}

/// An xattr value or name list for a buffer of `size` bytes: its size for a
/// size-0 probe, `ERANGE` when it does not fit.
pub fn sized(bytes: Vec<u8>, size: u32) -> Result<XattrReply> {
    let too_small = || {
        FsError::Posix(Posix::BufferTooSmall {
            given: size,
            needed: bytes.len(),
        })
    };
    let len = u32::try_from(bytes.len()).map_err(|_| too_small())?;
    if size == 0 {
        Ok(XattrReply::Size(len))
    } else if len > size {
        Err(too_small())
    } else {
        Ok(XattrReply::Data(bytes))
    }
}

/// Xattr names, each followed by a NUL (the `listxattr` buffer).
pub fn xattr_list<'a>(names: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for name in names {
        out.extend_from_slice(name);
        out.push(0);
    }
    out
}

/// The xattr namespaces Linux file systems know. The kernel hands a FUSE
/// mount every name; ext4, xfs and tmpfs refuse a name outside these with
/// `EOPNOTSUPP` and a bare prefix with `EINVAL` (`xattr_resolve_name`), and so
/// do we, so a fork never holds an attribute `storefs restore` could not set,
/// and a checkpoint answers such a name as ext4 would.
const XATTR_NAMESPACES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

pub fn check_xattr_name(name: &[u8]) -> Result<()> {
    match XATTR_NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        None => Err(Posix::Unsupported(
            "an xattr name outside user., trusted., security. and system.",
        )
        .into()),
        Some(ns) if name.len() == ns.len() => Err(FsError::Posix(Posix::Invalid(
            "an xattr name that is only a namespace",
        ))),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::errno;
    use fuser::Errno;

    #[test]
    fn xattr_buffers() {
        assert_eq!(sized(b"abc".to_vec(), 0).unwrap(), XattrReply::Size(3));
        assert_eq!(
            sized(b"abc".to_vec(), 3).unwrap(),
            XattrReply::Data(b"abc".to_vec())
        );
        let e = sized(b"abc".to_vec(), 2).expect_err("too small");
        assert!(matches!(e, FsError::Posix(Posix::BufferTooSmall { .. })));
        assert_eq!(errno(&e), Errno::ERANGE);
        assert_eq!(xattr_list([&b"a"[..], b"bc"]), b"a\0bc\0");
    }

    /// A request without ids (an idmapped-capable mount's): the process's
    /// fsuid and fsgid stand in, for `fs_ids` and `in_group`; ids the
    /// request carried are kept.
    #[test]
    fn ids_a_request_did_not_carry_are_the_processs() {
        let (uid, gid) = (rustix::process::geteuid(), rustix::process::getegid());
        let (uid, gid) = (uid.as_raw(), gid.as_raw());
        let me = Caller {
            uid: NO_ID,
            gid: NO_ID,
            pid: std::process::id(),
            umask: 0,
        };
        assert_eq!(me.fs_ids(), (uid, gid));
        assert!(me.in_group(gid));
        let other = if gid == 12345 { 12346 } else { 12345 };
        assert_eq!(me.in_group(other), uid == 0);
        let carried = Caller {
            uid: 7,
            gid: 8,
            ..me
        };
        assert_eq!(carried.fs_ids(), (7, 8));
        // No process to read: NO_ID stays, and it is in no group.
        let nobody = Caller { pid: 0, ..me };
        assert_eq!(nobody.fs_ids(), (NO_ID, NO_ID));
        assert!(!nobody.in_group(NO_ID));
        assert!(!nobody.has_fsetid());
    }
}
