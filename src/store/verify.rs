//! `verify`: read every object reachable from some checkpoints, check each
//! against its id, and report what is wrong by checkpoint and path. Nothing is
//! deleted: a corrupt object is moved to `STORE/quarantine/` (so it is no
//! longer served and can be examined); a missing one is reported.
//!
//! Pass 1 reads each distinct tree once (walking from every root) and then
//! every distinct chunk, on all cores, keeping only the ids it has read and
//! what is wrong. Only if something is wrong, pass 2 walks the checkpoints
//! again, reading their trees again and descending only into subtrees that
//! hold a bad object, to name every path that uses it.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::progress::Progress;
use super::{Content, Error, ObjectId, Result, Store, Tree};

/// What is wrong with one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Not in the store. `quarantined` is set when an earlier verify moved it aside.
    Missing { quarantined: Option<PathBuf> },
    /// Its bytes do not decompress or do not hash to its id; moved to `quarantined`.
    Corrupt {
        detail: String,
        quarantined: Option<PathBuf>,
    },
    /// A tree whose bytes match its id but do not decode (written by a bug, not
    /// damaged on disk): reported, left in place.
    Malformed(String),
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bad::Missing { quarantined: None } => write!(f, "missing"),
            Bad::Missing {
                quarantined: Some(q),
            } => write!(f, "missing (a corrupt copy is in {})", q.display()),
            Bad::Corrupt {
                detail,
                quarantined: Some(q),
            } => write!(f, "corrupt ({detail}); moved to {}", q.display()),
            Bad::Corrupt {
                detail,
                quarantined: None,
            } => write!(f, "corrupt ({detail})"),
            Bad::Malformed(d) => write!(f, "malformed tree ({d})"),
        }
    }
}

/// One problem, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The checkpoint it was found in (`None`: a ref or fork head).
    pub checkpoint: Option<ObjectId>,
    /// Where: a path inside the checkpoint (`/` is its root), or what names it.
    pub path: String,
    /// The object at fault, when it is an object.
    pub object: Option<ObjectId>,
    pub what: String,
}

/// What verify found.
#[derive(Clone, Debug, Default)]
pub struct VerifyReport {
    pub checkpoints: usize,
    /// Distinct objects read and their compressed bytes.
    pub objects: u64,
    pub bytes: u64,
    pub corrupt: usize,
    pub missing: usize,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Store {
    /// Verify `targets` (every checkpoint when empty: then refs and fork heads
    /// that name a missing checkpoint are reported too).
    /// `progress` counts objects: trees as they are read, then, once their
    /// number is known, chunks.
    pub fn verify(
        &self,
        targets: &[ObjectId],
        threads: usize,
        progress: &dyn Progress,
    ) -> Result<VerifyReport> {
        let all = targets.is_empty();
        let ckpts = if all {
            self.list_checkpoints()?
        } else {
            targets.to_vec()
        };
        let mut report = VerifyReport {
            checkpoints: ckpts.len(),
            ..Default::default()
        };
        let mut problem = |checkpoint, path: String, object, what: String| {
            report.problems.push(Problem {
                checkpoint,
                path,
                object,
                what,
            })
        };
        if all {
            for (name, id) in self.list_refs()? {
                if !self.has_checkpoint(&id) {
                    problem(
                        None,
                        format!("ref {name}"),
                        None,
                        format!("names checkpoint {id}, which is missing"),
                    );
                }
            }
            for (name, id) in self.list_forks()? {
                if !self.has_checkpoint(&id) {
                    problem(
                        None,
                        format!("fork {name}"),
                        None,
                        format!("head is checkpoint {id}, which is missing"),
                    );
                }
            }
        }

        // Pass 1: records (and the operation logs they name), then trees
        // (each once), then chunks (each once).
        let mut roots = Vec::new();
        let mut logs = Vec::new();
        for ck in &ckpts {
            match self.read_checkpoint(ck) {
                Ok(c) => {
                    for p in &c.parents {
                        // A partial checkpoint (lazy mount) comes without its history.
                        if !self.has_checkpoint(p) && !self.is_partial(ck) {
                            problem(
                                Some(*ck),
                                "(record)".into(),
                                None,
                                format!("parent checkpoint {p} is missing"),
                            );
                        }
                    }
                    roots.push((*ck, c.root));
                    logs.extend(c.source.ops.map(|o| (*ck, o)));
                }
                Err(Error::UnknownTarget(_)) => {
                    problem(Some(*ck), "(record)".into(), None, "missing".into())
                }
                Err(e) => problem(Some(*ck), "(record)".into(), None, e.to_string()),
            }
        }
        // A commit's operation log: a blob beside its tree, named by path
        // "(operation log)". A partial checkpoint comes without it.
        let mut logs_missing = 0;
        for (ck, log) in logs {
            let (res, size) = self.check_object(&log);
            report.objects += 1;
            report.bytes += size;
            match res {
                Err(Bad::Missing { .. }) if self.is_partial(&ck) => {}
                Err(b) => {
                    match b {
                        Bad::Missing { .. } => logs_missing += 1,
                        _ => report.corrupt += 1,
                    }
                    report.problems.push(Problem {
                        checkpoint: Some(ck),
                        path: "(operation log)".into(),
                        object: Some(log),
                        what: format!("object {log} {b}"),
                    });
                }
                Ok(_) => {}
            }
        }
        // What was read (trees, then chunks), and what of it is wrong. Memory:
        // 32 bytes a distinct chunk reference and about 50 a distinct tree;
        // trees are read again in pass 2, which only a problem starts.
        let mut seen: HashSet<ObjectId> = HashSet::new();
        let mut bad: HashMap<ObjectId, Bad> = HashMap::new();
        let mut chunks: Vec<ObjectId> = Vec::new();
        let mut stack: Vec<ObjectId> = roots.iter().map(|r| r.1).collect();
        while let Some(tid) = stack.pop() {
            if !seen.insert(tid) {
                continue;
            }
            let (res, size) = self.check_object(&tid);
            report.objects += 1;
            report.bytes += size;
            progress.advance(1);
            let wrong = match res {
                Ok(bytes) => match Tree::decode(&bytes) {
                    Ok(t) => {
                        for e in t.entries {
                            match e.content {
                                Content::Tree(sub) => stack.push(sub),
                                Content::Extents(ext) => {
                                    chunks.extend(ext.iter().filter_map(|x| x.id))
                                }
                                _ => {}
                            }
                        }
                        None
                    }
                    Err(e) => Some(Bad::Malformed(e.to_string())),
                },
                Err(b) => Some(b),
            };
            bad.extend(wrong.map(|b| (tid, b)));
        }
        chunks.sort_unstable();
        chunks.dedup();
        chunks.retain(|c| !seen.contains(c));
        progress.set_total(report.objects + chunks.len() as u64);
        let next = AtomicU64::new(0);
        let found = Mutex::new(Vec::new());
        let (objects, bytes) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                        let Some(id) = chunks.get(i) else { break };
                        let (res, size) = self.check_object(id);
                        progress.advance(1);
                        objects.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(size, Ordering::Relaxed);
                        if let Err(b) = res {
                            found.lock().push((*id, b));
                        }
                    }
                });
            }
        });
        report.objects += objects.into_inner();
        report.bytes += bytes.into_inner();
        bad.extend(found.into_inner());
        drop((seen, chunks));

        for b in bad.values() {
            match b {
                Bad::Missing { .. } => report.missing += 1,
                _ => report.corrupt += 1,
            }
        }
        report.missing += logs_missing;
        if report.missing + report.corrupt == 0 {
            return Ok(report);
        }

        // Pass 2: name every path that uses a bad object, reading the trees
        // again. A partial checkpoint (lazy mount) lacks objects by design:
        // its missing ones are not problems (and not counted unless a
        // complete one needs them).
        let mut paths = Paths {
            store: self,
            bad,
            dirty: HashMap::new(),
        };
        let mut missing: HashSet<ObjectId> = HashSet::new();
        for (ck, root) in &roots {
            let mut out = Vec::new();
            paths.walk(*root, b"", &mut out);
            let partial = self.is_partial(ck);
            for (path, id, bad) in out {
                if matches!(bad, Bad::Missing { .. }) {
                    if partial {
                        continue;
                    }
                    missing.insert(id);
                }
                report.problems.push(Problem {
                    checkpoint: Some(*ck),
                    path,
                    object: Some(id),
                    what: format!("object {id} {bad}"),
                });
            }
        }
        report.missing = missing.len() + logs_missing;
        Ok(report)
    }

    /// Read and check one object; quarantine it when corrupt. Returns the
    /// uncompressed bytes or what is wrong, and the stored size.
    fn check_object(&self, id: &ObjectId) -> (std::result::Result<Vec<u8>, Bad>, u64) {
        let size = self.backend().stat(id).ok().flatten().map_or(0, |(s, _)| s);
        let res = match self.get_object(id, "verify") {
            Ok(b) => Ok(b),
            Err(Error::Missing { .. }) => {
                let q = self.root().join("quarantine").join(id.to_hex());
                Err(Bad::Missing {
                    quarantined: crate::sys::exists_nofollow(&q).then_some(q),
                })
            }
            Err(Error::Corrupt { detail, .. }) => {
                let quarantined = match self.backend().quarantine(id) {
                    Ok(q) => q,
                    Err(e) => {
                        tracing::warn!(object = %id, error = %e, "cannot move the corrupt object to quarantine");
                        None
                    }
                };
                Err(Bad::Corrupt {
                    detail,
                    quarantined,
                })
            }
            // An I/O error reading it (EIO from the disk, EACCES): as corrupt,
            // but left in place.
            Err(e) => Err(Bad::Corrupt {
                detail: e.to_string(),
                quarantined: None,
            }),
        };
        (res, size)
    }
}

/// Pass 2 of verify: the bad objects, and which trees hold one below them.
struct Paths<'a> {
    store: &'a Store,
    bad: HashMap<ObjectId, Bad>,
    /// Memo of [`Paths::is_dirty`].
    dirty: HashMap<ObjectId, bool>,
}

impl Paths<'_> {
    /// Tree `tid`, or what is wrong with it (found bad in pass 1, or
    /// unreadable now).
    fn tree(&self, tid: &ObjectId) -> std::result::Result<Tree, Bad> {
        if let Some(b) = self.bad.get(tid) {
            return Err(b.clone());
        }
        self.store
            .get_tree(tid, "verify")
            .map_err(|e| Bad::Corrupt {
                detail: e.to_string(),
                quarantined: None,
            })
    }

    /// Whether the subtree `root` uses a bad object (memoized). Iterative,
    /// so no depth of nesting can overflow the stack: a tree is answered
    /// once its subtrees are.
    fn is_dirty(&mut self, root: ObjectId) -> bool {
        let mut stack = vec![(root, false)];
        while let Some((tid, expanded)) = stack.pop() {
            if self.dirty.contains_key(&tid) {
                continue;
            }
            let Ok(t) = self.tree(&tid) else {
                self.dirty.insert(tid, true);
                continue;
            };
            let subs = t.entries.iter().filter_map(|e| match &e.content {
                Content::Tree(sub) => Some(*sub),
                _ => None,
            });
            if !expanded {
                stack.push((tid, true));
                let todo: Vec<ObjectId> = subs.filter(|s| !self.dirty.contains_key(s)).collect();
                stack.extend(todo.into_iter().map(|s| (s, false)));
                continue;
            }
            let d = t.entries.iter().any(|e| match &e.content {
                Content::Tree(sub) => self.dirty.get(sub).copied().unwrap_or(true),
                Content::Extents(ext) => ext
                    .iter()
                    .filter_map(|x| x.id.as_ref())
                    .any(|id| self.bad.contains_key(id)),
                _ => false,
            });
            self.dirty.insert(tid, d);
        }
        self.dirty.get(&root).copied().unwrap_or(true)
    }

    /// Collect (path, object, what) for every bad object under tree `root`,
    /// whose directory is at `dir` ("" for the root tree, whose one entry is
    /// "/"), depth first in entry order, with an explicit stack (no depth of
    /// nesting can overflow the thread's).
    fn walk(&mut self, root: ObjectId, dir: &[u8], out: &mut Vec<(String, ObjectId, Bad)>) {
        // Each open directory: its entries, the next one to visit, its path.
        let mut stack = Vec::new();
        type Frame = (Vec<crate::store::Entry>, usize, Vec<u8>);
        let enter = |me: &mut Self,
                     tid: ObjectId,
                     dir: Vec<u8>,
                     stack: &mut Vec<Frame>,
                     out: &mut Vec<(String, ObjectId, Bad)>| {
            if !me.is_dirty(tid) {
                return;
            }
            match me.tree(&tid) {
                Ok(t) => stack.push((t.entries, 0, dir)),
                Err(bad) => {
                    let path = if dir.is_empty() {
                        "/ (root tree)".to_string()
                    } else {
                        format!("{} (directory listing)", String::from_utf8_lossy(&dir))
                    };
                    out.push((path, tid, bad));
                }
            }
        };
        enter(self, root, dir.to_vec(), &mut stack, out);
        while let Some((entries, next, dir)) = stack.last_mut() {
            let Some(e) = entries.get(*next).cloned() else {
                stack.pop();
                continue;
            };
            *next += 1;
            let dir = dir.clone();
            let mut path = dir.clone();
            if dir.is_empty() {
                path.push(b'/');
            } else {
                if dir != b"/" {
                    path.push(b'/');
                }
                path.extend_from_slice(&e.name);
            }
            match &e.content {
                Content::Tree(sub) => enter(self, *sub, path, &mut stack, out),
                Content::Extents(ext) => {
                    let mut seen = HashSet::new();
                    for id in ext.iter().filter_map(|x| x.id) {
                        if let Some(bad) = self.bad.get(&id)
                            && seen.insert(id)
                        {
                            out.push((
                                String::from_utf8_lossy(&path).into_owned(),
                                id,
                                bad.clone(),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
