//! What a mount's TARGET names, resolved into the [`Mount`] to serve: an
//! archive (imported by the caller), a remote's ref mounted lazily
//! (`REMOTE:REF`), or a ref, fork, checkpoint or imported git commit; a fork
//! (and not a ref of that name) read-write at its head; where (the
//! mountpoint given, else the checkpoint's origin where the origin policy
//! allows it); and which backend (the fetching one for a lazy mount's
//! daemon). Used by `storefs mount` and `storefs run`; prints nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::origin::{self, OriginPolicy, Refusal};
use super::{Mount, Settings, What};
use crate::ingest::archive::is_archive_path;
use crate::journal;
use crate::remote::{self, LazyBackend};
use crate::store::mounts::MountRecord;
use crate::store::{self, ObjectId, Store, absolute};

/// What the caller asks to mount (a verb's arguments, as plain data).
#[derive(Clone, Debug)]
pub struct TargetRequest {
    /// What the user named: a ref, fork, checkpoint id (prefix),
    /// `git:COMMIT`, `REMOTE:REF`, or an archive's path (first part).
    pub target: String,
    /// The name the mount shows (a daemon is given it, with the checkpoint
    /// id or fork as `target`, so that it resolves nothing again); a
    /// labelled target is never an archive nor `REMOTE:REF`.
    pub label: Option<String>,
    /// Where to mount; `None`: at the checkpoint's origin.
    pub mountpoint: Option<PathBuf>,
    /// A digest to check the archive against was given (`--sha256`,
    /// `--manifest`): refused for what is not an archive.
    pub digests: bool,
    /// When [`TargetRequest::names_archive`]: the checkpoint the caller
    /// imported the archive as.
    pub imported: Option<ObjectId>,
    /// The remote of a lazy mount, when the daemon is told it (its target
    /// is the checkpoint id).
    pub remote: Option<String>,
    /// Roots where an origin may be used as the default mountpoint, beyond
    /// the policy's own.
    pub allow_origin: Vec<PathBuf>,
    /// The mountpoint given is the origin a parent checked (a daemon).
    pub from_origin: bool,
    /// This process serves the mount (and so opens a lazy mount's backend).
    pub foreground: bool,
    /// The mount is a run's (its daemon's control socket).
    pub run_socket: Option<PathBuf>,
    pub settings: Settings,
}

impl TargetRequest {
    /// Whether the target is an archive the caller imports first (then
    /// sets [`TargetRequest::imported`]): an existing file, unlabelled.
    pub fn names_archive(&self) -> bool {
        self.label.is_none() && is_archive_path(Path::new(&self.target))
    }
}

/// A resolved target.
pub struct Resolved {
    pub mount: Mount,
    /// The remote of a lazy mount (its daemon is told it).
    pub remote: Option<String>,
    /// Warnings for the user (one line each): a lazy mount offline.
    pub warnings: Vec<String>,
}

/// The daemon of an earlier mount, unmounted but not exited yet, that
/// [`resolve`] waits for (a fork's commits on its way out).
#[derive(Debug)]
pub struct Waiting {
    /// `fork 'NAME'`, or the mountpoint.
    pub what: String,
    pub pid: u32,
    /// It is committing a fork.
    pub committing: bool,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "waiting for the daemon of the last mount of {} (pid {}) to finish{} and exit",
            self.what,
            self.pid,
            if self.committing { " committing" } else { "" }
        )
    }
}

/// Why a target cannot be mounted. The command that fixes one (a
/// mountpoint given to `storefs mount`) is the CLI's to add (`cli/hint.rs`).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("--sha256 and --manifest apply to archives; '{0}' is not a file")]
    DigestsNotArchive(String),
    /// Named like an archive, but neither a file nor a checkpoint.
    #[error(
        "{0}: no such file (nor a ref, fork or checkpoint of that name); check the archive's path"
    )]
    NoArchive(String),
    /// An archive target without the checkpoint the caller imported.
    #[error("{0} is an archive: import it first")]
    NotImported(String),
    /// No mountpoint given and the checkpoint (its 12-digit id) has no origin.
    #[error("checkpoint {id} has no origin path")]
    NoOrigin { id: String, label: String },
    /// No mountpoint given and the origin is no canonical absolute path.
    #[error("checkpoint {id}'s origin '{origin}' is not a canonical absolute path ({why})")]
    BadOrigin {
        id: String,
        /// Escaped for a message.
        origin: String,
        why: &'static str,
        label: String,
    },
    /// No mountpoint given and the origin policy refuses the origin.
    #[error("checkpoint {id}'s origin {origin} is not an allowed mount place ({why})")]
    OriginNotAllowed {
        id: String,
        origin: String,
        why: Refusal,
        label: String,
    },
    /// `--allow-origin` that cannot be used.
    #[error("{0}")]
    Policy(String),
    #[error(
        "fork '{name}' is in use by run pid {pid} ({command}) at {origin}; wait for it to end, or make another fork"
    )]
    InRun {
        name: String,
        pid: u32,
        command: String,
        origin: String,
    },
    #[error(
        "the daemon of the last mount of {what} (pid {pid}) is still running (unmounted, but detached while in use, or its commit is slow); see {log}, and retry once it exits"
    )]
    StillRunning { what: String, pid: u32, log: String },
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Journal(#[from] journal::Error),
    #[error(transparent)]
    Remote(#[from] remote::Error),
}

/// Resolve `req` in the store at `store_dir` into the mount to serve (at
/// its origin when no mountpoint is given, where the origin policy allows
/// it) and, for a lazy mount, its remote. Waits (bounded) for the daemon of
/// an earlier mount of the same fork or at the same place that is still
/// winding down, telling `on_wait` first.
pub fn resolve(
    store_dir: &Path,
    req: &TargetRequest,
    on_wait: &mut dyn FnMut(&Waiting),
) -> Result<Resolved, TargetError> {
    let mut warnings = Vec::new();
    // The daemon of a lazy mount is told its remote; the command finds it in TARGET.
    let mut lazy_remote = req.remote.clone();
    let (id, label, fork, store) = if req.names_archive() {
        // Imported by the caller, in the parent, so errors reach the user;
        // the daemon gets the checkpoint id.
        let id = req
            .imported
            .ok_or_else(|| TargetError::NotImported(req.target.clone()))?;
        // Shown by `status` and named to `umount`: absolute, whatever the cwd.
        let label = absolute(Path::new(&req.target))?.display().to_string();
        (id, label, None, Store::open(store_dir)?)
    } else if let Some((remote, name)) = req
        .target
        .split_once(':')
        .filter(|(r, _)| req.label.is_none() && *r != "git")
    {
        // REMOTE:REF (':' is in no ref, fork or id): a lazy mount. `git:COMMIT`
        // names an imported git commit (resolved below).
        let store = Store::open(store_dir)?;
        let t = remote::prepare_lazy_mount(&store, remote, name)?;
        if let Some(why) = &t.offline {
            warnings.push(format!(
                "{why}; mounting {} as this store last saw it ({}): what was read before works offline, the rest gets EIO",
                req.target,
                &t.checkpoint.to_hex()[..12]
            ));
        }
        lazy_remote = Some(remote.to_string());
        (t.checkpoint, req.target.clone(), None, store)
    } else {
        if req.digests {
            return Err(TargetError::DigestsNotArchive(req.target.clone()));
        }
        let store = Store::open(store_dir)?;
        let id = store.resolve(&req.target).map_err(|e| {
            if looks_like_archive(&req.target) {
                TargetError::NoArchive(req.target.clone())
            } else {
                e.into()
            }
        })?;
        // A fork (and not a ref of the same name) mounts read-write at its head.
        let is_fork = store.get_ref(&req.target)?.is_none()
            && journal::read_fork_info(&store, &req.target)?.is_some();
        let label = req.label.clone().unwrap_or_else(|| req.target.clone());
        (id, label, is_fork.then(|| req.target.clone()), store)
    };
    // The daemon of a lazy mount reads objects through the fetching backend.
    let lazy = match (&lazy_remote, req.foreground) {
        (Some(r), true) => Some(Arc::new(LazyBackend::open(&store, r)?)),
        _ => None,
    };
    let store = match &lazy {
        Some(l) => Store::open_with_backend(store.root(), l.clone())?,
        None => store,
    };
    let ck = store.read_checkpoint(&id)?;
    let mut from_origin = req.from_origin;
    let short = || id.to_hex()[..12].to_string();
    let mountpoint = match &req.mountpoint {
        Some(p) => absolute(p)?,
        None => {
            let origin = ck.origin.clone().ok_or_else(|| TargetError::NoOrigin {
                id: short(),
                label: label.clone(),
            })?;
            // A record written before origins were checked (or received from
            // a remote) may name another place than it seems: never mount there.
            if let Some(why) = store::check_origin(&origin) {
                return Err(TargetError::BadOrigin {
                    id: short(),
                    origin: origin.escape_debug().to_string(),
                    why,
                    label,
                });
            }
            // The origin is data: used only where the policy allows it.
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let policy = OriginPolicy::new(&req.allow_origin, home.as_deref())
                .map_err(TargetError::Policy)?;
            let uid = rustix::process::geteuid().as_raw();
            if let Err(why) = origin::check_default_mountpoint(&origin, &policy, uid) {
                return Err(TargetError::OriginNotAllowed {
                    id: short(),
                    origin,
                    why,
                    label,
                });
            }
            from_origin = true;
            PathBuf::from(origin)
        }
    };
    wait_for_previous_daemon(&store, fork.as_deref(), &mountpoint, on_wait)?;
    if let Some(name) = &fork
        && req.run_socket.is_none()
        && let Some((r, t)) = super::runs::run_of_fork(&store, name)
    {
        return Err(TargetError::InRun {
            name: name.clone(),
            pid: r.pid,
            command: r.command_line(),
            origin: t.origin,
        });
    }
    let what = match fork {
        Some(name) => What::Fork { name, head: id },
        None => What::Checkpoint(id),
    };
    let mount = Mount {
        store,
        lazy,
        what,
        label,
        mountpoint,
        from_origin,
        settings: req.settings.clone(),
        run_socket: req.run_socket.clone(),
    };
    Ok(Resolved {
        mount,
        remote: lazy_remote,
        warnings,
    })
}

/// Wait (bounded) for the daemon of an earlier mount of fork `fork`, or at
/// `mountpoint`, that was unmounted but has not exited yet: a fork's commits
/// on its way out, and holds the fork until then (umount(8) without
/// umount.fuse.storefs returns as soon as the kernel mount is gone).
fn wait_for_previous_daemon(
    store: &Store,
    fork: Option<&str>,
    mountpoint: &Path,
    on_wait: &mut dyn FnMut(&Waiting),
) -> Result<(), TargetError> {
    let of_fork = |r: &MountRecord| fork.is_some_and(|f| r.mode == "rw" && r.target == f);
    let ours = |r: &MountRecord| of_fork(r) || Path::new(&r.mountpoint) == mountpoint;
    // Whether daemon `pid` is on its way out (unmounted, or marked going).
    let winding = |pid| {
        store
            .winding_down()
            .is_ok_and(|w| w.iter().any(|d| d.pid == pid))
    };
    // A live mount of the fork, or at the place, that `storefs umount` has
    // just been started on may not be marked yet (`umount X & mount X`,
    // xfstests generic/604): give the mark a moment before the place
    // counts as taken.
    let started = std::time::Instant::now();
    while started.elapsed() < UNMOUNT_MARK_WAIT
        && store
            .live_mounts()?
            .iter()
            .any(|r| ours(r) && !winding(r.pid))
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for r in store.winding_down()? {
        if !ours(&r) {
            continue;
        }
        let of_fork = of_fork(&r);
        let what = if of_fork {
            format!("fork '{}'", r.target)
        } else {
            r.mountpoint.clone()
        };
        on_wait(&Waiting {
            what: what.clone(),
            pid: r.pid,
            committing: r.mode == "rw",
        });
        if !super::wait_for_exit_while(&r, &|| winding(r.pid)) {
            let MountRecord { pid, log, .. } = r;
            return Err(TargetError::StillRunning { what, pid, log });
        }
    }
    Ok(())
}

/// How long a mount waits for `storefs umount` to mark a live mount of the
/// same fork or at the same place as going ([`wait_for_previous_daemon`])
/// before it counts as taken.
const UNMOUNT_MARK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a TARGET that is neither a file nor a checkpoint was meant as an
/// archive: a path, or a name with an archive's extension or a part suffix.
fn looks_like_archive(target: &str) -> bool {
    let name = target.rsplit('/').next().unwrap_or(target);
    target.contains('/')
        || [
            ".tar", ".tar.zst", ".tar.gz", ".tgz", ".tzst", ".zst", ".gz",
        ]
        .iter()
        .any(|ext| name.ends_with(ext))
        || crate::ingest::archive::parts::split_part_name(name).is_some()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{TargetError, TargetRequest, Waiting, resolve};
    use crate::daemon::{Settings, What};
    use crate::fs::Transport;
    use crate::journal::Fork;
    use crate::journal::testing::base_checkpoint;
    use crate::store::Store;

    fn never(w: &Waiting) {
        panic!("nothing to wait for: {w}");
    }

    fn request(target: &str, mountpoint: Option<&Path>) -> TargetRequest {
        TargetRequest {
            target: target.into(),
            label: None,
            mountpoint: mountpoint.map(Path::to_path_buf),
            digests: false,
            imported: None,
            remote: None,
            allow_origin: Vec::new(),
            from_origin: false,
            foreground: false,
            run_socket: None,
            settings: Settings {
                options: Vec::new(),
                cache_size: 1 << 20,
                threads: None,
                commit_interval: 0,
                writeback_cache: false,
                transport: Transport::Auto,
                explain: |e| e.to_string(),
            },
        }
    }

    /// A fork mounts read-write at its head, a ref or a checkpoint
    /// read-only; without a mountpoint the origin is checked; a name like
    /// an archive's that is nothing is named so; digests are for archives
    /// only.
    #[test]
    fn targets_resolve_by_the_domain_rules() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f"), b"f").unwrap();
        let dir = tmp.path().join("store");
        let store = Store::open_or_create(&dir).unwrap();
        // `/` is refused as a default mountpoint (nothing is mounted here).
        let id = base_checkpoint(&store, &src, "/");
        store.set_ref("r", &id).unwrap();
        Fork::create(&store, "f", &id).unwrap();
        let mp = tmp.path().join("mnt");
        let what = |t: &str| {
            resolve(&dir, &request(t, Some(&mp)), &mut never)
                .unwrap()
                .mount
                .what
        };
        assert!(matches!(what("f"), What::Fork { name, head } if name == "f" && head == id));
        assert!(matches!(what("r"), What::Checkpoint(c) if c == id));
        assert!(matches!(what(&id.to_hex()), What::Checkpoint(c) if c == id));
        let err = |r: &TargetRequest| resolve(&dir, r, &mut never).err().unwrap();
        assert!(matches!(
            err(&request("r", None)),
            TargetError::OriginNotAllowed { .. }
        ));
        assert!(matches!(
            err(&request("nope", Some(&mp))),
            TargetError::Store(crate::store::Error::UnknownTarget(_))
        ));
        assert!(matches!(
            err(&request("./nope.tar.zst", Some(&mp))),
            TargetError::NoArchive(_)
        ));
        let mut digests = request("r", Some(&mp));
        digests.digests = true;
        assert!(matches!(err(&digests), TargetError::DigestsNotArchive(_)));
    }
}
