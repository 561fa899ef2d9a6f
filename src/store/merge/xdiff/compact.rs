// Derived from git's xdiff (LibXDiff by Davide Libenzi, Copyright (C) 2003
// Davide Libenzi, and the git contributors' changes to it), as in git
// 2.47.3. Like its source, this file is distributed under the GNU Lesser
// General Public License, version 2.1 or (at your option) any later version
// (SPDX: LGPL-2.1-or-later), not under storefs's MIT OR Apache-2.0: see
// src/store/merge/xdiff/mod.rs.

//! xdiffi.c's `xdl_change_compact` without the indent heuristic (`git
//! merge-file` does not turn it on): slide each group of changed lines as
//! far down as it goes, merging with groups it bumps into, then back up to
//! line up with a change in the other file when one was passed on the way.

use super::File;

/// A group of changed lines, `start..end` (`struct xdlgroup`). There is a
/// group, often empty, before the first unchanged line, between any two
/// and after the last.
#[derive(Clone, Copy)]
struct Group {
    start: isize,
    end: isize,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// `group_init`: the first group of `f`.
fn first(f: &File) -> Group {
    let mut end = 0;
    while f.is_changed(end) {
        end += 1;
    }
    Group { start: 0, end }
}

/// `group_next`: move to the next group; false at the end of the file.
fn next(f: &File, g: &mut Group) -> bool {
    if g.end == f.len() as isize {
        return false;
    }
    g.start = g.end + 1;
    g.end = g.start;
    while f.is_changed(g.end) {
        g.end += 1;
    }
    true
}

/// `group_previous`: move to the previous group; false at the start.
fn previous(f: &File, g: &mut Group) -> bool {
    if g.start == 0 {
        return false;
    }
    g.end = g.start - 1;
    g.start = g.end;
    while f.is_changed(g.start - 1) {
        g.start -= 1;
    }
    true
}

/// `group_slide_down`: when the group's first line equals the line after
/// it, move the group down by one (taking in a group it then touches).
fn slide_down(f: &mut File, g: &mut Group) -> bool {
    if g.end < f.len() as isize && f.class[g.start as usize] == f.class[g.end as usize] {
        f.set_changed(g.start, false);
        f.set_changed(g.end, true);
        g.start += 1;
        g.end += 1;
        while f.is_changed(g.end) {
            g.end += 1;
        }
        true
    } else {
        false
    }
}

/// `group_slide_up`: when the group's last line equals the line before it,
/// move the group up by one (taking in a group it then touches).
fn slide_up(f: &mut File, g: &mut Group) -> bool {
    if g.start > 0 && f.class[g.start as usize - 1] == f.class[g.end as usize - 1] {
        g.start -= 1;
        g.end -= 1;
        f.set_changed(g.start, true);
        f.set_changed(g.end, false);
        while f.is_changed(g.start - 1) {
            g.start -= 1;
        }
        true
    } else {
        false
    }
}

/// `xdl_change_compact(f, other, 0)`. `other`'s groups are walked in step
/// with `f`'s (the groups of the two files pair up, one per run of
/// unchanged lines), so that a group of `f` can be put back where it faces
/// a change of `other`.
pub(super) fn change_compact(f: &mut File, other: &File) {
    let mut g = first(f);
    let mut go = first(other);
    loop {
        if !g.is_empty() {
            let mut earliest_end;
            let mut end_matching_other;
            loop {
                let size = g.end - g.start;
                end_matching_other = None;
                // As far up as it goes.
                while slide_up(f, &mut g) {
                    assert!(previous(other, &mut go), "group sync broken sliding up");
                }
                earliest_end = g.end;
                if !go.is_empty() {
                    end_matching_other = Some(g.end);
                }
                // Then as far down.
                while slide_down(f, &mut g) {
                    assert!(next(other, &mut go), "group sync broken sliding down");
                    if !go.is_empty() {
                        end_matching_other = Some(g.end);
                    }
                }
                // Sliding merged groups: again, until it no longer grows.
                if size == g.end - g.start {
                    break;
                }
            }
            // It is as far down as it goes; if it faced a change of the
            // other file on the way, move it back up to the last such place.
            if g.end != earliest_end && end_matching_other.is_some() {
                while go.is_empty() {
                    assert!(slide_up(f, &mut g), "match disappeared");
                    assert!(
                        previous(other, &mut go),
                        "group sync broken sliding to match"
                    );
                }
            }
        }
        if !next(f, &mut g) {
            break;
        }
        assert!(
            next(other, &mut go),
            "group sync broken moving to next group"
        );
    }
    assert!(!next(other, &mut go), "group sync broken at end of file");
}
