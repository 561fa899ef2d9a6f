#!/usr/bin/env python3
"""storefs benchmark: the same seeded store on the native disk (the limit), on
storefs, and on the peers a user would pick instead, measured in one run.

Every number is the best of 3 runs, in seconds; "cold" runs drop the page cache
first (echo 3 > /proc/sys/vm/drop_caches). Ratios are storefs / native and
storefs / best peer. Timings never feed a pass/fail: this reports, it does not judge.
"""
import argparse
import datetime
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RUNS = 3


def sh(cmd, check=True, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), check=check, **kw)


def have(tool):
    return shutil.which(tool) is not None


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def best(fn, cold=False):
    """Best of RUNS wall-clock seconds of fn()."""
    times = []
    for _ in range(RUNS):
        if cold:
            drop_caches()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


# ---------------------------------------------------------------- the data

def generate(root, scale):
    """A realistic agent store, the same bytes every time (seeded)."""
    rng = random.Random(953)
    os.makedirs(root)
    n_small = 20000 // scale
    words = ["collect", "dispatch", "ledger", "batch", "thread", "turn", "slice", "verdict", "code", "room"]
    for i in range(n_small):
        d = os.path.join(root, "workspace", f"room{i % 20:02d}", f"slice{(i // 20) % 50:02d}")
        os.makedirs(d, exist_ok=True)
        body = {"id": i, "event": rng.choice(words), "notes": " ".join(rng.choice(words) for _ in range(rng.randint(5, 400)))}
        with open(os.path.join(d, f"state{i:05d}.json"), "w") as f:
            json.dump(body, f)
    for i in range(2000 // scale):
        h = "%064x" % rng.getrandbits(256)
        d = os.path.join(root, "objects", h[:2])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, h[2:]), "wb") as f:
            f.write((" ".join(rng.choice(words) for _ in range(rng.randint(100, 4000)))).encode())
    os.makedirs(os.path.join(root, "native", "lead", "sessions"))
    with open(os.path.join(root, "native", "lead", "codex.log"), "w") as f:
        line = 0
        target = (64 << 20) // scale
        size = 0
        while size < target:
            s = f"2026-12-02T17:{line % 60:02d}:00Z turn={line} {rng.choice(words)} {rng.choice(words)} ok\n"
            f.write(s)
            size += len(s)
            line += 1
    with open(os.path.join(root, "native", "lead", "blob.bin"), "wb") as f:
        f.write(rng.randbytes((32 << 20) // scale))
    os.symlink(os.path.join(root, "native", "lead", "codex.log"), os.path.join(root, "current.log"))
    os.symlink("../native/lead/blob.bin", os.path.join(root, "workspace", "blob-link"))
    os.link(os.path.join(root, "native", "lead", "blob.bin"), os.path.join(root, "native", "blob-hardlink"))
    with open(os.path.join(root, "native", "lead", "sessions", "rollout.jsonl"), "w") as f:
        for i in range(0, n_small, 97):
            p = os.path.join(root, "workspace", f"room{i % 20:02d}", f"slice{(i // 20) % 50:02d}", f"state{i:05d}.json")
            f.write(json.dumps({"type": "read", "path": p}) + "\n")
    with open(os.path.join(root, "STORE.json"), "w") as f:
        json.dump({"root": root}, f)


# ---------------------------------------------------------------- workloads

def walk(mp):
    sh(["find", mp, "-printf", "%s %m %u\n"], stdout=subprocess.DEVNULL)


def read_all(mp):
    sh(f"find '{mp}' -type f -print0 | xargs -0 -n 500 cat > /dev/null")


def random_reads(mp):
    rng = random.Random(7)
    files = [os.path.join(mp, "native", "lead", "codex.log"), os.path.join(mp, "native", "lead", "blob.bin")]
    fds = [os.open(p, os.O_RDONLY) for p in files]
    try:
        for i in range(1000):
            fd = fds[i % 2]
            size = os.fstat(fd).st_size
            os.pread(fd, 4096, rng.randrange(0, max(1, size - 4096)))
    finally:
        for fd in fds:
            os.close(fd)


def wait_mounted(mp, timeout=120):
    t = time.time()
    while time.time() - t < timeout:
        with open("/proc/mounts") as f:
            if any(line.split()[1] == mp for line in f):
                os.stat(mp)
                return
        time.sleep(0.01)
    raise RuntimeError(f"{mp} did not mount")


def unmount(mp):
    sh(["umount", mp], check=False, stderr=subprocess.DEVNULL)
    sh(["umount", "-l", mp], check=False, stderr=subprocess.DEVNULL)


class Peer:
    """A read-only way to see the tree: mount() returns the seconds it took."""

    def __init__(self, name, mp, mount, umount=None, pid_of=None):
        self.name, self.mp, self._mount, self._umount = name, mp, mount, umount or (lambda: unmount(mp))
        self.proc = None

    def mount(self):
        os.makedirs(self.mp, exist_ok=True)
        t = time.perf_counter()
        self.proc = self._mount()
        wait_mounted(self.mp)
        return time.perf_counter() - t

    def umount(self):
        self._umount()
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def fmt(x):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def peak_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# ---- fork-write workloads (also run by forkwrite.py)

def write_fsync(path, mib):
    """`mib` MiB of zeros written sequentially to `path`, then fsync (dd)."""
    sh(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fsync"], stderr=subprocess.DEVNULL)


def small_appends(log):
    """1,000 open(O_APPEND) + write of one JSON line + close, as agents journal."""
    for i in range(1000):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, b'{"seq": %d, "event": "collect"}\n' % i)
        os.close(fd)


def open_close(path):
    """1,000 open + close of one existing file, nothing read or written: the
    cost of the kernel's round trips to a FUSE daemon, which every small
    append pays too."""
    for _ in range(1000):
        os.close(os.open(path, os.O_RDONLY))


def temp_renames(d):
    """1,000 state-file updates in directory `d`: write a temp file, rename it over."""
    os.makedirs(d, exist_ok=True)
    for i in range(1000):
        tmp = os.path.join(d, ".state.json.tmp")
        with open(tmp, "w") as f:
            f.write('{"turn": %d}\n' % i)
        os.rename(tmp, os.path.join(d, "state.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--storefs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true", help="a 10x smaller store")
    ap.add_argument("--cache-size", default="256M")
    args = ap.parse_args()
    scale = 10 if args.small else 1
    S = args.storefs
    work = tempfile.mkdtemp(prefix="storefs-bench.")
    env = dict(os.environ, STOREFS_STORE=os.path.join(work, "store"), RESTIC_PASSWORD="bench", RESTIC_REPOSITORY=os.path.join(work, "restic"))
    os.environ.update(env)
    native = os.path.join(work, "srv", "_lead_sessions", "s1-bench")
    rows = {}  # metric -> {system: seconds}
    notes = []
    cleanup = []

    def put(metric, system, value):
        rows.setdefault(metric, {})[system] = value

    try:
        print(f"bench: generating the store in {native} ...", file=sys.stderr)
        generate(native, scale)
        n_entries = sum(len(d) + len(f) for _, d, f in os.walk(native))
        size = int(sh(["du", "-sb", native], capture_output=True, text=True).stdout.split()[0])
        if not drop_caches():
            notes.append("could not drop the page cache (not root, or a container): cold numbers are warm")

        # --- snapshot and archive formats, against tar|zstd
        put("snapshot / archive", "native", best(lambda: sh(f"tar -C '{os.path.dirname(native)}' -cf - s1-bench | zstd -q -T0 -3 > '{work}/tmp.tar.zst'")))
        snap_times = []
        for i in range(RUNS):
            st = os.path.join(work, f"snapstore{i}")
            t = time.perf_counter()
            sh([S, "--store", st, "snapshot", native], stdout=subprocess.DEVNULL)
            snap_times.append(time.perf_counter() - t)
            shutil.rmtree(st)
        put("snapshot / archive", "storefs", min(snap_times))
        sh([S, "snapshot", native, "--ref", "s1"], stdout=subprocess.DEVNULL)

        archive = os.path.join(work, "s1-bench.tar.zst")
        sh(f"tar -C '{os.path.dirname(native)}' -cf - s1-bench | zstd -q -T0 -3 > '{archive}'")
        sh(["split", "-b", "64M", "-d", archive, archive + ".part"])
        digest = sh(f"cat '{archive}'.part* | sha256sum", capture_output=True, text=True).stdout.split()[0]
        extract_dir = os.path.join(work, "extract")

        def extract():
            shutil.rmtree(extract_dir, ignore_errors=True)
            os.makedirs(extract_dir)
            sh(f"zstd -q -d -c '{archive}' | tar -C '{extract_dir}' -xf -")
        put("import / extract", "native", best(extract))
        imp = []
        for i in range(RUNS):
            st = os.path.join(work, f"impstore{i}")
            t = time.perf_counter()
            sh([S, "--store", st, "import", archive + ".part00", "--sha256", digest], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            imp.append(time.perf_counter() - t)
            shutil.rmtree(st)
        put("import / extract", "storefs", min(imp))

        # --- read-only peers
        peers = []
        mp_storefs = os.path.join(work, "mnt", "storefs")
        peers.append(Peer("storefs", mp_storefs, lambda: sh([S, "mount", "s1", mp_storefs, "--cache-size", args.cache_size], stderr=subprocess.DEVNULL) and None,
                          umount=lambda: sh([S, "umount", mp_storefs], check=False)))
        if have("squashfuse") and have("mksquashfs"):
            img = os.path.join(work, "s1.sqfs")
            sh(["mksquashfs", native, img, "-comp", "zstd", "-quiet", "-no-progress"], stdout=subprocess.DEVNULL)
            mp = os.path.join(work, "mnt", "squashfuse")
            peers.append(Peer("squashfuse", mp, lambda mp=mp: sh(["squashfuse", img, mp]) and None))
        else:
            notes.append("squashfuse not installed")
        if have("ratarmount"):
            mp = os.path.join(work, "mnt", "ratarmount")
            p = Peer("ratarmount", mp, lambda mp=mp: sh(["ratarmount", archive, mp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) and None)
            p.root = os.path.join(mp, "s1-bench")  # the archive's top-level directory
            peers.append(p)
        else:
            notes.append("ratarmount not installed")
        if have("restic"):
            sh(["restic", "init", "-q"], stdout=subprocess.DEVNULL)
            sh(["restic", "backup", "-q", native], stdout=subprocess.DEVNULL)
            mp = os.path.join(work, "mnt", "restic")
            rmp = os.path.join(mp, "snapshots", "latest") + native
            def restic_mount(mp=mp):
                return subprocess.Popen(["restic", "mount", mp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            p = Peer("restic", mp, restic_mount)
            p.root = rmp
            peers.append(p)
        else:
            notes.append("restic not installed")

        def measure(system, root):
            put("walk warm", system, (walk(root), best(lambda: walk(root)))[1])
            put("walk cold", system, best(lambda: walk(root), cold=True))
            put("read all warm", system, (read_all(root), best(lambda: read_all(root)))[1])
            put("read all cold", system, best(lambda: read_all(root), cold=True))
            put("1000 random 4K reads cold", system, best(lambda: random_reads(root), cold=True))

        measure("native", native)
        for p in peers:
            try:
                put("mount", p.name, p.mount())
                cleanup.append(p)
                root = getattr(p, "root", p.mp)
                if p.name == "restic":
                    deadline = time.time() + 60
                    while not os.path.exists(root) and time.time() < deadline:
                        time.sleep(0.2)
                measure(p.name, root)
                if p.name == "storefs":
                    status = json.loads(sh([S, "status", "--json"], capture_output=True, text=True).stdout)
                    pid = next(m["pid"] for m in status if m["mountpoint"] == p.mp)
                    rss = peak_rss_kib(pid)
                    notes.append(f"storefs daemon peak RSS after the read tests: {rss / 1024:.0f} MiB (cache bound {args.cache_size})" if rss else "storefs daemon RSS unknown")
                p.umount()
                cleanup.remove(p)
            except Exception as e:  # a peer that fails is reported, not fatal
                notes.append(f"{p.name}: {e}")
                try:
                    p.umount()
                except Exception:
                    pass

        # --- archives: first and second mount of the split .tar.zst
        # A store of its own, as on a machine that has only the archive: the
        # main store already holds the same files (snapshot s1), which would
        # make the import deduplicate everything.
        mp = os.path.join(work, "mnt", "archive")
        os.makedirs(mp, exist_ok=True)
        arch_store = os.path.join(work, "archstore")
        for label in ("archive first mount", "archive second mount"):
            t = time.perf_counter()
            sh([S, "--store", arch_store, "mount", archive + ".part00", mp, "--sha256", digest], stderr=subprocess.DEVNULL)
            put(label, "storefs", time.perf_counter() - t)
            sh([S, "--store", arch_store, "umount", mp])
        if have("ratarmount"):
            mp2 = os.path.join(work, "mnt", "rat2")
            os.makedirs(mp2, exist_ok=True)
            # ratarmount keeps its index beside the archive (written when it
            # was mounted for the read tests above): remove it, or its "first"
            # mount only loads an index it built earlier.
            if os.path.exists(archive + ".index.sqlite"):
                os.remove(archive + ".index.sqlite")
            for label in ("archive first mount", "archive second mount"):
                t = time.perf_counter()
                sh(["ratarmount", archive, mp2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_mounted(mp2)
                put(label, "ratarmount", time.perf_counter() - t)
                unmount(mp2)

        # --- forks: writes against native and fuse-overlayfs
        sh([S, "fork", "s1", "--name", "bench"], stderr=subprocess.DEVNULL)
        fork_mp = os.path.join(work, "mnt", "fork")
        sh([S, "mount", "bench", fork_mp], stderr=subprocess.DEVNULL)
        cleanup.append(Peer("fork", fork_mp, None, umount=lambda: sh([S, "umount", fork_mp, "--no-commit"], check=False)))
        writers = [("native", native), ("storefs", fork_mp)]
        if have("fuse-overlayfs"):
            ovl = os.path.join(work, "mnt", "overlay")
            up, wk = os.path.join(work, "ovl-up"), os.path.join(work, "ovl-work")
            for d in (ovl, up, wk):
                os.makedirs(d, exist_ok=True)
            sh(["fuse-overlayfs", "-o", f"lowerdir={native},upperdir={up},workdir={wk}", ovl])
            cleanup.append(Peer("overlay", ovl, None))
            writers.append(("fuse-overlayfs", ovl))
        for system, root in writers:
            big = os.path.join(root, "big-write")
            put("256 MiB write + fsync", system, best(lambda: write_fsync(big, 256 // scale)))
            os.unlink(big)
            log = os.path.join(root, "native", "lead", "sessions", "appends.jsonl")
            put("1000 small appends", system, best(lambda: small_appends(log)))
            put("1000 open + close", system, best(lambda: open_close(log)))
            put("1000 temp+rename", system, best(lambda: temp_renames(os.path.join(root, "state"))))
        # commit after 1000 changed files
        changed = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(fork_mp, "workspace")) for f in fs)[:1000]
        for p in changed:
            with open(p, "a") as f:
                f.write(" ")
        t = time.perf_counter()
        sh([S, "commit", "bench", "-m", "bench"], stdout=subprocess.DEVNULL)
        put(f"commit after {len(changed)} changed files", "storefs", time.perf_counter() - t)
    finally:
        for p in reversed(cleanup):
            try:
                p.umount()
            except Exception:
                pass

    # ---------------------------------------------------------------- report
    systems = ["native", "storefs", "ratarmount", "squashfuse", "restic", "fuse-overlayfs"]
    peers_ro = ["ratarmount", "squashfuse", "restic"]
    lines = [
        f"# storefs benchmark, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        f"Store: {n_entries} entries, {size / 2**20:.0f} MiB{' (--small)' if args.small else ''}; "
        f"{os.cpu_count()} cores; best of {RUNS}; seconds.",
        "",
        "| metric | " + " | ".join(systems) + " | storefs / native | storefs / best peer |",
        "|---|" + "---|" * (len(systems) + 2),
    ]
    for metric, vals in rows.items():
        peer_vals = [vals[p] for p in peers_ro + ["fuse-overlayfs"] if vals.get(p) is not None]
        best_peer = min(peer_vals) if peer_vals else None
        lines.append(f"| {metric} | " + " | ".join(fmt(vals.get(s)) for s in systems)
                     + f" | {ratio(vals.get('storefs'), vals.get('native'))} | {ratio(vals.get('storefs'), best_peer)} |")
    lines.append("")
    for n in notes:
        lines.append(f"- {n}")
    report = "\n".join(lines) + "\n"
    print(report)
    os.makedirs(args.out, exist_ok=True)
    name = os.path.join(args.out, f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d-%H%M}{'-small' if args.small else ''}.md")
    with open(name, "w") as f:
        f.write(report)
    print(f"bench: written to {name}", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
