//! File data: write, truncate, fallocate and the read plan.
//!
//! Each record of this family (`Write`, `Truncate`, `PunchHole`) is one
//! `record_*` function: its checks, then [`Log::append`], then its effect on
//! the file's piece map (`extents.rs`). A truncate through setattr is logged
//! by `attrs.rs` as a `Truncate` record.

use super::super::record::{FRAME_HEADER, MAX_WRITE_DATA, Record, write_head};
use super::super::{Error, Fallocate, Result};
use super::extents::{Piece, ReadPlan, Src, plan, punch};
use super::{Ctx, ForkState, Log, MAX_FILE_SIZE, now_ns};

impl ForkState {
    // ------------------------------------------------------------ live ops

    /// What to read for `[offset, offset + size)` of file `ino`, clipped to its size.
    pub fn plan_read(&self, ino: u64, offset: u64, size: u64) -> Result<ReadPlan> {
        let f = self.inode(ino)?.file()?;
        if offset >= f.size {
            return Ok(Vec::new());
        }
        let end = offset.saturating_add(size).min(f.size);
        Ok(plan(&f.pieces, offset, end))
    }

    /// Write `data` at `offset` (or at the end of the file when `offset` is
    /// `None`: O_APPEND); returns the offset written at. Split into records of
    /// at most [`MAX_WRITE_DATA`] bytes, all appended under the caller's lock.
    pub fn write(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        offset: Option<u64>,
        data: &[u8],
    ) -> Result<u64> {
        let f = self.inode(ino)?.file()?;
        let offset = offset.unwrap_or(f.size);
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > MAX_FILE_SIZE)
        {
            return Err(Error::FileTooLarge);
        }
        let t = now_ns();
        let mut at = offset;
        for part in data.chunks(MAX_WRITE_DATA) {
            // A `Record::Write` appended from the caller's buffer, without
            // copying the data into a record and its frame.
            let head = write_head(ino, at, t, part.len());
            let log = Log::AppendParts {
                wal: ctx.wal,
                head: &head,
                data: part,
            };
            self.record_write(ino, at, t, part.len() as u64, log)?;
            self.counted(true);
            at += part.len() as u64;
        }
        Ok(offset)
    }

    pub fn fallocate(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        offset: u64,
        len: u64,
        mode: Fallocate,
    ) -> Result<()> {
        if len == 0 {
            return Err(Error::Invalid("fallocate of 0 bytes"));
        }
        let size = self.inode(ino)?.file()?.size;
        let end = offset.checked_add(len).ok_or(Error::FileTooLarge)?;
        let t = now_ns();
        match mode {
            Fallocate::PunchHole => self.log(
                ctx,
                Record::PunchHole {
                    ino,
                    offset,
                    len,
                    time_ns: t,
                },
            ),
            Fallocate::KeepSize => Ok(()),
            Fallocate::Extend if end > size => self.log(
                ctx,
                Record::Truncate {
                    ino,
                    size: end,
                    time_ns: t,
                },
            ),
            Fallocate::Extend => Ok(()),
        }
    }

    // ------------------------------------------------------------ records

    /// `Write`: `len` bytes at `offset` of file `ino`. The data is not held:
    /// the file points at it in the journal, where the record lands.
    pub(super) fn record_write(
        &mut self,
        ino: u64,
        offset: u64,
        t: i64,
        len: u64,
        log: Log<'_>,
    ) -> Result<()> {
        self.inode(ino)?.file()?;
        if offset.checked_add(len).is_none_or(|e| e > MAX_FILE_SIZE) {
            return Err(Error::FileTooLarge);
        }
        let (pos, plen) = log.append()?;
        // The data is the end of the payload (see `record.rs`).
        let at = pos.offset + FRAME_HEADER as u64 + plen - len;
        let n = self.inode_mut(ino);
        n.touch_data(t);
        let f = n.file_mut();
        f.changed = true;
        if len > 0 {
            punch(&mut f.pieces, offset, offset + len);
            f.pieces.insert(
                offset,
                Piece {
                    len,
                    src: Src::Journal {
                        seg: pos.seg,
                        off: at,
                    },
                },
            );
            f.size = f.size.max(offset + len);
        }
        Ok(())
    }

    /// `Truncate`: file `ino` becomes `size` bytes (shrink drops data, grow adds a hole).
    pub(super) fn record_truncate(
        &mut self,
        ino: u64,
        size: u64,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        self.inode(ino)?.file()?;
        if size > MAX_FILE_SIZE {
            return Err(Error::FileTooLarge);
        }
        log.append()?;
        let n = self.inode_mut(ino);
        n.touch_data(t);
        let f = n.file_mut();
        if f.size != size {
            f.changed = true;
            punch(&mut f.pieces, size, u64::MAX);
            f.size = size;
        }
        Ok(())
    }

    /// `PunchHole`: `[offset, offset + len)` of file `ino`, clipped to its
    /// size, becomes a hole.
    pub(super) fn record_punch_hole(
        &mut self,
        ino: u64,
        offset: u64,
        len: u64,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        self.inode(ino)?.file()?;
        log.append()?;
        let n = self.inode_mut(ino);
        n.touch_data(t);
        let f = n.file_mut();
        let end = offset.saturating_add(len).min(f.size);
        if offset < end {
            f.changed = true;
            punch(&mut f.pieces, offset, end);
        }
        Ok(())
    }
}
