//! Object ids: the sha256 of an object's uncompressed bytes.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// A 32-byte sha256 digest naming an object, a tree or a checkpoint.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// The id of `data`: its sha256.
    pub fn of(data: &[u8]) -> ObjectId {
        ObjectId(Sha256::digest(data).into())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// Parse exactly 64 hex digits.
    pub fn from_hex(s: &str) -> Option<ObjectId> {
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            out[i] = (hex_val(pair[0])? << 4) | hex_val(pair[1])?;
        }
        Some(ObjectId(out))
    }
}

/// Lower-case hex of any byte string.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// True when `s` is a non-empty string of hex digits (a possible id prefix).
pub fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| hex_val(c).is_some())
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({})", &self.to_hex()[..12])
    }
}

impl FromStr for ObjectId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ObjectId::from_hex(s).ok_or_else(|| format!("not a 64-hex object id: {s}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_known_digest() {
        let id = ObjectId::of(b"abc");
        assert_eq!(
            id.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(ObjectId::from_hex(&id.to_hex()), Some(id));
        assert_eq!(ObjectId::from_hex("zz"), None);
        assert_eq!(ObjectId::from_hex(&"g".repeat(64)), None);
    }
}
