//! push and pull.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};

use super::{Error, PARALLEL, Remote, Result, corrupt_object};
use crate::store::progress::{Progress, SharedProgress};
use crate::store::{self, Checkpoint, Content, ObjectBackend, ObjectId, Store, Tree};

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

            let mut needed = HashSet::new();
            for (ck, c) in &ancestry {
                store
                    .mark_reachable(&c.root, &mut needed, &format!("push of checkpoint {ck}"))
                    .map_err(|(_, e)| e)?;
            }
            let present = self.list_ids("objects", "").await?;
            let mut missing: Vec<ObjectId> = needed.difference(&present).copied().collect();
            missing.sort();
            let mut report = PushReport {
                checkpoints: ancestry.len(),
                objects_needed: needed.len(),
                objects_uploaded: missing.len(),
                ..Default::default()
            };
            opts.progress.set_total(missing.len() as u64);
            let backend = store.backend().clone();
            let sizes: Vec<u64> = futures::stream::iter(missing)
                .map(|id| self.upload_object(backend.clone(), id, &*opts.progress))
                .buffer_unordered(PARALLEL)
                .try_collect()
                .await?;
            report.bytes_uploaded = sizes.iter().sum();

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
                    self.check_descends(name, &c.content, target, &ancestors)?;
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
        })
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

    /// Read one local object, check it (a corrupt local object is never
    /// uploaded), upload its stored bytes. Returns the stored size.
    async fn upload_object(
        &self,
        backend: Arc<dyn ObjectBackend>,
        id: ObjectId,
        progress: &dyn Progress,
    ) -> Result<u64> {
        let raw = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let raw = backend
                .read(&id)
                .map_err(|source| store::Error::Io {
                    path: "objects".into(),
                    source,
                })?
                .ok_or_else(|| store::Error::Missing {
                    id,
                    context: "needed by push".into(),
                })?;
            Store::verify_stored(&id, &raw)?;
            Ok(raw)
        })
        .await
        .map_err(join_err)??;
        let len = raw.len() as u64;
        let key = format!("objects/{id}");
        self.objects
            .put(&ObjPath::from(key.as_str()), PutPayload::from(raw))
            .await
            .map_err(|e| self.backend_err(format!("writing {key}"), e))?;
        progress.advance(1);
        Ok(len)
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
                return Err(store::Error::Invalid(format!(
                    "'{local}' is a fork; a ref cannot take its name (pull --as ANOTHER_NAME, or pull --fork {local} to move the fork)"
                ))
                .into());
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
                let (ckpt, bytes) = self.fetch_record(id).await?;
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
            // and decoded to find its children), then the chunks.
            let backend = store.backend().clone();
            let mut fetched_count = 0usize;
            let mut fetched_bytes = 0u64;
            let mut seen: HashSet<ObjectId> = HashSet::new();
            let mut frontier: Vec<(ObjectId, ObjectId)> = Vec::new();
            for (ck, (c, _)) in &fetched {
                if seen.insert(c.root) {
                    frontier.push((c.root, *ck));
                }
            }
            let mut chunks: Vec<(ObjectId, ObjectId)> = Vec::new();
            while !frontier.is_empty() {
                let results: Vec<(Tree, ObjectId, u64)> = futures::stream::iter(frontier)
                    .map(|(id, ck)| {
                        let backend = backend.clone();
                        async move {
                            let (bytes, n) =
                                self.fetch_object(backend, id, ck, &*opts.progress).await?;
                            let tree = Tree::decode(&bytes).map_err(|e| Error::CorruptObject {
                                remote: self.name.clone(),
                                id,
                                detail: format!("tree: {e}"),
                            })?;
                            Ok::<_, Error>((tree, ck, n))
                        }
                    })
                    .buffer_unordered(PARALLEL)
                    .try_collect()
                    .await?;
                frontier = Vec::new();
                for (tree, ck, n) in results {
                    if n > 0 {
                        fetched_count += 1;
                        fetched_bytes += n;
                    }
                    for e in tree.entries {
                        match e.content {
                            Content::Tree(sub) if seen.insert(sub) => frontier.push((sub, ck)),
                            Content::Extents(ext) => {
                                for id in ext.iter().filter_map(|x| x.id) {
                                    if seen.insert(id) {
                                        chunks.push((id, ck));
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
            let sizes: Vec<u64> = futures::stream::iter(chunks)
                .map(|(id, ck)| {
                    let backend = backend.clone();
                    async move {
                        let (_, n) = self
                            .fetch_object_raw(backend, id, ck, &*opts.progress, false)
                            .await?;
                        Ok::<_, Error>(n)
                    }
                })
                .buffer_unordered(PARALLEL)
                .try_collect()
                .await?;
            for n in sizes.into_iter().filter(|n| *n > 0) {
                fetched_count += 1;
                fetched_bytes += n;
            }

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

    /// An object's bytes (decompressed, verified): from the local store if it
    /// has it, else fetched, verified and written locally. The stored size
    /// fetched (0 when it was local).
    async fn fetch_object(
        &self,
        backend: Arc<dyn ObjectBackend>,
        id: ObjectId,
        ck: ObjectId,
        progress: &dyn Progress,
    ) -> Result<(Vec<u8>, u64)> {
        self.fetch_object_raw(backend, id, ck, progress, true).await
    }

    /// As [`Remote::fetch_object`]; with `want` false the bytes are not
    /// returned (and a local object is not read).
    async fn fetch_object_raw(
        &self,
        backend: Arc<dyn ObjectBackend>,
        id: ObjectId,
        ck: ObjectId,
        progress: &dyn Progress,
        want: bool,
    ) -> Result<(Vec<u8>, u64)> {
        let io = |source| store::Error::Io {
            path: "objects".into(),
            source,
        };
        let b = backend.clone();
        let local = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>> {
            if !b.contains(&id).map_err(io)? {
                return Ok(None);
            }
            if !want {
                return Ok(Some(Vec::new()));
            }
            let raw = b.read(&id).map_err(io)?.ok_or(store::Error::Missing {
                id,
                context: "pull".into(),
            })?;
            Ok(Some(Store::verify_stored(&id, &raw)?))
        })
        .await
        .map_err(join_err)??;
        if let Some(bytes) = local {
            return Ok((bytes, 0));
        }
        let key = format!("objects/{id}");
        let raw = self
            .get_async(&key)
            .await?
            .ok_or_else(|| Error::MissingObject {
                remote: self.name.clone(),
                id,
                context: format!("{key} is not there; checkpoint {ck} needs it"),
            })?;
        let len = raw.len() as u64;
        let remote = self.name.clone();
        let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>> {
            let bytes =
                Store::verify_stored(&id, &raw).map_err(|e| corrupt_object(&remote, id, e))?;
            backend.write(&id, &raw).map_err(io)?;
            Ok(if want { bytes } else { Vec::new() })
        })
        .await
        .map_err(join_err)??;
        progress.advance(1);
        Ok((bytes, len))
    }
}

fn join_err(e: tokio::task::JoinError) -> Error {
    Error::Io {
        path: "(worker task)".into(),
        source: std::io::Error::other(e.to_string()),
    }
}
