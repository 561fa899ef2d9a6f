//! Import a tar archive (plain, zstd, gzip, xz, bzip2 or lzip; whole or split into parts) as a
//! checkpoint, in one streaming pass:
//!
//! - a **reader** thread reads the parts in order, hashes every byte (the
//!   whole archive and each part) and hands blocks on through a bounded channel;
//! - the **main** thread decompresses (format found from the magic bytes),
//!   parses the tar stream and cuts file data into chunks;
//! - **hasher** threads (all cores) hash, compress and store the chunks.
//!
//! Memory is bounded by the channels and, for the tree, by the directories
//! the archive is in ([`tartree`] closes the others), whatever the archive's
//! size. Nothing is published (no checkpoint, no ref, no index
//! entry) until the digests matched; objects stored before a failure are
//! harmless and make a re-run faster. The rules for hostile entries are in
//! docs/format.md ("Archive import rules") and [`tartree`].

pub mod parts;
pub mod reader;
mod tartree;
#[cfg(test)]
mod tartree_tests;

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

pub use parts::{Digests, Part, Parts, discover, expected_digests, hash_parts};
pub use tartree::{MAX_ENTRIES, MAX_NAME, MAX_PATH, OPEN_ENTRIES, SIZE_COMMENT};

use super::{Error, Result, escape};
use crate::store::chunk::{ChunkJob, Counters, hash_chunks};
use crate::store::progress::{Progress, SharedProgress, no_progress};
use crate::store::{
    self, ArchiveRecord, Checkpoint, Content, Entry, Kind, ObjectId, Source, Store, to_hex,
};
pub use reader::MAX_HEADER_BYTES;
use reader::{TarEntry, TarError, TarKind, TarReader};
use tartree::{TreeBuilder, kind_of, skip};
/// Raw archive bytes per block handed from the reader thread.
const BLOCK: usize = 1 << 20;

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Hasher threads; 0 = all cores.
    pub threads: usize,
    /// Told the archive's bytes, advanced as they are read; entry counts as messages.
    pub progress: SharedProgress,
    /// Entries held in memory before the directories the archive has left
    /// are stored and dropped ([`OPEN_ENTRIES`]; 0: after every entry, tests).
    pub open_entries: usize,
    /// Publish the objects written once this many wait
    /// ([`store::SYNC_OBJECTS`]; see [`Store::sync_objects_if_many`]).
    pub sync_objects: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            threads: 0,
            progress: no_progress(),
            open_entries: OPEN_ENTRIES,
            sync_objects: store::SYNC_OBJECTS,
        }
    }
}

/// What an import produced (nothing published yet).
#[derive(Clone, Debug)]
pub struct Imported {
    pub root: ObjectId,
    pub stats: store::Stats,
    /// sha256 of the joined archive, and of each part.
    pub sha256: String,
    pub part_sha256: Vec<String>,
    /// The single top-level directory's name, when the tree is that directory.
    pub top_name: Option<Vec<u8>>,
    /// The archive's `STOREFS.origin` record (what export wrote), else `root`
    /// from the top directory's STORE.json, when it is an absolute path.
    pub origin_hint: Option<String>,
    pub warnings: Vec<String>,
    /// The most archive entries held in memory at once (see
    /// [`ImportOptions::open_entries`]).
    pub peak_entries_held: usize,
}

/// Import `parts` into `store` and check them against `expected`. Errors name
/// the part involved; a digest mismatch wins over the parse error it caused.
pub fn import(
    store: &Store,
    parts: &Parts,
    expected: &Digests,
    opts: &ImportOptions,
) -> Result<Imported> {
    opts.progress.set_total(parts.total_size());
    let result = run(store, parts, expected, opts);
    opts.progress.finish();
    result
}

fn run(store: &Store, parts: &Parts, expected: &Digests, opts: &ImportOptions) -> Result<Imported> {
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let counters = Counters::default();
    let (chunk_tx, chunk_rx) = mpsc::sync_channel::<ChunkJob>(threads * 2);
    let chunk_rx = Mutex::new(chunk_rx);
    let (raw_tx, raw_rx) = mpsc::sync_channel::<Block>(4);
    let position = Arc::new(Position::default());
    let (parsed, hashes) = std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| hash_chunks(store, &chunk_rx, &counters));
        }
        let progress = opts.progress.clone();
        let reader = s.spawn(move || read_parts(parts, raw_tx, &*progress));
        let raw = ChannelReader {
            rx: raw_rx,
            cur: Vec::new(),
            pos: 0,
            position: position.clone(),
        };
        let parsed = parse(store, raw, &chunk_tx, parts, &position, &counters, opts);
        drop(chunk_tx);
        let hashes = match reader.join() {
            Ok(h) => h,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (parsed, hashes)
    });
    let (sha256, part_sha256) = hashes?;
    verify(
        parts,
        expected,
        &sha256,
        &part_sha256,
        parsed.as_ref().err(),
    )?;
    let mut built = parsed?;
    // The `STOREFS.origin` record export wrote ranks first: an archive storefs
    // wrote comes back at the origin it was exported with, whatever the
    // STORE.json inside says (a tree snapshotted elsewhere than its root).
    let origin_hint = match built
        .pax_origin
        .as_deref()
        .and_then(|o| origin_from_pax(o, &mut built.warnings))
    {
        Some(o) => Some(o),
        None => built
            .store_json
            .as_ref()
            .and_then(|e| origin_from_store_json(store, e)),
    };
    Ok(Imported {
        root: built.root,
        stats: store::Stats {
            entries: built.entries,
            bytes: built.bytes,
            new_objects: counters.objects.load(Ordering::Relaxed),
            new_bytes_compressed: counters.bytes.load(Ordering::Relaxed),
        },
        sha256,
        part_sha256,
        top_name: built.top_name,
        origin_hint,
        warnings: built.warnings,
        peak_entries_held: built.peak_held,
    })
}

/// Compare what was read with what was expected: each part first (so the
/// message names it), then the whole.
fn verify(
    parts: &Parts,
    expected: &Digests,
    whole: &str,
    each: &[String],
    cause: Option<&Error>,
) -> Result<()> {
    let hint = cause
        .map(|e| format!(" (reading it failed too: {e})"))
        .unwrap_or_default();
    for (p, actual) in parts.parts.iter().zip(each) {
        let name = parts::file_name(&p.path);
        if let Some(want) = expected.parts.get(&name)
            && want != actual
        {
            return Err(Error::DigestMismatch {
                what: shown(&p.path),
                expected: want.clone(),
                actual: actual.clone(),
                hint,
            });
        }
    }
    if let Some(want) = &expected.whole
        && want != whole
    {
        let hint = match cause {
            Some(Error::Corrupt { part, .. }) => format!(" (the data goes bad in {part})"),
            _ => hint,
        };
        return Err(Error::DigestMismatch {
            what: format!("the joined archive {}", parts.describe()),
            expected: want.clone(),
            actual: whole.to_string(),
            hint,
        });
    }
    Ok(())
}

/// `root` of a STORE.json, when it is an absolute path.
fn origin_from_store_json(store: &Store, e: &store::Entry) -> Option<String> {
    let mut buf = Vec::new();
    store.copy_content(e, &mut buf, "STORE.json").ok()?;
    let v: serde_json::Value = serde_json::from_slice(&buf).ok()?;
    let root = v.get("root")?.as_str()?;
    store::canonical_origin(root).ok()
}

/// The `STOREFS.origin` global PAX record export writes, when it is a
/// canonical absolute path (else ignored, with a warning).
fn origin_from_pax(o: &[u8], warnings: &mut Vec<String>) -> Option<String> {
    let ok = std::str::from_utf8(o)
        .ok()
        .and_then(|s| store::canonical_origin(s).ok());
    if ok.is_none() {
        warnings.push(format!(
            "the archive's STOREFS.origin '{}' is not a canonical absolute path; ignored (give --origin)",
            escape(o)
        ));
    }
    ok
}

// ---------------------------------------------------------------- reading

/// Raw archive bytes and the part they came from.
struct Block {
    part: usize,
    data: Vec<u8>,
}

/// Where the parser is in the raw archive (for error messages).
#[derive(Default)]
struct Position {
    part: AtomicUsize,
    offset: AtomicU64,
    /// The reader has delivered its last block.
    done: AtomicBool,
}

/// Reader thread: read every part to its end, hash it, pass it on while the
/// parser listens. Returns (whole sha256, per-part sha256).
fn read_parts(
    parts: &Parts,
    tx: SyncSender<Block>,
    progress: &dyn Progress,
) -> Result<(String, Vec<String>)> {
    let mut whole = Sha256::new();
    let mut each = Vec::new();
    let mut listening = true;
    // One part: its digest is the whole archive's; hash once.
    let single = parts.parts.len() == 1;
    for (i, p) in parts.parts.iter().enumerate() {
        let mut f = std::fs::File::open(&p.path).map_err(|e| Error::io(&p.path, e))?;
        let mut h = Sha256::new();
        loop {
            let mut data = vec![0u8; BLOCK];
            let n = read_full(&mut f, &mut data).map_err(|e| Error::io(&p.path, e))?;
            if n == 0 {
                break;
            }
            data.truncate(n);
            whole.update(&data);
            if !single {
                h.update(&data);
            }
            progress.advance(n as u64);
            if listening {
                listening = tx.send(Block { part: i, data }).is_ok();
            }
        }
        each.push(to_hex(&h.finalize()));
    }
    let whole = to_hex(&whole.finalize());
    if single {
        each = vec![whole.clone()];
    }
    Ok((whole, each))
}

fn read_full(f: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The raw archive as one stream, from the reader thread's blocks.
struct ChannelReader {
    rx: Receiver<Block>,
    cur: Vec<u8>,
    pos: usize,
    position: Arc<Position>,
}

impl ChannelReader {
    fn fill(&mut self) -> bool {
        while self.pos == self.cur.len() {
            match self.rx.recv() {
                Ok(b) => {
                    self.position.part.store(b.part, Ordering::Relaxed);
                    self.cur = b.data;
                    self.pos = 0;
                }
                Err(_) => {
                    self.position.done.store(true, Ordering::Relaxed);
                    return false;
                }
            }
        }
        true
    }

    /// The first bytes of the archive (for its magic number).
    fn peek(&mut self) -> &[u8] {
        self.fill();
        &self.cur[self.pos..]
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.fill() {
            return Ok(0);
        }
        let n = buf.len().min(self.cur.len() - self.pos);
        buf[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        self.position.offset.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What import says of a file it cannot read as an archive.
const NOT_A_TAR: &str = "not a tar, tar.zst, tar.gz, tar.xz, tar.bz2 or tar.lz archive";

/// Compression, from the first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Tar,
    Zstd,
    Gzip,
    Xz,
    Bzip2,
    Lzip,
}

/// Recognize the compression by magic number (not by name).
pub fn detect(head: &[u8]) -> Result<Format> {
    Ok(match head {
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Format::Zstd,
        [m, 0x2a, 0x4d, 0x18, ..] if m & 0xf0 == 0x50 => Format::Zstd, // skippable frame
        [0x1f, 0x8b, ..] => Format::Gzip,
        [0xfd, b'7', b'z', b'X', b'Z', 0, ..] => Format::Xz,
        [b'B', b'Z', b'h', ..] => Format::Bzip2,
        [b'L', b'Z', b'I', b'P', ..] => Format::Lzip,
        [0x04, 0x22, 0x4d, 0x18, ..] => {
            return Err(Error::Archive(
                "lz4-compressed archives are not supported; decompress with `lz4 -d` first".into(),
            ));
        }
        [0x1f, 0x9d, ..] => {
            return Err(Error::Archive(
                "compress(1) (.Z) archives are not supported; decompress with `gzip -d` first"
                    .into(),
            ));
        }
        _ => Format::Tar,
    })
}

/// Decompress and parse; every tar entry goes to the tree builder. Reads the
/// decompressed stream to its very end.
fn parse(
    store: &Store,
    mut raw: ChannelReader,
    chunk_tx: &SyncSender<ChunkJob>,
    parts: &Parts,
    position: &Position,
    counters: &Counters,
    opts: &ImportOptions,
) -> Result<tartree::Built> {
    let corrupt = |e: io::Error| {
        let part = shown(&parts.parts[position.part.load(Ordering::Relaxed)].path);
        let offset = position.offset.load(Ordering::Relaxed);
        if position.done.load(Ordering::Relaxed) && e.kind() == io::ErrorKind::UnexpectedEof
            || e.to_string().contains("incomplete")
        {
            Error::Truncated(format!(
                "{part}: the archive ends early ({e}); a part is missing or was cut short"
            ))
        } else {
            Error::Corrupt {
                part,
                detail: format!("{e} (near byte {offset} of the archive)"),
            }
        }
    };
    let head: Vec<u8> = raw.peek().iter().take(8).copied().collect();
    let format = detect(&head)?;
    let first = shown(&parts.parts[0].path);
    let decoded: Box<dyn Read> = match format {
        Format::Tar => Box::new(raw),
        Format::Zstd => {
            let mut d = zstd::stream::read::Decoder::new(raw).map_err(corrupt)?;
            // `zstd --long=31` archives are legitimate: allow a 2 GiB window
            // (the default limit is 128 MiB).
            d.window_log_max(31).map_err(corrupt)?;
            Box::new(d)
        }
        Format::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
        Format::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(raw)),
        // Concatenated streams, as `xz -d` and `lzip -d` read them.
        Format::Xz => Box::new(lzma_rust2::XzReader::new(raw, true)),
        Format::Lzip => Box::new(lzma_rust2::LzipReader::new(raw)),
    };
    let not_tar = || {
        let bytes: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
        Error::Archive(format!(
            "{first}: {NOT_A_TAR} (first bytes: {} …)",
            bytes.join(" ")
        ))
    };
    let tar_error = |e: TarError| match e {
        TarError::Io(e) => corrupt(e),
        TarError::Truncated(m) => {
            let part = shown(&parts.parts[position.part.load(Ordering::Relaxed)].path);
            Error::Truncated(format!("{part}: {m}; a part is missing or was cut short"))
        }
        TarError::NotTar => not_tar(),
        TarError::Corrupt(detail) => Error::Corrupt {
            part: shown(&parts.parts[position.part.load(Ordering::Relaxed)].path),
            detail,
        },
        TarError::BadEntry { entry, detail } => Error::HostileEntry {
            entry: escape(&entry),
            detail,
        },
    };
    // A split archive that ends early most likely lacks its next part.
    let missing = missing_part(parts);
    let hint = |e: Error| match (e, &missing) {
        (Error::Truncated(m), Some(h)) => Error::Truncated(format!("{m} ({h})")),
        (e, _) => e,
    };
    let mut tar = TarReader::new(decoded);
    let mut builder = TreeBuilder::new(store, counters, chunk_tx, no_progress(), opts);
    let mut skipped = 0u64;
    let mut acl_text_only = 0u64;
    while let Some(entry) = tar.next_entry().map_err(tar_error).map_err(hint)? {
        acl_text_only += u64::from(entry.acl_text_only && entry.kind != TarKind::Other);
        match kind_of(entry.kind) {
            None => skipped += 1,
            Some(kind) => {
                let meta = meta_of(&entry, kind)?;
                let link = (!entry.link.is_empty()).then(|| entry.link.clone());
                builder
                    .add(
                        &entry.path,
                        entry.kind == TarKind::HardLink,
                        entry.size,
                        entry.sparse.as_deref(),
                        link,
                        meta,
                        &mut tar,
                    )
                    .map_err(|e| match e {
                        Error::Io { source, .. } => corrupt(source),
                        e => e,
                    })
                    .map_err(hint)?;
            }
        }
        opts.progress.entries(builder.entries());
    }
    let end_marker = tar.end_marker_seen();
    let headers = tar.headers();
    let pax_origin = tar.global(b"STOREFS.origin").map(<[u8]>::to_vec);
    // The rest of the decompressed stream: tar's end blocks and padding.
    let mut rest = tar.into_inner();
    skip(&mut rest).map_err(corrupt)?;
    drop(rest);
    if headers == 0 {
        return Err(Error::Archive(if end_marker {
            format!("{first}: holds only zero bytes: {NOT_A_TAR}")
        } else {
            format!("{first} is empty: {NOT_A_TAR}")
        }));
    }
    let mut end_warning = None;
    if !end_marker {
        match &missing {
            Some(m) => {
                return Err(Error::Archive(format!(
                    "{}: the archive ends without its end-of-archive marker: {m} Nothing was imported",
                    parts.describe()
                )));
            }
            None => {
                end_warning = Some(format!(
                    "{} ends without an end-of-archive marker (some writers omit it); it may be truncated",
                    parts.describe()
                ));
            }
        }
    }
    let mut built = builder.finish()?;
    built.pax_origin = pax_origin;
    built.warnings.extend(end_warning);
    if acl_text_only > 0 {
        built.warnings.push(format!(
            "{acl_text_only} archive entries carry ACLs only as SCHILY.acl.* text (tar --acls), which storefs does not import: their ACLs are not kept (archives written with --xattrs --xattrs-include='system.posix_acl_*' keep them)"
        ));
    }
    if skipped > 0 {
        built.warnings.push(format!(
            "{skipped} archive entries of types storefs does not keep (volume labels, multi-volume continuations, …) were skipped"
        ));
    }
    Ok(built)
}

/// A file's path for a message, non-printable bytes escaped.
fn shown(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    escape(p.as_os_str().as_bytes())
}

/// For an archive that came in parts: "is NAME.partNN missing?", naming the
/// part after the last one given. `None` for a single, unsplit file.
fn missing_part(parts: &Parts) -> Option<String> {
    let last = parts::file_name(&parts.parts[parts.parts.len() - 1].path);
    match parts::split_part_name(&last) {
        Some((base, suffix)) => {
            let next = parts::successors(suffix)
                .into_iter()
                .next()
                .unwrap_or_else(|| format!("{suffix}?"));
            Some(format!("is {base}.part{next} missing?"))
        }
        None if parts.parts.len() > 1 => Some(format!("is a part after {last} missing?")),
        None => None,
    }
}

/// An entry's metadata from its header and PAX records (no name, no content yet).
fn meta_of(e: &TarEntry, kind: Kind) -> Result<Entry> {
    let id = |v: u64, what: &str| {
        u32::try_from(v).map_err(|_| Error::HostileEntry {
            entry: escape(&e.path),
            detail: format!("bad {what} field: {v} is larger than 32 bits"),
        })
    };
    let rdev = match kind {
        Kind::CharDev | Kind::BlockDev => crate::sys::makedev(e.dev_major, e.dev_minor),
        _ => 0,
    };
    let dir_size = e
        .comment
        .as_deref()
        .and_then(|v| v.strip_prefix(SIZE_COMMENT.as_bytes()))
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .unwrap_or(0);
    let mut xattrs = e.xattrs.clone();
    xattrs.sort();
    Ok(Entry {
        name: Vec::new(),
        kind,
        perm: e.mode & 0o7777,
        uid: id(e.uid, "uid")?,
        gid: id(e.gid, "gid")?,
        mtime_ns: e.mtime_ns,
        ctime_ns: e.ctime_ns.unwrap_or(e.mtime_ns),
        size: if kind == Kind::Dir { dir_size } else { 0 },
        nlink: if kind == Kind::Dir { 2 } else { 1 },
        link_id: 0,
        rdev,
        xattrs,
        flags: 0,
        content: Content::None,
    })
}

// ---------------------------------------------------------------- publish

/// An import as the CLI asks for it.
#[derive(Clone, Debug, Default)]
pub struct ImportRequest {
    pub paths: Vec<PathBuf>,
    /// Expected sha256 of the joined archive.
    pub sha256: Option<String>,
    /// A `sha256sum` or JSON digest manifest.
    pub manifest: Option<PathBuf>,
    /// Origin to record (overrides STORE.json's root).
    pub origin: Option<String>,
    pub ref_name: Option<String>,
    pub message: Option<String>,
    pub host: Option<String>,
    pub time_ns: i64,
    pub options: ImportOptions,
}

/// A published import.
#[derive(Clone, Debug)]
pub struct Published {
    pub id: ObjectId,
    pub checkpoint: Checkpoint,
    /// The archive had been imported before (found in the archive index): not read again.
    pub reused: bool,
    /// A digest given by the user (--sha256 or manifest) matched.
    pub verified: bool,
    pub sha256: String,
    /// The archive, for messages (`NAME (3 parts, …)`).
    pub name: String,
    pub warnings: Vec<String>,
    /// The digests came from this manifest found beside the archive (no
    /// --sha256 or --manifest given).
    pub manifest_beside: Option<PathBuf>,
}

/// Import an archive once, keyed by its sha256 in `archives/`, and publish
/// it: checkpoint, then archive index entry, then ref. With a known digest an
/// earlier import is reused without reading the archive; without one the
/// parts are hashed (no decompression) and looked up first.
pub fn import_archive(store: &Store, req: &ImportRequest) -> Result<Published> {
    let parts = discover(&req.paths)?;
    // Without a digest given, the manifest export writes beside the archive
    // (NAME.sha256) is used when there is one.
    let beside = match (&req.sha256, &req.manifest) {
        (None, None) => manifest_beside(&parts),
        _ => None,
    };
    let manifest = req.manifest.as_deref().or(beside.as_deref());
    let expected = expected_digests(req.sha256.as_deref(), manifest, &parts)?;
    let verified = !expected.is_empty();
    let mut expected_now = expected.clone();
    if expected.whole.is_none() {
        let (whole, each) = hash_parts(&parts)?;
        verify(&parts, &expected, &whole, &each, None)?;
        expected_now.whole = Some(whole);
    }
    let whole = expected_now.whole.clone().expect("set above");
    if let Some(rec) = store.archive_record(&whole)? {
        let mut p = reuse(store, req, rec, whole, verified, parts.describe())?;
        p.manifest_beside = beside;
        return Ok(p);
    }

    let imported = import(store, &parts, &expected_now, &req.options)?;
    let origin = req.origin.clone().or(imported.origin_hint.clone());
    let parents = match &req.ref_name {
        Some(name) => store.get_ref(name)?.into_iter().collect(),
        None => Vec::new(),
    };
    let ckpt = Checkpoint {
        version: 1,
        root: imported.root,
        parents,
        origin,
        time_ns: req.time_ns,
        message: req.message.clone().unwrap_or_else(|| {
            format!(
                "imported from {} (sha256 {})",
                parts.name,
                if verified { "verified" } else { "not verified" }
            )
        }),
        source: Source {
            kind: "import".into(),
            host: req.host.clone(),
            files: parts.files(),
            sha256: Some(imported.sha256.clone()),
            stats: Some(imported.stats.clone()),
            ..Default::default()
        },
    };
    let id = store.write_checkpoint(&ckpt)?;
    store.set_archive_record(
        &imported.sha256,
        &ArchiveRecord {
            checkpoint: id,
            files: parts.files(),
            time_ns: req.time_ns,
        },
    )?;
    if let Some(name) = &req.ref_name {
        store.set_ref(name, &id)?;
    }
    Ok(Published {
        id,
        checkpoint: ckpt,
        reused: false,
        verified,
        sha256: imported.sha256,
        name: parts.describe(),
        warnings: imported.warnings,
        manifest_beside: beside,
    })
}

/// `NAME.sha256` beside the archive's first part (NAME: the archive's name
/// without `.partNN`), as `export` writes it, when it is a regular file.
fn manifest_beside(parts: &Parts) -> Option<PathBuf> {
    let first = &parts.parts.first()?.path;
    let m = first.with_file_name(format!("{}.sha256", parts.name));
    std::fs::metadata(&m)
        .is_ok_and(|md| md.is_file())
        .then_some(m)
}

/// The archive was imported before: use that checkpoint (a new record with
/// the same tree when a different origin was asked for).
fn reuse(
    store: &Store,
    req: &ImportRequest,
    rec: ArchiveRecord,
    sha256: String,
    verified: bool,
    name: String,
) -> Result<Published> {
    let mut id = rec.checkpoint;
    let mut ckpt = store.read_checkpoint(&id)?;
    if let Some(origin) = &req.origin
        && ckpt.origin.as_deref() != Some(origin.as_str())
    {
        ckpt.origin = Some(origin.clone());
        ckpt.time_ns = req.time_ns;
        ckpt.parents = vec![rec.checkpoint];
        if let Some(m) = &req.message {
            ckpt.message = m.clone();
        }
        id = store.write_checkpoint(&ckpt)?;
    }
    if let Some(name) = &req.ref_name
        && store.get_ref(name)? != Some(id)
    {
        store.set_ref(name, &id)?;
    }
    Ok(Published {
        id,
        checkpoint: ckpt,
        reused: true,
        verified,
        sha256,
        name,
        warnings: Vec::new(),
        manifest_beside: None,
    })
}

/// Is `target` an archive (an existing regular file) rather than a ref or id?
pub fn is_archive_path(target: &Path) -> bool {
    std::fs::metadata(target).is_ok_and(|m| m.is_file())
}
