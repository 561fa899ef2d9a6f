#!/usr/bin/env python3
"""Cold reads on a read-only mount against the native disk (issue 17, part 5).

    python3 bench/scale/coldread.py --storefs target/release/storefs [--before /tmp/storefs-main] [--quick]

Cases, each cold (`sync; echo 3 > /proc/sys/vm/drop_caches`, then a fresh
mount), on the native source directory, on a checkpoint of it written and
mounted by --before (main) and on one written and mounted by --storefs:
  - `cat` of a 4 GiB file of random data to /dev/null: throughput, MiB/s
    (--quick: 256 MiB);
  - 1,000 `pread`s of 4 KiB at random 4 KiB-aligned offsets of that file
    (the same offsets everywhere): seconds;
  - a stat walk (os.walk + lstat of every entry) of a 303k-entry tree
    (--quick: 30k): seconds;
  - `fork-cat` and `fork-pread` (not run unless asked for in --cases): the
    `cat` and the `pread`s through a fork of the checkpoint instead of a
    read-only mount of it (native: the same on the native file).
Best of --rounds (default 3), the three interleaved within each round. At
full size the store written second reads slower (1.6 against 2.0 disk reads
a `pread` with the binaries' roles swapped, 2026-12-05): compare binaries
that read the same format with --same-store. Needs
root (drop_caches). Prints a markdown table: case | native | before | storefs
| ratio (storefs / native; for throughput native / storefs, so lower is
better everywhere), and for the preads the disk reads each cost and the KiB
they read (from /proc/diskstats, in the fastest round; the whole disk, so
other I/O on it counts too). Timing is for humans; nothing asserts on it.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Mount, run, write_random  # noqa: E402

MIB = 1 << 20


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def make_tree(root, entries):
    """About `entries` entries: directories of 100 small files each."""
    rng = random.Random(17)
    made = 0
    d = 0
    while made < entries:
        dirpath = os.path.join(root, f"d{d // 100:04}", f"s{d:05}")
        os.makedirs(dirpath, exist_ok=True)
        made += 1 if d % 100 else 2
        for i in range(min(100, entries - made)):
            with open(os.path.join(dirpath, f"f{i:03}.txt"), "wb") as f:
                f.write(rng.randbytes(rng.randint(50, 1500)))
            made += 1
        d += 1


def cat_seconds(path):
    t = time.perf_counter()
    subprocess.run(["cat", path], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def disk_of(path):
    """The /proc/diskstats name of the whole disk holding `path` (None when
    it is not a block device: tmpfs, overlay)."""
    dev = os.stat(path).st_dev
    sys_dev = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if not os.path.exists(sys_dev):
        return None
    return os.path.basename(os.path.realpath(sys_dev))


def disk_reads(disk):
    """(reads completed, KiB read) of `disk` so far, or (0, 0)."""
    if disk:
        for line in open("/proc/diskstats"):
            f = line.split()
            if f[2] == disk:
                return int(f[3]), int(f[5]) // 2
    return 0, 0


def pread_seconds(path, offsets, disk=None, io=None):
    """Seconds for the preads; with `disk`, adds the disk reads and KiB they
    caused to `io` (a two-item list)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        before = disk_reads(disk)
        t = time.perf_counter()
        for o in offsets:
            if len(os.pread(fd, 4096, o)) != 4096:
                raise SystemExit(f"{path}: short read at {o}")
        t = time.perf_counter() - t
        after = disk_reads(disk)
        if io is not None:
            io[0], io[1] = after[0] - before[0], after[1] - before[1]
        return t
    finally:
        os.close(fd)


def walk_seconds(root):
    t = time.perf_counter()
    n = 0
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lstat(os.path.join(dirpath, name))
            n += 1
    return time.perf_counter() - t, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storefs", required=True, help="the binary under test (after)")
    ap.add_argument("--before", default="/tmp/storefs-main", help="the binary to compare with (main)")
    ap.add_argument("--quick", action="store_true", help="256 MiB file and a 30k-entry tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="cat,pread,walk", help="comma-separated subset")
    ap.add_argument("--same-store", action="store_true",
                    help="both binaries read the one store --before writes (for a change to reading "
                         "only: at 4 GiB the store written second reads slower, its files placed "
                         "elsewhere on the disk)")
    a = ap.parse_args()
    cases = a.cases.split(",")
    size = (256 if a.quick else 4096) * MIB
    entries = 30_000 if a.quick else 303_000
    tools = [("before", os.path.abspath(a.before)), ("storefs", os.path.abspath(a.storefs))]
    work = tempfile.mkdtemp(prefix="coldread-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    mp = os.path.join(work, "mnt")
    best = {}

    def note(case, who, v, better=min):
        k = (case, who)
        best[k] = v if k not in best else better(best[k], v)
        print(f"{case} {who}: {v:.3f}", file=sys.stderr, flush=True)

    try:
        src = os.path.join(work, "src")
        os.makedirs(os.path.join(src, "tree"))
        if any(c in cases for c in ("cat", "pread", "fork-cat", "fork-pread")):
            write_random(os.path.join(src, "big.bin"), size)
        if "walk" in cases:
            make_tree(os.path.join(src, "tree"), entries)
        for who, b in tools[:1] if a.same_store else tools:
            store = os.path.join(work, f"store-{who}")
            run([b, "--store", store, "init"])
            run([b, "--store", store, "snapshot", src, "--ref", "s"])
            if any(c.startswith("fork-") for c in cases):
                run([b, "--store", store, "fork", "s", "--name", "f"])
        disk = disk_of(work)
        rng = random.Random(5)
        offsets = [rng.randrange(size // 4096) * 4096 for _ in range(1000)]
        where = [("native", src, None)] + [
            (who, mp, (b, os.path.join(work, "store-before" if a.same_store else f"store-{who}")))
            for who, b in tools]
        for r in range(a.rounds):
            for case in cases:
                for who, root, tool in where:
                    drop_caches()
                    fork = case.startswith("fork-")
                    mount = Mount(tool[0], tool[1], "f" if fork else "s", mp,
                                  ["--no-commit"] if fork else []) if tool else None
                    if mount:
                        mount.__enter__()
                    try:
                        if case in ("cat", "fork-cat"):
                            s = cat_seconds(os.path.join(root, "big.bin"))
                            note(case, who, size / MIB / s, max)
                        elif case in ("pread", "fork-pread"):
                            io = [0, 0]
                            s = pread_seconds(os.path.join(root, "big.bin"), offsets, disk, io)
                            note(case, who, s)
                            # The disk reads of the fastest round.
                            if best[(case, who)] == s:
                                best[(case + "-io", who)] = tuple(io)
                        elif case == "walk":
                            s, n = walk_seconds(os.path.join(root, "tree"))
                            note(case, who, s)
                            best["walk-n"] = n
                    finally:
                        if mount:
                            mount.__exit__()
    finally:
        for line in open("/proc/mounts"):
            if f" {mp} " in line:
                subprocess.run(["umount", mp], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    gib = f"{size // MIB} MiB" if size < 1024 * MIB else f"{size // (1024 * MIB)} GiB"
    print(f"| case (cold, best of {a.rounds}) | native | before (main) | storefs | ratio to native |")
    print("|---|---:|---:|---:|---:|")
    for case, through in (("cat", ""), ("fork-cat", ", through a fork")):
        if case in cases:
            n, b, s = (best[(case, w)] for w in ("native", "before", "storefs"))
            print(f"| `cat` of a {gib} file{through}, MiB/s | {n:.0f} | {b:.0f} | {s:.0f} | {s / n:.2f}x throughput |")
    for case, through in (("pread", ""), ("fork-pread", ", through a fork")):
        if case in cases:
            n, b, s = (best[(case, w)] for w in ("native", "before", "storefs"))
            print(f"| 1,000 random 4 KiB `pread`s{through}, s | {n:.3f} | {b:.3f} | {s:.3f} | {s / n:.2f}x time |")
            if disk:
                io = {w: best.get((case + "-io", w), (0, 0)) for w in ("native", "before", "storefs")}
                cell = {w: f"{io[w][0] / len(offsets):.2f} ({io[w][1] / len(offsets):.0f} KiB)" for w in io}
                print(f"| disk reads a `pread` (KiB read), fastest round | {cell['native']} | {cell['before']} "
                      f"| {cell['storefs']} | |")
    if "walk" in cases:
        n, b, s = (best[("walk", w)] for w in ("native", "before", "storefs"))
        print(f"| stat walk of a {best['walk-n'] // 1000}k-entry tree, s | {n:.2f} | {b:.2f} | {s:.2f} | {s / n:.2f}x time |")


if __name__ == "__main__":
    main()
