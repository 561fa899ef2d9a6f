//! Remotes: share checkpoints across machines through object storage (S3,
//! Google Cloud Storage, Azure Blob Storage or a local directory), with `push`
//! and `pull`. Sits between `store` (which it
//! uses) and `cli` (which calls it); nothing below depends on it.
//!
//! Layout under the remote URL's prefix (docs/format.md, "Remotes"):
//! `objects/<64 hex>` (the stored zstd frame, exactly as the local store has
//! it), `checkpoints/<64 hex>.json` (the record's bytes), `refs/<name>`
//! (`<64 hex>\n`).
//!
//! The API is blocking: each [`Remote`] owns a tokio runtime and every public
//! call ends in `block_on`. The store stays synchronous; its reads, writes and
//! the CPU work of verification run on the runtime's blocking pool.
//!
//! Order of publication: objects, then checkpoint records, then the ref, on
//! both sides, so a reader never sees a ref (or record) whose objects are
//! missing. The remote ref moves by compare-and-swap (docs/design.md).

mod config;
mod gc;
mod lazy;
mod lock;
mod nofollow;
mod ops;
mod pack;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::store::{self, ObjectId};

pub use config::{add, list, remove, url_of};
pub use gc::{RemoteGcOptions, RemoteGcReport};
pub use lazy::{FetchStats, LazyBackend, LazyTarget, prepare_lazy_mount};
pub use ops::{PullOptions, PullReport, PushOptions, PushReport};

/// How many transfers run at once.
pub const PARALLEL: usize = 16;

/// Everything that can go wrong with a remote; each message is one line naming
/// the remote (and object) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "bad remote URL '{0}': use s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX (credentials from AWS_*, GOOGLE_*, AZURE_*) or file:///ABSOLUTE/PATH"
    )]
    BadUrl(String),
    #[error("no remote named '{0}'")]
    UnknownRemote(String),
    #[error("remote '{0}' exists already ({1})")]
    RemoteExists(String, String),
    #[error("remote config {path}: {detail}; fix or remove the file")]
    BadConfig { path: PathBuf, detail: String },
    #[error(
        "remote '{remote}' ({url}): {what}: {source}; check the URL, {} and network, then run again (finished transfers are kept)",
        settings_of(.url)
    )]
    Backend {
        remote: String,
        url: String,
        what: String,
        source: Box<object_store::Error>,
    },
    #[error(
        "remote '{remote}': object {id} is corrupt ({detail}); nothing was published here; push it again from a store that has it intact"
    )]
    CorruptObject {
        remote: String,
        id: ObjectId,
        detail: String,
    },
    #[error(
        "remote '{remote}': object {id} is missing ({context}); nothing was published here; push it again from a store that has it"
    )]
    MissingObject {
        remote: String,
        id: ObjectId,
        context: String,
    },
    #[error(
        "remote '{remote}': checkpoint record {id} is corrupt or missing ({detail}); nothing was published here; push it again from a store that has it"
    )]
    BadRecord {
        remote: String,
        id: ObjectId,
        detail: String,
    },
    #[error("remote '{remote}' has no ref '{name}'")]
    NoRemoteRef { remote: String, name: String },
    #[error("remote ref {remote}/{name} holds '{content}', not a checkpoint id")]
    BadRemoteRef {
        remote: String,
        name: String,
        content: String,
    },
    #[error(
        "remote ref {remote}/{name} is at {theirs}, which is not an ancestor of {ours}: someone else pushed"
    )]
    Conflict {
        remote: String,
        name: String,
        theirs: String,
        ours: ObjectId,
    },
    #[error(
        "local ref {name} is at {ours}, which is not an ancestor of {theirs} (pulled from '{remote}')"
    )]
    LocalConflict {
        remote: String,
        name: String,
        ours: ObjectId,
        theirs: ObjectId,
    },
    #[error(
        "remote '{remote}' cannot be reached ({detail}) and this store has no earlier lazy mount of {remote}:{name} to fall back on; check the URL, its credentials in the environment (AWS_*, GOOGLE_*, AZURE_*) and network"
    )]
    Offline {
        remote: String,
        name: String,
        detail: String,
    },
    #[error("remote pack {key} is damaged ({detail})")]
    BadPack { key: String, detail: String },
    #[error(
        "remote '{remote}': {key} holds {size} bytes or more, over the {cap} bytes {what} may have; refused (storefs never pushes one that large: the remote is damaged or not storefs's)"
    )]
    TooLarge {
        remote: String,
        key: String,
        size: u64,
        cap: u64,
        what: &'static str,
    },
    #[error(
        "remote '{remote}' is busy: {what}; this {ours} did nothing. Run it again when that ends (a lock untouched for 30 minutes is ignored)"
    )]
    Locked {
        remote: String,
        what: String,
        ours: &'static str,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A pull into a local ref whose name a fork has.
    #[error("'{0}' is a fork; a ref cannot take its name")]
    ForkNamed(String),
    #[error(transparent)]
    Store(#[from] store::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What configures the backend of remote `url`, for messages.
fn settings_of(url: &str) -> &'static str {
    match Location::parse(url) {
        Ok(Location::S3 { .. }) => "AWS_* settings",
        Ok(Location::Gcs { .. }) => "GOOGLE_* settings",
        Ok(Location::Azure { .. }) => "AZURE_* settings",
        Ok(Location::File(_)) => "the directory's permissions",
        Err(_) => "credentials in the environment",
    }
}

/// Where a remote lives, parsed from its URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `s3://bucket/prefix`
    S3 { bucket: String, prefix: String },
    /// `gs://bucket/prefix` (Google Cloud Storage)
    Gcs { bucket: String, prefix: String },
    /// `az://container/prefix` (Azure Blob Storage; the account from AZURE_*)
    Azure { container: String, prefix: String },
    /// `file:///abs/path`
    File(PathBuf),
}

impl Location {
    /// Parse `s3://BUCKET[/PREFIX]`, `gs://BUCKET[/PREFIX]`,
    /// `az://CONTAINER[/PREFIX]` or `file:///ABSOLUTE/PATH`.
    pub fn parse(url: &str) -> Result<Location> {
        let bad = || Error::BadUrl(url.to_string());
        for scheme in ["s3", "gs", "az"] {
            let Some(rest) = url.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) else {
                continue;
            };
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let prefix = prefix.trim_matches('/');
            let ok_bucket = !bucket.is_empty()
                && bucket
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'));
            let ok_prefix = prefix
                .split('/')
                .all(|c| !matches!(c, "." | "..") && !c.contains(['\\', '#', '?']));
            if !ok_bucket || !ok_prefix || prefix.contains("//") {
                return Err(bad());
            }
            let (bucket, prefix) = (bucket.to_string(), prefix.to_string());
            return Ok(match scheme {
                "s3" => Location::S3 { bucket, prefix },
                "gs" => Location::Gcs { bucket, prefix },
                _ => Location::Azure {
                    container: bucket,
                    prefix,
                },
            });
        }
        if let Some(path) = url.strip_prefix("file://") {
            let p = PathBuf::from(path);
            if !p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
                return Err(bad());
            }
            return Ok(Location::File(p));
        }
        Err(bad())
    }
}

/// What [`Remote::list_refs`] found.
#[derive(Debug, Default)]
pub struct RefListing {
    /// Each ref's name and the checkpoint id it holds, by name.
    pub refs: Vec<(String, String)>,
    /// Each file under `refs/` that is not a ref.
    pub skipped: Vec<Skipped>,
}

/// A file under a remote's `refs/` that [`Remote::list_refs`] skipped; its
/// text is the warning (the CLI adds the commands that fix a ref that
/// holds no id, `cli/hint.rs`).
#[derive(Debug, thiserror::Error)]
pub enum Skipped {
    /// Why, in one line.
    #[error("{0}")]
    Other(String),
    /// The ref holds `shown` (its start), which is no checkpoint id.
    #[error("skipping remote ref {remote}/{name}: it holds '{shown}', not a checkpoint id")]
    NotAnId {
        remote: String,
        name: String,
        shown: String,
    },
}

/// A `file://` remote's store, as [`Remote`] keeps it beside its `objects`.
type LocalStore = Arc<nofollow::NoFollowFs>;

/// An open remote: its object store and the runtime that drives it.
pub struct Remote {
    name: String,
    url: String,
    objects: Arc<dyn ObjectStore>,
    /// `file://` remotes: the same store as `objects`, for the ref lock
    /// (it has no conditional update) and the listing of `refs/`.
    local: Option<LocalStore>,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({} = {})", self.name, self.url)
    }
}

/// A remote ref as read: its content and the version to compare-and-swap against.
#[derive(Clone, Debug)]
pub(crate) struct RefState {
    pub content: String,
    pub version: UpdateVersion,
}

impl Remote {
    /// Open the remote named `name` in `store`'s config.
    pub fn open(store: &store::Store, name: &str) -> Result<Remote> {
        let url = url_of(store, name)?;
        Self::open_url(name, &url)
    }

    /// Open a remote by URL (`name` is only for messages). A `file://`
    /// directory is created if missing. Nothing is contacted yet.
    pub fn open_url(name: &str, url: &str) -> Result<Remote> {
        Self::open_url_with(name, url, false)
    }

    /// Open the remote named `name` for a lazy mount's start-up: a missing
    /// `file://` directory is an error and a cloud backend gives up after seconds (see
    /// [`object_store_for`]), and the runtime is single-threaded, so it
    /// leaves no thread behind in the process that goes on to serve the mount.
    pub(crate) fn open_for_lazy_mount(store: &store::Store, name: &str) -> Result<Remote> {
        Self::open_url_with(name, &url_of(store, name)?, true)
    }

    fn open_url_with(name: &str, url: &str, lazy: bool) -> Result<Remote> {
        let (objects, local) = object_store_for(name, url, lazy)?;
        let mut builder = if lazy {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        };
        let rt = builder
            .enable_all()
            .thread_name("storefs-remote")
            .build()
            .map_err(|source| Error::Io {
                path: PathBuf::from("(tokio runtime)"),
                source,
            })?;
        Ok(Remote {
            name: name.to_string(),
            url: url.to_string(),
            objects,
            local,
            rt,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn backend_err(&self, what: impl Into<String>, source: object_store::Error) -> Error {
        Error::Backend {
            remote: self.name.clone(),
            url: self.url.clone(),
            what: what.into(),
            source: Box::new(source),
        }
    }

    // ---- raw access (blocking); push/pull and the tests use these ----

    /// The bytes at `key` (relative to the remote's prefix), or `None`;
    /// read whole, whatever its size (the tests' raw access).
    pub fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.rt.block_on(self.get_async(key, u64::MAX, "a file"))
    }

    /// The body of `got` (a GET of `key`), at most `cap` bytes
    /// ([`read_capped`]); past it, [`Error::TooLarge`] naming `what`.
    async fn body(
        &self,
        got: object_store::GetResult,
        key: &str,
        cap: u64,
        what: &'static str,
    ) -> Result<Vec<u8>> {
        read_capped(got, cap).await.map_err(|e| match e {
            Capped::Over(size) => Error::TooLarge {
                remote: self.name.clone(),
                key: key.to_string(),
                size,
                cap,
                what,
            },
            Capped::Backend(e) => self.backend_err(format!("reading {key}"), e),
        })
    }

    /// Write `bytes` at `key`, replacing what is there.
    pub fn put_bytes(&self, key: &str, bytes: &[u8]) -> Result<()> {
        let path = ObjPath::from(key);
        self.rt
            .block_on(self.objects.put(&path, PutPayload::from(bytes.to_vec())))
            .map_err(|e| self.backend_err(format!("writing {key}"), e))?;
        Ok(())
    }

    /// Delete `key` (missing is fine).
    pub fn delete(&self, key: &str) -> Result<()> {
        let path = ObjPath::from(key);
        match self.rt.block_on(self.objects.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.backend_err(format!("deleting {key}"), e)),
        }
    }

    /// Every object id on the remote: in its packs, or loose under `objects/`
    /// (as storefs before packs wrote them).
    pub fn list_objects(&self) -> Result<HashSet<ObjectId>> {
        self.rt.block_on(async {
            let mut ids = self.list_ids("objects", "").await?;
            for (_, entries) in self.read_packs().await? {
                ids.extend(entries.iter().map(|e| e.id));
            }
            Ok(ids)
        })
    }

    /// The remote's published packs (`t-<hex>` or `d-<hex>`) and their
    /// entries, read from the remote (no cache).
    pub fn list_packs(&self) -> Result<Vec<(String, Vec<store::PackEntry>)>> {
        self.rt.block_on(self.read_packs())
    }

    async fn read_packs(&self) -> Result<Vec<(String, Vec<store::PackEntry>)>> {
        let err = |what: String, e| self.backend_err(what, e);
        let listing = pack::list_packs(&self.objects, &err).await?;
        let mut out = Vec::new();
        for p in listing.published {
            let stem = p.stem;
            let key = pack::idx_key(&stem);
            let bytes = self
                .get_async(&key, pack::MAX_CACHED_INDEX, "a pack index")
                .await?
                .unwrap_or_default();
            let entries = store::decode_index(&bytes).map_err(|e| Error::BadPack {
                key,
                detail: e.to_string(),
            })?;
            out.push((stem, entries));
        }
        Ok(out)
    }

    /// Remote ref `name`: its content and the version a conditional write
    /// compares against, or `None`.
    pub fn get_ref(&self, name: &str) -> Result<Option<(String, UpdateVersion)>> {
        Ok(self
            .rt
            .block_on(self.read_ref(name))?
            .map(|r| (r.content, r.version)))
    }

    /// Write remote ref `name` = `content` only if it is still at `version`
    /// (`None`: only if it does not exist); `Ok(false)` when it moved. On
    /// S3, GCS and Azure a conditional put (the server checks); on `file://` under the ref lock,
    /// where the check is ours ([`Remote::has_conditional_put`] is false).
    pub fn put_ref_if(
        &self,
        name: &str,
        version: Option<UpdateVersion>,
        content: &str,
    ) -> Result<bool> {
        let _lock = self.lock_ref(name)?;
        self.rt.block_on(async {
            if self.local.is_some() {
                let cur = self.read_ref(name).await?.map(|c| c.version);
                if cur != version {
                    return Ok(false);
                }
            }
            self.write_ref(name, version, content).await
        })
    }

    /// Every key under `dir/` (relative to the remote's prefix).
    pub fn list_keys(&self, dir: &str) -> Result<Vec<String>> {
        self.rt.block_on(async {
            Ok(self
                .list_metas(dir)
                .await?
                .into_iter()
                .map(|m| m.location.to_string())
                .collect())
        })
    }

    /// What a listing of `dir/` shows of each key under it.
    pub(crate) async fn list_metas(&self, dir: &str) -> Result<Vec<object_store::ObjectMeta>> {
        self.objects
            .list(Some(&ObjPath::from(dir)))
            .try_collect()
            .await
            .map_err(|e| self.backend_err(format!("listing {dir}/"), e))
    }

    /// The remote's refs and the checkpoint each names, by name; and one
    /// line for each file under `refs/` that is not a ref (a name storefs
    /// would not give a ref, content that is not a checkpoint id, a file
    /// that cannot be read), so one bad file does not hide the others.
    pub fn list_refs(&self) -> Result<RefListing> {
        self.rt.block_on(async {
            let mut listing = RefListing::default();
            for name in self.ref_names(&mut listing.skipped).await? {
                if let Err(e) = store::Store::check_name(&name) {
                    listing.skipped.push(Skipped::Other(format!(
                        "skipping remote ref file {}/refs/{}: {e}",
                        self.name,
                        name.escape_debug()
                    )));
                    continue;
                }
                match self.read_ref_id_if_any(&name).await {
                    Ok(Some(id)) => listing.refs.push((name, id.to_hex())),
                    // Deleted since the listing.
                    Ok(None) => {}
                    Err(Error::BadRemoteRef { content, .. }) => {
                        let mut shown: String = content.chars().take(40).collect();
                        if shown.len() < content.len() {
                            shown.push('…');
                        }
                        listing.skipped.push(Skipped::NotAnId {
                            remote: self.name.clone(),
                            name,
                            shown,
                        });
                    }
                    Err(e) => listing.skipped.push(Skipped::Other(format!(
                        "skipping remote ref {}/{name}: {e}",
                        self.name
                    ))),
                }
            }
            listing.refs.sort();
            Ok(listing)
        })
    }

    /// The names of the files under `refs/`. A `file://` remote's directory
    /// is read here, so that a name object_store cannot take (not UTF-8,
    /// a stray `%`) is reported in `skipped` rather than ending the listing.
    async fn ref_names(&self, skipped: &mut Vec<Skipped>) -> Result<Vec<String>> {
        let Some(local) = &self.local else {
            let metas = self.list_metas("refs").await?;
            return Ok(metas
                .iter()
                .filter(|m| m.location.parts().count() == 2)
                .filter_map(|m| m.location.filename().map(str::to_string))
                .collect());
        };
        let entries = local.names_in("refs").map_err(|source| Error::Io {
            path: local.path().join("refs"),
            source,
        })?;
        let mut names = Vec::new();
        for (name, is_file) in entries {
            match name.to_str() {
                // The file of a put under way (`NAME#DIGITS`).
                Some(n)
                    if n.split_once('#').is_some_and(|(_, k)| {
                        !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())
                    }) => {}
                Some(n) if is_file => names.push(n.to_string()),
                // Directories, symlinks (never followed) and other files
                // that are not regular.
                Some(_) => {}
                None => skipped.push(Skipped::Other(format!(
                    "skipping remote ref file {}/refs/{}: the name is not UTF-8",
                    self.name,
                    name.to_string_lossy().escape_debug()
                ))),
            }
        }
        Ok(names)
    }

    /// Delete remote ref `name`; what it held. Under the ref lock on
    /// `file://`; on S3 a plain delete (object_store has no conditional one).
    pub fn delete_ref(&self, name: &str) -> Result<String> {
        store::Store::check_name(name)?;
        let _lock = self.lock_ref(name)?;
        self.rt.block_on(async {
            let cur = self
                .read_ref(name)
                .await?
                .ok_or_else(|| Error::NoRemoteRef {
                    remote: self.name.clone(),
                    name: name.to_string(),
                })?;
            let key = format!("refs/{name}");
            self.objects
                .delete(&ObjPath::from(key.as_str()))
                .await
                .map_err(|e| self.backend_err(format!("deleting {key}"), e))?;
            Ok(cur.content)
        })
    }

    /// Whether the backend itself checks ref versions (S3, GCS, Azure: yes,
    /// a conditional put; `file://`: no, a lock file stands in).
    pub fn has_conditional_put(&self) -> bool {
        self.local.is_none()
    }

    // ---- async helpers ----

    /// The remote's pack index: lists `packs/` and reads the index files
    /// this store (`store_root`) has not cached yet.
    pub(crate) async fn pack_index(
        &self,
        store_root: &std::path::Path,
    ) -> Result<(pack::PackIndex, pack::PackListing)> {
        pack::refresh(&self.objects, store_root, &self.name, &|what, e| {
            self.backend_err(what, e)
        })
        .await
    }

    /// The bytes at `key`, or `None`; refused past `cap` bytes ([`Remote::body`]).
    async fn get_async(&self, key: &str, cap: u64, what: &'static str) -> Result<Option<Vec<u8>>> {
        let path = ObjPath::from(key);
        let got = match self.objects.get(&path).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.backend_err(format!("reading {key}"), e)),
        };
        self.body(got, key, cap, what).await.map(Some)
    }

    /// The checkpoint remote ref `name` names.
    async fn read_ref_id(&self, name: &str) -> Result<ObjectId> {
        self.read_ref_id_if_any(name)
            .await?
            .ok_or_else(|| Error::NoRemoteRef {
                remote: self.name.clone(),
                name: name.to_string(),
            })
    }

    /// The checkpoint remote ref `name` names, or `None` when there is no such ref.
    async fn read_ref_id_if_any(&self, name: &str) -> Result<Option<ObjectId>> {
        let Some(cur) = self.read_ref(name).await? else {
            return Ok(None);
        };
        ObjectId::from_hex(&cur.content)
            .map(Some)
            .ok_or_else(|| Error::BadRemoteRef {
                remote: self.name.clone(),
                name: name.to_string(),
                content: cur.content.clone(),
            })
    }

    /// Checkpoint record `id` from the remote, checked against its id: the
    /// record and its exact bytes.
    async fn fetch_record(&self, id: ObjectId) -> Result<(store::Checkpoint, Vec<u8>)> {
        let key = format!("checkpoints/{id}.json");
        let bad = |detail: String| Error::BadRecord {
            remote: self.name.clone(),
            id,
            detail,
        };
        let path = ObjPath::from(key.as_str());
        let got = match self.objects.get(&path).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(bad(format!("{key} is missing")));
            }
            Err(e) => return Err(self.backend_err(format!("reading {key}"), e)),
        };
        // Refused by its listed size before its bytes are read, and by what
        // arrives (a server may send more than it listed).
        let bytes = match read_capped(got, store::MAX_CHECKPOINT_RECORD).await {
            Ok(b) => b,
            Err(Capped::Over(size)) => {
                return Err(bad(store::record_too_large(size, &key).unwrap_or_default()));
            }
            Err(Capped::Backend(e)) => return Err(self.backend_err(format!("reading {key}"), e)),
        };
        let ckpt =
            store::Store::verify_record(&id, &bytes, &key).map_err(|e| bad(e.to_string()))?;
        Ok((ckpt, bytes))
    }

    /// Ids named `<64 hex><suffix>` directly under `dir/`.
    async fn list_ids(&self, dir: &str, suffix: &str) -> Result<HashSet<ObjectId>> {
        let metas = self.list_metas(dir).await?;
        Ok(metas
            .iter()
            .filter_map(|m| m.location.filename())
            .filter_map(|n| n.strip_suffix(suffix))
            .filter_map(ObjectId::from_hex)
            .collect())
    }

    /// The remote ref `name` with its version, or `None`.
    pub(crate) async fn read_ref(&self, name: &str) -> Result<Option<RefState>> {
        let key = format!("refs/{name}");
        let path = ObjPath::from(key.as_str());
        let got = match self.objects.get(&path).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.backend_err(format!("reading {key}"), e)),
        };
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        let bytes = self.body(got, &key, store::MAX_REF_FILE, "a ref").await?;
        Ok(Some(RefState {
            content: String::from_utf8_lossy(&bytes).trim().to_string(),
            version,
        }))
    }

    /// Write ref `name` = `content` if it is still at `version` (`None`: only
    /// if absent). `Ok(false)` when the precondition failed. For `file://`
    /// the caller holds [`Remote::lock_ref`] and the write is unconditional
    /// (the `file://` store has no conditional update).
    pub(crate) async fn write_ref(
        &self,
        name: &str,
        version: Option<UpdateVersion>,
        content: &str,
    ) -> Result<bool> {
        let key = format!("refs/{name}");
        let path = ObjPath::from(key.as_str());
        let mode = match (&self.local, version) {
            (Some(_), _) => PutMode::Overwrite,
            (None, Some(v)) => PutMode::Update(v),
            (None, None) => PutMode::Create,
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let payload = PutPayload::from(format!("{content}\n").into_bytes());
        // Every cloud backend maps a failed precondition the same way:
        // S3 and Azure (If-Match on the ETag, If-None-Match: *; azurite's
        // 409 too) and GCS (x-goog-if-generation-match, 0 for Create) give
        // AlreadyExists for Create and Precondition for Update. A version
        // without the ETag (S3, Azure) or generation (GCS) the backend needs
        // is an error from object_store, never an unconditional write.
        match self.objects.put_opts(&path, payload, opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.backend_err(format!("writing {key}"), e)),
        }
    }

    /// For `file://` remotes: an exclusive `flock` on `DIR/locks/ref-<name>`
    /// held while a ref is read, checked and written. `None` for S3, GCS and Azure, where
    /// the conditional put does that job.
    pub(crate) fn lock_ref(&self, name: &str) -> Result<Option<std::fs::File>> {
        let Some(local) = &self.local else {
            return Ok(None);
        };
        let key = format!("locks/ref-{name}");
        let io = |source| Error::Io {
            path: local.path().join(&key),
            source,
        };
        let f = local.open_lock_file(&key).map_err(io)?;
        crate::sys::lock(&f, crate::sys::Lock::Exclusive).map_err(io)?;
        Ok(Some(f))
    }
}

/// A remote object that failed [`store::Store::verify_stored`]: what is wrong with it.
fn corrupt_detail(e: store::Error) -> String {
    match e {
        store::Error::Corrupt { detail, .. } => detail,
        other => other.to_string(),
    }
}

/// The error for remote object `id` that failed verification.
fn corrupt_object(remote: &str, id: ObjectId, e: store::Error) -> Error {
    Error::CorruptObject {
        remote: remote.to_string(),
        id,
        detail: corrupt_detail(e),
    }
}

/// A `file://` remote that push, pull and `gc --remote` write in or delete
/// from: nothing in it may be a symlink (storefs never makes one there), and
/// unless `STOREFS_SAFE_STORES` names it, every directory must be the
/// caller's and writable by nobody else. The store never follows a symlink
/// ([`nofollow::NoFollowFs`]), so one planted after this check fails the
/// operation that meets it; the check is what keeps other users out of the
/// remote (they could still replace or delete its files). One line naming
/// the remote, the path and the fix.
fn check_local_remote(name: &str, dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |what: String| {
        Error::Store(store::Error::Invalid(format!(
            "refusing to use remote '{name}' ({}): {what}; a storefs remote holds no symlinks and only you should write it (or trust it with {}={})",
            dir.display(),
            store::SAFE_STORES_ENV,
            dir.display()
        )))
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let trusted = store::is_trusted(dir);
    let me = crate::sys::euid();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let m = std::fs::symlink_metadata(&d).map_err(io(&d))?;
        if m.file_type().is_symlink() && d != dir {
            return Err(refuse(format!("{} is a symlink", d.display())));
        }
        if !trusted && m.uid() != me {
            return Err(refuse(format!(
                "{} is owned by uid {}, not by you (uid {me})",
                d.display(),
                m.uid()
            )));
        }
        if !trusted && m.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "{} is writable by its group or others (mode {:04o})",
                d.display(),
                m.mode() & 0o7777
            )));
        }
        for ent in std::fs::read_dir(&d).map_err(io(&d))? {
            let ent = ent.map_err(io(&d))?;
            let t = ent.file_type().map_err(io(&ent.path()))?;
            if t.is_symlink() {
                return Err(refuse(format!("{} is a symlink", ent.path().display())));
            }
            if t.is_dir() {
                dirs.push(ent.path());
            }
        }
    }
    Ok(())
}

/// The crypto provider of the cloud backends' TLS (reqwest's rustls, built
/// without one of its own): ring, as object_store's request signing, instead
/// of aws-lc-rs, whose C library a cold build compiled with cmake. Installed
/// once per process before the first client is built (reqwest panics without
/// one); a provider installed already stays.
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The `object_store` for `url`, and for `file://` the same store, whose
/// directory is opened here once ([`nofollow::NoFollowFs`]: nothing beneath
/// it is reached through a symlink). For push
/// and pull (`lazy` false) a missing `file://` directory is created and cloud
/// requests are retried as `object_store` does by default (up to minutes).
/// For a lazy mount a missing directory is an error (a vanished remote must
/// not pass for an empty one) and cloud requests give up after a few seconds,
/// since a reader is blocked on them.
fn object_store_for(
    name: &str,
    url: &str,
    lazy: bool,
) -> Result<(Arc<dyn ObjectStore>, Option<LocalStore>)> {
    let backend = |what: &str, source| Error::Backend {
        remote: name.to_string(),
        url: url.to_string(),
        what: what.to_string(),
        source: Box::new(source),
    };
    // The same retry policy for every cloud backend: object_store's default
    // for push and pull, a few seconds for a lazy mount.
    let retry = || object_store::RetryConfig {
        max_retries: 2,
        retry_timeout: std::time::Duration::from_secs(10),
        ..Default::default()
    };
    let under = |store: Arc<dyn ObjectStore>, prefix: &str| -> Arc<dyn ObjectStore> {
        if prefix.is_empty() {
            store
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(store, prefix))
        }
    };
    let location = Location::parse(url)?;
    if !matches!(location, Location::File(_)) {
        install_tls_provider();
    }
    Ok(match location {
        Location::S3 { bucket, prefix } => {
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_url(format!("s3://{bucket}"));
            if lazy {
                builder = builder.with_retry(retry());
            }
            let s3 = builder.build().map_err(|e| backend("configuring S3", e))?;
            (under(Arc::new(s3), &prefix), None)
        }
        Location::Gcs { bucket, prefix } => {
            let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(format!("gs://{bucket}"));
            if lazy {
                builder = builder.with_retry(retry());
            }
            let gcs = builder
                .build()
                .map_err(|e| backend("configuring Google Cloud Storage", e))?;
            (under(Arc::new(gcs), &prefix), None)
        }
        Location::Azure { container, prefix } => {
            let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(format!("az://{container}"));
            if lazy {
                builder = builder.with_retry(retry());
            }
            let az = builder
                .build()
                .map_err(|e| backend("configuring Azure Blob Storage", e))?;
            (under(Arc::new(az), &prefix), None)
        }
        Location::File(dir) => {
            let io = |source| Error::Io {
                path: dir.clone(),
                source,
            };
            if !lazy {
                std::fs::create_dir_all(&dir).map_err(io)?;
                check_local_remote(name, &dir)?;
            } else if !dir.is_dir() {
                return Err(io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the remote directory is not there",
                )));
            }
            let fs = Arc::new(nofollow::NoFollowFs::open(&dir).map_err(io)?);
            (fs.clone(), Some(fs))
        }
    })
}

/// Why [`read_capped`] stopped.
pub(crate) enum Capped {
    /// Over the cap: the size listed, or the bytes that had arrived.
    Over(u64),
    Backend(object_store::Error),
}

/// The body of a GET, at most `cap` bytes: refused by the size the server
/// lists before a byte is read, and as soon as more than `cap` bytes have
/// arrived (a server may send more than it listed), so a hostile remote
/// costs at most `cap` bytes of memory per read.
pub(crate) async fn read_capped(
    got: object_store::GetResult,
    cap: u64,
) -> std::result::Result<Vec<u8>, Capped> {
    use futures::StreamExt;
    // The bytes this GET answers with: the object's, or its range's.
    let listed = got.range.end.saturating_sub(got.range.start);
    if listed > cap {
        return Err(Capped::Over(listed));
    }
    let mut out = Vec::with_capacity(listed as usize);
    let mut stream = got.into_stream();
    while let Some(part) = stream.next().await {
        let part = part.map_err(Capped::Backend)?;
        let len = out.len() as u64 + part.len() as u64;
        if len > cap {
            return Err(Capped::Over(len));
        }
        out.extend_from_slice(&part);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        assert_eq!(
            Location::parse("s3://bucket/some/prefix/").unwrap(),
            Location::S3 {
                bucket: "bucket".into(),
                prefix: "some/prefix".into()
            }
        );
        assert_eq!(
            Location::parse("s3://bucket").unwrap(),
            Location::S3 {
                bucket: "bucket".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            Location::parse("gs://bucket/p").unwrap(),
            Location::Gcs {
                bucket: "bucket".into(),
                prefix: "p".into()
            }
        );
        assert_eq!(
            Location::parse("az://container/a/b/").unwrap(),
            Location::Azure {
                container: "container".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            Location::parse("file:///srv/remote").unwrap(),
            Location::File(PathBuf::from("/srv/remote"))
        );
        for bad in [
            "http://x/y",
            "s3://",
            "s3:///prefix",
            "s3://b/../x",
            "gs://",
            "gs://b/x/../y",
            "az:///prefix",
            "az://c/./x",
            "azure://c/x",
            "gcs://b/x",
            "file://relative/path",
            "file:///a/../b",
            "/plain/path",
            "",
        ] {
            let e = Location::parse(bad).unwrap_err().to_string();
            assert!(
                ["s3://", "gs://", "az://", "file:///"]
                    .iter()
                    .all(|s| e.contains(s))
                    && e.contains(bad),
                "{e}"
            );
        }
    }
}
