//! The command that fixes an error: the layers below say what is wrong
//! (and a fix that is no command: free space, give a mountpoint); which
//! `storefs` verb fixes it is said here, once, appended to the message
//! where the CLI prints an error ([`super::one_line`]) or a warning.

use std::error::Error as StdError;

use crate::daemon::runs::{Failed, Holder};
use crate::daemon::target::TargetError;
use crate::fs::MountError;
use crate::journal::ops::Unrevertable;
use crate::{daemon, ingest, journal, remote, store};

/// What to append to the message of `e` (its first cause that a command
/// fixes), starting with its separator (`; …`, `, or …`, ` (…)`).
pub(super) fn hint(e: &anyhow::Error) -> Option<String> {
    e.chain().find_map(of)
}

/// What to append to the message of the error or warning `e` alone.
pub(super) fn of(e: &(dyn StdError + 'static)) -> Option<String> {
    if let Some(e) = e.downcast_ref::<store::Error>() {
        return of_store(e);
    }
    if let Some(e) = e.downcast_ref::<journal::Error>() {
        return of_journal(e);
    }
    if let Some(e) = e.downcast_ref::<remote::Error>() {
        return of_remote(e);
    }
    if let Some(e) = e.downcast_ref::<ingest::Error>() {
        return of_ingest(e);
    }
    if let Some(e) = e.downcast_ref::<daemon::Error>() {
        return of_daemon(e);
    }
    if let Some(e) = e.downcast_ref::<TargetError>() {
        return of_target(e);
    }
    if let Some(h) = e.downcast_ref::<Holder>() {
        return Some(of_holder(h));
    }
    if let Some(Failed::Commit { fork, .. }) = e.downcast_ref::<Failed>() {
        return Some(format!(
            "; the next `storefs run {fork}` or `storefs mount {fork}` replays it"
        ));
    }
    if let Some(remote::Skipped::NotAnId { .. }) = e.downcast_ref::<remote::Skipped>() {
        return Some(
            " (`storefs push --force` overwrites it, `storefs remote delete-ref` removes it)"
                .into(),
        );
    }
    if let Some(journal::BadPath::Root(_)) = e.downcast_ref::<journal::BadPath>() {
        return Some(
            " (or make a new fork of the target: `storefs fork TARGET --name NAME`)".into(),
        );
    }
    if let Some(Unrevertable::NotUtf8) = e.downcast_ref::<Unrevertable>() {
        return Some("; `storefs checkout` it by hand".into());
    }
    if let Some(MountError::BadOption { option, .. }) = e.downcast_ref::<MountError>()
        && option == "auto_unmount"
    {
        return Some("; stop it with `storefs umount MOUNTPOINT`".into());
    }
    None
}

/// `e` and the command that fixes it, for a daemon's control socket to
/// answer (`daemon::Settings::explain`).
pub(super) fn explain(e: &(dyn StdError + 'static)) -> String {
    format!("{e}{}", of(e).unwrap_or_default())
}

fn of_store(e: &store::Error) -> Option<String> {
    use store::Error as E;
    Some(match e {
        E::NoStore(p) => format!(
            "; create it with `storefs init --store {}` or snapshot into it",
            p.display()
        ),
        E::Missing { .. } | E::Damaged(_) | E::GcBlind { .. } => "; run `storefs verify`".into(),
        E::Corrupt { .. } => "; run `storefs verify` to quarantine it".into(),
        E::UnknownTarget(_) => {
            "; `storefs refs` lists refs, `storefs forks` forks and `storefs log` checkpoints"
                .into()
        }
        E::PrefixTooShort(_) => {
            "; `storefs refs`, `storefs forks` and `storefs log` list them".into()
        }
        E::NoGitCommit(_) => "; import its repository with `storefs import-git REPO`".into(),
        _ => return None,
    })
}

fn of_journal(e: &journal::Error) -> Option<String> {
    use journal::Error as E;
    match e {
        E::Uncommitted(name) => Some(format!(
            "; commit them (`storefs commit {name}`) or discard them, then retry"
        )),
        E::NotAncestor { name, .. } => Some(format!(
            "; keep them with `storefs fork {name} --name OTHER`, then retry with --force"
        )),
        E::Store(e) => of_store(e),
        _ => None,
    }
}

fn of_remote(e: &remote::Error) -> Option<String> {
    use remote::Error as E;
    Some(match e {
        E::UnknownRemote(_) => {
            "; `storefs remote list` shows them, `storefs remote add NAME URL` adds one".into()
        }
        E::RemoteExists(name, _) => format!("; `storefs remote remove {name}` first"),
        E::NoRemoteRef { remote, name } => {
            format!("; push it first (`storefs push {remote} TARGET --as {name}`)")
        }
        E::BadRemoteRef { .. } => "; overwrite it with push --force".into(),
        E::Conflict { remote, name, .. } => format!(
            "; pull it first (`storefs pull {remote} {name} --fork FORK` for a fork), or --force"
        ),
        E::LocalConflict { .. } => ": pull --as ANOTHER_NAME, or --force".into(),
        E::BadPack { .. } => {
            "; run `storefs gc --remote NAME` from a store that has the objects, or push them again"
                .into()
        }
        E::ForkNamed(local) => {
            format!(" (pull --as ANOTHER_NAME, or pull --fork {local} to move the fork)")
        }
        E::Store(e) => return of_store(e),
        _ => return None,
    })
}

fn of_ingest(e: &ingest::Error) -> Option<String> {
    use ingest::Error as E;
    match e {
        E::BadName { .. } | E::BadEntry { .. } => Some(", run `storefs verify`".into()),
        E::GitBlobTooLarge { .. } => {
            Some("; repack it so git keeps large blobs whole (`git -c core.bigFileThreshold=512m repack -a -d -F`), or import a checkout of it with `storefs snapshot`".into())
        }
        E::Store(e) => of_store(e),
        _ => None,
    }
}

fn of_daemon(e: &daemon::Error) -> Option<String> {
    use daemon::Error as E;
    Some(match e {
        E::DeadMount(p) => format!("; clear it with `storefs umount {}`", p.display()),
        E::AlreadyMounted { mountpoint, .. } => {
            format!(
                "; unmount it first (`storefs umount {}`)",
                mountpoint.display()
            )
        }
        E::HostMount { path, .. } => {
            format!("; unmount it first (`storefs umount {}`)", path.display())
        }
        E::NoUserNamespace(_) => {
            ": run as root, or use `storefs mount` with a mountpoint you own".into()
        }
        E::Held(h) => of_holder(h),
        E::Store(e) => return of_store(e),
        E::Journal(e) => return of_journal(e),
        _ => return None,
    })
}

fn of_holder(h: &Holder) -> String {
    match h {
        Holder::Run { name, .. } => {
            format!(", or run a fork of its own (`storefs run {name} --fork NEW -- …`)")
        }
        Holder::Mount { mountpoint, .. } => {
            format!("; unmount it first (`storefs umount {mountpoint}`)")
        }
    }
}

fn of_target(e: &TargetError) -> Option<String> {
    use TargetError as E;
    match e {
        E::NoOrigin { label, .. } | E::BadOrigin { label, .. } => {
            Some(format!("; give a mountpoint: storefs mount {label} PATH"))
        }
        E::OriginNotAllowed {
            origin, why, label, ..
        } => {
            let allow = if why.can_be_allowed() {
                format!(" or allow it with --allow-origin {origin}")
            } else {
                String::new()
            };
            Some(format!(
                "; give a mountpoint (storefs mount {label} PATH){allow}"
            ))
        }
        E::Store(e) => of_store(e),
        E::Journal(e) => of_journal(e),
        E::Remote(e) => of_remote(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::hint;
    use crate::{journal, store};

    /// The fact from below, then the command from here, as one line.
    #[test]
    fn the_command_follows_the_fact() {
        let e = anyhow::Error::from(journal::Error::Uncommitted("f".into()));
        assert_eq!(
            format!("{e}{}", hint(&e).unwrap()),
            "fork 'f' has uncommitted changes in its journal; commit them (`storefs commit f`) or discard them, then retry"
        );
        // Through a transparent wrapper and a context.
        let e = anyhow::Error::from(journal::Error::Store(store::Error::UnknownTarget(
            "x".into(),
        )))
        .context("cannot fork");
        assert!(hint(&e).unwrap().contains("`storefs refs` lists refs"));
        let e = anyhow::anyhow!("no command fixes this");
        assert_eq!(hint(&e), None);
    }
}
