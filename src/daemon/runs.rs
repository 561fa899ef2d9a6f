//! `storefs run`: CMD in a private mount namespace ([`super::ns`]) where
//! each target is mounted at its origin by a daemon of its own, started in
//! that namespace; the fork committed and the daemons stopped when CMD
//! exits.
//!
//! The process tree: `storefs run` (in the run's mount namespace, and for
//! an ordinary user its user namespace) starts one daemon per target
//! (`PR_SET_PDEATHSIG` SIGTERM: if the run dies, each unmounts, commits and
//! exits), then the run's init ([`super::ns::init`], pid 1 of a new PID
//! namespace, `PR_SET_PDEATHSIG` SIGKILL), which runs CMD. When CMD exits,
//! init exits with its status and the kernel kills whatever CMD left
//! running, so nothing keeps the mounts busy; the run then commits each
//! fork through its daemon's control socket and stops the daemons.
//!
//! A run is recorded in `runs/<pid>.json` in the store ([`RunRecord`]),
//! which names its command, targets, origins, daemons and their control
//! sockets (`runs/<pid>-<n>.sock`, the daemon's log beside it, `.log`): what
//! `status`, `commit` and `umount` look at. A record whose process is gone
//! (pid and start time, as mount records) is stale and removed on listing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::control::{Request, request};
use super::{Error, Mount, Result, What, ns};
use crate::store::Store;
use crate::sys;

/// A run as `runs/<pid>.json` records it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    /// The `storefs run` process.
    pub pid: u32,
    /// Its start time (`/proc/PID/stat`), so that a later process with the
    /// same pid is not taken for it.
    pub pid_start: Option<u64>,
    /// CMD and its arguments.
    pub command: Vec<String>,
    pub started_ns: i64,
    pub targets: Vec<RunTarget>,
}

/// One target of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunTarget {
    /// What the user named (a fork's name for a fork).
    pub target: String,
    /// `rw` (a fork) or `ro`.
    pub mode: String,
    /// The checkpoint mounted (a fork's head when the run started).
    pub checkpoint: String,
    /// Where it is mounted inside the run.
    pub origin: String,
    /// Its daemon (0 until started).
    pub daemon_pid: u32,
    /// The daemon's control socket.
    pub socket: String,
    /// The daemon's log.
    pub log: String,
}

impl RunRecord {
    /// CMD as one line.
    pub fn command_line(&self) -> String {
        self.command.join(" ")
    }

    /// Whether the `storefs run` process the record names still runs.
    pub fn is_alive(&self) -> bool {
        self.pid > 1
            && sys::pid_alive(self.pid)
            && sys::process_name(self.pid).is_some_and(|n| n.starts_with("storefs"))
            && self
                .pid_start
                .is_none_or(|t| sys::process_start_time(self.pid) == Some(t))
    }
}

fn runs_dir(store: &Store) -> PathBuf {
    store.root().join("runs")
}

fn record_path(store: &Store, pid: u32) -> PathBuf {
    runs_dir(store).join(format!("{pid}.json"))
}

/// Target `n`'s control socket in this process's run.
pub fn socket_path(store: &Store, n: usize) -> PathBuf {
    runs_dir(store).join(format!("{}-{n}.sock", std::process::id()))
}

fn write_record(store: &Store, rec: &RunRecord) -> Result<()> {
    let dir = runs_dir(store);
    std::fs::create_dir_all(&dir)?;
    let path = record_path(store, rec.pid);
    let tmp = dir.join(format!(".{}.tmp", rec.pid));
    let mut data = serde_json::to_vec_pretty(rec)?;
    data.push(b'\n');
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, &path)?;
    Ok(())
}

fn remove_record(store: &Store, rec: &RunRecord) {
    for t in &rec.targets {
        let _ = std::fs::remove_file(&t.socket);
    }
    let _ = std::fs::remove_file(record_path(store, rec.pid));
}

/// How many daemon logs of finished runs `runs/` keeps (the newest).
const KEPT_RUN_LOGS: usize = 32;

/// Remove all but the `keep` newest daemon logs (`*.log`, `*.log.1`) in
/// `runs/` that no live run writes to: each run leaves one per target, and
/// they would otherwise pile up run after run.
fn prune_logs(store: &Store, keep: usize) {
    let live: Vec<PathBuf> = list(store)
        .iter()
        .flat_map(|r| r.targets.iter().map(|t| PathBuf::from(&t.log)))
        .collect();
    let Ok(rd) = std::fs::read_dir(runs_dir(store)) else {
        return;
    };
    let mut logs: Vec<(SystemTime, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let is_log = name.ends_with(".log") || name.ends_with(".log.1");
            let base = name.strip_suffix(".1").unwrap_or(&name);
            let live = live
                .iter()
                .any(|l| l.file_name().and_then(|n| n.to_str()) == Some(base));
            let meta = e.metadata().ok()?;
            if !is_log || live || !meta.is_file() {
                return None;
            }
            Some((meta.modified().ok()?, e.path()))
        })
        .collect();
    logs.sort_by_key(|l| std::cmp::Reverse(l.0));
    for (_, path) in logs.into_iter().skip(keep) {
        let _ = std::fs::remove_file(path);
    }
}

/// The runs going on now, oldest first; stale records (their process is
/// gone) are removed with their sockets.
pub fn list(store: &Store) -> Vec<RunRecord> {
    let Ok(rd) = std::fs::read_dir(runs_dir(store)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let path = ent.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        match serde_json::from_slice::<RunRecord>(&bytes) {
            Ok(r) if r.is_alive() => out.push(r),
            Ok(r) => remove_record(store, &r),
            Err(_) => {}
        }
    }
    out.sort_by_key(|r| r.started_ns);
    out
}

/// The live run that holds fork `name`, and its target.
pub fn run_of_fork(store: &Store, name: &str) -> Option<(RunRecord, RunTarget)> {
    list(store).into_iter().find_map(|r| {
        let t = r
            .targets
            .iter()
            .find(|t| t.mode == "rw" && t.target == name)
            .cloned();
        t.map(|t| (r, t))
    })
}

/// Who holds a fork ([`holder`]).
#[derive(Debug, thiserror::Error)]
pub enum Holder {
    /// Another run (its pid, command line, and where it mounts the fork).
    #[error("fork '{name}' is in use by run pid {pid} ({command}) at {origin}; wait for it to end")]
    Run {
        name: String,
        pid: u32,
        command: String,
        origin: String,
    },
    /// A mount (its mountpoint and daemon).
    #[error("fork '{name}' is mounted at {mountpoint} (daemon pid {pid}, `storefs mount`)")]
    Mount {
        name: String,
        mountpoint: String,
        pid: u32,
    },
}

/// Who holds fork `name` (another run, or a mount), or `None` when nobody
/// does.
pub fn holder(store: &Store, name: &str) -> Option<Holder> {
    if let Some((r, t)) = run_of_fork(store, name)
        && r.pid != std::process::id()
    {
        return Some(Holder::Run {
            name: name.to_string(),
            pid: r.pid,
            command: r.command_line(),
            origin: t.origin,
        });
    }
    let m = store.live_mount_of_fork(name).ok()??;
    Some(Holder::Mount {
        name: name.to_string(),
        mountpoint: m.mountpoint,
        pid: m.pid,
    })
}

/// One target to mount: the mount (its `run_socket` set from
/// [`socket_path`]) and the daemon's command line.
pub struct Target {
    pub mount: Mount,
    pub daemon_args: Vec<OsString>,
}

/// How to run.
pub struct Options {
    /// CMD and its arguments.
    pub command: Vec<OsString>,
    /// The commit message (default: the command line).
    pub message: Option<String>,
    pub no_commit: bool,
    /// The directory CMD starts in (re-resolved inside the namespace);
    /// `None`: inherited.
    pub cwd: Option<PathBuf>,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct Outcome {
    /// CMD's exit code (128+N when killed by signal N).
    pub code: i32,
    /// Each fork: its new head, or `None` when nothing changed (or
    /// `--no-commit`).
    pub commits: Vec<(String, Option<String>)>,
    /// Targets whose daemon died while CMD ran (target, pid).
    pub died: Vec<(String, u32)>,
    /// What failed after CMD ended.
    pub failed: Vec<Failed>,
}

/// What failed at the end of a run (the daemon's answer, as it gave it).
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    #[error("cannot tell the daemon of '{fork}' not to commit: {error}")]
    NoCommit { fork: String, error: String },
    /// The journal is kept; the next mount or run of the fork replays it.
    #[error("commit of fork '{fork}' failed: {error}; its journal is kept")]
    Commit { fork: String, error: String },
}

/// Run: mount each target at its origin in the run's namespace (which the
/// caller entered with [`ns::enter`], and whose stop signals it blocked),
/// run CMD in a PID namespace of its own, wait, commit, stop the daemons.
pub fn run(store: &Store, targets: Vec<Target>, opts: Options) -> Result<Outcome> {
    for t in &targets {
        if let What::Fork { name, .. } = &t.mount.what
            && let Some(h) = holder(store, name)
        {
            return Err(Error::Held(h));
        }
    }
    let mut rec = RunRecord {
        pid: std::process::id(),
        pid_start: sys::process_start_time(std::process::id()),
        command: opts
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        started_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0),
        targets: targets
            .iter()
            .map(|t| {
                let (mode, id) = match &t.mount.what {
                    What::Fork { head, .. } => ("rw", head.to_hex()),
                    What::Checkpoint(id) => ("ro", id.to_hex()),
                    What::Browse => ("browse", String::new()),
                };
                let socket = t.mount.run_socket.clone().unwrap_or_default();
                RunTarget {
                    target: match &t.mount.what {
                        What::Fork { name, .. } => name.clone(),
                        _ => t.mount.label.clone(),
                    },
                    mode: mode.into(),
                    checkpoint: id,
                    origin: t.mount.mountpoint.to_string_lossy().into_owned(),
                    daemon_pid: 0,
                    log: socket.with_extension("log").to_string_lossy().into_owned(),
                    socket: socket.to_string_lossy().into_owned(),
                }
            })
            .collect(),
    };
    write_record(store, &rec)?;
    prune_logs(store, KEPT_RUN_LOGS);
    let result = run_recorded(store, &targets, &opts, &mut rec);
    remove_record(store, &rec);
    result
}

fn run_recorded(
    store: &Store,
    targets: &[Target],
    opts: &Options,
    rec: &mut RunRecord,
) -> Result<Outcome> {
    let mut made = ns::Made::default();
    let mut daemons: Vec<u32> = Vec::new();
    let started = (|| -> Result<()> {
        for (n, t) in targets.iter().enumerate() {
            let mp = &t.mount.mountpoint;
            hide_mounts_at(mp)?;
            ns::make_dir(mp, &mut made)?;
            let log = PathBuf::from(&rec.targets[n].log);
            let s =
                super::spawn::start_in_run(store, mp, &t.daemon_args, log).map_err(|e| {
                    match (&t.mount.what, &e) {
                        (What::Fork { name, .. }, Error::DaemonFailed(why))
                            if why.contains("is in use") =>
                        {
                            holder(store, name).map_or(e, Error::Held)
                        }
                        _ => e,
                    }
                })?;
            daemons.push(s.pid);
            rec.targets[n].daemon_pid = s.pid;
        }
        write_record(store, rec)
    })();
    if let Err(e) = started {
        stop_daemons(&daemons);
        return Err(e);
    }
    let heads: Vec<Option<String>> = targets
        .iter()
        .map(|t| match &t.mount.what {
            What::Fork { name, .. } => store.fork_head(name).ok().flatten().map(|h| h.to_hex()),
            _ => None,
        })
        .collect();

    // CMD, under the run's init, in a PID namespace of its own.
    let init = ns::new_pid_namespace().and_then(|()| {
        let exe = std::env::current_exe().map_err(Error::NoExecutable)?;
        let mut cmd = Command::new(exe);
        cmd.arg("--store")
            .arg(store.root())
            .arg("__run-init")
            .arg("--")
            .args(&opts.command);
        if let Some(cwd) = &opts.cwd {
            cmd.current_dir(cwd);
        }
        sys::die_with_parent(&mut cmd, rustix::process::Signal::KILL);
        ns::block_on_exec(&mut cmd);
        Ok(cmd.spawn().map_err(Error::Spawn)?.id())
    });
    let init = match init {
        Ok(pid) => pid,
        Err(e) => {
            stop_daemons(&daemons);
            return Err(e);
        }
    };
    let signals = stop_signal_fd();
    let mut out = Outcome::default();
    let mut alive: Vec<bool> = vec![true; daemons.len()];
    loop {
        use nix::sys::wait::{WaitPidFlag, WaitStatus};
        let st = match nix::sys::wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                // Nothing exited: pass on the signals that came, or wait
                // a little for one.
                forward_signals(signals.as_ref(), init);
                continue;
            }
            Ok(st) => st,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Error::Io(e.into())),
        };
        let Some(pid) = st.pid().map(|p| p.as_raw() as u32) else {
            continue;
        };
        let code = match st {
            WaitStatus::Exited(_, c) => Some(c),
            WaitStatus::Signaled(_, s, _) => Some(128 + s as i32),
            _ => None,
        };
        let Some(code) = code else { continue };
        if pid == init {
            out.code = code;
            break;
        }
        if let Some(i) = daemons.iter().position(|&d| d == pid) {
            alive[i] = false;
            out.died.push((rec.targets[i].target.clone(), pid));
        }
    }
    // CMD and everything it left are gone (init's exit ended its PID
    // namespace): commit, then stop the daemons.
    let message = opts.message.clone().unwrap_or_else(|| rec.command_line());
    for (i, t) in targets.iter().enumerate() {
        let What::Fork { name, .. } = &t.mount.what else {
            continue;
        };
        if !alive[i] {
            continue;
        }
        let sock = Path::new(&rec.targets[i].socket);
        if opts.no_commit {
            if let Err(e) = request(sock, &Request::NoCommit) {
                out.failed.push(Failed::NoCommit {
                    fork: name.clone(),
                    error: e.to_string(),
                });
            }
            out.commits.push((name.clone(), None));
            continue;
        }
        match request(
            sock,
            &Request::Commit {
                message: message.clone(),
            },
        ) {
            Ok(id) if heads[i].as_deref() == Some(id.as_str()) => {
                out.commits.push((name.clone(), None))
            }
            Ok(id) => out.commits.push((name.clone(), Some(id))),
            Err(e) => out.failed.push(Failed::Commit {
                fork: name.clone(),
                error: e.to_string(),
            }),
        }
    }
    let live: Vec<u32> = daemons
        .iter()
        .zip(&alive)
        .filter(|(_, a)| **a)
        .map(|(d, _)| *d)
        .collect();
    stop_daemons(&live);
    Ok(out)
}

/// Inside the run only: detach whatever is mounted at `mp` or beneath it
/// (a `storefs mount` of another fork at the same origin, copied into the
/// run's namespace when it was made), so the run mounts its own there.
fn hide_mounts_at(mp: &Path) -> Result<()> {
    let mut below: Vec<PathBuf> = sys::mount_table()
        .into_iter()
        .map(|m| m.mountpoint)
        .filter(|p| p.starts_with(mp))
        .collect();
    below.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in below {
        sys::detach(&p).map_err(|e| Error::HostMount {
            path: p.clone(),
            error: e.to_string(),
        })?;
    }
    Ok(())
}

/// SIGTERM each daemon (it unmounts, commits what a fork still holds, and
/// exits) and reap it; one that has not exited within
/// [`STOP_TIMEOUT`] is killed (its journal keeps what it had).
fn stop_daemons(pids: &[u32]) {
    use nix::sys::signal::{Signal, kill};
    use nix::sys::wait::{WaitPidFlag, waitpid};
    use nix::unistd::Pid;
    for &p in pids {
        let _ = kill(Pid::from_raw(p as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    for &p in pids {
        let pid = Pid::from_raw(p as i32);
        loop {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(nix::sys::wait::WaitStatus::StillAlive) => {
                    let _ = kill(pid, Signal::SIGKILL);
                    let _ = waitpid(pid, None);
                    break;
                }
                Err(nix::errno::Errno::EINTR) => {}
                _ => break,
            }
        }
    }
}

/// How long a daemon has to exit once told to.
const STOP_TIMEOUT: Duration = Duration::from_secs(600);

/// A descriptor that reads SIGINT, SIGTERM and SIGHUP sent to this process
/// (the caller blocked them, [`sys::block_stop_signals`], before starting
/// any thread); `None`, with a warning, when the kernel gives none.
fn stop_signal_fd() -> Option<nix::sys::signalfd::SignalFd> {
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mask = sys::stop_signals();
    match SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!("no signalfd ({e}): signals will not reach the command");
            None
        }
    }
}

/// Wait up to 50 ms for a signal on `sfd` and pass each that came from
/// another process on to `init` (which passes it to CMD); the terminal's
/// (SI_KERNEL) reached CMD directly, in this process group, and are not
/// passed twice. Called from the run's wait loop, so no thread is needed.
fn forward_signals(sfd: Option<&nix::sys::signalfd::SignalFd>, init: u32) {
    use std::os::fd::AsFd;
    let Some(sfd) = sfd else {
        std::thread::sleep(Duration::from_millis(50));
        return;
    };
    let fd = sfd.as_fd();
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    if !matches!(rustix::event::poll(&mut fds, Some(&timeout)), Ok(n) if n > 0) {
        return;
    }
    while let Ok(Some(info)) = sfd.read_signal() {
        if info.ssi_code > 0 {
            continue; // SI_KERNEL: the terminal's
        }
        if let Ok(sig) = nix::sys::signal::Signal::try_from(info.ssi_signo as i32) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(init as i32), sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of 40 logs of finished runs (and a `.1` of the oldest), the 32
    /// newest stay; a run's record and anything not a log are left alone.
    #[test]
    fn finished_runs_leave_only_the_newest_logs() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::open_or_create(&t.path().join("store")).unwrap();
        let dir = runs_dir(&store);
        std::fs::create_dir_all(&dir).unwrap();
        let base = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut names = vec!["1-0.log.1".to_string()];
        names.extend((1..=40).map(|i| format!("{i}-0.log")));
        for (age, name) in names.iter().enumerate() {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_modified(base + Duration::from_secs(age as u64))
                .unwrap();
        }
        std::fs::write(dir.join("notes.txt"), "kept").unwrap();
        prune_logs(&store, 32);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left.len(), 33, "{left:?}");
        assert!(left.contains(&"notes.txt".to_string()));
        assert!(left.contains(&"40-0.log".to_string()));
        assert!(left.contains(&"9-0.log".to_string()));
        assert!(!left.contains(&"8-0.log".to_string()));
        assert!(!left.contains(&"1-0.log.1".to_string()));
    }
}
