//! `storefs verify`, `storefs gc` and the mount helpers, through the real binary.
//! The helper test mounts through mount(8) and needs root and /dev/fuse.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Env, damage, set_mtime};
use storefs::store::ObjectId;

fn open_store(store: &Path) -> storefs::store::Store {
    storefs::store::Store::open(store).unwrap()
}

/// The file holding object `id`: its loose file or its pack.
fn object_path(store: &Path, id: &ObjectId) -> PathBuf {
    open_store(store).backend().locate(id).unwrap().unwrap().0
}

/// Every object id in the store.
fn objects(store: &Path) -> Vec<ObjectId> {
    open_store(store).backend().list().unwrap()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A file small enough to be one chunk: its object id is the sha256 of its bytes.
fn write_small(path: &Path, data: &[u8]) -> ObjectId {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
    ObjectId::of(data)
}

/// `n` files of random-ish distinct content under `dir`.
fn junk_dir(dir: &Path, tag: &str, n: usize) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let mut data = Vec::with_capacity(40_000);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ (i as u64) ^ (tag.len() as u64 * 7919);
        for b in tag.bytes() {
            x = x.wrapping_mul(31).wrapping_add(b as u64);
        }
        while data.len() < 40_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(&x.to_le_bytes());
        }
        fs::write(dir.join(format!("f{i}.bin")), data).unwrap();
    }
}

/// Objects written and made durable but never published: what a snapshot or
/// import leaves when its process dies between syncing its objects and writing
/// its checkpoint. (A failed import in-process removes its pending objects.)
fn unpublished_objects(env: &Env, dir: &Path) {
    let store = storefs::store::Store::open_or_create(&env.store).unwrap();
    let opts = storefs::ingest::SnapshotOptions::default();
    storefs::ingest::snapshot(&store, dir, &opts).unwrap();
    store.sync_objects().unwrap();
}

fn days_ago(d: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    now - d * 86_400 * 1_000_000_000
}

#[test]
fn verify_reports_corrupt_and_missing_by_checkpoint_and_path_and_quarantines() {
    let env = Env::new();
    let src = env.path("src");
    let a = write_small(&src.join("a.txt"), b"alpha: the corrupt one\n");
    let b = write_small(&src.join("sub/b.txt"), b"bravo: the missing one\n");
    write_small(&src.join("sub/c.txt"), b"charlie: fine\n");
    let s1 = env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let s1 = s1.trim().to_string();
    write_small(&src.join("d.txt"), b"delta\n");
    let s2 = env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s2".as_ref(),
    ]);
    let s2 = s2.trim().to_string();
    let other = env.path("other");
    write_small(&other.join("x.txt"), b"unrelated\n");
    env.ok([
        "snapshot".as_ref(),
        other.as_os_str(),
        "--ref".as_ref(),
        "other".as_ref(),
    ]);

    let clean = env.run(["verify"]);
    assert!(clean.status.success(), "{}", stderr(&clean));
    assert_eq!(stdout(&clean), "");

    // Delete b's object and corrupt a's.
    assert!(open_store(&env.store).backend().remove(&b).unwrap());
    let bytes = damage(&env.store, &a);

    let out = env.run(["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    for ck in [&s1, &s2] {
        let line = |path: &str, id: &ObjectId, what: &str| {
            text.lines().any(|l| {
                l.contains(ck.as_str())
                    && l.contains(&format!(" {path}: "))
                    && l.contains(&id.to_hex())
                    && l.contains(what)
            })
        };
        assert!(
            line("/a.txt", &a, "corrupt"),
            "no corrupt line for {ck}:\n{text}"
        );
        assert!(
            line("/sub/b.txt", &b, "missing"),
            "no missing line for {ck}:\n{text}"
        );
    }
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(stderr(&out).contains("1 corrupt"), "{}", stderr(&out));
    // Quarantined, not deleted; no longer under objects/.
    let q = env.store.join("quarantine").join(a.to_hex());
    assert_eq!(fs::read(&q).unwrap(), bytes);
    assert!(
        open_store(&env.store)
            .backend()
            .locate(&a)
            .unwrap()
            .is_none()
    );

    // One checkpoint at a time; an unaffected one is clean.
    let out = env.run(["verify", "s1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("/a.txt") && !stdout(&out).contains(&s2));
    assert!(env.run(["verify", "other"]).status.success());

    // Repair: the same bytes snapshotted again write the objects back.
    let fixed = env.path("fixed");
    write_small(&fixed.join("a.txt"), b"alpha: the corrupt one\n");
    write_small(&fixed.join("b.txt"), b"bravo: the missing one\n");
    env.ok(["snapshot".as_ref(), fixed.as_os_str()]);
    let out = env.run(["verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        env.ok(["cat", "s1", "sub/b.txt"]),
        "bravo: the missing one\n"
    );
}

#[test]
fn verify_checks_checkpoint_records_against_their_ids() {
    let env = Env::new();
    let src = env.path("src");
    write_small(&src.join("a.txt"), b"a\n");
    let id = env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let rec = env
        .store
        .join("checkpoints")
        .join(format!("{}.json", id.trim()));
    fs::set_permissions(&rec, fs::Permissions::from_mode(0o644)).unwrap();
    let text = fs::read_to_string(&rec).unwrap();
    fs::write(
        &rec,
        text.replace("\"message\": \"\"", "\"message\": \"x\""),
    )
    .unwrap();
    let out = env.run(["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(id.trim()) && stdout(&out).contains("does not match its id"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn gc_removes_old_unreachable_objects_keeps_young_ones_and_dry_run_deletes_nothing() {
    let env = Env::new();
    let src = env.path("src");
    junk_dir(&src, "kept", 3);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let reachable = objects(&env.store);

    // Objects written but never published (a writer that died before its checkpoint).
    junk_dir(&env.path("junk"), "junk", 3);
    unpublished_objects(&env, &env.path("junk"));
    let all = objects(&env.store);
    let junk: Vec<ObjectId> = all
        .iter()
        .filter(|i| !reachable.contains(i))
        .copied()
        .collect();
    assert!(junk.len() >= 4, "{junk:?}");

    // Young: the default grace period (1 h) keeps them.
    let out = env.run(["gc"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    assert_eq!(objects(&env.store), all);

    // Age everything: reachability, not age, keeps s1's objects.
    for id in &all {
        set_mtime(&object_path(&env.store, id), days_ago(2));
    }
    // More objects written "just now", not yet published.
    junk_dir(&env.path("fresh"), "fresh", 2);
    unpublished_objects(&env, &env.path("fresh"));
    let fresh: Vec<ObjectId> = objects(&env.store)
        .into_iter()
        .filter(|i| !all.contains(i))
        .collect();
    assert!(!fresh.is_empty());
    let before = objects(&env.store);

    let expect: Vec<String> = junk
        .iter()
        .map(|id| {
            let (size, _) = open_store(&env.store).backend().stat(id).unwrap().unwrap();
            format!("{id} {size}")
        })
        .collect();
    let sorted = |s: String| {
        let mut v: Vec<String> = s.lines().map(str::to_string).collect();
        v.sort();
        v
    };

    let dry = env.run(["gc", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert_eq!(sorted(stdout(&dry)), expect);
    assert!(stderr(&dry).contains("would remove"), "{}", stderr(&dry));
    assert_eq!(objects(&env.store), before, "--dry-run deleted something");

    let out = env.run(["gc"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(sorted(stdout(&out)), expect);
    let total: u64 = expect
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        stderr(&out).contains(&format!("removed {} unreachable object(s)", junk.len())),
        "{} (total {total})",
        stderr(&out)
    );
    let after = objects(&env.store);
    assert!(junk.iter().all(|j| !after.contains(j)));
    assert!(reachable.iter().all(|r| after.contains(r)));
    assert!(fresh.iter().all(|f| after.contains(f)));

    // The young objects get published fine, and the store verifies.
    let fresh_dir = env.path("fresh");
    env.ok([
        "snapshot".as_ref(),
        fresh_dir.as_os_str(),
        "--ref".as_ref(),
        "fresh".as_ref(),
    ]);
    let v = env.run(["verify"]);
    assert!(v.status.success(), "{}{}", stdout(&v), stderr(&v));
    let cat = env.run(["cat", "s1", "f0.bin"]);
    assert!(cat.status.success() && cat.stdout == fs::read(src.join("f0.bin")).unwrap());
}

/// The pack files (`*.pack`) of a store, sorted.
fn packs(store: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(store.join("objects/packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        .collect();
    v.sort();
    v
}

#[test]
fn gc_merges_small_packs_but_leaves_a_pack_holding_young_unreachable_objects() {
    let env = Env::new();
    // Ten snapshots, each publishing its own small pack.
    for i in 0..10 {
        let src = env.path(&format!("src{i}"));
        junk_dir(&src, &format!("snap{i}"), 2);
        env.ok([
            "snapshot".as_ref(),
            src.as_os_str(),
            "--ref".as_ref(),
            format!("s{i}").as_ref(),
        ]);
    }
    let reachable = objects(&env.store);
    // Unreachable and young: its pack must keep its age, so it is not merged.
    junk_dir(&env.path("junk"), "junk", 2);
    unpublished_objects(&env, &env.path("junk"));
    let junk: Vec<ObjectId> = objects(&env.store)
        .into_iter()
        .filter(|i| !reachable.contains(i))
        .collect();
    assert!(!junk.is_empty());
    let junk_pack = object_path(&env.store, &junk[0]);
    let junk_age = fs::metadata(&junk_pack).unwrap().modified().unwrap();
    let before = packs(&env.store);
    assert_eq!(before.len(), 11, "{before:?}");

    let out = env.run(["gc", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(packs(&env.store), before, "--dry-run merged packs");

    // A reader (a mount daemon, say) that indexed the old packs before gc.
    let reader = open_store(&env.store);
    reader.get_object(&reachable[0], "t").unwrap();

    let out = env.run(["gc"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for id in &reachable {
        reader.get_object(id, "t").unwrap();
    }
    assert!(
        stderr(&out).contains("merged 10 small pack(s) into 1"),
        "{}",
        stderr(&out)
    );
    let after = packs(&env.store);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.contains(&junk_pack));
    assert_eq!(
        fs::metadata(&junk_pack).unwrap().modified().unwrap(),
        junk_age
    );
    let mut all = objects(&env.store);
    let mut want: Vec<ObjectId> = reachable.iter().chain(&junk).copied().collect();
    all.sort();
    want.sort();
    assert_eq!(all, want);
    for i in 0..10 {
        let cat = env.run(["cat", &format!("s{i}"), "f1.bin"]);
        let src = fs::read(env.path(&format!("src{i}")).join("f1.bin")).unwrap();
        assert!(cat.status.success() && cat.stdout == src, "s{i}");
    }
    let v = env.run(["verify"]);
    assert!(v.status.success(), "{}{}", stdout(&v), stderr(&v));
    // Two packs left: below the threshold, nothing more to merge.
    let again = env.run(["gc"]);
    assert!(!stderr(&again).contains("merged"), "{}", stderr(&again));
    assert_eq!(packs(&env.store), after);
}

#[test]
fn gc_waits_for_writers_and_concurrent_snapshots_survive() {
    let env = Env::new();
    let src = env.path("src");
    junk_dir(&src, "base", 2);
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);

    // A writer holds the lease (as snapshot, import and commit do until they
    // publish): gc waits for it.
    let lock = env.store.join("gc.lock");
    let mut holder = Command::new("flock")
        .arg("--shared")
        .arg(&lock)
        .args(["sleep", "2"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let out = env.run(["gc", "--grace", "0"]);
    holder.wait().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("waiting"), "{}", stderr(&out));

    // The race gc must not lose: a snapshot finds objects already present
    // (old and unreachable: left by a writer that died before publishing) and
    // skips writing them, while gc with no grace period sweeps.
    for round in 0..3 {
        let dir = env.path(&format!("t{round}"));
        junk_dir(&dir, &format!("round{round}"), 6);
        unpublished_objects(&env, &dir);
        for id in objects(&env.store) {
            set_mtime(&object_path(&env.store, &id), days_ago(3));
        }
        let store = env.store.clone();
        let gcs = std::thread::spawn(move || {
            let mut removed = 0;
            for _ in 0..8 {
                let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
                    .arg("--store")
                    .arg(&store)
                    .args(["gc", "--grace", "0"])
                    .stderr(Stdio::piped())
                    .output()
                    .unwrap();
                // Two gcs never run at once; this one is alone.
                assert!(out.status.success(), "{}", stderr(&out));
                removed += stdout(&out).lines().count();
            }
            removed
        });
        let name = format!("t{round}");
        env.ok([
            "snapshot".as_ref(),
            dir.as_os_str(),
            "--ref".as_ref(),
            name.as_ref(),
        ]);
        gcs.join().unwrap();
        let v = env.run(["verify"]);
        assert!(
            v.status.success(),
            "round {round}: {}{}",
            stdout(&v),
            stderr(&v)
        );
        for i in 0..6 {
            let want = fs::read(dir.join(format!("f{i}.bin"))).unwrap();
            let got = env.run(["cat", &name, &format!("f{i}.bin")]);
            assert!(got.status.success(), "{}", stderr(&got));
            assert!(got.stdout == want, "round {round}: f{i}.bin differs");
        }
    }
}

#[test]
fn two_gcs_do_not_run_at_once() {
    let env = Env::new();
    let src = env.path("src");
    junk_dir(&src, "x", 1);
    env.ok(["snapshot".as_ref(), src.as_os_str()]);
    let mut holder = Command::new("flock")
        .arg(env.store.join("gc.running"))
        .args(["sleep", "2"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let out = env.run(["gc"]);
    holder.wait().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("another `storefs gc` is running"),
        "{}",
        stderr(&out)
    );
}

/// A store whose one pack holds a 6 MiB file of a checkpoint and `junk`
/// objects of these sizes that nothing reaches, all two days old.
fn pack_with_junk(env: &Env, junk: &[usize]) -> Vec<ObjectId> {
    use storefs::store::Store;
    let src = env.path("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("big.bin"), common::pseudo_random(6 << 20, 3)).unwrap();
    let store = Store::open_or_create(&env.store).unwrap();
    let snap =
        storefs::ingest::snapshot(&store, &src, &storefs::ingest::SnapshotOptions::default())
            .unwrap();
    let ids = junk
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let data = common::pseudo_random(*n, 10 + i as u64);
            store.put_object(&data).unwrap().0
        })
        .collect();
    store.sync_objects().unwrap();
    common::checkpoint_of_root(&store, snap.root, None);
    drop(store);
    assert_eq!(packs(&env.store).len(), 1);
    set_mtime(&packs(&env.store)[0], days_ago(2));
    ids
}

#[test]
fn gc_leaves_unreachable_chunks_in_a_large_pack_until_over_a_tenth_of_it_is() {
    // A dry run first: the same answer, nothing changed.
    let gc = |env: &Env| -> serde_json::Value {
        let before = (objects(&env.store), packs(&env.store));
        let mut v = Vec::new();
        for args in [&["gc", "--json", "--dry-run"][..], &["gc", "--json"]] {
            let out = env.run(args);
            assert!(out.status.success(), "{}", stderr(&out));
            v.push(serde_json::from_str::<serde_json::Value>(&stdout(&out)).unwrap());
            if v.len() == 1 {
                assert_eq!((objects(&env.store), packs(&env.store)), before);
            }
        }
        for key in ["removed", "left_in_packs", "left_in_packs_bytes"] {
            assert_eq!(v[0][key], v[1][key], "{key}: {v:?}");
        }
        env.ok(["verify"]);
        v.pop().unwrap()
    };
    // 300 KiB of 6.3 MiB (5%): copying the pack would cost 20 times what it
    // frees; left, and said so.
    let env = Env::new();
    let junk = pack_with_junk(&env, &[300 << 10]);
    let pack = packs(&env.store);
    let v = gc(&env);
    assert_eq!(v["left_in_packs"], 1, "{v}");
    assert_eq!(v["removed"], serde_json::json!([]), "{v}");
    assert!(objects(&env.store).contains(&junk[0]));
    assert_eq!(packs(&env.store), pack, "not rewritten");
    let out = env.run(["gc"]);
    assert!(
        stderr(&out).contains("left 1 unreachable object(s)"),
        "{}",
        stderr(&out)
    );
    // 800 KiB of 6.8 MiB (12%): rewritten without them.
    let env = Env::new();
    let junk = pack_with_junk(&env, &[300 << 10, 500 << 10]);
    let pack = packs(&env.store);
    let v = gc(&env);
    assert_eq!(v["left_in_packs"], 0, "{v}");
    assert_eq!(v["removed"].as_array().unwrap().len(), 2, "{v}");
    let left = objects(&env.store);
    assert!(!left.contains(&junk[0]) && !left.contains(&junk[1]));
    assert_ne!(packs(&env.store), pack, "rewritten");
}

// ------------------------------------------- issue 43, finding 2: temp files

/// The temp files (`.NAME.PID.N.tmp`) anywhere in the store's objects.
fn temp_files(store: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in fs::read_dir(store.join("objects")).unwrap().flatten() {
        if !dir.path().is_dir() {
            continue;
        }
        for f in fs::read_dir(dir.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

/// A pid that ran and is gone (a reaped child's).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Kills (and reaps) a process of ours when dropped, on failure too.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn temp_files_of_gone_writers_are_garbage_whatever_their_age() {
    let env = Env::new();
    let src = env.path("src");
    junk_dir(&src, "kept", 2);
    env.ok(["snapshot".as_ref(), src.as_os_str()]);
    let packs_dir = env.store.join("objects/packs");

    // A writer that is gone; a pid that runs something other than storefs;
    // and a live storefs (a copy of sleep named like it): young all three.
    let other = KillOnDrop(Command::new("sleep").arg("600").spawn().unwrap());
    let fake = env.path("storefs-sleeper");
    fs::copy("/bin/sleep", &fake).unwrap();
    let live = KillOnDrop(Command::new(&fake).arg("600").spawn().unwrap());
    let gone = packs_dir.join(format!(".pack.{}.0.tmp", dead_pid()));
    let reused = packs_dir.join(format!(".pack.{}.3.tmp", other.0.id()));
    let alive = packs_dir.join(format!(".pack.{}.0.tmp", live.0.id()));
    fs::write(&gone, vec![7u8; 5000]).unwrap();
    fs::write(&reused, vec![7u8; 3000]).unwrap();
    fs::write(&alive, vec![7u8; 1000]).unwrap();

    let dry = env.run(["gc", "--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let listed = stdout(&dry);
    assert!(
        listed.contains(&format!("{} 5000", gone.display())),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("{} 3000", reused.display())),
        "{listed}"
    );
    assert!(!listed.contains(&alive.display().to_string()), "{listed}");
    assert!(stderr(&dry).contains("2 temp file(s)"), "{}", stderr(&dry));
    assert_eq!(temp_files(&env.store).len(), 3, "--dry-run removed nothing");

    let v = env.run(["verify"]);
    assert!(v.status.success(), "{}{}", stdout(&v), stderr(&v));
    assert!(
        stderr(&v).contains("2 temp file(s) of interrupted writes")
            && stderr(&v).contains("storefs gc"),
        "{}",
        stderr(&v)
    );
    let j = env.ok(["verify", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&j).unwrap();
    let mut paths: Vec<String> = j["temps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    let mut want = vec![gone.display().to_string(), reused.display().to_string()];
    want.sort();
    assert_eq!(paths, want);

    let out = env.run(["gc"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        temp_files(&env.store),
        vec![alive.clone()],
        "the live writer's stays"
    );
    let v = env.run(["verify"]);
    assert!(!stderr(&v).contains("temp file"), "{}", stderr(&v));
    drop(live);
    drop(other);
}

/// `n` MiB of incompressible, distinct data in files under `dir`.
fn big_dir(dir: &Path, mib: usize) {
    fs::create_dir_all(dir).unwrap();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for f in 0..mib / 16 {
        let mut data = Vec::with_capacity(16 << 20);
        while data.len() < 16 << 20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.extend_from_slice(&x.to_le_bytes());
        }
        fs::write(dir.join(format!("f{f}.bin")), data).unwrap();
    }
}

/// Run `args` with storefs in the background; once a temp file of its own
/// appears in the store, stop it (so it is surely still working), send
/// SIGINT, let it go on, and return its output. `None` when it finished
/// before a temp file appeared (then the test cannot check anything).
fn interrupt_when_writing(env: &Env, args: &[&std::ffi::OsStr]) -> Option<std::process::Output> {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let child = Command::new(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(&env.store)
        .args(args)
        .env_remove("STOREFS_STORE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let pid = Pid::from_raw(child.0.id() as i32);
    let mine = format!(".{}.", child.0.id());
    loop {
        if child.0.try_wait().unwrap().is_some() {
            return None;
        }
        let writing = env.store.join("objects").is_dir()
            && temp_files(&env.store)
                .iter()
                .any(|p| p.file_name().unwrap().to_string_lossy().contains(&mine));
        if writing {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    kill(pid, Signal::SIGSTOP).unwrap();
    kill(pid, Signal::SIGINT).unwrap();
    kill(pid, Signal::SIGCONT).unwrap();
    let child = std::mem::replace(&mut child.0, Command::new("true").spawn().unwrap());
    Some(child.wait_with_output().unwrap())
}

fn assert_interrupted(env: &Env, what: &str, out: &std::process::Output) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(130), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
    assert!(
        err.contains(&format!("{what} interrupted")) && err.contains("nothing was published"),
        "{what}: {err}"
    );
    assert_eq!(stdout(out), "", "{what}: no id printed");
    assert_eq!(
        temp_files(&env.store),
        Vec::<PathBuf>::new(),
        "{what}: temp files left"
    );
    let checkpoints = fs::read_dir(env.store.join("checkpoints"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(checkpoints, 0, "{what}: a checkpoint was published");
    let refs = fs::read_dir(env.store.join("refs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(refs, 0, "{what}: a ref was set");
}

#[test]
fn ctrl_c_during_snapshot_or_import_removes_its_temp_files_and_publishes_nothing() {
    let env = Env::new();
    let src = env.path("big");
    big_dir(&src, 256);
    let Some(out) = interrupt_when_writing(
        &env,
        &[
            "snapshot".as_ref(),
            src.as_os_str(),
            "--ref".as_ref(),
            "s".as_ref(),
        ],
    ) else {
        eprintln!("SKIPPED: the snapshot finished before it wrote a temp file");
        return;
    };
    assert_interrupted(&env, "snapshot", &out);

    let archive = env.path("big.tar");
    let tar = Command::new("tar")
        .arg("-C")
        .arg(env.path(""))
        .arg("-cf")
        .arg(&archive)
        .arg("big")
        .status()
        .unwrap();
    assert!(tar.success());
    fs::remove_dir_all(&src).unwrap();
    let env2 = Env::new();
    let Some(out) = interrupt_when_writing(
        &env2,
        &[
            "import".as_ref(),
            archive.as_os_str(),
            "--ref".as_ref(),
            "s".as_ref(),
        ],
    ) else {
        eprintln!("SKIPPED: the import finished before it wrote a temp file");
        return;
    };
    assert_interrupted(&env2, "import", &out);
    assert!(
        !env2.store.join("archives").is_dir()
            || fs::read_dir(env2.store.join("archives")).unwrap().count() == 0,
        "no archive index entry"
    );
}

// ------------------------------------ issue 43, finding 7: the guide's repair

/// docs/guide.md, "A file gives EIO": verify copies a corrupt packed object
/// to the quarantine and drops it from its pack; a re-import of the archive
/// (its index record moved aside) writes it back, and so does copying the
/// packs a backup of the store has and this store lacks.
#[test]
fn the_guides_repairs_of_a_quarantined_packed_object_work() {
    let env = Env::new();
    let src = env.path("src");
    write_small(&src.join("a.txt"), b"alpha\n");
    write_small(&src.join("b.txt"), b"bravo\n");
    env.ok([
        "snapshot".as_ref(),
        src.as_os_str(),
        "--ref".as_ref(),
        "s0".as_ref(),
    ]);
    let archive = env.path("s1.tar.zst");
    env.ok([
        "export".as_ref(),
        "s0".as_ref(),
        "-o".as_ref(),
        archive.as_os_str(),
    ]);
    let manifest = env.path("s1.tar.zst.sha256");
    env.ok([
        "import".as_ref(),
        archive.as_os_str(),
        "--manifest".as_ref(),
        manifest.as_os_str(),
        "--ref".as_ref(),
        "s1".as_ref(),
    ]);
    let backup = env.path("backup");
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&env.store)
        .arg(&backup)
        .status()
        .unwrap();
    assert!(cp.success());
    let a = common::chunk_of(&env.store, "s1", "a.txt");
    let packs_dir = env.store.join("objects/packs");

    let break_it = || {
        damage(&env.store, &a);
        let out = env.run(["verify"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stdout(&out).contains("corrupt"), "{}", stdout(&out));
        assert!(env.store.join("quarantine").join(a.to_hex()).is_file());
        let out = env.run(["verify"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stdout(&out).contains("missing (a corrupt copy is in"),
            "{}",
            stdout(&out)
        );
        assert_eq!(
            env.ok(["cat", "s1", "b.txt"]),
            "bravo\n",
            "the rest is served"
        );
    };

    // 1. Re-import, the index record moved aside.
    break_it();
    let sha = fs::read_to_string(&manifest).unwrap();
    let sha = &sha.lines().last().unwrap()[..64];
    let record = env.store.join("archives").join(format!("{sha}.json"));
    fs::rename(&record, env.path("record.json")).unwrap();
    env.ok([
        "import".as_ref(),
        archive.as_os_str(),
        "--manifest".as_ref(),
        manifest.as_os_str(),
    ]);
    let out = env.run(["verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(env.ok(["cat", "s1", "a.txt"]), "alpha\n");

    // 2. Copy the packs a backup has and this store lacks.
    fs::remove_dir_all(env.store.join("quarantine")).unwrap();
    break_it();
    let mut copied = 0;
    for ent in fs::read_dir(backup.join("objects/packs"))
        .unwrap()
        .flatten()
    {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".pack") else {
            continue;
        };
        if packs_dir.join(&name).exists() {
            continue;
        }
        for ext in ["idx", "pack"] {
            let f = format!("{stem}.{ext}");
            fs::copy(ent.path().with_file_name(&f), packs_dir.join(&f)).unwrap();
        }
        copied += 1;
    }
    assert!(copied > 0, "verify rewrote the pack under a new name");
    let out = env.run(["verify"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(env.ok(["cat", "s1", "a.txt"]), "alpha\n");
}
