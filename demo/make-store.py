#!/usr/bin/env python3
"""Generate a small agent-session store at ROOT, shaped like the real ones:
STORE.json naming its own absolute root, a native history (JSONL) that names
files by absolute path, state files, an append-only journal, an empty dir."""
import json
import os
import sys

root = os.path.abspath(sys.argv[1])
for d in ["native/lead/sessions", "state", "workspace/room/out", "audit", "checkpoints", "refs"]:
    os.makedirs(os.path.join(root, d), exist_ok=True)

def write(rel, text):
    with open(os.path.join(root, rel), "w") as f:
        f.write(text)

write("STORE.json", json.dumps({"root": root, "model": "gpt-5.6", "effort": "high",
                                "native_home": f"{root}/native/lead"}, indent=2) + "\n")
write("HEAD.json", json.dumps({"checkpoint": "after-fleet"}) + "\n")
write("state/lead.json", json.dumps({"thread": "th-0001", "turn": 12, "final": "collected 7 batches"}) + "\n")
write("state/runtime.json", json.dumps({"python": "3.11.7", "platform": "linux"}) + "\n")
write("workspace/room/out/_journal.jsonl",
      "".join(json.dumps({"seq": i, "event": "collect", "batch": i % 7}) + "\n" for i in range(500)))
write("workspace/room/out/ledger.md", "".join(f"## batch {i}\n- collected\n" for i in range(7)))
history = [
    {"type": "read", "path": f"{root}/STORE.json"},
    {"type": "read", "path": f"{root}/state/lead.json"},
    {"type": "read", "path": f"{root}/workspace/room/out/_journal.jsonl"},
    {"type": "read", "path": f"{root}/workspace/room/out/ledger.md"},
]
write("native/lead/sessions/rollout.jsonl", "".join(json.dumps(h) + "\n" for h in history))
os.symlink(f"{root}/state/lead.json", os.path.join(root, "current-lead.json"))
os.chmod(root, 0o700)
print(root)
