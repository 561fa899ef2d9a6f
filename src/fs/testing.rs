//! Fixtures the unit tests of the views share: a root caller, store
//! entries, checkpoint records and directory handles. Test builds only.

use super::view::{Caller, Opened, Readdir};
use crate::store::{Checkpoint, Content, Entry, Kind, ObjectId, Source};

/// Root, with no process and no umask.
pub const ROOT: &Caller = &Caller {
    uid: 0,
    gid: 0,
    pid: 0,
    umask: 0,
};

/// A store entry `name` of `kind` with `content`: mode 0644, owned by root,
/// at the epoch, size 0, one link, no device number, no xattrs. Tests set
/// the fields they care about with struct update syntax.
pub fn entry(name: &str, kind: Kind, content: Content) -> Entry {
    Entry {
        name: name.as_bytes().to_vec(),
        kind,
        perm: 0o644,
        uid: 0,
        gid: 0,
        mtime_ns: 0,
        ctime_ns: 0,
        size: 0,
        nlink: 1,
        link_id: 0,
        rdev: 0,
        xattrs: vec![],
        flags: 0,
        content,
    }
}

/// A checkpoint record of tree `root` with `parents` and `message`, at time
/// 1, with no origin and a default source.
pub fn checkpoint(root: ObjectId, parents: Vec<ObjectId>, message: String) -> Checkpoint {
    Checkpoint {
        version: 1,
        root,
        parents,
        origin: None,
        time_ns: 1,
        message,
        source: Source::default(),
    }
}

/// A readdirplus request on handle `fh`, resuming at `offset`.
pub fn plus(fh: u64, offset: u64) -> Readdir {
    Readdir {
        fh,
        offset,
        plus: true,
    }
}

/// The handle of an open that gives one.
pub fn fh(o: Opened) -> u64 {
    match o {
        Opened::Handle { fh, .. } => fh,
        Opened::Stateless => panic!("this open gives a handle"),
    }
}
