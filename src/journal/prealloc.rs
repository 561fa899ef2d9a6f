//! Space `fallocate` reserved and nothing has written yet, per file, for the
//! life of the open fork ([`Prealloc`]).
//!
//! A fork stores no blocks: its data is journal records and stored objects,
//! so `fallocate` cannot reserve anything on disk. What programs (and
//! xfstests generic/213, 568) see of a preallocation is kept here instead:
//!
//! - `st_blocks` counts the reserved blocks as ext4 counts allocated ones
//!   (past the end of file too, for `FALLOC_FL_KEEP_SIZE`), so a later write
//!   into the range does not grow it;
//! - `statfs` shows the reserved bytes as used, and a `fallocate` of more
//!   than the free space left fails with `ENOSPC`, as on ext4. The space of
//!   a file comes back when its last name goes (ext4: when it is closed too;
//!   here the kernel's forget comes some time after the close).
//!
//! Limits, honestly: none of this is journaled. The reservation is held in
//! memory while the fork is open; after a remount (or a crash) the ranges
//! read as the holes they always were, with the blocks of a hole. The data
//! and the size are journaled as before (a mode-0 `fallocate` past the end is
//! a `Truncate` record), so nothing a program wrote is lost; only the
//! accounting goes. Reads never depend on it (a reserved range is a hole
//! and reads as zeros either way).

use std::collections::HashMap;

use parking_lot::Mutex;

/// Reserved byte ranges by inode, each list sorted and not overlapping.
#[derive(Default)]
pub struct Prealloc {
    ranges: Mutex<HashMap<u64, Vec<(u64, u64)>>>,
}

impl Prealloc {
    /// Reserve `[start, end)` of `ino`; returns how many of those bytes were
    /// not reserved already.
    pub fn add(&self, ino: u64, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let mut map = self.ranges.lock();
        let list = map.entry(ino).or_default();
        let before = total(list);
        remove(list, start, end);
        let at = list.partition_point(|&(s, _)| s < start);
        list.insert(at, (start, end));
        merge(list);
        total(list) - before
    }

    /// How many bytes of `[start, end)` of `ino` are not reserved.
    pub fn unreserved(&self, ino: u64, start: u64, end: u64) -> u64 {
        let map = self.ranges.lock();
        let held: u64 = map.get(&ino).map_or(0, |l| {
            l.iter()
                .map(|&(s, e)| e.min(end).saturating_sub(s.max(start)))
                .sum()
        });
        (end - start) - held
    }

    /// `[start, end)` of `ino` is no longer reserved: written (it is data
    /// now) or punched.
    pub fn release(&self, ino: u64, start: u64, end: u64) {
        let mut map = self.ranges.lock();
        if let Some(list) = map.get_mut(&ino) {
            remove(list, start, end);
            if list.is_empty() {
                map.remove(&ino);
            }
        }
    }

    /// Truncated to `size`: what lies past it goes (ext4 frees the blocks
    /// past the new end, reserved ones included).
    pub fn truncate(&self, ino: u64, size: u64) {
        self.release(ino, size, u64::MAX);
    }

    /// The reserved ranges of `ino`, in order (`None`: none).
    pub fn of(&self, ino: u64) -> Option<Vec<(u64, u64)>> {
        self.ranges.lock().get(&ino).cloned()
    }

    /// Bytes reserved in all, after dropping the files `gone` says no longer
    /// exist.
    pub fn reserved(&self, mut gone: impl FnMut(u64) -> bool) -> u64 {
        let mut map = self.ranges.lock();
        map.retain(|&ino, _| !gone(ino));
        map.values().map(|l| total(l)).sum()
    }
}

fn total(list: &[(u64, u64)]) -> u64 {
    list.iter().map(|&(s, e)| e - s).sum()
}

/// Take `[start, end)` out of a sorted list of ranges.
fn remove(list: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let mut out = Vec::with_capacity(list.len() + 1);
    for &(s, e) in list.iter() {
        if e <= start || s >= end {
            out.push((s, e));
            continue;
        }
        if s < start {
            out.push((s, start));
        }
        if e > end {
            out.push((end, e));
        }
    }
    *list = out;
}

/// Join touching ranges of a sorted list.
fn merge(list: &mut Vec<(u64, u64)>) {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(list.len());
    for &(s, e) in list.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    *list = out;
}

/// The data ranges `data` (in order, as `state::data_ranges` gives them)
/// and the reserved ranges `held` (in order) as one list in order of their
/// starts, for `ext4::file_blocks`.
pub fn with_reserved(
    data: impl Iterator<Item = (u64, u64)>,
    held: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = data.collect();
    out.extend_from_slice(held);
    out.sort_unstable();
    merge(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_add_release_and_truncate() {
        let p = Prealloc::default();
        assert_eq!(p.add(1, 0, 100), 100);
        assert_eq!(p.add(1, 50, 150), 50, "only the new part counts");
        assert_eq!(p.of(1), Some(vec![(0, 150)]));
        assert_eq!(p.unreserved(1, 100, 200), 50);
        p.release(1, 20, 30);
        assert_eq!(p.of(1), Some(vec![(0, 20), (30, 150)]));
        p.truncate(1, 40);
        assert_eq!(p.of(1), Some(vec![(0, 20), (30, 40)]));
        assert_eq!(p.add(2, 10, 20), 10);
        assert_eq!(p.reserved(|_| false), 40);
        assert_eq!(
            p.reserved(|ino| ino == 1),
            10,
            "a gone file's reservation goes"
        );
        p.release(2, 0, 100);
        assert_eq!(p.of(2), None);
        assert_eq!(
            with_reserved([(0, 10), (40, 50)].into_iter(), &[(5, 20), (60, 70)]),
            vec![(0, 20), (40, 50), (60, 70)]
        );
    }
}
