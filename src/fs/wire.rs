//! storefs's FUSE codec, for both transports: a request is decoded from its
//! `fuse.h` structs ([`super::abi`]) into a [`dispatch::Request`], served by
//! [`dispatch::dispatch`], and its [`Reply`] encoded as fuser 0.18 would
//! have sent it. The ring transport (`uring.rs`) hands each entry to
//! [`serve`]; the `/dev/fuse` workers (`devfuse.rs`) hand each request they
//! read to [`serve_dev`], which also takes what only `/dev/fuse` carries
//! (forgets, interrupts, DESTROY). This file and `abi.rs` are the only
//! transport-side place an operation is spelled; fuser only mounts and
//! answers INIT (`fuse.rs`).
//!
//! fuser 0.18's parser and reply types are crate-private, so this is
//! storefs's own codec. The contract is byte-for-byte equality with fuser
//! 0.18 serving the same view, which was the classic transport until
//! storefs served `/dev/fuse` itself: the same view calls with the same
//! arguments and [`Caller`], the same errno, the same reply bytes. The unit
//! tests check it against fuser itself, run over a socket pair with fuser's
//! own parsing of every op (`fuser_reference.rs`, test only): a second
//! implementation, on both transports' forms of each request.
//!
//! **Where the arguments are.** On `/dev/fuse` a request is
//! `fuse_in_header`, the op's fixed struct, then its other arguments (names
//! with their NULs, data); [`arg`] reads the struct and the payload starts
//! after what it read.
//!
//! On a ring the kernel
//! (`fuse_uring_args_to_ring`, fs/fuse/dev_uring.c) copies a request's first
//! in-argument into the entry's 128-byte `op_in` when it has a non-zero size
//! (the op's fixed struct: `fuse_write_in`, …) and concatenates the others
//! into the payload. Ops whose first argument would be a name (lookup,
//! unlink, rmdir, symlink, removexattr) get a zero-size first argument
//! (`fuse_set_zero_arg0`, 6.14, the same release as the ring), so every name
//! is in the payload, NUL-terminated, and `op_in` is not read for them.
//!
//! **Which answers.** Every opcode fuser parses is answered as fuser 0.18
//! serving the view answered it, including fuser's uid filter ([`Access`]: a
//! request of another user gets `EACCES` unless it is one of the ops the
//! kernel may send on anyone's behalf). One opcode fuser does not know is
//! served here: `FUSE_TMPFILE` (`O_TMPFILE`, [`View::tmpfile`]; decoded
//! as `FUSE_CREATE`, uid filter included), which fuser would answer
//! `ENOSYS` (it is only the differential tests' reference now). The other
//! opcodes fuser does not know (`FUSE_SYNCFS`, `FUSE_STATX`,
//! `FUSE_COPY_FILE_RANGE_64`, …) get `ENOSYS`, before the uid filter, as
//! from fuser; for `FUSE_COPY_FILE_RANGE_64` (7.45) that makes the kernel
//! fall back to `FUSE_COPY_FILE_RANGE` for good, as it does today.
//!
//! `FORGET`, `BATCH_FORGET`, `INTERRUPT`, `NOTIFY_REPLY`, `INIT`, `DESTROY`
//! and `CUSE_INIT` never come on a ring (the kernel keeps them on
//! `/dev/fuse`, [`serve_dev`]): if one did, [`serve`] answers `ENOSYS` (a
//! forget is not passed to the view).
//!
//! **Where this differs from fuser.** A request too short for its arguments
//! (an `op_in` or header shorter than the op's struct, a name without its
//! NUL, write data or an xattr value shorter than the size in its struct)
//! gets `EIO`: fuser answers `ENOSYS` to a request it cannot parse, which
//! the kernel would take as "never send this again" for open, flush and
//! others, and panics on a write or setxattr whose data does not match its
//! size. The kernel never sends such requests; nothing here panics on them.
//!
//! setxattr: fuser 0.18 never negotiates `FUSE_SETXATTR_EXT` (nor does
//! storefs ask for it), so `fuse_setxattr_in` is the 8-byte compat struct;
//! on a ring its size does not matter anyway, since the name and value are
//! in the payload, apart from `op_in`.

use std::cell::Cell;
use std::time::Duration;

use fuser::{IoctlFlags, WriteFlags};
use zerocopy::{FromZeros, IntoBytes};

use super::abi::{self, fattr, op};
use super::dispatch::{self, Handle, Op, Reply, kernel_attr};
use super::view::{BLOCK_SIZE, Caller, DirItem, Readdir, View, XattrReply};
use crate::store::model::{SetAttr, Time};

/// Who may use the mount, as fuser's `SessionACL` (fuser's filter on the
/// request's uid, replicated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Only the session's owner (fuser: the daemon's effective uid).
    Owner,
    /// The owner and root (`allow_root`).
    RootAndOwner,
    /// Everyone (`allow_other`).
    All,
}

impl From<fuser::SessionACL> for Access {
    fn from(acl: fuser::SessionACL) -> Access {
        match acl {
            fuser::SessionACL::Owner => Access::Owner,
            fuser::SessionACL::RootAndOwner => Access::RootAndOwner,
            fuser::SessionACL::All => Access::All,
        }
    }
}

/// The mount's uid filter: its [`Access`] and its owner's uid (fuser's
/// owner is the daemon's effective uid when the session was made,
/// `rustix::process::geteuid()`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    pub access: Access,
    pub owner_uid: u32,
}

impl Policy {
    /// Whether fuser would serve `opcode` for `uid` (fuser 0.18's
    /// `dispatch_req`): the ops the kernel may send without the caller's
    /// uid (reads, writes, syncs, releases, listings, forgets, init and
    /// destroy) pass whoever asks.
    fn admits(&self, uid: u32, opcode: u32) -> bool {
        let refused = match self.access {
            Access::All => false,
            Access::Owner => uid != self.owner_uid,
            Access::RootAndOwner => uid != self.owner_uid && uid != 0,
        };
        !refused
            || matches!(
                opcode,
                op::INIT
                    | op::DESTROY
                    | op::READ
                    | op::READDIR
                    | op::BATCH_FORGET
                    | op::FORGET
                    | op::WRITE
                    | op::FSYNC
                    | op::FSYNCDIR
                    | op::RELEASE
                    | op::RELEASEDIR
                    | op::READDIRPLUS
            )
    }
}

/// The size of `fuse_in_header`.
pub(crate) const IN_HEADER: usize = std::mem::size_of::<abi::InHeader>();

/// The errno of a request too short for its arguments (see the module doc).
const MALFORMED: i32 = libc::EIO;

/// The `fuse_in_header` opcode of a ring entry's header (0 if it is short).
#[cfg(test)]
pub(crate) fn opcode(in_header: &[u8]) -> u32 {
    abi::read::<abi::InHeader>(in_header).map_or(0, |h| h.opcode)
}

/// The `fuse_in_header` unique id of a ring entry's header (0 if it is short).
pub(crate) fn unique(in_header: &[u8]) -> u64 {
    abi::read::<abi::InHeader>(in_header).map_or(0, |h| h.unique)
}

/// Where a request's fixed struct is: a ring entry's `op_in`, or on
/// `/dev/fuse` the start of the arguments that follow `fuse_in_header`.
/// It records how many bytes [`arg`] read, so that on `/dev/fuse` the
/// payload starts after them ([`Payload`]).
struct OpIn<'a> {
    bytes: &'a [u8],
    read: Cell<usize>,
}

impl<'a> OpIn<'a> {
    fn new(bytes: &'a [u8]) -> OpIn<'a> {
        OpIn {
            bytes,
            read: Cell::new(0),
        }
    }
}

/// The op's fixed struct, read from `op_in` (`EIO` if it is shorter).
/// Every decode arm reads it before its payload.
fn arg<T: zerocopy::FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
    op_in: &OpIn<'_>,
) -> Result<T, i32> {
    let t = abi::read(op_in.bytes).ok_or(MALFORMED)?;
    op_in.read.set(size_of::<T>());
    Ok(t)
}

/// The payload's arguments, in order: NUL-terminated names, then the rest.
/// On a ring the payload is apart from `op_in`; on `/dev/fuse` it is the
/// same bytes, and starts after what [`arg`] read (`after`).
struct Payload<'a, 'b> {
    bytes: &'a [u8],
    after: Option<&'b Cell<usize>>,
}

impl<'a, 'b> Payload<'a, 'b> {
    /// A ring entry's payload.
    fn apart(bytes: &'a [u8]) -> Payload<'a, 'b> {
        Payload { bytes, after: None }
    }

    /// The arguments on `/dev/fuse`: `op_in`'s own bytes, past its struct.
    fn after(op_in: &'b OpIn<'a>) -> Payload<'a, 'b> {
        Payload {
            bytes: op_in.bytes,
            after: Some(&op_in.read),
        }
    }

    /// The bytes not read yet (on `/dev/fuse`, past the op's struct).
    fn rest(&mut self) -> &'a [u8] {
        if let Some(read) = self.after.take() {
            self.bytes = self.bytes.get(read.get()..).unwrap_or_default();
        }
        self.bytes
    }

    /// The next NUL-terminated string, without its NUL.
    fn name(&mut self) -> Result<&'a [u8], i32> {
        let bytes = self.rest();
        let end = bytes.iter().position(|&b| b == 0).ok_or(MALFORMED)?;
        let (name, rest) = bytes.split_at(end);
        self.bytes = rest.get(1..).unwrap_or_default();
        Ok(name)
    }

    /// The next `len` bytes (write data, an xattr value).
    fn data(&mut self, len: u32) -> Result<&'a [u8], i32> {
        let bytes = self.rest();
        let len = usize::try_from(len).map_err(|_| MALFORMED)?;
        let data = bytes.get(..len).ok_or(MALFORMED)?;
        self.bytes = bytes.get(len..).unwrap_or_default();
        Ok(data)
    }
}

/// A time the kernel sent (seconds, nanoseconds; the nanoseconds always
/// added, as in a `timespec`) as nanoseconds since the epoch, saturating:
/// (-2 s, +0.5 s) is -1.5 s. fuser 0.18 read such a time as -2.5 s; the
/// differential tests' reference adapter undoes that
/// (`fuser_reference::sent_nanos`).
fn sent_time(secs: i64, nsec: u32) -> i64 {
    let ns = i128::from(secs) * 1_000_000_000 + i128::from(nsec);
    ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// A negative entry's `fuse_attr`: node id 0, a regular file with nothing
/// set but `st_blksize` (what fuser sent for a negative entry).
fn negative_attr() -> abi::FuseAttr {
    abi::FuseAttr {
        mode: libc::S_IFREG,
        blksize: BLOCK_SIZE,
        ..abi::FuseAttr::new_zeroed()
    }
}

/// `fuse_entry_out`: node id (the attributes' inode), `generation`, both
/// TTLs `ttl` (as fuser's `ReplyEntry::entry`), the attributes.
fn entry_out(ttl: Duration, attr: abi::FuseAttr, generation: u64) -> abi::EntryOut {
    abi::EntryOut {
        nodeid: attr.ino,
        generation,
        entry_valid: ttl.as_secs(),
        attr_valid: ttl.as_secs(),
        entry_valid_nsec: ttl.subsec_nanos(),
        attr_valid_nsec: ttl.subsec_nanos(),
        attr,
    }
}

/// `fuse_open_out` of an open (no backing id).
fn open_out(h: Handle) -> abi::OpenOut {
    abi::OpenOut {
        fh: h.fh,
        open_flags: h.flags.bits(),
        backing_id: 0,
    }
}

/// `fuse_write_out` (and `fuse_getxattr_out`).
fn write_out(size: u32) -> abi::WriteOut {
    abi::WriteOut { size, padding: 0 }
}

/// Add one directory entry (a `fuse_dirent`, after its `fuse_entry_out` for
/// readdirplus) unless it would take the reply past `max` bytes: then
/// nothing is written and the answer is true ("full"), as fuser's
/// `EntListBuf::push`. Entries are padded to 8 bytes.
fn push_dirent(
    out: &mut Vec<u8>,
    max: usize,
    entry: Option<abi::EntryOut>,
    (ino, off, typ): (u64, u64, u32),
    name: &[u8],
) -> bool {
    let head = entry.as_ref().map_or(0, |e| e.as_bytes().len()) + size_of::<abi::Dirent>();
    let len = head + name.len();
    let size = len.next_multiple_of(8);
    let Ok(namelen) = u32::try_from(name.len()) else {
        return true;
    };
    if out.len() + size > max {
        return true;
    }
    if let Some(e) = entry {
        abi::put(out, &e);
    }
    abi::put(
        out,
        &abi::Dirent {
            ino,
            off,
            namelen,
            typ,
        },
    );
    out.extend_from_slice(name);
    out.resize(out.len() + size - len, 0);
    false
}

/// One readdir item into a listing reply of at most `max` bytes: true once
/// full. With `plus`, an item without attributes is skipped (not full), and
/// the entry's node id and type are its attributes', as fuser's,
/// its generation `view`'s ([`dispatch::generation`]).
fn add_item(out: &mut Vec<u8>, max: usize, plus: bool, view: &dyn View, item: DirItem<'_>) -> bool {
    if !plus {
        let typ = item.kind.mode_bits() >> 12;
        return push_dirent(out, max, None, (item.ino, item.next_offset, typ), item.name);
    }
    let Some(entry) = item.entry else {
        return false;
    };
    let attr = kernel_attr(&entry.attr);
    let dirent = (attr.ino, item.next_offset, attr.mode >> 12);
    push_dirent(
        out,
        max,
        Some(entry_out(
            entry.ttl,
            attr,
            dispatch::generation(view, attr.ino).0,
        )),
        dirent,
        item.name,
    )
}

/// Encode a reply's bytes (those that follow `fuse_out_header`).
fn encode(reply: Reply, out: &mut Vec<u8>) {
    match reply {
        // A listing's items are in `out` already.
        Reply::Nothing | Reply::Empty => {}
        Reply::Entry(e, g) => abi::put(out, &entry_out(e.ttl, kernel_attr(&e.attr), g.0)),
        // Node id 0 with a timeout: "absent", cached that long.
        Reply::Absent(ttl) => abi::put(out, &entry_out(ttl, negative_attr(), 0)),
        Reply::Attr(e) => abi::put(
            out,
            &abi::AttrOut {
                attr_valid: e.ttl.as_secs(),
                attr_valid_nsec: e.ttl.subsec_nanos(),
                dummy: 0,
                attr: kernel_attr(&e.attr),
            },
        ),
        Reply::Data(d) | Reply::Xattr(XattrReply::Data(d)) => out.extend_from_slice(&d),
        Reply::Xattr(XattrReply::Size(n)) | Reply::Written(n) => abi::put(out, &write_out(n)),
        Reply::Opened(h) => abi::put(out, &open_out(h)),
        Reply::Created(e, g, h) => {
            abi::put(out, &entry_out(e.ttl, kernel_attr(&e.attr), g.0));
            abi::put(out, &open_out(h));
        }
        Reply::Offset(o) => abi::put(out, &abi::LseekOut { offset: o as u64 }),
        Reply::Ioctl(d) => {
            // `in_iovs`/`out_iovs` as fuser sends them (the kernel reads
            // them only with `FUSE_IOCTL_RETRY`).
            let head = abi::IoctlOut {
                result: 0,
                flags: 0,
                in_iovs: 1,
                out_iovs: 1,
            };
            abi::put(out, &head);
            out.extend_from_slice(&d);
        }
        Reply::StatFs(s) => abi::put(
            out,
            &abi::StatfsOut {
                blocks: s.blocks,
                bfree: s.blocks_free,
                bavail: s.blocks_avail,
                files: s.files,
                ffree: s.files_free,
                bsize: s.block_size,
                namelen: s.name_max,
                frsize: s.block_size,
                padding: 0,
                spare: [0; 6],
            },
        ),
    }
}

/// Serve one request that arrived on a FUSE io_uring entry and write its
/// reply.
///
/// `in_header`: the 40-byte `fuse_in_header` (the first 40 bytes of the
/// entry's `in_out`). `op_in`: the entry's 128-byte `op_in` area (the op's
/// fixed in-struct, if the op has one). `payload`: the rest of the request's
/// arguments, concatenated (names with their NULs, write data, …), cut to the
/// payload size the kernel reported.
///
/// On Ok, `out` (cleared first) holds the reply bytes that follow
/// `fuse_out_header`; `Err(errno)` is a positive errno.
pub(crate) fn serve(
    view: &dyn View,
    policy: &Policy,
    in_header: &[u8],
    op_in: &[u8],
    payload: &[u8],
    out: &mut Vec<u8>,
) -> std::result::Result<(), i32> {
    out.clear();
    let h: abi::InHeader = abi::read(in_header).ok_or(MALFORMED)?;
    if matches!(
        h.opcode,
        op::FORGET
            | op::BATCH_FORGET
            | op::INTERRUPT
            | op::NOTIFY_REPLY
            | op::INIT
            | op::DESTROY
            | op::CUSE_INIT
    ) {
        // Never on a ring (see the module doc).
        return Err(libc::ENOSYS);
    }
    let op_in = OpIn::new(op_in);
    answer(view, policy, &h, &op_in, Payload::apart(payload), out)
}

/// What to send back for a request read from `/dev/fuse` ([`serve_dev`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DevReply {
    /// A reply to `unique`: the bytes in `out`, or the errno.
    Reply(u64, std::result::Result<(), i32>),
    /// Nothing (a forget).
    None,
    /// The empty reply to `DESTROY` (`unique`); the thread that read it
    /// stops, as fuser's.
    Destroy(u64),
}

/// Serve one request read from `/dev/fuse` (`request`: `fuse_in_header`
/// and its arguments, as one `read(2)` gave them) as fuser 0.18's session
/// loop does, and say what to send back; the reply's bytes go to `out`
/// (cleared first).
///
/// Besides every op [`serve`] decodes: `FORGET` and `BATCH_FORGET` reach
/// the view ([`dispatch::Op::Forget`], one per node) and get no reply;
/// `INTERRUPT` gets `ENOSYS` (the kernel then sends no more interrupts, as
/// with fuser), and so do `NOTIFY_REPLY` and `CUSE_INIT`; a second `INIT`
/// gets `EIO`; `DESTROY` the empty reply. A request whose header is short
/// or whose length disagrees with what was read gets no reply (there is no
/// `unique` to answer) or `EIO`; fuser's loop stops its thread on those.
pub(crate) fn serve_dev(
    view: &dyn View,
    policy: &Policy,
    request: &[u8],
    out: &mut Vec<u8>,
) -> DevReply {
    out.clear();
    let Some(h) = abi::read::<abi::InHeader>(request) else {
        tracing::error!(
            len = request.len(),
            "a /dev/fuse request shorter than its header"
        );
        return DevReply::None;
    };
    if h.len as usize != request.len() {
        tracing::error!(
            len = request.len(),
            header = h.len,
            "a /dev/fuse request of the wrong length"
        );
        return DevReply::Reply(h.unique, Err(MALFORMED));
    }
    let args = &request[IN_HEADER..];
    let refused = |errno| {
        let admitted = policy.admits(h.uid, h.opcode);
        DevReply::Reply(h.unique, Err(if admitted { errno } else { libc::EACCES }))
    };
    let forget = |ino, nlookup| {
        let caller = Caller {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
            umask: 0,
        };
        let op = Op::Forget { nlookup };
        let req = dispatch::Request {
            unique: h.unique,
            ino,
            caller,
            op,
        };
        // No reply: the answer is `Reply::Nothing`.
        let _ = dispatch::dispatch(view, req);
    };
    match h.opcode {
        op::DESTROY => DevReply::Destroy(h.unique),
        op::FORGET => {
            match abi::read::<abi::ForgetIn>(args) {
                Some(a) => forget(h.nodeid, a.nlookup),
                None => tracing::error!("a FORGET shorter than its struct"),
            }
            DevReply::None
        }
        op::BATCH_FORGET => {
            let count = abi::read::<abi::BatchForgetIn>(args).map_or(0, |a| a.count as usize);
            let nodes = args
                .get(size_of::<abi::BatchForgetIn>()..)
                .unwrap_or_default();
            let nodes = nodes.chunks_exact(size_of::<abi::ForgetOne>());
            if nodes.len() < count {
                tracing::error!(count, "a BATCH_FORGET shorter than its count");
            }
            for node in nodes.take(count).filter_map(abi::read::<abi::ForgetOne>) {
                forget(node.nodeid, node.nlookup);
            }
            DevReply::None
        }
        op::INIT => refused(libc::EIO),
        op::INTERRUPT | op::NOTIFY_REPLY | op::CUSE_INIT => refused(libc::ENOSYS),
        _ => {
            let op_in = OpIn::new(args);
            let payload = Payload::after(&op_in);
            DevReply::Reply(h.unique, answer(view, policy, &h, &op_in, payload, out))
        }
    }
}

/// Decode, filter, dispatch and encode one request (either transport's).
fn answer(
    view: &dyn View,
    policy: &Policy,
    h: &abi::InHeader,
    op_in: &OpIn<'_>,
    payload: Payload<'_, '_>,
    out: &mut Vec<u8>,
) -> std::result::Result<(), i32> {
    let listed = {
        let op = decode(h.opcode, op_in, payload, out, view)?;
        if !policy.admits(h.uid, h.opcode) {
            return Err(libc::EACCES);
        }
        let caller = Caller {
            uid: h.uid,
            gid: h.gid,
            pid: h.pid,
            umask: 0,
        };
        let req = dispatch::Request {
            unique: h.unique,
            ino: h.nodeid,
            caller,
            op,
        };
        dispatch::dispatch(view, req)
    };
    match listed {
        Ok(reply) => {
            encode(reply, out);
            Ok(())
        }
        Err(e) => {
            out.clear();
            Err(e.code())
        }
    }
}

/// `fuse_setattr_in` as the fields it says are valid.
fn set_attr(a: &abi::SetattrIn) -> SetAttr {
    let has = |bit| a.valid & bit != 0;
    let time = |secs: u64, nsec, now| {
        if has(now) {
            Time::Now
        } else {
            Time::At(sent_time(secs as i64, nsec))
        }
    };
    SetAttr {
        perm: has(fattr::MODE).then_some(a.mode & 0o7777),
        uid: has(fattr::UID).then_some(a.uid),
        gid: has(fattr::GID).then_some(a.gid),
        size: has(fattr::SIZE).then_some(a.size),
        atime: has(fattr::ATIME).then(|| time(a.atime, a.atimensec, fattr::ATIME_NOW)),
        mtime: has(fattr::MTIME).then(|| time(a.mtime, a.mtimensec, fattr::MTIME_NOW)),
        ctime: has(fattr::CTIME).then(|| sent_time(a.ctime as i64, a.ctimensec)),
    }
}

/// Decode `opcode`'s arguments: its fixed struct from `op_in` (every op
/// that has one checks it is there, used or not) and the payload `p`. A
/// listing's items will go into `out`, up to the size the request asks
/// (with `view`'s generation).
fn decode<'a>(
    opcode: u32,
    op_in: &OpIn<'_>,
    mut p: Payload<'a, '_>,
    out: &'a mut Vec<u8>,
    view: &'a dyn View,
) -> Result<Op<'a>, i32> {
    Ok(match opcode {
        op::LOOKUP => Op::Lookup { name: p.name()? },
        op::GETATTR => {
            arg::<abi::GetattrIn>(op_in)?;
            Op::GetAttr
        }
        op::SETATTR => Op::SetAttr(set_attr(&arg(op_in)?)),
        op::READLINK => Op::ReadLink,
        op::SYMLINK => Op::Symlink {
            name: p.name()?,
            target: p.name()?,
        },
        op::MKNOD => {
            let a: abi::MknodIn = arg(op_in)?;
            Op::MkNod {
                name: p.name()?,
                mode: a.mode,
                umask: a.umask,
                rdev: a.rdev,
            }
        }
        op::MKDIR => {
            let a: abi::MkdirIn = arg(op_in)?;
            Op::MkDir {
                name: p.name()?,
                mode: a.mode,
                umask: a.umask,
            }
        }
        op::UNLINK => Op::Unlink { name: p.name()? },
        op::RMDIR => Op::RmDir { name: p.name()? },
        op::RENAME => {
            let a: abi::RenameIn = arg(op_in)?;
            Op::Rename {
                name: p.name()?,
                new_parent: a.newdir,
                new_name: p.name()?,
                flags: 0,
            }
        }
        op::RENAME2 => {
            let a: abi::Rename2In = arg(op_in)?;
            Op::Rename {
                name: p.name()?,
                new_parent: a.newdir,
                new_name: p.name()?,
                flags: a.flags,
            }
        }
        op::LINK => {
            let a: abi::LinkIn = arg(op_in)?;
            Op::Link {
                ino: a.oldnodeid,
                new_name: p.name()?,
            }
        }
        op::OPEN => Op::Open {
            flags: arg::<abi::OpenIn>(op_in)?.flags as i32,
        },
        op::READ => {
            let a: abi::ReadIn = arg(op_in)?;
            Op::Read {
                offset: a.offset,
                size: a.size,
            }
        }
        op::WRITE => {
            let a: abi::WriteIn = arg(op_in)?;
            let has = |f: WriteFlags| a.write_flags & f.bits() != 0;
            Op::Write {
                offset: a.offset,
                data: p.data(a.size)?,
                flags: a.flags as i32,
                writeback: has(WriteFlags::FUSE_WRITE_CACHE),
                kill_suidgid: has(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
            }
        }
        op::STATFS => Op::StatFs,
        op::RELEASE => {
            arg::<abi::ReleaseIn>(op_in)?;
            Op::Release
        }
        op::FSYNC | op::FSYNCDIR => {
            arg::<abi::FsyncIn>(op_in)?;
            Op::Sync
        }
        op::SETXATTR => {
            let a: abi::SetxattrIn = arg(op_in)?;
            let name = p.name()?;
            Op::SetXattr {
                name,
                value: p.data(a.size)?,
                flags: a.flags as i32,
            }
        }
        op::GETXATTR => {
            let a: abi::GetxattrIn = arg(op_in)?;
            Op::GetXattr {
                name: p.name()?,
                size: a.size,
            }
        }
        op::LISTXATTR => Op::ListXattr {
            size: arg::<abi::GetxattrIn>(op_in)?.size,
        },
        op::REMOVEXATTR => Op::RemoveXattr { name: p.name()? },
        op::FLUSH => {
            arg::<abi::FlushIn>(op_in)?;
            Op::Flush
        }
        op::OPENDIR => {
            arg::<abi::OpenIn>(op_in)?;
            Op::OpenDir
        }
        op::READDIR | op::READDIRPLUS => {
            let a: abi::ReadIn = arg(op_in)?;
            let at = Readdir {
                fh: a.fh,
                offset: a.offset,
                plus: opcode == op::READDIRPLUS,
            };
            let max = a.size as usize;
            let add = Box::new(move |item: DirItem<'_>| add_item(out, max, at.plus, view, item));
            Op::ReadDir { at, add }
        }
        op::RELEASEDIR => Op::ReleaseDir {
            fh: arg::<abi::ReleaseIn>(op_in)?.fh,
        },
        op::ACCESS => Op::Access {
            mask: arg::<abi::AccessIn>(op_in)?.mask as i32,
        },
        op::CREATE => {
            let a: abi::CreateIn = arg(op_in)?;
            Op::Create {
                name: p.name()?,
                mode: a.mode,
                umask: a.umask,
                flags: a.flags as i32,
            }
        }
        // Not one fuser knows (it would answer ENOSYS, and the kernel then
        // every O_TMPFILE with EOPNOTSUPP itself): its arguments
        // are `FUSE_CREATE`'s, the name always "/" (`vfs_tmpfile`'s
        // dentry), read and dropped.
        op::TMPFILE => {
            let a: abi::CreateIn = arg(op_in)?;
            p.name()?;
            Op::Tmpfile {
                mode: a.mode,
                umask: a.umask,
                flags: a.flags as i32,
            }
        }
        op::IOCTL => {
            let a: abi::IoctlIn = arg(op_in)?;
            let unrestricted = IoctlFlags::FUSE_IOCTL_UNRESTRICTED.bits();
            Op::Ioctl {
                unrestricted: a.flags & unrestricted != 0,
                cmd: a.cmd,
                arg: a.arg,
                in_data: p.data(a.in_size)?,
                out_size: a.out_size,
            }
        }
        op::FALLOCATE => {
            let a: abi::FallocateIn = arg(op_in)?;
            Op::Fallocate {
                offset: a.offset,
                length: a.length,
                mode: a.mode as i32,
            }
        }
        op::LSEEK => {
            let a: abi::LseekIn = arg(op_in)?;
            Op::Lseek {
                offset: a.offset as i64,
                whence: a.whence as i32,
            }
        }
        op::COPY_FILE_RANGE => {
            let a: abi::CopyFileRangeIn = arg(op_in)?;
            Op::CopyFileRange {
                offset_in: a.off_in,
                ino_out: a.nodeid_out,
                offset_out: a.off_out,
                len: a.len,
            }
        }
        // fuser's defaults: ENOSYS.
        op::GETLK | op::SETLK | op::SETLKW => {
            arg::<abi::LkIn>(op_in)?;
            Op::NotImplemented
        }
        op::BMAP => {
            arg::<abi::BmapIn>(op_in)?;
            Op::NotImplemented
        }
        op::POLL => {
            arg::<abi::PollIn>(op_in)?;
            Op::NotImplemented
        }
        _ => return Err(libc::ENOSYS),
    })
}

/// The `u32` at `at` of `b`, if `b` holds it (the tests' reader of raw
/// bytes, beside the ABI structs they check).
#[cfg(test)]
pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The `u64` at `at` of `b`, if `b` holds it.
#[cfg(test)]
pub(super) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::net::UnixDatagram;
    use std::sync::Arc;

    use fuser::{Config, Session, SessionACL};
    use parking_lot::Mutex;

    use super::*;
    use crate::fs::FsError;
    use crate::fs::Result;
    use crate::fs::devfuse;
    use crate::fs::dispatch::kernel_dev;
    use crate::fs::fuser_reference::Reference;
    use crate::fs::view::{AddItem, Capability, Entry, Opened, WriteCtx, sized, xattr_list};
    use crate::store::Kind;
    use crate::store::model::ext4::Seek;
    use crate::store::model::{Attr, Fallocate, Posix, RenameMode, StatFs, XattrMode};
    use crate::sys;

    // ------------------------------------------------------------ requests

    /// A reply's fields read at their fuse.h offsets, apart from the
    /// [`abi`] structs that wrote them.
    struct Fields<'a>(&'a [u8]);

    impl Fields<'_> {
        fn u32(&self, at: usize) -> std::result::Result<u32, i32> {
            u32_at(self.0, at).ok_or(libc::EIO)
        }
        fn u64(&self, at: usize) -> std::result::Result<u64, i32> {
            u64_at(self.0, at).ok_or(libc::EIO)
        }
        fn i64(&self, at: usize) -> std::result::Result<i64, i32> {
            self.u64(at).map(|v| v as i64)
        }
    }

    /// Little structs in the kernel's (native) byte order.
    #[derive(Default)]
    struct B(Vec<u8>);

    impl B {
        fn u32(mut self, v: u32) -> B {
            self.0.extend_from_slice(&v.to_ne_bytes());
            self
        }
        fn u64(mut self, v: u64) -> B {
            self.0.extend_from_slice(&v.to_ne_bytes());
            self
        }
        fn i64(self, v: i64) -> B {
            self.u64(v as u64)
        }
        fn zeros(mut self, n: usize) -> B {
            self.0.resize(self.0.len() + n, 0);
            self
        }
    }

    /// One request, in both of its forms: classic (header, first argument,
    /// the others) and ring (header, `op_in`, payload).
    #[derive(Clone)]
    struct Req {
        opcode: u32,
        nodeid: u64,
        uid: u32,
        gid: u32,
        pid: u32,
        /// The first argument: the op's fixed struct (empty for ops whose
        /// first argument is a name, which the ring sends zero-sized).
        arg: Vec<u8>,
        /// The other arguments, concatenated.
        rest: Vec<u8>,
    }

    impl Req {
        fn new(opcode: u32, nodeid: u64) -> Req {
            Req {
                opcode,
                nodeid,
                uid: 0,
                gid: 0,
                pid: 0,
                arg: vec![],
                rest: vec![],
            }
        }
        fn arg(mut self, b: B) -> Req {
            self.arg = b.0;
            self
        }
        fn name(mut self, name: &[u8]) -> Req {
            self.rest.extend_from_slice(name);
            self.rest.push(0);
            self
        }
        fn data(mut self, data: &[u8]) -> Req {
            self.rest.extend_from_slice(data);
            self
        }
        fn by(mut self, uid: u32, gid: u32, pid: u32) -> Req {
            (self.uid, self.gid, self.pid) = (uid, gid, pid);
            self
        }
        fn header(&self, unique: u64) -> Vec<u8> {
            let len = IN_HEADER + self.arg.len() + self.rest.len();
            B::default()
                .u32(len as u32)
                .u32(self.opcode)
                .u64(unique)
                .u64(self.nodeid)
                .u32(self.uid)
                .u32(self.gid)
                .u32(self.pid)
                .u32(0)
                .0
        }
        fn classic(&self, unique: u64) -> Vec<u8> {
            let mut v = self.header(unique);
            v.extend_from_slice(&self.arg);
            v.extend_from_slice(&self.rest);
            v
        }
        /// The entry's `op_in`: the first argument, then bytes that are not
        /// part of it (a decoder must not read them).
        fn op_in(&self) -> Vec<u8> {
            let mut v = self.arg.clone();
            v.resize(128, 0xa5);
            v
        }
        /// Served through [`serve`].
        fn serve(&self, view: &dyn View, policy: &Policy) -> std::result::Result<Vec<u8>, i32> {
            let mut out = vec![0xee; 3]; // serve clears it
            serve(
                view,
                policy,
                &self.header(77),
                &self.op_in(),
                &self.rest,
                &mut out,
            )?;
            Ok(out)
        }
    }

    fn read_in(fh: u64, offset: u64, size: u32) -> B {
        B::default()
            .u64(fh)
            .u64(offset)
            .u32(size)
            .u32(0)
            .u64(0)
            .u32(libc::O_RDONLY as u32)
            .u32(0)
    }

    fn write_in(offset: u64, size: u32, write_flags: u32, flags: i32) -> B {
        B::default()
            .u64(3)
            .u64(offset)
            .u32(size)
            .u32(write_flags)
            .u64(0)
            .u32(flags as u32)
            .u32(0)
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_in(
        valid: u32,
        size: u64,
        atime: (i64, u32),
        mtime: (i64, u32),
        ctime: (i64, u32),
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> B {
        B::default()
            .u32(valid)
            .u32(0)
            .u64(5) // fh
            .u64(size)
            .u64(0) // lock owner
            .i64(atime.0)
            .i64(mtime.0)
            .i64(ctime.0)
            .u32(atime.1)
            .u32(mtime.1)
            .u32(ctime.1)
            .u32(mode)
            .u32(0)
            .u32(uid)
            .u32(gid)
            .u32(0)
    }

    // ---------------------------------------------------- a recording view

    type Log = Arc<Mutex<Vec<String>>>;

    /// A view whose answers are fixed functions of their arguments and
    /// which logs every call with its arguments: the same requests through
    /// fuser and through [`serve`] must log the same calls.
    #[derive(Clone, Default)]
    struct Recorder(Log);

    impl Recorder {
        fn log(&self, s: String) {
            self.0.lock().push(s);
        }
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock())
        }
    }

    const KINDS: [Kind; 7] = [
        Kind::File,
        Kind::Dir,
        Kind::Symlink,
        Kind::Fifo,
        Kind::CharDev,
        Kind::BlockDev,
        Kind::Socket,
    ];

    /// The attributes the recorder gives inode `ino`: every field set,
    /// times before and after the epoch, permission bits past 0o7777.
    fn entry_of(ino: u64, kind: Kind) -> Entry {
        Entry {
            attr: Attr {
                ino,
                kind,
                perm: 0o176_755 + (ino as u32 % 3),
                nlink: 2,
                uid: 1000,
                gid: 100,
                rdev: sys::makedev(259, 70_000),
                size: 12_345 + ino,
                blocks: 24,
                atime_ns: -1_500_000_001,
                mtime_ns: 1_700_000_000_123_456_789,
                ctime_ns: -1_000_000_000,
            },
            ttl: Duration::new(1, 250_000_000),
        }
    }

    /// A name the recorder refuses, by its content.
    fn refusal(name: &[u8]) -> Result<()> {
        match name {
            b"missing" => Err(Posix::NotFound.into()),
            b"bad" => Err(Posix::Invalid("a bad name").into()),
            _ => Ok(()),
        }
    }

    const LISTING: usize = 40;

    fn listed_name(i: usize) -> Vec<u8> {
        match i {
            0 => b".".to_vec(),
            1 => b"..".to_vec(),
            _ => format!("n{i}{}", "x".repeat(i % 13)).into_bytes(),
        }
    }

    impl View for Recorder {
        fn capabilities(&self) -> &'static [Capability] {
            &[]
        }
        fn negative_ttl(&self, parent: u64) -> Option<Duration> {
            self.log(format!("negative_ttl {parent}"));
            (parent != 7).then_some(Duration::new(3, 5))
        }
        fn lookup(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<Entry> {
            self.log(format!("lookup {c:?} {parent} {name:?}"));
            refusal(name)?;
            Ok(entry_of(100 + name.len() as u64, Kind::File))
        }
        fn getattr(&self, c: &Caller, ino: u64) -> Result<Entry> {
            self.log(format!("getattr {c:?} {ino}"));
            if ino == 99 {
                return Err(FsError::UnknownInode(99));
            }
            Ok(entry_of(ino, KINDS[ino as usize % 7]))
        }
        fn readlink(&self, c: &Caller, ino: u64) -> Result<Vec<u8>> {
            self.log(format!("readlink {c:?} {ino}"));
            if ino == 2 {
                return Err(Posix::NotSymlink.into());
            }
            Ok(b"../target/x".to_vec())
        }
        fn open(&self, c: &Caller, ino: u64, flags: i32) -> Result<Opened> {
            self.log(format!("open {c:?} {ino} {flags}"));
            match ino % 4 {
                0 => Ok(Opened::Stateless),
                1 => Ok(Opened::Handle {
                    fh: 42,
                    keep_cache: true,
                }),
                2 => Ok(Opened::Handle {
                    fh: u64::MAX,
                    keep_cache: false,
                }),
                _ => Err(Posix::ReadOnly.into()),
            }
        }
        fn read(&self, c: &Caller, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
            self.log(format!("read {c:?} {ino} {offset} {size}"));
            if ino == 99 {
                return Err(Posix::IsDir.into());
            }
            let n = size.min(300) as usize;
            Ok((0..n).map(|i| (offset as usize + i) as u8).collect())
        }
        fn seek(&self, c: &Caller, ino: u64, offset: i64, whence: Seek) -> Result<Option<u64>> {
            self.log(format!("seek {c:?} {ino} {offset} {whence:?}"));
            Ok(match whence {
                Seek::Data if offset == 1 => Some(u64::MAX),
                Seek::Data => Some(offset.unsigned_abs() + 1),
                Seek::Hole => None,
            })
        }
        fn opendir(&self, c: &Caller, ino: u64) -> Result<Opened> {
            self.log(format!("opendir {c:?} {ino}"));
            Ok(match ino {
                1 => Opened::Stateless,
                _ => Opened::Handle {
                    fh: 7,
                    keep_cache: ino.is_multiple_of(2),
                },
            })
        }
        fn readdir(&self, c: &Caller, ino: u64, at: Readdir, add: &mut AddItem<'_>) -> Result<()> {
            self.log(format!("readdir {c:?} {ino} {at:?}"));
            if ino == 99 {
                return Err(Posix::NotDir.into());
            }
            for i in at.offset.min(LISTING as u64) as usize..LISTING {
                let name = listed_name(i);
                let kind = KINDS[i % 7];
                let next = i as u64 + 1;
                let e = entry_of(1000 + i as u64, kind);
                let item = match i {
                    // No attributes: readdirplus leaves it out.
                    5 => DirItem {
                        next_offset: next,
                        name: &name,
                        ino: 1005,
                        kind,
                        entry: None,
                    },
                    // The item's own number and type differ from its
                    // attributes' (readdirplus takes the attributes').
                    7 => DirItem {
                        next_offset: next,
                        name: &name,
                        ino: 9_999,
                        kind: Kind::Socket,
                        entry: Some(e),
                    },
                    _ if at.plus => DirItem::with(next, &name, e),
                    _ => DirItem {
                        next_offset: next,
                        name: &name,
                        ino: e.attr.ino,
                        kind,
                        entry: None,
                    },
                };
                let full = add(item);
                self.log(format!("add {i}: {full}"));
                if full {
                    break;
                }
            }
            Ok(())
        }
        fn statfs(&self, c: &Caller) -> Result<StatFs> {
            self.log(format!("statfs {c:?}"));
            Ok(StatFs {
                blocks: 1 << 40,
                blocks_free: 3,
                blocks_avail: 2,
                block_size: 4096,
                files: 77,
                files_free: u64::MAX,
                name_max: 255,
            })
        }
        fn getxattr(&self, c: &Caller, ino: u64, name: &[u8], size: u32) -> Result<XattrReply> {
            self.log(format!("getxattr {c:?} {ino} {name:?} {size}"));
            if name == b"user.none" {
                return Err(Posix::NoXattr.into());
            }
            sized(b"value!".to_vec(), size)
        }
        fn listxattr(&self, c: &Caller, ino: u64, size: u32) -> Result<XattrReply> {
            self.log(format!("listxattr {c:?} {ino} {size}"));
            sized(xattr_list([&b"user.a"[..], b"user.bb"]), size)
        }
        fn access(&self, c: &Caller, ino: u64, mask: i32) -> Result<()> {
            self.log(format!("access {c:?} {ino} {mask}"));
            crate::fs::view::access_read_only(mask)
        }
        fn release(&self, c: &Caller, ino: u64) {
            self.log(format!("release {c:?} {ino}"));
        }
        fn forget(&self, ino: u64, nlookup: u64) {
            self.log(format!("forget {ino} {nlookup}"));
        }
        fn releasedir(&self, c: &Caller, fh: u64) {
            self.log(format!("releasedir {c:?} {fh}"));
        }
        fn sync(&self, c: &Caller) -> Result<()> {
            self.log(format!("sync {c:?}"));
            Ok(())
        }
        fn setattr(&self, c: &Caller, ino: u64, attrs: &SetAttr) -> Result<Entry> {
            self.log(format!("setattr {c:?} {ino} {attrs:?}"));
            Ok(entry_of(ino, Kind::File))
        }
        fn mknod(
            &self,
            c: &Caller,
            parent: u64,
            name: &[u8],
            mode: u32,
            rdev: u64,
        ) -> Result<Entry> {
            self.log(format!("mknod {c:?} {parent} {name:?} {mode:o} {rdev}"));
            refusal(name)?;
            Ok(entry_of(300, Kind::CharDev))
        }
        fn mkdir(&self, c: &Caller, parent: u64, name: &[u8], mode: u32) -> Result<Entry> {
            self.log(format!("mkdir {c:?} {parent} {name:?} {mode:o}"));
            refusal(name)?;
            Ok(entry_of(301, Kind::Dir))
        }
        fn symlink(&self, c: &Caller, parent: u64, name: &[u8], target: &[u8]) -> Result<Entry> {
            self.log(format!("symlink {c:?} {parent} {name:?} {target:?}"));
            refusal(name)?;
            Ok(entry_of(302, Kind::Symlink))
        }
        fn link(&self, c: &Caller, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Entry> {
            self.log(format!("link {c:?} {ino} {new_parent} {new_name:?}"));
            refusal(new_name)?;
            Ok(entry_of(ino, Kind::File))
        }
        fn unlink(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<()> {
            self.log(format!("unlink {c:?} {parent} {name:?}"));
            refusal(name)
        }
        fn rmdir(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<()> {
            self.log(format!("rmdir {c:?} {parent} {name:?}"));
            refusal(name)
        }
        fn rename(
            &self,
            c: &Caller,
            parent: u64,
            name: &[u8],
            new_parent: u64,
            new_name: &[u8],
            mode: RenameMode,
        ) -> Result<()> {
            self.log(format!(
                "rename {c:?} {parent} {name:?} {new_parent} {new_name:?} {mode:?}"
            ));
            refusal(name)
        }
        fn create(
            &self,
            c: &Caller,
            parent: u64,
            name: &[u8],
            mode: u32,
            flags: i32,
        ) -> Result<(Entry, Opened)> {
            self.log(format!("create {c:?} {parent} {name:?} {mode:o} {flags}"));
            refusal(name)?;
            let opened = match mode & 1 {
                0 => Opened::Stateless,
                _ => Opened::Handle {
                    fh: 9,
                    keep_cache: true,
                },
            };
            Ok((entry_of(303, Kind::File), opened))
        }
        fn tmpfile(
            &self,
            c: &Caller,
            parent: u64,
            mode: u32,
            flags: i32,
        ) -> Result<(Entry, Opened)> {
            self.log(format!("tmpfile {c:?} {parent} {mode:o} {flags}"));
            Ok((entry_of(303, Kind::File), Opened::Stateless))
        }
        fn rename_whiteout(
            &self,
            c: &Caller,
            parent: u64,
            name: &[u8],
            new_parent: u64,
            new_name: &[u8],
            noreplace: bool,
        ) -> Result<()> {
            self.log(format!(
                "rename_whiteout {c:?} {parent} {name:?} {new_parent} {new_name:?} {noreplace}"
            ));
            refusal(name)
        }
        fn write(&self, c: &Caller, ino: u64, data: &[u8], how: WriteCtx) -> Result<u32> {
            self.log(format!("write {c:?} {ino} {data:?} {how:?}"));
            if ino == 99 {
                return Err(Posix::ReadOnly.into());
            }
            Ok(data.len() as u32)
        }
        fn setxattr(
            &self,
            c: &Caller,
            ino: u64,
            name: &[u8],
            value: &[u8],
            mode: XattrMode,
        ) -> Result<()> {
            self.log(format!("setxattr {c:?} {ino} {name:?} {value:?} {mode:?}"));
            refusal(name)
        }
        fn removexattr(&self, c: &Caller, ino: u64, name: &[u8]) -> Result<()> {
            self.log(format!("removexattr {c:?} {ino} {name:?}"));
            refusal(name)
        }
        fn get_flags(&self, c: &Caller, ino: u64) -> Result<u32> {
            self.log(format!("get_flags {c:?} {ino}"));
            Ok(0x30)
        }
        fn set_flags(&self, c: &Caller, ino: u64, flags: u32) -> Result<()> {
            self.log(format!("set_flags {c:?} {ino} {flags:#x}"));
            match flags {
                0x8 => Err(Posix::Unsupported("sync").into()),
                _ => Ok(()),
            }
        }
        fn fallocate(
            &self,
            c: &Caller,
            ino: u64,
            offset: u64,
            len: u64,
            how: Fallocate,
        ) -> Result<()> {
            self.log(format!("fallocate {c:?} {ino} {offset} {len} {how:?}"));
            Ok(())
        }
        fn copy_file_range(
            &self,
            c: &Caller,
            from: (u64, u64),
            to: (u64, u64),
            len: u64,
        ) -> Result<u64> {
            self.log(format!("copy_file_range {c:?} {from:?} {to:?} {len}"));
            match from.0 {
                5 => Err(FsError::NotNeeded),
                _ => Ok(len),
            }
        }
    }

    // ------------------------------------------- fuser, over a socket pair

    const INIT_EXT: u32 = 1 << 30;

    /// A classic transport serving over one end of a datagram socket pair
    /// (one request or reply per datagram, as `/dev/fuse`), the test
    /// playing the kernel at the other end: fuser 0.18 with its own parsing
    /// ([`Peer::fuser`]), or storefs's workers ([`Peer::ours`]).
    struct Peer {
        sock: UnixDatagram,
        /// Waits for the serving thread once it was told DESTROY.
        join: Option<Box<dyn FnOnce()>>,
        unique: u64,
    }

    impl Peer {
        fn pair() -> (UnixDatagram, OwnedFd) {
            let (sock, theirs) = UnixDatagram::pair().unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
            (sock, OwnedFd::from(theirs))
        }

        /// fuser, serving `view` through [`Reference`] (fuser's parsing of
        /// every op) after its INIT handshake.
        fn fuser(view: Arc<dyn View>, acl: SessionACL) -> Peer {
            let (sock, theirs) = Peer::pair();
            let init_in = B::default()
                .u32(7)
                .u32(45)
                .u32(0x20000)
                .u32(INIT_EXT)
                .u32(0)
                .zeros(44);
            sock.send(&Req::new(op::INIT, 0).arg(init_in).classic(1))
                .unwrap();
            let session = Session::from_fd(Reference::new(view), theirs, acl, Config::default())
                .expect("fuser's handshake");
            let mut buf = vec![0; 4096];
            let n = sock.recv(&mut buf).unwrap();
            assert!(n >= 16 && buf[4..8] == [0; 4], "INIT answered");
            let session = session.spawn().unwrap();
            Peer {
                sock,
                join: Some(Box::new(move || {
                    let _ = session.join();
                })),
                unique: 1,
            }
        }

        /// storefs's `/dev/fuse` workers ([`devfuse::serve`], one thread).
        fn ours(view: Arc<dyn View>, policy: Policy) -> Peer {
            let (sock, theirs) = Peer::pair();
            let worker =
                std::thread::spawn(move || devfuse::serve(theirs.as_fd(), &*view, &policy, 1));
            Peer {
                sock,
                join: Some(Box::new(move || {
                    worker.join().unwrap().unwrap();
                })),
                unique: 1,
            }
        }

        /// Send `r`, which gets no reply (a forget).
        fn tell(&mut self, r: &Req) {
            self.unique += 1;
            self.sock.send(&r.classic(self.unique)).unwrap();
        }

        /// The reply to `r`: the bytes after `fuse_out_header`, or the errno.
        fn call(&mut self, r: &Req) -> std::result::Result<Vec<u8>, i32> {
            self.tell(r);
            let mut buf = vec![0; 1 << 20];
            let n = self.sock.recv(&mut buf).unwrap();
            assert!(n >= 16);
            assert_eq!(u32_at(&buf, 0), Some(n as u32), "fuse_out_header.len");
            assert_eq!(u64_at(&buf, 8), Some(self.unique), "fuse_out_header.unique");
            match u32_at(&buf, 4).unwrap() as i32 {
                0 => Ok(buf[16..n].to_vec()),
                e => {
                    assert_eq!(n, 16, "an error carries no data");
                    Err(-e)
                }
            }
        }
    }

    impl Drop for Peer {
        fn drop(&mut self) {
            let destroyed = self.call(&Req::new(op::DESTROY, 0));
            assert_eq!(destroyed, Ok(vec![]), "DESTROY answered");
            if let Some(join) = self.join.take() {
                join();
            }
        }
    }

    fn owner() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn policy(access: Access) -> Policy {
        Policy {
            access,
            owner_uid: owner(),
        }
    }

    /// Serve each request through fuser, through storefs's `/dev/fuse`
    /// workers and through [`serve`] (policy `access`, fuser's owner: this
    /// process's euid): the same reply bytes or errno, and the same view
    /// calls with the same arguments. A forget gets no reply on
    /// `/dev/fuse`: a statfs after it shows its calls were made and that
    /// nothing was sent for it (the next reply is the statfs's).
    fn same_as_fuser(access: Access, requests: &[Req]) {
        let acl = match access {
            Access::Owner => SessionACL::Owner,
            Access::RootAndOwner => SessionACL::RootAndOwner,
            Access::All => SessionACL::All,
        };
        assert_eq!(Access::from(acl), access);
        let view = Recorder::default();
        let policy = policy(access);
        let mut fuser = Peer::fuser(Arc::new(view.clone()), acl);
        let mut ours = Peer::ours(Arc::new(view.clone()), policy);
        let fence = Req::new(op::STATFS, 1);
        for (i, r) in requests.iter().enumerate() {
            let what = format!("request {i}: opcode {} nodeid {}", r.opcode, r.nodeid);
            if matches!(r.opcode, op::FORGET | op::BATCH_FORGET) {
                fuser.tell(r);
                let want = fuser.call(&fence);
                let want_calls = view.take();
                ours.tell(r);
                assert_eq!(ours.call(&fence), want, "{what}: the reply after it");
                assert_eq!(view.take(), want_calls, "{what}: view calls");
                // Never on a ring.
                assert_eq!(r.serve(&view, &policy), Err(libc::ENOSYS), "{what}: ring");
                assert_eq!(view.take(), Vec::<String>::new(), "{what}: ring");
                continue;
            }
            let want = fuser.call(r);
            let want_calls = view.take();
            let dev = ours.call(r);
            let dev_calls = view.take();
            assert_eq!(dev, want, "{what}: /dev/fuse reply");
            assert_eq!(dev_calls, want_calls, "{what}: /dev/fuse view calls");
            let ring = r.serve(&view, &policy);
            let ring_calls = view.take();
            if matches!(
                r.opcode,
                op::INTERRUPT | op::NOTIFY_REPLY | op::INIT | op::CUSE_INIT
            ) {
                // Never on a ring.
                assert_eq!(ring, Err(libc::ENOSYS), "{what}: ring reply");
            } else {
                assert_eq!(ring, want, "{what}: ring reply");
            }
            assert_eq!(ring_calls, want_calls, "{what}: ring view calls");
        }
    }

    /// Requests for every op fuser parses, and their failures.
    fn every_op() -> Vec<Req> {
        let fsync_in = || B::default().u64(4).u32(1).u32(0);
        let release_in = || B::default().u64(4).u32(2).u32(1).u64(0);
        let getxattr_in = |size| B::default().u32(size).u32(0);
        let ctime_only = setattr_in(fattr::CTIME, 0, (0, 0), (0, 0), (-2, 500_000_000), 0, 0, 0);
        let all = fattr::MODE
            | fattr::UID
            | fattr::GID
            | fattr::SIZE
            | fattr::ATIME
            | fattr::MTIME
            | fattr::CTIME
            | 1 << 6; // FATTR_FH
        let times = (1_700_000_000, 999_999_999);
        let mut v = vec![
            Req::new(op::LOOKUP, 1).name(b"file").by(1000, 100, 4242),
            Req::new(op::LOOKUP, 1).name(b"missing"),
            Req::new(op::LOOKUP, 7).name(b"missing"),
            Req::new(op::LOOKUP, 1).name(b"bad"),
            Req::new(op::LOOKUP, 1).name(&[b'n'; 300]),
            Req::new(op::LOOKUP, 1).name(b"a").data(b"trailing"),
            Req::new(op::GETATTR, 5).arg(B::default().u32(1).u32(0).u64(8)),
            Req::new(op::GETATTR, 99).arg(B::default().zeros(16)),
            Req::new(op::SETATTR, 5).arg(ctime_only),
            Req::new(op::SETATTR, 5).arg(setattr_in(
                all,
                1 << 40,
                times,
                (-3, 7),
                times,
                0o107_777,
                12,
                34,
            )),
            Req::new(op::SETATTR, 5).arg(setattr_in(
                fattr::ATIME | fattr::ATIME_NOW | fattr::MTIME | fattr::MTIME_NOW,
                0,
                times,
                times,
                times,
                0,
                0,
                0,
            )),
            // The NOW bits without ATIME/MTIME set nothing.
            Req::new(op::SETATTR, 5).arg(setattr_in(
                fattr::ATIME_NOW | fattr::MTIME_NOW,
                0,
                times,
                times,
                times,
                0,
                0,
                0,
            )),
            Req::new(op::SETATTR, 5).arg(setattr_in(
                fattr::MTIME | fattr::CTIME,
                0,
                (0, 0),
                // fuser panics at i64::MIN seconds (see `sent_time`).
                (i64::MIN + 1, 999_999_999),
                (i64::MAX, 999_999_999),
                0,
                0,
                0,
            )),
            Req::new(op::READLINK, 4),
            Req::new(op::READLINK, 2),
            Req::new(op::SYMLINK, 1).name(b"ln").name(b"../a/b"),
            Req::new(op::SYMLINK, 1).name(b"bad").name(b"t"),
            Req::new(op::MKNOD, 1)
                .arg(B::default().u32(0o20644).u32(0x120_0134).u32(0o022).u32(0))
                .name(b"dev")
                .by(1000, 1000, 1),
            Req::new(op::MKDIR, 1)
                .arg(B::default().u32(0o40755).u32(0o077))
                .name(b"d"),
            Req::new(op::MKDIR, 1)
                .arg(B::default().u32(0o755).u32(0))
                .name(b"missing"),
            Req::new(op::UNLINK, 1).name(b"f"),
            Req::new(op::UNLINK, 1).name(b"missing"),
            Req::new(op::RMDIR, 1).name(b"d"),
            Req::new(op::RENAME, 1)
                .arg(B::default().u64(8))
                .name(b"a")
                .name(b"b"),
            Req::new(op::RENAME2, 1)
                .arg(B::default().u64(8).u32(libc::RENAME_EXCHANGE).u32(0))
                .name(b"a")
                .name(b"b"),
            Req::new(op::RENAME2, 1)
                .arg(B::default().u64(8).u32(libc::RENAME_NOREPLACE).u32(0))
                .name(b"missing")
                .name(b"b"),
            Req::new(op::LINK, 9).arg(B::default().u64(5)).name(b"hard"),
            Req::new(op::LINK, 9).arg(B::default().u64(5)).name(b"bad"),
            Req::new(op::OPENDIR, 1).arg(B::default().u32(0).u32(0)),
            Req::new(op::OPENDIR, 2).arg(B::default().u32(0).u32(0)),
            Req::new(op::OPENDIR, 3).arg(B::default().u32(0).u32(0)),
            Req::new(op::READ, 5).arg(read_in(1, 10, 100)).by(7, 8, 9),
            Req::new(op::READ, 5).arg(read_in(1, 0, 0)),
            Req::new(op::READ, 5).arg(read_in(1, i64::MAX as u64, 4096)),
            Req::new(op::READ, 5).arg(read_in(1, i64::MAX as u64 + 1, 4096)),
            Req::new(op::READ, 99).arg(read_in(1, 0, 4096)),
            Req::new(op::WRITE, 5)
                .arg(write_in(7, 5, 0, libc::O_WRONLY | libc::O_APPEND))
                .data(b"hello"),
            Req::new(op::WRITE, 5)
                .arg(write_in(0, 3, 1 | 2 | 4, libc::O_RDWR))
                .data(b"abc"),
            Req::new(op::WRITE, 5).arg(write_in(0, 0, 4, 0)),
            Req::new(op::WRITE, 5)
                .arg(write_in(u64::MAX, 1, 0, 0))
                .data(b"x"),
            Req::new(op::WRITE, 99).arg(write_in(0, 1, 0, 0)).data(b"x"),
            Req::new(op::STATFS, 1),
            Req::new(op::RELEASE, 5).arg(release_in()),
            Req::new(op::RELEASEDIR, 5).arg(release_in()),
            Req::new(op::FSYNC, 5).arg(fsync_in()),
            Req::new(op::FSYNCDIR, 1).arg(fsync_in()),
            Req::new(op::FLUSH, 5).arg(B::default().u64(4).zeros(16)),
            Req::new(op::SETXATTR, 5)
                .arg(B::default().u32(3).u32(libc::XATTR_CREATE as u32))
                .name(b"user.x")
                .data(b"v\0w"),
            Req::new(op::SETXATTR, 5)
                .arg(B::default().u32(0).u32(0))
                .name(b"user.empty"),
            Req::new(op::SETXATTR, 5)
                .arg(B::default().u32(1).u32(0))
                .name(b"missing")
                .data(b"z"),
            Req::new(op::GETXATTR, 5)
                .arg(getxattr_in(0))
                .name(b"user.a"),
            Req::new(op::GETXATTR, 5)
                .arg(getxattr_in(6))
                .name(b"user.a"),
            Req::new(op::GETXATTR, 5)
                .arg(getxattr_in(5))
                .name(b"user.a"),
            Req::new(op::GETXATTR, 5)
                .arg(getxattr_in(64))
                .name(b"user.none"),
            Req::new(op::LISTXATTR, 5).arg(getxattr_in(0)),
            Req::new(op::LISTXATTR, 5).arg(getxattr_in(100)),
            Req::new(op::LISTXATTR, 5).arg(getxattr_in(3)),
            Req::new(op::REMOVEXATTR, 5).name(b"user.x"),
            Req::new(op::REMOVEXATTR, 5).name(b"missing"),
            Req::new(op::ACCESS, 5).arg(B::default().u32(libc::R_OK as u32).u32(0)),
            Req::new(op::ACCESS, 5).arg(B::default().u32(libc::W_OK as u32).u32(0)),
            Req::new(op::CREATE, 1)
                .arg(
                    B::default()
                        .u32(libc::O_RDWR as u32)
                        .u32(0o100_644)
                        .u32(0o022)
                        .u32(0),
                )
                .name(b"new"),
            Req::new(op::CREATE, 1)
                .arg(
                    B::default()
                        .u32(libc::O_WRONLY as u32)
                        .u32(0o100_645)
                        .u32(0o002)
                        .u32(0),
                )
                .name(b"new2")
                .by(1000, 1000, 77),
            Req::new(op::CREATE, 1)
                .arg(B::default().u32(0).u32(0o644).u32(0).u32(0))
                .name(b"bad"),
            Req::new(op::FALLOCATE, 5).arg(B::default().u64(4).u64(10).u64(20).u32(3).u32(0)),
            Req::new(op::FALLOCATE, 5).arg(B::default().u64(4).u64(u64::MAX).u64(20).u32(0).u32(0)),
            Req::new(op::FALLOCATE, 5).arg(B::default().u64(4).u64(0).u64(u64::MAX).u32(0).u32(0)),
            Req::new(op::IOCTL, 5).arg(B::default().u64(4).u32(0).u32(0x5401).u64(0).u32(0).u32(0)),
            Req::new(op::IOCTL, 5).arg(B::default().u64(4).u32(2).u32(0x5401).u64(0).u32(0).u32(0)),
            // chattr and lsattr (fuse_priv_ioctl): FS_IOC_GETFLAGS with 4 bytes
            // out, FS_IOC_SETFLAGS with 4 bytes in (one the view refuses),
            // FS_IOC_FSGETXATTR with a 28-byte struct out, an out size short
            // of an int, and a SETFLAGS whose int is missing.
            Req::new(op::IOCTL, 5).arg(
                B::default()
                    .u64(0)
                    .u32(0)
                    .u32(0x8008_6601)
                    .u64(0)
                    .u32(0)
                    .u32(4),
            ),
            Req::new(op::IOCTL, 5)
                .arg(
                    B::default()
                        .u64(0)
                        .u32(16)
                        .u32(0x4008_6602)
                        .u64(0)
                        .u32(4)
                        .u32(0),
                )
                .data(&0x10u32.to_le_bytes()),
            Req::new(op::IOCTL, 5)
                .arg(
                    B::default()
                        .u64(0)
                        .u32(0)
                        .u32(0x4008_6602)
                        .u64(0)
                        .u32(4)
                        .u32(0),
                )
                .data(&0x8u32.to_le_bytes()),
            Req::new(op::IOCTL, 5).arg(
                B::default()
                    .u64(0)
                    .u32(0)
                    .u32(0x801c_581f)
                    .u64(0)
                    .u32(0)
                    .u32(28),
            ),
            Req::new(op::IOCTL, 5).arg(
                B::default()
                    .u64(0)
                    .u32(0)
                    .u32(0x8008_6601)
                    .u64(0)
                    .u32(0)
                    .u32(2),
            ),
            Req::new(op::IOCTL, 5).arg(
                B::default()
                    .u64(0)
                    .u32(0)
                    .u32(0x4008_6602)
                    .u64(0)
                    .u32(0)
                    .u32(0),
            ),
            Req::new(op::GETLK, 5).arg(B::default().zeros(48)),
            Req::new(op::SETLK, 5).arg(B::default().zeros(48)),
            Req::new(op::SETLKW, 5).arg(B::default().zeros(48)),
            Req::new(op::BMAP, 5).arg(B::default().zeros(16)),
            Req::new(op::POLL, 5).arg(B::default().zeros(24)),
            // What only /dev/fuse carries: forgets (no reply), an
            // interrupt, a notify reply, a second INIT, CUSE_INIT.
            Req::new(op::FORGET, 5).arg(B::default().u64(3)),
            Req::new(op::BATCH_FORGET, 0).arg(
                B::default()
                    .u32(3)
                    .u32(0)
                    .u64(5)
                    .u64(1)
                    .u64(6)
                    .u64(u64::MAX)
                    .u64(1)
                    .u64(2),
            ),
            Req::new(op::BATCH_FORGET, 0).arg(B::default().u32(0).u32(0)),
            Req::new(op::INTERRUPT, 0).arg(B::default().u64(12)),
            Req::new(op::NOTIFY_REPLY, 0).arg(B::default().zeros(24)),
            Req::new(op::INIT, 0).arg(B::default().u32(7).u32(45).zeros(56)),
            Req::new(op::CUSE_INIT, 0).arg(B::default().u32(7).u32(45).zeros(56)),
            // Opcodes fuser does not know: syncfs, statx,
            // copy_file_range_64, and nonsense (tmpfile is served:
            // `tmpfile_is_served_as_a_create_without_a_name`).
            Req::new(50, 1).arg(B::default().zeros(8)),
            Req::new(52, 1).arg(B::default().zeros(16)),
            Req::new(53, 5).arg(B::default().zeros(56)),
            Req::new(0, 1),
            Req::new(7, 1),
            Req::new(19, 1),
            Req::new(999, 1),
        ];
        for ino in 0..4 {
            v.push(Req::new(op::OPEN, ino).arg(B::default().u32(libc::O_RDWR as u32).u32(0)));
        }
        for (offset, whence) in [
            (0, libc::SEEK_DATA),
            (1, libc::SEEK_DATA),
            (-5, libc::SEEK_DATA),
            (10, libc::SEEK_HOLE),
            (10, libc::SEEK_SET),
            (10, libc::SEEK_END),
        ] {
            let lseek_in = B::default().u64(4).i64(offset).u32(whence as u32).u32(0);
            v.push(Req::new(op::LSEEK, 5).arg(lseek_in));
        }
        for (from, off_in, off_out, len) in [
            (6, 0, 10, 1 << 20),
            (6, 3, 4, u64::MAX),
            (6, 0, 0, 0xffff_f001),
            (5, 0, 0, 10),
            (6, u64::MAX, 0, 10),
            (6, 0, i64::MAX as u64 + 1, 10),
        ] {
            let cfr_in = B::default()
                .u64(4)
                .u64(off_in)
                .u64(8)
                .u64(2)
                .u64(off_out)
                .u64(len)
                .u64(0);
            v.push(Req::new(op::COPY_FILE_RANGE, from).arg(cfr_in));
        }
        v
    }

    #[test]
    fn every_op_answers_as_fuser_does() {
        same_as_fuser(Access::Owner, &every_op());
    }

    /// Every listing size from nothing to past the whole listing, at the
    /// start and resuming, with and without attributes.
    #[test]
    fn listings_pack_and_stop_as_fuser_does() {
        let mut v = vec![];
        for opcode in [op::READDIR, op::READDIRPLUS] {
            for size in (0..200).chain([1000, 4095, 4096, 8000, 65536]) {
                for offset in [0, 3, 39, 40, 1000] {
                    v.push(Req::new(opcode, 2).arg(read_in(7, offset, size)));
                }
            }
            v.push(Req::new(opcode, 99).arg(read_in(7, 0, 4096)));
        }
        same_as_fuser(Access::Owner, &v);
    }

    /// fuser's uid filter, under each ACL: another user's requests are
    /// refused but for the ops the kernel sends on anyone's behalf.
    #[test]
    fn the_uid_filter_is_fusers() {
        let stranger = owner().wrapping_add(4242);
        let mut v = vec![];
        for uid in [owner(), 0, stranger] {
            let mut reqs = every_op();
            reqs.push(Req::new(op::READDIR, 2).arg(read_in(7, 0, 500)));
            reqs.push(Req::new(op::READDIRPLUS, 2).arg(read_in(7, 0, 500)));
            v.extend(reqs.into_iter().map(|r| Req { uid, ..r }));
        }
        for access in [Access::Owner, Access::RootAndOwner, Access::All] {
            same_as_fuser(access, &v);
        }
    }

    /// The filter for an owner who is not root (the tests run as root, so
    /// fuser above cannot tell root from the owner).
    #[test]
    fn root_passes_allow_root_only() {
        let view = Recorder::default();
        let lookup = Req::new(op::LOOKUP, 1).name(b"f");
        let read = Req::new(op::READ, 5).arg(read_in(1, 0, 10));
        let p = |access| Policy {
            access,
            owner_uid: 1000,
        };
        for (access, uid, admitted) in [
            (Access::Owner, 1000, true),
            (Access::Owner, 0, false),
            (Access::Owner, 1001, false),
            (Access::RootAndOwner, 1000, true),
            (Access::RootAndOwner, 0, true),
            (Access::RootAndOwner, 1001, false),
            (Access::All, 1001, true),
            (Access::All, 0, true),
        ] {
            let got = lookup.clone().by(uid, 0, 0).serve(&view, &p(access));
            assert_eq!(got.is_ok(), admitted, "{access:?} uid {uid}");
            if !admitted {
                assert_eq!(got, Err(libc::EACCES));
            }
            // A read passes whoever sent it.
            assert!(read.clone().by(uid, 0, 0).serve(&view, &p(access)).is_ok());
        }
    }

    // ------------------------------------------------- hand-written layouts

    /// The attributes the layout tests encode.
    fn pinned() -> Entry {
        Entry {
            attr: Attr {
                ino: 0x0102_0304_0506_0708,
                kind: Kind::Symlink,
                perm: 0o4_0000 | 0o6755, // a type bit in perm: masked off
                nlink: 3,
                uid: 1000,
                gid: 100,
                rdev: sys::makedev(8, 1),
                size: 4097,
                blocks: 16,
                atime_ns: -1_200_000_000, // -1.2 s: (-2, 0.8 s)
                mtime_ns: 1_000_000_007,
                ctime_ns: 0,
            },
            ttl: Duration::new(2, 500),
        }
    }

    /// `fuse_attr` of [`pinned`], field by field from fuse.h.
    fn pinned_attr() -> Vec<u8> {
        B::default()
            .u64(0x0102_0304_0506_0708) // ino
            .u64(4097) // size
            .u64(16) // blocks
            .i64(-2) // atime
            .i64(1) // mtime
            .i64(0) // ctime
            .u32(800_000_000) // atimensec
            .u32(7) // mtimensec
            .u32(0) // ctimensec
            .u32(0o120_000 | 0o6755) // mode: S_IFLNK | perm
            .u32(3) // nlink
            .u32(1000) // uid
            .u32(100) // gid
            .u32(0x801) // rdev: 8:1 as new_encode_dev
            .u32(4096) // blksize
            .u32(0) // flags
            .0
    }

    /// A view that answers everything with [`pinned`] and its own fixed
    /// answers, for the layout tests.
    struct Pinned;

    impl View for Pinned {
        fn capabilities(&self) -> &'static [Capability] {
            &[]
        }
        fn lookup(&self, _: &Caller, _: u64, name: &[u8]) -> Result<Entry> {
            refusal(name)?;
            Ok(pinned())
        }
        fn negative_ttl(&self, _: u64) -> Option<Duration> {
            Some(Duration::new(5, 6))
        }
        fn getattr(&self, _: &Caller, _: u64) -> Result<Entry> {
            Ok(pinned())
        }
        fn readlink(&self, _: &Caller, _: u64) -> Result<Vec<u8>> {
            Ok(b"t".to_vec())
        }
        fn open(&self, _: &Caller, _: u64, _: i32) -> Result<Opened> {
            Ok(Opened::Handle {
                fh: 0x1122,
                keep_cache: true,
            })
        }
        fn read(&self, _: &Caller, _: u64, _: u64, _: u32) -> Result<Vec<u8>> {
            Ok(vec![])
        }
        fn seek(&self, _: &Caller, _: u64, _: i64, _: Seek) -> Result<Option<u64>> {
            Ok(Some(u64::MAX))
        }
        fn opendir(&self, _: &Caller, _: u64) -> Result<Opened> {
            Ok(Opened::Stateless)
        }
        fn readdir(&self, _: &Caller, _: u64, at: Readdir, add: &mut AddItem<'_>) -> Result<()> {
            for (i, name) in [&b"abc"[..], b"abcdefgh", b"x"].into_iter().enumerate() {
                let item = DirItem::with(i as u64 + 1, name, pinned());
                if add(item) {
                    break;
                }
            }
            let _ = at;
            Ok(())
        }
        fn statfs(&self, _: &Caller) -> Result<StatFs> {
            Ok(StatFs {
                blocks: 1,
                blocks_free: 2,
                blocks_avail: 3,
                block_size: 4,
                files: 5,
                files_free: 6,
                name_max: 7,
            })
        }
        fn getxattr(&self, _: &Caller, _: u64, _: &[u8], size: u32) -> Result<XattrReply> {
            sized(b"12345".to_vec(), size)
        }
        fn listxattr(&self, _: &Caller, _: u64, size: u32) -> Result<XattrReply> {
            sized(b"user.a\0".to_vec(), size)
        }
        fn access(&self, _: &Caller, _: u64, _: i32) -> Result<()> {
            Ok(())
        }
        fn create(&self, _: &Caller, _: u64, _: &[u8], _: u32, _: i32) -> Result<(Entry, Opened)> {
            Ok((pinned(), Opened::Stateless))
        }
        fn write(&self, _: &Caller, _: u64, data: &[u8], _: WriteCtx) -> Result<u32> {
            Ok(data.len() as u32 + 0x100)
        }
    }

    /// The pinned entry as `fuse_entry_out`: nodeid, generation,
    /// entry_valid, attr_valid, entry_valid_nsec, attr_valid_nsec, attr.
    fn pinned_entry_out() -> Vec<u8> {
        let mut entry_out = B::default()
            .u64(0x0102_0304_0506_0708)
            .u64(0)
            .u64(2)
            .u64(2)
            .u32(500)
            .u32(500)
            .0;
        entry_out.extend_from_slice(&pinned_attr());
        entry_out
    }

    fn pin(r: Req) -> Vec<u8> {
        r.serve(&Pinned, &policy(Access::All)).expect("answered")
    }

    #[test]
    fn entries_and_attributes_have_fuse_h_layouts() {
        let attr = pinned_attr();
        assert_eq!(attr.len(), 88);
        let entry_out = pinned_entry_out();
        assert_eq!(entry_out.len(), 128);
        assert_eq!(pin(Req::new(op::LOOKUP, 1).name(b"a")), entry_out);
        // fuse_attr_out: attr_valid, attr_valid_nsec, dummy, attr.
        let mut attr_out = B::default().u64(2).u32(500).u32(0).0;
        attr_out.extend_from_slice(&attr);
        assert_eq!(attr_out.len(), 104);
        assert_eq!(
            pin(Req::new(op::GETATTR, 1).arg(B::default().zeros(16))),
            attr_out
        );
        // A negative entry: node id 0, the TTL, a bare regular file.
        let negative = B::default()
            .u64(0)
            .u64(0)
            .u64(5)
            .u64(5)
            .u32(6)
            .u32(6)
            .zeros(60)
            .u32(libc::S_IFREG)
            .zeros(16)
            .u32(4096)
            .u32(0)
            .0;
        assert_eq!(negative.len(), 128);
        assert_eq!(pin(Req::new(op::LOOKUP, 1).name(b"missing")), negative);
        // fuse_create_out: fuse_entry_out then fuse_open_out (a stateless
        // open is handle 0, no flags).
        let mut create_out = entry_out.clone();
        create_out.extend_from_slice(&B::default().u64(0).u32(0).u32(0).0);
        assert_eq!(create_out.len(), 144);
        let create_in = B::default().u32(0).u32(0o644).u32(0).u32(0);
        assert_eq!(
            pin(Req::new(op::CREATE, 1).arg(create_in).name(b"n")),
            create_out
        );
    }

    #[test]
    fn small_replies_have_fuse_h_layouts() {
        // fuse_open_out: fh, open_flags (FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR), backing_id.
        let open_in = B::default().u32(0).u32(0);
        assert_eq!(
            pin(Req::new(op::OPEN, 5).arg(open_in)),
            B::default().u64(0x1122).u32(2 | 8).u32(0).0
        );
        // fuse_write_out: size, padding.
        let w = pin(Req::new(op::WRITE, 5).arg(write_in(0, 2, 0, 0)).data(b"ab"));
        assert_eq!(w, B::default().u32(0x102).u32(0).0);
        // fuse_getxattr_out for a size probe; the bytes otherwise.
        let probe = Req::new(op::GETXATTR, 5)
            .arg(B::default().u32(0).u32(0))
            .name(b"user.a");
        assert_eq!(pin(probe), B::default().u32(5).u32(0).0);
        let get = Req::new(op::GETXATTR, 5)
            .arg(B::default().u32(9).u32(0))
            .name(b"user.a");
        assert_eq!(pin(get), b"12345");
        let list = Req::new(op::LISTXATTR, 5).arg(B::default().u32(0).u32(0));
        assert_eq!(pin(list), B::default().u32(7).u32(0).0);
        // fuse_lseek_out: the offset, at most i64::MAX.
        let lseek_in = B::default()
            .u64(0)
            .i64(0)
            .u32(libc::SEEK_DATA as u32)
            .u32(0);
        assert_eq!(
            pin(Req::new(op::LSEEK, 5).arg(lseek_in)),
            B::default().i64(i64::MAX).0
        );
        // fuse_statfs_out (fuse_kstatfs): blocks, bfree, bavail, files,
        // ffree, bsize, namelen, frsize, padding, spare[6]: 80 bytes.
        let statfs = B::default()
            .u64(1)
            .u64(2)
            .u64(3)
            .u64(5)
            .u64(6)
            .u32(4)
            .u32(7)
            .u32(4)
            .zeros(28)
            .0;
        assert_eq!(statfs.len(), 80);
        assert_eq!(pin(Req::new(op::STATFS, 1)), statfs);
        // Empty replies.
        assert_eq!(pin(Req::new(op::ACCESS, 1).arg(B::default().zeros(8))), b"");
        assert_eq!(pin(Req::new(op::READLINK, 1)), b"t");
    }

    #[test]
    fn listings_have_fuse_h_layouts_and_padding() {
        // fuse_dirent: ino, off, namelen, type, name, zeros to 8 bytes.
        let dirent = |name: &[u8], off: u64| {
            let mut d = B::default()
                .u64(0x0102_0304_0506_0708)
                .u64(off)
                .u32(name.len() as u32)
                .u32(libc::DT_LNK as u32)
                .0;
            d.extend_from_slice(name);
            d.resize(d.len().next_multiple_of(8), 0);
            d
        };
        let all: Vec<u8> = [dirent(b"abc", 1), dirent(b"abcdefgh", 2), dirent(b"x", 3)].concat();
        assert_eq!(all.len(), 32 + 32 + 32);
        assert_eq!(&all[24..32], b"abc\0\0\0\0\0");
        let list = |opcode, size| pin(Req::new(opcode, 1).arg(read_in(0, 0, size)));
        assert_eq!(list(op::READDIR, 4096), all);
        // An entry that does not fit is not written and ends the reply.
        assert_eq!(list(op::READDIR, 95), &all[..64]);
        assert_eq!(list(op::READDIR, 64), &all[..64]);
        assert_eq!(list(op::READDIR, 31), b"");
        // fuse_direntplus: fuse_entry_out, then fuse_dirent (node id and
        // type from the attributes), name, padding.
        let entry_out = pinned_entry_out();
        let plus: Vec<u8> = [
            entry_out.clone(),
            dirent(b"abc", 1),
            entry_out.clone(),
            dirent(b"abcdefgh", 2),
        ]
        .concat();
        assert_eq!(plus.len(), 2 * (128 + 32));
        assert_eq!(list(op::READDIRPLUS, 320), plus);
        assert_eq!(list(op::READDIRPLUS, 319), &plus[..160]);
    }

    // ------------------------------------------------------------ decoders

    /// The view calls [`serve`] makes for `r` (answered or not).
    fn calls(r: Req) -> Vec<String> {
        let view = Recorder::default();
        let _ = r.serve(&view, &policy(Access::All));
        view.take()
    }

    const ROOT_CALLER: &str = "Caller { uid: 0, gid: 0, pid: 0, umask: 0 }";

    #[test]
    fn setattr_takes_the_valid_fields_only() {
        let all = fattr::MODE | fattr::UID | fattr::GID | fattr::SIZE | fattr::ATIME;
        let all = all | fattr::MTIME | fattr::MTIME_NOW | fattr::CTIME;
        let r = Req::new(op::SETATTR, 5).arg(setattr_in(
            all,
            77,
            (1, 2),
            (3, 4),
            (-2, 500_000_000),
            0o104_755,
            10,
            20,
        ));
        let want = SetAttr {
            perm: Some(0o4755),
            uid: Some(10),
            gid: Some(20),
            size: Some(77),
            atime: Some(Time::At(1_000_000_002)),
            mtime: Some(Time::Now),
            // (-2 s, +0.5 s), on both transports.
            ctime: Some(-1_500_000_000),
        };
        assert_eq!(calls(r), [format!("setattr {ROOT_CALLER} 5 {want:?}")]);
        let none = Req::new(op::SETATTR, 5).arg(setattr_in(
            fattr::ATIME_NOW | fattr::MTIME_NOW | 1 << 6 | 1 << 9,
            77,
            (1, 2),
            (3, 4),
            (5, 6),
            0o755,
            10,
            20,
        ));
        let want = SetAttr::default();
        assert_eq!(calls(none), [format!("setattr {ROOT_CALLER} 5 {want:?}")]);
    }

    #[test]
    fn times_saturate_where_fuser_would_overflow() {
        assert_eq!(sent_time(i64::MIN, 999_999_999), i64::MIN);
        assert_eq!(sent_time(i64::MAX, 999_999_999), i64::MAX);
        assert_eq!(sent_time(-1, 0), -1_000_000_000);
        assert_eq!(sent_time(-2, 500_000_000), -1_500_000_000);
        assert_eq!(sent_time(0, 1_500_000_000), 1_500_000_000);
    }

    #[test]
    fn names_values_data_and_umasks_reach_the_view() {
        let r = Req::new(op::RENAME2, 1)
            .arg(B::default().u64(8).u32(libc::RENAME_EXCHANGE).u32(0))
            .name(b"old")
            .name(b"new");
        assert_eq!(
            calls(r),
            [format!(
                "rename {ROOT_CALLER} 1 [111, 108, 100] 8 [110, 101, 119] Exchange"
            )]
        );
        // A whiteout rename, alone or with NOREPLACE, is the view's
        // rename_whiteout; with EXCHANGE (or anything else) it never
        // reaches the view.
        let whiteout = |flags| {
            Req::new(op::RENAME2, 1)
                .arg(B::default().u64(8).u32(flags).u32(0))
                .name(b"old")
                .name(b"new")
        };
        let (w, x, n) = (
            libc::RENAME_WHITEOUT,
            libc::RENAME_EXCHANGE,
            libc::RENAME_NOREPLACE,
        );
        let to = format!("{ROOT_CALLER} 1 [111, 108, 100] 8 [110, 101, 119]");
        assert_eq!(calls(whiteout(w)), [format!("rename_whiteout {to} false")]);
        assert_eq!(
            calls(whiteout(w | n)),
            [format!("rename_whiteout {to} true")]
        );
        assert!(calls(whiteout(w | x)).is_empty());
        assert!(calls(whiteout(8)).is_empty());
        let r = Req::new(op::RENAME, 1)
            .arg(B::default().u64(8))
            .name(b"a")
            .name(b"b");
        assert_eq!(
            calls(r),
            [format!("rename {ROOT_CALLER} 1 [97] 8 [98] Replace")]
        );
        // setxattr: the name up to its NUL, then exactly `size` bytes.
        let r = Req::new(op::SETXATTR, 5)
            .arg(B::default().u32(3).u32(2))
            .name(b"user.k")
            .data(b"\0v\0");
        assert_eq!(
            calls(r),
            [format!(
                "setxattr {ROOT_CALLER} 5 {:?} [0, 118, 0] Replace",
                b"user.k"
            )]
        );
        // write: the data and the flags.
        let r = Req::new(op::WRITE, 5)
            .arg(write_in(9, 2, 1 | 4, libc::O_APPEND))
            .data(b"hi");
        let how = WriteCtx {
            offset: 9,
            flags: libc::O_APPEND,
            writeback: true,
            kill_suidgid: true,
        };
        assert_eq!(
            calls(r),
            [format!("write {ROOT_CALLER} 5 [104, 105] {how:?}")]
        );
        // create, mkdir, mknod: the umask in the caller, the rest as sent.
        let create_in = B::default()
            .u32(libc::O_EXCL as u32)
            .u32(0o100_600)
            .u32(0o027)
            .u32(0);
        let r = Req::new(op::CREATE, 1)
            .arg(create_in)
            .name(b"f")
            .by(5, 6, 7);
        let c = "Caller { uid: 5, gid: 6, pid: 7, umask: 23 }";
        let excl = libc::O_EXCL;
        assert_eq!(calls(r), [format!("create {c} 1 [102] 100600 {excl}")]);
        let r = Req::new(op::MKDIR, 1)
            .arg(B::default().u32(0o755).u32(0o002))
            .name(b"d");
        let c = "Caller { uid: 0, gid: 0, pid: 0, umask: 2 }";
        assert_eq!(calls(r), [format!("mkdir {c} 1 [100] 755")]);
        let mknod_in = B::default().u32(0o60_600).u32(0x801).u32(0o077).u32(0);
        let r = Req::new(op::MKNOD, 1).arg(mknod_in).name(b"b");
        let c = "Caller { uid: 0, gid: 0, pid: 0, umask: 63 }";
        let rdev = sys::makedev(8, 1);
        assert_eq!(calls(r), [format!("mknod {c} 1 [98] 60600 {rdev}")]);
        // symlink: the link's name, then its target.
        let r = Req::new(op::SYMLINK, 1).name(b"l").name(b"/t");
        assert_eq!(
            calls(r),
            [format!("symlink {ROOT_CALLER} 1 [108] [47, 116]")]
        );
        // link: the old inode from link_in, the new parent from the header.
        let r = Req::new(op::LINK, 3).arg(B::default().u64(12)).name(b"h");
        assert_eq!(calls(r), [format!("link {ROOT_CALLER} 12 3 [104]")]);
    }

    /// `FUSE_TMPFILE` (which fuser does not know): decoded as a create
    /// whose name ("/") is dropped, the umask in the caller, and answered
    /// with the bytes a create's answer has (`fuse_entry_out`, then
    /// `fuse_open_out`); fuser's uid filter applies as to a create; a
    /// request without its name is malformed.
    #[test]
    fn tmpfile_is_served_as_a_create_without_a_name() {
        let create_in = || {
            B::default()
                .u32((libc::O_RDWR | libc::O_EXCL) as u32)
                .u32(0o100_640)
                .u32(0o027)
                .u32(0)
        };
        let r = Req::new(op::TMPFILE, 1)
            .arg(create_in())
            .name(b"/")
            .by(5, 6, 7);
        let c = "Caller { uid: 5, gid: 6, pid: 7, umask: 23 }";
        let flags = libc::O_RDWR | libc::O_EXCL;
        assert_eq!(calls(r.clone()), [format!("tmpfile {c} 1 100640 {flags}")]);
        let view = Recorder::default();
        let tmpfile = r.serve(&view, &policy(Access::All)).unwrap();
        let create = Req::new(op::CREATE, 1)
            .arg(create_in())
            .name(b"x")
            .by(5, 6, 7)
            .serve(&view, &policy(Access::All))
            .unwrap();
        assert_eq!(tmpfile, create);
        let stranger = Policy {
            access: Access::Owner,
            owner_uid: 1000,
        };
        assert_eq!(r.serve(&view, &stranger), Err(libc::EACCES));
        let unnamed = Req::new(op::TMPFILE, 1).arg(create_in());
        assert_eq!(unnamed.serve(&view, &policy(Access::All)), Err(libc::EIO));
    }

    // ----------------------------------------------------- malformed input

    #[test]
    fn short_requests_get_eio_not_a_panic() {
        let view = Recorder::default();
        let p = policy(Access::All);
        let mut out = vec![];
        let lookup = Req::new(op::LOOKUP, 1).name(b"f");
        // A header shorter than fuse_in_header.
        let header = lookup.header(1);
        assert_eq!(
            serve(&view, &p, &header[..39], &[], b"f\0", &mut out),
            Err(libc::EIO)
        );
        assert_eq!(serve(&view, &p, &[], &[], &[], &mut out), Err(libc::EIO));
        // A name without its NUL; no name at all.
        assert_eq!(
            serve(&view, &p, &header, &[], b"f", &mut out),
            Err(libc::EIO)
        );
        assert_eq!(
            serve(&view, &p, &header, &[], b"", &mut out),
            Err(libc::EIO)
        );
        // On /dev/fuse: a request shorter than its header gets no reply
        // (there is no unique to answer), one whose header says another
        // length gets EIO, and a name must end within the request.
        let dev = |r: &[u8]| serve_dev(&view, &p, r, &mut vec![]);
        assert_eq!(dev(&lookup.classic(9)[..39]), DevReply::None);
        assert_eq!(
            dev(&lookup.classic(9)[..41]),
            DevReply::Reply(9, Err(libc::EIO))
        );
        let unterminated = Req::new(op::LOOKUP, 1).data(b"f");
        assert_eq!(
            dev(&unterminated.classic(9)),
            DevReply::Reply(9, Err(libc::EIO))
        );
        let mkdir = Req::new(op::MKDIR, 1).arg(B::default().u32(0o755).u32(0));
        assert_eq!(
            dev(&mkdir.classic(9)),
            DevReply::Reply(9, Err(libc::EIO)),
            "no name"
        );
        let symlink = Req::new(op::SYMLINK, 1).name(b"l");
        assert_eq!(symlink.serve(&view, &p), Err(libc::EIO), "no target");
        // An op_in shorter than the op's struct.
        let read = Req::new(op::READ, 5).arg(read_in(0, 0, 10));
        let h = read.header(1);
        assert_eq!(
            serve(&view, &p, &h, &read.arg[..39], &[], &mut out),
            Err(libc::EIO)
        );
        assert_eq!(serve(&view, &p, &h, &[], &[], &mut out), Err(libc::EIO));
        // Write data or an xattr value shorter than its size.
        let write = Req::new(op::WRITE, 5)
            .arg(write_in(0, 5, 0, 0))
            .data(b"abcd");
        assert_eq!(write.serve(&view, &p), Err(libc::EIO));
        let setxattr = Req::new(op::SETXATTR, 5)
            .arg(B::default().u32(4).u32(0))
            .name(b"user.a")
            .data(b"abc");
        assert_eq!(setxattr.serve(&view, &p), Err(libc::EIO));
        assert!(
            view.take().is_empty(),
            "no view call for a malformed request"
        );
        // More data than the size: the size counts.
        let write = Req::new(op::WRITE, 5)
            .arg(write_in(0, 2, 0, 0))
            .data(b"abcd");
        assert_eq!(write.serve(&view, &p), Ok(B::default().u32(2).u32(0).0));
    }

    /// Arbitrary bytes for every opcode: an answer each time, never a panic.
    #[test]
    fn arbitrary_requests_never_panic() {
        let view = Recorder::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut out = vec![];
        for opcode in (0..60).chain([4096, u32::MAX]) {
            for round in 0..200 {
                let mut bytes = |n: usize| (0..n).map(|_| next() as u8).collect::<Vec<u8>>();
                let mut header = bytes(40);
                header[4..8].copy_from_slice(&opcode.to_ne_bytes());
                let op_in = bytes(round % 130);
                let mut payload = bytes(round % 70);
                if round % 3 == 0 {
                    payload.retain(|&b| b != 0);
                }
                let p = Policy {
                    access: [Access::All, Access::Owner, Access::RootAndOwner][round % 3],
                    owner_uid: 0,
                };
                match serve(&view, &p, &header, &op_in, &payload, &mut out) {
                    Ok(()) => {}
                    Err(e) => assert!(e > 0, "a positive errno: {e}"),
                }
                // The same bytes as one /dev/fuse request, its length
                // right (every other round) or not.
                let mut request = [header, op_in, payload].concat();
                if round % 2 == 0 {
                    let len = request.len() as u32;
                    request[..4].copy_from_slice(&len.to_ne_bytes());
                }
                match serve_dev(&view, &p, &request, &mut out) {
                    DevReply::Reply(_, Err(e)) => assert!(e > 0, "a positive errno: {e}"),
                    DevReply::Reply(_, Ok(())) | DevReply::None | DevReply::Destroy(_) => {}
                }
            }
        }
    }

    #[test]
    fn the_header_helpers_read_opcode_and_unique() {
        let h = Req::new(op::READDIRPLUS, 1).header(0xdead_beef_0000_0001);
        assert_eq!(opcode(&h), op::READDIRPLUS);
        assert_eq!(unique(&h), 0xdead_beef_0000_0001);
        assert_eq!((opcode(&h[..7]), unique(&h[..15])), (0, 0));
    }

    // ------------------------------------- end to end, on a checkpoint view

    /// A checkpoint view of {f (10,000 bytes), d/g, l -> f}, without a kernel.
    fn checkpoint_view() -> (tempfile::TempDir, crate::fs::checkpoint::CheckpointView) {
        use crate::fs::testing;
        use crate::ingest::{self, SnapshotOptions};
        use crate::store::Store;
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        let content: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(src.join("f"), &content).unwrap();
        std::fs::write(src.join("d/g"), b"g").unwrap();
        std::os::unix::fs::symlink("f", src.join("l")).unwrap();
        let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
        let snap = ingest::snapshot(&store, &src, &SnapshotOptions::default()).unwrap();
        let record = testing::checkpoint(snap.root, vec![], "c".into());
        let id = store.write_checkpoint(&record).unwrap();
        let record = store.read_checkpoint(&id).unwrap();
        let root = store.root_entry(&record).unwrap();
        let caches = crate::fs::Caches::new(1 << 20);
        let view =
            crate::fs::checkpoint::CheckpointView::new(store, root, &caches, "/m".into(), None);
        (tmp, view)
    }

    /// Check a `fuse_attr` against the attributes a view gave.
    fn assert_attr(wire: &[u8], a: &Attr) {
        let f = Fields(wire);
        let time = |secs_at, nsec_at| (f.i64(secs_at).unwrap(), f.u32(nsec_at).unwrap());
        let split = |ns: i64| {
            (
                ns.div_euclid(1_000_000_000),
                ns.rem_euclid(1_000_000_000) as u32,
            )
        };
        assert_eq!(f.u64(0), Ok(a.ino), "ino");
        assert_eq!(f.u64(8), Ok(a.size), "size");
        assert_eq!(f.u64(16), Ok(a.blocks), "blocks");
        assert_eq!(time(24, 48), split(a.atime_ns), "atime");
        assert_eq!(time(32, 52), split(a.mtime_ns), "mtime");
        assert_eq!(time(40, 56), split(a.ctime_ns), "ctime");
        assert_eq!(f.u32(60), Ok(a.kind.mode_bits() | a.perm), "mode");
        assert_eq!(f.u32(64), Ok(a.nlink), "nlink");
        assert_eq!(f.u32(68), Ok(a.uid), "uid");
        assert_eq!(f.u32(72), Ok(a.gid), "gid");
        assert_eq!(f.u32(76), Ok(kernel_dev(a.rdev)), "rdev");
        assert_eq!(f.u32(80), Ok(BLOCK_SIZE), "blksize");
    }

    /// Check a `fuse_entry_out` against an entry `view` gave (the
    /// generation its own: not the root's).
    fn assert_entry(wire: &[u8], e: &Entry, view: &dyn View) {
        let f = Fields(wire);
        assert_eq!(f.u64(0), Ok(e.attr.ino), "nodeid");
        assert_ne!(e.attr.ino, crate::store::model::ROOT_INO);
        assert_eq!(f.u64(8), Ok(view.generation()), "generation");
        assert_eq!(
            (f.u64(16), f.u32(32)),
            (Ok(e.ttl.as_secs()), Ok(e.ttl.subsec_nanos()))
        );
        assert_eq!(
            (f.u64(24), f.u32(36)),
            (Ok(e.ttl.as_secs()), Ok(e.ttl.subsec_nanos()))
        );
        assert_attr(&wire[40..128], &e.attr);
    }

    #[test]
    #[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
    fn a_checkpoint_view_served_from_ring_requests() {
        use crate::store::model::ROOT_INO;
        let (_tmp, view) = checkpoint_view();
        let p = policy(Access::Owner);
        let c = &Caller::default();
        // lookup
        let f = view.lookup(c, ROOT_INO, b"f").unwrap();
        let wire = Req::new(op::LOOKUP, ROOT_INO)
            .name(b"f")
            .serve(&view, &p)
            .unwrap();
        assert_eq!(wire.len(), 128);
        assert_entry(&wire, &f, &view);
        assert_eq!((f.attr.size, f.attr.kind), (10_000, Kind::File));
        // A negative entry, for the view's negative TTL.
        let ttl = view
            .negative_ttl(ROOT_INO)
            .expect("checkpoints cache absences");
        let wire = Req::new(op::LOOKUP, ROOT_INO)
            .name(b"nope")
            .serve(&view, &p)
            .unwrap();
        assert_eq!(Fields(&wire).u64(0), Ok(0), "node id 0");
        assert_eq!(Fields(&wire).u64(16), Ok(ttl.as_secs()));
        assert_eq!(Fields(&wire).u32(32), Ok(ttl.subsec_nanos()));
        // getattr
        let getattr = Req::new(op::GETATTR, f.attr.ino).arg(B::default().zeros(16));
        let wire = getattr.serve(&view, &p).unwrap();
        let got = view.getattr(c, f.attr.ino).unwrap();
        assert_eq!(Fields(&wire).u64(0), Ok(got.ttl.as_secs()));
        assert_eq!(Fields(&wire).u32(8), Ok(got.ttl.subsec_nanos()));
        assert_attr(&wire[16..], &got.attr);
        // read
        let read = Req::new(op::READ, f.attr.ino).arg(read_in(0, 100, 5000));
        let want: Vec<u8> = (100..5100u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(read.serve(&view, &p).unwrap(), want);
        // readlink; open and opendir are zero-message (ENOSYS).
        let l = view.lookup(c, ROOT_INO, b"l").unwrap().attr.ino;
        assert_eq!(Req::new(op::READLINK, l).serve(&view, &p).unwrap(), b"f");
        let open = Req::new(op::OPEN, f.attr.ino).arg(B::default().zeros(8));
        assert_eq!(open.serve(&view, &p), Err(libc::ENOSYS));
        let opendir = Req::new(op::OPENDIR, ROOT_INO).arg(B::default().zeros(8));
        assert_eq!(opendir.serve(&view, &p), Err(libc::ENOSYS));
        // Writes are refused as read-only.
        let unlink = Req::new(op::UNLINK, ROOT_INO).name(b"f");
        assert_eq!(unlink.serve(&view, &p), Err(libc::EROFS));
        // readdirplus: every entry with the attributes a lookup gives.
        let list = Req::new(op::READDIRPLUS, ROOT_INO).arg(read_in(0, 0, 4096));
        let wire = list.serve(&view, &p).unwrap();
        let mut names = vec![];
        let mut at = 0;
        while at < wire.len() {
            let namelen = Fields(&wire[at + 128..]).u32(16).unwrap() as usize;
            let name = wire[at + 152..at + 152 + namelen].to_vec();
            let kind_bits = Fields(&wire[at + 128..]).u32(20).unwrap();
            if name != b"." && name != b".." {
                let e = view.lookup(c, ROOT_INO, &name).unwrap();
                assert_entry(&wire[at..], &e, &view);
                assert_eq!(kind_bits, e.attr.kind.mode_bits() >> 12);
                assert_eq!(Fields(&wire[at + 128..]).u64(0), Ok(e.attr.ino));
            }
            names.push(name);
            at += (152 + namelen).next_multiple_of(8);
        }
        assert_eq!(at, wire.len());
        let names: Vec<&[u8]> = names.iter().map(|n| &n[..]).collect();
        assert_eq!(names, [&b"."[..], b"..", b"d", b"f", b"l"]);
    }
}
