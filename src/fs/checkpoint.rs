//! The checkpoint view: one checkpoint's tree, read-only, on inode numbers
//! ([`View`]). It owns the inode table and the chunk cache of the tree; it
//! never writes (the [`View`] defaults refuse every write).
//!
//! A checkpoint never changes: entries and attributes live a day in the
//! kernel's caches, opens and `opendir`s are zero-message, and the kernel
//! keeps page and directory caches.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::caches::Caches;
use super::inode::{Children, Found, InodeTable, Node, data_ranges};
use super::view::{
    self, AddItem, BLOCK_SIZE, Caller, Capability, DirItem, Entry, Opened, Readdir, View,
    XattrReply,
};
use super::{FsError, Result};
use crate::store::model::{Attr, NAME_MAX, Posix, StatFs, ext4};
use crate::store::readahead::{DROP_BEHIND, ReadAhead};
use crate::store::{self, ChunkCache, Content, Kind, ObjectId, Stats, Store};

/// How long the kernel may cache entries and attributes: a checkpoint never
/// changes, so this is long.
pub const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A checkpoint's tree, served read-only.
pub struct CheckpointView {
    store: Arc<Store>,
    inodes: InodeTable,
    /// Decompressed chunks; a browse mount shares one cache between its trees.
    cache: Arc<ChunkCache>,
    /// Sequential reads: the next chunks, read on worker threads into `cache`.
    readahead: ReadAhead,
    /// Where the tree is mounted, to name files in log lines.
    mountpoint: PathBuf,
    stats: Option<Stats>,
    /// Its inodes' generation ([`View::generation`]): numbers are handed
    /// out as directories are first listed, so they are this mount's own.
    generation: u64,
}

impl CheckpointView {
    /// Serve the tree under `root` (a checkpoint's root directory entry),
    /// keeping chunks and directories in `caches` (a browse mount shares
    /// them between its trees).
    pub fn new(
        store: Arc<Store>,
        root: store::Entry,
        caches: &Caches,
        mountpoint: PathBuf,
        stats: Option<Stats>,
    ) -> CheckpointView {
        CheckpointView {
            store,
            inodes: InodeTable::new(root, caches.dirs.clone()),
            readahead: ReadAhead::new(caches.chunks.capacity()),
            cache: caches.chunks.clone(),
            mountpoint,
            stats,
            generation: view::mount_generation(),
        }
    }

    /// A node's attributes, cached for [`TTL`].
    fn entry(&self, node: &Node) -> Entry {
        Entry {
            attr: self.attr(node),
            ttl: TTL,
        }
    }

    /// What `stat` shows for a node: sizes and blocks as ext4 would have them
    /// ([`ext4`]); symlinks are always `rwxrwxrwx`, as on Linux, whatever
    /// mode the tree recorded. A tree records no access time: it shows the
    /// modification time.
    fn attr(&self, node: &Node) -> Attr {
        let e = &node.entry;
        let min_links = if e.kind == Kind::Dir { 2 } else { 1 };
        let (size, blocks) = match e.kind {
            Kind::Dir => self.dir_size(node),
            _ => (e.size, node.blocks),
        };
        let perm = match e.kind {
            Kind::Symlink => 0o777,
            _ => e.perm & 0o7777,
        };
        Attr {
            ino: node.ino,
            kind: e.kind,
            perm,
            nlink: e.nlink.max(min_links),
            uid: e.uid,
            gid: e.gid,
            rdev: e.rdev,
            size,
            blocks,
            atime_ns: e.mtime_ns,
            mtime_ns: e.mtime_ns,
            ctime_ns: e.ctime_ns,
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

    /// A regular file's extents and where each starts; `other` is the error
    /// for a node that is neither a file nor a directory.
    fn extents<'n>(
        &self,
        node: &'n Node,
        other: impl FnOnce() -> FsError,
    ) -> Result<(&'n [store::Extent], &'n [u64])> {
        match (&node.entry.content, &node.extent_starts) {
            (Content::Extents(extents), Some(starts)) => Ok((extents, starts)),
            (Content::Extents(_), None) => {
                Err(self.malformed(node, "extent lengths do not add up to the size"))
            }
            _ if node.entry.kind == Kind::Dir => Err(Posix::IsDir.into()),
            _ => Err(other()),
        }
    }

    /// The node of `ino`, loading its directory again if it was evicted.
    /// The directory cache is shared (a browse mount's trees, other
    /// threads): one just loaded can be evicted again before it is used, so
    /// this tries a few times.
    fn node(&self, ino: u64) -> Result<Arc<Node>> {
        for _ in 0..LOAD_TRIES {
            match self.inodes.get(ino) {
                Found::Node(n) => return Ok(n),
                Found::Evicted { dir, tree } => self.load(dir, &tree)?,
                Found::Unknown => break,
            };
        }
        Err(FsError::UnknownInode(ino))
    }

    /// The children of a directory, loading its tree object when they are
    /// not in memory (the first time, or after an eviction).
    fn children(&self, dir: &Node) -> Result<Arc<Children>> {
        if dir.entry.kind != Kind::Dir {
            return Err(Posix::NotDir.into());
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
    fn load(&self, dir: u64, id: &ObjectId) -> Result<Arc<Children>> {
        // Named from what is in memory: naming it fully could load more.
        let path = self.path_in_memory(dir);
        let tree = self
            .store
            .get_tree(id, &path)
            .map_err(|e| self.store_failure(&path, id, e))?;
        Ok(self.inodes.insert_children(dir, *id, tree.entries))
    }

    /// A file chunk: from the cache, else read, decompressed and verified
    /// ([`ReadAhead::fetch`]). On a cache miss the store is told which
    /// chunks follow in the file (`following`), so a backend that fetches
    /// from a remote can prefetch them.
    fn chunk(
        &self,
        node: &Node,
        id: &ObjectId,
        following: impl FnOnce() -> Vec<ObjectId>,
    ) -> Result<Arc<Vec<u8>>> {
        self.readahead
            .fetch(
                &self.store,
                &self.cache,
                id,
                || self.display_path(node.ino),
                following,
            )
            .map_err(|e| self.store_failure(&self.display_path(node.ino), id, e))
    }

    /// A random read of a small part (`range`) of a chunk of `len` bytes that
    /// is not in the cache: just that part, decompressing only the frames
    /// it touches ([`Store::read_range`]). `None` for sequential reads, large
    /// parts, and chunks that cannot be read in part: read the whole chunk.
    fn piece(
        &self,
        node: &Node,
        id: &ObjectId,
        len: u64,
        range: std::ops::Range<u64>,
        sequential: bool,
    ) -> Result<Option<Vec<u8>>> {
        if sequential || (range.end - range.start).saturating_mul(PART_OF_CHUNK) > len {
            return Ok(None);
        }
        self.readahead
            .part(&self.store, &self.cache, id, Some(len), range)
            .map_err(|e| {
                let path = self.display_path(node.ino);
                self.store_failure(&path, id, e)
            })
    }

    /// A sequential read, `run` reads in a row, reached extent `index` of
    /// `extents`: the data extents after it go to the read-ahead workers.
    fn read_ahead(&self, extents: &[store::Extent], index: usize, run: u32) {
        let upcoming = extents[index + 1..]
            .iter()
            .filter_map(|e| e.id.map(|id| (id, e.len)));
        self.readahead
            .ahead(&self.store, &self.cache, run, upcoming);
    }

    /// A sequential read reached `offset`: the chunks that end
    /// [`DROP_BEHIND`] or more before it leave the cache
    /// ([`ReadAhead::drop_behind`]).
    fn drop_behind(&self, extents: &[store::Extent], starts: &[u64], offset: u64) {
        let Some(behind) = offset.checked_sub(DROP_BEHIND) else {
            return;
        };
        // Extents are contiguous: those ending at or before `behind` are the
        // ones before the extent holding it. Only the last few: the ones
        // before went at earlier reads.
        let ended = starts.partition_point(|&s| s <= behind).saturating_sub(1);
        let passed = extents[..ended]
            .iter()
            .rev()
            .take(DROP_SCAN)
            .filter_map(|e| e.id);
        self.readahead.drop_behind(&self.cache, passed);
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

impl View for CheckpointView {
    fn capabilities(&self) -> &'static [Capability] {
        view::READ_ONLY_CAPABILITIES
    }

    /// A checkpoint never changes: a name absent now is absent for good.
    fn negative_ttl(&self, _parent: u64) -> Option<Duration> {
        Some(TTL)
    }

    fn generation(&self) -> u64 {
        self.generation
    }

    /// `"."` in any inode (a file too) and `".."` in a directory answer by
    /// number: how the kernel resolves a file handle whose inode it forgot.
    fn lookup(&self, _: &Caller, parent: u64, name: &[u8]) -> Result<Entry> {
        let dir = self.node(parent)?;
        if name == b"." {
            return Ok(self.entry(&dir));
        }
        let children = self.children(&dir)?;
        let ino = match name {
            b".." => dir.parent,
            _ => children
                .binary_search_by(|(n, _)| n.as_slice().cmp(name))
                .map(|i| children[i].1)
                .map_err(|_| Posix::NotFound)?,
        };
        Ok(self.entry(&*self.node(ino)?))
    }

    fn getattr(&self, _: &Caller, ino: u64) -> Result<Entry> {
        Ok(self.entry(&*self.node(ino)?))
    }

    /// A symlink's target, byte-exact.
    fn readlink(&self, _: &Caller, ino: u64) -> Result<Vec<u8>> {
        let node = self.node(ino)?;
        match (&node.entry.content, node.entry.kind) {
            (Content::Target(target), Kind::Symlink) => Ok(target.clone()),
            (_, Kind::Symlink) => Err(self.malformed(&node, "symlink without a target")),
            _ => Err(Posix::NotSymlink.into()),
        }
    }

    /// Reading needs no per-open state; any write access or `O_TRUNC` is refused.
    fn open(&self, _: &Caller, ino: u64, flags: i32) -> Result<Opened> {
        self.node(ino)?;
        view::open_read_only(flags)
    }

    fn read(&self, _: &Caller, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let node = self.node(ino)?;
        let (extents, starts) = self.extents(&node, || {
            self.malformed(&node, "read of a file without data")
        })?;
        let file_size = node.entry.size;
        if offset >= file_size {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(u64::from(size)).min(file_size);
        let mut out = Vec::with_capacity((end - offset) as usize);
        // The last extent starting at or before `offset` holds it (starts[0] == 0).
        let mut index = starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let run = self.readahead.sequential(ino, offset, end);
        let sequential = run > 0;
        if sequential {
            let last = starts.partition_point(|&s| s < end).saturating_sub(1);
            self.read_ahead(extents, last, run);
            self.drop_behind(extents, starts, offset);
        }
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
                Some(id) => match self.piece(&node, id, extent.len, from..to, sequential)? {
                    Some(piece) => out.extend_from_slice(&piece),
                    None => {
                        let chunk = self.chunk(&node, id, || next_chunks(extents, index))?;
                        if chunk.len() as u64 != extent.len {
                            return Err(
                                self.malformed(&node, "chunk length differs from its extent")
                            );
                        }
                        out.extend_from_slice(&chunk[from as usize..to as usize]);
                    }
                },
            }
            pos = start + to;
            index += 1;
        }
        Ok(out)
    }

    /// From the file's extents as ext4 would report them ([`ext4::seek`]).
    fn seek(&self, _: &Caller, ino: u64, offset: i64, whence: ext4::Seek) -> Result<Option<u64>> {
        let node = self.node(ino)?;
        let (extents, starts) = self.extents(&node, || {
            FsError::Posix(Posix::Invalid("not a regular file"))
        })?;
        let from = u64::try_from(offset).unwrap_or(0);
        let from = from - from % ext4::BLOCK;
        let ranges = data_ranges(extents, starts, from);
        Ok(ext4::seek(node.entry.size, ranges, offset, whence))
    }

    /// Zero-message `opendir`: the kernel keeps every directory's listing.
    fn opendir(&self, _: &Caller, ino: u64) -> Result<Opened> {
        match self.node(ino)?.entry.kind {
            Kind::Dir => Ok(Opened::Stateless),
            _ => Err(Posix::NotDir.into()),
        }
    }

    /// Every item carries its attributes, asked for or not.
    fn readdir(&self, _: &Caller, ino: u64, at: Readdir, add: &mut AddItem<'_>) -> Result<()> {
        let dir = self.node(ino)?;
        let children = self.children(&dir)?;
        let parent = self.node(dir.parent)?;
        let dots: [(&[u8], &Node); 2] = [(b".", &dir), (b"..", &parent)];
        let start = usize::try_from(at.offset).unwrap_or(usize::MAX);
        self.prefetch_subdirs(&children, start.saturating_sub(dots.len()));
        for i in start..dots.len().saturating_add(children.len()) {
            let next_offset = i as u64 + 1;
            let item = match dots.get(i) {
                Some(&(name, node)) => DirItem::with(next_offset, name, self.entry(node)),
                None => {
                    let Some((name, child)) = children.get(i - dots.len()) else {
                        break;
                    };
                    DirItem::with(next_offset, name, self.entry(&*self.node(*child)?))
                }
            };
            if add(item) {
                break;
            }
        }
        Ok(())
    }

    /// Filesystem totals: the checkpoint's recorded size and entry count when
    /// known, else the inodes seen so far. Nothing is free: it is read-only.
    fn statfs(&self, _: &Caller) -> Result<StatFs> {
        let (bytes, files) = match &self.stats {
            Some(s) => (s.bytes, s.entries),
            None => (0, self.inodes.len() as u64),
        };
        Ok(StatFs {
            blocks: bytes.div_ceil(u64::from(BLOCK_SIZE)),
            blocks_free: 0,
            blocks_avail: 0,
            block_size: BLOCK_SIZE,
            files,
            files_free: 0,
            name_max: NAME_MAX as u32,
        })
    }

    /// The flags the checkpoint's tree keeps for the entry.
    fn get_flags(&self, _: &Caller, ino: u64) -> Result<u32> {
        Ok(self.node(ino)?.entry.flags)
    }

    fn getxattr(&self, _: &Caller, ino: u64, name: &[u8], size: u32) -> Result<XattrReply> {
        view::check_xattr_name(name)?;
        let node = self.node(ino)?;
        let value = node
            .entry
            .xattrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .ok_or(Posix::NoXattr)?;
        view::sized(value.clone(), size)
    }

    fn listxattr(&self, _: &Caller, ino: u64, size: u32) -> Result<XattrReply> {
        let node = self.node(ino)?;
        let names = view::xattr_list(node.entry.xattrs.iter().map(|(k, _)| k.as_slice()));
        view::sized(names, size)
    }

    fn access(&self, _: &Caller, ino: u64, mask: i32) -> Result<()> {
        self.node(ino)?;
        view::access_read_only(mask)
    }
}

/// How many times [`CheckpointView::node`] loads an evicted directory.
const LOAD_TRIES: usize = 4;

/// How many entries ahead a listing hints at their subdirectories' trees:
/// more than one readdir reply holds (the kernel asks for up to 128 KiB, a
/// few hundred entries with attributes), so no subdirectory a reply lists is
/// read before it was hinted (with 128, a walk over a lazy mount of 256
/// subdirectories fetched 46 trees one at a time).
const PREFETCH_SUBDIRS: usize = 1024;

/// A random read of at most 1/this of a chunk reads only that part.
const PART_OF_CHUNK: u64 = 4;

/// How many chunks after the one being read a miss hints at ([`Store::prefetch`]).
const PREFETCH_AHEAD: usize = 4;

/// The ids of the next [`PREFETCH_AHEAD`] data extents after extent `index`.
/// How many chunks behind [`DROP_BEHIND`] each sequential read looks at
/// (more than a 1 MiB request can pass, at the smallest chunk size).
const DROP_SCAN: usize = 32;

fn next_chunks(extents: &[crate::store::Extent], index: usize) -> Vec<ObjectId> {
    extents
        .iter()
        .skip(index + 1)
        .filter_map(|e| e.id)
        .take(PREFETCH_AHEAD)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::model::ROOT_INO;
    use crate::store::{Entry, Extent};

    use crate::fs::testing::{self, ROOT as C, plus};

    fn file(name: &str, size: u64, extents: Vec<Extent>) -> Entry {
        Entry {
            size,
            xattrs: vec![(b"user.a".to_vec(), b"xyz".to_vec())],
            ..testing::entry(name, Kind::File, Content::Extents(extents))
        }
    }

    /// A store with a root holding the entries `build` makes, served from /m.
    fn serve_with(build: impl FnOnce(&Store) -> Vec<Entry>) -> (tempfile::TempDir, CheckpointView) {
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
        let caches = Caches::new(1 << 20);
        let fs = CheckpointView::new(Arc::new(store), root, &caches, "/m".into(), None);
        (dir, fs)
    }

    fn serve(entries: Vec<Entry>) -> (tempfile::TempDir, CheckpointView) {
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
        let ino = fs.lookup(C, ROOT_INO, b"f").unwrap().attr.ino;
        assert_eq!(fs.read(C, ino, 0, 100).unwrap(), b"aaaa\0\0\0bb");
        assert_eq!(fs.read(C, ino, 3, 5).unwrap(), b"a\0\0\0b");
        assert_eq!(fs.read(C, ino, 7, 1).unwrap(), b"b");
        assert_eq!(fs.read(C, ino, 9, 10).unwrap(), b"");
        assert_eq!(fs.read(C, ino, u64::MAX, u32::MAX).unwrap(), b"");
        assert_eq!(fs.read(C, ino, 8, u32::MAX).unwrap(), b"b");
    }

    /// A view of one file "big" of `chunks` chunks of 200,000 pseudo-random
    /// bytes each (framed objects), with a 64 MiB cache; its bytes and ids.
    fn serve_big(chunks: usize) -> (tempfile::TempDir, CheckpointView, Vec<u8>, Vec<ObjectId>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_create(&dir.path().join("s")).unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<u8> = (0..chunks * 200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let ids: Vec<ObjectId> = data
            .chunks(200_000)
            .map(|c| store.put_object(c).unwrap().0)
            .collect();
        store.sync_objects().unwrap();
        let extents = ids
            .iter()
            .map(|id| Extent {
                len: 200_000,
                id: Some(*id),
            })
            .collect();
        let (tid, _) = store
            .put_tree(&crate::store::Tree {
                entries: vec![file("big", data.len() as u64, extents)],
            })
            .unwrap();
        let mut root = file("", 0, vec![]);
        root.kind = Kind::Dir;
        root.content = Content::Tree(tid);
        let fs = CheckpointView::new(
            Arc::new(store),
            root,
            &Caches::new(64 << 20),
            "/m".into(),
            None,
        );
        (dir, fs, data, ids)
    }

    #[test]
    fn sequential_reads_read_the_next_chunks_ahead() {
        let (_dir, fs, data, ids) = serve_big(6);
        let ino = fs.lookup(C, ROOT_INO, b"big").unwrap().attr.ino;
        assert_eq!(fs.read(C, ino, 0, 131_072).unwrap(), data[..131_072]);
        // Queued, being read or read already: every later chunk (6 × 200 KB
        // is within the read-ahead's bounds).
        for id in &ids[1..] {
            assert!(fs.cache.contains(id) || fs.readahead.in_flight(id));
        }
        let mut out = data[..131_072].to_vec();
        while out.len() < data.len() {
            out.extend(fs.read(C, ino, out.len() as u64, 131_072).unwrap());
        }
        assert_eq!(out, data);
    }

    #[test]
    fn a_sequential_read_drops_the_chunks_it_passed() {
        let (_dir, fs, data, ids) = serve_big(40);
        let ino = fs.lookup(C, ROOT_INO, b"big").unwrap().attr.ino;
        let mut out = Vec::new();
        while out.len() < data.len() {
            out.extend(fs.read(C, ino, out.len() as u64, 131_072).unwrap());
        }
        assert_eq!(out, data);
        let last = (data.len() - 1) as u64 / 131_072 * 131_072;
        for (i, id) in ids.iter().enumerate() {
            let end = (i as u64 + 1) * 200_000;
            if end + DROP_BEHIND <= last {
                assert!(
                    !fs.cache.contains(id),
                    "chunk {i} ends far behind the reader"
                );
            }
        }
        // The last ones stay (the kernel may still ask for them out of order).
        assert!(fs.cache.contains(ids.last().unwrap()));
        // A random read afterwards reads its part again, correctly.
        assert_eq!(fs.read(C, ino, 10, 4096).unwrap(), data[10..4106]);
    }

    #[test]
    fn a_small_random_read_decodes_only_its_part() {
        let (_dir, fs, data, ids) = serve_big(12);
        let ino = fs.lookup(C, ROOT_INO, b"big").unwrap().attr.ino;
        // Each more than the read-ahead's slack away from the one before.
        for at in [100_000u64, 1_300_000, 2_399_000, 65_530, 1_200_000] {
            let got = fs.read(C, ino, at, 4096).unwrap();
            let end = (at as usize + 4096).min(data.len());
            assert_eq!(got, data[at as usize..end]);
        }
        // Nothing cached whole, nothing read ahead.
        for id in &ids {
            assert!(!fs.cache.contains(id) && !fs.readahead.in_flight(id));
        }
        // A read of most of a chunk reads it whole (and keeps it).
        assert_eq!(
            fs.read(C, ino, 610_000, 150_000).unwrap(),
            data[610_000..760_000]
        );
        assert!(fs.cache.contains(&ids[3]));
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
        let short = fs.lookup(C, ROOT_INO, b"short").unwrap().attr.ino;
        assert!(matches!(
            fs.read(C, short, 0, 10),
            Err(FsError::Malformed { .. })
        ));
        let missing = fs.lookup(C, ROOT_INO, b"missing").unwrap().attr.ino;
        assert!(matches!(fs.read(C, missing, 0, 10), Err(FsError::Store(_))));
        assert!(matches!(
            fs.readlink(C, missing),
            Err(FsError::Posix(Posix::NotSymlink))
        ));
        assert!(matches!(
            fs.getattr(C, 999),
            Err(FsError::UnknownInode(999))
        ));
        assert!(matches!(
            fs.lookup(C, ROOT_INO, b"nope"),
            Err(FsError::Posix(Posix::NotFound))
        ));
        assert!(matches!(
            fs.lookup(C, short, b"x"),
            Err(FsError::Posix(Posix::NotDir))
        ));
    }

    #[test]
    fn xattr_sizes_open_flags_and_access() {
        let (_dir, fs) = serve(vec![file("f", 0, vec![])]);
        let ino = fs.lookup(C, ROOT_INO, b"f").unwrap().attr.ino;
        assert_eq!(
            fs.getxattr(C, ino, b"user.a", 0).unwrap(),
            XattrReply::Size(3)
        );
        assert_eq!(
            fs.getxattr(C, ino, b"user.a", 3).unwrap(),
            XattrReply::Data(b"xyz".to_vec())
        );
        assert!(matches!(
            fs.getxattr(C, ino, b"user.a", 2),
            Err(FsError::Posix(Posix::BufferTooSmall { .. }))
        ));
        assert!(matches!(
            fs.getxattr(C, ino, b"user.b", 9),
            Err(FsError::Posix(Posix::NoXattr))
        ));
        // As ext4: a name outside the namespaces, or a bare namespace.
        assert!(matches!(
            fs.getxattr(C, ino, b"a", 9),
            Err(FsError::Posix(Posix::Unsupported(_)))
        ));
        assert!(matches!(
            fs.getxattr(C, ino, b"user.", 9),
            Err(FsError::Posix(Posix::Invalid(_)))
        ));
        assert_eq!(fs.listxattr(C, ino, 0).unwrap(), XattrReply::Size(7));
        assert_eq!(fs.open(C, ino, libc::O_RDONLY).unwrap(), Opened::Stateless);
        for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
            assert!(matches!(
                fs.open(C, ino, flags),
                Err(FsError::Posix(Posix::ReadOnly))
            ));
        }
        assert!(fs.access(C, ino, libc::R_OK).is_ok());
        assert!(matches!(
            fs.access(C, ino, libc::W_OK),
            Err(FsError::Posix(Posix::ReadOnly))
        ));
    }

    /// File handles (export support): `"."` answers any inode by number, a
    /// file too; a number never given is `ESTALE`; every entry but the
    /// root's carries this mount's generation, and another mount has
    /// another (the numbers are per mount).
    #[test]
    fn dot_answers_any_inode_by_number_with_the_mounts_generation() {
        use crate::fs::dispatch::{Reply, look_up};
        let (_dir, fs) = serve(vec![file("f", 0, vec![])]);
        let f = fs.lookup(C, ROOT_INO, b"f").unwrap().attr;
        assert_eq!(fs.lookup(C, f.ino, b".").unwrap().attr, f);
        assert_eq!(fs.lookup(C, ROOT_INO, b".").unwrap().attr.ino, ROOT_INO);
        assert_eq!(fs.lookup(C, ROOT_INO, b"..").unwrap().attr.ino, ROOT_INO);
        let unknown = fs.lookup(C, 999, b".").unwrap_err();
        assert_eq!(crate::fs::errno(&unknown), fuser::Errno::ESTALE);
        let g = fs.generation();
        assert!(g != 0 && g <= u64::from(u32::MAX));
        let Ok(Reply::Entry(_, file_g)) = look_up(&fs, C, f.ino, b".") else {
            panic!("an entry");
        };
        assert_eq!(file_g.0, g);
        let Ok(Reply::Entry(_, root_g)) = look_up(&fs, C, ROOT_INO, b".") else {
            panic!("an entry");
        };
        assert_eq!(root_g.0, 0, "the root's is always 0");
        let (_dir2, again) = serve(vec![file("f", 0, vec![])]);
        assert_ne!(again.generation(), g, "another mount, another generation");
    }

    #[test]
    fn readdir_resumes_at_offsets() {
        let (_dir, fs) = serve(vec![file("a", 0, vec![]), file("b", 0, vec![])]);
        let mut names = Vec::new();
        fs.readdir(C, ROOT_INO, plus(0, 0), &mut |item| {
            names.push((item.name.to_vec(), item.next_offset));
            names.len() == 2
        })
        .unwrap();
        assert_eq!(names, [(b".".to_vec(), 1), (b"..".to_vec(), 2)]);
        names.clear();
        fs.readdir(C, ROOT_INO, plus(0, 2), &mut |item| {
            names.push((item.name.to_vec(), item.next_offset));
            false
        })
        .unwrap();
        assert_eq!(names, [(b"a".to_vec(), 3), (b"b".to_vec(), 4)]);
        let mut none = 0;
        fs.readdir(C, ROOT_INO, plus(0, u64::MAX), &mut |_| {
            none += 1;
            false
        })
        .unwrap();
        assert_eq!(none, 0);
    }

    #[test]
    fn attributes_are_ext4s_and_seek_follows_the_extents() {
        use crate::store::model::ext4::Seek;
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
        let f = fs.lookup(C, ROOT_INO, b"f").unwrap().attr;
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
                fs.seek(C, f.ino, offset, whence).unwrap(),
                want,
                "{offset} {whence:?}"
            );
        }
        let link = fs.lookup(C, ROOT_INO, b"link").unwrap().attr;
        assert_eq!((link.perm, link.blocks), (0o777, 0), "as on Linux, fast");
        assert_eq!(fs.lookup(C, ROOT_INO, b"long").unwrap().attr.blocks, 8);
        assert!(matches!(
            fs.seek(C, link.ino, 0, Seek::Data),
            Err(FsError::Posix(Posix::Invalid(_)))
        ));
        let root = fs.getattr(C, ROOT_INO).unwrap().attr;
        assert_eq!((root.size, root.blocks), (4096, 8));
        assert!(matches!(
            fs.seek(C, ROOT_INO, 0, Seek::Data),
            Err(FsError::Posix(Posix::IsDir))
        ));
    }
}
