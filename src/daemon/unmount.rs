//! Unmounting a storefs mount from outside its daemon, and waiting for the
//! daemon to exit.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::store::mounts::MountRecord;
use crate::sys;

/// How long [`wait_for_exit`] waits for a read-only daemon.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// The same for a fork's daemon, which commits on its way out.
const FORK_EXIT_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a busy mount is tried again before it counts as busy: a
/// reference on its way out (a file just closed whose last copy a forked
/// child holds until its `exec`, a path lookup in flight) goes in
/// milliseconds; a process that keeps a file open does not.
const BUSY_RETRY: Duration = Duration::from_secs(1);

/// Unmount a FUSE mount point: `umount2` as root, else `fusermount3 -u`.
/// A mount still busy after [`BUSY_RETRY`] fails with
/// [`io::ErrorKind::ResourceBusy`].
pub fn unmount(path: &Path) -> io::Result<()> {
    let started = Instant::now();
    loop {
        match unmount_once(path) {
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy && started.elapsed() < BUSY_RETRY => {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

fn unmount_once(path: &Path) -> io::Result<()> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("unmount {}: {e}", path.display()));
    if sys::is_root() {
        return sys::unmount(path).map_err(named);
    }
    let out = Command::new("fusermount3")
        .arg("-u")
        .arg("--")
        .arg(path)
        .output()
        .map_err(|e| {
            named(io::Error::new(
                e.kind(),
                format!("cannot run fusermount3: {e}"),
            ))
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let kind = if stderr.contains("busy") {
            io::ErrorKind::ResourceBusy
        } else {
            io::ErrorKind::Other
        };
        return Err(named(io::Error::new(
            kind,
            format!("fusermount3 -u failed: {}", stderr.trim()),
        )));
    }
    Ok(())
}

/// The daemons that may serve `mountpoint`, with their stores, found
/// without being told the store (mount(8)'s `umount.fuse.storefs` and
/// `mount -o remount` know only the mountpoint): `storefs` processes
/// running as the mount's `owner` (its `user_id=`; root's mount: root's
/// processes only) that have the mountpoint's log, `STORE/logs/mount-KEY.log`,
/// open. Candidates only: the caller believes the record the store holds
/// for the mountpoint, which must name the same pid.
pub fn daemons_serving(mountpoint: &Path, owner: Option<u32>) -> Vec<(u32, PathBuf)> {
    let name = super::log::log_name(mountpoint);
    let mut out = Vec::new();
    for pid in sys::pids() {
        if !sys::process_name(pid).is_some_and(|n| n.starts_with("storefs"))
            || owner.is_some_and(|o| sys::process_uid(pid) != Some(o))
        {
            continue;
        }
        for f in sys::open_files(pid) {
            let logs = f.parent();
            if f.file_name().is_some_and(|n| *n == *name)
                && logs.is_some_and(|l| l.file_name().is_some_and(|n| n == "logs"))
                && let Some(store) = logs.and_then(Path::parent)
            {
                out.push((pid, store.to_path_buf()));
                break;
            }
        }
    }
    out
}

/// Wait (bounded) until the daemon of the mount `record` describes has
/// exited, after its mount went away; false if it is still running. A fork's
/// daemon commits what was written since the last commit before it exits,
/// so it is given longer. The kernel wakes the wait when the daemon exits
/// (a pidfd turns readable); where no pidfd can be had, it polls every 20 ms.
pub fn wait_for_exit(record: &MountRecord) -> bool {
    wait_for_exit_while(record, &|| true)
}

/// [`wait_for_exit`], given up early (true, as if it had exited) once
/// `going` says the daemon is no longer on its way out (a `storefs umount`
/// that failed, and took its mark back); asked every 100 ms.
pub fn wait_for_exit_while(record: &MountRecord, going: &dyn Fn() -> bool) -> bool {
    const ASK_EVERY: Duration = Duration::from_millis(100);
    // Only for the daemon the record names (never pid 1, never a process
    // that took its pid since): anything else is not ours to wait for.
    if !record.daemon_is_alive() {
        return true;
    }
    let start = Instant::now();
    let limit = if record.mode == "rw" {
        FORK_EXIT_TIMEOUT
    } else {
        EXIT_TIMEOUT
    };
    let mut pidfd = i32::try_from(record.pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    while record.daemon_is_alive() {
        if !going() {
            return true;
        }
        let Some(left) = limit.checked_sub(start.elapsed()) else {
            break;
        };
        let left = left.min(ASK_EVERY);
        match &pidfd {
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let left = Timespec {
                    tv_sec: left.as_secs() as i64,
                    tv_nsec: i64::from(left.subsec_nanos()),
                };
                let exited = matches!(rustix::event::poll(&mut fds, Some(&left)), Ok(1));
                if exited {
                    // Readable from now on: poll no more (pid_alive decides).
                    pidfd = None;
                }
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    !record.daemon_is_alive()
}
