//! The read-only filesystem over one checkpoint, on inode numbers. No FUSE types
//! here: `fuse.rs` adapts these calls to fuser, and errors are `FsError`s that
//! `errno()` maps.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use super::FsError;
use super::inode::{Children, Found, InodeTable, NODE_BYTES, Node, data_ranges};
use crate::journal::ext4;
use crate::store::{ChunkCache, Content, Entry, Kind, ObjectId, Stats, Store};

/// The block size reported by `stat` and `statfs`.
pub const BLOCK_SIZE: u32 = 4096;
/// The longest name `statfs` admits to.
const NAME_MAX: u32 = 255;

/// What `stat` shows of an inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    /// Permission bits including setuid, setgid and sticky.
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte blocks as ext4 would allocate them ([`ext4`]).
    pub blocks: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// Device number in the kernel's 32-bit encoding.
    pub rdev: u32,
}

/// One directory entry handed to a `readdir` callback.
pub struct DirItem<'a> {
    /// The offset that resumes the listing after this entry.
    pub next_offset: u64,
    pub name: &'a [u8],
    pub attr: Attr,
}

/// The answer to `getxattr`/`listxattr`: the size (for a size-0 probe) or the bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// What `statfs` reports.
#[derive(Debug)]
pub struct FsStats {
    pub blocks: u64,
    pub files: u64,
    pub block_size: u32,
    pub name_max: u32,
}

/// A checkpoint's tree, served read-only.
pub struct ReadOnlyFs {
    store: Arc<Store>,
    inodes: InodeTable,
    /// Decompressed chunks; a browse mount shares one cache between its trees.
    cache: Arc<ChunkCache>,
    /// Where the tree is mounted, to name files in log lines.
    mountpoint: PathBuf,
    stats: Option<Stats>,
}

impl ReadOnlyFs {
    /// Serve the tree under `root` (a checkpoint's root directory entry), keeping
    /// up to `cache_bytes` of decompressed chunks in memory, and directory
    /// entries for about a quarter of that again ([`inode_budget`]).
    pub fn new(
        store: Arc<Store>,
        root: Entry,
        cache_bytes: usize,
        mountpoint: PathBuf,
        stats: Option<Stats>,
    ) -> ReadOnlyFs {
        let cache = Arc::new(ChunkCache::new(cache_bytes));
        let budget = inode_budget(cache_bytes);
        ReadOnlyFs::with_cache(store, root, cache, budget, mountpoint, stats)
    }

    /// Serve the tree under `root` with a chunk cache shared with other trees
    /// (a browse mount serves many checkpoints from one cache), keeping about
    /// `inode_budget` directory entries in memory.
    pub fn with_cache(
        store: Arc<Store>,
        root: Entry,
        cache: Arc<ChunkCache>,
        inode_budget: usize,
        mountpoint: PathBuf,
        stats: Option<Stats>,
    ) -> ReadOnlyFs {
        ReadOnlyFs {
            store,
            inodes: InodeTable::new(root, inode_budget),
            cache,
            mountpoint,
            stats,
        }
    }

    /// The entry `name` in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr, FsError> {
        let dir = self.node(parent)?;
        let children = self.children(&dir)?;
        let ino = match name {
            b"." => dir.ino,
            b".." => dir.parent,
            _ => children
                .binary_search_by(|(n, _)| n.as_slice().cmp(name))
                .map(|i| children[i].1)
                .map_err(|_| FsError::NotFound)?,
        };
        Ok(self.attr(&*self.node(ino)?))
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        Ok(self.attr(&*self.node(ino)?))
    }

    /// List directory `ino` from `offset` (0 = start; "." and ".." come first),
    /// calling `add` for each entry until it returns true (the reply is full).
    pub fn readdir(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(DirItem<'_>) -> bool,
    ) -> Result<(), FsError> {
        let dir = self.node(ino)?;
        let children = self.children(&dir)?;
        let parent = self.node(dir.parent)?;
        let dots: [(&[u8], &Node); 2] = [(b".", &dir), (b"..", &parent)];
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        self.prefetch_subdirs(&children, start.saturating_sub(dots.len()));
        for i in start..dots.len().saturating_add(children.len()) {
            let next_offset = i as u64 + 1;
            let item = match dots.get(i) {
                Some(&(name, node)) => DirItem {
                    next_offset,
                    name,
                    attr: self.attr(node),
                },
                None => {
                    let Some((name, child)) = children.get(i - dots.len()) else {
                        break;
                    };
                    DirItem {
                        next_offset,
                        name,
                        attr: self.attr(&*self.node(*child)?),
                    }
                }
            };
            if add(item) {
                break;
            }
        }
        Ok(())
    }

    /// What `stat` shows for a node: sizes and blocks as ext4 would have them
    /// ([`ext4`]); symlinks are always `rwxrwxrwx`, as on Linux, whatever
    /// mode the tree recorded.
    fn attr(&self, node: &Node) -> Attr {
        let e = &node.entry;
        let min_links = if e.kind == Kind::Dir { 2 } else { 1 };
        let (size, blocks) = match e.kind {
            Kind::Dir => self.dir_size(node),
            _ => (e.size, node.blocks),
        };
        let perm = match e.kind {
            Kind::Symlink => 0o777,
            _ => (e.perm & 0o7777) as u16,
        };
        Attr {
            ino: node.ino,
            kind: e.kind,
            perm,
            nlink: e.nlink.max(min_links),
            uid: e.uid,
            gid: e.gid,
            size,
            blocks,
            mtime_ns: e.mtime_ns,
            ctime_ns: e.ctime_ns,
            rdev: kernel_dev(e.rdev),
        }
    }

    /// A subdirectory's attributes need its tree (for its size): tell the
    /// store which trees the next entries listed from `first` on will read,
    /// so a lazy store fetches them together rather than one at a time.
    fn prefetch_subdirs(&self, children: &Children, first: usize) {
        let trees: Vec<ObjectId> = children
            .iter()
            .skip(first)
            .take(PREFETCH_SUBDIRS)
            .filter_map(|(_, ino)| match self.inodes.get(*ino) {
                Found::Node(n) if self.inodes.children(n.ino).is_none() => n.entry.tree_id(),
                _ => None,
            })
            .collect();
        self.store.prefetch(&trees);
    }

    /// A directory's `(st_size, st_blocks)` from its entries' names; one
    /// block when its tree cannot be read (that failure was logged, and
    /// listing it fails).
    fn dir_size(&self, dir: &Node) -> (u64, u64) {
        match self.children(dir) {
            Ok(children) => ext4::dir_size(children.iter().map(|(name, _)| name.len())),
            Err(_) => ext4::dir_size([]),
        }
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE` on file `ino`, from its extents
    /// as ext4 would report them ([`ext4::seek`]); `None` is `ENXIO`.
    pub fn seek(&self, ino: u64, offset: i64, whence: ext4::Seek) -> Result<Option<u64>, FsError> {
        let node = self.node(ino)?;
        match (&node.entry.content, &node.extent_starts) {
            (Content::Extents(extents), Some(starts)) => {
                let from = u64::try_from(offset).unwrap_or(0);
                let from = from - from % ext4::BLOCK;
                let ranges = data_ranges(extents, starts, from);
                Ok(ext4::seek(node.entry.size, ranges, offset, whence))
            }
            (Content::Extents(_), None) => {
                Err(self.malformed(&node, "extent lengths do not add up to the size"))
            }
            _ if node.entry.kind == Kind::Dir => Err(FsError::IsDir),
            _ => Err(FsError::Invalid("not a regular file")),
        }
    }

    /// Check that `ino` may be opened with `flags` (the `open(2)` flags): any
    /// write access or `O_TRUNC` is refused.
    pub fn open(&self, ino: u64, flags: i32) -> Result<(), FsError> {
        self.node(ino)?;
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    /// Check `access(2)`: writing is refused; the kernel checks the mode bits
    /// (`default_permissions`).
    pub fn access(&self, ino: u64, mask: i32) -> Result<(), FsError> {
        self.node(ino)?;
        if mask & libc::W_OK != 0 {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    /// Up to `size` bytes of file `ino` from `offset`; empty at or past the end.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let node = self.node(ino)?;
        let (extents, starts) = match (&node.entry.content, &node.extent_starts) {
            (Content::Extents(extents), Some(starts)) => (extents, starts),
            (Content::Extents(_), None) => {
                return Err(self.malformed(&node, "extent lengths do not add up to the size"));
            }
            _ if node.entry.kind == Kind::Dir => return Err(FsError::IsDir),
            _ => return Err(self.malformed(&node, "read of a file without data")),
        };
        let file_size = node.entry.size;
        if offset >= file_size {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(u64::from(size)).min(file_size);
        let mut out = Vec::with_capacity((end - offset) as usize);
        // The last extent starting at or before `offset` holds it (starts[0] == 0).
        let mut index = starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let mut pos = offset;
        while pos < end {
            let (Some(extent), Some(&start)) = (extents.get(index), starts.get(index)) else {
                return Err(self.malformed(&node, "extents end before the size"));
            };
            let extent_end = start.saturating_add(extent.len);
            let from = pos - start;
            let to = end.min(extent_end) - start;
            match &extent.id {
                None => out.resize(out.len() + (to - from) as usize, 0),
                Some(id) => {
                    let chunk = self.chunk(&node, id, || next_chunks(extents, index))?;
                    if chunk.len() as u64 != extent.len {
                        return Err(self.malformed(&node, "chunk length differs from its extent"));
                    }
                    out.extend_from_slice(&chunk[from as usize..to as usize]);
                }
            }
            pos = start + to;
            index += 1;
        }
        Ok(out)
    }

    /// A symlink's target, byte-exact.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let node = self.node(ino)?;
        match (&node.entry.content, node.entry.kind) {
            (Content::Target(target), Kind::Symlink) => Ok(target.clone()),
            (_, Kind::Symlink) => Err(self.malformed(&node, "symlink without a target")),
            _ => Err(FsError::NotSymlink),
        }
    }

    /// The value of xattr `name`; `size` 0 asks for its length only.
    pub fn getxattr(&self, ino: u64, name: &[u8], size: u32) -> Result<XattrReply, FsError> {
        check_xattr_name(name)?;
        let node = self.node(ino)?;
        let value = node
            .entry
            .xattrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .ok_or(FsError::NoXattr)?;
        sized_reply(value.clone(), size)
    }

    /// The xattr names, each NUL-terminated; `size` 0 asks for the length only.
    pub fn listxattr(&self, ino: u64, size: u32) -> Result<XattrReply, FsError> {
        let node = self.node(ino)?;
        let mut names = Vec::new();
        for (k, _) in &node.entry.xattrs {
            names.extend_from_slice(k);
            names.push(0);
        }
        sized_reply(names, size)
    }

    /// Filesystem totals: the checkpoint's recorded size and entry count when
    /// known, else the inodes seen so far. Nothing is free: it is read-only.
    pub fn statfs(&self) -> FsStats {
        let (bytes, files) = match &self.stats {
            Some(s) => (s.bytes, s.entries),
            None => (0, self.inodes.len() as u64),
        };
        FsStats {
            blocks: bytes.div_ceil(u64::from(BLOCK_SIZE)),
            files,
            block_size: BLOCK_SIZE,
            name_max: NAME_MAX,
        }
    }

    /// The node of `ino`, loading its directory again if it was evicted.
    fn node(&self, ino: u64) -> Result<Arc<Node>, FsError> {
        match self.inodes.get(ino) {
            Found::Node(n) => Ok(n),
            Found::Evicted { dir, tree } => {
                self.load(dir, &tree)?;
                match self.inodes.get(ino) {
                    Found::Node(n) => Ok(n),
                    _ => Err(FsError::UnknownInode(ino)),
                }
            }
            Found::Unknown => Err(FsError::UnknownInode(ino)),
        }
    }

    /// The children of a directory, loading its tree object when they are
    /// not in memory (the first time, or after an eviction).
    fn children(&self, dir: &Node) -> Result<Arc<Children>, FsError> {
        if dir.entry.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        if let Some(children) = self.inodes.children(dir.ino) {
            return Ok(children);
        }
        let Content::Tree(id) = dir.entry.content else {
            return Err(self.malformed(dir, "directory without a tree"));
        };
        self.load(dir.ino, &id)
    }

    /// Read tree `id` of directory `dir` into the inode table.
    fn load(&self, dir: u64, id: &ObjectId) -> Result<Arc<Children>, FsError> {
        // Named from what is in memory: naming it fully could load more.
        let path = self.path_in_memory(dir);
        let tree = self
            .store
            .get_tree(id, &path)
            .map_err(|e| self.store_failure(&path, id, e))?;
        Ok(self.inodes.insert_children(dir, *id, tree.entries))
    }

    /// A file chunk: from the cache, else read, decompressed and verified.
    /// On a cache miss the store is told which chunks follow in the file
    /// (`following`), so a backend that fetches from a remote can prefetch them.
    fn chunk(
        &self,
        node: &Node,
        id: &ObjectId,
        following: impl FnOnce() -> Vec<ObjectId>,
    ) -> Result<Arc<Vec<u8>>, FsError> {
        if let Some(chunk) = self.cache.get(id) {
            return Ok(chunk);
        }
        self.store.prefetch(&following());
        let path = self.display_path(node.ino);
        let data = self
            .store
            .get_object(id, &path)
            .map_err(|e| self.store_failure(&path, id, e))?;
        let data = Arc::new(data);
        self.cache.insert(*id, data.clone());
        Ok(data)
    }

    /// Log a failed object read (corrupt, missing, I/O) with the file it was for.
    fn store_failure(&self, path: &str, id: &ObjectId, e: crate::store::Error) -> FsError {
        tracing::warn!(object = %id, path, error = %e, "object read failed; this read gets EIO");
        FsError::Store(e)
    }

    fn malformed(&self, node: &Node, detail: &'static str) -> FsError {
        let path = self.display_path(node.ino);
        tracing::warn!(path, detail, "malformed tree entry");
        FsError::Malformed { path, detail }
    }

    /// The absolute path of `ino` under the mountpoint, for messages; its
    /// directories are loaded again if they were evicted.
    fn display_path(&self, ino: u64) -> String {
        self.absolute(self.inodes.path_with(ino, |i| self.node(i).ok()))
    }

    /// The absolute path of `ino` from the directories in memory.
    fn path_in_memory(&self, ino: u64) -> String {
        self.absolute(self.inodes.path(ino))
    }

    /// `rel` (from the mount root; empty for the root) under the mountpoint.
    fn absolute(&self, rel: Vec<u8>) -> String {
        if rel.is_empty() {
            return self.mountpoint.display().to_string();
        }
        self.mountpoint
            .join(OsStr::from_bytes(&rel))
            .display()
            .to_string()
    }
}

/// How many entries ahead a listing hints at their subdirectories' trees.
const PREFETCH_SUBDIRS: usize = 128;

/// How many chunks after the one being read a miss hints at ([`Store::prefetch`]).
const PREFETCH_AHEAD: usize = 4;

/// The ids of the next [`PREFETCH_AHEAD`] data extents after extent `index`.
fn next_chunks(extents: &[crate::store::Extent], index: usize) -> Vec<ObjectId> {
    extents
        .iter()
        .skip(index + 1)
        .filter_map(|e| e.id)
        .take(PREFETCH_AHEAD)
        .collect()
}

/// Re-encode a userspace `dev_t` in the kernel's 32-bit `new_encode_dev` form,
/// which is what FUSE's `rdev` carries.
pub(super) fn kernel_dev(rdev: u64) -> u32 {
    let major = libc::major(rdev as libc::dev_t);
    let minor = libc::minor(rdev as libc::dev_t);
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// Reply with `data` if it fits in `size`, its length if `size` is 0, else ERANGE.
fn sized_reply(data: Vec<u8>, size: u32) -> Result<XattrReply, FsError> {
    let needed = u32::try_from(data.len()).map_err(|_| FsError::BufferTooSmall {
        given: size,
        needed: data.len(),
    })?;
    if size == 0 {
        Ok(XattrReply::Size(needed))
    } else if size < needed {
        Err(FsError::BufferTooSmall {
            given: size,
            needed: data.len(),
        })
    } else {
        Ok(XattrReply::Data(data))
    }
}

/// How many directory entries a mount keeps in memory for a chunk cache of
/// `cache_bytes`: about a quarter of that in bytes, and at least 4,096.
pub fn inode_budget(cache_bytes: usize) -> usize {
    (cache_bytes / 4 / NODE_BYTES).max(4096)
}

/// The xattr namespaces Linux file systems know. The kernel hands a FUSE
/// mount every name; ext4, xfs and tmpfs refuse a name outside these with
/// `EOPNOTSUPP` and a bare prefix with `EINVAL` (`xattr_resolve_name`), and so
/// do we, so a fork never holds an attribute `storefs restore` could not set, and a
/// checkpoint answers such a name as ext4 would.
const XATTR_NAMESPACES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

pub(super) fn check_xattr_name(name: &[u8]) -> Result<(), FsError> {
    match XATTR_NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        None => Err(FsError::Unsupported(
            "an xattr name outside user., trusted., security. and system.",
        )),
        Some(ns) if name.len() == ns.len() => {
            Err(FsError::Invalid("an xattr name that is only a namespace"))
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::inode::ROOT_INO;
    use crate::store::Extent;

    fn file(name: &str, size: u64, extents: Vec<Extent>) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind: Kind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            size,
            nlink: 1,
            link_id: 0,
            rdev: 0,
            xattrs: vec![(b"user.a".to_vec(), b"xyz".to_vec())],
            content: Content::Extents(extents),
        }
    }

    /// A store with a root holding the entries `build` makes, served from /m.
    fn serve_with(build: impl FnOnce(&Store) -> Vec<Entry>) -> (tempfile::TempDir, ReadOnlyFs) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_create(&dir.path().join("s")).unwrap();
        let mut tree = crate::store::Tree {
            entries: build(&store),
        };
        tree.sort();
        let (tid, _) = store.put_tree(&tree).unwrap();
        let mut root = file("", 0, vec![]);
        root.kind = Kind::Dir;
        root.content = Content::Tree(tid);
        let fs = ReadOnlyFs::new(Arc::new(store), root, 1 << 20, "/m".into(), None);
        (dir, fs)
    }

    fn serve(entries: Vec<Entry>) -> (tempfile::TempDir, ReadOnlyFs) {
        serve_with(|_| entries)
    }

    #[test]
    fn reads_cross_extents_and_holes() {
        let (_dir, fs) = serve_with(|store| {
            let (a, _) = store.put_object(b"aaaa").unwrap();
            let (b, _) = store.put_object(b"bb").unwrap();
            let extents = vec![
                Extent {
                    len: 4,
                    id: Some(a),
                },
                Extent { len: 3, id: None },
                Extent { len: 0, id: None },
                Extent {
                    len: 2,
                    id: Some(b),
                },
            ];
            vec![file("f", 9, extents)]
        });
        let ino = fs.lookup(ROOT_INO, b"f").unwrap().ino;
        assert_eq!(fs.read(ino, 0, 100).unwrap(), b"aaaa\0\0\0bb");
        assert_eq!(fs.read(ino, 3, 5).unwrap(), b"a\0\0\0b");
        assert_eq!(fs.read(ino, 7, 1).unwrap(), b"b");
        assert_eq!(fs.read(ino, 9, 10).unwrap(), b"");
        assert_eq!(fs.read(ino, u64::MAX, u32::MAX).unwrap(), b"");
        assert_eq!(fs.read(ino, 8, u32::MAX).unwrap(), b"b");
    }

    #[test]
    fn hostile_entries_are_errors() {
        let (_dir, fs) = serve(vec![
            file("short", 10, vec![Extent { len: 3, id: None }]),
            file(
                "missing",
                3,
                vec![Extent {
                    len: 3,
                    id: Some(ObjectId::of(b"absent")),
                }],
            ),
        ]);
        let short = fs.lookup(ROOT_INO, b"short").unwrap().ino;
        assert!(matches!(
            fs.read(short, 0, 10),
            Err(FsError::Malformed { .. })
        ));
        let missing = fs.lookup(ROOT_INO, b"missing").unwrap().ino;
        assert!(matches!(fs.read(missing, 0, 10), Err(FsError::Store(_))));
        assert!(matches!(fs.readlink(missing), Err(FsError::NotSymlink)));
        assert!(matches!(fs.getattr(999), Err(FsError::UnknownInode(999))));
        assert!(matches!(
            fs.lookup(ROOT_INO, b"nope"),
            Err(FsError::NotFound)
        ));
        assert!(matches!(fs.lookup(short, b"x"), Err(FsError::NotDir)));
    }

    #[test]
    fn xattr_sizes_open_flags_and_access() {
        let (_dir, fs) = serve(vec![file("f", 0, vec![])]);
        let ino = fs.lookup(ROOT_INO, b"f").unwrap().ino;
        assert_eq!(fs.getxattr(ino, b"user.a", 0).unwrap(), XattrReply::Size(3));
        assert_eq!(
            fs.getxattr(ino, b"user.a", 3).unwrap(),
            XattrReply::Data(b"xyz".to_vec())
        );
        assert!(matches!(
            fs.getxattr(ino, b"user.a", 2),
            Err(FsError::BufferTooSmall { .. })
        ));
        assert!(matches!(
            fs.getxattr(ino, b"user.b", 9),
            Err(FsError::NoXattr)
        ));
        // As ext4: a name outside the namespaces, or a bare namespace.
        assert!(matches!(
            fs.getxattr(ino, b"a", 9),
            Err(FsError::Unsupported(_))
        ));
        assert!(matches!(
            fs.getxattr(ino, b"user.", 9),
            Err(FsError::Invalid(_))
        ));
        assert_eq!(fs.listxattr(ino, 0).unwrap(), XattrReply::Size(7));
        assert!(fs.open(ino, libc::O_RDONLY).is_ok());
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
            assert!(matches!(fs.open(ino, flags), Err(FsError::ReadOnly)));
        }
        assert!(fs.access(ino, libc::R_OK).is_ok());
        assert!(matches!(fs.access(ino, libc::W_OK), Err(FsError::ReadOnly)));
    }

    #[test]
    fn readdir_resumes_at_offsets() {
        let (_dir, fs) = serve(vec![file("a", 0, vec![]), file("b", 0, vec![])]);
        let mut names = Vec::new();
        fs.readdir(ROOT_INO, 0, |item| {
            names.push((item.name.to_vec(), item.next_offset));
            names.len() == 2
        })
        .unwrap();
        assert_eq!(names, [(b".".to_vec(), 1), (b"..".to_vec(), 2)]);
        names.clear();
        fs.readdir(ROOT_INO, 2, |item| {
            names.push((item.name.to_vec(), item.next_offset));
            false
        })
        .unwrap();
        assert_eq!(names, [(b"a".to_vec(), 3), (b"b".to_vec(), 4)]);
        let mut none = 0;
        fs.readdir(ROOT_INO, u64::MAX, |_| {
            none += 1;
            false
        })
        .unwrap();
        assert_eq!(none, 0);
    }

    #[test]
    fn attributes_are_ext4s_and_seek_follows_the_extents() {
        use crate::journal::ext4::Seek;
        let (_dir, fs) = serve_with(|store| {
            let (a, _) = store.put_object(&[1; 5000]).unwrap();
            let (b, _) = store.put_object(b"bb").unwrap();
            let extents = vec![
                Extent {
                    len: 5000,
                    id: Some(a),
                },
                Extent {
                    len: 20000,
                    id: None,
                },
                Extent {
                    len: 2,
                    id: Some(b),
                },
            ];
            let mut link = file("link", 4, vec![]);
            link.kind = Kind::Symlink;
            link.perm = 0o755;
            link.content = Content::Target(b"f".to_vec());
            let mut long = link.clone();
            long.name = b"long".to_vec();
            long.content = Content::Target(vec![b'x'; 60]);
            vec![file("f", 25002, extents), link, long]
        });
        let f = fs.lookup(ROOT_INO, b"f").unwrap();
        // Blocks 0 and 1 (5000 bytes), and block 6 (the last 2 bytes).
        assert_eq!(f.blocks, 24);
        for (offset, whence, want) in [
            (0, Seek::Data, Some(0)),
            (0, Seek::Hole, Some(8192)),
            (8192, Seek::Data, Some(24576)),
            (24576, Seek::Hole, Some(25002)),
            (25001, Seek::Data, Some(25001)),
            (25002, Seek::Data, None),
            (25002, Seek::Hole, None),
            (-1, Seek::Hole, None),
        ] {
            assert_eq!(
                fs.seek(f.ino, offset, whence).unwrap(),
                want,
                "{offset} {whence:?}"
            );
        }
        let link = fs.lookup(ROOT_INO, b"link").unwrap();
        assert_eq!((link.perm, link.blocks), (0o777, 0), "as on Linux, fast");
        assert_eq!(fs.lookup(ROOT_INO, b"long").unwrap().blocks, 8);
        assert!(matches!(
            fs.seek(link.ino, 0, Seek::Data),
            Err(FsError::Invalid(_))
        ));
        let root = fs.getattr(ROOT_INO).unwrap();
        assert_eq!((root.size, root.blocks), (4096, 8));
        assert!(matches!(
            fs.seek(ROOT_INO, 0, Seek::Data),
            Err(FsError::IsDir)
        ));
    }

    #[test]
    fn device_numbers_use_the_kernel_encoding() {
        assert_eq!(kernel_dev(libc::makedev(8, 1)), 0x801);
        assert_eq!(kernel_dev(libc::makedev(1, 0x1234)), 0x120_0134);
    }
}
