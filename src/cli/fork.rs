//! `fork` and `commit`. A mounted fork is committed by its daemon, through
//! its control socket ([`crate::daemon::request`]).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use super::args::{CommitArgs, ForkArgs};
use crate::daemon::{Request, request};
use crate::journal::{self, Fork, Upstream};
use crate::remote::{self, PullOptions, Remote};
use crate::store::Store;

pub fn fork(store: &Store, a: ForkArgs) -> Result<()> {
    // `REMOTE:REF` (no ref, fork or id contains ':'), as for `mount`;
    // `git:COMMIT` is an imported git commit.
    let remote_ref = a
        .checkpoint
        .split_once(':')
        .filter(|(r, _)| *r != "git" && remote::url_of(store, r).is_ok());
    let (base, upstream) = match remote_ref {
        None => (store.resolve(&a.checkpoint)?, None),
        Some((remote_name, name)) => {
            // Refuse a taken name before moving any bytes.
            if store.get_ref(&a.name)?.is_some() || journal::fork_dir(store, &a.name).exists() {
                return Err(journal::Error::NameTaken(a.name.clone()).into());
            }
            let r = Remote::open(store, remote_name)?;
            let progress = super::remote::progress_bar("fetching");
            let opts = PullOptions {
                force: false,
                progress: progress.clone(),
            };
            let result = r.pull(store, name, None, &opts);
            progress.finish_and_clear();
            let rep = result?;
            eprintln!(
                "storefs: pulled {remote_name}/{name}: {} objects fetched ({} bytes), {} records fetched",
                rep.objects_fetched, rep.bytes_fetched, rep.records_fetched
            );
            (
                rep.checkpoint,
                Some(Upstream {
                    remote: remote_name.to_string(),
                    r#ref: name.to_string(),
                }),
            )
        }
    };
    let from = upstream
        .as_ref()
        .map(|u| format!(" (from {}/{})", u.remote, u.r#ref))
        .unwrap_or_default();
    Fork::create_from(store, &a.name, &base, upstream)?;
    eprintln!(
        "storefs: fork '{}' at {}{from}; mount it read-write with `storefs mount {}`",
        a.name,
        &base.to_hex()[..12],
        a.name
    );
    Ok(())
}

pub fn commit(store_dir: &Path, a: CommitArgs) -> Result<()> {
    let store = Store::open(store_dir)?;
    if journal::read_fork_info(&store, &a.fork)?.is_none() {
        bail!(
            "no fork named '{}'; make one with `storefs fork CHECKPOINT --name {}`",
            a.fork,
            a.fork
        );
    }
    let mounted = store
        .live_mounts()?
        .into_iter()
        .find(|m| m.mode == "rw" && m.target == a.fork);
    let id = match mounted {
        Some(m) => {
            let sock = store.mount_file(Path::new(&m.mountpoint), "sock");
            request(&sock, &Request::Commit { message: a.message }).with_context(|| {
                format!("commit of fork '{}' mounted at {}", a.fork, m.mountpoint)
            })?
        }
        None => {
            let fork = Fork::open(Arc::new(store), &a.fork)?;
            fork.commit(&a.message)?.to_hex()
        }
    };
    super::say(id)?;
    Ok(())
}
