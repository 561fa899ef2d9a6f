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
    let fan = s.root().join("objects").join(&id.to_hex()[..2]);
    assert_eq!(fs::read_dir(&fan).unwrap().count(), 1, "no temp file left");
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
    let fan = root.join("objects").join(&id.to_hex()[..2]);
    assert_eq!(fs::read_dir(&fan).unwrap().count(), 0, "temp file removed");
}

#[test]
fn corruption_and_missing_are_detected() {
    let (_d, s) = new_store();
    let (id, _) = s.put_object(b"precious bytes").unwrap();
    s.sync_objects().unwrap();
    let path = s
        .root()
        .join("objects")
        .join(&id.to_hex()[..2])
        .join(&id.to_hex()[2..]);
    // Valid zstd of different content under the same name.
    let other = zstd::bulk::compress(b"precious bytez", 3).unwrap();
    fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    fs::write(&path, other).unwrap();
    assert!(matches!(s.get_object(&id, "t"), Err(Error::Corrupt { .. })));
    // Not zstd at all.
    fs::write(&path, b"garbage").unwrap();
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
