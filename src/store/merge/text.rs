//! Line-based three-way merge of one file's three versions, deciding clean
//! and conflicting hunks as `git merge-file` does (git's `xdiff/xmerge.c` at
//! its `XDL_MERGE_ZEALOUS_ALNUM` level, the level `git merge-file` uses, with
//! the default "merge" marker style and 7-character markers; git 2.47.3).
//!
//! The two diffs (base to ours, base to theirs) are git's own line diff,
//! ported in [`super::xdiff`] (xprepare.c's line classes and discarded
//! lines, xdiffi.c's Myers with its heuristics and cost limit, and
//! `xdl_change_compact`, without the indent heuristic, which `merge-file`
//! does not turn on), so equal lines are aligned where git aligns them. On
//! top of them, as xmerge.c does:
//!
//! - changes of one side that overlap or touch no change of the other side
//!   are taken from that side; hunks that overlap or touch (a change ending
//!   where the other starts) become one conflict, unless both sides made the
//!   identical change (same base range, same lines), which is taken once;
//! - a conflict is refined by diffing the two sides' lines in it (a diff of
//!   its own, as git's): lines both sides have in common there are no
//!   longer conflicting, and a conflict whose sides are identical is taken
//!   once (zealous);
//! - two conflicts separated by at most 3 lines, or by lines with no letter
//!   or digit, become one conflict (the lines between belong to it);
//! - conflict markers: `<<<<<<< OURS`, ours' lines, `=======`, theirs' lines,
//!   `>>>>>>> THEIRS`, a newline added to a side's last line that lacks one,
//!   CRLF when the surrounding lines end in CRLF.
//!
//! `tests/merge.rs` compares this with `git merge-file -p` on random edits.

use super::xdiff;

/// How conflicting hunks are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Favor {
    /// Conflict markers around both sides' lines.
    Markers,
    /// Ours' lines (`git merge-file --ours`).
    Ours,
    /// Theirs' lines (`git merge-file --theirs`).
    Theirs,
}

/// The merged bytes and how many conflicting hunks they have (or had, when
/// resolved by [`Favor::Ours`] or [`Favor::Theirs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    pub bytes: Vec<u8>,
    pub conflicts: usize,
}

/// Whether git would treat `data` as text: no NUL byte in its first 8000
/// bytes (git's `buffer_is_binary`).
pub fn is_text(data: &[u8]) -> bool {
    !data[..data.len().min(8000)].contains(&0)
}

/// One change of a side against the base: `chg0` base lines from `i0`
/// replaced by `chg1` lines of the side from `i1`.
#[derive(Clone, Copy, Debug)]
struct Change {
    i0: i64,
    chg0: i64,
    i1: i64,
    chg1: i64,
}

/// A region of the result (xmerge.c's `xdmerge_t`). `mode`: 0 conflict,
/// 1 ours, 2 theirs, 4 identical on both sides (after refinement).
#[derive(Clone, Copy, Debug)]
struct Region {
    mode: u8,
    i0: i64,
    chg0: i64,
    i1: i64,
    chg1: i64,
    i2: i64,
    chg2: i64,
}

/// Split into lines, each with its newline (the last may have none).
fn lines(data: &[u8]) -> Vec<&[u8]> {
    data.split_inclusive(|&b| b == b'\n').collect()
}

/// git's line diff of `before` and `after` (see [`super::xdiff`]).
fn diff(before: &[&[u8]], after: &[&[u8]]) -> Vec<Change> {
    xdiff::diff(before, after)
        .into_iter()
        .map(|c| Change {
            i0: c.i0 as i64,
            chg0: c.chg0 as i64,
            i1: c.i1 as i64,
            chg1: c.chg1 as i64,
        })
        .collect()
}

/// xmerge.c's `xdl_append_merge`: a region that overlaps or touches the
/// previous one is folded into it (a conflict unless of the same mode).
#[allow(clippy::too_many_arguments)]
fn append(
    out: &mut Vec<Region>,
    mode: u8,
    i0: i64,
    chg0: i64,
    i1: i64,
    chg1: i64,
    i2: i64,
    chg2: i64,
) {
    if let Some(m) = out.last_mut()
        && (i1 <= m.i1 + m.chg1 || i2 <= m.i2 + m.chg2)
    {
        if mode != m.mode {
            m.mode = 0;
        }
        m.chg0 = i0 + chg0 - m.i0;
        m.chg1 = i1 + chg1 - m.i1;
        m.chg2 = i2 + chg2 - m.i2;
        return;
    }
    out.push(Region {
        mode,
        i0,
        chg0,
        i1,
        chg1,
        i2,
        chg2,
    });
}

/// Merge `theirs` and `ours` against `base`, line by line, as `git
/// merge-file -p -L LABEL_OURS -L base -L LABEL_THEIRS` (with `--ours` or
/// `--theirs` for those favors) does.
pub fn merge(
    base: &[u8],
    ours: &[u8],
    theirs: &[u8],
    favor: Favor,
    label_ours: &str,
    label_theirs: &str,
) -> Merged {
    let (l0, l1, l2) = (lines(base), lines(ours), lines(theirs));
    let x1 = diff(&l0, &l1);
    let x2 = diff(&l0, &l2);
    // One side unchanged: the other side whole (xdl_merge).
    if x1.is_empty() {
        return Merged {
            bytes: theirs.to_vec(),
            conflicts: 0,
        };
    }
    if x2.is_empty() {
        return Merged {
            bytes: ours.to_vec(),
            conflicts: 0,
        };
    }
    let mut regions = regions(
        &x1,
        &x2,
        &l1,
        &l2,
        l1.len() as i64,
        l2.len() as i64,
        l0.len() as i64,
    );
    refine(&mut regions, &l1, &l2);
    simplify(&mut regions, &l1);
    let conflicts = regions.iter().filter(|m| m.mode == 0).count();
    let bytes = fill(&regions, &l0, &l1, &l2, favor, label_ours, label_theirs);
    Merged { bytes, conflicts }
}

/// xmerge.c's walk over both change lists (`xdl_do_merge` before refinement).
fn regions(
    x1: &[Change],
    x2: &[Change],
    l1: &[&[u8]],
    l2: &[&[u8]],
    n1: i64,
    n2: i64,
    n0: i64,
) -> Vec<Region> {
    let mut out = Vec::new();
    let (mut a, mut b) = (0, 0);
    while a < x1.len() && b < x2.len() {
        let (c1, c2) = (x1[a], x2[b]);
        if c1.i0 + c1.chg0 < c2.i0 {
            let i2 = c2.i1 - c2.i0 + c1.i0;
            append(&mut out, 1, c1.i0, c1.chg0, c1.i1, c1.chg1, i2, c1.chg0);
            a += 1;
            continue;
        }
        if c2.i0 + c2.chg0 < c1.i0 {
            let i1 = c1.i1 - c1.i0 + c2.i0;
            append(&mut out, 2, c2.i0, c2.chg0, i1, c2.chg0, c2.i1, c2.chg1);
            b += 1;
            continue;
        }
        let same = c1.i0 == c2.i0
            && c1.chg0 == c2.chg0
            && c1.chg1 == c2.chg1
            && l1[c1.i1 as usize..(c1.i1 + c1.chg1) as usize]
                == l2[c2.i1 as usize..(c2.i1 + c2.chg1) as usize];
        if !same {
            let off = c1.i0 - c2.i0;
            let ffo = off + c1.chg0 - c2.chg0;
            let (mut i0, mut i1, mut i2) = (c1.i0, c1.i1, c2.i1);
            if off > 0 {
                i0 -= off;
                i1 -= off;
            } else {
                i2 += off;
            }
            let mut chg0 = c1.i0 + c1.chg0 - i0;
            let mut chg1 = c1.i1 + c1.chg1 - i1;
            let mut chg2 = c2.i1 + c2.chg1 - i2;
            if ffo < 0 {
                chg0 -= ffo;
                chg1 -= ffo;
            } else {
                chg2 += ffo;
            }
            append(&mut out, 0, i0, chg0, i1, chg1, i2, chg2);
        }
        let end1 = c1.i0 + c1.chg0;
        let end2 = c2.i0 + c2.chg0;
        if end1 >= end2 {
            b += 1;
        }
        if end2 >= end1 {
            a += 1;
        }
    }
    for c1 in &x1[a..] {
        let i2 = c1.i0 + n2 - n0;
        append(&mut out, 1, c1.i0, c1.chg0, c1.i1, c1.chg1, i2, c1.chg0);
    }
    for c2 in &x2[b..] {
        let i1 = c2.i0 + n1 - n0;
        append(&mut out, 2, c2.i0, c2.chg0, i1, c2.chg0, c2.i1, c2.chg1);
    }
    out
}

/// xmerge.c's `xdl_refine_conflicts`: diff the two sides of each conflict
/// (both non-empty) with a diff of their own; what they share is no longer
/// conflicting.
fn refine(regions: &mut Vec<Region>, l1: &[&[u8]], l2: &[&[u8]]) {
    let mut out = Vec::with_capacity(regions.len());
    for m in regions.drain(..) {
        if m.mode != 0 || m.chg1 == 0 || m.chg2 == 0 {
            out.push(m);
            continue;
        }
        let s1 = &l1[m.i1 as usize..(m.i1 + m.chg1) as usize];
        let s2 = &l2[m.i2 as usize..(m.i2 + m.chg2) as usize];
        let x = diff(s1, s2);
        if x.is_empty() {
            out.push(Region { mode: 4, ..m });
            continue;
        }
        for c in x {
            out.push(Region {
                mode: 0,
                i1: c.i0 + m.i1,
                chg1: c.chg0,
                i2: c.i1 + m.i2,
                chg2: c.chg1,
                ..m
            });
        }
    }
    *regions = out;
}

/// xmerge.c's `xdl_simplify_non_conflicts` with `simplify_if_no_alnum`:
/// two conflicts with at most 3 lines between them, or only lines without
/// a letter or digit, become one. One pass (a joined conflict is compared
/// with the next in turn, as git's loop does).
fn simplify(regions: &mut Vec<Region>, l1: &[&[u8]]) {
    let mut out: Vec<Region> = Vec::with_capacity(regions.len());
    for next in regions.drain(..) {
        if let Some(m) = out.last_mut()
            && m.mode == 0
            && next.mode == 0
        {
            let (begin, end) = (m.i1 + m.chg1, next.i1);
            let keep_apart = end - begin > 3
                && l1[begin as usize..end as usize]
                    .iter()
                    .any(|l| l.iter().any(u8::is_ascii_alphanumeric));
            if !keep_apart {
                m.chg1 = next.i1 + next.chg1 - m.i1;
                m.chg2 = next.i2 + next.chg2 - m.i2;
                continue;
            }
        }
        out.push(next);
    }
    *regions = out;
}

/// xmerge.c's `is_eol_crlf`: 1 when line `i` ends in CRLF (for a last line
/// without a newline, the line before it), 0 for LF, -1 when unknown.
fn eol_crlf(l: &[&[u8]], i: i64) -> i8 {
    let n = l.len() as i64;
    let crlf = |line: &[u8]| i8::from(line.len() > 1 && line[line.len() - 2] == b'\r');
    if i < n - 1 {
        return crlf(l[i as usize]);
    }
    if n == 0 {
        return -1;
    }
    let last = l[i as usize];
    if last.last() == Some(&b'\n') {
        return crlf(last);
    }
    if i == 0 {
        return -1;
    }
    crlf(l[i as usize - 1])
}

/// xmerge.c's `is_cr_needed`: markers and added newlines in CRLF when the
/// lines around the conflict end in CRLF.
fn cr_needed(l0: &[&[u8]], l1: &[&[u8]], l2: &[&[u8]], m: &Region) -> bool {
    let mut needs = eol_crlf(l1, if m.i1 > 0 { m.i1 - 1 } else { 0 });
    if needs != 0 {
        needs = eol_crlf(l2, if m.i2 > 0 { m.i2 - 1 } else { 0 });
    }
    if needs != 0 {
        needs = eol_crlf(l0, 0);
    }
    needs > 0
}

/// Append `count` lines of `l` from `i`, and a newline (CRLF when `cr`)
/// after the last when `add_nl` and it has none.
fn copy(out: &mut Vec<u8>, l: &[&[u8]], i: i64, count: i64, cr: bool, add_nl: bool) {
    if count < 1 {
        return;
    }
    let (from, to) = (i as usize, (i + count) as usize);
    for line in &l[from..to] {
        out.extend_from_slice(line);
    }
    if add_nl && l[to - 1].last() != Some(&b'\n') {
        if cr {
            out.push(b'\r');
        }
        out.push(b'\n');
    }
}

fn marker(out: &mut Vec<u8>, c: u8, label: Option<&str>, cr: bool) {
    out.extend_from_slice(&[c; 7]);
    if let Some(label) = label {
        out.push(b' ');
        out.extend_from_slice(label.as_bytes());
    }
    if cr {
        out.push(b'\r');
    }
    out.push(b'\n');
}

/// xmerge.c's `xdl_fill_merge_buffer` (merge style).
fn fill(
    regions: &[Region],
    l0: &[&[u8]],
    l1: &[&[u8]],
    l2: &[&[u8]],
    favor: Favor,
    label1: &str,
    label2: &str,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    for m in regions {
        let mode = match (m.mode, favor) {
            (0, Favor::Ours) => 1,
            (0, Favor::Theirs) => 2,
            (mode, _) => mode,
        };
        match mode {
            0 => {
                let cr = cr_needed(l0, l1, l2, m);
                copy(&mut out, l1, i, m.i1 - i, false, false);
                marker(&mut out, b'<', Some(label1), cr);
                copy(&mut out, l1, m.i1, m.chg1, cr, true);
                marker(&mut out, b'=', None, cr);
                copy(&mut out, l2, m.i2, m.chg2, cr, true);
                marker(&mut out, b'>', Some(label2), cr);
            }
            1 => copy(&mut out, l1, i, m.i1 + m.chg1 - i, false, false),
            2 => {
                copy(&mut out, l1, i, m.i1 - i, false, false);
                copy(&mut out, l2, m.i2, m.chg2, false, false);
            }
            // Identical on both sides: ours' lines, copied with what follows.
            _ => continue,
        }
        i = m.i1 + m.chg1;
    }
    copy(&mut out, l1, i, l1.len() as i64 - i, false, false);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(base: &str, ours: &str, theirs: &str) -> (String, usize) {
        let r = merge(
            base.as_bytes(),
            ours.as_bytes(),
            theirs.as_bytes(),
            Favor::Markers,
            "A",
            "B",
        );
        (String::from_utf8(r.bytes).unwrap(), r.conflicts)
    }

    #[test]
    fn separate_hunks_merge_cleanly() {
        let base = "1\n2\n3\n4\n5\n6\n7\n8\n";
        let (out, c) = m(
            base,
            "1x\n2\n3\n4\n5\n6\n7\n8\n",
            "1\n2\n3\n4\n5\n6\n7\n8x\n",
        );
        assert_eq!((out.as_str(), c), ("1x\n2\n3\n4\n5\n6\n7\n8x\n", 0));
    }

    #[test]
    fn same_lines_conflict_with_markers() {
        let (out, c) = m("a\nb\nc\n", "a\nB1\nc\n", "a\nB2\nc\n");
        assert_eq!(c, 1);
        assert_eq!(out, "a\n<<<<<<< A\nB1\n=======\nB2\n>>>>>>> B\nc\n");
    }

    #[test]
    fn identical_changes_are_taken_once() {
        let (out, c) = m("a\nb\nc\n", "a\nX\nc\n", "a\nX\nc\n");
        assert_eq!((out.as_str(), c), ("a\nX\nc\n", 0));
    }

    #[test]
    fn favors_resolve_conflicts() {
        let r = merge(
            b"a\nb\nc\n",
            b"a\nB1\nc\n",
            b"a\nB2\nc\n",
            Favor::Theirs,
            "A",
            "B",
        );
        assert_eq!((r.bytes.as_slice(), r.conflicts), (&b"a\nB2\nc\n"[..], 1));
    }

    /// 100,000 lines, a few edits on each side (two of them conflicting):
    /// the diffs cost about the file's length (trimmed ends, Myers bounded
    /// by xdiff's cost limit), not its square. No timing is asserted; it must
    /// finish (in well under a second in a debug build).
    #[test]
    fn a_large_file_with_a_few_edits_on_each_side_merges_quickly() {
        let base: Vec<String> = (0..100_000)
            .map(|i| match i % 10 {
                0 => "}\n".to_string(),
                5 => "\n".to_string(),
                _ => format!("line {}\n", i % 4_999),
            })
            .collect();
        let (mut ours, mut theirs) = (base.clone(), base.clone());
        // From the end, so that each index is the base's.
        ours[99_998] = "ours near the end\n".into();
        ours.insert(40_001, "ours in the middle\n".into());
        ours[1] = "ours at the top\n".into();
        theirs[99_998] = "theirs near the end\n".into();
        theirs[40_001] = "theirs in the middle\n".into();
        theirs.remove(20_003);
        let cat = |v: &[String]| v.concat().into_bytes();
        let r = merge(
            &cat(&base),
            &cat(&ours),
            &cat(&theirs),
            Favor::Markers,
            "A",
            "B",
        );
        // What git merge-file -p -L A -L base -L B gives (git 2.47.3).
        assert_eq!(r.conflicts, 2);
        let out = String::from_utf8(r.bytes).unwrap();
        assert_eq!(out.lines().count(), 100_008);
        assert!(out.starts_with("}\nours at the top\nline 2\n"));
        assert!(out.contains(
            "line 7\n}\n<<<<<<< A\nours in the middle\nline 9\n=======\ntheirs in the middle\n>>>>>>> B\nline 10\n"
        ));
        assert!(out.ends_with(
            "line 17\n<<<<<<< A\nours near the end\n=======\ntheirs near the end\n>>>>>>> B\nline 19\n"
        ));
    }

    /// 100,000 lines, each side changing every 20th line its own way: 5,000
    /// conflicts, each kept apart by lines with letters (no pass over them
    /// costs their count squared).
    #[test]
    fn a_large_file_with_many_conflicts_merges_quickly() {
        let base: Vec<String> = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let (mut ours, mut theirs) = (base.clone(), base.clone());
        for i in (0..100_000).step_by(20) {
            ours[i] = format!("ours {i}\n");
            theirs[i] = format!("theirs {i}\n");
        }
        let cat = |v: &[String]| v.concat().into_bytes();
        let r = merge(
            &cat(&base),
            &cat(&ours),
            &cat(&theirs),
            Favor::Ours,
            "A",
            "B",
        );
        assert_eq!((r.conflicts, r.bytes), (5_000, cat(&ours)));
    }

    #[test]
    fn binary_is_found_as_git_finds_it() {
        assert!(is_text(b"plain\n"));
        assert!(!is_text(b"a\0b"));
        let mut late = vec![b'a'; 9000];
        late.push(0);
        assert!(is_text(&late));
    }
}
