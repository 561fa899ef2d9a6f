//! The fork view: a fork served read-write, on inode numbers ([`View`]).
//!
//! [`journal::Fork`] does the POSIX work (atomic check, journal append and
//! apply). This layer adds what belongs to the mount:
//!
//! - new entries: the umask, the requester's uid/gid, and setgid directories
//!   (a new entry takes the directory's group; a new directory also inherits
//!   `S_ISGID`);
//! - names over 255 bytes fail with `ENAMETOOLONG` on every operation,
//!   lookups included;
//! - opens: `FUSE_OPEN` is answered (it is how the `chattr` flags refuse an
//!   open for writing, as ext4's `may_open`: the kernel cannot, FUSE never
//!   sets its `i_flags`) with a handle that carries nothing and
//!   `FOPEN_KEEP_CACHE` (the page cache kept across opens), and so each
//!   last close sends a `FUSE_RELEASE`, answered at once; `flush` answers
//!   `ENOSYS` (the kernel stops sending it), so a close waits for nothing;
//! - file lifetimes: handles play no part. What
//!   keeps an unlinked file alive is the kernel's reference to it: the FUSE
//!   lookup count of every file entry it was given (lookup, create, mknod,
//!   link, readdirplus), less what it forgot. The fork keeps that count as
//!   the file's open count ([`Fork::open_file`] per entry given,
//!   [`Fork::release_many`] per forget), so it holds such a file while the
//!   count is not 0, and the view keeps no table of its own.
//!   The kernel keeps an inode, and so its count, while any process has it
//!   open, and forgets an unlinked one as soon as none has;
//! - `O_APPEND` writes go to [`Fork::append`] (the journal's end, which is
//!   the kernel's: every change of a size comes through this mount, and the
//!   kernel serialises appends to one inode), like every write through the
//!   page cache;
//! - with the writeback cache (`--writeback-cache`,
//!   [`ForkView::with_writeback_cache`]; off by default) writes wait in the
//!   kernel's page cache and arrive as writeback, on close (every close
//!   writes its file back), fsync, syncfs, memory pressure or after 30 s.
//!   The kernel then owns a file's size, mtime and ctime: every write lands
//!   at the offset it carries (`O_APPEND` included: the kernel placed it),
//!   writeback keeps the file's times ([`Fork::write_back`]) and the kernel
//!   sends its own in a `setattr` after the data, with its ctime.
//!   `SEEK_DATA`/`SEEK_HOLE` are left to the kernel (it does not write a
//!   file back before asking, so the fork's extent map may lag). A write
//!   that must clear setuid/setgid is sent at once (write-through) with the
//!   kill flag, as without the cache. See docs/journal.md for what this
//!   changes in what a killed daemon keeps;
//! - directory listings: a snapshot per open directory, taken at `opendir` and
//!   on a rewind (offset 0), so entries that do not change are listed exactly
//!   once even while the directory changes;
//! - directories removed while the kernel holds them (an `rmdir`, or a
//!   rename over them): the fork drops a removed directory at once, but a
//!   process may still have it open, and `fstat` on it must answer (nlink 0,
//!   size 0, as ext4; xfstests generic/035). The view keeps the last
//!   attributes of each such directory until the kernel forgets it (it
//!   forgets an inode all at once, when it evicts it; fork inode numbers are
//!   never reused, so a late forget cannot hit another directory);
//! - provenance (`journal::ops`): every change is made on behalf of its
//!   requester ([`Requesters`]: pid, uid, `/proc/PID/comm`, the run). A
//!   request without one (pid 0: writeback under `--writeback-cache`) is
//!   attributed to the last process that created, truncated or wrote the
//!   file through this mount (an open is not recorded, so "the last one
//!   that opened it for writing" is known only when it did one of those);
//! - xattr names outside the kernel's namespaces (`EOPNOTSUPP`, as ext4);
//! - xattr buffers: size-0 probes and `ERANGE`; flag and mode translation
//!   (rename, setxattr, fallocate, mknod).
//!
//! Permission checks are the kernel's (the mount always has
//! `default_permissions`, and `FUSE_POSIX_ACL`, so the kernel also reads the
//! ACL xattrs; keeping mode and ACLs in step and inheriting default ACLs is
//! [`Fork`]'s, with `store::acl`: this layer passes the umask through and
//! says whether the caller is in a file's group, for the setgid rule of an
//! ACL change). Setuid/setgid: the fork asks for `FUSE_HANDLE_KILLPRIV_V2`
//! (so the kernel need not ask for `security.capability` before every
//! write), which leaves clearing them to the view, as ext4 clears them: on
//! the writes the kernel flags, on `fallocate`, `copy_file_range` and
//! truncates by a caller without `CAP_FSETID` ([`Caller::has_fsetid`]: no
//! flag reaches us there), and on chowns ([`ForkView::kill_priv`], checked
//! by `tests/fork_killpriv.rs` and `tests/fork_mount.rs`).
//!
//! A new group-executable file asked for setgid in a setgid directory by a
//! creator outside the directory's group loses `S_ISGID`, as the kernel's
//! `mode_strip_sgid` drops it (the groups are read from `/proc/PID/status`,
//! [`Caller::in_group`]; a request without a pid counts as outside).
//! Limits, honestly: the setgid check reads the parent's attributes just
//! before the create, not atomically with it.
//! Device nodes are recorded (type and `rdev`) but cannot be opened: the
//! mount is `nodev`, so the kernel refuses with `EACCES`. `lseek`
//! `SEEK_DATA`/`SEEK_HOLE` is answered from the fork's extent map, as ext4
//! would ([`ext4`]); POSIX locks are left to the kernel (local
//! locks). `copy_file_range` shares committed data instead of copying it
//! (`journal::Fork::copy_range`), so `cp` of a large base file is a
//! metadata operation.

use std::collections::HashMap;

use crate::store::intmap::IntMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::view::{
    self, AddItem, Caller, Capability, DirItem, Entry, NO_ID, Opened, Readdir, Shutdown, View,
    WriteCtx, XattrReply,
};
use super::{FsError, Result};
use crate::journal::ops::{Who, on_behalf_of};
use crate::journal::{self, Fork, NewNode};
use crate::store::Kind;
use crate::store::model::flags as model_flags;
use crate::store::model::{
    AtimeMode, AtimePolicy, Attr, DirEntry, Fallocate, NAME_MAX, Posix, RenameMode, SetAttr,
    StatFs, XattrMode, ext4,
};

/// How long the kernel may cache entries (names found, and names absent)
/// and attributes. Every change of a fork comes through this mount: each one
/// replies with fresh attributes or makes the kernel drop what it cached (a
/// write drops the size and times, an unlink the link count, a create the
/// negative entry), and the daemon changes nothing behind the kernel's back
/// (a commit moves no name and changes no attribute) but for `storefs
/// checkout` into the mounted fork, after which the daemon tells the kernel
/// to forget the names and directories it changed ([`super::Invalidator`]).
/// So nothing the kernel caches goes stale, and it keeps it as long as a
/// checkpoint's.
const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// What a fork asks of the kernel: readdirplus fills the attribute cache
/// while listing; a symlink's target never changes; the view clears
/// setuid/setgid where the kernel leaves it to the file system (so the
/// kernel need not ask for `security.capability` before each write). POSIX ACLs make the
/// kernel check permissions against the ACL xattrs (and validate what
/// setfacl sets); keeping mode and ACLs in step and inheriting default ACLs
/// is the fork's (`store::acl`), so the umask comes to us instead of being
/// applied (no umask under a default ACL). File handles resolve by inode
/// number ([`Capability::ExportSupport`]): a fork's numbers are never
/// reused, and a commit (an unmount's too) keeps them (its inode map), so
/// a handle names one inode for the fork's life (see `lookup`). Idmapped
/// mounts ([`Capability::AllowIdmap`]): a new inode's owner is the ids its
/// creating request carries, which the kernel has mapped already (see
/// `new_node`), a chown's ids likewise; the requests without ids
/// ([`super::view::NO_ID`]) take the process's where they need one
/// (provenance, the setgid group rule).
const CAPABILITIES: &[Capability] = &[
    Capability::ReaddirPlus,
    Capability::CacheSymlinks,
    Capability::KillPrivV2,
    Capability::PosixAclViewUmask,
    Capability::ExportSupport,
    Capability::AllowIdmap,
];

/// [`CAPABILITIES`] and the writeback cache (`--writeback-cache`).
const WRITEBACK_CAPABILITIES: &[Capability] = &[
    Capability::ReaddirPlus,
    Capability::CacheSymlinks,
    Capability::KillPrivV2,
    Capability::PosixAclViewUmask,
    Capability::ExportSupport,
    Capability::AllowIdmap,
    Capability::WritebackCache,
];

/// How long a shutdown waits for the kernel to drop its caches
/// ([`ForkView::drop_kernel_caches`]).
const SHUTDOWN_DROP_WAIT: Duration = Duration::from_secs(2);

/// A directory listing taken at opendir: ".", ".." and the entries.
struct Listing {
    entries: Vec<DirEntry>,
}

/// A fork, served read-write.
pub struct ForkView {
    fork: Arc<Fork>,
    /// Open directories' listings by handle.
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    /// Served with the kernel's writeback cache ([`ForkView::with_writeback_cache`]).
    writeback: bool,
    /// Removed directories the kernel may still hold, by inode: what
    /// `getattr` answers for them until they are forgotten (module docs).
    removed_dirs: Mutex<HashMap<u64, Attr>>,
    /// Who makes each change.
    requesters: Requesters,
    /// The mount's kernel, told to forget a file's attributes when they
    /// change without a reply that carries them ([`ForkView::kill_priv`]).
    kernel: std::sync::OnceLock<super::Invalidator>,
    /// When reads update atime (the mount's atime options; default never).
    atime: AtimePolicy,
    /// Opens reach the daemon and the `chattr` flags refuse them as ext4
    /// does (`-o open_checks`); else zero-message opens, unless an atime
    /// option needs them served ([`View::open`]).
    open_checks: bool,
}

/// The requesters of changes, as the journal records them.
#[derive(Default)]
struct Requesters {
    /// By pid: its `/proc/PID/comm`, kept open (a read gives the command as
    /// it is now, after an exec too, and fails once the process is gone, so
    /// a reused pid is opened anew), and the last requester made of it.
    procs: Mutex<IntMap<u32, (File, Arc<Who>)>>,
    /// By inode: the last requester that created, truncated or wrote the
    /// file (who a write without a requester is attributed to), in a
    /// table of [`WRITERS`] slots indexed by inode number: a file's slot is
    /// taken over by the file [`WRITERS`] inodes on, so a write without a
    /// requester to a file written that many files ago is unknown's.
    writers: Mutex<Vec<(u64, Arc<Who>)>>,
}

/// Bound of [`Requesters::procs`] (emptied when full).
const MAX_PROCS: usize = 256;
/// Slots of [`Requesters::writers`].
const WRITERS: usize = 1 << 14;

impl Requesters {
    /// The requester of a change by `c` (to file `data_of`'s data, if
    /// given): a request without a process (pid 0) is the file's last
    /// writer's, or unknown.
    fn who(&self, c: &Caller, run: &str, data_of: Option<u64>) -> Arc<Who> {
        if c.pid == 0 {
            let writers = self.writers.lock();
            return data_of
                .and_then(|ino| writers.get(ino as usize % WRITERS))
                .filter(|(ino, _)| Some(*ino) == data_of)
                .map(|(_, who)| who.clone())
                .unwrap_or_default();
        }
        let who = self.of_process(c, run);
        if let Some(ino) = data_of {
            self.wrote(ino, who.clone());
        }
        who
    }

    /// `who` changed file `ino`'s data: its last writer.
    fn wrote(&self, ino: u64, who: Arc<Who>) {
        let mut writers = self.writers.lock();
        if writers.is_empty() {
            writers.resize(WRITERS, (0, Arc::default()));
        }
        let slot = &mut writers[ino as usize % WRITERS];
        if slot.0 != ino || !Arc::ptr_eq(&slot.1, &who) {
            *slot = (ino, who);
        }
    }

    /// Process `c.pid` as it is now. Never fails: a command that cannot be
    /// read is empty.
    fn of_process(&self, c: &Caller, run: &str) -> Arc<Who> {
        let mut procs = self.procs.lock();
        let mut buf = [0u8; 64];
        let read = |f: &File, buf: &mut [u8]| f.read_at(buf, 0).ok().filter(|&n| n > 0);
        let mut n = procs.get(&c.pid).and_then(|(f, _)| read(f, &mut buf));
        if n.is_none() {
            procs.remove(&c.pid);
            if let Ok(f) = File::open(format!("/proc/{}/comm", c.pid)) {
                n = read(&f, &mut buf);
                if procs.len() >= MAX_PROCS {
                    procs.clear();
                }
                procs.insert(c.pid, (f, Arc::default()));
            }
        }
        let command = n.map_or(&[][..], |n| buf[..n].trim_ascii_end());
        // A request without ids (an idmapped-capable mount's, but for the
        // creating ones): the process's fsuid, read once per process and
        // command (a setuid without an exec keeps the one read first).
        let known = procs
            .get(&c.pid)
            .filter(|(_, last)| last.pid == c.pid && last.command == command)
            .map(|(_, last)| last.uid);
        let uid = match (c.uid, known) {
            (NO_ID, Some(uid)) => uid,
            (NO_ID, None) => c.fs_ids().0,
            (uid, _) => uid,
        };
        let fresh = || Who {
            pid: c.pid,
            uid,
            command: command.to_vec(),
            run: run.as_bytes().to_vec(),
        };
        match procs.get_mut(&c.pid) {
            Some((_, last)) => {
                if last.uid != uid || last.pid != c.pid || last.command != command {
                    *last = Arc::new(fresh());
                }
                last.clone()
            }
            None => Arc::new(fresh()),
        }
    }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Posix::NameTooLong.into());
    }
    Ok(())
}

/// Attributes as the kernel may cache them ([`TTL`]).
fn entry(attr: Attr) -> Entry {
    Entry { attr, ttl: TTL }
}

impl ForkView {
    pub fn new(fork: Arc<Fork>) -> ForkView {
        ForkView {
            fork,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            writeback: false,
            removed_dirs: Mutex::new(HashMap::new()),
            requesters: Requesters::default(),
            kernel: std::sync::OnceLock::new(),
            atime: AtimePolicy::default(),
            open_checks: false,
        }
    }

    /// This view with reads updating atime as `policy` says (the mount's
    /// atime options, [`AtimePolicy::from_options`]).
    pub fn with_atime(self, policy: AtimePolicy) -> ForkView {
        ForkView {
            atime: policy,
            ..self
        }
    }

    /// This view with opens served and checked against the `chattr` flags
    /// (`-o open_checks`, [`View::open`]).
    pub fn with_open_checks(self, open_checks: bool) -> ForkView {
        ForkView {
            open_checks,
            ..self
        }
    }

    /// A read of `ino` by `c`: its atime as the mount's policy says. A
    /// failure is logged, not returned: the read itself succeeded, as on
    /// Linux, where an atime that cannot be written fails no read.
    fn accessed(&self, c: &Caller, ino: u64) {
        if self.atime.mode == AtimeMode::Never {
            return;
        }
        if let Err(e) = self.on_behalf(c, None, || self.fork.touch_atime(ino, self.atime)) {
            tracing::warn!(ino, error = %e, "atime not updated");
        }
    }

    /// Run `f` (changes) on behalf of `c`; `data_of`: the file whose data
    /// it changes.
    fn on_behalf<T>(&self, c: &Caller, data_of: Option<u64>, f: impl FnOnce() -> T) -> T {
        let who = self.requesters.who(c, self.fork.run(), data_of);
        on_behalf_of(who, f)
    }

    /// A view that asks for the kernel's writeback cache: writes wait in the
    /// page cache until the kernel writes them back (see the module docs).
    pub fn with_writeback_cache(fork: Arc<Fork>) -> ForkView {
        ForkView {
            writeback: true,
            ..ForkView::new(fork)
        }
    }

    fn listing(&self, ino: u64) -> Result<Listing> {
        let (parent, children) = self.fork.readdir(ino)?;
        let mut entries = Vec::with_capacity(children.len() + 2);
        entries.push(DirEntry {
            name: b".".to_vec(),
            ino,
            kind: Kind::Dir,
        });
        entries.push(DirEntry {
            name: b"..".to_vec(),
            ino: parent,
            kind: Kind::Dir,
        });
        entries.extend(children);
        Ok(Listing { entries })
    }

    /// The kernel was given an entry for `attr`: for a file, one more open
    /// in the fork (see the module docs). `opened`: the fork already counted
    /// this one when it made (or opened) the file.
    fn referenced(&self, attr: &Attr, opened: bool) -> Result<()> {
        if attr.kind != Kind::File || opened {
            return Ok(());
        }
        Ok(self.fork.open_file(attr.ino)?)
    }

    /// The mode `ino` takes when a write, truncate or chown clears its
    /// setuid, and its setgid when group-executable or when `c` is outside
    /// the file's group (the kernel's `setattr_should_drop_sgid`; a chown
    /// passes `None`: the group test is left out there); `None` when that
    /// changes nothing. A directory keeps both; a node that is not a file
    /// loses them on a chown only.
    fn cleared_mode(&self, ino: u64, chown: bool, c: Option<&Caller>) -> Result<Option<u32>> {
        let a = self.fork.getattr(ino)?;
        let applies = match a.kind {
            Kind::File => true,
            Kind::Dir => false,
            _ => chown,
        };
        let mut perm = a.perm & !libc::S_ISUID;
        // (The group test reads /proc: only when there is a setgid to clear.)
        if a.perm & libc::S_ISGID != 0
            && (a.perm & libc::S_IXGRP != 0 || c.is_some_and(|c| !c.in_group(a.gid)))
        {
            perm &= !libc::S_ISGID;
        }
        Ok((applies && perm != a.perm).then_some(perm))
    }

    /// Before a change of `ino`'s data by `c` (a write, `copy_file_range`
    /// into it, `fallocate`, a truncate): clear its setuid, and its setgid
    /// when group-executable, through the journal (a mode change like a
    /// chmod's), as ext4 does (the kernel's `should_remove_suid`) for a
    /// caller without `CAP_FSETID`. `flagged`: the kernel said the caller
    /// lacks it (`FUSE_WRITE_KILL_SUIDGID`); else the view asks
    /// [`Caller::has_fsetid`].
    fn kill_priv(&self, c: &Caller, ino: u64, flagged: bool) -> Result<()> {
        if let Some(perm) = self.cleared_mode(ino, false, Some(c))?
            && (flagged || !c.has_fsetid())
        {
            let kill = SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            self.fork.setattr(ino, &kill)?;
            // A write's (or fallocate's, copy_file_range's) reply carries
            // no attributes, and the kernel does not drop the mode it
            // cached: without this `stat` shows the bits until it expires.
            if let Some(kernel) = self.kernel.get()
                && let Err(e) = kernel.forget_attributes(ino)
            {
                tracing::warn!(ino, error = %e, "cannot have the kernel forget a cleared setuid");
            }
        }
        Ok(())
    }

    /// After a shutdown: have the kernel drop the attributes and pages it
    /// holds of every inode the fork has in its table (an inode it parked
    /// keeps its attributes cached; the kernel may hold those of a parked
    /// directory). From a thread of its own: the kernel may wait for a read
    /// in flight on a page it drops, and the thread serving this request
    /// may be the one to answer it (a ring serves one request at a time).
    /// Waited for up to [`SHUTDOWN_DROP_WAIT`], so that the ioctl usually
    /// returns with the caches gone.
    fn drop_kernel_caches(&self) {
        let Some(kernel) = self.kernel.get().cloned() else {
            return;
        };
        let inodes = self.fork.resident_inodes();
        let (done, wait) = std::sync::mpsc::channel();
        let dropped = crate::sys::spawn_unsignalled("storefs-shutdown", move || {
            for ino in inodes {
                if let Err(e) = kernel.forget_cached(ino) {
                    tracing::debug!(ino, error = %e, "the kernel kept what it caches after the shutdown");
                }
            }
            let _ = done.send(());
        });
        match dropped {
            Ok(_) => {
                if wait.recv_timeout(SHUTDOWN_DROP_WAIT).is_err() {
                    tracing::info!("the kernel still drops its caches after the shutdown");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the thread that drops the kernel's caches at shutdown")
            }
        }
    }

    /// Have the kernel of the mount that serves this view forget what it
    /// cached when this view changes it unasked (set once, at mount).
    pub fn tell_kernel(&self, kernel: super::Invalidator) {
        let _ = self.kernel.set(kernel);
    }

    /// The directory `name` in `parent` if there is one (about to be
    /// removed by an rmdir or a rename over it).
    fn dir_at(&self, parent: u64, name: &[u8]) -> Option<Attr> {
        self.fork
            .lookup(parent, name)
            .ok()
            .filter(|a| a.kind == Kind::Dir)
    }

    /// Directory `dir` was removed: keep what `getattr` answers for it
    /// while the kernel holds it, as ext4 leaves a removed directory (no
    /// link, empty, changed now).
    fn removed_dir(&self, mut dir: Attr) {
        dir.nlink = 0;
        dir.size = 0;
        dir.blocks = 0;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        dir.ctime_ns = now.map_or(dir.ctime_ns, |d| {
            i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
        });
        self.removed_dirs.lock().insert(dir.ino, dir);
    }

    /// An entry of `ino` as the kernel sees it, counted.
    fn entry_of(&self, attr: Attr) -> Result<Entry> {
        self.referenced(&attr, false)?;
        Ok(entry(attr))
    }

    /// A new entry in `parent` as the caller asks for it: `mode` and the
    /// caller's umask (which the fork applies unless `parent` has a default
    /// ACL), the caller as owner, the caller's group, or the directory's when
    /// it is setgid (and then a new directory is setgid too).
    fn new_node(&self, parent: u64, kind: Kind, mode: u32, c: &Caller) -> Result<NewNode<'static>> {
        let mut perm = mode & 0o7777;
        let dir = self.fork.getattr(parent)?;
        if dir.kind != Kind::Dir {
            return Err(Posix::NotDir.into());
        }
        let sgid = libc::S_ISGID;
        let gid = if dir.perm & sgid == 0 {
            c.gid
        } else {
            if kind == Kind::Dir {
                perm |= sgid;
            } else if perm & (sgid | libc::S_IXGRP) == sgid | libc::S_IXGRP && !c.in_group(dir.gid)
            {
                // The kernel's `mode_strip_sgid`: a group-executable file
                // made setgid in a setgid directory by a creator outside
                // its group (and without CAP_FSETID) loses the bit.
                perm &= !sgid;
            }
            dir.gid
        };
        Ok(NewNode {
            umask: c.umask,
            ..NewNode::new(kind, perm, c.uid, gid)
        })
    }
}

impl ForkView {
    /// [`View::setattr`] (setuid/setgid cleared as it says).
    fn set_attr(&self, c: &Caller, ino: u64, attrs: &SetAttr) -> Result<Entry> {
        let chown = attrs.uid.is_some() || attrs.gid.is_some();
        if (attrs.size.is_some() || chown)
            && attrs.perm.is_none()
            && let Some(perm) = self.cleared_mode(ino, chown, (!chown).then_some(c))?
            && (chown || !c.has_fsetid())
        {
            let attrs = SetAttr {
                perm: Some(perm),
                ..attrs.clone()
            };
            return Ok(entry(self.fork.setattr(ino, &attrs)?));
        }
        Ok(entry(self.fork.setattr(ino, attrs)?))
    }
}

impl View for ForkView {
    fn capabilities(&self) -> &'static [Capability] {
        if self.writeback {
            WRITEBACK_CAPABILITIES
        } else {
            CAPABILITIES
        }
    }

    fn negative_ttl(&self, _parent: u64) -> Option<Duration> {
        Some(TTL)
    }

    // ---------------------------------------------------------------- reads

    /// `"."` in any inode and `".."` in a directory are how the kernel
    /// resolves a file handle whose inode it forgot (export support): `"."`
    /// answers the inode itself, brought back if parked, and "absent" (the
    /// kernel's `ESTALE`) once it is gone, or unlinked: the kernel holds
    /// every open file, so an unlinked one it asks for is one whose last
    /// forget is on its way, and a handle must not open it again.
    fn lookup(&self, _: &Caller, parent: u64, name: &[u8]) -> Result<Entry> {
        check_name(name)?;
        if name == b"." {
            let attr = self.fork.getattr(parent)?;
            if attr.nlink == 0 {
                return Err(Posix::NotFound.into());
            }
            return self.entry_of(attr);
        }
        self.entry_of(self.fork.lookup(parent, name)?)
    }

    /// The kernel dropped `nlookup` references to `ino`: the last one lets an
    /// unlinked file go.
    fn forget(&self, ino: u64, nlookup: u64) {
        self.removed_dirs.lock().remove(&ino);
        self.fork.release_many(ino, nlookup);
    }

    /// A directory removed while the kernel held it answers what it was
    /// left as (module docs).
    fn getattr(&self, _: &Caller, ino: u64) -> Result<Entry> {
        match self.fork.getattr(ino) {
            Err(journal::Error::Posix(Posix::NotFound)) => match self.removed_dirs.lock().get(&ino)
            {
                Some(a) => Ok(entry(a.clone())),
                None => Err(Posix::NotFound.into()),
            },
            r => Ok(entry(r?)),
        }
    }

    fn readlink(&self, _: &Caller, ino: u64) -> Result<Vec<u8>> {
        Ok(self.fork.readlink(ino)?)
    }

    /// Under an atime option, the file's atime is updated after the read
    /// ([`ForkView::accessed`]).
    fn read(&self, c: &Caller, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let data = self.fork.read(ino, offset, size)?;
        self.accessed(c, ino);
        Ok(data)
    }

    /// From the fork's extent map. Not under the writeback cache: the kernel
    /// does not write a file back before it asks, so the map may miss data
    /// and size the kernel still holds. `ENOSYS` then makes the kernel answer
    /// every later `SEEK_DATA`/`SEEK_HOLE` itself, from its own size (all
    /// data, the hole at the end).
    fn seek(&self, _: &Caller, ino: u64, offset: i64, whence: ext4::Seek) -> Result<Option<u64>> {
        if self.writeback {
            return Err(FsError::NotNeeded);
        }
        Ok(self.fork.seek(ino, offset, whence)?)
    }

    fn statfs(&self, _: &Caller) -> Result<StatFs> {
        Ok(self.fork.statfs()?)
    }

    fn getxattr(&self, _: &Caller, ino: u64, name: &[u8], size: u32) -> Result<XattrReply> {
        view::check_xattr_name(name)?;
        let value = self.fork.getxattr(ino, name)?;
        view::sized(value, size)
    }

    fn listxattr(&self, _: &Caller, ino: u64, size: u32) -> Result<XattrReply> {
        let names = self.fork.listxattr(ino)?;
        view::sized(view::xattr_list(names.iter().map(Vec::as_slice)), size)
    }

    /// Not sent with `default_permissions` (the kernel checks the mode bits
    /// and ACLs).
    fn access(&self, _: &Caller, _ino: u64, _mask: i32) -> Result<()> {
        Ok(())
    }

    // ------------------------------------------------------------ directories

    /// Open directory `ino`: snapshot its listing; returns the handle.
    fn opendir(&self, _: &Caller, ino: u64) -> Result<Opened> {
        let listing = self.listing(ino)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, Arc::new(listing));
        Ok(Opened::Handle {
            fh,
            keep_cache: false,
        })
    }

    /// Offset 0 takes a fresh listing (and, under an atime option, updates
    /// the directory's atime once: [`ForkView::accessed`]). With `plus`,
    /// entries gone since the listing was taken are skipped.
    fn readdir(&self, c: &Caller, ino: u64, at: Readdir, add: &mut AddItem<'_>) -> Result<()> {
        let Readdir { fh, offset, plus } = at;
        let known = self.dirs.lock().get(&fh).cloned();
        let listing = match known {
            Some(l) if offset != 0 => l,
            _ => {
                let l = Arc::new(self.listing(ino)?);
                self.dirs.lock().insert(fh, l.clone());
                self.accessed(c, ino);
                l
            }
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, e) in listing.entries.iter().enumerate().skip(start) {
            let attr = if plus {
                match self.fork.getattr(e.ino) {
                    Ok(a) => Some(entry(a)),
                    Err(journal::Error::Posix(Posix::NotFound)) => continue,
                    Err(err) => return Err(err.into()),
                }
            } else {
                None
            };
            let counted = attr.as_ref().map(|a| a.attr.clone());
            let item = DirItem {
                next_offset: i as u64 + 1,
                name: &e.name,
                ino: e.ino,
                kind: e.kind,
                entry: attr,
            };
            if add(item) {
                break;
            }
            // Sent: the kernel holds a reference ("." and ".." are
            // directories, never counted).
            if let Some(a) = counted {
                let _ = self.referenced(&a, false);
            }
        }
        Ok(())
    }

    fn releasedir(&self, _: &Caller, fh: u64) {
        self.dirs.lock().remove(&fh);
    }

    // ---------------------------------------------------------------- files

    /// By default zero-message opens: `ENOSYS`, after which the kernel
    /// sends no open on this connection again, so an open costs no round
    /// trip (ten `git commit`s took 2.2-2.5x as long with every open served,
    /// docs/design.md, "Opens on forks"); the `chattr` flags then refuse a
    /// write, not the open. With `-o open_checks` or an atime option, opens
    /// are served: refused by what the file's `chattr` flags refuse
    /// (`EPERM`: an immutable file opened with write access or `O_TRUNC`,
    /// an append-only one with write access but no `O_APPEND`, or
    /// `O_TRUNC`; [`Fork::guard_open`]), as ext4's `may_open` does: the
    /// kernel cannot, FUSE never sets its `i_flags`. Otherwise a handle that carries
    /// nothing (fh 0; the kernel's lookup count keeps a file alive, see the
    /// module docs) with `FOPEN_KEEP_CACHE`: every change comes through the
    /// mount, so the page cache stays valid across opens. Under an atime
    /// option, without `FOPEN_KEEP_CACHE`: the kernel drops the file's
    /// cached pages at each open, so the reads after it reach the daemon
    /// and update atime (a read served from the page cache would not).
    /// Truncates on `O_TRUNC` (the kernel sends that as a setattr instead:
    /// the fork does not ask for `FUSE_ATOMIC_O_TRUNC`).
    fn open(&self, c: &Caller, ino: u64, flags: i32) -> Result<Opened> {
        let served = self.open_checks || self.atime.mode != AtimeMode::Never;
        if served {
            self.fork.guard_open(ino, flags)?;
        }
        if flags & libc::O_TRUNC != 0 && flags & libc::O_ACCMODE != libc::O_RDONLY {
            let attr = self.fork.getattr(ino)?;
            if attr.kind == Kind::File && attr.size != 0 {
                let truncate = SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                };
                self.setattr(c, ino, &truncate)?;
            }
        }
        if !served {
            return Ok(Opened::Stateless);
        }
        Ok(Opened::Handle {
            fh: 0,
            keep_cache: self.atime.mode == AtimeMode::Never,
        })
    }

    fn create(
        &self,
        c: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        _flags: i32,
    ) -> Result<(Entry, Opened)> {
        check_name(name)?;
        let node = self.new_node(parent, Kind::File, mode, c)?;
        let who = self.requesters.who(c, self.fork.run(), None);
        let attr = on_behalf_of(who.clone(), || self.fork.make(parent, name, &node, true))?;
        // Its writer, for writeback without a requester.
        self.requesters.wrote(attr.ino, who);
        self.referenced(&attr, true)?;
        Ok((entry(attr), Opened::Stateless))
    }

    /// `O_TMPFILE`: a create without a name ([`Fork::tmpfile`]), mode,
    /// umask, owner and setgid rules as a create's. The file is open in the
    /// fork for the kernel's reference, as a file unlinked while open is
    /// (module docs); a `link` may name it (`linkat` with `AT_EMPTY_PATH`
    /// or through `/proc/self/fd`), until the next commit.
    fn tmpfile(&self, c: &Caller, parent: u64, mode: u32, _flags: i32) -> Result<(Entry, Opened)> {
        let node = self.new_node(parent, Kind::File, mode, c)?;
        let who = self.requesters.who(c, self.fork.run(), None);
        let attr = on_behalf_of(who.clone(), || self.fork.tmpfile(parent, &node))?;
        self.requesters.wrote(attr.ino, who);
        Ok((entry(attr), Opened::Stateless))
    }

    /// An `O_APPEND` write lands at the journal's end of file (the kernel's
    /// too); page-cache writeback (mmap) always carries its page's own offset.
    /// Under the writeback cache every write carries its offset (the kernel
    /// owns the size and places appends itself), and writeback keeps the
    /// file's times ([`Fork::write_back`]: the kernel sends its own after).
    /// A write the kernel flags (`FUSE_WRITE_KILL_SUIDGID`: buffered,
    /// `O_DIRECT`, or written through past the writeback cache by a caller
    /// without `CAP_FSETID`) clears setuid/setgid first ([`Self::kill_priv`]).
    fn write(&self, c: &Caller, ino: u64, data: &[u8], how: WriteCtx) -> Result<u32> {
        let len = u32::try_from(data.len()).map_err(|_| Posix::Invalid("write too large"))?;
        self.on_behalf(c, Some(ino), || {
            if how.kill_suidgid {
                self.kill_priv(c, ino, true)?;
            }
            if self.writeback && how.writeback {
                self.fork.write_back(ino, how.offset, data)?;
            } else if how.flags & libc::O_APPEND != 0 && !how.writeback && !self.writeback {
                self.fork.append(ino, data)?;
            } else {
                self.fork.write(ino, how.offset, data)?;
            }
            Ok(len)
        })
    }

    /// Committed data is shared, the rest copied inside the daemon (the
    /// kernel drops the destination's cached pages itself). The destination
    /// loses setuid/setgid as on a write: the kernel sends no flag here, so
    /// [`Caller::has_fsetid`] decides.
    fn copy_file_range(
        &self,
        c: &Caller,
        from: (u64, u64),
        to: (u64, u64),
        len: u64,
    ) -> Result<u64> {
        self.on_behalf(c, Some(to.0), || {
            if len != 0 {
                self.kill_priv(c, to.0, false)?;
            }
            Ok(self.fork.copy_range(from.0, from.1, to.0, to.1, len)?)
        })
    }

    fn sync(&self, _: &Caller) -> Result<()> {
        Ok(self.fork.sync()?)
    }

    /// Every mode clears setuid/setgid as ext4's `fallocate` does (no flag
    /// comes with it: [`Caller::has_fsetid`] decides).
    fn fallocate(&self, c: &Caller, ino: u64, offset: u64, len: u64, how: Fallocate) -> Result<()> {
        self.on_behalf(c, Some(ino), || {
            self.kill_priv(c, ino, false)?;
            Ok(self.fork.fallocate(ino, offset, len, how)?)
        })
    }

    // ------------------------------------------------------------ metadata

    /// A truncate by a caller without `CAP_FSETID` ([`Caller::has_fsetid`]),
    /// and a chown of anything but a directory by anyone, clear
    /// setuid/setgid too, in the same step: with `FUSE_HANDLE_KILLPRIV_V2`
    /// the kernel leaves both to us (fuser does not pass its
    /// `FATTR_KILL_SUIDGID` flag, which says the same).
    fn setattr(&self, c: &Caller, ino: u64, attrs: &SetAttr) -> Result<Entry> {
        // A truncate changes the data; the kernel's times after writeback
        // (no requester) are the file's last writer's.
        let data = (attrs.size.is_some() || c.pid == 0).then_some(ino);
        self.on_behalf(c, data, || self.set_attr(c, ino, attrs))
    }

    /// An access ACL also sets the mode ([`Fork::setxattr_as`]); whether the
    /// caller keeps a setgid bit depends on its groups.
    fn setxattr(
        &self,
        c: &Caller,
        ino: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        view::check_xattr_name(name)?;
        let in_group = |gid| c.in_group(gid);
        self.on_behalf(c, None, || {
            Ok(self.fork.setxattr_as(ino, name, value, mode, &in_group)?)
        })
    }

    fn removexattr(&self, c: &Caller, ino: u64, name: &[u8]) -> Result<()> {
        view::check_xattr_name(name)?;
        self.on_behalf(c, None, || Ok(self.fork.removexattr(ino, name)?))
    }

    fn get_flags(&self, _: &Caller, ino: u64) -> Result<u32> {
        Ok(self.fork.flags(ino)?)
    }

    /// As the kernel's `vfs_fileattr_set` (which checks the same before it
    /// asks: these are for a caller that reaches the daemon another way):
    /// the owner, or a caller with `CAP_FOWNER`, may change the flags, and
    /// setting or clearing `i` or `a` takes `CAP_LINUX_IMMUTABLE` too; both
    /// capabilities read from the caller's `/proc/PID/status`
    /// ([`Caller::capable`]; uid 0 when it cannot be read).
    fn set_flags(&self, c: &Caller, ino: u64, flags: u32) -> Result<()> {
        const CAP_FOWNER: u32 = 3;
        let old = self.fork.flags(ino)?;
        let owner = self.fork.getattr(ino)?.uid;
        let (uid, _) = c.fs_ids();
        if uid != owner && !c.capable(CAP_FOWNER) {
            return Err(Posix::Perm.into());
        }
        if (old ^ flags) & model_flags::PROTECTED != 0 && !c.has_linux_immutable() {
            return Err(Posix::Perm.into());
        }
        self.on_behalf(c, None, || self.fork.set_flags(ino, flags))?;
        // The ioctl's reply carries no attributes, and the kernel keeps the
        // ctime it cached: without this `stat` shows the old one.
        if let Some(kernel) = self.kernel.get()
            && let Err(e) = kernel.forget_attributes(ino)
        {
            tracing::warn!(ino, error = %e, "cannot have the kernel forget a chattr's ctime");
        }
        Ok(())
    }

    /// `FS_IOC_SHUTDOWN` (xfstests' `godown`), by a caller with
    /// `CAP_SYS_ADMIN` (`EPERM` otherwise, as on xfs and ext4): the fork
    /// goes down as [`Fork::shut_down`] says, synced first unless the flag
    /// is `NOLOGFLUSH`; from then on the dispatcher answers `EIO`
    /// ([`View::is_shut_down`]) and the daemon does not commit on unmount.
    /// What the kernel caches of the fork is dropped ([`Self::drop_kernel_caches`]),
    /// so that a `stat` or a read of a page it holds asks, and fails, too.
    /// A failed sync is logged: the fork is shut down all the same and the
    /// ioctl succeeds (xfs does not report it either).
    fn shut_down(&self, c: &Caller, flag: &dyn Fn() -> Option<u32>) -> Result<()> {
        const CAP_SYS_ADMIN: u32 = 21;
        if !c.capable(CAP_SYS_ADMIN) {
            return Err(Posix::Perm.into());
        }
        let how = Shutdown::from_flag(flag())?;
        if self.fork.is_shut_down() {
            return Ok(());
        }
        if let Err(e) = self.fork.shut_down(how.flushes()) {
            tracing::warn!(error = %e, ?how, "the fork's journal could not be synced or cut at shutdown");
        }
        self.drop_kernel_caches();
        Ok(())
    }

    fn is_shut_down(&self) -> bool {
        self.fork.is_shut_down()
    }

    // ------------------------------------------------------------ names

    /// Regular files, fifos, sockets and device nodes; the fork keeps `rdev`
    /// for devices only. The kernel checks `CAP_MKNOD` before it asks. A
    /// device node cannot be opened here (the mount is `nodev`), so recording
    /// it grants nothing.
    fn mknod(&self, c: &Caller, parent: u64, name: &[u8], mode: u32, rdev: u64) -> Result<Entry> {
        check_name(name)?;
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            libc::S_IFDIR => return Err(Posix::Invalid("mknod of a directory").into()),
            _ => return Err(Posix::Invalid("mknod file type").into()),
        };
        let rdev = match kind {
            Kind::CharDev | Kind::BlockDev => rdev,
            _ => 0,
        };
        let node = NewNode {
            rdev,
            ..self.new_node(parent, kind, mode, c)?
        };
        let file = kind == Kind::File;
        let attr = self.on_behalf(c, None, || self.fork.make(parent, name, &node, file))?;
        self.referenced(&attr, file)?;
        Ok(entry(attr))
    }

    fn mkdir(&self, c: &Caller, parent: u64, name: &[u8], mode: u32) -> Result<Entry> {
        check_name(name)?;
        let node = self.new_node(parent, Kind::Dir, mode, c)?;
        let attr = self.on_behalf(c, None, || self.fork.make(parent, name, &node, false))?;
        Ok(entry(attr))
    }

    /// Mode 0777 whatever the umask, as on Linux.
    fn symlink(&self, c: &Caller, parent: u64, name: &[u8], target: &[u8]) -> Result<Entry> {
        check_name(name)?;
        let c = Caller { umask: 0, ..*c };
        let node = NewNode {
            target: Some(target),
            ..self.new_node(parent, Kind::Symlink, 0o777, &c)?
        };
        let attr = self.on_behalf(&c, None, || self.fork.make(parent, name, &node, false))?;
        Ok(entry(attr))
    }

    fn link(&self, c: &Caller, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Entry> {
        check_name(new_name)?;
        let attr = self.on_behalf(c, None, || self.fork.link(ino, new_parent, new_name))?;
        self.entry_of(attr)
    }

    fn unlink(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        check_name(name)?;
        Ok(self.on_behalf(c, None, || self.fork.unlink(parent, name))?)
    }

    fn rmdir(&self, c: &Caller, parent: u64, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let dir = self.dir_at(parent, name);
        self.on_behalf(c, None, || self.fork.rmdir(parent, name))?;
        if let Some(d) = dir {
            self.removed_dir(d);
        }
        Ok(())
    }

    /// None, `RENAME_NOREPLACE` or `RENAME_EXCHANGE` (`RENAME_WHITEOUT`
    /// is [`View::rename_whiteout`]; other combinations are `EINVAL`).
    fn rename(
        &self,
        c: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        check_name(name)?;
        check_name(new_name)?;
        // A directory renamed over goes (not when exchanged, nor when it is
        // the one renamed).
        let over = match mode {
            RenameMode::Exchange => None,
            _ => self.dir_at(new_parent, new_name),
        };
        self.on_behalf(c, None, || {
            self.fork.rename(parent, name, new_parent, new_name, mode)
        })?;
        if let Some(d) = over
            && self.fork.getattr(d.ino).is_err()
        {
            self.removed_dir(d);
        }
        Ok(())
    }

    fn rename_whiteout(
        &self,
        c: &Caller,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        noreplace: bool,
    ) -> Result<()> {
        self.whiteout_rename(c, (parent, name), (new_parent, new_name), noreplace)
    }
}

impl ForkView {
    /// [`View::rename_whiteout`]: the whiteout is owned as a new node
    /// (the caller's ids, the directory's group when it is setgid); the
    /// ids come with the request (the kernel sends them with a whiteout
    /// rename, as with a create), else the process's.
    fn whiteout_rename(
        &self,
        c: &Caller,
        (parent, name): (u64, &[u8]),
        (new_parent, new_name): (u64, &[u8]),
        noreplace: bool,
    ) -> Result<()> {
        check_name(name)?;
        check_name(new_name)?;
        let (uid, gid) = c.fs_ids();
        let owner = Caller { uid, gid, ..*c };
        let node = self.new_node(parent, Kind::CharDev, 0, &owner)?;
        let over = match noreplace {
            true => None,
            false => self.dir_at(new_parent, new_name),
        };
        self.on_behalf(c, None, || {
            self.fork.rename_whiteout(
                parent, name, new_parent, new_name, noreplace, node.uid, node.gid,
            )
        })?;
        if let Some(d) = over
            && self.fork.getattr(d.ino).is_err()
        {
            self.removed_dir(d);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::dispatch::{Handle, Reply};
    use crate::fs::errno;
    use crate::ingest::{self, SnapshotOptions};
    use crate::store::Store;
    use crate::store::model::ROOT_INO;
    use fuser::{Errno, FopenFlags};

    use crate::fs::testing::{self, ROOT, fh, plus};

    const USER: &Caller = &Caller {
        uid: 1000,
        gid: 1000,
        pid: 0,
        umask: 0,
    };

    /// A fork of a checkpoint of {a, b, c, file}, served without a kernel.
    fn serve() -> (tempfile::TempDir, ForkView) {
        let (tmp, fork) = fork_of(&["a", "b", "c", "file"], None);
        (tmp, ForkView::new(fork))
    }

    /// Fork `t` of a checkpoint of `files` (paths; each file holds the
    /// path's first component: `a` holds "a", `d/f` holds "d"), opened with
    /// the default cache or `cache` bytes.
    fn fork_of(files: &[&str], cache: Option<usize>) -> (tempfile::TempDir, Arc<Fork>) {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        for name in files {
            let path = src.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, name.split('/').next().unwrap()).unwrap();
        }
        let store = Arc::new(Store::open_or_create(&tmp.path().join("store")).unwrap());
        let snap = ingest::snapshot(&store, &src, &SnapshotOptions::default()).unwrap();
        let base = store
            .write_checkpoint(&testing::checkpoint(snap.root, vec![], "base".into()))
            .unwrap();
        Fork::create(&store, "t", &base).unwrap();
        let fork = match cache {
            Some(bytes) => Fork::open_sized(store, "t", bytes),
            None => Fork::open(store, "t"),
        };
        (tmp, Arc::new(fork.unwrap()))
    }

    fn code(r: Result<impl std::fmt::Debug>) -> Errno {
        errno(&r.expect_err("should fail"))
    }

    /// `c` with umask `umask`.
    fn with_umask(c: &Caller, umask: u32) -> Caller {
        Caller { umask, ..*c }
    }

    /// A write at offset 0 that came through an `O_APPEND` handle, as
    /// page-cache writeback or not.
    fn appending(writeback: bool) -> WriteCtx {
        WriteCtx {
            offset: 0,
            flags: libc::O_WRONLY | libc::O_APPEND,
            writeback,
            kill_suidgid: false,
        }
    }

    fn names(fs: &ForkView, fh: u64, offset: u64) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        fs.readdir(ROOT, ROOT_INO, plus(fh, offset), &mut |item| {
            out.push((item.next_offset, item.name.to_vec()));
            false
        })
        .unwrap();
        out
    }

    /// Opens carry no state, and the kernel's references keep an unlinked
    /// file: it goes with the last forget, not before, whichever entry
    /// (lookup, create, readdirplus, link) gave the kernel its references.
    #[test]
    fn kernel_references_keep_unlinked_files() {
        let (_tmp, fs) = serve();
        let ino = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        assert_eq!(fs.open(ROOT, ino, libc::O_RDWR).unwrap(), Opened::Stateless);
        // A second reference, from a listing with attributes.
        assert!(names(&fs, 1, 0).iter().any(|(_, n)| n == b"file"));
        fs.unlink(ROOT, ROOT_INO, b"file").unwrap();
        fs.forget(ino, 1);
        assert_eq!(
            fs.read(ROOT, ino, 0, 10).unwrap(),
            b"file",
            "one reference left"
        );
        fs.forget(ino, 1);
        assert!(fs.read(ROOT, ino, 0, 10).is_err(), "gone with the last one");

        // Made by create (already open in the fork), linked, unlinked twice.
        let (e, o) = fs
            .create(ROOT, ROOT_INO, b"new", 0o644, libc::O_RDWR)
            .unwrap();
        assert_eq!(o, Opened::Stateless);
        let new = e.attr.ino;
        fs.link(ROOT, new, ROOT_INO, b"new2").unwrap();
        fs.write(ROOT, new, b"data", appending(false)).unwrap();
        fs.unlink(ROOT, ROOT_INO, b"new").unwrap();
        fs.unlink(ROOT, ROOT_INO, b"new2").unwrap();
        fs.forget(new, 1);
        assert_eq!(fs.read(ROOT, new, 0, 10).unwrap(), b"data");
        fs.forget(new, 1);
        assert!(fs.read(ROOT, new, 0, 10).is_err());
        // A forget of what was never referenced changes nothing.
        let a = fs.lookup(ROOT, ROOT_INO, b"a").unwrap().attr.ino;
        fs.forget(a, 5);
        fs.forget(12345, 1);
        assert_eq!(fs.read(ROOT, a, 0, 10).unwrap(), b"a");
        // Names absent from a fork are cached as absent: the lookup answers
        // a negative entry (node id 0 with a TTL), not ENOENT, which the
        // kernel would ask again at every access (the fork's NotFound is the
        // journal's, and once went out as a plain error).
        assert!(matches!(
            crate::fs::dispatch::look_up(&fs, ROOT, ROOT_INO, b"absent"),
            Ok(crate::fs::dispatch::Reply::Absent(_))
        ));
    }

    /// File handles as the kernel resolves them once it forgot the inode
    /// (export support): `"."` in a file or a directory answers it by
    /// number (a parked file brought back), `".."` a directory's parent; a
    /// file unlinked, and one gone with its last reference, and a removed
    /// directory are absent (the kernel's `ESTALE`); a new file never takes
    /// a number given before.
    #[test]
    fn export_handles_resolve_by_number() {
        // Each d/f holds "d". No cache: every directory but the last two
        // loaded is parked.
        let (_tmp, fork) = fork_of(&["d/f", "e/f", "g/f"], Some(0));
        let fs = ForkView::new(fork.clone());
        let dot = |ino| crate::fs::dispatch::look_up(&fs, ROOT, ino, b".");
        let d = fs.lookup(ROOT, ROOT_INO, b"d").unwrap().attr.ino;
        let f = fs.lookup(ROOT, d, b"f").unwrap().attr;
        for other in [&b"e"[..], b"g"] {
            let dir = fs.lookup(ROOT, ROOT_INO, other).unwrap().attr.ino;
            fs.lookup(ROOT, dir, b"f").unwrap();
        }
        let (_, parked, unparked) = fork.table();
        assert!(parked > 0, "d's file is parked");
        assert_eq!(fs.lookup(ROOT, f.ino, b".").unwrap().attr, f);
        assert_eq!(fork.table().2, unparked + 1, "d brought back");
        assert_eq!(fs.read(ROOT, f.ino, 0, 10).unwrap(), b"d");
        assert_eq!(fs.lookup(ROOT, d, b".").unwrap().attr.ino, d);
        assert_eq!(fs.lookup(ROOT, d, b"..").unwrap().attr.ino, ROOT_INO);
        assert_eq!(fs.lookup(ROOT, ROOT_INO, b"..").unwrap().attr.ino, ROOT_INO);

        // Unlinked: absent at once, though the kernel still holds it.
        let (x, _) = fs
            .create(ROOT, ROOT_INO, b"x", 0o644, libc::O_RDWR)
            .unwrap();
        let x = x.attr.ino;
        assert!(matches!(dot(x), Ok(Reply::Entry(..))));
        fs.unlink(ROOT, ROOT_INO, b"x").unwrap();
        assert!(matches!(dot(x), Ok(Reply::Absent(_))), "unlinked");
        fs.forget(x, 2);
        assert!(matches!(dot(x), Ok(Reply::Absent(_))), "gone");
        let sub = fs.mkdir(ROOT, ROOT_INO, b"sub", 0o755).unwrap().attr.ino;
        fs.rmdir(ROOT, ROOT_INO, b"sub").unwrap();
        assert!(matches!(dot(sub), Ok(Reply::Absent(_))), "removed dir");
        assert!(matches!(dot(12345), Ok(Reply::Absent(_))), "never given");
        let (y, _) = fs
            .create(ROOT, ROOT_INO, b"y", 0o644, libc::O_RDWR)
            .unwrap();
        assert!(y.attr.ino > sub, "numbers are not reused");
    }

    /// In a setgid directory (group 2000) a new group-executable setgid
    /// file keeps `S_ISGID` only for a creator in the group or root, as the
    /// kernel's `mode_strip_sgid` decides; a directory always inherits it.
    #[test]
    fn setgid_directory_strips_sgid_from_a_creator_outside_its_group() {
        let (_tmp, fs) = serve();
        let dir = fs.mkdir(ROOT, ROOT_INO, b"shared", 0o777).unwrap().attr.ino;
        let set = SetAttr {
            perm: Some(0o2777),
            gid: Some(2000),
            ..SetAttr::default()
        };
        fs.setattr(ROOT, dir, &set).unwrap();
        let make = |c: &Caller, name: &[u8], mode| {
            fs.create(c, dir, name, mode, libc::O_RDWR).unwrap().0.attr
        };
        let outsider = make(USER, b"out", 0o2755);
        assert_eq!(
            (outsider.perm, outsider.gid),
            (0o755, 2000),
            "S_ISGID dropped"
        );
        let not_exec = make(USER, b"noexec", 0o2644);
        assert_eq!(not_exec.perm, 0o2644, "kept: not group-executable");
        let root = make(ROOT, b"root", 0o2755);
        assert_eq!(root.perm, 0o2755, "kept: root");
        let member = Caller { gid: 2000, ..*USER };
        assert_eq!(
            make(&member, b"member", 0o2755).perm,
            0o2755,
            "kept: in the group"
        );
        let sub = fs.mkdir(USER, dir, b"sub", 0o755).unwrap().attr;
        assert_eq!(sub.perm, 0o2755, "a new directory inherits S_ISGID");
    }

    /// `FS_IOC_GETFLAGS`/`SETFLAGS` as the kernel sends them for `lsattr`
    /// and `chattr` (restricted, a 4-byte int), through the dispatcher.
    fn ioctl(fs: &ForkView, c: &Caller, ino: u64, cmd: u32, arg: &[u8]) -> Result<Vec<u8>, Errno> {
        let req = crate::fs::dispatch::Request {
            unique: 1,
            ino,
            caller: *c,
            op: crate::fs::dispatch::Op::Ioctl {
                unrestricted: false,
                cmd,
                arg: 0,
                in_data: arg,
                out_size: if arg.is_empty() { 4 } else { 0 },
            },
        };
        match crate::fs::dispatch::dispatch(fs, req)? {
            Reply::Ioctl(d) => Ok(d),
            other => panic!("{other:?}"),
        }
    }

    /// `FS_IOC_SHUTDOWN` through the dispatcher: `EPERM` without
    /// `CAP_SYS_ADMIN` (nothing changes); by root (no pid: the flag cannot
    /// be read, so LOGFLUSH) the fork goes down, and from then on every
    /// request that reads or changes it is `EIO`, the chattr ioctls too,
    /// while forget, release, statfs and a second shutdown are answered.
    #[test]
    fn a_shutdown_takes_cap_sys_admin_and_then_every_request_is_eio() {
        use crate::fs::dispatch::{Op, Request, dispatch};
        const GOINGDOWN: u32 = 0x8004_587d;
        const GETFLAGS: u32 = 0x8008_6601;
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        assert_eq!(
            ioctl(&fs, USER, ROOT_INO, GOINGDOWN, &[]),
            Err(Errno::EPERM)
        );
        assert!(!fs.is_shut_down());
        assert_eq!(fs.read(ROOT, file, 0, 10).unwrap(), b"file");
        // A directory open before, listed from its snapshot without the fork.
        let dir = fh(fs.opendir(ROOT, ROOT_INO).unwrap());
        assert_eq!(ioctl(&fs, ROOT, ROOT_INO, GOINGDOWN, &[]), Ok(vec![]));
        assert!(fs.is_shut_down());
        let ask = |ino, op| {
            let caller = *ROOT;
            dispatch(
                &fs,
                Request {
                    unique: 2,
                    ino,
                    caller,
                    op,
                },
            )
        };
        let eio = |r: Result<Reply, Errno>| matches!(r, Err(e) if e == Errno::EIO);
        assert!(eio(ask(ROOT_INO, Op::Lookup { name: b"file" })), "lookup");
        assert!(eio(ask(file, Op::GetAttr)), "getattr");
        assert!(
            eio(ask(
                file,
                Op::Read {
                    offset: 0,
                    size: 10
                }
            )),
            "read"
        );
        assert!(eio(ask(ROOT_INO, Op::OpenDir)), "opendir");
        // What the view answers without asking the fork is EIO too.
        let at = crate::fs::view::Readdir {
            fh: dir,
            offset: 1,
            plus: false,
        };
        let add = Box::new(|_: DirItem<'_>| false);
        assert!(
            eio(ask(ROOT_INO, Op::ReadDir { at, add })),
            "readdir of a listing"
        );
        assert!(
            eio(ask(
                file,
                Op::Open {
                    flags: libc::O_RDONLY
                }
            )),
            "open"
        );
        assert!(eio(ask(file, Op::Access { mask: libc::R_OK })), "access");
        assert!(eio(ask(file, Op::Sync)), "fsync");
        assert!(
            eio(ask(
                ROOT_INO,
                Op::MkDir {
                    name: b"d",
                    mode: 0o755,
                    umask: 0
                }
            )),
            "mkdir"
        );
        assert!(eio(ask(ROOT_INO, Op::Unlink { name: b"a" })), "unlink");
        assert_eq!(
            ioctl(&fs, ROOT, file, GETFLAGS, &[]),
            Err(Errno::EIO),
            "lsattr"
        );
        assert!(
            matches!(ask(ROOT_INO, Op::StatFs), Ok(Reply::StatFs(_))),
            "statfs"
        );
        assert!(matches!(
            ask(file, Op::Forget { nlookup: 1 }),
            Ok(Reply::Nothing)
        ));
        assert!(matches!(ask(file, Op::Release), Ok(Reply::Empty)));
        assert_eq!(
            ioctl(&fs, ROOT, ROOT_INO, GOINGDOWN, &[]),
            Ok(vec![]),
            "again"
        );
        assert_eq!(
            ioctl(&fs, USER, ROOT_INO, GOINGDOWN, &[]),
            Err(Errno::EPERM)
        );
    }

    /// `FUSE_OPEN` through the dispatcher: the open's answer, or its errno.
    fn open_req(fs: &ForkView, ino: u64, flags: i32) -> Result<Handle, Errno> {
        let req = crate::fs::dispatch::Request {
            unique: 1,
            ino,
            caller: *ROOT,
            op: crate::fs::dispatch::Op::Open { flags },
        };
        match crate::fs::dispatch::dispatch(fs, req)? {
            Reply::Opened(h) => Ok(h),
            other => panic!("{other:?}"),
        }
    }

    /// generic/079: a fork answers `FUSE_OPEN` (not `ENOSYS`, which would
    /// stop the kernel sending it) with a handle that keeps the page cache,
    /// and refuses at the open what ext4's `may_open` refuses: an immutable
    /// file with write access or `O_TRUNC`, an append-only one with write
    /// access but no `O_APPEND`, or with `O_TRUNC`. Reading opens pass.
    #[test]
    fn opens_refuse_what_the_chattr_flags_refuse() {
        use libc::{O_APPEND, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
        // By default opens are zero-message: the kernel is told ENOSYS and
        // sends none again; the flags then refuse the write, not the open.
        let (_tmp, fs) = serve();
        let frozen = fs.lookup(ROOT, ROOT_INO, b"b").unwrap().attr.ino;
        fs.set_flags(ROOT, frozen, model_flags::IMMUTABLE).unwrap();
        assert_eq!(open_req(&fs, frozen, O_WRONLY), Err(Errno::ENOSYS));
        // With -o open_checks, served and checked.
        let (_tmp, fork) = fork_of(&["a", "b", "c", "file"], None);
        let fs = ForkView::new(fork).with_open_checks(true);
        let ino = |name: &[u8]| fs.lookup(ROOT, ROOT_INO, name).unwrap().attr.ino;
        let (plain, frozen, log) = (ino(b"a"), ino(b"b"), ino(b"c"));
        fs.set_flags(ROOT, frozen, model_flags::IMMUTABLE).unwrap();
        fs.set_flags(ROOT, log, model_flags::APPEND).unwrap();
        let kept = Handle {
            fh: 0,
            flags: FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
        };
        let all = [
            O_RDONLY,
            O_WRONLY,
            O_RDWR,
            O_RDONLY | O_TRUNC,
            O_WRONLY | O_TRUNC,
            O_WRONLY | O_APPEND,
            O_RDWR | O_APPEND,
            O_WRONLY | O_APPEND | O_TRUNC,
        ];
        for flags in all {
            assert_eq!(open_req(&fs, plain, flags), Ok(kept), "{flags:#o}");
            let frozen_ok = flags == O_RDONLY;
            let log_ok = flags & O_TRUNC == 0 && (flags == O_RDONLY || flags & O_APPEND != 0);
            for (ino, ok) in [(frozen, frozen_ok), (log, log_ok)] {
                let want = if ok { Ok(kept) } else { Err(Errno::EPERM) };
                assert_eq!(open_req(&fs, ino, flags), want, "{ino} {flags:#o}");
            }
        }
        // Refused opens changed nothing; cleared, the file opens for writing.
        assert_eq!(fs.read(ROOT, frozen, 0, 10).unwrap(), b"b");
        fs.set_flags(ROOT, frozen, 0).unwrap();
        assert_eq!(open_req(&fs, frozen, O_WRONLY), Ok(kept));
    }

    #[test]
    fn chattr_takes_the_owner_and_for_i_and_a_the_capability() {
        const GET: u32 = 0x8008_6601;
        const SET: u32 = 0x4008_6602;
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        let to_user = SetAttr {
            uid: Some(USER.uid),
            ..SetAttr::default()
        };
        fs.setattr(ROOT, file, &to_user).unwrap();
        let a = fs.lookup(ROOT, ROOT_INO, b"a").unwrap().attr.ino;
        let flags = |ino| ioctl(&fs, ROOT, ino, GET, &[]).unwrap();
        assert_eq!(flags(file), 0u32.to_le_bytes());
        // The owner sets d and A; not i or a (no CAP_LINUX_IMMUTABLE).
        let set = |c, ino, f: u32| ioctl(&fs, c, ino, SET, &f.to_le_bytes());
        set(USER, file, 0x40 | 0x80).unwrap();
        assert_eq!(flags(file), 0xc0u32.to_le_bytes());
        assert_eq!(set(USER, file, 0x10).unwrap_err(), Errno::EPERM);
        assert_eq!(set(USER, file, 0xc0 | 0x20).unwrap_err(), Errno::EPERM);
        // Not the owner: nothing.
        assert_eq!(set(USER, a, 0x40).unwrap_err(), Errno::EPERM);
        // Root sets i; then the owner cannot clear it, nor change another flag.
        set(ROOT, file, 0x10).unwrap();
        assert_eq!(set(USER, file, 0).unwrap_err(), Errno::EPERM);
        assert_eq!(flags(file), 0x10u32.to_le_bytes());
        let w = WriteCtx {
            offset: 0,
            flags: libc::O_WRONLY,
            writeback: false,
            kill_suidgid: false,
        };
        assert_eq!(code(fs.write(ROOT, file, b"x", w)), Errno::EPERM);
        // Flags storefs does not keep, and other ioctls.
        assert_eq!(set(ROOT, a, 0x8).unwrap_err(), Errno::EOPNOTSUPP);
        assert_eq!(ioctl(&fs, ROOT, a, 0x5401, &[]).unwrap_err(), Errno::ENOTTY);
        // The xflags form: FS_XFLAG_APPEND.
        let mut x = [0u8; 28];
        x[..4].copy_from_slice(&0x10u32.to_le_bytes());
        ioctl(&fs, ROOT, a, 0x401c_5820, &x).unwrap();
        assert_eq!(flags(a), 0x20u32.to_le_bytes());
    }

    #[test]
    fn refusals_map_to_their_errno() {
        let (_tmp, fs) = serve();
        let long = vec![b'x'; 256];
        assert_eq!(code(fs.lookup(ROOT, ROOT_INO, &long)), Errno::ENAMETOOLONG);
        assert_eq!(
            code(fs.create(ROOT, ROOT_INO, &long, 0o644, libc::O_RDWR)),
            Errno::ENAMETOOLONG
        );
        assert_eq!(
            code(fs.rename(ROOT, ROOT_INO, b"a", ROOT_INO, &long, RenameMode::Replace)),
            Errno::ENAMETOOLONG
        );
        // Flags outside the modes: dispatch's tests (decoded there).
        assert_eq!(
            code(fs.rename(ROOT, ROOT_INO, b"a", ROOT_INO, b"b", RenameMode::NoReplace)),
            Errno::EEXIST
        );
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        // Offsets the kernel never sends, but a hostile one could.
        let at = |offset| WriteCtx {
            offset,
            flags: libc::O_RDWR,
            writeback: false,
            kill_suidgid: false,
        };
        assert_eq!(
            code(fs.write(ROOT, file, b"xyz", at(u64::MAX - 1))),
            Errno::EFBIG
        );
        assert_eq!(
            code(fs.write(ROOT, file, b"x", at(i64::MAX as u64))),
            Errno::EFBIG
        );
        assert_eq!(
            code(fs.fallocate(ROOT, file, u64::MAX, 2, Fallocate::Extend)),
            Errno::EFBIG
        );
        assert_eq!(
            code(fs.setxattr(
                ROOT,
                file,
                b"user.k",
                &vec![0; 64 * 1024 + 1],
                XattrMode::Any
            )),
            Errno::E2BIG
        );
        assert_eq!(
            code(fs.getxattr(ROOT, file, b"user.none", 0)),
            Errno::NO_XATTR
        );
        let dir = libc::S_IFDIR | 0o700;
        assert_eq!(code(fs.mknod(ROOT, ROOT_INO, b"d", dir, 0)), Errno::EINVAL);
        assert_eq!(code(fs.unlink(ROOT, ROOT_INO, b"missing")), Errno::ENOENT);
        assert_eq!(code(fs.mkdir(ROOT, ROOT_INO, b"a", 0o755)), Errno::EEXIST);
        assert_eq!(code(fs.read(ROOT, 12345, 0, 10)), Errno::ENOENT);
        // Still serving.
        assert_eq!(fs.read(ROOT, file, 0, 100).unwrap(), b"file");
    }

    #[test]
    fn xattr_names_outside_a_namespace_are_refused_as_on_ext4() {
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        for name in [&b"nonamespace"[..], b"bogus.k", b"User.k", b"userk"] {
            assert_eq!(
                code(fs.setxattr(ROOT, file, name, b"v", XattrMode::Any)),
                Errno::EOPNOTSUPP
            );
            assert_eq!(code(fs.getxattr(ROOT, file, name, 0)), Errno::EOPNOTSUPP);
            assert_eq!(code(fs.removexattr(ROOT, file, name)), Errno::EOPNOTSUPP);
        }
        for name in [&b"user."[..], b"trusted.", b"security."] {
            assert_eq!(
                code(fs.setxattr(ROOT, file, name, b"v", XattrMode::Any)),
                Errno::EINVAL
            );
            assert_eq!(code(fs.getxattr(ROOT, file, name, 0)), Errno::EINVAL);
        }
        for name in [&b"user.k"[..], b"trusted.k", b"security.k"] {
            fs.setxattr(ROOT, file, name, b"v", XattrMode::Any).unwrap();
            assert_eq!(
                fs.getxattr(ROOT, file, name, 0).unwrap(),
                XattrReply::Size(1)
            );
            fs.removexattr(ROOT, file, name).unwrap();
        }
    }

    #[test]
    fn listing_is_stable_while_the_directory_changes() {
        let (_tmp, fs) = serve();
        let fh = fh(fs.opendir(ROOT, ROOT_INO).unwrap());
        let all = names(&fs, fh, 0);
        let listed: Vec<&[u8]> = all.iter().map(|(_, n)| n.as_slice()).collect();
        assert_eq!(listed, [&b"."[..], b"..", b"a", b"b", b"c", b"file"]);
        // Resume after "a" once "a" is gone and "0" is new: "b" is not skipped.
        fs.unlink(ROOT, ROOT_INO, b"a").unwrap();
        fs.mkdir(ROOT, ROOT_INO, b"0", 0o755).unwrap();
        let rest: Vec<Vec<u8>> = names(&fs, fh, all[2].0)
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        assert_eq!(rest, [b"b".to_vec(), b"c".to_vec(), b"file".to_vec()]);
        // A rewind sees the directory as it is now.
        let again: Vec<Vec<u8>> = names(&fs, fh, 0).into_iter().map(|(_, n)| n).collect();
        assert!(again.contains(&b"0".to_vec()));
        assert!(!again.contains(&b"a".to_vec()));
        fs.releasedir(ROOT, fh);
    }

    #[test]
    fn new_entries_in_setgid_directories() {
        let (_tmp, fs) = serve();
        let g = fs
            .mkdir(&with_umask(ROOT, 0o022), ROOT_INO, b"g", 0o777)
            .unwrap()
            .attr;
        assert_eq!(g.perm, 0o755);
        fs.setattr(
            ROOT,
            g.ino,
            &SetAttr {
                perm: Some(0o2777),
                gid: Some(50),
                ..SetAttr::default()
            },
        )
        .unwrap();
        let (f, _) = fs
            .create(&with_umask(USER, 0o002), g.ino, b"f", 0o666, libc::O_RDWR)
            .unwrap();
        let f = f.attr;
        assert_eq!((f.uid, f.gid, f.perm), (1000, 50, 0o664));
        let d = fs.mkdir(USER, g.ino, b"d", 0o755).unwrap().attr;
        assert_eq!((d.gid, d.perm), (50, 0o2755));
        let s = fs.symlink(USER, g.ino, b"s", b"t").unwrap().attr;
        assert_eq!(s.gid, 50);
        let p = fs
            .mknod(USER, ROOT_INO, b"p", libc::S_IFIFO | 0o644, 0x1234)
            .unwrap()
            .attr;
        assert_eq!((p.kind, p.gid, p.rdev), (Kind::Fifo, 1000, 0), "no rdev");
    }

    /// `FUSE_TMPFILE` and a whiteout `FUSE_RENAME2` through the
    /// dispatcher, as either transport hands them over: the tmpfile is a
    /// create with no name (umask, setgid group, nlink 0), held by the
    /// kernel's reference until a link names it; the whiteout is the
    /// caller's 0:0 character device at the old name.
    #[test]
    fn tmpfiles_and_whiteouts_through_the_dispatcher() {
        use crate::fs::dispatch::{Op, Request, dispatch};
        let (_tmp, fs) = serve();
        let g = fs.mkdir(ROOT, ROOT_INO, b"g", 0o777).unwrap().attr;
        let sgid = SetAttr {
            perm: Some(0o2777),
            gid: Some(50),
            ..SetAttr::default()
        };
        fs.setattr(ROOT, g.ino, &sgid).unwrap();
        let req = |ino, op| Request {
            unique: 1,
            ino,
            caller: *USER,
            op,
        };
        let tmpfile = Op::Tmpfile {
            mode: libc::S_IFREG | 0o666,
            umask: 0o022,
            flags: libc::O_RDWR,
        };
        let Ok(Reply::Created(e, _, h)) = dispatch(&fs, req(g.ino, tmpfile)) else {
            panic!("a tmpfile is created");
        };
        let t = e.attr;
        assert_eq!((t.kind, t.nlink, t.perm), (Kind::File, 0, 0o644));
        assert_eq!((t.uid, t.gid, h.fh), (1000, 50, 0));
        assert!(
            !fs.listing(g.ino)
                .unwrap()
                .entries
                .iter()
                .any(|e| e.ino == t.ino)
        );
        fs.write(USER, t.ino, b"tmp", appending(false)).unwrap();
        let link = Op::Link {
            ino: t.ino,
            new_name: b"named",
        };
        assert!(matches!(
            dispatch(&fs, req(g.ino, link)),
            Ok(Reply::Entry(..))
        ));
        // Two references now (the tmpfile's and the link's): the name keeps
        // it after both are forgotten.
        fs.forget(t.ino, 2);
        let named = fs.lookup(USER, g.ino, b"named").unwrap().attr;
        assert_eq!((named.ino, named.nlink), (t.ino, 1));
        assert_eq!(fs.read(USER, t.ino, 0, 10).unwrap(), b"tmp");
        // One never named goes with the kernel's reference.
        let tmpfile = Op::Tmpfile {
            mode: libc::S_IFREG | 0o600,
            umask: 0,
            flags: libc::O_RDWR,
        };
        let Ok(Reply::Created(gone, ..)) = dispatch(&fs, req(ROOT_INO, tmpfile)) else {
            panic!("a tmpfile is created");
        };
        fs.forget(gone.attr.ino, 1);
        assert!(fs.getattr(USER, gone.attr.ino).is_err());

        let whiteout = |name, flags| Op::Rename {
            name,
            new_parent: ROOT_INO,
            new_name: b"moved",
            flags,
        };
        let w = libc::RENAME_WHITEOUT;
        let done = dispatch(&fs, req(g.ino, whiteout(b"named", w)));
        assert!(matches!(done, Ok(Reply::Empty)));
        let wo = fs.lookup(USER, g.ino, b"named").unwrap().attr;
        assert_eq!((wo.kind, wo.rdev, wo.perm), (Kind::CharDev, 0, 0));
        assert_eq!(
            (wo.uid, wo.gid),
            (1000, 50),
            "the caller's, the setgid group"
        );
        let moved = fs.lookup(USER, ROOT_INO, b"moved").unwrap().attr.ino;
        assert_eq!(moved, t.ino);
        // With NOREPLACE over a name: EEXIST, nothing changed.
        let refused = dispatch(
            &fs,
            req(ROOT_INO, whiteout(b"a", w | libc::RENAME_NOREPLACE)),
        );
        assert_eq!(refused.unwrap_err(), Errno::EEXIST);
        assert_eq!(
            fs.lookup(USER, ROOT_INO, b"a").unwrap().attr.kind,
            Kind::File
        );
    }

    #[test]
    fn device_nodes_keep_their_numbers() {
        let (_tmp, fs) = serve();
        // Majors and minors past 8 bits (the kernel's encoding of them is
        // `fuse.rs`'s, tested there).
        for (mode, major, minor, kind) in [
            (libc::S_IFCHR | 0o620, 1, 3, Kind::CharDev),
            (libc::S_IFBLK | 0o640, 259, 70_000, Kind::BlockDev),
            (libc::S_IFCHR | 0o600, 4095, (1 << 20) - 1, Kind::CharDev),
        ] {
            let rdev = crate::sys::makedev(major, minor);
            let name = format!("dev{major}");
            let a = fs
                .mknod(USER, ROOT_INO, name.as_bytes(), mode, rdev)
                .unwrap()
                .attr;
            assert_eq!(
                (a.kind, a.perm, a.uid, a.rdev),
                (kind, mode & 0o7777, 1000, rdev)
            );
            let back = fs.lookup(USER, ROOT_INO, name.as_bytes()).unwrap().attr;
            assert_eq!((back.kind, back.rdev), (kind, rdev));
        }
    }

    /// What `FUSE_HANDLE_KILLPRIV_V2` leaves to the view: a truncate by
    /// someone other than root, a chown by anyone, and a write the kernel
    /// flags clear setuid (and setgid when group-executable); root's
    /// truncate keeps them.
    #[test]
    fn truncates_by_others_chowns_and_flagged_writes_clear_setuid() {
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        let set = |perm| {
            let a = SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            fs.setattr(ROOT, file, &a).unwrap();
        };
        let truncate = |c, size| {
            let a = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            fs.setattr(c, file, &a).unwrap().attr.perm
        };
        set(0o6755);
        assert_eq!(truncate(ROOT, 3), 0o6755, "root keeps the bits");
        assert_eq!(truncate(USER, 2), 0o755);
        set(0o2745);
        let member = &Caller {
            gid: fs.getattr(ROOT, file).unwrap().attr.gid,
            ..*USER
        };
        assert_eq!(truncate(member, 1), 0o2745, "setgid without group x stays");
        assert_eq!(truncate(USER, 1), 0o745, "... for its group only");
        // chown: by anyone, root too.
        set(0o6755);
        let chown = SetAttr {
            uid: Some(7),
            ..SetAttr::default()
        };
        assert_eq!(fs.setattr(ROOT, file, &chown).unwrap().attr.perm, 0o755);
        set(0o6755);
        let flagged = WriteCtx {
            kill_suidgid: true,
            ..appending(false)
        };
        fs.write(USER, file, b"+", flagged).unwrap();
        assert_eq!(fs.getattr(ROOT, file).unwrap().attr.perm, 0o755);
        assert_eq!(fs.read(ROOT, file, 0, 10).unwrap(), b"f+");
    }

    /// No flag comes with `fallocate` or `copy_file_range`: a caller
    /// without `CAP_FSETID` (here: not root, no process to read) clears
    /// setuid (and setgid when group-executable) of the file written; root
    /// keeps them; a setgid without group x stays for a member of the
    /// file's group and goes for anyone else.
    #[test]
    fn fallocate_and_copy_file_range_clear_setuid_of_the_destination() {
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        let set = |perm| {
            let a = SetAttr {
                perm: Some(perm),
                ..SetAttr::default()
            };
            fs.setattr(ROOT, file, &a).unwrap();
        };
        let perm = || fs.getattr(ROOT, file).unwrap().attr.perm;
        let member = &Caller {
            gid: fs.getattr(ROOT, file).unwrap().attr.gid,
            ..*USER
        };
        for mode in [Fallocate::Extend, Fallocate::KeepSize, Fallocate::PunchHole] {
            set(0o6777);
            fs.fallocate(ROOT, file, 0, 1, mode).unwrap();
            assert_eq!(perm(), 0o6777, "root's fallocate {mode:?} keeps them");
            fs.fallocate(USER, file, 0, 1, mode).unwrap();
            assert_eq!(perm(), 0o777, "fallocate {mode:?}");
            set(0o2666);
            fs.fallocate(member, file, 0, 1, mode).unwrap();
            assert_eq!(perm(), 0o2666, "setgid without group x stays");
            fs.fallocate(USER, file, 0, 1, mode).unwrap();
            assert_eq!(perm(), 0o666, "... for its group only");
        }
        // A refused mode never reaches the view (dispatch's tests).
        set(0o6777);
        fs.copy_file_range(ROOT, (file, 0), (file, 4), 1).unwrap();
        assert_eq!(perm(), 0o6777, "root's copy keeps them");
        fs.copy_file_range(USER, (file, 0), (file, 4), 1).unwrap();
        assert_eq!(perm(), 0o777);
    }

    #[test]
    fn writeback_lands_at_its_offset_and_leaves_the_bits() {
        let (_tmp, fs) = serve();
        let file = fs.lookup(ROOT, ROOT_INO, b"file").unwrap().attr.ino;
        fs.setattr(
            ROOT,
            file,
            &SetAttr {
                perm: Some(0o6755),
                ..SetAttr::default()
            },
        )
        .unwrap();
        fs.write(USER, file, b"F", appending(true)).unwrap();
        assert_eq!(fs.read(ROOT, file, 0, 100).unwrap(), b"File");
        assert_eq!(fs.getattr(ROOT, file).unwrap().attr.perm, 0o6755);
    }
}
