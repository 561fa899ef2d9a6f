//! The namespaces of `storefs run`: a private mount namespace (root), or a
//! user namespace with the caller's uid and gid mapped to themselves and a
//! mount namespace it owns (any other user); making an origin's missing
//! directories exist inside it without touching the host; and the run's
//! init, pid 1 of the PID namespace CMD runs in, which forwards signals to
//! CMD and whose exit ends every process CMD left behind.
//!
//! Nothing here is visible to other processes: the host's mount table and
//! directories stay as they were.

use std::ffi::OsString;
use std::fs;
use std::io::{self, ErrorKind};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, mount, mount_change,
    move_mount, open_tree,
};
use rustix::thread::UnshareFlags;

use super::{Error, Result};

/// Enter a private mount namespace: as root a plain one; as any other user
/// a new user namespace (uid and gid mapped to themselves, `setgroups`
/// denied, which is what an unprivileged map needs) owning a new mount
/// namespace, where this process holds CAP_SYS_ADMIN and may mount. Every
/// mount is then made private, so nothing mounted here propagates to the
/// host.
///
/// Call it while the process has a single thread (the kernel refuses
/// `CLONE_NEWUSER` and `CLONE_NEWNS` otherwise).
pub fn enter() -> Result<()> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let user = uid != 0;
    let flags = if user {
        UnshareFlags::NEWUSER | UnshareFlags::NEWNS
    } else {
        UnshareFlags::NEWNS
    };
    // SAFETY: no FILES flag: no descriptor table is split between threads
    // (and there is one thread).
    if let Err(e) = unsafe { rustix::thread::unshare_unsafe(flags) } {
        return Err(unshare_failed(user, e.into()));
    }
    if user {
        let write = |file: &str, text: String| {
            fs::write(format!("/proc/self/{file}"), text).map_err(|e| {
                Error::Namespace(format!(
                    "cannot map uid {uid} and gid {gid} in the run's user namespace (/proc/self/{file}: {e})"
                ))
            })
        };
        write("setgroups", "deny".into())?;
        write("uid_map", format!("{uid} {uid} 1\n"))?;
        write("gid_map", format!("{gid} {gid} 1\n"))?;
    }
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| {
        let why = match userns_blocker() {
            Some(b) if user => format!("; {b}"),
            _ => String::new(),
        };
        Error::Namespace(format!(
            "cannot make the run's mounts private ({}){why}",
            io::Error::from(e)
        ))
    })?;
    Ok(())
}

/// A refused `unshare`: which setting forbids it, and the fix.
fn unshare_failed(user: bool, e: io::Error) -> Error {
    if !user {
        return Error::Namespace(format!(
            "cannot make a private mount namespace for the run: {e}"
        ));
    }
    match userns_blocker() {
        Some(b) => Error::Namespace(format!(
            "cannot make a user namespace for the run ({e}): {b}"
        )),
        None => Error::NoUserNamespace(e.to_string()),
    }
}

/// The setting that forbids ordinary users to make user namespaces, with
/// what to do; `None` when none of the known ones does.
pub fn userns_blocker() -> Option<String> {
    let read = |p: &str| fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some("the sysctl kernel.unprivileged_userns_clone is 0: set it to 1 (`sudo sysctl kernel.unprivileged_userns_clone=1`), or run as root".into());
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("the sysctl user.max_user_namespaces is 0: raise it (`sudo sysctl user.max_user_namespaces=15000`), or run as root".into());
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Some("AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1): set it to 0, or give storefs an AppArmor profile with `userns,`, or run as root".into());
    }
    None
}

/// Directories made inside the run's namespace (on its own tmpfs), where
/// more can be made without touching the host.
#[derive(Default)]
pub struct Made(Vec<PathBuf>);

/// Make `dir` (absolute, canonical) exist inside the run's mount
/// namespace, creating nothing on the host. When a part of it is missing,
/// its nearest existing ancestor `A` is covered, inside the namespace only,
/// by a tmpfs that shows what the host has in `A`: each entry is a
/// recursive bind mount of the host's (a symlink is copied), so `ls A`
/// still lists the host's entries and writes to them reach the host. The
/// missing directories are made on that tmpfs (mode 0755).
pub fn make_dir(dir: &Path, made: &mut Made) -> Result<()> {
    let fail = |e: io::Error| Error::CreateMountpoint {
        path: dir.to_path_buf(),
        source: e,
    };
    let mut existing = PathBuf::from("/");
    let mut missing = Vec::new();
    for c in dir.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) if missing.is_empty() => {
                let next = existing.join(n);
                match fs::symlink_metadata(&next) {
                    Ok(m) if m.is_dir() => existing = next,
                    Ok(_) => {
                        return Err(fail(io::Error::new(
                            ErrorKind::NotADirectory,
                            format!("{} is not a directory", next.display()),
                        )));
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => missing.push(n.to_owned()),
                    Err(e) => return Err(fail(e)),
                }
            }
            Component::Normal(n) => missing.push(n.to_owned()),
            _ => {
                return Err(fail(io::Error::new(
                    ErrorKind::InvalidInput,
                    "not a canonical absolute path",
                )));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !made.0.contains(&existing) {
        if existing == Path::new("/") {
            return Err(fail(io::Error::new(
                ErrorKind::Unsupported,
                format!(
                    "/{} is missing and a run makes missing directories only beneath an existing directory other than /",
                    missing[0].to_string_lossy()
                ),
            )));
        }
        cover_with_tmpfs(&existing).map_err(|e| {
            fail(io::Error::new(
                e.kind(),
                format!(
                    "cannot cover {} with a tmpfs inside the run: {e}",
                    existing.display()
                ),
            ))
        })?;
        made.0.push(existing.clone());
    }
    let mut p = existing;
    for n in missing {
        p.push(n);
        match fs::create_dir(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e)),
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).map_err(fail)?;
        made.0.push(p.clone());
    }
    Ok(())
}

/// What `dir` holds on the host, to show again on the tmpfs.
enum Entry {
    /// A directory or file: a detached recursive copy of its mounts.
    Tree {
        name: OsString,
        dir: bool,
        tree: OwnedFd,
    },
    Symlink {
        name: OsString,
        target: PathBuf,
    },
}

/// See [`make_dir`]: cover `dir` with a tmpfs (its mode) that shows the
/// host's entries of `dir`.
fn cover_with_tmpfs(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    let mut entries = Vec::new();
    for ent in fs::read_dir(dir)? {
        let ent = ent?;
        let name = ent.file_name();
        let path = dir.join(&name);
        let ft = ent.file_type()?;
        if ft.is_symlink() {
            entries.push(Entry::Symlink {
                name,
                target: fs::read_link(&path)?,
            });
            continue;
        }
        let tree = open_tree(
            rustix::fs::CWD,
            &path,
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::AT_RECURSIVE
                | OpenTreeFlags::AT_SYMLINK_NOFOLLOW
                | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )?;
        entries.push(Entry::Tree {
            name,
            dir: ft.is_dir(),
            tree,
        });
    }
    let opts = std::ffi::CString::new(format!("mode={:o}", meta.mode() & 0o7777))?;
    mount(
        "tmpfs",
        dir,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(opts.as_c_str()),
    )?;
    for e in entries {
        match e {
            Entry::Symlink { name, target } => symlink(target, dir.join(name))?,
            Entry::Tree {
                name,
                dir: is_dir,
                tree,
            } => {
                let at = dir.join(&name);
                if is_dir {
                    fs::create_dir(&at)?;
                } else {
                    fs::File::create(&at)?;
                }
                move_mount(
                    tree.as_fd(),
                    "",
                    rustix::fs::CWD,
                    &at,
                    MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
                )?;
            }
        }
    }
    Ok(())
}

/// Enter a new PID namespace for the children made from now on: the next
/// one is its init ([`init`]); when it exits, the kernel kills every other
/// process in it.
pub fn new_pid_namespace() -> Result<()> {
    // SAFETY: no FILES flag.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWPID) }.map_err(|e| {
        Error::Namespace(format!(
            "cannot make a PID namespace for the run: {}",
            io::Error::from(e)
        ))
    })
}

/// The signals the run's [`init`] passes on to CMD. The run starts init
/// with them blocked ([`block_on_exec`]).
pub const INIT_SIGNALS: [nix::sys::signal::Signal; 6] = {
    use nix::sys::signal::Signal;
    [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ]
};

/// [`INIT_SIGNALS`] as a set.
fn init_signal_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for sig in INIT_SIGNALS {
        set.add(sig);
    }
    set
}

/// Have the process `cmd` starts begin with [`INIT_SIGNALS`] blocked (the
/// mask survives exec), so none sent before [`init`] can pass it on is lost.
pub fn block_on_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let set = init_signal_set();
    // SAFETY: pthread_sigmask is async-signal-safe; std runs this after it
    // reset the child's mask.
    unsafe {
        cmd.pre_exec(move || set.thread_block().map_err(std::io::Error::from));
    }
}

/// CMD's pid, for the signal handler of [`init`].
static CMD_PID: AtomicI32 = AtomicI32::new(0);

/// The run's init: pid 1 of its PID namespace. Runs `cmd`, passes on the
/// signals sent to it by a process (`storefs run` forwarding SIGINT,
/// SIGTERM, SIGHUP; not those the terminal sends, which CMD, in the same
/// process group, already got), reaps every orphan, and returns CMD's exit
/// code (128+N when a signal N killed it) once CMD exits. Its own exit
/// then ends everything CMD left running.
pub fn init(cmd: &[OsString]) -> i32 {
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, sigaction};
    let Some((prog, args)) = cmd.split_first() else {
        eprintln!("storefs: error: no command to run");
        return 2;
    };
    // A pid 1 gets only the signals it has a handler for. They stay blocked
    // (the run started this process with them blocked, [`INIT_SIGNALS`])
    // until CMD's pid is known: one that came earlier would find no handler,
    // or no pid to pass it to, and be lost.
    let set = init_signal_set();
    let _ = set.thread_block();
    let action = SigAction::new(
        SigHandler::SigAction(forward),
        SaFlags::SA_RESTART | SaFlags::SA_SIGINFO,
        SigSet::empty(),
    );
    for sig in INIT_SIGNALS {
        // SAFETY: the handler only loads an atomic and calls kill(2).
        let _ = unsafe { sigaction(sig, &action) };
    }
    // CMD starts with an empty signal mask (std::process::Command sets it).
    let spawned = std::process::Command::new(prog).args(args).spawn();
    if let Ok(c) = &spawned {
        CMD_PID.store(c.id() as i32, Ordering::SeqCst);
    }
    let _ = set.thread_unblock();
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("storefs: error: cannot run {}: {e}", prog.to_string_lossy());
            return if e.kind() == ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let pid = child.id() as i32;
    loop {
        match nix::sys::wait::waitpid(None, None) {
            Ok(nix::sys::wait::WaitStatus::Exited(p, code)) if p.as_raw() == pid => return code,
            Ok(nix::sys::wait::WaitStatus::Signaled(p, sig, _)) if p.as_raw() == pid => {
                return 128 + sig as i32;
            }
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => {}
            // No child left (cannot happen before CMD was reaped).
            Err(_) => return 1,
        }
    }
}

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // SI_USER, SI_QUEUE, SI_TKILL (<= 0): sent by a process; SI_KERNEL: the
    // terminal's, which reached CMD already.
    if code > 0 {
        return;
    }
    let pid = CMD_PID.load(Ordering::SeqCst);
    if let (Some(p), Some(s)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_named_raw(sig),
    ) {
        let _ = rustix::process::kill_process(p, s);
    }
}
