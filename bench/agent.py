#!/usr/bin/env python3
"""What agents run on a fork (issue 18): real tools on native, on a storefs
fork mount and on fuse-overlayfs over the same native tree, in one run.

    python3 bench/agent.py --storefs BIN [--before BIN] [--mount-args ARGS] [--small] [--rounds N] [--out DIR] [--only NAME,...]

The three places start from the same base tree (a small agent store: JSON
state, a journal, a few hundred files). Each workload runs `--rounds` times
in a fresh subdirectory of each place (best time kept); what it needs from
outside (a git repository, wheels, a source tarball, a C project) is made
once on the native disk, outside the three places. Workloads:

  git clone      `git clone --no-local` of a repository of 1,000 commits
  git commit x10 ten `git add -A && git commit` of 1-3 changed files in it
  git gc         `git gc` of the clone
  pip install    `pip install --no-index` of 6 local wheels into a venv
  tar -x         of a 20,000-file source tree (.tar, uncompressed)
  cp -r          of that tree, inside the same place
  cp large file  `cp` of the base tree's 64 MiB file beside it
  rsync -a       of that tree, inside the same place
  make -j2       of a generated C project of 200 files
  sqlite WAL     1,000 one-row transactions, synchronous=FULL, WAL
  sqlite rollback  the same with the rollback journal
  appends        1,000 O_APPEND log lines, each from a short-lived `sh`
  temp+fsync+rename  1,000 state-file updates with fsync

`--small` makes the trees and counts 10x smaller. Prints a markdown table
(seconds; ratios storefs/native, overlay/native, storefs/overlay) and writes
it to `--out` (default bench/results/) as <date>-agent[-small].md. Timing is
for people; no test asserts on it. `--before BIN` adds a fork served by
another binary (its own store) to the same run, for a lever's A/B row.
`--in-run` adds a place where the workloads run inside `storefs run` (issue
39): a fork of the same base, mounted by `--storefs` at its origin in the
run's private mount namespace; this script runs again inside it (`--child`),
times each workload there the same way and hands the times back (its rounds
come after the other places' instead of between them).
`--mount-args "--writeback-cache"` adds arguments to the `storefs mount` of
`--storefs`'s fork only (a lever behind a flag, A/B against `--before`).
`--requests` adds a table of the FUSE requests each workload sends each
storefs mount (one extra, untimed run; the kernel's tracepoint counts them).
`--libfuse-hp BIN` adds libfuse's `example/passthrough_hp`, built with
`bench/libfuse-hp.patch` (libfuse 3.19.0-rc0, commit e8d407c), twice over
its own copies of the base tree: `hp` without passthrough and without the
writeback cache (every read and write reaches the daemon, as on a fork) and
`hp-pt` with FUSE passthrough (reads and writes go to the backing file in
the kernel); a second table is the passthrough lever's A/B on one daemon.
Needs root (mounts), git, make, gcc, rsync, fuse-overlayfs (its column says
n/a without it), python3 with venv.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import fmt, have, ratio, sh, unmount, wait_mounted  # noqa: E402


def q(cmd, cwd=None, env=None):
    """Run quietly; raise with the command's stderr on failure."""
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd if isinstance(cmd, str) else ' '.join(cmd)} failed: {r.stderr.decode(errors='replace')[-400:]}")


GIT_ENV = dict(
    os.environ,
    GIT_AUTHOR_NAME="bench",
    GIT_AUTHOR_EMAIL="bench@example.invalid",
    GIT_COMMITTER_NAME="bench",
    GIT_COMMITTER_EMAIL="bench@example.invalid",
    GIT_CONFIG_NOSYSTEM="1",
    HOME="/nonexistent",
)


# ------------------------------------------------------------ inputs, made once

def make_base(root, scale):
    """The tree all three places start from: a small agent store."""
    rng = random.Random(18)
    for d in range(20 // scale or 1):
        p = os.path.join(root, "state", f"d{d}")
        os.makedirs(p)
        for f in range(20):
            with open(os.path.join(p, f"s{f}.json"), "w") as fh:
                fh.write('{"k": %d, "v": "%s"}\n' % (f, "x" * rng.randint(10, 2000)))
    with open(os.path.join(root, "journal.jsonl"), "w") as fh:
        for i in range(2000 // scale):
            fh.write('{"seq": %d}\n' % i)
    # A large file (a model checkpoint, a dataset) for `cp` of one big file.
    with open(os.path.join(root, "big.bin"), "wb") as fh:
        for _ in range(64 // scale):
            fh.write(rng.randbytes(1 << 20))


def make_repo(path, commits):
    """A git repository of `commits` commits over ~200 files."""
    rng = random.Random(1000)
    os.makedirs(path)
    q(["git", "init", "-q", "-b", "main", path], env=GIT_ENV)
    files = [f"src/m{i // 20}/f{i}.py" for i in range(200)]
    for f in files:
        os.makedirs(os.path.join(path, os.path.dirname(f)), exist_ok=True)
        with open(os.path.join(path, f), "w") as fh:
            fh.write("".join(f"line {j} {rng.random()}\n" for j in range(50)))
    # One fast-import stream instead of `commits` git processes; each commit
    # follows the branch's previous one.
    stream = []
    for c in range(commits):
        stream.append("commit refs/heads/main\n")
        stream.append(f"committer bench <bench@example.invalid> {1700000000 + c * 60} +0000\n")
        msg = f"change {c}"
        stream.append(f"data {len(msg)}\n{msg}\n")
        touched = files if c == 0 else rng.sample(files, 3)
        for f in touched:
            body = "".join(f"line {j} {rng.random()}\n" for j in range(50)).encode()
            stream.append(f"M 100644 inline {f}\ndata {len(body)}\n")
            stream.append(body.decode() + "\n")
    p = subprocess.run(["git", "fast-import", "--quiet"], cwd=path, env=GIT_ENV, input="".join(stream).encode(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError(f"git fast-import failed: {p.stderr.decode()[-400:]}")
    q(["git", "checkout", "-q", "-f", "main"], cwd=path, env=GIT_ENV)


def make_wheels(out, n, modules):
    """`n` pure-Python wheels of `modules` modules each, written by hand (a
    wheel is a zip with a dist-info), so no build backend is needed."""
    import base64
    import hashlib
    import zipfile
    os.makedirs(out)
    paths = []
    for w in range(n):
        name = f"benchpkg{w}"
        dist = f"{name}-1.0.dist-info"
        files = {f"{name}/__init__.py": b"VERSION = '1.0'\n"}
        for m in range(modules):
            files[f"{name}/mod{m}.py"] = ("".join(f"def f{i}(x):\n    return x * {i} + {m}\n\n" for i in range(30))).encode()
        files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
        files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        record = []
        for p, b in files.items():
            h = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()
            record.append(f"{p},sha256={h},{len(b)}")
        record.append(f"{dist}/RECORD,,")
        files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
        path = os.path.join(out, f"{name}-1.0-py3-none-any.whl")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for p, b in files.items():
                z.writestr(p, b)
        paths.append(path)
    return paths


def make_source_tar(work, files):
    """A source tree of `files` small files in 100-file directories, as a .tar."""
    rng = random.Random(20000)
    src = os.path.join(work, "srctree")
    for i in range(files):
        d = os.path.join(src, f"pkg{i // 1000}", f"mod{(i // 100) % 10}")
        if i % 100 == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"file{i}.c"), "w") as fh:
            fh.write(f"/* file {i} */\nint f{i}(void) {{ return {rng.randint(0, 1 << 30)}; }}\n" * rng.randint(1, 40))
    tar = os.path.join(work, "srctree.tar")
    q(["tar", "-cf", tar, "-C", work, "srctree"])
    shutil.rmtree(src)
    return tar


def make_c_project(path, n):
    os.makedirs(path)
    for i in range(n):
        with open(os.path.join(path, f"u{i}.c"), "w") as fh:
            fh.write("#include <stdio.h>\n")
            for j in range(20):
                fh.write(f"int u{i}_{j}(int x) {{ int s = 0; for (int k = 0; k < x; k++) s += k * {j}; return s; }}\n")
    with open(os.path.join(path, "main.c"), "w") as fh:
        fh.write("int main(void) { return 0; }\n")
    objs = " ".join([f"u{i}.o" for i in range(n)] + ["main.o"])
    with open(os.path.join(path, "Makefile"), "w") as fh:
        fh.write(f"OBJS = {objs}\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%.o: %.c\n\t$(CC) -O1 -c -o $@ $<\n")


# ------------------------------------------------------------ FUSE requests

TRACING = "/sys/kernel/tracing"


class RequestTrace:
    """Count the FUSE requests the kernel sends one mount, by opcode, with the
    `fuse:fuse_request_send` tracepoint in a trace instance of our own (the
    kernel's own count: it neither slows the daemon nor depends on it)."""

    def __init__(self, mountpoint):
        # The connection is the mount's anonymous device number (major 0).
        self.conn = os.minor(os.stat(mountpoint).st_dev)
        self.dir = os.path.join(TRACING, "instances", f"storefs-agent-{os.getpid()}-{self.conn}")
        os.mkdir(self.dir)
        self._set("buffer_size_kb", "65536")
        self._set("events/fuse/fuse_request_send/filter", f"connection == {self.conn}")

    def _set(self, rel, value):
        with open(os.path.join(self.dir, rel), "w") as f:
            f.write(value)

    def count(self, fn):
        """Run fn() and return {opcode name: requests} sent meanwhile."""
        self._set("trace", "")
        self._set("events/fuse/fuse_request_send/enable", "1")
        try:
            fn()
        finally:
            self._set("events/fuse/fuse_request_send/enable", "0")
        counts = {}
        with open(os.path.join(self.dir, "trace")) as f:
            for line in f:
                if "opcode" in line and "(FUSE_" in line:
                    op = line.split("(FUSE_", 1)[1].split(")", 1)[0].lower()
                    counts[op] = counts.get(op, 0) + 1
        for cpu in os.listdir(os.path.join(self.dir, "per_cpu")):
            with open(os.path.join(self.dir, "per_cpu", cpu, "stats")) as f:
                if any(line.startswith("overrun:") and line.split()[1] != "0" for line in f):
                    counts["(trace overrun)"] = 1
        return counts

    def close(self):
        os.rmdir(self.dir)


def tracing_ok():
    return os.path.isdir(os.path.join(TRACING, "events", "fuse", "fuse_request_send"))


def fmt_counts(c):
    if c is None:
        return "n/a"
    top = sorted(c.items(), key=lambda kv: -kv[1])
    return f"{sum(c.values())}: " + ", ".join(f"{k} {v}" for k, v in top[:5])


# ------------------------------------------------------------ the workloads
# Each takes (place, inputs) and runs in `place`, a fresh directory.

def w_git_clone(d, inp):
    q(["git", "clone", "-q", "--no-local", inp["repo"], os.path.join(d, "clone")], env=GIT_ENV)


def w_git_commits(d, inp):
    # Set-up (untimed by the caller through `prepare`): the clone exists.
    c = os.path.join(d, "clone")
    rng = random.Random(10)
    for i in range(10):
        for f in rng.sample(inp["repo_files"], rng.randint(1, 3)):
            with open(os.path.join(c, f), "a") as fh:
                fh.write(f"edit {i}\n")
        q(["git", "add", "-A"], cwd=c, env=GIT_ENV)
        q(["git", "commit", "-q", "-m", f"edit {i}"], cwd=c, env=GIT_ENV)


def w_git_gc(d, inp):
    q(["git", "gc", "-q"], cwd=os.path.join(d, "clone"), env=GIT_ENV)


def prep_venv(d, inp):
    q([sys.executable, "-m", "venv", "--without-pip", os.path.join(d, "venv")])


def w_pip(d, inp):
    q([sys.executable, "-m", "pip", "--python", os.path.join(d, "venv", "bin", "python"), "install", "-q",
       "--no-index", "--no-deps", "--disable-pip-version-check", *inp["wheels"]])


def w_tar_x(d, inp):
    q(["tar", "-xf", inp["tar"], "-C", d])


def w_cp_big(d, inp):
    # The base's big file, from the place's root (d is <root>/runs/<name>).
    q(["cp", os.path.join(d, "..", "..", "big.bin"), os.path.join(d, "big-copy.bin")])


def w_cp_r(d, inp):
    q(["cp", "-r", os.path.join(d, "srctree"), os.path.join(d, "copy")])


def w_rsync(d, inp):
    q(["rsync", "-a", os.path.join(d, "srctree") + "/", os.path.join(d, "copy") + "/"])


def prep_c(d, inp):
    shutil.copytree(inp["cproj"], os.path.join(d, "c"))


def w_make(d, inp):
    q(["make", "-s", "-j2"], cwd=os.path.join(d, "c"))


def sqlite_txns(d, mode, n):
    import sqlite3
    db = sqlite3.connect(os.path.join(d, "db.sqlite"), isolation_level=None)
    db.execute(f"PRAGMA journal_mode={mode}")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    for i in range(n):
        db.execute("BEGIN")
        db.execute("INSERT INTO t (v) VALUES (?)", ("x" * 100,))
        db.execute("COMMIT")
    db.close()


def w_appends(d, inp):
    log = os.path.join(d, "events.jsonl")
    for i in range(inp["n"]):
        q(["sh", "-c", f"echo '{{\"seq\": {i}}}' >> '{log}'"])


def w_temp_fsync_rename(d, inp):
    for i in range(inp["n"]):
        tmp = os.path.join(d, ".state.json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b'{"turn": %d}\n' % i)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, os.path.join(d, "state.json"))
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)
        os.close(dfd)


WORKLOADS = [
    # name, prepare (untimed; another workload's run where one sets the
    # stage for the next), run (timed)
    ("git clone", None, w_git_clone),
    ("git commit x10", w_git_clone, w_git_commits),
    ("git gc", w_git_clone, w_git_gc),
    ("pip install", prep_venv, w_pip),
    ("tar -x", None, w_tar_x),
    ("cp -r", w_tar_x, w_cp_r),
    ("cp large file", None, w_cp_big),
    ("rsync -a", w_tar_x, w_rsync),
    ("make -j2", prep_c, w_make),
    ("sqlite WAL", None, lambda d, inp: sqlite_txns(d, "WAL", inp["n"])),
    ("sqlite rollback", None, lambda d, inp: sqlite_txns(d, "DELETE", inp["n"])),
    ("appends", None, w_appends),
    ("temp+fsync+rename", None, w_temp_fsync_rename),
]


def timed_rounds(root, name, prep, run, inp, rounds, results, place):
    """`rounds` runs of one workload in fresh directories under `root`; the
    best time is kept in `results[(name, place)]`."""
    for r in range(rounds):
        d = os.path.join(root, "runs", f"{name.replace(' ', '_').replace('+', '_')}-{place}-{r}")
        os.makedirs(d)
        if prep:
            prep(d, inp)
        os.sync()
        t = time.perf_counter()
        run(d, inp)
        dt = time.perf_counter() - t
        key = (name, place)
        results[key] = min(results.get(key, dt), dt)
        shutil.rmtree(d)


def child(args):
    """`--child ROOT INPUTS ROUNDS NAMES`: inside `storefs run`, time the
    workloads NAMES (comma-separated) in ROOT (the fork, at its origin);
    print {name: best seconds} as JSON."""
    root, inputs, rounds, names = args
    inp = json.load(open(inputs))
    want = set(names.split(","))
    results = {}
    for name, prep, run in WORKLOADS:
        if name in want:
            timed_rounds(root, name, prep, run, inp, int(rounds), results, "run")
    print(json.dumps({n: t for (n, _), t in results.items()}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--storefs", required=True, help="the storefs binary")
    ap.add_argument("--before", help="a second storefs binary (an A/B: its own store and fork mount, same run)")
    ap.add_argument("--mount-args", default="",
                    help="space-separated arguments added to the mount of --storefs's fork (e.g. --writeback-cache)")
    ap.add_argument("--small", action="store_true", help="10x smaller trees and counts")
    ap.add_argument("--rounds", type=int, default=3, help="runs per workload and place; the best is kept")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="directory for the markdown table")
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--requests", action="store_true",
                    help="after the timed rounds, one more run on each storefs mount counting the FUSE "
                         "requests by kind (kernel tracepoint fuse:fuse_request_send)")
    ap.add_argument("--in-run", action="store_true",
                    help="also run the workloads inside `storefs run` (a fork at its origin in a private "
                         "mount namespace), timed there")
    ap.add_argument("--libfuse-hp", help="libfuse's passthrough_hp built with bench/libfuse-hp.patch: "
                    "adds it without and with FUSE passthrough (the lever's A/B)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("agent.py: run as root (it mounts a fork and fuse-overlayfs)")
    S = os.path.abspath(a.storefs)
    scale = 10 if a.small else 1
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    workloads = [w for w in WORKLOADS if not only or w[0] in only]
    if only and len(workloads) != len(only):
        sys.exit(f"agent.py: unknown workload in --only; known: {', '.join(w[0] for w in WORKLOADS)}")

    work = tempfile.mkdtemp(prefix="storefs-agent-")
    cleanup = []
    results = {}
    requests = {}
    traces = {}
    try:
        print("agent.py: making inputs", file=sys.stderr)
        native = os.path.join(work, "native")
        make_base(native, scale)
        inp = {"n": 1000 // scale}
        if any(w[0].startswith("git") for w in workloads):
            inp["repo"] = os.path.join(work, "repo")
            make_repo(inp["repo"], 1000 // scale)
            inp["repo_files"] = [f"src/m{i // 20}/f{i}.py" for i in range(200)]
        inp["wheels"] = make_wheels(os.path.join(work, "wheels"), 6, 200 // scale)
        inp["tar"] = make_source_tar(work, 20000 // scale)
        inp["cproj"] = os.path.join(work, "cproj")
        make_c_project(inp["cproj"], 200 // scale)

        def mount_fork(label, binary, extra=()):
            """A store of its own with a fork of the base tree, mounted."""
            store = os.path.join(work, f"store-{label}")
            sh([binary, "--store", store, "init"], stdout=subprocess.DEVNULL)
            sh([binary, "--store", store, "snapshot", native, "--ref", "base"], stdout=subprocess.DEVNULL)
            sh([binary, "--store", store, "fork", "base", "--name", "agent"], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
            mp = os.path.join(work, "mnt", label)
            os.makedirs(mp)
            sh([binary, "--store", store, "mount", "agent", mp, *extra], stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
            cleanup.append(lambda: sh([binary, "--store", store, "umount", mp, "--no-commit"], check=False,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            return mp

        places = [("native", native), ("storefs", mount_fork("storefs", S, a.mount_args.split()))]
        if a.before:
            places.append(("before", mount_fork("before", os.path.abspath(a.before))))
        if have("fuse-overlayfs"):
            ovl = os.path.join(work, "mnt", "overlay")
            up, wk = os.path.join(work, "ovl-up"), os.path.join(work, "ovl-work")
            for d in (ovl, up, wk):
                os.makedirs(d)
            sh(["fuse-overlayfs", "-o", f"lowerdir={native},upperdir={up},workdir={wk}", ovl])
            wait_mounted(ovl)
            cleanup.append(lambda: unmount(ovl))
            places.append(("fuse-overlayfs", ovl))

        if a.libfuse_hp:
            hp = os.path.abspath(a.libfuse_hp)
            for label, args, env in (("hp", ["--nopassthrough"], {"HP_NO_WRITEBACK": "1"}), ("hp-pt", [], {})):
                src, mp = os.path.join(work, f"src-{label}"), os.path.join(work, "mnt", label)
                sh(["cp", "-a", native, src])
                os.makedirs(mp)
                # In the foreground, so its pid is ours to stop.
                proc = subprocess.Popen([hp, "--foreground", "--nosplice", *args, src, mp],
                                        env={**os.environ, **env}, stdout=subprocess.DEVNULL)
                wait_mounted(mp)

                def stop(mp=mp, proc=proc):
                    unmount(mp)
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                cleanup.append(stop)
                places.append((label, mp))

        if a.requests:
            if not tracing_ok():
                sys.exit("agent.py: --requests needs tracefs with the fuse:fuse_request_send event")
            for place, root in places:
                if place in ("storefs", "before"):
                    traces[place] = RequestTrace(root)
        for name, prep, run in workloads:
            print(f"agent.py: {name}", file=sys.stderr)
            for r in range(a.rounds):
                # Interleaved: round r of every place before round r+1 of any.
                for place, root in places:
                    timed_rounds(root, name, prep, run, inp, 1, results, place)
            for place, root in places:
                if place not in traces:
                    continue
                d = os.path.join(root, "runs", f"{name.replace(' ', '_').replace('+', '_')}-requests")
                os.makedirs(d)
                if prep:
                    prep(d, inp)
                requests[(name, place)] = traces[place].count(lambda: run(d, inp))
                shutil.rmtree(d)
        if a.in_run:
            # The base copied to an origin of its own, snapshotted, and
            # removed: the origin exists only inside the run (a run mounts
            # only where the host has nothing, or an empty directory).
            store = os.path.join(work, "store-run")
            origin = os.path.join(work, "run-origin")
            sh(["cp", "-a", native, origin])
            sh([S, "--store", store, "init"], stdout=subprocess.DEVNULL)
            sh([S, "--store", store, "snapshot", origin, "--ref", "base"], stdout=subprocess.DEVNULL)
            shutil.rmtree(origin)
            inputs = os.path.join(work, "inputs.json")
            with open(inputs, "w") as f:
                json.dump(inp, f)
            print("agent.py: the same workloads inside storefs run", file=sys.stderr)
            out = subprocess.run(
                [S, "--store", store, "run", "base", "--fork", "agent-run", "--no-commit", "--",
                 sys.executable, os.path.abspath(__file__), "--child", origin, inputs, str(a.rounds),
                 ",".join(w[0] for w in workloads)],
                check=True, stdout=subprocess.PIPE, text=True).stdout
            for name, t in json.loads(out.strip().splitlines()[-1]).items():
                results[(name, "run")] = t
    finally:
        for t in traces.values():
            t.close()
        for c in reversed(cleanup):
            c()
        shutil.rmtree(work, ignore_errors=True)

    lines = [
        f"# Agent workloads on a fork ({'small' if a.small else 'full'} scale, best of {a.rounds}, "
        f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)",
        "",
        *([f"storefs fork mounted with `{a.mount_args}`.", ""] if a.mount_args else []),
        "| workload | native s | storefs fork s | fuse-overlayfs s | storefs/native | overlay/native | storefs/overlay |"
        + (" before s | before/native |" if a.before else "")
        + (" in a run s | run/native | run/storefs |" if a.in_run else ""),
        "|---|---|---|---|---|---|---|" + ("---|---|" if a.before else "") + ("---|---|---|" if a.in_run else ""),
    ]
    for name, _, _ in workloads:
        n, s, o, b = (results.get((name, p)) for p in ("native", "storefs", "fuse-overlayfs", "before"))
        row = f"| {name} | {fmt(n)} | {fmt(s)} | {fmt(o)} | {ratio(s, n)} | {ratio(o, n)} | {ratio(s, o)} |"
        if a.before:
            row += f" {fmt(b)} | {ratio(b, n)} |"
        if a.in_run:
            r = results.get((name, "run"))
            row += f" {fmt(r)} | {ratio(r, n)} | {ratio(r, s)} |"
        lines.append(row)
    if a.libfuse_hp:
        lines += ["", "libfuse `passthrough_hp`: without passthrough or writeback cache (`hp`), with "
                  "passthrough (`hp-pt`):", "",
                  "| workload | native s | hp s | hp-pt s | hp/native | hp-pt/native | hp-pt/hp |",
                  "|---|---|---|---|---|---|---|"]
        for name, _, _ in workloads:
            n, h, t = (results.get((name, p)) for p in ("native", "hp", "hp-pt"))
            lines.append(f"| {name} | {fmt(n)} | {fmt(h)} | {fmt(t)} | {ratio(h, n)} | {ratio(t, n)} | {ratio(t, h)} |")
    if requests:
        lines += ["", "FUSE requests of one run (total: the five most frequent kinds):", "",
                  "| workload | storefs | before |" if a.before else "| workload | storefs |",
                  "|---|---|---|" if a.before else "|---|---|"]
        for name, _, _ in workloads:
            row = f"| {name} | {fmt_counts(requests.get((name, 'storefs')))} |"
            if a.before:
                row += f" {fmt_counts(requests.get((name, 'before')))} |"
            lines.append(row)
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("%Y-%m-%d-%H%M", time.gmtime()) + ("-agent-small.md" if a.small else "-agent.md"))
    with open(path, "w") as f:
        f.write(table)
    print(f"written to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
