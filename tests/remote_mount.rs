//! Lazy mounts of a remote ref (`storefs mount team:s1`) through the real
//! binary and real FUSE mounts: store A pushes, an empty store B mounts the
//! remote ref at the checkpoint's origin and reads. Over a `file://` remote
//! always and over S3, Azure and GCS when their servers are given (as in
//! tests/remote.rs; scripts/test.sh starts them, the S3 variants over moto). Every mount is unmounted by a guard that runs on failure too.

#[macro_use]
mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    Env, MountGuard, RemoteKind, RemoteKind as Kind, assert_same_tree, chunk_of, env_with_remote,
    make_store, pack_of, pseudo_random, replace_in_pack,
};
use storefs::remote::Remote;
use storefs::store::{Content, ObjectId, Store};

/// Store B is `env.store` (so `Env::mount` mounts from it); A is `env.path("a")`.
struct Setup {
    env: Env,
    url: String,
    remote: Remote,
    /// The checkpoint's origin (moved away to `moved` after the snapshot).
    origin: PathBuf,
    moved: PathBuf,
}

/// A tree (the agent-store fixture, a 3 MiB file of random bytes, 300 small
/// files) snapshotted in A as `s1`, pushed to `team`, moved away from its
/// origin; B has the remote configured and nothing else.
fn setup(kind: Kind) -> Setup {
    let (env, url, remote) = env_with_remote(kind, "m");

    let origin = env.path("srv/sessions/agent-1");
    make_store(&origin);
    fs::write(origin.join("big.bin"), pseudo_random(3 << 20, 7)).unwrap();
    let many = origin.join("many");
    fs::create_dir_all(&many).unwrap();
    for i in 0..300 {
        fs::write(
            many.join(format!("f{i:04}.json")),
            pseudo_random(2000 + i, i as u64 + 100),
        )
        .unwrap();
    }
    let t = Setup {
        moved: env.path("moved"),
        env,
        url,
        remote,
        origin,
    };
    // Two checkpoints: s1 has a parent, which a lazy mount does not fetch.
    t.ok_a(&["snapshot", t.origin.to_str().unwrap(), "--ref", "s1"]);
    t.ok_a(&["snapshot", t.origin.to_str().unwrap(), "--ref", "s1"]);
    t.ok_a(&["remote", "add", "team", &t.url]);
    t.ok_a(&["push", "team", "s1"]);
    fs::rename(&t.origin, &t.moved).unwrap();
    t.ok_b(&["remote", "add", "team", &t.url]);
    t
}

both_remotes!(
    root:
    lazy_mount_reads_exactly_and_fetches_only_what_is_read,
    offline_after_first_read,
    tampered_remote_object_is_eio,
    a_pack_gone_under_a_lazy_mount_is_found_again,
);

impl Setup {
    fn a(&self) -> PathBuf {
        self.env.path("a")
    }

    fn b(&self) -> &Path {
        &self.env.store
    }

    fn ok_a(&self, args: &[&str]) -> String {
        stdout(&self.env.output_ok_in(&self.a(), args))
    }

    fn ok_b(&self, args: &[&str]) -> String {
        stdout(&self.env.output_ok_in(self.b(), args))
    }

    fn mount(&self) -> MountGuard {
        let m = self.env.mount("team:s1", None);
        assert_eq!(m.path(), self.origin, "mounted at the origin by default");
        m
    }

    /// `fetched_bytes` from the last "fetched from the remote" line of the
    /// lazy mount's log (written at unmount).
    fn logged_fetch(&self) -> u64 {
        self.logged("fetched_bytes")
    }

    fn logged(&self, name: &str) -> u64 {
        let log = self.log();
        let line = log
            .lines()
            .rfind(|l| l.contains("lazy mount: fetched from the remote"))
            .unwrap_or_else(|| panic!("no fetch line in the log:\n{log}"));
        field(line, name)
    }

    fn log(&self) -> String {
        let mut out = String::new();
        for e in fs::read_dir(self.b().join("logs")).unwrap() {
            out.push_str(&fs::read_to_string(e.unwrap().path()).unwrap());
        }
        out
    }

    /// The stored size of every object checkpoint s1 of A reaches.
    fn total_stored(&self) -> (usize, u64) {
        let s = Store::open(&self.a()).unwrap();
        let ck = s.read_checkpoint(&s.resolve("s1").unwrap()).unwrap();
        let mut ids = Default::default();
        s.mark_reachable(&ck.root, &mut ids, "test").unwrap();
        let bytes = ids
            .iter()
            .map(|id| s.backend().read(id).unwrap().unwrap().len() as u64)
            .sum();
        (ids.len(), bytes)
    }
}

/// stdout as text (names in listings need not be UTF-8).
fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn field(line: &str, name: &str) -> u64 {
    let v = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {line}"));
    v.parse().unwrap()
}

fn is_eio(r: std::io::Result<Vec<u8>>) -> bool {
    matches!(r, Err(e) if e.raw_os_error() == Some(libc::EIO))
}

fn lazy_mount_reads_exactly_and_fetches_only_what_is_read(kind: Kind) {
    let t = setup(kind);
    let (total_objects, total_bytes) = t.total_stored();

    // Read one small file: only it (and the trees on its path) travel.
    let m = t.mount();
    let status = t.ok_b(&["status"]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("ro ") && l.contains("team:s1")),
        "{status}"
    );
    let small = "many/f0007.json";
    assert_eq!(
        fs::read(t.origin.join(small)).unwrap(),
        fs::read(t.moved.join(small)).unwrap()
    );
    m.unmount();
    let fetched = t.logged_fetch();
    assert!(fetched > 2000, "the file's chunk was fetched: {fetched}");
    assert!(
        fetched * 50 < total_bytes,
        "reading one small file fetched {fetched} of {total_bytes} bytes"
    );
    let local = Store::open(t.b()).unwrap().backend().list().unwrap().len();
    assert!(
        local * 20 < total_objects,
        "B holds {local} of {total_objects} objects after one small read"
    );
    // The record is local (log and ls work) and marked partial.
    let id = fs::read_to_string(t.b().join("remotes/team.refs/s1")).unwrap();
    let log = t.ok_b(&["log", id.trim()]);
    assert!(log.contains(id.trim()), "{log}");
    let parent = Store::open(&t.a())
        .unwrap()
        .read_checkpoint(&ObjectId::from_hex(id.trim()).unwrap())
        .unwrap()
        .parents[0];
    let shown = |log: &str| log.lines().filter(|l| l.starts_with("checkpoint ")).count();
    assert_eq!(shown(&log), 1, "the parent is not fetched: {log}");
    assert!(log.contains(&parent.to_hex()), "{log}");
    let ls = t.ok_b(&["ls", id.trim()]);
    assert!(ls.contains("many") && ls.contains("big.bin"), "{ls}");
    assert!(
        t.b()
            .join(format!("checkpoints/{}.partial", id.trim()))
            .exists()
    );
    // verify checks what is here and does not count what is not as missing.
    t.ok_b(&["verify"]);
    // gc keeps what is here and does not fail on what is not.
    t.ok_b(&["gc", "--grace", "0"]);
    assert_eq!(
        Store::open(t.b()).unwrap().backend().list().unwrap().len(),
        local
    );

    // Prefetch: 4 KiB of big.bin with the kernel's readahead off fetches its
    // first chunk and the 4 after it (unmount waits for fetches in flight).
    let m = t.mount();
    let f = fs::File::open(t.origin.join("big.bin")).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: fadvise and pread on a descriptor we own, into a buffer we own.
    let n = unsafe {
        use std::os::fd::AsRawFd;
        assert_eq!(
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM),
            0
        );
        libc::pread(f.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0)
    };
    assert_eq!(n, 4096);
    assert_eq!(buf[..], fs::read(t.moved.join("big.bin")).unwrap()[..4096]);
    drop(f);
    m.unmount();
    let chunks = {
        let s = Store::open(&t.a()).unwrap();
        let ck = s.read_checkpoint(&s.resolve("s1").unwrap()).unwrap();
        match s.lookup_path(&ck, b"big.bin").unwrap().unwrap().content {
            Content::Extents(x) => x.len() as u64,
            _ => unreachable!(),
        }
    };
    assert!(chunks > 5, "big.bin has {chunks} chunks");
    assert_eq!(
        t.logged("fetched_objects"),
        5,
        "the chunk read and the 4 after it"
    );

    // Mount again: everything reads byte-identical, through the kernel and cat.
    let m = t.mount();
    assert_same_tree(&t.moved, &t.origin, true);
    let cat = Command::new("cat")
        .arg(t.origin.join("big.bin"))
        .output()
        .unwrap();
    assert!(cat.status.success());
    assert_eq!(cat.stdout, fs::read(t.moved.join("big.bin")).unwrap());
    assert_eq!(
        fs::metadata(t.origin.join("big.bin")).unwrap().size(),
        3 << 20
    );
    m.unmount();
    // Everything is local now; a third mount fetches nothing.
    let m = t.mount();
    assert_same_tree(&t.moved, &t.origin, true);
    m.unmount();
    assert_eq!(t.logged_fetch(), 0, "everything was local already");

    // pull completes the partial checkpoint: marker gone, verify clean.
    t.ok_b(&["pull", "team", "s1"]);
    let log = t.ok_b(&["log", "s1"]);
    assert_eq!(shown(&log), 2, "pull fetched the history: {log}");
    assert!(
        !t.b()
            .join(format!("checkpoints/{}.partial", id.trim()))
            .exists()
    );
    t.ok_b(&["verify"]);
}

fn offline_after_first_read(kind: Kind) {
    let t = setup(kind);
    let read_before = ["many/f0001.json", "workspace/room/out/_journal.jsonl"];
    let m = t.mount();
    for p in read_before {
        assert_eq!(
            fs::read(t.origin.join(p)).unwrap(),
            fs::read(t.moved.join(p)).unwrap()
        );
    }
    m.unmount();

    // The remote goes away: file:// its directory is moved; the others' endpoint
    // is a closed port (the daemon inherits the mount command's environment).
    let env_override: Vec<(&str, &str)> = match kind.unreachable_env() {
        None => {
            fs::rename(t.env.path("remote"), t.env.path("remote-gone")).unwrap();
            vec![]
        }
        Some(var) => vec![var],
    };
    let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(t.b())
        .args(["mount", "team:s1"])
        .env_remove("STOREFS_STORE")
        .envs(env_override.iter().copied())
        .output()
        .unwrap();
    let m = t.env.guard_for("team:s1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "offline mount failed: {err}");
    assert!(
        err.contains("warning") && err.contains("team"),
        "warns about the remote: {err}"
    );
    assert_eq!(m.path(), t.origin);
    for p in read_before {
        assert_eq!(
            fs::read(t.origin.join(p)).unwrap(),
            fs::read(t.moved.join(p)).unwrap(),
            "{p} was read before: served from the local store"
        );
    }
    // Never read: EIO, not wrong bytes (and no hang: the call returns).
    assert!(is_eio(fs::read(t.origin.join("big.bin"))));
    assert!(is_eio(fs::read(t.origin.join("many/f0002.json"))));
    m.unmount();

    // Without an earlier mount to fall back on: one line, exit 1.
    let other = t.env.path("other-store");
    t.env
        .output_ok_in(&other, &["remote", "add", "team", &t.url]);
    let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&other)
        .args(["mount", "team:s1", t.env.path("mp").to_str().unwrap()])
        .env_remove("STOREFS_STORE")
        .envs(env_override.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot be reached") && err.contains("team:s1"),
        "{err}"
    );
    assert!(!t.env.path("mp").exists(), "no mountpoint left behind");
}

fn tampered_remote_object_is_eio(kind: Kind) {
    let t = setup(kind);
    let victim_path = "many/f0042.json";
    let victim = chunk_of(&t.a(), "s1", victim_path);
    // A well-formed zstd frame of other bytes in the object's place in its pack.
    let other = zstd::bulk::compress(&pseudo_random(3000, 9), 3).unwrap();
    replace_in_pack(&t.remote, &victim, &other);

    let m = t.mount();
    assert!(is_eio(fs::read(t.origin.join(victim_path))));
    // Still EIO on a second try (never stored locally), other files fine.
    assert!(is_eio(fs::read(t.origin.join(victim_path))));
    for p in ["many/f0041.json", "many/f0043.json", "big.bin"] {
        assert_eq!(
            fs::read(t.origin.join(p)).unwrap(),
            fs::read(t.moved.join(p)).unwrap()
        );
    }
    m.unmount();
    assert!(!Store::open(t.b()).unwrap().has_object(&victim).unwrap());
    let log = t.log();
    let warning = log
        .lines()
        .find(|l| l.contains("WARN") && l.contains(&victim.to_hex()) && l.contains("corrupt"))
        .unwrap_or_else(|| panic!("no warning naming {victim}:\n{log}"));
    assert!(warning.contains("team"), "{warning}");
}

/// A remote gc deletes a pack a running lazy mount's index names (here
/// because a copy of its objects sorts first, which gc keeps): the mount
/// reads the index again and finds them there.
fn a_pack_gone_under_a_lazy_mount_is_found_again(kind: Kind) {
    let t = setup(kind);
    let victim = chunk_of(&t.a(), "s1", "many/f0100.json");
    let (stem, _) = pack_of(&t.remote, &victim);
    let m = t.mount();
    assert_eq!(
        fs::read(t.origin.join("many/f0001.json")).unwrap(),
        fs::read(t.moved.join("many/f0001.json")).unwrap()
    );
    let copy = format!("d-{}", "0".repeat(64));
    for ext in ["pack", "idx"] {
        let b = t
            .remote
            .get_bytes(&format!("packs/{stem}.{ext}"))
            .unwrap()
            .unwrap();
        t.remote
            .put_bytes(&format!("packs/{copy}.{ext}"), &b)
            .unwrap();
    }
    t.ok_a(&["gc", "--remote", "team", "--grace", "0"]);
    assert!(
        t.remote
            .get_bytes(&format!("packs/{stem}.pack"))
            .unwrap()
            .is_none()
    );
    assert_eq!(
        fs::read(t.origin.join("many/f0100.json")).unwrap(),
        fs::read(t.moved.join("many/f0100.json")).unwrap()
    );
    m.unmount();
}
