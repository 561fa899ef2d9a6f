//! Unmounting a storefs mount from outside its daemon, and waiting for the
//! daemon to exit.

use std::io;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::store::mounts::MountRecord;
use crate::sys;

/// How long [`wait_for_exit`] waits for a read-only daemon.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// The same for a fork's daemon, which commits on its way out.
const FORK_EXIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Unmount a FUSE mount point: `umount2` as root, else `fusermount3 -u`.
/// A busy mount fails with [`io::ErrorKind::ResourceBusy`].
pub fn unmount(path: &Path) -> io::Result<()> {
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
        return Err(named(io::Error::other(format!(
            "fusermount3 -u failed: {}",
            stderr.trim()
        ))));
    }
    Ok(())
}

/// Wait (bounded) until the daemon of the mount `record` describes has
/// exited, after its mount went away; false if it is still running. A fork's
/// daemon commits what was written since the last commit before it exits,
/// so it is given longer.
pub fn wait_for_exit(record: &MountRecord) -> bool {
    let start = Instant::now();
    let limit = if record.mode == "rw" {
        FORK_EXIT_TIMEOUT
    } else {
        EXIT_TIMEOUT
    };
    while sys::pid_alive(record.pid) && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    !sys::pid_alive(record.pid)
}
