//! Memory and depth stay bounded whatever the input (issue 38, "Medium 6"
//! and "Medium 7"): a control-socket client that sends nothing or one
//! endless line, a remote pack index entry past its pack's end, an
//! oversized checkpoint record (local and on a remote), a remote ref,
//! loose object or tree pack larger than it may be, a tar with a
//! sparse map of many 1-byte segments, a git blob over the cap, and trees
//! 6,000 directories deep through snapshot, restore, diff, verify, gc and
//! import-git. Peak memory is measured (`VmHWM`, or `getrusage` of a
//! child), never time. Needs root and /dev/fuse for the mounts.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Env, RemoteKind, chunk_of, env_with_remote, pack_of, stderr};

const MIB: u64 = 1 << 20;

/// `storefs --store STORE ARGS` run as a child; its exit status, stdout,
/// stderr and peak RSS (bytes, from `wait4`'s rusage), killed (and the test
/// failed) if it runs longer than `limit`.
#[allow(clippy::zombie_processes)] // reaped by wait4 below
fn run_measured(
    store: &Path,
    args: &[&OsStr],
    limit: Duration,
) -> (ExitStatus, String, String, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    // GNU time measures the child it forks itself: a child forked from
    // this (large, many-threaded) test process would count its pages too.
    let timed = Path::new("/usr/bin/time").exists();
    let rss = dir.path().join("rss");
    let mut cmd = if timed {
        let mut c = Command::new("/usr/bin/time");
        c.args(["-f", "%M", "-o"])
            .arg(&rss)
            .arg(env!("CARGO_BIN_EXE_storefs"));
        c
    } else {
        eprintln!("no /usr/bin/time: peak RSS from wait4 (it counts this process's pages too)");
        Command::new(env!("CARGO_BIN_EXE_storefs"))
    };
    let child = cmd
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("STOREFS_STORE")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + limit;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child, with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reaps our own child, with valid out-pointers.
            unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
            panic!("storefs {args:?} still ran after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (
        ExitStatus::from_raw(status),
        fs::read_to_string(out).unwrap(),
        fs::read_to_string(err).unwrap(),
        if timed {
            let kib = fs::read_to_string(&rss).unwrap();
            let kib = kib
                .lines()
                .last()
                .unwrap_or("0")
                .trim()
                .parse::<u64>()
                .unwrap();
            kib * 1024
        } else {
            usage.ru_maxrss as u64 * 1024
        },
    )
}

/// A field of `/proc/PID/status` (`VmRSS`, `VmHWM`) in bytes.
fn proc_bytes(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let kib: u64 = line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// The pid of the daemon serving `target`.
fn daemon_pid(env: &Env, target: &str) -> u32 {
    let list: Vec<serde_json::Value> = serde_json::from_str(&env.ok(["status", "--json"])).unwrap();
    list.iter()
        .find(|m| m["target"] == target)
        .and_then(|m| m["pid"].as_u64())
        .unwrap_or_else(|| panic!("{target} is not mounted")) as u32
}

fn snapshot(env: &Env, dir: &Path, name: &str) {
    env.ok([
        "snapshot".as_ref(),
        dir.as_os_str(),
        "--ref".as_ref(),
        name.as_ref(),
    ]);
}

// ------------------------------------------------------------ control socket

/// A client that connects and sends nothing does not hold up a commit; a
/// 10 MiB line is refused with one error line, and the daemon does not
/// grow by it.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn the_control_socket_serves_past_a_silent_client_and_refuses_an_endless_line() {
    let env = Env::new();
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), b"a\n").unwrap();
    snapshot(&env, &src, "base");
    env.ok(["fork", "base", "--name", "f"]);
    let mnt = env.path("mnt");
    let m = env.mount("f", Some(&mnt));
    let sock = fs::read_dir(env.store.join("mounts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension() == Some(OsStr::new("sock")))
        .expect("the daemon's control socket");

    // Connected, silent, kept open across the commit.
    let silent = UnixStream::connect(&sock).unwrap();
    fs::write(mnt.join("b"), b"b\n").unwrap();
    let (status, out, err, _) = run_measured(
        &env.store,
        &[
            "commit".as_ref(),
            "f".as_ref(),
            "-m".as_ref(),
            "past a silent client".as_ref(),
        ],
        Duration::from_secs(120),
    );
    assert!(status.success(), "commit failed: {err}");
    assert_eq!(env.ok(["cat", out.trim(), "b"]), "b\n");

    // The silent client is answered with an error and hung up on.
    let mut answer = String::new();
    silent
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    BufReader::new(&silent).read_line(&mut answer).unwrap();
    assert!(answer.contains("no complete request line"), "{answer}");

    // One endless line: refused, and the daemon holds no copy of it.
    let pid = daemon_pid(&env, "f");
    let before = proc_bytes(pid, "VmRSS:");
    let mut client = UnixStream::connect(&sock).unwrap();
    let reader = client.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let line = vec![b'x'; 10 << 20];
        // The daemon hangs up part way: the rest fails to send.
        let _ = client.write_all(&line);
        let _ = client.write_all(b"\n");
    });
    let mut answer = String::new();
    reader
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    BufReader::new(&reader).read_line(&mut answer).unwrap();
    writer.join().unwrap();
    assert!(answer.contains("longer than 64 KiB"), "{answer}");
    let after = proc_bytes(pid, "VmRSS:");
    assert!(
        after < before + 32 * MIB,
        "the daemon grew from {before} to {after} bytes reading one line"
    );
    // Still serving requests.
    let (status, _, err, _) = run_measured(
        &env.store,
        &[
            "commit".as_ref(),
            "f".as_ref(),
            "-m".as_ref(),
            "again".as_ref(),
        ],
        Duration::from_secs(120),
    );
    assert!(status.success(), "commit failed: {err}");
    m.unmount();
}

// ------------------------------------------------------------- pack indexes

/// A remote pack index entry claiming 256 MiB of a small pack: a lazy
/// mount's read of that file gets EIO (the entry is left out, with a
/// warning) and the daemon never allocates the claimed length.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_remote_index_entry_past_its_pack_is_eio_without_the_allocation() {
    let (env, url, remote) = env_with_remote(RemoteKind::File, "bounds");
    let a = env.path("a");
    let origin = env.path("srv/tree");
    fs::create_dir_all(&origin).unwrap();
    for i in 0..20u64 {
        fs::write(
            origin.join(format!("f{i:02}")),
            common::pseudo_random(3000, i + 1),
        )
        .unwrap();
    }
    let run_a = |args: &[&str]| env.output_ok_in(&a, args);
    run_a(&["snapshot", origin.to_str().unwrap(), "--ref", "s1"]);
    run_a(&["remote", "add", "team", &url]);
    run_a(&["push", "team", "s1"]);
    let moved = env.path("moved");
    fs::rename(&origin, &moved).unwrap();
    env.output_ok_in(&env.store, &["remote", "add", "team", &url]);

    let victim = chunk_of(&a, "s1", "f07");
    let (stem, mut entries) = pack_of(&remote, &victim);
    for e in entries.iter_mut().filter(|e| e.id == victim) {
        e.len = 256 << 20;
    }
    remote
        .put_bytes(
            &format!("packs/{stem}.idx"),
            &storefs::store::encode_index(&mut entries),
        )
        .unwrap();

    let m = env.mount("team:s1", None);
    let pid = daemon_pid(&env, "team:s1");
    let err = fs::read(origin.join("f07")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(
        fs::read(origin.join("f06")).unwrap(),
        fs::read(moved.join("f06")).unwrap()
    );
    let peak = proc_bytes(pid, "VmHWM:");
    assert!(
        peak < 192 * MIB,
        "the lazy daemon peaked at {peak} bytes: it allocated what the entry claims"
    );
    m.unmount();
    let mut log = String::new();
    for e in fs::read_dir(env.store.join("logs")).unwrap() {
        log.push_str(&fs::read_to_string(e.unwrap().path()).unwrap());
    }
    let mount_err = log
        .lines()
        .any(|l| l.contains("WARN") && l.contains(&victim.to_hex()));
    assert!(mount_err, "no warning naming {victim}:\n{log}");
}

// ---------------------------------------------------------------- records

/// A checkpoint record of `size` bytes (a valid one: its message pads it)
/// and its id.
fn huge_record(size: usize) -> (String, Vec<u8>) {
    let head = "{\n  \"version\": 1,\n  \"root\": \"".to_string()
        + &"0".repeat(64)
        + "\",\n  \"parents\": [],\n  \"time_ns\": 0,\n  \"source\": {\"kind\": \"snapshot\"},\n  \"message\": \"";
    let tail = "\"\n}\n";
    let mut bytes = head.into_bytes();
    bytes.resize(size - tail.len(), b'm');
    bytes.extend_from_slice(tail.as_bytes());
    let id = storefs::store::ObjectId::of(&bytes).to_hex();
    (id, bytes)
}

/// A 100 MiB record in the store is refused by its size, unread, with one
/// line naming the cap; one on a remote is refused by pull, undownloaded.
#[test]
fn an_oversized_checkpoint_record_is_refused_unread() {
    let (env, url, remote) = env_with_remote(RemoteKind::File, "records");
    let (id, bytes) = huge_record(100 << 20);
    env.ok(["init"]);
    let path = env.store.join("checkpoints").join(format!("{id}.json"));
    fs::write(&path, &bytes).unwrap();
    let (status, _, err, peak) = run_measured(
        &env.store,
        &["log".as_ref(), id.as_ref()],
        Duration::from_secs(120),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("over the 4 MiB"), "{err}");
    // verify quarantines objects, not records: the fix named is removal.
    assert!(!err.contains("verify") && err.contains("remove"), "{err}");
    assert!(
        peak < 64 * MIB,
        "log peaked at {peak} bytes: it read the record"
    );
    fs::remove_file(&path).unwrap();

    remote
        .put_bytes(&format!("checkpoints/{id}.json"), &bytes)
        .unwrap();
    remote.put_bytes("refs/big", id.as_bytes()).unwrap();
    env.ok(["remote", "add", "team", &url]);
    let (status, _, err, peak) = run_measured(
        &env.store,
        &["pull".as_ref(), "team".as_ref(), "big".as_ref()],
        Duration::from_secs(120),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("over the 4 MiB"), "{err}");
    assert!(
        peak < 64 * MIB,
        "pull peaked at {peak} bytes: it downloaded the record"
    );
    assert!(!path.exists(), "nothing published");
}

// ------------------------------------------------------------ remote reads

/// The directory a `file://` remote URL names.
fn remote_dir(url: &str) -> std::path::PathBuf {
    Path::new(url.strip_prefix("file://").expect("a file:// remote")).to_path_buf()
}

/// A file of `len` bytes at `path`, all a hole (no disk, no time).
fn sparse_file(path: &Path, len: u64) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// What a remote holds is read up to a cap, whatever it lists or sends: a
/// ref of 64 MiB, and a loose object of 2 GiB (a checkpoint's root tree
/// in no pack) are refused unread, by pull, in one line naming the cap.
#[test]
fn a_remote_ref_or_loose_object_past_its_cap_is_refused_unread() {
    let (env, url, _remote) = env_with_remote(RemoteKind::File, "caps");
    let dir = remote_dir(&url);
    env.ok(["init"]);
    env.ok(["remote", "add", "team", &url]);

    sparse_file(&dir.join("refs/big"), 64 * MIB);
    let (status, _, err, peak) = run_measured(
        &env.store,
        &["pull".as_ref(), "team".as_ref(), "big".as_ref()],
        Duration::from_secs(120),
    );
    // Shortened: a regression puts the whole file in the message.
    let err: String = err.chars().take(600).collect();
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("refs/big") && err.contains("a ref may have"),
        "{err}"
    );
    assert!(
        peak < 48 * MIB,
        "pull peaked at {peak} bytes: it read the ref"
    );

    // A record whose root tree is nowhere but a 2 GiB `objects/<root>`.
    let root = storefs::store::ObjectId::of(b"no such tree").to_hex();
    let record = format!(
        "{{\n  \"version\": 1,\n  \"root\": \"{root}\",\n  \"parents\": [],\n  \"time_ns\": 0,\n  \"source\": {{\"kind\": \"snapshot\"}},\n  \"message\": \"loose\"\n}}\n"
    );
    let id = storefs::store::ObjectId::of(record.as_bytes()).to_hex();
    fs::create_dir_all(dir.join("checkpoints")).unwrap();
    fs::write(dir.join(format!("checkpoints/{id}.json")), &record).unwrap();
    fs::write(dir.join("refs/loose"), format!("{id}\n")).unwrap();
    sparse_file(&dir.join(format!("objects/{root}")), 2 << 30);
    let (status, _, err, peak) = run_measured(
        &env.store,
        &["pull".as_ref(), "team".as_ref(), "loose".as_ref()],
        Duration::from_secs(120),
    );
    // Shortened: a regression puts the whole file in the message.
    let err: String = err.chars().take(600).collect();
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("objects/{root}")) && err.contains("a stored object may have"),
        "{err}"
    );
    assert!(
        peak < 128 * MIB,
        "pull peaked at {peak} bytes: it read the object"
    );
}

/// A remote whose one tree pack has a 2 GiB hole after its records, with
/// (`claimed`) or without an index entry at the hole's end; then a pull of
/// it into a fresh store: its exit status, stderr (shortened) and peak RSS.
fn pull_of_a_padded_tree_pack(claimed: bool) -> (ExitStatus, String, u64, Env) {
    let (env, url, remote) = env_with_remote(RemoteKind::File, "treepack");
    let a = env.path("a");
    let origin = env.path("srv/tree");
    for d in 0..30u64 {
        let sub = origin.join(format!("d{d:02}"));
        fs::create_dir_all(&sub).unwrap();
        fs::write(sub.join("f"), common::pseudo_random(100, d + 1)).unwrap();
    }
    env.output_ok_in(&a, &["snapshot", origin.to_str().unwrap(), "--ref", "s1"]);
    env.output_ok_in(&a, &["remote", "add", "team", &url]);
    env.output_ok_in(&a, &["push", "team", "s1"]);
    let packs = remote.list_packs().unwrap();
    let (stem, entries) = packs
        .iter()
        .find(|(stem, _)| stem.starts_with("t-"))
        .expect("a tree pack");
    let pack = remote_dir(&url).join(format!("packs/{stem}.pack"));
    let len = fs::metadata(&pack).unwrap().len() + (2 << 30);
    fs::OpenOptions::new()
        .write(true)
        .open(&pack)
        .unwrap()
        .set_len(len)
        .unwrap();
    if claimed {
        // An entry for an object nobody needs, in the hole's last bytes:
        // the index now says the pack is 2 GiB long.
        let mut entries = entries.clone();
        let mut last = entries[0];
        last.id = storefs::store::ObjectId::of(b"unneeded");
        last.offset = len - 64;
        last.len = 64;
        entries.push(last);
        remote
            .put_bytes(
                &format!("packs/{stem}.idx"),
                &storefs::store::encode_index(&mut entries),
            )
            .unwrap();
    }
    env.output_ok_in(&env.store, &["remote", "add", "team", &url]);
    let (status, _, err, peak) = run_measured(
        &env.store,
        &["pull".as_ref(), "team".as_ref(), "s1".as_ref()],
        Duration::from_secs(300),
    );
    (status, err.chars().take(600).collect(), peak, env)
}

/// A tree pack on a remote is read no further than its index's last
/// record, whatever the file holds past it: padded with a 2 GiB hole, the
/// pull works and stays small.
#[test]
fn a_tree_pack_longer_than_its_records_is_read_only_as_far_as_they_go() {
    let (status, err, peak, env) = pull_of_a_padded_tree_pack(false);
    assert!(status.success(), "{err}");
    assert!(
        peak < 192 * MIB,
        "pull peaked at {peak} bytes: it read the padding"
    );
    env.ok(["verify"]);
}

/// A tree pack over 32 MiB (its index says 2 GiB) is not read whole: its
/// trees are read a range each, and the pull stays small.
#[test]
fn a_tree_pack_over_the_cap_is_read_a_tree_at_a_time() {
    let (status, err, peak, env) = pull_of_a_padded_tree_pack(true);
    assert!(status.success(), "{err}");
    assert!(
        peak < 192 * MIB,
        "pull peaked at {peak} bytes: it read the pack whole"
    );
    env.ok(["verify"]);
}

// ------------------------------------------------------------ sparse maps

/// A tar block of a header for `name` of `typeflag` and `size`.
fn tar_header(name: &[u8], typeflag: u8, size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

fn pad_to_block(v: &mut Vec<u8>) {
    v.resize(v.len().div_ceil(512) * 512, 0);
}

/// One PAX record, its length counting itself.
fn pax_record(key: &str, value: &str) -> String {
    let body = format!(" {key}={value}\n");
    let mut n = body.len() + 1;
    while format!("{n}{body}").len() != n {
        n += 1;
    }
    format!("{n}{body}")
}

/// A tar holding `dir/` and one GNU sparse 1.0 file of `segments` 1-byte
/// data segments, each followed by a 1-byte hole.
fn sparse_tar(segments: u64) -> Vec<u8> {
    let mut tar = Vec::new();
    tar.extend_from_slice(&tar_header(b"dir/", b'5', 0));
    let mut map = format!("{segments}\n");
    for i in 0..segments {
        map.push_str(&format!("{}\n1\n", 2 * i));
    }
    let mut data = map.into_bytes();
    pad_to_block(&mut data);
    data.extend((0..segments).map(|i| b'a' + (i % 26) as u8));
    let stored = data.len() as u64;
    pad_to_block(&mut data);
    let pax = pax_record("GNU.sparse.major", "1")
        + &pax_record("GNU.sparse.minor", "0")
        + &pax_record("GNU.sparse.name", "dir/sparse")
        + &pax_record("GNU.sparse.realsize", &(2 * segments).to_string());
    tar.extend_from_slice(&tar_header(
        b"dir/PaxHeaders/sparse",
        b'x',
        pax.len() as u64,
    ));
    let mut pax = pax.into_bytes();
    pad_to_block(&mut pax);
    tar.extend_from_slice(&pax);
    tar.extend_from_slice(&tar_header(b"dir/GNUSparseFile.0/sparse", b'0', stored));
    tar.extend_from_slice(&data);
    tar.extend_from_slice(&[0u8; 1024]);
    tar
}

/// A sparse map of 50,000 1-byte segments imports in bounded memory (it
/// took kilobytes per segment: a reply channel each) and restores exactly.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_sparse_map_of_many_tiny_segments_imports_in_bounded_memory() {
    let env = Env::new();
    env.ok(["init"]);
    let segments = 50_000u64;
    let tar = env.path("sparse.tar");
    fs::write(&tar, sparse_tar(segments)).unwrap();
    let (status, _, err, peak) = run_measured(
        &env.store,
        &[
            "import".as_ref(),
            tar.as_os_str(),
            "--origin".as_ref(),
            "/srv/sparse".as_ref(),
            "--ref".as_ref(),
            "sp".as_ref(),
            "--threads".as_ref(),
            "2".as_ref(),
        ],
        Duration::from_secs(600),
    );
    assert!(status.success(), "import failed: {err}");
    assert!(
        peak < 160 * MIB,
        "import peaked at {peak} bytes for {segments} segments"
    );
    let out = env.path("out");
    env.ok(["restore".as_ref(), "sp".as_ref(), out.as_os_str()]);
    let mut got = Vec::new();
    fs::File::open(out.join("sparse"))
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    // As GNU tar: the file ends with its last segment (no trailing hole).
    assert_eq!(got.len() as u64, 2 * segments - 1);
    for (i, pair) in got.chunks(2).enumerate() {
        assert_eq!(
            pair,
            &[b'a' + (i % 26) as u8, 0][..pair.len()],
            "byte pair {i}"
        );
    }
}

// ------------------------------------------------------------------ depth

/// `depth` nested directories `d/d/…` under `root`, made one relative
/// `mkdirat` at a time (the path is far past PATH_MAX), with a file at the
/// bottom; the descriptor of the bottom directory's parent chain is not
/// kept.
fn deep_tree(root: &Path, depth: usize, bottom: &[u8]) {
    fs::create_dir_all(root).unwrap();
    let c = std::ffi::CString::new(root.as_os_str().as_bytes()).unwrap();
    // SAFETY: plain syscalls on descriptors this function owns.
    unsafe {
        let mut fd = libc::open(c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
        assert!(fd >= 0);
        let d = c"d";
        for _ in 0..depth {
            assert_eq!(libc::mkdirat(fd, d.as_ptr(), 0o755), 0);
            let next = libc::openat(fd, d.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
            assert!(next >= 0, "{}", std::io::Error::last_os_error());
            libc::close(fd);
            fd = next;
        }
        let f = libc::openat(
            fd,
            c"bottom".as_ptr(),
            libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL,
            0o644,
        );
        assert!(f >= 0);
        assert_eq!(
            libc::write(f, bottom.as_ptr().cast(), bottom.len()),
            bottom.len() as isize
        );
        libc::close(f);
        libc::close(fd);
    }
}

/// The content of `bottom` under `depth` levels of `d` below `root`, read
/// one relative open at a time.
fn read_deep(root: &Path, depth: usize) -> Vec<u8> {
    let c = std::ffi::CString::new(root.as_os_str().as_bytes()).unwrap();
    // SAFETY: plain syscalls on descriptors this function owns.
    unsafe {
        let mut fd = libc::open(c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
        assert!(fd >= 0);
        for _ in 0..depth {
            let next = libc::openat(fd, c"d".as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY);
            assert!(next >= 0, "{}", std::io::Error::last_os_error());
            libc::close(fd);
            fd = next;
        }
        let f = libc::openat(fd, c"bottom".as_ptr(), libc::O_RDONLY);
        assert!(f >= 0);
        libc::close(fd);
        let mut out = Vec::new();
        // SAFETY: a descriptor just opened and owned by nobody else.
        std::fs::File::from_raw_fd(f).read_to_end(&mut out).unwrap();
        out
    }
}

/// Remove a tree too deep for `remove_dir_all`'s paths (it works by
/// descriptors, so any depth is fine).
fn remove(root: &Path) {
    let _ = fs::remove_dir_all(root);
}

const DEPTH: usize = 6000;

/// A tree 6,000 directories deep, built by a user inside a fork and
/// committed, is restored, diffed, gc'd and verified (with a bad object at
/// its bottom, so verify walks down to name it) without a crash. A
/// snapshot of such a tree on disk reads directories by path: refused
/// past PATH_MAX with one line, not a crash.
#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn a_tree_six_thousand_deep_survives_every_walk() {
    let env = Env::new();
    let native = env.path("native");
    deep_tree(&native, DEPTH, b"deep\n");
    let out = env.run(["snapshot".as_ref(), native.as_os_str()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("File name too long"), "{err}");
    remove(&native);

    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("top"), b"top\n").unwrap();
    snapshot(&env, &src, "base");
    env.ok(["fork", "base", "--name", "f"]);
    let mnt = env.path("mnt");
    let m = env.mount("f", Some(&mnt));
    deep_tree(&mnt, DEPTH, b"deep\n");
    let (status, id, err, _) = run_measured(
        &env.store,
        &[
            "commit".as_ref(),
            "f".as_ref(),
            "-m".as_ref(),
            "deep".as_ref(),
        ],
        Duration::from_secs(600),
    );
    assert!(status.success(), "commit: {err}");
    let id = id.trim().to_string();
    m.unmount();

    let out = env.path("out");
    env.ok(["restore".as_ref(), id.as_ref(), out.as_os_str()]);
    assert_eq!(read_deep(&out, DEPTH), b"deep\n");
    assert_eq!(fs::read(out.join("top")).unwrap(), b"top\n");
    remove(&out);

    let diff = env.ok(["diff", "base", &id]);
    assert!(
        diff.lines()
            .any(|l| l.ends_with("\td") || l.ends_with(" d")),
        "{diff}"
    );

    let gc = env.run(["gc"]);
    assert!(gc.status.success(), "gc: {}", stderr(&gc));
    let verify = env.run(["verify"]);
    assert!(verify.status.success(), "verify: {}", stderr(&verify));

    // A bad object at the bottom: verify walks down to name its path.
    let bottom = "d/".repeat(DEPTH) + "bottom";
    let bad = chunk_of(&env.store, &id, &bottom);
    let (pack, at, len) = storefs::store::Store::open(&env.store)
        .unwrap()
        .backend()
        .locate(&bad)
        .unwrap()
        .expect("the bottom file's object is stored");
    let f = fs::OpenOptions::new().write(true).open(&pack).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"\xff\xff\xff\xff", at + len / 2).unwrap();
    drop(f);
    let verify = env.run(["verify"]);
    assert!(!verify.status.success(), "verify passed a corrupt object");
    let said = String::from_utf8_lossy(&verify.stdout).into_owned() + &stderr(&verify);
    assert!(
        said.contains("/d/d/d/") && said.contains("bottom"),
        "{}",
        &said[..said.len().min(2000)]
    );
}

/// A git repository whose tree is 6,000 directories deep (built bottom-up
/// with `git mktree`) is imported and restored.
#[test]
fn a_git_tree_six_thousand_deep_imports() {
    let env = Env::new();
    let repo = env.path("repo");
    let git = |args: &[&str], input: Option<&str>| -> String {
        let mut child = Command::new("git")
            .current_dir(&repo)
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("git is installed");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.unwrap_or("").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    fs::create_dir_all(&repo).unwrap();
    git(&["init", "-q", "-b", "main"], None);
    let blob = git(&["hash-object", "-w", "--stdin"], Some("deep\n"));
    let mut tree = git(&["mktree"], Some(&format!("100644 blob {blob}\tbottom\n")));
    for _ in 0..DEPTH {
        tree = git(&["mktree"], Some(&format!("040000 tree {tree}\td\n")));
    }
    let commit = git(&["commit-tree", &tree, "-m", "deep"], None);
    git(&["update-ref", "refs/heads/main", &commit], None);

    let (status, _, err, _) = run_measured(
        &env.store,
        &[
            "import-git".as_ref(),
            repo.as_os_str(),
            "--origin".as_ref(),
            "/srv/deep".as_ref(),
            "--ref-prefix".as_ref(),
            "g".as_ref(),
        ],
        Duration::from_secs(900),
    );
    assert!(status.success(), "import-git: {err}");
    let out = env.path("out");
    env.ok(["restore".as_ref(), "g.main".as_ref(), out.as_os_str()]);
    assert_eq!(read_deep(&out, DEPTH), b"deep\n");
    remove(&out);
}
