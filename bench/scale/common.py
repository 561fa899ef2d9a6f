"""What the bench/scale scripts share: running a command, random files, the
small-file tree of the snapshot loops, and a mount that unmounts on exit.
python3 stdlib only."""

import os
import random
import subprocess
import sys
import tempfile

MIB = 1 << 20


def run(args, **kw):
    """Run `args`, raise on failure; stdout and stderr captured as text."""
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def write_random(path, size):
    """`size` bytes of random data (no holes, incompressible)."""
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 16 * MIB)
            f.write(os.urandom(n))
            left -= n


def make_tree(root, files, seed):
    """`files` small text files in 10 directories, the same for one seed."""
    rnd = random.Random(seed)
    for i in range(files):
        d = os.path.join(root, f"d{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w") as f:
            f.write(f"file {i} {rnd.random()}\n" * (1 + i % 40))


def many_objects_tree(root, n):
    """`n` tiny distinct files, 1,000 a directory: `n` objects in a store."""
    per = 1000
    for d in range((n + per - 1) // per):
        dd = os.path.join(root, f"d{d:04}")
        os.makedirs(dd)
        for i in range(min(per, n - d * per)):
            with open(os.path.join(dd, f"{i}"), "w") as f:
                f.write(f"{d} {i}\n")


def change(root, files, rnd, step):
    """Append to 1-3 files of a `make_tree` tree (random.Random `rnd`)."""
    for _ in range(rnd.randint(1, 3)):
        i = rnd.randrange(files)
        with open(os.path.join(root, f"d{i % 10}", f"f{i}.txt"), "a") as f:
            f.write(f"change {step} {rnd.random()}\n")


class Mount:
    """`target` of `store` mounted by `binary` at `mp`; unmounted on exit
    with `umount_args` added (a fork: `--no-commit`)."""

    def __init__(self, binary, store, target, mp, umount_args=()):
        self.b, self.store, self.target, self.mp = binary, store, target, mp
        self.umount_args = list(umount_args)

    def __enter__(self):
        os.makedirs(self.mp, exist_ok=True)
        run([self.b, "--store", self.store, "mount", self.target, self.mp])
        return self

    def __exit__(self, *exc):
        subprocess.run([self.b, "--store", self.store, "umount", self.mp, *self.umount_args],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# Forks and execs argv[2:], waits, and writes "seconds maxrss_kib exit_code" to
# the file argv[1]. A child's ru_maxrss counts the memory of the process it
# was forked from (exec records the old address space's high-water mark), so
# a command forked straight from this script would report at least this
# script's RSS: the helper, a fresh small process, forks it instead.
_PEAK_HELPER = """
import os, sys, time
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{time.perf_counter() - t} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def peak_run(cmd, **kw):
    """Run `cmd` (Popen keywords `kw`); (seconds, its own peak RSS in MiB, exit
    code, stderr)."""
    with tempfile.NamedTemporaryFile("r", prefix="storefs-peak-") as out:
        p = subprocess.run([sys.executable, "-c", _PEAK_HELPER, out.name, *cmd],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
        fields = out.read().split()
    if len(fields) != 3:
        sys.exit(f"{cmd!r}: the peak-RSS helper failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    secs, kib, rc = float(fields[0]), int(fields[1]), int(fields[2])
    return secs, kib / 1024.0, rc, p.stderr.decode(errors="replace")


def status_kib(pid, field):
    """A `/proc/PID/status` field in KiB (VmRSS, VmHWM); 0 when absent."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def mounted(mp):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mp for line in f)


def unmount(bin_, store, mp):
    """Unmount `mp` through storefs, else lazily: nothing is left mounted."""
    if mounted(mp):
        subprocess.run([bin_, "--store", store, "umount", mp], stderr=subprocess.DEVNULL)
    if mounted(mp):
        subprocess.run(["umount", "-l", mp], stderr=subprocess.DEVNULL)
