//! `import`, `export`, and the archive side of `mount`: argument checks and
//! messages; the work is in `ingest::archive` and `ingest::export`.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};

use super::args::{DigestArgs, ExportArgs, ImportArgs, ImportGitArgs};
use super::commands::{hostname, now_ns, progress_bar};
use crate::ingest::archive::{ImportOptions, ImportRequest, Published, import_archive};
use crate::ingest::export::{Compression, ExportOptions, export as export_tree};
use crate::ingest::git::{GitImportRequest, import_git as run_import_git};
use crate::store::{Store, absolute, canonical_origin};

pub fn import(store_dir: &Path, a: ImportArgs) -> Result<()> {
    if let Some(name) = &a.r#ref {
        Store::check_name(name)?;
    }
    let origin = match &a.origin {
        Some(o) => Some(origin_arg(o)?),
        None => None,
    };
    let store = Store::open_or_create(store_dir)?;
    let p = run_import(
        &store,
        &a.archive,
        &a.digests,
        origin,
        a.r#ref.clone(),
        a.message,
        a.threads,
    )?;
    super::say(p.id)?;
    Ok(())
}

pub fn import_git(store_dir: &Path, a: ImportGitArgs) -> Result<()> {
    if let Some(name) = &a.ref_prefix {
        Store::check_name(name)?;
    }
    let origin = match &a.origin {
        Some(o) => Some(origin_arg(o)?),
        None => None,
    };
    let store = Store::open_or_create(store_dir)?;
    let progress = progress_bar();
    let req = GitImportRequest {
        repo: a.repo.clone(),
        origin,
        ref_prefix: a.ref_prefix.clone(),
        revs: a.revs.clone(),
        time_ns: now_ns(),
        threads: a.threads,
        progress: progress.clone(),
        ..GitImportRequest::default()
    };
    // Keeps `storefs gc` from sweeping until the records, index and refs are published.
    let lease = store.write_lease()?;
    let result = run_import_git(&store, &req);
    drop(lease);
    progress.finish_and_clear();
    let done = result?;
    for w in &done.warnings {
        super::warn(w);
    }
    for (hex, id) in &done.imported {
        super::say(format_args!("{hex}\t{id}"))?;
    }
    for (name, git_name, id) in &done.refs {
        eprintln!("storefs: ref {name} -> {} ({git_name})", &id.to_hex()[..12]);
    }
    eprintln!(
        "storefs: imported {} new commits ({} reached were imported before), {} bytes in their trees, {} new objects; origin {}",
        done.imported.len(),
        done.known,
        done.bytes,
        done.new_objects,
        done.origin
    );
    Ok(())
}

/// `--origin PATH` as a canonical absolute path (see [`canonical_origin`]):
/// `//`, `.` components and a trailing `/` are dropped; a relative path or a
/// `..` component is refused, with the fix.
fn origin_arg(o: &Path) -> Result<String> {
    let s = o
        .to_str()
        .with_context(|| format!("--origin {}: must be UTF-8", o.display()))?;
    canonical_origin(s).map_err(|why| {
        anyhow!(
            "--origin {}: {why}; give the canonical absolute path it stands for, e.g. --origin \"$(realpath -m '{}')\"",
            s.escape_debug(),
            s.escape_debug()
        )
    })
}

/// Import (or find the earlier import of) the archive a `mount` names; returns its checkpoint.
pub fn import_for_mount(
    store_dir: &Path,
    archive: &Path,
    digests: &DigestArgs,
) -> Result<Published> {
    let store = Store::open_or_create(store_dir)?;
    run_import(
        &store,
        &[archive.to_path_buf()],
        digests,
        None,
        None,
        None,
        0,
    )
}

fn run_import(
    store: &Store,
    paths: &[std::path::PathBuf],
    digests: &DigestArgs,
    origin: Option<String>,
    ref_name: Option<String>,
    message: Option<String>,
    threads: usize,
) -> Result<Published> {
    // Before any thread starts: Ctrl-C removes our temp files, publishes nothing.
    let interrupt = super::interrupt::Interruptible::new(store.root(), "import")?;
    let progress = progress_bar();
    let req = ImportRequest {
        paths: paths.to_vec(),
        sha256: digests.sha256.clone(),
        manifest: digests.manifest.clone(),
        origin,
        ref_name,
        message,
        host: hostname(),
        time_ns: now_ns(),
        options: ImportOptions {
            threads,
            progress: progress.clone(),
            ..ImportOptions::default()
        },
    };
    // Keeps `storefs gc` from sweeping until the checkpoint, index and ref are published.
    let lease = store.write_lease()?;
    let result = import_archive(store, &req);
    drop(lease);
    progress.finish_and_clear();
    drop(interrupt);
    let p = result?;
    for w in &p.warnings {
        super::warn(w);
    }
    if let Some(m) = &p.manifest_beside {
        eprintln!(
            "storefs: verified {} against {} (found beside it)",
            p.name,
            m.display()
        );
    } else if !p.verified {
        eprintln!(
            "storefs: warning: {} was not verified (no --sha256 or --manifest given, no ARCHIVE.sha256 beside it); its sha256 is {}",
            p.name, p.sha256
        );
    }
    let short = &p.id.to_hex()[..12];
    if p.reused {
        eprintln!(
            "storefs: already imported as {short} (archive index {}); not read again",
            &p.sha256[..12]
        );
    } else if let Some(st) = &p.checkpoint.source.stats {
        eprintln!(
            "storefs: imported {short}: {} entries, {} bytes, {} new objects",
            st.entries, st.bytes, st.new_objects
        );
    }
    if p.checkpoint.origin.is_none() {
        eprintln!(
            "storefs: note: no origin (no --origin, no STORE.json with an absolute root); `storefs mount` will need a mountpoint"
        );
    }
    Ok(p)
}

pub fn export(store: &Store, a: ExportArgs) -> Result<()> {
    let id = store.resolve(&a.checkpoint)?;
    let ck = store.read_checkpoint(&id)?;
    let out = absolute(&a.output)?;
    if let Some(dir) = out.parent()
        && !dir.is_dir()
    {
        bail!(
            "cannot write {}: {} is not a directory; create it first",
            out.display(),
            dir.display()
        );
    }
    if a.split == Some(0) {
        bail!("--split 0: give a part size such as 64M");
    }
    if let Some(ext) = Compression::unsupported(&out) {
        bail!(
            "cannot write {}: export compresses with zstd (.zst) or gzip (.gz) only, not {ext}; name it .tar.zst, .tar.gz or .tar",
            out.display()
        );
    }
    let progress = progress_bar();
    let opts = ExportOptions {
        compression: Compression::from_name(&out),
        split: a.split.map(|s| s as u64),
        threads: a.threads,
        progress: progress.clone(),
    };
    let done = export_tree(store, &ck, &id, &out, &opts);
    progress.finish_and_clear();
    let done = done?;
    for w in &done.warnings {
        super::warn(w);
    }
    // stdout: the manifest's lines, as written beside the archive.
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        out.write_all(done.manifest_text.as_bytes())?;
        out.flush()?;
    }
    eprintln!(
        "storefs: exported {} ({} entries) to {} file(s); sha256 {}; manifest {}",
        &id.to_hex()[..12],
        done.entries,
        done.parts.len(),
        done.sha256,
        done.manifest.display()
    );
    Ok(())
}
