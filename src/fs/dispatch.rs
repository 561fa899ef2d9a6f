//! The one request path both FUSE transports take: a transport decodes a
//! request into a [`Request`] (its [`Op`] with the arguments it carried),
//! [`dispatch`] calls the [`View`] and gives the [`Reply`] (or the errno),
//! and the transport encodes that. The classic transport is fuser's
//! ([`super::fuse`]); the io_uring one is storefs's own codec
//! ([`super::wire`], served by [`super::uring`]). Whatever the view is
//! asked, and how its answer becomes a reply, is decided here once: the
//! negative lookup, the `lseek` and `copy_file_range` clamps, `flush`,
//! `ioctl`, the `off_t` check, the umask of the ops that carry one, the
//! generation of each entry ([`generation`]).
//!
//! Adding an operation: an [`Op`] variant and its arm in [`dispatch`], the
//! [`View`] method (and the views that implement it), and each codec's
//! decoding of its arguments (`fuse.rs`: the `Filesystem` method; `wire.rs`:
//! its `fuse.h` struct and opcode).
//!
//! Whatever the view, `flush` has one answer: `ENOSYS`, so the kernel stops
//! sending it (a close costs no round trip). Of the ioctls, the `chattr`
//! flags' four commands and the shutdown command (`FS_IOC_SHUTDOWN`) are
//! served (by the views that keep flags or can shut down), every other is
//! `ENOTTY`.
//!
//! A view that was shut down ([`View::is_shut_down`]) has every request
//! that reads or changes it answered `EIO` here, in one place
//! ([`Op::served_after_shutdown`]), before the view is asked.
//!
//! Each request is served inside one span ([`span`]): its op, unique id,
//! node id and pid, on either transport.

use std::time::Duration;

use fuser::{Errno, FopenFlags, Generation};

use super::abi;
use super::view::{AddItem, BLOCK_SIZE, Caller, Entry, Opened, Readdir, View, XattrReply};
use super::{FsError, Result, errno};
use crate::store::model::ext4::Seek;
use crate::store::model::{Attr, Fallocate, Posix, RenameMode, SetAttr, StatFs, XattrMode};
use crate::sys;

/// The generation of inode `ino` in the replies of `view` (every entry:
/// lookup, create, readdirplus items): the view's ([`View::generation`]),
/// but 0 for the root, as the kernel requires (it warns and takes 0). The
/// kernel keeps its low 32 bits (`i_generation`), and takes an entry whose
/// generation differs from the inode's it holds as another inode.
pub(super) fn generation(view: &dyn View, ino: u64) -> Generation {
    if ino == crate::store::model::ROOT_INO {
        return Generation(0);
    }
    Generation(view.generation())
}

/// A request as a transport decoded it.
pub(super) struct Request<'a> {
    /// The kernel's id of the request (logged only).
    pub unique: u64,
    /// The node it is about (`fuse_in_header.nodeid`): the parent for the
    /// ops that name an entry, the source for `link` and `copy_file_range`.
    pub ino: u64,
    /// Who asks (umask 0: the ops that carry one have it in their [`Op`]).
    pub caller: Caller,
    pub op: Op<'a>,
}

/// An operation and its arguments, in the view's terms. Offsets are as the
/// kernel sent them: [`dispatch`] checks the ones that must fit an `off_t`.
pub(super) enum Op<'a> {
    Lookup {
        name: &'a [u8],
    },
    /// One of the kernel's references less (no reply).
    Forget {
        nlookup: u64,
    },
    GetAttr,
    SetAttr(SetAttr),
    ReadLink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    /// `rdev` in the kernel's 32-bit form.
    MkNod {
        name: &'a [u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    },
    MkDir {
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    Create {
        name: &'a [u8],
        mode: u32,
        umask: u32,
        flags: i32,
    },
    /// `O_TMPFILE` in the request's node (`FUSE_TMPFILE`; the kernel sends
    /// the name "/", which is not passed on).
    Tmpfile {
        mode: u32,
        umask: u32,
        flags: i32,
    },
    Unlink {
        name: &'a [u8],
    },
    RmDir {
        name: &'a [u8],
    },
    Rename {
        name: &'a [u8],
        new_parent: u64,
        new_name: &'a [u8],
        flags: u32,
    },
    /// A new name for node `ino` in the request's node (the kernel's
    /// `nodeid` is the new parent).
    Link {
        ino: u64,
        new_name: &'a [u8],
    },
    Open {
        flags: i32,
    },
    Read {
        offset: u64,
        size: u32,
    },
    Write {
        offset: u64,
        data: &'a [u8],
        /// The handle's `open(2)` flags.
        flags: i32,
        /// `FUSE_WRITE_CACHE`: a writeback of the kernel's cache.
        writeback: bool,
        /// `FUSE_WRITE_KILL_SUIDGID`.
        kill_suidgid: bool,
    },
    Lseek {
        offset: i64,
        whence: i32,
    },
    /// `unrestricted`: `FUSE_IOCTL_UNRESTRICTED` (fuser answers those
    /// `ENOSYS` before any adapter sees them). A restricted one carries its
    /// argument's bytes in (`in_data`) and how many it takes back
    /// (`out_size`): the kernel's `fuse_priv_ioctl` (`chattr`, `lsattr`).
    /// `arg`: the caller's argument as it passed it (for a pointer, an
    /// address in its memory).
    Ioctl {
        unrestricted: bool,
        cmd: u32,
        arg: u64,
        in_data: &'a [u8],
        out_size: u32,
    },
    /// From the request's node at `offset_in` to `ino_out` at `offset_out`.
    CopyFileRange {
        offset_in: u64,
        ino_out: u64,
        offset_out: u64,
        len: u64,
    },
    Flush,
    Release,
    /// `fsync` and `fsyncdir`, whatever the handle.
    Sync,
    OpenDir,
    /// `readdir` and `readdirplus` (`at.plus`): each item goes to `add`.
    ReadDir {
        at: Readdir,
        add: Box<AddItem<'a>>,
    },
    ReleaseDir {
        fh: u64,
    },
    StatFs,
    SetXattr {
        name: &'a [u8],
        value: &'a [u8],
        flags: i32,
    },
    GetXattr {
        name: &'a [u8],
        size: u32,
    },
    ListXattr {
        size: u32,
    },
    RemoveXattr {
        name: &'a [u8],
    },
    Access {
        mask: i32,
    },
    Fallocate {
        offset: u64,
        length: u64,
        mode: i32,
    },
    /// An op FUSE defines that no view implements (locks, bmap, poll).
    NotImplemented,
}

impl Op<'_> {
    /// The op's name, for the request's span.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } => "lookup",
            Op::Forget { .. } => "forget",
            Op::GetAttr => "getattr",
            Op::SetAttr(_) => "setattr",
            Op::ReadLink => "readlink",
            Op::Symlink { .. } => "symlink",
            Op::MkNod { .. } => "mknod",
            Op::MkDir { .. } => "mkdir",
            Op::Create { .. } => "create",
            Op::Tmpfile { .. } => "tmpfile",
            Op::Unlink { .. } => "unlink",
            Op::RmDir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Link { .. } => "link",
            Op::Open { .. } => "open",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Lseek { .. } => "lseek",
            Op::Ioctl { .. } => "ioctl",
            Op::CopyFileRange { .. } => "copy_file_range",
            Op::Flush => "flush",
            Op::Release => "release",
            Op::Sync => "fsync",
            Op::OpenDir => "opendir",
            Op::ReadDir { at, .. } if at.plus => "readdirplus",
            Op::ReadDir { .. } => "readdir",
            Op::ReleaseDir { .. } => "releasedir",
            Op::StatFs => "statfs",
            Op::SetXattr { .. } => "setxattr",
            Op::GetXattr { .. } => "getxattr",
            Op::ListXattr { .. } => "listxattr",
            Op::RemoveXattr { .. } => "removexattr",
            Op::Access { .. } => "access",
            Op::Fallocate { .. } => "fallocate",
            Op::NotImplemented => "unimplemented",
        }
    }

    /// What a shut-down view is still asked (every other request is `EIO`,
    /// as xfs answers after a shutdown, lookups, `stat` and reads
    /// included): the kernel letting go of inodes and handles, `statfs`
    /// (`df`; ext4 and xfs answer it too), and the shutdown ioctl again
    /// (which succeeds, changing nothing).
    pub(super) fn served_after_shutdown(&self) -> bool {
        matches!(
            self,
            Op::Forget { .. }
                | Op::Release
                | Op::ReleaseDir { .. }
                | Op::Flush
                | Op::StatFs
                | Op::Ioctl {
                    unrestricted: false,
                    cmd: cmd::GOINGDOWN,
                    ..
                }
        )
    }
}

/// What a request is answered with, in the view's terms; each transport
/// encodes it (`fuse_entry_out`, `fuse_attr_out`, …).
#[derive(Debug)]
pub(super) enum Reply {
    /// No reply at all (`forget`).
    Nothing,
    /// Success with no data (and a listing: its items went to the op's sink).
    Empty,
    /// An entry and its inode's generation ([`generation`]).
    Entry(Entry, Generation),
    /// A negative entry: the name is absent, cached this long (node id 0).
    Absent(Duration),
    Attr(Entry),
    Data(Vec<u8>),
    Xattr(XattrReply),
    Opened(Handle),
    Created(Entry, Generation, Handle),
    Written(u32),
    Offset(i64),
    StatFs(StatFs),
    /// A restricted ioctl's out data (its result 0).
    Ioctl(Vec<u8>),
}

/// The handle and `FOPEN_*` flags an open gives the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Handle {
    pub fh: u64,
    pub flags: FopenFlags,
}

impl From<Opened> for Handle {
    fn from(o: Opened) -> Handle {
        match o {
            Opened::Stateless => Handle {
                fh: 0,
                flags: FopenFlags::empty(),
            },
            Opened::Handle { fh, keep_cache } => {
                let mut flags = FopenFlags::empty();
                if keep_cache {
                    flags |= FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE;
                }
                Handle { fh, flags }
            }
        }
    }
}

/// The span a request is served in, on either transport.
pub(super) fn span(op: &'static str, unique: u64, ino: u64, pid: u32) -> tracing::Span {
    tracing::debug_span!("fuse", op, unique, ino, pid)
}

/// Log an operation's failure (at debug: ENOENT is routine; store failures were
/// already warned about) and give its errno.
fn fail(e: FsError) -> Errno {
    tracing::debug!(error = %e, "fails");
    errno(&e)
}

/// An offset the kernel sends as an `off_t`: past `i64::MAX` is `EINVAL`
/// (fuser checks the classic transport's itself, so this holds there
/// already).
fn off_t(v: u64) -> Result<u64, Errno> {
    if v > i64::MAX as u64 {
        return Err(Errno::EINVAL);
    }
    Ok(v)
}

/// The `lseek` whence a view answers: `SEEK_DATA` or `SEEK_HOLE` (the kernel
/// answers the others itself and never sends them).
fn seek_whence(whence: i32) -> Result<Seek> {
    match whence {
        libc::SEEK_DATA => Ok(Seek::Data),
        libc::SEEK_HOLE => Ok(Seek::Hole),
        _ => Err(Posix::Invalid("lseek whence other than SEEK_DATA or SEEK_HOLE").into()),
    }
}

/// `renameat2`'s flags as the journal's mode, and whether a whiteout is
/// left (`RENAME_WHITEOUT`, alone or with `RENAME_NOREPLACE`; the kernel
/// refuses other combinations itself, and a request with one gets `EINVAL`).
fn rename_mode(flags: u32) -> Result<(RenameMode, bool)> {
    const WHITEOUT: u32 = libc::RENAME_WHITEOUT;
    match flags {
        0 => Ok((RenameMode::Replace, false)),
        libc::RENAME_NOREPLACE => Ok((RenameMode::NoReplace, false)),
        libc::RENAME_EXCHANGE => Ok((RenameMode::Exchange, false)),
        WHITEOUT => Ok((RenameMode::Replace, true)),
        f if f == WHITEOUT | libc::RENAME_NOREPLACE => Ok((RenameMode::NoReplace, true)),
        _ => Err(Posix::Invalid("rename flags").into()),
    }
}

/// `setxattr`'s flags as the journal's mode.
fn xattr_mode(flags: i32) -> Result<XattrMode> {
    match flags {
        0 => Ok(XattrMode::Any),
        libc::XATTR_CREATE => Ok(XattrMode::Create),
        libc::XATTR_REPLACE => Ok(XattrMode::Replace),
        _ => Err(Posix::Invalid("setxattr flags").into()),
    }
}

/// `fallocate`'s mode bits as the journal's [`Fallocate`]; any other
/// combination (collapse, insert, unshare, …) is `EOPNOTSUPP`.
fn fallocate_mode(mode: i32) -> Result<Fallocate> {
    const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
    match mode {
        0 => Ok(Fallocate::Extend),
        KEEP => Ok(Fallocate::KeepSize),
        m if m == libc::FALLOC_FL_PUNCH_HOLE | KEEP => Ok(Fallocate::PunchHole),
        libc::FALLOC_FL_ZERO_RANGE => Ok(Fallocate::ZeroRange { keep_size: false }),
        m if m == libc::FALLOC_FL_ZERO_RANGE | KEEP => Ok(Fallocate::ZeroRange { keep_size: true }),
        _ => Err(Posix::Unsupported("this fallocate mode").into()),
    }
}

/// `FS_IOC_GETFLAGS`, `FS_IOC_SETFLAGS` (`linux/fs.h`: `_IOR('f', 1,
/// long)`, `_IOW('f', 2, long)`, though the argument is an `int`), their
/// 32-bit forms, `FS_IOC_FSGETXATTR`, `FS_IOC_FSSETXATTR` (`struct
/// fsxattr`, 28 bytes), and the shutdown command.
mod cmd {
    pub const GETFLAGS: u32 = 0x8008_6601;
    pub const SETFLAGS: u32 = 0x4008_6602;
    pub const GETFLAGS32: u32 = 0x8004_6601;
    pub const SETFLAGS32: u32 = 0x4004_6602;
    pub const FSGETXATTR: u32 = 0x801c_581f;
    pub const FSSETXATTR: u32 = 0x401c_5820;
    /// `XFS_IOC_GOINGDOWN` (`_IOR('X', 125, __u32)`), which ext4 and f2fs
    /// serve as `FS_IOC_SHUTDOWN`, and xfstests' `godown` sends.
    pub const GOINGDOWN: u32 = 0x8004_587d;
    /// `sizeof(struct fsxattr)`.
    pub const FSXATTR: usize = 28;
}

/// A restricted ioctl: the inode flags the kernel asks for or sets for
/// `chattr`/`lsattr` (`fuse_fileattr_get`/`_set`), as a 4-byte int or a
/// `struct fsxattr`, or a shutdown ([`shutdown_flag`]); any other command
/// is `ENOTTY`, as before. The bytes given back are at most `out_size`.
fn ioctl(
    view: &dyn View,
    c: &Caller,
    (ino, cmd, arg): (u64, u32, u64),
    in_data: &[u8],
    out_size: u32,
) -> Result<Vec<u8>> {
    use crate::store::model::flags;
    let int = |d: &[u8]| -> Result<u32> {
        let b = d
            .get(..4)
            .ok_or(Posix::Invalid("ioctl argument shorter than an int"))?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    let mut out = match cmd {
        cmd::GETFLAGS | cmd::GETFLAGS32 => view.get_flags(c, ino)?.to_le_bytes().to_vec(),
        cmd::SETFLAGS | cmd::SETFLAGS32 => {
            view.set_flags(c, ino, int(in_data)?)?;
            Vec::new()
        }
        cmd::FSGETXATTR => {
            let mut x = vec![0u8; cmd::FSXATTR];
            let xflags = flags::to_xflags(view.get_flags(c, ino)?);
            x[..4].copy_from_slice(&xflags.to_le_bytes());
            x
        }
        cmd::FSSETXATTR => {
            let x = in_data
                .get(..cmd::FSXATTR)
                .ok_or(Posix::Invalid("fsxattr argument too short"))?;
            // Extent size hints and project ids are not kept: only zero.
            if x[4..20].iter().any(|&b| b != 0) {
                return Err(Posix::Unsupported("extent size hints and project ids").into());
            }
            let set = flags::from_xflags(int(x)?).ok_or(Posix::Unsupported(
                "this inode flag (storefs keeps i, a, d and A)",
            ))?;
            view.set_flags(c, ino, set)?;
            Vec::new()
        }
        // Nothing given back: the kernel would copy it over the caller's
        // flag.
        cmd::GOINGDOWN => {
            view.shut_down(c, &|| shutdown_flag(c, arg))?;
            Vec::new()
        }
        _ => return Err(Posix::NoIoctl.into()),
    };
    out.truncate(out_size as usize);
    Ok(out)
}

/// The flag of a shutdown ioctl. It is `_IOR` (the kernel's view: the
/// caller reads a `__u32`), so a restricted `FUSE_IOCTL` carries no in data
/// (in size 0, out size 4) and the flag stays in the caller's memory at
/// `arg`: read from there (`process_vm_readv`; the requesting process is
/// blocked in the ioctl meanwhile). `None` when it cannot be read (no pid
/// in the daemon's pid namespace, a daemon not allowed to ptrace the
/// caller, a bad address): the view takes that as `LOGFLUSH`.
fn shutdown_flag(c: &Caller, arg: u64) -> Option<u32> {
    if c.pid == 0 {
        return None;
    }
    match sys::read_process_u32(c.pid, arg) {
        Ok(flag) => Some(flag),
        Err(e) => {
            tracing::info!(pid = c.pid, error = %e, "the shutdown flag cannot be read; taken as LOGFLUSH");
            None
        }
    }
}

/// An open's answer: a handle, or `ENOSYS` for a stateless open
/// (zero-message opens from now on, see [`Opened::Stateless`]).
fn opened(o: Opened) -> Result<Reply, Errno> {
    match o {
        Opened::Stateless => Err(errno(&FsError::NotNeeded)),
        o => Ok(Reply::Opened(o.into())),
    }
}

/// Serve `req` from `view`: the view's answer as a [`Reply`], or the errno.
pub(super) fn dispatch(view: &dyn View, req: Request<'_>) -> Result<Reply, Errno> {
    let _span = span(req.op.name(), req.unique, req.ino, req.caller.pid).entered();
    let (c, ino) = (&req.caller, req.ino);
    let with_umask = |umask| Caller { umask, ..*c };
    let done = |r: Result<()>| r.map(|()| Reply::Empty).map_err(fail);
    let entry = |r: Result<Entry>| {
        r.map(|e| {
            let g = generation(view, e.attr.ino);
            Reply::Entry(e, g)
        })
        .map_err(fail)
    };
    let attr = |r: Result<Entry>| r.map(Reply::Attr).map_err(fail);
    let data = |r: Result<Vec<u8>>| r.map(Reply::Data).map_err(fail);
    let xattr = |r: Result<XattrReply>| r.map(Reply::Xattr).map_err(fail);
    if view.is_shut_down() && !req.op.served_after_shutdown() {
        tracing::debug!("shut down: EIO");
        return Err(Errno::EIO);
    }
    match req.op {
        // The negative-entry rule: the view found nothing there and gives
        // `parent` a negative TTL (asked after every lookup).
        Op::Lookup { name } => match (view.lookup(c, ino, name), view.negative_ttl(ino)) {
            (Err(e), Some(ttl)) if e.is_not_found() => Ok(Reply::Absent(ttl)),
            (found, _) => entry(found),
        },
        Op::Forget { nlookup } => {
            view.forget(ino, nlookup);
            Ok(Reply::Nothing)
        }
        Op::GetAttr => attr(view.getattr(c, ino)),
        Op::SetAttr(attrs) => attr(view.setattr(c, ino, &attrs)),
        Op::ReadLink => data(view.readlink(c, ino)),
        Op::Symlink { name, target } => entry(view.symlink(c, ino, name, target)),
        Op::MkNod {
            name,
            mode,
            umask,
            rdev,
        } => entry(view.mknod(&with_umask(umask), ino, name, mode, user_dev(rdev))),
        Op::MkDir { name, mode, umask } => entry(view.mkdir(&with_umask(umask), ino, name, mode)),
        Op::Create {
            name,
            mode,
            umask,
            flags,
        } => {
            let (e, o) = view
                .create(&with_umask(umask), ino, name, mode, flags)
                .map_err(fail)?;
            let g = generation(view, e.attr.ino);
            Ok(Reply::Created(e, g, o.into()))
        }
        Op::Tmpfile { mode, umask, flags } => {
            let (e, o) = view
                .tmpfile(&with_umask(umask), ino, mode, flags)
                .map_err(fail)?;
            let g = generation(view, e.attr.ino);
            Ok(Reply::Created(e, g, o.into()))
        }
        Op::Unlink { name } => done(view.unlink(c, ino, name)),
        Op::RmDir { name } => done(view.rmdir(c, ino, name)),
        Op::Rename {
            name,
            new_parent,
            new_name,
            flags,
        } => done(rename_mode(flags).and_then(|(m, whiteout)| match whiteout {
            false => view.rename(c, ino, name, new_parent, new_name, m),
            true => {
                let noreplace = m == RenameMode::NoReplace;
                view.rename_whiteout(c, ino, name, new_parent, new_name, noreplace)
            }
        })),
        Op::Link { ino: old, new_name } => entry(view.link(c, old, ino, new_name)),
        Op::Open { flags } => opened(view.open(c, ino, flags).map_err(fail)?),
        Op::Read { offset, size } => data(view.read(c, ino, off_t(offset)?, size)),
        Op::Write {
            offset,
            data,
            flags,
            writeback,
            kill_suidgid,
        } => {
            let how = super::view::WriteCtx {
                offset: off_t(offset)?,
                flags,
                writeback,
                kill_suidgid,
            };
            view.write(c, ino, data, how)
                .map(Reply::Written)
                .map_err(fail)
        }
        Op::Lseek { offset, whence } => {
            let found = seek_whence(whence)
                .and_then(|w| view.seek(c, ino, offset, w))
                .and_then(|o| o.ok_or(Posix::NoSeekTarget.into()))
                .map_err(fail)?;
            // Offsets come from i64 file sizes.
            Ok(Reply::Offset(found.min(i64::MAX as u64) as i64))
        }
        Op::Ioctl {
            unrestricted: true, ..
        } => Err(Errno::ENOSYS),
        Op::Ioctl {
            unrestricted: false,
            cmd,
            arg,
            in_data,
            out_size,
        } => ioctl(view, c, (ino, cmd, arg), in_data, out_size)
            .map(Reply::Ioctl)
            .map_err(fail),
        // The view's copy, at most what the reply's 32-bit count can say. A
        // view that does not copy answers ENOSYS: the kernel then copies
        // through read and write from now on (it stops asking).
        Op::CopyFileRange {
            offset_in,
            ino_out,
            offset_out,
            len,
        } => {
            let from = (ino, off_t(offset_in)?);
            let to = (ino_out, off_t(offset_out)?);
            let len = len.min(u64::from(u32::MAX) & !0xfff);
            let n = view.copy_file_range(c, from, to, len).map_err(fail)?;
            Ok(Reply::Written(n as u32))
        }
        // No view keeps anything pending at close, and locks are the
        // kernel's. ENOSYS stops the kernel sending flush on every close(2);
        // it still writes back the file's dirty pages (mmap, or any write
        // under the writeback cache) itself before it would have sent one.
        Op::Flush => Err(errno(&FsError::NotNeeded)),
        Op::Release => {
            view.release(c, ino);
            Ok(Reply::Empty)
        }
        Op::Sync => done(view.sync(c)),
        Op::OpenDir => opened(view.opendir(c, ino).map_err(fail)?),
        Op::ReadDir { at, mut add } => done(view.readdir(c, ino, at, &mut *add)),
        Op::ReleaseDir { fh } => {
            view.releasedir(c, fh);
            Ok(Reply::Empty)
        }
        Op::StatFs => view.statfs(c).map(Reply::StatFs).map_err(fail),
        Op::SetXattr { name, value, flags } => {
            done(xattr_mode(flags).and_then(|m| view.setxattr(c, ino, name, value, m)))
        }
        Op::GetXattr { name, size } => xattr(view.getxattr(c, ino, name, size)),
        Op::ListXattr { size } => xattr(view.listxattr(c, ino, size)),
        Op::RemoveXattr { name } => done(view.removexattr(c, ino, name)),
        Op::Access { mask } => done(view.access(c, ino, mask)),
        Op::Fallocate {
            offset,
            length,
            mode,
        } => {
            let (offset, length) = (off_t(offset)?, off_t(length)?);
            done(fallocate_mode(mode).and_then(|how| view.fallocate(c, ino, offset, length, how)))
        }
        Op::NotImplemented => Err(Errno::ENOSYS),
    }
}

/// Nanoseconds since the epoch as `fuse_attr`'s (seconds, nanoseconds).
fn attr_time(ns: i64) -> (i64, u32) {
    (
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

/// An inode's attributes as the kernel takes them (`fuse_attr`): what the
/// ring codec sends, and what the classic one hands fuser as a `FileAttr`
/// (fuser encodes it to the same bytes; `flags` is 0, fuser's padding on
/// Linux).
pub(super) fn kernel_attr(a: &Attr) -> abi::FuseAttr {
    let (atime, atimensec) = attr_time(a.atime_ns);
    let (mtime, mtimensec) = attr_time(a.mtime_ns);
    let (ctime, ctimensec) = attr_time(a.ctime_ns);
    abi::FuseAttr {
        ino: a.ino,
        size: a.size,
        blocks: a.blocks,
        atime: atime as u64,
        mtime: mtime as u64,
        ctime: ctime as u64,
        atimensec,
        mtimensec,
        ctimensec,
        mode: a.kind.mode_bits() | (a.perm & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: kernel_dev(a.rdev),
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

/// A lookup of `name` in `parent` as a transport asks it (for the views'
/// tests).
#[cfg(test)]
pub(super) fn look_up(
    view: &dyn View,
    c: &Caller,
    parent: u64,
    name: &[u8],
) -> Result<Reply, Errno> {
    let req = Request {
        unique: 0,
        ino: parent,
        caller: *c,
        op: Op::Lookup { name },
    };
    dispatch(view, req)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view that takes every request and is asked nothing: what reaches
    /// it fails the test.
    struct Untouched;

    impl View for Untouched {
        fn capabilities(&self) -> &'static [super::super::view::Capability] {
            &[]
        }
        fn lookup(&self, _: &Caller, _: u64, _: &[u8]) -> Result<Entry> {
            unreachable!()
        }
        fn getattr(&self, _: &Caller, _: u64) -> Result<Entry> {
            unreachable!()
        }
        fn readlink(&self, _: &Caller, _: u64) -> Result<Vec<u8>> {
            unreachable!()
        }
        fn open(&self, _: &Caller, _: u64, _: i32) -> Result<Opened> {
            unreachable!()
        }
        fn read(&self, _: &Caller, _: u64, _: u64, _: u32) -> Result<Vec<u8>> {
            unreachable!()
        }
        fn seek(&self, _: &Caller, _: u64, _: i64, _: Seek) -> Result<Option<u64>> {
            unreachable!()
        }
        fn opendir(&self, _: &Caller, _: u64) -> Result<Opened> {
            unreachable!()
        }
        fn readdir(&self, _: &Caller, _: u64, _: Readdir, _: &mut AddItem<'_>) -> Result<()> {
            unreachable!()
        }
        fn statfs(&self, _: &Caller) -> Result<StatFs> {
            unreachable!()
        }
        fn getxattr(&self, _: &Caller, _: u64, _: &[u8], _: u32) -> Result<XattrReply> {
            unreachable!()
        }
        fn listxattr(&self, _: &Caller, _: u64, _: u32) -> Result<XattrReply> {
            unreachable!()
        }
        fn access(&self, _: &Caller, _: u64, _: i32) -> Result<()> {
            unreachable!()
        }
    }

    fn refused(op: Op<'_>) -> Errno {
        let req = Request {
            unique: 1,
            ino: 2,
            caller: Caller::default(),
            op,
        };
        dispatch(&Untouched, req).unwrap_err()
    }

    #[test]
    fn flags_outside_the_journals_modes_never_reach_the_view() {
        let rename = |flags| Op::Rename {
            name: b"a",
            new_parent: 1,
            new_name: b"b",
            flags,
        };
        let both = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
        assert_eq!(refused(rename(both)), Errno::EINVAL);
        let whiteout_exchange = libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE;
        assert_eq!(refused(rename(whiteout_exchange)), Errno::EINVAL);
        assert_eq!(refused(rename(whiteout_exchange | 1)), Errno::EINVAL);
        assert_eq!(refused(rename(8)), Errno::EINVAL);
        let setxattr = Op::SetXattr {
            name: b"user.k",
            value: b"v",
            flags: 3,
        };
        assert_eq!(refused(setxattr), Errno::EINVAL);
        for mode in [
            libc::FALLOC_FL_COLLAPSE_RANGE,
            0x40,
            libc::FALLOC_FL_PUNCH_HOLE,
        ] {
            let op = Op::Fallocate {
                offset: 0,
                length: 2,
                mode,
            };
            assert_eq!(refused(op), Errno::EOPNOTSUPP, "{mode:#x}");
        }
        // Offsets past off_t, before the view too.
        let op = Op::Fallocate {
            offset: u64::MAX,
            length: 2,
            mode: 0,
        };
        assert_eq!(refused(op), Errno::EINVAL);
    }

    #[test]
    fn the_journals_modes_are_decoded_from_the_kernels_flags() {
        let (w, n) = (libc::RENAME_WHITEOUT, libc::RENAME_NOREPLACE);
        assert_eq!(rename_mode(0).unwrap(), (RenameMode::Replace, false));
        assert_eq!(rename_mode(n).unwrap(), (RenameMode::NoReplace, false));
        assert_eq!(
            rename_mode(libc::RENAME_EXCHANGE).unwrap(),
            (RenameMode::Exchange, false)
        );
        assert_eq!(rename_mode(w).unwrap(), (RenameMode::Replace, true));
        assert_eq!(rename_mode(w | n).unwrap(), (RenameMode::NoReplace, true));
        assert_eq!(xattr_mode(0).unwrap(), XattrMode::Any);
        assert_eq!(xattr_mode(libc::XATTR_CREATE).unwrap(), XattrMode::Create);
        assert_eq!(xattr_mode(libc::XATTR_REPLACE).unwrap(), XattrMode::Replace);
        let keep = libc::FALLOC_FL_KEEP_SIZE;
        let zero = libc::FALLOC_FL_ZERO_RANGE;
        assert_eq!(fallocate_mode(0).unwrap(), Fallocate::Extend);
        assert_eq!(fallocate_mode(keep).unwrap(), Fallocate::KeepSize);
        let punch = libc::FALLOC_FL_PUNCH_HOLE | keep;
        assert_eq!(fallocate_mode(punch).unwrap(), Fallocate::PunchHole);
        let zeroed = |keep_size| Fallocate::ZeroRange { keep_size };
        assert_eq!(fallocate_mode(zero).unwrap(), zeroed(false));
        assert_eq!(fallocate_mode(zero | keep).unwrap(), zeroed(true));
    }

    /// A view that serves no writes (a checkpoint's, browse's) answers
    /// `O_TMPFILE` and a whiteout rename as every write: `EROFS`.
    #[test]
    fn a_read_only_view_refuses_tmpfile_and_whiteout_with_erofs() {
        let req = |op| Request {
            unique: 1,
            ino: 1,
            caller: Caller::default(),
            op,
        };
        let tmpfile = Op::Tmpfile {
            mode: 0o100_600,
            umask: 0o022,
            flags: libc::O_RDWR,
        };
        assert_eq!(
            dispatch(&Untouched, req(tmpfile)).unwrap_err(),
            Errno::EROFS
        );
        let whiteout = Op::Rename {
            name: b"a",
            new_parent: 1,
            new_name: b"b",
            flags: libc::RENAME_WHITEOUT,
        };
        assert_eq!(
            dispatch(&Untouched, req(whiteout)).unwrap_err(),
            Errno::EROFS
        );
    }

    #[test]
    fn attribute_times_are_whole_seconds_and_added_nanoseconds() {
        assert_eq!(attr_time(-1), (-1, 999_999_999));
        assert_eq!(attr_time(i64::MIN), (-9_223_372_037, 145_224_192));
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
