//! Lazy mounts of a remote checkpoint (`storefs mount team:s1`).
//!
//! [`prepare_lazy_mount`] runs in the `mount` command before the daemon
//! starts: it reads the remote ref, fetches and checks the checkpoint record
//! and the root tree, and publishes them in the local store with the
//! checkpoint marked *partial* ([`Store::mark_partial`]). The daemon then
//! serves the checkpoint from a [`Store`] built over a [`LazyBackend`]: every
//! object is read from the local store first; a miss is fetched from the
//! remote, verified (decompress + sha256, [`Store::verify_stored`]) and
//! written into the local store, so later reads (and other processes, after
//! the next sync) find it there. A corrupt or tampered remote object is never
//! stored or served: the read fails (EIO at the FUSE layer) with a warning
//! naming the object and the remote.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parking_lot::{Condvar, Mutex, RwLock};

use super::pack::{self, Loc, PackIndex, PackKind};
use super::{Error, Remote, Result, corrupt_detail, corrupt_object, object_store_for, url_of};
use crate::store::{
    self, LocalBackend, ObjectId, ObjectMaintenance, ObjectRead, ObjectWrite, PackEntry, Store,
};

/// Fetched objects written but not yet synced that trigger a sync.
const SYNC_EVERY_OBJECTS: usize = 64;
/// Otherwise unsynced objects are synced within this long.
const SYNC_EVERY: Duration = Duration::from_secs(2);
/// Background prefetch requests in flight at most; further hints are dropped.
const MAX_PREFETCH: usize = 16;
/// The longest span of a tree pack one prefetch reads (storefs's packs
/// are about [`super::pack::PACK_TARGET`]; a longer span is another
/// writer's pack, and what lies past it is fetched when read).
const MAX_SPAN: u64 = 2 * super::pack::PACK_TARGET as u64;
/// A range of a tree pack and the trees wholly inside it.
type Span = (std::ops::Range<u64>, Vec<PackEntry>);

/// The pack index is read again at most this often (when a pack is gone).
const RELOAD_EVERY: Duration = Duration::from_secs(5);
/// How long unmount waits for fetches in flight before the final sync.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The checkpoint a lazy mount serves, and whether it came from the local
/// note because the remote could not be reached.
#[derive(Clone, Debug)]
pub struct LazyTarget {
    pub checkpoint: ObjectId,
    /// `Some(why)` when the remote could not be reached and the checkpoint
    /// is the one this store last saw for the ref.
    pub offline: Option<String>,
}

/// `STORE/remotes/<remote>.refs/<name>`: the id the remote ref had at the
/// last lazy mount, for mounting offline.
fn note_path(store: &Store, remote: &str, name: &str) -> PathBuf {
    store
        .root()
        .join("remotes")
        .join(format!("{remote}.refs"))
        .join(name)
}

/// Resolve `remote:name` for a lazy mount: read the remote ref, fetch and
/// check the record and the root tree, publish them here (the checkpoint
/// marked partial unless it was complete here already) and note the ref.
/// When the remote cannot be reached (network, credentials, a `file://`
/// directory that is gone), fall back to the noted checkpoint if its record
/// and root tree are here; a remote that answers but lacks the ref, or holds
/// a bad record or root tree, is an error.
pub fn prepare_lazy_mount(store: &Store, remote: &str, name: &str) -> Result<LazyTarget> {
    Store::check_name(name)?;
    match fetch_head(store, remote, name) {
        Ok((id, bytes)) => {
            let _lease = store.write_lease()?;
            if !store.has_checkpoint(&id) {
                store.mark_partial(&id, remote)?;
                store.put_checkpoint_record(&id, &bytes)?;
            }
            let note = note_path(store, remote, name);
            let io = |source| Error::Io {
                path: note.clone(),
                source,
            };
            std::fs::create_dir_all(note.parent().expect("note has a parent")).map_err(io)?;
            store::write_store_file(&note, format!("{id}\n").as_bytes(), 0o644, true)
                .map_err(io)?;
            Ok(LazyTarget {
                checkpoint: id,
                offline: None,
            })
        }
        Err(e @ (Error::Backend { .. } | Error::Io { .. })) => {
            let noted = store::read_store_file_capped(
                &note_path(store, remote, name),
                store::MAX_REF_FILE,
                "a ref",
            )
            .ok()
            .and_then(|b| ObjectId::from_hex(String::from_utf8_lossy(&b).trim()));
            let usable = noted.filter(|id| {
                store
                    .read_checkpoint(id)
                    .is_ok_and(|c| store.has_object(&c.root).unwrap_or(false))
            });
            match usable {
                Some(id) => Ok(LazyTarget {
                    checkpoint: id,
                    offline: Some(e.to_string()),
                }),
                None => Err(Error::Offline {
                    remote: remote.to_string(),
                    name: name.to_string(),
                    detail: e.to_string(),
                }),
            }
        }
        Err(e) => Err(e),
    }
}

/// Read remote ref `name`, its record (from here if present, else fetched
/// and checked) and make sure the root tree is here (fetched, verified,
/// written and synced). Returns the id and the record's bytes.
fn fetch_head(store: &Store, remote: &str, name: &str) -> Result<(ObjectId, Vec<u8>)> {
    let r = Remote::open_for_lazy_mount(store, remote)?;
    r.rt.block_on(async {
        let id = r.read_ref_id(name).await?;
        let (ckpt, bytes) = if store.has_checkpoint(&id) {
            store.read_checkpoint_with_bytes(&id)?
        } else {
            r.fetch_record(id).await?
        };
        let root = ckpt.root;
        let (index, _) = r.pack_index(store.root()).await?;
        if !store.has_object(&root)? {
            let err = |what: String, e| r.backend_err(what, e);
            let raw = match index.get(&root)? {
                Some(l) => {
                    let locs = [(root, l.offset, l.len)];
                    let (mut got, _) =
                        pack::read_objects(&r.objects, &index.pack(&l).stem, &locs, false, &err)
                            .await?;
                    got.pop().map(|(_, raw)| raw).unwrap_or_default()
                }
                None => {
                    let key = format!("objects/{root}");
                    r.get_async(&key, store::MAX_LOOSE_FILE, "a stored object").await?.ok_or_else(|| Error::MissingObject {
                        remote: remote.to_string(),
                        id: root,
                        context: format!(
                            "it is in no pack and {key} is not there; checkpoint {id} needs it as its root tree"
                        ),
                    })?
                }
            };
            let tree =
                Store::verify_stored(&root, &raw).map_err(|e| corrupt_object(remote, root, e))?;
            store::Tree::decode(&tree).map_err(|e| Error::CorruptObject {
                remote: remote.to_string(),
                id: root,
                detail: format!("tree: {e}"),
            })?;
            store
                .backend()
                .write(&root, &raw)
                .map_err(|source| Error::Io {
                    path: store.root().join("objects"),
                    source,
                })?;
            store.sync_objects()?;
        }
        Ok((id, bytes))
    })
}

/// What a lazy mount fetched (stored, i.e. compressed, bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchStats {
    pub objects: u64,
    pub bytes: u64,
}

/// An [`ObjectBackend`] over this store's [`LocalBackend`] that fetches what
/// it lacks from a remote (see the module documentation).
///
/// `read` is the only method that reaches the remote (plus the `prefetch`
/// hint). `contains`, `list`, `stat`, `locate` and the gc and quarantine
/// methods answer for the local store only: they are asked by gc, verify and
/// writers, which must see what is really here, and a `contains` that went
/// to the network would turn every dedup check into a request.
pub struct LazyBackend {
    shared: Arc<Shared>,
    /// The runtime the fetches run on: `read` blocks on it, prefetches are
    /// spawned on it. Its threads block the stop signals (SIGTERM, SIGINT,
    /// SIGHUP), which the mount daemon waits for on its own thread to unmount
    /// cleanly; a runtime thread started before the daemon blocked them would
    /// otherwise take them.
    rt: tokio::runtime::Runtime,
}

struct Shared {
    remote: String,
    url: String,
    local: LocalBackend,
    /// Where the store is (for the cached pack index files).
    store_root: PathBuf,
    /// Where each packed object is on the remote; read again when a pack
    /// it names is gone (repacked by a remote gc).
    index: RwLock<Arc<PackIndex>>,
    /// When the index was last read again (at most every [`RELOAD_EVERY`]).
    reloaded: Mutex<Option<Instant>>,
    /// `None` when the remote could not be opened (its `file://` directory
    /// is gone, bad S3 settings): every miss fails.
    objects: Option<Arc<dyn ObjectStore>>,
    /// Fetches in flight (foreground or prefetch); a second reader of the
    /// same id waits for the first instead of fetching again.
    inflight: Mutex<HashMap<ObjectId, Arc<Flight>>>,
    prefetching: AtomicUsize,
    fetched_objects: AtomicU64,
    fetched_bytes: AtomicU64,
    unsynced: AtomicUsize,
    last_sync: Mutex<Instant>,
    sync_lock: Mutex<()>,
}

/// A fetched object: its stored bytes and, verified against its id, its content.
struct Fetched {
    raw: Vec<u8>,
    plain: Vec<u8>,
}

/// An object read from the local store, or fetched from the remote.
enum Found {
    Local(Vec<u8>),
    Fetched(Fetched),
}

#[derive(Default)]
struct Flight {
    done: Mutex<bool>,
    cv: Condvar,
}

impl Flight {
    fn wait(&self) {
        let mut done = self.done.lock();
        while !*done {
            self.cv.wait(&mut done);
        }
    }
}

impl LazyBackend {
    /// Serve `store`'s objects, fetching misses from remote `remote` (its
    /// name in `store`'s config). A remote that cannot be opened is logged;
    /// the backend then serves local objects only.
    pub fn open(store: &Store, remote: &str) -> Result<LazyBackend> {
        let url = url_of(store, remote)?;
        let objects = match object_store_for(remote, &url, true) {
            Ok((o, _)) => Some(o),
            Err(e) => {
                tracing::warn!(remote, error = %e, "remote cannot be opened; only objects already in the local store can be read, the rest get EIO");
                None
            }
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("storefs-lazy")
            .on_thread_start(|| {
                if let Err(e) = crate::sys::block_stop_signals() {
                    tracing::warn!(error = %e, "cannot block the stop signals in a runtime thread");
                }
            })
            .build()
            .map_err(|source| Error::Io {
                path: PathBuf::from("(tokio runtime)"),
                source,
            })?;
        let shared = Arc::new(Shared {
            remote: remote.to_string(),
            url,
            local: LocalBackend::new(store.root().join("objects")),
            store_root: store.root().to_path_buf(),
            index: RwLock::new(Arc::new(pack::load_cached(store.root(), remote))),
            reloaded: Mutex::new(None),
            objects,
            inflight: Mutex::new(HashMap::new()),
            prefetching: AtomicUsize::new(0),
            fetched_objects: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            unsynced: AtomicUsize::new(0),
            last_sync: Mutex::new(Instant::now()),
            sync_lock: Mutex::new(()),
        });
        // Fetched objects become durable (and visible to other processes)
        // within SYNC_EVERY even when reads stop.
        let ticker = Arc::downgrade(&shared);
        rt.spawn(async move {
            loop {
                tokio::time::sleep(SYNC_EVERY).await;
                let Some(s) = ticker.upgrade() else { break };
                if s.unsynced.load(Ordering::SeqCst) > 0 {
                    let _ = tokio::task::spawn_blocking(move || s.sync_now()).await;
                }
            }
        });
        Ok(LazyBackend { shared, rt })
    }

    /// What was fetched so far.
    pub fn stats(&self) -> FetchStats {
        FetchStats {
            objects: self.shared.fetched_objects.load(Ordering::SeqCst),
            bytes: self.shared.fetched_bytes.load(Ordering::SeqCst),
        }
    }

    /// At unmount: wait (bounded) for fetches in flight, sync, and log what
    /// was fetched.
    pub fn finish(&self) -> FetchStats {
        let start = Instant::now();
        while !self.shared.inflight.lock().is_empty() && start.elapsed() < DRAIN_TIMEOUT {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(e) = self.shared.sync_now() {
            tracing::warn!(error = %e, "sync of fetched objects failed; they will be fetched again when needed");
        }
        let stats = self.stats();
        tracing::info!(
            remote = %self.shared.remote,
            fetched_objects = stats.objects,
            fetched_bytes = stats.bytes,
            "lazy mount: fetched from the remote"
        );
        stats
    }
}

impl Shared {
    /// Fetch `id` from the remote (from its pack, or loose), verify it,
    /// write it locally; its stored bytes and its content. Failures are warnings for a read, debug lines for a prefetch
    /// (the read that needs the object, if any, warns); a corrupt object
    /// always warns.
    async fn fetch(self: Arc<Self>, id: ObjectId, prefetch: bool) -> io::Result<Fetched> {
        let fail = |msg: &str, e: &dyn std::fmt::Display| {
            if prefetch {
                tracing::debug!(object = %id, remote = %self.remote, error = %e, "prefetch: {msg}");
            } else {
                tracing::warn!(object = %id, remote = %self.remote, url = %self.url, error = %e, "{msg}; this read gets EIO");
            }
        };
        let Some(objects) = self.objects.clone() else {
            fail(
                "object is not in the local store and the remote cannot be opened",
                &"no remote",
            );
            return Err(io::Error::other(format!(
                "object {id} is not in the local store and remote '{}' cannot be opened",
                self.remote
            )));
        };
        let got = self.clone().fetch_from(&objects, id, &fail).await;
        self.sync_soon();
        got
    }

    /// [`Shared::fetch`] once the remote is open.
    async fn fetch_from(
        self: Arc<Self>,
        objects: &Arc<dyn ObjectStore>,
        id: ObjectId,
        fail: &(dyn Fn(&str, &dyn std::fmt::Display) + Sync),
    ) -> io::Result<Fetched> {
        let mut reloaded = false;
        loop {
            let index = self.index.read().clone();
            let loc = index
                .lookup(&id)
                .inspect_err(|e| fail("cannot read the remote's pack index", e))?;
            tracing::debug!(object = %id, pack = ?loc.map(|l| index.pack(&l).stem.clone()), "fetching from the remote");
            let got = match loc {
                Some(l) => {
                    let stem = index.pack(&l).stem.clone();
                    self.clone()
                        .fetch_ranges(objects, &stem, vec![(id, l)])
                        .await
                }
                None => self.clone().fetch_loose(objects, id).await,
            };
            return match got {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A pack a remote gc replaced, or an object newer than
                    // the index: read the index again, once.
                    if !reloaded {
                        reloaded = true;
                        if self.reload_index(objects).await {
                            continue;
                        }
                    }
                    fail("object is neither here nor on the remote", &e);
                    Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("object {id} is not on remote '{}'", self.remote),
                    ))
                }
                Err(e) => {
                    if e.kind() != io::ErrorKind::InvalidData {
                        fail("remote read failed", &e);
                    }
                    Err(e)
                }
                // keep() warned already.
                Ok(mut fetched) => fetched.remove(&id).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("object {id} from remote '{}' is corrupt", self.remote),
                    )
                }),
            };
        }
    }

    /// `objects/<id>` (pushed loose by an older storefs), verified and kept.
    async fn fetch_loose(
        self: Arc<Self>,
        objects: &Arc<dyn ObjectStore>,
        id: ObjectId,
    ) -> io::Result<HashMap<ObjectId, Fetched>> {
        let key = format!("objects/{id}");
        let got = objects
            .get(&ObjPath::from(key.as_str()))
            .await
            .map_err(|e| self.remote_io(&key, e))?;
        let raw = match super::read_capped(got, store::MAX_LOOSE_FILE).await {
            Ok(raw) => raw,
            Err(super::Capped::Backend(e)) => return Err(self.remote_io(&key, e)),
            Err(super::Capped::Over(n)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "remote '{}': {key} holds {n} bytes or more, over the {} a stored object may have",
                        self.remote,
                        store::MAX_LOOSE_FILE
                    ),
                ));
            }
        };
        let f = tokio::task::spawn_blocking(move || self.keep(id, raw))
            .await
            .map_err(|e| io::Error::other(e.to_string()))??;
        Ok(HashMap::from([(id, f)]))
    }

    /// Objects of one data pack by ranged GETs (close ones merged into one
    /// request), each verified and kept.
    async fn fetch_ranges(
        self: Arc<Self>,
        objects: &Arc<dyn ObjectStore>,
        stem: &str,
        locs: Vec<(ObjectId, Loc)>,
    ) -> io::Result<HashMap<ObjectId, Fetched>> {
        let key = pack::pack_key(stem);
        let ranges: Vec<std::ops::Range<u64>> = locs
            .iter()
            .map(|(_, l)| l.offset..l.offset + l.len as u64)
            .collect();
        let got = objects
            .get_ranges(&ObjPath::from(key.as_str()), &ranges)
            .await
            .map_err(|e| self.remote_io(&key, e))?;
        let raws: Vec<(ObjectId, Vec<u8>)> = locs
            .iter()
            .zip(got)
            .map(|((id, _), b)| (*id, b.to_vec()))
            .collect();
        tokio::task::spawn_blocking(move || {
            let mut out = HashMap::new();
            for (id, raw) in raws {
                if let Ok(f) = self.keep(id, raw) {
                    out.insert(id, f);
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| io::Error::other(e.to_string()))?
    }

    /// One ranged GET of `span` of tree pack `stem`: the hinted trees and
    /// every other tree that lies wholly inside it (in depth-first
    /// pre-order, the subtrees of the hinted ones), each verified and kept
    /// unless here already. A walk that lists a directory so fetches the
    /// trees under it in one request; a lookup of one path fetches only the
    /// trees on it ([`Shared::fetch`]).
    async fn fetch_span(
        self: Arc<Self>,
        objects: &Arc<dyn ObjectStore>,
        stem: &str,
        span: std::ops::Range<u64>,
        inside: Vec<PackEntry>,
    ) -> io::Result<usize> {
        let key = pack::pack_key(stem);
        let bytes = objects
            .get_range(&ObjPath::from(key.as_str()), span.clone())
            .await
            .map_err(|e| self.remote_io(&key, e))?;
        tokio::task::spawn_blocking(move || {
            let mut kept = 0;
            for e in inside {
                let (s, t) = (
                    (e.offset - span.start) as usize,
                    (e.offset - span.start) as usize + e.len as usize,
                );
                let Some(raw) = bytes.get(s..t) else { continue };
                if self.local.contains(&e.id).unwrap_or(false) {
                    continue;
                }
                if self.keep(e.id, raw.to_vec()).is_ok() {
                    kept += 1;
                }
            }
            kept
        })
        .await
        .map_err(|e| io::Error::other(e.to_string()))
    }

    /// Read the remote's pack index again (at most every [`RELOAD_EVERY`]);
    /// whether it was read.
    async fn reload_index(&self, objects: &Arc<dyn ObjectStore>) -> bool {
        {
            let mut last = self.reloaded.lock();
            if last.is_some_and(|t| t.elapsed() < RELOAD_EVERY) {
                return true;
            }
            *last = Some(Instant::now());
        }
        let err = |what: String, e| Error::Backend {
            remote: self.remote.clone(),
            url: self.url.clone(),
            what,
            source: Box::new(e),
        };
        match pack::refresh(objects, &self.store_root, &self.remote, &err).await {
            Ok((index, _)) => {
                *self.index.write() = Arc::new(index);
                true
            }
            Err(e) => {
                tracing::warn!(remote = %self.remote, error = %e, "cannot read the remote's pack index again");
                false
            }
        }
    }

    /// An object_store error as the io::Error a read returns (not found
    /// stays `NotFound`).
    fn remote_io(&self, key: &str, e: object_store::Error) -> io::Error {
        let kind = match e {
            object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(
            kind,
            format!(
                "remote '{}' ({}): reading {key}: {e}",
                self.remote, self.url
            ),
        )
    }

    /// Verify fetched bytes and write them into the local store.
    fn keep(&self, id: ObjectId, raw: Vec<u8>) -> io::Result<Fetched> {
        let plain = match Store::verify_stored(&id, &raw) {
            Ok(plain) => plain,
            Err(e) => {
                let detail = corrupt_detail(e);
                tracing::warn!(object = %id, remote = %self.remote, url = %self.url, detail = %detail, "remote object is corrupt or tampered with: not stored, this read gets EIO");
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "object {id} from remote '{}' is corrupt ({detail})",
                        self.remote
                    ),
                ));
            }
        };
        self.local.write(&id, &raw)?;
        self.fetched_objects.fetch_add(1, Ordering::SeqCst);
        self.fetched_bytes
            .fetch_add(raw.len() as u64, Ordering::SeqCst);
        self.unsynced.fetch_add(1, Ordering::SeqCst);
        Ok(Fetched { raw, plain })
    }

    /// After a fetch: sync on the blocking pool, not in the reader's way,
    /// once [`SYNC_EVERY_OBJECTS`] fetched objects or [`SYNC_EVERY`] wait
    /// (the objects are readable here before that). Called in the runtime.
    fn sync_soon(self: &Arc<Self>) {
        let n = self.unsynced.load(Ordering::SeqCst);
        if n >= SYNC_EVERY_OBJECTS || (n > 0 && self.last_sync.lock().elapsed() >= SYNC_EVERY) {
            let s = self.clone();
            tokio::task::spawn_blocking(move || {
                // A failed sync only delays durability: the objects stay readable here.
                if let Err(e) = s.sync_now() {
                    tracing::warn!(error = %e, "sync of fetched objects failed");
                }
            });
        }
    }

    /// Sync the local store if anything fetched is not durable yet.
    fn sync_now(&self) -> io::Result<()> {
        let _g = self.sync_lock.lock();
        let n = self.unsynced.swap(0, Ordering::SeqCst);
        if n == 0 {
            return Ok(());
        }
        *self.last_sync.lock() = Instant::now();
        self.local.sync().inspect_err(|_| {
            self.unsynced.fetch_add(n, Ordering::SeqCst);
        })
    }

    /// Take the flight for `id`, or `None` when one is in the air already.
    fn claim(&self, id: &ObjectId) -> std::result::Result<Arc<Flight>, Arc<Flight>> {
        let mut g = self.inflight.lock();
        if let Some(f) = g.get(id) {
            return Err(f.clone());
        }
        let f = Arc::new(Flight::default());
        g.insert(*id, f.clone());
        Ok(f)
    }

    fn land(&self, id: &ObjectId, flight: &Flight) {
        self.inflight.lock().remove(id);
        *flight.done.lock() = true;
        flight.cv.notify_all();
    }
}

impl LazyBackend {
    /// The object from the local store, else fetched (verified, kept here).
    fn local_or_fetched(&self, id: &ObjectId) -> io::Result<Found> {
        loop {
            if let Some(raw) = self.shared.local.read(id)? {
                return Ok(Found::Local(raw));
            }
            match self.shared.claim(id) {
                Ok(flight) => {
                    let got = self.rt.block_on(self.shared.clone().fetch(*id, false));
                    self.shared.land(id, &flight);
                    return got.map(Found::Fetched);
                }
                // Another reader or a prefetch is fetching it: wait, then
                // look locally again (fetch it ourselves if that one failed).
                Err(flight) => flight.wait(),
            }
        }
    }
}

/// Every method of the three traits is written out here (none has a
/// default): what the lazy backend does not do itself, the local store does.
impl ObjectRead for LazyBackend {
    fn read(&self, id: &ObjectId) -> io::Result<Option<Vec<u8>>> {
        Ok(Some(match self.local_or_fetched(id)? {
            Found::Local(raw) => raw,
            Found::Fetched(f) => f.raw,
        }))
    }

    /// A fetch hands over the content it verified, so the store does not
    /// decompress and hash it a second time.
    fn read_for_use(&self, id: &ObjectId) -> io::Result<Option<store::Got>> {
        Ok(Some(match self.local_or_fetched(id)? {
            Found::Local(raw) => store::Got::Stored(raw),
            Found::Fetched(f) => store::Got::Verified(f.plain),
        }))
    }

    fn contains(&self, id: &ObjectId) -> io::Result<bool> {
        self.shared.local.contains(id)
    }

    /// An object already here (local, or fetched before) is read in part
    /// where it is stored, as on a local store; one not here yet gives
    /// `None`, so the caller reads it whole ([`ObjectRead::read`]),
    /// which fetches it.
    fn open_stored(&self, id: &ObjectId) -> io::Result<Option<store::Stored>> {
        self.shared.local.open_stored(id)
    }

    fn locate(&self, id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>> {
        self.shared.local.locate(id)
    }

    /// Hinted objects of the same data pack are fetched together, with one
    /// request for neighbouring ones (the next chunks of a file lie side by
    /// side in its pack).
    fn prefetch(&self, ids: &[ObjectId]) {
        let s = &self.shared;
        let Some(objects) = s.objects.clone() else {
            return;
        };
        let index = s.index.read().clone();
        let mut by_pack: HashMap<u32, Vec<(ObjectId, Loc)>> = HashMap::new();
        for id in ids {
            if s.local.contains(id).unwrap_or(true) {
                continue;
            }
            match index.lookup(id).ok().flatten() {
                Some(l) => by_pack.entry(l.pack).or_default().push((*id, l)),
                None => {
                    if s.prefetching.load(Ordering::SeqCst) >= MAX_PREFETCH {
                        continue;
                    }
                    let Ok(flight) = s.claim(id) else { continue };
                    s.prefetching.fetch_add(1, Ordering::SeqCst);
                    let s = s.clone();
                    let id = *id;
                    self.rt.spawn(async move {
                        let _ = s.clone().fetch(id, true).await;
                        s.land(&id, &flight);
                        s.prefetching.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            }
        }
        for (p, group) in by_pack {
            if s.prefetching.load(Ordering::SeqCst) >= MAX_PREFETCH {
                break;
            }
            let info = &index.packs[p as usize];
            let stem = info.stem.clone();
            // Trees: the span from the first hinted to the end of the last,
            // and every tree inside it is claimed, so a reader of one of them
            // (a walk going deeper) waits for this request instead of
            // fetching it alone (see fetch_span). Chunks: the hinted ones.
            // A span is at most MAX_SPAN: hinted trees past it are left
            // to be fetched when read.
            let (span, claimed): (Option<Span>, Vec<_>) = if info.kind == PackKind::Trees {
                let start = group.iter().map(|(_, l)| l.offset).min().unwrap_or(0);
                let end = group
                    .iter()
                    .map(|(_, l)| l.offset + l.len as u64)
                    .filter(|end| end - start <= MAX_SPAN)
                    .max()
                    .unwrap_or(start);
                let inside: Vec<PackEntry> = info
                    .entries
                    .iter()
                    .filter(|e| e.offset >= start && e.offset + e.len as u64 <= end)
                    .filter(|e| !s.local.contains(&e.id).unwrap_or(true))
                    .copied()
                    .collect();
                let claimed = inside
                    .iter()
                    .filter_map(|e| s.claim(&e.id).ok().map(|f| (e.id, f)))
                    .collect();
                (Some((start..end, inside)), claimed)
            } else {
                let claimed = group
                    .iter()
                    .filter_map(|(id, _)| s.claim(id).ok().map(|f| (*id, f)))
                    .collect();
                (None, claimed)
            };
            if claimed.is_empty() {
                continue;
            }
            s.prefetching.fetch_add(1, Ordering::SeqCst);
            tracing::debug!(pack = %stem, objects = claimed.len(), span = ?span.as_ref().map(|x| &x.0), "prefetching");
            let s = s.clone();
            let objects = objects.clone();
            self.rt.spawn(async move {
                let got = match span {
                    Some((span, inside)) => {
                        s.clone().fetch_span(&objects, &stem, span, inside).await.map(drop)
                    }
                    None => {
                        let locs = group
                            .iter()
                            .filter(|(id, _)| claimed.iter().any(|(c, _)| c == id))
                            .copied()
                            .collect();
                        s.clone().fetch_ranges(&objects, &stem, locs).await.map(drop)
                    }
                };
                if let Err(e) = got {
                    tracing::debug!(pack = %stem, remote = %s.remote, error = %e, "prefetch failed");
                }
                for (id, flight) in &claimed {
                    s.land(id, flight);
                }
                s.prefetching.fetch_sub(1, Ordering::SeqCst);
                s.sync_soon();
            });
        }
    }
}

impl ObjectWrite for LazyBackend {
    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        self.shared.local.write(id, bytes)
    }

    /// Asked before writing: the local store (fetched objects are written
    /// there too).
    fn contains_for_write(&self, id: &ObjectId, len: usize) -> io::Result<bool> {
        self.shared.local.contains_for_write(id, len)
    }

    fn wants_sync(&self, min_objects: usize) -> bool {
        self.shared.local.wants_sync(min_objects)
    }

    fn sync(&self) -> io::Result<()> {
        let _g = self.shared.sync_lock.lock();
        self.shared.unsynced.store(0, Ordering::SeqCst);
        self.shared.local.sync()
    }

    fn refresh(&self) -> io::Result<()> {
        self.shared.local.refresh()
    }
}

/// Maintenance is of the local store: what was fetched, and what was
/// written here.
impl ObjectMaintenance for LazyBackend {
    fn list(&self) -> io::Result<Vec<ObjectId>> {
        self.shared.local.list()
    }

    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>> {
        self.shared.local.stat(id)
    }

    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>> {
        self.shared.local.quarantine(id)
    }

    fn remove(&self, id: &ObjectId) -> io::Result<bool> {
        self.shared.local.remove(id)
    }

    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>> {
        self.shared.local.remove_many(ids)
    }

    fn sweep(&self, ids: &[ObjectId], dry_run: bool) -> io::Result<Vec<bool>> {
        self.shared.local.sweep(ids, dry_run)
    }

    fn consolidate(&self, movable: &dyn Fn(&ObjectId) -> bool) -> io::Result<(usize, usize)> {
        self.shared.local.consolidate(movable)
    }

    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        self.shared.local.remove_stale_temps(cutoff, dry_run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partial read of an object already in the local store is served
    /// from where it is stored, not by reading (or fetching) it whole; an
    /// object not here yet is left to a whole read.
    #[test]
    fn an_object_already_here_is_read_in_part() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::open_or_create(&t.path().join("store")).unwrap();
        let url = format!("file://{}", t.path().join("remote").display());
        crate::remote::config::add(&store, "team", &url).unwrap();
        let data: Vec<u8> = (0..1_000_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let (id, _) = store.put_object(&data).unwrap();
        store.sync_objects().unwrap();
        let lazy = LazyBackend::open(&store, "team").unwrap();
        assert!(
            lazy.open_stored(&id).unwrap().is_some(),
            "here: read in part"
        );
        let absent = ObjectId::of(b"not stored anywhere");
        assert!(lazy.open_stored(&absent).unwrap().is_none());
    }

    /// This thread's bytes read by `read`/`pread` so far (`rchar` of
    /// `/proc/thread-self/io`).
    fn rchar() -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("rchar: "))
            .unwrap()
            .parse()
            .unwrap()
    }

    /// A partial read of an object the lazy backend fetched reads only its
    /// frame table and the frames the range touches from the local store:
    /// right after the fetch (its pack still being written, until the
    /// backend syncs) and once published. It once read the object whole.
    #[test]
    fn a_fetched_object_is_read_in_part() {
        use crate::store::{Checkpoint, Content, Source, framed};
        let t = tempfile::tempdir().unwrap();
        // A remote with one checkpoint of one incompressible 8 MiB file.
        let src = Store::open_or_create(&t.path().join("src")).unwrap();
        let dir = t.path().join("files");
        std::fs::create_dir(&dir).unwrap();
        let mut data = vec![0u8; 8 << 20];
        rustix::rand::getrandom(&mut data, rustix::rand::GetRandomFlags::empty()).unwrap();
        std::fs::write(dir.join("big"), &data).unwrap();
        let snap = crate::ingest::snapshot(&src, &dir, &Default::default()).unwrap();
        let ckpt = Checkpoint {
            version: 1,
            root: snap.root,
            parents: vec![],
            origin: None,
            time_ns: 1,
            message: "one file".into(),
            source: Source {
                kind: "snapshot".into(),
                ..Default::default()
            },
        };
        let target = src.write_checkpoint(&ckpt).unwrap();
        let url = format!("file://{}", t.path().join("remote").display());
        crate::remote::config::add(&src, "team", &url).unwrap();
        let opts = super::super::PushOptions {
            force: false,
            progress: crate::store::progress::no_progress(),
        };
        Remote::open(&src, "team")
            .unwrap()
            .push(&src, &target, "main", &opts)
            .unwrap();
        // The file's largest chunk, as a lazy mount of an empty store sees it.
        let entry = src.lookup_path(&ckpt, b"big").unwrap().unwrap();
        let Content::Extents(extents) = entry.content else {
            panic!("a file of extents")
        };
        let chunk = extents.iter().max_by_key(|e| e.len).unwrap();
        let (id, len) = (chunk.id.unwrap(), chunk.len);
        let at = chunk.len / 2;
        let offset: u64 = extents
            .iter()
            .take_while(|e| e.id != chunk.id)
            .map(|e| e.len)
            .sum();
        let part = &data[(offset + at) as usize..(offset + at + 100) as usize];

        let root = t.path().join("store");
        let local = Store::open_or_create(&root).unwrap();
        crate::remote::config::add(&local, "team", &url).unwrap();
        let lazy = Arc::new(LazyBackend::open(&local, "team").unwrap());
        let store = Store::open_with_backend(&root, lazy.clone()).unwrap();
        assert!(
            !lazy.shared.local.contains(&id).unwrap(),
            "on the remote only"
        );
        // Not here yet: a partial read declines (the caller reads it whole,
        // which fetches it).
        assert_eq!(
            store.read_range(&id, Some(len), at..at + 100).unwrap(),
            None
        );
        // The fetch leaves it pending (the backend syncs every 2 s or 64
        // objects fetched).
        *lazy.shared.last_sync.lock() = Instant::now();
        let whole = store.get_object(&id, "big").unwrap();
        let stored = lazy.shared.local.read(&id).unwrap().unwrap().len() as u64;
        assert_eq!(&whole[at as usize..at as usize + 100], part);
        // At most the table and two frames (and this file's own line or so).
        let bound = 2 * (framed::FRAME_SIZE as u64 + framed::FRAME_OVERHEAD) + 8 * 1024;
        assert!(stored > 2 * bound, "an object of many frames: {stored}");
        for round in ["fetched, pending", "fetched, published"] {
            if round.ends_with("published") {
                lazy.sync().unwrap();
            }
            let published = lazy.locate(&id).unwrap().is_some();
            assert_eq!(published, round.ends_with("published"), "{round}");
            let before = rchar();
            let got = store.read_range(&id, Some(len), at..at + 100).unwrap();
            let read = rchar() - before;
            assert_eq!(got.as_deref(), Some(part), "{round}");
            assert!(
                read <= bound,
                "{round}: {read} bytes read for 100 of an object stored in {stored}"
            );
        }
    }
}
