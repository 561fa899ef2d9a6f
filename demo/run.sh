#!/usr/bin/env bash
# The README demo: install, build, make a small store whose JSON records absolute
# paths, snapshot it, move it away, mount the checkpoint at its origin, resume a
# "native tool" against it, unmount. Run from the repository root, as root.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup-debian.sh --demo   # fuse3, attr, python3, psmisc; no test tools
if [ ! -x target/release/storefs ]; then
    echo "demo: building storefs (release, the first time: about 650 CPU-seconds, so 6 minutes or more on 2 idle cores; longer on a busy machine)" >&2
fi
start=$(date +%s)
cargo build --release --locked
echo "demo: build took $(( $(date +%s) - start )) s" >&2
storefs="$PWD/target/release/storefs"

demo=$(mktemp -d /tmp/storefs-demo.XXXXXX)
export STOREFS_STORE="$demo/store"
origin="$demo/srv/_lead_sessions/s1-gpt56-calibration-v1"
cleanup() {
    if grep -qs " $origin fuse.storefs " /proc/mounts; then "$storefs" umount "$origin" || umount -l "$origin"; fi
    rm -rf "$demo"
}
trap cleanup EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

python3 demo/make-store.py "$origin" >/dev/null
step "storefs snapshot $origin --ref s1 -m after-fleet"
id=$("$storefs" snapshot "$origin" --ref s1 -m after-fleet)
echo "$id"

step "mv $origin $demo/moved-away"
mv "$origin" "$demo/moved-away"
step "python3 demo/native-tool.py .../rollout.jsonl   # fails: the store is not at its origin"
python3 demo/native-tool.py "$demo/moved-away/native/lead/sessions/rollout.jsonl" 2>&1 | tail -1 || true

step "storefs mount s1        # read-only, at the origin recorded in the checkpoint"
"$storefs" mount s1
step "storefs status"
"$storefs" status
step "python3 demo/native-tool.py $origin/native/lead/sessions/rollout.jsonl"
python3 demo/native-tool.py "$origin/native/lead/sessions/rollout.jsonl"
step "diff -r $demo/moved-away $origin"
diff -r --no-dereference "$demo/moved-away" "$origin" && echo "identical"
step "touch $origin/new-file   # read-only"
touch "$origin/new-file" 2>&1 || true
step "storefs log s1"
"$storefs" log s1
step "storefs umount $origin"
"$storefs" umount "$origin"
echo
echo "demo done: checkpoint $id mounted at its origin, read by a tool that uses absolute paths, unmounted."
