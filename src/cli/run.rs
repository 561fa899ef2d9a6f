//! `storefs run`: each target resolved as `mount` resolves it, then
//! [`crate::daemon::runs::run`]; and `__run-init`, the run's init.

use std::path::Path;

use anyhow::Result;
use clap::{Args, FromArgMatches};

use super::args::{MountArgs, RunArgs, RunInitArgs};
use crate::daemon::runs::{self, Options, Target};
use crate::daemon::{What, ns};
use crate::journal::Fork;
use crate::store::Store;

pub fn run(store_dir: &Path, a: RunArgs) -> Result<()> {
    // First, while this process has one thread.
    ns::enter()?;
    // Before any thread starts, so that every thread inherits the mask and
    // only the forwarding thread takes them (runs::run).
    crate::sys::block_stop_signals()?;
    let cwd = std::env::current_dir().ok();
    let store = Store::open(store_dir)?;
    let first = match &a.fork {
        Some(name) => {
            let base = store.resolve(&a.target)?;
            Fork::create_from(&store, name, &base, None)?;
            eprintln!(
                "storefs: fork '{name}' at {} (of {})",
                &base.to_hex()[..12],
                a.target
            );
            name.clone()
        }
        None => a.target.clone(),
    };
    let mut targets = Vec::new();
    for (n, name) in std::iter::once(first)
        .chain(a.with.iter().cloned())
        .enumerate()
    {
        let mut ma = mount_args(&name)?;
        ma.allow_origin = a.allow_origin.clone();
        ma.cache_size = a.cache_size;
        let (mut m, remote) = super::mount::resolve(store_dir, &ma)?;
        m.run_socket = Some(runs::socket_path(&store, n));
        let daemon_args = super::mount::daemon_args(&m, remote.as_deref());
        targets.push(Target {
            mount: m,
            daemon_args,
        });
    }
    // A cwd under an origin is looked up again inside, where the mount is.
    let cwd = cwd.filter(|c| targets.iter().any(|t| c.starts_with(&t.mount.mountpoint)));
    let forks: Vec<String> = targets
        .iter()
        .filter_map(|t| match &t.mount.what {
            What::Fork { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    let out = runs::run(
        &store,
        targets,
        Options {
            command: a.command.clone(),
            message: a.message.clone(),
            no_commit: a.no_commit,
            cwd,
        },
    )?;
    for (name, id) in &out.commits {
        match id {
            Some(id) => eprintln!("storefs: committed {name} as {}", &id[..12.min(id.len())]),
            None if a.no_commit => {
                eprintln!("storefs: {name} not committed (--no-commit); its journal is kept")
            }
            None => eprintln!("storefs: {name} unchanged; nothing committed"),
        }
    }
    let failed = out.failed.len();
    for f in out.failed {
        eprintln!("storefs: error: {}", super::one_line(&f.into()));
    }
    for (name, pid) in &out.died {
        let what = if forks.contains(name) {
            format!("; the next `storefs run {name}` or `storefs mount {name}` replays its journal")
        } else {
            String::new()
        };
        eprintln!(
            "storefs: error: the daemon serving {name} (pid {pid}) died while the command ran{what}"
        );
    }
    let code = if (out.died.is_empty() && failed == 0) || out.code != 0 {
        out.code
    } else {
        1
    };
    Err(super::ExitWith(code).into())
}

/// `storefs mount TARGET`'s arguments with their defaults.
fn mount_args(target: &str) -> Result<MountArgs> {
    let cmd = MountArgs::augment_args(clap::Command::new("mount"));
    let m = cmd.try_get_matches_from(["mount", target])?;
    Ok(MountArgs::from_arg_matches(&m)?)
}

/// `__run-init -- CMD…`: pid 1 of a run's PID namespace.
pub fn init(a: RunInitArgs) -> Result<()> {
    Err(super::ExitWith(ns::init(&a.command)).into())
}
