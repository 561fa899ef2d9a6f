#!/usr/bin/env python3
"""Scale of `storefs snapshot` (issue 17): repeated and incremental snapshots.

Two cases, each measured with the binary under test (--storefs) and the one
before the change (--before, default /tmp/storefs-new):

1. A loop of 1,000 snapshots of a 200-file tree, 1-3 files changed before
   each (the same changes for every tool): the median time per snapshot over
   the first 100 and the last 100, against `git add -A && git commit` of the
   same changes (the git directory outside the tree).
2. A 303,000-entry tree of small files (3,000 directories of 100 files):
   the first snapshot against `tar -cf - | zstd -T0 -3`, then a second
   snapshot after 10 files changed (three rounds, best of 3): time and peak
   RSS, and its time against a walk that only lstats every entry
   (`find -printf` of inode, size, mtime and ctime: what a snapshot that
   reads no file cannot go below).

`--quick` is 10x smaller (100 snapshots of a 20-file tree; 30,300 entries);
`--only big` or `--only loop` runs one case.
Prints a markdown table "case | before/anchor | storefs | ratio".
Warm page cache throughout; python3 stdlib only; runs as any user.
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import peak_run  # noqa: E402


def run(cmd, peak=False, **kw):
    """Run `cmd`; (seconds, peak RSS of the command in MiB when `peak`, else
    0). The peak goes through common.peak_run: a direct child's ru_maxrss
    counts this script's own RSS too (it did until 2026-12-05)."""
    if peak:
        secs, mib, rc, err = peak_run(cmd, **kw)
    else:
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
        secs, mib, rc, err = time.perf_counter() - t0, 0.0, p.returncode, p.stderr.decode(errors="replace")
    if rc != 0:
        sys.exit(f"{cmd!r} failed ({rc}): {err}")
    return secs, mib


def shell(script, **kw):
    return run(["bash", "-c", "set -o pipefail; " + script], **kw)


def snapshot(binary, store, tree, ref, peak=False):
    return run([binary, "--store", store, "snapshot", tree, "--ref", ref], peak=peak)


def write_file(path, rng, lo=200, hi=2000):
    n = rng.randint(lo, hi)
    with open(path, "wb") as f:
        f.write(rng.randbytes(n // 2).hex().encode()[:n])


def loop_case(tools, tmp, files, rounds):
    """Median seconds per snapshot, first and last 100 (or tenth), per tool."""
    rng = random.Random(17)
    tree = os.path.join(tmp, "loop-tree")
    os.makedirs(tree)
    names = []
    for i in range(files):
        d = os.path.join(tree, f"d{i % 10}")
        os.makedirs(d, exist_ok=True)
        names.append(os.path.join(d, f"f{i:04}.json"))
        write_file(names[-1], rng)
    gitdir = os.path.join(tmp, "loop.git")
    git = ["git", f"--git-dir={gitdir}", f"--work-tree={tree}"]
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
               GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    subprocess.run(git[:2] + ["init", "-q", gitdir], check=True, env=env)
    commit = " ".join(git) + " add -A && " + " ".join(git) + " commit -q -m x"
    times = {name: [] for name in tools}
    times["git"] = []
    for r in range(rounds + 1):
        if r:
            for path in rng.sample(names, rng.randint(1, 3)):
                write_file(path, rng)
        for name, binary in tools.items():
            secs, _ = snapshot(binary, os.path.join(tmp, f"loop-{name}"), tree, "loop")
            if r:
                times[name].append(secs)
        secs, _ = shell(commit, env=env)
        if r:
            times["git"].append(secs)
    k = max(rounds // 10, 1)
    return {
        name: (statistics.median(t[:k]), statistics.median(t[-k:]))
        for name, t in times.items()
    }, k


def big_case(tools, tmp, dirs, per_dir):
    rng = random.Random(3)
    tree = os.path.join(tmp, "big-tree")
    for d in range(dirs):
        dd = os.path.join(tree, f"{d:04}")
        os.makedirs(dd)
        for f in range(per_dir):
            with open(os.path.join(dd, f"{f:03}.txt"), "wb") as out:
                out.write(b"entry %d/%d %s\n" % (d, f, rng.randbytes(8).hex().encode()))
    entries = dirs * (per_dir + 1) + 1
    out = {"entries": entries}
    out["tar"] = shell(f"tar -C {tree} -cf - . | zstd -q -T0 -3 > /dev/null")
    for name, binary in tools.items():
        out[f"first-{name}"] = snapshot(binary, os.path.join(tmp, f"big-{name}"), tree, "big", peak=True)
    find = f"find {tree} -printf '%i %s %T@ %C@\\n' > /dev/null"
    for r in range(3):
        for i in range(10):
            path = os.path.join(tree, f"{rng.randrange(dirs):04}", f"{rng.randrange(per_dir):03}.txt")
            with open(path, "ab") as f:
                f.write(b"changed %d/%d\n" % (r, i))
        for name, binary in tools.items():
            t = snapshot(binary, os.path.join(tmp, f"big-{name}"), tree, "big", peak=True)
            best = out.get(f"second-{name}")
            out[f"second-{name}"] = t if best is None else (min(best[0], t[0]), max(best[1], t[1]))
        t = shell(find)[0]
        out["find"] = min(out.get("find", t), t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storefs", required=True, help="the storefs binary to measure")
    ap.add_argument("--before", default="/tmp/storefs-new", help="the binary before the change")
    ap.add_argument("--quick", action="store_true", help="a 10x smaller run")
    ap.add_argument("--only", choices=["loop", "big"], help="run one case")
    a = ap.parse_args()
    tools = {"before": os.path.abspath(a.before), "storefs": os.path.abspath(a.storefs)}
    rounds, files = (100, 20) if a.quick else (1000, 200)
    dirs, per_dir = (300, 100) if a.quick else (3000, 100)

    tmp = tempfile.mkdtemp(prefix="storefs-scale-snapshot-")
    try:
        loop, k = loop_case(tools, tmp, files, rounds) if a.only != "big" else (None, 0)
        big = big_case(tools, tmp, dirs, per_dir) if a.only != "loop" else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = []
    if loop:
        rows += loop_rows(loop, k, rounds, files)
    if big:
        rows += big_rows(big)
    print("| case | before/anchor | storefs | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def ms(s):
    return f"{s * 1000:.1f} ms"


def ratio(a, b):
    return f"{b / a:.2f}x"


def loop_rows(loop, k, rounds, files):
    (bf, bl), (sf, sl), (gf, gl) = loop["before"], loop["storefs"], loop["git"]
    loop_name = f"loop of {rounds} snapshots of {files} files"
    return [
        (f"{loop_name}: median of the first {k}", ms(bf), ms(sf), ratio(bf, sf)),
        (f"{loop_name}: median of the last {k}", ms(bl), ms(sl), ratio(bl, sl)),
        (f"{loop_name}: last {k} / first {k}", f"{bl / bf:.2f}x", f"{sl / sf:.2f}x", "-"),
        (f"{loop_name}: first {k}, anchor git add -A && git commit", ms(gf), ms(sf), ratio(gf, sf)),
        (f"{loop_name}: last {k}, anchor git add -A && git commit", ms(gl), ms(sl), ratio(gl, sl)),
    ]


def big_rows(big):
    n = big["entries"]
    tar_s = big["tar"][0]
    (b1, b1_rss), (s1, s1_rss) = big["first-before"], big["first-storefs"]
    (b2, b2_rss), (s2, s2_rss) = big["second-before"], big["second-storefs"]
    big_name = f"{n:,}-entry tree"
    find = big["find"]
    return [
        (f"{big_name}: first snapshot, anchor tar \\| zstd -T0 -3", f"{tar_s:.2f} s", f"{s1:.2f} s", ratio(tar_s, s1)),
        (f"{big_name}: first snapshot", f"{b1:.2f} s", f"{s1:.2f} s", ratio(b1, s1)),
        (f"{big_name}: second snapshot, 10 files changed (best of 3)", f"{b2:.2f} s", f"{s2:.2f} s", ratio(b2, s2)),
        (f"{big_name}: second snapshot, anchor find -printf (lstat of every entry)", f"{find:.2f} s", f"{s2:.2f} s", ratio(find, s2)),
        (f"{big_name}: second snapshot, peak RSS", f"{b2_rss:.0f} MiB", f"{s2_rss:.0f} MiB", ratio(b2_rss, s2_rss)),
        (f"{big_name}: first snapshot, peak RSS", f"{b1_rss:.0f} MiB", f"{s1_rss:.0f} MiB", ratio(b1_rss, s1_rss)),
    ]


if __name__ == "__main__":
    main()
