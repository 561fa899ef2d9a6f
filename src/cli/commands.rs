//! The verbs that read or write the store without mounting.

use std::fs;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::sys::{major, minor};
use anyhow::{Context, Result, bail};

use super::args::{CatArgs, DiffArgs, LogArgs, LsArgs, RefsArgs, RestoreArgs, SnapshotArgs};
use super::json;
use crate::ingest::{self, ChangeKind, SnapshotOptions};
use crate::store::progress::Progress;
use crate::store::{Checkpoint, Content, Entry, Kind, ObjectId, Source, Store, format_time};
use serde_json::{Map, Value, json};

pub fn init(store_dir: &Path) -> Result<()> {
    let store = Store::open_or_create(store_dir)?;
    eprintln!("storefs: store ready at {}", store.root().display());
    Ok(())
}

pub fn snapshot(store_dir: &Path, a: SnapshotArgs) -> Result<()> {
    // Check everything the user typed before the store is touched.
    let meta =
        fs::metadata(&a.dir).with_context(|| format!("cannot snapshot {}", a.dir.display()))?;
    if !meta.is_dir() {
        bail!("cannot snapshot {}: not a directory", a.dir.display());
    }
    if let Some(name) = &a.r#ref {
        Store::check_name(name)?;
    }
    let origin = fs::canonicalize(&a.dir).with_context(|| format!("{}", a.dir.display()))?;
    let origin_str = origin
        .to_str()
        .with_context(|| format!("{}: the origin path must be UTF-8", origin.display()))?
        .to_string();
    let store = Store::open_or_create(store_dir)?;
    if store.root().starts_with(&origin) {
        bail!(
            "the store {} is inside {}: a snapshot would record the store itself; use a store outside the tree",
            store.root().display(),
            origin.display()
        );
    }
    if let Some(name) = &a.r#ref
        && store.fork_head(name)?.is_some()
    {
        bail!("'{name}' is a fork; a ref cannot take its name (pick another --ref)");
    }

    // The checkpoint to compare against: --parent, else the ref's current one.
    let parent_id = match (&a.parent, &a.r#ref) {
        (Some(spec), _) => Some(store.resolve(spec)?),
        (None, Some(name)) => store.get_ref(name)?,
        (None, None) => None,
    };
    let parent = match parent_id {
        Some(id) if !a.full => {
            let ckpt = store.read_checkpoint(&id)?;
            match ingest::Parent::load(&store, &id, &ckpt, &origin_str) {
                Ok(p) => Some(p),
                Err(why) => {
                    if a.verbose {
                        eprintln!(
                            "storefs: reading every file: parent {} cannot be compared against ({})",
                            &id.to_hex()[..12],
                            super::printable(&why)
                        );
                    }
                    None
                }
            }
        }
        _ => None,
    };

    // Before any thread starts: Ctrl-C removes our temp files, publishes nothing.
    let _interrupt = super::interrupt::Interruptible::new(store.root(), "snapshot")?;
    // Keeps `storefs gc` from sweeping until the checkpoint and ref are published.
    let _lease = store.write_lease()?;
    let progress = progress_bar();
    let opts = SnapshotOptions {
        threads: a.threads,
        progress: progress.clone(),
        parent,
        ..Default::default()
    };
    let result = ingest::snapshot(&store, &origin, &opts);
    progress.finish_and_clear();
    let result = result?;
    for w in &result.warnings {
        super::warn(w);
    }

    if a.verbose {
        let since = match &opts.parent {
            Some(p) => format!(" since {}", &p.id.to_hex()[..12]),
            None => String::new(),
        };
        eprintln!(
            "storefs: {} files read, {} unchanged{since}",
            result.files_read, result.files_reused
        );
    }

    // The ref's head before this snapshot: its parent, and whose stat cache
    // goes once the ref moves.
    let previous = match &a.r#ref {
        Some(name) => store.get_ref(name)?,
        None => None,
    };
    let parents = match &a.r#ref {
        Some(_) => previous.into_iter().collect(),
        None => parent_id.into_iter().collect(),
    };
    let ckpt = Checkpoint {
        version: 1,
        root: result.root,
        parents,
        origin: Some(origin_str.clone()),
        time_ns: now_ns(),
        message: a.message,
        source: Source {
            kind: "snapshot".into(),
            path: Some(origin_str),
            host: hostname(),
            stats: Some(result.stats),
            ..Default::default()
        },
    };
    let id = store.write_checkpoint(&ckpt)?;
    if let Err(e) = ingest::statcache::save(&store, &id, &result.stat_cache) {
        super::warn(&format!(
            "could not save the stat cache of {id} ({e}); the next snapshot will read every file"
        ));
    }
    if let Some(name) = &a.r#ref {
        store.set_ref(name, &id)?;
        if let Some(old) = previous.filter(|old| *old != id)
            && let Err(e) = ingest::statcache::retire(&store, &old)
        {
            super::warn(&format!("could not remove the stat cache of {old} ({e})"));
        }
    }
    super::say(id)?;
    if !result.vanished.is_empty() {
        for line in vanished_lines(&result.vanished, MAX_VANISHED_LINES) {
            super::warn(&line);
        }
        return Err(super::PartialExit.into());
    }
    Ok(())
}

/// Warning lines for paths a snapshot left out; after this many, a count.
const MAX_VANISHED_LINES: usize = 20;

/// One line per vanished path, at most `max`, then one that counts the rest.
fn vanished_lines(paths: &[PathBuf], max: usize) -> Vec<String> {
    let mut lines: Vec<String> = paths
        .iter()
        .take(max)
        .map(|p| {
            format!(
                "{}: vanished while the snapshot ran; not in it",
                p.display()
            )
        })
        .collect();
    if paths.len() > max {
        lines.push(format!(
            "and {} more paths vanished while the snapshot ran; not in it",
            paths.len() - max
        ));
    }
    lines
}

pub fn refs(store: &Store, a: RefsArgs) -> Result<()> {
    if !a.delete.is_empty() {
        return delete_refs(store, &a.delete);
    }
    let (good, bad) = store.list_refs_lossy()?;
    if a.json {
        let list: Vec<Value> = good
            .into_iter()
            .map(|(name, id)| json!({"name": name, "checkpoint": id.to_hex()}))
            .collect();
        json::print(&Value::Array(list))?;
    } else {
        let mut out = std::io::stdout().lock();
        for (name, id) in good {
            writeln!(out, "{name}\t{id}")?;
        }
    }
    for (name, e) in &bad {
        eprintln!(
            "storefs: ref '{name}' is not readable ({e}); `storefs refs --delete {name}` removes it"
        );
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(super::ExitWith(1).into())
    }
}

/// `refs --delete`: each ref named, or an error naming the first that is not one.
fn delete_refs(store: &Store, names: &[String]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for name in names {
        match store.delete_ref(name)? {
            Some(was) => writeln!(out, "{name}\t{was}")?,
            None if store.fork_head(name)?.is_some() => {
                bail!("'{name}' is a fork, not a ref; `storefs forks --delete {name}` deletes it")
            }
            None => bail!("no ref named '{name}'; `storefs refs` lists them"),
        }
    }
    Ok(())
}

pub fn log(store: &Store, a: LogArgs) -> Result<()> {
    // Labels shown beside an id: refs, fork heads, fork points.
    let mut refs = store.list_refs()?;
    for (name, head) in store.list_forks()? {
        refs.push((format!("fork {name}"), head));
        if let Some(info) = crate::journal::read_fork_info(store, &name)? {
            refs.push((format!("fork point of {name}"), info.base));
        }
    }
    let mut list: Vec<(ObjectId, Checkpoint)> = Vec::new();
    match &a.target {
        Some(t) => {
            // First-parent history from the target back to its first snapshot.
            let mut next = Some(store.resolve(t)?);
            while let Some(id) = next {
                if list.iter().any(|(seen, _)| *seen == id) {
                    break;
                }
                let ck = match store.read_checkpoint(&id) {
                    // A partial checkpoint (lazy mount) comes without its history.
                    Err(crate::store::Error::UnknownTarget(_))
                        if list.last().is_some_and(|(c, _)| store.is_partial(c)) =>
                    {
                        break;
                    }
                    r => r?,
                };
                next = ck.parents.first().copied();
                list.push((id, ck));
            }
        }
        None => {
            for id in store.list_checkpoints()? {
                list.push((id, store.read_checkpoint(&id)?));
            }
            list.sort_by_key(|(_, ck)| std::cmp::Reverse(ck.time_ns));
        }
    }
    let labels = |id: &ObjectId| -> Vec<&str> {
        refs.iter()
            .filter(|(_, r)| r == id)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    if a.json {
        let list: Vec<Value> = list
            .iter()
            .map(|(id, ck)| {
                json!({
                    "id": id.to_hex(),
                    "labels": labels(id),
                    "time_ns": ck.time_ns,
                    "time": format_time(ck.time_ns),
                    "origin": ck.origin,
                    "parents": ck.parents.iter().map(|p| p.to_hex()).collect::<Vec<_>>(),
                    "message": ck.message,
                    "source": ck.source,
                })
            })
            .collect();
        return json::print(&Value::Array(list));
    }
    let shown = super::term::Shown::stdout();
    let mut out = std::io::stdout().lock();
    for (i, (id, ck)) in list.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let names = labels(id);
        if names.is_empty() {
            writeln!(out, "checkpoint {id}")?;
        } else {
            writeln!(out, "checkpoint {id} ({})", names.join(", "))?;
        }
        writeln!(out, "date:    {}", format_time(ck.time_ns))?;
        if let Some(o) = &ck.origin {
            writeln!(out, "origin:  {}", shown.line(o))?;
        }
        writeln!(out, "source:  {}", shown.line(&describe_source(&ck.source)))?;
        for p in &ck.parents {
            writeln!(out, "parent:  {p}")?;
        }
        if !ck.message.is_empty() {
            let message = shown.text(&ck.message);
            writeln!(out, "\n    {}", message.replace('\n', "\n    "))?;
        }
    }
    Ok(())
}

fn describe_source(s: &Source) -> String {
    let mut d = s.kind.clone();
    if let Some(p) = &s.path {
        d.push_str(&format!(" of {p}"));
    }
    if let Some(h) = &s.host {
        d.push_str(&format!(" on {h}"));
    }
    if !s.files.is_empty() {
        d.push_str(&format!(" from {}", s.files.join(", ")));
    }
    if let Some(g) = &s.git {
        d.push_str(&format!(" commit {} of {}", g.commit, g.repo));
        if !g.submodules.is_empty() {
            d.push_str(&format!(
                ", {} submodule(s) as empty directories",
                g.submodules.len()
            ));
        }
    }
    if let Some(st) = &s.stats {
        d.push_str(&format!(
            " ({} entries, {} bytes, {} new objects)",
            st.entries, st.bytes, st.new_objects
        ));
    }
    d
}

/// Resolve a target and read its checkpoint.
fn checkpoint(store: &Store, target: &str) -> Result<(ObjectId, Checkpoint)> {
    let id = store.resolve(target)?;
    Ok((id, store.read_checkpoint(&id)?))
}

/// The entry at `path` in `target`, or a one-line error naming both.
fn entry_at(store: &Store, target: &str, path: &str) -> Result<Entry> {
    let (id, ck) = checkpoint(store, target)?;
    store.lookup_path(&ck, path.as_bytes())?.with_context(|| {
        format!(
            "no '{path}' in checkpoint {} ({target}); `storefs ls {target}` lists it",
            &id.to_hex()[..12]
        )
    })
}

pub fn ls(store: &Store, a: LsArgs) -> Result<()> {
    let entry = entry_at(store, &a.checkpoint, &a.path)?;
    let shown = super::term::Shown::stdout();
    let mut out = std::io::stdout().lock();
    let entries = match entry.tree_id() {
        Some(tid) => store.get_tree(&tid, &a.path)?.entries,
        None => vec![entry],
    };
    // A directory's size is the one its mounts show (ext4's for its names).
    let mut entries = entries;
    for e in entries.iter_mut().filter(|e| e.kind == Kind::Dir) {
        if let Some(tid) = e.tree_id() {
            e.size = crate::fs::dir_size(store, &tid).0;
        }
    }
    if a.json {
        drop(out);
        return json::print(&Value::Array(entries.iter().map(entry_json).collect()));
    }
    for e in &entries {
        // Devices show "major, minor" where the size goes, as `ls -l` does.
        let size = match e.kind {
            Kind::CharDev | Kind::BlockDev => {
                format!("{}, {}", major(e.rdev), minor(e.rdev))
            }
            _ => e.size.to_string(),
        };
        write!(
            out,
            "{} {:>3} {:>5} {:>5} {:>10} {} ",
            mode_string(e),
            e.nlink,
            e.uid,
            e.gid,
            size,
            &format_time(e.mtime_ns)[..16]
        )?;
        out.write_all(&shown.name(&e.name))?;
        match &e.content {
            Content::Target(t) => {
                out.write_all(b" -> ")?;
                out.write_all(&shown.name(t))?;
            }
            Content::Tree(_) => out.write_all(b"/")?,
            _ => {}
        }
        writeln!(out)?;
    }
    Ok(())
}

/// An entry as `ls --json` shows it.
fn entry_json(e: &Entry) -> Value {
    let mut o = Map::new();
    json::put_bytes(&mut o, "name", &e.name);
    let kind = match e.kind {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
        Kind::Fifo => "fifo",
        Kind::CharDev => "chardev",
        Kind::BlockDev => "blockdev",
        Kind::Socket => "socket",
    };
    o.insert("kind".into(), kind.into());
    o.insert("mode".into(), format!("{:04o}", e.perm).into());
    o.insert("nlink".into(), e.nlink.into());
    o.insert("uid".into(), e.uid.into());
    o.insert("gid".into(), e.gid.into());
    o.insert("size".into(), e.size.into());
    o.insert("mtime_ns".into(), e.mtime_ns.into());
    if matches!(e.kind, Kind::CharDev | Kind::BlockDev) {
        o.insert("rdev".into(), json!([major(e.rdev), minor(e.rdev)]));
    }
    if let Content::Target(t) = &e.content {
        json::put_bytes(&mut o, "target", t);
    }
    Value::Object(o)
}

/// `ls -l` style mode string, e.g. `-rwsr-xr-x`.
fn mode_string(e: &Entry) -> String {
    let t = match e.kind {
        Kind::File => '-',
        Kind::Dir => 'd',
        Kind::Symlink => 'l',
        Kind::Fifo => 'p',
        Kind::CharDev => 'c',
        Kind::BlockDev => 'b',
        Kind::Socket => 's',
    };
    let p = e.perm;
    let bit = |mask: u32, c: char| if p & mask != 0 { c } else { '-' };
    let special =
        |exec: u32, special: u32, set: char, unset: char| match (p & exec != 0, p & special != 0) {
            (true, true) => set,
            (false, true) => unset,
            (true, false) => 'x',
            (false, false) => '-',
        };
    [
        t,
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        special(0o100, 0o4000, 's', 'S'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        special(0o010, 0o2000, 's', 'S'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        special(0o001, 0o1000, 't', 'T'),
    ]
    .iter()
    .collect()
}

pub fn cat(store: &Store, a: CatArgs) -> Result<()> {
    let entry = entry_at(store, &a.checkpoint, &a.path)?;
    if entry.kind != Kind::File {
        bail!("'{}' is not a regular file in {}", a.path, a.checkpoint);
    }
    let mut out = std::io::stdout().lock();
    store.copy_content(&entry, &mut out, &a.path)?;
    out.flush()?;
    Ok(())
}

pub fn diff(store: &Store, a: DiffArgs) -> Result<()> {
    let (_, ca) = checkpoint(store, &a.a)?;
    let (_, cb) = checkpoint(store, &a.b)?;
    let changes = ingest::diff(store, &ca, &cb)?;
    if a.json {
        let list = changes
            .iter()
            .map(|c| {
                let mut o = Map::new();
                let (tag, what) = match &c.kind {
                    ChangeKind::Added => ("A", None),
                    ChangeKind::Removed => ("D", None),
                    ChangeKind::Changed(what) => ("M", Some(what.to_string())),
                };
                o.insert("change".into(), tag.into());
                json::put_bytes(&mut o, "path", &c.path);
                if let Some(w) = what {
                    o.insert("what".into(), w.into());
                }
                Value::Object(o)
            })
            .collect();
        return json::print(&Value::Array(list));
    }
    let shown = super::term::Shown::stdout();
    let mut out = std::io::stdout().lock();
    for change in changes {
        let tag = match &change.kind {
            ChangeKind::Added => "A",
            ChangeKind::Removed => "D",
            ChangeKind::Changed(_) => "M",
        };
        write!(out, "{tag} ")?;
        out.write_all(&shown.name(&change.path))?;
        if let ChangeKind::Changed(what) = &change.kind {
            write!(out, " ({what})")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

pub fn restore(store: &Store, a: RestoreArgs) -> Result<()> {
    let (id, ck) = checkpoint(store, &a.checkpoint)?;
    let progress = progress_bar();
    let stats = ingest::restore_with(store, &ck, &a.dir, &*progress);
    progress.finish_and_clear();
    let stats = stats?;
    eprintln!(
        "storefs: restored {} ({} entries, {} bytes) into {}",
        &id.to_hex()[..12],
        stats.entries,
        stats.bytes,
        a.dir.display()
    );
    Ok(())
}

/// The library reports progress through [`Progress`]; the CLI shows it as an
/// indicatif bar.
impl Progress for indicatif::ProgressBar {
    fn set_total(&self, total: u64) {
        self.set_length(total);
    }
    fn advance(&self, n: u64) {
        self.inc(n);
    }
    fn set_message(&self, message: String) {
        indicatif::ProgressBar::set_message(self, message);
    }
    fn finish(&self) {
        self.finish_and_clear();
    }
}

/// A byte progress bar on stderr when it is a terminal; hidden otherwise.
pub(super) fn progress_bar() -> Arc<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return Arc::new(indicatif::ProgressBar::hidden());
    }
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        )
        .expect("valid template"),
    );
    Arc::new(pb)
}

pub(super) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// This machine's name (`uname`'s nodename, as `gethostname` gives it), if
/// it is UTF-8.
pub(super) fn hostname() -> Option<String> {
    crate::sys::hostname()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vanished_paths_are_named_up_to_the_limit_then_counted() {
        let paths: Vec<PathBuf> = (0..5).map(|i| PathBuf::from(format!("/t/f{i}"))).collect();
        let lines = vanished_lines(&paths, 3);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("/t/f0: vanished"), "{lines:?}");
        assert!(lines[3].starts_with("and 2 more paths"), "{lines:?}");
        assert_eq!(vanished_lines(&paths[..3], 3).len(), 3);
    }
}
