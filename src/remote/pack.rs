//! Packs on the remote: many objects in one remote object, so a push of
//! 20,000 small files is a few PUTs and a lazy mount gets a checkpoint's
//! whole tree structure in one GET (docs/format.md, "Remotes").
//!
//! `packs/<t|d>-<64 hex>.pack` holds records `id (32) | len (u32 LE) | len
//! bytes`, the same records as a local pack; `t-` packs hold trees only,
//! `d-` packs file chunks. The hex is the sha256 of the pack's bytes, so the
//! same objects packed in the same order give the same name (a rerun of a
//! killed push finds its pack already there). `packs/<stem>.idx` is the
//! local index format (`SFIDX001`, entries sorted by id, sha256 trailer) and
//! publishes the pack: a pack without an index is an interrupted upload,
//! never read, removed by `gc --remote` after its grace period.
//!
//! Index files never change (a repack writes new packs), so each store
//! keeps the ones it has read under `STORE/remotes/<name>.packs/` and reads
//! only new ones after a listing.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};

use super::{Error, Result};
use crate::store::midx::{self, Flavor, Merge, Midx, MidxEntry};
use crate::store::{self, ObjectBackend, ObjectId, PackEntry, Store};

/// A pack being built is closed at this many bytes.
pub const PACK_TARGET: usize = 16 << 20;
/// Bytes of a record's header in front of an object's stored bytes.
pub const RECORD_HEADER: u64 = 32 + 4;
/// Index files fetched at once.
const PARALLEL_IDX: usize = 16;

/// What a pack holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PackKind {
    /// Trees only: fetched whole by lazy mounts and pulls.
    Trees,
    /// File chunks: read by ranges.
    Data,
}

impl PackKind {
    fn letter(self) -> char {
        match self {
            PackKind::Trees => 't',
            PackKind::Data => 'd',
        }
    }
}

/// A pack's name without `.pack`/`.idx`: `t-<hex>` or `d-<hex>`, checked.
pub fn parse_stem(stem: &str) -> Option<PackKind> {
    let (kind, hex) = stem.split_once('-')?;
    if hex.len() != 64 || !store::is_hex(hex) {
        return None;
    }
    match kind {
        "t" => Some(PackKind::Trees),
        "d" => Some(PackKind::Data),
        _ => None,
    }
}

pub fn pack_key(stem: &str) -> String {
    format!("packs/{stem}.pack")
}

pub fn idx_key(stem: &str) -> String {
    format!("packs/{stem}.idx")
}

/// One published pack.
#[derive(Clone, Debug)]
pub struct PackInfo {
    pub stem: String,
    pub kind: PackKind,
    /// The pack's length (the end of its last record).
    pub size: u64,
    /// Its objects, for a pack of trees only (lazy mounts fetch spans of
    /// them); a data pack's are found through the index's lookups.
    pub entries: Vec<PackEntry>,
}

/// Where an object is on the remote: pack number (in [`PackIndex::packs`]),
/// offset of its stored bytes, their length.
#[derive(Clone, Copy, Debug)]
pub struct Loc {
    pub pack: u32,
    pub offset: u64,
    pub len: u32,
}

impl Loc {
    fn of(e: &MidxEntry) -> Loc {
        Loc {
            pack: e.pack,
            offset: e.offset,
            len: e.len,
        }
    }
}

/// The cache directory's multi-pack index over the remote's packs.
const MIDX_FILE: &str = "index.midx";

/// A remote pack's name in the cache's midx: `<key>.<size, 16 hex>`, the
/// key being its cached index file's name without `.idx` (`<stem>.<version,
/// 16 hex>`), so a rewritten index is not taken from an older midx.
static REMOTE_MIDX: Flavor = Flavor::new(b"SFRMIDX1", 66 + 17 + 17, is_midx_name);

fn is_midx_name(name: &str) -> bool {
    parse_midx_name(name).is_some()
}

fn midx_name(key: &str, size: u64) -> String {
    format!("{key}.{size:016x}")
}

/// A midx name's key, stem, kind and pack size.
fn parse_midx_name(name: &str) -> Option<(&str, &str, PackKind, u64)> {
    let (key, size) = name.rsplit_once('.')?;
    let (stem, version) = key.split_once('.')?;
    let kind = parse_stem(stem)?;
    let hex16 = |x: &str| x.len() == 16 && store::is_hex(x);
    if !hex16(version) || !hex16(size) {
        return None;
    }
    Some((key, stem, kind, u64::from_str_radix(size, 16).ok()?))
}

/// Every published pack of a remote and where each object is: the packs'
/// index files, cached in `STORE/remotes/<name>.packs/`, merged into one
/// multi-pack index there (`index.midx`, [`crate::store::midx`]'s format
/// with the remote's pack names) and searched in place, so a process holds
/// about 2 bytes an object (the midx's sparse ids), not the whole index.
#[derive(Default)]
pub struct PackIndex {
    pub packs: Vec<PackInfo>,
    /// `None` when the remote has no packs.
    midx: Option<Midx>,
    path: PathBuf,
}

impl PackIndex {
    /// Where `id` is, if it is in a pack (the first pack the midx lists it
    /// in, as [`PackIndex::entries`] gives it first).
    pub fn lookup(&self, id: &ObjectId) -> std::io::Result<Option<Loc>> {
        let Some(m) = &self.midx else {
            return Ok(None);
        };
        Ok(m.lookup(id)?.first().map(Loc::of))
    }

    /// [`PackIndex::lookup`], its error naming the file.
    pub fn get(&self, id: &ObjectId) -> Result<Option<Loc>> {
        self.lookup(id).map_err(|source| self.io_err(source))
    }

    pub fn contains(&self, id: &ObjectId) -> Result<bool> {
        Ok(self.get(id)?.is_some())
    }

    /// [`PackIndex::get`] of each of `ids`, in their order. For many ids (a
    /// push or a pull of a whole checkpoint) it reads the index once, in
    /// order, instead of one `pread` a lookup (a push of 300,000 objects made
    /// 300,000 of them).
    pub fn get_many(&self, ids: &[ObjectId]) -> Result<Vec<Option<Loc>>> {
        let Some(m) = &self.midx else {
            return Ok(vec![None; ids.len()]);
        };
        if (ids.len() as u64) < m.len() / 64 {
            return ids.iter().map(|id| self.get(id)).collect();
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&i| ids[i]);
        let mut out = vec![None; ids.len()];
        let mut next = order.iter().peekable();
        for e in self.entries()? {
            let (id, loc, first) = e?;
            while next.next_if(|&&i| ids[i] < id).is_some() {}
            while let Some(&i) = next.next_if(|&&i| ids[i] == id) {
                if first {
                    out[i] = Some(loc);
                }
            }
            if next.peek().is_none() {
                break;
            }
        }
        Ok(out)
    }

    pub fn pack(&self, loc: &Loc) -> &PackInfo {
        &self.packs[loc.pack as usize]
    }

    /// Every object in every pack, by id: `(id, where, first)`, `first`
    /// false for an id's later copies (in another pack), which
    /// [`PackIndex::get`] never gives. Read from disk as it goes.
    pub fn entries(&self) -> Result<impl Iterator<Item = Result<(ObjectId, Loc, bool)>> + '_> {
        let iter = match &self.midx {
            Some(m) => Some(m.iter().map_err(|source| self.io_err(source))?),
            None => None,
        };
        let mut prev = None;
        Ok(iter.into_iter().flatten().map(move |e| {
            let e = e.map_err(|source| self.io_err(source))?;
            let first = prev != Some(e.id);
            prev = Some(e.id);
            Ok((e.id, Loc::of(&e), first))
        }))
    }

    fn io_err(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// `STORE/remotes/<remote>.packs/`: the index files this store has read.
pub fn cache_dir(store_root: &Path, remote: &str) -> PathBuf {
    store_root.join("remotes").join(format!("{remote}.packs"))
}

/// A cached index file's key: its name (`<stem>.<version>.idx`) without
/// `.idx`, if it is one.
fn cached_key(name: &str) -> Option<&str> {
    let key = name.strip_suffix(".idx")?;
    parse_midx_name(&midx_name(key, 0)).map(|_| key)
}

/// Build an index from the cached index files alone (no request): what a
/// lazy mount's daemon starts from, after the mount command refreshed it.
/// A cached file that cannot be read is removed (the next refresh reads it
/// from the remote again) and the index built without it.
pub fn load_cached(store_root: &Path, remote: &str) -> PackIndex {
    let dir = cache_dir(store_root, remote);
    loop {
        let mut wanted = Vec::new();
        if let Ok(names) = store::list_store_dir(&dir) {
            for (name, _) in names {
                if let Some(key) = name.to_str().and_then(cached_key) {
                    wanted.push((key.to_string(), dir.join(&name)));
                }
            }
        }
        wanted.sort();
        // Two versions of one pack's index (a rewritten one, which a correct
        // writer never makes): the next refresh keeps the listed one.
        wanted.dedup_by(|a, b| a.0.split('.').next() == b.0.split('.').next());
        match open_index(&dir, &wanted) {
            Ok(index) => return index,
            Err(BadCached(path, err))
                if wanted.iter().any(|(_, p)| *p == path)
                    && crate::sys::remove_nofollow(&path).is_ok() =>
            {
                tracing::warn!(path = %path.display(), error = %err, "cached remote pack index unreadable; removed");
            }
            Err(BadCached(path, err)) => {
                tracing::warn!(path = %path.display(), error = %err, "cannot build the remote's pack index; objects are fetched one by one");
                return PackIndex::default();
            }
        }
    }
}

/// A file [`open_index`] could not read or write, and why.
struct BadCached(PathBuf, std::io::Error);

/// The index over `wanted` (sorted keys, [`cached_key`], each with its
/// cached index file): the cache's midx when it lists exactly those packs, else a new
/// one written first. A new midx keeps the old one's entries for packs still
/// wanted and reads only the other packs' index files (all of them when the
/// old midx is unreadable).
fn open_index(
    dir: &Path,
    wanted: &[(String, PathBuf)],
) -> std::result::Result<PackIndex, BadCached> {
    let path = dir.join(MIDX_FILE);
    if wanted.is_empty() {
        return Ok(PackIndex {
            path,
            ..PackIndex::default()
        });
    }
    let keys: Vec<&str> = wanted.iter().map(|(k, _)| k.as_str()).collect();
    let listed = |m: &Midx| -> Vec<String> {
        m.names
            .iter()
            .filter_map(|n| parse_midx_name(n).map(|(k, ..)| k.to_string()))
            .collect()
    };
    // Checked whole (its entries' checksum; about 5 ms for 100,000 objects,
    // read in 1 MiB blocks): a damaged entry would send reads to the wrong
    // bytes, which the objects' own checks would then blame on the remote.
    let checked = |m: Midx| {
        m.iter()
            .and_then(|mut it| it.try_for_each(|e| e.map(drop)))
            .map(|()| m)
    };
    let mut midx = match Midx::open_as(&path, &REMOTE_MIDX).and_then(|m| m.map(checked).transpose())
    {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cached remote multi-pack index damaged; written again");
            None
        }
    };
    if midx.as_ref().is_none_or(|m| listed(m) != keys) {
        if let Err(e) = write_index(&path, wanted, midx.as_ref()) {
            // The old midx's entries may be what is bad: from the files alone.
            let retry = match (&e, &midx) {
                (BadCached(p, _), Some(_)) if *p == path => write_index(&path, wanted, None),
                _ => Err(e),
            };
            retry?;
        }
        midx = Midx::open_as(&path, &REMOTE_MIDX).map_err(|e| BadCached(path.clone(), e))?;
    }
    let Some(midx) = midx else {
        return Err(BadCached(
            path,
            std::io::Error::other("written, then not found"),
        ));
    };
    let mut packs = Vec::with_capacity(midx.names.len());
    for (name, (_, file)) in midx.names.iter().zip(wanted) {
        let (_, stem, kind, size) = parse_midx_name(name).expect("checked at open");
        let entries = match kind {
            PackKind::Trees => read_cached(file)?,
            PackKind::Data => Vec::new(),
        };
        packs.push(PackInfo {
            stem: stem.to_string(),
            kind,
            size,
            entries,
        });
    }
    Ok(PackIndex {
        packs,
        midx: Some(midx),
        path,
    })
}

/// The most bytes a cached pack index may hold (about six million objects;
/// storefs's packs hold far fewer). A larger one is not read: it is removed
/// and fetched again, as a bad one is.
pub const MAX_CACHED_INDEX: u64 = 256 << 20;

/// A cached index, read without following a symlink, a regular file no
/// larger than [`MAX_CACHED_INDEX`].
fn read_cached(file: &Path) -> std::result::Result<Vec<PackEntry>, BadCached> {
    store::read_store_file_capped(file, MAX_CACHED_INDEX, "a cached pack index")
        .and_then(|b| store::decode_index(&b))
        .map_err(|e| BadCached(file.to_path_buf(), e))
}

/// Write the midx over `wanted` at `path`: `old`'s entries of packs still
/// wanted, merged with the entries of the others, read from their files
/// (each checked against its trailer).
fn write_index(
    path: &Path,
    wanted: &[(String, PathBuf)],
    old: Option<&Midx>,
) -> std::result::Result<(), BadCached> {
    let bad_midx = |e| BadCached(path.to_path_buf(), e);
    // Old pack number -> new number, for the packs kept (whose sizes the old
    // names give).
    let mut renumber: HashMap<u32, u32> = HashMap::new();
    let mut sizes: Vec<Option<u64>> = vec![None; wanted.len()];
    if let Some(m) = old {
        for (i, name) in m.names.iter().enumerate() {
            let (key, _, _, size) = parse_midx_name(name).expect("checked at open");
            if let Ok(n) = wanted.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
                renumber.insert(i as u32, n as u32);
                sizes[n] = Some(size);
            }
        }
    }
    let mut fresh: Vec<MidxEntry> = Vec::new();
    for (n, (_, file)) in wanted.iter().enumerate() {
        if sizes[n].is_some() {
            continue;
        }
        let entries = read_cached(file)?;
        sizes[n] = Some(
            entries
                .iter()
                .map(|e| e.offset + e.len as u64)
                .max()
                .unwrap_or(0),
        );
        fresh.extend(entries.iter().map(|e| MidxEntry::of(e, n as u32)));
    }
    fresh.sort_by_key(|e| e.id);
    let names: Vec<String> = wanted
        .iter()
        .zip(&sizes)
        .map(|((key, _), size)| midx_name(key, size.expect("set above")))
        .collect();
    let kept = match old {
        Some(m) => Some(m.iter().map_err(bad_midx)?),
        None => None,
    };
    let kept = kept.into_iter().flatten().filter_map(|e| match e {
        Ok(e) => renumber
            .get(&e.pack)
            .map(|&pack| Ok(MidxEntry { pack, ..e })),
        Err(e) => Some(Err(e)),
    });
    midx::write_as(
        path,
        &REMOTE_MIDX,
        &names,
        &mut Merge::new(kept, fresh.into_iter()),
        // A cache checked whole at every open: what a crash leaves is
        // written again.
        false,
    )
    .map_err(bad_midx)
}

/// What a listing of `packs/` shows.
#[derive(Debug, Default)]
pub struct PackListing {
    /// Stems with both `.pack` and `.idx`, with the `.idx`'s size and
    /// modification time (which name its cached copy).
    pub published: Vec<Published>,
    /// Every key under `packs/` (for gc).
    pub keys: Vec<Listed>,
}

/// A published pack as a listing shows it.
#[derive(Clone, Debug)]
pub struct Published {
    pub stem: String,
    /// What the listing says of the `.idx` (ETag, size, time), hashed.
    idx_version: String,
}

impl Published {
    /// The name of its index's cached copy: a rewritten index (which a
    /// correct writer never makes) is read again, not taken from the cache.
    fn cache_name(&self) -> String {
        format!("{}.{}.idx", self.stem, self.idx_version)
    }
}

/// A key as a listing shows it.
#[derive(Clone, Debug)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    /// Its last modification, seconds since the epoch (the server's clock).
    pub modified: i64,
}

/// List `packs/` on the remote.
pub async fn list_packs(
    objects: &Arc<dyn ObjectStore>,
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<PackListing> {
    let metas: Vec<_> = objects
        .list(Some(&ObjPath::from("packs")))
        .try_collect()
        .await
        .map_err(|e| err("listing packs/".into(), e))?;
    let mut packs = HashSet::new();
    let mut idxs = HashMap::new();
    let mut keys = Vec::new();
    for m in &metas {
        let Some(name) = m.location.filename() else {
            continue;
        };
        keys.push(Listed {
            key: m.location.to_string(),
            size: m.size,
            modified: m.last_modified.timestamp(),
        });
        if let Some(stem) = name.strip_suffix(".pack") {
            packs.insert(stem.to_string());
        } else if let Some(stem) = name.strip_suffix(".idx") {
            let version = format!(
                "{:?}|{}|{:?}",
                m.e_tag,
                m.size,
                m.last_modified.timestamp_nanos_opt()
            );
            let hash = store::to_hex(&Sha256::digest(version.as_bytes())[..8]);
            idxs.insert(stem.to_string(), hash);
        }
    }
    let mut published: Vec<Published> = idxs
        .into_iter()
        .filter(|(stem, _)| packs.contains(stem) && parse_stem(stem).is_some())
        .map(|(stem, idx_version)| Published { stem, idx_version })
        .collect();
    published.sort_by(|a, b| a.stem.cmp(&b.stem));
    Ok(PackListing { published, keys })
}

/// The remote's pack index: list `packs/`, read the index files this store
/// has not cached yet (each checked against its trailer, then cached), drop
/// cached ones whose pack is gone.
pub async fn refresh(
    objects: &Arc<dyn ObjectStore>,
    store_root: &Path,
    remote: &str,
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<(PackIndex, PackListing)> {
    let listing = list_packs(objects, err).await?;
    let dir = cache_dir(store_root, remote);
    let io = |source| Error::Io {
        path: dir.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let wanted: HashSet<String> = listing
        .published
        .iter()
        .map(Published::cache_name)
        .collect();
    for (name, _) in store::list_store_dir(&dir).map_err(io)? {
        // Index files of packs gone, and temp files a crash left (a
        // concurrent writer's are younger than an hour); the midx stays.
        let path = dir.join(&name);
        let name = name.to_str().unwrap_or("");
        let stale_temp = || {
            name.ends_with(".tmp")
                && crate::sys::metadata_nofollow(&path)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 3600))
        };
        if (name.ends_with(".idx") && !wanted.contains(name)) || stale_temp() {
            let _ = crate::sys::remove_nofollow(&path);
        }
    }
    // A cached copy found bad is removed and read from the remote again, once.
    let mut attempts = 2;
    loop {
        let mut cached: Vec<(String, PathBuf)> = futures::stream::iter(listing.published.clone())
            .map(|p| {
                let size = listing
                    .keys
                    .iter()
                    .find(|k| k.key == pack_key(&p.stem))
                    .map(|k| k.size);
                fetch_idx(objects, &dir, p, size, err)
            })
            .buffer_unordered(PARALLEL_IDX)
            .try_collect()
            .await?;
        cached.sort();
        attempts -= 1;
        match open_index(&dir, &cached) {
            Ok(index) => return Ok((index, listing)),
            Err(BadCached(path, _)) if attempts > 0 && cached.iter().any(|(_, p)| *p == path) => {
                tracing::warn!(path = %path.display(), "cached remote pack index unreadable; read again");
                let _ = crate::sys::remove_nofollow(&path);
            }
            Err(BadCached(path, source)) => return Err(Error::Io { path, source }),
        }
    }
}

/// The cached copy of published pack `p`'s index, fetched (and checked
/// against its trailer) when the cache lacks it. Its entries are checked
/// against the pack's listed size (`pack_size`): one that lies past the
/// pack's end is left out of the cached copy, with a warning, so no read
/// ever asks for (and allocates) bytes the pack does not have; its object
/// is then not found on the remote (a read of it gets EIO).
async fn fetch_idx(
    objects: &Arc<dyn ObjectStore>,
    dir: &Path,
    p: Published,
    pack_size: Option<u64>,
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<(String, PathBuf)> {
    let name = p.cache_name();
    let cache_key = name.strip_suffix(".idx").expect("a cache name").to_string();
    let cached = dir.join(&name);
    if crate::sys::exists_nofollow(&cached) {
        return Ok((cache_key, cached));
    }
    let key = idx_key(&p.stem);
    let got = objects
        .get(&ObjPath::from(key.as_str()))
        .await
        .map_err(|e| err(format!("reading {key}"), e))?;
    // No more than its pack's records can need (the pack's listed size),
    // and never more than a cached index may hold.
    let cap = pack_size.map_or(MAX_CACHED_INDEX, |n| {
        store::max_index_len(n).min(MAX_CACHED_INDEX)
    });
    let bytes = match super::read_capped(got, cap).await {
        Ok(b) => b,
        Err(super::Capped::Backend(e)) => return Err(err(format!("reading {key}"), e)),
        Err(super::Capped::Over(n)) => {
            return Err(Error::BadPack {
                key,
                detail: format!(
                    "{n} bytes or more, over the {cap} bytes its pack's records can need; refused"
                ),
            });
        }
    };
    let entries = store::decode_index(&bytes).map_err(|e| Error::BadPack {
        key: key.clone(),
        detail: e.to_string(),
    })?;
    let size = pack_size.unwrap_or(0);
    let fits = |e: &PackEntry| {
        e.offset >= RECORD_HEADER
            && e.offset
                .checked_add(u64::from(e.len))
                .is_some_and(|end| end <= size)
    };
    let (mut good, bad): (Vec<PackEntry>, Vec<PackEntry>) = entries.into_iter().partition(fits);
    let bytes = match bad.first() {
        None => bytes.to_vec(),
        Some(first) => {
            tracing::warn!(
                index = %key,
                pack_size = size,
                entries = bad.len(),
                first = %first.id,
                offset = first.offset,
                len = first.len,
                "remote pack index has entries past the end of its pack; their objects are left out (reads of them get EIO)"
            );
            store::encode_index(&mut good)
        }
    };
    store::write_store_file(&cached, &bytes, 0o644, false).map_err(|source| Error::Io {
        path: cached.clone(),
        source,
    })?;
    Ok((cache_key, cached))
}

/// A pack being built in memory.
pub struct PackBuilder {
    kind: PackKind,
    bytes: Vec<u8>,
    entries: Vec<PackEntry>,
}

/// A finished pack: its stem, bytes and index bytes.
pub struct BuiltPack {
    pub stem: String,
    pub pack: Vec<u8>,
    pub idx: Vec<u8>,
    pub objects: usize,
}

impl PackBuilder {
    pub fn new(kind: PackKind) -> PackBuilder {
        PackBuilder {
            kind,
            bytes: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Append one object's stored bytes.
    pub fn push(&mut self, id: &ObjectId, raw: &[u8]) {
        let len = u32::try_from(raw.len()).expect("an object's stored size fits in u32");
        self.bytes.extend_from_slice(&id.0);
        self.bytes.extend_from_slice(&len.to_le_bytes());
        let offset = self.bytes.len() as u64;
        self.bytes.extend_from_slice(raw);
        self.entries.push(PackEntry {
            id: *id,
            offset,
            len,
        });
    }

    pub fn is_full(&self) -> bool {
        self.bytes.len() >= PACK_TARGET
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Close the pack: name it by its bytes' sha256, encode its index.
    pub fn finish(self) -> BuiltPack {
        let hex = store::to_hex(&Sha256::digest(&self.bytes));
        let mut entries = self.entries;
        BuiltPack {
            stem: format!("{}-{hex}", self.kind.letter()),
            objects: entries.len(),
            idx: store::encode_index(&mut entries),
            pack: self.bytes,
        }
    }
}

/// Upload a built pack: the pack (unless an earlier, interrupted run left
/// it there whole: same name, same length), then its index, which publishes it.
pub async fn upload(
    objects: &Arc<dyn ObjectStore>,
    built: BuiltPack,
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<u64> {
    let key = pack_key(&built.stem);
    let path = ObjPath::from(key.as_str());
    let len = built.pack.len() as u64;
    let there = matches!(objects.head(&path).await, Ok(m) if m.size == len);
    if !there {
        objects
            .put(&path, PutPayload::from(built.pack))
            .await
            .map_err(|e| err(format!("writing {key}"), e))?;
    }
    let ikey = idx_key(&built.stem);
    objects
        .put(&ObjPath::from(ikey.as_str()), PutPayload::from(built.idx))
        .await
        .map_err(|e| err(format!("writing {ikey}"), e))?;
    Ok(if there { 0 } else { len })
}

/// A whole pack's bytes.
pub async fn read_whole(
    objects: &Arc<dyn ObjectStore>,
    stem: &str,
    len: u64,
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<bytes::Bytes> {
    let key = pack_key(stem);
    if len == 0 {
        return Ok(bytes::Bytes::new());
    }
    let opts = object_store::GetOptions {
        range: Some((0..len).into()),
        ..Default::default()
    };
    let got = objects
        .get_opts(&ObjPath::from(key.as_str()), opts)
        .await
        .map_err(|e| err(format!("reading {key}"), e))?;
    match super::read_capped(got, len).await {
        Ok(b) => Ok(b.into()),
        Err(super::Capped::Backend(e)) => Err(err(format!("reading {key}"), e)),
        Err(super::Capped::Over(n)) => Err(Error::BadPack {
            key,
            detail: format!("the server sent {n} bytes or more for the first {len}"),
        }),
    }
}

/// The stored bytes of the objects at `locs` (id, offset, length; all in
/// pack `stem`), read with ranged GETs (object_store merges close ranges
/// into one request) or, when `whole`, one GET of the pack; and the bytes
/// transferred. Not verified: callers verify each object.
pub async fn read_objects(
    objects: &Arc<dyn ObjectStore>,
    stem: &str,
    locs: &[(ObjectId, u64, u32)],
    whole: bool,
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<(Vec<(ObjectId, Vec<u8>)>, u64)> {
    let key = pack_key(stem);
    if whole {
        // The pack up to the end of its last wanted object: never more
        // than the index (checked against the pack's listed size) names.
        let end = locs
            .iter()
            .map(|(_, off, len)| off + u64::from(*len))
            .max()
            .unwrap_or(0);
        let bytes = read_whole(objects, stem, end, err).await?;
        let objs = locs
            .iter()
            .map(|(id, off, len)| {
                let (s, e) = (*off as usize, *off as usize + *len as usize);
                let raw = bytes.get(s..e).ok_or_else(|| Error::BadPack {
                    key: key.clone(),
                    detail: format!("object {id} lies past the pack's end"),
                })?;
                Ok((*id, raw.to_vec()))
            })
            .collect::<Result<_>>()?;
        return Ok((objs, bytes.len() as u64));
    }
    let ranges: Vec<std::ops::Range<u64>> = locs
        .iter()
        .map(|(_, off, len)| *off..*off + *len as u64)
        .collect();
    let got = objects
        .get_ranges(&ObjPath::from(key.as_str()), &ranges)
        .await
        .map_err(|e| err(format!("reading {key}"), e))?;
    let sent = got.iter().map(|b| b.len() as u64).sum();
    Ok((
        locs.iter()
            .zip(got)
            .map(|((id, _, _), b)| (*id, b.to_vec()))
            .collect(),
        sent,
    ))
}

/// Read the local objects `ids` (in order) and cut them into packs of
/// `kind`; each stored object is checked first (a corrupt local object is
/// never uploaded). Runs on a blocking thread; sends each pack as it fills.
pub fn build_packs(
    backend: &Arc<dyn ObjectBackend>,
    kind: PackKind,
    ids: &[ObjectId],
    send: &mut impl FnMut(BuiltPack) -> bool,
) -> Result<()> {
    let mut b = PackBuilder::new(kind);
    for id in ids {
        let raw = backend
            .read(id)
            .map_err(|source| store::Error::Io {
                path: "objects".into(),
                source,
            })?
            .ok_or_else(|| store::Error::Missing {
                id: *id,
                context: "needed by push".into(),
            })?;
        Store::verify_stored(id, &raw)?;
        b.push(id, &raw);
        if b.is_full() && !send(std::mem::replace(&mut b, PackBuilder::new(kind)).finish()) {
            return Ok(());
        }
    }
    if !b.is_empty() {
        send(b.finish());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_names_itself_by_its_bytes_and_indexes_every_record() {
        let mut b = PackBuilder::new(PackKind::Data);
        let a = ObjectId([1; 32]);
        let c = ObjectId([2; 32]);
        b.push(&c, b"second-but-sorted-last");
        b.push(&a, b"xy");
        let p = b.finish();
        assert_eq!(parse_stem(&p.stem), Some(PackKind::Data));
        assert_eq!(&p.stem[2..], store::to_hex(&Sha256::digest(&p.pack)));
        let entries = store::decode_index(&p.idx).unwrap();
        assert_eq!(entries.len(), 2);
        for e in entries {
            let s = e.offset as usize;
            assert_eq!(&p.pack[s - 36..s - 4], &e.id.0);
            let want: &[u8] = if e.id == a {
                b"xy"
            } else {
                b"second-but-sorted-last"
            };
            assert_eq!(&p.pack[s..s + e.len as usize], want);
        }
        assert_eq!(parse_stem("x-00"), None);
        assert_eq!(parse_stem(&format!("t-{}", "g".repeat(64))), None);
    }

    /// A pack of `kind` holding objects `ids` (each `len(id)` bytes), its
    /// index cached under `root` as remote "r" would cache it (`version`).
    fn cached_pack(
        root: &Path,
        kind: PackKind,
        ids: &[u8],
        version: u8,
    ) -> (String, Vec<PackEntry>) {
        let mut b = PackBuilder::new(kind);
        for &i in ids {
            b.push(&ObjectId([i; 32]), &vec![i; 10 + i as usize]);
        }
        let p = b.finish();
        let dir = cache_dir(root, "r");
        std::fs::create_dir_all(&dir).unwrap();
        let name = format!("{}.{}.idx", p.stem, format!("{version:02x}").repeat(8));
        std::fs::write(dir.join(name), &p.idx).unwrap();
        (p.stem, store::decode_index(&p.idx).unwrap())
    }

    /// Every object of `packs` is found where its pack's index says, and
    /// `entries` lists each id once as first, in the pack `get` gives.
    fn check(index: &PackIndex, packs: &[(String, Vec<PackEntry>)]) {
        let mut want = 0;
        for (stem, entries) in packs {
            for e in entries {
                let l = index.get(&e.id).unwrap().expect("found");
                let found = index.pack(&l);
                let (_, theirs) = packs.iter().find(|(s, _)| *s == found.stem).unwrap();
                let there = theirs
                    .iter()
                    .find(|x| x.id == e.id)
                    .expect("in the pack named");
                assert_eq!((l.offset, l.len), (there.offset, there.len), "{stem}");
                want += 1;
            }
        }
        let mut firsts = 0;
        let mut all = 0;
        for e in index.entries().unwrap() {
            let (id, l, first) = e.unwrap();
            all += 1;
            if first {
                firsts += 1;
                assert_eq!(index.get(&id).unwrap().unwrap().pack, l.pack);
            }
        }
        assert_eq!(all, want);
        let distinct: HashSet<ObjectId> = packs
            .iter()
            .flat_map(|(_, e)| e.iter().map(|e| e.id))
            .collect();
        assert_eq!(firsts, distinct.len());
        assert_eq!(
            index.get(&ObjectId([0xee; 32])).unwrap().map(|l| l.pack),
            None
        );
        // Many at once (in any order, repeated, unknown): as one by one.
        let mut ids: Vec<ObjectId> = distinct.iter().copied().collect();
        ids.push(ObjectId([0xee; 32]));
        ids.reverse();
        ids.extend(ids.clone());
        let one_by_one: Vec<_> = ids
            .iter()
            .map(|id| index.get(id).unwrap().map(|l| (l.pack, l.offset)))
            .collect();
        let many: Vec<_> = index
            .get_many(&ids)
            .unwrap()
            .into_iter()
            .map(|l| l.map(|l| (l.pack, l.offset)))
            .collect();
        assert_eq!(many, one_by_one);
        for p in &index.packs {
            let (_, entries) = packs.iter().find(|(s, _)| *s == p.stem).unwrap();
            let size = entries
                .iter()
                .map(|e| e.offset + e.len as u64)
                .max()
                .unwrap();
            assert_eq!(p.size, size, "{}", p.stem);
            match p.kind {
                PackKind::Trees => assert_eq!(p.entries, *entries),
                PackKind::Data => assert!(p.entries.is_empty()),
            }
        }
    }

    fn midx_inode(root: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(cache_dir(root, "r").join(MIDX_FILE))
            .unwrap()
            .ino()
    }

    #[test]
    fn the_cached_indexes_are_searched_through_one_midx_kept_while_the_packs_stay() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        assert!(load_cached(root, "r").packs.is_empty());
        // Object 5 is in two packs.
        let mut packs = vec![
            cached_pack(root, PackKind::Data, &[1, 2, 3, 5], 1),
            cached_pack(root, PackKind::Data, &[4, 5, 6], 1),
            cached_pack(root, PackKind::Trees, &[7, 8], 1),
        ];
        let index = load_cached(root, "r");
        assert_eq!(index.packs.len(), 3);
        check(&index, &packs);
        let ino = midx_inode(root);
        drop(index);
        check(&load_cached(root, "r"), &packs);
        assert_eq!(
            midx_inode(root),
            ino,
            "the same packs: the midx is not written again"
        );

        // A pack gone, then another come: written again each time, the kept
        // packs renumbered (the one gone is the first by name, so every kept
        // one moves), their entries taken from the old midx (a kept data pack's
        // index file is not read again: here it is damaged, and still found).
        let dir = cache_dir(root, "r");
        packs.sort_by(|a, b| a.0.cmp(&b.0));
        let gone = packs.remove(0);
        let damaged = packs
            .iter()
            .find(|(stem, _)| parse_stem(stem) == Some(PackKind::Data))
            .unwrap()
            .0
            .clone();
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = e.file_name().into_string().unwrap();
            if name.starts_with(&gone.0) {
                std::fs::remove_file(e.path()).unwrap();
            } else if name.starts_with(&damaged) {
                std::fs::write(e.path(), b"damaged").unwrap();
            }
        }
        let index = load_cached(root, "r");
        assert_ne!(midx_inode(root), ino);
        assert_eq!(index.packs.len(), 2);
        check(&index, &packs);
        packs.push(cached_pack(root, PackKind::Data, &[9, 10], 1));
        let index = load_cached(root, "r");
        assert_eq!(index.packs.len(), 3);
        check(&index, &packs);
        let only_in_gone = gone
            .1
            .iter()
            .find(|e| !packs.iter().any(|(_, es)| es.iter().any(|x| x.id == e.id)));
        let only_in_gone = only_in_gone.expect("the gone pack held an object of its own");
        assert!(index.get(&only_in_gone.id).unwrap().is_none());
    }

    #[test]
    fn a_few_lookups_at_once_search_and_many_read_the_index_in_order() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let all: Vec<u8> = (1..=200).collect();
        let packs = vec![cached_pack(root, PackKind::Data, &all, 1)];
        let index = load_cached(root, "r");
        check(&index, &packs);
        // Fewer than one id in 64 of the index: lookups one by one.
        for few in [
            vec![ObjectId([7; 32])],
            vec![ObjectId([0xee; 32]), ObjectId([200; 32])],
        ] {
            let got: Vec<_> = index
                .get_many(&few)
                .unwrap()
                .into_iter()
                .map(|l| l.map(|l| l.offset))
                .collect();
            let want: Vec<_> = few
                .iter()
                .map(|id| index.get(id).unwrap().map(|l| l.offset))
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_damaged_midx_is_written_again_and_a_damaged_index_file_dropped() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        let mut packs = vec![
            cached_pack(root, PackKind::Data, &[1, 2], 1),
            cached_pack(root, PackKind::Trees, &[3], 1),
        ];
        check(&load_cached(root, "r"), &packs);
        let midx = cache_dir(root, "r").join(MIDX_FILE);
        let mut b = std::fs::read(&midx).unwrap();
        let n = b.len();
        b[n - 1] ^= 1;
        std::fs::remove_file(&midx).unwrap();
        std::fs::write(&midx, &b).unwrap();
        let index = load_cached(root, "r");
        check(&index, &packs);
        assert!(
            index.entries().unwrap().all(|e| e.is_ok()),
            "the entries' checksum holds again"
        );

        // A new pack whose cached index is damaged: removed, the rest served.
        let (stem, _) = cached_pack(root, PackKind::Data, &[4], 1);
        let bad = std::fs::read_dir(cache_dir(root, "r"))
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_str().unwrap().starts_with(&stem))
            .unwrap()
            .path();
        std::fs::write(&bad, b"damaged").unwrap();
        let index = load_cached(root, "r");
        assert!(!bad.exists());
        check(&index, &packs);

        // A rewritten index (another version of a stem): its offsets, not
        // the midx's.
        let (stem, mut entries) = packs.remove(0);
        for e in &mut entries {
            e.offset += 1000;
        }
        for e in std::fs::read_dir(cache_dir(root, "r")).unwrap().flatten() {
            if e.file_name().to_str().unwrap().starts_with(&stem) {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        let name = format!("{stem}.{}.idx", "02".repeat(8));
        std::fs::write(
            cache_dir(root, "r").join(name),
            store::encode_index(&mut entries.clone()),
        )
        .unwrap();
        packs.push((stem, entries));
        check(&load_cached(root, "r"), &packs);
    }
}
