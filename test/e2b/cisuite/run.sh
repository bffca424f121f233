#!/bin/sh
# The own JS tests of @e2b/code-interpreter (e2b-dev/code-interpreter, js/tests)
# against dsec: the tests are exported from a clone of that repository into a
# temporary directory (never into this repository), their `../src` import is
# pointed at the pinned npm package (@e2b/code-interpreter 2.8.0, e2b 2.51.0)
# instead of the clone's sources, and they run with vitest against a
# `dsec server` started here (root, after `make build`; needs the
# code-interpreter-v1 image) with E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY
# as test/e2b/run.sh sets them.
#   sh test/e2b/cisuite/run.sh GIT_DIR [COMMIT] [vitest filters...]
# COMMIT defaults to 7df1757 (main of 2026-08-21, js 2.7.1, the newest in the
# mirror). Results: OUT (default /tmp/dsec-e2b-cisuite)/live.json,
# /server.log, and a per-file table on stdout.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
DSEC=${DSEC:-$ROOT/bin/dsec}
GITDIR=$1; shift
COMMIT=${1:-7df1757}; [ $# -gt 0 ] && shift
OUT=${OUT:-/tmp/dsec-e2b-cisuite}
WORK=$(mktemp -d /tmp/dsec-e2b-ci.XXXXXX)
mkdir -p "$OUT"
git --git-dir="$GITDIR" archive "$COMMIT" js | tar -x -C "$WORK"
JS=$WORK/js
rm -rf "$JS/src" && mkdir "$JS/src"
echo "export * from '@e2b/code-interpreter'" >"$JS/src/index.ts"
(cd "$JS" && node -e '
const fs = require("fs"), p = JSON.parse(fs.readFileSync("package.json"));
p.dependencies = { "e2b": "2.51.0", "@e2b/code-interpreter": "2.8.0" };
const keep = ["vitest", "dotenv", "@types/node"];
p.devDependencies = Object.fromEntries(Object.entries(p.devDependencies).filter(([k]) => keep.includes(k)));
delete p.scripts.prepublishOnly; delete p.packageManager;
fs.writeFileSync("package.json", JSON.stringify(p, null, 2));' &&
  npm install --no-audit --no-fund --loglevel=error >/dev/null)
. "$ROOT/test/lib/ports.sh"
PORT=${PORT:-$(free_ports)}
TOKEN=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n') # the SDK wants e2b_ + hex
DATA=$WORK/data
mkdir "$DATA"
"$DSEC" server --data-dir "$DATA" --listen "127.0.0.1:$PORT" --token "$TOKEN" --cleanup-on-exit >"$DATA/server.log" 2>&1 &
PID=$!
cleanup() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  cp "$DATA/server.log" "$OUT/server.log" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/v1/health" >/dev/null 2>&1 && break
  sleep 0.1
done
export E2B_API_URL="http://127.0.0.1:$PORT" E2B_SANDBOX_URL="http://127.0.0.1:$PORT" E2B_API_KEY="e2b_$TOKEN"
(cd "$JS" && npx vitest run --reporter=json --outputFile="$OUT/live.json" --maxWorkers=2 "$@" >"$OUT/vitest.log" 2>&1) || true
node "$HERE/../sdksuite/summarize.cjs" "$OUT"
