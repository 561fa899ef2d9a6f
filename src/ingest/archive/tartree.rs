//! Tar entries → storefs trees, applying the archive import rules of
//! docs/format.md: names are normalized and checked, nothing is resolved
//! outside the archive, symlinks are data, file contents are streamed into
//! chunk objects and never held whole.
//!
//! Memory: the builder keeps the directories on the path of the entry being
//! read, with their entries, and directories it cannot close yet (those with
//! a hardlink below them: link ids and counts are known at the end). Once
//! more than [`OPEN_ENTRIES`] entries are held, every other directory is
//! *closed*: its tree is stored and its entries leave memory, leaving one
//! entry for it in its parent. An archive that comes back to a closed
//! directory (a later entry below it, a hardlink into it) opens it again from
//! its stored tree, so the result is the same as building everything at the
//! end, whatever the order of the archive.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::{self, Read};
use std::sync::mpsc::SyncSender;

use super::super::{Error, Result, escape};
use super::ImportOptions;
use super::reader::{Segment, TarKind};
use crate::store::chunk::{ChunkJob, Counters, Hashers, Pending};
use crate::store::progress::SharedProgress;
use crate::store::{Content, Entry, Extent, Kind, ObjectId, Store, Tree};

/// More entries than this is an error (a bound on the work and on what the
/// builder holds where it cannot close directories: about 600 bytes an
/// entry held, measured on 303k entries in 2026-12).
pub const MAX_ENTRIES: u64 = 10_000_000;
/// Entries held in memory before the directories the archive has left are
/// stored and dropped (the module docs; [`ImportOptions::open_entries`]).
pub const OPEN_ENTRIES: usize = 16_384;
/// Longest path accepted for an entry or a link target (PATH_MAX).
pub const MAX_PATH: usize = 4096;
/// Longest name of one path component (NAME_MAX).
pub const MAX_NAME: usize = 255;
/// Files whose chunks may still be hashing before the parser waits for the oldest.
const MAX_IN_FLIGHT: usize = 4096;
/// The PAX `comment` prefix export uses for a directory's `st_size` (readers ignore comments).
pub const SIZE_COMMENT: &str = "storefs.size=";

struct Node {
    entry: Entry,
    children: BTreeMap<Vec<u8>, usize>,
    /// Hardlink group (index into `groups`), when hardlinked.
    group: Option<usize>,
    /// Content still being stored: data and holes, in file order, and the
    /// data's chunks in flight (one stream for all of the file's segments).
    pending: Option<(Vec<Piece>, Pending)>,
    /// The directory holding it (the root: 0). Always open.
    parent: usize,
    /// A directory whose tree is stored (`entry.content`) and whose entries
    /// are not in memory.
    closed: bool,
    /// A directory with a hardlink below it, or opened again twice: never
    /// closed before the end.
    pinned: bool,
    /// Times it was opened again after being closed.
    reopened: u8,
}

/// A part of a file's content while it is stored.
enum Piece {
    /// A hole: never materialized, chunked or hashed.
    Hole(u64),
    /// A data segment: this many of the file's chunks in flight.
    Data(usize),
}

impl Node {
    fn dir(name: Vec<u8>) -> Node {
        Node {
            entry: Entry {
                name,
                kind: Kind::Dir,
                perm: 0o755,
                uid: 0,
                gid: 0,
                mtime_ns: 0,
                ctime_ns: 0,
                size: 0,
                nlink: 2,
                link_id: 0,
                rdev: 0,
                xattrs: Vec::new(),
                flags: 0,
                content: Content::None,
            },
            children: BTreeMap::new(),
            group: None,
            pending: None,
            parent: 0,
            closed: false,
            pinned: false,
            reopened: 0,
        }
    }

    fn is_open_dir(&self) -> bool {
        self.entry.kind == Kind::Dir && !self.closed
    }
}

pub(super) struct TreeBuilder<'a> {
    /// The entries held; a slot of `free` is unused.
    nodes: Vec<Node>,
    free: Vec<usize>,
    /// Entries made (distinct paths, the root included).
    made: u64,
    /// Close directories once more than this many entries are held (0:
    /// after every entry, for tests).
    open_entries: usize,
    trim_at: usize,
    /// The most entries held at once.
    peak_held: usize,
    sync_objects: usize,
    store: &'a Store,
    counters: &'a Counters,
    /// Primary node of each hardlink group.
    groups: Vec<usize>,
    /// Files whose content is still being stored, oldest first. A slot
    /// freed by closing may have been given to another file since: settling
    /// it then only waits for that file earlier.
    in_flight: VecDeque<usize>,
    entries: u64,
    bytes: u64,
    stripped_absolute: u64,
    pub warnings: Vec<String>,
    /// Small files go to the hashers in batches: flushed before any wait.
    hashers: Hashers<'a>,
    progress: SharedProgress,
}

fn hostile(entry: &[u8], detail: impl Into<String>) -> Error {
    Error::HostileEntry {
        entry: escape(entry),
        detail: detail.into(),
    }
}

/// Normalize an entry's name: leading `/` and `./`, empty and `.` components
/// dropped; `..` refused; lengths bounded. `Ok(None)`-like empty vec = the root.
fn components(raw: &[u8]) -> Result<(Vec<Vec<u8>>, bool)> {
    if raw.len() > MAX_PATH {
        return Err(hostile(
            &raw[..64],
            format!("name longer than {MAX_PATH} bytes"),
        ));
    }
    if raw.contains(&0) {
        return Err(hostile(raw, "NUL byte in name"));
    }
    let absolute = raw.first() == Some(&b'/');
    let mut out = Vec::new();
    for c in raw.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                return Err(hostile(
                    raw,
                    "'..' in the name could write outside the tree",
                ));
            }
            c if c.len() > MAX_NAME => {
                return Err(hostile(
                    raw,
                    format!("a component is longer than {MAX_NAME} bytes"),
                ));
            }
            c => out.push(c.to_vec()),
        }
    }
    Ok((out, absolute))
}

impl<'a> TreeBuilder<'a> {
    pub fn new(
        store: &'a Store,
        counters: &'a Counters,
        tx: &'a SyncSender<ChunkJob>,
        progress: SharedProgress,
        opts: &ImportOptions,
    ) -> Self {
        TreeBuilder {
            nodes: vec![Node::dir(Vec::new())],
            free: Vec::new(),
            made: 1,
            open_entries: opts.open_entries,
            trim_at: opts.open_entries,
            peak_held: 1,
            sync_objects: opts.sync_objects,
            store,
            counters,
            groups: Vec::new(),
            in_flight: VecDeque::new(),
            entries: 0,
            bytes: 0,
            stripped_absolute: 0,
            warnings: Vec::new(),
            hashers: Hashers::batched(tx),
            progress,
        }
    }

    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The node for `comps`' parent directory, creating missing directories.
    fn parent_of(&mut self, raw: &[u8], comps: &[Vec<u8>]) -> Result<usize> {
        let mut cur = 0;
        for c in comps {
            self.open_dir(cur)?;
            cur = match self.nodes[cur].children.get(c) {
                Some(&i) => match self.nodes[i].entry.kind {
                    Kind::Dir => i,
                    Kind::Symlink => {
                        return Err(hostile(
                            raw,
                            format!("its path goes through the symlink '{}'", escape(c)),
                        ));
                    }
                    _ => {
                        return Err(hostile(
                            raw,
                            format!("its parent '{}' is not a directory", escape(c)),
                        ));
                    }
                },
                None => {
                    // Like tar extraction: a missing parent directory is made.
                    let mut dir = Node::dir(c.clone());
                    dir.parent = cur;
                    let i = self.alloc(dir);
                    self.made += 1;
                    self.nodes[cur].children.insert(c.clone(), i);
                    i
                }
            };
        }
        self.open_dir(cur)?;
        Ok(cur)
    }

    /// Put `node` in a free slot.
    fn alloc(&mut self, node: Node) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    /// Entries held in memory.
    fn held(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// Bring a closed directory's entries back from its stored tree (its
    /// subdirectories come back closed). One opened a second time stays
    /// open: an archive that takes turns between directories would otherwise
    /// store and read them again at every turn.
    fn open_dir(&mut self, d: usize) -> Result<()> {
        if !self.nodes[d].closed {
            return Ok(());
        }
        self.nodes[d].reopened += 1;
        if self.nodes[d].reopened >= 2 {
            self.pin(d);
        }
        let Content::Tree(id) = self.nodes[d].entry.content else {
            // Closing gives a directory its tree; a tree read back is ours.
            return Err(Error::Archive(format!(
                "import: directory '{}' was closed without its tree (a bug)",
                escape(&self.nodes[d].entry.name)
            )));
        };
        let tree = self
            .store
            .get_tree(&id, "a directory of the archive being imported")?;
        for entry in tree.entries {
            let name = entry.name.clone();
            let mut node = Node::dir(Vec::new());
            node.closed = entry.kind == Kind::Dir;
            node.entry = entry;
            node.parent = d;
            let i = self.alloc(node);
            self.nodes[d].children.insert(name, i);
        }
        self.nodes[d].closed = false;
        Ok(())
    }

    /// Keep `d` and the directories above it open until the end.
    fn pin(&mut self, mut d: usize) {
        while !self.nodes[d].pinned {
            self.nodes[d].pinned = true;
            if d == 0 {
                break;
            }
            d = self.nodes[d].parent;
        }
    }

    /// Close every directory that is neither on the path of `current` (an
    /// entry just added) nor pinned, and publish the objects written once
    /// many wait ([`Store::sync_objects_if_many`]).
    fn trim(&mut self, current: usize) -> Result<()> {
        let mut path = HashSet::new();
        let mut d = current;
        while path.insert(d) && d != 0 {
            d = self.nodes[d].parent;
        }
        let mut stack = vec![0];
        let mut close = Vec::new();
        while let Some(d) = stack.pop() {
            for &c in self.nodes[d].children.values() {
                let n = &self.nodes[c];
                if !n.is_open_dir() {
                    continue;
                }
                if path.contains(&c) || n.pinned {
                    stack.push(c);
                } else {
                    close.push(c);
                }
            }
        }
        for c in close {
            self.close_below(c)?;
        }
        self.store.sync_objects_if_many(self.sync_objects)?;
        self.trim_at = match self.open_entries {
            0 => 0,
            n => n.max(2 * self.held()),
        };
        Ok(())
    }

    /// Close `d` and every open directory below it, deepest first.
    fn close_below(&mut self, d: usize) -> Result<()> {
        let mut stack = vec![(d, false)];
        while let Some((d, children_closed)) = stack.pop() {
            if children_closed {
                self.close(d)?;
                continue;
            }
            stack.push((d, true));
            for &c in self.nodes[d].children.values() {
                if self.nodes[c].is_open_dir() {
                    stack.push((c, false));
                }
            }
        }
        Ok(())
    }

    /// Store open directory `d`'s tree (its subdirectories closed) and drop
    /// its entries.
    fn close(&mut self, d: usize) -> Result<()> {
        let children = std::mem::take(&mut self.nodes[d].children);
        let mut entries = Vec::with_capacity(children.len());
        for &c in children.values() {
            self.settle(c)?;
            let n = std::mem::replace(&mut self.nodes[c], Node::dir(Vec::new()));
            debug_assert!(!n.is_open_dir(), "subdirectories close first");
            entries.push(n.entry);
            self.free.push(c);
        }
        let subdirs = entries.iter().filter(|e| e.kind == Kind::Dir).count();
        let (id, written) = self.store.put_tree(&Tree { entries })?;
        self.counters.add(written);
        let n = &mut self.nodes[d];
        n.entry.content = Content::Tree(id);
        n.entry.nlink = 2 + subdirs as u32;
        n.closed = true;
        Ok(())
    }

    /// Add one tar entry. `data` is the entry's stored data (read here for
    /// regular files; others' data is left for the caller to skip). A sparse
    /// file's data holds its `sparse` segments one after the other; the rest
    /// of its `size` bytes are holes.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        raw_path: &[u8],
        hardlink: bool,
        size: u64,
        sparse: Option<&[Segment]>,
        link_name: Option<Vec<u8>>,
        meta: Entry,
        data_in: &mut dyn Read,
    ) -> Result<()> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(hostile(
                raw_path,
                format!("more than {MAX_ENTRIES} entries"),
            ));
        }
        let (comps, absolute) = components(raw_path)?;
        if absolute {
            self.stripped_absolute += 1;
        }
        let Some((name, parents)) = comps.split_last() else {
            // "./" or "/": the archive root itself.
            return match meta.kind {
                Kind::Dir => {
                    update_meta(&mut self.nodes[0].entry, meta);
                    Ok(())
                }
                _ => Err(hostile(raw_path, "the archive root is not a directory")),
            };
        };
        let parent = self.parent_of(raw_path, parents)?;
        let existing = self.nodes[parent].children.get(name).copied();

        let mut node = Node::dir(name.clone());
        node.parent = parent;
        if hardlink {
            let target = link_name.ok_or_else(|| hostile(raw_path, "hardlink without a target"))?;
            let t = self.resolve_link(raw_path, &target)?;
            self.pin(self.nodes[t].parent);
            self.pin(parent);
            if Some(t) == existing {
                return Err(hostile(raw_path, "hardlink to itself"));
            }
            let g = match self.nodes[t].group {
                Some(g) => g,
                None => {
                    self.groups.push(t);
                    self.nodes[t].group = Some(self.groups.len() - 1);
                    self.groups.len() - 1
                }
            };
            node.entry = self.nodes[t].entry.clone();
            node.entry.name = name.clone();
            node.group = Some(g);
        } else {
            node.entry = Entry {
                name: name.clone(),
                ..meta
            };
            match node.entry.kind {
                Kind::File => {
                    let whole = [Segment {
                        offset: 0,
                        len: size,
                    }];
                    let segments = sparse.unwrap_or(&whole);
                    let mut pieces = Vec::new();
                    let mut data = Pending::new();
                    let mut pos = 0;
                    for seg in segments {
                        if seg.offset > pos {
                            pieces.push(Piece::Hole(seg.offset - pos));
                        }
                        let before = data.chunks();
                        let got = data
                            .send(
                                (&mut *data_in).take(seg.len),
                                seg.len,
                                &self.hashers,
                                &*self.progress,
                            )
                            .map_err(|source| Error::Io {
                                path: escape(raw_path).into(),
                                source,
                            })?;
                        if got != seg.len {
                            return Err(Error::Truncated(format!(
                                "entry '{}' declares {} bytes of data but the archive ends after {}",
                                escape(raw_path),
                                pos + seg.len,
                                pos + got
                            )));
                        }
                        if seg.len > 0 {
                            pieces.push(Piece::Data(data.chunks() - before));
                        }
                        pos = seg.offset + seg.len;
                    }
                    if size > pos {
                        pieces.push(Piece::Hole(size - pos));
                    }
                    node.entry.size = size;
                    node.entry.content = Content::Extents(Vec::new());
                    node.pending = Some((pieces, data));
                    self.bytes += size;
                }
                Kind::Symlink => {
                    // Linux symlinks are lrwxrwxrwx whatever the header says
                    // (snapshot records 0777 too).
                    node.entry.perm = 0o777;
                    let t =
                        link_name.ok_or_else(|| hostile(raw_path, "symlink without a target"))?;
                    if t.len() > MAX_PATH {
                        return Err(hostile(raw_path, "symlink target longer than 4096 bytes"));
                    }
                    node.entry.size = t.len() as u64;
                    node.entry.content = Content::Target(t);
                }
                _ => {}
            }
        }

        let added = match existing {
            None => {
                let pending = node.pending.is_some();
                let i = self.alloc(node);
                self.made += 1;
                if pending {
                    self.track(i)?;
                }
                self.nodes[parent].children.insert(name.clone(), i);
                i
            }
            Some(i) => {
                if let Some(g) = self.nodes[i].group {
                    // Extraction unlinks the name and creates a new file (or
                    // link): the other names keep the earlier content.
                    self.leave_group(i, g);
                }
                if self.nodes[i].entry.kind == Kind::Dir && node.entry.kind == Kind::Dir {
                    // A directory again: its metadata is updated, its contents kept.
                    let e = node.entry;
                    let n = &mut self.nodes[i].entry;
                    (
                        n.perm, n.uid, n.gid, n.mtime_ns, n.ctime_ns, n.size, n.xattrs,
                    ) = (
                        e.perm, e.uid, e.gid, e.mtime_ns, e.ctime_ns, e.size, e.xattrs,
                    );
                    return self.trim_after(i);
                }
                self.open_dir(i)?;
                let old = &self.nodes[i];
                if old.entry.kind == Kind::Dir && !old.children.is_empty() {
                    return Err(hostile(
                        raw_path,
                        "a non-directory replaces a directory that has entries",
                    ));
                }
                self.warnings.push(format!(
                    "archive entry '{}' appears twice; the later one is kept",
                    escape(raw_path)
                ));
                if node.pending.is_some() {
                    self.track(i)?;
                }
                self.nodes[i] = node;
                i
            }
        };
        self.trim_after(added)
    }

    /// [`TreeBuilder::trim`] if more entries are held than allowed.
    fn trim_after(&mut self, current: usize) -> Result<()> {
        self.peak_held = self.peak_held.max(self.held());
        if self.held() > self.trim_at {
            self.trim(current)?;
        }
        Ok(())
    }

    /// Take node `i` out of hardlink group `g` (its name is about to be
    /// replaced). When it was the group's first entry, the next name takes
    /// over its content (still pending or stored).
    fn leave_group(&mut self, i: usize, g: usize) {
        self.nodes[i].group = None;
        if self.groups[g] != i {
            return;
        }
        let Some(j) = (0..self.nodes.len()).find(|&j| j != i && self.nodes[j].group == Some(g))
        else {
            return;
        };
        self.groups[g] = j;
        let mut e = self.nodes[i].entry.clone();
        e.name = std::mem::take(&mut self.nodes[j].entry.name);
        self.nodes[j].entry = e;
        if let Some(p) = self.nodes[i].pending.take() {
            self.nodes[j].pending = Some(p);
            self.in_flight.push_back(j);
        }
    }

    /// The node a hardlink names: resolved inside the archive, already seen,
    /// not a directory.
    fn resolve_link(&mut self, raw: &[u8], target: &[u8]) -> Result<usize> {
        let (comps, _) = components(target)?;
        let mut cur = 0;
        for c in &comps {
            self.open_dir(cur)?;
            match self.nodes[cur].children.get(c) {
                Some(&i) if self.nodes[cur].entry.kind == Kind::Dir => cur = i,
                _ => {
                    return Err(hostile(
                        raw,
                        format!(
                            "hardlink to '{}', which is not earlier in the archive",
                            escape(target)
                        ),
                    ));
                }
            }
        }
        if cur == 0 || self.nodes[cur].entry.kind == Kind::Dir {
            return Err(hostile(
                raw,
                format!("hardlink to the directory '{}'", escape(target)),
            ));
        }
        Ok(cur)
    }

    /// Remember a file whose chunks are in flight; wait for the oldest when too many are.
    fn track(&mut self, idx: usize) -> Result<()> {
        self.in_flight.push_back(idx);
        while self.in_flight.len() > MAX_IN_FLIGHT {
            let i = self.in_flight.pop_front().expect("non-empty");
            self.settle(i)?;
        }
        Ok(())
    }

    fn settle(&mut self, idx: usize) -> Result<()> {
        if let Some((pieces, data)) = self.nodes.get_mut(idx).and_then(|n| n.pending.take()) {
            // Its chunks may still sit in the batch: send them before waiting.
            self.hashers
                .flush()
                .map_err(|e| Error::Archive(format!("storing data: {e}")))?;
            let mut chunks = data
                .wait()
                .map_err(|e| Error::Archive(format!("storing data: {e}")))?
                .into_iter();
            let mut extents = Vec::new();
            for piece in pieces {
                match piece {
                    Piece::Hole(len) => extents.push(Extent { len, id: None }),
                    Piece::Data(n) => extents.extend(chunks.by_ref().take(n)),
                }
            }
            self.nodes[idx].entry.content = Content::Extents(extents);
        }
        Ok(())
    }

    /// Wait for all content, resolve hardlinks, store one tree per directory.
    /// The root is the single top-level directory when there is exactly one.
    pub fn finish(mut self) -> Result<Built> {
        while let Some(i) = self.in_flight.pop_front() {
            self.settle(i)?;
        }
        if self.stripped_absolute > 0 {
            self.warnings.push(format!(
                "{} archive entries had absolute names; the leading '/' was removed",
                self.stripped_absolute
            ));
        }
        let tops: Vec<usize> = self.nodes[0].children.values().copied().collect();
        let top = match tops.as_slice() {
            [only] if self.nodes[*only].entry.kind == Kind::Dir => *only,
            _ => 0,
        };
        self.assign_links(top);
        // A single top directory is on the path of every entry but `./`
        // (which closes nothing), so it was never closed.
        debug_assert!(!self.nodes[top].closed);
        let store_json = self.nodes[top]
            .children
            .get(b"STORE.json".as_slice())
            .map(|&i| self.nodes[i].entry.clone())
            .filter(|e| e.kind == Kind::File && e.size <= 1 << 20);
        self.close_below(top)?;
        let root_entry = self.nodes[top].entry.clone();
        let (root, written) = self.store.put_root(root_entry.clone())?;
        self.counters.add(written);
        Ok(Built {
            root,
            top_name: (top != 0).then(|| root_entry.name.clone()),
            entries: self.made - u64::from(top != 0),
            peak_held: self.peak_held,
            bytes: self.bytes,
            store_json,
            pax_origin: None,
            warnings: self.warnings,
        })
    }

    /// Hardlink ids 1, 2, … in sorted path order from `top` (as snapshot
    /// assigns them), link counts = names inside the tree, content copied
    /// from each group's first entry.
    fn assign_links(&mut self, top: usize) {
        let mut counts = vec![0u32; self.groups.len()];
        let mut ids = vec![0u64; self.groups.len()];
        let mut next = 1;
        let mut order = Vec::new();
        let mut stack = vec![top];
        while let Some(i) = stack.pop() {
            order.push(i);
            stack.extend(self.nodes[i].children.values().rev());
        }
        for &i in &order {
            if let Some(g) = self.nodes[i].group {
                counts[g] += 1;
            }
        }
        for &i in &order {
            if let Some(g) = self.nodes[i].group
                && counts[g] > 1
                && ids[g] == 0
            {
                ids[g] = next;
                next += 1;
            }
        }
        for &i in &order {
            if let Some(g) = self.nodes[i].group {
                let primary = self.groups[g];
                if primary != i {
                    let mut e = self.nodes[primary].entry.clone();
                    e.name = std::mem::take(&mut self.nodes[i].entry.name);
                    self.nodes[i].entry = e;
                }
            }
        }
        for &i in &order {
            if let Some(g) = self.nodes[i].group {
                let e = &mut self.nodes[i].entry;
                e.link_id = ids[g];
                e.nlink = counts[g];
            }
        }
    }
}

/// Give a directory `src`'s metadata, keeping its name, link count and contents.
fn update_meta(dst: &mut Entry, src: Entry) {
    *dst = Entry {
        name: std::mem::take(&mut dst.name),
        nlink: dst.nlink,
        content: std::mem::replace(&mut dst.content, Content::None),
        ..src
    };
}

/// A finished import's trees.
pub(super) struct Built {
    pub root: ObjectId,
    /// The single top-level directory's name, when the tree is that directory.
    pub top_name: Option<Vec<u8>>,
    pub entries: u64,
    pub bytes: u64,
    /// The top directory's `STORE.json`, if small enough to read for its `root`.
    pub store_json: Option<Entry>,
    /// A `STOREFS.origin` global PAX record (set by the caller).
    pub pax_origin: Option<Vec<u8>>,
    pub warnings: Vec<String>,
    /// The most entries held at once.
    pub peak_held: usize,
}

/// An entry's type as a storefs kind; `None` for types that are skipped.
pub(super) fn kind_of(t: TarKind) -> Option<Kind> {
    Some(match t {
        TarKind::File => Kind::File,
        TarKind::Dir => Kind::Dir,
        TarKind::Symlink => Kind::Symlink,
        TarKind::HardLink => Kind::File, // replaced by the target's kind
        TarKind::CharDev => Kind::CharDev,
        TarKind::BlockDev => Kind::BlockDev,
        TarKind::Fifo => Kind::Fifo,
        TarKind::Other => return None,
    })
}

/// Read and discard what is left of a stream (bounded memory).
pub(super) fn skip(r: &mut dyn Read) -> io::Result<u64> {
    io::copy(r, &mut io::sink())
}
