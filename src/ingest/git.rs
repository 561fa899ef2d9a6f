//! Import a git repository's history (`storefs import-git`): every commit
//! reachable from the repository's branches and tags (or from the revisions
//! asked for) becomes a checkpoint, read through gitoxide (no git process,
//! no hand parsing of objects).
//!
//! - **Trees.** A commit's tree becomes the checkpoint's tree: blobs are
//!   chunked and stored like any file content (so the same bytes dedupe with
//!   snapshots and archives), each blob once per import; regular files get
//!   git's modes (`100644` → 0644, `100755` → 0755), symlinks their target,
//!   directories 0755, gitlinks (submodules) an empty 0755 directory and a
//!   note in the record; owner 0:0 (as `git archive` writes it). An entry's
//!   mtime and ctime are the committer time of the last commit that changed
//!   it along first parents ([`TreeBuilder`]), so unchanged subtrees keep
//!   their tree ids and `diff` shows what a commit changed. The same commit
//!   always gives the same tree id, whoever imports it and whenever.
//! - **Records.** Parents are the imported parents' checkpoints, the time is
//!   the author time, the message the commit message, and the source
//!   `{"kind": "git", "git": {"repo", "commit", "submodules"}}`.
//! - **Incremental.** The store's git index (`git/<commit>.json`) maps each
//!   imported commit to its checkpoint; a commit found there with the same
//!   origin is not read again, and nothing behind it is walked.
//! - **All or nothing.** Every tree is built first (objects stored before a
//!   failure are harmless), then the records, index entries and refs are
//!   published; a shallow or corrupt repository fails before anything is.
//! - **Paths git refuses.** Every commit's tree is checked first as `git
//!   checkout` and `git fsck` check it ([`refused`]): a nested `.git` (a
//!   config there could run commands on `git status` in the mount), its
//!   other spellings, `..` and a `.gitmodules` symlink fail the import.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;

use super::{Error, Result, escape, gitblob, join};
use crate::store::chunk::{ChunkJob, Counters, Hashers, Pending, hash_chunks, send_chunks};
use crate::store::progress::{SharedProgress, no_progress};
use crate::store::{
    self, Checkpoint, Content, Entry, Extent, GitRecord, GitSource, Kind, ObjectId, Source, Store,
    Submodule, Tree,
};

/// Blobs whose chunks may still be hashing before the oldest half is waited for.
const MAX_IN_FLIGHT: usize = 4096;

/// The largest blob `import-git` reads whole (1 GiB): gix reads an object
/// whole, so this bounds what one blob costs in memory. Larger blobs git
/// keeps whole (loose, or a pack's base object, as git packs a blob over
/// `core.bigFileThreshold`) are streamed ([`super::gitblob`]) whatever
/// their size; only one git holds as a delta is refused over this.
pub const MAX_GIT_BLOB: u64 = 1 << 30;

/// Blobs stored in the run whose extents are kept between commits (about
/// 270 bytes each: 70 MiB), so that a blob seen again (a revert, a merge of a
/// branch imported before) is not read and chunked again; past this many, the
/// map is emptied after a commit, and such a blob is read again (the same
/// chunks: nothing new is stored).
pub const KEEP_BLOBS: usize = 1 << 18;

/// How to import.
#[derive(Clone, Debug)]
pub struct GitImportRequest {
    /// The repository: its work tree, its `.git` directory, or a bare repository.
    pub repo: PathBuf,
    /// Where the checkpoints mount (canonical absolute path); else the work tree.
    pub origin: Option<String>,
    /// Refs are `PREFIX.BRANCH` and `PREFIX.tags.TAG`; else the repository's name.
    pub ref_prefix: Option<String>,
    /// Revisions to import (with their ancestors); empty: every branch and tag.
    pub revs: Vec<String>,
    /// Import time (for the index), nanoseconds since the epoch.
    pub time_ns: i64,
    /// Hasher threads; 0 = all cores.
    pub threads: usize,
    /// Advanced by the bytes of each new blob; the commit count as message.
    pub progress: SharedProgress,
    /// See [`KEEP_BLOBS`] (its default); 0 empties the map after every commit.
    pub keep_blobs: usize,
}

impl Default for GitImportRequest {
    fn default() -> Self {
        GitImportRequest {
            repo: PathBuf::new(),
            origin: None,
            ref_prefix: None,
            revs: Vec::new(),
            time_ns: 0,
            threads: 0,
            progress: no_progress(),
            keep_blobs: KEEP_BLOBS,
        }
    }
}

/// What an import did.
#[derive(Clone, Debug, Default)]
pub struct GitImported {
    /// Commits imported now (new checkpoints), oldest first.
    pub imported: Vec<(String, ObjectId)>,
    /// Commits reachable from the tips that were in the index already.
    pub known: usize,
    /// Refs set or moved: (storefs ref, git ref, checkpoint).
    pub refs: Vec<(String, String, ObjectId)>,
    /// The origin recorded.
    pub origin: String,
    /// File bytes of the imported commits' trees, added up over commits.
    pub bytes: u64,
    /// Bytes of blobs read from the repository (each once, unless the map of
    /// blobs stored was emptied since: [`KEEP_BLOBS`]).
    pub blob_bytes: u64,
    pub new_objects: u64,
    pub warnings: Vec<String>,
}

fn git_error(repo: &Path, what: impl std::fmt::Display) -> Error {
    Error::Git(format!("{}: {what}; nothing was imported", repo.display()))
}

/// Import the history of `req.repo` into `store` and publish it (records,
/// index entries, refs). The caller holds the store's write lease.
pub fn import_git(store: &Store, req: &GitImportRequest) -> Result<GitImported> {
    let repo_path = std::fs::canonicalize(&req.repo).map_err(|e| Error::io(&req.repo, e))?;
    let repo = gix::open(&repo_path).map_err(|e| {
        git_error(
            &repo_path,
            format_args!(
                "not a git repository ({e}); pass a repository's work tree or .git directory"
            ),
        )
    })?;
    if repo.is_shallow().unwrap_or(true) {
        return Err(git_error(
            &repo_path,
            "is a shallow clone: its history is incomplete (run `git fetch --unshallow` there first)",
        ));
    }
    let origin = match (&req.origin, repo.workdir()) {
        (Some(o), _) => o.clone(),
        (None, Some(w)) => {
            let w = std::fs::canonicalize(w).map_err(|e| Error::io(w, e))?;
            let s = w.to_str().ok_or_else(|| {
                Error::Git(format!(
                    "{}: the work tree's path is not UTF-8; give --origin",
                    w.display()
                ))
            })?;
            store::canonical_origin(s)
                .map_err(|why| Error::Git(format!("{s}: {why}; give --origin")))?
        }
        (None, None) => {
            return Err(Error::Git(format!(
                "{} is a bare repository (no work tree to take the origin from); give --origin PATH",
                repo_path.display()
            )));
        }
    };
    let prefix = match &req.ref_prefix {
        Some(p) => p.clone(),
        None => default_prefix(&repo_path, repo.workdir()),
    };
    Store::check_name(&prefix).map_err(|_| {
        Error::Git(format!(
            "'{prefix}' cannot start a ref name (letters, digits, '.', '_', '-'); give --ref-prefix NAME"
        ))
    })?;

    // The tips: (git ref name or rev, commit), and the storefs ref each moves.
    let mut warnings = Vec::new();
    let tips = tips(&repo, &repo_path, &req.revs, &mut warnings)?;
    let mut refs: Vec<(String, String, gix::ObjectId)> = Vec::new();
    let mut taken: HashMap<String, String> = HashMap::new();
    for (git_name, commit) in &tips {
        let Some(name) = ref_name(&prefix, git_name) else {
            continue;
        };
        if let Some(other) = taken.get(&name) {
            warnings.push(format!(
                "{git_name} and {other} both map to ref '{name}'; kept {other}'s"
            ));
            continue;
        }
        if store.fork_head(&name)?.is_some() {
            return Err(Error::Git(format!(
                "{git_name} would move ref '{name}', which is a fork's name; give another --ref-prefix (nothing was imported)"
            )));
        }
        taken.insert(name.clone(), git_name.clone());
        refs.push((name, git_name.clone(), *commit));
    }

    // What to import: every commit behind the tips that the index does not
    // hold with this origin, parents before children.
    let repo_str = repo_path.to_string_lossy().into_owned();
    let mut known: HashMap<gix::ObjectId, ObjectId> = HashMap::new();
    let mut reuse_root: HashMap<gix::ObjectId, (ObjectId, Option<store::Stats>)> = HashMap::new();
    let order = walk(
        store,
        &repo,
        &repo_path,
        &origin,
        tips.iter().map(|t| t.1),
        &mut known,
        &mut reuse_root,
    )?;

    // Build every tree (objects only; nothing published yet).
    let threads = match req.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let counters = Counters::default();
    let mut built: Vec<Built> = Vec::with_capacity(order.len());
    let mut blob_bytes = 0u64;
    let (tx, rx) = mpsc::sync_channel::<ChunkJob>(threads * 2);
    let rx = Mutex::new(rx);
    let result: Result<()> = std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| hash_chunks(store, &rx, &counters));
        }
        let hashers = Hashers::batched(&tx);
        let mut b = TreeBuilder {
            repo: &repo,
            repo_path: &repo_path,
            store,
            counters: &counters,
            hashers: &hashers,
            blobs: HashMap::new(),
            sizes: HashMap::new(),
            blob_bytes: 0,
            progress: &req.progress,
            links: HashMap::new(),
            roots: HashMap::new(),
            checked: HashSet::new(),
        };
        let mut result = Ok(());
        for (i, c) in order.iter().enumerate() {
            req.progress
                .set_message(format!("commit {} of {}", i + 1, order.len()));
            match b.commit(c, reuse_root.get(c).cloned(), &known) {
                Ok(one) => {
                    built.push(one);
                    // A commit's tree is built from its first parent's: only
                    // blobs that changed against it are looked up here.
                    if b.blobs.len() > req.keep_blobs {
                        b.blobs = HashMap::new();
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        blob_bytes = b.blob_bytes;
        drop(b);
        drop(hashers);
        drop(tx);
        result
    });
    req.progress.finish();
    result?;

    // Publish: records (parents first), index entries, then refs.
    let mut imported = Vec::with_capacity(built.len());
    let mut bytes = 0u64;
    for one in built {
        let parents = one
            .parents
            .iter()
            .map(|p| {
                known.get(p).copied().ok_or_else(|| {
                    git_error(
                        &repo_path,
                        format_args!("parent {p} of {} was not imported", one.commit),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let hex = one.commit.to_string();
        bytes += one.stats.bytes;
        let ckpt = Checkpoint {
            version: 1,
            root: one.root,
            parents,
            origin: Some(origin.clone()),
            time_ns: one.author_ns,
            message: one.message,
            source: Source {
                kind: "git".into(),
                stats: Some(one.stats),
                git: Some(GitSource {
                    repo: repo_str.clone(),
                    commit: hex.clone(),
                    submodules: one.submodules,
                }),
                ..Default::default()
            },
        };
        let id = store.write_checkpoint(&ckpt)?;
        store.set_git_record(
            &hex,
            &GitRecord {
                checkpoint: id,
                repo: repo_str.clone(),
                time_ns: req.time_ns,
            },
        )?;
        known.insert(one.commit, id);
        imported.push((hex, id));
    }
    // The index entries are durable before any ref moves.
    store.sync_git_index()?;
    let mut moved = Vec::new();
    for (name, git_name, commit) in refs {
        let id = known[&commit];
        if store.get_ref(&name)? != Some(id) {
            store.set_ref(&name, &id)?;
            moved.push((name, git_name, id));
        }
    }
    Ok(GitImported {
        known: known.len() - imported.len(),
        imported,
        refs: moved,
        origin,
        bytes,
        blob_bytes,
        new_objects: counters.objects.load(Ordering::Relaxed),
        warnings,
    })
}

/// The default ref prefix: the work tree's name, or a bare repository's
/// directory name without `.git`; characters a ref cannot hold become `_`.
fn default_prefix(repo_path: &Path, workdir: Option<&Path>) -> String {
    let dir = workdir
        .and_then(|w| std::fs::canonicalize(w).ok())
        .unwrap_or_else(|| repo_path.to_path_buf());
    let mut name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == ".git" {
        name = dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    let name = name.strip_suffix(".git").unwrap_or(&name).to_string();
    sanitize(&name)
}

/// `s` with every byte a ref name cannot hold turned into `_`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The storefs ref for git ref `git_name`: `refs/heads/B` → `PREFIX.B`,
/// `refs/tags/T` → `PREFIX.tags.T`, with `/` → `.` and other bytes a ref
/// cannot hold → `_`. A revision that is no branch or tag gets none.
pub fn ref_name(prefix: &str, git_name: &str) -> Option<String> {
    let rest = if let Some(b) = git_name.strip_prefix("refs/heads/") {
        b.to_string()
    } else if let Some(t) = git_name.strip_prefix("refs/tags/") {
        format!("tags/{t}")
    } else {
        return None;
    };
    Some(format!("{prefix}.{}", sanitize(&rest.replace('/', "."))))
}

/// The commits to start from: every branch and tag (peeled to its commit;
/// a tag of a tree or blob is skipped with a warning), or the revisions.
fn tips(
    repo: &gix::Repository,
    repo_path: &Path,
    revs: &[String],
    warnings: &mut Vec<String>,
) -> Result<Vec<(String, gix::ObjectId)>> {
    let mut out = Vec::new();
    if revs.is_empty() {
        let platform = repo
            .references()
            .map_err(|e| git_error(repo_path, format_args!("cannot read its refs: {e}")))?;
        let all = platform
            .all()
            .map_err(|e| git_error(repo_path, format_args!("cannot read its refs: {e}")))?;
        for r in all {
            let mut r =
                r.map_err(|e| git_error(repo_path, format_args!("cannot read a ref: {e}")))?;
            let name = r.name().as_bstr().to_str_lossy().into_owned();
            if !(name.starts_with("refs/heads/") || name.starts_with("refs/tags/")) {
                continue;
            }
            match r.peel_to_commit() {
                Ok(c) => out.push((name, c.id)),
                Err(e) if name.starts_with("refs/tags/") => {
                    warnings.push(format!("{name} does not name a commit ({e}); skipped"))
                }
                Err(e) => {
                    return Err(git_error(
                        repo_path,
                        format_args!("{name} does not lead to a commit: {e}"),
                    ));
                }
            }
        }
        if out.is_empty() {
            return Err(git_error(
                repo_path,
                "has no branch or tag (no commit to import)",
            ));
        }
    } else {
        for rev in revs {
            let id = repo
                .rev_parse_single(rev.as_str())
                .map_err(|e| git_error(repo_path, format_args!("--rev {rev}: {e}")))?;
            let commit = id.object().and_then(|o| o.peel_to_commit()).map_err(|e| {
                git_error(repo_path, format_args!("--rev {rev} is not a commit: {e}"))
            })?;
            // A branch or tag given by name moves its ref.
            let name = repo
                .try_find_reference(rev.as_str())
                .ok()
                .flatten()
                .map(|r| r.name().as_bstr().to_str_lossy().into_owned())
                .unwrap_or_else(|| rev.clone());
            out.push((name, commit.id));
        }
    }
    Ok(out)
}

/// Every commit behind `tips` that is not in the index with `origin`,
/// parents before children (depth first). Commits found in the index go to
/// `known`; those in it with another origin are re-recorded with their root
/// (`reuse_root`) instead of being read again. A missing commit is an error.
fn walk(
    store: &Store,
    repo: &gix::Repository,
    repo_path: &Path,
    origin: &str,
    tips: impl Iterator<Item = gix::ObjectId>,
    known: &mut HashMap<gix::ObjectId, ObjectId>,
    reuse_root: &mut HashMap<gix::ObjectId, (ObjectId, Option<store::Stats>)>,
) -> Result<Vec<gix::ObjectId>> {
    let mut order = Vec::new();
    let mut seen: HashSet<gix::ObjectId> = HashSet::new();
    // (commit, its parents once listed)
    let mut stack: Vec<(gix::ObjectId, Option<Vec<gix::ObjectId>>)> = Vec::new();
    for t in tips {
        stack.push((t, None));
        while let Some((c, parents)) = stack.pop() {
            match parents {
                Some(_) => order.push(c),
                None => {
                    if !seen.insert(c) {
                        continue;
                    }
                    if let Some(rec) = store.git_record(&c.to_string())? {
                        let ck = store.read_checkpoint(&rec.checkpoint)?;
                        if ck.origin.as_deref() == Some(origin) {
                            known.insert(c, rec.checkpoint);
                            continue;
                        }
                        reuse_root.insert(c, (ck.root, ck.source.stats));
                    }
                    let commit = repo.find_commit(c).map_err(|e| {
                        git_error(
                            repo_path,
                            format_args!("commit {c} cannot be read ({e}): the repository is corrupt or incomplete"),
                        )
                    })?;
                    let ps: Vec<gix::ObjectId> = commit.parent_ids().map(|p| p.detach()).collect();
                    stack.push((c, Some(ps.clone())));
                    for p in ps.into_iter().rev() {
                        if !seen.contains(&p) {
                            stack.push((p, None));
                        }
                    }
                }
            }
        }
    }
    Ok(order)
}

/// A commit's tree, stored, and what its record needs.
struct Built {
    commit: gix::ObjectId,
    parents: Vec<gix::ObjectId>,
    root: ObjectId,
    author_ns: i64,
    message: String,
    stats: store::Stats,
    submodules: Vec<Submodule>,
}

/// Builds storefs trees from git trees, each blob chunked and stored once.
///
/// Times: an entry's mtime (and ctime) is the committer time of the commit
/// that last changed it along first parents (what `git log --first-parent -1
/// --format=%ct C -- PATH` prints): an entry equal to the first parent's at
/// the same path (same blob or tree id and mode) keeps the parent's entry
/// whole, so an unchanged subtree keeps its tree id and is not rebuilt, and
/// `storefs diff` of two commits shows what changed between them. A function
/// of the commit (its history is part of it): the same commit always gives
/// the same tree.
struct TreeBuilder<'a> {
    repo: &'a gix::Repository,
    repo_path: &'a Path,
    store: &'a Store,
    counters: &'a Counters,
    hashers: &'a Hashers<'a>,
    /// Blob → (size, extents) of the regular files stored in this run.
    blobs: HashMap<gix::ObjectId, (u64, Vec<Extent>)>,
    /// Git tree → (entries, file bytes) below it.
    sizes: HashMap<gix::ObjectId, (u64, u64)>,
    /// Git tree → its gitlinks (relative path, submodule commit).
    links: HashMap<gix::ObjectId, Links>,
    /// Commit → (its git tree, the root directory entry it was imported as).
    roots: HashMap<gix::ObjectId, (gix::ObjectId, Entry)>,
    /// Git trees whose entries, and everything below them, git would check out.
    checked: HashSet<gix::ObjectId>,
    blob_bytes: u64,
    progress: &'a SharedProgress,
}

/// One entry of a git tree, decoded.
#[derive(Clone)]
struct GitEntry {
    name: Vec<u8>,
    kind: EntryKind,
    id: gix::ObjectId,
}

/// The gitlinks under a git tree: (path relative to it, submodule commit).
type Links = std::rc::Rc<Vec<(Vec<u8>, String)>>;

/// The first parent's version of a directory: its git tree and its entry.
type Prev = Option<(gix::ObjectId, Entry)>;

impl TreeBuilder<'_> {
    fn corrupt(&self, what: impl std::fmt::Display) -> Error {
        git_error(
            self.repo_path,
            format_args!("{what}: the repository is corrupt or incomplete"),
        )
    }

    fn commit_tree(&self, c: &gix::ObjectId) -> Result<gix::ObjectId> {
        Ok(self
            .repo
            .find_commit(*c)
            .and_then(|c| c.tree_id())
            .map_err(|e| self.corrupt(format_args!("commit {c} ({e})")))?
            .detach())
    }

    /// The first parent's root (git tree, directory entry): built in this
    /// run, or read from the checkpoint an earlier run imported it as.
    fn prev_root(
        &mut self,
        parent: Option<&gix::ObjectId>,
        known: &HashMap<gix::ObjectId, ObjectId>,
    ) -> Result<Prev> {
        let Some(p) = parent else { return Ok(None) };
        if let Some(r) = self.roots.get(p) {
            return Ok(Some(r.clone()));
        }
        let Some(id) = known.get(p) else {
            return Ok(None);
        };
        let ck = self.store.read_checkpoint(id)?;
        let entry = self.store.root_entry(&ck)?;
        let tree = self.commit_tree(p)?;
        self.roots.insert(*p, (tree, entry.clone()));
        Ok(Some((tree, entry)))
    }

    fn commit(
        &mut self,
        c: &gix::ObjectId,
        reuse: Option<(ObjectId, Option<store::Stats>)>,
        known: &HashMap<gix::ObjectId, ObjectId>,
    ) -> Result<Built> {
        let commit = self
            .repo
            .find_commit(*c)
            .map_err(|e| self.corrupt(format_args!("commit {c} ({e})")))?;
        let parents: Vec<gix::ObjectId> = commit.parent_ids().map(|p| p.detach()).collect();
        let secs = |sig: gix::Result<gix::actor::SignatureRef<'_>>, who: &str| {
            sig.and_then(|s| s.time())
                .map(|t| t.seconds.saturating_mul(1_000_000_000))
                .map_err(|e| self.corrupt(format_args!("commit {c}: bad {who} ({e})")))
        };
        let author_ns = secs(commit.author(), "author")?;
        let commit_ns = secs(commit.committer(), "committer")?;
        let message = commit
            .message_raw()
            .map_err(|e| self.corrupt(format_args!("commit {c}: no message ({e})")))?
            .to_str_lossy()
            .trim_end()
            .to_string();
        let tree = commit
            .tree_id()
            .map_err(|e| self.corrupt(format_args!("commit {c}: no tree ({e})")))?
            .detach();
        drop(commit);
        self.check_paths(c, &tree)?;
        let before = self.counters.objects.load(Ordering::Relaxed);
        let before_bytes = self.counters.bytes.load(Ordering::Relaxed);
        let submodules = self
            .gitlinks(&tree, b"")?
            .iter()
            .map(|(p, commit)| Submodule {
                path: String::from_utf8_lossy(p).into_owned(),
                commit: commit.clone(),
            })
            .collect();
        // A commit imported before with another origin keeps its tree.
        let (root, stats) = match reuse {
            Some((root, stats)) => {
                let ck_root = self.store.get_tree(&root, "root")?;
                if let Some(e) = ck_root.entries.into_iter().next() {
                    self.roots.insert(*c, (tree, e));
                }
                (root, stats.unwrap_or_default())
            }
            None => {
                let prev = self.prev_root(parents.first(), known)?;
                self.send_blobs(&tree, prev.as_ref().map(|p| p.0))?;
                let dir = self.tree(&tree, b"", commit_ns, prev)?;
                let (root, written) = self.store.put_root(dir.clone())?;
                self.counters.add(written);
                self.roots.insert(*c, (tree, dir));
                let (entries, bytes) = self.size_of(&tree)?;
                let stats = store::Stats {
                    entries: entries + 1,
                    bytes,
                    new_objects: self.counters.objects.load(Ordering::Relaxed) - before,
                    new_bytes_compressed: self.counters.bytes.load(Ordering::Relaxed)
                        - before_bytes,
                };
                (root, stats)
            }
        };
        Ok(Built {
            commit: *c,
            parents,
            root,
            author_ns,
            message,
            stats,
            submodules,
        })
    }

    /// Every path under `tree` (commit `c`'s root) that git would check out,
    /// or an error naming the commit, the first path git refuses and why
    /// ([`refused`]). Trees checked before (in this run) are not read again.
    fn check_paths(&mut self, c: &gix::ObjectId, tree: &gix::ObjectId) -> Result<()> {
        let mut stack = vec![(*tree, Vec::new())];
        while let Some((t, path)) = stack.pop() {
            if self.checked.contains(&t) {
                continue;
            }
            for e in self.decoded(&t, &path)? {
                let p = join(&path, &e.name);
                if let Some(why) = refused(&e.name, e.kind) {
                    let shown = if e.kind == EntryKind::Tree {
                        self.first_path(&e.id, p)
                    } else {
                        p
                    };
                    let hex = c.to_string();
                    return Err(Error::Git(format!(
                        "commit {} has a path git refuses: '{}' ({why}); nothing was imported",
                        &hex[..12],
                        escape(&shown)
                    )));
                }
                if e.kind == EntryKind::Tree {
                    stack.push((e.id, p));
                }
            }
            // Marked once its entries pass: a subtree left on the stack is
            // checked before the import goes on (an error ends it).
            self.checked.insert(t);
        }
        Ok(())
    }

    /// `path` (git tree `tree`) and its first entry, down to a file, as git
    /// names a refused path (`sub/.git/config`); `path` when it is empty
    /// or cannot be read.
    fn first_path(&self, tree: &gix::ObjectId, mut path: Vec<u8>) -> Vec<u8> {
        let mut t = *tree;
        for _ in 0..64 {
            let Some(e) = self
                .decoded(&t, &path)
                .ok()
                .and_then(|es| es.into_iter().next())
            else {
                break;
            };
            path = join(&path, &e.name);
            if e.kind != EntryKind::Tree {
                break;
            }
            t = e.id;
        }
        path
    }

    /// A git tree's entries as stored, names unchecked.
    fn decoded(&self, tree: &gix::ObjectId, path: &[u8]) -> Result<Vec<GitEntry>> {
        let t = self
            .repo
            .find_tree(*tree)
            .map_err(|e| self.corrupt(format_args!("tree {tree} at '{}' ({e})", escape(path))))?;
        let decoded = t
            .decode()
            .map_err(|e| self.corrupt(format_args!("tree {tree} at '{}' ({e})", escape(path))))?;
        Ok(decoded
            .entries
            .iter()
            .map(|e| GitEntry {
                name: e.filename.to_vec(),
                kind: e.mode.kind(),
                id: e.oid.to_owned(),
            })
            .collect())
    }

    /// A git tree's entries; one with a name no directory can hold is an
    /// error ([`TreeBuilder::check_paths`] refused every such name before).
    fn entries(&self, tree: &gix::ObjectId, path: &[u8]) -> Result<Vec<GitEntry>> {
        let out = self.decoded(tree, path)?;
        for e in &out {
            let name: &[u8] = &e.name;
            if name.is_empty()
                || name == b"."
                || name == b".."
                || name.contains(&b'/')
                || name.contains(&0)
            {
                return Err(git_error(
                    self.repo_path,
                    format_args!(
                        "tree {tree} at '{}' has an entry named '{}' (empty, '.', '..' or with '/'): the repository is corrupt or hostile",
                        escape(path),
                        escape(name)
                    ),
                ));
            }
        }
        Ok(out)
    }

    /// Blob `id` at `path` could not be read as it should: the repository
    /// is corrupt or incomplete.
    fn blob_error(&self, id: &gix::ObjectId, path: &[u8], e: impl std::fmt::Display) -> Error {
        self.corrupt(format_args!("blob {id} of '{}' ({e})", escape(path)))
    }

    /// A blob's size, by its header.
    fn blob_size(&self, id: &gix::ObjectId, path: &[u8]) -> Result<u64> {
        Ok(self
            .repo
            .find_header(*id)
            .map_err(|e| self.blob_error(id, path, e))?
            .size())
    }

    /// A blob's bytes, whole (gix reads objects whole: a packed one may be
    /// a delta), so one over [`MAX_GIT_BLOB`] is refused by its header's
    /// size before anything is read. Large blobs git keeps whole are
    /// streamed instead ([`Self::send_blob`]).
    fn read_blob(&self, id: &gix::ObjectId, path: &[u8]) -> Result<Vec<u8>> {
        self.read_blob_of(id, path, self.blob_size(id, path)?)
    }

    /// [`Self::read_blob`] of a blob whose header said `size`.
    fn read_blob_of(&self, id: &gix::ObjectId, path: &[u8], size: u64) -> Result<Vec<u8>> {
        if size > MAX_GIT_BLOB {
            return Err(Error::GitBlobTooLarge {
                repo: self.repo_path.to_path_buf(),
                path: escape(path),
                size,
                max_mib: MAX_GIT_BLOB >> 20,
            });
        }
        let mut blob = self
            .repo
            .find_blob(*id)
            .map_err(|e| self.blob_error(id, path, e))?;
        Ok(blob.take_data())
    }

    /// Chunk blob `id` (at `path`) and send its chunks to the hashers. One
    /// over [`gitblob::STREAM_ABOVE`] that git keeps whole (loose, or a
    /// pack's base object) is read as a stream and checked against its id
    /// as it passes; any other is read whole ([`Self::read_blob`]).
    fn send_blob(&mut self, id: &gix::ObjectId, path: &[u8]) -> Result<Pending> {
        let size = self.blob_size(id, path)?;
        let io = |err: std::io::Error| Error::io(Path::new(&escape(path)), err);
        if size > gitblob::STREAM_ABOVE {
            let objects = self.repo.common_dir().join("objects");
            let found =
                gitblob::open(&objects, id, size).map_err(|e| self.blob_error(id, path, e))?;
            if let gitblob::Found::Stream(mut r) = found {
                let pend = send_chunks(&mut r, size, self.hashers, &**self.progress).map_err(io)?;
                r.finish().map_err(|e| self.blob_error(id, path, e))?;
                self.blob_bytes += size;
                return Ok(pend);
            }
        }
        let data = self.read_blob_of(id, path, size)?;
        self.blob_bytes += data.len() as u64;
        let len = data.len() as u64;
        send_chunks(data.as_slice(), len, self.hashers, &**self.progress).map_err(io)
    }

    /// Chunk and store every regular file's blob under `tree` that is not
    /// the first parent's at the same path (`prev`: its tree) and was not
    /// stored in this run, [`MAX_IN_FLIGHT`] at most in flight (each holds
    /// its reply channel: about 2.5 KB), then wait for them.
    fn send_blobs(&mut self, tree: &gix::ObjectId, prev: Option<gix::ObjectId>) -> Result<()> {
        let mut pending: VecDeque<(gix::ObjectId, Pending)> = VecDeque::new();
        let mut queued: HashSet<gix::ObjectId> = HashSet::new();
        let mut stack = vec![(*tree, prev, Vec::new())];
        while let Some((t, prev, path)) = stack.pop() {
            if prev == Some(t) {
                continue;
            }
            let before: HashMap<Vec<u8>, GitEntry> = match prev {
                Some(p) => self
                    .entries(&p, &path)?
                    .into_iter()
                    .map(|e| (e.name.clone(), e))
                    .collect(),
                None => HashMap::new(),
            };
            for e in self.entries(&t, &path)? {
                let p = join(&path, &e.name);
                let old = before.get(&e.name);
                match e.kind {
                    EntryKind::Tree => {
                        let prev = old.filter(|o| o.kind == EntryKind::Tree).map(|o| o.id);
                        stack.push((e.id, prev, p));
                    }
                    EntryKind::Blob | EntryKind::BlobExecutable => {
                        let same = old.is_some_and(|o| o.id == e.id && o.kind == e.kind);
                        if same || self.blobs.contains_key(&e.id) || !queued.insert(e.id) {
                            continue;
                        }
                        let pend = self.send_blob(&e.id, &p)?;
                        pending.push_back((e.id, pend));
                        if pending.len() > MAX_IN_FLIGHT {
                            let oldest = pending.drain(..MAX_IN_FLIGHT / 2).collect();
                            self.wait_blobs(oldest)?;
                        }
                    }
                    EntryKind::Link | EntryKind::Commit => {}
                }
            }
        }
        self.wait_blobs(pending)
    }

    /// Wait for blobs in flight and remember their extents.
    fn wait_blobs(&mut self, pending: VecDeque<(gix::ObjectId, Pending)>) -> Result<()> {
        // Their chunks may still sit in the batch: send them before waiting.
        self.hashers
            .flush()
            .map_err(|e| Error::io(self.repo_path, e))?;
        for (id, p) in pending {
            let len = p.total();
            let ext = p.wait().map_err(|e| match e.downcast::<store::Error>() {
                Ok(s) => Error::Store(s),
                Err(e) => Error::io(self.repo_path, e),
            })?;
            self.blobs.insert(id, (len, ext));
        }
        // Publish the objects written once many wait, as a snapshot does.
        Ok(self.store.sync_objects_if_many(store::SYNC_OBJECTS)?)
    }

    /// (entries, file bytes) under git tree `root`, memoized. Iterative
    /// (a tree is summed once its subtrees are), so no depth of nesting can
    /// overflow the stack.
    fn size_of(&mut self, root: &gix::ObjectId) -> Result<(u64, u64)> {
        let mut stack: Vec<(gix::ObjectId, Option<Vec<GitEntry>>)> = vec![(*root, None)];
        while let Some((tree, listed)) = stack.pop() {
            if self.sizes.contains_key(&tree) {
                continue;
            }
            let Some(entries) = listed else {
                let entries = self.entries(&tree, b"")?;
                let subs: Vec<gix::ObjectId> = entries
                    .iter()
                    .filter(|e| e.kind == EntryKind::Tree && !self.sizes.contains_key(&e.id))
                    .map(|e| e.id)
                    .collect();
                stack.push((tree, Some(entries)));
                stack.extend(subs.into_iter().map(|t| (t, None)));
                continue;
            };
            let mut n = 0u64;
            let mut bytes = 0u64;
            for e in entries {
                n += 1;
                match e.kind {
                    EntryKind::Tree => {
                        let (k, b) = self.sizes.get(&e.id).copied().unwrap_or_default();
                        n += k;
                        bytes += b;
                    }
                    EntryKind::Blob | EntryKind::BlobExecutable => {
                        bytes += match self.blobs.get(&e.id) {
                            Some(b) => b.0,
                            None => self
                                .repo
                                .find_header(e.id)
                                .map_err(|err| self.corrupt(format_args!("blob {} ({err})", e.id)))?
                                .size(),
                        };
                    }
                    _ => {}
                }
            }
            self.sizes.insert(tree, (n, bytes));
        }
        Ok(self.sizes.get(root).copied().unwrap_or_default())
    }

    /// The gitlinks under `root` (paths relative to it), memoized; iterative
    /// as [`TreeBuilder::size_of`].
    fn gitlinks(&mut self, root: &gix::ObjectId, path: &[u8]) -> Result<Links> {
        type Frame = (gix::ObjectId, Vec<u8>, Option<Vec<GitEntry>>);
        let mut stack: Vec<Frame> = vec![(*root, path.to_vec(), None)];
        while let Some((tree, path, listed)) = stack.pop() {
            if self.links.contains_key(&tree) {
                continue;
            }
            let Some(entries) = listed else {
                let entries = self.entries(&tree, &path)?;
                let subs: Vec<Frame> = entries
                    .iter()
                    .filter(|e| e.kind == EntryKind::Tree && !self.links.contains_key(&e.id))
                    .map(|e| (e.id, join(&path, &e.name), None))
                    .collect();
                stack.push((tree, path, Some(entries)));
                stack.extend(subs);
                continue;
            };
            let mut out = Vec::new();
            for e in entries {
                match e.kind {
                    EntryKind::Tree => {
                        if let Some(sub) = self.links.get(&e.id) {
                            for (p, c) in sub.iter() {
                                out.push((join(&e.name, p), c.clone()));
                            }
                        }
                    }
                    EntryKind::Commit => out.push((e.name.clone(), e.id.to_string())),
                    _ => {}
                }
            }
            self.links.insert(tree, std::rc::Rc::new(out));
        }
        Ok(self.links.get(root).cloned().unwrap_or_default())
    }

    /// The directory entry for git tree `tree` at `path`, its tree stored;
    /// `prev` is the first parent's version of the directory. Depth first
    /// with an explicit stack of directories being built, so no depth of
    /// nesting can overflow the thread's stack.
    fn tree(
        &mut self,
        tree: &gix::ObjectId,
        path: &[u8],
        time_ns: i64,
        prev: Prev,
    ) -> Result<Entry> {
        let mut stack = match self.open_tree(tree, path, prev)? {
            Opened::Same(e) => return Ok(e),
            Opened::Dir(d) => vec![d],
        };
        loop {
            let top = stack.last_mut().expect("a directory being built");
            let Some(e) = top.git.next() else {
                let done = stack.pop().expect("a directory being built");
                let dir = self.close_tree(done, time_ns)?;
                match stack.last_mut() {
                    Some(parent) => {
                        parent.entries.push(dir);
                        parent.subdirs += 1;
                        continue;
                    }
                    None => return Ok(dir),
                }
            };
            let p = join(&top.path, &e.name);
            let old = top.before.remove(&e.name);
            if e.kind == EntryKind::Tree {
                let prev = old
                    .filter(|(g, o)| g.kind == EntryKind::Tree && o.kind == Kind::Dir)
                    .map(|(g, o)| (g.id, o));
                match self.open_tree(&e.id, &p, prev)? {
                    Opened::Same(entry) => {
                        top.entries.push(entry);
                        top.subdirs += 1;
                    }
                    Opened::Dir(d) => stack.push(d),
                }
                continue;
            }
            let (entry, is_dir) = self.leaf(e, old, &p, time_ns)?;
            top.subdirs += u32::from(is_dir);
            top.entries.push(entry);
        }
    }

    /// Start building the directory for git tree `tree` at `path`, or its
    /// entry when it is the first parent's (`prev`) unchanged.
    fn open_tree(&mut self, tree: &gix::ObjectId, path: &[u8], prev: Prev) -> Result<Opened> {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(b"").to_vec();
        if let Some((pt, pe)) = &prev
            && pt == tree
        {
            return Ok(Opened::Same(Entry { name, ..pe.clone() }));
        }
        // The first parent's entries here: git's and ours, by name.
        let mut before: HashMap<Vec<u8>, (GitEntry, Entry)> = HashMap::new();
        if let Some((pt, pe)) = &prev
            && let Some(ours) = pe.tree_id()
        {
            let ours = self.store.get_tree(&ours, &escape(path))?;
            for g in self.entries(pt, path)? {
                if let Some(o) = ours.get(&g.name) {
                    before.insert(g.name.clone(), (g, o.clone()));
                }
            }
        }
        Ok(Opened::Dir(Building {
            tree: *tree,
            name,
            path: path.to_vec(),
            git: self.entries(tree, path)?.into_iter(),
            before,
            entries: Vec::new(),
            subdirs: 0,
        }))
    }

    /// The entry for git entry `e` (not a tree) at `p`; `old` is the first
    /// parent's at the same name. Whether it is a directory (a gitlink's).
    fn leaf(
        &mut self,
        e: GitEntry,
        old: Option<(GitEntry, Entry)>,
        p: &[u8],
        time_ns: i64,
    ) -> Result<(Entry, bool)> {
        if let Some((g, o)) = old
            && g.kind == e.kind
            && g.id == e.id
        {
            // Unchanged since the first parent: its entry, times included.
            let is_dir = o.kind == Kind::Dir;
            return Ok((o, is_dir));
        }
        let mut entry = meta(e.name, Kind::File, 0o644, time_ns);
        let mut is_dir = false;
        match e.kind {
            EntryKind::Tree => unreachable!("trees are built by TreeBuilder::tree"),
            EntryKind::Commit => {
                let (id, written) = self.store.put_tree(&Tree::default())?;
                self.counters.add(written);
                entry.kind = Kind::Dir;
                entry.perm = 0o755;
                entry.nlink = 2;
                entry.content = Content::Tree(id);
                is_dir = true;
            }
            EntryKind::Link => {
                let target = self.read_blob(&e.id, p)?;
                if target.is_empty() || target.contains(&0) || target.len() > 4096 {
                    return Err(git_error(
                        self.repo_path,
                        format_args!(
                            "symlink '{}' has an empty, over-long or NUL-holding target: the repository is corrupt or hostile",
                            escape(p)
                        ),
                    ));
                }
                entry.kind = Kind::Symlink;
                entry.perm = 0o777;
                entry.size = target.len() as u64;
                entry.content = Content::Target(target);
            }
            EntryKind::Blob | EntryKind::BlobExecutable => {
                let (size, ext) = self.blobs.get(&e.id).cloned().ok_or_else(|| {
                    self.corrupt(format_args!(
                        "blob {} of '{}' was not stored",
                        e.id,
                        escape(p)
                    ))
                })?;
                if e.kind == EntryKind::BlobExecutable {
                    entry.perm = 0o755;
                }
                entry.size = size;
                entry.content = Content::Extents(ext);
            }
        }
        Ok((entry, is_dir))
    }

    /// Store the directory `b` has built; its entry.
    fn close_tree(&mut self, b: Building, time_ns: i64) -> Result<Entry> {
        let mut t = Tree { entries: b.entries };
        t.sort();
        if let Some(w) = t.entries.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(git_error(
                self.repo_path,
                format_args!(
                    "tree {} at '{}' names '{}' twice: the repository is corrupt",
                    b.tree,
                    escape(&b.path),
                    escape(&w[0].name)
                ),
            ));
        }
        let (id, written) = self.store.put_tree(&t)?;
        self.counters.add(written);
        let mut dir = meta(b.name, Kind::Dir, 0o755, time_ns);
        dir.nlink = 2 + b.subdirs;
        dir.content = Content::Tree(id);
        Ok(dir)
    }
}

/// What [`TreeBuilder::open_tree`] found.
enum Opened {
    /// The first parent's directory, unchanged: its entry.
    Same(Entry),
    /// A directory to build.
    Dir(Building),
}

/// A directory of an import being built: its git tree, name and path, the
/// git entries left to convert, the first parent's entries by name, and the
/// entries converted so far.
struct Building {
    tree: gix::ObjectId,
    name: Vec<u8>,
    path: Vec<u8>,
    git: std::vec::IntoIter<GitEntry>,
    before: HashMap<Vec<u8>, (GitEntry, Entry)>,
    entries: Vec<Entry>,
    subdirs: u32,
}

/// An entry owned by 0:0 with every time `time_ns`.
fn meta(name: Vec<u8>, kind: Kind, perm: u32, time_ns: i64) -> Entry {
    Entry {
        name,
        kind,
        perm,
        uid: 0,
        gid: 0,
        mtime_ns: time_ns,
        ctime_ns: time_ns,
        size: 0,
        nlink: if kind == Kind::Dir { 2 } else { 1 },
        link_id: 0,
        rdev: 0,
        xattrs: Vec::new(),
        flags: 0,
        content: Content::None,
    }
}

/// Why git refuses a tree entry named `name` of kind `kind`, as
/// `git checkout` does (read-cache.c `verify_path`, with `core.protectNTFS`,
/// git's default everywhere, and `core.protectHFS`) and `git fsck` does
/// (`hasDotgit`, `hasDot`, `hasDotdot`, `emptyName`, `fullPathname`,
/// `gitmodulesSymlink`): `.git` in any case and in its HFS+ and NTFS
/// spellings (ignorable Unicode characters, `git~1`, trailing dots and
/// spaces, `::$INDEX_ALLOCATION`, after a backslash) as any component; `.`,
/// `..`, empty names and names holding `/` or NUL; a `.gitmodules` (any
/// such spelling) that is a symlink. `None`: git checks it out.
fn refused(name: &[u8], kind: EntryKind) -> Option<&'static str> {
    if name.is_empty() {
        return Some("an empty name");
    }
    if name == b"." || name == b".." {
        return Some("a '.' or '..' name");
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Some("a name holding '/' or NUL");
    }
    if name == b".git" {
        return Some(if kind == EntryKind::Tree {
            "a .git directory"
        } else {
            "a .git entry"
        });
    }
    let link = kind == EntryKind::Link;
    // NTFS takes a backslash as a separator: each piece after one counts.
    let starts = std::iter::once(0).chain(
        name.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\\')
            .map(|(i, _)| i + 1),
    );
    for at in starts {
        let rest = &name[at..];
        if ntfs_dotgit(rest) || (at == 0 && hfs_dot(rest, b"git")) {
            return Some("a spelling of .git: case, 8.3 name, NTFS or HFS+");
        }
        if link
            && (ntfs_dot(rest, b"gitmodules", b"gi7eba")
                || (at == 0 && hfs_dot(rest, b"gitmodules")))
        {
            return Some("a .gitmodules that is a symlink");
        }
    }
    None
}

/// `.git` or `git~1`, any case, then only dots and spaces up to the end,
/// a backslash, `/` or `:` (git's `is_ntfs_dotgit`).
fn ntfs_dotgit(n: &[u8]) -> bool {
    let rest = if n.len() >= 4 && n[0] == b'.' && n[1..4].eq_ignore_ascii_case(b"git") {
        &n[4..]
    } else if n.len() >= 5 && n[..3].eq_ignore_ascii_case(b"git") && &n[3..5] == b"~1" {
        &n[5..]
    } else {
        return false;
    };
    for &c in rest {
        match c {
            b'\\' | b'/' | b':' => return true,
            b'.' | b' ' => {}
            _ => return false,
        }
    }
    true
}

/// `.WORD` in any case, its 8.3 names (`WORD[..6]~1`..`~4`, and
/// `SHORT~N` with git's hashed prefix `short`), then only dots and spaces up
/// to the end or a `:` (git's `is_ntfs_dot_generic`).
fn ntfs_dot(n: &[u8], word: &[u8], short: &[u8]) -> bool {
    let tail = |rest: &[u8]| {
        for &c in rest {
            match c {
                b':' => return true,
                b'.' | b' ' => {}
                _ => return false,
            }
        }
        true
    };
    if n.len() > word.len() && n[0] == b'.' && n[1..=word.len()].eq_ignore_ascii_case(word) {
        return tail(&n[word.len() + 1..]);
    }
    if n.len() >= 8
        && n[..6].eq_ignore_ascii_case(&word[..6])
        && n[6] == b'~'
        && (b'1'..=b'4').contains(&n[7])
    {
        return tail(&n[8..]);
    }
    let mut i = 0;
    let mut tilde = false;
    while i < 8 {
        let Some(&c) = n.get(i) else { return false };
        if tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !n.get(i).is_some_and(|d| (b'1'..=b'9').contains(d)) {
                return false;
            }
            tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || c.to_ascii_lowercase() != short[i] {
            return false;
        }
        i += 1;
    }
    tail(n.get(i..).unwrap_or_default())
}

/// `.WORD` as HFS+ compares names: ASCII case folded and the code points it
/// ignores skipped (git's `is_hfs_dotgit`); bad UTF-8 ends the name.
fn hfs_dot(n: &[u8], word: &[u8]) -> bool {
    let valid = match std::str::from_utf8(n) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&n[..e.valid_up_to()]).unwrap_or_default(),
    };
    let ignored = |c: &char| matches!(*c as u32, 0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff);
    let mut chars = valid.chars().filter(|c| !ignored(c));
    if chars.next() != Some('.') {
        return false;
    }
    for &w in word {
        match chars.next() {
            Some(c) if c.is_ascii() && c.to_ascii_lowercase() as u8 == w => {}
            _ => return false,
        }
    }
    matches!(chars.next(), None | Some('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names() {
        assert_eq!(ref_name("h", "refs/heads/main").as_deref(), Some("h.main"));
        assert_eq!(
            ref_name("h", "refs/heads/feature/x").as_deref(),
            Some("h.feature.x")
        );
        assert_eq!(
            ref_name("h", "refs/tags/v1.0").as_deref(),
            Some("h.tags.v1.0")
        );
        assert_eq!(ref_name("h", "refs/heads/a+b").as_deref(), Some("h.a_b"));
        assert_eq!(ref_name("h", "HEAD~3"), None);
        assert_eq!(sanitize("my repo"), "my_repo");
    }

    /// The names git's `verify_path` and `fsck` refuse, and near misses
    /// they accept (t/t1450-fsck.sh, t/t7415-submodule-names.sh and
    /// t/t0060-path-utils.sh list the same spellings).
    #[test]
    fn names_git_refuses() {
        let (tree, blob, link) = (EntryKind::Tree, EntryKind::Blob, EntryKind::Link);
        for (name, kind) in [
            (&b".git"[..], tree),
            (b".git", blob),
            (b".GIT", tree),
            (b".Git", blob),
            (b"git~1", tree),
            (b"GIT~1", tree),
            (b".git.", tree),
            (b".git ", tree),
            (b".git. . ", tree),
            (b".git::$INDEX_ALLOCATION", tree),
            (b".git:stream", blob),
            (b"a\\.git", tree),
            (b"a\\git~1\\b", blob),
            (".g\u{200c}it".as_bytes(), tree),
            ("\u{feff}.GIT".as_bytes(), tree),
            (".gi\u{206f}t\u{200e}".as_bytes(), blob),
            (b".", tree),
            (b"..", tree),
            (b"", blob),
            (b"a/b", blob),
            (b"a\0b", blob),
            (b".gitmodules", link),
            (b".GitModules", link),
            (b".gitmodules.", link),
            (b".gitmodules :x", link),
            (b"gitmod~1", link),
            (b"GI7EBA~1", link),
            (b"gi7eba~9", link),
            (b"x\\.gitmodules", link),
            (".gitmodules\u{200d}".as_bytes(), link),
        ] {
            assert!(
                refused(name, kind).is_some(),
                "{} should be refused",
                escape(name)
            );
        }
        for (name, kind) in [
            (&b".github"[..], tree),
            (b".gitignore", blob),
            (b".gitattributes", blob),
            (b".gitmodules", blob),
            (b"foo.git", tree),
            (b"git", tree),
            (b".gitx", tree),
            (b"git~2", tree),
            (b"git~1x", blob),
            (b"...", blob),
            (b".gitmodulesx", link),
            (b"gitmod~5", link),
            (b"gi7eba~1x", link),
            (b".gitignore", link),
            (".gi\u{00e9}t".as_bytes(), tree),
            (b"a\\b", blob),
        ] {
            assert_eq!(refused(name, kind), None, "{} should pass", escape(name));
        }
    }
}
