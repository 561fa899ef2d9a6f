//! The stat cache: which inode each regular file of a snapshot was, so the
//! next snapshot of the same directory can reuse the parent checkpoint's entry
//! for every file whose (device, inode, size, mtime, ctime) are unchanged
//! without opening it, as git's index and restic's parent snapshot do.
//!
//! The parent's tree already holds each file's size, mtime, ctime, xattrs and
//! extents as they were read; the cache adds what a tree does not record: the
//! device (once) and each file's inode, and when the snapshot started (for
//! racy timestamps, below). It lives beside the checkpoint, in
//! `STORE/statcache/<checkpoint id>` (docs/format.md, "Stat cache"). It is a
//! cache: a checkpoint without one (older stores, imports, commits, pulled
//! checkpoints, a damaged file) just makes the next snapshot read every file.
//!
//! **Racy timestamps** (git's Documentation/technical/racy-git.txt): a file
//! changed again within the same timestamp tick after the parent read it keeps
//! its size, mtime and ctime. Such a change can only happen to a file whose
//! mtime or ctime is not older than the parent snapshot's start, so those
//! files are read again whatever their stat says ([`racy`]).

use std::cmp::Ordering;
use std::fs;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use crate::store::codec::{Malformed, Reader, put_bytes, put_i64, put_var};
use crate::store::{Checkpoint, Content, Entry, IoContext, Kind, ObjectId, Store};

/// Magic and version at the start of a stat cache (after decompression).
pub const STAT_CACHE_MAGIC: &[u8; 8] = b"SFSTAT01";
/// The largest stat cache read back (decompressed): far above the ~10 bytes a
/// file it takes.
const MAX_CACHE_SIZE: u64 = 1 << 30;
/// How far the kernel's clock for file times (the coarse clock, one tick
/// behind: 10 ms at HZ=100) may lag the clock the snapshot's start is read
/// from, with a margin.
const CLOCK_SLACK_NS: i64 = 20_000_000;
const NS: i64 = 1_000_000_000;

/// Where the stat cache of checkpoint `id` lives.
pub fn path(store: &Store, id: &ObjectId) -> PathBuf {
    store.root().join("statcache").join(id.to_hex())
}

/// Whether a file time `t_ns` is too recent to trust against a snapshot that
/// started at `started_ns`: a write after the start can still have stamped
/// the file with `t_ns`. The filesystem's granularity is estimated from the
/// time itself (the largest power of ten its nanoseconds are a multiple of;
/// 2 s for whole seconds, as FAT), which is never finer than the truth.
pub fn racy(t_ns: i64, started_ns: i64) -> bool {
    let frac = t_ns.rem_euclid(NS);
    let granularity = if frac == 0 {
        2 * NS
    } else {
        let mut g = 1;
        while g < NS / 10 && frac % (g * 10) == 0 {
            g *= 10;
        }
        g
    };
    t_ns >= started_ns
        .saturating_sub(CLOCK_SLACK_NS)
        .saturating_sub(granularity)
}

/// The current wall clock in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------- writing

/// A stat cache being written, directory by directory in walk order. A
/// directory's place is taken when the walk lists it ([`Writer::reserve`])
/// and filled in when its files' inodes are final ([`Writer::fill`]), which
/// for a directory with files to read is after the content phase. A place
/// never filled is left out (that directory's files are read next time).
pub struct Writer {
    header: Vec<u8>,
    groups: Vec<Vec<u8>>,
}

impl Writer {
    /// A cache for a snapshot that started at `started_ns` of a directory on `dev`.
    pub fn new(started_ns: i64, dev: u64) -> Writer {
        let mut header = STAT_CACHE_MAGIC.to_vec();
        put_i64(&mut header, started_ns);
        put_var(&mut header, dev);
        Writer {
            header,
            groups: Vec::new(),
        }
    }

    /// The place of the next directory in walk order (depth first, by name:
    /// [`dir_order`]).
    pub fn reserve(&mut self) -> usize {
        self.groups.push(Vec::new());
        self.groups.len() - 1
    }

    /// Fill place `slot` with the regular files of directory `dir`
    /// (relative, '/'-separated, "" for the root): (name, inode) sorted by
    /// name.
    pub fn fill<'a>(
        &mut self,
        slot: usize,
        dir: &[u8],
        files: impl Iterator<Item = (&'a [u8], u64)>,
    ) {
        let mut body = Vec::new();
        let mut n = 0u64;
        for (name, ino) in files {
            put_bytes(&mut body, name);
            put_var(&mut body, ino);
            n += 1;
        }
        let buf = &mut self.groups[slot];
        buf.clear();
        put_bytes(buf, dir);
        put_var(buf, n);
        buf.extend_from_slice(&body);
    }

    /// Add the regular files of directory `dir` as the next directory.
    pub fn group<'a>(&mut self, dir: &[u8], files: impl Iterator<Item = (&'a [u8], u64)>) {
        let slot = self.reserve();
        self.fill(slot, dir, files);
    }

    /// The cache, compressed, ready for [`save`].
    pub fn finish(self) -> io::Result<StatCacheData> {
        let mut enc = zstd::stream::Encoder::new(Vec::new(), 3)?;
        enc.include_checksum(true)?;
        let mut header = self.header;
        let filled = self.groups.iter().filter(|g| !g.is_empty()).count();
        put_var(&mut header, filled as u64);
        enc.write_all(&header)?;
        for g in &self.groups {
            enc.write_all(g)?;
        }
        Ok(StatCacheData(enc.finish()?))
    }
}

/// A finished stat cache, not yet on disk (the checkpoint id it belongs to
/// is known only once the record is written).
#[derive(Clone, Default)]
pub struct StatCacheData(Vec<u8>);

impl std::fmt::Debug for StatCacheData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StatCacheData({} bytes)", self.0.len())
    }
}

/// Store `data` as the stat cache of checkpoint `id` (after the record is
/// written). Not fsynced: a cache lost or cut short by a crash fails its
/// checksum and only makes the next snapshot read every file.
pub fn save(store: &Store, id: &ObjectId, data: &StatCacheData) -> io::Result<()> {
    let dest = path(store, id);
    let dir = store.root().join("statcache");
    match crate::sys::create_dir_nofollow(&dir, 0o755) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    // A new file with a name nobody can guess, in the directory reached
    // without following a symlink; renamed over the cache.
    let dirf = crate::sys::open_dir_nofollow(&dir)?;
    let (mut f, tmp) = crate::sys::create_temp_in(&dirf, &id.to_hex(), 0o644)?;
    let tmp = dir.join(tmp);
    let result = io::Write::write_all(&mut f, &data.0)
        .and_then(|()| crate::sys::rename_nofollow(&tmp, &dest));
    if result.is_err() {
        let _ = crate::sys::remove_nofollow(&tmp);
    }
    result
}

/// A snapshot moved a ref from checkpoint `old` to another: `old`'s stat
/// cache goes, unless `old` is still the head of a ref. A snapshot compares
/// with its ref's head unless told otherwise, so only heads' caches are
/// used; a snapshot given an older checkpoint as `--parent` reads every
/// file instead. Without this a store kept a cache for every snapshot
/// however many there were (54 KB for a tree of 30,000 small files, 4 KiB
/// on disk at least): a checkpoint after every model reply of a
/// 300,000-file tree, about half a gigabyte over a thousand. Returns
/// whether a cache was removed.
pub fn retire(store: &Store, old: &ObjectId) -> crate::store::Result<bool> {
    if store.list_refs()?.iter().any(|(_, head)| head == old) {
        return Ok(false);
    }
    let path = path(store, old);
    match crate::sys::remove_nofollow(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).at(&path),
    }
}

/// `storefs gc`'s sweep of the stat caches [`retire`] missed (written
/// before it existed, by a snapshot without a ref, or for a ref deleted
/// since): every cache whose checkpoint is not the head of a ref, last
/// modified before `grace` ago (a snapshot publishing now keeps its own).
/// Returns the caches removed (or, with `dry_run`, that would be) and their
/// sizes.
pub fn prune(
    store: &Store,
    grace: std::time::Duration,
    dry_run: bool,
) -> crate::store::Result<Vec<(PathBuf, u64)>> {
    let dir = store.root().join("statcache");
    match fs::symlink_metadata(&dir) {
        Ok(m) if !m.is_dir() => {
            return Err(crate::store::Error::Invalid(format!(
                "{} is not a directory (a symlink?); gc deletes only inside its own store",
                dir.display()
            )));
        }
        _ => {}
    }
    let entries = crate::store::list_store_dir_if_exists(&dir).at(&dir)?;
    let heads: Vec<ObjectId> = store.list_refs()?.into_iter().map(|(_, id)| id).collect();
    let cutoff = std::time::SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(std::time::UNIX_EPOCH);
    let mut removed = Vec::new();
    for (name, _) in entries {
        // Only caches (64 hex digits); temp files are a snapshot's own.
        let Some(id) = name.to_str().and_then(ObjectId::from_hex) else {
            continue;
        };
        let path = dir.join(&name);
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).at(&path),
        };
        if heads.contains(&id) || meta.modified().at(&path)? > cutoff {
            continue;
        }
        if !dry_run {
            match crate::sys::remove_nofollow(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).at(&path),
            }
        }
        removed.push((path, meta.len()));
    }
    removed.sort();
    Ok(removed)
}

// ---------------------------------------------------------------- reading

/// A parent snapshot to compare against: its root tree and its stat cache.
#[derive(Clone)]
pub struct Parent {
    /// The parent checkpoint (for messages).
    pub id: ObjectId,
    /// Its root tree.
    pub root: ObjectId,
    /// When the parent snapshot started (files not older than this are racy).
    pub started_ns: i64,
    /// The device every file of the parent was on.
    pub dev: u64,
    /// The decompressed cache; its groups start at `header_len`.
    groups: std::sync::Arc<Vec<u8>>,
    header_len: usize,
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parent({})", self.id)
    }
}

impl Parent {
    /// The parent checkpoint `id` of a snapshot of `origin`, or why it cannot
    /// serve as one (then the snapshot reads every file).
    pub fn load(
        store: &Store,
        id: &ObjectId,
        ckpt: &Checkpoint,
        origin: &str,
    ) -> Result<Parent, String> {
        if ckpt.origin.as_deref() != Some(origin) {
            return Err(format!(
                "it was taken from {}, not {origin}",
                ckpt.origin.as_deref().unwrap_or("no directory")
            ));
        }
        let p = path(store, id);
        let file = match crate::store::open_store_file(&p) {
            Ok((f, _)) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err("it has no stat cache".into());
            }
            Err(e) => return Err(format!("{}: {e}", p.display())),
        };
        let mut data = Vec::new();
        zstd::stream::Decoder::new(file)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .take(MAX_CACHE_SIZE)
            .read_to_end(&mut data)
            .map_err(|e| format!("{}: damaged stat cache ({e})", p.display()))?;
        let bad = |m: Malformed| format!("{}: damaged stat cache ({})", p.display(), m.0);
        let mut r = Reader::new(&data);
        if r.take(8).map_err(bad)? != STAT_CACHE_MAGIC {
            return Err(format!(
                "{}: not a stat cache this storefs reads",
                p.display()
            ));
        }
        let started_ns = r.i64().map_err(bad)?;
        let dev = r.var().map_err(bad)?;
        let header_len = data.len() - r.remaining();
        // Check the whole cache once, so the walk can trust it.
        let mut groups = Groups::new(&data[header_len..]).map_err(bad)?;
        while groups.next_group().map_err(bad)?.is_some() {}
        Ok(Parent {
            id: *id,
            root: ckpt.root,
            started_ns,
            dev,
            groups: std::sync::Arc::new(data),
            header_len,
        })
    }

    /// A cursor over the parent's directories, for one walk.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor {
            // Checked whole by `load`.
            groups: Groups::new(&self.groups[self.header_len..]).ok(),
            pending: None,
        }
    }

    /// Whether a regular file that lstat shows as `now` is unchanged since the
    /// parent recorded `entry` for it with inode `ino`: then `entry`'s
    /// content and xattrs are the file's, without opening it. Xattrs and ACLs
    /// cannot have changed: setting them changes the ctime.
    pub fn unchanged(&self, entry: &Entry, ino: u64, now: &Stat) -> bool {
        let Content::Extents(ext) = &entry.content else {
            return false;
        };
        entry.kind == Kind::File
            && now.dev == self.dev
            && now.ino == ino
            && now.size == entry.size
            && now.mtime_ns == entry.mtime_ns
            && now.ctime_ns == entry.ctime_ns
            && ext.iter().try_fold(0u64, |a, x| a.checked_add(x.len)) == Some(entry.size)
            && !racy(entry.mtime_ns, self.started_ns)
            && !racy(entry.ctime_ns, self.started_ns)
    }
}

/// The stat fields a file is matched on.
#[derive(Clone, Copy, Debug)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// The groups of a cache: `varint(count)` then, `count` times,
/// `bytes(dir) varint(n) (bytes(name) varint(ino))*`.
struct Groups<'a> {
    r: Reader<'a>,
    left: u64,
}

/// One directory's files: (name, inode), sorted by name.
pub struct Group<'a> {
    dir: &'a [u8],
    files: Vec<(&'a [u8], u64)>,
}

impl Group<'_> {
    /// The inode recorded for file `name`.
    pub fn ino(&self, name: &[u8]) -> Option<u64> {
        self.files
            .binary_search_by(|(n, _)| (*n).cmp(name))
            .ok()
            .map(|i| self.files[i].1)
    }
}

impl<'a> Groups<'a> {
    fn new(data: &'a [u8]) -> Result<Self, Malformed> {
        let mut r = Reader::new(data);
        let left = r.var()?;
        Ok(Groups { r, left })
    }

    /// The next group, or `None` after the last one.
    fn next_group(&mut self) -> Result<Option<Group<'a>>, Malformed> {
        if self.left == 0 {
            self.r.finish()?;
            return Ok(None);
        }
        self.left -= 1;
        let dir = self.r.bytes()?;
        let n = self.r.count()?;
        let mut files = Vec::with_capacity(n.min(self.r.remaining()));
        for _ in 0..n {
            let name = self.r.bytes()?;
            let ino = self.r.var()?;
            if files.last().is_some_and(|(last, _)| *last >= name) {
                return Err(Malformed("names out of order"));
            }
            files.push((name, ino));
        }
        Ok(Some(Group { dir, files }))
    }
}

/// Walks the parent's directories in step with a snapshot's walk.
pub struct Cursor<'a> {
    groups: Option<Groups<'a>>,
    pending: Option<Group<'a>>,
}

impl<'a> Cursor<'a> {
    /// The files the parent recorded in directory `dir` (relative,
    /// '/'-separated). Calls must come in walk order ([`dir_order`]);
    /// directories the parent did not have give `None`.
    pub fn files_of(&mut self, dir: &[u8]) -> Option<Group<'a>> {
        loop {
            let g = match self.pending.take() {
                Some(g) => g,
                None => self.groups.as_mut()?.next_group().ok()??,
            };
            match dir_order(g.dir, dir) {
                Ordering::Less => continue,
                Ordering::Equal => return Some(g),
                Ordering::Greater => {
                    self.pending = Some(g);
                    return None;
                }
            }
        }
    }
}

/// The order a snapshot walks directories in: depth first, children by name
/// bytes; i.e. paths compared component by component.
pub fn dir_order(a: &[u8], b: &[u8]) -> Ordering {
    a.split(|&c| c == b'/').cmp(b.split(|&c| c == b'/'))
}

#[cfg(test)]
mod safety_tests {
    use super::*;

    /// The cache's temp file was `.<id>.<pid>.tmp`, written with `O_TRUNC`:
    /// a symlink planted under that name made the writer truncate and fill
    /// whatever it pointed to. Now its name is random and it is created
    /// `O_EXCL|O_NOFOLLOW`, so what is planted under the old name stays as it is.
    #[test]
    fn a_symlink_at_the_old_temp_name_is_not_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open_or_create(&tmp.path().join("s")).unwrap();
        let id = ObjectId::of(b"checkpoint");
        let victim = tmp.path().join("victim");
        fs::write(&victim, b"root's secret\n").unwrap();
        let dir = store.root().join("statcache");
        fs::create_dir_all(&dir).unwrap();
        let old = dir.join(format!(".{}.{}.tmp", id.to_hex(), std::process::id()));
        std::os::unix::fs::symlink(&victim, &old).unwrap();
        save(&store, &id, &StatCacheData(b"cache bytes".to_vec())).unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"root's secret\n");
        assert_eq!(fs::read(path(&store, &id)).unwrap(), b"cache bytes");
        // A symlinked statcache directory is not written through either.
        fs::remove_file(&old).unwrap();
        fs::remove_file(path(&store, &id)).unwrap();
        fs::remove_dir(&dir).unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        assert!(save(&store, &id, &StatCacheData(b"x".to_vec())).is_err());
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    }
}
