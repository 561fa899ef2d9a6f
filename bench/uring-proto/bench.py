#!/usr/bin/env python3
"""Round-trip cost of the prototype's two transports (issue 18), one run.

    cargo build --release --manifest-path bench/uring-proto/Cargo.toml
    python3 bench/uring-proto/bench.py [--rounds 3] [--n 100000]

Mounts the prototype four times (classic /dev/fuse with 2 threads, as
storefs runs fuser; classic with 1 thread; io_uring, one queue per CPU;
the same with SINGLE_ISSUER + DEFER_TASKRUN rings) and
times, on each and on a native file, best of --rounds (the order of the
places rotates each round): N fstat() on one open file, N stat() by path,
and two processes doing N/2 fstat() each at once. The prototype answers
with TTL 0, so every call is a round trip (the request counts, taken by the
kernel's fuse:fuse_request_send tracepoint in one extra untimed run, say
how many). Sets /sys/module/fuse/parameters/enable_uring to Y for the run
and back to what it was after. Needs root. Timing is for people; nothing
asserts on it.
"""
import argparse
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from agent import RequestTrace, tracing_ok  # noqa: E402

PARAM = "/sys/module/fuse/parameters/enable_uring"
BIN = os.path.join(HERE, "target", "release")
CONFIGS = {
    "classic-2t": (["classic", "2"], {}),
    "classic-1t": (["classic", "1"], {}),
    "uring": (["uring", "8"], {}),
    "uring-defer": (["uring", "8"], {"URING_PROTO_DEFER": "1"}),
}


def mounted(mnt):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def mount(name, mnt):
    os.makedirs(mnt, exist_ok=True)
    log = open(mnt + ".log", "w")
    args, env = CONFIGS[name]
    p = subprocess.Popen([os.path.join(BIN, "uring-proto"), mnt, *args], stderr=log, env=dict(os.environ, **env))
    for _ in range(250):
        if mounted(mnt):
            os.stat(os.path.join(mnt, "f"))
            return p
        if p.poll() is not None:
            raise RuntimeError(f"uring-proto {name} exited: {open(mnt + '.log').read()}")
        time.sleep(0.02)
    raise RuntimeError(f"{mnt} did not mount")


def unmount(mnt, p):
    if mounted(mnt):
        subprocess.run(["umount", mnt], check=False)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def cpu_of(pid):
    """utime + stime of a process, seconds"""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loop(path, n, mode):
    out = subprocess.run([os.path.join(BIN, "statloop"), path, str(n), mode], check=True, capture_output=True, text=True)
    return int(out.stdout) / 1e9


def parallel(path, n):
    t0 = time.perf_counter()
    ps = [subprocess.Popen([os.path.join(BIN, "statloop"), path, str(n // 2), "fstat"], stdout=subprocess.DEVNULL)
          for _ in range(2)]
    if any(p.wait() != 0 for p in ps):
        raise RuntimeError("statloop failed")
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--dir", default=f"/tmp/uring-proto-bench-{os.getpid()}")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(BIN, "uring-proto")):
        sys.exit("build it first: cargo build --release --manifest-path bench/uring-proto/Cargo.toml")
    old = open(PARAM).read().strip()
    os.makedirs(a.dir)
    native = os.path.join(a.dir, "native-f")
    with open(native, "w") as f:
        f.write("hello\n")
    mounts = {}
    best = {}
    cpu = {}  # client + daemon CPU seconds, least over the rounds
    counts = {}
    try:
        with open(PARAM, "w") as f:
            f.write("Y")
        for name in CONFIGS:
            mnt = os.path.join(a.dir, name)
            mounts[name] = (mnt, mount(name, mnt))
        places = ["native"] + list(CONFIGS)
        tests = [("fstat", lambda p: loop(p, a.n, "fstat")), ("stat", lambda p: loop(p, a.n, "stat")),
                 ("2 x fstat", lambda p: parallel(p, a.n))]
        for r in range(a.rounds):
            order = places[r % len(places):] + places[:r % len(places)]
            for tname, fn in tests:
                for place in order:
                    path = native if place == "native" else os.path.join(mounts[place][0], "f")
                    c0 = children_cpu() + (cpu_of(mounts[place][1].pid) if place != "native" else 0)
                    t = fn(path)
                    c = children_cpu() + (cpu_of(mounts[place][1].pid) if place != "native" else 0) - c0
                    key = (tname, place)
                    best[key] = min(best.get(key, t), t)
                    cpu[key] = min(cpu.get(key, c), c)
        if tracing_ok():
            for name in CONFIGS:
                tr = RequestTrace(mounts[name][0])
                try:
                    for tname, mode in (("fstat", "fstat"), ("stat", "stat")):
                        path = os.path.join(mounts[name][0], "f")
                        counts[(tname, name)] = sum(tr.count(lambda: loop(path, 10000, mode)).values()) / 10000
                finally:
                    tr.close()
    finally:
        for mnt, p in mounts.values():
            unmount(mnt, p)
        with open(PARAM, "w") as f:
            f.write("N" if old in ("N", "0") else old)
        for name in CONFIGS:
            for suffix in ("", ".log"):
                path = os.path.join(a.dir, name + suffix)
                if os.path.isdir(path) and not mounted(path):
                    os.rmdir(path)
                elif os.path.isfile(path):
                    os.remove(path)
        os.remove(native)
        os.rmdir(a.dir)
    print(f"{a.n} calls each, best of {a.rounds}; µs per call (ratio to classic-2t); CPU: client + daemon µs per call")
    print("| loop | native | " + " | ".join(CONFIGS) + " | requests per call | CPU " + " / ".join(CONFIGS) + " |")
    print("|---|---|" + "---|" * len(CONFIGS) + "---|---|")
    for tname, _ in tests:
        base = best[(tname, "classic-2t")]
        cells = [f"{best[(tname, 'native')] / a.n * 1e6:.2f}"]
        cells += [f"{best[(tname, p)] / a.n * 1e6:.2f} ({best[(tname, p)] / base:.2f})" for p in CONFIGS]
        req = counts.get((tname, "uring"))
        cells.append(f"{req:.2f}" if req is not None else "n/a")
        cells.append(" / ".join(f"{cpu[(tname, p)] / a.n * 1e6:.1f}" for p in CONFIGS))
        print(f"| {tname} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
