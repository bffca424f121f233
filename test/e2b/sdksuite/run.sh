#!/bin/sh
# E2B's own JS SDK tests (e2b-dev/E2B, packages/js-sdk/tests) against dsec: the
# tests are exported from a clone of E2B's repository into a temporary
# directory (never into this repository), their npm dependencies installed there,
# and run with vitest in two passes:
#   offline  the files in offline.txt (msw mocks, pure SDK code), no server;
#   live     every other file, against a `dsec server` started here (root, after
#            `make build`), with E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY /
#            E2B_DOMAIN pointing at it.
# The sandbox domain is served the way E2B's edge serves it: TLS (a local
# terminator with a throwaway certificate, tls-front.cjs) in front of the
# server's listener, and NAME.localhost resolving to 127.0.0.1 (localhost-dns.cjs,
# wildcard DNS for the tests' process).
#   sh test/e2b/sdksuite/run.sh E2B_GIT_DIR [COMMIT] [vitest filters...]
# SUITE=templates runs tests/template instead (Template.build against dsec's
# template builds; vitest.templates.config.mts, offline-templates.txt).
# COMMIT defaults to b8029973a (main of 2026-08-21, js-sdk 2.45.0, the newest
# release in the E2B mirror). Results: OUT (default /tmp/dsec-e2b-sdksuite)
# /offline.json, /live.json, /server.log, and a per-file table on stdout.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DSEC=${DSEC:-$ROOT/bin/dsec}
GITDIR=$1; shift
COMMIT=${1:-b8029973a}; [ $# -gt 0 ] && shift
OUT=${OUT:-/tmp/dsec-e2b-sdksuite}
WORK=$(mktemp -d /tmp/dsec-e2b-sdk.XXXXXX)
mkdir -p "$OUT"
git --git-dir="$GITDIR" archive "$COMMIT" packages/js-sdk | tar -x -C "$WORK"
SDK=$WORK/packages/js-sdk
SFX=${SUITE:+-$SUITE}
cp "$HERE/vitest${SUITE:+.$SUITE}.config.mts" "$SDK/vitest.dsec.config.mts"
# Only what the unit project needs: the browser, template-build and worker
# runtimes are not run.
(cd "$SDK" && node -e '
const fs = require("fs"), p = JSON.parse(fs.readFileSync("package.json"));
const keep = ["vitest", "dotenv", "msw", "@types/node", "error-stack-parser-es"];
p.devDependencies = Object.fromEntries(Object.entries(p.devDependencies).filter(([k]) => keep.includes(k)));
delete p.scripts.prepublishOnly;
fs.writeFileSync("package.json", JSON.stringify(p, null, 2));' &&
  npm install --no-audit --no-fund --loglevel=error >/dev/null)
OFFLINE=$(grep -v '^#' "$HERE/offline$SFX.txt")
. "$ROOT/test/lib/ports.sh"
PORT=${PORT:-$(free_ports 2)}
TLSPORT=$((PORT + 1))
TOKEN=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n') # the SDK wants e2b_ + hex
DATA=$WORK/data
mkdir "$DATA"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$WORK/tls.key" -out "$WORK/tls.crt" -days 1 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,DNS:*.localhost" 2>/dev/null
node "$HERE/tls-front.cjs" "$TLSPORT" "$PORT" "$WORK/tls.key" "$WORK/tls.crt" &
TLSPID=$!
"$DSEC" server --data-dir "$DATA" --listen "127.0.0.1:$PORT" --token "$TOKEN" --cleanup-on-exit \
  --e2b-domain "localhost:$TLSPORT" >"$DATA/server.log" 2>&1 &
PID=$!
cleanup() {
  kill "$PID" "$TLSPID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  cp "$DATA/server.log" "$OUT/server.log" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done
cd "$SDK"
status=0
if [ $# -eq 0 ]; then
  env -u E2B_DOMAIN -u E2B_API_URL -u E2B_SANDBOX_URL E2B_API_KEY="e2b_$(printf '0%.0s' $(seq 40))" \
    npx vitest run -c vitest.dsec.config.mts --reporter=default --reporter=json \
    --outputFile="$OUT/offline.json" $OFFLINE >"$OUT/offline.log" 2>&1 || status=1
fi
EXCL=""
for f in $OFFLINE; do EXCL="$EXCL --exclude $f"; done
NODE_OPTIONS="--require $HERE/localhost-dns.cjs" NODE_TLS_REJECT_UNAUTHORIZED=0 \
  E2B_API_URL="http://127.0.0.1:$PORT" E2B_SANDBOX_URL="http://127.0.0.1:$PORT" \
  E2B_API_KEY="e2b_$TOKEN" E2B_DOMAIN="localhost:$TLSPORT" \
  npx vitest run -c vitest.dsec.config.mts --reporter=default --reporter=json \
  --outputFile="$OUT/live.json" $EXCL "$@" >"$OUT/live.log" 2>&1 || status=1
node "$HERE/summarize.cjs" "$OUT"
exit $status
