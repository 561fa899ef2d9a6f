//! `storefs remote`, `push`, `pull`.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, bail};

use super::args::{PullArgs, PushArgs, RemoteCommand};
use crate::journal::{self, Fork};
use crate::remote::{self, PullOptions, PushOptions, Remote};
use crate::store::Store;

pub fn remote(store_dir: &Path, c: RemoteCommand) -> Result<()> {
    match c {
        RemoteCommand::Add { name, url } => {
            let store = Store::open_or_create(store_dir)?;
            remote::add(&store, &name, &url)?;
        }
        RemoteCommand::List { json } => {
            let store = Store::open(store_dir)?;
            if json {
                let list: Vec<serde_json::Value> = remote::list(&store)?
                    .into_iter()
                    .map(|(name, url)| serde_json::json!({"name": name, "url": url}))
                    .collect();
                return super::json::print(&serde_json::Value::Array(list));
            }
            let shown = super::term::Shown::stdout();
            for (name, url) in remote::list(&store)? {
                super::say(format_args!("{name}\t{}", shown.line(&url)))?;
            }
        }
        RemoteCommand::Remove { name } => {
            let store = Store::open(store_dir)?;
            remote::remove(&store, &name)?;
        }
        RemoteCommand::Refs { name, json } => {
            let store = Store::open(store_dir)?;
            let listing = Remote::open(&store, &name)?.list_refs()?;
            for why in &listing.skipped {
                super::warn_of(why);
            }
            let refs = listing.refs;
            if json {
                let list: Vec<serde_json::Value> = refs
                    .into_iter()
                    .map(|(name, ck)| serde_json::json!({"name": name, "checkpoint": ck}))
                    .collect();
                return super::json::print(&serde_json::Value::Array(list));
            }
            for (r, ck) in refs {
                super::say(format_args!("{r}\t{ck}"))?;
            }
        }
        RemoteCommand::DeleteRef { name, r#ref } => {
            let store = Store::open(store_dir)?;
            let was = Remote::open(&store, &name)?.delete_ref(&r#ref)?;
            eprintln!(
                "storefs: deleted {name}/{} (was {was}); `storefs gc --remote {name}` reclaims what only it reached",
                r#ref
            );
        }
    }
    Ok(())
}

pub fn push(store: &Store, a: PushArgs) -> Result<()> {
    let name = match a.as_name {
        Some(n) => n,
        None if store.get_ref(&a.target)?.is_some() || store.fork_head(&a.target)?.is_some() => {
            a.target.clone()
        }
        None => bail!(
            "'{}' is not a ref or fork name; say which remote ref to move with --as NAME",
            a.target
        ),
    };
    let target = store.resolve(&a.target)?;
    let r = Remote::open(store, &a.remote)?;
    let progress = progress_bar("uploading");
    let opts = PushOptions {
        force: a.force,
        progress: progress.clone(),
    };
    let result = r.push(store, &target, &name, &opts);
    progress.finish_and_clear();
    let rep = result?;
    if a.json {
        return super::json::print(&serde_json::json!({
            "remote": a.remote,
            "ref": name,
            "checkpoint": target.to_hex(),
            "previous": rep.previous,
            "checkpoints": rep.checkpoints,
            "objects_needed": rep.objects_needed,
            "objects_uploaded": rep.objects_uploaded,
            "bytes_uploaded": rep.bytes_uploaded,
            "records_uploaded": rep.records_uploaded,
        }));
    }
    eprintln!(
        "storefs: pushed {target} to {}/{name}: {} of {} objects uploaded ({} bytes), {} records uploaded, {} checkpoints{}",
        a.remote,
        rep.objects_uploaded,
        rep.objects_needed,
        rep.bytes_uploaded,
        rep.records_uploaded,
        rep.checkpoints,
        match &rep.previous {
            Some(p) if *p == target.to_hex() => " (ref unchanged)".to_string(),
            Some(p) => format!(" (ref was {p})"),
            None => " (new ref)".to_string(),
        }
    );
    Ok(())
}

pub fn pull(store_dir: &Path, a: PullArgs) -> Result<()> {
    let store = Arc::new(Store::open_or_create(store_dir)?);
    let local = match &a.fork {
        Some(_) => None,
        None => Some(a.as_name.clone().unwrap_or_else(|| a.r#ref.clone())),
    };
    let r = Remote::open(&store, &a.remote)?;
    // Fail before fetching when the fork cannot move: missing, mounted, or
    // with uncommitted changes (checked again, under the fork's lock, after).
    let fork = match &a.fork {
        Some(name) => {
            if journal::read_fork_info(&store, name)?.is_none() {
                bail!(
                    "no fork named '{name}'; make one with `storefs fork {}:{} --name {name}`",
                    a.remote,
                    a.r#ref
                );
            }
            Some(Fork::open(store.clone(), name)?)
        }
        None => None,
    };
    if let Some(f) = &fork
        && f.has_uncommitted()
    {
        return Err(journal::Error::Uncommitted(f.name().to_string()).into());
    }
    let progress = progress_bar("fetching");
    let opts = PullOptions {
        force: a.force,
        progress: progress.clone(),
    };
    let result = r.pull(&store, &a.r#ref, local.as_deref(), &opts);
    progress.finish_and_clear();
    let rep = result?;
    let into = match (&local, &a.fork) {
        (Some(l), _) => format!("ref {l}"),
        (None, Some(f)) => format!("fork {f}"),
        (None, None) => unreachable!("one of them is set"),
    };
    // The fork moves (or is refused) before anything is reported, so a
    // refusal is one line; the pulled checkpoint stays here either way.
    let mut fork_from = None;
    let moved = match fork {
        Some(f) => {
            let old = f.move_head(&rep.checkpoint, a.force)?;
            fork_from = Some(old.to_hex());
            if old != rep.checkpoint {
                format!(
                    "; fork moved from {} to {}",
                    &old.to_hex()[..12],
                    &rep.checkpoint.to_hex()[..12]
                )
            } else {
                "; fork unchanged".to_string()
            }
        }
        None => String::new(),
    };
    if a.json {
        return super::json::print(&serde_json::json!({
            "remote": a.remote,
            "ref": a.r#ref,
            "checkpoint": rep.checkpoint.to_hex(),
            "local_ref": local,
            "fork": a.fork,
            "fork_was": fork_from,
            "objects_fetched": rep.objects_fetched,
            "bytes_fetched": rep.bytes_fetched,
            "records_fetched": rep.records_fetched,
        }));
    }
    eprintln!(
        "storefs: pulled {}/{} for {into}: {} objects fetched ({} bytes), {} records fetched{moved}",
        a.remote, a.r#ref, rep.objects_fetched, rep.bytes_fetched, rep.records_fetched
    );
    super::say(rep.checkpoint)?;
    Ok(())
}

/// An object-count progress bar on stderr when it is a terminal; hidden otherwise.
pub(super) fn progress_bar(what: &str) -> Arc<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return Arc::new(indicatif::ProgressBar::hidden());
    }
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} objects {per_sec} {msg}")
            .expect("valid template"),
    );
    pb.set_message(what.to_string());
    Arc::new(pb)
}
