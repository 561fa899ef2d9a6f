//! When a read updates an inode's access time: a fork mount's atime policy,
//! from its mount options, and Linux's rule for it (`fs/inode.c`:
//! `atime_needs_update`, `relatime_need_update`).
//!
//! A fork updates atime only when the mount names an atime option
//! explicitly (`relatime`, `strictatime`, …; docs/guide.md, "Access
//! times"): with none, reads change nothing, as `noatime` (every read
//! would otherwise write a journal record, and every browse dirty a fork).
//! `mount(8)` passes only the options it is given, so its own default,
//! relatime, is not explicit.

/// How reads update atime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtimeMode {
    /// Never (no atime option, or `noatime`).
    #[default]
    Never,
    /// Linux's `relatime`: when atime is not after mtime or ctime, or is a
    /// day old or more.
    Relative,
    /// Every read (`strictatime`).
    Strict,
}

/// A mount's atime policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtimePolicy {
    pub mode: AtimeMode,
    /// `nodiratime`: listing a directory leaves its atime.
    pub nodiratime: bool,
}

/// A day, in nanoseconds: the most relatime lets an atime lag.
const DAY_NS: i64 = 24 * 60 * 60 * 1_000_000_000;

impl AtimePolicy {
    /// Whether `option` is one this policy takes (the kernel refuses all
    /// but `atime` and `noatime` as a FUSE mount's options).
    pub fn is_option(option: &str) -> bool {
        matches!(
            option,
            "atime"
                | "noatime"
                | "relatime"
                | "norelatime"
                | "strictatime"
                | "nostrictatime"
                | "diratime"
                | "nodiratime"
        )
    }

    /// The policy `options` (in order, later ones winning as in
    /// `mount(8)`) name. `relatime`, `atime` and `nostrictatime` select
    /// [`AtimeMode::Relative`]; `strictatime` and `norelatime`
    /// [`AtimeMode::Strict`]; `noatime` [`AtimeMode::Never`]. `nodiratime`
    /// or `diratime` alone is explicit too and means relatime for files,
    /// as on any Linux mount. None of them: [`AtimeMode::Never`].
    pub fn from_options<'a>(options: impl IntoIterator<Item = &'a str>) -> AtimePolicy {
        let (mut mode, mut dir_option, mut nodiratime) = (None, false, false);
        for o in options {
            match o {
                "noatime" => mode = Some(AtimeMode::Never),
                "relatime" | "atime" | "nostrictatime" => mode = Some(AtimeMode::Relative),
                "strictatime" | "norelatime" => mode = Some(AtimeMode::Strict),
                "nodiratime" => (dir_option, nodiratime) = (true, true),
                "diratime" => (dir_option, nodiratime) = (true, false),
                _ => {}
            }
        }
        let mode = match (mode, dir_option) {
            (Some(m), _) => m,
            (None, true) => AtimeMode::Relative,
            (None, false) => AtimeMode::Never,
        };
        AtimePolicy { mode, nodiratime }
    }

    /// Whether a read at `now` sets the atime of an inode (a directory if
    /// `dir`) with these times (ns since the epoch) to `now`.
    pub fn needs_update(&self, dir: bool, atime: i64, mtime: i64, ctime: i64, now: i64) -> bool {
        if dir && self.nodiratime {
            return false;
        }
        let due = match self.mode {
            AtimeMode::Never => false,
            AtimeMode::Strict => true,
            AtimeMode::Relative => {
                atime <= mtime || atime <= ctime || now.saturating_sub(atime) >= DAY_NS
            }
        };
        due && atime != now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(opts: &str) -> AtimePolicy {
        AtimePolicy::from_options(opts.split(',').filter(|o| !o.is_empty()))
    }

    #[test]
    fn only_an_explicit_option_turns_updates_on_and_the_last_one_wins() {
        assert_eq!(policy("").mode, AtimeMode::Never);
        assert_eq!(policy("allow_other,lazytime").mode, AtimeMode::Never);
        assert_eq!(policy("relatime").mode, AtimeMode::Relative);
        assert_eq!(policy("atime").mode, AtimeMode::Relative);
        assert_eq!(policy("strictatime").mode, AtimeMode::Strict);
        assert_eq!(policy("norelatime").mode, AtimeMode::Strict);
        assert_eq!(policy("relatime,strictatime").mode, AtimeMode::Strict);
        assert_eq!(policy("strictatime,noatime").mode, AtimeMode::Never);
        assert_eq!(policy("noatime,relatime").mode, AtimeMode::Relative);
        let p = policy("nodiratime");
        assert_eq!((p.mode, p.nodiratime), (AtimeMode::Relative, true));
        let p = policy("nodiratime,strictatime,diratime");
        assert_eq!((p.mode, p.nodiratime), (AtimeMode::Strict, false));
        assert_eq!(policy("noatime,nodiratime").mode, AtimeMode::Never);
    }

    #[test]
    fn relatime_updates_an_atime_not_after_mtime_or_ctime_or_a_day_old() {
        let r = policy("relatime");
        let s = 1_000_000_000;
        // atime after both, recent: left.
        assert!(!r.needs_update(false, 10 * s, 5 * s, 5 * s, 11 * s));
        // atime == mtime, or before it: updated.
        assert!(r.needs_update(false, 5 * s, 5 * s, 4 * s, 11 * s));
        assert!(r.needs_update(false, 4 * s, 5 * s, 4 * s, 11 * s));
        // ctime at or after atime: updated.
        assert!(r.needs_update(false, 10 * s, 5 * s, 10 * s, 11 * s));
        // A day old: updated; a second less: left.
        assert!(r.needs_update(false, 10 * s, 5 * s, 5 * s, 10 * s + DAY_NS));
        assert!(!r.needs_update(false, 10 * s, 5 * s, 5 * s, 9 * s + DAY_NS));
        // Strict: always (but to the same time); never: never.
        let st = policy("strictatime");
        assert!(st.needs_update(false, 10 * s, 5 * s, 5 * s, 11 * s));
        assert!(!st.needs_update(false, 11 * s, 5 * s, 5 * s, 11 * s));
        assert!(!policy("").needs_update(false, 0, 5 * s, 5 * s, 11 * s));
        // nodiratime: directories never.
        let nd = policy("strictatime,nodiratime");
        assert!(!nd.needs_update(true, 0, 5 * s, 5 * s, 11 * s));
        assert!(nd.needs_update(false, 0, 5 * s, 5 * s, 11 * s));
    }
}
