//! Attributes: setattr (chmod, chown, utimens, and truncate through a size),
//! extended attributes, and the access ACL that follows a chmod.
//!
//! Each record of this family (`SetAttr`, `SetXattr`, `RemoveXattr`) is one
//! `record_*` function: its checks, then [`Log::append`], then its effect.

use super::super::Result;
use super::super::record::{Record, XATTR_CREATE, XATTR_REPLACE};
use super::{Ctx, ForkState, Log, now_ns};
use crate::store::acl;
use crate::store::model::{NAME_MAX, Posix, SetAttr, Time, XATTR_SIZE_MAX, XattrMode};

/// What `SetAttr` changes; `None` fields are left alone.
pub(super) struct AttrChange {
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<i64>,
    pub mtime: Option<i64>,
}

impl ForkState {
    // ------------------------------------------------------------ live ops

    pub fn setattr(&mut self, ctx: &Ctx<'_>, ino: u64, a: &SetAttr) -> Result<()> {
        self.guard_setattr(ino, a)?;
        let t = now_ns();
        if let Some(size) = a.size {
            self.log(
                ctx,
                Record::Truncate {
                    ino,
                    size,
                    time_ns: t,
                },
            )?;
        }
        let time = |x: Option<Time>| {
            x.map(|v| match v {
                Time::Now => t,
                Time::At(ns) => ns,
            })
        };
        if a.perm.is_some()
            || a.uid.is_some()
            || a.gid.is_some()
            || a.atime.is_some()
            || a.mtime.is_some()
            || a.ctime.is_some()
        {
            self.log(
                ctx,
                Record::SetAttr {
                    ino,
                    perm: a.perm,
                    uid: a.uid,
                    gid: a.gid,
                    atime: time(a.atime),
                    mtime: time(a.mtime),
                    ctime: a.ctime.unwrap_or(t),
                },
            )?;
        }
        if let Some(perm) = a.perm {
            self.chmod_acl(ctx, ino, perm, t)?;
        }
        Ok(())
    }

    /// After a chmod: an access ACL's owner, mask (or group) and other
    /// entries follow the new mode, as on ext4 ([`acl::Acl::chmod`]).
    fn chmod_acl(&mut self, ctx: &Ctx<'_>, ino: u64, perm: u32, t: i64) -> Result<()> {
        let Some(old) = self.inode(ino)?.xattrs.get(acl::ACCESS) else {
            return Ok(());
        };
        let Some(mut a) = acl::Acl::parse(old) else {
            return Ok(()); // not an ACL ext4 would have kept; left as it is
        };
        a.chmod(perm);
        let value = a.encode();
        if value == *old {
            return Ok(());
        }
        self.log(
            ctx,
            Record::SetXattr {
                ino,
                name: acl::ACCESS.to_vec(),
                value,
                flags: 0,
                time_ns: t,
            },
        )
    }

    pub fn setxattr(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        let flags = match mode {
            XattrMode::Any => 0,
            XattrMode::Create => XATTR_CREATE,
            XattrMode::Replace => XATTR_REPLACE,
        };
        self.log(
            ctx,
            Record::SetXattr {
                ino,
                name: name.to_vec(),
                value: value.to_vec(),
                flags,
                time_ns: now_ns(),
            },
        )
    }

    pub fn removexattr(&mut self, ctx: &Ctx<'_>, ino: u64, name: &[u8]) -> Result<()> {
        self.log(
            ctx,
            Record::RemoveXattr {
                ino,
                name: name.to_vec(),
                time_ns: now_ns(),
            },
        )
    }

    // ------------------------------------------------------------ records

    /// `SetAttr`: chmod/chown/utimens of `ino`; its ctime becomes `ctime`.
    pub(super) fn record_setattr(
        &mut self,
        ino: u64,
        c: AttrChange,
        ctime: i64,
        log: Log<'_>,
    ) -> Result<()> {
        self.inode(ino)?;
        log.append()?;
        let n = self.inode_mut(ino);
        if let Some(p) = c.perm {
            n.perm = p & 0o7777;
        }
        if let Some(u) = c.uid {
            n.uid = u;
        }
        if let Some(g) = c.gid {
            n.gid = g;
        }
        if let Some(a) = c.atime {
            n.atime = a;
        }
        if let Some(m) = c.mtime {
            n.mtime = m;
        }
        n.touch_meta(ctime);
        Ok(())
    }

    /// `SetXattr`: set `name` of `ino` to `value`, with setxattr(2)'s flags.
    pub(super) fn record_setxattr(
        &mut self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        let n = self.inode(ino)?;
        if name.is_empty() || name.len() > NAME_MAX {
            return Err(Posix::Invalid("bad xattr name").into());
        }
        if value.len() > XATTR_SIZE_MAX {
            return Err(Posix::TooBig.into());
        }
        let exists = n.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(Posix::XattrExists.into());
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(Posix::NoXattr.into());
        }
        log.append()?;
        let n = self.inode_mut(ino);
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.touch_meta(t);
        Ok(())
    }

    /// `RemoveXattr`: remove `name` of `ino`.
    pub(super) fn record_remove_xattr(
        &mut self,
        ino: u64,
        name: &[u8],
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        if !self.inode(ino)?.xattrs.contains_key(name) {
            return Err(Posix::NoXattr.into());
        }
        log.append()?;
        let n = self.inode_mut(ino);
        n.xattrs.remove(name);
        n.touch_meta(t);
        Ok(())
    }
}
