#!/usr/bin/env python3
"""storefs remote benchmark (issue 9, item 6). Not part of the tests.

On the seeded store of bench.py (`generate()`, the --small scale by default),
for a file:// remote and, when `moto_server` is on PATH, an S3 remote on
loopback (moto, started and stopped by pid):

- push: seconds to push the checkpoint to an empty remote;
- lazy mount + read 1% of the files (a seeded choice) from an empty store:
  bytes fetched (the daemon's `fetched_bytes=` at unmount; the root tree,
  fetched before the daemon starts, is not in it) against the checkpoint's
  total stored bytes (every remote object: the remote holds exactly this one
  checkpoint);
- full pull into an empty store against a plain parallel download of the same
  remote objects (file://: `cp -r` of the remote's objects/; S3: boto3, every
  object with 16 threads, written to files), the loopback-throughput reference.

Prints a markdown table and writes it to bench/results/<date>-remote.md.
Timings are for humans; nothing asserts on them.

    python3 bench/remote.py [--storefs target/release/storefs] [--full] [--fraction 0.01]
"""
import argparse
import datetime
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench import generate  # noqa: E402

BUCKET = "storefs-bench"


def run(storefs, store, *args, env=None):
    r = subprocess.run([storefs, "--store", store, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"storefs {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout, r.stderr


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def files_under(root):
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    return sorted(out)


def tree_bytes(root):
    return sum(os.path.getsize(os.path.join(root, f)) for f in files_under(root))


def field(text, name):
    m = re.findall(rf"{name}=(\d+)", text)
    return int(m[-1]) if m else None


def daemon_log_tail(store):
    logs = os.path.join(store, "logs")
    out = ""
    for n in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        with open(os.path.join(logs, n), errors="replace") as f:
            out += f.read()
    return out


class S3:
    """moto on a free loopback port, started and stopped by pid."""

    def __init__(self, tmp):
        self.port = free_port()
        self.log = open(os.path.join(tmp, "moto.log"), "w")
        self.proc = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, AWS_ENDPOINT_URL=self.endpoint, AWS_ALLOW_HTTP="true",
                        AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="storefs-bench",
                        AWS_SECRET_ACCESS_KEY="storefs-bench")
        import boto3
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id="storefs-bench", aws_secret_access_key="storefs-bench")
        for _ in range(200):
            try:
                self.client.create_bucket(Bucket=BUCKET)
                return
            except Exception:
                if self.proc.poll() is not None:
                    raise RuntimeError("moto_server exited")
                time.sleep(0.1)
        raise RuntimeError("moto_server did not answer")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def remote_objects_file(remote_dir):
    """(keys, stored bytes) of the remote's data: loose objects/ and packs/*.pack
    (pack indexes are listed among the keys, not counted as stored bytes)."""
    keys, stored = 0, 0
    for sub in ("objects", "packs"):
        d = os.path.join(remote_dir, sub)
        for n in os.listdir(d) if os.path.isdir(d) else []:
            keys += 1
            if not n.endswith(".idx"):
                stored += os.path.getsize(os.path.join(d, n))
    return keys, stored


def remote_objects_s3(s3, prefix):
    keys = []
    for sub in ("objects", "packs"):
        for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/{sub}/"):
            keys += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    return keys


def download_s3(s3, keys, dest):
    from concurrent.futures import ThreadPoolExecutor
    os.makedirs(dest)

    def one(key):
        body = s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        with open(os.path.join(dest, key.rsplit("/", 1)[1]), "wb") as f:
            f.write(body)
        return len(body)

    with ThreadPoolExecutor(16) as ex:
        return sum(ex.map(one, keys))


def bench_remote(a, kind, url, tmp, src, storefs, env, fraction, s3=None, prefix=None):
    row = {"remote": kind}
    # push
    run(storefs, a, "remote", "add", kind, url, env=env)
    row["push_s"], (_, err) = timed(lambda: run(storefs, a, "push", kind, "s1", env=env))
    if kind == "file":
        row["objects"], row["stored"] = remote_objects_file(url[len("file://"):])
    else:
        keys = remote_objects_s3(s3, prefix)
        row["objects"], row["stored"] = len(keys), sum(s for k, s in keys if not k.endswith(".idx"))

    # lazy mount, read a seeded 1% of the files
    b = os.path.join(tmp, f"{kind}-lazy-store")
    mp = os.path.join(tmp, f"{kind}-mnt")
    os.makedirs(mp)
    run(storefs, b, "remote", "add", kind, url, env=env)
    files = files_under(src)
    n = max(1, round(len(files) * fraction))
    chosen = random.Random(20261203).sample(files, n)
    mounted = False
    try:
        row["mount_s"], _ = timed(lambda: run(storefs, b, "mount", f"{kind}:s1", mp, env=env))
        mounted = True

        def read():
            total = 0
            for f in chosen:
                with open(os.path.join(mp, f), "rb") as fh:
                    total += len(fh.read())
            return total
        row["read_s"], row["read_bytes"] = timed(read)
    finally:
        if mounted:
            r = subprocess.run([storefs, "--store", b, "umount", mp], capture_output=True, text=True)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", mp])
    log = daemon_log_tail(b)
    row["files_read"], row["files_total"] = n, len(files)
    row["fetched_bytes"] = field(log, "fetched_bytes")
    row["fetched_objects"] = field(log, "fetched_objects")

    # full pull against a plain parallel download
    c = os.path.join(tmp, f"{kind}-pull-store")
    run(storefs, c, "remote", "add", kind, url, env=env)
    row["pull_s"], _ = timed(lambda: run(storefs, c, "pull", kind, "s1", env=env))
    dest = os.path.join(tmp, f"{kind}-plain")
    if kind == "file":
        row["ref_how"] = "cp -r objects/ packs/"
        root = url[len("file://"):]
        os.makedirs(dest)
        row["ref_s"], _ = timed(lambda: subprocess.run(
            ["cp", "-r"] + [os.path.join(root, d) for d in ("objects", "packs") if os.path.isdir(os.path.join(root, d))]
            + [dest], check=True))
    else:
        row["ref_how"] = "boto3, 16 threads"
        row["ref_s"], _ = timed(lambda: download_s3(s3, [k for k, _ in keys], dest))
    return row


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def table(rows, scale_name, tree, nfiles):
    lines = [
        f"# storefs remote benchmark ({datetime.datetime.now():%Y-%m-%d %H:%M}, {scale_name} store, "
        f"{os.cpu_count()} cores)",
        "",
        f"Tree: {nfiles} files, {fmt_bytes(tree)} of file bytes. One run each (seconds), warm page cache; "
        "remotes on this machine (file:// directory; S3 = moto on loopback).",
        "",
        "| remote | remote keys | stored bytes | push s | lazy mount s | files read (1%) | read s | "
        "fetched bytes | fetched / stored | fetched objects | full pull s | plain download s | pull / plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        frac = (f"{100 * r['fetched_bytes'] / r['stored']:.2f}%"
                if r.get("fetched_bytes") is not None else "n/a")
        lines.append(
            f"| {r['remote']} | {r['objects']} | {fmt_bytes(r['stored'])} | {r['push_s']:.2f} | "
            f"{r['mount_s']:.2f} | {r['files_read']} of {r['files_total']} ({fmt_bytes(r['read_bytes'])}) | "
            f"{r['read_s']:.2f} | {fmt_bytes(r['fetched_bytes'])} | {frac} | {r['fetched_objects']} | "
            f"{r['pull_s']:.2f} | {r['ref_s']:.2f} ({r['ref_how']}) | {r['pull_s'] / r['ref_s']:.1f}x |")
    lines += [
        "",
        "fetched bytes: the lazy mount daemon's own count at unmount (`fetched_bytes=`; the root tree, "
        "fetched before the daemon starts, is not in it). stored bytes: every object of the checkpoint "
        "on the remote (zstd frames; packs whole, their indexes not counted); remote keys: objects/ and "
        "packs/ keys (one per object before packs). Targets (issue 9): fetched / stored about the fraction of files read; "
        "pull / plain within 2x.",
    ]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--storefs", default=os.path.join(ROOT, "target", "release", "storefs"))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--full", action="store_true", help="bench.py's full-size store (default: --small, 10x smaller)")
    ap.add_argument("--fraction", type=float, default=0.01, help="share of files read through the lazy mount")
    ap.add_argument("--no-s3", action="store_true", help="skip the S3 remote even if moto_server is on PATH")
    a = ap.parse_args()
    if not os.path.exists(a.storefs):
        sys.exit(f"bench: no storefs binary at {a.storefs}; cargo build --release first")
    scale = 1 if a.full else 10
    tmp = tempfile.mkdtemp(prefix="storefs-bench-remote-")
    s3 = None
    try:
        src = os.path.join(tmp, "src")
        generate(src, scale)
        store_a = os.path.join(tmp, "a")
        run(a.storefs, store_a, "snapshot", src, "--ref", "s1")
        tree, nfiles = tree_bytes(src), len(files_under(src))
        rows = [bench_remote(store_a, "file", f"file://{tmp}/remote", tmp, src, a.storefs, None, a.fraction)]
        if not a.no_s3 and shutil.which("moto_server"):
            s3 = S3(tmp)
            prefix = f"bench-{os.getpid()}"
            rows.append(bench_remote(store_a, "s3", f"s3://{BUCKET}/{prefix}", tmp, src, a.storefs, s3.env,
                                     a.fraction, s3=s3, prefix=prefix))
        else:
            print("bench: moto_server not on PATH (or --no-s3): S3 row skipped", file=sys.stderr)
        out = table(rows, "full" if a.full else "--small", tree, nfiles)
        print(out)
        os.makedirs(a.out, exist_ok=True)
        path = os.path.join(a.out, f"{datetime.datetime.now():%Y-%m-%d-%H%M}-remote{'' if a.full else '-small'}.md")
        with open(path, "w") as f:
            f.write(out)
        print(f"written to {path}", file=sys.stderr)
    finally:
        if s3 is not None:
            s3.stop()
        with open("/proc/mounts") as f:
            for line in f:
                if line.split()[1].startswith(tmp):
                    subprocess.run(["umount", "-l", line.split()[1]])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
