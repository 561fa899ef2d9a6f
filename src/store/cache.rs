//! A byte-bounded LRU cache of decompressed, verified objects (file chunks).
//! What counts is what each object costs in memory: its buffer's capacity
//! and the cache's bookkeeping for it ([`ENTRY_OVERHEAD`]).

use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

use super::id::ObjectId;

/// What an object costs the cache beyond its buffer: the `Arc` and `Vec`
/// headers, the LRU's node and map slot, and malloc's own headers, about.
pub const ENTRY_OVERHEAD: usize = 160;

/// What `data` costs the cache in memory.
fn cost(data: &Vec<u8>) -> usize {
    data.capacity() + ENTRY_OVERHEAD
}

/// Holds decompressed objects up to `capacity` bytes; the least recently used go first.
pub struct ChunkCache {
    inner: Mutex<Inner>,
    capacity: usize,
}

struct Inner {
    lru: LruCache<ObjectId, Arc<Vec<u8>>>,
    bytes: usize,
}

impl ChunkCache {
    pub fn new(capacity: usize) -> ChunkCache {
        ChunkCache {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
            capacity,
        }
    }

    pub fn get(&self, id: &ObjectId) -> Option<Arc<Vec<u8>>> {
        self.inner.lock().lru.get(id).cloned()
    }

    /// Insert, evicting the least recently used until the total fits. An object
    /// larger than the whole cache is not kept.
    pub fn insert(&self, id: ObjectId, data: Arc<Vec<u8>>) {
        if cost(&data) > self.capacity {
            return;
        }
        let mut g = self.inner.lock();
        if let Some(old) = g.lru.put(id, data.clone()) {
            g.bytes -= cost(&old);
        }
        g.bytes += cost(&data);
        while g.bytes > self.capacity {
            match g.lru.pop_lru() {
                Some((_, v)) => g.bytes -= cost(&v),
                None => break,
            }
        }
    }

    /// Drop `id` if it is held.
    pub fn remove(&self, id: &ObjectId) {
        let mut g = self.inner.lock();
        if let Some(v) = g.lru.pop(id) {
            g.bytes -= cost(&v);
        }
    }

    /// Whether `id` is held (without making it recently used).
    pub fn contains(&self, id: &ObjectId) -> bool {
        self.inner.lock().lru.contains(id)
    }

    /// The most bytes it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

impl std::fmt::Debug for ChunkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkCache({}/{} bytes)", self.bytes(), self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_by_bytes() {
        let c = ChunkCache::new(10 + 2 * ENTRY_OVERHEAD);
        let a = ObjectId::of(b"a");
        let b = ObjectId::of(b"b");
        c.insert(a, Arc::new(vec![0; 6]));
        c.insert(b, Arc::new(vec![0; 6]));
        assert!(c.get(&a).is_none());
        assert!(c.get(&b).is_some());
        assert_eq!(c.bytes(), 6 + ENTRY_OVERHEAD);
        c.insert(ObjectId::of(b"big"), Arc::new(vec![0; 11 + ENTRY_OVERHEAD]));
        assert_eq!(c.bytes(), 6 + ENTRY_OVERHEAD);
        // A buffer counts by its capacity, not its length.
        let mut spare = Vec::with_capacity(200);
        spare.push(1u8);
        let small = ChunkCache::new(100 + ENTRY_OVERHEAD);
        small.insert(a, Arc::new(spare));
        assert_eq!(small.bytes(), 0, "200 bytes of capacity do not fit in 100");
    }
}
