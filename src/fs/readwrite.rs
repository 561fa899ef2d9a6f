//! A fork served read-write, on inode numbers. No FUSE types here: `fuse_rw.rs`
//! adapts these calls to fuser, and errors are `FsError`s that `errno()` maps.
//!
//! [`journal::Fork`] does the POSIX work (atomic check, journal append and
//! apply). This layer adds what belongs to the mount:
//!
//! - new entries: the umask, the requester's uid/gid, and setgid directories
//!   (a new entry takes the directory's group; a new directory also inherits
//!   `S_ISGID`);
//! - names over 255 bytes fail with `ENAMETOOLONG` on every operation,
//!   lookups included;
//! - open handles: counted with [`Fork::open_file`]/[`Fork::release`] so an
//!   unlinked open file stays readable; `O_APPEND` handles write with
//!   [`Fork::append`] (the journal picks the end atomically, so appenders in
//!   different processes never overwrite each other) and are opened in direct
//!   I/O mode, so the kernel's page cache never holds appended bytes at its own,
//!   possibly stale, idea of the end of the file;
//! - directory listings: a snapshot per open directory, taken at `opendir` and
//!   on a rewind (offset 0), so entries that do not change are listed exactly
//!   once even while the directory changes;
//! - xattr names outside the kernel's namespaces (`EOPNOTSUPP`, as ext4);
//! - xattr buffers: size-0 probes and `ERANGE`; flag and mode translation
//!   (rename, setxattr, fallocate, mknod).
//!
//! Permission checks are the kernel's (the mount always has
//! `default_permissions`, and `FUSE_POSIX_ACL`, so the kernel also reads the
//! ACL xattrs; keeping mode and ACLs in step and inheriting default ACLs is
//! [`Fork`]'s, with `store::acl`: this layer passes the umask through and
//! says whether the caller is in a file's group, for the setgid rule of an
//! ACL change). Setuid/setgid on a write, truncate or chown by
//! someone without `CAP_FSETID`: without `FUSE_HANDLE_KILLPRIV` the kernel
//! sends the mode change as a `setattr` of its own for truncate, chown and
//! page-cache writes, but not (Linux 6.18, checked by `tests/fork_mount.rs`)
//! for writes through a direct-I/O handle. For those (our `O_APPEND` handles)
//! [`ForkFs::write`] clears the bits itself when the writer is not root, as
//! fuser's `examples/simple.rs` does (uid 0 standing in for `CAP_FSETID`).
//!
//! Limits, honestly: a new file in a setgid directory keeps an `S_ISGID`
//! asked for by a creator who is not in the directory's group (the kernel
//! would drop it; we do not know the requester's supplementary groups; the
//! mount is `nosuid`, so the bit grants nothing here). The setgid check reads
//! the parent's attributes just before the create, not atomically with it.
//! Device nodes are recorded (type and `rdev`) but cannot be opened: the
//! mount is `nodev`, so the kernel refuses with `EACCES`. `lseek`
//! `SEEK_DATA`/`SEEK_HOLE` is answered from the fork's extent map, as ext4
//! would ([`journal::ext4`]); POSIX locks and `copy_file_range` are left to
//! the kernel's generic fallbacks (local locks; copy through read and
//! write). An `O_APPEND` handle is direct I/O, so it can be mapped
//! shared only where the kernel grants `FUSE_DIRECT_IO_ALLOW_MMAP` (asked for;
//! not tested), and pages other handles cached are not invalidated by its
//! appends until they reopen the file. `O_APPEND` set later with `fcntl(F_SETFL)` on a cached handle
//! still appends atomically in the journal, but that handle's page cache may
//! then place the bytes at the kernel's idea of the end.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::FsError;
use super::readonly::{XattrReply, check_xattr_name};
use crate::journal::{
    self, Attr, DirEntry, Fallocate, Fork, NewNode, RenameMode, SetAttr, XattrMode,
};
use crate::store::Kind;

/// The longest name this mount accepts (and `statfs` reports).
const NAME_MAX: usize = journal::NAME_MAX;

/// Who asks: the requester's ids as the kernel gives them.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The requesting process (0: unknown), for its supplementary groups.
    pub pid: u32,
}

impl Caller {
    /// Whether the caller is in group `gid` (its own group or a
    /// supplementary one, read from `/proc/PID/status`) or is root (standing
    /// in for `CAP_FSETID`, as elsewhere here).
    fn in_group(self, gid: u32) -> bool {
        if self.uid == 0 || self.gid == gid {
            return true;
        }
        if self.pid == 0 {
            return false;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid));
        status.ok().is_some_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Groups:"))
                .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
        })
    }
}

/// How the kernel should treat an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    /// Bypass the page cache (for `O_APPEND` handles).
    pub direct_io: bool,
}

impl Opened {
    /// The file handle given to the kernel: it only tells whether the handle
    /// is direct I/O (all the state a file handle needs; the inode comes with
    /// every request).
    pub fn fh(self) -> u64 {
        u64::from(self.direct_io)
    }

    /// What [`Opened::fh`] said.
    pub fn from_fh(fh: u64) -> Opened {
        Opened {
            direct_io: fh & 1 != 0,
        }
    }
}

/// How a write reached us.
#[derive(Clone, Copy, Debug)]
pub struct WriteCtx {
    /// Land at the end of file (an `O_APPEND` write), not at the offset.
    pub append: bool,
    /// Written through a direct-I/O handle (not page-cache writeback): the
    /// kernel did not clear setuid/setgid for it.
    pub direct: bool,
    pub caller: Caller,
}

/// One entry handed to a `readdir` callback.
pub struct DirItem<'a> {
    /// The offset that resumes the listing after this entry.
    pub next_offset: u64,
    pub name: &'a [u8],
    pub ino: u64,
    pub kind: Kind,
    /// Attributes, when asked for (readdirplus).
    pub attr: Option<Attr>,
}

/// A directory listing taken at opendir: ".", ".." and the entries.
struct Listing {
    entries: Vec<DirEntry>,
}

/// A fork, served read-write.
pub struct ForkFs {
    fork: Arc<Fork>,
    /// Open directories' listings by handle.
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
}

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

impl ForkFs {
    pub fn new(fork: Arc<Fork>) -> ForkFs {
        ForkFs {
            fork,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    // ---------------------------------------------------------------- reads

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, FsError> {
        check_name(name)?;
        Ok(self.fork.lookup(parent, name)?)
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        Ok(self.fork.getattr(ino)?)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        Ok(self.fork.readlink(ino)?)
    }

    /// Up to `size` bytes of file `ino` from `offset`; empty at or past the end.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        Ok(self.fork.read(ino, offset, size)?)
    }

    /// `lseek` `SEEK_DATA`/`SEEK_HOLE` on file `ino` from the fork's extent
    /// map; `None` is `ENXIO`.
    pub fn seek(
        &self,
        ino: u64,
        offset: i64,
        whence: journal::ext4::Seek,
    ) -> Result<Option<u64>, FsError> {
        Ok(self.fork.seek(ino, offset, whence)?)
    }

    pub fn statfs(&self) -> Result<journal::StatFs, FsError> {
        Ok(self.fork.statfs()?)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> Result<XattrReply, FsError> {
        check_xattr_name(name)?;
        let value = self.fork.getxattr(ino, name)?;
        sized(value, size)
    }

    /// The attribute names, each followed by a NUL.
    pub fn listxattr(&self, ino: u64, size: u32) -> Result<XattrReply, FsError> {
        let mut out = Vec::new();
        for name in self.fork.listxattr(ino)? {
            out.extend_from_slice(&name);
            out.push(0);
        }
        sized(out, size)
    }

    // ------------------------------------------------------------ directories

    /// Open directory `ino`: snapshot its listing; returns the handle.
    pub fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        let listing = self.listing(ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, Arc::new(listing));
        Ok(fh)
    }

    fn listing(&self, ino: u64) -> Result<Listing, FsError> {
        let (parent, children) = self.fork.readdir(ino)?;
        let mut entries = Vec::with_capacity(children.len() + 2);
        entries.push(DirEntry {
            name: b".".to_vec(),
            ino,
            kind: Kind::Dir,
        });
        entries.push(DirEntry {
            name: b"..".to_vec(),
            ino: parent,
            kind: Kind::Dir,
        });
        entries.extend(children);
        Ok(Listing { entries })
    }

    /// List directory `ino` (open as `fh`) from `offset` (0 = start, which
    /// takes a fresh listing), calling `add` until it returns true (the reply
    /// is full). With `plus`, each item carries its attributes (entries gone
    /// since the listing was taken are skipped).
    pub fn readdir(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        plus: bool,
        mut add: impl FnMut(DirItem<'_>) -> bool,
    ) -> Result<(), FsError> {
        let known = self.dirs.lock().get(&fh).cloned();
        let listing = match known {
            Some(l) if offset != 0 => l,
            _ => {
                let l = Arc::new(self.listing(ino)?);
                self.dirs.lock().insert(fh, l.clone());
                l
            }
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, e) in listing.entries.iter().enumerate().skip(start) {
            let attr = if plus {
                match self.fork.getattr(e.ino) {
                    Ok(a) => Some(a),
                    Err(journal::Error::NotFound) => continue,
                    Err(err) => return Err(err.into()),
                }
            } else {
                None
            };
            let item = DirItem {
                next_offset: i as u64 + 1,
                name: &e.name,
                ino: e.ino,
                kind: e.kind,
                attr,
            };
            if add(item) {
                break;
            }
        }
        Ok(())
    }

    pub fn releasedir(&self, fh: u64) {
        self.dirs.lock().remove(&fh);
    }

    // ---------------------------------------------------------------- files

    /// Open file `ino` with the `open(2)` flags: count the handle, truncate on
    /// `O_TRUNC` (the kernel normally sends that as a setattr first).
    pub fn open(&self, ino: u64, flags: i32) -> Result<Opened, FsError> {
        if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
            let attr = self.fork.getattr(ino)?;
            if attr.kind == Kind::File && attr.size != 0 {
                self.fork.setattr(
                    ino,
                    &SetAttr {
                        size: Some(0),
                        ..SetAttr::default()
                    },
                )?;
            }
        }
        self.fork.open_file(ino)?;
        Ok(opened(flags))
    }

    /// Create and open a regular file (`O_CREAT`; the kernel looked it up first).
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
        caller: Caller,
    ) -> Result<(Attr, Opened), FsError> {
        check_name(name)?;
        let node = self.new_node(parent, Kind::File, mode, umask, caller)?;
        let attr = self.fork.make(parent, name, &node, true)?;
        Ok((attr, opened(flags)))
    }

    /// Write `data` at `offset`, or at the end of the file (`append`).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], how: WriteCtx) -> Result<u32, FsError> {
        let len = u32::try_from(data.len()).map_err(|_| FsError::Invalid("write too large"))?;
        if how.direct && how.caller.uid != 0 {
            self.kill_suid_sgid(ino)?;
        }
        if how.append {
            self.fork.append(ino, data)?;
        } else {
            self.fork.write(ino, offset, data)?;
        }
        Ok(len)
    }

    /// Clear setuid, and setgid when group-executable (else it marks mandatory
    /// locking), as a write by someone without `CAP_FSETID` does.
    fn kill_suid_sgid(&self, ino: u64) -> Result<(), FsError> {
        let perm = self.fork.getattr(ino)?.perm;
        let mut new = perm & !libc::S_ISUID;
        if perm & libc::S_IXGRP != 0 {
            new &= !libc::S_ISGID;
        }
        if new != perm {
            self.fork.setattr(
                ino,
                &SetAttr {
                    perm: Some(new),
                    ..SetAttr::default()
                },
            )?;
        }
        Ok(())
    }

    /// The last handle of an unlinked file going frees it.
    pub fn release(&self, ino: u64) {
        self.fork.release(ino);
    }

    /// fsync, fdatasync, fsyncdir: returns once everything done so far is durable.
    pub fn sync(&self) -> Result<(), FsError> {
        Ok(self.fork.sync()?)
    }

    /// `fallocate(2)` with its `mode` bits.
    pub fn fallocate(&self, ino: u64, offset: u64, len: u64, mode: i32) -> Result<(), FsError> {
        let how = match mode {
            0 => Fallocate::Extend,
            libc::FALLOC_FL_KEEP_SIZE => Fallocate::KeepSize,
            m if m == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE => {
                Fallocate::PunchHole
            }
            _ => return Err(FsError::Unsupported("this fallocate mode")),
        };
        Ok(self.fork.fallocate(ino, offset, len, how)?)
    }

    // ------------------------------------------------------------ metadata

    pub fn setattr(&self, ino: u64, attrs: &SetAttr) -> Result<Attr, FsError> {
        Ok(self.fork.setattr(ino, attrs)?)
    }

    /// `setxattr(2)` with its flags (`XATTR_CREATE`, `XATTR_REPLACE`). An
    /// access ACL also sets the mode ([`Fork::setxattr_as`]); whether the
    /// caller keeps a setgid bit depends on its groups.
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        caller: Caller,
    ) -> Result<(), FsError> {
        check_xattr_name(name)?;
        let mode = match flags {
            0 => XattrMode::Any,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => return Err(FsError::Invalid("setxattr flags")),
        };
        let in_group = |gid| caller.in_group(gid);
        Ok(self.fork.setxattr_as(ino, name, value, mode, &in_group)?)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8]) -> Result<(), FsError> {
        check_xattr_name(name)?;
        Ok(self.fork.removexattr(ino, name)?)
    }

    // ------------------------------------------------------------ names

    /// `mknod(2)`: regular files, fifos, sockets and device nodes. `rdev` is
    /// the kernel's 32-bit encoding (what FUSE carries); the fork keeps the
    /// store's (userspace `dev_t`), for devices only. The kernel checks
    /// `CAP_MKNOD` before it asks. A device node cannot be opened here (the
    /// mount is `nodev`), so recording it grants nothing.
    #[allow(clippy::too_many_arguments)] // mknod(2)'s arguments plus the caller
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
        caller: Caller,
    ) -> Result<Attr, FsError> {
        check_name(name)?;
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            libc::S_IFDIR => return Err(FsError::Invalid("mknod of a directory")),
            _ => return Err(FsError::Invalid("mknod file type")),
        };
        let rdev = match kind {
            Kind::CharDev | Kind::BlockDev => user_dev(rdev),
            _ => 0,
        };
        let node = NewNode {
            rdev,
            ..self.new_node(parent, kind, mode, umask, caller)?
        };
        Ok(self.fork.make(parent, name, &node, false)?)
    }

    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        caller: Caller,
    ) -> Result<Attr, FsError> {
        check_name(name)?;
        let node = self.new_node(parent, Kind::Dir, mode, umask, caller)?;
        Ok(self.fork.make(parent, name, &node, false)?)
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        caller: Caller,
    ) -> Result<Attr, FsError> {
        check_name(name)?;
        let node = NewNode {
            target: Some(target),
            ..self.new_node(parent, Kind::Symlink, 0o777, 0, caller)?
        };
        Ok(self.fork.make(parent, name, &node, false)?)
    }

    pub fn link(&self, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Attr, FsError> {
        check_name(new_name)?;
        Ok(self.fork.link(ino, new_parent, new_name)?)
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        check_name(name)?;
        Ok(self.fork.unlink(parent, name)?)
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<(), FsError> {
        check_name(name)?;
        Ok(self.fork.rmdir(parent, name)?)
    }

    /// `renameat2(2)` with its flags: none, `RENAME_NOREPLACE` or
    /// `RENAME_EXCHANGE`; anything else (`RENAME_WHITEOUT`, combinations) is
    /// `EINVAL`.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
    ) -> Result<(), FsError> {
        check_name(name)?;
        check_name(new_name)?;
        let mode = match flags {
            0 => RenameMode::Replace,
            libc::RENAME_NOREPLACE => RenameMode::NoReplace,
            libc::RENAME_EXCHANGE => RenameMode::Exchange,
            _ => return Err(FsError::Invalid("rename flags")),
        };
        Ok(self.fork.rename(parent, name, new_parent, new_name, mode)?)
    }

    /// A new entry in `parent` as the caller asks for it: `mode` and the
    /// umask (which the fork applies unless `parent` has a default ACL), the
    /// caller as owner, the caller's group, or the directory's when it is
    /// setgid (and then a new directory is setgid too).
    fn new_node(
        &self,
        parent: u64,
        kind: Kind,
        mode: u32,
        umask: u32,
        caller: Caller,
    ) -> Result<NewNode<'static>, FsError> {
        let mut perm = mode & 0o7777;
        let dir = self.fork.getattr(parent)?;
        if dir.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let sgid = libc::S_ISGID;
        let gid = if dir.perm & sgid == 0 {
            caller.gid
        } else {
            if kind == Kind::Dir {
                perm |= sgid;
            }
            dir.gid
        };
        Ok(NewNode {
            umask,
            ..NewNode::new(kind, perm, caller.uid, gid)
        })
    }
}

fn opened(flags: i32) -> Opened {
    Opened {
        direct_io: flags & libc::O_APPEND != 0,
    }
}

/// An xattr value or name list for a buffer of `size` bytes: its size for a
/// size-0 probe, `ERANGE` when it does not fit.
fn sized(bytes: Vec<u8>, size: u32) -> Result<XattrReply, FsError> {
    let len = u32::try_from(bytes.len()).map_err(|_| FsError::BufferTooSmall {
        given: size,
        needed: bytes.len(),
    })?;
    if size == 0 {
        Ok(XattrReply::Size(len))
    } else if len > size {
        Err(FsError::BufferTooSmall {
            given: size,
            needed: bytes.len(),
        })
    } else {
        Ok(XattrReply::Data(bytes))
    }
}

/// A device number in the kernel's 32-bit `new_encode_dev` form (what FUSE's
/// `mknod` carries) as a userspace `dev_t`, the store's encoding; the inverse
/// of `readonly::kernel_dev`.
fn user_dev(kernel: u32) -> u64 {
    let major = (kernel & 0xfff00) >> 8;
    let minor = (kernel & 0xff) | ((kernel >> 12) & 0xfff00);
    libc::makedev(major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::errno;
    use crate::ingest::{self, SnapshotOptions};
    use crate::journal::ROOT_INO;
    use crate::store::{Checkpoint, Source, Store};
    use fuser::Errno;

    const ROOT: Caller = Caller {
        uid: 0,
        gid: 0,
        pid: 0,
    };
    const USER: Caller = Caller {
        uid: 1000,
        gid: 1000,
        pid: 0,
    };

    /// A fork of a checkpoint of {a, b, c, file}, served without a kernel.
    fn serve() -> (tempfile::TempDir, ForkFs) {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        for name in ["a", "b", "c", "file"] {
            std::fs::write(src.join(name), name).unwrap();
        }
        let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
        let snap = ingest::snapshot(&store, &src, &SnapshotOptions::default()).unwrap();
        let base = store
            .write_checkpoint(&Checkpoint {
                version: 1,
                root: snap.root,
                parents: vec![],
                origin: None,
                time_ns: 1,
                message: "base".into(),
                source: Source::default(),
            })
            .unwrap();
        Fork::create(&store, "t", &base).unwrap();
        let fork = Arc::new(Fork::open(store, "t").unwrap());
        (tmp, ForkFs::new(fork))
    }

    fn code(r: Result<impl std::fmt::Debug, FsError>) -> Errno {
        errno(&r.expect_err("should fail"))
    }

    fn names(fs: &ForkFs, fh: u64, offset: u64) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        fs.readdir(ROOT_INO, fh, offset, true, |item| {
            out.push((item.next_offset, item.name.to_vec()));
            false
        })
        .unwrap();
        out
    }

    #[test]
    fn xattr_buffers() {
        assert_eq!(sized(b"abc".to_vec(), 0).unwrap(), XattrReply::Size(3));
        assert_eq!(
            sized(b"abc".to_vec(), 3).unwrap(),
            XattrReply::Data(b"abc".to_vec())
        );
        assert_eq!(code(sized(b"abc".to_vec(), 2)), Errno::ERANGE);
    }

    #[test]
    fn file_handles_carry_direct_io() {
        for direct_io in [false, true] {
            let o = Opened { direct_io };
            assert_eq!(Opened::from_fh(o.fh()), o);
        }
        assert!(opened(libc::O_WRONLY | libc::O_APPEND).direct_io);
        assert!(!opened(libc::O_RDWR).direct_io);
    }

    #[test]
    fn refusals_map_to_their_errno() {
        let (_tmp, fs) = serve();
        let long = vec![b'x'; 256];
        assert_eq!(code(fs.lookup(ROOT_INO, &long)), Errno::ENAMETOOLONG);
        assert_eq!(
            code(fs.create(ROOT_INO, &long, 0o644, 0, libc::O_RDWR, ROOT)),
            Errno::ENAMETOOLONG
        );
        assert_eq!(
            code(fs.rename(ROOT_INO, b"a", ROOT_INO, &long, 0)),
            Errno::ENAMETOOLONG
        );
        assert_eq!(
            code(fs.rename(ROOT_INO, b"a", ROOT_INO, b"z", libc::RENAME_WHITEOUT)),
            Errno::EINVAL
        );
        assert_eq!(
            code(fs.rename(
                ROOT_INO,
                b"a",
                ROOT_INO,
                b"b",
                libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE
            )),
            Errno::EINVAL
        );
        assert_eq!(
            code(fs.rename(ROOT_INO, b"a", ROOT_INO, b"b", libc::RENAME_NOREPLACE)),
            Errno::EEXIST
        );
        let file = fs.lookup(ROOT_INO, b"file").unwrap().ino;
        let how = WriteCtx {
            append: false,
            direct: false,
            caller: ROOT,
        };
        // Offsets the kernel never sends, but a hostile one could.
        assert_eq!(
            code(fs.write(file, u64::MAX - 1, b"xyz", how)),
            Errno::EFBIG
        );
        assert_eq!(
            code(fs.write(file, i64::MAX as u64, b"x", how)),
            Errno::EFBIG
        );
        assert_eq!(code(fs.fallocate(file, u64::MAX, 2, 0)), Errno::EFBIG);
        assert_eq!(
            code(fs.fallocate(file, 0, 2, libc::FALLOC_FL_COLLAPSE_RANGE)),
            Errno::EOPNOTSUPP
        );
        assert_eq!(
            code(fs.setxattr(file, b"user.k", b"v", 3, ROOT)),
            Errno::EINVAL
        );
        assert_eq!(
            code(fs.setxattr(file, b"user.k", &vec![0; 64 * 1024 + 1], 0, ROOT)),
            Errno::E2BIG
        );
        assert_eq!(code(fs.getxattr(file, b"user.none", 0)), Errno::NO_XATTR);
        let dir = libc::S_IFDIR | 0o700;
        assert_eq!(
            code(fs.mknod(ROOT_INO, b"d", dir, 0, 0, ROOT)),
            Errno::EINVAL
        );
        assert_eq!(code(fs.unlink(ROOT_INO, b"missing")), Errno::ENOENT);
        assert_eq!(
            code(fs.mkdir(ROOT_INO, b"a", 0o755, 0, ROOT)),
            Errno::EEXIST
        );
        assert_eq!(code(fs.read(12345, 0, 10)), Errno::ENOENT);
        // Still serving.
        assert_eq!(fs.read(file, 0, 100).unwrap(), b"file");
    }

    #[test]
    fn xattr_names_outside_a_namespace_are_refused_as_on_ext4() {
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT_INO, b"file").unwrap().ino;
        for name in [&b"nonamespace"[..], b"bogus.k", b"User.k", b"userk"] {
            assert_eq!(
                code(fs.setxattr(file, name, b"v", 0, ROOT)),
                Errno::EOPNOTSUPP
            );
            assert_eq!(code(fs.getxattr(file, name, 0)), Errno::EOPNOTSUPP);
            assert_eq!(code(fs.removexattr(file, name)), Errno::EOPNOTSUPP);
        }
        for name in [&b"user."[..], b"trusted.", b"security."] {
            assert_eq!(code(fs.setxattr(file, name, b"v", 0, ROOT)), Errno::EINVAL);
            assert_eq!(code(fs.getxattr(file, name, 0)), Errno::EINVAL);
        }
        for name in [&b"user.k"[..], b"trusted.k", b"security.k"] {
            fs.setxattr(file, name, b"v", 0, ROOT).unwrap();
            assert_eq!(fs.getxattr(file, name, 0).unwrap(), XattrReply::Size(1));
            fs.removexattr(file, name).unwrap();
        }
    }

    #[test]
    fn listing_is_stable_while_the_directory_changes() {
        let (_tmp, fs) = serve();
        let fh = fs.opendir(ROOT_INO).unwrap();
        let all = names(&fs, fh, 0);
        let listed: Vec<&[u8]> = all.iter().map(|(_, n)| n.as_slice()).collect();
        assert_eq!(listed, [&b"."[..], b"..", b"a", b"b", b"c", b"file"]);
        // Resume after "a" once "a" is gone and "0" is new: "b" is not skipped.
        fs.unlink(ROOT_INO, b"a").unwrap();
        fs.mkdir(ROOT_INO, b"0", 0o755, 0, ROOT).unwrap();
        let rest: Vec<Vec<u8>> = names(&fs, fh, all[2].0)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        assert_eq!(rest, [b"b".to_vec(), b"c".to_vec(), b"file".to_vec()]);
        // A rewind sees the directory as it is now.
        let again: Vec<Vec<u8>> = names(&fs, fh, 0).into_iter().map(|(_, n)| n).collect();
        assert!(again.contains(&b"0".to_vec()));
        assert!(!again.contains(&b"a".to_vec()));
        fs.releasedir(fh);
    }

    #[test]
    fn new_entries_in_setgid_directories() {
        let (_tmp, fs) = serve();
        let g = fs.mkdir(ROOT_INO, b"g", 0o777, 0o022, ROOT).unwrap();
        assert_eq!(g.perm, 0o755);
        fs.setattr(
            g.ino,
            &SetAttr {
                perm: Some(0o2777),
                gid: Some(50),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let (f, _) = fs
            .create(g.ino, b"f", 0o666, 0o002, libc::O_RDWR, USER)
            .unwrap();
        assert_eq!((f.uid, f.gid, f.perm), (1000, 50, 0o664));
        let d = fs.mkdir(g.ino, b"d", 0o755, 0, USER).unwrap();
        assert_eq!((d.gid, d.perm), (50, 0o2755));
        let s = fs.symlink(g.ino, b"s", b"t", USER).unwrap();
        assert_eq!(s.gid, 50);
        let p = fs
            .mknod(ROOT_INO, b"p", libc::S_IFIFO | 0o644, 0, 0x1234, USER)
            .unwrap();
        assert_eq!((p.kind, p.gid, p.rdev), (Kind::Fifo, 1000, 0), "no rdev");
    }

    #[test]
    fn device_nodes_keep_their_numbers() {
        let (_tmp, fs) = serve();
        // Majors and minors past 8 bits use every field of the kernel's form.
        for (mode, major, minor, kind) in [
            (libc::S_IFCHR | 0o620, 1, 3, Kind::CharDev),
            (libc::S_IFBLK | 0o640, 259, 70_000, Kind::BlockDev),
            (libc::S_IFCHR | 0o600, 4095, (1 << 20) - 1, Kind::CharDev),
        ] {
            let rdev = libc::makedev(major, minor);
            let kernel = super::super::readonly::kernel_dev(rdev);
            let name = format!("dev{major}");
            let a = fs
                .mknod(ROOT_INO, name.as_bytes(), mode, 0, kernel, USER)
                .unwrap();
            assert_eq!(
                (a.kind, a.perm, a.uid, a.rdev),
                (kind, mode & 0o7777, 1000, rdev)
            );
            let back = fs.lookup(ROOT_INO, name.as_bytes()).unwrap();
            assert_eq!((back.kind, back.rdev), (kind, rdev));
            assert_eq!(super::super::readonly::kernel_dev(back.rdev), kernel);
        }
    }

    #[test]
    fn direct_writes_by_others_clear_setuid() {
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT_INO, b"file").unwrap().ino;
        let set = |perm| {
            fs.setattr(
                file,
                &SetAttr {
                    perm: Some(perm),
                    ..SetAttr::default()
                },
            )
            .unwrap()
        };
        let write = |caller, direct| {
            let how = WriteCtx {
                append: true,
                direct,
                caller,
            };
            fs.write(file, 0, b"+", how).unwrap();
            fs.getattr(file).unwrap().perm
        };
        set(0o6755);
        assert_eq!(write(ROOT, true), 0o6755, "root keeps the bits");
        assert_eq!(write(USER, false), 0o6755, "the kernel's job when cached");
        assert_eq!(write(USER, true), 0o755);
        set(0o2745);
        assert_eq!(write(USER, true), 0o2745, "setgid without group x stays");
        assert_eq!(fs.read(file, 0, 100).unwrap(), b"file++++");
    }
}
