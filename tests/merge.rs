//! `storefs merge` (issue 42). Two parts:
//! - the line merge against what we did not write: `git merge-file` decides
//!   every case of 9,000 random three-way merges of small files and 1,800 of
//!   larger ones (bytes, conflict count; markers, `--ours`, `--theirs`), and
//!   storefs must agree byte for byte, every time; the line diff under it
//!   (git's xdiff, ported) must give `git diff`'s changes on 16 pairs of
//!   large files, where xdiff's heuristics, cost limit and discarded lines
//!   decide;
//! - the tree merge through the CLI on real stores: one-sided changes, the
//!   append rule, conflict kinds listed and nothing published, `--conflicts`,
//!   the merge base found from parents, up to date and fast-forward.
//!
//! Needs `git` and `rsync` (it fails without them rather than pass
//! untested); the tree tests make their sides in `storefs run`s, so they
//! need root and /dev/fuse as every binary that mounts.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::Env;
use storefs::store::merge::text::{Favor, merge};

/// A small deterministic generator (xorshift), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How big the random files are: fewer than `lines` lines in the base, 1 to
/// `edits` edits on each side, each of 1 to `block` lines; one line in
/// `one_in` drawn from the 3 common ones alone (`{`, `}`, empty; 1: none
/// besides the uniform draw).
#[derive(Clone, Copy)]
struct Shape {
    lines: u64,
    edits: u64,
    block: u64,
    one_in: u64,
}

/// The shape of most cases: files of a few lines, a few one-line edits.
const SMALL: Shape = Shape {
    lines: 12,
    edits: 3,
    block: 1,
    one_in: 1,
};

/// Lines drawn from `words` distinct ones (the first few are `{`, `}`, an
/// empty line, as code and JSON repeat them), so the sides often touch the
/// same or equal lines: the cases where merges differ.
fn random_text(r: &mut Rng, words: u64, shape: Shape) -> Vec<String> {
    let n = r.below(shape.lines) as usize;
    (0..n).map(|_| shaped_line(r, words, shape)).collect()
}

fn random_line(r: &mut Rng, words: u64) -> String {
    const COMMON: [&str; 3] = ["{", "}", ""];
    let i = r.below(words) as usize;
    match COMMON.get(i) {
        Some(w) => w.to_string(),
        None => format!("line {i}"),
    }
}

/// A line of `words`, or one in `shape.one_in` of the 3 common ones.
fn shaped_line(r: &mut Rng, words: u64, shape: Shape) -> String {
    let common = shape.one_in > 1 && r.below(shape.one_in) == 0;
    random_line(r, if common { 3 } else { words })
}

/// A few random edits: delete, insert, replace a line (or a block of lines).
fn edit(r: &mut Rng, base: &[String], words: u64, shape: Shape) -> Vec<String> {
    let mut out = base.to_vec();
    for _ in 0..=r.below(shape.edits) {
        let at = r.below(out.len() as u64 + 1) as usize;
        let n = if shape.block > 1 {
            1 + r.below(shape.block) as usize
        } else {
            1
        };
        let end = (at + n).min(out.len());
        match r.below(3) {
            0 if at < out.len() => {
                out.drain(at..end);
            }
            1 if at < out.len() => {
                for line in &mut out[at..end] {
                    *line = shaped_line(r, words, shape);
                }
            }
            _ => {
                let new: Vec<String> = (0..n).map(|_| shaped_line(r, words, shape)).collect();
                out.splice(at..at, new);
            }
        }
    }
    out
}

fn join(lines: &[String], final_newline: bool) -> Vec<u8> {
    let mut s = lines.join("\n");
    if final_newline && !lines.is_empty() {
        s.push('\n');
    }
    s.into_bytes()
}

/// `git` with no system or user configuration (a `diff.algorithm` or
/// `merge.conflictStyle` there would change what it decides).
fn git() -> Command {
    let mut cmd = Command::new("git");
    cmd.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    cmd
}

/// `git merge-file -p` of the three, with `flag` (`--ours`, `--theirs` or
/// none): its output and exit code (the number of conflicts).
fn git_merge_file(
    dir: &Path,
    base: &[u8],
    ours: &[u8],
    theirs: &[u8],
    flag: &str,
) -> (Vec<u8>, i32) {
    let (o, b, t) = (dir.join("ours"), dir.join("base"), dir.join("theirs"));
    fs::write(&o, ours).unwrap();
    fs::write(&b, base).unwrap();
    fs::write(&t, theirs).unwrap();
    let mut cmd = git();
    cmd.args([
        "merge-file",
        "-p",
        "-L",
        "ours",
        "-L",
        "base",
        "-L",
        "theirs",
    ]);
    if !flag.is_empty() {
        cmd.arg(flag);
    }
    let out = cmd
        .arg(&o)
        .arg(&b)
        .arg(&t)
        .output()
        .expect("git merge-file (is git installed?)");
    let code = out.status.code().expect("git merge-file killed");
    assert!(
        (0..128).contains(&code),
        "git merge-file failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.stdout, code)
}

/// `cases` random merges of lines drawn from `words` distinct ones, each
/// with markers, `--ours` and `--theirs`, by git and by storefs: how many
/// conflicted (by git), and a description of each that differs.
fn compare_with_git(cases: u64, words: u64, shape: Shape) -> (u64, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    let mut mismatches = Vec::new();
    let mut conflicted = 0;
    for seed in 1..=cases {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let base = random_text(&mut r, words, shape);
        let ours = edit(&mut r, &base, words, shape);
        let theirs = edit(&mut r, &base, words, shape);
        let nl = [r.below(5) != 0, r.below(5) != 0, r.below(5) != 0];
        let (b, o, t) = (join(&base, nl[0]), join(&ours, nl[1]), join(&theirs, nl[2]));
        for (favor, flag) in [
            (Favor::Markers, ""),
            (Favor::Ours, "--ours"),
            (Favor::Theirs, "--theirs"),
        ] {
            let (want, code) = git_merge_file(tmp.path(), &b, &o, &t, flag);
            let got = merge(&b, &o, &t, favor, "ours", "theirs");
            let conflicts_agree = favor != Favor::Markers || got.conflicts == code as usize;
            if favor == Favor::Markers && code > 0 {
                conflicted += 1;
            }
            if got.bytes != want || !conflicts_agree {
                mismatches.push(format!(
                    "seed {seed} {flag:?}: base {:?} ours {:?} theirs {:?}\n  git ({code}): {:?}\n  storefs ({}): {:?}",
                    String::from_utf8_lossy(&b),
                    String::from_utf8_lossy(&o),
                    String::from_utf8_lossy(&t),
                    String::from_utf8_lossy(&want),
                    got.conflicts,
                    String::from_utf8_lossy(&got.bytes),
                ));
            }
        }
    }
    (conflicted, mismatches)
}

/// How many random cases to run: `default`, or `STOREFS_MERGE_CASES` times
/// `default / 1500` (to run more by hand; the seeds count from 1, so a
/// larger count runs the default's cases too).
fn case_count(default: u64) -> u64 {
    match std::env::var("STOREFS_MERGE_CASES") {
        Ok(v) => {
            let n: u64 = v.parse().expect("STOREFS_MERGE_CASES: a number");
            (n * default / 1500).max(1)
        }
        Err(_) => default,
    }
}

/// Runs [`compare_with_git`] and requires every merge to be git's.
fn assert_same_as_git(cases: u64, words: u64, shape: Shape, what: &str) {
    let (conflicted, mismatches) = compare_with_git(cases, words, shape);
    // The generator must reach conflicts, or the comparison says little.
    assert!(
        conflicted > cases / 20,
        "{what}: only {conflicted} of {cases} cases conflicted"
    );
    eprintln!(
        "{what}, {words} distinct lines: {} of {} merges differ from git merge-file ({conflicted} cases conflicted)",
        mismatches.len(),
        cases * 3
    );
    assert!(
        mismatches.is_empty(),
        "{what}, {words} distinct lines: {} of {} merges differ from git merge-file; the first:\n{}",
        mismatches.len(),
        cases * 3,
        mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// storefs's line merge against git merge-file on random edits, lines from
/// 20 distinct ones (like code or JSON) and from 6 (each repeated many times
/// in a file, so that git's special treatment of lines occurring more often
/// than about the square root of the file's length, xdl_cleanup_records,
/// comes in). Every merge must be git's byte for byte, with git's conflict
/// count: storefs diffs with git's xdiff, ported (src/store/merge/xdiff/).
/// `STOREFS_MERGE_CASES=N` runs N cases of each kind instead of 1,500.
#[test]
fn the_line_merge_decides_as_git_merge_file_does() {
    let cases = case_count(1500);
    for words in [20, 6] {
        assert_same_as_git(cases, words, SMALL, "small files");
    }
}

/// The same on files of up to 400 lines with up to 40 edits on each side
/// (many hunks, conflicts beside clean changes, conflicts refined and
/// joined), lines from 6, 20 and 200 distinct ones; and on files of mostly
/// distinct lines, one in 4 `{`, `}` or empty, whose sides rewrite blocks
/// of up to 30 lines (frequent lines among lines with no match elsewhere,
/// which git's diff discards: xdl_cleanup_records).
#[test]
fn the_line_merge_decides_as_git_merge_file_does_on_larger_files() {
    let cases = case_count(150);
    let shape = Shape {
        lines: 400,
        edits: 40,
        block: 1,
        one_in: 1,
    };
    for words in [6, 20, 200] {
        assert_same_as_git(cases, words, shape, "larger files");
    }
    let rewrites = Shape {
        lines: 300,
        edits: 4,
        block: 30,
        one_in: 4,
    };
    assert_same_as_git(cases, 1_000_000, rewrites, "block rewrites");
}

/// `git diff --no-index` of two files (Myers, without the indent heuristic
/// that `git diff` turns on and `git merge-file` does not; with one line of
/// context, as with none git trims the files' common tail before diffing)
/// as changes: (first line, count) in each file, as `xdchange_t` has them.
fn git_diff(dir: &Path, before: &[u8], after: &[u8]) -> Vec<(usize, usize, usize, usize)> {
    let (a, b) = (dir.join("a"), dir.join("b"));
    fs::write(&a, before).unwrap();
    fs::write(&b, after).unwrap();
    let out = git()
        .args([
            "diff",
            "--no-index",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-indent-heuristic",
            "--diff-algorithm=myers",
            "-U1",
        ])
        .arg(&a)
        .arg(&b)
        .output()
        .expect("git diff (is git installed?)");
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "git diff failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // In each hunk, a run of '-' and '+' lines between context lines is one
    // change. What comes before the first hunk is the header.
    let mut changes = Vec::new();
    let mut pos: Option<(usize, usize)> = None;
    let mut open: Option<(usize, usize, usize, usize)> = None;
    for line in out.stdout.split(|&b| b == b'\n') {
        if line.starts_with(b"@@ ") {
            changes.extend(open.take());
            let head = String::from_utf8_lossy(line);
            let start = |sign: char| -> usize {
                let r = head.split(' ').find(|w| w.starts_with(sign)).unwrap();
                let (start, len) = r[1..].split_once(',').unwrap_or((&r[1..], "1"));
                let start: usize = start.parse().unwrap();
                if len == "0" { start } else { start - 1 }
            };
            pos = Some((start('-'), start('+')));
            continue;
        }
        let Some((p0, p1)) = pos.as_mut() else {
            continue;
        };
        match line.first() {
            Some(b' ') => {
                changes.extend(open.take());
                *p0 += 1;
                *p1 += 1;
            }
            Some(b'-') => {
                open.get_or_insert((*p0, 0, *p1, 0)).1 += 1;
                *p0 += 1;
            }
            Some(b'+') => {
                open.get_or_insert((*p0, 0, *p1, 0)).3 += 1;
                *p1 += 1;
            }
            _ => {}
        }
    }
    changes.extend(open.take());
    changes
}

/// The ported diff itself against `git diff` on large files with many
/// edits: enough lines (over 65,536 between the two) that the cost limit
/// is above 256 and git's snake heuristic (`XDL_HEUR_MIN_COST`) takes
/// splits, and enough edits that the cost limit (`xdl_bogosqrt`) cuts the
/// search; vocabularies from 4 to 100,000 distinct lines, so that lines
/// occurring too often are discarded or kept (`xdl_clean_mmatch`).
#[test]
fn the_line_diff_is_gits_on_large_files() {
    let tmp = tempfile::tempdir().unwrap();
    // (lines, distinct lines, one line in how many is one of the 3 common
    // ones, `{`, `}` or empty, besides the uniform draw (1: none), edits)
    let cases: &[(u64, u64, u64, u64)] = &[
        (40_000, 4, 1, 8_000),
        (40_000, 30, 1, 2_000),
        (40_000, 1_000, 1, 6_000),
        (40_000, 100_000, 3, 3_000),
        (40_000, 100_000, 1, 5_000),
        (3_000, 10, 1, 1_000),
        (3_000, 3_000, 2, 300),
        (500, 3, 1, 200),
        (500, 50, 4, 50),
        // Two unrelated files (0 edits: a second random file).
        (30_000, 20, 1, 0),
        (30_000, 2_000, 1, 0),
        (3_000, 8, 1, 0),
        // Unrelated lines around frequent ones (`{`, `}`, empty): those are
        // discarded when they sit among lines with no match (clean_mmatch).
        (20_000, 1_000_000, 4, 0),
        (3_000, 1_000_000, 8, 0),
        (300, 1_000_000, 3, 0),
        (20_000, 6, 1, 15_000),
    ];
    let mut differ = Vec::new();
    for (seed, &(lines, words, one_in, edits)) in (1u64..).zip(cases) {
        let mut r = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
        let shape = Shape {
            lines,
            edits,
            block: 1,
            one_in,
        };
        let text = |r: &mut Rng| -> Vec<String> {
            (0..lines).map(|_| shaped_line(r, words, shape)).collect()
        };
        let base = text(&mut r);
        let after = if edits == 0 {
            text(&mut r)
        } else {
            edit(&mut r, &base, words, shape)
        };
        let (b, a) = (join(&base, true), join(&after, true));
        let want = git_diff(tmp.path(), &b, &a);
        let split = |d: &[u8]| -> Vec<Vec<u8>> {
            d.split_inclusive(|&c| c == b'\n')
                .map(<[u8]>::to_vec)
                .collect()
        };
        let (lb, la) = (split(&b), split(&a));
        let lb: Vec<&[u8]> = lb.iter().map(Vec::as_slice).collect();
        let la: Vec<&[u8]> = la.iter().map(Vec::as_slice).collect();
        let got: Vec<_> = storefs::store::merge::xdiff::diff(&lb, &la)
            .into_iter()
            .map(|c| (c.i0, c.chg0, c.i1, c.chg1))
            .collect();
        eprintln!(
            "{lines} lines of {words} distinct, {} edits: git {} changes, storefs {}",
            edits,
            want.len(),
            got.len()
        );
        if got != want {
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            differ.push(format!(
                "seed {seed} ({lines} lines of {words}): git {} changes, storefs {}; first difference at change {first:?}: git {:?}, storefs {:?}",
                want.len(),
                got.len(),
                first.map(|i| want[i]),
                first.map(|i| got[i]),
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// A base tree and two sides made from it, each snapshotted with the base
/// as its parent (so the merge base is found, not given).
struct Sides {
    env: Env,
    /// B's checkpoint id.
    b: String,
}

fn write(dir: &Path, rel: &str, data: &[u8]) {
    let p = dir.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

const NOTES: &str = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n";

impl Sides {
    /// `a` and `b` change copies of the base tree; refs base, a, b.
    fn new(a: impl Fn(&Path), b: impl Fn(&Path)) -> Sides {
        let env = Env::new();
        let base = env.path("base");
        write(&base, "notes.md", NOTES.as_bytes());
        write(&base, "log.jsonl", b"{\"n\":1}\n");
        write(&base, "data.bin", &common::pseudo_random(4096, 7));
        write(&base, "dir/keep", b"keep\n");
        write(&base, "gone", b"to be deleted\n");
        env.ok([
            "snapshot".as_ref(),
            base.as_os_str(),
            "--ref".as_ref(),
            "base".as_ref(),
        ]);
        // The origin is missing on the host (a run mounts over nothing).
        let src = env.path("base-src");
        fs::rename(&base, &src).unwrap();
        // Each side is a fork of base whose run makes the origin what the
        // side's copy is (rsync), committed when the run ends: its head's
        // parent is base, so the merge base is found, not given.
        for (name, f) in [("a", &a as &dyn Fn(&Path)), ("b", &b)] {
            let dir = env.path(name);
            copy_tree(&src, &dir);
            f(&dir);
            let from = format!("{}/", dir.display());
            let to = format!("{}/", base.display());
            env.ok([
                "run",
                "base",
                "--fork",
                name,
                "-m",
                name,
                "--",
                "rsync",
                "-a",
                "--checksum",
                "--delete",
                &from,
                &to,
            ]);
        }
        let forks: serde_json::Value = serde_json::from_str(&env.ok(["forks", "--json"])).unwrap();
        let b = forks
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "b")
            .unwrap()["head"]
            .as_str()
            .unwrap()
            .to_string();
        Sides { env, b }
    }

    fn cat(&self, r: &str, path: &str) -> String {
        self.env.ok(["cat", r, path])
    }
}

fn copy_tree(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn one_sided_changes_both_appends_and_separate_line_edits_merge_cleanly() {
    let s = Sides::new(
        |d| {
            write(d, "notes.md", NOTES.replace("two", "TWO").as_bytes());
            write(d, "log.jsonl", b"{\"n\":1}\n{\"a\":2}\n");
            write(d, "new-a", b"from a\n");
            fs::remove_file(d.join("gone")).unwrap();
        },
        |d| {
            write(d, "notes.md", NOTES.replace("six", "SIX").as_bytes());
            write(d, "log.jsonl", b"{\"n\":1}\n{\"b\":2}\n{\"b\":3}\n");
            write(d, "dir/new-b", b"from b\n");
            write(d, "data.bin", &common::pseudo_random(4096, 8));
        },
    );
    let id = s.env.ok(["merge", "a", "b", "--ref", "m", "-m", "a and b"]);
    assert_eq!(id.trim().len(), 64, "{id}");
    assert_eq!(
        s.cat("m", "notes.md"),
        NOTES.replace("two", "TWO").replace("six", "SIX")
    );
    // The append rule: the base, A's appended bytes, then B's.
    assert_eq!(
        s.cat("m", "log.jsonl"),
        "{\"n\":1}\n{\"a\":2}\n{\"b\":2}\n{\"b\":3}\n"
    );
    assert_eq!(s.cat("m", "new-a"), "from a\n");
    assert_eq!(s.cat("m", "dir/new-b"), "from b\n");
    assert_eq!(s.cat("m", "dir/keep"), "keep\n");
    let out = s.env.run(["cat", "m", "data.bin"]);
    assert_eq!(
        out.stdout,
        common::pseudo_random(4096, 8),
        "B's binary change taken"
    );
    assert!(
        !s.env.run(["cat", "m", "gone"]).status.success(),
        "A's delete taken"
    );
    // The result's parents are A and B: merging again is up to date.
    let again = s.env.run(["merge", "m", "b", "--ref", "m"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("up to date"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    // And B into its own ancestor is a fast-forward to B.
    let ff = s.env.ok(["merge", "base", "b", "--ref", "ff"]);
    assert_eq!(ff.trim(), s.b);
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn conflicts_are_listed_one_per_line_and_nothing_is_published() {
    let s = Sides::new(
        |d| {
            write(
                d,
                "notes.md",
                NOTES.replace("four", "four from a").as_bytes(),
            );
            write(d, "data.bin", b"\0a");
            write(d, "dir/keep", b"edited by a\n");
        },
        |d| {
            write(
                d,
                "notes.md",
                NOTES.replace("four", "four from b").as_bytes(),
            );
            write(d, "data.bin", b"\0b");
            fs::remove_file(d.join("dir/keep")).unwrap();
        },
    );
    let out = s.env.run(["merge", "a", "b", "--ref", "m"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let kinds: Vec<(&str, &str)> = listed
        .lines()
        .map(|l| {
            let mut f = l.split('\t');
            (f.next().unwrap(), f.next().unwrap_or(""))
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("binary", "data.bin"),
            ("edit/delete", "dir/keep"),
            ("content", "notes.md")
        ],
        "{listed}"
    );
    assert!(
        !s.env.run(["cat", "m", "notes.md"]).status.success(),
        "a conflicted merge published ref m"
    );

    // --conflicts both: git's markers in the text file, B's binary beside A's.
    s.env
        .ok(["merge", "a", "b", "--ref", "m", "--conflicts", "both"]);
    let merged = s.cat("m", "notes.md");
    let tmp = tempfile::tempdir().unwrap();
    let (git, code) = git_merge_file(
        tmp.path(),
        NOTES.as_bytes(),
        NOTES.replace("four", "four from a").as_bytes(),
        NOTES.replace("four", "four from b").as_bytes(),
        "",
    );
    assert_eq!(code, 1);
    let git = String::from_utf8(git).unwrap();
    // The same hunks and lines as git's; only the labels name the sides.
    let strip = |t: &str| {
        t.lines()
            .map(|l| {
                if l.starts_with("<<<<<<<") || l.starts_with(">>>>>>>") {
                    &l[..7]
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(strip(&merged), strip(&git), "{merged}");
    assert_eq!(s.env.run(["cat", "m", "data.bin"]).stdout, b"\0a");
    assert_eq!(s.env.run(["cat", "m", "data.bin.merge-B"]).stdout, b"\0b");

    // --conflicts theirs: B's side of each.
    s.env
        .ok(["merge", "a", "b", "--ref", "t", "--conflicts", "theirs"]);
    assert_eq!(s.cat("t", "notes.md"), NOTES.replace("four", "four from b"));
    assert_eq!(s.env.run(["cat", "t", "data.bin"]).stdout, b"\0b");
}
