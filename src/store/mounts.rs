//! The registry of live mounts: one JSON record per mount under `mounts/`,
//! written by the daemon once the mount answers and removed when it exits.
//! Records whose daemon is gone are stale and skipped (and cleaned) on listing.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{IoContext, ObjectId, Result, Store, write_file};

/// One live mount, as `storefs status --json` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountRecord {
    pub mountpoint: String,
    /// What the user asked to mount (ref, id prefix, fork).
    pub target: String,
    /// The checkpoint id mounted.
    pub checkpoint: String,
    /// The daemon's pid.
    pub pid: u32,
    /// `ro`, `rw` or `browse`.
    pub mode: String,
    /// Where the daemon logs.
    pub log: String,
    /// Start time, nanoseconds since the epoch.
    pub started_ns: i64,
}

impl Store {
    fn mount_record_path(&self, mountpoint: &Path) -> PathBuf {
        self.mount_file(mountpoint, "json")
    }

    /// `mounts/<first 16 hex of sha256(mountpoint)>.<ext>`: the record (json)
    /// and, for fork mounts, the daemon's control socket (sock).
    pub fn mount_file(&self, mountpoint: &Path, ext: &str) -> PathBuf {
        let key = ObjectId::of(mountpoint.as_os_str().as_encoded_bytes()).to_hex();
        self.root()
            .join("mounts")
            .join(format!("{}.{ext}", &key[..16]))
    }

    pub fn add_mount(&self, rec: &MountRecord) -> Result<()> {
        let path = self.mount_record_path(Path::new(&rec.mountpoint));
        let mut data = serde_json::to_vec_pretty(rec).expect("record serializes");
        data.push(b'\n');
        write_file(&path, &data, 0o644, true).at(&path)
    }

    pub fn remove_mount(&self, mountpoint: &Path) -> Result<()> {
        let path = self.mount_record_path(mountpoint);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e).at(&path),
            _ => Ok(()),
        }
    }

    /// Live mounts: records whose daemon runs and whose mountpoint is mounted.
    /// Stale records are removed (a dead mount's record is kept: see
    /// [`Store::mounts`]). Only this store's records are looked at.
    pub fn live_mounts(&self) -> Result<Vec<MountRecord>> {
        Ok(self.recorded_mounts(&mounts_with_source())?.0)
    }

    /// Live mounts, and dead ones: storefs mounts the kernel still lists
    /// whose daemon is gone (every access fails with "Transport endpoint is
    /// not connected" until `storefs umount`). A dead mount this store made
    /// keeps its record (target, checkpoint, the dead pid); one without a
    /// record (another store's, or its record lost) is named by its fsname.
    /// Dead mounts have mode `dead`. Records of neither are removed.
    ///
    /// Finding the dead mounts without a record asks every other storefs
    /// mount for its statfs (another store's live daemon answers; a hung one
    /// would make this wait), so only `status` and `umount NAME` call this.
    pub fn mounts(&self) -> Result<(Vec<MountRecord>, Vec<MountRecord>)> {
        let table = mounts_with_source();
        let (live, mut dead) = self.recorded_mounts(&table)?;
        for (mp, fstype, source) in table {
            let known = live
                .iter()
                .chain(&dead)
                .any(|r| Path::new(&r.mountpoint) == mp);
            if fstype == "fuse.storefs" && !known && is_disconnected(&mp) {
                dead.push(MountRecord {
                    mountpoint: mp.to_string_lossy().into_owned(),
                    target: source.strip_prefix("storefs:").unwrap_or("?").to_string(),
                    checkpoint: String::new(),
                    pid: 0,
                    mode: "dead".into(),
                    log: String::new(),
                    started_ns: 0,
                });
            }
        }
        dead.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
        Ok((live, dead))
    }

    /// This store's mount records, live and dead (as [`Store::mounts`] says),
    /// against the mount `table`; the records of neither are removed. Only
    /// mounts whose daemon is gone are probed, so this never waits on one.
    fn recorded_mounts(
        &self,
        table: &[(PathBuf, String, String)],
    ) -> Result<(Vec<MountRecord>, Vec<MountRecord>)> {
        let dir = self.root().join("mounts");
        let mounted = |p: &Path| table.iter().any(|(m, _, _)| m == p);
        let (mut live, mut dead) = (Vec::new(), Vec::new());
        for ent in fs::read_dir(&dir).at(&dir)? {
            let path = ent.at(&dir)?.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(bytes) = fs::read(&path) else { continue };
            let rec: Option<MountRecord> = serde_json::from_slice(&bytes).ok();
            match rec {
                Some(r) if mounted(Path::new(&r.mountpoint)) && pid_alive(r.pid) => live.push(r),
                Some(r)
                    if mounted(Path::new(&r.mountpoint))
                        && is_disconnected(Path::new(&r.mountpoint)) =>
                {
                    dead.push(MountRecord {
                        mode: "dead".into(),
                        ..r
                    })
                }
                _ => {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        live.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
        dead.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
        Ok((live, dead))
    }

    /// The live record for `mountpoint`, if any.
    pub fn mount_at(&self, mountpoint: &Path) -> Result<Option<MountRecord>> {
        Ok(self
            .live_mounts()?
            .into_iter()
            .find(|r| Path::new(&r.mountpoint) == mountpoint))
    }
}

/// Whether a process with this pid exists and has not finished exiting. A
/// zombie counts as gone only once it is its only thread: the main thread of
/// an exiting process turns zombie while its other threads may still be
/// leaving a system call (an fdatasync, say), and until the last one is gone
/// the process keeps its descriptors, and with them its locks.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    let exists = r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !(is_zombie(pid) && threads(pid) <= 1)
}

/// How many threads process `pid` has, exiting ones included (0 if it is gone).
fn threads(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// The state field of /proc/PID/stat is 'Z' for a zombie nobody has reaped yet.
fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

/// Whether `path` is a FUSE mount whose daemon is gone: statfs fails with
/// ENOTCONN ("Transport endpoint is not connected"); stat may still answer
/// from the kernel's attribute cache, statfs always asks the daemon.
fn is_disconnected(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and a zeroed out-buffer of the right type.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN)
}

/// (mount point, fs type) of every mount, from /proc/self/mountinfo.
pub fn mount_table() -> Vec<(PathBuf, String)> {
    mounts_with_source()
        .into_iter()
        .map(|(p, t, _)| (p, t))
        .collect()
}

/// (mount point, fs type, source) of every mount, from /proc/self/mountinfo.
/// A storefs mount's source is `storefs:TARGET`.
fn mounts_with_source() -> Vec<(PathBuf, String, String)> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            let mp = unescape_mount_path(fields.get(4)?);
            let fstype = fields.get(sep + 1)?.to_string();
            let source = unescape_mount_path(fields.get(sep + 2).unwrap_or(&""))
                .to_string_lossy()
                .into_owned();
            Some((mp, fstype, source))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal `\040` etc.
fn unescape_mount_path(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Whether `path` is a mount point of any filesystem.
pub fn is_mount_point(path: &Path) -> bool {
    mount_table().iter().any(|(p, _)| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape_mount_path("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape_mount_path("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape_mount_path("/x\\"), PathBuf::from("/x\\"));
    }

    /// Poll `cond` every 10 ms, for at most 30 s.
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_zombie_main_thread_with_live_threads_is_still_alive() {
        // The main thread leaves with pthread_exit; another thread lives on
        // until told (its stdin closes).
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes, sys, threading\n\
                 threading.Thread(target=sys.stdin.read).start()\n\
                 ctypes.CDLL(None).pthread_exit(None)",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let pid = child.id();
        eventually("the main thread is a zombie", || is_zombie(pid as i32));
        assert!(threads(pid as i32) >= 2);
        assert!(pid_alive(pid), "its other thread still holds its files");
        drop(child.stdin.take());
        eventually("the last thread is gone", || threads(pid as i32) <= 1);
        assert!(!pid_alive(pid), "an unreaped zombie has exited");
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
