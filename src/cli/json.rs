//! `--json` output: one JSON document on stdout per command (an array or an
//! object, as docs/format.md "Command output as JSON" gives each). Names and
//! paths are stored as bytes: valid UTF-8 is a JSON string; anything else is
//! the string with U+FFFD for the bad bytes plus the exact bytes beside it
//! (`"name_bytes": [..]`), so a script loses nothing.

use std::io::Write;

use anyhow::Result;
use serde_json::{Map, Value};

/// Put `bytes` under `key`, and under `{key}_bytes` when not UTF-8.
pub fn put_bytes(obj: &mut Map<String, Value>, key: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => {
            obj.insert(key.into(), s.into());
        }
        Err(_) => {
            obj.insert(
                key.into(),
                String::from_utf8_lossy(bytes).into_owned().into(),
            );
            obj.insert(format!("{key}_bytes"), bytes.to_vec().into());
        }
    }
}

/// Print `value` on stdout, pretty, with a final newline.
pub fn print(value: &Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}
