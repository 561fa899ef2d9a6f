//! A full disk under a mounted fork (issue 43, finding 14): the writer gets
//! ENOSPC (not EIO), the fork keeps serving reads, takes a delete when its
//! journal has room for the record, and once space is freed takes writes and
//! commits again, without being reopened. The store lives on a small tmpfs
//! of the test's own, unmounted in a guard.

mod common;

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::Env;

/// A tmpfs mounted for one test; unmounted when dropped (lazily if busy).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mount a tmpfs of `size` at `dir`; `None` (the test is skipped, and
    /// says so) when this machine does not let us.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0755"))
            .arg("storefs-test")
            .arg(dir)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "SKIP: cannot mount a tmpfs at {} ({}); needs root",
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_full_disk_under_a_mounted_fork_gives_enospc_and_the_fork_goes_on() {
    let mut env = Env::new();
    let small = env.path("small-fs");
    fs::create_dir(&small).unwrap();
    // Declared before the mount's guard: dropped after it.
    let Some(_tmpfs) = Tmpfs::mount(&small, "24m") else {
        return;
    };
    env.store = small.join("store");
    let src = env.path("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("keep.txt"), b"kept\n").unwrap();
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "b".as_ref(),
    ]);
    env.ok(["fork", "b", "--name", "f"]);
    // Space to free later: what a user deletes elsewhere on the disk.
    fs::write(small.join("ballast"), vec![1u8; 4 << 20]).unwrap();
    let mp = env.path("mnt");
    let m = env.mount("f", Some(&mp));

    // Fill the disk through the fork.
    let block: Vec<u8> = (0..128 * 1024).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut big = File::create(mp.join("big")).unwrap();
    let mut written = 0usize;
    let err = loop {
        match big.write(&block) {
            Ok(n) => written += n,
            Err(e) => break e,
        }
        assert!(written < 64 << 20, "64 MiB went into a 24 MiB file system");
    };
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ENOSPC),
        "a full disk is ENOSPC to the writer: {err}"
    );
    assert!(written > 0);
    drop(big);

    // Reads go on: the base checkpoint's file and what the journal took.
    assert_eq!(fs::read(mp.join("keep.txt")).unwrap(), b"kept\n");
    let mut head = vec![0u8; block.len()];
    File::open(mp.join("big"))
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert_eq!(head, block);
    assert_eq!(fs::metadata(mp.join("big")).unwrap().len(), written as u64);

    // A delete is one small record: taken when the journal has room for it
    // (the refused write's bytes were cut), else ENOSPC too, never EIO.
    let deleted = match fs::remove_file(mp.join("big")) {
        Ok(()) => true,
        Err(e) => {
            assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "delete: {e}");
            eprintln!("the delete met a full journal too (ENOSPC); retried after freeing space");
            false
        }
    };

    if deleted {
        eprintln!("the delete was taken while the disk was full");
    }

    // Space freed: the same mount takes deletes, writes and a commit.
    fs::remove_file(small.join("ballast")).unwrap();
    if !deleted {
        fs::remove_file(mp.join("big")).unwrap();
    }
    fs::write(mp.join("after.txt"), b"after\n").unwrap();
    let id = env.ok(["commit", "f", "-m", "after a full disk"]);
    let id = id.trim();
    assert_eq!(env.ok(["cat", id, "after.txt"]), "after\n");
    assert_eq!(env.ok(["cat", id, "keep.txt"]), "kept\n");
    assert!(
        !env.run(["cat", id, "big"]).status.success(),
        "big was deleted"
    );
    assert_eq!(fs::read(mp.join("after.txt")).unwrap(), b"after\n");
    m.unmount();
}
