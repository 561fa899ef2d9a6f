//! Operation locks on a remote, so `gc --remote` never deletes what a push
//! running on another machine relies on (restic's prune does the same).
//!
//! A push and a gc each write `locks/op-<16 hex>.json` first, then list
//! `locks/`. A push gives up if it sees a gc lock; a gc gives up if it sees
//! any other lock. With a store whose listings show every completed write
//! (S3 is strongly consistent; a directory is), two that start together see
//! each other and at least one gives up, so a gc never runs while a push is
//! between reading what the remote has and writing its ref. A lock is
//! rewritten every [`REFRESH`] while its operation runs and is stale, and
//! ignored, when the listing shows it unmodified for [`STALE`] (a process
//! that died). Pulls and lazy mounts take no lock: gc only ever deletes
//! what no ref reaches, and a reader that finds a repacked pack gone reads
//! the index again.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{Error, Remote, Result};

/// How often a held lock is rewritten.
pub const REFRESH: Duration = Duration::from_secs(5 * 60);
/// A lock not rewritten for this long belongs to a process that died.
pub const STALE: Duration = Duration::from_secs(30 * 60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Push,
    Gc,
}

impl LockKind {
    fn as_str(self) -> &'static str {
        match self {
            LockKind::Push => "push",
            LockKind::Gc => "gc",
        }
    }
}

/// A held lock; [`OpLock::release`] deletes it (a lock dropped without
/// release goes stale after [`STALE`]).
pub struct OpLock {
    key: String,
    refresher: tokio::task::JoinHandle<()>,
}

fn body(kind: LockKind) -> Vec<u8> {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    serde_json::json!({
        "kind": kind.as_str(),
        "host": host,
        "pid": std::process::id(),
        "time": now_secs(),
    })
    .to_string()
    .into_bytes()
}

impl Remote {
    /// Take an operation lock of `kind`: write it, then refuse (removing it
    /// again) if a lock it conflicts with is there and not stale.
    pub(crate) async fn lock_op(&self, kind: LockKind) -> Result<OpLock> {
        let mut rnd = [0u8; 8];
        crate::sys::random_bytes(&mut rnd).map_err(|source| Error::Io {
            path: "(random)".into(),
            source,
        })?;
        let key = format!("locks/op-{}.json", crate::store::to_hex(&rnd));
        let path = ObjPath::from(key.as_str());
        self.objects
            .put(&path, PutPayload::from(body(kind)))
            .await
            .map_err(|e| self.backend_err(format!("writing {key}"), e))?;
        match self.conflicting_lock(kind, &key).await {
            Ok(None) => {}
            Ok(Some(other)) => {
                let _ = self.objects.delete(&path).await;
                return Err(Error::Locked {
                    remote: self.name.clone(),
                    what: other,
                    ours: kind.as_str(),
                });
            }
            Err(e) => {
                let _ = self.objects.delete(&path).await;
                return Err(e);
            }
        }
        let objects: Arc<dyn ObjectStore> = self.objects.clone();
        let refresh_path = path.clone();
        let refresher = self.rt.spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                if let Err(e) = objects
                    .put(&refresh_path, PutPayload::from(body(kind)))
                    .await
                {
                    tracing::warn!(lock = %refresh_path, error = %e, "cannot refresh the remote lock");
                }
            }
        });
        Ok(OpLock { key, refresher })
    }

    /// A live lock other than `ours` that `kind` must not run beside:
    /// described for the message, or `None`.
    async fn conflicting_lock(&self, kind: LockKind, ours: &str) -> Result<Option<String>> {
        let metas = self.list_metas("locks").await?;
        let now = now_secs();
        for m in metas {
            let key = m.location.to_string();
            let Some(name) = m.location.filename() else {
                continue;
            };
            if key == ours || !name.starts_with("op-") || !name.ends_with(".json") {
                continue;
            }
            if now - m.last_modified.timestamp() > STALE.as_secs() as i64 {
                continue;
            }
            let text = match self.objects.get(&m.location).await {
                Ok(g) => match super::read_capped(g, crate::store::MAX_SMALL_RECORD).await {
                    Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                    Err(_) => continue,
                },
                // Released meanwhile.
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(self.backend_err(format!("reading {key}"), e)),
            };
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let other = v["kind"].as_str().unwrap_or("unknown");
            if kind == LockKind::Gc || other == "gc" {
                return Ok(Some(format!(
                    "a {other} by {} (pid {}) holds {key}",
                    v["host"].as_str().unwrap_or("?"),
                    v["pid"].as_u64().unwrap_or(0)
                )));
            }
        }
        Ok(None)
    }

    /// Delete the lock (a failure only leaves it to go stale).
    pub(crate) async fn unlock_op(&self, lock: OpLock) {
        lock.refresher.abort();
        if let Err(e) = self.objects.delete(&ObjPath::from(lock.key.as_str())).await {
            tracing::warn!(lock = %lock.key, error = %e, "cannot remove the remote lock; it goes stale in 30 minutes");
        }
    }
}

/// Now, in seconds since the epoch.
pub fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
