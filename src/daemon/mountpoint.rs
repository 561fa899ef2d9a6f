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
///
/// `from_origin`: `mp` is a checkpoint's origin, which passed the origin
/// policy ([`super::origin`]); its missing parts are created without
/// following a symlink, and its path rules are checked again once all of it
/// exists, so nobody can have swapped a part of it in between.
pub(super) fn on_mountpoint<T>(
    store_root: &Path,
    mp: &Path,
    from_origin: bool,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    check_mountpoint(store_root, mp)?;
    check_dev_fuse()?;
    let created = fs::symlink_metadata(mp).is_err();
    if created {
        let made = if from_origin {
            create_nofollow(mp)
        } else {
            fs::create_dir_all(mp)
        };
        made.map_err(|source| Error::CreateMountpoint {
            path: mp.to_path_buf(),
            source,
        })?;
    }
    if from_origin
        && let Err(why) = super::origin::check_path(mp, rustix::process::geteuid().as_raw())
    {
        if created {
            let _ = fs::remove_dir(mp);
        }
        return Err(Error::Origin {
            path: mp.to_path_buf(),
            why,
        });
    }
    let result = f();
    if result.is_err() && created {
        let _ = fs::remove_dir(mp);
    }
    result
}

/// Create the missing directories of the absolute path `mp` (mode 0755)
/// one by one, each relative to a descriptor of its parent opened without
/// following a symlink: a symlink on the way fails (`ELOOP`, `ENOTDIR`)
/// instead of being followed.
fn create_nofollow(mp: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, Mode, OFlags, mkdirat, openat};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = openat(CWD, "/", flags, Mode::empty())?;
    for c in mp.components().skip(1) {
        match mkdirat(&dir, c.as_os_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::EXIST => {}
            Err(e) => return Err(e.into()),
        }
        dir = openat(&dir, c.as_os_str(), flags, Mode::empty())?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_created_without_following_a_symlink() {
        let t = tempfile::Builder::new()
            .prefix("storefs-mp-")
            .tempdir_in("/tmp")
            .unwrap();
        let target = t.path().join("target");
        fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        let mp = t.path().join("link/a/b");
        assert!(create_nofollow(&mp).is_err());
        assert!(
            fs::read_dir(&target).unwrap().next().is_none(),
            "nothing created through the symlink"
        );
        // The whole step: refused, nothing created, `f` not run.
        let store = t.path().join("store");
        let r = on_mountpoint(&store, &mp, true, || -> Result<()> {
            panic!("mounted through a symlink")
        });
        assert!(matches!(r, Err(Error::CreateMountpoint { .. })), "{r:?}");
        assert!(fs::read_dir(&target).unwrap().next().is_none());
        // An existing mountpoint reached through a symlink: the path
        // rules, checked again here, refuse it.
        fs::create_dir(target.join("x")).unwrap();
        let r = on_mountpoint(&store, &t.path().join("link/x"), true, || -> Result<()> {
            panic!("mounted through a symlink")
        });
        assert!(matches!(r, Err(Error::Origin { .. })), "{r:?}");
        // Not from an origin (a mountpoint the caller gave): followed.
        on_mountpoint(&store, &t.path().join("link/x"), false, || Ok(())).unwrap();
        // Without a symlink: created, mode 0755.
        let ok = t.path().join("real/a/b");
        on_mountpoint(&store, &ok, true, || Ok(())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(t.path().join("real/a"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o755
        );
    }
}
