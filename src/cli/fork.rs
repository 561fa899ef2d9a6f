//! `fork`, `commit`, and the control socket through which a fork's mount daemon
//! takes commit requests while it serves.
//!
//! Protocol: the client connects to `STORE/mounts/<key>.sock`, writes one JSON
//! line `{"op":"commit","message":"…"}` or `{"op":"no-commit"}`, and reads one
//! JSON line back: `{"ok":true,"checkpoint":"<id>"}` or `{"ok":false,"error":"…"}`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::args::{CommitArgs, ForkArgs};
use crate::journal::{self, Fork, Upstream};
use crate::remote::{self, PullOptions, Remote};
use crate::store::Store;

pub fn fork(store: &Store, a: ForkArgs) -> Result<()> {
    // `REMOTE:REF` (no ref, fork or id contains ':'), as for `mount`.
    let remote_ref = a
        .checkpoint
        .split_once(':')
        .filter(|(r, _)| remote::url_of(store, r).is_ok());
    let (base, upstream) = match remote_ref {
        None => (store.resolve(&a.checkpoint)?, None),
        Some((remote_name, name)) => {
            // Refuse a taken name before moving any bytes.
            if store.get_ref(&a.name)?.is_some() || journal::fork_dir(store, &a.name).exists() {
                return Err(journal::Error::NameTaken(a.name.clone()).into());
            }
            let r = Remote::open(store, remote_name)?;
            let progress = super::remote::progress_bar("fetching");
            let opts = PullOptions {
                force: false,
                progress: progress.clone(),
            };
            let result = r.pull(store, name, None, &opts);
            progress.finish_and_clear();
            let rep = result?;
            eprintln!(
                "storefs: pulled {remote_name}/{name}: {} objects fetched ({} bytes), {} records fetched",
                rep.objects_fetched, rep.bytes_fetched, rep.records_fetched
            );
            (
                rep.checkpoint,
                Some(Upstream {
                    remote: remote_name.to_string(),
                    r#ref: name.to_string(),
                }),
            )
        }
    };
    let from = upstream
        .as_ref()
        .map(|u| format!(" (from {}/{})", u.remote, u.r#ref))
        .unwrap_or_default();
    Fork::create_from(store, &a.name, &base, upstream)?;
    eprintln!(
        "storefs: fork '{}' at {}{from}; mount it read-write with `storefs mount {}`",
        a.name,
        &base.to_hex()[..12],
        a.name
    );
    Ok(())
}

pub fn commit(store_dir: &Path, a: CommitArgs) -> Result<()> {
    let store = Store::open(store_dir)?;
    if journal::read_fork_info(&store, &a.fork)?.is_none() {
        bail!(
            "no fork named '{}'; make one with `storefs fork CHECKPOINT --name {}`",
            a.fork,
            a.fork
        );
    }
    let mounted = store
        .live_mounts()?
        .into_iter()
        .find(|m| m.mode == "rw" && m.target == a.fork);
    let id = match mounted {
        Some(m) => {
            let sock = store.mount_file(Path::new(&m.mountpoint), "sock");
            request(&sock, &Request::Commit { message: a.message }).with_context(|| {
                format!("commit of fork '{}' mounted at {}", a.fork, m.mountpoint)
            })?
        }
        None => {
            let fork = Fork::open(Arc::new(store), &a.fork)?;
            fork.commit(&a.message)?.to_hex()
        }
    };
    super::say(id)?;
    Ok(())
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub(super) enum Request {
    Commit { message: String },
    NoCommit,
}

#[derive(Debug, Serialize, Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checkpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Send one request to a daemon's control socket; returns the checkpoint id
/// it answered with (empty for requests that return none).
pub(super) fn request(sock: &Path, req: &Request) -> Result<String> {
    let mut stream = UnixStream::connect(sock)
        .with_context(|| format!("cannot reach the mount daemon at {}", sock.display()))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    let reply: Reply = serde_json::from_str(&answer)
        .with_context(|| format!("the mount daemon gave no answer on {}", sock.display()))?;
    if !reply.ok {
        bail!("{}", reply.error.unwrap_or_else(|| "failed".into()));
    }
    Ok(reply.checkpoint.unwrap_or_default())
}

/// What the daemon's control thread shares with the serving thread.
pub(super) struct Control {
    pub fork: Arc<Fork>,
    /// Set by a `no-commit` request: the daemon does not commit on unmount.
    pub skip_final_commit: AtomicBool,
}

/// Listen on `sock` (replacing a stale socket file) and answer requests on a
/// background thread for the life of the process.
pub(super) fn serve_control(sock: PathBuf, control: Arc<Control>) -> Result<()> {
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock)
        .with_context(|| format!("cannot listen on {}", sock.display()))?;
    std::thread::Builder::new()
        .name("storefs-control".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(e) = answer(stream, &control) {
                    tracing::warn!(error = %e, "control request failed");
                }
            }
        })?;
    Ok(())
}

fn answer(stream: UnixStream, control: &Control) -> Result<()> {
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Commit { message }) => match control.fork.commit(&message) {
            Ok(id) => {
                tracing::info!(checkpoint = %id, "committed on request");
                Reply {
                    ok: true,
                    checkpoint: Some(id.to_hex()),
                    error: None,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "commit failed");
                Reply {
                    ok: false,
                    checkpoint: None,
                    error: Some(e.to_string()),
                }
            }
        },
        Ok(Request::NoCommit) => {
            control.skip_final_commit.store(true, Ordering::SeqCst);
            Reply {
                ok: true,
                checkpoint: None,
                error: None,
            }
        }
        Err(e) => Reply {
            ok: false,
            checkpoint: None,
            error: Some(format!("bad request: {e}")),
        },
    };
    let mut out = serde_json::to_string(&reply)?;
    out.push('\n');
    (&stream).write_all(out.as_bytes())?;
    Ok(())
}

/// Commit every `every` while the process lives (for `--commit-interval`).
pub(super) fn commit_periodically(control: Arc<Control>, every: Duration) -> Result<()> {
    std::thread::Builder::new()
        .name("storefs-commit".into())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                match control.fork.commit("periodic commit") {
                    Ok(id) => tracing::info!(checkpoint = %id, "periodic commit"),
                    Err(e) => tracing::warn!(error = %e, "periodic commit failed"),
                }
            }
        })?;
    Ok(())
}
