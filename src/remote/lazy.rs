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
use parking_lot::{Condvar, Mutex};

use super::{Error, Remote, Result, corrupt_detail, corrupt_object, object_store_for, url_of};
use crate::store::{self, LocalBackend, ObjectBackend, ObjectId, Store};

/// Fetched objects written but not yet synced that trigger a sync.
const SYNC_EVERY_OBJECTS: usize = 64;
/// Otherwise unsynced objects are synced within this long.
const SYNC_EVERY: Duration = Duration::from_secs(2);
/// Background prefetches in flight at most; further hints are dropped.
const MAX_PREFETCH: usize = 16;
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
            store::write_file(&note, format!("{id}\n").as_bytes(), 0o644, true).map_err(io)?;
            Ok(LazyTarget {
                checkpoint: id,
                offline: None,
            })
        }
        Err(e @ (Error::Backend { .. } | Error::Io { .. })) => {
            let noted = std::fs::read_to_string(note_path(store, remote, name))
                .ok()
                .and_then(|s| ObjectId::from_hex(s.trim()));
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
        if !store.has_object(&root)? {
            let key = format!("objects/{root}");
            let raw = r
                .get_async(&key)
                .await?
                .ok_or_else(|| Error::MissingObject {
                    remote: remote.to_string(),
                    id: root,
                    context: format!(
                        "{key} is not there; checkpoint {id} needs it as its root tree"
                    ),
                })?;
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
    /// Fetch `id` from the remote, verify it, write it locally; its stored
    /// bytes and its content. Failures are warnings for a read, debug lines for a prefetch
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
        let key = format!("objects/{id}");
        let got = match objects.get(&ObjPath::from(key.as_str())).await {
            Ok(got) => got.bytes().await,
            Err(e) => Err(e),
        };
        let raw = match got {
            Ok(b) => b.to_vec(),
            Err(e @ object_store::Error::NotFound { .. }) => {
                fail("object is neither here nor on the remote", &e);
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("object {id} is not on remote '{}'", self.remote),
                ));
            }
            Err(e) => {
                fail("remote read failed", &e);
                return Err(io::Error::other(format!(
                    "remote '{}' ({}): reading {key}: {e}",
                    self.remote, self.url
                )));
            }
        };
        tokio::task::spawn_blocking(move || self.keep(id, raw))
            .await
            .map_err(|e| io::Error::other(e.to_string()))?
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
        let n = self.unsynced.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= SYNC_EVERY_OBJECTS || self.last_sync.lock().elapsed() >= SYNC_EVERY {
            // A failed sync only delays durability: the objects stay readable here.
            if let Err(e) = self.sync_now() {
                tracing::warn!(error = %e, "sync of fetched objects failed");
            }
        }
        Ok(Fetched { raw, plain })
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

impl ObjectBackend for LazyBackend {
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

    fn prefetch(&self, ids: &[ObjectId]) {
        let s = &self.shared;
        if s.objects.is_none() {
            return;
        }
        for id in ids {
            if s.prefetching.load(Ordering::SeqCst) >= MAX_PREFETCH {
                return;
            }
            if s.local.contains(id).unwrap_or(true) {
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

    fn write(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        self.shared.local.write(id, bytes)
    }

    fn contains(&self, id: &ObjectId) -> io::Result<bool> {
        self.shared.local.contains(id)
    }

    fn sync(&self) -> io::Result<()> {
        let _g = self.shared.sync_lock.lock();
        self.shared.unsynced.store(0, Ordering::SeqCst);
        self.shared.local.sync()
    }

    fn list(&self) -> io::Result<Vec<ObjectId>> {
        self.shared.local.list()
    }

    fn refresh(&self) -> io::Result<()> {
        self.shared.local.refresh()
    }

    fn locate(&self, id: &ObjectId) -> io::Result<Option<(PathBuf, u64, u64)>> {
        self.shared.local.locate(id)
    }

    fn quarantine(&self, id: &ObjectId) -> io::Result<Option<PathBuf>> {
        self.shared.local.quarantine(id)
    }

    fn stat(&self, id: &ObjectId) -> io::Result<Option<(u64, SystemTime)>> {
        self.shared.local.stat(id)
    }

    fn remove(&self, id: &ObjectId) -> io::Result<bool> {
        self.shared.local.remove(id)
    }

    fn remove_many(&self, ids: &[ObjectId]) -> io::Result<Vec<bool>> {
        self.shared.local.remove_many(ids)
    }

    fn remove_stale_temps(
        &self,
        cutoff: SystemTime,
        dry_run: bool,
    ) -> io::Result<Vec<(PathBuf, u64)>> {
        self.shared.local.remove_stale_temps(cutoff, dry_run)
    }
}
