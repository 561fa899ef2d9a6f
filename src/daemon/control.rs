//! A fork daemon's control socket, through which it takes commit requests
//! while it serves, and its periodic commit.
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

use serde::{Deserialize, Serialize};

use super::{Error, Result};
use crate::journal::Fork;

/// What a client asks a fork's daemon.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Commit the fork now, with this message.
    Commit { message: String },
    /// Do not commit on unmount (keep the journal for the next mount).
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
pub fn request(sock: &Path, req: &Request) -> Result<String> {
    let mut stream = UnixStream::connect(sock).map_err(|source| Error::Unreachable {
        socket: sock.to_path_buf(),
        source,
    })?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    let reply: Reply = serde_json::from_str(&answer).map_err(|source| Error::NoReply {
        socket: sock.to_path_buf(),
        source,
    })?;
    if !reply.ok {
        return Err(Error::Refused(
            reply.error.unwrap_or_else(|| "failed".into()),
        ));
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
    let listener = UnixListener::bind(&sock).map_err(|source| Error::Listen {
        socket: sock.clone(),
        source,
    })?;
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
