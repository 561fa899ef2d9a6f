//! `mount -o remount` of a storefs mount: what the kernel can change on a
//! mounted FUSE file system (the mount's flags: `ro`, `noexec`, the atime
//! ones; its file system's: `sync`, `dirsync`), applied by `MS_REMOUNT` on
//! the mountpoint; the daemon is not involved and no second one starts.
//! FUSE takes no options of its own on a remount: the rest is reported as
//! ignored.

use std::io;
use std::path::Path;

use rustix::mount::MountFlags;

use crate::sys::{self, MountEntry};

/// What a remount does: the flags it gives the kernel, and the options it
/// ignores (each with why), in the order given.
#[derive(Debug, PartialEq, Eq)]
pub struct Remount {
    pub flags: MountFlags,
    pub ignored: Vec<(String, &'static str)>,
}

/// The atime flag of `entry` now (`MS_REMOUNT` keeps it when none is given;
/// it is given here all the same).
fn current_atime(entry: &MountEntry) -> MountFlags {
    let opts = || entry.mount_options.split(',');
    if opts().any(|o| o == "noatime") {
        MountFlags::NOATIME
    } else if opts().any(|o| o == "relatime") {
        MountFlags::RELATIME
    } else {
        MountFlags::STRICTATIME
    }
}

/// The remount of `entry` with `options` (comma-separated lists), the whole
/// set as mount(8) gives it to a helper: the mount's options (from
/// /proc/self/mountinfo, or its fstab line) with the user's changes applied.
/// As `MS_REMOUNT` takes them: a flag not named is cleared (`noexec`,
/// `nodiratime`, `sync`, `dirsync`, `ro`), except the atime ones, kept when
/// none is named; a later option wins over an earlier one. `read_only`: a
/// checkpoint or browse mount, which stays `ro`. `nosuid` and `nodev`
/// always stay. Bookkeeping options of mount(8) and
/// fstab, and FUSE options the mount already has, are ignored silently as
/// at mount time; FUSE and storefs options it does not have cannot be
/// changed on a mounted file system and are reported.
pub fn plan(entry: &MountEntry, read_only: bool, options: &[String]) -> Remount {
    const ATIME: MountFlags = MountFlags::NOATIME
        .union(MountFlags::RELATIME)
        .union(MountFlags::STRICTATIME);
    let mut flags = current_atime(entry);
    let mut ignored = Vec::new();
    let has = |o: &str| {
        let o = if o == "allow_root" { "allow_other" } else { o };
        entry.super_options.split(',').any(|x| x == o)
    };
    let atime = |flags: &mut MountFlags, f: MountFlags| {
        *flags = flags.difference(ATIME).union(f);
    };
    for o in options.iter().flat_map(|o| o.split(',')).map(str::trim) {
        match o {
            "ro" => flags |= MountFlags::RDONLY,
            "rw" if read_only => ignored.push((o.to_string(), "checkpoint mounts are read-only")),
            "rw" => flags.remove(MountFlags::RDONLY),
            "noexec" => flags |= MountFlags::NOEXEC,
            "exec" => flags.remove(MountFlags::NOEXEC),
            "noatime" => atime(&mut flags, MountFlags::NOATIME),
            // `atime` as at mount time: the kernel's default, relatime.
            "relatime" | "atime" | "nostrictatime" => atime(&mut flags, MountFlags::RELATIME),
            "strictatime" | "norelatime" => atime(&mut flags, MountFlags::STRICTATIME),
            "nodiratime" => flags |= MountFlags::NODIRATIME,
            "diratime" => flags.remove(MountFlags::NODIRATIME),
            "sync" => flags |= MountFlags::SYNCHRONOUS,
            "async" => flags.remove(MountFlags::SYNCHRONOUS),
            "dirsync" => flags |= MountFlags::DIRSYNC,
            "suid" | "dev" => {
                ignored.push((o.to_string(), "storefs mounts are always nosuid,nodev"))
            }
            "mand" => ignored.push((o.to_string(), "FUSE has no mandatory locks")),
            // As at mount time (mount.fuse.storefs): accepted, nothing to do.
            ""
            | "remount"
            | "nosuid"
            | "nodev"
            | "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "_netdev"
            | "nofail"
            | "sloppy"
            | "acl"
            | "noacl"
            | "iversion"
            | "noiversion"
            | "silent"
            | "loud"
            | "lazytime"
            | "nolazytime"
            | "nomand"
            | crate::fs::OPEN_CHECKS => {}
            o if o.starts_with("x-") || o.starts_with("comment=") || o.starts_with("store=") => {}
            // The mount's own FUSE options, which mount(8) gives back.
            o if has(o) => {}
            o => ignored.push((
                o.to_string(),
                "set only when mounting: unmount and mount again to change it",
            )),
        }
    }
    flags |= MountFlags::NOSUID | MountFlags::NODEV;
    if read_only {
        flags |= MountFlags::RDONLY;
    }
    Remount { flags, ignored }
}

/// Apply `r` to the mount at `mountpoint` (root only).
pub fn apply(mountpoint: &Path, r: &Remount) -> io::Result<()> {
    sys::remount(mountpoint, r.flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mount: &str, sup: &str) -> MountEntry {
        MountEntry {
            mountpoint: "/m".into(),
            fstype: "fuse.storefs".into(),
            source: "f1".into(),
            mount_options: mount.into(),
            super_options: sup.into(),
        }
    }

    fn opts(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn flags_not_named_are_cleared_but_the_atime_one_and_later_options_win() {
        let e = entry(
            "rw,nosuid,nodev,noexec,noatime",
            "rw,sync,user_id=0,group_id=0,default_permissions",
        );
        // As mount(8) gives it for `-o remount,nodiratime`: the mount's
        // options with the user's changes.
        let r = plan(
            &e,
            false,
            &opts(
                "rw,nosuid,nodev,noexec,noatime,sync,remount,nodiratime,user_id=0,group_id=0,default_permissions",
            ),
        );
        assert_eq!(
            r.flags,
            MountFlags::NOSUID
                | MountFlags::NODEV
                | MountFlags::NOEXEC
                | MountFlags::NOATIME
                | MountFlags::SYNCHRONOUS
                | MountFlags::NODIRATIME
        );
        assert!(r.ignored.is_empty(), "{:?}", r.ignored);
        // For `-o remount,exec,async` mount(8) drops noexec and sync: cleared.
        // The atime flag, named by none, stays.
        let r = plan(&e, false, &opts("rw,nosuid,nodev,noatime,remount"));
        assert_eq!(
            r.flags,
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOATIME
        );
        let r = plan(&e, false, &opts("rw"));
        assert!(r.flags.contains(MountFlags::NOATIME), "{:?}", r.flags);
        let r = plan(&e, false, &opts("noatime,remount,atime,ro,sync"));
        assert_eq!(
            r.flags,
            MountFlags::NOSUID
                | MountFlags::NODEV
                | MountFlags::RELATIME
                | MountFlags::RDONLY
                | MountFlags::SYNCHRONOUS
        );
    }

    #[test]
    fn a_checkpoint_stays_read_only_and_nosuid_nodev_always_stay() {
        let e = entry("ro,nosuid,nodev,relatime", "ro,user_id=0,group_id=0");
        let r = plan(&e, true, &opts("remount,rw,suid,dev,exec"));
        assert!(
            r.flags
                .contains(MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV)
        );
        let names: Vec<&str> = r.ignored.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(names, ["rw", "suid", "dev"]);
    }

    #[test]
    fn fuse_options_are_ignored_silently_only_when_the_mount_has_them() {
        let e = entry(
            "rw,nosuid,nodev,relatime",
            "rw,user_id=0,group_id=0,allow_other",
        );
        let r = plan(
            &e,
            false,
            &opts("remount,allow_other,allow_root,user_id=0,_netdev,x-a,defaults,store=/s"),
        );
        assert!(r.ignored.is_empty(), "{:?}", r.ignored);
        let r = plan(&e, false, &opts("remount,max_read=4096,cache_size=1G"));
        let names: Vec<&str> = r.ignored.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(names, ["max_read=4096", "cache_size=1G"]);
    }
}
