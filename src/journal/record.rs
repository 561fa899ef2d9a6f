//! Journal records: the binary encoding of every state change of a fork, and
//! the frame that makes a torn write detectable.
//!
//! ```text
//! frame   := u32le(len) u32le(crc32(payload)) payload        1 <= len <= MAX_PAYLOAD
//! payload := u8(tag) fields…                                 integers as LEB128 varints,
//!                                                            times as i64le, bytes as varint len + bytes
//! ```
//! The primitives are `store::codec`'s (trees use the same). Each record's
//! tag and field order is one line of the `records!` table below, grouped by
//! family as `state/` is: namespace, data, attributes, bookkeeping. What a
//! record *means* (its validation and application) is in that family's module
//! of `state/`.
//!
//! A `Write` record puts its data last, so the data of a record whose payload
//! starts at file offset `p` and is `len` long sits at `p + len - data.len()`:
//! the fork state points at it there instead of keeping it in memory.
//! Decoding never panics on hostile bytes (it returns `None`).

use crate::store::Kind;
use crate::store::codec::{Malformed, Reader, put_bytes, put_i64, put_var};

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

/// A record field's encoding (the `records!` table lists fields in order).
trait Field: Sized {
    fn put(&self, o: &mut Vec<u8>);
    fn get(r: &mut Reader<'_>) -> Result<Self, Malformed>;
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

/// The optional fields of `SetAttr`, one mask bit each.
const SETATTR_FIELDS: u8 = 5;

/// u8 mask of the present fields, the present ones, then ctime.
fn put_setattr(o: &mut Vec<u8>, r: &Record) {
    let Record::SetAttr {
        ino,
        perm,
        uid,
        gid,
        atime,
        mtime,
        ctime,
    } = r
    else {
        unreachable!("called for SetAttr")
    };
    ino.put(o);
    let present = [
        perm.is_some(),
        uid.is_some(),
        gid.is_some(),
        atime.is_some(),
        mtime.is_some(),
    ];
    let mut mask = 0u8;
    for (bit, set) in present.into_iter().enumerate() {
        if set {
            mask |= 1 << bit;
        }
    }
    o.push(mask);
    for v in [perm, uid, gid].into_iter().flatten() {
        v.put(o);
    }
    for t in [atime, mtime].into_iter().flatten() {
        t.put(o);
    }
    ctime.put(o);
}

fn get_setattr(r: &mut Reader<'_>) -> Result<Record, Malformed> {
    let ino = u64::get(r)?;
    let mask = r.u8()?;
    if mask >= 1 << SETATTR_FIELDS {
        return Err(Malformed("unknown setattr bits"));
    }
    let has = |b: u8| mask & (1 << b) != 0;
    let perm = if has(0) { Some(u32::get(r)?) } else { None };
    let uid = if has(1) { Some(u32::get(r)?) } else { None };
    let gid = if has(2) { Some(u32::get(r)?) } else { None };
    let atime = if has(3) { Some(i64::get(r)?) } else { None };
    let mtime = if has(4) { Some(i64::get(r)?) } else { None };
    Ok(Record::SetAttr {
        ino,
        perm,
        uid,
        gid,
        atime,
        mtime,
        ctime: i64::get(r)?,
    })
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

/// The record table: `TAG = n => Variant { fields in on-disk order }` for
/// records whose fields are each one [`Field`], `=> Variant(one Field)`, or
/// `=> Variant by (put, get)` for a layout of its own. Generates the tag constants,
/// [`Record::encode`] and [`Record::decode`]; a record missing here, or a field
/// missing from its line, does not compile.
macro_rules! records {
    ($(
        $tag:ident = $n:literal => $name:ident
            $({ $($f:ident),* $(,)? })?
            $(($inner:ident))?
            $(by ($put:ident, $get:ident))?
    ),* $(,)?) => {
        $(const $tag: u8 = $n;)*

        impl Record {
            /// The payload bytes (without the frame).
            pub fn encode(&self) -> Vec<u8> {
                let mut o = Vec::with_capacity(64);
                match self {
                    $(records!(@pat $name $({ $($f),* })? $(($inner))? $(by ($put, $get))?) => {
                        o.push($tag);
                        records!(@put self, o, $({ $($f),* })? $(($inner))? $(by ($put, $get))?);
                    })*
                }
                o
            }

            /// Decode a payload; `None` when it is not a well-formed record.
            pub fn decode(p: &[u8]) -> Option<Record> {
                let mut r = Reader::new(p);
                let rec = match r.u8().ok()? {
                    $($tag => records!(@get r, $name $({ $($f),* })? $(($inner))? $(by ($put, $get))?),)*
                    _ => return None,
                };
                r.finish().ok()?;
                Some(rec)
            }
        }
    };
    (@pat $name:ident { $($f:ident),* }) => { Record::$name { $($f),* } };
    (@pat $name:ident ($inner:ident)) => { Record::$name($inner) };
    (@pat $name:ident by ($put:ident, $get:ident)) => { Record::$name { .. } };
    (@put $self:ident, $o:ident, { $($f:ident),* }) => { $($f.put(&mut $o);)* };
    (@put $self:ident, $o:ident, ($inner:ident)) => { $inner.put(&mut $o) };
    (@put $self:ident, $o:ident, by ($put:ident, $get:ident)) => { $put(&mut $o, $self) };
    (@get $r:ident, $name:ident { $($f:ident),* }) => {
        Record::$name { $($f: Field::get(&mut $r).ok()?),* }
    };
    (@get $r:ident, $name:ident ($inner:ident)) => {
        Record::$name(Field::get(&mut $r).ok()?)
    };
    (@get $r:ident, $name:ident by ($put:ident, $get:ident)) => { $get(&mut $r).ok()? };
}

records! {
    // Namespace.
    T_CREATE = 2 => Create { parent, name, ino, kind, perm, uid, gid, rdev, time_ns, target },
    T_LINK = 3 => Link { ino, parent, name, time_ns },
    T_UNLINK = 4 => Unlink { parent, name, time_ns },
    T_RENAME = 5 => Rename { parent, name, new_parent, new_name, flags, time_ns },
    // Data. `Write`'s data is last (see `write_head`).
    T_WRITE = 6 => Write { ino, offset, time_ns, data },
    T_TRUNCATE = 7 => Truncate { ino, size, time_ns },
    T_PUNCH = 8 => PunchHole { ino, offset, len, time_ns },
    // Attributes.
    T_SETATTR = 9 => SetAttr by (put_setattr, get_setattr),
    T_SETXATTR = 10 => SetXattr { ino, name, value, flags, time_ns },
    T_RMXATTR = 11 => RemoveXattr { ino, name, time_ns },
    // Bookkeeping.
    T_LOADDIR = 1 => LoadDir { dir, first_ino },
    T_INODEMAP = 12 => InodeMap(map),
}

/// The payload of `Record::Write { ino, offset, time_ns, data }` up to its
/// data, for a `data` of `len` bytes: the payload is this followed by the data
/// (so the journal can append the data from the caller's buffer).
pub fn write_head(ino: u64, offset: u64, time_ns: i64, len: usize) -> Vec<u8> {
    let mut o = Vec::with_capacity(32);
    o.push(T_WRITE);
    put_var(&mut o, ino);
    put_var(&mut o, offset);
    put_i64(&mut o, time_ns);
    put_var(&mut o, len as u64);
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
