//! Journal records: the binary encoding of every state change of a fork, and
//! the frame that makes a torn write detectable.
//!
//! ```text
//! frame   := u32le(len) u32le(crc32(payload)) payload        1 <= len <= MAX_PAYLOAD
//! payload := u8(tag) fields…                                 integers as LEB128 varints,
//!                                                            times as i64le, bytes as varint len + bytes
//! ```
//! The primitives are `store::codec`'s (trees use the same); `Field` is
//! how each field type uses them. Each record's tag and field order is one
//! arm of [`Record::encode`] and one of `Record::read` (its decoder), both
//! grouped by family as `state/` is: namespace, data, attributes,
//! bookkeeping. What a record *means* (its validation and application) is in
//! that family's module of `state/`.
//!
//! A `Write` record puts its data last, so the data of a record whose payload
//! starts at file offset `p` and is `len` long sits at `p + len - data.len()`:
//! the fork state points at it there instead of keeping it in memory.
//! Decoding never panics on hostile bytes (it returns `None`).

use crate::store::codec::{Malformed, Reader, put_bytes, put_i64, put_var};
use crate::store::{Kind, ObjectId};

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
/// assigned deterministically (see `state/`), so replay reproduces them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    // Namespace (`state/namespace.rs`).
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

    // Data (`state/data.rs`).
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
    /// `len` bytes of stored object `id` from `obj_off`, written at `offset`
    /// of file `ino` (`copy_file_range` of committed data: the bytes are
    /// named, not carried; the object belongs to a checkpoint).
    Share {
        ino: u64,
        offset: u64,
        id: ObjectId,
        obj_off: u64,
        len: u64,
        time_ns: i64,
    },

    // Attributes (`state/attrs.rs`).
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

    // Bookkeeping: inode numbering (`state/namespace.rs`, `state/replay.rs`).
    /// Base directory `dir` was loaded; its children got inode numbers from `first_ino`.
    LoadDir { dir: u64, first_ino: u64 },
    /// First record of a segment started by a commit: how the live inode
    /// numbers map onto the committed tree (see `ForkState::inode_map`).
    InodeMap(InodeMap),

    // Provenance (`state/provenance.rs`).
    /// Every later change record of this segment (until the next `Who`) was
    /// made by this requester. Written only when the requester changes.
    Who(Who),
}

/// Who asked for a change: the requesting process as the mount saw it
/// (`pid` 0 and an empty command: unknown, e.g. a change not made through a
/// mount, or a journal written before provenance was recorded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Who {
    pub pid: u32,
    pub uid: u32,
    /// `/proc/PID/comm` when the change was made (at most 15 bytes).
    pub command: Vec<u8>,
    /// The `storefs run` the mount belongs to (its pid, as `runs/<pid>.json`
    /// names it), or empty.
    pub run: Vec<u8>,
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

// Record tags, grouped by family as `state/` is.
// Namespace.
const T_CREATE: u8 = 2;
const T_LINK: u8 = 3;
const T_UNLINK: u8 = 4;
const T_RENAME: u8 = 5;
// Data.
const T_WRITE: u8 = 6;
const T_TRUNCATE: u8 = 7;
const T_PUNCH: u8 = 8;
const T_SHARE: u8 = 13;
// Attributes.
const T_SETATTR: u8 = 9;
const T_SETXATTR: u8 = 10;
const T_RMXATTR: u8 = 11;
// Bookkeeping.
const T_LOADDIR: u8 = 1;
const T_INODEMAP: u8 = 12;
// Provenance.
const T_WHO: u8 = 14;

/// `SetAttr`'s mask: one bit per optional field, in this order.
const SETATTR_PERM: u8 = 1;
const SETATTR_UID: u8 = 1 << 1;
const SETATTR_GID: u8 = 1 << 2;
const SETATTR_ATIME: u8 = 1 << 3;
const SETATTR_MTIME: u8 = 1 << 4;
const SETATTR_ALL: u8 = SETATTR_PERM | SETATTR_UID | SETATTR_GID | SETATTR_ATIME | SETATTR_MTIME;

impl Record {
    /// The payload bytes (without the frame): the tag, then the fields in
    /// on-disk order. A variant missing here does not compile.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(64);
        match self {
            // Namespace.
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
            } => put(
                &mut o,
                T_CREATE,
                &[
                    parent, name, ino, kind, perm, uid, gid, rdev, time_ns, target,
                ],
            ),
            Record::Link {
                ino,
                parent,
                name,
                time_ns,
            } => put(&mut o, T_LINK, &[ino, parent, name, time_ns]),
            Record::Unlink {
                parent,
                name,
                time_ns,
            } => put(&mut o, T_UNLINK, &[parent, name, time_ns]),
            Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                time_ns,
            } => put(
                &mut o,
                T_RENAME,
                &[parent, name, new_parent, new_name, flags, time_ns],
            ),

            // Data. `Write`'s data is last (see `write_head`).
            Record::Write {
                ino,
                offset,
                time_ns,
                data,
            } => put(&mut o, T_WRITE, &[ino, offset, time_ns, data]),
            Record::Truncate { ino, size, time_ns } => {
                put(&mut o, T_TRUNCATE, &[ino, size, time_ns])
            }
            Record::PunchHole {
                ino,
                offset,
                len,
                time_ns,
            } => put(&mut o, T_PUNCH, &[ino, offset, len, time_ns]),
            Record::Share {
                ino,
                offset,
                id,
                obj_off,
                len,
                time_ns,
            } => put(&mut o, T_SHARE, &[ino, offset, id, obj_off, len, time_ns]),

            // Attributes. `SetAttr`: a u8 mask of the optional fields, the
            // present ones, then ctime.
            Record::SetAttr {
                ino,
                perm,
                uid,
                gid,
                atime,
                mtime,
                ctime,
            } => {
                put(&mut o, T_SETATTR, &[ino]);
                let flag = |present: bool, bit: u8| if present { bit } else { 0 };
                o.push(
                    flag(perm.is_some(), SETATTR_PERM)
                        | flag(uid.is_some(), SETATTR_UID)
                        | flag(gid.is_some(), SETATTR_GID)
                        | flag(atime.is_some(), SETATTR_ATIME)
                        | flag(mtime.is_some(), SETATTR_MTIME),
                );
                for v in [perm, uid, gid].into_iter().flatten() {
                    v.put(&mut o);
                }
                for t in [atime, mtime].into_iter().flatten() {
                    t.put(&mut o);
                }
                ctime.put(&mut o);
            }
            Record::SetXattr {
                ino,
                name,
                value,
                flags,
                time_ns,
            } => put(&mut o, T_SETXATTR, &[ino, name, value, flags, time_ns]),
            Record::RemoveXattr { ino, name, time_ns } => {
                put(&mut o, T_RMXATTR, &[ino, name, time_ns])
            }

            // Bookkeeping.
            Record::LoadDir { dir, first_ino } => put(&mut o, T_LOADDIR, &[dir, first_ino]),
            Record::InodeMap(map) => put(&mut o, T_INODEMAP, &[map]),

            // Provenance.
            Record::Who(Who {
                pid,
                uid,
                command,
                run,
            }) => put(&mut o, T_WHO, &[pid, uid, command, run]),
        }
        o
    }

    /// Decode a payload; `None` when it is not a well-formed record.
    pub fn decode(p: &[u8]) -> Option<Record> {
        let mut r = Reader::new(p);
        let rec = Record::read(&mut r).ok()?;
        r.finish().ok()?;
        Some(rec)
    }

    /// The tag and the fields, as `encode` puts them. (The fields of a
    /// struct expression are evaluated in the order written, so each
    /// record's fields are read top to bottom.)
    fn read(r: &mut Reader<'_>) -> Result<Record, Malformed> {
        Ok(match r.u8()? {
            // Namespace.
            T_CREATE => Record::Create {
                parent: get(r)?,
                name: get(r)?,
                ino: get(r)?,
                kind: get(r)?,
                perm: get(r)?,
                uid: get(r)?,
                gid: get(r)?,
                rdev: get(r)?,
                time_ns: get(r)?,
                target: get(r)?,
            },
            T_LINK => Record::Link {
                ino: get(r)?,
                parent: get(r)?,
                name: get(r)?,
                time_ns: get(r)?,
            },
            T_UNLINK => Record::Unlink {
                parent: get(r)?,
                name: get(r)?,
                time_ns: get(r)?,
            },
            T_RENAME => Record::Rename {
                parent: get(r)?,
                name: get(r)?,
                new_parent: get(r)?,
                new_name: get(r)?,
                flags: get(r)?,
                time_ns: get(r)?,
            },

            // Data.
            T_WRITE => Record::Write {
                ino: get(r)?,
                offset: get(r)?,
                time_ns: get(r)?,
                data: get(r)?,
            },
            T_TRUNCATE => Record::Truncate {
                ino: get(r)?,
                size: get(r)?,
                time_ns: get(r)?,
            },
            T_PUNCH => Record::PunchHole {
                ino: get(r)?,
                offset: get(r)?,
                len: get(r)?,
                time_ns: get(r)?,
            },
            T_SHARE => Record::Share {
                ino: get(r)?,
                offset: get(r)?,
                id: get(r)?,
                obj_off: get(r)?,
                len: get(r)?,
                time_ns: get(r)?,
            },

            // Attributes.
            T_SETATTR => {
                let ino = get(r)?;
                let mask = r.u8()?;
                if mask & !SETATTR_ALL != 0 {
                    return Err(Malformed("unknown setattr bits"));
                }
                Record::SetAttr {
                    ino,
                    perm: get_if(r, mask & SETATTR_PERM != 0)?,
                    uid: get_if(r, mask & SETATTR_UID != 0)?,
                    gid: get_if(r, mask & SETATTR_GID != 0)?,
                    atime: get_if(r, mask & SETATTR_ATIME != 0)?,
                    mtime: get_if(r, mask & SETATTR_MTIME != 0)?,
                    ctime: get(r)?,
                }
            }
            T_SETXATTR => Record::SetXattr {
                ino: get(r)?,
                name: get(r)?,
                value: get(r)?,
                flags: get(r)?,
                time_ns: get(r)?,
            },
            T_RMXATTR => Record::RemoveXattr {
                ino: get(r)?,
                name: get(r)?,
                time_ns: get(r)?,
            },

            // Bookkeeping.
            T_LOADDIR => Record::LoadDir {
                dir: get(r)?,
                first_ino: get(r)?,
            },
            T_INODEMAP => Record::InodeMap(get(r)?),

            // Provenance.
            T_WHO => Record::Who(Who {
                pid: get(r)?,
                uid: get(r)?,
                command: get(r)?,
                run: get(r)?,
            }),

            _ => return Err(Malformed("unknown record tag")),
        })
    }
}

/// Append `tag`, then each field.
fn put(o: &mut Vec<u8>, tag: u8, fields: &[&dyn Field]) {
    o.push(tag);
    for f in fields {
        f.put(o);
    }
}

/// Read one field.
fn get<F: Field>(r: &mut Reader<'_>) -> Result<F, Malformed> {
    F::get(r)
}

/// Read one field if `present` (a `SetAttr` mask bit).
fn get_if<F: Field>(r: &mut Reader<'_>, present: bool) -> Result<Option<F>, Malformed> {
    if present {
        F::get(r).map(Some)
    } else {
        Ok(None)
    }
}

/// A record field's encoding: one impl per field type. (`get` alone needs
/// `Sized`, so `put` can take a record's fields as one list of `&dyn Field`.)
trait Field {
    fn put(&self, o: &mut Vec<u8>);
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed>
    where
        Self: Sized;
}

/// varint.
impl Field for u64 {
    fn put(&self, o: &mut Vec<u8>) {
        put_var(o, *self);
    }
    fn get(r: &mut Reader<'_>) -> Result<u64, Malformed> {
        r.var()
    }
}

/// varint that must fit 32 bits.
impl Field for u32 {
    fn put(&self, o: &mut Vec<u8>) {
        put_var(o, u64::from(*self));
    }
    fn get(r: &mut Reader<'_>) -> Result<u32, Malformed> {
        r.var32()
    }
}

/// i64le (times).
impl Field for i64 {
    fn put(&self, o: &mut Vec<u8>) {
        put_i64(o, *self);
    }
    fn get(r: &mut Reader<'_>) -> Result<i64, Malformed> {
        r.i64()
    }
}

/// varint length + bytes.
impl Field for Vec<u8> {
    fn put(&self, o: &mut Vec<u8>) {
        put_bytes(o, self);
    }
    fn get(r: &mut Reader<'_>) -> Result<Vec<u8>, Malformed> {
        Ok(r.bytes()?.to_vec())
    }
}

/// 32 bytes, as in trees.
impl Field for ObjectId {
    fn put(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.0);
    }
    fn get(r: &mut Reader<'_>) -> Result<ObjectId, Malformed> {
        r.id()
    }
}

/// u8, as in trees.
impl Field for Kind {
    fn put(&self, o: &mut Vec<u8>) {
        o.push(*self as u8);
    }
    fn get(r: &mut Reader<'_>) -> Result<Kind, Malformed> {
        r.kind()
    }
}

/// u8 0, or u8 1 + bytes.
impl Field for Option<Vec<u8>> {
    fn put(&self, o: &mut Vec<u8>) {
        match self {
            None => o.push(0),
            Some(b) => {
                o.push(1);
                put_bytes(o, b);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Option<Vec<u8>>, Malformed> {
        match r.u8()? {
            0 => Ok(None),
            1 => Ok(Some(r.bytes()?.to_vec())),
            _ => Err(Malformed("bad option tag")),
        }
    }
}

/// next_ino, then three counted lists: dirs (each counted children), links, orphans.
impl Field for InodeMap {
    fn put(&self, o: &mut Vec<u8>) {
        self.next_ino.put(o);
        put_var(o, self.dirs.len() as u64);
        for (dir, kids) in &self.dirs {
            dir.put(o);
            put_var(o, kids.len() as u64);
            for (name, ino) in kids {
                name.put(o);
                ino.put(o);
            }
        }
        put_var(o, self.links.len() as u64);
        for (l, i) in &self.links {
            l.put(o);
            i.put(o);
        }
        put_var(o, self.orphans.len() as u64);
        for i in &self.orphans {
            i.put(o);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<InodeMap, Malformed> {
        let next_ino = u64::get(r)?;
        let nd = r.count()?;
        let mut dirs = Vec::with_capacity(nd);
        for _ in 0..nd {
            let dir = u64::get(r)?;
            let nk = r.count()?;
            let mut kids = Vec::with_capacity(nk);
            for _ in 0..nk {
                kids.push((Vec::get(r)?, u64::get(r)?));
            }
            dirs.push((dir, kids));
        }
        let nl = r.count()?;
        let mut links = Vec::with_capacity(nl);
        for _ in 0..nl {
            links.push((u64::get(r)?, u64::get(r)?));
        }
        let no = r.count()?;
        let mut orphans = Vec::with_capacity(no);
        for _ in 0..no {
            orphans.push(u64::get(r)?);
        }
        Ok(InodeMap {
            next_ino,
            dirs,
            links,
            orphans,
        })
    }
}

/// The payload of `Record::InodeMap` written as its parts come, one
/// directory at a time, without copying the names into an [`InodeMap`]
/// first: the same bytes as `Record::InodeMap(map).encode()` for the map
/// those parts make (a commit writes it under the state lock, so the copy
/// was what it cost; a parked directory's names are read from its tree
/// just for this).
pub struct InodeMapWriter {
    o: Vec<u8>,
}

impl InodeMapWriter {
    /// The start of a map of `dirs` directories; `hint`: about how many
    /// bytes their names and numbers take.
    pub fn new(next_ino: u64, dirs: usize, hint: usize) -> InodeMapWriter {
        let mut o = Vec::with_capacity(16 + hint);
        o.push(T_INODEMAP);
        next_ino.put(&mut o);
        put_var(&mut o, dirs as u64);
        InodeMapWriter { o }
    }

    /// Directory `dir` with its `len` children, in name order.
    pub fn dir<'a>(&mut self, dir: u64, len: usize, kids: impl Iterator<Item = (&'a [u8], u64)>) {
        dir.put(&mut self.o);
        put_var(&mut self.o, len as u64);
        for (name, ino) in kids {
            put_bytes(&mut self.o, name);
            ino.put(&mut self.o);
        }
    }

    /// The payload, ending with the links and the orphans.
    pub fn finish(mut self, links: &[(u64, u64)], orphans: &[u64]) -> Vec<u8> {
        let o = &mut self.o;
        put_var(o, links.len() as u64);
        for (l, i) in links {
            l.put(o);
            i.put(o);
        }
        put_var(o, orphans.len() as u64);
        for i in orphans {
            i.put(o);
        }
        self.o
    }
}

/// The payload of `Record::Write { ino, offset, time_ns, data }` up to its
/// data, for a `data` of `len` bytes: the payload is this followed by the data
/// (so the journal can append the data from the caller's buffer).
pub fn write_head(ino: u64, offset: u64, time_ns: i64, len: usize) -> Vec<u8> {
    let mut o = Vec::with_capacity(32);
    // `Write`'s fields with the data's length in place of the data.
    put(&mut o, T_WRITE, &[&ino, &offset, &time_ns, &(len as u64)]);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The on-disk bytes of one record of every kind (and both SetAttr mask
    /// shapes), pinned: a journal written by an earlier build must replay,
    /// so a change here is a format change (docs/journal.md) and not a
    /// refactoring. Each also decodes back to itself.
    #[test]
    fn every_record_kind_encodes_to_its_pinned_bytes_and_back() {
        let recs = vec![
            Record::Create {
                parent: 1,
                name: b"a".to_vec(),
                ino: 300,
                kind: Kind::File,
                perm: 0o644,
                uid: 1000,
                gid: 7,
                rdev: 0,
                time_ns: -5,
                target: None,
            },
            Record::Create {
                parent: 1,
                name: b"l".to_vec(),
                ino: 3,
                kind: Kind::Symlink,
                perm: 0o777,
                uid: 0,
                gid: 0,
                rdev: 12345678,
                time_ns: 1 << 40,
                target: Some(b"/x/y".to_vec()),
            },
            Record::Link {
                ino: 5,
                parent: 2,
                name: b"nm".to_vec(),
                time_ns: 9,
            },
            Record::Unlink {
                parent: 2,
                name: b"q".to_vec(),
                time_ns: 10,
            },
            Record::Rename {
                parent: 2,
                name: b"q".to_vec(),
                new_parent: 70000,
                new_name: b"r".to_vec(),
                flags: RENAME_EXCHANGE,
                time_ns: 11,
            },
            Record::Write {
                ino: 9,
                offset: 1 << 33,
                time_ns: 12,
                data: vec![1, 2, 3],
            },
            Record::Truncate {
                ino: 9,
                size: 4096,
                time_ns: 13,
            },
            Record::PunchHole {
                ino: 9,
                offset: 1,
                len: 2,
                time_ns: 14,
            },
            Record::Share {
                ino: 9,
                offset: 300,
                id: ObjectId([0xab; 32]),
                obj_off: 2,
                len: 1 << 20,
                time_ns: 19,
            },
            Record::SetAttr {
                ino: 9,
                perm: Some(0o600),
                uid: None,
                gid: Some(5),
                atime: None,
                mtime: Some(-1),
                ctime: 15,
            },
            Record::SetAttr {
                ino: 9,
                perm: None,
                uid: Some(1),
                gid: None,
                atime: Some(3),
                mtime: None,
                ctime: 16,
            },
            Record::SetXattr {
                ino: 9,
                name: b"user.a".to_vec(),
                value: b"v".to_vec(),
                flags: XATTR_CREATE,
                time_ns: 17,
            },
            Record::RemoveXattr {
                ino: 9,
                name: b"user.a".to_vec(),
                time_ns: 18,
            },
            Record::LoadDir {
                dir: 4,
                first_ino: 100,
            },
            Record::InodeMap(InodeMap {
                next_ino: 99,
                dirs: vec![
                    (1, vec![(b"a".to_vec(), 2), (b"b".to_vec(), 3)]),
                    (2, vec![]),
                ],
                links: vec![(7, 8)],
                orphans: vec![9, 10],
            }),
            Record::Who(Who {
                pid: 4242,
                uid: 1000,
                command: b"python3".to_vec(),
                run: b"77".to_vec(),
            }),
        ];
        let pinned = [
            "02010161ac0201a403e8070700fbffffffffffffff00",
            "0201016c0303ff030000cec2f105000000000001000001042f782f79",
            "030502026e6d0900000000000000",
            "040201710a00000000000000",
            "05020171f0a2040172020b00000000000000",
            "060980808080200c0000000000000003010203",
            "070980200d00000000000000",
            "080901020e00000000000000",
            "0d09ac02abababababababababababababababababababababababababababababababab028080401300000000000000",
            "090915800305ffffffffffffffff0f00000000000000",
            "09090a0103000000000000001000000000000000",
            "0a0906757365722e610176011100000000000000",
            "0b0906757365722e611200000000000000",
            "010464",
            "0c63020102016102016203020001070802090a",
            "0e9221e80707707974686f6e33023737",
        ];
        assert_eq!(recs.len(), pinned.len());
        for (r, hex) in recs.iter().zip(pinned) {
            let e = r.encode();
            let got: String = e.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{r:?}");
            assert_eq!(Record::decode(&e).as_ref(), Some(r));
        }
        // A Write's head is its payload without the data.
        let w = recs[5].encode();
        assert_eq!(write_head(9, 1 << 33, 12, 3), w[..w.len() - 3]);
    }
}
