//! Layer 4: the FUSE layer. Mounts a checkpoint read-only, usually at its
//! original absolute path ([`mount_checkpoint`]), a fork read-write
//! ([`mount_fork`]), or the whole store read-only for browsing
//! ([`mount_browse`]).
//!
//! - [`view`]: the [`view::View`] trait, what every mount serves on inode
//!   numbers, and the types it speaks (`Entry`, `DirItem`, `Caller`, …, and
//!   the file system model of [`crate::store::model`]: `Attr`, `SetAttr`,
//!   …); no FUSE types.
//! - [`wire`] (with [`abi`], the `fuse.h` structs): the one codec, for any
//!   view and both transports: a request's bytes in, through [`dispatch`],
//!   its reply's bytes and errno out; no policy. The transports move bytes
//!   only: [`devfuse`] (worker threads reading `/dev/fuse`) and [`uring`]
//!   (FUSE over io_uring). [`fuse`] is what is left of fuser: it mounts
//!   and answers INIT.
//! - [`checkpoint`]: the checkpoint view, one checkpoint's tree read-only,
//!   over [`inode`], the inode table (stable numbers, hardlinks share one
//!   inode).
//! - [`fork`]: the fork view, a fork read-write (policy the journal leaves
//!   to the mount: umask, setgid directories, handles, directory listings,
//!   xattr buffers).
//! - [`browse`]: the browse view, the whole store as one tree (checkpoints,
//!   refs, forks, archives), each checkpoint's tree served by a checkpoint
//!   view of its own (short TTLs for the store's listings, long ones inside
//!   checkpoints).
//!
//! This module is the only place in the codebase that speaks errno: see
//! [`errno`]. A request fails with an [`FsError`] (a [`Posix`] outcome, or a
//! failure of the mount); setting a mount up fails with a [`MountError`].

mod abi;
mod browse;
mod caches;
mod checkpoint;
mod devfuse;
mod dispatch;
mod fork;
mod fuse;
#[cfg(test)]
mod fuser_reference;
mod inode;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod testing;
mod uring;
mod view;
mod wire;

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fuser::{Config, Errno, MountOption, Session, SessionACL, SessionUnmounter};

use crate::journal::{self, Fork};
use crate::store::model::{AtimePolicy, Posix, ext4};
use crate::store::{self, ObjectId, Store};
use browse::BrowseView;
pub use caches::{CacheUse, Caches};
use checkpoint::CheckpointView;
use fork::ForkView;
use fuse::FuseAdapter;
use view::View;

/// How to mount a checkpoint.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Where to mount (an existing directory).
    pub mountpoint: PathBuf,
    /// The source shown in `/proc/mounts`: the target as given, e.g. `s1`.
    pub fsname: String,
    /// The user's `-o` options, passed through. `nosuid`, `nodev` and
    /// `default_permissions` are always on, and `ro` for a checkpoint, `rw`
    /// for a fork; the other mode (`rw` on a checkpoint, `ro` on a fork: a
    /// read-only view of a fork is a mount of its head), `suid`, `dev`,
    /// `auto_unmount`, `fsname=` and `subtype=` are refused. The atime
    /// ones (`relatime`, `strictatime`, `nodiratime`, …) are the daemon's:
    /// a fork updates atime on reads only when one is given ([`atime_policy`]).
    pub extra_options: Vec<String>,
    /// The most bytes a checkpoint or browse mount keeps in its caches:
    /// decompressed chunks, directories and the inode numbering ([`Caches`]).
    /// A fork keeps its journal's own cache.
    pub cache_bytes: usize,
    /// FUSE worker threads (at least 1).
    pub threads: usize,
    /// A fork mount asks for the kernel's writeback cache (`--writeback-cache`):
    /// writes wait in the kernel's page cache until written back (see
    /// [`fork`]); ignored by read-only mounts.
    pub writeback_cache: bool,
    /// How requests reach the daemon (`--transport`).
    pub transport: Transport,
}

/// How the kernel's requests reach the daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// io_uring when the kernel offers it (`enable_uring=Y`) and the queues
    /// can wake requesters on their own core (`CAP_SYS_NICE`: see
    /// `uring::WakeHere`), else `/dev/fuse`.
    #[default]
    Auto,
    /// Worker threads reading `/dev/fuse` ([`devfuse`]).
    Classic,
    /// FUSE over io_uring ([`uring`]); the mount fails if the kernel does
    /// not offer it.
    Uring,
}

impl Transport {
    /// As `--transport` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Classic => "classic",
            Transport::Uring => "uring",
        }
    }

    /// The transport `name` spells (`auto`, `classic`, `uring`).
    pub fn from_name(name: &str) -> Option<Transport> {
        [Transport::Auto, Transport::Classic, Transport::Uring]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// The kernel's switch for FUSE over io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel's switch for FUSE over io_uring is on.
pub fn uring_enabled() -> bool {
    std::fs::read_to_string(ENABLE_URING).is_ok_and(|s| s.trim() == "Y")
}

/// What can go wrong serving one request: a POSIX outcome ([`Posix`], the
/// same from every view, a fork's included), or a failure of this mount.
/// Setting a mount up fails with a [`MountError`] instead.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// ENOENT, ENOTDIR, EROFS, …: what POSIX says the operation answers.
    #[error(transparent)]
    Posix(#[from] Posix),
    #[error("inode {0} is not known to this mount")]
    UnknownInode(u64),
    #[error("{path}: malformed tree entry: {detail}")]
    Malformed { path: String, detail: &'static str },
    #[error(transparent)]
    Store(#[from] store::Error),
    /// Not an error to the user: the answer to open on a read-only mount,
    /// opendir on a checkpoint mount (`Opened::Stateless`), and flush
    /// and copy_file_range on mounts that do not copy. The kernel then stops sending
    /// them ("zero-message opens") and keeps the page cache and directory
    /// cache, as it does for FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR (open and
    /// opendir), skips the round trip at every close (flush), or copies
    /// through read and write (copy_file_range).
    #[error("not needed: the kernel may skip this request from now on")]
    NotNeeded,
    /// A failure of the fork itself (`EIO`, `EBUSY`, `ENOSPC`, …; its POSIX
    /// outcomes arrive as [`FsError::Posix`]).
    #[error(transparent)]
    Journal(journal::Error),
}

impl From<journal::Error> for FsError {
    /// A fork's POSIX outcome is the view's ([`FsError::Posix`]); its other
    /// errors stay the fork's ([`FsError::Journal`]).
    fn from(e: journal::Error) -> FsError {
        match e {
            journal::Error::Posix(p) => FsError::Posix(p),
            e => FsError::Journal(e),
        }
    }
}

impl FsError {
    /// Whether this is "no such name" (`ENOENT`), from whichever view: a
    /// lookup that finds nothing may then be cached as a negative entry.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FsError::Posix(Posix::NotFound))
    }
}

/// The result of every operation of this layer.
pub type Result<T, E = FsError> = std::result::Result<T, E>;

/// Why a mount could not be set up (before it serves any request).
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount option '{option}' is not allowed: {reason}")]
    BadOption {
        option: String,
        reason: &'static str,
    },
    #[error("cannot mount at {}: {source}", path.display())]
    Mount { path: PathBuf, source: io::Error },
    /// `--transport uring` where the kernel does not offer it.
    #[error("{0}")]
    Transport(String),
    /// The checkpoint to mount could not be read.
    #[error(transparent)]
    Store(#[from] store::Error),
}

/// The errno a failed operation returns to the kernel: a POSIX outcome's
/// own ([`Posix::errno`]), or this layer's for its failures. The only place
/// that turns an error into an errno.
fn errno(e: &FsError) -> Errno {
    use journal::Error as J;
    match e {
        FsError::Posix(p) | FsError::Journal(J::Posix(p)) => Errno::from_i32(p.errno()),
        FsError::UnknownInode(_) => Errno::ESTALE,
        // Corrupt, missing or unreadable objects, and hostile trees: that
        // read fails, the rest of the tree keeps working.
        FsError::Malformed { .. } | FsError::Store(_) => Errno::EIO,
        FsError::NotNeeded => Errno::ENOSYS,
        FsError::Journal(J::Busy(_) | J::Uncommitted(_)) => Errno::EBUSY,
        FsError::Journal(J::NotAncestor { .. } | J::Refused(_)) => Errno::EINVAL,
        // The journal's file system is full: the writer is told, the fork
        // goes on (reads, deletes, and writes once space is freed).
        FsError::Journal(J::NoSpace { .. }) => Errno::ENOSPC,
        // Shut down (FS_IOC_SHUTDOWN): every request fails, as on xfs.
        FsError::Journal(J::ShutDown { .. }) => Errno::EIO,
        // Failures of the fork itself: the operation fails, the mount stays.
        FsError::Journal(
            J::NoFork(_)
            | J::BadName(_)
            | J::NameTaken(_)
            | J::Io { .. }
            | J::Store(_)
            | J::Corrupt { .. },
        ) => {
            tracing::warn!(error = %e, "fork operation failed; it gets EIO");
            Errno::EIO
        }
    }
}

/// The session's unmounter, handed to the adapter so that its `destroy`
/// (called once the session's workers have stopped) takes the mount out of
/// fuser's hands.
///
/// Why: after an unmount by someone else (`storefs umount`, `umount`,
/// `fusermount3 -u`), fuser 0.18 drops its mount at the end of
/// `Session::run` and unmounts again: its "still mounted?" test polls
/// `/dev/fuse`, which reports `POLLERR` once the kernel let go, and it
/// takes `POLLERR` for "mounted". The second `umount2` fails with `EINVAL`,
/// which fuser logs as `WARN Failed to umount filesystem` at every clean
/// unmount. Taking the mount first runs that same unmount here: `EINVAL`
/// (already unmounted) is expected and logged at debug; after an aborted
/// connection the mount is still there and this unmounts it. After our own
/// signal-driven unmount there is nothing left to take.
#[derive(Clone, Default)]
pub(crate) struct MountRelease(Arc<parking_lot::Mutex<Option<SessionUnmounter>>>);

impl MountRelease {
    fn set(&self, unmounter: SessionUnmounter) {
        *self.0.lock() = Some(unmounter);
    }

    /// Unmount if still mounted (see [`MountRelease`]); quiet when the kernel
    /// already unmounted.
    pub(crate) fn release(&self) {
        let Some(mut unmounter) = self.0.lock().take() else {
            return;
        };
        match unmounter.unmount() {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!("already unmounted");
            }
            Err(e) => tracing::warn!(error = %e, "unmount at the end of the session failed"),
        }
    }
}

/// A mounted checkpoint, fork or store, not yet serving. Dropping it unmounts.
pub struct Mounted {
    session: Session<FuseAdapter>,
    /// What serves its requests ([`devfuse`], and the rings).
    view: Arc<dyn View>,
    /// The uid filter (fuser's `SessionACL`, applied by [`wire`]).
    policy: wire::Policy,
    /// `/dev/fuse` worker threads ([`MountConfig::threads`]).
    threads: usize,
    /// Releases the mount once the workers end (see [`MountRelease`]).
    release: MountRelease,
    /// The io_uring queues, when the kernel agreed to them.
    rings: Option<uring::Rings>,
    mountpoint: PathBuf,
    /// A checkpoint or browse mount's caches (a fork's are its journal's).
    caches: Option<Caches>,
}

/// Whether a mount is read-only (a checkpoint) or read-write (a fork).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    ReadOnly,
    ReadWrite,
}

fn check_mountpoint(cfg: &MountConfig) -> Result<(), MountError> {
    let meta = std::fs::metadata(&cfg.mountpoint).map_err(|e| mount_error(cfg, e))?;
    if !meta.is_dir() {
        return Err(mount_error(
            cfg,
            io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        ));
    }
    Ok(())
}

fn mount_error(cfg: &MountConfig, source: io::Error) -> MountError {
    MountError::Mount {
        path: cfg.mountpoint.clone(),
        source: fusermount_error(source),
    }
}

/// A user's mount goes through fusermount3, whose refusal fuser passes on
/// as its stderr: "fusermount3: WHY\n". One line, without its name, and for
/// `allow_other` the fix.
fn fusermount_error(e: io::Error) -> io::Error {
    let text = e.to_string();
    if e.raw_os_error().is_some() || !text.starts_with("fusermount") {
        return e;
    }
    if text.contains("user_allow_other") {
        return io::Error::new(
            e.kind(),
            "-o allow_other is for root only unless /etc/fuse.conf has the line user_allow_other; add that line (as root) or mount without allow_other",
        );
    }
    let why = text
        .lines()
        .map(|l| {
            l.trim()
                .trim_start_matches("fusermount3: ")
                .trim_start_matches("fusermount: ")
        })
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    io::Error::new(e.kind(), format!("fusermount3 refused: {why}"))
}

/// Block the stop signals in the calling thread (see [`mount_checkpoint`]),
/// then mount `view` at `cfg.mountpoint` and, if the kernel agreed to FUSE
/// over io_uring at INIT, start the rings ([`uring`]).
fn start_session(
    cfg: &MountConfig,
    config: &Config,
    view: Arc<dyn View>,
) -> Result<Mounted, MountError> {
    crate::sys::block_stop_signals().map_err(|e| mount_error(cfg, e))?;
    let release = MountRelease::default();
    // The switch read and the probe thread run once, and only when the
    // transport may be io_uring.
    let enabled = cfg.transport != Transport::Classic && uring_enabled();
    if cfg.transport == Transport::Uring && !enabled {
        return Err(MountError::Transport(format!(
            "FUSE over io_uring is switched off: echo Y > {ENABLE_URING} (as root; kernel 6.14 or later), or mount with --transport classic"
        )));
    }
    let wake_here = enabled && uring::wakes_requesters_here();
    let wants_uring = match cfg.transport {
        Transport::Classic => false,
        Transport::Uring => true,
        Transport::Auto => {
            if enabled && !wake_here {
                tracing::info!(
                    "FUSE over io_uring is switched on, but without CAP_SYS_NICE its queues would move each requester between cores; serving over /dev/fuse (--transport uring forces the rings)"
                );
            }
            wake_here
        }
    };
    let agreed = wants_uring.then(|| Arc::new(AtomicBool::new(false)));
    let adapter = FuseAdapter::new(view.clone(), release.clone(), agreed.clone())
        .admitting_all(config.acl == SessionACL::All);
    let mut session =
        Session::new(adapter, &cfg.mountpoint, config).map_err(|e| mount_error(cfg, e))?;
    release.set(session.unmount_callable());
    let agreed = agreed.is_some_and(|a| a.load(Ordering::Acquire));
    if cfg.transport == Transport::Uring && !agreed {
        // Dropping the session unmounts.
        return Err(MountError::Transport(
            "the kernel did not agree to FUSE over io_uring at INIT; mount with --transport classic"
                .into(),
        ));
    }
    let policy = wire::Policy {
        access: config.acl.into(),
        owner_uid: rustix::process::geteuid().as_raw(),
    };
    let rings = if agreed {
        let dev = session
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| mount_error(cfg, e))?;
        let rings =
            uring::start(dev, view.clone(), policy, wake_here).map_err(|e| mount_error(cfg, e))?;
        tracing::info!(queues = rings.queues(), "serving over FUSE io_uring");
        Some(rings)
    } else {
        None
    };
    Ok(Mounted {
        session,
        view,
        policy,
        threads: cfg.threads.max(1),
        release,
        rings,
        mountpoint: cfg.mountpoint.clone(),
        caches: None,
    })
}

/// A directory's `(st_size, st_blocks)` as every mount shows it: what ext4
/// would give its entries' names ([`ext4::dir_size`]), whatever size
/// the tree recorded; one block when tree `tree` cannot be read. `storefs ls`
/// shows the same.
pub fn dir_size(store: &Store, tree: &ObjectId) -> (u64, u64) {
    match store.get_tree(tree, "directory") {
        Ok(t) => ext4::dir_size(t.entries.iter().map(|e| e.name.len())),
        Err(_) => ext4::dir_size([]),
    }
}

/// Mount checkpoint `ckpt` read-only. Returns once the kernel mount exists
/// (before serving); requests wait until [`Mounted::run`] runs.
///
/// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread
/// ([`crate::sys::block_stop_signals`]), so that the threads started after it
/// inherit the mask and only a thread that waits for them takes them. Call
/// it from the daemon's main thread before starting other threads (a thread that
/// does not block them would die of a process-directed SIGTERM). The mask is
/// left in place even when mounting fails. Fails with a [`MountError`]
/// (an option refused, the mountpoint or the kernel refusing, the
/// checkpoint unreadable) before any request is served.
pub fn mount_checkpoint(
    store: Arc<Store>,
    ckpt: ObjectId,
    cfg: &MountConfig,
) -> Result<Mounted, MountError> {
    let record = store.read_checkpoint(&ckpt)?;
    let root = store.root_entry(&record)?;
    check_mountpoint(cfg)?;
    let config = fuser_config(cfg, Mode::ReadOnly)?;
    let caches = Caches::new(cfg.cache_bytes);
    let view = CheckpointView::new(
        store,
        root,
        &caches,
        cfg.mountpoint.clone(),
        record.source.stats,
    );
    let mounted = start_session(cfg, &config, Arc::new(view))?;
    tracing::info!(mountpoint = %cfg.mountpoint.display(), checkpoint = %ckpt, "mounted");
    Ok(Mounted {
        caches: Some(caches),
        ..mounted
    })
}

/// Mount an open fork read-write. Returns once the kernel mount exists
/// (before serving); requests wait until [`Mounted::run`] runs. Signals as
/// for [`mount_checkpoint`].
///
/// Writes reach the fork's journal before `write(2)` returns, unless
/// `cfg.writeback_cache` (then on close, fsync, syncfs or writeback; see
/// [`fork`]), and `fsync`, `fdatasync` and `fsyncdir` return once
/// [`Fork::sync`] has made everything so far durable (under the writeback
/// cache the kernel writes the file's dirty pages back first). The caller may keep
/// its own clone of `fork` to [`Fork::commit`] or [`Fork::sync`] from other
/// threads while the mount serves, and commits after `run` returns.
pub fn mount_fork(fork: Arc<Fork>, cfg: &MountConfig) -> Result<Mounted, MountError> {
    check_mountpoint(cfg)?;
    let config = fuser_config(cfg, Mode::ReadWrite)?;
    let name = fork.name().to_string();
    let view = if cfg.writeback_cache {
        ForkView::with_writeback_cache(fork)
    } else {
        ForkView::new(fork)
    };
    let view = Arc::new(
        view.with_atime(atime_policy(cfg))
            .with_open_checks(has_option(cfg, OPEN_CHECKS)),
    );
    let mounted = start_session(cfg, &config, view.clone())?;
    // Before it serves: a cleared setuid must reach the kernel's cache.
    view.tell_kernel(mounted.invalidator());
    tracing::info!(mountpoint = %cfg.mountpoint.display(), fork = %name, "mounted read-write");
    Ok(mounted)
}

/// Mount the whole store read-only for browsing: `checkpoints/`, `refs/`,
/// `forks/`, `archives/` (see [`browse`]). Returns once the kernel mount
/// exists (before serving). Signals as for [`mount_checkpoint`].
pub fn mount_browse(store: Arc<Store>, cfg: &MountConfig) -> Result<Mounted, MountError> {
    check_mountpoint(cfg)?;
    let config = fuser_config(cfg, Mode::ReadOnly)?;
    let caches = Caches::new(cfg.cache_bytes);
    let view = BrowseView::new(store, caches.clone(), cfg.mountpoint.clone());
    let mounted = start_session(cfg, &config, Arc::new(view))?;
    tracing::info!(mountpoint = %cfg.mountpoint.display(), "mounted for browsing");
    Ok(Mounted {
        caches: Some(caches),
        ..mounted
    })
}

impl Mounted {
    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Its caches, to report what they hold (none for a fork).
    pub fn caches(&self) -> Option<Caches> {
        self.caches.clone()
    }

    /// What unmounts it from another thread (ending [`Mounted::run`]).
    pub fn unmounter(&mut self) -> SessionUnmounter {
        self.session.unmount_callable()
    }

    /// Serve requests until unmounted (by `umount`, `fusermount3 -u` or an
    /// [`Mounted::unmounter`]): the `/dev/fuse` worker threads
    /// ([`devfuse`]), and the rings if the kernel agreed to them. Ok on a
    /// clean unmount. The worker threads inherit the calling thread's
    /// signal mask.
    pub fn run(self) -> io::Result<()> {
        let result = devfuse::serve(
            self.session.as_fd(),
            &*self.view,
            &self.policy,
            self.threads,
        );
        // The kernel ended the rings' entries with the connection.
        if let Some(rings) = self.rings {
            rings.join();
        }
        // What fuser's session did at the end of its loop (its adapter's
        // `destroy`): take the mount out of fuser's hands, unmounting it if
        // the connection was aborted rather than unmounted.
        self.release.release();
        tracing::info!(mountpoint = %self.mountpoint.display(), ?result, "stopped serving");
        result
    }

    /// What tells its kernel to forget what changed behind its back.
    pub fn invalidator(&self) -> Invalidator {
        Invalidator(self.session.notifier())
    }

    /// Which transport serves it, and how many requests came over io_uring.
    pub fn transport(&self) -> TransportUse {
        TransportUse {
            uring: self.rings.as_ref().map(|r| r.served()),
        }
    }
}

/// Tells a mount's kernel to forget names and directories the daemon
/// changed behind its back ([`Mounted::invalidator`]): a fork mount lets the
/// kernel cache entries, absences and attributes for a day (see [`fork`]),
/// so a change that did not come through the mount (`storefs checkout` into
/// a mounted fork) must be followed by this, or the kernel keeps showing
/// what was there before. Call it from a thread that does not serve
/// requests (the kernel may wait for one while it drops a name).
#[derive(Clone)]
pub struct Invalidator(fuser::Notifier);

impl Invalidator {
    /// Forget `names` (directory inode, name: the entry, or the absence, the
    /// kernel may cache) and the attributes and listings of `dirs`. An
    /// inode or name the kernel does not hold is no error.
    pub fn invalidate(&self, names: &[(u64, Vec<u8>)], dirs: &[u64]) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        for (dir, name) in names {
            self.0
                .inval_entry(fuser::INodeNo(*dir), std::ffi::OsStr::from_bytes(name))?;
        }
        for dir in dirs {
            self.0.inval_inode(fuser::INodeNo(*dir), 0, 0)?;
        }
        Ok(())
    }

    /// Forget the attributes and the cached pages of `ino` (a fork that
    /// was shut down). Not from a thread that serves requests: dropping a
    /// page waits for a read in flight on it. An inode the kernel does not
    /// hold is no error.
    pub fn forget_cached(&self, ino: u64) -> io::Result<()> {
        match self.0.inval_inode(fuser::INodeNo(ino), 0, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// Forget the attributes of `ino` (not its pages): safe from a thread
    /// that serves requests, as the kernel takes no lock a request holds
    /// for it. An inode the kernel does not hold is no error.
    pub fn forget_attributes(&self, ino: u64) -> io::Result<()> {
        match self.0.inval_inode(fuser::INodeNo(ino), -1, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }
}

/// Which transport a mount uses ([`Mounted::transport`]), readable while it serves.
#[derive(Clone, Debug, Default)]
pub struct TransportUse {
    /// The count of requests answered over io_uring; `None` on `/dev/fuse`.
    uring: Option<Arc<AtomicU64>>,
}

impl TransportUse {
    /// `"io_uring"` or `"/dev/fuse"`.
    pub fn name(&self) -> &'static str {
        if self.uring.is_some() {
            "io_uring"
        } else {
            "/dev/fuse"
        }
    }

    /// Requests answered over io_uring so far (0 on `/dev/fuse`).
    pub fn ring_requests(&self) -> u64 {
        self.uring.as_ref().map_or(0, |n| n.load(Ordering::Relaxed))
    }
}

/// The mount option that has a fork serve opens and refuse them by the
/// `chattr` flags as ext4 does ([`fork::ForkView::with_open_checks`]); a
/// read-only mount takes it and has nothing to check.
pub const OPEN_CHECKS: &str = "open_checks";

/// The user's options (`-o`, each of them comma-separated), one at a time.
fn user_options(cfg: &MountConfig) -> impl Iterator<Item = &str> {
    cfg.extra_options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
}

/// Whether the user's options name `option`.
fn has_option(cfg: &MountConfig, option: &str) -> bool {
    user_options(cfg).any(|o| o == option)
}

/// The atime policy the user's options name ([`AtimePolicy::from_options`]):
/// what a fork mount does on reads. Read-only mounts never change atime.
pub fn atime_policy(cfg: &MountConfig) -> AtimePolicy {
    AtimePolicy::from_options(user_options(cfg))
}

/// The fuser configuration: `ro` or `rw` by `mode`, plus the user's options.
fn fuser_config(cfg: &MountConfig, mode: Mode) -> Result<Config, MountError> {
    if cfg.fsname.contains(',') {
        return Err(MountError::BadOption {
            option: format!("fsname={}", cfg.fsname),
            reason: "the name cannot contain a comma",
        });
    }
    let mut options = vec![
        match mode {
            Mode::ReadOnly => MountOption::RO,
            Mode::ReadWrite => MountOption::RW,
        },
        MountOption::DefaultPermissions,
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::FSName(cfg.fsname.clone()),
        // MountOption::Subtype is not passed to the mount syscall by fuser's
        // direct (root) mount; as a plain option the kernel and fusermount3
        // both take it.
        MountOption::CUSTOM("subtype=storefs".into()),
    ];
    let mut acl = SessionACL::Owner;
    for option in user_options(cfg).filter(|o| !o.is_empty()) {
        let refuse = |reason| MountError::BadOption {
            option: option.to_string(),
            reason,
        };
        let mapped = match option {
            "default_permissions" | "nosuid" | "nodev" => None,
            "ro" if mode == Mode::ReadOnly => None,
            "rw" if mode == Mode::ReadWrite => None,
            "rw" => return Err(refuse("checkpoint mounts are read-only")),
            "ro" => {
                return Err(refuse(
                    "fork mounts are read-write; mount the fork's head for a read-only view",
                ));
            }
            "suid" | "dev" => return Err(refuse("storefs mounts are always nosuid,nodev")),
            "auto_unmount" => {
                return Err(refuse("the daemon unmounts its mount itself when it stops"));
            }
            o if o.starts_with("fsname=") || o.starts_with("subtype=") => {
                return Err(refuse("storefs sets the fsname and subtype"));
            }
            "allow_other" => {
                acl = SessionACL::All;
                None
            }
            "allow_root" => {
                if acl != SessionACL::All {
                    acl = SessionACL::RootAndOwner;
                }
                None
            }
            "exec" => Some(MountOption::Exec),
            "noexec" => Some(MountOption::NoExec),
            "atime" => Some(MountOption::Atime),
            "noatime" => Some(MountOption::NoAtime),
            // The daemon's own (a FUSE inode's atime is the daemon's to
            // keep): see [`atime_policy`]. The kernel refuses them as options.
            o if AtimePolicy::is_option(o) => None,
            OPEN_CHECKS => None,
            "sync" => Some(MountOption::Sync),
            "async" => Some(MountOption::Async),
            "dirsync" => Some(MountOption::DirSync),
            other => Some(MountOption::CUSTOM(other.to_string())),
        };
        if let Some(m) = mapped
            && !options.contains(&m)
        {
            options.push(m);
        }
    }
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = acl;
    Ok(config)
}
