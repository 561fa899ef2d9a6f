//! Chunk and store a byte stream: FastCDC cuts on the calling thread, sha256 +
//! zstd + write on a pool of hasher threads. The chunking parameters are part
//! of the store's content format: files cut the same way share chunks, so
//! snapshot (files read from disk), archive import (files read from a tar
//! stream) and a fork's commit (`journal`'s fold, through [`cut_chunks`]) all
//! cut here.

use std::cell::RefCell;
use std::io::{self, Read};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};

use fastcdc::v2020::{Normalization, StreamCDC, cut, select_masks};

use super::progress::Progress;
use super::{Extent, ObjectId, Store};

/// Smallest chunk FastCDC cuts (bytes); smaller files are one chunk.
pub const MIN_CHUNK: u32 = 64 * 1024;
/// Average chunk size FastCDC aims for (bytes).
pub const AVG_CHUNK: u32 = 256 * 1024;
/// Largest chunk FastCDC cuts (bytes).
pub const MAX_CHUNK: u32 = 1024 * 1024;

/// Objects and compressed bytes newly written, shared by all threads.
#[derive(Default)]
pub(crate) struct Counters {
    pub objects: AtomicU64,
    pub bytes: AtomicU64,
}

impl Counters {
    pub fn add(&self, written: u64) {
        if written > 0 {
            self.objects.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(written, Ordering::Relaxed);
        }
    }
}

/// The id (or error) of chunk number `seq` of one stream.
type Reply = (usize, super::Result<ObjectId>);

/// A chunk to store; the id (or error) goes back on `reply` tagged with `seq`.
pub(crate) struct Chunk {
    data: Vec<u8>,
    seq: usize,
    reply: Sender<Reply>,
}

/// What a hasher takes at once: one chunk, or a batch of small files' chunks
/// (one channel hand-off for many files instead of one each).
pub(crate) type ChunkJob = Vec<Chunk>;

/// Small chunks are batched up to this many bytes, or [`BATCH_CHUNKS`] chunks.
const BATCH_BYTES: usize = 256 * 1024;
const BATCH_CHUNKS: usize = 64;

/// Hasher thread: store chunks until every sender is gone.
pub(crate) fn hash_chunks(store: &Store, rx: &Mutex<Receiver<ChunkJob>>, counters: &Counters) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        for chunk in job {
            let result = store.put_object(&chunk.data).map(|(id, written)| {
                counters.add(written);
                id
            });
            // The sender may have given up on this stream; nobody to tell then.
            let _ = chunk.reply.send((chunk.seq, result));
        }
    }
}

/// The chunks of one stream, handed to the hashers; [`Pending::wait`] collects
/// their ids. Holding a `Pending` costs a few bytes per chunk, so many streams
/// can be in flight while the hashers work. Several runs of one file (a
/// sparse file's data segments) share one ([`Pending::send`]), so a file of
/// a million 1-byte segments costs a few bytes per segment, not a channel
/// each.
pub(crate) struct Pending {
    lens: Vec<u64>,
    rx: Receiver<Reply>,
    /// Where the hashers reply; dropped by [`Pending::wait`], whose loop
    /// ends when every sender is gone.
    tx: Option<Sender<Reply>>,
}

impl Pending {
    pub fn new() -> Pending {
        let (tx, rx) = mpsc::channel();
        Pending {
            lens: Vec::new(),
            rx,
            tx: Some(tx),
        }
    }

    /// Bytes the stream delivered.
    pub fn total(&self) -> u64 {
        self.lens.iter().sum()
    }

    /// Chunks sent so far.
    pub fn chunks(&self) -> usize {
        self.lens.len()
    }

    /// Cut what `reader` yields (expected: `len` bytes; it may yield fewer)
    /// into content-defined chunks after those already sent and hand them
    /// to the hashers; the bytes it delivered. Memory: one [`MAX_CHUNK`]
    /// buffer plus the chunks waiting in the bounded channel.
    pub fn send(
        &mut self,
        reader: impl Read,
        len: u64,
        hashers: &Hashers<'_>,
        progress: &dyn Progress,
    ) -> io::Result<u64> {
        let reply_tx = self
            .tx
            .clone()
            .expect("a pending stream not yet waited for");
        let single = len <= u64::from(MIN_CHUNK);
        let lens = &mut self.lens;
        let mut delivered = 0;
        let send = |data: Vec<u8>| -> io::Result<()> {
            progress.advance(data.len() as u64);
            delivered += data.len() as u64;
            lens.push(data.len() as u64);
            let chunk = Chunk {
                data,
                seq: lens.len() - 1,
                reply: reply_tx.clone(),
            };
            hashers.chunk(chunk, single)
        };
        cut_chunks(reader, len, send)?;
        Ok(delivered)
    }

    /// Wait for every chunk to be stored; the stream's extents, in order.
    pub fn wait(mut self) -> io::Result<Vec<Extent>> {
        drop(self.tx.take());
        let mut ids = vec![None; self.lens.len()];
        for (seq, result) in self.rx {
            ids[seq] = Some(result.map_err(io::Error::other)?);
        }
        self.lens
            .iter()
            .zip(ids)
            .map(|(len, id)| {
                let id = id.ok_or_else(|| io::Error::other("chunk was not stored"))?;
                Ok(Extent {
                    len: *len,
                    id: Some(id),
                })
            })
            .collect()
    }
}

/// Where a stream's chunks are hashed, compressed and written.
pub(crate) struct Hashers<'a> {
    /// The pool of hasher threads.
    tx: &'a SyncSender<ChunkJob>,
    how: Small<'a>,
    /// Small files' chunks not yet sent (with [`Small::Batch`]).
    batch: RefCell<ChunkJob>,
}

/// What happens to a stream of one chunk (a file of at most [`MIN_CHUNK`] bytes).
enum Small<'a> {
    /// Stored on the calling thread: for callers that run one reader per core
    /// (snapshot), this saves two thread hand-offs per small file.
    Inline(&'a Store, &'a Counters),
    /// Sent to the hashers in batches: for a single reader (import), so the
    /// hashing stays parallel. The caller must [`Hashers::flush`] before it
    /// waits for a [`Pending`].
    Batch,
}

impl<'a> Hashers<'a> {
    /// Small files stored on the calling thread.
    pub fn inline(tx: &'a SyncSender<ChunkJob>, store: &'a Store, counters: &'a Counters) -> Self {
        Hashers {
            tx,
            how: Small::Inline(store, counters),
            batch: RefCell::new(Vec::new()),
        }
    }

    /// Small files batched to the hashers; see [`Hashers::flush`].
    pub fn batched(tx: &'a SyncSender<ChunkJob>) -> Self {
        Hashers {
            tx,
            how: Small::Batch,
            batch: RefCell::new(Vec::new()),
        }
    }

    /// Send the small chunks batched so far.
    pub fn flush(&self) -> io::Result<()> {
        let batch = std::mem::take(&mut *self.batch.borrow_mut());
        if batch.is_empty() {
            return Ok(());
        }
        self.send(batch)
    }

    fn send(&self, job: ChunkJob) -> io::Result<()> {
        self.tx
            .send(job)
            .map_err(|_| io::Error::other("hashing threads stopped"))
    }

    /// Store or send one chunk of a stream; `single` when it is the whole stream.
    fn chunk(&self, chunk: Chunk, single: bool) -> io::Result<()> {
        match (&self.how, single) {
            (Small::Inline(store, counters), true) => {
                let result = store.put_object(&chunk.data).map(|(id, written)| {
                    counters.add(written);
                    id
                });
                // The stream's receiver is alive while it sends: cannot fail.
                let _ = chunk.reply.send((chunk.seq, result));
                Ok(())
            }
            (Small::Batch, true) => {
                let full = {
                    let mut batch = self.batch.borrow_mut();
                    batch.push(chunk);
                    batch.len() >= BATCH_CHUNKS
                        || batch.iter().map(|c| c.data.len()).sum::<usize>() >= BATCH_BYTES
                };
                if full { self.flush() } else { Ok(()) }
            }
            (_, false) => self.send(vec![chunk]),
        }
    }
}

/// Cut everything `reader` yields (expected: `len` bytes; it may yield fewer)
/// into content-defined chunks and send them to the hashers ([`Pending::send`]).
pub(crate) fn send_chunks(
    reader: impl Read,
    len: u64,
    hashers: &Hashers<'_>,
    progress: &dyn Progress,
) -> io::Result<Pending> {
    let mut pending = Pending::new();
    pending.send(reader, len, hashers, progress)?;
    Ok(pending)
}

/// Cut everything `reader` yields (expected: `len` bytes; it may yield fewer) into
/// content-defined chunks and hand each to `each`, in order. Memory: one
/// [`MAX_CHUNK`] buffer. Used by snapshot and import (through [`send_chunks`]) and
/// by a fork's commit.
pub fn cut_chunks(
    mut reader: impl Read,
    len: u64,
    mut each: impl FnMut(Vec<u8>) -> io::Result<()>,
) -> io::Result<()> {
    if len <= u64::from(MIN_CHUNK) {
        // What FastCDC would do, without its MAX_CHUNK buffer per small file.
        let mut data = Vec::with_capacity(len as usize);
        (&mut reader).take(len).read_to_end(&mut data)?;
        if !data.is_empty() {
            each(data)?;
        }
        return Ok(());
    }
    let cdc = StreamCDC::new(
        reader,
        MIN_CHUNK as usize,
        AVG_CHUNK as usize,
        MAX_CHUNK as usize,
    );
    for chunk in cdc {
        each(chunk.map_err(io::Error::other)?.data)?;
    }
    Ok(())
}

/// The length of the chunk [`cut_chunks`] cuts at the start of `window`,
/// which must hold the next `min(MAX_CHUNK, bytes left in the run)` bytes of
/// the stream (what `StreamCDC` has in its buffer when it cuts): the same
/// call of FastCDC's cut function with the same masks and gear table.
///
/// What the decision depends on (a fork's commit relies on it to reuse
/// chunks, `journal::rechunk`): the window's length and the bytes from the
/// window's start up to and including the byte at the returned length (the
/// first byte of the next chunk, which FastCDC's two-byte scan reads before
/// it cuts), or the whole window when the cut is its end. Nothing before the
/// window matters: the gear hash starts at zero for each chunk.
pub fn next_cut(window: &[u8]) -> usize {
    let (mask_s, mask_l) = select_masks(AVG_CHUNK as usize, Normalization::Level1);
    let (_, len) = cut(
        window,
        MIN_CHUNK as usize,
        AVG_CHUNK as usize,
        MAX_CHUNK as usize,
        mask_s,
        mask_l,
        mask_s << 1,
        mask_l << 1,
    );
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes: runs of random, zero and patterned data.
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let part = ((next() % (1 << 20)) as usize + 1).min(n - out.len());
            match next() % 3 {
                0 => out.resize(out.len() + part, 0),
                1 => out.extend((0..part).map(|i| (i % 7) as u8)),
                _ => out.extend((0..part).map(|_| next() as u8)),
            }
        }
        out
    }

    fn streamed(data: &[u8]) -> Vec<usize> {
        let mut lens = Vec::new();
        cut_chunks(data, data.len() as u64, |c: Vec<u8>| {
            lens.push(c.len());
            Ok(())
        })
        .unwrap();
        lens
    }

    /// What `journal::rechunk` relies on: [`next_cut`] on the window
    /// `StreamCDC` holds cuts where [`cut_chunks`] cuts, and the cut reads
    /// nothing past the byte at the cut.
    #[test]
    fn next_cut_is_the_stream_cut_and_reads_nothing_past_it() {
        let max = MAX_CHUNK as usize;
        for (seed, n) in [
            (1, 5 << 20),
            (2, 3_000_001),
            (3, 70_000),
            (4, 65_536),
            (5, 300),
        ] {
            let data = bytes(seed, n);
            let mut ours = Vec::new();
            let mut s = 0;
            while s < data.len() {
                let window = &data[s..(s + max).min(data.len())];
                let c = next_cut(window);
                // Bytes after the cut's byte (or after a window-end cut) do not matter.
                if c + 1 < window.len() {
                    let mut changed = window.to_vec();
                    for b in &mut changed[c + 1..] {
                        *b = b.wrapping_add(101);
                    }
                    assert_eq!(next_cut(&changed), c, "seed {seed} at {s}");
                }
                ours.push(c);
                s += c;
            }
            assert_eq!(ours, streamed(&data), "seed {seed}");
        }
    }
}
