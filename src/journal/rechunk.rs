//! Re-chunk a changed file, reading and cutting only what changed.
//!
//! A fork file's committed chunk list (its base extents, or the extents of
//! its last commit) is kept beside its pieces ([`FileData::committed`]).
//! The fold walks the file's data runs (holes stay holes) at the cut points
//! the whole-file chunking ([`store::chunk::cut_chunks`] on each run) would
//! make, computing them one by one. At each cut point `s` it first asks the
//! committed list: when an old chunk `[s, c)` starts there, the decision
//! FastCDC made for it depended on nothing that changed, and the file still
//! holds the same bytes there, the old chunk is the new one too (no read, no
//! hash, no store lookup). Otherwise the window `[s, s + min(MAX_CHUNK, run
//! end - s))` is read and cut ([`next_cut`]) and the chunk stored.
//!
//! So chunks wholly before the first changed byte are reused as they are;
//! cutting starts at the chunk whose decision saw a changed byte (the one
//! holding it, or the one before when its cut read the changed byte) and
//! goes on until a cut lands on an old chunk boundary behind the change
//! (re-synchronisation), from where old chunks are reused again. A POSIX
//! file never shifts its bytes (writes overwrite, truncates and appends
//! change the end), so old chunks keep their offsets.
//!
//! **Why the result equals cutting the whole file from scratch.** FastCDC
//! (as `StreamCDC` runs it, see [`next_cut`]) decides the chunk starting at
//! `s` from the window length `R = min(MAX_CHUNK, run end - s)` and the bytes
//! `[s, c]` (`c` the cut; `[s, c)` when `c = s + R`); the gear hash starts
//! at zero at every cut. By induction over the cut points of the new file:
//! at a cut point `s`, an old chunk `[s, c)` taken from a committed list that
//! is itself the whole-file chunking of the old content was the old
//! decision at `s`; if the new `R` equals the old one and every byte the
//! decision read is the same byte in both files (the file's piece at each
//! position is the old chunk's object at the same offset), the new decision
//! is the same cut `c`, and `c` is the next cut point. Otherwise the cut is
//! computed from the new bytes. Either way each step is the from-scratch
//! decision, so the list (ids and all) is the from-scratch list.
//!
//! The induction needs the committed list to be a whole-file chunking.
//! The fold's own output is one by construction; base extents written by
//! snapshot and import are too (they cut through the same `cut_chunks`, one
//! data segment at a time, and store holes as holes). A list that cannot
//! be one (a chunk longer than `MAX_CHUNK`, one shorter than `MIN_CHUNK`
//! that does not end its run, an empty extent) is not used: the file is cut
//! whole, as before.

use super::Result;
use super::state::{FileData, PieceMap, Src, plan};
use crate::store::chunk::{MAX_CHUNK, MIN_CHUNK, next_cut};
use crate::store::{Extent, ObjectId};

/// Where the chunker reads the file's bytes and stores new chunks.
pub trait ChunkIo {
    /// Fill `buf` with the file's bytes from offset `pos` (all inside one
    /// data run).
    fn read(&mut self, pos: u64, buf: &mut [u8]) -> Result<()>;
    /// Store a new chunk; its id.
    fn put(&mut self, data: &[u8]) -> Result<ObjectId>;
}

/// The extents of file `f`: its data runs cut as [`cut_chunks`] would cut
/// them, reusing what it can of `f.committed`; its holes as holes.
///
/// [`cut_chunks`]: crate::store::chunk::cut_chunks
pub fn chunk_file(f: &FileData, io: &mut impl ChunkIo) -> Result<Vec<Extent>> {
    let old = f.committed.as_deref().and_then(|e| Old::new(e));
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut run: Option<u64> = None;
    for (len, src) in plan(&f.pieces, 0, f.size) {
        match (src, run) {
            (Some(_), None) => run = Some(pos),
            (Some(_), Some(_)) => {}
            (None, start) => {
                if let Some(start) = start {
                    chunk_run(&f.pieces, start, pos, old.as_ref(), io, &mut out)?;
                    run = None;
                }
                out.push(Extent { len, id: None });
            }
        }
        pos += len;
    }
    if let Some(start) = run {
        chunk_run(&f.pieces, start, pos, old.as_ref(), io, &mut out)?;
    }
    Ok(out)
}

/// Cut the data run `[start, end)` into `out`.
fn chunk_run(
    pieces: &PieceMap,
    start: u64,
    end: u64,
    old: Option<&Old<'_>>,
    io: &mut impl ChunkIo,
    out: &mut Vec<Extent>,
) -> Result<()> {
    let mut window = Window {
        at: start,
        buf: Vec::new(),
    };
    let mut s = start;
    while s < end {
        let r = (end - s).min(u64::from(MAX_CHUNK));
        if let Some(x) = old.and_then(|o| o.reusable(pieces, s, r)) {
            s += x.len;
            out.push(x);
            continue;
        }
        let bytes = window.fill(s, r as usize, io)?;
        let n = next_cut(bytes);
        let id = io.put(&bytes[..n])?;
        out.push(Extent {
            len: n as u64,
            id: Some(id),
        });
        s += n as u64;
    }
    Ok(())
}

/// The bytes of the file from `at` that were read and not yet cut.
struct Window {
    at: u64,
    buf: Vec<u8>,
}

impl Window {
    /// The `len` bytes from `s`, reading only those not held already.
    fn fill(&mut self, s: u64, len: usize, io: &mut impl ChunkIo) -> Result<&[u8]> {
        let held = self.at + self.buf.len() as u64;
        if (self.at..=held).contains(&s) {
            self.buf.drain(..(s - self.at) as usize);
        } else {
            self.buf.clear();
        }
        self.at = s;
        let have = self.buf.len().min(len);
        self.buf.truncate(have);
        if have < len {
            self.buf.resize(len, 0);
            io.read(s + have as u64, &mut self.buf[have..])?;
        }
        Ok(&self.buf[..len])
    }
}

/// A committed chunk list, indexed for [`Old::reusable`].
struct Old<'a> {
    ext: &'a [Extent],
    /// The file offset each extent starts at (strictly increasing).
    starts: Vec<u64>,
    /// For each data extent, the end of its data run.
    run_end: Vec<u64>,
}

impl<'a> Old<'a> {
    /// `None` when `ext` cannot be a whole-file chunking (module docs).
    fn new(ext: &'a [Extent]) -> Option<Old<'a>> {
        let max = u64::from(MAX_CHUNK);
        let min = u64::from(MIN_CHUNK);
        let mut starts = Vec::with_capacity(ext.len());
        let mut at = 0u64;
        for x in ext {
            if x.len == 0 {
                return None;
            }
            starts.push(at);
            at = at.checked_add(x.len)?;
        }
        let mut run_end = vec![0; ext.len()];
        let mut i = 0;
        while i < ext.len() {
            if ext[i].id.is_none() {
                i += 1;
                continue;
            }
            let j = (i..ext.len())
                .find(|&k| ext[k].id.is_none())
                .unwrap_or(ext.len());
            let end = starts[j - 1] + ext[j - 1].len;
            for k in i..j {
                let last = k + 1 == j;
                if ext[k].len > max || (!last && ext[k].len < min) {
                    return None;
                }
                run_end[k] = end;
            }
            i = j;
        }
        Some(Old {
            ext,
            starts,
            run_end,
        })
    }

    /// The old chunk starting at `s` if the new file's cut at `s`, with a
    /// window of `r` bytes, is the same chunk (module docs).
    fn reusable(&self, pieces: &PieceMap, s: u64, r: u64) -> Option<Extent> {
        let i = self.starts.binary_search(&s).ok()?;
        let x = &self.ext[i];
        x.id?;
        let r_old = (self.run_end[i] - s).min(u64::from(MAX_CHUNK));
        if r_old != r || x.len > r {
            return None;
        }
        let c = s + x.len;
        // A cut inside the window read the byte at `c` too.
        let seen = if x.len < r { c + 1 } else { c };
        self.same(pieces, s, seen).then(|| x.clone())
    }

    /// Whether every byte of `[from, to)` is, in the file's pieces, the byte
    /// of the old list at the same offset (same object, same offset in it).
    fn same(&self, pieces: &PieceMap, from: u64, to: u64) -> bool {
        let mut p = from;
        while p < to {
            let Some((&ps, piece)) = pieces.range(..=p).next_back() else {
                return false;
            };
            let Src::Base { id, off } = piece.src else {
                return false;
            };
            let pend = ps + piece.len;
            let j = self.starts.partition_point(|&x| x <= p).saturating_sub(1);
            let xend = self.starts[j] + self.ext[j].len;
            if pend <= p || xend <= p || self.ext[j].id != Some(id) {
                return false;
            }
            if off + (p - ps) != p - self.starts[j] {
                return false;
            }
            p = pend.min(xend).min(to);
        }
        true
    }
}
