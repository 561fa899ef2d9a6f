//! push and pull.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};

use super::lock::LockKind;
use super::pack::{self, PackIndex, PackKind};
use super::{Error, PARALLEL, Remote, Result, corrupt_object};
use crate::store::progress::{Progress, SharedProgress};
use crate::store::{self, Checkpoint, Content, ObjectBackend, ObjectId, Store, Tree};

/// Packs uploaded at once (each up to [`pack::PACK_TARGET`] in memory).
const PACK_UPLOADS: usize = 4;

/// A tree pack a tree walk reads whole, at most: storefs closes a pack
/// once it passes [`pack::PACK_TARGET`], so only one holding a huge tree
/// (or another writer's) is larger; its trees are read a range each.
const TREE_PACK_WHOLE: u64 = 2 * pack::PACK_TARGET as u64;
/// Tree packs downloaded at once by a walk (each up to [`TREE_PACK_WHOLE`]).
const TREE_PACK_DOWNLOADS: usize = 4;
/// The bytes of tree packs a walk keeps between its levels; past it the
/// oldest go, and a later level that needs one reads it again.
const TREE_PACKS_KEPT: u64 = 256 << 20;

/// The tree packs a walk keeps, oldest first, within [`TREE_PACKS_KEPT`].
#[derive(Default)]
struct KeptPacks {
    packs: VecDeque<(u32, bytes::Bytes)>,
    bytes: u64,
}

impl KeptPacks {
    fn get(&self, pack: u32) -> Option<&bytes::Bytes> {
        self.packs.iter().find(|(p, _)| *p == pack).map(|(_, b)| b)
    }

    fn keep(&mut self, pack: u32, b: bytes::Bytes) {
        self.bytes += b.len() as u64;
        self.packs.push_back((pack, b));
        while self.bytes > TREE_PACKS_KEPT {
            let Some((_, old)) = self.packs.pop_front() else {
                break;
            };
            self.bytes -= old.len() as u64;
        }
    }
}

/// How a push behaves.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// Move the remote ref even if that loses checkpoints only the remote has.
    pub force: bool,
    /// Told the objects to upload, advanced by one per object uploaded.
    pub progress: SharedProgress,
}

/// What a push did.
#[derive(Clone, Debug, Default)]
pub struct PushReport {
    /// Checkpoints the remote ref now reaches (the target and its ancestors).
    pub checkpoints: usize,
    /// Objects the checkpoints need.
    pub objects_needed: usize,
    /// Objects uploaded (the rest were on the remote already).
    pub objects_uploaded: usize,
    /// Stored bytes uploaded.
    pub bytes_uploaded: u64,
    /// Checkpoint records uploaded.
    pub records_uploaded: usize,
    /// Where the remote ref was before (its raw content), if it existed.
    pub previous: Option<String>,
}

/// How a pull behaves.
#[derive(Clone, Debug)]
pub struct PullOptions {
    /// Move the local ref even if it is not an ancestor of the pulled checkpoint.
    pub force: bool,
    /// Advanced by one per object fetched.
    pub progress: SharedProgress,
}

/// What a pull did.
#[derive(Clone, Debug)]
pub struct PullReport {
    pub checkpoint: ObjectId,
    pub records_fetched: usize,
    pub objects_fetched: usize,
    pub bytes_fetched: u64,
    /// The local ref before, if it existed.
    pub previous: Option<ObjectId>,
}

impl Remote {
    /// Upload checkpoint `target`, its ancestors and every object they reach
    /// (only what the remote lacks), then point remote ref `name` at it by
    /// compare-and-swap.
    pub fn push(
        &self,
        store: &Store,
        target: &ObjectId,
        name: &str,
        opts: &PushOptions,
    ) -> Result<PushReport> {
        Store::check_name(name)?;
        let ancestry = store.ancestry(target)?;
        let ancestors: HashSet<ObjectId> = ancestry.iter().map(|(id, _)| *id).collect();
        self.rt.block_on(async {
            // Refuse early (before uploading anything) when we would lose
            // someone else's commit; checked again when the ref is written.
            if !opts.force
                && let Some(cur) = self.read_ref(name).await?
            {
                self.check_descends(name, &cur.content, target, &ancestors)?;
            }

            let lock = self.lock_op(LockKind::Push).await?;
            let r = self
                .push_locked(store, target, name, opts, &ancestry, &ancestors)
                .await;
            self.unlock_op(lock).await;
            r
        })
    }

    /// The push, under its lock: objects (in packs), records, ref.
    async fn push_locked(
        &self,
        store: &Store,
        target: &ObjectId,
        name: &str,
        opts: &PushOptions,
        ancestry: &[(ObjectId, Checkpoint)],
        ancestors: &HashSet<ObjectId>,
    ) -> Result<PushReport> {
        let (trees, chunks) = ordered_objects(store, ancestry)?;
        let (index, _) = self.pack_index(store.root()).await?;
        // Objects pushed one by one by earlier versions of storefs.
        let loose = self.list_ids("objects", "").await?;
        let missing = |ids: &[ObjectId]| -> Result<Vec<ObjectId>> {
            let packed = index.get_many(ids)?;
            Ok(ids
                .iter()
                .zip(packed)
                .filter(|(id, l)| l.is_none() && !loose.contains(id))
                .map(|(id, _)| *id)
                .collect())
        };
        let missing_trees = missing(&trees)?;
        let missing_chunks = missing(&chunks)?;
        let mut report = PushReport {
            checkpoints: ancestry.len(),
            objects_needed: trees.len() + chunks.len(),
            objects_uploaded: missing_trees.len() + missing_chunks.len(),
            ..Default::default()
        };
        opts.progress.set_total(report.objects_uploaded as u64);
        report.bytes_uploaded = self
            .upload_packs(store, missing_chunks, missing_trees, &*opts.progress)
            .await?;

        let have_records = self.list_ids("checkpoints", ".json").await?;
        let records: Vec<(ObjectId, Vec<u8>)> = ancestry
            .iter()
            .filter(|(id, _)| !have_records.contains(id))
            .map(|(id, _)| Ok((*id, store.read_checkpoint_with_bytes(id)?.1)))
            .collect::<Result<_>>()?;
        report.records_uploaded = records.len();
        futures::stream::iter(records)
            .map(|(id, bytes)| async move {
                let key = format!("checkpoints/{id}.json");
                self.objects
                    .put(&ObjPath::from(key.as_str()), PutPayload::from(bytes))
                    .await
                    .map_err(|e| self.backend_err(format!("writing {key}"), e))
                    .map(|_| ())
            })
            .buffer_unordered(PARALLEL)
            .try_collect::<Vec<()>>()
            .await?;

        // The ref, last, by compare-and-swap.
        let _lock = self.lock_ref(name)?;
        let cur = self.read_ref(name).await?;
        report.previous = cur.as_ref().map(|c| c.content.clone());
        if let Some(c) = &cur {
            if c.content == target.to_hex() {
                return Ok(report);
            }
            if !opts.force {
                self.check_descends(name, &c.content, target, ancestors)?;
            }
        }
        let theirs = cur.as_ref().map(|c| c.content.clone());
        if !self
            .write_ref(name, cur.map(|c| c.version), &target.to_hex())
            .await?
        {
            // Someone moved it between our read and our write.
            let now = self.read_ref(name).await?;
            return Err(Error::Conflict {
                remote: self.name.clone(),
                name: name.to_string(),
                theirs: now
                    .map(|c| c.content)
                    .or(theirs)
                    .unwrap_or_else(|| "(deleted)".into()),
                ours: *target,
            });
        }
        Ok(report)
    }

    /// Pack the local objects `chunks` and `trees` (in that order) and upload
    /// the packs, a few at once while the next ones are built. The bytes
    /// uploaded (a pack a killed run left whole is not sent again).
    async fn upload_packs(
        &self,
        store: &Store,
        chunks: Vec<ObjectId>,
        trees: Vec<ObjectId>,
        progress: &dyn Progress,
    ) -> Result<u64> {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<pack::BuiltPack>(2);
        let backend = store.backend().clone();
        let producer = tokio::task::spawn_blocking(move || -> Result<()> {
            let mut send = |p| tx.blocking_send(p).is_ok();
            pack::build_packs(&backend, PackKind::Data, &chunks, &mut send)?;
            pack::build_packs(&backend, PackKind::Trees, &trees, &mut send)
        });
        let err = |what: String, e| self.backend_err(what, e);
        let sent: Vec<u64> = futures::stream::poll_fn(|cx| rx.poll_recv(cx))
            .map(|built| {
                let n = built.objects as u64;
                let err = &err;
                async move {
                    let sent = pack::upload(&self.objects, built, err).await?;
                    progress.advance(n);
                    Ok::<_, Error>(sent)
                }
            })
            .buffer_unordered(PACK_UPLOADS)
            .try_collect()
            .await?;
        producer.await.map_err(join_err)??;
        Ok(sent.iter().sum())
    }

    /// Refuse unless the remote ref's content names `target` or one of its ancestors.
    fn check_descends(
        &self,
        name: &str,
        content: &str,
        target: &ObjectId,
        ancestors: &HashSet<ObjectId>,
    ) -> Result<()> {
        match ObjectId::from_hex(content) {
            Some(id) if ancestors.contains(&id) => Ok(()),
            Some(_) => Err(Error::Conflict {
                remote: self.name.clone(),
                name: name.to_string(),
                theirs: content.to_string(),
                ours: *target,
            }),
            None => Err(Error::BadRemoteRef {
                remote: self.name.clone(),
                name: name.to_string(),
                content: content.to_string(),
            }),
        }
    }

    /// Fetch remote ref `name` into local ref `local` (or no ref when
    /// `None`: `fork REMOTE:REF` and `pull --fork`, whose fork then holds the
    /// checkpoint): missing records, then every missing object (each
    /// verified), sync, records, ref.
    pub fn pull(
        &self,
        store: &Store,
        name: &str,
        local: Option<&str>,
        opts: &PullOptions,
    ) -> Result<PullReport> {
        Store::check_name(name)?;
        if let Some(local) = local {
            Store::check_name(local)?;
            if store.fork_head(local)?.is_some() {
                return Err(Error::ForkNamed(local.to_string()));
            }
        }
        self.rt.block_on(async {
            let target = self.read_ref_id(name).await?;
            let previous = match local {
                Some(l) => store.get_ref(l)?,
                None => None,
            };

            // Keeps gc from sweeping objects we find present until the ref is written.
            let _lease = store.write_lease()?;

            // Records: walk parents until checkpoints the store has (a local
            // record implies its ancestors and objects are local too).
            let mut fetched: HashMap<ObjectId, (Checkpoint, Vec<u8>)> = HashMap::new();
            let mut boundary = Vec::new();
            let mut queue = VecDeque::from([target]);
            let mut records = RecordSource::default();
            while let Some(id) = queue.pop_front() {
                if fetched.contains_key(&id) || boundary.contains(&id) {
                    continue;
                }
                // A partial checkpoint (lazy mount) has its record but maybe
                // not its objects: fetched like a missing one.
                if store.has_checkpoint(&id) && !store.is_partial(&id) {
                    store.read_checkpoint(&id)?;
                    boundary.push(id);
                    continue;
                }
                let (ckpt, bytes) = records.get(self, store, id).await?;
                queue.extend(ckpt.parents.iter().copied());
                fetched.insert(id, (ckpt, bytes));
            }

            // Would moving the local ref lose a local checkpoint?
            if let Some(prev) = previous
                && prev != target
                && !opts.force
                && !fetched.contains_key(&prev)
            {
                let mut is_ancestor = false;
                for b in &boundary {
                    if store.descends_from(b, &prev)? {
                        is_ancestor = true;
                        break;
                    }
                }
                if !is_ancestor {
                    return Err(Error::LocalConflict {
                        remote: self.name.clone(),
                        name: local.unwrap_or_default().to_string(),
                        ours: prev,
                        theirs: target,
                    });
                }
            }

            // Objects: trees level by level (each fetched tree is verified
            // and decoded to find its children; tree packs come whole),
            // then the chunks, by pack.
            let (index, _) = self.pack_index(store.root()).await?;
            let backend = store.backend().clone();
            let mut moved = Moved::default();
            let roots = fetched.iter().map(|(ck, (c, _))| (c.root, *ck)).collect();
            let (_, mut chunks) = self
                .walk_trees(&index, &backend, roots, true, &mut moved)
                .await?;
            // Each commit's operation log, where the remote has it (a push by
            // a storefs older than logs did not carry them).
            let logs: Vec<(ObjectId, ObjectId)> = fetched
                .iter()
                .filter_map(|(ck, (c, _))| Some((c.source.ops?, *ck)))
                .collect();
            let ids: Vec<ObjectId> = logs.iter().map(|l| l.0).collect();
            let packed = index.get_many(&ids)?;
            chunks.extend(
                logs.into_iter()
                    .zip(packed)
                    .filter(|(_, l)| l.is_some())
                    .map(|(l, _)| l),
            );
            self.fetch_chunks(&index, &backend, chunks, &*opts.progress, &mut moved)
                .await?;
            let (fetched_count, fetched_bytes) = (moved.objects, moved.bytes);

            // Publish: objects durable, then records (parents first), then the ref.
            store.sync_objects()?;
            let records_fetched = fetched.len();
            let mut written: HashSet<ObjectId> = HashSet::new();
            while written.len() < fetched.len() {
                let before = written.len();
                for (id, (c, bytes)) in &fetched {
                    if written.contains(id)
                        || c.parents
                            .iter()
                            .any(|p| fetched.contains_key(p) && !written.contains(p))
                    {
                        continue;
                    }
                    store.put_checkpoint_record(id, bytes)?;
                    written.insert(*id);
                }
                if written.len() == before {
                    // A parent cycle cannot happen with sha256 ids; write the rest anyway.
                    for (id, (_, bytes)) in &fetched {
                        store.put_checkpoint_record(id, bytes)?;
                        written.insert(*id);
                    }
                }
            }
            // Every object of the fetched checkpoints is here and durable now.
            for id in fetched.keys() {
                store.clear_partial(id)?;
            }
            if let Some(local) = local {
                store.set_ref(local, &target)?;
            }
            Ok(PullReport {
                checkpoint: target,
                records_fetched,
                objects_fetched: fetched_count,
                bytes_fetched: fetched_bytes,
                previous,
            })
        })
    }

    /// Walk the trees from `roots` (root tree, its checkpoint) level by
    /// level ([`Remote::fetch_trees`]; fetched trees written here when
    /// `write_here`): every object reached, and the chunks in the order
    /// first met, each with the checkpoint that needs it.
    pub(super) async fn walk_trees(
        &self,
        index: &PackIndex,
        backend: &Arc<dyn ObjectBackend>,
        roots: Vec<(ObjectId, ObjectId)>,
        write_here: bool,
        moved: &mut Moved,
    ) -> Result<(HashSet<ObjectId>, Vec<(ObjectId, ObjectId)>)> {
        let mut seen: HashSet<ObjectId> = HashSet::new();
        let mut frontier: Vec<(ObjectId, ObjectId)> =
            roots.into_iter().filter(|(t, _)| seen.insert(*t)).collect();
        let mut tree_packs = KeptPacks::default();
        let mut chunks = Vec::new();
        while !frontier.is_empty() {
            let trees = self
                .fetch_trees(
                    index,
                    backend,
                    &frontier,
                    &mut tree_packs,
                    moved,
                    write_here,
                )
                .await?;
            if write_here {
                let backend = backend.clone();
                tokio::task::spawn_blocking(move || publish_if_many(&*backend))
                    .await
                    .map_err(join_err)??;
            }
            frontier = Vec::new();
            for (children, ck) in trees {
                for c in children {
                    match c {
                        Child::Tree(sub) if seen.insert(sub) => frontier.push((sub, ck)),
                        Child::Chunk(id) if seen.insert(id) => chunks.push((id, ck)),
                        _ => {}
                    }
                }
            }
        }
        Ok((seen, chunks))
    }

    /// Decode the trees `wanted` (id, the checkpoint that needs it): read
    /// here when the store has them, else taken from their tree pack
    /// (downloaded whole once and kept in `tree_packs` while it fits, or a
    /// range each when the pack is over [`TREE_PACK_WHOLE`]), or a GET each
    /// for objects not in a pack; every fetched one is verified, and written
    /// here when `write_here` (a pull; gc --remote only reads). Memory: the
    /// kept packs, [`TREE_PACK_DOWNLOADS`] packs in flight, and this level's
    /// trees.
    async fn fetch_trees(
        &self,
        index: &PackIndex,
        backend: &Arc<dyn ObjectBackend>,
        wanted: &[(ObjectId, ObjectId)],
        tree_packs: &mut KeptPacks,
        moved: &mut Moved,
        write_here: bool,
    ) -> Result<Vec<(Vec<Child>, ObjectId)>> {
        let ids: Vec<ObjectId> = wanted.iter().map(|(id, _)| *id).collect();
        let present = contains_all(backend, ids).await?;
        // Where each wanted tree not here is, looked up once.
        let absent: Vec<ObjectId> = wanted
            .iter()
            .zip(&present)
            .filter(|(_, here)| !**here)
            .map(|((id, _), _)| *id)
            .collect();
        let mut found = index.get_many(&absent)?.into_iter();
        let locs: Vec<Option<pack::Loc>> = present
            .iter()
            .map(|here| if *here { None } else { found.next().flatten() })
            .collect();
        // The stored bytes of each wanted tree that a tree pack read whole
        // holds: from the packs kept, then from those downloaded now.
        let mut raw: HashMap<ObjectId, Vec<u8>> = HashMap::new();
        let mut by_pack: HashMap<u32, Vec<(ObjectId, pack::Loc)>> = HashMap::new();
        let slice = |b: &bytes::Bytes, l: &pack::Loc| {
            b.get(l.offset as usize..(l.offset + l.len as u64) as usize)
                .map(|s| s.to_vec())
        };
        for ((id, _), loc) in wanted.iter().zip(&locs) {
            let Some(l) = loc else { continue };
            let info = index.pack(l);
            if info.kind != PackKind::Trees || info.size > TREE_PACK_WHOLE {
                continue;
            }
            match tree_packs.get(l.pack) {
                Some(b) => {
                    if let Some(r) = slice(b, l) {
                        raw.insert(*id, r);
                    }
                }
                None => by_pack.entry(l.pack).or_default().push((*id, *l)),
            }
        }
        let err = |what: String, e| self.backend_err(what, e);
        let mut downloads = futures::stream::iter(by_pack)
            .map(|(p, trees)| {
                let err = &err;
                async move {
                    let info = &index.packs[p as usize];
                    let b = pack::read_whole(&self.objects, &info.stem, info.size, err)
                        .await
                        .map_err(|e| self.pack_gone(e, &info.stem, info.entries[0].id))?;
                    Ok::<_, Error>((p, b, trees))
                }
            })
            .buffer_unordered(TREE_PACK_DOWNLOADS);
        while let Some((p, b, trees)) = downloads.try_next().await? {
            moved.bytes += b.len() as u64;
            for (id, l) in trees {
                if let Some(r) = slice(&b, &l) {
                    raw.insert(id, r);
                }
            }
            tree_packs.keep(p, b);
        }
        drop(downloads);
        let inputs: Vec<_> = wanted
            .iter()
            .zip(present)
            .map(|(&(id, ck), here)| (id, ck, here, raw.remove(&id)))
            .collect();
        let results: Vec<(Vec<Child>, ObjectId, bool)> = futures::stream::iter(inputs)
            .map(|(id, ck, here, from_pack)| {
                let backend = backend.clone();
                async move {
                    let (bytes, fetched) = match (here, from_pack) {
                        (true, _) => (read_local(backend, id).await?, false),
                        (false, Some(raw)) => {
                            (self.keep(backend, id, raw, write_here).await?, true)
                        }
                        (false, None) => {
                            let raw = self.fetch_single(index, id, ck).await?;
                            (self.keep(backend, id, raw, true).await?, true)
                        }
                    };
                    let tree = Tree::decode(&bytes).map_err(|e| Error::CorruptObject {
                        remote: self.name.clone(),
                        id,
                        detail: format!("tree: {e}"),
                    })?;
                    // Only what the walk needs: a level's decoded trees
                    // (names, metadata) were most of a pull's memory.
                    Ok::<_, Error>((Child::of(tree), ck, fetched))
                }
            })
            .buffer_unordered(PARALLEL)
            .try_collect()
            .await?;
        Ok(results
            .into_iter()
            .map(|(children, ck, fetched)| {
                moved.objects += fetched as usize;
                (children, ck)
            })
            .collect())
    }

    /// Fetch the chunks in `wanted` that the store lacks: grouped by pack,
    /// one GET of the whole pack when most of it is wanted, else ranged GETs
    /// (close ranges merged into one request); objects not in a pack (pushed
    /// loose by older versions) one GET each. Each is verified, then written.
    async fn fetch_chunks(
        &self,
        index: &PackIndex,
        backend: &Arc<dyn ObjectBackend>,
        wanted: Vec<(ObjectId, ObjectId)>,
        progress: &dyn Progress,
        moved: &mut Moved,
    ) -> Result<()> {
        let ids: Vec<ObjectId> = wanted.iter().map(|(id, _)| *id).collect();
        let present = contains_all(backend, ids).await?;
        let mut by_pack: HashMap<u32, Vec<(ObjectId, u64, u32)>> = HashMap::new();
        let mut single = Vec::new();
        let absent: Vec<(ObjectId, ObjectId)> = wanted
            .into_iter()
            .zip(present)
            .filter(|(_, here)| !here)
            .map(|(w, _)| w)
            .collect();
        let ids: Vec<ObjectId> = absent.iter().map(|(id, _)| *id).collect();
        for ((id, ck), loc) in absent.into_iter().zip(index.get_many(&ids)?) {
            match loc {
                Some(l) => by_pack
                    .entry(l.pack)
                    .or_default()
                    .push((id, l.offset, l.len)),
                None => single.push((id, ck)),
            }
        }
        progress.set_total((by_pack.values().map(Vec::len).sum::<usize>() + single.len()) as u64);
        let err = |what: String, e| self.backend_err(what, e);
        let mut packed = futures::stream::iter(by_pack)
            .map(|(p, mut locs)| {
                let backend = backend.clone();
                let err = &err;
                async move {
                    let info = &index.packs[p as usize];
                    locs.sort_by_key(|l| l.1);
                    let want: u64 = locs.iter().map(|l| l.2 as u64).sum();
                    let whole = want * 2 >= info.size;
                    let (objs, sent) =
                        pack::read_objects(&self.objects, &info.stem, &locs, whole, err)
                            .await
                            .map_err(|e| self.pack_gone(e, &info.stem, locs[0].0))?;
                    let n = objs.len();
                    self.check_and_write(objs, backend).await?;
                    progress.advance(n as u64);
                    Ok::<_, Error>((n, sent))
                }
            })
            .buffer_unordered(PACK_DOWNLOADS);
        while let Some((n, b)) = packed.try_next().await? {
            moved.objects += n;
            moved.bytes += b;
        }
        let loose: Vec<(usize, u64)> = futures::stream::iter(single)
            .map(|(id, ck)| {
                let backend = backend.clone();
                async move {
                    let raw = self.fetch_single(index, id, ck).await?;
                    let n = raw.len() as u64;
                    self.keep(backend, id, raw, true).await?;
                    progress.advance(1);
                    Ok::<_, Error>((1, n))
                }
            })
            .buffer_unordered(PARALLEL)
            .try_collect()
            .await?;
        for (n, b) in loose {
            moved.objects += n;
            moved.bytes += b;
        }
        Ok(())
    }

    /// One object's stored bytes from the remote: a ranged GET from its pack,
    /// or `objects/<id>` (pushed loose by older versions).
    async fn fetch_single(&self, index: &PackIndex, id: ObjectId, ck: ObjectId) -> Result<Vec<u8>> {
        if let Some(l) = index.get(&id)? {
            let err = |what: String, e| self.backend_err(what, e);
            let stem = &index.pack(&l).stem;
            let (mut got, _) =
                pack::read_objects(&self.objects, stem, &[(id, l.offset, l.len)], false, &err)
                    .await
                    .map_err(|e| self.pack_gone(e, stem, id))?;
            return Ok(got.pop().map(|(_, raw)| raw).unwrap_or_default());
        }
        let key = format!("objects/{id}");
        self.get_async(&key, store::MAX_LOOSE_FILE, "a stored object")
            .await?
            .ok_or_else(|| Error::MissingObject {
                remote: self.name.clone(),
                id,
                context: format!(
                    "it is in no pack and {key} is not there; checkpoint {ck} needs it"
                ),
            })
    }

    /// A read of pack `stem` that found it gone: object `id` (one it was
    /// read for) is missing. Other errors pass.
    fn pack_gone(&self, e: Error, stem: &str, id: ObjectId) -> Error {
        match e {
            Error::Backend { source, .. }
                if matches!(*source, object_store::Error::NotFound { .. }) =>
            {
                Error::MissingObject {
                    remote: self.name.clone(),
                    id,
                    context: format!(
                        "its pack {} is not there, though its index is; if a `gc --remote` is running, pull again when it ends",
                        pack::pack_key(stem)
                    ),
                }
            }
            e => e,
        }
    }

    /// Verify fetched objects (each must decompress and hash to its id; the
    /// first that does not fails the batch) and, given a backend, write them
    /// there; the objects back. On the blocking pool.
    pub(super) async fn check_all(
        &self,
        objs: Vec<(ObjectId, Vec<u8>)>,
    ) -> Result<Vec<(ObjectId, Vec<u8>)>> {
        let remote = self.name.clone();
        tokio::task::spawn_blocking(move || -> Result<Vec<(ObjectId, Vec<u8>)>> {
            for (id, raw) in &objs {
                Store::verify_stored(id, raw).map_err(|e| corrupt_object(&remote, *id, e))?;
            }
            Ok(objs)
        })
        .await
        .map_err(join_err)?
    }

    /// Verify fetched stored bytes and write them here, each dropped once
    /// written, publishing as they pile up ([`publish_if_many`]).
    async fn check_and_write(
        &self,
        objs: Vec<(ObjectId, Vec<u8>)>,
        backend: Arc<dyn ObjectBackend>,
    ) -> Result<()> {
        let remote = self.name.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            for (i, (id, raw)) in objs.into_iter().enumerate() {
                Store::verify_stored(&id, &raw).map_err(|e| corrupt_object(&remote, id, e))?;
                backend.write(&id, &raw).map_err(local_io)?;
                if i % 1024 == 1023 {
                    publish_if_many(&*backend)?;
                }
            }
            Ok(())
        })
        .await
        .map_err(join_err)?
    }

    /// Verify fetched stored bytes and (when `write`) write them here; the content.
    async fn keep(
        &self,
        backend: Arc<dyn ObjectBackend>,
        id: ObjectId,
        raw: Vec<u8>,
        write: bool,
    ) -> Result<Vec<u8>> {
        let remote = self.name.clone();
        tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let bytes =
                Store::verify_stored(&id, &raw).map_err(|e| corrupt_object(&remote, id, e))?;
            if write {
                backend.write(&id, &raw).map_err(local_io)?;
            }
            Ok(bytes)
        })
        .await
        .map_err(join_err)?
    }
}

/// What a tree reaches: the objects a walk goes on to.
pub(super) enum Child {
    Tree(ObjectId),
    Chunk(ObjectId),
}

impl Child {
    fn of(tree: Tree) -> Vec<Child> {
        let mut out = Vec::new();
        for e in tree.entries {
            match e.content {
                Content::Tree(sub) => out.push(Child::Tree(sub)),
                Content::Extents(ext) => {
                    out.extend(ext.iter().filter_map(|x| x.id).map(Child::Chunk))
                }
                _ => {}
            }
        }
        out
    }
}

/// Publish the objects a pull wrote once [`store::SYNC_OBJECTS`] of them
/// (or more, as the store grows) wait, as the snapshot and the imports do
/// ([`Store::sync_objects_if_many`]): each is held in memory until it is
/// published, and what is published goes to the multi-pack index. Objects
/// published before the pull's checkpoints are harmless if it fails: the
/// pull holds the gc write lease, and gc removes them once nothing reaches
/// them. Blocking.
fn publish_if_many(backend: &dyn ObjectBackend) -> Result<()> {
    backend.sync_if_many(store::SYNC_OBJECTS).map_err(local_io)
}

/// Checkpoint records fetched for a walk through parents: one GET each for
/// the first [`RECORDS_ONE_BY_ONE`]; a longer history (each record names
/// only its parents, so a walk is one round trip per record) makes it list
/// `checkpoints/` and fetch every record this store lacks,
/// [`PARALLEL`] at once, once. Records of other refs fetched so are
/// dropped unused; every record is checked against its id.
#[derive(Default)]
pub(super) struct RecordSource {
    walked: usize,
    bulk: Option<HashMap<ObjectId, Record>>,
}

/// A checkpoint record and its exact bytes.
type Record = (Checkpoint, Vec<u8>);

/// Records fetched one by one before a walk fetches them all at once.
const RECORDS_ONE_BY_ONE: usize = 8;

impl RecordSource {
    pub(super) async fn get(
        &mut self,
        remote: &Remote,
        store: &Store,
        id: ObjectId,
    ) -> Result<(Checkpoint, Vec<u8>)> {
        self.walked += 1;
        if self.bulk.is_none() && self.walked > RECORDS_ONE_BY_ONE {
            let missing: Vec<ObjectId> = remote
                .list_ids("checkpoints", ".json")
                .await?
                .into_iter()
                .filter(|c| !store.has_checkpoint(c) || store.is_partial(c))
                .collect();
            let got: Vec<Option<(ObjectId, Record)>> = futures::stream::iter(missing)
                .map(|c| async move { remote.fetch_record(c).await.ok().map(|r| (c, r)) })
                .buffer_unordered(PARALLEL)
                .collect()
                .await;
            self.bulk = Some(got.into_iter().flatten().collect());
        }
        if let Some(r) = self.bulk.as_mut().and_then(|b| b.remove(&id)) {
            return Ok(r);
        }
        remote.fetch_record(id).await
    }
}

/// What a pull moved: objects written here, bytes transferred.
#[derive(Default)]
pub(super) struct Moved {
    pub objects: usize,
    pub bytes: u64,
}

/// Packs downloaded at once.
const PACK_DOWNLOADS: usize = 8;

fn local_io(source: std::io::Error) -> Error {
    store::Error::Io {
        path: "objects".into(),
        source,
    }
    .into()
}

/// Whether the local store has each of `ids`.
async fn contains_all(backend: &Arc<dyn ObjectBackend>, ids: Vec<ObjectId>) -> Result<Vec<bool>> {
    let b = backend.clone();
    tokio::task::spawn_blocking(move || {
        ids.iter()
            .map(|id| b.contains(id))
            .collect::<std::io::Result<Vec<bool>>>()
    })
    .await
    .map_err(join_err)?
    .map_err(local_io)
}

/// A local object's content, verified.
async fn read_local(backend: Arc<dyn ObjectBackend>, id: ObjectId) -> Result<Vec<u8>> {
    tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
        let raw = backend
            .read(&id)
            .map_err(local_io)?
            .ok_or(store::Error::Missing {
                id,
                context: "pull".into(),
            })?;
        Ok(Store::verify_stored(&id, &raw)?)
    })
    .await
    .map_err(join_err)?
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::Io {
        path: "(worker task)".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Every object the checkpoints reach, each once: trees in depth-first
/// pre-order (so a checkpoint's tree structure lies together in its packs),
/// chunks in the order their files appear.
fn ordered_objects(
    store: &Store,
    ancestry: &[(ObjectId, Checkpoint)],
) -> Result<(Vec<ObjectId>, Vec<ObjectId>)> {
    let mut seen = HashSet::new();
    let (mut trees, mut chunks) = (Vec::new(), Vec::new());
    for (ck, c) in ancestry {
        let context = format!("push of checkpoint {ck}");
        let mut stack = vec![c.root];
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            trees.push(t);
            let mut subs = Vec::new();
            for e in store.get_tree(&t, &context)?.entries {
                match e.content {
                    Content::Tree(sub) => subs.push(sub),
                    Content::Extents(ext) => {
                        for id in ext.iter().filter_map(|x| x.id) {
                            if seen.insert(id) {
                                chunks.push(id);
                            }
                        }
                    }
                    _ => {}
                }
            }
            stack.extend(subs.into_iter().rev());
        }
        // A commit's operation log travels with it (not a tree: a blob). A
        // checkpoint pulled from a remote that lacks it has none here.
        if let Some(ops) = c.source.ops
            && store.has_object(&ops)?
            && seen.insert(ops)
        {
            chunks.push(ops);
        }
    }
    Ok((trees, chunks))
}
