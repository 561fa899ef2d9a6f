#!/usr/bin/env python3
"""What `storefs run` costs to start and end (issue 39), beside a plain fork
mount, in one run on this machine.

    python3 bench/run_startup.py --storefs BIN [--before BIN] [--rounds N] [--out DIR]

On a small agent store (a few hundred files) with its origin missing on the
host, each round times:

  run: CMD started   from `storefs run s1 --fork rN -- sh -c 'date +%s.%N'`
                     being launched to CMD printing the time
  run: whole         the same command's wall time: fork, namespaces, daemon,
                     CMD, commit (nothing changed: none), teardown
  mount + umount     `storefs fork` + `storefs mount FORK DIR` + `storefs umount`
                     (the plain way to the same fork, at a mountpoint)
  sh -c true         the floor: starting a shell at all

Prints a markdown table (median seconds, and each row's ratio to
`mount + umount`) and writes it to --out (default bench/results/) as
<date>-run-startup.md. `--before BIN` adds the mount + umount row of another
binary (one without `run` has no run rows). Needs root. Timing is for people;
no test asserts on it.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def make_store(binary, top):
    origin = os.path.join(top, "srv", "_lead_sessions", "s1")
    os.makedirs(os.path.join(origin, "state"))
    for i in range(300):
        with open(os.path.join(origin, "state", f"f{i}.json"), "w") as f:
            f.write('{"i": %d}\n' % i)
    with open(os.path.join(origin, "history.jsonl"), "w") as f:
        f.write('{"turn":0}\n' * 1000)
    store = os.path.join(top, "store")
    sh(binary, "--store", store, "snapshot", origin, "--ref", "s1")
    shutil.rmtree(os.path.join(top, "srv"))
    return store


def time_run(binary, store, name):
    t0 = time.time()
    out = sh(binary, "--store", store, "run", "s1", "--fork", name, "--",
             "sh", "-c", "date +%s.%N")
    t1 = time.time()
    return float(out.stdout.strip()) - t0, t1 - t0


def time_mount(binary, store, name, top):
    mp = os.path.join(top, "mnt-" + name)
    os.mkdir(mp)
    t0 = time.time()
    sh(binary, "--store", store, "fork", "s1", "--name", name)
    sh(binary, "--store", store, "mount", name, mp)
    sh(binary, "--store", store, "umount", mp)
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--storefs", required=True)
    ap.add_argument("--before")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    a = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="storefs-bench-run.") as top:
        store = make_store(a.storefs, top)
        started, whole, mount = [], [], []
        for i in range(a.rounds):
            s, w = time_run(a.storefs, store, f"r{i}")
            started.append(s)
            whole.append(w)
            mount.append(time_mount(a.storefs, store, f"m{i}", top))
        rows["run: CMD started"] = started
        rows["run: whole"] = whole
        rows["mount + umount"] = mount
        if a.before:
            bstore = make_store(a.before, os.path.join(top, "before"))
            rows["mount + umount (--before)"] = [
                time_mount(a.before, bstore, f"b{i}", top) for i in range(a.rounds)
            ]
        floor = []
        for _ in range(a.rounds):
            t0 = time.time()
            sh("sh", "-c", "true")
            floor.append(time.time() - t0)
        rows["sh -c true"] = floor
    base = statistics.median(rows["mount + umount"])
    stamp = time.strftime("%Y-%m-%d-%H%M")
    lines = [
        f"# storefs run start-up, {stamp} (`{os.uname().nodename}`, {os.cpu_count()} CPUs, "
        f"{a.rounds} rounds, median)",
        "",
        f"binary: `{a.storefs}`" + (f"; before: `{a.before}`" if a.before else ""),
        "",
        "| what | seconds | / mount + umount |",
        "|---|---|---|",
    ]
    for k, v in rows.items():
        m = statistics.median(v)
        lines.append(f"| {k} | {m:.3f} | {m / base:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{stamp}-run-startup.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
