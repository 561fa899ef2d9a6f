//! Damage the store on purpose, for tests of corruption handling (and for
//! anyone reproducing one). Not used by storefs itself.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, PermissionsExt};

use super::{ObjectId, Store};

/// The magic number of a zstd skippable frame (any of 0x184D2A50..=5F).
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

impl Store {
    /// Store `stored` (an object's compressed bytes) as a loose file
    /// `objects/ab/cdef…`, as a storefs before 2026-12-05 stored large
    /// objects (and one before packs every object), so tests can check that
    /// stores written that way still read.
    pub fn write_loose_object(&self, id: &ObjectId, stored: &[u8]) -> io::Result<()> {
        let hex = id.to_hex();
        let fan = self.root().join("objects").join(&hex[..2]);
        fs::create_dir_all(&fan)?;
        let path = fan.join(&hex[2..]);
        fs::write(&path, stored)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o444))
    }

    /// Replace the stored (compressed) bytes of a published object with
    /// `bytes`, in place, wherever it is stored. A loose object takes any
    /// length; a packed one is padded with a zstd skippable frame (decoders
    /// ignore it) and must leave room for its 8-byte header, or be exact.
    pub fn replace_stored_object(&self, id: &ObjectId, bytes: &[u8]) -> io::Result<()> {
        let (path, offset, len) = self
            .backend()
            .locate(id)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("object {id}")))?;
        // Pack records start after a header: only a loose object is at 0.
        let loose = offset == 0;
        let mut padded = bytes.to_vec();
        if !loose {
            match (len as usize).checked_sub(bytes.len()) {
                Some(0) => {}
                Some(room) if room >= 8 => {
                    padded.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
                    padded.extend_from_slice(&((room - 8) as u32).to_le_bytes());
                    padded.resize(len as usize, 0);
                }
                _ => {
                    return Err(io::Error::other(format!(
                        "{} bytes do not fit the {len} bytes object {id} has in {}",
                        bytes.len(),
                        path.display()
                    )));
                }
            }
        }
        let mode = fs::metadata(&path)?.permissions().mode();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        let result = if loose {
            fs::write(&path, &padded)
        } else {
            OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.write_all_at(&padded, offset))
        };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))?;
        result
    }
}
