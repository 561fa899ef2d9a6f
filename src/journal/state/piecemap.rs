//! A file's pieces by start offset ([`PieceMap`]): the one map type of
//! `extents.rs`, small for the files most forks hold.
//!
//! Most files are one piece (a new file written once, a base file of one
//! chunk, or of a few). A `BTreeMap` allocates a whole leaf for the first
//! entry, 736 bytes for one piece; a sorted vector takes 64 a piece. Random
//! writes to a large file make thousands of pieces, where a vector's
//! inserts would move the rest of it each time: past [`SMALL`] pieces the
//! map becomes a `BTreeMap` and stays one.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::{Bound, RangeBounds};
use std::slice;

use super::Piece;

/// The most pieces kept in a sorted vector.
pub const SMALL: usize = 32;

#[derive(Clone, Debug)]
pub struct PieceMap(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Small(Vec<(u64, Piece)>),
    Large(BTreeMap<u64, Piece>),
}

impl Default for PieceMap {
    fn default() -> Self {
        PieceMap::new()
    }
}

impl PieceMap {
    pub const fn new() -> PieceMap {
        PieceMap(Repr::Small(Vec::new()))
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Small(v) => v.len(),
            Repr::Large(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The piece starting at `at`, replacing any there (returned).
    pub fn insert(&mut self, at: u64, piece: Piece) -> Option<Piece> {
        let v = match &mut self.0 {
            Repr::Large(m) => return m.insert(at, piece),
            Repr::Small(v) => v,
        };
        match v.binary_search_by_key(&at, |(s, _)| *s) {
            Ok(i) => Some(std::mem::replace(&mut v[i].1, piece)),
            Err(_) if v.len() == SMALL => {
                let mut m: BTreeMap<u64, Piece> = v.drain(..).collect();
                m.insert(at, piece);
                self.0 = Repr::Large(m);
                None
            }
            Err(i) => {
                // One exact allocation for the first few: most files stay
                // at one piece.
                if v.len() == v.capacity() && v.len() < 4 {
                    v.reserve_exact(1);
                }
                v.insert(i, (at, piece));
                None
            }
        }
    }

    pub fn remove(&mut self, at: &u64) -> Option<Piece> {
        match &mut self.0 {
            Repr::Large(m) => m.remove(at),
            Repr::Small(v) => {
                let i = v.binary_search_by_key(at, |(s, _)| *s).ok()?;
                Some(v.remove(i).1)
            }
        }
    }

    /// The pieces whose start is in `range`, in order (both ways).
    pub fn range(&self, range: impl RangeBounds<u64>) -> Iter<'_> {
        match &self.0 {
            Repr::Large(m) => Iter::Large(m.range(range)),
            Repr::Small(v) => {
                let lo = match range.start_bound() {
                    Bound::Included(s) => v.partition_point(|(k, _)| k < s),
                    Bound::Excluded(s) => v.partition_point(|(k, _)| k <= s),
                    Bound::Unbounded => 0,
                };
                let hi = match range.end_bound() {
                    Bound::Included(e) => v.partition_point(|(k, _)| k <= e),
                    Bound::Excluded(e) => v.partition_point(|(k, _)| k < e),
                    Bound::Unbounded => v.len(),
                };
                Iter::Small(v[lo..hi.max(lo)].iter())
            }
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        self.range(..)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Piece> {
        self.iter().map(|(_, p)| p)
    }

    /// Heap bytes held, for the fork's memory estimate.
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Small(v) => v.capacity() * std::mem::size_of::<(u64, Piece)>(),
            // A B-tree node holds up to 11 entries; about two thirds full.
            Repr::Large(m) => m.len() * std::mem::size_of::<(u64, Piece)>() * 3 / 2,
        }
    }
}

impl PartialEq for PieceMap {
    fn eq(&self, other: &PieceMap) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for PieceMap {}

impl FromIterator<(u64, Piece)> for PieceMap {
    fn from_iter<I: IntoIterator<Item = (u64, Piece)>>(iter: I) -> PieceMap {
        let mut m = PieceMap::new();
        for (at, p) in iter {
            m.insert(at, p);
        }
        m
    }
}

impl<'a> IntoIterator for &'a PieceMap {
    type Item = (&'a u64, &'a Piece);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Pieces of a [`PieceMap`] in order of their start.
pub enum Iter<'a> {
    Small(slice::Iter<'a, (u64, Piece)>),
    Large(btree_map::Range<'a, u64, Piece>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a u64, &'a Piece);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(i) => i.next().map(|(k, p)| (k, p)),
            Iter::Large(i) => i.next(),
        }
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(i) => i.next_back().map(|(k, p)| (k, p)),
            Iter::Large(i) => i.next_back(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Src;
    use super::*;

    fn piece(len: u64) -> Piece {
        Piece {
            len,
            src: Src::Journal { seg: 1, off: len },
        }
    }

    /// Every operation, on sizes either side of the switch to a B-tree,
    /// against a `BTreeMap` doing the same.
    #[test]
    fn behaves_as_a_btreemap_small_or_large() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for keys in [4u64, 40, 400] {
            let (mut ours, mut model) = (PieceMap::new(), BTreeMap::new());
            for step in 0..3_000 {
                let k = next(keys);
                if next(3) == 0 {
                    assert_eq!(ours.remove(&k), model.remove(&k), "remove {k}");
                } else {
                    let p = piece(step);
                    assert_eq!(ours.insert(k, p), model.insert(k, p), "insert {k}");
                }
                assert_eq!(ours.len(), model.len());
                let (a, b) = (next(keys + 2), next(keys + 2));
                let (lo, hi) = (a.min(b), a.max(b));
                assert!(ours.range(lo..hi).eq(model.range(lo..hi)), "{lo}..{hi}");
                assert!(ours.range(..=lo).rev().eq(model.range(..=lo).rev()));
                assert!(ours.range(hi..).eq(model.range(hi..)));
                assert!(
                    ours.range((Bound::Excluded(lo), Bound::Included(hi)))
                        .eq(model.range((Bound::Excluded(lo), Bound::Included(hi))))
                );
                assert_eq!(
                    ours.range(lo..hi).next_back(),
                    model.range(lo..hi).next_back()
                );
            }
            let rebuilt: PieceMap = model.iter().map(|(k, p)| (*k, *p)).collect();
            assert_eq!(rebuilt, ours);
            assert_eq!(ours.is_empty(), model.is_empty());
        }
        // An empty range is empty.
        let m: PieceMap = [(5, piece(1)), (9, piece(1))].into_iter().collect();
        assert_eq!(m.range(6..6).count(), 0);
        assert_eq!(m.range(5..5).count(), 0);
    }

    #[test]
    fn one_piece_takes_one_allocation_of_one_piece() {
        let mut m = PieceMap::new();
        m.insert(0, piece(10));
        assert_eq!(m.heap_bytes(), std::mem::size_of::<(u64, Piece)>());
        m.insert(10, piece(10));
        assert_eq!(m.heap_bytes(), 2 * std::mem::size_of::<(u64, Piece)>());
    }
}
