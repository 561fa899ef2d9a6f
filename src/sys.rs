//! Shared OS plumbing, at the very bottom of the layers: every module may use
//! it, and it imports no other module of storefs. Safe wrappers (over rustix,
//! and nix where rustix has no API) for the calls that more than one layer
//! makes, so each is written once:
//!
//! - the stop signals (SIGTERM, SIGINT, SIGHUP): blocking them in a thread,
//!   starting a helper thread with them blocked, waiting for one, and waking
//!   a thread that waits for one;
//! - `flock` locks on open files;
//! - process liveness (`kill(pid, 0)` and `/proc`), and whether we are root;
//! - the kernel's mount table (`/proc/self/mountinfo`), unmounting, and
//!   whether a FUSE mount's daemon is gone;
//! - what a daemonized child needs: a new session, and a descriptor kept
//!   across `exec`;
//! - device numbers: a `dev_t` from its major and minor, and back;
//! - random bytes for unique names;
//! - files opened, created, renamed and removed without following a symlink
//!   anywhere on their path (`openat2`'s `RESOLVE_NO_SYMLINKS`), or opened
//!   beneath an open directory without one (`RESOLVE_BENEATH`), temp files
//!   with unguessable names, and a process's identity (start time, name).
//! - `sync_file_range` and `cachestat`, which neither rustix nor nix offers,
//!   written against libc (with `mallopt` in `daemon::run` and the ring
//!   threads' scheduling calls in `fs::uring`, the only libc calls);
//! - telling systemd a service is ready or stopping (`sd_notify`'s protocol).
//!
//! It holds no policy: which thread waits for the signals, what a lock
//! guards, and what a dead mount means to the user are its callers' affairs.

use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

use nix::sys::signal::{SigSet, Signal};
use rustix::fs::FlockOperation;
use rustix::io::Errno;

// ------------------------------------------------------------------ signals

/// The signals that make a serving daemon unmount cleanly and return. Every
/// thread of a daemon blocks them; one thread waits for them.
const STOP_SIGNALS: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// [`STOP_SIGNALS`] as a set (for a `signalfd` of them, too).
pub fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in STOP_SIGNALS {
        set.add(sig);
    }
    set
}

/// Block the stop signals in the calling thread; threads it starts from now
/// on inherit the mask. A thread that does not block them would die of a
/// process-directed SIGTERM instead of leaving it to the thread that waits.
pub fn block_stop_signals() -> io::Result<()> {
    stop_signals().thread_block().map_err(io::Error::from)
}

/// Start a helper thread named `name` with the stop signals blocked, whatever
/// the calling thread's mask; the caller's mask is left as it was.
pub fn spawn_unsignalled<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let old = stop_signals()
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .map_err(io::Error::from)?;
    let spawned = std::thread::Builder::new().name(name.into()).spawn(f);
    old.thread_set_mask().map_err(io::Error::from)?;
    spawned
}

/// Unblock the stop signals in the calling thread (undoes
/// [`block_stop_signals`]; threads started meanwhile keep theirs blocked).
pub fn unblock_stop_signals() -> io::Result<()> {
    stop_signals().thread_unblock().map_err(io::Error::from)
}

/// Wait until a stop signal is pending for the calling thread (which must
/// have it blocked) and take it.
pub fn wait_for_stop_signal() -> io::Result<Signal> {
    stop_signals().wait().map_err(io::Error::from)
}

/// Send SIGTERM to `thread` alone: wakes a thread in
/// [`wait_for_stop_signal`]. The thread must not have been joined.
pub fn send_stop_signal<T>(thread: &JoinHandle<T>) -> io::Result<()> {
    nix::sys::pthread::pthread_kill(thread.as_pthread_t(), Signal::SIGTERM).map_err(io::Error::from)
}

// -------------------------------------------------------------------- locks

/// A kind of `flock` lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    Shared,
    Exclusive,
}

/// Take `kind` of lock on `f`, waiting while another open file holds a
/// conflicting one. Closing `f` (every descriptor of it) releases it.
pub fn lock(f: &File, kind: Lock) -> io::Result<()> {
    let op = match kind {
        Lock::Shared => FlockOperation::LockShared,
        Lock::Exclusive => FlockOperation::LockExclusive,
    };
    loop {
        match rustix::fs::flock(f, op) {
            Err(Errno::INTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Take `kind` of lock on `f` if nobody holds a conflicting one: false when
/// someone does.
pub fn try_lock(f: &File, kind: Lock) -> io::Result<bool> {
    let op = match kind {
        Lock::Shared => FlockOperation::NonBlockingLockShared,
        Lock::Exclusive => FlockOperation::NonBlockingLockExclusive,
    };
    loop {
        match rustix::fs::flock(f, op) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

// ---------------------------------------------------------------- processes

/// Tell the service manager that started us (systemd's `Type=notify`) a state
/// change, such as `READY=1` or `STOPPING=1`: one datagram to the socket in
/// `NOTIFY_SOCKET` (a path, or an abstract name written with a leading `@`).
/// Does nothing when that variable is unset, as outside such a service.
pub fn notify_service_manager(state: &str) -> io::Result<()> {
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let target = target.as_encoded_bytes();
    let addr = match target.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None => SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(target))?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

/// Whether we run as root (effective uid 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Whether a process with this pid exists and has not finished exiting. A
/// zombie counts as gone only once it is its only thread: the main thread of
/// an exiting process turns zombie while its other threads may still be
/// leaving a system call (an fdatasync, say), and until the last one is gone
/// the process keeps its descriptors, and with them its locks.
pub fn pid_alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    let exists = matches!(
        rustix::process::test_kill_process(p),
        Ok(()) | Err(Errno::PERM)
    );
    exists && !(is_zombie(pid) && threads(pid) <= 1)
}

/// The executable process `pid` runs (`/proc/PID/exe`; a replaced binary
/// reads `PATH (deleted)`). `NotFound` when the process is gone; another
/// error (`EACCES`: another user's process) says nothing either way.
pub fn process_exe(pid: u32) -> io::Result<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe"))
}

/// The processes (pids, sorted) that use something under `mountpoint`: their
/// cwd or root is there, a descriptor is open on a file there, or a file
/// there is mapped. What makes an unmount fail with `EBUSY`, as far as
/// /proc shows it (another user's processes are not visible to a user other
/// than root). Paths are compared as the kernel names them, and a link whose
/// path is under the mountpoint is checked to be on the mount's device (a
/// cwd in the directory the mount covers is not on it); only such paths are
/// `stat`ed, so no other mount is asked anything.
pub fn processes_using(mountpoint: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let mp = mountpoint.as_os_str().as_bytes();
    let dev = fs::metadata(mountpoint).ok().map(|m| m.dev());
    let under_path = |p: &Path| {
        let b = p.as_os_str().as_bytes();
        b.starts_with(mp) && (b.len() == mp.len() || b[mp.len()] == b'/' || mp == b"/")
    };
    // `link` (a /proc symlink) names `p`: on the mount when its target is.
    let under = |link: &Path, p: &Path| {
        under_path(p)
            && match (dev, fs::metadata(link)) {
                (Some(d), Ok(m)) => m.dev() == d,
                _ => true,
            }
    };
    let mut out = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return out;
    };
    for ent in procs.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let dir = ent.path();
        let linked = |link: &Path| fs::read_link(link).is_ok_and(|p| under(link, &p));
        let mut uses = linked(&dir.join("cwd")) || linked(&dir.join("root"));
        if !uses && let Ok(fds) = fs::read_dir(dir.join("fd")) {
            uses = fds.flatten().any(|fd| linked(&fd.path()));
        }
        if !uses && let Ok(maps) = fs::read_to_string(dir.join("maps")) {
            // "addr perms offset dev inode      /path": the path is the 6th field on.
            uses = maps.lines().any(|l| {
                l.splitn(6, ' ')
                    .nth(5)
                    .map(str::trim_start)
                    .is_some_and(|p| p.starts_with('/') && under_path(Path::new(p)))
            });
        }
        if uses {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// How many threads process `pid` has, exiting ones included (0 if it is gone).
fn threads(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// The state field of /proc/PID/stat is 'Z' for a zombie nobody has reaped yet.
fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may contain spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

/// Make the child `cmd` spawns the leader of a new session (no controlling
/// terminal, out of the parent's process group), and keep descriptor `keep`
/// open across its `exec`.
pub fn in_new_session_keeping(cmd: &mut Command, keep: RawFd) {
    // SAFETY: only async-signal-safe calls (setsid, fcntl) between fork and
    // exec; `keep` is open in the parent, so in the child too.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            let fd = BorrowedFd::borrow_raw(keep);
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            Ok(())
        });
    }
}

/// Have the kernel send `sig` to the child `cmd` spawns when the thread
/// that spawned it exits (`PR_SET_PDEATHSIG`).
pub fn die_with_parent(cmd: &mut Command, sig: rustix::process::Signal) {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(sig))?;
            Ok(())
        });
    }
}

/// Have the process `cmd` starts keep CAP_SYS_ADMIN across its `exec`
/// (inheritable and ambient), when this process has it and is not uid 0:
/// an ordinary user's run holds it in the user namespace it made, and an
/// `exec` as a uid other than 0 would drop it, leaving its daemons unable
/// to mount there. Nothing when this process lacks it.
pub fn keep_mount_capability_across_exec(cmd: &mut Command) {
    use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
    if rustix::process::geteuid().is_root() {
        return;
    }
    let Ok(caps) = capabilities(None) else { return };
    if !caps.permitted.contains(CapabilitySet::SYS_ADMIN) {
        return;
    }
    // SAFETY: capset and prctl are plain system calls, safe after fork.
    unsafe {
        cmd.pre_exec(move || {
            let mut c = caps;
            c.inheritable |= CapabilitySet::SYS_ADMIN;
            set_capabilities(None, c)?;
            rustix::thread::configure_capability_in_ambient_set(CapabilitySet::SYS_ADMIN, true)?;
            Ok(())
        });
    }
}

/// Take ownership of descriptor `fd` inherited from the parent (see
/// [`in_new_session_keeping`]), closing it on `exec` from now on. `None` if
/// no such descriptor is open.
pub fn adopt_inherited_fd(fd: RawFd) -> Option<File> {
    if fd < 0 {
        return None;
    }
    // SAFETY: the borrow only asks the kernel about `fd` (EBADF if closed);
    // ownership is taken once it is known to be open, and nothing else in
    // this process owns an inherited descriptor the parent named for us.
    unsafe {
        let borrowed = BorrowedFd::borrow_raw(fd);
        rustix::io::fcntl_getfd(borrowed).ok()?;
        rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC).ok()?;
        Some(File::from_raw_fd(fd))
    }
}

// ------------------------------------------------------------------- mounts

/// One line of the kernel's mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    pub mountpoint: PathBuf,
    /// `fuse.storefs`, `ext4`, …
    pub fstype: String,
    /// What was mounted: a storefs mount's is its TARGET as given to
    /// `storefs mount` or mount(8) (`storefs:TARGET` from older daemons).
    pub source: String,
    /// The mount's own options (`rw,nosuid,nodev,relatime`).
    pub mount_options: String,
    /// The file system's options (`rw,user_id=0,group_id=0,…`).
    pub super_options: String,
}

impl MountEntry {
    /// A FUSE mount's owner: the uid that mounted it (`user_id=` in its
    /// options).
    pub fn fuse_owner(&self) -> Option<u32> {
        self.super_options
            .split(',')
            .find_map(|o| o.strip_prefix("user_id="))
            .and_then(|u| u.parse().ok())
    }
}

/// Every mount this process sees, from /proc/self/mountinfo (empty if it
/// cannot be read).
pub fn mount_table() -> Vec<MountEntry> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let sep = fields.iter().position(|f| *f == "-")?;
    let mountpoint = unescape_mount_path(fields.get(4)?);
    let fstype = fields.get(sep + 1)?.to_string();
    let source = unescape_mount_path(fields.get(sep + 2).unwrap_or(&""))
        .to_string_lossy()
        .into_owned();
    Some(MountEntry {
        mountpoint,
        fstype,
        source,
        mount_options: fields.get(5)?.to_string(),
        super_options: fields.get(sep + 3).unwrap_or(&"").to_string(),
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal `\040` etc.
fn unescape_mount_path(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Whether `path` is a FUSE mount whose daemon is gone: statfs fails with
/// ENOTCONN ("Transport endpoint is not connected"); stat may still answer
/// from the kernel's attribute cache, statfs always asks the daemon.
pub fn is_disconnected(path: &Path) -> bool {
    matches!(rustix::fs::statfs(path), Err(Errno::NOTCONN))
}

/// `syncfs(2)` of the FUSE file system mounted at `mountpoint`: the kernel
/// writes back every dirty page and inode of it (the daemon must be serving
/// on other threads) and returns once they were answered. Fails (changing
/// nothing) when `mountpoint` no longer leads to a FUSE mount (detached),
/// rather than syncing whatever is under it.
pub fn syncfs_fuse(mountpoint: &Path) -> io::Result<()> {
    /// `FUSE_SUPER_MAGIC`: `statfs`'s `f_type` of a FUSE mount.
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    let dir = rustix::fs::open(
        mountpoint,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    if rustix::fs::fstatfs(&dir)?.f_type as i64 != FUSE_SUPER_MAGIC {
        return Err(io::Error::other(format!(
            "{} is not a FUSE mount (detached?)",
            mountpoint.display()
        )));
    }
    rustix::fs::syncfs(&dir)?;
    Ok(())
}

/// `umount2(path, 0)` (root only).
pub fn unmount(path: &Path) -> io::Result<()> {
    rustix::mount::unmount(path, rustix::mount::UnmountFlags::empty()).map_err(io::Error::from)
}

/// `mount(2)` with `MS_REMOUNT` and `flags` on `path` (root only): the
/// kernel changes the mount's flags (`ro`, `nosuid`, the atime ones, …) and
/// its file system's (`ro`, `sync`, `dirsync`); FUSE takes no options of
/// its own on a remount, so none are given.
pub fn remount(path: &Path, flags: rustix::mount::MountFlags) -> io::Result<()> {
    rustix::mount::mount_remount(path, flags, c"").map_err(io::Error::from)
}

/// `umount2(path, MNT_DETACH)`: the mount disappears now and ends once its
/// last user leaves (root only).
pub fn detach(path: &Path) -> io::Result<()> {
    rustix::mount::unmount(path, rustix::mount::UnmountFlags::DETACH).map_err(io::Error::from)
}

// ----------------------------------------------------------- device numbers

/// The userspace `dev_t` of device `major:minor` (glibc's encoding: the one
/// `stat` gives and the store records).
pub fn makedev(major: u32, minor: u32) -> u64 {
    rustix::fs::makedev(major, minor)
}

/// The major number of a userspace `dev_t`.
pub fn major(dev: u64) -> u32 {
    rustix::fs::major(dev)
}

/// The minor number of a userspace `dev_t`.
pub fn minor(dev: u64) -> u32 {
    rustix::fs::minor(dev)
}

// ------------------------------------------------------------ write-back

/// How far [`sync_file_range`] goes with the dirty pages of a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncRange {
    /// Start their writeback without waiting (`SYNC_FILE_RANGE_WRITE`).
    Start,
    /// Wait for writeback under way, start it for the rest and wait for all
    /// of it (`WAIT_BEFORE | WRITE | WAIT_AFTER`).
    Wait,
}

/// `sync_file_range(2)` of `len` bytes of `f` from `offset` (`len` 0: to the
/// end of the file). A range past `i64::MAX` is EINVAL. Neither rustix nor
/// nix offer this call, so it is written against libc.
pub fn sync_file_range(f: impl AsFd, offset: u64, len: u64, how: SyncRange) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(Errno::INVAL.into());
    };
    let flags = match how {
        SyncRange::Start => libc::SYNC_FILE_RANGE_WRITE,
        SyncRange::Wait => {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER
        }
    };
    // SAFETY: no memory is passed; the descriptor is borrowed for the call.
    if unsafe { libc::sync_file_range(f.as_fd().as_raw_fd(), offset, len, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ------------------------------------------------------------ cold reads

/// `n` bytes of `file` at `at`, read past the page cache when it does not
/// hold them all: with `O_DIRECT` over the pages that hold them. A cold
/// random read of a few pages then costs one direct disk read, 10-15% less
/// than a buffered one on the bench machine's disk, and fills no pages only
/// it wanted. Where the cache holds them, the kernel does not say
/// (`cachestat(2)`, Linux 6.5), or the file system refuses `O_DIRECT`: a
/// plain read. `file` is this caller's own descriptor: the flag is set on it
/// for the read and the flags restored before returning (a descriptor other
/// threads read through takes [`read_cold_via`]). Fewer than `n` bytes
/// there: an `UnexpectedEof` error.
pub fn read_cold(file: &File, at: u64, n: usize) -> io::Result<Vec<u8>> {
    use rustix::fs::OFlags;
    if is_cached(file, at, n) {
        return read_plain(file, at, n);
    }
    let flags = rustix::fs::fcntl_getfl(file)?;
    if rustix::fs::fcntl_setfl(file, flags | OFlags::DIRECT).is_err() {
        return read_plain(file, at, n);
    }
    let read = read_direct(file, at, n);
    rustix::fs::fcntl_setfl(file, flags)?;
    match read? {
        Some(out) => Ok(out),
        None => read_plain(file, at, n),
    }
}

/// [`read_cold`] for a descriptor shared between threads (a pack's), whose
/// flags must not change under another thread's read: the direct read goes
/// through `direct`, a second descriptor of the same file opened with
/// `O_DIRECT`.
pub fn read_cold_via(file: &File, direct: &File, at: u64, n: usize) -> io::Result<Vec<u8>> {
    if is_cached(file, at, n) {
        return read_plain(file, at, n);
    }
    match read_direct(direct, at, n)? {
        Some(out) => Ok(out),
        None => read_plain(file, at, n),
    }
}

/// Direct I/O wants the buffer, offset and length aligned to the device's
/// block; a page covers every device this runs on.
const ALIGN: usize = 4096;

/// Whether the page cache holds every page of `n` bytes at `at` of `file`,
/// or the kernel does not say (then a plain read is the safe choice).
fn is_cached(file: &File, at: u64, n: usize) -> bool {
    let start = at / ALIGN as u64 * ALIGN as u64;
    let span = ((at - start) as usize + n).div_ceil(ALIGN) * ALIGN;
    cached_pages(file, start, span as u64).is_none_or(|c| c >= (span / ALIGN) as u64)
}

/// `n` bytes of `file` at `at`, through the page cache; fewer there: an
/// `UnexpectedEof` error.
pub fn read_plain(file: &File, at: u64, n: usize) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut out = vec![0u8; n];
    file.read_exact_at(&mut out, at)?;
    Ok(out)
}

/// `n` bytes at `at` through `direct`, a descriptor in `O_DIRECT` mode, over
/// the aligned pages that hold them; `None` when the file system refuses the
/// read (`EINVAL`: a device whose blocks are larger than a page, or a file
/// system that takes the flag and refuses the read).
fn read_direct(direct: &File, at: u64, n: usize) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let start = at / ALIGN as u64 * ALIGN as u64;
    let skip = (at - start) as usize;
    let span = (skip + n).div_ceil(ALIGN) * ALIGN;
    let mut buf = vec![0u8; span + ALIGN];
    let pad = buf.as_ptr().align_offset(ALIGN);
    let aligned = &mut buf[pad..pad + span];
    let mut got = 0;
    loop {
        // Only the end of the file makes a direct read short (then not a
        // whole number of blocks): stop there.
        match direct.read_at(&mut aligned[got..], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
            Err(e) => return Err(e),
        }
        if got == span || got % ALIGN != 0 {
            break;
        }
    }
    if got < skip + n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(aligned[skip..skip + n].to_vec()))
}

/// How many of the pages of `len` bytes of `file` from `at` the page cache
/// holds (`cachestat(2)`); `None` when the kernel does not say. Neither
/// rustix nor libc offer the call yet; its number is 451 on every
/// architecture.
fn cached_pages(file: &File, at: u64, len: u64) -> Option<u64> {
    cachestat(file, at, len).map(|s| s.nr_cache)
}

/// How far from `from` (up to `to`) the page cache holds nothing of `file`
/// that is dirty or under writeback: the written part, from `from` up to
/// the start of its first such page (`to` when there is none, `from` when
/// the kernel does not say). `cachestat(2)` on halves, about 2·log₂(pages)
/// calls.
pub fn written_back_to(file: &File, from: u64, to: u64) -> u64 {
    first_unwritten(from, to, |at, end| {
        cachestat(file, at, end - at).map(|s| s.nr_dirty + s.nr_writeback != 0)
    })
}

/// [`written_back_to`] with `unwritten(at, end)` saying whether any page of
/// that range is dirty or under writeback (`None`: unknown).
fn first_unwritten(from: u64, to: u64, unwritten: impl Fn(u64, u64) -> Option<bool>) -> u64 {
    const PAGE: u64 = 4096;
    if from >= to {
        return from;
    }
    match unwritten(from, to) {
        Some(false) => return to,
        None => return from,
        Some(true) => {}
    }
    // The first page (index) in [from / PAGE, to / PAGE] that is unwritten.
    let (mut lo, mut hi) = (from / PAGE, to.div_ceil(PAGE) - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match unwritten(from, ((mid + 1) * PAGE).min(to)) {
            Some(true) => hi = mid,
            Some(false) => lo = mid + 1,
            None => return from,
        }
    }
    (lo * PAGE).clamp(from, to)
}

/// `cachestat(2)` of `len` bytes of `file` from `at` (`len` 0: to the end);
/// `None` when the kernel does not say.
fn cachestat(file: &File, at: u64, len: u64) -> Option<Cachestat> {
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: at, len };
    let mut stat = Cachestat::default();
    // SAFETY: both pointers are to live, properly laid out structs for the
    // call's duration; the descriptor is borrowed for it.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    (r == 0).then_some(stat)
}

/// What `cachestat(2)` says of a range of a file, in pages.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

// ------------------------------------------------- files without symlinks

/// Open `path` (absolute, every component a real directory or file) without
/// following a symlink anywhere on it: `openat2` with `RESOLVE_NO_SYMLINKS`
/// (and no magic links, no `..` above the start). A store's paths are
/// absolute under its canonical root, so a symlink planted on one (a file or
/// a directory swapped for a link) fails with `ELOOP` instead of being
/// followed. `O_CLOEXEC` is added. Where the kernel has no `openat2`
/// (before 5.6), the last component is opened `O_NOFOLLOW` only.
pub fn open_nofollow(path: &Path, flags: rustix::fs::OFlags, mode: u32) -> io::Result<File> {
    use rustix::fs::{CWD, Mode, OFlags, ResolveFlags};
    let flags = flags | OFlags::CLOEXEC;
    // openat2 refuses a mode without O_CREAT (open ignores it).
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(mode)
    } else {
        Mode::empty()
    };
    let how = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(CWD, path, flags | OFlags::NOFOLLOW, mode, how) {
        Ok(fd) => Ok(File::from(fd)),
        Err(Errno::NOSYS) => Ok(File::from(rustix::fs::open(
            path,
            flags | OFlags::NOFOLLOW,
            mode,
        )?)),
        Err(e) => Err(e.into()),
    }
}

/// A file inside a store opened for reading: no symlink followed anywhere
/// on its path ([`open_nofollow`]), `O_NONBLOCK` so that a FIFO planted
/// there does not block the open, and refused unless it is a regular file
/// (a FIFO, a socket or a device is never read). Returns it with its size
/// (the `fstat` the check made). Errors, for the caller to put after the
/// path: "is a symlink, or a directory on its path is one (storefs follows
/// no symlink inside a store)", "is not a regular file (a FIFO)"; their kind
/// is `InvalidData`, a missing file stays `NotFound`.
pub fn open_regular_nofollow(path: &Path) -> io::Result<(File, u64)> {
    use rustix::fs::OFlags;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
    let f = open_nofollow(path, flags, 0).map_err(no_symlink)?;
    let size = regular_size(&f)?;
    Ok((f, size))
}

/// The size of `f`, refused unless it is a regular file (see
/// [`open_regular_nofollow`] for the message).
pub fn regular_size(f: &File) -> io::Result<u64> {
    use rustix::fs::FileType;
    let st = rustix::fs::fstat(f)?;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => return Ok(st.st_size as u64),
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Directory => "a directory",
        _ => "of an unknown type",
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("is not a regular file ({kind}); storefs reads only regular files inside a store"),
    ))
}

/// `ELOOP` from an open without symlinks, said as what it means there.
pub fn no_symlink(e: io::Error) -> io::Error {
    if e.raw_os_error() != Some(libc::ELOOP) {
        return e;
    }
    io::Error::new(
        io::ErrorKind::InvalidData,
        "is a symlink, or a directory on its path is one (storefs follows no symlink inside a store)",
    )
}

/// The whole of a regular file inside a store, opened as by
/// [`open_regular_nofollow`]: refused when it holds more than `cap` bytes
/// ("holds N bytes, more than the CAP a KIND may"), and never read past
/// `cap` even when it grows meanwhile.
pub fn read_regular_nofollow(path: &Path, cap: u64, kind: &str) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let (f, size) = open_regular_nofollow(path)?;
    let too_large = |n: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("holds {n} bytes, more than the {cap} bytes {kind} may; not read"),
        )
    };
    if size > cap {
        return Err(too_large(size));
    }
    let mut out = Vec::with_capacity(size as usize);
    f.take(cap + 1).read_to_end(&mut out)?;
    if out.len() as u64 > cap {
        return Err(too_large(out.len() as u64));
    }
    Ok(out)
}

/// The metadata of what is at `path`, reached without following a symlink
/// anywhere on its path: a symlink at the end is described, as by
/// `symlink_metadata`, and a symlink on a directory of the path fails
/// (`ELOOP`, said as [`no_symlink`] says it) where `symlink_metadata`
/// would follow it. One `openat2(O_PATH)` and one `fstat`; a missing file
/// costs the one failed `openat2`, as `lstat` would.
pub fn metadata_nofollow(path: &Path) -> io::Result<fs::Metadata> {
    use rustix::fs::OFlags;
    let f = open_nofollow(path, OFlags::PATH | OFlags::NOFOLLOW, 0).map_err(no_symlink)?;
    f.metadata()
}

/// Whether anything is at `path` ([`metadata_nofollow`]): a symlink there
/// counts, and so does a path that cannot be reached without following
/// one, so that the read that follows refuses it with its name. Only
/// "no such file" and "not a directory" on the way are absent.
pub fn exists_nofollow(path: &Path) -> bool {
    match metadata_nofollow(path) {
        Ok(_) => true,
        Err(e) => !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)),
    }
}

/// Whether `path` is a directory reached without following a symlink
/// ([`metadata_nofollow`]).
pub fn is_dir_nofollow(path: &Path) -> bool {
    metadata_nofollow(path).is_ok_and(|m| m.is_dir())
}

/// The directory `dir`, opened for `*at` calls without following a symlink
/// anywhere on its path (see [`open_nofollow`]).
pub fn open_dir_nofollow(dir: &Path) -> io::Result<File> {
    use rustix::fs::OFlags;
    open_nofollow(dir, OFlags::RDONLY | OFlags::DIRECTORY, 0)
}

/// `path`'s parent opened as by [`open_dir_nofollow`], and its last component.
fn parent_nofollow(path: &Path) -> io::Result<(File, &std::ffi::OsStr)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: no parent directory", path.display()),
        ));
    };
    Ok((open_dir_nofollow(parent)?, name))
}

/// Remove the file `path` (a symlink there is removed, not followed), its
/// directory reached without following a symlink.
pub fn remove_nofollow(path: &Path) -> io::Result<()> {
    let (dir, name) = parent_nofollow(path)?;
    rustix::fs::unlinkat(&dir, name, rustix::fs::AtFlags::empty())?;
    Ok(())
}

/// Rename `from` to `to`, both directories reached without following a
/// symlink (what is at `to`, a symlink too, is replaced, not followed).
pub fn rename_nofollow(from: &Path, to: &Path) -> io::Result<()> {
    let (from_dir, from_name) = parent_nofollow(from)?;
    let (to_dir, to_name) = parent_nofollow(to)?;
    rustix::fs::renameat(&from_dir, from_name, &to_dir, to_name)?;
    Ok(())
}

/// Create the directory `path` with `mode` (less the umask), its parent
/// reached without following a symlink; `AlreadyExists` if a directory is
/// there, an error if anything else is (a symlink is never followed).
pub fn create_dir_nofollow(path: &Path, mode: u32) -> io::Result<()> {
    let (dir, name) = parent_nofollow(path)?;
    match rustix::fs::mkdirat(&dir, name, rustix::fs::Mode::from_raw_mode(mode)) {
        Ok(()) => Ok(()),
        Err(Errno::EXIST) => {
            let st = rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory {
                Err(io::ErrorKind::AlreadyExists.into())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a directory", path.display()),
                ))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Open `rel` (relative, no `..`) beneath the open directory `dir`,
/// following no symlink on the way or at its end: `openat2` with
/// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (no magic links either), so a
/// symlink anywhere fails with `ELOOP` and nothing outside `dir` is ever
/// reached, whatever is swapped in meanwhile. `O_CLOEXEC` is added; an
/// empty `rel` opens `dir` itself. Where the kernel has no `openat2`
/// (before 5.6) the path is walked a component at a time with
/// `O_NOFOLLOW` ([`open_beneath_walk`]), which promises the same.
pub fn open_beneath(
    dir: impl AsFd,
    rel: &Path,
    flags: rustix::fs::OFlags,
    mode: u32,
) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = flags | OFlags::CLOEXEC;
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(mode)
    } else {
        Mode::empty()
    };
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    // EAGAIN: a rename raced the lookup (openat2 asks to try again).
    for _ in 0..8 {
        match rustix::fs::openat2(dir.as_fd(), rel, flags, mode, how) {
            Ok(fd) => return Ok(File::from(fd)),
            Err(Errno::AGAIN) => continue,
            Err(Errno::NOSYS) => return open_beneath_walk(dir.as_fd(), rel, flags, mode),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Errno::AGAIN.into())
}

/// [`open_beneath`] without `openat2`: each directory of `rel` opened in
/// turn with `O_NOFOLLOW | O_DIRECTORY` from the one before, the last
/// component with `O_NOFOLLOW`. A symlink is `ELOOP` (also where
/// `O_DIRECTORY` said `ENOTDIR` of one), an absolute path or `..` is
/// `EXDEV`, as `RESOLVE_BENEATH` says it.
fn open_beneath_walk(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: rustix::fs::OFlags,
    mode: rustix::fs::Mode,
) -> io::Result<File> {
    use rustix::fs::{AtFlags, FileType, OFlags};
    use std::path::Component;
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Errno::XDEV.into());
            }
        }
    }
    let Some(last) = names.pop() else {
        return Ok(File::from(rustix::fs::openat(dir, ".", flags, mode)?));
    };
    // ENOTDIR from O_DIRECTORY | O_NOFOLLOW: ELOOP when a symlink is there.
    let why = |at: BorrowedFd<'_>, name: &std::ffi::OsStr, e: Errno| -> io::Error {
        let link = e == Errno::NOTDIR
            && rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink);
        if link { Errno::LOOP.into() } else { e.into() }
    };
    let walk = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<rustix::fd::OwnedFd> = None;
    for name in names {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        let next = rustix::fs::openat(at, name, walk, rustix::fs::Mode::empty())
            .map_err(|e| why(at, name, e))?;
        cur = Some(next);
    }
    let at = cur.as_ref().map_or(dir, |f| f.as_fd());
    rustix::fs::openat(at, last, flags | OFlags::NOFOLLOW, mode)
        .map(File::from)
        .map_err(|e| why(at, last, e))
}

/// A temp-file name nobody can guess that names its writer:
/// `.PREFIX.PID.RANDOM.tmp`, RANDOM 64 random bits in decimal.
pub fn temp_file_name(prefix: &str) -> String {
    let mut r = [0u8; 8];
    // getrandom does not fail for 8 bytes on Linux >= 3.17; should it, the
    // name is still unique with O_EXCL (the callers retry on EEXIST or fail).
    let _ = random_bytes(&mut r);
    format!(
        ".{prefix}.{}.{}.tmp",
        std::process::id(),
        u64::from_le_bytes(r)
    )
}

/// Create a new file in the open directory `dir` with a name nobody can
/// guess (`[`temp_file_name`]`): `O_CREAT|O_EXCL|O_NOFOLLOW`, so a file or
/// symlink planted under that name is never opened. Returns the file and its
/// name.
pub fn create_temp_in(dir: &File, prefix: &str, mode: u32) -> io::Result<(File, String)> {
    create_new_in(dir, || Ok(temp_file_name(prefix)), mode)
}

/// Create a new file, open for reading and writing, in the open directory
/// `dir` under the first name `name` gives that is not taken (`name` makes
/// them unguessable): `O_CREAT|O_EXCL|O_NOFOLLOW`, so a file or symlink
/// planted under that name is never opened. Returns the file and its name.
pub fn create_new_in<N: AsRef<std::ffi::OsStr>>(
    dir: &File,
    mut name: impl FnMut() -> io::Result<N>,
    mode: u32,
) -> io::Result<(File, N)> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    loop {
        let n = name()?;
        match rustix::fs::openat(dir, n.as_ref(), flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => return Ok((File::from(fd), n)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A new file in directory `dir` that has no name (`O_TMPFILE`; where the
/// file system lacks it, a file made as by [`create_temp_in`] and unlinked
/// at once), open for reading and writing: it is gone when closed, also
/// after a crash.
pub fn anonymous_file_in(dir: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let d = open_dir_nofollow(dir)?;
    let rw = OFlags::RDWR | OFlags::CLOEXEC;
    match rustix::fs::openat(&d, ".", rw | OFlags::TMPFILE, Mode::from_raw_mode(0o600)) {
        Ok(fd) => return Ok(File::from(fd)),
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL | Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    loop {
        let name = temp_file_name("spill");
        let flags = rw | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        match rustix::fs::openat(&d, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => {
                rustix::fs::unlinkat(&d, name.as_str(), rustix::fs::AtFlags::empty())?;
                return Ok(File::from(fd));
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The names in directory `dir` (without `.` and `..`), listed through a
/// descriptor opened as by [`open_dir_nofollow`]; with whether each is a
/// directory (not following a symlink). A symlink at `dir` or on its path
/// is an error that says so (as [`open_regular_nofollow`]'s).
pub fn list_dir_nofollow(dir: &Path) -> io::Result<Vec<(std::ffi::OsString, bool)>> {
    use std::os::unix::ffi::OsStringExt;
    let f = open_dir_nofollow(dir).map_err(|e| {
        // O_DIRECTORY|O_NOFOLLOW on a symlink is ENOTDIR: say which.
        let link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
        if e.raw_os_error() == Some(libc::ENOTDIR) && link {
            no_symlink(io::Error::from_raw_os_error(libc::ELOOP))
        } else {
            no_symlink(e)
        }
    })?;
    let mut out = Vec::new();
    for ent in rustix::fs::Dir::read_from(&f)? {
        let ent = ent?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match ent.file_type() {
            rustix::fs::FileType::Unknown => {
                let st =
                    rustix::fs::statat(&f, ent.file_name(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
                rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
            }
            t => t == rustix::fs::FileType::Directory,
        };
        out.push((std::ffi::OsString::from_vec(name.to_vec()), is_dir));
    }
    Ok(out)
}

/// Whether the kernel's protection `fs.NAME` is on (`protected_symlinks`:
/// symlinks in sticky world-writable directories; `protected_hardlinks`:
/// hard links to files one does not own); `None` when it cannot be read.
pub fn protected(name: &str) -> Option<bool> {
    let text = fs::read_to_string(format!("/proc/sys/fs/{name}")).ok()?;
    Some(text.trim() != "0")
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

// ------------------------------------------------------ process identity

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`
/// field 22): with the pid, it names one process, never a later one that
/// reused the pid. `None` if it is gone.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": field 3 is the first after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The 4 bytes at `addr` in process `pid`'s memory, as a native-endian
/// `u32` (`process_vm_readv(2)`: the caller must be allowed to ptrace it,
/// as root or the same user without a ptrace restriction).
pub fn read_process_u32(pid: u32, addr: u64) -> io::Result<u32> {
    use nix::sys::uio::{RemoteIoVec, process_vm_readv};
    let pid = i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let base = usize::try_from(addr).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = [0u8; 4];
    let remote = [RemoteIoVec { base, len: 4 }];
    let n = process_vm_readv(
        nix::unistd::Pid::from_raw(pid),
        &mut [io::IoSliceMut::new(&mut buf)],
        &remote,
    )
    .map_err(io::Error::from)?;
    if n != 4 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok(u32::from_ne_bytes(buf))
}

/// The name of process `pid`'s executable as the kernel keeps it
/// (`/proc/PID/comm`, at most 15 bytes). `None` if it is gone.
pub fn process_name(pid: u32) -> Option<String> {
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_string())
}

/// Every process's pid (the numeric entries of /proc).
pub fn pids() -> Vec<u32> {
    let Ok(procs) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// The effective uid process `pid` runs as (the owner of `/proc/PID`). `None`
/// if it is gone.
pub fn process_uid(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}")).ok().map(|m| m.uid())
}

/// The paths of the files process `pid` has open (its descriptors' links;
/// empty when they cannot be read: gone, or another user's).
pub fn open_files(pid: u32) -> Vec<PathBuf> {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .collect()
}

/// Random bytes from the kernel, for names that must be unique across
/// processes and machines (local packs, remote locks).
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let n = rustix::rand::getrandom(&mut *buf, rustix::rand::GetRandomFlags::empty())?;
    if n != buf.len() {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok(())
}

/// This machine's name (`uname -n`), as checkpoints record where they were
/// made; `None` if it is not UTF-8.
pub fn hostname() -> Option<String> {
    let uname = rustix::system::uname();
    uname.nodename().to_str().ok().map(str::to_string)
}

/// Raise this process's soft limit of open files to its hard limit (for
/// work that holds a descriptor per directory level of a deep tree). A
/// failure leaves the limit as it was: the work then fails with EMFILE,
/// which names itself.
pub fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    if let Some(max) = now.maximum
        && now.current.is_some_and(|c| c < max)
    {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The written part ends at the first page the predicate calls
    /// unwritten, never before `from` nor after `to`; unknown is `from`.
    #[test]
    fn the_written_back_part_ends_at_the_first_unwritten_page() {
        const P: u64 = 4096;
        for dirty in [Some(0), Some(3), Some(9), Some(10), None] {
            // Pages 0..10 of a file of 10 pages and 100 bytes; `dirty` the first unwritten one.
            let unwritten = |at: u64, end: u64| {
                Some(dirty.is_some_and(|d| (at / P..end.div_ceil(P)).contains(&d)))
            };
            let to = 10 * P + 100;
            for from in [0, 100, 3 * P, 3 * P + 5, 10 * P + 50] {
                let want = match dirty {
                    Some(d) if d * P + P > from => (d * P).max(from),
                    _ => to,
                };
                assert_eq!(
                    first_unwritten(from, to, unwritten),
                    want,
                    "{dirty:?} from {from}"
                );
            }
        }
        assert_eq!(first_unwritten(5, 9000, |_, _| None), 5, "unknown");
        assert_eq!(first_unwritten(9000, 9000, |_, _| Some(true)), 9000);
        // A real file, synced: nothing of it is dirty.
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("f")).unwrap();
        std::io::Write::write_all(&mut &f, &vec![7u8; 3 * P as usize + 10]).unwrap();
        f.sync_data().unwrap();
        if cachestat(&f, 0, 0).is_some() {
            assert_eq!(written_back_to(&f, 10, 3 * P + 10), 3 * P + 10);
        }
    }

    #[test]
    /// `open_beneath` (openat2) and its fallback walk give the same
    /// answers: a symlink anywhere, the last component too (also with
    /// `O_DIRECTORY`), is `ELOOP`; `..` and absolute paths are `EXDEV`;
    /// plain paths open, and create with `O_CREAT`.
    fn beneath_opens_refuse_symlinks_and_escapes() {
        use rustix::fs::{Mode, OFlags};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("d/e/f"), b"x").unwrap();
        fs::write(tmp.path().join("outside"), b"o").unwrap();
        std::os::unix::fs::symlink(root.join("d"), root.join("dlink")).unwrap();
        std::os::unix::fs::symlink(root.join("d/e/f"), root.join("d/flink")).unwrap();
        let dir = open_dir_nofollow(&root).unwrap();
        let rd = OFlags::RDONLY | OFlags::CLOEXEC;
        let dir_flags = rd | OFlags::DIRECTORY;
        type Open<'a> = dyn Fn(&str, OFlags) -> io::Result<File> + 'a;
        let via_openat2: &Open = &|p, f| open_beneath(&dir, Path::new(p), f, 0o644);
        let via_walk: &Open =
            &|p, f| open_beneath_walk(dir.as_fd(), Path::new(p), f, Mode::from_raw_mode(0o644));
        for open in [via_openat2, via_walk] {
            let mut got = String::new();
            std::io::Read::read_to_string(&mut open("d/e/f", rd).unwrap(), &mut got).unwrap();
            assert_eq!(got, "x");
            assert!(open("", dir_flags).is_ok());
            assert!(open("d/e", dir_flags).is_ok());
            for (p, f) in [
                ("dlink/e/f", rd),
                ("d/flink", rd),
                ("dlink", dir_flags),
                ("dlink", rd),
                ("dlink/new", rd | OFlags::CREATE | OFlags::WRONLY),
            ] {
                let e = open(p, f).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{p}");
            }
            for p in ["../outside", "d/../../outside", "/etc/passwd"] {
                let e = open(p, rd).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EXDEV), "{p}");
            }
            let e = open("d/missing/f", rd).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
            let e = open("d/e/f/g", rd).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
        }
        open_beneath(
            &dir,
            Path::new("d/new1"),
            OFlags::WRONLY | OFlags::CREATE,
            0o600,
        )
        .unwrap();
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC;
        open_beneath_walk(
            dir.as_fd(),
            Path::new("d/new2"),
            flags,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert!(root.join("d/new1").is_file() && root.join("d/new2").is_file());
        assert!(!root.join("d/e/new").exists());
    }

    #[test]
    fn nofollow_opens_refuse_a_symlink_anywhere_on_the_path() {
        use rustix::fs::OFlags;
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        fs::write(real.join("f"), b"x").unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        std::os::unix::fs::symlink(real.join("f"), real.join("flink")).unwrap();
        // Without O_CREAT a mode is dropped (openat2 refuses one).
        assert!(open_nofollow(&real.join("f"), OFlags::RDWR, 0o600).is_ok());
        for p in [tmp.path().join("link/f"), real.join("flink")] {
            let e = open_nofollow(&p, OFlags::RDONLY, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{}", p.display());
        }
        let e = open_nofollow(
            &tmp.path().join("link/new"),
            OFlags::WRONLY | OFlags::CREATE,
            0o600,
        )
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert!(!real.join("new").exists());
        assert!(remove_nofollow(&tmp.path().join("link/f")).is_err());
        assert!(real.join("f").exists());
        // The link itself is removed, not what it points to.
        remove_nofollow(&real.join("flink")).unwrap();
        assert!(real.join("f").exists());
        let dir = open_dir_nofollow(&real).unwrap();
        let (_, a) = create_temp_in(&dir, "t", 0o600).unwrap();
        let (_, b) = create_temp_in(&dir, "t", 0o600).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn stats_describe_a_last_symlink_and_follow_none_on_the_way() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        fs::write(real.join("f"), b"xyz").unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        std::os::unix::fs::symlink(real.join("f"), real.join("flink")).unwrap();
        assert_eq!(metadata_nofollow(&real.join("f")).unwrap().len(), 3);
        assert!(is_dir_nofollow(&real));
        // A last symlink is described, as lstat does, never followed.
        let m = metadata_nofollow(&real.join("flink")).unwrap();
        assert!(m.file_type().is_symlink());
        assert!(!is_dir_nofollow(&tmp.path().join("link")));
        // Through a symlinked directory: refused, where symlink_metadata
        // and exists() would follow the link and answer for the file.
        let through = tmp.path().join("link/f");
        assert!(fs::symlink_metadata(&through).is_ok());
        let e = metadata_nofollow(&through).unwrap_err();
        assert!(e.to_string().contains("is a symlink"), "{e}");
        // "There" for exists_nofollow, so that the read that follows
        // names the link; only a missing file is absent.
        assert!(exists_nofollow(&through));
        assert!(exists_nofollow(&real.join("flink")));
        assert!(!exists_nofollow(&real.join("missing")));
        assert!(!exists_nofollow(&real.join("f/below")));
    }

    #[test]
    fn regular_reads_refuse_links_fifos_devices_and_more_than_their_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        fs::write(d.join("f"), b"0123456789").unwrap();
        assert_eq!(
            read_regular_nofollow(&d.join("f"), 10, "a test file").unwrap(),
            b"0123456789"
        );
        let (_, size) = open_regular_nofollow(&d.join("f")).unwrap();
        assert_eq!(size, 10);
        let e = read_regular_nofollow(&d.join("f"), 9, "a test file").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string()
                .contains("holds 10 bytes, more than the 9 bytes a test file may"),
            "{e}"
        );
        std::os::unix::fs::symlink("/dev/zero", d.join("zero")).unwrap();
        std::os::unix::fs::symlink(d.join("f"), d.join("flink")).unwrap();
        for p in ["zero", "flink"] {
            let e = read_regular_nofollow(&d.join(p), 1 << 20, "a test file").unwrap_err();
            assert!(e.to_string().starts_with("is a symlink"), "{p}: {e}");
        }
        // A FIFO nobody writes to: refused at once, not waited on.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let e = read_regular_nofollow(&d.join("fifo"), 1 << 20, "a test file").unwrap_err();
        assert!(e.to_string().contains("not a regular file (a FIFO)"), "{e}");
        let e = open_regular_nofollow(Path::new("/dev/null")).unwrap_err();
        assert!(e.to_string().contains("(a character device)"), "{e}");
        let e = open_regular_nofollow(d).unwrap_err();
        assert!(e.to_string().contains("(a directory)"), "{e}");
        let e = open_regular_nofollow(&d.join("missing")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = list_dir_nofollow(&d.join("zero")).unwrap_err();
        assert!(e.to_string().starts_with("is a symlink"), "{e}");
    }

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape_mount_path("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape_mount_path("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape_mount_path("/x\\"), PathBuf::from("/x\\"));
    }

    #[test]
    fn cold_reads_return_exactly_the_bytes_asked_for_cached_or_not() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        let data: Vec<u8> = (0..3 * 4096 + 100u32).map(|i| (i % 251) as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        drop(f);
        let len = data.len() as u64;
        let spans = [
            (0, 1),
            (4095, 2),
            (100, 8192),
            (4096, 4096),
            (len - 5, 5),
            (0, data.len()),
        ];
        for cached in [true, false] {
            let f = File::open(&path).unwrap();
            if !cached {
                rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
            }
            let before = cached_pages(&f, 0, len);
            for (at, n) in spans {
                let got = read_cold(&f, at, n).unwrap();
                assert_eq!(
                    got,
                    data[at as usize..at as usize + n],
                    "{at}+{n}, cached {cached}"
                );
            }
            let err = read_cold(&f, len - 5, 6).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
            // Read past the cache: nothing it read stays there. (tmpfs
            // keeps every page, and an old kernel does not say.)
            match (cached, before) {
                (false, Some(0)) => assert_eq!(cached_pages(&f, 0, len), Some(0)),
                (false, other) => eprintln!(
                    "{}: {other:?} pages cached after DONTNEED; direct reads not checked",
                    path.display()
                ),
                (true, _) => {}
            }
            // The descriptor's flags are as they were: a buffered read of
            // odd size at an odd offset still works.
            let mut b = [0u8; 3];
            std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, 7).unwrap();
            assert_eq!(b, data[7..10]);
        }
    }

    #[test]
    fn try_lock_sees_another_open_files_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        assert!(try_lock(&a, Lock::Exclusive).unwrap());
        assert!(!try_lock(&b, Lock::Shared).unwrap());
        drop(a);
        assert!(try_lock(&b, Lock::Shared).unwrap());
        lock(&b, Lock::Exclusive).unwrap();
    }

    /// Poll `cond` every 10 ms, for at most 30 s.
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_zombie_main_thread_with_live_threads_is_still_alive() {
        // The main thread leaves with pthread_exit; another thread lives on
        // until told (its stdin closes).
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes, sys, threading\n\
                 threading.Thread(target=sys.stdin.read).start()\n\
                 ctypes.CDLL(None).pthread_exit(None)",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let pid = child.id();
        eventually("the main thread is a zombie", || is_zombie(pid));
        assert!(threads(pid) >= 2);
        assert!(pid_alive(pid), "its other thread still holds its files");
        drop(child.stdin.take());
        eventually("the last thread is gone", || threads(pid) <= 1);
        assert!(!pid_alive(pid), "an unreaped zombie has exited");
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
