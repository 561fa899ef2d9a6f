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

/// The requester of the changes this thread makes now (unknown outside
/// [`on_behalf_of`]).
pub(crate) fn requester() -> Arc<Who> {
    REQUESTER.with(|r| r.borrow().clone().unwrap_or_else(unknown))
}

/// The unknown requester.
pub(crate) fn unknown() -> Arc<Who> {
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

/// The operations of a fork's state since its last commit, and who the
/// journal's later records belong to.
#[derive(Clone, Debug)]
pub struct OpsLog {
    pub entries: Vec<Op>,
    /// Entries before this are being folded by a commit: none of them is
    /// extended any more.
    pub sealed: usize,
    /// The requester of the journal's next change records (the last `Who`
    /// of the segment; unknown at a segment's start).
    pub current: Arc<Who>,
    /// Where inodes were last seen named: (directory, name). Checked
    /// against the directory before use, found again when stale.
    pub names: HashMap<u64, (u64, Vec<u8>)>,
}

impl Default for OpsLog {
    fn default() -> OpsLog {
        OpsLog {
            entries: Vec::new(),
            sealed: 0,
            current: unknown(),
            names: HashMap::new(),
        }
    }
}

impl OpsLog {
    /// A commit starts folding: what is logged so far is its log. The new
    /// segment starts with an unknown requester.
    pub fn seal(&mut self) -> Vec<OpLine> {
        self.sealed = self.entries.len();
        self.current = unknown();
        self.entries.iter().map(Op::line).collect()
    }

    /// The commit that sealed the first `n` entries moved the head: they
    /// are committed.
    pub fn committed(&mut self, n: usize) {
        self.entries.drain(..n.min(self.entries.len()));
        self.sealed = self.sealed.saturating_sub(n);
    }

    /// Bytes it holds, about (for `status`).
    pub fn memory_estimate(&self) -> usize {
        let entry = std::mem::size_of::<Op>();
        self.entries
            .iter()
            .map(|e| entry + e.path.capacity() + e.new_path.as_ref().map_or(0, Vec::capacity))
            .sum::<usize>()
            + self
                .names
                .values()
                .map(|(_, n)| 48 + n.capacity())
                .sum::<usize>()
    }
}
