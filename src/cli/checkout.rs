//! `storefs checkout TARGET PATH… --into FORK`: resolve the target and the
//! paths, then [`crate::journal::Fork::checkout`] on the fork, through the
//! daemon that holds it (a mount or a run) or opened here; print what was
//! done to each path.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use super::args::CheckoutArgs;
use crate::daemon::control::{self, CheckoutReport};
use crate::daemon::runs;
use crate::journal::{self, Fork};
use crate::store::{ObjectId, Store};

pub fn checkout(store: &Store, a: CheckoutArgs) -> Result<()> {
    let name = &a.into;
    if journal::read_fork_info(store, name)?.is_none() {
        bail!(
            "no fork named '{name}' for --into; `storefs forks` lists forks (make one with `storefs fork {} --name {name}`)",
            a.target
        );
    }
    // The fork's own head as the target undoes its uncommitted changes;
    // another fork's uncommitted changes would be silently left out.
    let target = if a.target == *name {
        store.resolve(&a.target)?
    } else {
        super::merge::side(store, &a.target, "the checkout")?
    };
    let mounted = store.live_mount_of_fork(name)?;
    let head = store.resolve(name)?;
    let origin = store.read_checkpoint(&head)?.origin.unwrap_or_default();
    let mut anchors: Vec<&[u8]> = Vec::new();
    if !origin.is_empty() {
        anchors.push(origin.as_bytes());
    }
    if let Some(m) = &mounted {
        anchors.push(m.mountpoint.as_bytes());
    }
    let paths = a
        .paths
        .iter()
        .map(|p| journal::relative_path(p.as_bytes(), &anchors))
        .collect::<Result<Vec<_>, _>>()?;
    let report = into_fork(store, name, &target, &paths)?;
    if a.json {
        let list: Vec<Value> = report
            .paths
            .iter()
            .map(|(p, done)| {
                let mut o = Map::new();
                super::json::put_bytes(&mut o, "path", p);
                o.insert("done".into(), done.clone().into());
                Value::Object(o)
            })
            .collect();
        super::json::print(&json!({
            "target": target.to_hex(),
            "fork": name,
            "paths": list,
            "created": report.created,
            "removed": report.removed,
        }))?;
    } else {
        for (p, done) in &report.paths {
            super::say(format!(
                "{done}\t{}",
                super::printable(&String::from_utf8_lossy(p))
            ))?;
        }
        eprintln!(
            "storefs: {} path{} of {} put into fork '{name}' ({} entries created, {} removed), not committed yet: `storefs commit {name}`",
            report.paths.len(),
            if report.paths.len() == 1 { "" } else { "s" },
            &target.to_hex()[..12],
            report.created,
            report.removed
        );
    }
    Ok(())
}

/// Put `paths` (relative to the root) into fork `name` as checkpoint
/// `target` has them ([`Fork::checkout`]): through the daemon that holds the
/// fork (a `storefs run`, or a mount: the kernel forgets what it cached of
/// them), or on the fork opened here when nothing holds it.
pub(super) fn into_fork(
    store: &Store,
    name: &str,
    target: &ObjectId,
    paths: &[Vec<u8>],
) -> Result<CheckoutReport> {
    Ok(match (runs::run_of_fork(store, name), store.live_mount_of_fork(name)?) {
        (Some((r, t)), _) => control::checkout(Path::new(&t.socket), target, paths)
            .with_context(|| {
                format!(
                    "checkout into fork '{name}', held by `storefs run` pid {} ({}): its daemon did not do it; wait for the run to end (or stop it), then check out again",
                    r.pid,
                    r.command_line()
                )
            })?,
        (None, Some(m)) => {
            let sock = store.mount_file(Path::new(&m.mountpoint), "sock");
            control::checkout(&sock, target, paths).with_context(|| {
                format!(
                    "checkout into fork '{name}' mounted at {}: its daemon did not do it; `storefs status` shows the mount, `storefs umount {}` ends it",
                    m.mountpoint, m.mountpoint
                )
            })?
        }
        (None, None) => {
            let fork = Fork::open(Arc::new(Store::open(store.root())?), name)?;
            // This command is the process that asked for the changes.
            let done = journal::ops::on_behalf_of(journal::ops::this_process(), || {
                fork.checkout(target, paths)
            })?;
            fork.sync()?;
            CheckoutReport::of(&done)
        }
    })
}
