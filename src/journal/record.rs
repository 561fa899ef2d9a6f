//! Journal records: the binary encoding of every state change of a fork, and
//! the frame that makes a torn write detectable.
//!
//! ```text
//! frame   := u32le(len) u32le(crc32(payload)) payload        1 <= len <= MAX_PAYLOAD
//! payload := u8(tag) fields…                                 integers as LEB128 varints,
//!                                                            times as i64le, bytes as varint len + bytes
//! ```
//! A `Write` record puts its data last, so the data of a record whose payload
//! starts at file offset `p` and is `len` long sits at `p + len - data.len()`:
//! the fork state points at it there instead of keeping it in memory.
//! Decoding never panics on hostile bytes (it returns `None`).

use crate::store::Kind;

/// Largest data carried by one `Write` record; larger writes are split.
pub const MAX_WRITE_DATA: usize = 1 << 20;
/// Largest payload a frame may announce (a `Write` plus its header, or an
/// `InodeMap` of a big tree). A larger length is treated as a torn frame.
pub const MAX_PAYLOAD: u32 = 256 << 20;
/// Bytes before the payload in a frame.
pub const FRAME_HEADER: usize = 8;

/// `Rename` flags.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;

/// `SetXattr` flags (as in setxattr(2)).
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;

/// One state change. Inodes are named by the fork's inode numbers, which are
/// assigned deterministically (see `state.rs`), so replay reproduces them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Base directory `dir` was loaded; its children got inode numbers from `first_ino`.
    LoadDir { dir: u64, first_ino: u64 },
    /// A new inode `ino` named `name` in `parent` (file, dir, symlink with `target`, special).
    Create {
        parent: u64,
        name: Vec<u8>,
        ino: u64,
        kind: Kind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        time_ns: i64,
        target: Option<Vec<u8>>,
    },
    /// A new name for existing inode `ino`.
    Link {
        ino: u64,
        parent: u64,
        name: Vec<u8>,
        time_ns: i64,
    },
    /// Remove a name (unlink or rmdir).
    Unlink {
        parent: u64,
        name: Vec<u8>,
        time_ns: i64,
    },
    /// rename(2) / renameat2(2) with `RENAME_*` flags.
    Rename {
        parent: u64,
        name: Vec<u8>,
        new_parent: u64,
        new_name: Vec<u8>,
        flags: u32,
        time_ns: i64,
    },
    /// `data` at `offset` of file `ino`.
    Write {
        ino: u64,
        offset: u64,
        time_ns: i64,
        data: Vec<u8>,
    },
    /// Set the size of file `ino` (shrink drops data, grow adds a hole).
    Truncate { ino: u64, size: u64, time_ns: i64 },
    /// Zero `len` bytes at `offset` without changing the size (they become a hole).
    PunchHole {
        ino: u64,
        offset: u64,
        len: u64,
        time_ns: i64,
    },
    /// chmod/chown/utimens; `ctime` is always set.
    SetAttr {
        ino: u64,
        perm: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        ctime: i64,
    },
    SetXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
        time_ns: i64,
    },
    RemoveXattr {
        ino: u64,
        name: Vec<u8>,
        time_ns: i64,
    },
    /// First record of a segment started by a commit: how the live inode
    /// numbers map onto the committed tree (see `state::ForkState::inode_map`).
    InodeMap(InodeMap),
}

/// A directory's children: (name, ino) in name order.
pub type Children = Vec<(Vec<u8>, u64)>;

/// The live inode numbering at a commit, so a replay that starts from the
/// committed checkpoint can give every inode the number later records use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InodeMap {
    pub next_ino: u64,
    /// Loaded directories, parents before children (the root, 1, first), each
    /// with all its children's (name, ino) in name order.
    pub dirs: Vec<(u64, Children)>,
    /// Base hardlink ids already given an inode: (link_id, ino).
    pub links: Vec<(u64, u64)>,
    /// Files unlinked while open (no name; kept until released).
    pub orphans: Vec<u64>,
}

const T_LOADDIR: u8 = 1;
const T_CREATE: u8 = 2;
const T_LINK: u8 = 3;
const T_UNLINK: u8 = 4;
const T_RENAME: u8 = 5;
const T_WRITE: u8 = 6;
const T_TRUNCATE: u8 = 7;
const T_PUNCH: u8 = 8;
const T_SETATTR: u8 = 9;
const T_SETXATTR: u8 = 10;
const T_RMXATTR: u8 = 11;
const T_INODEMAP: u8 = 12;

impl Record {
    /// The payload bytes (without the frame).
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(64);
        match self {
            Record::LoadDir { dir, first_ino } => {
                o.push(T_LOADDIR);
                var(&mut o, *dir);
                var(&mut o, *first_ino);
            }
            Record::Create {
                parent,
                name,
                ino,
                kind,
                perm,
                uid,
                gid,
                rdev,
                time_ns,
                target,
            } => {
                o.push(T_CREATE);
                var(&mut o, *parent);
                bytes(&mut o, name);
                var(&mut o, *ino);
                o.push(*kind as u8);
                var(&mut o, u64::from(*perm));
                var(&mut o, u64::from(*uid));
                var(&mut o, u64::from(*gid));
                var(&mut o, *rdev);
                o.extend_from_slice(&time_ns.to_le_bytes());
                match target {
                    None => o.push(0),
                    Some(t) => {
                        o.push(1);
                        bytes(&mut o, t);
                    }
                }
            }
            Record::Link {
                ino,
                parent,
                name,
                time_ns,
            } => {
                o.push(T_LINK);
                var(&mut o, *ino);
                var(&mut o, *parent);
                bytes(&mut o, name);
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::Unlink {
                parent,
                name,
                time_ns,
            } => {
                o.push(T_UNLINK);
                var(&mut o, *parent);
                bytes(&mut o, name);
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                time_ns,
            } => {
                o.push(T_RENAME);
                var(&mut o, *parent);
                bytes(&mut o, name);
                var(&mut o, *new_parent);
                bytes(&mut o, new_name);
                var(&mut o, u64::from(*flags));
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::Write {
                ino,
                offset,
                time_ns,
                data,
            } => {
                o = write_head(*ino, *offset, *time_ns, data.len());
                // Data last: its position in the file is derivable (module docs).
                o.extend_from_slice(data);
            }
            Record::Truncate { ino, size, time_ns } => {
                o.push(T_TRUNCATE);
                var(&mut o, *ino);
                var(&mut o, *size);
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::PunchHole {
                ino,
                offset,
                len,
                time_ns,
            } => {
                o.push(T_PUNCH);
                var(&mut o, *ino);
                var(&mut o, *offset);
                var(&mut o, *len);
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::SetAttr {
                ino,
                perm,
                uid,
                gid,
                atime,
                mtime,
                ctime,
            } => {
                o.push(T_SETATTR);
                var(&mut o, *ino);
                let mut mask = 0u8;
                for (bit, set) in [
                    perm.is_some(),
                    uid.is_some(),
                    gid.is_some(),
                    atime.is_some(),
                    mtime.is_some(),
                ]
                .into_iter()
                .enumerate()
                {
                    if set {
                        mask |= 1 << bit;
                    }
                }
                o.push(mask);
                for v in [perm, uid, gid].into_iter().flatten() {
                    var(&mut o, u64::from(*v));
                }
                for t in [atime, mtime].into_iter().flatten() {
                    o.extend_from_slice(&t.to_le_bytes());
                }
                o.extend_from_slice(&ctime.to_le_bytes());
            }
            Record::SetXattr {
                ino,
                name,
                value,
                flags,
                time_ns,
            } => {
                o.push(T_SETXATTR);
                var(&mut o, *ino);
                bytes(&mut o, name);
                bytes(&mut o, value);
                var(&mut o, u64::from(*flags));
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::RemoveXattr { ino, name, time_ns } => {
                o.push(T_RMXATTR);
                var(&mut o, *ino);
                bytes(&mut o, name);
                o.extend_from_slice(&time_ns.to_le_bytes());
            }
            Record::InodeMap(m) => {
                o.push(T_INODEMAP);
                var(&mut o, m.next_ino);
                var(&mut o, m.dirs.len() as u64);
                for (dir, kids) in &m.dirs {
                    var(&mut o, *dir);
                    var(&mut o, kids.len() as u64);
                    for (name, ino) in kids {
                        bytes(&mut o, name);
                        var(&mut o, *ino);
                    }
                }
                var(&mut o, m.links.len() as u64);
                for (l, i) in &m.links {
                    var(&mut o, *l);
                    var(&mut o, *i);
                }
                var(&mut o, m.orphans.len() as u64);
                for i in &m.orphans {
                    var(&mut o, *i);
                }
            }
        }
        o
    }

    /// Decode a payload; `None` when it is not a well-formed record.
    pub fn decode(p: &[u8]) -> Option<Record> {
        let mut r = Rd { d: p, pos: 0 };
        let rec = match r.u8()? {
            T_LOADDIR => Record::LoadDir {
                dir: r.var()?,
                first_ino: r.var()?,
            },
            T_CREATE => Record::Create {
                parent: r.var()?,
                name: r.bytes()?,
                ino: r.var()?,
                kind: kind_from(r.u8()?)?,
                perm: r.var32()?,
                uid: r.var32()?,
                gid: r.var32()?,
                rdev: r.var()?,
                time_ns: r.i64()?,
                target: match r.u8()? {
                    0 => None,
                    1 => Some(r.bytes()?),
                    _ => return None,
                },
            },
            T_LINK => Record::Link {
                ino: r.var()?,
                parent: r.var()?,
                name: r.bytes()?,
                time_ns: r.i64()?,
            },
            T_UNLINK => Record::Unlink {
                parent: r.var()?,
                name: r.bytes()?,
                time_ns: r.i64()?,
            },
            T_RENAME => Record::Rename {
                parent: r.var()?,
                name: r.bytes()?,
                new_parent: r.var()?,
                new_name: r.bytes()?,
                flags: r.var32()?,
                time_ns: r.i64()?,
            },
            T_WRITE => Record::Write {
                ino: r.var()?,
                offset: r.var()?,
                time_ns: r.i64()?,
                data: r.bytes()?,
            },
            T_TRUNCATE => Record::Truncate {
                ino: r.var()?,
                size: r.var()?,
                time_ns: r.i64()?,
            },
            T_PUNCH => Record::PunchHole {
                ino: r.var()?,
                offset: r.var()?,
                len: r.var()?,
                time_ns: r.i64()?,
            },
            T_SETATTR => {
                let ino = r.var()?;
                let mask = r.u8()?;
                if mask >= 1 << 5 {
                    return None;
                }
                let has = |b: u8| mask & (1 << b) != 0;
                let perm = if has(0) { Some(r.var32()?) } else { None };
                let uid = if has(1) { Some(r.var32()?) } else { None };
                let gid = if has(2) { Some(r.var32()?) } else { None };
                let atime = if has(3) { Some(r.i64()?) } else { None };
                let mtime = if has(4) { Some(r.i64()?) } else { None };
                Record::SetAttr {
                    ino,
                    perm,
                    uid,
                    gid,
                    atime,
                    mtime,
                    ctime: r.i64()?,
                }
            }
            T_SETXATTR => Record::SetXattr {
                ino: r.var()?,
                name: r.bytes()?,
                value: r.bytes()?,
                flags: r.var32()?,
                time_ns: r.i64()?,
            },
            T_RMXATTR => Record::RemoveXattr {
                ino: r.var()?,
                name: r.bytes()?,
                time_ns: r.i64()?,
            },
            T_INODEMAP => {
                let next_ino = r.var()?;
                let nd = r.count()?;
                let mut dirs = Vec::with_capacity(nd);
                for _ in 0..nd {
                    let dir = r.var()?;
                    let nk = r.count()?;
                    let mut kids = Vec::with_capacity(nk);
                    for _ in 0..nk {
                        kids.push((r.bytes()?, r.var()?));
                    }
                    dirs.push((dir, kids));
                }
                let nl = r.count()?;
                let mut links = Vec::with_capacity(nl);
                for _ in 0..nl {
                    links.push((r.var()?, r.var()?));
                }
                let no = r.count()?;
                let mut orphans = Vec::with_capacity(no);
                for _ in 0..no {
                    orphans.push(r.var()?);
                }
                Record::InodeMap(InodeMap {
                    next_ino,
                    dirs,
                    links,
                    orphans,
                })
            }
            _ => return None,
        };
        (r.pos == p.len()).then_some(rec)
    }
}

/// The payload of `Record::Write { ino, offset, time_ns, data }` up to its
/// data, for a `data` of `len` bytes: the payload is this followed by the data
/// (so the journal can append the data from the caller's buffer).
pub fn write_head(ino: u64, offset: u64, time_ns: i64, len: usize) -> Vec<u8> {
    let mut o = Vec::with_capacity(32);
    o.push(T_WRITE);
    var(&mut o, ino);
    var(&mut o, offset);
    o.extend_from_slice(&time_ns.to_le_bytes());
    var(&mut o, len as u64);
    o
}

/// Wrap a payload in a frame (length, crc32, payload).
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = frame_head(&[payload]).to_vec();
    out.extend_from_slice(payload);
    out
}

/// The frame header (length, crc32) of the payload that is `parts` back to
/// back, for writing a frame from several buffers without joining them.
pub fn frame_head(parts: &[&[u8]]) -> [u8; FRAME_HEADER] {
    let mut crc = crc32fast::Hasher::new();
    let mut len = 0usize;
    for p in parts {
        crc.update(p);
        len += p.len();
    }
    let mut h = [0u8; FRAME_HEADER];
    h[..4].copy_from_slice(&(len as u32).to_le_bytes());
    h[4..].copy_from_slice(&crc.finalize().to_le_bytes());
    h
}

/// Parse a frame header: the announced payload length and crc, or `None` when
/// the length is impossible (0, or larger than [`MAX_PAYLOAD`]).
pub fn frame_header(h: &[u8; FRAME_HEADER]) -> Option<(u32, u32)> {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    (1..=MAX_PAYLOAD).contains(&len).then_some((len, crc))
}

fn kind_from(v: u8) -> Option<Kind> {
    Some(match v {
        1 => Kind::File,
        2 => Kind::Dir,
        3 => Kind::Symlink,
        4 => Kind::Fifo,
        5 => Kind::CharDev,
        6 => Kind::BlockDev,
        7 => Kind::Socket,
        _ => return None,
    })
}

fn var(o: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        o.push((v as u8) | 0x80);
        v >>= 7;
    }
    o.push(v as u8);
}

fn bytes(o: &mut Vec<u8>, b: &[u8]) {
    var(o, b.len() as u64);
    o.extend_from_slice(b);
}

struct Rd<'a> {
    d: &'a [u8],
    pos: usize,
}

impl Rd<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.d.len())?;
        let s = &self.d[self.pos..end];
        self.pos = end;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn var(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn var32(&mut self) -> Option<u32> {
        u32::try_from(self.var()?).ok()
    }
    /// A count of items, each at least one byte: refuse counts the payload cannot hold.
    fn count(&mut self) -> Option<usize> {
        let n = usize::try_from(self.var()?).ok()?;
        (n <= self.d.len() - self.pos).then_some(n)
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = usize::try_from(self.var()?).ok()?;
        Some(self.take(n)?.to_vec())
    }
}
