//! What ext4 would report for a file, given only its logical layout: the
//! `SEEK_DATA`/`SEEK_HOLE` map of a regular file and the `st_size` and
//! `st_blocks` of files, symlinks and directories. Every mount view (a
//! checkpoint, the browse mount, a fork) answers from these rules, so `du`,
//! `cp --sparse`, `tar --sparse` and `rsync -S` see on a mount what they see
//! on the same tree restored onto ext4 with 4 KiB blocks.
//!
//! - **Data map.** A file's data are its non-hole byte ranges (stored
//!   extents on a checkpoint; base extents and journal writes on a fork). As
//!   ext4 allocates whole blocks, a 4 KiB block holding any data byte is data
//!   as a whole (up to the end of file); every other byte is a hole. Holes
//!   written by the fork (punch-hole) and regions a truncate or
//!   `fallocate` extended are holes, as on ext4 (whose fallocated extents
//!   are unwritten, and read as holes).
//! - **Regular files:** `st_blocks` = 8 × the number of data blocks (an empty
//!   or all-hole file: 0), plus ext4's extent-tree blocks: the inode holds 4
//!   extents; with more, each 340 take a 4 KiB tree block (and each 340 of
//!   those another, …). An extent is a run of contiguous data blocks, at most
//!   32,768 blocks (128 MiB) long. That is the fewest extents ext4 can use: a
//!   file with 5 or more separate data runs, or dense over 512 MiB, gets its
//!   tree block as on ext4 (checked here: 5 islands of data, 600 MiB dense);
//!   ext4 may cut a large file into more extents than this (free-space
//!   fragmentation, block group metadata), so a file of 128–512 MiB of dense
//!   data may show 4 KiB less than on a restore, and beyond 340 extents the
//!   count of tree blocks is a lower bound. ext4 allocates tree blocks at
//!   writeback, so a file written a moment ago shows them only after it.
//! - **Symlinks:** 0 blocks when the target is under 60 bytes (ext4 keeps it
//!   in the inode: a "fast" symlink), else one block (8).
//! - **Directories:** ext4 directory entries take `8 + name length rounded up
//!   to 4` bytes ("." and ".." 12 each) in 4 KiB blocks that keep 12 bytes
//!   for a checksum tail. A directory whose entries fit in one block is one
//!   block. A larger one is hashed (htree): one root block plus leaves that
//!   split in halves when full, so on average they are ln 2 (69 %) full:
//!   leaves = max(2, round(bytes / (4084 × ln 2))), plus one index block per
//!   ~500 leaves beyond the first 500. This is the expected size of a
//!   directory that only grew; ext4's real size depends on its hash seed
//!   (a few blocks either way for thousands of entries) and never shrinks
//!   when entries are removed, which these rules do not model.
//!   `st_size` = blocks × 4096, `st_blocks` = blocks × 8.

/// ext4's block size (the common default, and the mounts' `st_blksize`).
pub const BLOCK: u64 = 4096;
/// Bytes of a directory block usable by entries (the rest is the checksum tail).
const DIR_BLOCK_USABLE: u64 = BLOCK - 12;
/// Entries of one htree index block (root or node), about.
const INDEX_ENTRIES: u64 = 508;
/// The longest extent, in blocks (of initialized data).
const MAX_EXTENT_BLOCKS: u64 = 32768;
/// Extents the inode itself holds.
const EXTENTS_IN_INODE: u64 = 4;
/// Extents (or index entries) of one extent-tree block: (4096 - 12 header -
/// 4 checksum tail) / 12.
const EXTENTS_PER_BLOCK: u64 = 340;
/// The longest symlink target ext4 keeps in the inode (exclusive bound).
const FAST_SYMLINK: u64 = 60;

/// `st_blocks` (512-byte units) of `blocks` 4 KiB blocks, saturating.
fn sectors(blocks: u64) -> u64 {
    blocks.saturating_mul(BLOCK / 512)
}

/// Where to seek from (`lseek` whence): the two this module answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// `SEEK_DATA`: the first data byte at or after the offset.
    Data,
    /// `SEEK_HOLE`: the first hole byte at or after the offset (the end of
    /// file counts as a hole).
    Hole,
}

/// The data ranges of a file rounded out to whole blocks, clipped to `size`
/// and merged: what ext4 reports as data. `ranges` are byte ranges
/// `[start, end)` in order, not overlapping; empty ones are skipped.
pub fn data_blocks(
    size: u64,
    ranges: impl IntoIterator<Item = (u64, u64)>,
) -> impl Iterator<Item = (u64, u64)> {
    let mut ranges = ranges
        .into_iter()
        .filter(move |&(s, e)| s < e && s < size)
        .map(move |(s, e)| {
            let start = s - s % BLOCK;
            let end = e.min(size).saturating_add(BLOCK - 1);
            (start, (end - end % BLOCK).min(size))
        })
        .peekable();
    std::iter::from_fn(move || {
        let (start, mut end) = ranges.next()?;
        while let Some(&(s, e)) = ranges.peek()
            && s <= end
        {
            end = end.max(e);
            ranges.next();
        }
        Some((start, end))
    })
}

/// `st_blocks` of a regular file of `size` bytes whose data are `ranges`
/// (as for [`data_blocks`]): its data blocks and extent-tree blocks.
pub fn file_blocks(size: u64, ranges: impl IntoIterator<Item = (u64, u64)>) -> u64 {
    let (mut blocks, mut extents) = (0u64, 0u64);
    for (s, e) in data_blocks(size, ranges) {
        let run = (e - s).div_ceil(BLOCK);
        blocks = blocks.saturating_add(run);
        extents = extents.saturating_add(run.div_ceil(MAX_EXTENT_BLOCKS));
    }
    sectors(blocks.saturating_add(extent_tree_blocks(extents)))
}

/// The tree blocks ext4 needs for `extents` extents: none while the inode
/// holds them all, else a level of blocks of [`EXTENTS_PER_BLOCK`] each, and
/// levels above it until the inode holds the top one.
fn extent_tree_blocks(mut extents: u64) -> u64 {
    let mut blocks = 0u64;
    while extents > EXTENTS_IN_INODE {
        extents = extents.div_ceil(EXTENTS_PER_BLOCK);
        blocks = blocks.saturating_add(extents);
    }
    blocks
}

/// `st_blocks` of a symlink whose target is `len` bytes.
pub fn symlink_blocks(len: u64) -> u64 {
    if len < FAST_SYMLINK { 0 } else { sectors(1) }
}

/// `(st_size, st_blocks)` of a directory holding entries with these name
/// lengths ("." and ".." not included).
pub fn dir_size(name_lens: impl IntoIterator<Item = usize>) -> (u64, u64) {
    let bytes = name_lens
        .into_iter()
        .map(|n| 8 + (n as u64).div_ceil(4) * 4)
        .fold(0u64, u64::saturating_add);
    let blocks = if bytes.saturating_add(24) <= DIR_BLOCK_USABLE {
        1
    } else {
        // Leaves of a tree of half-split blocks are ln 2 full on average.
        let leaves = ((bytes as f64 / (DIR_BLOCK_USABLE as f64 * std::f64::consts::LN_2)).round()
            as u64)
            .max(2);
        let index = leaves.saturating_sub(INDEX_ENTRIES).div_ceil(INDEX_ENTRIES);
        1 + leaves + index
    };
    (blocks.saturating_mul(BLOCK), sectors(blocks))
}

/// Answer `lseek(offset, whence)` on a file of `size` bytes whose data are
/// `ranges` (as for [`data_blocks`]; ranges that end at or before `offset`
/// may be left out). As ext4: `None` (`ENXIO`) when `offset` is negative or
/// at or past the end of file, and for `SEEK_DATA` when no data follows;
/// `SEEK_HOLE` finds the end of file when no hole follows.
pub fn seek(
    size: u64,
    ranges: impl IntoIterator<Item = (u64, u64)>,
    offset: i64,
    whence: Seek,
) -> Option<u64> {
    let offset = u64::try_from(offset).ok().filter(|&o| o < size)?;
    let mut pos = offset;
    for (start, end) in data_blocks(size, ranges) {
        if end <= pos {
            continue;
        }
        match whence {
            Seek::Data => return Some(start.max(pos)),
            Seek::Hole if start > pos => return Some(pos),
            Seek::Hole => pos = end,
        }
    }
    match whence {
        Seek::Data => None,
        Seek::Hole => Some(pos.min(size)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K4: u64 = BLOCK;

    fn map(size: u64, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
        data_blocks(size, ranges.iter().copied()).collect()
    }

    #[test]
    fn data_rounds_out_to_blocks_and_merges() {
        assert_eq!(map(100, &[(0, 100)]), [(0, 100)]);
        assert_eq!(map(10 * K4, &[(0, 100)]), [(0, K4)]);
        assert_eq!(
            map(10 * K4, &[(5000, 5001), (8191, 8193), (9 * K4, 10 * K4)]),
            [(K4, 3 * K4), (9 * K4, 10 * K4)]
        );
        // Past the end of file: clipped or dropped; empty ranges skipped.
        assert_eq!(
            map(K4 + 1, &[(0, 0), (K4, 9 * K4), (9 * K4, 10 * K4)]),
            [(K4, K4 + 1)]
        );
        assert_eq!(map(u64::MAX, &[(u64::MAX - 3, u64::MAX)]).len(), 1);
    }

    #[test]
    fn file_blocks_count_touched_blocks() {
        assert_eq!(file_blocks(0, []), 0);
        assert_eq!(file_blocks(1 << 30, []), 0);
        assert_eq!(file_blocks(1, [(0, 1)]), 8);
        assert_eq!(file_blocks(K4 + 1, [(0, K4 + 1)]), 16);
        assert_eq!(file_blocks(64 << 20, [(32 << 20, (32 << 20) + K4)]), 8);
        assert_eq!(file_blocks(10 * K4, [(100, 200), (300, 400)]), 8);
        // Extent-tree blocks, as measured on ext4 here: 4 islands of data
        // fit in the inode, 5 or 6 need one tree block; 600 MiB dense is 5
        // extents of at most 128 MiB: one tree block.
        let islands = |n: u64| file_blocks(n << 20, (0..n).map(|i| (i << 20, (i << 20) + 1)));
        assert_eq!(islands(4), 32);
        assert_eq!(islands(5), 48);
        assert_eq!(islands(6), 56);
        assert_eq!(file_blocks(600 << 20, [(0, 600 << 20)]), (600 << 11) + 8);
        assert_eq!(extent_tree_blocks(4), 0);
        assert_eq!(extent_tree_blocks(340 * 4), 4);
        assert_eq!(extent_tree_blocks(340 * 4 + 1), 5 + 1);
    }

    #[test]
    fn symlinks_under_60_bytes_are_fast() {
        assert_eq!(symlink_blocks(1), 0);
        assert_eq!(symlink_blocks(59), 0);
        assert_eq!(symlink_blocks(60), 8);
        assert_eq!(symlink_blocks(4095), 8);
    }

    #[test]
    fn directories_grow_like_ext4() {
        assert_eq!(dir_size([]), (K4, 8));
        // 300 names of 9 bytes (20-byte entries): hashed, root + 2 leaves, as
        // ext4 made it here; 1000 names of ~37 bytes: 18 blocks, as ext4.
        assert_eq!(dir_size([9; 300]), (3 * K4, 24));
        let long = (1..=1000).map(|i: usize| 36 + i.to_string().len());
        assert_eq!(dir_size(long), (18 * K4, 144));
        // The last that fits in one block, and the first that does not.
        assert_eq!(dir_size([4; 338]).0, K4);
        assert_eq!(dir_size([4; 339]).0, 3 * K4);
    }

    #[test]
    fn seek_answers_as_ext4() {
        let (d, h) = (Seek::Data, Seek::Hole);
        // hole, data [4K, 8K), hole, data [12K, 13K) = EOF
        let r = [(K4, 2 * K4), (3 * K4, 3 * K4 + 1024)];
        let size = 3 * K4 + 1024;
        let s = |o: u64, w| seek(size, r, o as i64, w);
        assert_eq!(s(0, d), Some(K4));
        assert_eq!(s(0, h), Some(0));
        assert_eq!(s(K4 + 5, d), Some(K4 + 5));
        assert_eq!(s(K4 + 5, h), Some(2 * K4));
        assert_eq!(s(2 * K4, d), Some(3 * K4));
        assert_eq!(s(3 * K4, h), Some(size));
        assert_eq!(s(size - 1, d), Some(size - 1));
        assert_eq!(s(size, d), None);
        assert_eq!(s(size, h), None);
        assert_eq!(seek(size, r, -1, d), None);
        // All hole, no hole, empty.
        assert_eq!(seek(5 * K4, [], 0, d), None);
        assert_eq!(seek(5 * K4, [], 7, h), Some(7));
        assert_eq!(seek(5 * K4, [(0, 5 * K4)], 7, h), Some(5 * K4));
        assert_eq!(seek(0, [], 0, h), None);
    }
}
