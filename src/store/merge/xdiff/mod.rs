// Derived from git's xdiff (LibXDiff by Davide Libenzi, Copyright (C) 2003
// Davide Libenzi, and the git contributors' changes to it), as in git
// 2.47.3. Like its source, this file is distributed under the GNU Lesser
// General Public License, version 2.1 or (at your option) any later version
// (SPDX: LGPL-2.1-or-later), not under storefs's MIT OR Apache-2.0: see
// src/store/merge/xdiff/mod.rs.

//! Licence: this module is a port of git's xdiff, which is LGPL-2.1-or-later,
//! so it is distributed under that licence (each file says so), and the
//! crate's licence expression is `(MIT OR Apache-2.0) AND LGPL-2.1-or-later`.
//! A build that must not carry LGPL code would go back to a diff of its own
//! (imara-diff's, which differs from git's decisions in about 0.2% of random
//! merges: `tests/merge.rs` measures it).
//!
//! git's line diff (`xdiff/`, as in git 2.47.3), ported for the line merge:
//! the Myers diff `git merge-file` runs, with the same preparation, the same
//! heuristics and cost limit, and the same post-processing, so that it aligns
//! equal lines exactly where git does.
//!
//! `git merge-file` diffs with no flags (`xpparam_t.flags == 0`: Myers, not
//! minimal, no whitespace options, no indent heuristic), so only that path
//! is ported. One [`diff`]:
//!
//! 1. [`prepare`] (xprepare.c): lines become classes (equal bytes, equal
//!    class; a line is its bytes with its newline, so a last line without
//!    one differs from the same text with one); the common head and tail
//!    are trimmed (`xdl_trim_ends`); of the lines between, those that occur
//!    nowhere in the other file are marked changed at once, and so are lines
//!    occurring "too often" in the other file (about its square root of
//!    times or more) when they sit in a run of such lines
//!    (`xdl_cleanup_records`, `xdl_clean_mmatch`). Myers then sees only the
//!    lines that are left.
//! 2. [`myers`] (xdiffi.c `xdl_recs_cmp`, `xdl_split`): divide and conquer
//!    on the middle snake, giving up optimality past a cost limit (about the
//!    square root of the lines, at least 256: `XDL_MAX_COST_MIN`,
//!    `xdl_bogosqrt`) and taking a long enough snake when one is found
//!    (`XDL_SNAKE_CNT`, `XDL_HEUR_MIN_COST`), so its cost stays near linear
//!    in the file's length times that limit.
//! 3. [`compact`] (xdiffi.c `xdl_change_compact`): each group of changed
//!    lines is slid as far down as it goes, merging with groups it meets,
//!    then back up to line up with a change of the other file if it can.
//!    Run on each file against the other, as `xdl_merge` does.
//! 4. The changes, in order (`xdl_build_script`).

mod compact;
mod myers;
mod prepare;

/// One change: `chg0` lines of the first file from `i0` replaced by `chg1`
/// lines of the second from `i1` (xdiff's `xdchange_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub i0: usize,
    pub chg0: usize,
    pub i1: usize,
    pub chg1: usize,
}

/// One side of a diff (xdiff's `xdfile_t`): each line's class and whether
/// it is changed.
struct File {
    /// Each line's class: equal lines, equal classes.
    class: Vec<u32>,
    /// `changed[i + 1]` says whether line `i` is changed; the first and last
    /// entries stay false (git's `rchg`, indexed from -1 to `nrec`), so
    /// loops over runs of changed lines stop at both ends.
    changed: Vec<bool>,
}

impl File {
    fn len(&self) -> usize {
        self.class.len()
    }

    /// Whether line `i` (from -1 to the length) is changed.
    fn is_changed(&self, i: isize) -> bool {
        self.changed[(i + 1) as usize]
    }

    fn set_changed(&mut self, i: isize, changed: bool) {
        self.changed[(i + 1) as usize] = changed;
    }
}

/// The line diff of `before` and `after` as git's xdiff makes it for `git
/// merge-file` (`xdl_do_diff`, then `xdl_change_compact` both ways, then
/// `xdl_build_script`). Each line includes its newline.
pub fn diff(before: &[&[u8]], after: &[&[u8]]) -> Vec<Change> {
    let (mut f0, mut f1) = prepare::prepare(before, after);
    compact::change_compact(&mut f0, &f1);
    compact::change_compact(&mut f1, &f0);
    build_script(&f0, &f1)
}

/// xdiffi.c's `xdl_build_script`: the runs of changed lines, walked from the
/// end of both files together, in file order.
fn build_script(f0: &File, f1: &File) -> Vec<Change> {
    let mut out = Vec::new();
    let (mut i0, mut i1) = (f0.len() as isize, f1.len() as isize);
    while i0 >= 0 || i1 >= 0 {
        if f0.is_changed(i0 - 1) || f1.is_changed(i1 - 1) {
            let (l0, l1) = (i0, i1);
            while f0.is_changed(i0 - 1) {
                i0 -= 1;
            }
            while f1.is_changed(i1 - 1) {
                i1 -= 1;
            }
            out.push(Change {
                i0: i0 as usize,
                chg0: (l0 - i0) as usize,
                i1: i1 as usize,
                chg1: (l1 - i1) as usize,
            });
        }
        i0 -= 1;
        i1 -= 1;
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &str) -> Vec<&[u8]> {
        s.as_bytes().split_inclusive(|&b| b == b'\n').collect()
    }

    fn d(a: &str, b: &str) -> Vec<(usize, usize, usize, usize)> {
        diff(&lines(a), &lines(b))
            .into_iter()
            .map(|c| (c.i0, c.chg0, c.i1, c.chg1))
            .collect()
    }

    #[test]
    fn equal_files_have_no_changes() {
        assert_eq!(d("a\nb\n", "a\nb\n"), vec![]);
        assert_eq!(d("", ""), vec![]);
    }

    #[test]
    fn insertions_deletions_and_replacements() {
        assert_eq!(d("a\nb\nc\n", "a\nc\n"), vec![(1, 1, 1, 0)]);
        assert_eq!(d("a\nc\n", "a\nb\nc\n"), vec![(1, 0, 1, 1)]);
        assert_eq!(d("a\nb\nc\n", "a\nX\nc\n"), vec![(1, 1, 1, 1)]);
        assert_eq!(d("", "a\n"), vec![(0, 0, 0, 1)]);
        // A last line without its newline is another line.
        assert_eq!(d("a\nb\n", "a\nb"), vec![(1, 1, 1, 1)]);
    }

    #[test]
    fn an_insertion_between_equal_lines_slides_down_as_gits_does() {
        // git diff: the inserted "x" of "x\nx\n" after "x\n" is the last one.
        assert_eq!(d("x\ny\n", "x\nx\ny\n"), vec![(1, 0, 1, 1)]);
        assert_eq!(
            d("{\n}\n", "{\n}\n{\n}\n"),
            vec![(2, 0, 2, 2)],
            "a repeated block is added after the original"
        );
    }

    /// A large file with a few edits on each side: Myers is bounded by the
    /// cost limit and the trimmed ends, so this stays fast (no timing is
    /// asserted; it must just finish), and the changes are the edits.
    #[test]
    fn a_large_file_with_few_edits_diffs_quickly() {
        let base: Vec<String> = (0..100_000)
            .map(|i| format!("line {}\n", i % 977))
            .collect();
        let mut after = base.clone();
        after[10] = "edit\n".into();
        after.insert(50_000, "inserted\n".into());
        after.remove(90_000);
        let b: Vec<&[u8]> = base.iter().map(|l| l.as_bytes()).collect();
        let a: Vec<&[u8]> = after.iter().map(|l| l.as_bytes()).collect();
        let x = diff(&b, &a);
        assert_eq!(x.len(), 3, "{x:?}");
        assert_eq!(
            x[0],
            Change {
                i0: 10,
                chg0: 1,
                i1: 10,
                chg1: 1
            }
        );
        // Completely different large files: the cost limit keeps it linear-ish.
        let other: Vec<String> = (0..100_000)
            .map(|i| format!("other {}\n", i % 313))
            .collect();
        let o: Vec<&[u8]> = other.iter().map(|l| l.as_bytes()).collect();
        let x = diff(&b, &o);
        assert_eq!(
            x,
            vec![Change {
                i0: 0,
                chg0: 100_000,
                i1: 0,
                chg1: 100_000
            }]
        );
    }
}
