//! File data as a map of pieces by file offset: each piece is a run of a base
//! object ([`Src::Base`]) or of a `Write` record's data in a journal segment
//! ([`Src::Journal`], read back with pread; never held in memory). Gaps are
//! holes: they read as zeros and are folded as holes.
//!
//! Owns the piece map's operations (punch, read plans, the data ranges
//! `SEEK_DATA` and `st_blocks` see) and the rebase after a commit. Knows
//! nothing of records or the journal's files.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::{Data, Dir, ForkState, PieceMap, TreeCache};
use crate::store::{Extent, Kind, ObjectId};

/// Where a run of file bytes lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// Bytes from `off` of a stored object (verified when read).
    Base { id: ObjectId, off: u64 },
    /// Bytes at file offset `off` of journal segment `seg`.
    Journal { seg: u64, off: u64 },
}

impl Src {
    fn advance(self, by: u64) -> Src {
        match self {
            Src::Base { id, off } => Src::Base { id, off: off + by },
            Src::Journal { seg, off } => Src::Journal { seg, off: off + by },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub len: u64,
    pub src: Src,
}

#[derive(Clone, Debug)]
pub struct FileData {
    pub size: u64,
    /// Non-overlapping pieces by start offset; gaps are holes.
    pub pieces: PieceMap,
    /// The file's chunk list as last committed (its base extents, or the
    /// extents the last commit folded it into): where the data is unchanged,
    /// its pieces are these extents' objects at the same offsets, so a fold
    /// reuses their chunks (`journal::rechunk`). `None` for a file made on
    /// the fork and not committed yet.
    pub committed: Option<Arc<Vec<Extent>>>,
    /// The data changed since `committed` (a write, a truncate that changed
    /// the size, a punched hole). When false the fold takes `committed` as
    /// it is, reading nothing.
    pub changed: bool,
}

impl FileData {
    /// An empty file.
    pub fn empty() -> FileData {
        FileData {
            size: 0,
            pieces: PieceMap::new(),
            committed: None,
            changed: true,
        }
    }

    /// A base file of `size` bytes stored as `ext`.
    pub fn from_extents(ext: &[Extent], size: u64) -> FileData {
        let mut pieces = PieceMap::new();
        let mut at = 0u64;
        for x in ext {
            if let Some(id) = x.id
                && x.len > 0
            {
                pieces.insert(
                    at,
                    Piece {
                        len: x.len,
                        src: Src::Base { id, off: 0 },
                    },
                );
            }
            at = at.saturating_add(x.len);
        }
        // A malformed entry (extents past the size) reads as its size.
        punch(&mut pieces, size, u64::MAX);
        FileData {
            size,
            pieces,
            committed: Some(Arc::new(ext.to_vec())),
            changed: false,
        }
    }
}

/// A segment of a read: `len` bytes from `src`, or zeros.
pub type ReadPlan = Vec<(u64, Option<Src>)>;

/// Remove the bytes `[start, end)` from a piece map (they become a hole).
pub fn punch(pieces: &mut PieceMap, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let hit: Vec<u64> = pieces
        .range(..end)
        .rev()
        .take_while(|(s, p)| **s + p.len > start)
        .map(|(s, _)| *s)
        .collect();
    for s in hit {
        let p = pieces.remove(&s).expect("listed");
        let pend = s + p.len;
        if s < start {
            pieces.insert(
                s,
                Piece {
                    len: start - s,
                    src: p.src,
                },
            );
        }
        if pend > end {
            pieces.insert(
                end,
                Piece {
                    len: pend - end,
                    src: p.src.advance(end - s),
                },
            );
        }
    }
}

/// The byte ranges `[start, end)` of a file's data (base extents and
/// journal writes; the gaps are holes), in order, from the piece holding
/// `from` on: the extent map `SEEK_DATA`/`SEEK_HOLE` and `st_blocks` read
/// (`ext4`). Adjacent pieces come as separate ranges.
pub fn data_ranges(f: &FileData, from: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
    let first = f
        .pieces
        .range(..=from)
        .next_back()
        .map_or(from, |(s, _)| *s);
    f.pieces
        .range(first..)
        .map(|(s, p)| (*s, s.saturating_add(p.len)))
}

/// The pieces (or holes) covering `[start, end)` of a piece map.
pub fn plan(pieces: &PieceMap, start: u64, end: u64) -> ReadPlan {
    let mut out = Vec::new();
    let mut pos = start;
    let first = pieces
        .range(..=start)
        .next_back()
        .filter(|(s, p)| **s + p.len > start)
        .map(|(s, _)| *s)
        .unwrap_or(start);
    for (&s, p) in pieces.range(first..end) {
        if s > pos {
            out.push((s - pos, None));
            pos = s;
        }
        let pend = (s + p.len).min(end);
        if pend > pos {
            out.push((pend - pos, Some(p.src.advance(pos - s))));
            pos = pend;
        }
    }
    if end > pos {
        out.push((end - pos, None));
    }
    out
}

/// The most bytes of a journal segment one read of [`journal_spans`] covers.
pub const SPAN_MAX: u64 = 1 << 20;
/// The most bytes between two journal pieces that one read still covers
/// (the frames of other records between them, read and dropped).
pub const SPAN_GAP: u64 = 4 << 10;

/// The reads of a journal segment that fetch the journal pieces of `plan`:
/// `(first, count, seg, off, len)`: entries `first..first + count` of
/// `plan`, all journal data of segment `seg` within `[off, off + len)`.
/// Pieces that follow one another in the segment, at most [`SPAN_GAP`]
/// apart and within [`SPAN_MAX`], share one read: a file grown by tiny
/// `O_APPEND` writes has a piece per write, each a few bytes after the last
/// one's frame, and one `pread` a piece made its first read a syscall per
/// write (generic/069).
pub fn journal_spans(plan: &ReadPlan) -> Vec<(usize, usize, u64, u64, u64)> {
    let mut out: Vec<(usize, usize, u64, u64, u64)> = Vec::new();
    for (i, (len, src)) in plan.iter().enumerate() {
        let Some(Src::Journal { seg, off }) = *src else {
            continue;
        };
        if let Some((first, count, s, start, span)) = out.last_mut() {
            let end = *start + *span;
            let joins = *first + *count == i
                && *s == seg
                && off >= end
                && off - end <= SPAN_GAP
                && off + len - *start <= SPAN_MAX;
            if joins {
                *count += 1;
                *span = off + len - *start;
                continue;
            }
        }
        out.push((i, 1, seg, off, *len));
    }
    out
}

/// The most pieces a read-ahead hint looks at ([`base_ahead`],
/// [`base_passed`]): a file of many small journal writes (a log grown by
/// tiny `O_APPEND` writes has a piece per write) is not walked whole for a
/// hint at every read, which made a sequential read of it quadratic.
pub const HINT_PIECES: usize = 1024;

/// The stored objects `[start, end)` of a piece map reads, in file order,
/// with the bytes of the file each covers (adjacent runs of one object
/// merged), from at most [`HINT_PIECES`] pieces and `max_runs` runs: what a
/// sequential reader reads next, for the read-ahead.
pub fn base_ahead(
    pieces: &PieceMap,
    start: u64,
    end: u64,
    max_runs: usize,
) -> Vec<(ObjectId, u64)> {
    let mut out: Vec<(ObjectId, u64)> = Vec::new();
    for (len, src) in plan_capped(pieces, start, end, HINT_PIECES) {
        if let Some(Src::Base { id, .. }) = src {
            let full = out.len() == max_runs;
            match out.last_mut() {
                Some((last, n)) if *last == id => *n += len,
                _ if full => break,
                _ => out.push((id, len)),
            }
        }
    }
    out
}

/// The stored objects whose bytes in `[from, offset)` all end before
/// `behind` (an object also read in `[behind, offset)` is left out), from
/// the [`HINT_PIECES`] pieces nearest `offset` at most: what a sequential
/// reader at `offset` has passed.
pub fn base_passed(pieces: &PieceMap, from: u64, behind: u64, offset: u64) -> Vec<ObjectId> {
    let (mut passed, mut recent): (Vec<ObjectId>, Vec<ObjectId>) = (Vec::new(), Vec::new());
    let near = pieces
        .range(..offset)
        .rev()
        .take_while(|(s, p)| s.saturating_add(p.len) > from)
        .take(HINT_PIECES);
    for (&s, p) in near {
        if let Src::Base { id, .. } = p.src {
            if s.saturating_add(p.len).min(offset) <= behind {
                if passed.last() != Some(&id) {
                    passed.push(id);
                }
            } else {
                recent.push(id);
            }
        }
    }
    passed.reverse();
    passed.retain(|id| !recent.contains(id));
    passed.dedup();
    passed
}

/// [`plan`] of at most `max_pieces` pieces: it may stop short of `end`.
fn plan_capped(pieces: &PieceMap, start: u64, end: u64, max_pieces: usize) -> ReadPlan {
    let first = pieces
        .range(..=start)
        .next_back()
        .filter(|(s, p)| **s + p.len > start)
        .map(|(s, _)| *s)
        .unwrap_or(start);
    let stop = pieces
        .range(first..end)
        .nth(max_pieces)
        .map_or(end, |(s, _)| *s);
    plan(pieces, start, stop)
}

impl FileData {
    /// After a commit that folded this file into `ext`, having read it as
    /// `read` (its pieces in the fold's copy): every run of a piece that
    /// still holds what the fold read there (the same source at the same
    /// offset) now points at the objects of `ext` at that offset, adjacent
    /// runs of one object merged. What changed since the fold's copy was
    /// taken keeps its source: data written meanwhile (segments `seg` and
    /// later), and committed data copied in meanwhile (`Share`), which may
    /// sit where the fold read other bytes. `ext` becomes the committed
    /// list, and the file is unchanged if its pieces are exactly `ext`'s.
    pub fn rebase_onto(&mut self, seg: u64, ext: &[Extent], read: &PieceMap) {
        let starts: Vec<u64> = ext
            .iter()
            .scan(0u64, |acc, x| {
                let s = *acc;
                *acc += x.len;
                Some(s)
            })
            .collect();
        let total: u64 = ext.iter().map(|x| x.len).sum();
        let mut out: BTreeMap<u64, Piece> = BTreeMap::new();
        for (&s, &p) in &self.pieces {
            if matches!(p.src, Src::Journal { seg: js, .. } if js >= seg) {
                push_merged(&mut out, s, p);
                continue;
            }
            let end = s + p.len;
            let mut pos = s;
            while pos < end {
                let here = p.src.advance(pos - s);
                let (seen, to) = match read
                    .range(..=pos)
                    .next_back()
                    .filter(|(rs, r)| **rs + r.len > pos)
                {
                    Some((&rs, r)) => (r.src.advance(pos - rs) == here, end.min(rs + r.len)),
                    None => {
                        let next = read.range(pos..).next().map_or(end, |(&rs, _)| rs);
                        (false, end.min(next))
                    }
                };
                if seen {
                    remap(&mut out, ext, &starts, pos, to, here);
                } else {
                    if matches!(here, Src::Journal { .. }) {
                        // Cannot happen: journal data older than the fold was read by it.
                        tracing::error!(pos, "file data the fold did not read");
                    }
                    let piece = Piece {
                        len: to - pos,
                        src: here,
                    };
                    push_merged(&mut out, pos, piece);
                }
                pos = to;
            }
        }
        self.pieces = out.into_iter().collect();
        self.changed =
            self.size != total || self.pieces != FileData::from_extents(ext, total).pieces;
        self.committed = Some(Arc::new(ext.to_vec()));
    }
}

/// Push `[pos, end)` of a file into `out` as the objects of `ext` (starting
/// at file offsets `starts`) hold it; `src` is where it was before.
fn remap(
    out: &mut BTreeMap<u64, Piece>,
    ext: &[Extent],
    starts: &[u64],
    pos: u64,
    end: u64,
    src: Src,
) {
    let mut i = starts.partition_point(|&x| x <= pos).saturating_sub(1);
    let mut at = pos;
    while at < end {
        let Some(x) = ext.get(i).filter(|x| x.id.is_some()) else {
            // Cannot happen: the fold saw data here.
            tracing::error!(pos = at, "file data the fold did not store");
            let rest = Piece {
                len: end - at,
                src: src.advance(at - pos),
            };
            push_merged(out, at, rest);
            return;
        };
        let to = end.min(starts[i] + x.len);
        let src = Src::Base {
            id: x.id.expect("data"),
            off: at - starts[i],
        };
        push_merged(out, at, Piece { len: to - at, src });
        at = to;
        i += 1;
    }
}

/// Append piece `p` at `s` to `out` (built in offset order), merged into the
/// last piece when it continues it.
fn push_merged(out: &mut BTreeMap<u64, Piece>, s: u64, p: Piece) {
    if let Some(mut last) = out.last_entry()
        && *last.key() + last.get().len == s
        && last.get().src.advance(last.get().len) == p.src
    {
        last.get_mut().len += p.len;
        return;
    }
    out.insert(s, p);
}

impl ForkState {
    /// After a commit: data that came from segments before `seg` is now in the
    /// committed checkpoint. `folded` holds each folded file's extents by
    /// inode and `read` its pieces as the fold read them (see
    /// [`FileData::rebase_onto`]); `link_ids` the link ids the
    /// fold gave hardlinked inodes; `trees` the tree of each loaded
    /// directory the fold visited (the directory caches, see `TreeCache`;
    /// and what an unchanged one is parked against: `settle`).
    ///
    /// `full_at`: the fold loaded the whole tree, because a hardlinked inode
    /// had changed (`fold::needs_full_load`), as of that stamp. Its `trees`
    /// then hold every directory the state numbers: unloaded and parked
    /// ones take theirs, which name those inodes as they are now, so the
    /// hardlinked inodes unchanged since are clean again and the next
    /// commit need not load the whole tree.
    pub fn rebase(
        &mut self,
        seg: u64,
        folded: &HashMap<u64, Vec<Extent>>,
        read: &HashMap<u64, PieceMap>,
        link_ids: &HashMap<u64, u64>,
        trees: &HashMap<u64, TreeCache>,
        full_at: Option<u64>,
    ) {
        for (ino, t) in trees {
            let Some(n) = self.inodes.get_mut(ino) else {
                continue;
            };
            match &mut n.data {
                Data::Dir(Dir::Loaded(_)) => n.tree = Some(Box::new(*t)),
                Data::Dir(Dir::Unloaded(id)) => *id = t.id,
                Data::Dir(Dir::Parked(p)) => {
                    p.id = t.id;
                    self.base_trees.insert(*ino, t.id);
                }
                _ => {}
            }
        }
        if let Some(at) = full_at {
            for n in self.inodes.values_mut() {
                if n.kind != Kind::Dir && n.link_id != 0 && n.stamp <= at {
                    n.dirty = false;
                }
            }
        }
        for (ino, n) in self.inodes.iter_mut() {
            if let Some(&l) = link_ids.get(ino) {
                n.link_id = l;
            }
            let Data::File(f) = &mut n.data else {
                continue;
            };
            match folded.get(ino) {
                Some(ext) => f.rebase_onto(seg, ext, read.get(ino).unwrap_or(&PieceMap::new())),
                None if f.changed
                    && f.pieces
                        .values()
                        .any(|p| matches!(p.src, Src::Journal { seg: s, .. } if s < seg)) =>
                {
                    // Cannot happen: every file with journal data is folded.
                    tracing::error!(ino, "journal data of a file missing from the fold");
                }
                None => {}
            }
        }
        for (ino, t) in trees {
            self.settle(*ino, t);
        }
    }
}
