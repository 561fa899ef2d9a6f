//! What this machine has of what mounts need, as `storefs doctor` reports
//! it: each check says what it found and, when something is missing, how to
//! fix it. Read-only: it opens `/dev/fuse` and reads files, nothing else.

use std::fs::OpenOptions;
use std::path::Path;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Present and usable.
    Ok,
    /// Mounting fails without it.
    Missing,
    /// Optional (a feature or a kind of user needs it); mounts work without.
    Note,
    /// Mounts work, but the machine or the store weakens what storefs
    /// promises (docs/security.md, "Files inside a store").
    Warn,
}

/// One line of the report.
#[derive(Clone, Debug)]
pub struct Check {
    pub what: &'static str,
    pub verdict: Verdict,
    /// What was found.
    pub found: String,
    /// How to fix it (empty when nothing needs fixing).
    pub fix: String,
}

fn check(what: &'static str, verdict: Verdict, found: impl Into<String>, fix: &str) -> Check {
    Check {
        what,
        verdict,
        found: found.into(),
        fix: if verdict == Verdict::Ok {
            String::new()
        } else {
            fix.into()
        },
    }
}

/// Every check, in the order a user would fix them; with `store`, the
/// store's directories too (whose they are, who may write them).
pub fn checks(store: Option<&Path>) -> Vec<Check> {
    let root = rustix::process::geteuid().is_root();
    let mut out = machine_checks(root);
    out.extend(protections());
    if let Some(store) = store {
        out.extend(store_ownership(store));
    }
    out
}

/// `fs.protected_symlinks` and `fs.protected_hardlinks`: with either off, a
/// user who can write a store (or /tmp) can make root's storefs reach a
/// file it should not (docs/security.md, "Files inside a store").
fn protections() -> [Check; 2] {
    let one = |what: &'static str, off: &str| {
        let name = what.trim_start_matches("fs.");
        match crate::sys::protected(name) {
            Some(true) => check(what, Verdict::Ok, "1", ""),
            Some(false) => check(
                what,
                Verdict::Warn,
                format!("0: {off}"),
                &format!("sysctl -w fs.{name}=1 (and set it in /etc/sysctl.d)"),
            ),
            None => check(
                what,
                Verdict::Note,
                format!("cannot read /proc/sys/fs/{name}"),
                &format!("check it with `sysctl fs.{name}` (1 is the safe setting)"),
            ),
        }
    };
    [
        one(
            "fs.protected_symlinks",
            "symlinks in world-writable sticky directories (/tmp) are followed for anyone",
        ),
        one(
            "fs.protected_hardlinks",
            "anyone may hard-link a file they do not own, e.g. into a store root reads",
        ),
    ]
}

/// The store at `dir`, if there is one: owned by the caller, no symlinked
/// or group/world-writable directory (what `Store::open` refuses to write).
fn store_ownership(dir: &Path) -> Option<Check> {
    const WHAT: &str = "store ownership";
    let root = std::fs::canonicalize(dir).ok()?;
    if !root.join(crate::store::MARKER).exists() {
        return None;
    }
    Some(match crate::store::ownership_problem(&root) {
        Ok(None) => check(
            WHAT,
            Verdict::Ok,
            format!("{} is yours and only you can write it", root.display()),
            "",
        ),
        Ok(Some(problem)) => {
            let trusted = std::env::var_os(crate::store::SAFE_STORES_ENV).is_some();
            let fix = format!(
                "chown -R and chmod go-w the store's directories, or use a store of your own{}",
                if trusted {
                    format!(" ({} may be trusting it)", crate::store::SAFE_STORES_ENV)
                } else {
                    String::new()
                }
            );
            check(WHAT, Verdict::Warn, problem, &fix)
        }
        Err(e) => check(
            WHAT,
            Verdict::Warn,
            e.to_string(),
            "check the store's permissions",
        ),
    })
}

fn machine_checks(root: bool) -> Vec<Check> {
    vec![
        dev_fuse(),
        fusermount(root),
        allow_other(),
        kernel_feature(
            "FUSE passthrough",
            (6, 9),
            "reads and writes that bypass the daemon; not used by storefs yet",
        ),
        fuse_uring(),
        user_namespaces(root),
    ]
}

/// `storefs run` as a user other than root makes a user namespace.
fn user_namespaces(root: bool) -> Check {
    const WHAT: &str = "user namespaces";
    match super::ns::userns_blocker() {
        None => check(
            WHAT,
            Verdict::Ok,
            "ordinary users may make them (`storefs run` works for any user)",
            "",
        ),
        Some(b) => check(
            WHAT,
            Verdict::Note,
            if root {
                "forbidden to ordinary users (root's `storefs run` needs none)"
            } else {
                "forbidden: `storefs run` works only as root"
            },
            &b,
        ),
    }
}

fn dev_fuse() -> Check {
    const WHAT: &str = "/dev/fuse";
    match OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        Ok(_) => check(WHAT, Verdict::Ok, "present, readable and writable", ""),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => check(
            WHAT,
            Verdict::Missing,
            "missing",
            "load the module (modprobe fuse); in a container, pass --device /dev/fuse",
        ),
        Err(e) => check(
            WHAT,
            Verdict::Missing,
            format!("cannot open it: {e}"),
            "run as root, or make /dev/fuse mode 0666 (Debian's fuse3 package does)",
        ),
    }
}

fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn fusermount(root: bool) -> Check {
    const WHAT: &str = "fusermount3";
    const FIX: &str = "apt-get install fuse3";
    match on_path("fusermount3") {
        Some(p) => check(WHAT, Verdict::Ok, p.display().to_string(), ""),
        // Root mounts and unmounts by itself; other users need the setuid helper.
        None if root => check(
            WHAT,
            Verdict::Note,
            "not installed (root does not need it)",
            FIX,
        ),
        None => check(
            WHAT,
            Verdict::Missing,
            "not installed: users other than root cannot mount",
            FIX,
        ),
    }
}

fn allow_other() -> Check {
    const WHAT: &str = "user_allow_other";
    let conf = Path::new("/etc/fuse.conf");
    let set = std::fs::read_to_string(conf).is_ok_and(|text| {
        text.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .any(|l| l == "user_allow_other")
    });
    if set {
        check(WHAT, Verdict::Ok, "set in /etc/fuse.conf", "")
    } else {
        check(
            WHAT,
            Verdict::Note,
            "not set in /etc/fuse.conf: only root may mount with -o allow_other",
            "add the line user_allow_other to /etc/fuse.conf (needed for shared mounts by other users)",
        )
    }
}

/// The running kernel's (major, minor), from `uname -r`.
fn kernel_version() -> Option<(u32, u32)> {
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn kernel_feature(what: &'static str, since: (u32, u32), use_: &str) -> Check {
    match kernel_version() {
        Some(v) if v >= since => check(
            what,
            Verdict::Ok,
            format!("kernel {}.{} has it, if built with it ({use_})", v.0, v.1),
            "",
        ),
        Some(v) => check(
            what,
            Verdict::Note,
            format!(
                "kernel {}.{} is older than {}.{} ({use_})",
                v.0, v.1, since.0, since.1
            ),
            "a newer kernel; storefs works without it",
        ),
        None => check(what, Verdict::Note, "kernel version unknown", "none needed"),
    }
}

fn fuse_uring() -> Check {
    const WHAT: &str = "FUSE over io_uring";
    let param = Path::new(crate::fs::ENABLE_URING);
    match std::fs::read_to_string(param) {
        Ok(v) if v.trim() == "Y" => check(
            WHAT,
            Verdict::Ok,
            "enabled (enable_uring=Y): mounts use it (--transport auto, the default)",
            "",
        ),
        Ok(_) => check(
            WHAT,
            Verdict::Note,
            "available, disabled (enable_uring=N): mounts use /dev/fuse",
            "echo Y > /sys/module/fuse/parameters/enable_uring (as root) for fewer cross-core wake-ups",
        ),
        Err(_) => check(
            WHAT,
            Verdict::Note,
            "not in this kernel (needs 6.14+ built with CONFIG_FUSE_IO_URING)",
            "a newer kernel; storefs works without it",
        ),
    }
}
