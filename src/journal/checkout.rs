//! `storefs checkout`: put paths of a checkpoint into a fork exactly as they
//! are there, as ordinary journaled changes ([`Fork::checkout`]).
//!
//! Per path: whatever the fork has at it is removed (a directory with all
//! it holds), then the checkpoint's entry is created in its place (a
//! directory whole), or nothing when the checkpoint has none. Records used:
//! `Unlink`, `Create`, `Link`, `Share`, `Truncate`, `SetXattr`, `SetAttr`,
//! `SetFlags`. What is exact and what is not (docs/guide.md, "Undo one
//! path: checkout"):
//!
//! - exact: type, permission bits (setuid, setgid, sticky too), owner and
//!   group, mtime (atime is set to it, as a fork shows base files), size,
//!   holes (a file's data is one `Share` per stored extent, its holes stay
//!   holes: chunks are shared, not copied), xattrs (ACLs included, byte for
//!   byte, without the mode sync a setfacl does), symlink targets, device
//!   numbers, `chattr` flags (set last); hardlinks among the entries one checkout puts in (entries of
//!   one inode in the checkpoint become one inode again);
//! - not exact: ctime (now, as any change); inode numbers (new ones, even
//!   for files that did not differ: a process holding an old file keeps
//!   the old bytes, as after `rm` and `cp -a`); a hardlink between a
//!   checked-out entry and one outside the checked-out paths is not
//!   restored (the entry is a file of its own, with its link count within
//!   the checkout); the parent directory of each path gets mtime now (its
//!   entries changed), as do directories the checkout had to create above
//!   a path (they take the checkpoint's other metadata).
//!
//! Not atomic, as a copy is not: the changes of each path are journaled one
//! by one, and a crash part way keeps a prefix of them. The state lock is
//! held for each path in turn (a mount's other requests wait meanwhile), and
//! nothing is compared: an entry the fork already has as the checkpoint has
//! it is put in again. An entry the fork has at a path is removed whatever
//! its `chattr` flags (cleared first: a `SetFlags` record), and so is all it
//! holds; but a directory above a path that is immutable (or append-only,
//! for a removal) refuses the change with `EPERM` part way, as it refuses
//! any process (`chattr -i` it first). Before changing
//! anything every path is checked, so that a refusal (an unsafe path, the
//! root, a fork file where the checkpoint has a directory above a path)
//! leaves the fork as it was.

use std::collections::HashMap;

use super::state::{Ctx, Data, ForkState, check_name};
use super::{Error, Fork, Result};
use crate::store::model::{Posix, ROOT_INO, SetAttr, Time, XattrMode};
use crate::store::{Content, Entry, Kind, ObjectId};

/// What [`Fork::checkout`] did to one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// The checkpoint's entry is in place (whatever was there was removed first).
    Restored,
    /// The checkpoint has no such path; the fork's was removed.
    Removed,
    /// Neither has the path: nothing changed.
    Absent,
}

impl Done {
    pub fn name(self) -> &'static str {
        match self {
            Done::Restored => "restored",
            Done::Removed => "removed",
            Done::Absent => "absent",
        }
    }

    pub fn from_name(name: &str) -> Option<Done> {
        [Done::Restored, Done::Removed, Done::Absent]
            .into_iter()
            .find(|d| d.name() == name)
    }
}

/// What a checkout changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkout {
    /// Each path given, with what was done to it, in the order given.
    pub paths: Vec<(Vec<u8>, Done)>,
    /// Entries created (each file, directory, symlink, … and hardlink).
    pub created: u64,
    /// Entries removed (each one inside a removed directory too).
    pub removed: u64,
    /// Names whose entry changed, as (directory inode, name): what a
    /// mount's kernel must forget (it may cache a name, or its absence).
    pub names: Vec<(u64, Vec<u8>)>,
    /// Directories whose listing and attributes changed (the parents of
    /// `names`): what a mount's kernel must read again.
    pub dirs: Vec<u64>,
}

/// A path [`relative_path`] refuses: what is wrong with it, and the fix
/// that is no command (the CLI adds the command that checks out the root
/// itself: a new fork, `cli/hint.rs`).
#[derive(Debug, thiserror::Error)]
pub enum BadPath {
    /// Absolute, but under none of the anchors (listed, or empty).
    #[error(
        "path '{path}' is absolute but not under the fork's origin or mountpoint ({}); give it relative to the checkpoint's root",
        if anchors.is_empty() { "it has none".to_string() } else { anchors.join(", ") }
    )]
    Outside { path: String, anchors: Vec<String> },
    #[error(
        "path '{0}' has a '..' component, which could leave the fork; give the path without it, relative to the checkpoint's root"
    )]
    DotDot(String),
    #[error("path '{0}' holds a NUL byte; give a real path")]
    Nul(String),
    #[error("path '{0}' is the fork's root; check out the paths under it")]
    Root(String),
}

/// `raw` as a path relative to a fork's root: relative already, or
/// absolute under one of `anchors` (the fork's origin, its mountpoint);
/// empty and `.` components dropped. Refused, with the reason, when it has
/// a `..` component, is absolute elsewhere, or names the root.
pub fn relative_path(raw: &[u8], anchors: &[&[u8]]) -> std::result::Result<Vec<u8>, BadPath> {
    let shown = String::from_utf8_lossy(raw).into_owned();
    let rest = if raw.first() == Some(&b'/') {
        let under = anchors.iter().find_map(|a| {
            let a = a.strip_suffix(b"/").unwrap_or(a);
            let rest = raw.strip_prefix(a)?;
            (rest.is_empty() || rest[0] == b'/').then_some(rest)
        });
        match under {
            Some(rest) => rest,
            None => {
                return Err(BadPath::Outside {
                    path: shown,
                    anchors: anchors
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect(),
                });
            }
        }
    } else {
        raw
    };
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in rest.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err(BadPath::DotDot(shown)),
            c if c.contains(&0) => return Err(BadPath::Nul(shown)),
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Err(BadPath::Root(shown));
    }
    Ok(parts.join(&b'/'))
}

/// The checkpoint's entries on the way to a path: each directory above it,
/// then the path's own entry when the checkpoint has it.
struct Lineage {
    /// `components[i]`'s entry, for as many as exist (the last may be a non-directory).
    entries: Vec<Entry>,
    components: Vec<Vec<u8>>,
}

impl Lineage {
    fn target(&self) -> Option<&Entry> {
        (self.entries.len() == self.components.len()).then(|| self.entries.last())?
    }
}

impl Fork {
    /// Put each of `paths` (relative to the root, as [`relative_path`]
    /// gives them) into this fork as it is in checkpoint `target` (see the
    /// module docs); `target` may be this fork's own head (undo what the
    /// journal holds at those paths). Missing directories above a path are
    /// made as the checkpoint has them.
    pub fn checkout(&self, target: &ObjectId, paths: &[Vec<u8>]) -> Result<Checkout> {
        let mut out = Checkout::default();
        self.checkout_into(target, paths, &mut out)?;
        out.names.sort();
        out.names.dedup();
        out.dirs.sort_unstable();
        out.dirs.dedup();
        Ok(out)
    }

    /// [`Fork::checkout`], telling `out` as it goes: after a failure part
    /// way, `out` holds the names and directories changed so far (what a
    /// mount's kernel must still forget).
    pub fn checkout_into(
        &self,
        target: &ObjectId,
        paths: &[Vec<u8>],
        out: &mut Checkout,
    ) -> Result<()> {
        let store = self.store().clone();
        let record = store.read_checkpoint(target)?;
        let root = store.root_entry(&record)?;
        let mut lines = Vec::with_capacity(paths.len());
        for p in paths {
            if relative_path(p, &[]).ok().as_deref() != Some(p.as_slice()) {
                return Err(Error::Refused(format!(
                    "path '{}' is not a plain relative path (no '.', '..' or empty components, not the root)",
                    String::from_utf8_lossy(p)
                )));
            }
            let components: Vec<Vec<u8>> = p.split(|&b| b == b'/').map(<[u8]>::to_vec).collect();
            let mut entries = Vec::new();
            let mut dir = root.clone();
            for c in &components {
                let Content::Tree(id) = dir.content else {
                    break;
                };
                let tree = store.get_tree(&id, &String::from_utf8_lossy(p))?;
                let Some(e) = tree.entries.into_iter().find(|e| e.name == *c) else {
                    break;
                };
                entries.push(e.clone());
                dir = e;
            }
            lines.push(Lineage {
                entries,
                components,
            });
        }
        // Every path checked before anything changes.
        for (p, l) in paths.iter().zip(&lines) {
            self.with(|st, ctx| check_above(st, ctx, p, l))?;
        }
        let mut links = HashMap::new();
        for (p, l) in paths.iter().zip(&lines) {
            let done = self.with(|st, ctx| {
                let mut put = Put {
                    st,
                    ctx,
                    links: &mut links,
                    out: &mut *out,
                };
                put.path(l)
            })?;
            out.paths.push((p.clone(), done));
        }
        Ok(())
    }
}

/// Refuse path `p` when a directory the checkpoint has above it is a
/// non-directory in the fork (replacing it would change more than `p`).
fn check_above(st: &mut ForkState, ctx: &Ctx<'_>, p: &[u8], l: &Lineage) -> Result<()> {
    let mut dir = ROOT_INO;
    let above = l.components.len() - 1;
    for (i, c) in l.components[..above].iter().enumerate() {
        let ino = match st.lookup(ctx, dir, c) {
            Ok(ino) => ino,
            Err(Error::Posix(Posix::NotFound)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if st.inode(ino)?.kind != Kind::Dir {
            let at = l.components[..=i].join(&b'/');
            if l.entries.len() > i && l.entries[i].kind == Kind::Dir {
                return Err(Error::Refused(format!(
                    "cannot check out '{}': the fork has {} at '{}' where the target has a directory; check out '{}' itself",
                    String::from_utf8_lossy(p),
                    st.inode(ino)?.kind.described(),
                    String::from_utf8_lossy(&at),
                    String::from_utf8_lossy(&at)
                )));
            }
            // Neither has a directory there: the path is absent from both.
            return Ok(());
        }
        dir = ino;
    }
    Ok(())
}

/// One checkout's changes, under the state lock.
struct Put<'a, 'b> {
    st: &'a mut ForkState,
    ctx: &'a Ctx<'b>,
    /// A checkpoint hardlink id → the inode made for its first entry.
    links: &'a mut HashMap<u64, u64>,
    out: &'a mut Checkout,
}

impl Put<'_, '_> {
    fn path(&mut self, l: &Lineage) -> Result<Done> {
        let target = l.target();
        let last = l.components.len() - 1;
        // The directories above: found, or made as the checkpoint has them.
        let mut dir = ROOT_INO;
        for (i, c) in l.components[..last].iter().enumerate() {
            match self.st.lookup(self.ctx, dir, c) {
                Ok(ino) if self.st.inode(ino)?.kind == Kind::Dir => dir = ino,
                // A non-directory above (check_above let it pass: the
                // checkpoint has none there either), or nothing.
                Ok(_) | Err(Error::Posix(Posix::NotFound)) if target.is_none() => {
                    return Ok(Done::Absent);
                }
                Err(Error::Posix(Posix::NotFound)) => {
                    let e = &l.entries[i];
                    self.out.names.push((dir, c.clone()));
                    self.out.dirs.push(dir);
                    let ino = self.make(dir, e, false)?;
                    self.set_times(ino, e)?;
                    dir = ino;
                }
                // check_above refused this before anything changed.
                Ok(_) => {
                    return Err(Error::Refused(format!(
                        "a non-directory in the fork at '{}', above a path the target has",
                        String::from_utf8_lossy(&l.components[..=i].join(&b'/'))
                    )));
                }
                Err(e) => return Err(e),
            }
        }
        let name = &l.components[last];
        let had = match self.st.lookup(self.ctx, dir, name) {
            Ok(_) => true,
            Err(Error::Posix(Posix::NotFound)) => false,
            Err(e) => return Err(e),
        };
        if target.is_none() && !had {
            return Ok(Done::Absent);
        }
        // Told before the change, so that a failure part way still tells it.
        self.out.names.push((dir, name.clone()));
        self.out.dirs.push(dir);
        if had {
            self.remove(dir, name)?;
        }
        match target {
            Some(e) => {
                self.put(dir, e)?;
                Ok(Done::Restored)
            }
            None => Ok(Done::Removed),
        }
    }

    /// Remove `name` from `dir`, a directory with everything in it.
    fn remove(&mut self, dir: u64, name: &[u8]) -> Result<()> {
        let ino = self.st.lookup(self.ctx, dir, name)?;
        // What it removes goes whatever its `chattr` flags (a checkout is
        // the store owner's, not a process's through the mount).
        if self.st.flags(ino)? != 0 {
            self.st.set_flags(self.ctx, ino, 0)?;
        }
        let is_dir = self.st.inode(ino)?.kind == Kind::Dir;
        if is_dir {
            let (_, kids) = self.st.readdir(self.ctx, ino)?;
            for k in kids {
                self.remove(ino, &k.name)?;
            }
        }
        self.st.remove(self.ctx, dir, name, is_dir)?;
        self.out.removed += 1;
        Ok(())
    }

    /// Create `e` in `dir`, a directory whole, with all its metadata.
    fn put(&mut self, dir: u64, e: &Entry) -> Result<()> {
        // (An inode made for an earlier path that a later, overlapping one
        // removed is not linked to: the entry is made afresh.)
        if e.kind != Kind::Dir
            && e.link_id != 0
            && let Some(&ino) = self.links.get(&e.link_id)
            && self.st.linked(ino)
        {
            self.st.link(self.ctx, ino, dir, &e.name)?;
            self.out.created += 1;
            return Ok(());
        }
        let ino = self.make(dir, e, true)?;
        if e.kind != Kind::Dir && e.link_id != 0 {
            self.links.insert(e.link_id, ino);
        }
        if let Content::Tree(id) = &e.content {
            let what = String::from_utf8_lossy(&e.name).into_owned();
            let tree = self.ctx.store.get_tree(id, &what)?;
            let mut seen = std::collections::HashSet::new();
            for kid in &tree.entries {
                // As a fork loads a base directory: bad or repeated names skipped.
                if check_name(&kid.name).is_ok() && seen.insert(&kid.name) {
                    self.put(ino, kid)?;
                }
            }
        }
        // Last: creating the children moved a directory's mtime; then the
        // `chattr` flags, which would refuse both.
        self.set_times(ino, e)?;
        if e.flags != 0 {
            self.st.set_flags(self.ctx, ino, e.flags)?;
        }
        Ok(())
    }

    /// A new inode for `e` in `dir`: type, mode, owner, device number or
    /// symlink target, xattrs, and (`data`) a file's bytes; not its times.
    fn make(&mut self, dir: u64, e: &Entry, data: bool) -> Result<u64> {
        let target = match &e.content {
            Content::Target(t) if e.kind == Kind::Symlink => Some(t.clone()),
            _ => None,
        };
        let ino = self.st.create(
            self.ctx, dir, &e.name, e.kind, e.perm, e.uid, e.gid, e.rdev, target,
        )?;
        self.out.created += 1;
        if data
            && e.kind == Kind::File
            && let Content::Extents(ext) = &e.content
        {
            let mut at = 0u64;
            for x in ext {
                if let Some(id) = x.id
                    && x.len > 0
                {
                    self.st.share(self.ctx, ino, at, id, 0, x.len)?;
                }
                at = at.saturating_add(x.len);
            }
            let size = match &self.st.inode(ino)?.data {
                Data::File(f) => f.size,
                _ => 0,
            };
            if size != e.size {
                let grow = SetAttr {
                    size: Some(e.size),
                    ..SetAttr::default()
                };
                self.st.setattr(self.ctx, ino, &grow)?;
            }
        }
        for (name, value) in &e.xattrs {
            self.st
                .setxattr(self.ctx, ino, name, value, XattrMode::Any)?;
        }
        Ok(ino)
    }

    fn set_times(&mut self, ino: u64, e: &Entry) -> Result<()> {
        let times = SetAttr {
            atime: Some(Time::At(e.mtime_ns)),
            mtime: Some(Time::At(e.mtime_ns)),
            ..SetAttr::default()
        };
        self.st.setattr(self.ctx, ino, &times)
    }
}

#[cfg(test)]
mod tests {
    use super::relative_path;

    #[test]
    fn paths_are_made_relative_or_refused() {
        let anchors: &[&[u8]] = &[b"/srv/s1", b"/tmp/mnt/"];
        let ok = |p: &[u8]| relative_path(p, anchors).unwrap();
        assert_eq!(ok(b"a/b"), b"a/b");
        assert_eq!(ok(b"./a//b/"), b"a/b");
        assert_eq!(ok(b"/srv/s1/a/b"), b"a/b");
        assert_eq!(ok(b"/tmp/mnt/a"), b"a");
        let err = |p: &[u8]| relative_path(p, anchors).unwrap_err().to_string();
        assert!(err(b"a/../b").contains("'..'"), "{}", err(b"a/../b"));
        assert!(err(b"..").contains("'..'"));
        assert!(err(b"/srv/s10/a").contains("not under the fork's origin"));
        assert!(err(b"/etc/passwd").contains("/srv/s1, /tmp/mnt/"));
        assert!(err(b"/srv/s1").contains("is the fork's root"));
        assert!(err(b".").contains("is the fork's root"));
    }
}
