//! A hash map for integer keys (inode numbers, pids): one multiply per
//! lookup instead of SipHash, for the per-change tables of a fork mount
//! (provenance's names and paths, the requesters). Not for keys an
//! attacker picks to collide: inode numbers are the fork's own, pids the
//! kernel's.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// `HashMap` keyed by an integer, hashed by [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Fibonacci hashing of one integer: its bits spread over the whole word,
/// so the table's top bits (hashbrown's tags) differ for neighbours.
#[derive(Clone, Copy, Debug, Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only integers are hashed through write_u* below; anything else
        // still hashes, byte by byte.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(26);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_spread_over_the_top_bits() {
        let tags: std::collections::HashSet<u64> = (0..128u64)
            .map(|i| {
                let mut h = IntHasher::default();
                h.write_u64(i);
                h.finish() >> 57
            })
            .collect();
        assert!(tags.len() > 64, "{} distinct tags", tags.len());
        let mut m: IntMap<u64, u64> = IntMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| m[&i] == i * 2));
    }
}
