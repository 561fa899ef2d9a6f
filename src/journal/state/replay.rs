//! Replay and the inode map: reading a journal back into a state, and the
//! `InodeMap` record a commit writes so a replay from the committed
//! checkpoint numbers inodes as the live fork did.

use std::collections::{BTreeMap, HashMap};

use super::super::Result;
use super::super::record::{InodeMap, InodeMapWriter, Record};
use super::super::wal::Pos;
use super::extents::FileData;
use super::namespace::servable;
use super::{Data, Dir, ForkState, Inode, Log, Parked, corrupt};
use crate::store::model::ROOT_INO;
use crate::store::{Kind, Store};

impl ForkState {
    /// Replay one record read from the journal, whose frame is at `pos` with
    /// a payload of `plen` bytes.
    pub fn apply(&mut self, store: &Store, rec: &Record, pos: Pos, plen: u64) -> Result<()> {
        let after_map = self.after_map.take();
        if let Record::Who(w) = rec {
            self.replay_who(w);
            return Ok(());
        }
        if let Record::InodeMap(m) = rec {
            // A segment's changes start with an unknown requester.
            self.ops.current = super::super::ops::unknown();
            let fresh = std::mem::replace(&mut self.fresh, false);
            self.after_map = Some(fresh);
            return if fresh {
                self.bind_inode_map(store, m)
            } else {
                self.check_inode_map(store, m)
            };
        }
        if let Record::Atimes(list) = rec {
            return match after_map {
                Some(true) => {
                    self.bind_atimes(list);
                    Ok(())
                }
                // Met mid-replay (its commit did not move HEAD): the state
                // replayed so far has these atimes from its own records.
                Some(false) => Ok(()),
                None => Err(corrupt("an atime table that does not follow an inode map")),
            };
        }
        self.unpark_for(store, rec)?;
        self.run(store, rec, Log::Replayed { pos, plen })?;
        self.trim();
        Ok(())
    }

    /// The end of a replay: unlinked files nobody can open any more go.
    pub fn finish_replay(&mut self) {
        self.replaying = false;
        self.fresh = false;
        self.after_map = None;
        self.inodes
            .retain(|_, n| n.kind == Kind::Dir || n.nlink > 0 || n.open > 0);
    }

    /// The live numbering, for the first record of a segment started by a
    /// commit: every loaded or parked directory (parents first) with its
    /// children, the base link ids in use, and the open unlinked files.
    #[cfg(test)]
    pub fn inode_map(&self, store: &Store) -> Result<InodeMap> {
        let (dirs, links, orphans) = self.inode_map_parts();
        let dirs = dirs
            .into_iter()
            .map(|(d, names)| {
                let kids = match names {
                    Names::Loaded(kids) => kids.iter().map(|(n, i)| (n.clone(), *i)).collect(),
                    Names::Parked(p) => self.parked_names(store, d, p)?,
                };
                Ok((d, kids))
            })
            .collect::<Result<_>>()?;
        Ok(InodeMap {
            next_ino: self.next_ino,
            dirs,
            links,
            orphans,
        })
    }

    /// `Record::InodeMap(self.inode_map()).encode()`, encoded straight from
    /// the state (no copy of every loaded name; a parked directory's names
    /// are read from its tree, one directory at a time).
    pub fn inode_map_record(&self, store: &Store) -> Result<Vec<u8>> {
        let (dirs, links, orphans) = self.inode_map_parts();
        let hint = dirs
            .iter()
            .map(|(_, names)| match names {
                Names::Loaded(kids) => kids.keys().map(|n| n.len() + 12).sum::<usize>() + 8,
                Names::Parked(p) => p.inos.len() * 24 + 8,
            })
            .sum();
        let mut w = InodeMapWriter::new(self.next_ino, dirs.len(), hint);
        for (d, names) in dirs {
            match names {
                Names::Loaded(kids) => w.dir(d, kids.len(), kids.iter().map(|(n, i)| (&n[..], *i))),
                Names::Parked(p) => {
                    let kids = self.parked_names(store, d, p)?;
                    w.dir(d, kids.len(), kids.iter().map(|(n, i)| (&n[..], *i)));
                }
            }
        }
        Ok(w.finish(&links, &orphans))
    }

    /// The atimes a commit keeps (the tree has none): (ino, atime) in
    /// number order, for each inode with a link whose atime is not its
    /// mtime, parked files' included: one read under an atime option, given
    /// an atime by `utimensat`, or written since it was made or last read.
    /// Empty for a fork that only read without an atime option.
    pub fn atimes(&self) -> Vec<(u64, i64)> {
        let mut out: Vec<(u64, i64)> = self
            .inodes
            .iter()
            .filter(|(_, n)| n.nlink > 0 && n.atime != n.mtime)
            .map(|(&i, n)| (i, n.atime))
            .chain(self.parked_atimes.iter().map(|(&i, &a)| (i, a)))
            .collect();
        out.sort_unstable();
        out
    }

    /// The `Atimes` record a commit writes after its inode map, if the fork
    /// has any ([`ForkState::atimes`]).
    pub fn atimes_record(&self) -> Option<Vec<u8>> {
        let list = self.atimes();
        (!list.is_empty()).then(|| Record::Atimes(list).encode())
    }

    /// After the inode map that starts a replay: the atimes it kept. An
    /// inode the map did not bind (none of a well-formed journal) is
    /// dropped: an atime is not worth refusing the fork for.
    fn bind_atimes(&mut self, list: &[(u64, i64)]) {
        for &(ino, atime) in list {
            if let Some(n) = self.inodes.get_mut(&ino) {
                n.atime = atime;
            } else if self.parked_dir_of(ino).is_some() {
                self.parked_atimes.insert(ino, atime);
            }
        }
    }

    /// What an inode map lists, borrowed from the state.
    #[allow(clippy::type_complexity)]
    fn inode_map_parts(&self) -> (Vec<(u64, Names<'_>)>, Vec<(u64, u64)>, Vec<u64>) {
        // One pass over the inodes finds the numbered directories and the
        // orphans; a directory's depth (from the parent links directories
        // keep) puts parents first. Looking up every loaded entry to find the
        // subdirectories cost a hash lookup per name.
        let mut numbered = Vec::new();
        let mut orphans = Vec::new();
        for (&ino, n) in &self.inodes {
            if let Some(names) = Names::of(n) {
                numbered.push((ino, names));
            } else if n.nlink == 0 && n.kind == Kind::File {
                orphans.push(ino);
            }
        }
        orphans.sort_unstable();
        let root_numbered = self.inodes.get(&ROOT_INO).and_then(|n| Names::of(n));
        let mut depth = HashMap::from([(ROOT_INO, root_numbered.map(|_| 0))]);
        let mut dirs: Vec<(u32, u64, Names<'_>)> = numbered
            .into_iter()
            .filter_map(|(d, names)| Some((self.loaded_depth(d, &mut depth)?, d, names)))
            .collect();
        dirs.sort_unstable_by_key(|&(depth, d, _)| (depth, d));
        let dirs = dirs.into_iter().map(|(_, d, names)| (d, names)).collect();
        let mut links: Vec<(u64, u64)> = self
            .by_link
            .iter()
            .filter(|(_, i)| self.inodes.get(i).is_some_and(|n| n.nlink > 0))
            .map(|(l, i)| (*l, *i))
            .collect();
        links.sort_unstable();
        (dirs, links, orphans)
    }

    /// How deep numbered directory `d` is below the root, following the
    /// parent links; `None` when a directory on the way is not numbered (then
    /// the map cannot bind it: a replay reaches it only through loads).
    /// `memo` holds the depths found so far (the root's is 0).
    fn loaded_depth(&self, d: u64, memo: &mut HashMap<u64, Option<u32>>) -> Option<u32> {
        let mut chain = Vec::new();
        let mut at = d;
        let found = loop {
            if let Some(&known) = memo.get(&at) {
                break known;
            }
            let n = self.inodes.get(&at)?;
            if Names::of(n).is_none() || chain.len() > self.inodes.len() {
                break None;
            }
            chain.push(at);
            at = n.parent;
        };
        let mut depth = found;
        for &c in chain.iter().rev() {
            depth = depth.map(|x| x + 1);
            memo.insert(c, depth);
        }
        depth
    }

    /// First record of a replay from a committed checkpoint: number the
    /// checkpoint's entries as the live fork had them.
    fn bind_inode_map(&mut self, store: &Store, m: &InodeMap) -> Result<()> {
        for (dir, kids) in &m.dirs {
            // Parents come first; one may have been parked meanwhile.
            if let Some(n) = self.inodes.get(dir) {
                self.unpark_from(store, n.parent)?;
            }
            let Some(&Inode {
                data: Data::Dir(Dir::Unloaded(id)),
                ..
            }) = self.inodes.get(dir).map(|n| &**n)
            else {
                return Err(corrupt(format!(
                    "inode map names directory {dir}, which is not an unloaded directory"
                )));
            };
            let tree = store.get_tree(&id, &format!("directory inode {dir}"))?;
            let want: BTreeMap<&[u8], u64> = kids.iter().map(|(n, i)| (&n[..], *i)).collect();
            let mut got = BTreeMap::new();
            for e in &tree.entries {
                if !servable(&e.name) || got.contains_key(&e.name) {
                    continue;
                }
                let &ino = want.get(&e.name[..]).ok_or_else(|| {
                    corrupt(format!(
                        "inode map lacks entry {:?} of directory {dir}",
                        String::from_utf8_lossy(&e.name)
                    ))
                })?;
                self.inodes
                    .entry(ino)
                    .or_insert_with(|| Box::new(Inode::from_entry(e, *dir)));
                got.insert(e.name.clone(), ino);
            }
            if got.len() != want.len() {
                return Err(corrupt(format!(
                    "inode map lists entries of directory {dir} the checkpoint lacks"
                )));
            }
            self.inode_mut(*dir).data = Data::Dir(Dir::Loaded(got));
            self.base_trees.insert(*dir, id);
            self.park_queue.push_back(*dir);
            self.trim();
        }
        self.by_link = m.links.iter().copied().collect();
        for &o in &m.orphans {
            self.inodes.entry(o).or_insert_with(|| {
                Box::new(Inode {
                    nlink: 0,
                    ..Inode::fresh(Kind::File, Data::File(FileData::empty()), 0)
                })
            });
        }
        self.next_ino = m.next_ino;
        Ok(())
    }

    /// An inode map met mid-replay (the commit that wrote it did not move
    /// HEAD): it must describe the state replayed so far.
    fn check_inode_map(&self, store: &Store, m: &InodeMap) -> Result<()> {
        if m.next_ino != self.next_ino {
            return Err(corrupt(format!(
                "inode map says next inode {}, replay reached {}",
                m.next_ino, self.next_ino
            )));
        }
        for (dir, kids) in &m.dirs {
            // A parked directory's names come from its tree (a replay parks).
            let parked: BTreeMap<Vec<u8>, u64>;
            let have = match self.inodes.get(dir).and_then(|n| Names::of(n)) {
                Some(Names::Parked(p)) => {
                    parked = self.parked_names(store, *dir, p)?.into_iter().collect();
                    &parked
                }
                _ => self.dir(*dir)?,
            };
            if have.len() != kids.len() || kids.iter().any(|(n, i)| have.get(n) != Some(i)) {
                return Err(corrupt(format!(
                    "inode map disagrees with the replayed directory {dir}"
                )));
            }
        }
        Ok(())
    }
}

/// A numbered directory's children as an inode map lists them.
enum Names<'a> {
    Loaded(&'a BTreeMap<Vec<u8>, u64>),
    /// Read from its tree when the map is written.
    Parked(&'a Parked),
}

impl<'a> Names<'a> {
    /// Those of `n`, if it is a loaded or parked directory.
    fn of(n: &'a Inode) -> Option<Names<'a>> {
        match &n.data {
            Data::Dir(Dir::Loaded(kids)) => Some(Names::Loaded(kids)),
            Data::Dir(Dir::Parked(p)) => Some(Names::Parked(p)),
            _ => None,
        }
    }
}
