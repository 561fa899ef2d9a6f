//! The `file://` remote's object store, [`NoFollowFs`]: object_store's
//! `ObjectStore` over a directory, where every path beneath the remote's
//! root is reached without following a symlink (issue 38, docs/security.md
//! "Files inside a store").
//!
//! The root is opened once, when the remote is opened (its own path, which
//! the user gave, may lead through symlinks); every key is then opened,
//! created, renamed, listed and deleted relative to that descriptor, with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` ([`crate::sys::open_beneath`])
//! and the `*at` calls on directories opened that way. A symlink swapped in
//! anywhere (for `packs/`, for a file in it, for a temp file's name) fails
//! the operation with a message naming it; nothing outside the root is ever
//! read, written or removed. Reads take only regular files.
//!
//! A key's parts are its file names as they are (as object_store's
//! `LocalFileSystem` lays them out, so a remote it wrote reads the same):
//! `refs/main` is the file `ROOT/refs/main`. A write goes to a new file
//! under an unguessable name beside its target, `NAME#DIGITS` (created
//! `O_EXCL | O_NOFOLLOW`; listings skip such names, as `LocalFileSystem`'s
//! do its own `NAME#N`), is flushed, and is renamed into place
//! (`RENAME_NOREPLACE` for [`PutMode::Create`]), its directory flushed
//! after. ETags are `LocalFileSystem`'s (inode, modification time, size).
//!
//! Semantics follow `LocalFileSystem` where storefs relies on them (a
//! missing key, or a directory, is `NotFound`; listing a missing prefix is
//! empty; `PutMode::Update` is not implemented: the `file://` ref lock,
//! `Remote::lock_ref`, stands in for it; deletes leave emptied
//! directories), with two differences: a symlink or a file that is not
//! regular is an error wherever it is met (listings included) instead of
//! being followed; `copy` writes a new file (a copy of the bytes, never a
//! hard link, which could link a symlink in).

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use futures::FutureExt;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::{Path, PathPart};
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    RenameOptions, RenameTargetMode, Result, UploadPart,
};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// The `store` of this module's `object_store::Error::Generic`s.
const STORE: &str = "file:// remote";

/// An object store over a local directory that follows no symlink beneath
/// it (see the module's documentation).
#[derive(Clone, Debug)]
pub struct NoFollowFs {
    root: Arc<Root>,
}

/// The remote's directory: its descriptor, opened once, and its path (for
/// messages only; nothing is opened by it after [`NoFollowFs::open`]).
#[derive(Debug)]
struct Root {
    dir: File,
    path: PathBuf,
}

impl std::fmt::Display for NoFollowFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NoFollowFs(file://{})", self.root.path.display())
    }
}

impl NoFollowFs {
    /// Open the directory `path` (resolved as given, symlinks on it
    /// followed: it is the remote the user named) as the store's root.
    pub fn open(path: &FsPath) -> io::Result<NoFollowFs> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = File::from(rustix::fs::open(path, flags, Mode::empty())?);
        Ok(NoFollowFs {
            root: Arc::new(Root {
                dir,
                path: path.to_path_buf(),
            }),
        })
    }

    /// The remote's directory, as it was named (for messages).
    pub fn path(&self) -> &FsPath {
        &self.root.path
    }

    /// The file `rel` (a `/`-separated path of plain names beneath the
    /// root), its missing directories created, opened for reading and
    /// writing and created if missing (mode 0644 less the umask), never
    /// through a symlink: for the `file://` ref lock.
    pub fn open_lock_file(&self, rel: &str) -> io::Result<File> {
        let rel = FsPath::new(rel);
        let (dir, name) = self.root.parent_io(rel, true)?;
        let flags = OFlags::RDWR | OFlags::CREATE;
        crate::sys::open_beneath(&dir, FsPath::new(name), flags, 0o644).map_err(Root::explain)
    }

    /// The names in directory `rel` (beneath the root, reached without a
    /// symlink), each with whether it is a regular file (a symlink is not);
    /// empty when the directory is missing.
    pub fn names_in(&self, rel: &str) -> io::Result<Vec<(OsString, bool)>> {
        let rel = FsPath::new(rel);
        let dir = match self.root.open_dir(rel) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Vec::new()),
            Err(e) => return Err(Root::explain(e)),
        };
        let mut out = Vec::new();
        for ent in rustix::fs::Dir::read_from(&dir)? {
            let ent = ent?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let kind = entry_type(&dir, ent.file_name(), ent.file_type())?;
            out.push((
                OsString::from_vec(name.to_vec()),
                kind == Some(FileType::RegularFile),
            ));
        }
        Ok(out)
    }
}

// ------------------------------------------------------------- errors

fn generic(msg: String) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE,
        source: msg.into(),
    }
}

fn not_found(path: &FsPath, source: io::Error) -> object_store::Error {
    object_store::Error::NotFound {
        path: path.display().to_string(),
        source: Box::new(source),
    }
}

fn is(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

impl Root {
    fn full(&self, rel: &FsPath) -> PathBuf {
        self.path.join(rel)
    }

    /// What `e` from reaching a path means here, when it means more than
    /// its errno (to follow the path): `ELOOP` is a symlink met, `EXDEV` a
    /// path out of the root.
    fn meaning(e: &io::Error) -> Option<&'static str> {
        if is(e, libc::ELOOP) {
            return Some(
                "is a symlink, or a directory on its path is one; storefs follows no symlink inside a file:// remote (remove it: storefs never makes one there)",
            );
        }
        if is(e, libc::EXDEV) {
            return Some("is not beneath the remote's directory");
        }
        None
    }

    /// `e` from reaching a path, as an `io::Error` that says what it means
    /// (for the caller to put after the path).
    fn explain(e: io::Error) -> io::Error {
        match Self::meaning(&e) {
            Some(m) => io::Error::new(io::ErrorKind::InvalidData, m),
            None => e,
        }
    }

    /// An `io::Error` from `what`ing `rel` as an object_store error:
    /// `NotFound` for a missing file (or a missing directory on its way),
    /// one line naming the path otherwise.
    fn error(&self, what: &str, rel: &FsPath, e: io::Error) -> object_store::Error {
        if is(&e, libc::ENOENT) {
            return not_found(&self.full(rel), e);
        }
        match Self::meaning(&e) {
            Some(m) => generic(format!("{} {m}", self.full(rel).display())),
            None => generic(format!("{what} {}: {e}", self.full(rel).display())),
        }
    }

    fn open(&self, rel: &FsPath, flags: OFlags, mode: u32) -> io::Result<File> {
        crate::sys::open_beneath(&self.dir, rel, flags, mode)
    }

    fn open_dir(&self, rel: &FsPath) -> io::Result<File> {
        self.open(rel, OFlags::RDONLY | OFlags::DIRECTORY, 0)
    }

    /// The regular file `rel` opened for reading (`O_NONBLOCK`: a FIFO
    /// there does not block the open), with its metadata. A directory is
    /// `NotFound` (as `LocalFileSystem` has it); a symlink, a FIFO, a socket
    /// or a device is an error naming it.
    fn open_regular(&self, rel: &FsPath) -> Result<(File, Metadata)> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let f = self
            .open(rel, flags, 0)
            .map_err(|e| self.error("opening", rel, e))?;
        let m = f.metadata().map_err(|e| self.error("reading", rel, e))?;
        if m.is_dir() {
            let e = io::Error::new(io::ErrorKind::NotFound, "is a directory");
            return Err(not_found(&self.full(rel), e));
        }
        if !m.is_file() {
            return Err(not_regular(&self.full(rel), &m));
        }
        Ok((f, m))
    }

    /// `rel`'s directory, opened without following a symlink (created with
    /// its missing parents when `create`, each new directory's parent
    /// flushed), and `rel`'s last name.
    fn parent_io<'r>(&self, rel: &'r FsPath, create: bool) -> io::Result<(File, &'r OsStr)> {
        let name = rel.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: no file name", rel.display()),
            )
        })?;
        let parent = rel.parent().unwrap_or(FsPath::new(""));
        match self.open_dir(parent) {
            Ok(d) => return Ok((d, name)),
            Err(e) if create && is(&e, libc::ENOENT) => {}
            Err(e) => return Err(e),
        }
        let mut cur = self.dir.try_clone()?;
        for part in parent.iter() {
            let made = match rustix::fs::mkdirat(&cur, part, Mode::from_raw_mode(0o777)) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(e) => return Err(e.into()),
            };
            let next = crate::sys::open_beneath(
                &cur,
                FsPath::new(part),
                OFlags::RDONLY | OFlags::DIRECTORY,
                0,
            )?;
            if made {
                cur.sync_all()?;
            }
            cur = next;
        }
        Ok((cur, name))
    }

    fn parent<'r>(&self, rel: &'r FsPath, create: bool) -> Result<(File, &'r OsStr)> {
        self.parent_io(rel, create)
            .map_err(|e| self.error("opening the directory of", rel, e))
    }

    /// Remove the file `rel` (a symlink there is removed, not followed).
    fn delete(&self, rel: &FsPath) -> Result<()> {
        let (dir, name) = self.parent(rel, false)?;
        rustix::fs::unlinkat(&dir, name, AtFlags::empty())
            .map_err(|e| self.error("deleting", rel, e.into()))
    }

    /// Write `rel` from `fill`: a new file beside it under an unguessable
    /// name, filled, flushed, closed and renamed into place (only if `rel`
    /// is absent when `create`), its directory flushed. The new file's
    /// metadata.
    fn write(
        &self,
        rel: &FsPath,
        create: bool,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> Result<Metadata> {
        let (dir, name) = self.parent(rel, true)?;
        let (mut file, tmp) =
            create_temp(&dir, name).map_err(|e| self.error("creating a file beside", rel, e))?;
        let written = fill(&mut file)
            .and_then(|()| file.sync_all())
            .and_then(|()| file.metadata());
        drop(file);
        let published = written.and_then(|m| publish(&dir, &tmp, name, create).map(|()| m));
        published.map_err(|e| {
            let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
            if is(&e, libc::EEXIST) && create {
                already_exists(&self.full(rel), e)
            } else {
                self.error("writing", rel, e)
            }
        })
    }

    /// Copy the regular file `from` to `to` (its bytes, into a new file,
    /// as [`Root::write`] writes).
    fn copy(&self, from: &FsPath, to: &FsPath, create: bool) -> Result<()> {
        let (mut src, _) = self.open_regular(from)?;
        self.write(to, create, |dst| io::copy(&mut src, dst).map(drop))
            .map(drop)
    }

    /// Rename the regular file `from` to `to` (only if `to` is absent when
    /// `create`), both directories flushed.
    fn rename(&self, from: &FsPath, to: &FsPath, create: bool) -> Result<()> {
        let (from_dir, from_name) = self.parent(from, false)?;
        let st = rustix::fs::statat(&from_dir, from_name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| self.error("reading", from, e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            let kind = kind_name(FileType::from_raw_mode(st.st_mode));
            return Err(generic(format!(
                "{} is not a regular file ({kind}); storefs moves only regular files inside a file:// remote",
                self.full(from).display()
            )));
        }
        let (to_dir, to_name) = self.parent(to, true)?;
        let flags = if create {
            RenameFlags::NOREPLACE
        } else {
            RenameFlags::empty()
        };
        match rustix::fs::renameat_with(&from_dir, from_name, &to_dir, to_name, flags) {
            Ok(()) => {}
            // A file system without RENAME_NOREPLACE: copy, then delete.
            Err(Errno::INVAL) if create => {
                self.copy(from, to, true)?;
                return self.delete(from);
            }
            Err(Errno::EXIST) if create => {
                return Err(already_exists(&self.full(to), Errno::EXIST.into()));
            }
            Err(e) => return Err(self.error("renaming", from, e.into())),
        }
        to_dir
            .sync_all()
            .and_then(|()| from_dir.sync_all())
            .map_err(|e| self.error("flushing the directory of", to, e))
    }

    /// Every regular file beneath directory `prefix` (none when it is
    /// missing or a file), walked without following a symlink; temp files
    /// skipped, anything else that is not a directory an error.
    fn walk(&self, prefix: &Path) -> Result<Vec<ObjectMeta>> {
        let mut out = Vec::new();
        let mut dirs = vec![prefix.clone()];
        while let Some(at) = dirs.pop() {
            let listing = self.read_dir(&at)?;
            dirs.extend(listing.common_prefixes);
            out.extend(listing.objects);
        }
        Ok(out)
    }

    /// What directory `prefix` holds: its directories and its regular
    /// files (temp files skipped); empty when it is missing or a file.
    fn read_dir(&self, prefix: &Path) -> Result<ListResult> {
        let rel = rel_of_prefix(prefix)?;
        let mut listing = ListResult {
            common_prefixes: Vec::new(),
            objects: Vec::new(),
            extensions: Default::default(),
        };
        let dir = match self.open_dir(&rel) {
            Ok(d) => d,
            // Missing (perhaps deleted meanwhile), or a file: nothing under it.
            Err(e) if is(&e, libc::ENOENT) || is(&e, libc::ENOTDIR) => return Ok(listing),
            Err(e) => return Err(self.error("listing", &rel, e)),
        };
        let entries =
            rustix::fs::Dir::read_from(&dir).map_err(|e| self.error("listing", &rel, e.into()))?;
        for ent in entries {
            let ent = ent.map_err(|e| self.error("listing", &rel, e.into()))?;
            let raw = ent.file_name();
            if matches!(raw.to_bytes(), b"." | b"..") {
                continue;
            }
            let name = OsStr::from_bytes(raw.to_bytes());
            let child = rel.join(name);
            let kind = match entry_type(&dir, raw, ent.file_type()) {
                Ok(Some(k)) => k,
                // Removed since the directory was read.
                Ok(None) => continue,
                Err(e) => return Err(self.error("listing", &child, e)),
            };
            let part = || {
                name.to_str()
                    .and_then(|n| PathPart::parse(n).ok())
                    .ok_or_else(|| {
                        generic(format!(
                            "{}: the name is not a key object_store can take (not UTF-8, or a control character); rename or remove it",
                            self.full(&child).display()
                        ))
                    })
            };
            match kind {
                FileType::Directory => listing.common_prefixes.push(prefix.clone().join(part()?)),
                FileType::RegularFile => {
                    if is_temp_name(name) {
                        continue;
                    }
                    let location = prefix.clone().join(part()?);
                    let st = match rustix::fs::statat(&dir, raw, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => st,
                        Err(Errno::NOENT) => continue,
                        Err(e) => return Err(self.error("listing", &child, e.into())),
                    };
                    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                        return Err(self.error("listing", &child, Errno::LOOP.into()));
                    }
                    listing.objects.push(meta_of_stat(&st, location));
                }
                FileType::Symlink => {
                    return Err(self.error("listing", &child, Errno::LOOP.into()));
                }
                other => {
                    return Err(generic(format!(
                        "{} is not a regular file ({}); a file:// remote holds only directories and regular files (remove it)",
                        self.full(&child).display(),
                        kind_name(other)
                    )));
                }
            }
        }
        listing.common_prefixes.sort();
        listing.objects.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(listing)
    }
}

fn already_exists(path: &FsPath, source: io::Error) -> object_store::Error {
    object_store::Error::AlreadyExists {
        path: path.display().to_string(),
        source: Box::new(source),
    }
}

fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "of an unknown type",
    }
}

fn not_regular(path: &FsPath, m: &Metadata) -> object_store::Error {
    let kind = kind_name(FileType::from_raw_mode(m.mode()));
    generic(format!(
        "{} is not a regular file ({kind}); storefs reads only regular files inside a file:// remote (remove it)",
        path.display()
    ))
}

/// The type of entry `name` of `dir`, as its directory entry says or else
/// as `fstatat` (not following a symlink) does; `None` when it is gone.
fn entry_type(dir: &File, name: &std::ffi::CStr, t: FileType) -> io::Result<Option<FileType>> {
    if t != FileType::Unknown {
        return Ok(Some(t));
    }
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

// ------------------------------------------------------------- names

/// Whether `name` is a temp file's, `NAME#DIGITS` (ours, and object_store's
/// `LocalFileSystem`'s `NAME#N`): never an object, and never a key's name.
fn is_temp_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    match b.iter().rposition(|&c| c == b'#') {
        Some(i) => {
            let digits = &b[i + 1..];
            !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
        }
        None => false,
    }
}

/// A key's parts as a relative file path: each part a plain name (never
/// empty, `.`, `..`, or holding `/` or NUL: `Path` makes none, and
/// `RESOLVE_BENEATH` would stop one anyway).
fn rel_of_prefix(location: &Path) -> Result<PathBuf> {
    let mut rel = PathBuf::new();
    for part in location.parts() {
        let p = part.as_ref();
        if p.is_empty() || p == "." || p == ".." || p.contains(['/', '\0']) {
            return Err(generic(format!(
                "'{location}' is not a key a file can have"
            )));
        }
        rel.push(p);
    }
    Ok(rel)
}

/// An object's key as a relative file path ([`rel_of_prefix`]); a key with
/// no name, or whose name is a temp file's (`NAME#DIGITS`), is refused.
fn rel_of(location: &Path) -> Result<PathBuf> {
    let rel = rel_of_prefix(location)?;
    match rel.file_name() {
        None => Err(generic(format!("'{location}' names no object"))),
        Some(n) if is_temp_name(n) => Err(generic(format!(
            "'{location}': a name ending in '#' and digits is a temp file's, not an object's"
        ))),
        Some(_) => Ok(rel),
    }
}

// ------------------------------------------------------------- files

/// A new file in `dir` beside `name`, `NAME#DIGITS` with 64 random bits
/// ([`crate::sys::create_new_in`]: nothing planted under that name, a
/// symlink included, is ever opened). The file, and its name.
fn create_temp(dir: &File, name: &OsStr) -> io::Result<(File, OsString)> {
    let temp_name = || {
        let mut r = [0u8; 8];
        crate::sys::random_bytes(&mut r)?;
        let mut tmp = name.to_os_string();
        tmp.push(format!("#{}", u64::from_le_bytes(r)));
        Ok(tmp)
    };
    crate::sys::create_new_in(dir, temp_name, 0o666)
}

/// Rename `tmp` to `name` in `dir` (`EEXIST` when `create` and `name` is
/// there), then flush `dir`.
fn publish(dir: &File, tmp: &OsStr, name: &OsStr, create: bool) -> io::Result<()> {
    if create {
        match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            // A file system without RENAME_NOREPLACE: a hard link fails
            // with EEXIST as well.
            Err(Errno::INVAL) => {
                rustix::fs::linkat(dir, tmp, dir, name, AtFlags::empty())?;
                let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        rustix::fs::renameat(dir, tmp, dir, name)?;
    }
    dir.sync_all()
}

/// `LocalFileSystem`'s ETag: inode, modification time (µs) and size.
fn e_tag(ino: u64, mtime: SystemTime, size: u64) -> String {
    let micros = mtime
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    format!("\"{ino:x}-{micros:x}-{size:x}\"")
}

fn meta_of(m: &Metadata, location: Path) -> ObjectMeta {
    let mtime = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    ObjectMeta {
        location,
        last_modified: mtime.into(),
        size: m.len(),
        e_tag: Some(e_tag(m.ino(), mtime, m.len())),
        version: None,
    }
}

fn meta_of_stat(st: &rustix::fs::Stat, location: Path) -> ObjectMeta {
    let mtime = SystemTime::UNIX_EPOCH
        + std::time::Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
    let size = st.st_size as u64;
    ObjectMeta {
        location,
        last_modified: mtime.into(),
        size,
        e_tag: Some(e_tag(st.st_ino, mtime, size)),
        version: None,
    }
}

/// `range` of `file` (`path` for messages), read in full: an error when it
/// starts past the end or the file is shorter.
fn read_range(file: &File, path: &FsPath, range: Range<u64>) -> Result<Bytes> {
    if range.start > range.end {
        return Err(generic(format!(
            "{}: range {}..{} is reversed",
            path.display(),
            range.start,
            range.end
        )));
    }
    let mut buf = vec![0u8; (range.end - range.start) as usize];
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], range.start + done as u64) {
            Ok(0) => {
                return Err(generic(format!(
                    "{}: range {}..{} is past its end ({} bytes read)",
                    path.display(),
                    range.start,
                    range.end,
                    done
                )));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(generic(format!("reading {}: {e}", path.display()))),
        }
    }
    Ok(buf.into())
}

/// Run `f` on tokio's blocking pool (file I/O blocks), or here outside a
/// runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt
            .spawn_blocking(f)
            .await
            .map_err(|e| generic(format!("a file task failed: {e}")))?,
        Err(_) => f(),
    }
}

fn not_implemented(operation: &str, store: &NoFollowFs) -> object_store::Error {
    object_store::Error::NotImplemented {
        operation: operation.to_string(),
        implementer: store.to_string(),
    }
}

#[async_trait]
impl ObjectStore for NoFollowFs {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let create = match opts.mode {
            PutMode::Overwrite => false,
            PutMode::Create => true,
            PutMode::Update(_) => {
                return Err(not_implemented(
                    "`put_opts` with mode `PutMode::Update`",
                    self,
                ));
            }
        };
        if !opts.attributes.is_empty() {
            return Err(not_implemented(
                "`put_opts` with `opts.attributes` specified",
                self,
            ));
        }
        let rel = rel_of(location)?;
        let root = self.root.clone();
        blocking(move || {
            let m = root.write(&rel, create, |f| {
                payload.iter().try_for_each(|b| f.write_all(b))
            })?;
            Ok(PutResult {
                e_tag: Some(e_tag(
                    m.ino(),
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    m.len(),
                )),
                version: None,
                extensions: Default::default(),
            })
        })
        .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(not_implemented(
                "`put_multipart_opts` with `opts.attributes` specified",
                self,
            ));
        }
        let rel = rel_of(location)?;
        let root = self.root.clone();
        blocking(move || {
            let (dir, name) = root.parent(&rel, true)?;
            let name = name.to_os_string();
            let (file, tmp) = create_temp(&dir, &name)
                .map_err(|e| root.error("creating a file beside", &rel, e))?;
            Ok(Box::new(Upload {
                state: Arc::new(UploadState {
                    root: root.clone(),
                    rel,
                    dir,
                    name,
                    tmp,
                    file: RwLock::new(Some(file)),
                }),
                offset: 0,
                finished: false,
            }) as Box<dyn MultipartUpload>)
        })
        .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let rel = rel_of(location)?;
        let location = location.clone();
        let root = self.root.clone();
        blocking(move || {
            let (file, m) = root.open_regular(&rel)?;
            let meta = meta_of(&m, location);
            options.check_preconditions(&meta)?;
            let range = match &options.range {
                Some(r) => r
                    .as_range(meta.size)
                    .map_err(|e| generic(format!("{}: {e}", root.full(&rel).display())))?,
                None => 0..meta.size,
            };
            Ok(GetResult {
                payload: GetResultPayload::File(file, root.full(&rel)),
                meta,
                range,
                attributes: Default::default(),
                extensions: Default::default(),
            })
        })
        .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let rel = rel_of(location)?;
        let ranges = ranges.to_vec();
        let root = self.root.clone();
        blocking(move || {
            let (file, _) = root.open_regular(&rel)?;
            let path = root.full(&rel);
            ranges
                .into_iter()
                .map(|r| read_range(&file, &path, r))
                .collect()
        })
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let root = self.root.clone();
        locations
            .map(move |location| {
                let root = root.clone();
                async move {
                    let location = location?;
                    let rel = rel_of(&location)?;
                    blocking(move || root.delete(&rel).map(|()| location)).await
                }
            })
            .buffered(10)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let root = self.root.clone();
        let prefix = prefix.cloned().unwrap_or_default();
        stream::once(async move { blocking(move || root.walk(&prefix)).await })
            .flat_map(|listed| {
                let items: Vec<Result<ObjectMeta>> = match listed {
                    Ok(metas) => metas.into_iter().map(Ok).collect(),
                    Err(e) => vec![Err(e)],
                };
                stream::iter(items)
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let root = self.root.clone();
        let prefix = prefix.cloned().unwrap_or_default();
        blocking(move || root.read_dir(&prefix)).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let create = matches!(options.mode, CopyMode::Create);
        let (from, to) = (rel_of(from)?, rel_of(to)?);
        let root = self.root.clone();
        blocking(move || root.copy(&from, &to, create)).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let create = matches!(options.target_mode, RenameTargetMode::Create);
        let (from, to) = (rel_of(from)?, rel_of(to)?);
        let root = self.root.clone();
        blocking(move || root.rename(&from, &to, create)).await
    }
}

// ------------------------------------------------------------- uploads

/// A multipart upload: its parts written at their offsets into a temp file
/// beside the target, renamed into place by `complete`; the temp file is
/// removed by `abort`, or when the upload is dropped unfinished.
#[derive(Debug)]
struct Upload {
    state: Arc<UploadState>,
    offset: u64,
    finished: bool,
}

#[derive(Debug)]
struct UploadState {
    root: Arc<Root>,
    rel: PathBuf,
    dir: File,
    name: OsString,
    tmp: OsString,
    /// `None` once completed or aborted. Parts write under the read lock
    /// (each at its own offset); completing and aborting take the write lock.
    file: RwLock<Option<File>>,
}

impl UploadState {
    fn aborted(&self) -> object_store::Error {
        generic(format!(
            "{}: the upload was completed or aborted already",
            self.root.full(&self.rel).display()
        ))
    }

    fn take_file(&self) -> Result<File> {
        let mut guard = self.file.write().unwrap_or_else(|e| e.into_inner());
        guard.take().ok_or_else(|| self.aborted())
    }

    fn remove_temp(&self) -> io::Result<()> {
        rustix::fs::unlinkat(&self.dir, &self.tmp, AtFlags::empty()).map_err(Into::into)
    }
}

#[async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let offset = self.offset;
        self.offset += data.content_length() as u64;
        let s = self.state.clone();
        blocking(move || {
            let guard = s.file.read().unwrap_or_else(|e| e.into_inner());
            let file = guard.as_ref().ok_or_else(|| s.aborted())?;
            let mut at = offset;
            for b in data.iter() {
                file.write_all_at(b, at)
                    .map_err(|e| s.root.error("writing", &s.rel, e))?;
                at += b.len() as u64;
            }
            Ok(())
        })
        .boxed()
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let s = self.state.clone();
        self.finished = true;
        blocking(move || {
            let file = s.take_file()?;
            let done = file
                .sync_all()
                .and_then(|()| file.metadata())
                .and_then(|m| {
                    drop(file);
                    publish(&s.dir, &s.tmp, &s.name, false).map(|()| m)
                });
            match done {
                Ok(m) => Ok(PutResult {
                    e_tag: Some(e_tag(
                        m.ino(),
                        m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                        m.len(),
                    )),
                    version: None,
                    extensions: Default::default(),
                }),
                Err(e) => {
                    let _ = s.remove_temp();
                    Err(s.root.error("writing", &s.rel, e))
                }
            }
        })
        .await
    }

    async fn abort(&mut self) -> Result<()> {
        let s = self.state.clone();
        self.finished = true;
        blocking(move || {
            drop(s.take_file()?);
            s.remove_temp()
                .map_err(|e| s.root.error("removing the upload of", &s.rel, e))
        })
        .await
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.state.remove_temp();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::integration;
    use std::os::unix::fs::symlink;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// object_store's own conformance tests (its `integration` module),
    /// those `LocalFileSystem` runs: every one that applies to a store
    /// without attributes, conditional updates, paginated listing or
    /// `MultipartStore` (see the report below each skipped one).
    #[test]
    fn object_store_conformance() {
        let tmp = tempfile::tempdir().unwrap();
        let store = NoFollowFs::open(tmp.path()).unwrap();
        rt().block_on(async {
            integration::put_get_delete_list(&store).await;
            integration::list_with_offset_exclusivity(&store).await;
            integration::get_opts(&store).await;
            integration::list_uses_directories_correctly(&store).await;
            integration::list_with_delimiter(&store).await;
            integration::rename_and_copy(&store).await;
            integration::copy_if_not_exists(&store).await;
            integration::copy_rename_nonexistent_object(&store).await;
            integration::stream_get(&store).await;
            // No PutMode::Update (as LocalFileSystem): NotImplemented.
            integration::put_opts(&store, false).await;
            let e = integration::get_nonexistent_object(&store, None)
                .await
                .unwrap_err();
            assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
        });
        // No temp file left behind by a write or an aborted upload.
        let mut left = Vec::new();
        let mut dirs = vec![tmp.path().to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    dirs.push(e.path());
                } else if is_temp_name(&e.file_name()) {
                    left.push(e.path());
                }
            }
        }
        assert!(left.is_empty(), "{left:?}");
    }

    /// Outside a tokio runtime (the file work runs in place) and on a
    /// current-thread one (as a lazy mount's), the same answers.
    #[test]
    fn works_without_a_runtime_and_on_a_current_thread_one() {
        let tmp = tempfile::tempdir().unwrap();
        let store = NoFollowFs::open(tmp.path()).unwrap();
        let key = Path::from("a/b");
        futures::executor::block_on(async {
            store.put(&key, "xyz".into()).await.unwrap();
            assert_eq!(store.get_range(&key, 1..3).await.unwrap().as_ref(), b"yz");
        });
        let current = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        current.block_on(async {
            let all: Vec<_> = store
                .list(None)
                .map(|m| m.unwrap().location)
                .collect()
                .await;
            assert_eq!(all, vec![key.clone()]);
            store.delete(&key).await.unwrap();
        });
    }

    fn files_under(dir: &FsPath) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap();
                (p, b)
            })
            .collect();
        out.sort();
        out
    }

    /// The remote's `packs` swapped for a symlink to another directory (after
    /// the check `Remote::open` makes): object_store's `LocalFileSystem`
    /// writes, lists, reads and deletes through it; this store does none of
    /// that, and says why, naming the path.
    #[test]
    fn a_symlinked_directory_is_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote");
        let victim = tmp.path().join("victim");
        std::fs::create_dir_all(&remote).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("t-1.pack"), b"theirs").unwrap();
        symlink(&victim, remote.join("packs")).unwrap();
        let before = files_under(&victim);

        let local = object_store::local::LocalFileSystem::new_with_prefix(&remote).unwrap();
        let ours = NoFollowFs::open(&remote).unwrap();
        let new = Path::from("packs/t-2.pack");
        let theirs = Path::from("packs/t-1.pack");
        rt().block_on(async {
            // What LocalFileSystem does (why storefs has its own store).
            local.put(&new, "mine".into()).await.unwrap();
            assert!(victim.join("t-2.pack").exists());
            local.delete(&new).await.unwrap();
            assert_eq!(files_under(&victim), before);

            let is_symlink = |e: object_store::Error| {
                let text = e.to_string();
                assert!(
                    text.contains("is a symlink")
                        && text.contains(&*remote.join("packs").to_string_lossy()),
                    "{text}"
                );
            };
            is_symlink(ours.put(&new, "mine".into()).await.unwrap_err());
            is_symlink(ours.get(&theirs).await.unwrap_err());
            is_symlink(ours.head(&theirs).await.unwrap_err());
            is_symlink(ours.get_ranges(&theirs, &[0..1, 2..3]).await.unwrap_err());
            is_symlink(ours.delete(&theirs).await.unwrap_err());
            ours.put(&Path::from("x"), "x".into()).await.unwrap();
            is_symlink(ours.copy(&Path::from("x"), &new).await.unwrap_err());
            let listed: Vec<_> = ours.list(Some(&Path::from("packs"))).collect().await;
            assert_eq!(listed.len(), 1, "{listed:?}");
            is_symlink(listed.into_iter().next().unwrap().unwrap_err());
            is_symlink(
                ours.list_with_delimiter(Some(&Path::from("packs")))
                    .await
                    .unwrap_err(),
            );
            // Listing the root meets the link too.
            let listed: Vec<_> = ours.list(None).collect().await;
            is_symlink(listed.into_iter().next().unwrap().unwrap_err());
            match ours.put_multipart(&new).await {
                Ok(_) => panic!("a multipart upload through the link"),
                Err(e) => is_symlink(e),
            }
        });
        assert_eq!(files_under(&victim), before);
    }

    /// A symlink (to a file outside) in place of a file: never read or
    /// listed; a write replaces the link itself and a delete removes it, the
    /// file it named untouched. A FIFO is refused without blocking.
    #[test]
    fn a_symlinked_or_special_file_is_never_followed_or_read() {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote");
        std::fs::create_dir_all(remote.join("refs")).unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, b"secret\n").unwrap();
        symlink(&secret, remote.join("refs/main")).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            remote.join("refs/fifo"),
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let ours = NoFollowFs::open(&remote).unwrap();
        let main = Path::from("refs/main");
        rt().block_on(async {
            let e = ours.get(&main).await.unwrap_err().to_string();
            assert!(e.contains("is a symlink") && e.contains("refs/main"), "{e}");
            let e = ours
                .get(&Path::from("refs/fifo"))
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file (a FIFO)"), "{e}");
            let e = ours
                .list(Some(&Path::from("refs")))
                .collect::<Vec<_>>()
                .await;
            assert!(e.iter().any(|r| r.is_err()), "{e:?}");
            let e = ours
                .rename(&main, &Path::from("refs/other"))
                .await
                .unwrap_err();
            assert!(
                e.to_string().contains("not a regular file (a symlink)"),
                "{e}"
            );

            // PutMode::Create: the link counts as there.
            let opts = PutOptions::from(PutMode::Create);
            let e = ours
                .put_opts(&main, "new\n".into(), opts)
                .await
                .unwrap_err();
            assert!(
                matches!(e, object_store::Error::AlreadyExists { .. }),
                "{e}"
            );
            ours.put(&main, "new\n".into()).await.unwrap();
            assert_eq!(std::fs::read(&secret).unwrap(), b"secret\n");
            assert!(
                !std::fs::symlink_metadata(remote.join("refs/main"))
                    .unwrap()
                    .is_symlink()
            );
            assert_eq!(
                ours.get(&main)
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
                    .as_ref(),
                b"new\n"
            );

            std::fs::remove_file(remote.join("refs/main")).unwrap();
            symlink(&secret, remote.join("refs/main")).unwrap();
            ours.delete(&main).await.unwrap();
            assert!(std::fs::symlink_metadata(remote.join("refs/main")).is_err());
            assert_eq!(std::fs::read(&secret).unwrap(), b"secret\n");
        });
        // The ref lock's file and the names of refs/ likewise.
        std::fs::create_dir(remote.join("locks")).unwrap();
        symlink(&secret, remote.join("locks/ref-main")).unwrap();
        let e = ours
            .open_lock_file("locks/ref-main")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symlink"), "{e}");
        std::fs::remove_dir_all(remote.join("refs")).unwrap();
        symlink(tmp.path(), remote.join("refs")).unwrap();
        let e = ours.names_in("refs").unwrap_err().to_string();
        assert!(e.contains("is a symlink"), "{e}");
        assert_eq!(std::fs::read(&secret).unwrap(), b"secret\n");
    }

    /// The root itself may be reached through a symlink (the user named it);
    /// it is resolved once, when opened.
    #[test]
    fn the_root_may_be_named_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        symlink(&real, tmp.path().join("link")).unwrap();
        let ours = NoFollowFs::open(&tmp.path().join("link")).unwrap();
        rt().block_on(async {
            ours.put(&Path::from("refs/main"), "x\n".into())
                .await
                .unwrap();
        });
        assert_eq!(std::fs::read(real.join("refs/main")).unwrap(), b"x\n");
    }

    /// Keys with a temp file's name are not objects: refused for writes,
    /// skipped by listings (as LocalFileSystem's `NAME#N`).
    #[test]
    fn temp_names_are_no_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let ours = NoFollowFs::open(tmp.path()).unwrap();
        std::fs::write(tmp.path().join("x#123"), b"").unwrap();
        rt().block_on(async {
            let e = ours
                .put(&Path::parse("y#1").unwrap(), "".into())
                .await
                .unwrap_err();
            assert!(e.to_string().contains("temp file"), "{e}");
            let kept = Path::parse("y#a1").unwrap();
            ours.put(&kept, "".into()).await.unwrap();
            let all: Vec<_> = ours.list(None).map(|m| m.unwrap().location).collect().await;
            assert_eq!(all, vec![kept]);
        });
    }
}
