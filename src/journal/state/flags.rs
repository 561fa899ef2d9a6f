//! Inode flags (`chattr`, `lsattr`): the `SetFlags` record, and what an
//! immutable (`+i`) or append-only (`+a`) inode refuses, as the kernel's VFS
//! and ext4 refuse it (`may_open`, `may_delete`, `vfs_link`, `notify_change`,
//! `do_truncate`, `vfs_fallocate`, `xattr_permission`,
//! `ext4_ioctl_check_immutable`).
//!
//! The kernel makes those checks from the inode's `i_flags`, which FUSE
//! never sets from the daemon's attributes, so the fork makes them here: each
//! live record is asked of [`ForkState::guard`] before it is appended
//! ([`ForkState::log`]), and the live operations whose record alone does not
//! say what the caller asked (a setattr's times, a fallocate's mode, a write's
//! offset) check first ([`ForkState::guard_setattr`],
//! [`ForkState::guard_fallocate`], [`ForkState::guard_write`]). An open makes
//! no record; the mount asks [`ForkState::guard_open`] (`may_open`) at each
//! `FUSE_OPEN`. Replay does
//! not check again: a record in the journal passed when it was made, and
//! the flags it met are the ones a replay rebuilds.
//!
//! Who may set which flag (`CAP_LINUX_IMMUTABLE` for `+i`/`+a`, the owner
//! for the others) is the mount's to decide (`fs/fork.rs`): the journal
//! does not know the caller.

use super::super::Result;
use super::super::record::{RENAME_EXCHANGE, Record};
use super::{Ctx, ForkState, Log, now_ns};
use crate::store::model::flags::{APPEND, IMMUTABLE, KEPT};
use crate::store::model::{Fallocate, Posix, SetAttr, Time};

/// Refused by an immutable inode.
const I: u32 = IMMUTABLE;
/// Refused by an immutable or an append-only inode.
const IA: u32 = IMMUTABLE | APPEND;

impl ForkState {
    // ------------------------------------------------------------ live ops

    /// The flags of inode `ino`.
    pub fn flags(&self, ino: u64) -> Result<u32> {
        Ok(self.inode(ino)?.flags)
    }

    /// Set the flags of `ino` to `flags` (`FS_IOC_SETFLAGS`): any outside
    /// [`KEPT`] is `EOPNOTSUPP`. Unchanged flags still change the ctime, as
    /// on ext4.
    pub fn set_flags(&mut self, ctx: &Ctx<'_>, ino: u64, flags: u32) -> Result<()> {
        self.log(
            ctx,
            Record::SetFlags {
                ino,
                flags,
                time_ns: now_ns(),
            },
        )
    }

    // ------------------------------------------------------------ checks

    /// What inode `ino`'s flags refuse of `mask`: [`Posix::Immutable`] or
    /// [`Posix::AppendOnly`]. An inode not in the table refuses nothing
    /// here (the record's own checks answer for it).
    fn refuse(&self, ino: u64, mask: u32) -> Result<()> {
        let flags = self.inodes.get(&ino).map_or(0, |n| n.flags) & mask;
        if flags & IMMUTABLE != 0 {
            return Err(Posix::Immutable.into());
        }
        if flags & APPEND != 0 {
            return Err(Posix::AppendOnly.into());
        }
        Ok(())
    }

    /// Whether the flags let live record `rec` be made. Names: a directory
    /// flagged immutable gets no new name and loses none, one flagged
    /// append-only gets new names but loses none; an immutable or
    /// append-only inode is not removed, renamed or linked. Data: an
    /// immutable file is not written; an append-only one only past its end.
    /// Attributes and xattrs: neither changes.
    pub(super) fn guard(&self, rec: &Record) -> Result<()> {
        match rec {
            Record::Create { parent, .. } => self.refuse(*parent, I),
            // O_TMPFILE in an immutable directory: EPERM, as the kernel's
            // write permission check of the directory on ext4.
            Record::Tmpfile { parent, .. } => self.refuse(*parent, I),
            Record::RenameWhiteout {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                ..
            }
            | Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                ..
            } => self.guard_rename(*parent, name, *new_parent, new_name, *flags),
            Record::Link { ino, parent, .. } => {
                self.refuse(*ino, IA)?;
                self.refuse(*parent, I)
            }
            Record::Unlink { parent, name, .. } => {
                self.refuse(*parent, IA)?;
                match self.child(*parent, name) {
                    Some(victim) => self.refuse(victim, IA),
                    None => Ok(()),
                }
            }
            Record::Write { ino, offset, .. } => self.guard_write(*ino, *offset),
            Record::Share { ino, offset, .. } => self.guard_write(*ino, *offset),
            Record::Truncate { ino, size, .. } => {
                self.refuse(*ino, I)?;
                let shrinks = self.inode(*ino)?.file().is_ok_and(|f| *size < f.size);
                if shrinks {
                    self.refuse(*ino, IA)?;
                }
                Ok(())
            }
            // What a setattr may change of an append-only inode depends on
            // what was asked: `guard_setattr`.
            // An access's atime alone (its ctime kept, `touch_atime`): Linux
            // updates the atime of an immutable file too (`touch_atime` does
            // not go through `notify_change`).
            Record::SetAttr {
                ino,
                perm: None,
                uid: None,
                gid: None,
                atime: Some(_),
                mtime: None,
                ctime,
            } if self.inode(*ino)?.ctime == *ctime => Ok(()),
            Record::SetAttr { ino, .. } => self.refuse(*ino, I),
            Record::PunchHole { ino, .. }
            | Record::SetXattr { ino, .. }
            | Record::RemoveXattr { ino, .. } => self.refuse(*ino, IA),
            // The flags themselves: `record_set_flags` checks.
            Record::SetFlags { .. } => Ok(()),
            Record::LoadDir { .. } | Record::InodeMap(_) | Record::Atimes(_) | Record::Who(_) => {
                Ok(())
            }
        }
    }

    /// A rename's checks (and a whiteout rename's: the whiteout takes the
    /// name the directory loses, so an append-only one still refuses it):
    /// neither directory nor the moved entry immutable or append-only, but
    /// an append-only target directory takes a new name unless it loses one
    /// (a replaced entry, or one exchanged away).
    fn guard_rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
    ) -> Result<()> {
        self.refuse(parent, IA)?;
        if let Some(moved) = self.child(parent, name) {
            self.refuse(moved, IA)?;
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        let replaced = self.child(new_parent, new_name);
        let lost = if replaced.is_some() || exchange {
            IA
        } else {
            I
        };
        self.refuse(new_parent, lost)?;
        match replaced {
            Some(other) => self.refuse(other, IA),
            None => Ok(()),
        }
    }

    /// A write at `offset` of `ino`: none to an immutable file, and to an
    /// append-only one only at or past its end (an `O_APPEND` write lands
    /// there; a write that would change bytes it has is refused).
    pub(super) fn guard_write(&self, ino: u64, offset: u64) -> Result<()> {
        self.refuse(ino, I)?;
        let Some(n) = self.inodes.get(&ino) else {
            return Ok(());
        };
        if n.flags & APPEND != 0 && n.file().is_ok_and(|f| offset < f.size) {
            return Err(Posix::AppendOnly.into());
        }
        Ok(())
    }

    /// A setattr of `ino` (`notify_change`, `do_truncate`): nothing on an
    /// immutable inode; on an append-only one, no mode, owner, size or
    /// explicit time, but times set to now (`touch`) are allowed. One
    /// exception: under the writeback cache the kernel sends its own mtime
    /// after writes (with a ctime, `SetAttr::ctime`), which cannot be told
    /// from `utimensat`'s, so an explicit mtime with the kernel's ctime is
    /// let through on an append-only file.
    pub(super) fn guard_setattr(&self, ino: u64, a: &SetAttr) -> Result<()> {
        self.refuse(ino, I)?;
        let explicit = |t: Option<Time>| matches!(t, Some(Time::At(_)));
        if a.perm.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.size.is_some()
            || explicit(a.atime)
            || (explicit(a.mtime) && a.ctime.is_none())
        {
            self.refuse(ino, IA)?;
        }
        Ok(())
    }

    /// An `open(2)` of file `ino` with the `open(2)` `flags` (the VFS's
    /// `may_open`, as on ext4): an immutable file opens only for reading
    /// and without `O_TRUNC` (write access is `inode_permission`'s
    /// `EPERM`); an append-only one opens for writing only with `O_APPEND`,
    /// and never with `O_TRUNC`. Reading opens of either are let through.
    pub fn guard_open(&self, ino: u64, flags: i32) -> Result<()> {
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncates = flags & libc::O_TRUNC != 0;
        if writes || truncates {
            self.refuse(ino, I)?;
        }
        if truncates || (writes && flags & libc::O_APPEND == 0) {
            self.refuse(ino, IA)?;
        }
        Ok(())
    }

    /// A fallocate of `ino` (`vfs_fallocate`): none on an immutable file;
    /// on an append-only one only the plain allocations (mode 0 and
    /// `FALLOC_FL_KEEP_SIZE`), never a punch or a zeroed range.
    pub(super) fn guard_fallocate(&self, ino: u64, mode: Fallocate) -> Result<()> {
        self.refuse(ino, I)?;
        match mode {
            Fallocate::Extend | Fallocate::KeepSize => Ok(()),
            _ => self.refuse(ino, IA),
        }
    }

    // ------------------------------------------------------------ records

    /// `SetFlags`: the flags of `ino` become `flags`. Only [`KEPT`] flags;
    /// an immutable inode changes no other flag while it stays immutable
    /// (`ext4_ioctl_check_immutable`).
    pub(super) fn record_set_flags(
        &mut self,
        ino: u64,
        flags: u32,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        let old = self.inode(ino)?.flags;
        if flags & !KEPT != 0 {
            return Err(Posix::Unsupported("this inode flag (storefs keeps i, a, d and A)").into());
        }
        if old & flags & IMMUTABLE != 0 && old != flags {
            return Err(Posix::Immutable.into());
        }
        log.append()?;
        let n = self.inode_mut(ino);
        n.flags = flags;
        n.touch_meta(t);
        Ok(())
    }
}
