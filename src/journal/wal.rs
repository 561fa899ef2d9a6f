//! The write-ahead log: numbered segment files of framed records.
//!
//! `journal/<seq as 16 hex>.wal` = `"SFJ1" u64le(seq)` followed by frames
//! (see `record.rs`). Appends go to the last segment; a commit starts a new
//! one ([`Wal::rotate`]) and later deletes the older ones ([`Wal::trim`]).
//!
//! Durability: [`Wal::sync`] makes everything appended before it was called
//! durable, with one fdatasync shared by all concurrent callers (group
//! commit) and never under the append lock. After a failed write or sync the
//! log is *poisoned*: every later append or sync fails (after a failed fsync
//! the kernel may have dropped dirty pages; retrying could lie). Reopening the
//! fork recovers from what is on disk. A full file system is the exception:
//! an append or a rotation refused with ENOSPC (or EDQUOT) is undone (the
//! segment cut back to its records, the new segment removed) and reported as
//! [`Error::NoSpace`], and the log goes on; nothing of it was acknowledged.
//! An fdatasync that fails, with ENOSPC too, still poisons it.
//!
//! Preallocation: the current segment's size runs ahead of its records in
//! steps of [`PREALLOCATE`], so an append followed by an fdatasync changes
//! neither the file's size nor its block map. A step is written zeros
//! ([`Prealloc::Zeros`]) when the log was synced since the step before, and
//! only reserved (`fallocate`, [`Prealloc::Reserve`]) otherwise: an fdatasync
//! after a write into written zeros is a pure overwrite that commits nothing
//! to ext4's journal, while one into reserved blocks still commits the
//! conversion of the unwritten extent. Writing zeros costs a copy of the step,
//! which pays where syncs are frequent (a SQLite commit's fdatasync, measured
//! here: 90-120 us against 140-180 us reserved and 160-240 us growing) and is
//! wasted on a large write synced once (a 256 MiB write + fsync took 20% longer
//! with zeros every step). The records end at the first frame header that is
//! all zeros.
//! Rotation cuts the segment back to its records before syncing it, and
//! reopening cuts the last one back, so only the segment being appended to
//! has zeros after its records.
//!
//! Shutdown: [`Wal::shut_down`] ends the log as a power cut would at that
//! moment: the current segment is cut back to what is on disk (synced, on
//! disk when the log was opened, or written back by the kernel since), and
//! every later append, sync or rotation fails with [`Error::ShutDown`].
//! Nothing acknowledged durable is cut: a sync running then is waited for
//! first.
//!
//! Write-behind: [`Wal::write_behind`] hands every further 8 MiB appended to a
//! helper thread that starts their writeback without waiting, so a large
//! write's fdatasync has little left to do. A hint only: it promises nothing.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

use super::io::{JournalFile, JournalIo, Prealloc};
use super::record::{self, FRAME_HEADER, Record};
use super::{Error, Result};

/// Magic at the start of every segment.
pub const SEGMENT_MAGIC: &[u8; 4] = b"SFJ1";
/// Segment header: magic + u64le sequence number.
pub const SEGMENT_HEADER: u64 = 12;

/// Appended bytes after which [`Wal::write_behind`] starts their writeback.
pub const WRITE_BEHIND: u64 = 8 << 20;

/// The step by which the current segment's size runs ahead of its records.
pub const PREALLOCATE: u64 = 1 << 20;

/// Where a record's frame starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    pub seg: u64,
    pub offset: u64,
}

/// The file name of segment `seq`.
pub fn segment_name(seq: u64) -> String {
    format!("{seq:016x}.wal")
}

fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".wal")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn header(seq: u64) -> Vec<u8> {
    let mut h = SEGMENT_MAGIC.to_vec();
    h.extend_from_slice(&seq.to_le_bytes());
    h
}

/// The append side: guarded by the append lock.
struct Cur {
    seq: u64,
    file: Arc<dyn JournalFile>,
    end: u64,
    /// The segment's size: `end` plus the zeros preallocated after it.
    alloc: u64,
    /// Whether preallocating failed in this segment (then it is not tried again).
    no_alloc: bool,
    /// [`Wal::syncs`] when the last step was preallocated: a step after a
    /// sync is written zeros, one without is reserved.
    syncs_at_alloc: u64,
    /// Writeback of the current segment was started up to here.
    behind: u64,
    segs: BTreeMap<u64, Arc<dyn JournalFile>>,
    poisoned: Option<String>,
    /// [`Wal::shut_down`] was called: nothing more is appended.
    shut: bool,
}

struct SyncState {
    /// Everything before this position is durable.
    synced: Pos,
    /// Where the log ended when it was opened: what [`Wal::shut_down`] keeps
    /// at least (a replayed tail counts as durable there, though the first
    /// sync fdatasyncs it again).
    opened: Pos,
    running: bool,
    poisoned: Option<String>,
    /// [`Wal::shut_down`] was called: a sync of anything not yet synced fails.
    shut: bool,
}

/// An open journal.
pub struct Wal {
    io: Arc<dyn JournalIo>,
    dir: PathBuf,
    cur: Mutex<Cur>,
    sync: Mutex<SyncState>,
    cv: Condvar,
    /// fdatasyncs that succeeded (what preallocation asks: were there any
    /// since the last step?).
    syncs: AtomicU64,
    behind: Arc<Behind>,
    /// Whether the write-behind helper thread runs (started on first use).
    helper: OnceLock<bool>,
}

/// Write-behind: ranges of the journal whose writeback a helper thread
/// starts, so neither the appender nor the fork's locks wait for it.
#[derive(Default)]
struct Behind {
    todo: Mutex<BehindTodo>,
    cv: Condvar,
}

#[derive(Default)]
struct BehindTodo {
    range: Option<(Arc<dyn JournalFile>, u64, u64)>,
    stop: bool,
}

impl Behind {
    /// The helper thread: start writeback of each range handed over, until stopped.
    fn run(&self) {
        // The range handed over before the current one: once its writeback is
        // done, its pages leave the page cache.
        let mut prev: Option<(Arc<dyn JournalFile>, u64, u64)> = None;
        let mut t = self.todo.lock();
        loop {
            if let Some((file, from, len)) = t.range.take() {
                drop(t);
                // An error here shows up again, and is handled, at the next sync.
                if let Err(e) = file.start_writeback(from, len) {
                    tracing::debug!(error = %e, "journal write-behind failed");
                }
                if let Some((pfile, pfrom, plen)) = prev.take()
                    && let Err(e) = pfile.drop_behind(pfrom, plen)
                {
                    tracing::debug!(error = %e, "journal drop-behind failed");
                }
                prev = Some((file, from, len));
                t = self.todo.lock();
                continue;
            }
            if t.stop {
                return;
            }
            self.cv.wait(&mut t);
        }
    }
}

/// Start the write-behind helper with the stop signals blocked, so it never
/// takes one meant for the process (a mount daemon's signal thread `sigwait`s
/// for SIGTERM; a thread that did not block it would die of it). False when
/// the thread cannot be started: write-behind is then skipped.
fn spawn_helper(behind: Arc<Behind>) -> bool {
    match crate::sys::spawn_unsignalled("storefs-wal-behind", move || behind.run()) {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the journal write-behind thread; continuing without it");
            false
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.behind.todo.lock().stop = true;
        self.behind.cv.notify_all();
    }
}

impl Wal {
    /// Open the journal in `dir`: delete segments before `from` (a commit
    /// finished moving HEAD but not trimming), replay the others in order
    /// through `apply` (record, frame position, payload length), drop a torn
    /// tail of the last segment with a warning, and get ready to append.
    pub fn open(
        io: Arc<dyn JournalIo>,
        dir: &Path,
        from: u64,
        mut apply: impl FnMut(Record, Pos, u64) -> Result<()>,
    ) -> Result<Wal> {
        let ioerr = |path: &Path| {
            let path = path.to_path_buf();
            move |source: io::Error| Error::Io { path, source }
        };
        let mut seqs = Vec::new();
        let mut removed = false;
        for name in io.list(dir).map_err(ioerr(dir))? {
            let Some(seq) = parse_segment_name(&name) else {
                continue;
            };
            if seq < from {
                let p = dir.join(&name);
                io.remove(&p).map_err(ioerr(&p))?;
                removed = true;
            } else {
                seqs.push(seq);
            }
        }
        if removed {
            io.sync_dir(dir).map_err(ioerr(dir))?;
        }
        seqs.sort_unstable();
        if seqs.first().is_some_and(|&s| s != from) {
            return Err(Error::Corrupt {
                path: dir.to_path_buf(),
                detail: format!(
                    "HEAD says the journal starts at segment {from}, but the first is {}",
                    seqs[0]
                ),
            });
        }
        let mut segs = BTreeMap::new();
        let mut cur = None;
        if seqs.is_empty() {
            let (file, end) = Self::create_segment(&*io, dir, from, &[])?;
            segs.insert(from, file.clone());
            cur = Some((from, file, end));
        }
        for (i, &seq) in seqs.iter().enumerate() {
            let last = i + 1 == seqs.len();
            if i > 0 && seq != seqs[i - 1] + 1 {
                return Err(Error::Corrupt {
                    path: dir.to_path_buf(),
                    detail: format!("segment {} is missing", seqs[i - 1] + 1),
                });
            }
            let path = dir.join(segment_name(seq));
            let file = io.open(&path, false).map_err(ioerr(&path))?;
            let end = replay_segment(&*file, &path, seq, last, &mut apply)?;
            segs.insert(seq, file.clone());
            cur = Some((seq, file, end));
        }
        let (seq, file, end) = cur.expect("at least one segment");
        Ok(Wal {
            io,
            dir: dir.to_path_buf(),
            cur: Mutex::new(Cur {
                seq,
                file,
                end,
                alloc: end,
                no_alloc: false,
                syncs_at_alloc: 0,
                behind: end,
                segs,
                poisoned: None,
                shut: false,
            }),
            sync: Mutex::new(SyncState {
                // The replayed tail may be only in the page cache (a process
                // killed after appending it): the first sync fdatasyncs it.
                synced: Pos {
                    seg: seq,
                    offset: 0,
                },
                opened: Pos {
                    seg: seq,
                    offset: end,
                },
                running: false,
                poisoned: None,
                shut: false,
            }),
            cv: Condvar::new(),
            syncs: AtomicU64::new(0),
            behind: Arc::new(Behind::default()),
            helper: OnceLock::new(),
        })
    }

    /// Create segment `seq` (header and an optional first record), durably:
    /// data synced and the name synced into the directory.
    fn create_segment(
        io: &dyn JournalIo,
        dir: &Path,
        seq: u64,
        first: &[&[u8]],
    ) -> Result<(Arc<dyn JournalFile>, u64)> {
        let path = dir.join(segment_name(seq));
        let err = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let file = io.open(&path, true).map_err(err)?;
        let mut bytes = header(seq);
        for p in first {
            bytes.extend_from_slice(&record::frame(p));
        }
        file.set_len(0).map_err(err)?;
        file.write_at(&bytes, 0).map_err(err)?;
        file.sync_data().map_err(err)?;
        io.sync_dir(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok((file, bytes.len() as u64))
    }

    pub(super) fn path_of(&self, seq: u64) -> PathBuf {
        self.dir.join(segment_name(seq))
    }

    fn shut_err(&self) -> Error {
        Error::ShutDown {
            path: self.dir.clone(),
        }
    }

    /// Whether the log takes more records: not after a shutdown, nor after
    /// a failed write poisoned it.
    fn writable(&self, c: &Cur) -> Result<()> {
        if c.shut {
            return Err(self.shut_err());
        }
        if let Some(why) = &c.poisoned {
            return Err(self.poisoned_err(c.seq, why));
        }
        Ok(())
    }

    fn poisoned_err(&self, seq: u64, why: &str) -> Error {
        Error::Io {
            path: self.path_of(seq),
            source: io::Error::other(format!(
                "an earlier journal write or sync failed ({why}); nothing more is accepted until the fork is reopened"
            )),
        }
    }

    /// Append one record payload; returns where its frame starts. Callers hold
    /// the fork's state lock, so records are in the order their changes applied.
    pub fn append(&self, payload: &[u8]) -> Result<Pos> {
        self.append_parts(payload, &[])
    }

    /// Append one record whose payload is `head` followed by `data`, written
    /// from both buffers as they are (one vectored write, no copy of `data`).
    pub fn append_parts(&self, head: &[u8], data: &[u8]) -> Result<Pos> {
        let mut c = self.cur.lock();
        self.writable(&c)?;
        let frame_head = record::frame_head(&[head, data]);
        let at = c.end;
        let len = (FRAME_HEADER + head.len() + data.len()) as u64;
        if at + len > c.alloc && !c.no_alloc {
            let to = (at + len).div_ceil(PREALLOCATE) * PREALLOCATE;
            let syncs = self.syncs.load(Ordering::Relaxed);
            let how = if syncs != c.syncs_at_alloc {
                Prealloc::Zeros
            } else {
                Prealloc::Reserve
            };
            c.syncs_at_alloc = syncs;
            let result = c.file.allocate(c.alloc, to - c.alloc, how);
            // On failure the file may have grown by part of the step: count
            // all of it, so a rotation cuts whatever landed.
            c.alloc = to;
            if let Err(e) = result {
                tracing::debug!(error = %e, "cannot preallocate the journal; appending without");
                c.no_alloc = true;
            }
        }
        if let Err(source) = c.file.write_parts_at(&[&frame_head, head, data], at) {
            // A full file system: cut what landed of the frame (it would lie
            // after the next record's end) and go on without it.
            if no_space(&source) && c.file.set_len(at).is_ok() {
                c.alloc = at;
                c.no_alloc = true;
                return Err(Error::NoSpace {
                    path: self.path_of(c.seq),
                });
            }
            c.poisoned = Some(source.to_string());
            self.sync.lock().poisoned = Some(source.to_string());
            return Err(Error::Io {
                path: self.path_of(c.seq),
                source,
            });
        }
        c.end += len;
        c.alloc = c.alloc.max(c.end);
        Ok(Pos {
            seg: c.seq,
            offset: at,
        })
    }

    /// Once at least [`WRITE_BEHIND`] bytes were appended since the last
    /// time, have a helper thread start their writeback (no wait here, no
    /// durability promise): a later [`Wal::sync`] then finds most of a large
    /// write on disk already.
    pub fn write_behind(&self) {
        if !*self
            .helper
            .get_or_init(|| spawn_helper(self.behind.clone()))
        {
            return;
        }
        let range = {
            let mut c = self.cur.lock();
            let len = c.end - c.behind;
            if len < WRITE_BEHIND || c.poisoned.is_some() {
                return;
            }
            let from = c.behind;
            c.behind = c.end;
            (c.file.clone(), from, len)
        };
        let mut t = self.behind.todo.lock();
        // A range still waiting (the helper is behind) grows to cover this one.
        t.range = Some(match t.range.take() {
            Some((file, from, len)) if Arc::ptr_eq(&file, &range.0) && from + len == range.1 => {
                (file, from, len + range.2)
            }
            _ => range,
        });
        drop(t);
        self.behind.cv.notify_one();
    }

    /// The position after the last appended record.
    pub fn end(&self) -> Pos {
        let c = self.cur.lock();
        Pos {
            seg: c.seq,
            offset: c.end,
        }
    }

    /// Make every record appended before this call durable. Concurrent callers
    /// share one fdatasync; the append lock is not held while it runs.
    pub fn sync(&self) -> Result<()> {
        let target = self.end();
        let mut s = self.sync.lock();
        loop {
            if let Some(why) = &s.poisoned {
                return Err(self.poisoned_err(target.seg, why));
            }
            if s.synced >= target {
                return Ok(());
            }
            if s.shut {
                return Err(self.shut_err());
            }
            if !s.running {
                break;
            }
            self.cv.wait(&mut s);
        }
        s.running = true;
        drop(s);
        // Sync up to the end as it is now: covers later appends too.
        let (file, pos) = {
            let c = self.cur.lock();
            (
                c.file.clone(),
                Pos {
                    seg: c.seq,
                    offset: c.end,
                },
            )
        };
        let result = file.sync_data();
        let mut s = self.sync.lock();
        s.running = false;
        let out = match result {
            Ok(()) => {
                // A rotation may have moved `synced` past `pos` meanwhile.
                s.synced = s.synced.max(pos);
                self.syncs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(source) => {
                s.poisoned = Some(source.to_string());
                Err(source)
            }
        };
        self.cv.notify_all();
        drop(s);
        out.map_err(|source| {
            // Not under the sync lock: everywhere else the append lock is
            // taken first (an append or rotation that fails poisons both).
            self.cur.lock().poisoned = Some(source.to_string());
            Error::Io {
                path: self.path_of(pos.seg),
                source,
            }
        })
    }

    /// Start segment `current + 1` whose first records are `first` (record
    /// payloads, written and synced with the segment's header in one go),
    /// after making the current segment durable (records of the new segment
    /// may depend on any record of the old one). Returns the new segment's
    /// number.
    pub fn rotate(&self, first: &[&[u8]]) -> Result<u64> {
        let mut c = self.cur.lock();
        self.writable(&c)?;
        let fail = |c: &mut Cur, e: Error| {
            c.poisoned = Some(e.to_string());
            self.sync.lock().poisoned = Some(e.to_string());
            e
        };
        // Cut the preallocated zeros: only the last segment may end in them.
        let cut = if c.alloc > c.end {
            c.file.set_len(c.end)
        } else {
            Ok(())
        };
        if let Err(source) = cut.and_then(|()| c.file.sync_data()) {
            let e = Error::Io {
                path: self.path_of(c.seq),
                source,
            };
            return Err(fail(&mut c, e));
        }
        c.alloc = c.end;
        let seq = c.seq + 1;
        let (file, end) = match Self::create_segment(&*self.io, &self.dir, seq, first) {
            Ok(x) => x,
            // A full file system: without the new segment (its name removed
            // for good), appends go on in this one.
            Err(Error::Io { source, .. }) if no_space(&source) && self.remove_segment(seq) => {
                return Err(Error::NoSpace {
                    path: self.path_of(seq),
                });
            }
            Err(e) => return Err(fail(&mut c, e)),
        };
        c.segs.insert(seq, file.clone());
        c.seq = seq;
        c.file = file;
        c.end = end;
        c.alloc = end;
        c.no_alloc = false;
        c.behind = end;
        let mut s = self.sync.lock();
        s.synced = s.synced.max(Pos {
            seg: seq,
            offset: end,
        });
        Ok(seq)
    }

    /// End the log as a power cut would now: from here on every append,
    /// sync (of anything not yet synced) and rotation fails with
    /// [`Error::ShutDown`], and the current segment is cut back to what is
    /// on disk: the records that were synced, or were on disk when the log
    /// was opened (whichever ends later), and after them what the kernel
    /// has written back meanwhile ([`JournalFile::written_back`]: its own
    /// writeback, a `sync`; up to the first page that is not, which may
    /// cut a record in two: a torn tail, dropped when the fork reopens);
    /// and that cut is synced. A sync running now is
    /// waited for (what it acknowledges is kept). Returns how many bytes of
    /// records were cut. The log stays open for reads of what is left;
    /// reopening the fork replays it. Idempotent.
    pub fn shut_down(&self) -> Result<u64> {
        let mut c = self.cur.lock();
        c.shut = true;
        let keep = {
            let mut s = self.sync.lock();
            s.shut = true;
            while s.running {
                self.cv.wait(&mut s);
            }
            s.synced.max(s.opened)
        };
        if keep.seg != c.seq || keep.offset >= c.end {
            return Ok(0);
        }
        // What the kernel wrote back of the rest (its writeback, a `sync`)
        // is on disk too: a power cut would keep it. A record cut in two
        // there is a torn tail, which reopening drops.
        let keep = c.file.written_back(keep.offset, c.end);
        if keep >= c.end {
            return Ok(0);
        }
        let cut = c.end - keep;
        c.end = keep;
        c.alloc = c.end;
        c.no_alloc = true;
        c.behind = c.behind.min(c.end);
        if let Err(source) = c.file.set_len(keep).and_then(|()| c.file.sync_data()) {
            c.poisoned = Some(source.to_string());
            self.sync.lock().poisoned = Some(source.to_string());
            return Err(Error::Io {
                path: self.path_of(c.seq),
                source,
            });
        }
        Ok(cut)
    }

    /// Remove segment `seq`, which was being created, and sync the directory:
    /// whether it is gone for good.
    fn remove_segment(&self, seq: u64) -> bool {
        let removed = match self.io.remove(&self.path_of(seq)) {
            Ok(()) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        };
        removed && self.io.sync_dir(&self.dir).is_ok()
    }

    /// Delete the segments before `seq` (their records are in a committed
    /// checkpoint) and sync the directory. Open readers keep their handles.
    pub fn trim(&self, seq: u64) -> Result<()> {
        let old: Vec<u64> = {
            let mut c = self.cur.lock();
            let keep = c.segs.split_off(&seq);
            let old = c.segs.keys().copied().collect();
            c.segs = keep;
            old
        };
        for s in &old {
            let p = self.path_of(*s);
            match self.io.remove(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Io { path: p, source }),
            }
        }
        self.io.sync_dir(&self.dir).map_err(|source| Error::Io {
            path: self.dir.clone(),
            source,
        })
    }

    /// Read `buf.len()` bytes at `offset` of segment `seg`.
    pub fn read(&self, seg: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        let file = self.cur.lock().segs.get(&seg).cloned();
        let Some(file) = file else {
            return Err(Error::Corrupt {
                path: self.path_of(seg),
                detail: "file data points into a segment that is no longer open".into(),
            });
        };
        file.read_at(buf, offset).map_err(|source| Error::Io {
            path: self.path_of(seg),
            source,
        })
    }

    /// The open handle of segment `seg` (readable even after [`Wal::trim`]
    /// deletes its file), or `None` when it was trimmed already.
    pub fn file(&self, seg: u64) -> Option<Arc<dyn JournalFile>> {
        self.cur.lock().segs.get(&seg).cloned()
    }

    /// The current (last) segment number.
    pub fn current_segment(&self) -> u64 {
        self.cur.lock().seq
    }
}

/// Whether the journal in `dir`, from segment `from` on, holds a record
/// `wanted` picks. Reads only (nothing is cut, created or locked), so it may
/// run while a daemon appends or commits: a segment that is gone is skipped,
/// and a damaged or unfinished tail ends that segment's scan.
pub fn any_record(
    dir: &Path,
    from: u64,
    mut wanted: impl FnMut(&Record) -> bool,
) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let names = match crate::sys::list_dir_nofollow(dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut seqs = Vec::new();
    for (name, _) in names {
        if let Some(seq) = name.to_str().and_then(parse_segment_name)
            && seq >= from
        {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    for seq in seqs {
        // No symlink followed, nothing but a regular file read (a FIFO
        // planted under a segment's name would block the scan).
        let (file, len) = match crate::sys::open_regular_nofollow(&dir.join(segment_name(seq))) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{}: {e}", segment_name(seq)),
                ));
            }
        };
        let mut h = [0u8; SEGMENT_HEADER as usize];
        if len < SEGMENT_HEADER
            || file.read_exact_at(&mut h, 0).is_err()
            || h[..4] != SEGMENT_MAGIC[..]
        {
            continue;
        }
        let mut pos = SEGMENT_HEADER;
        while pos + FRAME_HEADER as u64 <= len {
            let mut fh = [0u8; FRAME_HEADER];
            file.read_exact_at(&mut fh, pos)?;
            if fh.iter().all(|&b| b == 0) {
                break; // preallocated space
            }
            let Some((plen, crc)) = record::frame_header(&fh) else {
                break;
            };
            let start = pos + FRAME_HEADER as u64;
            if len - start < u64::from(plen) {
                break;
            }
            let mut payload = vec![0u8; plen as usize];
            file.read_exact_at(&mut payload, start)?;
            if crc32fast::hash(&payload) != crc {
                break;
            }
            if Record::decode(&payload).is_some_and(|r| wanted(&r)) {
                return Ok(true);
            }
            pos = start + u64::from(plen);
        }
    }
    Ok(false)
}

/// Whether a write failed because the file system is full (or the quota).
fn no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Replay one segment; returns the end of its valid records. A damaged tail
/// of the last segment is cut off (with a warning); elsewhere it is corrupt.
fn replay_segment(
    file: &dyn JournalFile,
    path: &Path,
    seq: u64,
    last: bool,
    apply: &mut impl FnMut(Record, Pos, u64) -> Result<()>,
) -> Result<u64> {
    let ioerr = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |detail: String| Error::Corrupt {
        path: path.to_path_buf(),
        detail,
    };
    let len = file.size().map_err(ioerr)?;
    let mut h = [0u8; SEGMENT_HEADER as usize];
    let header_ok = len >= SEGMENT_HEADER
        && file.read_at(&mut h, 0).is_ok()
        && h[..4] == SEGMENT_MAGIC[..]
        && h[4..] == seq.to_le_bytes();
    if !header_ok {
        if !last {
            return Err(corrupt("bad segment header".into()));
        }
        // A segment whose creation was cut short: start it again.
        tracing::warn!(path = %path.display(), "journal segment header torn; rewriting it");
        file.set_len(0).map_err(ioerr)?;
        file.write_at(&header(seq), 0).map_err(ioerr)?;
        file.sync_data().map_err(ioerr)?;
        return Ok(SEGMENT_HEADER);
    }
    let mut pos = SEGMENT_HEADER;
    // The records of the last segment end at a frame header of zeros: the
    // space preallocated after them (or a write never synced, whose first
    // page did not reach the disk: nothing after it was acknowledged either).
    let mut zeros = false;
    let torn: Option<String> = loop {
        if pos == len {
            break None;
        }
        let mut fh = [0u8; FRAME_HEADER];
        let head_len = (len - pos).min(FRAME_HEADER as u64) as usize;
        file.read_at(&mut fh[..head_len], pos).map_err(ioerr)?;
        if last && fh.iter().all(|&b| b == 0) {
            zeros = true;
            break None;
        }
        if head_len < FRAME_HEADER {
            break Some("partial frame header".into());
        }
        let Some((plen, crc)) = record::frame_header(&fh) else {
            break Some("impossible frame length".into());
        };
        if len - pos - (FRAME_HEADER as u64) < u64::from(plen) {
            break Some("frame runs past the end of the file".into());
        }
        let mut payload = vec![0u8; plen as usize];
        file.read_at(&mut payload, pos + FRAME_HEADER as u64)
            .map_err(ioerr)?;
        if crc32fast::hash(&payload) != crc {
            break Some("checksum mismatch".into());
        }
        let Some(rec) = Record::decode(&payload) else {
            // The checksum matched: this is not a torn write but a record we
            // do not understand. Refuse rather than silently drop data.
            return Err(corrupt(format!(
                "undecodable record at offset {pos} (written by a newer storefs?)"
            )));
        };
        apply(
            rec,
            Pos {
                seg: seq,
                offset: pos,
            },
            u64::from(plen),
        )?;
        pos += FRAME_HEADER as u64 + u64::from(plen);
    };
    if let Some(why) = torn {
        if !last {
            return Err(corrupt(format!(
                "damaged record at offset {pos} ({why}) in a segment that is not the last"
            )));
        }
        tracing::warn!(
            path = %path.display(),
            offset = pos,
            dropped_bytes = len - pos,
            reason = %why,
            "journal has a torn tail (crash during a write); dropping it"
        );
        file.set_len(pos).map_err(ioerr)?;
        file.sync_data().map_err(ioerr)?;
    } else if zeros {
        // Cut the zeros (and whatever an unsynced write left beyond them),
        // so appends resume on a clean end. Not synced here: the next sync
        // commits the cut with the blocks appended after it (and syncing now
        // would make durable the records replayed from the page cache, which
        // no caller asked for).
        tracing::debug!(path = %path.display(), offset = pos, dropped_bytes = len - pos, "journal records end before its preallocated space");
        file.set_len(pos).map_err(ioerr)?;
    }
    Ok(pos)
}
