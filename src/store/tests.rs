use std::fs;

use super::*;

fn new_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(&dir.path().join("s")).unwrap();
    (dir, store)
}

fn file_entry(name: &[u8], id: ObjectId, len: u64) -> Entry {
    Entry {
        name: name.to_vec(),
        kind: Kind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        mtime_ns: 1,
        ctime_ns: 2,
        size: len,
        nlink: 1,
        link_id: 0,
        rdev: 0,
        xattrs: vec![],
        flags: 0,
        content: Content::Extents(vec![Extent { len, id: Some(id) }]),
    }
}

fn checkpoint(root: ObjectId, msg: &str) -> Checkpoint {
    Checkpoint {
        version: 1,
        root,
        parents: vec![],
        origin: Some("/srv/x".into()),
        time_ns: 5,
        message: msg.into(),
        source: Source {
            kind: "snapshot".into(),
            ..Default::default()
        },
    }
}

#[test]
fn object_round_trip_and_dedup() {
    let (_d, s) = new_store();
    let data = b"hello world".repeat(1000);
    let (id, written) = s.put_object(&data).unwrap();
    assert!(
        written > 0 && written < data.len() as u64,
        "stored compressed"
    );
    assert_eq!(id, ObjectId::of(&data));
    let (id2, written2) = s.put_object(&data).unwrap();
    assert_eq!((id2, written2), (id, 0), "identical content stored once");
    assert_eq!(s.get_object(&id, "t").unwrap(), data);
    // Pending until synced: readable by this process, not yet under its name.
    assert!(s.backend().list().unwrap().is_empty());
    s.sync_objects().unwrap();
    assert_eq!(s.backend().list().unwrap(), vec![id]);
    assert_eq!(s.get_object(&id, "t").unwrap(), data);
    // A small object goes into a pack: one pack and its index, and the
    // store's first multi-pack index; no temp file.
    assert_eq!(
        names_in(&s.root().join("objects/packs")),
        vec!["published", "*.pack", "*.midx", "*.idx"]
    );
}

/// The files in `dir`, as `*.ext` for packs and indexes, sorted; `.tmp` names as they are.
fn names_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| {
                let n = e.unwrap().file_name().into_string().unwrap();
                match n.rsplit_once('.') {
                    Some((_, ext)) if !n.starts_with('.') => format!("*.{ext}"),
                    _ => n,
                }
            })
            .collect(),
        Err(_) => vec![],
    };
    v.sort_by(|a, b| b.cmp(a));
    v
}

#[test]
fn large_and_small_objects_are_packed_and_loose_ones_of_older_stores_still_read() {
    let (_d, s) = new_store();
    // Incompressible, so its stored size is over the small-object limit.
    let big = random_bytes(200_000);
    let (big_id, _) = s.put_object(&big).unwrap();
    let (small_id, _) = s.put_object(b"small").unwrap();
    s.sync_objects().unwrap();
    for id in [&big_id, &small_id] {
        let (path, offset, _) = s.backend().locate(id).unwrap().unwrap();
        assert!(path.extension().is_some_and(|e| e == "pack") && offset > 0);
    }
    // No fan-out directory: nothing was written loose.
    let dirs: Vec<_> = fs::read_dir(s.root().join("objects"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(dirs, ["packs"]);
    assert_eq!(s.backend().list().unwrap().len(), 2);
    // A store where a storefs before 2026-12-05 wrote the large object
    // loose: read whole and in part from its file, found by a writer (not
    // written again) and listed.
    let (_d2, old) = new_store();
    old.write_loose_object(&big_id, &stored(&s, &big_id))
        .unwrap();
    assert_eq!(old.get_object(&big_id, "t").unwrap(), big);
    let part = old
        .read_range(&big_id, Some(big.len() as u64), 70_000..75_000)
        .unwrap();
    assert_eq!(part.as_deref(), Some(&big[70_000..75_000]));
    let _lease = old.write_lease().unwrap();
    assert_eq!(old.put_object(&big).unwrap().1, 0, "found loose");
    assert_eq!(old.backend().list().unwrap(), [big_id]);
    let (path, offset, _) = old.backend().locate(&big_id).unwrap().unwrap();
    assert!(path.starts_with(old.root().join("objects")) && offset == 0);
}

#[test]
fn syncs_from_several_threads_at_once_each_succeed() {
    // A pull publishes from the task that wrote each batch: two syncs at
    // once must not both publish the same pending objects.
    let (_d, s) = new_store();
    let mut x = 7u64;
    for round in 0..10 {
        for i in 0..40 {
            let mut big = Vec::with_capacity(70_000);
            while big.len() < 70_000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                big.extend_from_slice(&x.to_le_bytes());
            }
            s.put_object(&big).unwrap();
            s.put_object(format!("small {round} {i}").as_bytes())
                .unwrap();
        }
        std::thread::scope(|t| {
            let syncs: Vec<_> = (0..3).map(|_| t.spawn(|| s.sync_objects())).collect();
            for h in syncs {
                h.join().unwrap().unwrap();
            }
        });
    }
    assert_eq!(s.backend().list().unwrap().len(), 800);
}

#[test]
fn a_packed_object_is_read_from_its_pack_without_trying_a_loose_file() {
    let (_d, s) = new_store();
    let (id, _) = s.put_object(b"packed, not loose").unwrap();
    s.sync_objects().unwrap();
    let stored = s.backend().read(&id).unwrap().unwrap();
    // A stray file where a loose copy would be: never opened for a packed
    // object (the pack is found in memory first).
    let hex = id.to_hex();
    let loose = s.root().join("objects").join(&hex[..2]).join(&hex[2..]);
    fs::create_dir_all(loose.parent().unwrap()).unwrap();
    fs::write(&loose, b"not what the pack holds").unwrap();
    assert_eq!(s.backend().read(&id).unwrap().unwrap(), stored);
    assert_eq!(s.get_object(&id, "t").unwrap(), b"packed, not loose");
}

#[test]
fn packs_published_by_another_process_are_found() {
    let (_d, reader) = new_store();
    // Loaded (empty) before the writer publishes.
    assert!(reader.backend().list().unwrap().is_empty());
    let writer = Store::open(reader.root()).unwrap();
    let (id, _) = writer.put_object(b"from the other process").unwrap();
    assert!(
        !reader.has_object(&id).unwrap(),
        "not before it is published"
    );
    writer.sync_objects().unwrap();
    assert_eq!(
        reader.get_object(&id, "t").unwrap(),
        b"from the other process"
    );
    assert!(reader.has_object(&id).unwrap());
}

#[test]
fn a_writer_looks_up_small_objects_in_its_view_and_large_ones_on_disk() {
    let (_d, writer) = new_store();
    let _lease = writer.write_lease().unwrap();
    let other = Store::open(writer.root()).unwrap();
    let small = b"small, published by another process".to_vec();
    let mut large = vec![0u8; 300_000];
    rustix::rand::getrandom(&mut large, rustix::rand::GetRandomFlags::empty()).unwrap();
    other.put_object(&small).unwrap();
    other.put_object(&large).unwrap();
    other.sync_objects().unwrap();
    // A small one published since the lease is not in the view: a second copy.
    let (id, written) = writer.put_object(&small).unwrap();
    assert!(written > 0, "written again");
    // A large object may be loose (an older store): looked for on disk,
    // where the packs directory changed, so it is found in the new pack.
    assert_eq!(
        writer.put_object(&large).unwrap().1,
        0,
        "found, not rewritten"
    );
    writer.sync_objects().unwrap();
    assert_eq!(writer.get_object(&id, "t").unwrap(), small);
    // A new lease refreshes the view: found.
    drop(_lease);
    let _lease = writer.write_lease().unwrap();
    assert_eq!(writer.put_object(&small).unwrap().1, 0);
    // Readers still look on disk for what the view does not hold.
    let reader = Store::open(writer.root()).unwrap();
    assert!(reader.has_object(&id).unwrap());
}

#[test]
fn threads_reading_one_pack_whole_in_part_and_small_get_the_right_bytes() {
    // One pack, its descriptors shared: large objects read past the page
    // cache (a second descriptor with O_DIRECT) and in part, small ones
    // through the page cache at unaligned offsets, all at once. Flipping
    // O_DIRECT on the shared descriptor would fail the small reads (EINVAL)
    // or the large ones.
    let (_d, s) = new_store();
    let large: Vec<Vec<u8>> = (0..8).map(|_| random_bytes(300_000)).collect();
    let small: Vec<Vec<u8>> = (0..64)
        .map(|i| format!("small object {i} ").repeat(1 + i % 7).into_bytes())
        .collect();
    let large_ids: Vec<ObjectId> = large.iter().map(|d| s.put_object(d).unwrap().0).collect();
    let small_ids: Vec<ObjectId> = small.iter().map(|d| s.put_object(d).unwrap().0).collect();
    s.sync_objects().unwrap();
    let packs = s.root().join("objects/packs");
    assert!(
        large_ids
            .iter()
            .chain(&small_ids)
            .all(|id| pack_of(&packs, id) == pack_of(&packs, &large_ids[0]))
    );
    // A fresh process, the pack out of the page cache: large reads go past
    // it (direct reads leave nothing there), small ones fill a few pages.
    let s = Store::open(s.root()).unwrap();
    let pack =
        fs::File::open(packs.join(format!("{}.pack", pack_of(&packs, &large_ids[0])))).unwrap();
    rustix::fs::fadvise(&pack, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    std::thread::scope(|t| {
        for k in 0..6usize {
            let (s, large, small, large_ids, small_ids) =
                (&s, &large, &small, &large_ids, &small_ids);
            t.spawn(move || {
                for round in 0..300usize {
                    let i = (k * 7 + round) % large.len();
                    let len = large[i].len() as u64;
                    match (k + round) % 3 {
                        0 => assert_eq!(s.get_object(&large_ids[i], "t").unwrap(), large[i]),
                        1 => {
                            let at = (round as u64 * 4_099) % (len - 5_000);
                            let got = s
                                .read_range(&large_ids[i], Some(len), at..at + 5_000)
                                .unwrap();
                            assert_eq!(
                                got.as_deref(),
                                Some(&large[i][at as usize..at as usize + 5_000])
                            );
                        }
                        _ => {
                            let j = (k * 13 + round) % small.len();
                            assert_eq!(s.get_object(&small_ids[j], "t").unwrap(), small[j]);
                        }
                    }
                }
            });
        }
    });
}

#[test]
fn a_sweep_rewrites_a_pack_of_large_objects_only_once_enough_of_it_is_unreachable() {
    let (_d, s) = new_store();
    // Twelve incompressible objects of 512 KiB: one pack of about 6 MiB.
    let data: Vec<Vec<u8>> = (0..12).map(|_| random_bytes(512 << 10)).collect();
    let ids: Vec<ObjectId> = data.iter().map(|d| s.put_object(d).unwrap().0).collect();
    s.sync_objects().unwrap();
    let packs = s.root().join("objects/packs");
    let pack = pack_of(&packs, &ids[0]);
    // A dry run answers as a sweep would, and changes nothing.
    assert_eq!(s.backend().sweep(&ids[..1], true).unwrap(), [false]);
    assert_eq!(s.backend().sweep(&ids[..2], true).unwrap(), [true, true]);
    assert_eq!(pack_of(&packs, &ids[1]), pack);
    assert_eq!(s.get_object(&ids[1], "t").unwrap(), data[1]);
    // One of twelve (8%): dropping it would copy 5.5 MiB to free 0.5; kept.
    assert_eq!(s.backend().sweep(&ids[..1], false).unwrap(), [false]);
    assert_eq!(pack_of(&packs, &ids[0]), pack, "not rewritten");
    assert_eq!(s.get_object(&ids[0], "t").unwrap(), data[0]);
    // Two (17%): rewritten without them.
    assert_eq!(s.backend().sweep(&ids[..2], false).unwrap(), [true, true]);
    assert_ne!(pack_of(&packs, &ids[2]), pack);
    for (i, id) in ids.iter().enumerate() {
        match s.get_object(id, "t") {
            Ok(b) => assert!(i >= 2 && b == data[i]),
            Err(Error::Missing { .. }) => assert!(i < 2),
            Err(e) => panic!("{e}"),
        }
    }
    // What quarantine and the other callers of remove_many drop always goes.
    assert_eq!(s.backend().remove_many(&ids[2..3]).unwrap(), [true]);
    assert!(!s.has_object(&ids[2]).unwrap());
    assert_eq!(s.backend().list().unwrap().len(), 9);
    // Whatever the share, a rewrite that keeps at most 4 MiB is done: one of
    // 40 objects of 100 KiB (2.5%).
    let (_d, s) = new_store();
    let ids: Vec<ObjectId> = (0..40)
        .map(|_| s.put_object(&random_bytes(100 << 10)).unwrap().0)
        .collect();
    s.sync_objects().unwrap();
    assert_eq!(s.backend().sweep(&ids[..1], false).unwrap(), [true]);
    assert!(!s.has_object(&ids[0]).unwrap() && s.has_object(&ids[1]).unwrap());
}

#[test]
fn removing_packed_objects_rewrites_their_pack() {
    let (_d, s) = new_store();
    let ids: Vec<ObjectId> = (0..10)
        .map(|i| s.put_object(format!("object {i}").as_bytes()).unwrap().0)
        .collect();
    s.sync_objects().unwrap();
    let other = Store::open(s.root()).unwrap();
    assert_eq!(other.get_object(&ids[9], "t").unwrap(), b"object 9");
    let gone = s.backend().remove_many(&ids[..4]).unwrap();
    assert_eq!(gone, vec![true; 4]);
    assert_eq!(s.backend().remove_many(&ids[..1]).unwrap(), vec![false]);
    assert_eq!(s.backend().list().unwrap().len(), 6);
    for (i, id) in ids.iter().enumerate() {
        match s.get_object(id, "t") {
            Ok(b) => assert!(i >= 4 && b == format!("object {i}").as_bytes()),
            Err(Error::Missing { .. }) => assert!(i < 4),
            Err(e) => panic!("{e}"),
        }
    }
    // A process that had the old pack indexed still reads the survivors; once
    // it holds a write lease it no longer takes the removed ones as present.
    assert_eq!(other.get_object(&ids[5], "t").unwrap(), b"object 5");
    let lease = other.write_lease().unwrap();
    assert!(!other.has_object(&ids[0]).unwrap());
    assert!(matches!(
        other.get_object(&ids[0], "t"),
        Err(Error::Missing { .. })
    ));
    assert_eq!(other.get_object(&ids[5], "t").unwrap(), b"object 5");
    drop(lease);
    // One pack and index remain (and the multi-pack index); removing the
    // rest leaves none.
    assert_eq!(
        names_in(&s.root().join("objects/packs")),
        vec!["published", "*.pack", "*.midx", "*.idx"]
    );
    assert_eq!(s.backend().remove_many(&ids[4..]).unwrap(), vec![true; 6]);
    assert!(names_in(&s.root().join("objects/packs")).is_empty());
}

#[test]
fn a_packed_object_is_quarantined_whole() {
    let (_d, s) = new_store();
    let (keep, _) = s.put_object(b"keep me").unwrap();
    let (bad, _) = s.put_object(b"bad one").unwrap();
    s.sync_objects().unwrap();
    let stored = s.backend().read(&bad).unwrap().unwrap();
    let q = s.backend().quarantine(&bad).unwrap().unwrap();
    assert_eq!(fs::read(&q).unwrap(), stored);
    assert!(!s.has_object(&bad).unwrap());
    assert_eq!(s.get_object(&keep, "t").unwrap(), b"keep me");
}

#[test]
fn an_interrupted_pack_is_never_served_and_gc_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let s = Store::open_or_create(&root).unwrap();
    s.put_object(b"published").unwrap();
    s.sync_objects().unwrap();
    // A pack without an index: a process that died in the middle of sync.
    let packs = root.join("objects/packs");
    fs::write(packs.join("00000000deadbeef.pack"), b"half a pack").unwrap();
    let (id, _) = s.put_object(b"never synced").unwrap();
    let stale = s
        .backend()
        .remove_stale_temps(
            std::time::SystemTime::now() + std::time::Duration::from_secs(1),
            false,
        )
        .unwrap();
    let names: Vec<String> = stale
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.contains(&"00000000deadbeef.pack".to_string()),
        "{names:?}"
    );
    drop(s);
    let s = Store::open(&root).unwrap();
    assert!(!s.has_object(&id).unwrap());
    assert_eq!(s.backend().list().unwrap().len(), 1);
}

#[test]
fn objects_never_synced_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let id = {
        let s = Store::open_or_create(&root).unwrap();
        s.put_object(b"written, never published").unwrap().0
    };
    let s = Store::open(&root).unwrap();
    assert!(!s.has_object(&id).unwrap());
    assert_eq!(
        names_in(&root.join("objects/packs")),
        Vec::<String>::new(),
        "temp pack removed"
    );
}

#[test]
fn corruption_and_missing_are_detected() {
    let (_d, s) = new_store();
    let (id, _) = s.put_object(b"precious bytes").unwrap();
    s.sync_objects().unwrap();
    // Valid zstd of different content in its place.
    let other = zstd::bulk::compress(b"precious bytez", 3).unwrap();
    s.replace_stored_object(&id, &other).unwrap();
    assert!(matches!(s.get_object(&id, "t"), Err(Error::Corrupt { .. })));
    // Not zstd at all.
    s.replace_stored_object(&id, b"garbage").unwrap();
    assert!(matches!(s.get_object(&id, "t"), Err(Error::Corrupt { .. })));
    let absent = ObjectId::of(b"never stored");
    assert!(matches!(
        s.get_object(&absent, "t"),
        Err(Error::Missing { .. })
    ));
}

#[test]
fn checkpoints_refs_and_resolution() {
    let (_d, s) = new_store();
    let (blob, _) = s.put_object(b"x").unwrap();
    let (tree, _) = s
        .put_tree(&Tree {
            entries: vec![file_entry(b"f", blob, 1)],
        })
        .unwrap();
    let mut root = file_entry(b"", blob, 0);
    root.kind = Kind::Dir;
    root.content = Content::Tree(tree);
    let (rid, _) = s.put_root(root).unwrap();
    let a = s.write_checkpoint(&checkpoint(rid, "a")).unwrap();
    let b = s.write_checkpoint(&checkpoint(rid, "b")).unwrap();
    assert_ne!(a, b);
    assert_eq!(s.read_checkpoint(&a).unwrap().message, "a");
    assert_eq!(s.list_checkpoints().unwrap().len(), 2);

    s.set_ref("s1", &a).unwrap();
    assert_eq!(s.resolve("s1").unwrap(), a);
    assert_eq!(s.resolve(&a.to_hex()).unwrap(), a);
    assert_eq!(s.resolve(&a.to_hex()[..10]).unwrap(), a);
    assert!(matches!(s.resolve("nope"), Err(Error::UnknownTarget(_))));
    // A one-digit prefix shared by both is ambiguous; find one.
    let common: String = a
        .to_hex()
        .chars()
        .zip(b.to_hex().chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    if !common.is_empty() {
        assert!(matches!(s.resolve(&common), Err(Error::Ambiguous { .. })));
    }
    assert_eq!(s.list_refs().unwrap(), vec![("s1".to_string(), a)]);
    for bad in ["", ".", "..", "a/b", "a b", "é"] {
        assert!(s.set_ref(bad, &a).is_err(), "{bad:?} accepted");
    }

    let ck = s.read_checkpoint(&a).unwrap();
    assert_eq!(s.lookup_path(&ck, b"f").unwrap().unwrap().size, 1);
    assert_eq!(s.lookup_path(&ck, b"/").unwrap().unwrap().kind, Kind::Dir);
    assert!(s.lookup_path(&ck, b"missing").unwrap().is_none());
    assert!(s.lookup_path(&ck, b"f/under-a-file").unwrap().is_none());
}

#[test]
fn tampered_checkpoint_record_is_refused() {
    let (_d, s) = new_store();
    let (rid, _) = s.put_object(b"not a tree").unwrap();
    let id = s.write_checkpoint(&checkpoint(rid, "m")).unwrap();
    let path = s.root().join("checkpoints").join(format!("{id}.json"));
    fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let text = fs::read_to_string(&path).unwrap().replace("\"m\"", "\"n\"");
    fs::write(&path, text).unwrap();
    assert!(matches!(s.read_checkpoint(&id), Err(Error::Corrupt { .. })));
}

#[test]
fn non_store_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("precious"), b"x").unwrap();
    assert!(matches!(
        Store::open_or_create(dir.path()),
        Err(Error::NotAStore(_))
    ));
    assert!(matches!(
        Store::open(&dir.path().join("nothing")),
        Err(Error::NoStore(_))
    ));
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing written"
    );
}

#[test]
fn write_checkpoint_refuses_an_origin_that_is_not_canonical() {
    let (_d, s) = new_store();
    let (blob, _) = s.put_object(b"x").unwrap();
    let mut root = file_entry(b"", blob, 0);
    root.kind = Kind::Dir;
    root.content = Content::Tree(s.put_tree(&Tree { entries: vec![] }).unwrap().0);
    let (rid, _) = s.put_root(root).unwrap();
    for bad in ["/srv/x/../../etc", "srv/x", "/srv/./x", "/srv/x/"] {
        let mut c = checkpoint(rid, "bad");
        c.origin = Some(bad.into());
        let e = s.write_checkpoint(&c).unwrap_err().to_string();
        assert!(e.contains("not a canonical absolute path"), "{bad}: {e}");
    }
    assert!(s.list_checkpoints().unwrap().is_empty());
    s.write_checkpoint(&checkpoint(rid, "ok")).unwrap();
}

/// Store `data` and publish it in a pack of its own.
fn put_synced(s: &Store, data: &[u8]) -> ObjectId {
    let (id, _) = s.put_object(data).unwrap();
    s.sync_objects().unwrap();
    id
}

/// Replace the file at `path` (read-only files included) with `bytes`.
fn overwrite(path: &std::path::Path, bytes: &[u8]) {
    let _ = fs::remove_file(path);
    fs::write(path, bytes).unwrap();
}

/// Every pack's own index (`*.idx`) in `packs`.
fn pack_indexes(packs: &std::path::Path) -> Vec<std::path::PathBuf> {
    fs::read_dir(packs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .collect()
}

#[test]
fn a_store_without_a_multi_pack_index_gets_one_on_the_next_write_and_stops_reading_pack_indexes() {
    let (_d, s) = new_store();
    let mut want: Vec<(ObjectId, Vec<u8>)> = (0..5)
        .map(|i| format!("old object {i}").into_bytes())
        .map(|b| (put_synced(&s, &b), b))
        .collect();
    let packs = s.root().join("objects/packs");
    // As an older storefs left it: packs and their indexes, nothing else.
    fs::remove_file(packs.join(midx::MIDX)).unwrap();
    drop(s);
    let old = Store::open(_d.path().join("s").as_path()).unwrap();
    for (id, b) in &want {
        assert_eq!(&old.get_object(id, "t").unwrap(), b);
    }
    assert!(!packs.join(midx::MIDX).exists(), "a reader writes nothing");
    // The next write gives it one, covering every pack.
    want.push((put_synced(&old, b"new object"), b"new object".to_vec()));
    let m = midx::Midx::open(&packs.join(midx::MIDX)).unwrap().unwrap();
    assert_eq!(m.names.len(), 6);
    // From now on lookups search it in place: the packs' own indexes are
    // not read (damaged, they change nothing).
    for idx in pack_indexes(&packs) {
        overwrite(&idx, b"damaged");
    }
    let fresh = Store::open(old.root()).unwrap();
    for (id, b) in &want {
        assert!(fresh.has_object(id).unwrap());
        assert_eq!(&fresh.get_object(id, "t").unwrap(), b);
    }
    assert_eq!(fresh.backend().list().unwrap().len(), 6);
}

#[test]
fn many_writes_leave_few_packs_outside_the_multi_pack_index() {
    let (_d, s) = new_store();
    let n = 2 * backend::MIDX_TAIL_PACKS + 5;
    let ids: Vec<ObjectId> = (0..n)
        .map(|i| put_synced(&s, format!("write {i}").as_bytes()))
        .collect();
    let packs = s.root().join("objects/packs");
    let m = midx::Midx::open(&packs.join(midx::MIDX)).unwrap().unwrap();
    let outside = pack_indexes(&packs).len() - m.names.len();
    assert_eq!(pack_indexes(&packs).len(), n);
    assert!(
        outside < backend::MIDX_TAIL_PACKS,
        "{outside} of {n} packs are read through their own index"
    );
    let fresh = Store::open(s.root()).unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            fresh.get_object(id, "t").unwrap(),
            format!("write {i}").as_bytes()
        );
    }
    let mut all = fresh.backend().list().unwrap();
    let mut want = ids.clone();
    all.sort();
    want.sort();
    assert_eq!(all, want);
}

#[test]
fn a_crash_around_the_multi_pack_index_leaves_nothing_that_misleads() {
    let (_d, s) = new_store();
    let ids: Vec<ObjectId> = (0..4)
        .map(|i| put_synced(&s, format!("object {i}").as_bytes()))
        .collect();
    let packs = s.root().join("objects/packs");
    let path = packs.join(midx::MIDX);
    let check = |ids: &[ObjectId], gone: &[ObjectId]| {
        let r = Store::open(s.root()).unwrap();
        for (i, id) in ids.iter().enumerate() {
            if gone.contains(id) {
                assert!(!r.has_object(id).unwrap(), "object {i} vouched for");
                assert!(matches!(r.get_object(id, "t"), Err(Error::Missing { .. })));
            } else {
                assert_eq!(
                    r.get_object(id, "t").unwrap(),
                    format!("object {i}").as_bytes()
                );
            }
        }
        let mut want: Vec<ObjectId> = ids.iter().filter(|i| !gone.contains(i)).copied().collect();
        want.sort();
        assert_eq!(r.backend().list().unwrap(), want);
    };
    check(&ids, &[]);

    // Killed while writing a new one: its temp file is never read, and gc
    // removes it.
    let tmp = packs.join(".index.midx.999.0.tmp");
    fs::write(&tmp, b"SFMIDX01 half written").unwrap();
    check(&ids, &[]);
    let stale = s
        .backend()
        .remove_stale_temps(
            std::time::SystemTime::now() + std::time::Duration::from_secs(1),
            false,
        )
        .unwrap();
    assert!(stale.iter().any(|(p, _)| *p == tmp), "{stale:?}");
    assert!(!tmp.exists());

    // Killed after gc rewrote a pack, before it replaced the index: the old
    // index names a pack that is gone. Objects gc removed are not vouched for
    // and the survivors are found in the pack that replaced it.
    let before = fs::read(&path).unwrap();
    assert_eq!(s.backend().remove_many(&ids[..1]).unwrap(), vec![true]);
    overwrite(&path, &before);
    check(&ids, &ids[..1]);

    // Damaged: set aside with a warning, every pack read through its own
    // index, and the next write replaces it.
    overwrite(&path, b"SFMIDX01 garbage");
    check(&ids, &ids[..1]);
    // An entry pointing at the wrong place (its header is intact): the
    // record in the pack does not match, so it is not trusted.
    let mut ids = ids;
    let n = {
        let w = Store::open(s.root()).unwrap();
        ids.push(put_synced(&w, b"object 4"));
        midx::Midx::open(&path).unwrap().unwrap().names.len()
    };
    let mut b = fs::read(&path).unwrap();
    let entries_at = b.len() - 48 * midx::Midx::open(&path).unwrap().unwrap().len() as usize;
    assert_eq!(entries_at, 8 + 4 + 8 + 256 * 8 + n * 16 + 64);
    for e in 0..(b.len() - entries_at) / 48 {
        b[entries_at + e * 48 + 40] ^= 0x10; // offset field
    }
    overwrite(&path, &b);
    check(&ids, &ids[..1]);
}

/// `n` bytes that compress about 2:1 (half random, half repeated), so
/// frames differ in stored size.
fn half_random(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (i / 512) % 2 == 0 {
                x as u8
            } else {
                (i % 251) as u8
            }
        })
        .collect()
}

/// The ranges a partial read is checked on, for an object of `len` bytes:
/// inside a frame, ending or starting at a frame boundary, across one or
/// several boundaries, the first and last bytes, the whole object.
fn ranges_of(len: u64) -> Vec<std::ops::Range<u64>> {
    let f = framed::FRAME_SIZE as u64;
    vec![
        0..1,
        0..4096,
        100..200,
        f - 4096..f,
        f..f + 4096,
        f - 1..f + 1,
        f - 10..2 * f + 10,
        3..len - 3,
        len - 1..len,
        len - 4096..len,
        0..len,
    ]
}

/// The stored bytes of `id` as the backend holds them.
fn stored(s: &Store, id: &ObjectId) -> Vec<u8> {
    s.backend().read(id).unwrap().unwrap()
}

#[test]
fn large_objects_are_framed_and_round_trip_with_their_id_unchanged() {
    let (_d, s) = new_store();
    for (len, data) in [
        (
            framed::FRAME_SIZE + 1,
            half_random(framed::FRAME_SIZE + 1, 1),
        ),
        (300_000, half_random(300_000, 2)),
        (1 << 20, half_random(1 << 20, 3)),
    ] {
        let (id, _) = s.put_object(&data).unwrap();
        // The id is the sha256 of the content, as before: dedup unchanged.
        assert_eq!(id, ObjectId::of(&data));
        let raw = stored(&s, &id);
        let table = raw_table(&raw).expect("framed");
        assert_eq!(table.frames.len(), len.div_ceil(framed::FRAME_SIZE));
        assert_eq!(table.content_len(), len as u64);
        // A plain zstd decoder (storefs before the framed layout) reads it whole.
        assert_eq!(zstd::stream::decode_all(&raw[..]).unwrap(), data);
        assert_eq!(s.get_object(&id, "t").unwrap(), data);
        s.sync_objects().unwrap();
        assert_eq!(s.get_object(&id, "t").unwrap(), data);
    }
    // Up to one frame's worth: one frame that declares its size, as before.
    let small = half_random(framed::FRAME_SIZE, 4);
    let (id, _) = s.put_object(&small).unwrap();
    let raw = stored(&s, &id);
    assert!(framed::declares_size(&raw) && raw_table(&raw).is_none());
    assert_eq!(s.get_object(&id, "t").unwrap(), small);
}

#[test]
fn single_frame_objects_of_the_old_layout_still_decode() {
    let (_d, s) = new_store();
    for data in [half_random(300_000, 5), {
        let mut d = vec![0u8; 200_000];
        rustix::rand::getrandom(&mut d, rustix::rand::GetRandomFlags::empty()).unwrap();
        d
    }] {
        // Exactly what storefs wrote before: one frame of the whole object.
        let id = ObjectId::of(&data);
        let old = zstd::bulk::compress(&data, ZSTD_LEVEL).unwrap();
        s.backend().write(&id, &old).unwrap();
        s.sync_objects().unwrap();
        assert_eq!(stored(&s, &id), old);
        assert_eq!(s.get_object(&id, "t").unwrap(), data);
        // A partial read declines: the caller reads it whole.
        let len = data.len() as u64;
        assert_eq!(s.read_range(&id, Some(len), 10..20).unwrap(), None);
    }
}

#[test]
fn partial_reads_return_exactly_the_range_across_frame_boundaries() {
    let (_d, s) = new_store();
    // Incompressible (its frames read from the pack past the page cache) and
    // compressible (its table and frames read from the pack), before
    // (pending: read in part from the pack being written) and after they
    // are published.
    let mut random = vec![0u8; 700_001];
    rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty()).unwrap();
    let compressible: Vec<u8> = (0..400_000u32)
        .map(|i| (i % 251) as u8 ^ (i / 70_000) as u8)
        .collect();
    let ids: Vec<(ObjectId, Vec<u8>)> = [random, compressible]
        .into_iter()
        .map(|d| (s.put_object(&d).unwrap().0, d))
        .collect();
    let loose = s.backend().locate(&ids[0].0).unwrap();
    assert!(loose.is_none(), "pending objects are not located");
    for round in 0..2 {
        for (id, data) in &ids {
            let len = data.len() as u64;
            let Some(Stored::File { file, .. }) = s.backend().open_stored(id).unwrap() else {
                panic!("a range of a file (round {round})");
            };
            match (round, file) {
                (0, StoredFile::Pending(_)) | (1, StoredFile::Pack(_)) => {}
                _ => panic!("pending, then in a published pack (round {round})"),
            }
            for r in ranges_of(len) {
                let got = s.read_range(id, Some(len), r.clone()).unwrap();
                assert_eq!(
                    got.as_deref(),
                    Some(&data[r.start as usize..r.end as usize]),
                    "range {r:?} of {len} (round {round})"
                );
                // A reader that does not know the length (a fork's piece)
                // gets the same bytes.
                let got = s.read_range(id, None, r.clone()).unwrap();
                assert_eq!(
                    got.as_deref(),
                    Some(&data[r.start as usize..r.end as usize]),
                    "range {r:?} of {len}, length unknown (round {round})"
                );
            }
            // Out of bounds or the wrong length: declined, not guessed.
            assert_eq!(s.read_range(id, Some(len), len - 1..len + 1).unwrap(), None);
            assert_eq!(s.read_range(id, None, len - 1..len + 1).unwrap(), None);
            assert_eq!(s.read_range(id, Some(len + 1), 0..10).unwrap(), None);
            assert_eq!(s.read_range(id, Some(len), 5..5).unwrap(), None);
        }
        s.sync_objects().unwrap();
    }
    for (id, _) in &ids {
        let (_, offset, _) = s.backend().locate(id).unwrap().unwrap();
        assert!(offset > 0, "packed");
    }
    // An object that is not stored: declined (a whole read says it is missing).
    assert_eq!(
        s.read_range(&ObjectId::of(b"absent"), Some(1 << 20), 0..10)
            .unwrap(),
        None
    );
}

/// Stored bytes of `data` in the framed layout with content cut at `cuts`
/// (the last size repeated to the end), as some writer may have cut it.
fn framed_with(data: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut z = zstd::bulk::Compressor::new(ZSTD_LEVEL).unwrap();
    z.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
        .unwrap();
    z.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .unwrap();
    let (mut out, mut sizes, mut at) = (Vec::new(), Vec::new(), 0);
    for i in 0.. {
        if at == data.len() {
            break;
        }
        let piece = &data[at..data.len().min(at + cuts[i.min(cuts.len() - 1)])];
        let frame = z.compress(piece).unwrap();
        sizes.push((frame.len() as u32, piece.len() as u32));
        out.extend_from_slice(&frame);
        at += piece.len();
    }
    framed::put_table(&mut out, &sizes);
    out
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut d = vec![0u8; n];
    rustix::rand::getrandom(&mut d, rustix::rand::GetRandomFlags::empty()).unwrap();
    d
}

#[test]
fn content_that_does_not_compress_is_cut_into_small_frames_and_found_without_its_table() {
    let (_d, s) = new_store();
    let small = framed::SMALL_FRAME as u32;
    let frames_of = |raw: &[u8]| -> Vec<u32> {
        raw_table(raw)
            .expect("framed")
            .frames
            .iter()
            .map(|f| f.len)
            .collect()
    };
    // Random: 16 KiB frames, each stored raw, so the length alone says
    // where every frame is, and that is where the table says they are.
    let random = random_bytes(300_001);
    let (id, _) = s.put_object(&random).unwrap();
    let raw = stored(&s, &id);
    let lens = frames_of(&raw);
    assert_eq!(lens.len(), 300_001usize.div_ceil(framed::SMALL_FRAME));
    assert!(
        lens[..lens.len() - 1].iter().all(|&l| l == small),
        "{lens:?}"
    );
    let guess = framed::Guess::of(random.len() as u64, raw.len() as u64);
    assert_eq!(guess.table_if_raw(), raw_table(&raw));
    // Compressible, then random: 64 KiB frames while it compresses, 16 KiB
    // after; the length fits no raw layout, so a read uses the table.
    let mut mixed: Vec<u8> = (0..200_000u32).map(|i| (i % 97) as u8).collect();
    mixed.extend(random_bytes(200_000));
    let (mid, _) = s.put_object(&mixed).unwrap();
    let mraw = stored(&s, &mid);
    let lens = frames_of(&mraw);
    assert_eq!(lens[0], framed::FRAME_SIZE as u32, "{lens:?}");
    assert_eq!(lens[lens.len() - 2], small, "{lens:?}");
    assert_eq!(
        framed::Guess::of(mixed.len() as u64, mraw.len() as u64).table_if_raw(),
        None
    );
    // Written by storefs before: random in 64 KiB raw frames (the guess
    // knows that size too); and a layout whose length fits 16 KiB raw
    // frames but whose first two frames are cut elsewhere (8 + 24 KiB): the
    // guess is wrong there and the reader must notice and read the table.
    let old_random = random_bytes(500_000);
    let old = framed_with(&old_random, &[framed::FRAME_SIZE]);
    let shifted_data = random_bytes(300_000);
    let shifted = framed_with(&shifted_data, &[8 << 10, 24 << 10, framed::SMALL_FRAME]);
    assert!(
        framed::Guess::of(shifted_data.len() as u64, shifted.len() as u64)
            .table_if_raw()
            .is_some(),
        "the shifted layout looks raw by its length"
    );
    let mut objects = vec![(id, random), (mid, mixed)];
    for (data, stored_bytes) in [(old_random, old), (shifted_data, shifted)] {
        let oid = ObjectId::of(&data);
        s.backend().write(&oid, &stored_bytes).unwrap();
        objects.push((oid, data));
    }
    s.sync_objects().unwrap();
    for (id, data) in &objects {
        assert!(s.backend().locate(id).unwrap().is_some(), "stored loose");
        let len = data.len() as u64;
        let f = framed::SMALL_FRAME as u64;
        let mut ranges = ranges_of(len);
        ranges.extend([
            f - 1..f + 1,
            2 * f..2 * f + 4096,
            8192..12288,
            40_000..44_096,
        ]);
        for r in ranges {
            for known in [Some(len), None] {
                let got = s.read_range(id, known, r.clone()).unwrap();
                assert_eq!(
                    got.as_deref(),
                    Some(&data[r.start as usize..r.end as usize]),
                    "range {r:?} of {len} (length given: {known:?})"
                );
            }
        }
        assert_eq!(&s.get_object(id, "t").unwrap(), data);
    }
}

#[test]
fn a_corrupt_frame_table_or_frame_is_an_error_not_wrong_bytes() {
    let data = random_bytes(300_000);
    // Packed (as every object is written), and loose (as a store before
    // 2026-12-05 holds a large one).
    for loose in [false, true] {
        let (_d, s) = new_store();
        let id = ObjectId::of(&data);
        if loose {
            let (_d2, packed) = new_store();
            packed.put_object(&data).unwrap();
            packed.sync_objects().unwrap();
            s.write_loose_object(&id, &stored(&packed, &id)).unwrap();
        } else {
            s.put_object(&data).unwrap();
            s.sync_objects().unwrap();
        }
        let (_, offset, _) = s.backend().locate(&id).unwrap().unwrap();
        assert_eq!(offset == 0, loose);
        let good = stored(&s, &id);
        assert!(raw_table(&good).is_some(), "framed");
        let len = data.len() as u64;
        let table_at = good.len() - framed::table_len_from_footer(&good).unwrap().unwrap();
        // Each byte of the table, then bytes in the middle of frames.
        let mut spots: Vec<usize> = (table_at..good.len()).collect();
        spots.extend([10, 70_000, 150_000, table_at - 1]);
        for at in spots {
            for flip in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[at] ^= flip;
                s.replace_stored_object(&id, &bad).unwrap();
                let whole = s.get_object(&id, "t");
                assert!(
                    matches!(whole, Err(Error::Corrupt { .. })),
                    "byte {at} ^ {flip:#x}: {:?}",
                    whole.map(|v| v.len())
                );
                for r in ranges_of(len) {
                    // A partial read gives the right bytes (the damage is
                    // elsewhere) or declines; never other bytes.
                    for known in [Some(len), None] {
                        if let Some(got) = s.read_range(&id, known, r.clone()).unwrap() {
                            assert_eq!(got, data[r.start as usize..r.end as usize], "byte {at}");
                        }
                    }
                }
            }
        }
        // Shortened (a loose file truncated; a pack record's bytes followed
        // by padding): an error too.
        let cut = if loose { 3 } else { 16 };
        s.replace_stored_object(&id, &good[..good.len() - cut])
            .unwrap();
        assert!(matches!(s.get_object(&id, "t"), Err(Error::Corrupt { .. })));
        let part = s.read_range(&id, Some(len), 0..10).unwrap();
        if loose {
            // Its length no longer places the frames, and its table is cut.
            assert_eq!(part, None);
        } else if let Some(part) = part {
            // The record keeps its length: the first frame is where it was,
            // whole, and checked.
            assert_eq!(part, data[..10]);
        }
        s.replace_stored_object(&id, &good).unwrap();
        assert_eq!(s.get_object(&id, "t").unwrap(), data);
    }
}

/// `n` objects each in a pack of its own (one sync each); their ids, and the
/// packs directory.
fn packs_of_one(s: &Store, n: usize) -> (Vec<ObjectId>, std::path::PathBuf) {
    let ids = (0..n)
        .map(|i| put_synced(s, format!("pack {i}").as_bytes()))
        .collect();
    (ids, s.root().join("objects/packs"))
}

/// The pack holding `id` (its name), as its own index says.
fn pack_of(packs: &std::path::Path, id: &ObjectId) -> String {
    for idx in pack_indexes(packs) {
        let entries = super::pack::decode_index(&fs::read(&idx).unwrap()).unwrap();
        if entries.iter().any(|e| e.id == *id) {
            return idx.file_stem().unwrap().to_str().unwrap().to_string();
        }
    }
    panic!("{id:?} is in no pack");
}

#[test]
fn a_fresh_process_finds_every_pack_without_listing_the_packs_directory() {
    let (_d, s) = new_store();
    // Some packs in the multi-pack index, some after it (the tail).
    let (ids, packs) = packs_of_one(&s, backend::MIDX_TAIL_PACKS + 5);
    let m = midx::Midx::open(&packs.join(midx::MIDX)).unwrap().unwrap();
    assert!(m.names.len() < ids.len(), "a tail outside the index");
    // The log holds the tail only: the index rewrote it.
    let logged = fs::read_to_string(packs.join(backend::PUBLISHED)).unwrap();
    assert_eq!(
        logged.lines().count(),
        ids.len() - m.names.len(),
        "{logged}"
    );
    let fresh = LocalBackend::new(s.root().join("objects"));
    fresh.refresh().unwrap();
    for id in &ids {
        assert!(fresh.contains(id).unwrap());
        assert!(fresh.read(id).unwrap().is_some());
    }
    assert_eq!(fresh.listings(), 0);
}

#[test]
fn a_quick_scan_never_vouches_for_a_pack_the_index_names_but_that_is_gone() {
    let (_d, s) = new_store();
    let (ids, packs) = packs_of_one(&s, backend::MIDX_TAIL_PACKS);
    let m = midx::Midx::open(&packs.join(midx::MIDX)).unwrap().unwrap();
    // Removed behind the index's back (a gc whose index rewrite failed).
    let gone = pack_of(&packs, &ids[0]);
    assert!(m.names.contains(&gone));
    fs::remove_file(packs.join(format!("{gone}.idx"))).unwrap();
    fs::remove_file(packs.join(format!("{gone}.pack"))).unwrap();
    let fresh = LocalBackend::new(s.root().join("objects"));
    fresh.refresh().unwrap();
    assert!(
        !fresh.contains(&ids[0]).unwrap(),
        "vouched for a removed pack"
    );
    assert!(fresh.read(&ids[0]).unwrap().is_none());
    for id in &ids[1..] {
        assert!(fresh.contains(id).unwrap());
    }
}

#[test]
fn a_pack_missing_from_the_log_is_found_by_a_read_and_a_torn_line_is_skipped() {
    let (_d, s) = new_store();
    let (ids, packs) = packs_of_one(&s, backend::MIDX_TAIL_PACKS + 2);
    let last = *ids.last().unwrap();
    let name = pack_of(&packs, &last);
    let log = packs.join(backend::PUBLISHED);
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains(&name), "{text}");
    // The line lost (an older storefs published it, or a crash), and a
    // torn line at the end.
    let kept: String = text
        .lines()
        .filter(|l| *l != name)
        .map(|l| format!("{l}\n"))
        .collect();
    fs::write(&log, format!("{kept}{}", &name[..7])).unwrap();
    let fresh = LocalBackend::new(s.root().join("objects"));
    fresh.refresh().unwrap();
    // The other packs are found without a listing.
    assert!(fresh.contains(&ids[0]).unwrap());
    assert_eq!(fresh.listings(), 0);
    // A read that misses lists the directory and finds it; `contains` may
    // have said no before that (a duplicate write, never a loss).
    assert!(fresh.read(&last).unwrap().is_some());
    assert_eq!(fresh.listings(), 1);
    assert!(fresh.contains(&last).unwrap());
    // A writer's store finds it too, and a new pack is logged again.
    let again = Store::open(s.root()).unwrap();
    let want = format!("pack {}", ids.len() - 1);
    assert_eq!(again.get_object(&last, "t").unwrap(), want.as_bytes());
    let id = put_synced(&again, b"after");
    let text = fs::read_to_string(&log).unwrap();
    assert!(
        text.ends_with(&format!("{}\n", pack_of(&packs, &id))),
        "{text}"
    );
}

#[test]
fn a_refresh_after_a_quick_scan_drops_a_tail_pack_removed_meanwhile() {
    let (_d, s) = new_store();
    let (ids, packs) = packs_of_one(&s, backend::MIDX_TAIL_PACKS + 2);
    let last = *ids.last().unwrap();
    let fresh = LocalBackend::new(s.root().join("objects"));
    fresh.refresh().unwrap();
    assert!(fresh.contains(&last).unwrap());
    // Removed with its line left in the log (a gc whose index rewrite failed),
    // then the writer's lease refreshes the view.
    let gone = pack_of(&packs, &last);
    fs::remove_file(packs.join(format!("{gone}.idx"))).unwrap();
    fs::remove_file(packs.join(format!("{gone}.pack"))).unwrap();
    assert!(
        fs::read_to_string(packs.join(backend::PUBLISHED))
            .unwrap()
            .contains(&gone)
    );
    fresh.refresh().unwrap();
    assert!(
        !fresh.contains(&last).unwrap(),
        "vouched for a removed pack"
    );
    assert!(fresh.contains(&ids[0]).unwrap());
    assert_eq!(fresh.listings(), 0);
}

#[test]
fn a_loose_object_that_is_a_symlink_a_fifo_or_too_large_is_not_read() {
    let (_t, s) = new_store();
    let id = ObjectId::of(b"never stored");
    let hex = id.to_hex();
    let dir = s.root().join("objects").join(&hex[..2]);
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(&hex[2..]);
    let secret = _t.path().join("secret");
    fs::write(&secret, b"root-only").unwrap();
    let fifo = |p: &Path| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap()
    };
    type Plant<'a> = (&'a str, Box<dyn Fn(&Path) + 'a>);
    let plants: Vec<Plant> = vec![
        (
            "is a symlink",
            Box::new(|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap()),
        ),
        (
            "is a symlink",
            Box::new(|p| std::os::unix::fs::symlink(&secret, p).unwrap()),
        ),
        ("(a FIFO)", Box::new(fifo)),
        (
            "more than the",
            Box::new(|p| {
                let f = fs::File::create(p).unwrap();
                f.set_len(backend::MAX_LOOSE_FILE + 1).unwrap();
            }),
        ),
    ];
    for (said, plant) in plants {
        let _ = fs::remove_file(&path);
        plant(&path);
        let e = s.backend().read(&id).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&*path.to_string_lossy()) && msg.contains(said),
            "{msg}"
        );
        assert!(!msg.contains("root-only"), "{msg}");
        assert!(s.backend().open_stored(&id).is_err(), "{said}");
    }
}
