//! Read-ahead of file chunks for sequential reads (a read-only tree's and a
//! fork's base files): the next chunks of a file are read, decompressed and
//! verified on worker threads while the reader consumes the current one, so
//! a cold `cat` keeps several disk reads in flight and decompresses on more
//! than one core.
//!
//! What the workers read goes into the reader's [`ChunkCache`] (so it counts
//! against `--cache-size`); how far ahead they go is bounded
//! ([`ReadAhead::ahead_bytes`]). A reader that misses the cache on a chunk a
//! worker is reading waits for it instead of reading it a second time; one
//! still queued it takes back and reads itself ([`ReadAhead::fetch`]).

use std::collections::{HashSet, VecDeque};
use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;
use parking_lot::{Condvar, Mutex};

use super::{ChunkCache, ObjectId, Result, Store};

/// Worker threads per read-only tree or fork, started on the first read-ahead.
pub const WORKERS: usize = 6;
/// How long a worker waits for a job before it exits.
const IDLE: std::time::Duration = std::time::Duration::from_secs(2);
/// Chunks read ahead of the reader at most...
pub const AHEAD_CHUNKS: usize = 16;
/// ...and bytes at most (of which also no more than a quarter of the cache)...
pub const AHEAD_BYTES: u64 = 16 << 20;
/// ...and at first this many bytes, doubling with every read that continues
/// the one before: a random read that happens to land near the one before
/// reads ahead a chunk or two, not [`AHEAD_BYTES`] (1,000 random reads of a
/// 256 MiB file have four such neighbours).
pub const RAMP_BYTES: u64 = 1 << 20;
/// How far behind a sequential reader a chunk must end to leave the cache
/// (see [`ReadAhead::drop_behind`]): past the slack within which the
/// kernel's read-ahead requests may arrive out of order (two of its largest,
/// 1 MiB each), so a request served late still finds its chunk.
pub const DROP_BEHIND: u64 = 4 << 20;
/// Files whose last read position is remembered (to tell sequential reads).
const TRACKED_FILES: usize = 256;
/// A read starting within this distance (two of the kernel's 128 KiB
/// read-ahead requests) of where the previous read of the
/// file ended counts as sequential (the kernel's read-ahead requests can
/// arrive out of order, served by several threads).
const SEQUENTIAL_SLACK: u64 = 256 << 10;

type Job = Box<dyn FnOnce() + Send>;

/// The read-ahead of one tree or fork: a queue, the chunks in flight, the
/// workers, and where each recently read file was read.
pub struct ReadAhead {
    shared: Arc<Shared>,
    /// Where the last read of each recently read file ended, and how many
    /// reads in a row continued the one before.
    positions: Mutex<LruCache<u64, (u64, u32)>>,
    ahead_bytes: u64,
}

struct Shared {
    state: Mutex<State>,
    /// Workers wait here for jobs.
    work: Condvar,
    /// Readers wait here for a chunk in flight.
    landed: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<(ObjectId, Job)>,
    running: HashSet<ObjectId>,
    threads: usize,
    closed: bool,
}

/// What [`ReadAhead::claim`] found about a chunk the reader needs.
pub enum Claim {
    /// Nobody is reading it: the caller reads it.
    Free,
    /// A worker was reading it and has finished (successfully or not): look
    /// in the cache again, and read it if it is not there.
    Landed,
}

impl ReadAhead {
    /// A read-ahead for a tree or fork whose chunk cache holds `cache_bytes`.
    pub fn new(cache_bytes: usize) -> ReadAhead {
        ReadAhead {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                landed: Condvar::new(),
            }),
            positions: Mutex::new(LruCache::new(
                NonZeroUsize::new(TRACKED_FILES).expect("nonzero"),
            )),
            ahead_bytes: AHEAD_BYTES.min(cache_bytes as u64 / 4),
        }
    }

    /// How many bytes of chunks may be read ahead of a reader.
    pub fn ahead_bytes(&self) -> u64 {
        self.ahead_bytes
    }

    /// Note a read of `ino` at `offset..end`: how many reads in a row, this
    /// one included, continued the read of that file before them (0: a
    /// random read). A read of more than a page at offset 0 starts a run
    /// (the kernel's first read-ahead of a file read from its start).
    pub fn sequential(&self, ino: u64, offset: u64, end: u64) -> u32 {
        let mut p = self.positions.lock();
        let run = match p.get(&ino) {
            Some(&(last, run)) if offset.abs_diff(last) <= SEQUENTIAL_SLACK => {
                run.saturating_add(1)
            }
            Some(_) => 0,
            None => u32::from(offset == 0 && end > 4096),
        };
        p.put(ino, (end, run));
        run
    }

    /// Chunk `id` for a reader: from `cache`; else, when a worker is reading
    /// it, what the worker read; else read here (decompressed and verified,
    /// [`Store::get_object`], `context` naming what it is for in an error)
    /// and cached. Before a read here the store is told which chunks follow
    /// (`following`), so a backend that fetches from a remote can start on
    /// them.
    pub fn fetch(
        &self,
        store: &Store,
        cache: &ChunkCache,
        id: &ObjectId,
        context: impl FnOnce() -> String,
        following: impl FnOnce() -> Vec<ObjectId>,
    ) -> Result<Arc<Vec<u8>>> {
        if let Some(chunk) = cache.get(id) {
            return Ok(chunk);
        }
        if let Claim::Landed = self.claim(id)
            && let Some(chunk) = cache.get(id)
        {
            return Ok(chunk);
        }
        store.prefetch(&following());
        let data = Arc::new(store.get_object(id, &context())?);
        cache.insert(*id, data.clone());
        Ok(data)
    }

    /// Bytes `range` of chunk `id` (`len` bytes long, when the caller knows)
    /// for a small random read: decoded from just the frames it touches
    /// ([`Store::read_range`]), unless the chunk is cached or being read
    /// ahead (whole, it costs no disk read). `None`: read the chunk whole.
    pub fn part(
        &self,
        store: &Store,
        cache: &ChunkCache,
        id: &ObjectId,
        len: Option<u64>,
        range: std::ops::Range<u64>,
    ) -> Result<Option<Vec<u8>>> {
        if cache.contains(id) || self.in_flight(id) {
            return Ok(None);
        }
        store.read_range(id, len, range)
    }

    /// A sequential reader, `run` reads in a row ([`ReadAhead::sequential`]),
    /// will want `upcoming` next (chunk ids with the bytes of the file each
    /// covers, in file order): queue them for the workers, up to
    /// [`AHEAD_CHUNKS`] queued and [`RAMP_BYTES`] ahead, doubled for each
    /// read of the run after the first, up to [`ReadAhead::ahead_bytes`].
    /// Chunks cached or in flight are passed over.
    pub fn ahead(
        &self,
        store: &Arc<Store>,
        cache: &Arc<ChunkCache>,
        run: u32,
        upcoming: impl IntoIterator<Item = (ObjectId, u64)>,
    ) {
        let limit = self
            .ahead_bytes
            .min(RAMP_BYTES << run.saturating_sub(1).min(16));
        let mut bytes = 0u64;
        for (id, len) in upcoming.into_iter().take(AHEAD_CHUNKS * 4) {
            bytes = bytes.saturating_add(len);
            if bytes > limit {
                break;
            }
            if cache.contains(&id) || self.in_flight(&id) {
                continue;
            }
            let (store, cache) = (store.clone(), cache.clone());
            self.submit(
                id,
                Box::new(move || match store.get_object(&id, "read-ahead") {
                    Ok(data) => cache.insert(id, Arc::new(data)),
                    // The reader reads it again and reports what is wrong.
                    Err(e) => tracing::debug!(object = %id, error = %e, "read-ahead failed"),
                }),
            );
        }
    }

    /// A sequential reader has passed `behind` (chunks whose bytes for this
    /// file all end [`DROP_BEHIND`] or more before where it reads): they
    /// leave the cache. The kernel keeps what it read in its page cache;
    /// holding the chunks too would only double the memory a `cat` takes,
    /// push out chunks random reads come back to, and cost a page fault for
    /// every page of fresh memory (a cold `cat` of 256 MiB took 30% less of
    /// the daemon's CPU without them).
    pub fn drop_behind(&self, cache: &ChunkCache, behind: impl IntoIterator<Item = ObjectId>) {
        for id in behind {
            cache.remove(&id);
        }
    }

    /// Whether `id` is queued or being read.
    pub fn in_flight(&self, id: &ObjectId) -> bool {
        let s = self.shared.state.lock();
        s.running.contains(id) || s.queue.iter().any(|(q, _)| q == id)
    }

    /// Queue `job`, which reads `id` into the cache, unless it is in flight.
    pub fn submit(&self, id: ObjectId, job: Job) {
        let mut s = self.shared.state.lock();
        if s.closed
            || s.running.contains(&id)
            || s.queue.iter().any(|(q, _)| *q == id)
            || s.queue.len() >= AHEAD_CHUNKS
        {
            return;
        }
        s.queue.push_back((id, job));
        if s.threads < WORKERS.min(s.queue.len() + s.running.len()) {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("storefs-readahead".into())
                .spawn(move || work(&shared));
            match spawned {
                Ok(_) => s.threads += 1,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start a read-ahead thread; reading on");
                }
            }
        }
        self.shared.work.notify_one();
    }

    /// The reader needs `id` and missed the cache: take it back if it is
    /// only queued (the caller reads it now), wait if a worker is reading it.
    pub fn claim(&self, id: &ObjectId) -> Claim {
        let mut s = self.shared.state.lock();
        if let Some(i) = s.queue.iter().position(|(q, _)| q == id) {
            s.queue.remove(i);
            return Claim::Free;
        }
        if !s.running.contains(id) {
            return Claim::Free;
        }
        while s.running.contains(id) {
            self.shared.landed.wait(&mut s);
        }
        Claim::Landed
    }
}

impl Drop for ReadAhead {
    /// Workers finish the chunk in hand, drop the queue and exit.
    fn drop(&mut self) {
        let mut s = self.shared.state.lock();
        s.closed = true;
        s.queue.clear();
        self.shared.work.notify_all();
    }
}

fn work(shared: &Shared) {
    let mut s = shared.state.lock();
    loop {
        if s.closed {
            s.threads -= 1;
            return;
        }
        let Some((id, job)) = s.queue.pop_front() else {
            // An idle worker goes (a browse mount has a read-ahead per tree
            // read; their threads must not pile up); the next submit starts
            // one again.
            if shared.work.wait_for(&mut s, IDLE).timed_out() && s.queue.is_empty() {
                s.threads -= 1;
                return;
            }
            continue;
        };
        s.running.insert(id);
        drop(s);
        job();
        s = shared.state.lock();
        s.running.remove(&id);
        shared.landed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn tells_sequential_reads_from_random_ones() {
        let ra = ReadAhead::new(256 << 20);
        assert_eq!(ra.sequential(1, 0, 131072), 1);
        assert_eq!(ra.sequential(1, 131072, 262144), 2);
        assert_eq!(ra.sequential(1, 393216, 524288), 3, "out of order, close");
        assert_eq!(ra.sequential(1, 1 << 30, (1 << 30) + 4096), 0);
        assert_eq!(
            ra.sequential(1, (1 << 30) + 4096, (1 << 30) + 8192),
            1,
            "a new run"
        );
        assert_eq!(ra.sequential(2, 77 << 20, (77 << 20) + 4096), 0);
        assert_eq!(ra.sequential(3, 0, 4096), 0, "a lone first page");
        assert_eq!(ra.ahead_bytes(), AHEAD_BYTES);
        assert_eq!(ReadAhead::new(4 << 20).ahead_bytes(), 1 << 20);
    }

    #[test]
    fn reads_further_ahead_the_longer_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open_or_create(&dir.path().join("s")).unwrap());
        let chunks: Vec<(ObjectId, u64)> = (0..40u32)
            .map(|i| {
                let data: Vec<u8> = (0..200_000u32)
                    .map(|j| (j.wrapping_mul(i + 7) >> 3) as u8)
                    .collect();
                (store.put_object(&data).unwrap().0, 200_000)
            })
            .collect();
        store.sync_objects().unwrap();
        let queued = |run: u32| {
            let cache = Arc::new(ChunkCache::new(256 << 20));
            let ra = ReadAhead::new(256 << 20);
            ra.ahead(&store, &cache, run, chunks.iter().copied());
            // Each submitted chunk is in flight or landed; none is read twice.
            chunks
                .iter()
                .filter(|(id, _)| ra.in_flight(id) || cache.contains(id))
                .count()
        };
        // 1 MiB: five chunks of 200 KB; then 2, 4, ... MiB, and at most
        // AHEAD_CHUNKS queued with the workers' chunks in hand.
        assert_eq!(queued(1), 5);
        assert_eq!(queued(2), 10);
        assert!(queued(5) >= AHEAD_CHUNKS, "the full reach");
    }

    #[test]
    fn runs_jobs_once_and_lets_readers_wait_or_take_them_back() {
        let ra = ReadAhead::new(256 << 20);
        let ran = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let id = ObjectId::of(b"a");
        {
            let (ran, gate) = (ran.clone(), gate.clone());
            ra.submit(
                id,
                Box::new(move || {
                    let mut open = gate.0.lock();
                    while !*open {
                        gate.1.wait(&mut open);
                    }
                    ran.fetch_add(1, Ordering::SeqCst);
                }),
            );
        }
        // A second submit of the same id is dropped.
        let r2 = ran.clone();
        ra.submit(
            id,
            Box::new(move || {
                r2.fetch_add(100, Ordering::SeqCst);
            }),
        );
        while !ra.shared.state.lock().running.contains(&id) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ra.in_flight(&id));
        let opener = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                *gate.0.lock() = true;
                gate.1.notify_all();
            })
        };
        assert!(matches!(ra.claim(&id), Claim::Landed));
        opener.join().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(!ra.in_flight(&id));
        // Nothing in flight: the reader reads it itself.
        assert!(matches!(ra.claim(&ObjectId::of(b"b")), Claim::Free));
    }
}
