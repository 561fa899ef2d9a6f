//! The framed layout of large objects (object layout 2, docs/format.md):
//! the content cut into [`FRAME_SIZE`] pieces, each its own zstd frame (with
//! a content checksum, without a content size), followed by a frame table in
//! a zstd skippable frame, as zstd's seekable format lays it out:
//!
//! ```text
//! frame 0 | frame 1 | … | frame n-1 | table
//! table  := 0x184D2A5E (u32 LE) | 8·n + 9 (u32 LE)
//!           | n × (stored size (u32 LE) | content size (u32 LE))
//!           | n (u32 LE) | descriptor (u8, 0) | 0x8F92EAB1 (u32 LE)
//! ```
//!
//! A plain zstd decoder reads the whole object (it decodes concatenated
//! frames and skips skippable ones); with the table a reader decodes only the
//! frames a byte range touches. Parsing never panics on hostile bytes.

use std::ops::Range;

pub use super::codec::Malformed;

/// Content bytes per frame (the last frame of an object may be shorter).
/// Objects of at most this many bytes are one plain frame, as before.
pub const FRAME_SIZE: usize = 64 * 1024;
/// Content bytes per frame where content does not compress
/// ([`poorly_compressed`]): a random 4 KiB read then reads 16 KiB from the
/// disk instead of 64 KiB, and compression loses nothing by the cut.
pub const SMALL_FRAME: usize = 16 * 1024;
/// What a frame of content stored raw (incompressible) takes beyond the
/// content: frame header (magic, descriptor, window), block header, checksum.
pub const RAW_FRAME_OVERHEAD: u64 = 4 + 1 + 1 + 3 + 4;
/// The most bytes a frame of incompressible content takes beyond the content
/// (frame header, block headers, checksum), rounded up.
pub const FRAME_OVERHEAD: u64 = 64;
/// The most content one frame may declare (a hostile table cannot make a
/// reader allocate more for one frame).
pub const FRAME_MAX: u32 = 4 << 20;

const SKIPPABLE_MAGIC: u32 = 0x184D_2A5E;
const SEEKABLE_MAGIC: u32 = 0x8F92_EAB1;
const ZSTD_MAGIC: u32 = 0xFD2F_B528;
/// Skippable frame header: magic, size.
const HEADER: usize = 8;
/// Per frame: stored size, content size.
const ENTRY: usize = 8;
/// Frame count, descriptor, seekable magic.
pub const FOOTER: usize = 9;

/// One frame of a framed object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Where its stored bytes start in the object's stored bytes.
    pub stored: u64,
    pub stored_len: u32,
    /// Where its content starts in the object's content.
    pub start: u64,
    pub len: u32,
}

impl Frame {
    pub fn stored_range(&self) -> Range<u64> {
        self.stored..self.stored + u64::from(self.stored_len)
    }
}

/// A framed object's frame table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameTable {
    pub frames: Vec<Frame>,
}

impl FrameTable {
    /// The object's content length.
    pub fn content_len(&self) -> u64 {
        self.frames.last().map_or(0, |f| f.start + u64::from(f.len))
    }

    /// The frames that hold any byte of `range` (of the content), in order.
    pub fn covering(&self, range: Range<u64>) -> &[Frame] {
        if range.start >= range.end {
            return &[];
        }
        let first = self
            .frames
            .partition_point(|f| f.start + u64::from(f.len) <= range.start);
        let end = self.frames.partition_point(|f| f.start < range.end);
        &self.frames[first..end.max(first)]
    }
}

/// The length of the table of an object of `frames` frames.
pub fn table_len(frames: usize) -> usize {
    HEADER + frames * ENTRY + FOOTER
}

/// How many [`FRAME_SIZE`] frames content of `len` bytes is cut into.
pub fn frame_count(len: u64) -> usize {
    len.div_ceil(FRAME_SIZE as u64) as usize
}

/// Whether `content` bytes that compressed to `stored` did so poorly (by
/// less than 4:3): the writer cuts such content into [`SMALL_FRAME`]s.
pub fn poorly_compressed(stored: usize, content: usize) -> bool {
    stored.saturating_mul(4) > content.saturating_mul(3)
}

/// Append to `out` a zstd frame of `content` (at most [`SMALL_FRAME`]
/// bytes) stored raw: a header without a content size (16 KiB window), one
/// raw block, the content checksum; [`RAW_FRAME_OVERHEAD`] bytes beyond the
/// content, what zstd itself makes of content it cannot compress. The
/// writer builds these for the small frames of a piece zstd stored raw
/// whole, instead of compressing each small piece again (that costs 2.5x
/// the time of the large one: its match search restarts at every frame).
pub fn put_raw_frame(out: &mut Vec<u8>, content: &[u8]) {
    assert!(!content.is_empty() && content.len() <= SMALL_FRAME);
    out.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
    // Frame header descriptor: a content checksum; no content size, not a
    // single segment, no dictionary. Window: 2^(10 + 4) = 16 KiB.
    out.push(0x04);
    out.push(4 << 3);
    // Block header: the last block, raw, its size.
    let block = 1u32 | (content.len() as u32) << 3;
    out.extend_from_slice(&block.to_le_bytes()[..3]);
    out.extend_from_slice(content);
    let sum = xxhash_rust::xxh64::xxh64(content, 0) as u32;
    out.extend_from_slice(&sum.to_le_bytes());
}

/// Where the table and frames of a framed object of `len` content bytes and
/// `stored_len` stored bytes probably are, before its table is read, so
/// that the table and the frames a read needs can be fetched together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guess {
    /// How many bytes at the end of the object hold the whole table of any
    /// object this store writes (every frame but the last holds at least
    /// [`SMALL_FRAME`] bytes); an object with a longer table needs a second
    /// read.
    pub table_len: u64,
    /// The frames' content size, and the size of each stored frame when
    /// every frame is stored raw (then the guess is exact).
    frame: u64,
    raw: Option<u64>,
    /// Frames of that size the content makes.
    count: u64,
    len: u64,
    /// Stored bytes before the table.
    data_len: u64,
}

/// The content length an object of `stored_len` stored bytes has if every
/// frame is stored raw (the writer's frame sizes, 16 KiB first, as
/// [`Guess::of`] tries them), or `None` when no content length gives that
/// stored length. For a reader that does not know the content length; a
/// guess that is wrong (a compressed object whose length happens to fit)
/// fails the frames' checks and the reader reads the table.
pub fn raw_len(stored_len: u64) -> Option<u64> {
    [SMALL_FRAME as u64, FRAME_SIZE as u64]
        .into_iter()
        .find_map(|frame| {
            // stored = len + n·overhead + table(n), with len in ((n-1)·frame, n·frame].
            let per_frame = frame + RAW_FRAME_OVERHEAD + ENTRY as u64;
            let n0 = stored_len / per_frame;
            (n0.max(1)..=n0 + 1).find_map(|n| {
                let fixed = n * RAW_FRAME_OVERHEAD + table_len(n as usize) as u64;
                let len = stored_len.checked_sub(fixed)?;
                (len > (n - 1) * frame && len <= n * frame).then_some(len)
            })
        })
}

impl Guess {
    pub fn of(len: u64, stored_len: u64) -> Guess {
        let longest = table_len(len.div_ceil(SMALL_FRAME as u64) as usize) as u64;
        // Content that does not compress is stored raw: each frame is its
        // content plus a fixed overhead, so the stored length tells which
        // frame size the writer chose (16 KiB now, 64 KiB before).
        for frame in [SMALL_FRAME as u64, FRAME_SIZE as u64] {
            let n = len.div_ceil(frame);
            let table = table_len(n as usize) as u64;
            if stored_len == len + n * RAW_FRAME_OVERHEAD + table {
                return Guess {
                    table_len: longest,
                    frame,
                    raw: Some(frame + RAW_FRAME_OVERHEAD),
                    count: n,
                    len,
                    data_len: stored_len - table,
                };
            }
        }
        let frame = if poorly_compressed(stored_len as usize, len as usize) {
            SMALL_FRAME
        } else {
            FRAME_SIZE
        } as u64;
        let n = len.div_ceil(frame);
        Guess {
            table_len: longest,
            frame,
            raw: None,
            count: n,
            len,
            data_len: stored_len.saturating_sub(table_len(n as usize) as u64),
        }
    }

    /// The frame table the object has if it is stored raw, as its length
    /// says: then a read needs no table read. A reader that finds something
    /// else where it says (a frame without its checksum, of another size,
    /// whose checksum fails) reads the real table.
    pub fn table_if_raw(&self) -> Option<FrameTable> {
        let stored = self.raw?;
        let frames = (0..self.count)
            .map(|i| {
                let start = i * self.frame;
                let len = (self.len - start).min(self.frame);
                Frame {
                    stored: i * stored,
                    stored_len: (len + RAW_FRAME_OVERHEAD) as u32,
                    start,
                    len: len as u32,
                }
            })
            .collect();
        Some(FrameTable { frames })
    }

    /// The stored bytes that probably hold the frames of content `range`
    /// (exactly those when the object is stored raw; otherwise from where
    /// frames of the average stored size would put them to where they end
    /// at most when stored raw).
    pub fn frames(&self, range: Range<u64>) -> Range<u64> {
        if range.start >= range.end {
            return 0..0;
        }
        let (first, last) = (range.start / self.frame, (range.end - 1) / self.frame);
        let (lo, hi) = match self.raw {
            Some(stored) => (first * stored, (last + 1) * stored),
            None => (
                first * (self.data_len / self.count.max(1)),
                (last + 1).saturating_mul(self.frame + FRAME_OVERHEAD),
            ),
        };
        lo.min(self.data_len)..hi.min(self.data_len)
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// From the last [`FOOTER`] bytes (or more) of stored bytes: the length of
/// the whole table when they end with a frame table's footer, `None` when
/// they do not (a single-frame object).
pub fn table_len_from_footer(tail: &[u8]) -> Result<Option<usize>, Malformed> {
    if tail.len() < FOOTER {
        return Ok(None);
    }
    let footer = &tail[tail.len() - FOOTER..];
    if u32_at(footer, 5) != SEEKABLE_MAGIC {
        return Ok(None);
    }
    if footer[4] != 0 {
        return Err(Malformed("unknown frame table descriptor"));
    }
    let n = u32_at(footer, 0) as usize;
    if n == 0 {
        return Err(Malformed("frame table of no frames"));
    }
    n.checked_mul(ENTRY)
        .and_then(|b| b.checked_add(HEADER + FOOTER))
        .map(Some)
        .ok_or(Malformed("frame count out of range"))
}

/// Parse `table` (exactly the last [`table_len_from_footer`] bytes of an
/// object of `stored_len` stored bytes). The frames must exactly fill the
/// bytes before the table, and each hold 1 to [`FRAME_MAX`] bytes.
pub fn parse_table(table: &[u8], stored_len: u64) -> Result<FrameTable, Malformed> {
    let Some(len) = table_len_from_footer(table)? else {
        return Err(Malformed("no frame table footer"));
    };
    if table.len() != len || len as u64 > stored_len {
        return Err(Malformed(
            "frame table length does not match its frame count",
        ));
    }
    if u32_at(table, 0) != SKIPPABLE_MAGIC || u32_at(table, 4) as usize != len - HEADER {
        return Err(Malformed("frame table header is wrong"));
    }
    let n = (len - HEADER - FOOTER) / ENTRY;
    let mut frames = Vec::with_capacity(n);
    let (mut stored, mut start) = (0u64, 0u64);
    for i in 0..n {
        let at = HEADER + i * ENTRY;
        let (stored_len, content_len) = (u32_at(table, at), u32_at(table, at + 4));
        if stored_len == 0 || content_len == 0 || content_len > FRAME_MAX {
            return Err(Malformed("frame table entry out of range"));
        }
        frames.push(Frame {
            stored,
            stored_len,
            start,
            len: content_len,
        });
        stored += u64::from(stored_len);
        start += u64::from(content_len);
    }
    if stored + len as u64 != stored_len {
        return Err(Malformed("frame sizes do not add up to the object"));
    }
    Ok(FrameTable { frames })
}

/// Append the table for `frames` (stored size, content size each) to `out`.
pub fn put_table(out: &mut Vec<u8>, frames: &[(u32, u32)]) {
    let len = table_len(frames.len());
    out.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    out.extend_from_slice(&((len - HEADER) as u32).to_le_bytes());
    for (stored, content) in frames {
        out.extend_from_slice(&stored.to_le_bytes());
        out.extend_from_slice(&content.to_le_bytes());
    }
    out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
    out.push(0);
    out.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
}

/// Whether `stored` starts with a zstd frame that declares its content size
/// (every single-frame object; a framed object's frames do not).
pub fn declares_size(stored: &[u8]) -> bool {
    // Frame_Header_Descriptor: Frame_Content_Size_flag (bits 7-6) or
    // Single_Segment_flag (bit 5) means the size is there.
    stored.len() > 4 && u32_at(stored, 0) == ZSTD_MAGIC && stored[4] & 0xE0 != 0
}

/// Whether `frame` starts with a zstd frame header that has a content
/// checksum (each frame this store writes does; a partial read relies on it).
pub fn has_checksum(frame: &[u8]) -> bool {
    frame.len() > 4 && u32_at(frame, 0) == ZSTD_MAGIC && frame[4] & 0x04 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_len_inverts_the_raw_stored_length() {
        for frame in [SMALL_FRAME as u64, FRAME_SIZE as u64] {
            for len in [
                1,
                100,
                frame - 1,
                frame,
                frame + 1,
                5 * frame,
                5 * frame + 7,
                300_000,
                4 << 20,
            ] {
                let n = len.div_ceil(frame);
                let stored = len + n * RAW_FRAME_OVERHEAD + table_len(n as usize) as u64;
                let got = raw_len(stored).expect("a raw length");
                // Both frame sizes may fit one stored length; the reader
                // tries 16 KiB first, as the guess does, and its frames'
                // checks tell.
                let again = got.div_ceil(SMALL_FRAME as u64);
                let small = got + again * RAW_FRAME_OVERHEAD + table_len(again as usize) as u64;
                assert!(
                    got == len || (frame == FRAME_SIZE as u64 && small == stored),
                    "{len} in {frame}: {got}"
                );
                assert!(Guess::of(got, stored).table_if_raw().is_some());
            }
        }
        assert_eq!(raw_len(0), None);
        assert_eq!(raw_len(10), None);
    }

    fn table_of(frames: &[(u32, u32)]) -> Vec<u8> {
        let mut t = Vec::new();
        put_table(&mut t, frames);
        t
    }

    #[test]
    fn tables_round_trip_and_cover_ranges() {
        let t = table_of(&[(100, 65536), (50, 65536), (7, 10)]);
        assert_eq!(t.len(), table_len(3));
        assert_eq!(table_len_from_footer(&t), Ok(Some(t.len())));
        let table = parse_table(&t, 157 + t.len() as u64).unwrap();
        assert_eq!(table.content_len(), 131082);
        assert_eq!(table.frames[1].stored_range(), 100..150);
        assert_eq!(table.frames[2].start, 131072);
        assert_eq!(table.covering(0..1).len(), 1);
        assert_eq!(table.covering(65535..65537)[0].start, 0);
        assert_eq!(table.covering(65535..65537).len(), 2);
        assert_eq!(table.covering(65536..65537)[0].start, 65536);
        assert_eq!(table.covering(0..131082).len(), 3);
        assert_eq!(table.covering(131081..131082)[0].start, 131072);
        assert!(table.covering(5..5).is_empty());
        assert!(table.covering(131082..131090).is_empty());
    }

    #[test]
    fn raw_frames_are_what_zstd_makes_of_content_it_cannot_compress() {
        let mut z = zstd::bulk::Compressor::new(3).unwrap();
        z.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
            .unwrap();
        z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
            .unwrap();
        for n in [1, 100, 4096, SMALL_FRAME - 1, SMALL_FRAME] {
            let mut content = vec![0u8; n];
            rustix::rand::getrandom(&mut content, rustix::rand::GetRandomFlags::empty()).unwrap();
            let mut ours = Vec::new();
            put_raw_frame(&mut ours, &content);
            assert_eq!(ours.len() as u64, n as u64 + RAW_FRAME_OVERHEAD, "{n}");
            assert!(has_checksum(&ours) && !declares_size(&ours));
            assert_eq!(zstd::stream::decode_all(&ours[..]).unwrap(), content, "{n}");
            if n >= 4096 {
                // zstd stores such content raw too, the same bytes but for
                // the window it declares.
                let theirs = z.compress(&content).unwrap();
                assert_eq!(theirs.len(), ours.len(), "{n}");
                assert_eq!(theirs[..5], ours[..5], "{n}");
                assert_eq!(theirs[6..], ours[6..], "{n}");
            }
            // A damaged byte anywhere is refused by the checksum or the
            // structure, never decoded to other bytes.
            for at in [0, 5, 7, 9, ours.len() / 2, ours.len() - 1] {
                let mut bad = ours.clone();
                bad[at] ^= 0x10;
                if let Ok(got) = zstd::stream::decode_all(&bad[..]) {
                    assert_eq!(got, content, "{n}: byte {at}");
                }
            }
        }
    }

    #[test]
    fn bad_tables_are_refused_without_panicking() {
        let good = table_of(&[(100, 65536), (50, 10)]);
        let stored = 150 + good.len() as u64;
        assert!(parse_table(&good, stored).is_ok());
        // Wrong object length, a count that is not the table's, a zero entry,
        // a huge frame, a bad header, an unknown descriptor.
        assert!(parse_table(&good, stored + 1).is_err());
        assert!(parse_table(&good, 3).is_err());
        let mut t = good.clone();
        let n = t.len() - FOOTER;
        t[n] = 3;
        assert!(parse_table(&t, stored).is_err());
        let mut t = good.clone();
        t[HEADER..HEADER + 4].copy_from_slice(&0u32.to_le_bytes());
        assert!(parse_table(&t, stored).is_err());
        let t = table_of(&[(100, FRAME_MAX + 1)]);
        assert!(parse_table(&t, 100 + t.len() as u64).is_err());
        let mut t = good.clone();
        t[0] ^= 1;
        assert!(parse_table(&t, stored).is_err());
        let mut t = good.clone();
        let d = t.len() - 5;
        t[d] = 0x80;
        assert!(table_len_from_footer(&t).is_err());
        let mut t = good.clone();
        let n = t.len() - FOOTER;
        t[n..n + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(parse_table(&t, stored).is_err());
        t[n..n + 4].copy_from_slice(&0u32.to_le_bytes());
        assert!(table_len_from_footer(&t).is_err());
        // Every truncation and every single-byte change: an error or another
        // table, never a panic.
        for cut in 0..good.len() {
            let _ = table_len_from_footer(&good[cut..]);
            let _ = parse_table(&good[cut..], stored);
        }
        for i in 0..good.len() {
            for b in [0u8, 1, 0x7f, 0xff] {
                let mut t = good.clone();
                t[i] = b;
                let _ = parse_table(&t, stored);
            }
        }
        // No footer: not framed.
        assert_eq!(table_len_from_footer(b"plain zstd frame bytes"), Ok(None));
    }
}
