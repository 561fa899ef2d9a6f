//! `storefs merge`: resolve the two sides (a fork with uncommitted changes
//! is refused), call [`crate::store::merge::merge`], then set the ref or the
//! fork's head, and print the result.

use std::sync::Arc;

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};

use super::args::{ConflictsArg, MergeArgs};
use crate::journal::{self, Fork};
use crate::store::merge::{self, How, Options, Resolve};
use crate::store::{ObjectId, Store};

pub fn merge(store: &Store, a: MergeArgs) -> Result<()> {
    let ours = side(store, &a.a, "the merge")?;
    let theirs = side(store, &a.b, "the merge")?;
    let base = a.base.as_deref().map(|b| store.resolve(b)).transpose()?;
    // The fork to move: opened (its lock held: not mounted) before the merge.
    let into = match &a.into {
        Some(name) => Some(open_into(store, name)?),
        None => None,
    };
    if let Some(name) = &a.r#ref {
        Store::check_name(name)?;
    }
    let opts = Options {
        resolve: match a.conflicts {
            None => Resolve::Fail,
            Some(ConflictsArg::Ours) => Resolve::Ours,
            Some(ConflictsArg::Theirs) => Resolve::Theirs,
            Some(ConflictsArg::Both) => Resolve::Both,
        },
        label_a: a.a.clone(),
        label_b: a.b.clone(),
    };
    let m = merge::merge(store, &ours, &theirs, base, &opts, &a.message)?;
    let conflicts = m.outcome.as_ref().map_or(&[][..], |o| &o.conflicts);
    if let Some(id) = &m.checkpoint {
        if let Some(name) = &a.r#ref {
            if let Some(old) = store.get_ref(name)?
                && !store.descends_from(id, &old)?
            {
                bail!(
                    "ref '{name}' points at {}, which the merge result {} does not include; pick another --ref, or merge {} too (nothing was moved; the result stays in the store)",
                    &old.to_hex()[..12],
                    &id.to_hex()[..12],
                    &old.to_hex()[..12]
                );
            }
            store.set_ref(name, id)?;
        }
        if let Some(fork) = into {
            fork.move_head(id, false)?;
        }
    }
    if a.json {
        let list: Vec<Value> = conflicts
            .iter()
            .map(|c| {
                let mut o = Map::new();
                super::json::put_bytes(&mut o, "path", &c.path);
                o.insert("kind".into(), c.kind.name().into());
                o.insert("detail".into(), c.detail.clone().into());
                o.insert("resolution".into(), c.resolution.clone().into());
                Value::Object(o)
            })
            .collect();
        super::json::print(&json!({
            "result": how_name(m.how),
            "checkpoint": m.checkpoint.map(|c| c.to_hex()),
            "parents": [ours.to_hex(), theirs.to_hex()],
            "base": m.base.to_hex(),
            "ref": a.r#ref,
            "fork": a.into,
            "conflicts": list,
            "trees_read": m.outcome.as_ref().map(|o| o.trees_read),
        }))?;
    } else {
        for c in conflicts {
            let line = format!(
                "{}\t{}\t{}",
                c.kind.name(),
                super::printable(&String::from_utf8_lossy(&c.path)),
                c.detail
            );
            match &c.resolution {
                None => super::say(line)?,
                Some(how) => eprintln!("storefs: conflict {line}: resolved: {how}"),
            }
        }
        if let Some(id) = &m.checkpoint {
            match m.how {
                How::UpToDate => eprintln!("storefs: already up to date: {} is in {}", a.b, a.a),
                How::FastForward => {
                    eprintln!(
                        "storefs: fast-forward: {} is the merge base, the result is {}",
                        a.a, a.b
                    )
                }
                _ => {}
            }
            super::say(id.to_hex())?;
        }
    }
    if m.how == How::Conflicts {
        let n = conflicts.iter().filter(|c| c.resolution.is_none()).count();
        bail!(
            "{n} conflict{} between {} and {}: nothing published; resolve them in the branches, or rerun with --conflicts ours|theirs|both",
            if n == 1 { "" } else { "s" },
            a.a,
            a.b
        );
    }
    Ok(())
}

fn how_name(h: How) -> &'static str {
    match h {
        How::Merged => "merged",
        How::UpToDate => "up-to-date",
        How::FastForward => "fast-forward",
        How::Conflicts => "conflicts",
    }
}

/// The checkpoint `spec` names; a fork's head, refused when its journal
/// holds changes no commit has taken (they would be left out).
pub(super) fn side(store: &Store, spec: &str, what: &str) -> Result<ObjectId> {
    if store.get_ref(spec)?.is_none()
        && journal::read_fork_info(store, spec)?.is_some()
        && journal::has_uncommitted_changes(store, spec)?
    {
        let mounted = store
            .live_mount_of_fork(spec)?
            .map(|m| format!(" (mounted at {})", m.mountpoint))
            .unwrap_or_default();
        bail!(
            "fork '{spec}'{mounted} has uncommitted changes, which {what} would leave out; commit them first (`storefs commit {spec}`), then retry"
        );
    }
    Ok(store.resolve(spec)?)
}

/// Fork `name`, opened to move its head: refused when mounted or when its
/// journal holds uncommitted changes.
fn open_into(store: &Store, name: &str) -> Result<Fork> {
    if journal::read_fork_info(store, name)?.is_none() {
        bail!(
            "no fork named '{name}' for --into; `storefs forks` lists forks (use --ref to publish a ref)"
        );
    }
    if let Some(m) = store.live_mount_of_fork(name)? {
        bail!(
            "fork '{name}' is mounted at {}; --into needs it unmounted: `storefs umount {}`, then merge again (or publish with --ref NAME)",
            m.mountpoint,
            m.mountpoint
        );
    }
    let store = Arc::new(Store::open(store.root())?);
    let fork = Fork::open(store, name)?;
    if fork.has_uncommitted() {
        return Err(journal::Error::Uncommitted(name.into()).into());
    }
    Ok(fork)
}
