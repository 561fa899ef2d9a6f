//! Directory entries: the namespace operations (create, mkdir, mknod,
//! symlink, link, unlink, rmdir, rename, lookup, readdir) and the loading of
//! base directories that gives their entries inode numbers.
//!
//! Each record of this family (`LoadDir`, `Create`, `Link`, `Unlink`,
//! `Rename`) is one `record_*` function: its checks, then [`Log::append`],
//! then its effect. Live operations build the record and run it through
//! [`ForkState::log`]; replay runs the same function.

use std::collections::{BTreeMap, VecDeque};

use super::super::Result;
use super::super::record::{RENAME_EXCHANGE, RENAME_NOREPLACE, Record};
use super::extents::FileData;
use super::{Ctx, Data, Dir, ForkState, Inode, Log, corrupt, now_ns};
use crate::store::model::{DirEntry, NAME_MAX, Posix, ROOT_INO, RenameMode};
use crate::store::{Kind, ObjectId, Store, Tree};

/// Names a directory entry may have (the kernel rejects the others).
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Posix::Invalid("bad file name").into());
    }
    if name.len() > NAME_MAX {
        return Err(Posix::NameTooLong.into());
    }
    Ok(())
}

/// Whether a base entry named `name` is served (others are skipped on load).
pub(super) fn servable(name: &[u8]) -> bool {
    check_name(name).is_ok()
}

/// A directory's entries changed at `t`.
fn touch_dir(n: &mut Inode, t: i64) {
    n.touch_data(t);
}

impl ForkState {
    // ------------------------------------------------------------ live ops

    /// Load directory `dir` if it is not yet (journaling the load).
    /// A parked one is unparked, as are parked ones above it.
    pub fn ensure_loaded(&mut self, ctx: &Ctx<'_>, dir: u64) -> Result<()> {
        // A parked file's number (an error below, but the right one).
        self.ensure_resident(ctx.store, dir)?;
        match self.inode(dir)?.data {
            Data::Dir(Dir::Unloaded(_)) => self.log(
                ctx,
                Record::LoadDir {
                    dir,
                    first_ino: self.next_ino,
                },
            ),
            Data::Dir(Dir::Parked(_)) => self.unpark_from(ctx.store, dir),
            Data::Dir(Dir::Loaded(_)) => Ok(()),
            _ => Err(Posix::NotDir.into()),
        }
    }

    pub fn lookup(&mut self, ctx: &Ctx<'_>, parent: u64, name: &[u8]) -> Result<u64> {
        self.ensure_loaded(ctx, parent)?;
        match name {
            b"." => Ok(parent),
            b".." => Ok(self.inode(parent)?.parent),
            _ => self
                .dir(parent)?
                .get(name)
                .copied()
                .ok_or(Posix::NotFound.into()),
        }
    }

    pub fn readdir(&mut self, ctx: &Ctx<'_>, ino: u64) -> Result<(u64, Vec<DirEntry>)> {
        self.ensure_loaded(ctx, ino)?;
        let kids = self.dir(ino)?;
        let list = kids
            .iter()
            .map(|(n, i)| DirEntry {
                name: n.clone(),
                ino: *i,
                kind: self.inodes[i].kind,
            })
            .collect();
        Ok((self.inodes[&ino].parent, list))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        name: &[u8],
        kind: Kind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<Vec<u8>>,
    ) -> Result<u64> {
        self.log_new_inode(ctx, parent, |ino| Record::Create {
            parent,
            name: name.to_vec(),
            ino,
            kind,
            perm,
            uid,
            gid,
            rdev,
            time_ns: now_ns(),
            target,
        })
    }

    /// Log the record `make` builds for a new inode in directory `parent`
    /// (loaded first), numbered the fork's next number; that number.
    fn log_new_inode(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        make: impl FnOnce(u64) -> Record,
    ) -> Result<u64> {
        self.ensure_loaded(ctx, parent)?;
        let ino = self.next_ino;
        self.log(ctx, make(ino))?;
        Ok(ino)
    }

    /// A regular file with no name, made as from directory `parent`
    /// (`O_TMPFILE`): nlink 0, kept while open; a [`ForkState::link`] may
    /// give it a name.
    pub fn tmpfile(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<u64> {
        self.log_new_inode(ctx, parent, |ino| Record::Tmpfile {
            parent,
            ino,
            perm,
            uid,
            gid,
            time_ns: now_ns(),
        })
    }

    pub fn link(&mut self, ctx: &Ctx<'_>, ino: u64, parent: u64, name: &[u8]) -> Result<()> {
        self.ensure_loaded(ctx, parent)?;
        self.log(
            ctx,
            Record::Link {
                ino,
                parent,
                name: name.to_vec(),
                time_ns: now_ns(),
            },
        )
    }

    /// unlink (`dir` false) or rmdir (`dir` true).
    pub fn remove(&mut self, ctx: &Ctx<'_>, parent: u64, name: &[u8], dir: bool) -> Result<()> {
        self.ensure_loaded(ctx, parent)?;
        let &ino = self.dir(parent)?.get(name).ok_or(Posix::NotFound)?;
        match (self.inodes[&ino].kind == Kind::Dir, dir) {
            (true, false) => return Err(Posix::IsDir.into()),
            (false, true) => return Err(Posix::NotDir.into()),
            (true, true) => self.ensure_loaded(ctx, ino)?,
            _ => {}
        }
        self.log(
            ctx,
            Record::Unlink {
                parent,
                name: name.to_vec(),
                time_ns: now_ns(),
            },
        )
    }

    /// What a rename must have loaded: both directories, and a directory
    /// it would replace (to know it is empty).
    fn load_for_rename(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<()> {
        self.ensure_loaded(ctx, parent)?;
        self.ensure_loaded(ctx, new_parent)?;
        if let Some(&dst) = self.dir(new_parent)?.get(new_name)
            && self.inodes[&dst].kind == Kind::Dir
        {
            self.ensure_loaded(ctx, dst)?;
        }
        Ok(())
    }

    pub fn rename(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<()> {
        self.load_for_rename(ctx, parent, new_parent, new_name)?;
        let flags = match mode {
            RenameMode::Replace => 0,
            RenameMode::NoReplace => RENAME_NOREPLACE,
            RenameMode::Exchange => RENAME_EXCHANGE,
        };
        self.log(
            ctx,
            Record::Rename {
                parent,
                name: name.to_vec(),
                new_parent,
                new_name: new_name.to_vec(),
                flags,
                time_ns: now_ns(),
            },
        )
    }

    /// [`ForkState::rename`] (not exchanging: `noreplace` or not) leaving
    /// a whiteout owned by `uid`:`gid` at the old name
    /// (`RENAME_WHITEOUT`), in one record.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_whiteout(
        &mut self,
        ctx: &Ctx<'_>,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        noreplace: bool,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        self.load_for_rename(ctx, parent, new_parent, new_name)?;
        self.log(
            ctx,
            Record::RenameWhiteout {
                parent,
                name: name.to_vec(),
                new_parent,
                new_name: new_name.to_vec(),
                flags: if noreplace { RENAME_NOREPLACE } else { 0 },
                ino: self.next_ino,
                uid,
                gid,
                time_ns: now_ns(),
            },
        )
    }

    /// A commit began: its inode map lists the files with no name as
    /// orphans, which a replay from it binds empty (their data went to
    /// objects no record names). So from now on none of them may be given
    /// a name: a replay could not give it its data back.
    pub fn seal_tmpfiles(&mut self) {
        for n in self.inodes.values_mut() {
            n.tmpfile = false;
        }
    }

    // ------------------------------------------------------------ records

    /// `Tmpfile`: new file `ino` (always `next_ino`) with no name, made as
    /// from `parent` (which is not changed: ext4 leaves the directory's
    /// times alone too).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_tmpfile(
        &mut self,
        parent: u64,
        ino: u64,
        perm: u32,
        uid: u32,
        gid: u32,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        self.dir(parent)?;
        if ino != self.next_ino {
            return Err(corrupt(format!(
                "new inode {ino}, expected {}",
                self.next_ino
            )));
        }
        log.append()?;
        self.inodes.insert(
            ino,
            Box::new(Inode {
                perm: perm & 0o7777,
                uid,
                gid,
                nlink: 0,
                tmpfile: true,
                ..Inode::fresh(Kind::File, Data::File(FileData::empty()), t)
            }),
        );
        self.next_ino = ino + 1;
        Ok(())
    }

    /// `LoadDir`: base directory `dir` gets its children numbered from `first_ino`.
    pub(super) fn record_load_dir(
        &mut self,
        store: &Store,
        dir: u64,
        first_ino: u64,
        log: Log<'_>,
    ) -> Result<()> {
        let n = self.inode(dir)?;
        let Data::Dir(Dir::Unloaded(id)) = n.data else {
            return Err(corrupt(format!("directory {dir} loaded twice")));
        };
        // No loaded directory sits below a parked one (`park.rs`); not
        // journaled, so before the checks is as good as after.
        let parent = n.parent;
        self.unpark_from(store, parent)?;
        if first_ino != self.next_ino {
            return Err(corrupt(format!(
                "LoadDir numbers from {first_ino}, expected {}",
                self.next_ino
            )));
        }
        // Read before the record is logged: a store failure logs nothing.
        let tree = store.get_tree(&id, &format!("directory inode {dir}"))?;
        log.append()?;
        self.load(dir, id, &tree);
        Ok(())
    }

    /// `Create`: new inode `ino` (always `next_ino`) named `name` in `parent`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_create(
        &mut self,
        parent: u64,
        name: &[u8],
        ino: u64,
        kind: Kind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        t: i64,
        target: Option<&[u8]>,
        log: Log<'_>,
    ) -> Result<()> {
        check_name(name)?;
        if self.dir(parent)?.contains_key(name) {
            return Err(Posix::Exists.into());
        }
        if ino != self.next_ino {
            return Err(corrupt(format!(
                "new inode {ino}, expected {}",
                self.next_ino
            )));
        }
        if (kind == Kind::Symlink) != target.is_some() {
            return Err(Posix::Invalid("symlink target").into());
        }
        log.append()?;
        let data = match kind {
            Kind::File => Data::File(FileData::empty()),
            Kind::Dir => Data::Dir(Dir::Loaded(BTreeMap::new())),
            Kind::Symlink => Data::Symlink(target.map(<[u8]>::to_vec).unwrap_or_default()),
            _ => Data::Special,
        };
        let is_dir = kind == Kind::Dir;
        self.inodes.insert(
            ino,
            Box::new(Inode {
                perm: perm & 0o7777,
                uid,
                gid,
                rdev,
                nlink: if is_dir { 2 } else { 1 },
                parent: if is_dir { parent } else { 0 },
                ..Inode::fresh(kind, data, t)
            }),
        );
        self.next_ino = ino + 1;
        let p = self.inode_mut(parent);
        p.children_mut().insert(name.to_vec(), ino);
        if is_dir {
            p.nlink += 1;
        }
        touch_dir(p, t);
        Ok(())
    }

    /// `Link`: a new name for `ino`.
    pub(super) fn record_link(
        &mut self,
        ino: u64,
        parent: u64,
        name: &[u8],
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        let n = self.inode(ino)?;
        if n.kind == Kind::Dir {
            return Err(Posix::Perm.into());
        }
        if n.nlink == 0 && !n.tmpfile {
            return Err(Posix::NotFound.into());
        }
        if n.nlink == u32::MAX {
            return Err(Posix::TooManyLinks.into());
        }
        check_name(name)?;
        if self.dir(parent)?.contains_key(name) {
            return Err(Posix::Exists.into());
        }
        log.append()?;
        let n = self.inode_mut(ino);
        n.nlink += 1;
        n.tmpfile = false;
        n.touch_meta(t);
        let p = self.inode_mut(parent);
        p.children_mut().insert(name.to_vec(), ino);
        touch_dir(p, t);
        Ok(())
    }

    /// `Unlink`: remove a name (unlink, or rmdir of an empty directory).
    pub(super) fn record_unlink(
        &mut self,
        parent: u64,
        name: &[u8],
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        let &ino = self.dir(parent)?.get(name).ok_or(Posix::NotFound)?;
        if self.inode(ino)?.kind == Kind::Dir && !self.dir(ino)?.is_empty() {
            return Err(Posix::NotEmpty.into());
        }
        log.append()?;
        let p = self.inode_mut(parent);
        p.children_mut().remove(name);
        touch_dir(p, t);
        self.drop_link(parent, ino, t);
        Ok(())
    }

    /// `Rename`: rename(2), or renameat2(2) with `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_rename(
        &mut self,
        parent: u64,
        name: &[u8],
        np: u64,
        nn: &[u8],
        flags: u32,
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        let (src, dst) = self.check_rename(parent, name, np, nn, flags)?;
        log.append()?;
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.expect("checked");
            self.inode_mut(parent)
                .children_mut()
                .insert(name.to_vec(), dst);
            self.inode_mut(np).children_mut().insert(nn.to_vec(), src);
            for (ino, from, to) in [(src, parent, np), (dst, np, parent)] {
                let n = self.inode_mut(ino);
                n.ctime = t;
                if n.kind == Kind::Dir && from != to {
                    n.parent = to;
                    self.inode_mut(from).nlink -= 1;
                    self.inode_mut(to).nlink += 1;
                }
            }
        } else {
            if dst == Some(src) {
                return Ok(());
            }
            self.move_entry(parent, name, np, nn, src, dst, t);
        }
        touch_dir(self.inode_mut(parent), t);
        touch_dir(self.inode_mut(np), t);
        Ok(())
    }

    /// `RenameWhiteout`: a rename (`flags`: 0 or `RENAME_NOREPLACE`), then
    /// whiteout `ino` (always `next_ino`: a character device 0:0 with mode
    /// 0, as ext4's `ext4_whiteout_for_rename`) at the old name. A rename
    /// of a name onto another link of the same inode changes nothing and
    /// makes no whiteout (the kernel does not ask for it anyway).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_rename_whiteout(
        &mut self,
        parent: u64,
        name: &[u8],
        np: u64,
        nn: &[u8],
        flags: u32,
        ino: u64,
        (uid, gid): (u32, u32),
        t: i64,
        log: Log<'_>,
    ) -> Result<()> {
        if flags & !RENAME_NOREPLACE != 0 {
            return Err(Posix::Invalid("rename flags with RENAME_WHITEOUT").into());
        }
        let (src, dst) = self.check_rename(parent, name, np, nn, flags)?;
        if ino != self.next_ino {
            return Err(corrupt(format!(
                "new inode {ino}, expected {}",
                self.next_ino
            )));
        }
        log.append()?;
        if dst == Some(src) {
            return Ok(());
        }
        self.move_entry(parent, name, np, nn, src, dst, t);
        self.inodes.insert(
            ino,
            Box::new(Inode {
                uid,
                gid,
                ..Inode::fresh(Kind::CharDev, Data::Special, t)
            }),
        );
        self.next_ino = ino + 1;
        self.inode_mut(parent)
            .children_mut()
            .insert(name.to_vec(), ino);
        touch_dir(self.inode_mut(parent), t);
        touch_dir(self.inode_mut(np), t);
        Ok(())
    }

    /// Entry `name` of `parent` (inode `src`) moves to `nn` in `np`,
    /// replacing `dst` there if any (a rename that is not an exchange).
    #[allow(clippy::too_many_arguments)]
    fn move_entry(
        &mut self,
        parent: u64,
        name: &[u8],
        np: u64,
        nn: &[u8],
        src: u64,
        dst: Option<u64>,
        t: i64,
    ) {
        self.inode_mut(parent).children_mut().remove(name);
        if let Some(dst) = dst {
            self.drop_link(np, dst, t);
        }
        self.inode_mut(np).children_mut().insert(nn.to_vec(), src);
        let n = self.inode_mut(src);
        n.touch_meta(t);
        if n.kind == Kind::Dir {
            n.parent = np;
            self.inode_mut(parent).nlink -= 1;
            self.inode_mut(np).nlink += 1;
        }
    }

    /// The checks of a rename; the source inode and the destination's, if any.
    fn check_rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        flags: u32,
    ) -> Result<(u64, Option<u64>)> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return Err(Posix::Invalid("rename flags").into());
        }
        check_name(name)?;
        check_name(new_name)?;
        let &src = self.dir(parent)?.get(name).ok_or(Posix::NotFound)?;
        let dst = self.dir(new_parent)?.get(new_name).copied();
        let src_dir = self.inode(src)?.kind == Kind::Dir;
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or(Posix::NotFound)?;
            let dst_dir = self.inode(dst)?.kind == Kind::Dir;
            if (src_dir && self.is_ancestor(src, new_parent))
                || (dst_dir && self.is_ancestor(dst, parent))
            {
                return Err(Posix::Invalid("a directory cannot move below itself").into());
            }
            return Ok((src, Some(dst)));
        }
        if let Some(dst) = dst {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(Posix::Exists.into());
            }
            if dst == src {
                return Ok((src, Some(dst)));
            }
            let dst_dir = self.inode(dst)?.kind == Kind::Dir;
            match (src_dir, dst_dir) {
                (true, false) => return Err(Posix::NotDir.into()),
                (false, true) => return Err(Posix::IsDir.into()),
                (true, true) if !self.dir(dst)?.is_empty() => return Err(Posix::NotEmpty.into()),
                _ => {}
            }
        }
        if src_dir && self.is_ancestor(src, new_parent) {
            return Err(Posix::Invalid("a directory cannot move below itself").into());
        }
        Ok((src, dst))
    }

    /// Whether directory `a` is `d` or one of its ancestors.
    fn is_ancestor(&self, a: u64, mut d: u64) -> bool {
        for _ in 0..100_000 {
            if d == a {
                return true;
            }
            match self.inodes.get(&d) {
                Some(n) if n.parent != d => d = n.parent,
                _ => return false,
            }
        }
        true
    }

    /// One link of `ino` (found in `parent`) is gone.
    fn drop_link(&mut self, parent: u64, ino: u64, t: i64) {
        let n = self.inode_mut(ino);
        n.touch_meta(t);
        if n.kind == Kind::Dir {
            self.inodes.remove(&ino);
            self.base_trees.remove(&ino);
            self.inode_mut(parent).nlink -= 1;
            return;
        }
        n.nlink = n.nlink.saturating_sub(1);
        if n.nlink == 0 && n.open == 0 && !self.replaying {
            self.inodes.remove(&ino);
        }
    }

    // ------------------------------------------------------------ loading

    /// Give the entries of base tree `tree` (object `id`) inode numbers as
    /// children of `dir`.
    fn load(&mut self, dir: u64, id: ObjectId, tree: &Tree) {
        let mut kids = BTreeMap::new();
        for e in &tree.entries {
            if !servable(&e.name) || kids.contains_key(&e.name) {
                continue;
            }
            let linked = e.kind != Kind::Dir && e.link_id != 0;
            let reuse = linked
                .then(|| self.by_link.get(&e.link_id).copied())
                .flatten()
                .filter(|i| {
                    self.inodes
                        .get(i)
                        .is_some_and(|n| n.nlink > 0 && n.kind == e.kind)
                });
            let ino = match reuse {
                Some(i) => i,
                None => {
                    let i = self.next_ino;
                    self.next_ino += 1;
                    self.inodes.insert(i, Box::new(Inode::from_entry(e, dir)));
                    if linked {
                        self.by_link.insert(e.link_id, i);
                    }
                    i
                }
            };
            kids.insert(e.name.clone(), ino);
        }
        self.inode_mut(dir).data = Data::Dir(Dir::Loaded(kids));
        self.base_trees.insert(dir, id);
        self.park_queue.push_back(dir);
    }

    /// Load every unloaded directory and unpark every parked one (without
    /// journaling: used on a snapshot that is folded and thrown away).
    pub fn load_all(&mut self, store: &Store) -> Result<()> {
        let mut queue = VecDeque::from([ROOT_INO]);
        while let Some(d) = queue.pop_front() {
            match self.inodes[&d].data {
                Data::Dir(Dir::Unloaded(id)) => {
                    let tree = store.get_tree(&id, &format!("directory inode {d}"))?;
                    self.load(d, id, &tree);
                }
                Data::Dir(Dir::Parked(_)) => self.unpark(store, d)?,
                _ => {}
            }
            for &k in self.inodes[&d].children().expect("loaded").values() {
                if self.inodes[&k].kind == Kind::Dir {
                    queue.push_back(k);
                }
            }
        }
        Ok(())
    }
}
