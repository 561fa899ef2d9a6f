#!/usr/bin/env bash
# The daemon's CPU for one workload, binary by binary (issue 42's provenance cost).
#
#   bash bench/daemon_cpu.sh [--passes N] [--workload tar|commit] BIN...
#
# tar: each BIN mounts a fork of an empty checkpoint (its own store in a temp dir),
#   then `tar -xf` of a 20,000-file tree (200 directories of 100 files of 200 B to
#   4 KB, made once in the temp dir) into a fresh directory, 3 rounds (each removed
#   after), nothing committed; per round the wall time and the daemon's user and
#   system ticks (10 ms) from /proc/PID/stat. The binaries are interleaved, N passes
#   (default 3); the medians are printed at the end.
# commit: 4 rounds of 500 new files of 100 bytes into a fork of a one-file base,
#   `storefs commit` after each (bench/scale/memory.py's case); wall time in all and
#   in the commits, N interleaved passes.
# As root (mounts). Not part of the tests; timing is for people.
set -euo pipefail
passes=3 workload=tar
while [ $# -gt 0 ]; do
    case "$1" in
        --passes) passes="$2"; shift ;;
        --workload) workload="$2"; shift ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "daemon_cpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
[ $# -gt 0 ] || { echo "daemon_cpu.sh: name at least one storefs binary (see --help)" >&2; exit 2; }
work=$(mktemp -d /tmp/storefs-daemon-cpu.XXXXXX)
mp=""
cleanup() { [ -z "$mp" ] || umount "$mp" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

if [ "$workload" = tar ]; then
    python3 - "$work/src" <<'P'
import os, random, sys
random.seed(1)
for d in range(200):
    p = f"{sys.argv[1]}/srctree/pkg{d:03}"
    os.makedirs(p)
    for f in range(100):
        with open(f"{p}/mod{f:03}.py", "wb") as fh:
            fh.write(os.urandom(random.randint(200, 4000)))
P
    tar -cf "$work/tree.tar" -C "$work/src" srctree
fi

# One binary's fork, mounted: sets $mp, $pid, $store.
mount_fork() {
    local bin=$1 t=$2
    mkdir -p "$t/base" "$t/mp"
    [ "$workload" = tar ] || echo x >"$t/base/a"
    store="$t/store"
    "$bin" --store "$store" snapshot "$t/base" --ref base >/dev/null
    "$bin" --store "$store" fork base --name f >/dev/null 2>&1
    "$bin" --store "$store" mount f "$t/mp" --cache-size 16M >/dev/null 2>&1
    mp="$t/mp"
    pid=$(pgrep -n -f -- "--store $store") || true
}
unmount() { umount "$mp"; mp=""; }
ticks() { awk '{print $14, $15}' "/proc/$pid/stat"; }

results="$work/results"
: >"$results"
for pass in $(seq "$passes"); do
    for bin in "$@"; do
        t="$work/run-$pass-$(basename "$bin")-$RANDOM"
        mount_fork "$bin" "$t"
        if [ "$workload" = tar ]; then
            for r in 1 2 3; do
                read -r u0 s0 < <(ticks); t0=$(date +%s.%N)
                mkdir "$mp/r$r"; tar -xf "$work/tree.tar" -C "$mp/r$r"
                t1=$(date +%s.%N); read -r u1 s1 < <(ticks)
                echo "$bin $(echo "$t1 - $t0" | bc) $((u1 - u0)) $((s1 - s0))" >>"$results"
                rm -rf "$mp/r$r"
            done
        else
            python3 - "$bin" "$store" "$mp" >>"$results" <<'P'
import os, subprocess, sys, time
b, store, mp = sys.argv[1:]
t0, tc = time.perf_counter(), 0.0
for r in range(4):
    d = os.path.join(mp, "rounds", f"r{r:03}")
    os.makedirs(d)
    for i in range(500):
        with open(os.path.join(d, f"f{i:05}"), "wb") as f:
            f.write(b"x" * 100)
    c0 = time.perf_counter()
    subprocess.run([b, "--store", store, "commit", "f", "-m", f"round {r}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    tc += time.perf_counter() - c0
print(b, f"{time.perf_counter() - t0:.3f}", f"{tc:.3f}")
P
        fi
        unmount
    done
done
python3 - "$results" "$workload" <<'P'
import statistics as st, sys
from collections import defaultdict
rows = defaultdict(list)
for line in open(sys.argv[1]):
    b, *v = line.split()
    rows[b].append([float(x) for x in v])
for b, v in rows.items():
    med = [st.median(x[i] for x in v) for i in range(len(v[0]))]
    if sys.argv[2] == "tar":
        print(f"{b}: {len(v)} rounds, medians: wall {med[0]:.3f} s, daemon user {med[1]:g} ticks, system {med[2]:g} ticks")
    else:
        print(f"{b}: {len(v)} passes, medians: {med[0]:.3f} s in all, commits {med[1]:.3f} s")
P
