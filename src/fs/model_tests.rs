//! The journal's model test (`journal::model_tests`) run against
//! [`ForkView`] through the [`View`] trait, as mountpoint-s3's reference
//! tests run against its file system type: the same random sequences, the
//! same reference model, compared in full after every step, but every
//! operation and every read goes through what the kernel calls. So the
//! view's own policy is checked too: the creator's umask, owner and group,
//! setgid directories (a new entry takes the directory's group, a new
//! directory its `S_ISGID`, a group-executable setgid file made by a creator
//! outside the group loses it), and open files kept by the kernel's
//! references (each entry a reply gives is one, forgotten when the
//! operation ends; an open handle keeps its lookup's until released).
//!
//! Not covered here: clearing setuid/setgid on writes (every data operation
//! is root's), the writeback cache, ACLs (the model has none).

use std::cell::RefCell;
use std::sync::Arc;

use proptest_state_machine::prop_state_machine;

use super::fork::ForkView;
use super::view::{Caller, Opened, Readdir, View, WriteCtx, XattrReply};
use super::{FsError, Result};
use crate::journal::Fork;
use crate::journal::model_tests::{
    ASKERS, Errno, ForkModel, Look, Op, P, Surface, XATTRS, config, errno as journal_errno, outcome,
};
use crate::store::Kind;
use crate::store::model::{Attr, DirEntry, Posix, ROOT_INO, SetAttr};

/// Who does what is not a creation: root, no process, no umask.
const ROOT: &Caller = &Caller {
    uid: 0,
    gid: 0,
    pid: 0,
    umask: 0,
};

/// A fork served by a [`ForkView`].
pub(crate) struct Served {
    view: ForkView,
    /// The references the kernel was given during the operation running
    /// (every entry a reply carried), forgotten when it ends.
    refs: RefCell<Vec<u64>>,
}

/// The model's outcome of a view's error.
fn errno(e: &FsError, op: &Op) -> Errno {
    match e {
        FsError::Posix(p) => outcome(p, op),
        FsError::Journal(j) => journal_errno(j, op),
        other => panic!("{op:?}: {other}"),
    }
}

/// A plain write at `offset` with the `open(2)` flags `flags`.
fn write_at(offset: u64, flags: i32) -> WriteCtx {
    WriteCtx {
        offset,
        flags,
        writeback: false,
        kill_suidgid: false,
    }
}

impl Served {
    /// An entry given to the kernel: counted until the operation ends.
    fn given(&self, attr: &Attr) -> u64 {
        self.refs.borrow_mut().push(attr.ino);
        attr.ino
    }

    fn walk(&self, p: &P) -> Result<u64> {
        let mut cur = ROOT_INO;
        for c in p.comps() {
            cur = self.given(&self.view.lookup(ROOT, cur, c)?.attr);
        }
        Ok(cur)
    }

    fn parent(&self, p: &P) -> Result<(u64, &'static [u8])> {
        let comps = p.comps();
        let (name, dir) = comps.split_last().expect("a component");
        let mut cur = ROOT_INO;
        for c in dir {
            cur = self.given(&self.view.lookup(ROOT, cur, c)?.attr);
        }
        Ok((cur, name))
    }

    fn size(&self, ino: u64) -> Result<u64> {
        Ok(self.view.getattr(ROOT, ino)?.attr.size)
    }

    fn run(&self, op: &Op, handles: &mut Vec<u64>) -> Result<()> {
        let v = &self.view;
        let asker = |a: usize| Caller {
            uid: ASKERS[a].uid,
            gid: ASKERS[a].gid,
            pid: 0,
            umask: ASKERS[a].umask,
        };
        match op {
            Op::Create(p, mode, a) => {
                let (d, n) = self.parent(p)?;
                let (e, _) = v.create(&asker(*a), d, n, *mode, libc::O_RDWR)?;
                self.given(&e.attr);
            }
            Op::Mkdir(p, mode, a) => {
                let (d, n) = self.parent(p)?;
                self.given(&v.mkdir(&asker(*a), d, n, *mode)?.attr);
            }
            Op::Symlink(p, target, a) => {
                let (d, n) = self.parent(p)?;
                // The kernel refuses an empty target itself (ENOENT); the
                // view never sees one. (The model finds the parent's
                // components first, as the fork does.)
                if target.is_empty() {
                    return Err(Posix::NotFound.into());
                }
                self.given(&v.symlink(&asker(*a), d, n, target)?.attr);
            }
            Op::Write(p, off, b) => {
                let ino = self.walk(p)?;
                let n = v.write(ROOT, ino, &b.make(), write_at(*off, libc::O_WRONLY))?;
                assert_eq!(n as usize, b.len, "{op:?}: bytes written");
            }
            Op::Append(p, b) => {
                let ino = self.walk(p)?;
                let size = self.size(ino)?;
                let flags = libc::O_WRONLY | libc::O_APPEND;
                v.write(ROOT, ino, &b.make(), write_at(0, flags))?;
                let want = size + b.len as u64;
                assert_eq!(self.size(ino)?, want, "{op:?}: appended at the end");
            }
            Op::Truncate(p, size) => {
                let ino = self.walk(p)?;
                let set = SetAttr {
                    size: Some(*size),
                    ..SetAttr::default()
                };
                assert_eq!(v.setattr(ROOT, ino, &set)?.attr.size, *size, "{op:?}");
            }
            Op::Fallocate(p, off, len, how) => {
                let ino = self.walk(p)?;
                v.fallocate(ROOT, ino, *off, *len, *how)?;
            }
            Op::Copy(from, from_off, to, to_off, len) => {
                let (a, b) = (self.walk(from)?, self.walk(to)?);
                let size = self.size(a)?;
                let n = v.copy_file_range(ROOT, (a, *from_off), (b, *to_off), *len)?;
                let want = size.saturating_sub(*from_off).min(*len);
                assert_eq!(n, want, "{op:?}: bytes copied");
            }
            Op::Unlink(p) => {
                let (d, n) = self.parent(p)?;
                v.unlink(ROOT, d, n)?;
            }
            Op::Rmdir(p) => {
                let (d, n) = self.parent(p)?;
                v.rmdir(ROOT, d, n)?;
            }
            Op::Rename(from, to, mode) => {
                let (d, n) = self.parent(from)?;
                let (e, m) = self.parent(to)?;
                v.rename(ROOT, d, n, e, m, *mode)?;
            }
            Op::Link(from, to) => {
                let ino = self.walk(from)?;
                let (e, m) = self.parent(to)?;
                self.given(&v.link(ROOT, ino, e, m)?.attr);
            }
            Op::Chmod(p, perm) => {
                let ino = self.walk(p)?;
                let set = SetAttr {
                    perm: Some(*perm),
                    ..SetAttr::default()
                };
                v.setattr(ROOT, ino, &set)?;
            }
            Op::SetXattr(p, x, value, mode) => {
                let ino = self.walk(p)?;
                v.setxattr(ROOT, ino, XATTRS[x % XATTRS.len()], &value.make(), *mode)?;
            }
            Op::SetFlags(p, flags) => {
                let ino = self.walk(p)?;
                v.set_flags(ROOT, ino, *flags)?;
            }
            Op::RemoveXattr(p, x) => {
                let ino = self.walk(p)?;
                v.removexattr(ROOT, ino, XATTRS[x % XATTRS.len()])?;
            }
            // The kernel keeps the reference its lookup gave while the
            // file is open, and forgets it on the last close.
            Op::Open(p) => {
                let ino = self.walk(p)?;
                let carries_nothing = Opened::Handle {
                    fh: 0,
                    keep_cache: true,
                };
                assert_eq!(v.open(ROOT, ino, libc::O_RDWR)?, carries_nothing);
                if v.getattr(ROOT, ino)?.attr.kind == Kind::File {
                    let mut refs = self.refs.borrow_mut();
                    let i = refs.iter().rposition(|&r| r == ino).expect("looked up");
                    refs.remove(i);
                    handles.push(ino);
                }
            }
            Op::WriteHandle(h, off, b) => {
                let ino = handles[h % handles.len()];
                v.write(ROOT, ino, &b.make(), write_at(*off, libc::O_RDWR))?;
            }
            Op::Release(h) => {
                let ino = handles.remove(h % handles.len());
                v.forget(ino, 1);
            }
            Op::Sync | Op::Commit | Op::Reopen | Op::Crash | Op::CrashInCommit(_) => {
                unreachable!("{op:?} is the fork's")
            }
        }
        Ok(())
    }
}

impl Surface for Served {
    const SETGID_DIRS: bool = true;

    fn serve(fork: Arc<Fork>) -> Served {
        Served {
            view: ForkView::new(fork),
            refs: RefCell::new(Vec::new()),
        }
    }

    /// The operation, then the kernel forgets what it was given.
    fn op(&self, op: &Op, handles: &mut Vec<u64>) -> std::result::Result<(), Errno> {
        let r = self.run(op, handles);
        for ino in self.refs.take() {
            self.view.forget(ino, 1);
        }
        r.map_err(|e| errno(&e, op))
    }
}

impl Look for Served {
    fn getattr(&self, ino: u64) -> Attr {
        self.view.getattr(ROOT, ino).unwrap().attr
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> u64 {
        let ino = self.view.lookup(ROOT, dir, name).unwrap().attr.ino;
        self.view.forget(ino, 1);
        ino
    }

    /// Through a directory handle, without attributes.
    fn readdir(&self, ino: u64) -> Vec<DirEntry> {
        let Opened::Handle { fh, .. } = self.view.opendir(ROOT, ino).unwrap() else {
            panic!("a fork's opendir gives a handle");
        };
        let mut out = Vec::new();
        let at = Readdir {
            fh,
            offset: 0,
            plus: false,
        };
        self.view
            .readdir(ROOT, ino, at, &mut |item| {
                if item.name != b"." && item.name != b".." {
                    out.push(DirEntry {
                        name: item.name.to_vec(),
                        ino: item.ino,
                        kind: item.kind,
                    });
                }
                false
            })
            .unwrap();
        self.view.releasedir(ROOT, fh);
        out
    }

    fn read(&self, ino: u64, offset: u64, size: u32) -> Vec<u8> {
        self.view.read(ROOT, ino, offset, size).unwrap()
    }

    fn readlink(&self, ino: u64) -> Vec<u8> {
        self.view.readlink(ROOT, ino).unwrap()
    }

    /// A size probe, then the names.
    fn listxattr(&self, ino: u64) -> Vec<Vec<u8>> {
        let list = match self.view.listxattr(ROOT, ino, 0).unwrap() {
            XattrReply::Size(0) => return Vec::new(),
            XattrReply::Size(n) => self.view.listxattr(ROOT, ino, n).unwrap(),
            XattrReply::Data(_) => panic!("a size probe answered data"),
        };
        let XattrReply::Data(list) = list else {
            panic!("no names")
        };
        let names = list.strip_suffix(b"\0").expect("NUL-terminated");
        names.split(|&b| b == 0).map(<[u8]>::to_vec).collect()
    }

    fn flags(&self, ino: u64) -> u32 {
        self.view.get_flags(ROOT, ino).unwrap()
    }

    /// A size probe, then the value.
    fn getxattr(&self, ino: u64, name: &[u8]) -> Vec<u8> {
        match self.view.getxattr(ROOT, ino, name, 0).unwrap() {
            XattrReply::Size(0) => Vec::new(),
            XattrReply::Size(n) => match self.view.getxattr(ROOT, ino, name, n).unwrap() {
                XattrReply::Data(v) => v,
                XattrReply::Size(_) => panic!("a value asked for answered its size"),
            },
            XattrReply::Data(_) => panic!("a size probe answered data"),
        }
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    #[test]
    fn fork_view_against_model(sequential 1..50 => ForkModel<Served, false>);
}
