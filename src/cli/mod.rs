//! Layer 6: the command line. Each verb parses its arguments and calls the layers
//! below; the logic lives there. Errors print as one line on stderr, the
//! layer's message then the command that fixes it ([`hint`]):
//! exit 0 ok, 1 error, 2 usage, 3 a snapshot made without the paths that
//! vanished while it ran ([`PartialExit`]); a closed standard output ends the
//! process by SIGPIPE, silently, as coreutils do.

mod archive;
mod args;
mod checkout;
mod commands;
mod fork;
mod generate;
mod hint;
mod interrupt;
mod json;
mod maint;
mod merge;
mod mount;
mod ops;
mod remote;
mod run;
mod term;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use nix::sys::signal::{self, SigHandler, Signal};
use rustix::event::{PollFd, PollFlags, Timespec};

pub use args::{Cli, Command};

use crate::store::Store;

/// Run the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => e.exit(), // help/version exit 0, usage errors exit 2
    };
    let daemon = matches!(&cli.command, Command::Mount(m) if m.foreground);
    if !daemon {
        init_stderr_logging();
    }
    match run(cli) {
        Ok(()) => 0,
        Err(e) if stdout_closed(&e) => die_of_sigpipe(),
        Err(e) if e.downcast_ref::<PartialExit>().is_some() => PARTIAL_EXIT,
        Err(e) if e.downcast_ref::<ExitWith>().is_some() => {
            e.downcast_ref::<ExitWith>().map_or(1, |x| x.0)
        }
        Err(e) => {
            eprintln!("storefs: error: {}", one_line(&e));
            1
        }
    }
}

/// The exit status of a snapshot that was made without some paths because
/// they vanished while it ran (as restic's 3: "snapshot created, some files
/// unreadable").
pub const PARTIAL_EXIT: i32 = 3;

/// Returned by a command that did its work but ends with [`PARTIAL_EXIT`];
/// what it left out is already on stderr.
#[derive(Debug)]
pub(crate) struct PartialExit;

impl std::fmt::Display for PartialExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "done, with paths left out")
    }
}

impl std::error::Error for PartialExit {}

/// Returned by a command whose exit status is another program's (`run`:
/// CMD's); what there was to say is already on stderr.
#[derive(Debug)]
pub(crate) struct ExitWith(pub i32);

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for ExitWith {}

/// Whether `e` is a write to a standard output whose reader has gone
/// (`storefs log | head`): then there is nobody to tell.
fn stdout_closed(e: &anyhow::Error) -> bool {
    let epipe = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.to_string().contains("os error 32")
    });
    // POLLERR on a pipe's write end means its read end is closed.
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let gone = rustix::event::poll(&mut fds, Some(&now)) == Ok(1)
        && fds[0].revents().contains(PollFlags::ERR);
    epipe && gone
}

/// End as coreutils do when their reader goes away: killed by SIGPIPE,
/// silently (Rust ignores SIGPIPE, so the write only failed with EPIPE).
fn die_of_sigpipe() -> i32 {
    // SAFETY: the default action installs no handler that could run
    // concurrently with anything.
    let _ = unsafe { signal::signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    let _ = signal::raise(Signal::SIGPIPE);
    128 + Signal::SIGPIPE as i32
}

/// One line on standard output; an error (EPIPE) is returned, not a panic as
/// with `println!`.
pub(crate) fn say(line: impl std::fmt::Display) -> Result<()> {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{line}")?;
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    let store_dir = store_dir(cli.store)?;
    match cli.command {
        Command::Init => commands::init(&store_dir),
        Command::Snapshot(a) => commands::snapshot(&store_dir, a),
        Command::Refs(a) => commands::refs(&open_ro(&store_dir)?, a),
        Command::Log(a) => commands::log(&open_ro(&store_dir)?, a),
        Command::Ls(a) => commands::ls(&open_ro(&store_dir)?, a),
        Command::Cat(a) => commands::cat(&open_ro(&store_dir)?, a),
        Command::Diff(a) => commands::diff(&open_ro(&store_dir)?, a),
        Command::Restore(a) => commands::restore(&open_ro(&store_dir)?, a),
        Command::Import(a) => archive::import(&store_dir, a),
        Command::ImportGit(a) => archive::import_git(&store_dir, a),
        Command::Export(a) => archive::export(&open_ro(&store_dir)?, a),
        Command::Fork(a) => fork::fork(&open(&store_dir)?, a),
        Command::Commit(a) => fork::commit(&store_dir, a),
        Command::Forks(a) => fork::forks(&open(&store_dir)?, a),
        Command::Ops(a) => ops::ops(&store_dir, a),
        Command::Revert(a) => ops::revert(&store_dir, a),
        Command::Merge(a) => merge::merge(&open(&store_dir)?, a),
        Command::Checkout(a) => checkout::checkout(&open(&store_dir)?, a),
        Command::Mount(a) => mount::mount(&store_dir, a),
        Command::Umount(a) => mount::umount(&store_dir, a),
        Command::Status(a) => mount::status(&store_dir, a),
        Command::Run(a) => run::run(&store_dir, a),
        Command::RunInit(a) => run::init(a),
        Command::Verify(a) => maint::verify(&open(&store_dir)?, a),
        Command::Gc(a) => maint::gc(&open(&store_dir)?, a),
        Command::Remote(c) => remote::remote(&store_dir, c),
        Command::Push(a) => remote::push(&open(&store_dir)?, a),
        Command::Pull(a) => remote::pull(&store_dir, a),
        Command::Generate(a) => generate::generate(a),
        Command::Doctor => maint::doctor(&store_dir),
    }
}

/// `--store`, else `$STOREFS_STORE`, else `~/.local/share/storefs`.
fn store_dir(flag: Option<PathBuf>) -> Result<PathBuf> {
    let env = std::env::var_os("STOREFS_STORE").map(PathBuf::from);
    if let Some(p) = flag.or(env).filter(|p| !p.as_os_str().is_empty()) {
        return Ok(p);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("no store given and $HOME is not set; pass --store DIR or set STOREFS_STORE")?;
    Ok(PathBuf::from(home).join(".local/share/storefs"))
}

/// Open an existing store (read commands never create one) to write in it:
/// refused when another user owns it or others may write it
/// (`STOREFS_SAFE_STORES` opts in).
fn open(dir: &std::path::Path) -> Result<Store> {
    Ok(Store::open(dir)?)
}

/// Open an existing store only to read it (no ownership check).
fn open_ro(dir: &std::path::Path) -> Result<Store> {
    Ok(Store::open_read_only(dir)?)
}

/// Warnings and errors from the layers go to stderr; `STOREFS_LOG` overrides the level.
fn init_stderr_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STOREFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(term::stderr_colour())
        .with_target(false)
        .without_time()
        .try_init();
}

/// An error and its causes on one line, without repeating a cause that the
/// outer message already quotes, then the command that fixes it
/// ([`hint::hint`]).
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        // A cause that repeats the outer message ("cannot mount at X" then
        // "cannot mount at X: why") says it all.
        if !out.is_empty() && s.starts_with(&out) {
            out = s;
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    if let Some(h) = hint::hint(e) {
        out.push_str(&h);
    }
    printable(&out)
}

/// `s` with control characters escaped (`\n`, `\t`, `\x1b`, …), so a
/// message naming a hostile file name stays one line and cannot drive the
/// terminal. For messages only; data on stdout is written as it is.
pub(crate) fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A warning from the layers below, as one line on stderr.
pub(crate) fn warn(w: &str) {
    eprintln!("storefs: warning: {}", printable(w));
}

/// A warning from the layers below that a command may fix, as one line on
/// stderr with that command ([`hint::of`]).
pub(crate) fn warn_of(w: &(dyn std::error::Error + 'static)) {
    warn(&format!("{w}{}", hint::of(w).unwrap_or_default()));
}
