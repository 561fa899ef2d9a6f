//! `mount`, `umount` and `status`: what the user named, as a request that
//! [`crate::daemon::target`] resolves into what to mount and where; the
//! daemon's life is [`crate::daemon`]'s.

use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use super::args::{MountArgs, StatusArgs, UmountArgs};
use crate::daemon::target::{self, TargetRequest};
use crate::daemon::{self, Mount, ReadyPipe, Request, Settings, What, request};
use crate::store::mounts::MountRecord;
use crate::store::{Store, absolute};
use crate::sys::{MountEntry, mount_table};

/// What a browse mount's record and fsname show as its target.
const BROWSE_LABEL: &str = "(browse)";

pub fn mount(store_dir: &Path, a: MountArgs) -> Result<()> {
    let ready = ReadyPipe::from_env();
    let result = mount_inner(store_dir, a, ready.as_ref());
    if let (Err(e), Some(r)) = (&result, &ready) {
        r.failed(&super::one_line(e));
    }
    result
}

fn mount_inner(store_dir: &Path, a: MountArgs, ready: Option<&ReadyPipe>) -> Result<()> {
    if a.browse {
        return mount_browse(store_dir, a, ready);
    }
    if a.remount {
        return remount(store_dir, &a);
    }
    let (m, lazy_remote) = resolve(store_dir, &a)?;
    launch(m, lazy_remote.as_deref(), a.foreground, ready)
}

/// What `a` names, resolved ([`target::resolve`]) into the mount to serve
/// and, for a lazy mount, its remote; an archive is imported first, here.
/// Used by `mount` and by `run`.
pub(super) fn resolve(store_dir: &Path, a: &MountArgs) -> Result<(Mount, Option<String>)> {
    let mut req = TargetRequest {
        target: a.target.clone(),
        label: a.label.clone(),
        mountpoint: a.mountpoint.clone(),
        digests: a.digests.sha256.is_some() || a.digests.manifest.is_some(),
        imported: None,
        remote: a.remote.clone(),
        allow_origin: a.allow_origin.clone(),
        from_origin: a.from_origin,
        foreground: a.foreground,
        run_socket: a.run_socket.clone(),
        settings: settings(a)?,
    };
    if req.names_archive() {
        let p = super::archive::import_for_mount(store_dir, Path::new(&a.target), &a.digests)?;
        req.imported = Some(p.id);
    }
    let r = target::resolve(store_dir, &req, &mut |w| eprintln!("storefs: {w}"))?;
    for w in &r.warnings {
        super::warn(w);
    }
    Ok((r.mount, r.remote))
}

/// The store and the live record of the storefs mount `entry`: in the
/// store given when it holds the record, else in the store of the daemon
/// serving it, found by [`daemon::daemons_serving`] (umount(8) and
/// `mount -o remount` do not say which store).
fn store_and_record(store_dir: &Path, entry: &MountEntry) -> (Option<Store>, Option<MountRecord>) {
    let mp = &entry.mountpoint;
    let store = Store::open(store_dir).ok();
    if let Some(r) = store.as_ref().and_then(|s| s.mount_at(mp).ok().flatten()) {
        return (store, Some(r));
    }
    for (pid, root) in daemon::daemons_serving(mp, entry.fuse_owner()) {
        if let Ok(s) = Store::open(&root)
            && let Ok(Some(r)) = s.mount_at(mp)
            && r.pid == pid
        {
            return (Some(s), Some(r));
        }
    }
    (store, None)
}

/// `mount --remount MOUNTPOINT -o OPTS` (mount(8)'s `-o remount`): the
/// flags the kernel can change, applied to the mount (see
/// [`daemon::remount`]); what is ignored is named on stderr.
fn remount(store_dir: &Path, a: &MountArgs) -> Result<()> {
    let mp = absolute(Path::new(&a.target))?;
    let Some(entry) = mount_table().into_iter().rev().find(|m| m.mountpoint == mp) else {
        bail!(
            "cannot remount {}: it is not a mount point (mount it first: mount -t fuse.storefs TARGET {})",
            mp.display(),
            mp.display()
        );
    };
    if entry.fstype != "fuse.storefs" {
        bail!(
            "cannot remount {}: it is a {} mount, not storefs (mount.fuse.storefs remounts storefs mounts only)",
            mp.display(),
            entry.fstype
        );
    }
    if crate::sys::is_disconnected(&mp) {
        return Err(daemon::Error::DeadMount(mp).into());
    }
    // A checkpoint or browse mount stays read-only; a mount whose daemon is
    // not found (another mount namespace's store?) keeps the mode it has.
    let (_, record) = store_and_record(store_dir, &entry);
    let read_only = match &record {
        Some(r) => r.mode != "rw",
        None => entry.super_options.split(',').next() == Some("ro"),
    };
    let plan = daemon::remount::plan(&entry, read_only, &a.options);
    daemon::remount::apply(&mp, &plan).map_err(|e| {
        let hint = match e.kind() {
            ErrorKind::PermissionDenied => "; only root can remount",
            // The kernel's answer to `ro` while a file is open for writing.
            ErrorKind::ResourceBusy => "; is a file open for writing there? (`fuser -vm`)",
            _ => "",
        };
        anyhow!("cannot remount {}: {e}{hint}", mp.display())
    })?;
    if !plan.ignored.is_empty() {
        let list: Vec<String> = plan
            .ignored
            .iter()
            .map(|(o, why)| format!("{o} ({why})"))
            .collect();
        eprintln!(
            "storefs: remounted {}; ignored: {}",
            mp.display(),
            list.join(", ")
        );
    }
    Ok(())
}

/// `mount --browse MOUNTPOINT`: the whole store, read-only (TARGET is the mountpoint).
fn mount_browse(store_dir: &Path, a: MountArgs, ready: Option<&ReadyPipe>) -> Result<()> {
    if let Some(extra) = &a.mountpoint {
        bail!(
            "--browse mounts the whole store and takes only a mountpoint: `storefs mount --browse {}` (remove '{}')",
            a.target,
            extra.display()
        );
    }
    let store = Store::open(store_dir)?;
    let mountpoint = absolute(Path::new(&a.target))?;
    let m = Mount {
        store,
        lazy: None,
        what: What::Browse,
        label: BROWSE_LABEL.to_string(),
        mountpoint,
        from_origin: false,
        settings: settings(&a)?,
        run_socket: None,
    };
    launch(m, None, a.foreground, ready)
}

fn settings(a: &MountArgs) -> Result<Settings> {
    // --transport, else $STOREFS_TRANSPORT, else auto.
    let transport = match (a.transport, std::env::var("STOREFS_TRANSPORT")) {
        (Some(t), _) => t,
        (None, Ok(v)) if !v.is_empty() => {
            <super::args::TransportArg as clap::ValueEnum>::from_str(&v, true).map_err(|_| {
                anyhow!("STOREFS_TRANSPORT={v}: not a transport; use auto, classic or uring")
            })?
        }
        _ => super::args::TransportArg::Auto,
    };
    Ok(Settings {
        options: a.options.clone(),
        cache_size: a.cache_size,
        threads: a.threads,
        commit_interval: a.commit_interval,
        writeback_cache: a.writeback_cache,
        transport: transport.into(),
        explain: super::hint::explain,
    })
}

/// Serve `m` in this process (`--foreground`; a lazy mount's backend is
/// open), or start a daemon that does (told `remote` for a lazy mount) and
/// say what it mounted.
fn launch(
    m: Mount,
    remote: Option<&str>,
    foreground: bool,
    ready: Option<&ReadyPipe>,
) -> Result<()> {
    let mp = m.mountpoint.clone();
    if foreground {
        let label = m.label.clone();
        daemon::run(m, || match ready {
            Some(r) => r.ready(),
            None => eprintln!(
                "storefs: serving {} at {}; `storefs umount {}` or Ctrl-C to stop",
                label,
                mp.display(),
                mp.display()
            ),
        })?;
        return Ok(());
    }
    let started = daemon::start(&m.store, &mp, &daemon_args(&m, remote))?;
    let (id, mode) = match &m.what {
        What::Checkpoint(id) => (id, "read-only"),
        What::Fork { head, .. } => (head, "read-write"),
        What::Browse => {
            eprintln!(
                "storefs: mounted the store read-only for browsing at {} (pid {}, log {})",
                mp.display(),
                started.pid,
                started.log.display()
            );
            return Ok(());
        }
    };
    eprintln!(
        "storefs: mounted {} ({}) {mode} at {} (pid {}, log {})",
        m.label,
        &id.to_hex()[..12],
        mp.display(),
        started.pid,
        started.log.display()
    );
    Ok(())
}

/// The command line of a daemon that serves `m`: `mount --foreground` with
/// the checkpoint id (a fork by name) and the label, so that it resolves
/// nothing again, and `--remote` for a lazy mount.
pub(super) fn daemon_args(m: &Mount, remote: Option<&str>) -> Vec<OsString> {
    let mp = m.mountpoint.as_os_str();
    let mut args: Vec<OsString> = vec!["--store".into(), m.store.root().into(), "mount".into()];
    match &m.what {
        What::Checkpoint(id) => args.extend([id.to_hex().into(), mp.into()]),
        What::Fork { name, .. } => args.extend([name.into(), mp.into()]),
        What::Browse => args.extend(["--browse".into(), mp.into()]),
    }
    if !matches!(m.what, What::Browse) {
        args.extend(["--label".into(), m.label.as_str().into()]);
    }
    if m.from_origin {
        args.push("--from-origin".into());
    }
    if let Some(r) = remote {
        args.extend(["--remote".into(), r.into()]);
    }
    let s = &m.settings;
    args.extend([
        "--foreground".into(),
        "--cache-size".into(),
        s.cache_size.to_string().into(),
        "--commit-interval".into(),
        s.commit_interval.to_string().into(),
    ]);
    if s.writeback_cache {
        args.push("--writeback-cache".into());
    }
    if let Some(t) = s.threads {
        args.extend(["--threads".into(), t.to_string().into()]);
    }
    args.extend(["--transport".into(), s.transport.name().into()]);
    for o in &s.options {
        args.extend(["-o".into(), o.into()]);
    }
    if let Some(sock) = &m.run_socket {
        args.extend(["--run-socket".into(), sock.into()]);
    }
    args
}

pub fn umount(store_dir: &Path, a: UmountArgs) -> Result<()> {
    let mp = umount_target(store_dir, &a.mountpoint)?;
    let Some(entry) = mount_table().into_iter().find(|m| m.mountpoint == mp) else {
        bail!("{} is not mounted", mp.display());
    };
    if entry.fstype != "fuse.storefs" {
        bail!(
            "{} is a {} mount, not storefs; use umount(8)",
            mp.display(),
            entry.fstype
        );
    }
    // The record tells which daemon to wait for: in the store given, or
    // that of the daemon serving the mount (umount.fuse.storefs, run by
    // umount(8), does not know the store).
    let (store, record) = store_and_record(store_dir, &entry);
    // A dead daemon's record: which directories it created, to remove here.
    let dead = match (&record, &store) {
        (None, Some(s)) => s
            .mount_record(&mp)
            // As `status` judges it (a killed daemon whose io_uring workers
            // still wind down is a zombie with threads: pid_alive says yes).
            .filter(|r| !r.daemon_is_alive()),
        _ => None,
    };
    // Marked as going while this runs, so that a mount of the same fork or
    // at the same place that comes meanwhile waits for the daemon to exit
    // instead of finding the place taken (best effort: a store this user
    // cannot write gets no mark).
    let _going = match (&record, &store) {
        (Some(r), Some(s)) if s.mark_unmounting(&mp, r.pid).is_ok() => Some(Going(s, &mp)),
        _ => None,
    };
    if let (Some(r), Some(s)) = (&record, &store)
        && r.mode == "rw"
    {
        // Busy first: a mount that cannot be unmounted is not committed either.
        let users = crate::sys::processes_using(&mp);
        if !users.is_empty() {
            let pids: Vec<String> = users.iter().map(u32::to_string).collect();
            bail!(
                "{} is busy: process(es) {} have files open or their cwd there (see `fuser -vm {}`); close them and retry; nothing was committed or unmounted",
                mp.display(),
                pids.join(", "),
                mp.display()
            );
        }
        // Commit first (so an error shows here, with the mount still up), or
        // tell the daemon not to commit on its way out.
        let sock = s.mount_file(&mp, "sock");
        if a.no_commit {
            request(&sock, &Request::NoCommit)?;
        } else {
            let before = s.fork_head(&r.target).ok().flatten().map(|h| h.to_hex());
            let id = daemon::commit_for_unmount(&sock)
                .with_context(|| format!("cannot commit {} before unmounting; nothing was unmounted (--no-commit skips the commit)", r.target))?;
            match id {
                // Shut down: unmounted without a commit, as after a crash.
                None => eprintln!(
                    "storefs: {} was shut down (FS_IOC_SHUTDOWN): not committed; its journal is kept and the next mount replays what was synced",
                    r.target
                ),
                // Nothing changed since the last commit: the head stays, no commit.
                Some(id) if before.as_deref() != Some(id.as_str()) => eprintln!(
                    "storefs: committed {} as {}",
                    r.target,
                    &id[..12.min(id.len())]
                ),
                Some(_) => {}
            }
        }
    }
    daemon::unmount(&mp).map_err(|e| {
        if e.kind() == ErrorKind::ResourceBusy {
            anyhow!(
                "{} is busy: a process has files open or its cwd there (find it with `fuser -vm {}`); close them and retry",
                mp.display(),
                mp.display()
            )
        } else {
            anyhow!(e).context(format!("cannot unmount {}", mp.display()))
        }
    })?;
    if let (Some(r), Some(s)) = (dead, &store) {
        daemon::remove_created(&r.created);
        s.remove_mount(&mp)?;
    }
    if let Some(r) = record {
        if !daemon::wait_for_exit(&r) {
            bail!(
                "{} is unmounted but its daemon (pid {}) has not exited; see {}",
                mp.display(),
                r.pid,
                r.log
            );
        }
        // The daemon removes what its mount created as it exits; one killed
        // while `status` still saw it alive (over io_uring its workers wind
        // down a while) could not. Gone now: what is left, and still the
        // same empty directory, goes.
        daemon::remove_created(&r.created);
    }
    Ok(())
}

/// The unmounting mark of the mount at `.1` in store `.0`, removed when
/// `storefs umount` ends, however it ends.
struct Going<'a>(&'a Store, &'a Path);

impl Drop for Going<'_> {
    fn drop(&mut self) {
        self.0.clear_unmounting(self.1);
    }
}

/// Bytes in MiB, for the status table.
fn mib(bytes: u64) -> String {
    format!("{:.1}M", bytes as f64 / (1 << 20) as f64)
}

/// What `storefs umount ARG` unmounts: ARG as a path when something is
/// mounted there; else the one live (or dead) mount made from what ARG
/// names: a ref, fork or checkpoint, or an archive (its path, as `status`
/// shows it, or relative to the cwd). When nothing is mounted, the error
/// names ARG as the user typed it.
fn umount_target(store_dir: &Path, arg: &Path) -> Result<PathBuf> {
    let mp = absolute(arg)?;
    if mount_table().iter().any(|m| m.mountpoint == mp) {
        return Ok(mp);
    }
    let typed = arg.to_string_lossy();
    // A run's mount is in the run's namespace: only the run ends it.
    if let Ok(store) = Store::open(store_dir) {
        for r in daemon::runs::list(&store) {
            if let Some(t) = r
                .targets
                .iter()
                .find(|t| t.target == typed || Path::new(&t.origin) == mp)
            {
                bail!(
                    "{} is mounted inside run pid {} ({}), which alone sees it; it is unmounted (and a fork committed) when that command exits (`kill {}` ends it sooner)",
                    t.target,
                    r.pid,
                    r.command_line(),
                    r.pid
                );
            }
        }
    }
    let not_mounted = || {
        if typed.contains('/') || arg.exists() {
            anyhow!("{} is not mounted", mp.display())
        } else {
            anyhow!(
                "{typed} is not mounted (no mount of a ref, fork or archive of that name, nor at {}); `storefs status` lists the mounts",
                mp.display()
            )
        }
    };
    let Ok(store) = Store::open(store_dir) else {
        return Err(not_mounted());
    };
    let (live, dead) = store.mounts()?;
    let abs = mp.to_string_lossy();
    let found: Vec<_> = live
        .into_iter()
        .chain(dead)
        // Also as the `status` table shows a long target: shortened with a `…`.
        .filter(|r| {
            r.target == typed
                || r.target == abs
                || (typed.contains('…') && shorten_middle(&r.target, TARGET_WIDTH) == typed)
        })
        .collect();
    match found.as_slice() {
        [] => Err(not_mounted()),
        [one] => Ok(PathBuf::from(&one.mountpoint)),
        many => bail!(
            "'{typed}' is mounted at {} places ({}); give the mountpoint",
            many.len(),
            many.iter()
                .map(|r| r.mountpoint.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The width of `status`'s TARGET column.
const TARGET_WIDTH: usize = 20;

/// `s` in at most `max` characters: a longer one keeps its start and its
/// end around a `…` (an archive's path shows its directory and its name).
fn shorten_middle(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let tail = (max - 1) / 2;
    let head = max - 1 - tail;
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

pub fn status(store_dir: &Path, a: StatusArgs) -> Result<()> {
    let (mut live, dead) = match Store::open(store_dir) {
        Ok(s) => {
            let (mut live, dead) = s.mounts()?;
            // A fork's head moves with each commit; its record has the head at mount time.
            for m in live.iter_mut().filter(|m| m.mode == "rw") {
                if let Ok(Some(head)) = s.fork_head(&m.target) {
                    m.checkpoint = head.to_hex();
                }
            }
            (live, dead)
        }
        Err(crate::store::Error::NoStore(_)) => (Vec::new(), Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let shown = super::term::Shown::stdout();
    let mut out = std::io::stdout().lock();
    let ndead = dead.len();
    live.extend(dead);
    let live: Vec<daemon::MountStatus> = match Store::open(store_dir) {
        Ok(s) => live
            .into_iter()
            .map(|r| daemon::mount_status(&s, r))
            .chain(daemon::run_statuses(&s))
            .collect(),
        Err(_) => Vec::new(),
    };
    if a.json {
        serde_json::to_writer_pretty(&mut out, &live)?;
        writeln!(out)?;
        return Ok(());
    }
    if live.is_empty() {
        eprintln!("storefs: no live mounts");
        return Ok(());
    }
    writeln!(
        out,
        "{:<6} {:<8} {:<12} {:<20} {:>7} {:>15} MOUNTPOINT",
        "MODE", "PID", "CHECKPOINT", "TARGET", "RSS", "CACHE/LIMIT"
    )?;
    for st in &live {
        let m = &st.record;
        let pid = if m.mode == "dead" {
            "-".to_string()
        } else {
            m.pid.to_string()
        };
        let rss = st.rss_bytes.map_or("-".into(), mib);
        let cache = st
            .cache
            .map_or("-".into(), |c| format!("{}/{}", mib(c.bytes), mib(c.limit)));
        writeln!(
            out,
            "{:<6} {:<8} {:<12} {:<20} {:>7} {:>15} {}",
            m.mode,
            pid,
            &m.checkpoint[..12.min(m.checkpoint.len())],
            shorten_middle(&shown.line(&m.target), TARGET_WIDTH),
            rss,
            cache,
            match &st.run {
                Some(r) => format!(
                    "{} (inside run {}: {})",
                    shown.line(&m.mountpoint),
                    r.pid,
                    shown.line(&r.command)
                ),
                None => shown.line(&m.mountpoint).to_string(),
            }
        )?;
    }
    if ndead > 0 {
        eprintln!(
            "storefs: {ndead} dead mount(s): the daemon is gone and every access fails (\"Transport endpoint is not connected\"); `storefs umount MOUNTPOINT` clears each"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::shorten_middle;

    #[test]
    fn long_targets_are_shortened_in_the_middle() {
        assert_eq!(shorten_middle("s1", 20), "s1");
        let t = "/backup/s1-gpt56-calibration-v1.tar.zst.part00";
        let short = shorten_middle(t, 20);
        assert_eq!(short.chars().count(), 20);
        assert_eq!(short, "/backup/s1…st.part00");
    }
}
