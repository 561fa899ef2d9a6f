//! Export a checkpoint as a standard tar archive (plain, `.tar.zst` or
//! `.tar.gz`), optionally split into parts, with a `sha256sum` manifest.
//!
//! Headers are built from tree entries (the filesystem is never read): GNU
//! headers (long names as `L`/`K` records), PAX records for what they cannot
//! hold (mtime/ctime with nanoseconds, `SCHILY.xattr.*`, a directory's size
//! as a `comment`, which readers ignore). One top-level directory named after
//! the origin's basename holds the tree, so extraction recreates the store
//! directory and a re-import finds the same tree. See docs/format.md.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

use super::archive::SIZE_COMMENT;
use super::archive::parts::successors;
use super::{Error, IoAt, Result};
use crate::store::progress::{Progress, SharedProgress};
use crate::store::{Checkpoint, Content, Entry, Kind, ObjectId, Store, to_hex};

/// Compression of the exported archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Zstd,
    Gzip,
}

impl Compression {
    /// A name that asks for a compression export does not write (`.xz`,
    /// `.bz2`, …): writing a plain tar under it would mislead every reader.
    pub fn unsupported(path: &Path) -> Option<&'static str> {
        let n = path.to_string_lossy();
        [
            ".xz", ".txz", ".bz2", ".tbz", ".tbz2", ".lz", ".lz4", ".lzma", ".Z",
        ]
        .into_iter()
        .find(|ext| n.ends_with(ext))
    }

    /// From the output name: `.zst` → zstd, `.gz`/`.tgz` → gzip, else plain tar.
    pub fn from_name(path: &Path) -> Compression {
        let n = path.to_string_lossy();
        if n.ends_with(".zst") || n.ends_with(".tzst") {
            Compression::Zstd
        } else if n.ends_with(".gz") || n.ends_with(".tgz") {
            Compression::Gzip
        } else {
            Compression::None
        }
    }
}

#[derive(Clone, Debug)]
pub struct ExportOptions {
    pub compression: Compression,
    /// Bytes per part; `None` = one file.
    pub split: Option<u64>,
    /// zstd worker threads; 0 = all cores.
    pub threads: usize,
    /// Told the file bytes to write (when the checkpoint's record says),
    /// advanced by each file's size; entry counts as messages.
    pub progress: SharedProgress,
}

/// What an export wrote.
#[derive(Clone, Debug)]
pub struct Exported {
    /// Files written, in order, with their sha256.
    pub parts: Vec<(PathBuf, String)>,
    /// sha256 of the joined archive.
    pub sha256: String,
    /// The `sha256sum`-format manifest.
    pub manifest: PathBuf,
    /// What it holds: a line per file written and, when split, one for the
    /// joined archive (file names relative to the manifest's directory).
    pub manifest_text: String,
    pub entries: u64,
    pub warnings: Vec<String>,
}

/// The PAX keyword of the archive's global header (its first entry) that
/// records the checkpoint's origin. GNU tar and bsdtar keep unknown keywords
/// of a global header to themselves; `import` reads it back.
pub const ORIGIN_KEY: &str = "STOREFS.origin";

/// The placeholder directory GNU tar puts a PAX 1.0 sparse file's header name
/// in (`%d/GNUSparseFile.%p/%f`); a fixed 0 for the pid keeps exports reproducible.
const SPARSE_DIR: &[u8] = b"GNUSparseFile.0";

/// Deepest directory nesting exported (a hostile tree cannot overflow the stack).
const MAX_DEPTH: usize = 2048;

/// Write checkpoint `ckpt` to `out` (or `out.part00`, … with a split) and `out.sha256`.
/// Existing files are never overwritten; on failure what was written is removed.
pub fn export(
    store: &Store,
    ckpt: &Checkpoint,
    id: &ObjectId,
    out: &Path,
    opts: &ExportOptions,
) -> Result<Exported> {
    let manifest = PathBuf::from(format!("{}.sha256", out.display()));
    let first = match opts.split {
        Some(_) => PathBuf::from(format!("{}.part00", out.display())),
        None => out.to_path_buf(),
    };
    for p in [&first, &manifest] {
        if p.exists() {
            return Err(Error::Archive(format!(
                "{} exists; remove it or choose another output name",
                p.display()
            )));
        }
    }
    let mut sink = PartWriter::new(out, opts.split);
    let result = write_all(store, ckpt, id, &mut sink, opts);
    let result = result.and_then(|(entries, warnings)| {
        let (parts, whole) = sink.finish().at(out)?;
        let mut text = String::new();
        for (p, h) in &parts {
            text.push_str(&format!("{h}  {}\n", file_name(p)));
        }
        if opts.split.is_some() {
            text.push_str(&format!("{whole}  {}\n", file_name(out)));
        }
        crate::store::write_file(&manifest, text.as_bytes(), 0o644, true).at(&manifest)?;
        Ok(Exported {
            parts,
            sha256: whole,
            manifest: manifest.clone(),
            manifest_text: text,
            entries,
            warnings,
        })
    });
    if result.is_err() {
        for p in sink.written() {
            let _ = fs::remove_file(p);
        }
    }
    result
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn write_all(
    store: &Store,
    ckpt: &Checkpoint,
    id: &ObjectId,
    sink: &mut PartWriter,
    opts: &ExportOptions,
) -> Result<(u64, Vec<String>)> {
    // Only a canonical origin is written (a record made before origins were
    // checked may hold another), and its basename names the top directory.
    let origin = ckpt
        .origin
        .as_deref()
        .filter(|o| crate::store::check_origin(o).is_none());
    let top: Vec<u8> = origin
        .and_then(|o| Path::new(o).file_name())
        .map(|n| n.as_bytes().to_vec())
        .filter(|n| !bad_name(n))
        .unwrap_or_else(|| format!("checkpoint-{}", &id.to_hex()[..12]).into_bytes());
    let root = store.root_entry(ckpt)?;
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()) as u32,
        n => n as u32,
    };
    let out_path = sink.current();
    let io_err = |e: io::Error| Error::Io {
        path: out_path.clone(),
        source: e,
    };
    let enc: Box<dyn FinishWrite + '_> = match opts.compression {
        Compression::None => Box::new(Plain(&mut *sink)),
        Compression::Zstd => {
            let mut z = zstd::stream::write::Encoder::new(&mut *sink, crate::store::ZSTD_LEVEL)
                .map_err(io_err)?;
            z.multithread(threads).map_err(io_err)?;
            Box::new(z)
        }
        Compression::Gzip => Box::new(flate2::write::GzEncoder::new(
            &mut *sink,
            flate2::Compression::default(),
        )),
    };
    if let Some(stats) = &ckpt.source.stats {
        opts.progress.set_total(stats.bytes);
    }
    let mut w = Writer {
        store,
        builder: tar::Builder::new(enc),
        links: HashMap::new(),
        entries: 0,
        warnings: Vec::new(),
        progress: &*opts.progress,
    };
    if let Some(o) = origin {
        w.global(&[(ORIGIN_KEY.to_string(), o.as_bytes().to_vec())])?;
    }
    w.entry(&top, &root, 0)?;
    let Writer {
        builder,
        entries,
        warnings,
        ..
    } = w;
    let enc = builder
        .into_inner()
        .map_err(|e| Error::Archive(format!("writing the archive: {e}")))?;
    enc.finish_box()
        .map_err(|e| Error::Archive(format!("writing the archive: {e}")))?;
    Ok((entries, warnings))
}

/// A writer that must be finished (compressors write their trailer).
trait FinishWrite: Write {
    fn finish_box(self: Box<Self>) -> io::Result<()>;
}

struct Plain<'a>(&'a mut PartWriter);

impl Write for Plain<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl FinishWrite for Plain<'_> {
    fn finish_box(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> FinishWrite for zstd::stream::write::Encoder<'_, W> {
    fn finish_box(self: Box<Self>) -> io::Result<()> {
        self.finish().map(drop)
    }
}

impl<W: Write> FinishWrite for flate2::write::GzEncoder<W> {
    fn finish_box(self: Box<Self>) -> io::Result<()> {
        self.finish().map(drop)
    }
}

struct Writer<'s, W: Write> {
    store: &'s Store,
    progress: &'s dyn Progress,
    builder: tar::Builder<W>,
    /// link_id → the path its first name was written at.
    links: HashMap<u64, Vec<u8>>,
    entries: u64,
    warnings: Vec<String>,
}

fn bad_name(name: &[u8]) -> bool {
    name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
}

impl<W: Write> Writer<'_, W> {
    fn err(&self, path: &[u8], e: io::Error) -> Error {
        Error::Archive(format!(
            "writing '{}' to the archive: {e}",
            String::from_utf8_lossy(path)
        ))
    }

    /// Write `e` at `path`, then (directories) everything below it.
    fn entry(&mut self, path: &[u8], e: &Entry, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Error::BadEntry {
                path: PathBuf::from(std::ffi::OsStr::from_bytes(path)),
                detail: format!("nested deeper than {MAX_DEPTH} directories"),
            });
        }
        self.entries += 1;
        self.progress.entries(self.entries);
        if e.kind == Kind::File {
            self.progress.advance(e.size);
        }
        let mut h = Header::new_gnu();
        h.set_mode(e.perm);
        h.set_uid(u64::from(e.uid));
        h.set_gid(u64::from(e.gid));
        h.set_mtime(e.mtime_ns.div_euclid(1_000_000_000).max(0) as u64);
        h.set_size(0);
        let mut pax: Vec<(String, Vec<u8>)> = vec![
            ("mtime".into(), pax_time(e.mtime_ns).into_bytes()),
            ("ctime".into(), pax_time(e.ctime_ns).into_bytes()),
        ];
        // Ids past a ustar field's 7 octal digits: the header holds them in
        // base-256 (a GNU extension); PAX `uid`/`gid` say it the standard way.
        for (key, v) in [("uid", e.uid), ("gid", e.gid)] {
            if u64::from(v) > OCTAL_7 {
                pax.push((key.into(), v.to_string().into_bytes()));
            }
        }
        for (k, v) in &e.xattrs {
            match std::str::from_utf8(k) {
                Ok(k) => pax.push((format!("SCHILY.xattr.{k}"), v.clone())),
                Err(_) => self.warnings.push(format!(
                    "{}: xattr with a non-UTF-8 name not exported",
                    String::from_utf8_lossy(path)
                )),
            }
        }
        // POSIX ACLs also as star's text records, which bsdtar restores (it
        // does not restore the system.posix_acl_* xattrs) and `tar --acls` reads.
        for (xattr, key) in ACL_XATTRS {
            if let Some(text) = e
                .xattrs
                .iter()
                .find(|(k, _)| k.as_slice() == xattr)
                .and_then(|(_, v)| acl_text(v))
            {
                pax.push((key.to_string(), text.into_bytes()));
            }
        }
        let first_link = (e.link_id != 0)
            .then(|| self.links.get(&e.link_id).cloned())
            .flatten();
        if let Some(target) = first_link {
            h.set_entry_type(EntryType::Link);
            self.pax(&pax, path)?;
            return self.link(h, path, &target);
        }
        if e.link_id != 0 {
            self.links.insert(e.link_id, path.to_vec());
        }
        let os = |p: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(p));
        match (&e.kind, &e.content) {
            (Kind::Dir, Content::Tree(tid)) => {
                h.set_entry_type(EntryType::Directory);
                if e.size != 0 {
                    pax.push((
                        "comment".into(),
                        format!("{SIZE_COMMENT}{}", e.size).into_bytes(),
                    ));
                }
                self.pax(&pax, path)?;
                let mut dir = path.to_vec();
                dir.push(b'/');
                self.builder
                    .append_data(&mut h, os(&dir), io::empty())
                    .map_err(|err| self.err(path, err))?;
                let tree = self.store.get_tree(tid, &String::from_utf8_lossy(path))?;
                for child in &tree.entries {
                    if bad_name(&child.name) {
                        return Err(Error::BadName {
                            dir: os(path),
                            name: String::from_utf8_lossy(&child.name).into_owned(),
                        });
                    }
                    let mut p = path.to_vec();
                    p.push(b'/');
                    p.extend_from_slice(&child.name);
                    self.entry(&p, child, depth + 1)?;
                }
                Ok(())
            }
            (Kind::File, Content::Extents(extents)) => {
                h.set_entry_type(EntryType::Regular);
                h.set_size(e.size);
                let total: u64 = extents.iter().map(|x| x.len).sum();
                if total != e.size {
                    return Err(Error::BadEntry {
                        path: os(path),
                        detail: format!("extents add up to {total} bytes, size is {}", e.size),
                    });
                }
                if let Some(plan) = sparse_plan(extents, e.size) {
                    return self.sparse(&h, pax, path, e.size, plan);
                }
                self.pax(&pax, path)?;
                let reader = ExtentReader::new(self.store, extents, path);
                self.builder
                    .append_data(&mut h, os(path), reader)
                    .map_err(|err| self.err(path, err))
            }
            (Kind::Symlink, Content::Target(t)) => {
                h.set_entry_type(EntryType::Symlink);
                self.pax(&pax, path)?;
                self.link(h, path, t)
            }
            (Kind::Fifo | Kind::CharDev | Kind::BlockDev, _) => {
                h.set_entry_type(match e.kind {
                    Kind::Fifo => EntryType::Fifo,
                    Kind::CharDev => EntryType::Char,
                    _ => EntryType::Block,
                });
                if e.kind != Kind::Fifo {
                    h.set_device_major(crate::sys::major(e.rdev))
                        .map_err(|err| self.err(path, err))?;
                    h.set_device_minor(crate::sys::minor(e.rdev))
                        .map_err(|err| self.err(path, err))?;
                }
                self.pax(&pax, path)?;
                self.builder
                    .append_data(&mut h, os(path), io::empty())
                    .map_err(|err| self.err(path, err))
            }
            (Kind::Socket, _) => {
                self.entries -= 1;
                self.warnings.push(format!(
                    "{}: socket not exported (tar cannot hold sockets)",
                    String::from_utf8_lossy(path)
                ));
                Ok(())
            }
            _ => Err(Error::BadEntry {
                path: os(path),
                detail: "kind and content disagree".into(),
            }),
        }
    }

    /// A file with holes as GNU tar's PAX sparse format 1.0 (what `tar
    /// --format=posix --sparse --sparse-version=1.0` writes): `GNU.sparse.*`
    /// records in the PAX header, a ustar header (GNU tar decodes the format
    /// only after a ustar-magic header) named `DIR/GNUSparseFile.0/NAME`,
    /// and as data the map (decimal lines: count, then offset and size of each
    /// data segment; padded to 512 bytes) followed by the segments' bytes.
    fn sparse(
        &mut self,
        gnu: &Header,
        mut pax: Vec<(String, Vec<u8>)>,
        path: &[u8],
        size: u64,
        plan: SparsePlan,
    ) -> Result<()> {
        let stored = plan.map.len() as u64 + plan.body.iter().map(|x| x.len).sum::<u64>();
        pax.splice(
            0..0,
            [
                ("GNU.sparse.major".to_string(), b"1".to_vec()),
                ("GNU.sparse.minor".to_string(), b"0".to_vec()),
                ("GNU.sparse.name".to_string(), path.to_vec()),
                (
                    "GNU.sparse.realsize".to_string(),
                    size.to_string().into_bytes(),
                ),
            ],
        );
        if stored > OCTAL_11 {
            pax.push(("size".into(), stored.to_string().into_bytes()));
        }
        self.pax(&pax, path)?;
        let mut h = Header::new_ustar();
        h.set_entry_type(EntryType::Regular);
        h.set_mode(gnu.mode().map_err(|e| self.err(path, e))?);
        h.set_uid(gnu.uid().map_err(|e| self.err(path, e))?);
        h.set_gid(gnu.gid().map_err(|e| self.err(path, e))?);
        h.set_mtime(gnu.mtime().map_err(|e| self.err(path, e))?);
        h.set_size(stored);
        let name = sparse_header_name(path);
        h.as_old_mut().name[..name.len()].copy_from_slice(&name);
        h.set_cksum();
        let reader =
            io::Cursor::new(plan.map).chain(ExtentReader::new(self.store, &plan.body, path));
        self.builder
            .append(&h, reader)
            .map_err(|e| self.err(path, e))
    }

    /// A PAX global header (typeflag `g`) holding `records`.
    fn global(&mut self, records: &[(String, Vec<u8>)]) -> Result<()> {
        let data = pax_records(records);
        let mut h = Header::new_ustar();
        h.set_entry_type(EntryType::XGlobalHeader);
        h.as_old_mut().name[..GLOBAL_NAME.len()].copy_from_slice(GLOBAL_NAME);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_size(data.len() as u64);
        h.set_cksum();
        self.builder
            .append(&h, data.as_slice())
            .map_err(|e| Error::Archive(format!("writing the archive's global header: {e}")))
    }

    fn pax(&mut self, records: &[(String, Vec<u8>)], path: &[u8]) -> Result<()> {
        self.builder
            .append_pax_extensions(records.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
            .map_err(|e| self.err(path, e))
    }

    /// A symlink or hardlink; the target is written byte-exact (a GNU `K`
    /// record when longer than the header's 100 bytes).
    fn link(&mut self, mut h: Header, path: &[u8], target: &[u8]) -> Result<()> {
        let field = h.as_old().linkname.len();
        if target.len() >= field {
            let mut k = Header::new_gnu();
            k.set_entry_type(EntryType::new(b'K'));
            k.set_size(target.len() as u64 + 1);
            k.set_mode(0o644);
            k.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
            k.set_cksum();
            let data = [target, b"\0"].concat();
            self.builder
                .append(&k, data.as_slice())
                .map_err(|e| self.err(path, e))?;
            h.set_link_name_literal(&target[..field - 1])
        } else {
            h.set_link_name_literal(target)
        }
        .map_err(|e| self.err(path, e))?;
        self.builder
            .append_data(
                &mut h,
                PathBuf::from(std::ffi::OsStr::from_bytes(path)),
                io::empty(),
            )
            .map_err(|e| self.err(path, e))
    }
}

/// The xattrs holding POSIX ACLs, and the PAX records star, GNU tar and
/// libarchive use for the same ACLs as text.
const ACL_XATTRS: [(&[u8], &str); 2] = [
    (crate::store::acl::ACCESS, "SCHILY.acl.access"),
    (crate::store::acl::DEFAULT, "SCHILY.acl.default"),
];

/// A Linux POSIX ACL xattr (version 2: entries of tag u16, perm u16, id u32,
/// little-endian) as star's text form, `user::rw-,user:1000:r--:1000,…`:
/// named entries carry the id both as name (no names are stored) and as the
/// extra id field libarchive writes and reads (GNU tar drops it). `None` for
/// anything else, which is then only exported as the xattr.
fn acl_text(v: &[u8]) -> Option<String> {
    use crate::store::acl::{GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ, raw_entries};
    let mut out = Vec::new();
    for (tag, perm, id) in raw_entries(v)? {
        if perm > 7 {
            return None;
        }
        let rwx: String = [(4, 'r'), (2, 'w'), (1, 'x')]
            .iter()
            .map(|&(bit, c)| if perm & bit != 0 { c } else { '-' })
            .collect();
        out.push(match tag {
            USER_OBJ => format!("user::{rwx}"),
            USER => format!("user:{id}:{rwx}:{id}"),
            GROUP_OBJ => format!("group::{rwx}"),
            GROUP => format!("group:{id}:{rwx}:{id}"),
            MASK => format!("mask::{rwx}"),
            OTHER => format!("other::{rwx}"),
            _ => return None,
        });
    }
    (!out.is_empty()).then(|| out.join(","))
}

/// The largest value of a 7- and an 11-digit octal header field.
const OCTAL_7: u64 = 0o7_777_777;
const OCTAL_11: u64 = 0o77_777_777_777;

/// The name of the global header entry (what `git archive` calls it), which
/// a reader that does not know PAX extracts as a small file.
const GLOBAL_NAME: &[u8] = b"pax_global_header";

/// PAX records: `LEN KEY=VALUE\n`, LEN counting the whole record.
fn pax_records(records: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in records {
        let rest = k.len() + v.len() + 3;
        let mut len = rest + 1;
        while len.to_string().len() + rest > len {
            len += 1;
        }
        out.extend_from_slice(format!("{len} {k}=").as_bytes());
        out.extend_from_slice(v);
        out.push(b'\n');
    }
    out
}

/// `DIR/GNUSparseFile.0/NAME`, cut to the 100 bytes of a ustar name field
/// (as GNU tar does; readers take the real name from `GNU.sparse.name`).
fn sparse_header_name(path: &[u8]) -> Vec<u8> {
    let (dir, base) = match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => (&b""[..], path),
    };
    let mut name = [dir, SPARSE_DIR, b"/", base].concat();
    name.truncate(100);
    while name.last() == Some(&b'/') {
        name.pop();
    }
    name
}

/// How a file with holes is written as a PAX 1.0 sparse entry.
#[derive(Debug, PartialEq, Eq)]
struct SparsePlan {
    /// The map block(s): count, then offset and size of each segment, one
    /// decimal number a line, NUL-padded to 512 bytes.
    map: Vec<u8>,
    /// The bytes of the segments, in order: data extents, and holes only
    /// where a segment takes in zeros.
    body: Vec<crate::store::Extent>,
}

/// The sparse layout of a file of `size` bytes made of `extents`, or `None`
/// when it has no hole (then it is a plain entry).
///
/// Every segment but the last is a multiple of 512 bytes long: GNU tar reads
/// each segment in whole blocks, libarchive and Python read them back to
/// back, and the two agree only then. A segment that would end inside a
/// block takes in the zeros after it (up to the next segment, with which it
/// then merges): a hole shorter than that, or not on a 512-byte boundary, is
/// written partly as zeros. A file that ends in a hole ends its map with a
/// zero-length segment at its size (as GNU tar writes it).
fn sparse_plan(extents: &[crate::store::Extent], size: u64) -> Option<SparsePlan> {
    if !extents.iter().any(|x| x.id.is_none() && x.len > 0) {
        return None;
    }
    // Data runs: [start, end) of consecutive data extents.
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut off = 0u64;
    for x in extents {
        if x.len > 0 && x.id.is_some() {
            match runs.last_mut() {
                Some(r) if r.1 == off => r.1 += x.len,
                _ => runs.push((off, off + x.len)),
            }
        }
        off += x.len;
    }
    // Whole blocks for every segment but the last: each run, when the next
    // one comes, is padded or merged with it.
    let mut padded_runs: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for run in runs {
        if let Some(last) = padded_runs.last_mut() {
            let padded = last.0 + (last.1 - last.0).div_ceil(512) * 512;
            if padded >= run.0 {
                last.1 = run.1;
                continue;
            }
            last.1 = padded;
        }
        padded_runs.push(run);
    }
    let runs = padded_runs;
    let mut map_entries = runs.clone();
    if runs.last().is_none_or(|r| r.1 < size) {
        map_entries.push((size, size));
    }
    let mut map = format!("{}\n", map_entries.len()).into_bytes();
    for (start, end) in &map_entries {
        map.extend_from_slice(format!("{start}\n{}\n", end - start).as_bytes());
    }
    map.resize(map.len().div_ceil(512) * 512, 0);
    // The bytes of each run, from the extents it covers.
    let mut body = Vec::new();
    let mut off = 0u64;
    let mut r = 0;
    for x in extents {
        let (xs, xe) = (off, off + x.len);
        off = xe;
        while r < runs.len() && runs[r].1 <= xs {
            r += 1;
        }
        let mut k = r;
        while k < runs.len() && runs[k].0 < xe {
            let (s, e) = (runs[k].0.max(xs), runs[k].1.min(xe));
            if e > s {
                debug_assert!(
                    x.id.is_none() || (s, e) == (xs, xe),
                    "a run holds whole extents"
                );
                body.push(crate::store::Extent {
                    len: e - s,
                    id: x.id.filter(|_| (s, e) == (xs, xe)),
                });
            }
            k += 1;
        }
    }
    Some(SparsePlan { map, body })
}

/// `SECS.NNNNNNNNN` for a PAX time record (negative times as `-SECS.N…`).
fn pax_time(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000)
}

/// A regular file's bytes from its extents (holes as zeros), verified chunk by chunk.
struct ExtentReader<'a> {
    store: &'a Store,
    extents: &'a [crate::store::Extent],
    next: usize,
    buf: Vec<u8>,
    pos: usize,
    zeros: u64,
    path: String,
}

impl<'a> ExtentReader<'a> {
    fn new(store: &'a Store, extents: &'a [crate::store::Extent], path: &[u8]) -> Self {
        ExtentReader {
            store,
            extents,
            next: 0,
            buf: Vec::new(),
            pos: 0,
            zeros: 0,
            path: String::from_utf8_lossy(path).into_owned(),
        }
    }
}

impl Read for ExtentReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.buf.len() {
                let n = out.len().min(self.buf.len() - self.pos);
                out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.zeros > 0 {
                let n = out
                    .len()
                    .min(usize::try_from(self.zeros).unwrap_or(usize::MAX));
                out[..n].fill(0);
                self.zeros -= n as u64;
                return Ok(n);
            }
            let Some(x) = self.extents.get(self.next) else {
                return Ok(0);
            };
            self.next += 1;
            match &x.id {
                Some(id) => {
                    self.buf = self
                        .store
                        .get_object(id, &self.path)
                        .map_err(io::Error::other)?;
                    self.pos = 0;
                    if self.buf.len() as u64 != x.len {
                        return Err(io::Error::other(format!(
                            "{}: chunk {id} holds {} bytes, the tree says {}",
                            self.path,
                            self.buf.len(),
                            x.len
                        )));
                    }
                }
                None => self.zeros = x.len,
            }
        }
    }
}

/// Writes the archive to `out`, or to `out.part00`, `out.part01`, … of
/// `split` bytes each, hashing each part and the whole.
struct PartWriter {
    out: PathBuf,
    split: Option<u64>,
    file: Option<(File, PathBuf, Sha256, u64)>,
    suffix: String,
    done: Vec<(PathBuf, String)>,
    whole: Sha256,
}

impl PartWriter {
    fn new(out: &Path, split: Option<u64>) -> PartWriter {
        PartWriter {
            out: out.to_path_buf(),
            split,
            file: None,
            suffix: String::new(),
            done: Vec::new(),
            whole: Sha256::new(),
        }
    }

    fn current(&self) -> PathBuf {
        self.file
            .as_ref()
            .map(|f| f.1.clone())
            .unwrap_or_else(|| self.out.clone())
    }

    /// Every file created so far (for clean-up on failure).
    fn written(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.done.iter().map(|(p, _)| p.clone()).collect();
        v.extend(self.file.as_ref().map(|f| f.1.clone()));
        v
    }

    fn open_next(&mut self) -> io::Result<()> {
        let path = match self.split {
            None => self.out.clone(),
            Some(_) => {
                self.suffix = if self.suffix.is_empty() {
                    "00".into()
                } else {
                    successors(&self.suffix)
                        .into_iter()
                        .next()
                        .ok_or_else(|| io::Error::other("too many parts"))?
                };
                PathBuf::from(format!("{}.part{}", self.out.display(), self.suffix))
            }
        };
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        self.file = Some((f, path, Sha256::new(), 0));
        Ok(())
    }

    fn close(&mut self) -> io::Result<()> {
        if let Some((f, path, h, _)) = self.file.take() {
            f.sync_all()?;
            self.done.push((path, to_hex(&h.finalize())));
        }
        Ok(())
    }

    fn finish(&mut self) -> io::Result<(Vec<(PathBuf, String)>, String)> {
        if self.file.is_none() && self.done.is_empty() {
            self.open_next()?;
        }
        self.close()?;
        if let Some(dir) = self.out.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::store::fsync_dir(dir)?;
        }
        let whole = std::mem::take(&mut self.whole);
        Ok((self.done.clone(), to_hex(&whole.finalize())))
    }
}

impl Write for PartWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if let (Some(limit), Some((_, _, _, len))) = (self.split, &self.file)
            && *len >= limit
        {
            self.close()?;
        }
        if self.file.is_none() {
            self.open_next()?;
        }
        let limit = self.split.unwrap_or(u64::MAX);
        let (f, _, h, len) = self.file.as_mut().expect("opened");
        let room = usize::try_from(limit - *len).unwrap_or(usize::MAX);
        let n = data.len().min(room);
        f.write_all(&data[..n])?;
        h.update(&data[..n]);
        self.whole.update(&data[..n]);
        *len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some((f, ..)) => f.flush(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Extent;

    fn data(len: u64) -> Extent {
        Extent {
            len,
            id: Some(ObjectId::of(&len.to_le_bytes())),
        }
    }

    fn hole(len: u64) -> Extent {
        Extent { len, id: None }
    }

    /// The map's numbers, and the body as (len, is data).
    type Plan = (Vec<u64>, Vec<(u64, bool)>);

    fn plan(extents: &[Extent]) -> Option<Plan> {
        let size = extents.iter().map(|x| x.len).sum();
        let p = sparse_plan(extents, size)?;
        assert_eq!(p.map.len() % 512, 0);
        let text = String::from_utf8(p.map.iter().copied().take_while(|&b| b != 0).collect());
        let nums = text.unwrap().lines().map(|l| l.parse().unwrap()).collect();
        Some((
            nums,
            p.body.iter().map(|x| (x.len, x.id.is_some())).collect(),
        ))
    }

    #[test]
    fn files_without_holes_are_plain() {
        assert_eq!(plan(&[]), None);
        assert_eq!(plan(&[data(10), data(5000)]), None);
        assert_eq!(plan(&[data(10), hole(0)]), None);
    }

    #[test]
    fn sparse_maps_as_gnu_tar_writes_them() {
        // Ends in a hole: a last zero-length segment at the size.
        assert_eq!(
            plan(&[hole(1 << 20), data(4096), hole(2 << 20)]),
            Some((
                vec![2, 1 << 20, 4096, (3 << 20) + 4096, 0],
                vec![(4096, true)]
            ))
        );
        // Only a hole.
        assert_eq!(plan(&[hole(4096)]), Some((vec![1, 4096, 0], vec![])));
        // Ends in data: no extra segment; adjacent data extents are one segment.
        assert_eq!(
            plan(&[data(4096), data(4096), hole(8192), data(3)]),
            Some((
                vec![2, 0, 8192, 16384, 3],
                vec![(4096, true), (4096, true), (3, true)]
            ))
        );
    }

    #[test]
    fn segments_but_the_last_fill_whole_blocks() {
        // 100 data bytes then a hole: the segment takes 412 zeros of the hole.
        assert_eq!(
            plan(&[data(100), hole(4096), data(7)]),
            Some((
                vec![2, 0, 512, 4196, 7],
                vec![(100, true), (412, false), (7, true)]
            ))
        );
        // A hole shorter than the padding: the segments merge across it.
        assert_eq!(
            plan(&[data(100), hole(10), data(7), hole(1000)]),
            Some((
                vec![2, 0, 117, 1117, 0],
                vec![(100, true), (10, false), (7, true)]
            ))
        );
    }

    #[test]
    fn acls_as_star_text() {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 6u16, u32::MAX),
            (2, 6, 1234),
            (4, 4, u32::MAX),
            (8, 5, 55),
            (0x10, 6, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&id.to_le_bytes());
        }
        assert_eq!(
            acl_text(&v).as_deref(),
            Some("user::rw-,user:1234:rw-:1234,group::r--,group:55:r-x:55,mask::rw-,other::---")
        );
        assert_eq!(acl_text(b"\x02\0\0\0"), None);
        assert_eq!(acl_text(&v[..v.len() - 1]), None);
        assert_eq!(acl_text(&[&[1u8, 0, 0, 0][..], &v[4..]].concat()), None);
    }

    #[test]
    fn pax_record_lengths_count_themselves() {
        for v in [0usize, 1, 5, 6, 7, 85, 86, 87, 88, 990, 995, 996, 1000] {
            let rec = pax_records(&[("k".into(), vec![b'x'; v])]);
            let (len, _) = std::str::from_utf8(&rec).unwrap().split_once(' ').unwrap();
            assert_eq!(len.parse::<usize>().unwrap(), rec.len(), "{v}");
        }
    }

    #[test]
    fn sparse_header_names_fit_a_ustar_field() {
        assert_eq!(sparse_header_name(b"top/a/f"), b"top/a/GNUSparseFile.0/f");
        let long = [b"top/".as_slice(), &[b'n'; 200]].concat();
        assert_eq!(sparse_header_name(&long).len(), 100);
        let dir = [b"top/".as_slice(), &[b'd'; 80], b"/f"].concat();
        assert!(!sparse_header_name(&dir).ends_with(b"/"));
    }
}
