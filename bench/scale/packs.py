#!/usr/bin/env python3
"""Scale of the pack layer (issue 17, parts 2 and 6): storefs before (main) and
after (this branch) on

1. a loop of N snapshots of a 200-file tree with 1-3 files changed each time:
   per-snapshot median of the first and the last tenth (anchor: the same loop
   as `git add -A && git commit`);
2. the RSS of a fresh read-only mount of a store holding about 300,000 small
   objects, before any read;
3. the time `storefs umount` takes for a read-only and a browse mount.

Usage: bench/scale/packs.py --storefs target/release/storefs [--before /tmp/storefs-new] [--quick]
--quick is ten times smaller. Timing is for humans; nothing asserts on it.
Prints a markdown table: case | before/anchor | storefs | ratio.
"""

import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import change, make_tree, many_objects_tree, status_kib, unmount  # noqa: E402


def run(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def timed(args, **kw):
    t = time.perf_counter()
    run(args, **kw)
    return time.perf_counter() - t


def snapshot_loop(tmp, bin_, n, files):
    """Per-snapshot seconds of `n` snapshots, each after 1-3 changed files."""
    src = os.path.join(tmp, "src")
    store = os.path.join(tmp, "store")
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
    make_tree(src, files, 1)
    rnd = random.Random(2)
    times = []
    for step in range(n):
        change(src, files, rnd, step)
        times.append(timed([bin_, "--store", store, "snapshot", src, "--ref", "s"]))
    shutil.rmtree(store, ignore_errors=True)
    return times


def git_loop(tmp, n, files):
    src = os.path.join(tmp, "gsrc")
    shutil.rmtree(src, ignore_errors=True)
    make_tree(src, files, 1)
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b")
    run(["git", "init", "-q", src], env=env)
    rnd = random.Random(2)
    times = []
    for step in range(n):
        change(src, files, rnd, step)
        t = time.perf_counter()
        run(["git", "-C", src, "add", "-A"], env=env)
        run(["git", "-C", src, "commit", "-q", "-m", f"s{step}"], env=env)
        times.append(time.perf_counter() - t)
    shutil.rmtree(src, ignore_errors=True)
    return times


def daemon_pid(store):
    for rec in glob.glob(os.path.join(store, "mounts", "*.json")):
        with open(rec) as f:
            return json.load(f)["pid"]
    raise SystemExit(f"no mount record in {store}/mounts")


def rss_kib(pid):
    return status_kib(pid, "VmRSS")


def mount_rss(tmp, bin_, src):
    """RSS (KiB) of a fresh read-only mount's daemon before any read, and the
    seconds `storefs umount` took for it."""
    store = os.path.join(tmp, "big-store")
    mp = os.path.join(tmp, "mp")
    shutil.rmtree(store, ignore_errors=True)
    os.makedirs(mp, exist_ok=True)
    run([bin_, "--store", store, "snapshot", src, "--ref", "big"])
    try:
        run([bin_, "--store", store, "mount", "big", mp])
        time.sleep(0.5)
        rss = rss_kib(daemon_pid(store))
        took = timed([bin_, "--store", store, "umount", mp])
    finally:
        unmount(bin_, store, mp)
        shutil.rmtree(store, ignore_errors=True)
    return rss, took


def umount_times(tmp, bin_, rounds):
    """Median seconds of `storefs umount` of a read-only and of a browse mount."""
    store = os.path.join(tmp, "u-store")
    src = os.path.join(tmp, "u-src")
    mp = os.path.join(tmp, "u-mp")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(mp, exist_ok=True)
    make_tree(src, 20, 3)
    run([bin_, "--store", store, "snapshot", src, "--ref", "u"])
    out = {}
    try:
        for case, args in (("ro", ["mount", "u", mp]), ("browse", ["mount", "--browse", mp])):
            ts = []
            for _ in range(rounds):
                run([bin_, "--store", store] + args)
                os.listdir(mp)
                ts.append(timed([bin_, "--store", store, "umount", mp]))
            out[case] = statistics.median(ts)
    finally:
        unmount(bin_, store, mp)
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storefs", required=True, help="storefs binary to measure (after)")
    ap.add_argument("--before", default="/tmp/storefs-new", help="storefs binary of main (before)")
    ap.add_argument("--quick", action="store_true", help="ten times smaller")
    ap.add_argument("--skip-rss", action="store_true", help="leave out the 300k-object mount")
    a = ap.parse_args()
    after = os.path.abspath(a.storefs)
    before = os.path.abspath(a.before)
    n = 100 if a.quick else 1000
    tenth = n // 10
    big = 30_000 if a.quick else 300_000
    rows = []

    def med(ts, part):
        return statistics.median(ts[:tenth] if part == "first" else ts[-tenth:])

    with tempfile.TemporaryDirectory(prefix="storefs-packs-") as tmp:
        git = git_loop(tmp, n, 200)
        res = {}
        for label, b in (("before", before), ("after", after)):
            res[label] = snapshot_loop(tmp, b, n, 200)
        for part in ("first", "last"):
            g = med(git, part)
            for label in ("before", "after"):
                s = med(res[label], part)
                rows.append((f"snapshot #{part} {tenth} of {n} ({label}), ms", f"git {g * 1e3:.1f}",
                             f"{s * 1e3:.1f}", s / g))
        for label in ("before", "after"):
            f, l = med(res[label], "first"), med(res[label], "last")
            rows.append((f"snapshot last/first median ({label})", f"{f * 1e3:.1f} ms", f"{l * 1e3:.1f} ms", l / f))

        um = {label: umount_times(tmp, b, 5 if a.quick else 9) for label, b in (("before", before), ("after", after))}
        for case in ("ro", "browse"):
            b, s = um["before"][case], um["after"][case]
            rows.append((f"umount of a {case} mount, s", f"{b:.3f}", f"{s:.3f}", s / b))

        if not a.skip_rss:
            src = os.path.join(tmp, "many")
            many_objects_tree(src, big)
            rb, tb = mount_rss(tmp, before, src)
            ra, ta = mount_rss(tmp, after, src)
            rows.append((f"RSS of a ro mount of {big} small objects, MiB", f"{rb / 1024:.1f}", f"{ra / 1024:.1f}",
                         ra / rb))
            rows.append((f"umount of that mount, s", f"{tb:.3f}", f"{ta:.3f}", ta / tb))

    print("| case | before/anchor | storefs | ratio |")
    print("|---|---:|---:|---:|")
    for case, b, s, r in rows:
        print(f"| {case} | {b} | {s} | {r:.2f} |")


if __name__ == "__main__":
    main()
