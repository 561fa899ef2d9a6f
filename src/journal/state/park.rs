//! Bounding the inode table: a walk of a large base tree through a fork
//! (`find`, `grep -r`) gives every entry an inode, and the kernel keeps its
//! references to them (so `forget` does not come to free them).
//!
//! A directory that has not changed since it was loaded from its base tree
//! (or since a commit stored its tree), with nothing changed under it, can
//! be **parked**: its files leave the table, and it keeps only that tree's
//! id, its children's numbers in name
//! order and their open counts (12 bytes an entry, against about
//! [`INODE_BYTES`] for a loaded one). The tree gives the rest back
//! ([`ForkState::unpark`]), with the same numbers: the kernel's references
//! stay valid. Its subdirectories stay in the table (each unloaded or
//! parked), so parent links and `..` need nothing.
//!
//! What can be parked ([`ForkState::parkable`]): a loaded directory other
//! than the root that has a tree (`base_trees`: the base tree it was loaded
//! from, or the tree a commit stored for it since) and has not changed
//! since that tree (not `dirty`), whose children are all unchanged, each a
//! file, symlink or special file with one link and no hardlink id, or a
//! directory unloaded or parked. So a parked directory's whole subtree is
//! its tree: a fold takes it by id as it takes an unloaded one, and no
//! hardlink (`by_link`) points into it. A commit makes what it stored
//! parkable ([`ForkState::settle`]): the directories and files unchanged
//! since its snapshot are clean again, against the trees it stored.
//!
//! When it happens: after an operation ([`super::super::Fork`] calls
//! [`ForkState::trim`]), when the table holds more inodes than its budget
//! (a quarter of `--cache-size` over [`INODE_BYTES`]): directories are
//! parked in the order they were loaded until half the budget is left,
//! but for the last [`RECENT_DIRS`] loaded or brought back.
//! Nothing is journaled: parking changes no number and no content, and a
//! replay loads what it loads. Inside an operation nothing is parked, so an
//! operation sees the directories it loaded stay loaded.
//!
//! Bringing back: an operation on a parked file's number, or on a parked
//! directory, unparks its directory and every parked directory above it
//! (so a loaded directory never sits below a parked one:
//! [`ForkState::unpark_from`]); a change to a directory's own attributes
//! unparks its parent, whose tree holds them
//! ([`ForkState::ensure_changeable`]). Open counts of parked files change
//! in place.
//!
//! Replay parks too, within the same budget: each record first brings back
//! what it names ([`ForkState::unpark_for`]), and an inode map brings back
//! each directory's parent before binding it. A fork whose journal loaded a
//! whole large tree reopens within its bound.
//!
//! Left unbounded: what changed since the last commit (dirty inodes and the
//! directories above them stay loaded), hardlinked files (never parked:
//! `by_link` points at them), the 12 bytes an entry of parked directories,
//! the directories' own inodes (one each), and a parked file's atime
//! where it differs from its mtime (a hash slot, 20 to 40 bytes).
//! A parked file's access time, when it is not its modification time,
//! waits in [`ForkState::parked_atimes`] (trees keep no atime) and comes
//! back with the file.

use std::collections::BTreeMap;

use super::super::Result;
use super::super::record::{Named, Record};
use super::namespace::servable;
use super::{Data, Dir, ForkState, Inode, Parked, TreeCache, corrupt};
use crate::store::model::{ROOT_INO, ext4};
use crate::store::{Kind, Store, Tree};

/// About how much memory one loaded base entry takes in the table: the
/// inode, its slot, its name in the directory's map and the allocator's
/// share (measured: a `find` over a 303k-entry fork came to about 380).
pub const INODE_BYTES: usize = 400;

/// Directories loaded or brought back last that are not parked, whatever
/// the budget: a working set larger than the budget (a directory of more
/// entries than it, or two compared) would otherwise be parked and read
/// back at every operation.
pub const RECENT_DIRS: usize = 2;

/// How many inodes the table may hold before [`ForkState::trim`] parks
/// directories.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub inodes: usize,
    /// How many of the last directories loaded are kept ([`RECENT_DIRS`]).
    recent: usize,
    /// The table's size at which the next trim runs (past the budget when
    /// the last one could not get under it: what is left cannot be parked).
    trim_at: usize,
}

impl Budget {
    /// No bound (a state being replayed or folded).
    pub fn unbounded() -> Budget {
        Budget {
            inodes: usize::MAX,
            recent: 0,
            trim_at: usize::MAX,
        }
    }

    /// At most `inodes` inodes that could be parked, but for those of the
    /// last [`RECENT_DIRS`] directories loaded.
    pub fn of(inodes: usize) -> Budget {
        Budget {
            inodes,
            recent: RECENT_DIRS,
            trim_at: inodes,
        }
    }

    /// At most `inodes`, the last directories loaded parked too (tests).
    #[cfg(test)]
    pub fn strict(inodes: usize) -> Budget {
        Budget {
            recent: 0,
            ..Budget::of(inodes)
        }
    }
}

/// Whether a directory can be parked now.
#[derive(Debug, PartialEq, Eq)]
enum Parkable {
    Yes,
    /// Once the loaded subdirectories under it are parked.
    Later,
    /// Not while it exists: it or something in it changed, or it is not a
    /// loaded base directory.
    Never,
}

impl ForkState {
    /// Park directories until the table is within its budget (module docs).
    pub fn trim(&mut self) {
        if self.inodes.len() <= self.budget.trim_at {
            return;
        }
        let low = self.budget.inodes / 2;
        loop {
            let mut progress = false;
            let mut later = Vec::new();
            let recent = self.budget.recent;
            for _ in 0..self.park_queue.len().saturating_sub(recent) {
                if self.inodes.len() <= low {
                    break;
                }
                let Some(d) = self.park_queue.pop_front() else {
                    break;
                };
                match self.parkable(d) {
                    Parkable::Yes => {
                        self.park(d);
                        progress = true;
                    }
                    Parkable::Later => later.push(d),
                    Parkable::Never => {}
                }
            }
            // Tried again first next time: their subdirectories came after
            // them, and may be parked now.
            for d in later.into_iter().rev() {
                self.park_queue.push_front(d);
            }
            if !progress || self.inodes.len() <= low {
                break;
            }
        }
        self.budget.trim_at = if self.inodes.len() > low {
            self.inodes.len() + self.budget.inodes / 2
        } else {
            self.budget.inodes
        };
    }

    fn parkable(&self, d: u64) -> Parkable {
        let Some(n) = self.inodes.get(&d) else {
            return Parkable::Never;
        };
        let Data::Dir(Dir::Loaded(kids)) = &n.data else {
            return Parkable::Never;
        };
        if d == ROOT_INO || n.dirty || !self.base_trees.contains_key(&d) {
            return Parkable::Never;
        }
        let mut later = false;
        for c in kids.values() {
            let Some(k) = self.inodes.get(c) else {
                return Parkable::Never;
            };
            match &k.data {
                _ if k.dirty => return Parkable::Never,
                Data::Dir(Dir::Loaded(_)) => later = true,
                Data::Dir(_) => {}
                _ if k.link_id != 0 || k.nlink != 1 => return Parkable::Never,
                _ => {}
            }
        }
        if later {
            Parkable::Later
        } else {
            Parkable::Yes
        }
    }

    /// Park loaded directory `d` ([`ForkState::parkable`] said yes).
    fn park(&mut self, d: u64) {
        let id = self.base_trees[&d];
        let n = self.inodes.get_mut(&d).expect("parkable");
        let Data::Dir(Dir::Loaded(kids)) = std::mem::replace(&mut n.data, Data::Special) else {
            unreachable!("parkable");
        };
        let size = ext4::dir_size(kids.keys().map(Vec::len));
        let mut inos = Vec::with_capacity(kids.len());
        let mut opens = Vec::with_capacity(kids.len());
        for c in kids.into_values() {
            let k = &self.inodes[&c];
            inos.push(c);
            opens.push(k.open);
            if k.kind != Kind::Dir {
                // Its tree keeps no atime: one that differs waits here.
                if k.atime != k.mtime {
                    self.parked_atimes.insert(c, k.atime);
                }
                self.inodes.remove(&c);
                self.parked += 1;
            }
        }
        for (start, len) in runs(&inos) {
            self.parked_runs.insert(start, (len, d));
        }
        self.inodes.get_mut(&d).expect("parkable").data =
            Data::Dir(Dir::Parked(Box::new(Parked {
                id,
                inos: inos.into(),
                opens: opens.into(),
                size,
            })));
    }

    /// Unpark directory `d` if it is parked: its files come back from its
    /// tree with their numbers and open counts. Does not stamp it: its
    /// content did not change.
    pub(super) fn unpark(&mut self, store: &Store, d: u64) -> Result<()> {
        let Some(Data::Dir(Dir::Parked(p))) = self.inodes.get(&d).map(|n| &n.data) else {
            return Ok(());
        };
        let (tree, order) = parked_entries(store, d, p)?;
        let n = self.inodes.get_mut(&d).expect("parked");
        let Data::Dir(Dir::Parked(p)) = std::mem::replace(&mut n.data, Data::Special) else {
            unreachable!("parked");
        };
        let mut kids = BTreeMap::new();
        for ((&i, &ino), &open) in order.iter().zip(&p.inos).zip(&p.opens) {
            let e = &tree.entries[i];
            let atime = self.parked_atimes.remove(&ino);
            if let std::collections::hash_map::Entry::Vacant(v) = self.inodes.entry(ino) {
                let mut k = Inode::from_entry(e, d);
                if k.kind == Kind::File {
                    k.open = open;
                }
                if let Some(a) = atime {
                    k.atime = a;
                }
                v.insert(Box::new(k));
                self.parked = self.parked.saturating_sub(1);
            }
            kids.insert(e.name.clone(), ino);
        }
        for (start, _) in runs(&p.inos) {
            self.parked_runs.remove(&start);
        }
        self.inodes.get_mut(&d).expect("parked").data = Data::Dir(Dir::Loaded(kids));
        self.park_queue.push_back(d);
        self.unparked += 1;
        Ok(())
    }

    /// Unpark `d` and the parked directories above it, top down.
    pub(super) fn unpark_from(&mut self, store: &Store, d: u64) -> Result<()> {
        let mut chain = Vec::new();
        let mut at = d;
        while let Some(n) = self.inodes.get(&at)
            && matches!(n.data, Data::Dir(Dir::Parked(_)))
        {
            chain.push(at);
            if n.parent == at {
                break;
            }
            at = n.parent;
        }
        for d in chain.into_iter().rev() {
            self.unpark(store, d)?;
        }
        Ok(())
    }

    /// Make inode `ino` present in the table if it is a parked file (an
    /// unknown number is left for the caller to find missing).
    pub fn ensure_resident(&mut self, store: &Store, ino: u64) -> Result<()> {
        if self.inodes.contains_key(&ino) {
            return Ok(());
        }
        match self.parked_dir_of(ino) {
            Some(d) => self.unpark_from(store, d),
            None => Ok(()),
        }
    }

    /// After a commit stored loaded directory `d`'s tree `t`: when `d` has
    /// not changed since the commit's snapshot (its stamp), that tree is
    /// what it is parked against from now on, and `d`, its files unchanged
    /// since with one link and no hardlink id, and its subdirectories
    /// unchanged since that are not loaded (a loaded one settles itself)
    /// are clean again. So what a fork changed is bounded too, once
    /// committed. Hardlinked inodes are left alone: a fold must find their
    /// other names (`fold::needs_full_load`); the commit that did cleans
    /// them (`ForkState::rebase`).
    pub(super) fn settle(&mut self, d: u64, t: &TreeCache) {
        let Some(n) = self.inodes.get(&d) else {
            return;
        };
        let Data::Dir(Dir::Loaded(kids)) = &n.data else {
            return;
        };
        if n.stamp > t.at {
            return;
        }
        let kids: Vec<u64> = kids.values().copied().collect();
        for c in kids {
            let Some(k) = self.inodes.get_mut(&c) else {
                continue;
            };
            let settles = match &k.data {
                Data::Dir(Dir::Loaded(_)) => false,
                Data::Dir(_) => true,
                _ => k.link_id == 0 && k.nlink == 1,
            };
            if settles && k.stamp <= t.at {
                k.dirty = false;
            }
        }
        self.base_trees.insert(d, t.id);
        self.inodes.get_mut(&d).expect("checked").dirty = false;
        // First in line: not used lately, only committed.
        self.park_queue.push_front(d);
        // It may be parked now: the next trim looks, even if the table did
        // not grow since the last one.
        self.budget.trim_at = self.budget.trim_at.min(self.budget.inodes);
    }

    /// Make inode `ino` ready to change: present, and if it is a directory
    /// (whose own entry its parent's tree holds), its parent loaded.
    pub fn ensure_changeable(&mut self, store: &Store, ino: u64) -> Result<()> {
        self.ensure_resident(store, ino)?;
        if let Some(n) = self.inodes.get(&ino)
            && n.kind == Kind::Dir
        {
            self.unpark_from(store, n.parent)?;
        }
        Ok(())
    }

    /// Directory `d` (a number that may be a parked file's) loaded if parked.
    fn unpark_dir(&mut self, store: &Store, d: u64) -> Result<()> {
        self.ensure_resident(store, d)?;
        self.unpark_from(store, d)
    }

    /// Child `name` of loaded directory `d`, unparked if it is a parked
    /// directory (an unlink or rename checks whether it is empty).
    fn unpark_child(&mut self, store: &Store, d: u64, name: &[u8]) -> Result<()> {
        let kid = self.dir(d).ok().and_then(|k| k.get(name).copied());
        match kid {
            Some(k) => self.unpark(store, k),
            None => Ok(()),
        }
    }

    /// Before replaying `rec`: bring back what it reads or changes
    /// ([`Record::inodes`]), as the live operation's `ensure_*` calls did
    /// (the live fork may have had it loaded where the replay parked it).
    pub(super) fn unpark_for(&mut self, store: &Store, rec: &Record) -> Result<()> {
        for named in rec.inodes() {
            match named {
                Named::Dir(d) => self.unpark_dir(store, d)?,
                Named::Entry(d, name) => self.unpark_child(store, d, name)?,
                Named::Inode(ino) => self.ensure_changeable(store, ino)?,
            }
        }
        Ok(())
    }

    /// The parked directory holding inode `ino`, if one does.
    pub(super) fn parked_dir_of(&self, ino: u64) -> Option<u64> {
        let (&start, &(len, d)) = self.parked_runs.range(..=ino).next_back()?;
        (ino - start < len).then_some(d)
    }

    /// The open count of parked file `ino`.
    pub(super) fn parked_open(&mut self, ino: u64) -> Option<&mut u32> {
        let d = self.parked_dir_of(ino)?;
        let Data::Dir(Dir::Parked(p)) = &mut self.inodes.get_mut(&d)?.data else {
            return None;
        };
        // Numbers given by one load are in name order; others may not be.
        let i = match p.inos.binary_search(&ino) {
            Ok(i) => i,
            Err(_) => p.inos.iter().position(|&x| x == ino)?,
        };
        p.opens.get_mut(i)
    }

    /// The children parked directory `d` lists, as (name, number) in name
    /// order, read from its tree (for an inode map).
    pub(super) fn parked_names(
        &self,
        store: &Store,
        d: u64,
        p: &Parked,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let (mut tree, order) = parked_entries(store, d, p)?;
        Ok(order
            .iter()
            .zip(&p.inos)
            .map(|(&i, &ino)| (std::mem::take(&mut tree.entries[i].name), ino))
            .collect())
    }
}

/// Parked directory `d`'s tree and, in name order, the index in it of
/// each entry a load gives a number (servable names, the first of equal
/// ones: as `load` does). Their count must be the parked numbers' count.
fn parked_entries(store: &Store, d: u64, p: &Parked) -> Result<(Tree, Vec<usize>)> {
    let tree = store.get_tree(&p.id, &format!("directory inode {d}"))?;
    let mut first: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (i, e) in tree.entries.iter().enumerate() {
        if servable(&e.name) {
            first.entry(&e.name[..]).or_insert(i);
        }
    }
    let order: Vec<usize> = first.into_values().collect();
    if order.len() != p.inos.len() {
        return Err(corrupt(format!(
            "parked directory {d} had {} entries, its tree {} has {}",
            p.inos.len(),
            p.id,
            order.len()
        )));
    }
    Ok((tree, order))
}

/// Runs of consecutive numbers among `inos` (any order), as (first, length).
fn runs(inos: &[u64]) -> Vec<(u64, u64)> {
    let mut sorted = inos.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in sorted {
        match out.last_mut() {
            Some((s, len)) if *s + *len == i => *len += 1,
            _ => out.push((i, 1)),
        }
    }
    out
}
