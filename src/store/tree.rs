//! Trees: one object per directory, listing its entries with everything `stat`,
//! `readlink` and `getxattr` can show. Binary, versioned, documented in docs/format.md.
//!
//! A checkpoint points at a *root tree*: a tree with exactly one entry, named "",
//! which is the root directory itself (so the root keeps its own mode, owner,
//! times and xattrs like any other directory).

use super::id::ObjectId;

/// Magic and version at the start of every tree object.
pub const TREE_MAGIC: &[u8; 4] = b"SFT1";

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
    fn from_u8(v: u8) -> Option<Kind> {
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
        put_varint(&mut out, self.entries.len() as u64);
        for e in &self.entries {
            put_bytes(&mut out, &e.name);
            out.push(e.kind as u8);
            put_varint(&mut out, e.perm as u64);
            put_varint(&mut out, e.uid as u64);
            put_varint(&mut out, e.gid as u64);
            out.extend_from_slice(&e.mtime_ns.to_le_bytes());
            out.extend_from_slice(&e.ctime_ns.to_le_bytes());
            put_varint(&mut out, e.size);
            put_varint(&mut out, e.nlink as u64);
            put_varint(&mut out, e.link_id);
            put_varint(&mut out, e.rdev);
            put_varint(&mut out, e.xattrs.len() as u64);
            for (k, v) in &e.xattrs {
                put_bytes(&mut out, k);
                put_bytes(&mut out, v);
            }
            match &e.content {
                Content::None => out.push(0),
                Content::Extents(ext) => {
                    out.push(1);
                    put_varint(&mut out, ext.len() as u64);
                    for x in ext {
                        put_varint(&mut out, x.len);
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
        let mut r = Reader { data, pos: 0 };
        if r.take(4)? != TREE_MAGIC {
            return Err(DecodeError("bad magic"));
        }
        let n = r.varint()?;
        // Each entry takes at least 20 bytes: refuse counts the data cannot hold.
        if n > (data.len() as u64) / 20 + 1 {
            return Err(DecodeError("entry count larger than the object"));
        }
        let mut entries = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = r.bytes()?.to_vec();
            let kind = Kind::from_u8(r.u8()?).ok_or(DecodeError("unknown kind"))?;
            let perm = r.varint_u32()?;
            let uid = r.varint_u32()?;
            let gid = r.varint_u32()?;
            let mtime_ns = r.i64()?;
            let ctime_ns = r.i64()?;
            let size = r.varint()?;
            let nlink = r.varint_u32()?;
            let link_id = r.varint()?;
            let rdev = r.varint()?;
            let nx = r.varint()?;
            let mut xattrs = Vec::new();
            for _ in 0..nx {
                let k = r.bytes()?.to_vec();
                let v = r.bytes()?.to_vec();
                xattrs.push((k, v));
            }
            let content = match r.u8()? {
                0 => Content::None,
                1 => {
                    let ne = r.varint()?;
                    if ne > (data.len() - r.pos) as u64 {
                        return Err(DecodeError("extent count larger than the object"));
                    }
                    let mut ext = Vec::with_capacity(ne as usize);
                    for _ in 0..ne {
                        let len = r.varint()?;
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
                content,
            });
        }
        if r.pos != data.len() {
            return Err(DecodeError("trailing bytes"));
        }
        Ok(Tree { entries })
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or(DecodeError("truncated"))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    fn id(&mut self) -> Result<ObjectId, DecodeError> {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.take(32)?);
        Ok(ObjectId(id))
    }
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError("varint too long"))
    }
    fn varint_u32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError("value out of range"))
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| DecodeError("length out of range"))?;
        self.take(n)
    }
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
