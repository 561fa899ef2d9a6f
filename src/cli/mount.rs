//! `mount`, `umount` and `status`: checks on the mountpoint, the daemon's
//! start-up handshake, and the registry of live mounts.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::args::{MountArgs, StatusArgs, UmountArgs};
use super::commands::now_ns;
use super::fork::{Control, Request, commit_periodically, request};
use crate::fs::{self as sfs, MountConfig};
use crate::ingest::archive::is_archive_path;
use crate::journal::{self, Fork};
use crate::store::mounts::MountRecord;
use crate::store::{ObjectId, Store, absolute};
use crate::sys::{mount_table, pid_alive};

/// The environment variable through which a daemon reports to the `mount` that
/// started it: the number of a pipe's write end.
const READY_FD_ENV: &str = "STOREFS_READY_FD";
/// How long `mount` waits for its daemon to answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// What a browse mount's record and fsname show as its target.
const BROWSE_LABEL: &str = "(browse)";
/// How long `umount` waits for the daemon to exit after the kernel unmount.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// The same for a fork's daemon, which commits on its way out.
const FORK_EXIT_TIMEOUT: Duration = Duration::from_secs(600);

pub fn mount(store_dir: &Path, a: MountArgs) -> Result<()> {
    let ready = ReadyPipe::from_env();
    let result = mount_inner(store_dir, a, ready.as_ref());
    if let (Err(e), Some(r)) = (&result, &ready) {
        r.send(&format!("error: {}\n", super::one_line(e)));
    }
    result
}

fn mount_inner(store_dir: &Path, a: MountArgs, ready: Option<&ReadyPipe>) -> Result<()> {
    if a.browse {
        return mount_browse(store_dir, a, ready);
    }
    // An existing file (or first part) is an archive: imported here, in the
    // parent, so errors reach the user; the daemon gets the checkpoint id.
    let archive = a.label.is_none() && is_archive_path(Path::new(&a.target));
    // The daemon of a lazy mount is told its remote; the command finds it in TARGET.
    let mut lazy_remote = a.remote.clone();
    let (id, label, fork, store) = if archive {
        let p = super::archive::import_for_mount(store_dir, Path::new(&a.target), &a.digests)?;
        (p.id, a.target.clone(), None, Store::open(store_dir)?)
    } else if let Some((remote, name)) = a.target.split_once(':').filter(|_| a.label.is_none()) {
        // REMOTE:REF (':' is in no ref, fork or id): a lazy mount.
        let store = Store::open(store_dir)?;
        let t = crate::remote::prepare_lazy_mount(&store, remote, name)?;
        if let Some(why) = &t.offline {
            eprintln!(
                "storefs: warning: {why}; mounting {} as this store last saw it ({}): what was read before works offline, the rest gets EIO",
                a.target,
                &t.checkpoint.to_hex()[..12]
            );
        }
        lazy_remote = Some(remote.to_string());
        (t.checkpoint, a.target.clone(), None, store)
    } else {
        if a.digests.sha256.is_some() || a.digests.manifest.is_some() {
            bail!(
                "--sha256 and --manifest apply to archives; '{}' is not a file",
                a.target
            );
        }
        let store = Store::open(store_dir)?;
        let id = store.resolve(&a.target).map_err(|e| {
            if looks_like_archive(&a.target) {
                anyhow!(
                    "{}: no such file (nor a ref, fork or checkpoint of that name); check the archive's path",
                    a.target
                )
            } else {
                e.into()
            }
        })?;
        // A fork (and not a ref of the same name) mounts read-write at its head.
        let is_fork = store.get_ref(&a.target)?.is_none()
            && journal::read_fork_info(&store, &a.target)?.is_some();
        let label = a.label.clone().unwrap_or_else(|| a.target.clone());
        (id, label, is_fork.then(|| a.target.clone()), store)
    };
    // The daemon of a lazy mount reads objects through the fetching backend.
    let lazy = match (&lazy_remote, a.foreground) {
        (Some(r), true) => Some(Arc::new(crate::remote::LazyBackend::open(&store, r)?)),
        _ => None,
    };
    let store = match &lazy {
        Some(l) => Store::open_with_backend(store.root(), l.clone())?,
        None => store,
    };
    let ck = store.read_checkpoint(&id)?;
    let mountpoint = match &a.mountpoint {
        Some(p) => absolute(p)?,
        None => {
            let origin = ck.origin.clone().with_context(|| {
                format!(
                    "checkpoint {} has no origin path; give a mountpoint: storefs mount {} PATH",
                    &id.to_hex()[..12],
                    label
                )
            })?;
            // A record written before origins were checked (or received from
            // a remote) may name another place than it seems: never mount there.
            if let Some(why) = crate::store::check_origin(&origin) {
                bail!(
                    "checkpoint {}'s origin '{}' is not a canonical absolute path ({why}); give a mountpoint: storefs mount {} PATH",
                    &id.to_hex()[..12],
                    origin.escape_debug(),
                    label
                );
            }
            PathBuf::from(origin)
        }
    };
    check_mountpoint(&store, &mountpoint)?;
    check_dev_fuse()?;
    let created = !mountpoint.exists();
    if created {
        fs::create_dir_all(&mountpoint)
            .with_context(|| format!("cannot create mountpoint {}", mountpoint.display()))?;
    }
    let result = if a.foreground {
        run_daemon(
            store,
            Some(id),
            &label,
            fork.as_deref(),
            lazy.as_deref(),
            &a,
            &mountpoint,
            ready,
        )
    } else {
        start_daemon(
            &store,
            Some(id),
            &label,
            fork.as_deref(),
            lazy_remote.as_deref(),
            &a,
            &mountpoint,
        )
    };
    if result.is_err() && created {
        // Leave no trace of a mount that never happened (removes only an empty dir).
        let _ = fs::remove_dir(&mountpoint);
    }
    result
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
    check_mountpoint(&store, &mountpoint)?;
    check_dev_fuse()?;
    let created = !mountpoint.exists();
    if created {
        fs::create_dir_all(&mountpoint)
            .with_context(|| format!("cannot create mountpoint {}", mountpoint.display()))?;
    }
    let result = if a.foreground {
        run_daemon(
            store,
            None,
            BROWSE_LABEL,
            None,
            None,
            &a,
            &mountpoint,
            ready,
        )
    } else {
        start_daemon(&store, None, BROWSE_LABEL, None, None, &a, &mountpoint)
    };
    if result.is_err() && created {
        let _ = fs::remove_dir(&mountpoint);
    }
    result
}

/// Refuse mountpoints that would hide the store, are busy, or are not empty.
fn check_mountpoint(store: &Store, mp: &Path) -> Result<()> {
    let root = store.root();
    if mp.starts_with(root) || root.starts_with(mp) {
        bail!(
            "cannot mount at {}: it overlaps the store {} (the daemon would read its own mount and hang); choose a mountpoint outside the store",
            mp.display(),
            root.display()
        );
    }
    // A dead daemon's mount still answers stat from the kernel's attribute cache;
    // listing it tells.
    if let Err(e) = fs::read_dir(mp)
        && e.raw_os_error() == Some(libc::ENOTCONN)
    {
        bail!(
            "{} is a mount left by a daemon that died (transport endpoint is not connected); clear it with `storefs umount {}`",
            mp.display(),
            mp.display()
        );
    }
    if let Some((_, fstype)) = mount_table()
        .into_iter()
        .map(|m| (m.mountpoint, m.fstype))
        .find(|(p, _)| p == mp)
    {
        bail!(
            "{} is already a mount point ({fstype}); unmount it first (`storefs umount {}`)",
            mp.display(),
            mp.display()
        );
    }
    match fs::symlink_metadata(mp) {
        Ok(m) if m.is_dir() => {
            let mut rd = fs::read_dir(mp).with_context(|| format!("{}", mp.display()))?;
            if rd.next().is_some() {
                bail!(
                    "{} is not empty; storefs mounts only on an empty directory (move its contents away or give another mountpoint)",
                    mp.display()
                );
            }
            Ok(())
        }
        Ok(_) => bail!(
            "{} exists and is not a directory; give another mountpoint",
            mp.display()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow!(e).context(format!("{}", mp.display()))),
    }
}

/// FUSE needs /dev/fuse, readable and writable by us.
fn check_dev_fuse() -> Result<()> {
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => bail!(
            "/dev/fuse is missing: load the module (`modprobe fuse`) or, in a container, pass the device (--device /dev/fuse)"
        ),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => bail!(
            "not permitted to open /dev/fuse: run as root, or give your user access to it (the fuse group)"
        ),
        Err(e) => Err(anyhow!(e).context("/dev/fuse")),
    }
}

/// Start `storefs mount … --foreground` in a new session with its stderr in the
/// log, and wait until it reports that the mount answers (or why it failed).
/// `id` is `None` for a browse mount; `remote` is set for a lazy mount.
fn start_daemon(
    store: &Store,
    id: Option<ObjectId>,
    label: &str,
    fork: Option<&str>,
    remote: Option<&str>,
    a: &MountArgs,
    mp: &Path,
) -> Result<()> {
    let log_path = log_path(store, mp);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("cannot open log {}", log_path.display()))?;
    let (mut reader, writer) = std::io::pipe().context("pipe")?;
    let wfd = writer.as_raw_fd();

    let exe = std::env::current_exe().context("cannot find the storefs executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("--store").arg(store.root()).arg("mount");
    match id {
        // A fork is named (the daemon opens it); anything else is the checkpoint id.
        Some(id) => cmd
            .arg(fork.map_or_else(|| id.to_hex(), str::to_string))
            .arg(mp)
            .arg("--label")
            .arg(label),
        None => cmd.arg("--browse").arg(mp),
    };
    if let Some(r) = remote {
        cmd.arg("--remote").arg(r);
    }
    cmd.arg("--foreground")
        .arg("--cache-size")
        .arg(a.cache_size.to_string())
        .arg("--commit-interval")
        .arg(a.commit_interval.to_string());
    if let Some(t) = a.threads {
        cmd.arg("--threads").arg(t.to_string());
    }
    for o in &a.options {
        cmd.arg("-o").arg(o);
    }
    cmd.env(READY_FD_ENV, wfd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::fcntl(wfd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the mount daemon")?;
    drop(writer);

    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut msg = String::new();
        let _ = reader.read_to_string(&mut msg);
        let _ = tx.send(msg);
    });
    let msg = match rx.recv_timeout(START_TIMEOUT) {
        Ok(m) => m,
        Err(_) => {
            let _ = child.kill();
            bail!(
                "the mount daemon did not answer within {}s; see {}",
                START_TIMEOUT.as_secs(),
                log_path.display()
            );
        }
    };
    if let Some(err) = msg.strip_prefix("error: ") {
        let _ = child.wait();
        bail!("{}", err.trim());
    }
    if msg.trim() != "ok" {
        let status = child.wait().ok();
        bail!(
            "the mount daemon exited before mounting ({}); see {}",
            status.map(|s| s.to_string()).unwrap_or_default(),
            log_path.display()
        );
    }
    // The kernel mount exists; make sure it answers before returning.
    fs::metadata(mp)
        .with_context(|| format!("the new mount at {} does not answer", mp.display()))?;
    let Some(id) = id else {
        eprintln!(
            "storefs: mounted the store read-only for browsing at {} (pid {}, log {})",
            mp.display(),
            child.id(),
            log_path.display()
        );
        return Ok(());
    };
    eprintln!(
        "storefs: mounted {} ({}) {} at {} (pid {}, log {})",
        label,
        &id.to_hex()[..12],
        if fork.is_some() {
            "read-write"
        } else {
            "read-only"
        },
        mp.display(),
        child.id(),
        log_path.display()
    );
    Ok(())
}

/// The daemon itself: mount, register, report, serve until unmounted.
/// `id` is `None` for a browse mount; `lazy` is the fetching backend of a
/// lazy mount (synced and its counters logged at unmount).
#[allow(clippy::too_many_arguments)]
fn run_daemon(
    store: Store,
    id: Option<ObjectId>,
    label: &str,
    fork: Option<&str>,
    lazy: Option<&crate::remote::LazyBackend>,
    a: &MountArgs,
    mp: &Path,
    ready: Option<&ReadyPipe>,
) -> Result<()> {
    let log_path = log_path(&store, mp);
    init_file_logging(&log_path)?;
    let store = Arc::new(store);
    let cfg = MountConfig {
        mountpoint: mp.to_path_buf(),
        fsname: format!("storefs:{label}"),
        extra_options: a
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .filter(|o| !o.is_empty())
            .map(str::to_string)
            .collect(),
        cache_bytes: a.cache_size,
        threads: a.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
                .max(2)
        }),
    };
    // A fork is opened (locked, journal replayed) before the kernel mount.
    let control = match fork {
        Some(name) => Some(Arc::new(Control {
            fork: Arc::new(Fork::open(store.clone(), name)?),
            skip_final_commit: AtomicBool::new(false),
        })),
        None => None,
    };
    let mounted = match (&control, id) {
        (Some(c), _) => sfs::mount_fork(c.fork.clone(), &cfg),
        (None, Some(id)) => sfs::mount_checkpoint(store.clone(), id, &cfg),
        (None, None) => sfs::mount_browse(store.clone(), &cfg),
    }
    .with_context(|| format!("cannot mount at {}", mp.display()))?;
    // Threads start after the mount, which blocked the stop signals: they inherit the mask.
    if let Some(c) = &control {
        super::fork::serve_control(store.mount_file(mp, "sock"), c.clone())?;
        if a.commit_interval > 0 {
            commit_periodically(c.clone(), Duration::from_secs(a.commit_interval))?;
        }
    }
    let mode = match (&control, id) {
        (Some(_), _) => "rw",
        (None, Some(_)) => "ro",
        (None, None) => "browse",
    };
    store.add_mount(&MountRecord {
        mountpoint: mp.to_string_lossy().into_owned(),
        target: label.to_string(),
        checkpoint: id.map(|id| id.to_hex()).unwrap_or_default(),
        pid: std::process::id(),
        mode: mode.into(),
        log: log_path.to_string_lossy().into_owned(),
        started_ns: now_ns(),
    })?;
    tracing::info!(mountpoint = %mp.display(), checkpoint = ?id, target = %label, mode, "mounted");
    match ready {
        Some(r) => r.send("ok\n"),
        None => eprintln!(
            "storefs: serving {} at {}; `storefs umount {}` or Ctrl-C to stop",
            label,
            mp.display(),
            mp.display()
        ),
    }
    let result = mounted.serve();
    tracing::info!(mountpoint = %mp.display(), "unmounted");
    if let Some(l) = lazy {
        l.finish();
    }
    if let Some(c) = &control {
        let _ = fs::remove_file(store.mount_file(mp, "sock"));
        if c.skip_final_commit.load(Ordering::SeqCst) {
            tracing::info!("not committing on unmount (--no-commit); the journal is kept");
        } else {
            // Everything written is already in the journal; a failed commit loses nothing.
            match c.fork.commit("unmount") {
                Ok(id) => tracing::info!(checkpoint = %id, "committed on unmount"),
                Err(e) => {
                    tracing::warn!(error = %e, "commit on unmount failed; the journal is kept")
                }
            }
        }
    }
    store.remove_mount(mp)?;
    result.with_context(|| format!("serving {}", mp.display()))
}

pub fn umount(store_dir: &Path, a: UmountArgs) -> Result<()> {
    let mp = umount_target(store_dir, &a.mountpoint)?;
    let Some((_, fstype)) = mount_table()
        .into_iter()
        .map(|m| (m.mountpoint, m.fstype))
        .find(|(p, _)| *p == mp)
    else {
        bail!("{} is not mounted", mp.display());
    };
    if fstype != "fuse.storefs" {
        bail!(
            "{} is a {fstype} mount, not storefs; use umount(8)",
            mp.display()
        );
    }
    // The record (if the store is known) tells which daemon to wait for.
    let store = Store::open(store_dir).ok();
    let record = store.as_ref().and_then(|s| s.mount_at(&mp).ok().flatten());
    if let (Some(r), Some(s)) = (&record, &store)
        && r.mode == "rw"
    {
        // Commit first (so an error shows here, with the mount still up), or
        // tell the daemon not to commit on its way out.
        let sock = s.mount_file(&mp, "sock");
        if a.no_commit {
            request(&sock, &Request::NoCommit)?;
        } else {
            let id = request(&sock, &Request::Commit { message: "unmount".into() })
                .with_context(|| format!("cannot commit {} before unmounting; nothing was unmounted (--no-commit skips the commit)", r.target))?;
            eprintln!(
                "storefs: committed {} as {}",
                r.target,
                &id[..12.min(id.len())]
            );
        }
    }
    sfs::unmount(&mp).map_err(|e| {
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
    if let Some(r) = record {
        let start = Instant::now();
        // A fork's daemon commits what was written since before it exits.
        let limit = if r.mode == "rw" {
            FORK_EXIT_TIMEOUT
        } else {
            EXIT_TIMEOUT
        };
        while pid_alive(r.pid) && start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(20));
        }
        if pid_alive(r.pid) {
            bail!(
                "{} is unmounted but its daemon (pid {}) has not exited; see {}",
                mp.display(),
                r.pid,
                r.log
            );
        }
    }
    Ok(())
}

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

/// What `storefs umount ARG` unmounts: ARG as a path when something is
/// mounted there; else, when ARG is a plain name, the one live (or dead)
/// mount made from the ref or fork of that name.
fn umount_target(store_dir: &Path, arg: &Path) -> Result<PathBuf> {
    let mp = absolute(arg)?;
    let table = mount_table();
    if table.iter().any(|m| m.mountpoint == mp) {
        return Ok(mp);
    }
    let name = arg.to_str().filter(|n| !n.contains('/'));
    let (Some(name), Ok(store)) = (name, Store::open(store_dir)) else {
        return Ok(mp);
    };
    let (live, dead) = store.mounts()?;
    let found: Vec<_> = live
        .into_iter()
        .chain(dead)
        .filter(|r| r.target == name)
        .collect();
    match found.as_slice() {
        [] => Ok(mp),
        [one] => Ok(PathBuf::from(&one.mountpoint)),
        many => bail!(
            "'{name}' is mounted at {} places ({}); give the mountpoint",
            many.len(),
            many.iter()
                .map(|r| r.mountpoint.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
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
    let mut out = std::io::stdout().lock();
    let ndead = dead.len();
    live.extend(dead);
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
        "{:<6} {:<8} {:<12} {:<20} MOUNTPOINT",
        "MODE", "PID", "CHECKPOINT", "TARGET"
    )?;
    for m in &live {
        let pid = if m.mode == "dead" {
            "-".to_string()
        } else {
            m.pid.to_string()
        };
        writeln!(
            out,
            "{:<6} {:<8} {:<12} {:<20} {}",
            m.mode,
            pid,
            &m.checkpoint[..12.min(m.checkpoint.len())],
            m.target,
            m.mountpoint
        )?;
    }
    if ndead > 0 {
        eprintln!(
            "storefs: {ndead} dead mount(s): the daemon is gone and every access fails (\"Transport endpoint is not connected\"); `storefs umount MOUNTPOINT` clears each"
        );
    }
    Ok(())
}

/// `logs/mount-<key>.log` in the store, one file per mountpoint.
fn log_path(store: &Store, mp: &Path) -> PathBuf {
    let key = ObjectId::of(mp.as_os_str().as_encoded_bytes()).to_hex();
    store.logs_dir().join(format!("mount-{}.log", &key[..16]))
}

fn init_file_logging(path: &Path) -> Result<()> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open log {}", path.display()))?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOREFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .try_init();
    Ok(())
}

/// The write end of the start-up pipe, inherited from the `mount` that started us.
struct ReadyPipe(std::sync::Mutex<Option<std::fs::File>>);

impl ReadyPipe {
    fn from_env() -> Option<ReadyPipe> {
        let fd: i32 = std::env::var(READY_FD_ENV).ok()?.parse().ok()?;
        // SAFETY: the fd is checked to be open before taking ownership of it.
        unsafe {
            std::env::remove_var(READY_FD_ENV);
            if libc::fcntl(fd, libc::F_GETFD) < 0 {
                return None;
            }
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            Some(ReadyPipe(std::sync::Mutex::new(Some(
                std::fs::File::from_raw_fd(fd),
            ))))
        }
    }

    /// Send one message and close the pipe (the parent reads to EOF).
    fn send(&self, msg: &str) {
        if let Some(mut f) = self.0.lock().ok().and_then(|mut g| g.take()) {
            let _ = f.write_all(msg.as_bytes());
        }
    }
}
