//! FUSE over io_uring: the second transport (issue 18).
//!
//! The classic transport ([`super::devfuse`]): worker threads `read(2)`
//! requests from `/dev/fuse` and `write(2)` replies, and a request made on one core is
//! usually answered by a thread woken on the other. With
//! `FUSE_OVER_IO_URING` (kernel 6.14+, `enable_uring=Y`) the kernel keeps
//! one queue per possible CPU; a request lands in the queue of the CPU that
//! made it, and a thread pinned to that CPU answers it through its own
//! io_uring. docs/design.md ("FUSE over io_uring") has the measurements.
//!
//! What is here, and only here: the rings. [`start`] gives each queue a
//! thread that registers [`DEPTH`] entries (a 288-byte header and a payload
//! buffer each, `FUSE_IO_URING_CMD_REGISTER`), then answers every request
//! that completes on an entry and fetches the next with
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`. The request itself is decoded and
//! its reply encoded by [`super::wire`], the codec the classic transport
//! uses too, and served by [`super::dispatch`]; the view does not know
//! which transport asked.
//!
//! INIT goes through fuser's session (the adapter, [`super::fuse`], asks
//! for the flag there); the `/dev/fuse` workers serve what the kernel never
//! sends on a ring (FORGET, INTERRUPT) and every request before all queues
//! have an entry. If a ring cannot be set up or registered, the kernel
//! never uses the rings and the classic threads serve everything: a
//! fallback, logged once. A queue's
//! thread ends when the kernel ends its entries (unmount, abort).
//!
//! Kernel reference: Documentation/filesystems/fuse/fuse-io-uring.rst,
//! `fs/fuse/dev_uring.c`, `include/uapi/linux/fuse.h`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use zerocopy::{FromZeros, IntoBytes};

use super::abi;
use super::view::View;
use super::wire::{self, Policy};

/// Entries registered per queue. One thread serves a queue, one request at
/// a time; more entries let the kernel hand it the next request without a
/// wait (and hold a few background reads).
pub(crate) const DEPTH: usize = 4;

/// Every write and read fits one entry's payload: the adapter sets
/// `max_write` to this when it asks for io_uring, and the kernel's
/// `max_pages` limit (256 pages) is the same 1 MiB; the kernel refuses
/// registration of a smaller buffer.
pub(crate) const PAYLOAD: usize = 1 << 20;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// The size of the per-entry header the kernel fills
/// ([`abi::UringReqHeader`]).
const HEADER: usize = size_of::<abi::UringReqHeader>();

/// The running rings. [`Rings::join`] waits for their threads, which end
/// when the kernel ends the connection.
pub(crate) struct Rings {
    threads: Vec<JoinHandle<()>>,
    served: Arc<AtomicU64>,
}

impl Rings {
    /// How many queues (one per possible CPU).
    pub(crate) fn queues(&self) -> usize {
        self.threads.len()
    }

    /// Requests answered over the rings so far.
    pub(crate) fn served(&self) -> Arc<AtomicU64> {
        self.served.clone()
    }

    /// Wait for every queue's thread to end (after the unmount).
    pub(crate) fn join(self) {
        for t in self.threads {
            if t.join().is_err() {
                tracing::error!("an io_uring queue thread panicked");
            }
        }
    }
}

/// Start one thread per possible CPU serving the queue of that CPU over
/// `dev` (the session's `/dev/fuse`, after INIT agreed on io_uring);
/// `wake_here` as [`wakes_requesters_here`] answered.
pub(crate) fn start(
    dev: OwnedFd,
    view: Arc<dyn View>,
    policy: Policy,
    wake_here: bool,
) -> io::Result<Rings> {
    let (dev, policy) = (Arc::new(dev), Arc::new(policy));
    if !wake_here {
        tracing::info!(
            "io_uring queues cannot commit as SCHED_IDLE (switching back needs CAP_SYS_NICE): a requester may move between cores at each request"
        );
    }
    let served = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for qid in 0..possible_cpus() {
        let (dev, view, policy, served) =
            (dev.clone(), view.clone(), policy.clone(), served.clone());
        let qid = u16::try_from(qid).map_err(|_| io::Error::other("too many CPUs"))?;
        threads.push(
            std::thread::Builder::new()
                .name(format!("storefs-uring-{qid}"))
                .spawn(move || {
                    if let Err(e) = Queue::new(&dev, qid, wake_here).and_then(|mut q| {
                        q.serve(&*view, &policy, &served)
                    }) {
                        tracing::warn!(
                            queue = qid,
                            error = %e,
                            "FUSE over io_uring: this queue stopped; until every queue has a ring the kernel uses /dev/fuse"
                        );
                    }
                })?,
        );
    }
    Ok(Rings { threads, served })
}

/// Whether the queues can wake each requester on its own core ([`WakeHere`]):
/// without that, a single process's requests move it between cores and the
/// rings lose to `/dev/fuse` (`tar -x` 1.5x its time), so `--transport auto`
/// takes them only with it.
pub(crate) fn wakes_requesters_here() -> bool {
    WakeHere::probe()
}

/// The CPUs the kernel makes queues for: `/sys/devices/system/cpu/possible`
/// ("0-1", "0", "0-3,5"), one queue per CPU up to the highest.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let highest = s
        .trim()
        .rsplit([',', '-'])
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    highest + 1
}

/// One registered entry: the header and payload the kernel reads and writes,
/// and the two iovecs REGISTER points it at. The header and payload are
/// heap buffers whose addresses never change; the queue's `Vec<Ent>` is
/// never resized, so the iovecs stay put too.
struct Ent {
    header: Box<abi::UringReqHeader>,
    payload: Vec<u8>,
    iov: [libc::iovec; 2],
}

// SAFETY: the iovecs point into the entry's own buffers; an entry lives and
// is used on its queue's thread only.
unsafe impl Send for Ent {}

struct Queue<'a> {
    dev: &'a OwnedFd,
    qid: u16,
    /// Declared before `ents`, so dropped first: closing the ring cancels
    /// what the kernel still holds before the buffers it names are freed.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    ents: Vec<Ent>,
    /// The reply of the request being answered (reused).
    out: Vec<u8>,
    /// Whether it commits as `SCHED_IDLE` ([`WakeHere`]).
    wake_here: bool,
}

impl<'a> Queue<'a> {
    fn new(dev: &'a OwnedFd, qid: u16, wake_here: bool) -> io::Result<Queue<'a>> {
        pin_to(usize::from(qid));
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(DEPTH as u32 * 2)?;
        let ents = (0..DEPTH)
            .map(|_| {
                let mut e = Ent {
                    header: Box::new(abi::UringReqHeader::new_zeroed()),
                    payload: vec![0u8; PAYLOAD],
                    iov: [libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    }; 2],
                };
                e.iov = [
                    libc::iovec {
                        iov_base: e.header.as_mut_bytes().as_mut_ptr().cast(),
                        iov_len: HEADER,
                    },
                    libc::iovec {
                        iov_base: e.payload.as_mut_ptr().cast(),
                        iov_len: PAYLOAD,
                    },
                ];
                e
            })
            .collect();
        Ok(Queue {
            dev,
            qid,
            ring,
            ents,
            out: Vec::with_capacity(PAYLOAD),
            wake_here,
        })
    }

    /// Register every entry, then answer requests until the kernel ends them.
    fn serve(&mut self, view: &dyn View, policy: &Policy, served: &AtomicU64) -> io::Result<()> {
        for i in 0..self.ents.len() {
            let iov = self.ents[i].iov.as_ptr();
            let sqe = self.command(CMD_REGISTER, 0, Some(iov), i);
            self.push(&sqe)?;
        }
        // What completed, taken off the ring before answering (answering
        // borrows the queue); reused.
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(DEPTH);
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(idx, res) in &done {
                if res < 0 {
                    return match -res {
                        // The connection ended (unmount or abort).
                        libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => Ok(()),
                        errno => Err(io::Error::from_raw_os_error(errno)),
                    };
                }
                let i = usize::try_from(idx).unwrap_or(usize::MAX);
                let Some(commit_id) = self.answer(i, view, policy) else {
                    return Err(io::Error::other("completion for an unknown entry"));
                };
                served.fetch_add(1, Ordering::Relaxed);
                // Queued only (the ring holds 2 x DEPTH entries): submitted below.
                let sqe = self.command(CMD_COMMIT_AND_FETCH, commit_id, None, i);
                self.push(&sqe)?;
            }
            // The commits wake their requesters, here and now (see `WakeHere`).
            let _idle = self.wake_here.then(WakeHere::enter);
            self.ring.submit()?;
        }
    }

    /// Serve the request entry `i` holds and put its reply in the entry;
    /// the commit id to send it back with.
    fn answer(&mut self, i: usize, view: &dyn View, policy: &Policy) -> Option<u64> {
        let e = self.ents.get_mut(i)?;
        let ent = e.header.ring_ent_in_out;
        let payload_sz = (ent.payload_sz as usize).min(PAYLOAD);
        let in_header = &e.header.in_out[..wire::IN_HEADER];
        let unique = wire::unique(in_header);
        let result = wire::serve(
            view,
            policy,
            in_header,
            &e.header.op_in,
            &e.payload[..payload_sz],
            &mut self.out,
        );
        let (error, len) = match result {
            Ok(()) if self.out.len() <= PAYLOAD => {
                e.payload[..self.out.len()].copy_from_slice(&self.out);
                (0i32, self.out.len())
            }
            Ok(()) => {
                tracing::error!(len = self.out.len(), "reply larger than a ring entry");
                (-libc::EIO, 0)
            }
            Err(errno) => (-errno, 0),
        };
        // fuse_out_header in `in_out`; the reply's bytes in the payload,
        // their count in `ring_ent_in_out`.
        let out = abi::OutHeader {
            len: (size_of::<abi::OutHeader>() + len) as u32,
            error,
            unique,
        };
        e.header.in_out[..size_of::<abi::OutHeader>()].copy_from_slice(out.as_bytes());
        e.header.ring_ent_in_out.payload_sz = len as u32;
        Some(ent.commit_id)
    }

    /// A `FUSE_URING_CMD` for entry `idx`: REGISTER (with its iovecs) or
    /// COMMIT_AND_FETCH (with the commit id the kernel gave).
    fn command(
        &self,
        op: u32,
        commit_id: u64,
        iov: Option<*const libc::iovec>,
        idx: usize,
    ) -> squeue::Entry128 {
        let req = abi::UringCmdReq {
            commit_id,
            qid: self.qid,
            ..abi::UringCmdReq::new_zeroed()
        };
        let cmd: [u8; 80] = zerocopy::transmute!(req);
        let mut b = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), op).cmd(cmd);
        if let Some(p) = iov {
            b = b.addr(Some(p as u64));
        }
        let sqe = b.build().user_data(idx as u64);
        if iov.is_none() {
            return sqe;
        }
        // REGISTER needs sqe->len = 2 (the number of iovecs), which io-uring
        // 0.7's UringCmd80 cannot set. Entry128 is the 64-byte SQE then 64
        // bytes of command; `len` is the u32 at offset 24 of the SQE.
        // SAFETY: Entry128 is repr(C), 128 bytes, plain data.
        let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        raw[24..28].copy_from_slice(&2u32.to_le_bytes());
        // SAFETY: the same 128 bytes back; any bytes are a valid Entry128.
        unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
    }

    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: every buffer the entry names is an `Ent` this queue
            // owns until the ring is dropped.
            let pushed = unsafe { self.ring.submission().push(sqe) };
            if pushed.is_ok() {
                return Ok(());
            }
            // Full: hand the kernel what is queued, then retry.
            self.ring.submit()?;
        }
    }
}

/// Where the scheduler wakes a requester: the reply's commit wakes the
/// process that made the request, and the scheduler moves a woken task to
/// an idle CPU rather than the busy one it slept on. The CPU it slept on is
/// busy with this thread, so on a machine with an idle core every request
/// would move its process to the other core, and its next request would go
/// to that core's queue, and back: one migration per request (`tar -x` of
/// 20,000 files: 158,000 migrations, 6.6 s against 4.2 s on `/dev/fuse`).
/// While the thread commits it runs as `SCHED_IDLE`: a CPU that runs only
/// such threads counts as idle, so the requester wakes where it slept, on
/// the core whose queue serves it (84 migrations, 3.3 s). The thread is
/// back to `SCHED_OTHER` before it waits for the next request, so it never
/// waits for its next request as an idle-class thread; it is `SCHED_IDLE`
/// at most until the woken requester lets it run again.
///
/// Going back to `SCHED_OTHER` needs `CAP_SYS_NICE` or a `RLIMIT_NICE` of
/// 20, so [`WakeHere::probe`] tries the round trip first on a thread of its
/// own; without it the rings work as before, with the migrations.
struct WakeHere;

impl WakeHere {
    /// Whether this process may switch a thread to `SCHED_IDLE` and back.
    fn probe() -> bool {
        if std::env::var_os("STOREFS_URING_WAKE_HERE").is_some_and(|v| v == "0") {
            return false;
        }
        std::thread::spawn(|| set_policy(libc::SCHED_IDLE) && set_policy(libc::SCHED_OTHER))
            .join()
            .unwrap_or(false)
    }

    /// `SCHED_IDLE` until the guard drops.
    fn enter() -> WakeHere {
        set_policy(libc::SCHED_IDLE);
        WakeHere
    }
}

impl Drop for WakeHere {
    fn drop(&mut self) {
        if !set_policy(libc::SCHED_OTHER) {
            tracing::error!("an io_uring queue could not leave SCHED_IDLE");
        }
    }
}

/// Set the calling thread's scheduling policy (priority 0); false if refused.
fn set_policy(policy: i32) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// Run this thread on `cpu` (the kernel answers a queue's requests wherever
/// its thread runs; pinned, it is the core that asked). Not fatal if the
/// CPU is outside this process's set.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the call reads it only.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    if !ok {
        tracing::debug!(cpu, "could not pin the io_uring queue thread to its CPU");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::wire::{u32_at, u64_at};

    #[test]
    fn there_is_a_queue_per_possible_cpu() {
        let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
        let n = possible_cpus();
        assert!(n >= 1);
        assert!(s.trim().ends_with(&(n - 1).to_string()), "{s} -> {n}");
    }

    #[test]
    #[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
    fn a_queue_is_idle_class_only_while_it_commits() {
        // SAFETY: pid 0 is the calling thread; the call only reads.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        std::thread::spawn(move || {
            // The tests run as root (CAP_SYS_NICE), so the probe succeeds.
            assert!(WakeHere::probe());
            assert_eq!(policy(), libc::SCHED_OTHER);
            let held = WakeHere::enter();
            assert_eq!(policy(), libc::SCHED_IDLE);
            drop(held);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn register_commands_carry_two_iovecs_and_the_queue() {
        let dev: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let q = Queue::new(&dev, 1, false).unwrap();
        let iov = q.ents[0].iov.as_ptr();
        let sqe = q.command(CMD_REGISTER, 0, Some(iov), 3);
        // SAFETY: Entry128 is repr(C), 128 bytes, plain data.
        let raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(u32_at(&raw, 24).unwrap(), 2, "sqe->len: two iovecs");
        assert_eq!(u64_at(&raw, 16).unwrap(), iov as u64, "sqe->addr");
        assert_eq!(u64_at(&raw, 32).unwrap(), 3, "user_data");
        // The command area starts at byte 48: commit id at 8, qid at 16.
        assert_eq!(u16::from_le_bytes([raw[48 + 16], raw[48 + 17]]), 1);
        let fetch = q.command(CMD_COMMIT_AND_FETCH, 77, None, 2);
        // SAFETY: as above.
        let raw: [u8; 128] = unsafe { std::mem::transmute(fetch) };
        assert_eq!(u32_at(&raw, 24).unwrap(), 0);
        assert_eq!(u64_at(&raw, 48 + 8).unwrap(), 77, "commit id");
    }
}
