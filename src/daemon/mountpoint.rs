//! The checks before mounting (`store_root` is the store's directory), and
//! the mountpoint's creation.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::path::Path;

use super::{Error, Result};
use crate::sys;

/// Check `mp` and `/dev/fuse`, create `mp` if it is missing, and run `f`;
/// if `f` fails, remove the mountpoint this created (only an empty
/// directory is removed), so a mount that never happened leaves no trace.
pub(super) fn on_mountpoint<T>(
    store_root: &Path,
    mp: &Path,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    check_mountpoint(store_root, mp)?;
    check_dev_fuse()?;
    let created = !mp.exists();
    if created {
        fs::create_dir_all(mp).map_err(|source| Error::CreateMountpoint {
            path: mp.to_path_buf(),
            source,
        })?;
    }
    let result = f();
    if result.is_err() && created {
        let _ = fs::remove_dir(mp);
    }
    result
}

/// Refuse mountpoints that would hide the store, are busy, or are not empty.
fn check_mountpoint(root: &Path, mp: &Path) -> Result<()> {
    if mp.starts_with(root) || root.starts_with(mp) {
        return Err(Error::OverlapsStore {
            mountpoint: mp.to_path_buf(),
            store: root.to_path_buf(),
        });
    }
    // A dead daemon's mount still answers stat from the kernel's attribute cache;
    // listing it tells.
    if let Err(e) = fs::read_dir(mp)
        && e.kind() == ErrorKind::NotConnected
    {
        return Err(Error::DeadMount(mp.to_path_buf()));
    }
    if let Some(m) = sys::mount_table().into_iter().find(|m| m.mountpoint == mp) {
        return Err(Error::AlreadyMounted {
            mountpoint: mp.to_path_buf(),
            fstype: m.fstype,
        });
    }
    let access = |source| Error::Access {
        path: mp.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(mp) {
        Ok(m) if m.is_dir() => {
            let mut rd = fs::read_dir(mp).map_err(access)?;
            if rd.next().is_some() {
                return Err(Error::NotEmpty(mp.to_path_buf()));
            }
            Ok(())
        }
        Ok(_) => Err(Error::NotDir(mp.to_path_buf())),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(access(e)),
    }
}

/// FUSE needs /dev/fuse, readable and writable by us.
fn check_dev_fuse() -> Result<()> {
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::NoDevFuse),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            let (is, fix) = dev_fuse_fix();
            Err(Error::DevFuseDenied { is, fix })
        }
        Err(source) => Err(Error::Access {
            path: "/dev/fuse".into(),
            source,
        }),
    }
}

/// For a user who may not open `/dev/fuse`: its mode, owner and group, and
/// the fix that fits them. Debian and most distributions ship it mode 0666
/// (no group to join); some give it mode 0660 and a group of its own.
fn dev_fuse_fix() -> (String, String) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = fs::metadata("/dev/fuse") else {
        return ("cannot stat it".into(), "mount as root".into());
    };
    let mode = m.mode() & 0o7777;
    let owner = nix::unistd::User::from_uid(m.uid().into())
        .ok()
        .flatten()
        .map_or_else(|| m.uid().to_string(), |u| u.name);
    let group = nix::unistd::Group::from_gid(m.gid().into())
        .ok()
        .flatten()
        .map_or_else(|| m.gid().to_string(), |g| g.name);
    let is = format!("mode {mode:04o}, owner {owner}, group {group}");
    let fix = if m.gid() != 0 && mode & 0o060 == 0o060 {
        format!(
            "add your user to group {group} (`sudo usermod -aG {group} $USER`, then log in again), or mount as root"
        )
    } else {
        "give it the mode distributions ship (`sudo chmod 0666 /dev/fuse`; in a container, pass the device with that mode), or mount as root".to_string()
    };
    (is, fix)
}
