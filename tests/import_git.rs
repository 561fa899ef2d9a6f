//! Issue 20: checkpoints that live in git. A repository of 200 commits made with
//! the git CLI (branches, a merge, tags, renames, symlinks, an executable, a
//! deleted file, a submodule entry, a multi-chunk file) is imported with
//! `storefs import-git`; every commit's `storefs restore` is compared with
//! `git archive COMMIT | tar -x` (names, bytes, modes, owners, mtimes, symlink
//! targets); a second import after 10 more commits imports exactly those 10;
//! the commit an attempt's JSON names mounts at the origin with `git:PREFIX`;
//! `log`, `diff`, `fork` (mounted and committed) and the browse mount work on
//! the imported checkpoints. A shallow and a corrupt repository are refused
//! with one line and nothing published. Run as root (mounts; tar keeps owner 0).

mod common;
mod treecmp;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Env, stderr};

/// Run git in `dir` with a fixed identity and dates (`secs` since the epoch),
/// ignoring the user's and the system's configuration; returns stdout.
fn git_at(dir: &Path, secs: i64, args: &[&str]) -> String {
    let date = format!("{secs} +0000");
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com"])
        .args(["-c", "gc.auto=0", "-c", "core.symlinks=true"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A repository built commit by commit, each with its own time.
struct Repo {
    dir: PathBuf,
    time: i64,
}

impl Repo {
    fn new(dir: PathBuf) -> Repo {
        fs::create_dir_all(&dir).unwrap();
        let r = Repo {
            dir,
            time: 1_700_000_000,
        };
        r.git(&["init", "-q", "-b", "main"]);
        r
    }

    fn git(&self, args: &[&str]) -> String {
        git_at(&self.dir, self.time, args)
    }

    fn write(&self, rel: &str, data: &[u8]) {
        let p = self.dir.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }

    /// Stage everything and commit; the next commit gets a later time.
    fn commit(&mut self, msg: &str) -> String {
        self.time += 97;
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", msg]);
        self.head()
    }

    fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"]).trim().to_string()
    }

    fn all_commits(&self) -> BTreeSet<String> {
        self.git(&["rev-list", "--all"])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// Deterministic bytes.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    common::pseudo_random(len, seed)
}

/// The 200-commit repository: main with files in directories, an executable
/// that loses its bit, symlinks (to a file, to a directory, retargeted), a
/// rename, a deleted file, a gitlink, a 300 KiB file (several chunks) edited
/// in place; a `feature` branch merged with --no-ff; a `side/x` branch left
/// unmerged; an annotated and a lightweight tag.
fn build_repo(dir: PathBuf) -> (Repo, Vec<String>) {
    let mut r = Repo::new(dir);
    let mut main: Vec<String> = Vec::new();
    for i in 0..140u64 {
        let d = i % 7;
        r.write(
            &format!("d{d}/f{}.txt", i % 11),
            format!("commit {i}\n")
                .repeat(1 + (i as usize % 5))
                .as_bytes(),
        );
        match i {
            1 => {
                r.write("d0/f1.txt", b"to be renamed\n");
                r.write("d1/f2.txt", b"to be deleted\n");
            }
            3 => {
                r.write("bin/tool.sh", b"#!/bin/sh\necho tool\n");
                fs::set_permissions(r.dir.join("bin/tool.sh"), fs::Permissions::from_mode(0o755))
                    .unwrap();
            }
            5 => {
                symlink("d0/f0.txt", r.dir.join("link")).unwrap();
                symlink("d1", r.dir.join("dirlink")).unwrap();
            }
            9 => r.write("big.bin", &bytes(9, 300 * 1024)),
            20 => {
                // An uninitialized submodule's directory is empty in a work tree.
                fs::create_dir_all(r.dir.join("vendor/sub")).unwrap();
                r.git(&["add", "-A"]);
                let sub = main[2].clone();
                r.git(&[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("160000,{sub},vendor/sub"),
                ]);
            }
            30 => {
                r.git(&["add", "-A"]);
                fs::create_dir_all(r.dir.join("moved")).unwrap();
                r.git(&["mv", "d0/f1.txt", "moved/f1.txt"]);
            }
            40 => {
                r.git(&["add", "-A"]);
                r.git(&["rm", "-q", "d1/f2.txt"]);
            }
            50 => {
                fs::set_permissions(r.dir.join("bin/tool.sh"), fs::Permissions::from_mode(0o644))
                    .unwrap();
            }
            60 => {
                fs::remove_file(r.dir.join("link")).unwrap();
                symlink("moved/f1.txt", r.dir.join("link")).unwrap();
            }
            70 => {
                // Edit 100 bytes in the middle of the big file: most chunks stay.
                let mut b = fs::read(r.dir.join("big.bin")).unwrap();
                b[150_000..150_100].copy_from_slice(&[7u8; 100]);
                r.write("big.bin", &b);
            }
            _ => {}
        }
        main.push(r.commit(&format!("main {i}\n\nbody of commit {i}")));
        if i == 80 {
            r.git(&["tag", "-a", "v1", "-m", "release 1"]);
        }
        if i == 81 {
            r.git(&["tag", "v1-light"]);
        }
    }
    // feature: 30 commits from main's head, merged back with --no-ff.
    r.git(&["checkout", "-q", "-b", "feature"]);
    for i in 0..30 {
        r.write(
            &format!("feat/g{}.txt", i % 4),
            format!("feature {i}\n").as_bytes(),
        );
        r.commit(&format!("feature {i}"));
    }
    r.git(&["checkout", "-q", "main"]);
    for i in 0..9 {
        r.write("d6/main-after.txt", format!("after {i}\n").as_bytes());
        main.push(r.commit(&format!("main after {i}")));
    }
    r.time += 97;
    r.git(&["merge", "-q", "--no-ff", "-m", "merge feature", "feature"]);
    main.push(r.head());
    // side/x: unmerged, 20 commits from the merge.
    r.git(&["checkout", "-q", "-b", "side/x"]);
    for i in 0..20 {
        r.write("side.txt", format!("side {i}\n").as_bytes());
        r.commit(&format!("side {i}"));
    }
    r.git(&["checkout", "-q", "main"]);
    (r, main)
}

/// `git archive COMMIT | tar -x` into `dest` (modes 644/755 as git stores them:
/// tar.umask=022; as root tar keeps the archive's owner 0:0).
fn git_archive(repo: &Path, commit: &str, dest: &Path) {
    fs::create_dir_all(dest).unwrap();
    let script = format!(
        "git -c tar.umask=022 -C {} archive {commit} | tar -x -C {}",
        treecmp::q(repo),
        treecmp::q(dest)
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compare everything but mtimes: `git archive` gives every entry the
/// commit's time, storefs the time of the commit that last changed it
/// ([`mtimes_follow_history`] checks those).
fn no_mtimes() -> treecmp::Opts {
    treecmp::Opts {
        listed: Some(BTreeSet::new()),
        root_meta: false,
        fresh_after: None,
        holes: false,
        blocks: false,
    }
}

/// Every entry's mtime in `dir` (restored from `commit`) is the committer
/// time of the last first-parent commit that changed it.
fn mtimes_follow_history(repo: &Path, commit: &str, dir: &Path) -> Vec<String> {
    let mut diffs = Vec::new();
    for (rel, node) in treecmp::scan(dir) {
        let spec = if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.to_str().unwrap().to_string()
        };
        let want: i64 = git_at(
            repo,
            1_600_000_000,
            &[
                "log",
                "--first-parent",
                "-1",
                "--format=%ct",
                commit,
                "--",
                &spec,
            ],
        )
        .trim()
        .parse()
        .unwrap();
        if node.mtime != (want, 0) {
            diffs.push(format!(
                "{commit}: {spec}: mtime {:?}, git log says {want}",
                node.mtime
            ));
        }
    }
    diffs
}

fn compare(repo: &Path, env: &Env, commit: &str, scratch: &Path) -> Vec<String> {
    let a = scratch.join("archive");
    let b = scratch.join("restored");
    git_archive(repo, commit, &a);
    let out = env.run(["restore", &format!("git:{commit}"), b.to_str().unwrap()]);
    let mut diffs: Vec<String> = if out.status.success() {
        treecmp::compare_trees(&a, &b, &no_mtimes())
    } else {
        vec![format!("restore failed: {}", stderr(&out))]
    };
    diffs.iter_mut().for_each(|d| *d = format!("{commit}: {d}"));
    fs::remove_dir_all(&a).unwrap();
    let _ = fs::remove_dir_all(&b);
    diffs
}

/// stdout of `import-git` as (commit, checkpoint) lines.
/// `import-git REPO --origin ORIGIN --ref-prefix PREFIX` into the test's
/// store: (stdout, stderr).
fn import_into(env: &Env, repo: &Path, origin: &Path, prefix: &str) -> (String, String) {
    env.ok_in(
        &env.store,
        &[
            "import-git",
            repo.to_str().unwrap(),
            "--origin",
            origin.to_str().unwrap(),
            "--ref-prefix",
            prefix,
        ],
    )
}

fn imported(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .map(|l| {
            let (c, id) = l.split_once('\t').expect("COMMIT<TAB>ID");
            (c.to_string(), id.to_string())
        })
        .collect()
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn import_200_commits_restore_each_then_incremental_and_mount() {
    treecmp::require_tools(&["git", "tar"]);
    let env = Env::new();
    let (mut repo, main) = build_repo(env.path("i20-repo"));
    let all = repo.all_commits();
    assert_eq!(all.len(), 200, "the repository has 200 commits");
    let origin = env.path("i20-origin/shared");

    let (out, err) = import_into(&env, &repo.dir, &origin, "h");
    let first = imported(&out);
    assert_eq!(first.len(), 200, "{err}");
    let got: BTreeSet<String> = first.iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(got, all);

    // Refs: branches and tags (the annotated one peeled to its commit).
    let refs = env.ok(["refs"]);
    let ref_of = |name: &str| {
        refs.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no ref {name} in {refs}"))
            .to_string()
    };
    let by_commit: std::collections::HashMap<String, String> = first.iter().cloned().collect();
    assert_eq!(ref_of("h.main"), by_commit[main.last().unwrap()]);
    assert_eq!(ref_of("h.tags.v1"), by_commit[&main[80]]);
    assert_eq!(ref_of("h.tags.v1-light"), by_commit[&main[81]]);
    let side = repo.git(&["rev-parse", "side/x"]).trim().to_string();
    assert_eq!(ref_of("h.side.x"), by_commit[&side]);
    let feature = repo.git(&["rev-parse", "feature"]).trim().to_string();
    assert_eq!(ref_of("h.feature"), by_commit[&feature]);

    // Parents: the merge has two, mapped to the parents' checkpoints.
    let merge = main.last().unwrap();
    let record: serde_json::Value = serde_json::from_slice(
        &fs::read(
            env.store
                .join(format!("checkpoints/{}.json", by_commit[merge])),
        )
        .unwrap(),
    )
    .unwrap();
    let parents: Vec<String> = repo
        .git(&["rev-list", "--parents", "-n1", merge])
        .split_whitespace()
        .skip(1)
        .map(|p| by_commit[p].clone())
        .collect();
    assert_eq!(parents.len(), 2);
    assert_eq!(record["parents"], serde_json::json!(parents));
    assert_eq!(record["source"]["kind"], "git");
    assert_eq!(record["source"]["git"]["commit"], merge.as_str());
    assert_eq!(record["message"], "merge feature");
    assert_eq!(record["origin"], origin.to_str().unwrap());
    assert_eq!(
        record["source"]["git"]["submodules"][0]["path"],
        "vendor/sub"
    );
    assert_eq!(
        record["time_ns"].as_i64().unwrap(),
        repo.git(&["log", "-1", "--format=%at", merge])
            .trim()
            .parse::<i64>()
            .unwrap()
            * 1_000_000_000
    );

    // Every commit: restore == git archive | tar -x.
    let scratch = env.path("i20-scratch");
    let mut diffs = Vec::new();
    for c in &all {
        diffs.extend(compare(&repo.dir, &env, c, &scratch));
    }
    assert!(diffs.is_empty(), "{}", treecmp::summary(&diffs, 40));

    // A diff of two neighbouring commits names what changed, nothing else.
    let (diff, _) = env.ok_in(
        &env.store,
        &[
            "diff",
            &format!("git:{}", main[100]),
            &format!("git:{}", main[101]),
        ],
    );
    assert_eq!(
        diff.lines().collect::<Vec<_>>(),
        ["M . (mtime)", "M d3 (mtime)", "M d3/f2.txt (content,mtime)"],
        "{diff}"
    );

    // Times: each entry's is that of the last first-parent commit changing it
    // (the merge, a commit on the unmerged branch, one after a rename).
    for c in [merge.as_str(), side.as_str(), main[31].as_str()] {
        let dir = scratch.join("times");
        env.ok(["restore", &format!("git:{c}"), dir.to_str().unwrap()]);
        let d = mtimes_follow_history(&repo.dir, c, &dir);
        assert!(d.is_empty(), "{}", treecmp::summary(&d, 20));
        fs::remove_dir_all(&dir).unwrap();
    }

    // The same commit gives the same tree id in another store, from a clone.
    let other = env.path("i20-store2");
    let clone = env.path("i20-clone");
    git_at(
        env.tmp.path(),
        1_600_000_000,
        &[
            "clone",
            "-q",
            "--no-local",
            repo.dir.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let (out2, _) = env.ok_in(
        &other,
        &[
            "import-git",
            clone.to_str().unwrap(),
            "--origin",
            origin.to_str().unwrap(),
            "--rev",
            "origin/main",
        ],
    );
    assert_eq!(imported(&out2).len(), 140 + 9 + 30 + 1);
    for c in [&main[0], &main[70], merge] {
        let root = |store: &Path| {
            let (id, _) = env.ok_in(store, &["log", &format!("git:{c}")]);
            let id = id
                .lines()
                .next()
                .unwrap()
                .split_whitespace()
                .nth(1)
                .unwrap()
                .to_string();
            treecmp::root_tree(store, &id).unwrap()
        };
        assert_eq!(root(&env.store), root(&other), "tree of {c}");
    }

    // Second import after 10 more commits: exactly those 10.
    let mut new = Vec::new();
    for i in 0..10 {
        repo.write("d3/later.txt", format!("later {i}\n").as_bytes());
        new.push(repo.commit(&format!("later {i}")));
    }
    let (out, err) = import_into(&env, &repo.dir, &origin, "h");
    let second = imported(&out);
    let second_commits: Vec<String> = second.iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(second_commits, new, "{err}");
    assert!(err.contains("imported 10 new commits"), "{err}");
    assert_eq!(
        env.ok(["refs"])
            .lines()
            .find(|l| l.starts_with("h.main\t"))
            .unwrap(),
        format!("h.main\t{}", second[9].1)
    );
    for c in [&new[0], &new[9]] {
        let d = compare(&repo.dir, &env, c, &scratch);
        assert!(d.is_empty(), "{}", treecmp::summary(&d, 20));
    }
    // The first new commit's parent is the old head's checkpoint.
    let (log, _) = env.ok_in(&env.store, &["log", &format!("git:{}", &new[0][..10])]);
    assert!(
        log.contains(&format!("parent:  {}", by_commit[merge])),
        "{log}"
    );
    assert!(log.contains(&format!("commit {} of ", new[0])), "{log}");

    // A third import with nothing new imports nothing.
    let (out, _) = import_into(&env, &repo.dir, &origin, "h");
    assert_eq!(out, "");

    // The commit an attempt's JSON names mounts at the origin.
    let attempt = env.path("attempt-017.json");
    fs::write(
        &attempt,
        serde_json::json!({"attempt": 17, "commit": main[70], "parent": main[69]}).to_string(),
    )
    .unwrap();
    let named: serde_json::Value = serde_json::from_slice(&fs::read(&attempt).unwrap()).unwrap();
    let prefix = &named["commit"].as_str().unwrap()[..8];
    let target = format!("git:{prefix}");
    let guard = env.mount(&target, None);
    assert_eq!(guard.path(), origin);
    let expected = scratch.join("expected");
    git_archive(&repo.dir, &main[70], &expected);
    let mut d = treecmp::compare_trees(&expected, &origin, &no_mtimes());
    d.extend(mtimes_follow_history(&repo.dir, &main[70], &origin));
    assert!(d.is_empty(), "{}", treecmp::summary(&d, 20));
    assert_eq!(
        fs::read_link(origin.join("link")).unwrap(),
        PathBuf::from("moved/f1.txt")
    );
    guard.unmount();
}

/// A commit with more new files than the import keeps in flight at once
/// (4,096: the oldest half is waited for when it passes that), then one that
/// changes a few of them: each restores as `git archive` extracts it.
#[test]
fn a_commit_of_more_files_than_are_kept_in_flight_imports_whole() {
    let env = Env::new();
    let scratch = env.path("scratch");
    fs::create_dir_all(&scratch).unwrap();
    let mut r = Repo::new(env.path("many"));
    for i in 0..5_000u64 {
        r.write(
            &format!("d{}/f{i}", i % 13),
            format!("file {i}\n").as_bytes(),
        );
    }
    let first = r.commit("5,000 files");
    for i in (0..5_000u64).step_by(499) {
        r.write(&format!("d{}/f{i}", i % 13), &bytes(i, 3000));
    }
    let second = r.commit("11 changed");
    let (stdout, _) = import_into(&env, &r.dir, &env.path("origin"), "many");
    assert_eq!(imported(&stdout).len(), 2, "{stdout}");
    for c in [&first, &second] {
        let diffs = compare(&r.dir, &env, c, &scratch);
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }
}

#[test]
#[cfg_attr(not(storefs_root_tests), ignore = "needs root: scripts/test.sh")]
fn log_diff_fork_and_browse_work_on_imported_commits() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    let mut r = Repo::new(env.path("i20-work/shared"));
    r.write("state/a.json", b"{\"a\": 1}\n");
    r.write("state/b.json", b"{\"b\": 1}\n");
    let c1 = r.commit("attempt 1");
    r.git(&["mv", "state/b.json", "state/b2.json"]);
    r.write("state/a.json", b"{\"a\": 2}\n");
    r.write("notes.md", b"new\n");
    let c2 = r.commit("attempt 2");

    // Default origin: the work tree; default prefix: its name.
    let (out, _) = env.ok_in(&env.store, &["import-git", r.dir.to_str().unwrap()]);
    assert_eq!(imported(&out).len(), 2);
    let work = fs::canonicalize(&r.dir).unwrap();
    let (log, _) = env.ok_in(&env.store, &["log", "shared.main"]);
    assert!(
        log.contains(&format!("origin:  {}", work.display())),
        "{log}"
    );
    assert!(
        log.contains("attempt 2") && log.contains("attempt 1"),
        "{log}"
    );

    let (diff, _) = env.ok_in(
        &env.store,
        &[
            "diff",
            &format!("git:{}", &c1[..7]),
            &format!("git:{}", &c2[..7]),
        ],
    );
    let lines: BTreeSet<&str> = diff.lines().collect();
    assert!(lines.contains("A notes.md"), "{diff}");
    assert!(lines.contains("A state/b2.json"), "{diff}");
    assert!(lines.contains("D state/b.json"), "{diff}");
    assert!(
        lines.iter().any(|l| l.starts_with("M state/a.json")),
        "{diff}"
    );

    // An unknown or ambiguous commit: one line.
    let err = env.fails_in(&env.store, &["log", "git:0000000"]);
    assert!(
        err.contains("no imported git commit starts with '0000000'"),
        "{err}"
    );

    // Re-import with another origin: new records, same trees.
    let elsewhere = env.path("i20-elsewhere");
    let (out, _) = import_into(&env, &r.dir, &elsewhere, "moved");
    let again = imported(&out);
    assert_eq!(again.len(), 2);
    let first_root = {
        let (refs, _) = env.ok_in(&env.store, &["refs"]);
        let id = refs
            .lines()
            .find(|l| l.starts_with("shared.main\t"))
            .unwrap()
            .split('\t')
            .nth(1)
            .unwrap()
            .to_string();
        treecmp::root_tree(&env.store, &id).unwrap()
    };
    assert_eq!(
        first_root,
        treecmp::root_tree(&env.store, &again[1].1).unwrap()
    );
    let (log, _) = env.ok_in(&env.store, &["log", &format!("git:{c2}")]);
    assert!(
        log.contains(&format!("origin:  {}", elsewhere.display())),
        "{log}"
    );

    // Fork the commit, mount it read-write, write, commit on unmount: resumes.
    env.ok(["fork", &format!("git:{}", &c2[..9]), "--name", "i20-resume"]);
    let mp = env.path("i20-fork-mp");
    let guard = env.mount("i20-resume", Some(&mp));
    assert_eq!(fs::read(mp.join("state/a.json")).unwrap(), b"{\"a\": 2}\n");
    fs::write(mp.join("state/c.json"), b"{\"c\": 3}\n").unwrap();
    guard.unmount();
    let (log, _) = env.ok_in(&env.store, &["log", "i20-resume"]);
    assert_eq!(log.matches("checkpoint ").count(), 3, "{log}");
    let (cat, _) = env.ok_in(&env.store, &["cat", "i20-resume", "state/c.json"]);
    assert_eq!(cat, "{\"c\": 3}\n");

    // The browse mount lists the imported checkpoints with their git source.
    let browse = env.path("i20-browse");
    let out = env.run(["mount", "--browse", browse.to_str().unwrap()]);
    let guard = env.guard_for("(browse)");
    assert!(out.status.success(), "{}", stderr(&out));
    let id = &again[1].1;
    let rec = fs::read_to_string(browse.join(format!("checkpoints/{id}.json"))).unwrap();
    assert!(rec.contains(&format!("\"commit\": \"{c2}\"")), "{rec}");
    assert_eq!(
        fs::read(browse.join(format!("checkpoints/{id}/state/b2.json"))).unwrap(),
        b"{\"b\": 1}\n"
    );
    assert_eq!(
        fs::read_link(browse.join("refs/moved.main")).unwrap(),
        PathBuf::from(format!("../checkpoints/{id}"))
    );
    // git/<commit>: every imported commit, by its full id, to its checkpoint.
    let commits: BTreeSet<String> = fs::read_dir(browse.join("git"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(commits, BTreeSet::from([c1.clone(), c2.clone()]));
    assert_eq!(
        fs::read_link(browse.join(format!("git/{c2}"))).unwrap(),
        PathBuf::from(format!("../checkpoints/{id}"))
    );
    assert_eq!(
        fs::read(browse.join(format!("git/{c2}/state/a.json"))).unwrap(),
        b"{\"a\": 2}\n"
    );
    guard.unmount();
}

/// Nothing published: no checkpoint record, no index entry, no ref.
fn assert_nothing_published(store: &Path) {
    for sub in ["checkpoints", "git", "refs"] {
        let n = fs::read_dir(store.join(sub)).map_or(0, |d| {
            d.filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                !n.to_string_lossy().starts_with('.')
            })
            .count()
        });
        assert_eq!(n, 0, "{sub} of {} is not empty", store.display());
    }
}

#[test]
fn shallow_and_corrupt_repositories_are_refused_with_nothing_published() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    let mut r = Repo::new(env.path("i20-src"));
    let mut blob_of_first = String::new();
    for i in 0..5 {
        r.write("a.txt", format!("version {i}\n").as_bytes());
        r.write(&format!("f{i}.txt"), format!("file {i}\n").as_bytes());
        r.commit(&format!("c{i}"));
        if i == 0 {
            blob_of_first = r.git(&["rev-parse", "HEAD:a.txt"]).trim().to_string();
        }
    }

    // Shallow clone.
    let shallow = env.path("i20-shallow");
    git_at(
        env.tmp.path(),
        1_600_000_000,
        &[
            "clone",
            "-q",
            "--depth",
            "2",
            &format!("file://{}", r.dir.display()),
            shallow.to_str().unwrap(),
        ],
    );
    let err = env.fails_in(&env.store, &["import-git", shallow.to_str().unwrap()]);
    assert!(err.contains("shallow"), "{err}");
    assert!(err.contains("nothing was imported"), "{err}");
    assert_nothing_published(&env.store);

    // A bare repository has no work tree: --origin is needed.
    let bare = env.path("i20-bare.git");
    git_at(
        env.tmp.path(),
        1_600_000_000,
        &[
            "clone",
            "-q",
            "--bare",
            r.dir.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let err = env.fails_in(&env.store, &["import-git", bare.to_str().unwrap()]);
    assert!(
        err.contains("bare repository") && err.contains("--origin"),
        "{err}"
    );
    assert_nothing_published(&env.store);

    // A blob of the first commit is gone (loose objects: gc.auto=0).
    let obj = r
        .dir
        .join(".git/objects")
        .join(&blob_of_first[..2])
        .join(&blob_of_first[2..]);
    fs::remove_file(&obj).unwrap();
    let err = env.fails_in(&env.store, &["import-git", r.dir.to_str().unwrap()]);
    assert!(err.contains("corrupt or incomplete"), "{err}");
    assert!(err.contains("nothing was imported"), "{err}");
    assert_nothing_published(&env.store);

    // `git` cannot name a remote: `git:COMMIT` is taken.
    let err = env.fails_in(&env.store, &["remote", "add", "git", "file:///nonexistent"]);
    assert!(err.contains("reserved"), "{err}");

    // Not a repository at all.
    let plain = env.path("i20-plain");
    fs::create_dir_all(&plain).unwrap();
    let err = env.fails_in(&env.store, &["import-git", plain.to_str().unwrap()]);
    assert!(err.contains("not a git repository"), "{err}");
    assert_nothing_published(&env.store);
}

/// Emptying the map of the blobs stored in the run after every commit (what
/// a long import does once it holds `KEEP_BLOBS`) gives the same trees: a
/// blob that changed against the first parent but was stored before (the
/// merge brings the feature branch's) is read and chunked again, to the same
/// extents.
#[test]
fn an_import_that_forgets_its_blobs_between_commits_gives_the_same_trees() {
    use storefs::ingest::git::{GitImportRequest, KEEP_BLOBS, import_git};
    use storefs::store::Store;
    let env = Env::new();
    let mut repo = Repo::new(env.path("repo"));
    repo.write("d/a.txt", &bytes(1, 5000));
    repo.write("d/b.txt", b"b\n");
    repo.commit("a and b");
    repo.write("d/a.txt", &bytes(2, 5000));
    repo.commit("a changed");
    repo.write("d/a.txt", &bytes(1, 5000));
    repo.commit("a back as it was");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    for i in 0..3 {
        repo.write("feat/f.txt", &bytes(10 + i, 3000));
        repo.commit(&format!("feature {i}"));
    }
    repo.git(&["checkout", "-q", "main"]);
    repo.write("d/b.txt", b"b2\n");
    repo.commit("b changed");
    repo.time += 97;
    repo.git(&["merge", "-q", "--no-ff", "-m", "merge feature", "feature"]);
    let origin = env.path("origin").to_str().unwrap().to_string();
    let import = |keep_blobs: usize, store_dir: PathBuf| {
        let store = Store::open_or_create(&store_dir).unwrap();
        let req = GitImportRequest {
            repo: repo.dir.clone(),
            origin: Some(origin.clone()),
            ref_prefix: Some("r".into()),
            keep_blobs,
            ..GitImportRequest::default()
        };
        let got = import_git(&store, &req).unwrap();
        let roots: Vec<(String, storefs::store::ObjectId)> = got
            .imported
            .iter()
            .map(|(c, ck)| (c.clone(), store.read_checkpoint(ck).unwrap().root))
            .collect();
        (roots, got.blob_bytes)
    };
    let (kept, read_once) = import(KEEP_BLOBS, env.path("kept"));
    let (forgot, read_again) = import(0, env.path("forgot"));
    assert_eq!(kept.len(), repo.all_commits().len());
    assert_eq!(kept, forgot);
    assert!(
        read_again > read_once,
        "{read_again} bytes against {read_once}: no blob was read again"
    );
}

/// Write `data` as a git object of `kind` without git's checks (`hash-object
/// --literally`: a tree may hold names git refuses); its id.
fn put_object(repo: &Path, kind: &str, data: &[u8]) -> String {
    use std::io::Write;
    let mut child = Command::new("git")
        .current_dir(repo)
        .args(["hash-object", "-w", "--literally", "--stdin", "-t", kind])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "git hash-object -t {kind} failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A tree of (mode, name, object id) entries, in the order given.
fn put_tree(repo: &Path, entries: &[(&str, &[u8], &str)]) -> String {
    let mut raw = Vec::new();
    for (mode, name, id) in entries {
        raw.extend_from_slice(mode.as_bytes());
        raw.push(b' ');
        raw.extend_from_slice(name);
        raw.push(0);
        for i in (0..id.len()).step_by(2) {
            raw.push(u8::from_str_radix(&id[i..i + 2], 16).unwrap());
        }
    }
    put_object(repo, "tree", &raw)
}

/// A repository at `env.path(tag)` whose main branch is an ordinary commit
/// and, on it, a commit whose root tree `bad` makes (given the repository, a
/// blob and a tree holding it as `config`); that commit's id.
fn repo_with_bad_commit(
    env: &Env,
    tag: &str,
    bad: impl FnOnce(&Path, &str, &str) -> String,
) -> (PathBuf, String) {
    let r = Repo::new(env.path(tag));
    let dir = r.dir.clone();
    let blob = put_object(
        &dir,
        "blob",
        b"[core]\n\tfsmonitor = touch /tmp/storefs-pwned\n",
    );
    let sub = put_tree(&dir, &[("100644", b"config", &blob)]);
    let good = put_tree(&dir, &[("100644", b"a.txt", &blob)]);
    let first = r
        .git(&["commit-tree", &good, "-m", "good"])
        .trim()
        .to_string();
    let tree = bad(&dir, &blob, &sub);
    let second = r
        .git(&["commit-tree", &tree, "-p", &first, "-m", "bad"])
        .trim()
        .to_string();
    r.git(&["update-ref", "refs/heads/main", &second]);
    (dir, second)
}

/// `import-git` of `repo` fails with one line naming `commit`, `path` and
/// `why`, and publishes nothing (not even the good parent).
fn assert_refused(env: &Env, repo: &Path, commit: &str, path: &str, why: &str) {
    let err = env.fails_in(&env.store, &["import-git", repo.to_str().unwrap()]);
    let want = format!(
        "commit {} has a path git refuses: '{path}' ({why}",
        &commit[..12]
    );
    assert!(err.contains(&want), "want `{want}…`, got: {err}");
    assert!(err.contains("nothing was imported"), "{err}");
    assert_nothing_published(&env.store);
}

/// Issue 38, High 2: a nested `.git` directory (whose config could run a
/// command on `git status` in the mount) is refused as git refuses it.
#[test]
fn a_nested_dot_git_directory_is_refused_with_nothing_published() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    let (repo, c) = repo_with_bad_commit(&env, "dotgit", |dir, blob, sub| {
        let dotgit = put_tree(dir, &[("40000", b".git", sub)]);
        put_tree(
            dir,
            &[("100644", b"a.txt", blob), ("40000", b"sub", &dotgit)],
        )
    });
    assert_refused(&env, &repo, &c, "sub/.git/config", "a .git directory");
    // At the root, and as a file.
    let (repo, c) = repo_with_bad_commit(&env, "dotgit-file", |dir, blob, _| {
        put_tree(dir, &[("100644", b".git", blob)])
    });
    assert_refused(&env, &repo, &c, ".git", "a .git entry");
}

#[test]
fn a_dot_git_in_another_case_is_refused() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    for (i, name) in [&b".GIT"[..], b".Git", ".g\u{200c}it".as_bytes()]
        .into_iter()
        .enumerate()
    {
        let (repo, c) = repo_with_bad_commit(&env, &format!("case{i}"), |dir, _, sub| {
            put_tree(dir, &[("40000", name, sub)])
        });
        let path = format!("{}/config", String::from_utf8_lossy(name));
        assert_refused(&env, &repo, &c, &path, "a spelling of .git");
    }
}

#[test]
fn ntfs_spellings_of_dot_git_are_refused() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    for (i, name) in [
        &b"git~1"[..],
        b"GIT~1",
        b".git.",
        b".git ",
        b".git::$INDEX_ALLOCATION",
    ]
    .into_iter()
    .enumerate()
    {
        let (repo, c) = repo_with_bad_commit(&env, &format!("ntfs{i}"), |dir, _, sub| {
            let inner = put_tree(dir, &[("40000", name, sub)]);
            put_tree(dir, &[("40000", b"d", &inner)])
        });
        let path = format!("d/{}/config", String::from_utf8_lossy(name));
        assert_refused(&env, &repo, &c, &path, "a spelling of .git");
    }
}

#[test]
fn dot_dot_dot_and_empty_names_are_refused() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    let (repo, c) = repo_with_bad_commit(&env, "dotdot", |dir, blob, sub| {
        put_tree(dir, &[("40000", b"..", sub), ("100644", b"a.txt", blob)])
    });
    assert_refused(&env, &repo, &c, "../config", "a '.' or '..' name");
    let (repo, c) = repo_with_bad_commit(&env, "dot", |dir, blob, _| {
        put_tree(dir, &[("100644", b".", blob)])
    });
    assert_refused(&env, &repo, &c, ".", "a '.' or '..' name");
    let (repo, c) = repo_with_bad_commit(&env, "empty", |dir, blob, _| {
        put_tree(dir, &[("100644", b"", blob)])
    });
    assert_refused(&env, &repo, &c, "", "an empty name");
    let (repo, c) = repo_with_bad_commit(&env, "slash", |dir, blob, _| {
        put_tree(dir, &[("100644", b"a/b", blob)])
    });
    assert_refused(&env, &repo, &c, "a/b", "a name holding '/' or NUL");
}

#[test]
fn a_gitmodules_symlink_is_refused() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    for (i, name) in [&b".gitmodules"[..], b".GITMODULES", b"gitmod~1"]
        .into_iter()
        .enumerate()
    {
        let (repo, c) = repo_with_bad_commit(&env, &format!("gm{i}"), |dir, _, _| {
            let target = put_object(dir, "blob", b"/etc/passwd");
            let inner = put_tree(dir, &[("120000", name, &target)]);
            put_tree(dir, &[("40000", b"m", &inner)])
        });
        let path = format!("m/{}", String::from_utf8_lossy(name));
        assert_refused(&env, &repo, &c, &path, "a .gitmodules that is a symlink");
    }
}

/// Names that only look like `.git`: imported, as git checks them out.
#[test]
fn names_near_dot_git_import() {
    treecmp::require_tools(&["git"]);
    let env = Env::new();
    let mut r = Repo::new(env.path("near"));
    r.write(".github/workflows/ci.yml", b"on: push\n");
    r.write(".gitignore", b"target\n");
    r.write(".gitattributes", b"* text=auto\n");
    r.write(".gitmodules", b"");
    r.write("foo.git/HEAD", b"ref: refs/heads/main\n");
    r.write("git~2/x", b"x\n");
    r.write("...", b"dots\n");
    let c = r.commit("near misses");
    let (out, _) = env.ok_in(&env.store, &["import-git", r.dir.to_str().unwrap()]);
    assert_eq!(imported(&out).len(), 1, "{out}");
    let diffs = compare(&r.dir, &env, &c, &env.path("near-scratch"));
    assert!(diffs.is_empty(), "{diffs:#?}");
}

/// `import-git REPO` into a new store `store`: whether it succeeded, its
/// peak resident memory in bytes, and its stderr. A small python3 process
/// starts it and reports `wait4`'s `ru_maxrss`: measured from this test
/// process, the peak would include this process's own memory (the child's
/// memory before its `exec` is counted).
fn import_measured(repo: &Path, store: &Path, origin: &Path) -> (bool, u64, String) {
    const MEASURE: &str = "import os, subprocess, sys\n\
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n\
_, status, ru = os.wait4(p.pid, 0)\n\
print(ru.ru_maxrss, os.waitstatus_to_exitcode(status))\n";
    let out = Command::new("python3")
        .args(["-c", MEASURE])
        .arg(env!("CARGO_BIN_EXE_storefs"))
        .arg("--store")
        .arg(store)
        .args(["import-git", repo.to_str().unwrap(), "--ref-prefix", "r"])
        .arg("--origin")
        .arg(origin)
        .env_remove("STOREFS_STORE")
        .output()
        .expect("python3 runs the import (it measures its memory)");
    let said = String::from_utf8(out.stdout.clone()).unwrap();
    let (kib, code) = said
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("python3 said {said:?}: {}", stderr(&out)));
    (
        code == "0",
        kib.parse::<u64>().unwrap() * 1024,
        stderr(&out),
    )
}

/// Issue 38 ("git blobs streamed"): a blob larger than what import-git reads
/// whole at once is streamed where git keeps it whole — loose, or a pack's
/// base object — so the import's peak memory stays far below the blob's
/// size; where git holds it only as a delta it is read whole (the peak is
/// then above the blob's size, which shows the measure tells them apart).
/// Each time both versions of the file come back byte for byte.
#[test]
fn large_blobs_are_streamed_where_git_keeps_them_whole() {
    // Over what is streamed (16 MiB), far under what is read whole (1 GiB).
    const BIG: usize = 32 << 20;
    let env = Env::new();
    // What an import costs without a large blob.
    let small = Repo::new(env.path("small"));
    small.write("a.txt", b"a\n");
    let mut small = small;
    small.commit("small");
    let (ok, base, err) = import_measured(&small.dir, &env.path("store-small"), &env.path("o"));
    assert!(ok, "import-git of a small repository failed: {err}");
    let mut repo = Repo::new(env.path("repo"));
    let big = bytes(7, BIG);
    let mut big2 = big.clone();
    big2[BIG / 2] ^= 1;
    repo.write("big.bin", &big);
    let c1 = repo.commit("big");
    repo.write("big.bin", &big2);
    let c2 = repo.commit("big changed");
    let deltas = |r: &Repo| {
        r.git(&[
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(deltabase)",
        ])
        .lines()
        .filter(|l| !l.chars().all(|c| c == '0'))
        .count()
    };
    let check = |case: &str, streamed: bool| {
        let store = env.path(&format!("store-{case}"));
        let (ok, peak, err) = import_measured(&repo.dir, &store, &env.path("origin"));
        assert!(ok, "{case}: import-git failed: {err}");
        for (commit, want) in [(&c1, &big), (&c2, &big2)] {
            let short = &commit[..12];
            let out = Command::new(env!("CARGO_BIN_EXE_storefs"))
                .arg("--store")
                .arg(&store)
                .args(["cat", &format!("git:{commit}"), "big.bin"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{case}: cat: {}", stderr(&out));
            assert!(out.stdout == *want, "{case}: big.bin of {short} differs");
        }
        let (mib, base_mib) = (peak >> 20, base >> 20);
        if streamed {
            assert!(
                peak < base + (BIG as u64) / 2,
                "{case}: the import peaked at {mib} MiB for a {} MiB blob ({base_mib} MiB without it)",
                BIG >> 20
            );
        } else {
            assert!(
                peak > base + BIG as u64,
                "{case}: read whole, yet the import peaked at only {mib} MiB ({base_mib} MiB without it)"
            );
        }
    };
    // git add leaves loose objects.
    assert_eq!(deltas(&repo), 0);
    check("loose", true);
    // Packed, each version whole (over core.bigFileThreshold: no deltas).
    repo.git(&[
        "-c",
        "core.bigFileThreshold=1m",
        "repack",
        "-q",
        "-a",
        "-d",
        "-F",
    ]);
    repo.git(&["prune-packed"]);
    assert_eq!(deltas(&repo), 0);
    check("packed", true);
    // Packed with one version a delta of the other: read whole.
    repo.git(&[
        "-c",
        "core.bigFileThreshold=1g",
        "repack",
        "-q",
        "-a",
        "-d",
        "-F",
    ]);
    assert!(deltas(&repo) > 0, "git made no delta");
    check("delta", false);
}
