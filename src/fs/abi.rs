//! The FUSE ABI the io_uring transport reads and writes itself:
//! `#[repr(C)]` mirrors of `include/uapi/linux/fuse.h` (protocol 7.45),
//! read from and written to bytes through zerocopy, in the kernel's
//! (native) byte order. Only the structs storefs's ring codec
//! ([`super::wire`]) and rings ([`super::uring`]) use; each one's size is
//! checked against fuse.h's below.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// FUSE opcodes (`enum fuse_opcode`), the ones fuser 0.18 knows.
pub(super) mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    /// 7.39; fuser 0.18 does not know it (`wire.rs` serves it).
    pub const TMPFILE: u32 = 51;
    pub const CUSE_INIT: u32 = 4096;
}

/// `fuse_setattr_in.valid` bits (`FATTR_*`).
pub(super) mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}

/// The fuse.h structs, each `#[repr(C)]` with its padding spelled out.
macro_rules! abi {
    ($($(#[$m:meta])* $name:ident ($size:expr) { $($field:ident: $ty:ty),* $(,)? })*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub(super) struct $name {
            $(pub $field: $ty,)*
        }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
    )*};
}

abi! {
    /// `fuse_in_header`.
    InHeader(40) {
        len: u32, opcode: u32, unique: u64, nodeid: u64, uid: u32, gid: u32, pid: u32,
        total_extlen: u16, padding: u16,
    }
    /// `fuse_out_header`.
    OutHeader(16) { len: u32, error: i32, unique: u64 }
    /// `fuse_attr`.
    FuseAttr(88) {
        ino: u64, size: u64, blocks: u64, atime: u64, mtime: u64, ctime: u64,
        atimensec: u32, mtimensec: u32, ctimensec: u32, mode: u32, nlink: u32, uid: u32,
        gid: u32, rdev: u32, blksize: u32, flags: u32,
    }
    /// `fuse_entry_out`.
    EntryOut(128) {
        nodeid: u64, generation: u64, entry_valid: u64, attr_valid: u64,
        entry_valid_nsec: u32, attr_valid_nsec: u32, attr: FuseAttr,
    }
    /// `fuse_attr_out`.
    AttrOut(104) { attr_valid: u64, attr_valid_nsec: u32, dummy: u32, attr: FuseAttr }
    /// `fuse_forget_in`.
    ForgetIn(8) { nlookup: u64 }
    /// `fuse_batch_forget_in` (its `fuse_forget_one`s follow).
    BatchForgetIn(8) { count: u32, dummy: u32 }
    /// `fuse_forget_one`.
    ForgetOne(16) { nodeid: u64, nlookup: u64 }
    /// `fuse_getattr_in`.
    GetattrIn(16) { getattr_flags: u32, dummy: u32, fh: u64 }
    /// `fuse_setattr_in`.
    SetattrIn(88) {
        valid: u32, padding: u32, fh: u64, size: u64, lock_owner: u64,
        atime: u64, mtime: u64, ctime: u64, atimensec: u32, mtimensec: u32, ctimensec: u32,
        mode: u32, unused4: u32, uid: u32, gid: u32, unused5: u32,
    }
    /// `fuse_mknod_in`.
    MknodIn(16) { mode: u32, rdev: u32, umask: u32, padding: u32 }
    /// `fuse_mkdir_in`.
    MkdirIn(8) { mode: u32, umask: u32 }
    /// `fuse_rename_in`.
    RenameIn(8) { newdir: u64 }
    /// `fuse_rename2_in`.
    Rename2In(16) { newdir: u64, flags: u32, padding: u32 }
    /// `fuse_link_in`.
    LinkIn(8) { oldnodeid: u64 }
    /// `fuse_open_in` (open and opendir).
    OpenIn(8) { flags: u32, open_flags: u32 }
    /// `fuse_create_in`.
    CreateIn(16) { flags: u32, mode: u32, umask: u32, open_flags: u32 }
    /// `fuse_open_out`.
    OpenOut(16) { fh: u64, open_flags: u32, backing_id: i32 }
    /// `fuse_release_in` (release and releasedir).
    ReleaseIn(24) { fh: u64, flags: u32, release_flags: u32, lock_owner: u64 }
    /// `fuse_flush_in`.
    FlushIn(24) { fh: u64, unused: u32, padding: u32, lock_owner: u64 }
    /// `fuse_read_in` (read, readdir, readdirplus).
    ReadIn(40) {
        fh: u64, offset: u64, size: u32, read_flags: u32, lock_owner: u64, flags: u32,
        padding: u32,
    }
    /// `fuse_write_in`.
    WriteIn(40) {
        fh: u64, offset: u64, size: u32, write_flags: u32, lock_owner: u64, flags: u32,
        padding: u32,
    }
    /// `fuse_write_out` (and `fuse_getxattr_out`, the same two words).
    WriteOut(8) { size: u32, padding: u32 }
    /// `fuse_statfs_out` (its `fuse_kstatfs`).
    StatfsOut(80) {
        blocks: u64, bfree: u64, bavail: u64, files: u64, ffree: u64,
        bsize: u32, namelen: u32, frsize: u32, padding: u32, spare: [u32; 6],
    }
    /// `fuse_fsync_in` (fsync and fsyncdir).
    FsyncIn(16) { fh: u64, fsync_flags: u32, padding: u32 }
    /// `fuse_setxattr_in` as `FUSE_COMPAT_SETXATTR_IN_SIZE`: without
    /// `FUSE_SETXATTR_EXT`, which neither fuser 0.18 nor storefs asks for.
    SetxattrIn(8) { size: u32, flags: u32 }
    /// `fuse_getxattr_in` (getxattr and listxattr).
    GetxattrIn(8) { size: u32, padding: u32 }
    /// `fuse_lk_in` (getlk, setlk, setlkw; `fuse_file_lock` inline).
    LkIn(48) {
        fh: u64, owner: u64, start: u64, end: u64, typ: u32, pid: u32, lk_flags: u32,
        padding: u32,
    }
    /// `fuse_access_in`.
    AccessIn(8) { mask: u32, padding: u32 }
    /// `fuse_bmap_in`.
    BmapIn(16) { block: u64, blocksize: u32, padding: u32 }
    /// `fuse_ioctl_in`.
    IoctlIn(32) { fh: u64, flags: u32, cmd: u32, arg: u64, in_size: u32, out_size: u32 }
    /// `fuse_ioctl_out` (a restricted ioctl's out data follows it).
    IoctlOut(16) { result: u32, flags: u32, in_iovs: u32, out_iovs: u32 }
    /// `fuse_poll_in`.
    PollIn(24) { fh: u64, kh: u64, flags: u32, events: u32 }
    /// `fuse_fallocate_in`.
    FallocateIn(32) { fh: u64, offset: u64, length: u64, mode: u32, padding: u32 }
    /// `fuse_lseek_in`.
    LseekIn(24) { fh: u64, offset: u64, whence: u32, padding: u32 }
    /// `fuse_lseek_out`.
    LseekOut(8) { offset: u64 }
    /// `fuse_copy_file_range_in`.
    CopyFileRangeIn(56) {
        fh_in: u64, off_in: u64, nodeid_out: u64, fh_out: u64, off_out: u64, len: u64,
        flags: u64,
    }
    /// `fuse_dirent` without its name (which follows, padded to 8 bytes).
    Dirent(24) { ino: u64, off: u64, namelen: u32, typ: u32 }
    /// `fuse_uring_ent_in_out`.
    UringEntInOut(32) { flags: u64, commit_id: u64, payload_sz: u32, padding: u32, reserved: u64 }
    /// `fuse_uring_req_header`: `in_out` (the in header; our out header
    /// goes in its place), `op_in` (the op's fixed struct), `ring_ent_in_out`.
    UringReqHeader(288) { in_out: [u8; 128], op_in: [u8; 128], ring_ent_in_out: UringEntInOut }
    /// `fuse_uring_cmd_req`, the 80-byte command area of a `FUSE_URING_CMD`
    /// (its first 24 bytes are the struct, the rest zero).
    UringCmdReq(80) { flags: u64, commit_id: u64, qid: u16, padding: [u8; 6], unused: [u64; 7] }
}

/// A struct of the ABI read from the start of `b`, if `b` holds it.
pub(super) fn read<T: FromBytes + KnownLayout + Immutable>(b: &[u8]) -> Option<T> {
    T::read_from_prefix(b).ok().map(|(t, _)| t)
}

/// Append a struct of the ABI to `out`.
pub(super) fn put<T: IntoBytes + Immutable>(out: &mut Vec<u8>, t: &T) {
    out.extend_from_slice(t.as_bytes());
}
