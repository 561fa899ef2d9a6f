//! Helpers shared by tests/archive_corpus.rs and tests/lossless_tree.rs (issue 15): run a
//! storefs binary (STOREFS_BIN overrides the one cargo built) with a time limit, mount
//! it under a guard, and compare two directory trees by everything a tool sees (names,
//! types, modes, owners, mtimes, bytes, hardlink groups, xattrs, rdev, holes).
//! Comparisons return a list of differences instead of panicking, so one run reports
//! every archive and every check.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The storefs binary under test: `STOREFS_BIN` or the one cargo built.
pub fn bin() -> PathBuf {
    match std::env::var_os("STOREFS_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_storefs")),
    }
}

/// Panic with the set-up command when a tool the test needs is missing.
pub fn require_tools(tools: &[&str]) {
    for t in tools {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {t}"))
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{t} is missing: run scripts/setup-debian.sh (it installs libarchive-tools, rsync, acl, attr, zstd)"
        );
    }
}

/// The result of a command run with a limit.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// Why it was stopped (time limit, or what `watch` said), if it was.
    pub killed: Option<String>,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.killed.is_none() && self.code == Some(0)
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
    /// A one-line description of a failure, for the report.
    pub fn why(&self) -> String {
        if let Some(k) = &self.killed {
            return k.clone();
        }
        let err = self.stderr.trim().replace('\n', " | ");
        format!("exit {:?}: {}", self.code, clip(&err, 300))
    }
}

pub fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

/// Run `cmd` with stdout/stderr captured; stop it after `limit`, or when `watch`
/// (called about every 200 ms) returns a reason.
pub fn run_limited(
    mut cmd: Command,
    limit: Duration,
    mut watch: impl FnMut() -> Option<String>,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out_p = dir.path().join("out");
    let err_p = dir.path().join("err");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&out_p).unwrap())
        .stderr(File::create(&err_p).unwrap())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return Run {
                code: None,
                stdout: vec![],
                stderr: String::new(),
                killed: Some(format!("could not start {cmd:?}: {e}")),
            };
        }
    };
    let start = Instant::now();
    let mut killed = None;
    let mut last_watch = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > limit {
            killed = Some(format!(
                "stopped after {} s (the test's limit for one command)",
                limit.as_secs()
            ));
        } else if last_watch.elapsed() > Duration::from_millis(200) {
            last_watch = Instant::now();
            killed = watch();
        }
        if killed.is_some() {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.and_then(|s| s.code()),
        stdout: fs::read(&out_p).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&fs::read(&err_p).unwrap_or_default()).into_owned(),
        killed,
    }
}

/// `storefs --store STORE ARGS…` with a time limit.
pub fn storefs(store: &Path, args: &[&OsStr], limit: Duration) -> Run {
    storefs_watch(store, args, limit, || None)
}

pub fn storefs_watch(
    store: &Path,
    args: &[&OsStr],
    limit: Duration,
    watch: impl FnMut() -> Option<String>,
) -> Run {
    let mut cmd = Command::new(bin());
    cmd.arg("--store")
        .arg(store)
        .args(args)
        .env_remove("STOREFS_STORE");
    run_limited(cmd, limit, watch)
}

/// A shell command (bash -c), with a time limit.
pub fn sh(script: &str, limit: Duration) -> Run {
    let mut cmd = Command::new("bash");
    cmd.arg("-o").arg("pipefail").arg("-c").arg(script);
    run_limited(cmd, limit, || None)
}

/// Quote a path for bash.
pub fn q(p: &Path) -> String {
    let b = p.as_os_str().as_bytes();
    let mut s = String::from("$'");
    for &c in b {
        if c.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&c) {
            s.push(c as char);
        } else {
            s.push_str(&format!("\\x{c:02x}"));
        }
    }
    s.push('\'');
    s
}

/// A live storefs mount, unmounted (by the same binary, else `umount -l`) on drop.
pub struct Mount {
    store: PathBuf,
    pub path: PathBuf,
    live: bool,
}

impl Mount {
    /// `storefs mount TARGET MOUNTPOINT`; Err(one line) when it fails.
    pub fn new(store: &Path, target: &str, mountpoint: &Path) -> Result<Mount, String> {
        fs::create_dir_all(mountpoint).unwrap();
        let r = storefs(
            store,
            &[
                OsStr::new("mount"),
                OsStr::new(target),
                mountpoint.as_os_str(),
            ],
            Duration::from_secs(60),
        );
        // Guard first: even a failed or stopped mount command may have left a mount.
        let m = Mount {
            store: store.to_path_buf(),
            path: mountpoint.to_path_buf(),
            live: true,
        };
        if !r.ok() {
            return Err(format!("mount: {}", r.why()));
        }
        Ok(m)
    }

    /// Unmount now; Err(one line) when `storefs umount` fails (the guard still cleans up).
    pub fn unmount(mut self) -> Result<(), String> {
        let r = storefs(
            &self.store,
            &[OsStr::new("umount"), self.path.as_os_str()],
            Duration::from_secs(120),
        );
        if r.ok() {
            self.live = false;
            Ok(())
        } else {
            Err(format!("umount: {}", r.why()))
        }
    }
}

fn is_mounted(p: &Path) -> bool {
    let mounts = fs::read("/proc/self/mounts").unwrap_or_default();
    let want = p.as_os_str().as_bytes();
    mounts.split(|&b| b == b'\n').any(|l| {
        l.split(|&b| b == b' ')
            .nth(1)
            .is_some_and(|m| m == want || unescape_mount(m) == want)
    })
}

fn unescape_mount(m: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < m.len() {
        if m[i] == b'\\'
            && i + 3 < m.len()
            && let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&m[i + 1..i + 4]).unwrap_or("x"), 8)
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(m[i]);
        i += 1;
    }
    out
}

impl Drop for Mount {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        let _ = storefs(
            &self.store,
            &[OsStr::new("umount"), self.path.as_os_str()],
            Duration::from_secs(60),
        );
        if is_mounted(&self.path) {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// A checkpoint record's `root` (the root tree id), read from STORE/checkpoints/ID.json.
pub fn root_tree(store: &Path, id: &str) -> Result<String, String> {
    let p = store.join("checkpoints").join(format!("{id}.json"));
    let text = fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    v["root"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no root", p.display()))
}

/// Files in STORE/DIR (none when DIR is missing).
pub fn entries_in(store: &Path, dir: &str) -> Vec<String> {
    match fs::read_dir(store.join(dir)) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    }
}

/// A path for messages: non-printable and non-UTF-8 bytes escaped.
pub fn show(p: &Path) -> String {
    let b = p.as_os_str().as_bytes();
    if b.is_empty() {
        return ".".into();
    }
    let mut s = String::new();
    for c in b.escape_ascii() {
        s.push(c as char);
    }
    s
}

fn show_bytes(b: &[u8]) -> String {
    clip(&b.escape_ascii().to_string(), 60)
}

/// What a tool sees of one node.
#[derive(Clone, Debug)]
pub struct Node {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, i64),
    pub size: u64,
    pub rdev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub blocks: u64,
    pub target: Option<Vec<u8>>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

fn kind_of(ft: &fs::FileType) -> &'static str {
    if ft.is_dir() {
        "dir"
    } else if ft.is_file() {
        "file"
    } else if ft.is_symlink() {
        "symlink"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_char_device() {
        "chardev"
    } else if ft.is_block_device() {
        "blockdev"
    } else if ft.is_socket() {
        "socket"
    } else {
        "unknown"
    }
}

/// All xattrs of a path (not following symlinks), sorted; an error as one entry.
pub fn xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 1 << 16];
    // SAFETY: buffers are valid for their lengths.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTSUP) {
            return vec![];
        }
        return vec![(b"<llistxattr error>".to_vec(), e.to_string().into_bytes())];
    }
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        let cn = CString::new(name).unwrap();
        let mut val = vec![0u8; 1 << 16];
        // SAFETY: valid C strings and buffer.
        let m =
            unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
        if m < 0 {
            let e = std::io::Error::last_os_error();
            out.push((name.to_vec(), format!("<error {e}>").into_bytes()));
            continue;
        }
        val.truncate(m as usize);
        out.push((name.to_vec(), val));
    }
    out.sort();
    out
}

/// Every node under `root` (relative paths; the root itself is ""), not following symlinks.
pub fn scan(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let p = root.join(&rel);
        let md = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(_) => continue,
        };
        let kind = kind_of(&md.file_type());
        if kind == "dir"
            && let Ok(rd) = fs::read_dir(&p)
        {
            for e in rd.flatten() {
                stack.push(rel.join(e.file_name()));
            }
        }
        let target = if kind == "symlink" {
            fs::read_link(&p)
                .ok()
                .map(|t| t.into_os_string().into_vec())
        } else {
            None
        };
        out.insert(
            rel,
            Node {
                kind,
                mode: md.mode(),
                uid: md.uid(),
                gid: md.gid(),
                mtime: (md.mtime(), md.mtime_nsec()),
                size: md.size(),
                rdev: md.rdev(),
                ino: md.ino(),
                nlink: md.nlink(),
                blocks: md.blocks(),
                target,
                xattrs: xattrs(&p),
            },
        );
    }
    out
}

/// Data regions of a file by lseek(SEEK_DATA/SEEK_HOLE): [(start, end)].
pub fn data_map(path: &Path) -> Result<Vec<(u64, u64)>, String> {
    let f = File::open(path).map_err(|e| format!("open: {e}"))?;
    let size = f.metadata().map_err(|e| e.to_string())?.len() as i64;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos: i64 = 0;
    while pos < size {
        // SAFETY: fd is open for the whole loop.
        let d = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if d < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                break;
            }
            return Err(format!("SEEK_DATA at {pos}: {e}"));
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        if h < 0 {
            return Err(format!(
                "SEEK_HOLE at {d}: {}",
                std::io::Error::last_os_error()
            ));
        }
        if h <= d {
            return Err(format!("SEEK_HOLE at {d} returned {h}"));
        }
        out.push((d as u64, h as u64));
        pos = h;
    }
    Ok(out)
}

fn holes_of(map: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut holes = Vec::new();
    let mut pos = 0;
    for &(s, e) in map {
        if s > pos {
            holes.push((pos, s));
        }
        pos = e;
    }
    if pos < size {
        holes.push((pos, size));
    }
    holes
}

fn show_map(map: &[(u64, u64)]) -> String {
    let parts: Vec<String> = map
        .iter()
        .take(4)
        .map(|(s, e)| format!("{s}..{e}"))
        .collect();
    let more = if map.len() > 4 {
        format!(" +{}", map.len() - 4)
    } else {
        String::new()
    };
    format!("data [{}{more}]", parts.join(","))
}

/// Compare the bytes of two regular files and their holes: every hole of `a` (the
/// native one) must be a hole in `b` too (a copy may be sparser, never denser).
/// Reads only `a`'s data regions (and `b`'s extra data when small), so huge sparse
/// files stay cheap.
pub fn compare_file(a: &Path, b: &Path, size: u64, check_holes: bool) -> Vec<String> {
    let mut diffs = Vec::new();
    let amap = match data_map(a) {
        Ok(m) => m,
        Err(e) => return vec![format!("native map: {e}")],
    };
    let bmap = match data_map(b) {
        Ok(m) => m,
        Err(e) => return vec![format!("lseek: {e}")],
    };
    let (fa, fb) = match (File::open(a), File::open(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (_, Err(e)) => return vec![format!("open: {e}")],
        (Err(e), _) => return vec![format!("open native: {e}")],
    };
    // Bytes: native data regions must match; b's bytes in native holes must be zeros.
    let mut buf_a = vec![0u8; 1 << 20];
    let mut buf_b = vec![0u8; 1 << 20];
    let mut first_diff = None;
    'outer: for &(s, e) in &amap {
        let mut off = s;
        while off < e {
            let n = ((e - off) as usize).min(buf_a.len());
            let ra = fa.read_exact_at(&mut buf_a[..n], off);
            let rb = fb.read_exact_at(&mut buf_b[..n], off);
            if let Err(err) = rb {
                diffs.push(format!("read at {off}: {err}"));
                break 'outer;
            }
            if ra.is_err() {
                break 'outer;
            }
            if buf_a[..n] != buf_b[..n] {
                let i = (0..n).find(|&i| buf_a[i] != buf_b[i]).unwrap();
                first_diff = Some(off + i as u64);
                break 'outer;
            }
            off += n as u64;
        }
    }
    if let Some(o) = first_diff {
        diffs.push(format!("bytes differ at offset {o}"));
    }
    let holes = holes_of(&amap, size);
    // b's data inside a's holes: zeros required (checked when it is not huge).
    let mut extra = 0u64;
    let mut dense = Vec::new();
    for &(hs, he) in &holes {
        for &(ds, de) in &bmap {
            let s = ds.max(hs);
            let e = de.min(he);
            if s < e {
                extra += e - s;
                dense.push((s, e));
            }
        }
    }
    if extra > 0 && extra <= (16 << 20) && first_diff.is_none() {
        'z: for &(s, e) in &dense {
            let mut off = s;
            while off < e {
                let n = ((e - off) as usize).min(buf_b.len());
                if fb.read_exact_at(&mut buf_b[..n], off).is_err() {
                    diffs.push(format!("read at {off} failed"));
                    break 'z;
                }
                if let Some(i) = buf_b[..n].iter().position(|&c| c != 0) {
                    diffs.push(format!(
                        "bytes differ at offset {} (native hole)",
                        off + i as u64
                    ));
                    break 'z;
                }
                off += n as u64;
            }
        }
    }
    if check_holes && extra > 0 {
        diffs.push(format!(
            "not sparse: {extra} bytes of native holes are data (native {}, copy {})",
            show_map(&amap),
            show_map(&bmap)
        ));
    }
    diffs
}

/// What to compare.
pub struct Opts {
    /// Compare mtimes only of these paths (None: all).
    pub listed: Option<BTreeSet<PathBuf>>,
    /// Compare the root directory's own metadata.
    pub root_meta: bool,
    /// Skip mtimes of native nodes at or after this time (seconds): GNU tar left the
    /// extraction time there (e.g. a directory listed before entries extracted into it
    /// later), which is not the archive's mtime and no copy can match.
    pub fresh_after: Option<i64>,
    /// Compare the sparse maps (every native hole stays a hole).
    pub holes: bool,
    /// Compare st_blocks of regular files and symlinks exactly.
    pub blocks: bool,
}

fn xattr_names(x: &[(Vec<u8>, Vec<u8>)]) -> String {
    let v: Vec<String> = x
        .iter()
        .map(|(n, v)| format!("{}={}", show_bytes(n), show_bytes(v)))
        .collect();
    format!("{{{}}}", clip(&v.join(", "), 200))
}

/// Hardlink groups (sets of paths sharing an inode, nlink > 1) of non-directories.
fn link_groups(t: &BTreeMap<PathBuf, Node>) -> BTreeSet<Vec<PathBuf>> {
    let mut by: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    for (p, n) in t {
        if n.kind != "dir" {
            by.entry(n.ino).or_default().push(p.clone());
        }
    }
    by.into_values()
        .filter(|v| v.len() > 1)
        .map(|mut v| {
            v.sort();
            v
        })
        .collect()
}

/// Every difference between the native tree `a` and the copy `b`, one string each.
pub fn compare_trees(a: &Path, b: &Path, opts: &Opts) -> Vec<String> {
    let ta = scan(a);
    let tb = scan(b);
    let mut d = Vec::new();
    for p in ta.keys() {
        if !tb.contains_key(p) {
            d.push(format!("{}: missing", show(p)));
        }
    }
    for p in tb.keys() {
        if !ta.contains_key(p) {
            d.push(format!("{}: unexpected {}", show(p), tb[p].kind));
        }
    }
    for (p, na) in &ta {
        let Some(nb) = tb.get(p) else { continue };
        let name = show(p);
        let is_root = p.as_os_str().is_empty();
        if na.kind != nb.kind {
            d.push(format!("{name}: {} became {}", na.kind, nb.kind));
            continue;
        }
        if is_root && !opts.root_meta {
            if na.xattrs != nb.xattrs {
                d.push(format!(
                    "{name}: xattrs {} vs {}",
                    xattr_names(&na.xattrs),
                    xattr_names(&nb.xattrs)
                ));
            }
            continue;
        }
        if na.mode != nb.mode {
            d.push(format!("{name}: mode {:o} vs {:o}", na.mode, nb.mode));
        }
        if (na.uid, na.gid) != (nb.uid, nb.gid) {
            d.push(format!(
                "{name}: owner {}:{} vs {}:{}",
                na.uid, na.gid, nb.uid, nb.gid
            ));
        }
        let listed = opts.listed.as_ref().is_none_or(|l| l.contains(p))
            && opts.fresh_after.is_none_or(|t| na.mtime.0 < t);
        if listed && na.mtime != nb.mtime {
            d.push(format!(
                "{name}: mtime {}.{:09} vs {}.{:09}",
                na.mtime.0, na.mtime.1, nb.mtime.0, nb.mtime.1
            ));
        }
        if na.xattrs != nb.xattrs {
            d.push(format!(
                "{name}: xattrs {} vs {}",
                xattr_names(&na.xattrs),
                xattr_names(&nb.xattrs)
            ));
        }
        match na.kind {
            "file" => {
                if na.size != nb.size {
                    d.push(format!("{name}: size {} vs {}", na.size, nb.size));
                } else {
                    for x in compare_file(&a.join(p), &b.join(p), na.size, opts.holes) {
                        d.push(format!("{name}: {x}"));
                    }
                }
                if opts.blocks && na.blocks != nb.blocks {
                    d.push(format!("{name}: st_blocks {} vs {}", na.blocks, nb.blocks));
                }
            }
            "symlink" => {
                if na.target != nb.target {
                    d.push(format!(
                        "{name}: target {} vs {}",
                        show_bytes(na.target.as_deref().unwrap_or(b"")),
                        show_bytes(nb.target.as_deref().unwrap_or(b""))
                    ));
                }
                if na.size != nb.size {
                    d.push(format!("{name}: size {} vs {}", na.size, nb.size));
                }
                if opts.blocks && na.blocks != nb.blocks {
                    d.push(format!("{name}: st_blocks {} vs {}", na.blocks, nb.blocks));
                }
            }
            "chardev" | "blockdev" if na.rdev != nb.rdev => {
                d.push(format!("{name}: rdev {:x} vs {:x}", na.rdev, nb.rdev));
            }
            _ => {}
        }
    }
    let ga = link_groups(&ta);
    let gb = link_groups(&tb);
    if ga != gb {
        let fmt = |g: &BTreeSet<Vec<PathBuf>>| {
            let v: Vec<String> = g
                .iter()
                .map(|grp| {
                    let names: Vec<String> = grp.iter().map(|p| show(p)).collect();
                    format!("[{}]", names.join(" "))
                })
                .collect();
            clip(&v.join(" "), 200)
        };
        d.push(format!("hardlinks {} vs {}", fmt(&ga), fmt(&gb)));
    }
    d
}

/// Allocated bytes under a path (sum of st_blocks * 512), not following symlinks.
pub fn allocated(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(md) = fs::symlink_metadata(&p) else {
            continue;
        };
        total += md.blocks() * 512;
        if md.is_dir()
            && let Ok(rd) = fs::read_dir(&p)
        {
            stack.extend(rd.flatten().map(|e| e.path()));
        }
    }
    total
}

/// Sort a list of names and make it a set of normalized relative paths.
pub fn os(s: &[u8]) -> OsString {
    OsString::from_vec(s.to_vec())
}

/// Read a whole file (for small ones).
pub fn read_all(p: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    if let Ok(mut f) = File::open(p) {
        let _ = f.read_to_end(&mut v);
    }
    v
}

/// Summarize a difference list for a one-line report.
pub fn summary(d: &[String], max: usize) -> String {
    let mut s: Vec<String> = d.iter().take(max).cloned().collect();
    if d.len() > max {
        s.push(format!("(+{} more)", d.len() - max));
    }
    s.join("; ")
}
