//! The byte codec of storefs's binary formats: tree objects (`tree.rs`,
//! docs/format.md) and fork journal records (`journal::record`,
//! docs/journal.md). Integers are LEB128 varints, times `i64` little-endian,
//! byte strings a varint length then the bytes, a [`Kind`] one byte.
//!
//! Owns only the primitives; what a format puts in which order is its own
//! module's business. Decoding never panics on hostile bytes.

use super::id::ObjectId;
use super::tree::Kind;

/// Why bytes could not be decoded: a short, fixed reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Append `v` as a LEB128 varint (7 bits a byte, low first).
pub fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Append `b` as a varint length followed by the bytes.
pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_var(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Append `v` as 8 bytes, little-endian.
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads the primitives back from a byte slice, front to back.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or(Malformed("truncated"))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    pub fn i64(&mut self) -> Result<i64, Malformed> {
        let b = self.take(8)?;
        Ok(i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    pub fn var(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Malformed("varint too long"))
    }

    /// A varint that must fit in a `u32`.
    pub fn var32(&mut self) -> Result<u32, Malformed> {
        u32::try_from(self.var()?).map_err(|_| Malformed("value out of range"))
    }

    /// A count of items that each take at least one byte: refuses counts the
    /// rest of the data cannot hold (so a hostile count allocates nothing).
    pub fn count(&mut self) -> Result<usize, Malformed> {
        usize::try_from(self.var()?)
            .ok()
            .filter(|&n| n <= self.remaining())
            .ok_or(Malformed("count larger than the data"))
    }

    /// A varint length and that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = usize::try_from(self.var()?).map_err(|_| Malformed("length out of range"))?;
        self.take(n)
    }

    /// A [`Kind`] byte.
    pub fn kind(&mut self) -> Result<Kind, Malformed> {
        Kind::from_u8(self.u8()?).ok_or(Malformed("unknown kind"))
    }

    /// A raw 32-byte object id.
    pub fn id(&mut self) -> Result<ObjectId, Malformed> {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.take(32)?);
        Ok(ObjectId(id))
    }

    /// Fail unless every byte was read.
    pub fn finish(&self) -> Result<(), Malformed> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Malformed("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_overlong_ones_are_refused() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut o = Vec::new();
            put_var(&mut o, v);
            let mut r = Reader::new(&o);
            assert_eq!(r.var(), Ok(v));
            assert_eq!(r.finish(), Ok(()));
        }
        let mut o = Vec::new();
        put_var(&mut o, 300);
        assert_eq!(o, [0xac, 0x02]);
        assert!(Reader::new(&[0x80; 10]).var().is_err());
        assert!(Reader::new(&[0x80]).var().is_err());
        let mut big = Vec::new();
        put_var(&mut big, u64::from(u32::MAX) + 1);
        assert!(Reader::new(&big).var32().is_err());
        assert!(Reader::new(&[5, 1]).count().is_err());
        assert!(Reader::new(&[3, 1, 2]).bytes().is_err());
    }
}
