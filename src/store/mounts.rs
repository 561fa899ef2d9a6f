//! The registry of live mounts: one JSON record per mount under `mounts/`,
//! written by the daemon once the mount answers and removed when it exits.
//! Records whose daemon is gone are stale and skipped (and cleaned) on listing.
//! The kernel's mount table and process liveness come from [`crate::sys`].

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{IoContext, ObjectId, Result, Store, write_store_file};
use crate::sys::{
    MountEntry, is_disconnected, mount_table, pid_alive, process_name, process_start_time,
};

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
    /// The daemon's start time in clock ticks since boot (`/proc/PID/stat`),
    /// which with `pid` names the daemon and never a later process that
    /// reused its pid. Absent in records of older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start: Option<u64>,
    /// The directories the daemon created for the mountpoint (it and the
    /// parents that were missing), parents first; removed again, while
    /// empty, when the mount ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<CreatedDir>,
}

/// A directory made for a mountpoint, and which one it is (so that a
/// directory made again by someone else at that path is not removed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedDir {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
}

impl MountRecord {
    /// Whether the process the record names is the daemon that wrote it: not
    /// pid 0 or 1, alive, a `storefs` process, started when the record says
    /// (when it says). A record that fails this is stale or forged: nothing
    /// is signalled or waited on because of it.
    pub fn daemon_is_alive(&self) -> bool {
        self.pid > 1
            && pid_alive(self.pid)
            && process_name(self.pid).is_some_and(|n| n.starts_with("storefs"))
            && self
                .pid_start
                .is_none_or(|t| process_start_time(self.pid) == Some(t))
    }
}

/// Remove a mount's control socket that no daemon listens on any more (one
/// killed before it could remove its own). A socket someone still listens on
/// is kept: a daemon mounting at the same place again binds it before it
/// writes its record, so the old record may still be there.
fn remove_dead_socket(sock: &Path) {
    if let Err(e) = std::os::unix::net::UnixStream::connect(sock)
        && e.kind() == ErrorKind::ConnectionRefused
    {
        let _ = crate::sys::remove_nofollow(sock);
    }
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
        write_store_file(&path, &data, 0o644, true).at(&path)
    }

    /// Mark the mount at `mountpoint`, served by daemon `pid`, as being
    /// taken down by `storefs umount` (a fork's commit, then the unmount):
    /// a mount of the same fork or at the same place that comes meanwhile
    /// waits for that daemon ([`Store::winding_down`]) instead of finding the
    /// place taken. Removed by [`Store::clear_unmounting`] and with the record.
    pub fn mark_unmounting(&self, mountpoint: &Path, pid: u32) -> Result<()> {
        let path = self.mount_file(mountpoint, "unmounting");
        write_store_file(&path, format!("{pid}\n").as_bytes(), 0o644, false).at(&path)
    }

    /// Remove the mark [`Store::mark_unmounting`] left (missing is fine).
    pub fn clear_unmounting(&self, mountpoint: &Path) {
        let _ = crate::sys::remove_nofollow(&self.mount_file(mountpoint, "unmounting"));
    }

    /// The daemon pid the unmounting mark at `mountpoint` names, if any.
    fn unmounting(&self, mountpoint: &Path) -> Option<u32> {
        let path = self.mount_file(mountpoint, "unmounting");
        let bytes = crate::sys::read_regular_nofollow(&path, 64, "an unmounting mark").ok()?;
        std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
    }

    pub fn remove_mount(&self, mountpoint: &Path) -> Result<()> {
        let path = self.mount_record_path(mountpoint);
        remove_dead_socket(&path.with_extension("sock"));
        self.clear_unmounting(mountpoint);
        match crate::sys::remove_nofollow(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(e).at(&path),
            _ => Ok(()),
        }
    }

    /// Live mounts: records whose daemon runs and whose mountpoint is mounted.
    /// Stale records are removed (a dead mount's record is kept: see
    /// [`Store::mounts`]). Only this store's records are looked at.
    pub fn live_mounts(&self) -> Result<Vec<MountRecord>> {
        Ok(self.recorded_mounts(&mount_table())?.0)
    }

    /// The live read-write mount of fork `name` (a `storefs mount` of it),
    /// if there is one.
    pub fn live_mount_of_fork(&self, name: &str) -> Result<Option<MountRecord>> {
        Ok(self
            .live_mounts()?
            .into_iter()
            .find(|m| m.mode == "rw" && m.target == name))
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
        let table = mount_table();
        let (live, mut dead) = self.recorded_mounts(&table)?;
        for MountEntry {
            mountpoint: mp,
            fstype,
            source,
            ..
        } in table
        {
            let known = live
                .iter()
                .chain(&dead)
                .any(|r| Path::new(&r.mountpoint) == mp);
            if fstype == "fuse.storefs" && !known && is_disconnected(&mp) {
                dead.push(MountRecord {
                    mountpoint: mp.to_string_lossy().into_owned(),
                    // The source is the target (`storefs:TARGET` from older daemons).
                    target: source
                        .strip_prefix("storefs:")
                        .unwrap_or(&source)
                        .to_string(),
                    checkpoint: String::new(),
                    pid: 0,
                    mode: "dead".into(),
                    log: String::new(),
                    started_ns: 0,
                    pid_start: None,
                    created: Vec::new(),
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
        table: &[MountEntry],
    ) -> Result<(Vec<MountRecord>, Vec<MountRecord>)> {
        let dir = self.root().join("mounts");
        // Only a storefs mount counts: a record naming another kind of mount
        // (forged, or its mount replaced) is stale.
        let mounted = |p: &Path| {
            table
                .iter()
                .any(|m| m.mountpoint == p && m.fstype == "fuse.storefs")
        };
        let (mut live, mut dead) = (Vec::new(), Vec::new());
        for (name, _) in super::list_store_dir(&dir).at(&dir)? {
            let path = dir.join(name);
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(bytes) = super::read_store_file(&path) else {
                continue;
            };
            let rec: Option<MountRecord> = serde_json::from_slice(&bytes).ok();
            match rec {
                Some(r) if mounted(Path::new(&r.mountpoint)) && r.daemon_is_alive() => live.push(r),
                Some(r)
                    if r.pid > 1
                        && mounted(Path::new(&r.mountpoint))
                        && is_disconnected(Path::new(&r.mountpoint)) =>
                {
                    dead.push(MountRecord {
                        mode: "dead".into(),
                        ..r
                    })
                }
                // Its daemon, killed, still winding down (over io_uring its
                // workers keep the zombie a while) and the mount not yet
                // disconnected: neither live nor dead yet, and the record
                // (what the mount created, to remove) stays for `umount`.
                Some(r)
                    if r.pid > 1
                        && mounted(Path::new(&r.mountpoint))
                        && r.pid_start.is_some()
                        && crate::sys::process_start_time(r.pid) == r.pid_start => {}
                // Its daemon alive and its mount gone: unmounted (or detached
                // while still in use) and the daemon not yet exited (a fork's
                // commits on its way out). Kept until the daemon removes it:
                // a mount of the same fork or mountpoint waits for it
                // ([`Store::winding_down`]).
                Some(r) if r.daemon_is_alive() => {}
                _ => {
                    remove_dead_socket(&path.with_extension("sock"));
                    let _ = crate::sys::remove_nofollow(&path);
                }
            }
        }
        live.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
        dead.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
        Ok((live, dead))
    }

    /// The records of daemons whose mount is gone, or going (`storefs
    /// umount` marked it, [`Store::mark_unmounting`]), but which have not
    /// exited yet: unmounted, and committing a fork on their way out (or
    /// detached and still serving the processes inside).
    pub fn winding_down(&self) -> Result<Vec<MountRecord>> {
        let table = mount_table();
        let mounted = |p: &Path| {
            table
                .iter()
                .any(|m| m.mountpoint == p && m.fstype == "fuse.storefs")
        };
        let dir = self.root().join("mounts");
        let mut out = Vec::new();
        for (name, _) in super::list_store_dir(&dir).at(&dir)? {
            let path = dir.join(name);
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Ok(bytes) = super::read_store_file(&path) else {
                continue;
            };
            // Unmounted, or being unmounted by `storefs umount` (its mark
            // names this daemon), and the daemon still runs.
            if let Ok(r) = serde_json::from_slice::<MountRecord>(&bytes)
                && (!mounted(Path::new(&r.mountpoint))
                    || self.unmounting(Path::new(&r.mountpoint)) == Some(r.pid))
                && r.daemon_is_alive()
            {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Remove the record for `mountpoint` if daemon `pid` wrote it (a daemon
    /// mounted there since, once this one was unmounted, keeps its own).
    pub fn remove_own_mount(&self, mountpoint: &Path, pid: u32) -> Result<()> {
        match self.mount_record(mountpoint) {
            Some(r) if r.pid != pid => Ok(()),
            _ => self.remove_mount(mountpoint),
        }
    }

    /// The record for `mountpoint` as the daemon wrote it, live or not.
    pub fn mount_record(&self, mountpoint: &Path) -> Option<MountRecord> {
        let bytes = super::read_store_file(&self.mount_record_path(mountpoint)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The live record for `mountpoint`, if any.
    pub fn mount_at(&self, mountpoint: &Path) -> Result<Option<MountRecord>> {
        Ok(self
            .live_mounts()?
            .into_iter()
            .find(|r| Path::new(&r.mountpoint) == mountpoint))
    }
}
