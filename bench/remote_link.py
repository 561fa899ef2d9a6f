#!/usr/bin/env python3
"""storefs remotes over a link with latency (issue 19, item 4). A bench, not a test.

The S3 server (s3s-fs) runs in its own network namespace,
reached from this one over a veth pair with private addresses (10.213.19.1/30 here,
10.213.19.2 there; nothing is routed beyond the pair). The link:

- rate: a `tbf` qdisc of 1 Gbit/s on both ends of the pair;
- delay: `tc netem` is what the issue asks for, but this machine's kernel has no
  sch_netem (CONFIG_NET_SCH_NETEM is not set; no modules), so the delay is a small
  TCP relay in the namespace (this script, `--relay`): every chunk read from one side
  is written to the other ONE_WAY ms later (default 10 ms each way = 20 ms RTT), in
  order, pipelined (a window of up to 16 MiB per direction in flight, so bandwidth is
  not capped by the delay); a new connection's first bytes wait 3 one-way delays (the
  TCP handshake's round trip before the request). When `tc qdisc add ... netem` works
  (`--netem auto`, the default, tries it), netem is used instead and the relay is not.

Everything (namespace, veth, qdiscs, server, relay, mounts, restic) is created by this
script and removed in `finally`, on failure too; processes are stopped by pid.

On bench.py's store (`generate()`: full size, 22,000 files; `--small` 10x smaller)
it measures, in one run, for storefs and its peers on the same server and link:

  first push; incremental push after 1,000 changed files (100 with --small);
  lazy mount until the mountpoint answers; a full `find` walk of the lazy mount;
  reading 1% of the files (seeded choice); reading the 64 MiB file (6.4 with --small);
  full pull into an empty store.

Peers: restic (backup / mount / restore, same server and link) and "download the
archive and extract it" (a .tar.zst of the tree as one object). Bytes moved are
the veth's counters (both directions) over each step. Prints a markdown table with
seconds and ratios to restic and writes it to bench/results/<date>-remote-link[-small].md.
Timings are for humans; nothing asserts on them.

    python3 bench/remote_link.py [--small] [--storefs target/release/storefs] [--rtt-ms 20]

Needs root, iproute2 (ip, tc), s3s-fs (`scripts/setup-debian.sh --bench` installs it), restic,
zstd, tar, python3-boto3 (moto's dependency in the setup).
"""
import argparse
import asyncio
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from remote import daemon_log_tail as daemon_logs, field, files_under, fmt_bytes, timed  # noqa: E402

NS = "i19b-s3link"
HOST_IF, NS_IF = "i19b-h", "i19b-s"
HOST_IP, NS_IP = "10.213.19.1", "10.213.19.2"
PORT = 9000
SERVER_PORT = 9001  # s3s-fs behind the relay, on the namespace's loopback
BUCKET = "storefs-bench"
KEY_ID, SECRET = "storefs-bench", "storefs-bench-secret"
RESTIC_PASSWORD = "storefs-bench"
SEED = 20261204
# bench.py's incompressible file (32 MiB; 3.2 with --small): the 64 MiB log compresses ~7x,
# so reading it says little about bandwidth.
RANDOM_FILE = "native/lead/blob.bin"


# ---------------------------------------------------------------- the delay relay

async def _pump(reader, writer, one_way, first_at, window=16 << 20):
    """Copy reader to writer, each chunk released `one_way` s after it arrived
    (not before `first_at`); at most `window` bytes in flight."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()
    state = {"in_flight": 0}
    room = asyncio.Event()
    room.set()

    async def read_side():
        while True:
            data = await reader.read(1 << 20)
            while state["in_flight"] >= window:
                room.clear()
                await room.wait()
            state["in_flight"] += len(data)
            queue.put_nowait((max(loop.time() + one_way, first_at), data))
            if not data:
                return

    async def write_side():
        while True:
            at, data = await queue.get()
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not data:
                try:
                    writer.write_eof()
                except OSError:
                    pass
                return
            writer.write(data)
            await writer.drain()
            state["in_flight"] -= len(data)
            room.set()

    try:
        await asyncio.gather(read_side(), write_side())
    except (ConnectionError, OSError):
        pass


def relay(listen, target, one_way_ms):
    one_way = one_way_ms / 1000.0
    lhost, lport = listen.rsplit(":", 1)
    thost, tport = target.rsplit(":", 1)

    async def handle(creader, cwriter):
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        try:
            sreader, swriter = await asyncio.open_connection(thost, int(tport))
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(
            _pump(creader, swriter, one_way, accepted + 3 * one_way),
            _pump(sreader, cwriter, one_way, 0.0),
        )
        for w in (swriter, cwriter):
            w.close()

    async def main():
        server = await asyncio.start_server(handle, lhost, int(lport), backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---------------------------------------------------------------- helpers

def sh(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, **kw)


def wait_for(pred, what, timeout=120, proc=None):
    t = time.time()
    while time.time() - t < timeout:
        try:
            if pred():
                return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what}: the process exited ({proc.returncode})")
        time.sleep(0.005)
    raise RuntimeError(f"{what}: timed out after {timeout} s")


def is_mounted(mp):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mp for line in f)


def stop(proc, timeout=20):
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- the link

class Link:
    """Namespace + veth + qdiscs + s3s-fs (+ the delay relay when netem is missing)."""

    def __init__(self, tmp, rtt_ms, rate, netem):
        self.tmp, self.rtt_ms, self.rate = tmp, rtt_ms, rate
        self.server = self.relay = None
        self.delay_by = None
        self.netem = netem
        self.logs = []

    def up(self):
        if os.path.exists(f"/run/netns/{NS}"):
            raise RuntimeError(f"network namespace {NS} exists (a bench still running, or left over: "
                               f"`ip netns del {NS}`)")
        sh(["ip", "netns", "add", NS])
        sh(["ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF, "netns", NS])
        sh(["ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF])
        sh(["ip", "link", "set", HOST_IF, "up"])
        sh(["ip", "-n", NS, "addr", "add", f"{NS_IP}/30", "dev", NS_IF])
        sh(["ip", "-n", NS, "link", "set", NS_IF, "up"])
        sh(["ip", "-n", NS, "link", "set", "lo", "up"])
        one_way = f"{self.rtt_ms / 2}ms"
        use_netem = False
        if self.netem in ("auto", "yes"):
            r = sh(["tc", "qdisc", "add", "dev", HOST_IF, "root", "netem", "delay", one_way, "rate", self.rate,
                    "limit", "100000"], check=False, capture_output=True, text=True)
            use_netem = r.returncode == 0
            if not use_netem and self.netem == "yes":
                raise RuntimeError(f"tc netem is not available here: {r.stderr.strip()}")
        if use_netem:
            sh(["ip", "netns", "exec", NS, "tc", "qdisc", "add", "dev", NS_IF, "root", "netem", "delay", one_way,
                "rate", self.rate, "limit", "100000"])
            self.delay_by = f"tc netem ({one_way} each way, rate {self.rate})"
        else:
            for prefix, dev in ((["tc"], HOST_IF), (["ip", "netns", "exec", NS, "tc"], NS_IF)):
                sh(prefix + ["qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate, "burst", "256kb",
                             "latency", "100ms"])
            self.delay_by = (f"a TCP relay in the namespace ({one_way} each way; no sch_netem in this kernel) "
                             f"+ tbf {self.rate} on both veth ends")
        root = os.path.join(self.tmp, "s3-root")
        os.makedirs(os.path.join(root, BUCKET))
        listen_port = SERVER_PORT if not use_netem else PORT
        listen_host = "127.0.0.1" if not use_netem else NS_IP
        log = open(os.path.join(self.tmp, "s3s-fs.log"), "w")
        self.logs.append(log)
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", NS, "s3s-fs", "--host", listen_host, "--port", str(listen_port),
             "--access-key", KEY_ID, "--secret-key", SECRET, root], stdout=log, stderr=subprocess.STDOUT)
        if not use_netem:
            rlog = open(os.path.join(self.tmp, "relay.log"), "w")
            self.logs.append(rlog)
            self.relay = subprocess.Popen(
                ["ip", "netns", "exec", NS, sys.executable, os.path.abspath(__file__), "--relay",
                 f"{NS_IP}:{PORT}", f"127.0.0.1:{SERVER_PORT}", str(self.rtt_ms / 2)],
                stdout=rlog, stderr=subprocess.STDOUT)
        self.endpoint = f"http://{NS_IP}:{PORT}"
        self.env = dict(os.environ, AWS_ENDPOINT_URL=self.endpoint, AWS_ALLOW_HTTP="true",
                        AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET,
                        RESTIC_PASSWORD=RESTIC_PASSWORD)
        import boto3
        from botocore.config import Config
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                                   config=Config(max_pool_connections=32))

        def answers():
            self.client.list_objects_v2(Bucket=BUCKET, MaxKeys=1)
            return True

        def alive():
            for p in (self.server, self.relay):
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"s3s-fs or the relay exited; logs in {self.tmp}")
            try:
                return answers()
            except Exception:
                return False
        wait_for(alive, "the S3 server behind the link")

    def bytes(self):
        base = f"/sys/class/net/{HOST_IF}/statistics"
        with open(f"{base}/rx_bytes") as a, open(f"{base}/tx_bytes") as b:
            return int(a.read()) + int(b.read())

    def down(self):
        stop(self.relay)
        stop(self.server)
        for f in self.logs:
            f.close()
        sh(["ip", "netns", "del", NS], check=False, stderr=subprocess.DEVNULL)
        sh(["ip", "link", "del", HOST_IF], check=False, stderr=subprocess.DEVNULL)

    def objects_under(self, prefix):
        n = size = 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            for o in page.get("Contents", []):
                n += 1
                size += o["Size"]
        return n, size


# ---------------------------------------------------------------- the measurements

class Row:
    def __init__(self):
        self.s = {}
        self.b = {}


def step(link, row, name, fn):
    before = link.bytes()
    row.s[name], out = timed(fn)
    row.b[name] = link.bytes() - before
    print(f"  {name}: {row.s[name]:.2f} s, {fmt_bytes(row.b[name])} over the link", file=sys.stderr, flush=True)
    return out


def read_files(root, files):
    total = 0
    for f in files:
        with open(os.path.join(root, f), "rb") as fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                total += len(b)
    return total


def walk(root):
    sh(["find", root, "-printf", "%s %m %u\n"], stdout=subprocess.DEVNULL)


def change_files(src, files, n):
    for f in random.Random(SEED + 1).sample(files, n):
        with open(os.path.join(src, f), "a") as fh:
            fh.write(f"\nchanged by remote_link.py {f}\n")


def storefs(bin_, store, *args, env):
    r = subprocess.run([bin_, "--store", store, *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"storefs {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def bench_storefs(link, tmp, src, bin_, changed, chosen, big, notes):
    env = link.env
    row = Row()
    url = f"s3://{BUCKET}/storefs"
    store_a = os.path.join(tmp, "sfs-a")
    storefs(bin_, store_a, "remote", "add", "link", url, env=env)
    row.s["snapshot (local)"], _ = timed(lambda: storefs(bin_, store_a, "snapshot", src, "--ref", "s1", env=env))
    step(link, row, "first push", lambda: storefs(bin_, store_a, "push", "link", "s1", env=env))
    change_files(src, changed[0], changed[1])
    row.s["snapshot 2 (local)"], _ = timed(lambda: storefs(bin_, store_a, "snapshot", src, "--ref", "s2", env=env))
    step(link, row, "incremental push", lambda: storefs(bin_, store_a, "push", "link", "s2", env=env))
    t = time.perf_counter()
    row.stored = link.objects_under("storefs/")
    pages = row.stored[0] // 1000 + 1
    notes.append(f"Listing storefs's {row.stored[0]} remote objects (boto3, {pages} LIST pages) took "
                 f"{time.perf_counter() - t:.2f} s: s3s-fs 0.14.1 walks the whole bucket directory for "
                 "every LIST page (O(objects x pages)), so a push's listing of `objects/` costs far more here "
                 "than one round trip per page on a real S3.")

    store_b = os.path.join(tmp, "sfs-b")
    mp = os.path.join(tmp, "sfs-mnt")
    os.makedirs(mp)
    storefs(bin_, store_b, "remote", "add", "link", url, env=env)
    mounted = False
    try:
        def mount():
            storefs(bin_, store_b, "mount", "link:s2", mp, env=env)
            os.stat(mp)
            os.listdir(mp)
        step(link, row, "lazy mount answers", mount)
        mounted = True
        step(link, row, "find walk", lambda: walk(mp))
        step(link, row, "read 1% of files", lambda: read_files(mp, chosen))
        step(link, row, "read the big file", lambda: read_files(mp, [big[0]]))
        step(link, row, "read the random file", lambda: read_files(mp, [RANDOM_FILE]))
    finally:
        if mounted or is_mounted(mp):
            r = subprocess.run([bin_, "--store", store_b, "umount", mp], capture_output=True, text=True)
            if r.returncode != 0:
                sh(["umount", "-l", mp], check=False)
    log = daemon_logs(store_b)
    notes.append(f"storefs lazy mount daemon at unmount: fetched_bytes={field(log, 'fetched_bytes')} "
                 f"fetched_objects={field(log, 'fetched_objects')} (walk + 1% + the two files).")

    store_c = os.path.join(tmp, "sfs-c")
    storefs(bin_, store_c, "remote", "add", "link", url, env=env)
    step(link, row, "full pull", lambda: storefs(bin_, store_c, "pull", "link", "s2", env=env))
    return row


def bench_storefs_large(link, tmp, bin_, mib):
    """Pull of large objects: a tree of one MIB MiB file of random bytes (stored
    as about MIB MiB of 1 MiB-at-most chunks), pushed, then pulled into an
    empty store; the pull's throughput of stored bytes."""
    env = link.env
    src = os.path.join(tmp, "large-src")
    os.makedirs(src)
    with open(os.path.join(src, "large.bin"), "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    a, b = os.path.join(tmp, "large-a"), os.path.join(tmp, "large-b")
    url = f"s3://{BUCKET}/storefs-large"
    storefs(bin_, a, "snapshot", src, "--ref", "large", env=env)
    storefs(bin_, a, "remote", "add", "link", url, env=env)
    storefs(bin_, a, "push", "link", "large", env=env)
    storefs(bin_, b, "remote", "add", "link", url, env=env)
    before = link.bytes()
    secs, _ = timed(lambda: storefs(bin_, b, "pull", "link", "large", env=env))
    return secs, link.bytes() - before


def bench_restic(link, tmp, src):
    env = dict(link.env)
    repo = f"s3:{link.endpoint}/{BUCKET}/restic"
    row = Row()

    def restic(*args, cache, **kw):
        e = dict(env, RESTIC_CACHE_DIR=os.path.join(tmp, cache))
        return subprocess.run(["restic", "-r", repo, "--quiet", *args], env=e, check=True,
                              stdout=subprocess.DEVNULL, **kw)

    restic("init", cache="restic-cache-a")
    step(link, row, "first push", lambda: restic("backup", "--host", "bench", src, cache="restic-cache-a"))
    # the caller changes the files between the two backups (see main)
    return row, restic


def bench_restic_rest(link, tmp, src, chosen, big, row, restic):
    step(link, row, "incremental push", lambda: restic("backup", "--host", "bench", src, cache="restic-cache-a"))
    row.stored = link.objects_under("restic/")
    mp = os.path.join(tmp, "restic-mnt")
    os.makedirs(mp)
    proc = None
    e = dict(link.env, RESTIC_CACHE_DIR=os.path.join(tmp, "restic-cache-b"))
    log = open(os.path.join(tmp, "restic-mount.log"), "w")
    latest = os.path.join(mp, "snapshots", "latest") + "/"
    inside = latest + src.lstrip("/")
    try:
        def mount():
            nonlocal proc
            proc = subprocess.Popen(["restic", "-r", f"s3:{link.endpoint}/{BUCKET}/restic", "mount", mp],
                                    env=e, stdout=log, stderr=subprocess.STDOUT)
            wait_for(lambda: is_mounted(mp) and os.listdir(inside) is not None, "restic mount", proc=proc)
        step(link, row, "lazy mount answers", mount)
        step(link, row, "find walk", lambda: walk(latest))
        step(link, row, "read 1% of files", lambda: read_files(inside, chosen))
        step(link, row, "read the big file", lambda: read_files(inside, [big[0]]))
        step(link, row, "read the random file", lambda: read_files(inside, [RANDOM_FILE]))
    finally:
        if is_mounted(mp):
            sh(["umount", mp], check=False)
            if is_mounted(mp):
                sh(["umount", "-l", mp], check=False)
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                stop(proc)
        log.close()
    dest = os.path.join(tmp, "restic-restore")
    step(link, row, "full pull", lambda: restic("restore", "latest", "--target", dest, cache="restic-cache-c"))
    return row


def bench_archive(link, tmp, src, row=None, label="first push"):
    """A .tar.zst of the tree as one object: tar | zstd, upload; later GET and extract."""
    row = row or Row()
    arc = os.path.join(tmp, "tree.tar.zst")

    def push():
        sh(f"tar -C '{src}' -cf - . | zstd -q -T0 -3 -f -o '{arc}'", shell=True)
        link.client.upload_file(arc, BUCKET, "archive/tree.tar.zst")
    step(link, row, label, push)
    return row


def bench_archive_pull(link, tmp, row):
    dest = os.path.join(tmp, "archive-extract")
    os.makedirs(dest)

    def pull():
        p = subprocess.Popen(f"zstd -q -dc | tar -C '{dest}' -xf -", shell=True, stdin=subprocess.PIPE)
        link.client.download_fileobj(BUCKET, "archive/tree.tar.zst", p.stdin)
        p.stdin.close()
        if p.wait() != 0:
            raise RuntimeError("archive extract failed")
    step(link, row, "full pull", pull)
    row.stored = link.objects_under("archive/")
    return row


def measure_link(link, tmp, big_bytes):
    """The link itself: request round trip (HEAD, median of 20) and one large GET's throughput."""
    link.client.put_object(Bucket=BUCKET, Key="probe/small", Body=b"x")
    rtts = []
    for _ in range(20):
        t = time.perf_counter()
        link.client.head_object(Bucket=BUCKET, Key="probe/small")
        rtts.append(time.perf_counter() - t)
    rtts.sort()
    path = os.path.join(tmp, "probe.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(big_bytes))
    link.client.upload_file(path, BUCKET, "probe/big")
    t = time.perf_counter()
    body = link.client.get_object(Bucket=BUCKET, Key="probe/big")["Body"]
    n = 0
    while True:
        b = body.read(1 << 20)
        if not b:
            break
        n += len(b)
    secs = time.perf_counter() - t
    link.client.delete_object(Bucket=BUCKET, Key="probe/small")
    link.client.delete_object(Bucket=BUCKET, Key="probe/big")
    return rtts[len(rtts) // 2], n / secs


# ---------------------------------------------------------------- output

METRICS = ["first push", "incremental push", "lazy mount answers", "find walk", "read 1% of files",
           "BIG", "RANDOM", "full pull"]


def table(args, link, scale_name, nfiles, tree, rows, notes, rtt, bw, n_changed, n_chosen, big_label,
          random_label):
    sfs, rst, arc = rows["storefs"], rows["restic"], rows["archive"]
    lines = [
        f"# storefs remotes over a link with latency ({datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"{scale_name} store, {os.cpu_count()} cores)",
        "",
        f"Tree: {nfiles} files, {fmt_bytes(tree)} of file bytes (bench.py `generate()`). Server: s3s-fs in a "
        f"network namespace behind a veth pair; delay by {link.delay_by}; target RTT {args.rtt_ms} ms. "
        f"Measured on the link: request round trip (HEAD, median of 20) {rtt * 1000:.1f} ms; one large GET "
        f"{bw / 1e6:.0f} MB/s. One run each, seconds; bytes: the veth's counters, both directions.",
        f"storefs: `{os.path.relpath(args.storefs, ROOT)}` at {git_head()}. restic {restic_version()}. "
        f"Incremental: {n_changed} files changed (a line appended), then `snapshot` + `push` / `restic backup`. "
        f"Reads: {n_chosen} files (seeded), then the {big_label}, then the {random_label}. Every 'pull' and 'mount' starts from an empty "
        "store / restic cache.",
        "",
        "| step | storefs s | restic s | storefs / restic | archive (.tar.zst) s | storefs bytes | restic bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {"BIG": f"read the {big_label} (compressible log)", "RANDOM": f"read the {random_label} (random bytes)"}
    for m in METRICS:
        key = {"BIG": "read the big file", "RANDOM": "read the random file"}.get(m, m)
        s, r, a = sfs.s.get(key), rst.s.get(key), arc.s.get(key)
        ratio = f"{s / r:.2f}x" if s is not None and r else "n/a"
        lines.append(
            f"| {labels.get(m, m)} | {s:.2f} | "
            f"{'n/a' if r is None else f'{r:.2f}'} | {ratio} | "
            f"{'n/a' if a is None else f'{a:.2f}'} | {fmt_bytes(sfs.b.get(key))} | {fmt_bytes(rst.b.get(key))} |")
    lines.append(f"| storefs snapshot, local (not in push) | {sfs.s['snapshot (local)']:.2f} + "
                 f"{sfs.s['snapshot 2 (local)']:.2f} | | | | | |")
    so, ss = sfs.stored
    ro, rs = rst.stored
    ao, as_ = arc.stored
    lines += [
        "",
        f"Stored on the server: storefs {so} objects, {fmt_bytes(ss)}; restic {ro} objects, {fmt_bytes(rs)}; "
        f"archive {ao} object, {fmt_bytes(as_)}.",
        f"Read 1%: storefs moved {100 * sfs.b['read 1% of files'] / ss:.2f}% of its stored bytes, "
        f"restic {100 * rst.b['read 1% of files'] / rs:.2f}% of its.",
        f"Full pull: storefs {ss / sfs.s['full pull'] / 1e6:.1f} MB/s of stored bytes, restic "
        f"{rs / rst.s['full pull'] / 1e6:.1f} MB/s (link: {bw / 1e6:.0f} MB/s on one large GET).",
        "The archive has no lazy mount: any read means the full pull (download + extract).",
    ]
    lines += notes
    lines += [
        "",
        "Targets (issue 19): first and incremental push <= 1.0x restic; lazy mount answers < 0.5 s; "
        "find walk <= 2 s (full store); read 1% moves <= 2% of stored bytes in <= 1.5x restic's time; "
        "full pull <= 1.0x restic restore and >= 80% of the link's bandwidth on large objects.",
    ]
    return "\n".join(lines) + "\n"


def git_head():
    """The last commit that changed storefs's source (src/, Cargo.*), and whether it is dirty."""
    paths = ["src", "Cargo.toml", "Cargo.lock"]
    r = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h", "--", *paths], capture_output=True, text=True)
    d = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", *paths])
    return f"source of commit {r.stdout.strip() or '?'}{' + uncommitted changes' if d.returncode else ''}"


def restic_version():
    r = subprocess.run(["restic", "version"], capture_output=True, text=True)
    return r.stdout.split()[1] if r.returncode == 0 else "?"


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--relay":
        relay(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--storefs", default=os.path.join(ROOT, "target", "release", "storefs"))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--small", action="store_true", help="bench.py's --small store (10x fewer files and bytes)")
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--netem", choices=["auto", "yes", "no"], default="auto",
                    help="delay with tc netem (auto: when the kernel has it; else the relay)")
    args = ap.parse_args()
    args.storefs = os.path.abspath(args.storefs)
    if os.geteuid() != 0:
        sys.exit("remote_link.py: run as root (network namespaces, mounts)")
    for tool in ("ip", "tc", "s3s-fs", "restic", "zstd", "tar"):
        if not shutil.which(tool):
            sys.exit(f"remote_link.py: {tool} not found; run scripts/setup-debian.sh --bench")
    if not os.path.exists(args.storefs):
        sys.exit(f"remote_link.py: no storefs binary at {args.storefs}; cargo build --release first")
    from bench import generate

    scale = 10 if args.small else 1
    tmp = tempfile.mkdtemp(prefix="i19-bench-remote-link-")
    link = Link(tmp, args.rtt_ms, args.rate, args.netem)
    try:
        src = os.path.join(tmp, "src")
        generate(src, scale)
        files = files_under(src)
        tree = sum(os.path.getsize(os.path.join(src, f)) for f in files)
        small = [f for f in files if not f.startswith("native/")]
        n_changed = 1000 // scale
        chosen = random.Random(SEED).sample(small, max(1, round(len(files) * 0.01)))
        big = ("native/lead/codex.log", f"{64 / scale:g} MiB")
        big_label = f"{big[1]} file"
        link.up()
        rtt, bw = measure_link(link, tmp, (64 << 20) // scale)
        print(f"link: {link.delay_by}; HEAD round trip {rtt * 1000:.1f} ms; large GET {bw / 1e6:.0f} MB/s",
              file=sys.stderr)
        notes = []
        # First pushes of the same tree, then the same change, then incremental pushes.
        print("storefs / restic / archive: first push", file=sys.stderr)
        r_row, restic = bench_restic(link, tmp, src)
        a_row = bench_archive(link, tmp, src)
        # bench_storefs pushes s1, changes the files, pushes s2, then mounts and pulls.
        print("storefs", file=sys.stderr)
        s_row = bench_storefs(link, tmp, src, args.storefs, (small, n_changed), chosen, big, notes)
        large_mib = 256 // scale
        secs, moved = bench_storefs_large(link, tmp, args.storefs, large_mib)
        notes.append(f"Full pull of large objects (a store of one {large_mib} MiB file of random bytes): "
                     f"{secs:.2f} s, {moved / secs / 1e6:.0f} MB/s over the link, "
                     f"{100 * moved / secs / bw:.0f}% of the large GET's {bw / 1e6:.0f} MB/s.")
        print("restic", file=sys.stderr)
        bench_restic_rest(link, tmp, src, chosen, big, r_row, restic)
        print("archive", file=sys.stderr)
        bench_archive(link, tmp, src, a_row, label="incremental push")
        bench_archive_pull(link, tmp, a_row)
        rows = {"storefs": s_row, "restic": r_row, "archive": a_row}
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"{datetime.datetime.now():%Y-%m-%d-%H%M}-remote-link"
                                      f"{'-small' if args.small else ''}.md")
        with open(path[:-3] + ".json", "w") as f:
            json.dump({k: {"seconds": r.s, "bytes": r.b, "stored": r.stored} for k, r in rows.items()}, f, indent=1)
        out = table(args, link, "--small" if args.small else "full", len(files), tree, rows, notes, rtt, bw,
                    n_changed, len(chosen), big_label, f"{32 / scale:g} MiB file")
        print(out)
        with open(path, "w") as f:
            f.write(out)
        print(f"written to {path}", file=sys.stderr)
    finally:
        with open("/proc/mounts") as f:
            for line in f:
                if line.split()[1].startswith(tmp):
                    sh(["umount", "-l", line.split()[1]], check=False)
        link.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
