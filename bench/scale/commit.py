#!/usr/bin/env python3
"""What a fork commit costs when little changed (issue 17, part 3).

    python3 bench/scale/commit.py --storefs target/release/storefs [--before /tmp/storefs-new] [--quick]

Cases, each on a mounted fork, timing `storefs commit FORK` (the daemon folds):
  - a 4 GiB file of real (random) data in the fork's base, 1 MiB overwritten
    in the middle, then commit (--quick: 256 MiB);
  - 50k small files written in the mount and committed, then one more file
    written, then commit: the time of that last commit (--quick: 5k); both
    binaries' forks are mounted at once and their commits interleaved;
  - an empty commit (nothing changed), for scale.
The base store is made once (by --storefs) and forked once per binary; the
"before" binary (main) and --storefs then run the same steps on their own
fork; `--only big|many` runs one case. Prints a markdown table: case | before | storefs | ratio (storefs /
before; lower is better). Timing is for humans; nothing asserts on it.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import run, write_random  # noqa: E402

MIB = 1 << 20


class Mount(common.Mount):
    """Fork `fork` of `store` mounted by `binary` at `mp`, unmounted on exit
    without a commit."""

    def __init__(self, binary, store, fork, mp):
        super().__init__(binary, store, fork, mp, ["--no-commit"])
        self.fork = fork

    def commit(self):
        """Seconds `storefs commit` took."""
        t = time.perf_counter()
        run([self.b, "--store", self.store, "commit", self.fork])
        return time.perf_counter() - t


def overwrite_case(label, binary, store, mp, size, rounds):
    """Best commit time after a 1 MiB overwrite in the middle of the big file."""
    best = None
    with Mount(binary, store, fork_name(label, "big"), mp) as m:
        m.commit()  # nothing to fold yet
        for r in range(rounds):
            with open(os.path.join(mp, "big.bin"), "r+b") as f:
                f.seek(size // 2 + r * 3 * MIB)
                f.write(os.urandom(MIB))
            t = m.commit()
            best = t if best is None else min(best, t)
        empty = min(m.commit() for _ in range(3))
    return best, empty


def many_files_case(binaries, store, mp, files, rounds):
    """Best time of a one-file commit after `files` small files were written
    and committed, per binary: both forks mounted at once, the commits
    interleaved (so both see the same load)."""
    best = {}
    with contextlib.ExitStack() as stack:
        mounts = []
        for label, binary in binaries:
            m = stack.enter_context(Mount(binary, store, fork_name(label, "many"), f"{mp}-{label}"))
            per_dir = 1000
            for d in range((files + per_dir - 1) // per_dir):
                os.makedirs(os.path.join(m.mp, "many", f"d{d}"))
                for i in range(min(per_dir, files - d * per_dir)):
                    with open(os.path.join(m.mp, "many", f"d{d}", f"f{i}"), "wb") as f:
                        f.write(b"%d:%d " % (d, i) * 40)
            m.commit()
            mounts.append((label, m))
        for r in range(rounds):
            for label, m in mounts:
                with open(os.path.join(m.mp, f"one-more-{r}"), "wb") as f:
                    f.write(b"one more file\n")
                t = m.commit()
                best[label] = min(best.get(label, t), t)
    return best


def fork_name(label, case):
    return f"{case}-{label}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storefs", required=True, help="the binary under test (after)")
    ap.add_argument("--before", default="/tmp/storefs-new", help="the binary to compare with (main)")
    ap.add_argument("--quick", action="store_true", help="256 MiB file and 5k files")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", choices=["big", "many"], help="run one case (many: no big file is written)")
    a = ap.parse_args()
    binaries = [("before", os.path.abspath(a.before)), ("storefs", os.path.abspath(a.storefs))]
    size = (256 if a.quick else 4096) * MIB
    files = 5000 if a.quick else 50000
    work = tempfile.mkdtemp(prefix="commit-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp"))
    results = {}
    try:
        store, src, mp = (os.path.join(work, d) for d in ("store", "src", "mnt"))
        os.makedirs(src)
        cases = [a.only] if a.only else ["big", "many"]
        write_random(os.path.join(src, "big.bin"), size if "big" in cases else MIB)
        b = binaries[1][1]
        run([b, "--store", store, "init"])
        run([b, "--store", store, "snapshot", src, "--ref", "base"])
        os.unlink(os.path.join(src, "big.bin"))  # the store holds it now
        for label, _ in binaries:
            for case in cases:
                run([b, "--store", store, "fork", "base", "--name", fork_name(label, case)])
        many = many_files_case(binaries, store, mp, files, a.rounds) if "many" in cases else {}
        for label, binary in binaries:
            over, empty = overwrite_case(label, binary, store, mp, size, a.rounds) if "big" in cases else (None, None)
            results[label] = {"over": over, "empty": empty, "many": many.get(label)}
            print(f"{label}: {json.dumps(results[label])}", file=sys.stderr, flush=True)
    finally:
        for line in open("/proc/mounts"):
            for label, _ in binaries:
                for point in (mp, f"{mp}-{label}"):
                    if f" {point} " in line:
                        subprocess.run(["umount", point], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    gib = f"{size // MIB} MiB" if size < 1024 * MIB else f"{size // (1024 * MIB)} GiB"
    rows = [
        (f"commit after a 1 MiB overwrite in a {gib} file", "over"),
        (f"1-file commit after {files // 1000}k files written in the mount", "many"),
        ("empty commit (nothing changed)", "empty"),
    ]
    print("| case | before (main) s | storefs s | ratio |")
    print("|---|---:|---:|---:|")
    for name, k in rows:
        bf, af = results["before"][k], results["storefs"][k]
        if bf is None:
            continue
        print(f"| {name} | {bf:.3f} | {af:.3f} | {af / bf:.3f} |")


if __name__ == "__main__":
    main()
