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
use std::collections::HashMap;
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

/// One entry of the operation log, in memory.
#[derive(Clone, Debug)]
pub struct Op {
    /// The first change's time (ns since the epoch).
    pub time_ns: i64,
    pub op: &'static str,
    pub path: Vec<u8>,
    /// A rename's new path.
    pub new_path: Option<Vec<u8>>,
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
            path: text(&self.path),
            new_path: self.new_path.as_deref().map(text),
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
}

/// [`OpLine`] borrowed from an [`Op`]: the same JSON, without a copy.
#[derive(Serialize)]
struct LineRef<'a> {
    time_ns: i64,
    op: &'a str,
    path: std::borrow::Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    new_path: Option<std::borrow::Cow<'a, str>>,
    pid: u32,
    command: std::borrow::Cow<'a, str>,
    uid: u32,
    #[serde(skip_serializing_if = "str::is_empty")]
    run: std::borrow::Cow<'a, str>,
    bytes: u64,
    count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    range: Option<[u64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
}

impl Op {
    /// Append the entry's line of the stored log (`to_jsonl` of its
    /// [`Op::line`], byte for byte) to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let text = String::from_utf8_lossy;
        let line = LineRef {
            time_ns: self.time_ns,
            op: self.op,
            path: text(&self.path),
            new_path: self.new_path.as_deref().map(text),
            pid: self.who.pid,
            command: text(&self.who.command),
            uid: self.who.uid,
            run: text(&self.who.run),
            bytes: self.bytes,
            count: self.count,
            range: self.range,
            size: self.size,
        };
        serde_json::to_writer(&mut *out, &line).expect("an op serializes");
        out.push(b'\n');
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
    std::mem::size_of::<Op>() + e.path.capacity() + e.new_path.as_ref().map_or(0, Vec::capacity)
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

/// Bytes of uncommitted operations (estimated) that the log holds in memory:
/// past it the entries are compacted ([`OpsLog::push`]), and what is left
/// is written to the log's spill file unless compacting halved it.
pub const COMPACT_BYTES: usize = 1 << 20;

/// The operations of a fork's state since its last commit, and who the
/// journal's later records belong to. The newest entries are in memory
/// ([`OpsLog::entries`]: at most about [`COMPACT_BYTES`]); older ones are
/// in an unnamed file beside the journal as the JSON lines a commit stores
/// (the spill), so the log's memory does not grow with the changes between
/// two commits. The spill is rebuilt by replay like the rest of the log: a
/// crash loses nothing of it.
#[derive(Clone, Debug)]
pub struct OpsLog {
    /// The newest entries, in the order they came (the last may be
    /// extended by the next write).
    pub entries: Vec<Op>,
    /// What `entries` holds, about (bytes).
    bytes: usize,
    /// The older entries.
    spill: Spill,
    /// Compactions to skip before the next is tried: one that did not halve
    /// the entries (each path different: an extraction, a copy) makes the
    /// next ones wait, twice as many each time, up to 64 (the entries go
    /// to the spill as they are); one that did makes them tried each time.
    skip: (u32, u32),
    /// The requester of the journal's next change records (the last `Who`
    /// of the segment; unknown at a segment's start).
    pub current: Arc<Who>,
    /// Where inodes were last seen named: (directory, name). Checked
    /// against the directory before use, found again when stale; emptied
    /// when [`MAX_NAMES`] are held.
    pub names: IntMap<u64, (u64, Vec<u8>)>,
    /// Directories' paths as last resolved (most changes are in a directory
    /// resolved just before): emptied when a directory is renamed, taken
    /// out when one is removed, and when [`MAX_DIR_PATHS`] are held.
    pub dir_paths: IntMap<u64, Vec<u8>>,
}

/// Bound of [`OpsLog::dir_paths`].
pub const MAX_DIR_PATHS: usize = 1 << 14;
/// Bound of [`OpsLog::names`].
pub const MAX_NAMES: usize = 1 << 16;

/// The spill: JSON lines in an unnamed file (`O_TMPFILE` in the fork's
/// directory, or an unlinked temp file), written through `buf`.
#[derive(Clone, Debug, Default)]
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
            spill: Spill::default(),
            skip: (0, 0),
            current: unknown(),
            names: IntMap::default(),
            dir_paths: IntMap::default(),
        }
    }
}

impl OpsLog {
    /// Make the spill file in `dir` (the fork's directory).
    pub fn spill_in(&mut self, dir: &std::path::Path) {
        self.spill.dir = Some(dir.to_path_buf());
    }

    /// A commit starts folding: what is logged so far is its log (every
    /// entry goes to the spill). The new segment starts with an unknown
    /// requester. A commit that fails leaves it sealed: the next seals it
    /// again, with what came after.
    pub fn seal(&mut self) -> Sealed {
        self.spill_entries(true);
        self.current = unknown();
        Sealed {
            file: self.spill.file.clone(),
            len: self.spill.len,
            rest: self.spill.buf.clone(),
        }
    }

    /// The commit of `sealed` moved the head: its entries are committed;
    /// what came after them moves to a new spill file.
    pub fn committed(&mut self, sealed: &Sealed) {
        let after = self
            .spill
            .read(sealed.len.min(self.spill.len), self.spill.len)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the operation log's spill file; the operations logged during the commit are lost from it");
                Vec::new()
            });
        // The lines after the file's sealed part, in order: the sealed
        // ones that were not in the file at the seal come first.
        let mut stream = after;
        stream.append(&mut self.spill.buf);
        let unsealed = stream.get(sealed.rest.len()..).unwrap_or_default();
        self.spill = Spill {
            dir: self.spill.dir.take(),
            failed: self.spill.failed,
            ..Spill::default()
        };
        self.spill.buf.extend_from_slice(unsealed);
        self.spill.flush(false);
    }

    /// Every entry, oldest first (spilled, then in memory).
    pub fn lines(&self) -> std::io::Result<Vec<OpLine>> {
        let mut bytes = self.spill.read(0, self.spill.len)?;
        bytes.extend_from_slice(&self.spill.buf);
        let mut out = from_jsonl(&bytes).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the operation log's spill file does not parse",
            )
        })?;
        out.extend(self.entries.iter().map(Op::line));
        Ok(out)
    }

    /// Move every entry in memory to the spill (`force`: to its file now).
    fn spill_entries(&mut self, force: bool) {
        for e in &self.entries {
            e.write_json(&mut self.spill.buf);
        }
        self.entries.clear();
        self.bytes = 0;
        self.spill.flush(force);
    }

    /// Add an entry. Past [`COMPACT_BYTES`] of entries in memory they are
    /// compacted: those of one requester, operation and path(s) become one,
    /// at the place of the first, with their counts and bytes summed and
    /// their ranges joined. The log stays small for a workload that repeats
    /// itself (a database's transactions: its journal created, written,
    /// removed, the database written), at the cost of the order between
    /// repeated operations. If that did not halve them, they go to the
    /// spill. A replay compacts and spills at the same points.
    pub fn push(&mut self, op: Op) {
        self.bytes += cost(&op);
        self.entries.push(op);
        if self.bytes <= COMPACT_BYTES {
            return;
        }
        let (left, wait) = self.skip;
        if left > 0 {
            self.skip.0 -= 1;
            self.spill_entries(false);
            return;
        }
        type Key = (Arc<Who>, &'static str, Vec<u8>, Option<Vec<u8>>);
        let mut first: HashMap<Key, usize> = HashMap::new();
        let mut kept: Vec<Op> = Vec::new();
        for e in self.entries.drain(..) {
            let key = (e.who.clone(), e.op, e.path.clone(), e.new_path.clone());
            match first.get(&key) {
                Some(&i) => {
                    let k = &mut kept[i];
                    k.count += e.count;
                    k.bytes += e.bytes;
                    k.size = e.size.or(k.size);
                    k.range = match (k.range, e.range) {
                        (Some([a, b]), Some([c, d])) => Some([a.min(c), b.max(d)]),
                        (r, s) => r.or(s),
                    };
                }
                None => {
                    first.insert(key, kept.len());
                    kept.push(e);
                }
            }
        }
        self.entries = kept;
        self.bytes = self.entries.iter().map(cost).sum();
        if self.bytes > COMPACT_BYTES / 2 {
            let wait = (wait * 2).clamp(1, 64);
            self.skip = (wait, wait);
            self.spill_entries(false);
        } else {
            self.skip = (0, 0);
        }
    }

    /// Bytes it holds in memory, about (for `status`).
    pub fn memory_estimate(&self) -> usize {
        self.bytes
            + self.spill.buf.capacity()
            + self
                .names
                .values()
                .map(|(_, n)| 48 + n.capacity())
                .sum::<usize>()
            + self
                .dir_paths
                .values()
                .map(|p| 48 + p.capacity())
                .sum::<usize>()
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
            path: path.as_bytes().to_vec(),
            new_path: None,
            who: who.clone(),
            bytes: 10,
            count: 1,
            range: Some([0, 10]),
            size: None,
            ino: 2,
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
        assert!(
            log.memory_estimate() < COMPACT_BYTES,
            "{}",
            log.memory_estimate()
        );
        // The sealed entry stays as it was; the rest was merged into one
        // entry a kind, in the order they first came, and what came after the
        // merge waits for the next one: every change is counted once.
        let n = n as u64;
        let e = log.lines().unwrap();
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
        assert!(log.spill.len == 0 || log.spill.file.is_some());
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
        assert!(log.spill.len > 0, "spilled to the file");
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
