# Azurite, the Azure Blob Storage emulator, on a free loopback port for the az://
# remote tests (tests/remote*.rs, RemoteKind::Azure). Sourced, not run:
#     source scripts/azurite.sh        (scripts/test.sh does, after moto has started)
# It installs azurite through npm when missing (about 30 s and 185 MB the first time;
# Debian's nodejs and npm when there is no npm), starts it in memory, creates the
# test container, exports AZURE_STORAGE_USE_EMULATOR, AZURITE_BLOB_STORAGE_URL and
# STOREFS_TEST_AZURE_CONTAINER (without which the Azure tests are skipped), and stops
# it by pid when the sourcing shell exits: its stop runs first, then whatever EXIT
# trap was set before it (an EXIT trap set after this line must call stop_azurite).

AZURITE_VERSION=3.35.0 # engines: node >= 10 (3.36 and later want node >= 22)
if ! command -v azurite-blob >/dev/null || [ "$(azurite-blob --version 2>/dev/null)" != "$AZURITE_VERSION" ]; then
    if ! command -v npm >/dev/null; then
        apt-get install -y -qq nodejs npm >/dev/null
    fi
    echo "azurite.sh: npm install -g azurite@$AZURITE_VERSION" >&2
    npm install -g --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >/dev/null
fi

AZURITE_PID=
stop_azurite() {
    if [ -n "$AZURITE_PID" ]; then
        kill "$AZURITE_PID" 2>/dev/null || true
        wait "$AZURITE_PID" 2>/dev/null || true
        AZURITE_PID=
    fi
}
# `trap -p EXIT` prints `trap -- 'COMMAND' EXIT`, shell-quoted: keep COMMAND.
eval "azurite_prev_trap=($(trap -p EXIT))"
trap "stop_azurite; ${azurite_prev_trap[2]:-}" EXIT

AZURITE_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
AZURITE_LOG=$(mktemp /tmp/storefs-azurite.XXXXXX.log)
azurite-blob --blobHost 127.0.0.1 --blobPort "$AZURITE_PORT" --inMemoryPersistence \
    --extentMemoryLimit 2048 --skipApiVersionCheck --disableTelemetry --silent \
    >"$AZURITE_LOG" 2>&1 &
AZURITE_PID=$!
export AZURE_STORAGE_USE_EMULATOR=true
export AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:$AZURITE_PORT"
export STOREFS_TEST_AZURE_CONTAINER=storefs-test
for _ in $(seq 1 150); do
    curl -s -o /dev/null "$AZURITE_BLOB_STORAGE_URL/" && break
    if ! kill -0 "$AZURITE_PID" 2>/dev/null; then
        echo "azurite.sh: azurite exited; its log:" >&2; cat "$AZURITE_LOG" >&2; exit 1
    fi
    sleep 0.2
done
# Create the container: one request signed with azurite's well-known development
# account key (Shared Key, as documented for the Blob service).
python3 - "$AZURITE_BLOB_STORAGE_URL" "$STOREFS_TEST_AZURE_CONTAINER" <<'EOF' \
    || { echo "azurite.sh: cannot create the test container; azurite log: $AZURITE_LOG" >&2; exit 1; }
import base64, email.utils, hashlib, hmac, sys, urllib.error, urllib.request
url, container = sys.argv[1].rstrip("/"), sys.argv[2]
account = "devstoreaccount1"
key = base64.b64decode(
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==")
date, version = email.utils.formatdate(usegmt=True), "2021-08-06"
# VERB, 11 empty standard headers, the x-ms- headers, then the resource (path style:
# the account twice) and its query.
to_sign = ("PUT\n" + "\n" * 11 + f"x-ms-date:{date}\nx-ms-version:{version}\n"
           + f"/{account}/{account}/{container}\nrestype:container")
sig = base64.b64encode(hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
req = urllib.request.Request(
    f"{url}/{account}/{container}?restype=container", method="PUT",
    headers={"x-ms-date": date, "x-ms-version": version,
             "Authorization": f"SharedKey {account}:{sig}"})
try:
    urllib.request.urlopen(req, timeout=30)
except urllib.error.HTTPError as e:
    if e.code != 409:  # 409: it exists already
        sys.exit(f"HTTP {e.code}: {e.read()[:300]!r}")
EOF
