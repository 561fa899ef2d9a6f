//! `fork` and `commit`. A mounted fork is committed by its daemon, through
//! its control socket ([`crate::daemon::request`]).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use super::args::{CommitArgs, ForkArgs, ForksArgs};
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

/// `storefs forks`: every fork, its head and fork point, whether its journal
/// holds uncommitted changes, and its live mount.
pub fn forks(store: &Store, a: ForksArgs) -> Result<()> {
    if !a.delete.is_empty() {
        return delete_forks(store, &a.delete, a.discard);
    }
    let live = store.live_mounts()?;
    let mut list = Vec::new();
    for (name, head) in store.list_forks()? {
        let Some(info) = journal::read_fork_info(store, &name)? else {
            continue;
        };
        let uncommitted = journal::has_uncommitted_changes(store, &name)?;
        let mounted = live.iter().find(|m| m.mode == "rw" && m.target == name);
        let run = crate::daemon::runs::run_of_fork(store, &name);
        list.push(serde_json::json!({
            "name": name,
            "head": head.to_hex(),
            "fork_point": info.base.to_hex(),
            "uncommitted": uncommitted,
            "upstream": info.upstream.as_ref().map(|u| serde_json::json!({"remote": u.remote, "ref": u.r#ref})),
            "mounted": mounted.map(|m| serde_json::json!({"mountpoint": m.mountpoint, "pid": m.pid})),
            "run": run.map(|(r, t)| serde_json::json!({"pid": r.pid, "command": r.command_line(), "origin": t.origin})),
        }));
    }
    if a.json {
        return super::json::print(&serde_json::Value::Array(list));
    }
    let mut out = std::io::stdout().lock();
    for f in &list {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            f["name"].as_str().unwrap_or_default(),
            f["head"].as_str().unwrap_or_default(),
            f["fork_point"].as_str().unwrap_or_default(),
            if f["uncommitted"] == true {
                "yes"
            } else {
                "no"
            },
            match (
                f["mounted"]["mountpoint"].as_str(),
                f["run"]["origin"].as_str()
            ) {
                (Some(mp), _) => mp.to_string(),
                (None, Some(origin)) => format!("{origin} (run {})", f["run"]["pid"]),
                (None, None) => "-".into(),
            },
        )?;
    }
    Ok(())
}

pub fn commit(store_dir: &Path, a: CommitArgs) -> Result<()> {
    let store = Store::open(store_dir)?;
    if journal::read_fork_info(&store, &a.fork)?.is_none() {
        // A ref or checkpoint is not committed to: a fork of it is.
        if store.resolve(&a.fork).is_ok() {
            let what = if store.get_ref(&a.fork)?.is_some() {
                "a ref"
            } else {
                "a checkpoint"
            };
            let name = free_fork_name(&store, &a.fork)?;
            bail!(
                "'{}' is {what}, not a fork: only a fork takes commits; make one with `storefs fork {} --name {name}`, mount it, write, then `storefs commit {name}` (`storefs forks` lists forks)",
                a.fork,
                a.fork
            );
        }
        bail!(
            "no fork named '{}'; make one with `storefs fork CHECKPOINT --name {}` (`storefs forks` lists forks)",
            a.fork,
            a.fork
        );
    }
    let mounted = store.live_mount_of_fork(&a.fork)?;
    let in_run = crate::daemon::runs::run_of_fork(&store, &a.fork);
    let id = match (mounted, in_run) {
        (_, Some((r, t))) => request(
            Path::new(&t.socket),
            &Request::Commit { message: a.message },
        )
        .with_context(|| format!("commit of fork '{}' inside run pid {}", a.fork, r.pid))?,
        (Some(m), None) => {
            let sock = store.mount_file(Path::new(&m.mountpoint), "sock");
            request(&sock, &Request::Commit { message: a.message }).with_context(|| {
                format!("commit of fork '{}' mounted at {}", a.fork, m.mountpoint)
            })?
        }
        (None, None) => {
            let fork = Fork::open(Arc::new(store), &a.fork)?;
            fork.commit(&a.message)?.to_hex()
        }
    };
    super::say(id)?;
    Ok(())
}

/// A name for a new fork of `base` that no ref or fork has: `BASE-work`,
/// else `BASE-work2`, `BASE-work3`, … (a checkpoint id is shortened to 12,
/// `git:COMMIT` becomes `fork`).
fn free_fork_name(store: &Store, base: &str) -> Result<String> {
    let mut stem: String = if store.get_ref(base)?.is_some() {
        base.to_string()
    } else {
        base.chars().take(12).collect()
    };
    if Store::check_name(&format!("{stem}-work")).is_err() {
        stem = "fork".into(); // `git:…` is no name
    }
    let mut n = 1;
    loop {
        let name = match n {
            1 => format!("{stem}-work"),
            n => format!("{stem}-work{n}"),
        };
        if store.get_ref(&name)?.is_none() && !journal::fork_dir(store, &name).exists() {
            return Ok(name);
        }
        n += 1;
    }
}

/// `forks --delete`: each fork named, or an error naming the first that
/// cannot be deleted (those before it are gone).
fn delete_forks(store: &Store, names: &[String], discard: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    for name in names {
        let head = store.fork_head(name)?;
        match journal::delete_fork(store, name, discard) {
            Ok(()) => {}
            Err(journal::Error::NoFork(_)) if store.get_ref(name)?.is_some() => {
                bail!("'{name}' is a ref, not a fork; `storefs refs --delete {name}` deletes it")
            }
            Err(journal::Error::Uncommitted(_)) => bail!(
                "fork '{name}' has uncommitted changes; commit them (`storefs commit {name}`), or delete it with them: --discard"
            ),
            Err(e) => return Err(e.into()),
        }
        let head = head.map(|h| h.to_hex()).unwrap_or_default();
        writeln!(out, "{name}\t{head}")?;
    }
    Ok(())
}
