//! Remote configuration: `STORE/remotes/<name>.json` = `{"url": "..."}`,
//! written atomically.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;

use super::{Error, Location, Result};
use crate::store::{self, Store};

fn dir(store: &Store) -> PathBuf {
    store.root().join("remotes")
}

fn path(store: &Store, name: &str) -> PathBuf {
    dir(store).join(format!("{name}.json"))
}

/// Add remote `name` at `url` (checked, not contacted).
pub fn add(store: &Store, name: &str, url: &str) -> Result<()> {
    Store::check_name(name)?;
    if name == "git" {
        return Err(store::Error::Invalid(
            "remote name 'git' is reserved (`git:COMMIT` names an imported git commit); pick another name".into(),
        )
        .into());
    }
    Location::parse(url)?;
    if let Ok(old) = url_of(store, name) {
        return Err(Error::RemoteExists(name.to_string(), old));
    }
    let d = dir(store);
    fs::create_dir_all(&d).map_err(|source| Error::Io {
        path: d.clone(),
        source,
    })?;
    let p = path(store, name);
    let body = serde_json::json!({ "url": url });
    store::write_store_file(&p, format!("{body}\n").as_bytes(), 0o644, true)
        .map_err(|source| Error::Io { path: p, source })
}

/// Every remote: `(name, url)`, sorted by name.
pub fn list(store: &Store) -> Result<Vec<(String, String)>> {
    let d = dir(store);
    let names = match store::list_store_dir_if_exists(&d) {
        Ok(names) => names,
        Err(source) => return Err(Error::Io { path: d, source }),
    };
    let mut out = Vec::new();
    for (name, _) in names {
        let Some(name) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .filter(|n| Store::check_name(n).is_ok() && !n.starts_with('.'))
            .map(str::to_string)
        else {
            continue;
        };
        let url = url_of(store, &name)?;
        out.push((name, url));
    }
    out.sort();
    Ok(out)
}

/// Remove remote `name` (its config only; nothing on the remote is touched).
pub fn remove(store: &Store, name: &str) -> Result<()> {
    Store::check_name(name).map_err(|_| Error::UnknownRemote(name.to_string()))?;
    let p = path(store, name);
    match crate::sys::remove_nofollow(&p) {
        Ok(()) => {
            // The cached pack indexes belong to that URL; a later remote of
            // the same name must not start from them.
            let _ = fs::remove_dir_all(super::pack::cache_dir(store.root(), name));
            store::fsync_dir(&dir(store)).map_err(|source| Error::Io {
                path: dir(store),
                source,
            })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::UnknownRemote(name.to_string())),
        Err(source) => Err(Error::Io { path: p, source }),
    }
}

/// The URL of remote `name`.
pub fn url_of(store: &Store, name: &str) -> Result<String> {
    Store::check_name(name).map_err(|_| Error::UnknownRemote(name.to_string()))?;
    let p = path(store, name);
    let bytes = match store::read_store_file(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(Error::UnknownRemote(name.to_string()));
        }
        Err(source) => return Err(Error::Io { path: p, source }),
    };
    let bad = |detail: String| Error::BadConfig {
        path: p.clone(),
        detail,
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    v.get("url")
        .and_then(|u| u.as_str())
        .map(str::to_string)
        .ok_or_else(|| bad("no \"url\" string".into()))
}
