#!/usr/bin/env python3
"""Fork-mount write timings against the native disk (the two write workloads
of bench.py plus temp+rename), on a small temp store. Best of N, ratios.

    python3 bench/forkwrite.py [--rounds 3] [--no-build] [--keep-mounted] [--mount-args=ARGS]

Builds release first unless --no-build. Prints one line per workload:
native seconds, storefs seconds, ratio. Timing is for humans; never assert on it.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench import small_appends, temp_renames, write_fsync  # noqa: E402  (the same workloads as bench.py)
S = os.environ.get("STOREFS_BIN", os.path.join(ROOT, "target", "release", "storefs"))


def sh(args, **kw):
    return subprocess.run(args, check=True, **kw)


DAEMON = {"pid": None, "cpu": {}}


def cpu_seconds(pid):
    """User + system CPU of a process so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def best(fn, rounds, label=None):
    """Best wall time of `rounds` runs; with a daemon, also its CPU per run."""
    times = []
    pid = DAEMON["pid"] if label else None
    c0 = cpu_seconds(pid) if pid else 0
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    if pid:
        per = (cpu_seconds(pid) - c0) / rounds
        DAEMON["cpu"][label] = min(DAEMON["cpu"].get(label, per), per)
    return min(times)


ONLY = set()


def workloads(root, rounds, mib, daemon=False):
    out = {}
    big = os.path.join(root, "big-write")

    k = f"{mib} MiB write + fsync"
    if not ONLY or "dd" in ONLY:
        out[k] = best(lambda: write_fsync(big, mib), rounds, daemon and k)
        os.unlink(big)
    log = os.path.join(root, "lead", "sessions", "appends.jsonl")
    k = "1000 small appends"
    if not ONLY or "append" in ONLY:
        out[k] = best(lambda: small_appends(log), rounds, daemon and k)
    k = "1000 temp+rename"
    if not ONLY or "rename" in ONLY:
        out[k] = best(lambda: temp_renames(os.path.join(root, "state")), rounds, daemon and k)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--keep-mounted", action="store_true",
                    help="print the mount point and pid, wait for Enter before unmounting")
    ap.add_argument("--mount-args", default="",
                    help="space-separated arguments added to the fork's mount (e.g. --writeback-cache)")
    ap.add_argument("--only", action="append", choices=["dd", "append", "rename"], default=[],
                    help="run only these workloads (may repeat)")
    a = ap.parse_args()
    ONLY.update(a.only)
    if not a.no_build:
        sh(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    # Same disk as the store for the native side.
    work = tempfile.mkdtemp(prefix="forkwrite-", dir=os.environ.get("FORKWRITE_DIR", "/var/tmp"))
    store, src, mp, native = (os.path.join(work, d) for d in ("store", "src", "mnt", "native"))
    mounted = False
    try:
        for d in (os.path.join(src, "lead", "sessions"), mp):
            os.makedirs(d)
        for i in range(20):
            with open(os.path.join(src, "lead", f"f{i}.txt"), "w") as f:
                f.write("x" * (100 * i))
        with open(os.path.join(src, "lead", "sessions", "appends.jsonl"), "w") as f:
            f.write('{"seq": -1}\n')
        shutil.copytree(src, native)
        sh([S, "--store", store, "init"], stdout=subprocess.DEVNULL)
        sh([S, "--store", store, "snapshot", src, "--ref", "base"],
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sh([S, "--store", store, "fork", "base", "--name", "f"],
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sh([S, "--store", store, "mount", "f", mp, *a.mount_args.split()], stdout=subprocess.DEVNULL,
           stderr=subprocess.DEVNULL)
        mounted = True
        import json
        st = json.loads(subprocess.run([S, "--store", store, "status", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
        DAEMON["pid"] = st[0]["pid"]
        if a.keep_mounted:
            print(f"mounted at {mp}; press Enter to run", flush=True)
            sys.stdin.readline()
        # Interleave so background load hits both sides alike.
        nat = workloads(native, a.rounds, a.mib)
        sfs = workloads(mp, a.rounds, a.mib, True)
        nat2 = workloads(native, a.rounds, a.mib)
        sfs2 = workloads(mp, a.rounds, a.mib, True)
        print(f"{'workload':28} {'native':>9} {'storefs':>9} {'ratio':>6}  daemon cpu/run")
        for k in nat:
            n, s = min(nat[k], nat2[k]), min(sfs[k], sfs2[k])
            print(f"{k:28} {n:9.3f} {s:9.3f} {s / n:6.2f}x  {DAEMON['cpu'][k]:.3f}")
    finally:
        if mounted:
            subprocess.run([S, "--store", store, "umount", mp, "--no-commit"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
