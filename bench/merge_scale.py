#!/usr/bin/env python3
"""What `storefs merge` costs on a large tree (issue 42: "a merge of two
branches of a 300k-entry tree that each changed 10 files takes under 1 s").

    python3 bench/merge_scale.py --storefs BIN [--before BIN] [--dirs N] [--files N]
                                 [--rounds N] [--out DIR]

Builds a store of one snapshot of DIRS directories of FILES small files each
(default 300 x 1000: 300,301 entries with the root and the directories), and
two pairs of forks of it that each change 10 files (written through a fork
mount, committed at unmount): A and B in 10 directories each, apart
(d000-d009, d100-d109); C and D different files of the same 10 directories
(d200-d209: those directories changed on both sides, so their trees of
1000 entries are read and merged). Then times `storefs merge A B --ref mN
--json` and `storefs merge C D …` ROUNDS times each (a new ref each round).
`trees_read` is the merge's own count of the trees it read (from `--json`):
the directories on the paths to what both sides changed, not the tree's
300 directories. `--before BIN` times another binary's merge of the same
forks, side by side.

Prints a markdown table (median, min and max seconds) and writes it to --out
(default bench/results/) as <date>-merge-scale.md. Needs root (fork
mounts). Scratch under /tmp/storefs-co-bench.*. Timing is for people; no
test asserts on it.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def make_tree(origin, dirs, files):
    for d in range(dirs):
        p = os.path.join(origin, f"d{d:03d}")
        os.makedirs(p)
        for f in range(files):
            with open(os.path.join(p, f"f{f:04d}.txt"), "w") as fh:
                fh.write(f"dir {d} file {f}\n")


def change(binary, store, fork, top, dirs_from, file=0):
    """Fork s1 as `fork`, change 10 files (file number `file` in each of 10
    directories from `dirs_from`) through a mount, commit at unmount."""
    sh(binary, "--store", store, "fork", "s1", "--name", fork)
    mp = os.path.join(top, "mnt-" + fork)
    os.mkdir(mp)
    sh(binary, "--store", store, "mount", fork, mp)
    try:
        for d in range(dirs_from, dirs_from + 10):
            with open(os.path.join(mp, f"d{d:03d}", f"f{file:04d}.txt"), "a") as fh:
                fh.write(f"changed by {fork}\n")
    finally:
        sh(binary, "--store", store, "umount", mp)


def time_merge(binary, store, a, b, ref):
    t0 = time.perf_counter()
    out = sh(binary, "--store", store, "merge", a, b, "--ref", ref, "--json")
    took = time.perf_counter() - t0
    return took, json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--storefs", required=True)
    ap.add_argument("--before")
    ap.add_argument("--dirs", type=int, default=300)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args()
    if a.dirs < 210 or a.files < 2:
        sys.exit("--dirs must be at least 210 and --files 2 (the forks change files in d000-d009, d100-d109, d200-d209)")
    entries = a.dirs * a.files + a.dirs + 1
    rows = {}
    setup = {}
    with tempfile.TemporaryDirectory(prefix="storefs-co-bench.", dir="/tmp") as top:
        origin = os.path.join(top, "origin")
        t0 = time.perf_counter()
        make_tree(origin, a.dirs, a.files)
        setup["write the tree"] = time.perf_counter() - t0
        store = os.path.join(top, "store")
        t0 = time.perf_counter()
        sh(a.storefs, "--store", store, "snapshot", origin, "--ref", "s1")
        setup["snapshot"] = time.perf_counter() - t0
        shutil.rmtree(origin)
        t0 = time.perf_counter()
        change(a.storefs, store, "A", top, 0)
        change(a.storefs, store, "B", top, 100)
        change(a.storefs, store, "C", top, 200, 0)
        change(a.storefs, store, "D", top, 200, 1)
        setup["four forks, 10 files each, committed"] = time.perf_counter() - t0
        runs = [
            ("merge A B (apart)", a.storefs, "A", "B", "m"),
            ("merge C D (same directories)", a.storefs, "C", "D", "n"),
        ]
        if a.before:
            runs += [
                ("merge A B (apart, --before)", a.before, "A", "B", "bm"),
                ("merge C D (same directories, --before)", a.before, "C", "D", "bn"),
            ]
        trees = {}
        for label, binary, x, y, prefix in runs:
            times = []
            for i in range(a.rounds):
                took, out = time_merge(binary, store, x, y, f"{prefix}{i}")
                times.append(took)
                trees[label] = (out.get("trees_read"), out.get("result"), len(out.get("conflicts", [])))
            rows[label] = times
    stamp = time.strftime("%Y-%m-%d-%H%M")
    lines = [
        f"# storefs merge at scale, {stamp} (`{os.uname().nodename}`, {os.cpu_count()} CPUs, "
        f"{a.rounds} rounds)",
        "",
        f"binary: `{a.storefs}`" + (f"; before: `{a.before}`" if a.before else ""),
        "",
        f"One snapshot of {a.dirs} directories x {a.files} files ({entries:,} entries); forks "
        "each changed 10 files, committed: A and B one file in each of 10 directories of their "
        "own (apart), C and D different files of the same 10 directories. "
        "`storefs merge X Y --ref NAME --json`, wall time of the whole command (process start, "
        "store open, merge base, merge, checkpoint written, ref set).",
        "",
        "| what | median s | min s | max s | trees_read | result | conflicts |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, v in rows.items():
        t, result, conflicts = trees[k]
        lines.append(
            f"| {k} | {statistics.median(v):.3f} | {min(v):.3f} | {max(v):.3f} | {t} | {result} | {conflicts} |"
        )
    lines += ["", "Setup (once, for reference):", ""]
    for k, v in setup.items():
        lines.append(f"- {k}: {v:.1f} s")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{stamp}-merge-scale.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
