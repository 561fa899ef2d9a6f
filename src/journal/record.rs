//! Journal records: the binary encoding of every state change of a fork, and
//! the frame that makes a torn write detectable.
//!
//! ```text
//! frame   := u32le(len) u32le(crc32(payload)) payload        1 <= len <= MAX_PAYLOAD
//! payload := u8(tag) fields…                                 integers as LEB128 varints,
//!                                                            times as i64le, bytes as varint len + bytes
//! ```
//! Every record kind is one row of the table below (`records!`): its tag,
//! its variant with its fields in on-disk order, and the inodes it names.
//! The enum [`Record`], the encoder ([`Record::encode`]), the decoder
//! ([`Record::decode`]) and [`Record::inodes`] are made from that table, so
//! a field cannot be written in one order and read in another. How each
//! field *type* is written is its `Field` impl; the primitives are
//! `store::codec`'s (trees use the same). The rows are grouped by family as
//! `state/` is: namespace, data, attributes, bookkeeping, provenance. What a
//! record *means* (its validation and application) is in that family's
//! module of `state/`.
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

/// An inode a record names, as a replay must have it in the table before
/// the record runs (`state/park.rs` brings back what is parked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Named<'a> {
    /// A directory whose entries it reads or changes.
    Dir(u64),
    /// Entry `name` of directory `dir`: what is there is removed, replaced
    /// or moved (a directory there is checked empty, so it must be loaded).
    Entry(u64, &'a [u8]),
    /// An inode it changes (a directory's own attributes are in its
    /// parent's tree).
    Inode(u64),
}

/// The table of record kinds. A row is
///
/// ```text
/// /// doc
/// TAG Variant { field: Type, … } names [Named::…, …];     or
/// TAG Variant(binding: Type) names [];                     (one field)
/// ```
///
/// and makes: the variant of [`Record`]; its tag (`Tag::Variant`, the
/// payload's first byte; a tag given twice does not compile); its encoding,
/// the tag then each field's `Field::put` in the order written; its
/// decoding, the same fields read in the same order (`Field::get`); and
/// what [`Record::inodes`] returns for it (expressions over the fields,
/// bound by reference).
macro_rules! records {
    ($(
        $(#[$doc:meta])*
        $tag:literal $V:ident
        $({ $($(#[$fdoc:meta])* $f:ident: $t:ty),* $(,)? })?
        $(($x:ident: $inner:ty))?
        names [$($named:expr),* $(,)?];
    )*) => {
        /// One state change. Inodes are named by the fork's inode numbers,
        /// which are assigned deterministically (see `state/`), so replay
        /// reproduces them.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Record {
            $(
                $(#[$doc])*
                $V $({ $($(#[$fdoc])* $f: $t),* })? $(($inner))?,
            )*
        }

        /// Each record kind's tag.
        #[repr(u8)]
        #[derive(Clone, Copy)]
        enum Tag {
            $($V = $tag,)*
        }

        impl Record {
            /// The payload bytes (without the frame): the tag, then the
            /// fields in on-disk order.
            pub fn encode(&self) -> Vec<u8> {
                let mut o = Vec::with_capacity(64);
                match self {
                    $(
                        Record::$V $({ $($f),* })? $(($x))? => put(
                            &mut o,
                            Tag::$V as u8,
                            &[$($($f as &dyn Field),*)? $($x as &dyn Field)?],
                        ),
                    )*
                }
                o
            }

            /// The tag and the fields, as `encode` puts them. (The fields
            /// of a struct expression are evaluated in the order written,
            /// so each record's fields are read in table order.)
            fn read(r: &mut Reader<'_>) -> Result<Record, Malformed> {
                Ok(match r.u8()? {
                    $(
                        $tag => {
                            let masked = 0 $($(+ u32::from(<$t as Field>::is_bit()))*)?;
                            let f = &mut Fields {
                                r,
                                mask: Mask::Unread {
                                    bits: masked,
                                    unknown: concat!("unknown ", stringify!($V), " mask bits"),
                                },
                            };
                            Record::$V $({ $($f: get(f)?),* })? $((get::<$inner>(f)?))?
                        }
                    )*
                    _ => return Err(Malformed("unknown record tag")),
                })
            }

            /// The inodes this record names, in the order a replay brings
            /// them back (`state/park.rs`). A new inode (`Create`'s `ino`)
            /// is not named: nothing can have parked it.
            #[allow(unused_variables)] // a row names some of its fields
            pub fn inodes(&self) -> Vec<Named<'_>> {
                match self {
                    $( Record::$V $({ $($f),* })? $(($x))? => vec![$($named),*], )*
                }
            }
        }
    };
}

records! {
    // Namespace (`state/namespace.rs`).
    /// A new inode `ino` named `name` in `parent` (file, dir, symlink with `target`, special).
    2 Create {
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
    } names [Named::Dir(*parent)];
    /// A new name for existing inode `ino`.
    3 Link {
        ino: u64,
        parent: u64,
        name: Vec<u8>,
        time_ns: i64,
    } names [Named::Inode(*ino), Named::Dir(*parent)];
    /// Remove a name (unlink or rmdir).
    4 Unlink {
        parent: u64,
        name: Vec<u8>,
        time_ns: i64,
    } names [Named::Dir(*parent), Named::Entry(*parent, name)];
    /// rename(2) / renameat2(2) with `RENAME_*` flags.
    5 Rename {
        parent: u64,
        name: Vec<u8>,
        new_parent: u64,
        new_name: Vec<u8>,
        flags: u32,
        time_ns: i64,
    } names [
        Named::Dir(*parent),
        Named::Dir(*new_parent),
        Named::Entry(*parent, name),
        Named::Entry(*new_parent, new_name),
    ];

    /// A new regular file `ino` with no name (`O_TMPFILE` in directory
    /// `parent`, which it is not an entry of): no link, kept while open,
    /// until a `Link` gives it a name. Format 2026-12-07; an older storefs
    /// refuses a journal holding it.
    16 Tmpfile {
        parent: u64,
        ino: u64,
        perm: u32,
        uid: u32,
        gid: u32,
        time_ns: i64,
    } names [Named::Dir(*parent)];
    /// renameat2(2) with `RENAME_WHITEOUT` (`flags`: 0 or
    /// `RENAME_NOREPLACE`): the rename, then a whiteout `ino` (a character
    /// device 0:0, mode 0, owned by `uid`:`gid`) at the old name, as one
    /// step. Format 2026-12-07, as `Tmpfile`.
    17 RenameWhiteout {
        parent: u64,
        name: Vec<u8>,
        new_parent: u64,
        new_name: Vec<u8>,
        flags: u32,
        ino: u64,
        uid: u32,
        gid: u32,
        time_ns: i64,
    } names [
        Named::Dir(*parent),
        Named::Dir(*new_parent),
        Named::Entry(*parent, name),
        Named::Entry(*new_parent, new_name),
    ];

    // Data (`state/data.rs`).
    /// `data` at `offset` of file `ino`. The data is last (see `write_head`).
    6 Write {
        ino: u64,
        offset: u64,
        time_ns: i64,
        data: Vec<u8>,
    } names [Named::Inode(*ino)];
    /// Set the size of file `ino` (shrink drops data, grow adds a hole).
    7 Truncate { ino: u64, size: u64, time_ns: i64 } names [Named::Inode(*ino)];
    /// Zero `len` bytes at `offset` without changing the size (they become a hole).
    8 PunchHole {
        ino: u64,
        offset: u64,
        len: u64,
        time_ns: i64,
    } names [Named::Inode(*ino)];
    /// `len` bytes of stored object `id` from `obj_off`, written at `offset`
    /// of file `ino` (`copy_file_range` of committed data: the bytes are
    /// named, not carried; the object belongs to a checkpoint).
    13 Share {
        ino: u64,
        offset: u64,
        id: ObjectId,
        obj_off: u64,
        len: u64,
        time_ns: i64,
    } names [Named::Inode(*ino)];

    // Attributes (`state/attrs.rs`).
    /// chmod/chown/utimens; `ctime` is always set. On disk: `ino`, a u8
    /// mask of the optional fields present (`Field for Option<u32>`), the
    /// present ones, `ctime`.
    9 SetAttr {
        ino: u64,
        perm: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        ctime: i64,
    } names [Named::Inode(*ino)];
    10 SetXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
        time_ns: i64,
    } names [Named::Inode(*ino)];
    11 RemoveXattr {
        ino: u64,
        name: Vec<u8>,
        time_ns: i64,
    } names [Named::Inode(*ino)];
    /// `chattr`: the inode flags of `ino` become `flags` (`state/flags.rs`).
    15 SetFlags { ino: u64, flags: u32, time_ns: i64 } names [Named::Inode(*ino)];

    // Bookkeeping: inode numbering (`state/namespace.rs`, `state/replay.rs`).
    /// Base directory `dir` was loaded; its children got inode numbers from
    /// `first_ino`. (`record_load_dir` brings back what it needs itself.)
    1 LoadDir { dir: u64, first_ino: u64 } names [];
    /// First record of a segment started by a commit: how the live inode
    /// numbers map onto the committed tree (see `ForkState::inode_map`).
    12 InodeMap(map: InodeMap) names [];
    /// Second record of a segment started by a commit, when the fork has
    /// any: the access times its tree does not keep (`ForkState::atimes`):
    /// (ino, atime) in number order, for each live inode whose atime is not
    /// its mtime. Fork-local, as the numbering. Format 2026-12-07, as
    /// `Tmpfile`.
    18 Atimes(atimes: Vec<(u64, i64)>) names [];

    // Provenance (`state/provenance.rs`).
    /// Every later change record of this segment (until the next `Who`) was
    /// made by this requester. Written only when the requester changes.
    14 Who(who: Who) names [];
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

impl Record {
    /// Decode a payload; `None` when it is not a well-formed record.
    pub fn decode(p: &[u8]) -> Option<Record> {
        let mut r = Reader::new(p);
        let rec = Record::read(&mut r).ok()?;
        r.finish().ok()?;
        Some(rec)
    }
}

/// Append `tag`, then each field; a record with optional number fields has
/// their mask (bit i: the i-th of them is present) before the first of them.
fn put(o: &mut Vec<u8>, tag: u8, fields: &[&dyn Field]) {
    o.push(tag);
    let bits = fields.iter().filter_map(|f| f.bit());
    let mask = (0..)
        .zip(bits)
        .fold(0u8, |m, (i, set)| m | u8::from(set) << i);
    let mut mask_put = false;
    for f in fields {
        if f.bit().is_some() && !std::mem::replace(&mut mask_put, true) {
            o.push(mask);
        }
        f.put(o);
    }
}

/// A record's fields being read.
struct Fields<'a, 'b> {
    r: &'a mut Reader<'b>,
    mask: Mask,
}

/// The mask of a record's optional number fields (`Field for Option<u32>`).
enum Mask {
    /// Not read yet: the record has `bits` of them; a mask with a bit past
    /// those is refused with `unknown`.
    Unread { bits: u32, unknown: &'static str },
    /// Read: the mask, and the bit of the next optional field.
    Read { mask: u8, next: u32 },
}

/// Read one field.
fn get<F: Field>(f: &mut Fields<'_, '_>) -> Result<F, Malformed> {
    F::get(f)
}

/// A record field's encoding: one impl per field type. (`get` and `is_bit`
/// need `Sized`, so `put` can take a record's fields as one list of `&dyn
/// Field`.)
trait Field {
    fn put(&self, o: &mut Vec<u8>);
    fn get(f: &mut Fields<'_, '_>) -> Result<Self, Malformed>
    where
        Self: Sized;
    /// A bit of its record's mask (an optional number): whether it is present.
    fn bit(&self) -> Option<bool> {
        None
    }
    /// Whether fields of this type are bits of their record's mask.
    fn is_bit() -> bool
    where
        Self: Sized,
    {
        false
    }
}

/// varint.
impl Field for u64 {
    fn put(&self, o: &mut Vec<u8>) {
        put_var(o, *self);
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<u64, Malformed> {
        f.r.var()
    }
}

/// varint that must fit 32 bits.
impl Field for u32 {
    fn put(&self, o: &mut Vec<u8>) {
        put_var(o, u64::from(*self));
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<u32, Malformed> {
        f.r.var32()
    }
}

/// i64le (times).
impl Field for i64 {
    fn put(&self, o: &mut Vec<u8>) {
        put_i64(o, *self);
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<i64, Malformed> {
        f.r.i64()
    }
}

/// varint length + bytes.
impl Field for Vec<u8> {
    fn put(&self, o: &mut Vec<u8>) {
        put_bytes(o, self);
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<Vec<u8>, Malformed> {
        Ok(f.r.bytes()?.to_vec())
    }
}

/// 32 bytes, as in trees.
impl Field for ObjectId {
    fn put(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(&self.0);
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<ObjectId, Malformed> {
        f.r.id()
    }
}

/// u8, as in trees.
impl Field for Kind {
    fn put(&self, o: &mut Vec<u8>) {
        o.push(*self as u8);
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<Kind, Malformed> {
        f.r.kind()
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
    fn get(f: &mut Fields<'_, '_>) -> Result<Option<Vec<u8>>, Malformed> {
        match f.r.u8()? {
            0 => Ok(None),
            1 => Ok(Some(f.r.bytes()?.to_vec())),
            _ => Err(Malformed("bad option tag")),
        }
    }
}

/// An optional number: one bit of its record's mask, which comes before the
/// first of them (`put`), and the value only when present.
macro_rules! optional_number {
    ($($t:ty),*) => {$(
        impl Field for Option<$t> {
            fn put(&self, o: &mut Vec<u8>) {
                if let Some(v) = self {
                    v.put(o);
                }
            }
            fn get(f: &mut Fields<'_, '_>) -> Result<Option<$t>, Malformed> {
                let (mask, bit) = match f.mask {
                    Mask::Unread { bits, unknown } => {
                        let mask = f.r.u8()?;
                        if u32::from(mask) >> bits != 0 {
                            return Err(Malformed(unknown));
                        }
                        (mask, 0)
                    }
                    Mask::Read { mask, next } => (mask, next),
                };
                assert!(bit < 8, "a record has at most 8 optional numbers");
                f.mask = Mask::Read { mask, next: bit + 1 };
                if mask & (1 << bit) != 0 {
                    <$t>::get(f).map(Some)
                } else {
                    Ok(None)
                }
            }
            fn bit(&self) -> Option<bool> {
                Some(self.is_some())
            }
            fn is_bit() -> bool {
                true
            }
        }
    )*};
}
optional_number!(u32, i64);

/// pid, uid, command, run.
impl Field for Who {
    fn put(&self, o: &mut Vec<u8>) {
        let Who {
            pid,
            uid,
            command,
            run,
        } = self;
        pid.put(o);
        uid.put(o);
        command.put(o);
        run.put(o);
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<Who, Malformed> {
        Ok(Who {
            pid: get(f)?,
            uid: get(f)?,
            command: get(f)?,
            run: get(f)?,
        })
    }
}

/// A counted list of (varint ino, i64le atime).
impl Field for Vec<(u64, i64)> {
    fn put(&self, o: &mut Vec<u8>) {
        put_var(o, self.len() as u64);
        for (ino, t) in self {
            ino.put(o);
            t.put(o);
        }
    }
    fn get(f: &mut Fields<'_, '_>) -> Result<Vec<(u64, i64)>, Malformed> {
        let n = f.r.count()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push((u64::get(f)?, i64::get(f)?));
        }
        Ok(out)
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

    fn get(f: &mut Fields<'_, '_>) -> Result<InodeMap, Malformed> {
        let next_ino = u64::get(f)?;
        let nd = f.r.count()?;
        let mut dirs = Vec::with_capacity(nd);
        for _ in 0..nd {
            let dir = u64::get(f)?;
            let nk = f.r.count()?;
            let mut kids = Vec::with_capacity(nk);
            for _ in 0..nk {
                kids.push((Vec::get(f)?, u64::get(f)?));
            }
            dirs.push((dir, kids));
        }
        let nl = f.r.count()?;
        let mut links = Vec::with_capacity(nl);
        for _ in 0..nl {
            links.push((u64::get(f)?, u64::get(f)?));
        }
        let no = f.r.count()?;
        let mut orphans = Vec::with_capacity(no);
        for _ in 0..no {
            orphans.push(u64::get(f)?);
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
        o.push(Tag::InodeMap as u8);
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
    put(
        &mut o,
        Tag::Write as u8,
        &[&ino, &offset, &time_ns, &(len as u64)],
    );
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

    /// `r` encodes to the bytes `hex` spells and decodes back to itself;
    /// its bytes.
    fn encodes_as(r: &Record, hex: &str) -> Vec<u8> {
        let e = r.encode();
        let got: String = e.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, hex, "{r:?}");
        assert_eq!(Record::decode(&e).as_ref(), Some(r));
        e
    }

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
            Record::SetFlags {
                ino: 9,
                flags: 0x30,
                time_ns: 19,
            },
            Record::Tmpfile {
                parent: 2,
                ino: 300,
                perm: 0o600,
                uid: 1000,
                gid: 7,
                time_ns: 20,
            },
            Record::RenameWhiteout {
                parent: 2,
                name: b"q".to_vec(),
                new_parent: 3,
                new_name: b"r".to_vec(),
                flags: RENAME_NOREPLACE,
                ino: 301,
                uid: 0,
                gid: 0,
                time_ns: 21,
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
            Record::Atimes(vec![(9, 5), (300, -1)]),
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
            "0f09301300000000000000",
            "1002ac028003e807071400000000000000",
            "1102017103017201ad0200001500000000000000",
            "010464",
            "0c63020102016102016203020001070802090a",
            "0e9221e80707707974686f6e33023737",
            "1202090500000000000000ac02ffffffffffffffff",
        ];
        assert_eq!(recs.len(), pinned.len());
        for (r, hex) in recs.iter().zip(pinned) {
            encodes_as(r, hex);
        }
        // A Write's head is its payload without the data.
        let w = recs[5].encode();
        assert_eq!(write_head(9, 1 << 33, 12, 3), w[..w.len() - 3]);
    }

    /// More of every shape, pinned to the bytes the encoder wrote before
    /// the records became one table (extremes of every integer, empty
    /// bytes, a device, both optional shapes of `SetAttr`, empty inode map
    /// and requester); each decodes back to itself, and every proper
    /// prefix of it, and it with a byte more, is refused.
    #[test]
    fn edge_records_keep_their_bytes_and_no_prefix_decodes() {
        let recs = vec![
            Record::Create {
                parent: u64::MAX,
                name: vec![0xff; 3],
                ino: 1 << 63,
                kind: Kind::CharDev,
                perm: 0o7777,
                uid: u32::MAX,
                gid: 65534,
                rdev: (8 << 8) | 1,
                time_ns: i64::MIN,
                target: None,
            },
            Record::Create {
                parent: 2,
                name: b"d".to_vec(),
                ino: 4,
                kind: Kind::Dir,
                perm: 0o2755,
                uid: 1000,
                gid: 2000,
                rdev: 0,
                time_ns: 0,
                target: Some(Vec::new()),
            },
            Record::Rename {
                parent: 1,
                name: b"x".to_vec(),
                new_parent: 1,
                new_name: b"y".to_vec(),
                flags: RENAME_NOREPLACE,
                time_ns: i64::MAX,
            },
            Record::Write {
                ino: 1,
                offset: 0,
                time_ns: 0,
                data: vec![],
            },
            Record::SetAttr {
                ino: 7,
                perm: None,
                uid: None,
                gid: None,
                atime: None,
                mtime: None,
                ctime: 0,
            },
            Record::SetAttr {
                ino: 7,
                perm: Some(0o4755),
                uid: Some(0),
                gid: Some(u32::MAX),
                atime: Some(i64::MIN),
                mtime: Some(i64::MAX),
                ctime: -1,
            },
            Record::SetXattr {
                ino: 3,
                name: b"trusted.z".to_vec(),
                value: vec![],
                flags: XATTR_REPLACE,
                time_ns: 1,
            },
            Record::InodeMap(InodeMap::default()),
            Record::Who(Who::default()),
        ];
        // Written by the encoder of 696d78b (before `records!`).
        let pinned = [
            "02ffffffffffffffffff0103ffffff8080808080808080800105ff1fffffffff0ffeff038110000000000000008000",
            "020201640402ed0be807d00f0000000000000000000100",
            "0501017801017901ffffffffffffff7f",
            "060100000000000000000000",
            "0907000000000000000000",
            "09071fed1300ffffffff0f0000000000000080ffffffffffffff7fffffffffffffffff",
            "0a0309747275737465642e7a00020100000000000000",
            "0c00000000",
            "0e00000000",
        ];
        assert_eq!(recs.len(), pinned.len());
        for (r, hex) in recs.iter().zip(pinned) {
            let e = encodes_as(r, hex);
            for n in 0..e.len() {
                assert_eq!(Record::decode(&e[..n]), None, "{r:?} cut at {n}");
            }
            let mut longer = e.clone();
            longer.push(0);
            assert_eq!(Record::decode(&longer), None, "{r:?} and a byte");
        }
    }

    /// What decoding refuses: an unknown tag, a `SetAttr` mask bit past its
    /// five fields, a bad option tag, a u32 field over 32 bits.
    #[test]
    fn malformed_records_are_refused() {
        assert_eq!(Record::decode(&[0]), None, "tag 0");
        assert_eq!(Record::decode(&[15, 0]), None, "tag 15");
        // SetAttr ino 7, mask 0x20 (a sixth field), ctime.
        let mut bad_mask = vec![9, 7, 0x20];
        bad_mask.extend_from_slice(&0i64.to_le_bytes());
        assert_eq!(Record::decode(&bad_mask), None);
        bad_mask[2] = 0;
        assert!(Record::decode(&bad_mask).is_some(), "mask 0 is fine");
        // Create with its option tag 2.
        let mut create = Record::Create {
            parent: 1,
            name: b"a".to_vec(),
            ino: 2,
            kind: Kind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            time_ns: 0,
            target: None,
        }
        .encode();
        *create.last_mut().unwrap() = 2;
        assert_eq!(Record::decode(&create), None);
        // Who with a pid of 2^32.
        let mut who = vec![14];
        put_var(&mut who, 1 << 32);
        who.extend_from_slice(&[0, 0, 0]);
        assert_eq!(Record::decode(&who), None);
    }

    /// `inodes()`: what each kind names, in order.
    #[test]
    fn records_name_what_replay_brings_back() {
        let rename = Record::Rename {
            parent: 2,
            name: b"q".to_vec(),
            new_parent: 3,
            new_name: b"r".to_vec(),
            flags: 0,
            time_ns: 0,
        };
        assert_eq!(
            rename.inodes(),
            [
                Named::Dir(2),
                Named::Dir(3),
                Named::Entry(2, b"q"),
                Named::Entry(3, b"r")
            ]
        );
        let link = Record::Link {
            ino: 5,
            parent: 2,
            name: b"n".to_vec(),
            time_ns: 0,
        };
        assert_eq!(link.inodes(), [Named::Inode(5), Named::Dir(2)]);
        let load = Record::LoadDir {
            dir: 4,
            first_ino: 9,
        };
        assert_eq!(load.inodes(), []);
    }

    /// The inode map written part by part is the record's payload.
    #[test]
    fn inode_map_writer_writes_the_records_payload() {
        let map = InodeMap {
            next_ino: 300,
            dirs: vec![(1, vec![(b"a".to_vec(), 2)]), (2, vec![])],
            links: vec![(7, 2)],
            orphans: vec![299],
        };
        let mut w = InodeMapWriter::new(map.next_ino, map.dirs.len(), 0);
        for (d, kids) in &map.dirs {
            w.dir(*d, kids.len(), kids.iter().map(|(n, i)| (&n[..], *i)));
        }
        let bytes = w.finish(&map.links, &map.orphans);
        assert_eq!(bytes, Record::InodeMap(map).encode());
    }
}
