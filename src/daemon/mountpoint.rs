//! The checks before mounting (`store_root` is the store's directory), and
//! the mountpoint's creation and, once the mount is gone, its removal.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{Error, Result};
use crate::store::mounts::CreatedDir;
use crate::sys;

/// Check `mp` and `/dev/fuse`, create `mp` (and its missing parents) if it
/// is missing, and run `f` with what was created; then remove what this
/// created, deepest first, as far as each is still the directory made here
/// and empty: a mount that never happened, or that has ended, leaves no
/// trace, and a directory that was there before is never removed.
pub(super) fn on_mountpoint<T>(
    store_root: &Path,
    mp: &Path,
    f: impl FnOnce(&[CreatedDir]) -> Result<T>,
) -> Result<T> {
    check_mountpoint(store_root, mp)?;
    let mut created = Vec::new();
    let made = create_missing(mp, &mut created);
    let result = made.and_then(|()| f(&created));
    remove_created(&created);
    result
}

/// Create `mp` and the parents it lacks, one `mkdir` each from the top, and
/// add each directory made here to `created` (one another process makes
/// meanwhile is not this mount's).
fn create_missing(mp: &Path, created: &mut Vec<CreatedDir>) -> Result<()> {
    let missing: Vec<&Path> = mp
        .ancestors()
        .take_while(
            |p| matches!(fs::symlink_metadata(p), Err(e) if e.kind() == ErrorKind::NotFound),
        )
        .collect();
    for dir in missing.into_iter().rev() {
        let fail = |source| Error::CreateMountpoint {
            path: mp.to_path_buf(),
            source,
        };
        match fs::create_dir(dir) {
            Ok(()) => {
                let m = fs::symlink_metadata(dir).map_err(fail)?;
                created.push(CreatedDir {
                    path: dir.to_string_lossy().into_owned(),
                    dev: m.dev(),
                    ino: m.ino(),
                });
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(())
}

/// Remove the directories a mount created (as [`on_mountpoint`] lists
/// them, parents first), deepest first: each only while it is still the
/// same directory (device and inode) and empty, stopping at the first that
/// is not. Used by the daemon as it exits and by `umount` after a daemon
/// that died.
pub fn remove_created(created: &[CreatedDir]) {
    for d in created.iter().rev() {
        let path = Path::new(&d.path);
        let same = fs::symlink_metadata(path)
            .is_ok_and(|m| m.is_dir() && m.dev() == d.dev && m.ino() == d.ino);
        if !same || fs::remove_dir(path).is_err() {
            return;
        }
    }
}

/// Refuse mountpoints that would hide the store, are busy, or are not
/// empty, and a `/dev/fuse` that cannot be opened.
pub(super) fn check_mountpoint(root: &Path, mp: &Path) -> Result<()> {
    check_place(root, mp)?;
    check_dev_fuse()
}

/// Refuse mountpoints that would hide the store, are busy, or are not empty.
fn check_place(root: &Path, mp: &Path) -> Result<()> {
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
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Err(Error::DevFuseDenied),
        Err(source) => Err(Error::Access {
            path: "/dev/fuse".into(),
            source,
        }),
    }
}
