//! `storefs ops`: the operations that made a checkpoint or a fork (who
//! changed what, when), from commits' operation logs and, for a fork, what
//! is not committed yet (`journal::ops`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::args::{OpsArgs, RevertArgs};
use super::term::Shown;
use crate::daemon::control;
use crate::journal::ops::{self, OpLine, Select, Step, at_or_below};
use crate::journal::{self, Fork};
use crate::store::{Checkpoint, ObjectId, Store};

/// The operations of one commit, or (`checkpoint` None) not committed yet.
struct Section {
    checkpoint: Option<ObjectId>,
    /// `Err`: the checkpoint has no operation log (why, in words).
    ops: std::result::Result<Vec<OpLine>, String>,
}

/// A line of `--json`.
#[derive(Serialize)]
struct JsonLine<'a> {
    checkpoint: Option<String>,
    #[serde(flatten)]
    op: &'a OpLine,
}

pub fn ops(store_dir: &Path, a: OpsArgs) -> Result<()> {
    let store = Arc::new(Store::open(store_dir)?);
    let sections = if journal::read_fork_info(&store, &a.target)?.is_some() {
        fork_sections(&store, &a.target, None)?
    } else {
        let id = store.resolve(&a.target)?;
        let ck = store.read_checkpoint(&id)?;
        vec![committed(&store, id, &ck)]
    };
    let path = a.path.as_deref().map(|p| p.trim_matches('/'));
    let selects: Vec<Select> = [
        a.pid.map(Select::Pid),
        a.command.clone().map(Select::Command),
    ]
    .into_iter()
    .flatten()
    .collect();
    let keep = |op: &OpLine| {
        selects.iter().all(|s| s.matches(op))
            && path.is_none_or(|p| {
                at_or_below(&op.path, p)
                    || op.new_path.as_deref().is_some_and(|n| at_or_below(n, p))
            })
    };
    let out = std::io::stdout();
    let mut out = out.lock();
    let shown = Shown::stdout();
    for s in &sections {
        let id = s.checkpoint.map(|c| c.to_hex());
        let list = match &s.ops {
            Ok(list) => list,
            Err(why) => {
                if !a.json {
                    writeln!(out, "# {}: {why}", id.as_deref().unwrap_or("?"))?;
                }
                continue;
            }
        };
        if !a.json {
            match &id {
                Some(id) => writeln!(out, "# {id}")?,
                None => writeln!(out, "# not committed")?,
            }
        }
        for op in list.iter().filter(|op| keep(op)) {
            if a.json {
                let line = JsonLine {
                    checkpoint: id.clone(),
                    op,
                };
                serde_json::to_writer(&mut out, &line)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}", human(op, shown))?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// One operation as a line: time, operation, path, requester, bytes.
fn human(op: &OpLine, shown: Shown) -> String {
    let time = jiff::Timestamp::from_nanosecond(i128::from(op.time_ns))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|_| op.time_ns.to_string());
    let mut s = format!("{time}  {:<15} {}", op.op, shown.line(&op.path));
    if let Some(n) = &op.new_path {
        s += &format!(" -> {}", shown.line(n));
    }
    let command = if op.command.is_empty() && op.pid == 0 {
        "unknown".to_string()
    } else {
        shown.line(&op.command).into_owned()
    };
    s += &format!("  pid {} {command} uid {}", op.pid, op.uid);
    if !op.run.is_empty() {
        s += &format!(" run {}", op.run);
    }
    if op.bytes > 0 || op.count > 1 {
        s += &format!("  {} bytes", op.bytes);
    }
    if op.count > 1 {
        s += &format!(" in {} writes", op.count);
    }
    if let Some(size) = op.size {
        s += &format!("  size {size}");
    }
    s
}

/// What checkpoint `id`'s commit folded.
fn committed(store: &Store, id: ObjectId, ck: &Checkpoint) -> Section {
    let ops = match ck.source.ops {
        None if ck.source.kind == "commit" => Err(
            "no operation log (committed by a storefs that did not record operations)".to_string(),
        ),
        None => Err(format!(
            "no operation log (a {}, not a commit of a fork)",
            ck.source.kind
        )),
        Some(obj) => store
            .get_object(&obj, &format!("operation log of checkpoint {id}"))
            .map_err(|e| format!("operation log unreadable: {e}"))
            .and_then(|b| {
                ops::from_jsonl(&b).ok_or_else(|| format!("operation log {obj} does not parse"))
            }),
    };
    Section {
        checkpoint: Some(id),
        ops,
    }
}

/// A fork's commits since `since` (default: its fork point), oldest first,
/// then what it has not committed: asked of its daemon when mounted (or in
/// a run), else replayed from its journal.
fn fork_sections(store: &Arc<Store>, name: &str, since: Option<ObjectId>) -> Result<Vec<Section>> {
    let mut log = journal::fork_log(store, name)?;
    log.reverse();
    // The fork point (first) was not made by this fork.
    let from = match since {
        None => 0,
        Some(c) => log.iter().position(|(id, _)| *id == c).with_context(|| {
            format!(
                "checkpoint {c} is not in fork '{name}''s history since its fork point; pick one `storefs log {name}` lists"
            )
        })?,
    };
    let mut out: Vec<Section> = log
        .iter()
        .skip(from + 1)
        .map(|(id, ck)| committed(store, *id, ck))
        .collect();
    let socket = match crate::daemon::runs::run_of_fork(store, name) {
        Some((_, t)) => Some(t.socket.into()),
        None => store
            .live_mount_of_fork(name)?
            .map(|m| store.mount_file(Path::new(&m.mountpoint), "sock")),
    };
    let pending = match socket {
        Some(sock) => control::uncommitted_ops(&sock).with_context(|| {
            format!("asking the daemon of fork '{name}' for its uncommitted operations")
        })?,
        None => match Fork::open(store.clone(), name) {
            Ok(f) => f.uncommitted_ops(),
            Err(journal::Error::Busy(_)) => bail!(
                "fork '{name}' is busy (a commit is running, or a mount is starting); retry in a moment"
            ),
            Err(e) => return Err(e.into()),
        },
    };
    out.push(Section {
        checkpoint: None,
        ops: Ok(pending),
    });
    Ok(out)
}

/// `storefs revert`: undo the selected processes' changes since CKPT
/// ([`ops::revert_plan`]): each path to restore is checked out of CKPT into
/// the fork (as `storefs checkout` does, through its daemon when one holds
/// it), conflicts and skipped paths are left as they are; with `--dry-run`
/// nothing changes. One line per path; exit 1 when any path was left.
pub fn revert(store_dir: &Path, a: RevertArgs) -> Result<()> {
    let store = Arc::new(Store::open(store_dir)?);
    if journal::read_fork_info(&store, &a.fork)?.is_none() {
        bail!("no fork named '{}' (`storefs forks` lists forks)", a.fork);
    }
    let since = match &a.since {
        Some(s) => store.resolve(s)?,
        None => journal::read_fork_info(&store, &a.fork)?
            .map(|f| f.base)
            .context("fork vanished")?,
    };
    let select = match (a.pid, &a.command, &a.run) {
        (Some(p), _, _) => Select::Pid(p),
        (_, Some(c), _) => Select::Command(c.clone()),
        (_, _, Some(r)) => Select::Run(r.clone()),
        _ => bail!("say whose changes to undo: --pid, --command or --run"),
    };
    let at = store.read_checkpoint(&since)?;
    let sections = fork_sections(&store, &a.fork, Some(since))?;
    let mut lines = Vec::new();
    for s in sections {
        match s.ops {
            Ok(list) => lines.extend(list),
            Err(why) => bail!(
                "commit {} of fork '{}': {why}: revert cannot tell who changed what before it; use --since {} or a later checkpoint",
                s.checkpoint.map(|c| c.to_hex()).unwrap_or_default(),
                a.fork,
                s.checkpoint.map(|c| c.to_hex()).unwrap_or_default()
            ),
        }
    }
    let plan = ops::revert_plan(&lines, &select);
    let restore: Vec<Vec<u8>> = plan
        .iter()
        .filter_map(|s| match s {
            Step::Restore(p) => Some(p.as_bytes().to_vec()),
            _ => None,
        })
        .collect();
    // What was done to each path restored (applied), in plan order.
    let mut done =
        match a.dry_run || restore.is_empty() {
            true => Vec::new(),
            false => super::checkout::into_fork(&store, &a.fork, &since, &restore)
                .with_context(|| {
                    format!(
                        "revert of fork '{}': putting {} path(s) back as checkpoint {} has them",
                        a.fork,
                        restore.len(),
                        &since.to_hex()[..12]
                    )
                })?
                .paths,
        }
        .into_iter();
    let out = std::io::stdout();
    let mut out = out.lock();
    let shown = Shown::stdout();
    let mut left = 0;
    for step in &plan {
        match step {
            Step::Restore(p) if a.dry_run => {
                let there = store.lookup_path(&at, p.as_bytes())?.is_some();
                let what = if there { "restore" } else { "remove" };
                writeln!(out, "{what}\t{}", shown.line(p))?;
            }
            Step::Restore(p) => {
                // `restored`, `removed`, or `absent` (gone already, as at CKPT).
                let what = done.next().map(|(_, d)| d).unwrap_or_default();
                writeln!(out, "{what}\t{}", shown.line(p))?;
            }
            Step::Conflict(p, by) => {
                left += 1;
                let who = if by.command.is_empty() {
                    "unknown"
                } else {
                    by.command.as_str()
                };
                writeln!(
                    out,
                    "conflict\t{}\t{} {} by pid {} ({})",
                    shown.line(p),
                    by.op,
                    shown.line(if by.path.is_empty() { "/" } else { &by.path }),
                    by.pid,
                    shown.line(who)
                )?;
            }
            Step::Skip(p, why) => {
                left += 1;
                let p = if p.is_empty() { "/" } else { p.as_str() };
                let fix = super::hint::of(why).unwrap_or_default();
                writeln!(out, "skip\t{}\t{why}{fix}", shown.line(p))?;
            }
        }
    }
    out.flush()?;
    if !a.dry_run && !restore.is_empty() {
        eprintln!(
            "storefs: {} path(s) put back into fork '{}' as checkpoint {} has them, not committed yet: `storefs commit {}`",
            restore.len(),
            a.fork,
            &since.to_hex()[..12],
            a.fork
        );
    }
    if left > 0 {
        let would = if a.dry_run { "would be" } else { "were" };
        let others = match (restore.is_empty(), a.dry_run) {
            (true, _) => "",
            (false, true) => "; the others would be put back as at the checkpoint",
            (false, false) => "; the others are back as at the checkpoint",
        };
        bail!(
            "{left} path(s) {would} left as they are (listed as conflict: changed later by another process, or skip){others}"
        );
    }
    Ok(())
}
