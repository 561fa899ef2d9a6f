//! `verify` and `gc`: the maintenance verbs. The work is in `store::verify`
//! and `store::gc`; this prints it.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Result, bail};

use super::args::{GcArgs, VerifyArgs};
use crate::store::{GcOptions, ObjectId, Store};

pub fn verify(store: &Store, a: VerifyArgs) -> Result<()> {
    let targets = a
        .checkpoints
        .iter()
        .map(|t| store.resolve(t))
        .collect::<Result<Vec<_>, _>>()?;
    let threads = if a.threads == 0 {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        a.threads
    };
    let progress = super::remote::progress_bar("verifying");
    let r = store.verify(&targets, threads, &*progress);
    progress.finish_and_clear();
    let r = r?;
    let temps = store.leftover_temps()?;
    let names = names_of(store)?;
    if a.json {
        let problems: Vec<serde_json::Value> = r
            .problems
            .iter()
            .map(|p| {
                serde_json::json!({
                    "checkpoint": p.checkpoint.map(|c| c.to_hex()),
                    "names": p.checkpoint.and_then(|c| names.get(&c)).cloned().unwrap_or_default(),
                    "path": p.path,
                    "what": p.what.to_string(),
                })
            })
            .collect();
        super::json::print(&serde_json::json!({
            "checkpoints": r.checkpoints,
            "objects": r.objects,
            "bytes": r.bytes,
            "corrupt": r.corrupt,
            "missing": r.missing,
            "problems": problems,
            "temps": temps.iter().map(|(path, size)| serde_json::json!({"path": path.display().to_string(), "size": size})).collect::<Vec<_>>(),
        }))?;
    }
    let mut out = std::io::stdout().lock();
    for p in r.problems.iter().filter(|_| !a.json) {
        match &p.checkpoint {
            Some(ck) => {
                let label = names
                    .get(ck)
                    .map(|n| format!(" ({})", n.join(", ")))
                    .unwrap_or_default();
                writeln!(out, "checkpoint {ck}{label} {}: {}", p.path, p.what)?;
            }
            None => writeln!(out, "{}: {}", p.path, p.what)?,
        }
    }
    out.flush()?;
    eprintln!(
        "storefs: verified {} checkpoint(s), {} object(s), {} stored",
        r.checkpoints,
        r.objects,
        human(r.bytes)
    );
    if !temps.is_empty() {
        eprintln!(
            "storefs: note: {} temp file(s) of interrupted writes ({}), e.g. {}; `storefs gc` removes them",
            temps.len(),
            human(temps.iter().map(|t| t.1).sum()),
            temps[0].0.display()
        );
    }
    if !r.is_clean() {
        bail!(
            "{} problem(s): {} corrupt object(s) (moved to {}), {} missing; nothing was deleted. \
             To repair, put the objects back (docs/guide.md, troubleshooting)",
            r.problems.len(),
            r.corrupt,
            store.root().join("quarantine").display(),
            r.missing
        );
    }
    Ok(())
}

/// Refs and forks naming each checkpoint, for the report.
fn names_of(store: &Store) -> Result<HashMap<ObjectId, Vec<String>>> {
    let mut m: HashMap<ObjectId, Vec<String>> = HashMap::new();
    for (name, id) in store.list_refs()? {
        m.entry(id).or_default().push(name);
    }
    for (name, id) in store.list_forks()? {
        m.entry(id).or_default().push(format!("fork {name}"));
    }
    Ok(m)
}

pub fn gc(store: &Store, a: GcArgs) -> Result<()> {
    if let Some(name) = &a.remote {
        return remote_gc(store, name, &a);
    }
    let opts = GcOptions {
        grace: a.grace,
        dry_run: a.dry_run,
    };
    let r = store.gc(&opts, &|| {
        eprintln!("storefs: waiting for a snapshot, import or commit to publish its checkpoint")
    })?;
    let caches = crate::ingest::statcache::prune(store, a.grace, a.dry_run)?;
    if a.json {
        return super::json::print(&serde_json::json!({
            "dry_run": a.dry_run,
            "checkpoints": r.checkpoints,
            "reachable": r.reachable,
            "removed": r.removed.iter().map(|(id, size)| serde_json::json!({"id": id.to_string(), "size": size})).collect::<Vec<_>>(),
            "temps": r.temps.iter().map(|(path, size)| serde_json::json!({"path": path.display().to_string(), "size": size})).collect::<Vec<_>>(),
            "stat_caches": caches.iter().map(|(path, size)| serde_json::json!({"path": path.display().to_string(), "size": size})).collect::<Vec<_>>(),
            "young": r.young,
            "young_bytes": r.young_bytes,
            "packs_merged": {"from": r.packs_merged.0, "into": r.packs_merged.1},
            "left_in_packs": r.in_packs,
            "left_in_packs_bytes": r.in_packs_bytes,
        }));
    }
    let mut out = std::io::stdout().lock();
    for (id, size) in &r.removed {
        writeln!(out, "{id} {size}")?;
    }
    for (path, size) in r.temps.iter().chain(&caches) {
        writeln!(out, "{} {size}", path.display())?;
    }
    out.flush()?;
    let removed: u64 = r.removed.iter().map(|x| x.1).sum::<u64>()
        + r.temps.iter().chain(&caches).map(|x| x.1).sum::<u64>();
    let verb = if a.dry_run { "would remove" } else { "removed" };
    eprintln!(
        "storefs: gc: {} checkpoint(s) keep {} object(s); {verb} {} unreachable object(s), {} temp file(s) and {} stat cache(s) of checkpoints no ref is at, {}; kept {} unreachable object(s) younger than the grace period ({}){}",
        r.checkpoints,
        r.reachable,
        r.removed.len(),
        r.temps.len(),
        caches.len(),
        human(removed),
        r.young,
        human(r.young_bytes),
        if a.dry_run {
            "; nothing deleted (--dry-run)"
        } else {
            ""
        }
    );
    if r.packs_merged.0 > 0 {
        eprintln!(
            "storefs: gc: merged {} small pack(s) into {}",
            r.packs_merged.0, r.packs_merged.1
        );
    }
    if r.in_packs > 0 {
        eprintln!(
            "storefs: gc: {} {} unreachable object(s) ({}) in packs that would be copied whole to drop them; a later gc drops them once over 10% of their pack is unreachable",
            if a.dry_run { "would leave" } else { "left" },
            r.in_packs,
            human(r.in_packs_bytes)
        );
    }
    Ok(())
}

/// `1.5 MiB`-style sizes.
pub(super) fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `storefs doctor`: one line per check; an error when something mounts need is missing.
pub fn doctor(store_dir: &std::path::Path) -> Result<()> {
    use crate::daemon::doctor::{Verdict, checks};
    let checks = checks(Some(store_dir));
    for c in &checks {
        let verdict = match c.verdict {
            Verdict::Ok => "ok",
            Verdict::Missing => "missing",
            Verdict::Note => "note",
            Verdict::Warn => "warning",
        };
        let fix = if c.fix.is_empty() {
            String::new()
        } else {
            format!("; fix: {}", c.fix)
        };
        super::say(format!("{verdict:<8} {}: {}{fix}", c.what, c.found))?;
    }
    let missing: Vec<&str> = checks
        .iter()
        .filter(|c| c.verdict == Verdict::Missing)
        .map(|c| c.what)
        .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "mounts need what is missing: {} (see the fixes above)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// `gc --remote NAME`.
fn remote_gc(store: &Store, name: &str, a: &GcArgs) -> Result<()> {
    let r = crate::remote::Remote::open(store, name)?;
    let progress = super::remote::progress_bar("repacking");
    let opts = crate::remote::RemoteGcOptions {
        dry_run: a.dry_run,
        grace: a.grace,
        progress: progress.clone(),
    };
    let result = r.gc(store, &opts);
    progress.finish_and_clear();
    let r = result?;
    if a.json {
        return super::json::print(&serde_json::json!({
            "remote": name,
            "dry_run": a.dry_run,
            "refs": r.refs,
            "checkpoints": r.checkpoints,
            "reachable": r.reachable,
            "unreachable_bytes": r.unreachable_bytes,
            "reclaimed_bytes": r.reclaimed_bytes,
            "packs_deleted": r.packs_deleted,
            "packs_repacked": r.packs_repacked,
            "packs_written": r.packs_written,
            "bytes_copied": r.bytes_copied,
            "incomplete_deleted": r.incomplete_deleted,
            "loose_deleted": r.loose_deleted,
            "records_deleted": r.records_deleted,
            "young": r.young,
            "unreachable_kept": r.unreachable_kept,
        }));
    }
    let verb = if a.dry_run {
        "would reclaim"
    } else {
        "reclaimed"
    };
    eprintln!(
        "storefs: gc --remote {name}: {} ref(s) reach {} checkpoint(s) and {} object(s); {verb} {} of {} unreachable: {} pack(s) deleted, {} repacked into {} (copying {}), {} incomplete pack(s), {} loose object(s), {} record(s); kept {} younger than the grace period and {} unreachable in packs under the repack threshold{}",
        r.refs,
        r.checkpoints,
        r.reachable,
        human(r.reclaimed_bytes),
        human(r.unreachable_bytes),
        r.packs_deleted,
        r.packs_repacked,
        r.packs_written,
        human(r.bytes_copied),
        r.incomplete_deleted,
        r.loose_deleted,
        r.records_deleted,
        r.young,
        human(r.unreachable_kept),
        if a.dry_run {
            "; nothing deleted (--dry-run)"
        } else {
            ""
        }
    );
    Ok(())
}
