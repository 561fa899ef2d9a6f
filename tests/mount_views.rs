//! What every mount view (a checkpoint read-only, the browse mount, a fork)
//! shows of a tree's layout, compared with the same tree on the local ext4:
//! `lseek` `SEEK_DATA`/`SEEK_HOLE`, `st_blocks`, directory sizes, `du`,
//! symlink modes; and what the daemon logs while serving. Needs root and
//! /dev/fuse, and /tmp on ext4 (checked) for the native side.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, MountGuard, pseudo_random, walk};

const K: u64 = 1024;
const MIB: u64 = 1 << 20;

/// Write `data` at `offset` of `path` (created if missing).
fn write_at(path: &Path, offset: u64, data: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(data).unwrap();
}

fn set_len(path: &Path, len: u64) {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// The sparse files of the test tree: name -> how to make it.
const SPARSE: [&str; 8] = [
    "islands",
    "hole-start",
    "hole-middle",
    "hole-end",
    "all-hole",
    "no-hole",
    "unaligned",
    "empty",
];

/// A tree with sparse files (hole at the start, middle, end; all hole; none;
/// data not on block boundaries; six data runs; empty), small files, short and long
/// symlinks, and a directory of 300 entries.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("sparse")).unwrap();
    let s = |n: &str| root.join("sparse").join(n);
    // Six separate data runs: more extents than an ext4 inode holds.
    for i in 0..6 {
        write_at(&s("islands"), i * MIB + 100, &pseudo_random(300, 30 + i));
    }
    write_at(&s("hole-start"), MIB, &pseudo_random(8192, 1));
    write_at(&s("hole-middle"), 0, &pseudo_random(8192, 2));
    write_at(&s("hole-middle"), 3 * MIB, &pseudo_random(10000, 3));
    write_at(&s("hole-end"), 0, &pseudo_random(5000, 4));
    set_len(&s("hole-end"), 2 * MIB);
    set_len(&s("all-hole"), MIB + 123);
    write_at(&s("no-hole"), 0, &pseudo_random(300 * K as usize + 7, 5));
    write_at(&s("unaligned"), 5000, &pseudo_random(100, 6));
    set_len(&s("unaligned"), 3 * MIB + 1);
    set_len(&s("empty"), 0);
    fs::create_dir(root.join("small")).unwrap();
    for (i, len) in [1usize, 100, 4095, 4096, 4097, 20000]
        .into_iter()
        .enumerate()
    {
        fs::write(
            root.join(format!("small/f{i}")),
            pseudo_random(len, 10 + i as u64),
        )
        .unwrap();
    }
    symlink("x", root.join("short-link")).unwrap();
    symlink("y".repeat(59), root.join("link-59")).unwrap();
    symlink("z".repeat(60), root.join("link-60")).unwrap();
    symlink(format!("/{}", "long/".repeat(40)), root.join("long-link")).unwrap();
    fs::create_dir(root.join("many")).unwrap();
    for i in 0..300 {
        fs::write(root.join(format!("many/entry-{i:03}")), b"").unwrap();
    }
}

/// Require the native side of the comparison to be ext4.
fn require_ext4(path: &Path) {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(path)
        .output()
        .unwrap();
    let fstype = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        fstype == "ext2/ext3",
        "{} is on {fstype}, not ext4: these tests compare with ext4",
        path.display()
    );
}

/// One answer of lseek: the offset, or the errno.
fn lseek(f: &File, offset: i64, whence: i32) -> Result<i64, i32> {
    // SAFETY: a valid open fd.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r)
    }
}

type SeekMap = Vec<(i64, Result<i64, i32>, Result<i64, i32>)>;

/// SEEK_DATA and SEEK_HOLE of `path` from a set of offsets: every block
/// boundary and a byte either side of it up to past the end (coarser in
/// long runs), and -1.
fn seek_map(path: &Path) -> SeekMap {
    let f = File::open(path).unwrap();
    let size = f.metadata().unwrap().len() as i64;
    let mut offsets = vec![-1i64, 0, 1];
    let mut b = 0i64;
    while b <= size + 8192 {
        offsets.extend([b - 1, b, b + 1]);
        b += if b < 64 * 1024 || b > size - 64 * 1024 {
            4096
        } else {
            61 * 4096
        };
    }
    offsets.extend([size - 1, size, size + 1]);
    offsets.sort();
    offsets.dedup();
    offsets
        .into_iter()
        .map(|o| {
            (
                o,
                lseek(&f, o, libc::SEEK_DATA),
                lseek(&f, o, libc::SEEK_HOLE),
            )
        })
        .collect()
}

fn assert_same_seek_maps(native: &Path, mounted: &Path, names: &[&str], view: &str) {
    for name in names {
        let (a, b) = (seek_map(&native.join(name)), seek_map(&mounted.join(name)));
        let diff: Vec<_> = a.iter().zip(&b).filter(|(x, y)| x != y).take(5).collect();
        assert!(
            diff.is_empty(),
            "{view}: {name}: SEEK_DATA/SEEK_HOLE differ from ext4 (offset, data, hole): native vs mount {diff:?}"
        );
    }
}

/// Write back the file system holding `path` (ext4 counts a file's
/// extent-tree blocks in `st_blocks` only once they are allocated, at
/// writeback).
fn syncfs(path: &Path) {
    let f = File::open(path).unwrap();
    // SAFETY: a valid open fd.
    assert_eq!(unsafe { libc::syncfs(f.as_raw_fd()) }, 0);
}

/// `du -s` (and its flags) of `path`, the number only.
fn du(path: &Path, flags: &[&str]) -> u64 {
    let out = Command::new("du")
        .arg("-s")
        .args(flags)
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "du {}: {}",
        path.display(),
        common::stderr(&out)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// Every path's st_blocks (files and symlinks), and st_size and st_blocks of
/// directories, relative to `root`.
fn layout(root: &Path) -> Vec<(PathBuf, char, u64, u64)> {
    std::iter::once(PathBuf::new())
        .chain(walk(root))
        .map(|rel| {
            let m = fs::symlink_metadata(root.join(&rel)).unwrap();
            let kind = if m.is_dir() {
                'd'
            } else if m.file_type().is_symlink() {
                'l'
            } else {
                'f'
            };
            (rel, kind, m.size(), m.blocks())
        })
        .collect()
}

/// A store with a snapshot of the test tree; its checkpoint id, and the
/// tree's path (the native side).
fn setup(env: &Env) -> (String, PathBuf) {
    let tree = env.path("tree");
    require_ext4(env.tmp.path());
    make_tree(&tree);
    let id = env
        .ok(["snapshot".as_ref(), tree.as_os_str()])
        .trim()
        .to_string();
    (id, tree)
}

/// The three views of checkpoint `id`: read-only, browse, and a fork of it
/// (named `fork`): each a guard and the path of the tree in it.
fn mount_views(env: &Env, id: &str) -> Vec<(&'static str, MountGuard, PathBuf)> {
    let ro = env.mount(id, Some(&env.path("ro")));
    let browse_mp = env.path("browse");
    let out = env.run(["mount".as_ref(), "--browse".as_ref(), browse_mp.as_os_str()]);
    let browse = env.guard_for("(browse)");
    assert!(
        out.status.success(),
        "browse mount: {}",
        common::stderr(&out)
    );
    assert_eq!(browse.mountpoint.as_deref(), Some(browse_mp.as_path()));
    env.ok(["fork", id, "--name", "fork"]);
    let fork = env.mount("fork", Some(&env.path("forkmnt")));
    let ro_path = ro.path().to_path_buf();
    let fork_path = fork.path().to_path_buf();
    vec![
        ("read-only", ro, ro_path),
        ("browse", browse, browse_mp.join("checkpoints").join(id)),
        ("fork", fork, fork_path),
    ]
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn seek_data_and_hole_answer_as_ext4_on_every_view() {
    let env = Env::new();
    let (id, tree) = setup(&env);
    let names: Vec<String> = SPARSE.iter().map(|n| format!("sparse/{n}")).collect();
    let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
    names.extend(["small/f0", "small/f3", "small/f5"]);
    let views = mount_views(&env, &id);
    for (view, _guard, path) in &views {
        assert_same_seek_maps(&tree, path, &names, view);
    }

    // cp --sparse=always from the mount keeps the holes.
    for (view, _guard, path) in &views {
        let dest = env.path(&format!("cp-{view}"));
        let st = Command::new("cp")
            .arg("--sparse=always")
            .arg(path.join("sparse/hole-middle"))
            .arg(&dest)
            .status()
            .unwrap();
        assert!(st.success());
        let native = fs::metadata(tree.join("sparse/hole-middle")).unwrap();
        assert_eq!(
            fs::metadata(&dest).unwrap().blocks(),
            native.blocks(),
            "{view}: cp keeps the holes"
        );
    }

    // The fork's own changes: a write into a hole, a hole punched in data, a
    // truncate that extends, a write past the end; the same on a native copy.
    let native = env.path("native-copy");
    env.ok(["restore".as_ref(), id.as_ref(), native.as_os_str()]);
    let fork = &views[2].2;
    for root in [&native, fork] {
        let s = |n: &str| root.join("sparse").join(n);
        write_at(&s("all-hole"), 200 * K, &pseudo_random(5000, 20));
        let f = OpenOptions::new().write(true).open(s("no-hole")).unwrap();
        // SAFETY: a valid fd; punch a block-aligned hole in the middle.
        let r = unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                64 * 1024,
                128 * 1024,
            )
        };
        assert_eq!(r, 0, "punch hole in {}", root.display());
        drop(f);
        set_len(&s("hole-end"), 5 * MIB);
        write_at(&s("empty"), 2 * MIB, b"tail");
        write_at(&s("new-file"), 40000, b"fresh");
    }
    // ext4 allocates extent-tree blocks at writeback: compare after it.
    syncfs(&native);
    let mut changed: Vec<&str> = names.clone();
    changed.push("sparse/new-file");
    assert_same_seek_maps(&native, fork, &changed, "fork after writes");
    for name in &changed {
        assert_eq!(
            fs::metadata(fork.join(name)).unwrap().blocks(),
            fs::metadata(native.join(name)).unwrap().blocks(),
            "fork after writes: st_blocks of {name}"
        );
    }
    for (_, guard, _) in views {
        guard.unmount();
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn blocks_and_du_match_the_tree_restored_on_ext4() {
    let env = Env::new();
    let (id, _tree) = setup(&env);
    let restored = env.path("restored");
    env.ok(["restore".as_ref(), id.as_ref(), restored.as_os_str()]);
    // ext4 allocates extent-tree blocks at writeback: compare after it.
    syncfs(&restored);
    let native = layout(&restored);
    let views = mount_views(&env, &id);
    for (view, _guard, path) in &views {
        let mounted = layout(path);
        assert_eq!(native.len(), mounted.len());
        for (a, b) in native.iter().zip(&mounted) {
            assert_eq!(a.0, b.0);
            match a.1 {
                // Directories: ext4's size and blocks.
                'd' => assert_eq!(
                    (a.2, a.3),
                    (b.2, b.3),
                    "{view}: size, blocks of dir {:?}",
                    a.0
                ),
                _ => assert_eq!(a.3, b.3, "{view}: st_blocks of {:?}", a.0),
            }
        }
        assert_eq!(du(path, &[]), du(&restored, &[]), "{view}: du -s");
        assert_eq!(
            du(path, &["--apparent-size"]),
            du(&restored, &["--apparent-size"]),
            "{view}: du -s --apparent-size"
        );
    }
    // A directory the fork made, and one it filled: sized as ext4 would.
    let fork = &views[2].2;
    fs::create_dir(fork.join("made")).unwrap();
    for i in 0..300 {
        fs::write(fork.join(format!("made/entry-{i:03}")), b"").unwrap();
    }
    let m = fs::metadata(fork.join("made")).unwrap();
    assert_eq!(
        (m.size(), m.blocks()),
        (3 * 4096, 24),
        "a fork's directory of 300 entries"
    );
    let m = fs::metadata(fork.join("small")).unwrap();
    assert_eq!(
        (m.size(), m.blocks()),
        (4096, 8),
        "a fork's small directory"
    );
    for (_, guard, _) in views {
        guard.unmount();
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn symlinks_are_rwxrwxrwx_on_every_view() {
    let env = Env::new();
    let tar = env.path("links.tar");
    let script = format!(
        r#"
import tarfile, io
with tarfile.open({tar:?}, "w", format=tarfile.GNU_FORMAT) as t:
    d = tarfile.TarInfo("top"); d.type = tarfile.DIRTYPE; d.mode = 0o755; t.addfile(d)
    f = tarfile.TarInfo("top/file"); f.mode = 0o644; f.size = 3; t.addfile(f, io.BytesIO(b"abc"))
    for name, mode in [("top/l755", 0o755), ("top/l700", 0o700), ("top/l000", 0)]:
        l = tarfile.TarInfo(name); l.type = tarfile.SYMTYPE; l.linkname = "file"; l.mode = mode
        t.addfile(l)
"#,
        tar = tar.to_str().unwrap()
    );
    let st = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .status()
        .unwrap();
    assert!(st.success());
    let id = env
        .ok([
            "import".as_ref(),
            tar.as_os_str(),
            "--origin".as_ref(),
            env.path("origin").as_os_str(),
        ])
        .trim()
        .to_string();
    let views = mount_views(&env, &id);
    for (view, _guard, path) in &views {
        for name in ["l755", "l700", "l000"] {
            // A single top directory is the tree itself (import strips it).
            let m = fs::symlink_metadata(path.join(name)).unwrap();
            assert!(m.file_type().is_symlink());
            assert_eq!(m.mode() & 0o7777, 0o777, "{view}: mode of symlink {name}");
        }
    }
    for (_, guard, _) in views {
        guard.unmount();
    }
}

/// The daemon logs of the store's mounts, concatenated.
fn daemon_logs(store: &Path) -> String {
    let mut out = String::new();
    for e in fs::read_dir(store.join("logs")).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().as_bytes().starts_with(b"mount-") {
            out.push_str(&fs::read_to_string(&p).unwrap());
        }
    }
    out
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn daemon_log_stays_quiet_over_many_opens_and_a_clean_umount() {
    let env = Env::new();
    let (id, _tree) = setup(&env);
    let views = mount_views(&env, &id);
    for (view, _guard, path) in &views {
        // Each Python open() asks isatty() (an ioctl); tools copy, seek, read.
        let script = format!(
            "import os\nfor i in range(50):\n    for n in ('small/f1', 'sparse/hole-middle'):\n        with open(os.path.join({p:?}, n), 'rb') as f:\n            f.read(10)\n            os.lseek(f.fileno(), 0, os.SEEK_HOLE)\n",
            p = path.to_str().unwrap()
        );
        let st = Command::new("python3")
            .arg("-c")
            .arg(&script)
            .status()
            .unwrap();
        assert!(st.success());
        let st = Command::new("cp")
            .arg(path.join("small/f5"))
            .arg(env.path("copied"))
            .status()
            .unwrap();
        assert!(st.success());
        if *view == "fork" {
            // Within the fork: cp tries copy_file_range first.
            for i in 0..3 {
                let st = Command::new("cp")
                    .arg(path.join("small/f5"))
                    .arg(path.join(format!("copy-{i}")))
                    .status()
                    .unwrap();
                assert!(st.success());
            }
        }
    }
    for (_, guard, _) in views {
        guard.unmount();
    }
    let log = daemon_logs(&env.store);
    assert!(log.contains("mounted"), "the daemons logged: {log}");
    let ioctl: Vec<&str> = log.lines().filter(|l| l.contains("ioctl")).collect();
    assert!(ioctl.is_empty(), "ioctl lines in the daemon log: {ioctl:?}");
    let warn: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(
        warn.is_empty(),
        "warnings in the daemon log of a clean session: {warn:?}"
    );
}
