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
///
/// `from_origin`: `mp` is a checkpoint's origin, which passed the origin
/// policy ([`super::origin`]); its missing parts are created without
/// following a symlink, and its path rules are checked again once all of it
/// exists, so nobody can have swapped a part of it in between.
pub(super) fn on_mountpoint<T>(
    store_root: &Path,
    mp: &Path,
    from_origin: bool,
    f: impl FnOnce(&[CreatedDir]) -> Result<T>,
) -> Result<T> {
    check_mountpoint(store_root, mp)?;
    let mut created = Vec::new();
    let made = create_missing(mp, from_origin, &mut created).and_then(|()| {
        if !from_origin {
            return Ok(());
        }
        super::origin::check_path(mp, rustix::process::geteuid().as_raw()).map_err(|why| {
            Error::Origin {
                path: mp.to_path_buf(),
                why,
            }
        })
    });
    let result = made.and_then(|()| f(&created));
    remove_created(&created);
    result
}

/// Create `mp` and the parents it lacks, one `mkdir` each from the top, and
/// add each directory made here to `created` (one another process makes
/// meanwhile is not this mount's). With `nofollow`, each is made relative
/// to a descriptor of its parent opened without following a symlink: a
/// symlink on the way fails (`ELOOP`, `ENOTDIR`) instead of being followed.
fn create_missing(mp: &Path, nofollow: bool, created: &mut Vec<CreatedDir>) -> Result<()> {
    let fail = |source| Error::CreateMountpoint {
        path: mp.to_path_buf(),
        source,
    };
    if nofollow {
        return create_nofollow(mp, created).map_err(fail);
    }
    let missing: Vec<&Path> = mp
        .ancestors()
        .take_while(
            |p| matches!(fs::symlink_metadata(p), Err(e) if e.kind() == ErrorKind::NotFound),
        )
        .collect();
    for dir in missing.into_iter().rev() {
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

/// [`create_missing`] for an origin: the missing directories of the
/// absolute path `mp` (mode 0755) one by one, each relative to a
/// descriptor of its parent opened without following a symlink.
fn create_nofollow(mp: &Path, created: &mut Vec<CreatedDir>) -> std::io::Result<()> {
    use rustix::fs::{CWD, Mode, OFlags, fstat, mkdirat, openat};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = openat(CWD, "/", flags, Mode::empty())?;
    let mut path = std::path::PathBuf::from("/");
    for c in mp.components().skip(1) {
        path.push(c);
        let made = match mkdirat(&dir, c.as_os_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) => true,
            Err(e) if e == rustix::io::Errno::EXIST => false,
            Err(e) => return Err(e.into()),
        };
        dir = openat(&dir, c.as_os_str(), flags, Mode::empty())?;
        if made {
            let st = fstat(&dir)?;
            created.push(CreatedDir {
                path: path.to_string_lossy().into_owned(),
                dev: st.st_dev,
                ino: st.st_ino,
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
    fn an_origin_is_created_without_following_a_symlink() {
        let t = tempfile::Builder::new()
            .prefix("storefs-mp-")
            .tempdir_in("/tmp")
            .unwrap();
        let target = t.path().join("target");
        fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        let mp = t.path().join("link/a/b");
        assert!(create_nofollow(&mp, &mut Vec::new()).is_err());
        assert!(
            fs::read_dir(&target).unwrap().next().is_none(),
            "nothing created through the symlink"
        );
        // The whole step: refused, nothing created, `f` not run.
        let store = t.path().join("store");
        let r = on_mountpoint(&store, &mp, true, |_| -> Result<()> {
            panic!("mounted through a symlink")
        });
        assert!(matches!(r, Err(Error::CreateMountpoint { .. })), "{r:?}");
        assert!(fs::read_dir(&target).unwrap().next().is_none());
        // An existing mountpoint reached through a symlink: the walk that
        // opens each part without following one refuses it (ENOTDIR)
        // before the path rules are checked again.
        fs::create_dir(target.join("x")).unwrap();
        let r = on_mountpoint(&store, &t.path().join("link/x"), true, |_| -> Result<()> {
            panic!("mounted through a symlink")
        });
        assert!(
            matches!(&r, Err(Error::CreateMountpoint { source, .. })
                if source.raw_os_error() == Some(libc::ENOTDIR)),
            "{r:?}"
        );
        // The path rules alone refuse it too.
        assert!(super::super::origin::check_path(&t.path().join("link/x"), 0).is_err());
        // Not from an origin (a mountpoint the caller gave): followed.
        on_mountpoint(&store, &t.path().join("link/x"), false, |_| Ok(())).unwrap();
        // Without a symlink: created, mode 0755.
        let ok = t.path().join("real/a/b");
        // (what it created goes again once `f` returns).
        let mode = on_mountpoint(&store, &ok, true, |created| {
            assert_eq!(created.len(), 3, "real, real/a, real/a/b: {created:?}");
            Ok(fs::metadata(t.path().join("real/a"))?.mode() & 0o7777)
        })
        .unwrap();
        assert_eq!(mode, 0o755);
        assert!(!t.path().join("real").exists(), "removed when f returned");
    }
}
