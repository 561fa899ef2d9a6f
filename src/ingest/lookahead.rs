//! Directory listings ahead of a snapshot's walk, on helper threads.
//!
//! The walk is one thread, depth first in name order, and most of its time
//! is system calls: a `getdents` per directory and an `lstat` per entry (an
//! incremental snapshot reads no file, so that is nearly all it does). The
//! walk says which directories it will list next ([`Lookahead::ahead`], as
//! soon as it has read their parent), workers list and `lstat` them in that
//! order, and the walk takes each listing when it gets there
//! ([`Lookahead::take`]): the system calls of the next directories overlap
//! the walk's own work on this one.
//!
//! A listing taken from a worker is what the walk would have read itself a
//! moment later; a snapshot of a tree that changes meanwhile is not atomic
//! either way (the content phase checks every file it reads). Memory: the
//! queue holds paths of directories the walk has already listed (it holds
//! their nodes too), and at most [`MAX_READY`] listings wait to be taken.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use rustix::io::Errno;

/// Listings done and not yet taken, at most (workers wait beyond it).
const MAX_READY: usize = 64;

/// One directory: its entries' names (no `.` or `..`) sorted by their bytes,
/// and each one's `lstat`.
#[derive(Debug)]
pub(super) struct Listing {
    pub names: Vec<CString>,
    pub stats: Vec<Result<Stat, Errno>>,
}

/// List `dir` (not following a symlink in its place) and `lstat` each entry
/// relative to it.
pub(super) fn list(dir: &Path) -> io::Result<Listing> {
    super::testing_vanish(dir);
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty())?;
    let mut listing = rustix::fs::Dir::new(fd)?;
    let mut names = Vec::new();
    while let Some(ent) = listing.read() {
        let name = ent?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            names.push(name);
        }
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let dirfd = listing.fd()?;
    let stats = names
        .iter()
        .map(|name| rustix::fs::statat(dirfd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW))
        .collect();
    Ok(Listing { names, stats })
}

#[derive(Default)]
struct State {
    /// Directories to list, the one the walk needs soonest first.
    queue: VecDeque<PathBuf>,
    /// Listings being made (`None`) or made and not yet taken.
    listed: HashMap<PathBuf, Option<io::Result<Listing>>>,
    ready: usize,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Workers listing directories ahead of the walk; stopped when dropped.
pub(super) struct Lookahead {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Lookahead {
    /// Start `threads` workers (none: the walk lists every directory itself).
    pub fn start(threads: usize) -> Lookahead {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let workers = (0..threads)
            .filter_map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("snapshot-list-{i}"))
                    .spawn(move || work(&shared))
                    .ok()
            })
            .collect();
        Lookahead { shared, workers }
    }

    /// The walk will list `dirs` next, in this order, before any directory
    /// it announced earlier (depth first: a directory's subdirectories come
    /// before its later siblings).
    pub fn ahead(&self, dirs: Vec<PathBuf>) {
        if self.workers.is_empty() || dirs.is_empty() {
            return;
        }
        let mut st = self.shared.lock();
        for d in dirs.into_iter().rev() {
            st.queue.push_front(d);
        }
        drop(st);
        self.shared.changed.notify_all();
    }

    /// The listing of `dir`: a worker's (waiting for it if one is making
    /// it), or made here when no worker has started it.
    pub fn take(&self, dir: &Path) -> io::Result<Listing> {
        let mut st = self.shared.lock();
        loop {
            match st.listed.get(dir) {
                None => {
                    // Not started: the walk is ahead of the workers (it is
                    // then at the front of the queue).
                    if let Some(i) = st.queue.iter().position(|d| d == dir) {
                        st.queue.remove(i);
                    }
                    drop(st);
                    return list(dir);
                }
                Some(None) => {
                    st = self
                        .shared
                        .changed
                        .wait(st)
                        .unwrap_or_else(|e| e.into_inner())
                }
                Some(Some(_)) => {
                    let done = st.listed.remove(dir).flatten().expect("a listing");
                    st.ready -= 1;
                    drop(st);
                    self.shared.changed.notify_all();
                    return done;
                }
            }
        }
    }
}

impl Drop for Lookahead {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn work(shared: &Shared) {
    let mut st = shared.lock();
    loop {
        if st.stop {
            return;
        }
        if st.ready >= MAX_READY || st.queue.is_empty() {
            st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let dir = st.queue.pop_front().expect("queued");
        st.listed.insert(dir.clone(), None);
        drop(st);
        let done = list(&dir);
        st = shared.lock();
        st.listed.insert(dir, Some(done));
        st.ready += 1;
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_match_a_direct_listing_in_any_order_of_taking() {
        let t = tempfile::tempdir().unwrap();
        let mut dirs = Vec::new();
        for d in 0..40 {
            let dir = t.path().join(format!("d{d:02}"));
            std::fs::create_dir(&dir).unwrap();
            for f in 0..d % 7 {
                std::fs::write(dir.join(format!("f{f}")), b"x").unwrap();
            }
            std::os::unix::fs::symlink("nowhere", dir.join("link")).unwrap();
            dirs.push(dir);
        }
        let names = |l: &Listing| l.names.iter().map(|n| n.to_owned()).collect::<Vec<_>>();
        let ahead = Lookahead::start(2);
        ahead.ahead(dirs.clone());
        // Taken out of order, and one never announced.
        let mut order = dirs.clone();
        order.reverse();
        order.push(t.path().to_path_buf());
        for dir in &order {
            let got = ahead.take(dir).unwrap();
            let want = list(dir).unwrap();
            assert_eq!(names(&got), names(&want), "{}", dir.display());
            let inos = |l: &Listing| {
                l.stats
                    .iter()
                    .map(|s| s.as_ref().map(|s| s.st_ino).ok())
                    .collect::<Vec<_>>()
            };
            assert_eq!(inos(&got), inos(&want));
        }
        // A directory that is not there: the same error either way.
        let gone = t.path().join("gone");
        ahead.ahead(vec![gone.clone()]);
        assert_eq!(
            ahead.take(&gone).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
