//! Restore a checkpoint into an empty directory, byte- and metadata-exact.
//!
//! Security: the tree may be corrupt or hostile, so nothing is ever resolved
//! by path below `dest`. Every directory is opened with
//! `O_DIRECTORY|O_NOFOLLOW` relative to its parent's fd, every entry is
//! created with an `*at` call relative to its directory's fd (files with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`), and names that could step elsewhere (empty,
//! `.`, `..`, containing `/` or NUL) are refused. A symlink in the tree is
//! only ever created, never traversed.
//!
//! Order per entry: create, write data, chown (clears setuid), chmod, xattrs,
//! times. A directory's own metadata is applied after all of its contents, so
//! read-only directories and directory mtimes come out right.
//!
//! Privilege policy (kept simple): as root every failure is an error. As
//! another user, giving a file away (`chown` → EPERM) is skipped, and so are
//! xattrs outside `user.*` that the kernel refuses (EPERM, EACCES, ENOTSUP):
//! an unprivileged restore keeps what it can, like `tar` does. Device nodes
//! are made with `mknod` and their recorded numbers; without `CAP_MKNOD` the
//! restore stops at the first one with an error naming it and saying to
//! restore as root (never a silent skip; entries already written stay).

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::sys::{self, XattrTarget};
use super::{Error, IoAt, Result, join};
use crate::store::progress::{NoProgress, Progress};
use crate::store::{Checkpoint, Content, Entry, Extent, Kind, Store};

/// What a restore wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Entries created, the root directory included (hardlinks count per path).
    pub entries: u64,
    /// File bytes (logical sizes, holes included) of each inode once.
    pub bytes: u64,
}

/// Recreate checkpoint `ckpt` in `dest`, which is created if missing and must
/// be empty if it exists. Every chunk is verified; a missing or corrupt one is
/// an error naming the file.
pub fn restore(store: &Store, ckpt: &Checkpoint, dest: &Path) -> Result<RestoreStats> {
    restore_with(store, ckpt, dest, &NoProgress)
}

/// [`restore`], telling `progress` the file bytes to write (when the
/// checkpoint's record says), each file's size as it is written, and entry
/// counts as messages.
pub fn restore_with(
    store: &Store,
    ckpt: &Checkpoint,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<RestoreStats> {
    if let Some(stats) = &ckpt.source.stats {
        progress.set_total(stats.bytes);
    }
    // A directory's descriptor stays open while its subtree is restored
    // beneath it (never through a path a symlink could redirect): a tree N
    // deep holds N, past an ordinary user's usual soft limit of 1,024.
    crate::sys::raise_open_files_limit();
    let root = store.root_entry(ckpt)?;
    prepare_dest(dest)?;
    let cdest = sys::cstring(dest.as_os_str().as_bytes()).at(dest)?;
    let dest_fd = sys::open_dir_at(rustix::fs::CWD, &cdest).at(dest)?;
    let mut r = Restorer {
        store,
        dest,
        dest_fd: &dest_fd,
        links: HashMap::new(),
        stats: RestoreStats::default(),
        root: crate::sys::is_root(),
        progress,
    };
    r.restore_tree(dest_fd.as_fd(), &root)?;
    r.set_meta_fd(dest_fd.as_fd(), &root, dest)?;
    r.stats.entries += 1;
    Ok(r.stats)
}

/// Create `dest`, or check that the existing directory is empty.
fn prepare_dest(dest: &Path) -> Result<()> {
    match fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => {
            if fs::read_dir(dest).at(dest)?.next().is_some() {
                return Err(Error::DestNotEmpty(dest.to_path_buf()));
            }
            Ok(())
        }
        Ok(_) => Err(Error::NotADirectory(dest.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dest).at(dest),
        Err(e) => Err(Error::io(dest, e)),
    }
}

/// Refuse names that are not a single, ordinary path component.
fn check_name(name: &[u8], dir: &Path) -> Result<CString> {
    let bad = name.is_empty() || name == b"." || name == b".." || name.contains(&b'/');
    match sys::cstring(name) {
        Ok(c) if !bad => Ok(c),
        _ => Err(Error::BadName {
            dir: dir.to_path_buf(),
            name: String::from_utf8_lossy(name).into_owned(),
        }),
    }
}

struct Restorer<'a> {
    store: &'a Store,
    dest: &'a Path,
    dest_fd: &'a OwnedFd,
    /// link_id → relative path of the first restored path of that inode.
    links: HashMap<u64, Vec<u8>>,
    stats: RestoreStats,
    /// Running as root: every failure is an error (see the module docs).
    root: bool,
    progress: &'a dyn Progress,
}

impl Restorer<'_> {
    fn path_of(&self, rel: &[u8]) -> PathBuf {
        if rel.is_empty() {
            return self.dest.to_path_buf();
        }
        self.dest.join(OsStr::from_bytes(rel))
    }

    /// The entries of directory `entry` (at `dir_path`), checked sorted.
    fn dir_entries(&self, entry: &Entry, dir_path: &Path) -> Result<Vec<Entry>> {
        let Content::Tree(tree_id) = entry.content else {
            return Err(bad_entry(dir_path, "directory without a tree"));
        };
        let tree = self
            .store
            .get_tree(&tree_id, &dir_path.to_string_lossy())
            .map_err(|source| Error::Object {
                path: dir_path.to_path_buf(),
                source,
            })?;
        let sorted = tree.entries.windows(2).all(|w| w[0].name < w[1].name);
        if !sorted {
            return Err(bad_entry(
                dir_path,
                "tree names are duplicated or out of order",
            ));
        }
        Ok(tree.entries)
    }

    /// Restore everything below directory `root` into the open directory
    /// `dest`, depth first, with an explicit stack of open directories (no
    /// depth of nesting can overflow the thread's stack; each level holds
    /// one descriptor). A directory's own metadata is set once its contents
    /// are written.
    fn restore_tree(&mut self, dest: BorrowedFd<'_>, root: &Entry) -> Result<()> {
        struct Frame {
            /// `None`: `dest` (whose metadata the caller sets).
            fd: Option<OwnedFd>,
            entry: Entry,
            entries: std::vec::IntoIter<Entry>,
            rel: Vec<u8>,
            path: PathBuf,
        }
        let path = self.path_of(&[]);
        let mut stack = vec![Frame {
            fd: None,
            entries: self.dir_entries(root, &path)?.into_iter(),
            entry: root.clone(),
            rel: Vec::new(),
            path,
        }];
        while let Some(top) = stack.last_mut() {
            let Some(child) = top.entries.next() else {
                let done = stack.pop().expect("a frame");
                if let Some(fd) = &done.fd {
                    self.set_meta_fd(fd.as_fd(), &done.entry, &done.path)?;
                    self.stats.entries += 1;
                    self.progress.entries(self.stats.entries);
                }
                continue;
            };
            let dir = top.fd.as_ref().map_or(dest, |f| f.as_fd());
            let name = check_name(&child.name, &top.path)?;
            let rel = join(&top.rel, &child.name);
            if child.kind == Kind::Dir {
                let path = self.path_of(&rel);
                sys::mkdirat(dir, &name, 0o700).at(&path)?;
                let fd = sys::open_dir_at(dir, &name).at(&path)?;
                let entries = self.dir_entries(&child, &path)?.into_iter();
                stack.push(Frame {
                    fd: Some(fd),
                    entry: child,
                    entries,
                    rel,
                    path,
                });
            } else {
                self.restore_entry(dir, &name, &child, &rel)?;
                self.stats.entries += 1;
                self.progress.entries(self.stats.entries);
            }
        }
        Ok(())
    }

    /// Create one entry other than a directory ([`Restorer::restore_tree`]
    /// makes those).
    fn restore_entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        e: &Entry,
        rel: &[u8],
    ) -> Result<()> {
        let path = self.path_of(rel);
        let hardlink = e.link_id != 0 && e.kind != Kind::Dir;
        if hardlink && let Some(first) = self.links.get(&e.link_id) {
            return self.link_to(&first.clone(), dir, name, &path);
        }
        match (e.kind, &e.content) {
            (Kind::File, Content::Extents(extents)) => {
                self.restore_file(dir, name, e, extents, &path)?;
            }
            (Kind::Symlink, Content::Target(target)) => {
                let target = sys::cstring(target)
                    .map_err(|_| bad_entry(&path, "symlink target contains NUL"))?;
                sys::symlinkat(&target, dir, name).at(&path)?;
                self.set_meta_at(dir, name, e, &path)?;
            }
            (Kind::Fifo | Kind::CharDev | Kind::BlockDev | Kind::Socket, Content::None) => {
                self.make_node(dir, name, e, &path)?;
                self.set_meta_at(dir, name, e, &path)?;
            }
            (kind, _) => {
                return Err(bad_entry(
                    &path,
                    &format!("{kind:?} with mismatched content"),
                ));
            }
        }
        if hardlink {
            self.links.insert(e.link_id, rel.to_vec());
        }
        Ok(())
    }

    /// Write a regular file: sized first (holes stay unallocated), then each
    /// data extent at its offset, then metadata through the fd.
    fn restore_file(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        e: &Entry,
        extents: &[Extent],
        path: &Path,
    ) -> Result<()> {
        let total = extents
            .iter()
            .try_fold(0u64, |sum, x| sum.checked_add(x.len));
        if total != Some(e.size) {
            return Err(bad_entry(path, "extents do not add up to the file size"));
        }
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        let file = File::from(sys::openat(dir, name, flags, 0o600).at(path)?);
        file.set_len(e.size).at(path)?;
        let context = path.to_string_lossy();
        let mut offset = 0;
        for x in extents {
            if let Some(id) = &x.id {
                let data = self
                    .store
                    .get_object(id, &context)
                    .map_err(|source| Error::Object {
                        path: path.to_path_buf(),
                        source,
                    })?;
                if data.len() as u64 != x.len {
                    return Err(bad_entry(path, "a chunk's length differs from its extent"));
                }
                file.write_all_at(&data, offset).at(path)?;
            }
            offset += x.len;
        }
        self.set_meta_fd(file.as_fd(), e, path)?;
        self.stats.bytes += e.size;
        self.progress.advance(e.size);
        Ok(())
    }

    /// mknod a fifo, device or socket (created 0600; chmod comes later).
    fn make_node(&self, dir: BorrowedFd<'_>, name: &CStr, e: &Entry, path: &Path) -> Result<()> {
        let mode = e.kind.mode_bits() | 0o600;
        match sys::mknodat(dir, name, mode, e.rdev) {
            Err(source)
                if matches!(e.kind, Kind::CharDev | Kind::BlockDev)
                    && source.raw_os_error() == Some(libc::EPERM) =>
            {
                Err(Error::Mknod {
                    path: path.to_path_buf(),
                    source,
                })
            }
            r => r.at(path),
        }
    }

    /// Hardlink `dir/name` to the already restored `first` (relative to dest),
    /// opening each directory on the way with O_NOFOLLOW.
    fn link_to(
        &mut self,
        first: &[u8],
        dir: BorrowedFd<'_>,
        name: &CStr,
        path: &Path,
    ) -> Result<()> {
        let mut parts: Vec<&[u8]> = first.split(|&b| b == b'/').collect();
        let last = parts.pop().unwrap_or_default();
        let mut parent: Option<OwnedFd> = None;
        for part in parts {
            let at = parent.as_ref().map_or(self.dest_fd.as_fd(), |f| f.as_fd());
            let c = sys::cstring(part).at(path)?;
            parent = Some(sys::open_dir_at(at, &c).at(path)?);
        }
        let at = parent.as_ref().map_or(self.dest_fd.as_fd(), |f| f.as_fd());
        let c_last = sys::cstring(last).at(path)?;
        sys::linkat(at, &c_last, dir, name).at(path)
    }

    /// Owner, mode, xattrs and times of an open file or directory.
    fn set_meta_fd(&self, fd: BorrowedFd<'_>, e: &Entry, path: &Path) -> Result<()> {
        self.allow_unprivileged_chown(sys::fchown(fd, e.uid, e.gid))
            .at(path)?;
        sys::fchmod(fd, e.perm).at(path)?;
        for (k, v) in &e.xattrs {
            self.allow_unprivileged_xattr(k, XattrTarget::Fd(fd).set(k, v))
                .at(path)?;
        }
        sys::futimens(fd, e.mtime_ns).at(path)
    }

    /// Owner, mode (not for symlinks), xattrs and times of `dir/name`, which
    /// is not opened (a symlink, fifo, device or socket).
    fn set_meta_at(&self, dir: BorrowedFd<'_>, name: &CStr, e: &Entry, path: &Path) -> Result<()> {
        self.allow_unprivileged_chown(sys::lchownat(dir, name, e.uid, e.gid))
            .at(path)?;
        if e.kind != Kind::Symlink {
            sys::chmodat(dir, name, e.perm).at(path)?;
        }
        if !e.xattrs.is_empty() {
            // There is no l*xattrat: go through the directory fd's /proc link,
            // which pins the directory; the last component is not followed.
            let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
            p.extend_from_slice(name.to_bytes());
            let p = sys::cstring(&p).at(path)?;
            for (k, v) in &e.xattrs {
                self.allow_unprivileged_xattr(k, XattrTarget::Path(&p).set(k, v))
                    .at(path)?;
            }
        }
        sys::lutimensat(dir, name, e.mtime_ns).at(path)
    }

    fn allow_unprivileged_chown(&self, r: io::Result<()>) -> io::Result<()> {
        match r {
            Err(e) if !self.root && e.raw_os_error() == Some(libc::EPERM) => Ok(()),
            r => r,
        }
    }

    fn allow_unprivileged_xattr(&self, name: &[u8], r: io::Result<()>) -> io::Result<()> {
        let refused = |e: &io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOTSUP)
            )
        };
        match r {
            Err(e) if !self.root && !name.starts_with(b"user.") && refused(&e) => Ok(()),
            r => r,
        }
    }
}

fn bad_entry(path: &Path, detail: &str) -> Error {
    Error::BadEntry {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}
