//! Starting a daemon: the `storefs` executable again, with the caller's
//! command line, in a session of its own (it outlives the terminal) with its
//! stderr in the log; and the start-up handshake through a pipe: the daemon
//! writes `ok` once its mount answers, or `error: WHY`.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::log::{log_path, open_log_for_stderr};
use super::mountpoint::check_mountpoint;
use super::{Error, Result};
use crate::store::Store;
use crate::sys;

/// The environment variable through which a daemon reports to the `mount` that
/// started it: the number of a pipe's write end.
const READY_FD_ENV: &str = "STOREFS_READY_FD";
/// How long `start` waits for its daemon to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A daemon that reported its mount ready.
#[derive(Debug)]
pub struct Started {
    pub pid: u32,
    /// Where it logs.
    pub log: PathBuf,
}

/// Check the mountpoint `mp` as [`super::run`] does, then start
/// `storefs ARGS` (a command line that runs [`super::run`] for `mp` in
/// `store` and reports through [`ReadyPipe::from_env`]) in a new session
/// with its stderr in the log, and wait until it reports that the mount
/// answers, or why it failed. The daemon creates a missing mountpoint (and
/// removes it again when it exits).
pub fn start(store: &Store, mp: &Path, args: &[OsString]) -> Result<Started> {
    check_mountpoint(store.root(), mp)?;
    start_daemon(log_path(store, mp), mp, args, false)
}

/// [`start`] for a daemon of `storefs run` (its mount is in the run's
/// namespace, which the caller entered): it logs to `log`, and the kernel
/// sends it SIGTERM (it unmounts, commits a fork, exits) if the run dies.
pub fn start_in_run(store: &Store, mp: &Path, args: &[OsString], log: PathBuf) -> Result<Started> {
    check_mountpoint(store.root(), mp)?;
    start_daemon(log, mp, args, true)
}

fn start_daemon(
    log: PathBuf,
    mp: &Path,
    args: &[OsString],
    die_with_parent: bool,
) -> Result<Started> {
    let stderr = open_log_for_stderr(&log)?;
    let (mut reader, writer) = std::io::pipe().map_err(Error::Pipe)?;
    let exe = std::env::current_exe().map_err(Error::NoExecutable)?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(READY_FD_ENV, writer.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    sys::in_new_session_keeping(&mut cmd, writer.as_raw_fd());
    if die_with_parent {
        // A run's daemon: it mounts inside the run's namespaces.
        sys::die_with_parent(&mut cmd, rustix::process::Signal::TERM);
        sys::keep_mount_capability_across_exec(&mut cmd);
    }
    let mut child = cmd.spawn().map_err(Error::Spawn)?;
    drop(writer);

    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut msg = String::new();
        let _ = reader.read_to_string(&mut msg);
        let _ = tx.send(msg);
    });
    let Ok(msg) = rx.recv_timeout(START_TIMEOUT) else {
        let _ = child.kill();
        return Err(Error::NoAnswer {
            secs: START_TIMEOUT.as_secs(),
            log,
        });
    };
    if let Some(err) = msg.strip_prefix("error: ") {
        let _ = child.wait();
        return Err(Error::DaemonFailed(err.trim().to_string()));
    }
    if msg.trim() != "ok" {
        let status = child.wait().ok();
        return Err(Error::DaemonExited {
            status: status.map(|s| s.to_string()).unwrap_or_default(),
            log,
        });
    }
    // The kernel mount exists; make sure it answers before returning.
    std::fs::metadata(mp).map_err(|source| Error::NotAnswering {
        mountpoint: mp.to_path_buf(),
        source,
    })?;
    Ok(Started {
        pid: child.id(),
        log,
    })
}

/// The write end of the start-up pipe, inherited from the [`start`] that
/// started us.
pub struct ReadyPipe(std::sync::Mutex<Option<std::fs::File>>);

impl ReadyPipe {
    /// The pipe [`start`] handed this process, if it was started so.
    pub fn from_env() -> Option<ReadyPipe> {
        let fd: i32 = std::env::var(READY_FD_ENV).ok()?.parse().ok()?;
        // SAFETY: nothing else reads the environment at this point of the
        // start-up (no other thread runs yet).
        unsafe { std::env::remove_var(READY_FD_ENV) };
        let file = sys::adopt_inherited_fd(fd)?;
        Some(ReadyPipe(std::sync::Mutex::new(Some(file))))
    }

    /// Tell the parent the mount answers.
    pub fn ready(&self) {
        self.send("ok\n");
    }

    /// Tell the parent why mounting failed (one line).
    pub fn failed(&self, why: &str) {
        self.send(&format!("error: {why}\n"));
    }

    /// Send one message and close the pipe (the parent reads to EOF).
    fn send(&self, msg: &str) {
        if let Some(mut f) = self.0.lock().ok().and_then(|mut g| g.take()) {
            let _ = f.write_all(msg.as_bytes());
        }
    }
}
