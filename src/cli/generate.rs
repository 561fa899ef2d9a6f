//! `storefs generate`: man pages and shell completions from the clap
//! definitions, so `--help`, `man` and the shell say the same thing.

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
\fBrelatime\fR, \fBstrictatime\fR, \fBnodiratime\fR, \fBlazytime\fR, \fBnoacl\fR, \fBiversion\fR, \fBsilent\fR, ...
Accepted and ignored (their no\- forms too): the kernel refuses them in a FUSE mount; relatime is its
default there, and POSIX ACLs are always served.
.TP
anything else
Passed to storefs as FUSE options, e.g. \fBallow_other\fR, \fBnoatime\fR, \fBnoexec\fR, \fBsync\fR.
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

/// Write what `a` asks for (clap requires at least one of `--man` and `--completions`).
pub fn generate(a: GenerateArgs) -> Result<()> {
    if let Some(dir) = &a.man {
        man_pages(dir)?;
    }
    if let Some(dir) = &a.completions {
        completions(dir)?;
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
