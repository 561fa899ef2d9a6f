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

/// Every published pack of a remote and where each object is.
#[derive(Debug, Default)]
pub struct PackIndex {
    pub packs: Vec<PackInfo>,
    map: HashMap<ObjectId, Loc>,
}

impl PackIndex {
    fn from_packs(packs: Vec<PackInfo>) -> PackIndex {
        let mut map = HashMap::new();
        for (i, p) in packs.iter().enumerate() {
            for e in &p.entries {
                map.entry(e.id).or_insert(Loc {
                    pack: i as u32,
                    offset: e.offset,
                    len: e.len,
                });
            }
        }
        PackIndex { packs, map }
    }

    pub fn get(&self, id: &ObjectId) -> Option<Loc> {
        self.map.get(id).copied()
    }

    pub fn contains(&self, id: &ObjectId) -> bool {
        self.map.contains_key(id)
    }

    pub fn pack(&self, loc: &Loc) -> &PackInfo {
        &self.packs[loc.pack as usize]
    }
}

/// `STORE/remotes/<remote>.packs/`: the index files this store has read.
pub fn cache_dir(store_root: &Path, remote: &str) -> PathBuf {
    store_root.join("remotes").join(format!("{remote}.packs"))
}

/// Build an index from the cached index files alone (no request): what a
/// lazy mount's daemon starts from, after the mount command refreshed it.
pub fn load_cached(store_root: &Path, remote: &str) -> PackIndex {
    let dir = cache_dir(store_root, remote);
    let mut packs = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name();
            // <stem>.<version>.idx
            let Some(stem) = name
                .to_str()
                .filter(|n| n.ends_with(".idx"))
                .and_then(|n| n.split('.').next())
            else {
                continue;
            };
            let Some(kind) = parse_stem(stem) else {
                continue;
            };
            match std::fs::read(e.path()).and_then(|b| store::decode_index(&b)) {
                Ok(entries) => packs.push(info(stem, kind, entries)),
                Err(err) => {
                    tracing::warn!(path = %e.path().display(), error = %err, "cached remote pack index unreadable; removed");
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    packs.sort_by(|a, b| a.stem.cmp(&b.stem));
    PackIndex::from_packs(packs)
}

fn info(stem: &str, kind: PackKind, entries: Vec<PackEntry>) -> PackInfo {
    let size = entries
        .iter()
        .map(|e| e.offset + e.len as u64)
        .max()
        .unwrap_or(0);
    PackInfo {
        stem: stem.to_string(),
        kind,
        size,
        entries,
    }
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
    for e in std::fs::read_dir(&dir).map_err(io)?.flatten() {
        if e.file_name().to_str().is_none_or(|n| !wanted.contains(n)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let packs: Vec<PackInfo> = futures::stream::iter(listing.published.clone())
        .map(|p| {
            let dir = dir.clone();
            async move {
                let stem = p.stem.clone();
                let kind = parse_stem(&stem).expect("listed stems are checked");
                let cached = dir.join(p.cache_name());
                if let Ok(entries) = std::fs::read(&cached).and_then(|b| store::decode_index(&b)) {
                    return Ok(info(&stem, kind, entries));
                }
                let key = idx_key(&stem);
                let bytes = objects
                    .get(&ObjPath::from(key.as_str()))
                    .await
                    .map_err(|e| err(format!("reading {key}"), e))?
                    .bytes()
                    .await
                    .map_err(|e| err(format!("reading {key}"), e))?;
                let entries = store::decode_index(&bytes).map_err(|e| Error::BadPack {
                    key: key.clone(),
                    detail: e.to_string(),
                })?;
                store::write_file(&cached, &bytes, 0o644, false).map_err(|source| Error::Io {
                    path: cached.clone(),
                    source,
                })?;
                Ok::<_, Error>(info(&stem, kind, entries))
            }
        })
        .buffer_unordered(PARALLEL_IDX)
        .try_collect()
        .await?;
    let mut packs = packs;
    packs.sort_by(|a, b| a.stem.cmp(&b.stem));
    Ok((PackIndex::from_packs(packs), listing))
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
    err: &(dyn Fn(String, object_store::Error) -> Error + Sync),
) -> Result<bytes::Bytes> {
    let key = pack_key(stem);
    objects
        .get(&ObjPath::from(key.as_str()))
        .await
        .map_err(|e| err(format!("reading {key}"), e))?
        .bytes()
        .await
        .map_err(|e| err(format!("reading {key}"), e))
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
        let bytes = read_whole(objects, stem, err).await?;
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
}
