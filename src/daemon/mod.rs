//! Layer 5: the running mount. Everything about a mount daemon's life, for
//! a checkpoint (read-only), a fork (read-write), the whole store (browse)
//! or a lazy remote mount alike:
//!
//! - `mountpoint`: the checks before mounting (not inside the store, not
//!   busy, empty, `/dev/fuse` usable), and creating the mountpoint;
//! - `spawn`: starting a daemon in a session of its own ([`start`]) and the
//!   start-up handshake with it ([`ReadyPipe`]); the daemon's command line is
//!   the caller's, this module only runs it;
//! - `run`: the daemon itself ([`run()`]): mount, register, serve until
//!   stopped, commit a fork on the way out; and [`serve`], whose signal
//!   thread unmounts on SIGTERM, SIGINT or SIGHUP;
//! - [`control`]: a daemon's control socket and its request protocol (a
//!   fork's commits, every mount's cache use), the periodic commit, and a
//!   daemon's memory as `status` reports it ([`mount_status`]);
//! - [`origin`]: the origin policy, whether a checkpoint's origin may be
//!   its default mountpoint (docs/security.md);
//! - `log`: the daemon's log file, `logs/mount-<key>.log` in the store;
//! - [`doctor`]: what this machine has of what mounts need (`storefs doctor`);
//! - [`ns`]: the namespaces of `storefs run` (a private mount namespace,
//!   for an ordinary user inside a user namespace), an origin's missing
//!   directories made inside it, and the run's init;
//! - [`runs`]: `storefs run` itself: its record in `runs/`, its daemons
//!   (one per target, in the run's namespace), CMD, the commit at the end;
//! - [`remount`]: `mount -o remount` of a mount: the flags the kernel
//!   can change, applied to the mountpoint (no daemon involved);
//! - `unmount`: unmounting from outside ([`unmount()`]: `umount2` as root,
//!   else `fusermount3 -u`) and waiting for a daemon to exit;
//! - [`target`]: what a mount's TARGET names, resolved into the [`Mount`]
//!   to serve (archive, lazy remote mount, ref, fork or checkpoint; the
//!   backend; the default mountpoint under the origin policy), for `mount`
//!   and `run`.
//!
//! It sits between [`crate::fs`] (which it mounts and serves) and
//! `cli` (which turns the arguments into a [`target::TargetRequest`] or a
//! daemon command line, calls this module and prints what happened). It may not
//! import `cli`, and it prints nothing to the terminal: what it has to say
//! goes to its log, or back to the caller as a value or an [`Error`]. The raw
//! OS calls are in [`crate::sys`]; the mount records in the store directory
//! are [`crate::store::mounts`]'s.

pub mod control;
pub mod doctor;
mod log;
mod mountpoint;
pub mod ns;
pub mod origin;
pub mod remount;
mod run;
pub mod runs;
mod spawn;
pub mod target;
mod unmount;

use std::io;
use std::path::PathBuf;

pub use control::{
    CacheReport, MountStatus, Request, RunOf, commit_for_unmount, mount_status, request,
    run_statuses,
};
pub use mountpoint::remove_created;
pub use run::{Mount, Settings, What, run, serve};
pub use spawn::{ReadyPipe, Started, start, start_in_run};
pub use unmount::{daemons_serving, unmount, wait_for_exit, wait_for_exit_while};

/// Everything that can go wrong in starting, running or talking to a daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "cannot mount at {}: it overlaps the store {} (the daemon would read its own mount and hang); choose a mountpoint outside the store",
        mountpoint.display(),
        store.display()
    )]
    OverlapsStore { mountpoint: PathBuf, store: PathBuf },
    #[error(
        "{} is a mount left by a daemon that died (transport endpoint is not connected)",
        .0.display()
    )]
    DeadMount(PathBuf),
    #[error("{} is already a mount point ({fstype})", mountpoint.display())]
    AlreadyMounted { mountpoint: PathBuf, fstype: String },
    #[error(
        "{} is not empty; storefs mounts only on an empty directory (move its contents away or give another mountpoint)",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("{} exists and is not a directory; give another mountpoint", .0.display())]
    NotDir(PathBuf),
    /// The mountpoint taken from a checkpoint's origin failed the origin
    /// policy's path rules after it was created (something changed on the way).
    #[error(
        "the origin {} is not a safe mount place ({why}); give a mountpoint",
        path.display()
    )]
    Origin { path: PathBuf, why: origin::Refusal },
    #[error("cannot create mountpoint {}", path.display())]
    CreateMountpoint {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "/dev/fuse is missing: load the module (`modprobe fuse`) or, in a container, pass the device (--device /dev/fuse)"
    )]
    NoDevFuse,
    /// `is`: its mode, owner and group; `fix`: the fix that fits them.
    #[error("not permitted to open /dev/fuse ({is}): {fix}")]
    DevFuseDenied { is: String, fix: String },
    /// A file the daemon needs (the mountpoint, `/dev/fuse`) cannot be read.
    #[error("{}", path.display())]
    Access {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot open log {}", path.display())]
    Log {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A namespace of `storefs run` could not be made (the whole line).
    #[error("{0}")]
    Namespace(String),
    /// An ordinary user's `unshare(CLONE_NEWUSER)` was refused, and no
    /// known setting says why (the error).
    #[error(
        "cannot make a user namespace for the run ({0}); user namespaces may be forbidden here (a container's seccomp profile?)"
    )]
    NoUserNamespace(String),
    /// A host mount at or below a run's mountpoint that the run's
    /// namespace cannot detach (the error).
    #[error(
        "{} is a mount point on the host and the run cannot hide it in its namespace ({error})",
        path.display()
    )]
    HostMount { path: PathBuf, error: String },
    /// A fork another run or a mount holds.
    #[error("{0}")]
    Held(runs::Holder),
    #[error("pipe")]
    Pipe(#[source] io::Error),
    #[error("cannot find the storefs executable")]
    NoExecutable(#[source] io::Error),
    #[error("cannot start the mount daemon")]
    Spawn(#[source] io::Error),
    #[error("the mount daemon did not answer within {secs}s; see {}", log.display())]
    NoAnswer { secs: u64, log: PathBuf },
    /// The daemon's own report of why it could not mount.
    #[error("{0}")]
    DaemonFailed(String),
    #[error("the mount daemon exited before mounting ({status}); see {}", log.display())]
    DaemonExited { status: String, log: PathBuf },
    #[error("the new mount at {} does not answer", mountpoint.display())]
    NotAnswering {
        mountpoint: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount at {}", mountpoint.display())]
    Mount {
        mountpoint: PathBuf,
        #[source]
        source: crate::fs::MountError,
    },
    #[error("serving {}", mountpoint.display())]
    Serve {
        mountpoint: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot listen on {}", socket.display())]
    Listen {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot reach the mount daemon at {}", socket.display())]
    Unreachable {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the mount daemon gave no answer on {}", socket.display())]
    NoReply {
        socket: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The daemon's answer to a request it could not carry out.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    #[error(transparent)]
    Journal(#[from] crate::journal::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
