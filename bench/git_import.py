#!/usr/bin/env python3
"""Import speed of `storefs import-git` (issue 20) against `git archive COMMIT |
tar -x` of every commit, on the same repository.

    python3 bench/git_import.py [--commits 300] [--files 1000] [--rounds 2]
                                [--storefs BIN] [--no-build] [--keep DIR]

Makes a repository with the git CLI (`git fast-import`, so building it is quick):
a shared root of FILES files in 40 directories (JSON-like state of 200 B to
20 KB, two 1 MiB files, one executable, a symlink), then COMMITS commits that each change 1 to 8
files (a research harness's checkpoints of its shared root). Then, best of
ROUNDS, interleaved:

- `storefs import-git REPO` into an empty store (every commit);
- `git archive C | tar -x` of every commit C into an empty directory (removed
  between commits, outside the timing), the same trees as files on disk;
- a second `import-git` after 10 more commits (incremental), and one with
  nothing new.

Bytes are the file bytes of every commit's tree added up (`git ls-tree -r -l`),
the same for both sides. Prints a markdown table and writes it to
bench/results/<date>-git-import.md. Timing is for humans; no test asserts on it.
"""
import argparse
import datetime
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIT_ENV = dict(
    os.environ,
    GIT_CONFIG_GLOBAL="/dev/null",
    GIT_CONFIG_NOSYSTEM="1",
    GIT_AUTHOR_NAME="bench",
    GIT_AUTHOR_EMAIL="bench@example.com",
    GIT_COMMITTER_NAME="bench",
    GIT_COMMITTER_EMAIL="bench@example.com",
)


def git(repo, *args, **kw):
    return subprocess.run(["git", "-C", repo, *args], check=True, env=GIT_ENV, **kw)


def content(rng, size):
    words = [b'"step"', b'"loss"', b"0.125", b'"agent"', b"{", b"}", b"[", b"]", b"\n"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def make_repo(path, files, commits, seed=20):
    """A repository whose history is `commits` commits; returns its path."""
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    rng = random.Random(seed)
    names = [f"d{i % 40:02d}/state-{i:05d}.json" for i in range(files)]
    sizes = {n: rng.choice([200, 800, 2_000, 6_000, 20_000]) for n in names}
    for n in names[:2]:
        sizes[n] = 1 << 20
    stream = []
    t = 1_700_000_000
    mark = 0
    for c in range(commits):
        t += 60
        lines = [
            b"commit refs/heads/main\n",
            f"committer bench <bench@example.com> {t} +0000\n".encode(),
        ]
        msg = f"attempt {c}\n".encode()
        lines += [f"data {len(msg)}\n".encode(), msg]
        changed = names if c == 0 else rng.sample(names, rng.randint(1, 8))
        blobs = []
        for n in changed:
            mark += 1
            size = sizes[n] if c == 0 else max(100, sizes[n] + rng.randint(-100, 100))
            data = content(rng, size)
            blobs.append(b"blob\n" + f"mark :{mark}\ndata {len(data)}\n".encode() + data + b"\n")
            lines.append(f"M 100644 :{mark} {n}\n".encode())
        if c == 0:
            mark += 1
            tool = b"#!/bin/sh\necho run\n"
            blobs.append(b"blob\n" + f"mark :{mark}\ndata {len(tool)}\n".encode() + tool + b"\n")
            lines.append(f"M 100755 :{mark} bin/run.sh\n".encode())
            lines.append(b"M 120000 inline latest.json\n")
            target = names[5].encode()
            lines.append(f"data {len(target)}\n".encode() + target + b"\n")
        stream += blobs + lines + [b"\n"]
    subprocess.run(
        ["git", "-C", path, "fast-import", "--quiet"],
        input=b"".join(stream),
        check=True,
        env=GIT_ENV,
    )
    git(path, "reset", "-q", "--hard", "main")
    return path


def tree_bytes(repo, commits):
    total = 0
    for c in commits:
        out = git(repo, "ls-tree", "-r", "-l", c, capture_output=True).stdout.decode()
        for line in out.splitlines():
            size = line.split()[3]
            if size != "-":
                total += int(size)
    return total


def storefs_import(bin_, store, repo):
    shutil.rmtree(store, ignore_errors=True)
    t = time.perf_counter()
    subprocess.run([bin_, "--store", store, "import-git", repo], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def archive_all(repo, commits, scratch):
    total = 0.0
    for c in commits:
        os.makedirs(scratch)
        t = time.perf_counter()
        subprocess.run(
            f"git -C '{repo}' archive {c} | tar -x -C '{scratch}'",
            shell=True, check=True, env=GIT_ENV,
        )
        total += time.perf_counter() - t
        shutil.rmtree(scratch)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", type=int, default=300)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--storefs", default=os.environ.get(
        "STOREFS_BIN", os.path.join(ROOT, "target", "release", "storefs")))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep", help="work in this directory and keep it")
    a = ap.parse_args()
    if not a.no_build and "STOREFS_BIN" not in os.environ and a.storefs.startswith(ROOT):
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    work = a.keep or tempfile.mkdtemp(prefix="i20-gitbench-")
    os.makedirs(work, exist_ok=True)
    try:
        repo = os.path.join(work, "shared")
        if not os.path.isdir(repo):
            t = time.perf_counter()
            make_repo(repo, a.files, a.commits)
            print(f"made {repo} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        commits = git(repo, "rev-list", "main", capture_output=True).stdout.decode().split()
        nbytes = tree_bytes(repo, commits)
        store = os.path.join(work, "store")
        scratch = os.path.join(work, "scratch")
        imp, arc = [], []
        for _ in range(a.rounds):
            imp.append(storefs_import(a.storefs, store, repo))
            arc.append(archive_all(repo, commits, scratch))
        imp_t, arc_t = min(imp), min(arc)
        # Incremental (one run each): 10 more commits, then nothing new.
        head = git(repo, "rev-parse", "HEAD", capture_output=True).stdout.decode().strip()
        for i in range(10):
            with open(os.path.join(repo, "d00", "state-00000.json"), "a") as f:
                f.write(f"more {i}\n")
            git(repo, "commit", "-q", "-am", f"more {i}")
        t = time.perf_counter()
        subprocess.run([a.storefs, "--store", store, "import-git", repo], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        inc_t = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run([a.storefs, "--store", store, "import-git", repo], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        none_t = time.perf_counter() - t
        git(repo, "reset", "-q", "--hard", head)
        git(repo, "reflog", "expire", "--expire=now", "--all")
        git_size = int(subprocess.run(["du", "-sb", os.path.join(repo, ".git")],
                                      capture_output=True, check=True).stdout.split()[0])
        store_size = int(subprocess.run(["du", "-sb", store],
                                        capture_output=True, check=True).stdout.split()[0])
        n = len(commits)
        mib = nbytes / (1 << 20)
        rows = [
            "| what | seconds | commits/s | MiB/s of tree bytes |",
            "|---|---|---|---|",
            f"| `storefs import-git` (all {n} commits, empty store) | {imp_t:.2f} | {n / imp_t:.1f} | {mib / imp_t:.0f} |",
            f"| `git archive C \\| tar -x` of every commit | {arc_t:.2f} | {n / arc_t:.1f} | {mib / arc_t:.0f} |",
            f"| ratio import / archive | {imp_t / arc_t:.3f}x | | |",
            f"| `import-git` after 10 more commits | {inc_t:.2f} | {10 / inc_t:.1f} | |",
            f"| `import-git` with nothing new | {none_t:.2f} | | |",
        ]
        head_line = (
            f"Repository: {n} commits, {a.files} files (+ an executable and a symlink) in 40 "
            f"directories, 1-8 files changed a commit; {mib:.0f} MiB of tree bytes over all "
            f"commits; .git {git_size / (1 << 20):.1f} MiB, store after import "
            f"{store_size / (1 << 20):.1f} MiB. Best of {a.rounds}, interleaved; "
            f"{os.cpu_count()} CPUs; {a.storefs}."
        )
        text = "\n".join([f"# git import, {datetime.datetime.now():%Y-%m-%d %H:%M}", "",
                          head_line, ""] + rows) + "\n"
        print(text)
        out = os.path.join(ROOT, "bench", "results",
                           f"{datetime.datetime.now():%Y-%m-%d-%H%M}-git-import.md")
        with open(out, "w") as f:
            f.write(text)
        print(f"wrote {out}", file=sys.stderr)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
