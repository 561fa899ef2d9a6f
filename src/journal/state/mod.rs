//! The in-memory state of a fork: an inode table over a base checkpoint, and
//! the one place records change it.
//!
//! Every change is a [`Record`]. Each record kind is one `record_*` function
//! in the module of its family: its checks, then [`Log::append`], then its
//! effect, side by side. A live operation builds the record and runs it
//! ([`ForkState::log`]: the record is appended to the journal between the
//! checks and the effect); replay runs the same function on each record read
//! back ([`ForkState::apply`]: the record is in the journal already). One code
//! path for both, so they cannot diverge.
//!
//! - `inode.rs`: the inode table ([`Inode`], [`Data`], [`Dir`]), `stat`.
//! - `extents.rs`: file data as pieces of base objects and journal records.
//! - `namespace.rs`: directory entries: `LoadDir`, `Create`, `Link`,
//!   `Unlink`, `Rename` and the operations that log them.
//! - `data.rs`: `Write`, `Truncate`, `PunchHole`; write, fallocate, reads.
//! - `attrs.rs`: `SetAttr`, `SetXattr`, `RemoveXattr`; setattr, ACLs.
//! - `flags.rs`: `SetFlags` (`chattr`), and what immutable and append-only
//!   inodes refuse ([`ForkState::log`] asks it of every live record).
//! - `replay.rs`: replay, and the `InodeMap` and `Atimes` a commit writes.
//! - `park.rs`: bounding the table: unchanged directories put away and
//!   brought back with the same numbers.
//!
//! The record format is `record.rs`, grouped the same way. Adding a record
//! kind touches three places, and the compiler points at the last two:
//! 1. one row of the `records!` table in `record.rs`: its tag, its variant
//!    with its fields in on-disk order (that makes its encoding and
//!    decoding), and the inodes it names ([`Record::inodes`]: what a replay
//!    brings back before it runs, `park.rs`);
//! 2. its `record_*` function in its family's module (checks, [`Log::append`],
//!    effect);
//! 3. one arm in [`ForkState::run`] calling it, and one in `note`
//!    (`provenance.rs`: what the operation log says of it).
//!
//! A record that changes nothing in the tree (as `LoadDir`, `InodeMap`,
//! `Atimes`, `Who`) is also left out of what counts as a change:
//! [`ForkState::log`] and [`ForkState::run`] here, and
//! `has_uncommitted_changes` and the replay's count in `fork.rs`. A new tag is a format change
//! (docs/journal.md: an older storefs refuses a journal holding it).
//!
//! **Inode numbers** must come out the same on replay, because records name
//! inodes. The root is 1. Base directories are loaded lazily: loading gives
//! the children consecutive new numbers from `next_ino`, in name order (a
//! hardlinked base entry whose `link_id` already has a live inode reuses it),
//! and is itself a record (`LoadDir`) so replay loads at the same point.
//! New inodes take `next_ino` too (recorded in `Create`). Numbers are never
//! reused. A commit writes an `InodeMap` that rebinds these numbers onto the
//! committed tree (see [`ForkState::inode_map`] and `bind_inode_map`).

mod attrs;
mod data;
mod extents;
mod flags;
mod inode;
mod namespace;
mod park;
mod piecemap;
mod provenance;
mod replay;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

pub use extents::ReadPlan;
pub use extents::{FileData, Piece, Src, data_ranges, journal_spans, plan};
#[cfg(test)]
pub use extents::{SPAN_MAX, punch};
pub use inode::{Data, Dir, Inode, Parked, TreeCache};
pub use namespace::check_name;
pub use park::{Budget, INODE_BYTES};
pub use piecemap::PieceMap;

use super::ops::{OpsLog, Who};
use super::record::Record;
use super::wal::{Pos, Wal};
use super::{Error, Result};
use crate::store::model::ROOT_INO;
use crate::store::{Entry, Extent, ObjectId, Store};
use attrs::AttrChange;

/// The fork's inodes.
#[derive(Clone, Debug)]
pub struct ForkState {
    /// Boxed: a table of 40,000 inodes has 65,536 slots, and each empty
    /// one would take an inode's 176 bytes.
    pub inodes: HashMap<u64, Box<Inode>>,
    pub next_ino: u64,
    /// Base link ids that have an inode.
    pub by_link: HashMap<u64, u64>,
    /// During replay, unlinked files are kept (later records may still write
    /// to them, as an open handle did) and dropped by `finish_replay`.
    pub replaying: bool,
    /// The next record applied is the first of the replay: an `InodeMap`
    /// there rebinds numbers instead of being checked.
    pub fresh: bool,
    /// The record replayed last was an `InodeMap`: bound (`Some(true)`, the
    /// first of the replay) or checked (`Some(false)`). An `Atimes` record
    /// may follow only one (`replay.rs`).
    pub after_map: Option<bool>,
    /// Records that changed the tree (not directory loads), replayed or
    /// appended, that no commit has folded yet: a commit with none to fold
    /// has nothing to do.
    pub changes: u64,
    /// Counts changes to inodes ([`Inode::stamp`]).
    pub stamp: u64,
    /// Parking (`park.rs`), none of it journaled: the tree each directory
    /// was loaded from (or a commit stored for it since), the loaded directories in the order to
    /// park them, the parked files' inode numbers as runs (first → (length,
    /// directory)), how many inodes are parked, how many times a directory
    /// was brought back, and the table's bound; the parked files' atimes.
    pub base_trees: HashMap<u64, ObjectId>,
    pub park_queue: VecDeque<u64>,
    pub parked_runs: BTreeMap<u64, (u64, u64)>,
    pub parked: u64,
    /// The access times of parked files whose atime is not their mtime
    /// (a parked file comes back from its tree, which keeps no atime).
    pub parked_atimes: HashMap<u64, i64>,
    pub unparked: u64,
    pub budget: park::Budget,
    /// The operations since the last commit, and who the journal's next
    /// change records belong to (`provenance.rs`).
    pub ops: OpsLog,
}

/// What live operations need besides the state.
pub struct Ctx<'a> {
    pub store: &'a Store,
    pub wal: &'a Wal,
    /// Who asked for the change (`journal::ops::on_behalf_of`).
    pub who: Arc<Who>,
}

/// Where a checked record goes before it takes effect.
pub(super) enum Log<'a> {
    /// A live operation: append the record to the journal now.
    Append { wal: &'a Wal, rec: &'a Record },
    /// A live write: append a `Write` record's payload as `head` then `data`
    /// (the data is not copied into a record).
    AppendParts {
        wal: &'a Wal,
        head: &'a [u8],
        data: &'a [u8],
    },
    /// Replay: the record is in the journal already, its frame at `pos`
    /// with a payload of `plen` bytes.
    Replayed { pos: Pos, plen: u64 },
}

impl Log<'_> {
    /// Put the record in the journal (live) and say where its frame is and
    /// how long its payload: a `Write`'s data is read back from there.
    fn append(self) -> Result<(Pos, u64)> {
        match self {
            Log::Append { wal, rec } => {
                let payload = rec.encode();
                Ok((wal.append(&payload)?, payload.len() as u64))
            }
            Log::AppendParts { wal, head, data } => Ok((
                wal.append_parts(head, data)?,
                (head.len() + data.len()) as u64,
            )),
            Log::Replayed { pos, plen } => Ok((pos, plen)),
        }
    }
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt {
        path: Default::default(),
        detail: detail.into(),
    }
}

impl ForkState {
    /// A state holding only the root directory of a base checkpoint.
    pub fn new(root: &Entry) -> ForkState {
        let mut inodes = HashMap::new();
        let mut r = Inode::from_entry(root, ROOT_INO);
        r.link_id = 0;
        inodes.insert(ROOT_INO, Box::new(r));
        ForkState {
            inodes,
            next_ino: ROOT_INO + 1,
            by_link: HashMap::new(),
            replaying: false,
            fresh: true,
            after_map: None,
            changes: 0,
            stamp: 0,
            base_trees: HashMap::new(),
            park_queue: VecDeque::new(),
            parked_runs: BTreeMap::new(),
            parked: 0,
            parked_atimes: HashMap::new(),
            unparked: 0,
            budget: park::Budget::unbounded(),
            ops: OpsLog::default(),
        }
    }

    /// About how many bytes of memory the inode table holds: every inode
    /// with its names, xattrs, symlink target and piece lists, plus the
    /// tables' own slots and what parked directories keep. An estimate for
    /// `status` (it walks the table); parking keeps the unchanged part of
    /// the table within its budget, what changed stays until a commit.
    pub fn memory_estimate(&self) -> usize {
        // A hash map slot: key, value and control byte, at 7/8 load.
        let slot = |value: usize| (8 + value + 1) * 8 / 7;
        // A BTreeMap entry: key and value plus about a quarter of a node's overhead.
        const BTREE_ENTRY: usize = 24;
        let mut bytes = self.inodes.capacity() * slot(8)
            + self.inodes.len() * std::mem::size_of::<Inode>()
            + self.by_link.capacity() * slot(8)
            + self.base_trees.capacity() * slot(32)
            + self.park_queue.capacity() * 8
            + self.parked_runs.len() * (24 + BTREE_ENTRY)
            + self.parked_atimes.capacity() * slot(8)
            + self.ops.memory_estimate();
        for inode in self.inodes.values() {
            bytes += inode
                .tree
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<TreeCache>());
            bytes += inode
                .xattrs
                .iter()
                .map(|(k, v)| k.capacity() + v.capacity() + 2 * BTREE_ENTRY)
                .sum::<usize>();
            bytes += match &inode.data {
                Data::Dir(Dir::Loaded(names)) => names
                    .keys()
                    .map(|k| k.capacity() + 24 + 8 + BTREE_ENTRY)
                    .sum(),
                Data::Dir(Dir::Parked(p)) => std::mem::size_of::<Parked>() + p.inos.len() * 12,
                Data::File(f) => {
                    f.pieces.heap_bytes()
                        + f.committed
                            .as_ref()
                            .map_or(0, |c| c.capacity() * std::mem::size_of::<Extent>())
                }
                Data::Symlink(t) => t.capacity(),
                _ => 0,
            };
        }
        bytes
    }

    /// A live operation's change: check `rec`, append it to the journal, apply it.
    fn log(&mut self, ctx: &Ctx<'_>, rec: Record) -> Result<()> {
        if !matches!(rec, Record::LoadDir { .. }) {
            self.guard(&rec)?;
            self.claim(ctx)?;
        }
        let log = Log::Append {
            wal: ctx.wal,
            rec: &rec,
        };
        self.run(ctx.store, &rec, log)
    }

    /// Check, log and apply one record: the `record_*` function of its kind.
    /// (An `InodeMap` changes no inode: [`ForkState::apply`] binds or checks it.)
    fn run(&mut self, store: &Store, rec: &Record, log: Log<'_>) -> Result<()> {
        let note = self.note(rec);
        match rec {
            Record::LoadDir { dir, first_ino } => {
                self.record_load_dir(store, *dir, *first_ino, log)?
            }
            Record::Create {
                parent,
                name,
                ino,
                kind,
                perm,
                uid,
                gid,
                rdev,
                time_ns,
                target,
            } => self.record_create(
                *parent,
                name,
                *ino,
                *kind,
                *perm,
                *uid,
                *gid,
                *rdev,
                *time_ns,
                target.as_deref(),
                log,
            )?,
            Record::Link {
                ino,
                parent,
                name,
                time_ns,
            } => self.record_link(*ino, *parent, name, *time_ns, log)?,
            Record::Unlink {
                parent,
                name,
                time_ns,
            } => self.record_unlink(*parent, name, *time_ns, log)?,
            Record::Rename {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                time_ns,
            } => self.record_rename(*parent, name, *new_parent, new_name, *flags, *time_ns, log)?,
            Record::Tmpfile {
                parent,
                ino,
                perm,
                uid,
                gid,
                time_ns,
            } => self.record_tmpfile(*parent, *ino, *perm, *uid, *gid, *time_ns, log)?,
            Record::RenameWhiteout {
                parent,
                name,
                new_parent,
                new_name,
                flags,
                ino,
                uid,
                gid,
                time_ns,
            } => self.record_rename_whiteout(
                *parent,
                name,
                *new_parent,
                new_name,
                *flags,
                *ino,
                (*uid, *gid),
                *time_ns,
                log,
            )?,
            Record::Write {
                ino,
                offset,
                time_ns,
                data,
            } => self.record_write(*ino, *offset, *time_ns, data.len() as u64, log)?,
            Record::Share {
                ino,
                offset,
                id,
                obj_off,
                len,
                time_ns,
            } => self.record_share(*ino, *offset, *id, *obj_off, *len, *time_ns, log)?,
            Record::Truncate { ino, size, time_ns } => {
                self.record_truncate(*ino, *size, *time_ns, log)?
            }
            Record::PunchHole {
                ino,
                offset,
                len,
                time_ns,
            } => self.record_punch_hole(*ino, *offset, *len, *time_ns, log)?,
            Record::SetAttr {
                ino,
                perm,
                uid,
                gid,
                atime,
                mtime,
                ctime,
            } => {
                let c = AttrChange {
                    perm: *perm,
                    uid: *uid,
                    gid: *gid,
                    atime: *atime,
                    mtime: *mtime,
                };
                self.record_setattr(*ino, c, *ctime, log)?
            }
            Record::SetXattr {
                ino,
                name,
                value,
                flags,
                time_ns,
            } => self.record_setxattr(*ino, name, value, *flags, *time_ns, log)?,
            Record::RemoveXattr { ino, name, time_ns } => {
                self.record_remove_xattr(*ino, name, *time_ns, log)?
            }
            Record::SetFlags {
                ino,
                flags,
                time_ns,
            } => self.record_set_flags(*ino, *flags, *time_ns, log)?,
            Record::InodeMap(_) | Record::Atimes(_) | Record::Who(_) => {
                unreachable!("an inode map, atimes or a requester are taken by apply()")
            }
        }
        self.noted(note);
        self.counted(!matches!(rec, Record::LoadDir { .. }));
        Ok(())
    }

    /// A record took effect; `change` unless it only loaded a directory.
    fn counted(&mut self, change: bool) {
        self.fresh = false;
        if change {
            self.changes += 1;
        }
    }
}
