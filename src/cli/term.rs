//! What reaches a terminal: names and messages from a checkpoint (a file
//! named `a\x1b[31mb`, a commit message imported from git) are shown
//! escaped on a terminal, so they cannot move the cursor, change colours or
//! retitle the window; written to a pipe or a file they stay as they are,
//! as GNU `ls` does, so `storefs diff A B | cut -c3-` loses nothing. Colour
//! on stderr only when it is a terminal and `NO_COLOR` is unset.

use std::borrow::Cow;
use std::io::IsTerminal;

/// How names and messages go to standard output: escaped when it is a
/// terminal, as they are otherwise.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shown {
    escape: bool,
}

impl Shown {
    /// For standard output as it is now.
    pub(crate) fn stdout() -> Shown {
        Shown {
            escape: std::io::stdout().is_terminal(),
        }
    }

    /// A name or path: its bytes, or escaped (see [`escape`]).
    pub(crate) fn name<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if self.escape && needs_escape(bytes, false) {
            Cow::Owned(escape(bytes, false).into_bytes())
        } else {
            Cow::Borrowed(bytes)
        }
    }

    /// One line of text (a path, a URL): as [`Shown::name`].
    pub(crate) fn line<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.escape && needs_escape(s.as_bytes(), false) {
            Cow::Owned(escape(s.as_bytes(), false))
        } else {
            Cow::Borrowed(s)
        }
    }

    /// Text of several lines (a commit message): as [`Shown::name`], but
    /// newlines and tabs stay.
    pub(crate) fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.escape && needs_escape(s.as_bytes(), true) {
            Cow::Owned(escape(s.as_bytes(), true))
        } else {
            Cow::Borrowed(s)
        }
    }
}

/// Whether `bytes` holds anything [`escape`] changes.
fn needs_escape(bytes: &[u8], keep_lines: bool) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.chars().any(|c| escaped_char(c, keep_lines)),
        Err(_) => true,
    }
}

/// Characters a terminal acts on rather than shows: C0 and C1 controls
/// (ESC among them), DEL, and the bidirectional overrides that reorder
/// what is shown (U+202A-U+202E, U+2066-U+2069); and the backslash that
/// starts an escape.
fn escaped_char(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' if keep_lines => false,
        '\\' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        c => c.is_control(),
    }
}

/// `bytes` with what a terminal would act on written out: `\n`, `\t`,
/// `\r`, `\\`, `\xNN` for other controls and for each byte that is not
/// UTF-8, `\u{NNNN}` for a bidirectional override. Unambiguous: every
/// backslash in the result starts an escape.
pub(crate) fn escape(bytes: &[u8], keep_lines: bool) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if !escaped_char(c, keep_lines) {
                out.push(c);
                continue;
            }
            match c {
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Whether to colour what goes to stderr: only a terminal, and only when
/// `NO_COLOR` (<https://no-color.org>) is unset or empty.
pub(crate) fn stderr_colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_invalid_utf8_and_overrides_are_escaped() {
        assert_eq!(escape(b"a\x1b[31mb", false), "a\\x1b[31mb");
        assert_eq!(escape(b"c\nd\te\rf", false), "c\\nd\\te\\rf");
        assert_eq!(escape(b"del\x7f", false), "del\\x7f");
        assert_eq!(escape("c1\u{9b}31m".as_bytes(), false), "c1\\x9b31m");
        assert_eq!(escape(b"bad\xff\xfeutf8", false), "bad\\xff\\xfeutf8");
        assert_eq!(escape("rl\u{202e}txt".as_bytes(), false), "rl\\u{202e}txt");
        assert_eq!(escape(b"back\\slash", false), "back\\\\slash");
        assert_eq!(escape("plain é".as_bytes(), false), "plain é");
        assert_eq!(escape(b"two\nlines\tand\x1b", true), "two\nlines\tand\\x1b");
    }

    #[test]
    fn a_pipe_gets_the_bytes_a_terminal_gets_them_escaped() {
        let raw = b"a\x1b[31mb";
        let pipe = Shown { escape: false };
        let tty = Shown { escape: true };
        assert_eq!(&*pipe.name(raw), raw);
        assert_eq!(&*tty.name(raw), b"a\\x1b[31mb");
        assert!(matches!(tty.name(b"plain"), Cow::Borrowed(_)));
        assert_eq!(tty.text("m\n\x1b]0;t\x07"), "m\n\\x1b]0;t\\x07");
    }
}
