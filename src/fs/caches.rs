//! The caches of one mount, all within the one bound the user gives
//! (`--cache-size`): decompressed file chunks ([`ChunkCache`], three
//! quarters) and directories in memory with the inode numbering
//! ([`DirCache`], a quarter). A browse mount shares both between all the
//! checkpoints it serves.

use std::sync::Arc;

use super::inode::DirCache;
use crate::store::ChunkCache;

/// The part of the bound that goes to directories: one in this many bytes.
const DIR_SHARE: usize = 4;

/// One mount's caches. Cloning shares them.
#[derive(Clone, Debug)]
pub struct Caches {
    pub(crate) chunks: Arc<ChunkCache>,
    pub(crate) dirs: Arc<DirCache>,
    limit: usize,
}

/// What a mount's caches hold now, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheUse {
    /// The bound (`--cache-size`).
    pub limit: usize,
    /// Decompressed chunks, with their bookkeeping.
    pub chunks: usize,
    /// Directories in memory, the inode numbering and other records kept.
    pub dirs: usize,
}

impl CacheUse {
    /// Everything counted against the bound.
    pub fn total(&self) -> usize {
        self.chunks + self.dirs
    }
}

impl Caches {
    /// Caches holding at most `limit` bytes together.
    pub fn new(limit: usize) -> Caches {
        let dirs = limit / DIR_SHARE;
        Caches {
            chunks: Arc::new(ChunkCache::new(limit - dirs)),
            dirs: Arc::new(DirCache::new(dirs)),
            limit,
        }
    }

    /// What they hold now.
    pub fn usage(&self) -> CacheUse {
        CacheUse {
            limit: self.limit,
            chunks: self.chunks.bytes(),
            dirs: self.dirs.bytes(),
        }
    }
}
