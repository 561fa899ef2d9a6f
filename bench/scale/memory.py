#!/usr/bin/env python3
"""Daemon memory against `--cache-size` (issue 17, part 4): the peak RSS
(VmHWM) of the mount daemon, storefs before (main) and after (this branch), on

1. a browse mount, `grep -r` over every checkpoint of a store of N checkpoints
   of a 200-file tree (1-3 files changed each), at --cache-size 16M, 64M, 256M;
2. a plain read-only mount of a store of about 300,000 small objects, before
   any read (default 256M);
3. a full read with the default 256M: `cat` of every file of that tree, and
   `cat` of one 1 GiB file (incompressible; 4 GiB without --quick is too long
   here: 1 GiB is already four times the cache);
4. a fork of that 1 GiB file's tree: `cat` of it at --cache-size 16M and 256M
   (the fork's chunk cache; fixed at 64 MiB before), and 20,000 new small files
   written at 16M (the fork's inode table), and 20 rounds of 5,000 new files
   each in a directory of its own with `storefs commit` after each (what a
   commit stored is parked since 2026-12-05);
5. a fork of the tree of item 2 at 16M: `find` over it (stat of every
   entry), and `cat` of every file (the fork's inode table: base entries
   are parked within a quarter of the flag since 2026-12-05);
6. a lazy mount of that tree's checkpoint pushed to a `file://` remote, from
   an empty store, at --cache-size 16M: before any read, and after `find`
   over it and `cat` of every 100th file (the remote's pack index is a
   midx searched in place since 2026-12-05; it was a hash map of every
   remote object); and `storefs pull` of it into an empty store (the pull
   process, no cache);
7. `storefs import` of a tar of 303,031 entries (3,000 directories of 100
   small files, as tar writes them): the import process's own peak RSS
   (no cache, so the bound is 64 MiB; directories the archive has left are
   stored and dropped since 2026-12-05).

The bound is the flag + 64 MiB (issue 17). Usage:
  bench/scale/memory.py --storefs target/release/storefs [--before /tmp/storefs-main] [--quick]
--quick is about ten times smaller. Prints a markdown table:
case | before | storefs | bound | within? (of storefs); all in MiB; then the
seconds each workload took (for humans: one run each, nothing asserts on it).
"""

import argparse
import glob
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import change, make_tree, many_objects_tree, peak_run, status_kib, unmount  # noqa: E402

MIB = 1 << 20


def run(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


def big_file_tree(root, size):
    os.makedirs(root)
    block = 1 << 20
    with open(os.path.join(root, "big"), "wb") as f:
        for _ in range(size // block):
            f.write(os.urandom(block))


def daemon_pid(store):
    for rec in glob.glob(os.path.join(store, "mounts", "*.json")):
        with open(rec) as f:
            return json.load(f)["pid"]
    raise SystemExit(f"no mount record in {store}/mounts")


def peak(bin_, store, mount_args, mp, workload):
    """Peak RSS (VmHWM, MiB) of the daemon of `mount_args` after `workload(mp)`,
    and the seconds the workload took."""
    os.makedirs(mp, exist_ok=True)
    try:
        run([bin_, "--store", store, "mount"] + mount_args)
        pid = daemon_pid(store)
        t = time.perf_counter()
        workload(mp)
        took = time.perf_counter() - t
        time.sleep(0.2)
        hwm = status_kib(pid, "VmHWM")
    finally:
        unmount(bin_, store, mp)
    return hwm / 1024, took


def grep_all(mp):
    subprocess.run(["grep", "-r", "-c", "no such text", os.path.join(mp, "checkpoints")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cat_all(mp):
    subprocess.run(f"find {mp} -type f -print0 | xargs -0 cat > /dev/null", shell=True, check=True)


def find_all(mp):
    subprocess.run(["find", mp, "-printf", "%s %i\n"], stdout=subprocess.DEVNULL, check=True)


def write_files(mp, n):
    d = os.path.join(mp, "new")
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        with open(os.path.join(d, f"f{i:06}"), "wb") as f:
            f.write(b"x" * 100)


def write_and_commit(bin_, store, mp, rounds, per):
    """An agent's session: each round writes `per` files into a directory of
    its own, then commits (what a commit stored is parked since 2026-12-05)."""
    for r in range(rounds):
        d = os.path.join(mp, "rounds", f"r{r:03}")
        os.makedirs(d)
        for i in range(per):
            with open(os.path.join(d, f"f{i:05}"), "wb") as f:
                f.write(b"x" * 100)
        run([bin_, "--store", store, "commit", "f", "-m", f"round {r}"])


def nothing(mp):
    os.stat(mp)
    time.sleep(0.3)


def write_tar(path, dirs, per):
    """A tar of `dirs` directories of `per` small distinct files under top/."""
    rng = random.Random(7)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        def add_dir(name):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1_700_000_000
            t.addfile(ti)
        add_dir("top")
        for d in range(dirs):
            dn = f"top/d{d // 100:03}"
            if d % 100 == 0:
                add_dir(dn)
            sn = f"{dn}/s{d:05}"
            add_dir(sn)
            for i in range(per):
                data = f"{d} {i} {rng.random()}\n".encode() * (1 + i % 5)
                ti = tarfile.TarInfo(f"{sn}/f{i:03}.txt")
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 1_700_000_000
                t.addfile(ti, io.BytesIO(data))


def import_peak(bin_, store, archive):
    """Peak RSS (MiB) of `storefs import`, and the seconds it took."""
    secs, mib, rc, err = peak_run([bin_, "--store", store, "import", archive, "--ref", "a"])
    if rc != 0:
        raise SystemExit(f"{bin_} import {archive} failed ({rc}): {err}")
    return mib, secs


def parse_size(s):
    return int(s[:-1]) * MIB


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storefs", required=True, help="storefs binary to measure (after)")
    ap.add_argument("--before", default="/tmp/storefs-main", help="storefs binary of main (before)")
    ap.add_argument("--quick", action="store_true", help="about ten times smaller")
    ap.add_argument("--only", default="",
                    help="comma-separated case prefixes to run (grep,plain,cat,big,fork,walk,lazy,pull,import)")
    a = ap.parse_args()
    bins = (("before", os.path.abspath(a.before)), ("after", os.path.abspath(a.storefs)))
    n = 100 if a.quick else 1000
    big = 30_000 if a.quick else 300_000
    big_size = (128 if a.quick else 1024) * MIB
    only = [o for o in a.only.split(",") if o]
    want = lambda case: not only or any(case.startswith(o) for o in only)
    rows = []

    with tempfile.TemporaryDirectory(prefix="storefs-mem-") as tmp:
        mp = os.path.join(tmp, "mp")
        if want("grep"):
            src = os.path.join(tmp, "src")
            make_tree(src, 200, 1)
            rnd = random.Random(2)
            stores = {label: os.path.join(tmp, f"loop-{label}") for label, _ in bins}
            for step in range(n):
                change(src, 200, rnd, step)
                for label, b in bins:
                    run([b, "--store", stores[label], "snapshot", src, "--ref", "s"])
            shutil.rmtree(src)
            for size in ("16M", "64M", "256M"):
                res = {label: peak(b, stores[label], ["--browse", "--cache-size", size, mp], mp, grep_all)
                       for label, b in bins}
                rows.append((f"browse grep -r over {n} checkpoints, --cache-size {size}", res, parse_size(size)))
            for s in stores.values():
                shutil.rmtree(s)
        if want("plain") or want("cat") or want("walk") or want("lazy") or want("pull"):
            src = os.path.join(tmp, "many")
            many_objects_tree(src, big)
            stores = {label: os.path.join(tmp, f"many-{label}") for label, _ in bins}
            for label, b in bins:
                run([b, "--store", stores[label], "snapshot", src, "--ref", "big"])
            shutil.rmtree(src)
            if want("plain"):
                res = {label: peak(b, stores[label], ["big", mp], mp, nothing) for label, b in bins}
                rows.append((f"plain ro mount of {big} small objects, no read, default 256M", res, 256 * MIB))
            if want("cat"):
                res = {label: peak(b, stores[label], ["big", mp], mp, cat_all) for label, b in bins}
                rows.append((f"cat of every file of those {big}, default 256M", res, 256 * MIB))
            if want("walk"):
                for label, b in bins:
                    run([b, "--store", stores[label], "fork", "big", "--name", "w"])
                for what, work in (("find (stat of every entry)", find_all), ("cat of every file", cat_all)):
                    res = {label: peak(b, stores[label], ["w", "--cache-size", "16M", mp], mp, work)
                           for label, b in bins}
                    rows.append((f"fork of those {big}: {what}, --cache-size 16M", res, parse_size("16M")))
            if want("lazy") or want("pull"):
                remotes = {label: os.path.join(tmp, f"remote-{label}") for label, _ in bins}
                for label, b in bins:
                    run([b, "--store", stores[label], "remote", "add", "r", f"file://{remotes[label]}"])
                    run([b, "--store", stores[label], "push", "r", "big"])

                def empty_store(label, b):
                    st = os.path.join(tmp, f"empty-{label}")
                    shutil.rmtree(st, ignore_errors=True)
                    run([b, "--store", st, "init"])
                    run([b, "--store", st, "remote", "add", "r", f"file://{remotes[label]}"])
                    return st

                def find_and_some(m):
                    find_all(m)
                    subprocess.run(f"find {m} -type f | awk 'NR % 100 == 0' | xargs cat > /dev/null",
                                   shell=True, check=True)

                if want("lazy"):
                    for what, work in (("no read", nothing), ("find, then cat of every 100th file", find_and_some)):
                        res = {label: peak(b, empty_store(label, b), ["r:big", mp, "--cache-size", "16M"], mp, work)
                               for label, b in bins}
                        rows.append((f"lazy mount of those {big} from a file:// remote: {what}, --cache-size 16M",
                                     res, parse_size("16M")))
                if want("pull"):
                    res = {}
                    for label, b in bins:
                        secs, mib, rc, err = peak_run([b, "--store", empty_store(label, b), "pull", "r", "big"])
                        if rc != 0:
                            raise SystemExit(f"{b} pull failed ({rc}): {err}")
                        res[label] = (mib, secs)
                    rows.append((f"`storefs pull` of those {big} into an empty store (the pull process, no cache)",
                                 res, 0))
            for s in stores.values():
                shutil.rmtree(s)
        if want("big") or want("fork"):
            src = os.path.join(tmp, "bigfile")
            big_file_tree(src, big_size)
            stores = {label: os.path.join(tmp, f"big-{label}") for label, _ in bins}
            for label, b in bins:
                run([b, "--store", stores[label], "snapshot", src, "--ref", "big"])
            shutil.rmtree(src)
            if want("big"):
                res = {label: peak(b, stores[label], ["big", mp], mp, cat_all) for label, b in bins}
                rows.append((f"cat of one {big_size // MIB} MiB file, default 256M", res, 256 * MIB))
            if want("fork"):
                for label, b in bins:
                    run([b, "--store", stores[label], "fork", "big", "--name", "f"])
                for size in ("16M", "256M"):
                    res = {label: peak(b, stores[label], ["f", "--cache-size", size, mp], mp, cat_all)
                           for label, b in bins}
                    rows.append((f"fork: cat of the {big_size // MIB} MiB file, --cache-size {size}", res,
                                 parse_size(size)))
                nfiles = 2_000 if a.quick else 20_000
                res = {label: peak(b, stores[label], ["f", "--cache-size", "16M", mp], mp,
                                   lambda m: write_files(m, nfiles)) for label, b in bins}
                rows.append((f"fork: {nfiles} new files written, --cache-size 16M (new inodes stay)",
                             res, parse_size("16M")))
                rounds, per = (4, 500) if a.quick else (20, 5_000)
                res = {label: peak(b, stores[label], ["f", "--cache-size", "16M", mp], mp,
                                   lambda m, b=b, st=stores[label]: write_and_commit(b, st, m, rounds, per))
                       for label, b in bins}
                rows.append((f"fork: {rounds} rounds of {per} new files in a new directory, "
                             f"`storefs commit` after each, --cache-size 16M", res, parse_size("16M")))
            for s in stores.values():
                shutil.rmtree(s)

        if want("import"):
            dirs = 300 if a.quick else 3_000
            archive = os.path.join(tmp, "import.tar")
            write_tar(archive, dirs, 100)
            res = {}
            for label, b in bins:
                store = os.path.join(tmp, f"import-{label}")
                res[label] = import_peak(b, store, archive)
                shutil.rmtree(store)
            os.unlink(archive)
            rows.append((f"`storefs import` of a tar of {dirs * 101 + dirs // 100 + 1} entries "
                         "(the import process, no cache)", res, 0))

    print("| case (daemon peak RSS, MiB) | before | storefs | bound (flag+64MiB) | within? |")
    print("|---|---:|---:|---:|---|")
    for case, res, flag in rows:
        bound = flag / MIB + 64
        ok = "yes" if res["after"][0] <= bound else "NO"
        print(f"| {case} | {res['before'][0]:.1f} | {res['after'][0]:.1f} | {bound:.0f} | {ok} |")
    print()
    print("| workload time (one run each, not interleaved), s | before | storefs | ratio |")
    print("|---|---:|---:|---:|")
    for case, res, _ in rows:
        b, s = res["before"][1], res["after"][1]
        print(f"| {case} | {b:.2f} | {s:.2f} | {s / b:.2f} |")


if __name__ == "__main__":
    main()
