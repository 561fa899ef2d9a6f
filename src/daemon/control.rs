//! A daemon's control socket, through which a fork's daemon takes commit
//! requests while it serves and every daemon tells what its caches hold;
//! the periodic commit; and a daemon's memory as `status` shows it.
//!
//! Protocol: the client connects to `STORE/mounts/<key>.sock`, writes one JSON
//! line `{"op":"commit","message":"…"}`, `{"op":"no-commit"}` or `{"op":"ops"}`
//! (forks only), or `{"op":"memory"}` or `{"op":"transport"}`, and reads one
//! JSON line back: `{"ok":true,"checkpoint":"<id>"}`, `{"ok":true}`,
//! `{"ok":true,"ops":[…]}` (the operations not yet committed, oldest first,
//! each as a line of an operation log: docs/format.md),
//! `{"ok":true,"cache":{"limit":N,"bytes":N,"chunks":N,"dirs":N}}` (bytes; a
//! fork's daemon adds `"state":N`, its inode table, apart: its unchanged
//! entries are parked within a quarter of the limit, what changed since the last
//! commit is not bounded),
//! `{"ok":true,"transport":{"name":"io_uring"|"/dev/fuse","ring_requests":N}}` or
//! `{"ok":false,"error":"…"}`.
//!
//! A fork's daemon also takes `{"op":"checkout","target":"<id>","paths":[[bytes…],…]}`
//! (`storefs checkout … --into FORK` of a mounted fork: each path a byte
//! array, relative to the root) and answers
//! `{"ok":true,"checkout":{"paths":[[[bytes…],"restored"|"removed"|"absent"],…],"created":N,"removed":N}}`,
//! after making the kernel forget the names and directories it changed.
//!
//! Each connection is served on a thread of its own (at most
//! [`MAX_CONNECTIONS`] at once); its request line must arrive within
//! [`REQUEST_TIMEOUT`] and be at most [`MAX_REQUEST_LINE`] bytes, or it is
//! answered with an error and closed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Error, Result};
use crate::fs::{Caches, Invalidator, TransportUse};
use crate::journal::ops::OpLine;
use crate::journal::{self, Fork};
use crate::store::mounts::MountRecord;
use crate::store::{ObjectId, Store};

/// What a client asks a fork's daemon.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Commit the fork now, with this message.
    Commit { message: String },
    /// Do not commit on unmount (keep the journal for the next mount).
    NoCommit,
    /// What the mount's caches hold now.
    Memory,
    /// Which transport serves the mount.
    Transport,
    /// `memory` and `transport` in one answer (what `storefs status` asks).
    Status,
    /// Put `paths` (relative to the root) into the fork as checkpoint
    /// `target` (hex id) has them ([`Fork::checkout`]).
    Checkout { target: String, paths: Vec<Vec<u8>> },
    /// The fork's operations not yet committed (what `storefs ops` asks).
    Ops,
}

/// What a daemon's checkout did ([`crate::journal::Checkout`], without the
/// inode numbers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckoutReport {
    /// Each path, with `restored`, `removed` or `absent`.
    pub paths: Vec<(Vec<u8>, String)>,
    pub created: u64,
    pub removed: u64,
}

impl CheckoutReport {
    pub fn of(c: &crate::journal::Checkout) -> CheckoutReport {
        CheckoutReport {
            paths: c
                .paths
                .iter()
                .map(|(p, d)| (p.clone(), d.name().to_string()))
                .collect(),
            created: c.created,
            removed: c.removed,
        }
    }
}

/// How a daemon's requests arrive (see [`crate::fs::Transport`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransportReport {
    /// `io_uring` or `/dev/fuse`.
    pub name: String,
    /// Requests answered over io_uring so far (0 on `/dev/fuse`).
    pub ring_requests: u64,
}

/// What a mount's caches hold, in bytes (see [`crate::fs::Caches`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheReport {
    /// `--cache-size`: the bound on `bytes`.
    pub limit: u64,
    /// Everything counted against it: `chunks` + `dirs`.
    pub bytes: u64,
    /// Decompressed file chunks.
    pub chunks: u64,
    /// Directories in memory, the inode numbering and records kept.
    pub dirs: u64,
    /// A fork's inode table (estimated), not in `bytes`: its unchanged
    /// entries are parked within a quarter of `--cache-size`, what changed
    /// since the last commit is not bounded. Absent for other mounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<u64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The answer to `memory` (null from a daemon without caches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cache: Option<Option<CacheReport>>,
    /// The answer to `transport`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transport: Option<TransportReport>,
    /// The answer to `checkout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkout: Option<CheckoutReport>,
    /// The answer to `ops`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ops: Option<Vec<OpLine>>,
    /// A `commit` refused because the fork was shut down (`FS_IOC_SHUTDOWN`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shut_down: bool,
}

/// Send one request to a daemon's control socket; returns the checkpoint id
/// it answered with (empty for requests that return none).
pub fn request(sock: &Path, req: &Request) -> Result<String> {
    Ok(exchange(sock, req, None)?.checkpoint.unwrap_or_default())
}

/// Have a fork's daemon check `paths` out of checkpoint `target` into its
/// fork (see [`Request::Checkout`]).
pub fn checkout(sock: &Path, target: &ObjectId, paths: &[Vec<u8>]) -> Result<CheckoutReport> {
    let req = Request::Checkout {
        target: target.to_hex(),
        paths: paths.to_vec(),
    };
    Ok(exchange(sock, &req, None)?.checkout.unwrap_or_default())
}

/// Ask a fork's daemon for the operations it has not committed yet, oldest
/// first (under `--writeback-cache`, after the kernel wrote back what it held).
pub fn uncommitted_ops(sock: &Path) -> Result<Vec<OpLine>> {
    Ok(exchange(sock, &Request::Ops, None)?.ops.unwrap_or_default())
}

/// Ask a daemon what its caches hold (`None` from a daemon without caches)
/// and which transport serves its mount (`None` from a daemon older than
/// that question), in one round trip, waiting at most `timeout` for each
/// answer. A daemon older than the `status` request (it refuses it as a bad
/// request) is asked `memory` and `transport` apart.
pub fn daemon_use(
    sock: &Path,
    timeout: Duration,
) -> Result<(Option<CacheReport>, Option<TransportReport>)> {
    match exchange(sock, &Request::Status, Some(timeout)) {
        Ok(r) => Ok((r.cache.flatten(), r.transport)),
        Err(Error::Refused(why)) if why.starts_with(BAD_REQUEST) => {
            let cache = exchange(sock, &Request::Memory, Some(timeout))?.cache;
            let transport = exchange(sock, &Request::Transport, Some(timeout))
                .ok()
                .and_then(|r| r.transport);
            Ok((cache.flatten(), transport))
        }
        Err(e) => Err(e),
    }
}

/// How a daemon's refusal of a request it cannot parse begins.
const BAD_REQUEST: &str = "bad request";

/// One request and its reply; an error for a refusal.
/// Commit a fork's daemon before unmounting it: the head it answers with,
/// or `None` when the fork was shut down (`FS_IOC_SHUTDOWN`): it does not
/// commit, its journal is kept, and the unmount goes on.
pub fn commit_for_unmount(sock: &Path) -> Result<Option<String>> {
    let req = Request::Commit {
        message: "unmount".into(),
    };
    let reply = exchange_any(sock, &req, None)?;
    if reply.shut_down {
        return Ok(None);
    }
    Ok(Some(checked(reply)?.checkpoint.unwrap_or_default()))
}

fn exchange(sock: &Path, req: &Request, timeout: Option<Duration>) -> Result<Reply> {
    checked(exchange_any(sock, req, timeout)?)
}

/// A reply that is not `ok` as [`Error::Refused`].
fn checked(reply: Reply) -> Result<Reply> {
    if !reply.ok {
        return Err(Error::Refused(
            reply.error.unwrap_or_else(|| "failed".into()),
        ));
    }
    Ok(reply)
}

/// The daemon's reply, `ok` or not.
fn exchange_any(sock: &Path, req: &Request, timeout: Option<Duration>) -> Result<Reply> {
    let mut stream = UnixStream::connect(sock).map_err(|source| Error::Unreachable {
        socket: sock.to_path_buf(),
        source,
    })?;
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    serde_json::from_str(&answer).map_err(|source| Error::NoReply {
        socket: sock.to_path_buf(),
        source,
    })
}

/// A live mount with its daemon's memory, as `status --json` lists it.
#[derive(Debug, Serialize)]
pub struct MountStatus {
    #[serde(flatten)]
    pub record: MountRecord,
    /// The daemon's resident memory now and at its peak (`VmRSS` and
    /// `VmHWM`), in bytes; `None` when its `/proc` status cannot be read.
    pub rss_bytes: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    /// What its caches hold; `None` for a dead mount or a daemon that did
    /// not answer within a second.
    pub cache: Option<CacheReport>,
    /// How its requests arrive; `None` as for `cache`.
    pub transport: Option<TransportReport>,
    /// The `storefs run` whose namespace the mount is in (absent for a
    /// mount everyone sees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunOf>,
}

/// The run a mount belongs to, as `status --json` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct RunOf {
    /// The `storefs run` process.
    pub pid: u32,
    /// Its command line.
    pub command: String,
}

/// `record` with its daemon's memory: RSS from `/proc/<pid>/status`, cache
/// use from its control socket.
pub fn mount_status(store: &Store, record: MountRecord) -> MountStatus {
    let sock = store.mount_file(Path::new(&record.mountpoint), "sock");
    status_at(record, &sock, None)
}

/// Each target of each live run as a mount (its mountpoint the origin,
/// its pid the daemon's), with the run it belongs to.
pub fn run_statuses(store: &Store) -> Vec<MountStatus> {
    let mut out = Vec::new();
    for r in super::runs::list(store) {
        for t in &r.targets {
            let record = MountRecord {
                mountpoint: t.origin.clone(),
                target: t.target.clone(),
                checkpoint: match t.mode.as_str() {
                    "rw" => store
                        .fork_head(&t.target)
                        .ok()
                        .flatten()
                        .map_or_else(|| t.checkpoint.clone(), |h| h.to_hex()),
                    _ => t.checkpoint.clone(),
                },
                pid: t.daemon_pid,
                mode: t.mode.clone(),
                log: t.log.clone(),
                started_ns: r.started_ns,
                pid_start: None,
                created: Vec::new(),
            };
            let run = RunOf {
                pid: r.pid,
                command: r.command_line(),
            };
            out.push(status_at(record, Path::new(&t.socket), Some(run)));
        }
    }
    out
}

fn status_at(record: MountRecord, sock: &Path, run: Option<RunOf>) -> MountStatus {
    // A dead mount's pid may belong to another process by now.
    let alive = record.mode != "dead" && record.pid != 0;
    let proc_kib = |field: &str| -> Option<u64> {
        if !alive {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", record.pid)).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        let kib: u64 = line[field.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    };
    let (rss_bytes, peak_rss_bytes) = (proc_kib("VmRSS:"), proc_kib("VmHWM:"));
    let second = Duration::from_secs(1);
    let (cache, transport) = if alive {
        daemon_use(sock, second).unwrap_or_default()
    } else {
        (None, None)
    };
    MountStatus {
        record,
        rss_bytes,
        peak_rss_bytes,
        cache,
        transport,
        run,
    }
}

/// What the daemon's control thread shares with the serving thread.
pub(super) struct Control {
    /// The fork a read-write mount serves.
    pub fork: Option<Arc<Fork>>,
    /// A checkpoint or browse mount's caches.
    pub caches: Option<Caches>,
    /// Which transport serves the mount.
    pub transport: TransportUse,
    /// Set by a `no-commit` request: the daemon does not commit on unmount.
    pub skip_final_commit: AtomicBool,
    /// A fork served with the writeback cache, at this mountpoint: a commit
    /// first has the kernel write back what it holds ([`flush_kernel`]).
    pub writeback_at: Option<PathBuf>,
    /// A fork mount's way to make its kernel forget what a checkout changed.
    pub invalidator: Option<Invalidator>,
    /// Why a request failed, in the client's words.
    pub explain: super::run::Explain,
}

/// Under the writeback cache, written data may still sit in the kernel's
/// page cache: `syncfs` the mount first (the kernel writes it back through
/// the serving threads, and this thread waits), so that a commit folds
/// everything written before it was asked for. Called from the control and
/// commit threads, never from one serving requests (it would wait for
/// itself).
pub(super) fn flush_kernel(writeback_at: Option<&Path>) -> Result<()> {
    let Some(mp) = writeback_at else {
        return Ok(());
    };
    crate::sys::syncfs_fuse(mp).map_err(|e| {
        Error::Refused(format!(
            "cannot write back what the kernel caches of {} before committing: {e}; nothing was committed",
            mp.display()
        ))
    })
}

/// How long a client has to send its request line: a client that connects
/// and sends nothing is answered with an error and hung up on after this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest request line a daemon reads (64 KiB, far above any commit
/// message a person writes): a longer one is answered with an error and the
/// connection closed, having held no more than this much of it.
pub const MAX_REQUEST_LINE: usize = 64 << 10;

/// Connections served at once, each on its own thread; one more waits in
/// the socket's backlog until one of them ends (at most
/// [`REQUEST_TIMEOUT`] for a silent one).
pub const MAX_CONNECTIONS: usize = 16;

/// Listen on `sock` (replacing a stale socket file) and answer requests on
/// background threads for the life of the process: each connection on a
/// thread of its own, at most [`MAX_CONNECTIONS`] at once, so that a client
/// that sends nothing never holds up another's commit.
pub(super) fn serve_control(sock: PathBuf, control: Arc<Control>) -> Result<()> {
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|source| Error::Listen {
        socket: sock.clone(),
        source,
    })?;
    std::thread::Builder::new()
        .name("storefs-control".into())
        .spawn(move || {
            let slots = Arc::new(Slots::default());
            for stream in listener.incoming().flatten() {
                slots.take();
                let (control, mine) = (control.clone(), slots.clone());
                let spawned = std::thread::Builder::new()
                    .name("storefs-control-conn".into())
                    .spawn(move || {
                        if let Err(e) = answer(stream, &control) {
                            tracing::warn!(error = %e, "control request failed");
                        }
                        mine.give_back();
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start a thread for a control request");
                    slots.give_back();
                }
            }
        })?;
    Ok(())
}

/// The count of connections being served, bounded by [`MAX_CONNECTIONS`].
#[derive(Default)]
struct Slots {
    busy: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Slots {
    /// Wait for a free slot and take it.
    fn take(&self) {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy >= MAX_CONNECTIONS {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy += 1;
    }

    fn give_back(&self) {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        *busy -= 1;
        self.freed.notify_one();
    }
}

/// The request line a client sends, read within [`REQUEST_TIMEOUT`] and
/// [`MAX_REQUEST_LINE`]; `Err` with the refusal to answer otherwise. A
/// client that closes its end without a newline has sent what it sent.
fn read_request(mut stream: &UnixStream) -> Result<std::result::Result<String, String>> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
    let mut line = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(Err(format!(
                "{BAD_REQUEST}: no complete request line within {} s",
                REQUEST_TIMEOUT.as_secs()
            )));
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let got = &buf[..n];
        let end = got.iter().position(|&b| b == b'\n');
        line.extend_from_slice(&got[..end.unwrap_or(n)]);
        if line.len() > MAX_REQUEST_LINE {
            return Ok(Err(format!(
                "{BAD_REQUEST}: the request line is longer than {} KiB",
                MAX_REQUEST_LINE >> 10
            )));
        }
        if end.is_some() || n == 0 {
            return Ok(String::from_utf8(line)
                .map_err(|_| format!("{BAD_REQUEST}: the request line is not UTF-8")));
        }
    }
}

fn answer(stream: UnixStream, control: &Control) -> Result<()> {
    let failed = |error: String| Reply {
        ok: false,
        error: Some(error),
        ..Reply::default()
    };
    let request = match read_request(&stream)? {
        Ok(line) => {
            serde_json::from_str::<Request>(&line).map_err(|e| format!("{BAD_REQUEST}: {e}"))
        }
        Err(refusal) => {
            tracing::warn!(error = %refusal, "control request refused");
            Err(refusal)
        }
    };
    let reply = match (request, &control.fork) {
        (Ok(Request::Commit { message }), Some(fork)) => {
            match flush_kernel(control.writeback_at.as_deref())
                .and_then(|()| Ok(fork.commit(&message)?))
            {
                Ok(id) => {
                    tracing::info!(checkpoint = %id, "committed on request");
                    Reply {
                        ok: true,
                        checkpoint: Some(id.to_hex()),
                        ..Reply::default()
                    }
                }
                Err(e) if fork.is_shut_down() => Reply {
                    shut_down: true,
                    ..failed((control.explain)(&e))
                },
                Err(e) => {
                    tracing::warn!(error = %e, "commit failed");
                    failed((control.explain)(&e))
                }
            }
        }
        (Ok(Request::NoCommit), Some(_)) => {
            control.skip_final_commit.store(true, Ordering::SeqCst);
            Reply {
                ok: true,
                ..Reply::default()
            }
        }
        (Ok(Request::Checkout { target, paths }), Some(fork)) => {
            // The client's process asked for these changes (the journal
            // names it; unknown if the socket cannot tell).
            let who = match rustix::net::sockopt::socket_peercred(&stream) {
                Ok(c) => journal::ops::of_process(
                    c.pid.as_raw_nonzero().get() as u32,
                    c.uid.as_raw(),
                    fork.run(),
                ),
                Err(_) => journal::ops::unknown(),
            };
            match journal::ops::on_behalf_of(who, || checkout_here(control, fork, &target, &paths))
            {
                Ok(report) => Reply {
                    ok: true,
                    checkout: Some(report),
                    ..Reply::default()
                },
                Err(e) => {
                    tracing::warn!(error = %e, "checkout failed");
                    failed((control.explain)(&e))
                }
            }
        }
        (Ok(Request::Ops), Some(fork)) => {
            // What the kernel holds is not in the journal yet: a failed
            // write-back leaves it out (and says so in the log).
            if let Err(e) = flush_kernel(control.writeback_at.as_deref()) {
                tracing::warn!(error = %e, "ops: answering without what the kernel holds");
            }
            Reply {
                ok: true,
                ops: Some(fork.uncommitted_ops()),
                ..Reply::default()
            }
        }
        (Ok(Request::Ops), None) => failed(
            "this mount is read-only: only a fork's daemon has uncommitted operations".into(),
        ),
        (Ok(Request::Commit { .. } | Request::NoCommit), None) => {
            failed("this mount is read-only: only a fork's daemon commits".into())
        }
        (Ok(Request::Checkout { .. }), None) => {
            failed("this mount is read-only: only a fork's daemon takes a checkout".into())
        }
        (Ok(Request::Memory), _) => Reply {
            ok: true,
            cache: Some(cache_report(control)),
            ..Reply::default()
        },
        (Ok(Request::Transport), _) => Reply {
            ok: true,
            transport: Some(transport_report(control)),
            ..Reply::default()
        },
        (Ok(Request::Status), _) => Reply {
            ok: true,
            cache: Some(cache_report(control)),
            transport: Some(transport_report(control)),
            ..Reply::default()
        },
        (Err(refusal), _) => failed(refusal),
    };
    let mut out = serde_json::to_string(&reply)?;
    out.push('\n');
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    (&stream).write_all(out.as_bytes())?;
    Ok(())
}

/// A checkout into the fork this daemon serves: what the kernel caches is
/// written back first (under the writeback cache), then the paths change,
/// then the kernel is told to forget the names and directories that did.
fn checkout_here(
    control: &Control,
    fork: &Fork,
    target: &str,
    paths: &[Vec<u8>],
) -> Result<CheckoutReport> {
    let id = ObjectId::from_hex(target).ok_or_else(|| {
        Error::Refused(format!(
            "{BAD_REQUEST}: target '{target}' is not a checkpoint id"
        ))
    })?;
    flush_kernel(control.writeback_at.as_deref())?;
    let mut done = crate::journal::Checkout::default();
    let result = fork.checkout_into(&id, paths, &mut done);
    // Even after a failure part way, the kernel forgets what did change.
    let told = match &control.invalidator {
        Some(inv) => inv.invalidate(&done.names, &done.dirs),
        None => Ok(()),
    };
    result?;
    // Durable before the answer, as a commit's is.
    fork.sync()?;
    tracing::info!(target = %id, paths = paths.len(), created = done.created, removed = done.removed, "checked out");
    if let Err(e) = told {
        return Err(Error::Refused(format!(
            "the paths were checked out, but the kernel could not be told to forget what it cached of them ({e}); unmount the fork and mount it again to see them"
        )));
    }
    Ok(CheckoutReport::of(&done))
}

fn transport_report(control: &Control) -> TransportReport {
    TransportReport {
        name: control.transport.name().into(),
        ring_requests: control.transport.ring_requests(),
    }
}

/// What the mount's caches hold: a checkpoint or browse mount's [`Caches`],
/// or a fork's chunk cache and (apart) its inode table.
fn cache_report(control: &Control) -> Option<CacheReport> {
    if let Some(c) = &control.caches {
        let u = c.usage();
        return Some(CacheReport {
            limit: u.limit as u64,
            bytes: u.total() as u64,
            chunks: u.chunks as u64,
            dirs: u.dirs as u64,
            state: None,
        });
    }
    let m = control.fork.as_ref()?.memory();
    Some(CacheReport {
        limit: m.limit as u64,
        bytes: m.chunks as u64,
        chunks: m.chunks as u64,
        dirs: 0,
        state: Some(m.state as u64),
    })
}

/// Commit `fork` every `every` while the process lives (for
/// `--commit-interval`), after writing back what the kernel holds when
/// `writeback_at` (see [`flush_kernel`]; if that fails, what the daemon has
/// is committed and the rest waits for the next commit).
pub(super) fn commit_periodically(
    fork: Arc<Fork>,
    every: Duration,
    writeback_at: Option<PathBuf>,
) -> Result<()> {
    std::thread::Builder::new()
        .name("storefs-commit".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                // Shut down (FS_IOC_SHUTDOWN): no commit until it is mounted again.
                if fork.is_shut_down() {
                    return;
                }
                if let Err(e) = flush_kernel(writeback_at.as_deref()) {
                    tracing::warn!(error = %e, "periodic commit without the kernel's cached writes");
                }
                match fork.commit("periodic commit") {
                    Ok(id) => tracing::info!(checkpoint = %id, "periodic commit"),
                    Err(e) => tracing::warn!(error = %e, "periodic commit failed"),
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `line` sent to a daemon with `control`, and its reply line.
    fn ask_raw(control: &Control, line: &str) -> String {
        let (mut client, server) = UnixStream::pair().unwrap();
        client.write_all(line.as_bytes()).unwrap();
        answer(server, control).unwrap();
        let mut reply = String::new();
        BufReader::new(client).read_line(&mut reply).unwrap();
        reply
    }

    fn ask(control: &Control, line: &str) -> Reply {
        serde_json::from_str(&ask_raw(control, line)).unwrap()
    }

    #[test]
    fn a_read_only_daemon_reports_its_caches_and_refuses_commits() {
        let control = Control {
            fork: None,
            caches: Some(Caches::new(4 << 20)),
            transport: TransportUse::default(),
            skip_final_commit: AtomicBool::new(false),
            writeback_at: None,
            invalidator: None,
            explain: |e| e.to_string(),
        };
        let reply = ask(&control, "{\"op\":\"memory\"}\n");
        assert!(reply.ok);
        let cache = reply.cache.flatten().expect("a cache report");
        assert_eq!((cache.limit, cache.bytes), (4 << 20, 0));
        for line in [
            "{\"op\":\"commit\",\"message\":\"m\"}\n",
            "{\"op\":\"no-commit\"}\n",
        ] {
            let reply = ask(&control, line);
            assert!(!reply.ok);
            assert!(reply.error.unwrap().contains("read-only"));
        }
        assert!(!control.skip_final_commit.load(Ordering::SeqCst));
        let reply = ask(&control, "{\"op\":\"dance\"}\n");
        assert!(reply.error.unwrap().starts_with("bad request"));
    }

    #[test]
    fn an_over_long_line_is_refused_and_a_silent_client_timed_out() {
        let control = read_only_control();
        let (mut client, server) = UnixStream::pair().unwrap();
        let reader = client.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            // The daemon hangs up part way: the rest fails to send.
            let _ = client.write_all(&vec![b'x'; 10 << 20]);
        });
        answer(server, &control).unwrap();
        let mut reply = String::new();
        BufReader::new(reader).read_line(&mut reply).unwrap();
        writer.join().unwrap();
        let reply: Reply = serde_json::from_str(&reply).unwrap();
        assert!(!reply.ok);
        assert_eq!(
            reply.error.unwrap(),
            "bad request: the request line is longer than 64 KiB"
        );

        let (client, server) = UnixStream::pair().unwrap();
        answer(server, &control).unwrap();
        let mut reply = String::new();
        BufReader::new(client).read_line(&mut reply).unwrap();
        assert!(
            reply.contains("no complete request line within 5 s"),
            "{reply}"
        );
    }

    #[test]
    fn a_daemon_without_caches_answers_null() {
        let control = Control {
            fork: None,
            caches: None,
            transport: TransportUse::default(),
            skip_final_commit: AtomicBool::new(false),
            writeback_at: None,
            invalidator: None,
            explain: |e| e.to_string(),
        };
        let reply = ask_raw(&control, "{\"op\":\"memory\"}\n");
        assert_eq!(reply, "{\"ok\":true,\"cache\":null}\n");
    }

    /// A control socket in `dir` answering with `control` as a daemon does,
    /// except requests `old` does not know, refused as a daemon from before
    /// them refuses them; the requests it got, in order.
    fn fake_daemon(
        dir: &Path,
        control: Control,
        old: &'static [&'static str],
    ) -> (PathBuf, Arc<std::sync::Mutex<Vec<String>>>) {
        let sock = dir.join("d.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let stream = stream.unwrap();
                let mut line = String::new();
                BufReader::new(&stream).read_line(&mut line).unwrap();
                log.lock().unwrap().push(line.trim().to_string());
                if old.iter().any(|op| line.contains(&format!("\"{op}\""))) {
                    let refusal =
                        format!("{{\"ok\":false,\"error\":\"{BAD_REQUEST}: unknown variant\"}}\n");
                    (&stream).write_all(refusal.as_bytes()).unwrap();
                    continue;
                }
                // The real answer to the line read above.
                let reply = ask_raw(&control, &line);
                (&stream).write_all(reply.as_bytes()).unwrap();
            }
        });
        (sock, seen)
    }

    fn read_only_control() -> Control {
        Control {
            fork: None,
            caches: Some(Caches::new(4 << 20)),
            transport: TransportUse::default(),
            skip_final_commit: AtomicBool::new(false),
            writeback_at: None,
            invalidator: None,
            explain: |e| e.to_string(),
        }
    }

    #[test]
    fn status_asks_a_daemon_once_and_an_older_daemon_the_old_way() {
        let tmp = tempfile::tempdir().unwrap();
        let second = Duration::from_secs(5);
        let (sock, seen) = fake_daemon(tmp.path(), read_only_control(), &[]);
        let (cache, transport) = daemon_use(&sock, second).unwrap();
        assert_eq!(cache.map(|c| c.limit), Some(4 << 20));
        assert_eq!(transport.unwrap().name, "/dev/fuse");
        assert_eq!(*seen.lock().unwrap(), ["{\"op\":\"status\"}"]);

        let old = tmp.path().join("old");
        std::fs::create_dir(&old).unwrap();
        let (sock, seen) = fake_daemon(&old, read_only_control(), &["status"]);
        let (cache, transport) = daemon_use(&sock, second).unwrap();
        assert_eq!(cache.map(|c| c.limit), Some(4 << 20));
        assert_eq!(transport.unwrap().name, "/dev/fuse");
        assert_eq!(seen.lock().unwrap().len(), 3);

        // Older still: no `transport` either; the cache is still reported.
        let older = tmp.path().join("older");
        std::fs::create_dir(&older).unwrap();
        let (sock, _) = fake_daemon(&older, read_only_control(), &["status", "transport"]);
        let (cache, transport) = daemon_use(&sock, second).unwrap();
        assert_eq!(cache.map(|c| c.limit), Some(4 << 20));
        assert_eq!(transport, None);
    }
}
