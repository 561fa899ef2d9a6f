//! Trees: one object per directory, listing its entries with everything `stat`,
//! `readlink` and `getxattr` can show. Binary, versioned, documented in docs/format.md.
//!
//! A checkpoint points at a *root tree*: a tree with exactly one entry, named "",
//! which is the root directory itself (so the root keeps its own mode, owner,
//! times and xattrs like any other directory).

use super::codec::{Malformed, Reader, put_bytes, put_i64, put_var};
use super::id::ObjectId;

/// Magic and version at the start of every tree object.
pub const TREE_MAGIC: &[u8; 4] = b"SFT1";

/// Set in an entry's kind byte when a varint of inode flags follows it
/// ([`Entry::flags`]); an entry without flags is encoded as before flags
/// existed, so trees written earlier decode, and hash, the same.
const KIND_HAS_FLAGS: u8 = 0x80;

/// What kind of file an entry is. Sockets and devices are kept as metadata only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    Fifo = 4,
    CharDev = 5,
    BlockDev = 6,
    Socket = 7,
}

impl Kind {
    /// The kind stored as byte `v` (its discriminant) in trees and journal records.
    pub fn from_u8(v: u8) -> Option<Kind> {
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

    /// The kind in words, with its article, for messages: "a file", "a
    /// directory", "a character device"….
    pub fn described(self) -> &'static str {
        match self {
            Kind::File => "a file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symlink",
            Kind::Fifo => "a fifo",
            Kind::CharDev => "a character device",
            Kind::BlockDev => "a block device",
            Kind::Socket => "a socket",
        }
    }

    /// The S_IFMT bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
            Kind::Socket => libc::S_IFSOCK,
        }
    }

    /// The kind named by the S_IFMT bits of a `st_mode`.
    pub fn from_mode(mode: u32) -> Option<Kind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            libc::S_IFSOCK => Kind::Socket,
            _ => return None,
        })
    }
}

/// A run of a regular file: `len` bytes of object `id`, or a hole of `len` zero bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    /// `None` is a hole: zeros, not stored, and not allocated when restored.
    pub id: Option<ObjectId>,
}

/// What an entry holds besides its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// Fifos, devices, sockets.
    None,
    /// A regular file's extents, in order; their lengths add up to the size.
    Extents(Vec<Extent>),
    /// A directory's tree object.
    Tree(ObjectId),
    /// A symlink's target, byte-exact.
    Target(Vec<u8>),
}

/// One name in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Raw bytes: names need not be UTF-8.
    pub name: Vec<u8>,
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky (`st_mode & 07777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub size: u64,
    /// Link count within the checkpoint (1 unless hardlinked).
    pub nlink: u32,
    /// Entries with the same non-zero `link_id` are one inode (hardlinks).
    pub link_id: u64,
    /// Device number for character and block devices.
    pub rdev: u64,
    /// Extended attributes, sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Inode flags as `chattr` sets them (`FS_IOC_SETFLAGS`: only those of
    /// [`model::flags::KEPT`](super::model::flags::KEPT)); 0 for almost every entry.
    pub flags: u32,
    pub content: Content,
}

impl Entry {
    /// Bytes of the file that are stored (not holes): what `st_blocks` counts.
    pub fn allocated_bytes(&self) -> u64 {
        match &self.content {
            Content::Extents(ext) => ext
                .iter()
                .filter(|e| e.id.is_some())
                .fold(0u64, |acc, e| acc.saturating_add(e.len)),
            Content::Target(t) => t.len() as u64,
            _ => 0,
        }
    }

    /// The directory's tree id, if this is a directory.
    pub fn tree_id(&self) -> Option<ObjectId> {
        match self.content {
            Content::Tree(id) => Some(id),
            _ => None,
        }
    }
}

/// A directory's entries, sorted by name bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub entries: Vec<Entry>,
}

/// Why bytes could not be decoded as a tree.
#[derive(Debug, thiserror::Error)]
#[error("malformed tree object: {0}")]
pub struct DecodeError(pub &'static str);

impl From<Malformed> for DecodeError {
    fn from(m: Malformed) -> DecodeError {
        DecodeError(m.0)
    }
}

impl Tree {
    /// Find an entry by name (binary search; entries are sorted).
    pub fn get(&self, name: &[u8]) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Sort entries by name; call before encoding a tree built in any order.
    pub fn sort(&mut self) {
        self.entries.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// Encode to the binary tree format (entries must be sorted).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.entries.len() * 96);
        out.extend_from_slice(TREE_MAGIC);
        put_var(&mut out, self.entries.len() as u64);
        for e in &self.entries {
            put_bytes(&mut out, &e.name);
            if e.flags == 0 {
                out.push(e.kind as u8);
            } else {
                out.push(e.kind as u8 | KIND_HAS_FLAGS);
                put_var(&mut out, e.flags as u64);
            }
            put_var(&mut out, e.perm as u64);
            put_var(&mut out, e.uid as u64);
            put_var(&mut out, e.gid as u64);
            put_i64(&mut out, e.mtime_ns);
            put_i64(&mut out, e.ctime_ns);
            put_var(&mut out, e.size);
            put_var(&mut out, e.nlink as u64);
            put_var(&mut out, e.link_id);
            put_var(&mut out, e.rdev);
            put_var(&mut out, e.xattrs.len() as u64);
            for (k, v) in &e.xattrs {
                put_bytes(&mut out, k);
                put_bytes(&mut out, v);
            }
            match &e.content {
                Content::None => out.push(0),
                Content::Extents(ext) => {
                    out.push(1);
                    put_var(&mut out, ext.len() as u64);
                    for x in ext {
                        put_var(&mut out, x.len);
                        match &x.id {
                            Some(id) => {
                                out.push(1);
                                out.extend_from_slice(&id.0);
                            }
                            None => out.push(0),
                        }
                    }
                }
                Content::Tree(id) => {
                    out.push(2);
                    out.extend_from_slice(&id.0);
                }
                Content::Target(t) => {
                    out.push(3);
                    put_bytes(&mut out, t);
                }
            }
        }
        out
    }

    /// Decode a tree object. Never panics on hostile input.
    pub fn decode(data: &[u8]) -> Result<Tree, DecodeError> {
        let mut r = Reader::new(data);
        if r.take(4)? != TREE_MAGIC {
            return Err(DecodeError("bad magic"));
        }
        let n = r.var()?;
        // Each entry takes at least 20 bytes: refuse counts the data cannot hold.
        if n > (data.len() as u64) / 20 + 1 {
            return Err(DecodeError("entry count larger than the object"));
        }
        let mut entries = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = r.bytes()?.to_vec();
            let byte = r.u8()?;
            let kind = Kind::from_u8(byte & !KIND_HAS_FLAGS).ok_or(DecodeError("unknown kind"))?;
            let flags = match byte & KIND_HAS_FLAGS {
                0 => 0,
                _ => match r.var32()? {
                    0 => return Err(DecodeError("flags marked present but zero")),
                    f => f,
                },
            };
            let perm = r.var32()?;
            let uid = r.var32()?;
            let gid = r.var32()?;
            let mtime_ns = r.i64()?;
            let ctime_ns = r.i64()?;
            let size = r.var()?;
            let nlink = r.var32()?;
            let link_id = r.var()?;
            let rdev = r.var()?;
            let nx = r.var()?;
            let mut xattrs = Vec::new();
            for _ in 0..nx {
                let k = r.bytes()?.to_vec();
                let v = r.bytes()?.to_vec();
                xattrs.push((k, v));
            }
            let content = match r.u8()? {
                0 => Content::None,
                1 => {
                    let ne = r.var()?;
                    if ne > r.remaining() as u64 {
                        return Err(DecodeError("extent count larger than the object"));
                    }
                    let mut ext = Vec::with_capacity(ne as usize);
                    for _ in 0..ne {
                        let len = r.var()?;
                        let id = match r.u8()? {
                            0 => None,
                            1 => Some(r.id()?),
                            _ => return Err(DecodeError("bad extent tag")),
                        };
                        ext.push(Extent { len, id });
                    }
                    Content::Extents(ext)
                }
                2 => Content::Tree(r.id()?),
                3 => Content::Target(r.bytes()?.to_vec()),
                _ => return Err(DecodeError("bad content tag")),
            };
            entries.push(Entry {
                name,
                kind,
                perm,
                uid,
                gid,
                mtime_ns,
                ctime_ns,
                size,
                nlink,
                link_id,
                rdev,
                xattrs,
                flags,
                content,
            });
        }
        r.finish()?;
        Ok(Tree { entries })
    }
}

/// Every entry under tree `id` by path, in name order, each directory
/// before its entries and with its content `None` (tests). From a root tree
/// with `path` "", the root is "/" and its entries "/NAME".
#[cfg(test)]
pub(crate) fn flatten(store: &super::Store, id: &ObjectId, path: &str) -> Vec<(String, Entry)> {
    let mut out = Vec::new();
    for mut e in store.get_tree(id, "test").unwrap().entries {
        // The root tree holds the root entry, named "".
        let p = match path {
            "/" => format!("/{}", String::from_utf8_lossy(&e.name)),
            _ => format!("{path}/{}", String::from_utf8_lossy(&e.name)),
        };
        if let Content::Tree(sub) = e.content {
            e.content = Content::None;
            out.push((p.clone(), e));
            out.extend(flatten(store, &sub, &p));
        } else {
            out.push((p, e));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &[u8], kind: Kind, content: Content) -> Entry {
        Entry {
            name: name.to_vec(),
            kind,
            perm: 0o4755,
            uid: 1000,
            gid: 1001,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: -5,
            size: 3,
            nlink: 2,
            link_id: 7,
            rdev: 0x0801,
            xattrs: vec![(b"user.k".to_vec(), vec![0, 255, 1])],
            flags: 0,
            content,
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let id = ObjectId::of(b"x");
        let mut t = Tree {
            entries: vec![
                entry(
                    b"a",
                    Kind::File,
                    Content::Extents(vec![
                        Extent {
                            len: 3,
                            id: Some(id),
                        },
                        Extent {
                            len: 1 << 40,
                            id: None,
                        },
                    ]),
                ),
                entry(b"d", Kind::Dir, Content::Tree(id)),
                entry(b"l", Kind::Symlink, Content::Target(b"/abs/\xff".to_vec())),
                entry(b"\xffnot-utf8", Kind::Fifo, Content::None),
                entry(b"dev", Kind::CharDev, Content::None),
            ],
        };
        t.sort();
        let enc = t.encode();
        assert_eq!(Tree::decode(&enc).unwrap(), t);
        assert!(t.get(b"\xffnot-utf8").is_some());
        assert!(t.get(b"zz").is_none());
    }

    #[test]
    fn flags_ride_on_the_kind_byte_and_an_entry_without_is_encoded_as_before() {
        let id = ObjectId::of(b"x");
        let plain = Tree {
            entries: vec![entry(b"d", Kind::Dir, Content::Tree(id))],
        };
        let before = plain.encode();
        // name "d", then the kind byte alone: what a tree without flags
        // always had (its bytes, and so its id, unchanged).
        assert_eq!(&before[4..8], &[1, 1, b'd', Kind::Dir as u8]);
        let mut flagged = plain.clone();
        flagged.entries[0].flags = 0x30;
        let enc = flagged.encode();
        assert_eq!(&enc[4..9], &[1, 1, b'd', Kind::Dir as u8 | 0x80, 0x30]);
        assert_eq!(enc.len(), before.len() + 1);
        assert_eq!(Tree::decode(&enc).unwrap(), flagged);
        assert_eq!(Tree::decode(&before).unwrap(), plain);
        // Flags marked present but zero: not the one encoding, refused.
        let mut zero = enc.clone();
        zero[8] = 0;
        assert!(Tree::decode(&zero).is_err());
        // An unknown kind with the flag bit is still an unknown kind.
        let mut bad = enc.clone();
        bad[7] = 0x80 | 9;
        assert!(Tree::decode(&bad).is_err());
    }

    #[test]
    fn hostile_bytes_are_errors_not_panics() {
        let id = ObjectId::of(b"x");
        let t = Tree {
            entries: vec![entry(b"a", Kind::Dir, Content::Tree(id))],
        };
        let enc = t.encode();
        for cut in 0..enc.len() {
            assert!(Tree::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = TREE_MAGIC.to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(Tree::decode(&huge).is_err());
        let mut extra = enc.clone();
        extra.push(0);
        assert!(Tree::decode(&extra).is_err());
    }
}
