//! `storefs remote`, `push`, `pull`.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::{Result, bail};

use super::args::{PullArgs, PushArgs, RemoteCommand};
use crate::remote::{self, PullOptions, PushOptions, Remote};
use crate::store::Store;

pub fn remote(store_dir: &Path, c: RemoteCommand) -> Result<()> {
    match c {
        RemoteCommand::Add { name, url } => {
            let store = Store::open_or_create(store_dir)?;
            remote::add(&store, &name, &url)?;
        }
        RemoteCommand::List => {
            let store = Store::open(store_dir)?;
            for (name, url) in remote::list(&store)? {
                println!("{name}\t{url}");
            }
        }
        RemoteCommand::Remove { name } => {
            let store = Store::open(store_dir)?;
            remote::remove(&store, &name)?;
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
    let store = Store::open_or_create(store_dir)?;
    let local = a.as_name.unwrap_or_else(|| a.r#ref.clone());
    let r = Remote::open(&store, &a.remote)?;
    let progress = progress_bar("fetching");
    let opts = PullOptions {
        force: a.force,
        progress: progress.clone(),
    };
    let result = r.pull(&store, &a.r#ref, &local, &opts);
    progress.finish_and_clear();
    let rep = result?;
    eprintln!(
        "storefs: pulled {}/{} into ref {local}: {} objects fetched ({} bytes), {} records fetched",
        a.remote, a.r#ref, rep.objects_fetched, rep.bytes_fetched, rep.records_fetched
    );
    println!("{}", rep.checkpoint);
    Ok(())
}

fn progress_bar(what: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} objects {per_sec} {msg}")
            .expect("valid template"),
    );
    pb.set_message(what.to_string());
    pb
}
