//! POSIX access and default ACLs as ext4 keeps them in sync with the mode.
//!
//! The kernel stores nothing for a FUSE file system: with `FUSE_POSIX_ACL` it
//! reads the `system.posix_acl_*` xattrs to check permissions, validates what
//! `setfacl` sets and hands it over in its canonical xattr form; keeping the
//! mode and the ACL in step is the file system's job. These are Linux's
//! rules (`fs/posix_acl.c`), which a fork (`crate::journal::Fork`) applies;
//! export reads the same values to write them as text as well:
//!
//! - setting an access ACL sets the mode's rwx bits from it (the group bits
//!   from the mask when there is one); an ACL the mode can express is not
//!   stored at all ([`Acl::equiv_mode`]);
//! - chmod of a file with an access ACL rewrites its owner, mask (or group)
//!   and other entries ([`Acl::chmod`]);
//! - a new entry in a directory with a default ACL gets it as its access ACL,
//!   masked by the mode asked for, and no umask; a new directory also
//!   inherits the default ACL ([`Acl::create_masq`]).
//!
//! Values are `u32le(2)` then 8-byte entries `u16le(tag) u16le(perm)
//! u32le(id)`, sorted by tag then id, id `u32::MAX` where a tag has none:
//! exactly what Linux's `posix_acl_to_xattr` writes, so a value computed
//! here is byte-identical to ext4's.

/// The attribute holding a file's access ACL.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
/// The attribute holding a directory's default ACL.
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
/// Entry tags.
pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;
const UNDEFINED_ID: u32 = u32::MAX;

/// Whether `name` is one of the two ACL attributes.
pub fn is_acl(name: &[u8]) -> bool {
    name == ACCESS || name == DEFAULT
}

/// The entries of an xattr value in Linux's format, `(tag, perm, id)` as
/// stored (nothing checked but the version and the length), or `None` when
/// the value is not version 2 with whole 8-byte entries.
pub fn raw_entries(value: &[u8]) -> Option<impl Iterator<Item = (u16, u16, u32)> + '_> {
    let (head, rest) = value.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != VERSION || rest.len() % 8 != 0 {
        return None;
    }
    Some(rest.chunks_exact(8).map(|e| {
        (
            u16::from_le_bytes([e[0], e[1]]),
            u16::from_le_bytes([e[2], e[3]]),
            u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
        )
    }))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A parsed ACL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Parse an xattr value; `None` unless it is a well-formed ACL (version
    /// 2, known tags, the three base entries present).
    pub fn parse(value: &[u8]) -> Option<Acl> {
        let mut entries = Vec::with_capacity(value.len() / 8);
        for (tag, perm, id) in raw_entries(value)? {
            if ![USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER].contains(&tag) {
                return None;
            }
            entries.push(Entry {
                tag,
                perm: perm & 7,
                id,
            });
        }
        let has = |t| entries.iter().any(|e| e.tag == t);
        if !(has(USER_OBJ) && has(GROUP_OBJ) && has(OTHER)) {
            return None;
        }
        Some(Acl { entries })
    }

    /// The canonical xattr value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + 8 * self.entries.len());
        out.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            let id = if matches!(e.tag, USER | GROUP) {
                e.id
            } else {
                UNDEFINED_ID
            };
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// The rwx bits this ACL gives the mode (group bits from the mask when
    /// present), and whether the mode says it all (then ext4 stores no ACL):
    /// `posix_acl_equiv_mode`.
    pub fn equiv_mode(&self) -> (u32, bool) {
        let mut mode = 0;
        let mut equiv = true;
        for e in &self.entries {
            let p = u32::from(e.perm & 7);
            match e.tag {
                USER_OBJ => mode |= p << 6,
                GROUP_OBJ => mode |= p << 3,
                OTHER => mode |= p,
                MASK => {
                    mode = (mode & !0o070) | (p << 3);
                    equiv = false;
                }
                _ => equiv = false,
            }
        }
        (mode, equiv)
    }

    /// chmod: the owner, mask (or group when there is no mask) and other
    /// entries take the mode's bits: `posix_acl_chmod_masq`.
    pub fn chmod(&mut self, mode: u32) {
        let has_mask = self.entries.iter().any(|e| e.tag == MASK);
        for e in &mut self.entries {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
                OTHER => e.perm = (mode & 7) as u16,
                MASK => e.perm = ((mode >> 3) & 7) as u16,
                GROUP_OBJ if !has_mask => e.perm = ((mode >> 3) & 7) as u16,
                _ => {}
            }
        }
    }

    /// A new entry's access ACL from its parent's default ACL (`self`, a
    /// copy) and the mode asked for: both are masked by each other
    /// (`posix_acl_create_masq`). Returns the new mode (only its rwx bits
    /// change) and whether an access ACL must be stored (it says more than
    /// the mode).
    pub fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let mut m = mode & 0o777;
        let mut not_equiv = false;
        let has_mask = self.entries.iter().any(|e| e.tag == MASK);
        for e in &mut self.entries {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m &= (u32::from(e.perm) << 6) | !0o700;
                }
                USER | GROUP => not_equiv = true,
                OTHER => {
                    e.perm &= (m & 7) as u16;
                    m &= u32::from(e.perm) | !0o007;
                }
                MASK => not_equiv = true,
                _ => {}
            }
        }
        for e in &mut self.entries {
            if e.tag == MASK || (e.tag == GROUP_OBJ && !has_mask) {
                e.perm &= ((m >> 3) & 7) as u16;
                m &= (u32::from(e.perm) << 3) | !0o070;
            }
        }
        ((mode & !0o777) | (m & 0o777), not_equiv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect(),
        }
    }

    /// `setfacl -m g:99:rw` on a 0644 file, as Linux hands it over.
    const G99: [u8; 44] = [
        2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 4, 0, 4, 0, 255, 255, 255, 255, 8, 0, 6, 0, 99,
        0, 0, 0, 16, 0, 6, 0, 255, 255, 255, 255, 32, 0, 4, 0, 255, 255, 255, 255,
    ];

    #[test]
    fn parse_and_encode_round_trip_linux_bytes() {
        let a = Acl::parse(&G99).unwrap();
        assert_eq!(a.encode(), G99);
        assert_eq!(a.equiv_mode(), (0o664, false));
        for bad in [&G99[..43], &G99[4..], &[1, 0, 0, 0][..], &[2, 0, 0, 0]] {
            assert_eq!(Acl::parse(bad), None);
        }
    }

    #[test]
    fn chmod_sets_the_mask() {
        let mut a = Acl::parse(&G99).unwrap();
        a.chmod(0o640);
        assert_eq!(
            a,
            acl(&[
                (USER_OBJ, 6, UNDEFINED_ID),
                (GROUP_OBJ, 4, UNDEFINED_ID),
                (GROUP, 6, 99),
                (MASK, 4, UNDEFINED_ID),
                (OTHER, 0, UNDEFINED_ID),
            ])
        );
        let mut base = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 7, 0), (OTHER, 7, 0)]);
        base.chmod(0o751);
        assert_eq!(base.equiv_mode(), (0o751, true));
    }

    #[test]
    fn create_masq_as_linux() {
        // Default ACL u::rwx,u:99:rwx,g::r-x,m::rwx,o::r-x; mode 0666.
        let mut a = acl(&[
            (USER_OBJ, 7, UNDEFINED_ID),
            (USER, 7, 99),
            (GROUP_OBJ, 5, UNDEFINED_ID),
            (MASK, 7, UNDEFINED_ID),
            (OTHER, 5, UNDEFINED_ID),
        ]);
        let (mode, store) = a.create_masq(0o100666);
        assert_eq!((mode, store), (0o100664, true));
        assert_eq!(a.equiv_mode().0, 0o664);
        let mut min = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 0, 0)]);
        assert_eq!(min.create_masq(0o2777), (0o2750, false));
    }
}
