//! The origin policy: whether a checkpoint's origin may be used as its
//! *default* mountpoint. An origin is data (an archive's `STORE.json` or
//! `STOREFS.origin`, a remote's record, a git import's `--origin` of
//! someone else), so it is a suggestion: it is taken only where storefs
//! would put a mount on its own, and nowhere the caller did not choose
//! (docs/security.md, "Origins"). A mountpoint the caller types is the
//! caller's choice and is not checked here.
//!
//! Two parts: [`check_place`] looks at the path alone (system locations,
//! homes and their dot-directories, the allowed roots, the caller's
//! opt-in), [`check_path`] walks the existing part of it with `lstat`,
//! never following a symlink, and refuses one controlled by a user other
//! than the caller and root. [`check_default_mountpoint`] runs both.

use std::fmt;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The environment variable with more allowed origin prefixes,
/// colon-separated (the same as `--allow-origin`, for a systemd unit's
/// environment file or a shell profile).
pub const ALLOW_ORIGIN_ENV: &str = "STOREFS_ALLOW_ORIGIN";

/// The roots beneath which an origin is a mount place by default: where
/// stores, scratch trees and mounts live and no system component looks for
/// its files. Homes (`/home/USER`, `/root` and the caller's `$HOME`) are
/// allowed too, outside their dot-directories and `bin` (see [`check_place`]).
pub const DEFAULT_ROOTS: &[&str] = &["/srv", "/tmp", "/var/tmp", "/mnt", "/media", "/opt"];

/// System locations: the system's programs, libraries, configuration,
/// kernel interfaces and daemon state. `/var` except `/var/tmp`.
const SYSTEM: &[&str] = &[
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/boot", "/efi",
    "/dev", "/proc", "/sys", "/run", "/var", "/snap", "/nix",
];

/// Which origins may be default mountpoints beyond the built-in rules.
#[derive(Clone, Debug, Default)]
pub struct OriginPolicy {
    /// The caller's opt-in: origins equal to or beneath these prefixes
    /// pass [`check_place`] (canonical absolute paths).
    allowed: Vec<String>,
    /// The caller's home, when it is a canonical absolute path.
    home: Option<String>,
}

impl OriginPolicy {
    /// The policy with the caller's opt-in prefixes (`--allow-origin`,
    /// [`ALLOW_ORIGIN_ENV`]) and home (`$HOME`); a prefix that is not a
    /// canonical absolute path is refused with the reason.
    pub fn new(allowed: &[PathBuf], home: Option<&Path>) -> Result<OriginPolicy, String> {
        let mut out = Vec::new();
        for p in allowed {
            let s = p
                .to_str()
                .ok_or_else(|| format!("--allow-origin {}: not UTF-8", p.display()))?;
            if s.is_empty() {
                continue;
            }
            let c = crate::store::canonical_origin(s)
                .map_err(|why| format!("--allow-origin {s}: {why}; give an absolute path"))?;
            out.push(c);
        }
        let home = home
            .and_then(Path::to_str)
            .filter(|h| crate::store::check_origin(h).is_none() && *h != "/")
            .map(str::to_string);
        Ok(OriginPolicy { allowed: out, home })
    }
}

/// Why an origin is not used as a default mountpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a canonical absolute path ([`crate::store::check_origin`]).
    NotCanonical(&'static str),
    /// `/` itself.
    Root,
    /// Under a system location (the prefix).
    System(&'static str),
    /// A home directory itself (mounting there replaces its dot-files).
    Home,
    /// A dot-directory of a home, or beneath one.
    HomeDotDir,
    /// A home's `bin`, which its owner's profile puts on PATH.
    HomeBin,
    /// Beneath none of the allowed roots.
    NotAllowedRoot,
    /// A symlink on the way (this path).
    Symlink(PathBuf),
    /// A directory on the way owned by another user (path, uid).
    ForeignOwner(PathBuf, u32),
    /// A directory on the way that others may write to (no sticky bit).
    Writable(PathBuf, u32),
    /// Something on the way that is not a directory.
    NotDir(PathBuf),
    /// Something on the way that cannot be examined.
    Unreadable(PathBuf, String),
}

impl Refusal {
    /// Whether `--allow-origin` lifts it (the rules about the place; those
    /// about who controls the path are lifted only by giving a mountpoint).
    pub fn can_be_allowed(&self) -> bool {
        matches!(
            self,
            Refusal::Root
                | Refusal::System(_)
                | Refusal::Home
                | Refusal::HomeDotDir
                | Refusal::HomeBin
                | Refusal::NotAllowedRoot
        )
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotCanonical(why) => write!(f, "not a canonical absolute path: {why}"),
            Refusal::Root => write!(f, "the root directory"),
            Refusal::System(p) => write!(f, "a system location, under {p}"),
            Refusal::Home => write!(f, "a home directory itself"),
            Refusal::HomeDotDir => write!(f, "a dot-directory of a home"),
            Refusal::HomeBin => write!(f, "a home's bin, on its owner's PATH"),
            Refusal::NotAllowedRoot => write!(
                f,
                "outside the allowed origin roots {}, /home/USER and /root",
                DEFAULT_ROOTS.join(", ")
            ),
            Refusal::Symlink(p) => write!(
                f,
                "{} on the way is a symlink, which storefs does not follow",
                p.display()
            ),
            Refusal::ForeignOwner(p, uid) => write!(
                f,
                "{} on the way belongs to uid {uid}, another user",
                p.display()
            ),
            Refusal::Writable(p, mode) => write!(
                f,
                "{} on the way is writable by others (mode {:o}, no sticky bit)",
                p.display(),
                mode & 0o7777
            ),
            Refusal::NotDir(p) => write!(f, "{} on the way is not a directory", p.display()),
            Refusal::Unreadable(p, e) => write!(f, "{} on the way: {e}", p.display()),
        }
    }
}

/// `path` is `prefix` or beneath it (component-wise; both canonical).
fn under(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path == prefix
        || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// `path` strictly beneath `prefix`: the components after it, if any.
fn beneath<'a>(path: &'a str, prefix: &str) -> Option<Vec<&'a str>> {
    let rest = path.strip_prefix(prefix)?.strip_prefix('/')?;
    (!rest.is_empty()).then(|| rest.split('/').collect())
}

/// The place rules, on the path alone. An origin equal to or beneath an
/// opt-in prefix passes. Otherwise refused: `/`; a system location;
/// a home (`/home/USER`, `/root`, the caller's `$HOME`) itself, its
/// dot-directories and `bin`; anything not strictly beneath an allowed root
/// ([`DEFAULT_ROOTS`] and the homes).
pub fn check_place(origin: &str, policy: &OriginPolicy) -> Result<(), Refusal> {
    if let Some(why) = crate::store::check_origin(origin) {
        return Err(Refusal::NotCanonical(why));
    }
    if policy.allowed.iter().any(|p| under(origin, p)) {
        return Ok(());
    }
    if origin == "/" {
        return Err(Refusal::Root);
    }
    // A home: the caller's, root's, and every /home/USER.
    let mut homes: Vec<String> = vec!["/root".into()];
    homes.extend(policy.home.clone());
    if let Some(user) = origin
        .strip_prefix("/home/")
        .and_then(|r| r.split('/').next())
    {
        homes.push(format!("/home/{user}"));
    }
    for h in &homes {
        if origin == h {
            return Err(Refusal::Home);
        }
        if let Some(rest) = beneath(origin, h) {
            if rest.iter().any(|c| c.starts_with('.')) {
                return Err(Refusal::HomeDotDir);
            }
            if rest[0] == "bin" {
                return Err(Refusal::HomeBin);
            }
            return Ok(());
        }
    }
    let allowed_root = DEFAULT_ROOTS.iter().any(|r| beneath(origin, r).is_some());
    if !allowed_root {
        if let Some(s) = SYSTEM.iter().find(|s| under(origin, s)) {
            return Err(Refusal::System(s));
        }
        return Err(Refusal::NotAllowedRoot);
    }
    Ok(())
}

/// The path rules: walk `path` from `/` down through the parts that exist,
/// with `lstat` (never following), and refuse a symlink, something other
/// than a directory, or a directory that a user other than `caller_uid` and
/// root controls: owned by another uid, or writable by its group or by
/// others without the sticky bit (a POSIX ACL granting write shows in the
/// group bits). The walk stops at the first missing part: storefs creates
/// the rest as the caller (and checks again after creating).
///
/// Inside an ordinary user's `storefs run` (a user namespace mapping the
/// caller alone), root's directories, and every other user's, show as the
/// kernel's overflow uid: that uid is taken as root's there. The owner rule
/// is then weaker (another user's directory on the way passes), and what it
/// guards is the run's own view: no other process sees its mounts.
pub fn check_path(path: &Path, caller_uid: u32) -> Result<(), Refusal> {
    let unmapped_uid = overflow_uid_in_user_namespace();
    let mut p = PathBuf::from("/");
    let parts: Vec<_> = path.components().skip(1).collect();
    let mut i = 0;
    loop {
        let m = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Refusal::Unreadable(p, e.to_string())),
        };
        let ft = m.file_type();
        if ft.is_symlink() {
            return Err(Refusal::Symlink(p));
        }
        if !ft.is_dir() {
            return Err(Refusal::NotDir(p));
        }
        if m.uid() != 0 && m.uid() != caller_uid && Some(m.uid()) != unmapped_uid {
            return Err(Refusal::ForeignOwner(p, m.uid()));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(Refusal::Writable(p, m.mode()));
        }
        let Some(c) = parts.get(i) else {
            return Ok(());
        };
        p.push(c);
        i += 1;
    }
}

/// The kernel's overflow uid when this process is in a user namespace other
/// than the initial one (whose map is `0 0 4294967295`), else `None`.
fn overflow_uid_in_user_namespace() -> Option<u32> {
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let initial = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
    if initial {
        return None;
    }
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether `origin` may be the default mountpoint for a caller with
/// effective uid `caller_uid`: [`check_place`], then [`check_path`].
pub fn check_default_mountpoint(
    origin: &str,
    policy: &OriginPolicy,
    caller_uid: u32,
) -> Result<PathBuf, Refusal> {
    check_place(origin, policy)?;
    check_path(Path::new(origin), caller_uid)?;
    Ok(PathBuf::from(origin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn policy(allow: &[&str]) -> OriginPolicy {
        let a: Vec<PathBuf> = allow.iter().map(PathBuf::from).collect();
        OriginPolicy::new(&a, Some(Path::new("/home/me"))).unwrap()
    }

    #[test]
    fn places_stores_live_are_allowed() {
        let p = policy(&[]);
        for ok in [
            "/srv/x",
            "/srv/_lead_sessions/s1",
            "/tmp/x",
            "/tmp/.tmpabc/x",
            "/var/tmp/x",
            "/mnt/x",
            "/media/usb/x",
            "/opt/app",
            "/home/alice/work",
            "/root/work",
            "/home/me/src/x",
        ] {
            assert_eq!(check_place(ok, &p), Ok(()), "{ok}");
        }
    }

    #[test]
    fn system_places_homes_and_dot_dirs_are_refused() {
        let p = OriginPolicy::new(&[], Some(Path::new("/var/lib/svc"))).unwrap();
        let cases: &[(&str, Refusal)] = &[
            ("/", Refusal::Root),
            ("/usr/local/sbin", Refusal::System("/usr")),
            ("/usr", Refusal::System("/usr")),
            ("/etc/cron.d", Refusal::System("/etc")),
            ("/lib64/x", Refusal::System("/lib64")),
            ("/var/lib/x", Refusal::System("/var")),
            ("/var", Refusal::System("/var")),
            ("/run/user/0", Refusal::System("/run")),
            ("/root", Refusal::Home),
            ("/root/.ssh", Refusal::HomeDotDir),
            ("/root/.config/systemd/user", Refusal::HomeDotDir),
            ("/root/bin", Refusal::HomeBin),
            ("/home/alice", Refusal::Home),
            ("/home/alice/.ssh", Refusal::HomeDotDir),
            ("/home/alice/x/.bashrc.d", Refusal::HomeDotDir),
            ("/home/alice/work/.git", Refusal::HomeDotDir),
            ("/home/alice/bin/x", Refusal::HomeBin),
            ("/var/lib/svc", Refusal::Home),
            ("/var/lib/svc/.ssh", Refusal::HomeDotDir),
            ("/home", Refusal::NotAllowedRoot),
            ("/srv", Refusal::NotAllowedRoot),
            ("/tmp", Refusal::NotAllowedRoot),
            ("/data/x", Refusal::NotAllowedRoot),
            ("/lost+found/x", Refusal::NotAllowedRoot),
            (
                "/srv/../etc",
                Refusal::NotCanonical("it has a '..' component"),
            ),
        ];
        for (origin, why) in cases {
            assert_eq!(check_place(origin, &p).as_ref(), Err(why), "{origin}");
        }
        // The caller's home, when it is under an allowed root, is a home.
        let p = OriginPolicy::new(&[], Some(Path::new("/srv/me"))).unwrap();
        assert_eq!(check_place("/srv/me/.ssh", &p), Err(Refusal::HomeDotDir));
        assert_eq!(check_place("/srv/other/.ssh", &p), Ok(()));
    }

    #[test]
    fn the_opt_in_allows_a_place_and_what_is_beneath_it() {
        let p = policy(&["/root/.ssh", "/data"]);
        assert_eq!(check_place("/root/.ssh", &p), Ok(()));
        assert_eq!(check_place("/root/.ssh/x", &p), Ok(()));
        assert_eq!(check_place("/data", &p), Ok(()));
        assert_eq!(check_place("/data/x", &p), Ok(()));
        // Component-wise, not by string prefix.
        assert_eq!(check_place("/root/.sshx", &p), Err(Refusal::HomeDotDir));
        assert_eq!(check_place("/database", &p), Err(Refusal::NotAllowedRoot));
        assert!(OriginPolicy::new(&[PathBuf::from("rel/x")], None).is_err());
        assert!(OriginPolicy::new(&[PathBuf::from("/a/../b")], None).is_err());
        // Place refusals can be lifted; path refusals cannot.
        assert!(Refusal::HomeDotDir.can_be_allowed());
        assert!(!Refusal::Symlink("/x".into()).can_be_allowed());
    }

    fn tmp() -> tempfile::TempDir {
        // Under /tmp (root-owned, sticky): the walk's start is trusted.
        tempfile::Builder::new()
            .prefix("storefs-origin-")
            .tempdir_in("/tmp")
            .unwrap()
    }

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    #[test]
    fn a_symlink_on_the_way_is_refused() {
        let t = tmp();
        std::fs::create_dir(t.path().join("real")).unwrap();
        symlink(t.path().join("real"), t.path().join("link")).unwrap();
        let via = t.path().join("link/x/y");
        assert_eq!(
            check_path(&via, me()),
            Err(Refusal::Symlink(t.path().join("link")))
        );
        // The mountpoint itself a symlink.
        assert_eq!(
            check_path(&t.path().join("link"), me()),
            Err(Refusal::Symlink(t.path().join("link")))
        );
        assert_eq!(check_path(&t.path().join("real/x/y"), me()), Ok(()));
        std::fs::write(t.path().join("file"), b"").unwrap();
        assert_eq!(
            check_path(&t.path().join("file/x"), me()),
            Err(Refusal::NotDir(t.path().join("file")))
        );
    }

    #[test]
    fn a_directory_another_user_controls_is_refused() {
        let t = tmp();
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        let other = if me() == 65534 { 65533 } else { 65534 };
        if rustix::fs::chown(&theirs, Some(rustix::fs::Uid::from_raw(other)), None).is_err() {
            eprintln!("skipped: cannot chown (not root); the foreign-owner rule is untested here");
            return;
        }
        assert_eq!(
            check_path(&theirs.join("x"), me()),
            Err(Refusal::ForeignOwner(theirs.clone(), other))
        );
        // Writable by others without the sticky bit, though ours.
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            check_path(&open.join("x"), me()),
            Err(Refusal::Writable(p, _)) if p == open
        ));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(matches!(
            check_path(&open.join("x"), me()),
            Err(Refusal::Writable(..))
        ));
        // With the sticky bit (as /tmp), others cannot replace what is ours.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(check_path(&open.join("x"), me()), Ok(()));
        // Owned by root or the caller: fine.
        let mine = t.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        assert_eq!(check_path(&mine.join("x/y"), me()), Ok(()));
        assert_eq!(check_path(&mine, me()), Ok(()));
    }

    #[test]
    fn the_whole_check_names_the_first_reason() {
        let p = policy(&[]);
        assert_eq!(
            check_default_mountpoint("/root/.ssh", &p, 0),
            Err(Refusal::HomeDotDir)
        );
        let t = tmp();
        let o = t.path().join("a/b");
        assert_eq!(
            check_default_mountpoint(o.to_str().unwrap(), &p, me()),
            Ok(o.clone())
        );
    }
}
