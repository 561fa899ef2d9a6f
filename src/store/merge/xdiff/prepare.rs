// Derived from git's xdiff (LibXDiff by Davide Libenzi, Copyright (C) 2003
// Davide Libenzi, and the git contributors' changes to it), as in git
// 2.47.3. Like its source, this file is distributed under the GNU Lesser
// General Public License, version 2.1 or (at your option) any later version
// (SPDX: LGPL-2.1-or-later), not under storefs's MIT OR Apache-2.0: see
// src/store/merge/xdiff/mod.rs.

//! xprepare.c: classify the lines, trim the common ends, and discard the
//! lines Myers need not see (`xdl_prepare_env` for the Myers algorithm).

use std::collections::HashMap;

use super::File;
use super::myers;

/// Lines discarded around a line that occurs too often must outnumber the
/// too-frequent ones by this factor (`XDL_KPDIS_RUN`).
const KPDIS_RUN: i64 = 4;
/// A line occurring this often is always "too often" (`XDL_MAX_EQLIMIT`).
const MAX_EQLIMIT: i64 = 1024;
/// How far `clean_mmatch` looks either side (`XDL_SIMSCAN_WINDOW`).
const SIMSCAN_WINDOW: i64 = 100;

/// xutils.c's `xdl_bogosqrt`: a power of two near the square root of `n`.
pub(super) fn bogosqrt(mut n: i64) -> i64 {
    let mut i = 1;
    while n > 0 {
        i <<= 1;
        n >>= 2;
    }
    i
}

/// `xdl_prepare_env`, then Myers (`xdl_do_diff`): the two files with their
/// changed lines marked, before compaction.
pub(super) fn prepare(before: &[&[u8]], after: &[&[u8]]) -> (File, File) {
    // xdl_classify_record: a class per distinct line, counting how often
    // it occurs in each file.
    let mut classes: HashMap<&[u8], u32> = HashMap::with_capacity(before.len() + after.len());
    let mut count: Vec<[i64; 2]> = Vec::new();
    let c0 = classify(before, 0, &mut classes, &mut count);
    let c1 = classify(after, 1, &mut classes, &mut count);
    let mut f0 = File {
        changed: vec![false; c0.len() + 2],
        class: c0,
    };
    let mut f1 = File {
        changed: vec![false; c1.len() + 2],
        class: c1,
    };

    let (start, end0, end1) = trim_ends(&f0, &f1);
    let (index0, reduced0) = cleanup_records(&mut f0, start, end0, &count, 1);
    let (index1, reduced1) = cleanup_records(&mut f1, start, end1, &count, 0);
    myers::diff(&mut f0, &index0, &reduced0, &mut f1, &index1, &reduced1);
    (f0, f1)
}

/// Each line's class (`xdl_classify_record`), counted for file `side`.
fn classify<'a>(
    lines: &[&'a [u8]],
    side: usize,
    classes: &mut HashMap<&'a [u8], u32>,
    count: &mut Vec<[i64; 2]>,
) -> Vec<u32> {
    lines
        .iter()
        .map(|&line| {
            let next = classes.len() as u32;
            let class = *classes.entry(line).or_insert(next);
            if class == next {
                count.push([0, 0]);
            }
            count[class as usize][side] += 1;
            class
        })
        .collect()
}

/// `xdl_trim_ends`: the first line that differs (`dstart`, the same in both
/// files) and each file's last line before the common tail (`dend`; one
/// before `dstart` when nothing is left).
fn trim_ends(f0: &File, f1: &File) -> (i64, i64, i64) {
    let lim = f0.len().min(f1.len());
    let head = (0..lim)
        .find(|&i| f0.class[i] != f1.class[i])
        .unwrap_or(lim);
    let rest = lim - head;
    let tail = (0..rest)
        .find(|&i| f0.class[f0.len() - 1 - i] != f1.class[f1.len() - 1 - i])
        .unwrap_or(rest);
    (
        head as i64,
        f0.len() as i64 - tail as i64 - 1,
        f1.len() as i64 - tail as i64 - 1,
    )
}

/// `xdl_cleanup_records` for one file, lines `start..=end`: which lines
/// Myers sees (their line numbers, and their classes); the others are marked
/// changed. A line is discarded when the other file (`other`: 0 or 1, the
/// index into each class's counts) has no equal line, or when the other
/// file has it "too often" (`xdl_bogosqrt` of this file's length or more,
/// at most 1,024 times) and it sits in a run of discarded lines
/// (`clean_mmatch`).
fn cleanup_records(
    f: &mut File,
    start: i64,
    end: i64,
    count: &[[i64; 2]],
    other: usize,
) -> (Vec<usize>, Vec<u32>) {
    let mlim = bogosqrt(f.len() as i64).min(MAX_EQLIMIT);
    // 0: no match in the other file, 1: a match, 2: too many matches.
    let mut dis = vec![0u8; f.len() + 1];
    for i in start..=end {
        let nm = count[f.class[i as usize] as usize][other];
        dis[i as usize] = if nm == 0 {
            0
        } else if nm >= mlim {
            2
        } else {
            1
        };
    }
    let mut index = Vec::new();
    let mut reduced = Vec::new();
    for i in start..=end {
        let d = dis[i as usize];
        if d == 1 || (d == 2 && !clean_mmatch(&dis, i, start, end)) {
            index.push(i as usize);
            reduced.push(f.class[i as usize]);
        } else {
            f.set_changed(i as isize, true);
        }
    }
    (index, reduced)
}

/// `xdl_clean_mmatch`: whether the too-frequent line `i` is to be
/// discarded: the lines before it and after it (within 100, up to the first
/// line with a plain match) are each discarded or too frequent, each side
/// has at least one discarded line, and too-frequent lines are fewer than
/// a quarter of the run.
fn clean_mmatch(dis: &[u8], i: i64, mut s: i64, mut e: i64) -> bool {
    if i - s > SIMSCAN_WINDOW {
        s = i - SIMSCAN_WINDOW;
    }
    if e - i > SIMSCAN_WINDOW {
        e = i + SIMSCAN_WINDOW;
    }
    let (mut rdis0, mut rpdis0) = (0, 1);
    let mut r = 1;
    while i - r >= s {
        match dis[(i - r) as usize] {
            0 => rdis0 += 1,
            2 => rpdis0 += 1,
            _ => break,
        }
        r += 1;
    }
    if rdis0 == 0 {
        return false;
    }
    let (mut rdis1, mut rpdis1) = (0, 1);
    let mut r = 1;
    while i + r <= e {
        match dis[(i + r) as usize] {
            0 => rdis1 += 1,
            2 => rpdis1 += 1,
            _ => break,
        }
        r += 1;
    }
    if rdis1 == 0 {
        return false;
    }
    let rdis = rdis0 + rdis1;
    let rpdis = rpdis0 + rpdis1;
    rpdis * KPDIS_RUN < rpdis + rdis
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bogosqrt_is_gits() {
        assert_eq!(bogosqrt(0), 1);
        assert_eq!(bogosqrt(1), 2);
        assert_eq!(bogosqrt(3), 2);
        assert_eq!(bogosqrt(4), 4);
        assert_eq!(bogosqrt(100), 16);
        assert_eq!(bogosqrt(100_000), 512);
    }
}
