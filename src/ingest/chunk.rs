//! Chunk and store a byte stream: FastCDC cuts on the calling thread, sha256 +
//! zstd + write on a pool of hasher threads. Shared by snapshot (files read
//! from disk) and archive import (files read from a tar stream).

use std::io::{self, Read};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};

use fastcdc::v2020::StreamCDC;
use indicatif::ProgressBar;

use crate::store::{self, Extent, ObjectId, Store};

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
type Reply = (usize, store::Result<ObjectId>);

/// A chunk to store; the id (or error) goes back on `reply` tagged with `seq`.
pub(crate) struct ChunkJob {
    data: Vec<u8>,
    seq: usize,
    reply: Sender<Reply>,
}

/// Hasher thread: store chunks until every sender is gone.
pub(crate) fn hash_chunks(store: &Store, rx: &Mutex<Receiver<ChunkJob>>, counters: &Counters) {
    loop {
        let job = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let result = store.put_object(&job.data).map(|(id, written)| {
            counters.add(written);
            id
        });
        // The sender may have given up on this stream; nobody to tell then.
        let _ = job.reply.send((job.seq, result));
    }
}

/// The chunks of one stream, handed to the hashers; [`Pending::wait`] collects
/// their ids. Holding a `Pending` costs a few bytes per chunk, so many streams
/// can be in flight while the hashers work.
pub(crate) struct Pending {
    lens: Vec<u64>,
    rx: Receiver<Reply>,
}

impl Pending {
    /// Bytes the stream delivered.
    pub fn total(&self) -> u64 {
        self.lens.iter().sum()
    }

    /// Wait for every chunk to be stored; the stream's extents, in order.
    pub fn wait(self) -> io::Result<Vec<Extent>> {
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
    pub tx: &'a SyncSender<ChunkJob>,
    /// With `Some`, a stream of one chunk (a file of at most [`MIN_CHUNK`]
    /// bytes) is stored on the calling thread instead: for callers that run
    /// one reader per core (snapshot), this saves two thread hand-offs per
    /// small file. A single-reader caller (import) leaves it `None` so the
    /// hashing stays parallel.
    pub inline: Option<(&'a Store, &'a Counters)>,
}

/// Cut everything `reader` yields (expected: `len` bytes; it may yield fewer)
/// into content-defined chunks and send them to the hashers. Memory: one
/// [`MAX_CHUNK`] buffer plus the chunks waiting in the bounded channel.
pub(crate) fn send_chunks(
    reader: impl Read,
    len: u64,
    hashers: &Hashers<'_>,
    progress: &ProgressBar,
) -> io::Result<Pending> {
    let (reply_tx, rx) = mpsc::channel();
    let mut lens = Vec::new();
    let single = len <= u64::from(MIN_CHUNK);
    let send = |data: Vec<u8>| -> io::Result<()> {
        progress.inc(data.len() as u64);
        lens.push(data.len() as u64);
        let seq = lens.len() - 1;
        if let (true, Some((store, counters))) = (single, hashers.inline) {
            let result = store.put_object(&data).map(|(id, written)| {
                counters.add(written);
                id
            });
            // `rx` is alive in this frame: the send cannot fail.
            let _ = reply_tx.send((seq, result));
            return Ok(());
        }
        let job = ChunkJob {
            data,
            seq,
            reply: reply_tx.clone(),
        };
        hashers
            .tx
            .send(job)
            .map_err(|_| io::Error::other("hashing threads stopped"))
    };
    cut_chunks(reader, len, send)?;
    Ok(Pending { lens, rx })
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
