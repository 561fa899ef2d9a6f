//! The command line, as clap sees it. Every verb has its own `--help`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// What `storefs --version` prints after the name: the release and the
/// store format it reads and writes (`store::FORMAT_VERSION`, checked by a test).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (store format 1)");

/// Content-addressed checkpoints of directory trees, mounted read-only at the
/// absolute path they were taken from.
///
/// A store holds checkpoints of directory trees (deduplicated, compressed,
/// verified on every read). `storefs mount` puts any checkpoint back at its
/// original path through FUSE, so tools that recorded absolute paths work
/// unchanged, on this machine or any machine that has the store.
#[derive(Debug, Parser)]
#[command(
    name = "storefs",
    version = VERSION,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// The store directory [default: $STOREFS_STORE, else ~/.local/share/storefs]
    // $STOREFS_STORE is read in `cli::store_dir`, not by clap: a value clap
    // took from the environment shows in usage lines as if it were typed.
    #[arg(long, global = true, value_name = "DIR")]
    pub store: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create an empty store (any command that writes creates it on first use)
    Init,
    /// Record a directory tree as a new checkpoint; prints its id on stdout
    Snapshot(SnapshotArgs),
    /// List refs (named pointers to checkpoints); `storefs forks` lists forks
    Refs(RefsArgs),
    /// Show checkpoints: the history of a ref, or every checkpoint in the store
    Log(LogArgs),
    /// List a directory inside a checkpoint
    ///
    /// On a terminal, control characters, bidirectional overrides and bytes
    /// that are not UTF-8 in names are shown escaped (`\x1b`, `\n`, `\\`); to a
    /// pipe or a file names go as they are, as with GNU ls (--json for scripts).
    Ls(LsArgs),
    /// Write a file from a checkpoint to stdout
    Cat(CatArgs),
    /// Show paths added (A), removed (D) and changed (M) between two checkpoints
    ///
    /// On a terminal, control characters and bytes that are not UTF-8 in
    /// paths are shown escaped, as `storefs ls` does; to a pipe or a file
    /// paths go as they are.
    Diff(DiffArgs),
    /// Recreate a checkpoint's tree in a new or empty directory, byte- and metadata-exact
    Restore(RestoreArgs),
    /// Import a tar archive (.tar, .tar.zst, .tar.gz; whole or split) as a checkpoint
    Import(ImportArgs),
    /// Import a git repository's commits (branches and tags) as checkpoints, incrementally
    #[command(name = "import-git")]
    ImportGit(ImportGitArgs),
    /// Write a checkpoint as a standard tar archive (optionally split) with a sha256 manifest
    Export(ExportArgs),
    /// Make a fork of a checkpoint: a named, movable head you can mount read-write
    Fork(ForkArgs),
    /// Fold a fork's journal into a new checkpoint and move the fork's head to it
    Commit(CommitArgs),
    /// List forks: name, head, fork point, uncommitted changes, where mounted
    Forks(ForksArgs),
    /// Show the operations that made a checkpoint or fork: who changed what, when
    Ops(OpsArgs),
    /// Undo what some processes changed in a fork (mounted or not), leaving what others changed later
    Revert(RevertArgs),
    /// Three-way merge of two checkpoints or forks into a new checkpoint with both as parents
    Merge(MergeArgs),
    /// Put paths into a fork exactly as they are in a checkpoint (undo one path), mounted or not
    Checkout(CheckoutArgs),
    /// Mount a checkpoint or archive read-only, or a fork read-write; by default at its origin
    Mount(MountArgs),
    /// Unmount a storefs mount and wait for its daemon to exit
    ///
    /// The directories `mount` created for the mountpoint (it and its missing
    /// parents) are removed again while they are empty; one that was there
    /// before stays.
    #[command(alias = "unmount")]
    Umount(UmountArgs),
    /// List live mounts and runs of this store
    Status(StatusArgs),
    /// Run a command with forks (and checkpoints) mounted at their origins, seen by it alone
    Run(RunArgs),
    /// Internal: the init of a run's PID namespace (runs CMD, forwards signals)
    #[command(name = "__run-init", hide = true)]
    RunInit(RunInitArgs),
    /// Read every object reachable from checkpoints and report corrupt or missing ones
    Verify(VerifyArgs),
    /// Delete objects that no checkpoint reaches (every checkpoint is kept)
    Gc(GcArgs),
    /// Manage remotes (S3 buckets or directories to push checkpoints to and pull from)
    #[command(subcommand)]
    Remote(RemoteCommand),
    /// Upload a checkpoint, its history and its objects to a remote, then move the remote ref
    Push(PushArgs),
    /// Fetch a remote ref's checkpoint, history and objects, then set a local ref
    Pull(PullArgs),
    /// Write the man pages, shell completions or Markdown command reference (for packaging and docs)
    Generate(GenerateArgs),
    /// Check what this machine has of what mounts need, and say how to fix what is missing
    #[command(after_help = "\
Checks /dev/fuse, fusermount3 (users other than root mount through it), user_allow_other in \
/etc/fuse.conf (-o allow_other for users other than root), and the kernel's FUSE passthrough \
and FUSE over io_uring; then what weakens the store's safety: fs.protected_symlinks or \
fs.protected_hardlinks = 0, and \
a store (--store) owned by another user, with a symlinked directory, or writable by group or \
others. One line each: ok, missing (mounts fail without it), note (optional) or warning, with \
the fix. Exit status 1 when something is missing.")]
    Doctor,
}

#[derive(Debug, Subcommand)]
pub enum RemoteCommand {
    /// Add a remote: s3://, gs://, az:// (credentials from the environment) or file:///PATH
    #[command(after_help = "\
URLs: s3://BUCKET/PREFIX (Amazon S3 or an S3-compatible server; AWS_ACCESS_KEY_ID, \
AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP), gs://BUCKET/PREFIX (Google \
Cloud Storage; GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_BASE_URL for \
another server), az://CONTAINER/PREFIX (Azure Blob Storage; AZURE_STORAGE_ACCOUNT_NAME with \
AZURE_STORAGE_ACCOUNT_KEY or another AZURE_STORAGE_* credential, AZURE_STORAGE_USE_EMULATOR=true \
for azurite at AZURITE_BLOB_STORAGE_URL), file:///ABSOLUTE/PATH (a directory). The URL is checked, \
not contacted; the variables are read when a command uses the remote. Refs move by \
compare-and-swap on every backend (a conditional put; file:// a lock file).")]
    Add {
        /// Its name ([A-Za-z0-9._-]+)
        name: String,
        /// s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX or file:///ABSOLUTE/PATH
        url: String,
    },
    /// List remotes: `name<TAB>url`
    List {
        /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
        #[arg(long)]
        json: bool,
    },
    /// Forget a remote (nothing on the remote is touched)
    Remove {
        /// The remote's name
        name: String,
    },
    /// List the remote's refs: `name<TAB>checkpoint`
    ///
    /// A file under the remote's refs/ that is no ref (a bad name, content
    /// that is no checkpoint id) is skipped with one warning naming it.
    Refs {
        /// The remote's name
        name: String,
        /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
        #[arg(long)]
        json: bool,
    },
    /// Delete a remote ref; `storefs gc --remote NAME` then reclaims what only it reached
    #[command(
        after_help = "Not a compare-and-swap on S3: a push that moves the ref between this command's read and its delete is lost (its objects stay until a gc --remote)."
    )]
    DeleteRef {
        /// The remote's name
        name: String,
        /// The remote ref to delete
        r#ref: String,
    },
}

#[derive(Debug, Args)]
#[command(
    after_help = "Uploads only the objects the remote lacks (in parallel), then the \
checkpoint records, then moves the remote ref by compare-and-swap. A push that would move the \
remote ref off a checkpoint that is not an ancestor of TARGET (someone else pushed) is refused \
unless --force. An interrupted push can simply be run again. A fork pushes its head to the \
remote ref of the fork's name (also for a fork made with `storefs fork REMOTE:REF --name NAME`: \
it pushes to NAME, not REF) unless --as says otherwise."
)]
pub struct PushArgs {
    /// The remote's name (`storefs remote list`)
    pub remote: String,
    /// A ref, fork name (its head), checkpoint id or unique id prefix (4+ hex digits), or git:COMMIT
    pub target: String,
    /// The remote ref to move [default: TARGET when it is a ref or fork name]
    #[arg(long = "as", value_name = "NAME")]
    pub as_name: Option<String>,
    /// Move the remote ref even if that drops checkpoints only the remote has
    #[arg(long)]
    pub force: bool,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Fetches the checkpoint the remote ref names, its history and every \
object the store lacks, verifying each by its sha256, then writes the records and the local \
ref. A corrupt or missing remote object fails the pull and publishes nothing. With --fork \
NAME no ref is set: the fork's head moves to the pulled checkpoint instead, only if the fork is \
not mounted, has no uncommitted changes, and its head is an ancestor of the pulled checkpoint \
(else refused unless --force)."
)]
pub struct PullArgs {
    /// The remote's name (`storefs remote list`)
    pub remote: String,
    /// The remote ref to fetch
    pub r#ref: String,
    /// The local ref to set [default: REF]
    #[arg(long = "as", value_name = "LOCALREF", conflicts_with = "fork")]
    pub as_name: Option<String>,
    /// Move this fork's head to the pulled checkpoint instead of setting a ref
    #[arg(long, value_name = "FORK")]
    pub fork: Option<String>,
    /// Move the local ref (or fork head) even if it is not an ancestor of the pulled checkpoint
    #[arg(long)]
    pub force: bool,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
A path that vanishes while the snapshot runs (a temp file renamed or deleted between \
the listing of its directory and its read) is left out: the checkpoint is still written \
and its id printed, each such path is named on stderr (the first 20, then a count), and \
the exit status is 3. A file that changes while it is read is read again (3 tries), then \
fails the snapshot.")]
pub struct SnapshotArgs {
    /// The directory to record; its absolute path becomes the checkpoint's origin
    pub dir: PathBuf,
    /// Point this ref at the new checkpoint (its previous target becomes the parent)
    #[arg(long, value_name = "NAME")]
    pub r#ref: Option<String>,
    /// Compare against this checkpoint (default: the ref's current one): files with the same
    /// device, inode, size, mtime and ctime are taken from it without being read
    #[arg(long, value_name = "CHECKPOINT")]
    pub parent: Option<String>,
    /// Read every file, even those unchanged since the parent
    #[arg(long)]
    pub full: bool,
    /// Say how many files were read and how many were unchanged since the parent
    #[arg(short, long)]
    pub verbose: bool,
    /// A message stored with the checkpoint
    #[arg(short, long, value_name = "MSG", default_value = "")]
    pub message: String,
    /// Worker threads for hashing and compression [default: all cores]
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// A ref, fork name (its head), checkpoint id or unique id prefix (4+ hex digits), or git:COMMIT; without it, every checkpoint, newest first
    pub target: Option<String>,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// A ref, fork name (its head), checkpoint id or unique id prefix (4+ hex digits), or git:COMMIT
    pub checkpoint: String,
    /// A path inside the checkpoint [default: its root]
    #[arg(default_value = "/", hide_default_value = true)]
    pub path: String,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CatArgs {
    /// A ref, fork name (its head), checkpoint id or unique id prefix (4+ hex digits), or git:COMMIT
    pub checkpoint: String,
    /// A regular file's path inside the checkpoint
    pub path: String,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The older checkpoint (ref, fork name, id or prefix, git:COMMIT)
    pub a: String,
    /// The newer checkpoint (ref, fork name, id or prefix, git:COMMIT)
    pub b: String,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A ref, fork name (its head), checkpoint id or unique id prefix (4+ hex digits), or git:COMMIT
    pub checkpoint: String,
    /// Where to recreate the tree: a new or empty directory
    pub dir: PathBuf,
}

/// Digests an archive is checked against (shared by `import` and `mount`).
#[derive(Debug, Args, Clone, Default)]
pub struct DigestArgs {
    /// Expected sha256 of the whole archive (all parts joined); nothing is
    /// published unless it matches
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// A digest manifest: `sha256sum` lines (per part and/or for the joined
    /// archive, by file name) or JSON {"sha256": HEX, "parts": {NAME: HEX}}
    /// [default without --sha256: ARCHIVE.sha256 beside the archive (what
    /// export writes; ARCHIVE without .partNN), when there is one]
    #[arg(long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  storefs import /backup/s1.tar.zst.part00 --ref s1 --sha256 HEX   # finds part01, … beside it
  storefs import /backup/s1.tar.zst.part* --manifest /backup/s1.tar.zst.sha256
  storefs import s1.tar.gz --origin /srv/_lead_sessions/s1

The format is found from the magic bytes (tar, zstd, gzip, xz, bzip2, lzip). When the archive holds one
top-level directory, the checkpoint is that directory. The origin: --origin, else the
archive's STOREFS.origin record (export writes it), else the directory's STORE.json `root`.
An archive imported before (same sha256) is not read again. Ctrl-C (or SIGTERM) before the
checkpoint is published removes the temp files it wrote and exits 130 (143): nothing is published.")]
pub struct ImportArgs {
    /// The archive: one file, all of its parts, or its first part (NAME.part00 / NAME.partaa)
    #[arg(required = true, value_name = "ARCHIVE")]
    pub archive: Vec<PathBuf>,
    #[command(flatten)]
    pub digests: DigestArgs,
    /// The origin to record: the absolute path `storefs mount` mounts the checkpoint at when
    /// given no mountpoint [default: the archive's STOREFS.origin, else its STORE.json root]
    #[arg(long, value_name = "PATH")]
    pub origin: Option<PathBuf>,
    /// Point this ref at the checkpoint
    #[arg(long, value_name = "NAME")]
    pub r#ref: Option<String>,
    /// A message stored with the checkpoint
    #[arg(short, long, value_name = "MSG")]
    pub message: Option<String>,
    /// Hashing and compression threads [default: all cores]
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  storefs import-git /srv/shared                 # every branch and tag of /srv/shared/.git
  storefs mount git:3f2a9c1                      # the commit an attempt's JSON names, at /srv/shared
  storefs import-git /srv/shared                 # later: imports only the new commits
  storefs import-git /srv/repo.git --origin /srv/shared --rev main

Each commit becomes a checkpoint: its tree with git's file modes (644/755), symlinks,
submodules (gitlinks) as empty directories (listed in the record) and owner 0:0, as
`git archive COMMIT` writes them; each entry's mtime is the committer time of the last
commit (along first parents) that changed it, so a commit always gives the same tree id
and `storefs diff` shows what changed. Parents map to the parents' checkpoints; the
author time and message are kept; the record's source names the repository and commit. Refs: PREFIX.BRANCH and
PREFIX.tags.TAG ('/' in a branch name becomes '.'), moved to the imported commits.
A commit with a path git refuses to check out (.git in any case, 8.3/NTFS or HFS+
spelling, as any component; '.', '..', empty; a .gitmodules symlink) fails the import
with one line naming it, and nothing is published.
`git:COMMIT` (a unique prefix of 4+ hex digits) names a commit's checkpoint in every
command. A shallow or corrupt repository is refused with nothing imported.")]
pub struct ImportGitArgs {
    /// The repository: its work tree, its .git directory, or a bare repository
    #[arg(value_name = "REPO")]
    pub repo: PathBuf,
    /// The absolute path the checkpoints mount at [default: the repository's work tree]
    #[arg(long, value_name = "PATH")]
    pub origin: Option<PathBuf>,
    /// Refs are NAME.BRANCH and NAME.tags.TAG [default: the work tree's directory name]
    #[arg(long, value_name = "NAME")]
    pub ref_prefix: Option<String>,
    /// Import only these revisions and their history (a branch or tag given by name
    /// moves its ref) [default: every branch and tag]
    #[arg(long = "rev", value_name = "REV")]
    pub revs: Vec<String>,
    /// Hashing and compression threads [default: all cores]
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  storefs export s1 -o /backup/s1.tar.zst --split 64M
      # s1.tar.zst.part00, part01, … and s1.tar.zst.sha256
  cat /backup/s1.tar.zst.part* | zstd -d | tar -x      # recreates the store directory

Compression follows the name: .zst → zstd, .gz/.tgz → gzip, anything else → plain tar.
The manifest has one `sha256sum` line per file written and, with --split, one more for the
joined archive (named FILE): `sha256sum -c --ignore-missing FILE.sha256` checks the parts.
Standard output: the manifest's lines, as written (file names relative to its directory).")]
pub struct ExportArgs {
    /// A ref, fork name (its head), checkpoint id or unique id prefix (4+ hex digits), or git:COMMIT
    pub checkpoint: String,
    /// The archive to write (never overwritten)
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Split into parts of this size (K, M, G suffixes): FILE.part00, FILE.part01, …
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub split: Option<usize>,
    /// zstd compression threads [default: all cores]
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Without MOUNTPOINT, the checkpoint's origin is used only where the origin policy allows it \
(an origin is data: an archive, a remote or a git import chose it): strictly beneath /srv, \
/tmp, /var/tmp, /mnt, /media, /opt or a home (/home/USER, /root, $HOME; not its dot-directories \
nor bin), never / or a system location, and only through directories owned by you or root, \
not writable by others, with no symlink on the way. Anything else is refused: give a \
MOUNTPOINT (your choice; not checked) or --allow-origin PREFIX. See docs/security.md.")]
pub struct MountArgs {
    /// A ref, checkpoint id or unique id prefix (read-only); git:COMMIT, an
    /// imported git commit (`import-git`; a unique prefix of 4+ hex digits),
    /// read-only; a fork name
    /// (read-write, copy-on-write, journaled); an archive file (or its first
    /// part), which is imported once and then mounted read-only; or
    /// REMOTE:REF, a remote's ref mounted read-only and lazily (objects
    /// fetched on first read, verified, kept in this store). With --browse
    /// or --remount: the mountpoint
    pub target: String,
    #[command(flatten)]
    pub digests: DigestArgs,
    /// Internal: the daemon's TARGET is a checkpoint id; this is what to show for it
    #[arg(long, hide = true, value_name = "NAME")]
    pub label: Option<String>,
    /// Internal: MOUNTPOINT is the checkpoint's origin, which passed the
    /// origin policy: the daemon creates it without following a symlink and
    /// checks its path rules again
    #[arg(long, hide = true, requires = "label")]
    pub from_origin: bool,
    /// Internal: a daemon of `storefs run`: its control socket (its log beside
    /// it); it writes no mount record
    #[arg(long, hide = true, value_name = "PATH", requires = "label")]
    pub run_socket: Option<PathBuf>,
    /// Internal: the daemon fetches objects it lacks from this remote (lazy mount)
    #[arg(long, hide = true, value_name = "REMOTE", requires = "label")]
    pub remote: Option<String>,
    /// Where to mount [default: the checkpoint's origin, where the origin
    /// policy allows it: docs/security.md]; created if missing, must be empty
    pub mountpoint: Option<PathBuf>,
    /// Also allow origins equal to or beneath PREFIX as default mountpoints
    /// (may repeat; the environment variable takes PREFIXes separated by ':')
    #[arg(
        long,
        value_name = "PREFIX",
        env = "STOREFS_ALLOW_ORIGIN",
        value_delimiter = ':'
    )]
    pub allow_origin: Vec<PathBuf>,
    /// Stay attached to the terminal instead of returning once mounted
    #[arg(short, long)]
    pub foreground: bool,
    /// FUSE mount options, comma-separated (e.g. allow_other); may repeat.
    /// Always added: nosuid, nodev, default_permissions, and ro (rw for a fork).
    /// relatime, strictatime, nodiratime (and noatime, atime): a fork's reads
    /// update atime only when one of them names a mode (none by default).
    /// open_checks: a fork's opens reach storefs, so chattr +i/+a refuse an
    /// open for writing as ext4 does (by default the write is refused; each
    /// open then costs a round trip)
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Bound on the memory a mount's caches hold (K, M, G suffixes):
    /// decompressed chunks (3/4) and directories (1/4; on a fork, the inode
    /// table's unchanged entries: what it changed since its last commit is
    /// not bounded); the daemon's RSS stays within it plus about 64M
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub cache_size: usize,
    /// For a fork: commit every SECS seconds while mounted (0: only on unmount)
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub commit_interval: u64,
    /// For a fork: the kernel's writeback cache. Writes wait in the kernel's
    /// page cache and reach the journal on close, fsync, commit or within 30 s;
    /// fewer round trips, but if the daemon is killed, writes to files still
    /// open and not fsynced are lost (fsynced ones never are)
    #[arg(long)]
    pub writeback_cache: bool,
    /// FUSE worker threads [default: number of cores, at least 2]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// How the kernel's requests reach the daemon: `uring` is FUSE over
    /// io_uring (kernel 6.14+ with /sys/module/fuse/parameters/enable_uring
    /// = Y; one queue per CPU, answered on the CPU that asked), `classic`
    /// is /dev/fuse, `auto` takes io_uring when the kernel offers it and the
    /// daemon runs as root (CAP_SYS_NICE) [default: $STOREFS_TRANSPORT, else auto]
    // $STOREFS_TRANSPORT is read in `cli::mount`, not by clap (see `Cli::store`).
    #[arg(long, value_name = "HOW")]
    pub transport: Option<TransportArg>,
    /// Mount the whole store read-only at the one path given: checkpoints/<id>/
    /// and <id>.json, refs/ and archives/ (symlinks), forks/<name>/head and history/
    #[arg(long, conflicts_with_all = ["sha256", "manifest", "label"])]
    pub browse: bool,
    /// Change the flags of the storefs mount at the one path given, as
    /// `mount -o remount,OPTS` does (mount.fuse.storefs runs this with the
    /// whole set mount(8) gives it): ro, rw (a fork's), noexec, the atime
    /// ones, nodiratime, sync, dirsync as -o names them, the others cleared
    /// (an atime one kept when none is named); nosuid,nodev stay. FUSE and
    /// storefs options are set only when mounting: ignored, each named on
    /// stderr. No second daemon starts
    #[arg(long, conflicts_with_all = ["sha256", "manifest", "label", "browse", "foreground"])]
    pub remount: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
CMD runs in a private mount namespace (for a user other than root, inside a user namespace
mapping only that user's uid and gid) where TARGET, and each --with TARGET, is mounted at its
origin by a daemon of its own. No other process sees these mounts, and nothing is created or
mounted on the host: missing parents of an origin are made inside the namespace on a tmpfs that
still shows the host's entries beside them. Many runs may use one origin at once, each with its
own fork.

CMD's cwd (looked up again inside, so a cwd under an origin is in the mount), environment and
standard streams pass through; SIGINT, SIGTERM and SIGHUP sent to `storefs run` reach CMD. When
CMD exits, whatever it left running is killed, each fork is committed (message -m, else the
command line; nothing is committed when nothing changed) unless --no-commit, and the daemons
stop. The exit status is CMD's (128+N when signal N killed it); 1 when a daemon died while CMD
ran (its fork's journal is replayed by the next run or mount of it).

A fork held by another run or a mount is refused, naming the holder. `storefs status` lists
runs, `storefs commit FORK` commits a fork inside a run.

Examples:
  storefs run lead --fork b1 -- claude --resume        # fork lead as b1, resume in it
  storefs run b1 --with room -m 'fix slice 3' -- make  # b1 read-write, room read-only")]
pub struct RunArgs {
    /// A fork (mounted read-write); or a ref, checkpoint id, git:COMMIT,
    /// archive or REMOTE:REF (read-only; with --fork, the fork's base)
    pub target: String,
    /// Make fork NAME of TARGET first and run in it, read-write
    #[arg(long, value_name = "NAME")]
    pub fork: Option<String>,
    /// Another target, mounted at its origin too (read-write when it is a
    /// fork, else read-only); may repeat
    #[arg(long = "with", value_name = "TARGET")]
    pub with: Vec<String>,
    /// The message of the forks' commits when CMD exits [default: the command line]
    #[arg(short, long, value_name = "MSG")]
    pub message: Option<String>,
    /// Keep the forks' journals instead of committing when CMD exits (the
    /// next run or mount replays them)
    #[arg(long)]
    pub no_commit: bool,
    /// Also allow origins equal to or beneath PREFIX (may repeat; see `storefs mount`)
    #[arg(
        long,
        value_name = "PREFIX",
        env = "STOREFS_ALLOW_ORIGIN",
        value_delimiter = ':'
    )]
    pub allow_origin: Vec<PathBuf>,
    /// Bound on the memory each daemon's caches hold (see `storefs mount`)
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub cache_size: usize,
    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct RunInitArgs {
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
A mount some process uses (its cwd or open files there, as far as /proc shows) is refused
first, with their pids; nothing is committed then. A fork that changed since its last commit
is committed before it is unmounted (`committed NAME as ID`).")]
pub struct UmountArgs {
    /// The mount point, or what a live mount was made from: a ref or fork
    /// name, a checkpoint, or an archive's path (as `storefs status` shows it)
    pub mountpoint: PathBuf,
    /// For a fork: keep the journal as it is instead of committing first
    /// (the next mount replays it)
    #[arg(long)]
    pub no_commit: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "CHECKPOINT may be REMOTE:REF (e.g. `team:s1`) where REMOTE is a configured \
remote: the remote ref's checkpoint, history and objects are pulled in full (no local ref is \
set; the fork holds the checkpoint), then the fork is made at it and fork.json records the \
upstream (remote and ref). `storefs push REMOTE NAME` later pushes the fork's head to the remote \
ref NAME (the fork's name, not REF) unless --as; `storefs pull REMOTE REF --fork NAME` moves the \
fork to a checkpoint pushed from elsewhere."
)]
pub struct ForkArgs {
    /// The checkpoint to fork (ref, fork, id, unique prefix, or REMOTE:REF)
    pub checkpoint: String,
    /// The fork's name: letters, digits, '.', '_' and '-'; not a ref's or fork's name
    #[arg(long, value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
#[command(after_help = "\
One line per fork: NAME<TAB>HEAD<TAB>FORK-POINT<TAB>UNCOMMITTED<TAB>MOUNTED. HEAD is the
checkpoint its last commit made (the fork point before any), UNCOMMITTED is yes when its
journal holds changes no commit has taken yet (of a mounted fork: what its daemon has
journaled), MOUNTED the mountpoint of its live mount or -.

`--delete NAME` deletes forks: each one's head, journal and lock. A fork that is mounted, in a \
run or committing is refused, and one with uncommitted changes unless --discard (they are lost). \
Its checkpoints stay (refs, other forks and merges may name them) until `storefs gc` finds \
nothing reaching them. Prints NAME<TAB>HEAD for each fork deleted.")]
pub struct ForksArgs {
    /// Print a JSON array of {name, head, fork_point, uncommitted, upstream: {remote, ref}
    /// or null, mounted: {mountpoint, pid} or null, run: {pid, command, origin} or null}
    #[arg(long, conflicts_with = "delete")]
    pub json: bool,
    /// Delete these forks instead of listing (repeatable)
    #[arg(long, value_name = "NAME", num_args = 1..)]
    pub delete: Vec<String>,
    /// With --delete: delete a fork even when its journal holds uncommitted changes (lost)
    #[arg(long, requires = "delete")]
    pub discard: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Merges B into A against their merge base (the common ancestor found through the checkpoints' \
parents; --base overrides) and publishes a new checkpoint whose parents are A and B. A fork name \
means its head; a fork with uncommitted changes is refused (commit it first).

Per path: changed on one side only, that side's version (bytes, type, mode, owner, xattrs, \
mtime); the same change on both, once. A regular file changed on both: if both only appended to \
the base's bytes (logs, JSONL, ledgers), the base, then A's appended bytes, then B's; else if all \
three are text, a line merge deciding clean and conflicting hunks as `git merge-file` does; else \
a conflict. Conflicts (same lines, edit against delete, file against directory, symlink targets, \
modes, owners, xattrs, binary files) are listed one per line, KIND<TAB>PATH<TAB>DETAIL, nothing \
is published and the exit status is 1, unless --conflicts resolves them (then they are listed on \
stderr with how).

With --ref NAME the result is published as ref NAME (a ref that already exists must point at a \
checkpoint the result includes). With --into FORK it becomes the head of FORK, which must not be \
mounted, must have no uncommitted changes, and whose head must be an ancestor of the result \
(usually A or B). When B is already in A nothing new is written (up to date); when A is the \
merge base, the result is B itself (fast-forward). Prints the result's checkpoint id.

Examples:
  storefs merge coder-1 coder-2 --into coder-1 -m 'both coders'
  storefs merge s1 s1-experiment --ref s1 --conflicts both")]
pub struct MergeArgs {
    /// The checkpoint to merge into (ref, fork name, id or prefix, git:COMMIT): \"ours\"
    pub a: String,
    /// The checkpoint to merge (ref, fork name, id or prefix, git:COMMIT): \"theirs\"
    pub b: String,
    /// Publish the result as this ref
    #[arg(
        long = "ref",
        value_name = "NAME",
        required_unless_present = "into",
        conflicts_with = "into"
    )]
    pub r#ref: Option<String>,
    /// Make the result the head of this fork (not mounted, nothing uncommitted)
    #[arg(long, value_name = "FORK")]
    pub into: Option<String>,
    /// Merge against this checkpoint instead of the merge base found from parents
    #[arg(long, value_name = "CKPT")]
    pub base: Option<String>,
    /// A message stored with the new checkpoint
    #[arg(short, long, value_name = "MSG", default_value = "")]
    pub message: String,
    /// Resolve every conflict: `ours` (A's side; in a text file, of each
    /// conflicting hunk), `theirs` (B's), or `both` (git-style conflict
    /// markers in text files; otherwise A's version at the path and B's
    /// beside it as PATH.merge-B)
    #[arg(long, value_name = "HOW")]
    pub conflicts: Option<ConflictsArg>,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

/// `--conflicts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConflictsArg {
    Ours,
    Theirs,
    Both,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Puts each PATH into FORK exactly as it is in TARGET, as ordinary changes in the fork's journal \
(uncommitted: `storefs commit FORK` makes them a checkpoint; a mounted fork commits them at \
unmount too). Whatever the fork has at PATH is removed first, a directory with all it holds; \
then TARGET's entry is put in its place, a directory whole; a PATH that TARGET does not have is \
removed. Directories above a PATH that the fork lacks are made as TARGET has them.

TARGET is a checkpoint: a ref, a fork name (its head: a fork other than FORK must have no \
uncommitted changes), an id or prefix, or git:COMMIT. FORK itself as TARGET undoes what its \
journal holds at PATH since its last commit. A PATH is relative to the checkpoint's root \
(`state/ledger.json`), or absolute under FORK's origin or the directory it is mounted at; \
`..` is refused.

Exact: type, mode (setuid, setgid, sticky), owner, group, mtime, size and holes (data is \
shared with TARGET's stored chunks, not copied), xattrs and ACLs, symlink targets, device \
numbers, hardlinks among the checked-out entries. Not exact: ctime (now), inode numbers (new, \
even for unchanged files), hardlinks to entries outside the checked-out paths (each becomes a \
file of its own), and the mtime of the directories holding each PATH (now: their entries \
changed). Not atomic: a crash part way keeps the paths done so far.

A mounted fork (or one held by `storefs run`) is changed through its daemon, which makes the \
kernel forget what it cached of those paths. Prints one line per PATH: restored, removed or \
absent (in neither), then the path.

Examples:
  storefs checkout s1 state/ledger.json --into coder-1
  storefs checkout coder-1 notes --into coder-1      # undo uncommitted changes under notes/
  storefs checkout git:4f2a91c src/ --into fix-build")]
pub struct CheckoutArgs {
    /// The checkpoint to take the paths from (ref, fork name, id or prefix, git:COMMIT)
    pub target: String,
    /// Paths to put into the fork: relative to the root, or absolute under its origin or mountpoint
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<std::ffi::OsString>,
    /// The fork to change (mounted, held by a run, or neither)
    #[arg(long, value_name = "FORK", required = true)]
    pub into: String,
    /// Print JSON instead: {"target", "fork", "paths": [{"path", "done"}], "created", "removed"}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
One line per operation, oldest first: time (UTC), operation, path (a rename's new path after \
'->'), pid, command (/proc/PID/comm), uid, the run (inside `storefs run`) and bytes. Paths are \
relative to the fork's root, as they were when the change was made. A process's consecutive \
writes to one file are one line (their count, bytes and range). Operations: create, mkdir, \
mknod, symlink, tmpfile (O_TMPFILE: a file with no name until a link), link, write, \
copy_file_range, truncate (also fallocate past the end), punch_hole, rename (a whiteout rename \
too), exchange, unlink, rmdir, chmod, chown, utimes, setxattr, removexattr, chattr.

For a checkpoint: what its commit folded (checkpoints that are not commits, and commits made \
before storefs recorded operations, have no operation log). For a fork: each commit since the \
fork point, then what is not committed yet (asked of its daemon when it is mounted).

Writes the kernel sends without a requester (writeback under --writeback-cache) are \
attributed to the last process that created, truncated or wrote the file through the mount.

Examples:
  storefs ops coder-2                          # every change of the fork, commits and uncommitted
  storefs ops coder-2 --command python3 --path ledger/
  storefs ops s1-after --json | jq -r .path | sort -u")]
pub struct OpsArgs {
    /// A fork (its commits since the fork point, then what is not committed), or a
    /// checkpoint (ref, id or prefix): what its commit folded
    pub target: String,
    /// Only operations of this process id
    #[arg(long, value_name = "N")]
    pub pid: Option<u32>,
    /// Only operations of processes with this command name (as /proc/PID/comm: 15 bytes at most)
    #[arg(long, value_name = "NAME")]
    pub command: Option<String>,
    /// Only operations on this path or below it (either path of a rename)
    #[arg(long, value_name = "PREFIX")]
    pub path: Option<String>,
    /// One JSON object per line instead (docs/format.md, "Operation logs"), with
    /// "checkpoint": the commit it belongs to (null: not committed yet)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("who").required(true).args(["pid", "command", "run"])))]
#[command(after_help = "\
From the operation logs of the fork's commits since CKPT and what is not committed yet \
(`storefs ops`), takes each path the selected processes changed (both paths of a rename), in \
the order they first changed it. A path a later operation of another process touched (the \
path, a path below it, or a rename or removal of a directory above it) is a conflict: left as \
it is and listed with that operation. Every other path is put back as CKPT has it, as \
`storefs checkout CKPT PATH… --into FORK` does (metadata-exact, directories whole, missing \
parents made; removed when CKPT lacks it), through the fork's daemon when it is mounted or in a \
run (the mount shows it at once). One line a path: 'restored', 'removed' or 'absent' (gone \
already, as at CKPT), 'conflict PATH OPERATION', or 'skip PATH WHY' (the root's own attributes, \
a name that is not UTF-8). The changes are not committed: `storefs commit FORK`. Exit 1 when \
any path was left (conflict or skip). With --dry-run: 'restore' or 'remove' per path, the \
same conflicts, nothing changed.

Examples:
  storefs revert coder-2 --command python3 --dry-run
  storefs revert coder-2 --command python3 && storefs commit coder-2")]
pub struct RevertArgs {
    /// The fork (mounted or not)
    pub fork: String,
    /// Undo what this process id changed
    #[arg(long, value_name = "N")]
    pub pid: Option<u32>,
    /// Undo what processes with this command name (/proc/PID/comm) changed
    #[arg(long, value_name = "NAME")]
    pub command: Option<String>,
    /// Undo what the processes of this `storefs run` changed (its id: the pid `storefs status` shows)
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Undo what they changed since this checkpoint of the fork's history [default: the fork point]
    #[arg(long, value_name = "CKPT")]
    pub since: Option<String>,
    /// List what would be done and change nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct CommitArgs {
    /// The fork to commit (mounted or not)
    pub fork: String,
    /// A message stored with the new checkpoint
    #[arg(short, long, value_name = "MSG", default_value = "")]
    pub message: String,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print a JSON array of {mountpoint, target, checkpoint, pid, mode, log, started_ns,
    /// rss_bytes, peak_rss_bytes, cache: {limit, bytes, chunks, dirs[, state]} or null};
    /// a fork's `state` is its inode table, which --cache-size does not bound
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Every object a checkpoint uses (trees and file chunks) is read, decompressed and checked
against its sha256. One line per problem on stdout: the checkpoint, the path inside it, the
object and what is wrong. Nothing is deleted: a corrupt object is moved to STORE/quarantine/
(no longer served: reads of it fail with EIO as before, and `storefs gc` never touches the
quarantine). Without CKPT, every checkpoint, and refs and fork heads naming a missing
checkpoint. Exit 1 when anything is wrong. Temp files of interrupted writes (their writer is
gone) are noted on stderr (`temps` in --json), not counted as problems: `storefs gc` removes them.")]
pub struct VerifyArgs {
    /// Checkpoints to verify (refs, forks, ids, prefixes) [default: all]
    #[arg(value_name = "CKPT")]
    pub checkpoints: Vec<String>,
    /// Reader threads [default: all cores]
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Kept: every checkpoint record and every object reachable from one (refs, forks, archive
index entries and live mounts all name checkpoints). Removed: objects nothing reaches (an
interrupted or failed snapshot or import, data of files a fork had open after unlinking
them), temp files of interrupted writes, and the stat caches of checkpoints no ref is at
(a snapshot compares with its ref's head), once older than --grace; a temp file whose
writer is gone (its pid no longer runs, or runs something other than storefs) whatever its age. Safe while snapshots,
imports and commits run: they hold STORE/gc.lock shared until they publish, and gc sweeps
under it exclusively. Prints `ID SIZE` per object removed (or that --dry-run would remove),
`PATH SIZE` per file.
An unreachable object is dropped from its pack by rewriting the pack without it, when more
than 10% of the pack is unreachable or it keeps at most 4 MiB; otherwise it stays (counted
on stderr, by --dry-run too, and not listed) until more of its pack is unreachable, so one
deleted chunk never costs a copy of a 64 MiB pack.
Also merges small pack files (one per snapshot or commit) once there are 8 or more.

With --remote NAME it collects the remote's garbage instead, once older than --grace: what
no remote ref reaches (after `storefs remote delete-ref`, or a forced push) is deleted: packs
nothing in them reaches, loose objects, records, and packs a killed push left without an
index; packs more than 10% unreached are repacked (the new packs published first). It holds
the remote's gc lock: it does not start while a push runs (from any machine), and a push
started meanwhile refuses, to be run again after; pulls and lazy mounts run on.")]
pub struct GcArgs {
    /// List what would be removed; delete nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Never remove an object modified less than this long ago (90s, 30m, 1h, 2d, 1h30m)
    #[arg(long, value_name = "AGE", default_value = "1h", value_parser = crate::store::parse_duration)]
    pub grace: std::time::Duration,
    /// Collect garbage on this remote instead of in the local store
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long)]
    pub json: bool,
}

/// Parse `256M`, `1G`, `4096`, `64K` into bytes.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in '{s}': use K, M or G")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size: use a number with an optional K, M or G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

#[derive(Debug, Args)]
#[command(after_help = "\
One line per ref: NAME<TAB>CHECKPOINT. A ref file that does not hold a checkpoint id (damaged, or \
written by hand) is named on stderr and the listing goes on; the exit status is then 1. \
`--delete NAME` removes refs (a damaged one too) and prints NAME<TAB>WHAT-IT-HELD for each; the \
checkpoints stay until `storefs gc` finds nothing else reaching them.")]
pub struct RefsArgs {
    /// Print JSON instead (schema: docs/format.md, "Command output as JSON")
    #[arg(long, conflicts_with = "delete")]
    pub json: bool,
    /// Delete these refs instead of listing (repeatable)
    #[arg(long, value_name = "NAME", num_args = 1..)]
    pub delete: Vec<String>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Man pages: storefs(1) (the overview, the store's layout, the environment, mount(8) and fstab \
options) and one page per verb, storefs-VERB(1) (storefs-remote-add(1) for the remote verbs), \
all from the same definitions as --help. Markdown: one file, every verb's description, usage, \
arguments and options (the repository's docs/cli.md: `cargo run -- generate --markdown \
docs/cli.md`). Completions: DIR/storefs.bash, DIR/_storefs (zsh) and \
DIR/storefs.fish. Debian puts them in /usr/share/man/man1, \
/usr/share/bash-completion/completions/storefs, /usr/share/zsh/vendor-completions and \
/usr/share/fish/vendor_completions.d (scripts/package.sh does).")]
#[group(id = "what", required = true, multiple = true)]
pub struct GenerateArgs {
    /// Write the man pages (roff) into DIR (created if missing)
    #[arg(long, value_name = "DIR")]
    pub man: Option<PathBuf>,
    /// Write bash, zsh and fish completions into DIR (created if missing)
    #[arg(long, value_name = "DIR")]
    pub completions: Option<PathBuf>,
    /// Write the command reference as Markdown into FILE (docs/cli.md; a test fails when it is stale)
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_version_names_the_store_format() {
        let want = format!("(store format {})", crate::store::FORMAT_VERSION);
        assert!(VERSION.ends_with(&want), "{VERSION}");
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
    }
}

/// `--transport` (see [`crate::fs::Transport`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportArg {
    #[default]
    Auto,
    Classic,
    Uring,
}

impl From<TransportArg> for crate::fs::Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Auto => crate::fs::Transport::Auto,
            TransportArg::Classic => crate::fs::Transport::Classic,
            TransportArg::Uring => crate::fs::Transport::Uring,
        }
    }
}
