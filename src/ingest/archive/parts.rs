//! Which files make up an archive, in which order, and what they should hash to.
//!
//! Parts are named `BASE.partSUFFIX` where SUFFIX is all digits (`split -d`:
//! `00`, `01`, …) or all lower-case letters (`split`: `aa`, `ab`, …). Order is
//! by suffix, whatever order the command line gave. GNU `split`'s automatic
//! widening (`89` → `9000`, `yz` → `zaaa`) is understood. A gap in the numbering
//! is an error naming the missing part.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::super::{Error, IoAt, Result};
use crate::store::{is_hex, to_hex};

/// One file of an archive.
#[derive(Clone, Debug)]
pub struct Part {
    pub path: PathBuf,
    pub size: u64,
}

/// The files of one archive, in order.
#[derive(Clone, Debug)]
pub struct Parts {
    pub parts: Vec<Part>,
    /// The archive's name: the file name without `.partNN` (the file name itself
    /// when not split). A manifest line for this name is the whole archive's digest.
    pub name: String,
}

impl Parts {
    pub fn total_size(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum()
    }

    /// The part paths as strings (for records and messages).
    pub fn files(&self) -> Vec<String> {
        self.parts
            .iter()
            .map(|p| p.path.to_string_lossy().into_owned())
            .collect()
    }

    /// `a.tar.zst.part00…part03`, or the single file's name.
    pub fn describe(&self) -> String {
        match self.parts.as_slice() {
            [one] => file_name(&one.path),
            [first, .., last] => format!(
                "{} ({} parts, {}…{})",
                self.name,
                self.parts.len(),
                file_name(&first.path),
                file_name(&last.path)
            ),
            [] => self.name.clone(),
        }
    }
}

pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// `BASE.partSUFFIX` → (BASE, SUFFIX) when SUFFIX is all digits or all lower-case letters.
pub fn split_part_name(name: &str) -> Option<(&str, &str)> {
    let i = name.rfind(".part")?;
    let (base, suffix) = (&name[..i], &name[i + 5..]);
    let digits = suffix.bytes().all(|b| b.is_ascii_digit());
    let letters = suffix.bytes().all(|b| b.is_ascii_lowercase());
    (!base.is_empty() && !suffix.is_empty() && (digits || letters)).then_some((base, suffix))
}

fn alphabet(suffix: &str) -> (u8, u8) {
    if suffix.bytes().all(|b| b.is_ascii_digit()) {
        (b'0', b'9')
    } else {
        (b'a', b'z')
    }
}

/// Is this the first suffix (`00`, `aa`, …)?
fn is_first(suffix: &str) -> bool {
    let (first, _) = alphabet(suffix);
    suffix.bytes().all(|b| b == first)
}

/// The suffix after `s` at the same width, if any.
fn increment(s: &str) -> Option<String> {
    let (first, last) = alphabet(s);
    let mut v = s.as_bytes().to_vec();
    for i in (0..v.len()).rev() {
        if v[i] == last {
            v[i] = first;
        } else {
            v[i] += 1;
            return String::from_utf8(v).ok();
        }
    }
    None
}

/// Suffixes that may follow `s`: the next one at the same width and, where GNU
/// split would widen instead (`89` → `9000`), the widened one first.
pub fn successors(s: &str) -> Vec<String> {
    let (first, last) = alphabet(s);
    let lead = |x: &str| x.bytes().take_while(|&b| b == last).count();
    let mut out = Vec::new();
    if let Some(next) = increment(s) {
        let k = lead(&next);
        if k > lead(s) {
            let mut w = vec![last; k];
            w.resize(s.len() + 2, first);
            out.push(String::from_utf8(w).expect("ascii"));
        }
        out.push(next);
    }
    out
}

/// The suffix the next part would have (for "missing part" messages).
fn expected_next(s: &str) -> String {
    increment(s).unwrap_or_else(|| format!("{s}?"))
}

fn part(path: &Path) -> Result<Part> {
    let meta = fs::metadata(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Archive(format!(
                "{} does not exist; give the archive's file or its first part",
                path.display()
            ))
        } else {
            Error::io(path, e)
        }
    })?;
    if !meta.is_file() {
        return Err(Error::Archive(format!(
            "{} is not a regular file; give the archive's file or its first part",
            path.display()
        )));
    }
    Ok(Part {
        path: path.to_path_buf(),
        size: meta.len(),
    })
}

/// Find an archive's parts: all of them given, or only the first (its
/// siblings are found beside it). A single file without a part suffix, or
/// several such files, are used as given.
pub fn discover(paths: &[PathBuf]) -> Result<Parts> {
    let Some(first) = paths.first() else {
        return Err(Error::Archive("no archive given".into()));
    };
    let named: Vec<Option<(String, String)>> = paths
        .iter()
        .map(|p| split_part_name(&file_name(p)).map(|(b, s)| (b.to_string(), s.to_string())))
        .collect();
    if named.iter().all(Option::is_none) {
        // Not split: one file, or files to be joined in the order given.
        return Ok(Parts {
            parts: paths.iter().map(|p| part(p)).collect::<Result<_>>()?,
            name: file_name(first),
        });
    }
    let dir = first.parent().unwrap_or(Path::new("")).to_path_buf();
    let (base, _) = named[0].clone().ok_or_else(|| mixed(paths))?;
    let mut given: Vec<(String, PathBuf)> = Vec::new();
    for (p, n) in paths.iter().zip(&named) {
        match n {
            Some((b, s)) if *b == base && p.parent().unwrap_or(Path::new("")) == dir => {
                given.push((s.clone(), p.clone()))
            }
            _ => return Err(mixed(paths)),
        }
    }
    given.sort();
    given.dedup();
    let at = |s: &str| dir.join(format!("{base}.part{s}"));
    let first_suffix = &given[0].0;
    if !is_first(first_suffix) {
        let (f, _) = alphabet(first_suffix);
        let want = String::from_utf8(vec![f; first_suffix.len()]).expect("ascii");
        return Err(Error::PartMissing(at(&want)));
    }
    let mut chain = vec![given[0].clone()];
    if given.len() == 1 {
        // Only the first part given: follow the numbering beside it.
        loop {
            let last = &chain[chain.len() - 1].0;
            match successors(last).into_iter().find(|s| at(s).is_file()) {
                Some(s) => {
                    let p = at(&s);
                    chain.push((s, p));
                }
                None => break,
            }
        }
        // A later part beside the chain means one in between is missing.
        let found: Vec<&str> = chain.iter().map(|(s, _)| s.as_str()).collect();
        let kind_digits = first_suffix.bytes().all(|b| b.is_ascii_digit());
        if let Ok(rd) = fs::read_dir(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &dir
        }) {
            for ent in rd.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                if let Some((b, s)) = split_part_name(&name)
                    && b == base
                    && s.bytes().all(|c| c.is_ascii_digit()) == kind_digits
                    && !found.contains(&s)
                    && s > found[found.len() - 1]
                {
                    return Err(Error::PartMissing(at(&expected_next(
                        found[found.len() - 1],
                    ))));
                }
            }
        }
    } else {
        for (s, p) in given.iter().skip(1) {
            let prev = &chain[chain.len() - 1].0;
            if !successors(prev).contains(s) {
                return Err(Error::PartMissing(at(&expected_next(prev))));
            }
            chain.push((s.clone(), p.clone()));
        }
        let last = &chain[chain.len() - 1].0;
        if let Some(s) = successors(last).into_iter().find(|s| at(s).is_file()) {
            return Err(Error::Archive(format!(
                "{} exists beside the parts given but was not given; pass every part (or only the first)",
                at(&s).display()
            )));
        }
    }
    Ok(Parts {
        parts: chain.iter().map(|(_, p)| part(p)).collect::<Result<_>>()?,
        name: base,
    })
}

fn mixed(paths: &[PathBuf]) -> Error {
    Error::Archive(format!(
        "{} files given that are not parts of one archive (NAME.part00, NAME.part01, … in one directory)",
        paths.len()
    ))
}

/// Expected digests: of the whole archive and/or of single parts (by file name).
#[derive(Clone, Debug, Default)]
pub struct Digests {
    pub whole: Option<String>,
    pub parts: HashMap<String, String>,
}

impl Digests {
    pub fn is_empty(&self) -> bool {
        self.whole.is_none() && self.parts.is_empty()
    }
}

fn check_hex(s: &str, what: &str) -> Result<String> {
    let h = s.trim().to_ascii_lowercase();
    if h.len() == 64 && is_hex(&h) {
        Ok(h)
    } else {
        Err(Error::Archive(format!(
            "{what}: '{s}' is not a sha256 (64 hex digits)"
        )))
    }
}

/// The digests to check: `--sha256` (the whole archive) and a manifest
/// (`sha256sum` lines or JSON), matched to the parts by file name.
pub fn expected_digests(
    sha256: Option<&str>,
    manifest: Option<&Path>,
    parts: &Parts,
) -> Result<Digests> {
    let mut d = Digests::default();
    if let Some(h) = sha256 {
        d.whole = Some(check_hex(h, "--sha256")?);
    }
    let Some(mpath) = manifest else {
        return Ok(d);
    };
    let text = fs::read_to_string(mpath).at(mpath)?;
    let bad = |detail: String| Error::Manifest {
        path: mpath.to_path_buf(),
        detail,
    };
    let mut lines: Vec<(String, String)> = Vec::new();
    if text.trim_start().starts_with('{') {
        // {"sha256": HEX, "parts": {NAME: HEX} | [{"name": NAME, "sha256": HEX}]}
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if let Some(h) = v.get("sha256").and_then(|h| h.as_str()) {
            lines.push((h.to_string(), parts.name.clone()));
        }
        match v.get("parts") {
            Some(serde_json::Value::Object(m)) => {
                for (k, h) in m {
                    lines.push((h.as_str().unwrap_or("").to_string(), k.clone()));
                }
            }
            Some(serde_json::Value::Array(a)) => {
                for p in a {
                    let name = p.get("name").and_then(|x| x.as_str()).unwrap_or("");
                    let h = p.get("sha256").and_then(|x| x.as_str()).unwrap_or("");
                    lines.push((h.to_string(), name.to_string()));
                }
            }
            _ => {}
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (h, name) = line
                .split_once(' ')
                .ok_or_else(|| bad(format!("line {}: expected 'HEX  NAME'", i + 1)))?;
            let name = name.trim_start_matches(' ').trim_start_matches('*');
            lines.push((h.to_string(), name.to_string()));
        }
    }
    let part_names: Vec<String> = parts.parts.iter().map(|p| file_name(&p.path)).collect();
    let mut matched = false;
    for (h, name) in lines {
        let base = file_name(Path::new(&name));
        let whole = base == parts.name || name == "-";
        if !(whole || part_names.contains(&base)) {
            continue;
        }
        let h = check_hex(&h, &mpath.display().to_string())?;
        matched = true;
        if whole {
            match &d.whole {
                Some(w) if *w != h => {
                    return Err(bad(format!(
                        "it gives {h} for {name} but --sha256 says {w}"
                    )));
                }
                _ => d.whole = Some(h),
            }
        } else {
            d.parts.insert(base, h);
        }
    }
    if !matched {
        return Err(bad(format!(
            "no line names {} or one of its parts",
            parts.name
        )));
    }
    Ok(d)
}

/// sha256 of the joined parts and of each part, reading them once (no
/// decompression): how an archive given without a digest is looked up.
pub fn hash_parts(parts: &Parts) -> Result<(String, Vec<String>)> {
    let mut whole = Sha256::new();
    let mut each = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    for p in &parts.parts {
        let mut f = fs::File::open(&p.path).at(&p.path)?;
        let mut h = Sha256::new();
        loop {
            let n = f.read(&mut buf).at(&p.path)?;
            if n == 0 {
                break;
            }
            whole.update(&buf[..n]);
            h.update(&buf[..n]);
        }
        each.push(to_hex(&h.finalize()));
    }
    Ok((to_hex(&whole.finalize()), each))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_follow_split() {
        assert_eq!(successors("00"), vec!["01"]);
        assert_eq!(successors("09"), vec!["10"]);
        assert_eq!(successors("89"), vec!["9000", "90"]);
        assert_eq!(successors("9899"), vec!["990000", "9900"]);
        assert_eq!(successors("az"), vec!["ba"]);
        assert_eq!(successors("yz"), vec!["zaaa", "za"]);
        assert!(successors("99").is_empty() || successors("99") == vec!["9900".to_string()]);
        assert_eq!(
            split_part_name("s1.tar.zst.part00"),
            Some(("s1.tar.zst", "00"))
        );
        assert_eq!(
            split_part_name("s1.tar.zst.partab"),
            Some(("s1.tar.zst", "ab"))
        );
        assert_eq!(split_part_name("s1.tar.zst"), None);
        assert_eq!(split_part_name("x.partA1"), None);
    }
}
