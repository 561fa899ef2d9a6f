//! The classic transport: worker threads that `read(2)` requests from
//! `/dev/fuse` and `write(2)` their replies, with storefs's own codec.
//!
//! fuser 0.18 mounts (`Session::new`: `mount(2)` as root, fusermount3 for
//! an ordinary user) and answers INIT (the adapter, [`super::fuse`], asks
//! for the capabilities there); its session loop is never run. Instead
//! [`serve`] starts the mount's worker threads (`--threads`, as many as
//! fuser's `n_threads` started before), all reading the session's one
//! `/dev/fuse` descriptor (fuser's default: no `FUSE_DEV_IOC_CLONE`). Each
//! has its own buffer of [`MAX_WRITE`] plus a page, as fuser's, reads one
//! request, hands it to [`super::wire::serve_dev`] (the same decoding,
//! uid filter, dispatch and encoding as the io_uring transport's, plus the
//! requests only `/dev/fuse` carries: FORGET, BATCH_FORGET, INTERRUPT,
//! DESTROY) and writes the reply, if any, as one `writev(2)`.
//!
//! As fuser's loop: a read that fails with `ENOENT` (the request was
//! interrupted before it was read), `EINTR` or `EAGAIN` is retried;
//! `ENODEV` (the kernel ended the connection: unmounted or aborted) ends
//! the thread cleanly; DESTROY is answered and ends the thread that read
//! it. A reply the kernel no longer waits for (`ENOENT` from the write: the
//! request was interrupted) is dropped quietly.

use std::io::{self, IoSlice};
use std::os::fd::BorrowedFd;

use rustix::io::Errno;
use zerocopy::IntoBytes;

use super::abi;
use super::view::View;
use super::wire::{self, DevReply, Policy};

/// The `max_write` INIT agrees to on `/dev/fuse` (fuser 0.18's; the kernel
/// also caps a write at `max_pages`, 256 pages by default). The io_uring
/// transport sets the smaller [`super::uring::PAYLOAD`].
pub(crate) const MAX_WRITE: u32 = 16 << 20;

/// A worker's request buffer: the largest write and its headers. The kernel
/// refuses a read into less than `max_write` plus the two headers.
const BUFFER: usize = MAX_WRITE as usize + 4096;

/// Serve `dev` (the session's `/dev/fuse`, after INIT) with `threads`
/// worker threads (at least one) until the kernel ends the connection.
/// The threads inherit the calling thread's signal mask. Ok when every
/// worker ended cleanly; else the first worker's error.
pub(crate) fn serve(
    dev: BorrowedFd<'_>,
    view: &dyn View,
    policy: &Policy,
    threads: usize,
) -> io::Result<()> {
    std::thread::scope(|s| {
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let worker = std::thread::Builder::new()
                .name(format!("storefs-fuse-{i}"))
                .spawn_scoped(s, move || work(dev, view, policy));
            match worker {
                Ok(w) => workers.push(w),
                // The ones started serve on; the scope waits for them.
                Err(e) if workers.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, started = i, "cannot start another FUSE worker")
                }
            }
        }
        let mut result = Ok(());
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a FUSE worker thread panicked")));
            if result.is_ok() {
                result = r;
            }
        }
        result
    })
}

/// One worker: read, serve, reply, until the connection ends.
fn work(dev: BorrowedFd<'_>, view: &dyn View, policy: &Policy) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    let mut out = Vec::new();
    loop {
        let n = match rustix::io::read(dev, &mut buf) {
            Ok(n) => n,
            Err(Errno::NOENT | Errno::INTR | Errno::AGAIN) => continue,
            Err(Errno::NODEV) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            // Not /dev/fuse (which never reads empty): the peer went away.
            return Ok(());
        }
        match wire::serve_dev(view, policy, &buf[..n], &mut out) {
            DevReply::None => {}
            DevReply::Reply(unique, result) => reply(dev, unique, result, &out),
            DevReply::Destroy(unique) => {
                reply(dev, unique, Ok(()), &[]);
                return Ok(());
            }
        }
    }
}

/// Write `fuse_out_header` and the reply's bytes (none on an error).
fn reply(dev: BorrowedFd<'_>, unique: u64, result: Result<(), i32>, out: &[u8]) {
    let (error, data) = match result {
        Ok(()) => (0, out),
        Err(errno) => (-errno, &[][..]),
    };
    let header = abi::OutHeader {
        len: (size_of::<abi::OutHeader>() + data.len()) as u32,
        error,
        unique,
    };
    let bufs = [IoSlice::new(header.as_bytes()), IoSlice::new(data)];
    match rustix::io::writev(dev, &bufs) {
        // One writev is one reply: the kernel takes all of it or none.
        Ok(_) => {}
        // The request was interrupted and is gone.
        Err(Errno::NOENT) => tracing::debug!(unique, "the request was interrupted; reply dropped"),
        // Unmounted meanwhile: the next read ends the thread.
        Err(Errno::NODEV) => {}
        Err(e) => tracing::error!(unique, error = %e, "cannot send a FUSE reply"),
    }
}
