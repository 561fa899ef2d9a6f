//! File data: write, copy, truncate, fallocate and the read plan.
//!
//! Each record of this family (`Write`, `Share`, `Truncate`, `PunchHole`) is one
//! `record_*` function: its checks, then [`Log::append`], then its effect on
//! the file's piece map (`extents.rs`). A truncate through setattr is logged
//! by `attrs.rs` as a `Truncate` record.

use super::super::record::{FRAME_HEADER, MAX_WRITE_DATA, Record, write_head};
use super::super::{Error, Result};
use super::extents::{Piece, ReadPlan, Src, base_ahead, base_passed, plan, punch};
use crate::store::ObjectId;

/// The most journal data one [`ForkState::copy_range`] moves (it reads it
/// into memory); a longer copy returns short and the caller asks again.
pub const COPY_JOURNAL_BYTES: u64 = 8 << 20;
use super::{Ctx, ForkState, Log, now_ns};
use crate::store::model::{Fallocate, MAX_FILE_SIZE, Posix};

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

    /// The stored objects a sequential reader of file `ino` reads after
    /// `end`, up to `bytes` on and `max_runs` runs ([`base_ahead`]: a
    /// bounded look, whatever the file's pieces).
    pub fn ahead_chunks(
        &self,
        ino: u64,
        end: u64,
        bytes: u64,
        max_runs: usize,
    ) -> Result<Vec<(ObjectId, u64)>> {
        let f = self.inode(ino)?.file()?;
        let stop = end.saturating_add(bytes).min(f.size);
        if end >= stop {
            return Ok(Vec::new());
        }
        Ok(base_ahead(&f.pieces, end, stop, max_runs))
    }

    /// The stored objects a sequential reader at `offset` of file `ino` has
    /// passed: read in `[from, behind)` and not since ([`base_passed`]).
    pub fn passed_chunks(
        &self,
        ino: u64,
        from: u64,
        behind: u64,
        offset: u64,
    ) -> Result<Vec<ObjectId>> {
        let f = self.inode(ino)?.file()?;
        Ok(base_passed(&f.pieces, from, behind, offset.min(f.size)))
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
        self.write_at_time(ctx, ino, offset, data, now_ns())
    }

    /// [`ForkState::write`] with mtime and ctime set to `t` instead of now.
    pub fn write_at_time(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        offset: Option<u64>,
        data: &[u8],
        t: i64,
    ) -> Result<u64> {
        let f = self.inode(ino)?.file()?;
        let offset = offset.unwrap_or(f.size);
        self.guard_write(ino, offset)?;
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > MAX_FILE_SIZE)
        {
            return Err(Posix::FileTooLarge.into());
        }
        self.claim(ctx)?;
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
            let note = self.note_write(ino, at, part.len() as u64, t);
            self.record_write(ino, at, t, part.len() as u64, log)?;
            self.noted(note);
            self.counted(true);
            at += part.len() as u64;
        }
        Ok(offset)
    }

    /// `copy_file_range`: up to `len` bytes of file `src` from `src_off`
    /// (clipped to its size) to file `dst` at `dst_off`; returns how many
    /// were copied. Committed data (a stored object) is shared, one `Share`
    /// record per run, moving no bytes; data written since the last commit is
    /// read from the journal and written again (at most
    /// [`COPY_JOURNAL_BYTES`] a call: the copy then returns short); holes
    /// stay holes. Not atomic, as on any file system: a crash keeps a prefix
    /// of the runs.
    pub fn copy_range(
        &mut self,
        ctx: &Ctx<'_>,
        src: u64,
        src_off: u64,
        dst: u64,
        dst_off: u64,
        len: u64,
    ) -> Result<u64> {
        self.inode(dst)?.file()?;
        let runs = self.plan_read(src, src_off, len)?;
        let total: u64 = runs.iter().map(|r| r.0).sum();
        if dst_off.checked_add(total).is_none_or(|e| e > MAX_FILE_SIZE) {
            return Err(Posix::FileTooLarge.into());
        }
        let t = now_ns();
        let (mut at, mut moved) = (dst_off, 0u64);
        for (run, from) in runs {
            let run = match from {
                Some(Src::Journal { .. }) if moved >= COPY_JOURNAL_BYTES => break,
                Some(Src::Journal { .. }) => run.min(COPY_JOURNAL_BYTES - moved),
                _ => run,
            };
            match from {
                None => {
                    let size = self.inode(dst)?.file()?.size;
                    if at < size {
                        let len = run.min(size - at);
                        self.log(
                            ctx,
                            Record::PunchHole {
                                ino: dst,
                                offset: at,
                                len,
                                time_ns: t,
                            },
                        )?;
                    }
                    if at + run > size {
                        self.log(
                            ctx,
                            Record::Truncate {
                                ino: dst,
                                size: at + run,
                                time_ns: t,
                            },
                        )?;
                    }
                }
                Some(Src::Base { id, off }) => self.log(
                    ctx,
                    Record::Share {
                        ino: dst,
                        offset: at,
                        id,
                        obj_off: off,
                        len: run,
                        time_ns: t,
                    },
                )?,
                Some(Src::Journal { seg, off }) => {
                    let mut data = vec![0u8; run as usize];
                    let file = ctx.wal.file(seg).ok_or_else(|| Error::Corrupt {
                        path: ctx.wal.path_of(seg),
                        detail: format!("inode {src} has data in a segment that is gone"),
                    })?;
                    file.read_at(&mut data, off).map_err(|source| Error::Io {
                        path: ctx.wal.path_of(seg),
                        source,
                    })?;
                    moved += run;
                    self.write(ctx, dst, Some(at), &data)?;
                }
            }
            at += run;
        }
        Ok(at - dst_off)
    }

    /// `len` bytes of stored object `id` from `obj_off`, at `offset` of file
    /// `ino`: one `Share` record, the bytes named, not copied (what
    /// `storefs checkout` puts a checkpoint's file in with).
    pub fn share(
        &mut self,
        ctx: &Ctx<'_>,
        ino: u64,
        offset: u64,
        id: ObjectId,
        obj_off: u64,
        len: u64,
    ) -> Result<()> {
        self.log(
            ctx,
            Record::Share {
                ino,
                offset,
                id,
                obj_off,
                len,
                time_ns: now_ns(),
            },
        )
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
            return Err(Posix::Invalid("fallocate of 0 bytes").into());
        }
        let size = self.inode(ino)?.file()?.size;
        self.guard_fallocate(ino, mode)?;
        let end = offset.checked_add(len).ok_or(Posix::FileTooLarge)?;
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
            Fallocate::ZeroRange { keep_size } => {
                let inside = end.min(size);
                if offset < inside {
                    self.log(
                        ctx,
                        Record::PunchHole {
                            ino,
                            offset,
                            len: inside - offset,
                            time_ns: t,
                        },
                    )?;
                }
                if !keep_size && end > size {
                    self.log(
                        ctx,
                        Record::Truncate {
                            ino,
                            size: end,
                            time_ns: t,
                        },
                    )?;
                }
                Ok(())
            }
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
        self.check_place(ino, offset, len)?;
        let (pos, plen) = log.append()?;
        // The data is the end of the payload (see `record.rs`).
        let at = pos.offset + FRAME_HEADER as u64 + plen - len;
        let src = Src::Journal {
            seg: pos.seg,
            off: at,
        };
        self.place(ino, offset, len, src, t);
        Ok(())
    }

    /// `Share`: `len` bytes of object `id` from `obj_off` at `offset` of
    /// file `ino`: the file points at the object, as at its committed data.
    #[allow(clippy::too_many_arguments)] // one per field of the record
    pub(super) fn record_share(
        &mut self,
        ino: u64,
        offset: u64,
        id: ObjectId,
        obj_off: u64,
        len: u64,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        self.check_place(ino, offset, len)?;
        log.append()?;
        self.place(ino, offset, len, Src::Base { id, off: obj_off }, t);
        Ok(())
    }

    /// Whether `len` bytes can land at `offset` of `ino` (a file, within
    /// the largest size): a `Write`'s and a `Share`'s checks.
    fn check_place(&self, ino: u64, offset: u64, len: u64) -> Result<()> {
        self.inode(ino)?.file()?;
        if offset.checked_add(len).is_none_or(|e| e > MAX_FILE_SIZE) {
            return Err(Posix::FileTooLarge.into());
        }
        Ok(())
    }

    /// File `ino` holds `len` bytes of `src` at `offset` from now on, changed
    /// at time `t`: a `Write`'s and a `Share`'s effect.
    fn place(&mut self, ino: u64, offset: u64, len: u64, src: Src, t: i64) {
        let n = self.inode_mut(ino);
        n.touch_data(t);
        let f = n.file_mut();
        f.changed = true;
        if len > 0 {
            punch(&mut f.pieces, offset, offset + len);
            f.pieces.insert(offset, Piece { len, src });
            f.size = f.size.max(offset + len);
        }
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
            return Err(Posix::FileTooLarge.into());
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
