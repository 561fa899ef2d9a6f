// Derived from git's xdiff (LibXDiff by Davide Libenzi, Copyright (C) 2003
// Davide Libenzi, and the git contributors' changes to it), as in git
// 2.47.3. Like its source, this file is distributed under the GNU Lesser
// General Public License, version 2.1 or (at your option) any later version
// (SPDX: LGPL-2.1-or-later), not under storefs's MIT OR Apache-2.0: see
// src/store/merge/xdiff/mod.rs.

//! xdiffi.c's Myers: `xdl_do_diff` (the Myers part), `xdl_recs_cmp` and
//! `xdl_split`, on the lines [`super::prepare`] left.
//!
//! See "An O(ND) Difference Algorithm and its Variations" (Myers): the box
//! between two points of the two files is split at a point on the path the
//! forward search (from its top left) and the backward search (from its
//! bottom right) meet on, and each half is diffed the same way. git adds
//! two shortcuts that make it give up optimality: past `XDL_HEUR_MIN_COST`
//! edits, a diagonal that reached far with a snake of `XDL_SNAKE_CNT` equal
//! lines is taken as the split; past the cost limit, the furthest point
//! either search reached is.

use super::File;
use super::prepare::bogosqrt;

const MAX_COST_MIN: i64 = 256;
const HEUR_MIN_COST: i64 = 256;
const LINE_MAX: i64 = i64::MAX;
const SNAKE_CNT: i64 = 20;
const K_HEUR: i64 = 4;

/// The costs of one diff (`xdalgoenv_t`).
struct Limits {
    mxcost: i64,
    snake_cnt: i64,
    heur_min: i64,
}

/// Where to split a box, and whether each half must be diffed minimally
/// (`xdpsplit_t`).
struct Split {
    i1: i64,
    i2: i64,
    min_lo: bool,
    min_hi: bool,
}

/// The furthest point reached on each diagonal `d` (line `i1` of the first
/// file; `i2 = i1 - d`), for diagonals from `-(n2 + 1)` to `n1 + 1`.
struct Diagonals {
    v: Vec<i64>,
    offset: i64,
}

impl std::ops::Index<i64> for Diagonals {
    type Output = i64;
    fn index(&self, d: i64) -> &i64 {
        &self.v[(d + self.offset) as usize]
    }
}

impl std::ops::IndexMut<i64> for Diagonals {
    fn index_mut(&mut self, d: i64) -> &mut i64 {
        &mut self.v[(d + self.offset) as usize]
    }
}

/// Myers on the reduced files (`ha0`, `ha1`: the classes of the lines
/// left; `index0`, `index1`: their line numbers), marking changed lines in
/// `f0` and `f1` (`xdl_do_diff` after preparation, not minimal).
pub(super) fn diff(
    f0: &mut File,
    index0: &[usize],
    ha0: &[u32],
    f1: &mut File,
    index1: &[usize],
    ha1: &[u32],
) {
    let (n0, n1) = (ha0.len() as i64, ha1.len() as i64);
    let ndiags = n0 + n1 + 3;
    let mut kvdf = Diagonals {
        v: vec![0; ndiags as usize],
        offset: n1 + 1,
    };
    let mut kvdb = Diagonals {
        v: vec![0; ndiags as usize],
        offset: n1 + 1,
    };
    let limits = Limits {
        mxcost: bogosqrt(ndiags).max(MAX_COST_MIN),
        snake_cnt: SNAKE_CNT,
        heur_min: HEUR_MIN_COST,
    };
    // xdl_recs_cmp's recursion, with a stack of the boxes left to do (the
    // lower half first, as the recursion does; the marks do not depend on
    // the order).
    let mut todo = vec![(0, n0, 0, n1, false)];
    while let Some((mut off1, mut lim1, mut off2, mut lim2, need_min)) = todo.pop() {
        // Shrink the box by the snakes at its two corners.
        while off1 < lim1 && off2 < lim2 && ha0[off1 as usize] == ha1[off2 as usize] {
            off1 += 1;
            off2 += 1;
        }
        while off1 < lim1 && off2 < lim2 && ha0[lim1 as usize - 1] == ha1[lim2 as usize - 1] {
            lim1 -= 1;
            lim2 -= 1;
        }
        // One side empty: everything left on the other is changed.
        if off1 == lim1 {
            for &i in &index1[off2 as usize..lim2 as usize] {
                f1.set_changed(i as isize, true);
            }
        } else if off2 == lim2 {
            for &i in &index0[off1 as usize..lim1 as usize] {
                f0.set_changed(i as isize, true);
            }
        } else {
            let spl = split(
                ha0, off1, lim1, ha1, off2, lim2, &mut kvdf, &mut kvdb, need_min, &limits,
            );
            todo.push((spl.i1, lim1, spl.i2, lim2, spl.min_hi));
            todo.push((off1, spl.i1, off2, spl.i2, spl.min_lo));
        }
    }
}

/// `xdl_split`: where to split the box from (`off1`, `off2`) to (`lim1`,
/// `lim2`), both non-empty and with different first and last lines.
#[allow(clippy::too_many_arguments)]
fn split(
    ha1: &[u32],
    off1: i64,
    lim1: i64,
    ha2: &[u32],
    off2: i64,
    lim2: i64,
    kvdf: &mut Diagonals,
    kvdb: &mut Diagonals,
    need_min: bool,
    xenv: &Limits,
) -> Split {
    let eq = |i1: i64, i2: i64| ha1[i1 as usize] == ha2[i2 as usize];
    let (dmin, dmax) = (off1 - lim2, lim1 - off2);
    let (fmid, bmid) = (off1 - off2, lim1 - lim2);
    let odd = (fmid - bmid) & 1 != 0;
    let (mut fmin, mut fmax) = (fmid, fmid);
    let (mut bmin, mut bmax) = (bmid, bmid);

    kvdf[fmid] = off1;
    kvdb[bmid] = lim1;

    let mut ec = 1;
    loop {
        let mut got_snake = false;

        // Extend the forward diagonals by one each way (inward at the box's
        // edge), the new outer ones set to -1 so the loop needs no bounds.
        if fmin > dmin {
            fmin -= 1;
            kvdf[fmin - 1] = -1;
        } else {
            fmin += 1;
        }
        if fmax < dmax {
            fmax += 1;
            kvdf[fmax + 1] = -1;
        } else {
            fmax -= 1;
        }

        let mut d = fmax;
        while d >= fmin {
            let mut i1 = if kvdf[d - 1] >= kvdf[d + 1] {
                kvdf[d - 1] + 1
            } else {
                kvdf[d + 1]
            };
            let prev1 = i1;
            let mut i2 = i1 - d;
            while i1 < lim1 && i2 < lim2 && eq(i1, i2) {
                i1 += 1;
                i2 += 1;
            }
            if i1 - prev1 > xenv.snake_cnt {
                got_snake = true;
            }
            kvdf[d] = i1;
            if odd && bmin <= d && d <= bmax && kvdb[d] <= i1 {
                return Split {
                    i1,
                    i2,
                    min_lo: true,
                    min_hi: true,
                };
            }
            d -= 2;
        }

        // The same backwards.
        if bmin > dmin {
            bmin -= 1;
            kvdb[bmin - 1] = LINE_MAX;
        } else {
            bmin += 1;
        }
        if bmax < dmax {
            bmax += 1;
            kvdb[bmax + 1] = LINE_MAX;
        } else {
            bmax -= 1;
        }

        let mut d = bmax;
        while d >= bmin {
            let mut i1 = if kvdb[d - 1] < kvdb[d + 1] {
                kvdb[d - 1]
            } else {
                kvdb[d + 1] - 1
            };
            let prev1 = i1;
            let mut i2 = i1 - d;
            while i1 > off1 && i2 > off2 && eq(i1 - 1, i2 - 1) {
                i1 -= 1;
                i2 -= 1;
            }
            if prev1 - i1 > xenv.snake_cnt {
                got_snake = true;
            }
            kvdb[d] = i1;
            if !odd && fmin <= d && d <= fmax && i1 <= kvdf[d] {
                return Split {
                    i1,
                    i2,
                    min_lo: true,
                    min_hi: true,
                };
            }
            d -= 2;
        }

        if need_min {
            ec += 1;
            continue;
        }

        // Past the heuristic's cost, with a good snake: a diagonal that got
        // far (its distance from the corner, less its distance from the
        // middle diagonal, above 4 times the cost) and ends in a snake of
        // `snake_cnt` equal lines is a good enough split.
        if got_snake && ec > xenv.heur_min {
            let mut best = 0;
            let mut found = (0, 0);
            let mut d = fmax;
            while d >= fmin {
                let dd = if d > fmid { d - fmid } else { fmid - d };
                let i1 = kvdf[d];
                let i2 = i1 - d;
                let v = (i1 - off1) + (i2 - off2) - dd;
                if v > K_HEUR * ec
                    && v > best
                    && off1 + xenv.snake_cnt <= i1
                    && i1 < lim1
                    && off2 + xenv.snake_cnt <= i2
                    && i2 < lim2
                {
                    let mut k = 1;
                    while eq(i1 - k, i2 - k) {
                        if k == xenv.snake_cnt {
                            best = v;
                            found = (i1, i2);
                            break;
                        }
                        k += 1;
                    }
                }
                d -= 2;
            }
            if best > 0 {
                return Split {
                    i1: found.0,
                    i2: found.1,
                    min_lo: true,
                    min_hi: false,
                };
            }

            let mut best = 0;
            let mut d = bmax;
            while d >= bmin {
                let dd = if d > bmid { d - bmid } else { bmid - d };
                let i1 = kvdb[d];
                let i2 = i1 - d;
                let v = (lim1 - i1) + (lim2 - i2) - dd;
                if v > K_HEUR * ec
                    && v > best
                    && off1 < i1
                    && i1 <= lim1 - xenv.snake_cnt
                    && off2 < i2
                    && i2 <= lim2 - xenv.snake_cnt
                {
                    let mut k = 0;
                    while eq(i1 + k, i2 + k) {
                        if k == xenv.snake_cnt - 1 {
                            best = v;
                            found = (i1, i2);
                            break;
                        }
                        k += 1;
                    }
                }
                d -= 2;
            }
            if best > 0 {
                return Split {
                    i1: found.0,
                    i2: found.1,
                    min_lo: false,
                    min_hi: true,
                };
            }
        }

        // Enough: past the cost limit, take the furthest point either
        // search reached (by i1 + i2).
        if ec >= xenv.mxcost {
            let (mut fbest, mut fbest1) = (-1, -1);
            let mut d = fmax;
            while d >= fmin {
                let mut i1 = kvdf[d].min(lim1);
                let mut i2 = i1 - d;
                if lim2 < i2 {
                    i1 = lim2 + d;
                    i2 = lim2;
                }
                if fbest < i1 + i2 {
                    fbest = i1 + i2;
                    fbest1 = i1;
                }
                d -= 2;
            }

            let (mut bbest, mut bbest1) = (LINE_MAX, LINE_MAX);
            let mut d = bmax;
            while d >= bmin {
                let mut i1 = off1.max(kvdb[d]);
                let mut i2 = i1 - d;
                if i2 < off2 {
                    i1 = off2 + d;
                    i2 = off2;
                }
                if i1 + i2 < bbest {
                    bbest = i1 + i2;
                    bbest1 = i1;
                }
                d -= 2;
            }

            return if (lim1 + lim2) - bbest < fbest - (off1 + off2) {
                Split {
                    i1: fbest1,
                    i2: fbest - fbest1,
                    min_lo: true,
                    min_hi: false,
                }
            } else {
                Split {
                    i1: bbest1,
                    i2: bbest - bbest1,
                    min_lo: false,
                    min_hi: true,
                }
            };
        }
        ec += 1;
    }
}
