//! The daemon itself: mount, register, report ready, serve until unmounted
//! or stopped by a signal, then commit a fork and deregister.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::control::{self, Control};
use super::log::{init_file_logging, log_path};
use super::mountpoint::on_mountpoint;
use super::{Error, Result};
use crate::fs::{self as sfs, MountConfig, Mounted, Transport};
use crate::journal::Fork;
use crate::remote::LazyBackend;
use crate::store::mounts::{CreatedDir, MountRecord};
use crate::store::{ObjectId, Store};
use crate::sys;

/// What a daemon serves.
#[derive(Clone, Debug)]
pub enum What {
    /// A checkpoint, read-only.
    Checkpoint(ObjectId),
    /// Fork `name`, read-write; `head` is its head now (for the record).
    Fork { name: String, head: ObjectId },
    /// The whole store, read-only.
    Browse,
}

/// How a daemon serves.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The user's `-o` options (each may hold several, comma-separated).
    pub options: Vec<String>,
    /// Bound on what a checkpoint or browse mount's caches hold
    /// (decompressed chunks, directories, inode numbering).
    pub cache_size: usize,
    /// FUSE worker threads; `None` for the number of cores (at least 2).
    pub threads: Option<usize>,
    /// For a fork: commit every this many seconds (0: only on unmount).
    pub commit_interval: u64,
    /// For a fork: the kernel's writeback cache (`--writeback-cache`).
    pub writeback_cache: bool,
    /// How the kernel's requests reach the daemon (`--transport`).
    pub transport: Transport,
    /// How the control socket tells its client why a request failed (a
    /// commit, a checkout): the CLI's one line, with the command that
    /// fixes it.
    pub explain: Explain,
}

/// An error as one line for the user.
pub type Explain = fn(&(dyn std::error::Error + 'static)) -> String;

/// One mount to serve.
pub struct Mount {
    /// The store, reading through `lazy` for a lazy mount.
    pub store: Store,
    /// The fetching backend of a lazy mount (synced, and its counters
    /// logged, at unmount).
    pub lazy: Option<Arc<LazyBackend>>,
    pub what: What,
    /// What the record, the fsname (the source in /proc/mounts) and the
    /// log name as the target.
    pub label: String,
    pub mountpoint: PathBuf,
    /// The mountpoint is the checkpoint's origin, which passed the origin
    /// policy ([`super::origin`]): created without following symlinks and
    /// checked again once it exists.
    pub from_origin: bool,
    pub settings: Settings,
    /// A daemon of `storefs run`: its control socket is here (its log
    /// beside it, `.log`), and it writes no mount record (its mount is in
    /// the run's namespace; the run's record names it: [`super::runs`]).
    pub run_socket: Option<PathBuf>,
}

/// Be the daemon: check and create the mountpoint, mount, register the
/// mount, call `on_serving` (the mount answers), serve until unmounted or
/// stopped by SIGTERM, SIGINT or SIGHUP, then commit a fork (unless told
/// not to) and remove the record. Logs to the store's log for the mountpoint.
///
/// Call it from the process's main thread before starting other threads
/// (see [`crate::fs::mount_checkpoint`] on the signal mask).
pub fn run(m: Mount, on_serving: impl FnOnce()) -> Result<()> {
    tune_malloc();
    let root = m.store.root().to_path_buf();
    let mp = m.mountpoint.clone();
    let from_origin = m.from_origin;
    on_mountpoint(&root, &mp, from_origin, |created| {
        serve_mount(m, created, on_serving)
    })
}

/// The run id in a run daemon's socket path `runs/<pid>-<n>.sock`.
fn run_of_socket(sock: &Path) -> Option<String> {
    let stem = sock.file_stem()?.to_str()?;
    let (pid, _) = stem.split_once('-')?;
    pid.parse::<u32>().ok().map(|p| p.to_string())
}

fn serve_mount(m: Mount, created: &[CreatedDir], on_serving: impl FnOnce()) -> Result<()> {
    let mp = m.mountpoint.as_path();
    let log = match &m.run_socket {
        Some(sock) => sock.with_extension("log"),
        None => log_path(&m.store, mp),
    };
    init_file_logging(&log)?;
    let store = Arc::new(m.store);
    let cfg = MountConfig {
        mountpoint: mp.to_path_buf(),
        // The source in /proc/mounts is what was given to `storefs mount`
        // or mount(8), so that `findmnt -S TARGET` and `umount TARGET` find
        // it; the type (`fuse.storefs`) says it is storefs.
        fsname: m.label.clone(),
        extra_options: m
            .settings
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .filter(|o| !o.is_empty())
            .map(str::to_string)
            .collect(),
        cache_bytes: m.settings.cache_size,
        threads: m.settings.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .max(2)
        }),
        writeback_cache: m.settings.writeback_cache,
        transport: m.settings.transport,
    };
    // A fork is opened (locked, journal replayed) before the kernel mount.
    let fork = match &m.what {
        // --cache-size bounds its chunk cache (3/4) and its inode table's
        // unchanged entries (1/4), during the replay too.
        What::Fork { name, .. } => Some(Arc::new(Fork::open_sized(
            store.clone(),
            name,
            m.settings.cache_size,
        )?)),
        _ => None,
    };
    // Inside `storefs run`, every change records the run: its id is the
    // run's pid, the first part of its sockets' names (`runs/<pid>-<n>.sock`).
    if let (Some(f), Some(run)) = (&fork, m.run_socket.as_deref().and_then(run_of_socket)) {
        f.set_run(&run);
    }
    let mounted = match (&fork, &m.what) {
        (Some(f), _) => sfs::mount_fork(f.clone(), &cfg),
        (None, What::Checkpoint(id)) => sfs::mount_checkpoint(store.clone(), *id, &cfg),
        (None, _) => sfs::mount_browse(store.clone(), &cfg),
    }
    .map_err(|source| Error::Mount {
        mountpoint: mp.to_path_buf(),
        source,
    })?;
    // Threads start after the mount, which blocked the stop signals: they inherit the mask.
    let socket = m
        .run_socket
        .clone()
        .unwrap_or_else(|| store.mount_file(mp, "sock"));
    let writeback_at = (fork.is_some() && m.settings.writeback_cache).then(|| mp.to_path_buf());
    let control = Arc::new(Control {
        fork: fork.clone(),
        caches: mounted.caches(),
        transport: mounted.transport(),
        skip_final_commit: AtomicBool::new(false),
        writeback_at: writeback_at.clone(),
        invalidator: fork.is_some().then(|| mounted.invalidator()),
        explain: m.settings.explain,
    });
    match control::serve_control(socket.clone(), control.clone()) {
        Ok(()) => {}
        // A fork needs it (commits); for the others it only reports memory.
        Err(e) if fork.is_none() => {
            tracing::warn!(error = %e, "no control socket; status will not show cache use")
        }
        Err(e) => return Err(e),
    }
    if let Some(f) = &fork
        && m.settings.commit_interval > 0
    {
        control::commit_periodically(
            f.clone(),
            Duration::from_secs(m.settings.commit_interval),
            writeback_at,
        )?;
    }
    let (mode, id) = match &m.what {
        What::Checkpoint(id) => ("ro", Some(*id)),
        What::Fork { head, .. } => ("rw", Some(*head)),
        What::Browse => ("browse", None),
    };
    let record = MountRecord {
        mountpoint: mp.to_string_lossy().into_owned(),
        target: m.label.clone(),
        checkpoint: id.map(|id| id.to_hex()).unwrap_or_default(),
        pid: std::process::id(),
        mode: mode.into(),
        log: log.to_string_lossy().into_owned(),
        started_ns: now_ns(),
        pid_start: sys::process_start_time(std::process::id()),
        created: created.to_vec(),
    };
    if m.run_socket.is_none() {
        store.add_mount(&record)?;
    }
    tracing::info!(mountpoint = %mp.display(), checkpoint = ?id, target = %m.label, mode, "mounted");
    on_serving();
    // Under systemd's Type=notify (storefs@.service), `systemctl start`
    // returns once the mount answers, not when the process starts.
    if let Err(e) = sys::notify_service_manager("READY=1") {
        tracing::warn!(error = %e, "could not tell systemd the mount is ready (NOTIFY_SOCKET)");
    }
    let result = serve(mounted);
    let _ = sys::notify_service_manager("STOPPING=1");
    tracing::info!(mountpoint = %mp.display(), "unmounted");
    if let Some(l) = &m.lazy {
        l.finish();
    }
    let _ = std::fs::remove_file(&socket);
    if let Some(f) = &fork {
        if control.skip_final_commit.load(Ordering::SeqCst) {
            tracing::info!("not committing on unmount (--no-commit); the journal is kept");
        } else if f.is_shut_down() {
            // As after a crash: the next mount replays what was synced.
            tracing::warn!(
                "not committing on unmount: the fork was shut down (FS_IOC_SHUTDOWN); the journal is kept"
            );
        } else {
            // Everything written is already in the journal (under the
            // writeback cache too: the unmount waited for every file to be
            // closed, and a close writes back its file); a failed commit
            // loses nothing.
            match f.commit("unmount") {
                Ok(id) => tracing::info!(checkpoint = %id, "committed on unmount"),
                Err(e) => {
                    tracing::warn!(error = %e, "commit on unmount failed; the journal is kept")
                }
            }
        }
    }
    if m.run_socket.is_none() {
        store.remove_own_mount(mp, std::process::id())?;
    }
    result.map_err(|source| Error::Serve {
        mountpoint: mp.to_path_buf(),
        source,
    })
}

/// Keep glibc's malloc from holding much more than the caches do: one heap
/// (arena) for every thread rather than up to 8 per core. Each heap keeps
/// the holes that evicted chunks (64 KiB to 1 MiB, of every size) leave, and
/// the resident memory of several heaps is the sum of each one's high
/// water: whichever thread misses decompresses the chunk in its own heap,
/// and the cache's working set moves between heaps as threads take turns,
/// so each heap grows to a large part of the cache and keeps it. Measured
/// with `malloc_stats` after a 1 GiB `cat` through a fork at
/// `--cache-size 256M` (256 MiB of chunks held, two FUSE threads
/// decompressing): with 2 heaps, 355-393 MiB taken from the system and
/// 289 MiB in use (the second heap 156 MiB taken for 81 MiB in use), peak
/// RSS 287-376 MiB over eleven runs (the bound, flag + 64 MiB, is 320);
/// with 1 heap, 311-316 MiB taken for the same 289 MiB in use, peak RSS
/// 287-299 MiB over thirteen. A read-only mount (192 MiB of chunks) peaks
/// at 233-243 MiB with 2 heaps, 223-226 MiB with 1; glibc's default (8 per
/// core) gave 248-285 MiB there. Threads share the one heap's lock only for allocations the
/// per-thread cache (tcache, up to 1 KiB) does not serve, so no slower on
/// these runs. (Mapping every chunk-sized buffer instead, with a fixed
/// `M_MMAP_THRESHOLD` of 128 KiB, gives 272-276 MiB for the fork but more
/// than doubles the daemon's system time in page faults: 1.8-2.1 s against
/// 0.5-1.0 s for the `cat`.)
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before the
    // daemon starts its threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
    }
}

/// See [`tune_malloc`].
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: i32 = 1;

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Serve `mounted` on the calling thread until it is unmounted, or until
/// SIGTERM, SIGINT or SIGHUP, which unmount it cleanly (lazily when it is
/// busy) from a thread of their own, `storefs-signals`. Ok on a clean
/// unmount. The signals stay blocked in the calling thread afterwards.
pub fn serve(mut mounted: Mounted) -> io::Result<()> {
    // In case this runs on another thread than the mount did: the workers
    // fuser starts inherit this thread's mask.
    sys::block_stop_signals()?;
    let done = Arc::new(AtomicBool::new(false));
    let signal_thread = {
        let mut unmounter = mounted.unmounter();
        let mountpoint = mounted.mountpoint().to_path_buf();
        let done = done.clone();
        std::thread::Builder::new()
            .name("storefs-signals".into())
            .spawn(move || unmount_on_signal(move || unmounter.unmount(), &mountpoint, &done))?
    };
    let result = mounted.run();
    // Wake the signal thread (the signal is blocked there, so sigwait takes
    // it) and tell it to exit without unmounting.
    done.store(true, Ordering::SeqCst);
    if let Err(e) = sys::send_stop_signal(&signal_thread) {
        tracing::error!(error = %e, "cannot wake the signal thread");
    }
    if signal_thread.join().is_err() {
        tracing::error!("signal thread panicked");
    }
    result
}

/// Wait for a stop signal, then `unmount` (which ends the session's run loop).
/// Returns without unmounting when `done` is set: serving ended by itself.
fn unmount_on_signal(
    unmount: impl FnOnce() -> io::Result<()>,
    mountpoint: &Path,
    done: &AtomicBool,
) {
    let sig = sys::wait_for_stop_signal();
    if done.load(Ordering::SeqCst) {
        return;
    }
    let sig = match sig {
        Ok(sig) => sig,
        Err(e) => {
            tracing::error!(error = %e, "sigwait failed; signals will not unmount");
            return;
        }
    };
    tracing::info!(signal = %sig, mountpoint = %mountpoint.display(), "signal received; unmounting");
    if let Err(e) = unmount() {
        // Busy (a process has its cwd or a file open inside): detach it lazily,
        // so it disappears now and the session ends when the last user leaves.
        tracing::warn!(error = %e, "unmount failed; detaching lazily");
        if let Err(e) = sys::detach(mountpoint) {
            tracing::error!(error = %e, "lazy unmount failed too");
        }
    }
}
