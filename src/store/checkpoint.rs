//! Checkpoints: immutable JSON records naming a root tree, parents and origin.
//! A checkpoint's id is the sha256 of its JSON file's bytes.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::id::ObjectId;

impl Serialize for ObjectId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ObjectId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ObjectId::from_hex(&s).ok_or_else(|| serde::de::Error::custom("expected 64 hex digits"))
    }
}

/// How a checkpoint was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// `snapshot`, `import`, `commit`, `git` or `merge`.
    pub kind: String,
    /// The directory snapshotted, when `kind` is `snapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The machine it was made on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Archive file names, when imported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// sha256 of the whole archive, when imported and verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Counts and sizes, for `storefs log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// The git commit, when `kind` is `git` (`storefs import-git`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitSource>,
    /// A commit's operation log (`kind` "commit"): an object of JSON lines,
    /// one per operation it folded (`journal::ops`). Absent in commits made
    /// before operation logs existed, and when the commit folded nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<ObjectId>,
}

/// Where an imported git commit came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitSource {
    /// The repository's absolute path as it was imported.
    pub repo: String,
    /// The commit's hex id.
    pub commit: String,
    /// Submodule entries (gitlinks): each is an empty directory in the tree.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submodules: Vec<Submodule>,
}

/// A gitlink of the commit's tree: the path of the empty directory that
/// stands for it and the submodule commit it named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submodule {
    pub path: String,
    pub commit: String,
}

/// What a snapshot or import saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub entries: u64,
    pub bytes: u64,
    pub new_objects: u64,
    pub new_bytes_compressed: u64,
}

/// One checkpoint record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version of this record (1).
    pub version: u32,
    /// The root tree: a tree object whose single entry "" is the root directory.
    pub root: ObjectId,
    /// Earlier checkpoints this one derives from (empty for a first snapshot).
    #[serde(default)]
    pub parents: Vec<ObjectId>,
    /// The absolute path the tree was taken from, and where `mount` puts it by default.
    #[serde(default)]
    pub origin: Option<String>,
    /// Creation time, nanoseconds since the Unix epoch, UTC.
    pub time_ns: i64,
    #[serde(default)]
    pub message: String,
    pub source: Source,
}

impl Checkpoint {
    /// The canonical bytes stored for this checkpoint (pretty JSON + newline).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec_pretty(self).expect("checkpoint serializes");
        v.push(b'\n');
        v
    }
}

/// Why `origin` is not a canonical absolute path, or `None` when it is one:
/// it starts with `/`, has no empty, `.` or `..` component (so no `//` and no
/// trailing `/`, except the root `/` itself) and no NUL. Every origin a
/// checkpoint records passes this ([`Store::write_checkpoint`] refuses others);
/// `mount` checks it again before using a record's origin as a mountpoint.
///
/// [`Store::write_checkpoint`]: super::Store::write_checkpoint
pub fn check_origin(origin: &str) -> Option<&'static str> {
    match canonical_origin(origin) {
        Err(why) => Some(why),
        Ok(canonical) if canonical != origin => {
            Some("it has an empty or '.' component ('//', '/./' or a trailing '/')")
        }
        Ok(_) => None,
    }
}

/// `origin` as a canonical absolute path: empty and `.` components (`//`,
/// `/./`, a trailing `/`) are dropped, which names the same directory on any
/// system. A relative path, a `..` component (whose meaning depends on the
/// symlinks on the way) or a NUL is refused with the reason.
pub fn canonical_origin(origin: &str) -> Result<String, &'static str> {
    if !origin.starts_with('/') {
        return Err("it is not an absolute path");
    }
    if origin.contains('\0') {
        return Err("it contains a NUL byte");
    }
    let mut out = String::with_capacity(origin.len());
    for c in origin.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err("it has a '..' component"),
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Format nanoseconds since the epoch (either side) as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn format_time(ns: i64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .expect("every i64 of nanoseconds is within jiff's range")
        .strftime("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_canonical_absolute_paths() {
        for ok in ["/", "/srv/x", "/srv/x y/é"] {
            assert_eq!(check_origin(ok), None, "{ok}");
            assert_eq!(canonical_origin(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "srv/x",
            "",
            "/srv/../etc",
            "/srv/x/..",
            "/srv/./x",
            "/srv//x",
            "/srv/x/",
            "/a\0b",
        ] {
            assert!(check_origin(bad).is_some(), "{bad}");
        }
        assert_eq!(canonical_origin("/srv//x/./y/").as_deref(), Ok("/srv/x/y"));
        assert_eq!(canonical_origin("//").as_deref(), Ok("/"));
        assert!(canonical_origin("/srv/x/../../etc").is_err());
        assert!(canonical_origin("x/y").is_err());
    }

    #[test]
    fn time_formats() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(
            format_time(1_796_227_200_000_000_000),
            "2026-12-02 16:00:00 UTC"
        );
        assert_eq!(format_time(-1), "1969-12-31 23:59:59 UTC");
    }
}
