//! Every relative link in the Markdown of the repository (README.md,
//! CONTRIBUTING.md, docs/, bench/results/) names a file that exists, and a
//! link to a heading (`file.md#anchor`, `#anchor`) names a heading that exists
//! (GitHub's anchors). No root, no mount.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files checked: their links, and the targets of links to them.
fn markdown_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    for dir in ["docs", "bench/results"] {
        let mut in_dir: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    files
}

/// The lines of `text` outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, and everything
/// but letters, digits, `-` and `_` dropped; a repeated one gets `-1`, `-2`.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose_lines(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let base: String = title
            .trim()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .flat_map(char::to_lowercase)
            .collect();
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of `[text](target)` links in `text`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        // Drop inline code spans, whose `](` is not a link.
        let mut prose = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(part);
            }
        }
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push(target.to_string());
            rest = &rest[end..];
        }
    }
    out
}

fn check(file: &Path, problems: &mut Vec<String>) {
    let root = root();
    let text = fs::read_to_string(file).unwrap();
    let name = file.strip_prefix(&root).unwrap().display().to_string();
    for target in links(&text) {
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        if !resolved.exists() {
            problems.push(format!("{name}: link to {target}: no such file"));
            continue;
        }
        if let Some(anchor) = anchor
            && resolved.extension().is_some_and(|e| e == "md")
        {
            let there = fs::read_to_string(&resolved).unwrap();
            if !anchors(&there).contains(anchor) {
                problems.push(format!("{name}: link to {target}: no such heading"));
            }
        }
    }
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut problems = Vec::new();
    let files = markdown_files();
    assert!(files.len() > 5, "found the docs: {files:?}");
    for f in &files {
        check(f, &mut problems);
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_anchor_rule_is_githubs() {
    let a = anchors(
        "# storefs\n## `storefs remote add`\n## 6. Run a fleet (`storefs run`)\n## Status\n## Status\n```\n# not a heading\n```\n",
    );
    for want in [
        "storefs",
        "storefs-remote-add",
        "6-run-a-fleet-storefs-run",
        "status",
        "status-1",
    ] {
        assert!(a.contains(want), "{want}: {a:?}");
    }
    assert!(!a.contains("not-a-heading"));
    assert_eq!(
        links("see [a](b.md#c) and `[x](y)` [d](e)"),
        ["b.md#c", "e"]
    );
}
