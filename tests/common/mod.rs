//! Shared helpers for the integration tests: run the real `storefs` binary against
//! a private store, and unmount in a guard that runs on failure too.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Env {
    pub tmp: tempfile::TempDir,
    pub store: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("storefs-test-")
            .tempdir()
            .unwrap();
        let store = tmp.path().join("store");
        Env { tmp, store }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Run storefs with `--store`; returns the output whatever the exit code.
    pub fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.run_with_store(&self.store, args)
    }

    /// Run storefs with another `--store`.
    pub fn run_with_store<I, S>(&self, store: &Path, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Command::new(env!("CARGO_BIN_EXE_storefs"))
            .arg("--store")
            .arg(store)
            .args(args)
            .env_remove("STOREFS_STORE")
            .output()
            .unwrap()
    }

    /// Run and require success; returns stdout.
    pub fn ok<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "storefs failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Mount and return a guard that unmounts when dropped.
    pub fn mount(&self, target: &str, mountpoint: Option<&Path>) -> MountGuard {
        let mut args: Vec<&OsStr> = vec![OsStr::new("mount"), OsStr::new(target)];
        if let Some(m) = mountpoint {
            args.push(m.as_os_str());
        }
        let out = self.run(&args);
        // Register the guard before asserting, so a half-made mount is cleaned up.
        let status = self.ok(["status", "--json"]);
        let list: Vec<serde_json::Value> = serde_json::from_str(&status).unwrap();
        let mp = list
            .iter()
            .find(|m| m["target"] == target)
            .map(|m| PathBuf::from(m["mountpoint"].as_str().unwrap()));
        let guard = MountGuard {
            store: self.store.clone(),
            mountpoint: mp.clone(),
        };
        assert!(
            out.status.success(),
            "mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(mp.is_some(), "mount succeeded but status does not list it");
        guard
    }
}

pub struct MountGuard {
    store: PathBuf,
    pub mountpoint: Option<PathBuf>,
}

impl MountGuard {
    pub fn path(&self) -> &Path {
        self.mountpoint.as_deref().unwrap()
    }

    /// Unmount now through the CLI and require success.
    /// On failure the guard keeps the mountpoint, so its Drop still cleans up.
    pub fn unmount(mut self) {
        if let Some(mp) = self.mountpoint.clone() {
            let out = umount_cli(&self.store, &mp);
            assert!(
                out.status.success(),
                "umount failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            self.mountpoint = None;
        }
    }
}

fn umount_cli(store: &Path, mp: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(store)
        .arg("umount")
        .arg(mp)
        .output()
        .unwrap()
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Some(mp) = self.mountpoint.take() {
            let out = umount_cli(&self.store, &mp);
            if !out.status.success() {
                // Last resort, so no test leaves a mount behind.
                let _ = Command::new("umount").arg("-l").arg(&mp).status();
            }
        }
    }
}

/// Every path under `root` (relative), sorted, without following symlinks.
pub fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(&rel))
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(r.clone());
            }
            out.push(r);
        }
    }
    out.sort();
    out
}

/// All xattrs of a path (not following symlinks), sorted.
pub fn xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: buffers are valid for their lengths.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "llistxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cn = std::ffi::CString::new(name).unwrap();
        let mut val = vec![0u8; 65536];
        let m =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
        assert!(m >= 0, "lgetxattr {}", path.display());
        val.truncate(m as usize);
        out.push((name.to_vec(), val));
    }
    out.sort();
    out
}

pub fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let cn = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            cn.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "lsetxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Set mtime (and atime) of a path to `ns` since the epoch, not following symlinks.
pub fn set_mtime(path: &Path, ns: i64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let ts = libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    };
    let times = [ts, ts];
    // SAFETY: valid C string and array of two timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0);
}
