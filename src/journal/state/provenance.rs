//! Provenance of changes (`journal/ops.rs`): the `Who` record, and the
//! operation log every change record adds to, live and on replay alike
//! (both go through [`ForkState::run`], writes through `write_at_time`).
//!
//! Paths are resolved from the state just before the change applies, so a
//! log entry names the path the change was made at (a file renamed later
//! keeps its old path in earlier entries). A file's name is found through
//! [`OpsLog::names`] (set by creates and renames, checked against the
//! directory before use) or, for a base file, in the directory it was loaded
//! into; a file that has no name any more (unlinked while open) shows as
//! `<unlinked inode N>`.

use std::collections::HashMap;
use std::sync::Arc;

use super::super::ops::{LogPath, MAX_DIR_PATHS, MAX_NAMES, Op, Who};
use super::super::record::{RENAME_EXCHANGE, Record};
use super::inode::Inode;
use super::{Ctx, ForkState};
use crate::journal::Result;
use crate::store::Kind;
use crate::store::intmap::IntMap;
use crate::store::model::ROOT_INO;

/// A name to remember for an inode: (ino, dir, name); no name forgets the
/// inode's name if it is in `dir`.
type Naming = (u64, u64, Option<Arc<[u8]>>);

/// What a change will add to the log, found before it applies.
pub(super) enum Note {
    /// Nothing (bookkeeping records).
    None,
    /// A new entry, and names to remember for inodes.
    New(Op, Vec<Naming>),
    /// More of the last entry: one more write of `bytes` over `range`.
    More { bytes: u64, range: [u64; 2] },
}

impl ForkState {
    /// Before a live change record is appended: the journal names its
    /// requester (`ctx.who`) unless the last `Who` of the segment does.
    pub(super) fn claim(&mut self, ctx: &Ctx<'_>) -> Result<()> {
        let who = &ctx.who;
        if Arc::ptr_eq(who, &self.ops.current) || **who == *self.ops.current {
            return Ok(());
        }
        ctx.wal.append(&Record::Who(Who::clone(who)).encode())?;
        self.ops.current = who.clone();
        Ok(())
    }

    /// Replay of a `Who` record: the changes after it are its requester's.
    pub(super) fn replay_who(&mut self, who: &Who) {
        self.ops.current = Arc::new(who.clone());
    }

    /// What `rec` adds to the log, looked up before it applies.
    pub(super) fn note(&mut self, rec: &Record) -> Note {
        let (op, ino, path, new_path, t) = match rec {
            Record::Create {
                parent,
                name,
                ino,
                kind,
                time_ns,
                ..
            } => {
                let op = match kind {
                    Kind::File => "create",
                    Kind::Dir => "mkdir",
                    Kind::Symlink => "symlink",
                    _ => "mknod",
                };
                let path = self.child_path(*parent, name);
                let naming = vec![(*ino, *parent, path.name.clone())];
                return Note::New(self.op(op, *ino, path, None, *time_ns), naming);
            }
            Record::Link {
                ino,
                parent,
                name,
                time_ns,
            } => ("link", *ino, self.child_path(*parent, name), None, *time_ns),
            Record::Unlink {
                parent,
                name,
                time_ns,
            } => {
                self.ops.last_path = None;
                let child = self.child(*parent, name);
                let dir = child
                    .and_then(|c| self.inodes.get(&c))
                    .is_some_and(|n| n.kind == Kind::Dir);
                let op = if dir { "rmdir" } else { "unlink" };
                let path = self.child_path(*parent, name);
                let op = self.op(op, child.unwrap_or(0), path, None, *time_ns);
                if let (true, Some(c)) = (dir, child) {
                    self.ops.dir_paths.remove(&c);
                }
                // The name goes (the last one: the inode's entry is dropped).
                return Note::New(op, vec![(child.unwrap_or(0), *parent, None)]);
            }
            Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                time_ns,
            } => {
                let exchange = flags & RENAME_EXCHANGE != 0;
                return self.note_rename(
                    (*parent, name),
                    (*new_parent, new_name),
                    exchange,
                    None,
                    *time_ns,
                );
            }
            // A file with no name: its path is `<unlinked inode N>` (left
            // out of a revert) until a `link` names it.
            Record::Tmpfile { ino, time_ns, .. } => {
                let op = self.op("tmpfile", *ino, unlinked(*ino), None, *time_ns);
                return Note::New(op, Vec::new());
            }
            // A rename, as any; the whiteout left at the old name is not an
            // entry of its own.
            Record::RenameWhiteout {
                parent,
                name,
                new_parent,
                new_name,
                ino,
                time_ns,
                ..
            } => {
                return self.note_rename(
                    (*parent, name),
                    (*new_parent, new_name),
                    false,
                    Some(*ino),
                    *time_ns,
                );
            }
            Record::Write {
                ino,
                offset,
                time_ns,
                data,
            } => return self.note_write(*ino, *offset, data.len() as u64, *time_ns),
            Record::Share {
                ino,
                offset,
                len,
                time_ns,
                ..
            } => {
                let mut op = self.op_of("copy_file_range", *ino, *time_ns);
                op.bytes = *len;
                op.range = Some([*offset, offset.saturating_add(*len)]);
                return Note::New(op, Vec::new());
            }
            Record::Truncate { ino, size, time_ns } => {
                let mut op = self.op_of("truncate", *ino, *time_ns);
                op.size = Some(*size);
                return Note::New(op, Vec::new());
            }
            Record::PunchHole {
                ino,
                offset,
                len,
                time_ns,
            } => {
                let mut op = self.op_of("punch_hole", *ino, *time_ns);
                op.range = Some([*offset, offset.saturating_add(*len)]);
                return Note::New(op, Vec::new());
            }
            Record::SetAttr {
                ino,
                perm,
                uid,
                gid,
                ctime,
                ..
            } => {
                let op = if uid.is_some() || gid.is_some() {
                    "chown"
                } else if perm.is_some() {
                    "chmod"
                } else {
                    "utimes"
                };
                (op, *ino, self.path(*ino), None, *ctime)
            }
            Record::SetXattr { ino, time_ns, .. } => {
                ("setxattr", *ino, self.path(*ino), None, *time_ns)
            }
            Record::RemoveXattr { ino, time_ns, .. } => {
                ("removexattr", *ino, self.path(*ino), None, *time_ns)
            }
            Record::SetFlags { ino, time_ns, .. } => {
                ("chattr", *ino, self.path(*ino), None, *time_ns)
            }
            Record::LoadDir { .. } | Record::InodeMap(_) | Record::Atimes(_) | Record::Who(_) => {
                return Note::None;
            }
        };
        Note::New(self.op(op, ino, path, new_path, t), Vec::new())
    }

    /// A rename of `from` (directory, name) to `to`: an exchange when
    /// `exchange` (the other entry gets `from`'s name), or leaving whiteout
    /// `whiteout` at `from`'s name. A directory moved changes the paths
    /// below it (and a directory replaced is gone): the directory paths
    /// are forgotten.
    fn note_rename(
        &mut self,
        (parent, name): (u64, &[u8]),
        (new_parent, new_name): (u64, &[u8]),
        exchange: bool,
        whiteout: Option<u64>,
        time_ns: i64,
    ) -> Note {
        self.ops.last_path = None;
        let src = self.child(parent, name).unwrap_or(0);
        let path = self.child_path(parent, name);
        let to = self.child_path(new_parent, new_name);
        let mut naming = vec![(src, new_parent, to.name.clone())];
        if exchange && let Some(dst) = self.child(new_parent, new_name) {
            naming.push((dst, parent, path.name.clone()));
        }
        if let Some(w) = whiteout {
            naming.push((w, parent, path.name.clone()));
        }
        let is_dir = |i: Option<u64>| {
            i.and_then(|i| self.inodes.get(&i))
                .is_some_and(|n| n.kind == Kind::Dir)
        };
        if is_dir(Some(src)) || is_dir(self.child(new_parent, new_name)) {
            self.ops.dir_paths.clear();
        }
        let op = if exchange { "exchange" } else { "rename" };
        Note::New(self.op(op, src, path, Some(to), time_ns), naming)
    }

    /// What a write of `len` bytes at `offset` of `ino` adds: more of the
    /// last entry when that is this requester's write to the same file.
    pub(super) fn note_write(&mut self, ino: u64, offset: u64, len: u64, t: i64) -> Note {
        let end = offset.saturating_add(len);
        let ops = &self.ops;
        if let Some(last) = ops.entries.last()
            && last.op == "write"
            && last.ino == ino
            && Arc::ptr_eq(&last.who, &ops.current)
        {
            return Note::More {
                bytes: len,
                range: [offset, end],
            };
        }
        let mut op = self.op_of("write", ino, t);
        op.bytes = len;
        op.range = Some([offset, end]);
        Note::New(op, Vec::new())
    }

    /// The change `note` was found for took effect: log it.
    pub(super) fn noted(&mut self, note: Note) {
        match note {
            Note::None => {}
            Note::New(op, naming) => {
                for (ino, dir, name) in naming {
                    if let Some(name) = name {
                        insert_bounded(&mut self.ops.names, MAX_NAMES, ino, (dir, name));
                    } else if self.ops.names.get(&ino).is_some_and(|(d, _)| *d == dir) {
                        self.ops.names.remove(&ino);
                    }
                }
                self.ops.push(op);
            }
            Note::More { bytes, range } => {
                let last = self.ops.entries.last_mut().expect("checked by note_write");
                last.count += 1;
                last.bytes += bytes;
                last.range = Some(match last.range {
                    Some([a, b]) => [a.min(range[0]), b.max(range[1])],
                    None => range,
                });
            }
        }
    }

    /// A new entry for a change of inode `ino` at time `t`.
    fn op_of(&mut self, op: &'static str, ino: u64, t: i64) -> Op {
        let path = self.path(ino);
        self.op(op, ino, path, None, t)
    }

    fn op(
        &self,
        op: &'static str,
        ino: u64,
        path: LogPath,
        new_path: Option<LogPath>,
        t: i64,
    ) -> Op {
        Op {
            time_ns: t,
            op,
            path,
            new_path,
            who: self.ops.current.clone(),
            bytes: 0,
            count: 1,
            range: None,
            size: None,
            ino,
        }
    }

    /// The inode named `name` in loaded directory `dir`.
    pub(super) fn child(&self, dir: u64, name: &[u8]) -> Option<u64> {
        entries(&self.inodes, dir)?.get(name).copied()
    }

    /// The path of `name` in directory `dir`.
    fn child_path(&mut self, dir: u64, name: &[u8]) -> LogPath {
        match self.dir_path(dir) {
            Some(dir) => LogPath {
                dir,
                name: Some(Arc::from(name)),
            },
            None => unlinked(dir),
        }
    }

    /// The path of inode `ino` from the root ("" for the root): a
    /// directory's from [`super::super::ops::OpsLog::dir_paths`], else its
    /// directory's path and its name.
    fn path(&mut self, ino: u64) -> LogPath {
        if ino == ROOT_INO {
            return LogPath::default();
        }
        if let Some((last, path)) = &self.ops.last_path
            && *last == ino
        {
            return path.clone();
        }
        let path = self.resolve(ino);
        self.ops.last_path = Some((ino, path.clone()));
        path
    }

    /// [`Self::path`], found.
    fn resolve(&mut self, ino: u64) -> LogPath {
        if let Some(known) = self.ops.dir_paths.get(&ino) {
            return LogPath {
                dir: known.clone(),
                name: None,
            };
        }
        let named = name_of(&self.inodes, &mut self.ops.names, ino);
        let Some((dir, name)) = named else {
            return unlinked(ino);
        };
        let Some(dir_path) = self.dir_path(dir) else {
            return unlinked(ino);
        };
        let path = LogPath {
            dir: dir_path,
            name: Some(name),
        };
        if self.inodes.get(&ino).is_some_and(|n| n.kind == Kind::Dir) {
            let whole = Arc::from(path.bytes());
            insert_bounded(&mut self.ops.dir_paths, MAX_DIR_PATHS, ino, whole);
        }
        path
    }

    /// The path of directory `dir` ("" for the root), kept in
    /// [`super::super::ops::OpsLog::dir_paths`]; `None` if it has no name.
    fn dir_path(&mut self, dir: u64) -> Option<Arc<[u8]>> {
        if dir == ROOT_INO {
            return Some(Arc::default());
        }
        if let Some(known) = self.ops.dir_paths.get(&dir) {
            return Some(known.clone());
        }
        // Built from the end: each name reversed onto one buffer, the whole
        // reversed once.
        let mut path = Vec::new();
        let mut above: Option<&[u8]> = None;
        let (mut at, mut depth) = (dir, 0);
        while at != ROOT_INO {
            if let Some(known) = self.ops.dir_paths.get(&at) {
                above = Some(known);
                break;
            }
            // A directory cannot be its own ancestor; a bound all the same.
            let (parent, name) = (depth < 4096)
                .then(|| name_of(&self.inodes, &mut self.ops.names, at))
                .flatten()?;
            if depth > 0 {
                path.push(b'/');
            }
            path.extend(name.iter().rev());
            (at, depth) = (parent, depth + 1);
        }
        if let Some(known) = above.filter(|k| !k.is_empty()) {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend(known.iter().rev());
        }
        path.reverse();
        let path: Arc<[u8]> = Arc::from(path);
        insert_bounded(&mut self.ops.dir_paths, MAX_DIR_PATHS, dir, path.clone());
        Some(path)
    }
}

/// The path of an inode that has no name any more.
fn unlinked(ino: u64) -> LogPath {
    LogPath::whole(format!("<unlinked inode {ino}>").as_bytes())
}

/// A loaded directory's entries.
fn entries(
    inodes: &HashMap<u64, Box<Inode>>,
    dir: u64,
) -> Option<&std::collections::BTreeMap<Vec<u8>, u64>> {
    inodes.get(&dir)?.children()
}

/// Where `ino` is named: the name remembered if its directory still has
/// it, else found in the directory it was loaded into (a directory's
/// parent, or a base file's), and remembered.
fn name_of(
    inodes: &HashMap<u64, Box<Inode>>,
    names: &mut IntMap<u64, (u64, Arc<[u8]>)>,
    ino: u64,
) -> Option<(u64, Arc<[u8]>)> {
    if let Some((dir, name)) = names.get(&ino)
        && entries(inodes, *dir).and_then(|k| k.get(&name[..])) == Some(&ino)
    {
        return Some((*dir, name.clone()));
    }
    let dir = inodes.get(&ino)?.parent;
    let (name, _) = entries(inodes, dir)?.iter().find(|(_, i)| **i == ino)?;
    let name: Arc<[u8]> = Arc::from(&name[..]);
    insert_bounded(names, MAX_NAMES, ino, (dir, name.clone()));
    Some((dir, name))
}

/// Insert into a cache of at most `max` entries, emptied when full (what it
/// forgets is found again, more slowly).
fn insert_bounded<V>(map: &mut IntMap<u64, V>, max: usize, key: u64, value: V) {
    if map.len() >= max {
        map.clear();
    }
    map.insert(key, value);
}
