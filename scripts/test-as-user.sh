#!/usr/bin/env bash
# Every test binary as an ordinary user would run it: built without the tests
# that need root (STOREFS_ROOT_TESTS=0, in its own target dir), then run as a
# throwaway user (made here, removed on exit). Needs root (useradd, su). Prints
# each binary's summary line and the totals; exit 1 if any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
T=$(mktemp -d /tmp/storefs-as-user.XXXXXX)
U=sfs-as-user-$$
cleanup() { userdel -r "$U" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
STOREFS_ROOT_TESTS=0 CARGO_TARGET_DIR=$T cargo test --locked --no-run --message-format=json 2>/dev/null |
    python3 -c 'import sys, json
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])' >"$T/bins"
useradd -m "$U"
chmod -R o+rX "$T"
here=$(pwd)
while read -r b; do
    su "$U" -s /bin/bash -c "cd '$here' && '$b' 2>&1" | grep -E '^test result|FAILED|panicked' | sed "s|^|$(basename "$b"): |" || true
done <"$T/bins" | tee "$T/out"
python3 - "$T/out" <<'PY'
import re, sys
p = f = i = 0
for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", open(sys.argv[1]).read()):
    p, f, i = p + int(m[1]), f + int(m[2]), i + int(m[3])
print(f"as an ordinary user: {p} passed, {f} failed, {i} ignored")
sys.exit(1 if f else 0)
PY
