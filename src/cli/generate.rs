//! `storefs generate`: man pages, shell completions and the Markdown command
//! reference (docs/cli.md) from the clap definitions, so `--help`, `man`, the
//! shell and the docs say the same thing.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;

use super::args::{Cli, GenerateArgs};

/// The sections of storefs(1) that --help has no room for (roff).
const OVERVIEW_EXTRA: &str = r#".SH ENVIRONMENT
.TP
\fBSTOREFS_STORE\fR
The store directory when \fB\-\-store\fR is not given; else \fI~/.local/share/storefs\fR.
.TP
\fBSTOREFS_LOG\fR
What is logged (tracing's filter syntax, e.g. \fIstorefs=debug\fR); default \fIwarn\fR on
stderr for commands, \fIinfo\fR for a mount's daemon, which logs to
\fISTORE/logs/mount\-<key>.log\fR.
.TP
\fBAWS_*\fR
Credentials, region and endpoint of S3 remotes, as the AWS tools read them
(\fBAWS_ACCESS_KEY_ID\fR, \fBAWS_SECRET_ACCESS_KEY\fR, \fBAWS_REGION\fR,
\fBAWS_ENDPOINT_URL\fR, \fBAWS_ALLOW_HTTP\fR; see \fBstorefs\-remote\-add\fR(1)).
.TP
\fBGOOGLE_*\fR, \fBAZURE_*\fR
Credentials and endpoints of \fIgs://\fR (Google Cloud Storage) and \fIaz://\fR (Azure
Blob Storage) remotes (\fBGOOGLE_SERVICE_ACCOUNT\fR, \fBGOOGLE_BASE_URL\fR,
\fBAZURE_STORAGE_ACCOUNT_NAME\fR, \fBAZURE_STORAGE_ACCOUNT_KEY\fR,
\fBAZURE_STORAGE_USE_EMULATOR\fR, …; see \fBstorefs\-remote\-add\fR(1)).
.SH FILES
A store is a directory; everything in it is immutable and named by its sha256, or
replaced atomically.
.TP
\fISTORE/storefs.json\fR
Marks the directory as a store, with its format version.
.TP
\fISTORE/objects/\fR
File chunks and trees, zstd\-compressed: large ones one file each, small ones in packs
(\fIobjects/packs/*.pack\fR, \fI*.idx\fR, the multi\-pack index \fIindex.midx\fR).
.TP
\fISTORE/checkpoints/<id>.json\fR
Checkpoint records.
.TP
\fISTORE/refs/<name>\fR
Refs: a checkpoint id.
.TP
\fISTORE/forks/<name>/\fR
Forks: \fIfork.json\fR, \fIHEAD\fR, the write\-ahead \fIjournal/\fR, \fIlock\fR.
.TP
\fISTORE/mounts/\fR
One record per live mount, and its daemon's control socket.
.TP
\fISTORE/logs/\fR
Daemon logs, one per mountpoint.
.TP
\fISTORE/remotes/\fR, \fISTORE/archives/\fR, \fISTORE/statcache/\fR, \fISTORE/quarantine/\fR
Remotes, the index of imported archives, snapshot stat caches, objects \fBverify\fR
found corrupt.
.PP
The full format is in docs/format.md of the source.
.SH MOUNT(8) AND FSTAB
With the helpers \fI/sbin/mount.fuse.storefs\fR and \fI/sbin/umount.fuse.storefs\fR installed:
.PP
.nf
  mount \-t fuse.storefs s1 /srv/_lead_sessions/s1 \-o store=/var/lib/storefs
  # /etc/fstab:
  s1  /srv/_lead_sessions/s1  fuse.storefs  store=/var/lib/storefs,nofail  0  0
.fi
.PP
The source is what \fBstorefs mount\fR takes: a ref, a fork (mounted read\-write), a
checkpoint id or prefix, or an archive file. Options:
.TP
\fBstore=\fIDIR\fR
The store; default \fB$STOREFS_STORE\fR, else \fI/var/lib/storefs\fR.
.TP
\fBcache_size=\fISIZE\fR, \fBcommit_interval=\fISECS\fR, \fBthreads=\fIN\fR, \fBtransport=\fIHOW\fR
As \fB\-\-cache\-size\fR, \fB\-\-commit\-interval\fR, \fB\-\-threads\fR, \fB\-\-transport\fR of \fBstorefs mount\fR.
.TP
\fBrw\fR, \fBro\fR, \fBdefaults\fR, \fBauto\fR, \fBnoauto\fR, \fBuser\fR, \fBnofail\fR, \fB_netdev\fR, \fBx\-*\fR, \fBnosuid\fR, \fBnodev\fR, ...
Dropped: mount(8) and fstab bookkeeping. storefs always mounts \fBnosuid,nodev\fR, read\-only,
or read\-write for a fork.
.TP
\fBrelatime\fR, \fBstrictatime\fR, \fBnodiratime\fR, \fBatime\fR, \fBnoatime\fR (their no\- forms too)
Passed to storefs: a fork updates atime on reads only when one of them names a mode (mount(8)'s
default relatime is not named); dropped with \fBro\fR.
.TP
\fBlazytime\fR, \fBnoacl\fR, \fBiversion\fR, \fBsilent\fR, ...
Accepted and ignored (their no\- forms too): the kernel refuses them in a FUSE mount, and POSIX
ACLs are always served.
.TP
anything else
Passed to storefs as FUSE options, e.g. \fBallow_other\fR, \fBnoexec\fR, \fBsync\fR.
.TP
\fBremount\fR
\fBmount \-o remount,\fIOPTS MOUNTPOINT\fR changes the mount in place (\fBstorefs mount \-\-remount\fR;
no second daemon): \fBro\fR, \fBrw\fR (a fork's), \fBnoexec\fR, the atime options, \fBsync\fR,
\fBdirsync\fR are applied; FUSE and storefs options are set only when mounting and are named on
stderr as ignored. A path that is not a storefs mount is an error naming it.
.PP
The source in \fI/proc/mounts\fR is the one given to mount(8) (or \fBstorefs mount\fR), so
\fBfindmnt \-S\fR \fIs1\fR and \fBumount\fR \fIs1\fR find the mount. When umount(8) looks the mount up
in the mount table (\fBumount\fR \fIs1\fR, a relative path, a mount with \fBx\-*\fR or \fB_netdev\fR)
it runs \fI/sbin/umount.fuse.storefs\fR, that is \fBstorefs umount\fR: a fork is committed and its
daemon has exited when it returns (\fB\-l\fR and \fB\-f\fR are left to umount(8)). For
\fBumount\fR \fI/absolute/path\fR util\-linux takes the type from statfs(2) (\fBfuse\fR) and returns
once the kernel mount is gone; a \fBstorefs mount\fR of a fork whose last daemon still commits
waits for it, saying so.
\fBstorefs\-umount\-all\fR unmounts every storefs mount. The systemd unit
\fBstorefs@\fIREF\fB.service\fR keeps a mount of \fIREF\fR running.
"#;

/// Write what `a` asks for (clap requires at least one of `--man`,
/// `--completions` and `--markdown`).
pub fn generate(a: GenerateArgs) -> Result<()> {
    if let Some(dir) = &a.man {
        man_pages(dir)?;
    }
    if let Some(dir) = &a.completions {
        completions(dir)?;
    }
    if let Some(file) = &a.markdown {
        write_file(file, markdown().as_bytes())?;
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// storefs(1) and storefs-VERB(1) for every verb, nested verbs included.
fn man_pages(dir: &Path) -> Result<()> {
    create_dir(dir)?;
    let cmd = Cli::command();
    let mut page = Vec::new();
    let man = Man::new(cmd.clone());
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    man.render_subcommands_section(&mut page)?;
    page.write_all(OVERVIEW_EXTRA.as_bytes())?;
    man.render_version_section(&mut page)?;
    write_file(&dir.join("storefs.1"), &page)?;
    verb_pages(dir, &cmd, "storefs")
}

/// A page for each subcommand of `cmd` (named `prefix-NAME`), recursively.
fn verb_pages(dir: &Path, cmd: &clap::Command, prefix: &str) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("{prefix}-{}", sub.get_name());
        let sub = sub.clone().name(name.clone());
        let mut page = Vec::new();
        Man::new(sub.clone()).render(&mut page)?;
        write_file(&dir.join(format!("{name}.1")), &page)?;
        verb_pages(dir, &sub, &name)?;
    }
    Ok(())
}

/// bash, zsh and fish completions under their conventional file names.
fn completions(dir: &Path) -> Result<()> {
    create_dir(dir)?;
    let mut cmd = Cli::command();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "storefs", dir)
            .with_context(|| format!("cannot write {shell} completions into {}", dir.display()))?;
    }
    Ok(())
}

/// The command that regenerates docs/cli.md, named by the staleness test.
pub const MARKDOWN_COMMAND: &str = "cargo run -- generate --markdown docs/cli.md";

/// The command reference as Markdown: the overview, then every visible verb
/// (nested ones too) with its description, usage, arguments, options and
/// closing notes, in the order `--help` lists them.
pub fn markdown() -> String {
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = String::new();
    out.push_str("# storefs command reference\n\n");
    out.push_str(&format!(
        "<!-- Generated from the clap definitions (src/cli/args.rs) by `{MARKDOWN_COMMAND}`; \
         do not edit: a test fails when this file is stale. -->\n\n"
    ));
    out.push_str(
        "Every verb also answers `--help` (`-h` for the short form) with the same text; \
         the man pages `storefs(1)` and `storefs-VERB(1)` come from the same definitions.\n\n",
    );
    let mut verbs = Vec::new();
    collect_verbs(&cmd, "storefs", &mut verbs);
    for (name, _) in &verbs {
        out.push_str(&format!("- [`{name}`](#{})\n", anchor(name)));
    }
    out.push('\n');
    command_section(&mut out, "storefs", &cmd, true);
    for (name, sub) in &verbs {
        command_section(&mut out, name, sub, false);
    }
    // One newline at the end, whatever the last section ended with.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Every visible subcommand of `cmd`, depth first, with its full name.
fn collect_verbs(cmd: &clap::Command, prefix: &str, out: &mut Vec<(String, clap::Command)>) {
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let name = format!("{prefix} {}", sub.get_name());
        out.push((name.clone(), sub.clone()));
        collect_verbs(sub, &name, out);
    }
}

/// GitHub's anchor for a heading made of `name` in backticks.
fn anchor(name: &str) -> String {
    name.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// `text` with `<` escaped outside code spans, so that `<id>` in a help text
/// is shown, not taken for HTML.
fn escape_prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match c {
            '`' => in_code = !in_code,
            '<' if !in_code => out.push('\\'),
            _ => {}
        }
        out.push(c);
    }
    out
}

/// A help text as Markdown lines: each line as it is (`<` escaped), with
/// `indent` before every line after the first (so a list item keeps its
/// continuation lines).
fn indented(text: &str, indent: &str) -> String {
    let text = escape_prose(text);
    let mut out = String::new();
    for (i, line) in text.trim_end().lines().enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(indent);
            }
        }
        out.push_str(line.trim_end());
    }
    out
}

fn command_section(out: &mut String, name: &str, cmd: &clap::Command, top: bool) {
    let level = if top { "##" } else { "###" };
    out.push_str(&format!("{level} `{name}`\n\n"));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        out.push_str(&indented(&about.to_string(), ""));
        out.push_str("\n\n");
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
    out.push_str(&format!("```text\n{}\n```\n\n", usage.trim_end()));
    if cmd.get_aliases().next().is_some() {
        let aliases: Vec<String> = cmd.get_aliases().map(|a| format!("`{a}`")).collect();
        out.push_str(&format!("Also: {}.\n\n", aliases.join(", ")));
    }
    let shown = |a: &&clap::Arg| {
        !a.is_hide_set()
            && !matches!(a.get_id().as_str(), "help" | "version")
            // The global --store is described once, under `storefs`.
            && (top || !a.is_global_set())
    };
    let positionals: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_positional())
        .filter(shown)
        .collect();
    let options: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .filter(shown)
        .collect();
    if !positionals.is_empty() {
        out.push_str("Arguments:\n\n");
        for a in positionals {
            arg_item(out, a);
        }
        out.push('\n');
    }
    if !options.is_empty() {
        out.push_str("Options:\n\n");
        for a in options {
            arg_item(out, a);
        }
        out.push('\n');
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        out.push_str(&indented(&after.to_string(), ""));
        out.push_str("\n\n");
    }
    if !top && cmd.has_subcommands() {
        let subs: Vec<String> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .map(|s| {
                let full = format!("{name} {}", s.get_name());
                format!("[`{}`](#{})", s.get_name(), anchor(&full))
            })
            .collect();
        out.push_str(&format!("Subcommands: {}.\n\n", subs.join(", ")));
    }
}

/// One argument as a list item: its spelling, then its help and what clap
/// knows of its values.
fn arg_item(out: &mut String, a: &clap::Arg) {
    let values: Vec<String> = a
        .get_value_names()
        .map(|v| v.iter().map(|n| format!("<{n}>")).collect())
        .unwrap_or_else(|| vec![format!("<{}>", a.get_id().as_str().to_uppercase())]);
    let takes = a.get_num_args().is_some_and(|n| n.takes_values()) || a.is_positional();
    let mut spelling = String::new();
    if let Some(s) = a.get_short() {
        spelling.push_str(&format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        if !spelling.is_empty() {
            spelling.push_str(", ");
        }
        spelling.push_str(&format!("--{l}"));
    }
    if takes {
        let v = values.join(" ");
        let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
        let v = if many { format!("{v}...") } else { v };
        if spelling.is_empty() {
            spelling = v;
        } else {
            spelling.push(' ');
            spelling.push_str(&v);
        }
    }
    out.push_str(&format!("- `{spelling}`"));
    if let Some(help) = a.get_long_help().or(a.get_help()) {
        out.push_str(": ");
        out.push_str(&indented(&help.to_string(), "  "));
    }
    let mut notes = Vec::new();
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let help_says_default = a
        .get_long_help()
        .or(a.get_help())
        .is_some_and(|h| h.to_string().contains("[default"));
    if takes
        && !defaults.iter().all(|d| d.is_empty())
        && !help_says_default
        && !a.is_hide_default_value_set()
    {
        notes.push(format!("default: `{}`", defaults.join(" ")));
    }
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| format!("`{}`", p.get_name()))
        .collect();
    if takes && !possible.is_empty() && !matches!(a.get_action(), clap::ArgAction::SetTrue) {
        notes.push(format!("one of {}", possible.join(", ")));
    }
    if let Some(env) = a.get_env() {
        notes.push(format!("env: `{}`", env.to_string_lossy()));
    }
    if a.is_required_set() && !a.is_positional() {
        notes.push("required".to_string());
    }
    if !notes.is_empty() {
        out.push_str(&format!(" ({})", notes.join("; ")));
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/cli.md is what `storefs generate --markdown` writes now.
    #[test]
    fn docs_cli_md_is_current() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
        let committed = fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == markdown(),
            "docs/cli.md is stale: run `{MARKDOWN_COMMAND}`"
        );
    }

    #[test]
    fn markdown_names_every_visible_verb_once() {
        let md = markdown();
        for verb in ["snapshot", "mount", "remote add", "generate", "doctor"] {
            let heading = format!("### `storefs {verb}`\n");
            assert_eq!(md.matches(&heading).count(), 1, "{verb}");
        }
        assert!(!md.contains("__run-init"), "hidden verbs stay hidden");
    }
}
