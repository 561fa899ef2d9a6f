//! Provenance: who made each change of a fork, and the operation log a
//! commit keeps (issue 42).
//!
//! The journal records the requester of its changes with `Who` records
//! (`record.rs`), written only when the requester differs from the one
//! before: every later change record of the segment belongs to it. Replay
//! and live changes alike keep an [`OpsLog`] in the fork's state
//! (`state/provenance.rs`): one [`Op`] per change, with the path resolved
//! from the state when the change was made; consecutive writes of one
//! requester to one file collapse into one entry (count, bytes, range). A
//! commit stores what it folded as one object of JSON lines ([`OpLine`]) and
//! names it in the checkpoint's `source.ops`.
//!
//! The requester of a change comes from the caller: the mount sets it for
//! the request it serves ([`on_behalf_of`]); a change made otherwise (an
//! offline tool, a test) is made by [`Who::default`], "unknown".

use std::cell::RefCell;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};

pub use super::record::Who;
use crate::store::intmap::IntMap;

thread_local! {
    /// The requester of the changes this thread makes now ([`on_behalf_of`]).
    static REQUESTER: RefCell<Option<Arc<Who>>> = const { RefCell::new(None) };
}

static UNKNOWN: LazyLock<Arc<Who>> = LazyLock::new(|| Arc::new(Who::default()));

/// Run `f` (changes to a fork) as requested by `who`: the journal attributes
/// every change `f` makes on this thread to it.
pub fn on_behalf_of<T>(who: Arc<Who>, f: impl FnOnce() -> T) -> T {
    let before = REQUESTER.with(|r| r.replace(Some(who)));
    let out = f();
    REQUESTER.with(|r| *r.borrow_mut() = before);
    out
}

/// Process `pid` (of user `uid`, in run `run` or "") as a requester: its
/// command is read from `/proc/PID/comm` now (empty if it is gone). For
/// changes asked for by a tool rather than made through a mount: a
/// checkout or revert through a fork's daemon (the client's process) or
/// on a fork opened by the tool itself ([`this_process`]).
pub fn of_process(pid: u32, uid: u32, run: &str) -> Arc<Who> {
    let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
    Arc::new(Who {
        pid,
        uid,
        command: comm.trim_ascii_end().to_vec(),
        run: run.as_bytes().to_vec(),
    })
}

/// This process as a requester ([`of_process`]).
pub fn this_process() -> Arc<Who> {
    of_process(std::process::id(), rustix::process::getuid().as_raw(), "")
}

/// The requester of the changes this thread makes now (unknown outside
/// [`on_behalf_of`]).
pub(crate) fn requester() -> Arc<Who> {
    REQUESTER.with(|r| r.borrow().clone().unwrap_or_else(unknown))
}

/// The unknown requester.
pub fn unknown() -> Arc<Who> {
    UNKNOWN.clone()
}

/// A log entry's path, shared rather than built: the path of a directory
/// (kept by [`OpsLog::dir_paths`] and shared by every entry in it) and a
/// name in it (shared with [`OpsLog::names`]). The path is `dir/name`,
/// `name` in the root, `dir` alone without a name; "" is the root. It is
/// spelled out only when the entry is written ([`LogPath::bytes`]), off the
/// request path.
#[derive(Clone, Debug, Default)]
pub struct LogPath {
    pub dir: Arc<[u8]>,
    pub name: Option<Arc<[u8]>>,
}

impl LogPath {
    /// A path given whole.
    pub fn whole(path: &[u8]) -> LogPath {
        LogPath {
            dir: Arc::from(path),
            name: None,
        }
    }

    /// The path's bytes.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        let Some(name) = &self.name else {
            return (*self.dir).into();
        };
        if self.dir.is_empty() {
            return (**name).into();
        }
        let mut out = Vec::with_capacity(self.dir.len() + 1 + name.len());
        out.extend_from_slice(&self.dir);
        out.push(b'/');
        out.extend_from_slice(name);
        out.into()
    }

    /// Bytes held by this path alone (a shared directory counts in full: an
    /// estimate that errs high).
    fn heap(&self) -> usize {
        self.dir.len() + self.name.as_ref().map_or(0, |n| n.len())
    }
}

/// One entry of the operation log, in memory.
#[derive(Clone, Debug)]
pub struct Op {
    /// The first change's time (ns since the epoch).
    pub time_ns: i64,
    pub op: &'static str,
    pub path: LogPath,
    /// A rename's new path.
    pub new_path: Option<LogPath>,
    pub who: Arc<Who>,
    /// Bytes written or copied (data changes), else 0.
    pub bytes: u64,
    /// Changes collapsed into this entry.
    pub count: u64,
    /// `[start, end)` of the bytes changed (writes, copies, punched holes).
    pub range: Option<[u64; 2]>,
    /// A truncate's new size.
    pub size: Option<u64>,
    /// The inode changed (not shown: it only decides what collapses).
    pub ino: u64,
}

impl Op {
    /// What `storefs ops --json`, the commit's object and the browse mount show.
    pub fn line(&self) -> OpLine {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        OpLine {
            time_ns: self.time_ns,
            op: self.op.to_string(),
            path: text(&self.path.bytes()),
            new_path: self.new_path.as_ref().map(|p| text(&p.bytes())),
            pid: self.who.pid,
            command: text(&self.who.command),
            uid: self.who.uid,
            run: text(&self.who.run),
            bytes: self.bytes,
            count: self.count,
            range: self.range,
            size: self.size,
        }
    }

    /// Append the entry's line of the stored log (`to_jsonl` of its
    /// [`Op::line`], byte for byte: a test holds them equal) to `out`,
    /// without building the line.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        fn json(out: &mut Vec<u8>, v: &(impl Serialize + ?Sized)) {
            serde_json::to_writer(&mut *out, v).expect("a value serializes");
        }
        let text = |out: &mut Vec<u8>, b: &[u8]| json(out, &*String::from_utf8_lossy(b));
        out.extend_from_slice(b"{\"time_ns\":");
        json(out, &self.time_ns);
        out.extend_from_slice(b",\"op\":");
        json(out, self.op);
        out.extend_from_slice(b",\"path\":");
        text(out, &self.path.bytes());
        if let Some(to) = &self.new_path {
            out.extend_from_slice(b",\"new_path\":");
            text(out, &to.bytes());
        }
        out.extend_from_slice(b",\"pid\":");
        json(out, &self.who.pid);
        out.extend_from_slice(b",\"command\":");
        text(out, &self.who.command);
        out.extend_from_slice(b",\"uid\":");
        json(out, &self.who.uid);
        if !self.who.run.is_empty() {
            out.extend_from_slice(b",\"run\":");
            text(out, &self.who.run);
        }
        out.extend_from_slice(b",\"bytes\":");
        json(out, &self.bytes);
        out.extend_from_slice(b",\"count\":");
        json(out, &self.count);
        if let Some(range) = &self.range {
            out.extend_from_slice(b",\"range\":");
            json(out, range);
        }
        if let Some(size) = &self.size {
            out.extend_from_slice(b",\"size\":");
            json(out, size);
        }
        out.extend_from_slice(b"}\n");
    }
}

/// One operation as JSON: a line of a commit's operation log object
/// (docs/format.md, "Operation logs").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpLine {
    pub time_ns: i64,
    pub op: String,
    /// Relative to the fork's root ("" is the root itself).
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_path: Option<String>,
    pub pid: u32,
    pub command: String,
    pub uid: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default = "one")]
    pub count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<[u64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

fn one() -> u64 {
    1
}

/// What an entry takes in memory, about.
fn cost(e: &Op) -> usize {
    std::mem::size_of::<Op>() + e.path.heap() + e.new_path.as_ref().map_or(0, LogPath::heap)
}

/// Lines as a commit stores them: one JSON object per line.
pub fn to_jsonl(ops: &[OpLine]) -> Vec<u8> {
    let mut out = Vec::new();
    for op in ops {
        serde_json::to_writer(&mut out, op).expect("an op serializes");
        out.push(b'\n');
    }
    out
}

/// The lines of a stored operation log; `None` when one does not parse.
pub fn from_jsonl(bytes: &[u8]) -> Option<Vec<OpLine>> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// Bytes of uncommitted operations (estimated) that the log holds in memory
/// ([`OpsLog::entries`]): past it they are handed to the spool as one batch.
pub const COMPACT_BYTES: usize = 1 << 20;

/// Batches waiting for the spool's writer past which the change that hands
/// over the next one writes them itself (the writer is behind: memory stays
/// bounded).
const MAX_QUEUED: usize = 2;

/// The operations of a fork's state since its last commit, and who the
/// journal's later records belong to.
///
/// The newest entries are in memory ([`OpsLog::entries`], at most about
/// [`COMPACT_BYTES`]), each as a change made it: no path is spelled out and
/// nothing is serialized on the request path. Past the bound they go to the
/// spool ([`Spool`]) as one batch, where a thread of the log's own compacts
/// them and writes them as the JSON lines a commit stores to an unnamed
/// file beside the journal (the spill). So neither the log's memory nor a
/// change's cost grows with the changes between two commits. The spill is
/// rebuilt by replay like the rest of the log: a crash loses nothing of it.
#[derive(Debug)]
pub struct OpsLog {
    /// The newest entries, in the order they came (the last may be
    /// extended by the next write).
    pub entries: Vec<Op>,
    /// What `entries` holds, about (bytes).
    bytes: usize,
    /// The older entries.
    spool: Arc<Spool>,
    /// Whether the spool's writer thread was started.
    writer: bool,
    /// The requester of the journal's next change records (the last `Who`
    /// of the segment; unknown at a segment's start).
    pub current: Arc<Who>,
    /// Where inodes were last seen named: (directory, name). Checked
    /// against the directory before use, found again when stale; emptied
    /// when [`MAX_NAMES`] are held.
    pub names: IntMap<u64, (u64, Arc<[u8]>)>,
    /// Directories' paths as last resolved (most changes are in a directory
    /// resolved just before): emptied when a directory is renamed, taken
    /// out when one is removed, and when [`MAX_DIR_PATHS`] are held.
    pub dir_paths: IntMap<u64, Arc<[u8]>>,
    /// The inode the last path was resolved for, and that path (a change
    /// mostly follows one to the same file): forgotten when a name goes or
    /// moves.
    pub last_path: Option<(u64, LogPath)>,
}

/// Bound of [`OpsLog::dir_paths`].
pub const MAX_DIR_PATHS: usize = 1 << 14;
/// Bound of [`OpsLog::names`].
pub const MAX_NAMES: usize = 1 << 16;

/// Where batches of entries become JSON lines in the spill: by the writer
/// thread (it waits on `wake`), or by whoever needs the spill next (a seal,
/// `lines`, a change that finds the writer behind) — batches are taken
/// from `queue` under the `spill` lock, so they are written in the order
/// they came whoever writes them.
#[derive(Debug, Default)]
struct Spool {
    queue: parking_lot::Mutex<std::collections::VecDeque<Vec<Op>>>,
    /// Bytes of the entries in `queue`, about.
    queued: std::sync::atomic::AtomicUsize,
    wake: parking_lot::Condvar,
    spill: parking_lot::Mutex<Spill>,
    /// The log is gone: the writer stops.
    closed: std::sync::atomic::AtomicBool,
}

impl Spool {
    /// Write every queued batch; the spill, locked, with all of them in it.
    fn drain(&self) -> parking_lot::MutexGuard<'_, Spill> {
        let mut spill = self.spill.lock();
        while let Some(batch) = self.queue.lock().pop_front() {
            let bytes: usize = batch.iter().map(cost).sum();
            self.queued
                .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
            spill.write_batch(batch);
        }
        spill
    }

    /// The writer thread: write batches as they come, until the log is gone.
    fn run(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        loop {
            {
                let mut queue = self.queue.lock();
                while queue.is_empty() && !self.closed.load(Relaxed) {
                    self.wake.wait(&mut queue);
                }
            }
            if self.closed.load(Relaxed) {
                return;
            }
            drop(self.drain());
        }
    }
}

/// The spill: JSON lines in an unnamed file (`O_TMPFILE` in the fork's
/// directory, or an unlinked temp file), written through `buf`.
#[derive(Debug, Default)]
struct Spill {
    /// Where the file is made (the fork's directory; the temp dir if unset).
    dir: Option<std::path::PathBuf>,
    file: Option<Arc<std::fs::File>>,
    /// Bytes in the file.
    len: u64,
    /// Lines not yet in the file.
    buf: Vec<u8>,
    /// A write to the file failed (said once in the log).
    failed: bool,
}

/// The bytes written per spill write, about.
const SPILL_BUF: usize = 256 << 10;

impl Spill {
    /// Compact a batch of entries and add them as lines ([`compact`]).
    fn write_batch(&mut self, batch: Vec<Op>) {
        for e in compact(batch) {
            e.write_json(&mut self.buf);
        }
        self.flush(false);
    }

    /// Write `buf` to the file once it holds [`SPILL_BUF`] bytes (`force`:
    /// whatever it holds). A file that cannot be made or written leaves the
    /// lines in `buf`, in memory (said once in the log).
    fn flush(&mut self, force: bool) {
        if self.buf.is_empty() || (self.buf.len() < SPILL_BUF && !force) {
            return;
        }
        if let Err(e) = self.write_out() {
            if !self.failed {
                tracing::warn!(error = %e, "cannot write the operation log's spill file; the log stays in memory");
            }
            self.failed = true;
        }
    }

    fn write_out(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let file = match &self.file {
            Some(f) => f.clone(),
            None => {
                let dir = self.dir.clone().unwrap_or_else(std::env::temp_dir);
                let f = Arc::new(crate::sys::anonymous_file_in(&dir)?);
                self.file = Some(f.clone());
                f
            }
        };
        file.write_all_at(&self.buf, self.len)?;
        self.len += self.buf.len() as u64;
        self.buf.clear();
        self.buf.shrink_to(SPILL_BUF);
        Ok(())
    }

    /// Bytes `from..to` of the file.
    fn read(&self, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
        let mut out = vec![0; (to - from) as usize];
        if let Some(f) = &self.file {
            use std::os::unix::fs::FileExt;
            f.read_exact_at(&mut out, from)?;
        }
        Ok(out)
    }
}

/// A batch's entries of one requester, operation and path(s) become one,
/// at the place of the first, with their counts and bytes summed and their
/// ranges joined. The log stays small for a workload that repeats itself
/// (a database's transactions: its journal created, written, removed, the
/// database written), at the cost of the order between repeated operations
/// within one batch.
fn compact(batch: Vec<Op>) -> Vec<Op> {
    use std::hash::{BuildHasher, Hash, Hasher};
    // Keyed by a hash of (requester, operation, path, new path); entries
    // whose hashes meet but differ are kept apart (the first keeps the key).
    let same = |a: &Op, b: &Op| {
        a.op == b.op
            && a.who == b.who
            && a.path.bytes() == b.path.bytes()
            && a.new_path.as_ref().map(LogPath::bytes) == b.new_path.as_ref().map(LogPath::bytes)
    };
    let state = std::hash::RandomState::new();
    let key = |e: &Op| {
        let mut h = state.build_hasher();
        (&e.who, e.op).hash(&mut h);
        h.write(&e.path.bytes());
        if let Some(p) = &e.new_path {
            h.write_u8(1);
            h.write(&p.bytes());
        }
        h.finish()
    };
    let mut first: IntMap<u64, usize> = IntMap::default();
    first.reserve(batch.len());
    let mut kept: Vec<Op> = Vec::with_capacity(batch.len());
    for e in batch {
        let k = key(&e);
        match first.get(&k) {
            Some(&i) if same(&kept[i], &e) => {
                let k = &mut kept[i];
                k.count += e.count;
                k.bytes += e.bytes;
                k.size = e.size.or(k.size);
                k.range = match (k.range, e.range) {
                    (Some([a, b]), Some([c, d])) => Some([a.min(c), b.max(d)]),
                    (r, s) => r.or(s),
                };
            }
            Some(_) => kept.push(e),
            None => {
                first.insert(k, kept.len());
                kept.push(e);
            }
        }
    }
    kept
}

/// What a commit folds of the log ([`OpsLog::seal`]): the first `len`
/// bytes of the spill file and then `rest` (what could not be written to
/// it), read outside the state lock ([`Sealed::read`]).
#[derive(Debug)]
pub struct Sealed {
    file: Option<Arc<std::fs::File>>,
    len: u64,
    rest: Vec<u8>,
}

impl Sealed {
    /// The JSON lines the commit stores.
    pub fn read(&self) -> std::io::Result<Vec<u8>> {
        let mut out = Spill {
            file: self.file.clone(),
            ..Spill::default()
        }
        .read(0, self.len)?;
        out.extend_from_slice(&self.rest);
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.rest.is_empty()
    }
}

impl Default for OpsLog {
    fn default() -> OpsLog {
        OpsLog {
            entries: Vec::new(),
            bytes: 0,
            spool: Arc::default(),
            writer: false,
            current: unknown(),
            names: IntMap::default(),
            dir_paths: IntMap::default(),
            last_path: None,
        }
    }
}

/// A copy of a fork's state (a commit's snapshot of it) has an empty log:
/// the log belongs to the live state alone.
impl Clone for OpsLog {
    fn clone(&self) -> OpsLog {
        let mut log = OpsLog::default();
        log.current = self.current.clone();
        log
    }
}

impl Drop for OpsLog {
    fn drop(&mut self) {
        self.spool
            .closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // Under the queue's lock: the writer is either waiting (and wakes)
        // or has not checked `closed` yet.
        let _queue = self.spool.queue.lock();
        self.spool.wake.notify_all();
    }
}

impl OpsLog {
    /// Make the spill file in `dir` (the fork's directory).
    pub fn spill_in(&mut self, dir: &std::path::Path) {
        self.spool.spill.lock().dir = Some(dir.to_path_buf());
    }

    /// A commit starts folding: what is logged so far is its log (every
    /// entry goes to the spill). The new segment starts with an unknown
    /// requester. A commit that fails leaves it sealed: the next seals it
    /// again, with what came after.
    pub fn seal(&mut self) -> Sealed {
        self.hand_over();
        let mut spill = self.spool.drain();
        spill.flush(true);
        self.current = unknown();
        Sealed {
            file: spill.file.clone(),
            len: spill.len,
            rest: spill.buf.clone(),
        }
    }

    /// The commit of `sealed` moved the head: its entries are committed;
    /// what came after them moves to a new spill file.
    pub fn committed(&mut self, sealed: &Sealed) {
        let mut spill = self.spool.drain();
        let after = spill
            .read(sealed.len.min(spill.len), spill.len)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the operation log's spill file; the operations logged during the commit are lost from it");
                Vec::new()
            });
        // The lines after the file's sealed part, in order: the sealed
        // ones that were not in the file at the seal come first.
        let mut stream = after;
        stream.append(&mut spill.buf);
        let unsealed = stream.get(sealed.rest.len()..).unwrap_or_default();
        *spill = Spill {
            dir: spill.dir.take(),
            failed: spill.failed,
            ..Spill::default()
        };
        spill.buf.extend_from_slice(unsealed);
        spill.flush(false);
    }

    /// Every entry, oldest first (spilled, then in memory).
    pub fn lines(&self) -> std::io::Result<Vec<OpLine>> {
        let spill = self.spool.drain();
        let mut bytes = spill.read(0, spill.len)?;
        bytes.extend_from_slice(&spill.buf);
        drop(spill);
        let mut out = from_jsonl(&bytes).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the operation log's spill file does not parse",
            )
        })?;
        out.extend(self.entries.iter().map(Op::line));
        Ok(out)
    }

    /// Queue the entries in memory as one batch for the spool.
    fn hand_over(&mut self) -> usize {
        if self.entries.is_empty() {
            return self.spool.queue.lock().len();
        }
        let room = Vec::with_capacity(self.entries.len());
        let batch = std::mem::replace(&mut self.entries, room);
        self.spool.queued.fetch_add(
            std::mem::take(&mut self.bytes),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut queue = self.spool.queue.lock();
        queue.push_back(batch);
        queue.len()
    }

    /// Add an entry. Past [`COMPACT_BYTES`] of entries in memory they go to
    /// the spool as one batch, for its writer; when the writer is behind by
    /// [`MAX_QUEUED`] batches, or cannot be started, they are written here.
    /// A replay hands over at the same points.
    pub fn push(&mut self, op: Op) {
        self.bytes += cost(&op);
        self.entries.push(op);
        if self.bytes <= COMPACT_BYTES {
            return;
        }
        let waiting = self.hand_over();
        if waiting > MAX_QUEUED || !self.start_writer() {
            drop(self.spool.drain());
        } else {
            self.spool.wake.notify_one();
        }
    }

    /// Start the spool's writer thread unless it runs; whether it does.
    fn start_writer(&mut self) -> bool {
        if !self.writer {
            let spool = self.spool.clone();
            self.writer = std::thread::Builder::new()
                .name("storefs-ops-log".into())
                .spawn(move || spool.run())
                .is_ok();
        }
        self.writer
    }

    /// Bytes it holds in memory, about (for `status`).
    pub fn memory_estimate(&self) -> usize {
        self.bytes
            + self.spool.queued.load(std::sync::atomic::Ordering::Relaxed)
            + self
                .spool
                .spill
                .try_lock()
                .map_or(SPILL_BUF, |s| s.buf.capacity())
            + self
                .names
                .values()
                .map(|(_, n)| 48 + n.len())
                .sum::<usize>()
            + self.dir_paths.values().map(|p| 48 + p.len()).sum::<usize>()
    }
}

/// Whose operations a revert undoes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Select {
    Pid(u32),
    /// A command name (as `/proc/PID/comm` kept it: 15 bytes at most).
    Command(String),
    /// A `storefs run` (its id).
    Run(String),
}

impl Select {
    pub fn matches(&self, op: &OpLine) -> bool {
        match self {
            Select::Pid(p) => op.pid == *p,
            Select::Command(c) => op.command.as_bytes() == &c.as_bytes()[..c.len().min(15)],
            Select::Run(r) => op.run == *r,
        }
    }
}

/// Whether log path `path` is `dir` or below it (`""`, the root, holds
/// everything).
pub fn at_or_below(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// What a revert does to one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Put the path back as it was (it may not have existed: then it goes).
    Restore(String),
    /// Leave it: a later change by another process touched it (the first
    /// such operation).
    Conflict(String, OpLine),
    /// Leave it: it cannot be put back (why).
    Skip(String, Unrevertable),
}

/// Why a revert leaves a path as it is ([`Step::Skip`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unrevertable {
    /// The root itself.
    #[error("the root's own attributes are not put back; set them by hand")]
    Root,
    /// A name that is not UTF-8: the log holds it with U+FFFD in place of
    /// its bytes, so it does not name the entry (the CLI names the command
    /// that puts it back by hand, `cli/hint.rs`).
    #[error("a name that is not UTF-8: the operation log does not name it exactly")]
    NotUtf8,
}

/// The paths the selected processes changed in `ops` (oldest first), in the
/// order they first changed them, each to restore or, when an operation of
/// another process after their first change touched it, a conflict. Touched:
/// the same path, a path below it, or a rename, exchange, unlink or rmdir of
/// a directory above it. Paths of files that had no name (`<unlinked inode
/// N>`) are left out; the root and names that are not UTF-8 are a
/// [`Step::Skip`].
pub fn revert_plan(ops: &[OpLine], select: &Select) -> Vec<Step> {
    let touched = |op: &OpLine| {
        let mut v = vec![op.path.clone()];
        v.extend(op.new_path.clone());
        v
    };
    let mut first: Vec<(String, usize)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        if select.matches(op) {
            for p in touched(op) {
                if !p.starts_with("<unlinked") && seen.insert(p.clone()) {
                    first.push((p, i));
                }
            }
        }
    }
    first
        .into_iter()
        .map(|(p, at)| {
            if p.is_empty() {
                return Step::Skip(p, Unrevertable::Root);
            }
            if p.contains(char::REPLACEMENT_CHARACTER) {
                return Step::Skip(p, Unrevertable::NotUtf8);
            }
            let later = ops[at + 1..]
                .iter()
                .filter(|op| !select.matches(op))
                .find(|op| {
                    let moves =
                        matches!(op.op.as_str(), "rename" | "exchange" | "unlink" | "rmdir");
                    touched(op)
                        .iter()
                        .any(|q| at_or_below(q, &p) || (moves && at_or_below(&p, q)))
                });
            match later {
                Some(op) => Step::Conflict(p, op.clone()),
                None => Step::Restore(p),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(who: &Arc<Who>, op: &'static str, path: &str) -> Op {
        Op {
            time_ns: 1,
            op,
            path: LogPath::whole(path.as_bytes()),
            new_path: None,
            who: who.clone(),
            bytes: 10,
            count: 1,
            range: Some([0, 10]),
            size: None,
            ino: 2,
        }
    }

    /// `write_json` spells a line as serde does `OpLine`, escapes, bytes
    /// that are not UTF-8 and optional fields included.
    #[test]
    fn an_entry_is_written_as_its_line_serializes() {
        let who = Arc::new(Who {
            pid: 3,
            uid: 1000,
            command: b"a\"b\\c\x01\xff".to_vec(),
            run: b"42".to_vec(),
        });
        let name = |b: &[u8]| Some(Arc::<[u8]>::from(b));
        let paths = [
            LogPath::default(),
            LogPath::whole(b"d/e"),
            LogPath {
                dir: Arc::default(),
                name: name(b"top"),
            },
            LogPath {
                dir: Arc::from(&b"d\n\t"[..]),
                name: name("\u{2603} x\x7f\u{1b}[0m".as_bytes()),
            },
        ];
        for (i, path) in paths.iter().enumerate() {
            let mut e = op(&who, "rename", "x");
            e.path = path.clone();
            e.new_path = (i % 2 == 0).then(|| paths[3 - i].clone());
            e.size = (i == 1).then_some(7);
            e.range = (i != 2).then_some([1, u64::MAX]);
            if i == 3 {
                e.who = unknown();
            }
            let mut out = Vec::new();
            e.write_json(&mut out);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&to_jsonl(&[e.line()]))
            );
        }
    }

    #[test]
    fn a_repeating_workload_is_compacted_and_keeps_its_counts() {
        let a = Arc::new(Who {
            pid: 1,
            command: b"db".to_vec(),
            ..Who::default()
        });
        // Equal by value, another allocation (as a replay makes them).
        let a2 = Arc::new(Who::clone(&a));
        let mut log = OpsLog::default();
        log.push(op(&a, "mkdir", "first"));
        let sealed = log.seal();
        let n = COMPACT_BYTES / std::mem::size_of::<Op>() + 10;
        for i in 0..n {
            let who = if i % 2 == 0 { &a } else { &a2 };
            log.push(op(who, "write", "db"));
            log.push(op(who, "create", "db-journal"));
            log.push(op(who, "unlink", "db-journal"));
        }
        // The sealed entry stays as it was; each batch was merged into one
        // entry a kind, in the order they first came: every change is
        // counted once. (A second seal hands the last entries over too, as
        // a commit that then fails would.)
        let n = n as u64;
        let _second = log.seal();
        let e = log.lines().unwrap();
        // Written (`lines` waits for the writer): the memory is the entries
        // since the last batch, the spill's buffer and the names.
        assert!(
            log.memory_estimate() < COMPACT_BYTES + SPILL_BUF,
            "{}",
            log.memory_estimate()
        );
        let head: Vec<(&str, u64)> = e[..4].iter().map(|e| (e.op.as_str(), e.count)).collect();
        assert_eq!(head[0], ("mkdir", 1));
        assert_eq!(
            [head[1].0, head[2].0, head[3].0],
            ["write", "create", "unlink"]
        );
        for kind in ["write", "create", "unlink"] {
            let of = e.iter().filter(|x| x.op == kind);
            let (count, bytes) = of.fold((0, 0), |(c, b), x| (c + x.count, b + x.bytes));
            assert_eq!((count, bytes), (n, 10 * n), "{kind}");
        }
        assert!((e.len() as u64) < n / 4, "{} entries", e.len());
        let spill = log.spool.drain();
        assert!(spill.len == 0 || spill.file.is_some());
        drop(spill);
        log.committed(&sealed);
        assert_eq!(log.lines().unwrap(), e[1..]);
    }

    /// Entries past the memory bound go to the spill file and come back in
    /// order, through a seal, a failed commit, a second seal and its commit.
    #[test]
    fn entries_spill_to_a_file_and_come_back_in_order() {
        let a = Arc::new(Who {
            pid: 7,
            command: b"tar".to_vec(),
            ..Who::default()
        });
        let dir = tempfile::tempdir().unwrap();
        let mut log = OpsLog::default();
        log.spill_in(dir.path());
        let n = 3 * COMPACT_BYTES / std::mem::size_of::<Op>();
        let name = |i: usize| format!("d/file{i}");
        for i in 0..n {
            log.push(op(&a, "create", &name(i)));
        }
        assert!(log.spool.drain().len > 0, "spilled to the file");
        assert!(log.memory_estimate() <= COMPACT_BYTES + SPILL_BUF);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "the spill file has no name"
        );
        let paths = |lines: &[OpLine]| lines.iter().map(|l| l.path.clone()).collect::<Vec<_>>();
        let want: Vec<String> = (0..n).map(name).collect();
        assert_eq!(paths(&log.lines().unwrap()), want);
        // The stored lines are `to_jsonl`'s of the same entries.
        let first = log.seal();
        let stored = first.read().unwrap();
        assert_eq!(stored, to_jsonl(&from_jsonl(&stored).unwrap()));
        assert_eq!(paths(&from_jsonl(&stored).unwrap()), want);
        // A commit that failed: sealed again with what came after.
        log.push(op(&a, "create", "after"));
        let second = log.seal();
        log.push(op(&a, "create", "during"));
        let mut want2 = want.clone();
        want2.push("after".into());
        assert_eq!(paths(&from_jsonl(&second.read().unwrap()).unwrap()), want2);
        log.committed(&second);
        assert_eq!(paths(&log.lines().unwrap()), ["during"]);
    }
}

#[cfg(test)]
mod revert_tests {
    use super::*;

    fn line(op: &str, path: &str, new_path: Option<&str>, pid: u32) -> OpLine {
        OpLine {
            time_ns: 0,
            op: op.into(),
            path: path.into(),
            new_path: new_path.map(Into::into),
            pid,
            command: if pid == 1 {
                "alpha".into()
            } else {
                "beta".into()
            },
            uid: 0,
            run: String::new(),
            bytes: 0,
            count: 1,
            range: None,
            size: None,
        }
    }

    #[test]
    fn a_revert_plan_restores_what_only_they_changed_and_names_later_changes_by_others() {
        let ops = [
            line("write", "a.txt", None, 1),
            line("mkdir", "d", None, 1),
            line("create", "d/x", None, 1),
            line("write", "shared", None, 1),
            line("write", "shared", None, 2), // later, by beta: conflict
            line("create", "d/y", None, 2),   // below alpha's d: conflict
            line("rename", "tmp", Some("state.json"), 1),
            line("write", "b.txt", None, 2), // beta's alone: untouched
            line("write", "<unlinked inode 9>", None, 1),
            line("chmod", "", None, 1),
            line("write", "bad\u{fffd}name", None, 1),
            line("write", "b.txt", None, 2), // below the root, later: still a skip
        ];
        let plan = revert_plan(&ops, &Select::Command("alpha".into()));
        let shown: Vec<String> = plan
            .iter()
            .map(|s| match s {
                Step::Restore(p) => format!("restore {p}"),
                Step::Conflict(p, by) => format!("conflict {p} {} {}", by.op, by.path),
                Step::Skip(p, _) => format!("skip {p}"),
            })
            .collect();
        assert_eq!(
            shown,
            [
                "restore a.txt",
                "conflict d create d/y",
                "restore d/x",
                "conflict shared write shared",
                "restore tmp",
                "restore state.json",
                "skip ",
                "skip bad\u{fffd}name",
            ]
        );
        // By pid, and a change before theirs is no conflict.
        let plan = revert_plan(&ops[4..8], &Select::Pid(1));
        assert_eq!(
            plan,
            [
                Step::Restore("tmp".into()),
                Step::Restore("state.json".into())
            ]
        );
        // A directory above a path renamed later by another: a conflict.
        let ops = [
            line("write", "d/f", None, 1),
            line("rename", "d", Some("e"), 2),
        ];
        assert!(matches!(
            &revert_plan(&ops, &Select::Pid(1))[..],
            [Step::Conflict(p, _)] if p == "d/f"
        ));
    }
}
